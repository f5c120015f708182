"""Fine-tuning results over seeds and tasks: the main score that picks the best epoch and seed, each metric's
mean ± std and median over the seeds (results.json, results.md), and the paper's Table 1 for `finetune glue all`.

Kept apart from evaluate.py, which scores a model: these only read the scores, so they import no torch.
"""

from __future__ import annotations

import math
import statistics
from typing import Any


def main_score(task: Any, scores: dict[str, dict[str, float]]) -> float:
    """The main metric on the first dev split (MNLI: matched): what picks the best epoch and seed. NaN (a run
    that blew up) is -inf, below every number: compared as NaN, it would be neither better nor worse."""
    value = next(iter(scores.values()))[task.main_metric]
    return -math.inf if math.isnan(value) else value


def _spread(values: list[float]) -> dict[str, Any]:
    """Over the seeds; all NaN when a seed's value is (statistics would raise or order the NaN anywhere)."""
    if any(math.isnan(v) for v in values):
        return {"mean": math.nan, "std": math.nan, "median": math.nan, "min": math.nan, "max": math.nan,
                "values": values}
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "median": statistics.median(values), "min": min(values), "max": max(values), "values": values}


def scores_from_json(record: dict[str, Any]) -> dict[str, Any]:
    """A record's per-split scores read back from JSON: null was a NaN score (see `files.json_ready`)."""
    return {key: {name: math.nan if v is None else v for name, v in value.items()} if isinstance(value, dict)
            else value for key, value in record.items()}


def summarize(task: Any, runs: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Per split and metric: mean, sample std, median over the seeds; the best seed by the main metric."""
    scores = {seed: {s: run[s] for s in run if isinstance(run[s], dict)} for seed, run in runs.items()}
    splits = list(next(iter(scores.values())))
    best = max(scores, key=lambda seed: main_score(task, scores[seed]) if splits else 0.0)
    summary: dict[str, Any] = {"task": task.name, "main_metric": task.main_metric, "seeds": list(runs),
                               "best_seed": best}
    if len(runs) > 1:
        summary["best_model"] = f"seed-{best}"
    summary["runs"] = {str(seed): s for seed, s in scores.items()}
    summary["summary"] = {split: {name: _spread([scores[seed][split][name] for seed in scores])
                                  for name in task.metrics} for split in splits}
    return summary


def _cell(stats: dict[str, Any], key: str = "mean") -> str:
    text = f"{100 * stats[key]:.1f}"
    return text + (f"±{100 * stats['std']:.1f}" if key == "mean" and len(stats["values"]) > 1 else "")


def seeds_markdown(summary: dict[str, Any]) -> str:
    seeds = ", ".join(map(str, summary["seeds"]))
    lines = [f"# {summary['task']}: {len(summary['seeds'])} seeds ({seeds})", "",
             "| split | metric | mean ± std | median | min | max |", "|---|---|---|---|---|---|"]
    for split, metrics in summary["summary"].items():
        for name, stats in metrics.items():
            lines.append(f"| {split} | {name} | {_cell(stats)} | {_cell(stats, 'median')} | "
                         f"{_cell(stats, 'min')} | {_cell(stats, 'max')} |")
    lines += ["", f"Best seed by {summary['main_metric']}: {summary['best_seed']}. Values × 100.", ""]
    return "\n".join(lines)


# The BERT paper's Table 1 columns: (header, task, dev split); WNLI is shown but, as in the paper, not
# averaged.
PAPER_COLUMNS = (("MNLI-m", "mnli", "dev_matched"), ("MNLI-mm", "mnli", "dev_mismatched"),
                 ("QQP", "qqp", "dev"), ("QNLI", "qnli", "dev"), ("SST-2", "sst2", "dev"),
                 ("CoLA", "cola", "dev"), ("STS-B", "stsb", "dev"), ("MRPC", "mrpc", "dev"),
                 ("RTE", "rte", "dev"), ("WNLI", "wnli", "dev"))


def glue_table(summaries: dict[str, dict[str, Any]], sizes: dict[str, int], system: str) -> dict[str, Any]:
    """Table 1 of the paper from dev results: each task's main metric × 100; Average over every column
    but WNLI, MNLI-m and MNLI-mm counting separately (which is how the paper's averages add up)."""
    per_seed: dict[str, list[float]] = {}
    for header, task, split in PAPER_COLUMNS:
        summary = summaries[task]
        main = summary["main_metric"]
        per_seed[header] = [summary["runs"][str(seed)][split][main] for seed in summary["seeds"]]
    averaged = [h for h, _, _ in PAPER_COLUMNS if h != "WNLI"]
    per_seed["Average"] = [statistics.fmean(values)
                           for values in zip(*(per_seed[h] for h in averaged), strict=True)]
    return {"system": system, "split": "dev", "train_examples": sizes,
            "columns": {header: _spread(values) for header, values in per_seed.items()}}


def _size(n: int) -> str:
    return str(n) if n < 1000 else f"{n / 1000:.1f}k" if n < 10_000 else f"{round(n / 1000)}k"


def glue_markdown(table: dict[str, Any]) -> str:
    cols = table["columns"]
    headers = ["MNLI-(m/mm)", "QQP", "QNLI", "SST-2", "CoLA", "STS-B", "MRPC", "RTE", "WNLI", "Average"]
    sizes = [_size(table["train_examples"][task])
             for _, task, split in PAPER_COLUMNS if split != "dev_mismatched"]
    rows = [["", *sizes, "-"]]
    for key, label in (("mean", table["system"]), ("median", "median")):
        cells = [f"{_cell(cols['MNLI-m'], key)}/{_cell(cols['MNLI-mm'], key)}"]
        cells += [_cell(cols[h], key) for h in headers[1:]]
        rows.append([label, *cells])
        if len(cols["Average"]["values"]) == 1:
            break
    lines = ["| System | " + " | ".join(headers) + " |", "|---" * (len(headers) + 1) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    seeds = len(cols["Average"]["values"])
    lines += ["", f"GLUE dev sets, {seeds} seed(s){' (mean±std, then median)' if seeds > 1 else ''}. F1 for "
              "QQP and MRPC, Spearman for STS-B, Matthews corr. for CoLA, accuracy for the others. Average "
              "leaves out WNLI, as the paper does; the second row gives the training examples.", ""]
    return "\n".join(lines)
