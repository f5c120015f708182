"""Copies of hub datasets as `datasets` itself writes them, with the hub's features: the same rows as a parquet
file, a `Dataset.save_to_disk` split, `Dataset.to_json` lines and the `train/` split of a `DatasetDict` folder.

The features are written out here from the hub's dataset cards (rajpurkar/squad, eriktks/conll2003,
allenai/swag regular), not taken from bertctl, so a reader that expects another layout fails the tests.
`stub_hub` serves such a copy as `datasets.load_dataset` would serve the hub dataset, offline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CONLL_TAGS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]
SWAG_TEXTS = ["video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source",
              "ending0", "ending1", "ending2", "ending3"]


def squad_features() -> Any:
    import datasets

    text = datasets.Value("string")
    return datasets.Features({"id": text, "title": text, "context": text, "question": text,
                              "answers": {"text": datasets.List(text),
                                          "answer_start": datasets.List(datasets.Value("int32"))}})


def conll_features() -> Any:
    import datasets

    def tags(names: list[str]) -> Any:
        return datasets.List(datasets.ClassLabel(names=names))

    return datasets.Features({"id": datasets.Value("string"), "tokens": datasets.List(datasets.Value("string")),
                              "pos_tags": tags(["NN", "NNP"]), "chunk_tags": tags(["O", "B-NP"]),
                              "ner_tags": tags(CONLL_TAGS)})


def swag_features() -> Any:
    import datasets

    return datasets.Features({**{name: datasets.Value("string") for name in SWAG_TEXTS},
                              "label": datasets.ClassLabel(names=["0", "1", "2", "3"])})


def write_copies(root: Path, columns: dict[str, list], features: Any) -> dict[str, Path]:
    """The rows in every form a copy takes; "dict" is the DatasetDict folder whose `train/` is "split"."""
    import datasets

    datasets.disable_progress_bars()
    root.mkdir(parents=True, exist_ok=True)
    table = datasets.Dataset.from_dict(columns, features=features)
    table.to_parquet(str(root / "copy.parquet"))
    table.save_to_disk(str(root / "saved"))
    table.to_json(str(root / "copy.json"))
    datasets.DatasetDict({"train": table, "validation": table}).save_to_disk(str(root / "dict"))
    return {"parquet": root / "copy.parquet", "saved": root / "saved", "json": root / "copy.json",
            "split": root / "dict" / "train", "dict": root / "dict"}


def stub_hub(monkeypatch: Any, saved: dict[str, Path]) -> list[tuple[str, str | None, str]]:
    """`datasets.load_dataset` answering each hub id of `saved` with the rows of that saved copy, whatever the
    config and split asked (the returned calls say which), and any other id as offline and uncached: no network."""
    import datasets

    calls: list[tuple[str, str | None, str]] = []

    def load_dataset(name: str, config: str | None = None, split: str | None = None, **_: Any) -> Any:
        calls.append((name, config, split))
        if name not in saved:
            raise ConnectionError(f"Couldn't reach '{name}' on the Hub (OfflineModeIsEnabled)\nmore detail")
        return datasets.load_from_disk(str(saved[name]))

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return calls
