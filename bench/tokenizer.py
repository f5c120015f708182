"""Tokenizer speed: bertctl against calling the `tokenizers` library directly on the same text.

    python bench/tokenizer.py                      # Jane Austen's novels (4 MB), vocab 8000, best of 3
    python bench/tokenizer.py --input corpus.txt.gz --vocab-size 30522 --repeats 1 --json out.json

Training: `train_tokenizer` end to end (expand inputs, pass 1 counting characters, pass 2 streaming
into the WordPieceTrainer, padding, writing the folder) against a hand-written `train_from_iterator` over
the same lines with the same normaliser and pre-tokenizer (what bertctl adds), and with tokenizers' stock
BertNormalizer/BertPreTokenizer (what exact parity with Google's tokenizer costs on top).
Encoding: `BertTokenizer.encode_batch` and `encode` against the same calls on its `tokenizers` backend,
and against the stock BERT pipeline. Overhead = bertctl time / direct time - 1, on the best of N runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers  # noqa: E402

from bertctl.config import TokenizerTrainConfig  # noqa: E402
from bertctl.data.sources import open_text  # noqa: E402
from bertctl.tokenizer import SPECIAL_TOKENS, UNK  # noqa: E402
from bertctl.tokenizer_folder import load_tokenizer  # noqa: E402
from bertctl.tokenizer_pipeline import normalizer, pre_tokenizer  # noqa: E402
from bertctl.tokenizer_train import train_tokenizer  # noqa: E402

DEFAULT_INPUT = ROOT / "bertctl" / "resources" / "austen.txt.gz"


def best(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Fastest of `repeats` runs of each, taken round-robin so that load from elsewhere hits all alike."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: min(values) for name, values in times.items()}


def direct_train(path: Path, vocab_size: int, stock: bool) -> None:
    """The tokenizers recipe: read lines in Python (gzip), batches of 1000, train_from_iterator."""
    backend = Tokenizer(models.WordPiece(unk_token=UNK))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True) if stock else normalizer(True, None)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer() if stock else pre_tokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=2, limit_alphabet=1000,
                                        special_tokens=list(SPECIAL_TOKENS), show_progress=False)

    def batches():
        with open_text(path) as handle:
            batch = []
            for line in handle:
                batch.append(line)
                if len(batch) == 1000:
                    yield batch
                    batch = []
            yield batch

    backend.train_from_iterator(batches(), trainer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", type=Path, default=DEFAULT_INPUT)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    with open_text(args.input) as handle:
        lines = handle.read().splitlines()
    megabytes = sum(len(line.encode("utf-8")) + 1 for line in lines) / 1e6
    results: dict[str, float] = {"text_mb": round(megabytes, 2)}

    with tempfile.TemporaryDirectory() as tmp:
        counter = iter(range(10**6))

        def ours() -> None:
            train_tokenizer(TokenizerTrainConfig(inputs=(str(args.input),), out=Path(tmp) / str(next(counter)),
                                                 vocab_size=args.vocab_size))

        train = best({"bertctl": ours, "direct": lambda: direct_train(args.input, args.vocab_size, False),
                      "direct_stock": lambda: direct_train(args.input, args.vocab_size, True)}, args.repeats)
        tokenizer = load_tokenizer(Path(tmp) / "0")

    stock = Tokenizer.from_str(tokenizer.backend.to_str())
    stock.normalizer = normalizers.BertNormalizer(lowercase=True)
    stock.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    sample = lines[:2000]
    encode = best({"bertctl_batch": lambda: tokenizer.encode_batch(lines),
                   "direct_batch": lambda: tokenizer.backend.encode_batch(lines),
                   "stock_batch": lambda: stock.encode_batch(lines),
                   "bertctl_one": lambda: [tokenizer.encode(t) for t in sample],
                   "direct_one": lambda: [tokenizer.backend.encode(t) for t in sample]}, args.repeats)

    for name, seconds in train.items():
        results[f"train_{name}_mb_s"] = round(megabytes / seconds, 2)
    for name, seconds in encode.items():
        size = megabytes * (len(sample) / len(lines) if name.endswith("_one") else 1)
        results[f"encode_{name}_mb_s"] = round(size / seconds, 2)
    results["train_overhead"] = round(train["bertctl"] / train["direct"] - 1, 3)
    results["train_overhead_vs_stock"] = round(train["bertctl"] / train["direct_stock"] - 1, 3)
    results["encode_batch_overhead"] = round(encode["bertctl_batch"] / encode["direct_batch"] - 1, 3)
    results["encode_one_overhead"] = round(encode["bertctl_one"] / encode["direct_one"] - 1, 3)
    results["encode_batch_overhead_vs_stock"] = round(encode["bertctl_batch"] / encode["stock_batch"] - 1, 3)
    for key, value in results.items():
        print(f"{key:34s} {value:+.1%}" if "overhead" in key else f"{key:34s} {value}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
