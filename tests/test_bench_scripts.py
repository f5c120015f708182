"""The bench scripts still run against today's bertctl. They are not part of the suite's figures, but a device
session is minutes long: a script that fails at its first import (a helper renamed in bertctl) wastes it."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

pytestmark = pytest.mark.usefixtures("one_thread")

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
    """The imports inside its functions too: bench/heads.py's training step imported a loss function that a
    refactor had merged into another, and failed only once a device session reached it."""
    assert callable(_load(path, monkeypatch).main)
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("bertctl"):
            module = importlib.import_module(node.module)
            missing = [alias.name for alias in node.names if not hasattr(module, alias.name)]
            assert not missing, f"{path.name}:{node.lineno}: {node.module} has no {', '.join(missing)}"


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


def test_gpu_check_builds_the_corpus_without_datasets_or_pyarrow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The device image has neither package, so bench/gpu_check.py keeps the real builder's instances in memory.
    Its stand-in wrote through a builder method that a refactor had removed: every step after it failed."""
    from bertctl.config import CorpusConfig, TokenizerTrainConfig
    from bertctl.corpus import build_corpus, load_corpus
    from bertctl.tokenizer_train import train_tokenizer

    check = _load(BENCH / "gpu_check.py", monkeypatch)
    text = tmp_path / "text.txt"
    text.write_text("\n\n".join(f"Document {d} starts here. It has a second sentence, number {d}. And a third one."
                                for d in range(40)), encoding="utf-8")
    train_tokenizer(TokenizerTrainConfig(inputs=(str(text),), out=tmp_path / "tok", vocab_size=200))
    settings = {"inputs": (str(text),), "tokenizer": tmp_path / "tok", "max_seq_length": 32, "masking": "dynamic",
                "validation_fraction": 0.1}
    build_corpus(CorpusConfig(out=tmp_path / "built", **settings))
    built, _ = load_corpus(tmp_path / "built")
    monkeypatch.setitem(sys.modules, "datasets", None)
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setattr(check.bertctl.corpus, "load_corpus", check.bertctl.corpus.load_corpus)  # restored after
    assert not check._has_datasets()
    check._stand_in_corpus(CorpusConfig(out=tmp_path / "stand-in", **settings))
    kept, manifest = check.bertctl.corpus.load_corpus(tmp_path / "stand-in")
    for split in ("train", "validation"):
        rows = list(range(len(built[split])))
        assert len(kept[split]) == len(rows) > 0
        assert kept[split][rows] == {column: built[split][rows][column] for column in kept[split].column_names}
