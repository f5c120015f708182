"""TensorFlow's on-disk pieces that its checkpoints and TFRecord files share: protobuf fields read by hand
(neither tensorflow nor protobuf is needed) and the masked CRC32C every block, tensor and record is checked with."""

from __future__ import annotations

import functools
import operator
import struct

import numpy as np

# ------------------------------------------------------------------------------------------------- protobuf


def varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A base-128 varint at `pos` (IndexError past the end), and the position after it."""
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint")


def message_fields(message: bytes) -> dict[int, list[int | bytes]]:
    """A protobuf message's fields by number: varints and fixed ints as ints, length-delimited ones as bytes."""
    fields: dict[int, list[int | bytes]] = {}
    pos, end = 0, len(message)
    while pos < end:
        tag = message[pos]  # one byte for field numbers below 16: read inline, the common case
        tag, pos = (tag, pos + 1) if tag < 0x80 else varint(message, pos)
        number, wire = tag >> 3, tag & 7
        value: int | bytes
        if wire == 2:
            length = message[pos]
            length, pos = (length, pos + 1) if length < 0x80 else varint(message, pos)
            if pos + length > end:
                raise ValueError("length")
            value, pos = message[pos:pos + length], pos + length
        elif wire == 0:
            value, pos = varint(message, pos)
        elif wire == 1:
            (value,), pos = struct.unpack_from("<Q", message, pos), pos + 8
        elif wire == 5:
            (value,), pos = struct.unpack_from("<I", message, pos), pos + 4
        else:
            raise ValueError(f"wire type {wire}")
        fields.setdefault(number, []).append(value)
    return fields


def int_field(fields: dict[int, list[int | bytes]], number: int) -> int:
    value = fields.get(number, [0])[-1]
    if not isinstance(value, int):
        raise ValueError(f"field {number}")
    return value



# --------------------------------------------------------------------------------------------------- CRC32C
# TensorFlow checks each tensor's bytes against a masked CRC32C (Castagnoli). zlib has only CRC32, so it is computed
# here with numpy: CRC is linear over GF(2), so the register after a block of bytes is the XOR of one table lookup per
# byte (a table per position in the block), and blocks combine by advancing each one's register past the bytes that
# follow it (a 32x32 bit matrix, applied as four byte-wise lookups). About 1 s for BERT-base's 440 MB.

_POLY = 0x82F63B78  # CRC32C, bit-reflected
_BLOCK = 64  # bytes whose per-position tables are looked up at once
_CHUNK = 1 << 18  # bytes per numpy pass: the temporaries stay in cache
_MANY_BYTES = 1 << 16  # crc32c_many: longer buffers are taken on their own


def masked_crc(crc: int) -> int:
    """TensorFlow's (and LevelDB's) masked CRC: rotated right by 15 bits plus a constant."""
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


@functools.cache
def _byte_table() -> np.ndarray:
    """The register after one byte b from a zero register, for every b."""
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(_POLY), table >> 1).astype(np.uint32)
    return table


def _lookups(columns: np.ndarray) -> np.ndarray:
    """A 32x32 bit matrix (column i: the image of bit i) as four 256-entry tables, one per byte of the input."""
    values = np.arange(256)
    tables = np.zeros((4, 256), dtype=np.uint32)
    for byte in range(4):
        for bit in range(8):
            tables[byte] ^= np.where((values >> bit) & 1, columns[8 * byte + bit], 0).astype(np.uint32)
    return tables


def _apply(tables: np.ndarray, registers: np.ndarray) -> np.ndarray:
    """A bit matrix (as _lookups tables) times each register."""
    registers = np.asarray(registers, dtype=np.uint32)
    return (tables[0][registers & 0xFF] ^ tables[1][(registers >> 8) & 0xFF] ^ tables[2][(registers >> 16) & 0xFF]
            ^ tables[3][registers >> 24])


@functools.cache
def _advance_power(log2: int) -> np.ndarray:
    """The matrix (columns) that advances a register past 2**log2 zero bytes."""
    if log2 == 0:
        return np.array([_byte_table()[(1 << i) & 0xFF] ^ ((1 << i) >> 8) for i in range(32)], dtype=np.uint32)
    half = _advance_power(log2 - 1)
    return _apply(_power_lookups(log2 - 1), half)


@functools.cache
def _power_lookups(log2: int) -> np.ndarray:
    """_advance_power(log2) as lookup tables, to advance many registers at once."""
    return _lookups(_advance_power(log2))


def _advance(register: int, count: int) -> int:
    """One register advanced past `count` zero bytes (a product of the powers of two in `count`)."""
    for log2 in range(count.bit_length()):
        if count >> log2 & 1:
            columns = _advance_power(log2).tolist()
            register = functools.reduce(operator.xor, (c for i, c in enumerate(columns) if register >> i & 1), 0)
    return register


@functools.cache
def _position_tables() -> np.ndarray:
    """Flat [_BLOCK * 256] table: the register contribution of byte b at position j of a block (the byte's own
    table entry, advanced past the _BLOCK - 1 - j bytes after it)."""
    rows = [_byte_table()]
    for _ in range(_BLOCK - 1):
        rows.append(_apply(_power_lookups(0), rows[-1]))
    return np.concatenate(rows[::-1])


@functools.cache
def _byte_list() -> list[int]:
    return _byte_table().tolist()


def crc32c(data: np.ndarray) -> int:
    """CRC32C of a uint8 array (crc32c(b"123456789") == 0xE3069283)."""
    table, register = _byte_list(), 0xFFFFFFFF
    head = len(data) % _BLOCK
    for byte in data[:head].tolist():  # fewer than _BLOCK bytes, one at a time
        register = table[(register ^ byte) & 0xFF] ^ (register >> 8)
    body = data[head:]
    if len(body):
        register = _advance(register, len(body)) ^ _combine(_block_registers(body))
    return register ^ 0xFFFFFFFF


def crc32c_many(buffers: list[bytes]) -> np.ndarray:
    """CRC32C of each buffer (uint32), many small ones at once: each is right-aligned in a row of zeros (leading
    zeros leave a zero-start register at zero), the start value 0xFFFFFFFF is XORed into its first 4 bytes
    instead (the same register), and each row's blocks combine in one pass over the columns."""
    lengths = np.array([len(b) for b in buffers], dtype=np.int64)
    out = np.empty(len(buffers), dtype=np.uint32)
    batched = (lengths >= 4) & (lengths <= _MANY_BYTES)
    for i in np.flatnonzero(~batched).tolist():  # tiny or large ones on their own
        out[i] = crc32c(np.frombuffer(buffers[i], np.uint8))
    rows = np.flatnonzero(batched)
    step = max(1, _CHUNK // max(1, int(lengths[rows].max(initial=0))))
    for start in range(0, len(rows), step):
        chosen = rows[start:start + step]
        size = lengths[chosen]
        width = -(-int(size.max()) // _BLOCK) * _BLOCK
        data = np.frombuffer(b"".join([buffers[i] for i in chosen.tolist()]), np.uint8).copy()
        firsts = np.concatenate([[0], np.cumsum(size)[:-1]])
        data[(firsts[:, None] + np.arange(4)).ravel()] ^= 0xFF
        matrix = np.zeros((len(chosen), width), np.uint8)
        ends = (np.arange(len(chosen)) + 1) * width  # each row's data ends at its row's end
        matrix.ravel()[np.repeat(ends - size - firsts, size) + np.arange(len(data))] = data
        blocks = _block_registers(matrix.ravel()).reshape(len(chosen), -1)
        register = blocks[:, 0]
        for column in range(1, blocks.shape[1]):
            register = _apply(_power_lookups(_BLOCK.bit_length() - 1), register) ^ blocks[:, column]
        out[chosen] = register ^ np.uint32(0xFFFFFFFF)
    return out


def masked_crcs(crcs: np.ndarray) -> np.ndarray:
    """masked_crc of each of an array of CRCs in one numpy pass: TFRecord records are checked a block at a time
    (`read_records`), not one Python call per record."""
    crcs = np.asarray(crcs, dtype=np.uint32)
    return ((crcs >> np.uint32(15)) | (crcs << np.uint32(17))) + np.uint32(0xA282EAD8)


def _block_registers(body: np.ndarray) -> np.ndarray:
    """The zero-start register of each _BLOCK-byte block of `body`."""
    positions = _position_tables()
    offsets = np.arange(_BLOCK, dtype=np.uint16) * 256
    out = np.empty(len(body) // _BLOCK, dtype=np.uint32)
    rows = _CHUNK // _BLOCK
    index = np.empty((rows, _BLOCK), dtype=np.uint16)
    gathered = np.empty((rows, _BLOCK), dtype=np.uint32)
    for start in range(0, len(out), rows):
        block = body[start * _BLOCK:(start + rows) * _BLOCK].reshape(-1, _BLOCK)
        n = len(block)
        np.add(block, offsets, out=index[:n])
        np.take(positions, index[:n], out=gathered[:n], mode="wrap")
        np.bitwise_xor.reduce(gathered[:n], axis=1, out=out[start:start + n])
    return out


def _combine(registers: np.ndarray) -> int:
    """The zero-start register of consecutive blocks from theirs: pairs merge level by level, the first of each
    pair advanced past the second (leading zero blocks change nothing, so the count is padded to a power of 2)."""
    size = 1 << (len(registers) - 1).bit_length()
    registers = np.concatenate([np.zeros(size - len(registers), dtype=np.uint32), registers])
    log2 = _BLOCK.bit_length() - 1  # the second of a pair spans 2**log2 bytes
    while len(registers) > 1:
        pairs = registers.reshape(-1, 2)
        registers = _apply(_power_lookups(log2), pairs[:, 0]) ^ pairs[:, 1]
        log2 += 1
    return int(registers[0])
