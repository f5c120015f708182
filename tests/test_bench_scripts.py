"""The bench scripts still run against today's bertctl. They are not part of the suite's figures, but a device
session is minutes long: a script that fails at its first import (a helper renamed in bertctl) wastes it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _load(path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))  # gpu_profile imports gpu_pretrain as the scripts run it
    spec = importlib.util.spec_from_file_location(f"bench_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", sorted(BENCH.glob("*.py")), ids=lambda p: p.name)
def test_bench_script_imports(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert callable(_load(path, monkeypatch).main)


@pytest.mark.parametrize("side", ["bertctl_step", "transformers_step"])
def test_gpu_pretrain_steps_run_on_the_cpu(side: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both sides of bench/gpu_pretrain.py take a training step (uncompiled here: compiling is minutes of CPU)."""
    bench = _load(BENCH / "gpu_pretrain.py", monkeypatch)
    monkeypatch.setattr(torch, "compile", lambda model, **_: model)
    cpu = torch.device("cpu")
    batch = bench.make_batch(4, cpu, padded_share=0.5)
    step = getattr(bench, side)("tiny", batch, cpu, dropout=0.0)
    step()


def test_memory_bench_children_find_their_module_from_any_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """bench/memory.py measures in child processes that import it again: they looked for it in `bench` under the
    working folder, so `cd bench && python memory.py` (or a run from anywhere but the repository) failed."""
    memory = _load(BENCH / "memory.py", monkeypatch)
    monkeypatch.chdir(tmp_path)
    assert memory._child("SIDES", threads=1) == ["bertctl", "transformers"]
