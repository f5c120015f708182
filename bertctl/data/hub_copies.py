"""Hugging Face hub datasets and their local copies as `datasets` writes them: a split loaded from the hub (or
its cache) by id, a parquet file (a hub repository's shard, the parquet converter's file, `Dataset.to_parquet`)
or a `Dataset.save_to_disk` folder of one split.

All keep the dataset's features, whose ClassLabel names say what integer labels mean (conll2003's `ner_tags`
are ids of O, B-PER, ...); the task readers turn the rows into their own examples, the same whichever source.
A data flag names a hub split as `NAME`, `NAME:SPLIT` or `NAME:CONFIG:SPLIT` (the split defaults to the flag's:
--train reads train, --validation and --data validation). pyarrow reads the parquet files; `datasets` (slow to
import) is imported only to open a saved folder or load from the hub.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertctl.errors import UsageError
from bertctl.hub import is_hub_dataset_id, legacy_dataset_hint, offline_when_unreachable

# NAME[[:CONFIG]:SPLIT]; a split may be sliced as `datasets` slices it (`validation[:500]`)
_HUB_SPLIT = re.compile(r"(?P<name>[^:]+)(?::(?:(?P<config>[\w.-]+):)?(?P<split>[\w.-]+(?:\[[^\]]*\])?))?")


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


@dataclass(frozen=True)
class HubSplit:
    """One split of a hub dataset, as `datasets.load_dataset` takes it."""

    name: str  # owner/name
    config: str | None  # None: the dataset's only (or default) config
    split: str

    def __str__(self) -> str:
        return f"{self.name} ({', '.join(filter(None, (self.config, self.split)))})"


def flag_split(flag: str) -> str:
    """The split a data flag reads when it names none: --train the training split, any other the validation."""
    return "train" if flag == "--train" else "validation"


def hub_split(value: Path | str, flag: str, configs: Mapping[str, str] | None = None) -> HubSplit | None:
    """A data flag's value as a hub split (`configs`: the config read of a dataset that needs one, when the value
    names none), or None: a local path, or a name that is no hub dataset id (`data/train.json`)."""
    match = _hub_match(value)
    if match is None:
        return None
    config = match["config"] or (configs or {}).get(match["name"])
    return HubSplit(match["name"], config, match["split"] or flag_split(flag))


def _hub_match(value: Path | str) -> re.Match[str] | None:
    match = _HUB_SPLIT.fullmatch(str(value))
    if Path(value).expanduser().exists() or match is None or not is_hub_dataset_id(match["name"]):
        return None
    return match


def refuse_missing(given: Path | str, flag: str, formats: str, hub_ids: tuple[str, ...]) -> None:
    """Refuse a data flag's value that is nothing here and no hub dataset id, in one line naming the `formats` to
    give (and, for a legacy name of one of the flag's `hub_ids`, that id). `given` is the value as spelt: as a
    Path, `./rajpurkar/squad` has lost the `./` that says it is no hub id. A pipe is there (`--data <(zcat
    dev-v1.1.json.gz)`): its reader reads it."""
    if not (Path(given).expanduser().exists() or _hub_match(given)):
        raise UsageError(f"{flag} {given}: no such file{legacy_dataset_hint(given, hub_ids)}; give {formats}")


def is_copy(path: Path) -> bool:
    """Whether a data flag's path is read as hub rows (a copy, or a hub id) rather than as a text file."""
    return path.is_dir() or path.suffix.lower() == ".parquet" or _hub_match(path) is not None


def read_copy(path: Path, flag: str, required: Sequence[str], layout: str,
              configs: Mapping[str, str] | None = None) -> CopyRows:
    """The rows of a hub split, a parquet file or a saved split; `layout` tells what columns to give when
    `required` lack; `configs` as `hub_split` takes them."""
    hub = hub_split(path, flag, configs)
    where = f"{flag} {path}"
    if hub is not None:
        table, features = load_hub(hub, f"{where}: not a local file or folder")
    else:
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
        split = flag_split(flag) if flag_split(flag) in splits else splits[0]
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


def load_hub(hub: HubSplit, refusal: str) -> tuple[Any, dict[str, Any]]:
    """A hub split's table and features, from the hub or offline from the `datasets` cache; `refusal` starts the
    one line that says it could not be loaded."""
    try:
        import datasets

        with offline_when_unreachable():
            dataset = datasets.load_dataset(hub.name, hub.config, split=hub.split)
    except Exception as exc:  # offline and not cached, no such dataset, config or split: all mean "cannot load it"
        raise UsageError(f"{refusal}, and loading {hub} from the hub failed ({first_line(exc)}); go online once to "
                         "download it to the cache, or give a local copy") from None
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
