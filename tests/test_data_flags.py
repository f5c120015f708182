"""Every data flag of every task command (glue, classify, squad, ner, choice; finetune, evaluate, predict) given a
name that is not there: one line naming the flag, what to give, and for a dataset name of older Hugging Face docs
(`squad`), the hub id it has now, without loading anything."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from bertctl.checkpoint import save_model
from bertctl.cli import app
from bertctl.config import BertConfig
from bertctl.errors import UsageError
from bertctl.hub import LEGACY_DATASETS, legacy_dataset_hint
from bertctl.model import (
    BertForMaskedLM,
    BertForMultipleChoice,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from bertctl.tokenizer import BertTokenizer

GIVE = {
    "glue": "no such folder{hint}; give the GLUE download folder (CoLA/, SST-2/, ...) or a hub dataset id such as "
            "nyu-mll/glue",
    "classify": "no such file; give a .csv, .tsv, .jsonl or .parquet file, or a Dataset.save_to_disk folder",
    "squad": "no such file{hint}; give a SQuAD v1.1/v2.0 JSON file, a hub copy (.parquet, a save_to_disk folder, "
             "to_json lines) or a hub dataset id (rajpurkar/squad or rajpurkar/squad_v2)",
    "ner": "no such file{hint}; give a CoNLL-2003 text file, a .jsonl/.json file, a hub copy (.parquet, a "
           "save_to_disk folder) or a hub dataset id (eriktks/conll2003)",
    "choice": "no such file{hint}; give a SWAG-style .csv, a .jsonl/.json file, a hub copy (.parquet, a save_to_disk "
              "folder) or a hub dataset id (allenai/swag)",
}
# a good training file of each task, for the runs that get as far as --validation
TRAIN = {"classify": ("train.csv", "text,label\na b,yes\nb a,no\n"),
         "squad": ("train.json", '{"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": "a b", "qas": '
                                 '[{"id": "q", "question": "a", "answers": [{"text": "b", "answer_start": 2}]}]}]}]}'),
         "ner": ("train.txt", "a B-PER\nb O\n"),
         "choice": ("train.csv", "sent1,sent2,ending0,ending1,label\na,b,a,b,0\n")}
HEADS = {"glue": BertForSequenceClassification, "classify": BertForSequenceClassification,
         "squad": BertForQuestionAnswering, "ner": BertForTokenClassification, "choice": BertForMultipleChoice}
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]


def _config() -> BertConfig:
    return BertConfig(vocab_size=len(VOCAB), hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=16, max_position_embeddings=512)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """An encoder to fine-tune, and a model with each task's head to evaluate and predict with."""
    torch.manual_seed(0)
    root, tokenizer = tmp_path_factory.mktemp("models"), BertTokenizer.from_vocab(VOCAB)
    found = {"encoder": save_model(BertForMaskedLM(_config()), root / "encoder", tokenizer)}
    for task, head in HEADS.items():
        labels = {"glue": ["0", "1"], "classify": ["no", "yes"], "ner": ["B-PER", "O"]}.get(task)
        found[task] = save_model(head(_config()), root / task, tokenizer, labels=labels)
    return found


def _runs(task: str, name: str, models: dict[str, Path]) -> list[tuple[str, list[str]]]:
    """(flag, arguments) of each command of `task` that reads `name`."""
    first = ["mrpc"] if task == "glue" else []
    columns = ["--text-columns", "text"] if task == "classify" else []
    train = ["--model", str(models["encoder"]), "--out", "run", "--device", "cpu", *columns]
    score = ["--model", str(models[task]), "--device", "cpu", *columns]
    if task == "glue":
        finetune = [("--data", ["--data", name, *train])]
    else:
        finetune = [("--train", ["--train", name, *train]),
                    ("--validation", ["--train", TRAIN[task][0], "--validation", name, *train])]
    return [*[(flag, ["finetune", task, *first, *args]) for flag, args in finetune],
            ("--data", ["evaluate", task, *first, "--data", name, *score]),
            ("--data", ["predict", task, *first, "--data", name, "--out", "predicted", *score])]


@pytest.mark.parametrize("task", list(GIVE))
@pytest.mark.parametrize("name", ["nothere", "squad", "squad_v2:validation", "conll2003", "swag", "glue",
                                  "CoNLL2003"])
def test_a_missing_data_name_is_one_line_naming_the_flag_the_formats_and_a_legacy_names_hub_id(
        models, tmp_path, monkeypatch, task, name):
    monkeypatch.chdir(tmp_path)
    if task in TRAIN:
        (tmp_path / TRAIN[task][0]).write_text(TRAIN[task][1], encoding="utf-8")
    owned = LEGACY_DATASETS.get(name.split(":")[0].lower())
    hint = f" (the hub dataset is {owned})" if owned and owned in GIVE[task] else ""  # the task's own ids only
    for flag, args in _runs(task, name, models):
        shown = CliRunner().invoke(app, args)
        assert shown.exit_code == 2, (args, shown.output)
        assert shown.stderr == f"bertctl: error: {flag} {name}: {GIVE[task].format(hint=hint)}\n", args
        assert not (tmp_path / "run").exists() and not (tmp_path / "predicted").exists()


def test_a_legacy_name_is_never_loaded_and_an_existing_path_of_that_name_gets_no_hint(tmp_path, monkeypatch):
    from hub_copy_fixtures import stub_hub

    from bertctl.data.ner import read_ner

    calls = stub_hub(monkeypatch, {})
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=r"^--train conll2003: no such file \(the hub dataset is eriktks/conll2003\)"):
        read_ner("conll2003", "--train")
    assert calls == []
    (tmp_path / "squad").mkdir()
    squad = ("rajpurkar/squad", "rajpurkar/squad_v2")
    assert legacy_dataset_hint("squad", squad) == "" and legacy_dataset_hint("wikitext", squad) == ""
    assert legacy_dataset_hint("squad_v2", squad) == " (the hub dataset is rajpurkar/squad_v2)"
    assert legacy_dataset_hint("squad_v2", ("eriktks/conll2003",)) == ""


@pytest.mark.parametrize("task", ["glue", "squad", "ner", "choice"])  # the flags that take a hub id
@pytest.mark.parametrize("spelt", ["./{id}", "{id}/", "{home}/{id}", "~/{id}"])
def test_a_missing_path_written_like_one_is_no_hub_id_on_any_data_flag(models, tmp_path, monkeypatch, task, spelt):
    """Typer's Path would turn `./rajpurkar/squad` into `rajpurkar/squad`, a hub id: the flags keep the text."""
    from hub_copy_fixtures import stub_hub

    calls = stub_hub(monkeypatch, {})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    if task in TRAIN:
        (tmp_path / TRAIN[task][0]).write_text(TRAIN[task][1], encoding="utf-8")
    hub_id = {"glue": "nyu-mll/glue", "ner": "eriktks/conll2003", "choice": "allenai/swag"}.get(task, "rajpurkar/squad")
    name = spelt.format(id=hub_id, home=tmp_path)
    for flag, args in _runs(task, name, models):
        shown = CliRunner().invoke(app, args)
        assert shown.exit_code == 2, (args, shown.output)
        said = {f"bertctl: error: {flag} {shown_as}: {GIVE[task].format(hint='')}\n"
                for shown_as in (name, os.path.expanduser(name))}  # a config expands `~`, as no shell did
        assert shown.stderr in said, args
    assert calls == []


def test_a_python_caller_s_str_keeps_its_spelling_and_a_path_still_names_a_hub_id(tmp_path, monkeypatch):
    from hub_copy_fixtures import stub_hub

    from bertctl.config import FinetuneConfig
    from bertctl.data.ner import read_ner

    calls = stub_hub(monkeypatch, {})
    monkeypatch.chdir(tmp_path)
    assert FinetuneConfig(train="./eriktks/conll2003", validation=Path("dev.txt")).train == "./eriktks/conll2003"
    with pytest.raises(UsageError, match=r"^--train \./eriktks/conll2003: no such file; give a CoNLL"):
        read_ner("./eriktks/conll2003", "--train")
    assert calls == []
    with pytest.raises(UsageError, match=r"^--train eriktks/conll2003: not a local file or folder, and loading"):
        read_ner(Path("eriktks/conll2003"), "--train")  # as before: a Path has no `./` to tell
    assert calls == [("eriktks/conll2003", None, "train")]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a_squad_file_read_through_a_pipe_is_read_not_called_missing(tmp_path):
    """`--data <(zcat dev-v1.1.json.gz)` names a pipe that is there: the missing-path check called it "no such
    file" (it asked for a regular file or a folder), where the SQuAD reader read it before."""
    import threading

    from bertctl.data.squad import read_squad

    pipe = tmp_path / "dev.json"
    os.mkfifo(pipe)
    text = ('{"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": "the cat sat", "qas": [{"id": '
            '"q1", "question": "who sat", "answers": [{"text": "the cat", "answer_start": 0}]}]}]}]}')
    writer = threading.Thread(target=pipe.write_text, args=(text,), daemon=True)
    writer.start()
    try:
        squad = read_squad(str(pipe), "score", "--data")
    finally:
        if writer.is_alive():  # the reader refused the pipe unopened: take what the writer writes, so it returns
            pipe.read_bytes()
        writer.join()
    assert [example.qid for example in squad.examples] == ["q1"]


@pytest.mark.parametrize("name", ["train.csv", "63"])
def test_a_table_read_through_a_pipe_is_read_or_named_by_its_missing_suffix(tmp_path, name):
    """`finetune classify --train <(cat train.csv)` names a pipe that is there: a `.csv` one is read, and one
    without a suffix (`/dev/fd/63`) is told its file type is unknown, not that it is missing."""
    import threading

    from bertctl.data.tabular import LabelledFile

    pipe = tmp_path / name
    os.mkfifo(pipe)
    writer = threading.Thread(target=pipe.write_text, args=("text,label\na b,yes\n",), daemon=True)
    writer.start()
    try:
        table = LabelledFile(pipe, ("text",), "label", "--train")  # read once: texts, then labels
        if pipe.suffix:
            assert [part.text_a for part in table.parts(1)] == [["a b"]] and table.read.labels == ["yes"]
        else:
            with pytest.raises(UsageError, match=rf"^--train {pipe}: unsupported file type \(none\); use one of"):
                list(table.parts())
    finally:
        if writer.is_alive():
            pipe.read_bytes()
        writer.join()
