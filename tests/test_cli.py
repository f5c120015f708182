"""The command line as a user meets it: fast help, version, one-line errors, every command group."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest
from processes import ranks_said, run_group, torchrun_env
from torch.distributed import DistBackendError
from typer.testing import CliRunner

from bertctl import __version__
from bertctl.cli import app
from bertctl.cli_base import LOST_PEER, lost_peer
from bertctl.config import PretrainConfig
from bertctl.errors import Terminated, UsageError

pytestmark = pytest.mark.usefixtures("one_thread")

GROUPS = ["tokenizer", "corpus", "pretrain", "finetune", "evaluate", "predict", "fill", "convert", "info"]


def test_help_lists_every_command_group_without_importing_torch():
    code = ("import sys; from bertctl.cli import app\n"
            "try:\n    app(['--help'], prog_name='bertctl')\nexcept SystemExit:\n    pass\n"
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("NO-TORCH")
    for group in GROUPS:
        assert f"  {group} " in out


def test_version_and_module_entry_point():
    out = subprocess.run([sys.executable, "-m", "bertctl", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == f"bertctl {__version__}"


@pytest.mark.parametrize(("sig", "code"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_signal_after_the_command_ends_exits_at_once_without_a_traceback(sig, code):
    """A second Ctrl-C after a graceful stop landed in torch's exit hooks: "Exception ignored ...", exit 0."""
    script = ("import atexit, os, signal, sys, time\n"
              f"atexit.register(lambda: (os.kill(os.getpid(), signal.{sig}), time.sleep(5)))\n"
              "sys.argv = ['bertctl', '--version']\n"
              "from bertctl.cli import main\n"
              "main()\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == code and out.stderr == "", out.stderr


def test_sigterm_during_a_command_stops_it_like_ctrl_c_without_a_half_written_output(tmp_path):
    """kill/timeout/systemd send SIGTERM: it killed bertctl on the spot, leaving tokenizer train's hidden
    OUT.partial-* folder beside OUT (and corpus build's workers printing leaked-semaphore warnings)."""
    text = tmp_path / "text.txt"
    text.write_text("the cat sat on the mat. the dog sat on the log.\n" * 50, encoding="utf-8")
    script = ("import os, signal, sys\n"
              "import bertctl.files as files\n"
              "def killed(tmp, target, *rest):\n"
              "    os.kill(os.getpid(), signal.SIGTERM)\n"
              "files.replace_folder = killed\n"
              f"sys.argv = ['bertctl', 'tokenizer', 'train', {str(text)!r}, '--out', {str(tmp_path / 'tok')!r}, "
              "'--vocab-size', '60']\n"
              "from bertctl.cli import main\n"
              "main()\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TQDM_DISABLE": "1"})
    assert out.returncode == 143, out.stderr
    assert out.stderr.strip() == "bertctl: error: terminated"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["text.txt"]


def test_main_run_from_a_thread_exits_as_usual(monkeypatch, capsys):
    """Signal handlers can only be set in the main thread: main() from another one raised ValueError."""
    import threading

    from bertctl.cli import main

    monkeypatch.setattr(sys, "argv", ["bertctl", "--version"])
    codes = []

    def run() -> None:
        try:
            main()
        except SystemExit as exc:
            codes.append(exc.code)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert codes == [0] and capsys.readouterr().out.strip() == f"bertctl {__version__}"


def test_the_command_leaves_its_objects_out_of_the_interpreters_last_collection():
    """The collection at interpreter exit walked every object torch made (~1 s of CPU after each command)."""
    script = ("import gc, sys\nfrom bertctl.cli import main\nsys.argv = ['bertctl', '--version']\n"
              "try:\n    main()\nfinally:\n    print(gc.get_freeze_count() > 1000, file=sys.stderr)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stderr.strip() == "True"


@pytest.mark.parametrize("args", [["info", "/no/such/model"], ["fill", "--model", "/no/such", "a [MASK]"],
                                  ["tokenizer", "encode", "-t", "/no/such"]])
def test_user_mistakes_give_one_line_and_exit_2(args):
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1 and ("/no/such" in result.stderr or
                                                            "tokenizer encode: give TEXT" in result.stderr)
    assert "Traceback" not in result.output


# every rank records its exit code, so the test sees each one (torchrun reports only that some rank failed)
_RANK = """
import os, sys
from pathlib import Path
from bertctl.cli import main
rank = os.environ["RANK"]
sys.argv = ["bertctl", *(arg.replace("{rank}", rank) for arg in sys.argv[1:])]
try:
    main()
except SystemExit as done:
    Path(os.environ["EXITS"], rank).write_text(str(done.code))
    raise
"""


@pytest.mark.parametrize("blank", ["", " "])
@pytest.mark.parametrize(("args", "named"), [(["info"], "MODEL"), (["fill", "a [MASK]", "--model"], "--model")])
def test_a_blank_model_is_refused_naming_its_argument(args, named, blank):
    """`fill --model ""` said "no model given" and `--model " "` (or `info " "`) "model folder does not exist",
    naming neither the flag nor the value; `tokenizer encode -t ""` and `convert ""` name theirs."""
    result = CliRunner().invoke(app, [*args, blank])
    assert result.exit_code == 2, result.output
    assert result.stderr == f"bertctl: error: {named}: empty; give a model folder or a hub id\n"


@pytest.mark.parametrize(("args", "lines"), [
    (["--epochs", "two"], ["Invalid value for '--epochs'"]),  # before the process group exists
    (["--model", "./missing"], ["model folder ./missing does not"]),  # after torchrun's process group is made
    (["--model", "./missing-{rank}"], [f"model folder ./missing-{r} does not" for r in (0, 1)]),  # ranks differ
])
def test_under_torchrun_an_error_is_said_once_and_each_different_one_too(tmp_path, args, lines):
    """Every rank ran the same command and failed with the same line: 2 processes printed it twice. Now once,
    and a line only one rank meets is still said; every rank exits 2."""
    script, exits = tmp_path / "rank.py", tmp_path / "exits"
    script.write_text(_RANK)
    exits.mkdir()
    command = ["finetune", "classify", "--train", "t.csv", "--text-columns", "text", "--device", "cpu",
               "--model", "m", "--out", "out", *args]
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--monitor-interval", "2",
                "--master_port", str(29640 + os.getpid() % 1000), str(script)]
    done = subprocess.run([*launcher, *command], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          env=torchrun_env(tmp_path, EXITS=str(exits)))
    said = sorted(line for line in done.stderr.splitlines() if line.startswith("bertctl: error: "))
    assert len(said) == len(lines), done.stderr[-3000:]
    assert all(line in each for line, each in zip(lines, said, strict=True)), said
    assert {p.name: p.read_text() for p in exits.iterdir()} == {"0": "2", "1": "2"}


def test_under_torchrun_a_rank_whose_stderr_no_one_sees_leaves_the_line_to_the_others(tmp_path):
    """`torchrun --local-ranks-filter 0` sends the other ranks' stderr to /dev/null, `--redirects` each rank's to its
    own stderr.log: a rank claiming the line there kept it from the console (rank 0 then kept silent) or from the
    other logs. Such a rank says it in its own stream and claims nothing; ranks on the shared console say it once."""
    attempt = tmp_path / "attempt_0"  # torchrun's folder for this launch, a folder per local rank in it
    for rank in range(4):
        (attempt / str(rank)).mkdir(parents=True)

    def run(rank, stderr):
        env = {**os.environ, "LOCAL_WORLD_SIZE": "4", "LOCAL_RANK": str(rank),
               "TORCHELASTIC_ERROR_FILE": str(attempt / str(rank) / "error.json")}
        return subprocess.run([sys.executable, "-m", "bertctl", "fill", "--top-k", "0", "a [MASK]"], env=env,
                              stdout=subprocess.DEVNULL, stderr=stderr, text=True, timeout=60)

    assert run(1, subprocess.DEVNULL).returncode == 2  # left out by --local-ranks-filter
    with (attempt / "2" / "stderr.log").open("w") as log:  # --redirects 3
        assert run(2, log).returncode == 2
    first, second = run(0, subprocess.PIPE), run(3, subprocess.PIPE)
    assert (first.returncode, second.returncode) == (2, 2)
    assert first.stderr.count("bertctl: error:") == 1 and "'--top-k'" in first.stderr, first.stderr
    assert second.stderr == ""
    assert "'--top-k'" in (attempt / "2" / "stderr.log").read_text()


# rank 0 alone fails while building the quick start's data, which the other ranks wait for at a barrier
_RANK0_FAILS = """
import os, sys
if os.environ["RANK"] == "0":
    import bertctl.tokenizer_train
    from bertctl.errors import UsageError

    def fail(*args, **kwargs):
        raise UsageError("rank 0 alone fails here")

    bertctl.tokenizer_train.train_tokenizer = fail
from bertctl.cli import main
sys.argv[0] = "bertctl"
main()
"""


def test_under_torchrun_the_ranks_a_failed_rank_leaves_waiting_point_at_its_error(tmp_path):
    """Rank 0 failed alone in a step the others wait for; their next collective failed with gloo's "Connection
    closed by peer", said as a second error line (`RuntimeError: [.../gloo/transport/tcp/pair.cc:553] ...`) that
    hid the real one. Those ranks now say, once per node, that another process failed (3 processes: 2 of them
    lose their peer)."""
    script = tmp_path / "rank.py"
    script.write_text(_RANK0_FAILS)
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "3", "--monitor-interval", "1",
                "--master_port", str(29660 + os.getpid() % 1000), str(script)]
    done = run_group([*launcher, "pretrain", "--out", str(tmp_path / "run"), "--steps", "2", "--batch-size", "6"],
                     timeout=120, cwd=tmp_path, env=torchrun_env(tmp_path))
    said = [line for line in done.stderr.splitlines() if line.startswith("bertctl: error: ")]
    assert done.returncode != 0 and said[0] == "bertctl: error: rank 0 alone fails here", ranks_said(done.stderr)
    # a waiting rank says it lost its peer, or, when torchrun's agent stops it first (SIGTERM, on a loaded machine),
    # that it was terminated: never gloo's words, and each line once per node
    stopped = {f"bertctl: error: {LOST_PEER}", "bertctl: error: terminated"}
    assert set(said[1:]) <= stopped and len(said[1:]) == len(set(said[1:])), ranks_said(done.stderr)
    assert "by peer" not in done.stderr and "gloo" not in done.stderr, ranks_said(done.stderr)


@pytest.mark.parametrize(("error", "world_size", "lost"), [
    (RuntimeError("[/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:31962"), "2", True),
    (RuntimeError("[/gloo/transport/tcp/pair.cc:534] Connection reset by peer"), "8", True),
    (RuntimeError("[/gloo/transport/tcp/pair.cc:598] Write to 10.0.0.2:2 failed: Broken pipe"), "2", True),
    (DistBackendError("NCCL error: remote process exited or there was a network error\nncclRemoteError: A call "
                      "failed possibly due to a network error or a remote process exiting prematurely."), "2", True),
    (DistBackendError("Watchdog caught collective operation timeout: WorkNCCL(OpType=ALLREDUCE)"), "2", False),
    (DistBackendError("NCCL error: unhandled cuda error, ncclUnhandledCudaError"), "2", False),
    (RuntimeError("Connection closed by peer"), "1", False),  # one process: no peer to have lost
    (RuntimeError("CUDA out of memory"), "2", False), (ValueError("Connection reset by peer"), "2", False),
    (ConnectionResetError(104, "Connection reset by peer"), "2", False),  # a file or socket of this process's own
])
def test_a_lost_peer_is_told_from_other_errors(monkeypatch, error, world_size, lost):
    monkeypatch.setenv("WORLD_SIZE", world_size)
    assert lost_peer(error) is lost


@pytest.mark.parametrize("debug", [False, True])
def test_a_lost_peer_is_one_line_exit_1_and_its_traceback_under_debug(monkeypatch, debug):
    from bertctl.cli_base import command_group, set_debug

    group = command_group("a group")

    @group.command()
    def collective() -> None:
        raise RuntimeError("[../gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:31962")

    @group.command()
    def other() -> None:  # a second command, so the group is not its single command
        pass

    monkeypatch.setenv("WORLD_SIZE", "2")
    set_debug(debug)
    try:
        result = CliRunner().invoke(group, ["collective"])
    finally:
        set_debug(False)
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == f"bertctl: error: {LOST_PEER}"
    assert ("Traceback" in result.stderr) is debug and ("pair.cc" in result.stderr) is debug


@pytest.mark.parametrize(("args", "named"), [
    (["pretrain", "--steps", "abc"], "'--steps'"), (["fill", "--top-k", "0", "a [MASK]"], "'--top-k'"),
    (["nosuch"], "'nosuch'"), (["--nope"], "--nope"), (["evaluate", "glue"], "'task'"),
    (["corpus", "inspect", "a", "b"], "(b)"),
])
def test_clicks_own_usage_errors_are_one_line_too(args, named):
    result = CliRunner().invoke(app, args)
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and named in lines[0], result.output
    assert lines[0].startswith("bertctl: error: ") and "--help'" in lines[0]


@pytest.mark.parametrize(("args", "where"), [
    (["fill", "--top-k"], "bertctl fill"), (["pretrain", "--steps"], "bertctl pretrain"),
    (["finetune", "glue", "--lr"], "bertctl finetune glue"), (["finetune", "--nope"], "bertctl finetune"),
])
def test_usage_errors_point_to_the_help_of_the_command_that_got_them(args, where):
    """click gives no context for an option without its value; the hint still names the sub-command."""
    result = CliRunner().invoke(app, args, prog_name="bertctl")
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].endswith(f"(see '{where} --help')"), result.output


def every_command(group=None, path=()):
    """(path, click command) of every command under `group` (the whole app by default)."""
    import typer

    group = group or typer.main.get_command(app)
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            yield from every_command(command, (*path, name))
        else:
            yield " ".join((*path, name)), command


SHORT = {"--tokenizer": "-t", "--out": "-o", "--model": "-m"}


def test_the_same_flag_has_the_same_short_option_and_a_help_line_in_every_command():
    """`pretrain --tokenizer` had no `-t` though `tokenizer encode`, `corpus build` and `corpus import` take it."""
    for name, command in every_command():
        for param in command.params:
            if param.param_type_name != "option" or "--help" in param.opts:
                continue
            assert (param.help or "").strip(), (name, param.opts)
            for flag, short in SHORT.items():
                if flag in param.opts:
                    assert short in param.opts, (name, flag)
    devices = {name: p.help for name, command in every_command() for p in command.params if p.name == "device"}
    assert len(set(devices.values())) == 1, devices  # fill's said "cpu, cuda, cuda:1 ... (default: ...)"


def test_convert_and_corpus_help_name_every_input_they_read():
    """`convert`'s help said "bertctl or transformers" (it reads Google's and NVIDIA's checkpoints too); the corpus
    flags said "from `bertctl corpus build`" (`corpus import` makes one too)."""
    commands = dict(every_command())
    source = commands["convert"].params[0].help
    assert "TensorFlow" in source and "NVIDIA" in source, source
    for name, flag in (("pretrain", "corpus"), ("corpus inspect", "corpus")):
        said = next(p.help for p in commands[name].params if p.name == flag)
        assert "corpus import" in said, (name, said)


def test_debug_given_after_the_command_says_where_it_goes():
    """Errors end "(rerun with --debug for the traceback)", and `bertctl info X --debug` then said only "No such
    option: --debug": the line now says that --debug goes before the command."""
    result = CliRunner().invoke(app, ["finetune", "glue", "sst2", "--debug"], prog_name="bertctl")
    assert result.exit_code == 2
    assert result.stderr == ("bertctl: error: --debug goes before the command: bertctl --debug finetune glue ...\n")


def test_a_group_without_a_command_shows_its_help():
    for args in ([], ["finetune"]):
        result = CliRunner().invoke(app, args)
        assert result.output.startswith("Usage: ") and "Commands" in result.output and result.exit_code in (0, 2)


def test_fill_without_a_model_points_to_the_quick_start(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["fill", "my dog is [MASK]."])
    assert result.exit_code == 2
    assert "run `bertctl pretrain` first" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_every_line_on_stderr_starts_with_bertctl_a_warning_too(tmp_path):
    """Errors were `bertctl: error: ...` and fine-tuning's status lines `bertctl: ...`, but warnings `warning: ...`
    (and pretrain's lines `pretrain: ...`, `--resume: ...`, `quick start: ...`): one form now."""
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *(f"Word{i}" for i in range(20))]) + "\n")
    result = CliRunner().invoke(app, ["tokenizer", "encode", "--tokenizer", str(vocab), "--lowercase", "word"])
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith(f"bertctl: warning: {vocab} has 20 tokens with capitals"), result.stderr
    assert len(result.stderr.splitlines()) == 1
    cased = CliRunner().invoke(app, ["tokenizer", "encode", "--tokenizer", str(vocab), "--cased", "--json", "Word1"])
    assert json.loads(cased.stdout)["tokens"] == ["[CLS]", "Word1", "[SEP]"] and cased.stderr == ""


def test_a_libraries_python_warning_is_a_bertctl_warning_line_too():
    """torch's DataLoader warning (`pretrain --num-workers 3` on 2 cores) came out raw: four lines, a file path and
    a source line among them, none starting with `bertctl: `."""
    script = ("import sys, warnings\n"
              "import bertctl.info as info\n"
              "def warned(model):\n"
              "    warnings.warn('This DataLoader will create 3 worker processes\\n in total.', UserWarning)\n"
              "    return real(model)\n"
              "real, info.info = info.info, warned\n"
              "sys.argv = ['bertctl', 'info', '/no/such/model']\n"
              "from bertctl.cli import main\n"
              "main()\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.splitlines() == ["bertctl: warning: This DataLoader will create 3 worker processes in total.",
                                       "bertctl: error: model folder /no/such/model does not exist"], out.stderr


def test_encode_prints_many_lines_a_chunk_at_a_time_in_order(tmp_path, monkeypatch):
    """stdin lines are encoded ENCODE_CHUNK at a time (a 10 MB file held every row's tokens: 0.7 GB), the rows in
    input order and a bad line refused before any output, numbered from the first line."""
    import bertctl.tokenizer as tokenizer_module
    from bertctl.tokenizer import BertTokenizer

    tok = BertTokenizer.from_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "##b"])
    tok.save(tmp_path / "tok")
    lines = [f"a {'b' * (i % 4)} a{i % 3}" for i in range(11)]
    expected = [{"text": t, "tokens": e.tokens, "input_ids": e.ids, "token_type_ids": e.type_ids}
                for t, e in zip(lines, tok.encode_batch(lines), strict=True)]
    batches: list[int] = []
    encode_batch = BertTokenizer.encode_batch
    monkeypatch.setattr(BertTokenizer, "encode_batch", lambda self, texts, *a, **k: batches.append(len(texts))
                        or encode_batch(self, texts, *a, **k))
    monkeypatch.setattr(tokenizer_module, "ENCODE_CHUNK", 4)
    result = CliRunner().invoke(app, ["tokenizer", "encode", "-t", str(tmp_path / "tok"), "--json", *lines])
    assert result.exit_code == 0 and [json.loads(r) for r in result.stdout.splitlines()] == expected
    assert batches == [4, 4, 3]
    result = CliRunner().invoke(app, ["tokenizer", "encode", "-t", str(tmp_path / "tok"), *lines, "b\udce9"])
    assert result.exit_code == 2 and result.stdout == "" and "text 12 is not valid UTF-8" in result.stderr


def test_text_that_is_not_utf8_is_refused_in_one_line(tmp_path):
    from bertctl.tokenizer import BertTokenizer

    BertTokenizer.from_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "caf"]).save(tmp_path / "tok")
    for args in (["caf\udce9"], ["ok", "--pair", "caf\udce9"]):
        result = CliRunner().invoke(app, ["tokenizer", "encode", "-t", str(tmp_path / "tok"), *args])
        assert result.exit_code == 2 and "is not valid UTF-8" in result.stderr, result.output
    assert CliRunner().invoke(app, ["tokenizer", "encode", "-t", str(tmp_path / "tok"), "café"]).exit_code == 0


def test_utf8_text_under_an_ascii_or_latin1_locale_is_read_as_utf8(tmp_path):
    """Under LC_ALL=C PYTHONUTF8=0 an argument's UTF-8 bytes reach Python as surrogates ("caf\udcc3\udca9") and were
    refused as not UTF-8; stdin was decoded by the locale, refused there too, or under Latin-1 encoded as `cafÃ©`."""
    from bertctl.tokenizer import BertTokenizer

    BertTokenizer.from_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "caf", "##e"]).save(tmp_path / "tok")
    encode = ["tokenizer", "encode", "-t", str(tmp_path / "tok"), "--json"]
    result = CliRunner().invoke(app, [*encode, "caf\udcc3\udca9", "--pair", "caf\udcc3\udca9"])
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)
    assert (row["text"], row["pair"], row["tokens"]) == ("café", "café", ["[CLS]", "caf", "##e", "[SEP]", "caf",
                                                                          "##e", "[SEP]"])
    result = CliRunner(charset="latin-1").invoke(app, encode, input="café\n".encode())
    assert result.exit_code == 0 and json.loads(result.stdout)["text"] == "café", result.output
    result = CliRunner().invoke(app, encode, input=b"caf\n\xe9\n")
    assert result.exit_code == 2 and "stdin: line 2 is not valid UTF-8 (byte 0xe9)" in result.stderr, result.output
    result = CliRunner(charset="latin-1").invoke(app, [*encode, "日本"])  # stdout has no bytes for it
    assert result.exit_code == 1 and result.stderr.startswith("bertctl: error: cannot write standard output: its "
                                                              "encoding (latin-1) has no character U+65E5; set")


@pytest.mark.parametrize("closed", [0, 2])
def test_a_command_started_with_stdin_or_stderr_closed_runs_as_with_dev_null(tmp_path, closed):
    """`<&-` gave "AttributeError: 'NoneType' object has no attribute 'isatty'"; `2>&-` failed the command at its
    first progress bar or warning (its files left unfinished), which tqdm then wrote to stdout."""
    from bertctl.tokenizer import BertTokenizer

    BertTokenizer.from_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]).save(tmp_path / "tok")
    (tmp_path / "in.txt").write_text("a b a.\nb a b.\n\nb b a.\na a b.\n")
    if closed == 0:
        args = ["tokenizer", "encode", "-t", str(tmp_path / "tok")]
    else:
        args = ["corpus", "build", str(tmp_path / "in.txt"), "-t", str(tmp_path / "tok"), "--out",
                str(tmp_path / "corpus"), "--workers", "1", "--max-seq-length", "8"]
    result = subprocess.run([sys.executable, "-m", "bertctl", *args], capture_output=True, text=True, timeout=120,
                            preexec_fn=lambda: os.close(closed), env={**os.environ, "OMP_NUM_THREADS": "1"})
    if closed == 0:
        assert result.returncode == 2 and result.stderr == (
            "bertctl: error: tokenizer encode: give TEXT arguments (or lines on stdin)\n"), result.stderr
    else:
        assert result.returncode == 0 and result.stdout.startswith("wrote "), result.stdout
        assert (tmp_path / "corpus" / "manifest.json").is_file()


MODEL_ARGS = [
    ["fill", "--model", "{}", "a [MASK]"], ["info", "{}"], ["convert", "{}", "--out", "out"],
    ["finetune", "classify", "--model", "{}", "--train", "t.csv", "--out", "run"],
    ["finetune", "glue", "sst2", "--model", "{}", "--data", "glue", "--out", "run"],
    ["evaluate", "classify", "--model", "{}", "--data", "t.csv"],
    ["evaluate", "glue", "sst2", "--model", "{}", "--data", "glue"],
    ["evaluate", "mlm", "--model", "{}", "--corpus", "corpus"],
    ["predict", "classify", "--model", "{}", "--data", "t.csv", "--out", "p.csv"],
    ["predict", "glue", "sst2", "--model", "{}", "--data", "glue", "--out", "sub"],
    ["pretrain", "--init-from", "{}", "--corpus", "corpus"],
]
TOKENIZER_ARGS = [
    ["tokenizer", "encode", "--tokenizer", "{}", "hello"],
    ["corpus", "build", "t.txt", "--tokenizer", "{}", "--out", "corpus"],
    ["pretrain", "--tokenizer", "{}", "--corpus", "corpus"],
]


@pytest.fixture
def no_hub(tmp_path, monkeypatch):
    """Fails a test that looks anything up on the hub or the network; runs in an empty folder."""
    import socket

    import huggingface_hub

    calls = []
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda *a, **k: calls.append(a) or str(tmp_path))
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: calls.append(a) or [])
    monkeypatch.chdir(tmp_path)
    yield calls
    assert calls == [], "a name written like a path was looked up on the hub"


@pytest.mark.parametrize("name", ["./nope", "nope/"])
@pytest.mark.parametrize(("args", "what"), [(a, "model folder") for a in MODEL_ARGS] +
                         [(a, "tokenizer") for a in TOKENIZER_ARGS])
def test_a_name_written_like_a_path_is_a_local_folder_never_a_hub_id(no_hub, args, what, name):
    """Typed as a Path, `./nope` and `nope/` would reach the hub lookup as `nope`, a valid hub id."""
    result = CliRunner().invoke(app, [arg.format(name) for arg in args])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == f"bertctl: error: {what} {name} does not exist"


def test_a_config_file_model_written_like_a_path_is_a_local_folder_too(no_hub):
    from pathlib import Path

    Path("run.yaml").write_text("model: ./nope\ntrain: t.csv\n")
    result = CliRunner().invoke(app, ["finetune", "classify", "--config", "run.yaml", "--out", "run"])
    assert result.exit_code == 2 and result.stderr.strip() == "bertctl: error: model folder ./nope does not exist"


def test_a_reader_that_goes_away_stops_the_output_quietly(tmp_path):
    """`bertctl tokenizer encode ... | head -1`: no error line about the closed pipe."""
    from bertctl.tokenizer import BertTokenizer

    BertTokenizer.from_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"]).save(tmp_path / "tok")
    (tmp_path / "texts.txt").write_text("a a\n" * 200_000)
    with open(tmp_path / "texts.txt", "rb") as texts:
        encode = subprocess.Popen([sys.executable, "-m", "bertctl", "tokenizer", "encode", "--tokenizer",
                                   str(tmp_path / "tok"), "--json"], stdin=texts, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
    assert encode.stdout.readline().startswith(b'{"text": "a a"')
    encode.stdout.close()
    assert encode.wait(timeout=120) == 141  # as `yes | head -1`: 128 + SIGPIPE, not a failure of its own
    assert encode.stderr.read() == b""


@pytest.mark.parametrize(("stdout", "unbuffered"), [("closed", "1"), ("full", ""), ("full", "1"), ("limited", ""),
                                                   ("limited", "1")])
def test_output_that_cannot_be_written_is_one_line_not_a_silent_success(tmp_path, stdout, unbuffered):
    """`bertctl info --json >&-` exited 0 printing nothing; `> /dev/full` gave a bare OSError line. Buffered (the
    default), the last block's write failed at Python's exit: "Exception ignored" and exit 120 after our line;
    under PYTHONUNBUFFERED=1 a write cut short by `ulimit -f` was taken as complete: a cut file, exit 0."""
    from bertctl.tokenizer import BertTokenizer

    BertTokenizer.from_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"]).save(tmp_path / "tok")
    text = " ".join(["a"] * 2000) if stdout == "limited" else "a"  # one write past the limit; all of it at exit
    command = [sys.executable, "-m", "bertctl", "tokenizer", "encode", "--tokenizer", str(tmp_path / "tok"), text]
    env = {**os.environ, "PYTHONUNBUFFERED": unbuffered}
    if stdout == "closed":
        result = subprocess.run(command, capture_output=False, stderr=subprocess.PIPE, text=True, timeout=120,
                                preexec_fn=lambda: os.close(1), env=env)
        expected = "cannot write standard output: it is closed"
    elif stdout == "full":
        if not os.path.exists("/dev/full"):
            pytest.skip("no /dev/full")
        with open("/dev/full", "w") as full:
            result = subprocess.run(command, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120, env=env)
        expected = "cannot write standard output or an output file: No space left on device; free some disk space"
    else:
        import resource

        with open(tmp_path / "out.txt", "w") as out:
            result = subprocess.run(command, stdout=out, stderr=subprocess.PIPE, text=True, timeout=120, env=env,
                                    preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096)))
        expected = "cannot write standard output or an output file: File too large; a file-size limit (ulimit -f)"
    lines = result.stderr.splitlines()
    assert result.returncode == 1 and len(lines) == 1 and lines[0].startswith(f"bertctl: error: {expected}"), lines


def test_encode_reads_crlf_lines_from_stdin_without_their_carriage_return(tmp_path):
    from bertctl.tokenizer import BertTokenizer

    BertTokenizer.from_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"]).save(tmp_path / "tok")
    result = CliRunner().invoke(app, ["tokenizer", "encode", "--tokenizer", str(tmp_path / "tok"), "--json"],
                                input="a a\r\na\r\n")
    assert result.exit_code == 0, result.output
    assert [line.split('"tokens"')[0] for line in result.stdout.splitlines()] == ['{"text": "a a", ', '{"text": "a", ']


def test_encode_gives_every_stdin_line_a_row_a_blank_one_too(tmp_path):
    """A row per line keeps the output in step with a piped file; a blank line is the text "", which transformers'
    tokenizer encodes as [CLS] [SEP] too (`fill --file` skips one: it has no [MASK] to fill)."""
    from bertctl.tokenizer import BertTokenizer

    BertTokenizer.from_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"]).save(tmp_path / "tok")
    result = CliRunner().invoke(app, ["tokenizer", "encode", "--tokenizer", str(tmp_path / "tok"), "--json"],
                                input="a\n\n \r\na\n")
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["tokens"] for line in result.stdout.splitlines()] == [
        ["[CLS]", "a", "[SEP]"], ["[CLS]", "[SEP]"], ["[CLS]", "[SEP]"], ["[CLS]", "a", "[SEP]"]]


def test_encode_drops_a_byte_order_mark_from_stdin_as_fill_does(tmp_path):
    """A file a Windows editor saved (`< notes.txt`) echoed its BOM at the head of the first text's "text"."""
    from bertctl.tokenizer import BertTokenizer

    BertTokenizer.from_vocab(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"]).save(tmp_path / "tok")
    result = CliRunner().invoke(app, ["tokenizer", "encode", "--tokenizer", str(tmp_path / "tok"), "--json"],
                                input="\ufeffa a\r\n\ufeffa\n")
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["text"] for line in result.stdout.splitlines()] == ["a a", "\ufeffa"]


def test_a_broken_pipe_that_is_not_stdouts_is_reported(monkeypatch, tmp_path):
    """Only a reader of our output going away is quiet; another pipe breaking is an error like any other."""
    import bertctl.info

    def broken(model):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(bertctl.info, "info", broken)
    result = CliRunner().invoke(app, ["info", str(tmp_path)])
    assert result.exit_code == 1 and "BrokenPipeError" in result.stderr


def _caused(error: Exception, cause: Exception) -> Exception:
    """error as `raise error from cause` leaves it, cause with a traceback of its own."""
    try:
        raise cause
    except Exception as raised:
        error.__cause__ = raised
    return error


@pytest.mark.parametrize(("error", "code", "line"), [
    (ValueError("row 7 is damaged"), 1, "ValueError: row 7 is damaged (in DataLoader worker process 0; rerun with "
                                        "--debug for the traceback)"),
    (UsageError("--corpus c: row 7 is damaged"), 2, "--corpus c: row 7 is damaged"),
    # a message of several lines: the whole of it, as outside a worker, not its last line alone
    (ValueError("row 7 is damaged:\ncolumn 2 is short"), 1, "ValueError: row 7 is damaged: column 2 is short (in "
                                                           "DataLoader worker process 0; rerun with --debug for the "
                                                           "traceback)"),
    (UsageError("--corpus c:\nrow 7 is damaged"), 2, "--corpus c: row 7 is damaged"),
    # a line of the message that reads like the error's own first line is still the message's
    (ValueError("row 7 is damaged:\nValueError: bad int"), 1, "ValueError: row 7 is damaged: ValueError: bad int (in "
                                                            "DataLoader worker process 0; rerun with --debug for the "
                                                            "traceback)"),
    # a message holding a traceback of its own (a child process's) keeps its first line too
    (ValueError("row 7 is damaged:\nTraceback (most recent call last):\n  File \"x.py\", line 1\nValueError: bad int"),
     1, "ValueError: row 7 is damaged: Traceback (most recent call last): File \"x.py\", line 1 ValueError: bad int "
        "(in DataLoader worker process 0; rerun with --debug for the traceback)"),
    (ValueError("row 7 is damaged:\nThe above exception was the direct cause of the following exception:\n\n"
                "Traceback (most recent call last):\nValueError: bad int"), 1,
     "ValueError: row 7 is damaged: The above exception was the direct cause of the following exception: Traceback "
     "(most recent call last): ValueError: bad int (in DataLoader worker process 0; rerun with --debug for the "
     "traceback)"),
    # raised from another error of its type: the error's own line, not its cause's
    (_caused(ValueError("row 7 is damaged"), ValueError("bad int")), 1, "ValueError: row 7 is damaged (in DataLoader "
                                                                         "worker process 0; rerun with --debug for "
                                                                         "the traceback)"),
])
def test_an_error_in_a_loader_worker_is_one_line_without_the_workers_traceback(monkeypatch, tmp_path, error, code,
                                                                                line):
    """torch re-raises a DataLoader worker's error with the worker's traceback in its message: `pretrain
    --batch-size 4294967295` said "RuntimeError: Caught MemoryError in DataLoader worker process 0. Original
    Traceback (most recent call last): File ..." on its error line."""
    from torch._utils import ExceptionWrapper

    import bertctl.info

    def in_a_worker(model):
        try:
            raise error
        except Exception:
            ExceptionWrapper(where="in DataLoader worker process 0").reraise()

    monkeypatch.setattr(bertctl.info, "info", in_a_worker)
    result = CliRunner().invoke(app, ["info", str(tmp_path)])
    assert result.exit_code == code and result.stderr == f"bertctl: error: {line}\n"


@pytest.mark.parametrize("message", [
    "Caught MemoryError in DataLoader worker process 0.\nOriginal Traceback \n",
    "row 7 is damaged.\nOriginal Traceback (most recent call last):\nValueError: x",
])
def test_an_error_not_in_torchs_worker_form_keeps_its_own_line(message):
    """Only torch's re-raise (`Caught ... in DataLoader worker process N.` and a traceback ending in the error
    line) is cut to the worker's error line; a message merely holding `.\\nOriginal Traceback`, or one with no
    traceback after it, is the error's own."""
    from bertctl.cli_base import _in_loader_worker

    assert _in_loader_worker(RuntimeError(message)) is None


def test_a_chained_error_in_a_loader_worker_is_the_last_one_raised(monkeypatch, tmp_path):
    """A worker's traceback of an error raised while handling another of the same class holds both error lines:
    the line is the one raised last, as Python ends its own traceback."""
    from torch._utils import ExceptionWrapper

    import bertctl.info

    def in_a_worker(model):
        try:
            try:
                raise ValueError("row 7 is damaged")
            except ValueError:
                raise ValueError("column 2 is short")  # noqa: B904 (the chain is the point)
        except Exception:
            ExceptionWrapper(where="in DataLoader worker process 0").reraise()

    monkeypatch.setattr(bertctl.info, "info", in_a_worker)
    result = CliRunner().invoke(app, ["info", str(tmp_path)])
    assert result.exit_code == 1 and result.stderr == ("bertctl: error: ValueError: column 2 is short (in DataLoader "
                                                       "worker process 0; rerun with --debug for the traceback)\n")


def test_a_worker_error_at_the_end_of_a_chain_of_three_is_the_last_one_raised():
    """Each error of the chain but the first follows a line Python prints between them: the error line is the one
    after the last of those, not after the first."""
    from torch._utils import ExceptionWrapper

    from bertctl.cli_base import _in_loader_worker

    try:
        try:
            try:
                raise ValueError("row 7 is damaged")
            except ValueError as exc:
                raise ValueError("column 2 is short") from exc
        except ValueError:
            raise ValueError("the file is short")  # noqa: B904 (the chain is the point)
    except ValueError:
        wrapped = ExceptionWrapper(where="in DataLoader worker process 0")
    with pytest.raises(ValueError) as raised:
        wrapped.reraise()
    assert _in_loader_worker(raised.value) == ("ValueError: the file is short", "in DataLoader worker process 0")


def test_a_worker_error_line_the_pattern_does_not_know_is_the_tracebacks_last_line():
    """No line reads as the first of the error torch names (its class printed otherwise): the traceback's last
    line is the error line still, not the whole traceback."""
    from bertctl.cli_base import _in_loader_worker

    message = ("Caught Boom in DataLoader worker process 0.\nOriginal Traceback (most recent call last):\n"
               '  File "w.py", line 2, in f\n    raise Boom("x")\nw.Bang: x')
    assert _in_loader_worker(RuntimeError(message)) == ("w.Bang: x", "in DataLoader worker process 0")


class _CausedInAWorker:
    """A map-style dataset whose item raises `ValueError(message) from KeyError`, in a DataLoader worker."""

    def __init__(self, message: str) -> None:
        self.message = message

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int) -> int:
        try:
            raise KeyError("bad int")
        except KeyError as exc:
            raise ValueError(self.message) from exc


@pytest.mark.parametrize(("message", "shown"), [
    ("row 7 is damaged", "row 7 is damaged"),
    # a message holding the line Python prints between the errors of a chain is the error's own still
    ("row 7 is damaged:\nThe above exception was the direct cause of the following exception:\ncolumn 2",
     "row 7 is damaged: The above exception was the direct cause of the following exception: column 2"),
    ("row 7 is damaged\n\nThe above exception was the direct cause of the following exception:\n\ncolumn 2",
     "row 7 is damaged The above exception was the direct cause of the following exception: column 2"),
])
def test_an_error_raised_from_another_in_a_real_loader_worker_is_its_whole_message(monkeypatch, tmp_path,
                                                                                  message, shown):
    """Only the last text after a chain's separator line was shown: a message holding that line lost its start."""
    import torch

    import bertctl.info
    from bertctl.stop_signals import loader_batches

    def in_a_worker(model):  # as the training loops read their loaders: the worker is shut down as the error leaves
        with loader_batches(torch.utils.data.DataLoader(_CausedInAWorker(message), batch_size=None,
                                                        num_workers=1)) as batches:
            next(batches)

    monkeypatch.setattr(bertctl.info, "info", in_a_worker)
    result = CliRunner().invoke(app, ["info", str(tmp_path)])
    assert result.exit_code == 1 and result.stderr == (f"bertctl: error: ValueError: {shown} (in DataLoader worker "
                                                       "process 0; rerun with --debug for the traceback)\n")


def test_finetune_glue_takes_its_task_from_the_config_file(tmp_path):
    (tmp_path / "run.yaml").write_text("task: sst2\nout: run\n")
    result = CliRunner().invoke(app, ["finetune", "glue", "--config", str(tmp_path / "run.yaml")])
    assert result.exit_code == 2 and result.stderr.strip() == "bertctl: error: give --model and --data"
    result = CliRunner().invoke(app, ["finetune", "glue", "--out", str(tmp_path / "run")])
    assert result.exit_code == 2 and result.stderr.strip() == "bertctl: error: give TASK and --model and --data"


def test_a_flag_switches_off_what_a_config_file_switched_on(tmp_path):
    """`tokenizer train` and `corpus build` had no --no-overwrite (nor --no-document-per-line): a --config file's
    `overwrite: true` could not be taken back by a flag, although flags win."""
    (tmp_path / "text.txt").write_text("one two three four five six.\n" * 40, encoding="utf-8")
    (tmp_path / "run.yaml").write_text("overwrite: true\n", encoding="utf-8")
    train = ["tokenizer", "train", str(tmp_path / "text.txt"), "--out", str(tmp_path / "tok"), "--vocab-size", "60",
             "--config", str(tmp_path / "run.yaml")]
    assert CliRunner().invoke(app, train).exit_code == 0
    assert CliRunner().invoke(app, train).exit_code == 0  # the file's overwrite: true
    refused = CliRunner().invoke(app, [*train, "--no-overwrite"])
    assert refused.exit_code == 2 and "already exists" in refused.stderr, refused.output


_RECIPES = {"glue": "bertctl.finetune", "classify": "bertctl.finetune", "squad": "bertctl.finetune_qa",
            "ner": "bertctl.finetune_tagging", "choice": "bertctl.finetune_multiple_choice"}


@pytest.mark.parametrize("task", list(_RECIPES))
def test_every_finetune_command_passes_its_own_and_the_shared_options_to_its_recipe(monkeypatch, tmp_path, task):
    """The options all `finetune` commands share are written once (`shared_options`): each command must still
    hand them to its recipe, under its own task's defaults and a --config file."""
    import importlib

    given = []
    monkeypatch.setattr(importlib.import_module(_RECIPES[task]), f"finetune_{task}", given.append)
    (tmp_path / "run.yaml").write_text("warmup_fraction: 0.2\nepochs: 4\n")  # the file's epochs beat squad's 2
    data = ["sst2", "--data", "glue"] if task == "glue" else ["--train", "t.csv", "--text-columns", "text"] \
        if task == "classify" else ["--train", "t.json"]
    result = CliRunner().invoke(app, ["finetune", task, *data, "--model", "m", "--out", str(tmp_path / "run"),
                                      "--adam-eps", "1e-7", "--seeds", "1,2", "--no-group-by-length", "--config",
                                      str(tmp_path / "run.yaml")])
    assert result.exit_code == 0, result.output
    cfg = given[0]
    assert (cfg.adam_eps, cfg.seeds, cfg.group_by_length, cfg.warmup_fraction) == (1e-7, (1, 2), False, 0.2)
    assert (cfg.lr, cfg.batch_size, cfg.epochs) == {"squad": (3e-5, 32, 4), "ner": (5e-5, 32, 4),
                                                    "choice": (5e-5, 16, 4)}.get(task, (2e-5, 32, 4))


def test_finetune_squad_lists_its_window_options_among_the_shared_ones():
    shown = CliRunner().invoke(app, ["finetune", "squad", "--help"], terminal_width=200)
    options = [line.split()[0].rstrip(",") for line in shown.output.splitlines() if line.startswith("  -")]
    assert options == ["--train", "--validation", "-m", "-o", "--seeds", "--max-seq-length", "--doc-stride",
                       "--max-query-length", "--n-best-size", "--max-answer-length", "--null-score-diff-threshold",
                       "--batch-size", "--micro-batch-size", "--eval-batch-size", "--lr", "--epochs",
                       "--warmup-fraction", "--schedule", "--weight-decay", "--adam-beta1", "--adam-beta2",
                       "--adam-eps", "--clip", "--dropout", "--group-by-length", "--gradient-checkpointing",
                       "--precision", "--device", "--log-every", "--save-every", "--max-bad-steps", "--resume",
                       "--overwrite", "--config", "--help"]
    assert "Peak learning rate [3e-5]." in shown.output and "Tokens per window: [CLS]" in shown.output


CONFIG_COMMANDS = ["tokenizer train", "corpus build", "corpus import", "pretrain", "finetune glue", "finetune classify",
                   "finetune squad", "finetune ner", "finetune choice"]


def test_the_options_of_commands_built_from_a_config_are_unset_unless_given():
    """An option's own default would beat the --config file (flags win) and the task's defaults (squad's lr): left
    None, an option not given falls through to the file, then to the task's and the dataclass's default."""
    commands = dict(every_command())
    set_by_default = [(name, p.name, p.default) for name in CONFIG_COMMANDS for p in commands[name].params
                      if p.name != "help" and p.default is not None]
    assert set_by_default == []


def test_every_option_of_a_config_command_is_spelt_as_its_field():
    """Errors name a field's flag (`flag_name`): an option spelt otherwise would be named by a flag that is not
    there, and --help and the docs would show a flag the error lines never name."""
    from bertctl.config_types import flag_name

    commands = dict(every_command())
    spelt = [(name, p.name, p.opts[0]) for name in CONFIG_COMMANDS for p in commands[name].params
             if p.param_type_name == "option" and p.name != "help" and flag_name(p.name) not in p.opts]
    assert spelt == []


def test_every_whole_number_option_of_pretrain_reaches_its_own_field(monkeypatch, tmp_path):
    import bertctl.pretrain

    given = []
    monkeypatch.setattr(bertctl.pretrain, "pretrain", lambda cfg: given.append(cfg) or tmp_path)
    hints = typing.get_type_hints(PretrainConfig)
    whole = [f.name for f in dataclasses.fields(PretrainConfig)
             if int in (hints[f.name], *typing.get_args(hints[f.name]))]
    values = {name: 11 + i for i, name in enumerate(whole)}
    args = [arg for name, value in values.items() for arg in (f"--{name.replace('_', '-')}", str(value))]
    result = CliRunner().invoke(app, ["pretrain", "--corpus", "c", *args])
    assert result.exit_code == 0, result.output
    assert {name: getattr(given[0], name) for name in values} == values and len(values) >= 10


# library function each evaluate/predict/fill/convert/info command calls (module, function, printer or None)
_CALLS = {
    "evaluate glue": ("bertctl.evaluate", "evaluate_glue", "print_results"),
    "evaluate classify": ("bertctl.evaluate", "evaluate_classify", "print_classify_results"),
    "evaluate squad": ("bertctl.squad", "evaluate_squad", "print_squad_results"),
    "evaluate mlm": ("bertctl.mlm_eval", "evaluate_mlm", "print_mlm_results"),
    "evaluate ner": ("bertctl.ner", "evaluate_ner", "print_ner_results"),
    "evaluate choice": ("bertctl.choice", "evaluate_choice", "print_choice_results"),
    "predict glue": ("bertctl.predict", "predict_glue", None), "predict classify": ("bertctl.predict",
                                                                                     "predict_classify", None),
    "predict squad": ("bertctl.squad", "predict_squad", None), "predict ner": ("bertctl.ner", "predict_ner", None),
    "predict choice": ("bertctl.choice", "predict_choice", None),
    "fill": ("bertctl.fill", "iter_fill", "print_fill_results"), "convert": ("bertctl.convert", "convert", None),
    "info": ("bertctl.info", "info", "print_info"),
}
# a value of its own for every option, so a flag handed on as another one's argument shows
_GIVEN = {"model": "m", "data": "d", "out": "o", "corpus": "c", "split": "s", "batch_size": 3, "max_seq_length": 17,
          "device": "cuda:7", "precision": "bf16", "doc_stride": 5, "max_query_length": 7, "n_best_size": 9,
          "max_answer_length": 11, "null_score_diff_threshold": 0.25, "label_names": "B,O", "text_columns": "t1,t2",
          "label_column": "lab", "samples": 13, "seed": 19, "top_k": 4, "overwrite": True, "truncate": True}


@pytest.mark.parametrize("name", list(_CALLS))
def test_every_option_of_a_scoring_or_model_command_reaches_its_own_argument(monkeypatch, tmp_path, name):
    """evaluate, predict, fill, convert and info hand their options on by position: two swapped (--doc-stride as
    max_query_length, --device as precision) or one left at its default would still run, on other settings."""
    import importlib
    import inspect

    module_name, function, printer = _CALLS[name]
    module = importlib.import_module(module_name)
    real, called, printed = getattr(module, function), {}, {}

    def record(*args, **kwargs):
        bound = inspect.signature(real).bind(*args, **kwargs).arguments
        called.update({key: str(value) if isinstance(value, Path) else value for key, value in bound.items()})
        return [] if name in ("predict glue", "predict squad") else iter(()) if name == "fill" else "done"

    monkeypatch.setattr(module, function, record)
    if printer:
        monkeypatch.setattr(module, printer, lambda *args, **kwargs: printed.update(kwargs))
    command = dict(every_command())[name]
    args = [*name.split(), *(["sst2"] if name.endswith("glue") else ["x [MASK]"] if name == "fill" else
                             ["m"] if name in ("convert", "info") else [])]
    expected = {"task": "sst2"} if name.endswith("glue") else {"texts": ["x [MASK]"]} if name == "fill" else \
        {"source" if name == "convert" else "model": "m"} if name in ("convert", "info") else {}
    for param in command.params:
        if param.param_type_name == "option" and param.name in _GIVEN:
            value = _GIVEN[param.name]
            args += [param.opts[0]] if value is True else [param.opts[0], str(value)]
            expected[param.name] = value
    if name == "fill":  # texts on the command line first, then those of --file
        (tmp_path / "texts.txt").write_text("y [MASK]\n")
        args += ["--target", "a", "-t", "b", "--file", str(tmp_path / "texts.txt")]
        expected.update(targets=["a", "b"], texts=["x [MASK]", "y [MASK]"])
    if any(p.name == "as_json" for p in command.params):
        args.append("--json")
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert {key: called.get(key) for key in expected} == expected
    assert not any(p.name == "as_json" for p in command.params) or printed.get("as_json") is True


def test_debug_before_the_command_shows_the_traceback_above_the_line(monkeypatch, tmp_path):
    import bertctl.info
    from bertctl.cli_base import set_debug

    def broken(model):
        raise ValueError("row 7 is damaged")

    monkeypatch.setattr(bertctl.info, "info", broken)
    try:
        result = CliRunner().invoke(app, ["--debug", "info", str(tmp_path)])
    finally:
        set_debug(False)
    assert result.exit_code == 1 and "Traceback (most recent call last):" in result.stderr
    assert result.stderr.splitlines()[-1] == ("bertctl: error: ValueError: row 7 is damaged (rerun with --debug for "
                                              "the traceback)")


def test_a_process_whose_stderr_is_closed_claims_no_line(monkeypatch, tmp_path):
    """Without a stderr it cannot say the line: claimed, no rank of the node would."""
    from bertctl.cli_base import _stderr_private

    def closed(fd):
        raise OSError(9, "Bad file descriptor")

    monkeypatch.setattr(os, "fstat", closed)
    assert _stderr_private(tmp_path) is True


def test_only_a_pipe_whose_reader_is_gone_is_taken_for_a_reader_gone(monkeypatch):
    """`| head` closing the pipe is quiet (exit 141); a pipe that still has its reader is some other pipe's error."""
    from bertctl.cli_base import _reader_gone

    read, write = os.pipe()
    with os.fdopen(write, "w") as stdout:
        monkeypatch.setattr(sys, "stdout", stdout)
        assert _reader_gone() is False
        os.close(read)
        assert _reader_gone() is True


@pytest.mark.parametrize(("args", "text", "expected"), [
    ([], "seed: 3\n", (None, 2500, 2e-3)), ([], "lr: 0.5\n", (None, 2500, 0.5)),  # the quick start, the file's over it
    (["--corpus", "c"], "seed: 3\n", ("c", 1_000_000, 1e-4)), ([], "corpus: c\n", ("c", 1_000_000, 1e-4)),
])
def test_pretrain_runs_the_quick_start_only_when_neither_flag_nor_file_names_a_corpus(monkeypatch, tmp_path, args,
                                                                                         text, expected):
    import bertctl.pretrain

    given = []
    monkeypatch.setattr(bertctl.pretrain, "pretrain", lambda cfg: given.append(cfg) or tmp_path)
    (tmp_path / "run.yaml").write_text(text)
    result = CliRunner().invoke(app, ["pretrain", *args, "--config", str(tmp_path / "run.yaml")])
    assert result.exit_code == 0, result.output
    corpus, steps, lr = expected
    assert (given[0].corpus, given[0].steps, given[0].lr) == (corpus and Path(corpus), steps, lr)


@pytest.mark.parametrize(("error", "code", "line"), [
    (KeyboardInterrupt(), 130, "interrupted"),  # Ctrl-C and SIGTERM: 128 + the signal, as a Unix tool killed by it
    (Terminated(), 143, "terminated"),
    (PermissionError(13, "Permission denied", "/x/y"), 1, "/x/y: Permission denied (rerun with --debug for the "
                                                          "traceback)"),
    (OSError(28, "No space left on device", "/x/y"), 1, "cannot write /x/y: No space left on device; free some disk "
                                                        "space or choose another path"),
    # tempfile's own error, as importing torch raised it with /tmp full or read-only
    (FileNotFoundError(2, "No usable temporary directory found in ['/nope', '/tmp', '/w d']"), 1,
     "no usable temporary folder: cannot write a file in /nope, /tmp, /w d (is it full or read-only?); point TMPDIR "
     "at a writable folder"),
])
def test_a_stop_or_a_file_system_error_is_one_line_with_its_exit_code(monkeypatch, tmp_path, error, code, line):
    import bertctl.info

    def failing(model):
        raise error

    monkeypatch.setattr(bertctl.info, "info", failing)
    result = CliRunner().invoke(app, ["info", str(tmp_path)])
    assert result.exit_code == code and result.stderr == f"bertctl: error: {line}\n"


@pytest.mark.parametrize(("command", "module", "function"), [
    ("tokenizer train", "bertctl.tokenizer_train", "train_tokenizer"),
    ("corpus build", "bertctl.corpus", "build_corpus"), ("corpus import", "bertctl.corpus_import", "import_corpus"),
])
def test_inputs_given_as_arguments_beat_the_config_files_and_none_leave_them(monkeypatch, tmp_path, command, module,
                                                                           function):
    import importlib

    given = []

    def stop(cfg):
        given.append(cfg.inputs)
        raise UsageError("stopped")

    monkeypatch.setattr(importlib.import_module(module), function, stop)
    (tmp_path / "run.yaml").write_text("inputs: [a.txt]\n")
    tokenizer = [] if command == "tokenizer train" else ["-t", str(tmp_path)]
    for inputs in ([], ["b.txt"]):
        CliRunner().invoke(app, [*command.split(), *inputs, *tokenizer, "--config", str(tmp_path / "run.yaml"),
                                 "--out", str(tmp_path / "out")])
    assert given == [("a.txt",), ("b.txt",)]


def test_the_defaults_of_those_commands_options_are_their_functions_own():
    """`evaluate mlm --split` ([validation]), `evaluate glue --split` (dev), `fill --top-k` (5): an option not given
    does what the Python function does when not given that argument (docs/python-api.md)."""
    import importlib
    import inspect

    commands = dict(every_command())
    differ = []
    for name, (module_name, function, _) in _CALLS.items():
        own = inspect.signature(getattr(importlib.import_module(module_name), function)).parameters
        differ += [(name, p.name, p.default) for p in commands[name].params if p.name in own
                   and own[p.name].default is not inspect.Parameter.empty and p.default != own[p.name].default]
    assert differ == []
