"""The shared optimizer step: a non-finite step changes nothing, and its figures are read in one batch."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from processes import gone, ranks_said, run_group, torchrun_env
from torch import nn

from bertctl import optim, run_metrics, stop_signals, training, training_state
from bertctl.errors import BertctlError, Terminated, UsageError

pytestmark = pytest.mark.usefixtures("one_thread")


def _terms(model: nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    loss = model(batch["x"]).pow(2).mean() * batch["scale"]
    return {"task": (loss, torch.zeros((), dtype=torch.long))}


def _weights(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {"task": batch["x"].new_full((), batch["x"].shape[0], dtype=torch.long)}


@pytest.mark.parametrize("name", ["adamw", "lamb"])
def test_a_non_finite_step_leaves_weights_and_optimizer_state_untouched(name):
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optimizer = optim.make_optimizer(name, model, 1e-2, 0.01, (0.9, 0.999), 1e-6)
    env = training.Distributed()
    x = torch.randn(3, 4)

    def step(scale: float) -> training.PendingStep:
        return training.optimizer_step(model, [{"x": x, "scale": torch.tensor(scale)}], optimizer, _terms,
                                       _weights, env, "fp32")

    with torch.no_grad():
        first_loss = float(model(x).pow(2).mean())
    good = step(1.0)
    weights = [p.detach().clone() for p in model.parameters()]
    state = _state_copy(optimizer)
    bad = step(math.inf)
    assert all(torch.equal(a, b) for a, b in zip(weights, model.parameters(), strict=True))
    assert _same_state(state, optimizer)
    assert all(float(optimizer.state[p]["step"]) == 1 for p in model.parameters())
    after = step(1.0)
    assert not all(torch.equal(a, b) for a, b in zip(weights, model.parameters(), strict=True))

    results = training.resolve_steps([good, bad, after])
    assert [r.skipped for r in results] == [False, True, False]
    assert results[0].loss == pytest.approx(first_loss, rel=1e-6)
    assert set(results[0].parts) == {"task", "task_correct"} and results[0].grad_norm > 0


@pytest.mark.parametrize("name", ["adamw", "lamb"])
@pytest.mark.parametrize("scaled", [False, True])
def test_a_step_whose_loss_alone_is_not_finite_changes_nothing_under_the_loss_scaler_too(name, scaled):
    """An inf loss can have finite gradients (fp16 logits overflowing to -inf at the target): the step is
    recorded as skipped, so it must be. fp16's GradScaler looked at the gradients alone and took the step."""
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optimizer = optim.make_optimizer(name, model, 1e-2, 0.01, (0.9, 0.999), 1e-6)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0) if scaled else None
    x, env = torch.randn(3, 4), training.Distributed()

    def inf_loss(model: nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        loss, correct = _terms(model, batch)["task"]
        return {"task": (loss + math.inf, correct)}  # d(loss + inf)/d(loss) is 1: the gradients stay finite

    training.optimizer_step(model, [{"x": x, "scale": torch.tensor(1.0)}], optimizer, _terms, _weights, env, "fp32",
                            scaler)
    weights = [p.detach().clone() for p in model.parameters()]
    state = _state_copy(optimizer)
    [result] = training.resolve_steps([training.optimizer_step(model, [{"x": x, "scale": torch.tensor(1.0)}],
                                                               optimizer, inf_loss, _weights, env, "fp32", scaler)])
    assert result.skipped and result.bad and math.isfinite(result.grad_norm)
    assert all(torch.equal(a, b) for a, b in zip(weights, model.parameters(), strict=True))
    assert _same_state(state, optimizer)
    assert all(float(optimizer.state[p]["step"]) == 1 for p in model.parameters())


@pytest.mark.parametrize("kind", [torch.optim.AdamW, torch.optim.RMSprop])
def test_an_optimizer_without_found_inf_is_refused_before_it_steps_on_a_nan_gradient(kind):
    """The skip of a NaN/inf step is `found_inf`, which only fused or AMP-aware optimizers take: torch's
    non-fused AdamW failed on it with "AssertionError: Expected grad_scale and found_inf to be None", and RMSprop
    ignored it and made every weight NaN."""
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optimizer = kind(model.parameters(), lr=1e-2)
    weights = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(ValueError, match=rf"^optimizer_step skips a NaN/inf step .*: {kind.__name__} does not"):
        training.optimizer_step(model, [{"x": torch.randn(3, 4), "scale": torch.tensor(math.nan)}], optimizer,
                                _terms, _weights, training.Distributed(), "fp32")
    assert all(torch.equal(a, b) for a, b in zip(weights, model.parameters(), strict=True))


def _state_copy(optimizer: torch.optim.Optimizer) -> list[dict[str, torch.Tensor]]:
    return [{key: value.clone() for key, value in optimizer.state[p].items()} for p in optimizer.state]


def _same_state(saved: list[dict[str, torch.Tensor]], optimizer: torch.optim.Optimizer) -> bool:
    """Every tensor of the optimizer's state (exp_avg, exp_avg_sq, step) as in `saved`, bit for bit."""
    now = _state_copy(optimizer)
    return [sorted(s) for s in saved] == [sorted(s) for s in now] and all(
        torch.equal(s[key], n[key]) for s, n in zip(saved, now, strict=True) for key in s)


def test_lamb_under_a_loss_scaler_takes_unscaled_gradients_only():
    """GradScaler.step hands LAMB its scale (`grad_scale`) unless unscale_ came first: LAMB would step on scaled
    gradients, so it refuses. Unscaled first, the scaler's `found_inf` skips an overflowed step."""
    model = nn.Linear(4, 2)
    optimizer = optim.make_optimizer("lamb", model, 1e-2, 0.01, (0.9, 0.999), 1e-6)
    scaler = torch.amp.GradScaler("cpu", init_scale=4.0)
    scaler.scale(model(torch.randn(3, 4)).sum()).backward()
    with pytest.raises(ValueError, match="^Lamb steps unscaled gradients: call GradScaler.unscale_"):
        scaler.step(optimizer)
    optimizer = optim.make_optimizer("lamb", model, 1e-2, 0.01, (0.9, 0.999), 1e-6)  # a fresh one, as torch
    scaler = torch.amp.GradScaler("cpu", init_scale=4.0)  # leaves its attributes on it after a refused step
    optimizer.zero_grad()
    scaler.scale(model(torch.randn(3, 4)).sum()).backward()
    weights = [p.detach().clone() for p in model.parameters()]
    model.weight.grad[0, 0] = math.inf
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    assert all(torch.equal(a, b) for a, b in zip(weights, model.parameters(), strict=True))
    assert all(float(optimizer.state[p]["step"]) == 0 for p in model.parameters())


@pytest.mark.parametrize("steps", [0, 1, 999, 99_999])
def test_lambs_bias_corrections_are_computed_in_double_precision(steps):
    """1 - beta2**t in float32 (beta2 itself rounded to float32) is off by ~1e-5 of itself, the update by ~6e-6:
    LAMB computes the bias corrections in float64, as apex (in Python floats) and the host-side version did; its
    step count stays a float32 scalar, as torch's optimizers save it."""
    gen = torch.Generator().manual_seed(0)
    param = nn.Parameter(torch.zeros(1000))  # w - 1.0 * update is -update exactly
    optimizer = optim.Lamb([{"params": [param], "adapt": False}], lr=1.0, betas=(0.9, 0.999), eps=1e-6)
    avg, square = torch.rand(1000, generator=gen) * 0.1 + 0.05, torch.rand(1000, generator=gen) * 0.01
    if steps:  # a resumed state, its step count saved as float32
        optimizer.state[param].update(step=torch.tensor(float(steps)), exp_avg=avg.clone(), exp_avg_sq=square.clone())
    else:
        avg, square = torch.zeros(1000), torch.zeros(1000)
    param.grad = torch.rand(1000, generator=gen) + 0.5
    optimizer.step()
    t, grad = steps + 1, param.grad.double()
    new_avg, new_square = 0.9 * avg.double() + 0.1 * grad, 0.999 * square.double() + 0.001 * grad**2
    expected = (new_avg / (1 - 0.9**t)) / ((new_square / (1 - 0.999**t)).sqrt() + 1e-6)
    assert ((-param.detach().double() - expected).abs() / expected).max() < 1e-6
    assert optimizer.state[param]["step"].dtype == torch.float32 and float(optimizer.state[param]["step"]) == t


def test_lamb_leaves_a_matrix_whose_update_is_zero_as_it_is():
    """The trust ratio is 1 where ||update|| is 0, as in apex and TF: a nonzero matrix with a zero gradient and
    no weight decay stays as it is, not NaN from ||w|| / 0."""
    param = nn.Parameter(torch.ones(3, 4))
    optimizer = optim.Lamb([param], lr=0.1, weight_decay=0.0)
    param.grad = torch.zeros(3, 4)
    optimizer.step()
    assert torch.equal(param.detach(), torch.ones(3, 4))


@pytest.mark.parametrize("name", ["adamw", "lamb"])
@pytest.mark.parametrize("scaled", [False, True])
def test_a_step_never_reads_a_tensor_on_the_host(name, scaled, monkeypatch):
    """On a GPU each read (item, bool, float, tolist) waits for the device: the host could no longer queue the
    next steps. optimizer_step takes the same path on the CPU, so any read there counts; a NaN step among
    them too. LAMB decided on the host (bool(finite)) and read its step counts (item) every step."""
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optimizer = optim.make_optimizer(name, model, 1e-2, 0.01, (0.9, 0.999), 1e-6)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0) if scaled else None
    x, env = torch.randn(3, 4), training.Distributed()
    reads = []
    for method in ("item", "__bool__", "__float__", "__int__", "__index__", "tolist"):
        original = getattr(torch.Tensor, method)
        monkeypatch.setattr(torch.Tensor, method, lambda *args, _name=method, _f=original: reads.append(_name) or
                            _f(*args))
    steps = [training.optimizer_step(model, [{"x": x, "scale": torch.tensor(scale)}], optimizer, _terms, _weights,
                                     env, "fp32", scaler) for scale in (1.0, math.nan, 1.0)]
    assert reads == []
    monkeypatch.undo()
    assert [r.skipped for r in training.resolve_steps(steps)] == [False, True, False]


def test_lamb_in_runs_of_a_few_tensors_steps_as_in_one_run(monkeypatch):
    """Large groups are stepped a run of tensors at a time (to bound the temporaries): the runs must cover every
    tensor once, each with its own trust ratio (Q/K/V's per third), whatever the runs' size."""
    from bertctl.config import preset
    from bertctl.model import BertForPreTraining

    chunks = optim._chunks

    def stepped(elements: int) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = BertForPreTraining(preset("tiny", vocab_size=64))
        optimizer = optim.make_optimizer("lamb", model, 1e-2, 0.01, (0.9, 0.999), 1e-6)
        monkeypatch.setattr(optim, "_chunks", lambda params: chunks(params, elements))
        gen = torch.Generator().manual_seed(1)
        for _ in range(3):
            for param in model.parameters():
                param.grad = torch.randn(param.shape, generator=gen)
            optimizer.step()
        return [param.detach().clone() for param in model.parameters()]

    whole, runs = stepped(2**24), stepped(3000)  # one run per group; runs of a few tensors (the embeddings alone)
    assert all(torch.equal(a, b) for a, b in zip(whole, runs, strict=True))
    assert len(list(chunks(list(BertForPreTraining(preset("tiny", vocab_size=64)).parameters()), 3000))) > 5


def test_rng_states_are_kept_per_rank_and_a_new_rank_gets_its_own():
    torch.manual_seed(7)
    tensors, info = training_state.rng_state()
    assert set(tensors) == {"rng.torch.rank0"}
    expected = torch.rand(4)
    training_state.set_rng_state(tensors, info, rank=0)
    assert torch.equal(torch.rand(4), expected)
    training_state.set_rng_state(tensors, info, rank=1)  # a rank the checkpoint did not have
    rank1 = torch.rand(4)
    training_state.set_rng_state(tensors, info, rank=1)
    assert torch.equal(torch.rand(4), rank1) and not torch.equal(rank1, expected)
    training_state.set_rng_state(tensors, info, rank=2)  # two new ranks must not draw the same dropout masks
    assert not torch.equal(torch.rand(4), rank1)


def test_pythons_and_numpys_generators_come_back_through_the_json_of_a_checkpoint():
    """A resume restores every generator seed_everything seeds, not only torch's: user code (a data callback, a
    library) may draw from `random` or `np.random`, and a resumed run must draw what the uninterrupted one did."""
    import random

    import numpy as np

    def draws() -> tuple:
        return random.random(), np.random.rand(3).tolist(), np.random.normal(), torch.rand(3).tolist()

    training_state.seed_everything(11)
    tensors, info = training_state.rng_state()
    info = json.loads(json.dumps(info))  # as training_state.json stores it
    expected = draws()
    training_state.seed_everything(12)
    training_state.set_rng_state(tensors, info, rank=0)
    assert draws() == expected
    training_state.seed_everything(11)  # and a new run with the same seed draws them too, torch's dropout included
    assert draws() == expected


def test_a_gpu_runs_rng_state_resumed_on_the_cpu_opens_no_cuda_context(monkeypatch):
    """A checkpoint of a GPU run resumed with --device cpu on a machine with GPUs: the CUDA generator is left
    alone (restoring it would initialise CUDA on GPU 0 in every rank), the CPU one restored."""
    torch.manual_seed(3)
    tensors, info = training_state.rng_state()
    expected = torch.rand(4)
    tensors["rng.cuda.rank0"] = torch.zeros(16, dtype=torch.uint8)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: pytest.fail("CUDA initialised"))
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda *args: pytest.fail("CUDA generator restored"))
    training_state.set_rng_state(tensors, info, rank=0)
    assert torch.equal(torch.rand(4), expected)


def test_a_checkpoints_training_state_comes_back_whole_for_the_rank_that_reads_it(tmp_path):
    """Step, optimizer moments, the fp16 loss scale and the reading rank's own generator: a resume that lost the
    scale would overflow again from init_scale, one that took rank 0's generator would repeat its dropout masks."""
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optimizer = optim.make_optimizer("adamw", model, 1e-2, 0.01, (0.9, 0.999), 1e-6)
    model(torch.randn(3, 4)).sum().backward()
    optimizer.step()
    tensors, info = training_state.rng_state()
    ranks = {f"rng.torch.rank{r}": torch.manual_seed(r + 5).get_state() for r in (0, 1)}
    training_state.write_training_state(tmp_path, optimizer, torch.amp.GradScaler("cpu", init_scale=2.0**9),
                                        {"step": 3}, ({**tensors, **ranks}, info))
    again = optim.make_optimizer("adamw", model, 1e-2, 0.01, (0.9, 0.999), 1e-6)
    scaler = torch.amp.GradScaler("cpu", init_scale=1.0)
    assert training_state.read_training_state(tmp_path, again, scaler, rank=1)["step"] == 3
    assert scaler.get_scale() == 2.0**9 and torch.equal(torch.get_rng_state(), ranks["rng.torch.rank1"])
    saved, read = optimizer.state_dict()["state"][0], again.state_dict()["state"][0]
    assert all(torch.equal(saved[name], read[name]) for name in ("step", "exp_avg", "exp_avg_sq"))


def test_a_resume_finds_the_newest_checkpoint_and_keep_prunes_the_oldest(tmp_path):
    """Step folders in step order (step-000010 after step-000009), final/ as the newest by its recorded step, a
    step folder without its trainer_state.json no checkpoint (and removed past the newest), --keep K the newest K."""
    for name, step in (("step-000010", 10), ("step-000002", 2), ("step-000009", 9), ("final", 12)):
        (tmp_path / name).mkdir()
        (tmp_path / name / training_state.TRAINER_STATE).write_text(json.dumps({"step": step}))
    (tmp_path / "step-000013").mkdir()  # a save killed before its trainer state was written
    assert [p.name for p in training_state.complete_checkpoints(tmp_path)] == ["step-000002", "step-000009",
                                                                              "step-000010"]
    assert training_state.latest_checkpoint(tmp_path) == tmp_path / "final"
    training_state.remove_interrupted_saves(tmp_path)
    training_state.prune_checkpoints(tmp_path, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final", "step-000009", "step-000010"]


def test_sparse_word_gradients_give_the_dense_gradient_and_only_where_allowed():
    """Eager one-process pre-training lets the tied embeddings' backward be sparse: the summed gradient is the
    same dense tensor (so the fused AdamW takes it); DDP, compile, CUDA (whose sparse backward drops [PAD]'s rows
    with a boolean index, a wait for the device every backward pass) and models without an MLM head keep dense."""
    from bertctl.config import preset
    from bertctl.model import BertForPreTraining, BertForSequenceClassification

    torch.manual_seed(0)
    model = BertForPreTraining(preset("tiny", vocab_size=300)).eval()
    ids = torch.randint(5, 300, (4, 16))
    ids[0, -3:] = 0  # [PAD] lookups add nothing to row 0 on either path (the decoder's share stays)
    labels = torch.where(torch.rand(4, 16) < 0.3, ids, -100)

    def word_grad() -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        model(ids, mlm_labels=labels, next_sentence_label=torch.zeros(4, dtype=torch.long)).loss.backward()
        return model.bert.embeddings.word.weight.grad

    dense = word_grad().clone()
    for env, compiled in ((training.Distributed(world_size=2), False), (training.Distributed(), True),
                          (training.Distributed(device=torch.device("cuda")), False)):
        training.sparse_tied_embedding_grads(model, env, compiled)
        assert not model.bert.embeddings.word.sparse
    training.sparse_tied_embedding_grads(model, training.Distributed(), compiled=False)
    assert model.bert.embeddings.word.sparse
    summed = word_grad()
    assert summed.layout == torch.strided and torch.allclose(summed, dense, atol=1e-7)
    classifier = BertForSequenceClassification(preset("tiny", vocab_size=300))
    training.sparse_tied_embedding_grads(classifier, training.Distributed(), compiled=False)
    assert not classifier.bert.embeddings.word.sparse


def test_a_process_group_the_caller_opened_stays_open(tmp_path, monkeypatch):
    import torch.distributed as dist

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        env = training.setup_distributed("cpu")
        training.cleanup_distributed(env)
        assert dist.is_initialized() and env.owned == ()
    finally:
        dist.destroy_process_group()


# a rank's run as pretrain and finetune make it, then the gloo threads left in the process once it is over
_CLOSED = """
import gc, os, sys
from pathlib import Path
from torch import nn
from bertctl import optim, training
env = training.setup_distributed("cpu")
model = training.wrap_ddp(nn.Linear(4, 2), env)
optim.make_optimizer("adamw", model, 1e-3, 0.0, (0.9, 0.999), 1e-8)  # torch.optim imports torch._dynamo here
training.barrier(env)
training.cleanup_distributed(env)
del model, env  # the last references to the group are the caller's
gc.collect()
threads = [Path(f"/proc/self/task/{task}/comm").read_text().strip() for task in os.listdir("/proc/self/task")]
Path(sys.argv[1], os.environ["RANK"]).write_text(" ".join(sorted(t for t in threads if "gloo" in t)))
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="reads the threads from /proc")
def test_a_closed_process_group_leaves_no_gloo_thread_running(tmp_path):
    """torch.distributed.nn.functional, first imported after the group existed (by torch.optim), kept it in its
    functions' defaults: gloo's threads and sockets outlived cleanup_distributed into interpreter shutdown."""
    script, threads = tmp_path / "rank.py", tmp_path / "threads"
    script.write_text(_CLOSED)
    threads.mkdir()
    done = run_group([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                      str(29560 + os.getpid() % 1000), str(script), str(threads)], timeout=120,
                     env=torchrun_env(tmp_path))
    assert done.returncode == 0, ranks_said(done.stderr)
    assert {p.name: p.read_text() for p in threads.iterdir()} == {"0": "", "1": ""}


def test_accumulated_micro_batches_all_reduce_the_gradients_once_per_step(tmp_path, monkeypatch):
    """DDP's no_sync on every micro-batch but the last: one all-reduce of each bucket per optimizer step."""
    import torch.distributed as dist

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = nn.Linear(4, 2)
        ddp = nn.parallel.DistributedDataParallel(model)
        reduced = []

        def count(state, bucket):  # unannotated: DDP checks a hook's annotations, which are strings here
            reduced.append(bucket.index())
            done = torch.futures.Future()
            done.set_result(bucket.buffer())
            return done

        ddp.register_comm_hook(None, count)
        micro = [{"x": torch.randn(2, 4), "scale": torch.tensor(1.0)} for _ in range(3)]
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, fused=True)
        training.optimizer_step(ddp, micro, optimizer, _terms, _weights, training.Distributed(world_size=2), "fp32")
        assert reduced == [0]  # the one bucket once, not once per micro-batch
    finally:
        training.cleanup_distributed(training.Distributed(owned=(dist.group.WORLD,)))


def test_a_batch_goes_to_a_gpu_through_pinned_memory(monkeypatch):
    """A copy from pageable memory waits for all the GPU's queued work: fine-tuning's batches, collated on the host
    each step, kept the host from queuing the next step while the GPU ran this one."""
    pinned: list[torch.Tensor] = []
    copies: list[tuple[bool, str, bool]] = []

    def pin(tensor: torch.Tensor) -> torch.Tensor:
        pinned.append(tensor.clone())
        return pinned[-1]

    def is_pinned(tensor: torch.Tensor) -> bool:
        return any(tensor is p for p in pinned)

    def to(tensor: torch.Tensor, device: torch.device, non_blocking: bool = False) -> torch.Tensor:
        copies.append((is_pinned(tensor), torch.device(device).type, non_blocking))
        return tensor

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin)
    monkeypatch.setattr(torch.Tensor, "is_pinned", is_pinned)
    monkeypatch.setattr(torch.Tensor, "to", to)
    batch = {"input_ids": torch.ones(2, 3, dtype=torch.long), "attention_mask": torch.tensor([[1, 1, 0], [1, 1, 1]])}
    training.to_device(batch, torch.device("cuda", 0))
    assert copies == [(True, "cuda", True)] * 2 and len(pinned) == 2
    training.to_device({"input_ids": pinned[0]}, torch.device("cuda", 0))  # the loader's pinned batch as it is
    training.to_device(batch, torch.device("cpu"))
    assert copies[2:] == [(True, "cuda", True), (False, "cpu", True), (False, "cpu", True)] and len(pinned) == 2


def test_a_gpu_the_machine_lacks_is_a_usage_error(monkeypatch):
    """--device cuda:N past the GPUs, or torchrun with more processes than GPUs: one line, before CUDA fails
    with a multi-line "invalid device ordinal" (exit 1)."""
    from bertctl.errors import UsageError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    current = []
    monkeypatch.setattr(torch.cuda, "set_device", current.append)
    assert training.pick_device("cuda:1") == torch.device("cuda:1")
    assert training.pick_device("cuda") == torch.device("cuda")
    assert current == [torch.device("cuda:1")]  # pinned memory and handles then open no context on GPU 0
    with pytest.raises(UsageError, match=r"^--device cuda:2: this machine has 2 GPUs \(cuda:0 to cuda:1\)"):
        training.pick_device("cuda:2")
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: pytest.fail("no GPU to set"))
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("LOCAL_RANK", "2")
    with pytest.raises(UsageError, match="^torchrun: process 2 of this node has no GPU of its own .* at most 2"):
        training.setup_distributed("cuda")

class _Pids(torch.utils.data.Dataset):
    """Item i: the pid of the process that made it (the loader worker)."""

    def __len__(self) -> int:
        return 1000

    def __getitem__(self, index: int) -> int:
        return os.getpid()


def test_loader_workers_leave_stop_signals_to_the_main_process_and_end_with_the_loop():
    """SIGINT/SIGTERM sent to the whole process group reach the worker too: it must live on (torch would raise
    'DataLoader worker is killed' in the main process), and still end with the loop, even an interrupted one."""
    loader = torch.utils.data.DataLoader(_Pids(), batch_size=None, num_workers=1,
                                         worker_init_fn=stop_signals.leave_stop_signals_to_the_main_process)
    with stop_signals.loader_batches(loader) as batches:
        worker = int(next(batches))
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGTERM):
            os.kill(worker, sig)
        time.sleep(0.3)
        assert not gone(worker) and [int(next(batches)) for _ in range(5)] == [worker] * 5
    assert gone(worker)
    with pytest.raises(KeyboardInterrupt), stop_signals.loader_batches(loader) as batches:  # a second Ctrl-C
        worker = int(next(batches))
        raise KeyboardInterrupt
    assert gone(worker)


def test_a_stop_signal_reaching_a_loader_worker_before_its_init_fn_leaves_it_running(monkeypatch):
    """A group's SIGTERM can land in a worker that is still starting: after torch has set its own SIGTERM handler
    there (which kills the worker when the signal is not its parent's) and before `worker_init_fn` ignores it.
    Killed, the worker makes torch raise "DataLoader worker is killed by signal" in the main process, which then
    exits 1 without saving. The signal must wait in the new worker until it ignores it."""
    from torch.utils.data._utils import signal_handling

    real = signal_handling._set_worker_signal_handlers

    def then_sigterm(*args):
        real(*args)
        os.kill(os.getpid(), signal.SIGTERM)  # the group's signal, landing before worker_init_fn

    monkeypatch.setattr(signal_handling, "_set_worker_signal_handlers", then_sigterm)
    loader = torch.utils.data.DataLoader(_Pids(), batch_size=None, num_workers=1,
                                         worker_init_fn=stop_signals.leave_stop_signals_to_the_main_process)
    with stop_signals.loader_batches(loader) as batches:
        worker = int(next(batches))
        assert not gone(worker) and [int(next(batches)) for _ in range(5)] == [worker] * 5
    assert gone(worker)


def test_loader_workers_start_without_running_a_main_file_they_could_not_read(monkeypatch):
    """Under spawn or forkserver (macOS; Linux from Python 3.14) a loader worker runs `__main__`'s file again:
    from `python - < train.py` that is `<stdin>`, and every worker died as it started. What the workers are
    sent as they start (get_preparation_data) now names no main file to run, as under `python -c`."""
    from multiprocessing import spawn
    from types import ModuleType

    main = ModuleType("__main__")
    main.__file__ = "<stdin>"
    monkeypatch.setitem(sys.modules, "__main__", main)

    class Loader:
        def __iter__(self) -> Iterator[dict]:
            return iter([spawn.get_preparation_data("worker")])  # what each worker started here gets

    with stop_signals.loader_batches(Loader()) as batches:
        assert "init_main_from_path" not in next(batches)
    assert main.__file__ == "<stdin>"


def test_workers_an_interrupted_shutdown_leaves_alive_are_killed():
    """A second Ctrl-C inside torch's own shutdown of the workers: those it left alive get SIGKILL, so none outlives
    the loop (multiprocessing would wait for them at exit without a timeout)."""
    killed = []

    class Worker:
        def __init__(self, alive: bool) -> None:
            self.alive = alive

        def is_alive(self) -> bool:
            return self.alive

        def kill(self) -> None:
            killed.append(self)

    class Batches(Iterator[int]):
        _workers = [Worker(True), Worker(False)]

        def __next__(self) -> int:
            raise StopIteration

        def _shutdown_workers(self) -> None:
            raise KeyboardInterrupt

    class Loader:
        def __iter__(self) -> Batches:
            return Batches()

    with pytest.raises(KeyboardInterrupt), stop_signals.loader_batches(Loader()):
        pass
    assert killed == Batches._workers[:1]


def test_metrics_rows_and_saved_steps_write_null_for_non_finite_figures(tmp_path):
    log = run_metrics.MetricsLog(tmp_path)
    log.write({"step": 3, "loss": math.nan, "grad_norm": math.inf, "lr": 1e-4, "skipped_steps": 1})
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 1  # on disk at once: a kill -9 keeps it
    log.close()

    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    row = json.loads((tmp_path / "metrics.jsonl").read_text(), parse_constant=refuse)
    assert row == {"step": 3, "loss": None, "grad_norm": None, "lr": 1e-4, "skipped_steps": 1}
    result = training.StepResult(math.nan, {"mlm": -math.inf, "mlm_correct": 0.25}, 2.0, skipped=True, bad=True)
    saved = json.loads(json.dumps(result.to_json()), parse_constant=refuse)
    back = training.StepResult.from_json(saved)
    assert math.isnan(back.loss) and math.isnan(back.parts["mlm"]) and back.parts["mlm_correct"] == 0.25
    assert back.grad_norm == 2.0 and back.skipped and back.bad


def test_a_resumed_window_holds_the_steps_since_the_last_row_of_the_new_log_every():
    """A checkpoint at step 6 saved under --log-every 10 holds steps 1-6; resumed with --log-every 4 the next
    row (step 8) must average steps 5-8, as an uninterrupted --log-every 4 run's does."""
    saved = [training.StepResult(float(i), {}, 1.0, False, False).to_json() for i in range(1, 7)]
    assert [r.loss for r in training.resumed_window(saved, 6, 10)] == [1, 2, 3, 4, 5, 6]
    assert [r.loss for r in training.resumed_window(saved, 6, 4)] == [5, 6]
    assert training.resumed_window(saved, 6, 3) == [] and training.resumed_window([], 6, 4) == []
    # a new window longer than the saved one, but not twice as long: every saved step, none dropped
    assert [r.loss for r in training.resumed_window(saved, 30, 20)] == [1, 2, 3, 4, 5, 6]


def test_fp16_loss_scaler_overflows_are_skipped_but_not_counted_as_bad_steps():
    """The scaler starts high and halves on each overflow; with --max-bad-steps 5, five overflows in a row at
    the start of an fp16 run used to stop it as if its loss were NaN."""
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optimizer = optim.make_optimizer("adamw", model, 1e-2, 0.01, (0.9, 0.999), 1e-6)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**120)  # scaled gradients overflow float32
    batch = [{"x": torch.randn(3, 4) * 1e3, "scale": torch.tensor(1.0)}]  # scaled, the loss is past float32
    env = training.Distributed()
    steps = [training.optimizer_step(model, batch, optimizer, _terms, _weights, env, "fp32", scaler) for _ in range(6)]
    results, in_row = training.read_window(steps, 6, 0, 5, "hint")
    assert [r.skipped for r in results] == [True] * 6 and not any(r.bad for r in results) and in_row == 0
    assert all(math.isfinite(r.loss) for r in results) and scaler.get_scale() < 2.0**120

    bad = [training.optimizer_step(model, [{**batch[0], "scale": torch.tensor(math.inf)}], optimizer, _terms,
                                   _weights, env, "fp32", scaler) for _ in range(5)]
    with pytest.raises(training.BertctlError, match="NaN/inf for 5 steps in a row at step 11"):
        training.read_window(bad, 11, 0, 5, "hint")


def test_fp16_overflows_at_a_loss_scale_of_one_count_as_bad_steps():
    """Gradients that overflow unscaled never recover: the scaler would halve its scale towards 0 and skip every
    step for ever. At a scale of 1 or below an overflow counts towards --max-bad-steps, as DeepSpeed stops
    at its minimum loss scale."""
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    optimizer = optim.make_optimizer("adamw", model, 1e-2, 0.01, (0.9, 0.999), 1e-6)
    scaler = torch.amp.GradScaler("cpu", init_scale=4.0)
    batch = [{"x": torch.randn(3, 4) * 1e6, "scale": torch.tensor(2e27)}]  # a finite loss, gradients past float32
    env = training.Distributed()
    steps = [training.optimizer_step(model, batch, optimizer, _terms, _weights, env, "fp32", scaler) for _ in range(3)]
    results = training.resolve_steps(steps)
    assert all(math.isfinite(r.loss) and r.skipped for r in results) and scaler.get_scale() == 0.5
    assert [r.bad for r in results] == [False, False, True]  # at scales 4, 2, 1


def test_tokens_per_second_are_the_windows_own_and_the_clock_goes_on_from_a_resume(monkeypatch):
    """A window's rate counts its own tokens over its own time, a validation or save inside left out; `elapsed`
    goes on from what the resumed run had spent."""
    clock = iter([10.0, 12.0, 13.0, 16.0, 18.0, 20.0])
    monkeypatch.setattr(run_metrics.time, "perf_counter", lambda: next(clock))
    throughput = run_metrics.Throughput(elapsed=5.0)
    throughput.add(100)
    assert throughput.rate() == 50.0  # 100 tokens in 2 s
    with throughput.paused():  # 3 s of validation
        pass
    throughput.add(30)
    assert (throughput.rate(), throughput.elapsed()) == (10.0, 15.0)


def _trim(run: Path, step: int, drop_closing_row: bool = False) -> float:
    return run_metrics.trim_metrics(run, run_metrics.kept_metrics(run, step, drop_closing_row))


def test_resume_trims_metrics_past_the_checkpoint_and_a_half_written_last_row(tmp_path):
    """kill -9 during a metrics write leaves half a line; --resume must still start."""
    rows = [json.dumps({"step": s, "loss": 1.0, "elapsed": float(s)}) for s in (10, 20, 30)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(rows) + '\n{"step": 40, "lo', encoding="utf-8")
    assert _trim(tmp_path, 20) == 20.0
    assert (tmp_path / "metrics.jsonl").read_text(encoding="utf-8") == "\n".join(rows[:2]) + "\n"
    # a finished run extended: its closing row goes, its validation row and its clock stay
    (tmp_path / "metrics.jsonl").write_text("\n".join([*rows[:2], '{"step": 20, "val_mlm_loss": 2.0}']) + "\n")
    assert _trim(tmp_path, 20, drop_closing_row=True) == 20.0
    assert (tmp_path / "metrics.jsonl").read_text().splitlines() == [rows[0], '{"step": 20, "val_mlm_loss": 2.0}']


def test_resume_over_a_damaged_metrics_file_is_one_line_naming_it(tmp_path):
    """A bit flip in metrics.jsonl: bytes that are not UTF-8 were a bare UnicodeDecodeError naming no file, a row
    whose step or elapsed is not a number a TypeError; the first is refused naming the file, the second dropped
    as a half-written row is."""
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 10, "loss": 1.0, "elapsed": 10.0}\n{"step": 20, "lo\xe5ss": 1.0}\n')
    with pytest.raises(BertctlError, match=f"^{path} is damaged .*utf-8.*; restore or delete it$"):
        run_metrics.kept_metrics(tmp_path, 20)
    rows = ['{"step": 10, "loss": 1.0, "elapsed": 10.0}', '{"step": "2O", "loss": 1.0}', '{"step": 20, "elapsed": "x"}',
            '{"step": true, "loss": 1.0}', '{"loss": 1.0}']
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    assert _trim(tmp_path, 20) == 10.0
    assert path.read_text(encoding="utf-8") == rows[0] + "\n"


def test_a_world_size_left_set_without_torchrun_is_one_line_naming_it(monkeypatch):
    """A job script's leftover WORLD_SIZE failed in torch's rendezvous ("environment variable MASTER_ADDR expected")."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.setenv("MASTER_PORT", "29500")
    with pytest.raises(UsageError, match="^WORLD_SIZE=2 says this is one of 2 processes, but MASTER_ADDR is not set: "
                                         "launch with torchrun"):
        training.setup_distributed("cpu")
    assert not torch.distributed.is_initialized()


def _a_world_of_two(monkeypatch, rank: int) -> str:
    """The environment of one of two processes started by hand (no torchrun), rank 0's address a free port."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    given = {"WORLD_SIZE": "2", "RANK": str(rank), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    for name, value in given.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    return f"127.0.0.1:{port}"


def test_a_world_whose_other_processes_never_come_says_so_and_times_out_in_one_line(monkeypatch, capsys):
    """WORLD_SIZE=2 with MASTER_ADDR/PORT but no other process waited in torch's rendezvous without a word, Ctrl-C
    held back, for 30 minutes (gloo's timeout, cut short here), then failed with torch's DistStoreError."""
    from datetime import timedelta

    monkeypatch.setattr(torch.distributed.distributed_c10d, "default_pg_timeout", timedelta(seconds=0.2))
    where = _a_world_of_two(monkeypatch, rank=0)
    with pytest.raises(BertctlError) as error:
        training.setup_distributed("cpu")
    assert re.sub(r"waited \d+ s", "waited N s", str(error.value)) == (
        f"WORLD_SIZE=2: rank 0 waited N s at MASTER_ADDR:MASTER_PORT {where} for the other processes (1 of 2 joined); "
        "start all 2 (torchrun on each node, with the same --master-addr and --master-port), or unset WORLD_SIZE and "
        "RANK to run one process")
    assert capsys.readouterr().err == (f"bertctl: joining 2 processes at {where} as rank 0 (WORLD_SIZE=2; waiting "
                                       "for the others; Ctrl-C to stop)\n")
    assert not torch.distributed.is_initialized()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_signal_ends_the_wait_for_the_other_processes_and_torchrun_waits_quietly(monkeypatch, capsys):
    """In the rendezvous a Python handler runs only once torch gives up: SIGINT and SIGTERM end the process there.
    Under torchrun, whose agent starts every process, a short wait is not said."""
    said, told = [], threading.Event()

    def rendezvous(backend, device_id=None):
        said.append([signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)])
        told.wait(5 if len(said) > 1 else 0)  # the second wait lasts until the line is said
        raise torch.distributed.DistNetworkError("The client socket has timed out after 1000ms while trying to "
                                                 "connect to (127.0.0.1, 1).")

    monkeypatch.setattr(training.dist, "init_process_group", rendezvous)
    where = _a_world_of_two(monkeypatch, rank=1)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job")
    before = [signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)]
    with pytest.raises(BertctlError, match=re.escape(f"rank 1 waited 0 s at MASTER_ADDR:MASTER_PORT {where} for the "
                                                     "other processes (rank 0 never answered); start all 2")):
        training.setup_distributed("cpu")
    assert said == [[signal.SIG_DFL, signal.SIG_DFL]] and capsys.readouterr().err == ""
    assert [signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)] == before
    ignored = signal.signal(signal.SIGINT, signal.SIG_IGN)  # started by `nohup` or `&` in a script: stays ignored
    told.set()  # no wait in this rendezvous
    try:
        with pytest.raises(BertctlError):
            training.setup_distributed("cpu")
        assert said[1] == [signal.SIG_IGN, signal.SIG_DFL] and signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, ignored)
    del said[1:]
    told.clear()
    monkeypatch.setattr(training, "TORCHRUN_QUIET_SECONDS", 0.01)  # a wait that lasts is said, by local rank 0
    monkeypatch.setattr(training, "say", lambda line: said.append(line) or told.set())
    with pytest.raises(BertctlError):
        training.setup_distributed("cpu")
    assert said[2:] == [f"joining 2 processes at {where} as rank 1 (WORLD_SIZE=2; waiting for the others; Ctrl-C to "
                        "stop)"]


def test_a_signal_a_launcher_passes_on_is_not_a_second_one(monkeypatch):
    """SLURM and systemd signal every process of the job, and torchrun's agent passes the signal it got on to its
    ranks a few milliseconds later: that copy is the same stop request, not a second one (which would stop the
    rank at once, without its checkpoint). A second signal later than DUPLICATE_SIGNAL_SECONDS still stops it."""
    clock = [100.0]
    monkeypatch.setattr(stop_signals.time, "monotonic", lambda: clock[0])
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    with stop_signals.GracefulStop() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        clock[0] += 0.01
        os.kill(os.getpid(), signal.SIGTERM)  # the launcher's copy
        clock[0] += stop_signals.DUPLICATE_SIGNAL_SECONDS / 2
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.requested
        clock[0] = 100.0 + stop_signals.DUPLICATE_SIGNAL_SECONDS  # as long after the first as that: a second one
        with pytest.raises(Terminated):  # SIGTERM's own exit code, 143
            os.kill(os.getpid(), signal.SIGTERM)
        with pytest.raises(KeyboardInterrupt) as interrupted:
            os.kill(os.getpid(), signal.SIGINT)
        assert not isinstance(interrupted.value, Terminated)
    assert {sig: signal.getsignal(sig) for sig in handlers} == handlers  # the run's handlers go with it


def test_a_handler_set_outside_python_is_given_back_as_the_default(monkeypatch):
    """signal.signal gives None for a handler C code set before Python started (a program that embeds
    Python); handing that back at the end of a run was a TypeError that failed the finished run."""
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    real = signal.signal
    monkeypatch.setattr(signal, "signal", lambda sig, handler: real(sig, handler) and None)
    try:
        with stop_signals.GracefulStop():
            pass
        left = {sig: signal.getsignal(sig) for sig in handlers}
    finally:
        for sig, handler in handlers.items():
            real(sig, handler)
    assert left == dict.fromkeys(handlers, signal.SIG_DFL)


def test_a_run_in_another_thread_trains_without_signal_handlers():
    """Python sets signal handlers in the main thread only: pretrain and every finetune called from another (a web
    app's worker, a notebook's background job) failed before the first step with "ValueError: signal only works
    in main thread", which no one-line error names. Such a thread gets no signal; its run trains on."""
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    seen: list[object] = []

    def run() -> None:
        try:
            with stop_signals.GracefulStop() as stop:
                seen.append(stop.requested)
        except Exception as error:
            seen.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen == [False]
    assert {sig: signal.getsignal(sig) for sig in handlers} == handlers


def test_tqdms_own_disable_setting_silences_the_training_bars():
    """TQDM_DISABLE=1 turns tqdm's bars off (corpus build's too), but pretrain's, finetune's and the scoring bars
    were given disable=False, which overrode it: from Python they could only be hidden by redirecting stderr."""
    code = ("from bertctl import training\n"
            "print(training.progress_bar(3, 0, 'x', True).disable, training.progress_bar(3, 0, 'x', False).disable)")
    unset = {k: v for k, v in os.environ.items() if k != "TQDM_DISABLE"}
    shown = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env).stdout.split()
             for env in (unset, {**unset, "TQDM_DISABLE": "1"})]
    assert shown == [["False", "True"], ["True", "True"]]


def test_ddp_gradients_are_views_of_its_all_reduce_buckets(tmp_path, monkeypatch):
    """No second, gradient-sized copy per process: after a backward each gradient lives in DDP's bucket."""
    import torch.distributed as dist

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        model = nn.Linear(4, 2)
        ddp = training.wrap_ddp(model, training.Distributed(world_size=2))
        ddp(torch.randn(3, 4)).sum().backward()
        storages = {p.grad.untyped_storage().data_ptr() for p in model.parameters()}
        assert len(storages) == 1  # weight and bias gradients share one bucket's storage
    finally:  # DDP alive still: its last collective's work may be freed only now (cleanup_distributed)
        training.cleanup_distributed(training.Distributed(owned=(dist.group.WORLD,)))


def test_micro_batches_of_unequal_masked_tokens_step_as_one_batch(odd_config):
    """Accumulation weights each micro-batch's MLM mean by its share of the step's masked tokens (NSP's by its
    rows): a step over three micro-batches, one without any masked token, has the figures, clipped gradient and
    update of one forward/backward over the whole batch (transformers' and Google's mean over the batch the
    optimizer step sees)."""
    import copy

    from bertctl.model import BertForPreTraining
    from bertctl.pretraining_objective import loss_terms, loss_weights

    torch.manual_seed(0)
    model = BertForPreTraining(odd_config.replace(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, odd_config.vocab_size, (6, 20), generator=g)
    mask = torch.ones_like(ids)
    mask[3, 9:] = 0
    ids[mask == 0] = 0
    labels = torch.full_like(ids, -100)
    for row, count in enumerate([1, 6, 0, 0, 5, 2]):  # rows 2 and 3: a micro-batch without a masked token
        positions = torch.randperm(8, generator=g)[:count] + 1
        labels[row, positions] = ids[row, positions] if row % 2 else torch.randint(0, odd_config.vocab_size,
                                                                                      (count,), generator=g)
    whole = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": mask,
             "mlm_labels": labels, "next_sentence_label": torch.tensor([0, 1, 1, 0, 1, 0])}

    def step(micro_batches):
        net = copy.deepcopy(model)
        before = [p.detach().clone() for p in net.parameters()]
        sgd = torch.optim.SGD(net.parameters(), lr=1.0, fused=True)  # update = -clipped gradient
        figures = training.optimizer_step(net, micro_batches, sgd, loss_terms, loss_weights, training.Distributed(),
                                          "fp32", clip=0.5)
        return figures.values, [b - p.detach() for b, p in zip(before, net.parameters(), strict=True)]

    one, one_update = step([whole])
    split, split_update = step([{k: v[rows] for k, v in whole.items()} for rows in ([0, 1], [2, 3], [4, 5])])
    assert one[-3] > 0.5  # grad_norm: the clipping acts
    torch.testing.assert_close(split, one, rtol=0.0, atol=1e-6)
    for a, b in zip(split_update, one_update, strict=True):
        torch.testing.assert_close(a, b, rtol=0.0, atol=1e-6)


def test_a_metrics_row_averages_the_steps_that_updated_and_all_of_them_when_none_did():
    """A window with a skipped (NaN) step averages the others, so one bad step does not null its row; a window
    of skipped steps only averages them all (its row says null)."""
    def step(loss: float, skipped: bool) -> training.StepResult:
        return training.StepResult(loss, {"mlm": loss / 2, "mlm_correct": 0.25}, 2 * loss, skipped, skipped)

    means = training.window_means([step(1.0, False), step(math.nan, True), step(3.0, False)])
    assert means == {"loss": 2.0, "grad_norm": 4.0, "mlm": 1.0, "mlm_correct": 0.25}
    assert all(math.isnan(v) for k, v in training.window_means([step(math.nan, True)] * 2).items()
               if k != "mlm_correct")


def test_only_bad_steps_in_a_row_stop_a_run_and_the_count_goes_on_across_windows():
    """A finite step resets the count: bad steps spread over a window never stop the run, while the count a
    window ends with carries into the next (--max-bad-steps 3 here)."""
    def pending(bad: bool) -> training.PendingStep:
        figures = [math.nan if bad else 1.0, 1.0, float(not bad), float(bad)]
        return training.PendingStep(["loss", "grad_norm", "finite", "bad"], torch.tensor(figures))

    results, in_row = training.read_window([pending(b) for b in (True, True, False, True, False, True)], 6, 0, 3,
                                           "hint")
    assert [r.skipped for r in results] == [True, True, False, True, False, True] and in_row == 1
    with pytest.raises(BertctlError, match=r"NaN/inf for 3 steps in a row at step 8; hint$"):
        training.read_window([pending(True), pending(True), pending(False)], 9, in_row, 3, "hint")


def test_a_global_batch_without_a_masked_token_steps_on_its_nsp_loss_alone(odd_config):
    """A term with no units in the whole step (no masked token for the MLM) adds 0, not 0/0: the step updates
    the model on its other terms instead of being skipped as NaN."""
    from bertctl.model import BertForPreTraining
    from bertctl.pretraining_objective import loss_terms, loss_weights

    torch.manual_seed(0)
    model = BertForPreTraining(odd_config.replace(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    ids = torch.randint(5, odd_config.vocab_size, (2, 8), generator=torch.Generator().manual_seed(1))
    batch = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": torch.ones_like(ids),
             "mlm_labels": torch.full_like(ids, -100), "next_sentence_label": torch.tensor([0, 1])}
    sgd = torch.optim.SGD(model.parameters(), lr=1.0, fused=True)
    [result] = training.resolve_steps([training.optimizer_step(model, [batch], sgd, loss_terms, loss_weights,
                                                               training.Distributed(), "fp32")])
    assert not result.skipped and result.parts["mlm"] == result.parts["mlm_correct"] == 0.0
    assert result.loss == result.parts["nsp"] > 0


def test_clip_0_turns_clipping_off():
    """--clip 0: the update is the whole gradient however large its norm (torch's max_norm 0 would zero it)."""
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    batch = {"x": torch.randn(3, 4) * 10, "scale": torch.tensor(1.0)}
    _terms(model, batch)["task"][0].backward()
    gradients = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    before = [p.detach().clone() for p in model.parameters()]
    sgd = torch.optim.SGD(model.parameters(), lr=1.0, fused=True)  # update = -gradient
    [result] = training.resolve_steps([training.optimizer_step(model, [batch], sgd, _terms, _weights,
                                                               training.Distributed(), "fp32", clip=0.0)])
    assert result.grad_norm == pytest.approx(float(torch.cat([g.flatten() for g in gradients]).norm()), rel=1e-6)
    assert result.grad_norm > 1
    for old, new, gradient in zip(before, model.parameters(), gradients, strict=True):
        torch.testing.assert_close(old - new.detach(), gradient, rtol=1e-6, atol=1e-6)


def test_a_loss_scaler_clips_and_reports_the_unscaled_gradients():
    """fp16's scaled gradients are unscaled before the clip: clipped while still scaled, the update would be 1/scale
    of the clipped one and the logged grad_norm `scale` times the true one."""
    batch = {"x": torch.randn(3, 4, generator=torch.Generator().manual_seed(0)) * 10, "scale": torch.tensor(1.0)}
    stepped = []
    for scaler in (None, torch.amp.GradScaler("cpu", init_scale=2.0**10)):
        torch.manual_seed(0)
        model = nn.Linear(4, 2)
        sgd = torch.optim.SGD(model.parameters(), lr=1.0, fused=True)
        [result] = training.resolve_steps([training.optimizer_step(model, [batch], sgd, _terms, _weights,
                                                                   training.Distributed(), "fp32", scaler, 0.5)])
        stepped.append((result.grad_norm, [p.detach().clone() for p in model.parameters()]))
    (plain_norm, plain), (scaled_norm, scaled) = stepped
    assert plain_norm > 0.5 and scaled_norm == pytest.approx(plain_norm, rel=1e-6)
    for a, b in zip(plain, scaled, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("precision", "dtype"), [("bf16", torch.bfloat16), ("fp16", torch.float16),
                                                  ("fp32", torch.float32)])
def test_a_precisions_autocast_computes_in_its_dtype(precision, dtype):
    x = torch.randn(2, 2)
    with training.autocast(precision, torch.device("cpu")):
        assert torch.mm(x, x).dtype == dtype


def test_a_saved_steps_flags_come_back_as_they_were():
    """A checkpoint's log window keeps a loss-scaler skip (skipped, not bad) apart from a NaN step (both)."""
    steps = [training.StepResult(1.0, {"mlm": 1.0}, 2.0, skipped, bad) for skipped, bad in
             ((False, False), (True, False), (True, True))]
    assert [training.StepResult.from_json(s.to_json()) for s in steps] == steps
