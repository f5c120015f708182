"""`bertctl finetune choice`: fine-tune BERT for multiple choice (SWAG) on the loop `finetune` runs for GLUE.

transformers' run_swag.py recipe (features in `data.choice`, scores in `choice`) and the paper's head (4.4):
each (context, choice) pair is one sequence, its pooled [CLS] scored by one linear layer, softmax over the
choices. Shared with GLUE: seeds, accuracy on --validation after every epoch keeping the best epoch, torchrun
DDP, exact resume, run.json/metrics.jsonl, OUT put in place whole. The defaults are FinetuneConfig's with
run_swag.py's README learning rate and batch (`FinetuneConfig.choice()`: lr 5e-5, 3 epochs, 128 tokens, batch 16
examples, i.e. 64 sequences of SWAG's 4 choices). A model without a multiple-choice head gets a fresh one.
"""

from __future__ import annotations

from pathlib import Path

from torch import nn

from bertctl import stop_signals, training
from bertctl.checkpoint import build_model
from bertctl.choice import CHOICE_ARCHITECTURE, ChoiceTask, collate_choices, score_dev
from bertctl.config import FinetuneConfig
from bertctl.data.choice import ChoiceData, make_choice_features, read_choice
from bertctl.errors import UsageError
from bertctl.finetune import Base, launch, refuse_the_other_commands, require, train_and_publish
from bertctl.finetune_classifier import classification_loss_terms
from bertctl.finetune_seed import Head, Prepared, head_dropout
from bertctl.finetune_work import say, say_data


def finetune_choice(cfg: FinetuneConfig) -> Path | None:
    """Fine-tune on a multiple-choice training file (scored on `cfg.validation` after each epoch); returns OUT,
    or None when a signal stopped the run (the same call with `resume=True` continues it). Build `cfg` with
    `FinetuneConfig.choice(...)` for run_swag.py's learning rate and batch."""
    require(cfg, "train", "model", "out")
    refuse_the_other_commands(cfg, "choice")

    def body(base: Base, out: Path, work: Path, env: training.Distributed, stop: stop_signals.GracefulStop) -> None:
        base.ckpt.config.refuse_pairs(base.ckpt.path, "multiple choice gives (context, choice) pairs",
                                      "pre-train one with type_vocab_size 2")
        train = read_choice(cfg.train, "--train")
        task = ChoiceTask(train.num_choices)
        dev = {}
        if cfg.validation is not None:
            dev["validation"] = read_choice(cfg.validation, "--validation")
            if dev["validation"].num_choices != task.num_choices:
                raise UsageError(f"--validation {cfg.validation}: {dev['validation'].num_choices} choices per "
                                 f"example where --train {train.path} has {task.num_choices}")
        say_data(f"choice: {len(train)} training examples of {task.num_choices} choices",
                 len(dev["validation"]) if dev else None, "examples", env)
        train_and_publish(cfg, base, task, train, dev, out, work, env, stop, prepare=_prepare)

    return launch(cfg, body, architecture=CHOICE_ARCHITECTURE)


def _prepare(cfg: FinetuneConfig, base: Base, task: ChoiceTask, train: ChoiceData, dev: dict[str, ChoiceData],
             env: training.Distributed) -> Prepared:
    train_features = make_choice_features(base.tokenizer, train, cfg.max_seq_length)
    dev_features = {split: make_choice_features(base.tokenizer, data, cfg.max_seq_length)
                    for split, data in dev.items()}
    for split, f in {"train": train_features, **dev_features}.items():
        if f.truncated and env.is_main:
            say(f"choice {split}: {f.truncated} of {len(f)} examples had a choice cut to {cfg.max_seq_length} tokens")
    head = Head(_model, collate_choices, classification_loss_terms, score_dev, classifies=False)
    return Prepared(task, base.ckpt, base.tokenizer, train_features, dev_features, base.precision, head)


def _model(cfg: FinetuneConfig, prep: Prepared, announce: bool) -> nn.Module:
    model = build_model(prep.ckpt, CHOICE_ARCHITECTURE, **head_dropout(cfg))
    if announce:
        fresh = set(model.fresh_heads)
        what = "a new multiple-choice head" if "classifier" in fresh else "its own multiple-choice head"
        pooler = "; the pooler is new too" if "pooler" in fresh else ""
        say(f"choice: fine-tuning {cfg.model} with {what}{pooler}")
    return model
