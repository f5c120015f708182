"""`bertctl corpus import`: the TFRecord files of Google's create_pretraining_data.py, or the HDF5 shards of NVIDIA's
(DeepLearningExamples' PyTorch BERT; bertctl/data/hdf5.py), as a bertctl corpus.

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

An HDF5 shard (found by HDF5's signature, whatever its name) gives the same rows: its predictions are the slots
before the first 0 position, as NVIDIA's loader takes them, so they stand in for Google's masked_lm_weights and
the same checks apply. It is hashed in one sequential pass, then read a block of rows at a time.
"""

from __future__ import annotations

import dataclasses
import gzip
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bertctl import __version__
from bertctl.config import CorpusImportConfig, config_to_dict
from bertctl.corpus import (
    check_length,
    check_required,
    open_partial,
    publish_corpus,
    remove_partial,
    settings_digest,
)
from bertctl.data.hdf5 import BadShard, ShardReader, is_hdf5, predictions_used, require_h5py
from bertctl.data.instances import (
    SPLITS,
    Packed,
    corpus_schema,
    is_validation,
    packed_stats,
    shard_file,
    write_shard,
)
from bertctl.data.tfrecord import (
    BYTES,
    FLOAT,
    INT64,
    BadRecord,
    HashedReader,
    compression_of,
    feature_column,
    parse_example,
    read_records,
)
from bertctl.errors import BertctlError, UsageError
from bertctl.files import file_sha256, refuse_inputs_inside

__all__ = ["FEATURES", "import_corpus"]

_EXECUTION_ONLY = ("out", "overwrite")  # never change the corpus
_KIND_NAMES = {BYTES: "bytes_list", FLOAT: "float_list", INT64: "int64_list", 0: "empty Feature"}
FEATURES = {"input_ids": INT64, "input_mask": INT64, "segment_ids": INT64, "masked_lm_positions": INT64,
            "masked_lm_ids": INT64, "masked_lm_weights": FLOAT, "next_sentence_labels": INT64}
_SEQUENCE = ("input_ids", "input_mask", "segment_ids")  # max_seq_length values each
_PREDICTIONS = ("masked_lm_positions", "masked_lm_ids", "masked_lm_weights")  # max_predictions_per_seq each
BLOCK_ROWS = 4096  # records checked and converted together
SHARD_TOKENS = 6_400_000  # tokens per Arrow file (50,000 rows at 128 tokens, about 25 MB): a phase-2 import at 512
# tokens holds as much in memory as a phase-1 one


# --- records -> rows ---------------------------------------------------------------------------------------

@dataclasses.dataclass
class _Shape:
    """max_seq_length and max_predictions_per_seq, as the first record has them."""

    seq: int
    predictions: int
    first: str  # where they were read


def _record_items(features: dict[str, tuple[int, list[int | bytes], int]], shape: _Shape | None
                  ) -> list[list[int | bytes]]:
    """The seven features' items after the per-record checks (present, of Google's kinds and lengths)."""
    missing = [name for name in FEATURES if name not in features]
    if missing:
        names = [name if name.isprintable() else ascii(name) for name in sorted(features)]  # one line, as stored
        has = ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "") if names else "none"
        hint = " (run_classifier's fine-tuning examples?)" if "label_ids" in features else ""
        raise BadRecord(f"not a pre-training example of Google's create_pretraining_data.py{hint}: no "
                        f"{', '.join(missing)} (its features: {has})")
    for name, kind in FEATURES.items():
        if features[name][0] != kind and features[name][2]:
            raise BadRecord(f"feature {name} is a {_KIND_NAMES[features[name][0]]}, Google's is a {_KIND_NAMES[kind]}")
    counts = [features[name][2] for name in FEATURES]
    for group in (_SEQUENCE, _PREDICTIONS):
        lengths = {name: features[name][2] for name in group}
        if len(set(lengths.values())) > 1:
            raise BadRecord("features of unequal lengths: " + ", ".join(f"{k} {v}" for k, v in lengths.items()))
    if counts[-1] != 1:
        raise BadRecord(f"next_sentence_labels holds {counts[-1]} values, not 1")
    if not counts[0]:
        raise BadRecord("input_ids is empty")
    if shape is not None and (counts[0], counts[3]) != (shape.seq, shape.predictions):
        raise BadRecord(f"max_seq_length {counts[0]} and max_predictions_per_seq {counts[3]}, but {shape.first} "
                        f"has {shape.seq} and {shape.predictions}: all records must agree (import each kind on its "
                        "own)")
    return [features[name][1] for name in FEATURES]


class _Block:
    """Up to BLOCK_ROWS records of one file, stacked: checked and unpadded together."""

    def __init__(self, first: int = 0, noun: str = "record") -> None:
        self.rows: list[list[list[int | bytes]]] = []  # per record, each feature's items (_record_items)
        self.first = first  # number of the first record in its file
        self.noun = noun  # what an error calls one: a TFRecord's record, an HDF5 shard's row

    def columns(self, shape: _Shape) -> list[np.ndarray]:
        """The seven features of every record, stacked: [records, max_seq_length or max_predictions_per_seq]."""
        widths = [shape.seq] * 3 + [shape.predictions] * 3 + [1]
        return [feature_column(kind, list(records), width) for kind, records, width in
                zip(FEATURES.values(), zip(*self.rows, strict=True), widths, strict=True)]

    def check(self, columns: list[np.ndarray], vocab_size: int, cls_id: int, sep_id: int, vocabulary: str,
              extra: tuple[tuple[np.ndarray, Callable[[int], str]], ...] = ()) -> None:
        """Raise BadRecord, naming the record (its number in its file, from 1), for the first record of the block
        that is not one of Google's (or fails an `extra` check: which records fail, and what to say)."""
        ids, mask, types, positions, labels, weights, nsp = columns
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
            *extra,
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
            raise BadRecord(f"{self.noun} {self.first + row + 1}: {checks[int(np.argmax(bad[:, row]))][1](row)}")

    @staticmethod
    def packed(columns: list[np.ndarray]) -> Packed:
        """The rows without their padding, in Packed's layout (Arrow's list columns)."""
        ids, mask, types, positions, labels, weights, nsp = columns
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
    """Rows of each split gathered into Arrow files of about SHARD_TOKENS tokens (`corpus build`'s shard files)."""

    def __init__(self, folder: Path, schema: Any, mask_id: int) -> None:
        self.folder, self.schema, self.mask_id = folder, schema, mask_id
        self.pending: dict[str, list[Packed]] = {split: [] for split in SPLITS}
        self.written = dict.fromkeys(SPLITS, 0)  # files so far, per split
        self.stats: dict[int, dict[str, dict[str, int]]] = {}

    def add(self, split: str, packed: Packed) -> None:
        if len(packed.labels):
            self.pending[split].append(packed)
        if sum(len(p.input_ids) for p in self.pending[split]) >= SHARD_TOKENS:
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


def _input_files(inputs: tuple[str, ...]) -> list[Path]:
    from bertctl.data.sources import expand_inputs

    files = expand_inputs(list(inputs))
    for source in files:
        if not isinstance(source, Path):
            raise UsageError(f"INPUTS: nothing matched {source!r} (no such file, folder or glob match)")
    return files  # type: ignore[return-value]


def import_corpus(cfg: CorpusImportConfig) -> dict[str, Any]:
    """Write the corpus folder `cfg.out` from Google's pre-training TFRecords (or NVIDIA's HDF5 shards) and return
    its manifest."""
    from tqdm.auto import tqdm

    from bertctl.tokenizer_folder import load_tokenizer

    out = check_required(cfg, "corpus import", "TFRecord file (tf_examples.tfrecord*) or HDF5 shard (*.hdf5)",
                         "the vocabulary (folder or vocab.txt) the records were made with")
    files = _input_files(cfg.inputs)
    hdf5 = _are_hdf5(files)
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
                records, shape, stored = (_import_hdf5 if hdf5 else _import_file)(
                    path, shards, shape, seen, cfg, tokenizer, vocabulary,
                    lambda count, read, done=done: (bar.update(max(0, done + read - bar.n)),
                                         bar.set_postfix(records=f"{count:,}", refresh=False)))
                seen += records
                done += stored["bytes"]
                inputs.append({"path": str(path), **stored, "records": records})
        for split in SPLITS:
            shards.flush(split)
        counts = _counts(shards.stats, seen, cfg)
        settings = {
            "source": "nvidia-hdf5" if hdf5 else "google-tfrecord", "objective": "mlm+nsp", "masking": "static",
            "max_seq_length": shape.seq if shape else None, "masked_lm_prob": None,
            "max_predictions_per_seq": shape.predictions if shape else None, "whole_word_masking": None,
            "short_seq_prob": None, "dupe_factor": None, "seed": None, "validation_fraction": cfg.validation_fraction}
        manifest = publish_corpus(partial, out, tokenizer, schema, shards.stats, key, counts, settings,
                                  {"inputs": inputs, "skipped": [], "config": params})
    except BaseException:  # nothing to resume: an import is one pass
        remove_partial(partial)
        raise
    return manifest


def _import_file(path: Path, shards: _Shards, shape: _Shape | None, seen: int, cfg: CorpusImportConfig,
                 tokenizer: Any, vocabulary: str, progress: Callable[[int, int], Any]
                 ) -> tuple[int, _Shape | None, dict[str, Any]]:
    """Every record of one TFRecord file into the shards; returns (records, shape, what the manifest says of the
    file as stored)."""
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise BertctlError(f"cannot read {path}: {exc.strerror or exc}") from None
    with handle:
        compression = compression_of(handle.read(12))
        handle.seek(0)
        source = HashedReader(handle)
        block, number = _Block(), 0

        def finish() -> None:
            columns = block.columns(shape)  # type: ignore[arg-type] # set by the first record
            block.check(columns, tokenizer.vocab_size, tokenizer.cls_id, tokenizer.sep_id, vocabulary)
            _add_rows(shards, block.packed(columns), seen + block.first, cfg.validation_fraction)
            progress(seen + number, source.count)

        def earlier_problem() -> BadRecord | None:
            """A bad record among those read before the one that failed (their block was not checked yet): the
            first bad record is the one to name."""
            if not block.rows or shape is None:
                return None
            try:
                block.check(block.columns(shape), tokenizer.vocab_size, tokenizer.cls_id, tokenizer.sep_id,
                            vocabulary)
            except BadRecord as problem:
                return problem
            return None

        try:
            for data in read_records(path, source, compression):
                try:
                    features = parse_example(data)
                except (IndexError, ValueError, struct.error):
                    raise BadRecord("not a tf.train.Example (Google's pre-training records are)") from None
                items = _record_items(features, shape)
                if shape is None:
                    shape = _Shape(features["input_ids"][2], features["masked_lm_positions"][2],
                                   f"{path} record {number + 1}")
                    _check_shape(shape, cfg)
                block.rows.append(items)
                number += 1
                if len(block.rows) == BLOCK_ROWS:
                    finish()
                    block = _Block()
                    block.first = number
            if block.rows:
                finish()
        except BadRecord as exc:
            said = str(earlier_problem() or exc)
            where = f"record {number + 1}: " if not said.startswith("record ") else ""
            raise UsageError(f"corpus import: {path}: {where}{said}; nothing was written") from None
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            said = str(earlier_problem() or f"record {number + 1}: the {compression or 'compressed'} data is "
                                            f"truncated or corrupt ({exc})")
            raise UsageError(f"corpus import: {path}: {said}; nothing was written") from None
        except OSError as exc:
            raise BertctlError(f"cannot read {path}: {exc.strerror or exc}") from None
    return number, shape, {"bytes": source.count, "sha256": source.digest.hexdigest(), "compression": compression}


def _add_rows(shards: _Shards, packed: Packed, first: int, validation_fraction: float) -> None:
    """A block's rows into the training and validation shards; `first` numbers its first row over all inputs."""
    held = np.array([validation_fraction > 0 and is_validation(first + i, validation_fraction)
                     for i in range(len(packed.labels))], bool)
    shards.add("train", _take(packed, ~held) if held.any() else packed)
    if held.any():
        shards.add("validation", _take(packed, held))


# --- NVIDIA's HDF5 shards -----------------------------------------------------------------------------------

def _are_hdf5(files: list[Path]) -> bool:
    """Whether the inputs are HDF5 shards (by their signature) rather than TFRecord files; a mix is refused, and
    HDF5 shards without h5py installed."""
    kinds = []
    for path in files:
        try:
            kinds.append(is_hdf5(path))
        except OSError as exc:
            raise BertctlError(f"cannot read {path}: {exc.strerror or exc}") from None
    if any(kinds) and not all(kinds):
        shard, record = files[kinds.index(True)], files[kinds.index(False)]
        raise UsageError(f"corpus import: INPUTS mix HDF5 shards ({shard}) and TFRecord files ({record}); import "
                         "each kind into a corpus of its own")
    if kinds and kinds[0]:
        require_h5py(files[0])
    return bool(kinds) and kinds[0]


def _import_hdf5(path: Path, shards: _Shards, shape: _Shape | None, seen: int, cfg: CorpusImportConfig,
                 tokenizer: Any, vocabulary: str, progress: Callable[[int, int], Any]
                 ) -> tuple[int, _Shape | None, dict[str, Any]]:
    """Every row of one of NVIDIA's HDF5 shards into the shards, a block at a time; returns (rows, shape, what the
    manifest says of the file as stored)."""
    try:
        size, digest = path.stat().st_size, file_sha256(path)
    except OSError as exc:
        raise BertctlError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        with ShardReader(path) as shard:
            layout = shard.layout()
            shape = _agreed(shape, layout.seq, layout.predictions, f"{path} row 1", cfg)
            for start, (ids, mask, types, positions, labels, nsp) in shard.blocks(BLOCK_ROWS):
                used = predictions_used(positions)
                columns = [ids, mask, types, positions, labels, used.astype(np.float32), nsp]
                after = (~used & ((positions != 0) | (labels != 0))).any(axis=1)
                _Block(start, "row").check(columns, tokenizer.vocab_size, tokenizer.cls_id, tokenizer.sep_id,
                                           vocabulary, extra=((after, lambda r: _AFTER_PADDING),))
                _add_rows(shards, _Block.packed(columns), seen + start, cfg.validation_fraction)
                progress(seen + start + len(ids), size * (start + len(ids)) // layout.rows)
    except (BadShard, BadRecord) as exc:
        raise UsageError(f"corpus import: {path}: {exc}; nothing was written") from None
    return layout.rows, shape, {"bytes": size, "sha256": digest, "compression": layout.compression}


_AFTER_PADDING = ("masked_lm_positions or masked_lm_ids is not 0 after the first 0 position (the padding NVIDIA's "
                  "loader stops at): not a shard of NVIDIA's writer")


def _agreed(shape: _Shape | None, seq: int, predictions: int, where: str, cfg: CorpusImportConfig) -> _Shape:
    """The shape of the first shard (checked against the tokenizer), or the same one again."""
    if shape is None:
        shape = _Shape(seq, predictions, where)
        _check_shape(shape, cfg)
    elif (seq, predictions) != (shape.seq, shape.predictions):
        raise BadRecord(f"max_seq_length {seq} and max_predictions_per_seq {predictions}, but {shape.first} has "
                        f"{shape.seq} and {shape.predictions}: all rows must agree (import phase 1 and phase 2 "
                        "shards into corpora of their own)")
    return shape


def _check_shape(shape: _Shape, cfg: CorpusImportConfig) -> None:
    """The records' length against the positions the tokenizer (or model) folder declares, as `corpus build`."""
    if shape.seq > 65535:
        raise BadRecord(f"max_seq_length {shape.seq} is past what a corpus stores (65535)")
    try:
        check_length(shape.seq, Path(str(cfg.tokenizer)))
    except UsageError as exc:
        raise BadRecord(f"its rows hold {shape.seq} tokens (max_seq_length), "
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
