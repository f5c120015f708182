"""Pure metric functions for fine-tuning, exact and small, tested against scipy.

scipy is not a runtime dependency of bertctl, so the correlations are written here with numpy. Degenerate
inputs follow scikit-learn's choice for the Matthews correlation: when one side is constant the correlation
is undefined and scores 0.0 rather than NaN, which keeps best-epoch selection and seed averages defined.
A NaN among the predictions is another matter: it is a model whose outputs blew up, and every metric is NaN
then, as scipy's correlations are (nan_policy='propagate'), never a number that could pass for a score.
"""

from __future__ import annotations

import functools
import math
import reprlib
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from bertctl.errors import BertctlError, quoted


def _pair(predictions: Sequence, labels: Sequence, dtype: type) -> tuple[np.ndarray, np.ndarray]:
    pred = np.asarray(predictions, dtype=dtype)
    gold = np.asarray(labels, dtype=dtype)
    if pred.ndim != 1 or gold.ndim != 1:
        raise BertctlError(f"metrics take one prediction per example (class ids or scores), "
                           f"got shapes {pred.shape} and {gold.shape}")
    if len(pred) != len(gold):
        raise BertctlError(f"metrics: {len(pred)} predictions for {len(gold)} labels")
    if len(pred) == 0:
        raise BertctlError("metrics: no examples to score")
    return pred, gold


def _nan_propagates(metric: Callable[..., float]) -> Callable[..., float]:
    """NaN when any prediction or label is NaN: ranking would place the NaNs somewhere and score them (all-NaN
    predictions would get a Spearman of 1.0). A class id is NaN where its logits were (`evaluate.to_predictions`)."""

    @functools.wraps(metric)
    def checked(predictions: Sequence, labels: Sequence, *args: int, **kwargs: int) -> float:
        pred, gold = _pair(predictions, labels, np.float64)
        if np.isnan(pred).any() or np.isnan(gold).any():
            return math.nan
        return metric(predictions, labels, *args, **kwargs)

    return checked


@_nan_propagates
def accuracy(predictions: Sequence[int], labels: Sequence[int]) -> float:
    """Share of class ids predicted right."""
    pred, gold = _pair(predictions, labels, np.int64)
    return float(np.mean(pred == gold))


@_nan_propagates
def f1(predictions: Sequence[int], labels: Sequence[int], positive: int = 1) -> float:
    """F1 of the positive class (MRPC's `equivalent`, QQP's `duplicate`); 0.0 when neither side has one."""
    pred, gold = _pair(predictions, labels, np.int64)
    true_pos = int(np.sum((pred == positive) & (gold == positive)))
    false_pos = int(np.sum((pred == positive) & (gold != positive)))
    false_neg = int(np.sum((pred != positive) & (gold == positive)))
    denominator = 2 * true_pos + false_pos + false_neg
    return 2 * true_pos / denominator if denominator else 0.0


@_nan_propagates
def matthews_correlation(predictions: Sequence[int], labels: Sequence[int]) -> float:
    """Matthews correlation, for any number of classes (Gorodkin's R_K, the GLUE diagnostic's R3).

    From the confusion counts: (correct * n - sum_k p_k t_k) / sqrt((n^2 - sum p_k^2)(n^2 - sum t_k^2)),
    with p_k / t_k the predicted / true count of class k; 0.0 when either side uses a single class.
    """
    pred, gold = _pair(predictions, labels, np.int64)
    classes, codes = np.unique(np.concatenate([pred, gold]), return_inverse=True)
    pred_codes, gold_codes = codes[: len(pred)], codes[len(pred):]
    pred_counts = np.bincount(pred_codes, minlength=len(classes)).astype(np.float64)
    gold_counts = np.bincount(gold_codes, minlength=len(classes)).astype(np.float64)
    n = float(len(pred))
    correct = float(np.sum(pred_codes == gold_codes))
    covariance = correct * n - pred_counts @ gold_counts
    spread = (n * n - pred_counts @ pred_counts) * (n * n - gold_counts @ gold_counts)
    return float(covariance / np.sqrt(spread)) if spread > 0 else 0.0


@_nan_propagates
def pearson(predictions: Sequence[float], labels: Sequence[float]) -> float:
    """Pearson's r; 0.0 when either side is constant."""
    pred, gold = _pair(predictions, labels, np.float64)
    if np.all(pred == pred[0]) or np.all(gold == gold[0]):
        return 0.0  # tested exactly: a constant's deviations from its float mean are rounding noise, not 0
    if len(pred) == 2:  # two distinct points lie on a line; their float mean may not lie halfway (scipy's case)
        return float(np.sign(pred[1] - pred[0]) * np.sign(gold[1] - gold[0]))
    pred = pred - pred.mean()
    gold = gold - gold.mean()
    pred /= np.abs(pred).max()  # as scipy does: no under- or overflow in the sums of squares at any scale
    gold /= np.abs(gold).max()
    spread = float(np.sqrt((pred @ pred) * (gold @ gold)))
    return float(np.clip((pred @ gold) / spread, -1.0, 1.0))


def _ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks, ties sharing their average rank (scipy.stats.rankdata's default)."""
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    starts_group = np.concatenate([[True], ordered[1:] != ordered[:-1]])
    group = np.cumsum(starts_group) - 1
    starts = np.flatnonzero(starts_group)
    ends = np.append(starts[1:], len(values))  # one past each tie group
    ranks = np.empty(len(values), dtype=np.float64)
    ranks[order] = ((starts + ends + 1) / 2.0)[group]
    return ranks


@_nan_propagates
def spearman(predictions: Sequence[float], labels: Sequence[float]) -> float:
    """Spearman's rho: Pearson's r of the (tie-averaged) ranks; 0.0 when either side is constant."""
    pred, gold = _pair(predictions, labels, np.float64)
    return pearson(_ranks(pred), _ranks(gold))


METRICS: dict[str, Callable[[Sequence, Sequence], float]] = {
    "accuracy": accuracy,
    "f1": f1,
    "matthews_correlation": matthews_correlation,
    "pearson": pearson,
    "spearman": spearman,
}


class ScoredTask(Protocol):
    """What scoring needs from a task: a GLUE task or a `finetune classify` table both have it."""

    metrics: tuple[str, ...]
    main_metric: str


def compute_metrics(names: Sequence[str], predictions: Sequence, labels: Sequence) -> dict[str, float]:
    """The named metrics, in the order given: a task lists its metrics in leaderboard order, which results files
    and printed lines keep."""
    unknown = [name for name in names if name not in METRICS]
    if unknown:
        raise BertctlError(f"unknown metric(s) {', '.join(unknown)}; known: {', '.join(METRICS)}")
    return {name: METRICS[name](predictions, labels) for name in names}


def compute_task_metrics(task: str | ScoredTask, predictions: Sequence, labels: Sequence) -> dict[str, float]:
    """The task's metrics on one split: class ids (or scores for regression) against gold labels.

    Keys are metric names in leaderboard order; `task.main_metric` names the one that picks the best
    epoch. MNLI is scored once per split (matched, mismatched).
    """
    if isinstance(task, str):
        from bertctl.data.glue import get_task

        task = get_task(task)
    return compute_metrics(task.metrics, predictions, labels)


# --- named entities ----------------------------------------------------------------------------------------

def _tag_parts(tag: str) -> tuple[str, str]:
    """("B", "PER") from "B-PER"; ("O", "") from "O"; a bare "B" has the type "_", as in seqeval."""
    if tag == "O":
        return "O", ""
    mark, _, kind = tag.partition("-")
    return mark, kind or "_"


def entity_spans(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """(type, first, last) of every entity, read as conlleval and seqeval's default mode read chunks, so IOB1,
    IOB2 and IOBES tags all work: an entity starts at B- or S-, or at an I-/E- that cannot continue the one
    before (after O, E- or S-, or of another type: a lone I- is an entity), and ends before B-, S-, O or a
    change of type, or right after E- or S-."""
    spans: list[tuple[str, int, int]] = []
    start, open_kind, previous = -1, "", "O"
    for i, tag in enumerate([*tags, "O"]):
        mark, kind = _tag_parts(tag)
        if start >= 0 and (previous in ("E", "S") or mark in ("B", "S", "O") or kind != open_kind):
            spans.append((open_kind, start, i - 1))
            start = -1
        if mark != "O" and start < 0:
            start, open_kind = i, kind
        previous = mark
    return spans


def _ratios(correct: int, predicted: int, gold: int) -> dict[str, float]:
    precision = correct / predicted if predicted else 0.0
    recall = correct / gold if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def _refuse_flat_tags(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> None:
    """One list of tags per sentence: a flat list of tags read each tag as a sentence of one-letter tags (made-up
    entities of type `_`, and no error), a number for a tag failed with an AttributeError."""
    for sentence in (*gold, *predicted):
        if isinstance(sentence, str) or not all(isinstance(tag, str) for tag in sentence):
            raise BertctlError(f"entity_scores: give each sentence's tags as a list of strings, not "
                               f"{quoted(sentence, reprlib.repr)}")


def entity_scores(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]
                  ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Entity-level micro precision/recall/F1 and tag accuracy over sentences, as seqeval (default mode) and
    the `evaluate` library's seqeval metric give them (0 where a ratio has nothing to divide), and per entity
    type {precision, recall, f1, number}, `number` being the gold entities of the type."""
    _refuse_flat_tags(gold, predicted)
    if len(gold) != len(predicted) or any(len(g) != len(p) for g, p in zip(gold, predicted, strict=False)):
        raise BertctlError("entity_scores: give one predicted tag per gold tag, sentence by sentence")
    true = {(s, *span) for s, tags in enumerate(gold) for span in entity_spans(tags)}
    found = {(s, *span) for s, tags in enumerate(predicted) for span in entity_spans(tags)}
    hits = sum(g == p for gs, ps in zip(gold, predicted, strict=True) for g, p in zip(gs, ps, strict=True))
    words = sum(map(len, gold))
    overall = {**_ratios(len(true & found), len(found), len(true)), "accuracy": hits / words if words else 0.0}
    per_type = {}
    for kind in sorted({span[1] for span in true | found}):
        t = {span for span in true if span[1] == kind}
        f = {span for span in found if span[1] == kind}
        per_type[kind] = {**_ratios(len(t & f), len(f), len(t)), "number": len(t)}
    return overall, per_type
