"""Skipping padding (`skip_padding`): the heads that read no padded position give the padded path's outputs,
losses and gradients at the real tokens, while every per-token step runs on the real tokens alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from bertctl.config import BertConfig
from bertctl.model import (
    PACK_MULTIPLE,
    BertForMultipleChoice,
    BertForSequenceClassification,
    BertForTokenClassification,
    Packing,
)

pytestmark = pytest.mark.usefixtures("one_thread")

HEADS = {"classify": BertForSequenceClassification, "ner": BertForTokenClassification,
         "choice": BertForMultipleChoice}
HF_NAMES = {"classify": "BertForSequenceClassification", "ner": "BertForTokenClassification",
            "choice": "BertForMultipleChoice"}


def no_dropout(odd_config: BertConfig) -> BertConfig:
    return BertConfig(**{**odd_config.to_dict(), "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0})


def inputs(head: str, padded: bool, seed: int = 3) -> dict[str, torch.Tensor]:
    """Rows of 4-13 real tokens (segment 1 from the middle), or all 13 without padding; choice: (2, 3, T)."""
    g = torch.Generator().manual_seed(seed)
    rows, width = 6, 13
    ids = torch.randint(1, 97, (rows, width), generator=g)
    lengths = torch.tensor([13, 4, 9, 13, 7, 11]) if padded else torch.full((rows,), width)
    mask = (torch.arange(width) < lengths[:, None]).long()
    ids = ids * mask
    types = ((torch.arange(width) >= 3) & mask.bool()).long()
    batch = {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}
    if head == "classify":
        batch["labels"] = torch.randint(0, 3, (rows,), generator=g)
    elif head == "ner":
        labels = torch.randint(0, 3, (rows, width), generator=g)
        batch["labels"] = torch.where(mask.bool() & (torch.rand(rows, width, generator=g) < 0.7), labels, -100)
    else:
        batch = {k: v.view(2, 3, width) for k, v in batch.items()}
        batch["labels"] = torch.tensor([2, 0])
    return batch


def build(head: str, cfg: BertConfig) -> torch.nn.Module:
    torch.manual_seed(0)
    kwargs = {} if head == "choice" else {"num_labels": 3}
    model = HEADS[head](cfg, classifier_dropout=0.0, **kwargs)
    with torch.no_grad():  # non-trivial biases and LayerNorms, so a position mix-up shows
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    return model


def real_logits(head: str, logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return logits[batch["attention_mask"].bool()] if head == "ner" else logits


def packed(real: int, total: int) -> int:
    """The tokens a skipping forward computes: the real ones, rounded up to a multiple of PACK_MULTIPLE with
    padding positions while the batch has them."""
    return min(-(-real // PACK_MULTIPLE) * PACK_MULTIPLE, total)


def tokens_per_layer(model: torch.nn.Module) -> list[int]:
    """A list that fills with the tokens each forward's first feed-forward layer runs on."""
    seen: list[int] = []
    model.bert.layers[0].ffn_in.register_forward_hook(lambda mod, args, out: seen.append(args[0].shape[:-1].numel()))
    return seen


def _without_and_with_skipping(model, head: str, batch: dict) -> list[tuple]:
    """(real tokens' logits, loss, gradients by name) of a training forward and backward, padded then skipping."""
    results = []
    for skip in (False, True):
        model.zero_grad()
        out = model(**batch, skip_padding=skip)
        out.loss.backward()
        results.append((real_logits(head, out.logits, batch), out.loss,
                        {name: p.grad.clone() for name, p in model.named_parameters()}))
    return results


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
@pytest.mark.parametrize("head", list(HEADS))
def test_skipping_padding_gives_the_same_logits_loss_and_gradients(head, padded, odd_config):
    model = build(head, no_dropout(odd_config)).train()
    batch = inputs(head, padded)
    seen = tokens_per_layer(model)
    (logits, loss, grads), (logits_skip, loss_skip, grads_skip) = _without_and_with_skipping(model, head, batch)
    torch.testing.assert_close(logits_skip, logits, rtol=0, atol=1e-6)
    torch.testing.assert_close(loss_skip, loss, rtol=0, atol=1e-6)
    assert grads_skip.keys() == grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grads_skip[name], grad, rtol=1e-5, atol=1e-6, msg=name)
    total = batch["input_ids"].numel()
    assert seen == [total, packed(int(batch["attention_mask"].sum()), total) if padded else total]


@pytest.mark.parametrize("lengths", [[13, 4, 9, 13, 7, 11], [13, 13, 13, 13, 13, 12], [1, 2, 1, 1, 3, 1]])
@pytest.mark.parametrize("head", list(HEADS))
def test_the_packed_tokens_come_in_multiples_so_their_shapes_repeat(head, lengths, odd_config):
    """A new (N, H) size at every step fragments glibc's heap (RSS climbing over a long CPU run): the skipping
    forward rounds N up with padding positions, and its logits, loss and gradients stay the padded ones."""
    model = build(head, no_dropout(odd_config)).train()
    batch = inputs(head, padded=True)
    mask = (torch.arange(13) < torch.tensor(lengths)[:, None]).long().view(batch["attention_mask"].shape)
    batch = {**batch, "input_ids": batch["input_ids"] * mask, "attention_mask": mask,
             "token_type_ids": batch["token_type_ids"] * mask}
    if head == "ner":
        batch["labels"] = torch.where(mask.bool(), batch["labels"], -100)
    seen = tokens_per_layer(model)
    (logits, loss, grads), (logits_skip, loss_skip, grads_skip) = _without_and_with_skipping(model, head, batch)
    total = mask.numel()
    assert seen[1] == packed(sum(lengths), total)
    assert seen[1] % PACK_MULTIPLE == 0 or seen[1] == total
    torch.testing.assert_close(logits_skip, logits, rtol=0, atol=1e-6)
    torch.testing.assert_close(loss_skip, loss, rtol=0, atol=1e-6)
    for name, grad in grads.items():
        torch.testing.assert_close(grads_skip[name], grad, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize(("real", "rows"), [(57, 64), (64, 64), (65, 78), (77, 78), (1, 16)])
def test_a_packing_rounds_its_rows_up_to_a_multiple_of_16_with_padding_positions(real, rows):
    """docs/finetuning.md's 16: the real positions in order, then distinct padding ones, all the batch at most."""
    mask = (torch.arange(6 * 13) < real).long().flip(0).view(6, 13)
    packing = Packing.of(mask)
    flat = mask.flatten().bool()
    assert (packing.real, packing.index.numel(), PACK_MULTIPLE) == (real, rows, 16)
    assert packing.index[:real].tolist() == flat.nonzero().squeeze(1).tolist()
    assert not flat[packing.index[real:]].any() and packing.index.unique().numel() == rows


def test_the_padded_positions_hidden_states_are_zero_and_the_default_forward_keeps_them(odd_config):
    model = build("ner", no_dropout(odd_config)).eval()
    batch = {k: v for k, v in inputs("ner", padded=True).items() if k != "labels"}
    pad = ~batch["attention_mask"].bool()
    with torch.no_grad():
        hidden = model(**batch).hidden_states
        skipped = model(**batch, skip_padding=True).hidden_states
    assert hidden[pad].abs().min() > 0  # computed, as transformers computes them
    assert torch.equal(skipped[pad], torch.zeros_like(skipped[pad]))


def test_dropout_still_drops_and_a_seed_gives_the_same_bytes(odd_config):
    model = build("ner", odd_config).train()
    batch = {k: v for k, v in inputs("ner", padded=True).items() if k != "labels"}
    real = batch["attention_mask"].bool()
    runs = []
    for _ in range(2):
        torch.manual_seed(7)
        with torch.no_grad():
            runs.append(model(**batch, skip_padding=True).logits[real])
    with torch.no_grad():
        plain = model.eval()(**batch).logits[real]
    assert torch.equal(runs[0], runs[1])
    assert (runs[0] - plain).abs().max() > 1e-3


@pytest.mark.parametrize("head", list(HEADS))
def test_skipping_padding_matches_transformers_at_the_real_tokens(head, odd_config, tmp_path):
    transformers = pytest.importorskip("transformers")
    from bertctl.checkpoint import load_model

    extra = {} if head == "choice" else {"num_labels": 3}
    torch.manual_seed(0)
    reference = getattr(transformers, HF_NAMES[head])(transformers.BertConfig(**odd_config.to_dict(), **extra))
    with torch.no_grad():
        for param in reference.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    reference.eval().save_pretrained(tmp_path / "hf")
    ours = load_model(tmp_path / "hf").eval()
    batch = inputs(head, padded=True)
    with torch.no_grad():
        expected = reference(**batch)
        got = ours(**batch, skip_padding=True)
    torch.testing.assert_close(real_logits(head, got.logits, batch), real_logits(head, expected.logits, batch),
                               rtol=0, atol=1e-5)
    torch.testing.assert_close(got.loss, expected.loss, rtol=0, atol=1e-5)


def _features(head: str):
    """Four rows of 3-11 tokens as each task's features hold them (random ids, a label each)."""
    from bertctl.data.batches import Ragged
    from bertctl.data.choice import ChoiceFeatures
    from bertctl.data.ner import NerData, NerFeatures
    from bertctl.evaluate import Features

    rng = np.random.default_rng(0)
    lengths = np.array([11, 3, 7, 5])
    ids = [rng.integers(1, 97, n) for n in lengths]
    types = [np.zeros(n, dtype=np.int64) for n in lengths]
    if head == "classify":
        return Features(ids, types, lengths, rng.integers(0, 3, 4), 0)
    if head == "ner":
        labels = [rng.integers(0, 3, n) for n in lengths]
        firsts = Ragged(np.concatenate([np.arange(1, n - 1) for n in lengths]), lengths - 2)
        return NerFeatures(NerData([[]] * 4, None, Path("t")), ids, labels, firsts, lengths, 0)
    choices = [[ids[i], ids[(i + 1) % 4], ids[(i + 2) % 4]] for i in range(4)]
    longest = np.array([max(map(len, c)) for c in choices])
    return ChoiceFeatures(3, choices, [[np.zeros(len(s), dtype=np.int64) for s in c] for c in choices],
                          rng.integers(0, 3, 4), longest, 0, longest)


def _runs(head: str):
    """The head's fine-tuning loss terms and the function its evaluate/predict score with."""
    from bertctl import choice, evaluate, finetune_classifier, finetune_multiple_choice, finetune_tagging, ner

    if head == "classify":
        return finetune_classifier.classification_loss_terms, evaluate.collate, evaluate.predict_logits
    if head == "ner":
        return finetune_tagging._loss_terms, ner.collate_tokens, ner.word_predictions
    return finetune_multiple_choice.classification_loss_terms, choice.collate_choices, choice.choice_logits


@pytest.mark.parametrize("head", list(HEADS))
def test_fine_tuning_and_scoring_run_the_real_tokens_only(head, odd_config):
    loss_terms, collate, scorer = _runs(head)
    features = _features(head)
    model = build(head, odd_config)
    seen = tokens_per_layer(model)
    batch = collate(features, np.arange(4), 0)
    batch["real"] = torch.ones(4, dtype=torch.bool)
    loss_terms(model.train(), batch)
    scorer(model, features, 0, 4, torch.device("cpu"), "fp32")
    assert seen == [packed(int(batch["attention_mask"].sum()), batch["input_ids"].numel())] * 2


def test_squad_keeps_computing_its_padding(odd_config):
    from bertctl.data.squad import SquadFeatures
    from bertctl.model import BertForQuestionAnswering
    from bertctl.squad import span_logits

    model = BertForQuestionAnswering(odd_config)
    seen = tokens_per_layer(model)
    lengths = np.array([9, 5])
    ids = [np.arange(1, n + 1) for n in lengths]
    zeros = np.zeros(2, dtype=np.int64)
    features = SquadFeatures(ids, [np.zeros(n, dtype=np.int64) for n in lengths], lengths, zeros, zeros, zeros,
                             [np.ones(1, bool)] * 2, width=12)
    span_logits(model, features, 0, 2, torch.device("cpu"), "fp32")
    assert seen == [2 * 12]
