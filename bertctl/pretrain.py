"""`bertctl pretrain`: BERT's masked-LM (+ next-sentence or sentence-order) pre-training.

Supports: corpora from `bertctl corpus build` (static or dynamic masking, MLM / MLM+NSP / MLM+SOP), presets
or config.json models, `--init-from` for sequence-length phases, AdamW or LAMB with warmup + linear/cosine
decay, gradient accumulation to a global batch, bf16/fp16 autocast, torch.compile, torchrun DDP (NCCL or
gloo), exact resume (model, optimizer, RNGs, data position), graceful SIGINT/SIGTERM, NaN-step skipping,
validation, metrics.jsonl. With no corpus it runs the quick start on the bundled novels.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch

from bertctl import optim, pretrain_resume, run_metrics, stop_signals, training, training_state
from bertctl.checkpoint import build_model, read_checkpoint, save_model
from bertctl.config import BertConfig, PretrainConfig, model_config, usable_cores
from bertctl.config_types import take_config
from bertctl.corpus_fit import corpus_tokenizer, refuse_unfit_corpus, says_its_settings
from bertctl.data.batches import BatchPlan, Collator, StepBatches
from bertctl.data.masking import masking_options
from bertctl.errors import UsageError, say
from bertctl.files import (
    check_out,
    folder_undone_on_failure,
    out_location,
    user_path,
    write_json_atomic,
)
from bertctl.hub import local_folder
from bertctl.model import ARCHITECTURES, BertTaskModel
from bertctl.pretraining_objective import evaluate_pretraining, loss_terms, loss_weights
from bertctl.tokenizer import BertTokenizer
from bertctl.tokenizer_folder import has_tokenizer

logger = logging.getLogger(__name__)


def pretrain(cfg: PretrainConfig) -> Path:
    """Run (or resume) pre-training; returns the final model folder."""
    take_config("pretrain", cfg, PretrainConfig)
    env = training.setup_distributed(cfg.device)
    try:
        with training.training_defaults(), training.rank0_output_lock(check_out(cfg.out), env):
            return _train(_prepare(cfg, env))
    finally:
        training.cleanup_distributed(env)


@dataclass
class _Progress:
    """How far the run has got: what a checkpoint's trainer state holds, so that a resume goes on exactly there."""

    step: int = 0
    samples_seen: int = 0
    bad_steps: int = 0  # updates skipped so far (NaN/inf), metrics rows' skipped_steps
    bad_in_row: int = 0
    window: list[training.StepResult] = field(default_factory=list)  # read steps since the last metrics row

    @classmethod
    def from_record(cls, record: dict[str, Any], log_every: int) -> _Progress:
        """A checkpoint saved inside a --log-every window keeps that window's steps, so the next row is the
        uninterrupted run's (older checkpoints have none: that row then averages the resumed steps only)."""
        step = record["step"]
        return cls(step, record["samples_seen"], record.get("bad_steps", 0), record.get("bad_in_row", 0),
                   training.resumed_window(record.get("log_window", []), step, log_every))

    def record(self) -> dict[str, Any]:
        return {"step": self.step, "samples_seen": self.samples_seen, "bad_steps": self.bad_steps,
                "bad_in_row": self.bad_in_row, "log_window": [result.to_json() for result in self.window]}


@dataclass
class _Run:
    """What the training loop works with, once every refusal has passed and run.json is written."""

    cfg: PretrainConfig
    env: training.Distributed
    corpus: Any  # the corpus's splits (datasets), `train` and maybe `validation`
    manifest: dict[str, Any]
    tokenizer: BertTokenizer
    model: BertTaskModel
    optimizer: torch.optim.Optimizer
    scaler: Any  # fp16's GradScaler, else None
    precision: str
    compiled: bool
    micro: int  # sequences per forward pass on this rank
    accum: int  # forward passes per optimizer step
    progress: _Progress
    carried: float  # seconds the run had already trained (resumed), so `elapsed` goes on from there
    dropout: float | None  # run.json's --dropout, kept in each checkpoint's trainer state (`recorded_config`)


def _prepare(cfg: PretrainConfig, env: training.Distributed) -> _Run:
    """Every refusal first (before the quick start builds anything), then the data, model and optimizer, and
    run.json; a resume restores the optimizer, the data position and the RNGs."""
    run = Path(cfg.out)
    resume_from, started = _checked_start(cfg, run, env)
    precision = training.resolve_precision(cfg.precision, env.device)
    micro, accum = cfg.micro_batches(env.world_size)
    quickstart = cfg.corpus is None
    if quickstart:
        from bertctl.quickstart import prepare_quickstart

        cfg = prepare_quickstart(cfg, env)
    corpus, manifest = _corpus(cfg, run, started, env)
    tokenizer = _tokenizer(cfg, manifest)
    model, init_weights = _model_on_device(cfg, tokenizer, manifest, resume_from, env)
    training.enable_fast_math(env.device)
    compiled = cfg.compile if cfg.compile is not None else _can_compile(env.device)
    _warn_slow_settings(cfg, env)
    optimizer = optim.make_optimizer(cfg.optimizer, model, cfg.lr, cfg.weight_decay,
                                     (cfg.adam_beta1, cfg.adam_beta2), cfg.adam_eps)
    scaler = torch.amp.GradScaler(env.device.type) if precision == "fp16" else None
    training_state.seed_everything(cfg.seed + env.rank)
    progress, saved = _Progress(), {}
    if resume_from is not None:
        saved = training_state.read_training_state(resume_from, optimizer, scaler, env.rank)
        progress = _Progress.from_record(saved, cfg.log_every)
    config = pretrain_resume.recorded_config(cfg, started, saved)
    pretrain_resume.warn_changed_on_resume(cfg, run, started, resume_from, env)
    carried = 0.0
    if env.is_main:
        carried = _start_run_folder(cfg, run, {
            "config": config, "model": model.config.to_dict(), "world_size": env.world_size,
            "device": env.device.type, "threads": torch.get_num_threads(), "precision": precision, "compile": compiled,
            "warmup_steps": cfg.warmup(),
            "corpus_manifest": manifest, "quickstart": started.get("quickstart", quickstart),
            "init_weights_sha256": started.get("init_weights_sha256") if resume_from else init_weights,
            "resumed_from": str(resume_from or ""), "from_step": progress.step,
            "earlier": pretrain_resume.earlier_parts(started, progress.step)}, resume_from)
    return _Run(cfg, env, corpus, manifest, tokenizer, model, optimizer, scaler, precision, compiled, micro, accum,
                progress, carried, config["dropout"])


def _model_on_device(cfg: PretrainConfig, tokenizer: BertTokenizer, manifest: dict[str, Any],
                     resume_from: Path | None, env: training.Distributed) -> tuple[BertTaskModel, str | None]:
    """`_model` on the run's device, saying which heads a new run from --init-from starts fresh."""
    model, init_weights = _model(cfg, tokenizer, manifest, resume_from)
    model = model.to(env.device)
    model.set_gradient_checkpointing(cfg.gradient_checkpointing)
    if env.is_main and resume_from is None and cfg.init_from is not None and model.fresh_heads:
        *most, last = model.fresh_heads
        say(f"pretrain: {cfg.init_from} has no {', '.join(most) + ' or ' if most else ''}{last}; "
            f"{'they start' if most else 'it starts'} fresh (--seed {cfg.seed})")
    return model, init_weights


def _warn_slow_settings(cfg: PretrainConfig, env: training.Distributed) -> None:
    """Settings that run but waste the run: more loader workers than cores, a warmup as long as the run."""
    if env.is_main:
        _warn_many_workers(cfg.num_workers)
    if env.is_main and cfg.warmup() >= cfg.steps:
        logger.warning("warning: the warmup (%d steps) is not shorter than the run (%d steps), so the learning rate "
                       "never reaches --lr %g; pass --warmup-steps or --warmup-fraction", cfg.warmup(), cfg.steps,
                       cfg.lr)


def _checked_start(cfg: PretrainConfig, run: Path, env: training.Distributed) -> tuple[Path | None, dict[str, Any]]:
    """The checkpoint a resume continues from (None for a new run) and run.json's record of the run so far,
    after the refusals that need neither data nor model."""
    check_out(cfg.out)
    _refuse_file_as_final(run)
    _refuse_out_in_corpus(cfg)
    _refuse_out_model_folder(cfg)
    resume_from = pretrain_resume.resume_point(cfg, run, env)
    seen = b"" if resume_from is None else resume_from.name.encode() + training_state.saved_state(resume_from)
    training.refuse_unshared_out(cfg.out, seen, "other checkpoints there", env)
    started = pretrain_resume.check_resumable(cfg, run, resume_from) if resume_from is not None else {}
    if resume_from is None and cfg.init_from is None:
        model_config(cfg.model_name())  # a bad --model-config fails here, not after the quick start's data is built
    if cfg.corpus is None and cfg.init_from is not None:  # the quick start's own new vocabulary cannot fit it
        raise UsageError(f"--init-from {cfg.init_from} needs --corpus: build one with its tokenizer (bertctl corpus "
                         f"build TEXT --tokenizer {cfg.init_from} --out CORPUS); the quick start trains a vocabulary "
                         "of its own")
    return resume_from, started


def _corpus(cfg: PretrainConfig, run: Path, started: dict[str, Any], env: training.Distributed
            ) -> tuple[Any, dict[str, Any]]:
    """The corpus's splits and manifest, refused when a resume names another corpus than the run's or when
    ranks read different instances."""
    from bertctl.corpus import instances_fingerprint, load_corpus, same_instances

    corpus, manifest = load_corpus(cfg.corpus)
    if not same_instances(started.get("corpus_manifest", manifest), manifest):
        raise UsageError(f"--resume: --corpus {cfg.corpus} is not the corpus the run in {run} was started on (their "
                         "manifests differ); resume it on that corpus, or start a new run with another --out")
    differing = training.ranks_differing(instances_fingerprint(manifest), env)
    if differing:
        raise UsageError(f"--corpus {cfg.corpus}: rank {differing[0]} reads other instances than rank 0 there (their "
                         "manifests differ); give every node a copy of the same corpus")
    return corpus, manifest


def _start_run_folder(cfg: PretrainConfig, run: Path, record: dict[str, Any], resume_from: Path | None) -> float:
    """RUN with run.json written and what an interrupted run left cleared; returns the seconds metrics.jsonl says
    the run had trained, so `elapsed` goes on from there. metrics.jsonl is read first: a damaged one is refused
    with RUN as it was."""
    step = record["from_step"]
    extended = resume_from is not None and resume_from.name == "final" and step % cfg.log_every != 0
    kept = run_metrics.kept_metrics(run, step, drop_closing_row=extended and cfg.steps > step)
    with folder_undone_on_failure(run):  # a RUN made here goes again if run.json cannot be written (a full disk)
        training_state.remove_interrupted_saves(run)
        write_json_atomic(run / "run.json", record)
        return run_metrics.trim_metrics(run, kept)


def _train(r: _Run) -> Path:
    """The steps from where the run stands to --steps, logging, validating and saving on the way; a stop
    request (SIGINT/SIGTERM) saves a checkpoint after the current step. Returns the folder last saved."""
    cfg, env, progress = r.cfg, r.env, r.progress
    run = Path(cfg.out)
    train_model = _training_model(r)
    collate = _collator(r)
    loader = _loader(_step_batches(r, collate), cfg, env)
    validation = r.corpus["validation"] if "validation" in r.corpus and cfg.eval_every else None
    has_nsp = "next_sentence_label" in r.corpus["train"].column_names
    step_terms = partial(loss_terms, predictions=_mlm_slots(r.manifest, r.compiled, env.device))
    log = run_metrics.MetricsLog(run, enabled=env.is_main, resumed_at=progress.step)
    speed = run_metrics.Throughput(r.carried)
    bar = training.progress_bar(cfg.steps, progress.step, "pretrain", env.is_main)
    pending: list[training.PendingStep] = []  # steps whose figures are still on the device
    with (stop_signals.GracefulStop() as stop, stop_signals.loader_batches(loader) as batches, bar,
          contextlib.closing(log)):
        while progress.step < cfg.steps:
            lr, tokens = _step(r, train_model, [next(batches) for _ in range(r.accum)], step_terms, pending)
            speed.add(tokens)
            bar.update(1)
            step = progress.step
            stopping = training.any_rank(stop.requested, env)
            log_due = step % cfg.log_every == 0 or step == cfg.steps
            saving = step < cfg.steps and (stopping or (cfg.save_every and step % cfg.save_every == 0))
            evaluating = validation is not None and step % cfg.eval_every == 0
            if not (log_due or saving or evaluating):
                continue
            _read_pending(r, pending)
            if log_due:
                _write_log_row(r, log, bar, lr, speed, has_nsp)
            with speed.paused():
                if evaluating:
                    log.write({"step": step, **evaluate_pretraining(r.model, validation, collate, r.micro,
                                                                    cfg.eval_samples, env, r.precision)})
                if saving:
                    _save_step(r)
            if stopping:
                break
        if progress.step >= cfg.steps:
            _save(r, run / "final", overwrite=True)
    return _said_saved(r)


def _training_model(r: _Run) -> torch.nn.Module:
    """The model the steps run: DDP-wrapped across ranks, and compiled after DDP so that the compiler sees its
    bucket boundaries."""
    training.sparse_tied_embedding_grads(r.model, r.env, r.compiled)
    train_model = training.wrap_ddp(r.model, r.env)
    if r.compiled:
        train_model = torch.compile(train_model)
        if r.env.is_main:
            say("pretrain: torch.compile: the first steps compile the model (a minute or two); --no-compile "
                "skips it")
    return train_model


def _step_batches(r: _Run, collate: Collator) -> StepBatches:
    """This rank's micro-batches for the steps still to run, from the data position the run has reached."""
    cfg, env, progress = r.cfg, r.env, r.progress
    plan = BatchPlan(len(r.corpus["train"]), cfg.batch_size, r.micro, env.rank, env.world_size, cfg.seed)
    return StepBatches(r.corpus["train"], plan, collate, progress.samples_seen, cfg.steps - progress.step)


def _step(r: _Run, train_model: torch.nn.Module, host_batches: list[dict[str, torch.Tensor]],
          step_terms: Callable[..., Any], pending: list[training.PendingStep]) -> tuple[float, int]:
    """One optimizer step, queued in `pending` unread (its figures stay on the device); returns its learning
    rate and this rank's tokens, counted on the host (summed over ranks when logged)."""
    cfg, progress = r.cfg, r.progress
    tokens = sum(int(b["attention_mask"].sum()) for b in host_batches)
    micro_batches = [training.to_device(b, r.env.device, keep_mask=r.compiled) for b in host_batches]
    lr = cfg.lr * optim.lr_factor(progress.step, cfg.steps, cfg.warmup(), cfg.schedule)
    optim.set_lr(r.optimizer, lr)
    r.model.train()
    pending.append(training.optimizer_step(train_model, micro_batches, r.optimizer, step_terms, loss_weights,
                                           r.env, r.precision, r.scaler, cfg.clip))
    progress.step += 1
    progress.samples_seen += cfg.batch_size
    return lr, tokens


def _read_pending(r: _Run, pending: list[training.PendingStep]) -> None:
    """The queued steps read into the log window (one device sync); a run of NaN/inf steps stops the run."""
    progress = r.progress
    results, progress.bad_in_row = training.read_window(
        pending, progress.step, progress.bad_in_row, r.cfg.max_bad_steps,
        "lower --lr, use --precision fp32/bf16, or check the corpus")
    progress.bad_steps += sum(result.skipped for result in results)
    progress.window += results


def _write_log_row(r: _Run, log: run_metrics.MetricsLog, bar: Any, lr: float, speed: run_metrics.Throughput,
                   has_nsp: bool) -> None:
    """A metrics.jsonl row of the steps read so far; only a --log-every step's row starts a new window."""
    progress = r.progress
    row = _log_row(progress.step, progress.window, lr, speed, has_nsp, progress.bad_steps, r.env)
    log.write(row)
    if progress.step % r.cfg.log_every == 0:  # a closing row's steps stay, for final/
        progress.window = []
    bar.set_postfix(loss=f"{row['loss']:.4f}", lr=f"{lr:.2e}", tok_s=f"{row['tokens_per_second']:.0f}")


def _save_step(r: _Run) -> None:
    """A step checkpoint, then the oldest ones past --keep removed."""
    run = Path(r.cfg.out)
    _save(r, training_state.step_folder(run, r.progress.step))
    if r.env.is_main:
        training_state.prune_checkpoints(run, r.cfg.keep)


def _said_saved(r: _Run) -> Path:
    """The folder the run saved last (final/, or the step checkpoint of a stop), named on stdout."""
    run, step = Path(r.cfg.out), r.progress.step
    where = run / "final" if step >= r.cfg.steps else training_state.step_folder(run, step)
    if r.env.is_main:
        print(f"saved {where} (step {step})")
    return where


def _collator(r: _Run) -> Collator:
    """Batches of the corpus's rows; dynamic masking draws the masks here. Compiled runs pad every batch to the
    corpus's length, so that the graph sees one shape."""
    manifest = r.manifest
    masking = None
    if manifest["masking"] == "dynamic":
        masking = masking_options(r.tokenizer, manifest["masked_lm_prob"], manifest["max_predictions_per_seq"],
                                  manifest["whole_word_masking"])
    return Collator(r.tokenizer.pad_id, masking, r.cfg.seed, manifest["max_seq_length"] if r.compiled else None)


def _mlm_slots(manifest: dict[str, Any], compiled: bool, device: torch.device) -> int | None:
    """The MLM head's fixed slots per row (max_predictions_per_seq), or None for the masked positions as they fall.
    Compiled graphs want fixed shapes, and on CUDA picking the masked positions (a boolean index) would make the
    host wait for the device every forward pass; the same losses either way, up to rounding."""
    return manifest["max_predictions_per_seq"] if compiled or device.type == "cuda" else None


def _tokenizer(cfg: PretrainConfig, manifest: dict[str, Any]) -> BertTokenizer:
    """--tokenizer, else the corpus's own (CORPUS/tokenizer), else --init-from's.

    Each of them that is there must encode text exactly as the corpus's own does: the same vocabulary (its
    sha256 in the manifest) and the same settings that decide the ids (casing, accents, ...). A model that
    learned other ids, or a saved tokenizer that encodes text otherwise than the training data, is refused.
    A corpus without its own copy (older corpora) has only the sha256 to compare.
    """
    own_folder = Path(cfg.corpus) / "tokenizer"
    candidates = [(f"--tokenizer {cfg.tokenizer}", cfg.tokenizer, True)] if cfg.tokenizer is not None else []
    if has_tokenizer(own_folder):
        candidates.append((f"corpus {cfg.corpus}'s tokenizer", own_folder, True))
    if cfg.init_from is not None and has_tokenizer(init := local_folder(cfg.init_from)):
        # A bare vocab.txt (Google's layout) does not say its casing: only its vocabulary can be compared.
        candidates.append((f"--init-from {cfg.init_from}'s tokenizer", init, says_its_settings(init)))
    if not candidates:
        raise UsageError(f"no tokenizer found: pass --tokenizer (the one {cfg.corpus} was built with)")
    return corpus_tokenizer(cfg.corpus, manifest, candidates, "rebuild the corpus or pass the matching --tokenizer")


def _refuse_out_in_corpus(cfg: PretrainConfig) -> None:
    """A run written into its corpus folder would be deleted by the next `corpus build --overwrite` of it."""
    if cfg.corpus is None or not (corpus := user_path(cfg.corpus)).is_dir():
        return
    if out_location(cfg.out).is_relative_to(corpus.resolve()):
        raise UsageError(f"--out {cfg.out} is inside the corpus {cfg.corpus}, which `corpus build --overwrite` "
                         "replaces whole; choose a path outside it")


def _refuse_file_as_final(run: Path) -> None:
    """RUN/final is written last: a file there failed only after every step had trained, naming it as --out."""
    final = run / "final"
    if final.exists() and not final.is_dir():
        raise UsageError(f"--out {run}: {final} is a file, not a model folder; move or delete it")


def _refuse_out_model_folder(cfg: PretrainConfig) -> None:
    """A model folder (a fine-tuned run, the --init-from model) is never a run folder: written into, it lost its
    run.json and metrics.jsonl to pretrain's and got a run nested inside it."""
    if (user_path(cfg.out) / "config.json").is_file():
        raise UsageError(f"--out {cfg.out} is a model folder (it holds config.json), not a run folder; choose "
                         "another --out")


def _model(cfg: PretrainConfig, tokenizer: BertTokenizer, manifest: dict[str, Any],
           resume_from: Path | None) -> tuple[BertTaskModel, str | None]:
    """The model to train, and the sha256 of --init-from's weights (a new run from it only), which run.json
    records so that other weights under the same path show."""
    architecture = "BertForMaskedLM" if manifest["objective"] == "mlm" else "BertForPreTraining"
    dropout = {} if cfg.dropout is None else {"hidden_dropout_prob": cfg.dropout,
                                               "attention_probs_dropout_prob": cfg.dropout}
    source = resume_from or cfg.init_from
    torch.manual_seed(cfg.seed)  # the weights of a fresh model, or of the heads --init-from's model lacks
    if source is not None:
        ckpt = read_checkpoint(source)
        ckpt.config = ckpt.config.replace(**dropout)
        model = build_model(ckpt, architecture, share_weights=True, draw_decoder=True)  # as transformers: at random
        init_weights = ckpt.weights_sha256() if resume_from is None else None
    else:
        # a config.json's own vocab_size wins (a padded vocabulary, 30528 rows for 30522 tokens in NVIDIA's BERT
        # configs), as transformers and Google's run_pretraining.py build it; presets take the tokenizer's size
        config: BertConfig = model_config(cfg.model_name(), {"vocab_size": tokenizer.vocab_size}, **dropout)
        model, init_weights = ARCHITECTURES[architecture](config), None
    if model.config.vocab_size < tokenizer.vocab_size:  # more rows is fine: a padded vocabulary, as on the hub
        if source is None:
            raise UsageError(f"--model-config {cfg.model_name()} sets vocab_size {model.config.vocab_size} but the "
                             f"tokenizer has {tokenizer.vocab_size} tokens; raise it to at least "
                             f"{tokenizer.vocab_size}, or leave it out (the model then takes the tokenizer's size)")
        raise UsageError(f"the model has {model.config.vocab_size} embedding rows but the tokenizer has "
                         f"{tokenizer.vocab_size} tokens; use the matching tokenizer")
    refuse_unfit_corpus(model.config, manifest, cfg.corpus)
    return model, init_weights


def _log_row(step: int, window: list[training.StepResult], lr: float, speed: run_metrics.Throughput,
             has_nsp: bool, skipped_total: int, env: training.Distributed) -> dict[str, Any]:
    means = training.window_means(window)
    row: dict[str, Any] = {"step": step, "loss": means["loss"], "mlm_loss": means["mlm"],
                           "mlm_accuracy": means["mlm_correct"]}
    if has_nsp:
        row.update({"nsp_loss": means["nsp"], "nsp_accuracy": means["nsp_correct"]})
    row.update({"lr": lr, "grad_norm": means["grad_norm"], "tokens_per_second": speed.rate(env),
                "elapsed": speed.elapsed(), "skipped_steps": skipped_total})
    return row


def _save(r: _Run, folder: Path, overwrite: bool = False) -> None:
    rng = training_state.rng_state(r.env)  # every rank's generators, gathered on every rank
    if r.env.is_main:
        state = {**r.progress.record(), "dropout": r.dropout}
        save_model(r.model, folder, r.tokenizer, overwrite=overwrite,
                   extra=lambda tmp: training_state.write_training_state(tmp, r.optimizer, r.scaler, state, rng))
    training.barrier(r.env)


def _can_compile(device: torch.device) -> bool:
    """--compile's default: on CUDA, where torch ships Triton (not on Windows builds, say)."""
    return device.type == "cuda" and importlib.util.find_spec("triton") is not None


def _warn_many_workers(workers: int) -> None:
    """More loader workers than cores only slow a run; said once, naming the flag (`_Loader`)."""
    cores = usable_cores()
    if workers > cores:
        logger.warning("warning: --num-workers %d is more than the %d CPU core%s this process may use: the loader "
                       "workers compete for %s with training and each other, which slows the run; give at most %d",
                       workers, cores, "" if cores == 1 else "s", "it" if cores == 1 else "them", cores)


class _Loader(torch.utils.data.DataLoader):
    def check_worker_number_rationality(self) -> None:
        """torch's check warned twice (loader and iterator), 300 characters naming no flag: `_warn_many_workers`
        says it once instead."""


def _loader(dataset: StepBatches, cfg: PretrainConfig, env: training.Distributed) -> torch.utils.data.DataLoader:
    # Its own generator: drawing worker seeds from the global RNG would shift dropout after a resume.
    # Workers ignore SIGINT/SIGTERM: a signal to the whole process group is the main process's to handle.
    return _Loader(dataset, batch_size=None, shuffle=False, num_workers=cfg.num_workers,
                   pin_memory=env.device.type == "cuda", generator=torch.Generator(),
                   prefetch_factor=4 if cfg.num_workers else None,
                   worker_init_fn=stop_signals.leave_stop_signals_to_the_main_process)


