"""transformers' parameter names <-> ours: the tables and the two mappings every model folder goes through.

Our model fuses Q, K and V into one projection and gives its parts short names (`layers.0.attn_out`); a folder
holds transformers' names (`encoder.layer.0.attention.output.dense`) and three matrices. Kept apart from
checkpoint.py, which reads and writes the folders, so that both read without the other; Google's TensorFlow and
NVIDIA's checkpoints reach these mappings as transformers' names (tf_checkpoint, nvidia_checkpoint).
"""

from __future__ import annotations

import re

import torch
from torch import Tensor

# (our prefix, transformers' prefix); {i} is a layer number. Encoder names are without the `bert.` prefix.
_ENCODER_NAMES = [
    ("embeddings.word.", "embeddings.word_embeddings."),
    ("embeddings.position.", "embeddings.position_embeddings."),
    ("embeddings.token_type.", "embeddings.token_type_embeddings."),
    ("embeddings.norm.", "embeddings.LayerNorm."),
    ("layers.{i}.attn_out.", "encoder.layer.{i}.attention.output.dense."),
    ("layers.{i}.attn_norm.", "encoder.layer.{i}.attention.output.LayerNorm."),
    ("layers.{i}.ffn_in.", "encoder.layer.{i}.intermediate.dense."),
    ("layers.{i}.ffn_out.", "encoder.layer.{i}.output.dense."),
    ("layers.{i}.ffn_norm.", "encoder.layer.{i}.output.LayerNorm."),
    ("pooler.", "pooler.dense."),
]
_HEAD_NAMES = [
    ("mlm.dense.", "cls.predictions.transform.dense."),
    ("mlm.norm.", "cls.predictions.transform.LayerNorm."),
    ("mlm.decoder.", "cls.predictions.decoder."),  # only an untied decoder: a tied one is the word embeddings
    ("mlm.bias", "cls.predictions.bias"),
    ("nsp.", "cls.seq_relationship."),
    ("classifier.", "classifier."),
    ("qa_outputs.", "qa_outputs."),
]
_QKV = ("query", "key", "value")
# Buffers some versions saved (position_ids; token_type_ids, all zeros) carry no weights.
_DROPPED = re.compile(r"(^|\.)(position_ids|embeddings\.token_type_ids)$")
DECODER_BIAS = "cls.predictions.decoder.bias"  # older files and untied models: cls.predictions.bias, as used
DECODER_KEY = "mlm.decoder.weight"  # our name for an untied decoder
# Which head (or optional encoder part) a parameter of ours belongs to.
_PART_OF = [("bert.pooler.", "pooler"), ("mlm.", "mlm"), ("nsp.", "nsp"), ("qa_outputs.", "question_answering"),
            ("classifier.", "classifier")]


def to_transformers_names(state: dict[str, Tensor], bare: bool = False) -> dict[str, Tensor]:
    """Our state dict -> transformers' names; Q, K and V are split out of the fused projection. Beside an untied
    decoder the bias is written as the decoder's too, as transformers writes it (its untied model computes with
    that one and would start it at zero without it)."""
    prefix = "" if bare else "bert."
    out: dict[str, Tensor] = {}
    if DECODER_KEY in state and "mlm.bias" in state:
        out[DECODER_BIAS] = state["mlm.bias"].clone()  # safetensors refuses a tensor stored twice
    for key, tensor in state.items():
        if key.startswith("bert."):
            rest = key[len("bert."):]
            match = re.fullmatch(r"layers\.(\d+)\.qkv\.(weight|bias)", rest)
            if match:
                layer, kind = match.groups()
                for name, part in zip(_QKV, tensor.chunk(3, dim=0), strict=True):
                    out[f"{prefix}encoder.layer.{layer}.attention.self.{name}.{kind}"] = part.contiguous()
                continue
            out[prefix + _rename(rest, _ENCODER_NAMES, forward=True)] = tensor
        else:
            out[_rename(key, _HEAD_NAMES, forward=True)] = tensor
    return out


def _rename(key: str, table: list[tuple[str, str]], forward: bool) -> str:
    for ours, theirs in table:
        source, target = (ours, theirs) if forward else (theirs, ours)
        match = re.match(re.escape(source).replace(re.escape("{i}"), r"(?P<i>\d+)"), key)
        if match:
            return target.format(i=match.groupdict().get("i")) + key[match.end():]
    raise KeyError(key)


def from_transformers_names(state: dict[str, Tensor]) -> tuple[dict[str, Tensor], list[str]]:
    """transformers' (or Google's legacy) names -> ours; returns the mapped dict and the unknown names."""
    out: dict[str, Tensor] = {}
    unknown: list[str] = []
    qkv: dict[tuple[str, str], dict[str, Tensor]] = {}
    for key, tensor in state.items():
        key = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", key))
        if _DROPPED.search(key):
            continue
        if key in (DECODER_BIAS, "cls.predictions.bias"):
            # transformers 5 computes with the decoder's bias when a file has both (they are equal in real files)
            if key == DECODER_BIAS or DECODER_BIAS not in state:
                out["mlm.bias"] = tensor
            continue
        rest = key[len("bert."):] if key.startswith("bert.") else key
        match = re.fullmatch(r"encoder\.layer\.(\d+)\.attention\.self\.(query|key|value)\.(weight|bias)", rest)
        if match:
            layer, name, kind = match.groups()
            qkv.setdefault((layer, kind), {})[name] = tensor
            continue
        try:
            if rest.startswith(("embeddings.", "encoder.", "pooler.")):
                out["bert." + _rename(rest, _ENCODER_NAMES, forward=False)] = tensor
            else:
                out[_rename(key, _HEAD_NAMES, forward=False)] = tensor
        except KeyError:
            unknown.append(key)
    for (layer, kind), parts in qkv.items():
        if set(parts) == set(_QKV):  # else the fused projection is missing: read_checkpoint names what is
            out[f"bert.layers.{layer}.qkv.{kind}"] = torch.cat([parts[n] for n in _QKV], dim=0)
    return out, unknown


def part_of(key: str) -> str | None:
    for prefix, part in _PART_OF:
        if key.startswith(prefix):
            return part
    return None

def to_transformers_name(key: str) -> str:
    return next(iter(to_transformers_names({key: torch.empty(3)})))
