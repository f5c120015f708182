"""Config values from files and flags, layered: defaults <- quick-start values <- `--config` file <- flags.

Torch-free like bertctl.config, which builds on it; `build_config` is how every command turns its flags and
`--config` file into a config, `read_config_file` reads the files (`--config`, `--model-config`).
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any, TypeVar

from bertctl.config_types import FileNumber, as_flag_reads, field_types, fields_named, flag_name
from bertctl.errors import UsageError


def read_config_file(path: Path, flag: str = "--config") -> dict[str, Any]:
    """A JSON or YAML mapping; the error names the flag that gave the file, and the file."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")  # a byte-order mark, as Windows editors write, is dropped
    except OSError as exc:
        raise UsageError(f"{flag}: cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{flag}: {path} is not UTF-8 text; give a YAML or JSON file") from None
    suffix = Path(path).suffix.lower()
    as_yaml = suffix in (".yaml", ".yml") or (suffix != ".json" and not _is_json(text))  # other names: either
    as_written = flag == "--config"  # a command's fields, which its flags also give; not a config.json's
    try:
        if as_yaml:
            import yaml

            values = yaml.load(text, Loader=_loader_as_written()) if as_written else yaml.safe_load(text)
        else:
            values = json.loads(text, parse_float=lambda number: FileNumber(float(number), number)) \
                if as_written else json.loads(text)
    except Exception as exc:  # yaml and json raise different types; both mean a malformed file
        raise UsageError(f"{flag}: {path} is not valid {'YAML' if as_yaml else 'JSON'}: "
                         f"{str(exc).splitlines()[0]}") from None
    if not isinstance(values, dict):
        raise UsageError(f"{flag}: {path} must hold a mapping of field names to values")
    if (name := _repeated_field(text, as_yaml)) is not None:
        raise UsageError(f"{flag}: {path} sets {name} twice; keep one of them")
    return values


@functools.cache
def _loader_as_written() -> type:
    """YAML's safe loader, with each float kept as written (FileNumber), as the JSON reader keeps them, and YAML
    1.1's other ways to write a number (`010` octal, `0x10`, `1:30` base 60) kept as text, for the field to read as
    its flag reads it: `steps: 010` is 10 as `--steps 010` is, `0x10` is refused as the flag refuses it."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    def float_as_written(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> FileNumber | str:
        if ":" in node.value:
            return node.value
        return FileNumber(loader.construct_yaml_float(node), node.value)

    def int_as_written(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int | str:
        if _PLAIN_DECIMAL.fullmatch(node.value):
            return loader.construct_yaml_int(node)
        return node.value

    Loader.add_constructor("tag:yaml.org,2002:float", float_as_written)
    Loader.add_constructor("tag:yaml.org,2002:int", int_as_written)
    return Loader


_PLAIN_DECIMAL = re.compile(r"-?(0|[1-9](_?[0-9])*)")  # a whole number YAML and the flags read alike


def _repeated_field(text: str, as_yaml: bool) -> str | None:
    """The first field the file names twice: YAML and JSON readers keep the last silently, so a forgotten `lr:`
    further down would beat the one the user just edited."""
    if as_yaml:
        import yaml

        node = yaml.compose(text, Loader=yaml.SafeLoader)
        names = [key.value for key, _ in node.value] if isinstance(node, yaml.MappingNode) else []
    else:
        objects: list[list[str]] = []  # every object's keys, the outermost last
        json.loads(text, object_pairs_hook=lambda pairs: objects.append([k for k, _ in pairs]) or dict(pairs))
        names = objects[-1]
    return next((name for i, name in enumerate(names) if name in names[:i]), None)


def _is_json(text: str) -> bool:
    """JSON is nearly YAML, but not quite (tabs indenting a JSON file are an error in YAML)."""
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


T = TypeVar("T")


def build_config(cls: type[T], file_values: dict[str, Any] | None = None, *, config_file: Path | str | None = None,
                 **flags: Any) -> T:
    """Defaults <- config file <- flags (flags left as None fall through). Unknown keys are refused here; a file's
    quoted number is read as its flag reads the text; a wrong type by the config itself, named as the user gave it
    (the flag, or the file, `config_file`, and key)."""
    source = f"--config {config_file}" if config_file is not None else "--config"
    refuse_unknown(cls, file_values or {}, source)
    known = field_types(cls)
    values = {name: as_flag_reads(known[name], value) for name, value in (file_values or {}).items()}
    refuse_unknown(cls, flags, "build_config")
    given = {k: v for k, v in flags.items() if v is not None}
    with fields_named(lambda name: flag_name(name) if name in given else f"{source}: {name}"):
        return cls(**layered(cls, values, given))


def layered(cls: type, below: dict[str, Any], above: dict[str, Any]) -> dict[str, Any]:
    """`above`'s values over `below`'s; where `above` sets one field of an exclusive pair (cls.EXCLUSIVE), the
    other is dropped from `below` (--warmup-fraction beats a config file's warmup_steps). Both set in one
    layer stay, for the config to refuse."""
    values = dict(below)
    for pair in getattr(cls, "EXCLUSIVE", {}):
        for name, other in (pair, pair[::-1]):
            if above.get(name) is not None and above.get(other) is None:
                values.pop(other, None)
    return {**values, **above}


def refuse_unknown(cls: type, values: dict[str, Any], source: str) -> None:
    """A misspelt key fails in one line naming it (a dataclass would raise a bare TypeError)."""
    if not isinstance(values, dict):
        raise UsageError(f"{source}: expected a mapping of field names to values, got {type(values).__name__}")
    if odd := [key for key in values if not isinstance(key, str)]:
        raise UsageError(f"{source}: field names are text; {odd[0]!r} is not (quote it, or fix the file)")
    known = field_types(cls)
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise UsageError(f"{source}: unknown field(s) {', '.join(unknown)} for {cls.__name__}; "
                         f"known: {', '.join(sorted(known))}")
