"""One seed of a fine-tuning task: what it shares with the task's other seeds, how it is set up (model, optimizer
and schedule, a resumed seed's restored, its run.json), where its run stands, and the folders it leaves in its work
folder (see `finetune_work`): resumable checkpoints, the best dev epoch so far and done/, the finished seed. The
training loop in `finetune` calls these; every rank calls them, rank 0 writes.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from bertctl import __version__, optim, training, training_state
from bertctl.checkpoint import Checkpoint, read_checkpoint, save_model
from bertctl.config import FinetuneConfig, warmup_steps
from bertctl.config_records import config_to_dict
from bertctl.data.batches import Grouped, Ragged
from bertctl.files import json_ready
from bertctl.finetune_work import (
    add_logs_and_results,
    best_folder,
    drop_checkpoints,
    open_seed,
    prune_best,
    refuse_other_examples,
    say,
)
from bertctl.results_summary import main_score, scores_from_json
from bertctl.tokenizer import BertTokenizer


@dataclass(frozen=True)
class Head:
    """What the one training loop needs to know of a task's head, so a classifier and a span extractor
    (SQuAD) share it: how to build the model, batch the features, compute the loss, and score the dev sets."""

    build: Callable[[FinetuneConfig, Prepared, bool], nn.Module]  # (cfg, prep, announce): head fresh or the folder's
    collate: Callable[[Any, np.ndarray, int], dict[str, Tensor]]  # (features, rows, pad_id): a padded batch
    loss_terms: Callable[[nn.Module, dict[str, Tensor]], dict[str, tuple[Tensor, Tensor]]]  # training.optimizer_step's
    # (model, prep, batch size, device, precision, env): {split: {metric: value}}, the same on every rank
    score: Callable[[nn.Module, Prepared, int, torch.device, str, training.Distributed], dict[str, dict[str, float]]]
    classifies: bool = True  # saved with the task's labels (and a sequence classifier's problem_type)
    # (batch): the units each loss term is a mean over, as training.optimizer_step takes them (None: real rows)
    weights: Callable[[dict[str, Tensor]], dict[str, Tensor]] | None = None


def head_dropout(cfg: FinetuneConfig) -> dict[str, float]:
    """build_model's keyword for a task head's dropout: --dropout, or (none given) the folder's own."""
    return {} if cfg.dropout is None else {"classifier_dropout": cfg.dropout}


@dataclass
class Prepared:
    """What every seed of a task shares: the checkpoint read and the data encoded once, and the precision the
    run was checked for before it started."""

    task: Any  # a GlueTask, TabularTask, NerTask...: name, label_names, model_label_names, metrics, main_metric
    ckpt: Checkpoint
    tokenizer: BertTokenizer
    train: Any  # Features, or SquadFeatures: indexed by row, with lengths and truncated
    dev: dict[str, Any]
    precision: str  # fp32 | bf16 | fp16, resolved for the run's device
    head: Head

    def features_sha256(self) -> str:
        """The encoded train and dev examples (ids, segments, labels, ...) as one hash: what a resume must find
        again, and what run.json records of the data besides its paths."""
        digest = hashlib.sha256()
        for split, features in {"train": self.train, **self.dev}.items():
            digest.update(split.encode())
            for part in fields(features):
                _hash_arrays(digest, getattr(features, part.name))
        return digest.hexdigest()


def _hash_arrays(digest: Any, value: Any) -> None:
    """Add the arrays in `value` (an array, or lists of them, nested; a Ragged row by row and a Grouped item by
    item, as the lists of arrays they replaced, so a run begun before is resumed) to `digest`; other values are
    skipped."""
    if isinstance(value, np.ndarray):
        digest.update(f"{value.dtype}{value.shape}".encode())
        digest.update(np.ascontiguousarray(value).data)
    elif isinstance(value, list | Ragged | Grouped) and len(value) and isinstance(value[0], np.ndarray | list):
        for item in value:
            _hash_arrays(digest, item)


@dataclass
class Progress:
    """Where a seed's run stands, besides weights, optimizer and RNGs: what a checkpoint records."""

    step: int = 0  # optimizer steps done; the epoch and the batch within it follow from it
    best: dict[str, Any] = field(default_factory=lambda: {"epoch": 0})  # best dev epoch so far: epoch, step, scores
    window: list[training.StepResult] = field(default_factory=list)  # steps read since the last metrics row
    bad_in_row: int = 0  # NaN/inf steps in a row

    def record(self) -> dict[str, Any]:
        """As JSON takes it: a NaN score is null (bare NaN is not JSON)."""
        return {"step": self.step, "best": json_ready(self.best), "window": [r.to_json() for r in self.window],
                "bad_in_row": self.bad_in_row}

    @classmethod
    def from_record(cls, record: dict[str, Any], log_every: int) -> Progress:
        best = record["best"]
        if "scores" in best:
            best = {**best, "scores": scores_from_json(best["scores"])}
        return cls(record["step"], best, training.resumed_window(record["window"], record["step"], log_every),
                   record["bad_in_row"])


def _save_folder(model: nn.Module, folder: Path, prep: Prepared, env: training.Distributed,
                 extra: Callable[[Path], None] | None = None) -> None:
    """The task's model as a model folder (rank 0 writes it; every rank waits until it is complete)."""
    task = prep.task
    classifies = prep.head.classifies
    if env.is_main:
        save_model(model, folder, prep.tokenizer, labels=(list(task.model_label_names) or None) if classifies else None,
                   problem_type=_problem_type(model, task), overwrite=True,
                   config_extra={**prep.ckpt.kept_config, "finetuning_task": task.name}, extra=extra)
    training.barrier(env)


def _problem_type(model: nn.Module, task: Any) -> str | None:
    """transformers' problem_type: a sequence classifier's alone (token classification has none)."""
    if "sequence_classification" not in getattr(model, "head_names", ()):
        return None
    return "regression" if task.is_regression else "single_label_classification"


def save_checkpoint(model: nn.Module, prep: Prepared, optimizer: torch.optim.Optimizer, scaler: Any,
                    progress: Progress, work: Path, env: training.Distributed) -> int:
    """A resumable step folder; older ones, and best-epoch folders it does not refer to, are removed.
    Returns the best epoch it refers to."""
    rng = training_state.rng_state(env)  # every rank's generators (a collective)
    _save_folder(model, training_state.step_folder(work, progress.step), prep, env,
                 extra=lambda tmp: training_state.write_training_state(tmp, optimizer, scaler, progress.record(), rng))
    if env.is_main:
        training_state.prune_checkpoints(work, 1)
        prune_best(work, {progress.best["epoch"]})
    return progress.best["epoch"]


def keep_if_best(model: nn.Module, prep: Prepared, epoch: int, scores: dict[str, dict[str, float]],
                 progress: Progress, work: Path, env: training.Distributed, anchored: int) -> None:
    """A better dev epoch is saved in work/best-EEE/, on disk rather than in memory so a resume keeps it;
    the best epoch the newest checkpoint refers to stays until a newer checkpoint replaces it. A NaN main
    metric is worse than any number (`main_score`), and a tie keeps the earlier epoch."""
    best = progress.best
    if best["epoch"] and main_score(prep.task, scores) <= main_score(prep.task, best["scores"]):
        return
    progress.best = {"epoch": epoch, "step": progress.step, "scores": scores}
    _save_folder(model, best_folder(work, epoch), prep, env)
    if env.is_main:
        prune_best(work, {epoch, anchored})


def finish_seed(cfg: FinetuneConfig, model: nn.Module, prep: Prepared, progress: Progress, seed: int,
                work: Path, env: training.Distributed) -> dict[str, Any]:
    """work/done: the best epoch's model (the last one without dev data) with the seed's logs and
    eval_results.json; the seed's checkpoints go."""
    best, task = progress.best, prep.task
    results = {"task": task.name, **best.get("scores", {}), "main_metric": task.main_metric,
               "best_epoch": best["epoch"] or cfg.epochs, "best_step": best.get("step", progress.step),
               "seed": seed}
    if env.is_main and best["epoch"]:
        model.load_state_dict(read_checkpoint(best_folder(work, best["epoch"])).state)
        if main_score(task, best["scores"]) == -math.inf:  # NaN: kept only when every epoch was NaN
            say(f"{task.name} seed {seed}: {task.main_metric} was NaN after every epoch (the model's outputs blew "
                f"up; lower --lr?); keeping epoch {best['epoch']}")
    _save_folder(model, work / "done", prep, env, extra=lambda tmp: add_logs_and_results(tmp, work, results))
    if env.is_main:
        drop_checkpoints(work)
    return results


@dataclass
class SeedSetup:
    """One seed set up to train: its model and optimizer (a resumed seed's restored) and its schedule."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scaler: Any  # fp16's GradScaler, else None
    per_epoch: int  # optimizer steps per epoch
    total: int  # optimizer steps in all epochs
    warmup: int
    progress: Progress
    carried: float  # seconds a resumed seed had already trained


def start_seed(cfg: FinetuneConfig, prep: Prepared, features: str, seed: int, work: Path,
               env: training.Distributed, announce: bool) -> SeedSetup:
    """The seed's model (its head drawn from `seed`), optimizer and schedule, from its newest checkpoint in
    `work` when there is one, and its run.json written."""
    training_state.seed_everything(seed)
    model = prep.head.build(cfg, prep, announce).to(env.device)
    model.set_gradient_checkpointing(cfg.gradient_checkpointing)
    if env.rank:  # its own dropout masks; rank 0 keeps the one-process stream
        training_state.seed_everything(seed + env.rank)
    training.enable_fast_math(env.device)
    optimizer = optim.make_optimizer("adamw", model, cfg.lr, cfg.weight_decay,
                                     (cfg.adam_beta1, cfg.adam_beta2), cfg.adam_eps)
    scaler = torch.amp.GradScaler(env.device.type) if prep.precision == "fp16" else None
    per_epoch = math.ceil(len(prep.train) / cfg.batch_size)
    total = per_epoch * cfg.epochs
    warmup = warmup_steps(cfg.warmup_fraction, total)
    checkpoint = training_state.latest_checkpoint(work) if work.is_dir() else None
    progress = Progress()
    if checkpoint is not None:
        refuse_other_examples(work, features, _data_flags(cfg), prep.task.name)
        model.load_state_dict(read_checkpoint(checkpoint).state)
        saved = training_state.read_training_state(checkpoint, optimizer, scaler, env.rank)
        progress = Progress.from_record(saved, cfg.log_every)
    carried = 0.0
    if env.is_main:
        carried = open_seed(work, checkpoint, progress.step,
                            _run_record(cfg, prep, features, model, seed, prep.precision, env, total, warmup))
    return SeedSetup(model, optimizer, scaler, per_epoch, total, warmup, progress, carried)


def _data_flags(cfg: FinetuneConfig) -> str:
    """The flags the task's examples come from, as an error names them."""
    if cfg.data is not None:
        return f"--data {cfg.data}"
    return f"--train {cfg.train}" + (f" / --validation {cfg.validation}" if cfg.validation is not None else "")


def _run_record(cfg: FinetuneConfig, prep: Prepared, features: str, model: nn.Module, seed: int, precision: str,
                env: training.Distributed, total: int, warmup: int) -> dict[str, Any]:
    return {"config": config_to_dict(cfg), "seed": seed, "task": prep.task.name,
            "labels": list(prep.task.label_names), "metrics": list(prep.task.metrics),
            "main_metric": prep.task.main_metric, "model": model.config.to_dict(),
            "fresh_heads": list(model.fresh_heads), "train_examples": len(prep.train),
            "dev_examples": {split: len(f) for split, f in prep.dev.items()},
            "truncated": {"train": prep.train.truncated, **{s: f.truncated for s, f in prep.dev.items()}},
            "features_sha256": features, "weights_sha256": prep.ckpt.weights_sha256(),
            "steps": total, "warmup_steps": warmup, "device": env.device.type, "threads": torch.get_num_threads(),
            "world_size": env.world_size,
            "precision": precision, "bertctl_version": __version__}
