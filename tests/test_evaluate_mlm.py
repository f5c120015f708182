"""`evaluate mlm`: pretrain's validation figures for any model with an MLM head, equal to the run's rows and to
transformers' loss on the same masked batches; refusals in one line."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from test_pretrain import WORDS, _model_folder, _write_text, small_run
from typer.testing import CliRunner

from bertctl.cli import app
from bertctl.config import CorpusConfig
from bertctl.errors import UsageError
from bertctl.tokenizer import BertTokenizer

pytestmark = pytest.mark.usefixtures("one_thread")


def _corpus(root: Path, name: str, **settings) -> Path:
    from bertctl.corpus import build_corpus

    values = {"max_seq_length": 32, "validation_fraction": 0.2, "workers": 1, "seed": 1, **settings}
    build_corpus(CorpusConfig(inputs=(str(root / "docs.txt"),), tokenizer=root / "tok", out=root / name, **values))
    return root / name


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> dict[str, Path]:
    """MLM+NSP corpora with dynamic (not the default 15%) and static masks, and one without a validation split."""
    root = tmp_path_factory.mktemp("evaluate_mlm")
    BertTokenizer.from_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", *WORDS]).save(root / "tok")
    _write_text(root / "docs.txt", documents=60, seed=3)
    return {"dynamic": _corpus(root, "dynamic", masked_lm_prob=0.3),
            "static": _corpus(root, "static", masking="static"),
            "no_validation": _corpus(root, "no_validation", validation_fraction=0.0)}


def _cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["evaluate", "mlm", *args])
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("masking", ["dynamic", "static"])
def test_a_runs_checkpoints_score_its_validation_rows(corpora, tmp_path, masking):
    """Same checkpoint, corpus, rows and seed: the figures pretrain logged at that step, whatever the batch size."""
    from bertctl.mlm_eval import evaluate_mlm
    from bertctl.pretrain import pretrain

    corpus = corpora[masking]
    final = pretrain(small_run(corpus, tmp_path / "run", steps=6, save_every=3, eval_every=3, eval_samples=14,
                               seed=7))
    rows = {row["step"]: row for row in map(json.loads, (tmp_path / "run" / "metrics.jsonl").read_text().splitlines())
            if "val_mlm_loss" in row}
    assert sorted(rows) == [3, 6]
    for step, folder in ((3, tmp_path / "run" / "step-000003"), (6, final)):
        for batch_size in (8, None):  # the run's micro-batch, and the default 32: other padding, same figures
            scores = evaluate_mlm(folder, corpus, samples=14, seed=7, batch_size=batch_size, device="cpu")
            assert scores["sequences"] == 14 and scores["masked_tokens"] > 14
            assert scores["mlm_loss"] == pytest.approx(rows[step]["val_mlm_loss"], abs=1e-6)
            assert scores["mlm_accuracy"] == pytest.approx(rows[step]["val_mlm_accuracy"], abs=1e-6)
            assert scores["nsp_accuracy"] == pytest.approx(rows[step]["val_nsp_accuracy"], abs=1e-6)
    assert scores["masking"] == masking and ("seed" in scores) == (masking == "dynamic")
    other_seed = evaluate_mlm(final, corpus, samples=14, seed=8, device="cpu")
    assert (other_seed["mlm_loss"] != scores["mlm_loss"]) == (masking == "dynamic")  # stored masks take no seed

    code, out, err = _cli("--model", str(final), "--corpus", str(corpus), "--device", "cpu", "--json")
    assert code == 0, err
    said = json.loads(out)
    assert said["model"] == str(final) and said["sequences"] == 25  # the whole split: fewer rows than 10,000
    assert f"pass --samples 14{' --seed 7' if masking == 'dynamic' else ''} to score its validation rows" in err
    code, _, err = _cli("--model", str(final), "--corpus", str(corpus), "--device", "cpu", "--samples", "14",
                        "--seed", "7")
    assert code == 0 and "note" not in err, err


def test_the_note_on_the_runs_validation_rows_is_said_only_where_other_rows_were_scored(corpora, tmp_path, caplog):
    """No note for a run that never validated, for the train split, or for a run whose --eval-samples passed the
    split's 25 rows (all of them are its validation rows); a note for fewer rows than the run's."""
    from bertctl.mlm_eval import evaluate_mlm
    from bertctl.pretrain import pretrain

    corpus = corpora["static"]
    never = pretrain(small_run(corpus, tmp_path / "never", steps=2, save_every=0, eval_every=3))
    every = pretrain(small_run(corpus, tmp_path / "every", steps=2, save_every=0, eval_every=2, eval_samples=1000))
    for model, options in ((never, {"samples": 5}), (every, {}), (every, {"split": "train", "samples": 5})):
        caplog.clear()
        evaluate_mlm(model, corpus, device="cpu", **options)
        assert "note" not in caplog.text, (model, options)
    evaluate_mlm(every, corpus, device="cpu", samples=5)
    assert "pass --samples 1000 to score its validation rows" in caplog.text


def _transformers_model(folder: Path, tokenizer: Path, architecture: str, positions: int = 64,
                        tied: bool = True) -> Path:
    """A random transformers model; untied, its decoder and the decoder's bias are matrices of their own."""
    transformers = pytest.importorskip("transformers")
    import torch

    from bertctl.tokenizer_folder import load_tokenizer

    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=load_tokenizer(tokenizer).vocab_size, hidden_size=32,
                                     num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                     max_position_embeddings=positions, tie_word_embeddings=tied)
    model = getattr(transformers, architecture)(config)
    with torch.no_grad():
        model.cls.predictions.bias.normal_(0, 1.0)  # used tied, unused untied: a mix-up shows
        if not tied:
            model.cls.predictions.decoder.bias.normal_(0, 1.0)
    model.save_pretrained(folder)
    shutil.copytree(tokenizer, folder, dirs_exist_ok=True)
    return folder


@pytest.mark.parametrize(("architecture", "tied"), [("BertForPreTraining", True), ("BertForMaskedLM", True),
                                                     ("BertForPreTraining", False), ("BertForMaskedLM", False)])
def test_figures_equal_transformers_on_the_same_masked_rows(corpora, tmp_path, architecture, tied, caplog):
    """transformers' model from the same folder, fed each row alone (no padding) with pretrain's masks for it:
    its loss over all masked tokens, accuracies and NSP accuracy, with the decoder tied to the embeddings or not
    (tie_word_embeddings false). A model without an NSP head has no NSP figure, and a note says so."""
    import torch
    import torch.nn.functional as F
    import transformers

    from bertctl.corpus import load_corpus
    from bertctl.data.batches import Collator
    from bertctl.data.masking import masking_options
    from bertctl.mlm_eval import evaluate_mlm
    from bertctl.tokenizer_folder import load_tokenizer

    corpus = corpora["dynamic"]
    folder = _transformers_model(tmp_path / "hf", corpus / "tokenizer", architecture, tied=tied)
    scores = evaluate_mlm(folder, corpus, samples=0, batch_size=5, seed=3, device="cpu")

    tables, manifest = load_corpus(corpus)
    table = tables["validation"]
    tokenizer = load_tokenizer(corpus / "tokenizer")
    collate = Collator(tokenizer.pad_id, masking_options(tokenizer, manifest["masked_lm_prob"],
                                                         manifest["max_predictions_per_seq"],
                                                         manifest["whole_word_masking"]), 3)
    theirs = getattr(transformers, architecture).from_pretrained(folder).eval()
    loss_sum, masked, correct, nsp_correct = 0.0, 0, 0, 0
    with torch.no_grad():
        for row in range(len(table)):
            batch = collate(table[[row]], np.zeros(1, dtype=np.int64), np.array([row]))
            out = theirs(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                         attention_mask=batch["attention_mask"])
            logits = (out.prediction_logits if architecture == "BertForPreTraining" else out.logits)[0]
            labels = batch["mlm_labels"][0]
            loss_sum += float(F.cross_entropy(logits, labels, reduction="sum"))  # -100 ignored
            masked += int((labels != -100).sum())
            correct += int((logits.argmax(-1) == labels).sum())
            if architecture == "BertForPreTraining":
                nsp_correct += int(out.seq_relationship_logits.argmax(-1) == batch["next_sentence_label"])
    assert scores["sequences"] == len(table) and scores["masked_tokens"] == masked
    assert scores["mlm_loss"] == pytest.approx(loss_sum / masked, abs=1e-5)
    assert scores["mlm_accuracy"] == correct / masked
    if architecture == "BertForPreTraining":
        assert scores["nsp_accuracy"] == nsp_correct / len(table)
    else:
        assert "nsp_accuracy" not in scores
        assert "has no NSP head, so its nsp accuracy is left out" in caplog.text


def test_the_train_split_and_all_its_rows(corpora, tmp_path):
    from bertctl.corpus import load_corpus

    corpus = corpora["no_validation"]
    folder = _model_folder(tmp_path / "model", corpus / "tokenizer")
    code, out, err = _cli("--model", str(folder), "--corpus", str(corpus), "--split", "Train", "--samples", "0",
                          "--device", "CPU", "--precision", "FP32")  # names of a fixed set, in any case
    assert code == 0, err
    lines = dict(line.split(": ") for line in out.splitlines())
    assert list(lines) == ["train mlm_loss", "train mlm_accuracy", "train nsp_accuracy", "train sequences",
                           "train masked_tokens"]
    assert int(lines["train sequences"]) == len(load_corpus(corpus)[0]["train"])
    assert 2.0 < float(lines["train mlm_loss"]) < 6.0


@pytest.mark.parametrize(("objective", "pair_figure"), [("mlm+sop", "sop_accuracy"), ("mlm", None)])
def test_the_pair_figure_is_named_by_the_corpus_objective(corpora, tmp_path, objective, pair_figure, caplog):
    from bertctl.mlm_eval import evaluate_mlm

    corpus = _corpus(corpora["dynamic"].parent, objective.replace("+", "_"), objective=objective)
    scores = evaluate_mlm(_model_folder(tmp_path / "model", corpus / "tokenizer"), corpus, device="cpu")
    assert [k for k in scores if k.endswith("_accuracy")] == ["mlm_accuracy", *([pair_figure] if pair_figure else [])]
    assert "note" not in caplog.text


def test_a_split_that_is_no_name_is_one_line(corpora, tmp_path):
    """A DataFrame or Series for `split` was a bare ValueError (its truth value, from `in`)."""
    import pandas as pd

    from bertctl.mlm_eval import evaluate_mlm

    model = _model_folder(tmp_path / "model", corpora["dynamic"] / "tokenizer")
    for split, shown in ((pd.DataFrame({"split": ["train", "validation"]}), "a DataFrame"), (["train"], "['train']")):
        with pytest.raises(UsageError, match=rf"^--split {re.escape(shown)}: choose validation or train$"):
            evaluate_mlm(model, corpora["dynamic"], split=split, device="cpu")


def test_the_python_function_is_exported_where_evaluate_glue_is():
    import bertctl
    import bertctl.mlm_eval

    assert bertctl.evaluate_mlm is bertctl.mlm_eval.evaluate_mlm and "evaluate_mlm" in dir(bertctl)


@pytest.mark.parametrize(("case", "said"), [
    ("no_mlm_head", "has no MLM head (it is a BertModel)"),
    ("untied_without_decoder", "sets tie_word_embeddings false but the weights hold no cls.predictions.decoder"),
    ("other_vocabulary", "'s tokenizer is not the one corpus"),
    ("other_casing", "do_lower_case False vs True"),
    ("too_long", "has sequences of 32 tokens but --model"),
    ("no_validation", "has no validation split (it was built without --validation-fraction); pass --split train"),
    ("bad_split", "--split 'test': choose validation or train"),
    ("bad_samples", "--samples must be at least 0"),
    ("negative_seed", "--seed -1: give a whole number from 0 to 4294967295"),
    ("huge_seed", "--seed 4294967296: give a whole number from 0 to 4294967295"),  # the other commands' words
    ("empty_precision", "--precision '': choose one of auto, fp32, bf16, fp16"),
])
def test_refusals_are_one_line(corpora, tmp_path, case, said):
    corpus = corpora["no_validation" if case == "no_validation" else "dynamic"]
    own = corpus / "tokenizer"
    if case == "other_vocabulary":
        BertTokenizer.from_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "x"]).save(tmp_path / "tok")
        folder = _model_folder(tmp_path / "model", tmp_path / "tok")
    elif case == "too_long":
        folder = _transformers_model(tmp_path / "model", own, "BertForPreTraining", positions=16)
    else:
        architecture = "BertModel" if case == "no_mlm_head" else "BertForPreTraining"
        casing = {"do_lower_case": False} if case == "other_casing" else {}
        folder = _model_folder(tmp_path / "model", own, architecture=architecture, **casing)
    if case == "untied_without_decoder":  # transformers would draw the decoder at random
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": False}))
    flags = {"bad_split": ["--split", "test"], "bad_samples": ["--samples", "-1"], "negative_seed": ["--seed", "-1"],
             "huge_seed": ["--seed", "4294967296"], "empty_precision": ["--precision", ""]}.get(case, [])
    code, out, err = _cli("--model", str(folder), "--corpus", str(corpus), "--device", "cpu", *flags)
    assert code == 2, (out, err)
    assert said in err and len(err.strip().splitlines()) == 1, err
    assert out == ""
