"""NVIDIA DeepLearningExamples' PyTorch BERT checkpoints (PyTorch/LanguageModeling/BERT), read into transformers'
names so `bertctl.checkpoint` loads them on its one path (shapes, heads, strictness).

run_pretraining.py saves `ckpt_<step>.pt`: a dict holding the model's state dict under `model` beside training state
(`optimizer`, `master params`, `files`, `epoch`, `grad_scaler` ..., and in every checkpoint but the last
`data_loader`, a pickled DataLoader whose classes live in that script's `__main__`); run_squad.py and run_glue.py save
`{"model": state_dict}` (older versions the bare state dict) as pytorch_model.bin; NGC's files (bert_large_qa.pt ...)
are the same. Their modeling.py fuses bias and activation into a `LinearActivation` named `dense_act` where
transformers has `dense` (the FFN's first projection, the pooler, the MLM transform); every other name is
transformers'. A state dict saved from a DDP/DataParallel wrapper has a `module.` prefix.

Nothing pickled is executed: torch's weights_only unpickler reads the file, and every global it does not allow (the
DataLoader, the dataset, numpy's array rebuilders ...), found by torch's static scan of the pickle, is bound to an
inert stand-in that swallows its arguments; only the `model` entry's tensors are kept.
"""

from __future__ import annotations

import contextlib
import pickle
import re
import zipfile
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from bertctl.errors import UsageError
from bertctl.files import refuse_empty

# NVIDIA's LinearActivation modules -> transformers' Linear names (bias and activation fused, same weights)
_FUSED = re.compile(r"^((?:bert\.)?encoder\.layer\.\d+\.intermediate|(?:bert\.)?pooler|cls\.predictions\.transform)"
                    r"\.dense_act\.")  # a bare BertModel's names have no `bert.`
_DDP_PREFIX = "module."
_STEP_FILE = re.compile(r"ckpt_(\d+)\.pt")  # run_pretraining's name; it resumes from the highest step


class _Skipped:
    """Stands in for a class or function of a pickled training object: takes and drops what the pickle gives it."""

    def __new__(cls, *args: Any, **kwargs: Any) -> _Skipped:
        return super().__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass


def checkpoint_file(folder: Path) -> Path | None:
    """The `*.pt` checkpoint a folder holds, or None: the only one, else the highest `ckpt_<step>.pt` of a
    run_pretraining output folder (which keeps the last three); several others are refused, naming them."""
    found = sorted(p for p in folder.glob("*.pt") if p.is_file())
    if len(found) <= 1:
        return found[0] if found else None
    steps = {p: _STEP_FILE.fullmatch(p.name) for p in found}
    if all(steps.values()):
        return max(found, key=lambda p: int(steps[p].group(1)))  # type: ignore[union-attr]  # all matched
    names = ", ".join(p.name for p in found)
    raise UsageError(f"{folder} holds {len(found)} PyTorch checkpoints ({names}); keep the one to read there and "
                     "move the others out")


def is_nvidia(loaded: Any) -> bool:
    """Whether what a pytorch_model.bin holds is NVIDIA's: their `{"model": state_dict}` container, or a bare state
    dict with their `dense_act` names or a DDP `module.` prefix."""
    if not isinstance(loaded, dict):
        return False
    if isinstance(loaded.get("model"), dict):
        return True
    names = [k for k in loaded if isinstance(k, str)]
    return any(k.startswith(_DDP_PREFIX) or _FUSED.match(k) for k in names)


def read_weights(path: Path) -> dict[str, Tensor]:
    """The model tensors of an NVIDIA `.pt` checkpoint under transformers' names; training state is never read
    into memory (the file is memory-mapped) and pickled objects are never run."""
    # copied out of the memory map: the file may be replaced while a run trains on them
    return {k: v.clone() for k, v in transformers_weights(_load(path), path).items()}


def transformers_weights(loaded: Any, path: Path) -> dict[str, Tensor]:
    """The `model` entry (or the bare state dict) of a loaded NVIDIA checkpoint under transformers' names."""
    if not isinstance(loaded, dict):
        raise UsageError(f"{path}: not a BERT checkpoint (it holds a {type(loaded).__name__}, not a state dict)")
    if "model" not in loaded and not any(isinstance(v, Tensor) for v in loaded.values()):
        entries = ", ".join(map(str, list(loaded)[:5]))
        raise UsageError(f"{path}: no model weights in it (no `model` entry and no tensors; it holds {entries}); "
                           "give the checkpoint run_pretraining, run_squad or run_glue saved")
    state = loaded.get("model", loaded)
    if not isinstance(state, dict):
        raise UsageError(f"{path}: its `model` entry holds a {_kind(state)}, not a state dict (not a BERT "
                           "checkpoint bertctl knows)")
    objects = [f"{k} ({_kind(v)})" for k, v in state.items() if not isinstance(v, Tensor)]
    if objects:
        where = "its `model` entry" if state is not loaded else "it"
        shown = ", ".join(map(str, objects[:3])) + (f" and {len(objects) - 3} more" if len(objects) > 3 else "")
        raise UsageError(f"{path}: {where} holds pickled objects, not tensors: {shown}; bertctl reads tensors "
                           "only (save the model's state_dict())")
    return {_transformers_name(str(k)): v for k, v in state.items()}


def _transformers_name(key: str) -> str:
    key = key.removeprefix(_DDP_PREFIX)
    return _FUSED.sub(r"\1.dense.", key)


def _kind(value: Any) -> str:
    if isinstance(value, _Skipped):
        return f"a pickled {type(value).__module__}.{type(value).__qualname__}"
    return type(value).__name__


def padded_vocab_size(vocab_size: int, rows: int) -> bool:
    """Whether `rows` embedding rows are NVIDIA's padding of a `vocab_size` vocabulary: run_pretraining, run_squad and
    run_glue round the config's vocab_size up to a multiple of 8 before building the model (30522 -> 30528)."""
    return rows != vocab_size and rows == vocab_size + (-vocab_size % 8)


def _load(path: Path) -> Any:
    """torch.load with weights_only, each global it would refuse bound to `_Skipped`; a legacy (pre-zip) file cannot
    be scanned and is read as it is."""
    refuse_empty(path)
    try:
        zipped = zipfile.is_zipfile(path)
        scan = getattr(torch.serialization, "get_unsafe_globals_in_checkpoint", None)  # torch >= 2.5
        skipped = scan(path) if zipped and scan is not None else []
        stand_ins = torch.serialization.safe_globals([_stand_in(n) for n in skipped]) if skipped else \
            contextlib.nullcontext()
        with stand_ins:
            return torch.load(path, map_location="cpu", weights_only=True, mmap=zipped)
    except (OSError, RuntimeError, ValueError, EOFError, AttributeError, ImportError, TypeError,
            pickle.UnpicklingError) as exc:
        raise UsageError(f"cannot read weights {path}: {_reason(exc)}") from None


def _stand_in(full_name: str) -> type:
    """A `_Skipped` subclass that torch's allowlist files under `full_name` (its module + qualified name)."""
    module, _, name = full_name.rpartition(".")
    return type(name, (_Skipped,), {"__module__": module, "__qualname__": name})


def _reason(exc: BaseException) -> str:
    text = str(exc)
    if text.startswith("Weights only load failed"):  # torch's advice (weights_only=False) fits no file: say ours
        lines = [line.strip().removeprefix("WeightsUnpickler error:").strip() for line in text.splitlines()[1:]]
        found = next((line for line in lines if "GLOBAL" in line or "object" in line), "an object")
        return (f"it holds a pickled object bertctl does not run ({found.split(' Please use ')[0].rstrip('.')}); "
                "if you trust the file, re-save its model alone where NVIDIA's code is importable: "
                "torch.save({'model': torch.load(FILE, weights_only=False)['model']}, 'model.pt')")
    first = text.splitlines()[0] if text else type(exc).__name__
    return f"{first} (is the file complete? re-download or re-save it)"
