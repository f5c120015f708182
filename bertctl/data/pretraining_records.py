"""Google's pre-training examples (and NVIDIA's rows, made to look like them) as bertctl corpus rows: the checks of
one record's features, and blocks of records checked and unpadded together, what `corpus import` runs in each of its
workers."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from bertctl.data.instances import Packed
from bertctl.data.tfrecord import BYTES, FLOAT, INT64, BadRecord, feature_column

__all__ = ["FEATURES", "RecordBlock", "Shape", "concat_packed", "record_items", "take_rows"]

_KIND_NAMES = {BYTES: "bytes_list", FLOAT: "float_list", INT64: "int64_list", 0: "empty Feature"}
FEATURES = {"input_ids": INT64, "input_mask": INT64, "segment_ids": INT64, "masked_lm_positions": INT64,
            "masked_lm_ids": INT64, "masked_lm_weights": FLOAT, "next_sentence_labels": INT64}
_SEQUENCE = ("input_ids", "input_mask", "segment_ids")  # max_seq_length values each
_PREDICTIONS = ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights")  # max_predictions_per_seq each


@dataclasses.dataclass
class Shape:
    """max_seq_length and max_predictions_per_seq, as the first record has them."""

    seq: int
    predictions: int
    first: str  # where they were read


def record_items(features: dict[str, tuple[int, list[int | bytes], int]], shape: Shape | None
                 ) -> list[list[int | bytes]]:
    """The seven features' items after the per-record checks (present, of Google's kinds and lengths)."""
    missing = [name for name in FEATURES if name not in features]
    if missing:
        names = [name if name.isprintable() else ascii(name) for name in sorted(features)]  # one line, as stored
        has = ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "") if names else "none"
        hint = " (run_classifier's fine-tuning examples?)" if "label_ids" in features else ""
        raise BadRecord(f"not a pre-training example of Google's create_pretraining_data.py{hint}: no "
                        f"{', '.join(missing)} (its features: {has})")
    for name, kind in FEATURES.items():
        if features[name][0] != kind and features[name][2]:
            raise BadRecord(f"feature {name} is a {_KIND_NAMES[features[name][0]]}, Google's is a {_KIND_NAMES[kind]}")
    counts = [features[name][2] for name in FEATURES]
    for group in (_SEQUENCE, _PREDICTIONS):
        lengths = {name: features[name][2] for name in group}
        if len(set(lengths.values())) > 1:
            raise BadRecord("features of unequal lengths: " + ", ".join(f"{k} {v}" for k, v in lengths.items()))
    if counts[-1] != 1:
        raise BadRecord(f"next_sentence_labels holds {counts[-1]} values, not 1")
    if not counts[0]:
        raise BadRecord("input_ids is empty")
    if shape is not None and (counts[0], counts[3]) != (shape.seq, shape.predictions):
        raise BadRecord(f"max_seq_length {counts[0]} and max_predictions_per_seq {counts[3]}, but {shape.first} "
                        f"has {shape.seq} and {shape.predictions}: all records must agree (import each kind on its "
                        "own)")
    return [features[name][1] for name in FEATURES]


class RecordBlock:
    """Up to `corpus import`'s BLOCK_ROWS records of one file, stacked: checked and unpadded together."""

    def __init__(self, first: int = 0, noun: str = "record") -> None:
        self.rows: list[list[list[int | bytes]]] = []  # per record, each feature's items (record_items)
        self.first = first  # number of the first record in its file
        self.noun = noun  # what an error calls one: a TFRecord's record, an HDF5 shard's row

    def columns(self, shape: Shape) -> list[np.ndarray]:
        """The seven features of every record, stacked: [records, max_seq_length or max_predictions_per_seq]."""
        widths = [shape.seq] * 3 + [shape.predictions] * 3 + [1]
        return [feature_column(kind, list(records), width) for kind, records, width in
                zip(FEATURES.values(), zip(*self.rows, strict=True), widths, strict=True)]

    def check(self, columns: list[np.ndarray], vocab_size: int, cls_id: int, sep_id: int, vocabulary: str,
              extra: tuple[tuple[np.ndarray, Callable[[int], str]], ...] = ()) -> None:
        """Raise BadRecord, naming the record (its number in its file, from 1), for the first record of the block
        that is not one of Google's (or fails an `extra` check: which records fail, and what to say)."""
        ids, mask, types, positions, labels, weights, nsp = columns
        width, slots = ids.shape[1], positions.shape[1]
        ones = mask == 1
        count = ones.sum(axis=1)
        real = np.arange(width) < count[:, None]
        used = weights != 0
        prediction = np.arange(slots) < used.sum(axis=1)[:, None]
        rows = np.arange(len(ids))
        first_id, last_id = ids[rows, 0], ids[rows, np.maximum(count - 1, 0)]
        bad_id = real & ((ids < 0) | (ids >= vocab_size))
        bad_position = prediction & ((positions < 0) | (positions >= count[:, None]))
        placed = np.sort(np.where(prediction, positions, -1 - np.arange(slots)), axis=1)
        bad_label = prediction & ((labels < 0) | (labels >= vocab_size))
        fix = (f"outside the vocabulary of {vocabulary} ({vocab_size} ids): give the vocabulary the records were "
               "made with")

        def first(values: np.ndarray, bad: np.ndarray, r: int) -> int:
            return int(values[r][np.argmax(bad[r])])

        checks: list[tuple[np.ndarray, Callable[[int], str]]] = [
            *extra,
            (((mask != 0) & ~ones).any(axis=1) | (ones != real).any(axis=1) | (count < 2),
             lambda r: "input_mask is not 1 for each token then 0 for the padding (with at least 2 tokens)"),
            (bad_id.any(axis=1), lambda r: f"input id {first(ids, bad_id, r)} is {fix}"),
            ((first_id != cls_id) | (last_id != sep_id),
             lambda r: f"the tokens run from id {first_id[r]} to id {last_id[r]}, not from [CLS] ({cls_id}) to [SEP] "
                       f"({sep_id}) of {vocabulary}: give the vocabulary the records were made with"),
            ((real & (types != 0) & (types != 1)).any(axis=1), lambda r: "segment_ids holds a value other than 0 or 1"),
            (((weights != 0) & (weights != 1)).any(axis=1) | (used != prediction).any(axis=1),
             lambda r: "masked_lm_weights is not 1.0 for each prediction then 0.0 for the padding"),
            (bad_position.any(axis=1),
             lambda r: f"masked_lm_positions holds {first(positions, bad_position, r)}, outside the {count[r]} tokens"),
            (((placed[:, 1:] == placed[:, :-1]) & (placed[:, 1:] >= 0)).any(axis=1),
             lambda r: "masked_lm_positions holds a position twice"),
            (bad_label.any(axis=1), lambda r: f"masked_lm_ids holds {first(labels, bad_label, r)}, {fix}"),
            (((nsp != 0) & (nsp != 1)).any(axis=1),
             lambda r: f"next_sentence_labels is {nsp[r, 0]}, not 0 (IsNext) or 1 (NotNext)"),
        ]
        bad = np.stack([failed for failed, _ in checks])
        if bad.any():
            row = int(np.argmax(bad.any(axis=0)))
            raise BadRecord(f"{self.noun} {self.first + row + 1}: {checks[int(np.argmax(bad[:, row]))][1](row)}")

    @staticmethod
    def packed(columns: list[np.ndarray]) -> Packed:
        """The rows without their padding, in Packed's layout (Arrow's list columns)."""
        ids, mask, types, positions, labels, weights, nsp = columns
        real, used = mask == 1, weights != 0
        count = real.sum(axis=1)
        return Packed(input_ids=ids[real].astype(np.int32), offsets=np.concatenate([[0], np.cumsum(count)]),
                      token_type_ids=types[real].astype(np.int8), labels=nsp[:, 0].astype(np.int8),
                      short=np.zeros(len(ids), bool), masked_positions=positions[used], masked_ids=labels[used],
                      masked_offsets=np.concatenate([[0], np.cumsum(used.sum(axis=1))]))


def take_rows(packed: Packed, rows: np.ndarray) -> Packed:
    """The given rows (a boolean mask) of a Packed block."""
    lengths, masked = np.diff(packed.offsets), np.diff(packed.masked_offsets)
    token_rows = np.repeat(rows, lengths)
    masked_rows = np.repeat(rows, masked)
    return Packed(input_ids=packed.input_ids[token_rows], offsets=np.concatenate([[0], np.cumsum(lengths[rows])]),
                  token_type_ids=packed.token_type_ids[token_rows], labels=packed.labels[rows],
                  short=packed.short[rows], masked_positions=packed.masked_positions[masked_rows],
                  masked_ids=packed.masked_ids[masked_rows],
                  masked_offsets=np.concatenate([[0], np.cumsum(masked[rows])]))


def concat_packed(blocks: list[Packed]) -> Packed:
    """Blocks of rows as one (an Arrow file's)."""
    def joined(name: str) -> np.ndarray:
        return np.concatenate([getattr(b, name) for b in blocks])

    def offsets(name: str) -> np.ndarray:
        ends = np.cumsum([getattr(b, name)[-1] for b in blocks])
        return np.concatenate([[0], *(getattr(b, name)[1:] + start for b, start in
                                      zip(blocks, [0, *ends[:-1]], strict=True))])

    return Packed(input_ids=joined("input_ids"), offsets=offsets("offsets"), token_type_ids=joined("token_type_ids"),
                  labels=joined("labels"), short=joined("short"), masked_positions=joined("masked_positions"),
                  masked_ids=joined("masked_ids"), masked_offsets=offsets("masked_offsets"))
