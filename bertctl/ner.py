"""`bertctl evaluate ner` and `bertctl predict ner`: a token-classification model on CoNLL-2003-style data.

Also what fine-tuning shares with them, so a run's dev scores and `evaluate ner` agree: the task record, the
padded batches, one tag per word (from its first piece, as run_ner.py and the paper predict) computed in one
process or split over torchrun's ranks, and seqeval's entity-level scores. As run_ner.py, a word left without
a piece (cut by max_seq_length, or a word the tokenizer drops) is left out of the scores; `predict ner`
writes O for it.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from bertctl import training
from bertctl.checkpoint import Checkpoint, build_model, model_tokenizer, read_checkpoint
from bertctl.config_types import take_bool, take_names
from bertctl.data.batches import Ragged, pad_batch
from bertctl.data.ner import IGNORED, NerData, NerFeatures, check_known, check_tag_names, make_ner_features, read_ner
from bertctl.errors import UsageError
from bertctl.evaluate import (
    Scorer,
    check_scoring_flags,
    resolve_model_folder,
    run_scorer,
    scored_batches,
    sum_over_ranks,
)
from bertctl.files import json_text, new_file_named, user_path, write_text_atomic
from bertctl.metrics import entity_scores
from bertctl.submission import row_chunks

log = logging.getLogger(__name__)
TOKEN_ARCHITECTURE = "BertForTokenClassification"
NER_METRICS = ("precision", "recall", "f1", "accuracy")


@dataclass(frozen=True)
class NerTask:
    """NER as the fine-tuning loop sees a task: its tags (the head's outputs in order) and its metrics."""

    label_names: tuple[str, ...]
    name: str = "ner"
    metrics: tuple[str, ...] = NER_METRICS
    main_metric: str = "f1"
    is_regression: bool = False

    @property
    def num_labels(self) -> int:
        return len(self.label_names)

    @property
    def model_label_names(self) -> tuple[str, ...]:
        return self.label_names


# --- batches, predictions and scores --------------------------------------------------------------------------

def collate_tokens(features: NerFeatures, rows: np.ndarray, pad_id: int) -> dict[str, Tensor]:
    """The rows padded to the longest of them; their piece labels padded with -100 when the features have them."""
    padded = pad_batch([features.input_ids[r] for r in rows], None, pad_id)
    batch = {name: torch.from_numpy(array) for name, array in padded.items()}
    if features.labels is not None:
        labels = np.full(padded["input_ids"].shape, IGNORED, dtype=np.int64)  # (B, T)
        for i, r in enumerate(rows):
            labels[i, : len(features.labels[r])] = features.labels[r]
        batch["labels"] = torch.from_numpy(labels)
    return batch


def word_predictions(model: nn.Module, features: NerFeatures, pad_id: int, batch_size: int, device: torch.device,
                     precision: str, env: training.Distributed | None = None) -> Ragged:
    """Each sentence's tag id per word (argmax at its first piece), -1 for a word without a piece (under
    torchrun, every rank's); all the words' in one array, as the first pieces are."""
    firsts = features.first_piece
    out = np.zeros(len(firsts.values), dtype=np.int64)  # per word of every sentence: tag id + 1, 0 for none
    for rows, _, output in scored_batches(model, features, partial(collate_tokens, features, pad_id=pad_id),
                                          batch_size, device, precision, env, skip_padding=True):
        best = output.logits.float().argmax(-1).cpu().numpy()  # (B, T)
        for i, r in enumerate(rows):
            first = firsts[r]
            kept = first >= 0
            out[firsts.offsets[r]: firsts.offsets[r + 1]][kept] = best[i, first[kept]] + 1
    sum_over_ranks(out, env)
    return Ragged(out - 1, np.diff(firsts.offsets))


def scored_tags(data: NerData, predictions: Sequence[np.ndarray], labels: Sequence[str]
                ) -> tuple[list[list[str]], list[list[str]]]:
    """Gold and predicted tags of the words that have a prediction (run_ner.py leaves the others out)."""
    gold, found = [], []
    for tags, predicted in zip(data.tags or [], predictions, strict=True):
        kept = [(tag, labels[p]) for tag, p in zip(tags, predicted, strict=True) if p >= 0]
        gold.append([g for g, _ in kept])
        found.append([p for _, p in kept])
    return gold, found


def ner_scores(data: NerData, predictions: Sequence[np.ndarray], labels: Sequence[str]
               ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """seqeval's overall precision/recall/F1/accuracy and its figures per entity type."""
    return entity_scores(*scored_tags(data, predictions, labels))


def score_dev(model: nn.Module, prep: Any, batch_size: int, device: torch.device, precision: str,
              env: training.Distributed) -> dict[str, dict[str, float]]:
    """The fine-tuning loop's dev scores: the overall figures of each split."""
    results = {}
    for split, features in prep.dev.items():
        predictions = word_predictions(model, features, prep.tokenizer.pad_id, batch_size, device, precision, env)
        results[split] = ner_scores(features.data, predictions, prep.task.label_names)[0]
    return results


# --- fine-tuned models -------------------------------------------------------------------------------------

def read_ner_model(folder: Path) -> Checkpoint:
    """The checkpoint in `folder`, refused unless it has a trained token-classification head with named tags."""
    ckpt = read_checkpoint(folder)
    if "classifier" not in ckpt.parts or ckpt.architecture != TOKEN_ARCHITECTURE:
        raise UsageError(f"{folder} has no token-classification head (it is a {ckpt.architecture}); fine-tune "
                         f"it first: bertctl finetune ner --model {folder} --train train.txt ...")
    if not ckpt.labels:
        raise UsageError(f"{ckpt.config_file} has no id2label; a NER model names the tag of each output")
    check_tag_names(ckpt.labels, f"{ckpt.config_file} id2label")
    return ckpt


@dataclass
class NerReader:
    """A fine-tuned token classifier with the settings it is run with."""

    scorer: Scorer  # the model, tokenizer, max_seq_length, batch size and the run's precision
    labels: tuple[str, ...]  # the tag of each output
    label_names: tuple[str, ...] | None  # names of a jsonl file's integer tags

    def read(self, data: Path | str, need_tags: bool) -> NerData:
        read = read_ner(data, "--data", need_tags, self.label_names)
        check_known(read, self.labels, "--data", f"the model {self.scorer.folder}")
        return read

    def predict(self, data: NerData, device: str | None, precision: str | None) -> tuple[Ragged, int]:
        """Each sentence's tag id per word (-1: no prediction) and how many sentences max_seq_length cut. The
        model is placed first: a --device or --precision this machine cannot run is refused before any word is
        tokenized."""
        placed = self.scorer.place(device, precision)
        features = make_ner_features(self.scorer.tokenizer, data, None, self.scorer.max_seq_length)
        return word_predictions(self.scorer.model, features, self.scorer.tokenizer.pad_id, self.scorer.batch_size,
                                *placed), features.truncated


def open_ner_reader(path: Path | str, max_seq_length: int | None, batch_size: int | None,
                    label_names: str | Sequence[str] | None) -> NerReader:
    """The model in `path` (a multi-seed run: its best seed); settings are the flags, else its run.json's, else
    the defaults; a jsonl file's integer tags are named by `label_names`, else the run's, else the model's."""
    max_seq_length, batch_size = check_scoring_flags(max_seq_length, batch_size)
    folder = resolve_model_folder(path)
    ckpt = read_ner_model(folder)
    model = build_model(ckpt, TOKEN_ARCHITECTURE, share_weights=True)
    scorer, record = run_scorer(folder, model, model_tokenizer(ckpt), max_seq_length, batch_size)
    saved = record.get("config", {})
    names = take_names("--label-names", label_names) if label_names is not None else \
        saved.get("label_names") or ckpt.labels
    return NerReader(scorer, tuple(ckpt.labels or ()), tuple(names) if names else None)


def evaluate_ner(model: Path | str, data: Path | str, batch_size: int | None = None,
                 max_seq_length: int | None = None, label_names: str | Sequence[str] | None = None,
                 device: str | None = None, precision: str | None = None) -> dict[str, Any]:
    """{"precision", "recall", "f1", "accuracy": overall figures (seqeval's), "types": {type: {precision, recall,
    f1, number}}, "sentences", "sentences_cut": those with words past max_seq_length}. With the run's settings
    its own validation file gives exactly the numbers in its eval_results.json."""
    reader = open_ner_reader(model, max_seq_length, batch_size, label_names)
    read = reader.read(data, need_tags=True)
    predictions, cut = reader.predict(read, device, precision)
    overall, types = ner_scores(read, predictions, reader.labels)
    return {**overall, "types": types, "sentences": len(read), "sentences_cut": cut}


def print_ner_results(data: Path | str, results: dict[str, Any], as_json: bool = False) -> None:
    if as_json:
        sys.stdout.write(json_text({"task": "ner", "data": str(data), **results}) + "\n")
        return
    for name in NER_METRICS:
        sys.stdout.write(f"ner {name}: {results[name]:.4f}\n")
    for kind, figures in results["types"].items():
        sys.stdout.write(f"ner {kind}: precision {figures['precision']:.4f}, recall {figures['recall']:.4f}, "
                         f"f1 {figures['f1']:.4f}, {figures['number']} entities\n")
    if results["sentences_cut"]:
        sys.stdout.write(f"ner: {results['sentences_cut']} of {results['sentences']} sentences were cut to "
                         "--max-seq-length; their words past the cut are left out of the scores\n")


_OTHER_FORMATS = (".json", ".csv", ".tsv", ".parquet")  # names of formats predict ner does not write


def predict_ner(model: Path | str, data: Path | str, out: Path | str, batch_size: int | None = None,
                max_seq_length: int | None = None, label_names: str | Sequence[str] | None = None,
                device: str | None = None, precision: str | None = None, overwrite: bool = False) -> Path:
    """Tag every word of `data` and write `out` (no extension: .txt), once all are tagged; returns the file:
    CoNLL text (the word, its gold tag when the data has one, the predicted tag; a blank line after each
    sentence), or with a .jsonl name one {"tokens", "ner_tags" (gold, when given), "predictions"} object a line.
    A word without a prediction (cut by max_seq_length) is tagged O."""
    if user_path(out, "--out").suffix.lower() in _OTHER_FORMATS:  # p.json would hold CoNLL text: refused, not misnamed
        raise UsageError(f"--out {out}: predict ner writes CoNLL text, or JSON lines with a .jsonl name; name it "
                         ".txt or .jsonl")
    overwrite = take_bool("overwrite", overwrite)
    path = new_file_named(out, ".txt", overwrite)
    reader = open_ner_reader(model, max_seq_length, batch_size, label_names)
    read = reader.read(data, need_tags=False)
    if path.resolve() == read.path.resolve():
        raise UsageError(f"--out {path}: is the input file")
    conll = path.suffix.lower() != ".jsonl"
    if conll and (bad := _word_with_space(read)) is not None:
        raise UsageError(f"--out {path}: sentence {bad[0]} has the word {bad[1]!r}, which a CoNLL line cannot hold "
                         "(its columns are split at spaces); name the output .jsonl")
    if conll and (empty := next((n for n, words in enumerate(read.words, 1) if not words), None)) is not None:
        raise UsageError(f"--out {path}: sentence {empty} has no words, which a CoNLL file cannot hold (a blank "
                         "line ends a sentence); name the output .jsonl")
    predictions, cut = reader.predict(read, device, precision)
    if cut:
        log.warning("warning: %d of %d sentences were cut to --max-seq-length; their words past the cut are tagged "
                    "O (a longer --max-seq-length, up to the model's positions, tags them)", cut, len(read))
    write_text_atomic(path, (_conll if conll else _jsonl)(read, predictions, reader.labels), overwrite)
    return path


def _word_with_space(data: NerData) -> tuple[int, str] | None:
    """(sentence number from 1, word) of the first word that is empty or holds white space."""
    return next(((number, word) for number, words in enumerate(data.words, 1) for word in words
                 if not word or len(word.split()) != 1 or word != word.strip()), None)


def _tags(predicted: np.ndarray, labels: Sequence[str]) -> list[str]:
    """A sentence's predicted tags, O for a word without a prediction."""
    return [labels[p] if p >= 0 else "O" for p in predicted.tolist()]


def _conll(data: NerData, predictions: Ragged, labels: Sequence[str]) -> Iterator[str]:
    """A blank line between sentences (none after the last); WRITE_CHUNK sentences at a time, so the text (and
    the tags as strings) of every sentence are never all held."""
    gold = data.tags or [None] * len(data.words)
    for rows in row_chunks(len(data.words)):
        yield "".join(("\n" if row else "") + _conll_lines(data.words[row], gold[row], _tags(predictions[row], labels))
                      for row in rows)


def _conll_lines(words: list[str], tags: list[str] | None, guesses: list[str]) -> str:
    return "".join(" ".join([word, *([tag] if tags else []), guess]) + "\n"
                   for word, tag, guess in zip(words, tags or words, guesses, strict=True))


def _jsonl(data: NerData, predictions: Ragged, labels: Sequence[str]) -> Iterator[str]:
    gold = data.tags or [None] * len(data.words)
    for rows in row_chunks(len(data.words)):
        yield "".join(json.dumps({"tokens": data.words[row], **({"ner_tags": gold[row]} if gold[row] else {}),
                                  "predictions": _tags(predictions[row], labels)}, ensure_ascii=False) + "\n"
                      for row in rows)
