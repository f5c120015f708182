"""Every head against transformers' matching Bert* class, same weights, odd shapes, padding, segments."""

from __future__ import annotations

import pytest
import torch
from safetensors import safe_open

transformers = pytest.importorskip("transformers")

from bertctl.checkpoint import load_model, save_model  # noqa: E402
from bertctl.config import ACTIVATIONS  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

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
def test_a_training_forward_drops_out_where_transformers_does_with_the_same_masks(name, odd_config, tmp_path):
    """Training mode, dropout 0.1 (attention probabilities' 0.25, and a classifier_dropout of its own): under one
    seed every dropout (embeddings, attention probabilities, both sublayers' outputs, the classifier's) draws
    transformers' masks in transformers' order, so the outputs are equal; a dropout moved, dropped or at another
    rate shows."""
    classifier = name in ("BertForSequenceClassification", "BertForTokenClassification", "BertForMultipleChoice")
    config = odd_config.replace(attention_probs_dropout_prob=0.25)
    reference = reference_model(name, config, **({"classifier_dropout": 0.3} if classifier else {})).train()
    reference.save_pretrained(tmp_path / "hf")
    ours = load_model(tmp_path / "hf").train()
    ids, types, mask = batch(odd_config)
    if name == "BertForMultipleChoice":
        ids, types, mask = (t.view(1, 3, -1).expand(2, 3, -1).contiguous() for t in (ids, types, mask))
    with torch.no_grad():
        torch.manual_seed(5)
        expected = outputs(name, reference(input_ids=ids, token_type_ids=types, attention_mask=mask))
        torch.manual_seed(5)
        got = outputs(name, ours(ids, types, mask))
    for e, g in zip(expected, got, strict=True):
        diff = (g - e).abs().max().item()
        assert diff <= TOLERANCE, f"{name}: max |diff| {diff:.2e}"


@pytest.mark.parametrize("name", HEADS)
def test_transformers_loads_our_folder_without_missing_or_unexpected_keys(name, odd_config, tmp_path):
    reference = reference_model(name, odd_config)
    reference.save_pretrained(tmp_path / "hf")
    save_model(load_model(tmp_path / "hf"), tmp_path / "ours")
    stored = [set(safe_open(str(tmp_path / d / "model.safetensors"), "pt").keys()) for d in ("hf", "ours")]
    assert stored[1] == stored[0]  # save_pretrained's names: a bare BertModel's without the `bert.` prefix
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
    labels[2, 4] = 0  # id 0 ([PAD] here) is a target like any other: only IGNORE_INDEX is skipped
    with torch.no_grad():
        sparse = model(ids, types, mask, mlm_labels=labels).mlm_loss
        dense_logits = model(ids, types, mask).logits
        fixed = [model(ids, types, mask, mlm_labels=labels, mlm_predictions=p).mlm_loss for p in (3, 4)]  # static
        nothing_masked = model(ids, types, mask, mlm_labels=torch.full_like(ids, -100)).mlm_loss
    dense = torch.nn.functional.cross_entropy(dense_logits.view(-1, odd_config.vocab_size), labels.view(-1))
    assert abs(sparse.item() - dense.item()) < 1e-6
    assert all(abs(f.item() - dense.item()) < 1e-6 for f in fixed)  # 3: as many slots as row 0 has labels
    assert nothing_masked.item() == 0.0  # transformers' is NaN (python-api.md says so)


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


def _reference_lamb_step(params: dict[str, torch.Tensor], grads: dict[str, torch.Tensor], state: dict, step: int,
                         lr: float, weight_decay: float, betas=(0.9, 0.999), eps: float = 1e-6) -> None:
    """LAMB as NVIDIA's apex FusedLAMB runs it by default for BERT (bias correction; the trust ratio only on
    the decayed matrices; biases and LayerNorm weights take plain Adam steps), written out per tensor."""
    for name, param in params.items():
        m, v = state.setdefault(name, (torch.zeros_like(param), torch.zeros_like(param)))
        m.mul_(betas[0]).add_(grads[name], alpha=1 - betas[0])
        v.mul_(betas[1]).addcmul_(grads[name], grads[name], value=1 - betas[1])
        update = (m / (1 - betas[0] ** step)) / ((v / (1 - betas[1] ** step)).sqrt() + eps)
        if param.ndim >= 2:
            update = update + weight_decay * param
            w_norm, u_norm = param.norm(), update.norm()
            update = update * (w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0)
        param.sub_(lr * update)


def _lamb_pair(odd_config, tmp_path, lr, zero_token_types=False):
    """bertctl's LAMB over a model loaded from a transformers one, and that one's parameters by name."""
    from bertctl import optim

    reference = reference_model("BertForPreTraining", odd_config)
    if zero_token_types:  # a decayed matrix whose norm is 0
        with torch.no_grad():
            reference.bert.embeddings.token_type_embeddings.weight.zero_()
    reference.save_pretrained(tmp_path / "hf")
    ours = load_model(tmp_path / "hf")
    optimizer = optim.make_optimizer("lamb", ours, lr=lr, weight_decay=0.01, betas=(0.9, 0.999), eps=1e-6)
    return ours, dict(reference.named_parameters()), optimizer


def test_lamb_steps_a_fused_qkv_model_as_apex_steps_separate_query_key_value(odd_config, tmp_path):
    """The trust ratio of the fused Q/K/V matrix is taken per third, as for transformers' three matrices, and
    biases and LayerNorm weights are not scaled by one (their ||w|| starts at 0, which would freeze them)."""
    from bertctl.checkpoint_names import to_transformers_names

    ours, theirs, optimizer = _lamb_pair(odd_config, tmp_path, lr=1e-2)
    state: dict = {}
    g = torch.Generator().manual_seed(3)
    for step in (1, 2):
        for param in ours.parameters():
            param.grad = torch.randn(param.shape, generator=g)
        grads = to_transformers_names({n: p.grad for n, p in ours.named_parameters()})
        assert set(theirs) <= set(grads)
        optimizer.step()
        with torch.no_grad():
            _reference_lamb_step(theirs, grads, state, step, lr=1e-2, weight_decay=0.01)
    stepped = to_transformers_names({n: p.detach() for n, p in ours.named_parameters()})
    assert max((stepped[n] - p).abs().max().item() for n, p in theirs.items()) < 1e-6


@pytest.mark.parametrize("schedule", ["linear", "cosine", "constant"])
@pytest.mark.parametrize(("warmup", "total"), [(0, 7), (3, 10), (4, 33), (10, 10)])
def test_learning_rate_schedules_are_transformers_bit_for_bit(schedule, warmup, total):
    """The lr of the optimizer step after k steps, as transformers' Trainer (and Google's warmup) sets it:
    the first warmup step runs at 0, the peak is reached at step `warmup`, linear decay ends at 1/(T-w) and stays
    at 0 past the total, where the cosine rises again."""
    from bertctl import optim

    make = {"linear": transformers.get_linear_schedule_with_warmup,
            "cosine": transformers.get_cosine_schedule_with_warmup,
            "constant": transformers.get_constant_schedule_with_warmup}[schedule]
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    args = (optimizer, warmup) if schedule == "constant" else (optimizer, warmup, total)
    theirs = make(*args).lr_lambdas[0]
    steps = range(total + 3)
    assert [optim.lr_factor(k, total, warmup, schedule) for k in steps] == [theirs(k) for k in steps]


@pytest.mark.parametrize(("num_labels", "labels"), [
    (1, [3, 0, 5]),  # a regression head with whole-number scores: MSE, as transformers (not a class index)
    (1, [0.5, 4.25, 2.0]),
    (5, [4, 0, 2]),
    (2, [1, 0, 1]),  # two classes are classes: cross-entropy
])
def test_sequence_classification_loss_matches_transformers(num_labels, labels, odd_config, tmp_path):
    reference = reference_model("BertForSequenceClassification", odd_config, num_labels=num_labels)
    reference.save_pretrained(tmp_path / "hf")
    ours = load_model(tmp_path / "hf").eval()
    ids, types, mask = batch(odd_config)
    with torch.no_grad():
        expected = reference(input_ids=ids, token_type_ids=types, attention_mask=mask, labels=torch.tensor(labels)).loss
        got = ours(ids, types, mask, labels=torch.tensor(labels)).loss
    assert abs(got.item() - expected.item()) <= TOLERANCE * max(1.0, abs(expected.item()))


@pytest.mark.parametrize(("name", "nsp"), [("BertForPreTraining", True), ("BertForMaskedLM", False)])
def test_a_pretraining_models_loss_is_transformers_total_loss(name, nsp, odd_config, tmp_path):
    """`loss` of a library call with labels: MLM's mean over the masked tokens, plus NSP's with its labels."""
    reference = reference_model(name, odd_config)
    reference.save_pretrained(tmp_path / "hf")
    ours = load_model(tmp_path / "hf").eval()
    inputs = _pretraining_batch(odd_config, unmasked_rows=(1,))
    ids, types, mask, labels = (inputs[k] for k in ("input_ids", "token_type_ids", "attention_mask", "mlm_labels"))
    nsp_label = {"next_sentence_label": inputs["next_sentence_label"]} if nsp else {}
    with torch.no_grad():
        expected = reference(input_ids=ids, token_type_ids=types, attention_mask=mask, labels=labels, **nsp_label).loss
        got = ours(ids, types, mask, mlm_labels=labels, **nsp_label).loss
    assert abs(got.item() - expected.item()) <= TOLERANCE


@pytest.mark.parametrize(("starts", "ends"), [([3, 0, 36], [5, 0, 36]), ([2, 37, 90], [4, 40, 6])])
def test_question_answering_loss_matches_transformers(starts, ends, odd_config, tmp_path):
    """The mean of the start and end cross-entropies; positions past the sequence (37 tokens) are ignored."""
    reference = reference_model("BertForQuestionAnswering", odd_config)
    reference.save_pretrained(tmp_path / "hf")
    ours = load_model(tmp_path / "hf").eval()
    ids, types, mask = batch(odd_config)
    positions = {"start_positions": torch.tensor(starts), "end_positions": torch.tensor(ends)}
    with torch.no_grad():
        expected = reference(input_ids=ids, token_type_ids=types, attention_mask=mask, **positions).loss
        got = ours(ids, types, mask, **positions).loss
    assert abs(got.item() - expected.item()) <= TOLERANCE


def _pretraining_batch(config, unmasked_rows: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """Padded rows (segments where the model has two) with ~30% of the real tokens labelled, [CLS] never;
    the rows in `unmasked_rows` without a label. One real token is [PAD]'s id, as masking's random replacement
    may make it: its embedding row takes no gradient from the lookup, in transformers as here (padding_idx)."""
    ids, types, mask = batch(config, seed=4, batch_size=4, length=min(config.max_position_embeddings, 23))
    ids[0, 3] = 0
    types = types if config.type_vocab_size > 1 else torch.zeros_like(types)
    g = torch.Generator().manual_seed(5)
    chosen = (torch.rand(ids.shape, generator=g) < 0.3) & (mask == 1)
    chosen[:, 0] = False
    chosen[list(unmasked_rows)] = False
    labels = torch.full_like(ids, -100)
    labels[chosen] = torch.randint(0, config.vocab_size, (int(chosen.sum()),), generator=g)
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask, "mlm_labels": labels,
            "next_sentence_label": torch.tensor([0, 1, 1, 0])}


@pytest.mark.parametrize(("name", "shape", "unmasked_rows"), [
    ("BertForPreTraining", {}, ()),
    ("BertForPreTraining", {"num_attention_heads": 1}, (0, 2)),  # rows without a masked token
    ("BertForPreTraining", {}, (0, 1, 2, 3)),  # a batch without one: NSP's gradient alone
    ("BertForMaskedLM", {"type_vocab_size": 1, "max_position_embeddings": 9}, (1,)),
])
def test_pretraining_loss_masked_logits_and_every_gradient_match_transformers(name, shape, unmasked_rows,
                                                                             odd_config, tmp_path):
    """pretrain's loss terms on a transformers model's weights (odd vocabulary, padding, dropout 0), with the
    sparse tied-embedding gradient pretrain uses: the loss, the logits at the masked positions and the gradient
    of every parameter are transformers' (its MLM cross-entropy over the labels, plus NSP's)."""
    import torch.nn.functional as F

    from bertctl import training
    from bertctl.checkpoint_names import to_transformers_names
    from bertctl.pretraining_objective import loss_terms

    config = odd_config.replace(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **shape)
    reference = reference_model(name, config).train()
    reference.save_pretrained(tmp_path / "hf")
    ours = load_model(tmp_path / "hf").train()
    training.sparse_tied_embedding_grads(ours, training.Distributed(), compiled=False)
    inputs = _pretraining_batch(config, unmasked_rows)
    nsp = name == "BertForPreTraining"
    if not nsp:
        del inputs["next_sentence_label"]
    labels = inputs["mlm_labels"]
    terms = loss_terms(ours, inputs)
    loss = sum(mean for mean, _ in terms.values())
    loss.backward()
    out = reference(input_ids=inputs["input_ids"], token_type_ids=inputs["token_type_ids"],
                    attention_mask=inputs["attention_mask"])
    logits = out.prediction_logits if nsp else out.logits
    expected = F.cross_entropy(logits.flatten(0, 1), labels.flatten()) if (labels != -100).any() else 0.0 * logits.sum()
    if nsp:
        expected = expected + F.cross_entropy(out.seq_relationship_logits, inputs["next_sentence_label"])
    expected.backward()
    assert abs(loss.item() - expected.item()) <= TOLERANCE
    with torch.no_grad():
        masked = ours(inputs["input_ids"], inputs["token_type_ids"], inputs["attention_mask"], mlm_labels=labels)
    torch.testing.assert_close(masked.logits, logits[labels != -100].detach(), rtol=0.0, atol=TOLERANCE)
    grads = to_transformers_names({n: p.grad.to_dense() for n, p in ours.named_parameters() if p.grad is not None})
    for key, param in reference.named_parameters():
        want = param.grad if param.grad is not None else torch.zeros_like(param)
        got = grads.get(key, torch.zeros_like(param))
        assert (got - want).abs().max().item() <= TOLERANCE * max(1.0, want.abs().max().item()), key


def test_pretrains_clipped_lamb_step_is_apex_fused_lamb_with_its_global_clipping(odd_config, tmp_path):
    """pretrain's step (optimizer_step: clip at --clip 1.0, then LAMB) as apex's FusedLAMB(max_grad_norm=1.0) runs
    it: every gradient divided by global norm / 1.0 when that is above 1, then the LAMB step; a decayed matrix
    whose norm is 0 steps with ratio 1 (apex: the bare lr), so it leaves 0."""
    from bertctl import training
    from bertctl.checkpoint_names import to_transformers_names

    ours, theirs, optimizer = _lamb_pair(odd_config, tmp_path, lr=5e-3, zero_token_types=True)
    state: dict = {}
    g = torch.Generator().manual_seed(3)
    for step in (1, 2, 3):
        targets = {n: torch.randn(p.shape, generator=g) * 0.3 for n, p in ours.named_parameters()}  # norm >> 1

        def terms(model, batch, targets=targets):  # a loss whose gradient is `targets`
            loss = sum((p * targets[n]).sum() for n, p in model.named_parameters())
            return {"mlm": (loss, torch.zeros(()))}

        result = training.optimizer_step(ours, [{}], optimizer, terms, lambda batch: {"mlm": torch.ones(())},
                                         training.Distributed(), "fp32", clip=1.0)
        grads = to_transformers_names(targets)
        norm = torch.sqrt(sum((t.double() ** 2).sum() for t in targets.values())).item()
        assert result.values[result.names.index("grad_norm")].item() == pytest.approx(norm, rel=1e-5)
        with torch.no_grad():
            _reference_lamb_step(theirs, {n: grads[n] / max(norm, 1.0) for n in theirs}, state, step, lr=5e-3,
                                 weight_decay=0.01)
    stepped = to_transformers_names({n: p.detach() for n, p in ours.named_parameters()})
    assert max((stepped[n] - p).abs().max().item() for n, p in theirs.items()) < 1e-6
    assert stepped["bert.embeddings.token_type_embeddings.weight"].abs().max() > 1e-3


def test_fresh_weights_are_initialised_as_transformers_initialises_bert(odd_config):
    """transformers' BertPreTrainedModel._init_weights: matrices Normal(0, initializer_range), [PAD]'s embedding
    row 0, biases 0 (the MLM decoder's too), LayerNorm weights 1."""
    from bertctl.model import BertForPreTraining

    torch.manual_seed(0)
    model = BertForPreTraining(odd_config.replace(initializer_range=0.3))
    for name, param in model.named_parameters():
        if param.ndim == 2 and param.numel() > 1000:  # enough draws for a std within a few percent
            assert abs(param.std().item() / 0.3 - 1) < 0.1, name
        elif param.ndim == 1:
            expected = torch.ones_like(param) if "norm.weight" in name else torch.zeros_like(param)
            assert torch.equal(param, expected), name
    assert not model.bert.embeddings.word.weight[odd_config.pad_token_id].any()
