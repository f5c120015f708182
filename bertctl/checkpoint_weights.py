"""A model folder's weights in whichever flavour they come: the one loader read_checkpoint calls.

safetensors or pytorch_model.bin (read with weights_only: bertctl never unpickles objects), single or sharded
behind an index, NVIDIA DeepLearningExamples' .pt or .bin, a Google TensorFlow checkpoint; or, when a folder
holds none of these, one line saying what it lacks. The tensors come back under transformers' names as the file
holds them; checkpoint.py maps, checks and loads them.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import Tensor

from bertctl import nvidia_checkpoint, tf_checkpoint
from bertctl.errors import UsageError
from bertctl.files import refuse_empty

# transformers' order of preference when a folder holds several (hub repos often have both formats)
WEIGHTS_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "pytorch_model.bin.index.json")
# Weights transformers 5 no longer reads either: say how to convert them instead of "no weights found".
_FOREIGN_WEIGHTS = {"tf_model.h5": ("TensorFlow", "from_tf"), "flax_model.msgpack": ("Flax", "from_flax")}


def read_weights(folder: Path) -> tuple[dict[str, Tensor], Path, bool]:
    """The first weights file in transformers' order of preference, else an NVIDIA `.pt`, else a TensorFlow
    checkpoint; with its path and whether it is NVIDIA's. An index names the shards to read."""
    for name in WEIGHTS_FILES:
        path = folder / name
        if not path.is_file():
            continue
        if not name.endswith(".index.json"):
            loaded = _read_weights_file(path)
            if name == "pytorch_model.bin" and nvidia_checkpoint.is_nvidia(loaded):  # run_squad's, run_glue's
                return nvidia_checkpoint.transformers_weights(loaded, path), path, True
            return loaded, path, False
        shards = _shard_names(path)
        return {k: v for shard in shards for k, v in _read_weights_file(folder / shard).items()}, path, False
    checkpoint = nvidia_checkpoint.checkpoint_file(folder)  # run_pretraining's ckpt_<step>.pt, NGC's bert_*.pt
    if checkpoint is not None:
        return nvidia_checkpoint.read_weights(checkpoint), checkpoint, True
    prefix = tf_checkpoint.checkpoint_prefix(folder)  # Google's TensorFlow release, or a run_* script's output
    if prefix is not None:
        return tf_checkpoint.read_weights(prefix), Path(f"{prefix}.index"), False
    raise UsageError(foreign_weights_message(folder) or
                     f"{folder}: no weights found (expected {' or '.join(WEIGHTS_FILES)}, an NVIDIA *.pt "
                     "checkpoint or a TensorFlow one)")


def _shard_names(index: Path) -> list[str]:
    """The shard files an index names; a damaged index (a number or null for a file name, a list for the map) is
    one line naming it, not a TypeError from sorting what it holds. A shard is a file beside the index, as
    save_pretrained writes it: a name with a folder in it (`../other.safetensors`, an absolute path) would read
    weights from outside the model folder, so it is refused."""
    refuse_empty(index)
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"cannot read the shard index {index}: {exc}") from None
    if not isinstance(weight_map, dict) or not all(isinstance(name, str) for name in weight_map.values()):
        raise UsageError(f"cannot read the shard index {index}: weight_map must map each parameter to the name of "
                           "its shard file (is the file complete? re-download or re-save it)")
    outside = next((name for name in weight_map.values() if name in ("", ".", "..") or Path(name).name != name), None)
    if outside is not None:
        raise UsageError(f"cannot read the shard index {index}: weight_map names {outside!r}, not a file in its "
                           "folder (shards are files beside the index; re-download or re-save it)")
    return sorted(set(weight_map.values()))


def foreign_weights_message(folder: Path) -> str | None:
    """One line saying what a TensorFlow or NVIDIA folder without its bert_config.json lacks, or how to convert a
    tf_model.h5 or Flax folder, which bertctl cannot read."""
    index = next(iter(sorted(folder.glob("*.index"))), None)
    pt = next(iter(sorted(folder.glob("*.pt"))), None)
    held = (f"a TensorFlow checkpoint ({index.name.removesuffix('.index')})" if index is not None else
            f"an NVIDIA checkpoint ({pt.name})" if pt is not None else None)
    if held is not None:
        return (f"{folder} holds {held} but no bert_config.json or config.json; copy the bert_config.json (and "
                "vocab.txt) of the model it was trained from into it")
    for name, (kind, flag) in _FOREIGN_WEIGHTS.items():
        if (folder / name).is_file():
            return (f"{folder} holds only {kind} weights ({name}); convert them once with transformers 4: "
                    f"`BertForPreTraining.from_pretrained(DIR, {flag}=True).save_pretrained(DIR)` "
                    "(pip install 'transformers<5')")
    return None


def _read_weights_file(path: Path) -> dict[str, Tensor]:
    refuse_empty(path)
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(path), device="cpu")
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if "WeightsUnpickler error:" in str(exc):  # not torch's advice to load it unsafely (weights_only=False)
            found = str(exc).split("WeightsUnpickler error:", 1)[1].strip().splitlines()[0]
            reason = f"not a plain tensor file ({found}); bertctl never unpickles objects"
        raise UsageError(f"cannot read weights {path}: {reason} (is the file complete? re-download or "
                           "re-save it)") from None
