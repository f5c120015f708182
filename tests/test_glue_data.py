"""GLUE registry and readers, the user's own tables, and GLUE submission files, on tiny synthetic data."""

from __future__ import annotations

import csv
import gzip
import json
import re
from pathlib import Path

import datasets
import numpy as np
import pytest
from glue_fixtures import ALL_TASKS, LABELS, PAIR_TASKS, rule_label, write_glue_data

from bertctl.data.glue import TASKS, get_task, read_split
from bertctl.data.tabular import load_labelled_data, read_examples
from bertctl.errors import BertctlError, UsageError
from bertctl.metrics import METRICS
from bertctl.submission import submission_name, write_submission

SUBMISSIONS = {"CoLA.tsv", "SST-2.tsv", "MRPC.tsv", "STS-B.tsv", "QQP.tsv", "MNLI-m.tsv", "MNLI-mm.tsv",
               "QNLI.tsv", "RTE.tsv", "WNLI.tsv", "AX.tsv"}


@pytest.fixture(scope="module")
def glue_dir(tmp_path_factory) -> Path:
    return write_glue_data(tmp_path_factory.mktemp("glue"), n_train=40, n_dev=20, n_test=10)


@pytest.fixture
def own_glue(tmp_path) -> Path:
    """A private copy the test may break."""
    return write_glue_data(tmp_path / "glue", n_train=8, n_dev=6, n_test=4)


# --- registry ---------------------------------------------------------------------------------------------

def test_registry_holds_every_task_with_server_names_and_labels():
    assert set(TASKS) == set(ALL_TASKS)
    names = {f.submission for t in TASKS.values() for f in t.files if f.submission}
    assert names == SUBMISSIONS
    for name, task in TASKS.items():
        assert task.label_names == LABELS[name]
        assert set(task.metrics) <= set(METRICS) and task.main_metric in task.metrics
        assert task.is_pair == (name in PAIR_TASKS)
    assert get_task("stsb").is_regression and get_task("stsb").num_labels == 1
    assert get_task("mnli").eval_splits("dev") == ("dev_matched", "dev_mismatched")
    assert get_task("mnli").eval_splits("test") == ("test_matched", "test_mismatched")
    assert get_task("ax").predicted_by == "mnli" and get_task("ax").splits == ("test",)
    assert (get_task("cola").main_metric, get_task("mrpc").metrics, get_task("stsb").metrics) == (
        "matthews_correlation", ("f1", "accuracy"), ("pearson", "spearman"))


def test_tasks_are_found_by_name_or_folder_and_unknown_ones_listed():
    assert get_task("SST-2").name == "sst2" and get_task("STS-B").name == "stsb"
    assert get_task("diagnostic").name == "ax"
    with pytest.raises(UsageError, match="unknown GLUE task 'squad'.*cola, sst2, mrpc, stsb, qqp, mnli, qnli"):
        get_task("squad")
    with pytest.raises(UsageError, match="--split dev: task ax has the splits test"):
        get_task("ax").eval_splits("dev")


# --- reading the official layout ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ALL_TASKS)
def test_every_split_reads_with_the_labels_the_rule_gives(glue_dir, name):
    task = get_task(name)
    for split in task.splits:
        examples = read_split(name, split, glue_dir)
        assert len(examples) == {"train": 40, "dev": 20, "test": 10}[split.split("_")[0]]
        assert (examples.text_b is not None) == task.is_pair
        if split.startswith("test"):
            assert examples.labels is None
            assert examples.ids == [str(i) for i in range(10)]
            continue
        texts_b = examples.text_b or [None] * len(examples)
        for a, b, label in zip(examples.text_a, texts_b, examples.labels, strict=True):
            expected = rule_label(name, a, b)
            if task.is_regression:
                assert abs(label - expected) <= 0.3 + 1e-9
            else:
                assert task.label_names[label] == expected


def test_cola_train_has_no_header_so_its_first_line_is_an_example(glue_dir):
    first = (glue_dir / "CoLA" / "train.tsv").read_text(encoding="utf-8").splitlines()[0].split("\t")
    examples = read_split("cola", "train", glue_dir)
    assert examples.text_a[0] == first[3] and examples.labels[0] == int(first[1])


def test_quotes_are_kept_verbatim_and_mrpc_byte_order_mark_is_skipped(glue_dir):
    raw = (glue_dir / "MRPC" / "train.tsv").read_text(encoding="utf-8")
    assert raw.startswith("\ufeffQuality")
    examples = read_split("mrpc", "train", glue_dir)
    rows = [line.split("\t") for line in raw.splitlines()[1:]]
    assert examples.text_a == [r[3] for r in rows] and examples.text_b == [r[4] for r in rows]
    assert any(text.count('"') % 2 for text in examples.text_a + examples.text_b)  # unbalanced quotes survive


def test_only_newline_ends_a_line(own_glue):
    path = own_glue / "RTE" / "dev.tsv"
    path.write_bytes("index\tsentence1\tsentence2\tlabel\r\n0\tone\u2028two\x85three\tx\rcold\tentailment\r\n"
                     .encode("utf-8"))
    examples = read_split("rte", "dev", own_glue)
    assert examples.text_a == ["one\u2028two\x85three"] and examples.text_b == ["x\rcold"]


def test_a_glue_file_with_lone_carriage_returns_says_so(own_glue):
    """Only \\n ends a line of a GLUE file, so one with old-Mac line ends is one line: its header echoed the raw
    \\r of every row (`no column 'label' (found: sentence, label\\rhello world, ...)`) and did not say why."""
    path = own_glue / "SST-2" / "dev.tsv"
    path.write_bytes(b"sentence\tlabel\rhello world\t1\rbad film\t0\r")
    with pytest.raises(UsageError, match=rf"^{re.escape(str(path))}:1: the header has no column 'label'; the file "
                                         r"ends its lines with \\r alone: convert them to \\n") as refusal:
        read_split("sst2", "dev", own_glue)
    assert "\r" not in str(refusal.value) and "hello" not in str(refusal.value)


def test_a_headerless_cola_file_with_lone_carriage_returns_says_so(own_glue):
    """CoLA's train and dev files have no header, so old-Mac line ends got only the field count of the one line
    they make (`expected 4 tab-separated fields, found 10`); the other tasks' header says why."""
    path = own_glue / "CoLA" / "dev.tsv"
    path.write_bytes(b"gj04\t1\t\tthe cat sat .\rgj04\t0\t*\tcat the sat .\rgj04\t1\t\ta dog ran .\r")
    with pytest.raises(UsageError, match=rf"^{re.escape(str(path))}:1: expected 4 tab-separated fields, found 10; "
                                         r"the file ends its lines with \\r alone: convert them to \\n \(only "
                                         r"\\n ends a line of a GLUE file\)$") as refusal:
        read_split("cola", "dev", own_glue)
    assert "\r" not in str(refusal.value)
    # a \r inside a text of a row that is wrong for another reason (an extra field) is no such file
    path.write_bytes(b"gj04\t1\t\tthe cat\rsat\textra\ngj04\t0\t*\tcat the sat .\n")
    with pytest.raises(UsageError, match=rf"^{re.escape(str(path))}:1: expected 4 tab-separated fields, found 5$"):
        read_split("cola", "dev", own_glue)
    path.write_bytes(b"gj04\t1\t\tthe cat sat .\r\rgj04\t0\t*\tcat the sat .\r")  # a blank line is no row
    with pytest.raises(UsageError, match=r"found 7; the file ends its lines with \\r alone"):
        read_split("cola", "dev", own_glue)
    # the line named is the first wrong one: the hint is about its fields, not a later wrong row's
    path.write_bytes(b"gj04\t1\t\tthe cat sat .\rgj04\t0\t*\tcat the sat .\ngj04\t1\t\ta dog\tran .\n")
    with pytest.raises(UsageError, match=rf"^{re.escape(str(path))}:1: expected 4 tab-separated fields, found 7; the "
                                         r"file ends its lines with \\r alone"):
        read_split("cola", "dev", own_glue)


@pytest.mark.parametrize(("task", "file", "header", "rows"), [
    ("sst2", "SST-2/dev.tsv", "sentence\tlabel", ["hello world\t1", "bad film\t0", "fine\t1"]),
    ("rte", "RTE/dev.tsv", "index\tsentence1\tsentence2\tlabel", ["0\ta\tb\tentailment", "1\tc\td\tnot_entailment"]),
    ("stsb", "STS-B/dev.tsv", "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore",
     ["0\tg\tf\ty\to\ts\ts\ta\tb\t1.0", "1\tg\tf\ty\to\ts\ts\tc\td\t2.0"]),
])
@pytest.mark.parametrize("header_end", ["\n", "\r\n"])
def test_lone_carriage_returns_after_a_whole_header_line_say_so(own_glue, task, file, header, rows, header_end):
    """A header ended by \n over rows ended by a lone \r (an editor's append to the file) read the rows as one,
    its label running into the next row's text: `label '1\\rbad film' is not one of 0, 1`, without the hint a
    header of lone-\r line ends or CoLA's rows get."""
    path = own_glue / file
    path.write_bytes((header + header_end + "\r".join(rows) + "\r").encode("utf-8"))
    with pytest.raises(UsageError, match=rf"^{re.escape(str(path))}:2: (label|score) .*; the file ends its lines "
                                         r"with \\r alone: convert them to \\n \(only \\n ends a line of a GLUE "
                                         r"file\)$"):
        read_split(task, "dev", own_glue)
    # a bad label in a row of the right width whose text holds a \r is no such file
    path.write_bytes((header + header_end + rows[0].rsplit("\t", 1)[0].replace("\t", "\rx\t") + "\tbad\n").encode())
    with pytest.raises(UsageError, match=r"(label|score) 'bad' .*\)$"):
        read_split(task, "dev", own_glue)


@pytest.mark.parametrize(("task", "split", "file", "line", "match"), [
    ("rte", "dev", "RTE/dev.tsv", "0\tjust one text\tentailment",
     r"RTE/dev.tsv:3: expected 4 tab-separated fields, found 3"),
    ("cola", "train", "CoLA/train.tsv", "gj04\t1\t\ttext\textra",
     r"CoLA/train.tsv:2: expected 4 tab-separated fields, found 5"),
    ("mnli", "dev_matched", "MNLI/dev_matched.tsv", "\t".join(["0"] * 15 + ["maybe"]),
     r"MNLI/dev_matched.tsv:3: label 'maybe' is not one of entailment, neutral, contradiction"),
    ("qqp", "train", "QQP/train.tsv", "7\t1\t2\ta\tb\t2", r"QQP/train.tsv:3: label '2' is not one of 0, 1"),
    ("stsb", "dev", "STS-B/dev.tsv", "\t".join(["0"] * 9 + ["high"]),
     r"STS-B/dev.tsv:3: score 'high' is not a finite number"),
    ("stsb", "dev", "STS-B/dev.tsv", "\t".join(["0"] * 9 + ["inf"]),
     r"STS-B/dev.tsv:3: score 'inf' is not a finite number"),
])
def test_bad_rows_name_the_file_and_line(own_glue, task, split, file, line, match):
    path = own_glue / file
    lines = path.read_text(encoding="utf-8").splitlines()
    lines.insert(2 if lines[0].startswith(("index", "id\t", "sentence", "\ufeff")) else 1, line)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(UsageError, match=match):
        read_split(task, split, own_glue)


@pytest.mark.parametrize(("short", "refused"), [(1, False), (2, True)])
def test_up_to_one_percent_of_rows_may_have_the_wrong_field_count(tmp_path, short, refused):
    """1 short row in 100 is a quirk, skipped with a warning; 2 in 100 are more than 1%: not a GLUE file."""
    (tmp_path / "RTE").mkdir()
    rows = [f"{i}\ta {i}\tb {i}\tentailment" for i in range(100 - short)] + ["99\tjust one text"] * short
    (tmp_path / "RTE" / "dev.tsv").write_text("index\tsentence1\tsentence2\tlabel\n" + "\n".join(rows) + "\n")
    if refused:
        with pytest.raises(UsageError, match=r"RTE/dev.tsv:100: expected 4 tab-separated fields, found 2"):
            read_split("rte", "dev", tmp_path)
    else:
        assert len(read_split("rte", "dev", tmp_path)) == 99


def test_a_row_missing_only_a_column_bertctl_does_not_read_is_read(tmp_path):
    """Only a missing field bertctl reads skips a row: one lacking an extra trailing column is an example."""
    (tmp_path / "RTE").mkdir()
    rows = [f"{i}\ta {i}\tb {i}\tentailment\tx" for i in range(99)] + ["99\ta 99\tb 99\tnot_entailment"]
    (tmp_path / "RTE" / "dev.tsv").write_text("index\tsentence1\tsentence2\tlabel\textra\n" + "\n".join(rows) + "\n")
    dev = read_split("rte", "dev", tmp_path)
    assert (len(dev), dev.ids[-1], dev.text_b[-1], dev.labels[-1]) == (100, "99", "b 99", 1)


def test_missing_folder_file_or_column_is_a_usage_error(own_glue):
    (own_glue / "MNLI" / "dev_mismatched.tsv").unlink()
    with pytest.raises(UsageError, match=r"MNLI/dev_mismatched.tsv: missing; mnli dev_mismatched is read from"):
        read_split("mnli", "dev_mismatched", own_glue)
    (own_glue / "other").mkdir()
    with pytest.raises(UsageError, match=r"no WNLI/ folder for wnli"):
        read_split("wnli", "train", own_glue / "other")
    with pytest.raises(UsageError, match=r"CoLA holds train.tsv itself, .*; give the GLUE folder that holds WNLI/$"):
        read_split("wnli", "train", own_glue / "CoLA")  # a task's own folder, run_classifier.py's --data_dir
    with pytest.raises(UsageError, match=rf"that holds CoLA/ \(--data {re.escape(str(own_glue))}\)$"):
        read_split("cola", "train", own_glue / "CoLA")
    qnli = own_glue / "QNLI" / "dev.tsv"
    qnli.write_text(qnli.read_text(encoding="utf-8").replace("index\t", "idx\t", 1), encoding="utf-8")
    with pytest.raises(UsageError, match=r"QNLI/dev.tsv:1: the header has no column 'index' \(found: idx,"):
        read_split("qnli", "dev", own_glue)


@pytest.mark.parametrize("data", ["", "  "])
def test_an_empty_data_is_refused_not_read_as_the_working_folder(data, tmp_path, monkeypatch):
    """`evaluate glue` and `predict glue --data ""` (an unset shell variable) read the working folder, `--data .`,
    and said it had no SST-2/ folder; `finetune glue` and the other tasks' --data refuse it naming the flag."""
    from bertctl.data.glue import task_folders

    monkeypatch.chdir(tmp_path)
    for read in (lambda: read_split("sst2", "dev", data), lambda: task_folders(get_task("sst2"), data)):
        with pytest.raises(UsageError, match=f"^--data: give a file or folder name, got {data!r}$"):
            read()


def test_a_split_file_that_is_a_folder_is_called_a_folder_not_missing(own_glue):
    train = own_glue / "SST-2" / "train.tsv"
    train.unlink()
    train.mkdir()
    with pytest.raises(UsageError, match=r"SST-2/train.tsv: is a folder, not a file; sst2 train is read from the"):
        read_split("sst2", "train", own_glue)
    from bertctl.finetune import _check_layout

    with pytest.raises(UsageError, match=r"needs every task; missing SST-2/train.tsv \(a folder, not a file\)$"):
        _check_layout([get_task("sst2")], str(own_glue))


def test_empty_or_undecodable_files_are_usage_errors(own_glue):
    path = own_glue / "SST-2" / "dev.tsv"
    path.write_text("sentence\tlabel\n\n", encoding="utf-8")
    with pytest.raises(UsageError, match=r"SST-2/dev.tsv: no examples"):
        read_split("sst2", "dev", own_glue)
    path.write_text("", encoding="utf-8")
    with pytest.raises(UsageError, match=r"SST-2/dev.tsv: empty file"):
        read_split("sst2", "dev", own_glue)
    path.write_bytes(b"sentence\tlabel\nok\t1\n\xff\xfe bad\t0\n")
    with pytest.raises(UsageError, match=r"SST-2/dev.tsv:3: not UTF-8"):
        read_split("sst2", "dev", own_glue)


def test_data_that_is_neither_a_folder_nor_a_hub_id(tmp_path, monkeypatch):
    with pytest.raises(UsageError, match="no such folder"):
        read_split("rte", "dev", tmp_path / "nowhere")
    calls = _stub_hub(monkeypatch, ["entailment", "not_entailment"], [0, 1, 0])
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    with pytest.raises(UsageError, match="^--data data/glue: no such folder"):  # in data/, not the hub's data/glue
        read_split("rte", "dev", "data/glue")
    assert calls == []
    (tmp_path / "file.tsv").write_text("x\n")
    with pytest.raises(UsageError, match="is a file"):
        read_split("rte", "dev", tmp_path / "file.tsv")


# --- the hub copy (datasets.load_dataset stubbed: tests stay offline) --------------------------------------

def _stub_hub(monkeypatch, names, labels, columns=("premise", "hypothesis")):
    import datasets

    calls = []

    def load_dataset(name, config, split):
        calls.append((name, config, split))
        if name == "broken/glue":
            raise ConnectionError("offline\nmore detail")
        data = {columns[0]: ["p0", "p1", "p2"], columns[1]: ["h0", "h1", "h2"], "label": labels, "idx": [5, 6, 7]}
        label = datasets.ClassLabel(names=list(names)) if names else datasets.Value("int64")
        features = datasets.Features({columns[0]: datasets.Value("string"), columns[1]: datasets.Value("string"),
                                      "label": label, "idx": datasets.Value("int32")})
        return datasets.Dataset.from_dict(data, features=features)

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return calls


def test_hub_labels_map_onto_the_same_label_names(monkeypatch):
    calls = _stub_hub(monkeypatch, ["entailment", "neutral", "contradiction"], [2, 0, 1])
    examples = read_split("mnli", "dev_mismatched", "nyu-mll/glue")
    assert calls == [("nyu-mll/glue", "mnli", "validation_mismatched")]
    assert [get_task("mnli").label_names[i] for i in examples.labels] == ["contradiction", "entailment", "neutral"]
    assert (examples.text_a, examples.text_b, examples.ids) == (["p0", "p1", "p2"], ["h0", "h1", "h2"],
                                                                ["5", "6", "7"])
    test = read_split("mnli", "test_matched", "nyu-mll/glue")
    assert test.labels is None and calls[-1][2] == "test_matched"


def test_hub_labels_in_another_order_map_by_name_and_unknown_names_or_a_failed_load_are_errors(monkeypatch):
    _stub_hub(monkeypatch, ["contradiction", "entailment", "neutral"], [0, 1, 2])
    examples = read_split("mnli", "train", "nyu-mll/glue")
    assert [get_task("mnli").label_names[i] for i in examples.labels] == ["contradiction", "entailment", "neutral"]
    _stub_hub(monkeypatch, ["entailment", "contradiction", "unsure"], [0, 1, 2])
    with pytest.raises(BertctlError, match="label names entailment, contradiction, unsure are not mnli's"):
        read_split("mnli", "train", "nyu-mll/glue")
    with pytest.raises(UsageError, match=r"^--data broken/glue: not a local folder, and loading broken/glue "
                                         r"\(mnli, train\) from the hub failed \(offline\); go online once .* or "
                                         r"give a local copy$"):
        read_split("mnli", "train", "broken/glue")
    _stub_hub(monkeypatch, (), [0, 3, 1])  # no ClassLabel: class indices; 3 is one past mnli's; rows count from 1
    with pytest.raises(UsageError, match=r"\(mnli, train\) row 2: label 3 is not a class index 0..2$"):
        read_split("mnli", "train", "nyu-mll/glue")
    _stub_hub(monkeypatch, (), [1, None, 2], columns=("sentence1", "sentence2"))  # a score the copy lacks
    with pytest.raises(UsageError, match=r"\(stsb, train\) row 2: score '' is not a finite number"):
        read_split("stsb", "train", "nyu-mll/glue")


# --- the user's own tables ---------------------------------------------------------------------------------

def _write_formats(folder: Path, rows: list[dict]) -> dict[str, Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    paths = {s: folder / f"data{s}" for s in (".csv", ".tsv", ".jsonl", ".parquet")}
    with open(paths[".csv"], "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    tsv = ["\t".join(rows[0])] + ["\t".join(str(v) for v in r.values()) for r in rows]
    paths[".tsv"].write_text("\n".join(tsv) + "\n", encoding="utf-8")
    paths[".jsonl"].write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    pq.write_table(pa.Table.from_pylist(rows), paths[".parquet"])
    paths["saved"] = folder / "saved"
    datasets.Dataset.from_list(rows).save_to_disk(str(paths["saved"]))
    return paths


def test_every_format_gives_the_same_examples(tmp_path):
    rows = [{"a": "first, with comma", "b": 'say "hi"', "y": 10}, {"a": "second", "b": "x", "y": 2},
            {"a": "third", "b": "y", "y": 2}]
    results = {}
    for suffix, path in _write_formats(tmp_path, rows).items():
        task = load_labelled_data(path, path, ["a", "b"], "y")
        results[suffix] = (task.label_names, task.train.text_a, task.train.text_b, task.train.labels)
        assert task.metrics == ("accuracy", "f1", "matthews_correlation") and task.validation is not None
    expected = (("2", "10"), ["first, with comma", "second", "third"], ['say "hi"', "x", "y"], [1, 0, 0])
    assert all(result == expected for result in results.values()) and len(results) == 5, results


def test_label_names_fix_the_class_order_and_may_name_a_class_training_lacks(tmp_path):
    train = tmp_path / "train.csv"
    train.write_text("text,y\na,pos\nb,neg\n", encoding="utf-8")
    task = load_labelled_data(train, None, ["text"], "y", label_names=["pos", "neg", "meh"])
    assert (task.label_names, task.train.labels) == (("pos", "neg", "meh"), [0, 1])


def test_training_labels_read_a_chunk_at_a_time_are_still_the_whole_files(tmp_path):
    """Fine-tuning reads its training file a chunk at a time: a score in a later chunk still makes every label a
    score, a class first seen there is still a class, and a bad row anywhere in the file is named before an empty
    label ahead of it, as when the file was read whole."""
    from bertctl.data.tabular import LabelledFile

    def labelled(content: str) -> tuple[tuple[str, ...], list]:
        train.write_text(content, encoding="utf-8")
        file = LabelledFile.checked(train, ["text"], "y", "--train")
        assert [len(part.text_a) for part in file.parts(2)] == [2, content.count("\n") - 3]
        task = file.task()
        return task.label_names, file.labels_for(task.label_names)

    train = tmp_path / "train.csv"
    assert labelled("text,y\na,1\nb,2\nc,2.5\n") == ((), [1.0, 2.0, 2.5])
    assert labelled("text,y\na,yes\nb,yes\nc,no\n") == (("no", "yes"), [1, 1, 0])
    with pytest.raises(UsageError, match=r"train.csv:4: expected 2 comma-separated fields, found 3"):
        labelled("text,y\na,\nb,yes\nc,no,x\n")
    with pytest.raises(UsageError, match=r"train.csv:4: label column 'y' is empty"):
        labelled("text,y\na,yes\nb,no\nc,\nd,\n")


def test_rows_without_an_id_column_are_numbered_from_0_across_every_chunk(tmp_path):
    """A file read a chunk at a time names its rows by their position in the whole file, in every chunk."""
    from bertctl.data.tabular import example_chunks

    path = tmp_path / "rows.csv"
    path.write_text("text\n" + "".join(f"t{i}\n" for i in range(5)), encoding="utf-8")
    chunks = [(examples.ids, name) for examples, name in example_chunks(path, ["text"], size=2)]
    assert chunks == [(["0", "1"], "index"), (["2", "3"], "index"), (["4"], "index")]


def test_a_json_whole_float_label_names_the_class_as_a_csv_spells_it(tmp_path):
    """JSON's 1.0 (a label column a gap made floats) is the class `1`, as the csv's and the JSON integer's."""
    path = tmp_path / "floats.jsonl"
    path.write_text('{"text": "a", "y": 1.0}\n{"text": "b", "y": 0.0}\n{"text": "c", "y": 1}\n', encoding="utf-8")
    task = load_labelled_data(path, None, ["text"], "y")
    assert task.label_names == ("0", "1") and task.train.labels == [1, 0, 1]


def test_a_saved_dataset_dict_is_refused_naming_the_split_folder_to_give(tmp_path):
    split = datasets.Dataset.from_list([{"text": "a", "label": 0}, {"text": "b", "label": 1}])
    datasets.DatasetDict({"train": split, "test": split}).save_to_disk(str(tmp_path / "dict"))
    with pytest.raises(UsageError, match=re.escape(f"--train {tmp_path / 'dict'} is a DatasetDict folder of the "
                                                   f"splits train, test; give one split's folder, such as "
                                                   f"{tmp_path / 'dict' / 'train'}")):
        load_labelled_data(tmp_path / "dict", None, ["text"], "label")
    with pytest.raises(UsageError, match=r"no column 'sentence' \(found: text, label\)"):
        load_labelled_data(tmp_path / "dict" / "train", None, ["sentence"], "label")
    assert load_labelled_data(tmp_path / "dict" / "train", None, ["text"], "label").train.labels == [0, 1]


def test_csv_quoting_spans_lines_and_errors_name_the_starting_line(tmp_path):
    train = tmp_path / "train.csv"
    train.write_text('text,label\n"two\nlines",pos\nplain,neg\n', encoding="utf-8")
    dev = tmp_path / "dev.csv"
    dev.write_text('text,label\n"multi\nline",pos\nodd,meh\n', encoding="utf-8")
    with pytest.raises(UsageError, match=r"dev.csv:4: label 'meh' is not one of neg, pos"):
        load_labelled_data(train, dev, ["text"], "label")
    task = load_labelled_data(train, None, ["text"], "label")
    assert task.train.text_a == ["two\nlines", "plain"] and task.train.labels == [1, 0]
    assert task.train.text_b is None and task.validation is None
    dev.write_text("text,label\nok,pos\ntoo,many,fields\n", encoding="utf-8")
    with pytest.raises(UsageError, match=r"dev.csv:3: expected 2 comma-separated fields, found 3"):
        load_labelled_data(train, dev, ["text"], "label")


def test_own_csv_reads_a_cell_past_128_kib_as_pandas_does(tmp_path):
    """A cell over the csv module's default field_size_limit (131072 characters: a long document) was refused
    (`malformed csv: field larger than field limit`); pandas and `datasets` read it. `"abc"def` stays `abcdef`."""
    long = "word " * 40_000
    train = tmp_path / "train.csv"
    train.write_text(f'text,label\n"{long}",pos\n{"x" * 2**21},neg\n"abc"def,neg\n', encoding="utf-8")
    task = load_labelled_data(train, None, ["text"], "label")  # the limit is raised to the most it holds, not 1 MiB
    assert task.train.text_a == [long, "x" * 2**21, "abcdef"] and task.train.labels == [1, 0, 0]


@pytest.mark.parametrize("tail", ['"b,neg\nc,pos\n', 'b,"neg\n', 'b,"neg', '"b"",neg\n'])
def test_a_quote_left_open_at_the_end_of_a_csv_names_the_line_it_opens_on(tmp_path, tail):
    """A quoted field that the file ends inside took in every line after it (or was read as if closed), where
    pandas refuses it (`EOF inside string starting at row 2`): one line naming where the field starts."""
    path = tmp_path / "dev.csv"
    path.write_text("text,label\na,pos\n" + tail, encoding="utf-8")
    with pytest.raises(UsageError, match=rf"^{re.escape(str(path))}:3: malformed csv: a quoted field opens on this "
                                         "line and the file ends inside it"):
        read_examples(path, ["text"], "label", ["neg", "pos"])


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"])
def test_a_quote_left_open_after_a_cell_of_two_lines_names_the_line_it_opens_on(tmp_path, end):
    """The row starts on line 3; its quoted first cell holds a line end (a lone \\r is one there too, as the csv
    module counts lines), so the quote left open is on line 4."""
    path = tmp_path / "dev.csv"
    path.write_bytes(f'text,label\na,pos\n"b{end}b","neg\nc,pos\n'.encode())
    with pytest.raises(UsageError, match=rf"^{re.escape(str(path))}:4: malformed csv: a quoted field opens on this "
                                         "line and the file ends inside it"):
        read_examples(path, ["text"], "label", ["neg", "pos"])


# Only an empty line is no row, as csv.DictReader, pandas and `datasets` read csv (`""`, `,` and tabs are rows
# there too; Python's csv module also keeps a line of spaces, which it writes for a text of spaces). In .jsonl
# a blank line is no row (nor is it for `datasets` or pandas); `{"text": ""}` is one.
ROWS_OF_EMPTY_FIELDS = {
    "csv": ('text,other\na,x\n\n,\n"",""\n   ,\nb,y\n', ["a", "", "", "   ", "b"]),
    "one.csv": ('text\na\n\n""\n   \nb\n', ["a", "", "   ", "b"]),
    "tsv": ("text\tother\na\tx\n\n\t\n   \t \nb\ty\n", ["a", "", "   ", "b"]),
    "jsonl": ('{"text": "a"}\n\n{"text": ""}\n  \n{"text": "b"}\n', ["a", "", "b"]),
}


@pytest.mark.parametrize("kind", list(ROWS_OF_EMPTY_FIELDS))
def test_a_row_of_empty_fields_is_a_row_and_an_empty_line_is_not(tmp_path, kind):
    content, texts = ROWS_OF_EMPTY_FIELDS[kind]
    path = tmp_path / f"new.{kind.split('.')[-1]}"
    path.write_text(content, encoding="utf-8")
    examples, id_name = read_examples(path, ["text"])
    assert examples.text_a == texts and examples.ids == [str(i) for i in range(len(texts))] and id_name == "index"


@pytest.mark.parametrize(("kind", "content"), [
    ("csv", "idx,text,id\n0,a,q7\n1,b,q9\n"),
    ("jsonl", '{"idx": 0, "text": "a", "id": "q7"}\n{"idx": 1, "text": "b", "id": "q9"}\n'),
])
def test_a_file_with_both_id_and_idx_columns_is_named_by_its_id_column(tmp_path, kind, content):
    path = tmp_path / f"both.{kind}"
    path.write_text(content, encoding="utf-8")
    examples, id_name = read_examples(path, ["text"])
    assert (examples.ids, id_name) == (["q7", "q9"], "id")


@pytest.mark.parametrize(("kind", "content", "error"), [
    ("csv", "text,y\na,no\n,yes\n\nb,no\n,\n", "6: label column 'y' is empty"),
    ("csv", 'text,y\na,no\n,yes\n\nb,no\n""\n', "6: expected 2 comma-separated fields, found 1"),
    ("tsv", "text\ty\na\tno\n\tyes\n\nb\tno\n\t\n", "6: label column 'y' is empty"),
    ("tsv", "text\ty\na\tno\n\tyes\n\nb\tno\n   \n", "6: expected 2 tab-separated fields, found 1"),
    ("jsonl", '{"text": "a", "y": "no"}\n{"text": "", "y": "yes"}\n\n{"text": "b", "y": "no"}\n{"text": "", "y": ""}\n',
     "5: label column 'y' is empty"),
    ("jsonl", '{"text": "a", "y": "no"}\n{"text": "", "y": "yes"}\n\n{"text": "b", "y": "no"}\n{"text": ""}\n',
     "5: no column 'y'"),
])
def test_a_labelled_empty_text_is_an_example_and_an_empty_label_is_refused(tmp_path, kind, content, error):
    train = tmp_path / f"train.{kind}"
    good, bad = content.rsplit("\n", 2)[0] + "\n", content
    train.write_text(good, encoding="utf-8")
    task = load_labelled_data(train, None, ["text"], "y")
    assert task.train.text_a == ["a", "", "b"] and task.train.labels == [0, 1, 0]
    dev = tmp_path / f"dev.{kind}"
    dev.write_text(bad, encoding="utf-8")
    for files in [(dev, None), (train, dev)]:  # the training file, and the validation file
        with pytest.raises(UsageError, match=f"^{dev}:{error}"):
            load_labelled_data(*files, ["text"], "y")
    with pytest.raises(UsageError, match=f"^{dev}:{error}"):
        read_examples(dev, ["text"], "y", ["no", "yes"])  # evaluate classify


def test_a_json_nan_text_is_a_missing_text_not_the_word_nan(tmp_path):
    """pandas and `datasets` read a JSON NaN as a missing value (a parquet NaN is null), so it is refused as
    None is, not trained on as the text "nan"; a number there is still its text."""
    train = tmp_path / "train.jsonl"
    train.write_text('{"text": 1.5, "y": "a"}\n{"text": "b", "y": "b"}\n{"text": NaN, "y": "a"}\n', encoding="utf-8")
    with pytest.raises(UsageError, match=r"train.jsonl:3: text column 'text' is empty"):
        load_labelled_data(train, None, ["text"], "y")
    with pytest.raises(UsageError, match=r"train.jsonl:3: text column 'text' is empty"):
        read_examples(train, ["text"])  # predict classify
    named = tmp_path / "named.jsonl"
    named.write_text('{"id": "q1", "text": "a"}\n{"id": NaN, "text": "b"}\n', encoding="utf-8")
    with pytest.raises(UsageError, match=r"named.jsonl:2: id column 'id' is empty"):
        read_examples(named, ["text"])  # an id NaN was the id "nan"


def test_regression_is_detected_or_forced_and_checked(tmp_path):
    train = tmp_path / "train.jsonl"
    train.write_text('{"t": "a", "s": 0.5}\n{"t": "b", "s": 3}\n', encoding="utf-8")
    task = load_labelled_data(train, None, ["t"], "s")
    assert task.is_regression and task.train.labels == [0.5, 3.0] and task.main_metric == "spearman"
    forced = load_labelled_data(train, None, ["t"], "s", problem="classification")
    assert forced.label_names == ("0.5", "3")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"t": "a", "s": 0.5}\n\n{"t": "b", "s": "high"}\n', encoding="utf-8")
    with pytest.raises(UsageError, match=r"bad.jsonl:3: label 'high' is not a finite number"):
        load_labelled_data(bad, None, ["t"], "s", problem="regression")
    flags = tmp_path / "flags.jsonl"
    flags.write_text('{"t": "a", "s": true}\n{"t": "b", "s": false}\n{"t": "c", "s": 1, "u": 2}\n{"t": "d", "s": 2}\n',
                     encoding="utf-8")
    assert load_labelled_data(flags, None, ["t"], "s").label_names == ("1", "2", "false", "true")


@pytest.mark.parametrize("name", ["train.csv.gz", "train.tsv.bz2", "train.jsonl.xz", "train.csv.zip"])
def test_a_compressed_table_is_refused_saying_to_decompress_it(tmp_path, name):
    """`finetune classify --train x.csv.gz` said `unsupported file type .gz; use one of .csv, ...`, as if .csv were
    not its type; choice, ner, squad and GLUE say that it is compressed and to decompress it."""
    path = tmp_path / name
    path.write_bytes(gzip.compress(b"text,label\nx,1\ny,0\n"))
    with pytest.raises(UsageError, match=rf"^--train {re.escape(str(path))} is compressed; decompress it first "
                                         r"\(classify reads plain UTF-8 text\)$"):
        load_labelled_data(path, None, ["text"], "label")
    with pytest.raises(UsageError, match=rf"^--data {re.escape(str(path))} is compressed; decompress it first"):
        read_examples(path, ["text"], None)


def test_table_mistakes_are_one_line_usage_errors(tmp_path):
    good = tmp_path / "good.tsv"
    good.write_text("text\tlabel\nx\t1\ny\t0\n", encoding="utf-8")
    (tmp_path / "data.xlsx").write_bytes(b"PK")
    cases = [
        ((good, None, ["text"], "y"), r"good.tsv:1: no column 'y' \(found: text, label\)"),
        ((good, None, ["a", "b", "c"], "label"), "--text-columns: give one or two column names"),
        ((good, None, ["text"], "label", "ordinal"), "--problem ordinal: choose one of auto, classification"),
        ((tmp_path / "data.xlsx", None, ["text"], "label"), r"unsupported file type .xlsx; use one of .csv, .tsv"),
        ((tmp_path / "none.xlsx", None, ["text"], "label"), r"^--train \S*none.xlsx: no such file; give a .csv, "
                                                           r"\.tsv, \.jsonl or \.parquet file, or a Dataset"),
    ]
    for args, match in cases:
        with pytest.raises(UsageError, match=match):
            load_labelled_data(*args)
    one_class = tmp_path / "one.tsv"
    one_class.write_text("text\tlabel\nx\t1\ny\t1\n", encoding="utf-8")
    with pytest.raises(UsageError, match="one.tsv: label column 'label' has fewer than two classes"):
        load_labelled_data(one_class, None, ["text"], "label")
    with pytest.raises(UsageError, match=r"^--label-names has fewer than two classes \(no\)"):
        load_labelled_data(good, None, ["text"], "label", "auto", ["no"])
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"text": "x", "label": 1}\n{"text": "y", \n', encoding="utf-8")
    with pytest.raises(UsageError, match=r"broken.jsonl:2: not valid JSON"):
        load_labelled_data(broken, None, ["text"], "label")


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl"])
def test_an_own_table_ends_lines_at_a_lone_carriage_return_as_pandas_does(tmp_path, suffix):
    """A .tsv or .jsonl with old-Mac line ends (Excel for Mac's text exports) was one line: the .tsv header took in
    every row (`no column 'label' (found: text, labelhello, ...)`), the .jsonl was `Extra data`; its .csv, pandas and
    `datasets` end a line at a lone \\r. GLUE's own files keep one inside a text (test_only_newline_ends_a_line)."""
    rows = {".csv": "text,label\rhello world,pos\r\rbad day,neg\r",
            ".tsv": "text\tlabel\rhello world\tpos\r\rbad day\tneg\r",
            ".jsonl": '{"text": "hello world", "label": "pos"}\r\r{"text": "bad day", "label": "neg"}\r'}
    path = tmp_path / f"mac{suffix}"
    path.write_bytes(b"\xef\xbb\xbf" + rows[suffix].encode())
    task = load_labelled_data(path, None, ["text"], "label")
    assert task.train.text_a == ["hello world", "bad day"] and task.train.labels == [1, 0]
    path.write_bytes(rows[suffix].replace("bad day", "caf\xe9").encode("latin-1"))
    line = 3 if suffix == ".jsonl" else 4  # a lone \\r counts as a line end there too
    with pytest.raises(UsageError, match=rf"^{re.escape(str(path))}:{line}: not UTF-8 text \(byte \d+\); convert"):
        load_labelled_data(path, None, ["text"], "label")


@pytest.mark.parametrize("suffix", [".csv", ".tsv"])
def test_an_own_tables_header_after_empty_lines_is_named_by_its_line(tmp_path, suffix):
    """Empty lines are no rows, before the header too: the header is the first line that is not empty, and a
    column it lacks is named at that line."""
    path = tmp_path / f"late{suffix}"
    path.write_text("\n\n" + "text,y\na,pos\n".replace(",", "," if suffix == ".csv" else "\t"), encoding="utf-8")
    with pytest.raises(UsageError, match=rf"^{re.escape(str(path))}:3: no column 'label' \(found: text, y\)$"):
        load_labelled_data(path, None, ["text"], "label")


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl"])
def test_a_table_that_is_not_utf8_is_refused_naming_its_line_and_byte(tmp_path, suffix):
    """A Latin-1 .csv or .jsonl was `FILE: not UTF-8 text`, naming no line (a .tsv named its line)."""
    rows = {".csv": 'text,label\r\nok,pos\r\n"two\nlines",neg\r\ncaf\xe9,neg\r\n',
            ".tsv": "text\tlabel\r\nok\tpos\r\ntwo\tneg\r\ncaf\xe9\tneg\r\n",
            ".jsonl": '{"text": "ok", "label": "pos"}\r\n\r\n{"text": "two", "label": "neg"}\r\n'
                      '{"text": "caf\xe9"}\r\n'}
    path = tmp_path / f"latin1{suffix}"
    path.write_bytes(rows[suffix].encode("latin-1"))
    line, byte = {".csv": (5, 40), ".tsv": (4, 32), ".jsonl": (4, 80)}[suffix]
    with pytest.raises(UsageError, match=rf"^{re.escape(str(path))}:{line}: not UTF-8 text \(byte {byte}\); "
                                         "convert it to UTF-8 first$"):
        read_examples(path, ["text"])


# --- submission files ---------------------------------------------------------------------------------------

def test_submission_files_have_the_servers_exact_format(tmp_path):
    cases = [("cola", "test", [1, 0, 1], "CoLA.tsv", ["1", "0", "1"]),
             ("mnli", "test_matched", [0, 2, 1], "MNLI-m.tsv", ["entailment", "contradiction", "neutral"]),
             ("mnli", "test_mismatched", [1, 1, 0], "MNLI-mm.tsv", ["neutral", "neutral", "entailment"]),
             ("ax", "test", [2, 0, 0], "AX.tsv", ["contradiction", "entailment", "entailment"]),
             ("rte", "test", [1, 0, 0], "RTE.tsv", ["not_entailment", "entailment", "entailment"]),
             ("stsb", "test", [5.7, -0.2, 2.34567], "STS-B.tsv", ["5.000", "0.000", "2.346"])]
    for task, split, predictions, name, written in cases:
        path = write_submission(task, split, ["0", "1", "2"], predictions, tmp_path)
        assert path == tmp_path / name and submission_name(task, split) == name
        expected = "index\tprediction\n" + "".join(f"{i}\t{w}\n" for i, w in enumerate(written))
        assert path.read_bytes() == expected.encode("utf-8")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(c[3] for c in cases)  # no temp files left


def test_every_test_split_round_trips_to_a_submission(glue_dir, tmp_path):
    for task in TASKS.values():
        for split in task.eval_splits("test"):
            examples = read_split(task, split, glue_dir)
            texts_b = examples.text_b or [None] * len(examples)
            gold = [rule_label(task.name, a, b) for a, b in zip(examples.text_a, texts_b, strict=True)]
            predictions = gold if task.is_regression else [task.label_names.index(g) for g in gold]
            path = write_submission(task, split, examples.ids, predictions, tmp_path)
            rows = [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()]
            assert rows[0] == ["index", "prediction"] and [r[0] for r in rows[1:]] == examples.ids
            assert [r[1] for r in rows[1:]] == [f"{g:.3f}" if task.is_regression else g for g in gold]
    assert {p.name for p in tmp_path.iterdir()} == SUBMISSIONS


def test_bad_predictions_write_nothing(tmp_path):
    with pytest.raises(BertctlError, match="class id 3 is outside 0..2"):
        write_submission("mnli", "test_matched", ["0", "1"], [0, 3], tmp_path)
    with pytest.raises(BertctlError, match="MRPC.tsv: 1 predictions for 2 test examples"):
        write_submission("mrpc", "test", ["0", "1"], [1], tmp_path)
    with pytest.raises(BertctlError, match="0.5 is not a class id"):
        write_submission("sst2", "test", ["0"], [0.5], tmp_path)
    with pytest.raises(UsageError, match="sst2 dev: only test splits are submitted"):
        write_submission("sst2", "dev", ["0"], [1], tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_submission_is_written_a_chunk_of_lines_at_a_time_and_a_bad_one_late_writes_nothing(tmp_path,
                                                                                                 monkeypatch):
    """The lines of a whole test set were made before the file was written; now WRITE_CHUNK at a time into the
    temp file, from the array of predictions. A bad prediction in a late chunk still leaves no file behind."""
    import bertctl.submission as submission

    monkeypatch.setattr(submission, "WRITE_CHUNK", 2)
    pieces = []
    write = submission.write_text_atomic
    monkeypatch.setattr(submission, "write_text_atomic",
                        lambda path, text, *overwrite: write(path, (pieces.append(piece) or piece for piece in text),
                                                             *overwrite))
    path = write_submission("rte", "test", ["0", "1", "2", "3", "4"], np.array([1, 0, 0, 1, 1]), tmp_path)
    assert pieces == ["index\tprediction\n", "0\tnot_entailment\n1\tentailment\n",
                      "2\tentailment\n3\tnot_entailment\n", "4\tnot_entailment\n"]
    assert path.read_text() == "".join(pieces)
    with pytest.raises(BertctlError, match="the model's output is nan for an example"):
        write_submission("cola", "test", ["0", "1", "2"], np.array([1.0, 0.0, np.nan]), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["RTE.tsv"]  # no CoLA.tsv, no temp file


def test_a_label_that_is_a_list_or_object_is_refused_and_booleans_are_classes(tmp_path):
    """`{"label": ["x"]}` became the class "['x']"; true/false are the classes "true" and "false", as a csv
    spells them."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "a", "label": "x"}\n{"text": "b", "label": ["x"]}\n', encoding="utf-8")
    with pytest.raises(UsageError, match=r"bad.jsonl:2: label column 'label' holds list \['x'\]; give text or a"):
        load_labelled_data(bad, None, ["text"], "label")
    bad.write_text('{"text": "a", "label": {"k": 1}}\n', encoding="utf-8")
    with pytest.raises(UsageError, match=r"bad.jsonl:1: label column 'label' holds dict"):
        read_examples(bad, ["text"], "label", ["x"])
    flags = tmp_path / "flags.jsonl"
    flags.write_text('{"text": "a", "label": true}\n{"text": "b", "label": false}\n{"text": "c", "label": 1}\n',
                     encoding="utf-8")
    task = load_labelled_data(flags, None, ["text"], "label")
    assert task.label_names == ("1", "false", "true") and task.train.labels == [2, 1, 0]


def test_booleans_spelled_as_pandas_writes_them_name_the_boolean_classes(tmp_path):
    """A model trained on parquet/jsonl booleans (classes false, true) refused the dev set pandas wrote as csv
    (`True`, `False`); and a csv-trained one (False, True) refused JSON booleans."""
    written = tmp_path / "pandas.csv"
    written.write_text("text,label\na,True\nb,False\n", encoding="utf-8")
    assert read_examples(written, ["text"], "label", ["false", "true"])[0].labels == [1, 0]
    flags = tmp_path / "flags.jsonl"
    flags.write_text('{"text": "a", "label": true}\n{"text": "b", "label": false}\n', encoding="utf-8")
    assert read_examples(flags, ["text"], "label", ["False", "True"])[0].labels == [1, 0]
    with pytest.raises(UsageError, match="label 'True' could be any of the classes TRUE, true; spell"):
        read_examples(written, ["text"], "label", ["false", "TRUE", "true"])  # two classes would fit: none is taken


@pytest.mark.parametrize(("name", "content", "error"), [
    ("a.jsonl", '{"text": "fine"}\n{"text": {"a": 1}}\n',
     r"a.jsonl:2: text column 'text' holds dict \{'a': 1\}, not text"),
    ("b.jsonl", '{"text": ["good", "day"]}\n', r"b.jsonl:1: text column 'text' holds list \['good', 'day'\], not text"),
    ("c.csv", "text,text,label\na,b,x\n", r"c.csv:1: the header names column 'text' more than once"),
    ("d.tsv", "text\tlabel\tlabel\na\tx\ty\n", r"d.tsv:1: the header names column 'label' more than once"),
])
def test_text_that_is_not_text_and_a_column_named_twice_are_refused(tmp_path, name, content, error):
    """A JSON object became the text "{'a': 1}"; with `text,text` one of the two columns was used unasked."""
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(UsageError, match=error):
        read_examples(path, ["text"], "label" if "label" in content else None)
    numbers = tmp_path / "numbers.jsonl"
    numbers.write_text('{"text": 12}\n{"text": 0.5}\n', encoding="utf-8")
    assert read_examples(numbers, ["text"])[0].text_a == ["12", "0.5"]


def test_parquet_decimal_labels_and_date_ids_are_read_as_written(tmp_path):
    """Only lists and objects are refused: a decimal label or a date id is a value, as it was before."""
    import datetime
    import decimal

    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    table = pa.table({"text": ["a", "b"], "label": pa.array([decimal.Decimal("0.50"), decimal.Decimal("1.25")]),
                      "id": [datetime.date(2020, 1, 1), datetime.date(2020, 1, 2)]})
    pq.write_table(table, tmp_path / "d.parquet")
    task = load_labelled_data(tmp_path / "d.parquet", None, ["text"], "label", "regression")
    assert task.train.labels == [0.5, 1.25] and task.train.ids == ["2020-01-01", "2020-01-02"]


def test_an_output_may_take_a_task_folder_name_that_holds_no_data(own_glue):
    """`--data . --out rte` beside the official RTE/ is the last run's output, not a hub copy it reads."""
    from bertctl.data.glue import task_folders

    assert task_folders(get_task("rte"), own_glue) == [own_glue / "RTE"]
    (own_glue / "rte").mkdir()
    (own_glue / "rte" / "dataset_dict.json").write_text("{}")
    assert task_folders(get_task("rte"), own_glue) == [own_glue / "rte"]
