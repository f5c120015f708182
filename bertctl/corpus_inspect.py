"""`bertctl corpus inspect`: what a built or imported corpus holds, per split, and a few of its instances decoded
with their masked positions marked.

Kept apart from corpus.py, which builds corpora and reads them back: this only reports on one, through
`load_corpus` and `corpus_tokenizer`, counting over the memory-mapped Arrow tables batch by batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bertctl.config_types import take_int
from bertctl.corpus import corpus_tokenizer, load_corpus

_LABEL_NAMES = {"mlm+nsp": ("IsNext", "NotNext"), "mlm+sop": ("InOrder", "Swapped")}


def inspect_corpus(path: Path | str, num: int = 3) -> dict[str, Any]:
    """Statistics per split and `num` decoded training instances with their masked positions marked."""
    num = take_int("--num", num, minimum=0)
    dataset, manifest = load_corpus(path)
    report: dict[str, Any] = {key: manifest.get(key) for key in (
        "objective", "masking", "max_seq_length", "masked_lm_prob", "max_predictions_per_seq",
        "whole_word_masking", "dupe_factor", "seed", "tokenizer_sha256", "source")}
    report = {"path": str(path), **report, "splits": {}}
    for split in dataset:
        counts = manifest["counts"].get(split, {})
        # An imported corpus (`corpus import`) has no documents, sentences, short or forced counts to show.
        stats = {key: counts[key] for key in ("documents", "sentences") if key in counts}
        stats.update(_table_stats(dataset[split].data.table, manifest))
        if "short_instances" in counts:
            stats["short_share"] = round(counts["short_instances"] / max(1, stats["instances"]), 4)
        if manifest["objective"] == "mlm+nsp" and "forced_notnext" in counts:  # NotNext after a one-sentence chunk
            forced = counts.get("forced_notnext", 0)
            stats["forced_notnext_share"] = round(forced / max(1, stats["instances"]), 4)
        report["splits"][split] = stats
    report["samples"] = _samples(dataset["train"], manifest, corpus_tokenizer(path, manifest), num) if num else []
    return report


def _table_stats(table: Any, manifest: dict[str, Any]) -> dict[str, Any]:
    """Counts over the whole split, batch by batch (the table is memory-mapped)."""
    import pyarrow.compute as pc

    mask_id = manifest["special_ids"]["mask"]
    totals = dict.fromkeys(("instances", "tokens", "label_1", "masked", "as_mask", "as_kept"), 0)
    longest = 0
    for batch in table.to_batches():
        lengths = pc.list_value_length(batch.column("input_ids")).to_numpy()
        totals["instances"] += len(lengths)
        totals["tokens"] += int(lengths.sum())
        longest = max(longest, int(lengths.max(initial=0)))
        if "next_sentence_label" in batch.schema.names:
            totals["label_1"] += int(pc.sum(batch.column("next_sentence_label")).as_py() or 0)
        if "masked_lm_positions" in batch.schema.names:
            ids = batch.column("input_ids")
            starts = ids.offsets.to_numpy()[:-1] - ids.offsets[0].as_py()
            positions = batch.column("masked_lm_positions")
            rows = np.repeat(np.arange(len(lengths)), pc.list_value_length(positions).to_numpy())
            shown = ids.flatten().to_numpy()[starts[rows] + positions.flatten().to_numpy().astype(np.int64)]
            original = batch.column("masked_lm_ids").flatten().to_numpy()
            totals["masked"] += len(shown)
            totals["as_mask"] += int((shown == mask_id).sum())
            totals["as_kept"] += int(((shown == original) & (shown != mask_id)).sum())
    n, tokens = max(1, totals["instances"]), max(1, totals["tokens"])
    padded = n * manifest["max_seq_length"]
    stats: dict[str, Any] = {"instances": totals["instances"], "tokens": totals["tokens"],
                             "mean_length": round(totals["tokens"] / n, 2), "max_length": longest,
                             "padding_share": round(1 - totals["tokens"] / padded, 4)}
    if manifest["objective"] in _LABEL_NAMES:
        stats[f"{_LABEL_NAMES[manifest['objective']][1].lower()}_share"] = round(totals["label_1"] / n, 4)
    if manifest["masking"] == "static":
        masked = max(1, totals["masked"])
        randoms = totals["masked"] - totals["as_mask"] - totals["as_kept"]
        stats.update(masked_share=round(totals["masked"] / tokens, 4),
                     mask_share=round(totals["as_mask"] / masked, 4), random_share=round(randoms / masked, 4),
                     kept_share=round(totals["as_kept"] / masked, 4))
    return stats


def _samples(split: Any, manifest: dict[str, Any], tokenizer: Any, num: int) -> list[dict[str, Any]]:
    """The first rows, rendered token by token; masked tokens as <shown|original>.

    A dynamic corpus stores no masks, so its samples are masked here (row i with seed i) to show what the
    pre-training collator does.
    """
    from bertctl.data.masking import mask_tokens, masking_options

    names = _LABEL_NAMES.get(manifest["objective"])
    options = masking_options(tokenizer, manifest["masked_lm_prob"], manifest["max_predictions_per_seq"],
                              manifest["whole_word_masking"])
    samples = []
    for index, row in enumerate(split.select(range(min(num, len(split))))):
        ids = np.asarray(row["input_ids"], dtype=np.int64)
        if "masked_lm_positions" in row:
            positions, originals = row["masked_lm_positions"], row["masked_lm_ids"]
        else:
            result = mask_tokens(ids, rng=np.random.default_rng(index), **options)
            ids, positions, originals = result.input_ids, result.positions.tolist(), result.label_ids.tolist()
        tokens = [tokenizer.id_to_token(int(i)) for i in ids]
        for position, original in zip(positions, originals, strict=True):
            tokens[position] = f"<{tokens[position]}|{tokenizer.id_to_token(int(original))}>"
        sample = {"row": index, "length": len(ids), "text": " ".join(tokens), "masked": len(positions)}
        if names is not None:
            sample["label"] = names[row["next_sentence_label"]]
        samples.append(sample)
    return samples


def format_report(report: dict[str, Any]) -> str:
    """The human-readable form of `inspect_corpus`'s report."""
    origin = f"seed {report['seed']}" if report.get("source") is None else f"from {report['source']}"
    lines = [f"corpus {report['path']}: {report['objective']}, {report['masking']} masking, "
             f"max_seq_length {report['max_seq_length']}, {origin}"]
    for split, stats in report["splits"].items():
        lines.append(f"  {split}:")
        lines += [f"    {key:<21} {value}" for key, value in stats.items()]
    for sample in report["samples"]:
        label = f" {sample['label']}" if "label" in sample else ""
        lines.append(f"\n#{sample['row']}{label}, {sample['length']} tokens, {sample['masked']} masked "
                     f"(<shown|original>{', example masks' if report['masking'] == 'dynamic' else ''}):")
        lines.append(sample["text"])
    return "\n".join(lines)
