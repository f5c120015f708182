"""`bertctl finetune squad`: fine-tune BERT for extractive question answering on SQuAD v1.1 or v2.0 JSON.

google-research/bert's run_squad.py recipe (features in `data.squad`, answers in `squad_answers`, the official
scores in `squad_metrics`) on the loop `finetune` runs for GLUE: seeds, the --validation F1 after every epoch
keeping the best epoch, torchrun DDP, exact resume, run.json/metrics.jsonl, OUT put in place whole. The defaults are the
README's for BERT-base on SQuAD 1.1 (`FinetuneConfig.squad()`: lr 3e-5, 2 epochs, 384 tokens, batch 32,
stride 128). A model without a question-answering head gets a fresh one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from bertctl import stop_signals, training
from bertctl.checkpoint import build_model
from bertctl.config import FinetuneConfig
from bertctl.data.squad import SquadData, as_v2, make_features, read_squad
from bertctl.finetune import Base, launch, refuse_the_other_commands, require, train_and_publish
from bertctl.finetune_seed import Head, Prepared
from bertctl.finetune_work import say, say_data
from bertctl.squad import (
    QA_ARCHITECTURE,
    answer_settings,
    check_lengths,
    collate_spans,
    predict_answers,
    squad_scores,
    squad_task,
)


def finetune_squad(cfg: FinetuneConfig) -> Path | None:
    """Fine-tune on a SQuAD train file (scored on `cfg.validation` after each epoch); returns OUT, or None when a
    signal stopped the run (the same call with `resume=True` continues it). Build `cfg` with
    `FinetuneConfig.squad(...)` for the SQuAD defaults."""
    require(cfg, "train", "model", "out")
    refuse_the_other_commands(cfg, "squad")

    def body(base: Base, out: Path, work: Path, env: training.Distributed, stop: stop_signals.GracefulStop) -> None:
        base.ckpt.config.refuse_pairs(base.ckpt.path, "SQuAD puts the question and the context in two segments",
                                      "fine-tune a classifier instead")
        check_lengths(cfg.max_seq_length, cfg.max_query_length, base.ckpt.config.max_position_embeddings, cfg.model)
        train = read_squad(cfg.train, "train", "--train")
        dev = read_squad(cfg.validation, "score", "--validation", "2.0" if train.version == "2.0" else None) \
            if cfg.validation is not None else None
        version = "2.0" if "2.0" in (train.version, dev.version if dev else "") else "1.1"
        if version != train.version:  # a v1.1-looking train file of a v2.0 run
            train = as_v2(train)
        task = squad_task(version, dev)
        skipped = f" ({train.skipped} skipped: answer not found in the context)" if train.skipped else ""
        say_data(f"{task.name}: SQuAD v{version}, {len(train.examples)} training questions{skipped}",
                 len(dev.examples) if dev else None, "questions", env)
        train_and_publish(cfg, base, task, train, {"validation": dev} if dev else {}, out, work, env, stop,
                          prepare=_prepare)

    return launch(cfg, body)


def _prepare(cfg: FinetuneConfig, base: Base, task: Any, train: SquadData, dev: dict[str, SquadData],
             env: training.Distributed) -> Prepared:
    def features(data: SquadData, training: bool) -> Any:
        return make_features(base.tokenizer, data, cfg.max_seq_length, cfg.doc_stride, cfg.max_query_length,
                             training)

    train_features = features(train, True)
    dev_features = {split: features(data, False) for split, data in dev.items()}
    if env.is_main:
        windows = {"train": train_features, **dev_features}
        say(f"{task.name}: " + ", ".join(f"{split} {len(f)} windows" + (f" ({f.truncated} questions cut to "
                                         f"{cfg.max_query_length} pieces)" if f.truncated else "")
                                         for split, f in windows.items()))
    head = Head(_model, collate_spans, _loss_terms, _scorer(cfg), classifies=False)
    return Prepared(task, base.ckpt, base.tokenizer, train_features, dev_features, base.precision, head)


def _model(cfg: FinetuneConfig, prep: Prepared, announce: bool) -> nn.Module:
    model = build_model(prep.ckpt, QA_ARCHITECTURE)
    if announce:
        what = "a new" if "question_answering" in model.fresh_heads else "its own"
        say(f"{prep.task.name}: fine-tuning {cfg.model} with {what} question-answering head")
    return model


def _loss_terms(model: nn.Module, batch: dict[str, Tensor]) -> dict[str, tuple[Tensor, Tensor]]:
    """The mean of the start and end cross-entropies; "correct" is a window whose start and end both hit."""
    starts, ends = batch["start_positions"], batch["end_positions"]
    out = model(batch["input_ids"], batch["token_type_ids"], batch.get("attention_mask"),
                start_positions=starts, end_positions=ends)
    hit = (out.start_logits.argmax(-1) == starts) & (out.end_logits.argmax(-1) == ends) & batch["real"]
    return {"task": (out.loss, hit.sum())}


def _scorer(cfg: FinetuneConfig) -> Any:
    def score(model: nn.Module, prep: Prepared, batch_size: int, device: torch.device, precision: str,
              env: training.Distributed) -> dict[str, dict[str, float]]:
        results = {}
        for split, features in prep.dev.items():
            answers = predict_answers(model, features, prep.tokenizer, answer_settings(cfg, prep.task.version),
                                      batch_size, device, precision, env)
            results[split] = squad_scores(features.data, answers)
        return results

    return score
