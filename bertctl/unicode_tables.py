"""The running Python's Unicode classes that BERT's clean-up spells out as regex class bodies (see
tokenizer_pipeline.py): read from resources/unicode_tables.json when it was generated for this Python's Unicode
version, since computing them costs ~0.3 s of CPU at every start; computed for any other version.

Regenerate the file after moving to a Python with another Unicode version: `python -m bertctl.unicode_tables`.
"""

from __future__ import annotations

import functools
import json
import unicodedata
from collections.abc import Sequence
from pathlib import Path

TABLES = Path(__file__).parent / "resources" / "unicode_tables.json"
SHIPPED_CATEGORIES = ("Cn", "Mn")  # the categories tokenizer_pipeline asks for


def category_class(category: str) -> str:
    """Python's code points of a general category as a regex class body (planes 4-13 are unassigned, Cn)."""
    return _shipped().get(category) or _computed_category(category)


def casing_classes() -> tuple[str, str]:
    """Python's Cased and Case_Ignorable sets, as str.lower() reads them for a final sigma, as class bodies."""
    shipped = _shipped()
    return (shipped["cased"], shipped["case_ignorable"]) if shipped else _computed_casing()


def computed_tables() -> dict[str, str]:
    """Every shipped table, computed from the running Python: what the file must hold for its version."""
    cased, ignorable = _computed_casing()
    return {"unidata_version": unicodedata.unidata_version, "cased": cased, "case_ignorable": ignorable,
            **{category: _computed_category(category) for category in SHIPPED_CATEGORIES}}


@functools.cache
def _shipped() -> dict[str, str]:
    """The file's tables when they are this Python's Unicode version's, else none (a missing file too)."""
    try:
        tables = json.loads(TABLES.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return tables if tables.get("unidata_version") == unicodedata.unidata_version else {}


@functools.cache
def _computed_category(category: str) -> str:
    codes = [c for c in (*range(0x40000), *range(0xE0000, 0xF0000)) if unicodedata.category(chr(c)) == category]
    return class_body(codes) + (r"\x{40000}-\x{DFFFF}" if category == "Cn" else "")


@functools.cache
def _computed_casing() -> tuple[str, str]:
    """Read off str.lower() itself: "cΣ" ends in "ς" when c is cased (and not case-ignorable), "AcΣ" also when c
    is case-ignorable. Planes 2-3 and 15-16 hold ideographs and private use only, neither cased nor ignorable."""
    chars = "".join(map(chr, (*range(0x20), *range(0x21, 0xD800), *range(0xE000, 0x20000), *range(0xE0000, 0xE1000))))
    after = [word.endswith("ς") for word in ("Σ ".join(chars) + "Σ").lower().split(" ")]
    after_a = [word.endswith("ς") for word in ("A" + "Σ A".join(chars) + "Σ").lower().split(" ")]
    cased = [ord(c) for c, final in zip(chars, after, strict=True) if final]
    ignorable = [ord(c) for c, final, final_a in zip(chars, after, after_a, strict=True) if final_a and not final]
    return class_body(cased), class_body(ignorable)


def class_body(codes: Sequence[int]) -> str:
    """Ascending code points as a regex class body of ranges."""
    ranges: list[list[int]] = []
    for code in codes:
        if ranges and code == ranges[-1][1] + 1:
            ranges[-1][1] = code
        else:
            ranges.append([code, code])
    return "".join(f"\\x{{{first:X}}}-\\x{{{last:X}}}" for first, last in ranges)


def write_tables(path: Path = TABLES) -> None:
    path.write_text(json.dumps(computed_tables(), indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    write_tables()
