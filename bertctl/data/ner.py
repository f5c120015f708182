"""Named-entity data for `bertctl finetune|evaluate|predict ner`: CoNLL-2003 text files, jsonl and hub copies.

A CoNLL file holds one word a line, its columns separated by spaces or tabs, the word first and the NER tag
last (`EU NNP B-NP B-ORG`, or `EU B-ORG`); a blank line ends a sentence and `-DOCSTART-` lines are skipped. A
file of one column has words only (for `predict ner`). A `.jsonl` file holds `{"tokens": [...], "ner_tags":
[...]}` a line, the tags as strings or, as the hub's `conll2003` has them, as class ids named by label names
given with them (`Dataset.to_json` writes such lines, in a .json file). A copy of the hub's conll2003 (a parquet
file, a `save_to_disk` split), or the hub dataset itself by id, holds the same rows and names its ids in its
ClassLabel features. Tags are O or
B-/I-/E-/S- plus a type (IOB1, IOB2, IOBES; see `metrics.entity_spans`).

Features follow transformers' run_ner.py (label_all_tokens off) and the paper (Devlin et al. 5.3): each word is
split into pieces, the word's tag goes on its first piece and -100 on the rest, on [CLS], [SEP] and padding;
a sentence longer than max_seq_length is cut, and its words past the cut get no prediction.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import numpy as np

from bertctl.data.batches import Ragged
from bertctl.data.glue import not_utf8
from bertctl.data.hub_copies import is_copy, read_copy, refuse_missing
from bertctl.data.jsonl import jsonl_values
from bertctl.errors import UsageError
from bertctl.files import user_path
from bertctl.tokenizer import ENCODE_CHUNK, BertTokenizer

IGNORED = -100  # the label of a position the loss and the scores skip (transformers' ignore_index)
_COLUMNS = re.compile(r"[ \t]+")
_TAG = re.compile(r"^(O|[BIES](-.+)?)$")
_FORMATS = ("a CoNLL-2003 text file, a .jsonl/.json file, a hub copy (.parquet, a save_to_disk folder) or a hub "
            "dataset id (eriktks/conll2003)")


@dataclass(frozen=True)
class NerData:
    """Sentences of words, with their tags when the file has them."""

    words: list[list[str]]
    tags: list[list[str]] | None  # None: a file of words only
    path: Path
    names: tuple[str, ...] | None = None  # a hub copy's ClassLabel names of its tag ids, in id order

    def __len__(self) -> int:
        return len(self.words)


def read_ner(path: Path | str, flag: str, need_tags: bool = True,
             label_names: Sequence[str] | None = None) -> NerData:
    """A CoNLL text file, JSON Lines (.jsonl, or .json as `Dataset.to_json` names it), or a hub copy (a .parquet
    file, a saved split); integer tags are named by the copy's ClassLabel names, else by `label_names`."""
    given, path = path, user_path(path, flag)
    refuse_missing(given, flag, _FORMATS, ("eriktks/conll2003",))  # as spelt: `./x/y` is a missing file, never a hub id
    names = None
    if is_copy(path):
        words, tags, names = _read_copy(path, flag, label_names)
    else:
        words, tags = _read_text(path, flag, label_names)
    if not any(words):  # rows of no tokens only: no tag to train a head on, no word to score
        raise UsageError(f"{flag} {path} holds no sentences; give {_FORMATS}")
    if need_tags and tags is None:
        raise UsageError(f"{flag} {path} has no NER tags (one column: words only); give a file with the tag as "
                         "the last column")
    return NerData(words, tags, path, names if tags is not None else None)


def _read_copy(path: Path, flag: str, label_names: Sequence[str] | None
               ) -> tuple[list, list | None, tuple[str, ...] | None]:
    """The hub's conll2003 rows: `tokens`, and `ner_tags` as ClassLabel ids (or tag strings); and the ClassLabel
    names, when the copy keeps them."""
    copy = read_copy(path, flag, ("tokens",), "the hub's columns tokens and ner_tags (eriktks/conll2003)")
    names = copy.names.get("ner_tags")
    for name in names or ():
        _check_tag(name, f"{copy.where}: ner_tags' ClassLabel names", " (IOB1, IOB2 or IOBES tags)")
    has_tags = "ner_tags" in copy.columns
    words: list[list[str]] = []
    tags: list[list[str]] = []
    for number, row in enumerate(copy.rows):
        at = copy.at(number)
        if not _strings(row["tokens"]):
            raise UsageError(f"{at}: tokens must be a list of strings, got {row['tokens']!r:.60}")
        words.append(row["tokens"])
        if has_tags:
            tags.append(_jsonl_tags(row["ner_tags"], len(row["tokens"]), names or label_names, at,
                                    "the copy's ClassLabel names" if names else "--label-names"))
    return words, (tags if has_tags else None), names


def _read_text(path: Path, flag: str, label_names: Sequence[str] | None) -> tuple[list, list | None]:
    """A CoNLL or JSON Lines file's sentences, built as its lines are read: the whole text and its list of lines
    held ~1 KB a sentence more. Lines end at \\n, \\r\\n or \\r only (file iteration's universal newlines):
    str.splitlines would also split at U+2028, U+0085, form feeds and \\x1c-\\x1e inside a word, which a jsonl
    string may hold raw."""
    where = f"{flag} {path}"
    try:
        with path.open(encoding="utf-8-sig") as lines:
            if path.suffix.lower() in (".jsonl", ".json"):
                return _read_jsonl(lines, where, label_names)
            return _read_conll(lines, where)
    except UnicodeDecodeError:
        raise not_utf8(path, "ner", flag) from None
    except OSError as exc:
        raise UsageError(f"{where}: cannot read it: {exc.strerror or exc}") from None


def _read_conll(lines: Iterable[str], where: str) -> tuple[list, list | None]:
    words: list[list[str]] = []
    tags: list[list[str]] = []
    sentence: list[list[str]] = []
    width = 0  # columns a line has in this file
    for number, line in enumerate(chain(lines, [""]), start=1):
        fields = _COLUMNS.split(line.strip(" \t\r\n"))
        if fields[0] == "-DOCSTART-" or not line.strip(" \t\r\n"):
            if sentence:
                words.append([f[0] for f in sentence])
                tags.append([sys.intern(f[-1]) for f in sentence])  # a handful of tags: one string each, not per word
                sentence = []
            continue
        width = width or len(fields)
        if len(fields) != width:
            raise UsageError(f"{where}:{number}: {len(fields)} columns where the file's first line has {width}; "
                             "give every word the same columns (word first, NER tag last)")
        if width > 1:
            _check_tag(fields[-1], f"{where}:{number}")
        sentence.append(fields)
    return words, (tags if width > 1 else None)


def _read_jsonl(lines: Iterable[str], where: str, label_names: Sequence[str] | None) -> tuple[list, list | None]:
    words: list[list[str]] = []
    tags: list[list[str]] = []
    has_tags = None
    for _, at, record in jsonl_values(lines, where):
        if not isinstance(record, dict) or not _strings(record.get("tokens")):
            raise UsageError(f'{at}: expected {{"tokens": [...], "ner_tags": [...]}} with the words as strings')
        if has_tags is None:
            has_tags = "ner_tags" in record
        if has_tags != ("ner_tags" in record):
            raise UsageError(f"{at}: ner_tags {'missing' if has_tags else 'present'} here but not on line 1; "
                             "give every line its tags, or none")
        words.append(record["tokens"])
        if has_tags:
            tags.append(_jsonl_tags(record["ner_tags"], len(record["tokens"]), label_names, at))
    return words, (tags if has_tags else None)


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _jsonl_tags(value: object, count: int, label_names: Sequence[str] | None, at: str,
                named_by: str = "--label-names") -> list[str]:
    if not isinstance(value, list) or len(value) != count:
        raise UsageError(f"{at}: ner_tags must be a list of one tag per token ({count}), got {value!r:.60}")
    if all(isinstance(v, str) for v in value):
        for tag in value:
            _check_tag(tag, at)
        return value
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise UsageError(f"{at}: ner_tags must be all strings or all class ids, got {value!r:.60}")
    if not label_names:
        raise UsageError(f"{at}: ner_tags are class ids; give --label-names with the tag of each id, in order "
                         "(conll2003: O,B-PER,I-PER,B-ORG,I-ORG,B-LOC,I-LOC,B-MISC,I-MISC)")
    if any(not 0 <= v < len(label_names) for v in value):
        raise UsageError(f"{at}: ner_tags holds an id outside 0..{len(label_names) - 1} ({named_by} name "
                         f"{len(label_names)} tags)")
    return [label_names[v] for v in value]


def _check_tag(tag: str, at: str, hint: str = "; the NER tag must be the last column") -> None:
    if not _TAG.match(tag):
        raise UsageError(f"{at}: tag {tag!r} is not O or B-/I-/E-/S-TYPE{hint}")


def check_tag_names(names: Sequence[str], flag: str) -> None:
    """Label names given by the user (or a model folder) are tags the metrics can read."""
    for name in names:
        _check_tag(name, flag, " (IOB1, IOB2 or IOBES tags)")


def tag_set(train: NerData, label_names: Sequence[str] | None,
            model_labels: Sequence[str] | None = None) -> tuple[str, ...]:
    """The head's tags in output order: the given label names, else a hub copy's ClassLabel names (all of them, in
    id order: run_ner.py's label list for the hub's conll2003), else the training tags sorted (run_ner.py's
    `sorted(set(labels))` of tag strings); as run_ner.py, the model's own id2label order when it names the same
    tags, so a fine-tuned head goes on predicting what it predicted."""
    found = {tag for sentence in train.tags or [] for tag in sentence}
    label_names = label_names or train.names
    if label_names:
        check_tag_names(label_names, "--label-names")
        missing = sorted(found - set(label_names))
        if missing:
            raise UsageError(f"--train {train.path} has the tags {', '.join(missing)}, which --label-names lacks")
    tags = tuple(label_names) if label_names else tuple(sorted(found))
    if model_labels and sorted(model_labels) == sorted(tags):
        return tuple(model_labels)
    return tags


def check_known(data: NerData, labels: Sequence[str], flag: str, owner: str) -> None:
    """Every tag of `data` is one the model predicts (`owner`: the model or training file naming them)."""
    unknown = sorted({tag for sentence in data.tags or [] for tag in sentence} - set(labels))
    if unknown:
        raise UsageError(f"{flag} {data.path} has the tags {', '.join(unknown)}, which {owner} does not know "
                         f"(it predicts {', '.join(labels)})")


@dataclass(frozen=True)
class NerFeatures:
    """Encoded sentences: `[CLS] pieces [SEP]` ids, piece labels, and where each word's first piece is; each
    sentence's a view of one array for all (a Ragged: an array each held ~110 bytes of object a sentence)."""

    data: NerData
    input_ids: Sequence[np.ndarray]  # int32
    labels: Sequence[np.ndarray] | None  # int64 per piece: the tag id on a word's first piece, IGNORED elsewhere
    first_piece: Ragged  # int64 per word: the position of its first piece in the row, -1 if it has none
    lengths: np.ndarray  # (N,) tokens per row
    truncated: int  # sentences cut to max_seq_length

    def __len__(self) -> int:
        return len(self.input_ids)


def make_ner_features(tokenizer: BertTokenizer, data: NerData, labels: Sequence[str] | None,
                      max_seq_length: int) -> NerFeatures:
    """Split every word into pieces (the words as given, each pre-tokenized and normalized alone, as a fast
    tokenizer's `is_split_into_words` does), cut to max_seq_length, and put each word's tag on its first
    piece. `labels`: the tag of each output, to label the pieces (None: no labels)."""
    index = {tag: i for i, tag in enumerate(labels)} if labels is not None and data.tags is not None else None
    cls, sep, room = tokenizer.cls_id, tokenizer.sep_id, max_seq_length - 2
    ids, piece_labels, firsts, lengths, truncated = [], [], [], [], 0  # per chunk: its ids, labels, first pieces
    for lo in range(0, len(data.words), ENCODE_CHUNK):
        encodings = tokenizer.backend.encode_batch(data.words[lo:lo + ENCODE_CHUNK], is_pretokenized=True,
                                                   add_special_tokens=False)
        flat_ids: list[int] = []
        flat_labels: list[int] = []
        flat_firsts: list[int] = []
        for row, encoding in enumerate(encodings, start=lo):
            word_ids = encoding.word_ids[:room]
            truncated += len(encoding.ids) > room
            first = [-1] * len(data.words[row])
            for position in range(len(word_ids) - 1, -1, -1):  # backwards: the first piece is written last
                first[word_ids[position]] = position + 1  # after [CLS]
            flat_ids += [cls, *encoding.ids[:room], sep]
            lengths.append(len(word_ids) + 2)
            flat_firsts += first
            if index is not None:
                label = [IGNORED] * (len(word_ids) + 2)
                for tag, at in zip(data.tags[row], first, strict=True):
                    if at >= 0:
                        label[at] = index[tag]
                flat_labels += label
        ids.append(np.asarray(flat_ids, dtype=np.int32))
        firsts.append(np.asarray(flat_firsts, dtype=np.int64))
        piece_labels.append(np.asarray(flat_labels, dtype=np.int64))
    tokens = np.asarray(lengths, dtype=np.int64)
    return NerFeatures(data, Ragged.joined(ids, tokens, np.int32),
                       Ragged.joined(piece_labels, tokens, np.int64) if index is not None else None,
                       Ragged.joined(firsts, np.fromiter(map(len, data.words), dtype=np.int64), np.int64),
                       tokens, truncated)
