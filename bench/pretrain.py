"""One pre-training step, bertctl vs transformers' BertForPreTraining: same shape, batch, process, CPU.

    python bench/pretrain.py                # mini (4x256, seq 128, batch 32) and base (seq 128, batch 8)
    python bench/pretrain.py --sizes mini --steps 5

Timing runs both models in this process, interleaved, and reports the median step (forward, backward,
AdamW update). Peak memory is each side's peak RSS (VmHWM) in a fresh child process doing the same steps.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import torch

SIZES = {"mini": ("mini", 32), "base": ("base", 8)}
SEQ, VOCAB, MASKED = 128, 30522, 0.15


def make_batch(batch: int, seq: int = SEQ, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (batch, seq), generator=g)
    labels = torch.where(torch.rand(batch, seq, generator=g) < MASKED, ids, torch.full_like(ids, -100))
    types = (torch.arange(seq) >= seq // 2).long().expand(batch, seq).contiguous()
    return {"ids": ids, "types": types, "mask": torch.ones_like(ids), "labels": labels,
            "nsp": torch.randint(0, 2, (batch,), generator=g)}


def make_side(side: str, preset: str):
    from bertctl.config import preset as bert_preset

    config = bert_preset(preset, vocab_size=VOCAB)
    torch.manual_seed(0)
    if side == "bertctl":
        from bertctl.model import BertForPreTraining
        from bertctl.optim import make_optimizer
        from bertctl.training import Distributed, sparse_tied_embedding_grads

        model = BertForPreTraining(config).train()
        sparse_tied_embedding_grads(model, Distributed(), compiled=False)  # as `bertctl pretrain` runs on a CPU
        optimizer = make_optimizer("adamw", model, 1e-4, 0.01, (0.9, 0.999), 1e-6)

        def step(b):
            out = model(b["ids"], b["types"], b["mask"], mlm_labels=b["labels"], next_sentence_label=b["nsp"])
            out.loss.backward()
            return out.loss
    else:
        import transformers

        model = transformers.BertForPreTraining(transformers.BertConfig(**config.to_dict())).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, eps=1e-6)

        def step(b):
            out = model(input_ids=b["ids"], token_type_ids=b["types"], attention_mask=b["mask"], labels=b["labels"],
                        next_sentence_label=b["nsp"])
            out.loss.backward()
            return out.loss

    def train_step(b):
        loss = step(b)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    return train_step


def time_sides(preset: str, batch: int, steps: int) -> dict[str, float]:
    b = make_batch(batch)
    sides = {name: make_side(name, preset) for name in ("bertctl", "transformers")}
    times: dict[str, list[float]] = {name: [] for name in sides}
    for fn in sides.values():  # warm-up
        fn(b)
    for _ in range(steps):
        for name, fn in sides.items():
            start = time.perf_counter()
            fn(b)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def child_peak(side: str, preset: str, batch: int, steps: int) -> float:
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the parent through fork and exec.
    code = (f"import sys; sys.path.insert(0, 'bench'); import pretrain as p, torch\n"
            f"torch.set_num_threads({torch.get_num_threads()})\n"
            f"fn = p.make_side({side!r}, {preset!r}); b = p.make_batch({batch})\n"
            f"[fn(b) for _ in range({steps})]\n"
            f"print([line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM')][0])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="mini,base")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, seq {SEQ}, fp32, CPU")
    print(f"{'size':6} {'batch':>5} {'bertctl s/step':>15} {'transformers':>13} {'speed-up':>9} "
          f"{'peak MB ours':>13} {'peak MB theirs':>15}")
    for name in args.sizes.split(","):
        preset, batch = SIZES[name]
        t = time_sides(preset, batch, args.steps)
        mem = {side: child_peak(side, preset, batch, 2) for side in ("bertctl", "transformers")}
        ratio = t["transformers"] / t["bertctl"]
        rows.append({"size": name, "batch": batch, "bertctl_s": t["bertctl"], "transformers_s": t["transformers"],
                     "speedup": ratio, "peak_mb_bertctl": mem["bertctl"], "peak_mb_transformers": mem["transformers"]})
        print(f"{name:6} {batch:5d} {t['bertctl']:15.3f} {t['transformers']:13.3f} {ratio:8.2f}x "
              f"{mem['bertctl']:13.0f} {mem['transformers']:15.0f}")
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
