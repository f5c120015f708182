"""Reading the text bertctl learns from: the one input reader of `tokenizer train` and `corpus build`.

Inputs are files, folders (read recursively), glob patterns, or `datasets` names. Text files may be
plain or .gz/.bz2/.xz, UTF-8 (a BOM is dropped). Tables (.jsonl/.json/.csv/.parquet, the first two also
compressed) give one text per row from a column. Everything streams: memory holds one line, one row or
one parquet batch, never a whole file (a .json array file is the exception: JSON cannot be streamed).
Pipes, FIFOs, standard input ('-') and devices are refused: every input is read more than once (tokenizer
training's two passes; corpus build hashes each file, then reads it).

Each file's first 64 KiB is checked before any of its text is used: binary, zstd-compressed, non-UTF-8,
truncated and corrupt files found there are skipped with a warning and counted in `ReadStats`; when every
source is skipped the readers raise `UsageError`. A problem that shows only further on (a byte that is not
UTF-8 past 64 KiB, a .gz cut short) is found after some of the file's text was used, so it is not skipped:
the readers raise `UsageError` naming the file, the place and what to do (outputs never hold part of a file
they call skipped). `ReadStats.bytes_read` advances as input is consumed (compressed bytes for compressed
files), so a caller can draw a progress bar in MB and MB/s against `total_bytes`.

    stats = ReadStats.for_sources(sources)
    for text in iter_texts(sources, "text", stats):
        bar.update(stats.bytes_read - bar.n)
"""

from __future__ import annotations

import bz2
import codecs
import contextlib
import glob
import gzip
import io
import json
import logging
import lzma
import re
import reprlib
import stat
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TextIO

from bertctl.data.csv_rows import csv_rows
from bertctl.errors import UsageError

log = logging.getLogger(__name__)

Source = Path | str  # a local file (Path) or a `datasets` name (str), as expand_inputs returns them

COMPRESSIONS = (".gz", ".bz2", ".xz")  # text and table files may be compressed with these
TABLES = (".jsonl", ".json", ".csv", ".parquet")  # read through a text column, one text per row
_DATASET_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?(:[\w.-]+){0,2}$")  # owner/name[:config[:split]]
_SNIFF_BYTES = 1 << 16  # how much of each file is checked for NUL bytes and UTF-8 up front
_UPDATE_EVERY = 1024  # lines between bytes_read updates (tell() is a syscall)
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"  # a zstd frame's first bytes
_NOT_REGULAR = ((stat.S_ISFIFO, "a pipe"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                (stat.S_ISSOCK, "a socket"))
_READ_TWICE = "inputs are read more than once, so write it to a file first (.gz, .bz2 and .xz are read as they are)"
_FORMATS = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz"}  # compression suffix -> the name messages use
# What reading a file's data can raise: a byte that is not UTF-8, compressed data cut short (EOFError) or
# damaged (gzip: BadGzipFile, an OSError, or zlib.error; bz2: OSError; xz: LZMAError).
_DATA_ERRORS = (UnicodeDecodeError, EOFError, OSError, zlib.error, lzma.LZMAError)


@dataclass
class ReadStats:
    """What the readers consumed so far: for progress bars and the end-of-run summary."""

    total_bytes: int = 0  # sum of the local files' sizes (0 when only datasets names: size unknown)
    bytes_read: int = 0  # bytes consumed so far (on disk, i.e. compressed for .gz/.bz2/.xz)
    files_read: int = 0  # sources read to the end
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (source, why) of each skipped source

    @classmethod
    def for_sources(cls, sources: Iterable[Source]) -> ReadStats:
        return cls(total_bytes=sum(s.stat().st_size for s in sources if isinstance(s, Path)))


# --- which sources ---------------------------------------------------------------------------------

def expand_inputs(inputs: Sequence[str | Path]) -> list[Source]:
    """Files, folders (recursively, sorted), glob patterns and dataset names -> a list without repeats.

    A name that is no local path, has no glob characters and looks like `owner/name[:config[:split]]` without a
    file suffix is kept as a `datasets` name (str). Raises UsageError naming INPUTS when an input matches
    nothing, is a folder without files, is a pipe, '-' or a device (they cannot be read twice), or when nothing
    is left at all; hidden files (.name) in folders, and pipes and devices in folders or glob matches, are left
    out.
    """
    found: list[Source] = []
    for item in inputs:
        matched = _expand_one(str(item))
        if not matched:
            raise UsageError(f"INPUTS: nothing matched {str(item)!r} (no such file, folder or glob match)")
        found.extend(matched)
    unique = list(dict.fromkeys(found))
    if not unique:
        raise UsageError("INPUTS: no input given; name text files, folders, globs or a dataset")
    return unique


def _expand_one(item: str) -> list[Source]:
    if item == "-":
        raise UsageError(f"INPUTS: '-' (standard input) cannot be an input: {_READ_TWICE}")
    if not item.strip():  # Path("") is the working folder: everything in it, read by accident
        raise UsageError("INPUTS: an empty name; give a file, folder, glob or dataset (use . for this folder)")
    path = Path(item).expanduser()
    if path.is_file():
        return [path]
    if path.is_dir():
        files = _files_under(path)
        if not files:
            raise UsageError(f"INPUTS: the folder {item} holds no files (hidden ones, pipes and devices are left "
                             "out); put the text files in it, or name them")
        return files
    if path.exists():
        raise _not_regular(path)
    if glob.has_magic(item):
        hits = sorted(glob.glob(str(path), recursive=True))
        return [f for hit in hits for f in ([Path(hit)] if Path(hit).is_file() else _files_under(Path(hit)))]
    file_like = {s.lower() for s in path.suffixes} & {*COMPRESSIONS, *TABLES, ".txt", ".zst"}
    return [item] if _DATASET_NAME.match(item) and not file_like else []


def _not_regular(path: Path) -> UsageError:
    """A pipe (`<(cmd)`, a FIFO) or a device named as an input: one clear line, not 'nothing matched'."""
    mode = path.stat().st_mode
    kind = next((kind for test, kind in _NOT_REGULAR if test(mode)), "not a file or folder")
    return UsageError(f"INPUTS: {path} is {kind}, not a regular file: {_READ_TWICE}")


def _files_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*")
                  if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts))


def is_table(source: Source) -> bool:
    """True for sources read through a text column (.jsonl/.json/.csv/.parquet, and datasets names)."""
    if isinstance(source, str):
        return True
    suffixes = [s.lower() for s in source.suffixes]
    if suffixes and suffixes[-1] in COMPRESSIONS:
        suffixes = suffixes[:-1]
    return bool(suffixes) and suffixes[-1] in TABLES


# --- opening files ---------------------------------------------------------------------------------

class SkipSource(Exception):
    """A source found unreadable as UTF-8 text (binary, other encoding, corrupt archive) before any of its
    text was used: it is skipped."""


def _format(path: Path) -> str | None:
    """'gzip', 'bzip2' or 'xz' for a compressed file (by its suffix), None for a plain one."""
    return _FORMATS.get(path.suffix.lower())


def _damage(exc: BaseException, path: Path) -> str:
    """What a decompression error means, in words: 'truncated gzip', 'corrupt xz data (...)'."""
    kind = _format(path) or "compressed"
    if isinstance(exc, EOFError):
        return f"truncated {kind} (it ends before the {kind} end-of-stream marker)"
    return f"corrupt or not {kind} data ({exc})"


def _decompressed(raw: IO[bytes], path: Path) -> contextlib.AbstractContextManager[IO[bytes]]:
    suffix = path.suffix.lower()
    if suffix == ".gz":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if suffix == ".bz2":
        return bz2.BZ2File(raw)  # noqa: SIM115 - the caller enters it
    if suffix == ".xz":
        return lzma.LZMAFile(raw)  # noqa: SIM115 - the caller enters it
    return contextlib.nullcontext(raw)


def _sniff(stream: IO[bytes], path: Path) -> None:
    """Refuse binary and non-UTF-8 data from the first 64 KiB (a cut multi-byte char at the end is fine),
    and compressed files that end or break there. zstd gets its own reason: its NUL bytes would call it
    binary, which sends the user looking elsewhere."""
    try:
        head = stream.read(_SNIFF_BYTES)
    except (EOFError, zlib.error, lzma.LZMAError) as exc:
        raise SkipSource(_damage(exc, path)) from None
    except OSError as exc:
        raise SkipSource(_damage(exc, path) if _format(path) else f"cannot read: {exc.strerror or exc}") from None
    if head.startswith(_ZSTD_MAGIC):
        raise SkipSource("zstd-compressed input is not supported (use .gz, .bz2 or .xz, or decompress it)")
    if b"\x00" in head:
        raise SkipSource("binary (NUL bytes)")
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError as exc:
        raise SkipSource(f"not UTF-8 (byte {exc.start})") from None


def open_text(path: Path | str) -> TextIO:
    """A UTF-8 text stream of a plain, .gz, .bz2 or .xz file (BOM dropped, universal newlines)."""
    path = Path(path)
    opener = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}.get(path.suffix.lower(), open)
    return opener(path, "rt", encoding="utf-8-sig")  # type: ignore[operator]


@contextlib.contextmanager
def _reading(path: Path) -> Iterator[tuple[IO[bytes], TextIO]]:
    """(file on disk, text stream) after the sniff; SkipSource when the file is not UTF-8 text.
    The file on disk's position measures progress (compressed bytes for compressed files)."""
    try:
        raw = open(path, "rb")  # noqa: SIM115 - entered just below
    except OSError as exc:
        raise SkipSource(f"cannot open: {exc.strerror or exc}") from None
    with raw, _decompressed(raw, path) as stream:
        _sniff(stream, path)
        stream.seek(0)
        yield raw, io.TextIOWrapper(stream, encoding="utf-8-sig")


# --- streaming ------------------------------------------------------------------------------------

def _file_lines(path: Path, stats: ReadStats) -> Iterator[str]:
    start = stats.bytes_read
    with _reading(path) as (raw, text):
        for count, line in enumerate(text, 1):
            yield line.rstrip("\n")
            if count % _UPDATE_EVERY == 0:
                stats.bytes_read = start + raw.tell()


def _guarded(source: Source, reader: Callable[[Any, ReadStats], Iterator[Any]],
             stats: ReadStats) -> Iterator[Any]:
    """Run one source's reader. A source the check of its start refuses (SkipSource: nothing of it was used)
    is counted and skipped; a problem found past that check raises UsageError, since the caller already
    has some of the file's text and a skip would misstate what the output holds."""
    start = stats.bytes_read
    try:
        yield from reader(source, stats)
    except SkipSource as exc:
        stats.skipped.append((str(source), str(exc)))
        log.warning("warning: skipped %s: %s", source, exc)
    except _DATA_ERRORS as exc:
        if not isinstance(source, Path) or (isinstance(exc, OSError) and not _format(source)):
            raise  # a disk's read error, or a dataset's: not a problem of the file's contents
        raise UsageError(_late_problem(source, exc)) from None
    else:
        stats.files_read += 1
    if isinstance(source, Path):
        stats.bytes_read = start + source.stat().st_size


def _late_problem(path: Path, exc: BaseException) -> str:
    """One line for a file that turned out unreadable after some of its text was used: where, and what to do."""
    offset, line = _first_problem(path)
    checked = "only a file's first 64 KiB is checked before its text is used, so it cannot be skipped now"
    kind = _format(path)
    if isinstance(exc, UnicodeDecodeError):
        return (f"{path}: not UTF-8 at byte {offset:,}{' of its text' if kind else ''} (line {line:,}); {checked}: "
                "convert it to UTF-8 (iconv -f ENCODING -t UTF-8) or leave it out of the inputs, then run again")
    if isinstance(exc, EOFError):
        what = (f"truncated {kind}: its data ends after {offset:,} bytes of text (line {line:,}), before the "
                f"{kind} end-of-stream marker")
    else:
        what = f"corrupt {kind} data after {offset:,} bytes of text (line {line:,}): {exc}"
    return (f"{path}: {what}; {checked}: re-create or re-download it, or leave it out of the inputs, "
            "then run again")


def _first_problem(path: Path) -> tuple[int, int]:
    """(byte, line) of the decompressed data where reading `path` first fails: its first byte that is not
    UTF-8, or where a truncated or corrupt archive stops giving data. Read again from the start, so this
    costs time only when something is wrong."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset, lines = 0, 1
    with contextlib.suppress(*_DATA_ERRORS), open(path, "rb") as raw, _decompressed(raw, path) as stream:
        read = getattr(stream, "read1", stream.read)  # one decompressor step at a time: little data is lost
        while True:
            chunk = read(_SNIFF_BYTES)
            pending = len(decoder.getstate()[0])  # bytes of a multi-byte character cut at the last chunk's end
            try:
                decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as exc:
                return offset - pending + exc.start, lines + chunk.count(b"\n", 0, max(exc.start - pending, 0))
            if not chunk:
                break
            offset += len(chunk)
            lines += chunk.count(b"\n")
    return offset, lines


def _require_some(stats: ReadStats) -> None:
    if stats.skipped and not stats.files_read:
        raise UsageError(f"none of the {len(stats.skipped)} input(s) is UTF-8 text; first: "
                         f"{stats.skipped[0][0]} ({stats.skipped[0][1]})")


def iter_records(source: Source, text_column: str = "text", stats: ReadStats | None = None) -> Iterator[str]:
    """The `text_column` of every row of a table file or a `datasets` name (`NAME` or `NAME:CONFIG`, split
    train, or `NAME:CONFIG:SPLIT`), streamed. A missing column raises UsageError naming the source and the columns
    it has."""
    stats = stats if stats is not None else ReadStats()
    if isinstance(source, str):
        yield from _dataset_rows(source, text_column, stats)
        return
    if not is_table(source):
        raise UsageError(f"{source} is not a table ({', '.join(TABLES)}); read it with iter_texts")
    kind = [s.lower() for s in source.suffixes if s.lower() not in COMPRESSIONS][-1]
    reader = {".jsonl": _jsonl_rows, ".json": _json_rows, ".csv": _csv_rows, ".parquet": _parquet_rows}
    yield from reader[kind](source, text_column, stats)


def _column(row: Any, text_column: str, source: Source, where: str) -> str | None:
    if not isinstance(row, dict) or text_column not in row:
        columns = ", ".join(map(str, row)) if isinstance(row, dict) else type(row).__name__
        raise UsageError(f"{source}{where}: no column {text_column!r} (it has: {columns}); pass --text-column")
    return _text(row[text_column], text_column, source, where)


def _text(value: Any, text_column: str, source: Source, where: str) -> str | None:
    """A table cell as text: a string, or a number (a date, a decimal) as it is written; a list, an object or a
    boolean is refused, or its Python repr (`['a', 'b']`) would be learned from as if it were text. None: no
    text."""
    if value is None:
        return None
    if isinstance(value, (bool, list, tuple, dict, bytes)):
        raise UsageError(f"{source}{where}: column {text_column!r} holds {type(value).__name__} "
                         f"{reprlib.repr(value)}, not text; give each row's text as a string")
    text = value if isinstance(value, str) else str(value)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # JSON's "\ud800" escapes give lone surrogates, which Rust cannot take
            text = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text


def _jsonl_rows(path: Path, text_column: str, stats: ReadStats) -> Iterator[str]:
    for number, line in enumerate(_file_lines(path, stats), 1):
        if line.strip():
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise UsageError(f"{path}:{number}: not a JSON object: {exc}") from None
            text = _column(row, text_column, path, f":{number}")
            if text is not None:
                yield text


def _json_rows(path: Path, text_column: str, stats: ReadStats) -> Iterator[str]:
    """A JSON array of objects, or {"data": [...]} as datasets writes it (read whole: JSON cannot stream)."""
    with _reading(path) as (_, text):
        try:
            data = json.load(text)
        except UnicodeDecodeError:
            raise  # the file's bytes, not its JSON: _guarded says where
        except ValueError as exc:
            raise UsageError(f"{path}: not valid JSON: {exc}") from None
    rows = data.get("data") if isinstance(data, dict) else data
    if not isinstance(rows, list):
        raise UsageError(f"{path}: expected a JSON array of objects (or {{\"data\": [...]}}); use .jsonl")
    for number, row in enumerate(rows):
        value = _column(row, text_column, path, f" row {number}")
        if value is not None:
            yield value


def _csv_rows(path: Path, text_column: str, stats: ReadStats) -> Iterator[str]:
    """A csv file's text column (the first column of that name, as pandas reads it); a malformed line (a quote the
    file ends inside) is one line naming the file and line, as `finetune classify` says it."""
    start = stats.bytes_read
    with _reading(path) as (raw, text):
        rows = csv_rows(text, str(path))
        _, header = next(rows, (0, None))
        if header is None:  # an empty file: no rows
            return
        if text_column not in header:
            raise UsageError(f"{path}: no column {text_column!r} (it has: {', '.join(header)}); pass --text-column")
        at = header.index(text_column)
        for count, (_, fields) in enumerate(rows, 1):
            if at < len(fields):  # a short row has no text
                yield fields[at]
            if count % _UPDATE_EVERY == 0:
                stats.bytes_read = start + raw.tell()


def _parquet_rows(path: Path, text_column: str, stats: ReadStats) -> Iterator[str]:
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises ArrowInvalid and OSError for non-parquet files
        raise SkipSource(f"not a parquet file: {str(exc).splitlines()[0]}") from None
    if text_column not in table.schema_arrow.names:
        raise UsageError(f"{path}: no column {text_column!r} (it has: {', '.join(table.schema_arrow.names)}); "
                         "pass --text-column")
    start, size, rows, done = stats.bytes_read, path.stat().st_size, max(table.metadata.num_rows, 1), 0
    try:
        for batch in table.iter_batches(batch_size=4096, columns=[text_column]):
            for value in batch.column(0).to_pylist():
                done += 1  # rows counted from 1, as `finetune classify` counts a parquet file's
                text = _text(value, text_column, path, f" row {done}")
                if text is not None:
                    yield text
            stats.bytes_read = start + size * done // rows  # progress in proportion to the rows read
    except (OSError, ValueError) as exc:  # pyarrow's words for a spoiled page ("Corrupt snappy compressed data")
        raise UsageError(f"{path}: damaged parquet data after row {done:,}: {str(exc).splitlines()[0]}; re-create "
                         "it or leave it out of the inputs") from None


def _dataset_rows(name: str, text_column: str, stats: ReadStats) -> Iterator[str]:
    """A dataset from the hub (or its local cache), streamed; bytes_read counts the text's UTF-8 bytes."""
    import datasets

    from bertctl.hub import offline_when_unreachable

    path, config, split = _dataset_split(name)
    with offline_when_unreachable():  # streaming reads while it iterates
        try:
            rows = datasets.load_dataset(path, config, split=split, streaming=True)
            iterator = iter(rows)
            first = next(iterator, None)
        except Exception as exc:  # datasets raises many types (offline, not found, no such config)
            raise UsageError(f"INPUTS: {name!r} is not a local file and datasets cannot load it: "
                             f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
        if first is None:
            return
        yield from _dataset_text(first, text_column, name, stats, 0)
        for number, row in enumerate(iterator, 1):
            yield from _dataset_text(row, text_column, name, stats, number)


def _dataset_split(name: str) -> tuple[str, str | None, str]:
    """A `datasets` input's (name, config, split). `NAME:CONFIG` names a config, not a split as in the task data
    flags: text to learn from is a dataset's training split; `NAME:CONFIG:SPLIT` reads as it does there."""
    path, config, split = (name.split(":") + ["", ""])[:3]
    return path, config or None, split or "train"


def _dataset_text(row: dict[str, Any], text_column: str, name: str, stats: ReadStats, number: int) -> Iterator[str]:
    text = _column(row, text_column, name, f" row {number}")
    if text is not None:
        stats.bytes_read += len(text.encode("utf-8"))
        yield text


def iter_texts(sources: Iterable[Source], text_column: str = "text",
               stats: ReadStats | None = None) -> Iterator[str]:
    """Lines of text files and column values of tables, in source order: what a tokenizer learns from."""
    stats = stats if stats is not None else ReadStats()
    for source in sources:
        if is_table(source):
            yield from _guarded(source, lambda s, st: iter_records(s, text_column, st), stats)
        else:
            yield from _guarded(source, _file_lines, stats)
    _require_some(stats)


def iter_documents(sources: Iterable[Source], text_column: str = "text", document_per_line: bool = False,
                   stats: ReadStats | None = None) -> Iterator[tuple[list[str], int]]:
    """(lines, UTF-8 bytes) per document, lines stripped and never empty: Google's pre-training format.

    Text files: blank lines separate documents (or each line is one with `document_per_line`); tables:
    each row is one document, split at its newlines. Documents never span two sources.
    """
    stats = stats if stats is not None else ReadStats()
    for source in sources:
        if is_table(source):
            for text in _guarded(source, lambda s, st: iter_records(s, text_column, st), stats):
                yield from _documents(text.splitlines(), "all")
        else:
            lines = _guarded(source, _file_lines, stats)
            yield from _documents(lines, "line" if document_per_line else "blank")
    _require_some(stats)


def _documents(lines: Iterable[str], split: str) -> Iterator[tuple[list[str], int]]:
    """Group stripped non-empty lines into documents: at blank lines ("blank"), one per line ("line"),
    or all of them in one ("all")."""
    document: list[str] = []
    size = 0
    for line in lines:
        line = line.strip()
        if line:
            document.append(line)
            size += len(line.encode("utf-8")) + 1
        if document and (split == "line" or (split == "blank" and not line)):
            yield document, size
            document, size = [], 0
    if document:
        yield document, size
