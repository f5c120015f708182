"""What a resumable run saves besides its model folder, and where its checkpoints live.

Optimizer moments and every RNG (python, numpy, torch per rank on the CPU and its GPU) in safetensors, the
step, data position and scalars in JSON: no pickle anywhere. Checkpoints are `RUN/step-NNNNNN/` folders that
are complete once renamed into place, so the newest complete one is what `--resume` continues from.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from bertctl.errors import UsageError
from bertctl.files import read_json_object, remove_stale_temps, remove_stale_temps_of
from bertctl.training import Distributed

TRAINING_STATE = "training_state.safetensors"
TRAINER_STATE = "trainer_state.json"
log = logging.getLogger(__name__)


def saved_state(checkpoint: Path) -> bytes:
    """A checkpoint's trainer state as saved (b"" if unreadable: the resume's own checks say why): another run's
    `step-000004` has other losses and times in it, so ranks can tell whether they resume from the same one."""
    try:
        return (checkpoint / TRAINER_STATE).read_bytes()
    except OSError:
        return b""


# --- randomness and training state -------------------------------------------------------------------

def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state(env: Distributed | None = None) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """Every RNG as tensors (safetensors) and JSON (python's and numpy's are tuples of ints).

    torch's generators are kept per rank (`rng.torch.rank{r}`, `rng.cuda.rank{r}`), since each rank draws its own
    dropout masks; only this process's own GPU is read, so no rank opens a CUDA context on another's GPU.
    With several ranks this is a collective: every rank calls it, and rank 0 writes what it returns.
    """
    own = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        own["cuda"] = torch.cuda.get_rng_state(torch.cuda.current_device())
    tensors = {}
    for name, state in own.items():
        for rank, value in enumerate(_gather(state, env)):
            tensors[f"rng.{name}.rank{rank}"] = value
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    py_version, py_state, py_gauss = random.getstate()
    info = {"python": [py_version, list(py_state), py_gauss],
            "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(gauss)]}
    return tensors, info


def _gather(state: Tensor, env: Distributed | None) -> list[Tensor]:
    """Every rank's copy of a CPU tensor, over the host-side group."""
    if env is None or env.world_size == 1:
        return [state]
    states = [torch.empty_like(state) for _ in range(env.world_size)]
    dist.all_gather(states, state, group=env.control)
    return states


def set_rng_state(tensors: dict[str, Tensor], info: dict[str, Any], rank: int = 0) -> None:
    """Restore this rank's generators; a rank the checkpoint did not have gets a state derived from rank 0's
    and its rank (a run resumed on more processes), never a copy of another rank's."""
    saved = tensors.get(f"rng.torch.rank{rank}")
    if saved is None:
        derived = torch.Generator()
        derived.set_state(tensors.get("rng.torch.rank0", tensors.get("rng.torch")))
        seed = int(torch.randint(0, 2**62, (1,), generator=derived)) + rank
        torch.manual_seed(seed)
    else:
        torch.set_rng_state(saved)
        cuda = tensors.get(f"rng.cuda.rank{rank}")
        # Only where this run uses its GPU (it moved the model there first): a GPU run resumed with --device cpu
        # on a GPU machine must not open a CUDA context (on GPU 0, for every rank) just to seed it.
        if cuda is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.set_rng_state(cuda, torch.cuda.current_device())
    version, state, gauss = info["python"]
    random.setstate((version, tuple(state), gauss))
    kind, keys, pos, has_gauss, cached = info["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))


def optimizer_state(optimizer: torch.optim.Optimizer) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """Split the optimizer's state_dict into tensors (for safetensors) and JSON-safe hyperparameters."""
    state = optimizer.state_dict()
    tensors, scalars = {}, {}
    for index, values in state["state"].items():
        for name, value in values.items():
            if isinstance(value, Tensor):
                tensors[f"optimizer.{index}.{name}"] = value.detach().cpu().contiguous()
            else:
                scalars[f"{index}.{name}"] = value
    groups = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in group.items()}
              for group in state["param_groups"]]
    return tensors, {"param_groups": groups, "scalars": scalars}


def load_optimizer_state(optimizer: torch.optim.Optimizer, tensors: dict[str, Tensor], info: dict[str, Any]) -> None:
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        if key.startswith("optimizer."):
            _, index, name = key.split(".", 2)
            state.setdefault(int(index), {})[name] = value
    for key, value in info["scalars"].items():
        index, name = key.split(".", 1)
        state.setdefault(int(index), {})[name] = value
    groups = [{k: (tuple(v) if k == "betas" else v) for k, v in group.items()} for group in info["param_groups"]]
    optimizer.load_state_dict({"state": state, "param_groups": groups})


def write_training_state(folder: Path, optimizer: torch.optim.Optimizer, scaler: Any,
                         trainer: dict[str, Any], rng: tuple[dict[str, Tensor], dict[str, Any]] | None = None) -> None:
    """Optimizer moments and RNG states in safetensors; step, data position and scalars in JSON.

    `rng` is every rank's `rng_state(env)` under torchrun; by default this process's own.
    """
    from safetensors.torch import save_file

    opt_tensors, opt_info = optimizer_state(optimizer)
    rng_tensors, rng_info = rng if rng is not None else rng_state()
    save_file({**opt_tensors, **rng_tensors}, str(folder / TRAINING_STATE))
    record = {**trainer, "optimizer": opt_info, "rng": rng_info,
              "grad_scaler": scaler.state_dict() if scaler is not None and scaler.is_enabled() else None}
    (folder / TRAINER_STATE).write_text(json.dumps(record) + "\n", encoding="utf-8")


def read_training_state(folder: Path, optimizer: torch.optim.Optimizer, scaler: Any, rank: int = 0) -> dict[str, Any]:
    """Restore optimizer, scaler and this rank's RNGs from `folder`; returns the trainer record (step, data
    position)."""
    from safetensors.torch import load_file

    try:
        tensors = load_file(str(folder / TRAINING_STATE))
        record = json.loads((folder / TRAINER_STATE).read_text(encoding="utf-8"))
    except Exception as exc:
        raise UsageError(f"cannot resume from {folder}: {str(exc).splitlines()[0]}") from None
    try:
        load_optimizer_state(optimizer, tensors, record["optimizer"])  # torch moves the moments to their parameters
    except ValueError as exc:  # its parameter groups are not this optimizer's (another bertctl version's LAMB)
        raise UsageError(f"cannot resume from {folder}: its optimizer state does not fit this optimizer "
                           f"({str(exc).splitlines()[0]}); start a new run with another --out") from None
    set_rng_state(tensors, record["rng"], rank)
    if scaler is not None and record.get("grad_scaler"):
        scaler.load_state_dict(record["grad_scaler"])
    return record


# --- checkpoints in a run folder ---------------------------------------------------------------------

def step_folder(run: Path, step: int) -> Path:
    return run / f"step-{step:06d}"


def complete_checkpoints(run: Path) -> list[Path]:
    """Finished step folders, oldest first (temp folders of an interrupted save never match)."""
    found = [p for p in run.glob("step-*") if p.is_dir() and _has_trainer_state(p)]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def _has_trainer_state(folder: Path) -> bool:
    """Whether `folder` is a complete checkpoint. Something else by its trainer state's name (a folder) is refused
    as a damaged trainer_state.json is: skipped, a resume went on from an older checkpoint, or from step 0."""
    state = folder / TRAINER_STATE
    if state.exists() and not state.is_file():
        raise UsageError(f"{state} is damaged (not a file); restore or delete it")
    return state.exists()


def latest_checkpoint(run: Path) -> Path | None:
    final = run / "final"
    candidates = complete_checkpoints(run)
    if final.is_dir() and _has_trainer_state(final):
        candidates.append(final)
    if not candidates:
        return None
    return max(candidates, key=checkpoint_step)


def checkpoint_step(folder: Path) -> int:
    """The optimizer step a complete checkpoint was saved at, from its trainer_state.json: final/ has no step in
    its name."""
    return int(read_json_object(folder / TRAINER_STATE, needs=("step",))["step"])


def remove_interrupted_saves(run: Path) -> None:
    """A save killed mid-write (kill -9, power loss) leaves its hidden temp folder, or the folder a replaced
    final/ was moved aside to: never read, but gigabytes each for a large model (`files.remove_stale_temps`).
    A step folder past the newest checkpoint that lacks its trainer_state.json is no checkpoint either, and
    goes too: this run saves that step again, and that save refuses a folder already there (pretrain has no
    --overwrite)."""
    remove_stale_temps_of(run, "step-*")
    remove_stale_temps(run / "final")
    latest = latest_checkpoint(run)
    newest = checkpoint_step(latest) if latest is not None else -1
    for folder in run.glob("step-*"):
        number = folder.name.removeprefix("step-")
        if number.isdigit() and int(number) > newest and folder.is_dir() and not (folder / TRAINER_STATE).is_file():
            log.warning("warning: %s has no %s, so it is no checkpoint; removed, this run saves that step again",
                        folder, TRAINER_STATE)
            shutil.rmtree(folder, ignore_errors=True)


def prune_checkpoints(run: Path, keep: int) -> None:
    """Keep the newest `keep` step checkpoints; final/ is not one, so it is never removed."""
    for old in complete_checkpoints(run)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
