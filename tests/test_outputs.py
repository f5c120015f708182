"""Outputs and scoring flags a command can never use are refused in one line (exit 2) before any work:
--out below a file or a file where a folder goes, an existing output without --overwrite, a convert into its
own source, --batch-size / --max-seq-length below what a forward pass needs."""

from __future__ import annotations

import csv
import errno
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import never_called
from glue_fixtures import write_glue_data
from typer.testing import CliRunner

from bertctl.checkpoint import save_model
from bertctl.cli import app
from bertctl.config import BertConfig
from bertctl.errors import BertctlError, UsageError
from bertctl.files import check_new_out, check_out, make_folder, write_text_atomic
from bertctl.model import BertForMaskedLM, BertForSequenceClassification
from bertctl.output_locks import output_lock
from bertctl.tokenizer import BertTokenizer

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "day", "was", "good", "bad"]
LABELS = ["negative", "positive"]  # SST-2's names on the hub, so one model serves glue and classify

pytestmark = pytest.mark.usefixtures("one_thread")


def _cli(*args: str | Path):
    return CliRunner().invoke(app, [str(a) for a in args])


def _refused(result, *expected: str) -> None:
    """Exit 2 with one line holding every expected piece, and no traceback."""
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith("bertctl: error: ") and all(e in lines[0] for e in expected), lines[0]


def _config() -> BertConfig:
    return BertConfig(vocab_size=len(VOCAB), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=32, max_position_embeddings=32)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """A tiny encoder and a tiny (untrained) two-class classifier, with a table and SST-2 data."""
    root = tmp_path_factory.mktemp("outputs")
    torch.manual_seed(0)
    tokenizer = BertTokenizer.from_vocab(VOCAB)
    encoder = save_model(BertForMaskedLM(_config()), root / "encoder", tokenizer)
    classifier = save_model(BertForSequenceClassification(_config(), num_labels=2), root / "classifier", tokenizer,
                            labels=LABELS)
    table = root / "table.csv"
    with open(table, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows([("text", "label"), *[(f"the day was {w}", lab) for w, lab in
                                                           [("good", "positive"), ("bad", "negative")] * 4]])
    (root / "text.txt").write_text("the day was good.\nthe day was bad.\n" * 20, encoding="utf-8")
    glue = write_glue_data(root / "glue", tasks=("sst2",), n_train=4, n_dev=4, n_test=4)
    return {"encoder": encoder, "classifier": classifier, "table": table, "text": root / "text.txt", "glue": glue}


def _commands(m: dict[str, Path], out: Path) -> dict[str, list]:
    """Every command that writes --out, as it would run here."""
    return {
        "convert": ["convert", m["encoder"], "--out", out],
        "tokenizer": ["tokenizer", "train", m["text"], "--out", out, "--vocab-size", 40],
        "finetune": ["finetune", "classify", "--train", m["table"], "-m", m["encoder"], "--text-columns", "text",
                     "--device", "cpu", "--epochs", 1, "--batch-size", 4, "--out", out],
        "predict classify": ["predict", "classify", "-m", m["classifier"], "--data", m["table"],
                             "--text-columns", "text", "--out", out],
        "predict glue": ["predict", "glue", "sst2", "-m", m["classifier"], "--data", m["glue"], "--out", out],
        "corpus": ["corpus", "build", m["text"], "--tokenizer", m["encoder"], "--workers", 1, "--out", out],
        "pretrain": ["pretrain", "--steps", 1, "--out", out],  # the quick start: refused before it starts
    }


# --- --out below a file, or a file where a folder goes ------------------------------------------------

@pytest.mark.parametrize("command", ["convert", "tokenizer", "finetune", "predict classify", "predict glue", "corpus",
                                     "pretrain"])
@pytest.mark.parametrize("below", ["x", "a/b/p.csv"])
def test_an_out_below_a_file_is_refused_naming_out_and_the_file(models, tmp_path, command, below):
    blocker = tmp_path / "empty.txt"
    blocker.write_text("")
    _refused(_cli(*_commands(models, blocker / below)[command]), f"--out {blocker / below}",
             f"its parent {blocker} is a file")
    assert [p.name for p in tmp_path.iterdir()] == ["empty.txt"] and blocker.read_text() == ""


@pytest.mark.parametrize("command", ["convert", "tokenizer", "finetune", "predict glue", "corpus"])
def test_a_file_where_a_folder_goes_is_refused_even_with_overwrite(models, tmp_path, command):
    blocker = tmp_path / "empty.txt"
    blocker.write_text("mine")
    args = _commands(models, blocker)[command]
    for extra in ([], ["--overwrite"]):
        _refused(_cli(*args, *extra), f"--out {blocker} is a file, not a folder")
    assert [p.name for p in tmp_path.iterdir()] == ["empty.txt"] and blocker.read_text() == "mine"


def test_the_checkers_before_any_work(tmp_path):
    (tmp_path / "file").write_text("")
    (tmp_path / "dir").mkdir()
    with pytest.raises(UsageError, match="^--out .*deep/er: its parent .*file is a file, not a folder;"):
        check_out(tmp_path / "file" / "deep" / "er")
    with pytest.raises(UsageError, match="is a folder, not a file"):
        check_out(tmp_path / "dir", folder=False)
    with pytest.raises(UsageError, match="already exists; pass --overwrite"):
        check_new_out(tmp_path / "dir")
    assert check_new_out(tmp_path / "dir", overwrite=True) == tmp_path / "dir"
    assert check_out(tmp_path / "new" / "er") == tmp_path / "new" / "er"  # folders to come are fine
    assert check_out(tmp_path / "file", folder=False) == tmp_path / "file"


def test_writes_below_a_file_fail_in_one_line_not_errno(tmp_path):
    """What a command forgot to check still gives one line naming the flag and the file in the way."""
    (tmp_path / "file").write_text("")
    for write in (lambda: make_folder(tmp_path / "file" / "x"), lambda: make_folder(tmp_path / "file"),
                  lambda: write_text_atomic(tmp_path / "file" / "x" / "y.json", "{}")):
        blocked = f"^--out: cannot create the folder .*: {tmp_path / 'file'} is a file"
        with pytest.raises(UsageError, match=blocked) as info:
            write()
        assert "Errno" not in str(info.value)
    assert [p.name for p in tmp_path.iterdir()] == ["file"]


def test_a_folder_at_or_below_a_link_to_nothing_says_where_the_link_points(tmp_path):
    """mkdir onto a link to nothing says only `File exists`, of a path that does not exist to ls either."""
    (tmp_path / "dl").symlink_to(tmp_path / "gone")
    for folder in (tmp_path / "dl", tmp_path / "dl" / "run"):
        with pytest.raises(UsageError, match=f"^--out: cannot create the folder {folder}: {tmp_path / 'dl'} is a "
                                             f"link to {tmp_path / 'gone'}, which does not exist; choose"):
            make_folder(folder)
    assert not (tmp_path / "gone").exists()


# --- an existing output --------------------------------------------------------------------------------

def test_predict_classify_keeps_an_existing_file_unless_overwrite(models, tmp_path):
    out = tmp_path / "pred.csv"
    args = _commands(models, out)["predict classify"]
    first = _cli(*args)
    assert first.exit_code == 0, first.output
    out.write_text("mine")
    _refused(_cli(*args), f"--out {out} already exists; pass --overwrite")
    assert out.read_text() == "mine"
    assert _cli(*args, "--overwrite").exit_code == 0 and out.read_text().startswith("index,prediction,")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pred.csv"]  # no temp file left


def test_predict_classify_refuses_a_folder_instead_of_writing_beside_it(models, tmp_path):
    (tmp_path / "preds").mkdir()
    _refused(_cli(*_commands(models, tmp_path / "preds")["predict classify"]), f"--out {tmp_path / 'preds'} is a "
             "folder, not a file")
    assert not (tmp_path / "preds.csv").exists() and not any((tmp_path / "preds").iterdir())


def test_predict_glue_keeps_existing_submission_files_unless_overwrite(models, tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "CoLA.tsv").write_text("another task's")  # one folder collects the tasks one by one
    args = _commands(models, sub)["predict glue"]
    assert _cli(*args).exit_code == 0 and (sub / "SST-2.tsv").is_file()
    (sub / "SST-2.tsv").write_text("mine")
    _refused(_cli(*args), f"--out {sub} already holds SST-2.tsv; pass --overwrite to replace it")
    assert (sub / "SST-2.tsv").read_text() == "mine"
    assert _cli(*args, "--overwrite").exit_code == 0
    assert (sub / "SST-2.tsv").read_text().startswith("index\tprediction\n")
    assert (sub / "CoLA.tsv").read_text() == "another task's"


# --- convert and its source ---------------------------------------------------------------------------

def test_convert_refuses_an_out_inside_or_holding_its_source(models, tmp_path):
    source = tmp_path / "runs" / "model"
    assert _cli("convert", models["encoder"], "--out", source).exit_code == 0
    before = sorted(p.name for p in source.iterdir())
    for out, extra, expected in [(source / "sub", [], "is inside the source folder"),
                                 (source, ["--overwrite"], "is the source folder"),
                                 (tmp_path / "runs", ["--overwrite"], "holds the input")]:
        _refused(_cli("convert", source, "--out", out, *extra), f"--out {out} {expected}")
    assert sorted(p.name for p in source.iterdir()) == before


@pytest.mark.parametrize("command", ["tokenizer", "corpus", "finetune"])
def test_an_out_holding_an_input_is_refused_before_overwrite_deletes_it(models, tmp_path, command):
    """`tokenizer train d --out d --overwrite` used to replace d, input files and all."""
    import shutil

    out = tmp_path / "data"
    out.mkdir()
    inside = {**models, "text": Path(shutil.copy(models["text"], out)),
              "table": Path(shutil.copy(models["table"], out)),
              "encoder": Path(shutil.copytree(models["encoder"], out / "encoder"))}
    args = _commands(inside, out)[command]
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    _refused(_cli(*args, "--overwrite"), f"--out {out} holds the input", "choose a path outside it")
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


@pytest.mark.parametrize("command", ["tokenizer", "corpus"])
def test_an_out_inside_an_input_folder_is_refused_before_it_is_read_as_input(models, tmp_path, command):
    """`tokenizer train inp --out inp/tok` worked once; every later run read inp/tok's files as text."""
    import shutil

    folder = tmp_path / "inp"
    folder.mkdir()
    inside = {**models, "text": folder}
    shutil.copy(models["text"], folder)
    args = _commands(inside, folder / "out")[command]
    _refused(_cli(*args), f"--out {folder / 'out'} is inside the input folder {folder}", "choose a path outside it")
    assert [p.name for p in folder.iterdir()] == [models["text"].name]
    hidden = _cli(*_commands(inside, folder / ".out")[command])  # hidden files and folders are not read as input
    assert "inside the input folder" not in hidden.output


def _glue_copy(root: Path, layout: str) -> Path:
    """SST-2 as the official download (SST-2/*.tsv) or as a clone of the hub repository (sst2/*.parquet)."""
    if layout == "official":
        return write_glue_data(root, tasks=("sst2",), n_train=4, n_dev=4, n_test=4)
    import pyarrow as pa
    import pyarrow.parquet as pq

    (root / "sst2").mkdir(parents=True)
    for split in ("train", "validation", "test"):
        pq.write_table(pa.table({"sentence": ["the day was good", "the day was bad"], "label": [1, 0], "idx": [0, 1]}),
                       root / "sst2" / f"{split}-00000-of-00001.parquet")
    return root


@pytest.mark.parametrize(("layout", "task", "out"), [
    ("official", "sst2", "SST-2"), ("official", "sst2", "SST-2/"), ("official", "all", "SST-2"),
    ("official", "sst2", "."), ("clone", "sst2", "sst2"),
])
def test_finetune_glue_refuses_an_out_that_is_or_holds_a_task_folder_it_reads(models, tmp_path, layout, task, out):
    """`--data glue --out glue/SST-2 --overwrite` replaced the task's data files with the model: only the flags'
    own paths were checked, not the folders the task is read from."""
    data = _glue_copy(tmp_path / "glue", layout)
    before = sorted(p.relative_to(data) for p in data.rglob("*"))
    args = ["finetune", "glue", task, "--data", data, "-m", models["encoder"], "--device", "cpu", "--epochs", 1,
            "--out", f"{data}/{out}"]
    for overwrite in (["--overwrite"], []):  # without it too: never "pass --overwrite to replace it"
        _refused(_cli(*args, *overwrite), f"--out {Path(data, out)} ", "the input", "choose a path outside it")
    assert sorted(p.relative_to(data) for p in data.rglob("*")) == before


@pytest.mark.parametrize("command", ["convert", "tokenizer", "finetune", "corpus"])
@pytest.mark.parametrize(("out", "said"), [(".", "is the working folder"), ("..", "holds the working folder")])
def test_an_out_that_is_or_holds_the_working_folder_is_refused_before_any_work(models, tmp_path, monkeypatch,
                                                                            command, out, said):
    """`--out . --overwrite` trained, then failed on Path('.') having no name and left `..work/` behind."""
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    _refused(_cli(*_commands(models, Path(out))[command], "--overwrite"), f"--out {out} {said}")
    assert [p.name for p in tmp_path.iterdir()] == ["here"] and not any(here.iterdir())


def test_an_out_named_by_dot_dot_gets_the_name_of_the_folder_it_means(models, tmp_path, monkeypatch):
    """`a/..` is `tmp_path`'s child folder `b` here; temp names beside it came from '..'."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "b" / "a").mkdir(parents=True)
    assert check_new_out("b/a/..", overwrite=True) == tmp_path / "b"
    assert check_out(".") == tmp_path
    result = _cli("convert", models["encoder"], "--out", "b/a/..", "--overwrite")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "b" / "config.json").is_file() and sorted(p.name for p in tmp_path.iterdir()) == ["b"]


# --- scoring flags --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("flag", "value", "expected"), [
    ("--batch-size", 0, "give 1 or more"), ("--batch-size", -4, "give 1 or more"),
    ("--max-seq-length", 0, "give at least 3"), ("--max-seq-length", 2, "give at least 3"),
    ("--max-seq-length", -5, "give at least 3"), ("--max-seq-length", 33, "the model takes at most 32 tokens"),
])
@pytest.mark.parametrize("command", ["evaluate classify", "evaluate glue", "predict classify", "predict glue"])
def test_scoring_flags_no_forward_pass_can_use_are_refused(models, tmp_path, command, flag, value, expected):
    verb, kind = command.split()
    if verb == "predict":
        args = _commands(models, tmp_path / "out.csv")[command]
    elif kind == "classify":
        args = ["evaluate", "classify", "-m", models["classifier"], "--data", models["table"], "--text-columns", "text"]
    else:
        args = ["evaluate", "glue", "sst2", "-m", models["classifier"], "--data", models["glue"]]
    _refused(_cli(*args, flag, value), f"{flag} {value}: {expected}")
    assert not list(tmp_path.iterdir())


def test_the_smallest_scoring_flags_still_score(models):
    result = _cli("evaluate", "classify", "-m", models["classifier"], "--data", models["table"], "--text-columns",
                  "text", "--batch-size", 1, "--max-seq-length", 3, "--json")
    assert result.exit_code == 0 and '"accuracy"' in result.stdout, result.output


def test_a_linked_out_is_replaced_as_a_link_so_inputs_in_its_target_are_not_refused(tmp_path):
    """`--out latest` linking to `real/`: --overwrite replaces the link, never real/ and the input in it."""
    from bertctl.files import building_folder, refuse_inputs_inside

    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "a.txt").write_text("x")
    (tmp_path / "latest").symlink_to(tmp_path / "real")
    refuse_inputs_inside(tmp_path / "latest", [tmp_path / "real" / "a.txt"])
    with pytest.raises(UsageError, match="holds the input"):
        refuse_inputs_inside(tmp_path / "real", [tmp_path / "latest" / "a.txt"])
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")  # a dangling link is replaced as a link too
    for link in ("latest", "gone"):
        with building_folder(tmp_path / link) as tmp:
            (tmp / "b.txt").write_text("new")
        assert not (tmp_path / link).is_symlink() and os.listdir(tmp_path / link) == ["b.txt"]
    assert os.listdir(tmp_path / "real") == ["a.txt"]


# --- a write that fails: one line naming the output, the old output kept ------------------------------

def _limited(size: int):
    """preexec_fn: writes past `size` bytes fail with EFBIG (Python ignores SIGXFSZ), as `ulimit -f` makes them."""
    import resource

    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))


def test_a_failed_overwrite_names_the_output_and_keeps_the_old_one(models, tmp_path):
    import subprocess
    import sys

    out = tmp_path / "converted"
    assert _cli("convert", models["encoder"], "--out", out).exit_code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    result = subprocess.run([sys.executable, "-m", "bertctl", "convert", str(models["encoder"]), "--out", str(out),
                             "--overwrite"], capture_output=True, text=True, preexec_fn=_limited(512), timeout=300)
    assert result.returncode == 1 and result.stderr.splitlines() == [
        f"bertctl: error: cannot write {out}: File too large; a file-size limit (ulimit -f) stopped it; raise the "
        "limit or choose another path"], result.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["converted"]  # no temp folder left beside it


def test_a_text_output_that_cannot_be_written_is_named_and_left_as_it_was(tmp_path, monkeypatch):
    from bertctl.files import WriteFailed

    (tmp_path / "q.csv").mkdir()  # a folder made there after the command's check: the rename refuses it (EISDIR)
    with pytest.raises(WriteFailed, match=f"^cannot write {tmp_path / 'q.csv'}: Is a directory; choose another"):
        write_text_atomic(tmp_path / "q.csv", "new\n")
    (tmp_path / "q.csv").rmdir()
    (tmp_path / "p.csv").write_text("old\n")
    real = open

    def full_disk(*args, **kwargs):
        handle = real(*args, **kwargs)
        if str(getattr(handle, "name", "")).startswith(str(tmp_path / ".p.csv.")) or isinstance(args[0], int):
            def write(text):
                raise OSError(28, "No space left on device")
            handle.write = write
        return handle

    monkeypatch.setattr("os.fdopen", lambda fd, *a, **k: full_disk(fd, *a, **k))
    with pytest.raises(WriteFailed, match=f"^cannot write {tmp_path / 'p.csv'}: No space left on device; free some"):
        write_text_atomic(tmp_path / "p.csv", "new\n")
    assert (tmp_path / "p.csv").read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["p.csv"]


def test_a_leftover_of_a_save_killed_while_removing_the_old_folder_blocks_no_later_save(tmp_path):
    """The old folder moved aside had a name made of the process id alone: a leftover of a killed save (or of an
    interrupted one in the same process, or a container's same pid) made every later replace fail, ENOTEMPTY."""
    import os

    from bertctl.files import building_folder

    target = tmp_path / "final"
    for text in ("one", "two"):
        with building_folder(target) as tmp:
            (tmp / "x").write_text(text)
        leftover = tmp_path / f".final.old-{os.getpid()}"  # not a name bertctl makes: never removed
        leftover.mkdir(exist_ok=True)
        (leftover / "x").write_text("half removed")
    assert (target / "x").read_text() == "two"


@pytest.mark.parametrize("command", ["convert", "tokenizer", "finetune", "corpus", "predict classify"])
def test_a_command_removes_what_killed_writers_of_its_output_left_beside_it(models, tmp_path, command):
    """kill -9 (or a power cut) while writing OUT or moving the old one aside leaves a hidden folder or file as
    large as OUT; only pretrain removed its own. Every command writing OUT now removes those of processes that
    are gone, and keeps those of one still running (a concurrent writer) and those of other outputs."""
    import os

    from processes import dead_pid

    from bertctl.files import MACHINE_TAG

    out = tmp_path / ("p.csv" if command == "predict classify" else "out")
    dead = dead_pid()
    here, elsewhere = MACHINE_TAG, "ffffff" if MACHINE_TAG != "ffffff" else "000000"
    stale = [tmp_path / f".{out.name}.{tag}-{dead}-{here}-abc123_z" for tag in ("tmp", "partial", "old")]
    for path in stale[:2]:
        path.mkdir()
        (path / "model.safetensors").write_bytes(b"half written")
    stale[2].write_text("a moved-aside file output")
    # a running writer's; another output's; one of a writer on another host (its pid means nothing here); not a
    # name bertctl makes
    kept = [tmp_path / f".{out.name}.tmp-{os.getpid()}-{here}-abc123_z", tmp_path / f".other.old-{dead}-{here}-abc",
            tmp_path / f".{out.name}.tmp-{dead}-{elsewhere}-abc123_z", tmp_path / f".{out.name}.tmp-{dead}"]
    for path in kept:
        path.mkdir()
    short = {"finetune": ["--max-seq-length", 16], "corpus": ["--max-seq-length", 16]}.get(command, [])
    result = _cli(*_commands(models, out)[command], *short)
    assert result.exit_code == 0, result.output
    assert out.exists() and not any(path.exists() for path in stale) and all(path.exists() for path in kept)


@pytest.mark.parametrize("failure", [KeyboardInterrupt, OSError])
def test_the_old_folder_comes_back_when_the_new_one_cannot_take_its_place(tmp_path, monkeypatch, failure):
    """Between the two renames of a replace (old aside, new in), a Ctrl-C (its signal arrived just before) or a
    failed rename left no folder under the target's name at all."""
    import os

    from bertctl import files

    target = tmp_path / "final"
    with files.building_folder(target) as tmp:
        (tmp / "x").write_text("old")
    real, calls = os.replace, []

    def second_fails(src, dst):
        calls.append(src)
        if len(calls) == 2:
            raise failure(5, "Input/output error") if failure is OSError else failure()
        real(src, dst)

    monkeypatch.setattr(files.os, "replace", second_fails)
    expected = KeyboardInterrupt if failure is KeyboardInterrupt else files.WriteFailed
    with pytest.raises(expected), files.building_folder(target) as tmp:
        (tmp / "x").write_text("new")
    assert (target / "x").read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["final"]


def _publish_killed(out: Path, work: Path, inside: bool, renames: int) -> None:
    """In a child process: build OUT (inside its work folder, as corpus build does, or beside it, as finetune
    does) and publish it, killed with SIGKILL after `renames` of the publish's renames (as what went aside goes,
    once all are done)."""
    from bertctl import files

    pid = os.fork()
    if pid == 0:
        try:
            real, done = os.replace, []

            def replace(src, dst):
                if len(done) == renames:
                    os.kill(os.getpid(), signal.SIGKILL)
                done.append(src)
                real(src, dst)

            tmp = work / "corpus" if inside else files.temp_folder_beside(out)
            tmp.mkdir(exist_ok=True)
            (tmp / "x").write_text("new")
            os.replace = replace
            files.shutil.rmtree = lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL)
            files.replace_folder(tmp, out, retire=work)
        finally:
            os._exit(1)
    os.waitpid(pid, 0)


@pytest.mark.parametrize("inside", [True, False])
def test_a_kill_at_any_moment_of_a_publish_never_leaves_the_work_folder_beside_the_complete_out(tmp_path, inside):
    """kill -9 after OUT was renamed into place, before its work folder (corpus build's OUT.partial/, finetune's
    .OUT.work/) was moved aside, left it beside the complete OUT: a rerun neither removed it nor said so. It goes
    aside first now, under a hidden name of OUT's writer, which the next writer of OUT removes."""
    from bertctl.files import remove_stale_temps

    left = {}
    for renames in range(3):  # the work folder aside, OUT in place
        out, work = tmp_path / str(renames) / "out", tmp_path / str(renames) / "out.partial"
        (work / "shards").mkdir(parents=True)
        _publish_killed(out, work, inside, renames)
        assert not (out.exists() and work.exists()), renames
        remove_stale_temps(out)  # as the next writer of OUT does
        left[renames] = sorted(p.name for p in out.parent.iterdir())
    assert left == {0: ["out.partial"], 1: [], 2: ["out"]}
    assert (tmp_path / "2" / "out" / "x").read_text() == "new"


def test_the_work_folder_comes_back_when_out_cannot_take_its_place(tmp_path, monkeypatch):
    """Moved aside first, the work folder (and OUT built inside it) returns when the rename of OUT fails: the
    same command resumes from it."""
    from bertctl import files

    out, work = tmp_path / "out", tmp_path / "out.partial"
    (work / "corpus").mkdir(parents=True)
    (work / "corpus" / "x").write_text("new")
    real = os.replace

    def out_fails(src, dst):
        if Path(dst) == out:
            raise OSError(5, "Input/output error")
        real(src, dst)

    monkeypatch.setattr(files.os, "replace", out_fails)
    with pytest.raises(files.WriteFailed, match=f"^cannot write {out}: Input/output error"):
        files.replace_folder(work / "corpus", out, retire=work)
    assert [p.name for p in tmp_path.iterdir()] == ["out.partial"] and (work / "corpus" / "x").read_text() == "new"


@pytest.mark.parametrize("raced", [False, True])
def test_an_out_made_by_another_program_while_the_command_ran_is_kept_without_overwrite(tmp_path, monkeypatch,
                                                                                        raced):
    """OUT was checked absent at the start and renamed onto at the end: one another program made meanwhile was
    replaced silently. Without --overwrite it is kept now, one line (exit 1), the new output dropped and the work
    folder kept for a rerun. `raced`: it appears after the last look, where the rename (a folder onto a taken
    name) or the hard link (a file) refuses it in the same system call."""
    from bertctl import files

    out, work, model, taken = tmp_path / "out", tmp_path / "out.partial", tmp_path / "model", tmp_path / "q.csv"

    def theirs(path: Path) -> None:
        if path == taken:
            path.write_text("theirs\n")
        elif path in (out, model):
            (path / "theirs").mkdir(parents=True)

    def appearing(real):
        return lambda src, dst: (theirs(Path(dst)), real(src, dst))[1]

    if raced:
        monkeypatch.setattr(files.os, "replace", appearing(os.replace))
        monkeypatch.setattr(files.os, "link", appearing(os.link))
    else:  # found by the first look: none of the new files is put in place, not even for a moment
        for path in (out, model, taken):
            theirs(path)
        monkeypatch.setattr(files.os, "link", never_called("os.link"))
    (work / "corpus").mkdir(parents=True)
    (work / "corpus" / "x").write_text("new")
    with pytest.raises(files.OutAppeared) as appeared:
        files.replace_folder(work / "corpus", out, retire=work, overwrite=False)
    assert appeared.value.exit_code == 1 and str(appeared.value) == (
        f"--out {out} appeared while this command ran (another program made it) and was left as it is; choose "
        "another --out, or pass --overwrite to replace it")
    assert os.listdir(out) == ["theirs"] and (work / "corpus" / "x").read_text() == "new"
    with pytest.raises(files.OutAppeared), files.building_folder(model, overwrite=False) as tmp:
        (tmp / "x").write_text("new")
    texts = {tmp_path / "p.csv": "new\n", taken: "new\n"}
    with pytest.raises(files.OutAppeared, match=f"^--out {taken} appeared"):
        files.write_texts_atomic(texts, overwrite=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "out", "out.partial", "q.csv"]
    assert os.listdir(model) == ["theirs"] and taken.read_text() == "theirs\n"
    files.write_texts_atomic(texts)  # --overwrite: replaced, as before
    assert taken.read_text() == "new\n"


def test_a_link_to_nothing_at_out_is_replaced_without_overwrite_as_check_new_out_allows(tmp_path):
    """check_new_out takes a link to nothing for a free name (Path.exists follows it), so no command refuses it at
    the start; at the end it is replaced by the output, as it always was, not called an OUT made meanwhile."""
    from bertctl import files

    out, model, csv = tmp_path / "out", tmp_path / "model", tmp_path / "p.csv"
    for link in (out, model, csv):
        link.symlink_to(tmp_path / "nowhere")
        assert files.check_new_out(link, folder=link != csv) == link
    (tmp_path / "work" / "corpus").mkdir(parents=True)
    (tmp_path / "work" / "corpus" / "x").write_text("new")
    files.replace_folder(tmp_path / "work" / "corpus", out, retire=tmp_path / "work", overwrite=False)
    with files.building_folder(model, overwrite=False) as tmp:
        (tmp / "x").write_text("new")
    files.write_texts_atomic({csv: "new\n"}, overwrite=False)
    assert [(out / "x").read_text(), (model / "x").read_text(), csv.read_text()] == ["new", "new", "new\n"]
    assert not any(path.is_symlink() for path in (out, model, csv))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "out", "p.csv"]


def test_a_set_of_new_files_that_cannot_all_be_put_in_place_leaves_none(tmp_path, monkeypatch):
    """Without --overwrite (the files were not there at the start), a rename failing part way takes back the files
    of the set already in place: none of them is left, as the docstring of write_texts_atomic promises."""
    from bertctl import files

    first, second = tmp_path / "predictions.json", tmp_path / "nbest_predictions.json"
    link, replace = os.link, os.replace

    def failing(call):
        def fail_on_second(src: str, dst: Path) -> None:
            if Path(dst) == second:
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            call(src, dst)
        return fail_on_second

    monkeypatch.setattr(files.os, "link", failing(link))
    monkeypatch.setattr(files.os, "replace", failing(replace))
    with pytest.raises(files.WriteFailed):
        files.write_texts_atomic({first: "{}\n", second: "{}\n"}, overwrite=False)
    assert list(tmp_path.iterdir()) == []


def test_without_hard_links_a_file_made_meanwhile_is_kept_and_a_free_name_written(tmp_path, monkeypatch):
    """Where the file system has no hard links (os.link fails), a look just before the rename keeps a file another
    program made after the first look (OutAppeared), and a free name is still written; write_text_atomic passes
    its `overwrite` on."""
    from bertctl import files

    taken, free = tmp_path / "taken.txt", tmp_path / "free.txt"

    def no_links(src: str, dst: Path) -> None:
        if Path(dst) == taken:
            taken.write_text("theirs\n")
        raise OSError(errno.EPERM, os.strerror(errno.EPERM))

    monkeypatch.setattr(files.os, "link", no_links)
    files.write_text_atomic(free, "new\n", overwrite=False)
    with pytest.raises(files.OutAppeared, match=f"^--out {taken} appeared"):
        files.write_text_atomic(taken, "new\n", overwrite=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["free.txt", "taken.txt"]
    assert free.read_text() == "new\n" and taken.read_text() == "theirs\n"


@pytest.mark.parametrize("appears", ["empty folder", "file"])
def test_a_folder_out_taken_by_an_empty_folder_or_a_file_is_kept_without_overwrite(tmp_path, monkeypatch, appears):
    """An empty folder made before the last look (the rename alone would replace it) and a file made after it (the
    rename refuses it: ENOTDIR) are kept too: OutAppeared, the work folder as it was."""
    from bertctl import files

    out, work = tmp_path / "out", tmp_path / "out.partial"
    (work / "corpus").mkdir(parents=True)
    (work / "corpus" / "x").write_text("new")
    if appears == "empty folder":
        out.mkdir()
    else:
        replace = os.replace

        def appearing(src: Path, dst: Path) -> None:
            if Path(dst) == out:
                out.write_text("theirs\n")
            replace(src, dst)

        monkeypatch.setattr(files.os, "replace", appearing)
    with pytest.raises(files.OutAppeared, match=f"^--out {out} appeared"):
        files.replace_folder(work / "corpus", out, retire=work, overwrite=False)
    assert os.listdir(out) == [] if appears == "empty folder" else out.read_text() == "theirs\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "out.partial"]
    assert (work / "corpus" / "x").read_text() == "new"


def test_an_out_that_can_never_be_written_is_refused_before_any_work(tmp_path, monkeypatch):
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    with pytest.raises(UsageError, match="^--out .*loop1/x: Too many levels of symbolic links; a symbolic link"):
        check_out(tmp_path / "loop1" / "x")
    with pytest.raises(UsageError, match="leaves no room for the temporary names beside it"):
        check_out(tmp_path / ("a" * 240))
    assert check_out(tmp_path / ("a" * 200)) == tmp_path / ("a" * 200)
    def refused(*args, **kwargs):  # a folder of another user (the tests may run as root, whom chmod cannot stop)
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("tempfile.mkdtemp", refused)
    with pytest.raises(UsageError, match=f"^--out {tmp_path}/new/x: cannot create it in {tmp_path}: Permission denied"):
        check_new_out(tmp_path / "new" / "x")


def test_predict_into_a_full_disk_fails_in_one_line_naming_the_file(models, tmp_path):
    import subprocess
    import sys

    out = tmp_path / "p.csv"
    out.write_text("old\n")
    result = subprocess.run([sys.executable, "-m", "bertctl", "predict", "classify", "-m", str(models["classifier"]),
                             "--data", str(models["table"]), "--text-columns", "text", "--out", str(out),
                             "--overwrite"], capture_output=True, text=True, preexec_fn=_limited(64), timeout=300)
    assert result.returncode == 1 and result.stderr.splitlines() == [
        f"bertctl: error: cannot write {out}: File too large; a file-size limit (ulimit -f) stopped it; raise the "
        "limit or choose another path"], result.stderr
    assert out.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["p.csv"]


def test_a_write_failure_in_a_worker_process_reaches_the_command_whole():
    """Corpus workers write their records with write_text_atomic; the error is pickled back to the main process."""
    import pickle

    from bertctl.files import WriteFailed

    again = pickle.loads(pickle.dumps(WriteFailed("/x/y.json", OSError(28, "No space left on device"))))
    assert isinstance(again, WriteFailed) and str(again).startswith("cannot write /x/y.json: No space left on device")
    again = pickle.loads(pickle.dumps(WriteFailed("/x/y", OSError(28, "No space left on device"), "/x/y.partial/z")))
    assert str(again).startswith("cannot write /x/y: No space") and str(again).endswith("(writing /x/y.partial/z)")


def test_only_a_write_in_outs_keeping_is_said_as_outs(tmp_path):
    """Inside OUT, its work folders beside it: OUT's; a file read elsewhere (an input) keeps its own line."""
    from bertctl.files import WriteFailed, failures_named_by

    out, full = tmp_path / "out", OSError(28, "No space left on device")
    for part in (out / "step-000001", tmp_path / "out.partial" / "x", tmp_path / ".out.work" / "seed-1"):
        with pytest.raises(WriteFailed, match=rf"^cannot write {out}: No space .*\(writing {part}\)$"), \
                failures_named_by(out):
            raise WriteFailed(part, full)
    with pytest.raises(WriteFailed, match=rf"^cannot write {out}: No space .*\(writing {out}/metrics.jsonl\)$"), \
            failures_named_by(out):
        raise OSError(28, "No space left on device", str(out / "metrics.jsonl"))
    for elsewhere in (WriteFailed(tmp_path / "outer", full), PermissionError(13, "Permission denied", str(out / "x"))):
        with pytest.raises(type(elsewhere)) as error, failures_named_by(out):
            raise elsewhere
        assert error.value is elsewhere


def test_a_corpus_shard_that_cannot_be_written_names_the_corpus_and_the_shard(tmp_path):
    """A full disk or size limit while writing a shard said "cannot write standard output or an output file", then
    named the shard alone (`cannot write c.partial/shards/...`), a path the user never gave: OUT comes first."""
    import random
    import subprocess
    import sys

    words = [f"w{i}" for i in range(50)]
    BertTokenizer.from_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", *words]).save(tmp_path / "tok")
    rng = random.Random(0)
    (tmp_path / "docs.txt").write_text("\n\n".join("\n".join(" ".join(rng.choices(words, k=12)) + " ."
                                                             for _ in range(8)) for _ in range(300)) + "\n")
    result = subprocess.run([sys.executable, "-m", "bertctl", "corpus", "build", str(tmp_path / "docs.txt"),
                             "--tokenizer", str(tmp_path / "tok"), "--out", str(tmp_path / "corpus"),
                             "--max-seq-length", "32", "--workers", "1"],
                            capture_output=True, text=True, preexec_fn=_limited(64 * 1024), timeout=300)
    said = result.stderr.strip().splitlines()[-1]  # after the progress bar
    corpus = tmp_path / "corpus"
    assert result.returncode == 1 and said == (
        f"bertctl: error: cannot write {corpus}: File too large; a file-size limit (ulimit -f) stopped it; raise the "
        f"limit or choose another path (writing {corpus}.partial/shards/train-000000.arrow)"), result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "corpus").exists()


def test_ctrl_c_between_the_renames_waits_even_with_other_threads(tmp_path: Path) -> None:
    """torch's OpenMP threads leave SIGINT unblocked, so a thread's signal mask holds nothing: the signal must
    still wait until both renames are done (replace_folder's docstring), not roll a finished save back."""
    import os
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import os, signal, sys, threading, time
        from pathlib import Path
        import bertctl.files as F
        base = Path(sys.argv[1])
        (base / "out").mkdir(); (base / "out" / "v").write_text("old")
        tmp = base / ".out.tmp-x"; tmp.mkdir(); (tmp / "v").write_text("new")
        threading.Thread(target=time.sleep, args=(5,), daemon=True).start()  # as torch's worker threads
        real, calls = os.replace, []
        def replace(a, b):
            real(a, b); calls.append(1)
            if len(calls) == 1:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
        F.os.replace = replace
        try:
            F.replace_folder(tmp, base / "out")
        except KeyboardInterrupt:
            pass
        print((base / "out" / "v").read_text())
    """)
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}, timeout=60)
    assert done.stdout.strip() == "new", done.stdout + done.stderr


def test_a_signal_between_the_renames_of_a_set_of_files_leaves_no_set_half_old_half_new(tmp_path, monkeypatch):
    """predict squad writes predictions.json and nbest_predictions.json as one set: Ctrl-C or SIGTERM (which
    raises where it lands) after the first rename must wait until the second is done, as replace_folder does."""
    import os
    import signal

    import bertctl.files as F

    paths = [tmp_path / "predictions.json", tmp_path / "nbest_predictions.json"]
    for path in paths:
        path.write_text("old\n")
    real, calls = os.replace, []

    def replace(src, dst):
        real(src, dst)
        calls.append(dst)
        if len(calls) == 1:
            signal.raise_signal(signal.SIGINT)  # as a Ctrl-C landing between the two renames

    monkeypatch.setattr(F.os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        F.write_texts_atomic({path: "new\n" for path in paths})
    assert [path.read_text() for path in paths] == ["new\n", "new\n"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(path.name for path in paths)


def test_a_long_folder_name_above_out_is_not_refused(tmp_path: Path) -> None:
    """Only OUT's own name gets temp names beside it; a folder made above it needs no room for them."""
    out = tmp_path / ("a" * 240) / "model"
    assert check_out(out) == out


def test_a_long_out_name_is_still_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no room for the temporary names"):
        check_out(tmp_path / ("a" * 240))


HOLD = ("import sys, time\nfrom bertctl.output_locks import output_lock\nwith output_lock(sys.argv[1]):\n"
        "    print(flush=True)\n    time.sleep(60)\n")


def test_an_out_locked_by_a_live_process_is_refused_naming_it_and_free_once_it_is_killed(tmp_path):
    """kill -9 leaves the lock file beside OUT, unlocked: no stale lock to remove by hand, and nothing inside OUT."""
    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        holder.stdout.readline()
        with pytest.raises(BertctlError, match=rf"^{out} is in use by another bertctl \(pid {holder.pid} on "
                                               rf"{socket.gethostname()}\); wait for it to finish or choose another "
                                               "--out$"), output_lock(out):
            pass
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.communicate()
    assert [p.name for p in tmp_path.iterdir()] == [".out.lock"]
    with output_lock(out):
        make_folder(out)
    assert [p.name for p in tmp_path.iterdir()] == ["out"] and list(out.iterdir()) == []


def test_a_stale_lock_files_longer_content_does_not_hide_the_holder(tmp_path):
    """A lock file a killed run left behind (a longer pid and host name) is taken and rewritten whole: its tail
    would have made the next refusal lose the holder's name."""
    out = tmp_path / "new" / "out"
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / ".out.lock").write_text("4194303 a-long-host-name-of-an-earlier-run.example.org\n")
    with output_lock(out), pytest.raises(BertctlError, match=rf"\(pid {os.getpid()} on {socket.gethostname()}\)"), \
            output_lock(out):
        pass


def test_a_refused_command_leaves_no_folder_made_for_its_lock(tmp_path):
    with output_lock(tmp_path / "a" / "b" / "out"), pytest.raises(BertctlError, match="in use"), \
            output_lock(tmp_path / "a" / "b" / "out"):
        pass
    assert list(tmp_path.iterdir()) == []


def test_a_lock_file_its_holder_removed_as_it_let_go_is_not_taken_for_the_lock(tmp_path, monkeypatch):
    """Opened just before the holder removed it, the old file locks, but locks nothing another process sees:
    the lock is taken again on the file now at that path."""
    import fcntl

    from bertctl import output_locks

    real, removed = fcntl.flock, []

    def let_go_meanwhile(fd, operation):
        if not removed:
            removed.append(True)
            os.unlink(tmp_path / ".out.lock")
        return real(fd, operation)

    monkeypatch.setattr(output_locks.fcntl, "flock", let_go_meanwhile)
    with output_lock(tmp_path / "out"), pytest.raises(BertctlError, match="in use"), output_lock(tmp_path / "out"):
        pass


# the worker says its pid itself: then it has run the fork hooks (the parent's start() returns before that)
HOLD_FORKING = ("import multiprocessing, os, sys, time\nfrom bertctl.output_locks import output_lock\n"
                "def work():\n    print(os.getpid(), flush=True)\n    time.sleep(60)\n"
                "with output_lock(sys.argv[1]):\n"
                "    multiprocessing.get_context('fork').Process(target=work).start()\n    time.sleep(60)\n")


def test_an_out_is_free_once_its_holder_is_killed_though_a_forked_worker_lives_on(tmp_path):
    """pretrain's loader workers are forked, and a flock belongs to the open file they inherited: after a kill -9
    of the run, OUT stayed locked until the workers noticed and exited (seconds), and a --resume started at once
    was refused naming the dead process."""
    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_FORKING, str(out)], stdout=subprocess.PIPE, text=True)
    worker = int(holder.stdout.readline())
    try:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()  # not its stdout's end: the worker holds that open
        with output_lock(out):
            pass
    finally:
        os.kill(worker, signal.SIGKILL)
        holder.stdout.close()
