"""`corpus build` / `inspect` on generated text: layout, statistics, Google's semantics, determinism."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from bertctl.cli import app
from bertctl.config import CorpusConfig
from bertctl.corpus import build_corpus, load_corpus
from bertctl.corpus_inspect import inspect_corpus
from bertctl.errors import UsageError
from bertctl.files import remove_stale_temps
from bertctl.tokenizer import SPECIAL_TOKENS, BertTokenizer

_LETTERS = itertools.product("abcdefghijklmnoprstuvw", repeat=4)
BASES = ["".join(letters) for letters in itertools.islice(_LETTERS, 3000)]
SUFFIXES = ["xq", "xz", "yq", "zy"]  # letters no base has, so 'base+suffix' is always two pieces
VOCAB = [*SPECIAL_TOKENS, ".", *BASES, *(f"##{s}" for s in SUFFIXES)]
FIRST_BASE = VOCAB.index(BASES[0])


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("corpus_data")
    BertTokenizer.from_vocab(VOCAB, lowercase=True).save(root / "tok")
    rng = np.random.default_rng(0)
    (root / "prose.txt").write_text(_prose(rng, documents=500), encoding="utf-8")
    (root / "small.txt").write_text(_prose(rng, documents=40), encoding="utf-8")
    (root / "ordered.txt").write_text(_ordered(documents=40), encoding="utf-8")
    return {"root": root, "tok": root / "tok", "prose": root / "prose.txt", "small": root / "small.txt",
            "ordered": root / "ordered.txt"}


def _prose(rng: np.random.Generator, documents: int) -> str:
    """Paragraphs of sentences ("Word word wordxq."), a blank line between documents."""
    docs = []
    for _ in range(documents):
        paragraphs = []
        for _ in range(rng.integers(8, 16)):
            sentences = []
            for _ in range(rng.integers(3, 7)):
                words = [BASES[i] + (SUFFIXES[i % 4] if i % 3 == 0 else "")
                         for i in rng.integers(0, 3000, rng.integers(3, 7))]
                sentences.append(" ".join(words).capitalize() + ".")
            paragraphs.append(" ".join(sentences))
        docs.append("\n".join(paragraphs))
    return "\n\n".join(docs) + "\n"


def _ordered(documents: int) -> str:
    """Google's format (a sentence a line); every token id is larger than all before it in the file."""
    words = iter(BASES)
    return "\n\n".join("\n".join(" ".join(next(words) for _ in range(6)) for _ in range(8))
                       for _ in range(documents)) + "\n"


def build(data: dict[str, Path], out: str, source: str = "prose", **flags) -> tuple[object, dict]:
    flags = {"max_seq_length": 64, "workers": 1, **flags}
    cfg = CorpusConfig(inputs=(str(data[source]),), tokenizer=data["tok"], out=data["root"] / out, **flags)
    build_corpus(cfg)
    return load_corpus(cfg.out)


def rows(dataset) -> list[dict]:
    return dataset.to_list()


def test_static_corpus_layout_and_statistics(data) -> None:
    corpus, manifest = build(data, "static", masking="static", validation_fraction=0.1)
    assert set(corpus) == {"train", "validation"}
    features = corpus["train"].features
    assert features["input_ids"].feature.dtype == "uint16" == features["masked_lm_ids"].feature.dtype
    assert features["token_type_ids"].feature.dtype == "int8" == features["next_sentence_label"].dtype
    assert sorted(p.name for p in (data["root"] / "static").iterdir()) == [
        "dataset_dict.json", "manifest.json", "tokenizer", "train", "validation"]
    assert not (data["root"] / "static.partial").exists()
    for key in ("tokenizer_sha256", "max_seq_length", "objective", "masking", "masked_lm_prob", "seed",
                "max_predictions_per_seq", "whole_word_masking", "counts", "inputs", "bertctl_version"):
        assert key in manifest
    assert manifest["inputs"][0]["sha256"] and manifest["inputs"][0]["bytes"] == data["prose"].stat().st_size
    assert manifest["tokenizer_sha256"] == BertTokenizer.from_vocab(VOCAB).sha256()
    assert manifest["counts"]["validation"]["documents"] == 50  # every 10th document, evenly spaced

    shown = kept = masked = 0
    train = rows(corpus["train"])
    assert len(train) > 3000
    for row in train:
        ids, types = row["input_ids"], row["token_type_ids"]
        original = list(ids)
        for position, token in zip(row["masked_lm_positions"], row["masked_lm_ids"], strict=True):
            original[position] = token
        assert len(ids) <= 64 and ids[0] == 2 and ids[-1] == 3
        assert original.count(3) == 2 and 0 not in original
        first_sep = original.index(3)
        assert types == [0] * (first_sep + 1) + [1] * (len(ids) - first_sep - 1)
        positions, originals = row["masked_lm_positions"], row["masked_lm_ids"]
        assert len(positions) == min(20, max(1, round(len(ids) * 0.15)))
        assert positions == sorted(positions) and 0 not in positions and first_sep not in positions
        assert len(ids) - 1 not in positions and not set(originals) & {0, 2, 3}
        for position, original in zip(positions, originals, strict=True):
            masked += 1
            shown += ids[position] == 4
            kept += ids[position] == original
    assert abs(shown / masked - 0.8) < 0.03 and abs(kept / masked - 0.1) < 0.03
    # NotNext is a coin flip, except after a one-sentence chunk where Google's rule forces it (short targets
    # make those common): the flips are 50/50, the forced ones push the total a little above.
    forced = manifest["counts"]["train"]["forced_notnext"]
    notnext = sum(row["next_sentence_label"] for row in train)
    assert abs((notnext - forced) / (len(train) - forced) - 0.5) < 0.03
    assert 0 < forced < 0.15 * len(train)

    stats = inspect_corpus(data["root"] / "static", num=2)
    split = stats["splits"]["train"]
    assert split["instances"] == len(train)
    assert split["masked_share"] == pytest.approx(masked / split["tokens"], abs=1e-4)
    assert split["mask_share"] == pytest.approx(shown / masked, abs=1e-4)
    assert 0 < split["short_share"] < 0.3 and 0 < split["padding_share"] < 0.5
    assert split["short_share"] == round(manifest["counts"]["train"]["short_instances"] / len(train), 4)
    assert split["padding_share"] == round(1 - split["tokens"] / (len(train) * manifest["max_seq_length"]), 4)
    assert len(stats["samples"]) == 2 and "<[MASK]|" in stats["samples"][0]["text"]
    labels = [("IsNext", "NotNext")[row["next_sentence_label"]] for row in train[:2]]
    assert [sample["label"] for sample in stats["samples"]] == labels


@pytest.mark.parametrize("objective", ["mlm+nsp", "mlm+sop", "mlm"])
def test_instances_follow_the_objective(data, objective: str) -> None:
    """On text whose ids only grow, the order of A and B and the document they come from are visible."""
    corpus, _ = build(data, f"ordered-{objective}", "ordered", objective=objective, split_sentences=False,
                      max_seq_length=32)
    document = lambda token: (token - FIRST_BASE) // 48  # noqa: E731 - 48 words per generated document
    labels = []
    for row in rows(corpus["train"]):
        ids = row["input_ids"]
        if objective == "mlm":
            assert "next_sentence_label" not in row and set(row["token_type_ids"]) == {0}
            assert ids.count(3) == 1 and ids[-1] == 3
            body = ids[1:-1]
            assert body == sorted(body) and document(body[0]) == document(body[-1])
            continue
        sep = ids.index(3)
        a, b = ids[1:sep], ids[sep + 1:-1]
        assert a and b and len(ids) <= 32
        label = row["next_sentence_label"]
        labels.append(label)
        assert a == sorted(a) and b == sorted(b)
        if label == 0:
            assert max(a) < min(b) and document(a[0]) == document(b[0])
        elif objective == "mlm+sop":
            assert min(a) > max(b) and document(a[0]) == document(b[0])
        else:
            assert document(a[0]) != document(b[0])
    if objective != "mlm":
        assert 0.4 < np.mean(labels) < 0.65
    else:
        body = sum(len(row["input_ids"]) - 2 for row in rows(corpus["train"]))
        assert body == 40 * 48  # contiguous pieces cover every token exactly once


def test_sop_cuts_a_lone_sentence_between_two_words() -> None:
    """A lone sentence cut inside a word began one half with a `##` piece: right after [CLS] that told a swapped
    pair from one in order (40% of Austen's SOP instances at 64 tokens are such cuts)."""
    from bertctl.data.instances import Document, Instances, document_instances

    is_continuation = np.arange(100) >= 50  # ids 10-49 start a word, 50-99 continue one
    rng = np.random.default_rng(0)
    documents = []
    for _ in range(300):  # one sentence each: 1-5 words of 1-3 pieces
        words = [[int(rng.integers(10, 50)), *rng.integers(50, 100, int(rng.integers(0, 3))).tolist()]
                 for _ in range(int(rng.integers(1, 6)))]
        tokens = np.array([piece for word in words for piece in word], np.int32)
        documents.append(Document(tokens, np.array([0, len(tokens)])))
    out, draws = Instances(), np.random.default_rng(1)
    for index in range(len(documents)):
        document_instances(out, documents, index, list(range(len(documents))), objective="mlm+sop",
                           max_seq_length=64, short_seq_prob=0.0, cls_id=2, sep_id=3, rng=draws,
                           is_continuation=is_continuation)
    flat = np.concatenate(out.pieces)
    offsets = np.cumsum([0, *out.lengths[:-1]])
    firsts, seconds = flat[offsets + 1], flat[offsets + np.array(out.first_segment)]  # A's and B's first pieces
    multi_word = sum(len(np.flatnonzero(~is_continuation[d.tokens])) > 1 for d in documents)
    assert len(out.lengths) == multi_word  # a one-word sentence has no cut between words: no instance
    assert not is_continuation[firsts].any() and not is_continuation[seconds].any()
    assert 0.4 < np.mean(out.labels) < 0.6


def test_mlm_pieces_hold_max_seq_length_minus_two_tokens() -> None:
    """`mlm` has a single [SEP]: a piece holds max_seq_length - 2 tokens (NSP/SOP's - 3 would waste one), across
    sentence ends; the document's last piece holds the rest."""
    from bertctl.data.instances import Document, Instances, document_instances

    out = Instances()
    document_instances(out, [Document(np.arange(10, 20, dtype=np.int32), np.array([0, 3, 10]))], 0, [0],
                       objective="mlm", max_seq_length=6, short_seq_prob=0.0, cls_id=2, sep_id=3,
                       rng=np.random.default_rng(0), is_continuation=np.zeros(100, bool))
    rows = [np.concatenate(out.pieces[out.starts[k]:out.starts[k + 1]]).tolist() for k in range(len(out.lengths))]
    assert rows == [[2, 10, 11, 12, 13, 3], [2, 14, 15, 16, 17, 3], [2, 18, 19, 3]]
    assert out.lengths == out.first_segment == [6, 6, 4] and out.labels == [0, 0, 0]


@pytest.mark.parametrize("fraction, first", [(0.07, [0, 14, 28, 42, 57, 71, 85, 100]), (0.02, [0, 50, 100])])
def test_validation_documents_are_spaced_by_the_written_fraction(fraction: float, first: list[int]) -> None:
    """0.07 is 7/100: document 100 is held out, never 99 (a float product once rounded 100 * 0.07 up)."""
    from bertctl.data.shards import is_validation

    held = [d for d in range(10_000) if is_validation(d, fraction)]
    assert held[:len(first)] == first and len(held) == round(10_000 * fraction)


@pytest.mark.parametrize("shard_size_mb", [1.0, 0.002])
def test_validation_documents_are_numbered_over_all_shards(data, shard_size_mb: float) -> None:
    """Which documents are held out does not depend on the shard size: each shard's are numbered from the
    documents of the shards before it (in "ordered", document d holds the words d * 48 .. d * 48 + 47)."""
    corpus, _ = build(data, f"held{shard_size_mb}", "ordered", objective="mlm", validation_fraction=0.2,
                      shard_size_mb=shard_size_mb)
    assert (len(list((data["root"] / f"held{shard_size_mb}" / "train").glob("*.arrow"))) > 3) == (shard_size_mb < 1)
    held = {(i - FIRST_BASE) // 48 for row in rows(corpus["validation"]) for i in row["input_ids"]
            if FIRST_BASE <= i < FIRST_BASE + len(BASES)}
    assert held == {0, 5, 10, 15, 20, 25, 30, 35}
    import pyarrow as pa

    files = sorted((data["root"] / f"held{shard_size_mb}" / "train").glob("*.arrow"))
    spans = []  # each data file's documents: the shards in input order, never another
    for file in files:
        ids = pa.ipc.open_stream(pa.OSFile(str(file))).read_all().column("input_ids").combine_chunks().flatten()
        documents = (ids.to_numpy()[ids.to_numpy() >= FIRST_BASE] - FIRST_BASE) // 48
        spans.append((documents.min(), documents.max()))
    assert all(before[1] <= after[0] for before, after in itertools.pairwise(spans))


@pytest.mark.parametrize("fraction", [0.0, 0.25])
def test_notnext_text_comes_from_another_document_when_a_shard_holds_one(data, fraction: float) -> None:
    """Shards smaller than a document hold one each: NotNext B still comes from another document of the same
    split (the nearest ones; the split's first document takes those after it), with any worker count."""
    from bertctl.data.shards import is_validation

    document = lambda token: (token - FIRST_BASE) // 48  # noqa: E731 - 48 words per generated document
    folders = []
    for workers in (1, 2):
        out = f"lone-{fraction}-{workers}"
        corpus, manifest = build(data, out, "ordered", split_sentences=False, max_seq_length=32,
                                 shard_size_mb=0.0001, validation_fraction=fraction, workers=workers)
        folders.append(data["root"] / out)
    assert len(list((folders[0] / "train").glob("*.arrow"))) == 40 - 40 * fraction  # a shard per document
    for split in corpus:
        notnext, ranks = 0, [d for d in range(40) if is_validation(d, fraction) == (split == "validation")]
        for row in rows(corpus[split]):
            ids = row["input_ids"]
            sep = ids.index(3)
            a, b = document(ids[1]), document(ids[sep + 1])
            if row["next_sentence_label"] == 1:
                notnext += 1
                assert a != b and is_validation(b, fraction) == (split == "validation")
                assert abs(ranks.index(a) - ranks.index(b)) <= 4  # one of the 4 nearest of the split
        assert notnext > len(ranks) // 2
    files = sorted(p.relative_to(folders[0]) for p in folders[0].rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(folders[1]) for p in folders[1].rglob("*") if p.is_file())
    for name in files:
        assert (folders[0] / name).read_bytes() == (folders[1] / name).read_bytes(), name


@pytest.mark.parametrize("junk", ["\ufffd\ufffd", "\u200b \x07", "\ufeff\n\u00ad"])
def test_a_document_without_tokens_beside_a_lone_one_does_not_make_it_its_own_notnext(data, junk: str) -> None:
    """A document that tokenises to nothing (replacement characters, zero-width or control characters: the
    tokenizer's cleaning removes them) is no document: the one beside it in its shard is alone there and still
    draws NotNext text from other documents, never from itself."""
    document = lambda token: (token - FIRST_BASE) // 48  # noqa: E731 - 48 words per generated document
    parts = _ordered(documents=8).split("\n\n")
    parts.insert(4, junk)  # shards of one document each; the junk joins document 4's shard
    path = data["root"] / f"junk-{len(junk)}-{ord(junk[0])}.txt"
    path.write_text("\n\n".join(parts), encoding="utf-8")
    data = {**data, "junk": path}
    corpus, manifest = build(data, f"junk-{len(junk)}-{ord(junk[0])}", "junk", split_sentences=False,
                             max_seq_length=32, shard_size_mb=0.0001, dupe_factor=5)
    assert manifest["counts"]["train"]["documents"] == 8
    pairs = [(document(row["input_ids"][1]), document(row["input_ids"][row["input_ids"].index(3) + 1]))
             for row in rows(corpus["train"]) if row["next_sentence_label"] == 1]
    assert sum(a == 4 for a, _ in pairs) >= 5
    assert all(a != b for a, b in pairs), pairs


def test_neighbours_are_the_nearest_documents_and_a_bounded_sample() -> None:
    from bertctl.data.shards import (
        MIN_SAMPLE_CHARS,
        NEIGHBOURS,
        RUN_CHARS,
        SAMPLE_CHARS,
        ShardJob,
        _sample,
        with_neighbours,
    )

    text = [[f"doc{d} line{k} " + "word " * 40 for k in range(3)] for d in range(9)]
    big = [" ".join(f"{d}" for d in range(200_000))]  # one line of 1.3 MB
    lone = [ShardJob(d, d, [doc], 100, 0) for d, doc in enumerate([*text, big])]
    lone.append(ShardJob(10, 10, [["after big"]], 40_000, 0))  # takes half its size from its 4 neighbours
    lone.insert(3, ShardJob(3, 3, [["two a"], ["two b"]], 10, 0))  # a shard of two documents: no neighbours
    lone = [dataclasses.replace(job, index=i, first_document=i + (i > 3)) for i, job in enumerate(lone)]
    jobs = list(with_neighbours(lone, 0.0))
    assert [job.index for job in jobs] == [1, 2, 0, *range(3, 12)]  # the first waits for those after
    first = jobs[2]
    assert [n[0].split()[0] for n in first.neighbours[0]] == ["doc1", "doc2", "two", "two"]
    assert [n[0].split()[0] for n in jobs[0].neighbours[0]] == ["doc0"]
    assert jobs[3].neighbours == ([], [])
    assert [n[0].split()[0] for n in jobs[-3].neighbours[0]] == ["doc7", "doc6", "doc5", "doc4"]
    assert len(jobs[-2].neighbours[0]) == NEIGHBOURS
    assert jobs[-2].neighbours[0][0] == text[-1]  # a short document whole
    assert [len(n) for n in jobs[-2].neighbours[0]] == [3, 3, 3, 3]  # a small shard: each at least MIN_SAMPLE_CHARS
    near = jobs[-1].neighbours[0][0]  # the big document, cut to its share: 40,000 / 2 / 4 characters
    assert MIN_SAMPLE_CHARS < 5_000 - 10 <= sum(len(line) + 1 for line in near) <= 5_000 and len(near) == 1
    sample = _sample(big)  # a long one in evenly spread runs, cut at spaces
    assert sum(len(line) + 1 for line in sample) <= SAMPLE_CHARS and len(sample) == SAMPLE_CHARS // RUN_CHARS
    starts = [int(line.split()[0]) for line in sample]
    assert starts[0] == 0 and starts == sorted(starts) and starts[-1] > 180_000
    for line in sample:  # whole numbers, consecutive
        numbers = [int(word) for word in line.split()]
        assert numbers == list(range(numbers[0], numbers[-1] + 1))
    unspaced = _sample(["字" * 1_000_000])  # text without spaces is cut where the runs fall
    assert len(unspaced) == SAMPLE_CHARS // RUN_CHARS and sum(len(line) + 1 for line in unspaced) == SAMPLE_CHARS
    assert _sample(sample) == sample  # a sample fits its own size: cutting again changes nothing
    many = [ShardJob(0, 0, [["first"]], 100, 0), ShardJob(1, 1, [[f"many{d}"] for d in range(6)], 60, 0),
            ShardJob(2, 7, [["last"]], 100, 0)]  # a shard of more documents than NEIGHBOURS between two lone ones
    head, _, tail = sorted(with_neighbours(many, 0.0), key=lambda job: job.index)
    assert [n[0] for n in head.neighbours[0]] == ["many0", "many1", "many2", "many3"]  # the nearest after it
    assert [n[0] for n in tail.neighbours[0]] == ["many5", "many4", "many3", "many2"]  # the nearest before it


def test_same_bytes_for_any_worker_count(data) -> None:
    for workers in (1, 2):
        build(data, f"w{workers}", "small", masking="static", workers=workers, shard_size_mb=0.02,
              validation_fraction=0.2)
    one, two = data["root"] / "w1", data["root"] / "w2"
    files = sorted(p.relative_to(one) for p in one.rglob("*") if p.is_file())
    assert len([f for f in files if f.suffix == ".arrow"]) > 3  # several shards
    assert files == sorted(p.relative_to(two) for p in two.rglob("*") if p.is_file())
    for name in files:
        assert (one / name).read_bytes() == (two / name).read_bytes(), name


def test_static_is_dynamic_plus_masks(data) -> None:
    static, _ = build(data, "s", "small", masking="static", dupe_factor=2)
    dynamic, manifest = build(data, "d", "small", masking="dynamic", dupe_factor=2)
    assert set(dynamic["train"].column_names) == {"input_ids", "token_type_ids", "next_sentence_label"}
    assert manifest["masking"] == "dynamic"
    for masked, plain in zip(rows(static["train"]), rows(dynamic["train"]), strict=True):
        restored = list(masked["input_ids"])
        for position, original in zip(masked["masked_lm_positions"], masked["masked_lm_ids"], strict=True):
            restored[position] = original
        assert restored == plain["input_ids"] and masked["token_type_ids"] == plain["token_type_ids"]
        assert masked["next_sentence_label"] == plain["next_sentence_label"]
    drawn = [tuple(row["input_ids"]) for row in rows(dynamic["train"])]
    assert len(set(drawn)) > 0.75 * len(drawn)  # each dupe draws instances of its own, not the first one's again


def test_whole_word_masking_keeps_words_whole(data) -> None:
    corpus, manifest = build(data, "wwm", "small", masking="static", whole_word_masking=True)
    assert manifest["whole_word_masking"] is True
    pieces = {VOCAB.index(f"##{s}") for s in SUFFIXES}
    continued = mixed = across = 0
    for row in rows(corpus["train"]):
        original = list(row["input_ids"])
        for position, token in zip(row["masked_lm_positions"], row["masked_lm_ids"], strict=True):
            original[position] = token
        masked = set(row["masked_lm_positions"])
        for i in range(1, len(original)):
            if original[i] in pieces and original[i - 1] not in (2, 3):  # a word's second piece
                assert (i in masked) == (i - 1 in masked)
                if i in masked:
                    continued += 1
                    mixed += (row["input_ids"][i] == 4) != (row["input_ids"][i - 1] == 4)  # a draw per piece
            elif original[i] in pieces and original[i - 1] == 3 and i > 2:  # B starts with a piece: as Google,
                assert (i in masked) == (i - 2 in masked)  # it belongs to A's last word across the [SEP]
                across += 1
    assert continued > 100 and mixed > 10 and across > 10


def _interrupt_after(monkeypatch, shards: int) -> tuple:
    """Make the build stop (as Ctrl-C would) once `shards` shards are built; returns the real build function and
    the list of shard indices built."""
    from bertctl.data.shards import ShardBuilder

    real_build, calls = ShardBuilder.build, []

    def interrupted(self, job):
        if len(calls) == shards:
            raise KeyboardInterrupt
        calls.append(job.index)
        return real_build(self, job)

    monkeypatch.setattr(ShardBuilder, "build", interrupted)
    return real_build, calls


def test_resume_reuses_finished_shards(data, monkeypatch) -> None:
    from bertctl.data.shards import ShardBuilder

    reference, _ = build(data, "uninterrupted", "small", shard_size_mb=0.02)
    real_build, calls = _interrupt_after(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        build(data, "resumed", "small", shard_size_mb=0.02)
    assert not (data["root"] / "resumed").exists() and (data["root"] / "resumed.partial").is_dir()
    calls.clear()
    monkeypatch.setattr(ShardBuilder, "build", lambda self, job: calls.append(job.index) or
                        real_build(self, job))
    resumed, _ = build(data, "resumed", "small", shard_size_mb=0.02)
    assert calls and min(calls) == 2  # shards 0 and 1 came from the partial folder
    assert rows(resumed["train"]) == rows(reference["train"])


def test_resume_takes_the_same_files_named_another_way_and_says_when_it_starts_over(data, monkeypatch, caplog,
                                                                                     tmp_path, capsys) -> None:
    """`../x.txt` and `/abs/x.txt` are one input: the build key held the paths as typed, so a rerun so spelt
    threw the finished shards away without a word. The resume says so on stderr (it was said on stdout)."""
    from bertctl.data.shards import ShardBuilder

    real_build, calls = _interrupt_after(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        build(data, "respelt", "small", shard_size_mb=0.02)
    calls.clear()
    monkeypatch.setattr(ShardBuilder, "build", lambda self, job: calls.append(job.index) or
                        real_build(self, job))
    monkeypatch.chdir(tmp_path)
    relative = os.path.relpath(data["small"], tmp_path)
    build_corpus(CorpusConfig(inputs=(relative,), tokenizer=Path(os.path.relpath(data["tok"], tmp_path)),
                              out=data["root"] / "respelt", max_seq_length=64, workers=1, shard_size_mb=0.02))
    assert calls and min(calls) == 2 and "starting over" not in caplog.text
    said = capsys.readouterr()
    assert "resuming" not in said.out and "bertctl: resuming: 2 finished shard(s) in " in said.err
    cased = data["root"] / "tok-cased"  # the same vocab.txt, other settings: another build, not a resume
    BertTokenizer.from_vocab(VOCAB, lowercase=False).save(cased)
    _interrupt_after(monkeypatch, 1)
    with pytest.raises(KeyboardInterrupt):
        build(data, "retokenized", "small", shard_size_mb=0.02)
    monkeypatch.setattr(ShardBuilder, "build", real_build)
    build_corpus(CorpusConfig(inputs=(str(data["small"]),), tokenizer=cased, out=data["root"] / "retokenized",
                              max_seq_length=64, workers=1, shard_size_mb=0.02))
    assert "retokenized.partial holds an interrupted build of other inputs, tokenizer or settings" in caplog.text
    (data["root"] / "changed.partial").mkdir()
    (data["root"] / "changed.partial" / "build.json").write_text('{"key": "another build"}')
    build(data, "changed", "small", shard_size_mb=0.02)
    assert "changed.partial holds an interrupted build of other inputs, tokenizer or settings" in caplog.text
    other = data["root"] / "tok-other"  # another vocabulary with the same settings: another build as well
    BertTokenizer.from_vocab([*VOCAB, "##extra"], lowercase=True).save(other)
    _interrupt_after(monkeypatch, 0)
    with pytest.raises(KeyboardInterrupt):
        build(data, "revocab", "small", shard_size_mb=0.02)
    with pytest.raises(KeyboardInterrupt):
        build_corpus(CorpusConfig(inputs=(str(data["small"]),), tokenizer=other, out=data["root"] / "revocab",
                                  max_seq_length=64, workers=1, shard_size_mb=0.02))
    assert "revocab.partial holds an interrupted build of other inputs, tokenizer or settings" in caplog.text


@pytest.mark.parametrize("workers", [1, 2])
def test_resume_rebuilds_damaged_shards(data, monkeypatch, caplog, workers: int) -> None:
    """A shard file damaged after it was recorded as finished (cut short, a byte changed, its record
    spoiled) is rebuilt with a warning, never reused: the corpus is still byte for byte the uninterrupted one."""
    from bertctl.data.shards import ShardBuilder

    build(data, f"whole-{workers}", "small", shard_size_mb=0.01, validation_fraction=0.2)
    real_build, calls = _interrupt_after(monkeypatch, 4)
    with pytest.raises(KeyboardInterrupt):
        build(data, f"damaged-{workers}", "small", shard_size_mb=0.01, validation_fraction=0.2)
    shards = data["root"] / f"damaged-{workers}.partial" / "shards"
    with open(shards / "train-000000.arrow", "r+b") as handle:
        handle.truncate(1000)
    spoiled = bytearray((shards / "validation-000001.arrow").read_bytes())  # a validation file is checked too
    spoiled[-100] ^= 1
    (shards / "validation-000001.arrow").write_bytes(spoiled)
    (shards / "000002.json").write_text("{", encoding="utf-8")
    calls.clear()
    monkeypatch.setattr(ShardBuilder, "build", lambda self, job: calls.append(job.index) or
                        real_build(self, job))
    build(data, f"damaged-{workers}", "small", shard_size_mb=0.01, validation_fraction=0.2, workers=workers)
    warnings = [r.getMessage() for r in caplog.records if "rebuilding it" in r.getMessage()]
    assert len(warnings) == 3 and "\n" not in "".join(warnings)
    assert "shard 0:" in warnings[0] and "has 1000 bytes" in warnings[0]
    assert "shard 1:" in warnings[1] and "sha256" in warnings[1]
    assert "shard 2:" in warnings[2] and "000002.json" in warnings[2]
    if workers == 1:  # shard 3 was reused; the workers of a pool are not patched
        assert calls[:3] == [0, 1, 2] and 3 not in calls
    whole, resumed = data["root"] / f"whole-{workers}", data["root"] / f"damaged-{workers}"
    files = sorted(p.relative_to(whole) for p in whole.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(resumed) for p in resumed.rglob("*") if p.is_file())
    for name in files:
        assert (whole / name).read_bytes() == (resumed / name).read_bytes(), name


def test_open_partial_removes_the_temp_files_an_interrupted_build_left(tmp_path) -> None:
    """A shard file cut short by a kill (its .tmp) is never kept: only recorded shards are resumed."""
    from bertctl.corpus import open_partial

    shards = open_partial(tmp_path / "out", "key") / "shards"
    (shards / "train-000003.arrow.tmp").write_bytes(b"half")
    (shards / "000002.json").write_text("{}")
    assert open_partial(tmp_path / "out", "key") / "shards" == shards
    assert sorted(p.name for p in shards.iterdir()) == ["000002.json"]


def test_every_generator_of_a_build_has_a_seed_of_its_own(data, monkeypatch) -> None:
    """Instances, their shuffle and their masks, per shard, split and dupe, each draw from a generator seeded
    apart: two sharing a seed would draw the same numbers (dupes alike, shuffles tied to masks)."""
    real, seeds = np.random.default_rng, []
    monkeypatch.setattr(np.random, "default_rng", lambda seed=None: seeds.append(tuple(seed)) or real(seed))
    build(data, "seeded", "ordered", objective="mlm", masking="static", max_seq_length=16, dupe_factor=2,
          shard_size_mb=0.001, validation_fraction=0.25, seed=7)
    assert len(seeds) > 20 and len(set(seeds)) == len(seeds) and {seed[0] for seed in seeds} == {7}


def test_inspect_counts_over_every_batch_even_one_that_starts_inside_its_arrays() -> None:
    """A memory-mapped split is read batch by batch: the longest instance is the split's, not the last batch's,
    and a batch sliced out of a larger one (its offsets not starting at 0) shows its own masked tokens."""
    import pyarrow as pa

    from bertctl.corpus_inspect import _table_stats

    def batch(ids: list, positions: list, originals: list) -> pa.RecordBatch:
        return pa.record_batch({"input_ids": pa.array(ids), "masked_lm_positions": pa.array(positions),
                                "masked_lm_ids": pa.array(originals)})

    table = pa.Table.from_batches([batch([[2, 4, 6, 7, 3]], [[1]], [[5]]),  # [MASK] (4) for 5
                                   batch([[9, 9, 9], [2, 5, 3], [2, 8, 3]], [[1], [1], [1]], [[9], [5], [6]]).slice(1)])
    manifest = {"special_ids": {"mask": 4}, "max_seq_length": 5, "objective": "mlm", "masking": "static"}
    assert _table_stats(table, manifest) == {
        "instances": 3, "tokens": 11, "mean_length": 3.67, "max_length": 5, "padding_share": 0.2667,
        "masked_share": 0.2727, "mask_share": 0.3333, "random_share": 0.3333, "kept_share": 0.3333}


def test_inspect_shows_a_static_corpus_masks_and_masks_a_dynamic_one_row_i_with_seed_i() -> None:
    """docs/corpus.md: a static corpus's samples show its stored masks; a dynamic corpus stores none, so `corpus
    inspect` masks row i with seed i (one seed for every row showed identical rows masked alike)."""
    import datasets

    from bertctl.corpus_inspect import _samples
    from bertctl.data.masking import mask_tokens, masking_options

    tokenizer = BertTokenizer.from_vocab(VOCAB[:FIRST_BASE + 30], lowercase=True)
    ids = [tokenizer.cls_id, *range(FIRST_BASE, FIRST_BASE + 30), tokenizer.sep_id]
    manifest = {"objective": "mlm", "masked_lm_prob": 0.15, "max_predictions_per_seq": 20, "whole_word_masking": False}
    samples = _samples(datasets.Dataset.from_dict({"input_ids": [ids] * 3}), manifest, tokenizer, 3)
    shown = [[i for i, token in enumerate(sample["text"].split()) if token.startswith("<")] for sample in samples]
    options = masking_options(tokenizer, 0.15, 20, False)
    assert shown == [mask_tokens(np.asarray(ids), rng=np.random.default_rng(i), **options).positions.tolist()
                     for i in range(3)]
    assert len({tuple(positions) for positions in shown}) == 3 and [s["row"] for s in samples] == [0, 1, 2]
    static = datasets.Dataset.from_dict({"input_ids": [ids], "masked_lm_positions": [[1, 5]],
                                         "masked_lm_ids": [[FIRST_BASE + 7, FIRST_BASE + 8]]})
    [sample] = _samples(static, manifest, tokenizer, 1)
    assert [token for token in sample["text"].split() if token.startswith("<")] == [
        f"<{BASES[0]}|{BASES[7]}>", f"<{BASES[4]}|{BASES[8]}>"]


def test_cli_build_and_inspect(data) -> None:
    runner = CliRunner()
    out = data["root"] / "cli"
    args = ["corpus", "build", str(data["small"]), "--tokenizer", str(data["tok"]), "--out", str(out),
            "--max-seq-length", "48", "--masking", "static", "--workers", "1", "--objective", "mlm+sop"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "training instances" in result.output
    result = runner.invoke(app, ["corpus", "inspect", str(out), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert "samples" not in report  # the statistics alone
    assert report["objective"] == "mlm+sop" and 0.4 < report["splits"]["train"]["swapped_share"] < 0.6
    assert report["splits"]["train"]["max_length"] <= 48
    text = runner.invoke(app, ["corpus", "inspect", str(out), "--num", "1"]).stdout
    assert "<[MASK]|" in text and ("InOrder" in text or "Swapped" in text)
    again = runner.invoke(app, args)
    assert again.exit_code == 2 and "--overwrite" in again.output
    assert runner.invoke(app, [*args, "--overwrite"]).exit_code == 0


def test_a_corpus_another_bertctl_builds_is_refused_untouched_and_free_once_it_ends(data, tmp_path) -> None:
    """Two builds of one OUT would share OUT.partial/: one removed the other's shards as it published."""
    from bertctl.output_locks import output_lock

    out = tmp_path / "corpus"
    args = ["corpus", "build", str(data["small"]), "--tokenizer", str(data["tok"]), "--out", str(out),
            "--max-seq-length", "48", "--workers", "1"]
    with output_lock(out):
        refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 1 and refused.stderr.splitlines() == [
        f"bertctl: error: {out} is in use by another bertctl (pid {os.getpid()} on {socket.gethostname()}); wait "
        "for it to finish or choose another --out"]
    assert list(tmp_path.iterdir()) == []
    assert CliRunner().invoke(app, args).exit_code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]


class _Killed(BaseException):
    """kill -9 at a chosen moment: no cleanup after it."""


def test_a_kill_after_out_is_in_place_leaves_no_partial_folder_only_what_the_next_build_removes(
        data, tmp_path, monkeypatch) -> None:
    """Killed after the corpus was renamed into place, before OUT.partial/ was removed: it stayed beside the complete
    corpus, and a plain rerun (refused: OUT exists) neither removed it nor said so. It goes aside in the rename's
    step, under a hidden name of OUT's writer, which the next writer of OUT removes."""
    out = tmp_path / "corpus"
    cfg = CorpusConfig(inputs=(str(data["ordered"]),), tokenizer=data["tok"], out=out, max_seq_length=48, workers=1)
    removing = shutil.rmtree

    def killed(path, *args, **kwargs) -> None:
        if out.exists():
            raise _Killed
        removing(path, *args, **kwargs)

    with monkeypatch.context() as patched, pytest.raises(_Killed):
        patched.setattr(shutil, "rmtree", killed)
        build_corpus(cfg)
    assert load_corpus(out)[1]["counts"]["train"]["instances"] > 0
    [left] = [p for p in tmp_path.iterdir() if p.name != "corpus"]
    assert left.name.startswith(f".corpus.old-{os.getpid()}-")
    left.rename(tmp_path / left.name.replace(f"-{os.getpid()}-", "-999999999-"))  # its writer gone, as after a kill
    remove_stale_temps(out)  # as the next build of OUT does
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]


def test_a_build_that_cannot_record_its_partial_folder_names_out_and_leaves_none(data, tmp_path, monkeypatch) -> None:
    """The disk already full at the start: build.json failed, naming `OUT.partial/build.json` alone, and an empty
    OUT.partial/shards/ stayed, which the rerun then called "an interrupted build of other inputs"."""
    from bertctl import corpus as recipe
    from bertctl.files import WriteFailed

    out = tmp_path / "corpus"

    def full_disk(path, value) -> None:
        raise WriteFailed(path, OSError(28, "No space left on device"))

    monkeypatch.setattr(recipe, "write_json_atomic", full_disk)
    with pytest.raises(WriteFailed, match=rf"^cannot write {out}: No space .*\(writing {out}.partial/build.json\)$"):
        build(data, str(out), "ordered")
    assert list(tmp_path.iterdir()) == []


def test_one_sentence_documents_and_tables(data) -> None:
    """Google pairs a lone sentence with another document's text (NotNext); table rows are documents."""
    lonely = data["root"] / "lonely.txt"
    lonely.write_text("\n\n".join(" ".join(BASES[i:i + 5]) for i in range(0, 300, 5)), encoding="utf-8")
    cfg = CorpusConfig(inputs=(str(lonely),), tokenizer=data["tok"], out=data["root"] / "lonely-out",
                       workers=1)
    manifest = build_corpus(cfg)
    corpus, _ = load_corpus(cfg.out)
    assert manifest["counts"]["train"]["documents"] == 60
    assert {row["next_sentence_label"] for row in rows(corpus["train"])} == {1}
    table = data["root"] / "rows.jsonl"
    table.write_text("\n".join(json.dumps({"body": " ".join(BASES[i:i + 9]) + ". Next [MASK] [SEP] one."})
                               for i in range(0, 900, 9)), encoding="utf-8")
    cfg = CorpusConfig(inputs=(str(table),), tokenizer=data["tok"], out=data["root"] / "table-out", workers=1,
                       text_column="body")
    assert build_corpus(cfg)["counts"]["train"]["documents"] == 100
    for row in rows(load_corpus(cfg.out)[0]["train"]):  # "[MASK]" and "[SEP]" in the text are plain text
        assert 4 not in row["input_ids"] and row["input_ids"].count(3) == 2


def test_a_special_token_that_lowercasing_keeps_is_plain_text_too(data) -> None:
    """An uncased tokenizer whose mask token is "<mask>": "<mask>" and "<MASK>" in the text are "<", "mask",
    ">", as in Google's tokenizer, never the mask token (the pure-Python tokenizer keeps them whole)."""
    tok = data["root"] / "tok-angle"
    tok.mkdir()
    (tok / "vocab.txt").write_text("".join(f"{t}\n" for t in [*VOCAB, "<mask>", "<", ">", "mask"]), encoding="utf-8")
    (tok / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True, "mask_token": "<mask>"}))
    text = data["root"] / "angle.txt"
    text.write_text("\n\n".join(f"{BASES[i]} <mask> {BASES[i + 1]}. <MASK>{BASES[i + 2]} now." for i in range(40)),
                    encoding="utf-8")
    cfg = CorpusConfig(inputs=(str(text),), tokenizer=tok, out=data["root"] / "angle-out", workers=1)
    build_corpus(cfg)
    ids = [i for row in rows(load_corpus(cfg.out)[0]["train"]) for i in row["input_ids"]]
    mask, less, more, word = (len(VOCAB) + k for k in range(4))
    assert mask not in ids and ids.count(less) == ids.count(more) == ids.count(word) > 0


@pytest.mark.parametrize(("change", "message"), [
    ({"inputs": ("EMPTY",)}, "no text"),
    ({"tokenizer": Path("/nonexistent/tok")}, "tokenizer"),
    ({"max_seq_length": 1024}, "above the 512 positions"),
    ({"inputs": ("/nonexistent/*.txt",)}, "nothing matched"),
    ({"validation_fraction": 0.99}, "no training instances"),
    ({"inputs": ("JUNK_FIRST",), "validation_fraction": 0.01}, "no validation instances"),  # only document 0 held
])
def test_bad_input_fails_with_one_line_and_leaves_nothing(data, change, message) -> None:
    empty = data["root"] / "empty.txt"
    empty.write_text("\n\n  \n", encoding="utf-8")
    junk_first = data["root"] / "junk_first.txt"  # a first document that tokenises to nothing
    junk_first.write_text("\u200b \x07\n\n" + data["small"].read_text(encoding="utf-8"), encoding="utf-8")
    values = {"inputs": (str(data["small"]),), "tokenizer": data["tok"], "out": data["root"] / "bad",
              "workers": 1, **change}
    values["inputs"] = tuple({"EMPTY": str(empty), "JUNK_FIRST": str(junk_first)}.get(i, i) for i in values["inputs"])
    with pytest.raises(UsageError, match=message) as error:
        build_corpus(CorpusConfig(**values))
    assert "\n" not in str(error.value)
    assert not (data["root"] / "bad").exists() and not (data["root"] / "bad.partial").exists()


def test_bad_flags_and_unreadable_corpora(data) -> None:
    with pytest.raises(UsageError, match="--objective"):
        CorpusConfig(objective="nsp")
    with pytest.raises(UsageError, match="--masked-lm-prob"):
        CorpusConfig(masked_lm_prob=0)
    with pytest.raises(UsageError, match="does not exist"):
        load_corpus(data["root"] / "missing")
    with pytest.raises(UsageError, match="not a bertctl corpus"):
        load_corpus(data["tok"])
    with pytest.raises(UsageError, match="is a file, not a corpus folder"):
        load_corpus(data["small"])


def test_a_corpus_without_its_tokenizer_folder_says_so_and_is_never_looked_up_on_the_hub(data, monkeypatch) -> None:
    """CORPUS/tokenizer gone was read as the hub id CORPUS/tokenizer: "no such folder here, and the hub ..."."""
    import shutil

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda *a, **k: pytest.fail("looked up on the hub"))
    build(data, "no-tokenizer", source="small")
    out = data["root"] / "no-tokenizer"
    shutil.rmtree(out / "tokenizer")
    result = CliRunner().invoke(app, ["corpus", "inspect", str(out)])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert f"corpus {out} lacks its tokenizer folder {out / 'tokenizer'}; copy the tokenizer" in result.stderr
    assert CliRunner().invoke(app, ["corpus", "inspect", str(out), "--num", "0"]).exit_code == 0


def test_inspect_refuses_a_corpus_tokenizer_copy_that_is_not_the_one_it_was_built_with(data) -> None:
    """A vocab.txt cut short failed with "token id 906 is outside the vocabulary of 353", naming no file, and one
    edited in the middle decoded the instances with other tokens; the copy's sha256 is checked as pretrain does."""
    out = data["root"] / "edited-tokenizer"
    build(data, out.name, source="small")
    vocab = out / "tokenizer" / "vocab.txt"
    lines = vocab.read_text(encoding="utf-8").splitlines(keepends=True)
    vocab.write_text("".join(lines[: len(lines) // 3]), encoding="utf-8")
    (out / "tokenizer" / "tokenizer.json").unlink()  # else its vocabulary is read, vocab.txt's edit only warned of
    result = CliRunner().invoke(app, ["corpus", "inspect", str(out)])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert result.stderr.startswith(f"bertctl: error: {out / 'tokenizer'} is not the tokenizer corpus {out} was "
                                    "built with (sha256 ")
    assert CliRunner().invoke(app, ["corpus", "inspect", str(out), "--num", "0"]).exit_code == 0


def test_corpus_tokenizer_reads_the_manifest_when_not_given_one(data) -> None:
    """docs/corpus.md's `corpus_tokenizer("corpus128")` raised a TypeError once the manifest became an argument."""
    from bertctl.corpus import corpus_tokenizer, load_corpus

    out = data["root"] / "tokenizer-by-path"
    build(data, out.name, source="small")
    tokenizer = corpus_tokenizer(out)
    assert tokenizer.sha256() == corpus_tokenizer(out, load_corpus(out)[1]).sha256()
    (out / "manifest.json").write_text("{}", encoding="utf-8")
    with pytest.raises(UsageError, match="is not a bertctl corpus"):
        corpus_tokenizer(out)


@pytest.mark.parametrize("damage", ["truncated shard", "empty shard", "missing shard", "missing split"])
def test_a_damaged_corpus_says_which_and_what_to_do_in_one_line(data, damage) -> None:
    """A corpus whose Arrow files were cut short (a full disk, a copy stopped half way) or lost failed with only
    pyarrow's or datasets' words ("Expected to read 656 metadata bytes..."): the line now says to build it again."""
    import shutil

    out = data["root"] / f"damaged-{damage.replace(' ', '-')}"
    build(data, out.name, source="small")
    [shard] = (out / "train").glob("*.arrow")
    if damage == "truncated shard":
        shard.write_bytes(shard.read_bytes()[:300])
    elif damage == "empty shard":
        shard.write_bytes(b"")
    elif damage == "missing shard":
        shard.unlink()
    else:
        shutil.rmtree(out / "train")
    result = CliRunner().invoke(app, ["corpus", "inspect", str(out)])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert result.stderr.startswith(f"bertctl: error: cannot read corpus {out}: ")
    assert result.stderr.endswith("damaged or missing: build the corpus again (corpus build or corpus import, with "
                                  "--overwrite)\n")


@pytest.mark.parametrize("key", ["objective", "masking", "max_seq_length", "masked_lm_prob", "max_predictions_per_seq",
                                 "whole_word_masking", "special_ids", "counts"])
def test_a_manifest_missing_a_setting_is_one_line_naming_it(data, key) -> None:
    """A hand-edited manifest.json without one of the settings pretrain and inspect read failed with
    "KeyError: 'max_seq_length'", naming neither the file nor what to do."""
    out = data["root"] / f"manifest-without-{key}"
    build(data, out.name, source="small")
    manifest = json.loads((out / "manifest.json").read_text())
    del manifest[key]
    (out / "manifest.json").write_text(json.dumps(manifest))
    result = CliRunner().invoke(app, ["corpus", "inspect", str(out)])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert result.stderr == (f"bertctl: error: {out / 'manifest.json'} is damaged (has no {key}); restore it or "
                             "build the corpus again\n")


def test_an_unreadable_input_is_skipped_and_reported(data) -> None:
    garbage = data["root"] / "garbage.bin"
    garbage.write_bytes(bytes(range(256)) * 4)
    out = data["root"] / "with-garbage"
    result = CliRunner().invoke(app, ["corpus", "build", str(data["small"]), str(garbage), "--tokenizer",
                                      str(data["tok"]), "--out", str(out), "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert "warning: skipped" in result.stderr and "skipped 1 unreadable input(s)" in result.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert [entry["source"] for entry in manifest["skipped"]] == [str(garbage)]


def test_shard_schema_is_the_one_datasets_writes():
    """Shards are written with a schema built by pyarrow alone (no datasets import before the workers
    start); it must equal, metadata included, what datasets.Features gives for the same columns."""
    from datasets import Features, List, Value

    from bertctl.data.shards import arrow_schema, corpus_schema

    ours = arrow_schema({"input_ids": ["uint16"], "token_type_ids": ["int8"], "next_sentence_label": "int8",
                         "masked_lm_positions": ["uint16"], "masked_lm_ids": ["int32"]})
    theirs = Features({"input_ids": List(Value("uint16")), "token_type_ids": List(Value("int8")),
                       "next_sentence_label": Value("int8"), "masked_lm_positions": List(Value("uint16")),
                       "masked_lm_ids": List(Value("int32"))}).arrow_schema
    assert ours.equals(theirs, check_metadata=True)
    for vocab_size, id_type in ((65536, "uint16"), (65537, "int32")):  # ids 0..65535 fit uint16, 65536 does not
        schema = corpus_schema(vocab_size, sentence_labels=True, static=True)
        assert {str(schema.field(name).type.value_type) for name in ("input_ids", "masked_lm_ids")} == {id_type}


def test_a_script_that_builds_without_the_main_guard_fails_instead_of_hanging(data, tmp_path) -> None:
    """Spawned workers re-run the caller's script; one that builds at top level used to deadlock the parent
    (its >64 KB start-up payload never read). A vocabulary of 8,000 entries makes the tokenizer that large."""
    vocab = [*VOCAB, *(f"filler{i}" for i in range(8000))]
    BertTokenizer.from_vocab(vocab).save(tmp_path / "tok")
    script = tmp_path / "build.py"
    script.write_text("from pathlib import Path\nimport bertctl\n"
                      f"bertctl.build_corpus(bertctl.CorpusConfig(inputs=({str(data['small'])!r},), "
                      f"tokenizer=Path({str(tmp_path / 'tok')!r}), out=Path({str(tmp_path / 'c')!r}), workers=2))\n")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                            cwd=tmp_path)
    assert result.returncode == 1
    assert 'if __name__ == "__main__":' in result.stderr.strip().splitlines()[-1]
    said = ("bertctl: error: build_corpus called by a worker process while it runs your script again (as spawned "
            'workers do); put the call under `if __name__ == "__main__":`')
    assert said in result.stderr.splitlines() and result.stderr.count("Traceback") == 1, result.stderr  # no worker's


def test_a_script_piped_to_python_builds_what_one_worker_builds(data, tmp_path) -> None:
    """`python - < build.py` leaves `__main__.__file__` at `<stdin>`, a file spawned workers could not run again:
    every worker died as it started. They now skip it, as under `python -c`, and the corpus is the same bytes."""
    build(data, "stdin-reference", "small", workers=1, shard_size_mb=0.02)
    reference, out = data["root"] / "stdin-reference", tmp_path / "piped"
    script = ("from pathlib import Path\nimport bertctl\n"
              f"bertctl.build_corpus(bertctl.CorpusConfig(inputs=({str(data['small'])!r},), "
              f"tokenizer=Path({str(data['tok'])!r}), out=Path({str(out)!r}), max_seq_length=64, workers=2, "
              "shard_size_mb=0.02))\n")
    result = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True, timeout=120,
                            cwd=tmp_path, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert result.returncode == 0, result.stderr[-3000:]
    files = sorted(p.relative_to(reference) for p in reference.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    for name in files:
        assert (reference / name).read_bytes() == (out / name).read_bytes(), name


@pytest.mark.parametrize(("main_file", "skipped"), [("<stdin>", True), ("gone.py", True), (__file__, False)])
def test_workers_skip_only_a_main_file_they_could_not_read(monkeypatch, tmp_path, main_file, skipped) -> None:
    """What spawn sends a worker (get_preparation_data) names no main file to run while the block lasts, where
    that file cannot be read; a readable script is still run, as its guarded top level may be needed there."""
    from multiprocessing import spawn
    from types import ModuleType

    from bertctl.worker_processes import unreadable_main_skipped

    main = ModuleType("__main__")
    main.__file__ = main_file
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.chdir(tmp_path)
    with unreadable_main_skipped():
        assert ("init_main_from_path" not in spawn.get_preparation_data("w")) is skipped
    assert main.__file__ == main_file


def test_a_shard_of_one_large_document_holds_a_few_bytes_a_token(data, tmp_path) -> None:
    """A file without blank lines is one document and one shard, however large: its token ids are kept as
    int32 arrays (not lists of Python ints, ~36 bytes a token) and its instances are shuffled without int64
    index arrays the size of the shard (~40 bytes a token): a 150 MB file peaked at 2.2 GB, now 0.9 GB."""
    import tracemalloc

    from bertctl.data.shards import ShardBuilder, ShardJob, shard_settings
    from bertctl.tokenizer_folder import load_tokenizer

    lines = [line for line in _prose(np.random.default_rng(1), documents=300).splitlines() if line]
    cfg = CorpusConfig(inputs=("x",), tokenizer=data["tok"], out=tmp_path / "out", max_seq_length=64)
    (tmp_path / "shards").mkdir()
    settings = shard_settings(cfg, load_tokenizer(data["tok"]), tmp_path / "shards")
    builder = ShardBuilder(settings)
    builder.build(ShardJob(1, 0, [lines[:50]], 1000, 0))  # imports and first-call allocations out of the way
    job = ShardJob(0, 0, [lines], sum(len(line) + 1 for line in lines), 0)
    tracemalloc.start()
    try:
        stats = builder.build(job)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    tokens = stats["train"]["tokens"]
    assert tokens > 80_000 and stats["train"]["documents"] == 1
    assert peak / tokens < 45, f"{peak / tokens:.1f} bytes a token"  # 73 before, 33 now (many short instances)


class _Uniforms:
    """One stream of uniforms read by both sides: numpy-style calls for bertctl, random.Random-style for the port
    of Google's code (randint(a, b) inclusive), so equal call sequences give equal draws."""

    def __init__(self, seed: int) -> None:
        self.values, self.at = np.random.default_rng(seed).random(100_000), 0

    def _next(self) -> float:
        self.at += 1
        return float(self.values[self.at - 1])

    def random(self, size: int | None = None):  # numpy's Generator.random and random.Random.random
        return self._next() if size is None else np.array([self._next() for _ in range(size)])

    def integers(self, low: int, high: int) -> int:
        return low + int(self._next() * (high - low))

    def randint(self, low: int, high: int) -> int:
        return low + int(self._next() * (high - low + 1))


def _google_instances(documents: list[list[list[int]]], index: int, max_seq_length: int, short_seq_prob: float,
                      rng: _Uniforms) -> list[tuple[list[int], int]]:
    """create_instances_from_document of google-research/bert (masking left out), the random document drawn in
    one step among the others as bertctl does (Google retries up to 10 times)."""
    document, max_tokens = documents[index], max_seq_length - 3
    target = rng.randint(2, max_tokens) if rng.random() < short_seq_prob else max_tokens
    instances, chunk, length, i = [], [], 0, 0
    while i < len(document):
        chunk.append(document[i])
        length += len(document[i])
        if i == len(document) - 1 or length >= target:
            a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            a = [t for sentence in chunk[:a_end] for t in sentence]
            b: list[int] = []
            if len(chunk) == 1 or rng.random() < 0.5:
                others = [d for d in range(len(documents)) if d != index]
                other = documents[others[rng.randint(0, len(others) - 1)]]
                for sentence in other[rng.randint(0, len(other) - 1):]:
                    b += sentence
                    if len(b) >= target - len(a):
                        break
                i -= len(chunk) - a_end
                label = 1
            else:
                b, label = [t for sentence in chunk[a_end:] for t in sentence], 0
            while len(a) + len(b) > max_tokens:  # truncate_seq_pair
                longer = a if len(a) > len(b) else b
                del longer[0 if rng.random() < 0.5 else -1]
            instances.append(([2, *a, 3, *b, 3], label))
            chunk, length = [], 0
        i += 1
    return instances


def _drawn_instances(objective: str, seed: int, is_continuation: np.ndarray):
    """bertctl's instances of every document of 150 random document sets (several lengths and short-sequence
    probabilities), each with what a port of the reference needs to draw the same: (ours, documents, index,
    max_seq_length, short_seq_prob, the draws' seed)."""
    from bertctl.data.instances import Document, Instances, document_instances

    gen = np.random.default_rng(seed)
    for _ in range(150):
        documents = [[gen.integers(10, 99, int(gen.choice([1, 3, 8, 30, 200]))).tolist()
                      for _ in range(int(gen.integers(1, 12)))] for _ in range(int(gen.integers(2, 5)))]
        docs = [Document(np.array([t for s in d for t in s], np.int32), np.cumsum([0, *map(len, d)]))
                for d in documents]
        max_seq_length, short_seq_prob = int(gen.choice([5, 16, 64, 128])), float(gen.choice([0.0, 0.1, 1.0]))
        for index in range(len(documents)):
            draws, out = int(gen.integers(1 << 30)), Instances()
            document_instances(out, docs, index, list(range(len(docs))), objective=objective,
                               max_seq_length=max_seq_length, short_seq_prob=short_seq_prob, cls_id=2, sep_id=3,
                               rng=_Uniforms(draws), is_continuation=is_continuation)
            ours = [(np.concatenate(out.pieces[out.starts[k]:out.starts[k + 1]]).tolist(), out.labels[k])
                    for k in range(len(out.lengths))]
            yield ours, documents, index, max_seq_length, short_seq_prob, draws


def test_nsp_instances_equal_a_port_of_googles_code_draw_for_draw() -> None:
    for ours, documents, index, length, short, draws in _drawn_instances("mlm+nsp", 0, np.zeros(100, bool)):
        assert ours == _google_instances(documents, index, length, short, _Uniforms(draws))


def _albert_sop_instances(documents: list[list[list[int]]], index: int, max_seq_length: int, short_seq_prob: float,
                          rng: _Uniforms, is_continuation: np.ndarray) -> list[tuple[list[int], int]]:
    """create_instances_from_document of google-research/albert with random_next_sentence=False (masking left
    out): swap by a coin, then truncate_seq_pair (a random end of the longer segment, so a `##` piece may open
    one). A lone sentence is bertctl's documented cut before a random word, where ALBERT draws another document."""
    document, max_tokens = documents[index], max_seq_length - 3
    target = rng.randint(2, max_tokens) if rng.random() < short_seq_prob else max_tokens
    instances, chunk, length = [], [], 0
    for i, sentence in enumerate(document):
        chunk.append(sentence)
        length += len(sentence)
        if i == len(document) - 1 or length >= target:
            a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            a = [t for s in chunk[:a_end] for t in s]
            b = [t for s in chunk[a_end:] for t in s]
            chunk, length = [], 0
            if not b:
                cuts = [k for k in range(1, len(a)) if not is_continuation[a[k]]]
                if not cuts:
                    continue
                cut = cuts[rng.randint(0, len(cuts) - 1)]
                a, b = a[:cut], a[cut:]
            label = int(rng.random() < 0.5)
            if label:
                a, b = b, a
            while len(a) + len(b) > max_tokens:  # truncate_seq_pair
                longer = a if len(a) > len(b) else b
                del longer[0 if rng.random() < 0.5 else -1]
            instances.append(([2, *a, 3, *b, 3], label))
    return instances


def test_sop_instances_equal_a_port_of_alberts_code_draw_for_draw() -> None:
    """ALBERT truncates after the swap, at a random end, as Google's NSP: a `##` piece may then open a segment."""
    is_continuation = np.arange(100) >= 70
    for ours, documents, index, length, short, draws in _drawn_instances("mlm+sop", 1, is_continuation):
        assert ours == _albert_sop_instances(documents, index, length, short, _Uniforms(draws), is_continuation)


def test_max_seq_length_may_fill_the_first_declared_position_table(tmp_path) -> None:
    """The limit is the first of config.json, bert_config.json and tokenizer_config.json that declares one, and a
    corpus may use every position of it."""
    from bertctl.corpus import check_length

    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 64}))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 512}))
    check_length(64, tmp_path)
    with pytest.raises(UsageError, match=r"--max-seq-length 65 is above the 64 positions of .*config.json "
                                         r"\(max_position_embeddings\)"):
        check_length(65, tmp_path / "vocab.txt")
