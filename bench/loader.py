"""Pre-training input speed: bertctl's batches vs transformers' DataCollatorForLanguageModeling, one CPU core.

    python bench/loader.py                      # the bundled novels at seq 128, dynamic masking, batch 512
    python bench/loader.py --batch 256 --batches 40

Both sides start from the same memory-mapped Arrow corpus (built here with `bertctl corpus build`) and make
padded, masked micro-batches of `--batch` rows, timed in one process, one thread, as one DataLoader worker
would: bertctl is `StepBatches` (the row order of the step, the Arrow read, padding, Google's masking drawn
per row); transformers reads the same rows and calls DataCollatorForLanguageModeling (15% masking,
80/10/10), fed by its fast tokenizer loaded from the corpus's tokenizer folder. "huge corpus" reruns
bertctl as if the corpus had 10^9 rows (row ids wrap onto the real table), to show that shuffling costs
nothing per batch at any corpus size. A GPU step needs its batches at least this fast: one H200 trains
BERT-base at ~5,000-7,000 sequences/s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bertctl.config import CorpusConfig, TokenizerTrainConfig  # noqa: E402
from bertctl.corpus import build_corpus, corpus_tokenizer, load_corpus  # noqa: E402
from bertctl.data.batches import BatchPlan, Collator, StepBatches  # noqa: E402
from bertctl.data.masking import masking_options  # noqa: E402
from bertctl.tokenizer_train import train_tokenizer  # noqa: E402

TEXT = ROOT / "bertctl" / "resources" / "austen.txt.gz"


class WrappedRows:
    """A table that pretends to have `rows` rows by wrapping row ids onto a real one."""

    def __init__(self, table, rows: int) -> None:
        self.table, self.rows = table, rows

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, ids: list[int]):
        return self.table[[i % len(self.table) for i in ids]]


def bertctl_batches(table, manifest: dict, corpus: Path, batch: int, rows: int | None = None
                    ) -> Callable[[int], object]:
    tokenizer = corpus_tokenizer(corpus, manifest)
    masking = masking_options(tokenizer, manifest["masked_lm_prob"], manifest["max_predictions_per_seq"],
                              manifest["whole_word_masking"])
    source = table if rows is None else WrappedRows(table, rows)
    plan = BatchPlan(len(source), batch, batch, 0, 1, seed=0)
    steps = StepBatches(source, plan, Collator(tokenizer.pad_id, masking, seed=0), samples_seen=0, steps=10**6)
    return steps.__getitem__


def transformers_batches(table, corpus: Path, batch: int) -> Callable[[int], object]:
    import numpy as np
    from transformers import BertTokenizerFast, DataCollatorForLanguageModeling

    tokenizer = BertTokenizerFast.from_pretrained(str(corpus / "tokenizer"))
    collate = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15, return_tensors="pt")
    order = np.random.default_rng(0).permutation(len(table))

    def make(index: int):
        rows = order[(np.arange(batch) + index * batch) % len(table)].tolist()
        columns = table[rows]
        return collate([{"input_ids": ids, "token_type_ids": types}
                        for ids, types in zip(columns["input_ids"], columns["token_type_ids"], strict=True)])
    return make


def rate(make: Callable[[int], object], batch: int, batches: int) -> float:
    """Sequences per second, from the median of `batches` timed batches after two warm-up ones."""
    make(0), make(1)
    times = []
    for index in range(2, batches + 2):
        start = time.perf_counter()
        make(index)
        times.append(time.perf_counter() - start)
    return batch / statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--seq", type=int, default=128)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        train_tokenizer(TokenizerTrainConfig(inputs=(str(TEXT),), out=root / "tok", vocab_size=8000))
        build_corpus(CorpusConfig(inputs=(str(TEXT),), tokenizer=root / "tok", out=root / "corpus",
                                  max_seq_length=args.seq, masking="dynamic", workers=1))
        dataset, manifest = load_corpus(root / "corpus")
        table = dataset["train"]
        sides = {"bertctl": bertctl_batches(table, manifest, root / "corpus", args.batch),
                 "transformers": transformers_batches(table, root / "corpus", args.batch),
                 "bertctl, huge corpus": bertctl_batches(table, manifest, root / "corpus", args.batch, rows=10**9)}
        print(f"seq {args.seq}, dynamic masking, batch {args.batch}, {len(table)} rows, 1 thread")
        print(f"{'side':22} {'seq/s':>9} {'ms/batch':>9}")
        rates = {}
        for name, make in sides.items():
            rates[name] = rate(make, args.batch, args.batches)
            print(f"{name:22} {rates[name]:9.0f} {1e3 * args.batch / rates[name]:9.1f}", flush=True)
        print(f"bertctl / transformers: {rates['bertctl'] / rates['transformers']:.2f}x")


if __name__ == "__main__":
    main()
