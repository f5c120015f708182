"""The one masking function: Google's counts, 80/10/10, specials untouched, whole words, batch = rows; the
per-row streams (RowRandom) the dynamic collator draws from."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertctl.data.masking import IGNORE_INDEX, RowRandom, continuation_mask, mask_tokens, mlm_labels, row_keys

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
VOCAB = 1000
CONTINUES = np.arange(VOCAB) >= 600  # ids 600.. are '##' pieces
OPTIONS = {"special_ids": (CLS, SEP, PAD), "pad_id": PAD, "vocab_size": VOCAB, "mask_id": MASK,
           "masked_lm_prob": 0.15, "max_predictions_per_seq": 20}


def batch(rows: int = 2000, width: int = 128, seed: int = 0) -> np.ndarray:
    """[CLS] A [SEP] B [SEP] rows of random lengths, padded; a third of the tokens are ## pieces."""
    rng = np.random.default_rng(seed)
    ids = np.full((rows, width), PAD, dtype=np.uint16)
    for row, length in enumerate(rng.integers(8, width + 1, rows)):
        ids[row, :length] = rng.integers(5, VOCAB, length)
        ids[row, [0, length // 2, length - 1]] = (CLS, SEP, SEP)
    return ids


def test_number_to_predict_follows_google() -> None:
    ids = batch()
    result = mask_tokens(ids, rng=np.random.default_rng(1), **OPTIONS)
    real = (ids != PAD).sum(axis=1)
    expected = np.minimum(20, np.maximum(1, [round(n * 0.15) for n in real]))  # Python's round: half to even
    assert ((result.positions >= 0).sum(axis=1) == expected).all()
    assert result.positions.shape == (len(ids), 20)
    short = np.array([[CLS, 7, SEP, PAD], [CLS, 7, 8, SEP]], dtype=np.uint16)  # 3 * 0.15 rounds to 0, 4 * 0.15 to 1
    few = mask_tokens(short, rng=np.random.default_rng(1), **OPTIONS)
    assert ((few.positions >= 0).sum(axis=1) == [1, 1]).all()  # Google's max(1, ...): a short row still predicts one
    capped = {**OPTIONS, "masked_lm_prob": 1.0, "max_predictions_per_seq": 3}  # 5 candidates, at most 3 taken
    row = np.array([CLS, 7, 8, 9, 10, 11, SEP], dtype=np.uint16)
    assert len(mask_tokens(row, rng=np.random.default_rng(1), **capped).positions) == 3
    assert (mask_tokens(row[None], rng=np.random.default_rng(1), **capped).positions >= 0).sum() == 3


def test_specials_never_masked_and_labels_are_the_originals() -> None:
    ids = batch()
    result = mask_tokens(ids, rng=np.random.default_rng(2), **OPTIONS)
    rows, slots = np.nonzero(result.positions >= 0)
    positions = result.positions[rows, slots]
    assert not np.isin(ids[rows, positions], (CLS, SEP, PAD)).any()
    assert (ids[rows, positions] == result.label_ids[rows, slots]).all()
    untouched = np.ones(ids.shape, dtype=bool)
    untouched[rows, positions] = False
    assert (result.input_ids[untouched] == ids[untouched]).all()
    assert result.input_ids.dtype == ids.dtype
    assert (np.diff(result.positions, axis=1)[result.positions[:, 1:] >= 0] > 0).all()  # sorted per row


def make_rng(kind: str, seed: int, rows: int) -> np.random.Generator | RowRandom:
    """numpy's Generator, or the collator's counter-based streams (one per row)."""
    return np.random.default_rng(seed) if kind == "generator" else RowRandom(row_keys(seed, 0, np.arange(rows)))


@pytest.mark.parametrize("kind", ["generator", "rows"])
@pytest.mark.parametrize("whole_word", [False, True])
def test_80_10_10(whole_word: bool, kind: str) -> None:
    ids = batch()
    result = mask_tokens(ids, rng=make_rng(kind, 3, len(ids)), is_continuation=CONTINUES if whole_word else None,
                         **OPTIONS)
    rows, slots = np.nonzero(result.positions >= 0)
    shown = result.input_ids[rows, result.positions[rows, slots]]
    original = result.label_ids[rows, slots]
    as_mask, kept = (shown == MASK).mean(), (shown == original).mean()
    assert len(shown) > 20000
    assert abs(as_mask - 0.8) < 0.03 and abs(kept - 0.1) < 0.03 and abs(1 - as_mask - kept - 0.1) < 0.03


@pytest.mark.parametrize("kind", ["generator", "rows"])
def test_random_tokens_span_the_whole_vocabulary(kind: str) -> None:
    ids = batch()
    result = mask_tokens(ids, rng=make_rng(kind, 4, len(ids)), **{**OPTIONS, "masked_lm_prob": 1.0,
                                                                   "max_predictions_per_seq": 128})
    rows, slots = np.nonzero(result.positions >= 0)
    shown = result.input_ids[rows, result.positions[rows, slots]]
    randoms = shown[(shown != MASK) & (shown != result.label_ids[rows, slots])]
    assert randoms.min() == 0 and randoms.max() == VOCAB - 1  # special ids too, as in Google's randint(0, V - 1)
    assert abs(np.mean(randoms < VOCAB // 2) - 0.5) < 0.03


class ScriptedRandom:
    """An rng whose draws the test picks: `random` gives each of `draws` in turn, `integers` always `high - 1`."""

    def __init__(self, *draws: list[float]) -> None:
        self.draws = list(draws)

    def random(self, shape: tuple[int, int]) -> np.ndarray:
        return np.broadcast_to(np.array(self.draws.pop(0)), shape)

    def integers(self, low: int, high: int, shape: tuple[int, int]) -> np.ndarray:
        return np.full(shape, high - 1)


def test_a_chosen_tokens_draw_masks_below_0_8_keeps_below_0_9_and_replaces_above() -> None:
    """The shares' exact edges: [0, 0.8) [MASK], [0.8, 0.9) kept, [0.9, 1) a random id."""
    row = np.array([[CLS, 10, 11, 12, 13, 14, 15, 16, SEP]])
    decisions = [0.0, 0.0, 0.7999, 0.8, 0.85, 0.8999, 0.9, 0.9999, 0.0]
    result = mask_tokens(row, rng=ScriptedRandom(np.linspace(0, 0.5, 9), decisions),
                         **{**OPTIONS, "masked_lm_prob": 1.0})
    assert result.input_ids[0].tolist() == [CLS, MASK, MASK, 12, 13, 14, VOCAB - 1, VOCAB - 1, SEP]


def google_words(row: np.ndarray) -> list[list[int]]:
    """Google's `cand_indexes` with whole-word masking: [CLS]/[SEP] skipped, a `##` piece appended to the last
    candidate before it (across a [SEP]); [PAD] (which Google's unpadded rows lack) skipped too."""
    words: list[list[int]] = []
    for i, token in enumerate(row):
        if token in (CLS, SEP, PAD):
            continue
        if words and CONTINUES[token]:
            words[-1].append(i)
        else:
            words.append([i])
    return words


def test_whole_words_are_chosen_whole_and_each_piece_drawn_on_its_own() -> None:
    """Google's code picks a word's pieces together, then masks, replaces or keeps each one on its own draw."""
    ids = batch(rows=500)
    result = mask_tokens(ids, rng=np.random.default_rng(5), is_continuation=CONTINUES, **OPTIONS)
    chosen = mlm_labels(result.positions, result.label_ids, ids.shape[1]) != IGNORE_INDEX
    words = mixed = across = 0
    for row in range(len(ids)):
        for word in google_words(ids[row]):
            span = chosen[row, word]
            assert span.all() or not span.any()  # the word is chosen entirely or not at all
            if span.all():
                words += 1
                shown = result.input_ids[row, word] == MASK
                mixed += bool(shown.any() and not shown.all())
                across += len(word) > 1 and word[-1] - word[0] >= len(word)  # a [SEP] inside
    assert words > 1000 and mixed > 50 and across > 20


def test_a_piece_starting_b_joins_a_last_word_across_sep_as_in_google() -> None:
    """Front truncation can leave B starting with a `##` piece: Google appends it to A's last word (the [SEP]
    between them is no candidate), so the two are masked together; one before any word starts its own."""
    ids = np.array([CLS, *range(10, 28), 700, SEP, 701, 29, SEP])  # 24 tokens: budget 4
    with_piece = {18, 19, 21}  # [27, ##700] [SEP] [##701]: one word of three pieces
    assert with_piece == set(google_words(ids)[-2])
    both = alone = 0
    for seed in range(300):
        result = mask_tokens(ids, rng=np.random.default_rng(seed), is_continuation=CONTINUES, **OPTIONS)
        picked = set(result.positions.tolist()) & with_piece
        assert picked in (set(), with_piece), (seed, result.positions)
        both += picked == with_piece
        alone += 19 in result.positions or 21 in result.positions
    assert both > 10 and alone == both
    opening = np.array([CLS, 702, 30, SEP, 703, 31, SEP])  # ## at the very start: a word of its own
    assert google_words(opening) == [[1], [2, 4], [5]]
    picks = [set(mask_tokens(opening, rng=np.random.default_rng(seed), is_continuation=CONTINUES,
                             **OPTIONS).positions.tolist()) for seed in range(50)]
    assert {1} in picks and {5} in picks  # the opening piece too: a word Google can pick
    assert all(p in ({1}, {5}) for p in picks)  # budget 1: [30, ##703] (two) never fits


def test_budget_skips_words_that_do_not_fit() -> None:
    """A word longer than what is left is skipped (not cut); shorter ones later still fit."""
    ids = np.array([CLS, 10, 700, 701, 702, 703, 11, 12, SEP])  # real tokens 9 -> budget round(1.35) = 1
    for seed in range(20):
        result = mask_tokens(ids, rng=np.random.default_rng(seed), is_continuation=CONTINUES, **OPTIONS)
        assert len(result.positions) == 1 and result.positions[0] in (6, 7)
    pair = mask_tokens(np.array([10, 700]), rng=np.random.default_rng(0), is_continuation=CONTINUES, **OPTIONS)
    assert len(pair.positions) == 0  # a two-token row is one word too: budget 1, so Google masks nothing


def test_one_row_equals_its_own_batch_and_torch_input_works() -> None:
    row = batch(rows=1)[0]
    single = mask_tokens(row, rng=np.random.default_rng(6), **OPTIONS)
    tensor = torch.from_numpy(row.astype(np.int64))[None]
    as_batch = mask_tokens(tensor, rng=np.random.default_rng(6), **OPTIONS)
    assert (single.input_ids == as_batch.input_ids[0]).all()
    kept = as_batch.positions[0] >= 0
    assert (single.positions == as_batch.positions[0][kept]).all()
    assert (single.label_ids == as_batch.label_ids[0][kept]).all()


def test_same_seed_same_masks_and_edge_rows() -> None:
    ids = batch(rows=50)
    first = mask_tokens(ids, rng=np.random.default_rng(7), **OPTIONS)
    again = mask_tokens(ids, rng=np.random.default_rng(7), **OPTIONS)
    assert (first.input_ids == again.input_ids).all() and (first.positions == again.positions).all()
    nothing = mask_tokens(np.array([CLS, SEP, PAD]), rng=np.random.default_rng(0), **OPTIONS)
    assert len(nothing.positions) == 0 and list(nothing.input_ids) == [CLS, SEP, PAD]
    with pytest.raises(ValueError, match="shape"):
        mask_tokens(np.zeros((2, 2, 2), dtype=int), rng=np.random.default_rng(0), **OPTIONS)


def test_a_cap_above_the_row_width_allocates_by_the_width_and_masks_as_google() -> None:
    """--max-predictions-per-seq 10**9 ("no cap", harmless in Google's script) sized the padded outputs by the
    cap: 2048-row static blocks asked for 15 GiB at 10**6 (MemoryError)."""
    ids = batch(rows=40, width=64)
    capped = mask_tokens(ids, rng=np.random.default_rng(3), **{**OPTIONS, "max_predictions_per_seq": 64})
    huge = mask_tokens(ids, rng=np.random.default_rng(3), **{**OPTIONS, "max_predictions_per_seq": 10**12})
    assert huge.positions.shape == huge.label_ids.shape == (40, 64)
    assert (huge.input_ids == capped.input_ids).all() and (huge.positions == capped.positions).all()
    every = mask_tokens(ids, rng=np.random.default_rng(3), **{**OPTIONS, "max_predictions_per_seq": 10**12,
                                                                "masked_lm_prob": 1.0})
    assert ((every.positions >= 0).sum(axis=1) == (~np.isin(ids, (CLS, SEP, PAD))).sum(axis=1)).all()


def test_labels_helper() -> None:
    assert mlm_labels(np.array([1, 3]), np.array([50, 60]), 5).tolist() == [-100, 50, -100, 60, -100]
    labels = mlm_labels(np.array([[2, -1], [0, 4]]), np.array([[7, -1], [8, 9]]), 5)
    assert labels.tolist() == [[-100, -100, 7, -100, -100], [8, -100, -100, -100, 9]]


def test_a_tokenizers_options_never_mask_its_specials_and_mask_its_words_whole() -> None:
    """masking_options: [CLS], [SEP] and [PAD] are never candidates, and with whole words a word's ## pieces
    go with it."""
    from bertctl.data.masking import masking_options
    from bertctl.tokenizer import BertTokenizer

    tokenizer = BertTokenizer.from_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "##c"])
    ids = np.array([[CLS, 5, 6, 7, SEP, 5, SEP, PAD, PAD]])  # 7 real tokens; words [a] [b ##c] [a]
    every = mask_tokens(ids, rng=np.random.default_rng(0), **masking_options(tokenizer, 1.0, 20, False))
    assert every.positions[0][every.positions[0] >= 0].tolist() == [1, 2, 3, 5]
    options = masking_options(tokenizer, 2 / 7, 20, True)  # budget 2
    picks = [set(mask_tokens(ids, rng=np.random.default_rng(seed), **options).positions[0].tolist()) - {-1}
             for seed in range(20)]
    assert {2, 3} in picks and all(p in ({1, 5}, {2, 3}) for p in picks)


def test_continuation_mask() -> None:
    assert continuation_mask(["[PAD]", "the", "##s", "#", "##"]).tolist() == [False, False, True, False, True]


def test_a_rows_stream_ignores_its_neighbours_and_the_padding() -> None:
    """The collator's masks depend on (seed, epoch, row) alone: not on the batch a row lands in, its place
    there, or the width the batch is padded to; and chosen positions are uniform over a row."""
    ids = batch(rows=64, width=96)
    keys = row_keys(0, 3, np.arange(1000, 1064))
    whole = mask_tokens(ids, rng=RowRandom(keys), **OPTIONS)
    order = np.random.default_rng(0).permutation(64)[:20]
    wider = np.pad(ids[order], ((0, 0), (0, 32)), constant_values=PAD)
    part = mask_tokens(wider, rng=RowRandom(keys[order]), **OPTIONS)
    assert (part.input_ids[:, :96] == whole.input_ids[order]).all()
    assert (part.positions == whole.positions[order]).all() and (part.label_ids == whole.label_ids[order]).all()
    other_epoch = mask_tokens(ids, rng=RowRandom(row_keys(0, 4, np.arange(1000, 1064))), **OPTIONS)
    assert (other_epoch.positions != whole.positions).any()
    grid = row_keys(*np.meshgrid(np.arange(4), np.arange(4), np.arange(100), indexing="ij"))
    assert np.unique(grid).size == grid.size  # no two (seed, epoch, row) share a stream: not (0, 4, 9), (0, 3, 10)
    draws = RowRandom(row_keys(1, 0, np.arange(4000)))
    assert abs(draws.random((4000, 128)).mean() - 0.5) < 0.002
    counts = np.bincount(draws.integers(0, 10, (4000, 128)).ravel(), minlength=10)
    assert counts.min() > 0.97 * counts.mean() and counts.max() < 1.03 * counts.mean()
    first, second = RowRandom(keys).random((64, 512)), RowRandom(keys)
    second.random((64, 512))  # one call's counters never reach the next's: the two draws share no value
    assert not np.intersect1d(first, second.random((64, 512))).size
    with pytest.raises(ValueError, match="row keys"):
        draws.random((3, 4))
