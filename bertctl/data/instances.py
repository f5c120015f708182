"""Pre-training instances from tokenised documents, with the semantics of Google's create_pretraining_data.py.

A document is a flat array of token ids plus sentence offsets, so every segment is a slice and nothing is
copied until an instance is assembled. Per document (see `document_instances`):

- target length = max_seq_length - 3 (- 2 for `mlm`); with probability short_seq_prob one random target
  in [2, max] for the whole document (Google draws it once per document, and so do we);
- `mlm+nsp`: sentences are gathered until the target is reached; A = a random number of them; B = the rest
  (IsNext, label 0) or, with probability 0.5 - always when there is only one sentence - text from another
  document (NotNext, label 1), and the unused sentences go back to be read again;
- `mlm+sop`: B is always A's real continuation; with probability 0.5 the two are swapped (label 1). A single
  sentence is cut before a random one of its words into A and B (ALBERT's code would fall back to a random
  document);
- `mlm`: the document's tokens cut into contiguous full-length pieces, one segment, no label;
- the longer of A and B loses a token from a random end until the pair fits (`_truncate`).

The NotNext document is drawn uniformly from `pool` (the other documents of the same shard and split), so
the result depends only on the shard, never on how shards are spread over worker processes. A shard whose
split holds a single document (a document at least the shard size) has no other one: `shards.with_neighbours`
gives such a shard samples of the nearest other documents of that split (before it, or after it for the
split's first document), and those are its pool.

bertctl.data.shards turns shards of raw documents into these instances and writes them.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Document", "Instances", "Packed", "document_instances", "mask_packed", "pack"]


@dataclass(frozen=True)
class Document:
    """One document: token ids of all its sentences end to end, and where each sentence starts."""

    tokens: np.ndarray  # (N,) int32 token ids, no special tokens
    bounds: np.ndarray  # (S + 1,) int64 offsets into tokens: sentence s is tokens[bounds[s]:bounds[s + 1]]

    @property
    def num_sentences(self) -> int:
        return len(self.bounds) - 1


@dataclass
class Instances:
    """Instances collected so far, as pieces to concatenate once (cheaper than one array per append)."""

    pieces: list[np.ndarray] = field(default_factory=list)  # token ids of every instance, end to end
    lengths: list[int] = field(default_factory=list)  # tokens per instance, specials included
    first_segment: list[int] = field(default_factory=list)  # length of [CLS] A [SEP]: token type 0
    labels: list[int] = field(default_factory=list)  # NSP/SOP label (1 = NotNext / swapped); 0 for mlm
    short: list[bool] = field(default_factory=list)  # built with a short target length
    forced: int = 0  # NotNext without a coin flip: A was the chunk's only sentence (Google's rule)
    starts: list[int] = field(default_factory=lambda: [0])  # where each instance's pieces start in `pieces`

    def add(self, cls_id: int, sep_id: int, a: np.ndarray, b: np.ndarray | None, label: int,
            short: bool) -> None:
        """Append `[CLS] A [SEP] B [SEP]` (or `[CLS] A [SEP]` when b is None)."""
        cls, sep = _single(cls_id), _single(sep_id)  # shared, never written to: concatenation copies them
        self.pieces += [cls, a, sep]
        length = len(a) + 2
        self.first_segment.append(length)
        if b is not None:
            self.pieces += [b, sep]
            length += len(b) + 1
        self.lengths.append(length)
        self.labels.append(label)
        self.short.append(short)
        self.starts.append(len(self.pieces))


@functools.lru_cache(maxsize=64)
def _single(token_id: int) -> np.ndarray:
    """A one-token array, one per id for all instances (an array per instance cost ~100 bytes each)."""
    return np.array([token_id], np.int32)


def document_instances(out: Instances, documents: Sequence[Document], index: int, pool: Sequence[int], *,
                       objective: str, max_seq_length: int, short_seq_prob: float, cls_id: int, sep_id: int,
                       rng: np.random.Generator, is_continuation: np.ndarray) -> None:
    """Append the instances of documents[index] to out; NotNext draws from `pool` (sorted indices).
    `is_continuation`: (V,) bool, the `##` pieces, where SOP may not cut a lone sentence."""
    doc = documents[index]
    max_tokens = max_seq_length - (2 if objective == "mlm" else 3)
    short = bool(rng.random() < short_seq_prob)
    target = int(rng.integers(2, max_tokens + 1)) if short else max_tokens
    if objective == "mlm":
        for lo in range(0, len(doc.tokens), target):
            out.add(cls_id, sep_id, doc.tokens[lo:lo + target], None, 0, short)
        return
    bounds, start, i = doc.bounds, 0, 0
    while i < doc.num_sentences:
        if i == doc.num_sentences - 1 or bounds[i + 1] - bounds[start] >= target:
            chunk = i + 1 - start
            a_end = start + (1 if chunk == 1 else int(rng.integers(1, chunk)))
            a = doc.tokens[bounds[start]:bounds[a_end]]
            if objective == "mlm+sop":
                pair = _sop_pair(a, doc.tokens[bounds[a_end]:bounds[i + 1]], chunk, rng, is_continuation)
            elif chunk == 1 or rng.random() < 0.5:
                pair = a, _random_continuation(documents, index, pool, target - len(a), rng), 1
                out.forced += chunk == 1
                i = a_end - 1  # the sentences after A were not used: read them again
            else:
                pair = a, doc.tokens[bounds[a_end]:bounds[i + 1]], 0
            if pair is not None:
                a, b, label = pair
                a, b = _truncate(a, b, max_tokens, rng)
                out.add(cls_id, sep_id, a, b, label, short)
            start = i + 1
        i += 1


def _sop_pair(a: np.ndarray, b: np.ndarray, chunk: int, rng: np.random.Generator, is_continuation: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, int] | None:
    """A and its real continuation, swapped half the time (label 1). A lone sentence is cut before one of its
    words (not inside one: a half opening with a `##` piece would give the order away); None for one word."""
    if chunk == 1:
        cuts = np.flatnonzero(~is_continuation[a[1:]]) + 1
        if not len(cuts):
            return None
        cut = int(cuts[rng.integers(0, len(cuts))])
        a, b = a[:cut], a[cut:]
    if rng.random() < 0.5:
        return b, a, 1
    return a, b, 0


def _random_continuation(documents: Sequence[Document], index: int, pool: Sequence[int], target: int,
                         rng: np.random.Generator) -> np.ndarray:
    """Sentences of another document from a random start until `target` tokens (Google's NotNext B)."""
    at = bisect.bisect_left(pool, index)
    own = at < len(pool) and pool[at] == index
    others = len(pool) - own
    if others:
        pick = int(rng.integers(0, others))
        other = documents[pool[pick + int(own and pick >= at)]]
    else:
        other = documents[index]  # no other document: Google's code falls back to the same one
    begin = int(rng.integers(0, other.num_sentences))
    reached = other.bounds[begin + 1:] - other.bounds[begin]
    end = begin + 1 + min(int(np.searchsorted(reached, target)), len(reached) - 1)
    return other.tokens[other.bounds[begin]:other.bounds[end]]


def _truncate(a: np.ndarray, b: np.ndarray, max_tokens: int, rng: np.random.Generator
              ) -> tuple[np.ndarray, np.ndarray]:
    """Google's truncate_seq_pair without the loop: one coin per removed token, same order of events.

    Google drops a token from the longer segment (B on a tie), from the front or the back by a coin flip,
    until the pair fits. So the side of each step is known in advance: the longer one until both are equal,
    then B, A, B, A ...; only the coins are random.
    """
    excess = len(a) + len(b) - max_tokens
    if excess <= 0:
        return a, b
    front = rng.random(excess) < 0.5  # True: drop the first token, else the last
    gap = min(abs(len(a) - len(b)), excess)
    alternate_b, alternate_a = front[gap::2], front[gap + 1::2]
    if len(a) > len(b):  # the first `gap` steps trim A
        cut_a, front_a = gap + len(alternate_a), np.count_nonzero(front[:gap]) + np.count_nonzero(alternate_a)
        cut_b, front_b = len(alternate_b), np.count_nonzero(alternate_b)
    else:
        cut_a, front_a = len(alternate_a), np.count_nonzero(alternate_a)
        cut_b, front_b = gap + len(alternate_b), np.count_nonzero(front[:gap]) + np.count_nonzero(alternate_b)
    return a[front_a:len(a) - (cut_a - front_a)], b[front_b:len(b) - (cut_b - front_b)]


@dataclass(frozen=True)
class Packed:
    """A shard's instances as flat arrays plus row offsets (the layout of Arrow list columns)."""

    input_ids: np.ndarray  # (N,) token ids of all instances end to end
    offsets: np.ndarray  # (R + 1,) int64 row starts into input_ids / token_type_ids
    token_type_ids: np.ndarray  # (N,) int8: 0 for [CLS] A [SEP], 1 for B [SEP]
    labels: np.ndarray  # (R,) int8 NSP/SOP label
    short: np.ndarray  # (R,) bool: built with a short target length
    masked_positions: np.ndarray | None = None  # (M,) positions of the masked tokens (static masking)
    masked_ids: np.ndarray | None = None  # (M,) their original ids
    masked_offsets: np.ndarray | None = None  # (R + 1,) int64 row starts into the two above


def pack(instances: Instances, rng: np.random.Generator) -> Packed:
    """Concatenate the collected instances in a random order (Google shuffles all instances at the end).

    The instances' pieces are joined in the new order directly, so memory holds the tokens once (4 bytes
    each) plus one byte each for the token types: gathering through int64 index arrays took ~40 bytes a
    token, 1.4 GB for a shard of one 150 MB document."""
    lengths = np.asarray(instances.lengths, dtype=np.int64)
    order = rng.permutation(len(lengths))
    lengths = lengths[order]
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    starts, pieces = instances.starts, instances.pieces
    ordered = [pieces[k] for row in order.tolist() for k in range(starts[row], starts[row + 1])]
    input_ids = np.concatenate(ordered) if ordered else np.zeros(0, np.int32)
    del ordered
    first = np.asarray(instances.first_segment, dtype=np.int64)[order]
    runs = np.stack([first, lengths - first], axis=1).ravel()  # per row: tokens of type 0, then of type 1
    token_types = np.repeat(np.tile(np.array([0, 1], np.int8), len(lengths)), runs)
    return Packed(input_ids=input_ids.astype(np.int32, copy=False), offsets=offsets, token_type_ids=token_types,
                  labels=np.asarray(instances.labels, dtype=np.int8)[order],
                  short=np.asarray(instances.short, dtype=bool)[order])


def mask_packed(packed: Packed, mask: Callable[..., Any], pad_id: int, rng: np.random.Generator,
                block: int = 2048) -> Packed:
    """Static masking: run `mask` (masking.mask_tokens with its options bound) over padded blocks of rows."""
    ids = packed.input_ids.copy()
    rows = len(packed.offsets) - 1
    positions, originals, counts = [], [], []
    for lo in range(0, rows, block):
        starts, lengths = packed.offsets[lo:lo + block + 1][:-1], np.diff(packed.offsets[lo:lo + block + 1])
        width = int(lengths.max())
        index = starts[:, None] + np.arange(width)
        valid = np.arange(width) < lengths[:, None]
        padded = np.where(valid, packed.input_ids[np.minimum(index, len(ids) - 1)], pad_id)
        result = mask(padded, rng=rng)
        ids[index[valid]] = result.input_ids[valid]
        kept = result.positions >= 0
        positions.append(result.positions[kept])
        originals.append(result.label_ids[kept])
        counts.append(kept.sum(axis=1))
    count = np.concatenate(counts) if counts else np.zeros(0, np.int64)
    return dataclasses.replace(
        packed, input_ids=ids,
        masked_positions=np.concatenate(positions) if positions else np.zeros(0, np.int64),
        masked_ids=np.concatenate(originals) if originals else np.zeros(0, np.int64),
        masked_offsets=np.concatenate([[0], np.cumsum(count)]))
