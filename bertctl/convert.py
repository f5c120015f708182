"""`bertctl convert`: any folder bertctl reads -> a canonical bertctl folder."""

from __future__ import annotations

from pathlib import Path

from bertctl.checkpoint import build_model, heads_present, model_tokenizer, read_checkpoint, save_model
from bertctl.errors import UsageError


def convert(source: Path | str, out: Path | str, overwrite: bool = False) -> str:
    """Keep every head the source has; write safetensors with transformers' names and the tokenizer."""
    source, out = Path(source), Path(out)
    if out.exists() and not overwrite:
        raise UsageError(f"--out {out} already exists (pass --overwrite to replace it)")
    if out.resolve() == source.resolve():
        raise UsageError("--out must differ from the source folder")
    ckpt = read_checkpoint(source)
    model = build_model(ckpt)
    tokenizer = model_tokenizer(ckpt, required=False)
    labels = ckpt.labels if getattr(model, "num_labels", None) == len(ckpt.labels or []) else None
    save_model(model, out, tokenizer, labels=labels, problem_type=ckpt.problem_type, overwrite=overwrite)
    heads = ", ".join(heads_present(ckpt)) or "encoder only"
    return f"wrote {out} ({ckpt.architecture}: {heads}; tokenizer: {'yes' if tokenizer else 'none'})"
