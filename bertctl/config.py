"""Frozen configuration dataclasses and model presets; torch-free so the CLI stays fast.

Precedence for every run config: dataclass defaults -> preset -> `--config` file -> command-line flags.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import types
import typing
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

from bertctl.errors import UsageError

ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu", "swish")


@dataclass(frozen=True)
class BertConfig:
    """The encoder's shape, with transformers' field names so config.json is shared with it."""

    vocab_size: int = 30522  # rows of the word-embedding matrix (= tokenizer vocabulary)
    hidden_size: int = 768  # H: width of every token vector
    num_hidden_layers: int = 12  # L: post-LN Transformer layers
    num_attention_heads: int = 12  # A: heads per self-attention; hidden_size % A == 0
    intermediate_size: int = 3072  # feed-forward width, 4 x H in the paper
    hidden_act: str = "gelu"  # exact (erf) GELU as in the paper
    hidden_dropout_prob: float = 0.1  # dropout on embeddings and sub-layer outputs
    attention_probs_dropout_prob: float = 0.1  # dropout on attention probabilities
    max_position_embeddings: int = 512  # longest sequence the model accepts
    type_vocab_size: int = 2  # segment ids (A/B)
    initializer_range: float = 0.02  # std of the normal init
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "max_position_embeddings", "type_vocab_size"):
            if getattr(self, name) < 1:
                raise UsageError(f"model config: {name} must be at least 1, got {getattr(self, name)}")
        if self.hidden_size % self.num_attention_heads:
            raise UsageError(
                f"model config: hidden_size {self.hidden_size} is not divisible by "
                f"num_attention_heads {self.num_attention_heads}"
            )
        if self.hidden_act not in ACTIVATIONS:
            raise UsageError(f"model config: hidden_act {self.hidden_act!r} is not one of {', '.join(ACTIVATIONS)}")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise UsageError(f"model config: {name} must be in [0, 1), got {getattr(self, name)}")
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise UsageError(f"model config: pad_token_id {self.pad_token_id} is outside the vocabulary")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> BertConfig:
        """Read a transformers-style config: keep our fields, refuse BERT variants we would compute wrongly."""
        if values.get("position_embedding_type", "absolute") != "absolute":
            raise UsageError(f"model config: position_embedding_type {values['position_embedding_type']!r} "
                             "is not supported (only 'absolute', as in BERT)")
        if values.get("is_decoder"):
            raise UsageError("model config: is_decoder=true is not BERT's encoder; use an encoder checkpoint")
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})

    def replace(self, **changes: Any) -> BertConfig:
        return dataclasses.replace(self, **changes)


def _shape(layers: int, hidden: int, heads: int) -> dict[str, int]:
    return {"num_hidden_layers": layers, "hidden_size": hidden, "num_attention_heads": heads,
            "intermediate_size": 4 * hidden}


PRESETS: dict[str, dict[str, int]] = {
    "tiny": _shape(2, 128, 2),
    "mini": _shape(4, 256, 4),
    "small": _shape(4, 512, 8),
    "medium": _shape(8, 512, 8),
    "base": _shape(12, 768, 12),
    "large": _shape(24, 1024, 16),
}


def preset(name: str, **overrides: Any) -> BertConfig:
    """A named BERT size (Turc et al. 2019 for the small ones; Devlin et al. 2018 for base/large)."""
    if name not in PRESETS:
        raise UsageError(f"unknown model preset {name!r}: choose one of {', '.join(PRESETS)} or a config.json path")
    return BertConfig(**{**PRESETS[name], **overrides})


def model_config(name_or_path: str, **overrides: Any) -> BertConfig:
    """A preset name or the path of a config.json (a model folder works too)."""
    if name_or_path in PRESETS:
        return preset(name_or_path, **overrides)
    path = Path(name_or_path)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise UsageError(f"--model-config: {name_or_path!r} is neither a preset ({', '.join(PRESETS)}) "
                         "nor an existing config.json")
    values = read_config_file(path)
    return BertConfig.from_dict({**values, **overrides})


def read_config_file(path: Path) -> dict[str, Any]:
    """A JSON or YAML mapping; the error names the file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--config: cannot read {path}: {exc.strerror or exc}") from None
    try:
        if Path(path).suffix in (".yaml", ".yml"):
            import yaml

            values = yaml.safe_load(text)
        else:
            values = json.loads(text)
    except Exception as exc:  # yaml and json raise different types; both mean a malformed file
        raise UsageError(f"--config: {path} is not valid {Path(path).suffix.lstrip('.') or 'json'}: "
                         f"{str(exc).splitlines()[0]}") from None
    if not isinstance(values, dict):
        raise UsageError(f"--config: {path} must hold a mapping of field names to values")
    return values


T = TypeVar("T")


def _coerce(cls: type, name: str, hint: Any, value: Any) -> Any:
    """Turn file/flag values into the field's declared type (JSON has no Path or tuple)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None:
            return None
        hint = args[0] if len(args) == 1 else hint
        origin = typing.get_origin(hint)
    try:
        if hint is Path and value is not None:
            return Path(value)
        if hint is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if origin is tuple and isinstance(value, (list, tuple)):
            return tuple(value)
    except TypeError:
        pass
    return value


def build_config(cls: type[T], file_values: dict[str, Any] | None = None, **flags: Any) -> T:
    """Defaults <- config file <- flags (flags left as None fall through). Unknown keys are refused."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in fields(cls)}
    values = dict(file_values or {})
    unknown = sorted(set(values) - names)
    if unknown:
        raise UsageError(f"--config: unknown field(s) {', '.join(unknown)} for {cls.__name__}; "
                         f"known: {', '.join(sorted(names))}")
    values.update({k: v for k, v in flags.items() if v is not None})
    return cls(**{k: _coerce(cls, k, hints[k], v) for k, v in values.items()})


def config_to_dict(obj: Any) -> dict[str, Any]:
    """A JSON-ready view of a (nested) config dataclass."""
    def plain(value: Any) -> Any:
        if isinstance(value, Path):
            return str(value)
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    return {k: plain(v) for k, v in dataclasses.asdict(obj).items()}


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON through a temp file and rename, so a reader never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2, sort_keys=False)
        handle.write("\n")
    os.replace(tmp, path)
