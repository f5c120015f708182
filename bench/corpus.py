"""Corpus building speed and memory: `build_corpus` against raw `tokenizers` encoding of the same text.

    python bench/corpus.py                          # 12 MB and 120 MB of Jane Austen, 2 workers
    python bench/corpus.py --sizes 12 --workers 1 --masking static --json out.json

The text is the bundled novels (4 MB, one paragraph a line, a blank line between chapters) repeated to
each size. Raw: the same tokenizer's `encode_batch_fast` (tokenizers' own threads, all cores) over the
file's lines in batches of 4096, reading included - the least any tool must spend to tokenise the text.
Build: `build_corpus` end to end (read, split sentences, tokenise, Google's instances, masks, Arrow,
manifest) in a fresh process; peak RSS of that main process and of its largest worker (ru_maxrss).
Memory must not grow with the corpus: the peaks at 12 MB and at 120 MB should agree within 20%.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bertctl.config import TokenizerTrainConfig  # noqa: E402
from bertctl.tokenizer_folder import load_tokenizer  # noqa: E402
from bertctl.tokenizer_train import train_tokenizer  # noqa: E402

DEFAULT_INPUT = ROOT / "bertctl" / "resources" / "austen.txt.gz"

# Runs in a fresh interpreter so ru_maxrss is this build's alone.
_BUILD = """
import json, resource, sys, time
from bertctl.config import CorpusConfig
from bertctl.corpus import build_corpus
cfg = CorpusConfig(**json.loads(sys.argv[1]))
start = time.perf_counter()
manifest = build_corpus(cfg)
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "instances": manifest["counts"]["train"]["instances"],
                  "main_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "worker_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


def make_text(source: Path, size_mb: float, path: Path) -> int:
    """source's text repeated until size_mb; returns the bytes written."""
    with gzip.open(source, "rt", encoding="utf-8") as handle:
        text = handle.read().rstrip("\n") + "\n\n"
    copies = max(1, round(size_mb * 1e6 / len(text.encode("utf-8"))))
    with open(path, "w", encoding="utf-8") as handle:
        for _ in range(copies):
            handle.write(text)
    return path.stat().st_size


def raw_encode(tokenizer_dir: Path, path: Path) -> float:
    backend = load_tokenizer(tokenizer_dir).backend
    start = time.perf_counter()
    with open(path, encoding="utf-8") as handle:
        batch: list[str] = []
        for line in handle:
            if line.strip():
                batch.append(line)
            if len(batch) == 4096:
                backend.encode_batch_fast(batch, add_special_tokens=False)
                batch = []
        if batch:
            backend.encode_batch_fast(batch, add_special_tokens=False)
    return time.perf_counter() - start


def build(config: dict) -> dict:
    done = subprocess.run([sys.executable, "-c", _BUILD, json.dumps(config)], capture_output=True, text=True,
                          cwd=ROOT, check=False)
    if done.returncode:
        raise SystemExit(f"build failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", type=Path, default=DEFAULT_INPUT, help="a .txt.gz to repeat")
    parser.add_argument("--sizes", type=float, nargs="+", default=[12, 120], help="MB of text")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--masking", default="dynamic", choices=["dynamic", "static"])
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        train_tokenizer(TokenizerTrainConfig(inputs=(str(args.input),), out=folder / "tok",
                                             vocab_size=args.vocab_size))
        for size in args.sizes:
            text = folder / f"text-{size:g}.txt"
            nbytes = make_text(args.input, size, text)
            raw = raw_encode(folder / "tok", text)
            result = build({"inputs": [str(text)], "tokenizer": str(folder / "tok"), "workers": args.workers,
                            "out": str(folder / "out"), "masking": args.masking, "overwrite": True})
            mb = nbytes / 1e6
            rows.append({"mb": round(mb, 1), "raw_seconds": round(raw, 2), "raw_mb_s": round(mb / raw, 2),
                         "build_seconds": round(result["seconds"], 2),
                         "build_mb_s": round(mb / result["seconds"], 2),
                         "ratio": round(result["seconds"] / raw, 2), "instances": result["instances"],
                         "main_rss_mb": round(result["main_rss_mb"]),
                         "worker_rss_mb": round(result["worker_rss_mb"])})
            print(json.dumps(rows[-1]), flush=True)
    print(f"\n{'MB':>7} {'raw MB/s':>9} {'build MB/s':>11} {'ratio':>6} {'main RSS':>9} {'worker RSS':>11}")
    for row in rows:
        print(f"{row['mb']:>7} {row['raw_mb_s']:>9} {row['build_mb_s']:>11} {row['ratio']:>6} "
              f"{row['main_rss_mb']:>7}MB {row['worker_rss_mb']:>9}MB")
    print(f"(workers {args.workers}, {args.masking} masking, dupe factor 1, vocab {args.vocab_size}; target: "
          "ratio <= 3, peaks equal within 20%)")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows},
                                        indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
