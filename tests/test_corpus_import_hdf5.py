"""`corpus import` of NVIDIA's HDF5 pre-training shards (DeepLearningExamples, PyTorch BERT), written here as NVIDIA's
create_pretraining_data.py writes them: the same corpus as the same rows imported from Google's TFRecords, and the
rows NVIDIA's run_pretraining.py loader trains on."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

h5py = pytest.importorskip("h5py")

from test_corpus_import import (  # noqa: E402
    PREDICTIONS,
    SEQ,
    VOCAB,
    google_example,
    pretraining_losses,
    tfrecord,
)

from bertctl.cli import app  # noqa: E402
from bertctl.config import CorpusImportConfig  # noqa: E402
from bertctl.corpus import load_corpus  # noqa: E402
from bertctl.corpus_import import import_corpus  # noqa: E402
from bertctl.corpus_inspect import inspect_corpus  # noqa: E402
from bertctl.data.shards import is_validation  # noqa: E402
from bertctl.errors import BertctlError, UsageError  # noqa: E402
from bertctl.tokenizer import BertTokenizer  # noqa: E402

NVIDIA_DTYPES = {"input_ids": "i4", "input_mask": "i1", "segment_ids": "i1", "masked_lm_positions": "i4",
                 "masked_lm_ids": "i4", "next_sentence_labels": "i1"}  # write_instance_to_example_file's


# --- NVIDIA's writer ----------------------------------------------------------------------------------------


def nvidia_features(rows: list[dict], seq: int = SEQ, predictions: int = PREDICTIONS) -> dict[str, np.ndarray]:
    """NVIDIA's int32 arrays for bertctl corpus rows: tokens and predictions padded with 0, label 1 = random next."""
    n = len(rows)
    features = {name: np.zeros((n, seq), "int32") for name in ("input_ids", "input_mask", "segment_ids")}
    features |= {name: np.zeros((n, predictions), "int32") for name in ("masked_lm_positions", "masked_lm_ids")}
    features["next_sentence_labels"] = np.zeros(n, "int32")
    for i, row in enumerate(rows):
        tokens, masked = len(row["input_ids"]), len(row["masked_lm_positions"])
        features["input_ids"][i, :tokens] = row["input_ids"]
        features["input_mask"][i, :tokens] = 1
        features["segment_ids"][i, :tokens] = row["token_type_ids"]
        features["masked_lm_positions"][i, :masked] = row["masked_lm_positions"]
        features["masked_lm_ids"][i, :masked] = row["masked_lm_ids"]
        features["next_sentence_labels"][i] = row["next_sentence_label"]
    return features


def nvidia_shard(path: Path, features: dict[str, np.ndarray], dtypes: dict[str, str] | None = None,
                 **file_options) -> Path:
    """h5py.File(path, 'w') and one gzip dataset per feature, with NVIDIA's dtypes."""
    with h5py.File(path, "w", **file_options) as f:
        for name, values in features.items():
            f.create_dataset(name, data=values, dtype=(dtypes or NVIDIA_DTYPES).get(name, values.dtype),
                             compression="gzip")
    return path


def nvidia_loader_item(f: h5py.File, index: int, max_pred_length: int) -> dict[str, np.ndarray]:
    """pretraining_dataset.__getitem__ of run_pretraining.py, from its description: the MLM labels are -1 but at
    the positions before the first 0 position (all of them when there is none)."""
    ids, mask, types, positions, masked_ids = (f[name][index].astype(np.int64) for name in (
        "input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids"))
    zeros = np.flatnonzero(positions == 0)
    count = zeros[0] if len(zeros) else max_pred_length
    labels = np.full(ids.shape, -1)
    labels[positions[:count]] = masked_ids[:count]
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask, "labels": labels,
            "next_sentence_label": int(f["next_sentence_labels"][index])}


def padded_row(row: dict) -> dict[str, np.ndarray]:
    """A bertctl corpus row as a model sees it, padded to SEQ: MLM labels -1 where nothing is predicted."""
    tokens = len(row["input_ids"])
    labels = np.full(SEQ, -1)
    labels[row["masked_lm_positions"]] = row["masked_lm_ids"]
    pad = [0] * (SEQ - tokens)
    return {"input_ids": np.array(row["input_ids"] + pad), "token_type_ids": np.array(row["token_type_ids"] + pad),
            "attention_mask": np.array([1] * tokens + pad), "labels": labels,
            "next_sentence_label": row["next_sentence_label"]}


# --- fixtures -----------------------------------------------------------------------------------------------

from test_corpus_import import built  # noqa: E402, F401 - the corpus bertctl built and its rows as TFRecords

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def shards(built) -> list[Path]:  # noqa: F811
    """The built rows as two NVIDIA shards; the second named without a suffix (found by its signature)."""
    rows, half = built["rows"], len(built["rows"]) // 2
    return [nvidia_shard(built["root"] / "training_shard_0.hdf5", nvidia_features(rows[:half])),
            nvidia_shard(built["root"] / "training_shard_1", nvidia_features(rows[half:]))]


def imported(built: dict, out: str, files: list[Path], **flags) -> Path:  # noqa: F811
    cfg = CorpusImportConfig(inputs=tuple(str(f) for f in files), tokenizer=built["tok"], out=built["root"] / out,
                             **{"workers": 1, **flags})
    import_corpus(cfg)
    return cfg.out


# --- the import ---------------------------------------------------------------------------------------------


def test_hdf5_shards_give_the_corpus_their_rows_give_as_tfrecords(built, shards) -> None:  # noqa: F811
    out = imported(built, "from-hdf5", shards)
    corpus, manifest = load_corpus(out)
    records, theirs = load_corpus(imported(built, "from-tfrecords", built["files"]))
    assert corpus["train"].features == records["train"].features
    assert corpus["train"].to_list() == records["train"].to_list() == built["rows"]
    for key in ("objective", "masking", "max_seq_length", "max_predictions_per_seq", "tokenizer_sha256",
                "tokenizer_settings", "vocab_size", "special_ids", "splits", "counts", "masked_lm_prob"):
        assert manifest[key] == theirs[key], key
    assert manifest["source"] == "nvidia-hdf5" and manifest["max_seq_length"] == SEQ
    assert [(i["path"], i["bytes"], i["sha256"], i["compression"]) for i in manifest["inputs"]] == [
        (str(f), f.stat().st_size, hashlib.sha256(f.read_bytes()).hexdigest(), "gzip") for f in shards]
    assert [i["records"] for i in manifest["inputs"]] == [len(built["rows"]) // 2, len(built["rows"]) -
                                                          len(built["rows"]) // 2]
    report, expected = inspect_corpus(out, num=2), inspect_corpus(built["root"] / "from-tfrecords", num=2)
    assert report["source"] == "nvidia-hdf5"
    assert report["splits"] == expected["splits"] and report["samples"] == expected["samples"]


def test_the_rows_are_what_nvidias_loader_trains_on(built, shards) -> None:  # noqa: F811
    corpus, _ = load_corpus(imported(built, "loader", shards))
    rows = corpus["train"].to_list()
    full = 0
    with h5py.File(shards[0]) as first, h5py.File(shards[1]) as second:
        for i, row in enumerate(rows):
            f, index = (first, i) if i < len(first["input_ids"]) else (second, i - len(first["input_ids"]))
            theirs, mine = nvidia_loader_item(f, index, PREDICTIONS), padded_row(row)
            assert theirs.keys() == mine.keys()
            for key in theirs:
                assert np.array_equal(theirs[key], mine[key]), (i, key)
            full += len(row["masked_lm_positions"]) == PREDICTIONS  # no 0 padding: every slot a prediction
    assert full and {r["next_sentence_label"] for r in rows} == {0, 1}


def test_validation_fraction_and_blocks_split_rows_as_for_tfrecords(built, shards, monkeypatch) -> None:  # noqa: F811
    monkeypatch.setattr("bertctl.corpus_import.BLOCK_ROWS", 4)
    corpus, manifest = load_corpus(imported(built, "held", shards, validation_fraction=0.25))
    held = [is_validation(i, 0.25) for i in range(len(built["rows"]))]
    assert corpus["validation"].to_list() == [r for r, h in zip(built["rows"], held, strict=True) if h]
    assert corpus["train"].to_list() == [r for r, h in zip(built["rows"], held, strict=True) if not h]
    assert manifest["splits"] == ["train", "validation"]


def test_a_shard_after_a_user_block_is_found_by_its_signature(built) -> None:  # noqa: F811
    shard = nvidia_shard(built["root"] / "user-block.dat", nvidia_features(built["rows"][:9]), userblock_size=1024)
    assert shard.read_bytes()[:8] != b"\x89HDF\r\n\x1a\n"
    corpus, manifest = load_corpus(imported(built, "user-block", [shard]))
    assert corpus["train"].to_list() == built["rows"][:9] and manifest["source"] == "nvidia-hdf5"


@pytest.mark.parametrize(("at", "size", "found"), [(0, 8, True), (512, 520, True), (2048, 4096, True),
                                                  (1536, 2040, False), (8, 600, False)])
def test_a_file_is_hdf5_by_its_signature_where_the_library_looks(tmp_path, at, size, found) -> None:
    """At byte 0 or 512 * 2**k (HDF5's user block), to the file's last byte; nowhere else."""
    from bertctl.data.hdf5 import SIGNATURE, is_hdf5

    data = bytearray(size)
    data[at:at + len(SIGNATURE)] = SIGNATURE
    (tmp_path / "file").write_bytes(bytes(data))
    assert is_hdf5(tmp_path / "file") is found


def test_pretraining_on_the_imported_shards_gives_the_built_corpus_losses(built, shards, tmp_path) -> None:  # noqa: F811
    built_losses = pretraining_losses(built["root"] / "built", tmp_path / "built", 3)
    assert len(built_losses) == 3
    assert pretraining_losses(imported(built, "to-train", shards), tmp_path / "to-train", 3) == built_losses


def test_cli_imports_and_inspects_shards(built, shards) -> None:  # noqa: F811
    runner = CliRunner()
    out = built["root"] / "cli-hdf5"
    result = runner.invoke(app, ["corpus", "import", *map(str, shards), "-t", str(built["tok"]), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert f"max_seq_length {SEQ}, max_predictions_per_seq {PREDICTIONS}" in result.stdout
    result = runner.invoke(app, ["corpus", "inspect", str(out), "--num", "1"])
    assert result.exit_code == 0 and "from nvidia-hdf5" in result.stdout


# --- refusals -----------------------------------------------------------------------------------------------


def _damaged(built: dict, kind: str) -> tuple[Path, str]:  # noqa: F811
    """A shard and what the one-line error must say."""
    rows = built["rows"][:6]
    features = nvidia_features(rows)
    path = built["root"] / f"bad-{kind.replace(' ', '-')}.hdf5"
    if kind == "missing dataset":
        del features["masked_lm_positions"]
        return nvidia_shard(path, features), (r"not a pre-training shard of NVIDIA's create_pretraining_data.py: no "
                                              r"masked_lm_positions \(it holds: input_ids, input_mask, ")
    if kind == "float ids":
        return nvidia_shard(path, features, {**NVIDIA_DTYPES, "input_ids": "f4"}), \
            "dataset input_ids holds float32, NVIDIA's holds integers"
    if kind == "labels of two columns":
        features["next_sentence_labels"] = np.zeros((6, 2), "int32")
        return nvidia_shard(path, features), r"dataset next_sentence_labels has shape \(6, 2\), NVIDIA's is \(rows,\)"
    if kind == "flat ids":
        features["input_ids"] = features["input_ids"].reshape(-1)
        return nvidia_shard(path, features), r"dataset input_ids has shape \(192,\), NVIDIA's is \(rows, max_seq"
    if kind == "unequal rows":
        features["segment_ids"] = features["segment_ids"][:5]
        return nvidia_shard(path, features), "datasets of unequal row counts: input_ids 6, input_mask 6, segment_ids 5"
    if kind == "unequal widths":
        features["masked_lm_ids"] = features["masked_lm_ids"][:, :-1]
        return nvidia_shard(path, features), f"unequal widths: masked_lm_positions {PREDICTIONS}, masked_lm_ids"
    if kind == "no prediction columns":
        features["masked_lm_positions"] = features["masked_lm_ids"] = np.zeros((6, 0), "int32")
        return nvidia_shard(path, features), (f"input_ids has {SEQ} columns and masked_lm_positions 0: a shard of "
                                              "NVIDIA's has at least one of each")
    if kind == "position past the tokens":
        features["masked_lm_positions"][3, 0] = len(rows[3]["input_ids"]) + 1
        return nvidia_shard(path, features), "row 4: masked_lm_positions holds [0-9]+, outside the [0-9]+ tokens"
    if kind == "prediction after the padding":
        short = next(i for i, r in enumerate(rows) if len(r["masked_lm_positions"]) < PREDICTIONS - 1)
        features["masked_lm_positions"][short, -1] = 1
        return nvidia_shard(path, features), f"row {short + 1}: masked_lm_positions or masked_lm_ids is not 0 after"
    if kind == "label after the padding":
        short = next(i for i, r in enumerate(rows) if len(r["masked_lm_positions"]) < PREDICTIONS - 1)
        features["masked_lm_ids"][short, -1] = 5
        return nvidia_shard(path, features), f"row {short + 1}: masked_lm_positions or masked_lm_ids is not 0 after"
    if kind == "label 2":
        features["next_sentence_labels"][5] = 2
        return nvidia_shard(path, features), r"row 6: next_sentence_labels is 2, not 0 \(IsNext\) or 1 \(NotNext\)"
    if kind == "truncated":
        whole = nvidia_shard(path, nvidia_features(built["rows"])).read_bytes()
        path.write_bytes(whole[:len(whole) * 2 // 3])
        return path, "not a readable HDF5 file, truncated or damaged"
    if kind == "corrupt chunk":
        nvidia_shard(path, features)
        with h5py.File(path) as f:
            start = f["segment_ids"].id.get_chunk_info(0).byte_offset
        data = bytearray(path.read_bytes())
        data[start:start + 16] = b"\xff" * 16  # no zlib stream: the deflate filter fails
        path.write_bytes(bytes(data))
        return path, "rows 1-6 cannot be read, the file is truncated or corrupt"
    if kind == "other lengths":
        return nvidia_shard(path, nvidia_features(rows, seq=SEQ + 8)), \
            f"max_seq_length {SEQ + 8} .* but .*training_shard_0.hdf5 row 1 has {SEQ} .*phase 1 and phase 2"
    if kind == "other predictions":
        return nvidia_shard(path, nvidia_features(rows, predictions=PREDICTIONS + 2)), \
            f"max_predictions_per_seq {PREDICTIONS + 2}, but .*training_shard_0.hdf5 row 1 has {SEQ} and {PREDICTIONS}"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["missing dataset", "float ids", "labels of two columns", "flat ids", "unequal rows",
                                  "unequal widths", "no prediction columns", "position past the tokens",
                                  "prediction after the padding", "label after the padding", "label 2", "truncated",
                                  "corrupt chunk", "other lengths", "other predictions"])
def test_bad_shards_fail_in_one_line_naming_the_file_and_write_nothing(built, shards, kind) -> None:  # noqa: F811
    bad, said = _damaged(built, kind)
    with pytest.raises(UsageError, match=said) as error:
        imported(built, "bad", [shards[0], bad])
    assert "\n" not in str(error.value) and str(bad) in str(error.value)
    assert not (built["root"] / "bad").exists() and not (built["root"] / "bad.partial").exists()


def test_a_bad_row_in_a_later_block_is_named(built, monkeypatch) -> None:  # noqa: F811
    monkeypatch.setattr("bertctl.corpus_import.BLOCK_ROWS", 4)
    features = nvidia_features(built["rows"][:9])
    features["input_ids"][6, 1] = 99_999
    bad = nvidia_shard(built["root"] / "later.hdf5", features)
    with pytest.raises(UsageError, match=r"later.hdf5: row 7: input id 99999 is outside the vocabulary"):
        imported(built, "later", [bad])
    assert not (built["root"] / "later").exists()


def test_a_vocabulary_too_small_for_the_ids_is_refused(built, shards) -> None:  # noqa: F811
    highest = max(max(r["input_ids"]) for r in built["rows"][:len(built["rows"]) // 2])
    BertTokenizer.from_vocab(VOCAB[:highest]).save(built["root"] / "small-tok-hdf5")
    cfg = CorpusImportConfig(inputs=(str(shards[0]),), tokenizer=built["root"] / "small-tok-hdf5",
                             out=built["root"] / "small")
    said = r"shard_0.hdf5: row [0-9]+: (input id|masked_lm_ids holds) [0-9]+,? (is )?outside the vocabulary of "
    with pytest.raises(UsageError, match=said + rf".*small-tok-hdf5 \({highest} ids\)"):
        import_corpus(cfg)
    assert not (built["root"] / "small").exists() and not (built["root"] / "small.partial").exists()


def test_tfrecords_and_shards_together_are_refused(built, shards) -> None:  # noqa: F811
    with pytest.raises(UsageError, match=r"INPUTS mix HDF5 shards \(.*training_shard_0.hdf5\) and TFRecord files "
                                         r"\(.*tfrecord-0\); import each kind into a corpus of its own"):
        imported(built, "mixed", [shards[0], built["files"][0]])
    assert not (built["root"] / "mixed").exists() and not (built["root"] / "mixed.partial").exists()


def test_without_h5py_an_hdf5_input_says_how_to_install_it(built, shards, monkeypatch) -> None:  # noqa: F811
    monkeypatch.setitem(sys.modules, "h5py", None)  # `import h5py` raises ImportError
    with pytest.raises(BertctlError, match=r"training_shard_0.hdf5 is an HDF5 file, and reading one needs h5py: "
                                           r"pip install 'bertctl\[hdf5\]'$") as error:
        imported(built, "no-h5py", shards)
    assert error.value.exit_code == 1
    assert not (built["root"] / "no-h5py").exists() and not (built["root"] / "no-h5py.partial").exists()
    record = built["root"] / "one.tfrecord"
    record.write_bytes(tfrecord([google_example(built["rows"][0])]))
    assert load_corpus(imported(built, "no-h5py-tfrecord", [record]))[0]["train"].to_list() == built["rows"][:1]
    result = CliRunner().invoke(app, ["corpus", "import", str(shards[0]), "-t", str(built["tok"]), "-o",
                                      str(built["root"] / "no-h5py-cli")])
    assert result.exit_code == 1 and "pip install 'bertctl[hdf5]'" in result.output
    assert "Traceback" not in result.output


def test_bertctl_imports_no_h5py_until_a_shard_is_read() -> None:
    code = ("import sys, bertctl.cli, bertctl.corpus_import, bertctl.data.hdf5, bertctl.corpus; "
            "assert 'h5py' not in sys.modules, 'h5py imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_arrow_files_are_sized_by_tokens_not_rows(built, shards, monkeypatch) -> None:  # noqa: F811
    """A phase-2 import (512 tokens a row) must not gather four times the memory of a phase-1 one before writing."""
    tokens = [len(r["input_ids"]) for r in built["rows"]]
    monkeypatch.setattr("bertctl.corpus_import.SHARD_TOKENS", sum(tokens) // 3)
    monkeypatch.setattr("bertctl.corpus_import.BLOCK_ROWS", 4)
    out = imported(built, "by-tokens", shards)
    files = sorted(out.glob("**/*.arrow"))
    assert len(files) >= 3
    corpus, _ = load_corpus(out)
    assert corpus["train"].to_list() == built["rows"]
