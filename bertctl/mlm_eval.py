"""`bertctl evaluate mlm`: a pre-trained model's masked-LM loss and accuracy (and NSP/SOP accuracy) on a corpus.

The figures come from pretrain's own validation pass (`pretraining_objective.score_pretraining`) over the
batches pretrain's collator makes: the first --samples rows of the split in order, with a static corpus's
stored masks, or a dynamic corpus's masks drawn per row from (--seed, epoch 0, row) as pretrain draws them for
its validation rows. So a run's checkpoint scored on the run's corpus with the run's --seed and --eval-samples
gives the validation row the run logged at that step, and any two models scored with the same flags are scored
on the same masked tokens.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

from bertctl import training
from bertctl.checkpoint import Checkpoint, build_model, read_checkpoint, transformers_architecture
from bertctl.config import PretrainConfig, check_seeds
from bertctl.config_types import any_case, take_int
from bertctl.corpus_fit import corpus_tokenizer, refuse_unfit_corpus, says_its_settings
from bertctl.data.batches import Collator
from bertctl.data.masking import masking_options
from bertctl.errors import BertctlError, UsageError, quoted
from bertctl.files import json_text, read_json_object, user_path
from bertctl.hub import path_as_given
from bertctl.pretraining_objective import score_pretraining
from bertctl.tokenizer import BertTokenizer
from bertctl.tokenizer_folder import has_tokenizer

log = logging.getLogger(__name__)

SPLITS = ("validation", "train")
DEFAULT_SAMPLES = PretrainConfig.eval_samples  # pretrain's --eval-samples: a run's validation rows by default
DEFAULT_SEED = PretrainConfig.seed  # pretrain's --seed, which keys its validation masks
DEFAULT_BATCH_SIZE = 32


def evaluate_mlm(model: Path | str, corpus: Path | str, split: str = "validation", samples: int | None = None,
                 batch_size: int | None = None, seed: int | None = None, device: str | None = None,
                 precision: str | None = None) -> dict[str, Any]:
    """{mlm_loss, mlm_accuracy[, nsp_accuracy | sop_accuracy], sequences, masked_tokens, split, masking[, seed]}
    of `model` on the first `samples` rows of the corpus's `split` (None: 10,000; 0: all of them).

    NSP/SOP accuracy is there when the corpus holds the labels and the model its NSP head (else a note says why
    not); `seed` keys a dynamic corpus's masks (None: 42, pretrain's default) and is left out for static ones.
    """
    samples, batch_size, seed = _checked_numbers(samples, batch_size, seed)
    split = any_case(split)
    run_on = training.pick_device(device)
    precision = training.resolve_precision("auto" if precision is None else precision, run_on)
    given = path_as_given(model)  # "./x" that is not there is a missing folder, never the hub repository x
    if given is None:
        raise UsageError("--model: no model given; pass a pre-trained model folder with its MLM head")
    from bertctl.corpus import load_corpus

    ckpt = read_checkpoint(given)
    corpus = user_path(corpus, "--corpus")
    tables, manifest = load_corpus(corpus)
    table = _split(tables, split, corpus)
    if "mlm" not in ckpt.parts:
        kind = transformers_architecture(ckpt.architecture, ckpt.parts)
        raise UsageError(f"{model} has no MLM head (it is a {kind}); evaluate mlm needs a pre-trained model with "
                         "its MLM head, e.g. a bertctl pretrain folder or a BertForPreTraining/BertForMaskedLM")
    refuse_unfit_corpus(ckpt.config, manifest, corpus, f"--model {model}")
    tokenizer = _tokenizer(ckpt.path, model, ckpt.config.vocab_size, corpus, manifest)
    net, table = _scoring_model(ckpt, model, table, manifest)
    training.enable_fast_math(run_on)  # as pretrain validates on CUDA
    dynamic = manifest["masking"] == "dynamic"
    masking = masking_options(tokenizer, manifest["masked_lm_prob"], manifest["max_predictions_per_seq"],
                              manifest["whole_word_masking"]) if dynamic else None
    scores = score_pretraining(net.to(run_on), table, Collator(tokenizer.pad_id, masking, seed), batch_size,
                               samples or len(table), training.Distributed(device=run_on), precision, show=True)
    result: dict[str, Any] = {"mlm_loss": scores.mlm_loss, "mlm_accuracy": scores.mlm_accuracy}
    if scores.nsp_accuracy is not None:
        result[f"{_pair_task(manifest)}_accuracy"] = scores.nsp_accuracy
    result |= {"sequences": scores.sequences, "masked_tokens": scores.masked_tokens, "split": split,
               "masking": manifest["masking"]}
    if dynamic:
        result["seed"] = seed
    _say_the_runs_settings(ckpt.path, manifest, split, len(table), scores.sequences, seed if dynamic else None)
    return result


def _checked_numbers(samples: int | None, batch_size: int | None, seed: int | None) -> tuple[int, int, int]:
    """--samples (0: all rows), --batch-size and --seed as whole numbers, their defaults for None."""
    samples = DEFAULT_SAMPLES if samples is None else take_int("--samples", samples, minimum=0)
    batch_size = DEFAULT_BATCH_SIZE if batch_size is None else take_int("--batch-size", batch_size, minimum=1)
    seed = DEFAULT_SEED if seed is None else take_int("--seed", seed, own_range=True)
    check_seeds("--seed", (seed,))
    return samples, batch_size, seed


def _split(tables: Any, split: str, corpus: Path) -> Any:
    if not isinstance(split, str) or split not in SPLITS:  # `in` compares a DataFrame cell by cell: a ValueError
        raise UsageError(f"--split {quoted(split)}: choose validation or train")
    if split not in tables:
        raise UsageError(f"corpus {corpus} has no validation split (it was built without --validation-fraction); "
                         "pass --split train, or rebuild it with --validation-fraction 0.01")
    if len(tables[split]) == 0:
        raise UsageError(f"corpus {corpus}: its {split} split has no rows; score the other split")
    return tables[split]


def _scoring_model(ckpt: Checkpoint, model: Path | str, table: Any, manifest: dict[str, Any]) -> tuple[nn.Module, Any]:
    """The model with its MLM head, and its NSP head where the rows carry NSP/SOP labels; a model without that
    head gets the rows without their labels (a note says so), as an MLM-only corpus would give them."""
    labelled = "next_sentence_label" in table.column_names
    with_nsp = labelled and "nsp" in ckpt.parts
    if labelled and not with_nsp:
        log.warning("note: %s has no NSP head, so its %s accuracy is left out", model, _pair_task(manifest))
        table = table.remove_columns("next_sentence_label")
    with torch.random.fork_rng(devices=[]):  # as fill: building a model must not move the caller's generator
        net = build_model(ckpt, "BertForPreTraining" if with_nsp else "BertForMaskedLM", share_weights=True)
    return net, table


def _pair_task(manifest: dict[str, Any]) -> str:
    """What the corpus's sentence-pair label means: sentence order (ALBERT's SOP) or next sentence (BERT's)."""
    return "sop" if manifest["objective"] == "mlm+sop" else "nsp"


def _tokenizer(folder: Path, model: Path | str, rows: int, corpus: Path, manifest: dict[str, Any]) -> BertTokenizer:
    """The corpus's tokenizer, refused (by pretrain's check) unless the model's own encodes text the same way;
    a model folder without tokenizer files is taken to have learned the corpus's ids."""
    own = corpus / "tokenizer"
    candidates = [(f"corpus {corpus}'s tokenizer", own, True)] if has_tokenizer(own) else []
    if has_tokenizer(folder):
        candidates.append((f"--model {model}'s tokenizer", folder, says_its_settings(folder)))
    elif candidates:
        log.warning("note: %s has no tokenizer files; its ids are taken to be those of corpus %s", model, corpus)
    if not candidates:
        raise UsageError(f"neither --model {model} nor corpus {corpus} holds a tokenizer; copy the one the corpus "
                         f"was built with into {own}")
    tokenizer = corpus_tokenizer(corpus, manifest, candidates, "score it on a corpus built with its tokenizer "
                                 f"(bertctl corpus build TEXT --tokenizer {model} --out DIR)")
    if tokenizer.vocab_size > rows:
        raise UsageError(f"corpus {corpus}'s tokenizer has {tokenizer.vocab_size} tokens but --model {model} has "
                         f"{rows} embedding rows; score it on a corpus built with its own tokenizer")
    return tokenizer


def _say_the_runs_settings(folder: Path, manifest: dict[str, Any], split: str, rows: int, sequences: int,
                           seed: int | None) -> None:
    """A checkpoint of a pretrain run (RUN/final, RUN/step-N) scored on the run's corpus on other rows, or with
    other masks (`seed`: None for stored ones), than its validation rows: a note says which flags give them."""
    from bertctl.corpus import same_instances

    record_file = folder.parent / "run.json"
    if split != "validation" or not record_file.is_file():
        return
    try:
        record = read_json_object(record_file)
    except BertctlError:  # a damaged record only loses the note
        return
    config = record.get("config")
    if not isinstance(config, dict) or not all(isinstance(config.get(k), int) for k in ("eval_every", "eval_samples",
                                                                                       "steps")):
        return
    validated = 0 < config["eval_every"] <= config["steps"]
    if not validated or not same_instances(record.get("corpus_manifest") or {}, manifest):
        return
    run_seed, run_samples = config.get("seed"), config["eval_samples"]
    if min(run_samples, rows) == sequences and seed in (None, run_seed):
        return
    flags = f"--samples {run_samples}" + ("" if seed is None else f" --seed {run_seed}")
    log.warning("note: the run in %s validated on other rows or masks; pass %s to score its validation rows",
                folder.parent, flags)


def print_mlm_results(model: Path | str, corpus: Path | str, result: dict[str, Any], as_json: bool = False) -> None:
    """One JSON object, or one line per figure."""
    if as_json:
        sys.stdout.write(json_text({"model": str(model), "corpus": str(corpus), **result}) + "\n")
        return
    for name in ("mlm_loss", "mlm_accuracy", "nsp_accuracy", "sop_accuracy", "sequences", "masked_tokens"):
        if name in result:
            value = result[name]
            sys.stdout.write(f"{result['split']} {name}: {value if isinstance(value, int) else f'{value:.4f}'}\n")
