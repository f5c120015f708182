"""The training-loop pieces that pre-training and fine-tuning share.

Precision, one optimizer step over accumulated micro-batches (its figures read a window at a time),
torch.distributed set-up. The optimizers and learning-rate schedules are in optim.py; what a checkpoint saves
to resume is in training_state.py; graceful SIGINT/SIGTERM in stop_signals.py; metrics logging in
run_metrics.py.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import math
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from bertctl.config_types import any_case
from bertctl.errors import BertctlError, UsageError, quoted, say
from bertctl.files import json_ready
from bertctl.model_building import float32_default
from bertctl.output_locks import output_lock

# --- precision and devices ---------------------------------------------------------------------------

def resolve_precision(precision: str, device: torch.device) -> str:
    precision = any_case(precision)
    if not isinstance(precision, str):  # a DataFrame's `==` is a table, whose truth value is an error
        raise UsageError(f"--precision {quoted(precision)}: choose one of auto, fp32, bf16, fp16")
    if precision == "auto":
        return "bf16" if device.type == "cuda" and _computes_bf16(device) else "fp32"
    if precision not in ("fp32", "bf16", "fp16"):
        raise UsageError(f"--precision {precision!r}: choose one of auto, fp32, bf16, fp16")
    if precision == "fp16" and device.type != "cuda":
        raise UsageError("--precision fp16 needs a CUDA device; use bf16 or fp32 on the CPU")
    return precision


def _computes_bf16(device: torch.device) -> bool:
    """Whether the GPU computes bf16 itself (Ampere or newer; ROCm's): torch.cuda.is_bf16_supported() also says
    yes where bf16 is only emulated (V100, T4), slower than fp32 there and refused by torch.compile's inductor."""
    return torch.version.hip is not None or torch.cuda.get_device_capability(device) >= (8, 0)


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


@contextlib.contextmanager
def training_defaults() -> Iterator[None]:
    """Training computes gradients, in float32, whatever the caller set: inside its torch.no_grad() or
    inference_mode() (a notebook that wraps its cells for scoring) the first backward pass failed with torch's
    bare RuntimeError, and under its torch.set_default_dtype(torch.float64) the run trained in float64. The
    caller's settings are back when the block ends."""
    with torch.inference_mode(False), torch.enable_grad(), float32_default():
        yield


def enable_fast_math(device: torch.device) -> None:
    """TF32 matmuls and convolutions on CUDA; nothing changes on the CPU."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def pick_device(device: str | None) -> torch.device:
    """--device checked against the machine; `cuda:N` also becomes torch's current GPU, so that pinned host
    memory and library handles open no CUDA context on GPU 0 beside the one on GPU N."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        chosen = torch.device(any_case(device))
    except (RuntimeError, TypeError):  # TypeError: a list, a dict, a DataFrame
        chosen = None
    if chosen is None or chosen.type not in ("cpu", "cuda"):  # mps, xpu, meta...: not what bertctl runs on
        raise UsageError(f"--device: {quoted(device)} is not a device bertctl runs on; use cpu, cuda or cuda:N")
    if chosen.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {device}: CUDA is not available on this machine; use --device cpu")
    if chosen.type == "cuda" and chosen.index is not None and chosen.index >= torch.cuda.device_count():
        raise UsageError(f"--device {device}: this machine has {_gpus(torch.cuda.device_count())} (cuda:0 to "
                         f"cuda:{torch.cuda.device_count() - 1}); pick one of them")
    if chosen.type == "cuda" and chosen.index is not None and int(os.environ.get("WORLD_SIZE", "1")) == 1:
        torch.cuda.set_device(chosen)  # under torchrun every process takes its own GPU (setup_distributed)
    return chosen


def _gpus(count: int) -> str:
    return f"{count} GPU" + ("" if count == 1 else "s")


def to_device(batch: dict[str, Tensor], device: torch.device, keep_mask: bool = False) -> dict[str, Tensor]:
    """The batch on `device`; an attention mask without padding is dropped while it is still on the host, unless
    `keep_mask` (a compiled model: a batch without a mask is another graph, compiled again in the middle of a run).

    Without a mask SDPA may pick its fastest (flash) kernel, and the model need not ask the device whether
    anything is padded (a sync per forward on a GPU). Host tensors go to a GPU through pinned memory: a copy from
    pageable memory first waits for everything queued on the GPU, so the host could not run ahead of it.
    """
    mask = batch.get("attention_mask")
    if not keep_mask and mask is not None and mask.device.type == "cpu" and bool(mask.all()):
        batch = {k: v for k, v in batch.items() if k != "attention_mask"}
    return {k: _pinned(v, device).to(device, non_blocking=True) for k, v in batch.items()}


def _pinned(tensor: Tensor, device: torch.device) -> Tensor:
    """A host tensor bound for a GPU, in page-locked memory (torch's caching host allocator reuses the blocks)."""
    if device.type != "cuda" or tensor.device.type != "cpu" or tensor.is_pinned():
        return tensor
    return tensor.pin_memory()


@dataclass(frozen=True)
class Distributed:
    rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")
    control: Any = None  # a gloo group for host-side flags (stop requests), so they never wait on the GPU
    owned: tuple[Any, ...] = ()  # process groups this run created, and so closes: never a caller's own

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def setup_distributed(device: str | None = None) -> Distributed:
    """Join the torchrun process group when launched by torchrun (NCCL on CUDA, gloo on CPU)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    chosen = pick_device(device)
    if chosen.type == "cuda":
        if world > 1 and local >= torch.cuda.device_count():  # more processes on this node than its GPUs
            raise UsageError(f"torchrun: process {local} of this node has no GPU of its own (the node shows "
                             f"{_gpus(torch.cuda.device_count())}); give --nproc_per_node at most "
                             f"{torch.cuda.device_count()}, or --device cpu")
        chosen = torch.device("cuda", local if world > 1 else (chosen.index or 0))
        torch.cuda.set_device(chosen)
    control, owned = None, []
    if world > 1:
        if not dist.is_initialized():
            _refuse_a_world_without_its_address(world)
            _import_world_defaults()
            _join_world("nccl" if chosen.type == "cuda" else "gloo", chosen, world, rank)
            owned.append(dist.group.WORLD)
        control = dist.group.WORLD if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
        if control is not dist.group.WORLD:
            owned.insert(0, control)
    return Distributed(rank=rank, world_size=world, device=chosen, control=control, owned=tuple(owned))


def _refuse_a_world_without_its_address(world: int) -> None:
    """WORLD_SIZE left set without torchrun (a job script's leftovers) failed in torch's rendezvous with a line that
    named neither the variable nor the fix."""
    missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(name)]
    if missing:
        raise UsageError(f"WORLD_SIZE={world} says this is one of {world} processes, but {' and '.join(missing)} "
                         f"{'is' if len(missing) == 1 else 'are'} not set: launch with torchrun (which sets them), "
                         "or unset WORLD_SIZE and RANK to run one process")


# torchrun's agent starts every process of the run, which join once imported (seconds; more on a loaded machine):
# a wait this long is worth a line
TORCHRUN_QUIET_SECONDS = 30.0


def _join_world(backend: str, device: torch.device, world: int, rank: int) -> None:
    """dist.init_process_group, which waits in torch's rendezvous until all `world` processes are there: 30 minutes
    on gloo (10 on NCCL) without a word, Ctrl-C held back until it ends, then torch's timeout error, which named
    neither WORLD_SIZE nor MASTER_ADDR. Now the wait is said (at once outside torchrun), a signal ends it, and its
    timeout is one line saying what to do. torch's timeouts stay as they are: a multi-node job may start slowly."""
    where = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    notice = _join_notice(f"joining {world} processes at {where} as rank {rank} (WORLD_SIZE={world}; waiting for "
                          "the others; Ctrl-C to stop)")
    started = time.monotonic()
    try:
        with _signals_end_the_wait():
            dist.init_process_group(backend, device_id=_device_id(device))
    except dist.DistError as exc:
        if "timed out" not in str(exc).lower():
            raise
        raise BertctlError(_never_joined(str(exc), world, rank, where, time.monotonic() - started)) from None
    finally:
        if notice is not None:
            notice.cancel()


def _join_notice(line: str) -> threading.Timer | None:
    """Says `line` on stderr: at once when the processes were started by hand or a job script, each of which may be
    the one waiting; under torchrun only if the wait lasts, once per node."""
    if not os.environ.get("TORCHELASTIC_RUN_ID"):
        say(line)
        return None
    if os.environ.get("LOCAL_RANK", "0") != "0":
        return None
    notice = threading.Timer(TORCHRUN_QUIET_SECONDS, say, [line])
    notice.daemon = True
    notice.start()
    return notice


@contextlib.contextmanager
def _signals_end_the_wait() -> Iterator[None]:
    """SIGINT and SIGTERM end the process at once (exit 128 + the signal) inside the block: torch's rendezvous
    waits in C++, where a Python handler only runs once it returns. Nothing is written before the join. A signal
    the process ignores (`nohup`, a job a script started with `&`) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handled = [sig for sig in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(sig) != signal.SIG_IGN]
    previous = {sig: signal.signal(sig, signal.SIG_DFL) for sig in handled}
    try:
        yield
    finally:
        for sig, handler in previous.items():  # None: set in C before Python started (an embedding app)
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


def _never_joined(error: str, world: int, rank: int, where: str, waited: float) -> str:
    """The line for a rendezvous that timed out: rank 0's store counts who came ("1/2 clients joined"); another
    rank never reached rank 0's."""
    came = re.search(r"(\d+)/(\d+) clients joined", error)
    seen = f"{came[1]} of {came[2]} joined" if came else "rank 0 never answered" if "connect" in error else "timed out"
    return (f"WORLD_SIZE={world}: rank {rank} waited {waited:.0f} s at MASTER_ADDR:MASTER_PORT {where} for the other "
            f"processes ({seen}); start all {world} (torchrun on each node, with the same --master-addr and "
            "--master-port), or unset WORLD_SIZE and RANK to run one process")


def _import_world_defaults() -> None:
    """torch.distributed.nn.functional's functions take `group.WORLD` as a default, read when it is first imported.
    Imported after the group exists (torch.optim imports it lazily, through torch._dynamo), it held the group for
    good: destroy_process_group could not free it, and gloo's threads and sockets outlived the run into interpreter
    shutdown, where a rank could abort (SIGABRT). Imported first, its defaults hold None."""
    import torch.distributed.nn.functional  # noqa: F401


def _device_id(device: torch.device) -> torch.device | None:
    """NCCL binds its communicator to this rank's GPU up front (no guessing, no warning at the first barrier)."""
    return device if device.type == "cuda" else None


def barrier(env: Distributed) -> None:
    """Wait until every rank is here (after rank 0 wrote what the others read next); host-side, like any_rank."""
    if env.world_size > 1:
        dist.barrier(group=env.control)


def wrap_ddp(model: nn.Module, env: Distributed) -> nn.Module:
    """The module the training step runs: DDP under torchrun (gradients all-reduced), else the model itself.
    The gradients are views of DDP's all-reduce buckets, not a second copy of them (BERT-base: ~200 MB less peak
    memory per process on gloo, the same losses)."""
    if env.world_size == 1:
        return model
    return nn.parallel.DistributedDataParallel(model, device_ids=[env.device.index] if env.device.type == "cuda"
                                               else None, gradient_as_bucket_view=True)


def sparse_tied_embedding_grads(model: nn.Module, env: Distributed, compiled: bool) -> None:
    """Eager, one process on the CPU, word embeddings tied to an MLM decoder: the embedding's backward returns only
    the rows the batch used, which autograd adds in place into the decoder's dense (V, H) gradient, instead of
    building a second dense one and adding the two (~5% of a BERT-base step on a CPU). DDP's reducer and
    torch.compile expect dense gradients, so they keep the default; so does an untied decoder (no dense gradient
    to add into: the embeddings' would stay sparse, which the fused optimizers refuse), and CUDA, where the sparse
    backward drops [PAD]'s rows with a boolean index (the host waits for the device every backward pass) to save
    one dense (V, H) write, which a GPU's memory bandwidth makes cheap."""
    if (env.world_size == 1 and not compiled and env.device.type == "cpu" and getattr(model, "mlm", None) is not None
            and model.config.tie_word_embeddings):
        model.bert.embeddings.word.sparse = True


def any_rank(flag: bool, env: Distributed) -> bool:
    """True on every rank when it is true on any rank; host-side, so the GPU queue is not drained."""
    if env.world_size == 1:
        return flag
    value = torch.tensor([float(flag)])
    dist.all_reduce(value, op=dist.ReduceOp.SUM, group=env.control)
    return bool(value.item())


def ranks_differing(fingerprint: str, env: Distributed) -> list[int]:
    """The ranks whose hex digest differs from rank 0's, the same list on every rank (host-side, gloo)."""
    if env.world_size == 1:
        return []
    mine = torch.tensor([int(fingerprint[:15], 16)], dtype=torch.int64)  # 60 bits: collisions are no concern
    every = [torch.zeros_like(mine) for _ in range(env.world_size)]
    dist.all_gather(every, mine, group=env.control)
    return [rank for rank, value in enumerate(every) if not torch.equal(value, every[0])]


def refuse_unshared_out(out: Path | str, resumes_from: bytes, finds: str, env: Distributed) -> None:
    """Rank 0 alone saves, so nodes that each keep their own --out (no shared storage) find other states in it on a
    resume: their ranks would start from other steps and optimizer moments, drift apart silently and hang at the
    first collective one of them reaches alone. `resumes_from`: what this rank would continue from (checkpoint
    names and trainer states); `finds` names it in the line (`other checkpoints there`)."""
    differing = ranks_differing(hashlib.sha256(resumes_from).hexdigest(), env)
    if differing:
        raise UsageError(f"--out {out}: rank {differing[0]} finds {finds} than rank 0 (rank 0 alone saves); put "
                         "--out on storage that every node shares")


@contextlib.contextmanager
def rank0_output_lock(out: Path, env: Distributed) -> Iterator[None]:
    """output_locks.output_lock for a run: rank 0, which alone writes OUT, holds it, and its refusal (another bertctl
    holds OUT) is every rank's before any of them goes on, so all exit with the one line. Refused on rank 0
    alone, it left the others waiting in their next collective, which then failed with a second error line
    (gloo's "Connection closed by peer")."""
    with contextlib.ExitStack() as held:
        refusal: BertctlError | None = None
        if env.is_main:
            try:
                held.enter_context(output_lock(out))
            except BertctlError as exc:
                refusal = exc
        if env.world_size > 1:
            shared = [refusal]
            dist.broadcast_object_list(shared, src=0, group=env.control)
            refusal = shared[0]
        if refusal is not None:
            raise refusal
        yield


def all_reduce_sum(value: Tensor, env: Distributed) -> Tensor:
    if env.world_size > 1:
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value


def cleanup_distributed(env: Distributed) -> None:
    """Close the groups setup_distributed opened (the default one last); a group the caller had stays open.

    A gloo group's destructor joins its worker threads while holding the GIL, and a worker that has just finished a
    collective needs the GIL to free it (its saved thread state holds Python objects): the process hangs for good
    when the two meet (seen at the DDP wrapper's collection after the group was closed). So the wrapper, left to
    the garbage collector, goes while its group is still registered, and the workers get a moment without the GIL
    to let their finished work go before the groups are closed."""
    if env.owned:
        gc.collect()
        time.sleep(0.05)
    for group in env.owned:
        dist.destroy_process_group(None if group is dist.group.WORLD else group)


# --- one optimizer step --------------------------------------------------------------------------------

@dataclass
class StepResult:
    loss: float  # the global mean loss over every micro-batch and rank
    parts: dict[str, float]  # e.g. mlm_loss, nsp_loss, mlm_accuracy (global)
    grad_norm: float
    skipped: bool  # True when the loss or gradients were not finite and the update was skipped
    bad: bool  # counts towards --max-bad-steps: skipped, unless fp16's loss scaler skipped a routine overflow

    def to_json(self) -> dict[str, Any]:
        """For a checkpoint's trainer_state.json (non-finite figures as null, which strict JSON readers take)."""
        return json_ready({"loss": self.loss, "parts": self.parts, "grad_norm": self.grad_norm,
                           "skipped": self.skipped, "bad": self.bad})

    @classmethod
    def from_json(cls, saved: dict[str, Any]) -> StepResult:
        def number(value: float | None) -> float:
            return math.nan if value is None else float(value)

        return cls(number(saved["loss"]), {k: number(v) for k, v in saved["parts"].items()},
                   number(saved["grad_norm"]), bool(saved["skipped"]), bool(saved.get("bad", saved["skipped"])))


def resumed_window(saved: list[dict[str, Any]], step: int, log_every: int) -> list[StepResult]:
    """The steps of the open metrics window that a checkpoint saved at `step`, so that the first row after a
    resume averages what the uninterrupted run's did; when `--log-every` changed, only the steps since the
    last row the new setting would have written."""
    since_row = step % log_every
    return [StepResult.from_json(r) for r in saved[-since_row:]] if since_row else []


def window_means(window: list[StepResult]) -> dict[str, float]:
    """The loss, each loss part and the gradient norm averaged over a metrics window's steps that updated the
    model (over all of them when none did)."""
    good = [r for r in window if not r.skipped] or window
    figures = [{"loss": r.loss, "grad_norm": r.grad_norm, **r.parts} for r in good]
    return {name: sum(f[name] for f in figures) / len(figures) for name in figures[0]}


def progress_bar(total: int, initial: int, desc: str, enabled: bool, unit: str = "step", **options: Any) -> Any:
    """A loop's bar (silent when not `enabled`: other ranks); used as a context, so an error line never lands on
    its last line. `options` go to tqdm (scoring passes delay and leave). An enabled bar keeps tqdm's own default,
    so TQDM_DISABLE=1 silences it as it does every tqdm bar."""
    from tqdm.auto import tqdm

    if not enabled:
        options["disable"] = True
    return tqdm(total=total, initial=initial, desc=desc, unit=unit, dynamic_ncols=True, **options)


@dataclass
class PendingStep:
    """One step's figures while they are still on the device.

    Reading them waits for the device to finish the step; the loops read a whole logging window at once
    (`resolve_steps`), so the host queues the next steps meanwhile and the GPU never waits on Python.
    """

    names: list[str]  # names of the loss parts in `values`, then "loss", "grad_norm", "finite", "bad"
    values: Tensor  # (len(names),) float32 on the device


def resolve_steps(pending: list[PendingStep]) -> list[StepResult]:
    """The figures of many steps with one device-to-host copy."""
    if not pending:
        return []
    names = pending[0].names
    results = []
    for row in torch.stack([p.values for p in pending]).tolist():
        figures = dict(zip(names, row, strict=True))
        loss, grad_norm = figures.pop("loss"), figures.pop("grad_norm")
        results.append(StepResult(loss, figures, grad_norm, skipped=not figures.pop("finite"),
                                  bad=bool(figures.pop("bad"))))
    return results


def read_window(pending: list[PendingStep], step: int, bad_in_row: int, limit: int, hint: str
                ) -> tuple[list[StepResult], int]:
    """Read the queued steps (one device sync; `pending` is emptied) ending at `step`, and the updated count of
    NaN/inf steps in a row; `limit` of them in a row stop the run with one line ending in `hint`."""
    results = resolve_steps(pending)
    pending.clear()
    for at, result in enumerate(results, start=step - len(results) + 1):
        bad_in_row = bad_in_row + 1 if result.bad else 0
        if bad_in_row >= limit:
            raise BertctlError(f"the loss or its gradients were NaN/inf for {bad_in_row} steps in a row at step "
                               f"{at}; {hint}")
    return results, bad_in_row


def _check_takes_found_inf(optimizer: torch.optim.Optimizer) -> None:
    """Refuse an optimizer whose step does not take `found_inf` (torch's flag for one, as GradScaler reads it):
    it would fail on the flag (torch's non-fused AdamW, SGD) or step on NaN/inf gradients (RMSprop); skipping on
    the host instead would make every step wait for the device."""
    if not getattr(optimizer, "_step_supports_amp_scaling", False):
        raise ValueError(f"optimizer_step skips a NaN/inf step on the device through the optimizer's `found_inf`: "
                         f"{type(optimizer).__name__} does not take it; use optim.make_optimizer's, or a fused "
                         "torch optimizer (fused=True)")


def optimizer_step(
    model: nn.Module,
    micro_batches: list[dict[str, Tensor]],
    optimizer: torch.optim.Optimizer,
    loss_terms: Callable[[nn.Module, dict[str, Tensor]], dict[str, tuple[Tensor, Tensor]]],
    weights: Callable[[dict[str, Tensor]], dict[str, Tensor]],
    env: Distributed,
    precision: str,
    scaler: Any = None,
    clip: float = 1.0,
) -> PendingStep:
    """Forward/backward every micro-batch, then one clipped update, without waiting for the device.

    `loss_terms(model, batch)` gives, per term, its mean loss over its own units (masked tokens, sequences)
    and the number of correct predictions; `weights(batch)` counts those units, so every term is re-weighted
    by its global count (accuracy too). The result is independent of how the global
    batch is split into micro-batches and ranks, which makes 1 and N processes give the same losses.
    A step whose loss or gradient norm is not finite leaves the weights and optimizer state untouched, decided on
    the device: `optimizer` must take torch's `found_inf` input, as GradScaler uses it (`optim.make_optimizer`'s
    fused AdamW and LAMB; torch's fused SGD; another is refused). fp16's GradScaler only unscales and adjusts its
    scale: its own step would look at the gradients alone, and an inf loss can have finite ones (fp16 logits
    overflowing to -inf at the target).
    """
    _check_takes_found_inf(optimizer)
    units = list(weights(micro_batches[0]))
    counts = torch.stack([sum(weights(b)[name] for b in micro_batches).float().to(env.device) for name in units])
    totals = dict(zip(units, all_reduce_sum(counts, env).clamp(min=1).unbind(), strict=True))
    sums: dict[str, Tensor] = {}
    for i, batch in enumerate(micro_batches):
        last = i == len(micro_batches) - 1
        with model.no_sync() if env.world_size > 1 and not last else contextlib.nullcontext():
            _backward(model, batch, loss_terms, weights, totals, sums, env, precision, scaler)
    names = list(sums)
    reduced = all_reduce_sum(torch.stack([sums[n] for n in names]), env)
    total = sum(reduced[names.index(name)] for name in units)
    grad_norm, finite, bad = _update(model, optimizer, scaler, clip, env.device, total)
    values = torch.cat([reduced, torch.stack([total, grad_norm, finite.float(), bad.float()])]).detach()
    return PendingStep([*names, "loss", "grad_norm", "finite", "bad"], values)


def _backward(model: nn.Module, batch: dict[str, Tensor],
              loss_terms: Callable[[nn.Module, dict[str, Tensor]], dict[str, tuple[Tensor, Tensor]]],
              weights: Callable[[dict[str, Tensor]], dict[str, Tensor]], totals: dict[str, Tensor],
              sums: dict[str, Tensor], env: Distributed, precision: str, scaler: Any) -> None:
    """One micro-batch's forward and backward pass, each term weighted by its share of the global units; its
    figures are added to `sums` (on the device)."""
    with autocast(precision, env.device):
        terms = loss_terms(model, batch)
    batch_weights = weights(batch)
    loss = torch.zeros((), device=env.device)
    for name, (mean, correct) in terms.items():
        share = batch_weights[name].float().to(env.device) / totals[name]
        loss = loss + mean.float() * share
        sums[name] = sums.get(name, 0.0) + mean.detach().float() * share
        sums[f"{name}_correct"] = sums.get(f"{name}_correct", 0.0) + correct.detach().float() / totals[name]
    loss = loss * env.world_size  # DDP averages gradients over ranks; we want their sum
    (scaler.scale(loss) if scaler is not None else loss).backward()


def _update(model: nn.Module, optimizer: torch.optim.Optimizer, scaler: Any, clip: float, device: torch.device,
            total: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The clipped update, skipped on the device when the step's loss `total` or the gradient norm is not finite;
    returns (gradient norm, finite, bad), none of them read: no device sync."""
    if scaler is not None:
        scale = scaler.scale(torch.ones((), device=device))  # before update() changes it; no sync
        scaler.unscale_(optimizer)
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip if clip > 0 else float("inf")).float()
    finite = torch.isfinite(total) & torch.isfinite(grad_norm)
    # fp16's scaler skips a step whose scaled gradients overflowed and lowers its scale: routine, not bad,
    # unless the scale is down to 1 and the gradients overflow unscaled (DeepSpeed's minimum-loss-scale rule)
    bad = ~torch.isfinite(total) | (~finite & (scale <= 1)) if scaler is not None else ~finite
    optimizer.found_inf = (~finite).float()
    optimizer.step()
    del optimizer.found_inf
    if scaler is not None:
        scaler.update()  # halves the scale after the overflow its unscale_ found, else grows it in time
    optimizer.zero_grad(set_to_none=True)
    return grad_norm, finite, bad
