"""`bertctl corpus build`: pre-training instances as a `datasets` Arrow DatasetDict, and reading one back
(`corpus inspect` reports on it: corpus_inspect.py).

The build reads top to bottom: check the flags -> stream the inputs into shards of whole documents ->
workers turn each shard into instances (sentences, tokens, Google's instances, static masks) and write
its Arrow files -> the shard files become the `train`/`validation` splits -> manifest.json -> rename.

Why shards: a shard (about `--shard-size-mb` of text) is the unit of work, of resume and of randomness.
Its instances come from generators seeded by (seed, shard, split, dupe), and NotNext segments are drawn
from the other documents of the same shard and split (a shard with one document of a split gets samples of
the nearest other documents of that split instead), so the output does not depend on the number of
workers, and memory holds a few shards, never the corpus. Everything lives in `OUT.partial/` until the
end; rerunning the same command reuses the shards finished there, each checked against its recorded size
and sha256 first (a damaged one is rebuilt).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import multiprocessing
import os
import shutil
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bertctl import __version__
from bertctl.config import CorpusConfig, usable_cores
from bertctl.config_records import config_to_dict
from bertctl.config_types import take_config
from bertctl.data.shards import (
    SPLITS,
    DamagedShard,
    ShardBuilder,
    ShardJob,
    ShardSettings,
    build_shard,
    finished_shard,
    init_worker,
    shard_file,
    shard_settings,
    with_neighbours,
)
from bertctl.errors import BertctlError, UsageError, say
from bertctl.files import (
    check_new_out,
    file_sha256,
    folder_undone_on_failure,
    refuse_empty,
    refuse_inputs_inside,
    replace_folder,
    user_path,
    write_json_atomic,
)
from bertctl.output_locks import output_lock
from bertctl.worker_processes import unreadable_main_skipped

FORMAT = "bertctl-corpus"
FORMAT_VERSION = 1
PARTIAL_SUFFIX = ".partial"
_EXECUTION_ONLY = ("out", "workers", "overwrite")  # where and how: never changes the output bytes
log = logging.getLogger(__name__)


def build_corpus(cfg: CorpusConfig) -> dict[str, Any]:
    """Build the corpus folder `cfg.out` and return its manifest."""
    take_config("build_corpus", cfg, CorpusConfig)
    out = check_required(cfg, "corpus build", "input (text file, folder, glob, table or dataset)",
                         "a tokenizer folder or vocab.txt (train one with 'bertctl tokenizer train')")
    with output_lock(out):  # OUT and OUT.partial/
        return _build(cfg, out)


def _build(cfg: CorpusConfig, out: Path) -> dict[str, Any]:
    from bertctl.data.sources import ReadStats, expand_inputs
    from bertctl.tokenizer_folder import load_tokenizer

    sources = expand_inputs(list(cfg.inputs))
    refuse_inputs_inside(out, [*sources, cfg.tokenizer], read_whole=cfg.inputs)
    tokenizer = load_tokenizer(cfg.tokenizer, lowercase=cfg.lowercase)
    check_length(cfg.max_seq_length, Path(cfg.tokenizer))
    inputs = _input_records(sources)
    params = {k: v for k, v in config_to_dict(cfg).items() if k not in _EXECUTION_ONLY}
    settings_held, inputs_held = path_free(params, inputs)  # `../x.txt` and `/abs/x.txt` are one build
    encoding = encoding_settings(tokenizer)  # sha256 is the vocabulary's; casing and the like count too
    key = settings_digest({"params": settings_held, "tokenizer_sha256": tokenizer.sha256(),
                           "tokenizer_settings": encoding, "inputs": inputs_held, "bertctl": __version__})
    partial = open_partial(out, key)
    settings = shard_settings(cfg, tokenizer, partial / "shards")
    read = ReadStats.for_sources(sources)
    try:
        stats = _run_shards(_jobs(cfg, sources, read), settings, _worker_count(cfg.workers),
                            partial / "shards", read.total_bytes)
        counts = _counts(stats, cfg)
    except UsageError:  # bad input: nothing worth resuming (an interruption keeps the shards)
        remove_partial(partial)
        raise
    made_with = {
        "objective": cfg.objective, "masking": cfg.masking, "max_seq_length": cfg.max_seq_length,
        "masked_lm_prob": cfg.masked_lm_prob, "max_predictions_per_seq": cfg.max_predictions_per_seq,
        "whole_word_masking": cfg.whole_word_masking, "short_seq_prob": cfg.short_seq_prob,
        "dupe_factor": cfg.dupe_factor, "seed": cfg.seed, "validation_fraction": cfg.validation_fraction}
    made_from = {"inputs": inputs, "skipped": [{"source": s, "reason": why} for s, why in read.skipped],
                 "config": params}
    return publish_corpus(partial, out, tokenizer, settings.schema, stats, key, counts, made_with, made_from,
                          cfg.overwrite)


# --- checks and inputs -------------------------------------------------------------------------------

def check_required(cfg: Any, command: str, inputs: str, tokenizer: str) -> Path:
    """INPUTS, --tokenizer and --out given (each refusal says what `inputs`/`tokenizer` to give), and OUT usable."""
    if not cfg.inputs:
        raise UsageError(f"{command}: give at least one {inputs}")
    if cfg.tokenizer is None:
        raise UsageError(f"{command}: --tokenizer is required: {tokenizer}")
    if cfg.out is None:
        raise UsageError(f"{command}: --out DIR is required")
    return check_new_out(cfg.out, overwrite=cfg.overwrite)


def check_length(max_seq_length: int, tokenizer_path: Path) -> None:
    """Refuse instances longer than the position table the tokenizer (or model) folder declares."""
    from bertctl.tokenizer import MODEL_MAX_LENGTH

    folder = tokenizer_path if tokenizer_path.is_dir() else tokenizer_path.parent
    limit, source = MODEL_MAX_LENGTH, "BERT's position table"
    declared = (("config.json", "max_position_embeddings"), ("bert_config.json", "max_position_embeddings"),
                ("tokenizer_config.json", "model_max_length"))
    for name, field in declared:
        try:
            value = json.loads((folder / name).read_text(encoding="utf-8")).get(field)
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(value, int) and 0 < value < 1_000_000:
            limit, source = value, f"{folder / name} ({field})"
            break
    if max_seq_length > limit:
        raise UsageError(f"--max-seq-length {max_seq_length} is above the {limit} positions of {source}")


def _input_records(sources: list[Any]) -> list[dict[str, Any]]:
    """The sources' record for the manifest (path, bytes, sha256)."""
    inputs = []
    for source in sources:
        path = Path(str(source))
        if path.is_file():
            inputs.append({"path": str(path), "bytes": path.stat().st_size, "sha256": file_sha256(path)})
        else:
            inputs.append({"dataset": str(source)})  # a datasets name: no file to digest
    return inputs


def encoding_settings(tokenizer: Any) -> dict[str, Any]:
    """What decides the tokenizer's ids besides its vocabulary (tokenizer_config.json, less length and decoding)."""
    return {key: value for key, value in tokenizer.config().items()
            if key not in ("model_max_length", "clean_up_tokenization_spaces")}


def settings_digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode("utf-8")).hexdigest()


def _worker_count(workers: int) -> int:
    if workers:
        return workers
    return usable_cores()


def _jobs(cfg: CorpusConfig, sources: list[Any], read: Any) -> Iterator[ShardJob]:
    """Whole documents grouped into shards of about shard_size_mb of text, in input order; for NSP, a shard
    whose split holds one document also gets text of other documents of the split (`with_neighbours`)."""
    jobs = _shards(cfg, sources, read)
    return with_neighbours(jobs, cfg.validation_fraction) if cfg.objective == "mlm+nsp" else jobs


def _shards(cfg: CorpusConfig, sources: list[Any], read: Any) -> Iterator[ShardJob]:
    from bertctl.data.sources import iter_documents

    limit = cfg.shard_size_mb * 1e6
    shard, first, documents, nbytes = 0, 0, [], 0
    for lines, size in iter_documents(sources, cfg.text_column, cfg.document_per_line, read):
        documents.append(lines)
        nbytes += size
        if nbytes >= limit:
            yield ShardJob(shard, first, documents, nbytes, read.bytes_read)
            shard, first, documents, nbytes = shard + 1, first + len(documents), [], 0
    if documents:
        yield ShardJob(shard, first, documents, nbytes, read.bytes_read)


# --- the main process: dispatch, progress, resume ----------------------------------------------------

_Progress = tuple[int, int, int, int]  # shard index, input bytes read, documents, text bytes


def _run_shards(jobs: Iterator[ShardJob], settings: ShardSettings, workers: int, folder: Path,
                total_bytes: int) -> dict[int, dict[str, dict[str, int]]]:
    """Shard stats by index; finished shards of an interrupted build are reused, not rebuilt.

    Each is checked (size, sha256) when its turn comes, so a resumed build starts at once: hashing runs at
    about 1 GB/s, far ahead of the input reading that reaches the shard. A damaged one is rebuilt, with a
    warning.
    """
    from bertctl.data.read_bar import ReadBar

    recorded = {int(p.stem) for p in folder.glob("[0-9]*.json")}
    stats: dict[int, dict[str, dict[str, int]]] = {}
    bar = ReadBar("corpus build", total_bytes)
    if recorded:
        say(f"resuming: {len(recorded)} finished shard(s) in {folder.parent} are checked and reused")
    seen = {"documents": 0, "text": 0}

    def reused(index: int) -> dict[str, dict[str, int]] | None:
        if index not in recorded:
            return None
        try:
            return finished_shard(folder, index)
        except DamagedShard as exc:
            log.warning("warning: %s; rebuilding it", exc)
            return None

    def finish(progress: _Progress, result: dict[str, dict[str, int]]) -> None:
        index, read_to, documents, text = progress
        stats[index] = result
        seen["documents"] += documents
        seen["text"] += text
        bar.update(max(0, read_to - bar.n))
        bar.set_postfix(documents=seen["documents"], text=f"{seen['text'] / 1e6:.1f}MB", refresh=False)

    with bar:
        if workers == 1:
            builder = ShardBuilder(settings)
            for job in jobs:
                finish(_progress(job), reused(job.index) or builder.build(job))
        else:
            _run_pool(jobs, settings, workers, reused, finish)
    return stats


def _progress(job: ShardJob) -> _Progress:
    return job.index, job.read_to, len(job.documents), job.nbytes


def _run_pool(jobs: Iterator[ShardJob], settings: ShardSettings, workers: int,
              reused: Callable[[int], dict[str, dict[str, int]] | None],
              finish: Callable[[_Progress, Any], None]) -> None:
    """At most two shards per worker in flight, so reading never runs ahead of the workers."""
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    context = multiprocessing.get_context("spawn")  # never fork a process that holds tokenizer threads
    pending: deque[tuple[_Progress, Any]] = deque()

    def collect() -> None:
        # The final assembly needs datasets (~0.6 s to import): the first wait imports it while workers run.
        importlib.import_module("datasets")
        progress, future = pending.popleft()
        finish(progress, future.result())

    try:
        with unreadable_main_skipped(), ProcessPoolExecutor(workers, context, initializer=init_worker) as pool:
            for job in jobs:
                result = reused(job.index)
                if result is not None:
                    finish(_progress(job), result)
                    continue
                pending.append((_progress(job), pool.submit(build_shard, job, settings)))
                while len(pending) > 2 * workers:
                    collect()
            while pending:
                collect()
    except (BrokenProcessPool, BrokenPipeError):  # a worker died, or died starting (the pipe to it broke)
        raise BertctlError("corpus build: a worker process died (out of memory? a script that builds outside "
                           "`if __name__ == \"__main__\":`?); rerun to resume, or use fewer --workers") from None
    finally:
        for _, future in pending:
            future.cancel()


def open_partial(out: Path, key: str) -> Path:
    """OUT.partial/ for this exact build (same inputs, tokenizer and flags); any other one is discarded."""
    partial = out.with_name(out.name + PARTIAL_SUFFIX)
    try:
        same = json.loads((partial / "build.json").read_text(encoding="utf-8"))["key"] == key
    except (OSError, ValueError, KeyError):
        same = False
    if partial.exists() and not same:
        log.warning("warning: %s holds an interrupted build of other inputs, tokenizer or settings; starting over",
                    partial)
        remove_partial(partial)
    with folder_undone_on_failure(partial / "shards"):  # no build.json (a full disk): no folder a rerun would warn of
        for leftover in (partial / "shards").glob("*.tmp"):
            leftover.unlink()
        write_json_atomic(partial / "build.json", {"key": key})
    return partial


def _counts(stats: dict[int, dict[str, dict[str, int]]], cfg: CorpusConfig) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = {split: {} for split in SPLITS}
    for index in sorted(stats):
        for split in SPLITS:
            for name, value in stats[index][split].items():
                counts[split][name] = counts[split].get(name, 0) + value
    train, validation = counts["train"], counts["validation"]
    if not train.get("documents") and not validation.get("documents"):
        raise UsageError(f"corpus build: the inputs hold no text ({' '.join(cfg.inputs)})")
    if not train.get("instances"):
        raise UsageError(f"corpus build: no training instances from {train.get('documents', 0)} document(s) "
                         f"({validation.get('documents', 0)} held out by --validation-fraction); add text "
                         "or lower --validation-fraction")
    if cfg.validation_fraction > 0 and not validation.get("instances"):
        raise UsageError("corpus build: --validation-fraction gave no validation instances; add documents")
    return counts


def assemble_corpus(partial: Path, schema: Any, stats: dict[int, Any], splits: list[str], key: str) -> None:
    """partial/corpus: datasets writes the DatasetDict's metadata, the shard files are its data files.

    save_to_disk on empty splits writes dataset_dict.json, dataset_info.json and state.json; the shards,
    already in save_to_disk's Arrow stream format, are hard-linked in and listed in state.json. This
    avoids copying the corpus once more and keeps memory flat (no memory-mapped pass over all of it).
    """
    import datasets
    from datasets.table import InMemoryTable

    folder = partial / "corpus"
    shutil.rmtree(folder, ignore_errors=True)
    empty = {split: datasets.Dataset(InMemoryTable(schema.empty_table()), split=datasets.NamedSplit(split),
                                     fingerprint=settings_digest([key, split])[:16]) for split in splits}
    was_enabled = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        datasets.DatasetDict(empty).save_to_disk(str(folder))
    finally:
        if was_enabled:
            datasets.enable_progress_bars()
    for split in splits:
        shards = [i for i in sorted(stats) if stats[i][split].get("instances")]
        names = [f"data-{k:05d}-of-{len(shards):05d}.arrow" for k in range(len(shards))]
        for shard, name in zip(shards, names, strict=True):
            source, target = partial / "shards" / shard_file(split, shard), folder / split / name
            try:
                os.link(source, target)
            except OSError:
                shutil.copyfile(source, target)
        state_path = folder / split / "state.json"
        state = json.loads(state_path.read_text(encoding="utf-8"))
        state["_data_files"] = [{"filename": name} for name in names]
        state_path.write_text(json.dumps(state, indent=2, sort_keys=True), encoding="utf-8")


def publish_corpus(partial: Path, out: Path, tokenizer: Any, schema: Any, stats: dict[int, Any], key: str,
                   counts: dict[str, dict[str, int]], settings: dict[str, Any], sources: dict[str, Any],
                   overwrite: bool = True) -> dict[str, Any]:
    """Write the finished shards' DatasetDict, the tokenizer and the manifest (what every corpus records, with
    how it was made in `settings` and what from in `sources`), rename the corpus into place (replacing an old
    one only now) with the partial folder moved aside in the same step, then removed (a kill never leaves it
    beside the complete corpus: `replace_folder`, which refuses an OUT made meanwhile without `overwrite`), and
    return the manifest."""
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "bertctl_version": __version__, **settings,
        "tokenizer_sha256": tokenizer.sha256(), "tokenizer_settings": encoding_settings(tokenizer),
        "vocab_size": tokenizer.vocab_size,
        "special_ids": {"pad": tokenizer.pad_id, "unk": tokenizer.unk_id, "cls": tokenizer.cls_id,
                        "sep": tokenizer.sep_id, "mask": tokenizer.mask_id},
        "splits": [s for s in SPLITS if counts[s]["instances"]], "counts": counts, **sources,
    }
    assemble_corpus(partial, schema, stats, manifest["splits"], key)
    tokenizer.save(partial / "corpus" / "tokenizer")
    write_json_atomic(partial / "corpus" / "manifest.json", manifest)
    replace_folder(partial / "corpus", out, retire=partial, overwrite=overwrite)
    return manifest


def remove_partial(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


# --- reading a corpus --------------------------------------------------------------------------------

def load_corpus(path: Path | str) -> tuple[Any, dict[str, Any]]:
    """(DatasetDict, manifest) of a built corpus; memory-mapped, so opening a large corpus is instant."""
    import datasets

    path = user_path(path, "--corpus")
    if path.exists() and not path.is_dir():
        raise UsageError(f"{path} is a file, not a corpus folder; give the folder 'bertctl corpus build' wrote")
    if not path.is_dir():
        partial = path.with_name(path.name + PARTIAL_SUFFIX)
        hint = (f"{partial} holds an interrupted build: rerun the same 'bertctl corpus build' to finish it"
                if partial.is_dir() else "build one with 'bertctl corpus build INPUTS -t TOKENIZER -o DIR'")
        raise UsageError(f"corpus {path} does not exist; {hint}")
    manifest = _read_manifest(path)
    try:
        dataset = datasets.load_from_disk(str(path))
    except Exception as exc:  # datasets raises FileNotFoundError, ValueError... for damaged folders
        raise UsageError(f"cannot read corpus {path}: {str(exc).splitlines()[0]}; a shard or split folder is "
                           "damaged or missing: build the corpus again (corpus build or corpus import, with "
                           "--overwrite)") from None
    return dataset, manifest


def _read_manifest(path: Path) -> dict[str, Any]:
    refuse_empty(path / "manifest.json", "restore it or build the corpus again")
    try:
        manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        manifest = None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise UsageError(f"{path} is not a bertctl corpus (no valid manifest.json); "
                         "build one with 'bertctl corpus build'")
    if manifest.get("format_version", 0) > FORMAT_VERSION:
        raise UsageError(f"{path} was written by a newer bertctl ({manifest.get('bertctl_version')}); "
                         "upgrade bertctl")
    missing = [key for key in _MANIFEST_KEYS if key not in manifest]
    if missing:
        raise UsageError(f"{path / 'manifest.json'} is damaged (has no {', '.join(missing)}); restore it or build "
                         "the corpus again")
    return manifest


# What pretrain, `evaluate mlm` and `corpus inspect` read of every manifest (built and imported corpora alike): a
# hand-edited one without them failed as a bare KeyError naming neither the file nor what to do.
_MANIFEST_KEYS = ("objective", "masking", "max_seq_length", "masked_lm_prob", "max_predictions_per_seq",
                  "whole_word_masking", "special_ids", "counts")


def same_instances(manifest: dict[str, Any], other: dict[str, Any]) -> bool:
    """Whether two manifests describe the same instances, by `instances_fingerprint`: a corpus copied or rebuilt
    elsewhere still matches, so a run resumes on it and its validation figures still apply."""
    return instances_fingerprint(manifest) == instances_fingerprint(other)


def instances_fingerprint(manifest: dict[str, Any]) -> str:
    """sha256 of what a manifest says of its instances: the paths the corpus was built from and into don't
    count (the inputs' sha256 and the tokenizer's fingerprint do), so a corpus rebuilt elsewhere still matches."""
    config, inputs = path_free(manifest.get("config", {}), manifest.get("inputs", []))
    contents = {**manifest, "config": config, "inputs": inputs, "skipped": len(manifest.get("skipped", []))}
    return hashlib.sha256(json.dumps(contents, sort_keys=True).encode()).hexdigest()


def path_free(config: dict[str, Any], inputs: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A build's (or an import's) settings and input records without the paths they were given by (the files'
    sha256 and the tokenizer's fingerprint say what they hold)."""
    return ({key: value for key, value in config.items() if key not in ("inputs", "tokenizer")},
            [{key: value for key, value in source.items() if key != "path"} for source in inputs])


def corpus_tokenizer(path: Path | str, manifest: dict[str, Any] | None = None) -> Any:
    """The tokenizer a corpus was built with (saved in CORPUS/tokenizer): a folder of the corpus, never a hub id,
    so a corpus without it is told so rather than looked up on the hub as CORPUS/tokenizer. A copy whose
    vocabulary is not the manifest's (a vocab.txt cut short or edited) is refused: it would decode the
    instances with other tokens, or fail on an id past its end naming no file. `manifest`: the one
    `load_corpus` gave, else the corpus's manifest.json is read."""
    from bertctl.tokenizer_folder import load_tokenizer

    if manifest is None:
        manifest = _read_manifest(user_path(path, "--corpus"))
    folder = user_path(path) / "tokenizer"
    if not folder.is_dir():
        raise UsageError(f"corpus {path} lacks its tokenizer folder {folder}; copy the tokenizer it was built with "
                         "back there (manifest.json's tokenizer_sha256 fingerprints its vocabulary) or build the "
                         "corpus again (--num 0 shows the statistics without it)")
    tokenizer = load_tokenizer(folder)
    expected = str(manifest.get("tokenizer_sha256"))
    if tokenizer.sha256() != expected:
        raise UsageError(f"{folder} is not the tokenizer corpus {path} was built with (sha256 "
                           f"{tokenizer.sha256()[:12]} vs manifest.json's {expected[:12]}); copy that tokenizer "
                           "back there or build the corpus again (--num 0 shows the statistics without it)")
    return tokenizer
