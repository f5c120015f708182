"""The user's own labelled data for `bertctl finetune classify`: csv, tsv, jsonl or parquet files, or a
`Dataset.save_to_disk` folder of one split.

`.csv` is read with standard (RFC 4180) quoting, as spreadsheets and pandas write it; `.tsv` is split on tabs
and newlines with no quote processing, like GLUE's files; `.jsonl` holds one JSON object per line; `.parquet`
is read with pyarrow (installed with `datasets`), a saved split with `datasets`. The result is the same
`Examples` the GLUE readers give, inside a `TabularTask` that carries its label names and metrics, so one
fine-tuning recipe serves both.
`read_examples` reads one file for scoring or predicting with a fine-tuned model (labels optional), its
rows identified by the file's `id`/`idx` column or else their position.

Every line is a row but an empty one, as Python's csv module counts them (pandas and `datasets` also skip a
line of only spaces, which `csv.writer` writes for a text of spaces): a line of empty or blank fields (`,,`,
`""`, spaces, tabs) is a row with empty texts, predicted like any other (its text encodes as [CLS] [SEP]), and
trained on or scored when it has a label; an empty label stops with the file and line, as a wrong one does.
In a .jsonl file a blank line is no row and `{"text": ""}` is one.
"""

from __future__ import annotations

import dataclasses
import math
import reprlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any

from bertctl.config import FINETUNE_PROBLEMS
from bertctl.data.csv_rows import csv_rows
from bertctl.data.glue import Examples, LabelledTask, not_utf8, read_tsv
from bertctl.data.jsonl import jsonl_values
from bertctl.errors import UsageError
from bertctl.files import compressed, user_path

FORMATS = (".csv", ".tsv", ".jsonl", ".parquet")
ID_COLUMNS = ("id", "idx")  # a row's own id, kept in predictions; else the row's position from 0
ARROW_BATCH = 4096  # parquet and saved rows made Python values at a time (a row group can be a million rows)


@dataclass(frozen=True)
class TabularTask(LabelledTask):
    """A classification or regression task defined by the user's files, scored like a GLUE task."""

    label_names: tuple[str, ...]  # class names by class index (as written in the files); () for regression
    metrics: tuple[str, ...]  # what evaluation reports
    main_metric: str  # the metric the best epoch is chosen by
    train: Examples | None = None  # the training examples (None when scoring a fine-tuned model)
    validation: Examples | None = None  # the examples scored after each epoch, if a validation file was given
    name: str = "classify"  # shown in messages and results

    @property
    def hub_label_names(self) -> tuple[str, ...]:
        """A table spells its classes one way only (GLUE tasks also have the hub's names), for `match_labels`."""
        return ()


def classify_task(label_names: Sequence[str], train: Examples | None = None,
                  validation: Examples | None = None) -> TabularTask:
    """The task for these classes (none: regression) with the metrics `finetune classify` reports."""
    names = tuple(label_names)
    if not names:
        metrics, main = ("pearson", "spearman"), "spearman"
    elif len(names) == 2:
        metrics, main = ("accuracy", "f1", "matthews_correlation"), "accuracy"
    else:
        metrics, main = ("accuracy", "matthews_correlation"), "accuracy"
    return TabularTask(names, metrics, main, train, validation)


@dataclass
class _Table:
    """Raw columns of one file, with each row's line (or parquet row) number for messages."""

    path: Path
    unit: str  # ":" for text files (path:line), " row " for parquet
    texts: list[list[str]] = field(default_factory=list)  # one list per text column
    labels: list[Any] = field(default_factory=list)
    numbers: list[int] = field(default_factory=list)
    id_column: str | None = None  # the first of ID_COLUMNS the file has
    ids: list[str] = field(default_factory=list)  # that column's values (empty without one)
    start: int = 0  # the rows read before these (a file read a chunk at a time)

    def where(self, row: int) -> str:
        return f"{self.path}{self.unit}{self.numbers[row]}"

    def row_ids(self) -> list[str]:
        return self.ids if self.id_column else [str(self.start + row) for row in range(len(self.numbers))]

    def examples(self, labels: list[Any] | None = None) -> Examples:
        """These rows as Examples: the texts (a second column as the pair's second text), ids and `labels`."""
        text_b = self.texts[1] if len(self.texts) == 2 else None
        return Examples(self.texts[0], text_b, labels, self.row_ids(), str(self.path))

    def next_chunk(self) -> _Table:
        """An empty table for the rows after these, with the id column the file's first row decided."""
        return _Table(self.path, self.unit, [[] for _ in self.texts], id_column=self.id_column,
                      start=self.start + len(self.numbers))


def _require(columns: Sequence[str], found: Sequence[str], where: str) -> None:
    """The columns the run reads are there, once each (a header naming one twice leaves which is meant open)."""
    missing = [c for c in columns if c not in found]
    if missing:
        raise UsageError(f"{where}: no column {', '.join(map(repr, missing))} (found: {', '.join(map(str, found))})")
    twice = [c for c in dict.fromkeys(columns) if list(found).count(c) > 1]
    if twice:
        raise UsageError(f"{where}: the header names column {', '.join(map(repr, twice))} more than once; "
                         "rename the copies")


def _csv_rows(path: Path, columns: Sequence[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    with open(path, encoding="utf-8-sig", newline="") as handle:
        yield from _named_fields(csv_rows(handle, str(path)), path, columns, "comma")


def _tsv_rows(path: Path, columns: Sequence[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    rows = read_tsv(path, lone_cr=True)  # lines end as in a .csv, as pandas and `datasets` end them
    yield from _named_fields(rows, path, columns, "tab")


def _named_fields(rows: Iterator[tuple[int, list[str]]], path: Path, columns: Sequence[str],
                  separator: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line, {header name: field}) of every row after the header, which must name `columns`; a row of another
    length is refused naming its line (a cell lost or a separator too many would shift the columns)."""
    first, header = next(rows, (0, None))
    if header is None:
        raise UsageError(f"{path}: empty file (expected a header line and examples)")
    _require(columns, header, f"{path}:{first}")
    for line, fields in rows:
        if len(fields) != len(header):
            raise UsageError(f"{path}:{line}: expected {len(header)} {separator}-separated fields, found {len(fields)}")
        yield line, dict(zip(header, fields, strict=True))


def _jsonl_rows(path: Path, columns: Sequence[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    with open(path, encoding="utf-8-sig") as handle:  # lines end at \n, \r\n or a lone \r, as in a .csv
        for line, at, record in jsonl_values(handle, str(path)):
            if not isinstance(record, dict):
                raise UsageError(f"{at}: expected one JSON object per line")
            _require(columns, list(record), at)
            yield line, record


def _parquet_rows(path: Path, columns: Sequence[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    import pyarrow
    import pyarrow.parquet as pq

    try:
        names = pq.read_schema(path).names
        _require(columns, names, str(path))
        wanted = [*columns, *(c for c in ID_COLUMNS if c in names)]
        batches = pq.ParquetFile(path).iter_batches(ARROW_BATCH, columns=list(dict.fromkeys(wanted)))
        yield from _numbered(batches)
    except (OSError, pyarrow.ArrowException) as exc:
        raise UsageError(f"{path}: cannot read parquet: {str(exc).splitlines()[0]}") from None


def _numbered(batches: Iterator[Any]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(row number from 1, row) of arrow record batches, one batch of Python values held at a time: a whole
    table's `to_pylist` holds every text of the file as Python objects."""
    number = 0
    for batch in batches:
        for record in batch.to_pylist():
            number += 1
            yield number, record


def _saved_rows(path: Path, columns: Sequence[str], flag: str) -> Iterator[tuple[int, dict[str, Any]]]:
    from bertctl.data.hub_copies import read_saved

    table, _ = read_saved(path, flag)
    _require(columns, table.column_names, str(path))
    yield from _numbered(iter(table.to_batches(ARROW_BATCH)))


def known_rows(path: str | Path, flag: str = "--data") -> int | None:
    """How many rows a .parquet file (its footer says) or a saved split (its arrow table) holds, found without
    reading a row: a progress bar's total. None for a text file, whose rows are known only once read (a big
    one is not read twice for a bar), and for one that cannot be read, which the read then refuses."""
    try:
        path = user_path(path, flag)
        if path.is_dir():
            from bertctl.data.hub_copies import read_saved

            return read_saved(path, flag)[0].num_rows
        if path.suffix.lower() == ".parquet" and path.is_file():  # a pipe's bytes come once: left to the read
            import pyarrow.parquet as pq

            return pq.ParquetFile(path).metadata.num_rows
    except (OSError, ValueError, UsageError):  # pyarrow's ArrowInvalid is a ValueError
        return None
    return None


_READERS = {".csv": _csv_rows, ".tsv": _tsv_rows, ".jsonl": _jsonl_rows, ".parquet": _parquet_rows}


def _table_chunks(path: str | Path, text_columns: Sequence[str], label_column: str | None, ids: bool = True,
                 flag: str = "--data", size: int | None = None) -> Iterator[_Table]:
    """The text and label columns (None: no labels) of one file (or saved split), and its ids, checked row by
    row, `size` rows at a time (None: all at once), so that a big file's texts need never be held all together;
    the file's errors are raised when their row is reached. With `ids=False` (training, scoring: no row is named)
    a row's id may be missing (kept as ""): a gap in an `id`/`idx` column the run never uses is no reason to
    refuse the file."""
    path = user_path(path, flag)
    suffix = path.suffix.lower()
    if path.is_dir():
        rows = partial(_saved_rows, flag=flag)
    elif not path.exists():
        raise UsageError(f"{flag} {path}: no such file; give a {', '.join(FORMATS[:-1])} or {FORMATS[-1]} file, or "
                         "a Dataset.save_to_disk folder")
    elif suffix not in _READERS:
        raise compressed(path, f"{flag} {path}", "classify") or UsageError(
            f"{flag} {path}: unsupported file type {suffix or '(none)'}; use one of {', '.join(FORMATS)} or a "
            "Dataset.save_to_disk folder")
    else:
        rows = _READERS[suffix]
    table = _Table(path, ":" if suffix in _READERS and suffix != ".parquet" else " row ",
                   texts=[[] for _ in text_columns])
    try:
        required = [*text_columns, *([label_column] if label_column else [])]
        for number, record in rows(path, required):
            _add_row(table, number, record, text_columns, label_column, ids)
            if len(table.numbers) == size:
                yield table
                table = table.next_chunk()
    except UnicodeDecodeError:
        raise not_utf8(path, "classify") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not table.numbers and not table.start:
        raise UsageError(f"{path}: no examples")
    if table.numbers:
        yield table


def _add_row(table: _Table, number: int, record: dict[str, Any], text_columns: Sequence[str],
             label_column: str | None, ids: bool = True) -> None:
    where = f"{table.path}{table.unit}{number}"
    if not table.numbers and not table.start:  # the file's first row (a header, a schema) says if there are ids
        table.id_column = next((c for c in ID_COLUMNS if c in record), None)
    for column, values in zip(text_columns, table.texts, strict=True):
        value = _missing_as_none(record[column])
        if value is None:
            raise UsageError(f"{where}: text column {column!r} is empty")
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):  # a JSON object or list, say
            raise UsageError(f"{where}: text column {column!r} holds {type(value).__name__} "
                             f"{reprlib.repr(value)}, not text")
        values.append(str(value))
    if label_column:
        table.labels.append(_scalar(record[label_column], f"{where}: label column {label_column!r}"))
    if table.id_column:
        value = _missing_as_none(record.get(table.id_column))
        if not ids:
            row_id = "" if isinstance(value, (list, tuple, dict, bytes)) else _label_text(value) or ""
        elif (row_id := _label_text(_scalar(value, f"{where}: id column {table.id_column!r}"))) is None:
            raise UsageError(f"{where}: id column {table.id_column!r} is empty")
        table.ids.append(row_id)
    table.numbers.append(number)


def _missing_as_none(value: Any) -> Any:
    """A JSON NaN is a missing cell, as pandas and `datasets` read it (and as a parquet null is), not "nan"."""
    return None if isinstance(value, float) and math.isnan(value) else value


def _scalar(value: Any, what: str) -> Any:
    """A label or id as written: text, a number, a boolean, a date (None: empty); a JSON list or object, or a
    parquet list or struct, is refused, or its Python repr would become a class name."""
    if isinstance(value, (list, tuple, dict, bytes)):
        raise UsageError(f"{what} holds {type(value).__name__} {reprlib.repr(value)}; give text or a number")
    return value


def _label_text(value: Any) -> str | None:
    """A label as a class name: JSON/parquet numbers and booleans spelled the way a csv would hold them."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip() or None


def _as_float(text: str | None) -> float | None:
    try:
        value = float(text)  # type: ignore[arg-type]  # None raises TypeError, handled below
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _whole(text: str | None) -> int | None:
    """The whole number a label spells (1, 01, 1.0, 1e3), exactly (long codes are not rounded as floats)."""
    if _as_float(text) is None:
        return None
    try:
        value = Decimal(text)  # type: ignore[arg-type]  # float() took it, so it is a finite number
    except ArithmeticError:
        return None
    return int(value) if value == value.to_integral_value() else None


def _is_whole(text: str | None) -> bool:
    return _whole(text) is not None


def _is_number(text: str | None) -> bool:
    """A number, NaN and infinities included (a numeric column's missing value is NaN in JSON and parquet)."""
    try:
        float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return True


def _is_regression(labels: list[str | None]) -> bool:
    """Auto-detection: every label a number and at least one not a whole number (NaN: a regression column
    with a missing value, refused at its row, not a class "nan")."""
    return all(_is_number(t) for t in labels) and not all(_is_whole(t) for t in labels)


def _class_names(labels: list[str | None]) -> tuple[str, ...]:
    """Sorted class names: numerically when they are all whole numbers (so "10" comes after "2"), one class per
    number however it is spelled (1, 01 and 1.0 are one class, as pandas and `datasets` read the column), named
    by its plain spelling when that is among them, else by the first."""
    names = {t for t in labels if t is not None}
    if all(_is_whole(n) for n in names):
        by_value: dict[int, set[str]] = {}
        for name in names:
            by_value.setdefault(_whole(name), set()).add(name)  # type: ignore[arg-type]  # whole, checked
        return tuple(str(value) if str(value) in spellings else min(spellings)
                     for value, spellings in sorted(by_value.items()))
    return tuple(sorted(names))


def _labels(table: _Table, label_names: tuple[str, ...], label_column: str) -> list[Any]:
    """Each row's class id among `label_names` (none: its score), the first bad label named with its row."""
    labels: list = []
    index = _ClassIndex(label_names)
    for row, raw in enumerate(table.labels):
        text = _label_text(raw)
        if text is None:
            raise UsageError(f"{table.where(row)}: label column {label_column!r} is empty")
        if not label_names:
            value = _as_float(text)
            if value is None:
                raise UsageError(f"{table.where(row)}: label {text!r} is not a finite number (regression)")
            labels.append(value)
        elif len(found := index.classes(text)) == 1:
            labels.append(found[0])
        elif found:
            raise UsageError(f"{table.where(row)}: label {text!r} could be any of the classes "
                             f"{', '.join(label_names[i] for i in found)}; spell it as one of them")
        else:
            raise UsageError(f"{table.where(row)}: label {text!r} is not one of {', '.join(label_names)}")
    return labels


class _ClassIndex:
    """The class a label names: its exact spelling; else a boolean spelled another way (pandas and Python's csv
    write True, JSON and parquet give true) names the one class spelled like it but for case, and a whole
    number spelled another way (a csv's 1.0 or 01, JSON's 1) the one class that is the same number."""

    def __init__(self, label_names: tuple[str, ...]) -> None:
        self.exact = {name: i for i, name in enumerate(label_names)}
        self.folded: dict[str, list[int]] = {}
        self.numbers: dict[int, list[int]] = {}
        for i, name in enumerate(label_names):
            self.folded.setdefault(name.lower(), []).append(i)
            if (value := _whole(name)) is not None:
                self.numbers.setdefault(value, []).append(i)

    def classes(self, text: str) -> list[int]:
        """Every class the label may name: one, none, or several (`1.0` among the given classes 1 and 01), which
        is refused as ambiguous rather than taken as the first."""
        if text in self.exact:
            return [self.exact[text]]
        if text.lower() in ("true", "false"):
            return self.folded.get(text.lower(), [])
        if (value := _whole(text)) is not None:
            return self.numbers.get(value, [])
        return []


def _check_text_columns(text_columns: tuple[str, ...]) -> None:
    if len(text_columns) not in (1, 2) or not all(text_columns):
        raise UsageError(f"--text-columns: give one or two column names, got {','.join(text_columns)!r}")


def read_examples(path: str | Path, text_columns: Sequence[str], label_column: str | None = None,
                  label_names: Sequence[str] = (), ids: bool = True) -> tuple[Examples, str]:
    """One file's examples for a fine-tuned model, and the name of what identifies its rows.

    With `label_column` the labels must be among `label_names` (numbers when there are none: regression),
    as a model trained on those classes can only be scored on them; without it there are no labels. Rows are
    identified by the file's `id` or `idx` column, else by their position from 0 (`index`); with `ids=False`
    (scoring, which names no row) that column may have gaps.
    """
    [(examples, id_name)] = example_chunks(path, text_columns, label_column, label_names, ids)
    return examples, id_name


def example_chunks(path: str | Path, text_columns: Sequence[str], label_column: str | None = None,
                   label_names: Sequence[str] = (), ids: bool = True,
                   size: int | None = None) -> Iterator[tuple[Examples, str]]:
    """`read_examples`' examples `size` rows at a time (None: all at once), each with the name of what
    identifies its rows: a big file is encoded a chunk at a time, never holding all its texts."""
    text_columns = tuple(text_columns)
    _check_text_columns(text_columns)
    for table in _table_chunks(path, text_columns, label_column, ids, size=size):
        labels = _labels(table, tuple(label_names), label_column) if label_column else None
        yield table.examples(labels), table.id_column or "index"


def load_labelled_data(train: str | Path, validation: str | Path | None, text_columns: Sequence[str],
                       label_column: str, problem: str = "auto",
                       label_names: Sequence[str] | None = None) -> TabularTask:
    """Train (and validation) examples plus what scoring them needs, each file read whole (fine-tuning reads
    them a chunk at a time through `LabelledFile`)."""
    train_file = LabelledFile.checked(train, text_columns, label_column, "--train", problem)
    [train_texts] = train_file.parts()
    task = train_file.task(problem, label_names)
    train_examples = dataclasses.replace(train_texts, labels=train_file.labels_for(task.label_names))
    dev = None
    if validation:
        dev_file = LabelledFile(validation, train_file.text_columns, label_column, "--validation")
        [dev_texts] = dev_file.parts()
        dev = dataclasses.replace(dev_texts, labels=dev_file.labels_for(task.label_names))
    return dataclasses.replace(task, train=train_examples, validation=dev)


@dataclass
class LabelledFile:
    """A labelled file read a chunk at a time: its texts as they come (`parts`, for encoding), its labels
    kept for when every row is read, so that the classes, and whether the labels are scores, are decided over
    all rows (and every row's own errors come before any label's) while only a chunk's texts are held. A file
    that can be read again may be read through for its labels first (`read_through`), to judge them before
    any text is encoded."""

    path: str | Path
    text_columns: tuple[str, ...]
    label_column: str
    flag: str  # --train, --validation: how messages name the file
    read: _Table | None = None  # the labels and row numbers of the rows read so far (texts left out)

    @classmethod
    def checked(cls, path: str | Path, text_columns: Sequence[str], label_column: str, flag: str,
                problem: str = "auto") -> LabelledFile:
        """The training file, once the flags that say how to read its labels are known to be sound."""
        text_columns = tuple(text_columns)
        _check_text_columns(text_columns)
        if problem not in FINETUNE_PROBLEMS:
            raise UsageError(f"--problem {problem}: choose one of {', '.join(FINETUNE_PROBLEMS)}")
        if not isinstance(label_column, str) or not label_column.strip():  # "" would read no labels at all
            raise UsageError(f"--label-column: give the label column's name, not {label_column!r}")
        return cls(path, text_columns, label_column, flag)

    def parts(self, size: int | None = None) -> Iterator[Examples]:
        """The file's texts `size` rows at a time (None: all at once), without labels; each part's labels are
        kept in `read` (a file read again keeps those of the new read only)."""
        self.read = None
        for table in _table_chunks(self.path, self.text_columns, self.label_column, False, self.flag, size):
            if self.read is None:
                self.read = _Table(table.path, table.unit)
            self.read.labels += table.labels
            self.read.numbers += table.numbers
            yield table.examples()

    def can_read_again(self) -> bool:
        """A file or a saved folder can be read twice; a pipe (a FIFO named `train.csv`) gives its rows once."""
        try:
            path = user_path(self.path, self.flag)
            return path.is_file() or path.is_dir()
        except OSError:  # a name too long, say: refused as the file is read
            return False

    def read_through(self, size: int) -> int:
        """Read every row, `size` at a time, checking each as `parts` does and keeping the labels only: what the
        labels say (the classes, a bad or missing label) is then known before any text is encoded. Returns the
        number of rows, the encoding bar's total."""
        return sum(len(part.text_a) for part in self.parts(size))

    def task(self, problem: str = "auto", label_names: Sequence[str] | None = None) -> TabularTask:
        """The task the (read) training file defines. `problem="auto"` picks regression when every label is a
        number and some are not whole; class names are its labels (sorted) unless `label_names` fixes them."""
        assert self.read is not None, "parts() first"
        texts = [_label_text(v) for v in self.read.labels]
        if None in texts:  # before the classes are counted, so the row is named rather than too few classes
            raise UsageError(f"{self.read.where(texts.index(None))}: label column {self.label_column!r} is empty")
        regression = problem == "regression" or (problem == "auto" and label_names is None and _is_regression(texts))
        names: tuple[str, ...] = () if regression else tuple(label_names or _class_names(texts))
        if len(set(names)) != len(names):
            raise UsageError(f"--label-names: {','.join(names)} repeats a name")
        if not regression and len(names) < 2:
            where = "--label-names" if label_names else f"{self.path}: label column {self.label_column!r}"
            raise UsageError(f"{where} has fewer than two classes ({', '.join(names) or 'none'}); classification "
                             "needs at least two")
        return classify_task(names)

    def labels_for(self, label_names: Sequence[str]) -> list[Any]:
        """Each (read) row's label as a class id among `label_names` (none: a score, for a regression)."""
        assert self.read is not None, "parts() first"
        return _labels(self.read, tuple(label_names), self.label_column)
