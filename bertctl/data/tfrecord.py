"""TFRecord files (TensorFlow's record framing, plain, GZIP or ZLIB) and the tf.train.Example protobufs they hold,
read without TensorFlow: what `corpus import` reads Google's pre-training data with.

Framing, per record: uint64 length, the masked CRC32C of those 8 bytes (uint32), the data, the masked CRC32C of the
data (uint32), all little-endian; a GZIP- or ZLIB-compressed file (TFRecordOptions) is that stream compressed.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import re
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from bertctl.tf_format import crc32c, crc32c_many, masked_crc, masked_crcs, message_fields

INT64, FLOAT, BYTES = 3, 2, 1  # tf.train.Feature's oneof field numbers
MAX_RECORD_BYTES = 1 << 30  # a pre-training example at 512 tokens is about 10 KB; a larger length is damage
CHECK_BLOCK = 4096  # records whose checksums are computed together (crc32c_many)


class BadRecord(Exception):
    """A record (or the file around it) that cannot be read; the caller names the file and record."""


# --- reading TFRecord files ------------------------------------------------------------------------------

class CountingReader:
    """A file read through, counting the bytes read (where a damaged compressed stream ends)."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle, self.count = handle, 0

    def read(self, size: int = -1) -> bytes:
        data = self.handle.read(size)
        self.count += len(data)
        return data

    def readable(self) -> bool:
        return True


class HashedReader(CountingReader):
    """A file read through: the sha256 of its stored bytes and how many were read, taken as they pass."""

    def __init__(self, handle: BinaryIO) -> None:
        super().__init__(handle)
        self.digest = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = super().read(size)
        self.digest.update(data)
        return data


class _Inflated(io.RawIOBase):
    """A ZLIB stream (TFRecordOptions' ZLIB: one zlib stream for the whole file), decompressed as it is read."""

    def __init__(self, source: CountingReader) -> None:
        self.source, self.inflate = source, zlib.decompressobj()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while True:
            if self.inflate.unconsumed_tail:
                data = self.inflate.decompress(self.inflate.unconsumed_tail, len(buffer))
            elif self.inflate.eof:  # one stream per file: bytes after it (two files joined) would be lost unread
                extra = self.inflate.unused_data or self.source.read(1 << 16)
                if extra:
                    start = self.source.count - len(extra)
                    raise BadRecord(f"bytes follow the end of the ZLIB stream (from byte {start} of the file): one "
                                    "file holds one stream; import joined files as the separate files they were")
                return 0
            else:
                chunk = self.source.read(1 << 16)
                if not chunk:
                    raise EOFError("the ZLIB stream ends before its end marker")
                data = self.inflate.decompress(chunk, len(buffer))
            if data:
                buffer[:len(data)] = data
                return len(data)


def _valid_header(header: bytes) -> bool:
    return len(header) == 12 and masked_crc(crc32c(np.frombuffer(header[:8], np.uint8))) == \
        struct.unpack_from("<I", header, 8)[0]


def compression_of(head: bytes) -> str | None:
    """None for a plain TFRecord file (its first header checks out), else "gzip" or "zlib" by the magic bytes."""
    if not head or _valid_header(head):
        return None
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    if len(head) >= 2 and head[0] & 0x0F == 8 and (head[0] << 8 | head[1]) % 31 == 0:
        return "zlib"
    return None  # the first record's header is damaged: said so when it is read


def _read_exact(stream: Any, size: int) -> bytes:
    parts, left = [], size
    while left:
        data = stream.read(left)
        if not data:
            break
        parts.append(data)
        left -= len(data)
    return b"".join(parts)


def _decompressed(source: CountingReader, compression: str | None) -> Any:
    """The records' bytes of a file as stored (source), decompressed as they are read."""
    if compression == "gzip":
        return gzip.GzipFile(fileobj=source, mode="rb")  # type: ignore[arg-type]
    if compression == "zlib":
        return io.BufferedReader(_Inflated(source), 1 << 16)
    return source


def count_records(path: Path) -> tuple[int, bytes | None]:
    """How many records a TFRecord file holds, and the first one's data, from the framing alone (each header's
    checksum checked, the data skipped: seeks in a plain file, inflated in a compressed one): far cheaper than
    reading the records, it tells each worker the number of its file's first row before the files before it are
    read. Raises BadRecord (and the decompressors' errors, OSError) where the framing is damaged;
    `read_records` says where and how."""
    with open(path, "rb") as handle:
        compression = compression_of(handle.read(12))
        handle.seek(0)
        size = os.fstat(handle.fileno()).st_size
        stream = _decompressed(CountingReader(handle), compression)
        count, first = 0, None
        while header := _read_exact(stream, 12):
            (length,) = struct.unpack_from("<Q", header.ljust(12, b"\0"))
            if not _valid_header(header) or length > MAX_RECORD_BYTES:
                raise BadRecord(f"record {count + 1}: a damaged header")
            if first is None or compression:
                body = _read_exact(stream, length + 4)
                if len(body) < length + 4:
                    raise BadRecord(f"record {count + 1}: cut short")
                first = body[:length] if first is None else first
            elif handle.seek(length + 4, 1) > size:
                raise BadRecord(f"record {count + 1}: cut short")
            count += 1
    return count, first


def read_records(source: HashedReader, compression: str | None) -> Iterator[bytes]:
    """The data of each record of an open TFRecord file, each checked against its CRC32C; raises BadRecord (and the
    decompressors' errors) at the first bad record, after yielding every record before it."""
    stream = _decompressed(source, compression)
    where = " of the decompressed data" if compression else ""
    offset = 0
    pending: list[tuple[bytes, int, int]] = []  # (data, stored masked CRC, offset): checked a block at a time
    while True:
        try:
            header = _read_exact(stream, 12)
            if not header:
                break
            if len(header) < 12:
                raise BadRecord(f"the file ends inside the record's header (byte {offset}{where}): it is truncated")
            (length,) = struct.unpack_from("<Q", header)
            if not _valid_header(header):
                raise BadRecord(f"the record's length (byte {offset}{where}) does not match its checksum: the file is "
                                "corrupt, or not a TFRecord file")
            if length > MAX_RECORD_BYTES:
                raise BadRecord(f"the record claims {length} bytes, far more than a pre-training example holds")
            body = _read_exact(stream, length + 4)
            if len(body) < length + 4:
                raise BadRecord(f"the file ends inside the record (byte {offset}{where}): it is truncated")
        except (BadRecord, EOFError, zlib.error, gzip.BadGzipFile, OSError):
            yield from _checked(pending, where)  # the records before the damage come first, as they are in the file
            raise
        pending.append((body[:length], struct.unpack_from("<I", body, length)[0], offset + 12))
        offset += 16 + length
        if len(pending) == CHECK_BLOCK:
            yield from _checked(pending, where)
            pending = []
    yield from _checked(pending, where)


def _checked(pending: list[tuple[bytes, int, int]], where: str) -> Iterator[bytes]:
    """The records' data, each checked against its stored CRC32C (all at once); BadRecord at the first that fails."""
    if not pending:
        return
    datas, stored, offsets = zip(*pending, strict=True)
    bad = np.flatnonzero(masked_crcs(crc32c_many(list(datas))) != np.array(stored, np.uint32))
    good = int(bad[0]) if len(bad) else len(datas)
    yield from datas[:good]
    if len(bad):
        raise BadRecord(f"the record's data (byte {offsets[good]}{where}) does not match its checksum: the file is "
                        "corrupt")


# --- tf.train.Example --------------------------------------------------------------------------------------

def _messages(fields: dict[int, list[int | bytes]], number: int) -> list[bytes]:
    values = fields.get(number, [])
    if not (len(values) == 1 and isinstance(values[0], bytes) or all(isinstance(v, bytes) for v in values)):
        raise ValueError(f"field {number} is not a message")
    return values  # type: ignore[return-value]


def _packed_varints(data: bytes) -> np.ndarray:
    """The int64 values of a packed varint run (two's complement, as protobuf writes negative int64s)."""
    raw = np.frombuffer(data, np.uint8)
    last = raw < 0x80
    if not len(raw) or last.all():
        return raw.astype(np.int64)
    if not last[-1]:
        raise ValueError("packed varints")
    ends = np.flatnonzero(last)
    starts = np.concatenate([[0], ends[:-1] + 1])
    if (ends - starts).max() >= 10:
        raise ValueError("varint")
    shift = (np.arange(len(raw)) - np.repeat(starts, ends - starts + 1)).astype(np.uint64) * np.uint64(7)
    parts = (raw & 0x7F).astype(np.uint64) << shift
    return np.add.reduceat(parts, starts).view(np.int64)  # the parts' bits never overlap: adding is OR


def _values(kind: int, items: list[int | bytes]) -> np.ndarray:
    """A list's values: packed runs (bytes) and single unpacked values (ints), in order."""
    if kind == BYTES:
        return np.array([len(item) for item in items if isinstance(item, bytes)])  # never used: their count
    pieces = []
    for item in items:
        if isinstance(item, bytes):
            if kind == FLOAT and len(item) % 4:
                raise ValueError("packed floats")
            pieces.append(np.frombuffer(item, "<f4") if kind == FLOAT else _packed_varints(item))
        elif kind == FLOAT:
            pieces.append(np.array([item], np.uint32).view("<f4"))  # fixed32
        else:
            pieces.append(np.array([item], np.uint64).view(np.int64))
    if not pieces:
        return np.zeros(0, np.float32 if kind == FLOAT else np.int64)
    return np.concatenate(pieces)


def parse_example(data: bytes) -> dict[str, tuple[int, list[int | bytes], int]]:
    """Feature name -> (kind: 1 bytes_list, 2 float_list, 3 int64_list, 0 none set; its list's items: packed runs
    (bytes) and single values (ints), undecoded (`feature_column` decodes a block's at once); how many values) of a
    serialized tf.train.Example. Raises ValueError (or IndexError, struct.error) when the bytes are not one."""
    features: dict[str, tuple[int, list[int | bytes], int]] = {}
    for block in _messages(message_fields(data), 1):  # Example.features (a repeated message merges)
        for entry in _messages(message_fields(block), 1):  # Features.feature: map entries {key = 1, value = 2}
            fields = message_fields(entry)
            keys, values = _messages(fields, 1), _messages(fields, 2)
            name = (keys[-1] if keys else b"").decode("utf-8", "replace")
            feature = message_fields(values[-1] if values else b"")
            kinds = [k for k in (BYTES, FLOAT, INT64) if k in feature]
            kind = kinds[-1] if kinds else 0
            items: list[int | bytes] = []
            for message in _messages(feature, kind) if kind else []:
                items += message_fields(message).get(1, [])
            features[name] = (kind, items, count_values(kind, items))
    return features


_HIGH = bytes(range(0x80, 0x100))  # a varint's continuation bytes
_LONG_VARINT = re.compile(rb"[\x80-\xff]{10}")  # more than 10 bytes: no int64


def count_values(kind: int, items: list[int | bytes]) -> int:
    """How many values a list's items hold (packed runs checked as _values checks them)."""
    count = 0
    for item in items:
        if not isinstance(item, bytes):
            if item >> (32 if kind == FLOAT else 64):
                raise ValueError("value")
            count += kind != BYTES
        elif kind == FLOAT:
            if len(item) % 4:
                raise ValueError("packed floats")
            count += len(item) // 4
        elif kind == INT64:
            if item and (item[-1] >= 0x80 or _LONG_VARINT.search(item)):
                raise ValueError("packed varints")
            count += len(item.translate(None, _HIGH))
        else:
            count += 1
    return count


def feature_column(kind: int, records: list[list[int | bytes]], width: int) -> np.ndarray:
    """One feature of a block of records as a [records, width] array: Google's records each hold one packed run,
    decoded all together."""
    if all(len(items) == 1 and isinstance(items[0], bytes) for items in records):
        joined = b"".join([items[0] for items in records])  # type: ignore[misc]
        values = np.frombuffer(joined, "<f4") if kind == FLOAT else _packed_varints(joined)
    else:
        values = np.concatenate([_values(kind, items) for items in records])
    return values.reshape(len(records), width)
