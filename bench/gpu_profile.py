"""Where a pre-training step's GPU time goes: the top kernels of bertctl's compiled bf16 step, by device time.

    python bench/gpu_profile.py --size base            # on the device machine
    python bench/gpu_profile.py --size tiny --device cpu --batch 8   # smoke test

The step is `bench/gpu_pretrain.py`'s (the one `pretrain --compile --precision bf16` runs). After warm-up,
torch.profiler records a few steps and prints the device time per kind of kernel (matmuls, attention,
Triton-fused element-wise work, eager element-wise work, embedding gradient and gathers, optimizer, copies) with each
kind's share of the step, then the kernels that take the most device time, so the next optimisation targets
what is actually slow rather than what looks slow.
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict

import torch
from gpu_pretrain import bertctl_step, make_batch, sync
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

KINDS = [  # first match wins; kernel names of cuBLAS/CUTLASS, PyTorch's attention and Inductor's Triton
    ("attention", r"flash|fmha|attention|sdpa"),
    ("matmul", r"gemm|nvjet|cutlass|xmma|sm\d+_.*_tn|ampere_.*s16816|triton_(tem|mm)"),
    ("triton fused", r"^triton_"),
    ("optimizer", r"multi_tensor|fused_adam|adam|lamb|foreach"),
    ("embedding/gather", r"embedding|index|scatter|gather|radix|sort|segment"),
    ("copy/fill", r"memcpy|memset|copy|fill"),
    ("eager element-wise", r"elementwise|reduce|vectorized|unrolled|softmax|norm"),
]


def kind_of(kernel: str) -> str:
    name = kernel.lower()
    return next((kind for kind, pattern in KINDS if re.search(pattern, name)), "other")


def print_kinds(prof: profile, steps: int) -> None:
    """Device milliseconds per step for each kind of kernel; the shares show what bounds the step."""
    per_kind: dict[str, float] = defaultdict(float)
    for event in prof.key_averages():
        if event.device_type == DeviceType.CUDA:
            per_kind[kind_of(event.key)] += event.self_device_time_total / 1e3 / steps
    total = sum(per_kind.values()) or float("nan")  # no kernel recorded: shares print as nan
    print(f"{'kind':20} {'ms/step':>8} {'share':>6}")
    for kind, ms in sorted(per_kind.items(), key=lambda item: -item[1]):
        print(f"{kind:20} {ms:8.2f} {ms / total:6.1%}")
    print(f"{'all kernels':20} {total:8.2f}")


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
    print(f"{args.size}, batch {args.batch}, {args.steps} steps")
    if device.type == "cuda":
        print_kinds(prof, args.steps)
    sort_by = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=sort_by, row_limit=args.top, max_name_column_width=70))


if __name__ == "__main__":
    main()
