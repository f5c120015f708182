"""Model folders both ways with transformers, every legacy flavour, strict loading, convert and info."""

from __future__ import annotations

import json
import re
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

transformers = pytest.importorskip("transformers")

from bertctl.checkpoint import load_model, read_checkpoint, save_model  # noqa: E402
from bertctl.cli import app  # noqa: E402
from bertctl.errors import UsageError  # noqa: E402
from bertctl.model import BertForPreTraining  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


def hf_pretraining_folder(odd_config, folder):
    torch.manual_seed(0)
    model = transformers.BertForPreTraining(transformers.BertConfig(**odd_config.to_dict())).eval()
    model.save_pretrained(folder)
    return model


def inputs(odd_config):
    ids = torch.randint(1, odd_config.vocab_size, (2, 11), generator=torch.Generator().manual_seed(3))
    return ids, torch.zeros_like(ids), torch.ones_like(ids)


def test_real_minilm_encoder_gives_transformers_hidden_states(minilm):
    ours = load_model(minilm).eval()
    assert type(ours).__name__ == "BertEncoderModel" and ours.bert.pooler is not None
    reference = transformers.BertModel.from_pretrained(minilm).eval()
    ids = torch.tensor([[101, 7592, 1010, 2088, 999, 102, 0, 0], [101, 2023, 2003, 1037, 3231, 1012, 2182, 102]])
    mask = (ids != 0).long()
    with torch.no_grad():
        expected = reference(input_ids=ids, attention_mask=mask).last_hidden_state
        got = ours(ids, None, mask).hidden_states
    assert (got - expected).abs().max().item() < 1e-5


def test_shared_weights_are_the_checkpoints_tensors_and_copies_are_not(odd_config, tmp_path):
    """fill/evaluate/pretrain --init-from hold the weights once (the model's parameters are the checkpoint's
    tensors); finetune builds one model per seed from one checkpoint, so its model must own copies: training
    seed 1 must not move the weights seed 2 starts from."""
    from bertctl.checkpoint import build_model

    hf_pretraining_folder(odd_config, tmp_path / "hf")
    for half in (False, True):  # an fp16 file is upcast before it is shared
        if half:
            state = load_file(tmp_path / "hf" / "model.safetensors")
            save_file({k: v.half() for k, v in state.items()}, tmp_path / "hf" / "model.safetensors",
                      metadata={"format": "pt"})
        ckpt = read_checkpoint(tmp_path / "hf")
        word = ckpt.state["bert.embeddings.word.weight"]
        shared = build_model(ckpt, "BertForMaskedLM", share_weights=True)
        assert shared.bert.embeddings.word.weight.data_ptr() == word.data_ptr()
        assert all(p.dtype == torch.float32 and p.requires_grad for p in shared.parameters())
        copied = build_model(ckpt, "BertForSequenceClassification", num_labels=2)
        before = word.clone()
        with torch.no_grad():
            copied.bert.embeddings.word.weight.add_(1.0)
        assert torch.equal(word, before)


def test_pytorch_bin_without_prefix_with_legacy_names(odd_config, tmp_path):
    reference = hf_pretraining_folder(odd_config, tmp_path / "hf")
    state = load_file(tmp_path / "hf" / "model.safetensors")
    legacy = {}
    for key, tensor in state.items():
        key = key.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
        legacy[key] = tensor.clone()
    legacy["bert.embeddings.position_ids"] = torch.arange(odd_config.max_position_embeddings)[None]
    legacy["cls.predictions.decoder.weight"] = legacy["bert.embeddings.word_embeddings.weight"].clone()
    (tmp_path / "hf" / "model.safetensors").unlink()
    torch.save(legacy, tmp_path / "hf" / "pytorch_model.bin")
    ours = load_model(tmp_path / "hf").eval()
    ids, types, mask = inputs(odd_config)
    with torch.no_grad():
        expected = reference(input_ids=ids, token_type_ids=types, attention_mask=mask).prediction_logits
        assert torch.allclose(ours(ids, types, mask).logits, expected, atol=1e-5)


def test_bare_encoder_names_load(odd_config, tmp_path):
    torch.manual_seed(1)
    transformers.BertModel(transformers.BertConfig(**odd_config.to_dict())).save_pretrained(tmp_path / "bare")
    ckpt = read_checkpoint(tmp_path / "bare")
    assert ckpt.architecture == "BertModel" and ckpt.parts == {"pooler"}


def test_unexpected_and_missing_parameters_are_named(odd_config, tmp_path):
    hf_pretraining_folder(odd_config, tmp_path / "hf")
    path = tmp_path / "hf" / "model.safetensors"
    state = load_file(path)
    state["bert.encoder.layer.0.attention.self.rotary.weight"] = torch.zeros(2)
    save_file(state, path, metadata={"format": "pt"})
    with pytest.raises(Exception, match="rotary"):
        read_checkpoint(tmp_path / "hf")
    del state["bert.encoder.layer.0.attention.self.rotary.weight"]
    del state["bert.encoder.layer.1.output.dense.weight"]
    save_file(state, path, metadata={"format": "pt"})
    with pytest.raises(Exception, match=r"missing encoder parameter bert\.encoder\.layer\.1\.output\.dense\.weight"):
        load_model(tmp_path / "hf")


@pytest.mark.parametrize(("dropped", "named"), [
    (["bert.encoder.layer.1.output.dense.weight"], "parameter bert.encoder.layer.1.output.dense.weight ("),
    (["bert.encoder.layer.2.attention.self.key.bias"], "parameter bert.encoder.layer.2.attention.self.key.bias ("),
    (["bert.embeddings.LayerNorm.weight", "bert.encoder.layer.0.attention.self.query.weight",
      "bert.encoder.layer.0.attention.self.value.weight"], "parameters bert.embeddings.LayerNorm.weight, "
     "bert.encoder.layer.0.attention.self.query.weight, bert.encoder.layer.0.attention.self.value.weight ("),
])
def test_info_refuses_a_missing_encoder_parameter_naming_file_and_name(odd_config, tmp_path, dropped, named):
    """Strict already when reading, so `info` (which builds no model) refuses it like fill and convert do."""
    hf_pretraining_folder(odd_config, tmp_path / "hf")
    path = tmp_path / "hf" / "model.safetensors"
    state = load_file(path)
    save_file({k: t for k, t in state.items() if k not in dropped}, path, metadata={"format": "pt"})
    result = CliRunner().invoke(app, ["info", str(tmp_path / "hf")])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == f"bertctl: error: {path}: missing encoder {named}is the file complete? " \
        "re-download or re-save it)"


def test_optional_parts_may_be_absent_from_an_encoder_file(odd_config, tmp_path):
    """Pooler, heads and the position_ids/token_type_ids buffers are optional; a bare file is named bare."""
    torch.manual_seed(1)
    transformers.BertModel(transformers.BertConfig(**odd_config.to_dict())).save_pretrained(tmp_path / "bare")
    path = tmp_path / "bare" / "model.safetensors"
    state = load_file(path)
    save_file({k: t for k, t in state.items() if not k.startswith("pooler.")}, path, metadata={"format": "pt"})
    assert read_checkpoint(tmp_path / "bare").parts == frozenset()
    del state["encoder.layer.2.output.LayerNorm.bias"]
    save_file(state, path, metadata={"format": "pt"})
    with pytest.raises(Exception, match=r"model\.safetensors: missing encoder parameter "
                                        r"encoder\.layer\.2\.output\.LayerNorm\.bias \("):
        read_checkpoint(tmp_path / "bare")


@pytest.mark.parametrize("layers", [2, 4])
def test_a_config_with_another_layer_count_is_blamed(odd_config, tmp_path, layers):
    """Too few layers in config.json would drop the rest unread; too many would look like a truncated file."""
    hf_pretraining_folder(odd_config, tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**config, "num_hidden_layers": layers}))
    result = CliRunner().invoke(app, ["info", str(tmp_path / "hf")])
    assert result.exit_code == 2
    assert f"says num_hidden_layers {layers}, but the weights hold 3 layers; fix config.json" in result.stderr


@pytest.mark.parametrize(("key", "said"), [
    ("vocab_size", "vocab_size 30522 (not set: the default)"),
    ("max_position_embeddings", "max_position_embeddings 512 (not set: the default)"),
    ("intermediate_size", "intermediate_size 3072 (not set: the default), hidden_size 48"),
])
def test_a_config_missing_a_shape_field_is_blamed_not_the_tokenizer(odd_config, tmp_path, key, said):
    hf_pretraining_folder(odd_config, tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    del config[key]
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    result = CliRunner().invoke(app, ["info", str(tmp_path / "hf")])
    assert result.exit_code == 2 and said in result.stderr and "fix config.json" in result.stderr


def test_absent_head_is_created_fresh_and_unused_heads_are_dropped(odd_config, tmp_path):
    hf_pretraining_folder(odd_config, tmp_path / "hf")
    model = load_model(tmp_path / "hf", "BertForSequenceClassification", num_labels=3)
    assert model.fresh_heads == ("classifier",)
    assert model.classifier.weight.shape == (3, odd_config.hidden_size)


def test_a_classifier_folder_loads_as_question_answering_with_a_fresh_two_output_head(odd_config, tmp_path):
    """A classifier's num_labels (3 for MNLI) is not the span head's width: start and end, always two."""
    from bertctl.model import BertForSequenceClassification

    save_model(BertForSequenceClassification(odd_config, num_labels=3), tmp_path / "mnli")
    model = load_model(tmp_path / "mnli", "BertForQuestionAnswering")
    out = model(torch.randint(1, odd_config.vocab_size, (2, 7)))
    assert model.fresh_heads == ("question_answering",) and out.start_logits.shape == out.end_logits.shape == (2, 7)


def test_classifier_dropout_is_the_folders_unless_given(odd_config, tmp_path):
    """transformers' rule: config.json's classifier_dropout, else the hidden dropout; fine-tuning with
    `dropout: null` keeps the folder's value, as its saved config.json then says."""
    from bertctl.model import BertForSequenceClassification

    folder = save_model(BertForSequenceClassification(odd_config, num_labels=2, classifier_dropout=0.3),
                        tmp_path / "clf")
    assert load_model(folder).dropout.p == 0.3
    assert load_model(folder, classifier_dropout=0.05).dropout.p == 0.05



@pytest.mark.parametrize("value", ["0.3", True, -0.5, 2, [0.1]])
def test_a_malformed_classifier_dropout_in_config_json_is_blamed_in_one_line(odd_config, tmp_path, value):
    """config.json's classifier_dropout went to torch unchecked: "0.3" or [0.1] stopped with "TypeError: '<' not
    supported between instances of 'str' and 'int'", 2 with torch's ValueError (neither naming the file), and true
    built a head that drops every input in training. Now one line naming config.json (exit 2). A number out of
    range that the head does not use (an encoder, a QA head, a given classifier_dropout) is left alone, as
    transformers 5 leaves it; anything but a number is refused whatever the head, as its strict BertConfig does
    (a QA head took "0.3" or true)."""
    from bertctl.model import BertForSequenceClassification

    folder = save_model(BertForSequenceClassification(odd_config, num_labels=2), tmp_path / "clf")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "classifier_dropout": value}))
    with pytest.raises(UsageError, match=re.escape(f"{folder / 'config.json'}: classifier_dropout must be a number "
                                                   f"in [0, 1] or null, got {value!r}")):
        load_model(folder)
    result = CliRunner().invoke(app, ["convert", str(folder), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2 and "classifier_dropout must be a number" in result.stderr, result.output
    unused = [lambda: load_model(folder, classifier_dropout=0.2).dropout.p == 0.2,
              lambda: load_model(folder, "BertModel").fresh_heads == (),
              lambda: load_model(folder, "BertForQuestionAnswering").fresh_heads == ("question_answering",)]
    for load in unused:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            with pytest.raises(UsageError, match=f"^{re.escape(str(folder / 'config.json'))}: classifier_dropout"):
                load()
        else:
            assert load()


def test_save_is_atomic_and_refuses_to_overwrite(odd_config, tmp_path):
    model = BertForPreTraining(odd_config)
    save_model(model, tmp_path / "out")
    with pytest.raises(Exception, match="already exists"):
        save_model(model, tmp_path / "out")

    def boom(folder):
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="^disk full$"):
        save_model(model, tmp_path / "other", extra=boom)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["architectures"] == ["BertForPreTraining"] and config["model_type"] == "bert"
    assert config["bertctl"]["heads"] == ["mlm", "nsp", "pooler"]
    assert "cls.predictions.decoder.weight" not in load_file(tmp_path / "out" / "model.safetensors")


def test_our_pretraining_folder_with_tokenizer_loads_in_transformers(minilm, odd_config, tmp_path):
    from bertctl.tokenizer_folder import load_tokenizer

    tokenizer = load_tokenizer(minilm)
    model = BertForPreTraining(odd_config.replace(vocab_size=tokenizer.vocab_size))
    save_model(model, tmp_path / "ours", tokenizer)
    fast = transformers.BertTokenizerFast.from_pretrained(tmp_path / "ours")
    assert fast("Hello world")["input_ids"] == tokenizer.encode("Hello world").ids
    _, info = transformers.BertForMaskedLM.from_pretrained(tmp_path / "ours", output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"]


@pytest.mark.parametrize("limit", [512, None])
def test_a_saved_tokenizer_cuts_texts_to_the_models_positions(odd_config, tmp_path, limit):
    """A pipeline with truncation=True cuts to model_max_length: one above max_position_embeddings (or none)
    let a long text through to the position embeddings, which fail."""
    from dataclasses import replace

    from bertctl.tokenizer import BertTokenizer

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "word"]
    tokenizer = BertTokenizer.from_vocab(vocab)
    tokenizer = BertTokenizer(tokenizer.backend, replace(tokenizer.options, model_max_length=limit))
    config = odd_config.replace(vocab_size=len(vocab))
    torch.manual_seed(0)
    folder = save_model(BertForPreTraining(config).eval(), tmp_path / "ours", tokenizer)
    pipe = transformers.pipeline("fill-mask", model=str(folder), device="cpu")
    assert pipe.tokenizer.model_max_length == config.max_position_embeddings
    pipe("[MASK] " + " ".join(["word"] * 2 * config.max_position_embeddings), tokenizer_kwargs={"truncation": True})
    copied = save_model(BertForPreTraining(config), tmp_path / "copied", folder)  # files copied from a folder
    saved = json.loads((copied / "tokenizer_config.json").read_text())
    assert saved["model_max_length"] == config.max_position_embeddings


def test_a_copied_tokenizer_configs_model_max_length_is_fitted_where_it_stands(odd_config, tmp_path):
    """A model_max_length past the positions is replaced in its own place, after clean_up_tokenization_spaces too
    (a tokenizer_config.json written by hand or by another tool): its value, not the old one, is saved."""
    from bertctl.tokenizer import BertTokenizer

    tokenizer = BertTokenizer.from_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "word"])
    config = odd_config.replace(vocab_size=tokenizer.vocab_size)
    folder = save_model(BertForPreTraining(config), tmp_path / "ours", tokenizer)
    saved = json.loads((folder / "tokenizer_config.json").read_text())
    assert "clean_up_tokenization_spaces" in saved
    saved = {**{k: v for k, v in saved.items() if k != "model_max_length"}, "model_max_length": 10**30}
    (folder / "tokenizer_config.json").write_text(json.dumps(saved))
    copied = save_model(BertForPreTraining(config), tmp_path / "copied", folder)
    again = json.loads((copied / "tokenizer_config.json").read_text())
    assert list(again) == list(saved) and again["model_max_length"] == config.max_position_embeddings


def test_convert_and_info_cli(minilm, tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["convert", str(minilm), "--out", str(tmp_path / "conv")])
    assert result.exit_code == 0 and "(BertModel: encoder only; tokenizer: yes)" in result.stdout, result.output
    result = runner.invoke(app, ["info", str(tmp_path / "conv"), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["format"] == "bertctl v1" and summary["architecture"] == "BertModel"
    assert summary["parameters"] == 22_713_216 and summary["tokenizer"]["vocab_size"] == 30522
    assert summary["tokenizer"]["kind"] == "tokenizer.json" and summary["tokenizer"]["lowercase"] is True
    table = runner.invoke(app, ["info", str(minilm)])
    assert table.exit_code == 0 and "transformers" in table.stdout
    transformers.BertModel.from_pretrained(tmp_path / "conv").save_pretrained(tmp_path / "resaved")
    config = json.loads((tmp_path / "resaved" / "config.json").read_text())
    (tmp_path / "resaved" / "config.json").write_text(json.dumps({**config, "id2label": {"0": "LABEL_0",
                                                                                         "1": "LABEL_1"}}))
    resaved = json.loads(runner.invoke(app, ["info", str(tmp_path / "resaved"), "--json"]).stdout)
    assert resaved["format"] == "transformers"  # though its config.json keeps our block
    assert resaved["labels"] is None  # the id2label transformers 4 wrote for any model names no classes of an encoder
    again = runner.invoke(app, ["convert", str(minilm), "--out", str(tmp_path / "conv")])
    assert again.exit_code == 2 and "--overwrite" in again.stderr


def test_info_on_a_folder_that_is_not_a_model(tmp_path):
    result = CliRunner().invoke(app, ["info", str(tmp_path)])
    assert result.exit_code == 2 and "no config.json" in result.stderr


def test_a_models_file_or_checkpoint_prefix_given_as_the_model_names_its_folder(tmp_path, monkeypatch):
    """`convert x/bert_model.ckpt` (Google's converter's argument) was looked up on the hub, and `info
    x/model.safetensors` said only "no config.json"; a text file is not said to belong to a model."""
    (tmp_path / "tf").mkdir()
    for name in ("bert_config.json", "bert_model.ckpt.index", "notes.txt"):
        (tmp_path / "tf" / name).write_text("{}")
    (tmp_path / "notes.txt").write_text("x")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["convert", "tf/bert_model.ckpt", "--out", "out"])
    assert result.exit_code == 2 and result.stderr == ("bertctl: error: tf/bert_model.ckpt is a TensorFlow "
                                                       "checkpoint's prefix, not a folder; give the folder that holds "
                                                       "it and its bert_config.json and vocab.txt: tf\n")
    result = CliRunner().invoke(app, ["info", "tf/notes.txt"])
    assert result.exit_code == 2 and "(it is a file of the model folder tf: give the folder)" in result.stderr
    result = CliRunner().invoke(app, ["info", "notes.txt"])
    assert result.exit_code == 2 and "(give a folder written by bertctl" in result.stderr


def test_a_run_folder_given_as_a_model_names_the_model_folders_in_it(odd_config, tmp_path):
    """`info runs/pt` (a pretrain run) or `fill -m runs/rte` (seeds) said only "no config.json"."""
    hf_pretraining_folder(odd_config, model := tmp_path / "hf")
    run = tmp_path / "pt"
    for name in ("step-000004", "step-000008", "final"):
        shutil.copytree(model, run / name)
    (run / "run.json").write_text("{}")
    result = CliRunner().invoke(app, ["info", str(run)])
    assert result.exit_code == 2 and f"give {run / 'final'} or {run / 'step-000008'}" in result.stderr
    seeds = tmp_path / "rte"
    for name in ("seed-1", "seed-2"):
        shutil.copytree(model, seeds / name)
    (seeds / "results.json").write_text(json.dumps({"best_model": "seed-2"}))
    result = CliRunner().invoke(app, ["fill", "-m", str(seeds), "a [MASK]"])
    assert result.exit_code == 2 and f"give {seeds / 'seed-2'} (the best seed)" in result.stderr


def test_decoder_bias_of_older_files_is_the_mlm_bias(odd_config, tmp_path):
    reference = hf_pretraining_folder(odd_config, tmp_path / "hf")
    path = tmp_path / "hf" / "model.safetensors"
    state = load_file(path)
    state["cls.predictions.decoder.bias"] = state.pop("cls.predictions.bias")
    save_file(state, path, metadata={"format": "pt"})
    ours = load_model(tmp_path / "hf").eval()
    assert ours.fresh_heads == ()
    assert torch.equal(ours.mlm.bias, reference.cls.predictions.bias)


def test_a_partly_present_head_is_an_error_not_a_fresh_head(odd_config, tmp_path):
    hf_pretraining_folder(odd_config, tmp_path / "hf")
    path = tmp_path / "hf" / "model.safetensors"
    state = load_file(path)
    del state["cls.predictions.transform.dense.weight"]
    save_file(state, path, metadata={"format": "pt"})
    with pytest.raises(Exception, match=r"missing parameter cls\.predictions\.transform\.dense\.weight"):
        load_model(tmp_path / "hf")


def test_saved_folders_get_the_usual_permissions(odd_config, tmp_path):
    import os
    import stat

    previous = os.umask(0o022)
    try:
        save_model(BertForPreTraining(odd_config), tmp_path / "out")
    finally:
        os.umask(previous)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in [tmp_path / "out", *(tmp_path / "out").iterdir()]}
    assert modes == {"out": 0o755, "config.json": 0o644, "model.safetensors": 0o644}


def test_keywords_an_architecture_does_not_take_are_one_line_errors(odd_config, tmp_path):
    save_model(BertForPreTraining(odd_config), tmp_path / "m")
    with pytest.raises(UsageError, match=r"^BertForQuestionAnswering takes no num_labels \(its options: none\)$"):
        load_model(tmp_path / "m", "BertForQuestionAnswering", num_labels=2)


def test_a_bad_id2label_matters_only_where_labels_are_read(odd_config, tmp_path):
    """An MLM folder whose id2label is garbage still fine-tunes with a new head, converts and shows its info."""
    from bertctl.convert import convert
    from bertctl.info import info
    from bertctl.model import BertForMaskedLM

    folder = save_model(BertForMaskedLM(odd_config), tmp_path / "mlm")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "id2label": {"1": "a", "2": "b"}}))
    assert load_model(folder, "BertForSequenceClassification", num_labels=3).fresh_heads == ("classifier", "pooler")
    convert(folder, tmp_path / "copy")
    assert info(folder)["labels"] is None


def test_a_saved_classifier_records_the_dropout_its_head_used(odd_config, tmp_path):
    """Not the source folder's: fine-tuning a classifier saved with 0.3 at --dropout 0.2 records 0.2 (None)."""
    from bertctl.model import BertForSequenceClassification

    save_model(BertForSequenceClassification(odd_config, num_labels=2, classifier_dropout=0.3), tmp_path / "src")
    source = read_checkpoint(tmp_path / "src")
    tuned = load_model(tmp_path / "src", classifier_dropout=odd_config.hidden_dropout_prob)
    save_model(tuned, tmp_path / "tuned", config_extra=source.kept_config)
    assert json.loads((tmp_path / "tuned" / "config.json").read_text())["classifier_dropout"] is None
    assert load_model(tmp_path / "tuned").dropout.p == odd_config.hidden_dropout_prob


@pytest.mark.parametrize(("name", "shape", "needs"), [
    ("cls.predictions.bias", lambda c: (c.vocab_size - 6,), lambda c: (c.vocab_size,)),
    ("cls.predictions.transform.dense.weight", lambda c: (c.hidden_size, c.hidden_size - 1),
     lambda c: (c.hidden_size, c.hidden_size)),
    ("cls.seq_relationship.weight", lambda c: (3, c.hidden_size), lambda c: (2, c.hidden_size)),
    ("bert.pooler.dense.bias", lambda c: (c.hidden_size + 2,), lambda c: (c.hidden_size,)),
])
def test_a_head_of_another_shape_than_config_json_gives_is_refused_not_replaced_at_random(
        odd_config, tmp_path, name, shape, needs):
    """A trained MLM/NSP head or pooler whose weights do not fit the model was silently created afresh: `fill`
    filled masks with a random head and `pretrain --init-from` trained one, where transformers refuses the folder
    (a size mismatch). Now one line from every command that reads the folder, `info` included."""
    hf_pretraining_folder(odd_config, tmp_path / "hf")
    path = tmp_path / "hf" / "model.safetensors"
    state = load_file(path)
    state[name] = torch.zeros(shape(odd_config))
    save_file(state, path, metadata={"format": "pt"})
    result = CliRunner().invoke(app, ["info", str(tmp_path / "hf")])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (f"bertctl: error: {path}: {name} has shape {shape(odd_config)} but the model its "
                                     f"config.json describes needs {needs(odd_config)} (is the file complete? "
                                     "re-download or re-save it)")
    with pytest.raises(Exception, match=re.escape(name)):
        load_model(tmp_path / "hf", "BertForPreTraining")


def test_a_question_answering_head_of_three_outputs_is_named_no_squad_model(odd_config, tmp_path):
    """transformers saves BertForQuestionAnswering with num_labels=3 but cannot run it (its start/end split needs
    2): a whole file, so the line says what the head is, not that the file may be cut short."""
    hf_pretraining_folder(odd_config, tmp_path / "hf")
    path = tmp_path / "hf" / "model.safetensors"
    state = load_file(path)
    state.update({"qa_outputs.weight": torch.zeros(3, odd_config.hidden_size), "qa_outputs.bias": torch.zeros(3)})
    save_file(state, path, metadata={"format": "pt"})
    result = CliRunner().invoke(app, ["info", str(tmp_path / "hf")])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (f"bertctl: error: {path}: qa_outputs.bias has shape (3,) but the model its "
                                     "config.json describes needs (2,) (a question-answering head gives 2 outputs, "
                                     "a start and an end score; this one gives 3: not a SQuAD model, fine-tune one "
                                     "with `bertctl finetune squad`)")


def test_a_classifier_may_have_another_number_of_outputs_but_not_another_width(odd_config, tmp_path):
    """Another number of labels makes a fresh classifier (fine-tuning a model on another task); another input
    width is a broken file, not a fresh head."""
    from bertctl.model import BertForSequenceClassification

    save_model(BertForSequenceClassification(odd_config, num_labels=3), tmp_path / "mnli")
    assert load_model(tmp_path / "mnli", num_labels=2).fresh_heads == ("classifier",)
    path = tmp_path / "mnli" / "model.safetensors"
    state = load_file(path)
    state["classifier.weight"] = torch.zeros(3, odd_config.hidden_size + 1)
    save_file(state, path, metadata={"format": "pt"})
    with pytest.raises(Exception, match=re.escape(f"classifier.weight has shape (3, {odd_config.hidden_size + 1})")):
        read_checkpoint(tmp_path / "mnli")


@pytest.mark.parametrize(("source", "architecture", "options"), [
    ("BertForMaskedLM", "BertForSequenceClassification", {"num_labels": 3}),
    ("BertForMaskedLM", "BertForPreTraining", {}), ("BertForMaskedLM", "BertForQuestionAnswering", {}),
    ("BertModel", "BertForMaskedLM", {}),  # a fresh MLM head: its LayerNorm starts at 1 and 0 too
])
def test_fresh_heads_are_drawn_as_transformers_draws_them(tmp_path, source, architecture, options):
    """transformers' from_pretrained draws only the heads a folder lacks from the caller's RNG. bertctl initialised
    the whole model at random first, so for one seed a new head differed from transformers' (and the caller's RNG
    had moved on by a whole model's draws)."""
    from bertctl.checkpoint_names import to_transformers_names

    torch.manual_seed(1)
    config = transformers.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64)
    getattr(transformers, source)(config).save_pretrained(tmp_path)  # no NSP head; no pooler or no MLM head
    torch.manual_seed(0)
    theirs = getattr(transformers, architecture).from_pretrained(tmp_path, **options).state_dict()
    after_theirs = torch.rand(4)
    torch.manual_seed(0)
    ours = load_model(tmp_path, architecture, **options)
    assert torch.equal(torch.rand(4), after_theirs)
    assert ours.fresh_heads
    for name, value in to_transformers_names(ours.state_dict(), bare=False).items():
        assert torch.equal(value, theirs[name]), name


def test_an_encoder_file_without_a_pooler_loads_without_one(odd_config, tmp_path):
    """A BertModel file saved without its pooler (add_pooler=False) loads as such: no pooler drawn at random."""
    torch.manual_seed(1)
    transformers.BertModel(transformers.BertConfig(**odd_config.to_dict()), add_pooling_layer=False).save_pretrained(
        tmp_path / "bare")
    model = load_model(tmp_path / "bare")
    assert model.bert.pooler is None and not model.fresh_heads


def test_a_tokenizer_with_as_many_tokens_as_embedding_rows_is_the_models(odd_config, tmp_path):
    """Only more tokens than rows is refused: a vocabulary that fills the matrix exactly is the usual case."""
    from bertctl.checkpoint import model_tokenizer
    from bertctl.tokenizer import BertTokenizer

    tokenizer = BertTokenizer.from_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "word"])
    config = odd_config.replace(vocab_size=tokenizer.vocab_size)
    folder = save_model(BertForPreTraining(config), tmp_path / "ours", tokenizer)
    assert model_tokenizer(read_checkpoint(folder)).vocab_size == config.vocab_size


def test_a_copied_tokenizer_config_that_fits_the_positions_is_copied_as_written(odd_config, tmp_path):
    """Only a model_max_length past the positions (or none) is rewritten; one that fits keeps the file's bytes."""
    from bertctl.tokenizer import BertTokenizer

    tokenizer = BertTokenizer.from_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "word"])
    config = odd_config.replace(vocab_size=tokenizer.vocab_size)
    folder = save_model(BertForPreTraining(config), tmp_path / "ours", tokenizer)
    saved = json.loads((folder / "tokenizer_config.json").read_text())
    assert saved["model_max_length"] == config.max_position_embeddings
    (folder / "tokenizer_config.json").write_text(json.dumps(saved, separators=(",", ":")))
    copied = save_model(BertForPreTraining(config), tmp_path / "copied", folder)
    assert (copied / "tokenizer_config.json").read_bytes() == (folder / "tokenizer_config.json").read_bytes()


def test_save_models_keep_and_config_extra_never_replace_the_models_own(odd_config, tmp_path):
    """`keep` adds heads the model lacks and `config_extra` only KEPT_CONFIG_KEYS: neither overrides a weight or
    a BertConfig field of the model being saved."""
    torch.manual_seed(0)
    model = BertForPreTraining(odd_config)
    word = "bert.embeddings.word.weight"
    folder = save_model(model, tmp_path / "ours", keep={word: torch.zeros_like(model.state_dict()[word])},
                        config_extra={"vocab_size": 7, "finetuning_task": "mlm"})
    saved = load_file(folder / "model.safetensors")["bert.embeddings.word_embeddings.weight"]
    assert torch.equal(saved, model.state_dict()[word])
    config = json.loads((folder / "config.json").read_text())
    assert config["vocab_size"] == odd_config.vocab_size and config["finetuning_task"] == "mlm"


def test_info_names_an_encoder_config_as_bertmodel_whatever_heads_its_file_holds(odd_config, tmp_path):
    """config.json's BertModel over a pre-training file is what transformers' AutoModel loads: not reported as
    BertForNextSentencePrediction, which has no MLM head."""
    from bertctl.info import info

    hf_pretraining_folder(odd_config, tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**config, "architectures": ["BertModel"]}))
    assert info(tmp_path / "hf")["architecture"] == "BertModel"
