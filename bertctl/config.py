"""Frozen configuration dataclasses and model presets; torch-free so the CLI stays fast.

Precedence for every run config: dataclass defaults -> preset -> `--config` file -> command-line flags.
Each config first gives its fields their types (`bertctl.config_types`), then checks their values.
"""

from __future__ import annotations

import dataclasses
import math
import os
import reprlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from bertctl.config_files import layered, read_config_file, refuse_unknown
from bertctl.config_types import any_case, field_types, fields_named, flag_name, take_types
from bertctl.errors import UsageError

# Every parameter-free name of transformers' ACT2FN (5.24), computed exactly as transformers does
# (bertctl.model._ACTIVATIONS); the ones with trained parameters (prelu, xielu) are refused.
ACTIVATIONS = ("gelu", "gelu_python", "gelu_new", "gelu_accurate", "gelu_pytorch_tanh", "gelu_python_tanh",
               "gelu_fast", "gelu_10", "quick_gelu", "relu", "relu6", "relu2", "leaky_relu", "silu", "swish", "mish",
               "hardswish", "laplace", "sqrtsoftplus", "tanh", "sigmoid", "linear")


_CONFIG = "model config"  # how an error names a config that comes from no file


@dataclass(frozen=True)
class BertConfig:
    """The encoder's shape, with transformers' field names so config.json is shared with it."""

    vocab_size: int = 30522  # rows of the word-embedding matrix (= tokenizer vocabulary)
    hidden_size: int = 768  # H: width of every token vector
    num_hidden_layers: int = 12  # L: post-LN Transformer layers
    num_attention_heads: int = 12  # A: heads per self-attention; hidden_size % A == 0
    intermediate_size: int = 3072  # feed-forward width, 4 x H in the paper
    hidden_act: str = "gelu"  # exact (erf) GELU as in the paper
    hidden_dropout_prob: float = 0.1  # dropout on embeddings and sub-layer outputs
    attention_probs_dropout_prob: float = 0.1  # dropout on attention probabilities
    max_position_embeddings: int = 512  # longest sequence the model accepts
    type_vocab_size: int = 2  # segment ids (A/B)
    initializer_range: float = 0.02  # std of the normal init
    layer_norm_eps: float = 1e-12
    pad_token_id: int | None = 0  # the embedding row kept at zero gradient; None in some hub configs
    tie_word_embeddings: bool = True  # the MLM decoder is the word embeddings; false: a matrix of its own

    def __post_init__(self) -> None:
        take_types(self)
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "max_position_embeddings", "type_vocab_size"):
            if getattr(self, name) < 1:
                raise UsageError(f"{_CONFIG}: {name} must be at least 1, got {getattr(self, name)}")
        if self.hidden_size % self.num_attention_heads:
            raise UsageError(
                f"{_CONFIG}: hidden_size {self.hidden_size} is not divisible by "
                f"num_attention_heads {self.num_attention_heads}"
            )
        if self.hidden_act not in ACTIVATIONS:
            raise UsageError(f"{_CONFIG}: hidden_act {self.hidden_act!r} is not one of {', '.join(ACTIVATIONS)}")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise UsageError(f"{_CONFIG}: {name} must be in [0, 1), got {getattr(self, name)}")
        for name in ("initializer_range", "layer_norm_eps"):
            if not 0.0 <= getattr(self, name) < math.inf:
                raise UsageError(f"{_CONFIG}: {name} must be a finite number, 0 or more, got {getattr(self, name)}")
        if self.pad_token_id is not None and not 0 <= self.pad_token_id < self.vocab_size:
            raise UsageError(f"{_CONFIG}: pad_token_id {self.pad_token_id} is outside the vocabulary")

    def to_dict(self) -> dict[str, Any]:
        """The fields as config.json holds them (transformers' names)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: Path | str | None = None) -> BertConfig:
        """Read a transformers-style config: keep our fields, ignore the rest (generation settings, `directionality`,
        `pooler_*`, `gradient_checkpointing`, `dtype` ...), refuse BERT variants we would compute wrongly.
        `source` (the config.json, or the flag and file) leads an error line in place of "model config", so a
        bad model folder is named: a command may read several."""
        try:
            if not isinstance(values, dict):
                raise UsageError(f"{_CONFIG}: give a mapping of config fields, not {reprlib.repr(values)}")
            refusal = _unsupported(values)
            if refusal:
                raise UsageError(f"{_CONFIG}: {refusal}")
            known = field_types(cls)
            with fields_named(lambda name: f"{_CONFIG}: {name}"):
                return cls(**{k: v for k, v in values.items() if k in known})
        except UsageError as exc:
            if source is None:
                raise
            raise UsageError(f"{source}: {str(exc).removeprefix(f'{_CONFIG}: ')}") from None

    def replace(self, **changes: Any) -> BertConfig:
        """A copy with some fields changed, checked like a new config."""
        return dataclasses.replace(self, **changes)

    def refuse_pairs(self, model: Path | str, pairs: str, instead: str) -> None:
        """Sentence pairs give the second text segment id 1, past a one-row token_type embedding (an IndexError
        deep in a forward pass): refused in one line, `pairs` saying where they come from."""
        if self.type_vocab_size < 2:
            raise UsageError(f"{pairs} but {model} has type_vocab_size {self.type_vocab_size} (one segment "
                             f"embedding); give a model with 2, or {instead}")


def _unsupported(values: dict[str, Any]) -> str | None:
    """Why a config.json describes a model bertctl's encoder would compute differently from transformers, if it does."""
    position = values.get("position_embedding_type") or "absolute"  # null meant absolute in transformers 4
    if position != "absolute":
        return f"position_embedding_type {position!r} is not supported (only 'absolute', as in BERT)"
    for key in ("is_decoder", "add_cross_attention"):
        if values.get(key):
            return f"{key}=true is not BERT's encoder; use an encoder checkpoint"
    if values.get("pruned_heads"):
        return "pruned_heads is not supported (attention heads were removed); use an unpruned checkpoint"
    return None


def _shape(layers: int, hidden: int, heads: int) -> dict[str, int]:
    return {"num_hidden_layers": layers, "hidden_size": hidden, "num_attention_heads": heads,
            "intermediate_size": 4 * hidden}


PRESETS: dict[str, dict[str, int]] = {
    "tiny": _shape(2, 128, 2),
    "mini": _shape(4, 256, 4),
    "small": _shape(4, 512, 8),
    "medium": _shape(8, 512, 8),
    "base": _shape(12, 768, 12),
    "large": _shape(24, 1024, 16),
}


def preset(name: str, **overrides: Any) -> BertConfig:
    """A named BERT size (Turc et al. 2019 for the small ones; Devlin et al. 2018 for base/large)."""
    if any_case(name) not in PRESETS:
        raise UsageError(f"unknown model preset {name!r}: choose one of {', '.join(PRESETS)} or a config.json path")
    refuse_unknown(BertConfig, overrides, "model config")
    return BertConfig(**{**PRESETS[any_case(name)], **overrides})


def model_config(name_or_path: str, defaults: dict[str, Any] | None = None, **overrides: Any) -> BertConfig:
    """A preset name or the path of a config.json (a model folder works too). `defaults` fill what a config.json
    leaves out and replace a preset's own values; `overrides` win over both."""
    defaults = defaults or {}
    if any_case(name_or_path) in PRESETS:
        return preset(name_or_path, **{**defaults, **overrides})
    path = Path(name_or_path).expanduser()
    if path.is_dir():  # a model folder: config.json, else Google's bert_config.json (a TensorFlow release)
        path = next((path / n for n in ("config.json", "bert_config.json") if (path / n).is_file()),
                    path / "config.json")
    if not path.is_file():
        raise UsageError(f"--model-config: {name_or_path!r} is neither a preset ({', '.join(PRESETS)}) "
                         "nor an existing config.json")
    values = read_config_file(path, "--model-config")
    shape = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
    if not any(key in values for key in shape):  # another file (a run's --config, say): BERT-base, unasked
        raise UsageError(f"--model-config: {path} sets none of {', '.join(shape)}; give a model config.json "
                         f"or a preset ({', '.join(PRESETS)})")
    return BertConfig.from_dict({**defaults, **values, **overrides}, source=f"--model-config: {path}")


def _require(cfg: Any, name: str, ok: bool, wanted: str) -> None:
    """One flag's range check; written as `low <= x < high`, NaN (which compares False) fails it too."""
    if not ok:
        raise UsageError(f"{flag_name(name)} must be {wanted}, got {getattr(cfg, name)}")


SEED_LIMIT = 2**32  # seeds are 0 .. 2**32 - 1, as numpy's and transformers' set_seed take them on any platform
MAX_VOCAB_SIZE = 1_000_000  # past any BERT vocabulary in use (XLM-R's 250,002); the trainer's memory grows with it
MAX_NUM_WORKERS = 256  # loader processes per rank: one collates ~35,000 sequences/s, and torch forks them one by one


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity, as under taskset or a container's cpuset), which
    worker counts default to and are weighed against."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def check_seeds(flag: str, seeds: tuple[int, ...]) -> None:
    """torch refuses seeds past 2**64 and numpy negative ones, each with its own traceback; one rule for all."""
    for seed in seeds:
        if not 0 <= seed < SEED_LIMIT:
            raise UsageError(f"{flag} {seed}: give a whole number from 0 to {SEED_LIMIT - 1}")


def _check_optimizer(cfg: PretrainConfig | FinetuneConfig) -> None:
    """Learning rate and AdamW settings of both training configs: torch refuses a bad beta or eps only when
    training starts, and takes NaN/inf learning rates, decays and clips (a run that saves NaN weights)."""
    for name in ("lr", "adam_eps"):
        _require(cfg, name, 0.0 < getattr(cfg, name) < math.inf, "a finite number above 0")
    for name in ("weight_decay", "clip"):
        _require(cfg, name, 0.0 <= getattr(cfg, name) < math.inf, "a finite number, 0 or more")
    for name in ("adam_beta1", "adam_beta2"):
        _require(cfg, name, 0.0 <= getattr(cfg, name) < 1.0, "in [0, 1)")


def warmup_steps(fraction: float, steps: int) -> int:
    """A warmup fraction in steps, rounded up as transformers' Trainer does (its float product too)."""
    return math.ceil(fraction * steps)


CORPUS_OBJECTIVES = ("mlm+nsp", "mlm", "mlm+sop")
MASKING_MODES = ("dynamic", "static")


@dataclass(frozen=True)
class CorpusConfig:
    """`bertctl corpus build`: inputs, tokenizer and Google's create_pretraining_data parameters."""

    inputs: tuple[str, ...] = ()  # text files (.gz/.bz2/.xz too), folders, globs, .jsonl/.csv/.parquet, datasets
    tokenizer: Path | None = None  # tokenizer folder (tokenizer.json or vocab.txt), or a model folder
    out: Path | None = None  # output folder (a datasets DatasetDict + manifest.json)
    max_seq_length: int = 128  # tokens per instance, [CLS]/[SEP] included
    objective: str = "mlm+nsp"  # mlm+nsp (BERT), mlm (one segment), mlm+sop (ALBERT's sentence order)
    masking: str = "dynamic"  # dynamic: the pre-training collator masks each batch; static: masks stored
    dupe_factor: int = 1  # passes over the data, each with different instances (and masks when static)
    short_seq_prob: float = 0.1  # share of documents that get a random shorter target length
    masked_lm_prob: float = 0.15  # share of an instance's tokens to predict
    max_predictions_per_seq: int = 20  # at most this many predictions per instance
    whole_word_masking: bool = False  # mask a word's ## pieces together with it
    validation_fraction: float = 0.0  # share of documents (evenly spaced) held out as the validation split
    text_column: str = "text"  # column of .jsonl/.csv/.parquet/dataset inputs: one document per row
    document_per_line: bool = False  # text files: each line is a document (default: blank lines separate)
    split_sentences: bool = True  # split lines into sentences (off: each line is already one sentence)
    lowercase: bool | None = None  # casing of a bare vocab.txt tokenizer (default: its tokenizer_config)
    shard_size_mb: float = 4.0  # MB of text per shard: unit of work, of resume and of the NotNext pool
    seed: int = 12345  # every random choice derives from it (Google's default)
    workers: int = 0  # processes; 0 = all cores. Never changes the output
    overwrite: bool = False  # replace an existing output folder

    def __post_init__(self) -> None:
        take_types(self)
        if self.objective not in CORPUS_OBJECTIVES:
            raise UsageError(f"--objective {self.objective!r}: choose one of {', '.join(CORPUS_OBJECTIVES)}")
        if self.masking not in MASKING_MODES:
            raise UsageError(f"--masking {self.masking!r}: choose one of {', '.join(MASKING_MODES)}")
        if not 5 <= self.max_seq_length <= 65535:
            raise UsageError(f"--max-seq-length {self.max_seq_length}: must be from 5 ([CLS] A [SEP] B [SEP]) "
                             "to 65535")
        for name, low in (("dupe_factor", 1), ("max_predictions_per_seq", 1), ("workers", 0)):
            if getattr(self, name) < low:
                raise UsageError(f"{flag_name(name)} must be at least {low}, got {getattr(self, name)}")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise UsageError(f"--short-seq-prob must be in [0, 1], got {self.short_seq_prob}")
        if not 0.0 < self.masked_lm_prob <= 1.0:
            raise UsageError(f"--masked-lm-prob must be in (0, 1], got {self.masked_lm_prob}")
        if not 0.0 <= self.validation_fraction < 1.0:
            raise UsageError(f"--validation-fraction must be in [0, 1), got {self.validation_fraction}")
        _require(self, "shard_size_mb", 0.0 < self.shard_size_mb < math.inf, "a finite number above 0")
        check_seeds("--seed", (self.seed,))


@dataclass(frozen=True)
class CorpusImportConfig:
    """`bertctl corpus import`: the TFRecord files of Google's create_pretraining_data.py (or NVIDIA's HDF5 shards)
    as a bertctl corpus."""

    inputs: tuple[str, ...] = ()  # TFRecord files (GZIP/ZLIB-compressed too) or HDF5 shards, folders, globs
    tokenizer: Path | None = None  # the vocabulary the records' ids come from (folder or vocab.txt)
    out: Path | None = None  # output folder (a datasets DatasetDict + manifest.json)
    validation_fraction: float = 0.0  # share of records (evenly spaced) held out as the validation split
    lowercase: bool | None = None  # casing of a bare vocab.txt tokenizer (default: its tokenizer_config)
    workers: int = 0  # processes, each importing whole files; 0 = all cores. Never changes the output
    overwrite: bool = False  # replace an existing output folder

    def __post_init__(self) -> None:
        take_types(self)
        if not 0.0 <= self.validation_fraction < 1.0:
            raise UsageError(f"--validation-fraction must be in [0, 1), got {self.validation_fraction}")
        if self.workers < 0:
            raise UsageError(f"--workers must be at least 0, got {self.workers}")


@dataclass(frozen=True)
class PretrainConfig:
    """`bertctl pretrain`: paper defaults (Devlin et al. 2018, appendix A.2) where the paper has one."""

    corpus: Path | None = None  # `bertctl corpus build` output; None: the bundled novels (see `quickstart`)
    out: Path = Path("runs/quickstart")  # run folder: run.json, metrics.jsonl, step-*/, final/
    model_config: str | None = None  # preset (tiny|mini|small|medium|base|large) or a config.json path; None: base
    tokenizer: Path | None = None  # default: the corpus's tokenizer (or --init-from's)
    init_from: Path | None = None  # start from these weights (phase 2 at 512), fresh optimizer
    steps: int = 1_000_000  # optimizer steps
    batch_size: int = 256  # global batch in sequences (all ranks, all micro-batches)
    micro_batch_size: int | None = None  # per rank and forward pass; default batch_size / world size
    lr: float = 1e-4  # peak learning rate
    warmup_steps: int | None = None  # linear warmup length; None: 10,000
    warmup_fraction: float | None = None  # alternative to warmup_steps: a share of --steps
    schedule: str = "linear"  # decay after warmup: linear | cosine | constant
    optimizer: str = "adamw"  # adamw | lamb
    weight_decay: float = 0.01  # not applied to biases and LayerNorm
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-6
    clip: float = 1.0  # max global gradient norm (0 turns clipping off)
    precision: str = "auto"  # fp32 | bf16 | fp16 | auto (bf16 on Ampere+ GPUs, else fp32)
    compile: bool | None = None  # torch.compile the model (batches padded to the corpus length); None: on CUDA
    dropout: float | None = None  # sets hidden and attention dropout; None keeps the model config's (0.1)
    gradient_checkpointing: bool = False  # recompute each layer in the backward pass: less memory, same numbers
    save_every: int = 10_000  # steps between checkpoints (0: only the final one)
    keep: int = 3  # step checkpoints kept (oldest removed first); 0 keeps them all
    log_every: int = 100  # steps between metrics.jsonl rows
    eval_every: int = 10_000  # steps between validation passes (0: never)
    eval_samples: int = 10_000  # validation sequences per pass (at most)
    seed: int = 42  # every random choice derives from it
    resume: bool = False  # continue from the newest complete checkpoint in --out
    num_workers: int = 1  # DataLoader worker processes
    device: str | None = None  # cpu | cuda (default: cuda when available)
    max_bad_steps: int = 5  # consecutive NaN/inf losses before the run stops

    # Each pair's fields exclude each other (what to do instead); a layer of settings that gives one overrides
    # the other from the layers below (`layered`).
    EXCLUSIVE: ClassVar[dict[tuple[str, str], str]] = {
        ("warmup_steps", "warmup_fraction"): "give one of them",
        ("init_from", "model_config"): "--init-from fixes the model, so drop --model-config",
    }

    def __post_init__(self) -> None:
        take_types(self)
        if any_case(self.model_config) in PRESETS:  # `--model-config Tiny`; a config.json path keeps its case
            object.__setattr__(self, "model_config", any_case(self.model_config))
        for (first, second), hint in self.EXCLUSIVE.items():
            if getattr(self, first) is not None and getattr(self, second) is not None:
                raise UsageError(f"{flag_name(first)} and {flag_name(second)} exclude each other: {hint}")
        positive = ("steps", "batch_size", "log_every", "max_bad_steps", "eval_samples")
        for name in positive:
            if getattr(self, name) < 1:
                raise UsageError(f"{flag_name(name)} must be at least 1, got {getattr(self, name)}")
        for name in ("warmup_steps", "save_every", "keep", "eval_every", "num_workers"):
            if (getattr(self, name) or 0) < 0:
                raise UsageError(f"{flag_name(name)} must not be negative, got {getattr(self, name)}")
        if self.num_workers > MAX_NUM_WORKERS:
            raise UsageError(f"--num-workers {self.num_workers}: give at most {MAX_NUM_WORKERS}")
        if self.micro_batch_size is not None and self.micro_batch_size < 1:
            raise UsageError(f"--micro-batch-size must be at least 1, got {self.micro_batch_size}")
        if self.warmup_fraction is not None and not 0.0 <= self.warmup_fraction <= 1.0:
            raise UsageError(f"--warmup-fraction must be in [0, 1], got {self.warmup_fraction}")
        _check_optimizer(self)
        if self.dropout is not None and not 0.0 <= self.dropout < 1.0:
            raise UsageError(f"--dropout must be in [0, 1), got {self.dropout}")
        check_seeds("--seed", (self.seed,))
        choices = {"schedule": ("linear", "cosine", "constant"), "optimizer": ("adamw", "lamb"),
                   "precision": ("auto", "fp32", "bf16", "fp16")}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise UsageError(f"--{name} {getattr(self, name)!r}: choose one of {', '.join(allowed)}")

    @classmethod
    def quickstart(cls, **changes: Any) -> PretrainConfig:
        """What `bertctl pretrain` with no --corpus runs: the bundled novels and a small model trained for a few
        minutes on a CPU (QUICKSTART_PRETRAIN), with `changes` on top. A bare PretrainConfig() keeps the paper's
        BERT-base schedule, on the novels too when it has no corpus."""
        refuse_unknown(cls, changes, "PretrainConfig.quickstart")
        return cls(**layered(cls, QUICKSTART_PRETRAIN, changes))

    def model_name(self) -> str:
        """The preset or config.json of a new model: --model-config, else the paper's BERT-base."""
        return "base" if self.model_config is None else self.model_config

    def warmup(self) -> int:
        """Warmup steps: --warmup-fraction of --steps when given, else --warmup-steps, else the paper's 10,000."""
        if self.warmup_fraction is not None:
            return warmup_steps(self.warmup_fraction, self.steps)
        return 10_000 if self.warmup_steps is None else self.warmup_steps

    def micro_batches(self, world_size: int) -> tuple[int, int]:
        """(micro-batch size, micro-batches per rank per step) that make up the global batch exactly."""
        per_rank, rest = divmod(self.batch_size, world_size)
        if rest:
            raise UsageError(f"--batch-size {self.batch_size} is not divisible by the {world_size} processes")
        micro = self.micro_batch_size or per_rank
        if per_rank % micro:
            raise UsageError(f"--micro-batch-size {micro} does not divide the per-process batch {per_rank}")
        return micro, per_rank // micro


QUICKSTART_PRETRAIN = {  # a few minutes on 2 CPU cores: many small steps beat a few big ones there
    "model_config": "tiny", "steps": 2500, "batch_size": 32, "lr": 2e-3, "dropout": 0.0,
    "warmup_fraction": 0.04,  # 100 of the 2,500 steps, and as short a share of a shorter --steps
    "compile": False,  # compiling would take longer than this short run
    "save_every": 500, "log_every": 50, "eval_every": 500, "eval_samples": 512,
}


FINETUNE_PROBLEMS = ("auto", "classification", "regression")


@dataclass(frozen=True)
class FinetuneConfig:
    """`bertctl finetune glue|classify|squad|ner|choice`: the BERT paper's fine-tuning defaults (Devlin et al.
    2018, A.3); `FinetuneConfig.squad(...)` starts from google-research/bert's SQuAD ones instead
    (SQUAD_DEFAULTS), `FinetuneConfig.ner(...)` from transformers' run_ner.py's (NER_DEFAULTS),
    `FinetuneConfig.choice(...)` from run_swag.py's (CHOICE_DEFAULTS)."""

    model: Path | None = None  # any model folder bertctl reads; a missing task head is created fresh
    out: Path | None = None  # run folder: best model + eval_results.json, run.json, metrics.jsonl
    task: str | None = None  # GLUE task (cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli) or all
    data: str | None = None  # GLUE download folder (CoLA/, SST-2/, ...) or a hub dataset id (nyu-mll/glue)
    train: str | None = None  # classify: training file (.csv, .tsv, .jsonl or .parquet); ner: CoNLL text or .jsonl;
    # choice: SWAG-style .csv or .jsonl; squad, ner, choice: also a hub copy or a hub id NAME[[:CONFIG]:SPLIT]; as
    # spelt (`~` expanded): `./x/y` is a local path, never a hub id
    validation: str | None = None  # classify, ner, choice, squad: file scored after each epoch (None: the last epoch
    # is kept); squad, ner, choice: also a hub copy or a hub id; as spelt, as `train`
    text_columns: tuple[str, ...] = ()  # classify: one or two text columns
    label_column: str = "label"  # classify: the label column
    problem: str = "auto"  # classify: auto | classification | regression
    label_names: tuple[str, ...] | None = None  # classify, ner: class names (tags) in head order (default: sorted)
    doc_stride: int = 128  # squad: pieces between the starts of a long context's windows
    max_query_length: int = 64  # squad: question pieces kept (the rest is cut)
    n_best_size: int = 20  # squad: start and end candidates per window, and answers in nbest_predictions.json
    max_answer_length: int = 30  # squad: longest answer, in pieces
    null_score_diff_threshold: float = 0.0  # squad v2.0: predict no answer when null beats the best span by more
    max_seq_length: int = 128  # tokens per example, [CLS]/[SEP] included; longer texts are truncated
    batch_size: int = 32  # examples per optimizer step
    micro_batch_size: int | None = None  # examples per forward pass (gradient accumulation); None: batch_size
    eval_batch_size: int = 128  # examples per forward pass when scoring (metrics move by float rounding only)
    lr: float = 2e-5  # peak learning rate (the paper picks from 5e-5, 3e-5, 2e-5 per task)
    epochs: int = 3  # passes over the training data
    warmup_fraction: float = 0.1  # share of the optimizer steps spent in linear warmup
    schedule: str = "linear"  # decay after warmup: linear | cosine | constant
    weight_decay: float = 0.01  # AdamW decoupled weight decay, not on biases and LayerNorm
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-6  # Google's BERT value
    clip: float = 1.0  # max global gradient norm (0 turns clipping off)
    dropout: float | None = 0.1  # hidden, attention and classifier dropout; None keeps the model config's
    seeds: tuple[int, ...] = (42,)  # one run per seed (head init, dropout, data order); several: mean/std
    group_by_length: bool = False  # batch examples of similar length together (less padding, faster)
    gradient_checkpointing: bool = False  # recompute each layer in the backward pass: less memory, same numbers
    precision: str = "auto"  # fp32 | bf16 | fp16 | auto (bf16 on Ampere+ GPUs, else fp32)
    device: str | None = None  # cpu | cuda (default: cuda when available)
    log_every: int = 50  # optimizer steps between metrics.jsonl rows
    save_every: int = 0  # optimizer steps between resumable checkpoints (0: only on SIGINT/SIGTERM)
    max_bad_steps: int = 5  # NaN/inf steps in a row before the run stops
    resume: bool = False  # continue the unfinished run of --out from its newest checkpoint
    overwrite: bool = False  # replace an existing --out (and an unfinished run of it)

    def __post_init__(self) -> None:
        take_types(self)
        if self.save_every < 0:
            raise UsageError(f"--save-every must be 0 or more, got {self.save_every}")
        if self.max_seq_length < 3:
            raise UsageError(f"--max-seq-length {self.max_seq_length}: must be at least 3 ([CLS] A [SEP])")
        for name in ("batch_size", "eval_batch_size", "epochs", "log_every", "max_bad_steps", "doc_stride",
                     "max_query_length", "n_best_size", "max_answer_length"):
            if getattr(self, name) < 1:
                raise UsageError(f"{flag_name(name)} must be at least 1, got {getattr(self, name)}")
        if not math.isfinite(self.null_score_diff_threshold):
            raise UsageError("--null-score-diff-threshold must be a finite number, got "
                             f"{self.null_score_diff_threshold}")
        if self.micro_batch_size is not None and self.micro_batch_size < 1:
            raise UsageError(f"--micro-batch-size must be at least 1, got {self.micro_batch_size}")
        if self.micro_batch_size is not None and self.batch_size % self.micro_batch_size:
            raise UsageError(f"--micro-batch-size {self.micro_batch_size} must divide --batch-size "
                             f"{self.batch_size}")
        _check_optimizer(self)
        if not 0.0 <= self.warmup_fraction <= 1.0:
            raise UsageError(f"--warmup-fraction must be in [0, 1], got {self.warmup_fraction}")
        if self.dropout is not None and not 0.0 <= self.dropout < 1.0:
            raise UsageError(f"--dropout must be in [0, 1), got {self.dropout}")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise UsageError(f"--seeds: give one or more different seeds, got {','.join(map(str, self.seeds))!r}")
        check_seeds("--seeds", self.seeds)
        choices = {"schedule": ("linear", "cosine", "constant"), "precision": ("auto", "fp32", "bf16", "fp16"),
                   "problem": FINETUNE_PROBLEMS}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise UsageError(f"--{name} {getattr(self, name)!r}: choose one of {', '.join(allowed)}")
        if self.label_names is not None and not self.label_names:
            raise UsageError("--label-names: give the class names, comma-separated (or leave it off: sorted)")
        if self.label_names is not None and self.problem == "regression":
            raise UsageError("--label-names names classes; --problem regression has none: leave one of them off")

    @classmethod
    def squad(cls, **values: Any) -> FinetuneConfig:
        """A config with google-research/bert's SQuAD defaults (SQUAD_DEFAULTS) under `values`."""
        return cls(**{**SQUAD_DEFAULTS, **values})

    @classmethod
    def ner(cls, **values: Any) -> FinetuneConfig:
        """A config with transformers' run_ner.py learning rate (NER_DEFAULTS) under `values`."""
        return cls(**{**NER_DEFAULTS, **values})

    @classmethod
    def choice(cls, **values: Any) -> FinetuneConfig:
        """A config with transformers' run_swag.py learning rate and batch (CHOICE_DEFAULTS) under `values`."""
        return cls(**{**CHOICE_DEFAULTS, **values})

    def micro_batch(self, world_size: int = 1) -> int:
        """Examples per forward pass and process; without --micro-batch-size a process takes its whole share
        of the batch at once."""
        return self.micro_batch_size or -(-self.batch_size // world_size)


# google-research/bert's README for BERT-base on SQuAD 1.1 (batch 32 as FinetuneConfig's, warmup 10% too)
SQUAD_DEFAULTS: dict[str, Any] = {"lr": 3e-5, "epochs": 2, "max_seq_length": 384}
# transformers' run_ner.py (TrainingArguments' learning rate; 3 epochs, 128 tokens and batch 32 as FinetuneConfig's)
NER_DEFAULTS: dict[str, Any] = {"lr": 5e-5}
# transformers' run_swag.py README (lr 5e-5, 3 epochs, batch 16 examples: the paper's SWAG batch too); 128 tokens
# as FinetuneConfig's and run_swag_no_trainer.py's (run_swag.py's own default is the tokenizer's 512)
CHOICE_DEFAULTS: dict[str, Any] = {"lr": 5e-5, "batch_size": 16}


@dataclass(frozen=True)
class TokenizerTrainConfig:
    """`bertctl tokenizer train`: a WordPiece vocabulary from text, in the format of Google's vocab.txt."""

    inputs: tuple[str, ...] = ()  # text files (.gz/.bz2/.xz too), folders, globs, .jsonl/.json/.csv/.parquet, datasets
    out: Path | None = None  # output folder: tokenizer.json, vocab.txt, tokenizer_config.json, ...
    vocab_size: int = 30522  # exact number of entries (bert-base's size); unlearnable rest: [unusedN]
    lowercase: bool = True  # lowercase the text (an "uncased" vocabulary, as bert-base-uncased)
    strip_accents: bool | None = None  # drop accents (None: when lowercasing, as Google's tokenizer)
    min_frequency: int = 2  # a pair of pieces must occur this often to be merged into a new piece
    limit_alphabet: int = 1000  # at most this many characters (the most frequent), each also as ##char
    text_column: str = "text"  # column of .jsonl/.json/.csv/.parquet/dataset inputs
    overwrite: bool = False  # replace an existing output folder

    def __post_init__(self) -> None:
        take_types(self)
        if not self.inputs:
            raise UsageError("tokenizer train: give INPUTS (text files, folders, globs or a dataset name)")
        if self.out is None:
            raise UsageError("tokenizer train: --out DIR is required")
        for name, low in (("vocab_size", 6), ("min_frequency", 1), ("limit_alphabet", 1)):
            if getattr(self, name) < low:
                raise UsageError(f"{flag_name(name)} must be at least {low}, got {getattr(self, name)}")
        if self.vocab_size > MAX_VOCAB_SIZE:
            raise UsageError(f"--vocab-size {self.vocab_size}: give at most {MAX_VOCAB_SIZE:,}")
