"""The one masked-LM masking function, shared by static corpus building and the dynamic collator.

`mask_tokens` follows Google's `create_masked_lm_predictions`:

- number to predict per row = min(max_predictions_per_seq, max(1, round(real_tokens * masked_lm_prob))),
  where real_tokens counts the row's tokens that are not [PAD] ([CLS] and [SEP] included, as Google's
  len(tokens) does); rounding is half-to-even, like Python's round;
- candidates are all tokens except the special ids ([CLS], [SEP], [PAD] are never masked), picked in a
  uniformly random order; with whole-word masking a candidate is a word (a token plus the `##` pieces that
  follow it, [CLS] and [SEP] between them skipped as Google's `cand_indexes` does: a `##` piece that starts
  segment B joins A's last word), and a word that would overshoot the number to predict is skipped;
- each chosen token is replaced by [MASK] with probability 0.8, by a random token (uniform over the whole
  vocabulary) with 0.1, and kept with 0.1; with whole-word masking too, as in Google's code (a word's pieces
  are chosen together, and each is still masked, replaced or kept on its own draw).

It works on one row (`(T,)`) or a padded batch (`(B, T)`) at once with numpy, so a collator masks a batch
with a handful of array operations. Everything random comes from the `rng` passed in: a
`numpy.random.Generator`, or `RowRandom`, which gives every row of a batch its own stream keyed by
(seed, epoch, row), so a row's mask does not depend on the rows beside it or on the batch's padded width.

Typical use in a collator::

    opts = masking_options(tokenizer, manifest["masked_lm_prob"], manifest["max_predictions_per_seq"],
                           manifest["whole_word_masking"])   # once
    rng = RowRandom(row_keys(seed, epochs, row_ids))               # per batch: each row its own stream
    masked = mask_tokens(batch_ids, rng=rng, **opts)             # (B, T) padded with [PAD]
    labels = mlm_labels(masked.positions, masked.label_ids, batch_ids.shape[1])   # -100 elsewhere
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, NamedTuple

import numpy as np

__all__ = ["IGNORE_INDEX", "MaskedTokens", "RowRandom", "continuation_mask", "mask_tokens", "masking_options",
           "mlm_labels", "row_keys"]

IGNORE_INDEX = -100  # label of unmasked positions; the MLM loss ignores it (torch's cross_entropy default)
MASK_SHARE, RANDOM_SHARE = 0.8, 0.1  # the rest (0.1) keeps the original token


class MaskedTokens(NamedTuple):
    """Result of `mask_tokens`, shaped like its input.

    For a row `(T,)`: `positions` and `label_ids` are 1-D, sorted by position, one entry per masked token.
    For a batch `(B, T)`: both are `(B, min(max_predictions_per_seq, T))`, sorted per row, padded with -1 (a
    row never has more than T masks, so a huge cap, as "no cap", costs no memory).
    """

    input_ids: np.ndarray  # the ids after masking ([MASK] / random / kept), same shape and dtype as input
    positions: np.ndarray  # int64 indices of the masked tokens
    label_ids: np.ndarray  # int64 original ids at those positions (what the model must predict)


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # SplitMix64's increment
_ROW_STRIDE = np.uint64(1 << 32)  # counters of one draw: position + call * stride, so the width never matters


def mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser on uint64 arrays: a bijection whose outputs pass BigCrush for counter inputs."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def row_keys(*parts: int | np.ndarray) -> np.ndarray:
    """One uint64 key per row from (seed, epoch, row ...): integers or arrays, broadcast together."""
    key = np.zeros((), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for part in parts:
            key = mix64(key + _GOLDEN + np.asarray(part).astype(np.uint64))
    return np.atleast_1d(key)


class RowRandom:
    """The draws `mask_tokens` makes (`random`, `integers`), with row i of every `(B, T)` draw taken from its
    own counter-based stream `keys[i]`: value (call c, position t) is a hash of (key, c, t) alone."""

    def __init__(self, keys: np.ndarray) -> None:
        self.keys = np.asarray(keys, dtype=np.uint64)
        self.calls = 0

    def _bits(self, shape: tuple[int, int]) -> np.ndarray:
        batch, width = shape
        if batch != len(self.keys):
            raise ValueError(f"RowRandom: {len(self.keys)} row keys for a draw of {batch} rows")
        counter = np.arange(width, dtype=np.uint64) + np.uint64(self.calls) * _ROW_STRIDE + np.uint64(1)
        self.calls += 1
        with np.errstate(over="ignore"):
            return mix64(self.keys[:, None] + counter[None, :] * _GOLDEN)

    def random(self, shape: tuple[int, int]) -> np.ndarray:
        """Floats in [0, 1) with 53 random bits, like Generator.random."""
        return (self._bits(shape) >> np.uint64(11)).astype(np.float64) * 2.0**-53

    def integers(self, low: int, high: int, shape: tuple[int, int]) -> np.ndarray:
        """Integers in [low, high); the modulo's bias is below 2**-40 for any vocabulary."""
        return low + (self._bits(shape) % np.uint64(high - low)).astype(np.int64)


def continuation_mask(vocab: list[str]) -> np.ndarray:
    """`(V,)` bool, True for WordPiece pieces that continue a word (`##`: every bertctl vocabulary's prefix,
    tokenizer.CONTINUATION); computed once per vocabulary."""
    return np.fromiter((token.startswith("##") for token in vocab), dtype=bool, count=len(vocab))


def masking_options(tokenizer: Any, masked_lm_prob: float, max_predictions_per_seq: int,
                    whole_word_masking: bool) -> dict[str, Any]:
    """The keyword arguments of `mask_tokens` for a bertctl `BertTokenizer` (build once, reuse per batch)."""
    return {
        "special_ids": (tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id),
        "pad_id": tokenizer.pad_id,
        "vocab_size": tokenizer.vocab_size,
        "mask_id": tokenizer.mask_id,
        "masked_lm_prob": masked_lm_prob,
        "max_predictions_per_seq": max_predictions_per_seq,
        "is_continuation": continuation_mask(tokenizer.vocab()) if whole_word_masking else None,
    }


def mask_tokens(input_ids: np.ndarray, *, special_ids: Collection[int], pad_id: int, vocab_size: int,
                mask_id: int, masked_lm_prob: float, max_predictions_per_seq: int,
                rng: np.random.Generator | RowRandom, is_continuation: np.ndarray | None = None) -> MaskedTokens:
    """Mask one row `(T,)` or a batch `(B, T)` (padded with pad_id); whole words when is_continuation is set.

    `special_ids` are never masked and must include pad_id. Accepts numpy arrays (or anything
    `np.asarray` takes, e.g. a CPU torch tensor); returns numpy arrays.
    """
    ids = np.asarray(input_ids)
    if ids.ndim not in (1, 2):
        raise ValueError(f"mask_tokens: input_ids must be (T,) or (B, T), got shape {ids.shape}")
    rows = ids.reshape(1, -1) if ids.ndim == 1 else ids
    batch, width = rows.shape
    candidate = ~np.isin(rows, np.fromiter(special_ids, dtype=np.int64))
    real = (rows != pad_id).sum(axis=1)
    budget = np.minimum(max_predictions_per_seq, np.maximum(1, np.rint(real * masked_lm_prob)))
    budget = budget.astype(np.int64)

    # A unit is what gets chosen: a token, or with whole-word masking a word (a token and its ## pieces).
    # Google's cand_indexes: a `##` piece joins the last candidate before it, so [SEP] between them does not
    # count (a `##` piece that starts B after front truncation joins A's last word); only a `##` piece with
    # no candidate before it starts a word.
    starts = candidate.copy()
    if is_continuation is not None and width > 1:
        after_candidate = np.logical_or.accumulate(candidate[:, :-1], axis=1)
        starts[:, 1:] &= ~(np.asarray(is_continuation)[rows[:, 1:]] & after_candidate)
    unit_start = np.maximum.accumulate(np.where(starts, np.arange(width), -1), axis=1)  # (B, T)
    order = np.argsort(np.where(starts, rng.random((batch, width)), 2.0), axis=1, kind="stable")
    chosen = _choose_units(starts, candidate, unit_start, order, budget)

    decision = rng.random((batch, width))  # one 80/10/10 draw and one random id per token
    random_ids = rng.integers(0, vocab_size, (batch, width))
    masked = rows.copy()
    masked[chosen & (decision < MASK_SHARE)] = mask_id
    use_random = chosen & (decision >= MASK_SHARE + RANDOM_SHARE)
    masked[use_random] = random_ids[use_random].astype(rows.dtype)
    return _result(rows, masked, chosen, ids.ndim, max_predictions_per_seq)


def _choose_units(starts: np.ndarray, candidate: np.ndarray, unit_start: np.ndarray, order: np.ndarray,
                  budget: np.ndarray) -> np.ndarray:
    """Walk units in random order, taking each that still fits the row's budget: `(B, T)` bool of tokens."""
    batch, width = starts.shape
    # Tokens per unit, counted at column start + 1 (column 0 collects the non-candidates).
    slots = np.where(candidate, unit_start + 1, 0) + (np.arange(batch) * (width + 1))[:, None]
    lengths = np.bincount(slots.ravel(), minlength=batch * (width + 1)).reshape(batch, width + 1)
    sorted_lengths = np.where(np.take_along_axis(starts, order, axis=1),
                              np.take_along_axis(lengths[:, 1:], order, axis=1), 0)
    if (sorted_lengths <= 1).all():  # single tokens: greedy = the first `budget` units in the order
        taken_sorted = (np.cumsum(sorted_lengths, axis=1) <= budget[:, None]) & (sorted_lengths > 0)
    else:
        taken_sorted = np.zeros((batch, width), dtype=bool)
        used = np.zeros(batch, dtype=np.int64)
        for j in range(width):
            if (used >= budget).all():
                break
            fits = (sorted_lengths[:, j] > 0) & (used + sorted_lengths[:, j] <= budget)
            taken_sorted[:, j] = fits
            used += np.where(fits, sorted_lengths[:, j], 0)
    taken_start = np.zeros((batch, width), dtype=bool)
    np.put_along_axis(taken_start, order, taken_sorted, axis=1)
    return candidate & np.take_along_axis(taken_start, np.maximum(unit_start, 0), axis=1)


def _result(rows: np.ndarray, masked: np.ndarray, chosen: np.ndarray, ndim: int,
            max_predictions: int) -> MaskedTokens:
    row, col = np.nonzero(chosen)  # row-major: sorted by position within each row
    labels = rows[row, col].astype(np.int64)
    if ndim == 1:
        return MaskedTokens(masked[0], col.astype(np.int64), labels)
    counts = chosen.sum(axis=1)
    slot = np.arange(len(row)) - np.repeat(np.cumsum(counts) - counts, counts)
    slots = min(max_predictions, rows.shape[1])  # no row has more masks than tokens
    positions = np.full((rows.shape[0], slots), -1, dtype=np.int64)
    label_ids = np.full((rows.shape[0], slots), -1, dtype=np.int64)
    positions[row, slot] = col
    label_ids[row, slot] = labels
    return MaskedTokens(masked, positions, label_ids)


def mlm_labels(positions: np.ndarray, label_ids: np.ndarray, length: int) -> np.ndarray:
    """Labels of length `length` (per row): IGNORE_INDEX everywhere except the masked positions.

    Takes `mask_tokens`' outputs (1-D or padded 2-D; entries with position -1 are ignored).
    """
    positions = np.asarray(positions, dtype=np.int64)
    label_ids = np.asarray(label_ids, dtype=np.int64)
    flat = positions.ndim == 1
    positions, label_ids = np.atleast_2d(positions), np.atleast_2d(label_ids)
    labels = np.full((positions.shape[0], length), IGNORE_INDEX, dtype=np.int64)
    row, slot = np.nonzero(positions >= 0)
    labels[row, positions[row, slot]] = label_ids[row, slot]
    return labels[0] if flat else labels
