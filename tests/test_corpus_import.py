"""`corpus import`: Google's pre-training TFRecords, written here from the spec (framing, CRC32C and protobuf by
hand, independent of the reader), become the corpus `corpus build` makes of the same instances."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from bertctl.cli import app
from bertctl.config import CorpusConfig, CorpusImportConfig, PretrainConfig
from bertctl.corpus import build_corpus, load_corpus
from bertctl.corpus_import import import_corpus
from bertctl.corpus_inspect import inspect_corpus
from bertctl.data.shards import is_validation
from bertctl.errors import BertctlError, UsageError
from bertctl.tokenizer import BertTokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

WORDS = ("the cat dog bird fish sat ran flew swam on under over a mat log tree pond quickly slowly happily "
         "red blue green big small old young and then later").split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", *WORDS]
SEQ, PREDICTIONS = 32, 5

# --- a TFRecord writer from the spec ------------------------------------------------------------------------


def _crc_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


CRC_TABLE = _crc_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def test_the_writer_follows_the_spec() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert varint(300) == b"\xac\x02" and varint(-1) == b"\xff" * 9 + b"\x01"  # protobuf's own examples
    assert field(1, b"testing") == b"\x0a\x07testing"


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # int64 as protobuf writes it: two's complement, 10 bytes when negative
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def int64_feature(values: list[int], packed: bool = True) -> bytes:
    if packed:
        body = field(1, b"".join(varint(v) for v in values))
    else:
        body = b"".join(varint(1 << 3 | 0) + varint(v) for v in values)
    return field(3, body)


def float_feature(values: list[float], packed: bool = True) -> bytes:
    if packed:
        body = field(1, struct.pack(f"<{len(values)}f", *values))
    else:
        body = b"".join(varint(1 << 3 | 5) + struct.pack("<f", v) for v in values)
    return field(2, body)


def example(features: dict[str, bytes]) -> bytes:
    entries = b"".join(field(1, field(1, name.encode()) + field(2, value)) for name, value in features.items())
    return field(1, entries)


def tfrecord(records: list[bytes]) -> bytes:
    out = bytearray()
    for data in records:
        length = struct.pack("<Q", len(data))
        out += length + struct.pack("<I", masked_crc(length)) + data + struct.pack("<I", masked_crc(data))
    return bytes(out)


def google_example(row: dict, packed: bool = True, reverse: bool = False, seq: int = SEQ,
                   predictions: int = PREDICTIONS) -> bytes:
    """Google's write_instance_to_example_files for one instance (a bertctl corpus row)."""
    features = google_features(row, packed, seq, predictions)
    return example(dict(reversed(features.items())) if reverse else features)


def google_features(row: dict, packed: bool = True, seq: int = SEQ, predictions: int = PREDICTIONS
                    ) -> dict[str, bytes]:
    """The features of google_example, by name."""
    ids, positions = row["input_ids"], row["masked_lm_positions"]
    pad, slots = seq - len(ids), predictions - len(positions)
    return {
        "input_ids": int64_feature(ids + [0] * pad, packed),
        "input_mask": int64_feature([1] * len(ids) + [0] * pad, packed),
        "segment_ids": int64_feature(row["token_type_ids"] + [0] * pad, packed),
        "masked_lm_positions": int64_feature(positions + [0] * slots, packed),
        "masked_lm_ids": int64_feature(row["masked_lm_ids"] + [0] * slots, packed),
        "masked_lm_weights": float_feature([1.0] * len(positions) + [0.0] * slots, packed),
        "next_sentence_labels": int64_feature([row["next_sentence_label"]], packed),
    }


# --- fixtures -----------------------------------------------------------------------------------------------


def _write_text(path: Path, documents: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(documents):
        for _ in range(int(rng.integers(4, 9))):
            lines.append(" ".join(rng.choice(WORDS, int(rng.integers(4, 9)))) + " .")
        lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    """A static corpus bertctl built, and its rows as Google's TFRecords: half plain and unpacked, half gzip."""
    root = tmp_path_factory.mktemp("import")
    BertTokenizer.from_vocab(VOCAB).save(root / "tok")
    _write_text(root / "docs.txt", documents=30, seed=0)
    build_corpus(CorpusConfig(inputs=(str(root / "docs.txt"),), tokenizer=root / "tok", out=root / "built",
                              max_seq_length=SEQ, max_predictions_per_seq=PREDICTIONS, masking="static", workers=1,
                              seed=1))
    corpus, manifest = load_corpus(root / "built")
    rows = corpus["train"].to_list()
    half = len(rows) // 2
    (root / "tf_examples.tfrecord-0").write_bytes(
        tfrecord([google_example(r, packed=False, reverse=True) for r in rows[:half]]))
    (root / "tf_examples.tfrecord-1").write_bytes(gzip.compress(tfrecord([google_example(r) for r in rows[half:]])))
    return {"root": root, "tok": root / "tok", "rows": rows, "manifest": manifest,
            "files": [root / "tf_examples.tfrecord-0", root / "tf_examples.tfrecord-1"]}


def imported(built: dict, out: str, files: list[Path] | None = None, **flags) -> Path:
    cfg = CorpusImportConfig(inputs=tuple(str(f) for f in files or built["files"]), tokenizer=built["tok"],
                             out=built["root"] / out, **{"workers": 1, **flags})
    import_corpus(cfg)
    return cfg.out


# --- the import ---------------------------------------------------------------------------------------------


def test_the_imported_corpus_is_the_built_one_row_for_row(built) -> None:
    out = imported(built, "imported")
    corpus, manifest = load_corpus(out)
    assert list(corpus) == ["train"]
    assert corpus["train"].features == load_corpus(built["root"] / "built")[0]["train"].features
    assert corpus["train"].to_list() == built["rows"]
    mine = built["manifest"]
    for key in ("objective", "masking", "max_seq_length", "max_predictions_per_seq", "tokenizer_sha256",
                "tokenizer_settings", "vocab_size", "special_ids", "splits"):
        assert manifest[key] == mine[key], key
    assert manifest["source"] == "google-tfrecord" and manifest["masked_lm_prob"] is None
    for key in ("instances", "instance_tokens", "label_1", "masked", "masked_as_mask", "masked_as_random",
                "masked_as_kept"):
        assert manifest["counts"]["train"][key] == mine["counts"]["train"][key], key
    assert [(i["sha256"], i["compression"], i["bytes"]) for i in manifest["inputs"]] == [
        (hashlib.sha256(f.read_bytes()).hexdigest(), c, f.stat().st_size)
        for f, c in zip(built["files"], [None, "gzip"], strict=True)]
    assert sum(i["records"] for i in manifest["inputs"]) == len(built["rows"])
    assert (out / "tokenizer" / "vocab.txt").read_text() == (built["root"] / "built" / "tokenizer" / "vocab.txt"
                                                             ).read_text()
    report, theirs = inspect_corpus(out, num=2), inspect_corpus(built["root"] / "built", num=2)
    for key in ("instances", "tokens", "mean_length", "padding_share", "notnext_share", "masked_share",
                "mask_share", "random_share", "kept_share"):
        assert report["splits"]["train"][key] == theirs["splits"]["train"][key], key
    assert "short_share" not in report["splits"]["train"] and "documents" not in report["splits"]["train"]
    assert report["samples"] == theirs["samples"]


def pretraining_losses(corpus: Path, run: Path, steps: int) -> list[tuple[float, float]]:
    """(mlm_loss, nsp_loss) of each step of a tiny pre-training run on `corpus`, the same settings every time."""
    from bertctl.pretrain import pretrain

    pretrain(PretrainConfig(corpus=corpus, out=run, model_config="tiny", steps=steps, batch_size=8, lr=1e-3,
                            warmup_steps=1, log_every=1, save_every=0, eval_every=0, seed=3, num_workers=0,
                            device="cpu"))
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [(r["mlm_loss"], r["nsp_loss"]) for r in rows if "loss" in r]


def test_pretraining_on_the_imported_corpus_gives_the_built_ones_losses(built, tmp_path) -> None:
    built_losses = pretraining_losses(built["root"] / "built", tmp_path / "built", 4)
    assert len(built_losses) == 4
    assert pretraining_losses(imported(built, "to-train"), tmp_path / "to-train", 4) == built_losses


def test_validation_fraction_holds_out_every_nth_record_as_build_does(built) -> None:
    corpus, manifest = load_corpus(imported(built, "held", validation_fraction=0.25))
    held = [is_validation(i, 0.25) for i in range(len(built["rows"]))]
    assert corpus["validation"].to_list() == [r for r, h in zip(built["rows"], held, strict=True) if h]
    assert corpus["train"].to_list() == [r for r, h in zip(built["rows"], held, strict=True) if not h]
    assert manifest["splits"] == ["train", "validation"] and manifest["validation_fraction"] == 0.25


def test_the_predictions_are_the_slots_masked_lm_weights_marks_even_at_position_0(built, tmp_path) -> None:
    """Google's loss weighs each slot by masked_lm_weights: a prediction of the [CLS] at position 0 (kept as it
    is) is one, though Google's writer never makes it; its 0 is no padding."""
    row = dict(built["rows"][0])
    row["masked_lm_positions"] = [0, *row["masked_lm_positions"][1:]]
    row["masked_lm_ids"] = [row["input_ids"][0], *row["masked_lm_ids"][1:]]
    (tmp_path / "zero.tfrecord").write_bytes(tfrecord([google_example(row)]))
    cfg = CorpusImportConfig(inputs=(str(tmp_path / "zero.tfrecord"),), tokenizer=built["tok"], out=tmp_path / "out",
                             workers=1)
    import_corpus(cfg)
    assert load_corpus(cfg.out)[0]["train"].to_list() == [row]


def test_zlib_files_and_folders(built) -> None:
    folder = built["root"] / "zlib"
    folder.mkdir()
    (folder / "part-0.tfrecord.zz").write_bytes(zlib.compress(tfrecord([google_example(r) for r in built["rows"]])))
    corpus, manifest = load_corpus(imported(built, "from-zlib", files=[folder]))
    assert corpus["train"].to_list() == built["rows"] and manifest["inputs"][0]["compression"] == "zlib"


# --- refusals -----------------------------------------------------------------------------------------------


def _damaged(built: dict, kind: str) -> tuple[bytes, str]:
    """A file's bytes and what the one-line error must say."""
    plain = tfrecord([google_example(r) for r in built["rows"][:6]])
    first = len(tfrecord([google_example(built["rows"][0])]))
    if kind == "corrupted byte":
        data = bytearray(plain)
        data[first + 30] ^= 0x01  # inside record 2's data
        return bytes(data), rf"record 2: the record's data \(byte {first + 12}\) does not match its checksum"
    if kind == "corrupted length":
        data = bytearray(plain)
        data[first * 2] ^= 0x40  # record 3's length
        return bytes(data), "record 3: the record's length .* does not match its checksum"
    if kind == "truncated":
        return plain[:-7], "record 6: the file ends inside the record"
    if kind == "truncated gzip":
        return gzip.compress(plain)[:-20], "record [0-9]+: the gzip data is truncated or corrupt"
    if kind == "joined zlib":
        return zlib.compress(plain) + zlib.compress(plain), \
            rf"record 7: bytes follow the end of the ZLIB stream \(from byte {len(zlib.compress(plain))} of the file\)"
    if kind == "truncated zlib":
        return zlib.compress(plain)[:-4], "record 7: the zlib data is truncated or corrupt"  # no end marker
    if kind == "cut inside the first header":
        return plain[:7], r"record 1: the file ends inside the record's header \(byte 0\)"
    if kind == "huge length":
        length = struct.pack("<Q", 1 << 40)  # its checksum checks out: the length itself is the damage
        return length + struct.pack("<I", masked_crc(length)) + plain, \
            "record 1: the record claims 1099511627776 bytes, far more than a pre-training example holds"
    if kind == "odd feature names":
        return tfrecord([example({"input_ids\n\x1b[31m": int64_feature([2, 3])})]), \
            r"record 1: not a pre-training example .*no input_ids, .*its features: 'input_ids\\n\\x1b\[31m'\)"
    if kind == "not a tfrecord":
        # "He": its first byte's low bits say deflate, as a ZLIB header's do, but the pair is no ZLIB header
        return b"He sat on the mat .\n" * 10, "record 1: the record's length .* does not match its checksum"
    if kind == "run_classifier":
        classifier = example({"input_ids": int64_feature([2, 9, 3] + [0] * 5),
                              "input_mask": int64_feature([1] * 3 + [0] * 5),
                              "segment_ids": int64_feature([0] * 8), "label_ids": int64_feature([1]),
                              "is_real_example": int64_feature([1])})
        return tfrecord([classifier]), ("record 1: not a pre-training example of Google's create_pretraining_data.py "
                                        r"\(run_classifier's .*no masked_lm_positions")
    if kind == "other lengths":
        rows = built["rows"][:3]
        return tfrecord([google_example(rows[0]), google_example(rows[1]), google_example(rows[2], seq=SEQ + 4)]), \
            f"record 3: max_seq_length {SEQ + 4} .* but .* record 1 has {SEQ} .*all records must agree"
    if kind == "float ids":
        features = {"input_ids": float_feature([2.0, 3.0]), "input_mask": int64_feature([1, 1]),
                    "segment_ids": int64_feature([0, 0]), "masked_lm_positions": int64_feature([1]),
                    "masked_lm_ids": int64_feature([5]), "masked_lm_weights": float_feature([1.0]),
                    "next_sentence_labels": int64_feature([0])}
        return tfrecord([example(features)]), "record 1: feature input_ids is a float_list, Google's is a int64_list"
    if kind == "position past the tokens":
        row = dict(built["rows"][0])
        row["masked_lm_positions"] = [len(row["input_ids"]) + 1, *row["masked_lm_positions"][1:]]
        return tfrecord([google_example(built["rows"][1]), google_example(row)]), \
            "record 2: masked_lm_positions holds [0-9]+, outside the [0-9]+ tokens"
    if kind == "int64 past 64 bits":
        row = google_example(built["rows"][0])
        huge = varint(1 << 3 | 0) + bytes([0x80] * 9 + [0x04])  # an unpacked value of 2**65
        features = {"input_ids": field(3, varint(1 << 3 | 0) + varint(2) + huge + varint(1 << 3 | 0) + varint(3)),
                    "input_mask": int64_feature([1] * 3), "segment_ids": int64_feature([0] * 3),
                    "masked_lm_positions": int64_feature([1]), "masked_lm_ids": int64_feature([5]),
                    "masked_lm_weights": float_feature([1.0]), "next_sentence_labels": int64_feature([0])}
        return tfrecord([row, example(features)]), "record 2: not a tf.train.Example"
    if kind == "packed int64 past 64 bits":
        ids = built["rows"][0]["input_ids"] + [0] * (SEQ - len(built["rows"][0]["input_ids"]))
        features = google_features(built["rows"][0])  # the second id as a packed value of 11 bytes: 2**70
        features["input_ids"] = field(3, field(1, varint(ids[0]) + bytes([0x80] * 10 + [0x01]) +
                                               b"".join(varint(v) for v in ids[2:])))
        return tfrecord([google_example(built["rows"][0]), example(features)]), "record 2: not a tf.train.Example"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["corrupted byte", "corrupted length", "truncated", "truncated gzip",
                                  "not a tfrecord", "run_classifier", "other lengths", "float ids",
                                  "position past the tokens", "int64 past 64 bits", "packed int64 past 64 bits",
                                  "joined zlib", "odd feature names", "truncated zlib", "cut inside the first header",
                                  "huge length"])
def test_bad_records_fail_in_one_line_naming_file_and_record_and_write_nothing(built, kind) -> None:
    data, said = _damaged(built, kind)
    bad = built["root"] / f"bad-{kind.replace(' ', '-')}.tfrecord"
    bad.write_bytes(data)
    with pytest.raises(UsageError, match=said) as error:
        imported(built, "bad", files=[built["files"][0], bad])
    assert "\n" not in str(error.value) and str(bad) in str(error.value)
    assert not (built["root"] / "bad").exists() and not (built["root"] / "bad.partial").exists()


@pytest.mark.parametrize(("name", "named"), [("shard.hdf5", True), ("shard.H5", True), ("shard.tfrecord", False)])
def test_a_file_named_hdf5_without_its_signature_says_why_it_was_read_as_tfrecords(built, name, named) -> None:
    bad = built["root"] / name
    bad.write_bytes(b"He sat on the mat .\n" * 10)  # a shard cut at its start, or text renamed: no HDF5 signature
    with pytest.raises(UsageError, match="record 1: the record's length") as error:
        imported(built, "bad", files=[bad])
    assert ("lacks HDF5's signature, so it was read as a TFRecord file" in str(error.value)) == named


@pytest.mark.parametrize(("changed", "said"), [
    ({"next_sentence_labels": float_feature([0.0])}, "feature next_sentence_labels is a float_list, Google's is a "
                                                     "int64_list"),
    ({"segment_ids": int64_feature([0] * (SEQ - 1))},
     f"features of unequal lengths: input_ids {SEQ}, input_mask {SEQ}, segment_ids {SEQ - 1}"),
    ({"next_sentence_labels": int64_feature([])}, "next_sentence_labels holds 0 values, not 1"),
    ({name: int64_feature([]) for name in ("input_ids", "input_mask", "segment_ids")}, "input_ids is empty"),
])
def test_a_records_features_are_checked_by_kind_and_length(built, changed, said) -> None:
    from bertctl.data.pretraining_records import record_items
    from bertctl.data.tfrecord import BadRecord, parse_example

    features = {**google_features(built["rows"][0]), **changed}
    with pytest.raises(BadRecord, match=f"^{re.escape(said)}$"):
        record_items(parse_example(example(features)), None)


def _broken(kind: str, columns: list[np.ndarray], r: int, n: int) -> str:
    """Break record r (of n tokens) of a block's columns as `kind` says; what the check must say."""
    ids, mask, types, positions, labels, weights, nsp = columns
    fix = f"outside the vocabulary of vocab ({len(VOCAB)} ids): give the vocabulary the records were made with"
    if kind == "one token":
        mask[r] = 0
        mask[r, 0] = 1
        return "input_mask is not 1 for each token then 0 for the padding (with at least 2 tokens)"
    if kind == "id of the vocabulary's size":
        ids[r, 1] = len(VOCAB)
        return f"input id {len(VOCAB)} is {fix}"
    if kind in ("no [CLS] first", "no [SEP] last"):
        first, last = (5, 3) if kind == "no [CLS] first" else (2, 5)
        ids[r, 0], ids[r, n - 1] = first, last
        return (f"the tokens run from id {first} to id {last}, not from [CLS] (2) to [SEP] (3) of vocab: give the "
                "vocabulary the records were made with")
    if kind == "segment 2":
        types[r, 1] = 2
        return "segment_ids holds a value other than 0 or 1"
    if kind == "a weight's hole":
        weights[r] = [1, 0, 1, 0, 0]
        return "masked_lm_weights is not 1.0 for each prediction then 0.0 for the padding"
    if kind == "position of the token count":
        positions[r, 1] = n
        return f"masked_lm_positions holds {n}, outside the {n} tokens"
    if kind == "position 0 twice":
        positions[r, :2] = 0
        return "masked_lm_positions holds a position twice"
    if kind == "label of the vocabulary's size":
        labels[r, 1] = len(VOCAB)
        return f"masked_lm_ids holds {len(VOCAB)}, {fix}"
    if kind == "next sentence label 2":
        nsp[r] = 2
        return "next_sentence_labels is 2, not 0 (IsNext) or 1 (NotNext)"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["one token", "id of the vocabulary's size", "no [CLS] first", "no [SEP] last",
                                  "segment 2", "a weight's hole",
                                  "position of the token count", "position 0 twice", "label of the vocabulary's size",
                                  "next sentence label 2"])
def test_a_blocks_check_names_its_first_bad_record(built, kind) -> None:
    """Records 12 and 13 of a block from record 10 are bad the same way: record 12 is named, for what it is."""
    from bertctl.data.pretraining_records import RecordBlock, Shape, record_items
    from bertctl.data.tfrecord import BadRecord, parse_example

    rows = [r for r in built["rows"] if len(r["masked_lm_positions"]) >= 2][:4]
    block = RecordBlock(first=9)
    block.rows = [record_items(parse_example(google_example(r)), None) for r in rows]
    columns = [c.copy() for c in block.columns(Shape(SEQ, PREDICTIONS, "record 10"))]
    block.check(columns, len(VOCAB), 2, 3, "vocab")  # unbroken, they pass
    said = [_broken(kind, columns, r, len(rows[r]["input_ids"])) for r in (2, 3)][0]
    with pytest.raises(BadRecord, match=f"^record 12: {re.escape(said)}$"):
        block.check(columns, len(VOCAB), 2, 3, "vocab")


def test_records_are_checked_and_decoded_a_block_at_a_time_in_order(built, monkeypatch) -> None:
    """Blocks of 4 records: the same rows, read a block at a time, and a failure names the first bad record,
    wherever blocks begin."""
    import io

    from bertctl.data.tfrecord import HashedReader, read_records

    monkeypatch.setattr("bertctl.corpus_import.BLOCK_ROWS", 4)
    monkeypatch.setattr("bertctl.data.tfrecord.CHECK_BLOCK", 4)
    corpus, _ = load_corpus(imported(built, "small-blocks"))
    assert corpus["train"].to_list() == built["rows"]
    records = [google_example(r) for r in built["rows"][:9]]
    source = HashedReader(io.BytesIO(tfrecord(records)))
    stream = read_records(source, None)
    assert next(stream) == records[0] and source.count == len(tfrecord(records[:4]))  # one block read, not all
    data = bytearray(tfrecord(records))
    data[len(tfrecord(records[:5])) + 40] ^= 0x01  # record 6, in the second block
    not_example = tfrecord([records[0], b"\xff" * 30, *records[2:]])[:-9]  # record 2 bad, and then cut short
    rows = [dict(r) for r in built["rows"][:9]]
    rows[5]["input_ids"] = [rows[5]["input_ids"][0], 99_999, *rows[5]["input_ids"][2:]]
    unknown = tfrecord([google_example(r) for r in rows])  # record 6 fails its block's check
    for contents, said in [(bytes(data), "record 6: the record's data"), (not_example, "record 2: not a tf.train"),
                           (unknown, "record 6: input id 99999")]:
        bad = built["root"] / "blocks.tfrecord"
        bad.write_bytes(contents)
        with pytest.raises(UsageError, match=said):
            imported(built, "bad-blocks", files=[bad])
        assert not (built["root"] / "bad-blocks").exists()


def test_a_file_that_changed_after_it_was_counted_is_refused(built, tmp_path) -> None:
    """A worker's file is counted first: more records or fewer when it is read mean something wrote to it."""
    from bertctl.corpus_import import _FileJob, _import_one, _Vocabulary

    cfg = CorpusImportConfig(inputs=(str(built["files"][0]),), tokenizer=built["tok"], out=tmp_path / "out")
    records = len(built["rows"]) // 2
    for counted in (records - 1, records + 1):
        (tmp_path / str(counted)).mkdir()
        job = _FileJob(0, built["files"][0], 0, None, False, tmp_path / str(counted),
                       _Vocabulary(len(VOCAB), 2, 3, 4, "vocab"), cfg, counted=counted)
        with pytest.raises(BertctlError, match="tfrecord-0 changed while it was imported"):
            _import_one(job, lambda rows, read: None)


def test_the_first_bad_record_is_named_when_a_later_one_fails_before_its_block_is_checked(built) -> None:
    """Records are checked against the vocabulary a block at a time: a record that fails to parse (or a damaged
    one) after them must not hide an earlier bad record."""
    rows = [dict(r) for r in built["rows"][:7]]
    rows[1]["input_ids"] = [rows[1]["input_ids"][0], 99_999, *rows[1]["input_ids"][2:]]  # record 2: not in the vocab
    records = [google_example(r) for r in rows]
    not_example = tfrecord([*records[:4], b"\xff" * 30, *records[5:]])  # record 5 is no tf.train.Example
    damaged = bytearray(tfrecord(records))
    damaged[len(tfrecord(records[:5])) + 40] ^= 0x01  # record 6's data
    for contents in (not_example, bytes(damaged)):
        bad = built["root"] / "earlier.tfrecord"
        bad.write_bytes(contents)
        with pytest.raises(UsageError, match="record 2: input id 99999 is outside the vocabulary"):
            imported(built, "earlier", files=[bad])
        assert not (built["root"] / "earlier").exists()


def test_a_zlib_stream_ending_at_a_read_chunks_end_is_still_followed_by_nothing() -> None:
    """Bytes after the stream are refused where they start a read of their own (no unused_data), not lost."""
    import io

    from bertctl.data.tfrecord import BadRecord, HashedReader, read_records

    data = np.random.default_rng(0).integers(0, 256, 1 << 16, dtype=np.uint8).tobytes()
    overhead = len(zlib.compress(tfrecord([data[:60_000]]), 0)) - 60_000  # level 0: stored, one block
    stream = zlib.compress(tfrecord([data[:(1 << 16) - overhead]]), 0)
    assert len(stream) == 1 << 16
    records = read_records(HashedReader(io.BytesIO(stream + zlib.compress(tfrecord([b"lost"])))), "zlib")
    with pytest.raises(BadRecord, match="bytes follow the end of the ZLIB stream \\(from byte 65536 of the file\\)"):
        list(records)


@pytest.mark.parametrize("seq", [65535, 65536])
def test_max_seq_length_past_65535_is_refused_whatever_the_tokenizer_declares(built, seq) -> None:
    """The corpus stores positions as uint16 and build stops at 65535: a folder may declare more by hand."""
    folder = built["root"] / "tok-70000"
    if not folder.exists():
        BertTokenizer.from_vocab(VOCAB).save(folder)
        (folder / "config.json").write_text(json.dumps({"max_position_embeddings": 70_000}))
    record = built["root"] / f"long-{seq}.tfrecord"
    record.write_bytes(tfrecord([google_example(built["rows"][0], seq=seq)]))
    cfg = CorpusImportConfig(inputs=(str(record),), tokenizer=folder, out=built["root"] / f"long-{seq}", workers=1)
    if seq > 65535:
        with pytest.raises(UsageError, match=rf"record 1: max_seq_length {seq} is past what a corpus stores \(65535\)"):
            import_corpus(cfg)
        assert not cfg.out.exists()
    else:
        import_corpus(cfg)
        corpus, manifest = load_corpus(cfg.out)
        assert corpus["train"].to_list() == built["rows"][:1] and manifest["max_seq_length"] == seq


def test_an_arrow_file_is_written_once_its_rows_reach_the_token_limit(tmp_path) -> None:
    """A file is written as soon as its pending rows hold SHARD_TOKENS tokens, not one block later."""
    from bertctl.corpus_import import _Shards
    from bertctl.data.instances import Packed
    from bertctl.data.shards import corpus_schema

    shards = _Shards(tmp_path, corpus_schema(100, sentence_labels=True, static=True), 4, first=7, tokens=10)
    packed = Packed(input_ids=np.arange(10, dtype=np.int32), offsets=np.array([0, 4, 10]),
                    token_type_ids=np.zeros(10, np.int8), labels=np.array([0, 1], np.int8), short=np.zeros(2, bool),
                    masked_positions=np.array([1, 2]), masked_ids=np.array([50, 60]),
                    masked_offsets=np.array([0, 1, 2]))
    shards.add("train", packed)
    assert [p.name for p in tmp_path.iterdir()] == ["train-000007.arrow"] and not shards.pending["train"]
    assert shards.stats == {7: {"train": {"instances": 2, "instance_tokens": 10, "label_1": 1, "masked": 2,
                                          "masked_as_mask": 0, "masked_as_kept": 0, "masked_as_random": 2},
                                "validation": {}}}


def test_crc32c_of_many_buffers_at_once() -> None:
    from bertctl.tf_format import crc32c_many, masked_crcs

    rng = np.random.default_rng(0)
    sizes = [0, 1, 3, 4, 5, 63, 64, 65, 900, 1 << 16, (1 << 16) + 1, *rng.integers(0, 3000, 50).tolist()]
    buffers = [rng.integers(0, 256, size, dtype=np.uint8).tobytes() for size in sizes]
    assert crc32c_many(buffers).tolist() == [crc32c(b) for b in buffers]
    assert masked_crcs(crc32c_many(buffers)).tolist() == [masked_crc(b) for b in buffers]
    assert crc32c_many([]).tolist() == []


def test_a_vocabulary_too_small_for_the_ids_is_refused(built) -> None:
    highest = max(max(r["input_ids"]) for r in built["rows"][:len(built["rows"]) // 2])
    BertTokenizer.from_vocab(VOCAB[:highest]).save(built["root"] / "small-tok")
    cfg = CorpusImportConfig(inputs=(str(built["files"][0]),), tokenizer=built["root"] / "small-tok",
                             out=built["root"] / "small")
    with pytest.raises(UsageError, match=rf"tfrecord-0: record [0-9]+: (input id|masked_lm_ids holds) [0-9]+,? (is )?"
                                         rf"outside the vocabulary of .*small-tok \({highest} ids\)") as error:
        import_corpus(cfg)
    assert "\n" not in str(error.value)
    assert not (built["root"] / "small").exists() and not (built["root"] / "small.partial").exists()


def test_cli_import_inspect_and_overwrite(built) -> None:
    runner = CliRunner()
    out = built["root"] / "cli"
    args = ["corpus", "import", *map(str, built["files"]), "--tokenizer", str(built["tok"]), "--out", str(out),
            "--validation-fraction", "0.1"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert f"max_seq_length {SEQ}, max_predictions_per_seq {PREDICTIONS}" in result.stdout
    result = runner.invoke(app, ["corpus", "inspect", str(out), "--num", "1"])
    assert result.exit_code == 0 and "|" in result.stdout and ("IsNext" in result.stdout or "NotNext" in result.stdout)
    assert "static masking, max_seq_length" in result.stdout and "from google-tfrecord" in result.stdout
    assert "seed None" not in result.stdout
    again = runner.invoke(app, args)
    assert again.exit_code == 2 and "--overwrite" in again.output
    assert runner.invoke(app, [*args, "--overwrite"]).exit_code == 0
    empty = built["root"] / "empty.tfrecord"
    empty.write_bytes(b"")
    result = runner.invoke(app, ["corpus", "import", str(empty), "-t", str(built["tok"]), "-o",
                                 str(built["root"] / "e")])
    assert result.exit_code == 2 and "no records" in result.output and "Traceback" not in result.output
    result = runner.invoke(app, ["corpus", "import", str(empty), "-o", str(built["root"] / "e")])
    assert result.exit_code == 2 and "--tokenizer is required" in result.output
