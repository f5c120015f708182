"""GLUE from copies of the Hugging Face hub dataset (nyu-mll/glue): the hub itself (through `datasets`), a
clone of its repository (parquet shards, read with pyarrow) and `DatasetDict.save_to_disk` folders.

All three hold integer labels that mean the dataset's ClassLabel names, so labels are mapped by name where the
copy gives names; texts and `idx` come as they are. The result is the same `Examples` the official TSVs give.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bertctl.data import hub_copies
from bertctl.data.glue import Examples, GlueTask, SplitFile, match_labels, parse_label
from bertctl.data.hub_copies import HubSplit, class_names, first_line, saved_splits, schema_features
from bertctl.errors import UsageError


def read_hub(task: GlueTask, entry: SplitFile, name: str) -> Examples:
    """The task's split loaded from the hub (or offline from the `datasets` cache): config and split are the task's."""
    hub = HubSplit(name, task.hub_config, entry.hub_split)
    table, features = hub_copies.load_hub(hub, f"--data {name}: not a local folder")
    wanted = _hub_columns(task, entry, table.column_names, str(hub))
    names = class_names(features).get("label", ())
    return _hub_examples(task, entry, table.select(wanted).to_pydict(), names, str(hub))


def read_saved(task: GlueTask, entry: SplitFile, folder: Path) -> Examples:
    """A `DatasetDict.save_to_disk` folder of one task (`glue-saved/mnli/`), split names as on the hub."""
    splits = saved_splits(folder)
    if not splits:
        raise UsageError(f"{folder}: cannot read the split names in its dataset_dict.json")
    if entry.hub_split not in splits:
        raise UsageError(f"{folder}: no split {entry.hub_split} (found: {', '.join(splits)}); "
                         f"{task.name} {entry.split} is read from it")
    table, features = hub_copies.read_saved(folder / entry.hub_split, "--data")
    source = f"{folder} ({entry.hub_split})"
    wanted = _hub_columns(task, entry, table.column_names, source)
    names = class_names(features).get("label", ())
    return _hub_examples(task, entry, table.select(wanted).to_pydict(), names, source)


def read_parquet(task: GlueTask, entry: SplitFile, config: Path) -> Examples:
    """A clone of the hub repository: `<config>/<split>-00000-of-00001.parquet` (or the parquet-converter's
    `<config>/<split>/0000.parquet`), read with pyarrow; label names from the files or the README's dataset_info."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = sorted(config.glob(f"{entry.hub_split}-*.parquet")) or sorted(config.glob(f"{entry.hub_split}/*.parquet"))
    if not files:
        found = sorted({p.name.split("-")[0] for p in config.glob("*.parquet")} | {p.parent.name for p in
                                                                                    config.glob("*/*.parquet")})
        raise UsageError(f"{config}: no {entry.hub_split}-*.parquet for {task.name} {entry.split} "
                         f"(found splits: {', '.join(found)})")
    try:
        table = pa.concat_tables([pq.read_table(f) for f in files])
    except (OSError, pa.ArrowException) as exc:
        raise UsageError(f"{files[0]}: cannot read it as parquet: {first_line(exc)}") from None
    source = str(files[0]) if len(files) == 1 else f"{config}/{entry.hub_split}-*.parquet"
    wanted = _hub_columns(task, entry, table.column_names, source)
    names = (class_names(schema_features(table.schema)).get("label", ())
             or _readme_label_names(config.parent, task.hub_config))
    return _hub_examples(task, entry, table.select(wanted).to_pydict(), names, source)


def _readme_label_names(root: Path, config: str) -> tuple[str, ...]:
    """ClassLabel names from the dataset card's YAML header (`dataset_info:` of the config), if there is one."""
    readme = root / "README.md"
    if not readme.is_file():
        return ()
    import yaml

    text = readme.read_text(encoding="utf-8")
    parts = text.split("---", 2) if text.startswith("---") else []
    try:
        card = yaml.safe_load(parts[1]) if len(parts) == 3 else {}
    except yaml.YAMLError:
        return ()
    infos = card.get("dataset_info", []) if isinstance(card, dict) else []
    for info in infos if isinstance(infos, list) else [infos]:
        if isinstance(info, dict) and info.get("config_name", "default") == config:
            for feature in info.get("features", []):
                if feature.get("name") == "label" and isinstance(feature.get("dtype"), dict):
                    names = feature["dtype"].get("class_label", {}).get("names", {})
                    return tuple(names[k] for k in sorted(names, key=int))
    return ()


def _hub_columns(task: GlueTask, entry: SplitFile, found: Sequence[str], source: str) -> list[str]:
    wanted = [*task.hub_text, "idx"] + (["label"] if entry.label is not None else [])
    missing = [c for c in wanted if c not in found]
    if missing:
        raise UsageError(f"{source}: no column(s) {', '.join(missing)} (found: {', '.join(found)})")
    return wanted


def _hub_examples(task: GlueTask, entry: SplitFile, columns: dict[str, list], names: tuple[str, ...],
                  source: str) -> Examples:
    """Integer labels mean the hub's ClassLabel names; they are mapped by name when the names are given."""
    labels = None
    if entry.label is not None:
        order = list(range(task.num_labels))
        if names and not task.is_regression:
            found = match_labels(task, names)
            if found is None:
                raise UsageError(f"{source}: label names {', '.join(names)} are not {task.name}'s "
                                   f"({', '.join(task.hub_label_names)}); cannot map them to its labels")
            order = found
        labels = [_hub_label(task, value, order, source, row) for row, value in enumerate(columns["label"], 1)]
    text_b = columns[task.hub_text[1]] if task.is_pair else None
    return Examples(columns[task.hub_text[0]], text_b, labels, [str(i) for i in columns["idx"]], source)


def _hub_label(task: GlueTask, value: int | float, order: list[int], source: str, row: int) -> int | float:
    if task.is_regression:  # float32 on the hub: its shortest repr is the file's decimal (3.867, not 3.86700010)
        import numpy as np

        return parse_label(task, str(np.float32(value)) if value is not None else "", f"{source} row {row}")
    if not isinstance(value, int) or not 0 <= value < task.num_labels:
        raise UsageError(f"{source} row {row}: label {value!r} is not a class index 0..{task.num_labels - 1}")
    return order[value]

