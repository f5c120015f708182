"""Pre-training end to end on a tiny corpus: learning, exact resume, signals, DDP parity, refusals."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from bertctl.cli import app
from bertctl.config import CorpusConfig, PretrainConfig
from bertctl.tokenizer import BertTokenizer

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
    return PretrainConfig(**{**values, **overrides})


def losses(run: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {row["step"]: row["loss"] for row in rows if "loss" in row}


def test_loss_falls_and_run_writes_its_files(corpus, tmp_path):
    from bertctl.pretrain import pretrain

    final = pretrain(small_run(corpus, tmp_path / "run", steps=40, save_every=20, eval_every=20, eval_samples=64))
    curve = losses(tmp_path / "run")
    assert np.mean([curve[s] for s in range(36, 41)]) < np.mean([curve[s] for s in range(1, 6)]) - 0.5
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["final", "metrics.jsonl", "run.json",
                                                                     "step-000020"]
    assert sorted(p.name for p in final.iterdir()) == [
        "config.json", "model.safetensors", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json",
        "trainer_state.json", "training_state.safetensors", "vocab.txt"]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert {"step", "loss", "mlm_loss", "nsp_loss", "mlm_accuracy", "lr", "grad_norm", "tokens_per_second",
            "elapsed"} <= set(rows[0])
    assert any("val_mlm_loss" in row and "val_nsp_accuracy" in row for row in rows)
    run_config = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run_config["config"]["steps"] == 40 and run_config["model"]["hidden_size"] == 128
    assert run_config["config"]["compile"] is None and run_config["compile"] is False  # default: on CUDA only


def test_resume_mid_epoch_reproduces_the_uninterrupted_run(corpus, tmp_path):
    from bertctl.pretrain import pretrain

    pretrain(small_run(corpus, tmp_path / "full"))
    shutil.copytree(tmp_path / "full", tmp_path / "resumed")
    for name in ("final", "step-000008"):  # as if killed between step 5 and step 8
        shutil.rmtree(tmp_path / "resumed" / name)
    metrics = tmp_path / "resumed" / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    metrics.write_text("".join(json.dumps({**r, "elapsed": 1000.0 + r["step"]}) + "\n" for r in rows))
    pretrain(small_run(corpus, tmp_path / "resumed", resume=True))
    full, resumed = losses(tmp_path / "full"), losses(tmp_path / "resumed")
    assert sorted(resumed) == list(range(1, 13))
    assert max(abs(full[s] - resumed[s]) for s in range(5, 13)) < 1e-5
    clock = [json.loads(line)["elapsed"] for line in metrics.read_text().splitlines()]
    assert clock[4] > 1004.0 and clock == sorted(clock)  # the resumed run's clock goes on from step 4's


def test_second_run_without_resume_is_refused(corpus, tmp_path):
    from bertctl.pretrain import pretrain

    pretrain(small_run(corpus, tmp_path / "run", steps=4, save_every=2))
    result = CliRunner().invoke(app, ["pretrain", "--corpus", str(corpus), "--out", str(tmp_path / "run"),
                                      "--model-config", "tiny", "--steps", "4"])
    assert result.exit_code == 2 and "--resume" in result.stderr


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


def test_init_from_starts_phase_two_from_the_weights_with_a_fresh_optimizer(corpus, tmp_path):
    from safetensors.torch import load_file

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
    assert json.loads((tmp_path / "p2" / "run.json").read_text())["corpus_manifest"]["max_seq_length"] == 48


def test_a_warmup_flag_replaces_the_config_files_other_warmup(corpus, tmp_path):
    (tmp_path / "run.yaml").write_text("warmup_steps: 1\nsteps: 4\nbatch_size: 8\n")
    result = CliRunner().invoke(app, ["pretrain", "--corpus", str(corpus), "--out", str(tmp_path / "run"),
                                      "--model-config", "tiny", "--config", str(tmp_path / "run.yaml"),
                                      "--warmup-fraction", "0.5", "--num-workers", "0", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "run" / "run.json").read_text())["warmup_steps"] == 2


def _cli(corpus: Path, out: Path, *extra: str) -> list[str]:
    return ["pretrain", "--corpus", str(corpus), "--out", str(out), "--model-config", "tiny", "--lr", "2e-3",
            "--warmup-steps", "2", "--log-every", "1", "--eval-every", "0", "--num-workers", "0",
            "--device", "cpu", "--seed", "7", *extra]


def test_sigterm_finishes_the_step_and_saves(corpus, tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, "-m", "bertctl", *_cli(corpus, run, "--steps", "100000",
                                "--batch-size", "8", "--save-every", "0")], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not (run / "metrics.jsonl").is_file():
        time.sleep(0.2)
    time.sleep(1.0)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    [checkpoint] = [p for p in run.iterdir() if p.name.startswith("step-")]
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    assert state["step"] == max(losses(run)) == int(checkpoint.name.split("-")[1])
    assert not (run / "final").exists()


def _run_processes(corpus: Path, out: Path, processes: int, *flags: str, port: int = 29500) -> None:
    """`python -m bertctl pretrain ...` in 1 process, or under torchrun (gloo) in several."""
    launcher = [sys.executable, "-m", "bertctl"]
    if processes > 1:
        launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes),
                    "--master_port", str(port + os.getpid() % 1000), "-m", "bertctl"]
    done = subprocess.run([*launcher, *_cli(corpus, out, *flags)], capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]


DDP_FLAGS = ("--batch-size", "8", "--micro-batch-size", "4", "--dropout", "0")


def test_two_gloo_processes_give_the_losses_of_one(corpus, tmp_path):
    _run_processes(corpus, tmp_path / "one", 1, *DDP_FLAGS, "--steps", "6", "--save-every", "0")
    _run_processes(corpus, tmp_path / "two", 2, *DDP_FLAGS, "--steps", "6", "--save-every", "0")
    a, b = losses(tmp_path / "one"), losses(tmp_path / "two")
    assert sorted(a) == sorted(b) == list(range(1, 7))
    assert max(abs(a[s] - b[s]) for s in a) < 1e-4


def test_quick_start_runs_end_to_end_and_fill_uses_it(tmp_path):
    run = tmp_path / "quick"
    result = CliRunner().invoke(app, ["pretrain", "--out", str(run), "--steps", "2", "--log-every", "1",
                                      "--num-workers", "0"])
    assert result.exit_code == 0, result.output
    assert f"bertctl fill --model {run / 'final'}" in result.stdout
    assert sorted(p.name for p in (run / "data").iterdir()) == ["corpus", "tokenizer"]
    manifest = json.loads((run / "data" / "corpus" / "manifest.json").read_text())
    assert manifest["counts"]["train"]["documents"] > 250 and manifest["objective"] == "mlm+nsp"
    assert json.loads((run / "run.json").read_text())["config"]["model_config"] == "tiny"
    filled = CliRunner().invoke(app, ["fill", "--model", str(run / "final"), "--json", "she was [MASK] to see him."])
    assert filled.exit_code == 0, filled.output
    assert len(json.loads(filled.stdout)["predictions"][0]) == 5


def test_nan_steps_are_skipped_then_the_run_stops_with_one_line(corpus, tmp_path):
    result = CliRunner().invoke(app, _cli(corpus, tmp_path / "run", "--steps", "20", "--batch-size", "8",
                                          "--lr", "1e30", "--warmup-steps", "0", "--clip", "0",
                                          "--max-bad-steps", "3", "--save-every", "0"))
    assert result.exit_code == 1, result.output
    assert "NaN/inf for 3 steps in a row" in result.stderr
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [row["skipped_steps"] for row in rows][-2:] == [1, 2]  # the third bad step stopped the run


def test_resume_on_two_processes_continues_a_one_process_run(corpus, tmp_path):
    flags = (*DDP_FLAGS, "--steps", "8", "--save-every", "4")
    _run_processes(corpus, tmp_path / "full", 1, *flags)
    shutil.copytree(tmp_path / "full", tmp_path / "moved")
    shutil.rmtree(tmp_path / "moved" / "final")
    _run_processes(corpus, tmp_path / "moved", 2, *flags, "--resume", port=30500)
    a, b = losses(tmp_path / "full"), losses(tmp_path / "moved")
    assert sorted(b) == list(range(1, 9))
    assert max(abs(a[s] - b[s]) for s in range(5, 9)) < 1e-4


def test_compiled_training_gives_the_eager_losses(corpus, tmp_path):
    from bertctl.pretrain import pretrain

    eager = small_run(corpus, tmp_path / "eager", steps=3, save_every=0, dropout=0.0)
    pretrain(eager)
    pretrain(small_run(corpus, tmp_path / "compiled", steps=3, save_every=0, dropout=0.0, compile=True))
    a, b = losses(tmp_path / "eager"), losses(tmp_path / "compiled")
    assert sorted(b) == [1, 2, 3] and max(abs(a[s] - b[s]) for s in a) < 1e-4


def test_a_warmup_as_long_as_the_run_is_warned_about(corpus, tmp_path, caplog):
    args = _cli(corpus, tmp_path / "run", "--steps", "2", "--batch-size", "4", "--save-every", "0")
    args[args.index("--warmup-steps") + 1] = "5"
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "the warmup (5 steps) is not shorter than the run (2 steps)" in caplog.text
