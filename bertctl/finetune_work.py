"""Where a fine-tuning run lives until it is complete, and how it becomes OUT.

OUT must appear only complete, and a stopped run must be able to go on (`--resume`), so a run of `--out OUT`
works in a hidden folder beside it, on the same file system:

    .OUT.work/
      run.json              the settings a resume must repeat
      seed-N/               one seed (`glue all`: <task>/seed-N/)
        run.json metrics.jsonl tensorboard/   the seed's record and logs
        step-SSSSSS/        its newest checkpoint: a model folder plus the training state
        best-EEE/           the best dev epoch so far, on disk so a resume keeps it
        done/               the finished seed: the model folder OUT gets, with its logs and eval_results.json

When every seed is done, OUT is assembled from the done/ folders in a temporary folder beside it, put in place
by one rename, and the work folder removed. A failed run leaves the work folder only when it holds something to
resume (a checkpoint or a finished seed).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from bertctl import run_metrics, training, training_state
from bertctl.config import FinetuneConfig
from bertctl.config_records import config_to_dict, refuse_changed_settings
from bertctl.errors import UsageError, say
from bertctl.files import (
    OutAppeared,
    building_folder,
    check_new_out,
    check_out,
    make_folder,
    read_json_object,
    refuse_inputs_inside,
    write_json_atomic,
    write_text_atomic,
)
from bertctl.results_summary import scores_from_json, seeds_markdown

# settings a --resume may change (gradient_checkpointing changes the memory a step takes, not its numbers)
RESUMABLE_CHANGES = ("out", "resume", "overwrite", "save_every", "device", "log_every", "max_bad_steps",
                     "gradient_checkpointing")
LOG_FILES = ("run.json", "metrics.jsonl", "tensorboard")  # a seed's logs, copied into its model folder


# --- the run: checked, opened, published -------------------------------------------------------------

def check_work(cfg: FinetuneConfig, env: training.Distributed, reads: Iterable[Path] = ()) -> tuple[Path, Path]:
    """OUT and its work folder, after refusing what cannot go on: an existing OUT, an OUT that is or holds
    something the run reads (`reads`: the folders the data comes from, besides the flags' files), an unfinished
    run without --resume or --overwrite, a resume with other settings. Read-only, and every rank has decided
    before any rank writes."""
    # An OUT that may never be replaced is refused before "pass --overwrite" could be suggested for it.
    given = check_out(cfg.out)
    refuse_inputs_inside(given, [cfg.model, cfg.train, cfg.validation, cfg.data, *reads])
    work = given.parent / f".{given.name}.work"
    nothing_to_resume = cfg.resume and not cfg.overwrite and not work.exists()
    out = check_new_out(cfg.out, overwrite=cfg.overwrite or nothing_to_resume)  # replaced only at the end
    if nothing_to_resume and out.exists():  # "pass --overwrite to replace it" alone reads as the way to go on
        raise UsageError(f"--resume: --out {out} already exists and holds no unfinished run (it finished, or is "
                         "another folder); pass --overwrite instead of --resume to replace it, or choose another "
                         "--out")
    saved = work / "run.json"
    if cfg.resume and saved.exists():
        started = read_json_object(saved, needs=("config",))
        compared = [name for name in started["config"] if name not in RESUMABLE_CHANGES]
        refuse_changed_settings(cfg, started["config"], compared, work, "drop --resume and pass --overwrite to "
                                "start again", started_in=started.get("cwd"))
    elif cfg.resume and env.is_main:
        say(f"--resume: {out} has no unfinished run; starting from the beginning")
    elif not cfg.resume and work.exists() and not cfg.overwrite:
        raise UsageError(f"{work} holds an unfinished run of --out {out}; pass --resume to continue it or "
                         "--overwrite to start again")
    # also the barrier before anyone writes
    training.refuse_unshared_out(out, _resumable_state(work) if cfg.resume else b"",
                                 f"another unfinished run in {work}", env)
    return out, work


def _resumable_state(work: Path) -> bytes:
    """What a resume would continue from in `work`: its checkpoints' and finished seeds' files, and the trainer
    states (another run's checkpoint of the same name has other losses and times in them)."""
    found = sorted([*work.rglob(training_state.TRAINER_STATE), *work.rglob("eval_results.json"),
                    *work.glob("run.json")])
    states = b"".join(training_state.saved_state(path.parent) for path in found
                      if path.name == training_state.TRAINER_STATE)
    return "\n".join(str(path.relative_to(work)) for path in found).encode() + states


def open_work(cfg: FinetuneConfig, work: Path, env: training.Distributed) -> None:
    """Create the work folder (replacing a stale one) and record the settings a resume must repeat."""
    if env.is_main and not (cfg.resume and (work / "run.json").is_file()):
        shutil.rmtree(work, ignore_errors=True)
        make_folder(work)  # one line for an --out that cannot be made (`/proc/x`), not an OSError
        write_json_atomic(work / "run.json", {"config": config_to_dict(cfg), "cwd": os.getcwd()})
    training.barrier(env)


def discard_unless_resumable(work: Path) -> None:
    """After a failure: a checkpoint or a finished seed is worth keeping; a run that saved nothing is not."""
    if not (work.is_dir() and (any(work.rglob(training_state.TRAINER_STATE)) or any(work.rglob("done")))):
        shutil.rmtree(work, ignore_errors=True)


def publish(work: Path, out: Path, fill: Callable[[Path], None], overwrite: bool) -> None:
    """Assemble OUT in a temporary folder beside it and rename it into place, the work folder moved aside just
    before in the same step, then removed: a kill never leaves it beside the complete OUT as an unfinished run
    (building_folder). An OUT made meanwhile without --overwrite is kept, and so is the work folder, whose
    finished seeds a resume publishes without training them again."""
    try:
        with building_folder(out, retire=work, overwrite=overwrite) as staging:
            fill(staging)
    except OutAppeared:
        raise OutAppeared(out, f"pass --resume --overwrite to put this run's models, kept in {work}, in its "
                               "place") from None


def collect(summary: dict[str, Any], work: Path, dest: Path) -> None:
    """Put a task's finished seeds in `dest`: one seed's model folder itself, or seed-N/ folders plus
    results.json and results.md. Linked, not moved: done/ stays whole until OUT is in place, so a kill before
    that leaves a resume every finished seed."""
    seeds = summary["seeds"]
    if len(seeds) == 1:
        _link_tree(seed_folder(work, seeds[0]) / "done", dest)
        return
    for seed in seeds:
        _link_tree(seed_folder(work, seed) / "done", dest / f"seed-{seed}")
    write_json_atomic(dest / "results.json", summary)
    write_text_atomic(dest / "results.md", seeds_markdown(summary))


def _link_tree(folder: Path, dest: Path) -> None:
    """`folder`'s files in `dest` as hard links (beside OUT, so on its file system), copies where links fail."""
    shutil.copytree(folder, dest, copy_function=_link_or_copy, dirs_exist_ok=True)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # a file system without hard links
        shutil.copy2(src, dst)


# --- one seed: seed-N/ -------------------------------------------------------------------------------

def seed_folder(work: Path, seed: int) -> Path:
    return work / f"seed-{seed}"


def finished_results(seed_work: Path) -> dict[str, Any] | None:
    """The eval_results of a seed whose model folder is complete (so a resume does not train it again), its
    null scores NaN again."""
    done = seed_work / "done" / "eval_results.json"
    return scores_from_json(read_json_object(done)) if done.is_file() else None


def open_seed(seed_work: Path, checkpoint: Path | None, step: int, record: dict[str, Any]) -> float:
    """A seed without a checkpoint starts over in an empty folder; a resumed one drops the metrics rows
    logged after its checkpoint (they are logged again). Either way run.json records this process's settings
    (world size, device, resumable flags), once a damaged metrics.jsonl has been refused with the folder as it was.
    Returns the seconds it had already trained."""
    kept = None if checkpoint is None else run_metrics.kept_metrics(seed_work, step)
    if checkpoint is None:
        shutil.rmtree(seed_work, ignore_errors=True)
        seed_work.mkdir(parents=True)
    write_json_atomic(seed_work / "run.json", record)
    return run_metrics.trim_metrics(seed_work, kept)


def refuse_other_examples(seed_work: Path, features_sha256: str, data: str, task: str) -> None:
    """A resume over edited data files would go on from the checkpoint with other examples, neither the run it
    continues nor one run.json can describe. `data`: the flags the examples come from."""
    saved = seed_work / "run.json"
    started = read_json_object(saved).get("features_sha256") if saved.is_file() else None
    if started not in (None, features_sha256):  # None: begun before run.json recorded it
        raise UsageError(f"{data}: {task}'s examples are not those the run in {seed_work} began with (their "
                         "encoded train and dev features differ); restore the files, or drop --resume and pass "
                         "--overwrite to start again")


def best_folder(seed_work: Path, epoch: int) -> Path:
    return seed_work / f"best-{epoch:03d}"


def prune_best(seed_work: Path, keep: set[int]) -> None:
    """Remove the best-epoch folders of every epoch not in `keep`."""
    for folder in seed_work.glob("best-*"):
        if int(folder.name.split("-")[1]) not in keep:
            shutil.rmtree(folder, ignore_errors=True)


def drop_checkpoints(seed_work: Path) -> None:
    """A finished seed needs neither its checkpoints nor its best-epoch folders."""
    for folder in [*seed_work.glob("step-*"), *seed_work.glob("best-*")]:
        shutil.rmtree(folder, ignore_errors=True)


def add_logs_and_results(tmp: Path, seed_work: Path, results: dict[str, Any]) -> None:
    """Copy the seed's logs next to its model and add eval_results.json (inside save_model's temp folder, NaN
    scores as null); copies, so the work folder stays whole until the model folder is."""
    for name in LOG_FILES:
        if (seed_work / name).is_dir():
            shutil.copytree(seed_work / name, tmp / name)
        elif (seed_work / name).is_file():
            shutil.copy2(seed_work / name, tmp / name)
    write_json_atomic(tmp / "eval_results.json", results)


# --- every rank --------------------------------------------------------------------------------------

def say_data(training_data: str, validation: int | None, unit: str, env: training.Distributed) -> None:
    """A task's opening line (rank 0): its training data, then its validation examples, or that without them the
    last epoch is the one kept."""
    if env.is_main:
        say(training_data + (f", {validation} validation {unit}" if validation is not None else
                             ", no --validation: the last epoch is kept"))
