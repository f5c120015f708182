"""Every head against transformers' matching Bert* class, same weights, odd shapes, padding, segments."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from bertctl.checkpoint import load_model, save_model  # noqa: E402
from bertctl.config import ACTIVATIONS  # noqa: E402

HEADS = ["BertModel", "BertForPreTraining", "BertForMaskedLM", "BertForSequenceClassification",
         "BertForTokenClassification", "BertForQuestionAnswering", "BertForMultipleChoice"]
TOLERANCE = 1e-5


def reference_model(name: str, odd_config, **extra):
    cfg = transformers.BertConfig(**odd_config.to_dict(), **extra)
    torch.manual_seed(0)
    model = getattr(transformers, name)(cfg).eval()
    with torch.no_grad():  # make biases and LayerNorms non-trivial so a mix-up shows
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.05)
    return model


def batch(odd_config, seed: int = 1, batch_size: int = 3, length: int = 37):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, odd_config.vocab_size, (batch_size, length), generator=g)
    types = torch.zeros_like(ids)
    types[:, length // 2:] = 1
    mask = torch.ones_like(ids)
    mask[1, 25:] = 0  # padding in two rows, of different lengths
    mask[2, 11:] = 0
    ids[mask == 0] = 0
    return ids, types, mask


def outputs(name: str, result) -> list[torch.Tensor]:
    """The tensors to compare, whichever library produced them."""
    if name == "BertModel":
        return [result.last_hidden_state if hasattr(result, "last_hidden_state") else result.hidden_states,
                result.pooler_output if hasattr(result, "pooler_output") else result.pooled]
    if name == "BertForPreTraining":
        logits = getattr(result, "prediction_logits", None)
        nsp = getattr(result, "seq_relationship_logits", None)
        return [logits if logits is not None else result.logits, nsp if nsp is not None else result.nsp_logits]
    if name == "BertForQuestionAnswering":
        return [result.start_logits, result.end_logits]
    return [result.logits]


@pytest.mark.parametrize("name", HEADS)
def test_head_matches_transformers(name, odd_config, tmp_path):
    extra = {"num_labels": 5} if name in ("BertForSequenceClassification", "BertForTokenClassification") else {}
    reference = reference_model(name, odd_config, **extra)
    reference.save_pretrained(tmp_path / "hf")
    ours = load_model(tmp_path / "hf").eval()
    assert ours.fresh_heads == ()
    ids, types, mask = batch(odd_config)
    if name == "BertForMultipleChoice":
        ids, types, mask = (t.view(1, 3, -1).expand(2, 3, -1).contiguous() for t in (ids, types, mask))
    with torch.no_grad():
        expected = outputs(name, reference(input_ids=ids, token_type_ids=types, attention_mask=mask))
        got = outputs(name, ours(ids, types, mask))
    for e, g in zip(expected, got, strict=True):
        assert g.shape == e.shape
        diff = (g - e).abs().max().item()
        assert diff <= TOLERANCE, f"{name}: max |diff| {diff:.2e}"


@pytest.mark.parametrize("name", HEADS)
def test_transformers_loads_our_folder_without_missing_or_unexpected_keys(name, odd_config, tmp_path):
    reference = reference_model(name, odd_config)
    reference.save_pretrained(tmp_path / "hf")
    save_model(load_model(tmp_path / "hf"), tmp_path / "ours")
    reloaded, info = getattr(transformers, name).from_pretrained(tmp_path / "ours", output_loading_info=True)
    assert not info["missing_keys"]
    assert not info["unexpected_keys"] and not info["mismatched_keys"]
    for (key, expected), (_, got) in zip(reference.state_dict().items(), reloaded.state_dict().items(), strict=True):
        assert torch.equal(expected, got), key


def test_sparse_mlm_loss_equals_dense_loss(odd_config):
    from bertctl.model import BertForPreTraining

    torch.manual_seed(0)
    model = BertForPreTraining(odd_config).eval()
    ids, types, mask = batch(odd_config)
    labels = torch.full_like(ids, -100)
    labels[0, [3, 7, 20]] = torch.tensor([5, 6, 7])
    labels[2, 4] = 9
    with torch.no_grad():
        sparse = model(ids, types, mask, mlm_labels=labels).mlm_loss
        dense_logits = model(ids, types, mask).logits
        fixed = model(ids, types, mask, mlm_labels=labels, mlm_predictions=4).mlm_loss  # static shapes
    dense = torch.nn.functional.cross_entropy(dense_logits.view(-1, odd_config.vocab_size), labels.view(-1))
    assert abs(sparse.item() - dense.item()) < 1e-6
    assert abs(fixed.item() - dense.item()) < 1e-6


def test_every_parameter_free_transformers_activation_is_accepted():
    """docs/checkpoints.md promises all of them; prelu and xielu carry trained parameters bertctl does not load."""
    from transformers.activations import ACT2CLS, ACT2FN

    parameter_free = {name for name in ACT2CLS if not list(ACT2FN[name].parameters())}
    assert parameter_free - set(ACTIVATIONS) == set()
    assert set(ACTIVATIONS) <= set(ACT2CLS)


@pytest.mark.parametrize("act", ACTIVATIONS)
def test_every_activation_is_transformers_formula_bit_for_bit(act, odd_config, tmp_path):
    """The same formula, not merely a close one: max |diff| 0 on the function and on a whole BertModel."""
    from transformers.activations import ACT2FN

    from bertctl.model import _ACTIVATIONS

    x = torch.linspace(-12.0, 12.0, 20001)
    assert torch.equal(_ACTIVATIONS[act](x), ACT2FN[act](x))
    config = odd_config.replace(hidden_act=act)
    reference = reference_model("BertModel", config)
    reference.save_pretrained(tmp_path / "hf")
    ours = load_model(tmp_path / "hf").eval()
    ids, types, mask = batch(config)
    with torch.no_grad():
        expected = outputs("BertModel", reference(input_ids=ids, token_type_ids=types, attention_mask=mask))
        got = outputs("BertModel", ours(ids, types, mask))
    assert [(g - e).abs().max().item() for e, g in zip(expected, got, strict=True)] == [0.0, 0.0]
