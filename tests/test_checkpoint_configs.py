"""Hub config.json variants and every activation name, each against transformers on the same folder; what
`convert` and `info` keep of a fine-tuned folder's config."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

transformers = pytest.importorskip("transformers")

from test_checkpoint_files import FP32, assert_transformers_loads_ours, max_diff  # noqa: E402
from test_config import HUB_CONFIGS  # noqa: E402
from test_parity import TOLERANCE, reference_model  # noqa: E402

from bertctl import __version__  # noqa: E402
from bertctl.checkpoint import load_model, read_checkpoint  # noqa: E402
from bertctl.cli import app  # noqa: E402
from bertctl.config import ACTIVATIONS  # noqa: E402
from bertctl.errors import UsageError  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

SHAPE_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
              "max_position_embeddings", "type_vocab_size")


def folder_with_config(name, odd_config, folder, values, **extra):
    """A transformers-saved folder whose config.json is replaced by a hub one (with the tiny shape)."""
    reference = reference_model(name, odd_config, **extra)
    reference.save_pretrained(folder)
    shape = {k: v for k, v in odd_config.to_dict().items() if k in SHAPE_KEYS}
    (folder / "config.json").write_text(json.dumps({**values, **shape}))
    return reference


def architecture(values):
    return (values.get("architectures") or ["BertModel"])[0]


@pytest.mark.parametrize("hub", HUB_CONFIGS)
def test_hub_config_folder_matches_transformers(hub, odd_config, tmp_path):
    values = HUB_CONFIGS[hub]
    name = architecture(values)
    labels = {"num_labels": len(values["id2label"])} if "id2label" in values else {}
    folder_with_config(name, odd_config, tmp_path / "hf", values, **labels)
    assert max_diff(name, tmp_path / "hf", odd_config) <= TOLERANCE
    assert_transformers_loads_ours(name, tmp_path / "hf", tmp_path)


@pytest.mark.parametrize("act", ACTIVATIONS)
def test_every_activation_matches_transformers(act, odd_config, tmp_path):
    reference = reference_model("BertForMaskedLM", odd_config.replace(hidden_act=act))
    reference.save_pretrained(tmp_path / "hf")
    assert max_diff("BertForMaskedLM", tmp_path / "hf", odd_config, reference) <= TOLERANCE


def test_classifier_without_labels_in_config_keeps_its_trained_head(odd_config, tmp_path):
    values = {k: v for k, v in HUB_CONFIGS["classifier-3.x"].items() if k != "num_labels"}
    folder_with_config("BertForSequenceClassification", odd_config, tmp_path / "hf", values, num_labels=7)
    ckpt = read_checkpoint(tmp_path / "hf")
    assert ckpt.num_labels == 7
    reference = transformers.BertForSequenceClassification.from_pretrained(tmp_path / "hf", num_labels=7, **FP32)
    assert max_diff("BertForSequenceClassification", tmp_path / "hf", odd_config, reference.eval()) <= TOLERANCE


def test_a_hand_written_num_labels_is_read_as_transformers_reads_it(odd_config, tmp_path):
    """A fresh classifier has config.json's num_labels outputs; `_num_labels` (a key transformers 2.x wrote
    beside id2label) is ignored by transformers and by bertctl, as every key outside BertConfig."""
    folder_with_config("BertModel", odd_config, tmp_path / "hf", {"model_type": "bert", "_num_labels": 3})
    auto = transformers.AutoModelForSequenceClassification
    assert load_model(tmp_path / "hf", "BertForSequenceClassification").num_labels == 2
    assert auto.from_pretrained(tmp_path / "hf").num_labels == 2
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**config, "num_labels": 4}))
    assert load_model(tmp_path / "hf", "BertForSequenceClassification").num_labels == 4
    assert auto.from_pretrained(tmp_path / "hf").num_labels == 4


def test_convert_keeps_labels_problem_type_and_task_settings(odd_config, tmp_path):
    values = {**HUB_CONFIGS["ner-4.6.1"], "finetuning_task": "ner", "problem_type": "single_label_classification",
              "classifier_dropout": 0.2, "tokenizer_class": "BertTokenizer"}
    folder_with_config("BertForTokenClassification", odd_config, tmp_path / "hf", values, num_labels=3)
    runner = CliRunner()
    result = runner.invoke(app, ["convert", str(tmp_path / "hf"), "--out", str(tmp_path / "conv")])
    assert result.exit_code == 0, result.output
    converted = json.loads((tmp_path / "conv" / "config.json").read_text())
    for key in ("id2label", "label2id", "problem_type", "finetuning_task", "classifier_dropout", "tokenizer_class"):
        assert converted[key] == values[key], key
    reloaded, info = transformers.BertForTokenClassification.from_pretrained(tmp_path / "conv",
                                                                              output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert reloaded.config.id2label == {0: "O", 1: "B-PER", 2: "I-PER"}
    assert max_diff("BertForTokenClassification", tmp_path / "conv", odd_config) <= TOLERANCE
    summary = json.loads(runner.invoke(app, ["info", str(tmp_path / "conv"), "--json"]).stdout)
    assert summary["labels"] == ["O", "B-PER", "I-PER"] and summary["problem_type"] == "single_label_classification"


def test_convert_records_its_source_in_the_folder_it_writes(odd_config, tmp_path, monkeypatch):
    """Every other command that writes a folder records what made it (run.json, manifest.json, provenance.json); a
    converted folder said nothing of its source. The record names it (a local one as a path, never a hub id) with
    the weights_sha256 that finetune records, which the folder read back has too; twice, the same bytes."""
    folder_with_config("BertForTokenClassification", odd_config, tmp_path / "hf", HUB_CONFIGS["ner-4.6.1"],
                       num_labels=3)
    monkeypatch.chdir(tmp_path)
    for out in ("conv", "again"):
        result = CliRunner().invoke(app, ["convert", "hf", "--out", out])
        assert result.exit_code == 0, result.output
    record = json.loads((tmp_path / "conv" / "provenance.json").read_text())
    assert record["format"] == "bertctl-convert"
    assert record["config"] == {"source": "./hf", "out": "conv", "overwrite": False}
    assert record["weights_sha256"] == read_checkpoint(tmp_path / "conv").weights_sha256()
    written = {p.name: p.read_bytes() for p in (tmp_path / "conv").iterdir()}
    again = {p.name: p.read_bytes() for p in (tmp_path / "again").iterdir()}
    again["provenance.json"] = again["provenance.json"].replace(b'"out": "again"', b'"out": "conv"')
    assert written == again
    assert CliRunner().invoke(app, ["convert", "hf", "--out", "again", "--overwrite"]).exit_code == 0
    replaced = json.loads((tmp_path / "again" / "provenance.json").read_text())
    assert (replaced["bertctl"], replaced["config"]["overwrite"]) == (__version__, True)


def test_convert_keeps_the_nsp_head_of_a_masked_lm_config(odd_config, tmp_path):
    """bert-base-uncased: config.json says BertForMaskedLM, the weights have the pooler and NSP head too."""
    reference = folder_with_config("BertForPreTraining", odd_config, tmp_path / "hf", HUB_CONFIGS["bert-base-uncased"])
    assert load_model(tmp_path / "hf").__class__.__name__ == "BertForMaskedLM"
    result = CliRunner().invoke(app, ["convert", str(tmp_path / "hf"), "--out", str(tmp_path / "conv")])
    assert result.exit_code == 0 and "(BertForPreTraining: mlm, nsp; tokenizer: none)" in result.stdout, result.output
    assert max_diff("BertForPreTraining", tmp_path / "conv", odd_config, reference) <= TOLERANCE


def test_convert_keeps_the_mlm_head_of_an_encoder_config_as_a_masked_lm(odd_config, tmp_path):
    """config.json says BertModel, the weights hold an MLM head: the converted folder said BertModel too (the head
    kept beside it), where AutoModelForMaskedLM and BertForPreTraining load that head from either folder."""
    reference = folder_with_config("BertForMaskedLM", odd_config, tmp_path / "hf",
                                   {**HUB_CONFIGS["bert-base-uncased"], "architectures": ["BertModel"]})
    result = CliRunner().invoke(app, ["convert", str(tmp_path / "hf"), "--out", str(tmp_path / "conv")])
    assert result.exit_code == 0 and "(BertForMaskedLM: mlm; tokenizer: none)" in result.stdout, result.output
    assert json.loads((tmp_path / "conv" / "config.json").read_text())["architectures"] == ["BertForMaskedLM"]
    assert max_diff("BertForMaskedLM", tmp_path / "conv", odd_config, reference) <= TOLERANCE
    mlm = load_file(tmp_path / "hf" / "model.safetensors")  # a classifier whose file kept the MLM head: its class
    folder_with_config("BertForSequenceClassification", odd_config, tmp_path / "clf",
                       {**HUB_CONFIGS["bert-base-uncased"], "architectures": ["BertForSequenceClassification"]})
    weights = load_file(tmp_path / "clf" / "model.safetensors")
    weights.update({k: v for k, v in mlm.items() if k.startswith("cls.")})
    save_file(weights, tmp_path / "clf" / "model.safetensors", metadata={"format": "pt"})
    result = CliRunner().invoke(app, ["convert", str(tmp_path / "clf"), "--out", str(tmp_path / "conv2")])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "conv2" / "config.json").read_text())["architectures"] == [
        "BertForSequenceClassification"], result.stdout


def test_info_reports_half_precision_weights(odd_config, tmp_path):
    reference_model("BertModel", odd_config).half().save_pretrained(tmp_path / "hf")
    result = CliRunner().invoke(app, ["info", str(tmp_path / "hf")])
    assert result.exit_code == 0 and "float16 (loaded as float32)" in result.stdout


_SUMMARY = {"path": "m", "format": "transformers", "architecture": "BertForSequenceClassification", "heads": [],
            "pooler": True, "parameters": 1_234_567, "vocab_size": 30, "labels": ["neg", "pos"],
            "problem_type": "single_label_classification", "weights_dtype": "float32", "config": {"hidden_size": 8},
            "tokenizer": {"kind": "vocab.txt", "vocab_size": 30, "lowercase": True, "sha256": "x"}}


@pytest.mark.parametrize(("changes", "rows"), [
    ({}, {"heads": "none (encoder only)", "pooler": "yes", "tokenizer": "vocab.txt, 30 tokens, uncased",
          "labels": "neg, pos", "problem type": "single_label_classification"}),
    ({"heads": ["mlm", "nsp"], "pooler": False, "labels": None, "problem_type": None,
      "tokenizer": {"kind": "tokenizer.json", "vocab_size": 30, "lowercase": False, "sha256": "x"}},
     {"heads": "mlm, nsp", "pooler": "no", "tokenizer": "tokenizer.json, 30 tokens, cased"}),
    ({"labels": None, "problem_type": None, "weights_dtype": "bfloat16"},
     {"heads": "none (encoder only)", "pooler": "yes", "tokenizer": "vocab.txt, 30 tokens, uncased",
      "weights dtype": "bfloat16 (loaded as float32)"}),
])
def test_info_table_shows_each_row_docs_info_names(capsys, changes, rows):
    """The table `bertctl info` prints: labels and problem type only where there are some, then the config."""
    from bertctl.info import print_info

    print_info({**_SUMMARY, **changes})
    shown = dict(tuple(cell.strip() for cell in line.split("\u2502")[1:3])
                 for line in capsys.readouterr().out.splitlines() if line.startswith("\u2502"))
    assert shown == {"format": "transformers", "architecture": "BertForSequenceClassification", "pooler": "yes",
                     "parameters": "1,234,567 (1.2M)", "vocab size": "30", **rows, "hidden_size": "8"}


@pytest.mark.parametrize(("change", "said"), [
    ({"position_embedding_type": "relative_key"}, "position_embedding_type 'relative_key' is not supported"),
    ({"num_attention_heads": 5}, "hidden_size 48 is not divisible by num_attention_heads 5"),
    ({"pad_token_id": 500}, "pad_token_id 500 is outside the vocabulary"),
    ({"hidden_act": 5}, "hidden_act must be a string, got 5"),
    ({"problem_type": "ranking"}, "problem_type 'ranking' is not one of regression, "),
])
def test_unsupported_config_is_refused_in_one_line_naming_the_file(change, said, odd_config, tmp_path):
    """The line named no file ("model config: ..."), though a command may read several model folders."""
    folder_with_config("BertModel", odd_config, tmp_path / "hf", HUB_CONFIGS["bert-base-uncased"])
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    (tmp_path / "hf" / "config.json").write_text(json.dumps({**config, **change}))
    result = CliRunner().invoke(app, ["info", str(tmp_path / "hf")])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"bertctl: error: {tmp_path / 'hf' / 'config.json'}: {said}")
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_config_of_another_model_type_is_refused(odd_config, tmp_path):
    """A RoBERTa config.json beside BERT-shaped weights would load as BERT (transformers only warns)."""
    folder_with_config("BertModel", odd_config, tmp_path / "hf", {"model_type": "roberta"})
    with pytest.raises(UsageError, match="model_type 'roberta' is not BERT"):
        read_checkpoint(tmp_path / "hf")


def test_a_bad_model_config_flag_file_is_named(tmp_path):
    from bertctl.config import model_config

    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 48, "num_attention_heads": 5}))
    with pytest.raises(UsageError, match=f"^--model-config: {tmp_path / 'config.json'}: hidden_size 48 is not "):
        model_config(str(tmp_path))


def test_transformers_default_dtype_is_documented_behaviour(odd_config, tmp_path):
    """Guards docs/checkpoints.md: transformers 5 loads an fp16 file in fp16 unless told dtype=float32."""
    if int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip("transformers 4 loads in fp32 by default")
    reference_model("BertModel", odd_config).half().save_pretrained(tmp_path / "hf")
    assert transformers.BertModel.from_pretrained(tmp_path / "hf").dtype == torch.float16


def test_an_id2label_of_ten_or_more_classes_is_read_in_numeric_order(odd_config, tmp_path):
    """"10" sorts before "2" as a string: the order is the outputs' numbers, as transformers reads them."""
    labels = [f"class{i}" for i in range(12)]
    reference = reference_model("BertForSequenceClassification", odd_config, num_labels=12,
                                id2label=dict(enumerate(labels)))
    reference.save_pretrained(tmp_path / "hf")
    assert read_checkpoint(tmp_path / "hf").labels == labels == list(reference.config.id2label.values())


def test_config_json_wins_over_a_bert_config_json_beside_it(odd_config, tmp_path):
    """transformers reads config.json only; a stale bert_config.json left beside it (a converted Google or
    NVIDIA folder) is not read."""
    reference_model("BertModel", odd_config).save_pretrained(tmp_path / "hf")
    (tmp_path / "hf" / "bert_config.json").write_text(json.dumps({"hidden_size": 768, "vocab_size": 30522}))
    assert read_checkpoint(tmp_path / "hf").config.hidden_size == odd_config.hidden_size


@pytest.mark.parametrize("id2label", [["a", "b"], {"0": "a", "2": "b"}, {"x": "a", "y": "b"}])
def test_an_id2label_that_does_not_number_the_outputs_is_refused_in_one_line(odd_config, tmp_path, id2label):
    """A list (which transformers refuses too) made `info` fail with an IndexError."""
    from bertctl.checkpoint import save_model
    from bertctl.model import BertForSequenceClassification

    folder = save_model(BertForSequenceClassification(odd_config, num_labels=2), tmp_path / "clf")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "id2label": id2label}))
    result = CliRunner().invoke(app, ["info", str(folder)])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"bertctl: error: {folder / 'config.json'}: id2label must map the outputs 0, 1")


def test_convert_keeps_the_head_of_a_next_sentence_prediction_folder(odd_config, tmp_path):
    """BertForNextSentencePrediction has no bertctl class: convert wrote an encoder and dropped the NSP head (which
    transformers then initialised at random)."""
    from bertctl.convert import convert
    from bertctl.fill import load_mlm
    from bertctl.info import info

    reference = reference_model("BertForNextSentencePrediction", odd_config)
    reference.save_pretrained(tmp_path / "hf")
    assert "BertForNextSentencePrediction: nsp" in convert(tmp_path / "hf", tmp_path / "conv")
    reloaded, loading = transformers.BertForNextSentencePrediction.from_pretrained(tmp_path / "conv",
                                                                                   output_loading_info=True)
    assert not any(loading.values()), loading
    ids = torch.randint(1, odd_config.vocab_size, (2, 9))
    with torch.no_grad():
        assert torch.equal(reloaded.eval()(ids).logits, reference(ids).logits)
    for folder in ("hf", "conv"):  # `info` and `fill` named it BertModel
        assert (info(tmp_path / folder)["heads"], info(tmp_path / folder)["architecture"]) == (
            ["nsp"], "BertForNextSentencePrediction")
        with pytest.raises(UsageError, match=r"has no MLM head \(it is a BertForNextSentencePrediction\)"):
            load_mlm(tmp_path / folder)
    assert "BertForNextSentencePrediction: nsp" in convert(tmp_path / "conv", tmp_path / "again")


def test_convert_keeps_a_pooler_beside_an_mlm_head(odd_config, tmp_path):
    from bertctl.convert import convert

    reference_model("BertForPreTraining", odd_config).save_pretrained(tmp_path / "hf")
    state = load_file(tmp_path / "hf" / "model.safetensors")
    save_file({k: v for k, v in state.items() if "seq_relationship" not in k}, tmp_path / "hf" / "model.safetensors")
    convert(tmp_path / "hf", tmp_path / "conv")
    converted = load_file(tmp_path / "conv" / "model.safetensors")
    assert torch.equal(converted["bert.pooler.dense.weight"], state["bert.pooler.dense.weight"])


def test_convert_never_writes_a_classifier_head_the_weights_lack(odd_config, tmp_path):
    """config.json says BertForSequenceClassification, the file has no classifier: convert wrote a random head
    and labels, which predict and evaluate then used as a trained one."""
    from bertctl.convert import convert
    from bertctl.info import info

    folder_with_config("BertForSequenceClassification", odd_config, tmp_path / "hf",
                       {**HUB_CONFIGS["bert-base-uncased"], "architectures": ["BertForSequenceClassification"],
                        "id2label": {"0": "a", "1": "b", "2": "c"}}, num_labels=3)
    state = load_file(tmp_path / "hf" / "model.safetensors")
    encoder = {k: v for k, v in state.items() if not k.startswith("classifier.")}
    save_file(encoder, tmp_path / "hf" / "model.safetensors")
    assert info(tmp_path / "hf")["labels"] is None  # docs/info.md: the labels of a classifier
    convert(tmp_path / "hf", tmp_path / "conv")
    assert not any(k.startswith("classifier.") for k in load_file(tmp_path / "conv" / "model.safetensors"))
    assert "id2label" not in json.loads((tmp_path / "conv" / "config.json").read_text())
    assert info(tmp_path / "conv")["heads"] == []


def test_convert_of_a_transformers_classifier_without_id2label_warns_of_nothing(odd_config, tmp_path, caplog):
    """Only a Google or NVIDIA classifier's unnamed outputs are a script's class order worth a warning; transformers
    reads an unnamed classifier as LABEL_0, ... itself, and so does the converted folder."""
    from bertctl.convert import convert

    folder_with_config("BertForSequenceClassification", odd_config, tmp_path / "hf",
                       {**HUB_CONFIGS["bert-base-uncased"], "architectures": ["BertForSequenceClassification"],
                        "num_labels": 3}, num_labels=3)
    convert(tmp_path / "hf", tmp_path / "conv")
    assert "without id2label" not in caplog.text
    reloaded = transformers.BertForSequenceClassification.from_pretrained(tmp_path / "conv")
    assert reloaded.config.id2label == {0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}


def test_an_id2label_of_another_size_than_the_head_is_refused(odd_config, tmp_path):
    """transformers refuses the folder; bertctl built the head config.json describes and replaced the trained one
    with a random one in convert, predict and evaluate."""
    folder_with_config("BertForSequenceClassification", odd_config, tmp_path / "hf",
                       {**HUB_CONFIGS["bert-base-uncased"], "architectures": ["BertForSequenceClassification"],
                        "id2label": {"0": "a", "1": "b"}, "label2id": {"a": 0, "b": 1}}, num_labels=3)
    for command in (["info", str(tmp_path / "hf")], ["convert", str(tmp_path / "hf"), "--out", str(tmp_path / "c")]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 2, result.output
        assert "names 2 classes in id2label, but the weights hold a classifier with 3 output(s)" in result.stderr
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize(("name", "untied", "extra"), [
    ("BertForPreTraining", False, {}), ("BertForPreTraining", True, {}), ("BertForMaskedLM", True, {}),
    ("BertForSequenceClassification", False, {"num_labels": 3}), ("BertForMultipleChoice", False, {}),
    ("BertForQuestionAnswering", False, {}), ("BertForNextSentencePrediction", False, {}),
])
def test_info_counts_the_parameters_transformers_counts(name, untied, extra, odd_config, tmp_path):
    """Guards docs/info.md: the same count, but for the MLM bias an untied transformers model keeps unused."""
    from bertctl.info import info

    reference_model(name, odd_config.replace(tie_word_embeddings=not untied), **extra).save_pretrained(tmp_path / "hf")
    loaded = getattr(transformers, name).from_pretrained(tmp_path / "hf")
    unused = odd_config.vocab_size if untied else 0
    summary = info(tmp_path / "hf")
    assert summary["parameters"] == loaded.num_parameters() - unused
    assert summary["pooler"] == (loaded.base_model.pooler is not None)  # BertForMaskedLM has none


@pytest.mark.parametrize("own_bias", [False, True])
def test_info_counts_a_decoder_untied_by_its_weights_as_transformers(own_bias, odd_config, tmp_path):
    """Guards docs/info.md: under `tie_word_embeddings: true` a stored decoder that differs from the embeddings is
    untied, but transformers still ties its bias to cls.predictions.bias unless the file holds another one."""
    from bertctl.info import info

    reference_model("BertForMaskedLM", odd_config).save_pretrained(tmp_path / "hf")
    weights = load_file(tmp_path / "hf" / "model.safetensors")
    weights["cls.predictions.decoder.weight"] = torch.randn_like(weights["bert.embeddings.word_embeddings.weight"])
    if own_bias:
        weights["cls.predictions.decoder.bias"] = torch.randn_like(weights["cls.predictions.bias"])
    save_file(weights, tmp_path / "hf" / "model.safetensors", metadata={"format": "pt"})
    loaded = transformers.BertForMaskedLM.from_pretrained(tmp_path / "hf")
    summary = info(tmp_path / "hf")
    assert summary["config"]["tie_word_embeddings"] is False
    assert summary["parameters"] == loaded.num_parameters() - (odd_config.vocab_size if own_bias else 0)
