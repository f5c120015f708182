"""Google's TensorFlow BERT checkpoints, read without TensorFlow.

google-research/bert's folders (`bert_model.ckpt.index` + `.data-00000-of-00001`, and the `model.ckpt-N` files of
run_pretraining, run_classifier and run_squad) are TensorFlow "tensor bundles": the `.index` is a LevelDB-style
table (tensorflow/core/lib/io: blocks of prefix-compressed keys, a block index and a footer) mapping each variable
name to a BundleEntryProto (dtype, shape, data shard, offset, size, masked CRC32C), and the `.data-*` shards hold
the raw little-endian bytes. Both are parsed here by hand (neither tensorflow nor protobuf is needed), every block
and every tensor read is checked against its CRC32C as TensorFlow checks it, and the model's variables come out under
transformers' names, so `bertctl.checkpoint` loads them on its one path (shapes, heads, strictness).
"""

from __future__ import annotations

import math
import os
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import BinaryIO

import numpy as np
import torch
from torch import Tensor

from bertctl.errors import UsageError
from bertctl.tf_format import crc32c, int_field, masked_crc, message_fields, varint

_MAGIC = 0xDB4775248B80FB57  # LevelDB's table magic number, which TensorFlow's tables keep
_FOOTER = 48  # two BlockHandles padded to 40 bytes, then the magic
_TRAILER = 5  # after each block: its compression type (1 byte) and the masked CRC32C of block + type
_HEADER_KEY = b""  # the BundleHeaderProto's key: the table's first entry
_BUNDLE_VERSION = 1  # the bundle format version this reader implements (tensor_bundle.cc's kTensorBundleVersion)
# tensorflow/core/framework/types.proto's DataType numbers of the dtypes a BERT checkpoint's weights come in
_DTYPES = {1: np.float32, 19: np.float16, 14: "bfloat16", 3: np.int32, 9: np.int64, 5: np.int16, 6: np.int8,
           4: np.uint8}
_BROKEN = (IndexError, ValueError, struct.error)  # what parsing bytes that are not what they should be raises
_DTYPE_NAMES = {2: "float64", 7: "string", 8: "complex64", 10: "bool", 17: "uint16", 18: "complex128",
                20: "resource", 21: "variant", 22: "uint32", 23: "uint64"}

# Google's variable names -> transformers'; {0}, {1} are the pattern's groups. `kernel`s are [in, out]
# (tf.layers.dense) and become torch's [out, in]; the `output_weights` of run_classifier, run_squad and the NSP
# head are already [out, in] (tf.matmul(..., transpose_b=True)).
_W, _NORM, _LAYER = r"(kernel|bias)", r"LayerNorm/(gamma|beta)", r"bert/encoder/layer_(\d+)"
_NAMES = [(re.compile(pattern), target) for pattern, target in [
    (r"bert/embeddings/(word|position|token_type)_embeddings", "bert.embeddings.{0}_embeddings.weight"),
    (rf"bert/embeddings/{_NORM}", "bert.embeddings.LayerNorm.{0}"),
    (rf"{_LAYER}/attention/self/(query|key|value)/{_W}", "bert.encoder.layer.{0}.attention.self.{1}.{2}"),
    (rf"{_LAYER}/attention/output/dense/{_W}", "bert.encoder.layer.{0}.attention.output.dense.{1}"),
    (rf"{_LAYER}/attention/output/{_NORM}", "bert.encoder.layer.{0}.attention.output.LayerNorm.{1}"),
    (rf"{_LAYER}/intermediate/dense/{_W}", "bert.encoder.layer.{0}.intermediate.dense.{1}"),
    (rf"{_LAYER}/output/dense/{_W}", "bert.encoder.layer.{0}.output.dense.{1}"),
    (rf"{_LAYER}/output/{_NORM}", "bert.encoder.layer.{0}.output.LayerNorm.{1}"),
    (rf"bert/pooler/dense/{_W}", "bert.pooler.dense.{0}"),
    (rf"cls/predictions/transform/dense/{_W}", "cls.predictions.transform.dense.{0}"),
    (rf"cls/predictions/transform/{_NORM}", "cls.predictions.transform.LayerNorm.{0}"),
    (r"cls/predictions/output_bias", "cls.predictions.bias"),
    (r"cls/seq_relationship/output_(weights|bias)", "cls.seq_relationship.{0}"),
    (r"cls/squad/output_(weights|bias)", "qa_outputs.{0}"),  # run_squad.py
    (r"output_(weights|bias)", "classifier.{0}"),  # run_classifier.py
]]
_PARTS = {"kernel": "weight", "gamma": "weight", "beta": "bias", "weights": "weight"}
_MODEL_SCOPES = ("bert/", "cls/", "output_weights", "output_bias")  # anything else is not the model's


@dataclass(frozen=True)
class _Entry:
    """One BundleEntryProto: where a tensor's bytes are and what they hold."""

    dtype: int
    shape: tuple[int, ...]
    shard: int
    offset: int
    size: int
    crc: int  # masked CRC32C of the bytes
    sliced: bool  # a partitioned variable: its pieces are separate entries


# ---------------------------------------------------------------------------------------------- finding the files


def checkpoint_prefix(folder: Path) -> Path | None:
    """The checkpoint a folder holds (`folder/bert_model.ckpt`), or None when it holds none.

    The one the `checkpoint` file names (run_pretraining/run_classifier keep several, and TensorFlow resumes from
    that one), else the only `*.index`; several and no `checkpoint` file is refused, naming them.
    """
    state = folder / "checkpoint"
    named = _named_checkpoint(state) if state.is_file() else None
    if named is not None:
        # relative as TensorFlow writes it now; absolute (or gs://..., or C:\... from a Windows machine) in older
        # runs, whose folder has since moved
        windows = PureWindowsPath(named)
        moved = PurePosixPath(named).is_absolute() or "://" in named or bool(windows.drive or windows.root)
        prefix = folder / (windows.name if moved else named)
        if not Path(f"{prefix}.index").is_file():
            raise UsageError(f"{state} names the checkpoint {named}, but {prefix.name}.index is not in {folder}; "
                             "copy its .index and .data-* files there, or name another one in the checkpoint file")
        return prefix
    indexes = sorted(folder.glob("*.index"))
    if len(indexes) > 1:
        names = ", ".join(p.name.removesuffix(".index") for p in indexes)
        raise UsageError(f"{folder} holds {len(indexes)} TensorFlow checkpoints ({names}) and no checkpoint file "
                         f"saying which to read; write one: model_checkpoint_path: \"NAME\" in {state}")
    return indexes[0].with_suffix("") if indexes else None


def _named_checkpoint(state: Path) -> str | None:
    """model_checkpoint_path of TensorFlow's `checkpoint` file (a text-format CheckpointState)."""
    try:
        text = state.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UsageError(f"cannot read {state}: {exc.strerror or exc}") from None
    match = re.search(r'^\s*model_checkpoint_path\s*:\s*"((?:[^"\\]|\\.)*)"', text, re.MULTILINE)
    if match is None:
        return None
    return _c_unescape(match.group(1)) or None


_C_ESCAPES = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"a": b"\a", b"b": b"\b", b"f": b"\f", b"v": b"\v"}


def _c_unescape(quoted: str) -> str:
    """A text-format string's value: protobuf writes the bytes of a non-ASCII name as octal escapes (\\303\\251),
    quotes and backslashes escaped (\\", \\\\)."""
    def one(match: re.Match[bytes]) -> bytes:
        code = match.group(1)
        if code[0] in b"01234567":
            return bytes([int(code, 8) & 0xFF])
        if code[:1] in (b"x", b"X"):
            return bytes([int(code[1:], 16)])
        return _C_ESCAPES.get(code, code)
    raw = re.sub(rb"\\([0-7]{1,3}|[xX][0-9a-fA-F]{1,2}|.)", one, quoted.encode("utf-8"), flags=re.DOTALL)
    return raw.decode("utf-8", errors="replace")


# ------------------------------------------------------------------------------------------ reading the checkpoint


def read_weights(prefix: Path) -> dict[str, Tensor]:
    """The model's tensors of the checkpoint at `prefix` under transformers' names; optimizer slots (adam_m,
    adam_v), global_step and other training state are skipped without being read."""
    index = Path(f"{prefix}.index")
    entries, shards = _read_index(index)
    wanted: dict[str, tuple[str, _Entry]] = {}
    unknown: list[str] = []
    for name, entry in entries.items():
        target = _transformers_name(name)
        if target == "":
            unknown.append(name)
        elif target is not None:
            wanted[target] = (name, entry)
    if unknown:
        shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
        raise UsageError(f"{index}: unexpected variables {shown} (not a BERT checkpoint bertctl knows)")
    if not wanted:
        raise UsageError(f"{index}: no BERT variables (bert/..., cls/...) in this TensorFlow checkpoint; bertctl "
                           "reads the checkpoints of google-research/bert (a TF2/Keras object checkpoint is not one)")
    files: dict[int, BinaryIO] = {}
    try:
        return {target: _tensor(prefix, shards, files, name, entry) for target, (name, entry) in wanted.items()}
    finally:
        for handle in files.values():
            handle.close()


def _transformers_name(name: str) -> str | None:
    """transformers' name of a Google variable; None for what is not the model's (optimizer slots, global_step,
    a mixed-precision loss scale ...), "" for a model-looking name bertctl does not know."""
    if not name.startswith(_MODEL_SCOPES):
        return None
    for pattern, target in _NAMES:
        match = pattern.match(name)
        if match is None:
            continue
        if match.end() < len(name):
            if name[match.end()] == "/":
                return None  # a slot of this variable: .../adam_m, .../adam_v, .../Adam, .../Momentum ...
            continue
        return target.format(*(_PARTS.get(g, g) for g in match.groups()))
    return ""


def _tensor(prefix: Path, shards: int, files: dict[int, BinaryIO], name: str, entry: _Entry) -> Tensor:
    """One variable's bytes, checked against their CRC32C, as a torch tensor ([in, out] kernels transposed)."""
    if entry.sliced:
        raise UsageError(f"{prefix}.index: {name} is a partitioned variable (saved in slices), which bertctl does "
                           "not read; save the checkpoint unpartitioned")
    if entry.dtype not in _DTYPES:
        kind = _DTYPE_NAMES.get(entry.dtype, f"DataType {entry.dtype}")
        raise UsageError(f"{prefix}.index: {name} holds {kind} values; bertctl reads float32, float16, bfloat16 "
                           "and integer weights")
    dtype = _DTYPES[entry.dtype]
    itemsize = 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize
    count = math.prod(entry.shape)  # exact: numpy's int64 product wraps for a damaged shape (2**62 x 4 -> 0)
    path = Path(f"{prefix}.data-{entry.shard:05d}-of-{shards:05d}")
    if entry.size != count * itemsize or not 0 <= entry.shard < shards:
        raise _damaged(Path(f"{prefix}.index"), f"the entry of {name} is inconsistent")
    if entry.shard not in files:
        try:
            files[entry.shard] = path.open("rb")
        except OSError as exc:
            raise UsageError(f"cannot read weights {path}: {exc.strerror or exc} (every .data-* file of the "
                               "checkpoint must be beside its .index)") from None
    handle = files[entry.shard]
    if entry.offset + entry.size > os.fstat(handle.fileno()).st_size:
        raise _damaged(path, f"it ends inside {name}")
    data = np.empty(entry.size, dtype=np.uint8)
    handle.seek(entry.offset)
    if handle.readinto(memoryview(data)) != entry.size:
        raise _damaged(path, f"it ends inside {name}")
    if masked_crc(crc32c(data)) != entry.crc:
        raise _damaged(path, f"the bytes of {name} do not match their checksum")
    values = torch.from_numpy(data.view(np.int16)).view(torch.bfloat16) if dtype == "bfloat16" else \
        torch.from_numpy(data.view(dtype))
    values = values.reshape(entry.shape)
    if name.endswith("/kernel") and values.ndim == 2:
        values = values.t().contiguous()
    return values


def _damaged(path: Path, reason: str) -> UsageError:
    return UsageError(f"cannot read weights {path}: {reason} (is the file complete? re-download it)")


# --------------------------------------------------------------------------------------------- the .index table


def _read_index(path: Path) -> tuple[dict[str, _Entry], int]:
    """Every entry of a bundle's .index (tensor name -> _Entry) and its number of data shards."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read weights {path}: {exc.strerror or exc}") from None
    pairs = iter(_table_entries(path, data))
    first = next(pairs, None)
    if first is None or first[0] != _HEADER_KEY:
        raise _damaged(path, "it has no bundle header")
    shards = _header_shards(path, first[1])
    entries: dict[str, _Entry] = {}
    for key, value in pairs:
        name = key.decode("utf-8", errors="replace")
        try:
            entries[name] = _entry(value)
        except _BROKEN:
            raise _damaged(path, f"the entry of {name} cannot be parsed") from None
    return entries, shards


def _table_entries(path: Path, data: bytes) -> Iterator[tuple[bytes, bytes]]:
    """Every (key, value) of a LevelDB-style table, in order: the footer gives the index block, whose values are
    the handles of the data blocks."""
    if len(data) < _FOOTER or struct.unpack_from("<Q", data, len(data) - 8)[0] != _MAGIC:
        raise UsageError(f"cannot read weights {path}: not a TensorFlow checkpoint index (no table magic number "
                           "at its end; is the file complete? re-download it)")
    footer = data[len(data) - _FOOTER:]
    try:
        _, pos = _handle(footer, 0)  # the metaindex block: empty in TensorFlow's tables
        index_handle, _ = _handle(footer, pos)
        for _, value in _block_entries(_block(path, data, index_handle)):
            yield from _block_entries(_block(path, data, _handle(value, 0)[0]))
    except _BROKEN:
        raise _damaged(path, "its block structure is broken") from None


def _handle(buf: bytes, pos: int) -> tuple[tuple[int, int], int]:
    """A BlockHandle (offset, size varints) at `pos`, and the position after it."""
    offset, pos = varint(buf, pos)
    size, pos = varint(buf, pos)
    return (offset, size), pos


def _block(path: Path, data: bytes, handle: tuple[int, int]) -> bytes:
    """A block's contents, after checking its trailer's CRC32C; a compressed block is refused."""
    offset, size = handle
    if offset + size + _TRAILER > len(data) - _FOOTER:
        raise _damaged(path, "a block lies beyond its end")
    contents = data[offset:offset + size + 1]  # with the compression type, which the checksum covers
    (stored,) = struct.unpack_from("<I", data, offset + size + 1)
    if masked_crc(crc32c(np.frombuffer(contents, dtype=np.uint8))) != stored:
        raise _damaged(path, f"the block at byte {offset} does not match its checksum")
    kind = contents[-1]
    if kind == 1:
        raise UsageError(f"cannot read weights {path}: its blocks are snappy-compressed (TensorFlow 1.1 wrote "
                           "such files), which bertctl does not read; re-save the checkpoint with a newer TensorFlow")
    if kind != 0:
        raise _damaged(path, f"the block at byte {offset} has an unknown compression type {kind}")
    return contents[:-1]


def _block_entries(block: bytes) -> Iterator[tuple[bytes, bytes]]:
    """A block's (key, value) pairs: each entry is varints (shared key bytes, new key bytes, value bytes), the
    new key bytes and the value; the restart offsets (uint32) and their count end the block."""
    (restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    end = len(block) - 4 * (restarts + 1)
    if end < 0:
        raise ValueError("restart array")
    pos, key = 0, b""
    while pos < end:
        shared, pos = varint(block, pos)
        fresh, pos = varint(block, pos)
        length, pos = varint(block, pos)
        if shared > len(key) or pos + fresh + length > end:
            raise ValueError("entry")
        key = key[:shared] + block[pos:pos + fresh]
        pos += fresh
        yield key, block[pos:pos + length]
        pos += length


# ------------------------------------------------------------------------------------------------- protobuf

def _header_shards(path: Path, value: bytes) -> int:
    """BundleHeaderProto: num_shards (1), endianness (2: 0 little, 1 big), version (3: producer 1, min_consumer 2)."""
    try:
        header = message_fields(value)
        shards, endianness = int_field(header, 1), int_field(header, 2)
        version = message_fields(header[3][-1]) if 3 in header and isinstance(header[3][-1], bytes) else {}
        min_consumer = int_field(version, 2)
    except _BROKEN:
        raise _damaged(path, "its bundle header cannot be parsed") from None
    if endianness != 0:
        raise UsageError(f"cannot read weights {path}: the checkpoint was written big-endian, which bertctl "
                           "does not read")
    if min_consumer > _BUNDLE_VERSION:
        raise UsageError(f"cannot read weights {path}: written in tensor bundle format {min_consumer}, newer "
                           f"than the version {_BUNDLE_VERSION} bertctl reads")
    if shards < 1:
        raise _damaged(path, f"its header says {shards} data shards")
    return shards


def _entry(value: bytes) -> _Entry:
    """BundleEntryProto: dtype (1), shape (2: TensorShapeProto, dims in field 2 with size in field 1), shard_id (3),
    offset (4), size (5), crc32c (6, fixed32), slices (7)."""
    entry = message_fields(value)
    shape_proto = entry.get(2, [b""])[-1]
    if not isinstance(shape_proto, bytes):
        raise ValueError("shape")
    dims = []
    for dim in message_fields(shape_proto).get(2, []):
        if not isinstance(dim, bytes):
            raise ValueError("dim")
        size = int_field(message_fields(dim), 1)
        if size >= 1 << 63:  # int64 -1: an unknown dimension, never in a saved variable
            raise ValueError("dim size")
        dims.append(size)
    return _Entry(dtype=int_field(entry, 1), shape=tuple(dims), shard=int_field(entry, 3), offset=int_field(entry, 4),
                  size=int_field(entry, 5), crc=int_field(entry, 6), sliced=bool(entry.get(7)))
