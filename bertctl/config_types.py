"""A config field's value as the field's type; torch-free like bertctl.config, which uses it.

`PretrainConfig(steps=8.0)`, `steps: 8.0` in a `--config` file and `--steps 8` must give the same config, and
a wrong type must stop at once in one line rather than as a TypeError deep in a run. The config dataclasses
call `take_types` first thing in `__post_init__`: the one place types are checked. Code that builds a config
from values the user gave under other names (flags, `--config` keys, config.json) wraps the call in
`fields_named`, so the error names the field as the user wrote it.
"""

from __future__ import annotations

import functools
import math
import numbers
import os
import re
import reprlib
import sys
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import Any

from bertctl.errors import UsageError, quoted
from bertctl.hub import path_as_given
from bertctl.worker_processes import refuse_script_rerun

# Fields naming a model or tokenizer, which may be a hub id: Path("./x") and Path("x/") are `x`, which reads like
# one, so a str is checked while it is still spelt as given (a flag, a --config value, a Python argument).
LOCAL_NAMES = {"model": "model folder", "init_from": "model folder", "tokenizer": "tokenizer"}
# Data fields that may name a hub dataset (`rajpurkar/squad`, GLUE's `nyu-mll/glue`): kept as spelt, for the same
# reason (`./x/y` is a missing file, `x/y` may be a hub id); only `~` is expanded, as no shell does it for a --config
# value.
DATA_NAMES = {"train", "validation", "data"}
# List fields whose flag takes comma-separated items (--seeds 1,2, --text-columns a,b, --label-names x,y): a
# string is read as the flag reads it. Not `inputs`, whose items are file names that may hold a comma.
_COMMA_LISTS = {"seeds", "text_columns", "label_names"}
_OWN_RANGE = {"seed", "seeds"}  # checked by their configs, whose message gives the whole range
# Fields naming one of a fixed set (`--precision BF16`, `--device CUDA`): taken in any case, as GLUE task names are,
# and kept in lower case, so run.json records one spelling.
_ANY_CASE = {"precision", "device", "schedule", "optimizer", "objective", "masking", "problem"}


class FileNumber(float):
    """A number with a point or an exponent as a `--config` file wrote it, its text kept: a whole-number field
    takes `8.0` from a file, as its flag takes `--steps 8.0`, and refuses `1e3` (and YAML's `1.0e+3`), as
    `--steps 1e3` is refused; the number read alone could not tell them apart."""

    text: str

    def __new__(cls, value: float, text: str) -> FileNumber:
        number = super().__new__(cls, value)
        number.text = text
        return number

    def __repr__(self) -> str:
        return self.text


class FieldTypeError(UsageError):
    """A config field given a value of another type; `field` and `problem` let `fields_named` say it again
    under the name the user gave the field."""

    def __init__(self, owner: str, field: str, problem: str) -> None:
        super().__init__(f"{owner}.{field} {problem}")
        self.field = field
        self.problem = problem


@contextmanager
def fields_named(label: Callable[[str], str]) -> Iterator[None]:
    """Within the block, a config's type error names its field as `label(field)` (a flag, a file key)."""
    try:
        yield
    except FieldTypeError as exc:
        raise UsageError(f"{label(exc.field)} {exc.problem}") from None


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """Each field's type hint (`from __future__ import annotations` leaves them as strings on the fields)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in fields(cls)}


def flag_name(name: str) -> str:
    """A config field as its command-line flag names it (`warmup_steps` -> `--warmup-steps`)."""
    return f"--{name.replace('_', '-')}"


def take_types(cfg: Any) -> None:
    """Give every field of the (frozen) dataclass `cfg` its type: 8.0 becomes 8, a lone string for a list one
    item (split on commas where the field's flag is: `text_columns: "a,b"`); any other type is a FieldTypeError
    naming the field."""
    for name, hint in field_types(type(cfg)).items():
        given = value = getattr(cfg, name)
        if name in LOCAL_NAMES and isinstance(value, str):
            if not value.strip():  # read as the working folder, or (init_from) as not given at all
                said = f"must be a {LOCAL_NAMES[name]} or a hub id, got {value!r}"
                raise FieldTypeError(type(cfg).__name__, name, said)
            value = path_as_given(value, LOCAL_NAMES[name])
        if name in DATA_NAMES and isinstance(value, (str, Path)):
            value = _data_name(type(cfg).__name__, name, value)
        if name in _ANY_CASE:
            value = any_case(value)
        try:
            typed = _coerce(hint, value, commas=name in _COMMA_LISTS)
        except (ValueError, OverflowError):
            raise FieldTypeError(type(cfg).__name__, name,
                                 f"must be {_expected(hint)}, got {_shown(value)}{_quoted_bool(value)}") from None
        items = typed if isinstance(typed, tuple) else (typed,)
        if name not in _OWN_RANGE and any(_too_large(item) for item in items):
            raise FieldTypeError(type(cfg).__name__, name, f"must be below 2^32, got {_shown(value)}")
        if typed is not given:
            object.__setattr__(cfg, name, typed)


def any_case(value: Any) -> Any:
    """A name from a fixed set (a precision, a device, a schedule, a preset) in its one spelling, lower case; any
    other value is left for the caller's check to refuse."""
    return value.lower() if isinstance(value, str) else value


def take_int(name: str, value: Any, minimum: int | None = None, own_range: bool = False) -> int:
    """A whole-number argument of a plain function, taken as a config field takes it (8.0 is 8), so that a
    Python caller gets the CLI's one-line error rather than a TypeError deep in torch; `name` is how the
    message names it: the CLI flag where there is one (`--top-k`). `own_range`: the caller checks the range
    (a seed, whose message gives it whole), as a config's seed fields."""
    try:
        number = _coerce(int, value)
    except (ValueError, OverflowError):
        raise UsageError(f"{name} must be a whole number, got {_shown(value)}") from None
    if _too_large(number) and not own_range:
        raise UsageError(f"{name} must be below 2^32, got {number}")
    if minimum is not None and number < minimum:
        raise UsageError(f"{name} must be at least {minimum}, got {number}")
    return number


def take_names(name: str, value: Any) -> tuple[str, ...]:
    """A list-of-names argument of a plain function (`label_names`), taken as the config field of that name takes
    it: a text split as its flag splits it (`"O,B-PER"`), a list or tuple as it is; anything else, or an empty
    item (`"O,,B-PER"`), is one line naming the flag rather than a bare AttributeError or ValueError."""
    try:
        return _coerce(tuple[str, ...], value, commas=True)
    except (ValueError, OverflowError):
        raise UsageError(f"{name} must be a list of strings, got {_shown(value)}") from None


def is_list(value: Any) -> bool:
    """An argument taken as a list of items (texts, tokens): a list, a tuple, a generator, a numpy array or pandas
    Series. Not one string, whose characters those would be, nor a mapping or a table (a DataFrame): iterated,
    they give their keys or column names, which would be taken for the items without a word."""
    return (isinstance(value, Iterable) and not isinstance(value, (str, bytes, Mapping))
            and getattr(value, "ndim", 1) == 1)


def take_finite(name: str, value: Any) -> float:
    """A real-number argument of a plain function, refused when not finite: a nan or infinite threshold compares
    false (or true) with every score, so it would silently decide every answer instead of failing."""
    try:
        number = _coerce(float, value)
    except (ValueError, OverflowError):
        raise UsageError(f"{name} must be a number, got {_shown(value)}") from None
    if not math.isfinite(number):
        raise UsageError(f"{name} must be a finite number, got {number}")
    return number


def take_bool(name: str, value: Any) -> bool:
    """A yes/no argument of a plain function: "no" or 0 would read as true (or be ignored) without this."""
    if not is_bool(value):
        raise UsageError(f"{name} must be true or false, got {_shown(value)}{_quoted_bool(value)}")
    return bool(value)


def is_bool(value: Any) -> bool:
    """True or False, numpy's too (`np.bool_`, as numpy's ints and floats are taken for numbers); not 0 or 1,
    nor a text. numpy is only looked up if already imported: a value cannot be numpy's otherwise."""
    numpy = sys.modules.get("numpy")
    return isinstance(value, bool) or (numpy is not None and isinstance(value, numpy.bool_))


def take_config(function: str, cfg: Any, cls: type) -> None:
    """A command function's config: a dict, None or another command's config failed deep inside with an
    AttributeError that named a field, not the argument. Called by a worker re-running a script without the
    `__main__` guard, the command ends that worker instead (worker_processes)."""
    refuse_script_rerun(function)
    if not isinstance(cfg, cls):
        given = "None" if cfg is None else f"a {type(cfg).__name__}"
        raise UsageError(f"{function}: give a bertctl.{cls.__name__}, not {given}")


def split_list(text: str, cast: Callable[[str], Any] = str) -> tuple[Any, ...]:
    """The items of a comma-separated list as the list flags write it (`--seeds 1,2`, `--text-columns a,b`):
    stripped, each through `cast` (which raises ValueError for a bad one). An empty item between commas (`1,,2`)
    is a ValueError too: dropping it would hide a typo. A trailing comma ends the list; a blank text has no items."""
    if not text.strip():
        return ()
    items = [item.strip() for item in text.split(",")]
    if len(items) > 1 and not items[-1]:
        items.pop()
    if not all(items):
        raise ValueError(f"an empty item in {text!r}")
    return tuple(cast(item) for item in items)


def as_flag_reads(hint: Any, value: Any) -> Any:
    """A `--config` file's text for a number field (`steps: "8"`, `lr: "0.1"`) as its flag reads the same text
    (`--steps 8`), so quoting a number in a file changes nothing; text the flag refuses (`"1e3"` for a whole number)
    is left as it is, for the config to refuse naming the file and key. Yes/no fields keep their text: their flags
    are switches that take none. A list's items each so (`seeds: ["1", "2"]`)."""
    hint = _not_none(hint)
    if typing.get_origin(hint) is tuple and isinstance(value, list):
        (kind,) = set(typing.get_args(hint)) - {Ellipsis}
        return [as_flag_reads(kind, item) for item in value]
    if not isinstance(value, str) or hint not in (int, float):
        return value
    try:
        return _whole_text(value) if hint is int else _float_text(value)
    except ValueError:
        return value


def _float_text(text: str) -> float:
    """A real-number flag's text (`--lr 1e-4`, `nan`, `inf`) as the flag reads it: Python's float(), ASCII only,
    as typer takes no other digits."""
    if not text.isascii():
        raise ValueError(text)
    return float(text)


def _data_name(owner: str, name: str, value: str | Path) -> str:
    """A data field's file, folder or hub id as spelt, `~` expanded; "" would be the working folder."""
    if not str(value).strip():
        raise FieldTypeError(owner, name, f"must be a path, got {_shown(value)}")
    return os.path.expanduser(value)


def _quoted_bool(value: Any) -> str:
    """"must be true or false, got 'true'" read as a contradiction: the value is the text, not the yes/no."""
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return f", text in quotes; write {value.strip().lower()} without them"
    return ""


def _shown(value: Any) -> str:
    """A value as an error message shows it: YAML's null for None, long ones cut, one line."""
    return "null" if value is None else quoted(value, reprlib.repr)


_KINDS = {bool: "true or false", int: "a whole number", float: "a number", str: "a string", Path: "a path"}


def _is_optional(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


def _not_none(hint: Any) -> Any:
    """X of a field typed `X | None` (the only unions fields have); any other hint as it is."""
    if not _is_optional(hint):
        return hint
    (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
    return inner


def _expected(hint: Any) -> str:
    """What a field of type `hint` holds, in the words of an error message."""
    if _is_optional(hint):
        return f"{_expected(_not_none(hint))} (or null)"
    if typing.get_origin(hint) is tuple:
        return f"a list of {_expected(typing.get_args(hint)[0]).removeprefix('a ')}s"
    return _KINDS[hint]


def _too_large(value: Any) -> bool:
    """A whole number past what any count needs, which torch, numpy or tokenizers would overflow on deep inside
    a run (an index-sized or 32-bit integer) rather than refuse."""
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**32


def _coerce(hint: Any, value: Any, commas: bool = False) -> Any:
    """`value` as the field type `hint` (only X, X | None and tuple[X, ...] occur): JSON/YAML have no Path or
    tuple and may write 8.0 for 8 or 0 for 0.0. With `commas`, a string for a tuple is split as its flag
    splits it (`seeds: "1,2,3"`). Raises ValueError for any other type."""
    origin = typing.get_origin(hint)
    if _is_optional(hint):
        return None if value is None else _coerce(_not_none(hint), value, commas)
    if origin is tuple:  # a lone value is a list of one (a lone string must not become its characters)
        (kind,) = set(typing.get_args(hint)) - {Ellipsis}
        if commas and isinstance(value, str):
            return split_list(value, _whole_text if kind is int else kind)
        items = value if isinstance(value, (list, tuple)) else (value,)
        if kind is str:  # `label_names: [0, 1]`: YAML reads the class names as numbers
            items = [str(i) if isinstance(i, numbers.Integral) and not isinstance(i, bool) else i for i in items]
        return tuple(_coerce(kind, item) for item in items)
    number = isinstance(value, numbers.Real) and not isinstance(value, bool)  # numpy's numbers too
    if hint is bool and is_bool(value):
        return bool(value)
    if hint is str and isinstance(value, str):
        return value
    if hint is str and isinstance(value, Path):  # a folder or file named by a str field (--data, --model-config)
        return str(value)
    if hint is int and number and (isinstance(value, numbers.Integral) or _whole(value)):
        return int(value)
    if hint is float and number:
        return float(value)
    if hint is Path and isinstance(value, (str, Path)) and str(value):  # "" would be the working folder
        return Path(value).expanduser()  # `out: ~/runs` in a --config file reaches us unexpanded
    raise ValueError


def _whole(value: numbers.Real) -> bool:
    """A float that is a whole number; from a `--config` file, also written as its flag takes one (`8.0`)."""
    if isinstance(value, FileNumber) and not _FLAG_WHOLE.fullmatch(value.text.strip()):
        return False
    return float(value).is_integer()


def _whole_text(text: str) -> int:
    """An item of a list flag of whole numbers (`--seeds 1,2.0`), taken as a lone int flag takes one."""
    if not _FLAG_WHOLE.fullmatch(text.strip()):
        raise ValueError(text)
    return int(text.strip().partition(".")[0])  # int() skips the underscores


# what an int flag takes (`--steps 8.0`, `1_000`); not `1e3`, `8.`, `8.5` or digits other than ASCII ones
_FLAG_WHOLE = re.compile(r"[-+]?[0-9](_?[0-9])*(\.0+)?")
