"""One short device session's worth of GPU measurements, most informative first, within a time budget.

    python bench/gpu_session.py                    # on the device machine: about 8 minutes
    python bench/gpu_session.py --budget 300 --only profile,base
    python bench/gpu_session.py --smoke             # the same plan on the CPU with a tiny model: checks the script

Device time is scarce (minutes per session), so the questions are ranked and each runs as its own process
under a time cap: a slow compile or a crash costs its own slot only, and whatever finished is printed.
    profile   where base's step spends device time, by kind of kernel (bench/gpu_profile.py)
    base      BERT-base as `pretrain --compile` trains it (bench/gpu_pretrain.py, batch 512, 20 MLM slots)
    norm      the same with LayerNorm outputs in bf16: how much the fp32 residual stream costs
    large     BERT-large, the same step
    padded    BERT-base with a fifth of the rows short, as real corpora give
    autotune  BERT-base compiled with max-autotune-no-cudagraphs (Triton GEMM templates and epilogues)
    lamb      BERT-base with `--optimizer lamb` (multi-tensor kernels; a NaN/inf step skipped on the device)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
MEASURE = ["--transformers-seconds", "0", "--seconds", "20"]
PLAN = {  # name: (arguments, seconds allowed)
    "profile": (["gpu_profile.py", "--size", "base", "--top", "15"], 150),
    "base": (["gpu_pretrain.py", "--sizes", "base", *MEASURE], 110),
    "norm": (["gpu_pretrain.py", "--sizes", "base", "--norm-out", "bf16", *MEASURE], 110),
    "large": (["gpu_pretrain.py", "--sizes", "large", *MEASURE], 150),
    "padded": (["gpu_pretrain.py", "--sizes", "base", "--padded-share", "0.2", *MEASURE], 110),
    "autotune": (["gpu_pretrain.py", "--sizes", "base", "--compile-mode", "max-autotune-no-cudagraphs", *MEASURE],
                 300),
    "lamb": (["gpu_pretrain.py", "--sizes", "base", "--optimizer", "lamb", "--transformers-seconds", "0",
              "--seconds", "10"], 90),
}


def run(name: str, args: list[str], cap: float) -> None:
    print(f"== {name}: python bench/{' '.join(args)}  (cap {cap:.0f} s)", flush=True)
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, *args], cwd=HERE, capture_output=True, text=True, timeout=cap,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                  [str(HERE.resolve().parent), os.environ.get("PYTHONPATH", "")])})  # bertctl too
        lines = done.stdout.splitlines()
        if done.returncode:
            lines.append(f"exit {done.returncode}: {(done.stderr.strip().splitlines() or [''])[-1]}")
    except subprocess.TimeoutExpired as stopped:
        out = stopped.stdout.decode() if isinstance(stopped.stdout, bytes) else stopped.stdout or ""
        lines = [*out.splitlines(), f"stopped at its {cap:.0f} s cap"]
    print("\n".join(lines), f"\n({time.perf_counter() - start:.0f} s)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=480.0, help="seconds for the whole session; items that "
                        "could overrun it are skipped")
    parser.add_argument("--only", default=",".join(PLAN), help=f"items in order, from {','.join(PLAN)}")
    parser.add_argument("--smoke", action="store_true", help="tiny model, batch 8, 2 s, on the CPU")
    args = parser.parse_args()
    deadline = time.perf_counter() + args.budget
    for name in args.only.split(","):
        if name not in PLAN:
            parser.error(f"--only: unknown item {name!r}; choose from {', '.join(PLAN)}")
        item, cap = PLAN[name]
        left = deadline - time.perf_counter()
        if left < min(cap, 90):
            print(f"== {name}: skipped, {left:.0f} s of the budget left")
            continue
        if args.smoke:
            item = [{"base": "tiny", "large": "tiny", "20": "2", "10": "2"}.get(arg, arg) for arg in item]
            item += ["--device", "cpu", "--batch", "8"]
        run(name, item, min(cap, left))


if __name__ == "__main__":
    main()
