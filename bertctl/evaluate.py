"""`bertctl evaluate glue|classify`: score a fine-tuned model on a GLUE task's dev set(s) or on a labelled table.

Also the pieces every sentence(-pair) classification recipe shares, so fine-tuning, evaluation and
prediction turn text into the same inputs: encoding with BERT's pair truncation, batches padded to their
longest example (dynamic padding), and predictions in the examples' order.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import reprlib
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from bertctl import training
from bertctl.checkpoint import Checkpoint, build_model, model_tokenizer, read_checkpoint
from bertctl.config import FinetuneConfig
from bertctl.config_types import any_case, split_list, take_int
from bertctl.data.batches import pad_batch, pair_rows
from bertctl.data.glue import TASKS, Examples, GlueTask, get_task, outputs_by_class, read_split
from bertctl.data.tabular import LabelledFile, TabularTask, classify_task
from bertctl.errors import UsageError, quoted
from bertctl.files import json_text, read_json_object, user_path
from bertctl.hub import path_as_given
from bertctl.metrics import compute_task_metrics
from bertctl.run_folder import best_seed_folder
from bertctl.tokenizer import ENCODE_CHUNK, BertTokenizer, truncate_pair
from bertctl.training import pick_device

MIN_SEQ_LENGTH = 3  # [CLS], one token, [SEP]
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Features:
    """Encoded examples: `[CLS] A [SEP] (B [SEP])` ids and segment ids per example, unpadded."""

    input_ids: Sequence[np.ndarray]  # from encode_examples: a Ragged of int32 ids
    token_type_ids: Sequence[np.ndarray]  # and of int8 segment ids
    lengths: np.ndarray  # (N,) tokens per example
    labels: np.ndarray | None  # (N,) class ids (int64) or scores (float64: scored as written); None for test sets
    truncated: int  # examples that were cut to fit max_seq_length

    def __len__(self) -> int:
        return len(self.input_ids)


def scoring_device(device: str | None) -> torch.device:
    """The device to score on, with TF32 matmuls on CUDA as `finetune` scored its dev sets, so that an fp32 run's
    eval_results.json is reproduced exactly there too."""
    chosen = pick_device(device)
    training.enable_fast_math(chosen)
    return chosen


_Encoded = tuple[list[np.ndarray], list[int], list[int]]  # each chunk's ids; each row's tokens of segment 0, 1


def encode_examples(tokenizer: BertTokenizer, examples: Examples, max_seq_length: int,
                    show: bool = True) -> Features:
    """Tokenize the texts a chunk at a time, truncate pairs as BERT does, add [CLS]/[SEP].

    Only the truncated ids are kept, end to end in one array (int32 ids, int8 segments: 5 bytes a token, 24 a
    row for offsets and length), so memory grows with rows x max_seq_length, not with the texts' length:
    encoding a 500k-row table in one call would have held ~8 GB of encodings, and two numpy arrays per row ~230
    bytes of objects.
    """
    return encode_parts(tokenizer, [examples], max_seq_length, len(examples.text_a), show)


def encode_parts(tokenizer: BertTokenizer, parts: Iterable[Examples], max_seq_length: int, rows: int | None,
                 show: bool = True) -> Features:
    """`encode_examples` of the consecutive parts of one split (`rows` in all; None: not known before the end) as
    one Features: a file read a part at a time is encoded without ever holding all its texts."""
    into: _Encoded = ([], [], [])
    labels: list[Any] = []
    unlabelled, truncated = False, 0
    with quiet_bar(rows, "encoding", show) as bar:
        for examples in parts:
            for lo in range(0, len(examples.text_a), ENCODE_CHUNK):
                chunk = slice(lo, lo + ENCODE_CHUNK)
                text_a, text_b = examples.text_a[chunk], examples.text_b[chunk] if examples.text_b is not None else None
                truncated += _encode_chunk(tokenizer, text_a, text_b, max_seq_length, into)
                bar.update(len(text_a))
            unlabelled |= examples.labels is None
            labels += examples.labels or []
    return Features(*pair_rows(*into), None if unlabelled else label_array(labels), truncated)


def _encode_chunk(tokenizer: BertTokenizer, text_a: list[str], text_b: list[str] | None, max_seq_length: int,
                  into: _Encoded) -> int:
    """Add one chunk's rows to `into`, tokenized in one call; returns how many were cut to fit."""
    room = max_seq_length - (3 if text_b is not None else 2)
    cls, sep = tokenizer.cls_id, tokenizer.sep_id
    pieces_a = [e.ids for e in tokenizer.encode_batch(text_a, add_special_tokens=False)]
    pieces_b: list[Any] = [None] * len(pieces_a)
    if text_b is not None:
        pieces_b = [e.ids for e in tokenizer.encode_batch(text_b, add_special_tokens=False)]
    ids, firsts, seconds = into
    flat: list[int] = []
    truncated = 0
    for a, b in zip(pieces_a, pieces_b, strict=True):
        short_a, short_b = truncate_pair(a, b, room)
        truncated += len(short_a) + len(short_b or ()) < len(a) + len(b or ())
        flat += [cls, *short_a, sep, *(short_b or ()), *([sep] if short_b is not None else [])]
        firsts.append(len(short_a) + 2)
        seconds.append(len(short_b) + 1 if short_b is not None else 0)
    ids.append(np.asarray(flat, dtype=np.int32))
    return truncated


def label_array(labels: list[Any]) -> np.ndarray:
    """Class ids as int64, scores (any float among them) as float64: scored as written."""
    regression = any(isinstance(v, float) for v in labels)
    return np.asarray(labels, dtype=np.float64 if regression else np.int64)


def quiet_bar(rows: int | None, desc: str, show: bool) -> Any:
    """Encoding and scoring show a bar only once they have taken two seconds (a dev set scored after every
    epoch stays quiet), and leave no line behind."""
    return training.progress_bar(rows, 0, desc, show, unit="row", delay=2, leave=False)


def collate(features: Features, rows: np.ndarray, pad_id: int, with_labels: bool = True) -> dict[str, Tensor]:
    """The given rows padded to the longest of them, not to max_seq_length."""
    padded = pad_batch([features.input_ids[r] for r in rows], [features.token_type_ids[r] for r in rows], pad_id)
    batch = {name: torch.from_numpy(array) for name, array in padded.items()}
    if with_labels and features.labels is not None:
        labels = torch.from_numpy(features.labels[rows])
        batch["labels"] = labels.float() if labels.is_floating_point() else labels  # the model's dtype
    return batch


def eval_order(lengths: np.ndarray, batch_size: int) -> Iterator[np.ndarray]:
    """Rows longest first in fixed-size chunks: least padding, and the same batches on every call."""
    order = np.argsort(-lengths, kind="stable")
    for start in range(0, len(order), batch_size):
        yield order[start: start + batch_size]


def predict_logits(model: nn.Module, features: Features, pad_id: int, batch_size: int, device: torch.device,
                   precision: str, env: training.Distributed | None = None,
                   label_order: list[int] | None = None) -> np.ndarray:
    """(N, num_labels) float32 logits in the examples' order; with `label_order` (the model's output for each
    of the task's classes, for a model trained elsewhere with its classes in another order) in the task's."""
    out = np.zeros((len(features), model.num_labels), dtype=np.float32)
    for rows, _, output in scored_batches(model, features, partial(collate, features, pad_id=pad_id,
                                                                   with_labels=False), batch_size, device, precision,
                                          env, skip_padding=True):
        out[rows] = output.logits.float().cpu().numpy()
    sum_over_ranks(out, env)
    return out if label_order is None else out[:, label_order]


def scored_batches(model: nn.Module, features: Any, collate_rows: Callable[[np.ndarray], dict[str, Tensor]],
                   batch_size: int, device: torch.device, precision: str, env: training.Distributed | None = None,
                   skip_padding: bool = False) -> Iterator[tuple[np.ndarray, dict[str, Tensor], Any]]:
    """(rows, batch on the device, model output) for the batches one process scores, longest rows first, in eval
    mode under `precision`'s autocast. Under torchrun (`env`) rank r runs batches r, r + world, ... of exactly
    those batches: each row is scored on one rank, and `sum_over_ranks` of outputs that are zero elsewhere gives
    every rank the one-process outputs. `skip_padding` (heads whose caller reads no padded position): the
    model computes the real tokens alone."""
    rank, world = (env.rank, env.world_size) if env is not None else (0, 1)
    batches = list(eval_order(features.lengths, batch_size))[rank::world]
    flags = {"skip_padding": True} if skip_padding else {}  # SQuAD's head, which reads padding, has no such flag
    model.eval()
    with torch.inference_mode(), quiet_bar(sum(map(len, batches)), "scoring", rank == 0) as bar:
        for rows in batches:
            batch = training.to_device(collate_rows(rows), device)
            with training.autocast(precision, device):
                output = model(batch["input_ids"], batch["token_type_ids"], batch.get("attention_mask"), **flags)
            yield rows, batch, output
            bar.update(len(rows))


def sum_over_ranks(out: np.ndarray, env: training.Distributed | None) -> None:
    """Add up every rank's `out` in place (gloo, on the host): see `scored_batches`."""
    if env is not None and env.world_size > 1:
        torch.distributed.all_reduce(torch.from_numpy(out), group=env.control)


def to_predictions(logits: np.ndarray, regression: bool, label_order: list[int] | None = None) -> np.ndarray:
    """Class ids (argmax) or the single regression output; NaN for a row of logits holding a NaN, whose argmax
    would silently be class 0 (metrics then score NaN, and no class is written for it). With the `label_order`
    that `predict_logits` put the columns in, a tie goes to the model's first output, as its own argmax
    (run_glue.py's, a pipeline's) gives it (bf16 logits of a 3-class head tie in about 1 row of 750)."""
    if regression:
        return logits[:, 0].astype(np.float64)
    class_of_output = np.argsort(label_order) if label_order is not None else np.arange(logits.shape[1])
    classes = class_of_output[logits[:, class_of_output].argmax(axis=1)]
    broken = np.isnan(logits).any(axis=1)
    return np.where(broken, np.nan, classes) if broken.any() else classes


def score(task: Any, model: nn.Module, features: dict[str, Features], pad_id: int, batch_size: int,
          device: torch.device, precision: str, label_order: list[int] | None = None,
          env: training.Distributed | None = None) -> dict[str, dict[str, float]]:
    """The task's metrics on every given split: {split: {metric: value}}, the same on every rank of `env`
    (`label_order`: see `predict_logits` and `load_classifier`)."""
    results = {}
    for split, feats in features.items():
        logits = predict_logits(model, feats, pad_id, batch_size, device, precision, env, label_order)
        predictions = to_predictions(logits, task.is_regression, label_order)
        results[split] = compute_task_metrics(task, predictions.tolist(), feats.labels.tolist())
    return results


# --- fine-tuned model folders ------------------------------------------------------------------------

def model_folder(model: Path | str | None) -> Path:
    """The `model` argument as a Path, a str read as spelt (`hub.path_as_given`): "./x" that is not there is a
    missing folder, never the hub repository x."""
    folder = path_as_given(model)
    if folder is None:
        raise UsageError("--model: no model given; pass a fine-tuned model folder")
    return folder


def resolve_model_folder(path: Path | str) -> Path:
    """A model folder, or a multi-seed run folder (its results.json names the best seed's model)."""
    folder = model_folder(path)
    return (None if (folder / "config.json").is_file() else best_seed_folder(folder)) or folder


def read_classifier(folder: Path, finetune: str) -> Checkpoint:
    """The checkpoint in `folder`, refused unless it has a sequence-classification head; `finetune` names the
    command that would give it one (`glue sst2`, `classify`)."""
    ckpt = read_checkpoint(folder)
    if "classifier" not in ckpt.parts or ckpt.architecture != "BertForSequenceClassification":
        raise UsageError(f"{folder} has no sequence-classification head (it is a {ckpt.architecture}); "
                         f"fine-tune it first: bertctl finetune {finetune} --model {folder} ...")
    if ckpt.problem_type == "multi_label_classification":  # one sigmoid per class; bertctl scores one label a row
        raise UsageError(f"{folder} is a multi-label classifier (problem_type multi_label_classification); "
                         "evaluate and predict score single-label and regression models only")
    return ckpt


def load_classifier(path: Path | str, task: GlueTask | TabularTask,
                    ckpt: Checkpoint | None = None) -> tuple[nn.Module, BertTokenizer, Checkpoint, list[int] | None]:
    """A fine-tuned sequence classifier for `task`, refusing folders that cannot score it; with the model's
    output for each of the task's classes when its id2label has them in another order (else None). `ckpt`:
    the folder's checkpoint, when already read."""
    folder = resolve_model_folder(path)
    ckpt = ckpt or read_classifier(folder, f"glue {task.name}")
    tokenizer = model_tokenizer(ckpt)
    model = build_model(ckpt, "BertForSequenceClassification", share_weights=True)
    order = label_order(ckpt, model.num_labels, task, folder)  # refuses another task's classes
    trained_on = ckpt.raw_config.get("finetuning_task")  # RTE's and QNLI's classes have the same names
    if isinstance(task, GlueTask) and trained_on in TASKS and trained_on not in (task.name, task.predicted_by):
        log.warning("warning: %s was fine-tuned on %s, not %s; scoring it anyway", folder, trained_on, task.name)
    return model, tokenizer, ckpt, order


def label_order(ckpt: Checkpoint, num_labels: int, task: GlueTask | TabularTask, folder: Path) -> list[int] | None:
    """Models fine-tuned elsewhere name their classes in their own order (MNLI's contradiction, entailment,
    neutral; SST-2's negative, positive); they are matched to the task's classes by name."""
    if num_labels != task.num_labels:
        raise UsageError(f"{folder} predicts {num_labels} output(s) but {task.name} needs {task.num_labels}; "
                         f"give a model fine-tuned on {task.name}")
    names = class_names(ckpt, task, folder)
    if task.is_regression or not names:
        return None
    order = outputs_by_class(task, names)
    if order is None:
        spelled = ", ".join(task.label_names) + (f" (or {', '.join(task.hub_label_names)})"
                                                 if task.hub_label_names != task.label_names else "")
        raise UsageError(f"{folder} has the labels {', '.join(names)}, which do not match {task.name}'s "
                         f"{spelled}; give a model fine-tuned on {task.name}")
    return None if order == list(range(task.num_labels)) else order


def class_names(ckpt: Checkpoint, task: GlueTask | TabularTask, folder: Path | str, say: bool = True) -> list[str]:
    """The classes a classifier's outputs stand for: its id2label; a google-research/bert run_classifier (or NVIDIA
    run_glue) checkpoint has none, and outputs its processor's classes in that processor's order (MNLI's
    contradiction, entailment, neutral), which is said once."""
    if ckpt.labels or ckpt.origin is None or not getattr(task, "google_label_names", ()):
        return ckpt.labels or []
    names = list(task.google_label_names)  # type: ignore[union-attr]  # a GlueTask: checked above
    if say:
        log.warning("warning: %s is a %s classifier without id2label; its outputs are taken in %s's order for "
                    "%s (%s)", folder, ckpt.origin, ckpt.classifier_script, task.name, ", ".join(names))
    return names


@dataclass
class Scorer:
    """A fine-tuned classifier ready to score a task, with the settings its run used."""

    model: nn.Module
    tokenizer: BertTokenizer
    max_seq_length: int
    batch_size: int
    label_order: list[int] | None = None  # the model's output for each task class, when not in task order
    run_precision: str | None = None  # what the fine-tuning run computed in (its run.json), if known
    run_device: str | None = None  # and on which kind of device (cpu, cuda)
    folder: Path | None = None  # the model folder, for messages

    def encode(self, examples: Examples) -> Features:
        """The examples as this model's inputs, refusing sentence pairs a model with one segment embedding
        cannot take (the second text's segment id 1 would index past it)."""
        return self.encode_parts([examples], len(examples.text_a))

    def encode_parts(self, parts: Iterable[Examples], rows: int | None = None) -> Features:
        """`encode` of a split read a part at a time (`rows` in all, if known)."""
        return encode_parts(self.tokenizer, map(self._takes, parts), self.max_seq_length, rows)

    def _takes(self, examples: Examples) -> Examples:
        """The part as it is, once the model is known to take its texts."""
        if examples.text_b is not None:
            self.model.config.refuse_pairs(self.folder or "the model", f"{examples.source} is read as sentence pairs",
                                           "one text column")
        return examples

    def place(self, device: str | None, precision: str | None) -> tuple[torch.device, str]:
        """Move the model to --device (scoring_device's choice) and resolve --precision there (precision_on):
        where every scoring command starts."""
        run_on = scoring_device(device)
        self.model.to(run_on)
        return run_on, self.precision_on(precision, run_on)

    def precision_on(self, precision: str | None, device: torch.device) -> str:
        """--precision, else the run's own on the same kind of device (so scores reproduce its
        eval_results.json), else auto (bf16 on an Ampere or newer GPU, else fp32)."""
        if precision is None:
            same = self.run_precision is not None and self.run_device == device.type
            precision = self.run_precision if same else "auto"
        return training.resolve_precision(precision, device)


def read_run_record(folder: Path) -> dict[str, Any]:
    """The fine-tuning run's run.json ({} for a model trained elsewhere)."""
    path = folder / "run.json"
    return read_json_object(path) if path.is_file() else {}


def open_scorer(path: Path | str, task: GlueTask | TabularTask, max_seq_length: int | None, batch_size: int | None,
                ckpt: Checkpoint | None = None) -> Scorer:
    """The model in `path` (a multi-seed run: its best seed) for `task`; max_seq_length and batch size are
    the flags, else the fine-tuning run's (its run.json), else the defaults (no longer than the model's
    positions)."""
    max_seq_length, batch_size = check_scoring_flags(max_seq_length, batch_size)
    folder = resolve_model_folder(path)
    model, tokenizer, _, order = load_classifier(folder, task, ckpt)
    return run_scorer(folder, model, tokenizer, max_seq_length, batch_size, order)[0]


def run_scorer(folder: Path, model: nn.Module, tokenizer: BertTokenizer, max_seq_length: int | None,
               batch_size: int | None, label_order: list[int] | None = None) -> tuple[Scorer, dict[str, Any]]:
    """A fine-tuned model's Scorer, and its run record (run.json): max_seq_length and the batch size are the flags
    (checked by check_scoring_flags), else the run's, else the defaults (no longer than the model's positions)."""
    record = read_run_record(folder)
    saved = record.get("config", {})
    positions = model.config.max_position_embeddings
    max_len = _setting(max_seq_length, saved.get("max_seq_length"), min(FinetuneConfig.max_seq_length, positions))
    if max_len > positions:
        raise UsageError(f"--max-seq-length {max_len}: the model takes at most {positions} tokens")
    batch_size = _setting(batch_size, saved.get("eval_batch_size"), FinetuneConfig.eval_batch_size)
    return Scorer(model, tokenizer, max_len, batch_size, label_order, record.get("precision"), record.get("device"),
                  folder), record


def _setting(flag: int | None, saved: int | None, default: int) -> int:
    """The flag, else the run's, else the default: a flag's 0 is refused, never read as unset."""
    return flag if flag is not None else saved or default


def check_scoring_flags(max_seq_length: int | None, batch_size: int | None) -> tuple[int | None, int | None]:
    """(max_seq_length, batch_size) as whole numbers (8.0 is 8), refusing what no forward pass can use: a batch
    below 1 runs no batch at all, so every score (and every prediction) would be silently empty; None means
    the run's setting."""
    if batch_size is not None:
        batch_size = take_int("--batch-size", batch_size)
        if batch_size < 1:
            raise UsageError(f"--batch-size {batch_size}: give 1 or more examples per forward pass")
    if max_seq_length is not None:
        max_seq_length = take_int("--max-seq-length", max_seq_length)
        if max_seq_length < MIN_SEQ_LENGTH:
            raise UsageError(f"--max-seq-length {max_seq_length}: give at least {MIN_SEQ_LENGTH} "
                             "([CLS], a token and [SEP])")
    return max_seq_length, batch_size


def evaluate_glue(task: str | GlueTask, model: Path | str, data: str | Path, split: str = "dev",
                  batch_size: int | None = None, max_seq_length: int | None = None, device: str | None = None,
                  precision: str | None = None) -> dict[str, dict[str, float]]:
    """{split: {metric: value}} on the task's labelled split(s); MNLI's `dev` is matched and mismatched.

    With the fine-tuning run's settings (read from the folder's run.json) this gives exactly the numbers
    in its eval_results.json.
    """
    task, split = get_task(task), any_case(split)
    if task.predicted_by:
        raise UsageError(f"{task.name} has only an unlabelled test set; predict it with a "
                         f"{task.predicted_by} model: {predict_command(task)}")
    splits = task.eval_splits(split)
    if split.startswith("test"):
        raise UsageError(f"--split {split}: GLUE test sets have no labels; "
                         f"use bertctl predict glue {task.name}")
    scorer = open_scorer(model, task, max_seq_length, batch_size)
    read = {s: read_split(task, s, data) for s in splits}
    run_on, resolved = scorer.place(device, precision)  # before the texts are tokenized, as the splits are read
    features = {s: scorer.encode(examples) for s, examples in read.items()}
    return score(task, scorer.model, features, scorer.tokenizer.pad_id, scorer.batch_size, run_on, resolved,
                 scorer.label_order)


def predict_command(task: GlueTask) -> str:
    """The command that predicts a task without training data (ax, ...) with a model of the task it borrows."""
    return f"bertctl predict glue {task.name} --model RUN_OF_{task.predicted_by.upper()} ..."


def print_results(task: str, results: dict[str, dict[str, float]], as_json: bool = False) -> None:
    """One JSON object, or one line per split and metric."""
    task = get_task(task).name
    if as_json:
        sys.stdout.write(json_text({"task": task, **results}) + "\n")
        return
    for split, metrics in results.items():
        for name, value in metrics.items():
            sys.stdout.write(f"{task} {split} {name}: {value:.4f}\n")


# --- your own tables: `evaluate classify`, `predict classify` ----------------------------------------

@dataclass
class ClassifyRun:
    """A model fine-tuned on a table, with the classes and the columns it was trained on."""

    scorer: Scorer
    task: TabularTask
    text_columns: tuple[str, ...]
    label_column: str
    generic: bool = False  # a model trained elsewhere whose classes are LABEL_0, LABEL_1, ...: class ids 0, 1, ...

    def check_labelled(self, data: str | Path) -> tuple[LabelledFile, int | None]:
        """The file, read through for its rows and labels where it can be read twice, so that a bad row or a label
        the model lacks is refused before any text is tokenized; and its row count (None for a pipe, whose rows
        come once: read, encoded and judged in `encode_labelled`). A name that is not there is read too, so that
        its "no such file" comes before a --device or --precision refusal, as a bad row's does."""
        file = LabelledFile.checked(data, self.text_columns, self.label_column, "--data")
        if not file.can_read_again() and os.path.exists(user_path(data, "--data")):
            return file, None
        rows = file.read_through(ENCODE_CHUNK)
        self.class_ids(file)
        return file, rows

    def encode_labelled(self, file: LabelledFile, rows: int | None = None) -> Features:
        """The file's rows encoded, ENCODE_CHUNK rows at a time so that its texts are never all held, with their
        labels as the model's classes (taken once every row is read: a bad row is named before a bad label, as when
        the file was read whole). Scores name no row, so a gap in its id column is no reason to refuse it."""
        features = self.scorer.encode_parts(file.parts(ENCODE_CHUNK), rows)
        return dataclasses.replace(features, labels=label_array(self.class_ids(file)))

    def class_ids(self, file: LabelledFile) -> list[Any]:
        """A read file's labels as the model's classes (scores for a regression). A model with generic class names
        was fine-tuned (transformers' Trainer) on class ids: label i is read as LABEL_i too."""
        names = self.task.label_names
        if not self.generic:
            return file.labels_for(names)
        either = [*names, *(str(i) for i in range(len(names)))]  # one read, so a bad label is named as it is
        return [label % len(names) for label in file.labels_for(either)]


def open_classify_run(path: Path | str, text_columns: str | Sequence[str] | None = None,
                      label_column: str | None = None, max_seq_length: int | None = None,
                      batch_size: int | None = None) -> ClassifyRun:
    """The model in `path` (a multi-seed run: its best seed). Columns are the flags, else those of the
    `finetune classify` run (its run.json); classes are the run's, else config.json's id2label."""
    folder = resolve_model_folder(path)
    ckpt = read_classifier(folder, "classify")
    record = read_run_record(folder)
    saved = record.get("config", {})
    given = text_columns  # named as the user wrote it: '' rather than the () it splits into
    if isinstance(text_columns, str):  # "premise" or "premise,hypothesis", as --text-columns takes them
        try:
            text_columns = split_list(text_columns)
        except ValueError:
            raise UsageError(f"--text-columns: give one or two column names, comma-separated, not "
                             f"{text_columns!r}") from None
    if text_columns is not None and (not isinstance(text_columns, (list, tuple)) or not text_columns
                                     or not all(isinstance(c, str) for c in text_columns)):
        raise UsageError(f"--text-columns: give one or two column names, comma-separated, not "
                         f"{quoted(given, reprlib.repr)} (or leave it off: the run's)")
    if label_column is not None and (not isinstance(label_column, str) or not label_column.strip()):
        raise UsageError(f"--label-column: give the label column's name, not {quoted(label_column)} (or leave it off: "
                         "the run's)")
    columns = tuple(text_columns or saved.get("text_columns") or ())
    if not columns:
        why = (f"{folder} was fine-tuned on GLUE's {saved['task']}, not on columns of a table" if saved.get("task")
               else f"{folder} has no run.json naming the text columns it was trained on")
        raise UsageError(f"--text-columns: {why}; give them")
    classes = record["labels"] if "labels" in record else _model_classes(ckpt)
    task = classify_task(classes)
    scorer = open_scorer(folder, task, max_seq_length, batch_size, ckpt)
    generic = "labels" not in record and len(classes) > 1 and classes == [f"LABEL_{i}" for i in range(len(classes))]
    return ClassifyRun(scorer, task, columns, label_column or saved.get("label_column") or "label", generic)


def _model_classes(ckpt: Checkpoint) -> list[str]:
    """A model trained elsewhere: its id2label names, or none for a regression (one output)."""
    if ckpt.problem_type == "regression" or ckpt.num_labels == 1:
        return []
    return ckpt.labels or [f"LABEL_{i}" for i in range(ckpt.num_labels)]


def evaluate_classify(model: Path | str, data: str | Path, text_columns: str | Sequence[str] | None = None,
                      label_column: str | None = None, batch_size: int | None = None,
                      max_seq_length: int | None = None, device: str | None = None,
                      precision: str | None = None) -> dict[str, float]:
    """{metric: value} on a labelled csv/tsv/jsonl/parquet file, the metrics `finetune classify` reports.

    With the run's settings (its run.json) the run's own validation file gives exactly the numbers in its
    eval_results.json. Labels outside the model's classes are refused: it could never predict them.
    """
    run = open_classify_run(model, text_columns, label_column, max_seq_length, batch_size)
    file, rows = run.check_labelled(data)
    run_on, resolved = run.scorer.place(device, precision)  # before the texts are tokenized, as the file is checked
    features = run.encode_labelled(file, rows)
    results = score(run.task, run.scorer.model, {"data": features}, run.scorer.tokenizer.pad_id,
                    run.scorer.batch_size, run_on, resolved, run.scorer.label_order)
    return results["data"]


def print_classify_results(data: str | Path, metrics: dict[str, float], as_json: bool = False) -> None:
    """One JSON object, or one line per metric."""
    if as_json:
        sys.stdout.write(json_text({"task": "classify", "data": str(data), **metrics}) + "\n")
        return
    for name, value in metrics.items():
        sys.stdout.write(f"classify {data} {name}: {value:.4f}\n")
