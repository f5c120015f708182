"""The HDF5 pre-training shards of NVIDIA's create_pretraining_data.py (DeepLearningExamples, PyTorch BERT), read
a block of rows at a time with h5py: what `corpus import` reads them with.

NVIDIA's writer (`write_instance_to_example_file`) stores one instance a row in six gzip-compressed datasets:
`input_ids` (int32), `input_mask` and `segment_ids` (int8), each [rows, max_seq_length] padded with 0;
`masked_lm_positions` and `masked_lm_ids` (int32), each [rows, max_predictions_per_seq] padded with 0; and
`next_sentence_labels` (int8, [rows]: 1 = random next = NotNext, as Google's). There are no weights: its loader
(`pretraining_dataset.__getitem__` in run_pretraining.py) takes the predictions before the first 0 position
(position 0 is [CLS], never masked) and ignores every slot from there on.

h5py is optional (`pip install 'bertctl[hdf5]'`): nothing here imports it until a shard is opened.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from bertctl.errors import BertctlError

__all__ = ["DATASETS", "BadShard", "Layout", "ShardReader", "is_hdf5", "predictions_used", "require_h5py"]

SIGNATURE = b"\x89HDF\r\n\x1a\n"  # HDF5's format signature: at byte 0, or after a user block of 512 * 2**k bytes
DATASETS = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids", "next_sentence_labels")
_SEQUENCE, _PREDICTIONS = DATASETS[:3], DATASETS[3:5]
CHUNK_CACHE_BYTES = 16 << 20  # per dataset: holds a whole band of h5py's chunks across a row (2.6 MB at 512 tokens)


class BadShard(Exception):
    """A shard whose datasets or bytes are not NVIDIA's; the caller names the file."""


def is_hdf5(path: Path) -> bool:
    """Whether the file holds HDF5's signature where the HDF5 library looks for it, whatever its name."""
    with open(path, "rb") as handle:
        size = handle.seek(0, 2)
        offset = 0
        while offset + len(SIGNATURE) <= size:
            handle.seek(offset)
            if handle.read(len(SIGNATURE)) == SIGNATURE:
                return True
            offset = offset * 2 if offset else 512
    return False


def require_h5py(path: Path) -> Any:
    """The h5py module, or a one-line error saying how to install it."""
    try:
        import h5py
    except ImportError:
        raise BertctlError(f"corpus import: {path} is an HDF5 file, and reading one needs h5py: "
                           "pip install 'bertctl[hdf5]'") from None
    return h5py


def predictions_used(positions: np.ndarray) -> np.ndarray:
    """[rows, max_predictions_per_seq] bool: the slots before a row's first 0 position, the predictions NVIDIA's
    loader trains on."""
    padding = positions == 0
    first = np.where(padding.any(axis=1), padding.argmax(axis=1), positions.shape[1])
    return np.arange(positions.shape[1]) < first[:, None]


@dataclasses.dataclass(frozen=True)
class Layout:
    """What a shard's datasets say about its rows."""

    rows: int
    seq: int  # max_seq_length
    predictions: int  # max_predictions_per_seq
    compression: str | None  # input_ids' filter as h5py names it ("gzip" from NVIDIA's writer)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


class ShardReader:
    """An open shard: its layout checked once, then its rows a block at a time (bounded memory: a phase-2 shard
    is about 1 GB)."""

    def __init__(self, path: Path) -> None:
        h5py = require_h5py(path)
        try:
            self.file = h5py.File(path, "r", rdcc_nbytes=CHUNK_CACHE_BYTES, rdcc_nslots=10_007)
        except OSError as exc:  # the signature is there (is_hdf5): the rest is cut short or damaged
            raise BadShard(f"not a readable HDF5 file, truncated or damaged ({_one_line(exc)})") from None
        self.datasets: list[Any] = []

    def __enter__(self) -> ShardReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.file.close()

    def layout(self) -> Layout:
        """Check the six datasets are NVIDIA's (present, integers, of agreeing shapes) and say their shape."""
        import h5py

        names = list(self.file.keys())
        missing = [name for name in DATASETS if name not in names]
        if missing:
            shown = [name if name.isprintable() else ascii(name) for name in names[:20]]
            has = ", ".join(shown) + (f" and {len(names) - 20} more" if len(names) > 20 else "") if names else "none"
            raise BadShard(f"not a pre-training shard of NVIDIA's create_pretraining_data.py: no {', '.join(missing)} "
                           f"(it holds: {has})")
        for name in DATASETS:
            item = self.file.get(name)
            if not isinstance(item, h5py.Dataset):
                raise BadShard(f"{name} is a {type(item).__name__.lower()}, not a dataset")
            if item.dtype.kind not in "iu":
                raise BadShard(f"dataset {name} holds {item.dtype}, NVIDIA's holds integers")
            self.datasets.append(item)
        shapes = {name: item.shape for name, item in zip(DATASETS, self.datasets, strict=True)}
        for name, shape in shapes.items():
            labels = name == "next_sentence_labels"
            if (len(shape) not in (1, 2) or len(shape) == 2 and shape[1] != 1) if labels else len(shape) != 2:
                wanted = "(rows,)" if labels else "(rows, max_predictions_per_seq)" if name in _PREDICTIONS \
                    else "(rows, max_seq_length)"
                raise BadShard(f"dataset {name} has shape {shape}, NVIDIA's is {wanted}")
        for group, what in ((DATASETS, "row counts"), (_SEQUENCE, "widths"), (_PREDICTIONS, "widths")):
            sizes = {name: shapes[name][0 if what == "row counts" else 1] for name in group}
            if len(set(sizes.values())) > 1:
                raise BadShard(f"datasets of unequal {what}: " + ", ".join(f"{k} {v}" for k, v in sizes.items()))
        seq, predictions = shapes["input_ids"][1], shapes["masked_lm_positions"][1]
        if not seq or not predictions:
            raise BadShard(f"input_ids has {seq} columns and masked_lm_positions {predictions}: a shard of NVIDIA's "
                           "has at least one of each")
        return Layout(shapes["input_ids"][0], seq, predictions, self.datasets[0].compression)

    def blocks(self, size: int) -> Iterator[tuple[int, list[np.ndarray]]]:
        """(first row, the six datasets' values for rows first..first + size) in order, after layout(); the
        labels as a [rows, 1] column."""
        rows = self.datasets[0].shape[0]
        for start in range(0, rows, size):
            stop = min(start + size, rows)
            try:
                columns = [item[start:stop] for item in self.datasets]
            except (OSError, ValueError) as exc:  # a chunk past the end of a cut file, or one that does not inflate
                raise BadShard(f"rows {start + 1}-{stop} cannot be read, the file is truncated or corrupt "
                               f"({_one_line(exc)})") from None
            columns[-1] = columns[-1].reshape(stop - start, 1)
            yield start, columns
