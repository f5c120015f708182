"""The one place that reads and writes model folders, mapping transformers' parameter names to ours.

A model folder is what transformers loads as it is: config.json (plus a `bertctl` block), model.safetensors
with transformers' names, and the tokenizer files. We read transformers' folders too: safetensors or
pytorch_model.bin (weights_only), single or sharded, fp16/bf16 upcast to fp32, with or without the `bert.` prefix,
legacy `gamma`/`beta` names, tied, untied or absent decoder weights and saved buffers; Google's TensorFlow
checkpoints (bertctl.tf_checkpoint reads them into transformers' names) and NVIDIA DeepLearningExamples' PyTorch
checkpoints (bertctl.nvidia_checkpoint), with their bert_config.json. Loading is strict: leftovers are named, never
ignored.

Its parts live beside it: checkpoint_weights reads the weights file of every flavour, checkpoint_names maps the
parameter names both ways, checkpoint_checks refuses a folder whose config.json and weights disagree.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import reprlib
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from bertctl import __version__, nvidia_checkpoint
from bertctl.checkpoint_checks import PROBLEM_TYPES, check_encoder, check_heads, check_other_keys, dropout_rate
from bertctl.checkpoint_names import (
    DECODER_BIAS,
    DECODER_KEY,
    from_transformers_names,
    part_of,
    to_transformers_name,
    to_transformers_names,
)
from bertctl.checkpoint_weights import foreign_weights_message, read_weights
from bertctl.config import BertConfig
from bertctl.config_types import take_bool, take_int
from bertctl.errors import UsageError
from bertctl.files import building_folder, check_new_out, refuse_empty, user_path, write_json_atomic
from bertctl.hub import local_folder
from bertctl.model import ARCHITECTURES, BertTaskModel, architecture_name
from bertctl.model_building import materialize, shapes_only
from bertctl.run_folder import run_folder_hint

FORMAT_VERSION = 1
# config.json entries a downstream user relies on beyond BertConfig, labels and problem_type (written by save_model
# when given): the classifier's dropout, the task name, and the tokenizer class AutoTokenizer picks.
KEPT_CONFIG_KEYS = ("classifier_dropout", "finetuning_task", "tokenizer_class", "task_specific_params")
_DECODER_WEIGHT = "cls.predictions.decoder.weight"  # dropped when tied (it is the word embeddings), else kept


@dataclass
class Checkpoint:
    """A model folder read into memory: config, weights under our names, and what heads it carries."""

    path: Path
    config: BertConfig
    raw_config: dict[str, Any]
    state: dict[str, Tensor]
    architecture: str
    parts: frozenset[str] = field(default_factory=frozenset)  # heads present (+ "pooler")
    stored_dtype: str = "float32"  # floating dtype(s) of the file's tensors; loaded as float32
    weights_file: str = ""  # the name of the file the weights were read from (a TensorFlow checkpoint's .index)
    from_nvidia: bool = False  # read from NVIDIA DeepLearningExamples' container or names (a .pt, their .bin)
    _weights_digest: str | None = field(default=None, repr=False, compare=False)  # weights_sha256, once computed

    @property
    def config_file(self) -> Path:
        """The file the config was read from (bert_config.json in a TensorFlow folder), for messages."""
        return _config_file(self.path) or self.path / "config.json"

    @property
    def from_tensorflow(self) -> bool:
        """Read from a google-research/bert TensorFlow checkpoint (whose classifiers carry no id2label)."""
        return self.weights_file.endswith(".index")

    @property
    def origin(self) -> str | None:
        """The recipe a checkpoint without transformers' metadata comes from: its classifiers carry no id2label
        and output in that recipe's processor order (google-research/bert's run_classifier, NVIDIA's run_glue)."""
        return "TensorFlow" if self.from_tensorflow else "NVIDIA" if self.from_nvidia else None

    @property
    def classifier_script(self) -> str | None:
        """The script whose processors fix the class order of such a classifier."""
        return {"TensorFlow": "run_classifier.py", "NVIDIA": "run_glue.py"}.get(self.origin or "")

    @property
    def labels(self) -> list[str] | None:
        id2label = self.raw_config.get("id2label")
        if not id2label:
            return None
        try:
            keys = sorted(id2label, key=int) if isinstance(id2label, dict) else None
        except (TypeError, ValueError):
            keys = None
        if keys is None or [int(k) for k in keys] != list(range(len(keys))):
            raise UsageError(f"{self.config_file}: id2label must map the outputs 0, 1, ... to class names, "
                             f"got {reprlib.repr(id2label)}")
        return [str(id2label[k]) for k in keys]

    @property
    def problem_type(self) -> str | None:
        return self.raw_config.get("problem_type")

    @property
    def num_labels(self) -> int:
        """Outputs of the classification head: config.json's labels, else the saved head's rows, else its num_labels,
        else 2 (transformers ignores `_num_labels`, which its 2.x releases wrote beside id2label)."""
        if self.labels:
            return len(self.labels)
        weight = self.state.get("classifier.weight")
        if weight is not None:
            return weight.shape[0]
        return int(self.raw_config.get("num_labels") or 2)

    def weights_sha256(self) -> str:
        """The weights as read (our names, sorted; dtype, shape and values) as one hash: what run.json records of
        the model a run starts from, so other weights under the same path, or the same ones converted, show.
        Computed once (a second each GB): every seed of a run records it."""
        if self._weights_digest is None:
            digest = hashlib.sha256()
            for name in sorted(self.state):
                tensor = self.state[name].detach().cpu().contiguous()
                digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
                digest.update(tensor.view(-1).view(torch.uint8).numpy().data if tensor.numel() else b"")
            self._weights_digest = digest.hexdigest()
        return self._weights_digest

    @property
    def kept_config(self) -> dict[str, Any]:
        """config.json entries outside BertConfig that a converted folder carries over (see KEPT_CONFIG_KEYS)."""
        return {k: self.raw_config[k] for k in KEPT_CONFIG_KEYS if self.raw_config.get(k) is not None}


def _file_in_model_folder(path: Path) -> str | None:
    """A model's own file given for its folder (model.safetensors, bert_model.ckpt.index): name the folder."""
    if path.is_file() and _config_file(path.parent) is not None:
        return f"it is a file of the model folder {path.parent}: give the folder"
    return None


def read_checkpoint(path: Path | str) -> Checkpoint:
    """Read a bertctl or transformers model folder (config.json + weights), or a hub id's cached snapshot."""
    folder = local_folder(path)
    if not folder.exists():  # named as given: Path("./x") would print as x, which reads like a hub id
        raise UsageError(f"model folder {path} does not exist")
    config_file = _config_file(folder)
    if config_file is None:
        hint = (run_folder_hint(folder) or _file_in_model_folder(folder)
                or "give a folder written by bertctl or transformers' save_pretrained")
        raise UsageError(foreign_weights_message(folder) or f"{folder} is not a model folder: no config.json ({hint})")
    refuse_empty(config_file)
    try:
        raw = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{config_file} is not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise UsageError(f"{config_file} must hold a mapping of config fields")
    check_other_keys(config_file, raw)
    if raw.get("model_type", "bert") != "bert":  # configs older than transformers 2.x have no model_type
        raise UsageError(f"{folder}: model_type {raw.get('model_type')!r} is not BERT")
    config = BertConfig.from_dict(raw, source=config_file)
    weights, weights_file, from_nvidia = read_weights(folder)
    rows = _embedding_rows(weights)
    if from_nvidia and rows is not None and nvidia_checkpoint.padded_vocab_size(config.vocab_size, rows):
        config = config.replace(vocab_size=rows)  # as NVIDIA's scripts build the model they trained
    decoder_differs = _untied_decoder(weights)
    stored = sorted({str(t.dtype).removeprefix("torch.") for t in weights.values() if t.is_floating_point()})
    # fp16/bf16 files are upcast: bertctl's weights are fp32 (mixed precision is the recipes' business)
    weights = {k: t.float() if t.is_floating_point() else t for k, t in weights.items()}
    state, unknown = from_transformers_names(weights)
    config = _decoder_tying(config, decoder_differs, DECODER_BIAS in weights, state)
    if unknown:
        shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise UsageError(f"{folder}: unexpected parameters {shown} (not a BERT checkpoint bertctl knows)")
    check_encoder(config_file, weights_file, set(weights), config, raw, state)
    check_heads(weights_file, set(weights), config, state)
    parts = frozenset(p for p in map(part_of, state) if p is not None)
    ckpt = Checkpoint(folder, config, raw, state, _architecture(raw, parts), parts, "/".join(stored) or "float32",
                      weights_file.name, from_nvidia)
    _check_labels(ckpt)
    return ckpt


def _config_file(folder: Path) -> Path | None:
    """config.json, else bert_config.json: Google's and NVIDIA's name for it (release folders, run_* outputs), whose
    fields are transformers' BertConfig names."""
    return next((path for path in (folder / "config.json", folder / "bert_config.json") if path.is_file()), None)


def _check_labels(ckpt: Checkpoint) -> None:
    """A classifier whose id2label names another number of classes than its head has rows: every recipe would
    build the head config.json describes and silently replace the trained one with a random one (transformers
    refuses the folder too). A multiple-choice head has one row whatever num_labels says."""
    weight = ckpt.state.get("classifier.weight")
    if weight is None or ckpt.architecture == "BertForMultipleChoice":
        return
    try:
        labels = ckpt.labels
    except UsageError:
        return  # a malformed id2label is refused where the labels are read
    if labels and len(labels) != weight.shape[0]:
        raise UsageError(f"{ckpt.config_file} names {len(labels)} classes in id2label, but the weights "
                         f"hold a classifier with {weight.shape[0]} output(s) (classifier.weight of shape "
                         f"{tuple(weight.shape)}); fix id2label/label2id in {ckpt.config_file.name}")




def _embedding_rows(weights: dict[str, Tensor]) -> int | None:
    embeddings = weights.get("bert.embeddings.word_embeddings.weight", weights.get("embeddings.word_embeddings.weight"))
    return embeddings.shape[0] if embeddings is not None and embeddings.ndim == 2 else None


def _decoder_tying(config: BertConfig, decoder_differs: bool, decoder_bias: bool,
                   state: dict[str, Tensor]) -> BertConfig:
    """The config with the tying transformers' from_pretrained makes of the file, `state` edited to match.

    Tied (tie_word_embeddings true or unset, and the file's decoder absent or equal to the embeddings): the decoder
    is the embeddings, so the file's copy is dropped. Untied: config.json's false, or a decoder that differs (then
    transformers warns and keeps both, whatever config.json says). With config.json's false the decoder's own bias
    is used and starts at zero when the file has none (cls.predictions.bias is then unused there); a decoder the
    file lacks is left out of `state`: build_model refuses it or draws it.
    """
    by_config = not config.tie_word_embeddings
    if not (by_config or decoder_differs):
        state.pop(DECODER_KEY, None)
        return config
    if by_config and not decoder_bias and "mlm.bias" in state:
        state["mlm.bias"] = torch.zeros_like(state["mlm.bias"])
    return config.replace(tie_word_embeddings=False)


def _untied_decoder(weights: dict[str, Tensor]) -> bool:
    """Whether the file holds an MLM decoder other than the word embeddings: transformers then computes with that
    matrix even when config.json asks for tied weights."""
    decoder = weights.get(_DECODER_WEIGHT)
    embeddings = weights.get("bert.embeddings.word_embeddings.weight",
                             weights.get("embeddings.word_embeddings.weight"))
    if decoder is None or embeddings is None:
        return False
    return decoder.shape != embeddings.shape or not torch.equal(decoder, embeddings.to(decoder.dtype))


def _architecture(raw: dict[str, Any], parts: frozenset[str]) -> str:
    """The architecture the weights support: config.json's when it is one of ours, else inferred from heads."""
    for name in raw.get("architectures") or []:
        if name in ARCHITECTURES and set(ARCHITECTURES[name].head_names) <= parts | {"sequence_classification",
                                                                                       "token_classification",
                                                                                       "multiple_choice"}:
            return name
    return inferred_architecture(parts)


def inferred_architecture(parts: frozenset[str]) -> str:
    """The architecture the heads present make up, whatever config.json says."""
    if {"mlm", "nsp"} <= parts:
        return "BertForPreTraining"
    if "mlm" in parts:
        return "BertForMaskedLM"
    if "question_answering" in parts:
        return "BertForQuestionAnswering"
    if "classifier" in parts:
        return "BertForSequenceClassification"
    return "BertModel"


def heads_present(ckpt: Checkpoint) -> list[str]:
    """Head names as a user reads them (the classifier's kind comes from the architecture)."""
    heads = [p for p in ("mlm", "nsp", "question_answering") if p in ckpt.parts]
    if "classifier" in ckpt.parts:
        kinds = ARCHITECTURES[ckpt.architecture].head_names
        heads += [k for k in kinds if k.endswith(("classification", "choice"))] or ["sequence_classification"]
    return heads


def build_model(ckpt: Checkpoint, architecture: str | None = None, *, share_weights: bool = False,
                draw_decoder: bool = False, **head_kwargs: Any) -> BertTaskModel:
    """Instantiate `architecture` (default: the checkpoint's) and load its weights strictly.

    A head the checkpoint lacks (or has with another shape) is created fresh and listed in `model.fresh_heads`;
    heads the checkpoint has but the architecture does not use are dropped (pre-training -> fine-tuning).
    `share_weights`: the model's parameters are `ckpt.state`'s tensors, not copies, so the weights are in
    memory once (a BERT-base load peaks ~400 MB lower); only for a caller that builds one model from `ckpt`,
    since training that model changes `ckpt.state` too.
    An untied MLM decoder the file lacks is refused (the head cannot be computed), or with `draw_decoder` drawn as
    transformers draws it and listed as "mlm decoder" (pre-training trains it anyway).
    """
    name = architecture or ckpt.architecture
    if name not in ARCHITECTURES:
        raise UsageError(f"unknown architecture {name!r}: choose one of {', '.join(ARCHITECTURES)}")
    cls = ARCHITECTURES[name]
    with shapes_only():  # weights the checkpoint replaces are never drawn
        model = cls(ckpt.config, **_head_options(ckpt, name, head_kwargs))
    expected = model.state_dict()
    fresh: set[str] = set()
    fresh_keys: set[str] = set()
    state: dict[str, Tensor] = {}
    for key, target in expected.items():
        part = part_of(key)
        source = ckpt.state.get(key)
        if part is not None and (part not in ckpt.parts or (source is not None and source.shape != target.shape)):
            fresh.add(part)  # absent from the checkpoint, or a classifier with another number of labels
            fresh_keys.add(key)
        elif source is None and key == DECODER_KEY and draw_decoder:
            fresh.add("mlm decoder")
            fresh_keys.add(key)
        elif source is None and key == DECODER_KEY:
            raise UsageError(f"{ckpt.path}: {ckpt.config_file.name} sets tie_word_embeddings false but the weights "
                             f"hold no {_DECODER_WEIGHT}, so the MLM head cannot be computed (transformers would "
                             "draw it at random); give the folder its decoder, or set tie_word_embeddings true if "
                             "the decoder is the word embeddings")
        elif source is None:
            raise UsageError(f"{ckpt.path}: missing parameter {to_transformers_name(key)} for {name}")
        else:  # an encoder weight: read_checkpoint checked its shape against the config; an integer one (the
            # TensorFlow reader takes them) is cast as load_state_dict's copy would, since share_weights assigns it
            state[key] = source.to(target.dtype)
    materialize(model)
    model.init_weights(module for prefix, module in model.named_modules()  # from the caller's RNG, as transformers
                       if any(f"{prefix}.{name}".lstrip(".") in fresh_keys for name, _ in module.named_parameters(
                           recurse=False)))
    current = model.state_dict()
    model.load_state_dict({**state, **{key: current[key] for key in fresh_keys}}, strict=True, assign=share_weights)
    model.fresh_heads = tuple(sorted(fresh))
    return model


def _head_options(ckpt: Checkpoint, name: str, head_kwargs: dict[str, Any]) -> dict[str, Any]:
    """`build_model`'s keyword arguments for architecture `name`, checked and typed (a str or 0 would build a
    broken head or fail deep in torch), with the folder's pooler, num_labels and classifier_dropout where the
    caller gives none."""
    head_kwargs = dict(head_kwargs)
    if name == "BertModel":
        head_kwargs.setdefault("add_pooler", "pooler" in ckpt.parts)
    params = inspect.signature(ARCHITECTURES[name].__init__).parameters
    unknown = sorted(set(head_kwargs) - set(params))
    if unknown:
        raise UsageError(f"{name} takes no {', '.join(unknown)} (its options: "
                         f"{', '.join(p for p in params if p not in ('self', 'cfg')) or 'none'})")
    if "add_pooler" in head_kwargs:  # "no" would read as true
        head_kwargs["add_pooler"] = take_bool("add_pooler", head_kwargs["add_pooler"])
    if head_kwargs.get("classifier_dropout") is not None:  # a str fails deep in torch
        head_kwargs["classifier_dropout"] = dropout_rate(head_kwargs["classifier_dropout"])
    if "num_labels" in head_kwargs:
        head_kwargs["num_labels"] = take_int("num_labels", head_kwargs["num_labels"], minimum=1)
    elif "num_labels" in params:
        head_kwargs["num_labels"] = ckpt.num_labels
    if "classifier_dropout" not in head_kwargs and (folder_dropout := folder_head_dropout(ckpt, name)) is not None:
        head_kwargs["classifier_dropout"] = folder_dropout
    return head_kwargs


def folder_head_dropout(ckpt: Checkpoint, architecture: str) -> float | None:
    """config.json's classifier_dropout, checked, where `architecture`'s head takes one (else None): what
    `build_model` gives the head unless told otherwise. A fine-tuning run asks first, since it builds its head
    after reading and encoding the data, too late to refuse the folder."""
    folder_dropout = ckpt.raw_config.get("classifier_dropout")
    if folder_dropout is None or "classifier_dropout" not in inspect.signature(ARCHITECTURES[architecture]).parameters:
        return None
    return dropout_rate(folder_dropout, ckpt.config_file)


def load_model(path: Path | str, architecture: str | None = None, **head_kwargs: Any) -> BertTaskModel:
    """Load any model folder bertctl reads as `architecture` (default: the one its weights carry)."""
    return build_model(read_checkpoint(path), architecture, **head_kwargs)


def saved_architecture(model: nn.Module, keep: dict[str, Tensor] | None = None) -> str:
    """The `architectures` entry of a saved folder: the model's class, or transformers' BertForNextSentencePrediction
    for an encoder saved with a kept NSP head and no MLM head (bertctl has no class of its own for it)."""
    return transformers_architecture(architecture_name(model), {part_of(k) for k in keep or {}})


def transformers_architecture(name: str, parts: set[str] | frozenset[str]) -> str:
    """transformers' class for a bertctl architecture with these parts: an encoder with NSP and no MLM head is
    BertForNextSentencePrediction there."""
    return "BertForNextSentencePrediction" if name == "BertModel" and "nsp" in parts and "mlm" not in parts else name


def _label_names(labels: Any, num_labels: int) -> list[str | int | float]:
    """save_model's `labels`, one name per output of the head: any iterable but a string (pandas' `unique()` gives
    a numpy array, whose truth value is a bare ValueError), numpy's scalars as Python's (json refuses them, and
    only once the weights are written)."""
    if labels is None or isinstance(labels, (list, tuple)) and not labels:
        return [f"LABEL_{i}" for i in range(num_labels)]
    try:
        names = [] if isinstance(labels, (str, bytes)) else [n.item() if isinstance(n, np.generic) else n
                                                              for n in labels]
    except TypeError:  # not iterable
        names = []
    if (len(names) != num_labels or not all(isinstance(n, (str, int, float)) for n in names)
            or len(set(names)) != num_labels):
        raise UsageError(f"labels {reprlib.repr(names or labels)}: give {num_labels} different names, one per "
                         "output of the head")
    return names


def _config_json(model: BertTaskModel, labels: list[str] | None, problem_type: str | None,
                 extra: dict[str, Any] | None = None, keep: dict[str, Tensor] | None = None) -> dict[str, Any]:
    name = saved_architecture(model, keep)
    parts = sorted({p for p in map(part_of, [*model.state_dict(), *(keep or {})]) if p is not None})
    data: dict[str, Any] = {"architectures": [name], "model_type": "bert", **model.config.to_dict(),
                            "position_embedding_type": "absolute", "classifier_dropout": None}
    data.update({k: v for k, v in (extra or {}).items() if k in KEPT_CONFIG_KEYS})
    head_dropout = getattr(model, "dropout", None)  # a classification head's: what it used, not the source's
    if isinstance(head_dropout, nn.Dropout):
        data["classifier_dropout"] = None if head_dropout.p == model.config.hidden_dropout_prob else head_dropout.p
    num_labels = getattr(model, "num_labels", None)
    if num_labels is not None:
        labels = _label_names(labels, num_labels)
        data["id2label"] = {str(i): label for i, label in enumerate(labels)}
        data["label2id"] = {label: i for i, label in enumerate(labels)}
    if problem_type:
        if problem_type not in PROBLEM_TYPES:
            raise UsageError(f"problem_type {problem_type!r}: choose one of {', '.join(PROBLEM_TYPES)}")
        data["problem_type"] = problem_type
    data["torch_dtype"] = "float32"
    data["bertctl"] = {"format_version": FORMAT_VERSION, "version": __version__, "heads": parts}
    return data


def save_model(
    model: nn.Module,
    folder: Path | str,
    tokenizer: Any = None,
    *,
    labels: list[str] | None = None,
    problem_type: str | None = None,
    config_extra: dict[str, Any] | None = None,
    extra: Callable[[Path], None] | None = None,
    keep: dict[str, Tensor] | None = None,
    overwrite: bool = False,
) -> Path:
    """Write a model folder atomically: a temp folder beside the target, renamed when complete.

    `tokenizer` is a bertctl BertTokenizer (its files are written) or a folder to copy them from;
    `config_extra` holds config.json entries to carry over (only KEPT_CONFIG_KEYS: a converted fine-tuned folder
    keeps its classifier_dropout, finetuning_task, tokenizer_class); `extra(tmp_folder)` may add files (e.g.
    training state) before the rename; `keep` holds weights (our names) of heads the model's class does not
    have, written beside its own (convert keeps an NSP-only head, or a pooler beside an MLM head, this way).
    """
    from safetensors.torch import save_file

    model = getattr(model, "module", model)  # unwrap DDP
    model = getattr(model, "_orig_mod", model)  # unwrap torch.compile
    if not isinstance(model, BertTaskModel):  # None or a transformers model failed deep inside
        raise UsageError(f"save_model: {type(model).__name__} is not a bertctl BERT model; give one of "
                         "bertctl.model's (bertctl.load_model gives them)")
    overwrite = take_bool("overwrite", overwrite)  # "yes" is no yes
    target = check_new_out(folder, overwrite=overwrite)
    tokenizer = _checked_tokenizer(tokenizer, model.config.vocab_size)
    with building_folder(target, overwrite=overwrite) as tmp:
        state = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in model.state_dict().items()}
        keep = {k: v for k, v in (keep or {}).items() if k not in state}
        state.update({k: v.detach().to("cpu", torch.float32).contiguous() for k, v in keep.items()})
        bare = saved_architecture(model, keep) == "BertModel"  # transformers' BertModel files have no `bert.`
        save_file(to_transformers_names(state, bare=bare), str(tmp / "model.safetensors"), metadata={"format": "pt"})
        write_json_atomic(tmp / "config.json", _config_json(model, labels, problem_type, config_extra, keep))
        _write_tokenizer(tokenizer, tmp, model.config.max_position_embeddings)
        if extra is not None:
            extra(tmp)
    return target


TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")


def _checked_tokenizer(tokenizer: Any, rows: int) -> Any:
    """`save_model`'s tokenizer, a folder's path with `~` expanded, refused before anything is written when it
    lacks tokenizer files or has more tokens than the model has embedding rows (every reader would refuse the
    folder: its last ids index out of range)."""
    from bertctl.tokenizer import BertTokenizer
    from bertctl.tokenizer_folder import has_tokenizer, load_tokenizer

    if tokenizer is None:
        return None
    if isinstance(tokenizer, (str, Path)):
        tokenizer = user_path(tokenizer, "tokenizer")
        if not has_tokenizer(tokenizer):
            raise UsageError(f"tokenizer {tokenizer} has no tokenizer.json or vocab.txt; give a tokenizer folder")
    elif not isinstance(tokenizer, BertTokenizer):  # transformers' tokenizer failed on a missing method
        raise UsageError(f"save_model: {_type_name(tokenizer)} is not a bertctl BertTokenizer; give one "
                         "(bertctl.load_tokenizer gives them) or a tokenizer folder")
    tokens = (load_tokenizer(tokenizer) if isinstance(tokenizer, Path) else tokenizer).vocab_size
    if tokens > rows:
        raise UsageError(f"the tokenizer has {tokens} tokens but the model has only {rows} embedding rows; save "
                         "the model with its own tokenizer")
    return tokenizer


def _type_name(value: Any) -> str:
    """A value's type, with the package it comes from unless built in: `transformers.BertTokenizer` is not
    bertctl's `BertTokenizer`."""
    kind = type(value)
    package = kind.__module__.partition(".")[0]
    return kind.__name__ if package == "builtins" else f"{package}.{kind.__name__}"


def _write_tokenizer(tokenizer: Any, folder: Path, positions: int) -> None:
    if tokenizer is None:
        return
    if isinstance(tokenizer, Path):
        for name in TOKENIZER_FILES:
            if (tokenizer / name).is_file():
                shutil.copyfile(tokenizer / name, folder / name)
    else:
        tokenizer.save(folder)
    _fit_max_length(folder / "tokenizer_config.json", positions)


def _fit_max_length(path: Path, positions: int) -> None:
    """model_max_length at most the model's positions: transformers' pipelines and `truncation=True` cut texts
    to it, so a larger one (a tokenizer's 512 beside a 128-position model) or none lets a long text through to
    the position embeddings, which fail."""
    if not path.is_file():
        return
    config = json.loads(path.read_text(encoding="utf-8"))
    limit = config.get("model_max_length")
    if not (isinstance(limit, int) and 0 < limit <= positions):
        write_json_atomic(path, _with_max_length(config, positions))


def _with_max_length(config: dict[str, Any], positions: int) -> dict[str, Any]:
    """A new model_max_length goes where a saved tokenizer's config has it (before clean_up_tokenization_spaces),
    so a folder converted again writes the same bytes; an existing one keeps its place."""
    if "model_max_length" in config or "clean_up_tokenization_spaces" not in config:
        return {**config, "model_max_length": positions}
    placed: dict[str, Any] = {}
    for key, value in config.items():
        if key == "clean_up_tokenization_spaces":
            placed["model_max_length"] = positions
        placed[key] = value
    return placed


def model_tokenizer(ckpt: Checkpoint, required: bool = True) -> Any:
    """The tokenizer saved in a model folder, refused when it has more tokens than the model has embedding rows
    (its last ids would index out of range). More rows than tokens is fine: checkpoints often pad the matrix to a
    multiple of 8 or 64 (30528 rows for bert-base's 30522 tokens); the spare rows are never an input and only
    take part in the MLM softmax, as in transformers.

    Without tokenizer files: None, or (required) a one-line error saying what to copy where.
    """
    from bertctl.tokenizer_folder import has_tokenizer, load_tokenizer

    if not has_tokenizer(ckpt.path):
        if not required:
            return None
        raise UsageError(f"{ckpt.path} has no tokenizer (tokenizer.json or vocab.txt); copy the tokenizer the "
                         "model was trained with into it")
    tokenizer = load_tokenizer(ckpt.path)
    if tokenizer.vocab_size > ckpt.config.vocab_size:
        raise UsageError(f"{ckpt.path}: the tokenizer has {tokenizer.vocab_size} tokens but the model has only "
                           f"{ckpt.config.vocab_size} embedding rows; use the tokenizer the model was trained with")
    return tokenizer
