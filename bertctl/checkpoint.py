"""The one place that reads and writes model folders, and maps transformers' parameter names to ours.

A model folder is what transformers loads as it is: config.json (plus a `bertctl` block), model.safetensors
with transformers' names, and the tokenizer files. We read transformers' folders too: safetensors or
pytorch_model.bin (weights_only), single or sharded, fp16/bf16 upcast to fp32, with or without the `bert.` prefix,
legacy `gamma`/`beta` names, tied, untied or absent decoder weights and saved buffers; Google's TensorFlow
checkpoints (bertctl.tf_checkpoint reads them into transformers' names) and NVIDIA DeepLearningExamples' PyTorch
checkpoints (bertctl.nvidia_checkpoint), with their bert_config.json. Loading is strict: leftovers are named, never
ignored.
"""

from __future__ import annotations

import inspect
import json
import numbers
import re
import reprlib
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from bertctl import __version__, nvidia_checkpoint, tf_checkpoint
from bertctl.config import BertConfig
from bertctl.config_types import take_bool, take_int
from bertctl.errors import BertctlError, UsageError
from bertctl.files import building_folder, check_new_out, user_path, write_json_atomic
from bertctl.hub import local_folder
from bertctl.model import ARCHITECTURES, Bert, BertTaskModel, architecture_name, shapes_only
from bertctl.run_folder import run_folder_hint

FORMAT_VERSION = 1
# transformers' order of preference when a folder holds several (hub repos often have both formats)
WEIGHTS_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "pytorch_model.bin.index.json")
# Weights transformers 5 no longer reads either: say how to convert them instead of "no weights found".
_FOREIGN_WEIGHTS = {"tf_model.h5": ("TensorFlow", "from_tf"), "flax_model.msgpack": ("Flax", "from_flax")}

# (our prefix, transformers' prefix); {i} is a layer number. Encoder names are without the `bert.` prefix.
_ENCODER_NAMES = [
    ("embeddings.word.", "embeddings.word_embeddings."),
    ("embeddings.position.", "embeddings.position_embeddings."),
    ("embeddings.token_type.", "embeddings.token_type_embeddings."),
    ("embeddings.norm.", "embeddings.LayerNorm."),
    ("layers.{i}.attn_out.", "encoder.layer.{i}.attention.output.dense."),
    ("layers.{i}.attn_norm.", "encoder.layer.{i}.attention.output.LayerNorm."),
    ("layers.{i}.ffn_in.", "encoder.layer.{i}.intermediate.dense."),
    ("layers.{i}.ffn_out.", "encoder.layer.{i}.output.dense."),
    ("layers.{i}.ffn_norm.", "encoder.layer.{i}.output.LayerNorm."),
    ("pooler.", "pooler.dense."),
]
_HEAD_NAMES = [
    ("mlm.dense.", "cls.predictions.transform.dense."),
    ("mlm.norm.", "cls.predictions.transform.LayerNorm."),
    ("mlm.decoder.", "cls.predictions.decoder."),  # only an untied decoder: a tied one is the word embeddings
    ("mlm.bias", "cls.predictions.bias"),
    ("nsp.", "cls.seq_relationship."),
    ("classifier.", "classifier."),
    ("qa_outputs.", "qa_outputs."),
]
_QKV = ("query", "key", "value")
# config.json entries a downstream user relies on beyond BertConfig, labels and problem_type (written by save_model
# when given): the classifier's dropout, the task name, and the tokenizer class AutoTokenizer picks.
KEPT_CONFIG_KEYS = ("classifier_dropout", "finetuning_task", "tokenizer_class", "task_specific_params")
PROBLEM_TYPES = ("regression", "single_label_classification", "multi_label_classification")  # transformers'
# Buffers some versions saved (position_ids; token_type_ids, all zeros) carry no weights.
_DROPPED = re.compile(r"(^|\.)(position_ids|embeddings\.token_type_ids)$")
_DECODER_WEIGHT = "cls.predictions.decoder.weight"  # dropped when tied (it is the word embeddings), else kept
_DECODER_BIAS = "cls.predictions.decoder.bias"  # older files and untied models: cls.predictions.bias, as used
_DECODER_KEY = "mlm.decoder.weight"  # our name for an untied decoder
# Which head (or optional encoder part) a parameter of ours belongs to.
_PART_OF = [("bert.pooler.", "pooler"), ("mlm.", "mlm"), ("nsp.", "nsp"), ("qa_outputs.", "question_answering"),
            ("classifier.", "classifier")]
# The config.json fields that give an encoder weight its shape (our names, within `bert.`); others: hidden_size.
_SHAPE_FIELDS = [(r"embeddings\.word\.", ("vocab_size", "hidden_size")),
                 (r"embeddings\.position\.", ("max_position_embeddings", "hidden_size")),
                 (r"embeddings\.token_type\.", ("type_vocab_size", "hidden_size")),
                 (r"layers\.\d+\.ffn_", ("intermediate_size", "hidden_size"))]


def to_transformers_names(state: dict[str, Tensor], bare: bool = False) -> dict[str, Tensor]:
    """Our state dict -> transformers' names; Q, K and V are split out of the fused projection. Beside an untied
    decoder the bias is written as the decoder's too, as transformers writes it (its untied model computes with
    that one and would start it at zero without it)."""
    prefix = "" if bare else "bert."
    out: dict[str, Tensor] = {}
    if _DECODER_KEY in state and "mlm.bias" in state:
        out[_DECODER_BIAS] = state["mlm.bias"].clone()  # safetensors refuses a tensor stored twice
    for key, tensor in state.items():
        if key.startswith("bert."):
            rest = key[len("bert."):]
            match = re.fullmatch(r"layers\.(\d+)\.qkv\.(weight|bias)", rest)
            if match:
                layer, kind = match.groups()
                for name, part in zip(_QKV, tensor.chunk(3, dim=0), strict=True):
                    out[f"{prefix}encoder.layer.{layer}.attention.self.{name}.{kind}"] = part.contiguous()
                continue
            out[prefix + _rename(rest, _ENCODER_NAMES, forward=True)] = tensor
        else:
            out[_rename(key, _HEAD_NAMES, forward=True)] = tensor
    return out


def _rename(key: str, table: list[tuple[str, str]], forward: bool) -> str:
    for ours, theirs in table:
        source, target = (ours, theirs) if forward else (theirs, ours)
        match = re.match(re.escape(source).replace(re.escape("{i}"), r"(?P<i>\d+)"), key)
        if match:
            return target.format(i=match.groupdict().get("i")) + key[match.end():]
    raise KeyError(key)


def from_transformers_names(state: dict[str, Tensor]) -> tuple[dict[str, Tensor], list[str]]:
    """transformers' (or Google's legacy) names -> ours; returns the mapped dict and the unknown names."""
    out: dict[str, Tensor] = {}
    unknown: list[str] = []
    qkv: dict[tuple[str, str], dict[str, Tensor]] = {}
    for key, tensor in state.items():
        key = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", key))
        if _DROPPED.search(key):
            continue
        if key in (_DECODER_BIAS, "cls.predictions.bias"):
            # transformers 5 computes with the decoder's bias when a file has both (they are equal in real files)
            if key == _DECODER_BIAS or _DECODER_BIAS not in state:
                out["mlm.bias"] = tensor
            continue
        rest = key[len("bert."):] if key.startswith("bert.") else key
        match = re.fullmatch(r"encoder\.layer\.(\d+)\.attention\.self\.(query|key|value)\.(weight|bias)", rest)
        if match:
            layer, name, kind = match.groups()
            qkv.setdefault((layer, kind), {})[name] = tensor
            continue
        try:
            if rest.startswith(("embeddings.", "encoder.", "pooler.")):
                out["bert." + _rename(rest, _ENCODER_NAMES, forward=False)] = tensor
            else:
                out[_rename(key, _HEAD_NAMES, forward=False)] = tensor
        except KeyError:
            unknown.append(key)
    for (layer, kind), parts in qkv.items():
        if set(parts) == set(_QKV):  # else the fused projection is missing: read_checkpoint names what is
            out[f"bert.layers.{layer}.qkv.{kind}"] = torch.cat([parts[n] for n in _QKV], dim=0)
    return out, unknown


def _part(key: str) -> str | None:
    for prefix, part in _PART_OF:
        if key.startswith(prefix):
            return part
    return None


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
        """Outputs of the classification head: config.json's labels, else the saved head's rows, else 2."""
        if self.labels:
            return len(self.labels)
        weight = self.state.get("classifier.weight")
        if weight is not None:
            return weight.shape[0]
        return int(self.raw_config.get("num_labels") or self.raw_config.get("_num_labels") or 2)

    @property
    def kept_config(self) -> dict[str, Any]:
        """config.json entries outside BertConfig that a converted folder carries over (see KEPT_CONFIG_KEYS)."""
        return {k: self.raw_config[k] for k in KEPT_CONFIG_KEYS if self.raw_config.get(k) is not None}


def _read_weights(folder: Path) -> tuple[dict[str, Tensor], Path, bool]:
    """The first weights file in transformers' order of preference, else an NVIDIA `.pt`, else a TensorFlow
    checkpoint; with its path and whether it is NVIDIA's. An index names the shards to read."""
    for name in WEIGHTS_FILES:
        path = folder / name
        if not path.is_file():
            continue
        if not name.endswith(".index.json"):
            loaded = _read_weights_file(path)
            if name == "pytorch_model.bin" and nvidia_checkpoint.is_nvidia(loaded):  # run_squad's, run_glue's
                return nvidia_checkpoint.transformers_weights(loaded, path), path, True
            return loaded, path, False
        try:
            shards = sorted(set(json.loads(path.read_text(encoding="utf-8"))["weight_map"].values()))
        except (OSError, ValueError, KeyError, AttributeError) as exc:
            raise BertctlError(f"cannot read the shard index {path}: {exc}") from None
        return {k: v for shard in shards for k, v in _read_weights_file(folder / shard).items()}, path, False
    checkpoint = nvidia_checkpoint.checkpoint_file(folder)  # run_pretraining's ckpt_<step>.pt, NGC's bert_*.pt
    if checkpoint is not None:
        return nvidia_checkpoint.read_weights(checkpoint), checkpoint, True
    prefix = tf_checkpoint.checkpoint_prefix(folder)  # Google's TensorFlow release, or a run_* script's output
    if prefix is not None:
        return tf_checkpoint.read_weights(prefix), Path(f"{prefix}.index"), False
    raise UsageError(_foreign_weights_message(folder) or
                     f"{folder}: no weights found (expected {' or '.join(WEIGHTS_FILES)}, an NVIDIA *.pt "
                     "checkpoint or a TensorFlow one)")


def _foreign_weights_message(folder: Path) -> str | None:
    """One line saying what a TensorFlow or NVIDIA folder without its bert_config.json lacks, or how to convert a
    tf_model.h5 or Flax folder, which bertctl cannot read."""
    index = next(iter(sorted(folder.glob("*.index"))), None)
    pt = next(iter(sorted(folder.glob("*.pt"))), None)
    held = (f"a TensorFlow checkpoint ({index.name.removesuffix('.index')})" if index is not None else
            f"an NVIDIA checkpoint ({pt.name})" if pt is not None else None)
    if held is not None:
        return (f"{folder} holds {held} but no bert_config.json or config.json; copy the bert_config.json (and "
                "vocab.txt) of the model it was trained from into it")
    for name, (kind, flag) in _FOREIGN_WEIGHTS.items():
        if (folder / name).is_file():
            return (f"{folder} holds only {kind} weights ({name}); convert them once with transformers 4: "
                    f"`BertForPreTraining.from_pretrained(DIR, {flag}=True).save_pretrained(DIR)` "
                    "(pip install 'transformers<5')")
    return None


def _read_weights_file(path: Path) -> dict[str, Tensor]:
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(path), device="cpu")
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if "WeightsUnpickler error:" in str(exc):  # not torch's advice to load it unsafely (weights_only=False)
            found = str(exc).split("WeightsUnpickler error:", 1)[1].strip().splitlines()[0]
            reason = f"not a plain tensor file ({found}); bertctl never unpickles objects"
        raise BertctlError(f"cannot read weights {path}: {reason} (is the file complete? re-download or "
                           "re-save it)") from None


def read_checkpoint(path: Path | str) -> Checkpoint:
    """Read a bertctl or transformers model folder (config.json + weights), or a hub id's cached snapshot."""
    folder = local_folder(path)
    if not folder.exists():  # named as given: Path("./x") would print as x, which reads like a hub id
        raise UsageError(f"model folder {path} does not exist")
    config_file = _config_file(folder)
    if config_file is None:
        hint = run_folder_hint(folder) or "give a folder written by bertctl or transformers' save_pretrained"
        raise UsageError(_foreign_weights_message(folder) or f"{folder} is not a model folder: no config.json ({hint})")
    try:
        raw = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{config_file} is not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise UsageError(f"{config_file} must hold a mapping of config fields")
    _check_other_keys(config_file, raw)
    if raw.get("model_type", "bert") != "bert":  # configs older than transformers 2.x have no model_type
        raise UsageError(f"{folder}: model_type {raw.get('model_type')!r} is not BERT")
    config = BertConfig.from_dict(raw, source=config_file)
    weights, weights_file, from_nvidia = _read_weights(folder)
    rows = _embedding_rows(weights)
    if from_nvidia and rows is not None and nvidia_checkpoint.padded_vocab_size(config.vocab_size, rows):
        config = config.replace(vocab_size=rows)  # as NVIDIA's scripts build the model they trained
    decoder_differs = _untied_decoder(weights)
    stored = sorted({str(t.dtype).removeprefix("torch.") for t in weights.values() if t.is_floating_point()})
    # fp16/bf16 files are upcast: bertctl's weights are fp32 (mixed precision is the recipes' business)
    weights = {k: t.float() if t.is_floating_point() else t for k, t in weights.items()}
    state, unknown = from_transformers_names(weights)
    config = _decoder_tying(config, decoder_differs, _DECODER_BIAS in weights, state)
    if unknown:
        shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise BertctlError(f"{folder}: unexpected parameters {shown} (not a BERT checkpoint bertctl knows)")
    _check_encoder(folder, weights_file, set(weights), config, raw, state)
    _check_heads(weights_file, set(weights), config, state)
    parts = frozenset(p for p in map(_part, state) if p is not None)
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


_OTHER_KEYS = {"architectures": (list, "a list of class names"), "bertctl": (dict, "a mapping"),
               "problem_type": (str, "a string")}  # id2label: checked with the head it must fit


def _check_other_keys(config_file: Path, raw: dict[str, Any]) -> None:
    """config.json keys besides BertConfig's that bertctl reads: a hand-edited wrong type is one line here."""
    for key, (kind, said) in _OTHER_KEYS.items():
        value = raw.get(key)
        if value is not None and not isinstance(value, kind):
            raise UsageError(f"{config_file}: {key} must be {said}, got {value!r}; fix or remove it")
    problem_type = raw.get("problem_type")
    if problem_type is not None and problem_type not in PROBLEM_TYPES:  # transformers 4 refuses it too
        raise UsageError(f"{config_file}: problem_type {problem_type!r} is not one of {', '.join(PROBLEM_TYPES)}; "
                         f"fix or remove it")


def _check_encoder(folder: Path, weights_file: Path, in_file: set[str], config: BertConfig, raw: dict[str, Any],
                   state: dict[str, Tensor]) -> None:
    """Every encoder weight must be there (the pooler and the heads are optional), with the shape config.json
    gives it: build_model relies on it. A config.json that lacks vocab_size, hidden_size ... gets BERT-base's
    defaults; say so here, where the file is at fault, rather than later as a tokenizer that does not fit the
    model or a weight that does not load. `in_file`: the file's own names, to name what is missing as it would."""
    with shapes_only():
        expected = Bert(config, add_pooler=False).state_dict()
    _check_layer_count(folder, config, raw, state)
    bare = not any(name.startswith("bert.") for name in in_file)  # a BertModel file: names without the prefix
    missing = [name for key, target in expected.items() if f"bert.{key}" not in state
               for name in to_transformers_names({f"bert.{key}": target}, bare=bare)
               if name not in in_file]  # of Q, K and V, only the absent ones
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise BertctlError(f"{weights_file}: missing encoder parameter{'s' * (len(missing) > 1)} {shown} (is the "
                           "file complete? re-download or re-save it)")
    for key, target in expected.items():  # embeddings first: a wrong hidden_size is blamed there
        found = state[f"bert.{key}"]
        if found.shape == target.shape:
            continue
        name, stored = next(iter(to_transformers_names({f"bert.{key}": found}, bare=bare).items()))
        shaped_by = next((f for pattern, f in _SHAPE_FIELDS if re.match(pattern, key)), ("hidden_size",))
        said = ", ".join(f"{f} {getattr(config, f)}" + ("" if f in raw else " (not set: the default)")
                         for f in shaped_by)
        config_file = _config_file(folder) or folder / "config.json"
        raise UsageError(f"{config_file} says {said}, but the weights hold {name} of shape "
                         f"{tuple(stored.shape)}; fix {config_file.name}")


def _check_heads(weights_file: Path, in_file: set[str], config: BertConfig, state: dict[str, Tensor]) -> None:
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
        if _part(key) is None or target is None or found.shape == target.shape:
            continue
        name = next(iter(to_transformers_names({key: found}, bare=bare)))
        raise BertctlError(f"{weights_file}: {name} has shape {tuple(found.shape)} but the model its config.json "
                           f"describes needs {tuple(target.shape)} (is the file complete? re-download or re-save it)")


def _check_layer_count(folder: Path, config: BertConfig, raw: dict[str, Any], state: dict[str, Tensor]) -> None:
    """Layers in the weights beyond config.json's num_hidden_layers would be dropped unread, too few would be
    reported as missing parameters: either way the config is at fault."""
    held = {int(m.group(1)) for key in state if (m := re.match(r"bert\.layers\.(\d+)\.", key))}
    count = config.num_hidden_layers
    if held and (max(held) >= count or (len(held) < count and held == set(range(len(held))))):
        unset = "" if "num_hidden_layers" in raw else " (not set: the default)"
        config_file = _config_file(folder) or folder / "config.json"
        raise UsageError(f"{config_file} says num_hidden_layers {count}{unset}, but the weights hold "
                         f"{max(held) + 1} layers; fix {config_file.name}")


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
        state.pop(_DECODER_KEY, None)
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
    if name == "BertModel":
        head_kwargs.setdefault("add_pooler", "pooler" in ckpt.parts)
    params = inspect.signature(cls.__init__).parameters
    unknown = sorted(set(head_kwargs) - set(params))
    if unknown:
        raise UsageError(f"{name} takes no {', '.join(unknown)} (its options: "
                         f"{', '.join(p for p in params if p not in ('self', 'cfg')) or 'none'})")
    if "add_pooler" in head_kwargs:  # "no" would read as true
        head_kwargs["add_pooler"] = take_bool("add_pooler", head_kwargs["add_pooler"])
    if head_kwargs.get("classifier_dropout") is not None:  # a str fails deep in torch
        head_kwargs["classifier_dropout"] = _dropout_rate(head_kwargs["classifier_dropout"])
    if "num_labels" in head_kwargs:  # a str or 0 would build a broken head, or fail deep in torch
        head_kwargs["num_labels"] = take_int("num_labels", head_kwargs["num_labels"], minimum=1)
    elif "num_labels" in params:
        head_kwargs["num_labels"] = ckpt.num_labels
    folder_dropout = ckpt.raw_config.get("classifier_dropout")
    if "classifier_dropout" in params and folder_dropout is not None and "classifier_dropout" not in head_kwargs:
        head_kwargs["classifier_dropout"] = _dropout_rate(folder_dropout, ckpt.config_file)
    with shapes_only():  # weights the checkpoint replaces are never drawn
        model = cls(ckpt.config, **head_kwargs)
    expected = model.state_dict()
    fresh: set[str] = set()
    fresh_keys: set[str] = set()
    state: dict[str, Tensor] = {}
    for key, target in expected.items():
        part = _part(key)
        source = ckpt.state.get(key)
        if part is not None and (part not in ckpt.parts or (source is not None and source.shape != target.shape)):
            fresh.add(part)  # absent from the checkpoint, or a classifier with another number of labels
            fresh_keys.add(key)
        elif source is None and key == _DECODER_KEY and draw_decoder:
            fresh.add("mlm decoder")
            fresh_keys.add(key)
        elif source is None and key == _DECODER_KEY:
            raise UsageError(f"{ckpt.path}: {ckpt.config_file.name} sets tie_word_embeddings false but the weights "
                             f"hold no {_DECODER_WEIGHT}, so the MLM head cannot be computed (transformers would "
                             "draw it at random); give the folder its decoder, or set tie_word_embeddings true if "
                             "the decoder is the word embeddings")
        elif source is None:
            raise BertctlError(f"{ckpt.path}: missing parameter {to_transformers_name(key)} for {name}")
        else:  # an encoder weight: read_checkpoint checked its shape against the config; an integer one (the
            # TensorFlow reader takes them) is cast as load_state_dict's copy would, since share_weights assigns it
            state[key] = source.to(target.dtype)
    model.to_empty(device="cpu")
    model.init_weights(module for prefix, module in model.named_modules()  # from the caller's RNG, as transformers
                       if any(f"{prefix}.{name}".lstrip(".") in fresh_keys for name, _ in module.named_parameters(
                           recurse=False)))
    current = model.state_dict()
    model.load_state_dict({**state, **{key: current[key] for key in fresh_keys}}, strict=True, assign=share_weights)
    model.fresh_heads = tuple(sorted(fresh))
    return model


def to_transformers_name(key: str) -> str:
    return next(iter(to_transformers_names({key: torch.empty(3)})))


def _dropout_rate(value: Any, config_file: Path | None = None) -> float:
    """A classifier_dropout argument, or config.json's: a number in [0, 1], or a one-line error (torch's is a
    TypeError naming no file; `true` would drop every input)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value <= 1:
        where, fix = (f"{config_file}: ", f"; fix {config_file.name}") if config_file else ("", "")
        raise UsageError(f"{where}classifier_dropout must be a number in [0, 1]{' or null' if config_file else ''}, "
                         f"got {reprlib.repr(value)}{fix}")
    return float(value)


def load_model(path: Path | str, architecture: str | None = None, **head_kwargs: Any) -> BertTaskModel:
    """Load any model folder bertctl reads as `architecture` (default: the one its weights carry)."""
    return build_model(read_checkpoint(path), architecture, **head_kwargs)


def saved_architecture(model: nn.Module, keep: dict[str, Tensor] | None = None) -> str:
    """The `architectures` entry of a saved folder: the model's class, or transformers' BertForNextSentencePrediction
    for an encoder saved with a kept NSP head and no MLM head (bertctl has no class of its own for it)."""
    return transformers_architecture(architecture_name(model), {_part(k) for k in keep or {}})


def transformers_architecture(name: str, parts: set[str] | frozenset[str]) -> str:
    """transformers' class for a bertctl architecture with these parts: an encoder with NSP and no MLM head is
    BertForNextSentencePrediction there."""
    return "BertForNextSentencePrediction" if name == "BertModel" and "nsp" in parts and "mlm" not in parts else name


def _config_json(model: BertTaskModel, labels: list[str] | None, problem_type: str | None,
                 extra: dict[str, Any] | None = None, keep: dict[str, Tensor] | None = None) -> dict[str, Any]:
    name = saved_architecture(model, keep)
    parts = sorted({p for p in map(_part, [*model.state_dict(), *(keep or {})]) if p is not None})
    data: dict[str, Any] = {"architectures": [name], "model_type": "bert", **model.config.to_dict(),
                            "position_embedding_type": "absolute", "classifier_dropout": None}
    data.update({k: v for k, v in (extra or {}).items() if k in KEPT_CONFIG_KEYS})
    head_dropout = getattr(model, "dropout", None)  # a classification head's: what it used, not the source's
    if isinstance(head_dropout, nn.Dropout):
        data["classifier_dropout"] = None if head_dropout.p == model.config.hidden_dropout_prob else head_dropout.p
    num_labels = getattr(model, "num_labels", None)
    if num_labels is not None:
        labels = labels or [f"LABEL_{i}" for i in range(num_labels)]
        if isinstance(labels, str) or len(labels) != num_labels or len(set(labels)) != len(labels):
            raise UsageError(f"labels {labels!r}: give {num_labels} different names, one per output of the head")
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
    target = check_new_out(folder, overwrite=take_bool("overwrite", overwrite))  # "yes" is no yes
    tokenizer = _checked_tokenizer(tokenizer, model.config.vocab_size)
    with building_folder(target) as tmp:
        state = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in model.state_dict().items()}
        keep = {k: v for k, v in (keep or {}).items() if k not in state}
        state.update({k: v.detach().to("cpu", torch.float32).contiguous() for k, v in keep.items()})
        bare = saved_architecture(model, keep) == "BertModel"  # transformers' BertModel files have no `bert.`
        save_file(to_transformers_names(state, bare=bare), str(tmp / "model.safetensors"), metadata={"format": "pt"})
        write_json_atomic(tmp / "config.json", _config_json(model, labels, problem_type, config_extra, keep))
        _write_tokenizer(tokenizer, tmp)
        if extra is not None:
            extra(tmp)
    return target


TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")


def _checked_tokenizer(tokenizer: Any, rows: int) -> Any:
    """`save_model`'s tokenizer, a folder's path with `~` expanded, refused before anything is written when it
    lacks tokenizer files or has more tokens than the model has embedding rows (every reader would refuse the
    folder: its last ids index out of range)."""
    from bertctl.tokenizer_folder import has_tokenizer, load_tokenizer

    if tokenizer is None:
        return None
    if isinstance(tokenizer, (str, Path)):
        tokenizer = user_path(tokenizer, "tokenizer")
        if not has_tokenizer(tokenizer):
            raise UsageError(f"tokenizer {tokenizer} has no tokenizer.json or vocab.txt; give a tokenizer folder")
    tokens = (load_tokenizer(tokenizer) if isinstance(tokenizer, Path) else tokenizer).vocab_size
    if tokens > rows:
        raise UsageError(f"the tokenizer has {tokens} tokens but the model has only {rows} embedding rows; save "
                         "the model with its own tokenizer")
    return tokenizer


def _write_tokenizer(tokenizer: Any, folder: Path) -> None:
    if tokenizer is None:
        return
    if isinstance(tokenizer, Path):
        for name in TOKENIZER_FILES:
            if (tokenizer / name).is_file():
                shutil.copyfile(tokenizer / name, folder / name)
        return
    tokenizer.save(folder)


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
        raise BertctlError(f"{ckpt.path}: the tokenizer has {tokenizer.vocab_size} tokens but the model has only "
                           f"{ckpt.config.vocab_size} embedding rows; use the tokenizer the model was trained with")
    return tokenizer
