"""Fine-tuning under torchrun and after a stop: 2 gloo processes give the losses and dev scores of 1, a run
resumed after SIGTERM equals the uninterrupted one, and finished seeds are not trained again."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from conftest import never_called
from glue_fixtures import write_glue_data
from processes import ranks_said, run_group, torchrun_env
from test_finetune import _encoder
from typer.testing import CliRunner

from bertctl import files, finetune, finetune_work, optim, output_locks
from bertctl.cli import app
from bertctl.config import FinetuneConfig
from bertctl.config_records import config_to_dict
from bertctl.data.batches import rank_micro_batches
from bertctl.errors import BertctlError
from bertctl.finetune import finetune_glue
from bertctl.training import Distributed

# 61 examples in batches of 6: ten full batches and one of a single example, which leaves the second of
# two processes without a row; micro-batches of 2 make a process's 3 examples two passes (2 + 1).
SETTINGS = {"lr": 5e-3, "batch_size": 6, "micro_batch_size": 2, "max_seq_length": 32, "eval_batch_size": 4,
            "epochs": 3}
PER_EPOCH = 11


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def encoder(tmp_path_factory) -> Path:
    return _encoder(tmp_path_factory.mktemp("model") / "encoder")


@pytest.fixture(scope="module")
def glue(tmp_path_factory) -> Path:
    return write_glue_data(tmp_path_factory.mktemp("glue"), tasks=("rte", "mrpc"), n_train=61, n_dev=11,
                           n_test=2, seed=3)


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _losses(path: Path) -> dict[int, float]:
    return {row["step"]: row["loss"] for row in _rows(path) if "loss" in row}


def _dev(path: Path) -> list[dict]:
    return [row for row in _rows(path) if "epoch" in row and "loss" not in row]


def test_every_rank_runs_as_many_micro_batches_and_every_row_once():
    for size, world, micro in [(6, 2, 2), (1, 2, 2), (5, 4, 1), (7, 3, 4), (32, 8, 4)]:
        rows = np.arange(100, 100 + size)
        split = [rank_micro_batches(rows, micro, rank, world) for rank in range(world)]
        assert len({len(chunks) for chunks in split}) == 1
        assert all(len(chunk) <= micro for chunks in split for chunk in chunks)
        assert np.concatenate([c for chunks in split for c in chunks]).tolist() == rows.tolist()  # contiguous


def _torchrun(args: list[str], processes: int, port: int, tmp_path: Path) -> subprocess.CompletedProcess:
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes),
                "--master_port", str(port + os.getpid() % 1000), "-m", "bertctl"]
    return subprocess.run([*launcher, *args], capture_output=True, text=True, env=torchrun_env(tmp_path))


def _flags(settings: dict) -> list[str]:
    return [part for key, value in settings.items() for part in (f"--{key.replace('_', '-')}", str(value))]


@pytest.mark.parametrize("recipe", ["finetune_classifier", "finetune_multiple_choice"])
def test_a_row_flagged_not_real_is_not_counted_right(recipe: str) -> None:
    """Under torchrun a rank with no share of a batch runs one row flagged not real: answered right, it must not
    count towards the training accuracy in metrics.jsonl."""
    import importlib
    from types import SimpleNamespace

    import torch

    loss_terms = importlib.import_module(f"bertctl.{recipe}").classification_loss_terms
    logits = torch.tensor([[0.0, 1.0]])
    def model(*args, **kwargs):
        return SimpleNamespace(logits=logits, loss=torch.tensor(0.5))
    batch = {"input_ids": None, "token_type_ids": None, "labels": torch.tensor([1])}
    assert [int(loss_terms(model, {**batch, "real": torch.tensor([real])})["task"][1]) for real in (True, False)] \
        == [1, 0]


def test_two_gloo_processes_give_the_losses_and_dev_scores_of_one(encoder, glue, tmp_path):
    settings = {**SETTINGS, "epochs": 4}  # seed 6 goes from chance to every dev example right: the scores move
    finetune_glue(FinetuneConfig(model=encoder, data=str(glue), task="mrpc", out=tmp_path / "one", dropout=0.0,
                                 seeds=(6,), log_every=1, device="cpu", **settings))
    two = _torchrun(["finetune", "glue", "mrpc", "--model", str(encoder), "--data", str(glue), "--dropout", "0",
                     "--seeds", "6", "--log-every", "1", "--device", "cpu", *_flags(settings),
                     "--out", str(tmp_path / "two")], 2, 29700, tmp_path)
    assert two.returncode == 0, ranks_said(two.stderr)
    assert two.stderr.count("fine-tuning") == 1 and two.stdout.count("saved") == 1  # rank 0 alone speaks
    a, b = _losses(tmp_path / "one" / "metrics.jsonl"), _losses(tmp_path / "two" / "metrics.jsonl")
    assert sorted(a) == sorted(b) == list(range(1, 4 * PER_EPOCH + 1))
    assert max(abs(a[s] - b[s]) for s in a) < 1e-4
    assert _dev(tmp_path / "one" / "metrics.jsonl") == _dev(tmp_path / "two" / "metrics.jsonl")
    results = [json.loads((tmp_path / run / "eval_results.json").read_text()) for run in ("one", "two")]
    assert results[0] == results[1]
    assert json.loads((tmp_path / "two" / "run.json").read_text())["world_size"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one", "tmp", "two"]  # no work folder; tmp: torchrun's TMPDIR


def _stop_at(monkeypatch, seed: int, step: int) -> list[tuple[int, int]]:
    """SIGTERM this process as `seed` begins step index `step`; returns every (seed, step) trained.

    The seed is seen when an epoch's batches are drawn, the step when its learning rate is."""
    trained, current = [], [0]
    batches, lr_factor = finetune.train_batches, optim.lr_factor

    def drawing(lengths: np.ndarray, batch_size: int, s: int, epoch: int, grouped: bool) -> list[np.ndarray]:
        current[0] = s
        return batches(lengths, batch_size, s, epoch, grouped)

    def signalling(k: int, *args) -> float:
        trained.append((current[0], k))
        if (current[0], k) == (seed, step):
            signal.raise_signal(signal.SIGTERM)
        return lr_factor(k, *args)

    monkeypatch.setattr(finetune, "train_batches", drawing)
    monkeypatch.setattr(optim, "lr_factor", signalling)
    return trained


def _config(encoder: Path, glue: Path, out: Path, **overrides) -> FinetuneConfig:
    return FinetuneConfig(model=encoder, data=str(glue), task="rte", out=out,
                          **{**SETTINGS, "log_every": 4, "seeds": (1,), **overrides})


def test_an_out_another_bertctl_fine_tunes_into_is_refused_untouched_and_free_once_it_ends(encoder, glue, tmp_path):
    """A job submitted twice with --resume or --overwrite would delete the first one's work folder under it."""
    args = ["finetune", "glue", "rte", "--model", str(encoder), "--data", str(glue), "--out", str(tmp_path / "run"),
            "--epochs", "1", "--max-seq-length", "32", "--resume"]
    with output_locks.output_lock(tmp_path / "run"):
        refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 1 and refused.stderr.splitlines() == [
        f"bertctl: error: {tmp_path / 'run'} is in use by another bertctl (pid {os.getpid()} on "
        f"{socket.gethostname()}); wait for it to finish or choose another --out"]
    assert list(tmp_path.iterdir()) == []
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_a_resume_of_a_finished_run_says_it_is_finished(encoder, glue, tmp_path):
    """It said `--out OUT already exists; pass --overwrite to replace it`, as if that were the way to go on."""
    out = tmp_path / "run"
    args = ["finetune", "glue", "rte", "--model", str(encoder), "--data", str(glue), "--out", str(out),
            "--epochs", "1", "--max-seq-length", "32"]
    assert CliRunner().invoke(app, args).exit_code == 0
    finished = {path: path.read_bytes() for path in out.rglob("*") if path.is_file()}
    refused = CliRunner().invoke(app, [*args, "--resume"])
    assert refused.exit_code == 2 and refused.stderr.splitlines() == [
        f"bertctl: error: --resume: --out {out} already exists and holds no unfinished run (it finished, or is "
        "another folder); pass --overwrite instead of --resume to replace it, or choose another --out"]
    assert {path: path.read_bytes() for path in out.rglob("*") if path.is_file()} == finished
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_a_resume_of_an_existing_out_with_overwrite_or_an_unfinished_run_is_not_said_finished(encoder, glue,
                                                                                              tmp_path):
    """Beside an unfinished run, an existing OUT asks for --overwrite (the resume replaces it at the end); with
    --overwrite a resume of a finished OUT starts again and replaces it."""
    out, work = tmp_path / "run", tmp_path / ".run.work"
    args = ["finetune", "glue", "rte", "--model", str(encoder), "--data", str(glue), "--out", str(out),
            "--epochs", "1", "--max-seq-length", "32", "--resume"]
    out.mkdir()
    work.mkdir()
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 2 and refused.stderr.splitlines() == [
        f"bertctl: error: --out {out} already exists; pass --overwrite to replace it"]
    work.rmdir()
    done = CliRunner().invoke(app, [*args, "--overwrite"])
    assert done.exit_code == 0, done.output
    assert f"--resume: {out} has no unfinished run; starting from the beginning" in done.stderr
    assert (out / "model.safetensors").is_file()


def test_resume_after_sigterm_mid_epoch_equals_the_uninterrupted_run(encoder, glue, tmp_path, monkeypatch, capsys):
    full = finetune_glue(_config(encoder, glue, tmp_path / "full"))
    assert json.loads((full / "eval_results.json").read_text())["best_epoch"] == 1  # kept from before the stop
    trained = _stop_at(monkeypatch, 1, 2 * PER_EPOCH + 4)  # stops after step 27 of 33, in the third epoch
    assert finetune_glue(_config(encoder, glue, tmp_path / "run")) is None
    assert "stopped at step 27 of 33 (rte seed 1)" in capsys.readouterr().err
    work = tmp_path / ".run.work"
    assert not (tmp_path / "run").exists()
    assert sorted(p.name for p in (work / "seed-1").iterdir() if p.name.startswith(("step", "best"))) == \
        ["best-001", "step-000027"]
    refused = CliRunner().invoke(app, ["finetune", "glue", "rte", "--model", str(encoder), "--data", str(glue),
                                       "--out", str(tmp_path / "run")])
    assert refused.exit_code == 2 and "pass --resume to continue it" in refused.stderr
    with pytest.raises(finetune.UsageError, match="--lr 0.005 \\(now 0.001\\)"):
        finetune_glue(_config(encoder, glue, tmp_path / "run", resume=True, lr=1e-3))

    trained.clear()
    resumed = finetune_glue(_config(encoder, glue, tmp_path / "run", resume=True))
    assert trained[0] == (1, 27) and not work.exists()
    a, b = _losses(full / "metrics.jsonl"), _losses(resumed / "metrics.jsonl")
    assert sorted(a) == sorted(b) == [*range(4, 33, 4), 33]  # the row at 28 averages steps from both sides
    assert max(abs(a[s] - b[s]) for s in a) < 1e-5
    assert _dev(full / "metrics.jsonl") == _dev(resumed / "metrics.jsonl")
    for name in ("eval_results.json", "model.safetensors", "config.json"):
        assert (full / name).read_bytes() == (resumed / name).read_bytes(), name
    runs = [json.loads((run / "run.json").read_text()) for run in (full, resumed)]
    assert [run["config"].pop("out") for run in runs] == [str(full), str(resumed)]
    assert [run["config"].pop("resume") for run in runs] == [False, True]  # the resumed process's own record
    assert runs[0] == runs[1]


def test_a_resumed_multi_seed_run_does_not_train_finished_seeds_again(encoder, glue, tmp_path, monkeypatch,
                                                                     capsys):
    settings = {"seeds": (1, 2, 3), "epochs": 2, "save_every": 5}
    full = finetune_glue(_config(encoder, glue, tmp_path / "full", **settings))
    trained = _stop_at(monkeypatch, 2, PER_EPOCH - 1)  # seed 2, in epoch 1's last step: saved after its dev scores
    assert finetune_glue(_config(encoder, glue, tmp_path / "run", **settings)) is None
    work = tmp_path / ".run.work"
    assert (work / "seed-1" / "done" / "model.safetensors").is_file() and not (work / "seed-3").exists()
    assert sorted(p.name for p in (work / "seed-2").glob("step-*")) == [f"step-{PER_EPOCH:06d}"]
    assert _dev(work / "seed-2" / "metrics.jsonl")[-1]["step"] == PER_EPOCH
    trained.clear()
    capsys.readouterr()
    resumed = finetune_glue(_config(encoder, glue, tmp_path / "run", resume=True, **settings))
    assert {seed for seed, _ in trained} == {2, 3} and trained[0] == (2, PER_EPOCH)
    assert capsys.readouterr().err.count("rte: fine-tuning") == 1  # said by the first seed it trains
    assert sorted(p.name for p in resumed.iterdir()) == ["results.json", "results.md", "seed-1", "seed-2", "seed-3"]
    assert (full / "results.json").read_text() == (resumed / "results.json").read_text()
    for seed in (1, 2, 3):
        a, b = (_losses(run / f"seed-{seed}" / "metrics.jsonl") for run in (full, resumed))
        assert sorted(a) == sorted(b) and max(abs(a[s] - b[s]) for s in a) < 1e-5


def test_a_checkpoint_that_cannot_be_written_names_the_out_given(encoder, glue, tmp_path, monkeypatch):
    """A full disk while saving a checkpoint said `cannot write .OUT.work/seed-1/step-000001`, a hidden folder the
    user never named; the output given comes first. Nothing was saved, so nothing is left."""
    from bertctl import training_state

    def full_disk(*args, **kwargs) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    out = tmp_path / "run"
    monkeypatch.setattr(training_state, "write_training_state", full_disk)
    with pytest.raises(BertctlError) as error:
        finetune_glue(_config(encoder, glue, out, epochs=1, save_every=1))
    assert str(error.value) == (f"cannot write {out}: No space left on device; free some disk space or choose another "
                                f"path (writing {tmp_path / '.run.work' / 'seed-1' / 'step-000001'})")
    assert list(tmp_path.iterdir()) == []


class _Killed(BaseException):
    """kill -9 at a chosen moment: no cleanup of the command's own runs after it."""


@contextmanager
def _killed_as_out_is_put_in_place(target: Path, tag: str = "tmp", retire: Path | None = None,
                                   overwrite: bool = True) -> Iterator[Path]:
    """building_folder killed once OUT's temp folder is filled, before it is renamed into place. The runs it stands
    in for have no --overwrite: an OUT made meanwhile would be kept (publish)."""
    assert overwrite is False
    tmp = files.temp_folder_beside(target, tag)
    yield tmp
    shutil.rmtree(tmp)  # a killed writer's goes at the next run; this process lives on, so it takes its own
    raise _Killed


@pytest.mark.parametrize("seeds", [(1,), (1, 2)])
def test_a_kill_while_out_is_assembled_loses_no_finished_seed(encoder, glue, tmp_path, monkeypatch, seeds):
    """Killed after OUT's temp folder is filled, before it is renamed into place: the finished seeds' models are
    still in the work folder, so --resume publishes them without training again (moving them into the temp
    folder lost them, and a kill part way through one seed's files gave an OUT without its model)."""
    settings = {"seeds": seeds, "epochs": 1}
    full = finetune_glue(_config(encoder, glue, tmp_path / "full", **settings))
    with monkeypatch.context() as patched, pytest.raises(_Killed):
        patched.setattr(finetune_work, "building_folder", _killed_as_out_is_put_in_place)
        finetune_glue(_config(encoder, glue, tmp_path / "run", **settings))
    assert not (tmp_path / "run").exists()
    trained = _stop_at(monkeypatch, -1, -1)
    monkeypatch.setattr(finetune, "encode_examples", never_called("encode_examples"))  # no seed left: nothing to encode
    resumed = finetune_glue(_config(encoder, glue, tmp_path / "run", resume=True, **settings))
    assert trained == [] and sorted(p.name for p in tmp_path.iterdir()) == ["full", "run"]
    names = sorted(p.relative_to(full) for p in full.rglob("*") if p.name != "run.json")
    assert sorted(p.relative_to(resumed) for p in resumed.rglob("*") if p.name != "run.json") == names
    for name in names:
        if (full / name).is_file() and name.name != "metrics.jsonl":
            assert (full / name).read_bytes() == (resumed / name).read_bytes(), name


def test_an_out_made_meanwhile_is_kept_and_the_finished_seeds_wait_for_a_resume(tmp_path):
    """OUT made by another program while the run trained (absent when it was checked) was replaced silently by the
    run's; without --overwrite it stays now, the line names --resume --overwrite, and the work folder keeps the
    finished seeds, which that resume publishes without training them again."""
    out, work = tmp_path / "run", tmp_path / ".run.work"
    (work / "seed-1" / "done").mkdir(parents=True)

    def fill(staging: Path) -> None:
        (staging / "config.json").write_text("{}")
        (out / "theirs").mkdir(parents=True, exist_ok=True)

    with pytest.raises(files.OutAppeared) as appeared:
        finetune_work.publish(work, out, fill, overwrite=False)
    assert str(appeared.value).endswith(f"choose another --out, or pass --resume --overwrite to put this run's "
                                        f"models, kept in {work}, in its place")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".run.work", "run"] and os.listdir(out) == ["theirs"]
    assert os.listdir(work / "seed-1") == ["done"]
    finetune_work.publish(work, out, fill, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"] and os.listdir(out) == ["config.json"]


def test_a_classify_resume_with_every_seed_finished_publishes_them_without_encoding_its_files(encoder, tmp_path,
                                                                                               monkeypatch, capsys):
    """The tables were read and encoded before the finished seeds were found: minutes of tokenizing a big file
    for nothing. They are read for their labels (the task's classes, its metrics), never encoded."""
    lines = ["text,label", *(f"{word} {word},{word}" for word in ["yes", "no"] * 8)]
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.csv").write_text("\n".join(lines) + "\n")

    def run(out: str, **settings) -> Path | None:
        return finetune.finetune_classify(FinetuneConfig(
            model=encoder, train=tmp_path / "data" / "train.csv", validation=tmp_path / "data" / "train.csv",
            text_columns=("text",), out=tmp_path / out, **{**SETTINGS, "epochs": 1, **settings}))

    full = run("full")
    said = capsys.readouterr().out
    with monkeypatch.context() as patched, pytest.raises(_Killed):
        patched.setattr(finetune_work, "building_folder", _killed_as_out_is_put_in_place)
        run("run")
    capsys.readouterr()
    monkeypatch.setattr(finetune, "encode_parts", never_called("encode_parts"))
    resumed = run("run", resume=True)
    assert capsys.readouterr().out == said.replace(str(full), str(resumed))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "full", "run"]
    assert (full / "eval_results.json").read_bytes() == (resumed / "eval_results.json").read_bytes()


def test_a_kill_after_out_is_in_place_leaves_no_work_folder_only_what_the_next_writer_of_out_removes(
        encoder, glue, tmp_path, monkeypatch):
    """Killed after OUT was renamed into place, before its work folder was removed: .OUT.work stayed beside the
    complete OUT as an unfinished run (`--resume` refused for the OUT it had published; OUT deleted, the command
    refused until --resume or --overwrite), and only --overwrite removed it. It leaves in the rename's step, under
    a hidden name of OUT's that names its writer, so what a kill leaves is a dead writer's the next one removes."""
    settings, out, work = {"epochs": 1}, tmp_path / "run", tmp_path / ".run.work"
    full = finetune_glue(_config(encoder, glue, tmp_path / "full", **settings))
    removing = shutil.rmtree

    def killed(path, *args, **kwargs) -> None:  # kill -9 as the work folder, or what it became, is removed
        if out.exists() and (Path(path) == work or Path(path).name.startswith(f".run.old-{os.getpid()}-")):
            raise _Killed
        removing(path, *args, **kwargs)

    with monkeypatch.context() as patched, pytest.raises(_Killed):
        patched.setattr(shutil, "rmtree", killed)
        finetune_glue(_config(encoder, glue, out, **settings))
    assert (out / "model.safetensors").read_bytes() == (full / "model.safetensors").read_bytes()
    assert not work.exists()
    [left] = [p for p in tmp_path.iterdir() if p.name not in ("full", "run")]
    dead = tmp_path / left.name.replace(f"-{os.getpid()}-", "-999999999-")  # its writer gone, as after a kill
    left.rename(dead)
    shutil.rmtree(out)  # a run of the same command writes OUT again, and with it removes what its killed writer left
    finetune_glue(_config(encoder, glue, out, **settings))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full", "run"]


def test_a_resume_on_edited_data_is_refused_and_run_json_records_the_data(encoder, glue, tmp_path, monkeypatch):
    """The same flags over a changed train file went on from the checkpoint with other examples: neither an
    exact resume nor the run its run.json described."""
    data = tmp_path / "glue"
    shutil.copytree(glue, data)
    _stop_at(monkeypatch, 1, 3)
    assert finetune_glue(_config(encoder, data, tmp_path / "run")) is None
    started = json.loads((tmp_path / ".run.work" / "seed-1" / "run.json").read_text())["features_sha256"]
    train = data / "RTE" / "train.tsv"
    original = train.read_text()
    lines = original.splitlines(keepends=True)  # one label flipped
    flipped = {"\tentailment\n": "\tnot_entailment\n", "\tnot_entailment\n": "\tentailment\n"}
    lines[1] = next(lines[1].replace(a, b) for a, b in flipped.items() if lines[1].endswith(a))
    train.write_text("".join(lines))
    with pytest.raises(finetune.UsageError, match=f"--data {data}: rte's examples are not those the run in "):
        finetune_glue(_config(encoder, data, tmp_path / "run", resume=True))
    train.write_text(original)
    resumed = finetune_glue(_config(encoder, data, tmp_path / "run", resume=True))  # the checkpoint was kept
    assert json.loads((resumed / "run.json").read_text())["features_sha256"] == started and len(started) == 64


def test_a_resume_refused_over_a_damaged_metrics_file_leaves_the_work_folder_as_it_was(encoder, glue, tmp_path,
                                                                                       monkeypatch):
    """The seed's run.json was rewritten (this resume's settings) before its metrics.jsonl was read and refused."""
    _stop_at(monkeypatch, 1, 5)
    assert finetune_glue(_config(encoder, glue, tmp_path / "run", epochs=1)) is None
    work = tmp_path / ".run.work"
    (work / "seed-1" / "metrics.jsonl").write_bytes(b'{"step": 4, "loss": 0.7}\n\xff\n')
    before = {path: path.read_bytes() for path in work.rglob("*") if path.is_file()}
    with pytest.raises(BertctlError, match=r"metrics.jsonl is damaged .*; restore or delete it$"):
        finetune_glue(_config(encoder, glue, tmp_path / "run", epochs=1, resume=True, log_every=2))
    assert {path: path.read_bytes() for path in work.rglob("*") if path.is_file()} == before


def test_a_work_folders_run_json_that_is_a_folder_is_refused_as_a_damaged_one(encoder, glue, tmp_path, monkeypatch):
    """It was read as missing: the resume compared no settings with the ones the run was started with."""
    _stop_at(monkeypatch, 1, 5)
    assert finetune_glue(_config(encoder, glue, tmp_path / "run", epochs=1)) is None
    saved = tmp_path / ".run.work" / "run.json"
    saved.unlink()
    saved.mkdir()
    with pytest.raises(BertctlError, match=r"run.json is damaged \(not a file\); restore or delete it$"):
        finetune_glue(_config(encoder, glue, tmp_path / "run", epochs=1, resume=True))


def test_ranks_finding_another_unfinished_run_in_their_out_are_refused(encoder, glue, tmp_path, monkeypatch):
    """Nodes each with their own OUT (no shared storage): rank 0 alone saves, so on a resume rank 1 found no work
    folder and trained from step 0 while rank 0 went on from its checkpoint, until one of them hung in a collective
    the other never reached."""
    _stop_at(monkeypatch, 1, 3)
    assert finetune_glue(_config(encoder, glue, tmp_path / "node0" / "run", seeds=(1,))) is None
    (tmp_path / "node1").mkdir()
    (tmp_path / "node.py").write_text(  # each rank in its own "node", writing the relative --out `run`
        "import os, sys\nos.chdir(f'node{os.environ[\"RANK\"]}')\n"
        "from bertctl.cli import main\nsys.argv[0] = 'bertctl'\nmain()\n")
    done = run_group([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                      str(29600 + os.getpid() % 1000), str(tmp_path / "node.py"), "finetune", "glue", "rte",
                      "--model", str(encoder), "--data", str(glue), "--out", "run", "--seeds", "1", "--log-every",
                      "4", "--device", "cpu", "--resume", *_flags(SETTINGS)],
                     timeout=120, cwd=tmp_path, env=torchrun_env(tmp_path))
    assert done.returncode != 0
    assert "--out run: rank 1 finds another unfinished run in .run.work than rank 0" in done.stderr, \
        done.stderr[-2000:]
    assert [p.name for p in (tmp_path / "node0" / ".run.work" / "seed-1").glob("step-*")] == ["step-000004"]


def test_sigterm_stops_the_command_cleanly_and_resume_finishes_it(encoder, glue, tmp_path):
    out, work = tmp_path / "run", tmp_path / ".run.work"
    args = ["finetune", "glue", "rte", "--model", str(encoder), "--data", str(glue), "--out", str(out),
            "--seeds", "4", "--log-every", "1", "--device", "cpu", *_flags({**SETTINGS, "epochs": 20})]
    process = subprocess.Popen([sys.executable, "-m", "bertctl", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.time() + 60
    while time.time() < deadline and not (work / "seed-4" / "metrics.jsonl").is_file():
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    [message] = [line for line in err.splitlines() if "stopped" in line]
    assert message.endswith("run the same command with --resume to continue") and str(work) in message
    [checkpoint] = (work / "seed-4").glob("step-*")
    assert int(checkpoint.name.split("-")[1]) == max(_losses(work / "seed-4" / "metrics.jsonl")) < 20 * PER_EPOCH
    assert not out.exists()
    resumed = CliRunner().invoke(app, [*args, "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert sorted(_losses(out / "metrics.jsonl")) == list(range(1, 20 * PER_EPOCH + 1))
    assert not work.exists()


def test_under_torchrun_a_warning_about_the_data_is_given_once(encoder, tmp_path):
    """Every rank reads the same files and model; rank 0 alone says what it found in them."""
    data = write_glue_data(tmp_path / "glue", tasks=("sst2",), n_train=100, n_dev=4, n_test=1, seed=2)
    train = data / "SST-2" / "train.tsv"
    lines = train.read_text().splitlines(keepends=True)
    lines[5] = lines[5].split("\t")[0] + "\n"  # a row missing its label: skipped, with a warning
    train.write_text("".join(lines))
    two = _torchrun(["finetune", "glue", "sst2", "--model", str(encoder), "--data", str(data), "--epochs", "1",
                     "--batch-size", "50", "--max-seq-length", "16", "--device", "cpu",
                     "--out", str(tmp_path / "run")], 2, 29800, tmp_path)
    assert two.returncode == 0, ranks_said(two.stderr)
    assert two.stderr.count("do not have 2 fields") == 1, two.stderr[-2000:]


def test_the_examples_hash_reads_every_token_id_as_runs_begun_before_recorded_it():
    """Encoded rows are held end to end in one array now, not as an array per row: the hash must still read each
    row's ids as it did, or a run begun before could not be resumed and a word changed for another would pass."""
    import hashlib

    from bertctl.data.glue import Examples
    from bertctl.evaluate import encode_examples
    from bertctl.finetune_seed import _hash_arrays
    from bertctl.tokenizer import BertTokenizer

    tokenizer = BertTokenizer.from_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c"])

    def digest(texts: list[str]) -> tuple[str, str]:
        features = encode_examples(tokenizer, Examples(texts, ["b", "a"], [0, 1], ["0", "1"], "rows"), 16, show=False)
        ours, per_row = hashlib.sha256(), hashlib.sha256()
        _hash_arrays(ours, features.input_ids)
        _hash_arrays(per_row, [np.array(row) for row in features.input_ids])  # the rows as they were held
        return ours.hexdigest(), per_row.hexdigest()

    ours, before = digest(["a b", "c"])
    assert ours == before and digest(["a c", "c"])[0] != ours


def test_the_hash_of_ner_and_choice_features_reads_every_array_as_runs_begun_before_recorded_it(tmp_path):
    """NER sentences and multiple-choice examples are held end to end in one array each now, not as an array per
    sentence (per choice): the hash must still read each row as it did, or a run begun before could not be
    resumed."""
    import hashlib
    from dataclasses import fields

    from bertctl.data.choice import ChoiceData, make_choice_features
    from bertctl.data.ner import NerData, make_ner_features
    from bertctl.finetune_seed import _hash_arrays
    from bertctl.tokenizer import BertTokenizer

    tokenizer = BertTokenizer.from_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c", "##c"])

    def as_held_before(value):
        if isinstance(value, np.ndarray) or not hasattr(value, "__getitem__") or not len(value):
            return value
        first = value[0]
        if isinstance(first, np.ndarray):
            return [np.array(row) for row in value]
        return [[np.array(row) for row in item] for item in value] if isinstance(first, list) else value

    def digests(features) -> tuple[str, str]:
        ours, before = hashlib.sha256(), hashlib.sha256()
        for part in fields(features):
            _hash_arrays(ours, getattr(features, part.name))
            _hash_arrays(before, as_held_before(getattr(features, part.name)))
        return ours.hexdigest(), before.hexdigest()

    def ner(words: list[list[str]]) -> tuple[str, str]:
        data = NerData(words, [["O"] * len(w) for w in words], tmp_path / "ner.txt")
        return digests(make_ner_features(tokenizer, data, ["B-X", "O"], 6))

    def choice(contexts: list[str]) -> tuple[str, str]:
        data = ChoiceData(["0", "1"], contexts, [["a b", "cc"], ["b", "a c a"]], [0, 1], tmp_path / "c.csv")
        return digests(make_choice_features(tokenizer, data, 7))

    for make, given, changed in ((ner, [["a", "cc"], [], ["b", "a", "c", "a", "b"]],
                                  [["a", "cc"], [], ["b", "a", "c", "c", "b"]]),
                                 (choice, ["a c", "b b b b"], ["a c", "b b c b"])):
        ours, before = make(given)
        assert ours == before and make(changed)[0] != ours


def test_the_examples_hash_reads_each_arrays_dtype_and_shape_as_runs_begun_before_recorded_it():
    """The same bytes cut into other rows (all-zero segment ids, rows of 3 and 1 tokens or of 2 and 2), or read as
    another dtype, are other examples; and the hash of given rows is the one runs begun before recorded."""
    import hashlib

    from bertctl.finetune_seed import _hash_arrays

    def digest(value) -> str:
        hashed = hashlib.sha256()
        _hash_arrays(hashed, value)
        return hashed.hexdigest()

    assert digest([np.zeros(3, np.int64), np.zeros(1, np.int64)]) != digest([np.zeros(2, np.int64)] * 2)
    assert digest(np.zeros(4, np.int64)) != digest(np.zeros(4, np.float64))
    assert digest([np.array([2, 5, 3], np.int64), np.array([2, 3], np.int64)]) == \
        "68245ae7eac4803d1956ce5748ff505def8fed37b285265307de0b5d2fa95693"


def test_a_run_of_bad_steps_is_counted_on_across_a_checkpoint():
    """--max-bad-steps counts NaN/inf steps in a row; a stop and resume in the middle of such a run does not
    start the count again."""
    from bertctl.finetune_seed import Progress

    saved = json.loads(json.dumps(Progress(step=8, bad_in_row=3).record()))
    assert Progress.from_record(saved, log_every=4).bad_in_row == 3


@pytest.mark.parametrize("change", [{"save_every": 7}, {"log_every": 3}, {"max_bad_steps": 9}, {"device": "cpu"},
                                    {"gradient_checkpointing": True}, {"overwrite": True}])
def test_a_resume_may_change_the_settings_the_docs_name(tmp_path, change):
    """docs/finetuning.md: --save-every, --log-every, --max-bad-steps, --device, --gradient-checkpointing and
    --overwrite may change on a resume; others are refused (test_resume_after_sigterm_mid_epoch...)."""
    settings = {"model": "m", "data": "d", "task": "rte", "out": tmp_path / "run"}
    (tmp_path / ".run.work").mkdir()
    (tmp_path / ".run.work" / "run.json").write_text(json.dumps({"config": config_to_dict(FinetuneConfig(**settings))}))
    cfg = FinetuneConfig(**settings, resume=True, **change)
    assert finetune_work.check_work(cfg, Distributed()) == (tmp_path / "run", tmp_path / ".run.work")


def test_a_resumed_seed_keeps_its_metrics_rows_up_to_its_checkpoint_and_a_new_one_starts_empty(tmp_path):
    """Rows a killed run logged after its checkpoint are logged again by the resume, so they are dropped."""
    seed_work = tmp_path / "seed-1"
    seed_work.mkdir()
    rows = [{"step": 4, "loss": 0.5, "elapsed": 2.0}, {"step": 5, "loss": 0.4, "elapsed": 3.0}]
    (seed_work / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert finetune_work.open_seed(seed_work, seed_work / "step-000004", 4, {"seed": 1}) == 2.0
    assert _rows(seed_work / "metrics.jsonl") == rows[:1]
    assert finetune_work.open_seed(seed_work, None, 0, {"seed": 1}) == 0.0
    assert sorted(p.name for p in seed_work.iterdir()) == ["run.json"]


def test_a_resume_compares_the_examples_hash_only_where_run_json_records_one(tmp_path):
    """A seed without run.json, or whose run.json predates features_sha256, is not refused."""
    finetune_work.refuse_other_examples(tmp_path, "ab", "--data d", "rte")
    (tmp_path / "run.json").write_text(json.dumps({"seed": 1}))
    finetune_work.refuse_other_examples(tmp_path, "ab", "--data d", "rte")
    (tmp_path / "run.json").write_text(json.dumps({"features_sha256": "cd"}))
    with pytest.raises(finetune.UsageError, match="^--data d: rte's examples are not those the run in "):
        finetune_work.refuse_other_examples(tmp_path, "ab", "--data d", "rte")


def test_one_seed_is_collected_as_the_model_folder_itself(tmp_path):
    """docs/finetuning.md: one seed's OUT is its model folder; several get seed-N/ folders and results.json."""
    (tmp_path / "work" / "seed-3" / "done").mkdir(parents=True)
    (tmp_path / "work" / "seed-3" / "done" / "config.json").write_text("{}")
    finetune_work.collect({"seeds": [3]}, tmp_path / "work", tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["config.json"]


def test_a_kill_after_a_better_epoch_resumes_with_the_best_epoch_its_checkpoint_refers_to(encoder, glue, tmp_path,
                                                                                           monkeypatch):
    """The checkpoint after epoch 1 refers to best-001; killed after epoch 2 beat it, before a newer checkpoint,
    the run resumes from that checkpoint, and when epoch 1 stays the best, done/ is its model."""
    import bertctl.finetune_classifier

    dev = iter([0.5, 0.6, 0.4])  # epochs 1 and 2, then epoch 2 again after the resume
    monkeypatch.setattr(bertctl.finetune_classifier, "score", lambda *args, **kwargs: {
        "validation": {"accuracy": next(dev)}})

    def killed(*args) -> None:  # kill -9 once the last epoch is scored
        raise _Killed

    settings = {"epochs": 2, "batch_size": 64, "micro_batch_size": None, "save_every": 1}  # a step an epoch
    with monkeypatch.context() as patched, pytest.raises(_Killed):
        patched.setattr(finetune, "finish_seed", killed)
        finetune_glue(_config(encoder, glue, tmp_path / "run", **settings))
    seed = tmp_path / ".run.work" / "seed-1"
    assert sorted(p.name for p in seed.iterdir() if p.name.startswith(("step", "best"))) == \
        ["best-001", "best-002", "step-000001"]
    resumed = finetune_glue(_config(encoder, glue, tmp_path / "run", resume=True, **settings))
    results = json.loads((resumed / "eval_results.json").read_text())
    assert (results["best_epoch"], results["best_step"], results["validation"]) == (1, 1, {"accuracy": 0.5})
