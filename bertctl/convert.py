"""`bertctl convert`: any folder bertctl reads -> a canonical bertctl folder."""

from __future__ import annotations

from pathlib import Path

from bertctl.checkpoint import build_model, heads_present, model_tokenizer, read_checkpoint, save_model
from bertctl.errors import UsageError
from bertctl.model import architecture_name


def convert(source: Path | str, out: Path | str, overwrite: bool = False) -> str:
    """Keep every head the source has; write safetensors with transformers' names and the tokenizer."""
    source, out = Path(source), Path(out)
    if out.exists() and not overwrite:
        raise UsageError(f"--out {out} already exists (pass --overwrite to replace it)")
    if out.resolve() == source.resolve():
        raise UsageError("--out must differ from the source folder")
    ckpt = read_checkpoint(source)
    # bert-base-uncased's config says BertForMaskedLM but its file has the NSP head too: keep both
    model = build_model(ckpt, "BertForPreTraining" if {"mlm", "nsp"} <= ckpt.parts else None)
    tokenizer = model_tokenizer(ckpt, required=False)
    labels = ckpt.labels if getattr(model, "num_labels", None) == len(ckpt.labels or []) else None
    save_model(model, out, tokenizer, labels=labels, problem_type=ckpt.problem_type, config_extra=ckpt.kept_config,
               overwrite=overwrite)
    heads = ", ".join(heads_present(ckpt)) or "encoder only"
    return f"wrote {out} ({architecture_name(model)}: {heads}; tokenizer: {'yes' if tokenizer else 'none'})"
