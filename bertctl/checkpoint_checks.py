"""The checks read_checkpoint makes of a model folder before anything is built from it.

config.json's keys besides BertConfig's, every encoder weight present with the shape config.json gives it, the
layer count, heads that fit the encoder: each refusal names the file at fault and what to fix, rather than a
model that loads with a weight drawn at random or fails deep in torch. Kept apart from checkpoint.py, which
stays the one entry point that reads and writes model folders.
"""

from __future__ import annotations

import numbers
import re
import reprlib
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from bertctl.checkpoint_names import part_of, to_transformers_names
from bertctl.config import BertConfig
from bertctl.errors import UsageError
from bertctl.model import ARCHITECTURES, Bert
from bertctl.model_building import shapes_only

PROBLEM_TYPES = ("regression", "single_label_classification", "multi_label_classification")  # transformers'
_OTHER_KEYS = {"architectures": (list, "a list of class names"), "bertctl": (dict, "a mapping"),
               "problem_type": (str, "a string")}  # id2label: checked with the head it must fit
# The config.json fields that give an encoder weight its shape (our names, within `bert.`); others: hidden_size.
_SHAPE_FIELDS = [(r"embeddings\.word\.", ("vocab_size", "hidden_size")),
                 (r"embeddings\.position\.", ("max_position_embeddings", "hidden_size")),
                 (r"embeddings\.token_type\.", ("type_vocab_size", "hidden_size")),
                 (r"layers\.\d+\.ffn_", ("intermediate_size", "hidden_size"))]


def check_other_keys(config_file: Path, raw: dict[str, Any]) -> None:
    """config.json keys besides BertConfig's that bertctl reads: a hand-edited wrong type is one line here."""
    for key, (kind, said) in _OTHER_KEYS.items():
        value = raw.get(key)
        if value is not None and not isinstance(value, kind):
            raise UsageError(f"{config_file}: {key} must be {said}, got {value!r}; fix or remove it")
    problem_type = raw.get("problem_type")
    if problem_type is not None and problem_type not in PROBLEM_TYPES:  # transformers 4 refuses it too
        raise UsageError(f"{config_file}: problem_type {problem_type!r} is not one of {', '.join(PROBLEM_TYPES)}; "
                         f"fix or remove it")
    if raw.get("classifier_dropout") is not None:  # transformers 5's config refuses "x" or true for every head
        dropout_rate(raw["classifier_dropout"], config_file, any_number=True)


def dropout_rate(value: Any, config_file: Path | None = None, *, any_number: bool = False) -> float:
    """A classifier_dropout argument, or config.json's: a number in [0, 1] (any number with `any_number`: a head
    without dropout never checks the range), or a one-line error (torch's is a TypeError naming no file; `true`
    would drop every input)."""
    number = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not number or not (any_number or 0 <= value <= 1):
        where, fix = (f"{config_file}: ", f"; fix {config_file.name}") if config_file else ("", "")
        raise UsageError(f"{where}classifier_dropout must be a number in [0, 1]{' or null' if config_file else ''}, "
                         f"got {reprlib.repr(value)}{fix}")
    return float(value)


def check_encoder(config_file: Path, weights_file: Path, in_file: set[str], config: BertConfig,
                  raw: dict[str, Any], state: dict[str, Tensor]) -> None:
    """Every encoder weight must be there (the pooler and the heads are optional), with the shape config.json
    gives it: build_model relies on it. A config.json that lacks vocab_size, hidden_size ... gets BERT-base's
    defaults; say so here, where the file is at fault, rather than later as a tokenizer that does not fit the
    model or a weight that does not load. `in_file`: the file's own names, to name what is missing as it would."""
    with shapes_only():
        expected = Bert(config, add_pooler=False).state_dict()
    _check_layer_count(config_file, config, raw, state)
    bare = not any(name.startswith("bert.") for name in in_file)  # a BertModel file: names without the prefix
    missing = [name for key, target in expected.items() if f"bert.{key}" not in state
               for name in to_transformers_names({f"bert.{key}": target}, bare=bare)
               if name not in in_file]  # of Q, K and V, only the absent ones
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise UsageError(f"{weights_file}: missing encoder parameter{'s' * (len(missing) > 1)} {shown} (is the "
                           "file complete? re-download or re-save it)")
    for key, target in expected.items():  # embeddings first: a wrong hidden_size is blamed there
        found = state[f"bert.{key}"]
        if found.shape == target.shape:
            continue
        name, stored = next(iter(to_transformers_names({f"bert.{key}": found}, bare=bare).items()))
        shaped_by = next((f for pattern, f in _SHAPE_FIELDS if re.match(pattern, key)), ("hidden_size",))
        said = ", ".join(f"{f} {getattr(config, f)}" + ("" if f in raw else " (not set: the default)")
                         for f in shaped_by)
        raise UsageError(f"{config_file} says {said}, but the weights hold {name} of shape "
                         f"{tuple(stored.shape)}; fix {config_file.name}")


def check_heads(weights_file: Path, in_file: set[str], config: BertConfig, state: dict[str, Tensor]) -> None:
    """The pooler and every head must fit the encoder config.json describes (its shape was checked first), as
    transformers requires: build_model would otherwise create a head of another shape afresh, at random (fill,
    pretrain --init-from). Only a classifier may have another number of outputs (fine-tuning on other labels)."""
    with shapes_only():  # untied, so that a decoder in the file is checked too
        expected = {**ARCHITECTURES["BertForPreTraining"](config.replace(tie_word_embeddings=False)).state_dict(),
                    **ARCHITECTURES["BertForQuestionAnswering"](config).state_dict()}
    classifier = state.get("classifier.weight")
    if classifier is not None:
        rows = classifier.shape[0] if classifier.ndim else 0
        expected.update({"classifier.weight": torch.empty(rows, config.hidden_size, device="meta"),
                         "classifier.bias": torch.empty(rows, device="meta")})
    bare = not any(name.startswith("bert.") for name in in_file)
    for key, found in state.items():
        target = expected.get(key)
        if part_of(key) is None or target is None or found.shape == target.shape:
            continue
        name = next(iter(to_transformers_names({key: found}, bare=bare)))
        raise UsageError(f"{weights_file}: {name} has shape {tuple(found.shape)} but the model its config.json "
                         f"describes needs {tuple(target.shape)} ({_shape_remedy(key, found)})")


def _shape_remedy(key: str, found: Tensor) -> str:
    """A question-answering head of other than 2 outputs is whole but no SQuAD model (transformers' own cannot run
    it: its start/end split needs 2); any other shape that disagrees is most often a file cut short."""
    if key.startswith("qa_outputs.") and found.ndim and found.shape[0] != 2:
        return (f"a question-answering head gives 2 outputs, a start and an end score; this one gives "
                f"{found.shape[0]}: not a SQuAD model, fine-tune one with `bertctl finetune squad`")
    return "is the file complete? re-download or re-save it"


def _check_layer_count(config_file: Path, config: BertConfig, raw: dict[str, Any],
                       state: dict[str, Tensor]) -> None:
    """Layers in the weights beyond config.json's num_hidden_layers would be dropped unread, too few would be
    reported as missing parameters: either way the config is at fault."""
    held = {int(m.group(1)) for key in state if (m := re.match(r"bert\.layers\.(\d+)\.", key))}
    count = config.num_hidden_layers
    if held and (max(held) >= count or (len(held) < count and held == set(range(len(held))))):
        unset = "" if "num_hidden_layers" in raw else " (not set: the default)"
        raise UsageError(f"{config_file} says num_hidden_layers {count}{unset}, but the weights hold "
                         f"{max(held) + 1} layers; fix {config_file.name}")
