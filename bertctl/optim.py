"""Optimizers and learning-rate schedules for pre-training and fine-tuning.

AdamW (torch's fused kernel) and LAMB over BERT's parameter groups (no decay on biases and LayerNorm), and
transformers' warmup schedules, bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch import Tensor, nn

from bertctl.errors import UsageError


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Decay every matrix; leave biases, LayerNorm weights (1-D tensors) undecayed, as BERT does."""
    decay, no_decay = [], []
    for _, param in sorted(model.named_parameters(), key=lambda item: item[0]):
        if param.requires_grad:
            (decay if param.ndim >= 2 else no_decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def lamb_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """param_groups for LAMB as BERT's LAMB recipes run it (NVIDIA's apex FusedLAMB, TF's for ALBERT): biases
    and LayerNorm weights get plain Adam steps, no trust ratio; and the fused Q/K/V matrix is scaled per third,
    as a model with separate query, key and value matrices would be."""
    decay, no_decay = param_groups(model, weight_decay)
    fused = {id(m.qkv.weight) for m in model.modules() if isinstance(getattr(m, "qkv", None), nn.Linear)}
    qkv = [p for p in decay["params"] if id(p) in fused]
    decay["params"] = [p for p in decay["params"] if id(p) not in fused]
    return [g for g in (decay, {**decay, "params": qkv, "parts": 3}, {**no_decay, "adapt": False}) if g["params"]]


class Lamb(torch.optim.Optimizer):
    """LAMB (You et al., 2019): bias-corrected Adam's update plus decoupled weight decay, scaled per tensor by
    ||w|| / ||update|| (the trust ratio; 1 when either is 0). A group's `adapt: False` skips the scaling, and
    `parts: n` scales each of a tensor's n equal row blocks by its own ratio.

    A group is stepped with torch's multi-tensor (`_foreach`) kernels, a few launches per ~16M values rather
    than a dozen per tensor where every tensor takes the same scalar: on a GPU a per-tensor loop over BERT-large's
    ~400 tensors is launch-bound. A scalar of each tensor's own (bias corrections, trust ratios) and the skip's
    selects still take a kernel per tensor (torch's fast path wants equal shapes), queued without a wait.

    A step to skip (NaN/inf) is skipped on the device, as torch's fused AdamW skips it: `optimizer_step` and
    GradScaler set `found_inf` (1: skip), and the step counts live on the parameters' device, so the host never
    waits for the answer. Each value stays as it was where the step is skipped, bit for bit."""

    _step_supports_amp_scaling = True  # reads `found_inf` (and `grad_scale`, which must be None: unscale first)

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.0) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                                  "adapt": True, "parts": 1})

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = closure() if closure is not None else None
        if getattr(self, "grad_scale", None) is not None:
            raise ValueError("Lamb steps unscaled gradients: call GradScaler.unscale_(optimizer) before its step")
        found_inf = getattr(self, "found_inf", None)
        for group in self.param_groups:
            for chunk in _chunks([param for param in group["params"] if param.grad is not None]):
                keep = torch.ones((), dtype=torch.bool, device=chunk[0].device) if found_inf is None else found_inf == 0
                self._step_group(group, chunk, keep)
        return loss

    def _step_group(self, group: dict[str, Any], params: list[Tensor], keep: Tensor) -> None:
        """One step of `params`, where `keep` (a bool on their device) holds; else every value stays as it was."""
        beta1, beta2 = group["betas"]
        states = [self._state(param) for param in params]
        exp_avgs, exp_avg_sqs = [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states]
        steps = [s["step"] for s in states]
        grads = [torch.where(keep, param.grad, avg, out=param.grad)
                 for param, avg in zip(params, exp_avgs, strict=True)]
        torch._foreach_add_(steps, keep.float())
        counts = torch.stack(steps).double()
        torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)  # a skipped step's "gradients" are exp_avg: no change
        denominators = torch._foreach_mul(exp_avg_sqs, beta2)  # the new exp_avg_sq, kept where `keep` holds
        torch._foreach_addcmul_(denominators, grads, grads, value=1 - beta2)
        for square, new in zip(exp_avg_sqs, denominators, strict=True):
            torch.where(keep, new, square, out=square)
        updates = torch._foreach_div(exp_avgs, list((1 - beta1**counts).unbind()))
        torch._foreach_div_(denominators, list((1 - beta2**counts).unbind()))
        torch._foreach_sqrt_(denominators)
        torch._foreach_add_(denominators, group["eps"])
        torch._foreach_div_(updates, denominators)
        del denominators
        if group["weight_decay"]:
            torch._foreach_add_(updates, params, alpha=group["weight_decay"])
        if group["adapt"]:
            _scale_by_trust_ratio(updates, params, group["parts"])
        zero = torch.zeros((), device=keep.device)
        for update in updates:
            torch.where(keep, update, zero, out=update)  # w - lr * 0 is w, bit for bit
        torch._foreach_add_(params, updates, alpha=-group["lr"])

    def _state(self, param: Tensor) -> dict[str, Any]:
        """The parameter's state; its step count (a float32 scalar, as saved) on the parameter's device, where
        the bias corrections are computed (a resumed state's comes back on the host)."""
        state = self.state[param]
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float32, device=param.device)
            state["exp_avg"] = torch.zeros_like(param)
            state["exp_avg_sq"] = torch.zeros_like(param)
        state["step"] = state["step"].to(param.device)
        return state


def _chunks(params: list[Tensor], elements: int = 2**24) -> Iterator[list[Tensor]]:
    """The tensors in runs of about `elements` values (a larger tensor alone), so that a step's temporaries
    (two per value) stay near a per-tensor loop's, not twice the model."""
    chunk: list[Tensor] = []
    size = 0
    for param in params:
        if chunk and size + param.numel() > elements:
            yield chunk
            chunk, size = [], 0
        chunk.append(param)
        size += param.numel()
    if chunk:
        yield chunk


def _scale_by_trust_ratio(updates: list[Tensor], params: list[Tensor], parts: int) -> None:
    """Scale each update (each of its `parts` row blocks) by ||w|| / ||update|| of that block, in place and
    on the device: the ratios are never read on the host."""
    update_blocks = [block for update in updates for block in update.view(parts, -1).unbind()]
    weight_blocks = [block for param in params for block in param.view(parts, -1).unbind()]
    weight_norms = torch.stack(torch._foreach_norm(weight_blocks))
    update_norms = torch.stack(torch._foreach_norm(update_blocks))
    ratios = torch.where((weight_norms > 0) & (update_norms > 0), weight_norms / update_norms, 1.0)
    torch._foreach_mul_(update_blocks, list(ratios.unbind()))


def make_optimizer(name: str, model: nn.Module, lr: float, weight_decay: float, betas: tuple[float, float],
                   eps: float) -> torch.optim.Optimizer:
    if name == "adamw":  # the fused kernel: one pass over every tensor, on CUDA and (4x faster) on CPU
        return torch.optim.AdamW(param_groups(model, weight_decay), lr=lr, betas=betas, eps=eps, fused=True)
    if name == "lamb":
        return Lamb(lamb_groups(model, weight_decay), lr=lr, betas=betas, eps=eps)
    raise UsageError(f"--optimizer {name!r}: choose adamw or lamb")


def lr_factor(step: int, total: int, warmup: int, schedule: str) -> float:
    """Multiplier of the peak learning rate for the optimizer step after `step` steps: transformers' schedules
    (and Google's warmup), so the first step of a warmup runs at 0 and the last of a linear decay at 1/(T-w).
    Past `total` the cosine rises again, as transformers' does; the recipes never step there."""
    if step < warmup:
        return step / warmup
    if schedule == "constant":
        return 1.0
    if schedule == "linear":
        return max(0.0, (total - step) / max(1, total - warmup))
    if schedule == "cosine":
        progress = (step - warmup) / max(1, total - warmup)
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))
    raise UsageError(f"--schedule {schedule!r}: choose linear, cosine or constant")


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
