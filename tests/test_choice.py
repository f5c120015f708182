"""Multiple choice (SWAG): features against a port of transformers' run_swag.py preprocess_function (on
transformers' own fast tokenizer of the same folder), parity with transformers' BertForMultipleChoice, and a tiny
model fine-tuned, evaluated and run end to end on a synthetic set through the CLI."""

from __future__ import annotations

import csv
import gzip
import json
import random
import re
from pathlib import Path

import pytest
import torch
from conftest import never_called
from processes import ranks_said
from typer.testing import CliRunner

from bertctl.checkpoint import build_model, read_checkpoint, save_model
from bertctl.choice import evaluate_choice, predict_choice
from bertctl.cli import app
from bertctl.config import BertConfig, FinetuneConfig
from bertctl.data.choice import make_choice_features, read_choice
from bertctl.errors import UsageError
from bertctl.finetune_multiple_choice import finetune_choice
from bertctl.model import BertForMaskedLM, BertForMultipleChoice
from bertctl.tokenizer import BertTokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

PEOPLE = {"john": "paris", "mary": "london", "anna": "york"}  # who went where: the right choice names the place
PLACES = ["paris", "london", "york", "city"]
FILLER = ["the", "man", "went", "to", "store", "and", "bought", "a", "of", "milk", "in", "day"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *FILLER, "un", "##like", "##ly", ".", ",", *PEOPLE, *PLACES,
         "smith", "##son"]
HEADER = ["video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source", "ending0", "ending1", "ending2",
          "ending3", "label"]
FAST = {"lr": 2e-3, "batch_size": 8, "max_seq_length": 24, "eval_batch_size": 16, "log_every": 4, "epochs": 4,
        "warmup_fraction": 0.1, "dropout": 0.0}


def _tokenizer() -> BertTokenizer:
    return BertTokenizer.from_vocab(VOCAB)


def _config() -> BertConfig:
    return BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=64, max_position_embeddings=64)


@pytest.fixture(scope="module")
def encoder(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    return save_model(BertForMaskedLM(_config()), tmp_path_factory.mktemp("model") / "encoder", _tokenizer())


def _swag_csv(path: Path, rows: list[dict], labelled: bool = True) -> Path:
    header = HEADER if labelled else HEADER[:-1]
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, header, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return path


def _synthetic(n: int, seed: int) -> list[dict]:
    """sent1 names a person among filler words; the right ending names that person's place, the others
    filler words only."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        person = rng.choice(list(PEOPLE))
        label = rng.randrange(4)
        context = " ".join(rng.sample(FILLER, 3) + [person] + rng.sample(FILLER, 2))
        endings = {f"ending{k}": f"{rng.choice(FILLER)} {PEOPLE[person] if k == label else rng.choice(FILLER)}"
                   for k in range(4)}
        rows.append({"video-id": f"v{i}", "fold-ind": str(1000 + i), "startphrase": context, "sent1": context,
                     "sent2": "went to", "gold-source": "gold", **endings, "label": label})
    return rows


# --- features against run_swag.py's preprocess_function ------------------------------------------------------

def _run_swag_preprocess(tokenizer, rows: list[dict], max_length: int) -> dict[str, list]:
    """run_swag.py's preprocess_function (4 endings, sent1 as text A, sent2 + " " + ending as text B), ported."""
    first = [row["sent1"] for row in rows for _ in range(4)]
    second = [f"{row['sent2']} {row[f'ending{k}']}" for row in rows for k in range(4)]
    tokenized = tokenizer(first, second, truncation=True, max_length=max_length)
    return {key: [values[i:i + 4] for i in range(0, len(values), 4)] for key, values in tokenized.items()}


@pytest.mark.parametrize("max_seq_length", [64, 12, 10, 9, 6])
def test_features_equal_run_swags(tmp_path, max_seq_length):
    transformers = pytest.importorskip("transformers")
    folder = tmp_path / "tok"
    _tokenizer().save(folder)
    theirs = transformers.AutoTokenizer.from_pretrained(folder)
    rows = _synthetic(3, 5) + [{**_synthetic(1, 6)[0], "sent1": "unlikely zzyzx john smithson , the man",
                                "sent2": "The man", "ending0": "went", "ending2": "to the store and bought milk"}]
    data = read_choice(_swag_csv(tmp_path / "t.csv", rows), "--train")
    ours = make_choice_features(_tokenizer(), data, max_seq_length)
    expected = _run_swag_preprocess(theirs, rows, max_seq_length)
    assert [[r.tolist() for r in example] for example in ours.input_ids] == expected["input_ids"]
    assert [[r.tolist() for r in example] for example in ours.token_type_ids] == expected["token_type_ids"]
    assert ours.labels.tolist() == [row["label"] for row in rows]
    untruncated = _run_swag_preprocess(theirs, rows, 512)["input_ids"]
    assert ours.truncated == sum(any(len(x) > max_seq_length for x in example) for example in untruncated)


def test_odd_room_ties_keep_googles_rule_where_the_fast_tokenizer_gives_text_b_the_token(tmp_path):
    """Both texts past half of an odd room and A no longer than B: Google's rule (bertctl) keeps the extra token in
    text A, the fast tokenizer's longest_first in text B; the same tokens otherwise (A longer: both keep it in A)."""
    transformers = pytest.importorskip("transformers")
    _tokenizer().save(tmp_path / "tok")
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path / "tok")
    row = {**_synthetic(1, 1)[0], "sent1": "the man went to the store", "sent2": "and bought a",
           **{f"ending{k}": "milk in the day" for k in range(4)}}
    ours = make_choice_features(_tokenizer(), read_choice(_swag_csv(tmp_path / "t.csv", [row]), "--train"), 10)
    expected = _run_swag_preprocess(theirs, [row], 10)["input_ids"][0][0]
    a = [VOCAB.index(w) for w in "the man went to".split()]
    assert ours.input_ids[0][0].tolist() == [2, *a, 3, *[VOCAB.index(w) for w in "and bought a".split()], 3]
    assert expected == [2, *a[:3], 3, *[VOCAB.index(w) for w in "and bought a milk".split()], 3]
    longer_a = {**row, "sent1": "the man went to the store and the"}  # 8 tokens to B's 7
    ours = make_choice_features(_tokenizer(), read_choice(_swag_csv(tmp_path / "a.csv", [longer_a]), "--train"), 10)
    assert ours.input_ids[0][0].tolist() == _run_swag_preprocess(theirs, [longer_a], 10)["input_ids"][0][0]


def test_reading_swag_csv_and_jsonl(tmp_path):
    rows = _synthetic(2, 1)
    test = read_choice(_swag_csv(tmp_path / "test.csv", rows, labelled=False), "--data", need_labels=False)
    assert test.labels is None and test.ids == ["1000", "1001"] and test.num_choices == 4
    assert test.contexts[0] == rows[0]["sent1"] and test.choices[0][1] == f"went to {rows[0]['ending1']}"
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text('{"context": "john went", "question": "to", "choices": ["paris", "york", "city"], "label": 1}\n'
                     '\n{"context": "mary went", "choices": ["a", "b", "c"], "label": 0, "id": "q7"}\n')
    data = read_choice(jsonl, "--train")
    assert data.choices == [["to paris", "to york", "to city"], ["a", "b", "c"]] and data.labels == [1, 0]
    assert data.ids == ["0", "q7"] and data.num_choices == 3
    bare = tmp_path / "bare.csv"  # SWAG's columns without fold-ind: rows named by their number from 0
    bare.write_text("sent1,sent2,ending0,ending1,label\na,b,c,d,0\ne,f,g,h,1\n", encoding="utf-8")
    assert read_choice(bare, "--train").ids == ["0", "1"]



def test_csv_errors_name_the_line_an_editor_shows(tmp_path):
    """The header is line 1 and a row is named by the line it starts on, as classify's csv names it (the
    DictReader's count was a line short, or the row's last line); a quote the file ends inside, by its own line."""
    path = tmp_path / "swag.csv"
    header, row = "sent1,sent2,ending0,ending1,label\n", "a,b,c,d,0\n"
    path.write_text(header + row + 'a,"b\nb",c,d,x\n', encoding="utf-8")
    with pytest.raises(UsageError, match=f"^--train {path}:3: label 'x' is not the number of a choice"):
        read_choice(path, "--train")
    path.write_text(header + row + 'a,"b\nb",c,"d,1\n' + row, encoding="utf-8")
    with pytest.raises(UsageError, match=f"^--train {path}:4: malformed csv: a quoted field opens on this line and "
                                         "the file ends inside it"):
        read_choice(path, "--train")
    path.write_text("sent1,sent2,ending0,ending1,ending3,ending10,label\n" + "a,b,c,d,e,f,0\n", encoding="utf-8")
    with pytest.raises(UsageError, match=f"^--train {path} has the column ending3 but no ending2; number the "
                                         "choices' columns ending0, ending1, ... without a gap$"):
        read_choice(path, "--train")


def test_label_and_choice_errors_name_the_line_too(tmp_path):
    """A label outside the choices, a missing label or a choice too many named the example by its number from 0
    (`example 1 has the label 4`), not by the line an editor shows, as classify names a bad label."""
    path = tmp_path / "swag.csv"
    header, row = "sent1,sent2,ending0,ending1,label\n", "a,b,c,d,0\n"
    path.write_text(header + 'a,"b\nb",c,d,0\n' + "a,b,c,d,4\n", encoding="utf-8")
    with pytest.raises(UsageError, match=f"^--train {path}:4: label 4 is outside its choices 0..1$"):
        read_choice(path, "--train")
    path.write_text(header + row + 'a,"b\nb",c,d,\n', encoding="utf-8")
    with pytest.raises(UsageError, match=f"^--train {path}:3: no label; give the right choice of each example$"):
        read_choice(path, "--train")
    lines = tmp_path / "swag.jsonl"
    lines.write_text('{"context": "a", "choices": ["b", "c"], "label": 0}\n\n'
                     '{"context": "a", "choices": ["b", "c", "d"], "label": 0}\n', encoding="utf-8")
    with pytest.raises(UsageError, match=f"^--train {lines}:3: 3 choices where the first example has 2; give "
                                         "every example the same number$"):
        read_choice(lines, "--train")
    path.write_text(header + 'a,"b\nb",c,d,1\n' + "a,b,c,d,\n", encoding="utf-8")
    with pytest.raises(UsageError, match=f"^--data {path}:4: no label where others have one; give all or none$"):
        read_choice(path, "--data", need_labels=False)


def test_fewer_choices_than_the_first_example_are_refused_and_a_nan_row_is_wrong(tmp_path):
    import numpy as np

    from bertctl.choice import accuracy

    path = tmp_path / "few.jsonl"
    path.write_text('{"context": "c", "choices": ["a", "b", "c"]}\n{"context": "c", "choices": ["a", "b"]}\n')
    with pytest.raises(UsageError, match=r"few.jsonl:2: 2 choices where the first example has 3"):
        read_choice(path, "--data", need_labels=False)
    assert accuracy(np.array([[np.nan, 1.0], [0.0, 1.0]]), np.array([0, 1])) == 0.5


def test_label_errors_of_a_hub_copy_name_the_row(tmp_path):
    """A copy has no lines: its rows are counted from 1, as its other errors name them."""
    import datasets

    rows = _synthetic(3, 1)
    copy = tmp_path / "swag.parquet"
    datasets.Dataset.from_list([{**row, "label": label} for row, label in zip(rows, (0, 1, 7), strict=True)]
                               ).to_parquet(str(copy))
    with pytest.raises(UsageError, match=f"^--train {copy} row 3: label 7 is outside its choices 0..3$"):
        read_choice(copy, "--train")


def test_a_csv_cell_past_128_kib_is_read_as_pandas_reads_it(tmp_path):
    """Past the csv module's default field_size_limit (131072 characters) a cell was `malformed csv`."""
    path = tmp_path / "swag.csv"
    path.write_text("sent1,sent2,ending0,ending1,label\na,b," + "c" * 140_000 + ',"d ""e""",1\n', encoding="utf-8")
    data = read_choice(path, "--train")
    assert data.choices == [["b " + "c" * 140_000, 'b d "e"']] and data.labels == [1]


@pytest.mark.parametrize(("name", "data"), [
    ("swag.csv", b"sent1,sent2,ending0,ending1,label\r\na,b,c,d,0\r\ncaf\xe9,b,c,d,1\r\n"),
    ("swag.jsonl", b'{"context": "a", "choices": ["b", "c"], "label": 0}\r\n\r\n'
                   b'{"context": "caf\xe9", "choices": ["b", "c"], "label": 1}\r\n'),
    ("swag.csv.gz", gzip.compress(b"sent1,sent2,ending0,ending1,label\na,b,c,d,0\n")),
], ids=["csv", "jsonl", "gz"])
def test_a_file_that_is_not_utf8_text_is_named_by_line_and_byte(tmp_path, name, data):
    """Python's codec words (`'utf-8' codec can't decode byte 0xe9 in position 47`) named no line; a .gz was
    called not UTF-8 where it is compressed."""
    path = tmp_path / name
    path.write_bytes(data)
    byte = data.find(b"\xe9")
    said = (" is compressed; decompress it first" if name.endswith(".gz") else
            f":3: not UTF-8 text \\(byte {byte}\\); convert it to UTF-8 first$")
    with pytest.raises(UsageError, match=f"^--train {re.escape(str(path))}{said}"):
        read_choice(path, "--train")


# --- the model ------------------------------------------------------------------------------------------

def test_logits_and_loss_equal_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(1)
    ours = BertForMultipleChoice(_config()).eval()
    folder = save_model(ours, tmp_path / "mc", _tokenizer())
    theirs = transformers.BertForMultipleChoice.from_pretrained(folder).eval()
    ids = torch.tensor([[[2, 22, 5, 3, 7, 26, 3], [2, 22, 5, 3, 27, 3, 0]], [[2, 23, 3, 8, 3, 0, 0],
                                                                            [2, 23, 3, 28, 29, 9, 3]]])
    types = torch.tensor([[[0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 1, 1, 0]], [[0, 0, 0, 1, 1, 0, 0],
                                                                          [0, 0, 0, 1, 1, 1, 1]]])
    mask = (ids != 0).long()
    labels = torch.tensor([1, 0])
    with torch.no_grad():
        a = ours(ids, types, mask, labels=labels)
        b = theirs(input_ids=ids, token_type_ids=types, attention_mask=mask, labels=labels)
    torch.testing.assert_close(a.logits, b.logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(a.loss, b.loss, atol=1e-5, rtol=0)
    assert a.logits.shape == (2, 2)


# --- end to end ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def choice_files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("swag")
    return {"train": _swag_csv(root / "train.csv", _synthetic(160, 1)),
            "valid": _swag_csv(root / "val.csv", _synthetic(40, 2)),
            "test": _swag_csv(root / "test.csv", _synthetic(6, 3), labelled=False)}


@pytest.fixture(scope="module")
def choice_run(encoder, choice_files, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "swag"
    result = CliRunner().invoke(app, ["finetune", "choice", "--model", str(encoder), "--train",
                                      str(choice_files["train"]), "--validation", str(choice_files["valid"]),
                                      "--out", str(out),
                                      *[a for k, v in FAST.items() for a in (f"--{k.replace('_', '-')}", str(v))]])
    assert result.exit_code == 0, result.output
    assert "a new multiple-choice head" in result.stderr
    return out


def test_finetune_learns_the_choices_and_writes_a_run_folder(choice_run):
    results = json.loads((choice_run / "eval_results.json").read_text())
    assert results["task"] == "choice" and results["main_metric"] == "accuracy"
    rows = [json.loads(line) for line in (choice_run / "metrics.jsonl").read_text().splitlines()]
    dev = [row["validation_accuracy"] for row in rows if "validation_accuracy" in row]
    losses = [row["loss"] for row in rows if "loss" in row]
    assert len(dev) == FAST["epochs"] and results["validation"]["accuracy"] == max(dev) >= 0.8, dev
    assert losses[-1] < losses[0] / 2, losses
    config = json.loads((choice_run / "config.json").read_text())
    assert config["architectures"] == ["BertForMultipleChoice"] and config["finetuning_task"] == "choice"
    assert json.loads((choice_run / "run.json").read_text())["config"]["batch_size"] == 8


def test_evaluate_reproduces_eval_results_and_predict_writes_csv(choice_run, choice_files, tmp_path):
    results = json.loads((choice_run / "eval_results.json").read_text())
    scored = evaluate_choice(choice_run, choice_files["valid"])
    assert scored == {"accuracy": results["validation"]["accuracy"], "examples": 40, "choices": 4,
                      "examples_cut": 0}
    assert evaluate_choice(choice_run, choice_files["valid"], max_seq_length=6)["examples_cut"] == 40
    shown = CliRunner().invoke(app, ["evaluate", "choice", "--model", str(choice_run), "--data",
                                     str(choice_files["valid"]), "--json"])
    assert shown.exit_code == 0 and json.loads(shown.stdout)["accuracy"] == scored["accuracy"]
    text = CliRunner().invoke(app, ["evaluate", "choice", "--model", str(choice_run), "--data",
                                    str(choice_files["valid"])])
    assert "choice accuracy:" in text.stdout
    shown = CliRunner().invoke(app, ["predict", "choice", "--model", str(choice_run), "--data",
                                     str(choice_files["test"]), "--out", str(tmp_path / "preds.csv")])
    assert shown.exit_code == 0, shown.output
    written = list(csv.DictReader((tmp_path / "preds.csv").open()))
    assert list(written[0]) == ["id", "prediction", "prob0", "prob1", "prob2", "prob3"]
    assert [r["id"] for r in written] == [str(1000 + i) for i in range(6)]
    for row in written:
        probs = [float(row[f"prob{k}"]) for k in range(4)]
        assert sum(probs) == pytest.approx(1, abs=1e-5) and int(row["prediction"]) == probs.index(max(probs))
    labelled = list(csv.DictReader(predict_choice(choice_run, choice_files["valid"], tmp_path / "v.csv").open()))
    right = sum(r["prediction"] == r["label"] for r in labelled)
    assert right / len(labelled) == pytest.approx(scored["accuracy"])
    bare = CliRunner().invoke(app, ["predict", "choice", "--model", str(choice_run), "--data",
                                    str(choice_files["test"]), "--out", str(tmp_path / "bare")])
    assert bare.stdout == f"{tmp_path / 'bare.csv'}\n", bare.output  # as `predict classify -o bare` names it
    assert (tmp_path / "bare.csv").read_text() == (tmp_path / "preds.csv").read_text()
    assert not (tmp_path / "bare").exists()


def test_encoded_choices_are_held_end_to_end_not_as_an_array_each():
    """Two numpy arrays per choice (ids, segments) and two lists per example held ~1.4 KB of objects an
    example of 4 short choices; one int32 and one int8 array for all the choices, with offsets, hold the tokens
    and 8 bytes a choice."""
    import tracemalloc

    import numpy as np

    from bertctl.data.choice import ChoiceData

    rows = _synthetic(5000, 4)
    data = ChoiceData([r["fold-ind"] for r in rows], [r["sent1"] for r in rows],
                      [[f"{r['sent2']} {r[f'ending{k}']}" for k in range(4)] for r in rows], None, Path("x.csv"))
    tokenizer = _tokenizer()
    tracemalloc.start()
    features = make_choice_features(tokenizer, data, 24)
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert held / len(data) < 400, f"{held / len(data):.0f} bytes an example"
    context = [VOCAB.index(w) for w in rows[1]["sent1"].split()]
    ending = [VOCAB.index(w) for w in f"{rows[1]['sent2']} {rows[1]['ending2']}".split()]
    assert features.input_ids[1][2].tolist() == [2, *context, 3, *ending, 3] and len(features.input_ids[1]) == 4
    assert features.token_type_ids[1][2].tolist() == [0] * (len(context) + 2) + [1] * (len(ending) + 1)
    assert features.lengths[1] == max(len(x) for x in features.input_ids[1]) and len(features) == 5000
    assert features.tokens[1] == sum(len(x) for x in features.input_ids[1])
    assert features.input_ids[-1][0].dtype == np.int32 and features.token_type_ids[-1][0].dtype == np.int8


def test_predict_writes_its_file_a_chunk_of_examples_at_a_time(choice_run, choice_files, tmp_path, monkeypatch,
                                                               watch_writes):
    """The rows of every example were made before the file was written; now WRITE_CHUNK at a time as the temp
    file is written, and the file appears only whole, the same as it was."""
    import bertctl.choice as choice
    import bertctl.submission as submission

    whole = predict_choice(choice_run, choice_files["valid"], tmp_path / "whole.csv").read_bytes()
    written = []
    watch_writes(choice, written.append)
    monkeypatch.setattr(submission, "WRITE_CHUNK", 16)
    assert predict_choice(choice_run, choice_files["valid"], tmp_path / "p.csv").read_bytes() == whole
    assert [piece.count("\n") for piece in written] == [1, 16, 16, 8]  # the header, then the 40 examples


def test_predict_scores_without_holding_the_texts(choice_run, choice_files, tmp_path, monkeypatch):
    """The examples' texts (~0.75 KB an example of 4 short choices) were held, by the features too, while every
    example was scored: now they are gone once encoded, and the file is the same."""
    import gc

    import bertctl.choice as choice
    from bertctl.data.choice import ChoiceData

    whole = predict_choice(choice_run, choice_files["valid"], tmp_path / "whole.csv").read_bytes()
    score, held = choice.choice_logits, []

    def scoring(*args, **kwargs):
        gc.collect()
        held.append([o for o in gc.get_objects() if type(o) is ChoiceData])
        return score(*args, **kwargs)

    monkeypatch.setattr(choice, "choice_logits", scoring)
    assert predict_choice(choice_run, choice_files["valid"], tmp_path / "p.csv").read_bytes() == whole
    assert held == [[]]


def test_choice_defaults_and_config_file(tmp_path):
    cfg = FinetuneConfig.choice()
    assert (cfg.lr, cfg.epochs, cfg.max_seq_length, cfg.batch_size) == (5e-5, 3, 128, 16)
    from bertctl.cli_tasks import _finetune_config

    config = tmp_path / "c.json"
    config.write_text(json.dumps({"epochs": 5, "batch_size": 32}))
    flags = {name: None for name in ("model", "out", "train", "validation", "lr")}
    cfg = _finetune_config({**flags, "config": config, "lr": 1e-4}, "choice")
    assert (cfg.epochs, cfg.lr, cfg.batch_size, cfg.max_seq_length) == (5, 1e-4, 32, 128)


def _one_line_failure(args: list[str], message: str) -> None:
    shown = CliRunner().invoke(app, args)
    assert shown.exit_code != 0 and message in shown.output, shown.output
    assert "Traceback" not in shown.output


def test_refusals(encoder, choice_run, choice_files, tmp_path):
    train = ["finetune", "choice", "--model", str(encoder), "--out", str(tmp_path / "o"), "--max-seq-length", "24",
             "--train"]
    missing = tmp_path / "missing.csv"
    missing.write_text("sent1,ending0,ending1,label\nthe man,a,b,0\n")
    _one_line_failure([*train, str(missing)], "lacks the column(s) sent2")
    outside = _swag_csv(tmp_path / "outside.csv", [{**_synthetic(1, 1)[0], "label": 4}])
    _one_line_failure([*train, str(outside)], "outside.csv:2: label 4 is outside its choices 0..3")
    ragged = tmp_path / "ragged.jsonl"
    ragged.write_text('{"context": "a", "choices": ["b", "c"], "label": 0}\n'
                      '{"context": "a", "choices": ["b", "c", "d"], "label": 0}\n')
    _one_line_failure([*train, str(ragged)], "ragged.jsonl:2: 3 choices where the first example has 2")
    two = tmp_path / "two.jsonl"  # a validation file of other examples than training's would be scored unasked
    two.write_text('{"context": "a", "choices": ["b", "c"], "label": 0}\n')
    four = _swag_csv(tmp_path / "four.csv", _synthetic(2, 1))
    _one_line_failure([*train, str(four), "--validation", str(two)],
                      f"--validation {two}: 2 choices per example where --train {four} has 4")
    _one_line_failure(["evaluate", "choice", "--model", str(encoder), "--data", str(choice_files["valid"])],
                      "has no multiple-choice head")
    _one_line_failure(["evaluate", "choice", "--model", str(choice_run), "--data", str(choice_files["test"])],
                      ":2: no label; give the right choice of each example")
    with pytest.raises(UsageError, match="label_names: for `bertctl finetune classify`"):
        finetune_choice(FinetuneConfig.choice(model=encoder, train=choice_files["train"], out=tmp_path / "o",
                                              label_names=("a", "b")))
    with pytest.raises(UsageError, match="--train and --out"):
        finetune_choice(FinetuneConfig.choice(model=encoder))
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("command", ["evaluate", "predict"])
def test_a_precision_the_device_cannot_run_is_refused_before_a_choice_is_tokenized(encoder, choice_files, tmp_path,
                                                                                   monkeypatch, command):
    """--precision fp16 on the CPU (or a --device the machine lacks) was refused once every choice was encoded:
    ~20 s on a SWAG file of 50,000 rows before a one-line refusal. The model is placed once the file is read."""
    from bertctl import choice

    model = save_model(build_model(read_checkpoint(encoder), "BertForMultipleChoice"), tmp_path / "mc", _tokenizer())
    monkeypatch.setattr(choice, "make_choice_features", never_called("make_choice_features"))
    out = tmp_path / "preds.csv"
    with pytest.raises(UsageError, match="^--precision fp16 needs a CUDA device"):
        if command == "evaluate":
            evaluate_choice(model, choice_files["valid"], device="cpu", precision="fp16")
        else:
            predict_choice(model, choice_files["valid"], out, device="cpu", precision="fp16")
    assert not out.exists()


@pytest.mark.parametrize("name", ["preds.jsonl", "preds.tsv", "preds.json"])
def test_predict_refuses_an_out_named_for_another_format(choice_run, choice_files, tmp_path, name):
    """predict choice writes csv only: `--out preds.jsonl` wrote csv rows into a file named .jsonl."""
    out = tmp_path / name
    shown = CliRunner().invoke(app, ["predict", "choice", "--model", str(choice_run), "--data",
                                     str(choice_files["valid"]), "--out", str(out)], prog_name="bertctl")
    assert shown.exit_code == 2 and shown.stdout == "", shown.output
    assert shown.stderr == f"bertctl: error: --out {out}: predict choice writes a csv file; name it .csv\n"
    assert not out.exists()
    written = tmp_path / "PREDS.CSV"
    assert CliRunner().invoke(app, ["predict", "choice", "--model", str(choice_run), "--data",
                                    str(choice_files["valid"]), "--out", str(written)]).exit_code == 0
    assert written.read_text().startswith("id,prediction,label,prob0,")


def test_two_gloo_processes_give_the_losses_and_validation_scores_of_one(encoder, choice_files, tmp_path):
    """torchrun: each rank trains on its share of every batch and scores its share of the validation examples."""
    from test_finetune_resume import _dev, _losses, _torchrun

    flags = [a for k, v in {**FAST, "epochs": 2, "log_every": 1}.items() for a in (f"--{k.replace('_', '-')}", str(v))]
    args = ["finetune", "choice", "--model", str(encoder), "--train", str(choice_files["train"]), "--validation",
            str(choice_files["valid"]), "--device", "cpu", *flags]
    one = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "one")])
    assert one.exit_code == 0, one.output
    two = _torchrun([*args, "--out", str(tmp_path / "two")], 2, 29800, tmp_path)
    assert two.returncode == 0, ranks_said(two.stderr)
    a, b = _losses(tmp_path / "one" / "metrics.jsonl"), _losses(tmp_path / "two" / "metrics.jsonl")
    assert sorted(a) == sorted(b) and len(a) > 10 and max(abs(a[s] - b[s]) for s in a) < 1e-4
    dev_one, dev_two = _dev(tmp_path / "one" / "metrics.jsonl"), _dev(tmp_path / "two" / "metrics.jsonl")
    assert [r["validation_accuracy"] for r in dev_one] == [r["validation_accuracy"] for r in dev_two]


# --- copies of the hub's allenai/swag (regular) ----------------------------------------------------------------

def _swag_copies(root: Path, rows: list[dict], labelled: bool = True) -> dict[str, Path]:
    """The hub's rows: SWAG's columns, the label a ClassLabel id, -1 for the test split's missing one."""
    from hub_copy_fixtures import SWAG_TEXTS, swag_features, write_copies

    columns = {name: [row[name] for row in rows] for name in SWAG_TEXTS}
    return write_copies(root, {**columns, "label": [row["label"] if labelled else -1 for row in rows]},
                        swag_features())


@pytest.mark.parametrize("labelled", [True, False])
def test_hub_copies_give_the_examples_of_the_swag_csv(tmp_path, labelled):
    rows = _synthetic(10, 4)
    want = read_choice(_swag_csv(tmp_path / "swag.csv", rows, labelled), "--data", need_labels=False)
    assert (want.labels is not None) == labelled
    copies = _swag_copies(tmp_path / "copies", rows, labelled)
    for form in ("parquet", "saved", "json", "split"):
        got = read_choice(copies[form], "--data", need_labels=False)
        assert (got.ids, got.contexts, got.choices, got.labels) == (want.ids, want.contexts, want.choices,
                                                                      want.labels), form
    jsonl = tmp_path / "copy.jsonl"
    jsonl.write_text(copies["json"].read_text())
    if not labelled:  # the hub's test split written out as csv
        exported = _swag_csv(tmp_path / "exported.csv", [{**row, "label": -1} for row in rows])
        assert read_choice(exported, "--data", need_labels=False).labels is None
    assert read_choice(jsonl, "--data", need_labels=False).choices == want.choices
    ours, theirs = (make_choice_features(_tokenizer(), read_choice(p, "--data", need_labels=False), 16)
                    for p in (copies["parquet"], tmp_path / "swag.csv"))
    assert [[x.tolist() for x in e] for e in ours.input_ids] == [[x.tolist() for x in e] for e in theirs.input_ids]


def test_swag_copies_that_do_not_fit_are_refused_in_one_line(tmp_path):
    import datasets

    copies = _swag_copies(tmp_path / "c", _synthetic(3, 1))
    saved = datasets.load_from_disk(str(copies["saved"]))
    saved.remove_columns(["sent2", "ending1"]).to_parquet(str(tmp_path / "short.parquet"))
    with pytest.raises(UsageError, match=r"short.parquet lacks the column\(s\) sent2, ending1; give SWAG's columns"):
        read_choice(tmp_path / "short.parquet", "--train")
    full = {"video-id": ["v"], "fold-ind": ["1"], "startphrase": ["A man"], "gold-ending": ["walks."],
            "distractor-0": ["sits."], "distractor-1": ["runs."], "gold-source": ["gold"]}
    datasets.Dataset.from_dict(full).to_parquet(str(tmp_path / "full.parquet"))  # allenai/swag's `full` config
    with pytest.raises(UsageError, match=r"full.parquet lacks the column\(s\) sent1, sent2, ending0, ending1 \(this is "
                                         r"SWAG's `full` layout, gold-ending and distractor-N: give its `regular` "
                                         r"config\)"):
        read_choice(tmp_path / "full.parquet", "--train")
    with pytest.raises(UsageError, match=re.escape(f"--validation {copies['dict']} is a DatasetDict folder of the "
                                                   f"splits train, validation; give one split's folder, such as "
                                                   f"{copies['dict'] / 'validation'}")):
        read_choice(copies["dict"], "--validation")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"sent1": "a", "sent2": "b", "ending0": "c", "ending1": None, "label": 0}) + "\n")
    with pytest.raises(UsageError, match=r"bad.json:1: ending1 must be text, got None"):
        read_choice(bad, "--train")
    bad.write_text(json.dumps({"sent1": "a", "sent2": "b", "ending0": "c", "ending1": "d", "label": "0"}) + "\n")
    with pytest.raises(UsageError, match=r"bad.json:1: label must be the number of a choice"):
        read_choice(bad, "--train")


def test_finetune_and_evaluate_on_hub_copies_equal_the_swag_csvs(choice_run, choice_files, encoder, tmp_path):
    train = _swag_copies(tmp_path / "train", _synthetic(160, 1))
    valid = _swag_copies(tmp_path / "valid", _synthetic(40, 2))
    test = _swag_copies(tmp_path / "test", _synthetic(6, 3), labelled=False)
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["finetune", "choice", "--model", str(encoder), "--train", str(train["split"]),
                                      "--validation", str(valid["parquet"]), "--out", str(out),
                                      *[a for k, v in FAST.items() for a in (f"--{k.replace('_', '-')}", str(v))]])
    assert result.exit_code == 0, result.output
    want = json.loads((choice_run / "eval_results.json").read_text())
    assert json.loads((out / "eval_results.json").read_text())["validation"] == want["validation"]
    shown = CliRunner().invoke(app, ["evaluate", "choice", "--model", str(choice_run), "--data", str(valid["json"]),
                                     "--json"])
    assert shown.exit_code == 0 and json.loads(shown.stdout)["accuracy"] == want["validation"]["accuracy"]
    shown = CliRunner().invoke(app, ["predict", "choice", "--model", str(choice_run), "--data", str(test["saved"]),
                                     "--out", str(tmp_path / "p.csv")])
    assert shown.exit_code == 0, shown.output
    expected = predict_choice(choice_run, choice_files["test"], tmp_path / "q.csv").read_text()
    assert (tmp_path / "p.csv").read_text() == expected


# --- hub ids (datasets.load_dataset stubbed with a copy's rows: no network) ------------------------------------

def test_a_hub_id_gives_the_examples_of_a_copy_from_the_flags_split_and_swags_regular_config(tmp_path, monkeypatch):
    from hub_copy_fixtures import stub_hub

    rows = _synthetic(10, 4)
    want = read_choice(_swag_csv(tmp_path / "swag.csv", rows), "--data")
    saved = _swag_copies(tmp_path / "copies", rows)["saved"]
    calls = stub_hub(monkeypatch, {"allenai/swag": saved, "someone/choices": saved})
    for flag, split in (("--train", "train"), ("--validation", "validation"), ("--data", "validation")):
        got = read_choice("allenai/swag", flag)
        assert (got.ids, got.contexts, got.choices, got.labels) == (want.ids, want.contexts, want.choices,
                                                                      want.labels), flag
        assert calls[-1] == ("allenai/swag", "regular", split)
    read_choice("allenai/swag:train", "--data")
    read_choice("allenai/swag:full:test", "--train")
    read_choice("someone/choices", "--train")  # only allenai/swag is known to need a config
    assert calls[-3:] == [("allenai/swag", "regular", "train"), ("allenai/swag", "full", "test"),
                          ("someone/choices", None, "train")]
    monkeypatch.chdir(tmp_path)
    for name in ("swag/train.csv", "copies/train"):  # a file's ending, or in a folder here
        with pytest.raises(UsageError, match=f"^--train {name}: no such file; give a SWAG-style .csv"):
            read_choice(name, "--train")
    with pytest.raises(UsageError, match=r"^--data someone/swag: not a local file or folder, and loading "
                                         r"someone/swag \(validation\) from the hub failed \(.*\); go online once to "
                                         r"download it to the cache, or give a local copy$"):
        read_choice("someone/swag", "--data")
    assert len(calls) == 7


def test_finetune_on_hub_ids_equals_the_swag_csvs_and_records_the_ids(choice_run, encoder, tmp_path, monkeypatch):
    from hub_copy_fixtures import stub_hub

    calls = stub_hub(monkeypatch, {"allenai/swag": _swag_copies(tmp_path / "train", _synthetic(160, 1))["saved"],
                                   "someone/swag-dev": _swag_copies(tmp_path / "valid", _synthetic(40, 2))["saved"]})
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["finetune", "choice", "--model", str(encoder), "--train", "allenai/swag",
                                      "--validation", "someone/swag-dev:train", "--out", str(out),
                                      *[a for k, v in FAST.items() for a in (f"--{k.replace('_', '-')}", str(v))]])
    assert result.exit_code == 0, result.output
    assert calls == [("allenai/swag", "regular", "train"), ("someone/swag-dev", None, "train")]
    want = json.loads((choice_run / "eval_results.json").read_text())
    assert json.loads((out / "eval_results.json").read_text())["validation"] == want["validation"]
    config = json.loads((out / "run.json").read_text())["config"]
    assert (config["train"], config["validation"]) == ("allenai/swag", "someone/swag-dev:train")
    shown = CliRunner().invoke(app, ["predict", "choice", "--model", str(choice_run), "--data", "allenai/swag:test",
                                     "--out", str(tmp_path / "p.csv")])
    assert shown.exit_code == 0 and calls[-1] == ("allenai/swag", "regular", "test"), shown.output
