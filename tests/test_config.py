"""Configuration: BertConfig's JSON round trip and validation, presets, and the flag/file precedence."""

from __future__ import annotations

import json
import math
import os
import re
import typing
from dataclasses import fields
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bertctl.config import (
    PRESETS,
    QUICKSTART_PRETRAIN,
    BertConfig,
    CorpusConfig,
    CorpusImportConfig,
    FinetuneConfig,
    PretrainConfig,
    TokenizerTrainConfig,
    model_config,
    preset,
    usable_cores,
)
from bertctl.config_files import build_config, read_config_file
from bertctl.config_records import config_to_dict
from bertctl.errors import UsageError


def test_bert_config_json_round_trip_keeps_every_field(tmp_path):
    config = BertConfig(vocab_size=101, hidden_size=48, num_hidden_layers=3, num_attention_heads=4,
                        intermediate_size=80, hidden_act="gelu_new", hidden_dropout_prob=0.0,
                        max_position_embeddings=40, layer_norm_eps=1e-6)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config.to_dict(), "model_type": "bert", "architectures": ["BertModel"]}))
    assert model_config(str(path)) == config
    assert BertConfig.from_dict(json.loads(path.read_text())) == config


@pytest.mark.parametrize(("changes", "message"), [
    ({"hidden_size": 50, "num_attention_heads": 4}, "not divisible"),
    ({"hidden_act": "prelu"}, "hidden_act"),  # has a learned parameter: not a plain function
    ({"hidden_dropout_prob": 1.0}, "hidden_dropout_prob"),
    ({"num_hidden_layers": 0}, "num_hidden_layers"),
])
def test_bert_config_refuses_impossible_shapes(changes, message):
    with pytest.raises(UsageError, match=message):
        BertConfig(**changes)


@pytest.mark.parametrize(("values", "message"), [
    ({"position_embedding_type": "relative_key"}, "position_embedding_type 'relative_key'"),
    ({"position_embedding_type": "relative_key_query"}, "position_embedding_type"),
    ({"is_decoder": True}, "is_decoder=true"),
    ({"add_cross_attention": True}, "add_cross_attention=true"),
    ({"pruned_heads": {"0": [1]}}, "pruned_heads"),
    ({"hidden_act": "xielu"}, "hidden_act 'xielu'"),
])
def test_variants_bertctl_would_compute_wrongly_are_refused_in_one_line(values, message):
    with pytest.raises(UsageError, match=message) as error:
        BertConfig.from_dict({**BERT_BASE_UNCASED, **values})
    assert "\n" not in str(error.value)


# config.json files as the hub holds them (shapes and all), from several transformers versions.
BERT_BASE_UNCASED = {  # google-bert/bert-base-uncased (written by 4.6.0.dev0)
    "architectures": ["BertForMaskedLM"], "attention_probs_dropout_prob": 0.1, "gradient_checkpointing": False,
    "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "hidden_size": 768, "initializer_range": 0.02,
    "intermediate_size": 3072, "layer_norm_eps": 1e-12, "max_position_embeddings": 512, "model_type": "bert",
    "num_attention_heads": 12, "num_hidden_layers": 12, "pad_token_id": 0, "position_embedding_type": "absolute",
    "transformers_version": "4.6.0.dev0", "type_vocab_size": 2, "use_cache": True, "vocab_size": 30522,
}
GOOGLE_BERT_CONFIG = {  # Google's bert_config.json (bert-base-chinese's before model_type existed)
    "attention_probs_dropout_prob": 0.1, "directionality": "bidi", "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
    "hidden_size": 768, "initializer_range": 0.02, "intermediate_size": 3072, "max_position_embeddings": 512,
    "num_attention_heads": 12, "num_hidden_layers": 12, "pooler_fc_size": 768, "pooler_num_attention_heads": 12,
    "pooler_num_fc_layers": 3, "pooler_size_per_head": 128, "pooler_type": "first_token_transform",
    "type_vocab_size": 2, "vocab_size": 21128,
}
NER_4_6 = {  # a BertForTokenClassification saved by 4.6.1: every generation default, _num_labels, null fields
    "_name_or_path": "dbmdz/bert-large-cased-finetuned-conll03-english", "_num_labels": 3,
    "add_cross_attention": False, "architectures": ["BertForTokenClassification"], "bad_words_ids": None,
    "bos_token_id": None, "chunk_size_feed_forward": 0, "decoder_start_token_id": None, "directionality": "bidi",
    "diversity_penalty": 0, "do_sample": False, "early_stopping": False, "encoder_no_repeat_ngram_size": 0,
    "eos_token_id": None, "finetuning_task": None, "forced_bos_token_id": None, "forced_eos_token_id": None,
    "gradient_checkpointing": False, "id2label": {"0": "O", "1": "B-PER", "2": "I-PER"}, "is_decoder": False,
    "is_encoder_decoder": False, "label2id": {"B-PER": 1, "I-PER": 2, "O": 0}, "length_penalty": 1, "max_length": 20,
    "min_length": 0, "no_repeat_ngram_size": 0, "num_beam_groups": 1, "num_beams": 1, "num_return_sequences": 1,
    "output_attentions": False, "output_hidden_states": False, "output_scores": False, "pooler_type":
    "first_token_transform", "prefix": None, "problem_type": None, "pruned_heads": {}, "remove_invalid_values": False,
    "repetition_penalty": 1, "return_dict": True, "return_dict_in_generate": False, "sep_token_id": None,
    "task_specific_params": None, "temperature": 1, "tie_encoder_decoder": False, "tie_word_embeddings": True,
    "tokenizer_class": None, "top_k": 50, "top_p": 1, "torchscript": False, "transformers_version": "4.6.1",
    "use_bfloat16": False,
}
OLD_CLASSIFIER = {  # transformers 2.x/3.x: output_past, num_labels, finetuning_task
    "architectures": ["BertForSequenceClassification"], "finetuning_task": "sst-2", "num_labels": 2,
    "output_past": True, "torchscript": False, "use_bfloat16": False, "is_decoder": False,
}
MODERN_CLASSIFIER = {  # 4.3x and 5.x: classifier_dropout, problem_type, torch_dtype or dtype
    "classifier_dropout": None, "problem_type": "single_label_classification", "torch_dtype": "float32",
    "dtype": "float32", "transformers_version": "5.24.0", "id2label": {"0": "NEGATIVE", "1": "POSITIVE"},
    "label2id": {"NEGATIVE": 0, "POSITIVE": 1}, "bos_token_id": None, "eos_token_id": None,
    "tie_word_embeddings": True, "is_decoder": False, "add_cross_attention": False, "position_embedding_type": None,
}
HUB_CONFIGS = {
    "bert-base-uncased": BERT_BASE_UNCASED,
    "google-bert_config.json": GOOGLE_BERT_CONFIG,
    "ner-4.6.1": {**BERT_BASE_UNCASED, **NER_4_6},
    "classifier-3.x": {**GOOGLE_BERT_CONFIG, **OLD_CLASSIFIER},
    "classifier-5.x": {**BERT_BASE_UNCASED, **MODERN_CLASSIFIER, "pad_token_id": None, "hidden_act": "gelu_new"},
}


@pytest.mark.parametrize("name", HUB_CONFIGS)
def test_hub_config_files_load_and_keep_their_shape(name):
    values = HUB_CONFIGS[name]
    config = BertConfig.from_dict(values)
    assert config.hidden_size == values["hidden_size"] and config.vocab_size == values["vocab_size"]
    assert config.layer_norm_eps == values.get("layer_norm_eps", 1e-12)
    assert config.pad_token_id == values.get("pad_token_id", 0)


def test_every_activation_name_has_an_implementation():
    from bertctl.config import ACTIVATIONS
    from bertctl.model import _ACTIVATIONS

    assert set(ACTIVATIONS) == set(_ACTIVATIONS)


def test_presets_follow_the_papers_shapes():
    shapes = {name: (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.intermediate_size)
              for name in PRESETS for c in [preset(name)]}
    assert shapes == {"tiny": (2, 128, 2, 512), "mini": (4, 256, 4, 1024), "small": (4, 512, 8, 2048),
                      "medium": (8, 512, 8, 2048), "base": (12, 768, 12, 3072), "large": (24, 1024, 16, 4096)}


def test_a_config_json_that_leaves_fields_out_reads_them_as_transformers_does():
    """transformers' BertConfig defaults fill what a config.json omits; different ones build another model."""
    assert BertConfig.from_dict({"hidden_size": 768}).to_dict() == {
        "vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
        "intermediate_size": 3072, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 512, "type_vocab_size": 2,
        "initializer_range": 0.02, "layer_norm_eps": 1e-12, "pad_token_id": 0, "tie_word_embeddings": True}


def test_given_values_beat_a_presets_and_a_config_json_beats_the_defaults_it_leaves_out(tmp_path):
    assert preset("tiny", num_hidden_layers=1).num_hidden_layers == 1
    assert model_config("tiny", {"vocab_size": 99}).vocab_size == 99  # the tokenizer's size over the preset's
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"hidden_size": 64, "num_attention_heads": 2, "vocab_size": 120}))
    assert model_config(str(path), {"vocab_size": 99, "num_hidden_layers": 3}).to_dict() == {
        **BertConfig().to_dict(), "hidden_size": 64, "num_attention_heads": 2, "vocab_size": 120,
        "num_hidden_layers": 3}


def test_a_tasks_defaults_yield_to_the_values_given():
    for make in (FinetuneConfig.squad, FinetuneConfig.ner, FinetuneConfig.choice):
        cfg = make(lr=1e-5, batch_size=8, epochs=5, max_seq_length=64)
        assert (cfg.lr, cfg.batch_size, cfg.epochs, cfg.max_seq_length) == (1e-5, 8, 5, 64)


def test_flags_beat_the_config_file_which_beats_defaults(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("steps: 50\nlr: 1\nout: runs/x\n")
    cfg = build_config(PretrainConfig, read_config_file(path), steps=7, lr=None)
    assert (cfg.steps, cfg.lr, str(cfg.out), cfg.batch_size) == (7, 1.0, "runs/x", 256)
    assert isinstance(cfg.lr, float)


def test_unknown_config_keys_are_refused(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"stepz": 5}))
    with pytest.raises(UsageError, match="unknown field.*stepz"):
        build_config(PretrainConfig, read_config_file(path))


@pytest.mark.parametrize(("name", "text", "field"), [
    ("run.yaml", "lr: 1.0e-4\nsteps: 5\nlr: 5.0e-5\n", "lr"),
    ("run.yml", "steps: 5\n'steps': 6\n", "steps"),
    ("run.json", '{"lr": 0.1, "steps": 5, "lr": 0.2}', "lr"),
    ("run.cfg", '{"seed": 1, "seed": 2}', "seed"),  # neither suffix: read as JSON
    ("run.json", '{"lr": {"x": 1}, "steps": 5, "steps": 6}', "steps"),  # a nested object's keys come first
])
def test_a_field_set_twice_in_a_config_file_is_refused(tmp_path, name, text, field):
    """YAML and JSON readers keep the last of two equal keys without a word: a forgotten `lr:` further down the
    file would silently win over the one just edited."""
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(UsageError, match=f"^--config: {re.escape(str(path))} sets {field} twice; keep one of them$"):
        read_config_file(path)


def test_nested_values_may_repeat_the_keys_of_the_fields(tmp_path):
    path = tmp_path / "run.json"
    path.write_text('{"lr": {"lr": 1}, "steps": 5}')
    assert read_config_file(path) == {"lr": {"lr": 1}, "steps": 5}


@pytest.mark.parametrize(("args", "said"), [
    (["finetune", "classify", "--train", "t.csv", "--model", ""], "--model must be a model folder or a hub id, got ''"),
    (["pretrain", "--corpus", "c", "--init-from", ""], "--init-from must be a model folder or a hub id, got ''"),
    (["pretrain", "--corpus", "c", "--init-from", " "], "--init-from must be a model folder or a hub id, got ' '"),
    (["pretrain", "--corpus", "c", "--tokenizer", ""], "--tokenizer must be a tokenizer or a hub id, got ''"),
    (["corpus", "build", "x.txt", "--tokenizer", ""], "--tokenizer must be a tokenizer or a hub id, got ''"),
    (["evaluate", "classify", "--data", "t.csv", "--model", ""], "--model: no model given; pass a fine-tuned model"),
    (["evaluate", "mlm", "--corpus", "c", "--model", ""], "--model: no model given; pass a pre-trained model"),
    (["convert", "", "--out", "o"], "SOURCE: give a file or folder name, got ''"),
    (["tokenizer", "encode", "-t", "", "hi"], "--tokenizer: empty; give a tokenizer or model folder"),
    (["pretrain", "--corpus", ""], "Invalid value for '--corpus': empty; give a path"),
    (["finetune", "glue", "sst2", "--config", " "], "Invalid value for '--config': empty; give a path"),
    (["finetune", "classify", "--train", ""], "Invalid value for '--train': empty; give a path"),
    (["corpus", "inspect", ""], "Invalid value for 'corpus': empty; give a path"),
    (["fill", "--file", "", "--model", "m"], "Invalid value for '--file' / '-f': empty; give a path"),
])
def test_an_empty_model_or_tokenizer_is_refused_naming_its_flag(args, said, tmp_path, monkeypatch):
    """`--model "$UNSET"` was read as the working folder (". is not a model folder") and `--init-from ''` tripped
    the --model-config exclusion; the line names the flag, before anything is read or written."""
    from bertctl.cli import app

    monkeypatch.chdir(tmp_path)
    writes = args[0] in ("finetune", "pretrain") or args[:2] == ["corpus", "build"]
    result = CliRunner().invoke(app, [*args, *(["--out", "o"] if writes else [])], prog_name="bertctl")
    assert result.exit_code == 2 and result.stderr.startswith(f"bertctl: error: {said}"), result.output
    assert result.stderr.count("\n") == 1 and not (tmp_path / "o").exists()


def test_unknown_keys_given_in_python_are_refused_in_one_line():
    with pytest.raises(UsageError, match="build_config: unknown field.*stepz for PretrainConfig"):
        build_config(PretrainConfig, {}, stepz=3)
    with pytest.raises(UsageError, match="model config: unknown field.*hidden for BertConfig"):
        preset("tiny", hidden=64)


def test_settings_that_exclude_each_other_are_refused_however_they_are_given(tmp_path):
    """The paper's defaults (10,000 warmup steps, BERT-base) apply only when neither side of a pair is given, so
    a given 10,000 or "base" conflicts too; a layer above (flags over the file) replaces the other side."""
    assert (PretrainConfig().warmup(), PretrainConfig().model_name()) == (10_000, "base")
    for values in ({"warmup_steps": 10_000, "warmup_fraction": 0.5}, {"init_from": tmp_path, "model_config": "base"}):
        with pytest.raises(UsageError, match="exclude each other"):
            PretrainConfig(**values)
        with pytest.raises(UsageError, match="exclude each other"):
            build_config(PretrainConfig, values)
    cfg = build_config(PretrainConfig, {"warmup_steps": 100, "model_config": "mini"}, warmup_fraction=0.1,
                       init_from=tmp_path)
    assert (cfg.warmup_steps, cfg.model_config, cfg.warmup_fraction, cfg.init_from) == (None, None, 0.1, tmp_path)
    assert PretrainConfig.quickstart(init_from=tmp_path, warmup_fraction=0.5).model_config is None


def test_the_quick_start_config_is_the_commands_small_run():
    """From Python, PretrainConfig() on the novels is BERT-base for 1M steps; quickstart() is the CLI's run."""
    cfg = PretrainConfig.quickstart(steps=20)
    assert (cfg.corpus, cfg.model_config, cfg.steps, cfg.batch_size, cfg.compile) == (None, "tiny", 20, 32, False)
    assert PretrainConfig.quickstart() == build_config(PretrainConfig, {**QUICKSTART_PRETRAIN})
    # the warmup is a share of the run: 100 of 2,500 steps, one of a 20-step try (which used to warm up for good)
    assert [PretrainConfig.quickstart(steps=steps).warmup() for steps in (2500, 20)] == [100, 1]
    assert (PretrainConfig.quickstart(warmup_steps=30).warmup(), PretrainConfig(warmup_steps=0).warmup()) == (30, 0)


@pytest.mark.parametrize(("cls", "text", "message"), [
    (CorpusConfig, "max_seq_length: big", "--config: max_seq_length must be a whole number, got 'big'"),
    (PretrainConfig, "steps: two", "--config: steps must be a whole number, got 'two'"),
    (PretrainConfig, 'lr: "fast"', "--config: lr must be a number, got 'fast'"),
    (PretrainConfig, 'batch_size: "8.5"', "--config: batch_size must be a whole number, got '8.5'"),
    (TokenizerTrainConfig, "vocab_size: 300.5", "--config: vocab_size must be a whole number, got 300.5"),
    (CorpusConfig, "max_seq_length: 64.7", "--config: max_seq_length must be a whole number, got 64.7"),
    (PretrainConfig, "lr: true", "--config: lr must be a number, got True"),
    (PretrainConfig, "steps: false", "--config: steps must be a whole number, got False"),
    (PretrainConfig, "seed: null", "--config: seed must be a whole number, got null"),
    (PretrainConfig, "micro_batch_size: x", "--config: micro_batch_size must be a whole number (or null), got 'x'"),
    (CorpusConfig, 'lowercase: "no"', "--config: lowercase must be true or false (or null), got 'no'"),
    (TokenizerTrainConfig, "lowercase: maybe", "--config: lowercase must be true or false, got 'maybe'"),
    (PretrainConfig, "model_config: 5", "--config: model_config must be a string (or null), got 5"),
    (PretrainConfig, "out: [a, b]", "--config: out must be a path, got ['a', 'b']"),
    (CorpusConfig, "inputs: {a: 1}", "--config: inputs must be a list of strings, got {'a': 1}"),
    (FinetuneConfig, "seeds: [1, x]", "--config: seeds must be a list of whole numbers, got [1, 'x']"),
    (FinetuneConfig, "label_names: [0.5, 1]", "--config: label_names must be a list of strings (or null)"),
])
def test_config_file_values_of_the_wrong_type_are_refused_in_one_line(tmp_path, cls, text, message):
    path = tmp_path / "run.yaml"
    path.write_text(text + "\n")
    with pytest.raises(UsageError) as error:
        build_config(cls, read_config_file(path))
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_config_file_values_take_their_fields_type(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("batch_size: 8.0\nlr: 1\nweight_decay: 0\nout: runs/x\nseeds: 7\ntext_columns: [a, b]\n"
                    "dropout: null\n")
    cfg = build_config(FinetuneConfig, read_config_file(path))
    assert (cfg.batch_size, cfg.lr, cfg.weight_decay, cfg.out, cfg.seeds, cfg.text_columns, cfg.dropout) == (
        8, 1.0, 0.0, Path("runs/x"), (7,), ("a", "b"), None)
    assert type(cfg.batch_size) is int and type(cfg.lr) is float and type(cfg.weight_decay) is float


@pytest.mark.parametrize(("text", "expected"), [
    ('steps: "8"\nlr: "0.1"\n', {"steps": 8, "lr": 0.1}),
    ("steps: ' 8.0 '\nbatch_size: '1_024'\nlr: '1E-3'\n", {"steps": 8, "batch_size": 1024, "lr": 1e-3}),
    ('warmup_steps: "10"\ndropout: ".5"\nmicro_batch_size: "+4"\n',
     {"warmup_steps": 10, "dropout": 0.5, "micro_batch_size": 4}),
    ('{"steps": "8", "warmup_fraction": "0.25", "adam_eps": "1e-8"}', {"steps": 8, "warmup_fraction": 0.25,
                                                                       "adam_eps": 1e-8}),
])
def test_a_quoted_number_in_a_config_file_is_read_as_its_flag_reads_the_text(tmp_path, text, expected):
    """`steps: "8"` was refused although `--steps 8` is text too: a file's quoted number is what the same text
    given to the flag is, of the field's type."""
    (tmp_path / "run.yaml").write_text(text)
    cfg = build_config(PretrainConfig, read_config_file(tmp_path / "run.yaml"))
    assert {name: getattr(cfg, name) for name in expected} == expected
    assert all(type(getattr(cfg, name)) is type(value) for name, value in expected.items())
    (tmp_path / "run.yaml").write_text('seeds: ["1", "2.0"]\nmax_seq_length: "64"\n')
    assert build_config(FinetuneConfig, read_config_file(tmp_path / "run.yaml")).seeds == (1, 2)


@pytest.mark.parametrize(("text", "said"), [
    # what the flag refuses is refused, naming the file's key; what the flag takes, the config checks as the flag's
    ('steps: "1e3"', "--config: steps must be a whole number, got '1e3'"),
    ('steps: "8."', "--config: steps must be a whole number, got '8.'"),
    ('steps: "\uff18"', "--config: steps must be a whole number, got '\uff18'"),  # a full-width 8: not ASCII
    ('lr: "0x10"', "--config: lr must be a number, got '0x10'"),
    ('warmup_steps: ""', "--config: warmup_steps must be a whole number (or null), got ''"),
    ('compile: "true"', "--config: compile must be true or false (or null), got 'true', text in quotes; write true "
                        "without them"),  # --compile is a switch: it takes no text
    ('steps: "0"', "--steps must be at least 1, got 0"),
    ('lr: "nan"', "--lr must be a finite number above 0, got nan"),
    ('steps: "99999999999999999999"', "--config: steps must be below 2^32, got 99999999999999999999"),
])
def test_a_quoted_number_the_flag_refuses_is_refused_as_the_flag_is(tmp_path, text, said):
    (tmp_path / "run.yaml").write_text(text + "\n")
    with pytest.raises(UsageError, match=f"^{re.escape(said)}$"):
        build_config(PretrainConfig, read_config_file(tmp_path / "run.yaml"))


@pytest.mark.parametrize(("text", "expected"), [
    ("steps: 010\nseed: +07\n", {"steps": 10, "seed": 7}),  # YAML 1.1 reads 010 as octal 8; --steps 010 is 10
    ("steps: 1_000\nbatch_size: 8\nlr: 0.5\n", {"steps": 1000, "batch_size": 8, "lr": 0.5}),
])
def test_yaml_whole_numbers_are_read_as_their_flag_reads_them(tmp_path, text, expected):
    (tmp_path / "run.yaml").write_text(text)
    cfg = build_config(PretrainConfig, read_config_file(tmp_path / "run.yaml"))
    assert {name: getattr(cfg, name) for name in expected} == expected


@pytest.mark.parametrize(("text", "said"), [
    ("steps: 0x10", "--config: steps must be a whole number, got '0x10'"),  # YAML 1.1: 16; the flag refuses it
    ("steps: 0b11", "--config: steps must be a whole number, got '0b11'"),
    ("steps: 1:30", "--config: steps must be a whole number, got '1:30'"),  # YAML 1.1's base 60: 90
    ("lr: 1:30.5", "--config: lr must be a number, got '1:30.5'"),
])
def test_yaml_numbers_the_flag_refuses_are_refused(tmp_path, text, said):
    (tmp_path / "run.yaml").write_text(text + "\n")
    with pytest.raises(UsageError, match=f"^{re.escape(said)}$"):
        build_config(PretrainConfig, read_config_file(tmp_path / "run.yaml"))


@pytest.mark.parametrize("text", ["1e-3", "0.001"])
def test_a_python_caller_gives_numbers_as_numbers_written_either_way(text):
    """Text for a number field is a file's or a flag's way (read as the flag reads it); from Python `lr="1e-3"` was
    taken while `lr="0.001"` was refused, as a rule for PyYAML's unquoted `1e-3` reached the dataclass."""
    with pytest.raises(UsageError, match=f"^FinetuneConfig.lr must be a number, got '{text}'$"):
        FinetuneConfig(lr=text)


def test_yaml_exponents_without_a_dot_are_numbers(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("lr: 1e-4\nadam_eps: 1.5E-8\n")  # PyYAML reads both as text
    assert read_config_file(path)["lr"] == "1e-4"
    cfg = build_config(PretrainConfig, read_config_file(path))
    assert (cfg.lr, cfg.adam_eps) == (1e-4, 1.5e-8)


@pytest.mark.parametrize(("name", "text", "said"), [
    ("run.yaml", "steps: 1e6\n", "steps must be a whole number, got '1e6'"),  # PyYAML: text
    ("run.yaml", "warmup_steps: 1.0E+4\n", "warmup_steps must be a whole number (or null), got 1.0E+4"),
    ("run.json", '{"batch_size": 2.56e2}', "batch_size must be a whole number, got 2.56e2"),  # JSON: 256.0
    ("run.json", '{"steps": 1e30}', "steps must be a whole number, got 1e30"),
])
def test_whole_number_fields_in_a_config_file_refuse_exponents_as_their_flags_do(tmp_path, name, text, said):
    """`--steps 1e3` is refused, but `steps: 1e3` in a --config file ran 1000 steps: a flag's config field takes
    from a file what the flag takes, a whole number (`8`, or `8.0` as `--steps 8.0`)."""
    (tmp_path / name).write_text(text)
    with pytest.raises(UsageError, match=f"^--config: {re.escape(said)}$"):
        build_config(PretrainConfig, read_config_file(tmp_path / name))
    (tmp_path / name).write_text('{"steps": 1000.0, "warmup_steps": 10, "lr": 1e-3}')
    cfg = build_config(PretrainConfig, read_config_file(tmp_path / name))
    assert (cfg.steps, cfg.warmup_steps, cfg.lr) == (1000, 10, 1e-3) and type(cfg.steps) is int
    assert type(cfg.lr) is float  # a float field keeps no trace of the file's text


def test_a_lone_string_for_a_list_field_is_one_item_not_its_characters(tmp_path):
    path = tmp_path / "corpus.yaml"
    path.write_text("inputs: /data/file.txt\n")
    assert build_config(CorpusConfig, read_config_file(path)).inputs == ("/data/file.txt",)


def test_list_items_left_empty_are_refused_and_whole_numbers_name_classes(tmp_path):
    """`--seeds 1,,2` ran seeds 1 and 2, hiding a typo; `label_names: [0, 1]`, the commonest class names, was
    refused as not strings although the docs say lists may be written as YAML lists."""
    for text in ("1,,2", ",1", "1,,"):
        with pytest.raises(UsageError, match=f"^--seeds must be a list of whole numbers, got '{text}'$"):
            build_config(FinetuneConfig, seeds=text)
    path = tmp_path / "run.yaml"
    path.write_text("label_names: [0, 1]\n")
    assert build_config(FinetuneConfig, read_config_file(path)).label_names == ("0", "1")
    path.write_text("label_names: [yes, no]\n")  # YAML's booleans: not the names "yes" and "no", nor True and False
    with pytest.raises(UsageError, match=r"^--config: label_names must be a list of strings \(or null\), got \[True"):
        build_config(FinetuneConfig, read_config_file(path))


def test_seeds_in_a_config_file_may_be_written_as_the_flag_takes_them(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text('seeds: "1,2, 3"\n')
    assert build_config(FinetuneConfig, read_config_file(path)).seeds == (1, 2, 3)
    path.write_text('seeds: "1,2.0"\n')  # each item as `--seed 2.0` takes it; not `1e0`, which `--seed` refuses
    assert build_config(FinetuneConfig, read_config_file(path)).seeds == (1, 2)
    path.write_text('seeds: "1_0,2"\n')  # `--seed 1_0` takes it, and refuses digits other than ASCII ones
    assert build_config(FinetuneConfig, read_config_file(path)).seeds == (10, 2)
    for text in ("1,x", "1,1e0", "1,\u0662"):
        path.write_text(f'seeds: "{text}"\n')
        with pytest.raises(UsageError, match=f"^--config: seeds must be a list of whole numbers, got '{text}'$"):
            build_config(FinetuneConfig, read_config_file(path))


def test_flags_of_the_wrong_type_name_the_flag():
    with pytest.raises(UsageError, match="^--batch-size must be a whole number, got '8'$"):
        build_config(PretrainConfig, {}, batch_size="8")
    with pytest.raises(UsageError, match="^--batch-size must be a whole number, got '8'$"):  # the flag's value
        build_config(PretrainConfig, {"batch_size": 4}, batch_size="8")


def test_types_are_checked_once_on_the_value_in_force():
    """The config checks its fields' types itself; a file value a flag replaces is never used, nor refused."""
    assert build_config(PretrainConfig, {"steps": "two", "lr": "fast"}, steps=5, lr=1).steps == 5


@pytest.mark.parametrize("cfg", [
    CorpusConfig(inputs=("a.txt",), tokenizer=Path("tok"), out=Path("c"), lowercase=True, shard_size_mb=0.5),
    PretrainConfig(corpus=Path("c"), micro_batch_size=16, warmup_fraction=0.1, compile=False, dropout=0.0),
    FinetuneConfig(model=Path("m"), task="sst2", text_columns=("a", "b"), label_names=("neg", "pos"), seeds=(1, 2)),
    TokenizerTrainConfig(inputs=("a.txt", "b.txt"), out=Path("tok"), strip_accents=False),
])
def test_every_config_survives_its_json_record(cfg):
    """run.json / provenance.json hold config_to_dict's view: reading it back gives the same config."""
    record = json.loads(json.dumps(config_to_dict(cfg)))
    assert build_config(type(cfg), record) == cfg


@pytest.mark.parametrize(("changes", "message"), [
    ({"hidden_size": "big"}, "model config: hidden_size must be a whole number, got 'big'"),
    ({"vocab_size": 300.5}, "model config: vocab_size must be a whole number, got 300.5"),
    ({"hidden_dropout_prob": "0.1"}, "model config: hidden_dropout_prob must be a number, got '0.1'"),
    ({"pad_token_id": "0"}, "model config: pad_token_id must be a whole number (or null), got '0'"),
    ({"num_hidden_layers": None}, "model config: num_hidden_layers must be a whole number, got null"),
    ({"hidden_act": 5}, "model config: hidden_act must be a string, got 5"),
    ({"layer_norm_eps": math.nan}, "model config: layer_norm_eps must be a finite numbe"),
    ({"initializer_range": -0.02}, "model config: initializer_range must be a finite number"),
])
def test_model_configs_of_the_wrong_type_are_refused_in_one_line(changes, message):
    with pytest.raises(UsageError) as error:
        BertConfig.from_dict({**BERT_BASE_UNCASED, **changes})
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_transformers_style_numbers_and_nulls_still_load():
    config = BertConfig.from_dict({**BERT_BASE_UNCASED, "hidden_dropout_prob": 0, "attention_probs_dropout_prob": 0,
                                   "initializer_range": 0.02, "layer_norm_eps": 1e-12, "pad_token_id": None,
                                   "hidden_size": 768.0})
    assert (config.hidden_dropout_prob, config.pad_token_id, config.hidden_size) == (0.0, None, 768)
    assert type(config.hidden_dropout_prob) is float and type(config.hidden_size) is int


@pytest.mark.parametrize("name", PRESETS)
def test_presets_load_by_name_and_through_config_json(tmp_path, name):
    (tmp_path / "config.json").write_text(json.dumps(preset(name).to_dict()))
    assert model_config(name) == preset(name) == model_config(str(tmp_path))


def test_a_model_config_json_with_json_nan_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({**BERT_BASE_UNCASED, "layer_norm_eps": math.nan}))
    with pytest.raises(UsageError, match="layer_norm_eps must be a finite number, 0 or more, got nan"):
        model_config(str(tmp_path))


def test_a_binary_config_file_is_refused_in_one_line(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    with pytest.raises(UsageError, match=r"^--config: .*run.yaml is not UTF-8 text; give a YAML or JSON file$"):
        read_config_file(path)


@pytest.mark.parametrize(("content", "message"), [
    (b"{not json", "is not valid JSON"), (b"\xff\xfe\x00", "is not UTF-8 text"), (b"[1, 2]", "must hold a mapping"),
])
def test_model_config_file_errors_name_the_model_config_flag(tmp_path, content, message):
    (tmp_path / "config.json").write_bytes(content)
    with pytest.raises(UsageError, match=f"^--model-config: .*config.json {message}"):
        model_config(str(tmp_path))


TRAINING_CONFIGS = [PretrainConfig, FinetuneConfig]
BAD_OPTIMIZER_SETTINGS = [
    ("lr", 0.0), ("lr", -1e-4), ("lr", math.nan), ("lr", math.inf),
    ("adam_beta1", 1.5), ("adam_beta1", 1.0), ("adam_beta1", -0.1), ("adam_beta1", math.nan), ("adam_beta2", 1.0),
    ("adam_eps", -1.0), ("adam_eps", 0.0), ("adam_eps", math.nan), ("adam_eps", math.inf),
    ("weight_decay", -1.0), ("weight_decay", math.nan), ("weight_decay", math.inf),
    ("clip", -1.0), ("clip", math.nan), ("clip", math.inf),
]


@pytest.mark.parametrize("cls", TRAINING_CONFIGS)
@pytest.mark.parametrize(("name", "value"), BAD_OPTIMIZER_SETTINGS)
def test_optimizer_settings_torch_would_refuse_or_turn_into_nan_weights_are_refused(cls, name, value):
    with pytest.raises(UsageError, match=f"^--{name.replace('_', '-')} must be .*, got {value}$"):
        cls(**{name: value})


@pytest.mark.parametrize("cls", TRAINING_CONFIGS)
def test_optimizer_settings_at_their_bounds_are_accepted(cls):
    cfg = cls(adam_beta1=0.0, adam_beta2=0.0, weight_decay=0.0, clip=0.0, lr=1e-9, adam_eps=1e-30,
              warmup_fraction=1.0)
    assert (cfg.clip, cfg.warmup_fraction) == (0.0, 1.0)


def test_micro_batches_make_up_the_global_batch_exactly():
    assert PretrainConfig(batch_size=8).micro_batches(2) == (4, 1)  # a rank's whole share at once
    assert FinetuneConfig(batch_size=5).micro_batch(2) == 3  # rounded up: no example left out
    assert PretrainConfig(batch_size=8, micro_batch_size=2).micro_batches(2) == (2, 2)
    with pytest.raises(UsageError, match=r"^--micro-batch-size 3 does not divide the per-process batch 8$"):
        PretrainConfig(batch_size=8, micro_batch_size=3).micro_batches(1)
    with pytest.raises(UsageError, match=r"^--batch-size 8 is not divisible by the 3 processes$"):
        PretrainConfig(batch_size=8).micro_batches(3)


FLOAT_FIELDS = [(cls, f.name) for cls in (BertConfig, CorpusConfig, PretrainConfig, FinetuneConfig)
                for f in fields(cls) if float in (typing.get_type_hints(cls)[f.name], *typing.get_args(
                    typing.get_type_hints(cls)[f.name]))]


@pytest.mark.parametrize(("cls", "name"), FLOAT_FIELDS, ids=[f"{c.__name__}.{n}" for c, n in FLOAT_FIELDS])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_no_float_field_takes_nan_or_infinity(cls, name, value):
    with pytest.raises(UsageError, match=name.replace("_", "[-_]")):
        cls(**{name: value})


@pytest.mark.parametrize("length", [4, 65536, 100000])
def test_corpus_max_seq_length_error_gives_the_range(length):
    with pytest.raises(UsageError, match=r"must be from 5 \(\[CLS\] A \[SEP\] B \[SEP\]\) to 65535"):
        CorpusConfig(max_seq_length=length)


@pytest.mark.parametrize(("values", "said"), [
    ({"max_seq_length": 0}, r"--max-seq-length 0: must be at least 3 \(\[CLS\] A \[SEP\]\)"),
    ({"max_seq_length": -5}, r"--max-seq-length -5: must be at least 3"),
    ({"micro_batch_size": 0}, r"--micro-batch-size must be at least 1, got 0"),
    ({"micro_batch_size": -8}, r"--micro-batch-size must be at least 1, got -8"),
    ({"save_every": -1}, r"--save-every must be 0 or more, got -1$"),
])
def test_finetune_lengths_and_micro_batches_below_their_least_name_that_least(values, said):
    """`--max-seq-length 0` said "at least 1" (1 and 2 are refused too), `--micro-batch-size 0` "must divide
    --batch-size 32": each now says the least it takes, as pretrain does for its micro-batch."""
    with pytest.raises(UsageError, match=f"^{said}"):
        FinetuneConfig(**values)


@pytest.mark.parametrize(("args", "text", "message"), [
    (["pretrain"], "steps: two\n", "--config FILE: steps must be a whole number, got 'two'"),
    (["pretrain"], "adam_beta1: 1.5\n", "--adam-beta1 must be in [0, 1), got 1.5"),
    (["pretrain", "--lr", "nan"], "steps: 2\n", "--lr must be a finite number above 0, got nan"),
    (["corpus", "build"], 'lowercase: "no"\n', "--config FILE: lowercase must be true or false (or null), got 'no'"),
    # what the flag refuses (`--steps 1e3`, `--compile 1`), the file refuses, naming itself and the field
    (["pretrain"], "steps: 1e3\n", "--config FILE: steps must be a whole number, got '1e3'"),
    (["pretrain"], "steps: 1.0e+3\n", "--config FILE: steps must be a whole number, got 1.0e+3"),
    (["pretrain"], "compile: 1\n", "--config FILE: compile must be true or false (or null), got 1"),
    (["corpus", "build"], "max_seq_length: 1.28e+2\n",
     "--config FILE: max_seq_length must be a whole number, got 1.28e+2"),
    (["tokenizer", "train"], "vocab_size: 3e2\n", "--config FILE: vocab_size must be a whole number, got '3e2'"),
    (["finetune", "glue", "rte"], "seeds: [1.0e+0]\n",
     "--config FILE: seeds must be a list of whole numbers, got [1.0e+0]"),
])
def test_bad_config_values_reach_the_user_as_one_line_and_exit_2(tmp_path, args, text, message):
    from bertctl.cli import app

    (tmp_path / "bad.yaml").write_text(text)
    result = CliRunner().invoke(app, [*args, "--config", str(tmp_path / "bad.yaml")])
    said = f"bertctl: error: {message.replace('FILE', str(tmp_path / 'bad.yaml'))}"
    assert result.exit_code == 2 and result.stderr.strip().splitlines() == [said], result.output


@pytest.mark.parametrize(("cls", "values", "message"), [
    (PretrainConfig, {"steps": "10"}, "PretrainConfig.steps must be a whole number, got '10'"),
    (PretrainConfig, {"compile": "yes"}, "PretrainConfig.compile must be true or false (or null), got 'yes'"),
    (PretrainConfig, {"out": None}, "PretrainConfig.out must be a path, got null"),
    (FinetuneConfig, {"seeds": None}, "FinetuneConfig.seeds must be a list of whole numbers, got null"),
    (BertConfig, {"hidden_size": "x"}, "BertConfig.hidden_size must be a whole number, got 'x'"),
])
def test_configs_built_in_python_check_types_in_one_line(cls, values, message):
    with pytest.raises(UsageError) as error:
        cls(**values)
    assert str(error.value) == message


def test_configs_built_in_python_take_their_fields_types():
    assert TokenizerTrainConfig(inputs="novels.txt", out="tok").inputs == ("novels.txt",)
    assert FinetuneConfig(text_columns="review", seeds=7, batch_size=8.0).text_columns == ("review",)
    cfg = PretrainConfig(out="runs/x", lr=1, model_config=Path("my/config.json"))
    assert cfg.out == Path("runs/x") and type(cfg.lr) is float and cfg.model_config == "my/config.json"
    assert FinetuneConfig(data=Path("glue_data")).data == "glue_data"


@pytest.mark.parametrize(("cls", "field", "what"), [
    (FinetuneConfig, "model", "model folder"), (PretrainConfig, "init_from", "model folder"),
    (PretrainConfig, "tokenizer", "tokenizer"), (CorpusConfig, "tokenizer", "tokenizer")])
@pytest.mark.parametrize("name", ["./nope", "nope/"])
def test_a_model_or_tokenizer_written_like_a_path_is_checked_before_it_becomes_a_hub_id(
        tmp_path, monkeypatch, cls, field, what, name):
    """As a Path, `./nope` is `nope`, which a run would look up on the hub; in Python as on the command line."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=f"^{what} {name} does not exist$"):
        cls(**{field: name})
    (tmp_path / "nope").mkdir()
    assert getattr(cls(**{field: name}), field) == Path("nope")


def test_paths_in_configs_expand_the_home_folder(tmp_path, monkeypatch):
    """`out: ~/runs/x` in a --config file reaches the config unexpanded; no shell is there to expand it."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "run.yaml").write_text("out: ~/runs/x\ninit_from: ~/ckpt\n")
    cfg = build_config(PretrainConfig, read_config_file(tmp_path / "run.yaml"))
    assert (cfg.out, cfg.init_from) == (tmp_path / "runs" / "x", tmp_path / "ckpt")
    assert FinetuneConfig(train="~/t.csv").train == str(tmp_path / "t.csv")  # a data field stays a str
    (tmp_path / "model.json").write_text(json.dumps({"hidden_size": 64, "num_hidden_layers": 1,
                                                     "num_attention_heads": 2, "intermediate_size": 128}))
    assert model_config("~/model.json").hidden_size == 64


@pytest.mark.parametrize(("cls", "field", "flag"), [
    (CorpusConfig, "seed", "--seed"), (PretrainConfig, "seed", "--seed"), (FinetuneConfig, "seeds", "--seeds")])
@pytest.mark.parametrize("seed", [-1, 2**32, 10**20])
def test_seeds_share_one_range_in_every_command(cls, field, flag, seed):
    """numpy refused negative seeds and torch ones past 2**64, each as a bare ValueError (exit 1)."""
    with pytest.raises(UsageError, match=rf"^{flag} {seed}: give a whole number from 0 to 4294967295$"):
        cls(**{field: seed})
    assert cls(**{field: 2**32 - 1})


def test_a_vocabulary_size_past_any_bert_vocabulary_is_refused_before_training():
    """--vocab-size 2147483648 aborted inside the Rust trainer (memory allocation failed, exit 134)."""
    with pytest.raises(UsageError, match=r"^--vocab-size 2147483648: give at most 1,000,000$"):
        TokenizerTrainConfig(inputs=("a.txt",), out=Path("tok"), vocab_size=2**31)


@pytest.mark.parametrize("workers", [257, 10_000, 10**9])
def test_a_loader_worker_count_past_any_machine_is_refused(workers):
    """`pretrain --num-workers 10000` forked loader workers one after another until killed, each torch's
    "excessive worker creation" warning twice over."""
    with pytest.raises(UsageError, match=rf"^--num-workers {workers}: give at most 256$"):
        PretrainConfig(num_workers=workers)
    assert PretrainConfig(num_workers=256).num_workers == 256


def test_usable_cores_are_the_processs_affinity_not_the_machines_count(monkeypatch):
    """Under taskset or a container's cpuset the machine has more cores than the process may run on: worker
    counts default to the affinity's."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {2, 5}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert usable_cores() == 2
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)  # macOS, Windows
    assert usable_cores() == 64
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert usable_cores() == 1


def test_a_model_config_file_that_sets_no_shape_is_refused(tmp_path):
    """A run's --config given to --model-config used to train BERT-base without a word."""
    (tmp_path / "run.yaml").write_text("steps: 10\nlr: 0.001\n")
    with pytest.raises(UsageError, match="sets none of hidden_size, num_hidden_layers"):
        model_config(str(tmp_path / "run.yaml"))
    (tmp_path / "two.yaml").write_text("num_hidden_layers: 2\n")
    assert model_config(str(tmp_path / "two.yaml")).num_hidden_layers == 2


def test_a_resumed_run_may_name_its_folders_otherwise_but_not_change_them(tmp_path, monkeypatch):
    """`--model /abs/base/final` then `--model ./base/final` (or `base/final/`, or a name relative to the folder
    the run started in) is one folder; a folder of the same name elsewhere is not."""
    from bertctl.config_records import config_to_dict, refuse_changed_settings

    for name in ("base/final", "other", "glue", "sub/glue"):
        (tmp_path / name).mkdir(parents=True)
    compared = ("model", "data")
    started = config_to_dict(FinetuneConfig(model=tmp_path / "base" / "final", data="glue"))
    monkeypatch.chdir(tmp_path)
    refuse_changed_settings(FinetuneConfig(model="./base/final", data="glue/"), started, compared, "run", "start again",
                            started_in=str(tmp_path))
    monkeypatch.chdir(tmp_path / "sub")
    refuse_changed_settings(FinetuneConfig(model="../base/final", data="../glue"), started, compared, "run", "again",
                            started_in=str(tmp_path))
    with pytest.raises(UsageError, match=r"^--resume: the run in run was started with --data glue \(now \./glue\); "
                                         r"resume it with the same settings, or start again$"):
        refuse_changed_settings(FinetuneConfig(model="../base/final", data="glue"), started, compared, "run",
                                "start again", started_in=str(tmp_path))
    with pytest.raises(UsageError, match=r"started with --dropout not given \(now 0\.2\)"):
        refuse_changed_settings(FinetuneConfig(dropout=0.2), {"dropout": None}, ("dropout",), "run", "again")
    del started["data"]  # an older run's record without the setting: not compared
    refuse_changed_settings(FinetuneConfig(model="../base/final", data="glue"), started, compared, "run", "again",
                            started_in=str(tmp_path))


@pytest.mark.parametrize(("name", "content", "expected"), [
    ("run.YAML", "steps: 7\n", 7),  # the suffix in capitals
    ("run.conf", "steps: 8\n", 8),  # any other suffix is YAML, which reads JSON too
    ("run.json", "\ufeff{\"steps\": 9}", 9),  # a byte-order mark from a Windows editor
    ("run.conf", "{\n\t\"steps\": 10\n}", 10),  # JSON indented with tabs, which YAML refuses
])
def test_config_files_are_read_whatever_their_suffix_case_or_bom(tmp_path, name, content, expected):
    (tmp_path / name).write_text(content, encoding="utf-8")
    assert read_config_file(tmp_path / name)["steps"] == expected


def test_a_yml_file_is_read_as_yaml_even_when_it_holds_json(tmp_path):
    (tmp_path / "run.yml").write_text("{\n\t\"steps\": 10\n}", encoding="utf-8")
    with pytest.raises(UsageError, match="run.yml is not valid YAML: "):
        read_config_file(tmp_path / "run.yml")


@pytest.mark.parametrize(("values", "said"), [
    ({1: 2}, "field names are text; 1 is not"),
    ({None: 2, "steps": 3}, "field names are text; None is not"),
    ([1], "expected a mapping of field names to values, got list"),
])
def test_config_values_that_are_not_a_mapping_of_names_are_refused_in_one_line(values, said):
    with pytest.raises(UsageError, match=f"^--config: {said}"):
        build_config(PretrainConfig, values)


@pytest.mark.parametrize(("field", "value", "said"), [
    ("steps", 10**23, r"must be below 2\^32"),
    ("batch_size", 2**32, r"must be below 2\^32"),
    ("corpus", "", "must be a path"),
])
def test_numbers_torch_would_overflow_on_and_empty_paths_are_refused(field, value, said):
    with pytest.raises(UsageError, match=f"--config: {field} {said}"):
        build_config(PretrainConfig, {field: value})


@pytest.mark.parametrize(("command", "flag"), [(["glue", "sst2"], "--data"), (["ner"], "--train"),
                                               (["choice"], "--validation")])
def test_an_empty_data_flag_is_refused_naming_the_flag(command, flag, tmp_path):
    """`--data ''` (an unset shell variable) reached the check that inputs lie outside --out, which named it
    `path:`; every data flag is refused by the config, by its own name, before anything is read or written."""
    from bertctl.cli import app

    out = tmp_path / "run"
    args = ["finetune", *command, "--model", str(tmp_path), "--out", str(out), flag, ""]
    result = CliRunner().invoke(app, args, prog_name="bertctl")
    assert result.exit_code == 2 and result.stderr == f"bertctl: error: {flag} must be a path, got ''\n"
    assert not out.exists()


@pytest.mark.parametrize("device", ["mps", "meta", "xpu", "gpu"])
def test_devices_bertctl_does_not_run_on_are_refused_in_one_line(device):
    from bertctl.training import pick_device

    with pytest.raises(UsageError, match=f"^--device: '{device}' is not a device bertctl runs on"):
        pick_device(device)


@pytest.mark.parametrize(("values", "said"), [
    ({"label_names": ","}, "label_names must be a list of strings"),
    ({"label_names": []}, "--label-names: give the class names"),
    ({"label_names": "a,b", "problem": "regression"}, "--problem regression has none"),
])
def test_label_names_that_would_be_ignored_are_refused(values, said):
    with pytest.raises(UsageError, match=said):
        FinetuneConfig(**values)


@pytest.mark.parametrize(("cls", "field", "others"), [
    (FinetuneConfig, "model", {}), (PretrainConfig, "init_from", {}), (PretrainConfig, "tokenizer", {}),
    (CorpusConfig, "tokenizer", {}), (FinetuneConfig, "model", {"task": "sst2"})])
def test_a_recorded_local_folder_is_not_read_back_as_a_hub_id(tmp_path, monkeypatch, cls, field, others):
    """run.json recorded `--model ./runs/final` as `runs/final`, a hub id once the record is given back as --config
    from another working folder: the run fetched (or took from the cache) that hub repository and trained another
    model without a word. The record keeps it a path, so there it is refused as a folder that is not there."""
    (tmp_path / "here" / "runs" / "final").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    record = json.loads(json.dumps(config_to_dict(cls(**{field: "./runs/final"}, **others))))
    assert record[field] == "./runs/final"
    assert getattr(build_config(cls, record), field) == Path("runs/final")  # read back here: the same folder
    monkeypatch.chdir(tmp_path / "elsewhere")
    with pytest.raises(UsageError, match=r"does not exist$"):
        build_config(cls, record)
    assert config_to_dict(cls(**{field: "bert-base-uncased"}, **others))[field] == "bert-base-uncased"  # a hub id


@pytest.mark.parametrize(("cls", "field", "others"), [
    (FinetuneConfig, "train", {}), (FinetuneConfig, "validation", {}), (FinetuneConfig, "data", {"task": "sst2"}),
    (TokenizerTrainConfig, "inputs", {"out": "tok"}), (CorpusConfig, "inputs", {}), (CorpusImportConfig, "inputs", {})])
def test_a_recorded_local_data_path_is_not_read_back_as_a_hub_dataset(tmp_path, monkeypatch, cls, field, others):
    """`--train copies/squad` (a save_to_disk folder) or `tokenizer train corpus/novels` was recorded as spelt,
    which from another working folder names the hub dataset `copies/squad`: the record given back as --config
    fetched (or took from the cache) that dataset instead of saying the folder is not there, as the model's does."""
    from bertctl.data.sources import expand_inputs
    from bertctl.hub import is_hub_dataset_id

    (tmp_path / "here" / "corpora" / "novels").mkdir(parents=True)
    (tmp_path / "here" / "corpora" / "novels" / "a.txt").write_text("text\n")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    given = ("corpora/novels",) if field == "inputs" else "corpora/novels"
    record = json.loads(json.dumps(config_to_dict(cls(**{field: given}, **others))))
    name = record[field][0] if field == "inputs" else record[field]
    assert name == "./corpora/novels"
    read_back = getattr(build_config(cls, record), field)
    assert Path(read_back[0] if field == "inputs" else read_back).resolve() == Path("corpora/novels").resolve()
    monkeypatch.chdir(tmp_path / "elsewhere")
    if field == "inputs":
        with pytest.raises(UsageError, match="nothing matched './corpora/novels'"):
            expand_inputs([name])
    else:
        assert not is_hub_dataset_id(name)
    hub = ("wikitext",) if field == "inputs" else "rajpurkar/squad"
    assert config_to_dict(cls(**{field: hub}, **others))[field] == (list(hub) if field == "inputs" else hub)
    monkeypatch.chdir(tmp_path / "here")
    for spelt in ("./corpora/novels", "corpora/novels/"):  # already read as a path: kept as spelt
        given = (spelt,) if field == "inputs" else spelt
        assert config_to_dict(cls(**{field: given}, **others))[field] == (list(given) if field == "inputs" else spelt)


@pytest.mark.parametrize(("cls", "given", "taken"), [
    (PretrainConfig, {"precision": "BF16", "device": "CPU", "schedule": "Cosine", "optimizer": "LAMB",
                      "model_config": "Tiny"},
     {"precision": "bf16", "device": "cpu", "schedule": "cosine", "optimizer": "lamb", "model_config": "tiny"}),
    (FinetuneConfig, {"precision": "FP32", "device": "CUDA:1", "schedule": "Constant", "problem": "Regression"},
     {"precision": "fp32", "device": "cuda:1", "schedule": "constant", "problem": "regression"}),
    (CorpusConfig, {"objective": "MLM+SOP", "masking": "Static"}, {"objective": "mlm+sop", "masking": "static"}),
])
def test_names_from_a_fixed_set_are_taken_in_any_case_and_kept_in_lower_case(cls, given, taken):
    """`--precision BF16` and `--device CUDA` were refused while GLUE task names are taken in any case; the config
    (and so run.json) holds the one spelling."""
    cfg = cls(**given)
    assert {name: getattr(cfg, name) for name in taken} == taken
    assert {name: config_to_dict(cfg)[name] for name in taken} == taken


def test_a_preset_is_named_in_any_case_and_a_path_is_not_lowered(tmp_path):
    assert model_config("Tiny") == preset("tiny") == preset("TINY")
    (tmp_path / "Mine").mkdir()
    (tmp_path / "Mine" / "config.json").write_text(json.dumps(preset("mini").to_dict()))
    assert PretrainConfig(model_config=str(tmp_path / "Mine")).model_config == str(tmp_path / "Mine")


def test_precision_and_device_of_the_scoring_functions_are_taken_in_any_case():
    import torch

    from bertctl.training import pick_device, resolve_precision

    assert pick_device("CPU") == torch.device("cpu")
    assert resolve_precision("FP32", torch.device("cpu")) == "fp32"
    assert resolve_precision("Auto", torch.device("cpu")) == "fp32"


@pytest.mark.parametrize(("capability", "chosen"),
                         [((7, 0), "fp32"), ((7, 5), "fp32"), ((8, 0), "bf16"), ((9, 0), "bf16")])
def test_auto_precision_takes_bf16_only_where_the_gpu_computes_it(monkeypatch, capability, chosen):
    """V100 and T4 emulate bf16 (torch.cuda.is_bf16_supported() says yes there): slower than fp32, and
    torch.compile refuses it, so auto stays in fp32 on them."""
    import torch

    from bertctl.training import resolve_precision

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert resolve_precision("auto", torch.device("cuda")) == chosen


@pytest.mark.parametrize(("world", "calls"), [("1", [1]), ("2", [])])
def test_a_gpu_index_becomes_the_current_gpu_outside_torchrun_only(monkeypatch, world, calls):
    """Under torchrun every process takes its local rank's GPU; making cuda:N current first would open a CUDA
    context on GPU N in every process."""
    import torch

    from bertctl.training import pick_device

    made_current = []
    monkeypatch.setenv("WORLD_SIZE", world)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: made_current.append(torch.device(device).index))
    assert pick_device("cuda:1") == torch.device("cuda", 1)
    assert made_current == calls
