"""`bertctl evaluate choice` and `bertctl predict choice`: a multiple-choice model (SWAG) scored or run on data.

Also what fine-tuning shares with them, so a run's dev accuracy and `evaluate choice` agree: the task record,
the padded (B, C, T) batches, and the choices' logits computed in one process or split over torchrun's ranks.
The model scores each (context, choice) sequence from its pooled [CLS] with one linear layer; softmax over the
C scores gives the choices' probabilities (Devlin et al. 4.4).
"""

from __future__ import annotations

import csv
import io
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from bertctl import training
from bertctl.checkpoint import build_model, model_tokenizer, read_checkpoint
from bertctl.config_types import take_bool
from bertctl.data.batches import pad_batch
from bertctl.data.choice import ChoiceData, ChoiceFeatures, make_choice_features, read_choice
from bertctl.errors import UsageError
from bertctl.evaluate import (
    Scorer,
    check_scoring_flags,
    resolve_model_folder,
    run_scorer,
    scored_batches,
    sum_over_ranks,
)
from bertctl.files import json_text, new_file_named, user_path, write_text_atomic
from bertctl.submission import row_chunks

CHOICE_ARCHITECTURE = "BertForMultipleChoice"


@dataclass(frozen=True)
class ChoiceTask:
    """Multiple choice as the fine-tuning loop sees a task: accuracy over examples of `num_choices` choices."""

    num_choices: int
    name: str = "choice"
    label_names: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ("accuracy",)
    main_metric: str = "accuracy"
    is_regression: bool = False


def collate_choices(features: ChoiceFeatures, rows: np.ndarray, pad_id: int) -> dict[str, Tensor]:
    """The rows' C sequences each, padded to the longest of them: (B, C, T) tensors, and (B,) labels if known."""
    width = features.num_choices
    padded = pad_batch([seq for r in rows for seq in features.input_ids[r]],
                       [seq for r in rows for seq in features.token_type_ids[r]], pad_id)
    batch = {name: torch.from_numpy(array).view(len(rows), width, -1) for name, array in padded.items()}
    if features.labels is not None:
        batch["labels"] = torch.from_numpy(features.labels[rows])
    return batch


def choice_logits(model: nn.Module, features: ChoiceFeatures, pad_id: int, batch_size: int, device: torch.device,
                  precision: str, env: training.Distributed | None = None) -> np.ndarray:
    """(N, C) float32 scores of every example's choices, in the examples' order (under torchrun, every rank's)."""
    out = np.zeros((len(features), features.num_choices), dtype=np.float32)
    for rows, _, output in scored_batches(model, features, partial(collate_choices, features, pad_id=pad_id),
                                          batch_size, device, precision, env, skip_padding=True):
        out[rows] = output.logits.float().cpu().numpy()
    sum_over_ranks(out, env)
    return out


def accuracy(logits: np.ndarray, labels: np.ndarray) -> float:
    """The share of examples whose best-scored choice is the answer (a row holding NaN counts as wrong)."""
    right = (logits.argmax(axis=1) == labels) & ~np.isnan(logits).any(axis=1)
    return float(right.mean())


def score_dev(model: nn.Module, prep: Any, batch_size: int, device: torch.device, precision: str,
              env: training.Distributed) -> dict[str, dict[str, float]]:
    """The fine-tuning loop's dev scores: each split's accuracy."""
    return {split: {"accuracy": accuracy(choice_logits(model, f, prep.tokenizer.pad_id, batch_size, device,
                                                       precision, env), f.labels)}
            for split, f in prep.dev.items()}


def probabilities(logits: np.ndarray) -> np.ndarray:
    return torch.from_numpy(logits).softmax(-1).numpy()


# --- fine-tuned models -------------------------------------------------------------------------------------

@dataclass
class ChoiceReader:
    """A fine-tuned multiple-choice model with the settings it is run with."""

    scorer: Scorer  # the model, tokenizer, max_seq_length, batch size and the run's precision

    def encode(self, data: ChoiceData) -> ChoiceFeatures:
        return make_choice_features(self.scorer.tokenizer, data, self.scorer.max_seq_length)

    def logits(self, features: ChoiceFeatures, placed: tuple[torch.device, str]) -> np.ndarray:
        """(N, C) logits, where `Scorer.place` put the model: placed before the choices are tokenized, so that a
        --device or --precision this machine cannot run is refused without encoding the file first."""
        scorer = self.scorer
        return choice_logits(scorer.model, features, scorer.tokenizer.pad_id, scorer.batch_size, *placed)


def open_choice_reader(path: Path | str, max_seq_length: int | None, batch_size: int | None) -> ChoiceReader:
    """The model in `path` (a multi-seed run: its best seed), refused unless it has a trained multiple-choice
    head; settings are the flags, else its run.json's, else the defaults."""
    max_seq_length, batch_size = check_scoring_flags(max_seq_length, batch_size)
    folder = resolve_model_folder(path)
    ckpt = read_checkpoint(folder)
    if "classifier" not in ckpt.parts or ckpt.architecture != CHOICE_ARCHITECTURE:
        raise UsageError(f"{folder} has no multiple-choice head (it is a {ckpt.architecture}); fine-tune it "
                         f"first: bertctl finetune choice --model {folder} --train train.csv ...")
    model = build_model(ckpt, CHOICE_ARCHITECTURE, share_weights=True)
    return ChoiceReader(run_scorer(folder, model, model_tokenizer(ckpt), max_seq_length, batch_size)[0])


def _read(reader: ChoiceReader, data: Path | str, need_labels: bool) -> ChoiceData:
    read = read_choice(data, "--data", need_labels)
    reader.scorer.model.config.refuse_pairs(reader.scorer.folder or "the model",
                                            f"--data {read.path} gives (context, choice) pairs",
                                            "pre-train one with type_vocab_size 2")
    return read


def evaluate_choice(model: Path | str, data: Path | str, batch_size: int | None = None,
                    max_seq_length: int | None = None, device: str | None = None,
                    precision: str | None = None) -> dict[str, Any]:
    """{"accuracy", "examples", "choices": per example, "examples_cut": those with a choice past max_seq_length}.
    With the run's settings its own validation file gives exactly the accuracy in its eval_results.json."""
    reader = open_choice_reader(model, max_seq_length, batch_size)
    read = _read(reader, data, need_labels=True)
    placed = reader.scorer.place(device, precision)
    features = reader.encode(read)
    return {"accuracy": accuracy(reader.logits(features, placed), np.asarray(read.labels)),
            "examples": len(read), "choices": read.num_choices, "examples_cut": features.truncated}


def print_choice_results(data: Path | str, results: dict[str, Any], as_json: bool = False) -> None:
    if as_json:
        sys.stdout.write(json_text({"task": "choice", "data": str(data), **results}) + "\n")
        return
    sys.stdout.write(f"choice accuracy: {results['accuracy']:.4f} ({results['examples']} examples of "
                     f"{results['choices']} choices)\n")
    if results["examples_cut"]:
        sys.stdout.write(f"choice: {results['examples_cut']} of {results['examples']} examples had a choice cut to "
                         "--max-seq-length\n")


def predict_choice(model: Path | str, data: Path | str, out: Path | str, batch_size: int | None = None,
                   max_seq_length: int | None = None, device: str | None = None, precision: str | None = None,
                   overwrite: bool = False) -> Path:
    """Pick a choice for every example of `data` and write `out` (csv; no extension: .csv), once all are scored;
    returns the file: `id`, `prediction` (the choice's number from 0), `label` when the data has one, and
    `prob0`..: each choice's softmax."""
    if user_path(out, "--out").suffix.lower() not in ("", ".csv"):  # p.jsonl would hold csv: refused, not misnamed
        raise UsageError(f"--out {out}: predict choice writes a csv file; name it .csv")
    overwrite = take_bool("overwrite", overwrite)
    path = new_file_named(out, ".csv", overwrite)
    reader = open_choice_reader(model, max_seq_length, batch_size)
    read = _read(reader, data, need_labels=False)
    if path.resolve() == read.path.resolve():
        raise UsageError(f"--out {path}: is the input file")
    placed = reader.scorer.place(device, precision)
    ids, labels, features = _Ids(read.ids), read.labels, reader.encode(read)
    del read  # its texts, most of what it holds: scoring needs the encoded choices alone
    write_text_atomic(path, _csv(ids, labels, reader.logits(features, placed)), overwrite)
    return path


class _Ids:
    """The examples' ids as one string and where each ends. A list's id objects lie among the texts' in Python's
    small-object arenas, which go back to the system only once all they hold is freed: while the ids are held,
    so is the texts' memory (~0.8 KB an example of 4 short choices)."""

    def __init__(self, ids: list[str]) -> None:
        self.text = "".join(ids)
        self.ends = np.cumsum([len(i) for i in ids], dtype=np.int64)

    def __getitem__(self, row: int) -> str:
        return self.text[self.ends[row - 1] if row else 0: self.ends[row]]


def _csv(ids: _Ids, labels: list[int] | None, logits: np.ndarray) -> Iterator[str]:
    """The header, then WRITE_CHUNK rows at a time: the rows of every example are never all held as text."""
    gold = labels is not None
    yield _csv_lines([["id", "prediction", *(["label"] if gold else []),
                       *(f"prob{i}" for i in range(logits.shape[1]))]])
    chances = probabilities(logits)
    for rows in row_chunks(len(logits)):
        yield _csv_lines([[ids[i], int(logits[i].argmax()), *([labels[i]] if gold else []),
                           *(f"{p:.6f}" for p in chances[i])] for i in rows])


def _csv_lines(rows: list[list[Any]]) -> str:
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows(rows)
    return text.getvalue()
