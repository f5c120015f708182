"""The library functions behind the commands, called from Python with what the CLI would refuse or normalise:
each gives the CLI's result or its one-line UsageError, never a TypeError from torch or tokenizers."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest
import torch
from glue_fixtures import write_glue_data

from bertctl.checkpoint import load_model, save_model
from bertctl.config import BertConfig, CorpusConfig, FinetuneConfig, PretrainConfig
from bertctl.config_files import build_config, read_config_file
from bertctl.config_types import split_list, take_bool, take_finite, take_int
from bertctl.corpus import build_corpus
from bertctl.corpus_inspect import inspect_corpus
from bertctl.errors import UsageError
from bertctl.evaluate import evaluate_classify, evaluate_glue
from bertctl.fill import fill
from bertctl.model import BertForMaskedLM, BertForSequenceClassification
from bertctl.predict import predict_classify, predict_glue
from bertctl.tokenizer import BertTokenizer, encode_rows

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "cold", "warm", "the", "cat"]
NOT_UTF8 = "a \udcff [MASK]"  # the byte 0xff of a file or argument, as Python decodes it (surrogateescape)

pytestmark = pytest.mark.usefixtures("one_thread")


def _one_line_error(call, message: str) -> UsageError:
    with pytest.raises(UsageError, match=message) as error:
        call()
    assert "\n" not in str(error.value)
    return error.value


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """An MLM folder and an SST-2-shaped classifier (classes 0, 1), untrained: only inputs are tested."""
    root = tmp_path_factory.mktemp("models")
    tokenizer = BertTokenizer.from_vocab(VOCAB)
    config = BertConfig(vocab_size=len(VOCAB), hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=16, max_position_embeddings=32)
    torch.manual_seed(0)
    return {"mlm": save_model(BertForMaskedLM(config), root / "mlm", tokenizer),
            "classifier": save_model(BertForSequenceClassification(config, num_labels=2), root / "classifier",
                                     tokenizer, labels=["0", "1"])}


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("table") / "dev.csv"
    with open(path, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([("premise", "y"), ("a cold cat", "0"), ("the warm cat", "1"), ("b", "1")])
    return path


@pytest.fixture(scope="module")
def glue(tmp_path_factory) -> Path:
    return write_glue_data(tmp_path_factory.mktemp("glue") / "glue", tasks=("sst2",), n_train=4, n_dev=6, n_test=4)


@pytest.fixture
def no_hub(monkeypatch, tmp_path):
    """In tmp_path, with any hub lookup a failure: a name written like a path must never reach it."""
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda *a, **k: pytest.fail("looked up on the hub"))
    monkeypatch.chdir(tmp_path)


# --- 1. a model written like a path is a local folder ---------------------------------------------------

def test_evaluate_and_predict_keep_a_model_written_like_a_path_local(no_hub, glue, table):
    """Path("./nope") is `nope`, a valid hub id: it was looked up on the hub instead of being refused."""
    calls = [lambda m: evaluate_glue("sst2", m, glue), lambda m: evaluate_classify(m, table, "premise", "y"),
             lambda m: predict_glue("sst2", m, glue, "out"), lambda m: predict_glue("all", m, glue, "out"),
             lambda m: predict_classify(m, table, "p.csv", "premise")]
    for call in calls:
        for name in ("./nope", "nope/"):
            with pytest.raises(UsageError, match=f"^model folder {name} does not exist$"):
                call(name)
    _one_line_error(lambda: evaluate_glue("sst2", None, glue), "^--model: no model given")


def test_a_model_written_like_a_path_that_exists_is_read(models, glue, monkeypatch):
    monkeypatch.chdir(models["classifier"].parent)
    assert set(evaluate_glue("sst2", "./classifier", glue)["dev"]) == {"accuracy"}


# --- 2. text_columns as one string ----------------------------------------------------------------------

@pytest.mark.parametrize(("columns", "label", "said"), [(",", None, "comma-separated, not ','$"),
                                                      ("", None, "comma-separated, not '' \\(or leave it off"),
                                                      ([], None, "--text-columns: give one or two column"),
                                                      (5, None, "--text-columns: give one or two column"),
                                                      ("premise", "", "--label-column: give the label column")])
def test_empty_or_odd_columns_are_refused_not_replaced_by_the_runs(models, table, columns, label, said):
    with pytest.raises(UsageError, match=said):
        evaluate_classify(models["classifier"], table, columns, label)


def test_text_columns_as_a_string_is_split_on_commas_as_the_flag_is(models, table, tmp_path):
    """It became its characters (p, r, e, m, i, s, e) and was refused as seven columns."""
    scores = evaluate_classify(models["classifier"], table, text_columns="premise", label_column="y")
    assert scores == evaluate_classify(models["classifier"], table, text_columns=["premise"], label_column="y")
    written = predict_classify(models["classifier"], table, tmp_path / "p.csv", text_columns="premise")
    assert len(written.read_text().splitlines()) == 4
    assert split_list("premise, hypothesis,") == ("premise", "hypothesis")


# --- 3. text that is not UTF-8, or not text --------------------------------------------------------------

def test_text_that_is_not_utf8_is_a_usage_error_naming_it(models):
    tokenizer = BertTokenizer.from_vocab(VOCAB)
    calls = [(lambda: fill(["a [MASK]", NOT_UTF8], models["mlm"]), "^text 2 is not valid UTF-8"),
             (lambda: tokenizer.encode(NOT_UTF8), "^text 1 is not valid UTF-8"),
             (lambda: tokenizer.encode("a", NOT_UTF8), "^pair 1 is not valid UTF-8"),
             (lambda: tokenizer.encode_batch(["a", "b", NOT_UTF8]), "^text 3 is not valid UTF-8"),
             (lambda: tokenizer.encode_batch(["a"], [NOT_UTF8]), "^pair 1 is not valid UTF-8"),
             (lambda: encode_rows(tokenizer, [NOT_UTF8]), "^text 1 is not valid UTF-8"),
             (lambda: fill([None], models["mlm"]), "^text 1 is None, not a string$"),
             (lambda: tokenizer.encode_batch(["a", 5]), "^text 2 is 5, not a string$"),
             (lambda: tokenizer.encode_batch("abc"), "^encode_batch: give lists of texts and pairs, not one string$"),
             (lambda: tokenizer.encode_batch(["a", "b"], "cd"), "^encode_batch: give lists of texts and pairs")]
    for call, message in calls:
        _one_line_error(call, message)
    assert tokenizer.encode("a", "b").tokens == ["[CLS]", "a", "[SEP]", "b", "[SEP]"]  # good text still encodes


# --- 4. whole numbers of plain functions -----------------------------------------------------------------

def test_fill_takes_whole_numbers_as_config_fields_do(models):
    """top_k=2.0 reached torch.topk (TypeError), "3" a comparison with 1 (TypeError)."""
    expected = fill(["a [MASK]"], models["mlm"], top_k=2, batch_size=1)
    assert fill(["a [MASK]"], models["mlm"], top_k=2.0, batch_size=1.0) == expected
    for kwargs, message in (({"top_k": "3"}, "--top-k must be a whole number, got '3'"),
                            ({"top_k": 1.5}, "--top-k must be a whole number, got 1.5"),
                            ({"top_k": True}, "--top-k must be a whole number, got True"),
                            ({"batch_size": 1.5}, "--batch-size must be a whole number, got 1.5"),
                            ({"top_k": 0}, "--top-k must be at least 1, got 0")):
        _one_line_error(lambda kwargs=kwargs: fill(["a [MASK]"], models["mlm"], **kwargs), f"^{message}$")


def test_evaluate_and_predict_take_whole_numbers_as_config_fields_do(models, glue, table, tmp_path):
    expected = evaluate_glue("sst2", models["classifier"], glue, batch_size=8, max_seq_length=16)
    assert evaluate_glue("sst2", models["classifier"], glue, batch_size=8.0, max_seq_length=16.0) == expected
    for kwargs, message in (({"batch_size": "8"}, "--batch-size must be a whole number, got '8'"),
                            ({"batch_size": 2.5}, "--batch-size must be a whole number, got 2.5"),
                            ({"max_seq_length": 16.5}, "--max-seq-length must be a whole number, got 16.5"),
                            ({"batch_size": 0}, "--batch-size 0: give 1 or more")):
        _one_line_error(lambda kwargs=kwargs: evaluate_glue("sst2", models["classifier"], glue, **kwargs), message)
        _one_line_error(lambda kwargs=kwargs: predict_classify(models["classifier"], table, tmp_path / "p.csv",
                                                               "premise", **kwargs), message)
    assert not (tmp_path / "p.csv").exists()


def test_load_model_refuses_a_head_of_no_or_a_text_number_of_labels(models):
    """num_labels=0 silently built a head with no outputs; "3" failed deep in torch."""
    folder = models["classifier"]
    assert load_model(folder, "BertForSequenceClassification", num_labels=3.0).num_labels == 3
    for value, message in (("3", "^num_labels must be a whole number, got '3'$"),
                           (0, "^num_labels must be at least 1, got 0$")):
        _one_line_error(lambda value=value: load_model(folder, "BertForSequenceClassification", num_labels=value),
                        message)


def test_inspect_corpus_takes_num_as_the_flag_does(tmp_path):
    """num="2" failed in a comparison; num=-1 silently showed nothing (the CLI's --num refuses it)."""
    BertTokenizer.from_vocab(VOCAB).save(tmp_path / "tok")
    (tmp_path / "text.txt").write_text("".join("a cat . the b cat .\nwarm a b .\n\n" for _ in range(8)))
    cfg = CorpusConfig(inputs=(str(tmp_path / "text.txt"),), tokenizer=tmp_path / "tok", out=tmp_path / "corpus",
                       max_seq_length=16, workers=1)
    build_corpus(cfg)
    assert len(inspect_corpus(cfg.out, num=2.0)["samples"]) == 2
    _one_line_error(lambda: inspect_corpus(cfg.out, num="2"), "^--num must be a whole number, got '2'$")
    _one_line_error(lambda: inspect_corpus(cfg.out, num=-1), "^--num must be at least 0, got -1$")


def test_take_int_is_the_config_fields_rule():
    assert (take_int("--n", 8.0), take_int("--n", 3, minimum=3)) == (8, 3)
    assert type(take_int("--n", 8.0)) is int
    for value in ("8", 8.5, None, True, float("nan")):
        _one_line_error(lambda value=value: take_int("--n", value), "^--n must be a whole number, got ")


def test_numpy_scalars_are_taken_as_the_python_values_they_hold():
    """`take_bool` refused `np.bool_` (a mask's `.any()`, a column's value) while numpy's ints and floats were taken;
    each kind now takes numpy's own, as the Python type, and an int argument still refuses a fraction."""
    import numpy as np

    assert [take_bool("--b", np.True_), take_bool("--b", np.bool_(False))] == [True, False]
    assert type(take_bool("--b", np.True_)) is bool
    assert [take_int("--n", np.int64(8)), take_int("--n", np.uint8(3)), take_int("--n", np.float32(8.0))] == [8, 3, 8]
    assert take_finite("--x", np.float16(0.5)) == 0.5 and type(take_finite("--x", np.float32(0.5))) is float
    cfg = PretrainConfig(steps=np.int32(4), lr=np.float32(0.5), compile=np.True_, dropout=np.float64(0.0))
    assert (cfg.steps, cfg.lr, cfg.compile, cfg.dropout) == (4, 0.5, True, 0.0) and type(cfg.compile) is bool
    for value in (np.float64(1.5), np.True_):
        _one_line_error(lambda value=value: take_int("--n", value), "^--n must be a whole number, got ")
    for value in (np.int64(1), np.float64(0.0), "True"):
        _one_line_error(lambda value=value: take_bool("--b", value), "^--b must be true or false, got ")


# --- 5. ~ in the GLUE data folder -----------------------------------------------------------------------

def test_a_glue_folder_under_home_is_found(models, glue, monkeypatch, tmp_path):
    """`evaluate_glue(..., "~/glue")` and `data: ~/glue` in a --config file said "no such folder"."""
    monkeypatch.setenv("HOME", str(glue.parent))
    expected = evaluate_glue("sst2", models["classifier"], glue)
    assert evaluate_glue("sst2", models["classifier"], "~/glue") == expected
    (tmp_path / "run.yaml").write_text("data: ~/glue\n")
    data = build_config(FinetuneConfig, read_config_file(tmp_path / "run.yaml")).data
    assert evaluate_glue("sst2", models["classifier"], data) == expected
    _one_line_error(lambda: evaluate_glue("sst2", models["classifier"], "~/elsewhere"),
                    "^--data ~/elsewhere: no such folder")
    from bertctl.finetune import finetune_glue

    _one_line_error(lambda: finetune_glue(FinetuneConfig(task="all", model=models["classifier"], data="~/glue",
                                                         out=tmp_path / "all", max_seq_length=32)),
                    "^--data .*glue: finetune glue all needs every task; missing CoLA/train.tsv")


def test_every_path_argument_under_home_is_found_and_written_there(models, table, glue, monkeypatch, tmp_path):
    """A `~` that reached the library unexpanded (quoted, `--file=~/x`, a Python argument) wrote under a literal
    ./~/ (convert, predict) or refused a file that is there (fill, corpus inspect, evaluate classify)."""
    from bertctl.convert import convert
    from bertctl.fill import read_texts

    home, here = tmp_path / "home", tmp_path / "here"
    home.mkdir()
    here.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(here)
    (home / "dev.csv").write_bytes(table.read_bytes())
    (home / "x.txt").write_text("a [MASK]\n")
    expected = evaluate_classify(models["classifier"], table, "premise", "y")
    assert evaluate_classify(models["classifier"], "~/dev.csv", "premise", "y") == expected
    assert predict_classify(models["classifier"], "~/dev.csv", "~/p.csv", "premise") == home / "p.csv"
    assert predict_glue("sst2", models["classifier"], glue, "~/sub") == [home / "sub" / "SST-2.tsv"]
    assert convert(models["mlm"], "~/m").startswith(f"wrote {home / 'm'} ")
    assert read_texts("~/x.txt") == ["a [MASK]"]
    BertTokenizer.from_vocab(VOCAB).save(home / "tok")
    (home / "text.txt").write_text("".join("a cat . the b cat .\nwarm a b .\n\n" for _ in range(8)))
    build_corpus(CorpusConfig(inputs=("~/text.txt",), tokenizer="~/tok", out="~/corpus", max_seq_length=16,
                              workers=1))
    assert len(inspect_corpus("~/corpus", num=1)["samples"]) == 1
    assert not any(here.iterdir())
    _one_line_error(lambda: predict_classify(models["classifier"], "~/dev.csv", "~/dev.csv", "premise",
                                             overwrite=True), "is the input file")


def test_a_table_or_mapping_for_names_or_a_list_is_one_line_naming_the_argument(models, glue, table, tmp_path):
    """A DataFrame given for a name said its three-line repr (device, precision: a bare TypeError or ValueError);
    for a list of texts or tokens it was iterated, and its column names taken for them without a word."""
    import numpy as np
    import pandas as pd

    frame = pd.DataFrame({"premise": ["a cold cat", "the warm cat"], "y": [0, 1]})
    clf, mlm = models["classifier"], models["mlm"]
    calls = [(lambda v: evaluate_classify(clf, table, v, "y"), "--text-columns: give one or two column names"),
             (lambda v: predict_classify(clf, table, tmp_path / "p.csv", v), "--text-columns: give one or two"),
             (lambda v: evaluate_classify(clf, table, "premise", v), "--label-column: give the label column's name"),
             (lambda v: evaluate_glue(v, clf, glue), "GLUE task .*: give a task name"),
             (lambda v: predict_glue(v, clf, glue, tmp_path / "out"), "GLUE task .*: give a task name"),
             (lambda v: evaluate_glue("sst2", clf, glue, split=v), "--split .*: task sst2 has the splits"),
             (lambda v: evaluate_glue("sst2", clf, glue, device=v), "--device: .* is not a device bertctl runs on"),
             (lambda v: evaluate_glue("sst2", clf, glue, precision=v), "--precision .*: choose one of auto"),
             (lambda v: fill(["a [MASK]"], mlm, device=v), "--device: .* is not a device bertctl runs on"),
             (lambda v: BertTokenizer.from_vocab(VOCAB).encode_batch(v), "encode_batch: give lists of texts"),
             (lambda v: fill(["a [MASK]"], mlm, targets=v), "--target: give a list of tokens, not"),
             (lambda v: fill(v, mlm), "fill: give a list of texts, not")]
    for number, (call, said) in enumerate(calls):
        assert "a DataFrame" in str(_one_line_error(lambda call=call: call(frame), f"^{said}"))
        lists = number >= len(calls) - 3  # texts and targets: a Series or an array is their list
        for other in ({"cold": 1}, np.array([["cold"]]), "cold", b"cold") if lists else (frame["y"],):
            _one_line_error(lambda call=call, other=other: call(other), f"^{said}")
    expected = fill(["a [MASK]"], mlm, targets=["cat"])  # each row's last word
    assert fill(pd.Series(["a [MASK]"]), mlm, targets=frame["premise"].str.split().str[-1].to_numpy()) == expected
    tokenizer = BertTokenizer.from_vocab(VOCAB)
    assert ([e.ids for e in tokenizer.encode_batch(frame["premise"], np.array(["a", "b"]))]
            == [e.ids for e in tokenizer.encode_batch(["a cold cat", "the warm cat"], ["a", "b"])])


# --- 6. nits --------------------------------------------------------------------------------------------

def test_no_task_or_no_data_is_a_usage_error(models, glue):
    _one_line_error(lambda: evaluate_glue(None, models["classifier"], glue), "^GLUE task None: give a task name")
    _one_line_error(lambda: evaluate_glue("sst2", models["classifier"], None), "^--data None: give the GLUE")
    _one_line_error(lambda: evaluate_glue("sst2", models["classifier"], glue, split=None),
                    "^--split None: task sst2 has the splits")


@pytest.mark.parametrize(("text", "field", "expected"), [
    ('text_columns: "premise,hypothesis"', "text_columns", ("premise", "hypothesis")),
    ('text_columns: "premise, hypothesis"', "text_columns", ("premise", "hypothesis")),
    ("text_columns: review", "text_columns", ("review",)),
    ('label_names: "neg,pos"', "label_names", ("neg", "pos")),
    ('seeds: "1, 2,"', "seeds", (1, 2)),
])
def test_list_fields_split_a_string_on_commas_as_their_flags_do(tmp_path, text, field, expected):
    (tmp_path / "run.yaml").write_text(text + "\n")
    assert getattr(build_config(FinetuneConfig, read_config_file(tmp_path / "run.yaml")), field) == expected
    assert getattr(FinetuneConfig(**{field: text.split(": ")[1].strip('"')}), field) == expected


def test_inputs_are_file_names_and_never_split_on_commas():
    assert CorpusConfig(inputs="a,b.txt").inputs == ("a,b.txt",)


def test_a_missing_tokenizer_is_named_as_given():
    from bertctl.tokenizer_folder import load_tokenizer

    _one_line_error(lambda: load_tokenizer("./missing"), "^tokenizer ./missing does not exist")


def test_paths_and_yes_no_arguments_of_the_wrong_type_are_one_line(minilm, tmp_path):
    """From Python, None or 5 for a path and "no" for a flag reached Path() or an `if` as they were."""
    from bertctl.convert import convert
    from bertctl.corpus import load_corpus
    from bertctl.fill import fill

    calls = [(lambda: convert(minilm, None), "--out: give a file or folder name, got None"),
             (lambda: convert(minilm, tmp_path / "c", overwrite="no"), "overwrite must be true or false, got 'no'"),
             (lambda: load_corpus(5), "--corpus: give a file or folder name, got 5"),
             (lambda: fill(None, minilm), "fill: give a list of texts, not None"),
             (lambda: fill(["a [MASK] b"], minilm, truncate="no"), "truncate must be true or false, got 'no'")]
    for call, said in calls:
        with pytest.raises(UsageError, match=re.escape(said)):
            call()
    assert not (tmp_path / "c").exists()


def test_save_model_reads_a_tokenizer_folder_under_home_and_refuses_one_too_large(models, tmp_path, monkeypatch):
    """`save_model(m, out, "~/tok")` said "~/tok has no tokenizer.json"; a tokenizer with more tokens than the
    model has rows was saved, and every reader then refused the folder."""
    monkeypatch.setenv("HOME", str(tmp_path))
    BertTokenizer.from_vocab(VOCAB).save(tmp_path / "tok")
    model = load_model(models["mlm"])
    saved = save_model(model, tmp_path / "out", "~/tok")
    assert (saved / "vocab.txt").read_text() == (tmp_path / "tok" / "vocab.txt").read_text()
    large = BertTokenizer.from_vocab([*VOCAB, *(f"w{i}" for i in range(20))])
    _one_line_error(lambda: save_model(model, tmp_path / "big", large),
                    f"^the tokenizer has {len(VOCAB) + 20} tokens but the model has only {len(VOCAB)} embedding rows")
    assert not (tmp_path / "big").exists()
    _one_line_error(lambda: save_model(model, saved, "~/tok", overwrite="yes"), "^overwrite must be true or false")
