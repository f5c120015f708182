"""SQuAD v1.1 / v2.0: the official JSON read as google-research/bert's run_squad.py reads it, and questions
turned into its features.

A context is split into words on whitespace (with a character -> word map, so an answer's `answer_start` finds
its words); each word is cut into WordPieces; a question longer than `max_query_length` pieces is cut; a context
longer than what is left of `max_seq_length` becomes several windows `doc_stride` pieces apart, each a feature
`[CLS] query [SEP] window [SEP]` (segments 0 then 1). A piece seen by several windows belongs, for prediction,
to the one where it has the most context on both sides. Training labels are the answer's first and last piece
(narrowed to the answer's own pieces, `_improve_answer_span`), or [CLS] (0, 0) when the window does not hold
the whole answer or the question has none (v2.0).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from bertctl.data import squad_rows
from bertctl.data.glue import not_utf8
from bertctl.data.hub_copies import is_copy, refuse_missing
from bertctl.data.jsonl import jsonl_values
from bertctl.data.squad_rows import Paragraphs
from bertctl.errors import UsageError
from bertctl.files import user_path
from bertctl.tokenizer import ENCODE_CHUNK, BertTokenizer

WHITESPACE = frozenset(" \t\r\n\u202f")  # run_squad.py's is_whitespace: the only word separators
log = logging.getLogger(__name__)
HUB_IDS = ("rajpurkar/squad", "rajpurkar/squad_v2")
_FORMATS = ("a SQuAD v1.1/v2.0 JSON file, a hub copy (.parquet, a save_to_disk folder, to_json lines) or a hub "
            "dataset id (rajpurkar/squad or rajpurkar/squad_v2)")


@dataclass(frozen=True)
class SquadExample:
    """One question on one paragraph; `start_word`/`end_word` only for a training answer (-1 otherwise)."""

    qid: str
    question: str
    paragraph: int  # index into SquadData.paragraphs
    answers: tuple[str, ...]  # every gold answer's text (empty: no answer, or not given)
    answer_text: str = ""  # the training answer (the first one)
    start_word: int = -1
    end_word: int = -1
    impossible: bool = False  # v2.0's is_impossible


@dataclass
class SquadData:
    """A SQuAD file's questions, with each paragraph's words once."""

    examples: list[SquadExample]
    paragraphs: list[list[str]]  # each context's whitespace-separated words
    version: str  # "1.1" or "2.0"
    source: Path
    skipped: int = 0  # training questions whose answer text is not at its answer_start (run_squad skips them)

    def words(self, example: SquadExample) -> list[str]:
        return self.paragraphs[example.paragraph]


class _Parsed(NamedTuple):
    """A file's questions in the official layout's order, and the versions it declares and implies."""

    paragraphs: Paragraphs
    declared: str | None  # the version the file states (hub rows: 2.0 when a question has no answer), if any
    detected: str  # the declared version, else 2.0 when a question is impossible, else 1.1


def read_squad(path: Path | str, mode: str = "score", flag: str = "--data", version: str | None = None,
               fallback: str | None = None) -> SquadData:
    """The file's questions. `mode`: "train" (one answer per answerable question, located in the context),
    "score" (answers needed), "predict" (answers not read). `version` overrides the detected one; `fallback`
    is the version of a file that states none (a test file may lack both `version` and is_impossible)."""
    given, path = path, user_path(path, flag)
    refuse_missing(given, flag, _FORMATS, HUB_IDS)  # as spelt: `./x/y` is a missing file, never a hub id
    parsed = _load(path, flag, mode)
    version = version or (fallback if parsed.declared is None else None) or parsed.detected
    examples, paragraphs, skipped = [], [], 0
    first_seen: dict[str, str] = {}  # question id -> where it first is
    for context, questions in parsed.paragraphs:
        words, word_of_char = split_words(context)
        paragraphs.append(words)
        for where, qa in questions:
            example = _example(qa, len(paragraphs) - 1, words, word_of_char, mode, version, path, where)
            if example is None:
                skipped += 1
                continue
            if mode != "train":
                _check_answerable(example, where, first_seen, mode, version, path)
            examples.append(example)
    if not examples:
        lost = f" ({skipped} skipped: answer not at its answer_start)" if skipped else ""
        raise UsageError(f"{flag} {path} has no {'training ' if mode == 'train' else ''}questions{lost}; give a "
                         "SQuAD v1.1/v2.0 file with some")
    return SquadData(examples, paragraphs, version, path, skipped)


def as_v2(data: SquadData) -> SquadData:
    """Training questions read as v1.1 as a v2.0 run takes them (its --validation file is v2.0): the same ones,
    since none is impossible (one would have made the file read as 2.0), so the file is not read again (a second
    read took ~1 s per 20k questions)."""
    return replace(data, version="2.0")


def _check_answerable(example: SquadExample, where: str, first_seen: dict[str, str], mode: str, version: str,
                      path: Path) -> None:
    """Refuse what predictions.json and the official scripts cannot score: an id given to two questions
    (predictions.json holds one answer per id) and, for scoring v1.1, a question without a gold answer."""
    if example.qid in first_seen:
        raise UsageError(f"{path}: {where} repeats the id {example.qid!r} of {first_seen[example.qid]}; give each "
                         "question its own id (predictions.json holds one answer per id)")
    first_seen[example.qid] = where
    if mode == "score" and version == "1.1" and not example.answers:
        raise UsageError(f"{path}: {where} (id {example.qid}) has no answers; a SQuAD v1.1 question needs one to "
                         'be scored (a v2.0 file says "version": "v2.0")')


def _load(path: Path, flag: str, mode: str) -> _Parsed:
    """The official JSON, or the hub's flat rows: a parquet file or saved split, JSON Lines, {"data": [rows]}."""
    if is_copy(path):
        return _flat(squad_rows.copy_rows(path, flag, mode), path, mode)
    try:
        text = path.read_text(encoding="utf-8-sig")
        raw = json.loads(text)
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot read it: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        if exc.msg != "Extra data":  # more than one JSON value: JSON Lines, as Dataset.to_json writes
            raise UsageError(f"{flag} {path} is not a SQuAD JSON file ({str(exc).splitlines()[0]})") from None
        rows = [(f"line {number}", row) for number, _, row in jsonl_values(text.split("\n"), f"{flag} {path}")]
        return _flat(rows, path, mode)
    except UnicodeDecodeError:
        raise not_utf8(path, "squad", flag) from None
    if (rows := squad_rows.json_rows(raw)) is not None:
        return _flat(rows, path, mode)
    if not isinstance(raw, dict) or not isinstance(raw.get("data"), list):
        raise UsageError(f"{flag} {path} is not a SQuAD JSON file: it needs a top-level \"data\" list of articles "
                         f"(or rows of {squad_rows.LAYOUT})")
    return _nested(raw, path)


def _flat(rows: list[tuple[str, Any]], path: Path, mode: str) -> _Parsed:
    paragraphs, declared = squad_rows.paragraphs(rows, path, mode)
    return _Parsed(paragraphs, declared, declared or "1.1")


def _nested(raw: dict[str, Any], path: Path) -> _Parsed:
    """The official layout's paragraphs; 2.0 when it says so (`"version": "v2.0"`) or a question is impossible."""
    paragraphs: Paragraphs = []
    for i, entry in enumerate(raw["data"]):
        for j, paragraph in enumerate(_field(entry, "paragraphs", list, path, f"data[{i}]")):
            where = f"data[{i}].paragraphs[{j}]"
            questions = _field(paragraph, "qas", list, path, where)
            context = _field(paragraph, "context", str, path, where)
            paragraphs.append((context, [(f"{where}.qas[{k}]", qa) for k, qa in enumerate(questions)]))
    stated = str(raw.get("version", "")).lstrip("vV")
    declared = "2.0" if stated.startswith("2") else "1.1" if stated.startswith("1") else None
    impossible = any(isinstance(qa, dict) and qa.get("is_impossible") for _, questions in paragraphs
                     for _, qa in questions)
    return _Parsed(paragraphs, declared, "2.0" if declared == "2.0" or impossible else "1.1")


_JSON_KINDS = {str: "a string", int: "a whole number", list: "a list", dict: "an object"}  # said in JSON's terms


def _field(record: Any, name: str, kind: type | tuple[type, ...], path: Path, where: str) -> Any:
    if not isinstance(record, dict) or not isinstance(record.get(name), kind) or isinstance(record.get(name), bool):
        kinds = " or ".join(_JSON_KINDS[k] for k in (kind if isinstance(kind, tuple) else (kind,)))
        what = "is missing" if not isinstance(record, dict) or name not in record else f"is not {kinds}"
        raise UsageError(f"{path}: {where}.{name} {what}; give a SQuAD v1.1/v2.0 JSON file")
    return record[name]


def split_words(context: str) -> tuple[list[str], list[int]]:
    """run_squad.py's whitespace words, and for each character the word it is in (a space: the word before).
    Each word is cut from the context once: grown a character at a time, as run_squad.py does, a word of
    1 MB (a context without spaces) took ~25 s and one of 3 MB minutes."""
    starts: list[int] = []
    ends: list[int] = []
    word_of_char = []
    after_space = True
    for index, char in enumerate(context):
        if char in WHITESPACE:
            if not after_space:
                ends.append(index)
            after_space = True
        else:
            if after_space:
                starts.append(index)
            after_space = False
        word_of_char.append(len(starts) - 1)
    ends.append(len(context))  # the last word's end, when the context does not end in whitespace
    return [context[start:end] for start, end in zip(starts, ends, strict=False)], word_of_char


def _example(qa: Any, paragraph: int, words: list[str], word_of_char: list[int], mode: str, version: str,
             path: Path, where: str) -> SquadExample | None:
    qid = _field(qa, "id", (str, int), path, where)
    question = _field(qa, "question", str, path, where)
    answers: list[Any] = [] if mode == "predict" and "answers" not in qa else _field(qa, "answers", list, path,
                                                                                      where)
    texts = tuple(_field(a, "text", str, path, f"{where}.answers[{n}]") for n, a in enumerate(answers))
    impossible = version == "2.0" and bool(qa.get("is_impossible", False))
    if mode != "train" or impossible:
        return SquadExample(str(qid), question, paragraph, texts, impossible=impossible)
    if len(answers) != 1:
        raise UsageError(f"{path}: {where} (id {qid}) has {len(answers)} answers; a training question needs "
                         "exactly one" + (" (or is_impossible true)" if version == "2.0" else ""))
    start = _field(answers[0], "answer_start", int, path, f"{where}.answers[0]")
    end = start + len(texts[0]) - 1
    found = 0 <= start <= end < len(word_of_char)
    if found:
        start_word, end_word = word_of_char[start], word_of_char[end]
        found = " ".join(texts[0].split()) in " ".join(words[start_word:end_word + 1])
    if not found:
        log.warning("warning: %s: could not find answer %r of %s at answer_start %d; skipping it (run_squad.py "
                    "skips an answer text it cannot find at its answer_start)", path, texts[0], qid, start)
        return None
    return SquadExample(str(qid), question, paragraph, texts, texts[0], start_word, end_word)


# --- features ------------------------------------------------------------------------------------------

@dataclass
class SquadFeatures:
    """Every question's windows as model inputs (unpadded), with what maps a window's tokens back to words."""

    input_ids: list[np.ndarray]
    token_type_ids: list[np.ndarray]
    lengths: np.ndarray  # (N,) tokens per feature
    example_index: np.ndarray  # (N,) the question each feature windows
    doc_start: np.ndarray  # (N,) the window's first piece, in the context's pieces
    doc_offset: np.ndarray  # (N,) the window's first token in the feature: len(query) + 2
    max_context: list[np.ndarray]  # per feature, bool per window piece: this window is the piece's best one
    start_positions: np.ndarray | None = None  # (N,) training labels: token of the answer's start (0: [CLS])
    end_positions: np.ndarray | None = None
    truncated: int = 0  # questions cut to max_query_length pieces
    width: int = 0  # max_seq_length: every batch is padded to it, as run_squad.py pads its features, so the
    # start/end softmax (loss and n-best) spans the same positions however the windows are batched
    data: SquadData | None = None
    pieces: list[list[str]] = field(default_factory=list)  # per paragraph: its words' WordPieces
    piece_ids: list[list[int]] = field(default_factory=list)  # per paragraph: their ids
    piece_word: list[np.ndarray] = field(default_factory=list)  # per paragraph: the word of each piece

    def __len__(self) -> int:
        return len(self.input_ids)


def word_pieces(tokenizer: BertTokenizer, texts: list[str]) -> list[tuple[list[str], list[int]]]:
    """Each text's WordPieces and their ids, a chunk of texts per call."""
    pieces = []
    for lo in range(0, len(texts), ENCODE_CHUNK):
        pieces += [(e.tokens, e.ids)
                   for e in tokenizer.encode_batch(texts[lo:lo + ENCODE_CHUNK], add_special_tokens=False)]
    return pieces


def _paragraph_pieces(tokenizer: BertTokenizer, data: SquadData
                      ) -> tuple[list[list[str]], list[list[int]], list[np.ndarray]]:
    """Every paragraph's words cut into pieces (one batch of all words), their ids, and each piece's word."""
    flat = word_pieces(tokenizer, [w for words in data.paragraphs for w in words])
    pieces, ids, piece_word, at = [], [], [], 0
    for words in data.paragraphs:
        per_word = flat[at:at + len(words)]
        at += len(words)
        pieces.append([p for word, _ in per_word for p in word])
        ids.append([i for _, word in per_word for i in word])
        piece_word.append(np.asarray([i for i, (word, _) in enumerate(per_word) for _ in word], dtype=np.int64))
    return pieces, ids, piece_word


def doc_spans(n_pieces: int, room: int, stride: int) -> list[tuple[int, int]]:
    """(start, length) windows of at most `room` pieces, each `stride` after the previous one (run_squad.py's)."""
    spans, start = [], 0
    while start < n_pieces:
        length = min(n_pieces - start, room)
        spans.append((start, length))
        if start + length == n_pieces:
            break
        start += min(length, stride)
    return spans


def max_context(spans: list[tuple[int, int]], index: int, position: int) -> bool:
    """Whether window `index` gives the piece at `position` the most context: the larger of min(left, right)
    context, plus a hundredth of the window's length; the first window wins a tie."""
    best, best_index = None, None
    for i, (start, length) in enumerate(spans):
        end = start + length - 1
        if start <= position <= end:
            score = min(position - start, end - position) + 0.01 * length
            if best is None or score > best:
                best, best_index = score, i
    return best_index == index


def improve_answer_span(pieces: list[str], start: int, end: int, answer_pieces: list[str]) -> tuple[int, int]:
    """The smallest run of pieces inside [start, end] that spells the answer's own pieces (`1895` out of the
    word `(1895-1943).`), else [start, end] unchanged."""
    wanted = " ".join(answer_pieces)
    for new_start in range(start, end + 1):
        for new_end in range(end, new_start - 1, -1):
            if " ".join(pieces[new_start:new_end + 1]) == wanted:
                return new_start, new_end
    return start, end


def make_features(tokenizer: BertTokenizer, data: SquadData, max_seq_length: int, doc_stride: int,
                  max_query_length: int, training: bool) -> SquadFeatures:
    """run_squad.py's convert_examples_to_features, unpadded; with `training`, its start/end labels."""
    pieces, piece_ids, piece_word = _paragraph_pieces(tokenizer, data)
    questions = word_pieces(tokenizer, [e.question for e in data.examples])
    answers = word_pieces(tokenizer, [e.answer_text for e in data.examples]) if training else []
    cls, sep = tokenizer.cls_id, tokenizer.sep_id
    out: dict[str, list[Any]] = {k: [] for k in ("ids", "types", "example", "start", "offset", "context",
                                                 "label_start", "label_end")}
    truncated = 0
    for index, example in enumerate(data.examples):
        query = questions[index][1][:max_query_length]
        truncated += len(questions[index][1]) > max_query_length
        doc, doc_ids, words = pieces[example.paragraph], piece_ids[example.paragraph], piece_word[example.paragraph]
        answer = _answer_pieces(example, doc, words, answers[index][0]) if training else None
        spans = doc_spans(len(doc), max_seq_length - len(query) - 3, doc_stride)
        offset = len(query) + 2
        for span_index, (start, length) in enumerate(spans):
            out["ids"].append(np.asarray([cls, *query, sep, *doc_ids[start:start + length], sep], dtype=np.int32))
            types = np.zeros(offset + length + 1, dtype=np.int8)
            types[offset:] = 1
            out["types"].append(types)
            out["example"].append(index)
            out["start"].append(start)
            out["offset"].append(offset)
            out["context"].append(np.asarray([max_context(spans, span_index, start + i) for i in range(length)]))
            if answer is not None:
                inside = answer[0] >= start and answer[1] <= start + length - 1 and answer[0] >= 0
                out["label_start"].append(answer[0] - start + offset if inside else 0)
                out["label_end"].append(answer[1] - start + offset if inside else 0)
    labels = (np.asarray(out["label_start"], dtype=np.int64), np.asarray(out["label_end"], dtype=np.int64)) \
        if training else (None, None)
    lengths = np.fromiter(map(len, out["ids"]), dtype=np.int64, count=len(out["ids"]))
    return SquadFeatures(out["ids"], out["types"], lengths, np.asarray(out["example"], dtype=np.int64),
                         np.asarray(out["start"], dtype=np.int64), np.asarray(out["offset"], dtype=np.int64),
                         out["context"], *labels, truncated=truncated, width=max_seq_length, data=data,
                         pieces=pieces, piece_ids=piece_ids, piece_word=piece_word)


def _answer_pieces(example: SquadExample, doc: list[str], words: np.ndarray, answer: list[str]) -> tuple[int, int]:
    """The training answer as the context's first and last piece; (-1, -1) for a question without one."""
    if example.impossible:
        return -1, -1
    start = int(np.searchsorted(words, example.start_word))  # the word's first piece
    end = int(np.searchsorted(words, example.end_word + 1)) - 1  # the last piece before the next word
    return improve_answer_span(doc, start, end, answer)
