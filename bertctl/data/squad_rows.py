"""SQuAD as the Hugging Face hub holds it (rajpurkar/squad, rajpurkar/squad_v2): one flat row per question,
`id, title, context, question, answers = {text: [...], answer_start: [...]}`, loaded by hub id, in a parquet file, a
saved split, JSON Lines (`Dataset.to_json`) or the `{"data": [rows]}` JSON that transformers' run_qa.py reads.

Each row becomes a question of the official layout (`{"id", "question", "answers": [{"text", "answer_start"}],
"is_impossible"}`) and consecutive rows of the same title and context one paragraph, so the official reader
makes the same examples of them as of the original file. A question without answers is squad_v2's unanswerable
one: such a row makes the copy v2.0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bertctl.data.hub_copies import read_copy
from bertctl.errors import UsageError

COLUMNS = ("id", "context", "question")  # and `answers`, but to predict; `title` is optional
LAYOUT = "the hub's columns id, title, context, question, answers (rajpurkar/squad)"
Paragraphs = list[tuple[str, list[tuple[str, Any]]]]  # (context, [(where, question)]) in file order


def copy_rows(path: Path, flag: str, mode: str) -> list[tuple[str, Any]]:
    """(where, row) of a hub split, a parquet file or a saved split."""
    copy = read_copy(path, flag, COLUMNS + (() if mode == "predict" else ("answers",)), LAYOUT)
    return [(f"row {number}", row) for number, row in enumerate(copy.rows, start=1)]


def json_rows(raw: Any) -> list[tuple[str, Any]] | None:
    """(where, row) of a parsed JSON file of flat rows: `{"data": [rows]}`, or the one row of a one-line JSON
    Lines file; None for anything else (the official layout, whose articles have `paragraphs`)."""
    if not isinstance(raw, dict):
        return None
    data = raw.get("data")
    if isinstance(data, list) and data and isinstance(data[0], dict) and "paragraphs" not in data[0]:
        return [(f"data[{i}]", row) for i, row in enumerate(data)]
    return [("line 1", raw)] if "data" not in raw and "question" in raw else None


def paragraphs(rows: list[tuple[str, Any]], path: Path, mode: str) -> tuple[Paragraphs, str | None]:
    """The rows as the official layout's paragraphs, and "2.0" when a question has no answer, else None (the
    rows do not say which version they are)."""
    found: Paragraphs = []
    last: tuple[Any, str] | None = None
    unanswerable = False
    for where, row in rows:
        question = _question(row, path, where, mode)
        unanswerable |= question.get("is_impossible", False)
        if (row.get("title"), row["context"]) != last:
            last = (row.get("title"), row["context"])
            found.append((row["context"], []))
        found[-1][1].append((where, question))
    return found, "2.0" if unanswerable else None


def _question(row: Any, path: Path, where: str, mode: str) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise UsageError(f"{path}: {where} is not an object; give rows of {LAYOUT}")
    required = COLUMNS if mode == "predict" else (*COLUMNS, "answers")
    missing = [c for c in required if row.get(c) is None]
    if missing:
        raise UsageError(f"{path}: {where} has no {', '.join(missing)}; give rows of {LAYOUT}")
    for name in ("context", "question"):
        if not isinstance(row[name], str):
            raise UsageError(f"{path}: {where}: {name} is {type(row[name]).__name__}, not text")
    if not isinstance(row["id"], (str, int)) or isinstance(row["id"], bool):
        raise UsageError(f"{path}: {where}: id is {type(row['id']).__name__}; give text or a number")
    question = {"id": row["id"], "question": row["question"]}
    if row.get("answers") is None:  # predicting: the answers are not needed
        return question
    texts, starts = _answers(row["answers"], path, where)
    return {**question, "answers": [{"text": t, "answer_start": s} for t, s in zip(texts, starts, strict=True)],
            "is_impossible": not texts}


def _answers(answers: Any, path: Path, where: str) -> tuple[list[str], list[int]]:
    texts = answers.get("text") if isinstance(answers, dict) else None
    starts = answers.get("answer_start") if isinstance(answers, dict) else None
    if (not isinstance(texts, list) or not isinstance(starts, list) or len(texts) != len(starts)
            or not all(isinstance(t, str) for t in texts)
            or not all(isinstance(s, int) and not isinstance(s, bool) for s in starts)):
        raise UsageError(f"{path}: {where}: answers must be {{text: [strings], answer_start: [integers]}} of one "
                         f"length, got {answers!r:.80}")
    return texts, starts
