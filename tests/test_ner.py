"""NER: labels aligned to pieces as transformers' run_ner.py aligns them (ported here, on transformers' own fast
tokenizer of the same folder), entity scores against a port of seqeval's default mode written here, parity with
transformers' token-classification head, and a tiny model fine-tuned end to end on a synthetic set."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import random
import re
import shutil
from pathlib import Path

import pytest
import torch
from conftest import never_called
from processes import ranks_said
from typer.testing import CliRunner

from bertctl.checkpoint import build_model, read_checkpoint, save_model
from bertctl.cli import app
from bertctl.config import BertConfig, FinetuneConfig
from bertctl.data.hub_copies import class_names, schema_features
from bertctl.data.ner import check_known, make_ner_features, read_ner, tag_set
from bertctl.errors import BertctlError, UsageError
from bertctl.finetune_tagging import _labelled, _loss_terms, finetune_ner
from bertctl.metrics import entity_scores, entity_spans
from bertctl.model import BertForMaskedLM, BertForTokenClassification
from bertctl.ner import evaluate_ner, open_ner_reader, predict_ner, read_ner_model
from bertctl.tokenizer import BertTokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

FILLER = ["the", "man", "went", "to", "store", "and", "bought", "a", "of", "milk", "in", "city", "day", "unlikely",
          "."]
PEOPLE = [["john"], ["mary"], ["john", "smithson"], ["anna", "lee"]]
PLACES = [["paris"], ["london"], ["new", "york"]]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "man", "went", "to", "store", "and", "bought", "a",
         "of", "milk", "in", "city", "day", "un", "##like", "##ly", ".", ",", "(", ")", "'", "s", "john", "mary",
         "smith", "##son", "anna", "lee", "paris", "london", "new", "york", "cafe", "eu", "-"]
FAST = {"lr": 3e-3, "batch_size": 8, "max_seq_length": 24, "eval_batch_size": 16, "log_every": 4, "epochs": 4,
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


def _conll(path: Path, sentences: list[list[tuple[str, str]]], docstart: bool = True) -> Path:
    lines = ["-DOCSTART- -X- -X- O", ""] if docstart else []
    for sentence in sentences:
        lines += [f"{word} NN B-NP {tag}" for word, tag in sentence] + [""]
    path.write_text("\n".join(lines))
    return path


def _synthetic(n: int, seed: int) -> list[list[tuple[str, str]]]:
    """Filler words with a person (B-PER I-PER, IOB2) and a place (B-LOC ...) each at a random place."""
    rng = random.Random(seed)
    sentences = []
    for _ in range(n):
        words = [(w, "O") for w in rng.sample(FILLER, 5)]
        for names, kind in ((rng.choice(PEOPLE), "PER"), (rng.choice(PLACES), "LOC")):
            at = rng.randrange(len(words) + 1)
            words[at:at] = [(w, ("B-" if i == 0 else "I-") + kind) for i, w in enumerate(names)]
        sentences.append(words)
    return sentences


# --- features against run_ner.py's tokenize_and_align_labels ------------------------------------------------

def _run_ner_align(tokenizer, words: list[list[str]], tags: list[list[str]], label_to_id: dict[str, int],
                   max_length: int) -> tuple[list[list[int]], list[list[int]]]:
    """run_ner.py's tokenize_and_align_labels with label_all_tokens=False, ported."""
    tokenized = tokenizer(words, truncation=True, max_length=max_length, is_split_into_words=True)
    labels = []
    for i, label in enumerate(tags):
        previous, ids = None, []
        for word in tokenized.word_ids(batch_index=i):
            if word is None:
                ids.append(-100)
            elif word != previous:
                ids.append(label_to_id[label[word]])
            else:
                ids.append(-100)
            previous = word
        labels.append(ids)
    return tokenized["input_ids"], labels


@pytest.mark.parametrize("max_seq_length", [64, 10, 7, 4])  # 10: the first sentence fills it exactly
def test_labels_on_first_pieces_equal_run_ners(tmp_path, max_seq_length):
    transformers = pytest.importorskip("transformers")
    folder = tmp_path / "tok"
    _tokenizer().save(folder)
    theirs = transformers.AutoTokenizer.from_pretrained(folder)
    sentences = [[("unlikely", "O"), ("john", "B-PER"), ("smithson", "I-PER"), ("(", "O"), ("zzyzx", "B-LOC")],
                 [("EU", "I-ORG"), ("cafe's", "O"), ("--", "O"), ("new", "B-LOC"), ("york", "I-LOC"), (".", "O")],
                 [("mary", "B-PER")]]
    data = read_ner(_conll(tmp_path / "t.txt", sentences), "--train")
    labels = tag_set(data, None)
    assert labels == ("B-LOC", "B-PER", "I-LOC", "I-ORG", "I-PER", "O")  # run_ner.py's sorted(set(labels))
    ours = make_ner_features(_tokenizer(), data, labels, max_seq_length)
    ids, aligned = _run_ner_align(theirs, data.words, data.tags, {t: i for i, t in enumerate(labels)},
                                  max_seq_length)
    assert [row.tolist() for row in ours.input_ids] == ids
    assert [row.tolist() for row in ours.labels] == aligned
    assert ours.truncated == sum(len(theirs(w, is_split_into_words=True)["input_ids"]) > max_seq_length
                                 for w in data.words)
    for row, first in enumerate(ours.first_piece):  # where each word's prediction is read
        kept = [k for k, v in enumerate(aligned[row]) if v != -100]
        assert first[first >= 0].tolist() == kept
    if max_seq_length == 64:
        assert 1 in ours.input_ids[0] and ours.truncated == 0  # zzyzx is [UNK], and labelled


def test_reading_conll_and_jsonl(tmp_path):
    two = tmp_path / "two.txt"
    two.write_text("EU\tB-ORG\nrejects O\n\n\n-DOCSTART- O\nPeter B-PER\n")
    data = read_ner(two, "--train")
    assert data.words == [["EU", "rejects"], ["Peter"]] and data.tags == [["B-ORG", "O"], ["B-PER"]]
    names = ["O", "B-PER", "I-PER"]
    lines = [{"tokens": ["Anna", "Lee", "ran"], "ner_tags": [1, 2, 0]}, {"tokens": ["x"], "ner_tags": [0]}]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    read = read_ner(tmp_path / "a.jsonl", "--train", label_names=names)
    assert read.tags == [["B-PER", "I-PER", "O"], ["O"]] and tag_set(read, names) == tuple(names)
    with pytest.raises(UsageError, match="give --label-names"):
        read_ner(tmp_path / "a.jsonl", "--train")
    (tmp_path / "b.jsonl").write_text(json.dumps({"tokens": ["x", "y"], "ner_tags": [0, 3]}) + "\n")
    with pytest.raises(UsageError, match=r"b.jsonl:1: ner_tags holds an id outside 0..2 \(--label-names name 3 "):
        read_ner(tmp_path / "b.jsonl", "--train", label_names=names)  # one past the last: no IndexError
    with pytest.raises(UsageError, match=r"has the tags B-PER, I-PER, which --label-names lacks"):
        tag_set(read, ["O"])  # refused before a tag without an output stops feature making with a KeyError
    words = tmp_path / "words.txt"
    words.write_text("EU\nrejects\n\nPeter\n\x0c\n")  # a form feed is a word: only a blank line ends a sentence
    assert read_ner(words, "--data", need_tags=False).words == [["EU", "rejects"], ["Peter", "\x0c"]]


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"])
def test_a_long_file_is_read_line_by_line_with_its_sentences_and_line_numbers(tmp_path, end):
    """Sentences are built as the lines are read (the whole text and its list of lines were ~1 KB a sentence):
    the same sentences and tags past the first blocks read, with any line end, and an error far into the file
    names its line."""
    sentences = _synthetic(3000, 5)
    lines = ["-DOCSTART- -X- -X- O", ""]
    for sentence in sentences:
        lines += [f"{word} NN B-NP {tag}" for word, tag in sentence] + [""]
    path = tmp_path / "long.txt"
    path.write_bytes(("\ufeff" + end.join(lines)).encode())
    read = read_ner(path, "--train")
    assert read.words == [[w for w, _ in s] for s in sentences] and read.tags == [[t for _, t in s] for s in sentences]
    lines[-3] = "paris NN B-NP"
    path.write_bytes(end.join(lines).encode())
    with pytest.raises(UsageError, match=rf"long.txt:{len(lines) - 2}: 3 columns where the file's first line has 4"):
        read_ner(path, "--train")
    path.write_bytes(end.join([*lines[:10], "x X-TAG", *lines[10:]]).encode())
    with pytest.raises(UsageError, match=r"long.txt:11: 2 columns"):
        read_ner(path, "--train")


@pytest.mark.parametrize("name", ["late.txt", "late.jsonl"])
def test_a_byte_that_is_not_utf8_far_into_a_file_is_named_by_its_place_in_the_file(tmp_path, name):
    """A streamed read decodes block by block, its error counting from the block; the message names the line and
    the byte counted from the file's start (its byte-order mark included)."""
    line = b"word O\n" if name.endswith(".txt") else b'{"tokens": ["word"], "ner_tags": ["O"]}\n'
    path = tmp_path / name
    path.write_bytes(b"\xef\xbb\xbf" + line * 20_000 + b"caf\xe9 O\n")
    at = 3 + len(line) * 20_000 + 3
    with pytest.raises(UsageError, match=rf"^--data \S*{name}:20001: not UTF-8 text \(byte {at:,}\); convert it"):
        read_ner(path, "--data")


# --- entity scores against seqeval ------------------------------------------------------------------------

def _seqeval_entities(seq: list[str]) -> list[tuple[str, int, int]]:
    """seqeval.metrics.sequence_labeling.get_entities (default mode, prefix tags), ported."""
    def end_of_chunk(prev_tag, tag, prev_type, type_):
        end = prev_tag in ("E", "S")
        end |= prev_tag == "B" and tag in ("B", "S", "O")
        end |= prev_tag == "I" and tag in ("B", "S", "O")
        return end or (prev_tag != "O" and prev_tag != "." and prev_type != type_)

    def start_of_chunk(prev_tag, tag, prev_type, type_):
        start = tag in ("B", "S")
        start |= prev_tag in ("E", "S", "O") and tag in ("E", "I")
        return start or (tag != "O" and tag != "." and prev_type != type_)

    prev_tag, prev_type, begin, chunks = "O", "", 0, []
    for i, chunk in enumerate(seq + ["O"]):
        tag, type_ = chunk[0], chunk[1:].split("-", maxsplit=1)[-1] or "_"
        if end_of_chunk(prev_tag, tag, prev_type, type_):
            chunks.append((prev_type, begin, i - 1))
        if start_of_chunk(prev_tag, tag, prev_type, type_):
            begin = i
        prev_tag, prev_type = tag, type_
    return chunks


def _seqeval_scores(y_true: list[list[str]], y_pred: list[list[str]]) -> dict:
    """seqeval's f1/precision/recall (entities of all sentences, 'O' between them), accuracy, and per type."""
    flat = [[t for s in y for t in [*s, "O"]] for y in (y_true, y_pred)]
    true, pred = (set(_seqeval_entities(f)) for f in flat)

    def prf(t, p):
        correct = len(t & p)
        precision = correct / len(p) if p else 0
        recall = correct / len(t) if t else 0
        return precision, recall, 2 * precision * recall / (precision + recall) if precision + recall else 0

    words = [(a, b) for s, r in zip(y_true, y_pred, strict=True) for a, b in zip(s, r, strict=True)]
    result = dict(zip(("precision", "recall", "f1"), prf(true, pred), strict=True))
    result["accuracy"] = sum(a == b for a, b in words) / len(words)
    for kind in {e[0] for e in true | pred}:
        t, p = {e for e in true if e[0] == kind}, {e for e in pred if e[0] == kind}
        result[kind] = (*prf(t, p), len(t))
    return result


HAND_MADE = [
    (["I-ORG", "O", "I-MISC", "I-MISC", "O", "I-PER", "B-PER"], [("ORG", 0, 0), ("MISC", 2, 3), ("PER", 5, 5),
                                                                  ("PER", 6, 6)]),  # IOB1, as CoNLL-2003's files
    (["B-PER", "I-PER", "B-PER", "O", "B-LOC"], [("PER", 0, 1), ("PER", 2, 2), ("LOC", 4, 4)]),  # IOB2, adjacent
    (["O", "I-LOC", "O"], [("LOC", 1, 1)]),  # a lone I- begins an entity
    (["B-PER", "I-LOC", "I-LOC"], [("PER", 0, 0), ("LOC", 1, 2)]),  # a change of type ends one, starts another
    (["S-PER", "B-LOC", "I-LOC", "E-LOC", "E-LOC", "S-LOC", "I-LOC"],
     [("PER", 0, 0), ("LOC", 1, 3), ("LOC", 4, 4), ("LOC", 5, 5), ("LOC", 6, 6)]),  # IOBES
    (["B", "I", "O", "B-X-Y"], [("_", 0, 1), ("X-Y", 3, 3)]),  # bare tags; a type with a dash
]


@pytest.mark.parametrize(("tags", "spans"), HAND_MADE)
def test_entity_spans_equal_seqeval(tags, spans):
    assert entity_spans(tags) == _seqeval_entities(tags) == spans


def test_entity_scores_equal_seqeval():
    gold = [tags for tags, _ in HAND_MADE]
    rng = random.Random(0)
    choices = ["O", "O", "O", "B-PER", "I-PER", "B-LOC", "I-LOC", "E-LOC", "S-PER", "I-MISC"]
    cases = [(gold, [list(reversed(t)) for t in gold]), (gold, gold)]
    for _ in range(200):
        lengths = [rng.randrange(1, 9) for _ in range(rng.randrange(1, 5))]
        true = [[rng.choice(choices) for _ in range(n)] for n in lengths]
        cases.append((true, [[t if rng.random() < 0.6 else rng.choice(choices) for t in s] for s in true]))
    for true, predicted in cases:
        overall, types = entity_scores(true, predicted)
        expected = _seqeval_scores(true, predicted)
        for name in ("precision", "recall", "f1", "accuracy"):
            assert overall[name] == pytest.approx(expected[name]), (name, true, predicted)
        assert set(types) == {k for k in expected if k not in overall}
        for kind, figures in types.items():
            assert (figures["precision"], figures["recall"], figures["f1"], figures["number"]) == \
                pytest.approx(expected[kind])
    assert entity_scores([["B-PER"]], [["O"]])[0] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "accuracy": 0.0}
    assert entity_scores([[]], [[]]) == ({"precision": 0.0, "recall": 0.0, "f1": 0.0, "accuracy": 0.0}, {})  # no words
    for short in ([["O"]], [["O"], ["B-PER"]]):  # a sentence too few, a tag too few: refused, not a ValueError
        with pytest.raises(BertctlError, match="one predicted tag per gold tag"):
            entity_scores([["O"], ["B-PER", "O"]], short)


def test_words_without_a_prediction_are_left_out_of_the_scores_as_run_ner_drops_them():
    """-1 (no piece): the word leaves gold and predictions both; tag id 0 is a prediction like any other."""
    import numpy as np

    from bertctl.data.ner import NerData
    from bertctl.ner import ner_scores, scored_tags

    data = NerData([["a", "b", "c"], ["d"]], [["B-PER", "I-PER", "O"], ["B-LOC"]], Path("t.txt"))
    labels = ["B-PER", "I-PER", "O", "B-LOC"]
    predictions = [np.array([0, -1, 2]), np.array([0])]
    assert scored_tags(data, predictions, labels) == ([["B-PER", "O"], ["B-LOC"]], [["B-PER", "O"], ["B-PER"]])
    overall, types = ner_scores(data, predictions, labels)
    assert overall == {"precision": 0.5, "recall": 0.5, "f1": 0.5, "accuracy": 2 / 3}
    assert types["LOC"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "number": 1}


# --- the model ------------------------------------------------------------------------------------------

def test_logits_and_loss_equal_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(1)
    ours = BertForTokenClassification(_config(), num_labels=5).eval()
    folder = save_model(ours, tmp_path / "tc", _tokenizer(), labels=["B-LOC", "B-PER", "I-LOC", "I-PER", "O"])
    theirs = transformers.BertForTokenClassification.from_pretrained(folder).eval()
    ids = torch.tensor([[2, 27, 29, 30, 7, 33, 3], [2, 28, 21, 3, 0, 0, 0]])
    mask = (ids != 0).long()
    labels = torch.tensor([[-100, 1, 3, -100, 4, 0, -100], [-100, 1, 4, -100, -100, -100, -100]])
    with torch.no_grad():
        a = ours(ids, torch.zeros_like(ids), mask, labels=labels)
        b = theirs(input_ids=ids, token_type_ids=torch.zeros_like(ids), attention_mask=mask, labels=labels)
    torch.testing.assert_close(a.logits, b.logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(a.loss, b.loss, atol=1e-5, rtol=0)
    assert theirs.config.id2label[1] == "B-PER"
    batch = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": mask, "labels": labels,
             "real": torch.tensor([True, True])}
    with torch.no_grad():
        loss, right = _loss_terms(ours, batch)["task"]  # fine-tuning's: a mean over the 6 labelled pieces
    torch.testing.assert_close(loss, b.loss, atol=1e-5, rtol=0)
    assert right == (b.logits.argmax(-1) == labels).sum() and _labelled(batch)["task"] == 6
    assert _labelled({**batch, "real": torch.tensor([True, False])})["task"] == 4  # a row flagged off weighs 0
    per_row = (b.logits.argmax(-1) == labels).sum(-1)
    assert per_row.min() < per_row.sum()  # so a row flagged off that is counted shows
    for row in (0, 1):  # nor counts as right
        with torch.no_grad():
            flagged = _loss_terms(ours, {**batch, "real": torch.arange(2) == row})["task"][1]
        assert flagged == per_row[row]


# --- end to end ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ner_files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ner")
    return {"train": _conll(root / "train.txt", _synthetic(96, 1)),
            "valid": _conll(root / "valid.txt", _synthetic(24, 2), docstart=False)}


@pytest.fixture(scope="module")
def ner_run(encoder, ner_files, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "ner"
    result = CliRunner().invoke(app, ["finetune", "ner", "--model", str(encoder), "--train", str(ner_files["train"]),
                                      "--validation", str(ner_files["valid"]), "--out", str(out),
                                      *[a for k, v in FAST.items() for a in (f"--{k.replace('_', '-')}", str(v))]])
    assert result.exit_code == 0, result.output
    assert "a new token-classification head (5 tags)" in result.stderr
    return out


def test_finetune_learns_the_entities_and_writes_a_run_folder(ner_run, encoder, ner_files, tmp_path):
    results = json.loads((ner_run / "eval_results.json").read_text())
    assert results["task"] == "ner" and results["main_metric"] == "f1"
    rows = [json.loads(line) for line in (ner_run / "metrics.jsonl").read_text().splitlines()]
    dev = [row["validation_f1"] for row in rows if "validation_f1" in row]
    losses = [row["loss"] for row in rows if "loss" in row]
    assert len(dev) == FAST["epochs"] and results["validation"]["f1"] == max(dev) >= 0.97, dev
    assert losses[-1] < losses[0] / 5, losses
    assert all(0 <= row["accuracy"] <= 1 for row in rows if "accuracy" in row)
    untrained = save_model(build_model(read_checkpoint(encoder), "BertForTokenClassification", num_labels=5),
                           tmp_path / "fresh", _tokenizer(), labels=["B-LOC", "B-PER", "I-LOC", "I-PER", "O"])
    assert evaluate_ner(untrained, ner_files["valid"])["f1"] < 0.5
    config = json.loads((ner_run / "config.json").read_text())
    assert config["architectures"] == ["BertForTokenClassification"] and config["finetuning_task"] == "ner"
    assert config["id2label"] == {str(i): t for i, t in enumerate(["B-LOC", "B-PER", "I-LOC", "I-PER", "O"])}
    assert "problem_type" not in config  # transformers' problem_type is a sequence classifier's
    run = json.loads((ner_run / "run.json").read_text())
    assert run["config"]["lr"] == 3e-3 and run["labels"] == ["B-LOC", "B-PER", "I-LOC", "I-PER", "O"]


def test_evaluate_reproduces_eval_results_and_predict_writes_conll(ner_run, ner_files, tmp_path):
    results = json.loads((ner_run / "eval_results.json").read_text())
    scored = evaluate_ner(ner_run, ner_files["valid"])
    assert {k: scored[k] for k in ("precision", "recall", "f1", "accuracy")} == results["validation"]
    gold = read_ner(ner_files["valid"], "--data")
    people = sum(kind == "PER" for tags in gold.tags for kind, _, _ in entity_spans(tags))
    assert set(scored["types"]) == {"LOC", "PER"} and scored["types"]["PER"]["number"] == people >= 24
    shown = CliRunner().invoke(app, ["evaluate", "ner", "--model", str(ner_run), "--data", str(ner_files["valid"]),
                                     "--json"])
    assert shown.exit_code == 0 and json.loads(shown.stdout)["f1"] == results["validation"]["f1"]
    text = CliRunner().invoke(app, ["evaluate", "ner", "--model", str(ner_run), "--data", str(ner_files["valid"])])
    assert "ner f1:" in text.stdout and "ner PER: precision" in text.stdout
    out = predict_ner(ner_run, ner_files["valid"], tmp_path / "pred")
    assert out == tmp_path / "pred.txt" and not (tmp_path / "pred").exists()  # no extension: its format's, .txt
    sentences = out.read_text().split("\n\n")
    assert len(sentences) == 24 and sentences[0].splitlines()[0].split(" ")[:2] == [gold.words[0][0],
                                                                                     gold.tags[0][0]]
    predicted = [[line.split(" ")[2] for line in s.splitlines()] for s in sentences]
    assert entity_scores(gold.tags, predicted)[0]["f1"] == pytest.approx(results["validation"]["f1"])
    words = tmp_path / "words.jsonl"
    words.write_text("".join(json.dumps({"tokens": w}) + "\n" for w in gold.words[:3]))
    shown = CliRunner().invoke(app, ["predict", "ner", "--model", str(ner_run), "--data", str(words), "--out",
                                     str(tmp_path / "p.jsonl")])
    assert shown.exit_code == 0, shown.output
    rows = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert [r["tokens"] for r in rows] == gold.words[:3] and "ner_tags" not in rows[0]
    assert [r["predictions"] for r in rows] == predicted[:3]
    again = CliRunner().invoke(app, ["predict", "ner", "--model", str(ner_run), "--data", str(words), "--out",
                                     str(tmp_path / "p.jsonl")])
    assert again.exit_code != 0 and "--overwrite" in again.output
    with pytest.raises(UsageError, match="is the input file"):  # --overwrite would have replaced the data
        predict_ner(ner_run, words, words, overwrite=True)


def test_integer_tags_are_named_by_the_flag_else_the_runs_names_else_the_models(ner_run, tmp_path):
    """The run's label_names name its data's integer tags, which need not be the head's order (id2label)."""
    run = tmp_path / "run"
    shutil.copytree(ner_run, run)
    record = json.loads((run / "run.json").read_text())
    heads = tuple(read_checkpoint(run).labels)
    record["config"]["label_names"] = list(reversed(heads))
    (run / "run.json").write_text(json.dumps(record))
    assert open_ner_reader(run, None, None, None).label_names == heads[::-1]
    assert open_ner_reader(run, None, None, "O,B-PER").label_names == ("O", "B-PER")
    del record["config"]["label_names"]
    (run / "run.json").write_text(json.dumps(record))
    assert open_ner_reader(run, None, None, None).label_names == heads


@pytest.mark.parametrize("name", ["p.json", "p.csv", "p.tsv", "p.parquet"])
def test_predict_refuses_an_out_named_for_another_format(name, tmp_path):
    """`--out preds.json` (the input side reads .json as JSON lines) or `preds.csv` got CoNLL text under that name;
    `predict choice` and `predict classify` refuse a name for another format, and so does this now."""
    _one_line_failure(["predict", "ner", "--model", str(tmp_path / "no_model"), "--data", str(tmp_path / "d.txt"),
                       "--out", str(tmp_path / name)],
                      f"--out {tmp_path / name}: predict ner writes CoNLL text, or JSON lines with a .jsonl name")
    assert not (tmp_path / name).exists()


def test_ner_defaults_and_config_file(tmp_path):
    cfg = FinetuneConfig.ner()
    assert (cfg.lr, cfg.epochs, cfg.max_seq_length, cfg.batch_size) == (5e-5, 3, 128, 32)
    from bertctl.cli_tasks import _finetune_config

    config = tmp_path / "c.json"
    config.write_text(json.dumps({"epochs": 5, "label_names": "O,B-PER"}))
    flags = {name: None for name in ("model", "out", "train", "validation", "lr")}
    cfg = _finetune_config({**flags, "config": config, "lr": 1e-4}, "ner")
    assert (cfg.epochs, cfg.lr, cfg.label_names, cfg.max_seq_length) == (5, 1e-4, ("O", "B-PER"), 128)


@pytest.mark.parametrize("command", ["evaluate", "predict"])
def test_a_precision_the_device_cannot_run_is_refused_before_a_word_is_tokenized(encoder, ner_files, tmp_path,
                                                                                 monkeypatch, command):
    """--precision fp16 on the CPU (or a --device the machine lacks) was refused once every sentence was tokenized:
    ~10 s on a CoNLL file of 50,000 sentences before a one-line refusal. The model is placed once the file is read."""
    from bertctl import ner

    tags = sorted({tag for sentence in read_ner(ner_files["valid"], "--data").tags for tag in sentence})
    head = build_model(read_checkpoint(encoder), "BertForTokenClassification", num_labels=len(tags))
    model, out = save_model(head, tmp_path / "model", _tokenizer(), labels=tags), tmp_path / "tags.txt"
    monkeypatch.setattr(ner, "make_ner_features", never_called("make_ner_features"))
    with pytest.raises(UsageError, match="^--precision fp16 needs a CUDA device"):
        if command == "evaluate":
            evaluate_ner(model, ner_files["valid"], device="cpu", precision="fp16")
        else:
            predict_ner(model, ner_files["valid"], out, device="cpu", precision="fp16")
    assert not out.exists()


def _one_line_failure(args: list[str], message: str) -> None:
    shown = CliRunner().invoke(app, args)
    assert shown.exit_code != 0 and message in shown.output, shown.output
    assert "Traceback" not in shown.output


@pytest.mark.parametrize("command", ["finetune", "evaluate", "predict"])
def test_a_file_of_empty_sentences_only_is_refused_naming_it(encoder, ner_run, tmp_path, command):
    """`{"tokens": [], "ner_tags": []}` rows only: finetune failed with "num_labels must be at least 1, got 0"
    (naming neither flag nor file) and evaluate printed an F1 and accuracy of 0 for no words at all."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"tokens": [], "ner_tags": []}\n' * 2)
    out = tmp_path / ("run" if command == "finetune" else "tags.jsonl")
    args = {"finetune": ["finetune", "ner", "--model", str(encoder), "--out", str(out), "--max-seq-length", "24",
                         "--train", str(empty)],
            "evaluate": ["evaluate", "ner", "--model", str(ner_run), "--data", str(empty)],
            "predict": ["predict", "ner", "--model", str(ner_run), "--data", str(empty), "--out", str(out)]}[command]
    flag = "--train" if command == "finetune" else "--data"
    shown = CliRunner().invoke(app, args, prog_name="bertctl")
    assert shown.exit_code == 2 and shown.stdout == "", shown.output
    assert shown.stderr.startswith(f"bertctl: error: {flag} {empty} holds no sentences; give ")
    assert shown.stderr.count("\n") == 1 and not out.exists()


def test_refusals(encoder, ner_run, ner_files, tmp_path):
    words = tmp_path / "words.txt"
    words.write_text("EU\nrejects\n\nPeter\n")
    train = ["finetune", "ner", "--model", str(encoder), "--out", str(tmp_path / "o"), "--max-seq-length", "24",
             "--train"]
    _one_line_failure([*train, str(words)], "has no NER tags")
    ragged = tmp_path / "ragged.txt"
    ragged.write_text("EU NNP B-ORG\nrejects O\n")
    _one_line_failure([*train, str(ragged)], "ragged.txt:2: 2 columns where the file's first line has 3")
    bad = tmp_path / "bad.txt"
    bad.write_text("EU NNP\n")
    _one_line_failure([*train, str(bad)], "tag 'NNP' is not O or B-/I-/E-/S-TYPE")
    unknown = _conll(tmp_path / "unknown.txt", [[("eu", "B-ORG"), ("paris", "B-LOC")]])
    _one_line_failure(["evaluate", "ner", "--model", str(ner_run), "--data", str(unknown)],
                      "has the tags B-ORG, which the model")
    _one_line_failure(["evaluate", "ner", "--model", str(encoder), "--data", str(ner_files["valid"])],
                      "no token-classification head")
    sentences = build_model(read_checkpoint(encoder), "BertForSequenceClassification", num_labels=3)
    glue = save_model(sentences, tmp_path / "glue", _tokenizer(), labels=["O", "B-PER", "I-PER"])
    with pytest.raises(UsageError, match="no token-classification head"):  # its `classifier` is a sentence head
        read_ner_model(glue)
    _one_line_failure([*train, str(ner_files["train"]), "--validation", str(unknown)], "has the tags B-ORG")
    with pytest.raises(UsageError, match="label_names: for `bertctl finetune classify`"):
        from bertctl.finetune_qa import finetune_squad

        finetune_squad(FinetuneConfig.squad(model=encoder, train=ner_files["train"], out=tmp_path / "o",
                                            label_names=("O", "B-ORG")))
    with pytest.raises(UsageError, match="--train and --out"):
        finetune_ner(FinetuneConfig.ner(model=encoder))
    assert not (tmp_path / "o").exists()


def test_a_word_with_a_space_goes_to_jsonl_not_to_a_conll_line(ner_run, tmp_path):
    """jsonl tokens may hold spaces ("New York"), which would split into extra CoNLL columns."""
    data = tmp_path / "spaced.jsonl"
    data.write_text(json.dumps({"tokens": ["peter", "saw", "new york", "zürich"]}) + "\n")
    _one_line_failure(["predict", "ner", "--model", str(ner_run), "--data", str(data), "--out",
                       str(tmp_path / "p.txt")], "sentence 1 has the word 'new york', which a CoNLL line cannot hold")
    assert not (tmp_path / "p.txt").exists()
    edged = tmp_path / "edged.jsonl"  # white space at a word's edge only: the CoNLL line would lose it too
    edged.write_text(json.dumps({"tokens": ["peter", "york\u00a0"]}) + "\n")
    with pytest.raises(UsageError, match=r"the word 'york\\xa0', which a CoNLL line cannot hold"):
        predict_ner(ner_run, edged, tmp_path / "p.txt")
    out = predict_ner(ner_run, data, tmp_path / "p.jsonl")
    text = out.read_text(encoding="utf-8")  # UTF-8, not \u escapes, as the other predict commands write
    assert json.loads(text)["tokens"] == ["peter", "saw", "new york", "zürich"] and "zürich" in text


def test_line_separators_inside_a_word_do_not_split_the_line(tmp_path):
    """Files are split at line ends only, as Python's file iteration and datasets' readers split them: U+2028,
    U+0085 or a form feed inside a word (and written raw by `predict ner`'s jsonl) stay in the word."""
    odd = ["x\u2028y", "a\x85b", "\x0c", "p\x1cq"]
    conll = tmp_path / "odd.txt"
    conll.write_text("".join(f"{word} O\n" for word in odd) + "EU B-ORG\r\n")
    jsonl = tmp_path / "odd.jsonl"
    jsonl.write_text(json.dumps({"tokens": odd, "ner_tags": ["O"] * 4}, ensure_ascii=False) + "\n")
    for path in (conll, jsonl):
        read = read_ner(path, "--data")
        assert read.words[0][:4] == odd and read.tags[0][:4] == ["O"] * 4


@pytest.mark.parametrize(("name", "data"), [
    ("train.txt", b"-DOCSTART- O\r\n\r\nEU B-ORG\rrejects O\r\ncaf\xe9 O\r\n"),
    ("train.jsonl", b'{"tokens": ["EU"], "ner_tags": ["B-ORG"]}\n\n{"tokens": ["caf\xe9"], "ner_tags": ["O"]}\n'),
    ("train.txt", b"-DOCSTART- O\r\n\r\nEU B-ORG\rrejects O\rcaf\xe9 O\r\n"),
    ("train.txt.gz", gzip.compress(b"EU B-ORG\n")),
    ("TRAIN.TXT.GZ", gzip.compress(b"EU B-ORG\n")),
    ("train.txt.bz2", bz2.compress(b"EU B-ORG\n")),
    ("train.txt.xz", lzma.compress(b"EU B-ORG\n")),
    ("train.txt.zst", b"\x28\xb5\x2f\xfd\x20\x09\x49\x00\x00EU B-ORG\n"),
    ("train.zip", b"PK\x03\x04\x14\x00\x00\x00\x08\x00\xa1\x5c"),
], ids=["conll", "jsonl", "conll-lone-cr", "gz", "GZ", "bz2", "xz", "zst", "zip"])
def test_a_file_that_is_not_utf8_text_is_named_by_line_and_byte(tmp_path, name, data):
    """Python's codec words (`cannot read it as UTF-8 text ('utf-8' codec can't decode byte 0xe9 in position
    35 ...)`) named no line, as the classify and GLUE readers do; a .gz was called not UTF-8 where it is compressed.
    A lone \\r ends a line, as the reader splits them (one before the byte on its \\n-ended line too). Every
    compressed name (any case) is called so."""
    path = tmp_path / name
    path.write_bytes(data)
    line, byte = 5 if name.endswith(".txt") else 3, data.find(b"\xe9")
    said = (" is compressed; decompress it first" if not name.endswith((".txt", ".jsonl")) else
            f":{line}: not UTF-8 text \\(byte {byte}\\); convert it to UTF-8 first$")
    with pytest.raises(UsageError, match=f"^--train {re.escape(str(path))}{said}"):
        read_ner(path, "--train")


def test_a_model_with_the_same_tags_keeps_its_order(encoder, ner_files, tmp_path):
    """As run_ner.py: fine-tuning a NER model whose id2label holds the training file's tags keeps the model's order
    (hub conll2003 models: O, B-PER, ...), so its head goes on meaning what it meant."""
    hub_order = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    model = build_model(read_checkpoint(encoder), "BertForTokenClassification", num_labels=5)
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.copy_(torch.tensor([9.0, 0, 0, 0, 0]))  # says O everywhere
    tagger = save_model(model, tmp_path / "tagger", _tokenizer(), labels=hub_order)
    out = finetune_ner(FinetuneConfig.ner(model=tagger, train=ner_files["train"], out=tmp_path / "again",
                                          epochs=1, lr=1e-9, batch_size=32, max_seq_length=24))
    assert read_checkpoint(out).labels == hub_order
    assert evaluate_ner(out, ner_files["valid"])["accuracy"] == evaluate_ner(tagger, ner_files["valid"])["accuracy"]


def test_a_word_without_pieces_is_not_counted_as_cut(ner_run, tmp_path):
    """A lone control character or zero-width space gets no piece (as in run_ner.py, left out of the scores), but
    its sentence was not cut by --max-seq-length."""
    data = _conll(tmp_path / "odd.txt", [[("john", "B-PER"), ("\u200b", "O"), ("went", "O")], [("\x07", "O")]])
    results = evaluate_ner(ner_run, data)
    assert results["sentences"] == 2 and results["sentences_cut"] == 0
    cut = evaluate_ner(ner_run, _conll(tmp_path / "long.txt", [[("john", "B-PER")] * 30]))
    assert cut["sentences_cut"] == 1


def test_a_word_without_pieces_is_predicted_o_whatever_the_heads_last_tag(encoder, tmp_path):
    """It has no prediction (run_ner.py leaves it out); predict writes O, not the tag of id -1."""
    model = build_model(read_checkpoint(encoder), "BertForTokenClassification", num_labels=3)
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.copy_(torch.tensor([0.0, 9.0, 0.0]))  # says B-PER everywhere
    tagger = save_model(model, tmp_path / "tagger", _tokenizer(), labels=["O", "B-PER", "I-PER"])
    (tmp_path / "words.txt").write_text("john\n\u200b\nwent\n")
    out = predict_ner(tagger, tmp_path / "words.txt", tmp_path / "p.txt")
    assert out.read_text().splitlines() == ["john B-PER", "\u200b O", "went B-PER"]  # no gold column: word, guess


def test_padding_pieces_are_labelled_minus_100_as_in_transformers():
    """DataCollatorForTokenClassification pads the labels with -100: padding takes no part in the loss."""
    import numpy as np

    from bertctl.data.ner import NerData
    from bertctl.ner import collate_tokens

    data = NerData([["john", "went"], ["paris"]], [["B-PER", "O"], ["B-LOC"]], Path("two.txt"))
    features = make_ner_features(_tokenizer(), data, ("O", "B-PER", "B-LOC"), 16)
    batch = collate_tokens(features, np.arange(2), 0)
    assert batch["labels"].tolist() == [[-100, 1, 0, -100], [-100, 2, -100, -100]]


def test_predict_says_how_many_sentences_were_cut(ner_run, tmp_path, caplog):
    """evaluate said it; predict tagged the words past the cut O without a word."""
    data = _conll(tmp_path / "long.txt", [[("john", "B-PER")] * 30, [("went", "O")]])
    out = predict_ner(ner_run, data, tmp_path / "p.txt")
    assert "1 of 2 sentences were cut to --max-seq-length" in caplog.text
    assert out.read_text().splitlines()[29].split()[-1] == "O"


def test_an_empty_sentence_goes_to_jsonl_not_to_a_conll_file(ner_run, tmp_path):
    """Read back, a CoNLL file would lose the empty sentence (two blank lines are one break) and shift the rest."""
    data = tmp_path / "gap.jsonl"
    data.write_text("".join(json.dumps({"tokens": t}) + "\n" for t in (["peter"], [], ["paris"])))
    _one_line_failure(["predict", "ner", "--model", str(ner_run), "--data", str(data), "--out",
                       str(tmp_path / "p.txt")], "sentence 2 has no words, which a CoNLL file cannot hold")
    lines = predict_ner(ner_run, data, tmp_path / "p.jsonl").read_text().splitlines()
    assert [json.loads(line)["tokens"] for line in lines] == [["peter"], [], ["paris"]]


def test_encoded_sentences_and_their_tags_are_held_end_to_end_not_as_an_array_each(tmp_path):
    """Three numpy arrays per sentence (ids, piece labels, first pieces) and one more per sentence of predicted
    tags held ~110 bytes of object each besides a short sentence's few numbers; one array each for all the
    sentences, with offsets, hold the numbers and 8 bytes a sentence."""
    import tracemalloc

    import numpy as np

    from bertctl.ner import word_predictions

    sentences = _synthetic(10000, 5)
    data = read_ner(_conll(tmp_path / "big.txt", sentences), "--data")
    labels = ["B-LOC", "B-PER", "I-LOC", "I-PER", "O"]
    torch.manual_seed(0)
    model = BertForTokenClassification(_config(), num_labels=5).eval()
    tracemalloc.start()
    features = make_ner_features(_tokenizer(), data, labels, 24)
    held = tracemalloc.get_traced_memory()[0]
    predictions = word_predictions(model, features, 0, 512, torch.device("cpu"), "fp32")
    predicted = tracemalloc.get_traced_memory()[0] - held
    tracemalloc.stop()
    assert held / len(data) < 300 and predicted / len(data) < 120, (held / len(data), predicted / len(data))
    assert [len(p) for p in predictions] == [len(s) for s in sentences] and {*np.concatenate(
        [p for p in predictions])} <= {0, 1, 2, 3, 4}
    words, tags = data.words[1], data.tags[1]
    assert features.input_ids[1].tolist() == [2, *[VOCAB.index(w) for w in words], 3] and words[0] != "unlikely"
    assert features.first_piece[1].tolist() == list(range(1, len(words) + 1))
    assert features.labels[1].tolist() == [-100, *[labels.index(t) for t in tags], -100]
    assert features.input_ids[-1].dtype == np.int32 and features.labels[-1].dtype == np.int64


@pytest.mark.parametrize(("name", "pieces"), [("p.txt", 3), ("p.jsonl", 3)])
def test_predict_writes_its_file_a_chunk_of_sentences_at_a_time(ner_run, ner_files, tmp_path, monkeypatch, name,
                                                                pieces, watch_writes):
    """The text of every sentence was made before the file was written; now WRITE_CHUNK sentences at a time as
    the temp file is written, and the file appears only whole, the same as it was."""
    import bertctl.ner as ner
    import bertctl.submission as submission

    whole = predict_ner(ner_run, ner_files["valid"], tmp_path / f"whole{Path(name).suffix}").read_bytes()
    written = []
    watch_writes(ner, written.append)
    monkeypatch.setattr(submission, "WRITE_CHUNK", 10)
    assert predict_ner(ner_run, ner_files["valid"], tmp_path / name).read_bytes() == whole
    assert len(written) == pieces  # the 24 sentences of valid.txt, 10 at a time


def test_two_gloo_processes_give_the_losses_and_validation_scores_of_one(encoder, ner_files, tmp_path):
    """torchrun: the loss is weighted by labelled pieces over all ranks, and each rank tags its share of the
    validation sentences; the tags summed over the ranks give the one-process scores."""
    from test_finetune_resume import _dev, _losses, _torchrun

    flags = [a for k, v in {**FAST, "epochs": 2, "log_every": 1}.items() for a in (f"--{k.replace('_', '-')}", str(v))]
    args = ["finetune", "ner", "--model", str(encoder), "--train", str(ner_files["train"]), "--validation",
            str(ner_files["valid"]), "--device", "cpu", *flags]
    one = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "one")])
    assert one.exit_code == 0, one.output
    two = _torchrun([*args, "--out", str(tmp_path / "two")], 2, 29780, tmp_path)
    assert two.returncode == 0, ranks_said(two.stderr)
    a, b = _losses(tmp_path / "one" / "metrics.jsonl"), _losses(tmp_path / "two" / "metrics.jsonl")
    assert sorted(a) == sorted(b) and len(a) > 10 and max(abs(a[s] - b[s]) for s in a) < 1e-4
    dev_one, dev_two = _dev(tmp_path / "one" / "metrics.jsonl"), _dev(tmp_path / "two" / "metrics.jsonl")
    assert [r["validation_f1"] for r in dev_one] == [r["validation_f1"] for r in dev_two]


# --- copies of the hub's eriktks/conll2003 --------------------------------------------------------------------

def _ner_copies(root: Path, sentences: list[list[tuple[str, str]]]) -> dict[str, Path]:
    """The hub's rows of these sentences: tokens, and the tags as ids of conll2003's ClassLabel names."""
    from hub_copy_fixtures import CONLL_TAGS, conll_features, write_copies

    columns = {"id": [str(i) for i in range(len(sentences))], "tokens": [[w for w, _ in s] for s in sentences],
               "pos_tags": [[0] * len(s) for s in sentences], "chunk_tags": [[1] * len(s) for s in sentences],
               "ner_tags": [[CONLL_TAGS.index(t) for _, t in s] for s in sentences]}
    return write_copies(root, columns, conll_features())


def test_hub_copies_give_the_sentences_of_the_conll_file(tmp_path):
    from hub_copy_fixtures import CONLL_TAGS

    sentences = _synthetic(12, 7)
    want = read_ner(_conll(tmp_path / "train.txt", sentences), "--train")
    copies = _ner_copies(tmp_path / "copies", sentences)
    for form in ("parquet", "saved", "split"):  # the ids are named by the copy's ClassLabel names
        got = read_ner(copies[form], "--train", label_names=["O", "B-LOC"])
        assert (got.words, got.tags) == (want.words, want.tags), form
    with pytest.raises(UsageError, match=r"copy.json:1: ner_tags are class ids; give --label-names"):
        read_ner(copies["json"], "--train")  # Dataset.to_json keeps no features
    got = read_ner(copies["json"], "--train", label_names=CONLL_TAGS)
    assert (got.words, got.tags) == (want.words, want.tags)
    ours, theirs = (make_ner_features(_tokenizer(), read_ner(p, "--train"), tag_set(want, None), 16)
                    for p in (copies["parquet"], tmp_path / "train.txt"))
    assert [x.tolist() for x in ours.labels] == [x.tolist() for x in theirs.labels]


def test_a_copys_classlabel_names_are_the_heads_tags_in_their_order(tmp_path):
    """As run_ner.py with the hub's conll2003: the head's tags are the ClassLabel names in id order, all of them,
    even those the split lacks (a slice without B-MISC still trains and scores a validation split that has it)."""
    from hub_copy_fixtures import CONLL_TAGS

    train = read_ner(_ner_copies(tmp_path / "train", _synthetic(12, 7))["parquet"], "--train")
    assert {t for s in train.tags for t in s} < set(CONLL_TAGS) and tag_set(train, None) == tuple(CONLL_TAGS)
    validation = read_ner(_ner_copies(tmp_path / "valid", [[("eu", "B-MISC"), ("paris", "B-LOC")]])["saved"],
                          "--validation")
    check_known(validation, tag_set(train, None), "--validation", "--train")
    assert tag_set(train, ["I-MISC", *CONLL_TAGS[:-1]]) == ("I-MISC", *CONLL_TAGS[:-1])  # --label-names orders it
    text = read_ner(_conll(tmp_path / "t.txt", _synthetic(12, 7)), "--train")
    assert tag_set(text, None) == ("B-LOC", "B-PER", "I-LOC", "I-PER", "O")  # tag strings: sorted, as run_ner.py
    label = {"_type": "ClassLabel", "names": CONLL_TAGS}
    for feature in ({"_type": "List", "feature": label}, {"_type": "Sequence", "feature": label}, [label]):
        assert class_names({"ner_tags": feature}) == {"ner_tags": tuple(CONLL_TAGS)}  # [label]: datasets 2's list


def test_ner_copies_of_words_only_and_bad_ones(tmp_path):
    import datasets
    import pyarrow as pa

    copies = _ner_copies(tmp_path / "c", _synthetic(3, 1))
    words = datasets.load_from_disk(str(copies["saved"])).remove_columns("ner_tags")
    words.save_to_disk(str(tmp_path / "words"))
    assert read_ner(tmp_path / "words", "--data", need_tags=False).tags is None
    with pytest.raises(UsageError, match="words has no NER tags"):
        read_ner(tmp_path / "words", "--data")
    words.remove_columns("tokens").to_parquet(str(tmp_path / "no-tokens.parquet"))
    with pytest.raises(UsageError, match=r"no-tokens.parquet has no column tokens \(found: id, pos_tags, "
                                         r"chunk_tags\); give the hub's columns tokens and ner_tags"):
        read_ner(tmp_path / "no-tokens.parquet", "--data", need_tags=False)
    names = datasets.ClassLabel(names=["O", "PER"])
    odd = datasets.Dataset.from_dict({"tokens": [["a"]], "ner_tags": [[1]]}, features=datasets.Features(
        {"tokens": datasets.List(datasets.Value("string")), "ner_tags": datasets.List(names)}))
    odd.to_parquet(str(tmp_path / "odd.parquet"))
    with pytest.raises(UsageError, match="ner_tags' ClassLabel names: tag 'PER' is not O or B-/I-/E-/S-TYPE"):
        read_ner(tmp_path / "odd.parquet", "--train")
    unset = datasets.Dataset.from_dict({"tokens": [["a"]], "ner_tags": [[-1]]}, features=datasets.Features(
        {"tokens": datasets.List(datasets.Value("string")),
         "ner_tags": datasets.List(datasets.ClassLabel(names=["O", "B-PER"]))}))
    unset.to_parquet(str(tmp_path / "unset.parquet"))  # ClassLabel allows -1 (no label)
    with pytest.raises(UsageError, match=r"unset.parquet row 1: ner_tags holds an id outside 0..1 \(the copy's "
                                         r"ClassLabel names name 2 tags\)"):
        read_ner(tmp_path / "unset.parquet", "--train", label_names=["O", "B-PER", "I-PER"])
    for raw in (b"not json", b'{"info": {}}', b'{"info": {"features": ["a list"]}}'):  # foreign metadata
        assert schema_features(pa.schema([], metadata={b"huggingface": raw})) == {}
    (tmp_path / "broken.parquet").write_text("not parquet")
    with pytest.raises(UsageError, match="broken.parquet: cannot read it as parquet"):
        read_ner(tmp_path / "broken.parquet", "--train")


def _losses(run: Path) -> list[float]:
    return [row["loss"] for row in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "loss" in row]


def test_finetune_and_evaluate_on_hub_copies_equal_the_conll_files(ner_run, ner_files, encoder, tmp_path):
    from hub_copy_fixtures import CONLL_TAGS

    train = _ner_copies(tmp_path / "train", _synthetic(96, 1))
    valid = _ner_copies(tmp_path / "valid", _synthetic(24, 2))
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["finetune", "ner", "--model", str(encoder), "--train", str(train["parquet"]),
                                      "--validation", str(valid["saved"]), "--out", str(out),
                                      *[a for k, v in FAST.items() for a in (f"--{k.replace('_', '-')}", str(v))]])
    assert result.exit_code == 0, result.output
    assert "a new token-classification head (9 tags)" in result.stderr  # all the ClassLabel names, as run_ner.py
    config = json.loads((out / "config.json").read_text())
    assert config["id2label"] == {str(i): t for i, t in enumerate(CONLL_TAGS)}
    same = finetune_ner(FinetuneConfig.ner(model=encoder, train=ner_files["train"], validation=ner_files["valid"],
                                           out=tmp_path / "conll", label_names=CONLL_TAGS, **FAST))
    assert _losses(out) == _losses(same) and _losses(out) != _losses(ner_run)
    # Dataset.to_json's lines keep only the ids: the run's id2label (the ClassLabel names) names them rightly
    assert evaluate_ner(out, valid["json"]) == evaluate_ner(out, valid["saved"])
    want = json.loads((ner_run / "eval_results.json").read_text())
    assert json.loads((out / "eval_results.json").read_text())["validation"] == want["validation"]
    shown = CliRunner().invoke(app, ["evaluate", "ner", "--model", str(ner_run), "--data", str(valid["json"]),
                                     "--label-names", ",".join(CONLL_TAGS), "--json"])
    assert shown.exit_code == 0, shown.output
    assert {k: json.loads(shown.stdout)[k] for k in want["validation"]} == want["validation"]
    shown = CliRunner().invoke(app, ["predict", "ner", "--model", str(ner_run), "--data", str(valid["split"]),
                                     "--out", str(tmp_path / "p.txt")])
    assert shown.exit_code == 0, shown.output
    assert (tmp_path / "p.txt").read_text() == predict_ner(ner_run, ner_files["valid"], tmp_path / "q.txt").read_text()


def test_a_hub_id_gives_the_sentences_of_a_copy_from_the_flags_split_or_the_one_named(tmp_path, monkeypatch):
    from hub_copy_fixtures import stub_hub

    sentences = _synthetic(12, 7)
    want = read_ner(_conll(tmp_path / "train.txt", sentences), "--train")
    calls = stub_hub(monkeypatch, {"eriktks/conll2003": _ner_copies(tmp_path / "copies", sentences)["saved"]})
    for flag, split in (("--train", "train"), ("--validation", "validation"), ("--data", "validation")):
        got = read_ner("eriktks/conll2003", flag)  # the tag ids named by the dataset's ClassLabel names
        assert (got.words, got.tags) == (want.words, want.tags), flag
        assert calls[-1] == ("eriktks/conll2003", None, split)
    read_ner("eriktks/conll2003:test", "--data")
    read_ner("eriktks/conll2003:conll2003:train", "--validation")
    assert calls[-2:] == [("eriktks/conll2003", None, "test"), ("eriktks/conll2003", "conll2003", "train")]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    for name in ("data/eng.train", "conll/train.txt", "conll/train.parquet"):  # in a folder here, or a file's ending
        with pytest.raises(UsageError, match=f"^--train {name}: no such file"):
            read_ner(name, "--train")
    with pytest.raises(UsageError, match=r"^--train someone/ner: not a local file or folder, and loading someone/ner "
                                         r"\(train\) from the hub failed \(Couldn't reach 'someone/ner' on the Hub "
                                         r"\(OfflineModeIsEnabled\)\); go online once to download it to the cache, "
                                         r"or give a local copy$"):
        read_ner("someone/ner", "--train")
    assert len(calls) == 6


def test_finetune_on_hub_ids_equals_the_conll_files_and_records_the_ids(ner_run, encoder, tmp_path, monkeypatch):
    from hub_copy_fixtures import stub_hub

    saved = {"eriktks/conll2003": _ner_copies(tmp_path / "train", _synthetic(96, 1))["saved"],
             "someone/conll-dev": _ner_copies(tmp_path / "valid", _synthetic(24, 2))["saved"]}
    calls = stub_hub(monkeypatch, saved)
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["finetune", "ner", "--model", str(encoder), "--train", "eriktks/conll2003",
                                      "--validation", "someone/conll-dev", "--out", str(out),
                                      *[a for k, v in FAST.items() for a in (f"--{k.replace('_', '-')}", str(v))]])
    assert result.exit_code == 0, result.output
    assert calls == [("eriktks/conll2003", None, "train"), ("someone/conll-dev", None, "validation")]
    want = json.loads((ner_run / "eval_results.json").read_text())
    assert json.loads((out / "eval_results.json").read_text())["validation"] == want["validation"]
    config = json.loads((out / "run.json").read_text())["config"]
    assert (config["train"], config["validation"]) == ("eriktks/conll2003", "someone/conll-dev")
    shown = CliRunner().invoke(app, ["evaluate", "ner", "--model", str(ner_run), "--data", "someone/conll-dev",
                                     "--json"])
    assert shown.exit_code == 0, shown.output
    assert {k: json.loads(shown.stdout)[k] for k in want["validation"]} == want["validation"]


def test_text_files_and_parquet_copies_are_read_without_importing_datasets(tmp_path):
    """`datasets` takes seconds to import; only a saved folder needs it."""
    import subprocess
    import sys

    copies = _ner_copies(tmp_path / "c", _synthetic(2, 1))
    conll = _conll(tmp_path / "t.txt", _synthetic(2, 1))
    squad = tmp_path / "s.json"
    squad.write_text(json.dumps({"data": [{"title": "t", "paragraphs": [{"context": "red", "qas": [
        {"id": "a", "question": "q", "answers": [{"text": "red", "answer_start": 0}]}]}]}]}))
    code = ("import sys\nfrom bertctl.data.ner import read_ner\nfrom bertctl.data.squad import read_squad\n"
            f"read_ner({str(conll)!r}, '--train')\nread_ner({str(copies['parquet'])!r}, '--train')\n"
            f"read_ner({str(copies['json'])!r}, '--train', label_names=['O', 'B-PER', 'I-PER', 'B-ORG', 'I-ORG', "
            "'B-LOC', 'I-LOC'])\n"
            f"read_squad({str(squad)!r})\nassert 'datasets' not in sys.modules, 'datasets imported'\n"
            f"read_ner({str(copies['saved'])!r}, '--train')\nassert 'datasets' in sys.modules\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
