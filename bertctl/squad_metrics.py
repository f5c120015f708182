"""SQuAD's official scores, as its evaluation scripts (v1.1 and v2.0) compute them: exact match and token F1
of the normalized answer (lowercased, punctuation and the articles a/an/the dropped, whitespace collapsed), the
best over the gold answers, × 100. v2.0 adds the answerable (HasAns_) and unanswerable (NoAns_) questions
apart, and the best scores over thresholds on the no-answer odds, as `--na-prob-file null_odds.json` gives them.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence

from bertctl.errors import BertctlError

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
NA_PROB_THRESHOLD = 1.0  # evaluate-v2.0.py's --na-prob-thresh default


def normalize_answer(text: str) -> str:
    """Lowercase, drop ASCII punctuation, then the articles, then collapse whitespace (the scripts' order)."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(gold: str, prediction: str) -> int:
    return int(normalize_answer(gold) == normalize_answer(prediction))


def f1_v1(gold: str, prediction: str) -> float:
    """evaluate-v1.1.py's F1: no shared token (two empty answers included) scores 0."""
    return _f1(normalize_answer(gold).split(), normalize_answer(prediction).split())


def f1_v2(gold: str, prediction: str) -> float:
    """evaluate-v2.0.py's F1: where either answer is empty (no answer), 1 if both are, else 0."""
    gold_tokens = normalize_answer(gold).split() if gold else []
    predicted = normalize_answer(prediction).split() if prediction else []
    if not gold_tokens or not predicted:
        return float(gold_tokens == predicted)
    return _f1(gold_tokens, predicted)


def _f1(gold: list[str], predicted: list[str]) -> float:
    same = sum((Counter(gold) & Counter(predicted)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def squad_v1_scores(gold: Mapping[str, Sequence[str]], predictions: Mapping[str, str]) -> dict[str, float]:
    """{exact_match, f1} over every question of `gold` (qid -> answer texts); a question without a prediction
    scores 0, as in evaluate-v1.1.py."""
    exact = f1 = 0.0
    for qid, answers in gold.items():
        if qid in predictions:
            exact += max(exact_match(a, predictions[qid]) for a in answers)
            f1 += max(f1_v1(a, predictions[qid]) for a in answers)
    total = len(gold) or 1
    return {"exact_match": 100.0 * exact / total, "f1": 100.0 * f1 / total}


def squad_v2_scores(gold: Mapping[str, Sequence[str]], predictions: Mapping[str, str],
                    null_odds: Mapping[str, float] | None = None) -> dict[str, float]:
    """evaluate-v2.0.py's output: exact, f1, total, HasAns_* and NoAns_* (when there are such questions) and,
    given the no-answer odds, best_exact/best_f1 with their thresholds. A question without a prediction is
    refused in one line: the script skips it, then stops with a KeyError at the HasAns_/NoAns_ figures."""
    if missing := [qid for qid in gold if qid not in predictions]:
        raise BertctlError(f"squad_v2_scores: no prediction for {len(missing)} of {len(gold)} questions (the first: "
                           f"{missing[0]!r}); give one for every question, \"\" for no answer")
    has_answer = {qid: bool(answers) for qid, answers in gold.items()}
    exact_raw, f1_raw = {}, {}
    for qid, answers in gold.items():
        texts = [a for a in answers if normalize_answer(a)] or [""]
        exact_raw[qid] = max(exact_match(a, predictions[qid]) for a in texts)
        f1_raw[qid] = max(f1_v2(a, predictions[qid]) for a in texts)
    odds = dict(null_odds) if null_odds is not None else dict.fromkeys(predictions, 0.0)
    exact = _apply_no_answer_threshold(exact_raw, odds, has_answer)
    f1 = _apply_no_answer_threshold(f1_raw, odds, has_answer)
    result = _totals(exact, f1, list(exact))
    for prefix, wanted in (("HasAns", True), ("NoAns", False)):
        qids = [qid for qid, has in has_answer.items() if has is wanted]
        if qids:
            result.update({f"{prefix}_{k}": v for k, v in _totals(exact, f1, qids).items()})
    if null_odds is not None:
        result["best_exact"], result["best_exact_thresh"] = _best_threshold(predictions, exact_raw, odds, has_answer)
        result["best_f1"], result["best_f1_thresh"] = _best_threshold(predictions, f1_raw, odds, has_answer)
    return result


def _apply_no_answer_threshold(scores: dict[str, float], odds: Mapping[str, float], has_answer: dict[str, bool]
                               ) -> dict[str, float]:
    return {qid: float(not has_answer[qid]) if odds[qid] > NA_PROB_THRESHOLD else score
            for qid, score in scores.items()}


def _totals(exact: dict[str, float], f1: dict[str, float], qids: list[str]) -> dict[str, float]:
    total = len(qids)
    if not total:
        return {"exact": 0.0, "f1": 0.0, "total": 0}
    return {"exact": 100.0 * sum(exact[q] for q in qids) / total, "f1": 100.0 * sum(f1[q] for q in qids) / total,
            "total": total}


def _best_threshold(predictions: Mapping[str, str], scores: dict[str, float], odds: Mapping[str, float],
                    has_answer: dict[str, bool]) -> tuple[float, float]:
    """Sweep the threshold up the sorted odds: answering one more question gains its score if it has an
    answer and loses 1 if it has none but something was predicted."""
    current = best = sum(1 for has in has_answer.values() if not has)
    best_threshold = 0.0
    for qid in sorted(odds, key=lambda q: odds[q]):
        if qid not in scores:
            continue
        current += scores[qid] if has_answer[qid] else (-1 if predictions[qid] else 0)
        if current > best:
            best, best_threshold = current, odds[qid]
    return 100.0 * best / max(len(scores), 1), best_threshold
