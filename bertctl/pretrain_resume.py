"""What a pre-training run folder records of the run so far, and the checks `pretrain --resume` passes against it.

A resume continues from the newest checkpoint in the run folder; its run.json says how the run was started and
how each earlier part trained. A resume must repeat the settings that give the checkpoint's optimizer state and
data position their meaning (refused otherwise, before anything is built), may change the others (a warning
names each one it changes unasked); the run.json it writes (`pretrain`) keeps how each earlier part trained.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from bertctl import training, training_state
from bertctl.config import PretrainConfig, model_config
from bertctl.config_records import changed_settings, config_to_dict, refuse_changed_settings
from bertctl.errors import UsageError, say
from bertctl.files import read_json_object

logger = logging.getLogger("bertctl.pretrain")  # the recipe's logger: a filter set on it holds every warning it says

# Settings that decide what a checkpoint's optimizer state and data position mean; a resume may change how long
# and how fast the run trains and how it logs and saves. The model is the checkpoint's (--init-from no longer
# matters, --tokenizer is checked against the corpus anyway); the corpus is compared by its manifest.
FIXED_ON_RESUME = ("optimizer", "weight_decay", "adam_beta1", "adam_beta2", "adam_eps", "seed")
# Settings a resume may change, but which flags left off (so back at their defaults) change unasked: each one
# that differs from run.json gets a warning line. (--gradient-checkpointing changes no number, only the memory a
# step takes: a resume without it may no longer fit where the run did.)
# (--dropout left off keeps the checkpoint's: the model is the checkpoint's, config included.)
RESUMED_AS_GIVEN = ("lr", "warmup_steps", "warmup_fraction", "schedule", "batch_size", "micro_batch_size", "clip",
                    "precision", "gradient_checkpointing")
_SHAPE = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
_PART = ("config", "world_size", "device", "threads", "precision", "compile",
         "warmup_steps")  # what trained a part's steps


def resume_point(cfg: PretrainConfig, run: Path, env: training.Distributed) -> Path | None:
    """The checkpoint --resume continues from (None: a new run); a run folder with checkpoints needs --resume."""
    latest = training_state.latest_checkpoint(run) if run.exists() else None
    if cfg.resume:
        if latest is None and env.is_main:
            say(f"--resume: no complete checkpoint in {run} yet; starting from step 0")
        return latest
    if latest is not None:
        raise UsageError(f"--out {run} already holds checkpoints; pass --resume to continue it or choose "
                         "another --out")
    return None


def check_resumable(cfg: PretrainConfig, run: Path, checkpoint: Path) -> dict[str, Any]:
    """Before anything is built or written: the run's fixed settings and model shape (run.json), and --steps not
    below the checkpoint. Returns run.json's record, whose corpus manifest the caller compares once it is read."""
    started = read_json_object(run / "run.json") if (run / "run.json").exists() else {}
    if not isinstance(started.get("config", {}), dict):
        raise UsageError(f"{run / 'run.json'} is damaged (its config is not a JSON object); restore or delete it")
    refuse_changed_settings(cfg, started.get("config", {}), FIXED_ON_RESUME, run, "start a new run with another --out")
    recorded = started.get("config", {})
    if cfg.corpus is None and started.get("quickstart") is False:  # else the quick start would build its data
        raise UsageError(f"--resume: the run in {run} was started on --corpus {recorded.get('corpus')}; give it "
                         "again")
    renamed = cfg.model_config not in (None, recorded.get("model_config"))
    from_init = recorded.get("init_from") is not None  # it gave the shape
    try:
        wanted = model_config(cfg.model_config).to_dict() if renamed and not from_init else {}
    except UsageError:  # a config file since moved: the checkpoint holds the model anyway
        wanted = {}
    model = started.get("model", {})
    if any(key in wanted and key in model and wanted[key] != model[key] for key in _SHAPE):
        raise UsageError(f"--resume: --model-config {cfg.model_config} is not the shape of the model in {run} "
                         f"({', '.join(f'{k} {model[k]}' for k in _SHAPE)}); give the one it was started with")
    step = training_state.checkpoint_step(checkpoint)
    if cfg.steps < step:
        raise UsageError(f"--steps {cfg.steps} is below step {step} of the checkpoint {checkpoint}; give at least "
                         f"{step}")
    return record_at(started, step)


def record_at(started: dict[str, Any], step: int) -> dict[str, Any]:
    """run.json as the part that trained the checkpoint's last step left it. A resume writes run.json with its own
    settings before its first step; one that failed before it saved trained none of the checkpoint's steps, so its
    settings are not the run's (the next resume warned the run had `trained with` them, and kept its --dropout).
    Nor are those of one with --steps at the checkpoint's step, which saves final/ again: only its --dropout is
    the model's, and the checkpoint's trainer state keeps that (`recorded_config`)."""
    while started.get("earlier") and started.get("from_step", 0) >= step:
        *earlier, last = started["earlier"]
        started = {**started, **{key: last.get(key) for key in _PART}, "from_step": last["from_step"],
                   "earlier": earlier}
    return started


def recorded_config(cfg: PretrainConfig, started: dict[str, Any], saved: dict[str, Any]) -> dict[str, Any]:
    """run.json's config: a resume keeps the run's own --model-config and --init-from whatever it names (the
    model is the checkpoint's), and one without --dropout the --dropout the checkpoint was saved with (its config
    is the checkpoint's too; its trainer state `saved` says, older ones run.json), so the record given back as
    --config builds the same model."""
    given, recorded = config_to_dict(cfg), started.get("config", {})
    if "config" in started:
        given |= {key: recorded.get(key) for key in ("model_config", "init_from")}
    if cfg.dropout is None:
        given["dropout"] = saved.get("dropout", recorded.get("dropout"))
    return given


def warn_changed_on_resume(cfg: PretrainConfig, run: Path, started: dict[str, Any], resume_from: Path | None,
                           env: training.Distributed) -> None:
    """Said after every refusal, so that a refused resume says one line: the settings a resume takes as given
    now although the run trained with others, and an --init-from it no longer reads."""
    changed = changed_settings(cfg, started.get("config", {}), RESUMED_AS_GIVEN)
    if env.is_main and changed:
        logger.warning("warning: --resume: the run in %s trained with %s; a resume takes the settings given now, "
                       "so give them again to keep the run's", run, changed)
    other_init = cfg.init_from is not None and changed_settings(cfg, started.get("config", {}), ("init_from",))
    if env.is_main and resume_from is not None and other_init:
        logger.warning("warning: --resume: the run in %s started from %s; a resume goes on from its checkpoint's "
                       "weights, so --init-from is not read", run, other_init)


def earlier_parts(started: dict[str, Any], step: int) -> list[dict[str, Any]]:
    """run.json's `earlier`: how each part of the run before this one trained the steps the checkpoint holds
    (oldest first; a part from_step to to_step). A resume may change --steps, --lr, the batch, the precision ...,
    and run.json's own config is this part's, so without these the record would not say how the model was made."""
    parts = [{**part, "to_step": min(part["to_step"], step)} for part in started.get("earlier", [])
             if part["from_step"] < step]
    first = started.get("from_step", 0)  # run.json of an older bertctl: the run had no earlier resume on record
    if started and first < step:
        settings = {key: started.get(key) for key in _PART}
        if parts and _same_settings(parts[-1], settings):  # a resume that changed nothing: one part
            parts[-1]["to_step"] = step
        else:
            parts.append({"from_step": first, "to_step": step, **settings})
    return parts


def _same_settings(part: dict[str, Any], settings: dict[str, Any]) -> bool:
    """Whether two parts trained alike: --resume itself changes nothing."""
    return _without_resume(part) == _without_resume(settings)


def _without_resume(record: dict[str, Any]) -> dict[str, Any]:
    return {key: record.get(key) for key in _PART} | {"config": {**(record.get("config") or {}), "resume": None}}
