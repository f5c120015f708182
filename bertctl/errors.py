"""The error types library code raises; only the CLI turns them into one line and an exit code. `say` gives a
status line the form every line bertctl writes on stderr takes: `bertctl: ...` (errors: `bertctl: error: ...`);
`warnings_held` keeps a file's warnings to its first read."""

import contextlib
import logging
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any


class BertctlError(Exception):
    """A failure the user can act on (exit code 1): the message names the file or flag and what to do."""

    exit_code = 1


class UsageError(BertctlError):
    """A mistake in how bertctl was called: a bad flag value, a missing or wrong input, an input file that is
    broken (empty, truncated, malformed: config.json, weights, run.json, a corpus, a table) (exit code 2)."""

    exit_code = 2


class Terminated(KeyboardInterrupt):
    """SIGTERM (kill, `timeout`, systemd, a batch scheduler) as an exception, so that a command stops the way
    Ctrl-C stops it: temp outputs removed, workers shut down, one line and exit code 143, rather than dying at
    once with a hidden half-written folder beside OUT and multiprocessing's leaked-semaphore warnings."""


def quoted(value: Any, show: Callable[[Any], str] = repr) -> str:
    """A wrong argument as a one-line message quotes it: `show(value)`, or its type where its repr spans lines (a
    model, a tensor or a DataFrame given for a name or a number: cut short, it would still be no name)."""
    return f"a {type(value).__name__}" if "\n" in repr(value) else show(value)


def say(message: str) -> None:
    """A status line on stderr (what a run does: fine-tuning X, resuming, preparing the quick start), above any
    progress bar: `bertctl: MESSAGE`, as the CLI says errors and warnings."""
    from tqdm import tqdm

    tqdm.write(f"bertctl: {message}", file=sys.stderr)


@contextlib.contextmanager
def warnings_held(logger: str) -> Iterator[None]:
    """The warnings this thread logs on `logger` itself (not on its children) left out inside the block, errors
    still said: for a file read again, whose warnings its first read gave. A filter of the block's own, not the
    logger's level: two threads' blocks that overlap could leave the level at ERROR for good, and
    lose the other threads' warnings meanwhile."""
    held = logging.getLogger(logger)
    thread = threading.get_ident()

    def said(record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR or threading.get_ident() != thread

    held.addFilter(said)
    try:
        yield
    finally:
        held.removeFilter(said)
