"""Building models without touching the process's torch state: shapes on the meta device (no memory, no random
draws) and float32 parameters whatever the caller's default dtype. Shared by checkpoint loading, checkpoint checks
and training."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn


@contextmanager
def shapes_only() -> Iterator[None]:
    """Build modules on the meta device, for their shapes alone: no memory, no random draws, and nn.init.normal_
    a no-op there (on meta tensors it first imports torch._dynamo, ~1 s at a command's start; they hold no values
    anyway)."""
    _skip_meta_normal(True)
    try:
        with torch.device("meta"), float32_default():
            yield
    finally:
        _skip_meta_normal(False)


def materialize(model: nn.Module) -> None:
    """Give a `shapes_only` model uninitialised CPU storage, as `to_empty` would, but through plain `torch.empty`:
    `to_empty`'s `empty_like` of a meta tensor runs torch's Python reference, which imports sympy (~0.3 s of CPU
    at every load)."""
    for module in model.modules():
        for store in (module._parameters, module._buffers):
            for name, tensor in store.items():
                if tensor is not None and tensor.is_meta:
                    store[name] = _empty_like(tensor)


def _empty_like(tensor: Tensor) -> Tensor:
    empty = torch.empty(tensor.shape, dtype=tensor.dtype, device="cpu")
    return nn.Parameter(empty, tensor.requires_grad) if isinstance(tensor, nn.Parameter) else empty


@contextmanager
def float32_default() -> Iterator[None]:
    """Parameters and new tensors in float32, as transformers loads BERT, under a caller's
    torch.set_default_dtype(torch.float64) too (else the model would be float64, and train so while run.json
    says fp32). The default dtype is the process's: set only where it differs, and set back."""
    previous = torch.get_default_dtype()
    if previous == torch.float32:
        yield
        return
    torch.set_default_dtype(torch.float32)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


class _MetaNormal:
    """nn.init.normal_ is torch's, one for the whole process: while any thread is in `shapes_only` it skips meta
    tensors and draws every other as torch's does, so a thread that builds a real model meanwhile still draws its
    weights; the last block to end puts torch's back (each block restoring what it found left it patched for good
    when two threads' blocks overlapped)."""

    lock = threading.Lock()
    users = 0
    original = nn.init.normal_

    @staticmethod
    def normal_(tensor: Tensor, *args: object, **kwargs: object) -> Tensor:
        return tensor if tensor.is_meta else _MetaNormal.original(tensor, *args, **kwargs)


def _skip_meta_normal(on: bool) -> None:
    with _MetaNormal.lock:
        if on and _MetaNormal.users == 0:
            _MetaNormal.original = nn.init.normal_
            nn.init.normal_ = _MetaNormal.normal_
        _MetaNormal.users += 1 if on else -1
        if not on and _MetaNormal.users == 0:
            nn.init.normal_ = _MetaNormal.original
