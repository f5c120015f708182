"""What a training run logs: metrics.jsonl rows (and TensorBoard events), the rows a resume drops, and the
tokens/s and elapsed clock in them.

Shared by pretrain and every finetune command; kept apart from training.py, whose pieces make the steps.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from bertctl.errors import UsageError
from bertctl.files import WriteFailed, json_ready, json_text, write_text_atomic
from bertctl.training import Distributed


class MetricsLog:
    """metrics.jsonl (one JSON object a line) and TensorBoard events when tensorboard is installed.

    A run resumed from step `resumed_at` logs the steps after it again: trim_metrics drops them from
    metrics.jsonl, and TensorBoard hides the events it already holds for them (its `purge_step`)."""

    def __init__(self, run: Path, enabled: bool = True, resumed_at: int = 0) -> None:
        self.enabled = enabled
        self._path = run / "metrics.jsonl"
        self._file = open(self._path, "a", encoding="utf-8") if enabled else None  # noqa: SIM115
        self._board = None
        if enabled:
            with contextlib.suppress(ImportError):
                from torch.utils.tensorboard import SummaryWriter

                self._board = SummaryWriter(str(run / "tensorboard"), purge_step=resumed_at + 1 if resumed_at else None)

    def write(self, row: dict[str, Any]) -> None:
        """One row; a NaN/inf figure is written as null (bare NaN is not JSON: jq and others refuse the line)."""
        if not self.enabled:
            return
        row = json_ready(row)
        try:
            self._file.write(json_text(row) + "\n")
            self._file.flush()
        except OSError as exc:  # a full disk: name the file
            raise WriteFailed(self._path, exc) from None
        if self._board is not None:
            for key, value in row.items():
                if isinstance(value, (int, float)) and key != "step":
                    self._board.add_scalar(key, value, row["step"])

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        if self._board is not None:
            self._board.close()


def kept_metrics(run: Path, step: int, drop_closing_row: bool = False) -> tuple[str, float] | None:
    """What a resume from `step` keeps of metrics.jsonl (None: there is none): the rows logged up to the checkpoint
    (those after it are logged again, so the file holds each step once), and the last `elapsed` among them, where
    the clock goes on. `drop_closing_row`: a finished run extended to more steps drops its closing training row
    too (off the --log-every grid), which the longer run writes where an uninterrupted run does. It only reads, so
    a damaged file is refused before the resume has written anything: run.json is rewritten after it."""
    path = run / "metrics.jsonl"
    if not path.exists():
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:  # a flipped bit: say which file, as a damaged run.json does
        raise UsageError(f"{path} is damaged ({exc}); restore or delete it") from None
    rows = [(line, row) for line in text.splitlines() if (row := _json_row(line)) is not None and row["step"] <= step]
    elapsed = max((row["elapsed"] for _, row in rows if "elapsed" in row), default=0.0)
    if drop_closing_row:
        rows = [(line, row) for line, row in rows if row["step"] < step or "loss" not in row]
    return "".join(f"{line}\n" for line, _ in rows), elapsed


def trim_metrics(run: Path, kept: tuple[str, float] | None) -> float:
    """Write what kept_metrics kept of metrics.jsonl; returns the seconds the run had trained."""
    if kept is None:
        return 0.0
    text, elapsed = kept
    write_text_atomic(run / "metrics.jsonl", text)
    return elapsed


def _json_row(line: str) -> dict[str, Any] | None:
    """A metrics row, or None for a blank line, the half-written last line of a killed run or a damaged row (a step
    or elapsed that is not a number, which comparing and max() would fail on)."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(row, dict) or not all(_number(row[key]) for key in ("step", "elapsed") if key in row):
        return None
    return row if "step" in row else None


def _number(value: Any) -> bool:
    """An int or float, not a bool (JSON's true would compare as a step of 1)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


class Throughput:
    """Training tokens (padding left out) per second over the last logging window, and the run's clock
    (`elapsed`: what a resumed run had already spent, plus its own time)."""

    def __init__(self, elapsed: float = 0.0) -> None:
        self.window = time.perf_counter()
        self.start = self.window - elapsed
        self.tokens = 0

    def add(self, tokens: int) -> None:
        self.tokens += tokens

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Validation and saves inside are not training: the window's clock leaves their time out."""
        began = time.perf_counter()
        try:
            yield
        finally:
            self.window += time.perf_counter() - began

    def rate(self, env: Distributed | None = None) -> float:
        """With `env`, the tokens added are this rank's and are summed over the ranks (host-side group)."""
        tokens = self.tokens
        if env is not None and env.world_size > 1:
            total = torch.tensor([float(tokens)], dtype=torch.float64)
            dist.all_reduce(total, op=dist.ReduceOp.SUM, group=env.control)
            tokens = int(total.item())
        now = time.perf_counter()
        rate = tokens / max(now - self.window, 1e-9)
        self.window, self.tokens = now, 0
        return rate

    def elapsed(self) -> float:
        return time.perf_counter() - self.start
