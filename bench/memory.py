"""Gradient checkpointing's memory and time: one pre-training step (MLM+NSP, AdamW) of bertctl and of
transformers' BertForPreTraining, each with and without checkpointing, on the CPU.

    python bench/memory.py                                   # BERT-base, seq 512, batch 4, fp32
    python bench/memory.py --preset mini --seq 128 --batch 8 --steps 1

Everything runs in fresh child processes, after a warm-up step that allocates the gradients and AdamW's state.
"s/step" is the fastest of --steps full steps (forward, backward, clip, AdamW), the two cases of a library
stepping in turn in one process. For the memory figures each case has a process of its own that resets the peak
RSS (/proc/self/clear_refs) before a step and reads it (VmHWM) after the backward pass, with
MALLOC_MMAP_THRESHOLD_ set so glibc hands every freed tensor back and RSS follows the live tensors.
"peak" is that whole-process peak (weights, AdamW state, activations, gradients); "step" is what the forward
and backward passes add over the resident weights and optimizer state: the part checkpointing shrinks.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import torch
from pretrain import VOCAB, make_batch  # bench/pretrain.py's random batch, at any length

SIDES = ("bertctl", "transformers")


def make_model(side: str, preset: str, checkpointing: bool) -> tuple[torch.nn.Module, object]:
    """The model in training mode and its forward+loss for a batch; checkpointing as each library turns it on."""
    from bertctl.config import preset as bert_preset

    config = bert_preset(preset, vocab_size=VOCAB)
    torch.manual_seed(0)
    if side == "bertctl":
        from bertctl.model import BertForPreTraining
        from bertctl.training import Distributed, sparse_tied_embedding_grads

        model = BertForPreTraining(config).train()
        sparse_tied_embedding_grads(model, Distributed(), compiled=False)  # as `bertctl pretrain` runs on a CPU
        model.set_gradient_checkpointing(checkpointing)
        return model, lambda b: model(b["ids"], b["types"], b["mask"], mlm_labels=b["labels"],
                                      next_sentence_label=b["nsp"]).loss
    import transformers

    model = transformers.BertForPreTraining(transformers.BertConfig(**config.to_dict())).train()
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model, lambda b: model(input_ids=b["ids"], token_type_ids=b["types"], attention_mask=b["mask"],
                                  labels=b["labels"], next_sentence_label=b["nsp"]).loss


def _status_mb(field: str) -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field)) / 1024


def _trainer(side: str, preset: str, checkpointing: bool) -> tuple[object, object]:
    """(forward and backward of a batch, then clip + AdamW update) for one model; bertctl's AdamW is the one
    `bertctl pretrain` makes (fused, aware of the sparse embedding gradient), transformers' torch's."""
    from bertctl.optim import make_optimizer

    model, loss_of = make_model(side, preset, checkpointing)
    optimizer = make_optimizer("adamw", model, 1e-4, 0.01, (0.9, 0.999), 1e-6) if side == "bertctl" else \
        torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, eps=1e-6)

    def update() -> None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return lambda b: loss_of(b).backward(), update


def measure_memory(side: str, preset: str, checkpointing: bool, batch: int, seq: int) -> dict[str, float]:
    """In this process, after a warm-up step: the peak RSS of a forward and backward pass, and what they add."""
    backward, update = _trainer(side, preset, checkpointing)
    b = make_batch(batch, seq)
    backward(b)
    update()  # the warm-up: gradients and AdamW's state exist from here on
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # VmHWM := VmRSS
    resident = _status_mb("VmRSS")
    backward(b)
    peak = _status_mb("VmHWM")
    return {"peak_mb": peak, "step_mb": peak - resident}


def time_both(side: str, preset: str, batch: int, seq: int, steps: int) -> dict[str, float]:
    """In this process, without and with checkpointing, one step of each in turn (so load from other processes
    falls on both alike): the fastest of `steps` full steps of each, after a warm-up step."""
    trainers = {on: _trainer(side, preset, on) for on in (False, True)}
    b = make_batch(batch, seq)
    seconds: dict[bool, list[float]] = {False: [], True: []}
    for i in range(steps + 1):
        for on, (backward, update) in trainers.items():
            start = time.perf_counter()
            backward(b)
            update()
            if i:
                seconds[on].append(time.perf_counter() - start)
    return {str(on): min(values) for on, values in seconds.items()}


def _child(call: str, threads: int, env: dict[str, str] | None = None) -> dict[str, float]:
    bench = os.path.dirname(os.path.abspath(__file__))  # not `bench` under the working folder: any folder runs it
    code = f"import sys; sys.path.insert(0, {bench!r}); import memory, torch, json\n" \
           f"torch.set_num_threads({threads})\nprint(json.dumps(memory.{call}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, **(env or {})})
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_side(side: str, args: argparse.Namespace) -> dict[bool, dict[str, float]]:
    """Each case's memory in a fresh process with glibc handing every freed tensor back at once (which slows a
    step down), then both cases' times in one process without that."""
    shape = f"{args.batch}, {args.seq}"
    results = {on: _child(f"measure_memory({side!r}, {args.preset!r}, {on}, {shape})", args.threads,
                          {"MALLOC_MMAP_THRESHOLD_": "65536"}) for on in (False, True)}
    seconds = _child(f"time_both({side!r}, {args.preset!r}, {shape}, {args.steps})", args.threads)
    return {on: {"seconds": seconds[str(on)], **results[on]} for on in (False, True)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="base")
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3, help="timed steps after the warm-up (the fastest counts)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = {(side, on): r for side in SIDES for on, r in run_side(side, args).items()}
    print(f"torch {torch.__version__}, {args.threads} threads, {args.preset}, seq {args.seq}, batch {args.batch}, "
          "fp32, CPU")
    print(f"{'side':13} {'checkpointing':>13} {'s/step':>8} {'peak MB':>8} {'step MB':>8} "
          f"{'time x':>7} {'step MB x':>9}")
    for (side, on), r in results.items():
        plain = results[(side, False)]
        print(f"{side:13} {'on' if on else 'off':>13} {r['seconds']:8.2f} {r['peak_mb']:8.0f} {r['step_mb']:8.0f} "
              f"{r['seconds'] / plain['seconds']:7.2f} {r['step_mb'] / plain['step_mb']:9.2f}")
    for on in (False, True):
        ours, theirs = results[("bertctl", on)], results[("transformers", on)]
        print(f"bertctl / transformers, checkpointing {'on' if on else 'off'}: time "
              f"{ours['seconds'] / theirs['seconds']:.2f}x, peak {ours['peak_mb'] / theirs['peak_mb']:.2f}x, "
              f"step {ours['step_mb'] / theirs['step_mb']:.2f}x")
    if args.json:
        print(json.dumps([{"side": side, "checkpointing": on, **r} for (side, on), r in results.items()]))


if __name__ == "__main__":
    main()
