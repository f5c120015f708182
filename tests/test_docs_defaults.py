"""The defaults a reader is told are the ones the code uses: each `[N]` that ends a flag's `--help` and each
number in the docs' flag tables equals the config dataclass's default (a changed default left in the help or a
page is a wrong promise nobody runs into until a run behaves otherwise)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
import typer

from bertctl import config
from bertctl.cli import app

DOCS = Path(__file__).resolve().parent.parent / "docs"

# command -> the defaults its flags fall back to (the dataclass's, then the command's own preset over them)
COMMAND_DEFAULTS: dict[str, tuple[type, dict[str, Any]]] = {
    "pretrain": (config.PretrainConfig, {"warmup_steps": config.PretrainConfig().warmup()}),  # None: 10,000
    "tokenizer train": (config.TokenizerTrainConfig, {}),
    "corpus build": (config.CorpusConfig, {}),
    "corpus import": (config.CorpusImportConfig, {}),
    "finetune glue": (config.FinetuneConfig, {}),
    "finetune classify": (config.FinetuneConfig, {}),
    "finetune squad": (config.FinetuneConfig, config.SQUAD_DEFAULTS),
    "finetune ner": (config.FinetuneConfig, config.NER_DEFAULTS),
    "finetune choice": (config.FinetuneConfig, config.CHOICE_DEFAULTS),
}


def defaults(name: str) -> dict[str, Any]:
    """Field -> default of a command's config, with its preset's values over the dataclass's."""
    cls, preset = COMMAND_DEFAULTS[name]
    fields = {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
    return {**fields, **preset}


def as_number(text: str) -> float | None:
    """`1e-4`, `10,000` or `0.1` as a number; None for words (`auto`, `off`, `the run's`)."""
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def default_value(value: Any) -> float | None:
    """A dataclass default as a number to compare with (a one-seed tuple as its seed)."""
    if isinstance(value, tuple) and len(value) == 1:
        value = value[0]
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def help_defaults(name: str) -> list[tuple[str, str, float]]:
    """(flag, field, number) for each option of `bertctl NAME` whose help ends in a numeric `[N]`."""
    command = typer.main.get_command(app)
    for word in name.split():
        command = command.commands[word]
    found = []
    for param in command.params:
        match = re.search(r"\[([^\[\]]*)\]\.?\s*$", getattr(param, "help", None) or "")
        if param.param_type_name == "option" and match and (number := as_number(match.group(1))) is not None:
            found.append((param.opts[0], param.name, number))
    return found


@pytest.mark.parametrize("name", sorted(COMMAND_DEFAULTS))
def test_the_defaults_the_help_states_are_the_configs(name):
    known = defaults(name)
    stated = help_defaults(name)
    assert stated, f"no [N] default found in the help of {name}"
    wrong = [(flag, number, known.get(field)) for flag, field, number in stated
             if default_value(known.get(field)) != number]
    assert not wrong, wrong


def table_defaults(page: str, header: str) -> list[tuple[str, float]]:
    """(flag, number) from a docs table whose header row is `header`: the first column's flags (metavars
    dropped) paired with the default column's comma-separated values, the numeric ones only."""
    text = (DOCS / page).read_text(encoding="utf-8")
    table = text[text.index(header):].split("\n\n")[0].splitlines()[2:]
    found = []
    for row in table:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        flags = [flag.split()[0] for flag in re.findall(r"`(--[^`]+)`", cells[0])]
        values = [value.strip() for value in cells[1].split(",")] if len(flags) > 1 else [cells[1]]
        found += [(flag, number) for flag, value in zip(flags, values, strict=False)
                  if (number := as_number(value)) is not None]
    return found


@pytest.mark.parametrize(("page", "header", "name"), [
    ("tokenizer.md", "| option | default | meaning |", "tokenizer train"),
    ("finetuning.md", "| flag | default | meaning |\n|---|---|---|\n| `--max-seq-length`", "finetune glue"),
])
def test_the_defaults_the_docs_tables_state_are_the_configs(page, header, name):
    known = defaults(name)
    stated = table_defaults(page, header)
    assert len(stated) >= 3, stated
    wrong = [(flag, number, known.get(flag[2:].replace("-", "_"))) for flag, number in stated
             if default_value(known.get(flag[2:].replace("-", "_"))) != number]
    assert not wrong, wrong


def test_the_pretrain_help_states_the_quick_starts_own_defaults():
    """`bertctl pretrain` without --corpus trains with QUICKSTART_PRETRAIN, not the [N] its flags show (the
    paper's): the help says so, flag by flag, so `--help` does not promise 1,000,000 steps of BERT-base there."""
    command = typer.main.get_command(app).commands["pretrain"]
    text = " ".join((command.help or "").split())
    stated = dict(re.findall(r"(--[a-z-]+)(?: (\S+?))?[,.]?(?= --|$)", text.split("Without --corpus")[-1]))
    for field, value in config.QUICKSTART_PRETRAIN.items():
        flag = f"--{field.replace('_', '-')}"
        if isinstance(value, bool):
            assert (flag if value else f"--no-{field.replace('_', '-')}") in stated, (field, text)
        else:
            assert flag in stated and str(value) == stated[flag] or as_number(stated.get(flag, "")) == value, \
                (field, stated)
