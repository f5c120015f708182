"""`bertctl predict glue|classify`: test-set predictions as GLUE submission files, or for the user's own table.

One task writes its file(s) (MNLI: MNLI-m.tsv and MNLI-mm.tsv; ax: AX.tsv from an MNLI model). `all` takes
the folder `bertctl finetune glue all` wrote and writes the eleven files of a full submission. Every test
file is read and predicted before the first submission file is written, so bad input writes nothing.
`classify` predicts every row of a csv/tsv/jsonl/parquet file with a `finetune classify` model. Like every
command, neither replaces an existing output without `overwrite` (glue: the submission files it would write,
so one folder can collect the tasks one by one).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

from bertctl.config_types import take_bool
from bertctl.data.glue import TASKS, Examples, GlueTask, get_task, read_split
from bertctl.data.tabular import example_chunks, known_rows
from bertctl.errors import UsageError
from bertctl.evaluate import (
    ClassifyRun,
    Features,
    Scorer,
    model_folder,
    open_classify_run,
    open_scorer,
    predict_logits,
    to_predictions,
)
from bertctl.files import check_new_out, check_out, user_path
from bertctl.submission import prediction_path, submission_name, write_predictions, write_submission
from bertctl.tokenizer import ENCODE_CHUNK


def predict_glue(task: str | GlueTask, model: Path | str, data: str | Path, out: Path | str,
                 batch_size: int | None = None, max_seq_length: int | None = None, device: str | None = None,
                 precision: str | None = None, overwrite: bool = False) -> list[Path]:
    """Write the task's submission file(s) into `out`; returns their paths.

    `model` is a model fine-tuned on the task (ax: on mnli); with task `all`, the folder holding one run per
    task (`OUT/mnli`, `OUT/qqp`, ...).
    """
    root = model_folder(model)
    if isinstance(task, str) and task.lower() == "all":
        jobs = [(t, root / (t.predicted_by or t.name)) for t in TASKS.values()]
        _check_glue_all_run(root, [folder for _, folder in jobs])
    else:
        jobs = [(get_task(task), root)]
    overwrite = take_bool("overwrite", overwrite)
    _check_submission_out(out, [t for t, _ in jobs], overwrite)
    predictions = []
    for glue_task, folder in jobs:
        predictions += _predict_task(glue_task, folder, data, batch_size, max_seq_length, device, precision)
    return [write_submission(t, split, ids, values, out, overwrite) for t, split, ids, values in predictions]


def _check_glue_all_run(model: Path, folders: list[Path]) -> None:
    """`all` reads one model per task from a local run folder: without this, a missing task folder would be
    looked up as a hub repository (RUN/cola) and fail with a network error."""
    tasks = list(dict.fromkeys(folder.name for folder in folders))
    missing = [name for name in tasks if not (model / name).is_dir()]
    if missing:
        lacks = "none of them" if missing == tasks else f"no {', '.join(missing)}"
        raise UsageError(f"--model {model} is not a `bertctl finetune glue all` run folder, which holds a model "
                         f"folder per task ({', '.join(tasks)}); it has {lacks}. Predict one task's run with "
                         "bertctl predict glue TASK --model RUN")


def _check_submission_out(out: Path | str, tasks: list[GlueTask], overwrite: bool) -> None:
    """Before any work: OUT must be a folder (or nothing yet), and the files it would get must be new."""
    folder = check_out(out)
    names = [submission_name(task, split) for task in tasks for split in task.eval_splits("test")]
    taken = [name for name in names if (folder / name).exists()]
    if taken and not overwrite:
        raise UsageError(f"--out {folder} already holds {', '.join(taken)}; pass --overwrite to replace "
                         f"{'it' if len(taken) == 1 else 'them'}")


def _predict_task(task: GlueTask, model: Path, data: str | Path, batch_size: int | None,
                  max_seq_length: int | None, device: str | None, precision: str | None) -> list[tuple]:
    """(task, split, ids, predictions) for each of the task's test splits."""
    scorer = open_scorer(model, get_task(task.predicted_by or task), max_seq_length, batch_size)
    examples = {split: read_split(task, split, data) for split in task.eval_splits("test")}
    run_on, resolved = scorer.place(device, precision)
    results = []
    for split in list(examples):
        test = examples.pop(split)
        ids, features = test.ids, scorer.encode(test)
        del test  # its texts, often most of the memory: scoring needs the encoded rows alone
        logits = _task_logits(scorer, features, run_on, resolved)
        results.append((task, split, ids, to_predictions(logits, task.is_regression, scorer.label_order)))
    return results


def _task_logits(scorer: Scorer, features: Features, device: torch.device, precision: str) -> np.ndarray:
    """(N, outputs) logits in the examples' order, columns in the task's class order."""
    return predict_logits(scorer.model, features, scorer.tokenizer.pad_id, scorer.batch_size, device, precision,
                          label_order=scorer.label_order)


def predict_classify(model: Path | str, data: str | Path, out: str | Path,
                     text_columns: str | Sequence[str] | None = None, batch_size: int | None = None,
                     max_seq_length: int | None = None, device: str | None = None,
                     precision: str | None = None, overwrite: bool = False) -> Path:
    """Predict every row of a csv/tsv/jsonl/parquet file with a `finetune classify` model; returns the file.

    `out` is written as .csv (also when it has no extension) or .jsonl, once every row is predicted: the
    row's id (the file's `id`/`idx` column, else its position from 0), the label (regression: the score)
    and each class's probability, in the file's order. Labels in the file are not needed. An existing file
    is replaced only with `overwrite`. Memory holds the ids, the encoded rows and the logits (compact arrays),
    never the whole file's texts (read and encoded a chunk at a time) nor every output row at once.
    """
    overwrite = take_bool("overwrite", overwrite)
    out = check_out(out, folder=False)  # a folder would otherwise become FOLDER.csv beside it
    path = check_new_out(prediction_path(out, user_path(data, "--data")), overwrite=overwrite, folder=False)
    run = open_classify_run(model, text_columns, None, max_seq_length, batch_size)
    run_on, resolved = run.scorer.place(device, precision)  # the file is read and encoded in one pass: before it
    ids, id_name, features = _read_encoded(run, data)
    logits = _task_logits(run.scorer, features, run_on, resolved)
    del features
    predictions = to_predictions(logits, run.task.is_regression, run.scorer.label_order)
    probabilities = None if run.task.is_regression else torch.from_numpy(logits).softmax(-1).numpy()
    return write_predictions(path, id_name, ids, run.task.label_names, predictions, probabilities, overwrite)


def _read_encoded(run: ClassifyRun, data: str | Path) -> tuple[list[str] | range, str, Features]:
    """The file's row ids (positions: a range, not a string per row), what names them, and its rows encoded:
    read ENCODE_CHUNK rows at a time, each part's texts dropped once encoded, so that memory never holds the
    texts of a whole big table. The encoding bar's total is the rows a parquet file or saved split says it
    holds; a text file's are known only once read."""
    ids: list[str] = []
    id_name = "index"

    def parts() -> Iterator[Examples]:
        nonlocal id_name
        for examples, name in example_chunks(data, run.text_columns, size=ENCODE_CHUNK):
            id_name = name
            if name != "index":
                ids.extend(examples.ids)
            yield examples

    features = run.scorer.encode_parts(parts(), known_rows(data))
    return ids if id_name != "index" else range(len(features)), id_name, features
