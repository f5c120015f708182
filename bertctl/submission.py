"""GLUE leaderboard submission files: `index<TAB>prediction`, one row per test example, as the server reads them.

Files are named as gluebenchmark.com expects them inside the submission zip (CoLA.tsv, SST-2.tsv, MRPC.tsv,
STS-B.tsv, QQP.tsv, MNLI-m.tsv, MNLI-mm.tsv, QNLI.tsv, RTE.tsv, WNLI.tsv, AX.tsv). Classification rows hold the
label name (`0`/`1`, `entailment`, `not_entailment`, ...); STS-B rows hold the score, clipped to the gold
range 0..5 (a prediction outside it can only be further from every gold score) and written with 3 decimals.

`predict classify` writes one row per row of the user's table instead, as csv or jsonl: the row's id, the
predicted label (or score) and, for classification, each class's probability.
"""

from __future__ import annotations

import csv
import io
import itertools
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bertctl.data.glue import GlueTask, get_task
from bertctl.errors import BertctlError, UsageError
from bertctl.files import check_out, json_text, named_with_suffix, write_text_atomic

WRITE_CHUNK = 8192  # rows formatted together as a file is written: the rows of a whole file are never all held


def row_chunks(count: int) -> Iterator[range]:
    """Rows 0 .. count - 1, WRITE_CHUNK at a time: what a predictions writer formats at once."""
    for lo in range(0, count, WRITE_CHUNK):
        yield range(lo, min(lo + WRITE_CHUNK, count))


def submission_name(task: str | GlueTask, split: str = "test") -> str:
    """The server's file name for predictions on a test split (MNLI: test_matched / test_mismatched)."""
    task = get_task(task)
    name = task.split_file(split).submission
    if name is None:
        raise UsageError(f"{task.name} {split}: only test splits are submitted "
                         f"({', '.join(task.eval_splits('test'))})")
    return name


def format_prediction(task: GlueTask, value: int | float) -> str:
    """One prediction as the server reads it: the label name for a class id, or the (clipped) score. NaN
    (`to_predictions` gives it for NaN logits) is refused: a submission has no way to leave a row out."""
    if not math.isfinite(float(value)):
        raise BertctlError(f"{task.name}: the model's output is {value!r} for an example, not a "
                           f"{'score' if task.is_regression else 'class'}; its weights are broken (a "
                           "fine-tuning run that blew up?)")
    if task.is_regression:
        score = float(value)
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
                     out_dir: str | Path, overwrite: bool = True) -> Path:
    """Write OUT/<server name> atomically (temp file, then rename) and return its path.

    `ids` are the test file's index column (`Examples.ids`), `predictions` class ids or scores, same order
    (a list or an array). The lines are made WRITE_CHUNK at a time as the temp file is written. Without
    `overwrite`, a file made there meanwhile (another program's) is kept, and OutAppeared raised.
    """
    task = get_task(task)
    name = submission_name(task, split)
    if len(ids) != len(predictions):
        raise BertctlError(f"{name}: {len(predictions)} predictions for {len(ids)} test examples")
    path = check_out(out_dir) / name
    write_text_atomic(path, _submission_lines(task, ids, predictions), overwrite)
    return path


def _submission_lines(task: GlueTask, ids: Sequence[str], predictions: Sequence[int | float]) -> Iterator[str]:
    yield "index\tprediction\n"
    for rows in row_chunks(len(ids)):
        values = np.asarray(predictions[rows.start: rows.stop]).tolist()
        yield "".join(f"{index}\t{format_prediction(task, value)}\n"
                      for index, value in zip(ids[rows.start: rows.stop], values, strict=True))


PREDICTION_FORMATS = (".csv", ".jsonl")


def prediction_path(out: str | Path, data: str | Path | None = None) -> Path:
    """Where `predict classify` writes: OUT, as .csv when it has no extension; checked before any work."""
    path = named_with_suffix(out, ".csv")
    if path.suffix.lower() not in PREDICTION_FORMATS:
        raise UsageError(f"--out {out}: predictions are written as {' or '.join(PREDICTION_FORMATS)} "
                         f"(no extension: .csv)")
    if path.is_dir():
        raise UsageError(f"--out {path}: is a folder, not a file")
    if data is not None and _same_file(path, Path(data)):
        raise UsageError(f"--out {path}: is the input file")
    return path


def _same_file(a: Path, b: Path) -> bool:
    """Whether two names are one file. A link loop (RuntimeError before Python 3.13) is no file: the reader of
    --data and the check of --out say so in their own lines, not a bare RuntimeError here."""
    try:
        return a.resolve() == b.resolve()
    except (OSError, RuntimeError):
        return False


def write_predictions(path: str | Path, id_name: str, ids: Sequence[str] | range, label_names: Sequence[str],
                      predictions: Sequence[int | float], probabilities: Sequence[Sequence[float]] | None = None,
                      overwrite: bool = True) -> Path:
    """Write one row per example atomically, csv or jsonl by the extension (see `prediction_path`).

    `predictions` are class ids into `label_names` (with their `probabilities`), or scores when there are no
    label names (regression); lists or arrays. `id_name` is `index` for row positions (`ids` may then be a
    range), shown as numbers in jsonl. Rows are made WRITE_CHUNK at a time as the temp file is written. Without
    `overwrite`, a file made at `path` meanwhile (another program's) is kept, and OutAppeared raised.
    """
    path = prediction_path(path)
    spread = probabilities if probabilities is not None else [None] * len(predictions)
    if not len(ids) == len(predictions) == len(spread):
        raise BertctlError(f"{path}: {len(predictions)} predictions for {len(ids)} examples")
    chunks = _prediction_chunks(id_name, ids, label_names, predictions, probabilities)
    write_text_atomic(path, _jsonl(chunks) if path.suffix.lower() == ".jsonl" else _csv(chunks, id_name, label_names),
                      overwrite)
    return path


def _prediction_chunks(id_name: str, ids: Sequence[str] | range, label_names: Sequence[str],
                       predictions: Sequence[int | float], probabilities: Sequence[Sequence[float]] | None
                       ) -> Iterator[list[dict[str, Any]]]:
    """The rows to write, WRITE_CHUNK at a time, so that a large test set's rows are never all held as dicts."""
    for rows in row_chunks(len(ids)):
        chunk = slice(rows.start, rows.stop)
        values = np.asarray(predictions[chunk]).tolist()
        spread = np.asarray(probabilities[chunk]).tolist() if probabilities is not None else [None] * len(values)
        yield [_prediction_row(id_name, row_id, label_names, value, probs)
               for row_id, value, probs in zip(ids[chunk], values, spread, strict=True)]


def _prediction_row(id_name: str, row_id: str | int, label_names: Sequence[str], value: int | float,
                    probabilities: Sequence[float] | None) -> dict[str, Any]:
    """NaN/inf (a model whose outputs blew up) as None: null in jsonl, an empty cell in csv."""
    row: dict[str, Any] = {id_name: int(row_id) if id_name == "index" else row_id}
    if not label_names:
        row["prediction"] = _rounded(value)
        return row
    row["prediction"] = label_names[int(value)] if math.isfinite(value) else None
    if probabilities is not None:
        row["probabilities"] = {name: _rounded(p) for name, p in zip(label_names, probabilities, strict=True)}
    return row


def _rounded(value: float) -> float | None:
    return round(float(value), 6) if math.isfinite(value) else None


def _jsonl(chunks: Iterator[list[dict[str, Any]]]) -> Iterator[str]:
    for rows in chunks:
        yield "".join(json_text(row, ensure_ascii=False) + "\n" for row in rows)


def _csv(chunks: Iterator[list[dict[str, Any]]], id_name: str, label_names: Sequence[str]) -> Iterator[str]:
    """Probabilities as one `prob_<label>` column per class."""
    first = next(chunks, [])
    with_probabilities = bool(first) and "probabilities" in first[0]
    yield _csv_lines([[id_name, "prediction", *([f"prob_{name}" for name in label_names] if with_probabilities
                                                 else [])]])
    for rows in itertools.chain([first], chunks):
        yield _csv_lines([[row[id_name], row["prediction"], *row.get("probabilities", {}).values()] for row in rows])


def _csv_lines(rows: list[list[Any]]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue()
