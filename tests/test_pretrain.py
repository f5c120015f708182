"""Pre-training end to end on a tiny corpus: learning, exact resume, signals, DDP parity, refusals."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import never_called
from processes import dead_pid, gone, ranks_said, run_group, torchrun_env
from typer.testing import CliRunner

from bertctl.cli import app
from bertctl.config import CorpusConfig, PretrainConfig
from bertctl.config_files import layered
from bertctl.errors import BertctlError, UsageError
from bertctl.tokenizer import BertTokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

WORDS = ("the cat dog bird fish sat ran flew swam on under over a mat log tree pond quickly slowly happily "
         "red blue green big small old young and then later").split()


def _write_text(path: Path, documents: int, seed: int) -> None:
    """Documents of short sentences from a tiny grammar: learnable, so the MLM loss can fall."""
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(documents):
        for _ in range(int(rng.integers(4, 9))):
            subject, verb, place = rng.choice(WORDS[1:5]), rng.choice(WORDS[5:9]), rng.choice(WORDS[12:16])
            lines.append(f"the {rng.choice(WORDS[20:24])} {subject} {verb} {rng.choice(WORDS[9:12])} "
                         f"the {place} {rng.choice(WORDS[16:19])} .")
        lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    from bertctl.corpus import build_corpus

    root = tmp_path_factory.mktemp("pretrain")
    BertTokenizer.from_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", *WORDS]).save(root / "tok")
    _write_text(root / "docs.txt", documents=40, seed=0)
    build_corpus(CorpusConfig(inputs=(str(root / "docs.txt"),), tokenizer=root / "tok", out=root / "corpus",
                              max_seq_length=32, validation_fraction=0.1, workers=1, seed=1))
    return root / "corpus"


def small_run(corpus: Path, out: Path, **overrides) -> PretrainConfig:
    values = {"corpus": corpus, "out": out, "model_config": "tiny", "steps": 12, "batch_size": 8, "lr": 2e-3,
              "warmup_steps": 2, "log_every": 1, "save_every": 4, "keep": 10, "eval_every": 0, "seed": 7,
              "num_workers": 0, "device": "cpu"}
    return PretrainConfig(**layered(PretrainConfig, values, overrides))


def losses(run: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {row["step"]: row["loss"] for row in rows if "loss" in row}


def test_loss_falls_and_run_writes_its_files(corpus, tmp_path):
    from bertctl.pretrain import pretrain

    final = pretrain(small_run(corpus, tmp_path / "run", steps=40, save_every=10, keep=2, eval_every=20,
                               eval_samples=64))
    curve = losses(tmp_path / "run")
    assert np.mean([curve[s] for s in range(36, 41)]) < np.mean([curve[s] for s in range(1, 6)]) - 0.5
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["final", "metrics.jsonl", "run.json",
                                                                     "step-000020", "step-000030"]  # --keep 2
    assert sorted(p.name for p in final.iterdir()) == [
        "config.json", "model.safetensors", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json",
        "trainer_state.json", "training_state.safetensors", "vocab.txt"]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert {"step", "loss", "mlm_loss", "nsp_loss", "mlm_accuracy", "lr", "grad_norm", "tokens_per_second",
            "elapsed"} <= set(rows[0])
    assert [row["step"] for row in rows if "val_mlm_loss" in row and "val_nsp_accuracy" in row] == [20, 40]
    run_config = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run_config["config"]["steps"] == 40 and run_config["model"]["hidden_size"] == 128
    assert run_config["config"]["compile"] is None and run_config["compile"] is False  # default: on CUDA only


def test_run_json_records_the_cpu_threads_that_round_the_sums(corpus, tmp_path):
    """Another thread count gives other checkpoint bytes from the same command, so run.json says it (2 threads,
    not the module's one: a run.json that always said 1 would pass)."""
    import torch

    from bertctl.pretrain import pretrain

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        pretrain(small_run(corpus, tmp_path / "run", steps=3, save_every=0))
    finally:
        torch.set_num_threads(threads)
    assert json.loads((tmp_path / "run" / "run.json").read_text())["threads"] == 2


def test_resume_mid_epoch_reproduces_the_uninterrupted_run(corpus, tmp_path):
    """With accumulation (two micro-batches a step): the data position is counted in global batches."""
    from bertctl.pretrain import pretrain

    pretrain(small_run(corpus, tmp_path / "full", micro_batch_size=4))
    shutil.copytree(tmp_path / "full", tmp_path / "resumed")
    for name in ("final", "step-000008"):  # as if killed between step 5 and step 8
        shutil.rmtree(tmp_path / "resumed" / name)
    metrics = tmp_path / "resumed" / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    metrics.write_text("".join(json.dumps({**r, "elapsed": 1000.0 + r["step"]}) + "\n" for r in rows))
    pretrain(small_run(corpus, tmp_path / "resumed", resume=True, micro_batch_size=4))
    full, resumed = losses(tmp_path / "full"), losses(tmp_path / "resumed")
    assert sorted(resumed) == list(range(1, 13))
    assert max(abs(full[s] - resumed[s]) for s in range(5, 13)) < 1e-5
    clock = [json.loads(line)["elapsed"] for line in metrics.read_text().splitlines()]
    assert clock[4] > 1004.0 and clock == sorted(clock)  # the resumed run's clock goes on from step 4's


class _Board:
    """A stand-in for torch's SummaryWriter (tensorboard is an optional extra, not installed for the tests)."""

    made: list[_Board] = []

    def __init__(self, log_dir: str, purge_step: int | None = None) -> None:
        self.log_dir, self.purge_step, self.scalars, self.closed = Path(log_dir), purge_step, [], False
        _Board.made.append(self)

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self.scalars.append((tag, value, step))

    def close(self) -> None:
        self.closed = True


def test_tensorboard_gets_every_figure_and_hides_the_steps_a_resume_logs_again(corpus, tmp_path, monkeypatch):
    from bertctl.pretrain import pretrain

    module = types.ModuleType("torch.utils.tensorboard")
    module.SummaryWriter = _Board
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", module)
    monkeypatch.setattr(_Board, "made", [])
    pretrain(small_run(corpus, tmp_path / "run", steps=8))
    shutil.rmtree(tmp_path / "run" / "final")  # as if killed between step 5 and step 8
    pretrain(small_run(corpus, tmp_path / "run", steps=8, resume=True))
    first, resumed = _Board.made
    assert first.log_dir == resumed.log_dir == tmp_path / "run" / "tensorboard" and first.closed and resumed.closed
    assert (first.purge_step, resumed.purge_step) == (None, 5)  # events from step 5 on are the resumed run's
    assert sorted({step for tag, _, step in resumed.scalars if tag == "loss"}) == [5, 6, 7, 8]
    assert {(tag, step) for tag, _, step in first.scalars} >= {("mlm_loss", 3), ("nsp_loss", 3), ("lr", 3)}
    assert "step" not in {tag for tag, _, _ in first.scalars}  # the x axis, not a figure
    assert [v for tag, v, step in first.scalars if tag == "loss"] == [losses(tmp_path / "run")[s] for s in range(1, 9)]


def _rows(run: Path) -> dict[int, dict]:
    """Metrics rows by step, without the timing fields (they differ between any two runs)."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [row["step"] for row in rows]
    assert len(steps) == len(set(steps)), steps  # each step logged once, resumed or not
    return {row["step"]: {k: v for k, v in row.items() if k not in ("elapsed", "tokens_per_second")} for row in rows}


def test_every_metrics_row_after_a_resume_inside_a_log_window_equals_the_uninterrupted_run(corpus, tmp_path,
                                                                                          monkeypatch):
    """Checkpoints inside a --log-every window: --save-every 6 then kill -9, and a SIGINT at step 7."""
    from bertctl import training
    from bertctl.pretrain import pretrain

    flags = {"log_every": 4, "save_every": 6}
    pretrain(small_run(corpus, tmp_path / "full", **flags))
    shutil.copytree(tmp_path / "full", tmp_path / "killed")
    shutil.rmtree(tmp_path / "killed" / "final")  # killed after step 11: step-000006 is the newest checkpoint
    pretrain(small_run(corpus, tmp_path / "killed", resume=True, **flags))

    step = training.optimizer_step
    with monkeypatch.context() as patch:
        calls = []

        def stepping(*args, **kwargs):  # Ctrl-C during step 7: it is finished, saved, and the run stops
            calls.append(None)
            if len(calls) == 7:
                os.kill(os.getpid(), signal.SIGINT)
            return step(*args, **kwargs)

        patch.setattr(training, "optimizer_step", stepping)
        stopped = pretrain(small_run(corpus, tmp_path / "stopped", log_every=4, save_every=0))
    assert stopped.name == "step-000007"
    pretrain(small_run(corpus, tmp_path / "stopped", resume=True, log_every=4, save_every=0))

    full = _rows(tmp_path / "full")
    assert sorted(full) == [4, 8, 12]
    for name in ("killed", "stopped"):
        resumed = _rows(tmp_path / name)
        assert sorted(resumed) == [4, 8, 12]
        for at, row in full.items():
            assert resumed[at].keys() == row.keys()
            assert max(abs(resumed[at][k] - row[k]) for k in row) < 1e-5, (name, at, resumed[at], row)


def test_a_finished_run_resumed_with_more_steps_logs_the_rows_of_one_longer_run(corpus, tmp_path):
    """Its closing row at step 6 is off the --log-every 4 grid: the longer run drops it and logs step 8's row
    over steps 5-8, as a run that never stopped does (constant lr: the schedule does not depend on --steps); one
    that closed at step 8, on the grid, keeps that row."""
    from bertctl.pretrain import pretrain

    flags = {"log_every": 4, "schedule": "constant", "warmup_steps": 0}
    pretrain(small_run(corpus, tmp_path / "full", **flags))
    pretrain(small_run(corpus, tmp_path / "extended", steps=6, **flags))
    assert sorted(_rows(tmp_path / "extended")) == [4, 6]
    pretrain(small_run(corpus, tmp_path / "extended", steps=6, resume=True, **flags))  # nothing to do: kept
    assert sorted(_rows(tmp_path / "extended")) == [4, 6]
    pretrain(small_run(corpus, tmp_path / "extended", resume=True, **flags))
    pretrain(small_run(corpus, tmp_path / "on_grid", steps=8, **flags))  # its closing row is a grid row: kept
    pretrain(small_run(corpus, tmp_path / "on_grid", resume=True, **flags))
    full = _rows(tmp_path / "full")
    assert sorted(full) == [4, 8, 12]
    for extended in (_rows(tmp_path / "extended"), _rows(tmp_path / "on_grid")):
        assert sorted(extended) == [4, 8, 12]
        for at, row in full.items():
            assert max(abs(extended[at][k] - row[k]) for k in row) < 1e-5, (at, extended[at], row)


def test_a_step_folder_without_its_trainer_state_is_no_checkpoint_and_is_saved_again(corpus, tmp_path, caplog):
    """The resumed run trained up to that step, then failed: "--out RUN/step-000004 already exists; pass
    --overwrite" (pretrain has no --overwrite)."""
    from bertctl.pretrain import pretrain

    run = tmp_path / "run"
    pretrain(small_run(corpus, run, steps=6, save_every=2))
    (run / "step-000004" / "trainer_state.json").unlink()
    shutil.rmtree(run / "final")
    pretrain(small_run(corpus, run, steps=7, save_every=2, resume=True))
    assert all((run / name / "trainer_state.json").is_file() for name in ("step-000002", "step-000004", "final"))
    assert f"{run / 'step-000004'} has no trainer_state.json, so it is no checkpoint" in caplog.text
    assert sorted(losses(run)) == list(range(1, 8))


@pytest.mark.parametrize("damaged", ["step-000004", "final"])
def test_a_trainer_state_that_is_a_folder_is_refused_as_a_damaged_one(corpus, tmp_path, damaged):
    """It was skipped without a word: the resume went on from an older checkpoint (or from step 0), and then
    removed the newer one as an interrupted save."""
    run = tmp_path / "run"
    (run / "step-000002").mkdir(parents=True)
    (run / "step-000002" / "trainer_state.json").write_text('{"step": 2}')
    (run / damaged / "trainer_state.json").mkdir(parents=True)
    result = CliRunner().invoke(app, ["pretrain", "--corpus", str(corpus), "--out", str(run), "--resume",
                                      "--model-config", "tiny", "--device", "cpu"])
    assert result.exit_code == 2, result.output
    assert result.stderr == (f"bertctl: error: {run / damaged / 'trainer_state.json'} is damaged (not a file); "
                             "restore or delete it\n")
    assert sorted(p.name for p in run.iterdir()) == sorted({"step-000002", damaged})


def test_a_run_json_that_is_a_folder_is_refused_as_a_damaged_one(corpus, tmp_path):
    """It was read as missing: the resume skipped its fixed-settings check and failed later, writing run.json."""
    from bertctl.pretrain import pretrain

    run = tmp_path / "run"
    pretrain(small_run(corpus, run, steps=2, save_every=2))
    (run / "run.json").unlink()
    (run / "run.json").mkdir()
    result = CliRunner().invoke(app, ["pretrain", "--corpus", str(corpus), "--out", str(run), "--resume",
                                      "--steps", "3", "--model-config", "tiny", "--device", "cpu"])
    assert result.exit_code == 2, result.output
    assert result.stderr == f"bertctl: error: {run / 'run.json'} is damaged (not a file); restore or delete it\n"


def test_second_run_without_resume_is_refused(corpus, tmp_path):
    from bertctl.pretrain import pretrain

    pretrain(small_run(corpus, tmp_path / "run", steps=4, save_every=2))
    result = CliRunner().invoke(app, ["pretrain", "--corpus", str(corpus), "--out", str(tmp_path / "run"),
                                      "--model-config", "tiny", "--steps", "4"])
    assert result.exit_code == 2 and "--resume" in result.stderr


def test_a_run_folder_another_bertctl_writes_is_refused_untouched_and_free_once_it_ends(corpus, tmp_path):
    """A job submitted twice: the second would prune the first one's checkpoints and rewrite its metrics.jsonl."""
    from bertctl.output_locks import output_lock

    run = tmp_path / "run"
    args = _cli(corpus, run, "--steps", "2", "--batch-size", "8", "--resume")
    with output_lock(run):  # another open file: flock refuses it as it would another process
        refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 1 and refused.stderr.splitlines() == [
        f"bertctl: error: {run} is in use by another bertctl (pid {os.getpid()} on {socket.gethostname()}); wait "
        "for it to finish or choose another --out"]
    assert not run.exists()
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"] and (run / "final").is_dir()


def test_notices_go_to_stderr_and_the_result_to_stdout(corpus, tmp_path):
    """`--resume: no complete checkpoint ...` (a warning) was printed on stdout, beside the command's result. A
    name from a fixed set is taken in any case (`--precision FP32`, `--model-config Tiny`), and run.json records
    it in lower case."""
    run = tmp_path / "run"
    result = CliRunner().invoke(app, ["pretrain", "--corpus", str(corpus), "--out", str(run), "--model-config", "Tiny",
                                      "--steps", "1", "--resume", "--device", "CPU", "--precision", "FP32",
                                      "--schedule", "Constant", "--optimizer", "AdamW"])
    assert result.exit_code == 0, result.output
    assert f"bertctl: --resume: no complete checkpoint in {run} yet; starting from step 0\n" in result.stderr
    assert result.stdout == (f"saved {run / 'final'} (step 1)\n"
                             f"try: bertctl fill --model {run / 'final'} \"the [MASK] was very happy.\"\n")
    recorded = json.loads((run / "run.json").read_text())["config"]
    assert [recorded[k] for k in ("model_config", "device", "precision", "schedule", "optimizer")] == [
        "tiny", "cpu", "fp32", "constant", "adamw"]


def test_the_library_function_leaves_the_commands_hint_to_the_command(corpus, tmp_path, capsys):
    """`pretrain()` from Python printed `try: bertctl fill ...`, a hint for the command's user; like the fine-tuning
    functions it says its result line on stdout and its status lines on stderr, each `bertctl: ...`."""
    from bertctl.pretrain import pretrain

    run = tmp_path / "run"
    assert pretrain(small_run(corpus, run, steps=1, resume=True)) == run / "final"
    said = capsys.readouterr()
    assert said.out == f"saved {run / 'final'} (step 1)\n"  # the progress bar, and nothing else, beside it on stderr
    assert f"bertctl: --resume: no complete checkpoint in {run} yet; starting from step 0\n" in said.err
    assert "try:" not in said.err


@pytest.mark.parametrize(("change", "said"), [
    ({"weight_decay": 0.5}, "--weight-decay 0.01 (now 0.5)"), ({"optimizer": "lamb"}, "--optimizer adamw (now lamb)"),
    ({"seed": 8}, "--seed 7 (now 8)"), ({"model_config": "mini"}, "--model-config mini is not the shape of the model"),
    ({"steps": 3}, "--steps 3 is below step 4 of the checkpoint"),
])
def test_a_resume_refuses_settings_its_checkpoint_cannot_honour_before_writing(corpus, tmp_path, change, said):
    """They used to be ignored while run.json recorded them (weight decay), or to fail deep in the run (LAMB's
    state, a shorter --steps); how long and how fast it trains may change."""
    from bertctl.pretrain import pretrain

    pretrain(small_run(corpus, tmp_path / "run", steps=8, save_every=4))
    shutil.rmtree(tmp_path / "run" / "final")
    before = (tmp_path / "run" / "run.json").read_bytes()
    with pytest.raises(UsageError, match=re.escape(said)):
        pretrain(small_run(corpus, tmp_path / "run", **{"steps": 8, "save_every": 4, "resume": True, **change}))
    assert (tmp_path / "run" / "run.json").read_bytes() == before
    copied = Path(os.path.relpath(shutil.copytree(corpus, tmp_path / "copy")))  # the same corpus, elsewhere
    pretrain(small_run(copied, tmp_path / "run", steps=8, save_every=4, resume=True, lr=1e-3, batch_size=4,
                       tokenizer=corpus / "tokenizer"))


def test_a_resume_on_another_corpus_is_refused(corpus, tmp_path, caplog):
    from bertctl.pretrain import pretrain

    pretrain(small_run(corpus, tmp_path / "run", steps=8, save_every=4))
    shutil.rmtree(tmp_path / "run" / "final")
    other = Path(shutil.copytree(corpus, tmp_path / "other"))
    manifest = json.loads((other / "manifest.json").read_text())
    (other / "manifest.json").write_text(json.dumps({**manifest, "seed": manifest["seed"] + 1}))
    with pytest.raises(UsageError, match="is not the corpus the run in .* was started on"):
        pretrain(small_run(other, tmp_path / "run", steps=8, save_every=4, resume=True, lr=1e-3))
    assert "a resume takes the settings given now" not in caplog.text  # the refusal is the one line said
    with pytest.raises(UsageError, match="was started on --corpus .*; give it again"):
        pretrain(small_run(None, tmp_path / "run", steps=8, save_every=4, resume=True))
    assert not (tmp_path / "run" / "data").exists()  # the quick start built nothing first


def test_a_failed_quick_start_keeps_only_complete_data_and_no_empty_run_folder(tmp_path, monkeypatch):
    """A full disk as the quick start saved its tokenizer left RUN/ with an empty RUN/data/ (the tokenizer's save
    made them); they go again now. A failure while building the corpus keeps the complete tokenizer, which the
    rerun reuses rather than training it again."""
    from bertctl import corpus, quickstart, tokenizer_train, training
    from bertctl.files import WriteFailed

    def raising(exc: BaseException) -> Callable[..., None]:
        def call(*args: object) -> None:
            raise exc
        return call

    _write_text(tmp_path / "novels.txt", documents=4, seed=0)
    monkeypatch.setattr(quickstart, "bundled_text", lambda: tmp_path / "novels.txt")
    monkeypatch.setattr(quickstart, "VOCAB_SIZE", 100)
    cfg, env = PretrainConfig(out=tmp_path / "run"), training.Distributed()
    with monkeypatch.context() as patched, pytest.raises(WriteFailed, match="No space left on device"):
        patched.setattr(BertTokenizer, "save", raising(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))))
        quickstart.prepare_quickstart(cfg, env)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["novels.txt"]
    with monkeypatch.context() as patched, pytest.raises(KeyboardInterrupt):  # Ctrl-C as it saves: the same
        patched.setattr(BertTokenizer, "save", raising(KeyboardInterrupt()))
        quickstart.prepare_quickstart(cfg, env)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["novels.txt"]
    with monkeypatch.context() as patched, pytest.raises(KeyboardInterrupt):
        patched.setattr(corpus, "build_corpus", raising(KeyboardInterrupt()))
        quickstart.prepare_quickstart(cfg, env)
    assert sorted(p.name for p in (tmp_path / "run" / "data").iterdir()) == ["tokenizer"]
    monkeypatch.setattr(tokenizer_train, "train_tokenizer", never_called("train_tokenizer"))
    monkeypatch.setattr(corpus, "build_corpus", lambda config: config.out.mkdir())
    assert quickstart.prepare_quickstart(cfg, env).corpus == tmp_path / "run" / "data" / "corpus"


def test_a_resume_on_the_same_corpus_rebuilt_elsewhere_goes_on(corpus, tmp_path):
    """The manifest records where the corpus was built from; only what it holds must match (a copied run folder)."""
    from bertctl.corpus import build_corpus
    from bertctl.pretrain import pretrain

    pretrain(small_run(corpus, tmp_path / "run", steps=8, save_every=4))
    shutil.rmtree(tmp_path / "run" / "final")
    source = corpus.parent
    moved = Path(shutil.copytree(source, tmp_path / "moved", ignore=shutil.ignore_patterns("corpus")))
    build_corpus(CorpusConfig(inputs=(str(moved / "docs.txt"),), tokenizer=moved / "tok", out=moved / "corpus",
                              max_seq_length=32, validation_fraction=0.1, workers=2, seed=1))
    assert pretrain(small_run(moved / "corpus", tmp_path / "run", steps=8, save_every=4, resume=True)).is_dir()
    recorded = json.loads((tmp_path / "run" / "run.json").read_text())["corpus_manifest"]
    assert recorded["config"]["tokenizer"] == str(moved / "tok")
    (moved / "docs.txt").write_text((moved / "docs.txt").read_text() + "one more line .\n")
    build_corpus(CorpusConfig(inputs=(str(moved / "docs.txt"),), tokenizer=moved / "tok", out=moved / "corpus",
                              max_seq_length=32, validation_fraction=0.1, seed=1, overwrite=True))
    shutil.rmtree(tmp_path / "run" / "final")
    with pytest.raises(UsageError, match="is not the corpus the run in .* was started on"):
        pretrain(small_run(moved / "corpus", tmp_path / "run", steps=8, save_every=4, resume=True))


def test_tokens_per_second_leaves_validation_and_saves_out(corpus, tmp_path, monkeypatch):
    """The window after a validation pass or a save was charged its time: a 44x "slowdown" in one row."""
    import time

    from bertctl import pretrain as module
    from bertctl import run_metrics

    evaluate, rate, windows = module.evaluate_pretraining, run_metrics.Throughput.rate, []

    def slow_evaluation(*args, **kwargs):
        time.sleep(1.5)
        return evaluate(*args, **kwargs)

    def timed_rate(self, env=None):
        tokens = self.tokens
        per_second = rate(self, env)
        windows.append(tokens / per_second)  # the seconds this row's window was charged
        return per_second

    monkeypatch.setattr(module, "evaluate_pretraining", slow_evaluation)
    monkeypatch.setattr(run_metrics.Throughput, "rate", timed_rate)
    module.pretrain(small_run(corpus, tmp_path / "run", steps=6, save_every=0, eval_every=3, eval_samples=8))
    assert len(windows) == 6 and windows[3] < 1.0  # step 4's window began with the 1.5 s validation


def test_tokens_per_second_counts_the_tokens_of_the_batches_without_their_padding(corpus, tmp_path, monkeypatch):
    from bertctl import run_metrics
    from bertctl.corpus import load_corpus
    from bertctl.data.batches import BatchPlan, Collator, StepBatches
    from bertctl.data.masking import masking_options
    from bertctl.pretrain import pretrain
    from bertctl.tokenizer_folder import load_tokenizer

    counted, add = [], run_metrics.Throughput.add
    monkeypatch.setattr(run_metrics.Throughput, "add", lambda self, tokens: counted.append(tokens) or add(self, tokens))
    pretrain(small_run(corpus, tmp_path / "run", steps=3, save_every=0))
    tables, manifest = load_corpus(corpus)
    masking = masking_options(load_tokenizer(corpus / "tokenizer"), manifest["masked_lm_prob"],
                              manifest["max_predictions_per_seq"], manifest["whole_word_masking"])
    batches = StepBatches(tables["train"], BatchPlan(len(tables["train"]), 8, 8, 0, 1, 7), Collator(0, masking, 7),
                          0, 3)
    padded = [batches[step]["attention_mask"] for step in range(3)]
    assert counted == [int(mask.sum()) for mask in padded] and not all(bool(mask.all()) for mask in padded)


def test_validation_runs_under_the_runs_precision(corpus, tmp_path, monkeypatch):
    """A bf16 run was validated in fp32: slower and larger on a GPU, and not the arithmetic it trains with."""
    from bertctl import pretrain as module

    evaluate, scores = module.evaluate_pretraining, []

    def both_precisions(*args):
        scores.append((evaluate(*args), evaluate(*args[:6], "fp32")))
        return scores[-1][0]

    monkeypatch.setattr(module, "evaluate_pretraining", both_precisions)
    module.pretrain(small_run(corpus, tmp_path / "run", steps=2, save_every=0, eval_every=2, eval_samples=8,
                              precision="bf16"))
    (run_precision, fp32), = scores
    assert run_precision["val_mlm_loss"] != pytest.approx(fp32["val_mlm_loss"], rel=1e-6)
    assert run_precision["val_mlm_loss"] == pytest.approx(fp32["val_mlm_loss"], rel=0.05)


def test_a_resume_that_changes_the_schedule_says_so(corpus, tmp_path, caplog):
    """A flag left off a resume is back at its default: the schedule may change, but not unannounced."""
    from bertctl.pretrain import pretrain

    pretrain(small_run(corpus, tmp_path / "run", steps=4, save_every=2, warmup_fraction=0.5))
    shutil.rmtree(tmp_path / "run" / "final")
    caplog.clear()
    pretrain(small_run(corpus, tmp_path / "run", steps=4, save_every=2, resume=True, lr=1e-3))
    assert "trained with --lr 0.002 (now 0.001), --warmup-steps not given (now 2), --warmup-fraction 0.5 (now not " \
        "given); a resume takes the settings given now" in caplog.text


def _failing_first_batch(monkeypatch) -> None:
    """The next pretrain fails reading its first batch, after run.json (a worker that dies, a damaged row)."""
    from bertctl.data import batches

    def fail(self, index):
        raise RuntimeError("no batch")

    monkeypatch.setattr(batches.StepBatches, "__getitem__", fail)


def test_a_run_that_failed_before_its_first_step_starts_again_either_way(corpus, tmp_path, monkeypatch, capsys):
    """It leaves run.json and an empty metrics.jsonl: the same command again, or with --resume, is a new run."""
    from bertctl.pretrain import pretrain

    run = tmp_path / "run"
    with monkeypatch.context() as patch:
        _failing_first_batch(patch)
        with pytest.raises(RuntimeError, match="no batch"):
            pretrain(small_run(corpus, run, steps=2))
    assert sorted(p.name for p in run.iterdir()) == ["metrics.jsonl", "run.json"]
    assert (run / "metrics.jsonl").read_text() == ""
    saved = {path.name: path.read_bytes() for path in run.iterdir()}
    pretrain(small_run(corpus, run, steps=2))
    assert sorted(losses(run)) == [1, 2]
    shutil.rmtree(run)
    run.mkdir()
    for name, data in saved.items():
        (run / name).write_bytes(data)
    pretrain(small_run(corpus, run, steps=2, resume=True))
    assert sorted(losses(run)) == [1, 2] and f"no complete checkpoint in {run} yet" in capsys.readouterr().err


def _full_disk(*args, **kwargs) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_checkpoint_that_cannot_be_written_names_the_run_folder_given(corpus, tmp_path, monkeypatch):
    """A full disk while saving a checkpoint said `cannot write RUN/step-000001`; the output given comes first."""
    from bertctl import training_state
    from bertctl.pretrain import pretrain

    run = tmp_path / "run"
    monkeypatch.setattr(training_state, "write_training_state", _full_disk)
    with pytest.raises(BertctlError) as error:
        pretrain(small_run(corpus, run, steps=2, save_every=1))
    assert str(error.value) == (f"cannot write {run}: No space left on device; free some disk space or choose another "
                                f"path (writing {run / 'step-000001'})")


@pytest.mark.parametrize("existed", [False, True])
def test_a_run_that_cannot_write_its_run_json_leaves_nothing_new(corpus, tmp_path, monkeypatch, existed):
    """The disk already full at the start: run.json failed and the run folder (and the folders above it) stayed
    behind, empty. A folder that was there stays as it was."""
    from bertctl import pretrain as recipe
    from bertctl.files import WriteFailed

    run = tmp_path / "runs" / "run"
    if existed:
        run.mkdir(parents=True)

    def full_disk(path, data) -> None:
        raise WriteFailed(path, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))

    monkeypatch.setattr(recipe, "write_json_atomic", full_disk)
    said = rf"^cannot write {run}: No space left on device; .* \(writing {run}/run.json\)$"
    with pytest.raises(BertctlError, match=said):
        recipe.pretrain(small_run(corpus, run, steps=2))
    left = [p.relative_to(tmp_path) for p in tmp_path.rglob("*")]
    assert left == ([Path("runs"), Path("runs/run")] if existed else [])


def test_a_resume_that_failed_before_its_first_step_is_not_the_runs_record(corpus, tmp_path, monkeypatch, caplog):
    """A resume rewrites run.json with its own settings before its first step: failed there, the next resume
    warned that the run had trained with them (`trained with --lr 0.0005`, never a step of it) and recorded the
    failed resume's --dropout as the run's."""
    from bertctl.pretrain import pretrain

    run = tmp_path / "run"
    pretrain(small_run(corpus, run, steps=4))
    with monkeypatch.context() as patch:
        _failing_first_batch(patch)
        with pytest.raises(RuntimeError, match="no batch"):
            pretrain(small_run(corpus, run, steps=6, resume=True, lr=5e-4, dropout=0.3))
    caplog.clear()
    pretrain(small_run(corpus, run, steps=6, resume=True, lr=1e-3))
    assert "trained with --lr 0.002 (now 0.001); a resume takes" in caplog.text, caplog.text
    record = json.loads((run / "run.json").read_text())
    assert (record["config"]["lr"], record["config"]["dropout"]) == (1e-3, None)
    assert [(part["from_step"], part["to_step"], part["config"]["lr"]) for part in record["earlier"]] == [
        (0, 4, 2e-3)]


def test_a_resume_that_only_saved_final_again_with_another_dropout_is_the_runs_record(corpus, tmp_path, caplog):
    """A resume with --steps at its checkpoint's step trains no step but saves final/ again, with its --dropout:
    the next resume trains with that dropout, so run.json records it, and its parts replayed make the model. Its
    other settings trained nothing: the next resume's warnings compare with the part before."""
    from bertctl.pretrain import pretrain

    run = tmp_path / "run"
    pretrain(small_run(corpus, run, steps=4))
    pretrain(small_run(corpus, run, steps=4, resume=True, lr=5e-4))
    caplog.clear()
    pretrain(small_run(corpus, run, steps=4, resume=True, dropout=0.3))
    assert "trained with" not in caplog.text, caplog.text
    final = pretrain(small_run(corpus, run, steps=6, resume=True))
    record = json.loads((run / "run.json").read_text())
    assert record["config"]["dropout"] == 0.3
    assert _replayed(record, tmp_path) == (final / "model.safetensors").read_bytes()


def test_a_resume_that_failed_after_one_that_only_saved_final_again_records_final_s_dropout(corpus, tmp_path,
                                                                                           monkeypatch, caplog):
    """final/ saved again by a zero-step resume with --dropout 0.3 (and an --lr that trained nothing, yet the next
    resume warned the run `trained with` it), then a resume that failed before it saved: the next resume trains at
    0.3, but run.json recorded the first part's dropout (null), so its parts replayed made another model."""
    from bertctl.pretrain import pretrain

    run = tmp_path / "run"
    pretrain(small_run(corpus, run, steps=4))
    pretrain(small_run(corpus, run, steps=4, resume=True, dropout=0.3, lr=5e-4))
    caplog.clear()
    with monkeypatch.context() as patch:
        _failing_first_batch(patch)
        with pytest.raises(RuntimeError, match="no batch"):
            pretrain(small_run(corpus, run, steps=6, resume=True))
    final = pretrain(small_run(corpus, run, steps=6, resume=True))
    assert "trained with" not in caplog.text, caplog.text
    record = json.loads((run / "run.json").read_text())
    assert record["config"]["dropout"] == 0.3
    assert _replayed(record, tmp_path) == (final / "model.safetensors").read_bytes()


def _part(lr: float, first: int, last: int, dropout: float | None = None) -> dict:
    return {"config": {"lr": lr, "steps": last, "dropout": dropout}, "from_step": first, "to_step": last}


def test_the_record_at_a_checkpoint_goes_back_past_every_part_that_began_after_it():
    """Resumed from step-000002 after parts that began at steps 4 and 6, the record is the first part's."""
    from bertctl.pretrain_resume import record_at

    record = {**_part(3e-4, 6, 8), "earlier": [_part(1e-3, 0, 4), _part(5e-4, 4, 6)]}
    at_six = record_at(record, 6)
    assert (at_six["config"]["lr"], at_six["from_step"], at_six["earlier"]) == (5e-4, 4, [_part(1e-3, 0, 4)])
    at_two = record_at(record, 2)
    assert (at_two["config"]["lr"], at_two["from_step"], at_two["earlier"]) == (1e-3, 0, [])


def _replayed(record: dict, tmp_path: Path) -> bytes:
    """The weights that each part of run.json's record, given back in turn as --config, make in a new run. A part
    stopped before its --steps (a signal) runs as docs/pretraining.md says: --save-every its to_step and --keep 0,
    the later checkpoints removed before the next part's --resume."""
    from bertctl import training_state

    again = tmp_path / "again"
    for number, part in enumerate([*record["earlier"], record]):
        config, stopped = dict(part["config"]), part.get("to_step", part["config"]["steps"])
        if stopped < config["steps"]:
            config["save_every"], config["keep"] = stopped, 0
        (tmp_path / f"part{number}.json").write_text(json.dumps(config))
        result = CliRunner().invoke(app, ["pretrain", "--config", str(tmp_path / f"part{number}.json"),
                                          "--out", str(again)])
        assert result.exit_code == 0, result.output
        for later in [*training_state.complete_checkpoints(again), again / "final"]:
            if later.is_dir() and training_state.checkpoint_step(later) > stopped:
                shutil.rmtree(later)
    return (again / "final" / "model.safetensors").read_bytes()


def test_a_resume_that_does_not_name_the_model_records_the_runs_own(corpus, tmp_path, caplog):
    """Else run.json, given back as --config, would start a BERT-base."""
    from bertctl.pretrain import pretrain

    pretrain(small_run(corpus, tmp_path / "run", steps=4, save_every=2))
    shutil.rmtree(tmp_path / "run" / "final")
    pretrain(small_run(corpus, tmp_path / "run", steps=4, save_every=2, resume=True, model_config=None))
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert (record["config"]["model_config"], record["device"]) == ("tiny", "cpu")  # the device it ran on, too
    phase2 = small_run(corpus, tmp_path / "p2", steps=4, save_every=2, init_from=tmp_path / "run" / "final")
    pretrain(phase2)
    shutil.rmtree(tmp_path / "p2" / "final")
    pretrain(small_run(corpus, tmp_path / "p2", steps=4, save_every=2, resume=True, model_config=None,
                       init_from=tmp_path / "run" / "final"))  # its own: no warning
    assert "--init-from is not read" not in caplog.text
    recorded = json.loads((tmp_path / "p2" / "run.json").read_text())["config"]
    assert (recorded["init_from"], recorded["model_config"]) == (str(tmp_path / "run" / "final"), None)


def test_a_runs_recorded_config_given_back_as_config_reproduces_it(corpus, tmp_path):
    """run.json's "config" holds warmup_steps and warmup_fraction (one null): it was refused as giving both."""
    from bertctl.pretrain import pretrain

    first = pretrain(small_run(corpus, tmp_path / "first", steps=3))
    config = json.loads((tmp_path / "first" / "run.json").read_text())["config"]
    assert config["warmup_fraction"] is None and config["init_from"] is None
    (tmp_path / "again.json").write_text(json.dumps(config))
    result = CliRunner().invoke(app, ["pretrain", "--config", str(tmp_path / "again.json"),
                                      "--out", str(tmp_path / "again")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "again" / "final" / "model.safetensors").read_bytes() == \
        (first / "model.safetensors").read_bytes()


def test_a_resume_with_other_settings_keeps_the_earlier_ones_and_the_parts_replayed_give_the_model(corpus, tmp_path):
    """run.json's config is the last part's: the steps trained before a resume that changed --steps and --lr
    are in `earlier`, and each part's config given back as --config, in turn, makes the same model."""
    from bertctl.pretrain import pretrain

    pretrain(small_run(corpus, tmp_path / "run", steps=6, lr=1e-3))
    final = pretrain(small_run(corpus, tmp_path / "run", steps=10, resume=True))
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["from_step"] == 6
    assert [(part["from_step"], part["to_step"]) for part in record["earlier"]] == [(0, 6)]
    assert (record["earlier"][0]["config"]["steps"], record["earlier"][0]["config"]["lr"]) == (6, 1e-3)
    assert _replayed(record, tmp_path) == (final / "model.safetensors").read_bytes()
    shutil.rmtree(tmp_path / "run" / "final")  # back to step 8: the second part's steps 7-8 are kept
    pretrain(small_run(corpus, tmp_path / "run", steps=10, resume=True))
    parts = json.loads((tmp_path / "run" / "run.json").read_text())["earlier"]
    assert [(part["from_step"], part["to_step"], part["config"]["lr"]) for part in parts] == [(0, 6, 1e-3),
                                                                                              (6, 8, 2e-3)]
    pretrain(small_run(corpus, tmp_path / "run", steps=10, resume=True))  # from final: a part like the one before
    parts = json.loads((tmp_path / "run" / "run.json").read_text())["earlier"]
    assert [(part["from_step"], part["to_step"]) for part in parts] == [(0, 6), (6, 10)]


def test_a_part_stopped_by_a_signal_replays_as_the_docs_say_whatever_its_keep(corpus, tmp_path, monkeypatch):
    """A part stopped at step 3 replayed with --save-every 3 saves steps 3, 6 and 9 on its way to --steps 12: its
    own --keep 2 pruned step 3 before the next part's --resume could go on from it."""
    from bertctl import training
    from bertctl.pretrain import pretrain

    step, calls = training.optimizer_step, []

    def stepping(*args, **kwargs):  # SIGTERM during step 3: the run saves step-000003 and stops
        calls.append(None)
        if len(calls) == 3:
            signal.raise_signal(signal.SIGTERM)
        return step(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(training, "optimizer_step", stepping)
        pretrain(small_run(corpus, tmp_path / "run", save_every=0, keep=2))
    final = pretrain(small_run(corpus, tmp_path / "run", save_every=0, keep=2, resume=True, lr=1e-3))
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert [(part["from_step"], part["to_step"]) for part in record["earlier"]] == [(0, 3)]
    assert _replayed(record, tmp_path) == (final / "model.safetensors").read_bytes()


def test_final_checkpoint_serves_fill_and_transformers(corpus, tmp_path):
    transformers = pytest.importorskip("transformers")
    from bertctl.fill import fill
    from bertctl.pretrain import pretrain

    final = pretrain(small_run(corpus, tmp_path / "run", steps=3, save_every=0))
    [result] = fill(["the big cat [MASK] on the mat ."], final, top_k=3)
    assert len(result.predictions[0]) == 3
    _, info = transformers.BertForPreTraining.from_pretrained(final, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]


@pytest.mark.parametrize(("flags", "message"), [
    (["--model-config", "huge"], "neither a preset"),
    (["--corpus", "/no/such/corpus"], "does not exist"),
    (["--tokenizer", "OTHER"], "not the one corpus"),
    (["--precision", "fp8"], "--precision"),
    (["--tokenizer", "/no/such/tok"], "/no/such/tok does not exist"),
    (["--warmup-fraction", "0.1", "--warmup-steps", "3"], "exclude each other"),
])
def test_refusals_are_one_line(corpus, tmp_path, flags, message):
    other = tmp_path / "other"
    BertTokenizer.from_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "x"]).save(other)
    flags = [str(other) if f == "OTHER" else f for f in flags]
    args = ["pretrain", "--corpus", str(corpus), "--out", str(tmp_path / "run"), "--model-config", "tiny",
            "--steps", "2", *flags]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run" / "final").exists()


@pytest.mark.parametrize(("flags", "said"), [
    (["--model-config", "huge"], "neither a preset"),
    (["--precision", "fp16", "--device", "cpu"], "needs a CUDA device"),
    (["--batch-size", "16", "--micro-batch-size", "5"], "--micro-batch-size"),
])
def test_the_quick_start_refuses_bad_settings_before_building_its_data(tmp_path, flags, said):
    result = CliRunner().invoke(app, ["pretrain", "--out", str(tmp_path / "run"), *flags])
    assert result.exit_code == 2 and said in result.stderr, result.output
    assert not (tmp_path / "run" / "data").exists()


def _model_folder(folder: Path, tokenizer: Path, spare_rows: int = 0, architecture: str = "BertForPreTraining",
                  **tokenizer_config) -> Path:
    """A tiny untrained BERT for `tokenizer` (plus spare embedding rows), its tokenizer_config.json edited."""
    import torch

    from bertctl.checkpoint import save_model
    from bertctl.config import preset
    from bertctl.model import ARCHITECTURES
    from bertctl.tokenizer_folder import load_tokenizer

    torch.manual_seed(0)
    rows = load_tokenizer(tokenizer).vocab_size + spare_rows
    save_model(ARCHITECTURES[architecture](preset("tiny", vocab_size=rows)), folder, tokenizer)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, **tokenizer_config}))
    return folder


@pytest.mark.parametrize(("source", "setting", "said"), [
    ("--init-from", {"do_lower_case": False}, "do_lower_case False vs True"),
    ("--init-from", {"strip_accents": False}, "strip_accents False vs True"),
    ("--tokenizer", {"do_lower_case": False}, "do_lower_case False vs True"),
    ("--tokenizer", {"tokenize_chinese_chars": False}, "tokenize_chinese_chars False vs True"),
    ("--tokenizer", {"never_split": ["c++", "cat"]}, "never_split ['c++'] vs []"),  # `cat` is whole anyway
])
def test_a_tokenizer_that_encodes_otherwise_than_the_corpus_is_refused(corpus, tmp_path, source, setting, said):
    """Same vocabulary (same sha256), other normalisation: the corpus's ids are not the ones it would give."""
    own = corpus / "tokenizer"
    other = _model_folder(tmp_path / "other", own, **setting)
    args = ["pretrain", "--corpus", str(corpus), "--out", str(tmp_path / "run"), "--steps", "2",
            "--num-workers", "0", "--device", "cpu", source, str(other)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1 and said in line, line
    assert f"{source} {other}" in line and str(own) in line  # both sources named
    assert not (tmp_path / "run").exists()


def test_an_init_from_tokenizer_config_without_tokenizer_json_is_compared_on_its_settings(corpus, tmp_path):
    """tokenizer_config.json alone (beside Google's vocab.txt) says the casing: a cased one is refused."""
    other = _model_folder(tmp_path / "other", corpus / "tokenizer", do_lower_case=False)
    (other / "tokenizer.json").unlink()
    args = ["pretrain", "--corpus", str(corpus), "--out", str(tmp_path / "run"), "--steps", "2",
            "--num-workers", "0", "--device", "cpu", "--init-from", str(other)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "do_lower_case False vs True" in result.stderr, result.output


def test_init_from_trains_with_the_corpus_tokenizer_on_a_model_with_spare_rows(corpus, tmp_path, monkeypatch):
    """--init-from's tokenizer may differ from the corpus's in decoding only; the corpus's is used and saved.
    A model with more embedding rows than tokens (a padded vocabulary) trains, and masking's random
    replacements stay within the tokenizer's ids."""
    import importlib

    from bertctl.tokenizer_folder import load_tokenizer

    recipe = importlib.import_module("bertctl.pretrain")

    tokens = load_tokenizer(corpus / "tokenizer").vocab_size
    padded = _model_folder(tmp_path / "padded", corpus / "tokenizer", spare_rows=8,
                           clean_up_tokenization_spaces=False)
    drawn = []
    masking_options = recipe.masking_options
    monkeypatch.setattr(recipe, "masking_options", lambda tok, *rest: drawn.append(tok.vocab_size) or
                        masking_options(tok, *rest))
    final = recipe.pretrain(small_run(corpus, tmp_path / "run", init_from=padded, steps=2, save_every=0))
    assert json.loads((final / "config.json").read_text())["vocab_size"] == tokens + 8
    assert json.loads((final / "tokenizer_config.json").read_text())["clean_up_tokenization_spaces"] is True
    assert drawn == [tokens]


def test_a_model_config_file_keeps_its_vocab_size(corpus, tmp_path):
    """A config.json that sets vocab_size (a padded vocabulary, as NVIDIA's BERT configs have) gets that many
    embedding rows, as transformers and Google's run_pretraining.py build it; it used to be replaced by the
    tokenizer's size without a word. One without vocab_size takes the tokenizer's; a smaller one is refused."""
    from bertctl.pretrain import pretrain
    from bertctl.tokenizer_folder import load_tokenizer

    tokens = load_tokenizer(corpus / "tokenizer").vocab_size
    shape = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64}
    for name, rows, expected in (("padded", tokens + 8, tokens + 8), ("plain", None, tokens)):
        file = tmp_path / f"{name}.json"
        file.write_text(json.dumps(shape if rows is None else {**shape, "vocab_size": rows}))
        final = pretrain(small_run(corpus, tmp_path / name, model_config=str(file), steps=1, save_every=0))
        assert json.loads((final / "config.json").read_text())["vocab_size"] == expected
    small = tmp_path / "small.json"
    small.write_text(json.dumps({**shape, "vocab_size": tokens - 1}))
    with pytest.raises(UsageError, match=f"sets vocab_size {tokens - 1} but the tokenizer has {tokens} tokens"):
        pretrain(small_run(corpus, tmp_path / "small", model_config=str(small), steps=1))
    assert not (tmp_path / "small").exists()


def test_a_corpus_without_its_own_tokenizer_compares_the_vocabulary_only(corpus, tmp_path):
    bare = tmp_path / "corpus"
    shutil.copytree(corpus, bare, ignore=shutil.ignore_patterns("tokenizer"))
    cased = _model_folder(tmp_path / "cased", corpus / "tokenizer", do_lower_case=False)
    result = CliRunner().invoke(app, _cli(bare, tmp_path / "run", "--steps", "1", "--batch-size", "4",
                                          "--tokenizer", str(cased)))
    assert result.exit_code == 0, result.output


def test_a_tokenizer_whose_settings_differ_only_as_written_is_accepted(corpus, tmp_path):
    """Old configs list the special tokens (or plain words) in never_split: the ids are the same, so no refusal."""
    listed = _model_folder(tmp_path / "listed", corpus / "tokenizer",
                           never_split=["[UNK]", "[SEP]", "[PAD]", "[CLS]", "[MASK]", "cat"])
    result = CliRunner().invoke(app, _cli(corpus, tmp_path / "run", "--steps", "1", "--batch-size", "4",
                                          "--tokenizer", str(listed)))
    assert result.exit_code == 0, result.output


def test_init_from_a_bare_vocab_txt_compares_the_vocabulary_only(corpus, tmp_path):
    """Google's layout (vocab.txt, no tokenizer config) does not say its casing; a cased corpus built from it
    must still start from it, with the corpus's tokenizer saved."""
    cased = tmp_path / "corpus"
    shutil.copytree(corpus, cased)
    config = cased / "tokenizer" / "tokenizer_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "do_lower_case": False}))
    model = _model_folder(tmp_path / "google", corpus / "tokenizer")
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (model / name).unlink()
    from bertctl.pretrain import pretrain

    final = pretrain(small_run(cased, tmp_path / "run", init_from=model, steps=1, save_every=0))
    saved = json.loads((final / "tokenizer_config.json").read_text())
    assert saved["do_lower_case"] is False


def test_init_from_starts_phase_two_from_the_weights_with_a_fresh_optimizer(corpus, tmp_path):
    from safetensors.torch import load_file

    from bertctl.checkpoint import read_checkpoint
    from bertctl.corpus import build_corpus
    from bertctl.pretrain import pretrain

    first = pretrain(small_run(corpus, tmp_path / "p1", steps=4, save_every=0))
    _write_text(tmp_path / "docs.txt", documents=20, seed=3)
    longer = tmp_path / "corpus48"
    build_corpus(CorpusConfig(inputs=(str(tmp_path / "docs.txt"),), tokenizer=first, max_seq_length=48, out=longer,
                              workers=1))
    second = pretrain(small_run(longer, tmp_path / "p2", init_from=first, steps=2, lr=1e-12, warmup_steps=0,
                                save_every=0))
    before, after = load_file(first / "model.safetensors"), load_file(second / "model.safetensors")
    assert before.keys() == after.keys()
    assert max(float((before[k] - after[k]).abs().max()) for k in before) < 1e-8
    assert json.loads((second / "trainer_state.json").read_text())["step"] == 2  # a new count, not 6
    record = json.loads((tmp_path / "p2" / "run.json").read_text())
    assert record["corpus_manifest"]["max_seq_length"] == 48
    assert record["init_weights_sha256"] == read_checkpoint(first).weights_sha256()  # the weights, not the path
    assert json.loads((tmp_path / "p1" / "run.json").read_text())["init_weights_sha256"] is None


def test_init_from_a_model_without_the_nsp_head_gives_the_same_bytes_twice(corpus, tmp_path):
    """The NSP head and pooler it lacks are drawn from --seed, not from whatever the global RNG holds. A caller's
    torch.no_grad() (a notebook cell) does not matter either: the first backward pass was torch's bare RuntimeError."""
    import contextlib

    import torch

    from bertctl.pretrain import pretrain

    masked_lm = _model_folder(tmp_path / "mlm", corpus / "tokenizer", architecture="BertForMaskedLM")
    finals = []
    for name in ("a", "b"):
        torch.manual_seed(ord(name))  # the caller's RNG state must not matter
        with torch.no_grad() if name == "b" else contextlib.nullcontext():
            finals.append(pretrain(small_run(corpus, tmp_path / name, init_from=masked_lm, model_config=None,
                                             steps=2, save_every=0)))
            assert torch.is_grad_enabled() == (name == "a")
    assert (finals[0] / "model.safetensors").read_bytes() == (finals[1] / "model.safetensors").read_bytes()


def test_a_callers_float64_default_and_no_grad_leave_a_fresh_run_as_it_was(corpus, tmp_path):
    """A notebook's torch.set_default_dtype(torch.float64) made the fresh model float64 (drawn and trained so, while
    run.json said fp32); the caller's settings come back when the run ends."""
    import torch

    from bertctl.pretrain import pretrain

    plain = pretrain(small_run(corpus, tmp_path / "a", steps=2, save_every=0))
    torch.set_default_dtype(torch.float64)
    try:
        with torch.no_grad():
            odd = pretrain(small_run(corpus, tmp_path / "b", steps=2, save_every=0))
            assert not torch.is_grad_enabled() and torch.get_default_dtype() == torch.float64
    finally:
        torch.set_default_dtype(torch.float32)
    assert (plain / "model.safetensors").read_bytes() == (odd / "model.safetensors").read_bytes()
    assert losses(tmp_path / "a") == losses(tmp_path / "b")


def test_a_resume_without_dropout_keeps_and_records_the_runs(corpus, tmp_path, caplog):
    """The checkpoint's model keeps its dropout: no warning, and run.json says so, so that given back as
    --config it reproduces the run. A killed save's temp folder is removed."""
    from bertctl.pretrain import pretrain

    whole = pretrain(small_run(corpus, tmp_path / "whole", steps=4, save_every=2, dropout=0.0))
    pretrain(small_run(corpus, tmp_path / "run", steps=4, save_every=2, dropout=0.0))
    shutil.rmtree(tmp_path / "run" / "final")
    run = tmp_path / "run"
    from bertctl.files import MACHINE_TAG

    killed = run / f".step-000004.tmp-{dead_pid()}-{MACHINE_TAG}-x"
    running = run / f".final.old-{os.getpid()}-{MACHINE_TAG}-x"
    killed.mkdir()  # a leftover of a killed save goes; one of a process still running stays
    running.mkdir()
    caplog.clear()
    pretrain(small_run(corpus, tmp_path / "run", steps=4, save_every=2, resume=True, dropout=None))
    assert "--dropout" not in caplog.text
    assert not killed.exists() and running.exists()
    assert losses(tmp_path / "run") == losses(tmp_path / "whole")
    config = json.loads((tmp_path / "run" / "run.json").read_text())["config"]
    assert config["dropout"] == 0.0
    (tmp_path / "again.json").write_text(json.dumps({**config, "resume": False}))
    result = CliRunner().invoke(app, ["pretrain", "--config", str(tmp_path / "again.json"),
                                      "--out", str(tmp_path / "again")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "again" / "final" / "model.safetensors").read_bytes() == \
        (whole / "model.safetensors").read_bytes()


def test_resumes_without_dropout_record_the_dropout_their_checkpoint_was_saved_with(corpus, tmp_path):
    """A checkpoint saved before its trainer state kept --dropout: run.json's says. A resume without --dropout
    saves the run's in its checkpoints, so the resume after it records that dropout too, not null."""
    from bertctl.pretrain import pretrain
    from bertctl.training_state import TRAINER_STATE

    run = tmp_path / "run"
    pretrain(small_run(corpus, run, steps=2, save_every=0, dropout=0.0))
    state = run / "final" / TRAINER_STATE
    state.write_text(json.dumps({k: v for k, v in json.loads(state.read_text()).items() if k != "dropout"}))
    recorded = []
    for steps in (3, 4):
        pretrain(small_run(corpus, run, steps=steps, save_every=0, resume=True, dropout=None))
        recorded.append(json.loads((run / "run.json").read_text())["config"]["dropout"])
    assert recorded == [0.0, 0.0]


def test_a_resume_records_the_runs_own_model_and_names_a_damaged_run_json(corpus, tmp_path, caplog):
    """An --init-from given to a resume (the model is the checkpoint's) was recorded in run.json as the run's,
    and was not read without a word."""
    from bertctl.pretrain import pretrain

    first = pretrain(small_run(corpus, tmp_path / "first", steps=2, save_every=0))
    pretrain(small_run(corpus, tmp_path / "run", steps=4, save_every=2))
    shutil.rmtree(tmp_path / "run" / "final")
    caplog.clear()
    pretrain(small_run(corpus, tmp_path / "run", steps=4, resume=True, model_config=None, init_from=first))
    assert (f"the run in {tmp_path / 'run'} started from --init-from not given (now {first}); a resume goes on "
            "from its checkpoint's weights, so --init-from is not read") in caplog.text
    recorded = json.loads((tmp_path / "run" / "run.json").read_text())["config"]
    assert (recorded["model_config"], recorded["init_from"]) == ("tiny", None)
    for damage in ("{", "[1]", '{"config": 5}'):
        (tmp_path / "run" / "run.json").write_text(damage)
        with pytest.raises(BertctlError, match=r"run.json is damaged .*; restore or delete it$"):
            pretrain(small_run(corpus, tmp_path / "run", steps=4, resume=True))
    (tmp_path / "run" / "step-000002" / "trainer_state.json").write_text("{}")
    with pytest.raises(BertctlError, match=r"trainer_state.json is damaged \(has no step\)"):
        pretrain(small_run(corpus, tmp_path / "run", steps=4, resume=True))


def test_a_resume_refused_over_a_damaged_metrics_file_leaves_the_run_as_it_was(corpus, tmp_path):
    """run.json was rewritten (this resume's settings and step) before metrics.jsonl was read and refused."""
    from bertctl.pretrain import pretrain

    run = tmp_path / "run"
    pretrain(small_run(corpus, run, steps=4, save_every=2))
    shutil.rmtree(run / "final")
    (run / "metrics.jsonl").write_bytes(b'{"step": 1, "loss": 4.0}\n\xff\n')
    before = {path: path.read_bytes() for path in run.rglob("*") if path.is_file()}
    with pytest.raises(BertctlError, match=r"metrics.jsonl is damaged .*; restore or delete it$"):
        pretrain(small_run(corpus, run, steps=6, resume=True, lr=1e-3))
    assert {path: path.read_bytes() for path in run.rglob("*") if path.is_file()} == before


def test_a_warmup_flag_replaces_the_config_files_other_warmup(corpus, tmp_path):
    (tmp_path / "run.yaml").write_text("warmup_steps: 1\nsteps: 4\nbatch_size: 8\n")
    result = CliRunner().invoke(app, ["pretrain", "--corpus", str(corpus), "--out", str(tmp_path / "run"),
                                      "--model-config", "tiny", "--config", str(tmp_path / "run.yaml"),
                                      "--warmup-fraction", "0.5", "--num-workers", "0", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "run" / "run.json").read_text())["warmup_steps"] == 2


def test_more_loader_workers_than_cores_is_one_warning_naming_the_flag(corpus, tmp_path, monkeypatch, caplog):
    """torch warned twice (at the loader and at its iterator), in a 300-character line that named no flag."""
    import warnings

    from bertctl.pretrain import pretrain

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pretrain(small_run(corpus, tmp_path / "run", steps=2, save_every=0, num_workers=2))
    assert [str(w.message) for w in caught if "DataLoader" in str(w.message)] == []
    said = [r.getMessage() for r in caplog.records if "--num-workers" in r.getMessage()]
    assert said == ["warning: --num-workers 2 is more than the 1 CPU core this process may use: the loader workers "
                    "compete for it with training and each other, which slows the run; give at most 1"], said


@pytest.mark.parametrize(("workers", "said"), [
    (2, []),  # as many as the cores: no warning
    (3, ["warning: --num-workers 3 is more than the 2 CPU cores this process may use: the loader workers compete "
         "for them with training and each other, which slows the run; give at most 2"]),
])
def test_loader_workers_are_weighed_against_the_cores_in_the_plural_too(monkeypatch, caplog, workers, said):
    import bertctl.pretrain

    monkeypatch.setattr(bertctl.pretrain, "usable_cores", lambda: 2)
    bertctl.pretrain._warn_many_workers(workers)
    assert [r.getMessage() for r in caplog.records] == said


def _cli(corpus: Path, out: Path, *extra: str, workers: int = 0) -> list[str]:
    return ["pretrain", "--corpus", str(corpus), "--out", str(out), "--model-config", "tiny", "--lr", "2e-3",
            "--warmup-steps", "2", "--log-every", "1", "--eval-every", "0", "--num-workers", str(workers),
            "--device", "cpu", "--seed", "7", *extra]


def test_sigterm_to_the_process_group_saves_and_resume_continues(corpus, tmp_path):
    """As SLURM, systemd and torchrun stop a job: the signal reaches the loader worker too (--num-workers 1)."""
    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = _cli(corpus, run, "--batch-size", "8", "--save-every", "0", workers=1)
    process = subprocess.Popen([sys.executable, "-m", "bertctl", *args, "--steps", "100000"], env=env,
                               start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not (run / "metrics.jsonl").is_file():
        time.sleep(0.2)
    time.sleep(1.0)
    os.killpg(process.pid, signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    [checkpoint] = [p for p in run.iterdir() if p.name.startswith("step-")]
    stopped = json.loads((checkpoint / "trainer_state.json").read_text())["step"]
    assert stopped == max(losses(run)) == int(checkpoint.name.split("-")[1])
    assert not (run / "final").exists() and gone(process.pid, group=True)
    _launch([*args, "--steps", str(stopped + 2), "--resume"], 1, tmp_path)
    assert json.loads((run / "final" / "trainer_state.json").read_text())["step"] == stopped + 2
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == list(
        range(1, stopped + 3))


SIGNALS_AT_A_STEP = """
import os, signal, time

from bertctl import run_metrics, training
from bertctl.cli import main

step, calls = training.optimizer_step, []


def stepping(*args, **kwargs):  # before step STOP_AT: SIGNALS SIGTERMs to the whole process group
    calls.append(None)
    if len(calls) == int(os.environ["STOP_AT"]):
        for _ in range(int(os.environ["SIGNALS"])):
            os.killpg(0, signal.SIGTERM)
            time.sleep(1.2)  # the handler runs in here; a second signal sooner would be the first's copy
    return step(*args, **kwargs)


training.optimizer_step = stepping
main()
"""


def test_a_second_sigterm_to_the_group_stops_at_once_and_leaves_no_worker(corpus, tmp_path):
    (tmp_path / "signals.py").write_text(SIGNALS_AT_A_STEP)
    run = tmp_path / "run"
    process = subprocess.Popen([sys.executable, str(tmp_path / "signals.py"),
                                *_cli(corpus, run, "--steps", "50", "--batch-size", "8", "--save-every", "0",
                                      workers=1)],
                               env={**os.environ, "OMP_NUM_THREADS": "1", "STOP_AT": "3", "SIGNALS": "2"},
                               start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 143 and err.strip().endswith("bertctl: error: terminated"), err[-2000:]
    assert not [p for p in run.iterdir() if p.name.startswith("step-")] and not (run / "final").exists()
    assert gone(process.pid, group=True)


def _run_processes(corpus: Path, out: Path, processes: int, *flags: str, port: int = 29500) -> str:
    """`bertctl pretrain ...` in this process, or under torchrun (gloo) in several. OUT is in the test's tmp_path,
    which takes torchrun's temporary files too."""
    return _launch(_cli(corpus, out, *flags), processes, out.parent, port)


def _launch(args: list[str], processes: int, tmp_path: Path, port: int = 29500) -> str:
    """`bertctl ARGS` in this process, or under torchrun (gloo) in several; returns what it said. A process of its
    own for one would only add the ~5 s of importing torch that a torchrun launch pays in each rank."""
    if processes == 1:
        done = CliRunner().invoke(app, args)
        assert done.exit_code == 0, done.output
        return done.output
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes),
                "--master_port", str(port + os.getpid() % 1000), "-m", "bertctl"]
    done = subprocess.run([*launcher, *args], capture_output=True, text=True, env=torchrun_env(tmp_path))
    assert done.returncode == 0, ranks_said(done.stderr)
    return done.stdout + done.stderr


DDP_FLAGS = ("--batch-size", "8", "--micro-batch-size", "4", "--dropout", "0")


def test_quick_start_runs_end_to_end_and_fill_uses_it(tmp_path):
    run = tmp_path / "quick"
    result = CliRunner().invoke(app, ["pretrain", "--out", str(run), "--steps", "2", "--log-every", "1",
                                      "--num-workers", "0"])
    assert result.exit_code == 0, result.output
    assert f"bertctl fill --model {run / 'final'}" in result.stdout
    assert sorted(p.name for p in (run / "data").iterdir()) == ["corpus", "tokenizer"]
    manifest = json.loads((run / "data" / "corpus" / "manifest.json").read_text())
    assert manifest["counts"]["train"]["documents"] > 250 and manifest["objective"] == "mlm+nsp"
    assert manifest["masked_lm_prob"] == 0.4  # the paper's 15% leaves a tiny model at frequent words for longer
    assert json.loads((run / "run.json").read_text())["config"]["model_config"] == "tiny"
    filled = CliRunner().invoke(app, ["fill", "--model", str(run / "final"), "--json", "she was [MASK] to see him."])
    assert filled.exit_code == 0, filled.output
    assert len(json.loads(filled.stdout)["predictions"][0]) == 5
    # Run again in the same folder: --resume reuses the data; a plain rerun is refused before building anything.
    again = CliRunner().invoke(app, ["pretrain", "--out", str(run), "--steps", "3", "--num-workers", "0", "--resume"])
    assert again.exit_code == 0 and "quick start:" not in again.stdout, again.output
    assert json.loads((run / "final" / "trainer_state.json").read_text())["step"] == 3
    # resumed once on its corpus by name (as its run.json's config gives it back), it is still the quick start
    named = CliRunner().invoke(app, ["pretrain", "--out", str(run), "--corpus", str(run / "data" / "corpus"),
                                     "--steps", "4", "--batch-size", "32", "--num-workers", "0", "--resume"])
    assert named.exit_code == 0, named.output
    plain_resume = CliRunner().invoke(app, ["pretrain", "--out", str(run), "--steps", "5", "--num-workers", "0",
                                            "--resume"])
    assert plain_resume.exit_code == 0 and "quick start:" not in plain_resume.stdout, plain_resume.output
    shutil.rmtree(run / "data")
    plain = CliRunner().invoke(app, ["pretrain", "--out", str(run), "--steps", "3", "--num-workers", "0"])
    assert plain.exit_code == 2 and "--resume" in plain.stderr and not (run / "data").exists()
    reseeded = CliRunner().invoke(app, ["pretrain", "--out", str(run), "--steps", "4", "--num-workers", "0",
                                        "--resume", "--seed", "7"])
    assert reseeded.exit_code == 2 and "--seed" in reseeded.stderr and not (run / "data").exists()


def test_nan_steps_are_skipped_then_the_run_stops_with_one_line(corpus, tmp_path):
    result = CliRunner().invoke(app, _cli(corpus, tmp_path / "run", "--steps", "20", "--batch-size", "8",
                                          "--lr", "1e30", "--warmup-steps", "0", "--clip", "0",
                                          "--max-bad-steps", "3", "--save-every", "0"))
    assert result.exit_code == 1, result.output
    assert "NaN/inf for 3 steps in a row" in result.stderr
    rows = [strict_json(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [row["skipped_steps"] for row in rows][-2:] == [1, 2]  # the third bad step stopped the run
    assert rows[-1]["loss"] is None and rows[-1]["mlm_loss"] is None  # non-finite figures are null


def test_a_resume_goes_on_counting_the_nan_steps_in_a_row_its_checkpoint_ended_with(corpus, tmp_path):
    """Saved after its first NaN step (step 2), the run resumed from there stops at step 4, as it did unstopped,
    and its metrics rows go on counting the skipped steps."""
    from bertctl.pretrain import pretrain

    flags = {"steps": 10, "lr": 1e30, "warmup_steps": 0, "clip": 0, "max_bad_steps": 3, "save_every": 1}
    with pytest.raises(BertctlError, match="NaN/inf for 3 steps in a row at step 4;"):
        pretrain(small_run(corpus, tmp_path / "run", **flags))
    metrics = tmp_path / "run" / "metrics.jsonl"
    skipped = [json.loads(line)["skipped_steps"] for line in metrics.read_text().splitlines()]
    shutil.rmtree(tmp_path / "run" / "step-000003")
    with pytest.raises(BertctlError, match="NaN/inf for 3 steps in a row at step 4;"):
        pretrain(small_run(corpus, tmp_path / "run", resume=True, **flags))
    assert [json.loads(line)["skipped_steps"] for line in metrics.read_text().splitlines()] == skipped == [0, 1, 2]


def test_fp16_loss_scaler_skips_count_as_skipped_steps_and_never_stop_the_run(corpus, tmp_path, monkeypatch):
    """fp16's GradScaler skips a step whose scaled gradients overflow: metrics rows count it in skipped_steps,
    and such routine skips never stop the run as NaN/inf steps do (--max-bad-steps 2). On the CPU: fp16 autocast
    there, and a loss scale at which every scaled gradient overflows."""
    import torch

    from bertctl import training
    from bertctl.pretrain import pretrain

    scaler = torch.amp.GradScaler
    monkeypatch.setattr(training, "resolve_precision", lambda precision, device: "fp16")
    monkeypatch.setattr(torch.amp, "GradScaler", lambda device: scaler(device, init_scale=2.0**127))
    pretrain(small_run(corpus, tmp_path / "run", steps=3, save_every=0, max_bad_steps=2))
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [row["skipped_steps"] for row in rows] == [1, 2, 3]


def strict_json(line: str) -> dict:
    """Parse as jq and other strict readers do: NaN and Infinity are not JSON."""
    def refuse(name: str) -> None:
        raise ValueError(f"{name} in {line}")

    return json.loads(line, parse_constant=refuse)


def test_resume_on_two_processes_continues_a_one_process_run(corpus, tmp_path):
    """Two gloo ranks give the losses of one process (MLM+NSP) from a checkpoint one process saved, and the gradient
    norms of the whole batch, not of a rank's half."""
    flags = (*DDP_FLAGS, "--steps", "8", "--save-every", "4")
    _run_processes(corpus, tmp_path / "full", 1, *flags)
    shutil.copytree(tmp_path / "full", tmp_path / "moved")
    shutil.rmtree(tmp_path / "moved" / "final")
    _run_processes(corpus, tmp_path / "moved", 2, *flags, "--resume", port=30500)
    a, b = losses(tmp_path / "full"), losses(tmp_path / "moved")
    assert sorted(b) == list(range(1, 9))
    assert max(abs(a[s] - b[s]) for s in range(5, 9)) < 1e-4
    norms = [{row["step"]: row["grad_norm"] for row in map(json.loads, (tmp_path / run / "metrics.jsonl").read_text()
                                                            .splitlines()) if "grad_norm" in row}
             for run in ("full", "moved")]
    assert [norms[1][s] for s in range(5, 9)] == pytest.approx([norms[0][s] for s in range(5, 9)], rel=1e-4)


def test_compiled_training_gives_the_eager_losses(corpus, tmp_path):
    from bertctl.pretrain import pretrain

    eager = small_run(corpus, tmp_path / "eager", steps=3, save_every=0, dropout=0.0)
    pretrain(eager)
    pretrain(small_run(corpus, tmp_path / "compiled", steps=3, save_every=0, dropout=0.0, compile=True))
    a, b = losses(tmp_path / "eager"), losses(tmp_path / "compiled")
    assert sorted(b) == [1, 2, 3] and max(abs(a[s] - b[s]) for s in a) < 1e-4


def test_compiled_training_builds_one_graph(corpus, tmp_path, monkeypatch):
    """Every micro-batch goes through one graph without a break (validation between steps runs the model
    uncompiled). A micro-batch without padding lost its attention mask on the way to the device, so the compiled
    forward saw None where it had seen a mask and was compiled again in the middle of the run (minutes for
    BERT-base on a GPU)."""
    import torch
    import torch._dynamo
    from torch._dynamo.utils import counters

    from bertctl import training
    from bertctl.pretrain import pretrain

    graphs, unpadded = [], []
    compile_model, to_device = torch.compile, training.to_device

    def capture(graph: torch.fx.GraphModule, inputs: list) -> Callable:  # dynamo's graphs alone, run as traced
        graphs.append(graph)
        return graph.forward

    def spy(batch: dict, device: torch.device, **kwargs) -> dict:
        unpadded.append(bool(batch["attention_mask"].all()))
        return to_device(batch, device, **kwargs)

    monkeypatch.setattr(torch, "compile", lambda model: compile_model(model, backend=capture))
    monkeypatch.setattr(training, "to_device", spy)
    torch._dynamo.reset()
    counters.clear()
    pretrain(small_run(corpus, tmp_path / "run", steps=6, batch_size=2, micro_batch_size=1, save_every=0,
                       eval_every=3, eval_samples=4, compile=True))
    assert any(unpadded) and not all(unpadded)  # both kinds of micro-batch were trained on
    assert len(graphs) == 1 and not counters["graph_break"]
    torch._dynamo.reset()


def test_the_mlm_head_reads_fixed_slots_when_compiled_and_on_cuda(odd_config):
    """Compiled graphs want fixed shapes, and on a GPU picking the masked positions (a boolean index) would make the
    host wait for the device every forward pass: both read max_predictions_per_seq slots per row; the CPU's eager
    runs the masked positions as they fall."""
    import torch

    from bertctl.pretrain import _mlm_slots

    manifest = {"max_predictions_per_seq": 20}
    assert _mlm_slots(manifest, compiled=False, device=torch.device("cpu")) is None
    assert _mlm_slots(manifest, compiled=True, device=torch.device("cpu")) == 20
    assert _mlm_slots(manifest, compiled=False, device=torch.device("cuda", 1)) == 20

    from bertctl.model import BertForMaskedLM
    from bertctl.pretraining_objective import loss_terms

    model, shapes = BertForMaskedLM(odd_config), []
    model.register_forward_hook(lambda module, args, kwargs, out: shapes.append(tuple(out.logits.shape)),
                                with_kwargs=True)
    ids = torch.randint(5, odd_config.vocab_size, (2, 9))
    labels = torch.full_like(ids, -100)
    labels[:, 3] = 7
    loss_terms(model, {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "mlm_labels": labels}, 4)
    assert shapes == [(2 * 4, odd_config.vocab_size)]  # the step's loss terms run the head on those slots


def test_a_warmup_as_long_as_the_run_is_warned_about(corpus, tmp_path, caplog):
    args = _cli(corpus, tmp_path / "run", "--steps", "2", "--batch-size", "4", "--save-every", "0")
    args[args.index("--warmup-steps") + 1] = "5"
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "the warmup (5 steps) is not shorter than the run (2 steps)" in caplog.text


def test_phase_two_resumes_without_its_init_from_and_from_its_recorded_config(corpus, tmp_path):
    """On a resume the checkpoint is the model: the phase-1 folder may be gone, and the run.json config (which
    records --model-config's default beside --init-from) may be given back."""
    from bertctl.pretrain import pretrain

    phase1 = pretrain(small_run(corpus, tmp_path / "phase1", steps=2))
    values = {"corpus": corpus, "out": tmp_path / "phase2", "steps": 8, "batch_size": 8, "save_every": 4,
              "warmup_steps": 0, "eval_every": 0, "num_workers": 0, "device": "cpu", "seed": 7}
    pretrain(PretrainConfig(init_from=phase1, **values))
    shutil.rmtree(tmp_path / "phase2" / "final")
    shutil.rmtree(tmp_path / "phase1")
    started = json.loads((tmp_path / "phase2" / "run.json").read_text())["init_weights_sha256"]
    pretrain(PretrainConfig(resume=True, **values))
    record = json.loads((tmp_path / "phase2" / "run.json").read_text())
    assert record["init_weights_sha256"] == started is not None  # carried: the phase-1 folder is gone
    config = record["config"]
    (tmp_path / "phase2.json").write_text(json.dumps({**config, "init_from": None}))
    result = CliRunner().invoke(app, ["pretrain", "--config", str(tmp_path / "phase2.json"), "--resume",
                                      "--steps", "9"])
    assert result.exit_code == 0, result.output

def test_a_one_segment_model_on_sentence_pairs_and_an_out_inside_the_corpus_are_refused(corpus, tmp_path):
    """type_vocab_size 1 on an NSP corpus failed mid-step as `IndexError: index out of range in self` after
    run.json was written; a run written into its corpus folder was deleted by the next `corpus build --overwrite`."""
    from bertctl.pretrain import pretrain

    one_segment = tmp_path / "one_segment.json"
    one_segment.write_text(json.dumps({"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                                       "intermediate_size": 64, "type_vocab_size": 1}))
    with pytest.raises(UsageError, match=r"holds sentence pairs \(mlm\+nsp\) but the model has type_vocab_size 1"):
        pretrain(small_run(corpus, tmp_path / "run", model_config=str(one_segment), steps=1))
    assert not (tmp_path / "run").exists()
    for inside in (corpus, corpus / "runs" / "pt"):
        with pytest.raises(UsageError, match="is inside the corpus .*, which `corpus build --overwrite` replaces"):
            pretrain(small_run(corpus, inside, steps=1))
    assert not (corpus / "runs").exists()


def test_an_out_that_is_a_model_folder_is_refused_before_anything_is_written(corpus, tmp_path):
    """`--out` a fine-tuned model folder replaced its run.json and metrics.jsonl with pretrain's, and `--out` the
    `--init-from` model (or any model folder) nested a run inside it (MODEL/final): a model folder, holding
    config.json, is never a pretrain run folder."""
    from bertctl.pretrain import pretrain

    model = tmp_path / "finetuned"
    model.mkdir()
    files = {"config.json": "{}", "run.json": '{"task": "sst2"}', "metrics.jsonl": '{"step": 1}\n'}
    for name, text in files.items():
        (model / name).write_text(text)
    with pytest.raises(UsageError, match=r"^--out .*finetuned is a model folder \(it holds config.json\), not a run "
                                         r"folder; choose another --out"):
        pretrain(small_run(corpus, model, steps=1))
    assert {p.name: p.read_text() for p in model.iterdir()} == files


def test_a_file_where_the_final_model_goes_is_refused_before_any_step(corpus, tmp_path):
    """RUN/final a file (a file in place of the folder): a resume trained every step and saved step checkpoints,
    then failed on the final save with `--out RUN/final is a file`, naming a path that was not --out."""
    from bertctl.pretrain import pretrain

    run = tmp_path / "run"
    run.mkdir()
    (run / "final").write_text("x\n")
    with pytest.raises(UsageError, match=rf"^--out {run}: {run / 'final'} is a file, not a model folder; move or "
                                         "delete it$"):
        pretrain(small_run(corpus, run, steps=2))
    assert sorted(p.name for p in run.iterdir()) == ["final"]


def test_ranks_reading_different_corpora_are_refused(corpus, tmp_path):
    """Nodes without shared storage each read their own copy of --corpus: a copy that differs trained every rank
    on mismatched data, silently (same shapes, so nothing failed)."""
    for rank, seed_shift in ((0, 0), (1, 1)):
        copy = Path(shutil.copytree(corpus, tmp_path / f"node{rank}" / "corpus"))
        manifest = json.loads((copy / "manifest.json").read_text())
        (copy / "manifest.json").write_text(json.dumps({**manifest, "seed": manifest["seed"] + seed_shift}))
    (tmp_path / "node.py").write_text(  # each rank in its own "node", reading the relative path `corpus`
        "import os, sys\nos.chdir(f'node{os.environ[\"RANK\"]}')\n"
        "from bertctl.cli import main\nsys.argv[0] = 'bertctl'\nmain()\n")
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                           str(29700 + os.getpid() % 1000), str(tmp_path / "node.py"),
                           *_cli(Path("corpus"), tmp_path / "run", "--steps", "2", "--batch-size", "8")],
                          capture_output=True, text=True, cwd=tmp_path, env=torchrun_env(tmp_path), timeout=120)
    assert done.returncode != 0
    assert "--corpus corpus: rank 1 reads other instances than rank 0" in done.stderr, done.stderr[-2000:]
    assert not (tmp_path / "run" / "final").exists()


@pytest.mark.parametrize("rank1_holds", ["nothing", "another run's step-000001"])
def test_ranks_finding_other_checkpoints_in_their_out_are_refused(corpus, tmp_path, rank1_holds):
    """Nodes each with their own --out (no shared storage): rank 0 alone saves, so on a resume rank 1 found no
    checkpoint and started at step 0 while rank 0 went on from its checkpoint; their steps drifted apart until
    rank 0 waited in its final save for a rank still training: a hang (and other optimizer moments before it).
    A checkpoint of the same name from another run is another checkpoint too."""
    from bertctl.pretrain import pretrain

    for rank in (0, 1):
        shutil.copytree(corpus, tmp_path / f"node{rank}" / "corpus")
    for rank in (0, 1) if rank1_holds != "nothing" else (0,):
        node = tmp_path / f"node{rank}"
        pretrain(small_run(node / "corpus", node / "run", steps=2, save_every=1, seed=7 + rank))
        shutil.rmtree(node / "run" / "final")
    (tmp_path / "node.py").write_text(  # each rank in its own "node", reading the relative paths `corpus`, `run`
        "import os, sys\nos.chdir(f'node{os.environ[\"RANK\"]}')\n"
        "from bertctl.cli import main\nsys.argv[0] = 'bertctl'\nmain()\n")
    done = run_group([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                      str(29900 + os.getpid() % 1000), str(tmp_path / "node.py"),
                      *_cli(Path("corpus"), Path("run"), "--steps", "4", "--batch-size", "8", "--resume")],
                     timeout=120, cwd=tmp_path, env=torchrun_env(tmp_path))
    assert done.returncode != 0
    assert "--out run: rank 1 finds other checkpoints there than rank 0" in done.stderr, done.stderr[-2000:]
    assert sorted(p.name for p in (tmp_path / "node0" / "run").iterdir()) == ["metrics.jsonl", "run.json",
                                                                              "step-000001"]


def test_a_run_folder_another_bertctl_writes_refuses_every_torchrun_rank_in_one_line(corpus, tmp_path):
    """Rank 0 alone takes the lock: refused there alone, it exited while rank 1 waited for it in the next
    collective, which failed with gloo's "Connection closed by peer", a second error line under the refusal."""
    from bertctl.output_locks import output_lock

    run = tmp_path / "run"
    with output_lock(run):
        done = run_group([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                          str(29820 + os.getpid() % 1000), "-m", "bertctl",
                          *_cli(corpus, run, "--steps", "2", "--batch-size", "8")],
                         timeout=120, env=torchrun_env(tmp_path))
    said = [line for line in done.stderr.splitlines() if line.startswith("bertctl:")]
    assert done.returncode == 1 and said == [
        f"bertctl: error: {run} is in use by another bertctl (pid {os.getpid()} on {socket.gethostname()}); wait "
        "for it to finish or choose another --out"], ranks_said(done.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tmp"]


def test_two_gloo_processes_give_the_losses_of_one(tmp_path):
    """Every figure of every row, from one fresh 2-process run that takes in much at once: micro-batches accumulated
    under no_sync, an MLM-only corpus, --init-from a BertForPreTraining folder (its NSP head and pooler are left out,
    or DDP would find parameters without gradients), LAMB, validation passes, and a --resume with nothing to resume.
    The resume test below has two ranks on MLM+NSP."""
    from bertctl.corpus import build_corpus

    _write_text(tmp_path / "docs.txt", documents=24, seed=2)
    BertTokenizer.from_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", *WORDS]).save(tmp_path / "tok")
    build_corpus(CorpusConfig(inputs=(str(tmp_path / "docs.txt"),), tokenizer=tmp_path / "tok", out=tmp_path / "mlm",
                              objective="mlm", max_seq_length=32, validation_fraction=0.2, workers=1, seed=1))
    init = _model_folder(tmp_path / "pretraining", tmp_path / "tok")
    flags = ["--batch-size", "8", "--micro-batch-size", "2", "--dropout", "0", "--steps", "4", "--save-every", "0",
             "--optimizer", "lamb", "--eval-every", "2", "--eval-samples", "8", "--init-from", str(init)]
    runs, said = {}, {}
    for processes in (1, 2):
        out = tmp_path / f"p{processes}"
        args = [a for a in _cli(tmp_path / "mlm", out, *flags) if a not in ("--model-config", "tiny")]
        said[processes] = _launch([*args, "--resume"], processes, tmp_path)
        runs[processes] = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert said[2].count("--resume: no complete checkpoint") == 1  # rank 0 alone says what the run does
    one, two = runs[1], runs[2]
    assert [sorted(row) for row in one] == [sorted(row) for row in two] and "nsp_loss" not in one[0]
    assert [row["step"] for row in one if "val_mlm_loss" in row] == [2, 4]
    for a, b in zip(one, two, strict=True):
        assert all(abs(a[k] - b[k]) < 1e-4 for k in a if k not in ("elapsed", "tokens_per_second"))

def test_init_from_says_which_heads_start_fresh_an_untied_decoder_too(corpus, tmp_path):
    """A masked-LM folder has no NSP head and no pooler: they were trained from scratch without a word. With
    tie_word_embeddings false and no decoder in the file, transformers draws the decoder at random: so does
    pretrain (from --seed), then trains it apart from the embeddings and saves it; fill refuses that folder."""
    from safetensors.torch import load_file

    from bertctl.checkpoint import load_model

    masked = _model_folder(tmp_path / "masked", corpus / "tokenizer", architecture="BertForMaskedLM")
    result = CliRunner().invoke(app, ["pretrain", "--corpus", str(corpus), "--out", str(tmp_path / "run"), "--steps",
                                      "1", "--batch-size", "4", "--init-from", str(masked), "--num-workers", "0",
                                      "--device", "cpu", "--seed", "7"])
    assert result.exit_code == 0, result.output
    assert f"bertctl: pretrain: {masked} has no nsp or pooler; they start fresh (--seed 7)" in result.stderr
    config = json.loads((masked / "config.json").read_text())
    (masked / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": False}))
    untied = CliRunner().invoke(app, ["pretrain", "--corpus", str(corpus), "--out", str(tmp_path / "untied"),
                                      "--steps", "2", "--batch-size", "4", "--init-from", str(masked), "--device",
                                      "cpu", "--num-workers", "0", "--seed", "7"])
    assert untied.exit_code == 0, untied.output
    assert f"{masked} has no mlm decoder, nsp or pooler; they start fresh (--seed 7)" in untied.stderr
    saved = load_file(tmp_path / "untied" / "final" / "model.safetensors")
    decoder = saved["cls.predictions.decoder.weight"]
    assert 0.015 < decoder.std() < 0.025  # initializer_range 0.02, then two small steps
    assert (decoder - saved["bert.embeddings.word_embeddings.weight"]).abs().max() > 0.01
    assert json.loads((tmp_path / "untied" / "final" / "config.json").read_text())["tie_word_embeddings"] is False
    with pytest.raises(UsageError, match="sets tie_word_embeddings false but the weights hold no"):
        load_model(masked)  # fill cannot compute its MLM head
    quick = CliRunner().invoke(app, ["pretrain", "--out", str(tmp_path / "quick"), "--init-from", str(masked)])
    assert quick.exit_code == 2 and "needs --corpus" in quick.stderr, quick.output  # the quick start built its data
    assert not (tmp_path / "quick").exists()


def test_an_untied_run_resumes_and_transformers_reloads_it_untied(corpus, tmp_path):
    """--init-from a transformers model with tie_word_embeddings false: a resume from its step checkpoint ends with
    the uninterrupted run's weights (the decoder's optimizer moments saved and restored with the rest), and the
    final folder loads in transformers untied, with no missing key and bertctl's logits."""
    transformers = pytest.importorskip("transformers")
    import torch
    from safetensors.torch import load_file

    from bertctl.checkpoint import load_model
    from bertctl.pretrain import pretrain
    from bertctl.tokenizer_folder import load_tokenizer

    torch.manual_seed(0)
    transformers.BertForPreTraining(transformers.BertConfig(
        vocab_size=load_tokenizer(corpus / "tokenizer").vocab_size, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=2, intermediate_size=64, max_position_embeddings=64,
        tie_word_embeddings=False)).save_pretrained(tmp_path / "init")
    shutil.copytree(corpus / "tokenizer", tmp_path / "init", dirs_exist_ok=True)
    run = {"init_from": tmp_path / "init", "model_config": None, "steps": 4, "save_every": 2}
    final = pretrain(small_run(corpus, tmp_path / "full", **run))
    shutil.copytree(tmp_path / "full", tmp_path / "resumed")
    shutil.rmtree(tmp_path / "resumed" / "final")  # as if killed after step 2's checkpoint
    pretrain(small_run(corpus, tmp_path / "resumed", resume=True, **run))
    full, resumed = (load_file(folder / "final" / "model.safetensors") for folder in (tmp_path / "full",
                                                                                         tmp_path / "resumed"))
    assert full.keys() == resumed.keys() and "cls.predictions.decoder.weight" in full
    assert all(torch.equal(full[k], resumed[k]) for k in full)
    theirs, info = transformers.BertForPreTraining.from_pretrained(final, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert theirs.config.tie_word_embeddings is False
    ids = torch.tensor([[2, 7, 4, 9, 3]])
    with torch.no_grad():
        expected = theirs.eval()(input_ids=ids).prediction_logits
        got = load_model(final).eval()(ids).logits
    assert (got - expected).abs().max().item() <= 1e-5


def _lamb_step(groups: list[dict], state: dict, lr: float, betas=(0.9, 0.999), eps=1e-6) -> None:
    """LAMB as apex's FusedLAMB runs it, per tensor (transformers' Q, K and V are separate): bias-corrected Adam
    moments, decoupled weight decay, and the trust ratio ||w|| / ||update|| on the tensors that are decayed."""
    import torch

    for group in groups:
        for p in group["params"]:
            s = state.setdefault(p, {"t": 0, "m": torch.zeros_like(p), "v": torch.zeros_like(p)})
            s["t"] += 1
            s["m"].mul_(betas[0]).add_(p.grad, alpha=1 - betas[0])
            s["v"].mul_(betas[1]).addcmul_(p.grad, p.grad, value=1 - betas[1])
            update = (s["m"] / (1 - betas[0] ** s["t"])) / ((s["v"] / (1 - betas[1] ** s["t"])).sqrt() + eps)
            ratio = 1.0
            if group["weight_decay"]:
                update += group["weight_decay"] * p
                weight_norm, update_norm = float(p.norm()), float(update.norm())
                ratio = weight_norm / update_norm if weight_norm and update_norm else 1.0
            p.sub_(lr * ratio * update)


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step")  # LAMB's SGD only holds the lr
@pytest.mark.parametrize("case", ["adamw", "unpadded_accumulation_cosine", "lamb_accumulation", "mlm_only",
                                  "untied"])
def test_pretraining_is_a_transformers_loop_step_for_step(corpus, tmp_path, case):
    """With dropout off, `pretrain --init-from` a transformers checkpoint trains exactly as a hand-written loop over
    the same batches: transformers' BertForPreTraining (or BertForMaskedLM) loss, AdamW over the Trainer's decay
    groups (no decay on biases and LayerNorm; the tied word embeddings decayed once, the MLM bias not; untied, the
    decoder decayed as a matrix of its own and its own bias not), or a
    per-tensor apex-style LAMB, transformers' warmup schedules from step 0 (phase 2: a fresh optimizer), clipping
    at 1.0 and gradient accumulation that weights each micro-batch by its share of the global masked tokens and
    sequences. metrics.jsonl's loss, grad_norm (before clipping), lr, mlm_accuracy and nsp_accuracy are the
    loop's, and so are the weights."""
    transformers = pytest.importorskip("transformers")
    import torch
    import torch.nn.functional as F
    from safetensors.torch import load_file

    from bertctl.corpus import build_corpus, load_corpus
    from bertctl.data.batches import BatchPlan, Collator, StepBatches
    from bertctl.data.masking import masking_options
    from bertctl.pretrain import pretrain
    from bertctl.tokenizer_folder import load_tokenizer

    settings = {"adamw": {}, "unpadded_accumulation_cosine": {"batch_size": 2, "micro_batch_size": 1,
                                                                 "schedule": "cosine"},
                "lamb_accumulation": {"micro_batch_size": 4, "optimizer": "lamb", "schedule": "constant"},
                "mlm_only": {"micro_batch_size": 2}, "untied": {}}[case]
    if case == "mlm_only":
        _write_text(tmp_path / "docs.txt", documents=20, seed=5)
        build_corpus(CorpusConfig(inputs=(str(tmp_path / "docs.txt"),), tokenizer=corpus / "tokenizer",
                                  out=tmp_path / "mlm", objective="mlm", max_seq_length=32, workers=1))
        corpus = tmp_path / "mlm"
    torch.manual_seed(0)
    tokenizer = load_tokenizer(corpus / "tokenizer")
    init = transformers.BertForPreTraining(transformers.BertConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64, tie_word_embeddings=case != "untied"))
    with torch.no_grad():  # biases and LayerNorm weights away from 0 and 1, so that decaying them would show
        for p in init.parameters():
            if p.ndim == 1:
                p.add_(torch.randn_like(p) * 0.1)
    init.save_pretrained(tmp_path / "init")
    shutil.copytree(corpus / "tokenizer", tmp_path / "init", dirs_exist_ok=True)
    steps, lr, warmup, seed = 10, 1e-3, 3, 7
    batch = settings.setdefault("batch_size", 8)
    micro = settings.get("micro_batch_size", batch)
    final = pretrain(small_run(corpus, tmp_path / "run", init_from=tmp_path / "init", model_config=None, steps=steps,
                               lr=lr, warmup_steps=warmup, save_every=0, seed=seed, dropout=0.0, **settings))

    tables, manifest = load_corpus(corpus)
    masking = masking_options(tokenizer, manifest["masked_lm_prob"], manifest["max_predictions_per_seq"],
                              manifest["whole_word_masking"]) if manifest["masking"] == "dynamic" else None
    batches = StepBatches(tables["train"], BatchPlan(len(tables["train"]), batch, micro, 0, 1, seed),
                          Collator(tokenizer.pad_id, masking, seed), 0, steps)
    nsp = manifest["objective"] != "mlm"
    theirs = getattr(transformers, "BertForPreTraining" if nsp else "BertForMaskedLM").from_pretrained(
        tmp_path / "init", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    theirs.train()
    decay = set(transformers.Trainer.get_decay_parameter_names(None, theirs))
    assert "bert.embeddings.word_embeddings.weight" in decay and "cls.predictions.bias" not in decay
    groups = [{"params": [p for n, p in theirs.named_parameters() if n in decay], "weight_decay": 0.01},
              {"params": [p for n, p in theirs.named_parameters() if n not in decay], "weight_decay": 0.0}]
    lamb = settings.get("optimizer") == "lamb"
    optimizer = (torch.optim.SGD if lamb else torch.optim.AdamW)(groups, lr=lr, **({} if lamb else {"eps": 1e-6}))
    schedule = {"linear": transformers.get_linear_schedule_with_warmup,
                "cosine": transformers.get_cosine_schedule_with_warmup,
                "constant": lambda o, w, _: transformers.get_constant_schedule_with_warmup(o, w)}[
        settings.get("schedule", "linear")](optimizer, warmup, steps)
    expected, lamb_state, padded = [], {}, set()
    for step in range(steps):
        micro_batches = [batches[step * (batch // micro) + i] for i in range(batch // micro)]
        masked = sum(int((b["mlm_labels"] != -100).sum()) for b in micro_batches)
        loss_sum, mlm_correct, nsp_correct = 0.0, 0, 0
        for b in micro_batches:
            padded.add(not bool(b["attention_mask"].all()))
            out = theirs(input_ids=b["input_ids"], token_type_ids=b["token_type_ids"],
                         attention_mask=b["attention_mask"], labels=b["mlm_labels"],
                         **({"next_sentence_label": b["next_sentence_label"]} if nsp else {}))
            logits = out.prediction_logits if nsp else out.logits
            mlm = F.cross_entropy(logits.flatten(0, 1), b["mlm_labels"].flatten())
            mlm_correct += int((logits.argmax(-1) == b["mlm_labels"]).sum())
            loss = mlm * int((b["mlm_labels"] != -100).sum()) / masked
            if nsp:
                nsp_loss = F.cross_entropy(out.seq_relationship_logits, b["next_sentence_label"])
                nsp_correct += int((out.seq_relationship_logits.argmax(-1) == b["next_sentence_label"]).sum())
                loss = loss + nsp_loss * len(b["input_ids"]) / batch
            if micro == batch:
                assert loss.item() == pytest.approx(out.loss.item(), abs=1e-6)  # transformers' own sum
            loss.backward()
            loss_sum += loss.item()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(theirs.parameters(), 1.0))
        expected.append((loss_sum, grad_norm, optimizer.param_groups[0]["lr"], mlm_correct / masked,
                         nsp_correct / batch))
        if lamb:
            with torch.no_grad():
                _lamb_step(groups, lamb_state, optimizer.param_groups[0]["lr"])
        else:
            optimizer.step()
        schedule.step()
        optimizer.zero_grad()
    assert padded == {False} if micro == 1 else True in padded  # a single row is never padded; batches of more are
    rows = [row for row in map(json.loads, (tmp_path / "run" / "metrics.jsonl").read_text().splitlines())
            if "loss" in row]
    assert [r["loss"] for r in rows] == pytest.approx([e[0] for e in expected], abs=2e-6)
    assert [r["grad_norm"] for r in rows] == pytest.approx([e[1] for e in expected], rel=1e-5)
    assert [r["lr"] for r in rows] == pytest.approx([e[2] for e in expected], abs=1e-12)
    assert [r["mlm_accuracy"] for r in rows] == pytest.approx([e[3] for e in expected], abs=1e-6)
    assert [r.get("nsp_accuracy") for r in rows] == ([pytest.approx(e[4], abs=1e-6) for e in expected] if nsp
                                                      else [None] * steps)
    trained, reference = load_file(final / "model.safetensors"), theirs.state_dict()
    assert trained.keys() <= reference.keys()
    if case == "untied":  # transformers' untied model leaves cls.predictions.bias unused; bertctl writes the one used
        assert torch.equal(trained.pop("cls.predictions.bias"), trained["cls.predictions.decoder.bias"])
        decoder, embeddings = (trained[k] for k in ("cls.predictions.decoder.weight",
                                                    "bert.embeddings.word_embeddings.weight"))
        assert (decoder - embeddings).abs().max() > 0.01
        assert (decoder - init.cls.predictions.decoder.weight).abs().max() > 1e-4  # trained, apart
    for name, weight in trained.items():
        assert torch.allclose(weight, reference[name], atol=1e-6), name



def test_a_corpus_may_fill_every_position_of_the_model() -> None:
    from bertctl.config import BertConfig
    from bertctl.corpus_fit import refuse_unfit_corpus

    config = BertConfig(max_position_embeddings=32)
    refuse_unfit_corpus(config, {"objective": "mlm", "max_seq_length": 32}, "c")
    with pytest.raises(UsageError, match="corpus c has sequences of 33 tokens but the model takes at most 32"):
        refuse_unfit_corpus(config, {"objective": "mlm", "max_seq_length": 33}, "c")
