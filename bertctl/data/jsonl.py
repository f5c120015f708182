"""JSON Lines as every labelled-data reader takes them: one value a line, blank lines skipped, a line that is not
JSON named by its file and number."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from bertctl.errors import UsageError


def jsonl_values(lines: Iterable[str], where: str) -> Iterator[tuple[int, str, Any]]:
    """(line number from 1, `where:number` for messages, the parsed value) of every non-blank line. `lines` must be
    split at line ends only: str.splitlines would also split at U+2028 and the like, which a JSON string holds raw."""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        at = f"{where}:{number}"
        try:
            yield number, at, json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{at}: not valid JSON: {exc.msg}") from None
