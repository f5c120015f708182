"""Batches: which rows every rank reads at every step, and the padding that turns rows into tensors.

Pre-training: the order is a pure function of (seed, samples already seen): epoch e visits the rows in the
pseudo-random permutation keyed by (seed, e); step s reads global samples [s*B, (s+1)*B), rank r its
contiguous share of those. So a resumed run, any number of ranks and any number of loader workers read
exactly the same data, and dynamic masks are drawn per sample from (seed, epoch, row), so they agree as well.
The permutation is computed per sample (a Feistel cipher), never stored: O(batch) work and memory per
micro-batch however many rows the corpus has.

Fine-tuning: an epoch's batches are drawn from (seed, epoch) alone (optionally grouped by length), and each
global batch is shared out among the ranks in micro-batches, so any number of processes trains on the same
batches.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from bertctl.data.masking import IGNORE_INDEX, RowRandom, mask_tokens, mix64, mlm_labels, row_keys

GROUP_WINDOW = 50  # length grouping sorts windows of this many batches (random across windows)


@dataclass(frozen=True)
class BatchPlan:
    rows: int  # rows in the corpus split
    global_batch: int  # sequences per optimizer step, all ranks together
    micro_batch: int  # sequences per forward pass on one rank
    rank: int
    world_size: int
    seed: int

    @property
    def micro_per_step(self) -> int:
        return self.global_batch // self.world_size // self.micro_batch

    def samples(self, step_start: int, micro: int) -> tuple[np.ndarray, np.ndarray]:
        """(epochs, rows) of micro-batch `micro` on this rank of the step that begins at global sample
        `step_start` (the number of samples all earlier steps consumed)."""
        per_rank = self.global_batch // self.world_size
        first = step_start + self.rank * per_rank + micro * self.micro_batch
        sample = np.arange(first, first + self.micro_batch)
        epochs = sample // self.rows
        return epochs, shuffled_index(sample % self.rows, self.rows, row_keys(self.seed, epochs))


_FEISTEL_ROUNDS = 6


def shuffled_index(index: np.ndarray, size: int, keys: np.ndarray) -> np.ndarray:
    """Entry `index` of a pseudo-random permutation of range(size), one permutation per key (`keys` broadcasts
    against `index`).

    A balanced Feistel network permutes the smallest power-of-two range with an even number of bits that holds
    `size`; a value that lands outside range(size) is encrypted again until it falls inside (cycle walking),
    which keeps the result a permutation of range(size). No table is built, so any corpus shuffles in O(batch).
    """
    half = np.uint64(max(1, ((size - 1).bit_length() + 1) // 2))
    low_mask = (np.uint64(1) << half) - np.uint64(1)
    keys = np.broadcast_to(np.asarray(keys, dtype=np.uint64), np.shape(index))
    round_keys = [mix64(keys ^ mix64(np.uint64(r + 1))) for r in range(_FEISTEL_ROUNDS)]
    value = np.asarray(index, dtype=np.uint64).copy()
    todo = np.arange(value.size)
    while todo.size:
        left, right = value[todo] >> half, value[todo] & low_mask
        for key in round_keys:
            left, right = right, left ^ (mix64(right ^ key[todo]) & low_mask)
        value[todo] = (left << half) | right
        todo = todo[value[todo] >= np.uint64(size)]
    return value.astype(np.int64)


def pad_batch(ids: Sequence[Sequence[int]], types: Sequence[Sequence[int]] | None, pad_id: int,
              width: int | None = None) -> dict[str, np.ndarray]:
    """Rows padded to `width` (default: the longest row): input_ids, token_type_ids (0 when `types` is None)
    and attention_mask (1 on real tokens; built from the lengths, since masking may put [PAD] ids in a row)."""
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    width = width or int(lengths.max())
    padded_ids = np.full((len(ids), width), pad_id, dtype=np.int64)
    padded_types = np.zeros((len(ids), width), dtype=np.int64)
    for i, row in enumerate(ids):
        padded_ids[i, : lengths[i]] = row
        if types is not None:
            padded_types[i, : lengths[i]] = types[i]
    mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.int64)  # (B, T)
    return {"input_ids": padded_ids, "token_type_ids": padded_types, "attention_mask": mask}


class Ragged(Sequence[np.ndarray]):
    """Rows of unequal length end to end in one array: row r is a view of `values[offsets[r]:offsets[r + 1]]`.

    What scoring holds per row: a numpy array per row would add ~100 bytes of object to every row's few tokens.
    """

    def __init__(self, values: np.ndarray, lengths: np.ndarray) -> None:
        self.values = values
        self.offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])

    @classmethod
    def joined(cls, chunks: list[np.ndarray], lengths: np.ndarray, dtype: type) -> Ragged:
        """Rows whose values come in chunks of consecutive rows (as encoding makes them, a chunk at a time)."""
        return cls(np.concatenate(chunks) if chunks else np.zeros(0, dtype=dtype), lengths)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> np.ndarray:  # type: ignore[override]  # rows one at a time, no slices
        if not -len(self) <= index < len(self):
            raise IndexError(f"row {index} of {len(self)}")
        row = int(index) % len(self)
        return self.values[self.offsets[row]: self.offsets[row + 1]]


def pair_rows(chunks: list[np.ndarray], firsts: list[int], seconds: list[int]) -> tuple[Ragged, Ragged, np.ndarray]:
    """Encoded `[CLS] A [SEP] (B [SEP])` rows end to end: their int32 ids (given in chunks of rows), int8 segment
    ids (0 over each row's first `firsts` tokens, 1 over its next `seconds`) and (N,) lengths."""
    runs = np.stack([np.asarray(firsts, dtype=np.int64), np.asarray(seconds, dtype=np.int64)], axis=1)
    lengths = runs.sum(axis=1)
    segments = np.repeat(np.tile(np.array([0, 1], dtype=np.int8), len(lengths)), runs.ravel())
    return Ragged.joined(chunks, lengths, np.int32), Ragged(segments, lengths), lengths


class Grouped(Sequence[list[np.ndarray]]):
    """A Ragged's rows `width` at a time: item i is the list of rows i*width .. (i+1)*width - 1 (an example's
    choices), as the list of arrays per example it replaced."""

    def __init__(self, rows: Ragged, width: int) -> None:
        self.rows, self.width = rows, width

    def __len__(self) -> int:
        return len(self.rows) // self.width

    def __getitem__(self, index: int) -> list[np.ndarray]:  # type: ignore[override]  # one at a time, no slices
        if not -len(self) <= index < len(self):
            raise IndexError(f"item {index} of {len(self)}")
        first = int(index) % len(self) * self.width
        return [self.rows[first + i] for i in range(self.width)]


class Collator:
    """Pads a list of corpus rows into tensors; masks them afresh when the corpus stores no masks."""

    def __init__(self, pad_id: int, masking: dict[str, Any] | None, seed: int, pad_to: int | None = None) -> None:
        self.pad_id = pad_id
        self.masking = masking  # mask_tokens keyword arguments, or None for static masks stored in the rows
        self.seed = seed
        self.pad_to = pad_to  # fixed width (for torch.compile); None pads to the longest row

    def __call__(self, rows: dict[str, list], epochs: np.ndarray, row_ids: np.ndarray) -> dict[str, torch.Tensor]:
        padded = pad_batch(rows["input_ids"], rows["token_type_ids"], self.pad_id, self.pad_to)
        ids = padded["input_ids"]
        width = ids.shape[1]
        if self.masking is None:
            labels = np.full(ids.shape, IGNORE_INDEX, dtype=np.int64)
            for i, positions in enumerate(rows["masked_lm_positions"]):
                labels[i] = mlm_labels(np.asarray(positions, dtype=np.int64), np.asarray(rows["masked_lm_ids"][i]),
                                       width)
        else:  # every row its own stream, keyed by (seed, epoch, row): independent of batch and padding
            masked = mask_tokens(ids, rng=RowRandom(row_keys(self.seed, epochs, row_ids)), **self.masking)
            padded["input_ids"] = masked.input_ids
            labels = mlm_labels(masked.positions, masked.label_ids, width)
        batch = {name: torch.from_numpy(array) for name, array in padded.items()}
        batch["mlm_labels"] = torch.from_numpy(labels)
        if "next_sentence_label" in rows:
            batch["next_sentence_label"] = torch.tensor(rows["next_sentence_label"], dtype=torch.long)
        return batch


class StepBatches(Dataset):
    """Item k = the k-th micro-batch this rank reads in the next `steps` steps, already collated."""

    def __init__(self, table: Any, plan: BatchPlan, collate: Collator, samples_seen: int, steps: int) -> None:
        self.table, self.plan, self.collate = table, plan, collate
        self.samples_seen, self.steps = samples_seen, steps

    def __len__(self) -> int:
        return self.steps * self.plan.micro_per_step

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        step, micro = divmod(index, self.plan.micro_per_step)
        epochs, rows = self.plan.samples(self.samples_seen + step * self.plan.global_batch, micro)
        return self.collate(self.table[rows.tolist()], epochs, rows)


class EvalBatches(Dataset):
    """The first `limit` validation rows in order, this rank's share, in micro-batches (fixed masks)."""

    def __init__(self, table: Any, collate: Collator, micro_batch: int, limit: int, rank: int, world: int) -> None:
        self.rows = range(rank, min(limit, len(table)), world)  # lazy: a whole train split may be 10^9 rows
        self.table, self.collate, self.micro_batch = table, collate, micro_batch

    def __len__(self) -> int:
        return -(-len(self.rows) // self.micro_batch)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        return (self[i] for i in range(len(self)))

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        rows = np.asarray(self.rows[index * self.micro_batch: (index + 1) * self.micro_batch], dtype=np.int64)
        return self.collate(self.table[rows.tolist()], np.zeros_like(rows), rows)


# --- fine-tuning ------------------------------------------------------------------------------------------

def train_batches(lengths: np.ndarray, batch_size: int, seed: int, epoch: int, group_by_length: bool
                  ) -> list[np.ndarray]:
    """One epoch's batches of row ids: a fresh permutation from (seed, epoch), the last batch partial.

    Grouped by length: every window of GROUP_WINDOW batches is sorted by length before it is cut into
    batches, the batches are shuffled, and the one with the longest example goes first (so running out of
    memory happens at step 1, not hours in).
    """
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(lengths))
    if group_by_length:
        window = batch_size * GROUP_WINDOW
        order = np.concatenate([chunk[np.argsort(-lengths[chunk], kind="stable")]
                                for chunk in np.split(order, range(window, len(order), window))])
    batches = [order[i: i + batch_size] for i in range(0, len(order), batch_size)]
    if group_by_length:
        batches = [batches[i] for i in rng.permutation(len(batches))]
        longest = max(range(len(batches)), key=lambda i: int(lengths[batches[i]].max()))
        batches.insert(0, batches.pop(longest))
    return batches


def rank_micro_batches(rows: np.ndarray, micro: int, rank: int, world: int) -> list[np.ndarray]:
    """This rank's contiguous share of a global batch, in micro-batches of at most `micro` rows.

    Every rank gets as many micro-batches as the largest share needs, so all of them run the same forward/
    backward passes (DDP all-reduces the gradients on the last one); a rank short of rows gets empty ones.
    """
    shares = np.array_split(rows, world)
    count = -(-len(shares[0]) // micro)  # shares[0] is the largest
    mine = shares[rank]
    chunks = [mine[i: i + micro] for i in range(0, len(mine), micro)]
    return chunks + [mine[:0]] * (count - len(chunks))
