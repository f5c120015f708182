"""The sequence-classification head `finetune glue` and `finetune classify` train: a classifier (or regressor)
on [CLS], built fresh or kept from the model folder with its outputs aligned to the task's labels by name.

What finetune_tagging, finetune_multiple_choice and finetune_qa are to their tasks, without a command of its own: both
commands live in finetune.py, whose loop trains this head by default.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import Tensor, nn

from bertctl import training
from bertctl.checkpoint import Checkpoint, build_model
from bertctl.config import FinetuneConfig
from bertctl.data.glue import outputs_by_class
from bertctl.evaluate import class_names, collate, score
from bertctl.finetune_seed import Head, Prepared, head_dropout
from bertctl.finetune_work import say

log = logging.getLogger(__name__)
ARCHITECTURE = "BertForSequenceClassification"  # GLUE's and classify's head


def _model(cfg: FinetuneConfig, prep: Prepared, announce: bool) -> nn.Module:
    model = build_model(prep.ckpt, ARCHITECTURE, num_labels=prep.task.num_labels, **head_dropout(cfg))
    fresh = set(model.fresh_heads)
    reordered = "classifier" not in fresh and _align_classifier(model, prep.ckpt, prep.task, cfg.model, announce)
    if announce:
        what = (f"a new classifier head ({prep.task.num_labels} output(s))" if "classifier" in fresh
                else "its own classifier head" + (", its outputs reordered to the labels by name" if reordered else ""))
        pooler = "; the pooler is new too" if "pooler" in fresh else ""
        say(f"{prep.task.name}: fine-tuning {cfg.model} with {what}{pooler}")
    return model


def _align_classifier(model: nn.Module, ckpt: Checkpoint, task: Any, name: str, announce: bool) -> bool:
    """A kept head whose id2label names the task's classes in another order (an MNLI model from the hub:
    contradiction, entailment, neutral) has its rows permuted into the task's order, so it goes on predicting
    what it predicted; saved, the model then names the task's classes. Returns whether it moved anything."""
    labels = class_names(ckpt, task, name, say=announce)
    if task.is_regression or not labels:
        return False
    order = outputs_by_class(task, labels)
    if order is None:
        if announce:
            log.warning("warning: %s has the labels %s, which are not the data's %s; its classifier head is kept, "
                        "output i taken as the data's class i", name, ", ".join(labels),
                        ", ".join(task.label_names))
        return False
    if order == sorted(order):
        return False
    with torch.no_grad():
        model.classifier.weight.copy_(model.classifier.weight[order])
        model.classifier.bias.copy_(model.classifier.bias[order])
    return True


def classification_loss_terms(model: nn.Module, batch: dict[str, Tensor]) -> dict[str, tuple[Tensor, Tensor]]:
    """The model's own loss (cross-entropy over classes or choices, or regression's MSE) and the real rows
    answered right: a rank's padding row, flagged not real, never counts."""
    out = model(batch["input_ids"], batch["token_type_ids"], batch.get("attention_mask"), labels=batch["labels"],
                skip_padding=True)
    labels = batch["labels"]
    if labels.is_floating_point():  # regression: no accuracy
        return {"task": (out.loss, labels.new_zeros(()))}
    correct = ((out.logits.argmax(-1) == labels) & batch["real"]).sum()
    return {"task": (out.loss, correct)}


def _score(model: nn.Module, prep: Prepared, batch_size: int, device: torch.device, precision: str,
           env: training.Distributed) -> dict[str, dict[str, float]]:
    return score(prep.task, model, prep.dev, prep.tokenizer.pad_id, batch_size, device, precision, env=env)


CLASSIFIER = Head(_model, collate, classification_loss_terms, _score)  # a sequence classifier (or regressor) on [CLS]
