"""Configuration: BertConfig's JSON round trip and validation, presets, and the flag/file precedence."""

from __future__ import annotations

import json

import pytest

from bertctl.config import PRESETS, BertConfig, PretrainConfig, build_config, model_config, preset, read_config_file
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
