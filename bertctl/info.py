"""`bertctl info`: what a model folder holds, without building the model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bertctl.checkpoint import Checkpoint, heads_present, read_checkpoint, transformers_architecture
from bertctl.tokenizer_folder import has_tokenizer, load_tokenizer


def info(model: Path | str) -> dict[str, Any]:
    """Config, parameter count, heads, vocabulary and tokenizer of a model folder."""
    ckpt = read_checkpoint(model)
    folder = ckpt.path  # a hub id's cached snapshot, where its tokenizer files are
    tokenizer: dict[str, Any] | None = None
    if has_tokenizer(folder):
        loaded = load_tokenizer(folder)
        kind = "tokenizer.json" if (folder / "tokenizer.json").is_file() else "vocab.txt"
        tokenizer = {"kind": kind, "vocab_size": loaded.vocab_size, "lowercase": loaded.lowercase,
                     "sha256": loaded.sha256()}
    return {
        "path": str(model),
        "format": _format(ckpt),
        "architecture": transformers_architecture(ckpt.architecture, ckpt.parts),
        "heads": heads_present(ckpt),
        "pooler": "pooler" in ckpt.parts,
        "parameters": sum(t.numel() for t in ckpt.state.values()),
        "vocab_size": ckpt.config.vocab_size,
        "labels": ckpt.labels if "classifier" in ckpt.parts else None,
        "problem_type": ckpt.problem_type,
        "weights_dtype": ckpt.stored_dtype,  # as stored; bertctl computes in float32
        "config": ckpt.config.to_dict(),
        "tokenizer": tokenizer,
    }


def _format(ckpt: Checkpoint) -> str:
    if ckpt.from_tensorflow:
        return "tensorflow (google-research/bert)"
    if ckpt.from_nvidia:
        return "nvidia (DeepLearningExamples)"
    bertctl_block = ckpt.raw_config.get("bertctl")
    if not bertctl_block or "transformers_version" in ckpt.raw_config:  # transformers keeps our block as it
        return "transformers"  # re-saves a folder (its heads then stale), and writes its version, which we don't
    return f"bertctl v{bertctl_block['format_version']}"


def print_info(summary: dict[str, Any], as_json: bool = False) -> None:
    if as_json:
        print(json.dumps(summary))
        return
    from rich.table import Table
    from rich.text import Text  # paths and labels like "q[/b]" are text, not rich markup

    from bertctl.cli_base import table_console

    table = Table(title=Text(summary["path"]), show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    tok = summary["tokenizer"]
    rows = {
        "format": summary["format"],
        "architecture": summary["architecture"],
        "heads": ", ".join(summary["heads"]) or "none (encoder only)",
        "pooler": "yes" if summary["pooler"] else "no",
        "parameters": f"{summary['parameters']:,} ({summary['parameters'] / 1e6:.1f}M)",
        "vocab size": str(summary["vocab_size"]),
        "tokenizer": "none" if tok is None else
        f"{tok['kind']}, {tok['vocab_size']} tokens, {'uncased' if tok['lowercase'] else 'cased'}",
    }
    if summary["labels"]:
        rows["labels"] = ", ".join(summary["labels"])
    if summary["problem_type"]:
        rows["problem type"] = summary["problem_type"]
    if summary["weights_dtype"] != "float32":
        rows["weights dtype"] = f"{summary['weights_dtype']} (loaded as float32)"
    rows.update({k: str(v) for k, v in summary["config"].items()})
    for key, value in rows.items():
        table.add_row(key, Text(value))
    table_console().print(table)
