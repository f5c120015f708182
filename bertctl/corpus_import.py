"""`bertctl corpus import`: the TFRecord files of Google's create_pretraining_data.py as a bertctl corpus.

Each record is a tf.train.Example (Google's `write_instance_to_example_files`): `input_ids`, `input_mask` and
`segment_ids` padded with 0 to max_seq_length, `masked_lm_positions` and `masked_lm_ids` padded with 0 to
max_predictions_per_seq, `masked_lm_weights` (1.0 a prediction, 0.0 padding) and `next_sentence_labels`
(1 = random next = NotNext: bertctl's convention too, so labels are kept as they are). The records become the
rows of a statically masked `mlm+nsp` corpus, unpadded and in the order read, with the DatasetDict, shard and
manifest layout `corpus build` writes, so `pretrain` and `inspect` read it as a built one.

TFRecord framing: per record, uint64 length, the masked CRC32C of those 8 bytes (uint32), the data, the masked
CRC32C of the data (uint32), all little-endian; a GZIP- or ZLIB-compressed file (TFRecordOptions) is that stream
compressed. Every file is read once: its sha256 (of the bytes as stored) is taken while it is parsed. A record
that is damaged, cut short or not a pre-training example fails in one line naming the file and the record,
and nothing is written.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import struct
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from bertctl import __version__
from bertctl.config import CorpusImportConfig, config_to_dict
from bertctl.corpus import (
    FORMAT,
    FORMAT_VERSION,
    assemble_corpus,
    check_length,
    encoding_settings,
    open_partial,
    publish_corpus,
    remove_partial,
    settings_digest,
)
from bertctl.data.instances import (
    SPLITS,
    Packed,
    corpus_schema,
    is_validation,
    packed_stats,
    shard_file,
    write_shard,
)
from bertctl.errors import BertctlError, UsageError
from bertctl.files import check_new_out, refuse_inputs_inside, write_json_atomic
from bertctl.tf_format import crc32c, masked_crc, message_fields

__all__ = ["FEATURES", "import_corpus", "parse_example", "read_records"]

_EXECUTION_ONLY = ("out", "overwrite")  # never change the corpus
_INT64, _FLOAT, _BYTES = 3, 2, 1  # tf.train.Feature's oneof field numbers
_KIND_NAMES = {_BYTES: "bytes_list", _FLOAT: "float_list", _INT64: "int64_list", 0: "empty Feature"}
FEATURES = {"input_ids": _INT64, "input_mask": _INT64, "segment_ids": _INT64, "masked_lm_positions": _INT64,
            "masked_lm_ids": _INT64, "masked_lm_weights": _FLOAT, "next_sentence_labels": _INT64}
_SEQUENCE = ("input_ids", "input_mask", "segment_ids")  # max_seq_length values each
_PREDICTIONS = ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights")  # max_predictions_per_seq each
MAX_RECORD_BYTES = 1 << 30  # a pre-training example at 512 tokens is about 10 KB; a larger length is damage
BLOCK_ROWS = 4096  # records checked and converted together
SHARD_ROWS = 50_000  # rows per Arrow file (about 25 MB at 128 tokens)


class _Bad(Exception):
    """A record (or the file around it) that cannot be imported; the caller names the file and record."""


# --- reading TFRecord files ------------------------------------------------------------------------------

class _Hashed:
    """A file read through: the sha256 of its stored bytes and how many were read, taken as they pass."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle, self.digest, self.count = handle, hashlib.sha256(), 0

    def read(self, size: int = -1) -> bytes:
        data = self.handle.read(size)
        self.digest.update(data)
        self.count += len(data)
        return data

    def readable(self) -> bool:
        return True


class _Inflated(io.RawIOBase):
    """A ZLIB stream (TFRecordOptions' ZLIB: one zlib stream for the whole file), decompressed as it is read."""

    def __init__(self, source: _Hashed) -> None:
        self.source, self.inflate = source, zlib.decompressobj()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while True:
            if self.inflate.unconsumed_tail:
                data = self.inflate.decompress(self.inflate.unconsumed_tail, len(buffer))
            elif self.inflate.eof:
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


def _compression(head: bytes) -> str | None:
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


def read_records(path: Path, source: _Hashed, compression: str | None) -> Iterator[bytes]:
    """The data of each record of an open TFRecord file, each checked against its CRC32C; raises _Bad."""
    if compression == "gzip":
        stream: Any = gzip.GzipFile(fileobj=source, mode="rb")  # type: ignore[arg-type]
    elif compression == "zlib":
        stream = io.BufferedReader(_Inflated(source), 1 << 16)
    else:
        stream = source
    where = " of the decompressed data" if compression else ""
    offset = 0
    while True:
        header = _read_exact(stream, 12)
        if not header:
            return
        if len(header) < 12:
            raise _Bad(f"the file ends inside the record's header (byte {offset}{where}): it is truncated")
        (length,) = struct.unpack_from("<Q", header)
        if not _valid_header(header):
            raise _Bad(f"the record's length (byte {offset}{where}) does not match its checksum: the file is "
                       "corrupt, or not a TFRecord file")
        if length > MAX_RECORD_BYTES:
            raise _Bad(f"the record claims {length} bytes, far more than a pre-training example holds")
        body = _read_exact(stream, length + 4)
        if len(body) < length + 4:
            raise _Bad(f"the file ends inside the record (byte {offset}{where}): it is truncated")
        data = body[:length]
        if masked_crc(crc32c(np.frombuffer(data, np.uint8))) != struct.unpack_from("<I", body, length)[0]:
            raise _Bad(f"the record's data (byte {offset + 12}{where}) does not match its checksum: the file is "
                       "corrupt")
        offset += 16 + length
        yield data


# --- tf.train.Example --------------------------------------------------------------------------------------

def _messages(fields: dict[int, list[int | bytes]], number: int) -> list[bytes]:
    values = fields.get(number, [])
    if not all(isinstance(v, bytes) for v in values):
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
    if kind == _BYTES:
        return np.array([len(item) for item in items if isinstance(item, bytes)])  # never used: their count
    pieces = []
    for item in items:
        if isinstance(item, bytes):
            if kind == _FLOAT and len(item) % 4:
                raise ValueError("packed floats")
            pieces.append(np.frombuffer(item, "<f4") if kind == _FLOAT else _packed_varints(item))
        elif kind == _FLOAT:
            pieces.append(np.array([item], np.uint32).view("<f4"))  # fixed32
        else:
            pieces.append(np.array([item], np.uint64).view(np.int64))
    if not pieces:
        return np.zeros(0, np.float32 if kind == _FLOAT else np.int64)
    return np.concatenate(pieces)


def parse_example(data: bytes) -> dict[str, tuple[int, np.ndarray]]:
    """Feature name -> (kind: 1 bytes_list, 2 float_list, 3 int64_list, 0 none set; values) of a serialized
    tf.train.Example. Raises ValueError (or IndexError, struct.error) when the bytes are not one."""
    features: dict[str, tuple[int, np.ndarray]] = {}
    for block in _messages(message_fields(data), 1):  # Example.features (a repeated message merges)
        for entry in _messages(message_fields(block), 1):  # Features.feature: map entries {key = 1, value = 2}
            fields = message_fields(entry)
            keys, values = _messages(fields, 1), _messages(fields, 2)
            name = (keys[-1] if keys else b"").decode("utf-8", "replace")
            feature = message_fields(values[-1] if values else b"")
            kinds = [k for k in (_BYTES, _FLOAT, _INT64) if k in feature]
            kind = kinds[-1] if kinds else 0
            items: list[int | bytes] = []
            for message in _messages(feature, kind) if kind else []:
                items += message_fields(message).get(1, [])
            features[name] = (kind, _values(kind, items))
    return features


# --- records -> rows ---------------------------------------------------------------------------------------

@dataclasses.dataclass
class _Shape:
    """max_seq_length and max_predictions_per_seq, as the first record has them."""

    seq: int
    predictions: int
    first: str  # where they were read


def _record_arrays(features: dict[str, tuple[int, np.ndarray]], shape: _Shape | None) -> list[np.ndarray]:
    """The seven features' values after the per-record checks (present, of Google's kinds and lengths)."""
    missing = [name for name in FEATURES if name not in features]
    if missing:
        has = ", ".join(sorted(features)) or "none"
        hint = " (run_classifier's fine-tuning examples?)" if "label_ids" in features else ""
        raise _Bad(f"not a pre-training example of Google's create_pretraining_data.py{hint}: no "
                   f"{', '.join(missing)} (its features: {has})")
    for name, kind in FEATURES.items():
        if features[name][0] != kind and len(features[name][1]):
            raise _Bad(f"feature {name} is a {_KIND_NAMES[features[name][0]]}, Google's is a {_KIND_NAMES[kind]}")
    arrays = [features[name][1] for name in FEATURES]
    for group in (_SEQUENCE, _PREDICTIONS):
        lengths = {name: len(features[name][1]) for name in group}
        if len(set(lengths.values())) > 1:
            raise _Bad("features of unequal lengths: " + ", ".join(f"{k} {v}" for k, v in lengths.items()))
    if len(arrays[-1]) != 1:
        raise _Bad(f"next_sentence_labels holds {len(arrays[-1])} values, not 1")
    if not len(arrays[0]):
        raise _Bad("input_ids is empty")
    if shape is not None and (len(arrays[0]), len(arrays[3])) != (shape.seq, shape.predictions):
        raise _Bad(f"max_seq_length {len(arrays[0])} and max_predictions_per_seq {len(arrays[3])}, but {shape.first} "
                   f"has {shape.seq} and {shape.predictions}: all records must agree (import each kind on its "
                   "own)")
    return arrays


class _Block:
    """Up to BLOCK_ROWS records of one file, stacked: checked and unpadded together."""

    def __init__(self) -> None:
        self.rows: list[list[np.ndarray]] = []
        self.first = 0  # number of the first record in its file

    def check(self, vocab_size: int, cls_id: int, sep_id: int, vocabulary: str) -> None:
        """Raise _Bad, naming the record (its number in its file, from 1), for the first record of the block
        that is not one of Google's."""
        ids, mask, types, positions, labels, weights, nsp = (np.stack(column) for column in zip(*self.rows,
                                                                                                   strict=True))
        width, slots = ids.shape[1], positions.shape[1]
        ones = mask == 1
        count = ones.sum(axis=1)
        real = np.arange(width) < count[:, None]
        used = weights != 0
        prediction = np.arange(slots) < used.sum(axis=1)[:, None]
        rows = np.arange(len(ids))
        first_id, last_id = ids[rows, 0], ids[rows, np.maximum(count - 1, 0)]
        bad_id = real & ((ids < 0) | (ids >= vocab_size))
        bad_position = prediction & ((positions < 0) | (positions >= count[:, None]))
        placed = np.sort(np.where(prediction, positions, -1 - np.arange(slots)), axis=1)
        bad_label = prediction & ((labels < 0) | (labels >= vocab_size))
        fix = (f"outside the vocabulary of {vocabulary} ({vocab_size} ids): give the vocabulary the records were "
               "made with")

        def first(values: np.ndarray, bad: np.ndarray, r: int) -> int:
            return int(values[r][np.argmax(bad[r])])

        checks: list[tuple[np.ndarray, Callable[[int], str]]] = [
            (((mask != 0) & ~ones).any(axis=1) | (ones != real).any(axis=1) | (count < 2),
             lambda r: "input_mask is not 1 for each token then 0 for the padding (with at least 2 tokens)"),
            (bad_id.any(axis=1), lambda r: f"input id {first(ids, bad_id, r)} is {fix}"),
            ((first_id != cls_id) | (last_id != sep_id),
             lambda r: f"the tokens run from id {first_id[r]} to id {last_id[r]}, not from [CLS] ({cls_id}) to [SEP] "
                       f"({sep_id}) of {vocabulary}: give the vocabulary the records were made with"),
            ((real & (types != 0) & (types != 1)).any(axis=1), lambda r: "segment_ids holds a value other than 0 or 1"),
            (((weights != 0) & (weights != 1)).any(axis=1) | (used != prediction).any(axis=1),
             lambda r: "masked_lm_weights is not 1.0 for each prediction then 0.0 for the padding"),
            (bad_position.any(axis=1),
             lambda r: f"masked_lm_positions holds {first(positions, bad_position, r)}, outside the {count[r]} tokens"),
            (((placed[:, 1:] == placed[:, :-1]) & (placed[:, 1:] >= 0)).any(axis=1),
             lambda r: "masked_lm_positions holds a position twice"),
            (bad_label.any(axis=1), lambda r: f"masked_lm_ids holds {first(labels, bad_label, r)}, {fix}"),
            (((nsp != 0) & (nsp != 1)).any(axis=1),
             lambda r: f"next_sentence_labels is {nsp[r, 0]}, not 0 (IsNext) or 1 (NotNext)"),
        ]
        bad = np.stack([failed for failed, _ in checks])
        if bad.any():
            row = int(np.argmax(bad.any(axis=0)))
            raise _Bad(f"record {self.first + row + 1}: {checks[int(np.argmax(bad[:, row]))][1](row)}")

    def packed(self) -> Packed:
        """The rows without their padding, in Packed's layout (Arrow's list columns)."""
        ids, mask, types, positions, labels, weights, nsp = (np.stack(column) for column in zip(*self.rows,
                                                                                                   strict=True))
        real, used = mask == 1, weights != 0
        count = real.sum(axis=1)
        return Packed(input_ids=ids[real].astype(np.int32), offsets=np.concatenate([[0], np.cumsum(count)]),
                      token_type_ids=types[real].astype(np.int8), labels=nsp[:, 0].astype(np.int8),
                      short=np.zeros(len(ids), bool), masked_positions=positions[used], masked_ids=labels[used],
                      masked_offsets=np.concatenate([[0], np.cumsum(used.sum(axis=1))]))


def _take(packed: Packed, rows: np.ndarray) -> Packed:
    """The given rows (a boolean mask) of a Packed block."""
    lengths, masked = np.diff(packed.offsets), np.diff(packed.masked_offsets)
    token_rows = np.repeat(rows, lengths)
    masked_rows = np.repeat(rows, masked)
    return Packed(input_ids=packed.input_ids[token_rows], offsets=np.concatenate([[0], np.cumsum(lengths[rows])]),
                  token_type_ids=packed.token_type_ids[token_rows], labels=packed.labels[rows],
                  short=packed.short[rows], masked_positions=packed.masked_positions[masked_rows],
                  masked_ids=packed.masked_ids[masked_rows],
                  masked_offsets=np.concatenate([[0], np.cumsum(masked[rows])]))


def _concat(blocks: list[Packed]) -> Packed:
    def joined(name: str) -> np.ndarray:
        return np.concatenate([getattr(b, name) for b in blocks])

    def offsets(name: str) -> np.ndarray:
        ends = np.cumsum([getattr(b, name)[-1] for b in blocks])
        return np.concatenate([[0], *(getattr(b, name)[1:] + start for b, start in
                                      zip(blocks, [0, *ends[:-1]], strict=True))])

    return Packed(input_ids=joined("input_ids"), offsets=offsets("offsets"), token_type_ids=joined("token_type_ids"),
                  labels=joined("labels"), short=joined("short"), masked_positions=joined("masked_positions"),
                  masked_ids=joined("masked_ids"), masked_offsets=offsets("masked_offsets"))


# --- the import ---------------------------------------------------------------------------------------------

class _Shards:
    """Rows of each split gathered into Arrow files of SHARD_ROWS rows (`corpus build`'s shard files)."""

    def __init__(self, folder: Path, schema: Any, mask_id: int) -> None:
        self.folder, self.schema, self.mask_id = folder, schema, mask_id
        self.pending: dict[str, list[Packed]] = {split: [] for split in SPLITS}
        self.written = dict.fromkeys(SPLITS, 0)  # files so far, per split
        self.stats: dict[int, dict[str, dict[str, int]]] = {}

    def add(self, split: str, packed: Packed) -> None:
        if len(packed.labels):
            self.pending[split].append(packed)
        if sum(len(p.labels) for p in self.pending[split]) >= SHARD_ROWS:
            self.flush(split)

    def flush(self, split: str) -> None:
        if not self.pending[split]:
            return
        packed = _concat(self.pending[split])
        self.pending[split] = []
        index = self.written[split]
        self.written[split] += 1
        write_shard(packed, self.schema, self.folder / shard_file(split, index))
        counts = {"instances": len(packed.labels), **packed_stats(packed, self.mask_id)}
        del counts["short_instances"]  # Google's records do not say which targets were short
        self.stats.setdefault(index, {s: {} for s in SPLITS})[split] = counts


def _check_required(cfg: CorpusImportConfig) -> Path:
    if not cfg.inputs:
        raise UsageError("corpus import: give at least one TFRecord file (tf_examples.tfrecord*)")
    if cfg.tokenizer is None:
        raise UsageError("corpus import: --tokenizer is required: the vocabulary (folder or vocab.txt) the records "
                         "were made with")
    if cfg.out is None:
        raise UsageError("corpus import: --out DIR is required")
    return check_new_out(cfg.out, overwrite=cfg.overwrite)


def _input_files(inputs: tuple[str, ...]) -> list[Path]:
    from bertctl.data.sources import expand_inputs

    files = expand_inputs(list(inputs))
    for source in files:
        if not isinstance(source, Path):
            raise UsageError(f"INPUTS: nothing matched {source!r} (no such file, folder or glob match)")
    return files  # type: ignore[return-value]


def import_corpus(cfg: CorpusImportConfig) -> dict[str, Any]:
    """Write the corpus folder `cfg.out` from Google's pre-training TFRecords and return its manifest."""
    from tqdm.auto import tqdm

    from bertctl.tokenizer_folder import load_tokenizer

    out = _check_required(cfg)
    files = _input_files(cfg.inputs)
    refuse_inputs_inside(out, [*files, cfg.tokenizer], read_whole=cfg.inputs)
    tokenizer = load_tokenizer(cfg.tokenizer, lowercase=cfg.lowercase)
    vocabulary = str(cfg.tokenizer)
    params = {k: v for k, v in config_to_dict(cfg).items() if k not in _EXECUTION_ONLY}
    key = settings_digest({"import": params, "tokenizer_sha256": tokenizer.sha256(),
                   "inputs": [[str(f.resolve()), f.stat().st_size] for f in files], "bertctl": __version__})
    partial = open_partial(out, key)
    try:
        schema = corpus_schema(tokenizer.vocab_size, sentence_labels=True, static=True)
        shards = _Shards(partial / "shards", schema, tokenizer.mask_id)
        shape: _Shape | None = None
        inputs, seen = [], 0
        bar = tqdm(desc="corpus import", total=sum(f.stat().st_size for f in files) or None, unit="B",
                   unit_scale=True, unit_divisor=1000, dynamic_ncols=True)
        with bar:
            done = 0
            for path in files:
                records, shape, source, compression = _import_file(
                    path, shards, shape, seen, cfg, tokenizer, vocabulary,
                    lambda count, read, done=done: (bar.update(max(0, done + read - bar.n)),
                                         bar.set_postfix(records=f"{count:,}", refresh=False)))
                seen += records
                done += source.count
                inputs.append({"path": str(path), "bytes": source.count, "sha256": source.digest.hexdigest(),
                               "compression": compression, "records": records})
        for split in SPLITS:
            shards.flush(split)
        counts = _counts(shards.stats, seen, cfg)
        manifest = {
            "format": FORMAT, "format_version": FORMAT_VERSION, "bertctl_version": __version__,
            "source": "google-tfrecord", "objective": "mlm+nsp", "masking": "static",
            "max_seq_length": shape.seq if shape else None, "masked_lm_prob": None,
            "max_predictions_per_seq": shape.predictions if shape else None, "whole_word_masking": None,
            "short_seq_prob": None, "dupe_factor": None, "seed": None, "validation_fraction": cfg.validation_fraction,
            "tokenizer_sha256": tokenizer.sha256(), "tokenizer_settings": encoding_settings(tokenizer),
            "vocab_size": tokenizer.vocab_size,
            "special_ids": {"pad": tokenizer.pad_id, "unk": tokenizer.unk_id, "cls": tokenizer.cls_id,
                            "sep": tokenizer.sep_id, "mask": tokenizer.mask_id},
            "splits": [s for s in SPLITS if counts[s]["instances"]], "counts": counts,
            "inputs": inputs, "skipped": [], "config": params,
        }
        assemble_corpus(partial, schema, shards.stats, manifest["splits"], key)
        tokenizer.save(partial / "corpus" / "tokenizer")
        write_json_atomic(partial / "corpus" / "manifest.json", manifest)
        publish_corpus(partial, out)
    except BaseException:  # nothing to resume: an import is one pass
        remove_partial(partial)
        raise
    return manifest


def _import_file(path: Path, shards: _Shards, shape: _Shape | None, seen: int, cfg: CorpusImportConfig,
                 tokenizer: Any, vocabulary: str, progress: Callable[[int, int], Any]
                 ) -> tuple[int, _Shape | None, _Hashed, str | None]:
    """Every record of one file into the shards; returns (records, shape, the hashed reader, compression)."""
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise BertctlError(f"cannot read {path}: {exc.strerror or exc}") from None
    with handle:
        compression = _compression(handle.read(12))
        handle.seek(0)
        source = _Hashed(handle)
        block, number = _Block(), 0

        def finish() -> None:
            block.check(tokenizer.vocab_size, tokenizer.cls_id, tokenizer.sep_id, vocabulary)
            packed = block.packed()
            held = np.array([is_validation(seen + block.first + i, cfg.validation_fraction)
                             for i in range(len(block.rows))], bool)
            shards.add("train", _take(packed, ~held) if held.any() else packed)
            if held.any():
                shards.add("validation", _take(packed, held))
            progress(seen + number, source.count)

        try:
            for data in read_records(path, source, compression):
                try:
                    features = parse_example(data)
                except (IndexError, ValueError, struct.error):
                    raise _Bad("not a tf.train.Example (Google's pre-training records are)") from None
                arrays = _record_arrays(features, shape)
                if shape is None:
                    shape = _Shape(len(arrays[0]), len(arrays[3]), f"{path} record {number + 1}")
                    _check_shape(shape, cfg)
                block.rows.append(arrays)
                number += 1
                if len(block.rows) == BLOCK_ROWS:
                    finish()
                    block = _Block()
                    block.first = number
            if block.rows:
                finish()
        except _Bad as exc:
            said = str(exc)
            where = f"record {number + 1}: " if not said.startswith("record ") else ""
            raise UsageError(f"corpus import: {path}: {where}{said}; nothing was written") from None
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise UsageError(f"corpus import: {path}: record {number + 1}: the {compression or 'compressed'} data "
                             f"is truncated or corrupt ({exc}); nothing was written") from None
        except OSError as exc:
            raise BertctlError(f"cannot read {path}: {exc.strerror or exc}") from None
    return number, shape, source, compression


def _check_shape(shape: _Shape, cfg: CorpusImportConfig) -> None:
    """The records' length against the positions the tokenizer (or model) folder declares, as `corpus build`."""
    if shape.seq > 65535:
        raise _Bad(f"max_seq_length {shape.seq} is past what a corpus stores (65535)")
    try:
        check_length(shape.seq, Path(str(cfg.tokenizer)))
    except UsageError as exc:
        raise _Bad(f"the records hold {shape.seq} tokens (max_seq_length), "
                   f"{str(exc).split(' is ', 1)[-1]}") from None


def _counts(stats: dict[int, dict[str, dict[str, int]]], seen: int, cfg: CorpusImportConfig
            ) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = {split: {} for split in SPLITS}
    for index in sorted(stats):
        for split in SPLITS:
            for name, value in stats[index][split].items():
                counts[split][name] = counts[split].get(name, 0) + value
    for split in SPLITS:
        counts[split].setdefault("instances", 0)
    if not seen:
        raise UsageError(f"corpus import: the inputs hold no records ({' '.join(cfg.inputs)})")
    if not counts["train"]["instances"]:
        raise UsageError(f"corpus import: no training records of {seen} ({counts['validation']['instances']} held out "
                         "by --validation-fraction); lower --validation-fraction")
    if cfg.validation_fraction > 0 and not counts["validation"]["instances"]:
        raise UsageError("corpus import: --validation-fraction held out no record")
    return counts
