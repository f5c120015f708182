"""Model folders named by a hub id come from the local Hugging Face cache when offline."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from typer.testing import CliRunner

from bertctl.checkpoint import save_model
from bertctl.cli import app
from bertctl.config import BertConfig
from bertctl.errors import UsageError
from bertctl.hub import is_hub_dataset_id, is_hub_id, local_folder, path_as_given
from bertctl.model import BertForMaskedLM
from bertctl.tokenizer_folder import load_tokenizer

hub_constants = pytest.importorskip("huggingface_hub.constants")
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "dog", "ran", "a", "cat", "##s"]
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def offline_cache(tmp_path, monkeypatch):
    """A hub cache holding `someone/tiny-bert` (a bertctl MLM folder plus a TF copy that must not be read)."""
    cache = tmp_path / "hub"
    repo = cache / "models--someone--tiny-bert"
    snapshot = repo / "snapshots" / COMMIT
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    tokenizer = load_tokenizer(tmp_path / "tok")
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=32)
    torch.manual_seed(0)
    save_model(BertForMaskedLM(config), tmp_path / "saved", tokenizer)
    shutil.copytree(tmp_path / "saved", snapshot)
    (snapshot / "tf_model.h5").write_bytes(b"not read")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    return snapshot


def test_paths_are_never_taken_for_hub_ids(tmp_path):
    assert is_hub_id("bert-base-uncased") and is_hub_id("google-bert/bert-base-cased")
    assert not any(is_hub_id(name) for name in ("./runs/x", "/abs/model", "~/m", "runs/mnli/", "a/b/c", "-x", "a/.b",
                                                   str(tmp_path)))
    for name in ("./nope", "nope/", "~/nope"):  # spelt as a path, missing: never looked up as the hub's `nope`
        with pytest.raises(UsageError, match=f"^tokenizer {name} does not exist$"):
            path_as_given(name, "tokenizer")
    assert path_as_given(" ") is None  # blank, as `--model "$UNSET "`: the caller names its flag


def test_a_missing_data_file_is_never_taken_for_a_hub_dataset(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "squad").mkdir()
    (tmp_path / "squad" / "plain_text").mkdir()
    assert all(is_hub_dataset_id(name) for name in ("rajpurkar/squad_v2", "nyu-mll/glue", "teknium/OpenHermes-2.5"))
    assert not any(is_hub_dataset_id(name) for name in (
        "data/train", "squad/plain_text",  # in a folder here (missing, or there)
        "swag/train.csv", "x/dev.JSONL", "x/train.parquet", "x/a.txt.gz",  # a data file's ending
        "./x/y", "x/y/", "~/x", "/x/y", "squad", "a/b/c"))  # written like a path, or not owner/name


def test_a_cached_hub_model_is_read_offline(offline_cache, monkeypatch):
    import huggingface_hub

    assert local_folder("someone/tiny-bert") == offline_cache
    result = CliRunner().invoke(app, ["fill", "--model", "someone/tiny-bert", "--json", "the [MASK] ran"])
    assert result.exit_code == 0, result.output
    asked = []

    def snapshot(download):
        def ask(name, allow_patterns):
            asked.append(allow_patterns)
            return download(name, allow_patterns=allow_patterns)
        return ask

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot(huggingface_hub.snapshot_download))
    assert local_folder("someone/tiny-bert", weights=False) == offline_cache
    assert len(asked) == 1 and not any("safetensors" in pattern for pattern in asked[0])  # a tokenizer's files only
    bin_only = offline_cache.parent / "bin-only"
    bin_only.mkdir()
    (bin_only / "pytorch_model.bin").write_bytes(b"")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot(lambda *_, **__: bin_only))
    assert local_folder("someone/old-bert") == bin_only
    assert "pytorch_model.bin" in asked[-1] and "model.safetensors" in asked[-2]  # no safetensors: then the .bin


def test_an_uncached_hub_id_offline_is_one_line_exit_2(offline_cache):
    result = CliRunner().invoke(app, ["info", "someone/not-there"])
    assert result.exit_code == 2
    assert "someone/not-there" in result.stderr and "local model folder" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("resolves", [True, False])
def test_datasets_are_told_offline_only_when_the_hub_does_not_resolve_and_only_meanwhile(monkeypatch, resolves):
    import os
    import socket
    import sys
    import types

    from bertctl.hub import _hub_resolves, offline_when_unreachable

    def lookup(host, port):
        if not resolves:
            raise socket.gaierror(-2, "Name or service not known")
        return [("resolved",)]

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    _hub_resolves.cache_clear()  # asked once a process
    monkeypatch.delitem(sys.modules, "datasets.config", raising=False)
    with offline_when_unreachable():
        assert (os.environ.get("HF_HUB_OFFLINE") == "1") is (not resolves)
        assert hub_constants.HF_HUB_OFFLINE is (not resolves)
        first_imported_here = types.SimpleNamespace(HF_HUB_OFFLINE=not resolves)  # it read the variable as set
        monkeypatch.setitem(sys.modules, "datasets.config", first_imported_here)
    assert "HF_HUB_OFFLINE" not in os.environ and hub_constants.HF_HUB_OFFLINE is False
    assert first_imported_here.HF_HUB_OFFLINE is False
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)  # the process's own setting comes back
    with offline_when_unreachable():
        pass
    assert hub_constants.HF_HUB_OFFLINE is True
    _hub_resolves.cache_clear()


def test_the_python_api_keeps_a_name_written_like_a_path_local(tmp_path, monkeypatch):
    import huggingface_hub

    from bertctl.convert import convert
    from bertctl.errors import UsageError
    from bertctl.fill import fill
    from bertctl.info import info

    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda *a, **k: pytest.fail("looked up on the hub"))
    monkeypatch.chdir(tmp_path)
    for call, name in ((lambda n: fill(["a [MASK]"], n), "./nope"), (info, "nope/"),
                       (lambda n: convert(n, tmp_path / "out"), "./nope")):
        with pytest.raises(UsageError, match=f"^model folder {name} does not exist$"):
            call(name)


def test_an_existing_folder_written_like_a_path_is_read(offline_cache, monkeypatch):
    monkeypatch.chdir(offline_cache.parent)
    for name in (f"./{offline_cache.name}", f"{offline_cache.name}/"):
        result = CliRunner().invoke(app, ["fill", "--model", name, "--json", "the [MASK] ran"])
        assert result.exit_code == 0, result.output


def test_info_on_a_hub_id_shows_the_snapshots_tokenizer(offline_cache):
    result = CliRunner().invoke(app, ["info", "someone/tiny-bert", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["path"] == "someone/tiny-bert" and summary["tokenizer"]["vocab_size"] == len(VOCAB)


def test_a_name_under_an_unexpanded_home_is_the_folder_there(tmp_path, monkeypatch):
    """`--model=~/x` and `model: ~/x` in a --config file reach bertctl without the shell's expansion."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "models" / "m").mkdir(parents=True)
    assert path_as_given("~/models/m") == tmp_path / "models" / "m"
    assert local_folder("~/models/m") == tmp_path / "models" / "m"
