"""The model folders inside a run folder (pretrain's final/ and step-*/, a multi-seed finetune's seed-*/), for
the flags that take a model or a tokenizer and are given the run instead."""

from __future__ import annotations

from pathlib import Path

from bertctl.errors import BertctlError
from bertctl.files import read_json_object


def run_folder_hint(folder: Path) -> str | None:
    """Where the model of a pretrain or multi-seed finetune run folder is."""
    if (folder / "run.json").is_file():
        saved = sorted(p.name for p in folder.glob("step-*") if (p / "config.json").is_file())
        models = [name for name in ("final", *saved[-1:]) if (folder / name / "config.json").is_file()]
        if models:
            return f"it is a run folder: give {' or '.join(str(folder / name) for name in models)}"
        if _is_pretrain_run(folder / "run.json"):
            return ("it is a run folder with no checkpoint yet: it saves step-N/ every --save-every steps and final/ "
                    "at the end")
    seeds = sorted(p.name for p in folder.glob("seed-*") if (p / "config.json").is_file())
    if seeds:
        best = best_seed_folder(folder)
        chosen = f"{best} (the best seed)" if best is not None else f"one, e.g. {folder / seeds[0]}"
        return f"it holds one model per seed: give {chosen}"
    return None


def _is_pretrain_run(record: Path) -> bool:
    """Whether run.json is pretrain's (it records the corpus): a fine-tuning run's work folder and seed folders
    hold one too, but save no final/, and a finished seed's model is its done/."""
    try:
        return "corpus_manifest" in read_json_object(record)
    except (BertctlError, OSError):  # a damaged record: no hint rather than another error
        return False


def best_seed_folder(folder: Path) -> Path | None:
    """The best seed's model folder that a multi-seed fine-tuning run's results.json names, if any."""
    if not (folder / "results.json").is_file():
        return None
    best = read_json_object(folder / "results.json").get("best_model")
    return folder / best if isinstance(best, str) and best and (folder / best / "config.json").is_file() else None
