"""Fine-tuning, evaluation and prediction: a tiny BERT on tiny synthetic GLUE data in the official layouts, CPU."""

from __future__ import annotations

import csv
import itertools
import json
import logging
import os
import shutil
import statistics
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import never_called
from glue_fixtures import FILLER, KEYWORDS_3, write_glue_data
from typer.testing import CliRunner

from bertctl import finetune, finetune_classifier
from bertctl.checkpoint import folder_head_dropout, read_checkpoint, save_model
from bertctl.cli import app
from bertctl.config import BertConfig, FinetuneConfig
from bertctl.data.batches import train_batches
from bertctl.data.glue import TASKS, Examples, get_task, read_split
from bertctl.errors import UsageError
from bertctl.evaluate import Features, collate, encode_examples, evaluate_glue, truncate_pair
from bertctl.finetune import finetune_classify, finetune_glue
from bertctl.model import BertForMaskedLM
from bertctl.predict import predict_glue
from bertctl.results_summary import PAPER_COLUMNS, glue_markdown, glue_table, main_score, seeds_markdown, summarize
from bertctl.tokenizer import BertTokenizer

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "'", "s", '"',
         *[w for w in FILLER if w not in ("'s", '"')], *KEYWORDS_3, "yes", "no"]
RUN_FILES = {"config.json", "model.safetensors", "tokenizer.json", "vocab.txt", "tokenizer_config.json",
             "special_tokens_map.json", "eval_results.json", "run.json", "metrics.jsonl"}
FAST = {"lr": 5e-3, "batch_size": 16, "max_seq_length": 32, "eval_batch_size": 16, "log_every": 4}


pytestmark = pytest.mark.usefixtures("one_thread")


def _encoder(folder: Path) -> Path:
    """A random 2-layer BERT with an MLM head and no pooler, as pre-training with `--objective mlm` leaves it."""
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)
    return save_model(BertForMaskedLM(config), folder, BertTokenizer.from_vocab(VOCAB))


@pytest.fixture(scope="module")
def encoder(tmp_path_factory) -> Path:
    return _encoder(tmp_path_factory.mktemp("model") / "encoder")


@pytest.fixture(scope="module")
def glue(tmp_path_factory) -> Path:
    return write_glue_data(tmp_path_factory.mktemp("glue"), n_train=128, n_dev=48, n_test=12)


@pytest.fixture(scope="module")
def small_glue(tmp_path_factory) -> Path:
    return write_glue_data(tmp_path_factory.mktemp("small_glue"), n_train=16, n_dev=8, n_test=6, seed=1)


def _cli(*args: str | Path):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def sst2_run(encoder, glue, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "sst2"
    result = _cli("finetune", "glue", "sst2", "--model", encoder, "--data", glue, "--out", out, "--lr", "2e-3",
                  "--epochs", "6", "--batch-size", "8", "--max-seq-length", "32", "--eval-batch-size", "16",
                  "--log-every", "4", "--seeds", "7")
    assert result.exit_code == 0, result.output
    assert "new classifier head (2 output(s)); the pooler is new too" in result.stderr
    return out


def test_sst2_learns_the_rule_and_writes_a_complete_run_folder(sst2_run):
    assert {p.name for p in sst2_run.iterdir()} - {"tensorboard"} == RUN_FILES  # event files if installed
    assert not [p for p in sst2_run.parent.iterdir() if p.name.startswith(".")]  # no work folder left behind
    results = json.loads((sst2_run / "eval_results.json").read_text())
    assert results["dev"]["accuracy"] >= 0.9  # chance is 0.5
    assert (results["task"], results["main_metric"], results["seed"]) == ("sst2", "accuracy", 7)
    rows = [json.loads(line) for line in (sst2_run / "metrics.jsonl").read_text().splitlines()]
    epochs = [row for row in rows if "dev_accuracy" in row]
    assert [row["epoch"] for row in epochs] == [1, 2, 3, 4, 5, 6]
    assert {type(row["epoch"]) for row in rows if "epoch" in row} == {float}  # one type, as transformers' Trainer
    assert max(row["dev_accuracy"] for row in epochs) == results["dev"]["accuracy"]
    assert epochs[results["best_epoch"] - 1]["dev_accuracy"] == results["dev"]["accuracy"]
    assert all({"loss", "accuracy", "lr", "grad_norm"} <= set(row) for row in rows if "dev_accuracy" not in row)
    run = json.loads((sst2_run / "run.json").read_text())
    assert run["config"]["lr"] == 2e-3 and run["config"]["max_seq_length"] == 32 and run["steps"] == 96
    assert run["warmup_steps"] == 10 and run["fresh_heads"] == ["classifier", "pooler"]
    config = json.loads((sst2_run / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"]
    assert config["id2label"] == {"0": "negative", "1": "positive"}  # nyu-mll/glue's names, as run_glue.py saves
    assert config["finetuning_task"] == "sst2"


def test_evaluate_reproduces_eval_results_exactly(sst2_run, glue):
    results = json.loads((sst2_run / "eval_results.json").read_text())
    assert evaluate_glue("sst2", sst2_run, glue) == {"dev": results["dev"]}
    shown = _cli("evaluate", "glue", "SST-2", "--model", sst2_run, "--data", glue, "--json", "--split", "Dev",
                 "--device", "CPU", "--precision", "FP32")  # names of a fixed set, in any case
    assert shown.exit_code == 0 and len(shown.stdout.strip().splitlines()) == 1
    assert json.loads(shown.stdout) == {"task": "sst2", "dev": results["dev"]}


def test_evaluate_refuses_a_precision_the_device_cannot_run_before_a_text_is_tokenized(sst2_run, glue, monkeypatch):
    """--precision fp16 on the CPU was refused once every split was tokenized; the model is placed once they are
    read."""
    from bertctl import evaluate

    monkeypatch.setattr(evaluate, "encode_parts", never_called("encode_parts"))
    with pytest.raises(UsageError, match="^--precision fp16 needs a CUDA device"):
        evaluate_glue("sst2", sst2_run, glue, device="cpu", precision="fp16")


def test_scoring_with_a_model_tuned_on_another_task_is_warned_about_or_refused(sst2_run, glue, caplog, tmp_path):
    """Saved with the hub's class names (run_glue.py's), an SST-2 model is told apart from a CoLA one by its
    labels; a task with the same names (RTE and QNLI) is told by finetuning_task, and scored with a warning."""
    with pytest.raises(UsageError, match="has the labels negative, positive, which do not match cola's 0, 1 "):
        evaluate_glue("cola", sst2_run, glue)
    evaluate_glue("sst2", sst2_run, glue)
    assert "fine-tuned on" not in caplog.text
    relabelled = tmp_path / "relabelled"
    shutil.copytree(sst2_run, relabelled)
    config = json.loads((relabelled / "config.json").read_text())
    (relabelled / "config.json").write_text(json.dumps({**config, "finetuning_task": "imdb"}))
    evaluate_glue("sst2", relabelled, glue)
    assert "fine-tuned on" not in caplog.text  # not a GLUE task: nothing to compare with
    (relabelled / "config.json").write_text(json.dumps({**config, "finetuning_task": "cola"}))
    evaluate_glue("sst2", relabelled, glue)
    assert f"{relabelled} was fine-tuned on cola, not sst2" in caplog.text


def test_transformers_loads_the_run_as_a_sequence_classifier(sst2_run):
    transformers = pytest.importorskip("transformers")
    from bertctl.checkpoint import load_model

    theirs = transformers.BertForSequenceClassification.from_pretrained(sst2_run).eval()
    ours = load_model(sst2_run).eval()
    ids = torch.tensor([[2, 9, 10, 28, 3, 0], [2, 30, 9, 11, 12, 3]])
    mask = (ids != 0).long()
    torch.testing.assert_close(theirs(input_ids=ids, attention_mask=mask).logits, ours(ids, None, mask).logits,
                               atol=1e-5, rtol=1e-4)


def test_same_seed_gives_the_same_bytes(encoder, small_glue, tmp_path):
    names = ("model.safetensors", "eval_results.json", "run.json", "config.json")

    def run(seed: int) -> dict[str, bytes]:
        out = finetune_glue(FinetuneConfig(model=encoder, data=str(small_glue), task="rte", out=tmp_path / "rte",
                                           epochs=2, seeds=(seed,), group_by_length=True, overwrite=True, **FAST))
        return {name: (out / name).read_bytes() for name in names}

    first, other = run(3), run(4)
    with torch.inference_mode():  # a notebook cell wrapped for scoring: the run trains as without it
        again = run(3)
        assert torch.is_inference_mode_enabled() and not torch.is_grad_enabled()
    assert first == again
    assert first["model.safetensors"] != other["model.safetensors"]


def test_run_json_names_the_starting_weights_and_the_threads(small_glue, tmp_path):
    """Other weights under the same --model path, or another thread count, change the model's bytes: run.json
    must tell such runs apart, as features_sha256 does for edited data."""

    def record(model: Path, threads: int) -> dict:
        torch.set_num_threads(threads)
        out = finetune_glue(FinetuneConfig(model=model, data=str(small_glue), task="rte", out=tmp_path / "rte",
                                           epochs=1, overwrite=True, **FAST))
        return json.loads((out / "run.json").read_text())

    model = _encoder(tmp_path / "model")
    first = record(model, 1)
    assert first["threads"] == 1 and record(model, 2)["threads"] == 2
    assert record(model, 1)["weights_sha256"] == first["weights_sha256"]
    torch.manual_seed(1)
    changed = BertForMaskedLM(BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2,
                                         num_attention_heads=2, intermediate_size=64, max_position_embeddings=64))
    save_model(changed, model, BertTokenizer.from_vocab(VOCAB), overwrite=True)
    again = record(model, 1)
    assert again["config"] == first["config"] and again["weights_sha256"] != first["weights_sha256"]


@pytest.mark.parametrize("task", ["mnli", "cola"])
def test_three_classes_on_pairs_and_headerless_cola_learn_above_chance(encoder, glue, tmp_path, task):
    settings = {**FAST, "lr": 2e-3, "batch_size": 8}
    out = finetune_glue(FinetuneConfig(model=encoder, data=str(glue), task=task, out=tmp_path / task, epochs=6,
                                       seeds=(3,), **settings))
    results = json.loads((out / "eval_results.json").read_text())
    if task == "mnli":
        assert results["dev_matched"]["accuracy"] >= 0.5 and results["dev_mismatched"]["accuracy"] >= 0.5
    else:
        assert results["dev"]["matthews_correlation"] >= 0.5  # chance is 0


# --- every task: glue all, its table, evaluation and a full submission ----------------------------------

@pytest.fixture(scope="module")
def all_run(encoder, small_glue, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("all") / "glue"
    finetune_glue(FinetuneConfig(model=encoder, data=str(small_glue), task="all", out=out, epochs=1, **FAST))
    return out


@pytest.mark.parametrize("name", [t for t in TASKS if t != "ax"])
def test_every_task_is_scored_with_its_metrics_and_evaluate_agrees(all_run, small_glue, name):
    task = get_task(name)
    results = json.loads((all_run / name / "eval_results.json").read_text())
    splits = task.eval_splits("dev")
    assert splits == (("dev_matched", "dev_mismatched") if name == "mnli" else ("dev",))
    for split in splits:
        assert tuple(results[split]) == task.metrics
    assert evaluate_glue(name, all_run / name, small_glue) == {s: results[s] for s in splits}
    config = json.loads((all_run / name / "config.json").read_text())
    assert config["problem_type"] == ("regression" if name == "stsb" else "single_label_classification")


def test_glue_all_writes_the_papers_table(all_run):
    assert {p.name for p in all_run.iterdir()} == {*[t for t in TASKS if t != "ax"], "results.json", "results.md"}
    table = json.loads((all_run / "results.json").read_text())
    columns = table["columns"]
    assert list(columns) == ["MNLI-m", "MNLI-mm", "QQP", "QNLI", "SST-2", "CoLA", "STS-B", "MRPC", "RTE", "WNLI",
                             "Average"]
    rte = json.loads((all_run / "rte" / "eval_results.json").read_text())
    assert columns["RTE"]["mean"] == rte["dev"]["accuracy"]
    assert columns["STS-B"]["mean"] == table["tasks"]["stsb"]["runs"]["42"]["dev"]["spearman"]
    averaged = [columns[c]["mean"] for c in columns if c not in ("WNLI", "Average")]
    assert columns["Average"]["mean"] == pytest.approx(statistics.fmean(averaged))
    lines = (all_run / "results.md").read_text().splitlines()
    assert lines[0] == "| System | MNLI-(m/mm) | QQP | QNLI | SST-2 | CoLA | STS-B | MRPC | RTE | WNLI | Average |"
    assert lines[2] == "|  | 16 | 16 | 16 | 16 | 16 | 16 | 16 | 16 | 16 | - |"
    mnli = json.loads((all_run / "mnli" / "eval_results.json").read_text())
    assert lines[3].split(" | ")[1] == f"{100 * mnli['dev_matched']['accuracy']:.1f}/" \
                                      f"{100 * mnli['dev_mismatched']['accuracy']:.1f}"


def test_predict_all_writes_a_full_submission(all_run, small_glue, tmp_path):
    result = _cli("predict", "glue", "all", "--model", all_run, "--data", small_glue, "--out", tmp_path / "sub")
    assert result.exit_code == 0, result.output
    files = {p.name for p in (tmp_path / "sub").iterdir()}
    assert files == {"CoLA.tsv", "SST-2.tsv", "MRPC.tsv", "STS-B.tsv", "QQP.tsv", "MNLI-m.tsv", "MNLI-mm.tsv",
                     "QNLI.tsv", "RTE.tsv", "WNLI.tsv", "AX.tsv"}
    for name in files:
        lines = (tmp_path / "sub" / name).read_text(encoding="utf-8").split("\n")
        assert lines[0] == "index\tprediction" and lines[-1] == ""
        rows = [line.split("\t") for line in lines[1:-1]]
        assert [index for index, _ in rows] == [str(i) for i in range(6)]
        values = [value for _, value in rows]
        if name == "STS-B.tsv":
            assert all(0.0 <= float(v) <= 5.0 and len(v.split(".")[1]) == 3 for v in values)
        else:
            task = {"MNLI-m.tsv": "mnli", "MNLI-mm.tsv": "mnli", "AX.tsv": "ax"}.get(name)
            labels = get_task(task or next(t for t in TASKS if TASKS[t].files[-1].submission == name)).label_names
            assert set(values) <= set(labels)


def test_ax_is_predicted_with_the_mnli_model_only(all_run, small_glue, tmp_path):
    assert [p.name for p in predict_glue("ax", all_run / "mnli", small_glue, tmp_path)] == ["AX.tsv"]
    refused = _cli("predict", "glue", "ax", "--model", all_run / "rte", "--data", small_glue, "--out", tmp_path / "x")
    assert refused.exit_code == 2 and "needs 3" in refused.stderr and not (tmp_path / "x").exists()


# --- seeds, user tables ------------------------------------------------------------------------------------

def test_summaries_by_hand_sample_std_median_first_split_and_the_average_without_wnli():
    """The runs' tiny sets can give every seed the same score, where a population std or a high median equals
    the right one; hand-made scores tell them apart."""
    runs = {seed: {"dev": {"f1": f1, "accuracy": 0.5}} for seed, f1 in ((1, 0.4), (2, 0.9), (3, 0.6), (4, 0.8))}
    summary = summarize(get_task("mrpc"), runs)
    stats = summary["summary"]["dev"]["f1"]
    assert summary["best_seed"] == 2 and stats["median"] == pytest.approx(0.7)  # the mean of the middle two
    assert stats["std"] == pytest.approx((0.1475 / 3) ** 0.5) and stats["mean"] == pytest.approx(0.675)
    assert main_score(get_task("mnli"), {"dev_matched": {"accuracy": 0.8}, "dev_mismatched": {"accuracy": 0.7}}) == 0.8
    scores = dict(zip([header for header, _, _ in PAPER_COLUMNS], [0.1, 0.2, 0.3, 0.4, 0.5, 0.15, 0.7, 0.8, 0.9, 0.0],
                      strict=True))
    summaries = {task: {"main_metric": get_task(task).main_metric, "seeds": [42], "runs": {"42": {}}}
                 for _, task, _ in PAPER_COLUMNS}
    for header, task, split in PAPER_COLUMNS:
        summaries[task]["runs"]["42"][split] = {get_task(task).main_metric: scores[header]}
    sizes = {"mnli": 393_000, "qqp": 364_000, "qnli": 105_000, "sst2": 67_000, "cola": 8_500, "stsb": 5_700,
             "mrpc": 3_700, "rte": 2_500, "wnli": 634}
    table = glue_table(summaries, sizes, "bert")
    columns = table["columns"]
    assert columns["Average"]["mean"] == pytest.approx(0.45) and columns["RTE"]["mean"] == 0.9  # WNLI's 0.0 left out
    assert glue_markdown(table).splitlines()[2:5] == [
        "|  | 393k | 364k | 105k | 67k | 8.5k | 5.7k | 3.7k | 2.5k | 634 | - |",
        "| bert | 10.0/20.0 | 30.0 | 40.0 | 50.0 | 15.0 | 70.0 | 80.0 | 90.0 | 0.0 | 45.0 |", ""]  # one seed: one row


def test_a_seeds_table_gives_mean_std_median_min_max_and_one_seed_names_no_best_model():
    runs = {seed: {"dev": {"f1": f1, "accuracy": 0.5}} for seed, f1 in ((1, 0.4), (2, 0.9), (3, 0.6))}
    summary = summarize(get_task("mrpc"), runs)
    assert "| dev | f1 | 63.3±25.2 | 60.0 | 40.0 | 90.0 |" in seeds_markdown(summary).splitlines()
    assert "best_model" in summary and "best_model" not in summarize(get_task("mrpc"), {1: runs[1]})


def test_the_best_epoch_is_the_first_with_the_highest_main_metric(tmp_path, monkeypatch):
    """A later epoch replaces the kept one only when it scores higher: a tie keeps the earlier one (as the
    Trainer's load_best_model_at_end does), and a NaN epoch is worse than any number."""
    from types import SimpleNamespace

    from bertctl import finetune_seed

    saved = []
    monkeypatch.setattr(finetune_seed, "_save_folder", lambda model, folder, prep, env, extra=None:
                        saved.append(folder.name))
    prep, progress = SimpleNamespace(task=get_task("sst2")), finetune_seed.Progress()
    for epoch, accuracy in enumerate([float("nan"), 0.5, 0.5, 0.25, float("nan"), 0.75, 0.75], start=1):
        finetune_seed.keep_if_best(None, prep, epoch, {"dev": {"accuracy": accuracy}}, progress, tmp_path,
                                   SimpleNamespace(is_main=False), 0)
    assert saved == ["best-001", "best-002", "best-006"] and progress.best["epoch"] == 6


def test_a_finished_seed_is_saved_with_its_best_epochs_weights_not_its_last(tmp_path, monkeypatch):
    """done/ holds the weights of the best dev epoch read back from best-EEE/, with that epoch's scores."""
    from types import SimpleNamespace

    from bertctl import finetune_seed

    model = torch.nn.Linear(2, 2)
    best = {name: torch.full_like(value, 0.5) for name, value in model.state_dict().items()}
    monkeypatch.setattr(finetune_seed, "read_checkpoint",
                        lambda folder: SimpleNamespace(state=best if folder == tmp_path / "best-001" else None))
    saved = {}
    monkeypatch.setattr(finetune_seed, "_save_folder", lambda model, folder, prep, env, extra=None:
                        saved.update({folder.name: {k: v.clone() for k, v in model.state_dict().items()}}))
    monkeypatch.setattr(finetune_seed, "drop_checkpoints", lambda work: None)
    progress = finetune_seed.Progress(30, {"epoch": 1, "step": 10, "scores": {"dev": {"accuracy": 0.75}}})
    results = finetune_seed.finish_seed(SimpleNamespace(epochs=3), model, SimpleNamespace(task=get_task("sst2")),
                                        progress, 5, tmp_path, SimpleNamespace(is_main=True))
    assert results == {"task": "sst2", "dev": {"accuracy": 0.75}, "main_metric": "accuracy", "best_epoch": 1,
                       "best_step": 10, "seed": 5}
    assert list(saved) == ["done"] and all(torch.equal(saved["done"][k], best[k]) for k in best)


def test_seeds_give_mean_std_median_and_the_best_seed_is_evaluated(encoder, small_glue, tmp_path):
    out = finetune_glue(FinetuneConfig(model=encoder, data=str(small_glue), task="mrpc", out=tmp_path / "mrpc",
                                       epochs=1, seeds=(1, 2, 3), **FAST))
    assert {p.name for p in out.iterdir()} == {"seed-1", "seed-2", "seed-3", "results.json", "results.md"}
    summary = json.loads((out / "results.json").read_text())
    f1 = [json.loads((out / f"seed-{s}" / "eval_results.json").read_text())["dev"]["f1"] for s in (1, 2, 3)]
    stats = summary["summary"]["dev"]["f1"]
    assert stats["values"] == f1 and stats["mean"] == pytest.approx(statistics.fmean(f1))
    assert stats["std"] == pytest.approx(statistics.stdev(f1)) and stats["median"] == statistics.median(f1)
    best = summary["best_seed"]
    assert summary["best_model"] == f"seed-{best}" and f1[best - 1] == max(f1)
    assert evaluate_glue("mrpc", out, small_glue)["dev"] == summary["runs"][str(best)]["dev"]
    assert "| dev | f1 |" in (out / "results.md").read_text()


def test_finetune_classify_on_a_csv_pair_and_a_jsonl_regression(encoder, tmp_path):
    rng = np.random.default_rng(0)
    rows = [(" ".join(rng.choice(FILLER[:10], 4)), word, word) for word in rng.choice(["yes", "no"], 96)]
    for name, part in (("train", rows[:64]), ("dev", rows[64:])):
        with open(tmp_path / f"{name}.csv", "w", newline="") as handle:
            csv.writer(handle).writerows([("premise", "answer", "y"), *part])
    result = _cli("finetune", "classify", "--model", encoder, "--train", tmp_path / "train.csv", "--validation",
                  tmp_path / "dev.csv", "--text-columns", "premise,answer", "--label-column", "y", "--out",
                  tmp_path / "pair", "--epochs", "8", "--lr", "2e-3", "--batch-size", "8", "--max-seq-length", "32")
    assert result.exit_code == 0, result.output
    results = json.loads((tmp_path / "pair" / "eval_results.json").read_text())
    assert results["validation"]["accuracy"] >= 0.8 and results["main_metric"] == "accuracy"
    assert json.loads((tmp_path / "pair" / "config.json").read_text())["id2label"] == {"0": "no", "1": "yes"}
    lines = [json.dumps({"text": f"{w} {w}", "score": {"cold": 0.5, "warm": 4.5}[w]}) for w in ["cold", "warm"] * 8]
    (tmp_path / "scores.jsonl").write_text("\n".join(lines) + "\n")
    out = finetune_classify(FinetuneConfig(model=encoder, train=tmp_path / "scores.jsonl", text_columns=("text",),
                                           label_column="score", out=tmp_path / "reg", epochs=2, **FAST))
    results = json.loads((out / "eval_results.json").read_text())
    assert results["main_metric"] == "spearman" and "validation" not in results  # no validation: last epoch
    assert (results["best_epoch"], results["best_step"]) == (2, 2)  # 16 rows in batches of 16
    assert json.loads((out / "config.json").read_text())["problem_type"] == "regression"


def test_finetune_classify_reads_its_tables_a_chunk_at_a_time(encoder, tmp_path, monkeypatch):
    """--train and --validation were read whole, their texts then held until training ended: read and encoded
    ENCODE_CHUNK rows at a time, only their encoded rows are held, the same as a whole read encodes, with the
    labels decided over every row (whole numbers in the first chunks, a score in the last: all scores)."""
    import tracemalloc

    from bertctl.data import tabular

    text = " ".join(f"{FILLER[j % 10]}{'x' * 120}" for j in range(32))  # 4 kB, 32 [UNK]s, quick to encode
    rows = [(text, str(i % 3)) for i in range(95)] + [(text, "0.5")]
    train, dev = tmp_path / "train.csv", tmp_path / "dev.csv"
    for path, part in ((train, rows), (dev, rows[:48])):
        with open(path, "w", newline="") as handle:
            csv.writer(handle).writerows([("text", "score"), *part])
    monkeypatch.setattr(finetune, "ENCODE_CHUNK", 8)
    seen = {}

    def encoded(cfg, base, task, train, dev, out, work, env, stop, prepare) -> None:  # the data a seed trains on
        prep = prepare(cfg, base, task, train, dev, env)
        seen.update(peak=tracemalloc.get_traced_memory()[1], base=base, task=task, train=prep.train, dev=prep.dev)

    monkeypatch.setattr(finetune, "train_and_publish", encoded)
    loaded = finetune.load_base
    monkeypatch.setattr(finetune, "load_base", lambda *args: (loaded(*args), tracemalloc.start())[0])
    try:  # traced from the model's loading on: reading and encoding both files
        finetune_classify(FinetuneConfig(model=encoder, train=train, validation=dev, text_columns=("text",),
                                         label_column="score", out=tmp_path / "run", **FAST))
    finally:
        tracemalloc.stop()
    assert seen["peak"] < 300e3, f"{seen['peak'] / 1e3:.0f} kB"  # the training file's texts: 390 kB
    whole = tabular.load_labelled_data(train, dev, ["text"], "score")
    assert seen["task"].label_names == () and seen["train"].labels.dtype == np.float64
    for got, examples in ((seen["train"], whole.train), (seen["dev"]["validation"], whole.validation)):
        expected = encode_examples(seen["base"].tokenizer, examples, FAST["max_seq_length"], show=False)
        assert [list(row) for row in got.input_ids] == [list(row) for row in expected.input_ids]
        assert np.array_equal(got.labels, expected.labels) and got.truncated == expected.truncated == len(examples)


def _table(path: Path, rows: list[tuple[str, ...]]) -> Path:
    with open(path, "w", newline="") as handle:
        csv.writer(handle).writerows([("text", "label"), *rows])
    return path


@pytest.mark.parametrize(("train", "dev", "flags", "message"), [
    ([("a", "yes"), ("b", "no"), ("c", "")], None, {}, r"train.csv:4: label column 'label' is empty"),
    ([("a", "yes"), ("b", "yes")], None, {}, r"train.csv: label column 'label' has fewer than two classes \(yes\)"),
    ([("a", "yes"), ("b", "no")], [("a", "no"), ("b", "maybe")], {}, r"dev.csv:3: label 'maybe' is not one of no, yes"),
    ([("a", "yes"), ("b", "no")], None, {"label_names": ("yes", "nope")}, r"train.csv:3: label 'no' is not one of yes"),
    ([("a", "0.5"), ("b", "high")], None, {"problem": "regression"}, r"train.csv:3: label 'high' is not a finite"),
    ([("a", "yes"), ("b", "yes"), ("c",)], None, {}, r"train.csv:4: expected 2 comma-separated fields, found 1"),
])
def test_finetune_classify_refuses_a_bad_label_before_it_encodes_a_text(encoder, tmp_path, monkeypatch, train, dev,
                                                                       flags, message):
    """Labels were judged once every row had been tokenized: minutes of encoding a big table before a one-line
    refusal. The files are read through for their rows and labels first; a bad row still comes before a bad
    label (the last case: a row short of a field, and too few classes)."""
    monkeypatch.setattr(finetune, "encode_parts", never_called("encode_parts"))
    validation = _table(tmp_path / "dev.csv", dev) if dev else None
    cfg = FinetuneConfig(model=encoder, train=_table(tmp_path / "train.csv", train), validation=validation,
                         text_columns=("text",), out=tmp_path / "run", **flags, **FAST)
    with pytest.raises(UsageError, match=message):
        finetune_classify(cfg)
    assert sorted(tmp_path.iterdir()) == sorted(p for p in (tmp_path / "train.csv", validation) if p)


def test_finetune_classify_encodes_a_pipe_as_it_reads_it_once(encoder, tmp_path, monkeypatch):
    """A FIFO named train.csv gives its rows once: it is encoded on its one read, labels judged after."""
    import threading

    from bertctl.data import tabular

    pipe, path = tmp_path / "train.csv", _table(tmp_path / "rows.csv", [("yes yes", "yes"), ("no", "no")] * 4)
    os.mkfifo(pipe)
    writer = threading.Thread(target=lambda: pipe.write_bytes(path.read_bytes()), daemon=True)
    writer.start()
    seen = {}
    monkeypatch.setattr(tabular.LabelledFile, "read_through", never_called("read_through"))  # a 2nd read would hang
    monkeypatch.setattr(finetune, "train_and_publish", lambda cfg, base, task, train, dev, out, work, env, stop,
                        prepare: seen.update(prep=prepare(cfg, base, task, train, dev, env)))
    try:
        finetune_classify(FinetuneConfig(model=encoder, train=pipe, text_columns=("text",), out=tmp_path / "run",
                                         **FAST))
    finally:
        if writer.is_alive():
            pipe.read_bytes()
        writer.join()
    read = tabular.load_labelled_data(path, None, ["text"], "label")
    expected = encode_examples(seen["prep"].tokenizer, read.train, FAST["max_seq_length"], show=False)
    assert [list(row) for row in seen["prep"].train.input_ids] == [list(row) for row in expected.input_ids]
    assert seen["prep"].train.labels.tolist() == read.train.labels == [1, 0] * 4


# --- batches -------------------------------------------------------------------------------------------

def test_batches_are_padded_to_their_longest_example_only():
    ids = [np.arange(n) + 5 for n in (3, 7, 4, 12)]
    features = Features(ids, [np.zeros_like(x) for x in ids], np.array([3, 7, 4, 12]), np.array([0, 1, 0, 1]), 0)
    batch = collate(features, np.array([0, 2, 1]), pad_id=0)
    assert batch["input_ids"].shape == (3, 7) and batch["attention_mask"].sum(1).tolist() == [3, 4, 7]
    assert batch["input_ids"][1].tolist() == [5, 6, 7, 8, 0, 0, 0] and batch["labels"].tolist() == [0, 0, 1]


def test_epochs_visit_every_example_once_and_length_grouping_cuts_padding():
    lengths = np.random.default_rng(0).integers(5, 120, size=1000)
    plain = train_batches(lengths, 32, seed=1, epoch=1, group_by_length=False)
    grouped = train_batches(lengths, 32, seed=1, epoch=1, group_by_length=True)
    for batches in (plain, grouped):
        assert sorted(np.concatenate(batches).tolist()) == list(range(1000)) and len(batches) == 32
    assert not np.array_equal(np.concatenate(plain), np.concatenate(train_batches(lengths, 32, 1, 2, False)))

    def padded(batches):
        return sum(len(b) * int(lengths[b].max()) for b in batches)

    assert padded(grouped) < 0.7 * padded(plain)
    assert lengths[grouped[0]].max() == lengths.max()  # the longest batch first: out of memory at step 1
    assert sorted(lengths[grouped[0]]) == sorted(lengths)[-32:]  # a full one: windows sorted longest first


def test_pairs_are_truncated_from_the_longer_text_as_bert_does():
    assert truncate_pair([1, 2, 3, 4, 5], [6, 7], 5) == ([1, 2, 3], [6, 7])
    assert truncate_pair([1, 2, 3], [4, 5, 6], 4) == ([1, 2], [4, 5])
    assert truncate_pair([1, 2, 3], None, 2) == ([1, 2], None)


def _googles_truncate_seq_pair(tokens_a: list[int], tokens_b: list[int], max_length: int) -> None:
    """google-research/bert's run_classifier.py `_truncate_seq_pair`, as written there."""
    while True:
        total_length = len(tokens_a) + len(tokens_b)
        if total_length <= max_length:
            break
        if len(tokens_a) > len(tokens_b):
            tokens_a.pop()
        else:
            tokens_b.pop()


def test_a_tie_costs_the_second_text_its_token_as_googles_truncate_seq_pair():
    """Of two texts equally long Google cuts B, so an odd budget leaves the odd token to A (the fast tokenizer's
    longest_first gives it to B: docs/evaluate.md)."""
    assert truncate_pair([1, 2, 3], [4, 5, 6], 5) == ([1, 2, 3], [4, 5])
    for n_a, n_b, room in itertools.product(range(7), range(7), range(13)):
        a, b = list(range(n_a)), list(range(10, 10 + n_b))
        google_a, google_b = list(a), list(b)
        _googles_truncate_seq_pair(google_a, google_b, room)
        assert truncate_pair(a, b, room) == (google_a, google_b)


def test_pairs_are_laid_out_as_googles_convert_single_example():
    """`[CLS] A [SEP] B [SEP]` cut to max_seq_length by `_truncate_seq_pair`, segment 0 through A's [SEP] and 1
    through B's (run_classifier.py's segment_ids)."""
    tokenizer = BertTokenizer.from_vocab(VOCAB)
    a = ["the cat sat", "the big dog ran on the mat a cat", "cat", "", "the cat sat on"]
    b = ["a dog", "the cat", "the big dog ran on the small mat", "on", "a dog ran on"]
    features = encode_examples(tokenizer, Examples(a, b, None, [str(i) for i in range(5)], "rows"), 10, show=False)
    for i, (text_a, text_b) in enumerate(zip(a, b, strict=True)):
        tokens_a, tokens_b = (tokenizer.encode(text, add_special_tokens=False).ids for text in (text_a, text_b))
        _googles_truncate_seq_pair(tokens_a, tokens_b, 10 - 3)
        ids = [tokenizer.cls_id, *tokens_a, tokenizer.sep_id, *tokens_b, tokenizer.sep_id]
        assert features.input_ids[i].tolist() == ids
        assert features.token_type_ids[i].tolist() == [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
    assert features.lengths.tolist() == [8, 10, 10, 4, 10] and features.truncated == 3


def test_a_single_text_is_cut_to_fill_max_seq_length_with_cls_and_sep():
    """run_classifier.py keeps max_seq_length - 2 tokens of a text alone (- 3 of a pair)."""
    tokenizer = BertTokenizer.from_vocab(VOCAB)
    text = "the big dog ran on the mat a cat"
    features = encode_examples(tokenizer, Examples([text, "cat"], None, None, ["0", "1"], "rows"), 6, show=False)
    pieces = tokenizer.encode(text, add_special_tokens=False).ids
    assert features.input_ids[0].tolist() == [tokenizer.cls_id, *pieces[:4], tokenizer.sep_id]
    assert features.lengths.tolist() == [6, 3] and features.truncated == 1


# --- bad input: one line, a non-zero exit, nothing written ----------------------------------------------------

@pytest.fixture
def broken_glue(tmp_path) -> Path:
    root = write_glue_data(tmp_path / "glue", tasks=("rte", "mnli"), n_train=8, n_dev=4, n_test=2)
    lines = (root / "RTE" / "train.tsv").read_text().splitlines()
    (root / "RTE" / "train.tsv").write_text("\n".join([*lines[:3], "9\tonly two", *lines[3:]]) + "\n")
    dev = (root / "MNLI" / "dev_matched.tsv").read_text().splitlines()
    dev[2] = "\t".join([*dev[2].split("\t")[:-1], "maybe"])
    (root / "MNLI" / "dev_matched.tsv").write_text("\n".join(dev) + "\n")
    return root


@pytest.mark.parametrize(("args", "code", "expected"), [
    (["squad"], 2, "unknown GLUE task 'squad': choose one of cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli, ax"),
    (["sst2"], 2, "no SST-2/ folder for sst2"),
    (["rte"], 2, "RTE/train.tsv:4: expected 4 tab-separated fields, found 2"),
    (["mnli"], 2, "MNLI/dev_matched.tsv:3: label 'maybe' is not one of entailment, neutral, contradiction"),
    (["ax"], 2, "ax has no training data"),
    (["all"], 2, "finetune glue all needs every task; missing CoLA/train.tsv"),
    (["rte", "--seeds", "1,x"], 2, "--seeds must be a list of whole numbers, got '1,x'"),
    (["rte", "--max-seq-length", "100"], 2, "takes at most 64 tokens"),
])
def test_bad_input_is_one_line_and_writes_nothing(encoder, broken_glue, tmp_path, args, code, expected):
    out = tmp_path / "runs" / "out"
    result = _cli("finetune", "glue", "--max-seq-length", "32", "--model", encoder, "--data", broken_glue, "--out",
                  out, *args)
    assert result.exit_code == code, result.output
    assert len(result.stderr.strip().splitlines()) == 1 and expected in result.stderr
    assert not out.exists() and (not out.parent.exists() or not list(out.parent.iterdir()))


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc, where no folder can be made")
def test_an_out_that_cannot_be_made_is_one_line(encoder, small_glue):
    """The work folder was made with a bare mkdir: `FileNotFoundError: ... (rerun with --debug)`, exit 1."""
    result = _cli("finetune", "glue", "sst2", "--max-seq-length", "32", "--model", encoder, "--data", small_glue,
                  "--out", "/proc/bertctl-test/out")
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == ("bertctl: error: --out /proc/bertctl-test/out: cannot create it in /proc: "
                                     "No such file or directory; choose another path")


def test_glue_all_reads_every_tasks_data_before_the_first_task_trains(encoder, tmp_path):
    """A bad label in the last task's dev file stops `glue all` before CoLA trains, not after eight tasks."""
    root = write_glue_data(tmp_path / "glue", n_train=8, n_dev=4, n_test=2)
    dev = (root / "WNLI" / "dev.tsv").read_text().splitlines()
    dev[1] = "\t".join([*dev[1].split("\t")[:-1], "maybe"])
    (root / "WNLI" / "dev.tsv").write_text("\n".join(dev) + "\n")
    out = tmp_path / "runs" / "glue"
    result = _cli("finetune", "glue", "all", "--model", encoder, "--data", root, "--out", out, "--epochs", "1",
                  "--max-seq-length", "32")
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [
        f"bertctl: error: {root}/WNLI/dev.tsv:2: label 'maybe' is not one of 0, 1 (wnli)"]
    assert "fine-tuning" not in result.stderr and not (tmp_path / "runs").exists()


def test_a_resumed_glue_all_reads_only_the_tasks_it_has_left(tmp_path, caplog):
    work = tmp_path / ".glue.work"
    for task, seed in [("cola", 1), ("cola", 2), ("sst2", 1)]:  # cola is done; sst2 has seed 2 left
        (work / task / f"seed-{seed}" / "done").mkdir(parents=True)
        (work / task / f"seed-{seed}" / "done" / "eval_results.json").write_text("{}")
    tasks = [TASKS["cola"], TASKS["sst2"], TASKS["mrpc"]]
    resumed = FinetuneConfig(resume=True, seeds=(1, 2))
    assert finetune._unfinished(resumed, tasks, work) == tasks  # no run.json: the run starts afresh
    (work / "run.json").write_text("{}")
    assert finetune._unfinished(resumed, tasks, work) == tasks[1:]
    assert finetune._unfinished(FinetuneConfig(seeds=(1, 2)), tasks, work) == tasks
    root = write_glue_data(tmp_path / "glue", tasks=("qqp",), n_train=200, n_dev=4, n_test=2)
    lines = (root / "QQP" / "train.tsv").read_text().splitlines()
    (root / "QQP" / "train.tsv").write_text("\n".join([*lines[:3], "900\tWas Muhammad", *lines[3:]]) + "\n")
    with caplog.at_level(logging.WARNING):
        finetune._read_ahead([TASKS["qqp"]], str(root))
        assert not caplog.text  # the quirk is warned about once, when the task reads its data
        read_split("qqp", "train", root)
    assert "QQP/train.tsv: 1 of 201 rows do not have 6 fields" in caplog.text


def test_fp16_on_a_cpu_is_refused_before_the_run_says_anything(encoder, small_glue, tmp_path):
    out = tmp_path / "runs" / "out"
    result = _cli("finetune", "glue", "rte", "--model", encoder, "--data", small_glue, "--out", out,
                  "--max-seq-length", "32", "--precision", "fp16", "--device", "cpu")
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [
        "bertctl: error: --precision fp16 needs a CUDA device; use bf16 or fp32 on the CPU"]  # no "fine-tuning" line
    assert not out.parent.exists() or not list(out.parent.iterdir())


def test_a_model_with_fewer_embedding_rows_than_its_tokenizer_has_tokens_is_refused(small_glue, tmp_path):
    config = BertConfig(vocab_size=len(VOCAB) - 3, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)
    model = save_model(BertForMaskedLM(config), tmp_path / "odd", BertTokenizer.from_vocab(VOCAB[:-3]))
    BertTokenizer.from_vocab(VOCAB).save(model)  # another tokenizer copied in: its last ids would be out of range
    result = _cli("finetune", "glue", "rte", "--model", model, "--data", small_glue, "--out", tmp_path / "out",
                  "--max-seq-length", "32")
    assert result.exit_code == 2, result.output
    assert f"the tokenizer has {len(VOCAB)} tokens but the model has" in result.stderr
    assert f"{len(VOCAB) - 3} embedding rows" in result.stderr
    assert not (tmp_path / "out").exists()


def test_an_existing_out_is_kept_unless_overwrite(encoder, small_glue, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    result = _cli("finetune", "glue", "rte", "--model", encoder, "--data", small_glue, "--out", tmp_path / "out")
    assert result.exit_code == 2 and "pass --overwrite" in result.stderr
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["keep.txt"]


def test_evaluate_refuses_models_that_cannot_score_the_task(encoder, sst2_run, small_glue):
    no_head = _cli("evaluate", "glue", "sst2", "--model", encoder, "--data", small_glue)
    assert no_head.exit_code == 2 and "has no sequence-classification head" in no_head.stderr
    wrong = _cli("evaluate", "glue", "mnli", "--model", sst2_run, "--data", small_glue)
    assert wrong.exit_code == 2 and "predicts 2 output(s) but mnli needs 3" in wrong.stderr
    ax = _cli("evaluate", "glue", "ax", "--model", sst2_run, "--data", small_glue)
    assert ax.exit_code == 2 and "bertctl predict glue ax" in ax.stderr


def test_scoring_uses_the_runs_precision_on_the_same_kind_of_device_else_auto():
    from bertctl.evaluate import Scorer

    cpu = torch.device("cpu")
    assert Scorer(None, None, 128, 8, None, "bf16", "cpu").precision_on(None, cpu) == "bf16"
    assert Scorer(None, None, 128, 8, None, "bf16", "cuda").precision_on(None, cpu) == "fp32"  # auto on the CPU
    assert Scorer(None, None, 128, 8).precision_on(None, cpu) == "fp32"
    assert Scorer(None, None, 128, 8, None, "fp32", "cpu").precision_on("bf16", cpu) == "bf16"  # the flag wins


@pytest.mark.parametrize(("dropout", "expected"), [(None, 0.3), (0.05, 0.05)])
def test_the_classifier_dropout_is_the_models_own_unless_dropout_is_given(tmp_path, dropout, expected):
    """`dropout: null` keeps the model's settings, its classifier_dropout too (transformers' rule)."""
    from types import SimpleNamespace

    from bertctl.checkpoint import read_checkpoint
    from bertctl.model import BertForSequenceClassification

    config = BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)
    folder = save_model(BertForSequenceClassification(config, num_labels=2, classifier_dropout=0.3), tmp_path / "m",
                        BertTokenizer.from_vocab(VOCAB), labels=["0", "1"])
    prep = SimpleNamespace(ckpt=read_checkpoint(folder), task=get_task("sst2"))
    model = finetune_classifier._model(FinetuneConfig(model=folder, dropout=dropout), prep, announce=False)
    assert model.dropout.p == expected


@pytest.mark.parametrize(("command", "fields", "said"), [
    ("classify", {"task": "sst2"}, "task: for `bertctl finetune glue` only"),
    ("classify", {"data": "glue"}, "data: for `bertctl finetune glue` only"),
    ("glue", {"task": "sst2", "data": "glue", "train": "t.csv"},
     "train: for `bertctl finetune classify`, `finetune ner`, `finetune squad` and `finetune choice` only; leave it "
     "out here$"),
    ("glue", {"task": "sst2", "data": "glue", "label_names": "a,b"}, "label_names: for `bertctl finetune classify`"),
    ("glue", {"task": "sst2", "data": "glue", "label_column": "y", "problem": "regression"},  # were dropped: their
     "label_column, problem: for `bertctl finetune classify` only; leave them out here$"),  # defaults are not None
])
def test_a_field_of_the_other_command_is_refused_not_ignored(tmp_path, command, fields, said):
    """A --config file written for one command must not have fields the other would silently drop."""
    base = {"model": tmp_path / "m", "out": tmp_path / "out"}
    if command == "classify":
        base |= {"train": tmp_path / "t.csv", "text_columns": ("text",)}
    run = finetune_classify if command == "classify" else finetune_glue
    with pytest.raises(UsageError, match=said):
        run(FinetuneConfig(**base, **fields))
    assert not (tmp_path / "out").exists()


def test_a_one_segment_model_on_a_pair_task_is_refused_in_one_line(small_glue, tmp_path):
    """type_vocab_size 1 (some hub encoders) on MRPC failed mid-step: `IndexError: index out of range in self`."""
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64, type_vocab_size=1)
    model = save_model(BertForMaskedLM(config), tmp_path / "one_segment", BertTokenizer.from_vocab(VOCAB))
    result = _cli("finetune", "glue", "mrpc", "--model", model, "--data", small_glue, "--out", tmp_path / "out",
                  "--max-seq-length", "32")
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (f"bertctl: error: mrpc has sentence pairs but {model} has type_vocab_size 1 "
                                     "(one segment embedding); give a model with 2, or one text column")
    assert not (tmp_path / "out").exists() and not (tmp_path / ".out.work").exists()


def test_a_one_segment_model_on_two_text_columns_is_refused_before_the_files_are_read(tmp_path):
    """finetune classify encodes its files as it reads them: the pair refusal, which needs only the flags, came
    after both files were encoded (a big table's minutes), and after any bad row in them."""
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64, type_vocab_size=1)
    model = save_model(BertForMaskedLM(config), tmp_path / "one_segment", BertTokenizer.from_vocab(VOCAB))
    (tmp_path / "t.csv").write_text("a,b,label\nx,y,0\nx,y,1,extra\n", encoding="utf-8")
    result = _cli("finetune", "classify", "--model", model, "--train", tmp_path / "t.csv", "--text-columns", "a,b",
                  "--out", tmp_path / "out", "--max-seq-length", "32")
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (f"bertctl: error: classify has sentence pairs but {model} has type_vocab_size 1 "
                                     "(one segment embedding); give a model with 2, or one text column")
    assert not (tmp_path / "out").exists() and not (tmp_path / ".out.work").exists()


def test_a_bad_classifier_dropout_kept_from_the_folder_is_refused_before_a_text_is_tokenized(
        encoder, small_glue, tmp_path, monkeypatch):
    """With `dropout: null` the head takes config.json's classifier_dropout (transformers refuses "x" and 2 too):
    it was checked when the head was built, after every file had been read and tokenized. SQuAD's head has no
    dropout, yet transformers 5's strict config refuses "x" for it too (bertctl took it); 2 it leaves alone."""
    from bertctl.finetune_multiple_choice import finetune_choice
    from bertctl.finetune_qa import finetune_squad
    from bertctl.finetune_tagging import finetune_ner

    model = shutil.copytree(encoder, tmp_path / "model")
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "classifier_dropout": "x"}))
    monkeypatch.setattr(BertTokenizer, "encode_batch", never_called("encode_batch"))
    table = _table(tmp_path / "t.csv", [("a", "yes"), ("b", "no")])
    (tmp_path / "ner.txt").write_text("EU B-ORG\nrejects O\n\nPeter B-PER\n")
    (tmp_path / "swag.csv").write_text("sent1,sent2,ending0,ending1,label\na,b,c,d,0\n")
    (tmp_path / "squad.json").write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": [
        {"context": "EU rejects", "qas": [{"id": "1", "question": "who?", "answers": [
            {"text": "EU", "answer_start": 0}]}]}]}]}))
    runs = [(finetune_glue, {"task": "rte", "data": small_glue}),
            (finetune_classify, {"train": table, "text_columns": ("text",)}),
            (finetune_ner, {"train": tmp_path / "ner.txt"}), (finetune_choice, {"train": tmp_path / "swag.csv"}),
            (finetune_squad, {"train": tmp_path / "squad.json", "max_query_length": 8})]
    for run, fields in runs:
        with pytest.raises(UsageError, match=r"config.json: classifier_dropout must be a number in \[0, 1\] or null"):
            run(FinetuneConfig(model=model, out=tmp_path / "out", dropout=None, **fields, **FAST))
    assert not (tmp_path / "out").exists()
    (model / "config.json").write_text(json.dumps({**config, "classifier_dropout": 2}))
    assert folder_head_dropout(read_checkpoint(model), "BertForQuestionAnswering") is None  # its head has none
    given = FinetuneConfig(model=model, out=tmp_path / "out", dropout=0.1, **runs[1][1], **FAST)
    assert finetune.load_base(given, "fp32", "BertForSequenceClassification").ckpt.path == model  # --dropout's


def test_evaluate_classify_says_a_glue_run_names_no_columns(sst2_run, tmp_path):
    """It said the run "has no run.json", next to the run.json it had read."""
    (tmp_path / "t.csv").write_text("text,label\na,0\n", encoding="utf-8")
    result = _cli("evaluate", "classify", "--model", sst2_run, "--data", tmp_path / "t.csv")
    assert result.exit_code == 2, result.output
    assert f"--text-columns: {sst2_run} was fine-tuned on GLUE's sst2, not on columns of a table" in result.stderr


@pytest.mark.parametrize("problem", ["classification", "regression"])
def test_training_is_a_transformers_loop_step_for_step(encoder, tmp_path, problem):
    """With dropout off, `finetune classify` trains exactly as a hand-written transformers loop over the same
    batches: BertForSequenceClassification's loss, AdamW over the Trainer's decay groups (no decay on biases
    and LayerNorm), get_linear_schedule_with_warmup with ceil(0.1 x steps) warmup steps, clipping at 1.0, and
    gradient accumulation over micro-batches (the last batch partial) that averages as the whole batch does."""
    transformers = pytest.importorskip("transformers")
    from safetensors.torch import load_file

    from bertctl import training_state
    from bertctl.checkpoint import build_model, model_tokenizer, read_checkpoint
    from bertctl.checkpoint_names import to_transformers_names

    rng = np.random.default_rng(0)
    words = [w for w in VOCAB[8:] if w.isalpha()]
    rows = [(" ".join(rng.choice(words, rng.integers(1, 20))), " ".join(rng.choice(words, rng.integers(1, 20))),
             f"{rng.uniform(0, 5):.2f}" if problem == "regression" else str(rng.choice(["no", "yes"])))
            for _ in range(10)]
    train = tmp_path / "train.csv"
    with open(train, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([("a", "b", "y"), *rows])
    seed, batch, epochs, lr = 5, 4, 2, 1e-2
    out = finetune_classify(FinetuneConfig(model=encoder, train=train, text_columns=("a", "b"), label_column="y",
                                           out=tmp_path / "run", lr=lr, epochs=epochs, batch_size=batch,
                                           micro_batch_size=2, max_seq_length=16, seeds=(seed,), dropout=0.0,
                                           problem=problem, log_every=1, device="cpu"))
    labels = 1 if problem == "regression" else 2
    ckpt = read_checkpoint(encoder)
    training_state.seed_everything(seed)  # the fresh head and pooler finetune drew
    ours = build_model(ckpt, "BertForSequenceClassification", num_labels=labels, classifier_dropout=0.0)
    theirs = transformers.BertForSequenceClassification(transformers.BertConfig.from_pretrained(
        encoder, num_labels=labels, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    theirs.load_state_dict(to_transformers_names(ours.state_dict()))
    y = [float(r[2]) for r in rows] if problem == "regression" else [["no", "yes"].index(r[2]) for r in rows]
    features = encode_examples(model_tokenizer(ckpt), Examples([r[0] for r in rows], [r[1] for r in rows], y,
                                                              [str(i) for i in range(10)], "rows"), 16, show=False)
    decay = set(transformers.Trainer.get_decay_parameter_names(None, theirs))
    optimizer = torch.optim.AdamW([{"params": [p for n, p in theirs.named_parameters() if n in decay],
                                    "weight_decay": 0.01},
                                   {"params": [p for n, p in theirs.named_parameters() if n not in decay],
                                    "weight_decay": 0.0}], lr=lr, eps=1e-6)
    total = 3 * epochs  # ceil(10 / 4) steps an epoch
    schedule = transformers.get_linear_schedule_with_warmup(optimizer, 1, total)
    losses = []
    theirs.train()
    for epoch in range(1, epochs + 1):
        for rows_of_step in train_batches(features.lengths, batch, seed, epoch, False):
            losses.append(0.0)
            for micro in np.split(rows_of_step, range(2, len(rows_of_step), 2)):
                inputs = collate(features, micro, 0)
                loss = theirs(input_ids=inputs["input_ids"].long(), token_type_ids=inputs["token_type_ids"].long(),
                              attention_mask=inputs.get("attention_mask"), labels=inputs["labels"]).loss
                (loss * len(micro) / len(rows_of_step)).backward()
                losses[-1] += loss.item() * len(micro) / len(rows_of_step)
            torch.nn.utils.clip_grad_norm_(theirs.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
    logged = [row for row in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "loss" in row]
    assert [row["loss"] for row in logged] == pytest.approx(losses, abs=1e-6)
    assert [row["lr"] for row in logged] == pytest.approx([lr * f for f in (0, 1, 0.8, 0.6, 0.4, 0.2)], abs=1e-12)
    trained = load_file(out / "model.safetensors")
    for name, weight in theirs.state_dict().items():
        assert torch.allclose(trained[name], weight, atol=1e-6), name
