"""Model folders named by a Hugging Face hub id (`bert-base-uncased`, `google-bert/bert-base-cased`).

A name that is not an existing path and looks like a hub id is fetched with `huggingface_hub` (a dependency
of `datasets`), which serves it from the local cache when offline. Only the files bertctl reads are fetched:
the config, the tokenizer files, and one weights format (safetensors when the repository has it, else
pytorch_model.bin), not the TensorFlow, Flax, ONNX or Core ML copies hub repositories often carry too.
A data flag's `owner/name` is told from a missing file the same way (`is_hub_dataset_id`); `datasets` loads it.
"""

from __future__ import annotations

import functools
import os
import re
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

from bertctl.errors import UsageError, quoted

HUB_MODEL_ID = re.compile(r"(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*")  # [owner/]name
HUB_DATASET_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")  # owner/name, as `datasets.load_dataset` takes it
# endings of the data files bertctl reads: `data/train.json` is a file that is missing, never a hub dataset
DATA_FILE_SUFFIXES = frozenset({".json", ".jsonl", ".csv", ".tsv", ".txt", ".parquet", ".arrow", ".conll", ".gz",
                                ".bz2", ".xz", ".zst"})
# dataset names of older Hugging Face docs, without an owner, and the hub id each has now
LEGACY_DATASETS = {"squad": "rajpurkar/squad", "squad_v2": "rajpurkar/squad_v2", "conll2003": "eriktks/conll2003",
                   "swag": "allenai/swag", "glue": "nyu-mll/glue"}
_COMMON = ["config.json", "vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
           "added_tokens.json"]
_WEIGHTS = (["model.safetensors", "model.safetensors.index.json", "model-*-of-*.safetensors"],
            ["pytorch_model.bin", "pytorch_model.bin.index.json", "pytorch_model-*-of-*.bin"])


def is_hub_id(name: str | Path) -> bool:
    """True for a name that can only mean a hub repository: no such path here, and not written like a path."""
    text = str(name)
    if Path(text).exists() or written_like_path(text):
        return False
    return HUB_MODEL_ID.fullmatch(text) is not None


def is_hub_dataset_id(name: str | Path) -> bool:
    """True for a name that can only mean a hub dataset (`nyu-mll/glue`, `rajpurkar/squad`): no such path here,
    not written like a path, `owner/name` without a data file's ending, and no folder `owner` here (then
    `data/train` is a file missing from data/)."""
    text = str(name)
    if Path(text).expanduser().exists() or written_like_path(text) or not HUB_DATASET_ID.fullmatch(text):
        return False
    owner, repository = text.split("/")
    return Path(repository).suffix.lower() not in DATA_FILE_SUFFIXES and not Path(owner).is_dir()


def legacy_dataset_hint(name: str | Path, hub_ids: tuple[str, ...]) -> str:
    """` (the hub dataset is rajpurkar/squad)` for a data flag's missing path named as older Hugging Face docs name
    one of the flag's own `hub_ids`, without its owner (`squad`, `squad_v2:validation`); "" for any other name
    (`finetune ner --train squad` gets none). The bare name is never loaded: it may as well be a file missing
    here, and the owner is the user's to give."""
    owned = LEGACY_DATASETS.get(str(name).split(":")[0].lower())
    return f" (the hub dataset is {owned})" if owned in hub_ids and not Path(name).exists() else ""


def written_like_path(text: str) -> bool:
    """`./x`, `/x`, `~/x`, `x/`: a name meant as a local path. Only the text says so: Path("./x") and
    Path("x/") are both `x`, which reads like a hub id."""
    return text.startswith((".", "/", "~")) or text.endswith("/")


def path_as_given(name: str | Path | None, what: str = "model folder") -> Path | None:
    """A model or tokenizer name (a flag, a --config value, a Python argument) as the Path the recipes take,
    refusing a name written like a path that is not there while its spelling still says it is one (as a Path
    it would be looked up on the hub). A Path has already lost `./` and a trailing `/`: only `/x` and `~/x`
    still say so. None or a blank name (`--model "$UNSET"`) is None, which the caller refuses naming its flag:
    as a Path it would be the working folder."""
    if name is None or not str(name).strip():
        return None
    _refuse_non_name(name, what.removesuffix(" folder"))
    path = Path(name).expanduser()  # `--model=~/x` and `model: ~/x` in a --config file reach us unexpanded
    _refuse_checkpoint_prefix(path)
    if written_like_path(str(name)) and not path.exists():
        raise UsageError(f"{what} {name} does not exist")
    return path


def local_folder(name: str | Path, weights: bool = True) -> Path:
    """The local folder for `name`: the path itself, or the hub repository's (cached) snapshot.

    `weights=False` fetches only the config and tokenizer files (for `--tokenizer bert-base-uncased`).
    """
    if name is None or str(name) == "":
        raise UsageError(f"no {'model' if weights else 'tokenizer'} given: pass a folder or a hub id")
    _refuse_non_name(name, "model" if weights else "tokenizer")
    _refuse_checkpoint_prefix(Path(name).expanduser())
    if not is_hub_id(name):
        return Path(name).expanduser()
    try:
        from huggingface_hub import snapshot_download

        if not weights:
            return Path(snapshot_download(str(name), allow_patterns=_COMMON))
        for patterns in _WEIGHTS:
            folder = Path(snapshot_download(str(name), allow_patterns=_COMMON + patterns))
            if any(any(folder.glob(pattern)) for pattern in patterns):
                break
        return folder
    except Exception as exc:  # offline and not cached, no such repository, no access: one message for all
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        what = "model" if weights else "tokenizer"
        raise UsageError(f"{what} {name}: no such folder here, and the hub repository {name} could not be "
                         f"loaded ({reason}); give a local {what} folder, or go online once to cache it") from None


def _refuse_non_name(name: object, what: str) -> None:
    """A number, a list or a loaded model given for a folder would be looked up on the hub, or fail there (or in
    pathlib, with a TypeError naming no argument)."""
    if not isinstance(name, (str, os.PathLike)):
        raise UsageError(f"{what}: give a folder or a hub id, not {quoted(name)}")


def _refuse_checkpoint_prefix(path: Path) -> None:
    """`x/bert_model.ckpt`, as Google's convert script takes it, names no file (only `.index` and `.data-*` exist),
    so it read like a hub id, or a missing folder; bertctl reads the folder around it."""
    if not path.exists() and path.with_name(f"{path.name}.index").is_file():
        raise UsageError(f"{path} is a TensorFlow checkpoint's prefix, not a folder; give the folder that holds it "
                         f"and its bert_config.json and vocab.txt: {path.parent}")


_OFFLINE_FLAGS = ("huggingface_hub.constants", "datasets.config")  # modules that read HF_HUB_OFFLINE on import


@contextmanager
def offline_when_unreachable() -> Iterator[None]:
    """With no route to the hub, `datasets` retries for about 25 s (printing each retry) before it gives up or
    turns to its cache; when the hub's host does not even resolve, it is told it is offline for the block,
    which reads the cache directly. An explicit HF_HUB_OFFLINE / HF_DATASETS_OFFLINE is left alone, and the
    flags come back as they were afterwards."""
    if {"HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"} & set(os.environ) or _hub_resolves():
        yield
        return
    saved = {name: sys.modules[name].HF_HUB_OFFLINE for name in _OFFLINE_FLAGS if name in sys.modules}
    os.environ["HF_HUB_OFFLINE"] = "1"
    for name in _OFFLINE_FLAGS:
        if name in sys.modules:
            sys.modules[name].HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        del os.environ["HF_HUB_OFFLINE"]
        for name in _OFFLINE_FLAGS:  # a module first imported inside the block read the variable as set
            if name in sys.modules:
                sys.modules[name].HF_HUB_OFFLINE = saved.get(name, False)


@functools.cache
def _hub_resolves() -> bool:
    """Whether the hub's host name resolves (asked once a process: a dead DNS can take seconds to answer)."""
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    try:
        socket.getaddrinfo(urlparse(endpoint).hostname or endpoint, 443)
    except (OSError, UnicodeError):
        return False
    return True
