"""The Python API as a user meets it: names that stay functions, errors that stay one line, global state left
as it was."""

from __future__ import annotations

import subprocess
import sys


def test_functions_named_like_their_modules_stay_functions():
    code = ("import bertctl, bertctl.fill, bertctl.info, bertctl.convert, bertctl.pretrain, sys\n"
            "from bertctl import pretrain\n"
            "names = ['pretrain', 'fill', 'info', 'convert']\n"
            "assert all(callable(getattr(bertctl, n)) and getattr(bertctl, n).__module__ == 'bertctl.' + n "
            "for n in names), [getattr(bertctl, n) for n in names]\n"
            "assert callable(pretrain) and type(sys.modules['bertctl.pretrain']).__name__ == 'module'\n"
            "assert set(names) <= set(dir(bertctl))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
