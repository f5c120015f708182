"""GLUE as it really comes: the quirks of the distributed files, copies of the hub dataset, and checkpoints
fine-tuned elsewhere whose classes are in another order. Small synthetic files reproduce each quirk."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from glue_fixtures import FILLER, KEYWORDS_3, write_glue_data

from bertctl.data.glue import TASKS, get_task, read_split
from bertctl.errors import BertctlError, UsageError
from bertctl.evaluate import evaluate_glue
from bertctl.predict import predict_glue
from bertctl.tokenizer import BertTokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

# nyu-mll/glue as the `datasets` GLUE builder made it: per config, the text columns and the ClassLabel names
# (written out here, not taken from bertctl's registry, so a wrong registry entry fails)
HUB = {
    "cola": (("sentence",), ["unacceptable", "acceptable"]),
    "sst2": (("sentence",), ["negative", "positive"]),
    "mrpc": (("sentence1", "sentence2"), ["not_equivalent", "equivalent"]),
    "stsb": (("sentence1", "sentence2"), None),
    "qqp": (("question1", "question2"), ["not_duplicate", "duplicate"]),
    "mnli": (("premise", "hypothesis"), ["entailment", "neutral", "contradiction"]),
    "qnli": (("question", "sentence"), ["entailment", "not_entailment"]),
    "rte": (("sentence1", "sentence2"), ["entailment", "not_entailment"]),
    "wnli": (("sentence1", "sentence2"), ["not_entailment", "entailment"]),
    "ax": (("premise", "hypothesis"), ["entailment", "neutral", "contradiction"]),
}
SPLITS = {"train": "train", "dev": "validation", "test": "test", "dev_matched": "validation_matched",
          "dev_mismatched": "validation_mismatched", "test_matched": "test_matched",
          "test_mismatched": "test_mismatched"}


@pytest.fixture
def glue(tmp_path) -> Path:
    return write_glue_data(tmp_path / "glue", n_train=200, n_dev=8, n_test=4)


def _insert(path: Path, at: int, *lines: str) -> None:
    rows = path.read_text(encoding="utf-8").splitlines()
    rows[at:at] = lines
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")


# --- the distributed files ----------------------------------------------------------------------------------

def test_a_question_broken_across_lines_is_skipped_with_a_warning(glue, caplog):
    """The older QQP train.tsv has questions with a line break: the row's two halves have 4 and 3 fields."""
    path = glue / "QQP" / "train.tsv"
    before = read_split("qqp", "train", glue)
    _insert(path, 5, "900\t1800\t1801\tWas Muhammad", '"\tWhat is the evidence for his existence?\t0')
    with caplog.at_level(logging.WARNING):
        examples = read_split("qqp", "train", glue)
    assert (examples.text_a, examples.text_b, examples.labels, examples.ids) == (
        before.text_a, before.text_b, before.labels, before.ids)
    assert "QQP/train.tsv: 2 of 202 rows do not have 6 fields (first: line 6); 2 skipped" in caplog.text


def test_extra_fields_are_ignored_and_columns_stay_where_the_header_puts_them(glue, caplog):
    path = glue / "STS-B" / "train.tsv"
    fields = ["9", "main-forums", "deft-forum", "2014", "0009", "none", "none", "one cold", "two cold", "0.400",
              "stray"]
    _insert(path, 1, "\t".join(fields))
    with caplog.at_level(logging.WARNING):
        examples = read_split("stsb", "train", glue)
    assert (examples.text_a[0], examples.text_b[0], examples.labels[0], examples.ids[0]) == (
        "one cold", "two cold", 0.4, "9")
    assert "STS-B/train.tsv: 1 of 201 rows do not have 10 fields (first: line 2); 0 skipped" in caplog.text


def test_rows_without_an_index_column_keep_their_row_number_as_on_the_hub(glue):
    path = glue / "SST-2" / "train.tsv"
    _insert(path, 3, "a row without its label")
    examples = read_split("sst2", "train", glue)
    assert len(examples) == 200 and examples.ids[:4] == ["0", "1", "3", "4"]  # row 2 was the broken one


def test_only_an_empty_line_is_not_a_row_as_for_the_datasets_glue_builder(glue, caplog):
    """Its csv.DictReader skips an empty line without counting it, and counts a line of spaces (a row with one
    field: skipped with the other broken rows) and a line of tabs (a row of empty fields: its label is bad)."""
    train = glue / "SST-2" / "train.tsv"
    _insert(train, 3, "", "   ")
    with caplog.at_level(logging.WARNING):
        examples = read_split("sst2", "train", glue)
    assert len(examples) == 200 and examples.ids[:4] == ["0", "1", "3", "4"]  # the line of spaces is row 2
    assert "SST-2/train.tsv: 1 of 201 rows do not have 2 fields (first: line 5); 1 skipped" in caplog.text
    _insert(glue / "RTE" / "dev.tsv", 2, "\t\t\t")
    with pytest.raises(UsageError, match=r"RTE/dev.tsv:3: label '' is not one of entailment, not_entailment"):
        read_split("rte", "dev", glue)
    _insert(glue / "STS-B" / "dev.tsv", 1, "\t" * 9)
    with pytest.raises(UsageError, match=r"STS-B/dev.tsv:2: score '' is not a finite number"):
        read_split("stsb", "dev", glue)
    test = glue / "RTE" / "test.tsv"
    _insert(test, 1, "", "77\t\t")
    examples = read_split("rte", "test", glue)
    assert (examples.ids[0], examples.text_a[0], examples.text_b[0], len(examples)) == ("77", "", "", 5)
    _insert(test, 1, "\t\t")
    with pytest.raises(UsageError, match=r"RTE/test.tsv:2: column 'index' is empty; a submission names each row"):
        read_split("rte", "test", glue)


def test_many_broken_rows_mean_a_wrong_file(glue):
    path = glue / "QNLI" / "train.tsv"
    _insert(path, 2, *["0\tonly a question"] * 3)
    with pytest.raises(UsageError, match=r"QNLI/train.tsv:3: expected 4 tab-separated fields, found 2"):
        read_split("qnli", "train", glue)


def test_crlf_line_endings_and_byte_order_marks_read_the_same(glue, tmp_path):
    other = write_glue_data(tmp_path / "crlf", n_train=200, n_dev=8, n_test=4)
    for path in other.rglob("*.tsv"):
        text = path.read_text(encoding="utf-8").replace("\n", "\r\n")
        path.write_text(text if text.startswith("\ufeff") else "\ufeff" + text, encoding="utf-8", newline="")
    for task in TASKS.values():
        for split in task.splits:
            ours, theirs = read_split(task, split, glue), read_split(task, split, other)
            assert (ours.text_a, ours.text_b, ours.labels, ours.ids) == (
                theirs.text_a, theirs.text_b, theirs.labels, theirs.ids), (task.name, split)


# --- copies of the hub dataset ------------------------------------------------------------------------------

def _hub_dataset(task: str, split: str, glue: Path, names: list[str] | None = None):
    """The split as the `datasets` GLUE builder makes it from the files: texts, ClassLabel ints, idx = row."""
    import datasets

    columns, hub_names = HUB[task]
    names = names or hub_names
    examples = read_split(task, split, glue)
    data = {columns[0]: examples.text_a, "idx": list(range(len(examples)))}
    if len(columns) == 2:
        data[columns[1]] = examples.text_b
    features = {c: datasets.Value("string") for c in columns} | {"idx": datasets.Value("int32")}
    test = examples.labels is None
    if hub_names is None:
        data["label"] = [-1.0] * len(examples) if test else examples.labels
        features["label"] = datasets.Value("float32")
    else:
        data["label"] = [-1] * len(examples) if test else [names.index(hub_names[i]) for i in examples.labels]
        features["label"] = datasets.ClassLabel(names=names)
    return datasets.Dataset.from_dict(data, features=datasets.Features(features))


def _same(a, b) -> None:
    assert (a.text_a, a.text_b, a.labels, a.ids) == (b.text_a, b.text_b, b.labels, b.ids)


def test_a_clone_of_the_hub_repository_gives_the_files_examples(glue, tmp_path):
    clone = tmp_path / "glue-clone"
    for task in TASKS.values():
        for split in task.splits:
            (clone / task.hub_config).mkdir(parents=True, exist_ok=True)
            _hub_dataset(task.name, split, glue).to_parquet(
                clone / task.hub_config / f"{SPLITS[split]}-00000-of-00001.parquet")
    for task in TASKS.values():
        for split in task.splits:
            _same(read_split(task, split, clone), read_split(task, split, glue))
    from bertctl.finetune import _check_layout

    _check_layout(list(TASKS.values()), str(clone))  # `finetune glue all` takes the clone too
    (clone / "rte" / "validation-00000-of-00001.parquet").unlink()
    with pytest.raises(UsageError, match=r"rte: no validation-\*.parquet for rte dev \(found splits: test, train\)"):
        read_split("rte", "dev", clone)
    (clone / "rte" / "validation").mkdir()  # the parquet converter's layout: <config>/<split>/0000.parquet
    _hub_dataset("rte", "dev", glue).to_parquet(clone / "rte" / "validation" / "0000.parquet")
    _same(read_split("rte", "dev", clone), read_split("rte", "dev", glue))


def test_a_clone_with_label_names_only_in_its_readme_and_in_another_order(glue, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    clone = tmp_path / "glue-clone"
    (clone / "mnli").mkdir(parents=True)
    names = ["contradiction", "entailment", "neutral"]
    table = _hub_dataset("mnli", "dev_matched", glue, names).data.table
    bare = pa.Table.from_pydict(table.to_pydict())  # no schema metadata: names only in the README
    pq.write_table(bare, clone / "mnli" / "validation_matched-00000-of-00001.parquet")
    dtype = {"class_label": {"names": {str(i): n for i, n in enumerate(names)}}}
    card = {"dataset_info": [{"config_name": "cola", "features": []},
                             {"config_name": "mnli", "features": [{"name": "premise", "dtype": "string"},
                                                                  {"name": "label", "dtype": dtype}]}]}
    (clone / "README.md").write_text("---\n" + json.dumps(card) + "\n---\n# GLUE\n", encoding="utf-8")
    _same(read_split("mnli", "dev_matched", clone), read_split("mnli", "dev_matched", glue))
    card["dataset_info"][1]["features"][1]["dtype"]["class_label"]["names"]["2"] = "maybe"
    (clone / "README.md").write_text("---\n" + json.dumps(card) + "\n---\n", encoding="utf-8")
    with pytest.raises(BertctlError, match="label names contradiction, entailment, maybe are not mnli's"):
        read_split("mnli", "dev_matched", clone)


def test_a_saved_dataset_dict_per_task(glue, tmp_path):
    import datasets

    saved = tmp_path / "glue-saved"
    splits = {SPLITS[s]: _hub_dataset("rte", s, glue) for s in get_task("rte").splits}
    datasets.DatasetDict(splits).save_to_disk(str(saved / "rte"))
    for split in get_task("rte").splits:
        _same(read_split("rte", split, saved), read_split("rte", split, glue))
    datasets.DatasetDict({"train": splits["train"]}).save_to_disk(str(tmp_path / "part" / "rte"))
    with pytest.raises(UsageError, match=r"rte: no split validation \(found: train\); rte dev is read from it$"):
        read_split("rte", "dev", tmp_path / "part")
    (tmp_path / "part" / "rte" / "dataset_dict.json").write_text("{}")
    with pytest.raises(UsageError, match=r"rte: cannot read the split names in its dataset_dict.json$"):
        read_split("rte", "dev", tmp_path / "part")


def test_hub_scores_are_the_files_decimals(glue, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets, "load_dataset", lambda name, config, split: _hub_dataset("stsb", "dev", glue))
    _same(read_split("stsb", "dev", "nyu-mll/glue"), read_split("stsb", "dev", glue))


# --- checkpoints fine-tuned elsewhere -----------------------------------------------------------------------

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "'", "s", '"',
         *[w for w in FILLER if w not in ("'s", '"')], *KEYWORDS_3]


def _transformers_model(folder: Path, names: list[str], rows: list[int]) -> Path:
    """A random transformers classifier (seed 0; large weights, so texts get different classes) whose
    output j is the seed model's output rows[j]."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=len(VOCAB), hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=64, max_position_embeddings=64,
                                     num_labels=len(names), initializer_range=0.5)
    model = transformers.BertForSequenceClassification(config)
    with torch.no_grad():
        model.classifier.weight.copy_(model.classifier.weight[rows])
        model.classifier.bias.copy_(model.classifier.bias[rows])
    model.config.id2label = dict(enumerate(names))
    model.config.label2id = {n: i for i, n in enumerate(names)}
    model.save_pretrained(folder)
    BertTokenizer.from_vocab(VOCAB).save(folder)
    return folder


def test_a_model_with_permuted_label_names_scores_as_in_task_order(tmp_path):
    data = write_glue_data(tmp_path / "glue", tasks=("mnli",), n_train=4, n_dev=40, n_test=30)
    ours = _transformers_model(tmp_path / "ours", ["entailment", "neutral", "contradiction"], [0, 1, 2])
    theirs = _transformers_model(tmp_path / "theirs", ["CONTRADICTION", "Entailment", "neutral"], [2, 0, 1])
    wrong = _transformers_model(tmp_path / "wrong", ["contradiction", "entailment", "neutral"], [0, 1, 2])
    flags = {"max_seq_length": 32, "batch_size": 8}
    expected = evaluate_glue("mnli", ours, data, **flags)
    assert evaluate_glue("mnli", theirs, data, **flags) == expected
    assert evaluate_glue("mnli", wrong, data, **flags) != expected  # the names are what is matched
    files = {}
    for name, model in (("ours", ours), ("theirs", theirs)):
        predict_glue("mnli", model, data, tmp_path / name / "out", **flags)
        files[name] = (tmp_path / name / "out" / "MNLI-m.tsv").read_text()
    predicted = {line.split("\t")[1] for line in files["ours"].splitlines()[1:]}
    assert files["theirs"] == files["ours"] and len(predicted) > 1  # the order matters for these logits


def test_tied_logits_go_to_the_models_first_output_as_its_own_argmax(tmp_path):
    """A model in Google's MNLI order (contradiction, entailment, neutral) whose logits tie (here all of them: a
    zeroed head; under bf16, close ones) was scored as predicting the task's first tied class, entailment, where
    transformers' argmax over the model's own outputs (run_glue.py's, a pipeline's) gives contradiction."""
    transformers = pytest.importorskip("transformers")
    data = write_glue_data(tmp_path / "glue", tasks=("mnli",), n_train=4, n_dev=30, n_test=6)
    folder = _transformers_model(tmp_path / "google", ["contradiction", "entailment", "neutral"], [0, 1, 2])
    model = transformers.BertForSequenceClassification.from_pretrained(folder)
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.zero_()
    model.save_pretrained(folder)
    contradiction = get_task("mnli").label_names.index("contradiction")
    expected = {}
    for split in ("dev_matched", "dev_mismatched"):
        labels = read_split("mnli", split, data).labels
        expected[split] = {"accuracy": sum(label == contradiction for label in labels) / len(labels)}
        assert expected[split]["accuracy"] != labels.count(0) / len(labels)  # entailment's share differs
    assert evaluate_glue("mnli", folder, data, max_seq_length=32) == expected
    predict_glue("mnli", folder, data, tmp_path / "out", max_seq_length=32)
    rows = (tmp_path / "out" / "MNLI-m.tsv").read_text().splitlines()[1:]
    assert {row.split("\t")[1] for row in rows} == {"contradiction"}


def test_a_test_row_missing_a_text_is_predicted_with_an_empty_text_not_left_out(tmp_path):
    """The GLUE server wants one prediction per test row: a test row without its question2 was skipped, so
    QQP.tsv had 255 of 256 rows. Train and dev rows missing a field are still skipped, as the references do."""
    from typer.testing import CliRunner

    from bertctl.cli import app

    data = write_glue_data(tmp_path / "glue", tasks=("qqp",), n_train=4, n_dev=200, n_test=256)
    test = data / "QQP" / "test.tsv"
    lines = test.read_text(encoding="utf-8").splitlines()
    lines[10] = "\t".join(lines[10].split("\t")[:2])  # row 10: id and question1, no question2
    test.write_text("\n".join(lines) + "\n", encoding="utf-8")
    ids = [line.split("\t")[0] for line in lines[1:]]
    examples = read_split("qqp", "test", data)
    assert examples.ids == ids and examples.text_b[9] == "" and examples.text_a[9] == lines[10].split("\t")[1]
    model = _transformers_model(tmp_path / "model", ["not_duplicate", "duplicate"], [0, 1])
    result = CliRunner().invoke(app, ["predict", "glue", "qqp", "--model", str(model), "--data", str(data),
                                      "--out", str(tmp_path / "sub"), "--max-seq-length", "32"])
    assert result.exit_code == 0, result.output
    assert ("QQP/test.tsv: 1 of 256 rows do not have 3 fields (first: line 11); 1 missing a text field (line 11) "
            "predicted with an empty text for it") in result.stderr
    assert "skipped" not in result.stderr
    rows = (tmp_path / "sub" / "QQP.tsv").read_text(encoding="utf-8").splitlines()[1:]
    assert [row.split("\t")[0] for row in rows] == ids
    dev = data / "QQP" / "dev.tsv"
    lines = dev.read_text(encoding="utf-8").splitlines()
    lines[5] = "\t".join(lines[5].split("\t")[:4])  # no question2, no label
    dev.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert len(read_split("qqp", "dev", data)) == 199
    broken = test.read_text(encoding="utf-8").splitlines()  # a question broken across two lines
    first, second = broken[20].split("\t")[2][:5], broken[20].split("\t")[2][5:]
    broken[20:21] = ["\t".join(broken[20].split("\t")[:2] + [first]), f"{second} and more\tof it"]
    test.write_text("\n".join(broken) + "\n", encoding="utf-8")
    with pytest.raises(UsageError, match=r"test.tsv:22: a short row without a numeric 'id'"):
        read_split("qqp", "test", data)


@pytest.mark.parametrize(("task", "names", "ok"), [
    ("sst2", ["positive", "negative"], True), ("cola", ["acceptable", "unacceptable"], True),
    ("mrpc", ["Not Equivalent", "equivalent"], True), ("qqp", ["LABEL_1", "LABEL_0"], True),
    ("wnli", ["0", "entailment"], True), ("rte", ["yes", "no"], False),
    ("qnli", ["entailment", "entailment"], False),
])
def test_label_names_are_matched_by_name_or_refused_in_one_line(tmp_path, task, names, ok):
    data = write_glue_data(tmp_path / "glue", tasks=(task,), n_train=4, n_dev=6, n_test=4)
    model = _transformers_model(tmp_path / "model", names, [0, 1])
    if ok:
        assert set(evaluate_glue(task, model, data, max_seq_length=32)) == {"dev"}
        return
    with pytest.raises(UsageError, match=f"has the labels {', '.join(names)}, which do not match {task}'s") as info:
        evaluate_glue(task, model, data, max_seq_length=32)
    assert "\n" not in str(info.value)
