"""One bertctl at a time per output: an advisory lock on a hidden file beside OUT, so that a job submitted twice
is refused before it touches the first one's files."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from bertctl.errors import BertctlError
from bertctl.files import failures_named_by, make_folder, out_location

try:
    import fcntl
except ImportError:  # Windows: no flock; runs there go unlocked
    fcntl = None  # type: ignore[assignment]


def lock_file(out: Path | str) -> Path:
    """The lock file of OUT: hidden beside it, so that it is never part of OUT (a published folder, a run's
    checkpoint listing), and an --overwrite or a final rename onto OUT leaves it alone. `runs/x` and `./runs/x`
    name the same one."""
    at = out_location(out)
    return at.with_name(f".{at.name}.lock")


@contextmanager
def output_lock(out: Path | str) -> Iterator[None]:
    """OUT for this process alone while the block runs: a second bertctl writing the same OUT (a job submitted
    twice) is refused before it reads or writes anything, rather than pruning the first one's checkpoints and
    mixing their files. An advisory flock, so the OS releases it when the process dies (kill -9 leaves no stale
    lock; its forked children drop their copy, `_drop_inherited_locks`). Under torchrun rank 0 alone takes it
    (training.rank0_output_lock). Where the OS or the file system has no flock, the block runs unlocked. Folders
    made for the lock file go again if the block left them empty (a refused command writes nothing). A write that
    fails in the block is said as OUT's (`failures_named_by`): the commands that lock OUT keep work folders for it."""
    path = lock_file(out)
    made = [folder for folder in (path.parent, *path.parent.parents) if not folder.exists()]
    fd = _take_lock(path, out) if fcntl is not None else None
    if fd is not None:
        _HELD_LOCKS.add(fd)
    try:
        with failures_named_by(out):
            yield
    finally:
        if fd is not None:
            with suppress(OSError):  # removed while still locked: one that opened it meanwhile locks again
                os.unlink(path)
            _HELD_LOCKS.discard(fd)
            os.close(fd)
            for folder in made:
                with suppress(OSError):
                    folder.rmdir()


_HELD_LOCKS: set[int] = set()  # the descriptors of this process's output_lock blocks


def _drop_inherited_locks() -> None:
    """In a forked child (pretrain's loader workers): close the lock descriptors it inherited. A flock belongs to
    the open file, which the child's copy keeps open: after a kill -9 of the run OUT would stay locked until
    its workers noticed and exited (seconds), refusing a --resume started at once with the dead process's name.
    Children that exec (subprocess, spawn) inherit no descriptor of ours."""
    for fd in _HELD_LOCKS:
        with suppress(OSError):
            os.close(fd)
    _HELD_LOCKS.clear()


if hasattr(os, "register_at_fork"):  # not on Windows, which has neither fork nor flock
    os.register_at_fork(after_in_child=_drop_inherited_locks)


def _take_lock(path: Path, out: Path | str) -> int | None:
    """The locked lock file's descriptor, with this process's id and machine written in it for the refusal of
    the next one; None where it cannot be locked at all (a read-only folder, a file system without locks)."""
    make_folder(path.parent)
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").split()
            os.close(fd)
            who = f" (pid {holder[0]} on {holder[1]})" if len(holder) == 2 else ""
            raise BertctlError(f"{out} is in use by another bertctl{who}; wait for it to finish or choose another "
                               "--out") from None
        except OSError:
            os.close(fd)
            return None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except OSError:
            same = False
        if same:  # not the file of a holder that removed it as it let go
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
            return fd
        os.close(fd)
