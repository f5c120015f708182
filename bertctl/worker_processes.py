"""Worker processes started from any `__main__`: a script, `python -c`, a script piped to `python -`, a notebook.

A spawned worker (or forkserver) first runs the caller's `__main__` again, from `__main__.__file__`, so that what it
defines can be unpickled there. bertctl's workers need nothing from it; a `__main__` without a file (`python -c`, a
notebook, the interactive prompt) is not run again at all. One whose file cannot be read (`<stdin>` for
`python - < script.py`, a script deleted since it started) would make every worker fail as it starts.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from types import ModuleType

__all__ = ["refuse_script_rerun", "unreadable_main_skipped"]


def refuse_script_rerun(function: str) -> None:
    """A command called while a worker runs the caller's script again (a script without the `__main__` guard) ends
    that worker with one line, before it redoes the caller's work; the caller then reports its worker died."""
    process = sys.modules.get("multiprocessing.process")  # a worker has it; a command line need not import it
    if process is not None and getattr(process.current_process(), "_inheriting", False):  # what spawn checks
        raise SystemExit(f"bertctl: error: {function} called by a worker process while it runs your script again "
                         "(as spawned workers do); put the call under `if __name__ == \"__main__\":`")


@contextlib.contextmanager
def unreadable_main_skipped() -> Iterator[None]:
    """Workers started in the block do not run a `__main__` whose file cannot be read: it has no `__file__` while
    the block lasts, as under `python -c`. multiprocessing reads it as each worker starts."""
    main = sys.modules.get("__main__")
    path = _unreadable_file(main)
    if main is None or path is None:
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path


def _unreadable_file(main: ModuleType | None) -> str | None:
    """`__main__.__file__` where spawn would run that file again and could not read it; else None. A `__main__`
    with a module name (`python -m`, a folder or zip) is imported by that name instead."""
    if main is None or getattr(getattr(main, "__spec__", None), "name", None) is not None:
        return None
    path = getattr(main, "__file__", None)
    if not isinstance(path, str):
        return None
    from multiprocessing import process

    full = os.path.join(getattr(process, "ORIGINAL_DIR", None) or "", path)  # as spawn joins it
    return None if os.path.isfile(full) and os.access(full, os.R_OK) else path
