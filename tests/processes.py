"""Whether processes are still there, for the tests of signals and loader workers; runs whose hung processes
must not outlive a test."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any


def gone(pid: int, group: bool = False) -> bool:
    """No process `pid` is left (with `group`, no process of the group `pid` leads: a loader worker that
    outlived its run would still be in it). Signal 0 only asks."""
    try:
        (os.killpg if group else os.kill)(pid, 0)
    except ProcessLookupError:
        return True
    return False


def dead_pid() -> int:
    """The id of a process that has just ended (and been waited for), so no process has it for now."""
    import sys

    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    pid = int(done.stdout)
    assert gone(pid)
    return pid


def run_group(command: list[str], timeout: float, **options: Any) -> subprocess.CompletedProcess:
    """subprocess.run in a process group of its own, the whole group killed on a timeout: torchrun's ranks, hung
    in a collective, would otherwise outlive the test (subprocess.run kills the launcher alone)."""
    process = subprocess.Popen(command, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, **options)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def torchrun_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a torchrun launch: a thread per process, and TMPDIR in the test's own `tmp_path`.
    torchrun's agent makes a torchelastic_* folder in TMPDIR for every launch and leaves it there, empty: ~18 a suite
    run piled up in the machine's /tmp."""
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    return {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp), **extra}


def ranks_said(stderr: str, limit: int = 3000) -> str:
    """A failed torchrun's stderr for an assertion message: the ranks' own last lines (a rank's traceback or a
    native abort's `terminate called ...`), then torchrun's table of which rank failed how. torchrun's own
    traceback alone fills the last 2,000 characters, and hid why a rank died."""
    table = stderr.rfind("ChildFailedError")
    if table < 0:
        return stderr[-limit:]
    ours = stderr.rfind("Traceback (most recent call last):", 0, table)
    return stderr[:ours if ours >= 0 else table][-limit:] + "\n[torchrun] " + stderr[table:][:1500]
