"""Models whose outputs are NaN (a fine-tuning run that blew up, NaN weights): no metric claims a score, the
best epoch and seed are real ones when there are any, and every JSON output says null, never a bare NaN."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch
from glue_fixtures import write_glue_data
from typer.testing import CliRunner

import bertctl.finetune_classifier
from bertctl.checkpoint import save_model
from bertctl.cli import app
from bertctl.config import BertConfig, FinetuneConfig
from bertctl.data.tabular import TabularTask
from bertctl.evaluate import print_results
from bertctl.finetune import finetune_classify
from bertctl.finetune_seed import Progress
from bertctl.finetune_work import finished_results
from bertctl.model import BertForMaskedLM, BertForSequenceClassification
from bertctl.results_summary import summarize
from bertctl.tokenizer import BertTokenizer

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "cat", "sat", "cold", "warm"]
CONFIG = {"vocab_size": len(VOCAB), "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
          "intermediate_size": 32, "max_position_embeddings": 32}
REGRESSION = TabularTask((), ("pearson", "spearman"), "spearman", None, None)

pytestmark = pytest.mark.usefixtures("one_thread")


def _cli(*args: str | Path):
    return CliRunner().invoke(app, [str(a) for a in args])


def strict(text: str):
    """json.loads without Python's extension: a bare NaN/Infinity is an error, as in jq and most parsers."""
    def refuse(token: str):
        raise AssertionError(f"bare {token} in JSON: {text[:200]}")

    return json.loads(text, parse_constant=refuse)


def _nan_weights(model: torch.nn.Module) -> torch.nn.Module:
    with torch.no_grad():
        next(model.parameters()).fill_(math.nan)  # the word embeddings
    return model


@pytest.fixture(scope="module")
def encoder(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    return save_model(BertForMaskedLM(BertConfig(**CONFIG)), tmp_path_factory.mktemp("model") / "encoder",
                      BertTokenizer.from_vocab(VOCAB))


@pytest.fixture(scope="module")
def scores(tmp_path_factory) -> Path:
    """A tiny regression table: cold 0.5, warm 4.5."""
    folder = tmp_path_factory.mktemp("scores")
    lines = [json.dumps({"text": f"the {w} cat", "score": {"cold": 0.5, "warm": 4.5}[w]}) for w in ["cold", "warm"] * 8]
    (folder / "scores.jsonl").write_text("\n".join(lines) + "\n")
    return folder / "scores.jsonl"


@pytest.fixture(scope="module")
def blown_run(encoder, scores, tmp_path_factory) -> tuple[Path, str]:
    """Two seeds of `finetune classify` at --lr 1e30: the regression outputs go NaN; returns (run, stderr)."""
    out = tmp_path_factory.mktemp("blown") / "run"
    result = _cli("finetune", "classify", "--model", encoder, "--train", scores, "--validation", scores,
                  "--text-columns", "text", "--label-column", "score", "--out", out, "--epochs", "2", "--lr", "1e30",
                  "--batch-size", "4", "--max-seq-length", "16", "--max-bad-steps", "100", "--seeds", "1,2")
    assert result.exit_code == 0, result.output
    return out, result.stderr


def test_a_blown_up_run_scores_null_everywhere_and_says_so(blown_run, scores, tmp_path):
    run, stderr = blown_run
    assert "spearman was NaN after every epoch" in stderr
    summary = strict((run / "results.json").read_text())
    assert summary["runs"]["1"]["validation"] == {"pearson": None, "spearman": None}  # spearman was a number
    assert summary["summary"]["validation"]["spearman"]["mean"] is None
    results = strict((run / "seed-1" / "eval_results.json").read_text())
    assert results["validation"] == {"pearson": None, "spearman": None} and results["best_epoch"] == 1
    shown = _cli("evaluate", "classify", "--model", run, "--data", scores, "--json")
    assert shown.exit_code == 0, shown.output
    assert strict(shown.stdout) == {"task": "classify", "data": str(scores), "pearson": None, "spearman": None}
    predicted = _cli("predict", "classify", "--model", run, "--data", scores, "--out", tmp_path / "p.jsonl")
    assert predicted.exit_code == 0, predicted.output
    rows = [strict(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert rows[0] == {"index": 0, "prediction": None} and len(rows) == 16


def test_a_nan_epoch_is_never_kept_over_a_real_one(encoder, scores, tmp_path, monkeypatch):
    """Epoch 2 is the only real score; before, NaN compared neither better nor worse and epoch 3 replaced it."""
    dev = iter([math.nan, 0.25, math.nan])
    monkeypatch.setattr(bertctl.finetune_classifier, "score", lambda *args, **kwargs: {
        "validation": {"pearson": 0.0, "spearman": next(dev)}})
    out = finetune_classify(FinetuneConfig(model=encoder, train=scores, validation=scores, text_columns=("text",),
                                           label_column="score", out=tmp_path / "run", epochs=3, lr=1e-3,
                                           batch_size=8, max_seq_length=16))
    results = strict((out / "eval_results.json").read_text())
    assert results["best_epoch"] == 2 and results["validation"]["spearman"] == 0.25
    assert results["best_step"] == 4  # epoch 2's last step (2 steps an epoch), not the run's last


def test_the_best_seed_is_a_real_one_and_the_spread_over_a_nan_seed_is_nan():
    runs = {1: {"validation": {"pearson": math.nan, "spearman": math.nan}},
            2: {"validation": {"pearson": 0.5, "spearman": 0.25}}}
    summary = summarize(REGRESSION, runs)
    assert summary["best_seed"] == 2
    assert math.isnan(summary["summary"]["validation"]["spearman"]["mean"])


def test_evaluate_glue_json_says_null(capsys):
    print_results("stsb", {"dev": {"pearson": math.nan, "spearman": math.inf}}, as_json=True)
    assert strict(capsys.readouterr().out) == {"task": "stsb", "dev": {"pearson": None, "spearman": None}}


def test_a_finished_seeds_null_scores_are_nan_again_on_resume(tmp_path):
    (tmp_path / "done").mkdir()
    (tmp_path / "done" / "eval_results.json").write_text(json.dumps(
        {"task": "classify", "validation": {"pearson": None, "spearman": None}, "main_metric": "spearman"}))
    results = finished_results(tmp_path)
    assert math.isnan(results["validation"]["spearman"]) and results["task"] == "classify"
    assert summarize(REGRESSION, {1: results, 2: {"validation": {"pearson": 0.5, "spearman": 0.25}}})["best_seed"] == 2


def test_a_checkpoints_nan_best_score_is_null_in_json_and_nan_again_on_resume():
    progress = Progress(step=4, best={"epoch": 1, "step": 4, "scores": {"validation": {"spearman": math.nan}}})
    record = strict(json.dumps(progress.record()))
    assert record["best"]["scores"] == {"validation": {"spearman": None}}
    assert math.isnan(Progress.from_record(record, log_every=4).best["scores"]["validation"]["spearman"])


@pytest.fixture(scope="module")
def nan_classifier(tmp_path_factory) -> Path:
    """A two-class classifier (cold: 0, warm: 1 as labels) whose word embeddings are NaN."""
    torch.manual_seed(0)
    model = _nan_weights(BertForSequenceClassification(BertConfig(**CONFIG), num_labels=2))
    return save_model(model, tmp_path_factory.mktemp("nan") / "classifier", BertTokenizer.from_vocab(VOCAB),
                      labels=["0", "1"], problem_type="single_label_classification",
                      config_extra={"finetuning_task": "sst2"})


def test_nan_logits_are_no_class_not_class_0(nan_classifier, tmp_path):
    """argmax of NaN logits is 0, so every metric scored a model of NaNs as if it predicted class 0."""
    data = tmp_path / "data.csv"
    with open(data, "w", newline="") as handle:
        csv.writer(handle).writerows([("text", "label"), *[(f"the {w}", "0") for w in ("cold", "warm") * 3]])
    shown = _cli("evaluate", "classify", "--model", nan_classifier, "--data", data, "--text-columns", "text", "--json")
    assert shown.exit_code == 0, shown.output
    assert strict(shown.stdout) == {"task": "classify", "data": str(data), "accuracy": None, "f1": None,
                                    "matthews_correlation": None}  # accuracy was 1.0
    predicted = _cli("predict", "classify", "--model", nan_classifier, "--data", data, "--text-columns", "text",
                     "--out", tmp_path / "p.jsonl")
    assert predicted.exit_code == 0, predicted.output
    first = strict((tmp_path / "p.jsonl").read_text().splitlines()[0])
    assert first == {"index": 0, "prediction": None, "probabilities": {"0": None, "1": None}}


def test_a_submission_of_nan_logits_is_refused_in_one_line(nan_classifier, tmp_path):
    glue = write_glue_data(tmp_path / "glue", tasks=("sst2",), n_train=4, n_dev=4, n_test=4)
    result = _cli("predict", "glue", "sst2", "--model", nan_classifier, "--data", glue, "--out", tmp_path / "sub")
    assert result.exit_code == 1 and "sst2: the model's output is nan" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "sub" / "SST-2.tsv").exists()


def test_fill_json_says_null_for_the_scores_of_a_nan_model(tmp_path):
    folder = save_model(_nan_weights(BertForMaskedLM(BertConfig(**CONFIG))), tmp_path / "mlm",
                        BertTokenizer.from_vocab(VOCAB))
    result = _cli("fill", "--model", folder, "--json", "--top-k", "2", "the [MASK] cat")
    assert result.exit_code == 0, result.output
    [line] = result.stdout.splitlines()
    assert [p["score"] for p in strict(line)["predictions"][0]] == [None, None]
