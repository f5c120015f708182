"""Input reading shared by `tokenizer train` and `corpus build`: expansion, decompression, tables, skips."""

from __future__ import annotations

import bz2
import gzip
import json
import logging
import lzma
import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bertctl.cli import app
from bertctl.data.sources import (
    ReadStats,
    expand_inputs,
    is_table,
    iter_documents,
    iter_records,
    iter_texts,
    open_text,
)
from bertctl.errors import UsageError

TEXT = "first line\n\nsecond doc é\nmore\n"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    (tmp_path / "a.txt").write_text(TEXT, encoding="utf-8")
    (tmp_path / "sub" / "b.txt.gz").write_bytes(gzip.compress(TEXT.encode()))
    (tmp_path / "sub" / "deeper" / "c.txt.bz2").write_bytes(bz2.compress(TEXT.encode()))
    (tmp_path / "sub" / "d.txt.xz").write_bytes(lzma.compress(TEXT.encode()))
    (tmp_path / "sub" / ".hidden.txt").write_text("never read\n", encoding="utf-8")
    return tmp_path


def test_expand_folders_globs_and_files_in_order_without_repeats(tree: Path) -> None:
    found = expand_inputs([tree / "a.txt", str(tree / "sub"), str(tree / "*.txt")])
    assert found == [tree / "a.txt", tree / "sub" / "b.txt.gz", tree / "sub" / "d.txt.xz",
                     tree / "sub" / "deeper" / "c.txt.bz2"]
    assert expand_inputs([str(tree / "**" / "*.bz2")]) == [tree / "sub" / "deeper" / "c.txt.bz2"]
    names = [f"{n:02d}.txt" for n in (7, 3, 11, 0, 9, 5, 1, 10, 4, 8, 2, 6)]  # made out of order
    (tree / "many").mkdir()
    for name in names:
        (tree / "many" / name).write_text("x\n", encoding="utf-8")
    assert expand_inputs([tree / "many"]) == [tree / "many" / name for name in sorted(names)]


def test_expand_keeps_dataset_names_and_refuses_what_matches_nothing(tree: Path) -> None:
    assert expand_inputs(["wikitext:wikitext-2-raw-v1", "user/corpus"]) == ["wikitext:wikitext-2-raw-v1",
                                                                           "user/corpus"]
    for missing in (str(tree / "nothing*.txt"), str(tree / "missing.txt"), "missing.jsonl"):
        with pytest.raises(UsageError, match="^INPUTS: nothing matched"):
            expand_inputs([missing])
    with pytest.raises(UsageError, match="no input given"):
        expand_inputs([])


def test_an_empty_folder_is_named_as_a_folder_without_files(tree: Path) -> None:
    """It was "nothing matched 'empty' (no such file, folder or glob match)", about a folder that is there."""
    (tree / "empty" / ".hidden").mkdir(parents=True)
    (tree / "empty" / ".hidden" / "x.txt").write_text("left out\n")
    with pytest.raises(UsageError, match=f"^INPUTS: the folder {tree / 'empty'} holds no files"):
        expand_inputs([str(tree / "empty")])


def test_compressed_files_read_like_plain_ones(tree: Path) -> None:
    for name in ("a.txt", "sub/b.txt.gz", "sub/deeper/c.txt.bz2", "sub/d.txt.xz"):
        with open_text(tree / name) as handle:
            assert handle.read() == TEXT
    stats = ReadStats.for_sources(expand_inputs([tree]))
    lines = list(iter_texts(expand_inputs([tree]), stats=stats))
    assert lines == TEXT.splitlines() * 4
    assert stats.files_read == 4 and stats.bytes_read == stats.total_bytes > 0


def test_bytes_read_advances_while_streaming(tmp_path: Path) -> None:
    path = tmp_path / "big.txt"
    path.write_text("some words on a line\n" * 20000, encoding="utf-8")
    stats = ReadStats.for_sources([path])
    seen = [stats.bytes_read for i, _ in enumerate(iter_texts([path], stats=stats)) if i % 5000 == 4999]
    assert 0 < seen[0] < seen[1] < seen[2] < path.stat().st_size
    assert stats.bytes_read == path.stat().st_size


def test_undecodable_files_are_skipped_and_counted(tree: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tree / "latin1.txt").write_bytes("café\n".encode("latin-1"))
    (tree / "blob.bin").write_bytes(bytes(range(256)) * 10)
    (tree / "fake.gz").write_bytes(b"not gzip at all")
    sources = expand_inputs([tree / "a.txt", tree / "latin1.txt", tree / "blob.bin", tree / "fake.gz"])
    stats = ReadStats()
    with caplog.at_level(logging.WARNING):
        assert list(iter_texts(sources, stats=stats)) == TEXT.splitlines()
    assert stats.files_read == 1 and len(stats.skipped) == 3
    assert "latin1.txt" in caplog.text and "binary" in caplog.text
    with pytest.raises(UsageError, match="none of the 3 input"):
        list(iter_texts(sources[1:]))


def test_tables_give_their_text_column(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"id": 1, "text": "one\ntwo", "n": "x"}, {"id": 2, "text": "three", "n": "y"}]  # text in the middle
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n", encoding="utf-8")
    (tmp_path / "t.jsonl.gz").write_bytes(gzip.compress((tmp_path / "t.jsonl").read_bytes()))
    (tmp_path / "t.json").write_text(json.dumps(rows), encoding="utf-8")
    (tmp_path / "t.csv").write_text('id,text,n\n1,"one\ntwo",x\n2,three,y\n', encoding="utf-8")
    table = pa.table({"id": [1, 2, 3], "text": ["one\ntwo", "three", None], "n": ["x", "y", "z"]})
    pq.write_table(table, tmp_path / "t.parquet")
    for name in ("t.jsonl", "t.jsonl.gz", "t.json", "t.csv", "t.parquet"):
        assert is_table(tmp_path / name)
        assert list(iter_records(tmp_path / name, "text")) == ["one\ntwo", "three"], name
        with pytest.raises(UsageError, match="no column 'body'.*--text-column"):
            list(iter_records(tmp_path / name, "body"))
    assert not is_table(tmp_path / "a.txt.gz")
    (tmp_path / "odd.jsonl").write_text('{"text": "lone \\ud800 surrogate"}\n', encoding="utf-8")
    assert list(iter_records(tmp_path / "odd.jsonl")) == ["lone \ufffd\ufffd\ufffd surrogate"]


def test_a_csv_document_past_128_kib_is_one_text(tmp_path: Path) -> None:
    """A document a row (a Wikipedia article) past the csv module's default field_size_limit (131072 characters)
    was `malformed csv: field larger than field limit`; pandas and `datasets` read it."""
    article = "A long article.\n" * 20_000
    (tmp_path / "wiki.csv").write_text(f'title,text\nLong,"{article}"\nShort,"abc"def\n', encoding="utf-8")
    assert list(iter_records(tmp_path / "wiki.csv", "text")) == [article, "abcdef"]


@pytest.mark.parametrize(("name", "rows", "where", "shown"), [
    ("l.jsonl", [{"text": "fine"}, {"text": ["alpha beta"]}], ":2", "list ['alpha beta']"),
    ("d.json", [{"text": "fine"}, {"text": {"k": "gamma"}}], " row 1", "dict {'k': 'gamma'}"),
    ("b.jsonl", [{"text": True}], ":1", "bool True"),
    ("p.parquet", [{"text": ["a"]}, {"text": ["b", "c"]}], " row 1", "list ['a']"),
])
def test_a_table_value_that_is_not_text_is_refused_naming_file_and_row(tmp_path: Path, name, rows, where,
                                                                       shown) -> None:
    """`{"text": ["alpha beta"]}` was learned from as the text "['alpha beta']"; numbers stay their text."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / name
    if name.endswith(".parquet"):
        pq.write_table(pa.Table.from_pylist(rows), path)
    elif name.endswith(".json"):
        path.write_text(json.dumps(rows), encoding="utf-8")
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with pytest.raises(UsageError, match=re.escape(f"{path}{where}: column 'text' holds {shown}, not text")):
        list(iter_texts([path]))
    result = CliRunner().invoke(app, ["tokenizer", "train", str(path), "--out", str(tmp_path / "tok")])
    assert result.exit_code == 2 and f"{path}{where}: column 'text' holds" in result.stderr, result.output
    numbers = tmp_path / "numbers.jsonl"
    numbers.write_text('{"text": 12}\n{"text": 0.5}\n', encoding="utf-8")
    assert list(iter_texts([numbers])) == ["12", "0.5"]


def test_documents_split_at_blank_lines_lines_or_rows(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("  s1 \ns2\n\n\ns3\n", encoding="utf-8")
    (tmp_path / "t.jsonl").write_text('{"text": "r1\\n\\nr2"}\n{"text": ""}\n', encoding="utf-8")
    sources = [tmp_path / "a.txt", tmp_path / "t.jsonl"]
    assert list(iter_documents(sources)) == [(["s1", "s2"], 6), (["s3"], 3), (["r1", "r2"], 6)]
    per_line = [lines for lines, _ in iter_documents(sources, document_per_line=True)]
    assert per_line == [["s1"], ["s2"], ["s3"], ["r1", "r2"]]


def test_pipes_fifos_stdin_and_devices_are_refused_in_one_line(tree: Path, monkeypatch) -> None:
    """Every input is read twice (two training passes; hash, then read), which a pipe cannot give: say so,
    instead of 'nothing matched' or a hub lookup of the FIFO's name."""
    monkeypatch.chdir(tree)
    os.mkfifo("fifo")
    read_end, write_end = os.pipe()
    try:
        kinds = {"fifo": "a pipe", str(tree / "fifo"): "a pipe", f"/dev/fd/{read_end}": "a pipe",
                 "/dev/null": "a character device"}
        for item, kind in kinds.items():
            with pytest.raises(UsageError, match=f"^INPUTS: {re.escape(item)} is {kind}, not a regular file: "
                                                 "inputs are read more than once, so write it to a file first"):
                expand_inputs(["a.txt", item])
        with pytest.raises(UsageError, match=r"^INPUTS: '-' \(standard input\) cannot be an input: .* file first"):
            expand_inputs(["-"])
    finally:
        os.close(read_end)
        os.close(write_end)
    assert expand_inputs([tree / "a.txt", tree]) == [tree / "a.txt", *expand_inputs([tree / "sub"])]  # no FIFO
    result = CliRunner().invoke(app, ["tokenizer", "train", "fifo", "--out", str(tree / "tok")])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and "is a pipe" in result.output


def test_zstd_input_is_named_not_called_binary(tree: Path, caplog: pytest.LogCaptureFixture) -> None:
    """zstd is recognised by its magic bytes (any name), so the skip says what to do instead of 'binary'."""
    frame = b"(\xb5/\xfd\x04X\xb9\x00\x00first line\n\nsecond doc\n*\x858\x92"  # zstd -c of this text
    for name in ("c.txt.zst", "t.jsonl.zst", "unnamed"):
        (tree / name).write_bytes(frame)
    sources = [tree / "c.txt.zst", tree / "t.jsonl.zst", tree / "unnamed", tree / "a.txt"]
    stats = ReadStats()
    with caplog.at_level(logging.WARNING):
        assert list(iter_texts(sources, stats=stats)) == TEXT.splitlines()
    reason = "zstd-compressed input is not supported (use .gz, .bz2 or .xz, or decompress it)"
    assert stats.skipped == [(str(source), reason) for source in sources[:3]]
    assert "binary" not in caplog.text
    with pytest.raises(UsageError, match="nothing matched 'missing.zst'"):  # a file name, not a dataset
        expand_inputs(["missing.zst"])


@pytest.mark.parametrize("empty", ["", "  "])
def test_an_empty_input_name_is_refused_not_read_as_the_working_folder(empty) -> None:
    with pytest.raises(UsageError, match="INPUTS: an empty name; give a file, folder, glob or dataset"):
        expand_inputs([empty])


LINE = b"some words on a line\n"  # 21 bytes


def _late_problems(folder: Path) -> dict[str, tuple[Path, str]]:
    """Files whose first 64 KiB are fine and whose problem comes later: (file, what the refusal says)."""
    good = LINE * 6000  # 126,000 bytes
    late_byte = folder / "late.txt"
    late_byte.write_bytes(good[:100_800] + b"caf\xe9 " + good[100_800:])  # after line 4,800
    gz = gzip.compress(good)
    truncated = folder / "cut.txt.gz"
    truncated.write_bytes(gz[:-20])  # its end marker and the last of its data lost, as a download cut short
    late_xz = folder / "late.txt.xz"
    late_xz.write_bytes(lzma.compress(good[:84_000] + b"\xff" + good[84_000:]))
    return {"byte": (late_byte, f"{late_byte}: not UTF-8 at byte 100,803 (line 4,801); only a file's first 64 KiB "
                                 "is checked before its text is used, so it cannot be skipped now: convert it to "
                                 "UTF-8 (iconv -f ENCODING -t UTF-8) or leave it out of the inputs, then run again"),
            "gz": (truncated, f"{truncated}: truncated gzip: its data ends after "),
            "xz": (late_xz, f"{late_xz}: not UTF-8 at byte 84,000 of its text (line 4,001); ")}


@pytest.mark.parametrize("kind", ["byte", "gz", "xz"])
def test_a_problem_past_the_first_64_kib_refuses_the_file_instead_of_skipping_half_of_it(
        tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture) -> None:
    """The lines before a late bad byte (or the text of a .gz cut short) were already used when the error
    came; calling the file skipped would misstate what the output holds, so the run stops, naming the place."""
    (tmp_path / "a.txt").write_text(TEXT, encoding="utf-8")
    path, message = _late_problems(tmp_path)[kind]
    sources = [tmp_path / "a.txt", path]
    for read in (iter_texts, iter_documents):
        stats = ReadStats()
        with caplog.at_level(logging.WARNING), pytest.raises(UsageError) as caught:
            for _ in read(sources, stats=stats):
                pass
        assert str(caught.value).startswith(message) and "\n" not in str(caught.value)
        assert not stats.skipped and "warning: skipped" not in caplog.text
    if kind == "gz":
        assert re.search(r"ends after [\d,]+ bytes of text \(line [\d,]+\), before the gzip end-of-stream marker; "
                         r".*re-create or re-download it", str(caught.value))


def test_a_problem_within_the_first_64_kib_still_skips_the_file(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text(TEXT, encoding="utf-8")
    (tmp_path / "early.txt").write_bytes(LINE * 100 + b"\xff\n" + LINE * 6000)
    (tmp_path / "short.txt.gz").write_bytes(gzip.compress(LINE * 100)[:-20])  # all of it in the first 64 KiB
    (tmp_path / "short.txt.bz2").write_bytes(bz2.compress(LINE * 100)[:-10])
    stats = ReadStats()
    sources = [tmp_path / "a.txt", tmp_path / "early.txt", tmp_path / "short.txt.gz", tmp_path / "short.txt.bz2"]
    assert list(iter_texts(sources, stats=stats)) == TEXT.splitlines()
    assert stats.skipped == [(str(sources[1]), "not UTF-8 (byte 2100)"),
                             (str(sources[2]), "truncated gzip (it ends before the gzip end-of-stream marker)"),
                             (str(sources[3]), "truncated bzip2 (it ends before the bzip2 end-of-stream marker)")]


@pytest.mark.parametrize("kind", ["byte", "gz"])
def test_corpus_build_and_tokenizer_train_refuse_a_late_problem_and_write_nothing(tmp_path: Path, kind: str) -> None:
    """`corpus build` listed such a file as skipped while its first documents were in the corpus; `tokenizer
    train` learned from them while provenance.json called the file skipped. Now both exit 2 in one line and
    leave no output (and no .partial folder) behind."""
    from bertctl.tokenizer import SPECIAL_TOKENS, BertTokenizer

    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.txt").write_bytes((LINE * 30 + b"\n") * 20)
    path, message = _late_problems(tmp_path)[kind]
    path.rename(folder / path.name)
    message = message.replace(str(path), str(folder / path.name))
    BertTokenizer.from_vocab([*SPECIAL_TOKENS, "some", "words", "on", "a", "line", "caf"],
                             lowercase=True).save(tmp_path / "tok")
    commands = {"corpus": ["corpus", "build", str(folder), "--tokenizer", str(tmp_path / "tok"),
                           "--max-seq-length", "32", "--workers", "1"],
                "tokenizer": ["tokenizer", "train", str(folder), "--vocab-size", "200"]}
    for name, command in commands.items():
        out = tmp_path / f"{name}-out"
        result = CliRunner().invoke(app, [*command, "--out", str(out)])
        assert result.exit_code == 2, result.output
        last = result.stderr.splitlines()[-1]  # after the progress bar's
        assert last.startswith(f"bertctl: error: {message}") and result.stderr.endswith(last + "\n"), result.stderr
        assert "warning: skipped" not in result.stderr
        assert not [p.name for p in tmp_path.iterdir() if name in p.name]  # no OUT, no OUT.partial or such


def _damaged_tables(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """A csv with a quote left open on line 3 (the rest of the file reads as one cell), and a parquet file with a
    spoiled data page: each with the start of the line that names it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = tmp_path / "long.csv"
    table.write_text("text\nsome words\n\"" + "word on a line\n" * 10_000, encoding="utf-8")
    spoiled = tmp_path / "spoiled.parquet"
    pq.write_table(pa.table({"text": [f"some words on a line {i}" for i in range(2000)]}), spoiled,
                   compression="snappy")
    data = bytearray(spoiled.read_bytes())
    data[200:264] = b"\xff" * 64
    spoiled.write_bytes(bytes(data))
    return {"csv": (table, f"{table}:3: malformed csv: a quoted field opens on this line and the file ends inside"),
            "parquet": (spoiled, f"{spoiled}: damaged parquet data after row 0: Corrupt snappy compressed data")}


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_a_damaged_table_input_is_one_line_naming_it_and_writes_nothing(tmp_path: Path, kind: str) -> None:
    """csv's `Error: field larger than field limit (131072)` (now: a quote left open) and pyarrow's `OSError: Corrupt
    snappy compressed data.` named no file, and `corpus build` left OUT.partial behind."""
    from bertctl.tokenizer import SPECIAL_TOKENS, BertTokenizer

    path, message = _damaged_tables(tmp_path)[kind]
    BertTokenizer.from_vocab([*SPECIAL_TOKENS, "some", "words", "on", "a", "line"], lowercase=True).save(
        tmp_path / "tok")
    commands = {"corpus": ["corpus", "build", str(path), "--tokenizer", str(tmp_path / "tok"),
                           "--max-seq-length", "32", "--workers", "1"],
                "tokenizer": ["tokenizer", "train", str(path), "--vocab-size", "200"]}
    for name, command in commands.items():
        result = CliRunner().invoke(app, [*command, "--out", str(tmp_path / f"{name}-out")])
        assert result.exit_code == 2, result.output
        last = result.stderr.splitlines()[-1]
        assert last.startswith(f"bertctl: error: {message}") and result.stderr.endswith(last + "\n"), result.stderr
        assert not [p.name for p in tmp_path.iterdir() if name in p.name]


@pytest.mark.parametrize("name", ["wikitext", "bookcorpus", "squad"])
def test_a_dataset_input_that_cannot_be_loaded_is_one_line_naming_the_argument(tmp_path: Path, monkeypatch,
                                                                                 name: str) -> None:
    """A bare name is still tried on the hub (no legacy hint here: these inputs take any `datasets` name), and
    the line says which argument held it, as the other INPUTS lines do."""
    from hub_copy_fixtures import stub_hub

    from bertctl.tokenizer import SPECIAL_TOKENS, BertTokenizer

    calls = stub_hub(monkeypatch, {})
    monkeypatch.chdir(tmp_path)
    BertTokenizer.from_vocab([*SPECIAL_TOKENS, "a"], lowercase=True).save(tmp_path / "tok")
    for command in (["tokenizer", "train", name], ["corpus", "build", name, "--tokenizer", "tok", "--workers", "1"]):
        result = CliRunner().invoke(app, [*command, "--out", "out"])
        assert result.exit_code == 2, result.output
        assert result.stderr == (f"bertctl: error: INPUTS: '{name}' is not a local file and datasets cannot load "
                                 f"it: Couldn't reach '{name}' on the Hub (OfflineModeIsEnabled)\n")  # no bar
        assert not (tmp_path / "out").exists()
    assert calls == [(name, None, "train")] * 2


def test_a_dataset_input_names_a_split_as_the_task_data_flags_do(tmp_path: Path, monkeypatch) -> None:
    """`NAME:CONFIG:SPLIT` reaches `load_dataset` (streamed) and the records; `NAME:CONFIG` still names a config."""
    import datasets
    from hub_copy_fixtures import stub_hub

    from bertctl.tokenizer import SPECIAL_TOKENS, BertTokenizer

    datasets.Dataset.from_dict({"text": ["a b a.\nb a b.", "b b a.\na a b."] * 4}).save_to_disk(tmp_path / "rows")
    calls = stub_hub(monkeypatch, {"owner/corpus": tmp_path / "rows"})
    monkeypatch.chdir(tmp_path)
    BertTokenizer.from_vocab([*SPECIAL_TOKENS, "a", "b", "."], lowercase=True).save(tmp_path / "tok")
    name = "owner/corpus:plain:validation"
    assert expand_inputs([name]) == [name]
    assert list(iter_texts(["owner/corpus:plain"]))[:1] == ["a b a.\nb a b."]
    assert calls == [("owner/corpus", "plain", "train")]
    calls.clear()
    trained = CliRunner().invoke(app, ["tokenizer", "train", name, "--out", "tok2", "--vocab-size", "20"])
    built = CliRunner().invoke(app, ["corpus", "build", name, "--tokenizer", "tok", "--out", "c", "--workers", "1"])
    assert trained.exit_code == 0 and built.exit_code == 0, (trained.output, built.output)
    assert set(calls) == {("owner/corpus", "plain", "validation")}
    provenance = json.loads((tmp_path / "tok2" / "provenance.json").read_text())
    assert provenance["inputs"] == [{"source": name}] and provenance["config"]["inputs"] == [name]
    manifest = json.loads((tmp_path / "c" / "manifest.json").read_text())
    assert manifest["inputs"] == [{"dataset": name}] and manifest["config"]["inputs"] == [name]
    with pytest.raises(UsageError, match="nothing matched 'owner/corpus:plain:validation:more'"):
        expand_inputs(["owner/corpus:plain:validation:more"])


def _stderr_of(command: list[str], folder: Path, terminal: bool) -> str:
    """What `command` writes on stderr, a pipe or a terminal (80 columns; its line ends read back as `\\n`)."""
    import fcntl
    import pty
    import struct
    import subprocess
    import sys
    import termios

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(folder / "hf"), "PYTHONPATH": os.pathsep.join(sys.path)}
    if not terminal:
        return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=120).stderr
    reader, writer = pty.openpty()
    fcntl.ioctl(writer, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    with subprocess.Popen(command, cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=writer) as process:
        os.close(writer)
        said = b""
        while True:
            try:
                chunk = os.read(reader, 4096)
            except OSError:  # EIO: the terminal's other end is closed
                break
            if not chunk:
                break
            said += chunk
        process.wait(timeout=120)
    os.close(reader)
    return said.decode().replace("\r\n", "\n")


@pytest.mark.parametrize("terminal", [False, True])
def test_an_input_refused_at_once_leaves_its_one_error_line_alone_on_stderr(tmp_path: Path, terminal: bool) -> None:
    """No `corpus build: 0.00B [00:00, ?B/s]` (nor import's bar) before the line: a bar is drawn once some input
    has been read."""
    import sys

    from bertctl.tokenizer import SPECIAL_TOKENS, BertTokenizer

    BertTokenizer.from_vocab([*SPECIAL_TOKENS, "a"], lowercase=True).save(tmp_path / "tok")
    (tmp_path / "bad.tfrecord").write_bytes(b"not a record" * 4)
    for command, start in ((["tokenizer", "train", "wikitext", "--out", "t"], "INPUTS: 'wikitext' is not a local"),
                           (["corpus", "build", "wikitext", "--tokenizer", "tok", "--out", "c", "--workers", "1"],
                            "INPUTS: 'wikitext' is not a local"),
                           (["corpus", "import", "bad.tfrecord", "--tokenizer", "tok", "--out", "ci"],
                            "corpus import: bad.tfrecord")):
        said = _stderr_of([sys.executable, "-m", "bertctl", *command], tmp_path, terminal)
        assert said.startswith(f"bertctl: error: {start}") and said.count("\n") == 1, said
        assert said.endswith("\n") and "\r" not in said, said


@pytest.mark.parametrize("spelt", ["./owner/corpus", "owner/corpus/", "./owner/corpus:a:validation", "~/owner/corpus"])
def test_an_input_written_like_a_path_is_never_a_dataset_name(tmp_path: Path, monkeypatch, spelt: str) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(UsageError, match=f"^INPUTS: nothing matched {re.escape(repr(spelt))}"):
        expand_inputs([spelt])


def test_a_byte_order_mark_is_dropped(tmp_path: Path) -> None:
    (tmp_path / "bom.txt").write_bytes("\ufeffFirst line.\n\nSecond.\n".encode())
    (tmp_path / "bom.txt.gz").write_bytes(gzip.compress((tmp_path / "bom.txt").read_bytes()))
    for name in ("bom.txt", "bom.txt.gz"):
        assert list(iter_documents([tmp_path / name])) == [(["First line."], 12), (["Second."], 8)]
        assert list(iter_texts([tmp_path / name])) == ["First line.", "", "Second."]


def test_a_character_cut_at_the_end_of_the_checked_start_is_read_not_skipped(tmp_path: Path) -> None:
    """The check reads 64 KiB: a multi-byte character whose bytes straddle that end is UTF-8 all the same."""
    text = "a" * ((1 << 16) - 1) + "é\n"
    (tmp_path / "cut.txt").write_text(text, encoding="utf-8")
    stats = ReadStats()
    assert list(iter_texts([tmp_path / "cut.txt"], stats=stats)) == [text[:-1]]
    assert stats.skipped == [] and stats.files_read == 1
