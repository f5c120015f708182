"""NVIDIA DeepLearningExamples' PyTorch BERT checkpoints (run_pretraining's ckpt_<step>.pt, run_squad's and run_glue's
pytorch_model.bin, NGC's bert_*_qa.pt), written here as their scripts save them: modeling.py's names (`dense_act`
for the fused Linear + activation modules, the MLM decoder tied to the word embeddings, no decoder bias), the
vocabulary padded to a multiple of 8 while bert_config.json keeps the unpadded count, the training state beside the
model (optimizer state, AMP master params, the shard list, the epoch, a pickled DataLoader)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset
from typer.testing import CliRunner

transformers = pytest.importorskip("transformers")

from test_parity import batch, outputs, reference_model  # noqa: E402

from bertctl.checkpoint import build_model, load_model, read_checkpoint  # noqa: E402
from bertctl.cli import app  # noqa: E402
from bertctl.errors import BertctlError, UsageError  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(92)]  # odd_config's 97 tokens
assert len(VOCAB) == 97
PADDED = 104  # run_pretraining/run_squad/run_glue: 97 rounded up to a multiple of 8
RAN: list[str] = []  # what unpickling a training object ran; bertctl must leave it empty


def _record(what: str) -> str:
    RAN.append(what)
    return what


class Shard(Dataset):
    """run_pretraining's pretraining_dataset: numpy arrays read from an HDF5 shard."""

    def __init__(self) -> None:
        self.inputs = [np.arange(12, dtype=np.int32).reshape(3, 4), np.zeros((3, 2), np.int64)]

    def __len__(self) -> int:
        return 3

    def __getitem__(self, index: int) -> list[np.ndarray]:
        return [x[index] for x in self.inputs]

    def __setstate__(self, state: dict) -> None:
        RAN.append("Shard.__setstate__")
        self.__dict__.update(state)


class WorkerInit:
    """run_pretraining's WorkerInitObj; its pickle calls a function when loaded."""

    def __call__(self, worker: int) -> None:
        pass

    def __reduce__(self):
        return _record, ("WorkerInit",)


def nvidia_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """transformers' weights under modeling.py's names, the decoder the same tensor as the word embeddings."""
    out = {}
    for key, tensor in state.items():
        if key.endswith(("position_ids", "token_type_ids")) or key == "cls.predictions.decoder.bias":
            continue
        for module in ("intermediate.dense.", "pooler.dense.", "transform.dense."):
            key = key.replace(module, module.replace("dense.", "dense_act."))
        out[key] = tensor.detach().clone()
    if "cls.predictions.decoder.weight" in out:
        out["cls.predictions.decoder.weight"] = out["bert.embeddings.word_embeddings.weight"]
    return out


def training_state(model: torch.nn.Module) -> dict:
    """What run_pretraining saves beside `model`: LAMB/Adam state, AMP's fp32 master params, the shard list, the
    epoch, the DataLoader of the shard being read."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    next(iter(model(input_ids=torch.tensor([[2, 7, 3]])).values())).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
    loader = DataLoader(Shard(), batch_size=2, num_workers=0, worker_init_fn=WorkerInit(), pin_memory=False)
    return {"optimizer": optimizer.state_dict(), "master params": [p.detach().clone() for p in model.parameters()],
            "files": [1, "shard_0.hdf5", "shard_1.hdf5"], "epoch": 2, "data_loader": loader}


def nvidia_folder(folder, reference, weights_name="ckpt_300.pt", container=True, extra=None, prefix="",
                  config_vocab=97):
    """bert_config.json (Google's field names, the unpadded vocab_size unless run_squad/run_glue wrote it), vocab.txt,
    one checkpoint."""
    folder.mkdir(parents=True, exist_ok=True)
    state = {prefix + k: v for k, v in nvidia_names(reference.state_dict()).items()}
    torch.save({"model": state, **(extra or {})} if container else state, folder / weights_name)
    keys = ("attention_probs_dropout_prob", "hidden_act", "hidden_dropout_prob", "hidden_size", "initializer_range",
            "intermediate_size", "max_position_embeddings", "num_attention_heads", "num_hidden_layers",
            "type_vocab_size")
    config = {k: getattr(reference.config, k) for k in keys}
    (folder / "bert_config.json").write_text(json.dumps({**config, "vocab_size": config_vocab}))
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return folder


def padded(odd_config):
    return odd_config.replace(vocab_size=PADDED)


def max_diff(name, model, reference, odd_config):
    ids, types, mask_ = batch(odd_config)
    with torch.no_grad():
        expected = outputs(name, reference(input_ids=ids, token_type_ids=types, attention_mask=mask_))
        theirs = isinstance(model, transformers.PreTrainedModel)
        got = outputs(name, model(input_ids=ids, token_type_ids=types, attention_mask=mask_) if theirs else
                      model(ids, types, mask_))
    return max((g - e).abs().max().item() for e, g in zip(expected, got, strict=True))


def cli(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


# ------------------------------------------------------------------------------------------------------ tests


def test_run_pretraining_checkpoint_gives_transformers_outputs_and_runs_no_pickled_code(odd_config, tmp_path):
    """ckpt_<step>.pt with training state and a pickled DataLoader: MLM and NSP logits equal transformers' on the
    same weights (padded vocabulary), the highest step of several is read, no object's code runs, and convert writes
    a folder transformers loads to the same numbers."""
    reference = reference_model("BertForPreTraining", padded(odd_config))
    older = reference_model("BertForPreTraining", padded(odd_config))
    with torch.no_grad():
        older.bert.embeddings.word_embeddings.weight.add_(1.0)
    folder = nvidia_folder(tmp_path / "run", older, "ckpt_200.pt", extra=training_state(older))
    nvidia_folder(folder, reference, "ckpt_1000.pt", extra=training_state(reference))
    RAN.clear()
    ckpt = read_checkpoint(folder)
    assert RAN == []
    assert ckpt.weights_file == "ckpt_1000.pt" and ckpt.from_nvidia and ckpt.config.vocab_size == PADDED
    assert ckpt.architecture == "BertForPreTraining" and ckpt.parts == {"mlm", "nsp", "pooler"}
    assert max_diff("BertForPreTraining", load_model(folder).eval(), reference, odd_config) == 0

    summary = json.loads(cli("info", "--json", folder).stdout)
    assert summary["format"] == "nvidia (DeepLearningExamples)" and summary["vocab_size"] == PADDED
    assert summary["tokenizer"]["vocab_size"] == len(VOCAB) and summary["heads"] == ["mlm", "nsp"]
    result = cli("convert", folder, "-o", tmp_path / "out")
    assert result.exit_code == 0, result.output
    converted = transformers.BertForPreTraining.from_pretrained(tmp_path / "out").eval()
    assert max_diff("BertForPreTraining", converted, reference, odd_config) == 0
    result = cli("fill", "-m", folder, "--json", "w3 [MASK] w5")
    assert result.exit_code == 0, result.output
    assert RAN == []


def test_fill_ranks_nvidias_padded_rows_as_transformers_pipeline_does(odd_config, tmp_path):
    """The 7 spare rows take part in the softmax (docs/fill.md): ids and scores are the fill-mask pipeline's on the
    converted folder."""
    from bertctl.fill import fill

    reference = reference_model("BertForMaskedLM", padded(odd_config))
    with torch.no_grad():
        reference.cls.predictions.bias[len(VOCAB):] += 3.0  # spare rows compete, as undertrained ones may
    folder = nvidia_folder(tmp_path / "mlm", reference)
    assert cli("convert", folder, "-o", tmp_path / "out").exit_code == 0
    pipe = transformers.pipeline("fill-mask", model=str(tmp_path / "out"), tokenizer=str(tmp_path / "out"))
    (result,) = fill(["w3 [MASK] w5"], folder, top_k=PADDED)
    expected = pipe("w3 [MASK] w5", top_k=PADDED)
    assert [p.token_id for p in result.predictions[0]] == [w["token"] for w in expected]
    assert max(abs(p.score - w["score"]) for p, w in zip(result.predictions[0], expected, strict=True)) < 1e-6
    assert any(p.token_id >= len(VOCAB) for p in result.predictions[0][:5])


@pytest.mark.parametrize("half", [False, True])
def test_ngc_question_answering_checkpoint_with_a_ddp_prefix(odd_config, tmp_path, half):
    """NGC's bert_large_qa.pt / run_squad's output: {"model": state_dict} (here saved from a DDP wrapper, `module.`
    names; and AMP O2's fp16 weights, upcast)."""
    reference = reference_model("BertForQuestionAnswering", padded(odd_config))
    if half:
        with torch.no_grad():
            for param in reference.parameters():
                param.copy_(param.half().float())
        reference.half()
    folder = nvidia_folder(tmp_path / "qa", reference, "bert_large_qa.pt", prefix="module.")
    reference.float()
    ckpt = read_checkpoint(folder)
    assert ckpt.architecture == "BertForQuestionAnswering" and ckpt.stored_dtype == ("float16" if half else "float32")
    assert max_diff("BertForQuestionAnswering", load_model(folder).eval(), reference, odd_config) == 0


def test_an_older_run_squads_bare_state_dict_saved_from_a_ddp_wrapper_is_read_as_nvidias(odd_config, tmp_path):
    """Older run_squad.py saved the bare state dict as pytorch_model.bin; from a DDP wrapper every name starts with
    `module.` (so no name starts as NVIDIA's fused ones do), which alone says whose file it is."""
    reference = reference_model("BertForQuestionAnswering", padded(odd_config))
    folder = nvidia_folder(tmp_path / "qa", reference, "pytorch_model.bin", container=False, prefix="module.",
                           config_vocab=PADDED)
    assert read_checkpoint(folder).from_nvidia
    assert max_diff("BertForQuestionAnswering", load_model(folder).eval(), reference, odd_config) == 0


def test_run_glue_output_folder_is_a_classifier(odd_config, tmp_path):
    """run_glue.py's output: pytorch_model.bin holding {"model": state_dict}, and the bert_config.json it writes
    (the padded vocab_size, no id2label); evaluate and finetune take it."""
    reference = reference_model("BertForSequenceClassification", padded(odd_config), num_labels=3)
    folder = nvidia_folder(tmp_path / "glue", reference, "pytorch_model.bin", config_vocab=PADDED)
    ckpt = read_checkpoint(folder)
    assert ckpt.from_nvidia and ckpt.architecture == "BertForSequenceClassification" and ckpt.num_labels == 3
    assert max_diff("BertForSequenceClassification", load_model(folder).eval(), reference, odd_config) == 0
    assert json.loads(cli("info", "--json", folder).stdout)["format"] == "nvidia (DeepLearningExamples)"
    data = tmp_path / "dev.csv"
    data.write_text("text,label\n" + "".join(f"w{i} w{i + 1},{i % 3}\n" for i in range(9)))
    result = cli("evaluate", "classify", "-m", folder, "--data", data, "--text-columns", "text", "--json")
    assert result.exit_code == 0, result.output
    result = cli("finetune", "classify", "--model", folder, "--train", data, "--text-columns", "text",
                 "--out", tmp_path / "ft", "--epochs", "1", "--batch-size", "8", "--max-seq-length", "16")
    assert result.exit_code == 0, result.output



def test_a_run_glue_mnli_classifier_is_scored_in_its_processors_label_order(odd_config, tmp_path, caplog):
    """NVIDIA's MnliProcessor, like Google's, outputs contradiction, entailment, neutral, and run_glue saves no
    id2label: scored in GLUE's order its accuracy would be silently wrong; convert says so too."""
    from bertctl.data.glue import get_task
    from bertctl.evaluate import label_order

    reference = reference_model("BertForSequenceClassification", padded(odd_config), num_labels=3)
    folder = nvidia_folder(tmp_path / "mnli", reference, "pytorch_model.bin", config_vocab=PADDED)
    ckpt = read_checkpoint(folder)
    assert label_order(ckpt, 3, get_task("mnli"), folder) == [1, 2, 0]
    assert "NVIDIA classifier without id2label; its outputs are taken in run_glue.py's order for mnli" in caplog.text
    result = cli("convert", folder, "--out", tmp_path / "converted")
    assert result.exit_code == 0 and "for MNLI run_glue.py's is contradiction, entailment, neutral" in result.output

def test_an_older_run_squad_output_holding_the_bare_state_dict(odd_config, tmp_path):
    """Older run_squad.py saved model.state_dict() itself as pytorch_model.bin: told from transformers' by its
    `dense_act` names."""
    reference = reference_model("BertForQuestionAnswering", padded(odd_config))
    folder = nvidia_folder(tmp_path / "squad", reference, "pytorch_model.bin", container=False, config_vocab=PADDED)
    assert read_checkpoint(folder).from_nvidia
    assert max_diff("BertForQuestionAnswering", load_model(folder).eval(), reference, odd_config) == 0


def test_pretrain_init_from_builds_on_the_checkpoints_weights(odd_config, tmp_path):
    """pretrain --init-from builds its model with share_weights from the checkpoint: the weights must be there,
    not fresh, and writable (copied out of the memory-mapped file)."""
    reference = reference_model("BertForPreTraining", padded(odd_config))
    folder = nvidia_folder(tmp_path / "run", reference, extra=training_state(reference))
    model = build_model(read_checkpoint(folder), "BertForPreTraining", share_weights=True)
    assert model.fresh_heads == ()
    assert max_diff("BertForPreTraining", model.eval(), reference, odd_config) == 0
    with torch.no_grad():
        for param in model.parameters():
            param.add_(1.0)
    assert max_diff("BertForPreTraining", load_model(folder).eval(), reference, odd_config) == 0  # file untouched


def test_nvidias_inference_gelu_is_within_1e6_of_the_exact_gelu_bertctl_computes():
    """The older modeling.py's bias_gelu divides by 1.41421 (inference, ONNX export); its training uses F.gelu, as
    bertctl does: 7.4e-7 apart at most (float64), 1.2e-6 in float32 (where rounding adds its part), as
    docs/checkpoints.md says."""
    x = torch.linspace(-12, 12, 200_001, dtype=torch.float64)
    nvidia = x * 0.5 * (1.0 + torch.erf(x / 1.41421))
    exact = x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2)))
    assert 7e-7 < (nvidia - exact).abs().max().item() < 8e-7
    x = x.float()
    nvidia = x * 0.5 * (1.0 + torch.erf(x / 1.41421))
    assert (nvidia - torch.nn.functional.gelu(x)).abs().max().item() <= 1.2e-6


def test_a_config_json_gives_the_tanh_gelu_of_nvidias_current_recipe(odd_config, tmp_path):
    """The current modeling.py computes F.gelu(x, approximate=True) for "gelu" (NGC PyTorch 21.11: the tanh
    approximation): a config.json beside bert_config.json with gelu_pytorch_tanh, as docs/checkpoints.md advises,
    gives those numbers exactly, keeps the padded vocabulary, and convert writes it; NVIDIA's "gelu" alone does not."""
    reference = reference_model("BertForPreTraining", padded(odd_config).replace(hidden_act="gelu_pytorch_tanh"))
    folder = nvidia_folder(tmp_path / "run", reference)
    config = json.loads((folder / "bert_config.json").read_text())
    (folder / "bert_config.json").write_text(json.dumps({**config, "hidden_act": "gelu"}))  # what NVIDIA ships
    assert max_diff("BertForPreTraining", load_model(folder).eval(), reference, odd_config) > 1e-5
    (folder / "config.json").write_text(json.dumps({**config, "hidden_act": "gelu_pytorch_tanh"}))
    assert max_diff("BertForPreTraining", load_model(folder).eval(), reference, odd_config) == 0
    result = cli("convert", folder, "-o", tmp_path / "out")
    assert result.exit_code == 0, result.output
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["hidden_act"] == "gelu_pytorch_tanh" and written["vocab_size"] == PADDED
    docs = (Path(__file__).resolve().parent.parent / "docs" / "checkpoints.md").read_text()
    assert "approximate=True" in docs and '"hidden_act": "gelu_pytorch_tanh"' in docs


def test_a_pickled_object_inside_the_model_entry_is_one_line(odd_config, tmp_path):
    reference = reference_model("BertForMaskedLM", padded(odd_config))
    folder = nvidia_folder(tmp_path / "obj", reference)
    state = torch.load(folder / "ckpt_300.pt", weights_only=True)
    state["model"]["bert.extra"] = WorkerInit()
    torch.save(state, folder / "ckpt_300.pt")
    RAN.clear()
    result = cli("info", folder)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert "its `model` entry holds pickled objects, not tensors: bert.extra (a pickled " in result.stderr
    assert RAN == []


def test_objects_in_a_legacy_file_or_from_blocked_modules_are_refused_unrun(odd_config, tmp_path):
    """A pre-1.6 (non-zip) file cannot be scanned: an object in it is refused, saying what to do; a global of a
    blocked module (os, sys) is refused whatever the format."""
    reference = reference_model("BertForMaskedLM", padded(odd_config))
    folder = nvidia_folder(tmp_path / "legacy", reference)
    state = nvidia_names(reference.state_dict())
    torch.save({"model": state, "worker_init": WorkerInit()}, folder / "ckpt_300.pt",
               _use_new_zipfile_serialization=False)
    RAN.clear()
    result = cli("info", folder)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert "it holds a pickled object bertctl does not run" in result.stderr and "weights_only=False" in result.stderr
    torch.save({"model": state, "hook": Blocked()}, folder / "ckpt_300.pt")
    result = cli("info", folder)
    assert result.exit_code == 2 and "is blocked" in result.stderr, result.output
    assert RAN == []


class Blocked:
    def __reduce__(self):
        return os.getcwd, ()


def test_unknown_parameters_are_named(odd_config, tmp_path):
    reference = reference_model("BertForPreTraining", padded(odd_config))
    extra = {"model": {**nvidia_names(reference.state_dict()),
                       "bert.encoder.layer.0.attention.dense_act.weight": torch.zeros(3)}}
    folder = nvidia_folder(tmp_path / "x", reference)
    torch.save(extra, folder / "ckpt_300.pt")
    with pytest.raises(BertctlError, match=r"unexpected parameters bert\.encoder\.layer\.0\.attention\.dense_act\."):
        read_checkpoint(folder)


def test_several_checkpoints_or_none_of_the_config_say_what_to_do(odd_config, tmp_path):
    reference = reference_model("BertForMaskedLM", padded(odd_config))
    folder = nvidia_folder(tmp_path / "two", reference, "bert_base_qa.pt")
    nvidia_folder(folder, reference, "bert_large_qa.pt")
    with pytest.raises(UsageError, match=r"holds 2 PyTorch checkpoints \(bert_base_qa\.pt, bert_large_qa\.pt\)"):
        read_checkpoint(folder)
    (folder / "bert_base_qa.pt").unlink()
    torch.save({"state": {}, "param_groups": [{"lr": 0.1}]}, folder / "bert_large_qa.pt")  # an optimizer.pt
    with pytest.raises(BertctlError, match=r"bert_large_qa\.pt: no model weights in it \(.* it holds state, param_"):
        read_checkpoint(folder)
    (folder / "bert_config.json").unlink()
    result = cli("info", folder)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert "holds an NVIDIA checkpoint (bert_large_qa.pt) but no bert_config.json" in result.stderr


def test_a_vocab_size_that_is_not_nvidias_padding_is_still_refused(odd_config, tmp_path):
    """Only rounding up to the next multiple of 8 is NVIDIA's padding; other mismatches blame bert_config.json."""
    reference = reference_model("BertForMaskedLM", padded(odd_config))
    folder = nvidia_folder(tmp_path / "x", reference, config_vocab=90)
    with pytest.raises(UsageError, match=r"bert_config\.json says vocab_size 90"):
        read_checkpoint(folder)


def test_a_transformers_folder_with_padded_rows_is_refused(odd_config, tmp_path):
    """Only NVIDIA's checkpoints are read with their padding: transformers refuses its own folder whose embeddings
    do not match config.json, and so does bertctl."""
    reference_model("BertModel", padded(odd_config)).save_pretrained(tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**config, "vocab_size": odd_config.vocab_size}))
    with pytest.raises(RuntimeError, match="ignore_mismatched_sizes"):
        transformers.BertModel.from_pretrained(tmp_path / "hf")
    with pytest.raises(UsageError, match=f"config.json says vocab_size {odd_config.vocab_size}, hidden_size"):
        read_checkpoint(tmp_path / "hf")


def test_a_bare_encoders_padded_rows_are_read_as_its_vocabulary(odd_config, tmp_path):
    """An encoder saved alone has no `bert.` prefix; its padded embeddings are NVIDIA's padding all the same."""
    reference = reference_model("BertModel", padded(odd_config))
    ckpt = read_checkpoint(nvidia_folder(tmp_path / "x", reference))
    assert ckpt.config.vocab_size == PADDED
    assert max_diff("BertModel", build_model(ckpt).eval(), reference, odd_config) <= 1e-5


def test_a_run_swag_checkpoint_is_read_as_multiple_choice_given_its_architecture(odd_config, tmp_path):
    """run_swag.py's one-output `classifier` has the shape of a one-label classifier (a regression) and NVIDIA writes
    no class name: a config.json naming BertForMultipleChoice, as docs/checkpoints.md says, reads it as the choice
    model it is, with run_swag's numbers."""
    reference = reference_model("BertForMultipleChoice", padded(odd_config))
    folder = nvidia_folder(tmp_path / "swag", reference, weights_name="pytorch_model.bin", container=False,
                           config_vocab=PADDED)
    assert type(load_model(folder)).__name__ == "BertForSequenceClassification"  # what the weights alone say
    config = json.loads((folder / "bert_config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "architectures": ["BertForMultipleChoice"]}))
    model = load_model(folder).eval()
    ids, types, mask = (t.view(1, 3, -1) for t in batch(odd_config))
    with torch.no_grad():
        expected = reference(input_ids=ids, token_type_ids=types, attention_mask=mask).logits
        got = model(ids, types, mask).logits
    assert type(model).__name__ == "BertForMultipleChoice" and (got - expected).abs().max().item() < 1e-5
    assert cli("convert", folder, "-o", tmp_path / "out").exit_code == 0
    assert json.loads((tmp_path / "out" / "config.json").read_text())["architectures"] == ["BertForMultipleChoice"]
    docs = (Path(__file__).resolve().parent.parent / "docs" / "checkpoints.md").read_text()
    assert '"architectures": ["BertForMultipleChoice"]' in docs
