"""Stopping a training run cleanly: SIGINT/SIGTERM ask the loop to finish its step and save, and the loader's
worker processes leave those signals to the main process and end with the loop.

Shared by pretrain and every finetune command; kept apart from training.py, whose pieces make the steps.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from bertctl.errors import Terminated
from bertctl.worker_processes import unreadable_main_skipped

DUPLICATE_SIGNAL_SECONDS = 1.0  # a stop signal this soon after the first is the same request, passed on


class GracefulStop:
    """First SIGINT/SIGTERM: finish the step, save, exit. A second one: stop at once (exit code 130 or 143).

    A signal within DUPLICATE_SIGNAL_SECONDS of the first is the same request again, not a second one: SLURM
    (scancel, a time limit) and systemd signal every process of the job, and torchrun's agent, which gets it
    too, passes it on to its ranks milliseconds later; taken as a second signal, that copy would stop the ranks
    before they save.
    """

    def __init__(self) -> None:
        self.requested = False
        self._first = 0.0  # time.monotonic() of the first signal
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> GracefulStop:
        if threading.current_thread() is not threading.main_thread():  # Python's handlers are the main thread's:
            return self  # a run called from another thread (a web app's worker) gets no signal to handle
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        now = time.monotonic()
        if not self.requested:
            self.requested, self._first = True, now
        elif now - self._first >= DUPLICATE_SIGNAL_SECONDS:
            raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():  # None: set in C before Python started (an embedding app)
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


def leave_stop_signals_to_the_main_process(worker_id: int) -> None:
    """DataLoader `worker_init_fn`: the worker ignores SIGINT and SIGTERM.

    SLURM, systemd, torchrun's agent and a terminal's Ctrl-C signal the whole process group (or cgroup), so
    the loader workers get the signal too. Killed by it, a worker makes torch raise "DataLoader worker is killed
    by signal" in the main process, mid-step, before GracefulStop can save. The main process alone decides:
    it stops its workers when it is done (`loader_batches`), and they exit by themselves if it dies.
    """
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):  # blocked since `loader_batches` started it: a signal held is dropped
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)


_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


@contextlib.contextmanager
def _stop_signals_blocked() -> Iterator[None]:
    """SIGINT and SIGTERM blocked in this thread while the loader forks its workers: a worker inherits the mask,
    so a group's signal that reaches it before `worker_init_fn` ignores it (torch's own SIGTERM handler there
    kills the worker) waits instead, and is dropped. The main process gets its copy when the mask is restored."""
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextlib.contextmanager
def loader_batches(loader: Iterable[Any]) -> Iterator[Iterator[Any]]:
    """Iterate `loader` and stop its worker processes however the block ends (done, error, second signal).

    Workers that ignore SIGTERM must not outlive the loop: at interpreter exit torch no longer shuts them down,
    and multiprocessing would send them SIGTERM and wait for them without a timeout. So they are shut down
    here (torch's own shutdown, which joins them), and any left alive by an interrupted shutdown get SIGKILL.
    """
    with _stop_signals_blocked(), unreadable_main_skipped():  # the workers start here
        batches = iter(loader)
    try:
        yield batches
    finally:
        try:
            getattr(batches, "_shutdown_workers", lambda: None)()  # torch's multi-process iterator
        finally:
            for worker in getattr(batches, "_workers", ()):
                if worker.is_alive():
                    worker.kill()
