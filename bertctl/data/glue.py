"""GLUE: one registry of the nine tasks and the diagnostic set, and readers for their data.

Data comes either from the official download (`--data glue_data`, the folders `CoLA/`, `SST-2/`, ... exactly
as distributed) or from the Hugging Face hub copy (`--data nyu-mll/glue`). Both give the same `Examples`,
with labels as indices into the task's `label_names`, so a recipe never sees where the data came from.

The official TSVs are split on tabs line by line with no quote processing: MRPC and SST-2 hold unbalanced `"`
characters that a csv reader would treat as the start of a quoted field and run on across lines. Some real
files have a few rows with too few or too many fields (the older QQP train.tsv has questions broken across
lines); those are skipped or read as GLUE's reference readers do, with a warning. A test file's row is never
skipped (the GLUE server wants a prediction for every test row): a missing text field is read as empty.

A local folder may also be a copy of the hub dataset: a clone of the nyu-mll/glue repository
(`mnli/validation_matched-00000-of-00001.parquet`, ...) or `DatasetDict.save_to_disk` folders.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from bertctl.errors import BertctlError, UsageError, quoted
from bertctl.files import compressed, user_path
from bertctl.hub import is_hub_dataset_id, legacy_dataset_hint

MAX_MALFORMED = 0.01  # share of rows with a wrong field count a GLUE file may have before it is refused
LONE_CR = "the file ends its lines with \\r alone: convert them to \\n (only \\n ends a line of a GLUE file)"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Examples:
    """One split as parallel columns, tokenized in one call: `tokenizer.encode_batch(ex.text_a, ex.text_b)`."""

    text_a: list[str]  # first (or only) text of each example
    text_b: list[str] | None  # second text of sentence-pair tasks; None for single-sentence tasks
    labels: list[int] | list[float] | None  # class index into label_names, a float score, or None (test sets)
    ids: list[str]  # the file's index/id column (what a submission's `index` holds), else the row number
    source: str  # the file or hub dataset read, for messages

    def __post_init__(self) -> None:
        lengths = {len(self.text_a), len(self.ids)}
        lengths |= {len(self.text_b)} if self.text_b is not None else set()
        lengths |= {len(self.labels)} if self.labels is not None else set()
        if len(lengths) != 1:
            raise BertctlError(f"{self.source}: texts, labels and ids differ in length")

    def __len__(self) -> int:
        return len(self.text_a)


@dataclass(frozen=True)
class SplitFile:
    """Where one split lives: its file in the task folder, its columns there, and its hub split."""

    split: str  # bertctl's split name: train, dev, test, or dev_matched, test_mismatched, ... for MNLI
    file: str  # file name inside the task folder, as distributed
    hub_split: str  # the same split in nyu-mll/glue (validation, test_matched, ...)
    text_a: str | int  # column name; a 0-based position in a headerless file (CoLA train/dev)
    text_b: str | int | None = None  # second text column of pair tasks
    label: str | int | None = None  # label column; None for the unlabelled test files
    index: str | None = None  # id column (test files: what the submission's `index` holds); None: row number
    columns: int | None = None  # field count of a headerless file; None means the first line is a header
    submission: str | None = None  # GLUE server file name for predictions on this (test) split

    @property
    def has_header(self) -> bool:
        return self.columns is None


class LabelledTask:
    """What fine-tuning asks of any task, GLUE's or the user's own: its classes (none: regression)."""

    label_names: tuple[str, ...]
    hub_label_names: tuple[str, ...]

    @property
    def is_regression(self) -> bool:
        return not self.label_names

    @property
    def model_label_names(self) -> tuple[str, ...]:
        """What a fine-tuned model's id2label calls the classes: the hub's ClassLabel names where the task has
        them, as run_glue.py saves them (`unacceptable, acceptable`), else the data's spelling."""
        return self.hub_label_names or self.label_names

    @property
    def num_labels(self) -> int:
        """Outputs of the task head: one per class, or one score."""
        return len(self.label_names) or 1


@dataclass(frozen=True)
class GlueTask(LabelledTask):
    """Everything bertctl needs to know about one GLUE task; recipes read it instead of special-casing."""

    name: str  # the command-line name: cola, sst2, ...
    folder: str  # folder in the official download: CoLA, SST-2, ..., diagnostic
    label_names: tuple[str, ...]  # labels as the files and the GLUE server spell them, by class index; () = regression
    metrics: tuple[str, ...]  # metrics reported, in the order the GLUE leaderboard shows them
    main_metric: str  # the one the best epoch is chosen by (the BERT paper's Table 1 choice)
    files: tuple[SplitFile, ...]  # every split the task has
    hub_config: str  # config name in nyu-mll/glue
    hub_text: tuple[str, ...]  # text column names in the hub copy
    hub_label_names: tuple[str, ...] = ()  # the hub's ClassLabel names, same order as label_names
    score_range: tuple[float, float] | None = None  # regression: the gold score range predictions are clipped to
    predicted_by: str | None = None  # a task without training data is predicted by this task's model (ax: mnli)
    # the order of google-research/bert run_classifier.py's processor, where it differs from label_names: what a
    # TensorFlow classifier checkpoint (which has no id2label) outputs
    google_label_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.main_metric not in self.metrics:
            raise BertctlError(f"GLUE registry: {self.name} main metric {self.main_metric} is not in its metrics")
        if self.hub_label_names and len(self.hub_label_names) != len(self.label_names):
            raise BertctlError(f"GLUE registry: {self.name} hub label names do not match its labels")

    @property
    def is_pair(self) -> bool:
        return len(self.hub_text) == 2

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(f.split for f in self.files)

    def split_file(self, split: str) -> SplitFile:
        for entry in self.files:
            if entry.split == split:
                return entry
        raise UsageError(f"--split {split}: task {self.name} has the splits {', '.join(self.splits)}")

    def eval_splits(self, kind: str = "dev") -> tuple[str, ...]:
        """`dev` or `test` as a user says it: MNLI's is two splits (matched and mismatched)."""
        found = tuple(s for s in self.splits if s == kind or s.startswith(f"{kind}_")) if isinstance(kind, str) else ()
        if not found:
            raise UsageError(f"--split {quoted(kind, str)}: task {self.name} has the splits {', '.join(self.splits)}")
        return found


def _splits(submission: str, text_a: str, text_b: str | None, label: str,
            index: str | None = "index", test_index: str = "index") -> tuple[SplitFile, ...]:
    """train.tsv, dev.tsv and test.tsv with a header; the test file has the same texts and no label."""
    return (
        SplitFile("train", "train.tsv", "train", text_a, text_b, label, index),
        SplitFile("dev", "dev.tsv", "validation", text_a, text_b, label, index),
        SplitFile("test", "test.tsv", "test", text_a, text_b, None, test_index, submission=submission),
    )


_BINARY = ("0", "1")
_NLI3 = ("entailment", "neutral", "contradiction")
_NLI2 = ("entailment", "not_entailment")
_GOOGLE_NLI3 = ("contradiction", "entailment", "neutral")  # run_classifier.py's MnliProcessor.get_labels()
_MNLI_TEXT = ("sentence1", "sentence2")

TASKS: dict[str, GlueTask] = {task.name: task for task in (
    GlueTask("cola", "CoLA", _BINARY, ("matthews_correlation",), "matthews_correlation",
             files=(SplitFile("train", "train.tsv", "train", text_a=3, label=1, columns=4),
                    SplitFile("dev", "dev.tsv", "validation", text_a=3, label=1, columns=4),
                    SplitFile("test", "test.tsv", "test", "sentence", index="index", submission="CoLA.tsv")),
             hub_config="cola", hub_text=("sentence",), hub_label_names=("unacceptable", "acceptable")),
    GlueTask("sst2", "SST-2", _BINARY, ("accuracy",), "accuracy",
             files=_splits("SST-2.tsv", "sentence", None, "label", index=None),
             hub_config="sst2", hub_text=("sentence",), hub_label_names=("negative", "positive")),
    GlueTask("mrpc", "MRPC", _BINARY, ("f1", "accuracy"), "f1",
             files=_splits("MRPC.tsv", "#1 String", "#2 String", "Quality", index=None),
             hub_config="mrpc", hub_text=("sentence1", "sentence2"),
             hub_label_names=("not_equivalent", "equivalent")),
    GlueTask("stsb", "STS-B", (), ("pearson", "spearman"), "spearman",
             files=_splits("STS-B.tsv", "sentence1", "sentence2", "score"),
             hub_config="stsb", hub_text=("sentence1", "sentence2"), score_range=(0.0, 5.0)),
    GlueTask("qqp", "QQP", _BINARY, ("f1", "accuracy"), "f1",
             files=_splits("QQP.tsv", "question1", "question2", "is_duplicate", index="id", test_index="id"),
             hub_config="qqp", hub_text=("question1", "question2"),
             hub_label_names=("not_duplicate", "duplicate")),
    GlueTask("mnli", "MNLI", _NLI3, ("accuracy",), "accuracy",
             files=(SplitFile("train", "train.tsv", "train", *_MNLI_TEXT, "gold_label", "index"),
                    SplitFile("dev_matched", "dev_matched.tsv", "validation_matched",
                              *_MNLI_TEXT, "gold_label", "index"),
                    SplitFile("dev_mismatched", "dev_mismatched.tsv", "validation_mismatched",
                              *_MNLI_TEXT, "gold_label", "index"),
                    SplitFile("test_matched", "test_matched.tsv", "test_matched",
                              *_MNLI_TEXT, None, "index", submission="MNLI-m.tsv"),
                    SplitFile("test_mismatched", "test_mismatched.tsv", "test_mismatched",
                              *_MNLI_TEXT, None, "index", submission="MNLI-mm.tsv")),
             hub_config="mnli", hub_text=("premise", "hypothesis"), hub_label_names=_NLI3,
             google_label_names=_GOOGLE_NLI3),
    GlueTask("qnli", "QNLI", _NLI2, ("accuracy",), "accuracy",
             files=_splits("QNLI.tsv", "question", "sentence", "label"),
             hub_config="qnli", hub_text=("question", "sentence"), hub_label_names=_NLI2),
    GlueTask("rte", "RTE", _NLI2, ("accuracy",), "accuracy",
             files=_splits("RTE.tsv", "sentence1", "sentence2", "label"),
             hub_config="rte", hub_text=("sentence1", "sentence2"), hub_label_names=_NLI2),
    GlueTask("wnli", "WNLI", _BINARY, ("accuracy",), "accuracy",
             files=_splits("WNLI.tsv", "sentence1", "sentence2", "label"),
             hub_config="wnli", hub_text=("sentence1", "sentence2"),
             hub_label_names=("not_entailment", "entailment")),
    GlueTask("ax", "diagnostic", _NLI3, ("matthews_correlation",), "matthews_correlation",
             files=(SplitFile("test", "diagnostic.tsv", "test", *_MNLI_TEXT, None, "index",
                              submission="AX.tsv"),),
             hub_config="ax", hub_text=("premise", "hypothesis"), hub_label_names=_NLI3, predicted_by="mnli",
             google_label_names=_GOOGLE_NLI3),
)}


def _plain(name: str) -> str:
    return name.lower().replace("-", "").replace("_", "")


def get_task(name: str | GlueTask) -> GlueTask:
    """A task by its name or its folder name, any case (`sst2`, `SST-2`, `diagnostic`)."""
    if isinstance(name, GlueTask):
        return name
    if not isinstance(name, str):
        raise UsageError(f"GLUE task {quoted(name)}: give a task name, one of {', '.join(TASKS)}")
    for task in TASKS.values():
        if _plain(name) in (_plain(task.name), _plain(task.folder)):
            return task
    raise UsageError(f"unknown GLUE task {name!r}: choose one of {', '.join(TASKS)}")


def data_path(data: str | Path) -> Path:
    """--data as a path: a local folder when there is one, else (as a path that does not exist) a hub id."""
    if not isinstance(data, (str, Path)):
        raise UsageError(f"--data {data!r}: give the GLUE download folder or a hub dataset id such as nyu-mll/glue")
    return user_path(data, "--data")  # `--data ~/glue` quoted, `data: ~/glue` in a --config file; "" is refused


def task_folders(task: GlueTask, data: str | Path) -> list[Path]:
    """The folder under a local --data that `read_split` reads the task from (a hub copy's, else the official
    layout's; none for a hub id): an output must never replace it."""
    root = data_path(data)
    if not root.is_dir():
        return []
    return [root / task.hub_config] if hub_copy(task, root) else [root / task.folder]


def read_split(task: str | GlueTask, split: str, data: str | Path) -> Examples:
    """One split from a local folder (the official layout or a copy of the hub dataset), or from the hub."""
    task = get_task(task)
    entry = task.split_file(split)
    path = data_path(data)
    if path.is_dir():
        return _read_folder(task, entry, path)
    if path.exists():
        raise UsageError(f"--data {data}: is a file; give the GLUE folder (with {task.folder}/ inside) "
                         "or a hub dataset id such as nyu-mll/glue")
    if is_hub_dataset_id(str(data)):
        from bertctl.data.glue_copies import read_hub  # glue_copies builds on this module's types

        return read_hub(task, entry, str(data))
    hint = legacy_dataset_hint(data, ("nyu-mll/glue",))
    raise UsageError(f"--data {data}: no such folder{hint}; give the GLUE download folder (CoLA/, SST-2/, ...) or a "
                     "hub dataset id such as nyu-mll/glue")


def _read_folder(task: GlueTask, entry: SplitFile, root: Path) -> Examples:
    """Parquet shards of a hub clone come first: on a case-insensitive disk `cola/` is also `CoLA/`."""
    from bertctl.data.glue_copies import read_parquet, read_saved  # glue_copies builds on this module's types

    config, copy = root / task.hub_config, hub_copy(task, root)
    if copy == "parquet":
        return read_parquet(task, entry, config)
    if copy == "saved":
        return read_saved(task, entry, config)
    return _read_local(task, entry, root)


def hub_copy(task: GlueTask, root: Path) -> str | None:
    """How `root` holds the task as a copy of the hub dataset: "parquet" (a clone), "saved" (save_to_disk), or
    None (the official layout, if any)."""
    config = root / task.hub_config
    if any(config.glob("*.parquet")) or any(config.glob("*/*.parquet")):
        return "parquet"
    return "saved" if (config / "dataset_dict.json").is_file() else None


def read_tsv(path: Path, lone_cr: bool = False) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) per line that is not empty: split on tab and on newline only, no quote processing.

    Only '\\n' ends a line (with an optional '\\r' before it), so U+2028 and the like inside a text stay
    in it. A leading byte-order mark is dropped (MRPC's header starts with one). An empty line is no row, as
    for `csv.DictReader` and pandas; a line of tabs or spaces is one (DictReader, and the `datasets` GLUE
    builder's row numbers, count it), so a row of empty fields is checked like any other, never dropped.
    `lone_cr`: a lone '\\r' ends a line too, as pandas and `datasets` read a user's table (an old Mac or Excel
    for Mac export ends every line so); GLUE's own files keep it inside a text.
    """
    try:
        with open(path, "rb") as handle:  # binary lines end at b"\n" only
            number = offset = 0
            for raw in handle:
                line = _utf8_line(raw, path, number + 1, offset, lone_cr)
                offset += len(raw)
                if number == 0:
                    line = line.removeprefix("\ufeff")
                text = line.removesuffix("\n").removesuffix("\r")
                for part in text.split("\r") if lone_cr else [text]:
                    number += 1
                    if part:
                        yield number, part.split("\t")
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _utf8_line(raw: bytes, path: Path, number: int, offset: int, lone_cr: bool) -> str:
    """A line's text, or one line naming the file, the line and the byte where it is not UTF-8 (a lone '\\r'
    before that byte counts as a line end when it ends lines)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = number + (raw.count(b"\r", 0, exc.start) if lone_cr else 0)
        raise UsageError(f"{path}:{line}: not UTF-8 text (byte {offset + exc.start:,}); convert it to UTF-8 "
                         "first") from None


def not_utf8(path: Path, reader: str, flag: str = "") -> UsageError:
    """One line for a text file that did not decode, after `flag` as the reader's other lines have it: compressed
    (by its name), else the line and byte where it first is not UTF-8. The decoder reads ahead in blocks, so a
    reader's own count does not say where; a second pass line by line does (a lone \\r ends a line, as in a csv
    file and in text read with universal newlines)."""
    refusal = compressed(path, str(path), reader) or _first_not_utf8(path)
    return UsageError(f"{flag} {refusal}" if flag else str(refusal))


def _first_not_utf8(path: Path) -> UsageError:
    try:
        for _ in read_tsv(path, lone_cr=True):
            pass
    except UsageError as refusal:
        return refusal
    return UsageError(f"{path}: not UTF-8 text; convert it to UTF-8 first")


def _task_folder_given(task: GlueTask, entry: SplitFile, root: Path) -> UsageError:
    """run_classifier.py's --data_dir is the task's own folder (GLUE/MRPC); bertctl's --data is the one above it,
    so a user coming from Google's README gives the former."""
    parent = root / ".." if root.name in ("", "..") else root.parent
    fix = f" (--data {parent})" if root.resolve().name == task.folder else ""
    return UsageError(f"--data {root} holds {entry.file} itself, as a task's own folder does (run_classifier.py's "
                      f"--data_dir); give the GLUE folder that holds {task.folder}/{fix}")


def _task_file(task: GlueTask, entry: SplitFile, root: Path) -> Path:
    folder = root / task.folder
    if not folder.is_dir() and (root / entry.file).is_file():
        raise _task_folder_given(task, entry, root)
    if not folder.is_dir():
        raise UsageError(f"--data {root}: no {task.folder}/ folder for {task.name}; expected the official GLUE "
                         f"layout ({task.folder}/{entry.file}), a clone of the hub dataset "
                         f"({task.hub_config}/{entry.hub_split}-00000-of-00001.parquet) or --data nyu-mll/glue")
    path = folder / entry.file
    if path.is_dir():
        raise UsageError(f"{path}: is a folder, not a file; {task.name} {entry.split} is read from the file "
                         f"{task.folder}/{entry.file}")
    if not path.is_file():
        raise UsageError(f"{path}: missing; {task.name} {entry.split} is read from {task.folder}/{entry.file}")
    return path


def _positions(entry: SplitFile, header: list[str] | None, where: str) -> list[int | None]:
    """Positions of text_a, text_b, label and index; named columns are looked up in the header."""
    wanted = [entry.text_a, entry.text_b, entry.label, entry.index]
    if header is None:
        return wanted  # type: ignore[return-value]  # headerless layouts name positions directly
    found = []
    for column in wanted:
        if isinstance(column, str) and column not in header:
            if any("\r" in name for name in header):  # a whole file of lone-\r line ends read as its header
                raise UsageError(f"{where}: the header has no column {column!r}; {LONE_CR}")
            raise UsageError(f"{where}: the header has no column {column!r} (found: {', '.join(header)})")
        found.append(header.index(column) if isinstance(column, str) else column)
    return found


def _read_local(task: GlueTask, entry: SplitFile, root: Path) -> Examples:
    """Columns by header name; a row with a wrong field count is read or skipped as GLUE's reference readers
    (transformers' processors, the `datasets` GLUE builder) do, unless such rows are too many to be a quirk.
    A test file's short row is kept, its missing texts empty: a submission needs a prediction for every row."""
    path = _task_file(task, entry, root)
    rows = read_tsv(path)
    header_line, header = next(rows, (0, None)) if entry.has_header else (0, None)
    if entry.has_header and header is None:
        raise UsageError(f"{path}: empty file (expected a header line and examples)")
    width = len(header) if header is not None else entry.columns
    at_a, at_b, at_label, at_index = positions = _positions(entry, header, f"{path}:{header_line}")
    needed = 1 + max(p for p in positions if p is not None)
    text_a: list[str] = []
    text_b: list[str] | None = [] if at_b is not None else None
    labels: list | None = [] if at_label is not None else None
    ids: list[str] = []
    malformed: list[tuple[int, int]] = []  # (line, field count) of rows whose field count is not the header's
    first_malformed: list[str] = []  # that first row's fields
    count = 0
    for count, (line, fields) in enumerate(rows, start=1):
        if len(fields) != width:
            first_malformed = first_malformed or fields
            malformed.append((line, len(fields)))
            if len(fields) < needed:
                if not entry.submission:
                    continue  # a field bertctl reads is missing: the references skip the row too
                if at_index is not None and not (at_index < len(fields) and fields[at_index].strip().isdigit()):
                    raise UsageError(f"{path}:{line}: a short row without a numeric {entry.index!r}: the end of a "
                                     "text broken across lines? Join it to the line above; a submission needs "
                                     "every test row, named by its index")
                fields = fields + [""] * (needed - len(fields))  # predicted with an empty text
        text_a.append(fields[at_a])
        if text_b is not None:
            text_b.append(fields[at_b])
        if labels is not None:
            labels.append(_row_label(task, fields, at_label, width, f"{path}:{line}"))
        row_id = fields[at_index] if at_index is not None else str(count - 1)  # the hub's idx: the row number
        if entry.submission and not row_id.strip():
            raise UsageError(f"{path}:{line}: column {entry.index!r} is empty; a submission names each row by it")
        ids.append(row_id)
    _check_malformed(path, width, needed, malformed, count, first_malformed, kept=bool(entry.submission))
    if not text_a:
        raise UsageError(f"{path}: no examples")
    return Examples(text_a, text_b, labels, ids, str(path))


def _check_malformed(path: Path, width: int, needed: int, malformed: list[tuple[int, int]], rows: int,
                     first: list[str], kept: bool = False) -> None:
    """A few odd rows are a known quirk of real GLUE files and only warned about; many mean a wrong file.
    `first`: the first such row's fields. `kept`: rows missing a field were kept with an empty text (a test
    file), not skipped."""
    if not malformed:
        return
    line, found = malformed[0]
    if len(malformed) > MAX_MALFORMED * rows:
        raise UsageError(f"{path}:{line}: expected {width} tab-separated fields, found {found}"
                         f"{_lone_cr_hint(first, width)}")
    short = [number for number, found in malformed if found < needed]
    if kept and short:
        shown = ", ".join(map(str, short[:5])) + (", ..." if len(short) > 5 else "")
        log.warning("warning: %s: %d of %d rows do not have %d fields (first: line %d); %d missing a text field "
                    "(line %s) predicted with an empty text for it, since a submission needs every test row; %d "
                    "read at the header's positions", path, len(malformed), rows, width, line, len(short), shown,
                    len(malformed) - len(short))
        return
    log.warning("warning: %s: %d of %d rows do not have %d fields (first: line %d); %d skipped for a missing "
                "field, %d read at the header's positions, as GLUE's reference readers do",
                path, len(malformed), rows, width, line, len(short), len(malformed) - len(short))


def _lone_cr_hint(fields: list[str], width: int) -> str:
    """A headerless file (CoLA train and dev) with old-Mac line ends is one line, its rows joined by \\r, that no
    header refuses first: said when that line splits at \\r into rows of the right width, which a \\r inside a
    text of a row wrong for another reason does not."""
    rows = [row for row in "\t".join(fields).split("\r") if row]
    return f"; {LONE_CR}" if len(rows) > 1 and all(len(row.split("\t")) == width for row in rows) else ""


def _row_label(task: GlueTask, fields: list[str], at: int, width: int, where: str) -> int | float:
    """A row's label; rows ended by a lone \\r under a header ended by \\n are read as one row, its label run into
    the next row's first field, so a label that does not parse says why when the row splits at \\r into rows of
    the header's width."""
    try:
        return parse_label(task, fields[at], where)
    except UsageError as exc:
        raise UsageError(f"{exc}{_lone_cr_hint(fields, width)}") from None


def parse_label(task: GlueTask, raw: str, where: str) -> int | float:
    """A label as written in a file: its class index, or the float score of a regression task."""
    if task.is_regression:
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise UsageError(f"{where}: score {raw!r} is not a finite number ({task.name} is a regression task)")
        return value
    try:
        return task.label_names.index(raw)
    except ValueError:
        raise UsageError(f"{where}: label {raw!r} is not one of {', '.join(task.label_names)} "
                         f"({task.name})") from None


def _norm(name: str) -> str:
    return re.sub(r"[\s-]+", "_", name.strip().lower())


def match_labels(task: GlueTask, names: Sequence[str]) -> list[int] | None:
    """The task's class index for each of `names` (a model's id2label, a dataset's ClassLabel), by name.

    Names are matched without regard to case, as the files spell them (`0`, `entailment`), as the hub does
    (`not_equivalent`, `acceptable`) or generically (`LABEL_1` is class 1). None when they are not a
    permutation of the task's classes.
    """
    spellings = {}
    for index, names_of_class in enumerate(zip(task.label_names, task.hub_label_names or task.label_names,
                                               strict=True)):
        for spelling in (*names_of_class, f"label_{index}"):
            spellings[_norm(spelling)] = index
    order = [spellings.get(_norm(str(name))) for name in names]
    if None in order or sorted(order) != list(range(task.num_labels)):  # type: ignore[type-var]
        return None
    return order  # type: ignore[return-value]


def outputs_by_class(task: GlueTask, names: Sequence[str]) -> list[int] | None:
    """For each of the task's classes, the output of a model whose id2label is `names` (matched as
    `match_labels` does); None when the names are not the task's classes."""
    found = match_labels(task, names)
    return None if found is None else [found.index(k) for k in range(task.num_labels)]
