"""`bertctl convert`: any folder bertctl reads -> a canonical bertctl folder."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from bertctl import __version__
from bertctl.checkpoint import (
    Checkpoint,
    build_model,
    heads_present,
    inferred_architecture,
    model_tokenizer,
    read_checkpoint,
    save_model,
    saved_architecture,
)
from bertctl.config_records import recorded_path
from bertctl.config_types import take_bool
from bertctl.errors import UsageError
from bertctl.files import check_new_out, refuse_inputs_inside, user_path, write_json_atomic

log = logging.getLogger(__name__)
PROVENANCE = "provenance.json"
RUN_RECORD = "run.json"  # a bertctl fine-tuning run's settings, which evaluate and predict read


def convert(source: Path | str, out: Path | str, overwrite: bool = False) -> str:
    """Keep every head the source has; write safetensors with transformers' names, the tokenizer,
    provenance.json (the source as given and its weights_sha256, as the other commands record what made a
    folder) and a fine-tuned source's run.json."""
    out = check_new_out(out, overwrite=take_bool("overwrite", overwrite))
    _check_apart(user_path(source, "SOURCE"), out)
    ckpt = read_checkpoint(source)  # the name as given: Path("./x") would read like the hub id x
    model = build_model(ckpt, _mlm_architecture(ckpt))
    if model.fresh_heads:  # config.json names a head the weights lack (a classifier never trained): never write
        model = build_model(ckpt, inferred_architecture(ckpt.parts))  # a random head as if it were trained
    # heads the class has no place for (an NSP head without MLM, a pooler beside an MLM head) are written as read
    own = model.state_dict()
    keep = {k: v for k, v in ckpt.state.items() if k not in own}
    tokenizer = model_tokenizer(ckpt, required=False)
    outputs = getattr(model, "num_labels", None)
    labels = ckpt.labels if outputs is not None and outputs == len(ckpt.labels or []) else None
    if ckpt.origin is not None and "classifier" in ckpt.parts and not ckpt.labels:
        log.warning("warning: %s is a %s classifier without id2label: its outputs are saved as LABEL_0, ..., "
                    "which evaluate and finetune take in the task's order (for MNLI %s's is contradiction, "
                    "entailment, neutral); add id2label to %s first to keep them named", source, ckpt.origin,
                    ckpt.classifier_script, ckpt.config_file)
    record = {"format": "bertctl-convert", "bertctl": __version__,
              "config": {"source": recorded_path(source), "out": str(out), "overwrite": overwrite},
              "weights_sha256": ckpt.weights_sha256()}
    save_model(model, out, tokenizer, labels=labels, problem_type=ckpt.problem_type, config_extra=ckpt.kept_config,
               keep=keep, overwrite=overwrite, extra=lambda folder: _write_records(folder, record, ckpt.path))
    heads = ", ".join(heads_present(ckpt)) or "encoder only"
    return f"wrote {out} ({saved_architecture(model, keep)}: {heads}; tokenizer: {'yes' if tokenizer else 'none'})"


def _mlm_architecture(ckpt: Checkpoint) -> str | None:
    """The class that keeps the weights' MLM head where config.json names one without it, else None (config.json's):
    bert-base-uncased's config says BertForMaskedLM but its file has the NSP head too (BertForPreTraining); an
    encoder's config (BertModel) over an MLM head's weights is a BertForMaskedLM, as AutoModelForMaskedLM loads it."""
    if {"mlm", "nsp"} <= ckpt.parts:
        return "BertForPreTraining"
    return "BertForMaskedLM" if "mlm" in ckpt.parts and ckpt.architecture == "BertModel" else None


def _write_records(folder: Path, provenance: dict[str, Any], source: Path) -> None:
    """provenance.json, and the source's run.json as it is: the weights its run trained are the ones written, and
    evaluate and predict take the run's text columns, lengths and precision from it (its logs stay behind)."""
    write_json_atomic(folder / PROVENANCE, provenance)
    if (source / RUN_RECORD).is_file():
        shutil.copyfile(source / RUN_RECORD, folder / RUN_RECORD)


def _check_apart(source: Path, out: Path) -> None:
    """OUT inside the source would plant a model folder in it; the source inside OUT would be deleted when
    --overwrite replaces OUT."""
    source_at, out_at = source.resolve(), out.resolve()
    if out_at.is_relative_to(source_at):
        where = "is" if out_at == source_at else "is inside"
        raise UsageError(f"--out {out} {where} the source folder {source}; choose a path outside it")
    refuse_inputs_inside(out, [source])
