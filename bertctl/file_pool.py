"""Whole input files in worker processes, as `corpus import` runs them: results in input order, the failure of the
first bad file in input order (not of whichever worker fails first), progress from every worker, and the workers
stopped at once on a failure, Ctrl-C or SIGTERM.

Workers are spawned (never forked from a process that may hold library threads) and ignore SIGINT and SIGTERM: a
terminal's Ctrl-C and a scheduler's SIGTERM reach the whole process group, and the main process alone decides, then
kills its workers, so it can remove its partial output knowing nothing writes there any more. A worker whose main
process dies (kill -9) exits by itself.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

from bertctl.data.shards import init_worker
from bertctl.errors import BertctlError
from bertctl.worker_processes import unreadable_main_skipped

__all__ = ["FileJob", "Report", "run_files"]

POLL_SECONDS = 0.25  # how often the main process shows the workers' progress while it waits


class FileJob(Protocol):
    index: int  # the file's place among the inputs, from 0


Job = TypeVar("Job", bound=FileJob)
Result = TypeVar("Result")
Report = Callable[[int, int], None]  # (rows done, bytes read) of one file so far

_shared: Any = None  # a worker's view of the progress counters: rows and bytes, two per input file


@unreadable_main_skipped()  # the pool's workers start while the jobs are submitted
def run_files(work: Callable[[Job, Report], Result], jobs: Iterable[Job], workers: int, files: int,
              progress: Callable[[int, int], None], command: str) -> list[Result]:
    """`work(job, report)` for each job, in `workers` processes, their results in the jobs' order; `progress` gets
    the rows and bytes of all files together as they move. The first job (in order) that fails raises its error
    once every job before it has finished; later jobs are then not started, or stopped. `jobs` may be a generator
    that works while the workers run: it is not read past a job that has failed."""
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    context = multiprocessing.get_context("spawn")
    shared = context.Array("q", 2 * files, lock=False)
    pool = ProcessPoolExecutor(workers, context, initializer=_start_worker, initargs=(shared,))
    futures: list[Any] = []
    finished = False

    def show() -> None:
        progress(sum(shared[0::2]), sum(shared[1::2]))

    try:
        for job in jobs:
            futures.append(pool.submit(_run, work, job))
            show()
            if _first_failure(futures) is not None:
                break  # the files after it are never imported
        results = _in_order(futures, show)
        finished = True
        return results
    except (BrokenProcessPool, BrokenPipeError):  # a worker died, or died starting (the pipe to it broke)
        raise BertctlError(f"{command}: a worker process died (out of memory? a script that runs it outside "
                           "`if __name__ == \"__main__\":`?); rerun with fewer --workers") from None
    finally:
        if not finished:
            _kill_workers(pool)
        pool.shutdown(wait=True, cancel_futures=True)


def _in_order(futures: list[Any], show: Callable[[], None]) -> list[Any]:
    """The results in order, once all are done; or the error of the first that failed, once all before it are."""
    from concurrent.futures import FIRST_COMPLETED, wait

    while True:
        failed = _first_failure(futures)
        needed = futures if failed is None else futures[:failed + 1]
        for later in futures[len(needed):]:
            later.cancel()  # not started yet; one that runs is killed (run_files)
        waiting = [future for future in needed if not future.done()]
        if not waiting:
            break
        wait(waiting, timeout=POLL_SECONDS, return_when=FIRST_COMPLETED)
        show()
    show()
    return [future.result() for future in needed]  # raises at the failed one: every one before it succeeded


def _first_failure(futures: list[Any]) -> int | None:
    return next((i for i, future in enumerate(futures)
                 if future.done() and not future.cancelled() and future.exception() is not None), None)


def _kill_workers(pool: Any) -> None:
    """Stop the workers now: shutting the pool down would wait for every file in progress (minutes for a large
    one). Before Python 3.14's `kill_workers` the pool's processes have no public handle."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        process.kill()
    for process in processes:
        process.join()


def _start_worker(shared: Any) -> None:
    """A worker: the shared progress counters, stop signals left to the main process, an exit when it dies."""
    global _shared
    _shared = shared
    init_worker()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


def _run(work: Callable[[Job, Report], Result], job: Job) -> Result:
    def report(rows: int, read: int) -> None:
        _shared[2 * job.index], _shared[2 * job.index + 1] = rows, read

    return work(job, report)
