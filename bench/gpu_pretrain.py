"""Pre-training throughput on one GPU: BERT-base and BERT-large, seq 128, bf16, torch.compile, ~60 s each.

    python bench/gpu_pretrain.py [--seconds 60] [--sizes base,large]

Prints sequences/s, tokens/s and model FLOPs utilisation (MFU) against the H200's ~790 TFLOP/s dense bf16.
FLOPs per trained sequence (forward + backward = 3 x forward, 2 FLOPs per multiply-add):
    6 * T * P_layers                 dense matmuls of the L encoder layers, P_layers = L * 12 * H^2
  + 12 * L * T^2 * H                 attention scores and weighted values (QK^T and AV)
  + 6 * M * (H^2 + H * V)            MLM head, computed only at the M masked positions (15% of T)
  + 6 * H^2                          pooler
Embedding look-ups, LayerNorm, softmax and the NSP head are left out (standard MFU accounting).
Every sequence is full length (no padding, so no attention mask and SDPA may pick its flash kernel), as in
a corpus built with short_seq_prob 0.
"""

from __future__ import annotations

import argparse
import time

import torch

from bertctl.config import preset
from bertctl.model import BertForPreTraining
from bertctl.training import make_optimizer

PEAK_TFLOPS = 790.0
SEQ, VOCAB, MASKED = 128, 30522, 0.15
PREDICTIONS = 32  # fixed MLM slots per row (>= the masked tokens any row has), as `pretrain --compile` uses
BATCH = {"base": 256, "large": 128}


def flops_per_sequence(layers: int, hidden: int) -> float:
    masked = round(SEQ * MASKED)
    return (6 * SEQ * layers * 12 * hidden**2 + 12 * layers * SEQ**2 * hidden
            + 6 * masked * (hidden**2 + hidden * VOCAB) + 6 * hidden**2)


def run(size: str, seconds: float, device: torch.device) -> dict[str, float]:
    torch.backends.cuda.matmul.allow_tf32 = True
    config = preset(size, vocab_size=VOCAB)
    torch.manual_seed(0)
    model = BertForPreTraining(config).to(device).train()
    optimizer = make_optimizer("adamw", model, 1e-4, 0.01, (0.9, 0.999), 1e-6)
    compiled = torch.compile(model)
    batch = BATCH.get(size, 32)
    g = torch.Generator(device=device).manual_seed(0)
    ids = torch.randint(5, VOCAB, (batch, SEQ), device=device, generator=g)
    labels = torch.where(torch.rand(batch, SEQ, device=device, generator=g) < MASKED, ids, -100)
    labels = torch.where((labels >= 0).cumsum(1) <= PREDICTIONS, labels, -100)  # at most P per row
    types = (torch.arange(SEQ, device=device) >= SEQ // 2).long().expand(batch, SEQ)
    nsp = torch.randint(0, 2, (batch,), device=device, generator=g)

    def step() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            out = compiled(ids, types, None, mlm_labels=labels, next_sentence_label=nsp, mlm_predictions=PREDICTIONS)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(5):  # compile and warm up
        step()
    sync(device)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        steps += 1
    sync(device)
    elapsed = time.perf_counter() - start
    seq_s = steps * batch / elapsed
    mfu = seq_s * flops_per_sequence(config.num_hidden_layers, config.hidden_size) / (PEAK_TFLOPS * 1e12)
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else float("nan")
    return {"seq_s": seq_s, "tok_s": seq_s * SEQ, "mfu": mfu, "batch": batch, "peak_gb": peak}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--sizes", default="base,large", help="presets (tiny ... large)")
    parser.add_argument("--device", default="cuda", help="cuda, or cpu for a smoke test")
    args = parser.parse_args()
    device = torch.device(args.device)
    name = torch.cuda.get_device_name() if device.type == "cuda" else "CPU"
    print(f"{name}  torch {torch.__version__}  seq {SEQ}  bf16  compiled")
    print(f"{'model':6} {'batch':>5} {'seq/s':>9} {'tokens/s':>11} {'MFU':>6} {'peak GiB':>9}")
    for size in args.sizes.split(","):
        r = run(size, args.seconds, device)
        print(f"{size:6} {r['batch']:5d} {r['seq_s']:9.0f} {r['tok_s']:11.0f} {r['mfu']:6.1%} {r['peak_gb']:9.1f}")


if __name__ == "__main__":
    main()
