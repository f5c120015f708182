"""Local copies of Hugging Face hub datasets as `datasets` writes them: a parquet file (a hub repository's shard,
the parquet converter's file, `Dataset.to_parquet`) or a `Dataset.save_to_disk` folder of one split.

Both keep the dataset's features, whose ClassLabel names say what integer labels mean (conll2003's `ner_tags`
are ids of O, B-PER, ...); the task readers turn the rows into their own examples. pyarrow reads the parquet
files; `datasets` (slow to import) is imported only to open a saved folder.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertctl.errors import UsageError


@dataclass(frozen=True)
class CopyRows:
    """One split's rows, a dict per row, with the ClassLabel names of the columns that have them."""

    rows: list[dict[str, Any]]
    columns: list[str]
    names: dict[str, tuple[str, ...]]  # column -> class names of its values, or of its lists' items
    where: str  # "FLAG PATH", for messages

    def at(self, row: int) -> str:
        """Row `row` (from 0) as messages name it: counted from 1, as classify's parquet rows are."""
        return f"{self.where} row {row + 1}"


def is_copy(path: Path) -> bool:
    """Whether a data flag's path is read as a hub copy rather than as a text file."""
    return path.is_dir() or path.suffix.lower() == ".parquet"


def read_copy(path: Path, flag: str, required: Sequence[str], layout: str) -> CopyRows:
    """The rows of a parquet file or a saved split; `layout` tells what columns to give when `required` lack."""
    where = f"{flag} {path}"
    table, features = read_saved(path, flag) if path.is_dir() else read_parquet(path, where)
    missing = [c for c in required if c not in table.column_names]
    if missing:
        raise UsageError(f"{where} has no column {', '.join(missing)} (found: {', '.join(table.column_names)}); "
                         f"give {layout}")
    return CopyRows(table.to_pylist(), list(table.column_names), class_names(features), where)


def read_parquet(path: Path, where: str) -> tuple[Any, dict[str, Any]]:
    """A parquet file's table and the `datasets` features in its schema ({} when it has none)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not path.is_file():
        raise UsageError(f"{where}: no such file")
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise UsageError(f"{where}: cannot read it as parquet ({first_line(exc)})") from None
    return table, schema_features(table.schema)


def schema_features(schema: Any) -> dict[str, Any]:
    """The features `datasets` stores in a parquet schema's `huggingface` metadata."""
    raw = (getattr(schema, "metadata", None) or {}).get(b"huggingface")
    try:
        features = json.loads(raw)["info"]["features"] if raw else {}
    except (ValueError, KeyError, TypeError):
        return {}
    return features if isinstance(features, dict) else {}


def read_saved(folder: Path, flag: str) -> tuple[Any, dict[str, Any]]:
    """A `Dataset.save_to_disk` folder's table and features. A `DatasetDict` folder holds several splits, so a
    flag that reads one is refused, naming the split folder to give."""
    where = f"{flag} {folder}"
    splits = saved_splits(folder)
    if splits:
        wanted = "train" if flag == "--train" else "validation"
        split = wanted if wanted in splits else splits[0]
        raise UsageError(f"{where} is a DatasetDict folder of the splits {', '.join(splits)}; give one split's "
                         f"folder, such as {folder / split}")
    if not (folder / "state.json").is_file():
        raise UsageError(f"{where} is a folder but not a Dataset.save_to_disk folder (no state.json); give a "
                         "file, a .parquet file or a saved split's folder")
    import datasets

    try:
        dataset = datasets.load_from_disk(str(folder))
    except Exception as exc:  # a damaged or foreign folder: whatever `datasets` raises means "cannot load it"
        raise UsageError(f"{where}: cannot load the saved dataset ({first_line(exc)})") from None
    return dataset.with_format("arrow")[:], dataset.features.to_dict()


def saved_splits(folder: Path) -> list[str]:
    """The split names of a `DatasetDict.save_to_disk` folder (its dataset_dict.json); [] for any other folder."""
    try:
        splits = json.loads((folder / "dataset_dict.json").read_text(encoding="utf-8"))["splits"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [str(s) for s in splits] if isinstance(splits, list) else []


def class_names(features: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """ClassLabel names per column, as `datasets` serializes features (a label, or a list of labels)."""
    found = {column: _label_names(feature) for column, feature in features.items()}
    return {column: names for column, names in found.items() if names}


def _label_names(feature: Any) -> tuple[str, ...]:
    if isinstance(feature, list) and len(feature) == 1:  # old `datasets`' list of one item feature
        return _label_names(feature[0])
    if not isinstance(feature, dict):
        return ()
    if feature.get("_type") == "ClassLabel":
        names = feature.get("names")
        return tuple(str(n) for n in names) if isinstance(names, list) else ()
    return _label_names(feature.get("feature")) if feature.get("_type") in ("Sequence", "List", "LargeList") else ()


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
