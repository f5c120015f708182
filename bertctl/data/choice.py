"""Multiple-choice data for `bertctl finetune|evaluate|predict choice`: SWAG's csv files, a generic jsonl, and
the hub's SWAG or copies of it.

A `.csv` file is laid out as SWAG distributes it (`video-id,fold-ind,startphrase,sent1,sent2,gold-source,
ending0,ending1,ending2,ending3,label`): the context is `sent1`, the choices are `sent2 + " " + ending_i` for
every `endingN` column (0, 1, ... without a gap; SWAG has 4), the answer is `label` (test.csv has none); a row
is named by `fold-ind`, else by its number from 0. A `.jsonl` file holds `{"context": ..., "question" or
"prefix": ... (optional), "choices": [...], "label": int (optional), "id": ... (optional)}` a line, every line
with as many choices as the first; a question (or prefix) is put before each choice as SWAG's `sent2` is.
A copy of the hub's allenai/swag (regular config: a parquet file, a `save_to_disk` split, or `Dataset.to_json`'s
lines, in a .json or .jsonl file), or the hub dataset itself by id, holds SWAG's columns, read as the csv's; its
label -1 (the test split) means none, in a csv too.

Features follow transformers' run_swag.py and the paper (Devlin et al. 4.4): each choice is one sequence
`[CLS] context [SEP] (question) choice [SEP]`, the pair cut to max_seq_length by Google's longest-first rule.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from itertools import count, takewhile, zip_longest
from pathlib import Path
from typing import Any

import numpy as np

from bertctl.data.batches import Grouped, pair_rows
from bertctl.data.csv_rows import csv_rows
from bertctl.data.glue import not_utf8
from bertctl.data.hub_copies import is_copy, read_copy, refuse_missing
from bertctl.data.jsonl import jsonl_values
from bertctl.errors import UsageError
from bertctl.files import user_path
from bertctl.tokenizer import ENCODE_CHUNK, BertTokenizer, truncate_pair

SWAG_COLUMNS = ("sent1", "sent2", "ending0", "ending1")  # the least a SWAG-style csv must have
HUB_CONFIGS = {"allenai/swag": "regular"}  # the config read when a hub id names none (run_swag.py's)
Example = tuple[str, str, list[str], int | None]  # id, context, choices, label (None: none given)
_FORMATS = ("a SWAG-style .csv, a .jsonl/.json file, a hub copy (.parquet, a save_to_disk folder) or a hub dataset "
            "id (allenai/swag)")


@dataclass(frozen=True)
class ChoiceData:
    """Examples of one context and C choices (the same C for every example), with the answers when given."""

    ids: list[str]
    contexts: list[str]  # text A of every choice
    choices: list[list[str]]  # text B of each choice (SWAG: sent2 + " " + ending)
    labels: list[int] | None  # the right choice, from 0; None: a file without answers
    path: Path

    def __len__(self) -> int:
        return len(self.contexts)

    @property
    def num_choices(self) -> int:
        return len(self.choices[0])


def read_choice(path: Path | str, flag: str, need_labels: bool = True) -> ChoiceData:
    """A SWAG-style .csv, JSON Lines (.jsonl, or .json as `Dataset.to_json` names it) or a hub copy (a .parquet
    file, a saved split), refused in one line when its columns, choices or labels do not fit."""
    given, path = path, user_path(path, flag)
    where = f"{flag} {path}"
    refuse_missing(given, flag, _FORMATS, ("allenai/swag",))  # as spelt: `./x/y` is a missing file, never a hub id
    if is_copy(path):
        unit, (spots, rows) = " row ", _numbered(_read_copy(path, flag))
    else:
        reader = _read_jsonl if path.suffix.lower() in (".jsonl", ".json") else _read_csv
        try:
            unit, (spots, rows) = ":", _numbered(reader(path, where))
        except UnicodeDecodeError:
            raise not_utf8(path, "choice", flag) from None
        except OSError as exc:
            raise UsageError(f"{where}: cannot read it: {exc.strerror or exc}") from None
    if not rows:
        raise UsageError(f"{where} holds no examples; give {_FORMATS}")

    def at(number: int) -> str:
        return f"{where}{unit}{spots[number]}"

    labelled = [label is not None for *_, label in rows]
    if need_labels and not all(labelled):
        raise UsageError(f"{at(labelled.index(False))}: no label; give the right choice of each example")
    if any(labelled) and not all(labelled):
        raise UsageError(f"{at(labelled.index(False))}: no label where others have one; give all or none")
    ids, contexts, choices, labels = (list(column) for column in zip(*rows, strict=True))
    for number, (options, label) in enumerate(zip(choices, labels, strict=True)):
        if len(options) != len(choices[0]):
            raise UsageError(f"{at(number)}: {len(options)} choices where the first example has {len(choices[0])}; "
                             "give every example the same number")
        if label is not None and not 0 <= label < len(options):
            raise UsageError(f"{at(number)}: label {label} is outside its choices 0..{len(options) - 1}")
    return ChoiceData(ids, contexts, choices, labels if all(labelled) else None, path)


def _numbered(spotted: Iterable[tuple[int, Example]]) -> tuple[array, list[Example]]:
    """The examples, and apart from them the line (a copy's row) each starts on, for messages: an int each in
    one array, not a string an example."""
    spots, rows = array("q"), []
    for spot, row in spotted:
        spots.append(spot)
        rows.append(row)
    return spots, rows


def _missing_swag(columns: Collection[str], where: str) -> None:
    missing = [c for c in SWAG_COLUMNS if c not in columns]
    full = " (this is SWAG's `full` layout, gold-ending and distractor-N: give its `regular` config)" \
        if "gold-ending" in columns else ""
    if missing:
        raise UsageError(f"{where} lacks the column(s) {', '.join(missing)}{full}; give SWAG's columns (sent1, "
                         "sent2, ending0, ending1, ..., label)")
    read = sum(1 for _ in takewhile(columns.__contains__, (f"ending{i}" for i in count())))
    stray = sorted((c for c in columns if re.fullmatch(r"ending[0-9]+", c) and int(c[6:]) > read),
                   key=lambda c: int(c[6:]))
    if stray:  # a choice would be dropped unseen: SWAG's choices are ending0, ending1, ... one after another
        raise UsageError(f"{where} has the column {stray[0]} but no ending{read}; number the choices' columns "
                         "ending0, ending1, ... without a gap")


def _swag(row: dict[str, Any], number: int, label: int | None) -> tuple[str, str, list[str], int | None]:
    """SWAG's example: the context is sent1, each choice sent2 + " " + ending; named by fold-ind, else its number.
    The label -1 (the hub's test split) means none."""
    endings = takewhile(row.__contains__, (f"ending{i}" for i in count()))
    name = row.get("fold-ind")
    return (str(name) if name not in (None, "") else str(number), row["sent1"],
            [f"{row['sent2']} {row[e]}" for e in endings], None if label == -1 else label)


def _read_csv(path: Path, where: str) -> Iterator[tuple[int, Example]]:
    with path.open(encoding="utf-8-sig", newline="") as handle:
        rows = csv_rows(handle, where)
        _, header = next(rows, (0, []))
        _missing_swag(header, where)
        for number, (line, fields) in enumerate(rows):
            row = dict(zip_longest(header, fields))  # as csv.DictReader: a short row's missing cells are None
            if len(fields) > len(header) or any(row[c] is None for c in SWAG_COLUMNS):
                raise UsageError(f"{where}:{line}: {len(header)} columns in the header but not in this row")
            yield line, _swag(row, number, _csv_label(row.get("label"), f"{where}:{line}"))


def _csv_label(value: str | None, at: str) -> int | None:
    if value is None or not value.strip():
        return None
    try:
        return int(value)
    except ValueError:
        raise UsageError(f"{at}: label {value!r} is not the number of a choice (0, 1, ...)") from None


def _read_copy(path: Path, flag: str) -> Iterator[tuple[int, Example]]:
    """The hub's swag rows (allenai/swag, regular: a hub id or a copy), or rows of context, choices and label as in
    a .jsonl file."""
    copy = read_copy(path, flag, (), "SWAG's columns", HUB_CONFIGS)
    if "choices" not in copy.columns:
        _missing_swag(copy.columns, copy.where)
    for number, row in enumerate(copy.rows):
        yield number + 1, _record(row, copy.at(number), number)


def _read_jsonl(path: Path, where: str) -> Iterator[tuple[int, Example]]:
    for number, at, record in jsonl_values(path.read_text(encoding="utf-8-sig").split("\n"), where):
        yield number, _record(record, at, number - 1)


def _record(record: Any, at: str, number: int) -> tuple[str, str, list[str], int | None]:
    """A hub row of SWAG's columns (`Dataset.to_json` of allenai/swag), else our own layout."""
    if not isinstance(record, dict) or "sent1" not in record:
        return _jsonl_example(record, at, str(number))
    _missing_swag(record, at)
    label = record.get("label")
    if label is not None and (not isinstance(label, int) or isinstance(label, bool)):
        raise UsageError(f"{at}: label must be the number of a choice (0, 1, ...; -1: none), got {label!r:.60}")
    endings = takewhile(record.__contains__, (f"ending{i}" for i in count()))
    bad = next((c for c in ("sent1", "sent2", *endings) if not isinstance(record[c], str)), None)
    if bad is not None:
        raise UsageError(f"{at}: {bad} must be text, got {record[bad]!r:.60}")
    return _swag(record, number, label)


def _jsonl_example(record: Any, at: str, number: str) -> tuple[str, str, list[str], int | None]:
    shape = '{"context": ..., "question": ... (optional), "choices": [...], "label": int}'
    if not isinstance(record, dict) or not isinstance(record.get("context"), str):
        raise UsageError(f"{at}: expected {shape} with the context as a string")
    choices = record.get("choices")
    if not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) for c in choices):
        raise UsageError(f"{at}: choices must be a list of two or more strings, got {choices!r:.60}")
    question = record.get("question", record.get("prefix"))
    if question is not None and not isinstance(question, str):
        raise UsageError(f"{at}: question must be a string, got {question!r:.60}")
    label = record.get("label")
    if label is not None and (not isinstance(label, int) or isinstance(label, bool)):
        raise UsageError(f"{at}: label must be the number of a choice (0, 1, ...), got {label!r:.60}")
    texts = [f"{question} {c}" if question is not None else c for c in choices]
    return str(record.get("id", number)), record["context"], texts, label


@dataclass(frozen=True)
class ChoiceFeatures:
    """Encoded examples: per example, C rows `[CLS] A [SEP] B [SEP]` with their segment ids; every choice's a view
    of one array for all (a Grouped Ragged: an array per choice held ~1.4 KB of objects an example of 4). The
    texts are not kept: `predict choice` scores without them."""

    num_choices: int  # C
    input_ids: Grouped  # per example, per choice: int32
    token_type_ids: Grouped  # int8
    labels: np.ndarray | None  # (N,) the right choice
    lengths: np.ndarray  # (N,) tokens of the example's longest choice (batches are padded to it)
    truncated: int  # examples with a choice cut to max_seq_length
    tokens: np.ndarray  # (N,) tokens of all the example's choices: what a step's tokens/s counts

    def __len__(self) -> int:
        return len(self.input_ids)


def make_choice_features(tokenizer: BertTokenizer, data: ChoiceData, max_seq_length: int) -> ChoiceFeatures:
    """Every (context, choice) pair as one sequence, cut by Google's longest-first rule (`truncate_pair`)."""
    cls, sep, room, width = tokenizer.cls_id, tokenizer.sep_id, max_seq_length - 3, data.num_choices
    ids, firsts, seconds, truncated = [], [], [], 0  # per chunk: its ids; per choice: its tokens of segment 0, 1
    for lo in range(0, len(data), ENCODE_CHUNK):
        contexts = tokenizer.encode_batch(data.contexts[lo:lo + ENCODE_CHUNK], add_special_tokens=False)
        flat = [text for options in data.choices[lo:lo + ENCODE_CHUNK] for text in options]
        endings = tokenizer.encode_batch(flat, add_special_tokens=False)
        chunk: list[int] = []
        for row, context in enumerate(contexts):
            cut = False
            for ending in endings[row * width:(row + 1) * width]:
                a, b = truncate_pair(context.ids, ending.ids, room)
                cut |= len(a) + len(b) < len(context.ids) + len(ending.ids)
                chunk += [cls, *a, sep, *b, sep]
                firsts.append(len(a) + 2)
                seconds.append(len(b) + 1)
            truncated += cut
        ids.append(np.asarray(chunk, dtype=np.int32))
    labels = np.asarray(data.labels, dtype=np.int64) if data.labels is not None else None
    choice_ids, segments, sizes = pair_rows(ids, firsts, seconds)  # sizes: (N * C,) tokens per choice
    per_example = sizes.reshape(-1, width)
    return ChoiceFeatures(width, Grouped(choice_ids, width), Grouped(segments, width), labels,
                          per_example.max(axis=1), truncated, per_example.sum(axis=1))
