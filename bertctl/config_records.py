"""What a run's record (run.json, provenance.json, a manifest) keeps of its config, and how a resume's settings
are compared with it; torch-free like the configs themselves."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from pathlib import Path
from typing import Any

from bertctl.config_types import DATA_NAMES, LOCAL_NAMES, flag_name
from bertctl.errors import UsageError
from bertctl.hub import written_like_path


def refuse_changed_settings(cfg: Any, saved: dict[str, Any], compared: Collection[str], run: Path | str,
                            restart: str, started_in: str | None = None) -> None:
    """A resumed run must train as the interrupted one did, or its checkpoints mean nothing: the `compared`
    fields of `cfg` must equal the run's saved config (its run.json)."""
    said = changed_settings(cfg, saved, compared, started_in)
    if said:
        raise UsageError(f"--resume: the run in {run} was started with {said}; resume it with the same "
                         f"settings, or {restart}")


def changed_settings(cfg: Any, saved: dict[str, Any], compared: Collection[str], started_in: str | None = None
                     ) -> str:
    """The `compared` fields of `cfg` that differ from a run's saved config, as `--lr 0.001 (now 0.0001), ...`
    ("" when none). A folder named otherwise is the same folder (`./x`, `x/`, `/abs/x`, or a relative name
    given from `started_in`, where the run started); a setting the record lacks (an older run's) is not
    compared."""
    now = config_to_dict(cfg)

    def same(name: str) -> bool:
        old, new = saved[name], now[name]
        if not (isinstance(old, str) and isinstance(new, str)):
            return old == new
        before = Path(old).expanduser()
        if started_in is not None and not before.is_absolute():
            before = Path(started_in) / before
        if before.exists():  # a folder or file here: the same one, however named
            return before.resolve() == Path(new).expanduser().resolve()
        return old == new  # a hub id, a choice, or a path no longer there

    def shown(value: Any) -> Any:
        return "not given" if value is None else value

    changed = [name for name in compared if name in saved and not same(name)]
    return ", ".join(f"{flag_name(k)} {shown(saved[k])} (now {shown(now[k])})" for k in changed)


def config_to_dict(obj: Any) -> dict[str, Any]:
    """A JSON-ready view of a (nested) config dataclass. A local path in a field that may name a hub id or
    dataset (`model`, `init_from`, `tokenizer`; `train`, `validation`, `data`, `inputs`) keeps a `./` when its
    name reads like one (`runs/final`, `tok`, `corpus/novels`): a Path has lost the `./` given, a data name may
    never have had one, and the record read back from another working folder would otherwise fetch (or take
    from the cache) the hub repository of that name instead of saying the path is not there."""
    def plain(value: Any, name: str = "") -> Any:
        if name in _RECORDED_PATHS and isinstance(value, (str, Path)):
            return recorded_path(value)
        if isinstance(value, Path):
            return str(value)
        if isinstance(value, (list, tuple)):
            return [plain(v, name) for v in value]  # `inputs`: each one a path or a dataset
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    return {k: plain(v, k) for k, v in dataclasses.asdict(obj).items()}


_RECORDED_PATHS = {*LOCAL_NAMES, *DATA_NAMES, "inputs"}  # fields whose local paths config_to_dict marks as paths


def recorded_path(value: str | Path) -> str:
    """A path, hub id or dataset name as records keep it: a relative path that exists here but whose spelling does
    not say it is one (`corpus/novels`) with a `./`, so that it is never read back as a hub name."""
    if Path(value).exists() and not Path(value).is_absolute() and not written_like_path(str(value)):
        return f"./{value}"
    return str(value)
