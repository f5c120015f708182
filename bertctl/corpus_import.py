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

With several workers (`--workers`), whole files are imported at once, each into Arrow files of its own (numbered
file-major, so one worker writes the same ones): validation rows are chosen by their number over all files, so
each file is counted first (`_counted_jobs`: far cheaper than reading it) to give its worker the number of its first
row. bertctl/file_pool.py runs them, and reports the first bad file in input order.
"""

from __future__ import annotations

import dataclasses
import gzip
import struct
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from bertctl import __version__
from bertctl.config import CorpusImportConfig, usable_cores
from bertctl.config_records import config_to_dict
from bertctl.config_types import take_config
from bertctl.corpus import (
    check_length,
    check_required,
    open_partial,
    path_free,
    publish_corpus,
    remove_partial,
    settings_digest,
)
from bertctl.data.hdf5 import BadShard, ShardReader, is_hdf5, predictions_used, require_h5py
from bertctl.data.instances import Packed
from bertctl.data.pretraining_records import RecordBlock, Shape, concat_packed, record_items, take_rows
from bertctl.data.shards import SPLITS, corpus_schema, is_validation, packed_stats, shard_file, write_shard
from bertctl.data.tfrecord import (
    BadRecord,
    HashedReader,
    compression_of,
    count_records,
    parse_example,
    read_records,
)
from bertctl.errors import BertctlError, UsageError
from bertctl.file_pool import run_files
from bertctl.files import file_sha256, refuse_inputs_inside
from bertctl.output_locks import output_lock

__all__ = ["import_corpus"]

_EXECUTION_ONLY = ("out", "overwrite", "workers")  # where and how: never change the corpus's bytes
BLOCK_ROWS = 4096  # records checked and converted together
SHARDS_PER_INPUT = 1_000_000  # Arrow file numbers each input file has (6.4e12 tokens): file-major numbering
SHARD_TOKENS = 6_400_000  # tokens per Arrow file (50,000 rows at 128 tokens, about 25 MB): a phase-2 import at 512
# tokens holds as much in memory as a phase-1 one


# --- the import ---------------------------------------------------------------------------------------------

class _Shards:
    """Rows of each split gathered into Arrow files of about SHARD_TOKENS tokens (`corpus build`'s shard files),
    numbered from `first`: one input file's, so that workers write theirs at once and in input order."""

    def __init__(self, folder: Path, schema: Any, mask_id: int, first: int, tokens: int) -> None:
        self.folder, self.schema, self.mask_id, self.tokens = folder, schema, mask_id, tokens
        self.pending: dict[str, list[Packed]] = {split: [] for split in SPLITS}
        self.written = dict.fromkeys(SPLITS, first)  # the next file's number, per split
        self.stats: dict[int, dict[str, dict[str, int]]] = {}

    def add(self, split: str, packed: Packed) -> None:
        if len(packed.labels):
            self.pending[split].append(packed)
        if sum(len(p.input_ids) for p in self.pending[split]) >= self.tokens:
            self.flush(split)

    def flush(self, split: str) -> None:
        if not self.pending[split]:
            return
        packed = concat_packed(self.pending[split])
        self.pending[split] = []
        index = self.written[split]
        self.written[split] += 1
        write_shard(packed, self.schema, self.folder / shard_file(split, index))
        counts = {"instances": len(packed.labels), **packed_stats(packed, self.mask_id)}
        del counts["short_instances"]  # Google's records do not say which targets were short
        self.stats.setdefault(index, {s: {} for s in SPLITS})[split] = counts


@dataclasses.dataclass(frozen=True)
class _Vocabulary:
    """What the checks and the statistics need of the tokenizer: a worker gets this, not the tokenizer."""

    vocab_size: int
    cls_id: int
    sep_id: int
    mask_id: int
    name: str  # as given (--tokenizer), for the messages


@dataclasses.dataclass(frozen=True)
class _FileJob:
    """One input file and all a worker needs to import it (small and picklable)."""

    index: int  # its place among the inputs: its Arrow files are numbered from index * SHARDS_PER_INPUT
    path: Path
    first_row: int  # the number of its first row over all inputs (validation rows are chosen by it)
    shape: Shape | None  # the shape an earlier file set; None: this file's first record sets it
    hdf5: bool
    folder: Path  # where its Arrow files go
    vocabulary: _Vocabulary
    cfg: CorpusImportConfig
    block_rows: int = BLOCK_ROWS  # the sizes, as the main process has them
    shard_tokens: int = SHARD_TOKENS
    counted: int | None = None  # its rows as counted before the import (-1: counting failed; None: not counted)


@dataclasses.dataclass(frozen=True)
class _FileResult:
    rows: int
    shape: Shape | None
    stored: dict[str, Any]  # what the manifest says of the file as stored: bytes, sha256, compression
    stats: dict[int, dict[str, dict[str, int]]]  # its Arrow files' counts, by number


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
    take_config("import_corpus", cfg, CorpusImportConfig)
    out = check_required(cfg, "corpus import", "TFRecord file (tf_examples.tfrecord*) or HDF5 shard (*.hdf5)",
                         "the vocabulary (folder or vocab.txt) the records were made with")
    with output_lock(out):  # OUT and OUT.partial/
        return _import(cfg, out)


def _import(cfg: CorpusImportConfig, out: Path) -> dict[str, Any]:
    from bertctl.data.read_bar import ReadBar
    from bertctl.tokenizer_folder import load_tokenizer

    files = _input_files(cfg.inputs)
    hdf5 = _are_hdf5(files)
    refuse_inputs_inside(out, [*files, cfg.tokenizer], read_whole=cfg.inputs)
    tokenizer = load_tokenizer(cfg.tokenizer, lowercase=cfg.lowercase)
    params = {k: v for k, v in config_to_dict(cfg).items() if k not in _EXECUTION_ONLY}
    key = settings_digest({"import": params, "tokenizer_sha256": tokenizer.sha256(),
                           "inputs": [[str(f.resolve()), f.stat().st_size] for f in files], "bertctl": __version__})
    partial = open_partial(out, key)
    try:
        vocabulary = _Vocabulary(tokenizer.vocab_size, tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id,
                                 str(cfg.tokenizer))
        template = _FileJob(0, Path(), 0, None, hdf5, partial / "shards", vocabulary, cfg, BLOCK_ROWS,
                            SHARD_TOKENS)
        bar = ReadBar("corpus import", sum(f.stat().st_size for f in files))

        def progress(rows: int, read: int) -> None:
            bar.update(max(0, read - bar.n))
            bar.set_postfix(records=f"{rows:,}", refresh=False)

        workers = _worker_count(cfg.workers, len(files))
        with bar:
            results = _import_in_order(files, template, progress) if workers == 1 else run_files(
                _import_one, _counted_jobs(files, template), workers, len(files), progress, "corpus import")
        stats = {index: shard for result in results for index, shard in result.stats.items()}
        seen = sum(result.rows for result in results)
        counts = _counts(stats, seen, cfg)
        shape = next((result.shape for result in results if result.shape), None)
        settings = {
            "source": "nvidia-hdf5" if hdf5 else "google-tfrecord", "objective": "mlm+nsp", "masking": "static",
            "max_seq_length": shape.seq if shape else None, "masked_lm_prob": None,
            "max_predictions_per_seq": shape.predictions if shape else None, "whole_word_masking": None,
            "short_seq_prob": None, "dupe_factor": None, "seed": None, "validation_fraction": cfg.validation_fraction}
        inputs = [{"path": str(path), **result.stored, "records": result.rows}
                  for path, result in zip(files, results, strict=True)]
        schema = corpus_schema(tokenizer.vocab_size, sentence_labels=True, static=True)
        manifest = publish_corpus(partial, out, tokenizer, schema, stats, _content_key(params, tokenizer, inputs),
                                  counts, settings, {"inputs": inputs, "skipped": [], "config": params},
                                  cfg.overwrite)
    except BaseException:  # nothing to resume: an import is one pass
        remove_partial(partial)
        raise
    return manifest


def _content_key(params: dict[str, Any], tokenizer: Any, inputs: list[dict[str, Any]]) -> str:
    """The key of the Arrow files' fingerprints (state.json): the settings, the vocabulary and the inputs' sha256,
    never the paths they were given by, so the same import from another working folder writes the same bytes."""
    settings, contents = path_free(params, inputs)
    return settings_digest({"import": settings, "tokenizer_sha256": tokenizer.sha256(), "inputs": contents,
                            "bertctl": __version__})


def _worker_count(workers: int, files: int) -> int:
    if not workers:
        workers = usable_cores()
    return max(1, min(workers, files))


def _import_in_order(files: list[Path], template: _FileJob, progress: Callable[[int, int], None]
                     ) -> list[_FileResult]:
    """One file after another in this process (one worker): each starts where the one before it ended."""
    results: list[_FileResult] = []
    rows, read, shape = 0, 0, None
    for index, path in enumerate(files):
        job = dataclasses.replace(template, index=index, path=path, first_row=rows, shape=shape)
        result = _import_one(job, lambda done, at, rows=rows, read=read: progress(rows + done, read + at))
        results.append(result)
        rows, read, shape = rows + result.rows, read + result.stored["bytes"], shape or result.shape
    return results


def _counted_jobs(files: list[Path], template: _FileJob) -> Iterator[_FileJob]:
    """The files as jobs for workers, each with the number of its first row, counted file by file as the workers
    run (TFRecords: their framing; HDF5: their datasets' shape), and the shape the first record sets. A file that
    cannot be counted is the last job: its own import says what is wrong with it, after any earlier file's
    problem, and no file after it matters."""
    rows, shape = 0, template.shape
    for index, path in enumerate(files):
        job = dataclasses.replace(template, index=index, path=path, first_row=rows, shape=shape)
        try:
            counted, own = _count(job)
            shape = shape or own
        except (BadRecord, BadShard, BertctlError, EOFError, zlib.error, gzip.BadGzipFile, OSError, ValueError,
                IndexError, struct.error):
            yield dataclasses.replace(job, counted=-1)
            return
        yield dataclasses.replace(job, counted=counted)
        rows += counted


def _count(job: _FileJob) -> tuple[int, Shape | None]:
    """A file's rows and, when no earlier file set it, the shape its first row sets (checked as the import checks
    it)."""
    if job.hdf5:
        with ShardReader(job.path) as shard:
            layout = shard.layout()
        return layout.rows, _agreed(job.shape, layout.seq, layout.predictions, f"{job.path} row 1", job.cfg)
    records, first = count_records(job.path)
    if job.shape is not None or first is None:
        return records, None
    features = parse_example(first)
    record_items(features, None)
    shape = Shape(features["input_ids"][2], features["masked_lm_positions"][2], f"{job.path} record 1")
    _check_shape(shape, job.cfg)
    return records, shape


def _import_one(job: _FileJob, progress: Callable[[int, int], None]) -> _FileResult:
    """One input file into its Arrow files (in a worker, or in the main process with one worker)."""
    schema = corpus_schema(job.vocabulary.vocab_size, sentence_labels=True, static=True)
    shards = _Shards(job.folder, schema, job.vocabulary.mask_id, job.index * SHARDS_PER_INPUT, job.shard_tokens)
    rows, shape, stored = (_import_hdf5 if job.hdf5 else _import_file)(job, shards, progress)
    for split in SPLITS:
        shards.flush(split)
    if job.counted is not None and job.counted != rows:
        raise BertctlError(f"corpus import: {job.path} changed while it was imported (its rows were counted, then "
                           "read again); rerun once nothing writes to it")
    return _FileResult(rows, shape, stored, shards.stats)


@dataclasses.dataclass
class _FileRead:
    """How far the reading of one TFRecord file has got: its shape (once a first record set it), the records read,
    and the block of them not yet checked and stored."""

    shape: Shape | None
    number: int = 0
    block: RecordBlock = dataclasses.field(default_factory=RecordBlock)


def _import_file(job: _FileJob, shards: _Shards, progress: Callable[[int, int], Any]
                 ) -> tuple[int, Shape | None, dict[str, Any]]:
    """Every record of one TFRecord file into the shards; returns (records, shape, what the manifest says of the
    file as stored)."""
    path = job.path
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    with handle:
        compression = compression_of(handle.read(12))
        handle.seek(0)
        source = HashedReader(handle)
        read = _FileRead(job.shape)
        try:
            _read_blocks(job, read, read_records(source, compression),
                         lambda: _store_block(job, read, shards, progress, source))
        except BadRecord as exc:
            said = str(_earlier_problem(job, read) or exc)
            where = f"record {read.number + 1}: " if not said.startswith("record ") else ""
            raise UsageError(f"corpus import: {path}: {where}{said}{_hdf5_named(path, read.number)}; nothing was "
                             "written") from None
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            said = str(_earlier_problem(job, read) or f"record {read.number + 1}: the {compression or 'compressed'} "
                                                      f"data is truncated or corrupt ({exc})")
            raise UsageError(f"corpus import: {path}: {said}; nothing was written") from None
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    return read.number, read.shape, {"bytes": source.count, "sha256": source.digest.hexdigest(),
                                     "compression": compression}


def _read_blocks(job: _FileJob, read: _FileRead, records: Iterator[bytes], store: Callable[[], None]) -> None:
    """The records a block at a time: each full block (and the last one) is stored before the next is read."""
    for data in records:
        read.block.rows.append(_record_items(job, read, data))
        read.number += 1
        if len(read.block.rows) == job.block_rows:
            store()
            read.block = RecordBlock()
            read.block.first = read.number
    if read.block.rows:
        store()


def _record_items(job: _FileJob, read: _FileRead, data: bytes) -> list[list[int | bytes]]:
    """One record's feature items; the file's first record sets the shape (when no earlier file did), checked
    against the tokenizer."""
    try:
        features = parse_example(data)
    except (IndexError, ValueError, struct.error):
        raise BadRecord("not a tf.train.Example (Google's pre-training records are)") from None
    items = record_items(features, read.shape)
    if read.shape is None:
        read.shape = Shape(features["input_ids"][2], features["masked_lm_positions"][2],
                           f"{job.path} record {read.number + 1}")
        _check_shape(read.shape, job.cfg)
    return items


def _store_block(job: _FileJob, read: _FileRead, shards: _Shards, progress: Callable[[int, int], Any],
                 source: HashedReader) -> None:
    """A block checked whole (numpy, not record by record) and added to the shards; the bar moves on."""
    vocab, block = job.vocabulary, read.block
    columns = block.columns(read.shape)  # type: ignore[arg-type] # set by the first record
    block.check(columns, vocab.vocab_size, vocab.cls_id, vocab.sep_id, vocab.name)
    _add_rows(shards, block.packed(columns), job.first_row + block.first, job.cfg.validation_fraction)
    progress(read.number, source.count)


def _earlier_problem(job: _FileJob, read: _FileRead) -> BadRecord | None:
    """A bad record among those read before the one that failed (their block was not checked yet): the first bad
    record is the one to name."""
    vocab = job.vocabulary
    if not read.block.rows or read.shape is None:
        return None
    try:
        read.block.check(read.block.columns(read.shape), vocab.vocab_size, vocab.cls_id, vocab.sep_id, vocab.name)
    except BadRecord as problem:
        return problem
    return None


def _add_rows(shards: _Shards, packed: Packed, first: int, validation_fraction: float) -> None:
    """A block's rows into the training and validation shards; `first` numbers its first row over all inputs."""
    held = np.array([validation_fraction > 0 and is_validation(first + i, validation_fraction)
                     for i in range(len(packed.labels))], bool)
    shards.add("train", take_rows(packed, ~held) if held.any() else packed)
    if held.any():
        shards.add("validation", take_rows(packed, held))


def _hdf5_named(path: Path, records: int) -> str:
    """Why a `.hdf5` file that fails at its first record was read as TFRecords: the kind comes from the signature,
    not the name, so the TFRecord reader's words alone would puzzle the user of a corrupt or cut shard."""
    if records or path.suffix.lower() not in {".hdf5", ".h5", ".hdf"}:
        return ""
    return " (named like an HDF5 shard, it lacks HDF5's signature, so it was read as a TFRecord file)"


# --- NVIDIA's HDF5 shards -----------------------------------------------------------------------------------

def _are_hdf5(files: list[Path]) -> bool:
    """Whether the inputs are HDF5 shards (by their signature) rather than TFRecord files; a mix is refused, and
    HDF5 shards without h5py installed."""
    kinds = []
    for path in files:
        try:
            kinds.append(is_hdf5(path))
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    if any(kinds) and not all(kinds):
        shard, record = files[kinds.index(True)], files[kinds.index(False)]
        raise UsageError(f"corpus import: INPUTS mix HDF5 shards ({shard}) and TFRecord files ({record}); import "
                         "each kind into a corpus of its own")
    if kinds and kinds[0]:
        require_h5py(files[0])
    return bool(kinds) and kinds[0]


def _import_hdf5(job: _FileJob, shards: _Shards, progress: Callable[[int, int], Any]
                 ) -> tuple[int, Shape | None, dict[str, Any]]:
    """Every row of one of NVIDIA's HDF5 shards into the shards, a block at a time; returns (rows, shape, what the
    manifest says of the file as stored)."""
    path, shape, seen, cfg, vocab = job.path, job.shape, job.first_row, job.cfg, job.vocabulary
    try:
        size, digest = path.stat().st_size, file_sha256(path)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        with ShardReader(path) as shard:
            layout = shard.layout()
            shape = _agreed(shape, layout.seq, layout.predictions, f"{path} row 1", cfg)
            for start, (ids, mask, types, positions, labels, nsp) in shard.blocks(job.block_rows):
                used = predictions_used(positions)
                columns = [ids, mask, types, positions, labels, used.astype(np.float32), nsp]
                after = (~used & ((positions != 0) | (labels != 0))).any(axis=1)
                RecordBlock(start, "row").check(columns, vocab.vocab_size, vocab.cls_id, vocab.sep_id, vocab.name,
                                           extra=((after, lambda r: _AFTER_PADDING),))
                _add_rows(shards, RecordBlock.packed(columns), seen + start, cfg.validation_fraction)
                progress(start + len(ids), size * (start + len(ids)) // layout.rows)
    except (BadShard, BadRecord) as exc:
        raise UsageError(f"corpus import: {path}: {exc}; nothing was written") from None
    return layout.rows, shape, {"bytes": size, "sha256": digest, "compression": layout.compression}


_AFTER_PADDING = ("masked_lm_positions or masked_lm_ids is not 0 after the first 0 position (the padding NVIDIA's "
                  "loader stops at): not a shard of NVIDIA's writer")


def _agreed(shape: Shape | None, seq: int, predictions: int, where: str, cfg: CorpusImportConfig) -> Shape:
    """The shape of the first shard (checked against the tokenizer), or the same one again."""
    if shape is None:
        shape = Shape(seq, predictions, where)
        _check_shape(shape, cfg)
    elif (seq, predictions) != (shape.seq, shape.predictions):
        raise BadRecord(f"max_seq_length {seq} and max_predictions_per_seq {predictions}, but {shape.first} has "
                        f"{shape.seq} and {shape.predictions}: all rows must agree (import phase 1 and phase 2 "
                        "shards into corpora of their own)")
    return shape


def _check_shape(shape: Shape, cfg: CorpusImportConfig) -> None:
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
    return counts
