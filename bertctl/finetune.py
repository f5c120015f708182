"""`bertctl finetune glue|classify`: fine-tune BERT on a GLUE task or on the user's own labelled table.

Supports: every GLUE task in the official layout or from the hub (`glue all` runs the nine and writes a
results table laid out like the paper's Table 1), csv/tsv/jsonl/parquet tables (classification or
regression), any model folder bertctl reads (a missing head is created fresh and said so), the paper's recipe
(AdamW, 10% warmup + linear decay, dropout 0.1, 3 epochs, batch 32, 128 tokens) on the shared loop (bf16 on
GPU, gradient accumulation, metrics.jsonl, progress bar), dynamic padding and optional length-grouped batches,
a dev evaluation after every epoch keeping the best one, several seeds reported as mean ± std and median,
torchrun DDP (NCCL or gloo; the global batch and the dev scores do not depend on the number of processes),
and exact resume (`--save-every`, always on SIGINT/SIGTERM; finished seeds are not trained again).

Outputs appear only complete: a run lives in a hidden work folder beside OUT (logs, checkpoints, best-epoch
models, finished seeds; see `finetune_work`, and `finetune_seed` for what one seed saves there), and OUT
(model, tokenizer, eval_results.json, run.json, metrics.jsonl) is put in place by one rename at the end, when
the work folder is removed.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from bertctl import optim, run_metrics, stop_signals, training
from bertctl.checkpoint import Checkpoint, folder_head_dropout, model_tokenizer, read_checkpoint
from bertctl.config import FinetuneConfig
from bertctl.config_types import take_config
from bertctl.data.batches import rank_micro_batches, train_batches
from bertctl.data.glue import (
    TASKS,
    Examples,
    GlueTask,
    data_path,
    get_task,
    hub_copy,
    read_split,
    task_folders,
)
from bertctl.data.tabular import LabelledFile, TabularTask
from bertctl.errors import UsageError, warnings_held
from bertctl.evaluate import Features, encode_examples, encode_parts, label_array, predict_command
from bertctl.files import check_out, out_location, write_json_atomic, write_text_atomic
from bertctl.finetune_classifier import ARCHITECTURE, CLASSIFIER
from bertctl.finetune_seed import (
    Prepared,
    Progress,
    SeedSetup,
    finish_seed,
    keep_if_best,
    save_checkpoint,
    start_seed,
)
from bertctl.finetune_work import (
    check_work,
    collect,
    discard_unless_resumable,
    finished_results,
    open_work,
    publish,
    say,
    seed_folder,
)
from bertctl.results_summary import glue_markdown, glue_table, summarize
from bertctl.tokenizer import ENCODE_CHUNK, BertTokenizer

_TRAINED = [task for task in TASKS.values() if not task.predicted_by]  # what `finetune glue all` runs


def finetune_glue(cfg: FinetuneConfig) -> Path | None:
    """Fine-tune on one GLUE task, or on each of them with `task="all"`; returns OUT, or None when a signal
    stopped the run (it saved a checkpoint; the same call with `resume=True` continues it)."""
    require(cfg, "task", "model", "data", "out")
    refuse_the_other_commands(cfg, "glue")
    task = None if cfg.task.lower() == "all" else get_task(cfg.task)
    if task is not None and task.predicted_by:
        raise UsageError(f"{task.name} has no training data; it is predicted with a {task.predicted_by} "
                         f"model: {predict_command(task)}")

    tasks = [task] if task is not None else _TRAINED
    reads = [folder for each in tasks for folder in task_folders(each, cfg.data)]

    def body(base: Base, out: Path, work: Path, env: training.Distributed, stop: stop_signals.GracefulStop) -> None:
        if task is None:
            _glue_all(cfg, base, out, work, env, stop)
            return
        train, dev = _glue_splits(task, cfg.data)
        train_and_publish(cfg, base, task, train, dev, out, work, env, stop)

    return launch(cfg, body, reads, ARCHITECTURE)


def finetune_classify(cfg: FinetuneConfig) -> Path | None:
    """Fine-tune on the user's own table (csv/tsv/jsonl/parquet); returns OUT (None when stopped by a signal)."""
    require(cfg, "train", "model", "out")
    refuse_the_other_commands(cfg, "classify")
    if not cfg.text_columns:
        raise UsageError("--text-columns: name the text column (or two, comma-separated)")

    def body(base: Base, out: Path, work: Path, env: training.Distributed, stop: stop_signals.GracefulStop) -> None:
        task, train, dev = _classify_data(cfg, base, env)
        train_and_publish(cfg, base, task, train, dev, out, work, env, stop, prepare=_prepare_tables)

    return launch(cfg, body, architecture=ARCHITECTURE)


@dataclass
class _CheckedFile:
    """A labelled file whose rows and labels are checked, with its encoded rows where that read encoded them."""

    file: LabelledFile
    features: Features | None = None  # None: read for its labels only, encoded when a seed is to train
    rows: int | None = None  # counted by that read


def _classify_data(cfg: FinetuneConfig, base: Base, env: training.Distributed
                   ) -> tuple[TabularTask, _CheckedFile, dict[str, _CheckedFile]]:
    """The task --train defines and its files, every row and label checked before any text is encoded: a bad
    label at the end of a big file is refused in seconds, and a resume whose seeds are all finished encodes
    nothing. A model that cannot take pairs is refused before any file is read; then come the training file's
    rows, its labels and the validation file's, as when the files were read whole."""
    if len(cfg.text_columns) == 2:
        base.ckpt.config.refuse_pairs(base.ckpt.path, f"{TabularTask.name} has sentence pairs", "one text column")
    train_file = LabelledFile.checked(cfg.train, cfg.text_columns, cfg.label_column, "--train", cfg.problem)
    train = _check_file(cfg, base, env, train_file)
    task = train_file.task(cfg.problem, cfg.label_names)
    train_file.labels_for(task.label_names)
    dev: dict[str, _CheckedFile] = {}
    if cfg.validation:
        dev_file = LabelledFile(cfg.validation, train_file.text_columns, cfg.label_column, "--validation")
        dev["validation"] = _check_file(cfg, base, env, dev_file)
        dev_file.labels_for(task.label_names)
    return task, train, dev


def _check_file(cfg: FinetuneConfig, base: Base, env: training.Distributed, file: LabelledFile) -> _CheckedFile:
    """A labelled file read through for its checks and labels (its texts dropped as they come), to be read again
    when it is encoded; a pipe gives its rows once, so it is encoded as it is read."""
    if file.can_read_again():
        return _CheckedFile(file, rows=file.read_through(ENCODE_CHUNK))
    return _CheckedFile(file, _encode_file(cfg, base, env, file))


def _prepare_tables(cfg: FinetuneConfig, base: Base, task: TabularTask, train: _CheckedFile,
                    dev: dict[str, _CheckedFile], env: training.Distributed) -> Prepared:
    """The files encoded, ENCODE_CHUNK rows at a time (their texts are never all held, only the encoded rows
    training shuffles), with their labels: what `run_task` asks for once a seed is to train."""
    features = {split: _with_labels(_encoded(cfg, base, env, checked), checked.file, task)
                for split, checked in {"train": train, **dev}.items()}
    return _prepared(cfg, base, task, features.pop("train"), features, env)


def _encoded(cfg: FinetuneConfig, base: Base, env: training.Distributed, checked: _CheckedFile) -> Features:
    return checked.features if checked.features is not None else _encode_file(cfg, base, env, checked.file,
                                                                              checked.rows)


def _encode_file(cfg: FinetuneConfig, base: Base, env: training.Distributed, file: LabelledFile,
                 rows: int | None = None) -> Features:
    """A labelled file's texts encoded as they are read (its labels kept in `file`); `rows`, if known, is the bar's
    total."""
    return encode_parts(base.tokenizer, file.parts(ENCODE_CHUNK), cfg.max_seq_length, rows, show=env.is_main)


def _with_labels(features: Features, file: LabelledFile, task: TabularTask) -> Features:
    """A file's encoded rows with its labels as `task` has them, once every row has been read."""
    return dataclasses.replace(features, labels=label_array(file.labels_for(task.label_names)))


class _Stopped(Exception):
    """A SIGINT/SIGTERM ended the run after a checkpoint; the message says where it stopped."""


def launch(cfg: FinetuneConfig, body: Callable[..., None], reads: list[Path] | None = None,
           architecture: str | None = None) -> Path | None:
    """What both commands share around training: torchrun, the checks on OUT and its work folder (`reads`: the
    data folders OUT must keep clear of), the model (`architecture`: the one the run builds), signals, and what a
    failed run leaves (its work folder only when there is something to resume)."""
    env = training.setup_distributed(cfg.device)
    logger = logging.getLogger("bertctl")
    level = logger.level
    if not env.is_main:  # every rank reads the same files and model: rank 0 alone warns about them
        logger.setLevel(logging.ERROR)
    try:
        precision = training.resolve_precision(cfg.precision, env.device)  # before anything is said or read
        with training.training_defaults(), training.rank0_output_lock(check_out(cfg.out), env):  # OUT, its work folder
            out, work = check_work(cfg, env, reads or [])
            if cfg.batch_size < env.world_size:
                raise UsageError(f"--batch-size {cfg.batch_size} is smaller than the {env.world_size} processes")
            base = load_base(cfg, precision, architecture)
            with stop_signals.GracefulStop() as stop:
                try:
                    body(base, out, work, env, stop)
                except _Stopped as stopped:
                    if env.is_main:
                        say(f"{stopped}; the run is saved in {work}: run the same command with --resume to continue")
                    return None
                except BaseException:
                    if env.is_main:
                        discard_unless_resumable(work)
                    raise
            return out
    finally:
        logger.setLevel(level)
        training.cleanup_distributed(env)


def require(cfg: FinetuneConfig, *names: str) -> None:
    take_config("finetune", cfg, FinetuneConfig)
    missing = ["TASK" if n == "task" else f"--{n}" for n in names if getattr(cfg, n) is None]
    if missing:
        raise UsageError(f"give {' and '.join(missing)}")


# the fields only some of the commands read, and those commands
_ONLY = {"task": ("glue",), "data": ("glue",), "train": ("classify", "ner", "squad", "choice"),
         "validation": ("classify", "ner", "squad", "choice"), "label_names": ("classify", "ner"),
         **dict.fromkeys(("text_columns", "label_column", "problem"), ("classify",)),
         **dict.fromkeys(("doc_stride", "max_query_length", "n_best_size", "max_answer_length",
                          "null_score_diff_threshold"), ("squad",))}


def refuse_the_other_commands(cfg: FinetuneConfig, command: str) -> None:
    """A --config file shared between the commands must not have one's fields silently ignored by another
    (a field left at its default is not given)."""
    defaults = {f.name: f.default for f in dataclasses.fields(FinetuneConfig)}
    given = [name for name, commands in _ONLY.items()
             if command not in commands and getattr(cfg, name) not in (None, (), defaults[name])]
    if given:
        first, *also = dict.fromkeys(c for name in given for c in _ONLY[name])  # in _ONLY's order
        commands = [f"`bertctl finetune {first}`", *(f"`finetune {c}`" for c in also)]
        named = commands[0] if not also else f"{', '.join(commands[:-1])} and {commands[-1]}"
        it = "it" if len(given) == 1 else "them"
        raise UsageError(f"{', '.join(given)}: for {named} only; leave {it} out here")


def _glue_splits(task: GlueTask, data: str) -> tuple[Examples, dict[str, Examples]]:
    dev = {split: read_split(task, split, data) for split in task.eval_splits("dev")}
    return read_split(task, "train", data), dev


def train_and_publish(cfg: FinetuneConfig, base: Base, task: Any, train: Any, dev: dict[str, Any], out: Path,
                      work: Path, env: training.Distributed, stop: stop_signals.GracefulStop,
                      prepare: Callable[..., Prepared] | None = None) -> None:
    """One task's run once its data is read: the work folder opened, every seed trained (run_task), the result
    put in OUT."""
    open_work(cfg, work, env)
    _publish_task(run_task(cfg, base, task, train, dev, work, env, stop, prepare), work, out, env, cfg.overwrite)


def _publish_task(summary: dict[str, Any], work: Path, out: Path, env: training.Distributed, overwrite: bool) -> None:
    if env.is_main:
        publish(work, out, lambda staging: collect(summary, work, staging), overwrite)
        _report(summary, out)
    training.barrier(env)


def _report(summary: dict[str, Any], out: Path) -> None:
    means = {f"{split} {name}": stats["mean"] for split, metrics in summary["summary"].items()
             for name, stats in metrics.items()}
    shown = _show(means) or "no validation data"
    seeds = len(summary["seeds"])
    sys.stdout.write(f"{summary['task']}: saved {out} ({shown}{f', mean of {seeds} seeds' if seeds > 1 else ''})\n")


# --- glue all: the nine tasks in one run -------------------------------------------------------------

def _glue_all(cfg: FinetuneConfig, base: Base, out: Path, work: Path, env: training.Distributed,
              stop: stop_signals.GracefulStop) -> None:
    """Every GLUE task with training data, one after another (in work/<task>/), then OUT/<task> for each and
    OUT/results.{md,json}."""
    tasks = _TRAINED
    _check_layout(tasks, cfg.data)
    _read_ahead(_unfinished(cfg, tasks, work), cfg.data)
    open_work(cfg, work, env)
    summaries, sizes = {}, {}
    for task in tasks:
        train, dev = _glue_splits(task, cfg.data)
        sizes[task.name] = len(train)
        summaries[task.name] = run_task(cfg, base, task, train, dev, work / task.name, env, stop)
    table = glue_table(summaries, sizes, out_location(cfg.model).name)  # `--model .` is the folder's own name

    def fill(staging: Path) -> None:
        for task in tasks:
            (staging / task.name).mkdir()
            collect(summaries[task.name], work / task.name, staging / task.name)
        write_json_atomic(staging / "results.json", {**table, "tasks": summaries})
        write_text_atomic(staging / "results.md", glue_markdown(table))

    if env.is_main:
        publish(work, out, fill, cfg.overwrite)
        sys.stdout.write(glue_markdown(table))
    training.barrier(env)


def _check_layout(tasks: list[GlueTask], data: str) -> None:
    """In a local download, every train/dev file must be there (all missing ones named in one line). A task held
    as a copy of the hub dataset is checked by reading it ahead (`_read_ahead`)."""
    root = data_path(data)
    if not root.is_dir():
        return  # a hub id: each task is loaded (or refused) when it starts
    missing = [f"{t.folder}/{f.file}" + (" (a folder, not a file)" if (root / t.folder / f.file).is_dir() else "")
               for t in tasks if hub_copy(t, root) is None for f in t.files
               if not f.split.startswith("test") and not (root / t.folder / f.file).is_file()]
    if missing:
        raise UsageError(f"--data {root}: finetune glue all needs every task; missing {', '.join(missing)}")


def _unfinished(cfg: FinetuneConfig, tasks: list[GlueTask], work: Path) -> list[GlueTask]:
    """The tasks this run will train: every one, or on a resume those with a seed not done yet."""
    if not (cfg.resume and (work / "run.json").is_file()):  # else open_work starts the work folder afresh
        return tasks
    return [task for task in tasks
            if any(finished_results(seed_folder(work / task.name, seed)) is None for seed in cfg.seeds)]


def _read_ahead(tasks: list[GlueTask], data: str) -> None:
    """Read every train and dev split of `tasks` as their runs will, one task at a time and dropped again
    (MNLI's and QQP's train sets hold 390k and 360k rows), so that a bad row in the last task's file stops the
    run before the first task trains, with the message the task would give. Warnings about quirks of the files
    are left to the task's own read, so they are said once."""
    with warnings_held("bertctl.data.glue"):
        for task in tasks:
            _glue_splits(task, data)


# --- one task, one or several seeds ------------------------------------------------------------------

def run_task(cfg: FinetuneConfig, base: Base, task: Any, train: Any, dev: dict[str, Any], work: Path,
             env: training.Distributed, stop: stop_signals.GracefulStop, prepare: Callable[..., Prepared] | None = None
             ) -> dict[str, Any]:
    """Train every seed not finished yet, each in work/seed-N/ until its model folder is work/seed-N/done;
    returns the seeds' summary. `prepare(cfg, base, task, train, dev, env)` encodes the data for the task's head
    (default: a classifier's)."""
    runs = {seed: finished_results(seed_folder(work, seed)) for seed in cfg.seeds}
    if any(results is None for results in runs.values()):
        prepared = (prepare or _prepare)(cfg, base, task, train, dev, env)
        features = prepared.features_sha256()
        first = next(seed for seed, results in runs.items() if results is None)  # says what it fine-tunes
        runs = {seed: results or _train_seed(cfg, prepared, features, seed, seed_folder(work, seed), env, stop,
                                             announce=seed == first and env.is_main)
                for seed, results in runs.items()}
    return summarize(task, runs)


@dataclass
class Base:
    """The model folder fine-tuning starts from, read (and checked) once before any data, and the precision
    every task of the run trains in."""

    ckpt: Checkpoint
    tokenizer: BertTokenizer
    precision: str  # fp32 | bf16 | fp16, resolved for the run's device


def load_base(cfg: FinetuneConfig, precision: str, architecture: str | None = None) -> Base:
    """The starting model, read and checked once: a folder that cannot serve fails before any data is read (its
    head dropout too, which `architecture`'s head takes from config.json without --dropout)."""
    model = Path(cfg.model)
    ckpt = read_checkpoint(model)
    if cfg.dropout is None and architecture is not None:
        folder_head_dropout(ckpt, architecture)  # refused here, not after the data is encoded
    tokenizer = model_tokenizer(ckpt)
    if cfg.max_seq_length > ckpt.config.max_position_embeddings:
        raise UsageError(f"--max-seq-length {cfg.max_seq_length}: {model} takes at most "
                         f"{ckpt.config.max_position_embeddings} tokens")
    if cfg.dropout is not None:
        ckpt.config = ckpt.config.replace(hidden_dropout_prob=cfg.dropout,
                                          attention_probs_dropout_prob=cfg.dropout)
    return Base(ckpt, tokenizer, precision)


def _prepare(cfg: FinetuneConfig, base: Base, task: Any, train: Examples, dev: dict[str, Examples],
             env: training.Distributed) -> Prepared:
    ckpt, tokenizer = base.ckpt, base.tokenizer
    if train.text_b is not None:
        ckpt.config.refuse_pairs(ckpt.path, f"{task.name} has sentence pairs", "one text column")
    features = encode_examples(tokenizer, train, cfg.max_seq_length, show=env.is_main)
    dev_features = {split: encode_examples(tokenizer, examples, cfg.max_seq_length, show=env.is_main)
                    for split, examples in dev.items()}
    return _prepared(cfg, base, task, features, dev_features, env)


def _prepared(cfg: FinetuneConfig, base: Base, task: Any, train: Features, dev: dict[str, Features],
              env: training.Distributed) -> Prepared:
    """A classifier's data once encoded, with a line for each split whose rows were cut to fit."""
    for split, feats in {"train": train, **dev}.items():
        if feats.truncated and env.is_main:
            say(f"{task.name} {split}: {feats.truncated} of {len(feats)} examples cut to "
                f"{cfg.max_seq_length} tokens")
    return Prepared(task, base.ckpt, base.tokenizer, train, dev, base.precision, CLASSIFIER)


@dataclass
class _Loop:
    """What one seed's steps work with, besides the seed set up (`SeedSetup`): its metrics log, clock and bar, the
    steps whose figures are still on the device, and the best epoch the newest checkpoint refers to."""

    cfg: FinetuneConfig
    prep: Prepared
    env: training.Distributed
    stop: stop_signals.GracefulStop
    seed: int
    work: Path
    started: SeedSetup
    train_model: nn.Module  # the model as the steps run it (DDP-wrapped across ranks)
    log: run_metrics.MetricsLog
    speed: run_metrics.Throughput
    bar: Any
    anchored: int  # the best epoch the newest checkpoint refers to: its folder is kept
    pending: list[training.PendingStep] = dataclasses.field(default_factory=list)


def _train_seed(cfg: FinetuneConfig, prep: Prepared, features: str, seed: int, work: Path,
                env: training.Distributed, stop: stop_signals.GracefulStop, announce: bool = False) -> dict[str, Any]:
    """Train one seed in `work` (from its newest checkpoint, if any) until work/done holds the best epoch's
    model folder; returns its eval_results. `features`: the sha256 of the encoded examples."""
    if training.any_rank(stop.requested, env):
        raise _Stopped(f"stopped before {prep.task.name} seed {seed}")
    started = start_seed(cfg, prep, features, seed, work, env, announce)
    progress = started.progress
    loop = _Loop(cfg, prep, env, stop, seed, work, started, training.wrap_ddp(started.model, env),
                 run_metrics.MetricsLog(work, enabled=env.is_main, resumed_at=progress.step),
                 run_metrics.Throughput(started.carried),
                 training.progress_bar(started.total, progress.step, f"{prep.task.name} seed {seed}", env.is_main),
                 anchored=progress.best["epoch"])
    try:
        for epoch in range(progress.step // started.per_epoch + 1, cfg.epochs + 1):
            _train_epoch(loop, epoch)
            _end_epoch(loop, epoch)
    finally:
        loop.bar.close()
        loop.log.close()
    return finish_seed(cfg, started.model, prep, progress, seed, work, env)


def _train_epoch(loop: _Loop, epoch: int) -> None:
    """The epoch's steps from where the seed stands, logging and saving on the way; a stop request saves a
    checkpoint after the current step (an epoch's last step saves after its evaluation, `_end_epoch`)."""
    cfg, progress, per_epoch = loop.cfg, loop.started.progress, loop.started.per_epoch
    batches = train_batches(loop.prep.train.lengths, cfg.batch_size, loop.seed, epoch, cfg.group_by_length)
    for rows in batches[progress.step - (epoch - 1) * per_epoch:]:
        lr = _step(loop, rows)
        stopping = training.any_rank(loop.stop.requested, loop.env)
        saving = progress.step % per_epoch != 0 and (stopping or _save_due(cfg, progress.step))
        log_due = progress.step % cfg.log_every == 0 or progress.step == loop.started.total
        if not (log_due or saving):
            continue
        _read_steps(loop.pending, progress, cfg.max_bad_steps)
        if log_due:
            row = _train_row(progress.step, progress.step / per_epoch, progress.window, lr, loop.speed,
                             loop.prep.task.is_regression)
            loop.log.write(row)
            progress.window = []
            loop.bar.set_postfix(loss=f"{row['loss']:.4f}", lr=f"{lr:.2e}")
        if saving:
            _save_seed(loop)
            if stopping:
                raise _Stopped(f"stopped at step {progress.step} of {loop.started.total} ({loop.prep.task.name} "
                               f"seed {loop.seed})")


def _step(loop: _Loop, rows: np.ndarray) -> float:
    """One optimizer step over the batch `rows` (this rank's share), queued unread; returns its learning rate."""
    cfg, prep, env, started = loop.cfg, loop.prep, loop.env, loop.started
    progress = started.progress
    micro_batches = [training.to_device(_collate_share(prep, share, rows, prep.tokenizer.pad_id), env.device)
                     for share in rank_micro_batches(rows, cfg.micro_batch(env.world_size), env.rank, env.world_size)]
    lr = cfg.lr * optim.lr_factor(progress.step, started.total, started.warmup, cfg.schedule)
    optim.set_lr(started.optimizer, lr)
    loop.train_model.train()
    loop.pending.append(training.optimizer_step(loop.train_model, micro_batches, started.optimizer,
                                                prep.head.loss_terms, prep.head.weights or _weights, env,
                                                prep.precision, started.scaler, cfg.clip))
    progress.step += 1
    # on the host (no device sync); an example of several sequences (choices) counts them all
    loop.speed.add(int(getattr(prep.train, "tokens", prep.train.lengths)[rows].sum()))
    loop.bar.update(1)
    return lr


def _end_epoch(loop: _Loop, epoch: int) -> None:
    """The epoch scored on the validation data (its model kept when best), then a checkpoint when one is due
    or a stop was asked for."""
    cfg, prep, env, progress = loop.cfg, loop.prep, loop.env, loop.started.progress
    with loop.speed.paused():
        if prep.dev:
            scores = prep.head.score(loop.started.model, prep, cfg.eval_batch_size, env.device, prep.precision, env)
            loop.log.write({"step": progress.step, "epoch": float(epoch), **_flat(scores)})  # as training rows
            if env.is_main:
                say(f"{prep.task.name} seed {loop.seed} epoch {epoch}: {_show(_flat(scores))}")
            keep_if_best(loop.started.model, prep, epoch, scores, progress, loop.work, env, loop.anchored)
    stopping = training.any_rank(loop.stop.requested, env)  # an epoch's last step saves after its evaluation
    if progress.step < loop.started.total and (stopping or _save_due(cfg, progress.step)):
        _read_steps(loop.pending, progress, cfg.max_bad_steps)
        _save_seed(loop)
        if stopping:
            raise _Stopped(f"stopped after epoch {epoch} of {cfg.epochs} ({prep.task.name} seed {loop.seed})")


def _save_seed(loop: _Loop) -> None:
    """A resumable checkpoint of the seed, off the throughput clock."""
    started = loop.started
    with loop.speed.paused():
        loop.anchored = save_checkpoint(started.model, loop.prep, started.optimizer, started.scaler,
                                        started.progress, loop.work, loop.env)


def _save_due(cfg: FinetuneConfig, step: int) -> bool:
    return bool(cfg.save_every) and step % cfg.save_every == 0


def _read_steps(pending: list[training.PendingStep], progress: Progress, limit: int) -> None:
    """Read the queued steps into the metrics window (one device sync); a run of NaN/inf steps stops the run."""
    results, progress.bad_in_row = training.read_window(pending, progress.step, progress.bad_in_row, limit,
                                                        "lower --lr or use --precision fp32/bf16")
    progress.window += results


def _collate_share(prep: Prepared, share: np.ndarray, rows: np.ndarray, pad_id: int) -> dict[str, Tensor]:
    """A micro-batch with a `real` flag per row. An empty share becomes one row of the batch flagged off:
    the rank still runs its passes, and adds nothing to the loss, the accuracy or the gradients."""
    picked = share if len(share) else rows[:1]
    batch = prep.head.collate(prep.train, picked, pad_id)
    batch["real"] = torch.full((len(picked),), len(share) > 0)
    return batch


def _weights(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    return {"task": batch["real"].sum()}


# --- metrics rows and the scores said ----------------------------------------------------------------

def _train_row(step: int, epoch: float, window: list[training.StepResult], lr: float,
               speed: run_metrics.Throughput, regression: bool) -> dict[str, Any]:
    means = training.window_means(window)
    row: dict[str, Any] = {"step": step, "epoch": round(epoch, 4), "loss": means["loss"]}
    if not regression:
        row["accuracy"] = means["task_correct"]
    row.update({"lr": lr, "grad_norm": means["grad_norm"], "tokens_per_second": speed.rate(),
                "elapsed": speed.elapsed()})
    return row


def _flat(scores: dict[str, dict[str, float]]) -> dict[str, float]:
    return {f"{split}_{name}": value for split, metrics in scores.items() for name, value in metrics.items()}


def _show(figures: dict[str, float]) -> str:
    return ", ".join(f"{key} {value:.4f}" for key, value in figures.items())


