"""Pre-training's data order: a table-free permutation per epoch, the same for any split into ranks."""

from __future__ import annotations

import numpy as np
import pytest

from bertctl.data.batches import BatchPlan, Collator, pad_batch, pair_rows, shuffled_index
from bertctl.data.masking import row_keys


@pytest.mark.parametrize("size", [1, 2, 3, 16, 17, 1000, 4099])
def test_shuffled_index_is_a_permutation_that_depends_on_the_key(size: int) -> None:
    first = shuffled_index(np.arange(size), size, row_keys(0, 0))
    assert sorted(first.tolist()) == list(range(size))
    if size >= 16:
        assert (first != np.arange(size)).mean() > 0.8
        assert (first != shuffled_index(np.arange(size), size, row_keys(0, 1))).mean() > 0.8  # next epoch
        assert (first != shuffled_index(np.arange(size), size, row_keys(1, 0))).mean() > 0.8  # other seed


def test_shuffled_index_is_uniform_and_handles_huge_corpora() -> None:
    where_zero = [int(np.flatnonzero(shuffled_index(np.arange(7), 7, row_keys(seed, 0)) == 0)[0])
                  for seed in range(3500)]
    counts = np.bincount(where_zero, minlength=7)
    assert counts.min() > 400 and counts.max() < 600  # 500 expected in each place
    huge = shuffled_index(np.arange(10**9 - 512, 10**9), 10**9, row_keys(0, 0))  # no 8 GB table
    assert len(np.unique(huge)) == 512 and huge.min() >= 0 and huge.max() < 10**9


def test_every_epoch_visits_every_row_once_whatever_the_ranks() -> None:
    rows, batch = 37, 8
    one = BatchPlan(rows, batch, batch, 0, 1, seed=5)
    seen = np.concatenate([one.samples(step * batch, 0)[1] for step in range(37)])  # 8 epochs, crossing mid-step
    epochs = np.concatenate([one.samples(step * batch, 0)[0] for step in range(37)])
    for epoch in range(8):
        assert sorted(seen[epochs == epoch].tolist()) == list(range(rows))
    assert (seen[:rows] != seen[rows: 2 * rows]).any()  # each epoch its own order
    two = [BatchPlan(rows, batch, 2, rank, 2, seed=5) for rank in (0, 1)]
    split = np.concatenate([two[rank].samples(3 * batch, micro)[1] for rank in (0, 1) for micro in (0, 1)])
    assert (split == one.samples(3 * batch, 0)[1]).all()


def test_eval_batches_over_a_billion_row_split_hold_no_row_table():
    """`evaluate mlm --split train --samples 0` on a huge corpus: rows are counted off lazily (an index array
    of 10^12 rows would be 8 TB), and each rank still reads its strided share in order."""
    from bertctl.data.batches import EvalBatches

    class Table:
        def __len__(self):
            return 10**12

        def __getitem__(self, rows):
            return {"rows": rows}

    def collate(rows, epochs, indices):
        return {"rows": rows["rows"], "indices": indices.tolist()}

    batches = EvalBatches(Table(), collate, 4, 10**12, 1, 2)
    assert len(batches) == 10**12 // 2 // 4
    assert batches[0] == {"rows": [1, 3, 5, 7], "indices": [1, 3, 5, 7]}
    assert batches[len(batches) - 1]["rows"] == [10**12 - 7, 10**12 - 5, 10**12 - 3, 10**12 - 1]


def test_pad_batch_keeps_the_segments_and_masks_only_the_padding() -> None:
    padded = pad_batch([[2, 7, 3, 8, 3], [2, 9, 3]], [[0, 0, 0, 1, 1], [0, 0, 0]], pad_id=0)
    assert padded["input_ids"].tolist() == [[2, 7, 3, 8, 3], [2, 9, 3, 0, 0]]
    assert padded["token_type_ids"].tolist() == [[0, 0, 0, 1, 1], [0, 0, 0, 0, 0]]
    assert padded["attention_mask"].tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    assert pad_batch([[2, 3]], None, pad_id=0, width=4)["attention_mask"].tolist() == [[1, 1, 0, 0]]


def test_the_collator_feeds_the_masked_ids_labels_the_originals_and_masks_each_epoch_afresh() -> None:
    """Dynamic masking: the model must read the masked ids (mostly [MASK] where a label is, the originals
    elsewhere), the NSP labels pass as they came, and the same row is masked anew in the next epoch."""
    draw = np.random.default_rng(0)
    ids = [[2, *draw.integers(5, 60, 40), 3], [2, *draw.integers(5, 60, 25), 3]]
    rows = {"input_ids": ids, "token_type_ids": [[0] * len(row) for row in ids], "next_sentence_label": [1, 0]}
    masking = {"special_ids": (2, 3, 0), "pad_id": 0, "vocab_size": 60, "mask_id": 4, "masked_lm_prob": 0.15,
               "max_predictions_per_seq": 20}
    collate, row_ids = Collator(0, masking, seed=7), np.array([5, 9])
    batch = collate(rows, np.zeros(2, np.int64), row_ids)
    original = pad_batch(ids, None, pad_id=0)["input_ids"]
    labelled = batch["mlm_labels"].numpy() != -100
    assert labelled.sum() >= 8 and (batch["mlm_labels"].numpy()[labelled] == original[labelled]).all()
    assert (batch["input_ids"].numpy()[~labelled] == original[~labelled]).all()
    assert (batch["input_ids"].numpy()[labelled] == 4).sum() >= labelled.sum() // 2
    assert batch["next_sentence_label"].tolist() == [1, 0]
    next_epoch = collate(rows, np.ones(2, np.int64), row_ids)["mlm_labels"].numpy() != -100
    assert not np.array_equal(next_epoch, labelled)


def test_pair_rows_give_segment_0_to_cls_a_sep_and_1_to_b_sep() -> None:
    ids, segments, lengths = pair_rows([np.array([2, 7, 3, 8, 3, 2, 9, 3], np.int32)], [3, 3], [2, 0])
    assert [row.tolist() for row in ids] == [[2, 7, 3, 8, 3], [2, 9, 3]] and lengths.tolist() == [5, 3]
    assert [row.tolist() for row in segments] == [[0, 0, 0, 1, 1], [0, 0, 0]]


def test_ragged_rows_are_indexed_as_a_list_is() -> None:
    ids, _, _ = pair_rows([np.array([2, 7, 3, 2, 9, 3], np.int32)], [3, 3], [0, 0])
    assert ids[-2].tolist() == ids[0].tolist() == [2, 7, 3] and ids[-1].tolist() == [2, 9, 3]
    for outside in (2, -3):
        with pytest.raises(IndexError, match=f"row {outside} of 2"):
            ids[outside]


def test_eval_batches_stop_at_the_last_row_of_a_split_shorter_than_the_limit() -> None:
    """`evaluate mlm` (the first 10,000 rows by default) on a 5-row split scores its 5 rows, each rank its share."""
    from bertctl.data.batches import EvalBatches

    class Table:
        def __len__(self):
            return 5

        def __getitem__(self, rows):
            return {"rows": rows}

    def collate(rows, epochs, indices):
        return rows

    assert [b["rows"] for b in EvalBatches(Table(), collate, 4, 10, 0, 1)] == [[0, 1, 2, 3], [4]]
    assert [b["rows"] for b in EvalBatches(Table(), collate, 4, 10, 1, 2)] == [[1, 3]]
