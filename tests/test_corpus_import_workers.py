"""`corpus import --workers N`: whole input files imported in worker processes give the folder one worker gives,
byte for byte; the first bad file in input order is the one named; Ctrl-C and SIGTERM stop every worker and leave
nothing."""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import textwrap
import time
import zlib
from pathlib import Path

import pytest
from processes import gone
from test_corpus_import import SEQ, _damaged, built, google_example, tfrecord  # noqa: F401
from typer.testing import CliRunner

from bertctl.cli import app
from bertctl.config import CorpusImportConfig
from bertctl.corpus import load_corpus
from bertctl.corpus_import import import_corpus
from bertctl.data.shards import is_validation
from bertctl.errors import UsageError


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under a folder by its relative path: two equal trees are what `diff -r` finds equal."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def imported(built: dict, out: str, files: list[Path], **flags) -> Path:  # noqa: F811
    cfg = CorpusImportConfig(inputs=tuple(str(f) for f in files), tokenizer=built["tok"], out=built["root"] / out,
                             **flags)
    import_corpus(cfg)
    return cfg.out


@pytest.fixture(scope="module")
def records(built) -> list[Path]:  # noqa: F811
    """The built rows in five TFRecord files, an empty one first: plain (packed and not), GZIP and ZLIB."""
    rows, root = built["rows"], built["root"] / "several"
    root.mkdir()
    parts = [rows[i * len(rows) // 4:(i + 1) * len(rows) // 4] for i in range(4)]
    contents = [b"", tfrecord([google_example(r) for r in parts[0]]),
                tfrecord([google_example(r, packed=False) for r in parts[1]]),
                gzip.compress(tfrecord([google_example(r) for r in parts[2]])),
                zlib.compress(tfrecord([google_example(r) for r in parts[3]]))]
    files = [root / f"part-{i}.tfrecord" for i in range(len(contents))]
    for path, data in zip(files, contents, strict=True):
        path.write_bytes(data)
    return files


@pytest.fixture(scope="module")
def shards(built) -> list[Path]:  # noqa: F811
    """The built rows in three HDF5 shards of NVIDIA's (skipped without h5py)."""
    from test_corpus_import_hdf5 import nvidia_features, nvidia_shard

    rows, root = built["rows"], built["root"]
    return [nvidia_shard(root / f"several-{i}.hdf5", nvidia_features(rows[i * len(rows) // 3:(i + 1) * len(rows) // 3]))
            for i in range(3)]


@pytest.mark.parametrize("kind", ["tfrecord", "hdf5"])
def test_two_workers_write_the_folder_one_writes_byte_for_byte(built, kind, request, monkeypatch) -> None:  # noqa: F811
    """Several Arrow files per input (the sizes travel to the workers), validation rows counted over all inputs,
    an empty file first: the same bytes in every file of the folder, manifest included."""
    tokens = sum(len(r["input_ids"]) for r in built["rows"])
    monkeypatch.setattr("bertctl.corpus_import.SHARD_TOKENS", tokens // 10)
    monkeypatch.setattr("bertctl.corpus_import.BLOCK_ROWS", 4)
    files = request.getfixturevalue("records" if kind == "tfrecord" else "shards")
    one = imported(built, f"one-{kind}", files, workers=1, validation_fraction=0.2)
    two = imported(built, f"two-{kind}", files, workers=2, validation_fraction=0.2)
    assert tree(one) == tree(two)
    assert len(list((two / "train").glob("*.arrow"))) >= 2 * len([f for f in files if f.stat().st_size])
    corpus, manifest = load_corpus(two)
    held = [is_validation(i, 0.2) for i in range(len(built["rows"]))]
    assert corpus["validation"].to_list() == [r for r, h in zip(built["rows"], held, strict=True) if h]
    assert corpus["train"].to_list() == [r for r, h in zip(built["rows"], held, strict=True) if not h]
    assert "workers" not in manifest["config"] and manifest["max_seq_length"] == SEQ
    counted = [i["records"] for i in manifest["inputs"]]
    assert sum(counted) == len(built["rows"]) and counted[0] == (0 if kind == "tfrecord" else len(built["rows"]) // 3)


def test_the_same_import_from_another_working_folder_writes_the_same_bytes(built, records, tmp_path,  # noqa: F811
                                                                          monkeypatch) -> None:
    """The same command (relative paths) in two working folders holding the same files: every file the same,
    state.json's fingerprints too (they once hashed the inputs' absolute paths)."""
    trees = []
    for name in ("x", "y", "z"):
        folder = tmp_path / name / "in"
        folder.mkdir(parents=True)
        for path in records[1:3]:
            (folder / path.name).write_bytes(path.read_bytes())
        monkeypatch.chdir(tmp_path / name)
        spelt = str(folder) if name == "z" else "in"  # z: the same files named by their absolute path
        import_corpus(CorpusImportConfig(inputs=(spelt,), tokenizer=built["tok"], out=Path("out"), workers=1))
        trees.append(tree(tmp_path / name / "out"))
    assert trees[0] == trees[1]
    del trees[0]["manifest.json"], trees[2]["manifest.json"]  # which records the paths as given
    assert trees[0] == trees[2]


def _bad(built: dict, name: str, kind: str) -> Path:  # noqa: F811
    data, _ = _damaged(built, kind)
    path = built["root"] / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("kind", ["corrupted byte", "corrupted length", "truncated", "truncated gzip", "joined zlib",
                                  "other lengths", "not a tfrecord", "position past the tokens"])
def test_a_bad_file_is_named_as_one_worker_names_it(built, records, kind) -> None:  # noqa: F811
    """Whether counting the records first finds the damage or only the import does, the message is the same."""
    files = [records[1], _bad(built, "bad.tfrecord", kind), records[2]]
    said = []
    for workers in (1, 2):
        with pytest.raises(UsageError) as error:
            imported(built, f"bad-{workers}", files, workers=workers)
        said.append(str(error.value))
        assert not (built["root"] / f"bad-{workers}").exists()
        assert not (built["root"] / f"bad-{workers}.partial").exists()
    assert said[0] == said[1] and "bad.tfrecord" in said[0] and "\n" not in said[0]


def test_the_first_bad_file_in_input_order_is_named_not_the_first_to_fail(built, records) -> None:  # noqa: F811
    """The first file fails at its last record, long after the second (not a TFRecord at all) has failed."""
    rows = built["rows"] * 20
    rows[-1] = dict(rows[-1], input_ids=[rows[-1]["input_ids"][0], 99_999, *rows[-1]["input_ids"][2:]])
    late = built["root"] / "late.tfrecord"
    late.write_bytes(tfrecord([google_example(r) for r in rows]))
    early = _bad(built, "early.tfrecord", "not a tfrecord")
    for files in ([late, early], [records[1], late, records[2], early, records[3]]):
        with pytest.raises(UsageError, match=rf"late.tfrecord: record {len(rows)}: input id 99999 is outside"):
            imported(built, "first-bad", files, workers=2)
        assert not (built["root"] / "first-bad").exists() and not (built["root"] / "first-bad.partial").exists()


def test_the_first_bad_hdf5_shard_is_named(built, shards) -> None:  # noqa: F811
    import h5py
    from test_corpus_import_hdf5 import nvidia_features, nvidia_shard

    features = nvidia_features(built["rows"] * 20)
    features["input_ids"][-1, 1] = 99_999
    late = nvidia_shard(built["root"] / "late.hdf5", features)
    with h5py.File(built["root"] / "no-ids.hdf5", "w") as f:
        f.create_dataset("input_mask", data=features["input_mask"])
    rows = len(built["rows"]) * 20
    with pytest.raises(UsageError, match=rf"late.hdf5: row {rows}: input id 99999 is outside the vocabulary"):
        imported(built, "first-bad-hdf5", [shards[0], late, built["root"] / "no-ids.hdf5", shards[1]], workers=2)
    assert not (built["root"] / "first-bad-hdf5").exists()
    assert not (built["root"] / "first-bad-hdf5.partial").exists()


def test_files_of_other_lengths_are_named_as_one_worker_names_them(built, records) -> None:  # noqa: F811
    longer = built["root"] / "longer.tfrecord"
    longer.write_bytes(tfrecord([google_example(r, seq=SEQ + 4) for r in built["rows"][:3]]))
    said = []
    for workers in (1, 2):
        with pytest.raises(UsageError) as error:
            imported(built, "lengths", [records[0], records[1], longer], workers=workers)
        said.append(str(error.value))
    assert said[0] == said[1]
    assert f"longer.tfrecord: record 1: max_seq_length {SEQ + 4}" in said[0] and "part-1.tfrecord record 1" in said[0]


def test_workers_through_the_cli_and_a_config_file(built, records, tmp_path) -> None:  # noqa: F811
    reference = imported(built, "cli-reference", records, workers=1, validation_fraction=0.2)
    runner = CliRunner()
    base = ["corpus", "import", *map(str, records), "-t", str(built["tok"]), "--validation-fraction", "0.2"]
    flag = runner.invoke(app, [*base, "--workers", "2", "-o", str(tmp_path / "flag")])
    assert flag.exit_code == 0, flag.output
    (tmp_path / "import.yaml").write_text("workers: 2\n")
    config = runner.invoke(app, [*base, "--config", str(tmp_path / "import.yaml"), "-o", str(tmp_path / "config")])
    assert config.exit_code == 0, config.output
    assert tree(tmp_path / "flag") == tree(tmp_path / "config") == tree(reference)
    refused = runner.invoke(app, [*base, "--workers", "-1", "-o", str(tmp_path / "refused")])
    assert refused.exit_code == 2 and "--workers must be at least 0, got -1" in refused.output
    assert not (tmp_path / "refused").exists()


# --- stopping -----------------------------------------------------------------------------------------------

DRIVER = """
import os, sys, time
from pathlib import Path
import bertctl.corpus_import

real = bertctl.corpus_import._import_file

def _stuck(job, shards, progress):
    # the second file never ends; its worker, and the first file's once that is done, say they are there
    if job.index == 0:
        result = real(job, shards, progress)
    (Path(os.environ["MARKERS"]) / str(os.getpid())).write_text("")
    if job.index == 0:
        return result
    time.sleep(120)

bertctl.corpus_import._import_file = _stuck  # spawned workers run this script's top level too

if __name__ == "__main__":
    from bertctl.cli import main
    sys.argv[0] = "bertctl"
    main()
"""


@pytest.mark.parametrize(("how", "code"), [("SIGTERM", 143), ("SIGINT to the group", 130),
                                           ("SIGTERM to the group", 143), ("SIGKILL", -9)])
def test_a_stop_signal_stops_every_worker_and_leaves_nothing(built, records, tmp_path, how, code) -> None:  # noqa: F811
    """A worker importing a file is killed at once (a pool's shutdown would wait for it), then the partial folder
    is removed. A terminal's Ctrl-C or a scheduler's SIGTERM reaches the whole group: the workers, one idle and one
    busy, leave it to the main process (no worker's traceback, no "a worker died"). A killed main process (kill -9)
    takes its workers with it."""
    driver, markers, out = tmp_path / "driver.py", tmp_path / "markers", tmp_path / "out"
    driver.write_text(textwrap.dedent(DRIVER))
    markers.mkdir()
    process = subprocess.Popen([sys.executable, str(driver), "corpus", "import", *map(str, records[1:3]), "-t",
                                str(built["tok"]), "-o", str(out), "--workers", "2"], stderr=subprocess.PIPE,
                               text=True, start_new_session=True,
                               env={**os.environ, "MARKERS": str(markers), "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        deadline = time.time() + 60
        while len(list(markers.iterdir())) < 2 and time.time() < deadline and process.poll() is None:
            time.sleep(0.1)
        workers = [int(p.name) for p in markers.iterdir()]
        assert len(workers) == 2, process.stderr.read() if process.poll() is not None else "no workers started"
        if how.endswith("to the group"):
            os.killpg(process.pid, getattr(signal, how.split()[0]))
        else:
            process.send_signal(getattr(signal, how))
        _, err = process.communicate(timeout=30)
        assert process.returncode == code, err
        deadline = time.time() + 10
        while not all(gone(pid) for pid in workers) and time.time() < deadline:
            time.sleep(0.1)
        assert all(gone(pid) for pid in workers)
    finally:  # a failure leaves no process behind
        if not gone(process.pid, group=True):
            os.killpg(process.pid, signal.SIGKILL)
    if how != "SIGKILL":
        assert err.strip().splitlines()[-1].endswith("terminated" if code == 143 else "interrupted")
        assert "Traceback" not in err
        assert not out.exists() and not out.with_name("out.partial").exists()


def test_no_more_workers_than_files() -> None:
    from bertctl.corpus_import import _worker_count

    assert [_worker_count(4, 2), _worker_count(2, 1), _worker_count(1, 3), _worker_count(0, 1)] == [2, 1, 1, 1]


def test_records_are_counted_from_their_framing(built, records) -> None:  # noqa: F811
    from bertctl.data.tfrecord import BadRecord, count_records

    for path, rows in zip(records, [0, *[len(built["rows"][i * len(built["rows"]) // 4:(i + 1) * len(built["rows"])
                                                              // 4]) for i in range(4)]], strict=True):
        counted, first = count_records(path)
        assert counted == rows and (first is None) == (rows == 0)
    assert count_records(records[1])[1] == google_example(built["rows"][0])
    for kind, said in [("corrupted length", "^record 3: a damaged header$"),
                       ("truncated", "^record 6: cut short$"), ("not a tfrecord", "^record 1: a damaged header$"),
                       ("huge length", "^record 1: a damaged header$")]:
        with pytest.raises(BadRecord, match=said):
            count_records(_bad(built, "uncountable.tfrecord", kind))
