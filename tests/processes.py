"""Whether processes are still there, for the tests of signals and loader workers."""

from __future__ import annotations

import os


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
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    pid = int(done.stdout)
    assert gone(pid)
    return pid
