"""`bertctl finetune ner`: fine-tune BERT for named-entity recognition on CoNLL-2003-style data.

transformers' run_ner.py recipe as most users run it (label_all_tokens off; features in `data.ner`, scores in
`ner`) on the loop `finetune` runs for GLUE: seeds, seqeval's entity F1 on --validation after every epoch
keeping the best epoch, torchrun DDP, exact resume, run.json/metrics.jsonl, OUT put in place whole. The
defaults are FinetuneConfig's with run_ner.py's learning rate (`FinetuneConfig.ner()`: lr 5e-5, 3 epochs, 128
tokens, batch 32). The tags are --label-names, else a hub copy's ClassLabel names, else the training file's
sorted, in the model's own id2label order where it names the same tags (all as run_ner.py); they are saved as
the model's id2label, so transformers' token-classification pipeline names them. A model without a
token-classification head gets a fresh one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from bertctl import stop_signals, training
from bertctl.checkpoint import build_model
from bertctl.config import FinetuneConfig
from bertctl.data.ner import IGNORED, NerData, check_known, make_ner_features, read_ner, tag_set
from bertctl.finetune import Base, launch, refuse_the_other_commands, require, train_and_publish
from bertctl.finetune_seed import Head, Prepared, head_dropout
from bertctl.finetune_work import say, say_data
from bertctl.ner import TOKEN_ARCHITECTURE, NerTask, collate_tokens, score_dev


def finetune_ner(cfg: FinetuneConfig) -> Path | None:
    """Fine-tune on a NER training file (scored on `cfg.validation` after each epoch); returns OUT, or None
    when a signal stopped the run (the same call with `resume=True` continues it). Build `cfg` with
    `FinetuneConfig.ner(...)` for run_ner.py's learning rate."""
    require(cfg, "train", "model", "out")
    refuse_the_other_commands(cfg, "ner")

    def body(base: Base, out: Path, work: Path, env: training.Distributed, stop: stop_signals.GracefulStop) -> None:
        train = read_ner(cfg.train, "--train", True, cfg.label_names)
        task = NerTask(tag_set(train, cfg.label_names, base.ckpt.labels))
        dev = {}
        if cfg.validation is not None:
            dev["validation"] = read_ner(cfg.validation, "--validation", True, cfg.label_names)
            check_known(dev["validation"], task.label_names, "--validation", f"--train {train.path}")
        say_data(f"ner: {len(train)} training sentences, {task.num_labels} tags ({', '.join(task.label_names)})",
                 len(dev["validation"]) if dev else None, "sentences", env)
        train_and_publish(cfg, base, task, train, dev, out, work, env, stop, prepare=_prepare)

    return launch(cfg, body, architecture=TOKEN_ARCHITECTURE)


def _prepare(cfg: FinetuneConfig, base: Base, task: NerTask, train: NerData, dev: dict[str, NerData],
             env: training.Distributed) -> Prepared:
    def features(data: NerData) -> Any:
        return make_ner_features(base.tokenizer, data, task.label_names, cfg.max_seq_length)

    train_features = features(train)
    dev_features = {split: features(data) for split, data in dev.items()}
    for split, f in {"train": train_features, **dev_features}.items():
        if f.truncated and env.is_main:
            say(f"ner {split}: {f.truncated} of {len(f)} sentences cut to {cfg.max_seq_length} tokens (their "
                "last words are not trained on or scored)")
    head = Head(_model, collate_tokens, _loss_terms, score_dev, weights=_labelled)
    return Prepared(task, base.ckpt, base.tokenizer, train_features, dev_features, base.precision, head)


def _model(cfg: FinetuneConfig, prep: Prepared, announce: bool) -> nn.Module:
    model = build_model(prep.ckpt, TOKEN_ARCHITECTURE, num_labels=prep.task.num_labels, **head_dropout(cfg))
    if announce:
        what = (f"a new token-classification head ({prep.task.num_labels} tags)" if "classifier" in
                model.fresh_heads else "its own token-classification head")
        say(f"ner: fine-tuning {cfg.model} with {what}")
    return model


def _labelled(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """The loss is a mean over labelled pieces (each word's first one), weighted by their count in the batch."""
    return {"task": ((batch["labels"] != IGNORED) & batch["real"][:, None]).sum()}


def _loss_terms(model: nn.Module, batch: dict[str, Tensor]) -> dict[str, tuple[Tensor, Tensor]]:
    """Cross-entropy over the labelled pieces (the model's own loss, but 0 rather than NaN for a micro-batch
    without any) and the pieces whose tag is right."""
    labels = batch["labels"]
    logits = model(batch["input_ids"], batch["token_type_ids"], batch.get("attention_mask"), skip_padding=True).logits
    counted = (labels != IGNORED).sum().clamp(min=1)
    loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORED,
                           reduction="sum") / counted
    right = (logits.argmax(-1) == labels) & (labels != IGNORED) & batch["real"][:, None]
    return {"task": (loss, right.sum())}

