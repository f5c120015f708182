"""`bertctl finetune glue|classify`: fine-tune BERT on a GLUE task or on the user's own labelled table.

Supports: every GLUE task in the official layout or from the hub (`glue all` runs the nine and writes a
results table laid out like the paper's Table 1), csv/tsv/jsonl/parquet tables (classification or
regression), any model folder bertctl reads (a missing head is created fresh and said so), the paper's recipe
(AdamW, 10% warmup + linear decay, dropout 0.1, 3 epochs, batch 32, 128 tokens) on the shared loop (bf16 on
GPU, gradient accumulation, metrics.jsonl, progress bar), dynamic padding and optional length-grouped batches,
a dev evaluation after every epoch keeping the best one, and several seeds reported as mean ± std and median.

Outputs appear only complete: a run logs into a hidden work folder beside OUT, and OUT (model, tokenizer,
eval_results.json, run.json, metrics.jsonl) is put in place by one rename at the end.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from bertctl import __version__, training
from bertctl.checkpoint import Checkpoint, build_model, model_tokenizer, read_checkpoint, save_model
from bertctl.config import FinetuneConfig, config_to_dict
from bertctl.data.glue import TASKS, Examples, GlueTask, get_task, read_split
from bertctl.data.tabular import load_labelled_data
from bertctl.errors import BertctlError, UsageError
from bertctl.evaluate import (
    Features,
    collate,
    encode_examples,
    glue_markdown,
    glue_table,
    main_score,
    score,
    seeds_markdown,
    summarize,
)
from bertctl.files import replace_folder, temp_folder_beside, write_json_atomic, write_text_atomic
from bertctl.tokenizer import BertTokenizer
from bertctl.training import pick_device

GROUP_WINDOW = 50  # length grouping sorts windows of this many batches (random across windows)
MAX_BAD_STEPS = 5  # consecutive NaN/inf losses before a run stops


def finetune_glue(cfg: FinetuneConfig) -> Path:
    """Fine-tune on one GLUE task, or on each of them with `task="all"`; returns OUT."""
    _require(cfg, "task", "model", "data", "out")
    task = None if cfg.task.lower() == "all" else get_task(cfg.task)
    if task is not None and task.predicted_by:
        raise UsageError(f"{task.name} has no training data; it is predicted with a {task.predicted_by} "
                         f"model: bertctl predict glue {task.name} "
                         f"--model RUN_OF_{task.predicted_by.upper()} ...")
    env = _single_process(cfg.device)
    out = _claim(Path(cfg.out), cfg.overwrite)
    base = load_base(cfg)
    if task is None:
        return _glue_all(cfg, base, out, env)
    train, dev = _glue_splits(task, cfg.data)
    _report(run_task(cfg, base, task, train, dev, out, env), out)
    return out


def finetune_classify(cfg: FinetuneConfig) -> Path:
    """Fine-tune on the user's own table (csv/tsv/jsonl/parquet); returns OUT."""
    _require(cfg, "train", "model", "out")
    if not cfg.text_columns:
        raise UsageError("--text-columns: name the text column (or two, comma-separated)")
    env = _single_process(cfg.device)
    out = _claim(Path(cfg.out), cfg.overwrite)
    base = load_base(cfg)
    table = load_labelled_data(cfg.train, cfg.validation, cfg.text_columns, cfg.label_column, cfg.problem,
                               cfg.label_names)
    dev = {"validation": table.validation} if table.validation else {}
    _report(run_task(cfg, base, table, table.train, dev, out, env), out)
    return out


def _report(summary: dict[str, Any], out: Path) -> None:
    means = {f"{split} {name}": stats["mean"] for split, metrics in summary["summary"].items()
             for name, stats in metrics.items()}
    shown = ", ".join(f"{key} {value:.4f}" for key, value in means.items()) or "no validation data"
    sys.stdout.write(f"{summary['task']}: saved {out} ({shown})\n")


def _require(cfg: FinetuneConfig, *names: str) -> None:
    missing = [f"--{n}" for n in names if getattr(cfg, n) is None]
    if missing:
        raise UsageError(f"give {' and '.join(missing)}")


def _single_process(device: str | None) -> training.Distributed:
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise UsageError("finetune runs in one process on one device; start it without torchrun")
    return training.Distributed(device=pick_device(device))


def _claim(out: Path, overwrite: bool) -> Path:
    """Refuse an existing OUT before any work (it is replaced only at the end, with --overwrite)."""
    if out.exists() and not overwrite:
        raise UsageError(f"--out {out} already exists (pass --overwrite to replace it)")
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; give a folder")
    return out


def _glue_splits(task: GlueTask, data: str) -> tuple[Examples, dict[str, Examples]]:
    dev = {split: read_split(task, split, data) for split in task.eval_splits("dev")}
    return read_split(task, "train", data), dev


# --- one task, one or several seeds ------------------------------------------------------------------

@dataclass
class Prepared:
    """What every seed of a task shares: the checkpoint read and the data encoded once."""

    task: Any  # a GlueTask or a TabularTask: name, label_names, metrics, main_metric, is_regression
    ckpt: Checkpoint
    tokenizer: BertTokenizer
    train: Features
    dev: dict[str, Features]


def run_task(cfg: FinetuneConfig, base: Base, task: Any, train: Examples, dev: dict[str, Examples],
             target: Path, env: training.Distributed) -> dict[str, Any]:
    """Train every seed; one seed writes the model folder `target`, several write target/seed-N/ plus
    results.json and results.md. Returns the seeds' summary."""
    prepared = _prepare(cfg, base, task, train, dev)
    if len(cfg.seeds) == 1:
        return summarize(task, {cfg.seeds[0]: _train_seed(cfg, prepared, cfg.seeds[0], target, env)})
    staging = temp_folder_beside(target)
    try:
        runs = {seed: _train_seed(cfg, prepared, seed, staging / f"seed-{seed}", env) for seed in cfg.seeds}
        summary = summarize(task, runs)
        write_json_atomic(staging / "results.json", summary)
        write_text_atomic(staging / "results.md", seeds_markdown(summary))
        replace_folder(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return summary


@dataclass
class Base:
    """The model folder fine-tuning starts from, read (and checked) once before any data."""

    ckpt: Checkpoint
    tokenizer: BertTokenizer


def load_base(cfg: FinetuneConfig) -> Base:
    model = Path(cfg.model)
    ckpt = read_checkpoint(model)
    tokenizer = model_tokenizer(ckpt)
    if cfg.max_seq_length > ckpt.config.max_position_embeddings:
        raise UsageError(f"--max-seq-length {cfg.max_seq_length}: {model} takes at most "
                         f"{ckpt.config.max_position_embeddings} tokens")
    if cfg.dropout is not None:
        ckpt.config = ckpt.config.replace(hidden_dropout_prob=cfg.dropout,
                                          attention_probs_dropout_prob=cfg.dropout)
    return Base(ckpt, tokenizer)


def _prepare(cfg: FinetuneConfig, base: Base, task: Any, train: Examples, dev: dict[str, Examples]
             ) -> Prepared:
    ckpt, tokenizer = base.ckpt, base.tokenizer
    features = encode_examples(tokenizer, train, cfg.max_seq_length)
    dev_features = {split: encode_examples(tokenizer, examples, cfg.max_seq_length)
                    for split, examples in dev.items()}
    for split, feats in {"train": features, **dev_features}.items():
        if feats.truncated:
            _say(f"{task.name} {split}: {feats.truncated} of {len(feats)} examples cut to "
                 f"{cfg.max_seq_length} tokens")
    return Prepared(task, ckpt, tokenizer, features, dev_features)


def _train_seed(cfg: FinetuneConfig, prep: Prepared, seed: int, target: Path,
                env: training.Distributed) -> dict[str, Any]:
    """Train one seed, keep the best epoch, write `target` atomically; returns its eval_results."""
    task, device, pad_id = prep.task, env.device, prep.tokenizer.pad_id
    training.seed_everything(seed)
    model = _model(cfg, prep, announce=seed == cfg.seeds[0]).to(device)
    training.enable_fast_math(device)
    precision = training.resolve_precision(cfg.precision, device)
    optimizer = training.make_optimizer("adamw", model, cfg.lr, cfg.weight_decay,
                                        (cfg.adam_beta1, cfg.adam_beta2), cfg.adam_eps)
    scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None
    micro, _ = cfg.micro_batches()
    per_epoch = math.ceil(len(prep.train) / cfg.batch_size)
    total = per_epoch * cfg.epochs
    warmup = math.ceil(cfg.warmup_fraction * total)
    work = temp_folder_beside(target, "run")
    try:
        record = _run_record(cfg, prep, model, seed, precision, device, total, warmup)
        write_json_atomic(work / "run.json", record)
        log = training.MetricsLog(work)
        speed = training.Throughput()
        bar = _progress(total, f"{task.name} seed {seed}")
        step, bad_in_row, window, pending = 0, 0, [], []
        best: dict[str, Any] = {"epoch": 0}
        for epoch in range(1, cfg.epochs + 1):
            for rows in train_batches(prep.train.lengths, cfg.batch_size, seed, epoch, cfg.group_by_length):
                micro_batches = [training.to_device(collate(prep.train, rows[i: i + micro], pad_id), device)
                                 for i in range(0, len(rows), micro)]
                lr = cfg.lr * training.lr_factor(step, total, warmup, cfg.schedule)
                training.set_lr(optimizer, lr)
                model.train()
                pending.append(training.optimizer_step(model, micro_batches, optimizer, _loss_terms, _weights,
                                                       env, precision, scaler, cfg.clip))
                step += 1
                speed.add(int(prep.train.lengths[rows].sum()))  # on the host: no device sync
                bar.update(1)
                if step % cfg.log_every and step != total:
                    continue
                for offset, result in enumerate(training.resolve_steps(pending), start=step - len(pending) + 1):
                    bad_in_row = bad_in_row + 1 if result.skipped else 0
                    if bad_in_row >= MAX_BAD_STEPS:
                        raise BertctlError(f"the loss was NaN/inf for {bad_in_row} steps in a row at step "
                                           f"{offset}; lower --lr or use --precision fp32/bf16")
                    window.append(result)
                pending = []
                row = _train_row(step, step / per_epoch, window, lr, speed, task.is_regression)
                log.write(row)
                window = []
                bar.set_postfix(loss=f"{row['loss']:.4f}", lr=f"{lr:.2e}")
            if prep.dev:
                scores = score(task, model, prep.dev, pad_id, cfg.eval_batch_size, device, precision)
                log.write({"step": step, "epoch": epoch, **_flat(scores)})
                bar.write(f"{task.name} seed {seed} epoch {epoch}: {_show(scores)}", file=sys.stderr)
                if best["epoch"] == 0 or main_score(task, scores) > main_score(task, best["scores"]):
                    best = {"epoch": epoch, "step": step, "scores": scores, "state": _cpu_copy(model)}
        bar.close()
        log.close()
        if "state" in best:
            model.load_state_dict(best["state"])
        results = {"task": task.name, **best.get("scores", {}), "main_metric": task.main_metric,
                   "best_epoch": best["epoch"] or cfg.epochs, "best_step": best.get("step", step),
                   "seed": seed}
        save_model(model, target, prep.tokenizer, labels=list(task.label_names) or None, overwrite=True,
                   problem_type="regression" if task.is_regression else "single_label_classification",
                   config_extra={**prep.ckpt.kept_config, "finetuning_task": task.name},
                   extra=lambda tmp: _finish(tmp, work, results))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return results


def _model(cfg: FinetuneConfig, prep: Prepared, announce: bool) -> nn.Module:
    model = build_model(prep.ckpt, "BertForSequenceClassification", num_labels=prep.task.num_labels,
                        classifier_dropout=cfg.dropout)
    if announce:
        fresh = set(model.fresh_heads)
        what = (f"a new classifier head ({prep.task.num_labels} output(s))" if "classifier" in fresh
                else "its own classifier head")
        pooler = "; the pooler is new too" if "pooler" in fresh else ""
        _say(f"{prep.task.name}: fine-tuning {cfg.model} with {what}{pooler}")
    return model


def _loss_terms(model: nn.Module, batch: dict[str, Tensor]) -> dict[str, tuple[Tensor, Tensor]]:
    out = model(batch["input_ids"], batch["token_type_ids"], batch.get("attention_mask"), labels=batch["labels"])
    labels = batch["labels"]
    if labels.is_floating_point():  # regression: no accuracy
        return {"task": (out.loss, labels.new_zeros(()))}
    correct = (out.logits.argmax(-1) == labels).sum()
    return {"task": (out.loss, correct)}


def _weights(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    labels = batch["labels"]
    return {"task": labels.new_full((), labels.shape[0], dtype=torch.long)}


def train_batches(lengths: np.ndarray, batch_size: int, seed: int, epoch: int, group_by_length: bool
                  ) -> list[np.ndarray]:
    """One epoch's batches of row ids: a fresh permutation from (seed, epoch), the last batch partial.

    Grouped by length: every window of GROUP_WINDOW batches is sorted by length before it is cut into
    batches, the batches are shuffled, and the one with the longest example goes first (so running out of
    memory happens at step 1, not hours in).
    """
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(lengths))
    if group_by_length:
        window = batch_size * GROUP_WINDOW
        order = np.concatenate([chunk[np.argsort(-lengths[chunk], kind="stable")]
                                for chunk in np.split(order, range(window, len(order), window))])
    batches = [order[i: i + batch_size] for i in range(0, len(order), batch_size)]
    if group_by_length:
        batches = [batches[i] for i in rng.permutation(len(batches))]
        longest = max(range(len(batches)), key=lambda i: int(lengths[batches[i]].max()))
        batches.insert(0, batches.pop(longest))
    return batches


# --- run records ------------------------------------------------------------------------------------

def _run_record(cfg: FinetuneConfig, prep: Prepared, model: nn.Module, seed: int, precision: str,
                device: torch.device, total: int, warmup: int) -> dict[str, Any]:
    return {"config": config_to_dict(cfg), "seed": seed, "task": prep.task.name,
            "labels": list(prep.task.label_names), "metrics": list(prep.task.metrics),
            "main_metric": prep.task.main_metric, "model": model.config.to_dict(),
            "fresh_heads": list(model.fresh_heads), "train_examples": len(prep.train),
            "dev_examples": {split: len(f) for split, f in prep.dev.items()},
            "truncated": {"train": prep.train.truncated, **{s: f.truncated for s, f in prep.dev.items()}},
            "steps": total, "warmup_steps": warmup, "device": device.type, "precision": precision,
            "bertctl_version": __version__}


def _train_row(step: int, epoch: float, window: list[training.StepResult], lr: float,
               speed: training.Throughput, regression: bool) -> dict[str, Any]:
    good = [r for r in window if not r.skipped] or window
    row: dict[str, Any] = {"step": step, "epoch": round(epoch, 4),
                           "loss": sum(r.loss for r in good) / len(good)}
    if not regression:
        row["accuracy"] = sum(r.parts["task_correct"] for r in good) / len(good)
    row.update({"lr": lr, "grad_norm": sum(r.grad_norm for r in good) / len(good),
                "tokens_per_second": speed.rate(), "elapsed": speed.elapsed()})
    return row


def _flat(scores: dict[str, dict[str, float]]) -> dict[str, float]:
    return {f"{split}_{name}": value for split, metrics in scores.items() for name, value in metrics.items()}


def _show(scores: dict[str, dict[str, float]]) -> str:
    return ", ".join(f"{key} {value:.4f}" for key, value in _flat(scores).items())


def _finish(tmp: Path, work: Path, results: dict[str, Any]) -> None:
    """Move the run's logs next to the model and add eval_results.json (inside save_model's temp folder)."""
    for item in sorted(work.iterdir()):
        os.replace(item, tmp / item.name)
    write_json_atomic(tmp / "eval_results.json", results)


def _cpu_copy(model: nn.Module) -> dict[str, Tensor]:
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


def _glue_all(cfg: FinetuneConfig, base: Base, out: Path, env: training.Distributed) -> Path:
    """Every GLUE task with training data, one after another, into OUT/<task>; then OUT/results.{md,json}."""
    tasks = [task for task in TASKS.values() if not task.predicted_by]
    _check_layout(tasks, cfg.data)
    staging = temp_folder_beside(out)
    try:
        summaries, sizes = {}, {}
        for task in tasks:
            train, dev = _glue_splits(task, cfg.data)
            sizes[task.name] = len(train)
            summaries[task.name] = run_task(cfg, base, task, train, dev, staging / task.name, env)
        table = glue_table(summaries, sizes, Path(cfg.model).name)
        write_json_atomic(staging / "results.json", {**table, "tasks": summaries})
        write_text_atomic(staging / "results.md", glue_markdown(table))
        replace_folder(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    sys.stdout.write(glue_markdown(table))
    return out


def _check_layout(tasks: list[GlueTask], data: str) -> None:
    """In a local download, every train/dev file must be there before the first task starts."""
    root = Path(data)
    if not root.is_dir():
        return  # a hub id: each task is loaded (or refused) when it starts
    missing = [f"{t.folder}/{f.file}" for t in tasks for f in t.files
               if not f.split.startswith("test") and not (root / t.folder / f.file).is_file()]
    if missing:
        raise UsageError(f"--data {root}: finetune glue all needs every task; missing {', '.join(missing)}")


# --- atomic folders ---------------------------------------------------------------------------------

def _say(message: str) -> None:
    sys.stderr.write(f"bertctl: {message}\n")


def _progress(total: int, desc: str) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="step", dynamic_ncols=True, file=sys.stderr)
