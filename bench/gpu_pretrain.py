"""Pre-training throughput on one GPU: BERT-base and BERT-large, seq 128, bf16, torch.compile.

    python bench/gpu_pretrain.py                     # base and large, bertctl then transformers
    python bench/gpu_pretrain.py --sizes large --transformers-seconds 0
    python bench/gpu_pretrain.py --device cpu --sizes tiny --seconds 2 --transformers-seconds 1  # smoke test

bertctl's side is the step `bertctl pretrain --compile --precision bf16` runs: `training.optimizer_step` with
pre-training's loss terms (sparse MLM at fixed slots, NSP), gradient clipping and the fused AdamW (`--optimizer
lamb`: bertctl's LAMB, as `pretrain --optimizer lamb`; the transformers side keeps AdamW). The
transformers side is `BertForPreTraining` (SDPA attention, dense MLM logits), compiled, same batch, same
AdamW settings. Each side warms up (compiles) first; the timed window ends with a device synchronize.

Prints sequences/s, tokens/s and model FLOPs utilisation (MFU) against the H200's ~790 TFLOP/s dense bf16.
FLOPs per trained sequence (forward + backward = 3 x forward, 2 FLOPs per multiply-add):
    6 * T * P_layers                 dense matmuls of the L encoder layers, P_layers = L * 12 * H^2
  + 12 * L * T^2 * H                 attention scores and weighted values (QK^T and AV)
  + 6 * M * (H^2 + H * V)            MLM head, computed only at the M masked positions (15% of T)
  + 6 * H^2                          pooler
Embedding look-ups, LayerNorm, softmax and the NSP head are left out (standard MFU accounting); the same
formula is used for both sides, so transformers' dense MLM logits count as wasted work.
Every sequence is full length by default; `--padded-share 0.2` makes a fifth of the rows shorter, as in a real
corpus (MFU still counts every position). The batch carries its attention mask either way, all ones without
padding, as `pretrain --compile` passes it: the same graph (and SDPA kernel) as the product's.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial

import torch

from bertctl import optim, training
from bertctl.config import BertConfig, preset
from bertctl.model import BertForPreTraining
from bertctl.pretraining_objective import loss_terms, loss_weights

PEAK_TFLOPS = 790.0
SEQ, VOCAB, MASKED = 128, 30522, 0.15
PREDICTIONS = 20  # fixed MLM slots per row: a seq-128 corpus's max_predictions_per_seq, as `pretrain --compile` uses
BATCH = {"base": 512, "large": 512}  # on an H200 both run faster at 512 than at 256 (measured)


def flops_per_sequence(layers: int, hidden: int) -> float:
    masked = round(SEQ * MASKED)
    return (6 * SEQ * layers * 12 * hidden**2 + 12 * layers * SEQ**2 * hidden
            + 6 * masked * (hidden**2 + hidden * VOCAB) + 6 * hidden**2)


def make_batch(batch: int, device: torch.device, padded_share: float = 0.0) -> dict[str, torch.Tensor]:
    """Random full-length rows; with `padded_share` that share of the rows is shorter (8 to SEQ-1 tokens), as in a
    real corpus (the bundled novels: 19% short rows). The attention mask is there without padding too:
    `pretrain --compile` keeps it (one graph), so a step without it would time another graph than pretrain's."""
    g = torch.Generator(device=device).manual_seed(0)
    ids = torch.randint(5, VOCAB, (batch, SEQ), device=device, generator=g)
    lengths = torch.full((batch,), SEQ, device=device)
    short = round(batch * padded_share)
    lengths[:short] = torch.randint(8, SEQ, (short,), device=device, generator=g)
    real = torch.arange(SEQ, device=device) < lengths[:, None]
    ids = torch.where(real, ids, 0)
    labels = torch.where((torch.rand(batch, SEQ, device=device, generator=g) < MASKED) & real, ids, -100)
    labels = torch.where((labels >= 0).cumsum(1) <= PREDICTIONS, labels, -100)  # at most P per row
    types = (torch.arange(SEQ, device=device) >= SEQ // 2).long().expand(batch, SEQ).contiguous()  # as collated
    nsp = torch.randint(0, 2, (batch,), device=device, generator=g)
    return {"input_ids": ids, "token_type_ids": types, "mlm_labels": labels, "next_sentence_label": nsp,
            "attention_mask": real.long()}


def model_config(size: str, dropout: float | None = None) -> BertConfig:
    rates = {} if dropout is None else {"hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout}
    return preset(size, vocab_size=VOCAB, **rates)


class Bf16OutputNorm(torch.nn.LayerNorm):
    """Experiment (`--norm-out bf16`): LayerNorm statistics in fp32 as autocast computes them, output rounded to
    bf16, so the residual stream between layers is bf16 (Megatron's default) instead of autocast's fp32 and the
    fused add + LayerNorm kernels move about half the bytes. Not what `pretrain` does: measure before adopting."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x).to(torch.bfloat16)


def bertctl_step(size: str, batch: dict[str, torch.Tensor], device: torch.device, dropout: float | None = None,
                 mode: str = "default", norm_out: str = "fp32", optimizer: str = "adamw") -> Callable[[], None]:
    torch.manual_seed(0)
    model = BertForPreTraining(model_config(size, dropout)).to(device).train()
    if norm_out == "bf16":
        for module in model.modules():
            if type(module) is torch.nn.LayerNorm:
                module.__class__ = Bf16OutputNorm
    update = optim.make_optimizer(optimizer, model, 1e-4, 0.01, (0.9, 0.999), 1e-6)
    compiled = torch.compile(model, mode=mode)
    env = training.Distributed(device=device)
    terms = partial(loss_terms, predictions=PREDICTIONS)
    return lambda: training.optimizer_step(compiled, [batch], update, terms, loss_weights, env, "bf16")


def transformers_step(size: str, batch: dict[str, torch.Tensor], device: torch.device,
                      dropout: float | None = None, mode: str = "default") -> Callable[[], None]:
    import transformers

    torch.manual_seed(0)
    config = transformers.BertConfig(**model_config(size, dropout).to_dict(), attn_implementation="sdpa")
    model = transformers.BertForPreTraining(config).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, eps=1e-6, fused=True)
    compiled = torch.compile(model, mode=mode)

    def step() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            out = compiled(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                           attention_mask=batch["attention_mask"], labels=batch["mlm_labels"],
                           next_sentence_label=batch["next_sentence_label"])
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def measure(step: Callable[[], None], seconds: float, device: torch.device) -> tuple[float, float]:
    """(steps per second, seconds spent compiling and warming up)."""
    start = time.perf_counter()
    for _ in range(3):
        step()
    sync(device)
    warm = time.perf_counter() - start
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        steps += 1
    sync(device)
    return steps / (time.perf_counter() - start), warm


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="timed seconds per model for bertctl")
    parser.add_argument("--transformers-seconds", type=float, default=15.0, help="the same for transformers; 0 skips")
    parser.add_argument("--sizes", default="base,large", help="presets (tiny ... large)")
    parser.add_argument("--batch", type=int, default=None, help="sequences per step (default: 512)")
    parser.add_argument("--device", default="cuda", help="cuda, or cpu for a smoke test")
    parser.add_argument("--padded-share", type=float, default=0.0,
                        help="share of shorter rows (with an attention mask), as in a real corpus [0: none]")
    parser.add_argument("--dropout", type=float, default=None, help="both dropout rates (default: 0.1, the paper's)")
    parser.add_argument("--compile-mode", default="default",
                        help="torch.compile mode: default, max-autotune-no-cudagraphs, max-autotune, ...")
    parser.add_argument("--norm-out", choices=["fp32", "bf16"], default="fp32",
                        help="bertctl's LayerNorm outputs: fp32 (autocast's; what pretrain does) or bf16 (experiment)")
    parser.add_argument("--optimizer", choices=["adamw", "lamb"], default="adamw", help="bertctl's optimizer")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = True
    name = torch.cuda.get_device_name() if device.type == "cuda" else "CPU"
    dropout = 0.1 if args.dropout is None else args.dropout
    print(f"{name}  torch {torch.__version__}  seq {SEQ}  bf16  compile mode {args.compile_mode}  dropout {dropout}",
          f" padded share {args.padded_share}  norm out {args.norm_out}  optimizer {args.optimizer}",
          f" MFU vs {PEAK_TFLOPS:.0f} TFLOP/s")
    print(f"{'model':6} {'side':12} {'batch':>5} {'seq/s':>9} {'tokens/s':>11} {'MFU':>6} {'peak GiB':>9}",
          f"{'warm s':>7}")
    sides = [("bertctl", partial(bertctl_step, norm_out=args.norm_out, optimizer=args.optimizer), args.seconds),
             ("transformers", transformers_step, args.transformers_seconds)]
    for size in args.sizes.split(","):
        rates = {}
        config = model_config(size)
        for side, make, seconds in sides:
            if seconds <= 0:
                continue
            size_batch = args.batch or BATCH.get(size, 32)
            if device.type == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            try:
                rows = make_batch(size_batch, device, args.padded_share)
                step = make(size, rows, device, args.dropout, args.compile_mode)
                per_second, warm = measure(step, seconds, device)
            except Exception as exc:  # an OOM or compile failure on one side must not hide the others
                print(f"{size:6} {side:12} failed: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
                continue
            seq_s = per_second * size_batch
            rates[side] = seq_s
            mfu = seq_s * flops_per_sequence(config.num_hidden_layers, config.hidden_size) / (PEAK_TFLOPS * 1e12)
            peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else float("nan")
            print(f"{size:6} {side:12} {size_batch:5d} {seq_s:9.0f} {seq_s * SEQ:11.0f} {mfu:6.1%} {peak:9.1f}",
                  f"{warm:7.0f}", flush=True)
        if len(rates) == 2:
            print(f"{size:6} bertctl / transformers: {rates['bertctl'] / rates['transformers']:.2f}x", flush=True)


if __name__ == "__main__":
    main()
