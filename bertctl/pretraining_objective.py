"""The pre-training objective's figures: a batch's loss terms, and a scoring pass over a corpus split.

`pretrain` trains on these terms and validates with the pass; `evaluate mlm` scores a finished model with the
same pass, so the two give the same numbers for the same checkpoint, rows and masks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from bertctl import training
from bertctl.data.batches import Collator, EvalBatches
from bertctl.model import IGNORE_INDEX


def loss_terms(model: nn.Module, batch: dict[str, Tensor], predictions: int | None = None
               ) -> dict[str, tuple[Tensor, Tensor]]:
    """{objective: (mean loss, correct predictions)} of one batch: the MLM's over its masked tokens, NSP/SOP's
    over its rows when the batch carries their labels. `predictions`: the MLM head's fixed slots per row."""
    out = model(batch["input_ids"], batch["token_type_ids"], batch.get("attention_mask"),
                mlm_labels=batch["mlm_labels"], mlm_predictions=predictions, **_nsp_kwargs(batch))
    terms = {"mlm": (out.mlm_loss, (out.logits.argmax(-1) == out.mlm_targets).sum())}
    if "next_sentence_label" in batch:
        label = batch["next_sentence_label"]
        terms["nsp"] = (out.nsp_loss, (out.nsp_logits.argmax(-1) == label).sum())
    return terms


def _nsp_kwargs(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    return {"next_sentence_label": batch["next_sentence_label"]} if "next_sentence_label" in batch else {}


def loss_weights(batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """What each term of `loss_terms` averages over: masked tokens (MLM), rows (NSP/SOP)."""
    counts = {"mlm": (batch["mlm_labels"] != IGNORE_INDEX).sum()}
    if "next_sentence_label" in batch:
        label = batch["next_sentence_label"]
        counts["nsp"] = label.new_full((), label.shape[0])  # made where the batch is: no host-to-device copy
    return counts


@dataclass(frozen=True)
class PretrainingScores:
    """A scoring pass's figures over all the rows it read (every rank's together)."""

    mlm_loss: float  # mean cross-entropy over the masked tokens
    mlm_accuracy: float  # share of masked tokens whose top prediction is the original token
    nsp_accuracy: float | None  # share of rows whose NSP/SOP label was predicted; None: the rows had no labels
    sequences: int
    masked_tokens: int

    def validation_row(self) -> dict[str, float]:
        """The figures under the names of pretrain's metrics.jsonl validation rows."""
        row = {"val_mlm_loss": self.mlm_loss, "val_mlm_accuracy": self.mlm_accuracy}
        if self.nsp_accuracy is not None:
            row["val_nsp_accuracy"] = self.nsp_accuracy
        return row


@torch.no_grad()
def score_pretraining(model: nn.Module, table: Any, collate: Collator, micro: int, samples: int,
                      env: training.Distributed, precision: str = "fp32", show: bool = False) -> PretrainingScores:
    """MLM loss/accuracy and NSP accuracy on the first `samples` rows of `table` (each rank its share, then
    summed), in eval mode under `precision`'s autocast, as transformers' Trainer evaluates. Rows are read
    `micro` at a time from the memory-mapped table, so memory stays that of one batch; `show`: a progress bar
    once the pass has taken two seconds."""
    model.eval()
    # mlm loss sum, masked tokens, mlm correct, nsp rows, nsp correct, rows
    totals = torch.zeros(6, dtype=torch.float64, device=env.device)
    batches = EvalBatches(table, collate, micro, samples, env.rank, env.world_size)
    with training.progress_bar(len(batches.rows), 0, "scoring", show and env.is_main, unit="row", delay=2,
                               leave=False) as bar:
        for batch in batches:
            batch = training.to_device(batch, env.device)
            with training.autocast(precision, env.device):
                terms = loss_terms(model, batch)
            counts = loss_weights(batch)
            totals[0] += terms["mlm"][0].double() * counts["mlm"]
            totals[1] += counts["mlm"]
            totals[2] += terms["mlm"][1]
            if "nsp" in terms:
                totals[3] += counts["nsp"]
                totals[4] += terms["nsp"][1]
            totals[5] += batch["input_ids"].shape[0]
            bar.update(batch["input_ids"].shape[0])
    totals = training.all_reduce_sum(totals, env).tolist()
    return PretrainingScores(mlm_loss=totals[0] / max(totals[1], 1), mlm_accuracy=totals[2] / max(totals[1], 1),
                             nsp_accuracy=totals[4] / totals[3] if totals[3] else None, sequences=int(totals[5]),
                             masked_tokens=int(totals[1]))


def evaluate_pretraining(model: nn.Module, table: Any, collate: Collator, micro: int, samples: int,
                         env: training.Distributed, precision: str = "fp32") -> dict[str, float]:
    """pretrain's validation row: `score_pretraining`'s figures under metrics.jsonl's names."""
    return score_pretraining(model, table, collate, micro, samples, env, precision).validation_row()
