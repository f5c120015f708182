"""GLUE leaderboard submission files: `index<TAB>prediction`, one row per test example, as the server reads them.

Files are named as gluebenchmark.com expects them inside the submission zip (CoLA.tsv, SST-2.tsv, MRPC.tsv,
STS-B.tsv, QQP.tsv, MNLI-m.tsv, MNLI-mm.tsv, QNLI.tsv, RTE.tsv, WNLI.tsv, AX.tsv). Classification rows hold the
label name (`0`/`1`, `entailment`, `not_entailment`, ...); STS-B rows hold the score, clipped to the gold
range 0..5 (a prediction outside it can only be further from every gold score) and written with 3 decimals.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from bertctl.data.glue import GlueTask, get_task
from bertctl.errors import BertctlError, UsageError
from bertctl.files import write_text_atomic


def submission_name(task: str | GlueTask, split: str = "test") -> str:
    """The server's file name for predictions on a test split (MNLI: test_matched / test_mismatched)."""
    task = get_task(task)
    name = task.split_file(split).submission
    if name is None:
        raise UsageError(f"{task.name} {split}: only test splits are submitted "
                         f"({', '.join(task.eval_splits('test'))})")
    return name


def format_prediction(task: GlueTask, value: int | float) -> str:
    """One prediction as the server reads it: the label name for a class id, or the (clipped) score."""
    if task.is_regression:
        score = float(value)
        if not math.isfinite(score):
            raise BertctlError(f"{task.name}: prediction {value!r} is not a finite score")
        if task.score_range is not None:
            low, high = task.score_range
            score = min(max(score, low), high)
        return f"{score:.3f}"
    if not float(value).is_integer():
        raise BertctlError(f"{task.name}: prediction {value!r} is not a class id")
    index = int(value)
    if not 0 <= index < task.num_labels:
        raise BertctlError(f"{task.name}: class id {index} is outside 0..{task.num_labels - 1}")
    return task.label_names[index]


def write_submission(task: str | GlueTask, split: str, ids: Sequence[str], predictions: Sequence[int | float],
                     out_dir: str | Path) -> Path:
    """Write OUT/<server name> atomically (temp file, then rename) and return its path.

    `ids` are the test file's index column (`Examples.ids`), `predictions` class ids or scores, same order.
    """
    task = get_task(task)
    name = submission_name(task, split)
    if len(ids) != len(predictions):
        raise BertctlError(f"{name}: {len(predictions)} predictions for {len(ids)} test examples")
    lines = ["index\tprediction\n"]
    lines += [f"{index}\t{format_prediction(task, value)}\n" for index, value in zip(ids, predictions, strict=True)]
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: is a file, not a folder")
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    write_text_atomic(path, "".join(lines))
    return path
