"""Where a pre-training step's GPU time goes: the top kernels of bertctl's compiled bf16 step, by device time.

    python bench/gpu_profile.py --size base            # on the device machine
    python bench/gpu_profile.py --size tiny --device cpu --batch 8   # smoke test

The step is `bench/gpu_pretrain.py`'s (the one `pretrain --compile --precision bf16` runs). After warm-up,
torch.profiler records a few steps and prints the kernels that take the most device time, with each one's
share of the step, so the next optimisation targets what is actually slow rather than what looks slow.
"""

from __future__ import annotations

import argparse

import torch
from gpu_pretrain import bertctl_step, make_batch, sync
from torch.profiler import ProfilerActivity, profile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="base")
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--steps", type=int, default=5, help="profiled steps (after 3 warm-up steps)")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = True
    step = bertctl_step(args.size, make_batch(args.batch, device), device)
    for _ in range(3):
        step()
    sync(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(args.steps):
            step()
        sync(device)
    sort_by = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(f"{args.size}, batch {args.batch}, {args.steps} steps, sorted by {sort_by}")
    print(prof.key_averages().table(sort_by=sort_by, row_limit=args.top, max_name_column_width=70))


if __name__ == "__main__":
    main()
