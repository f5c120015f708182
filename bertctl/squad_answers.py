"""From start/end logits to answer texts, as google-research/bert's run_squad.py `write_predictions` does.

Per question, over all its windows: the `n_best_size` highest start and end logits of each window are paired;
a pair counts when both ends are in the window's context, the start piece has its most context in that window,
and the span is at most `max_answer_length` pieces. The best spans (by start + end logit) become text: the
pieces joined back into words, then aligned character by character with the context's own words
(`final_text`), so the answer keeps the context's case and accents. SQuAD 2.0 adds the no-answer option, whose
score is the lowest [CLS] start + end over the windows: "" is predicted when it beats the best span by more
than `null_score_diff_threshold` (the difference is the question's null odds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from bertctl.data.squad import SquadFeatures
from bertctl.tokenizer import BertTokenizer


@dataclass(frozen=True)
class AnswerSettings:
    n_best_size: int = 20
    max_answer_length: int = 30
    null_score_diff_threshold: float = 0.0
    with_null: bool = False  # SQuAD 2.0: questions may have no answer


@dataclass
class Answers:
    """What run_squad.py writes: predictions.json, nbest_predictions.json and (v2.0) null_odds.json."""

    predictions: dict[str, str]
    nbest: dict[str, list[dict[str, Any]]]
    null_odds: dict[str, float] | None


def best_indexes(logits: np.ndarray, n: int) -> list[int]:
    """The n highest logits' positions, highest first; a tie keeps the earlier position first."""
    return [int(i) for i in np.argsort(-logits, kind="stable")[:n]]


def softmax(scores: list[float]) -> list[float]:
    """run_squad.py's n-best probabilities to the last bit: its total adds the exponentials one by one, in order,
    which Python 3.12's sum() no longer does (it compensates the rounding)."""
    if not scores:
        return []
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = 0.0
    for e in exps:
        total += e
    return [e / total for e in exps]


def answers_from_logits(features: SquadFeatures, start_logits: list[np.ndarray], end_logits: list[np.ndarray],
                        tokenizer: BertTokenizer, settings: AnswerSettings) -> Answers:
    """Every question's answer, n-best list and (with_null) null odds, in the data's question order."""
    data = features.data
    assert data is not None  # features made for prediction keep their data
    windows: list[list[int]] = [[] for _ in data.examples]
    for feature, example in enumerate(features.example_index):
        windows[example].append(feature)
    answers = Answers({}, {}, {} if settings.with_null else None)
    for index, example in enumerate(data.examples):
        text, nbest, odds = _answer(features, windows[index], start_logits, end_logits, tokenizer, settings,
                                    data.words(example), example.paragraph)
        answers.predictions[example.qid] = text
        answers.nbest[example.qid] = nbest
        if answers.null_odds is not None:
            answers.null_odds[example.qid] = odds
    return answers


@dataclass(frozen=True)
class _Span:
    feature: int
    start: int
    end: int
    start_logit: float
    end_logit: float


def _answer(features: SquadFeatures, windows: list[int], start_logits: list[np.ndarray],
            end_logits: list[np.ndarray], tokenizer: BertTokenizer, settings: AnswerSettings, words: list[str],
            paragraph: int) -> tuple[str, list[dict[str, Any]], float]:
    spans: list[_Span] = []
    null: _Span | None = None
    for feature in windows:
        starts, ends = start_logits[feature], end_logits[feature]
        null_start, null_end = float(starts[0]), float(ends[0])
        if settings.with_null and (null is None or null_start + null_end < null.start_logit + null.end_logit):
            null = _Span(feature, 0, 0, null_start, null_end)
        spans += _candidates(features, feature, starts, ends, settings)
    if null is not None:
        spans.append(null)
    spans.sort(key=lambda s: s.start_logit + s.end_logit, reverse=True)
    nbest = _nbest(features, spans, tokenizer, settings, words, paragraph)
    if null is not None and not any(entry["text"] == "" for entry in nbest):
        nbest.append({"text": "", "start_logit": null.start_logit, "end_logit": null.end_logit})
    if not nbest:  # no valid span (v1.1: run_squad.py's nonce answer) or no window at all (v2.0: no answer)
        nbest.append({"text": "" if settings.with_null else "empty", "start_logit": 0.0, "end_logit": 0.0})
    for entry, probability in zip(nbest, softmax([e["start_logit"] + e["end_logit"] for e in nbest]), strict=True):
        entry["probability"] = probability
    nbest = [{k: e[k] for k in ("text", "probability", "start_logit", "end_logit")} for e in nbest]
    if null is None:
        return nbest[0]["text"], nbest, 0.0
    best = next((e for e in nbest if e["text"]), {"text": "", "start_logit": 0.0, "end_logit": 0.0})
    odds = null.start_logit + null.end_logit - best["start_logit"] - best["end_logit"]
    return ("" if odds > settings.null_score_diff_threshold else best["text"]), nbest, odds


def _candidates(features: SquadFeatures, feature: int, starts: np.ndarray, ends: np.ndarray,
                settings: AnswerSettings) -> list[_Span]:
    offset, context = int(features.doc_offset[feature]), features.max_context[feature]
    found = []
    for start in best_indexes(starts, settings.n_best_size):
        for end in best_indexes(ends, settings.n_best_size):
            in_doc = offset <= start < offset + len(context) and offset <= end < offset + len(context)
            if not in_doc or not context[start - offset] or end < start:
                continue
            if end - start + 1 > settings.max_answer_length:
                continue
            found.append(_Span(feature, start, end, float(starts[start]), float(ends[end])))
    return found


def _nbest(features: SquadFeatures, spans: list[_Span], tokenizer: BertTokenizer, settings: AnswerSettings,
           words: list[str], paragraph: int) -> list[dict[str, Any]]:
    """The best distinct texts, at most n_best_size; the null span is the text ""."""
    pieces, piece_word = features.pieces[paragraph], features.piece_word[paragraph]
    seen: set[str] = set()
    nbest = []
    for span in spans:
        if len(nbest) >= settings.n_best_size:
            break
        text = ""
        if span.start > 0:
            first = int(features.doc_start[span.feature]) + span.start - int(features.doc_offset[span.feature])
            last = first + span.end - span.start
            joined = " ".join(pieces[first:last + 1]).replace(" ##", "").replace("##", "")
            original = " ".join(words[piece_word[first]:piece_word[last] + 1])
            text = final_text(" ".join(joined.split()), original, tokenizer)
            if text in seen:
                continue
        seen.add(text)
        nbest.append({"text": text, "start_logit": span.start_logit, "end_logit": span.end_logit})
    return nbest


def basic_tokens(text: str, tokenizer: BertTokenizer) -> list[str]:
    """Google's BasicTokenizer on `text` (clean-up, casing, accents, punctuation split): the tokenizer's own
    normalizer and pre-tokenizer, before WordPiece."""
    backend = tokenizer.backend
    if backend.normalizer is not None:
        text = backend.normalizer.normalize_str(text)
    if backend.pre_tokenizer is None:
        return text.split()
    return [word for word, _ in backend.pre_tokenizer.pre_tokenize_str(text)]


def final_text(predicted: str, original: str, tokenizer: BertTokenizer) -> str:
    """`predicted` (normalized pieces) as the matching characters of `original` (the context's words): both
    are stripped of spaces and, when the tokenized original is as long, aligned character by character;
    otherwise, or when the prediction is not found, `original` itself (run_squad.py's get_final_text)."""
    tokenized = " ".join(basic_tokens(original, tokenizer))
    start = tokenized.find(predicted)
    if start == -1:
        return original
    end = start + len(predicted) - 1
    original_chars = [i for i, c in enumerate(original) if c != " "]
    tokenized_chars = [i for i, c in enumerate(tokenized) if c != " "]
    if len(original_chars) != len(tokenized_chars):
        return original
    to_stripped = {at: i for i, at in enumerate(tokenized_chars)}
    if start not in to_stripped or end not in to_stripped:
        return original
    return original[original_chars[to_stripped[start]]:original_chars[to_stripped[end]] + 1]
