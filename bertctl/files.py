"""Atomic writes: a file or folder appears complete or not at all, with the user's usual permissions.

Every output of bertctl (model folders, tokenizers, corpora, run files, submission files) goes through
here: write beside the target under a hidden temporary name, then rename.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text_atomic(path: Path | str, text: str) -> None:
    """Write through a temp file and rename, so a reader never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600 files
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path | str, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2) + "\n")


def temp_folder_beside(target: Path | str, tag: str = "tmp") -> Path:
    """A hidden, empty folder next to `target` (same file system, so the final rename is atomic)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{target.name}.{tag}-", dir=target.parent))


def replace_folder(tmp: Path | str, target: Path | str) -> None:
    """Rename the finished tmp folder onto target; an existing target is moved aside first, removed after.

    Everything inside gets the usual permissions first: mkdtemp makes 0700 folders, and some writers
    (safetensors, mkstemp) make 0600 files.
    """
    tmp, target = Path(tmp), Path(target)
    mask = _umask()
    for folder, _, names in os.walk(tmp):
        os.chmod(folder, 0o777 & ~mask)
        for name in names:
            os.chmod(os.path.join(folder, name), 0o666 & ~mask)
    old = None
    if target.exists() or target.is_symlink():
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        os.replace(target, old)
    os.replace(tmp, target)
    if old is not None:
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink(missing_ok=True)


@contextmanager
def building_folder(target: Path | str, tag: str = "tmp") -> Iterator[Path]:
    """A temp folder beside `target` to fill; it becomes `target` when the block ends, and is removed if the
    block raises, so `target` is only ever absent, the old folder, or the complete new one."""
    tmp = temp_folder_beside(target, tag)
    try:
        yield tmp
        replace_folder(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
