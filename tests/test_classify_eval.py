"""`evaluate classify` and `predict classify`: a tiny BERT fine-tuned on a tiny table, scored and predicted, CPU."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from conftest import never_called
from glue_fixtures import FILLER
from typer.testing import CliRunner

import bertctl
from bertctl.checkpoint import save_model
from bertctl.cli import app
from bertctl.config import BertConfig, FinetuneConfig
from bertctl.data.glue import Examples
from bertctl.evaluate import collate, encode_examples, evaluate_classify, to_predictions
from bertctl.finetune import finetune_classify
from bertctl.model import BertForMaskedLM
from bertctl.predict import predict_classify, predict_glue
from bertctl.tokenizer import BertTokenizer

WORDS = [w for w in FILLER[:10] if w not in ("'s", '"')]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, "yes", "no", "maybe", "cold", "warm"]
PAIR = {"text_columns": ("premise", "answer"), "label_column": "y"}
FAST = {"lr": 2e-3, "batch_size": 8, "max_seq_length": 32, "eval_batch_size": 16, "log_every": 4}

pytestmark = pytest.mark.usefixtures("one_thread")


def _cli(*args: str | Path):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def encoder(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)
    return save_model(BertForMaskedLM(config), tmp_path_factory.mktemp("model") / "encoder",
                      BertTokenizer.from_vocab(VOCAB))


def _write_csv(path: Path, header: tuple[str, ...], rows: list[tuple]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([header, *rows])
    return path


@pytest.fixture(scope="module")
def pair_run(encoder, tmp_path_factory) -> tuple[Path, Path]:
    """A two-class sentence-pair run whose label is the second text's word; returns (run, validation file)."""
    folder = tmp_path_factory.mktemp("pair")
    rng = np.random.default_rng(0)
    rows = [(" ".join(rng.choice(WORDS, 4)), word, word) for word in rng.choice(["yes", "no"], 96)]
    train = _write_csv(folder / "train.csv", ("premise", "answer", "y"), rows[:64])
    dev = _write_csv(folder / "dev.csv", ("premise", "answer", "y"), rows[64:])
    out = finetune_classify(FinetuneConfig(model=encoder, train=train, validation=dev, out=folder / "run", epochs=10,
                                           **PAIR, **FAST))
    assert json.loads((out / "eval_results.json").read_text())["validation"]["accuracy"] >= 0.8  # it learned
    return out, dev


def test_evaluate_reproduces_the_runs_eval_results(pair_run):
    run, dev = pair_run
    results = json.loads((run / "eval_results.json").read_text())
    assert evaluate_classify(run, dev) == results["validation"]  # columns and classes from run.json
    assert set(results["validation"]) == {"accuracy", "f1", "matthews_correlation"}
    shown = _cli("evaluate", "classify", "--model", run, "--data", dev, "--json")
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout) == {"task": "classify", "data": str(dev), **results["validation"]}
    lines = _cli("evaluate", "classify", "-m", run, "--data", dev).stdout.splitlines()
    assert lines[0] == f"classify {dev} accuracy: {results['validation']['accuracy']:.4f}" and len(lines) == 3


def test_other_formats_and_columns_give_the_same_numbers(pair_run, tmp_path):
    run, dev = pair_run
    with open(dev, newline="", encoding="utf-8") as handle:
        records = list(csv.DictReader(handle))
    renamed = [{"q": r["premise"], "a": r["answer"], "gold": r["y"]} for r in records]
    parquet = tmp_path / "dev.parquet"
    pq.write_table(pa.Table.from_pylist(renamed), parquet)
    expected = evaluate_classify(run, dev)
    assert evaluate_classify(run, parquet, text_columns=("q", "a"), label_column="gold") == expected
    assert bertctl.evaluate_classify(run, parquet, ("q", "a"), "gold", batch_size=3) == pytest.approx(expected)


def test_predict_writes_every_row_in_order_agreeing_with_evaluate(pair_run, tmp_path):
    run, dev = pair_run
    written = _cli("predict", "classify", "--model", run, "--data", dev, "--out", tmp_path / "pred")
    assert written.exit_code == 0, written.output
    assert written.stdout.strip() == str(tmp_path / "pred.csv")
    with open(tmp_path / "pred.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    with open(dev, newline="", encoding="utf-8") as handle:
        gold = [r["y"] for r in csv.DictReader(handle)]
    assert rows[0] == ["index", "prediction", "prob_no", "prob_yes"]
    assert [r[0] for r in rows[1:]] == [str(i) for i in range(len(gold))]
    probabilities = np.array([[float(p) for p in r[2:]] for r in rows[1:]])
    assert np.allclose(probabilities.sum(1), 1, atol=1e-5)
    assert [r[1] for r in rows[1:]] == [("no", "yes")[k] for k in probabilities.argmax(1)]
    assert {r[1] for r in rows[1:]} == {"no", "yes"}
    accuracy = np.mean([r[1] == y for r, y in zip(rows[1:], gold, strict=True)])
    assert accuracy == pytest.approx(evaluate_classify(run, dev)["accuracy"])
    path = predict_classify(run, dev, tmp_path / "pred.jsonl")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["index"] for line in lines] == list(range(len(gold)))
    assert [line["prediction"] for line in lines] == [r[1] for r in rows[1:]]
    assert set(lines[0]["probabilities"]) == {"no", "yes"}


def test_prediction_rows_keep_six_decimals_and_positions_as_numbers(tmp_path):
    """Probabilities and scores are rounded to 6 decimals in both formats; row positions are numbers in jsonl
    however they are given."""
    from bertctl.submission import write_predictions

    probabilities = np.array([[0.12345678, 0.87654322], [0.5, 0.5]])
    path = write_predictions(tmp_path / "p.jsonl", "index", ["0", "1"], ["no", "yes"], [1, 0], probabilities)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows[0] == {"index": 0, "prediction": "yes", "probabilities": {"no": 0.123457, "yes": 0.876543}}
    path = write_predictions(tmp_path / "s.csv", "id", ["a"], [], [2.1234567])
    assert path.read_text() == "id,prediction\na,2.123457\n"


def test_predict_needs_no_labels_and_keeps_the_files_ids(pair_run, tmp_path):
    run, _ = pair_run
    data = tmp_path / "new.jsonl"
    data.write_text("".join(json.dumps({"idx": f"q{i}", "premise": "a b", "answer": word}) + "\n"
                            for i, word in enumerate(["yes", "no", "no"])), encoding="utf-8")
    path = predict_classify(run, data, tmp_path / "new.csv")
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["idx"] for r in rows] == ["q0", "q1", "q2"] and all(r["prediction"] in ("no", "yes") for r in rows)


def test_a_row_of_empty_fields_gets_its_prediction_row_and_an_empty_line_none(pair_run, tmp_path):
    """`index` lines up with the rows of the file as csv.DictReader and pandas count them; an empty text is
    predicted from [CLS] [SEP] (pairs: [CLS] [SEP] [SEP])."""
    run, _ = pair_run
    files = {"blank.csv": 'premise,answer\na b,yes\n\n,\n"",""\n   ,\nc d,no\n',
             "blank.tsv": "premise\tanswer\na b\tyes\n\n\t\n   \t\nc d\tno\n",
             "blank.jsonl": '{"premise": "a b", "answer": "yes"}\n\n{"premise": "", "answer": ""}\n  \n'
                            '{"premise": "c d", "answer": "no"}\n',
             "clean.csv": "premise,answer\na b,yes\nc d,no\n"}
    predicted = {}
    for name, content in files.items():
        (tmp_path / name).write_text(content, encoding="utf-8")
        result = _cli("predict", "classify", "--model", run, "--data", tmp_path / name, "--out",
                      tmp_path / f"{name}.pred.csv")
        assert result.exit_code == 0, result.output
        with open(tmp_path / f"{name}.pred.csv", newline="", encoding="utf-8") as handle:
            predicted[name] = [(r["index"], r["prediction"], r["prob_yes"]) for r in csv.DictReader(handle)]
    assert [len(rows) for rows in predicted.values()] == [5, 4, 3, 2]
    for rows in predicted.values():
        assert [r[0] for r in rows] == [str(i) for i in range(len(rows))]
        assert [r[1:] for r in (rows[0], rows[-1])] == [r[1:] for r in predicted["clean.csv"]]
    empty = {r[1:] for rows in predicted.values() for r in rows[1:-1]}
    assert len(empty) == 1  # every row of empty (or blank) texts is the same input
    tokenizer = BertTokenizer.from_vocab(VOCAB)
    features = encode_examples(tokenizer, Examples(["", "   "], ["", "\t"], None, ["0", "1"], "rows"), 32)
    cls, sep = tokenizer.cls_id, tokenizer.sep_id
    assert [ids.tolist() for ids in features.input_ids] == [[cls, sep, sep]] * 2


def test_a_multi_seed_run_is_scored_with_its_best_seed(encoder, pair_run, tmp_path, capsys):
    _, dev = pair_run
    out = finetune_classify(FinetuneConfig(model=encoder, train=dev, validation=dev, out=tmp_path / "seeds", epochs=1,
                                           seeds=(1, 2), **PAIR, **FAST))
    summary = json.loads((out / "results.json").read_text())
    assert evaluate_classify(out, dev) == summary["runs"][str(summary["best_seed"])]["validation"]
    assert ", mean of 2 seeds)" in capsys.readouterr().out  # the line's figures are not the best seed's


def test_regression_is_scored_with_pearson_and_spearman_and_predicts_scores(encoder, tmp_path):
    rng = np.random.default_rng(1)
    lines = [json.dumps({"text": f"{w} {rng.choice(WORDS)}", "score": {"cold": 0.5, "warm": 4.5}[w] + rng.random()})
             for w in rng.choice(["cold", "warm"], 40)]
    (tmp_path / "train.jsonl").write_text("\n".join(lines[:32]) + "\n")
    (tmp_path / "dev.jsonl").write_text("\n".join(lines[32:]) + "\n")
    run = finetune_classify(FinetuneConfig(model=encoder, train=tmp_path / "train.jsonl", text_columns=("text",),
                                           validation=tmp_path / "dev.jsonl", label_column="score",
                                           out=tmp_path / "reg", epochs=2, **FAST))
    results = json.loads((run / "eval_results.json").read_text())
    assert evaluate_classify(run, tmp_path / "dev.jsonl") == results["validation"]
    assert list(results["validation"]) == ["pearson", "spearman"]
    path = predict_classify(run, tmp_path / "dev.jsonl", tmp_path / "scores.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 8 and all(set(r) == {"index", "prediction"} and isinstance(r["prediction"], float)
                                  for r in rows)


def test_regression_scores_are_scored_as_written_and_trained_on_in_float32():
    """Pearson against float32-rounded gold scores missed GLUE's reference by ~3e-8 (STS-B: 0.82409186 for
    0.82409189); the model still gets float32 labels."""
    features = encode_examples(BertTokenizer.from_vocab(VOCAB), Examples(["a", "b"], None, [3.8, 0.1], ["0", "1"],
                                                                        "rows"), 8)
    assert features.labels.tolist() == [3.8, 0.1]
    assert collate(features, np.arange(2), 0)["labels"].dtype == torch.float32


def test_a_model_without_run_json_uses_its_id2label(pair_run, tmp_path):
    run, dev = pair_run
    bare = tmp_path / "bare"
    bare.mkdir()
    for item in run.iterdir():
        if item.name != "run.json" and item.is_file():
            (bare / item.name).write_bytes(item.read_bytes())
    refused = _cli("evaluate", "classify", "--model", bare, "--data", dev)
    assert refused.exit_code == 2 and "has no run.json naming the text columns" in refused.stderr
    assert evaluate_classify(bare, dev, ("premise", "answer"), "y", batch_size=16, max_seq_length=32) == \
        evaluate_classify(run, dev)


def test_a_converted_run_keeps_its_run_json_and_scores_as_the_run(pair_run, tmp_path):
    """`convert` dropped run.json: evaluate and predict on the converted folder wanted --text-columns again and
    took the default length and batch size, not the run's. The record is carried as it was (its weights are the
    ones written), so the converted folder scores as the run does."""
    run, dev = pair_run
    converted = _cli("convert", run, "--out", tmp_path / "conv")
    assert converted.exit_code == 0, converted.output
    assert (tmp_path / "conv" / "run.json").read_bytes() == (run / "run.json").read_bytes()
    assert not {"metrics.jsonl", "tensorboard", "eval_results.json"} & {p.name for p in (tmp_path / "conv").iterdir()}
    results = json.loads((run / "eval_results.json").read_text())
    assert evaluate_classify(tmp_path / "conv", dev) == results["validation"]
    written = _cli("predict", "classify", "--model", tmp_path / "conv", "--data", dev, "--out", tmp_path / "pred")
    assert written.exit_code == 0, written.output


def test_finetuning_a_head_that_orders_its_labels_otherwise_keeps_its_predictions(pair_run, tmp_path, capfd):
    """The same classifier with id2label {0: yes, 1: no} and its rows swapped, fine-tuned further with a
    negligible learning rate on the data's labels (no, yes), must go on predicting what it predicted."""
    from safetensors.torch import load_file, save_file

    run, dev = pair_run
    swapped = tmp_path / "swapped"
    swapped.mkdir()
    for item in run.iterdir():
        if item.is_file() and item.name not in ("run.json", "model.safetensors", "config.json"):
            (swapped / item.name).write_bytes(item.read_bytes())
    weights, original = load_file(run / "model.safetensors"), load_file(run / "model.safetensors")
    weights.update({k: weights[k].flip(0).contiguous() for k in ("classifier.weight", "classifier.bias")})
    save_file(weights, swapped / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((run / "config.json").read_text())
    config.update(id2label={"0": "yes", "1": "no"}, label2id={"yes": 0, "no": 1})
    (swapped / "config.json").write_text(json.dumps(config))
    before = evaluate_classify(run, dev)
    again = finetune_classify(FinetuneConfig(model=swapped, train=dev, out=tmp_path / "again", epochs=1,
                                             **PAIR, **{**FAST, "lr": 1e-9}))
    assert "its outputs reordered to the labels by name" in capfd.readouterr().err
    assert json.loads((again / "config.json").read_text())["id2label"] == {"0": "no", "1": "yes"}
    after = evaluate_classify(again, dev)
    assert after["accuracy"] == before["accuracy"] >= 0.8
    kept = load_file(again / "model.safetensors")  # every row moved back: the bias as well as the weight
    for name in ("classifier.weight", "classifier.bias"):
        torch.testing.assert_close(kept[name], original[name], rtol=0, atol=1e-6)


@pytest.mark.parametrize(("command", "extra", "edit", "code", "expected"), [
    ("evaluate", [], lambda p: p.write_text("premise,y\na,yes\n"), 2, "bad.csv:1: no column 'answer'"),
    ("evaluate", ["--label-column", "z"], None, 2, "bad.csv:1: no column 'z'"),
    ("evaluate", [], lambda p: p.write_text("premise,answer,y\na,b,yes\nc,d,maybe\n"), 2,
     "bad.csv:3: label 'maybe' is not one of no, yes"),
    ("evaluate", [], lambda p: p.write_text("premise,answer,y\na,b,yes\n\n,,\n"), 2,
     "bad.csv:4: label column 'y' is empty"),
    ("evaluate", [], lambda p: p.unlink(), 2, "bad.csv: no such file"),
    ("predict", [], lambda p: p.write_text("premise,y\na,yes\n"), 2, "bad.csv:1: no column 'answer'"),
    ("predict", [], lambda p: p.unlink(), 2, "bad.csv: no such file"),
    ("predict", ["--text-columns", "a,b,c"], None, 2, "--text-columns: give one or two column names"),
])
def test_refusals_are_one_line_and_write_nothing(pair_run, tmp_path, command, extra, edit, code, expected):
    run, dev = pair_run
    bad = tmp_path / "bad.csv"
    bad.write_bytes(dev.read_bytes())
    if edit:
        edit(bad)
    out = ["--out", tmp_path / "pred.jsonl"] if command == "predict" else []
    result = _cli(command, "classify", "--model", run, "--data", bad, *out, *extra)
    assert result.exit_code == code, result.output
    assert len(result.stderr.strip().splitlines()) == 1 and expected in result.stderr
    assert {p.name for p in tmp_path.iterdir()} <= {"bad.csv"}  # no predictions, no temp file


def test_predict_refuses_bad_outputs_and_models_before_writing(pair_run, encoder, tmp_path):
    run, dev = pair_run
    cases = [(["--model", run, "--out", tmp_path / "pred.tsv"], "predictions are written as .csv or .jsonl"),
             (["--model", run, "--out", dev], "is the input file"),
             (["--model", encoder, "--out", tmp_path / "p.csv"], "has no sequence-classification head")]
    for args, expected in cases:
        result = _cli("predict", "classify", "--data", dev, *args)
        assert result.exit_code == 2 and expected in result.stderr, result.output
    assert not list(tmp_path.iterdir())
    assert "finetune classify" in _cli("evaluate", "classify", "-m", encoder, "--data", dev).stderr


def test_predict_with_a_symlink_loop_for_data_or_out_is_one_line_naming_it(pair_run, tmp_path):
    """The check that --out is not the input resolved both names first: a link loop in either failed with
    `RuntimeError: Symlink loop from ...`; the reader and the --out check now say it, as for the other tasks."""
    run, dev = pair_run
    loop = tmp_path / "loop.csv"
    loop.symlink_to(loop.name)
    for args, expected in ((["--data", loop, "--out", tmp_path / "p.csv"], f"--data {loop}: no such file"),
                           (["--data", dev, "--out", loop], f"--out {loop}: ")):
        result = _cli("predict", "classify", "--model", run, *args)
        assert result.exit_code == 2 and result.stderr.startswith(f"bertctl: error: {expected}"), result.output
        assert result.stderr.count("\n") == 1 and "RuntimeError" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loop.csv"]


def test_a_multi_label_model_is_refused_not_scored_as_single_label(pair_run, tmp_path):
    run, dev = pair_run
    multi = tmp_path / "multi"
    multi.mkdir()
    for item in run.iterdir():
        if item.is_file():
            (multi / item.name).write_bytes(item.read_bytes())
    config = json.loads((multi / "config.json").read_text())
    (multi / "config.json").write_text(json.dumps({**config, "problem_type": "multi_label_classification"}))
    for command, out in (("evaluate", []), ("predict", ["--out", tmp_path / "p.csv"])):
        result = _cli(command, "classify", "--model", multi, "--data", dev, *out)
        assert result.exit_code == 2 and "is a multi-label classifier" in result.stderr, result.output
    assert not (tmp_path / "p.csv").exists()


def test_predict_glue_all_with_a_single_run_names_the_folders_it_expected(pair_run, tmp_path):
    """It looked for the hub repository RUN/cola and failed with a network error."""
    run, _ = pair_run
    result = _cli("predict", "glue", "all", "--model", run, "--data", tmp_path, "--out", tmp_path / "sub")
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1, result.output
    assert f"--model {run} is not a `bertctl finetune glue all` run folder" in result.stderr
    assert "(cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli); it has none of them" in result.stderr
    assert not (tmp_path / "sub").exists()


def test_predict_glue_all_names_the_task_folders_its_run_lacks(tmp_path):
    """A `glue all` run folder missing some tasks names those, not "none of them"."""
    from bertctl.errors import UsageError

    for task in ("cola", "mnli"):
        (tmp_path / "run" / task).mkdir(parents=True)
    with pytest.raises(UsageError, match=r"; it has no sst2, mrpc, stsb, qqp, qnli, rte, wnli\. "):
        predict_glue("all", tmp_path / "run", tmp_path, tmp_path / "sub")
    assert not (tmp_path / "sub").exists()


def test_encoding_a_big_table_holds_only_the_truncated_ids(monkeypatch):
    """The whole table was tokenized in one call and kept untruncated: ~190 bytes a token, 8 GB for a 500k-row
    table of paragraphs. Encoded a chunk at a time, memory is rows x max_seq_length."""
    import tracemalloc

    import bertctl.evaluate as module

    monkeypatch.setattr(module, "ENCODE_CHUNK", 64)
    words = [f"w{i}" for i in range(600)]  # ids above 256: each a Python int of its own while the encodings live
    tokenizer = BertTokenizer.from_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words])
    long_text = " ".join(words[300:])
    texts = [long_text] * 2000  # 600,000 tokens
    tracemalloc.start()
    features = encode_examples(tokenizer, Examples(texts, texts, None, [str(i) for i in range(2000)], "rows"), 16)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert features.truncated == 2000 and set(features.lengths.tolist()) == {16}
    assert features.input_ids[0].tolist() == [tokenizer.cls_id, *range(305, 312), tokenizer.sep_id,
                                              *range(305, 311), tokenizer.sep_id]  # the odd token to A
    assert features.token_type_ids[0].tolist() == [0] * 9 + [1] * 7
    assert peak < 8e6, f"{peak / 1e6:.1f} MB"


def test_predict_reads_a_big_table_a_chunk_at_a_time(pair_run, tmp_path, monkeypatch):
    """The whole file's texts were read before the first row was encoded: memory grew with the texts, ~1 GB for a
    million rows of a paragraph. Read and encoded ENCODE_CHUNK rows at a time, it holds the ids; the file the
    same, row positions counted on across the chunks."""
    import tracemalloc

    import bertctl.evaluate
    import bertctl.predict
    import bertctl.submission

    run, _ = pair_run
    text = " ".join(f"{WORDS[j % len(WORDS)]}{'x' * 120}" for j in range(32))  # 4 kB, 32 [UNK]s, quick to encode
    data = _write_csv(tmp_path / "big.csv", ("premise", "answer"), [(text, ("yes", "no")[i % 2]) for i in range(96)])
    whole = predict_classify(run, data, tmp_path / "whole.csv").read_bytes()
    for module in (bertctl.evaluate, bertctl.predict, bertctl.submission):
        monkeypatch.setattr(module, "WRITE_CHUNK" if module is bertctl.submission else "ENCODE_CHUNK", 8)
    opened = bertctl.predict.open_classify_run
    monkeypatch.setattr(bertctl.predict, "open_classify_run", lambda *args: (opened(*args), tracemalloc.start())[0])
    try:  # traced from the model's loading on: reading, encoding, scoring, writing
        path = predict_classify(run, data, tmp_path / "chunked.csv")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert path.read_bytes() == whole and whole.splitlines()[-1].startswith(b"95,")
    assert peak < 300e3, f"{peak / 1e3:.0f} kB"  # the file's texts: 390 kB


def test_evaluate_reads_a_big_table_a_chunk_at_a_time(pair_run, tmp_path, monkeypatch):
    """`evaluate classify` read the whole file's texts before encoding them, as `predict classify` did: read and
    encoded ENCODE_CHUNK rows at a time, it holds the labels and encoded rows alone, and scores the same."""
    import tracemalloc

    import bertctl.evaluate

    run, _ = pair_run
    text = " ".join(f"{WORDS[j % len(WORDS)]}{'x' * 120}" for j in range(32))  # 4 kB, 32 [UNK]s, quick to encode
    rows = [(text, answer, answer) for answer in ("yes", "no", "no") * 32]
    data = _write_csv(tmp_path / "big.csv", ("premise", "answer", "y"), rows)
    whole = evaluate_classify(run, data)
    monkeypatch.setattr(bertctl.evaluate, "ENCODE_CHUNK", 8)
    opened = bertctl.evaluate.open_classify_run
    monkeypatch.setattr(bertctl.evaluate, "open_classify_run", lambda *args: (opened(*args), tracemalloc.start())[0])
    try:  # traced from the model's loading on: reading, encoding, scoring
        chunked = evaluate_classify(run, data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert chunked == whole
    assert peak < 300e3, f"{peak / 1e3:.0f} kB"  # the file's texts: 390 kB


def test_a_table_read_in_chunks_has_its_first_rows_id_column_throughout(pair_run, tmp_path, monkeypatch):
    """Whether rows have ids is the file's first row's say, not each chunk's: a later chunk that starts with a row
    without the id column is refused as before, and one whose first row has it is still counted by position."""
    import bertctl.predict
    from bertctl.errors import UsageError

    run, _ = pair_run
    monkeypatch.setattr(bertctl.predict, "ENCODE_CHUNK", 2)
    rows = [{"idx": "q0", "premise": "a b", "answer": "yes"}, {"idx": "q1", "premise": "a", "answer": "no"},
            {"premise": "b", "answer": "no"}]
    gap = tmp_path / "gap.jsonl"
    gap.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    with pytest.raises(UsageError, match=r"gap.jsonl:3: id column 'idx' is empty"):
        predict_classify(run, gap, tmp_path / "gap.csv")
    late = tmp_path / "late.jsonl"
    late.write_text("".join(json.dumps(row) + "\n" for row in rows[::-1]), encoding="utf-8")
    lines = predict_classify(run, late, tmp_path / "late_out.jsonl").read_text().splitlines()
    assert [json.loads(line)["index"] for line in lines] == [0, 1, 2]
    assert not (tmp_path / "gap.csv").exists()


def test_encoded_rows_are_held_end_to_end_not_as_an_array_each():
    """Two numpy arrays per row (ids, segments) held ~230 bytes of objects besides a short row's few tokens: most
    of what `predict classify` held per row. One int32 and one int8 array for all rows, with offsets, hold the
    tokens and 24 bytes a row."""
    import tracemalloc

    tokenizer = BertTokenizer.from_vocab(VOCAB)
    texts = [WORDS[i % len(WORDS)] for i in range(20000)]
    tracemalloc.start()
    features = encode_examples(tokenizer, Examples(texts, texts, None, [str(i) for i in range(20000)], "rows"), 16,
                               show=False)
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert held / len(features) < 60, f"{held / len(features):.0f} bytes a row"
    assert features.input_ids[1].tolist() == [tokenizer.cls_id, 6, tokenizer.sep_id, 6, tokenizer.sep_id]
    assert features.token_type_ids[1].tolist() == [0, 0, 0, 1, 1] and features.lengths[:2].tolist() == [5, 5]
    assert features.input_ids[-1].dtype == np.int32 and features.token_type_ids[-1].dtype == np.int8


@pytest.mark.parametrize(("name", "made"), [("p.csv", [10, 10, 20, 30, 32]), ("p.jsonl", [10, 20, 30, 32])])
def test_predict_writes_its_file_a_chunk_of_rows_at_a_time(pair_run, tmp_path, monkeypatch, name, made, watch_writes):
    """Every output row (a dict, its probabilities as Python floats) was made before the file was written: 200,000
    rows peaked at 575 MB, 406 MB now. Rows are made WRITE_CHUNK at a time as the temp file is written, and the
    file appears only whole, the same as it was."""
    import bertctl.submission as submission

    run, dev = pair_run
    whole = predict_classify(run, dev, tmp_path / f"whole{Path(name).suffix}").read_bytes()
    rows, pieces = [], []
    make_row = submission._prediction_row
    monkeypatch.setattr(submission, "_prediction_row", lambda *args: rows.append(1) or make_row(*args))
    watch_writes(submission, lambda piece: pieces.append(len(rows)))
    monkeypatch.setattr(submission, "WRITE_CHUNK", 10)
    assert predict_classify(run, dev, tmp_path / name).read_bytes() == whole
    assert pieces == made  # the 32 rows of dev.csv: the rows made when each piece went to the temp file


def test_scoring_uses_the_matmul_precision_fine_tuning_scored_with(pair_run, tmp_path, monkeypatch):
    """finetune turns TF32 on (on CUDA) before it scores its dev sets; evaluate and predict did not, so an fp32
    run's eval_results.json was not reproduced exactly on a GPU."""
    from bertctl import training

    asked = []
    monkeypatch.setattr(training, "enable_fast_math", asked.append)
    run, dev = pair_run
    evaluate_classify(run, dev)
    predict_classify(run, dev, tmp_path / "p.csv")
    assert [device.type for device in asked] == ["cpu", "cpu"]


@pytest.mark.parametrize("id2label", [{"0": "LABEL_0", "1": "LABEL_1"}, None])
def test_a_model_with_generic_labels_is_scored_on_class_ids(pair_run, tmp_path, id2label):
    """transformers' Trainer fine-tunes on class ids 0, 1, ... and names the outputs LABEL_0, LABEL_1, ... (or,
    for two classes, writes no id2label at all); a file labelled with those ids was refused ("label '1' is not
    one of LABEL_0, LABEL_1"), so such a model could not be scored on its own data."""
    run, dev = pair_run
    bare = tmp_path / "bare"
    bare.mkdir()
    for item in run.iterdir():
        if item.is_file() and item.name != "run.json":
            (bare / item.name).write_bytes(item.read_bytes())
    config = json.loads((bare / "config.json").read_text())
    config.pop("id2label")
    config.pop("label2id")
    if id2label:
        config.update(id2label=id2label, label2id={name: int(i) for i, name in id2label.items()})
    (bare / "config.json").write_text(json.dumps(config))
    rows = list(csv.reader(dev.open(encoding="utf-8")))
    ids = _write_csv(tmp_path / "ids.csv", tuple(rows[0]), [(*r[:2], ["no", "yes"].index(r[2])) for r in rows[1:]])
    names = _write_csv(tmp_path / "names.csv", tuple(rows[0]), [(*r[:2], f"LABEL_{['no', 'yes'].index(r[2])}")
                                                                for r in rows[1:]])
    expected = evaluate_classify(run, dev)
    for data in (ids, names):
        assert evaluate_classify(bare, data, ("premise", "answer"), "y", batch_size=16, max_seq_length=32) == expected
    bad = _write_csv(tmp_path / "bad.csv", tuple(rows[0]), [("a", "b", 2)])
    result = _cli("evaluate", "classify", "--model", bare, "--data", bad, "--text-columns", "premise,answer",
                  "--label-column", "y")
    assert result.exit_code == 2 and "bad.csv:2: label '2' is not one of LABEL_0, LABEL_1" in result.stderr
    record = json.loads((run / "run.json").read_text())
    (bare / "run.json").write_text(json.dumps({**record, "labels": ["LABEL_0", "LABEL_1"]}))
    result = _cli("evaluate", "classify", "--model", bare, "--data", ids)  # a run's own classes: names, not ids
    assert result.exit_code == 2 and "is not one of LABEL_0, LABEL_1" in result.stderr


def test_sentence_pairs_are_refused_for_a_model_with_one_segment_embedding(tmp_path):
    """The second text's segment id 1 indexed past a one-row token_type embedding: `IndexError: index out of
    range in self`, exit 1, where finetune refuses such a model with one line."""
    from bertctl.model import BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64, type_vocab_size=1)
    model = save_model(BertForSequenceClassification(config), tmp_path / "one", BertTokenizer.from_vocab(VOCAB),
                       labels=["no", "yes"])
    data = _write_csv(tmp_path / "pairs.csv", ("premise", "answer", "y"), [("cold warm", "yes", "yes")])
    for command, extra in (("evaluate", ["--label-column", "y"]), ("predict", ["--out", tmp_path / "p.csv"])):
        result = _cli(command, "classify", "--model", model, "--data", data, "--text-columns", "premise,answer",
                      *extra)
        assert result.exit_code == 2, result.output
        assert len(result.stderr.strip().splitlines()) == 1 and "type_vocab_size 1" in result.stderr
    assert not (tmp_path / "p.csv").exists()
    single = _cli("evaluate", "classify", "--model", model, "--data", data, "--text-columns", "premise",
                  "--label-column", "y", "--json")
    assert single.exit_code == 0, single.output


def test_generic_model_label_error_names_the_bad_label(tmp_path: Path) -> None:
    """A LABEL_0/LABEL_1 model scored on a file labelled 0, 1, 2: the error must name 2, not the valid 0."""
    from bertctl.data.tabular import LabelledFile
    from bertctl.errors import UsageError
    from bertctl.evaluate import ClassifyRun, classify_task

    data = tmp_path / "d.csv"
    data.write_text("text,label\nhello,0\nthere,1\nagain,2\n", encoding="utf-8")
    run = ClassifyRun(None, classify_task(["LABEL_0", "LABEL_1"]), ("text",), "label", generic=True)
    def class_ids(path: Path) -> list[int]:
        file = LabelledFile.checked(path, ("text",), "label", "--data")
        list(file.parts())
        return run.class_ids(file)

    with pytest.raises(UsageError) as refused:
        class_ids(data)
    assert "'2'" in str(refused.value) and "'0'" not in str(refused.value)
    ids = tmp_path / "ids.csv"
    ids.write_text("text,label\nhello,0\nthere,1\n", encoding="utf-8")
    assert class_ids(ids) == [0, 1]


def test_evaluate_classify_refuses_a_precision_the_device_cannot_run_before_a_text_is_tokenized(pair_run,
                                                                                                 monkeypatch):
    from bertctl import evaluate
    from bertctl.errors import UsageError

    run, dev = pair_run
    monkeypatch.setattr(evaluate, "encode_parts", never_called("encode_parts"))
    with pytest.raises(UsageError, match="^--precision fp16 needs a CUDA device"):
        evaluate_classify(run, dev, device="cpu", precision="fp16")
    with pytest.raises(UsageError, match="^--precision fp16 needs a CUDA device"):
        predict_classify(run, dev, dev.with_name("p.csv"), device="cpu", precision="fp16")


def test_the_encoding_bar_knows_its_total_from_the_first_read(pair_run, encoder, tmp_path, monkeypatch):
    """The rows counted by the read for labels are the encoding bar's total (it had none: no ETA), in evaluate and
    in finetune alike; predict, which reads its file once, takes a parquet file's from its footer."""
    import pyarrow.csv
    import pyarrow.parquet

    from bertctl import evaluate

    totals: list[int | None] = []
    bar = evaluate.quiet_bar
    monkeypatch.setattr(evaluate, "quiet_bar", lambda rows, desc, show: totals.append(rows) or bar(rows, desc, show))
    run, dev = pair_run
    evaluate_classify(run, dev)
    assert totals[0] == 32
    totals.clear()
    rows = [("a b", "yes"), ("b c", "no"), ("c a", "yes")]
    finetune_classify(FinetuneConfig(model=encoder, train=_write_csv(tmp_path / "t.csv", ("text", "label"), rows),
                                     text_columns=("text",), out=tmp_path / "run", epochs=1, **FAST))
    assert totals[0] == 3
    totals.clear()
    table = tmp_path / "dev.parquet"
    pyarrow.parquet.write_table(pyarrow.csv.read_csv(dev), table)
    predict_classify(run, table, tmp_path / "p.csv")
    assert totals[0] == 32
    totals.clear()
    predict_classify(run, dev, tmp_path / "q.csv")
    assert totals[0] is None  # a csv's rows are known once read: not read twice for a bar


def test_evaluate_refuses_a_label_the_model_lacks_before_it_encodes_a_text(tmp_path: Path) -> None:
    """A label not among the model's classes was refused once every row was tokenized (minutes on a big table);
    the file is read through for its rows and labels first. The run has no scorer: encoding would fail."""
    from bertctl.errors import UsageError
    from bertctl.evaluate import ClassifyRun, classify_task

    data = tmp_path / "d.csv"
    data.write_text("text,label\nhello,yes\nthere,maybe\n", encoding="utf-8")
    run = ClassifyRun(None, classify_task(["no", "yes"]), ("text",), "label")
    with pytest.raises(UsageError, match=r"d.csv:3: label 'maybe' is not one of no, yes"):
        run.check_labelled(data)
    with pytest.raises(UsageError, match=r"gone.csv: no such file"):  # not taken for a pipe: before --device's line
        run.check_labelled(tmp_path / "gone.csv")


def test_one_whole_number_spelled_several_ways_is_one_class_in_a_fixed_order(tmp_path):
    """pandas and `datasets` read 1, 01 and 1.0 as one number; their order (and so label2id) must not depend
    on Python's string hashing, and a file spelling the numbers otherwise (a csv's 1.0, JSON's 1) scores on it."""
    from bertctl.data.tabular import load_labelled_data, read_examples

    train = tmp_path / "train.csv"
    train.write_text("text,label\na,1\nb,01\nc,2\nd,1.0\ne,10\n", encoding="utf-8")
    task = load_labelled_data(train, None, ["text"], "label")
    assert task.label_names == ("1", "2", "10") and task.train.labels == [0, 0, 1, 0, 2]
    floats = tmp_path / "floats.parquet"  # pandas writes a label column with a gap as floats
    pq.write_table(pa.table({"text": ["a", "b"], "label": [2.0, 10.0]}), floats)
    spelled = tmp_path / "spelled.csv"
    spelled.write_text("text,label\na,1.0\nb,02\nc,1e1\n", encoding="utf-8")
    assert read_examples(floats, ["text"], "label", task.label_names)[0].labels == [1, 2]
    assert read_examples(spelled, ["text"], "label", task.label_names)[0].labels == [0, 1, 2]
    codes = tmp_path / "codes.csv"  # without the plain spelling the first one names the class; long codes stay exact
    codes.write_text("text,label\na,01\nb,1.0\nc,12345678901234567890\nd,12345678901234567891\n", encoding="utf-8")
    assert load_labelled_data(codes, None, ["text"], "label").label_names == (
        "01", "12345678901234567890", "12345678901234567891")


def test_a_label_that_could_name_several_given_classes_is_refused_naming_them(tmp_path):
    """--label-names 1,01 makes two classes of one number: a 1.0 (or a TRUE among True and true) is refused as
    ambiguous, not taken as the first, while the exact spellings still name their own class."""
    from bertctl.data.tabular import load_labelled_data
    from bertctl.errors import UsageError

    exact = tmp_path / "exact.csv"
    exact.write_text("text,label\na,1\nb,01\n", encoding="utf-8")
    assert load_labelled_data(exact, None, ["text"], "label", label_names=["1", "01"]).train.labels == [0, 1]
    for names, spelled in ((["1", "01"], "1.0"), (["True", "true"], "TRUE")):
        data = tmp_path / "data.csv"
        data.write_text(f"text,label\na,{names[0]}\nb,{spelled}\n", encoding="utf-8")
        with pytest.raises(UsageError, match=rf"data.csv:3: label '{spelled}' could be any of the classes "
                                             rf"{', '.join(names)}; spell it as one of them"):
            load_labelled_data(data, None, ["text"], "label", label_names=names)


def test_a_nan_in_a_numeric_label_column_is_refused_at_its_row_not_made_a_class(tmp_path):
    from bertctl.data.tabular import load_labelled_data
    from bertctl.errors import UsageError

    scores = tmp_path / "scores.parquet"
    pq.write_table(pa.table({"text": ["a", "b", "c"], "label": [0.5, float("nan"), 1.5]}), scores)
    with pytest.raises(UsageError, match=r"scores.parquet row 2: label 'nan' is not a finite number"):
        load_labelled_data(scores, None, ["text"], "label")
    ids = tmp_path / "ids.jsonl"
    ids.write_text('{"text": "a", "label": 0}\n{"text": "b", "label": 1}\n{"text": "c", "label": NaN}\n',
                   encoding="utf-8")
    with pytest.raises(UsageError, match=r"ids.jsonl:3: label 'nan' is not a finite number"):
        load_labelled_data(ids, None, ["text"], "label")
    forced = load_labelled_data(ids, None, ["text"], "label", problem="classification")  # a class, when asked
    assert forced.label_names == ("0", "1", "nan")


def test_an_empty_training_label_is_named_by_its_line_and_an_unused_id_column_may_have_gaps(encoder, tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("text,label\nyes,\nno,neg\n", encoding="utf-8")
    result = _cli("finetune", "classify", "--model", encoder, "--train", empty, "--text-columns", "text",
                  "--max-seq-length", 32, "--out", tmp_path / "run")
    assert result.exit_code == 2 and "empty.csv:2: label column 'label' is empty" in result.stderr, result.stderr
    assert not (tmp_path / "run").exists()
    gaps = tmp_path / "gaps.csv"  # an id column training never reads: a gap in it is no reason to refuse
    gaps.write_text("id,text,label\n7,yes,pos\n,no,neg\n", encoding="utf-8")
    run = finetune_classify(FinetuneConfig(model=encoder, train=gaps, validation=gaps, text_columns=("text",),
                                           out=tmp_path / "run", epochs=1, **FAST))
    assert json.loads((run / "config.json").read_text())["id2label"] == {"0": "neg", "1": "pos"}
    result = _cli("evaluate", "classify", "--model", run, "--data", gaps, "--json")  # scores name no row either
    assert result.exit_code == 0 and json.loads(result.stdout)["accuracy"] in (0.0, 0.5, 1.0), result.output
    result = _cli("predict", "classify", "--model", run, "--data", gaps, "--out", tmp_path / "p.csv")
    assert result.exit_code == 2 and "gaps.csv:3: id column 'id' is empty" in result.stderr, result.output


@pytest.mark.parametrize("problem", ["auto", "regression"])
def test_an_empty_label_column_name_is_a_usage_error(encoder, tmp_path, problem):
    train = _write_csv(tmp_path / "train.csv", ("text", "label"), [("yes", "1.5"), ("no", "2")])
    result = _cli("finetune", "classify", "--model", encoder, "--train", train, "--text-columns", "text",
                  "--label-column", "", "--problem", problem, "--max-seq-length", 32, "--out", tmp_path / "run")
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == "bertctl: error: --label-column: give the label column's name, not ''"
    assert not (tmp_path / "run").exists()


def test_scoring_flags_take_the_shortest_sequence_and_batch_and_refuse_below_them():
    from bertctl.errors import UsageError
    from bertctl.evaluate import check_scoring_flags

    assert check_scoring_flags(3, 1) == (3, 1)  # [CLS], one token, [SEP]; one example per forward pass
    for max_seq_length, batch_size, said in ((2, 1, "--max-seq-length 2: give at least 3"),
                                             (3, 0, "--batch-size 0: give 1 or more")):
        with pytest.raises(UsageError, match=said):
            check_scoring_flags(max_seq_length, batch_size)


def test_a_single_text_is_cut_to_max_seq_length_with_its_cls_and_sep():
    tokenizer = BertTokenizer.from_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c", "d", "e"])
    features = encode_examples(tokenizer, Examples(["a b c d e", "a b"], None, None, ["0", "1"], "rows"), 5)
    assert [row.tolist() for row in features.input_ids] == [[2, 5, 6, 7, 3], [2, 5, 6, 3]]
    assert features.truncated == 1


def test_a_tie_goes_to_the_models_first_output_whatever_the_task_order():
    """A model trained elsewhere may hold the task's classes in another order (`label_order`: the model's output
    for each task class); tied logits are the model's own argmax's, its first output, as run_glue.py predicts."""
    raw = np.array([[1.0, 1.0, 1.0], [0.0, 5.0, 5.0], [7.0, 0.0, 7.0]], dtype=np.float32)
    order = [2, 0, 1]  # task class 0 is the model's output 2, class 1 its output 0, class 2 its output 1
    assert to_predictions(raw[:, order], False, order).tolist() == [1, 2, 1]
    assert to_predictions(raw, False).tolist() == [0, 1, 0]
    assert np.isnan(to_predictions(np.array([[np.nan, 1.0, 0.0]]), False, order)).all()


def test_a_regression_is_scored_on_its_single_output_as_stsb_is(monkeypatch):
    """STS-B's head has one output, the score itself: never an argmax over it (always class 0)."""
    from scipy.stats import pearsonr, spearmanr

    from bertctl import evaluate
    from bertctl.data.glue import get_task

    logits = np.array([[0.5], [2.0], [-1.0], [4.5]], dtype=np.float32)
    gold = np.array([1.0, 2.5, 0.0, 5.0])
    assert to_predictions(logits, True).tolist() == [0.5, 2.0, -1.0, 4.5]
    monkeypatch.setattr(evaluate, "predict_logits", lambda *args, **kwargs: logits)
    split = SimpleNamespace(labels=gold)
    results = evaluate.score(get_task("stsb"), None, {"dev": split}, 0, 4, torch.device("cpu"), "fp32")
    assert results["dev"] == pytest.approx({"pearson": pearsonr(logits[:, 0], gold)[0],
                                            "spearman": spearmanr(logits[:, 0], gold)[0]})


def test_scoring_flags_win_over_the_runs_settings_which_win_over_the_defaults(tmp_path):
    from bertctl.evaluate import run_scorer

    model = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=512))

    def settings(max_seq_length, batch_size):
        scorer = run_scorer(tmp_path, model, None, max_seq_length, batch_size)[0]
        return scorer.max_seq_length, scorer.batch_size

    assert settings(None, None) == (FinetuneConfig.max_seq_length, FinetuneConfig.eval_batch_size)
    (tmp_path / "run.json").write_text(json.dumps({"config": {"max_seq_length": 64, "eval_batch_size": 8}}))
    assert settings(None, None) == (64, 8)
    assert settings(32, 4) == (32, 4)
