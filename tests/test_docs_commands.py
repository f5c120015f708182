"""The docs' and README's example command lines name commands and flags bertctl has: a renamed flag
(`finetune squad --dev`, now `--validation`) left in an example makes it fail at its first word."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer

from bertctl.cli import app

ROOT = Path(__file__).resolve().parent.parent
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
_SHELL_ENDS = ("|", "||", "&&", ";", ">", ">>", "2>&1", "&")


def bertctl_lines(text: str) -> Iterator[tuple[str, list[str]]]:
    """(line, the words after `bertctl`) of every shell block's command line that runs bertctl (`python -m
    bertctl`, `torchrun ... -m bertctl` too), continuation lines joined and comments dropped."""
    for block in re.findall(r"```(?:bash|sh|shell|console)\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if "bertctl" in words:
                rest = words[words.index("bertctl") + 1:]
                yield line.strip(), list(next((rest[:i] for i, w in enumerate(rest) if w in _SHELL_ENDS), rest))


def unknown_words(words: list[str]) -> list[str]:
    """The subcommand or flags of `bertctl WORDS...` that bertctl does not have."""
    command = typer.main.get_command(app)
    flags = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    at = 0
    while hasattr(command, "commands") and at < len(words) and not words[at].startswith("-"):
        if words[at] not in command.commands:
            return [words[at]]
        command = command.commands[words[at]]
        at += 1
    flags |= {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)} | {"--help"}
    return [w for w in words[at:] if w.startswith("--") and w.split("=")[0] not in flags]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_example_command_line_uses_commands_and_flags_bertctl_has(page):
    lines = list(bertctl_lines(page.read_text(encoding="utf-8")))
    unknown = [(line, bad) for line, words in lines if (bad := unknown_words(words))]
    assert not unknown, unknown


def flags_table(page: str) -> list[tuple[set[str], set[str]]]:
    """(flags, commands) of each row of a page's `## Flags` table; `all` in the commands column is every command."""
    text = (ROOT / "docs" / page).read_text(encoding="utf-8").split("## Flags")[1]
    rows = [line for line in text.strip().split("\n\n")[0].splitlines()[2:] if line.startswith("|")]
    cells = [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]
    return [(set(re.findall(r"`(--[a-z-]+)", flags)), {"all"} if commands == "all" else
             set(re.findall(r"`([a-z]+)`", commands))) for flags, commands, *_ in cells]


@pytest.mark.parametrize("group", ["evaluate", "predict"])
def test_the_flags_tables_list_every_flag_of_every_command_they_cover(group):
    """predict.md's table said "both" (glue, classify) after squad, ner and choice came, and neither page's table
    had squad's window flags or ner's --label-names."""
    table = flags_table(f"{group}.md")
    commands = typer.main.get_command(app).commands[group].commands
    have = {(name, opt) for name, command in commands.items() for param in command.params
            for opt in param.opts if opt.startswith("--") and opt != "--help"}
    listed = {(name, flag) for flags, names in table for flag in flags
              for name in (commands if "all" in names else names)}
    assert not have - listed, sorted(have - listed)
    assert not listed - have, sorted(listed - have)
