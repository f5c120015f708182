"""csv as every bertctl reader takes it (classify and choice data, `tokenizer train` / `corpus build` inputs):
Python's csv module with standard (RFC 4180) quoting, cells as long as pandas and `datasets` read them, and
every problem one line naming the file and line.

The csv module refuses a cell over its `field_size_limit`, 131072 characters by default: a long document (a
Wikipedia article a row) is more. The limit is raised to FIELD_LIMIT, for the whole process, since the csv module
keeps one limit for all readers. The default limit also caught a quote left open: the rest of the file read as one
cell soon passed it. Without it, a quoted field the file ends inside is found at the end of the file (the csv
module gives it as a cell, as if closed), and refused naming the line the field opens on, as pandas refuses it
("EOF inside string starting at row N"). What pandas reads is read: `"abc"def` is `abcdef`.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Iterator
from itertools import chain

from bertctl.errors import UsageError

FIELD_LIMIT = 2**31 - 1  # the most the limit's C long holds on every platform (Windows' is 32 bits)
_LINE_END = re.compile(r"\r\n|\r|\n")  # where the csv module's line count moves on inside a quoted cell


def csv_rows(lines: Iterable[str], where: str) -> Iterator[tuple[int, list[str]]]:
    """(the line a row starts on, from 1; its fields) for every row of a csv text stream opened with newline=""
    (or one whose line ends are all "\\n"). An empty line is no row, as csv.DictReader and pandas skip it (`""`,
    `,,` and spaces are rows). A malformed line raises UsageError as `where:line: malformed csv: ...`."""
    csv.field_size_limit(max(csv.field_size_limit(), FIELD_LIMIT))
    ended: list[bool] = []  # set once the lines run out: a row after that ended inside a quoted field
    reader = csv.reader(chain(lines, _mark_end(ended)))  # chain: no Python call per line
    start = 1
    try:
        for fields in reader:
            line, start = start, reader.line_num + 1
            if ended:
                opened = line + sum(len(_LINE_END.findall(field)) for field in fields[:-1])
                raise UsageError(f"{where}:{opened}: malformed csv: a quoted field opens on this line and the file "
                                 'ends inside it; close it with a " or remove the stray "')
            if fields:
                yield line, fields
    except csv.Error as exc:
        raise UsageError(f"{where}:{reader.line_num}: malformed csv: {exc}") from None


def _mark_end(ended: list[bool]) -> Iterator[str]:
    ended.append(True)
    yield from ()
