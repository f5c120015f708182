"""`bertctl predict glue`: test-set predictions as GLUE leaderboard submission files.

One task writes its file(s) (MNLI: MNLI-m.tsv and MNLI-mm.tsv; ax: AX.tsv from an MNLI model). `all` takes
the folder `bertctl finetune glue all` wrote and writes the eleven files of a full submission. Every test
file is read and predicted before the first submission file is written, so bad input writes nothing.
"""

from __future__ import annotations

from pathlib import Path

from bertctl import training
from bertctl.data.glue import TASKS, GlueTask, get_task, read_split
from bertctl.evaluate import encode_examples, open_scorer, predict_logits, to_predictions
from bertctl.submission import write_submission
from bertctl.training import pick_device


def predict_glue(task: str | GlueTask, model: Path | str, data: str | Path, out: Path | str,
                 batch_size: int | None = None, max_seq_length: int | None = None, device: str | None = None,
                 precision: str = "auto") -> list[Path]:
    """Write the task's submission file(s) into `out`; returns their paths.

    `model` is a model fine-tuned on the task (ax: on mnli); with task `all`, the folder holding one run per
    task (`OUT/mnli`, `OUT/qqp`, ...).
    """
    if isinstance(task, str) and task.lower() == "all":
        jobs = [(t, Path(model) / (t.predicted_by or t.name)) for t in TASKS.values()]
    else:
        jobs = [(get_task(task), Path(model))]
    predictions = []
    for glue_task, folder in jobs:
        predictions += _predict_task(glue_task, folder, data, batch_size, max_seq_length, device, precision)
    return [write_submission(t, split, ids, values, out) for t, split, ids, values in predictions]


def _predict_task(task: GlueTask, model: Path, data: str | Path, batch_size: int | None,
                  max_seq_length: int | None, device: str | None, precision: str) -> list[tuple]:
    """(task, split, ids, predictions) for each of the task's test splits."""
    scorer = open_scorer(model, get_task(task.predicted_by or task), max_seq_length, batch_size)
    examples = {split: read_split(task, split, data) for split in task.eval_splits("test")}
    run_on = pick_device(device)
    scorer.model.to(run_on)
    resolved = training.resolve_precision(precision, run_on)
    results = []
    for split, test in examples.items():
        features = encode_examples(scorer.tokenizer, test, scorer.max_seq_length)
        logits = predict_logits(scorer.model, features, scorer.tokenizer.pad_id, scorer.batch_size, run_on,
                                resolved)
        if scorer.label_order is not None:
            logits = logits[:, scorer.label_order]
        results.append((task, split, test.ids, to_predictions(logits, task.is_regression).tolist()))
    return results
