"""Gradient (activation) checkpointing: each encoder layer runs again in the backward pass, with the dropout
masks of its first run, so a training step gives the same losses and gradients; inference is untouched; the
pretrain and finetune commands take it as a flag, record it and let a resume change it."""

from __future__ import annotations

import csv
import json
import shutil
import signal
from pathlib import Path

import numpy as np
import pytest
import torch
from glue_fixtures import FILLER
from test_finetune import _encoder
from test_pretrain import corpus, small_run  # noqa: F401  (corpus: the tiny pre-training corpus fixture)
from test_skip_padding import HEADS, build, inputs
from typer.testing import CliRunner

from bertctl import model as model_module
from bertctl import optim
from bertctl.cli import app
from bertctl.config import BertConfig, FinetuneConfig
from bertctl.finetune import finetune_classify
from bertctl.model import BertForPreTraining

pytestmark = pytest.mark.usefixtures("one_thread")
TIMING = ("elapsed", "tokens_per_second")  # the only metrics fields two identical runs may differ in


def layer_runs(model: torch.nn.Module) -> tuple[list[int], object]:
    """A list that grows by one each time the first encoder layer starts (a recompute too, which may stop early
    once it has what the backward pass needs), and the hook's handle."""
    runs: list[int] = []
    return runs, model.bert.layers[0].register_forward_pre_hook(lambda *_: runs.append(1))


def step(model: torch.nn.Module, batch: dict, checkpointing: bool, **kwargs) -> tuple[list, dict, int]:
    """One forward and backward under seed 5: the losses, every parameter's gradient, the first layer's runs."""
    model.set_gradient_checkpointing(checkpointing)
    model.zero_grad()
    runs, hook = layer_runs(model)
    torch.manual_seed(5)
    out = model(**batch, **kwargs)
    out.loss.backward()
    hook.remove()
    losses = [loss.detach() for loss in (out.loss, out.mlm_loss, out.nsp_loss) if loss is not None]
    return losses, {name: p.grad.clone() for name, p in model.named_parameters()}, len(runs)


def assert_same_step(plain: tuple[list, dict, int], recomputed: tuple[list, dict, int]) -> None:
    (losses, grads, runs), (losses_ckpt, grads_ckpt, runs_ckpt) = plain, recomputed
    assert (runs, runs_ckpt) == (1, 2)  # the layer ran again in the backward pass
    for loss, loss_ckpt in zip(losses, losses_ckpt, strict=True):
        torch.testing.assert_close(loss_ckpt, loss, rtol=0, atol=1e-6)
    assert grads_ckpt.keys() == grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grads_ckpt[name], grad, rtol=0, atol=1e-6, msg=name)


def pretraining_batch(seed: int = 3) -> dict[str, torch.Tensor]:
    """Padded MLM+NSP rows: 3 masked positions each, NSP labels."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 97, (4, 12), generator=g)
    mask = (torch.arange(12) < torch.tensor([12, 7, 9, 5])[:, None]).long()
    labels = torch.full_like(ids, -100)
    labels[:, 1:4] = ids[:, 1:4]
    return {"input_ids": ids * mask, "token_type_ids": (torch.arange(12) >= 4).long() * mask,
            "attention_mask": mask, "mlm_labels": labels, "next_sentence_label": torch.tensor([0, 1, 1, 0])}


def pretraining_model(cfg: BertConfig) -> BertForPreTraining:
    torch.manual_seed(0)
    return BertForPreTraining(cfg).train()


def test_a_pretraining_step_recomputes_the_layers_and_gives_the_same_losses_and_gradients(odd_config):
    assert odd_config.hidden_dropout_prob == odd_config.attention_probs_dropout_prob == 0.1
    model, batch = pretraining_model(odd_config), pretraining_batch()
    assert_same_step(step(model, batch, False), step(model, batch, True))


@pytest.mark.parametrize("head", list(HEADS))
def test_a_fine_tuning_step_that_skips_padding_gives_the_same_loss_and_gradients(head, odd_config):
    model, batch = build(head, odd_config).train(), inputs(head, padded=True)
    assert_same_step(step(model, batch, False, skip_padding=True), step(model, batch, True, skip_padding=True))


def test_checkpointing_under_autocast_gives_the_same_step(odd_config):
    model, batch = pretraining_model(odd_config), pretraining_batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        plain, recomputed = step(model, batch, False), step(model, batch, True)
    assert_same_step(plain, recomputed)


def test_inference_and_no_grad_forwards_run_each_layer_once(odd_config):
    model, batch = pretraining_model(odd_config), pretraining_batch()
    model.set_gradient_checkpointing(True)
    runs, _ = layer_runs(model)
    with torch.no_grad():
        model(**batch)
    model.eval()(**batch).loss.backward()
    assert len(runs) == 2


def test_compiled_training_with_checkpointing_keeps_it_and_the_numbers(odd_config):
    from torch._dynamo.backends.debugging import aot_eager

    batch = {**pretraining_batch(), "mlm_predictions": 3}
    targets: list[str] = []

    def inspecting(graph: torch.fx.GraphModule, example_inputs: list) -> object:
        targets.extend(str(node.target) for node in graph.graph.nodes if node.op == "call_function")
        return aot_eager(graph, example_inputs)  # dynamo and AOT autograd as inductor sees them, without its codegen

    results = []
    for checkpointing in (False, True):
        torch._dynamo.reset()
        model = pretraining_model(odd_config)
        model.set_gradient_checkpointing(checkpointing)
        torch.manual_seed(5)
        loss = torch.compile(model, backend=inspecting)(**batch).loss  # no hooks: they would break the graph
        loss.backward()
        results.append((loss.detach(), {name: p.grad for name, p in model.named_parameters()}))
    assert targets.count("tag_activation_checkpoint") == odd_config.num_hidden_layers
    (losses, grads), (losses_ckpt, grads_ckpt) = results
    torch.testing.assert_close(losses_ckpt, losses, rtol=0, atol=1e-6)
    for name, grad in grads.items():
        torch.testing.assert_close(grads_ckpt[name], grad, rtol=0, atol=1e-6, msg=name)


@pytest.fixture
def checkpointed(monkeypatch) -> list[int]:
    """A list that grows by one each time a layer is run through torch.utils.checkpoint."""
    calls: list[int] = []
    real = model_module.checkpoint

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(model_module, "checkpoint", counting)
    return calls


def metrics_rows(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if k not in TIMING} for row in rows]


def test_pretrain_with_checkpointing_logs_the_same_losses_and_records_it(corpus, tmp_path, checkpointed):  # noqa: F811
    from bertctl.pretrain import pretrain

    pretrain(small_run(corpus, tmp_path / "plain", steps=4, save_every=0, dropout=0.1))
    assert not checkpointed
    pretrain(small_run(corpus, tmp_path / "ckpt", steps=4, save_every=0, dropout=0.1, gradient_checkpointing=True))
    assert len(checkpointed) == 4 * 2  # every step, both layers of the tiny model
    assert metrics_rows(tmp_path / "ckpt") == metrics_rows(tmp_path / "plain")
    assert json.loads((tmp_path / "ckpt" / "run.json").read_text())["config"]["gradient_checkpointing"] is True
    assert json.loads((tmp_path / "plain" / "run.json").read_text())["config"]["gradient_checkpointing"] is False
    assert "gradient_checkpointing" not in (tmp_path / "ckpt" / "final" / "config.json").read_text()


def test_a_pretraining_resume_may_turn_checkpointing_on(corpus, tmp_path, checkpointed, caplog):  # noqa: F811
    from bertctl.pretrain import pretrain

    pretrain(small_run(corpus, tmp_path / "full", steps=8, save_every=4, dropout=0.1))
    shutil.copytree(tmp_path / "full", tmp_path / "resumed")
    shutil.rmtree(tmp_path / "resumed" / "final")
    pretrain(small_run(corpus, tmp_path / "resumed", steps=8, save_every=4, dropout=0.1, resume=True,
                       gradient_checkpointing=True))
    assert len(checkpointed) == 4 * 2
    assert "--gradient-checkpointing False (now True)" in caplog.text
    assert metrics_rows(tmp_path / "resumed") == metrics_rows(tmp_path / "full")
    assert json.loads((tmp_path / "resumed" / "run.json").read_text())["config"]["gradient_checkpointing"] is True


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> tuple[Path, Path]:
    """A classify training file and an encoder for it."""
    root = tmp_path_factory.mktemp("classify")
    rng = np.random.default_rng(0)
    rows = [(" ".join(rng.choice(FILLER[:10], int(rng.integers(2, 9)))) + f" {word}", word)
            for word in rng.choice(["yes", "no"], 24)]  # lengths differ: batches have padding to skip
    with open(root / "train.csv", "w", newline="") as handle:
        csv.writer(handle).writerows([("text", "label"), *rows])
    return root / "train.csv", _encoder(root / "encoder")


def classify_args(table: tuple[Path, Path], out: Path, *extra: str) -> list[str]:
    train, encoder = table
    return ["finetune", "classify", "--model", str(encoder), "--train", str(train), "--text-columns", "text",
            "--out", str(out), "--epochs", "2", "--batch-size", "8", "--lr", "2e-3", "--max-seq-length", "16",
            "--log-every", "1", "--device", "cpu", *extra]


def test_finetune_classify_with_the_flag_logs_the_same_losses_and_records_it(table, tmp_path, checkpointed):
    plain = CliRunner().invoke(app, classify_args(table, tmp_path / "plain"))
    assert plain.exit_code == 0, plain.output
    assert not checkpointed
    (tmp_path / "run.yaml").write_text("gradient_checkpointing: true\n")
    for out, extra in (("flag", ["--gradient-checkpointing"]), ("file", ["--config", str(tmp_path / "run.yaml")])):
        result = CliRunner().invoke(app, classify_args(table, tmp_path / out, *extra))
        assert result.exit_code == 0, result.output
        assert metrics_rows(tmp_path / out) == metrics_rows(tmp_path / "plain")
        assert json.loads((tmp_path / out / "run.json").read_text())["config"]["gradient_checkpointing"] is True
        assert "gradient_checkpointing" not in (tmp_path / out / "config.json").read_text()
    assert len(checkpointed) == 2 * 2 * 6  # two runs of 6 steps, 2 layers each
    assert json.loads((tmp_path / "plain" / "run.json").read_text())["config"]["gradient_checkpointing"] is False


def test_a_fine_tuning_resume_may_turn_checkpointing_on(table, tmp_path, monkeypatch):
    train, encoder = table
    settings = {"model": encoder, "train": train, "text_columns": ("text",), "epochs": 2, "batch_size": 8,
                "lr": 2e-3, "max_seq_length": 16, "log_every": 1, "device": "cpu"}
    full = finetune_classify(FinetuneConfig(out=tmp_path / "full", **settings))
    lr_factor = optim.lr_factor

    def stopping(k: int, *args) -> float:  # SIGTERM as step index 4 begins: the run saves and stops after it
        if k == 4:
            signal.raise_signal(signal.SIGTERM)
        return lr_factor(k, *args)

    monkeypatch.setattr(optim, "lr_factor", stopping)
    assert finetune_classify(FinetuneConfig(out=tmp_path / "run", **settings)) is None
    monkeypatch.setattr(optim, "lr_factor", lr_factor)
    resumed = finetune_classify(FinetuneConfig(out=tmp_path / "run", resume=True, gradient_checkpointing=True,
                                               **settings))
    a, b = metrics_rows(full), metrics_rows(resumed)
    assert [row["step"] for row in a] == [row["step"] for row in b]
    assert max(abs(x["loss"] - y["loss"]) for x, y in zip(a, b, strict=True) if "loss" in x) < 1e-6
    assert json.loads((resumed / "run.json").read_text())["config"]["gradient_checkpointing"] is True
