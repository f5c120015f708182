"""Shards of a pre-training corpus, built in the worker processes of `bertctl corpus build`.

`ShardBuilder`: one shard of raw documents -> sentences -> token ids -> instances (bertctl.data.instances;
generators seeded by seed, shard, split, dupe) -> shuffled -> static masks -> one Arrow file per split, plus a
small JSON record (counts, and each file's size and sha256) that marks the shard as done; `finished_shard`
checks a recorded shard before a resumed build reuses it. `with_neighbours` gives a shard whose split holds a
single document samples of the nearest other documents, for its NotNext text.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import json
import os
import threading
import time
import unicodedata
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import accumulate
from pathlib import Path
from typing import Any

import numpy as np

from bertctl.config import CorpusConfig
from bertctl.data.instances import Document, Instances, Packed, document_instances, mask_packed, pack
from bertctl.data.sentences import split_sentences
from bertctl.files import WriteFailed, file_sha256, write_json_atomic, write_text_atomic

__all__ = ["SPLITS", "DamagedShard", "ShardBuilder", "ShardJob", "ShardSettings", "arrow_schema", "build_shard",
           "corpus_schema", "finished_shard", "init_worker", "is_validation", "packed_stats", "shard_file",
           "shard_settings", "with_neighbours", "write_shard"]

SPLITS = ("train", "validation")
ENCODE_BATCH = 4096  # sentences per tokenizers call


def is_validation(document: int, fraction: float) -> bool:
    """Evenly spaced held-out documents (0, 1/F, 2/F ...): no randomness, exactly the asked share. F is taken
    as the decimal it was written as (0.07 is 7/100), so rounding never moves a document (100, not 99)."""
    numerator, denominator = _as_ratio(fraction)
    return numerator > 0 and _ceil_ratio((document + 1) * numerator, denominator) > _ceil_ratio(
        document * numerator, denominator)


@functools.lru_cache(maxsize=8)
def _as_ratio(fraction: float) -> tuple[int, int]:
    exact = Fraction(repr(fraction))
    return exact.numerator, exact.denominator


def _ceil_ratio(numerator: int, denominator: int) -> int:
    return -(-numerator // denominator)


@dataclass(frozen=True)
class ShardJob:
    """Raw text of consecutive documents: what a worker turns into one shard."""

    index: int  # shard number, in input order
    first_document: int  # global index of its first document
    documents: list[list[str]]  # lines of each document
    nbytes: int  # UTF-8 bytes of its text
    read_to: int  # input bytes read (on disk) when the shard was complete, for progress
    # Per split (train, validation): samples (lines) of other documents of that split, given only where the
    # shard holds a single document of the split, so that its NotNext text can come from another document.
    neighbours: tuple[Sequence[list[str]], Sequence[list[str]]] = ((), ())


NEIGHBOURS = 4  # other documents a shard's lone document draws NotNext text from
SAMPLE_CHARS = 128_000  # of each at most (a longer one is sampled in evenly spaced runs of RUN_CHARS)
RUN_CHARS = 8_000  # a run: about 2,000 tokens, several times the longest NotNext segment (509)
MIN_SAMPLE_CHARS = 2_000  # of each at least, however small the shard


def with_neighbours(jobs: Iterable[ShardJob], fraction: float) -> Iterator[ShardJob]:
    """The jobs, where a split of a shard holds a single document, with samples of up to NEIGHBOURS other
    documents of that split: the nearest ones before it, or, for the split's first document (nothing before
    it), the nearest ones after it (that shard is held back until they are read, or the input ends; only the
    first document of a split can wait, so at most one shard per split is held).

    The samples of a shard hold at most half as much text as the shard itself (each neighbour at least
    MIN_SAMPLE_CHARS, at most SAMPLE_CHARS), so tokenising them costs a worker at most about half as much
    again, however small the shards. Only the input decides the samples (never timing or the worker count);
    a shard with two or more documents of a split gets none and is built exactly as before.
    """
    recent: tuple[deque[list[str]], ...] = (deque(maxlen=NEIGHBOURS), deque(maxlen=NEIGHBOURS))
    waiting: list[tuple[ShardJob, list[int]]] = []  # (job, the splits for which it waits for documents)
    taken: dict[int, tuple[list[list[str]], list[list[str]]]] = {}  # the samples given to each job (by index)
    for job in jobs:
        per_split: tuple[list[int], list[int]] = ([], [])
        for i in range(len(job.documents)):
            if _may_hold_tokens(job.documents[i]):  # a document the tokenizer empties is no document
                per_split[is_validation(job.first_document + i, fraction)].append(i)
        for split, members in enumerate(per_split):  # this shard's documents come after the waiting ones
            for i in members[:NEIGHBOURS]:
                for held, splits in waiting:
                    if split in splits and len(taken[held.index][split]) < NEIGHBOURS:
                        taken[held.index][split].append(_sample(job.documents[i]))
        still = []
        for held, splits in waiting:
            if all(len(taken[held.index][split]) >= NEIGHBOURS for split in splits):
                yield _with_samples(held, taken.pop(held.index))
            else:
                still.append((held, splits))
        waiting = still
        samples: tuple[list[list[str]], list[list[str]]] = ([], [])
        wants = []
        for split, members in enumerate(per_split):
            if len(members) == 1:
                samples[split].extend(reversed(recent[split]))  # the nearest first
                if not recent[split]:
                    wants.append(split)
            for i in members[-NEIGHBOURS:]:
                recent[split].append(_sample(job.documents[i]))
        if wants:
            waiting.append((job, wants))
            taken[job.index] = samples
        else:
            yield _with_samples(job, samples)
    for held, _ in waiting:  # the input ended: a split with one document has nothing else to draw from
        yield _with_samples(held, taken.pop(held.index))


def _may_hold_tokens(lines: list[str]) -> bool:
    """False when every character of the document is one BERT's tokenizer drops (control, format, private use,
    unassigned, U+FFFD, white space: Google's clean_text and split): such a document has no token, so it is no
    shard's other document. Checking stops at the first other character, so ordinary text costs nothing."""
    return any(unicodedata.category(char)[0] not in "CZ" and char != "\ufffd" for line in lines for char in line)


def _with_samples(job: ShardJob, samples: tuple[list[list[str]], list[list[str]]]) -> ShardJob:
    """The job with its neighbours' samples, cut to at most half its own text between them."""
    fitted = []
    for split in samples:
        chars = max(MIN_SAMPLE_CHARS, min(SAMPLE_CHARS, job.nbytes // (2 * max(1, len(split)))))
        fitted.append([_sample(lines, chars) for lines in split])
    return dataclasses.replace(job, neighbours=(fitted[0], fitted[1]))


def _sample(lines: list[str], chars: int = SAMPLE_CHARS) -> list[str]:
    """A document's lines when they hold at most `chars` characters; else runs of text (of about RUN_CHARS,
    or one of `chars`) at evenly spaced points of it, `chars` in all (a line longer than a run is cut at
    spaces)."""
    sizes = [len(line) + 1 for line in lines]
    total = sum(sizes)
    if total <= chars:
        return lines
    runs = max(1, chars // RUN_CHARS)
    run, sample = chars // runs, []
    ends = list(accumulate(sizes))
    for k in range(runs):
        at = total * k // runs
        i = bisect.bisect_right(ends, at)
        offset = at - (ends[i] - sizes[i]) if sizes[i] > run else 0  # a long line: start inside it
        left = run
        while i < len(lines) and left > 1:
            line = lines[i][offset:]
            space = line.find(" ", 0, 100) if offset else -1
            line = line[space + 1:]  # begin at a word (text without spaces, as CJK, where it falls)
            full = len(line) + 1 > left
            if full:  # end at a word, so that `chars` is never exceeded; cut a word only in text without spaces
                head = line[:left - 1]
                space = head.rfind(" ")
                line = head[:space] if space > 0 else head if left == run else ""
            if line.strip():
                sample.append(line.strip())
            if full:
                break
            left -= len(line) + 1
            i, offset = i + 1, 0
    return sample


@dataclass(frozen=True)
class ShardSettings:
    """Everything a worker needs (small and picklable: it travels with every job; the tokenizer is a file)."""

    cfg: CorpusConfig
    tokenizer_file: str  # the exact tokenizers pipeline of the main process, saved once beside the shards
    schema: Any  # pyarrow schema with datasets' feature metadata
    masking: dict[str, Any] | None  # mask_tokens options for static masking
    cls_id: int
    sep_id: int
    pad_id: int
    mask_id: int
    is_continuation: np.ndarray  # (V,) bool: the `##` pieces, which SOP does not cut before
    folder: str  # where shard files go


def shard_settings(cfg: CorpusConfig, tokenizer: Any, folder: Path) -> ShardSettings:
    """Column types (compact: uint16 ids when the vocabulary allows) and masking options, decided once."""
    from bertctl.data.masking import continuation_mask, masking_options

    masking = None
    if cfg.masking == "static":
        masking = masking_options(tokenizer, cfg.masked_lm_prob, cfg.max_predictions_per_seq,
                                  cfg.whole_word_masking)
    pipeline = Path(folder).parent / "worker-tokenizer.json"
    write_text_atomic(pipeline, tokenizer.plain_text_backend().to_str())
    schema = corpus_schema(tokenizer.vocab_size, sentence_labels=cfg.objective != "mlm",
                           static=cfg.masking == "static")
    return ShardSettings(cfg, str(pipeline), schema, masking, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id,
                         tokenizer.mask_id, continuation_mask(tokenizer.vocab()), str(folder))


def corpus_schema(vocab_size: int, sentence_labels: bool, static: bool) -> Any:
    """A corpus's columns: ids as uint16 when the vocabulary allows (half the disk), the NSP/SOP label, and the
    stored masks of static masking."""
    id_type = "uint16" if vocab_size <= 65536 else "int32"
    columns: dict[str, str | list[str]] = {"input_ids": [id_type], "token_type_ids": ["int8"]}
    if sentence_labels:
        columns["next_sentence_label"] = "int8"
    if static:
        columns["masked_lm_positions"] = ["uint16"]
        columns["masked_lm_ids"] = [id_type]
    return arrow_schema(columns)


def arrow_schema(columns: dict[str, str | list[str]]) -> Any:
    """The Arrow schema `datasets.Features` gives these columns ("int8", or ["int8"] for a list of them),
    with its feature metadata, built with pyarrow alone: importing datasets first would delay every worker
    by its import time (tests compare the two)."""
    import pyarrow as pa

    fields, features = [], {}
    for name, kind in columns.items():
        dtype = kind[0] if isinstance(kind, list) else kind
        value = {"dtype": dtype, "_type": "Value"}
        arrow = pa.type_for_alias(dtype)
        if isinstance(kind, list):
            value, arrow = {"feature": value, "_type": "List"}, pa.list_(arrow)
        fields.append(pa.field(name, arrow))
        features[name] = value
    return pa.schema(fields, metadata={"huggingface": json.dumps({"info": {"features": features}})})


class ShardBuilder:
    """Sentences -> tokens -> instances -> (static masks) -> one Arrow file per split."""

    def __init__(self, settings: ShardSettings) -> None:
        from tokenizers import Tokenizer

        self.s = settings
        self.backend = Tokenizer.from_file(settings.tokenizer_file)
        self.backend.encode_special_tokens = True  # "[SEP]" in the text is text, as in Google's tokenizer

    def build(self, job: ShardJob) -> dict[str, dict[str, int]]:
        documents = self._tokenize(job.documents)
        fraction = self.s.cfg.validation_fraction
        stats, files = {}, {}
        for split_id, split in enumerate(SPLITS):
            members = [i for i, doc in enumerate(documents) if doc.num_sentences
                       and is_validation(job.first_document + i, fraction) == bool(split_id)]
            pool, extended = members, documents
            if len(members) == 1 and job.neighbours[split_id]:  # no other document here: draw from neighbours
                others = [doc for doc in self._tokenize(job.neighbours[split_id]) if doc.num_sentences]
                extended = documents + others
                pool = members + list(range(len(documents), len(extended)))
            stats[split], written = self._split(job.index, split_id, extended, members, pool)
            if written is not None:
                files[shard_file(split, job.index)] = written
        # The shard is done; the files' sizes and hashes let a resumed build check them before reuse.
        write_json_atomic(_record_path(self.s.folder, job.index), {"stats": stats, "files": files})
        return stats

    def _tokenize(self, raw: list[list[str]]) -> list[Document]:
        """Documents of sentence token ids; sentences that tokenise to nothing are dropped, as Google does.

        Sentences are split and encoded ENCODE_BATCH at a time and each batch's ids become one int32 array at
        once: a list of Python ints costs ~36 bytes a token, so a shard of one large document (a 150 MB file
        without blank lines) would hold 1.3 GB of them; int32 takes 4 bytes a token."""
        from itertools import chain

        encode = getattr(self.backend, "encode_batch_fast", self.backend.encode_batch)
        pending: list[str] = []
        lengths: list[np.ndarray] = []
        tokens: list[np.ndarray] = []

        def flush() -> None:
            ids = [e.ids for e in encode(pending, add_special_tokens=False)]
            counts = np.fromiter(map(len, ids), np.int64, count=len(ids))
            lengths.append(counts)
            tokens.append(np.fromiter(chain.from_iterable(ids), np.int32, count=int(counts.sum())))
            pending.clear()

        per_document = []
        for lines in raw:
            count = 0
            for line in lines:
                whole = line.strip()
                for sentence in split_sentences(line) if self.s.cfg.split_sentences else [whole] if whole else []:
                    pending.append(sentence)
                    count += 1
                    if len(pending) >= ENCODE_BATCH:
                        flush()
            per_document.append(count)
        if pending:
            flush()
        all_lengths = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
        flat = np.concatenate(tokens) if tokens else np.zeros(0, np.int32)
        tokens.clear()  # the pieces: flat holds them now
        documents, sentence, token = [], 0, 0
        for count in per_document:
            kept = all_lengths[sentence:sentence + count]
            kept = kept[kept > 0]
            bounds = np.concatenate([[0], np.cumsum(kept)])
            documents.append(Document(flat[token:token + int(bounds[-1])], bounds))
            sentence, token = sentence + count, token + int(bounds[-1])
        return documents

    def _split(self, shard: int, split_id: int, documents: list[Document], members: list[int], pool: list[int]
               ) -> tuple[dict[str, int], dict[str, Any] | None]:
        """The split's counts, and its Arrow file's size and sha256 (None when it has no instance); NotNext
        text comes from `pool` (sorted indices into documents: the members, or one and its neighbours)."""
        from functools import partial

        from bertctl.data.masking import mask_tokens

        cfg = self.s.cfg

        def rng(purpose: int, dupe: int = 0) -> np.random.Generator:
            return np.random.default_rng([cfg.seed, shard, split_id, dupe, purpose])

        collected = Instances()
        for dupe in range(cfg.dupe_factor):
            generator = rng(0, dupe)
            for index in members:
                document_instances(collected, documents, index, pool, objective=cfg.objective,
                                   max_seq_length=cfg.max_seq_length, short_seq_prob=cfg.short_seq_prob,
                                   cls_id=self.s.cls_id, sep_id=self.s.sep_id, rng=generator,
                                   is_continuation=self.s.is_continuation)
        stats = {"documents": len(members), "sentences": sum(documents[i].num_sentences for i in members),
                 "tokens": sum(len(documents[i].tokens) for i in members),
                 "instances": len(collected.lengths), "forced_notnext": collected.forced}
        if not collected.lengths:
            return stats, None
        packed = pack(collected, rng(1))
        if self.s.masking is not None:
            packed = mask_packed(packed, partial(mask_tokens, **self.s.masking), self.s.pad_id, rng(2))
        written = write_shard(packed, self.s.schema, Path(self.s.folder) / shard_file(SPLITS[split_id], shard))
        return {**stats, **packed_stats(packed, self.s.mask_id)}, written


def write_shard(packed: Packed, schema: Any, path: Path) -> dict[str, Any]:
    """One Arrow stream file (the format datasets' save_to_disk writes), through a temp name; returns
    its size and sha256 (hashing re-reads it from the page cache: about 1 ms per MB)."""
    import pyarrow as pa

    offsets = pa.array(packed.offsets.astype(np.int32))
    id_type = schema.field("input_ids").type.value_type
    columns = {"input_ids": pa.ListArray.from_arrays(offsets, pa.array(packed.input_ids, id_type)),
               "token_type_ids": pa.ListArray.from_arrays(offsets, pa.array(packed.token_type_ids)),
               "next_sentence_label": pa.array(packed.labels)}
    if packed.masked_offsets is not None:
        masked = pa.array(packed.masked_offsets.astype(np.int32))
        columns["masked_lm_positions"] = pa.ListArray.from_arrays(
            masked, pa.array(packed.masked_positions.astype(np.uint16)))
        columns["masked_lm_ids"] = pa.ListArray.from_arrays(masked, pa.array(packed.masked_ids, id_type))
    table = pa.Table.from_arrays([columns[name] for name in schema.names], schema=schema)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
            writer.write_table(table, max_chunksize=1000)
        written = {"bytes": tmp.stat().st_size, "sha256": file_sha256(tmp)}
        os.replace(tmp, path)
    except OSError as exc:  # a full disk, a size limit: name the shard (the next run removes the .tmp)
        raise WriteFailed(path, exc) from None
    return written


def shard_file(split: str, shard: int) -> str:
    """A shard's Arrow file name in the shards folder, made in one place so that the builders that write it, the
    resume check that verifies it (`finished_shard`) and the step that links it into the corpus agree."""
    return f"{split}-{shard:06d}.arrow"


def _record_path(folder: Path | str, shard: int) -> Path:
    return Path(folder) / f"{shard:06d}.json"


class DamagedShard(Exception):
    """A shard recorded as finished whose record or files no longer match (truncated, edited, removed)."""


def finished_shard(folder: Path | str, shard: int) -> dict[str, dict[str, int]]:
    """The counts of a shard that `ShardBuilder.build` recorded in `folder`, once each of its files has the
    recorded size and sha256: a file damaged after the record (a full disk, a crash mid-write of the file
    system, a hand edit) must be rebuilt, never reused. Raises DamagedShard saying what is wrong."""
    path = _record_path(folder, shard)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        stats, files = record["stats"], record["files"]
        names = [shard_file(split, shard) for split in SPLITS if stats[split].get("instances")]
        expected = {name: (files[name]["bytes"], files[name]["sha256"]) for name in names}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise DamagedShard(f"shard {shard}: its record {path} is unreadable or incomplete") from None
    for name, (size, sha256) in expected.items():
        file = Path(folder) / name
        try:
            actual = file.stat().st_size
            if actual != size:
                raise DamagedShard(f"shard {shard}: {file} has {actual} bytes, its record says {size}")
            if file_sha256(file) != sha256:
                raise DamagedShard(f"shard {shard}: {file} does not match its recorded sha256")
        except OSError as exc:
            raise DamagedShard(f"shard {shard}: cannot read {file} ({exc.strerror or exc})") from None
    return stats


def packed_stats(packed: Packed, mask_id: int) -> dict[str, int]:
    """Counts for the manifest: instance tokens, labels, short targets, and what the static masks show."""
    lengths = np.diff(packed.offsets)
    stats = {"instance_tokens": int(lengths.sum()), "label_1": int(packed.labels.sum()),
             "short_instances": int(packed.short.sum())}
    if packed.masked_offsets is not None:
        rows = np.repeat(np.arange(len(lengths)), np.diff(packed.masked_offsets))
        shown = packed.input_ids[packed.offsets[rows] + packed.masked_positions]
        as_mask = shown == mask_id
        kept = ~as_mask & (shown == packed.masked_ids)
        stats.update(masked=len(shown), masked_as_mask=int(as_mask.sum()), masked_as_kept=int(kept.sum()),
                     masked_as_random=int((~as_mask & ~kept).sum()))
    return stats


_BUILDER: ShardBuilder | None = None


def init_worker() -> None:
    """Set up a worker process: no tokenizer threads, and an exit when the parent dies."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # the processes are the parallelism
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()


def _exit_with_parent(parent: int) -> None:
    """A killed main process (kill -9) never closes the work queue, so its workers would wait forever."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)


def build_shard(job: ShardJob, settings: ShardSettings) -> dict[str, dict[str, int]]:
    """One shard in a worker. The settings travel with every job, not as start-up arguments: a start-up
    payload beyond a pipe's 64 KB (static whole-word masking's vocabulary-sized array can reach it) blocks the
    parent for ever when the new process dies first, as when a script builds outside the __main__ guard."""
    global _BUILDER
    if _BUILDER is None:  # a pool's processes serve a single build
        _BUILDER = ShardBuilder(settings)
    return _BUILDER.build(job)
