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
    ({"hidden_act": "tanh"}, "hidden_act"),
    ({"hidden_dropout_prob": 1.0}, "hidden_dropout_prob"),
    ({"num_hidden_layers": 0}, "num_hidden_layers"),
])
def test_bert_config_refuses_impossible_shapes(changes, message):
    with pytest.raises(UsageError, match=message):
        BertConfig(**changes)


def test_variants_bertctl_would_compute_wrongly_are_refused():
    with pytest.raises(UsageError, match="position_embedding_type"):
        BertConfig.from_dict({"position_embedding_type": "relative_key"})


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
