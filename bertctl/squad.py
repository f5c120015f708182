"""`bertctl evaluate squad` and `bertctl predict squad`: a question-answering model on SQuAD v1.1/v2.0 JSON.

Also what fine-tuning shares with them, so a run's dev scores and `evaluate squad` agree: the task record,
span logits for every window (one process or split over torchrun's ranks), and scores as the official scripts
give them. Settings are the flags, else the fine-tuning run's (its run.json), else google-research/bert's.
"""

from __future__ import annotations

import logging
import sys
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
from bertctl.config_types import take_bool, take_finite, take_int
from bertctl.data.batches import pad_batch
from bertctl.data.squad import SquadData, SquadFeatures, make_features, read_squad
from bertctl.errors import UsageError
from bertctl.evaluate import (
    Scorer,
    read_run_record,
    resolve_model_folder,
    scored_batches,
    sum_over_ranks,
)
from bertctl.files import check_out, json_text, write_texts_atomic
from bertctl.squad_answers import Answers, AnswerSettings, answers_from_logits
from bertctl.squad_metrics import squad_v1_scores, squad_v2_scores
from bertctl.tokenizer import BertTokenizer

log = logging.getLogger(__name__)
QA_ARCHITECTURE = "BertForQuestionAnswering"
OUTPUT_FILES = ("predictions.json", "nbest_predictions.json", "null_odds.json")


@dataclass(frozen=True)
class SquadTask:
    """SQuAD as the fine-tuning loop sees a task: its name, metrics, and the best-epoch metric (dev F1)."""

    version: str  # "1.1" or "2.0"
    metrics: tuple[str, ...]
    main_metric: str = "f1"
    is_regression: bool = False
    label_names: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return "squad_v2" if self.version == "2.0" else "squad"


def squad_task(version: str, dev: SquadData | None = None) -> SquadTask:
    """The metrics the official script of `version` reports on `dev` (v2.0's HasAns_/NoAns_ only where the
    dev set has such questions)."""
    if version == "1.1":
        return SquadTask(version, ("exact_match", "f1"))
    kinds = {bool(e.answers) for e in dev.examples} if dev is not None else set()
    split = [f"{prefix}_{name}" for prefix, has in (("HasAns", True), ("NoAns", False)) if has in kinds
             for name in ("exact", "f1")]
    return SquadTask(version, ("exact", "f1", *split, "best_exact", "best_f1"))


def check_lengths(max_seq_length: int, max_query_length: int, positions: int, folder: Path | str) -> None:
    if max_seq_length > positions:  # 384 by default, as run_squad.py's, where most other commands take 128
        said = " (the SQuAD default)" if max_seq_length == FinetuneConfig.squad().max_seq_length else ""
        raise UsageError(f"--max-seq-length {max_seq_length}{said}: {folder} takes at most {positions} tokens; "
                         f"give --max-seq-length {positions} or less")
    if max_seq_length <= max_query_length + 3:
        raise UsageError(f"--max-seq-length {max_seq_length} must be more than --max-query-length "
                         f"{max_query_length} + 3 ([CLS], two [SEP] and at least one context piece)")


# --- logits and scores -----------------------------------------------------------------------------------

def collate_spans(features: SquadFeatures, rows: np.ndarray, pad_id: int) -> dict[str, Tensor]:
    """The rows padded to max_seq_length (as run_squad.py's features are), with their start/end labels when the
    features have them."""
    padded = pad_batch([features.input_ids[r] for r in rows], [features.token_type_ids[r] for r in rows], pad_id,
                       features.width or None)
    batch = {name: torch.from_numpy(array) for name, array in padded.items()}
    if features.start_positions is not None and features.end_positions is not None:
        batch["start_positions"] = torch.from_numpy(features.start_positions[rows])
        batch["end_positions"] = torch.from_numpy(features.end_positions[rows])
    return batch


def span_logits(model: nn.Module, features: SquadFeatures, pad_id: int, batch_size: int, device: torch.device,
                precision: str, env: training.Distributed | None = None) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Every feature's start and end logits over all max_seq_length positions, padding included (run_squad.py
    takes its n-best from those too, then drops what is not context), float32 (under torchrun, every rank's)."""
    width = features.width or (int(features.lengths.max()) if len(features) else 0)
    out = np.zeros((2, len(features), width), dtype=np.float32)  # (start|end, N, T)
    for rows, batch, result in scored_batches(model, features, partial(collate_spans, features, pad_id=pad_id),
                                              batch_size, device, precision, env):
        width = batch["input_ids"].shape[1]
        out[0, rows, :width] = result.start_logits.float().cpu().numpy()
        out[1, rows, :width] = result.end_logits.float().cpu().numpy()
    sum_over_ranks(out, env)
    return list(out[0]), list(out[1])


def predict_answers(model: nn.Module, features: SquadFeatures, tokenizer: BertTokenizer, settings: AnswerSettings,
                    batch_size: int, device: torch.device, precision: str,
                    env: training.Distributed | None = None) -> Answers:
    starts, ends = span_logits(model, features, tokenizer.pad_id, batch_size, device, precision, env)
    return answers_from_logits(features, starts, ends, tokenizer, settings)


def squad_scores(data: SquadData, answers: Answers) -> dict[str, float]:
    """The official script's figures for the data's version."""
    gold = {example.qid: list(example.answers) for example in data.examples}
    if data.version == "1.1":
        return squad_v1_scores(gold, answers.predictions)
    return squad_v2_scores(gold, answers.predictions, answers.null_odds)


def answer_settings(cfg: FinetuneConfig | dict[str, Any], version: str) -> AnswerSettings:
    get = cfg.get if isinstance(cfg, dict) else lambda name: getattr(cfg, name)
    return AnswerSettings(get("n_best_size"), get("max_answer_length"), get("null_score_diff_threshold"),
                          with_null=version == "2.0")


# --- fine-tuned QA models ----------------------------------------------------------------------------------

@dataclass
class SquadReader:
    """A fine-tuned question-answering model with the settings it is run with."""

    scorer: Scorer  # the model, tokenizer, max_seq_length, batch size and the run's precision
    settings: dict[str, Any]  # doc_stride, max_query_length, n_best_size, max_answer_length, threshold
    run_version: str | None  # the SQuAD version the run trained on, if known

    def features(self, data: SquadData) -> SquadFeatures:
        return make_features(self.scorer.tokenizer, data, self.scorer.max_seq_length, self.settings["doc_stride"],
                             self.settings["max_query_length"], training=False)

    def answers(self, data: SquadData, device: str | None, precision: str | None) -> Answers:
        """The model placed first: a --device or --precision this machine cannot run is refused before any
        question is tokenized."""
        placed = self.scorer.place(device, precision)
        return predict_answers(self.scorer.model, self.features(data), self.scorer.tokenizer,
                               answer_settings(self.settings, data.version), self.scorer.batch_size, *placed)


def read_qa_model(folder: Path) -> Checkpoint:
    """The checkpoint in `folder`, refused unless it has a trained question-answering head."""
    ckpt = read_checkpoint(folder)
    if "question_answering" not in ckpt.parts:
        raise UsageError(f"{folder} has no question-answering head (it is a {ckpt.architecture}); fine-tune it "
                         f"first: bertctl finetune squad --model {folder} --train train-v1.1.json ...")
    return ckpt


_SETTINGS = ("doc_stride", "max_query_length", "n_best_size", "max_answer_length")
_RUN_VERSIONS = {"squad": "1.1", "squad_v2": "2.0"}  # run.json's task (SquadTask.name) -> the SQuAD version


_FLAGS = {"eval_batch_size": "--batch-size"}  # the scoring commands' flag for a run's eval_batch_size


def reader_flags(batch_size: int | None, max_seq_length: int | None, doc_stride: int | None,
                 max_query_length: int | None, n_best_size: int | None, max_answer_length: int | None,
                 null_score_diff_threshold: float | None) -> dict[str, Any]:
    """evaluate/predict squad's flags under the run's field names, for `open_reader`."""
    return {"eval_batch_size": batch_size, "max_seq_length": max_seq_length, "doc_stride": doc_stride,
            "max_query_length": max_query_length, "n_best_size": n_best_size, "max_answer_length": max_answer_length,
            "null_score_diff_threshold": null_score_diff_threshold}


def open_reader(path: Path | str, flags: dict[str, Any]) -> SquadReader:
    """The model in `path` (a multi-seed run: its best seed) with each setting from `flags`, else its run.json,
    else the SQuAD defaults."""
    folder = resolve_model_folder(path)
    ckpt = read_qa_model(folder)
    record = read_run_record(folder)
    saved = record.get("config", {})
    defaults = FinetuneConfig.squad()
    chosen: dict[str, Any] = {}
    for name in ("max_seq_length", "eval_batch_size", *_SETTINGS):
        flag = flags.get(name)
        chosen[name] = take_int(_FLAGS.get(name, f"--{name.replace('_', '-')}"), flag, minimum=1) \
            if flag is not None else saved.get(name) or getattr(defaults, name)
    threshold = flags.get("null_score_diff_threshold")
    chosen["null_score_diff_threshold"] = take_finite("--null-score-diff-threshold", threshold) \
        if threshold is not None else float(saved.get("null_score_diff_threshold", 0.0))
    check_lengths(chosen["max_seq_length"], chosen["max_query_length"], ckpt.config.max_position_embeddings, folder)
    ckpt.config.refuse_pairs(folder, "SQuAD puts the question and the context in two segments",
                             "a model fine-tuned with bertctl finetune squad")
    model = build_model(ckpt, QA_ARCHITECTURE, share_weights=True)
    scorer = Scorer(model, model_tokenizer(ckpt), chosen["max_seq_length"], chosen["eval_batch_size"],
                    run_precision=record.get("precision"), run_device=record.get("device"), folder=folder)
    return SquadReader(scorer, chosen, _RUN_VERSIONS.get(record.get("task")))


def _read_data(data: Path | str, reader: SquadReader, mode: str) -> SquadData:
    """The file's questions; a v2.0 model reads a file that says nothing of its version (no `version`, no
    is_impossible, no hub row without answers) as v2.0."""
    squad = read_squad(data, mode, "--data", fallback="2.0" if reader.run_version == "2.0" else None)
    log.info("%s: SQuAD v%s", squad.source, squad.version)
    return squad


def evaluate_squad(model: Path | str, data: Path | str, batch_size: int | None = None,
                   max_seq_length: int | None = None, doc_stride: int | None = None,
                   max_query_length: int | None = None, n_best_size: int | None = None,
                   max_answer_length: int | None = None, null_score_diff_threshold: float | None = None,
                   device: str | None = None, precision: str | None = None) -> dict[str, Any]:
    """{"version": "1.1"|"2.0", metric: value, ...}: the official evaluation script's output for the data's
    version (v2.0 with the null odds, as `--na-prob-file null_odds.json` gives it). With the run's settings,
    its own dev file gives exactly the numbers in its eval_results.json."""
    reader = open_reader(model, reader_flags(batch_size, max_seq_length, doc_stride, max_query_length, n_best_size,
                                             max_answer_length, null_score_diff_threshold))
    squad = _read_data(data, reader, "score")
    return {"version": squad.version, **squad_scores(squad, reader.answers(squad, device, precision))}


def print_squad_results(data: Path | str, results: dict[str, Any], as_json: bool = False) -> None:
    if as_json:
        task = "squad_v2" if results["version"] == "2.0" else "squad"  # the fine-tuning run's task name
        sys.stdout.write(json_text({"task": task, "data": str(data), **results}) + "\n")
        return
    version = results["version"]
    for name, value in results.items():
        if name != "version":
            sys.stdout.write(f"squad v{version} {name}: {value:.4f}\n" if isinstance(value, float)
                             else f"squad v{version} {name}: {value}\n")


def predict_squad(model: Path | str, data: Path | str, out: Path | str, batch_size: int | None = None,
                  max_seq_length: int | None = None, doc_stride: int | None = None,
                  max_query_length: int | None = None, n_best_size: int | None = None,
                  max_answer_length: int | None = None, null_score_diff_threshold: float | None = None,
                  device: str | None = None, precision: str | None = None, overwrite: bool = False) -> list[Path]:
    """Write run_squad.py's files into the folder `out`: predictions.json ({id: answer}, what the official
    scripts read), nbest_predictions.json and, for SQuAD 2.0, null_odds.json. Answers are not needed in the
    data. Returns the files written (all after every question is answered)."""
    overwrite = take_bool("overwrite", overwrite)
    folder = check_out(out)
    reader = open_reader(model, reader_flags(batch_size, max_seq_length, doc_stride, max_query_length, n_best_size,
                                             max_answer_length, null_score_diff_threshold))
    squad = _read_data(data, reader, "predict")
    names = OUTPUT_FILES if squad.version == "2.0" else OUTPUT_FILES[:2]
    taken = [name for name in names if (folder / name).exists()]
    if taken and not overwrite:
        raise UsageError(f"--out {folder} already holds {', '.join(taken)}; pass --overwrite to replace them")
    return write_answers(reader.answers(squad, device, precision), folder, overwrite)


def write_answers(answers: Answers, folder: Path, overwrite: bool = True) -> list[Path]:
    """predictions.json, nbest_predictions.json and (v2.0) null_odds.json in `folder`, written as one set (without
    `overwrite`, none of them if one was made meanwhile: OutAppeared)."""
    contents = [answers.predictions, answers.nbest, answers.null_odds]
    texts = {folder / name: json_text(content, indent=2) + "\n" for name, content in zip(OUTPUT_FILES, contents,
                                                                                       strict=True)
             if content is not None}
    write_texts_atomic(texts, overwrite)
    return list(texts)
