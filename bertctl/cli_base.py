"""What every bertctl command shares: library errors become one line on stderr and an exit code.

Library code raises `BertctlError`; only the command groups made here turn it into `bertctl: error: ...`
(exit 1, or 2 for usage errors), with the traceback only under `bertctl --debug`. Under torchrun that line is
said once per node however many of its processes fail with it (`_first_to_say`); a process that failed only
because another one stopped says that instead of its backend's error (`lost_peer`).
"""

from __future__ import annotations

import ast
import codecs
import contextlib
import errno
import hashlib
import inspect
import io
import logging
import os
import re
import select
import sys
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer
from typer.core import TyperGroup

from bertctl.errors import BertctlError, Terminated

_debug = False  # set by the root --debug option
ClickUsageError = typer.BadParameter.__mro__[1]  # click's UsageError, wherever typer takes click from


PATH_METAVAR = "<path>"  # what typer shows for a Path


def given_path(value: str | Path) -> Path:
    """A path flag's value: typer reads `--out ""` (an unset shell variable) as Path(""), the working folder,
    which then fails (or is written to) as `.`; refused here naming the flag."""
    if isinstance(value, str) and not value.strip():
        raise typer.BadParameter("empty; give a path")
    return Path(value)


def path_option(*names: str, **options: Any) -> Any:
    """typer.Option for a Path flag: an empty value is refused naming the flag (`given_path`)."""
    return typer.Option(*names, parser=given_path, metavar=PATH_METAVAR, **options)


def path_argument(**options: Any) -> Any:
    """typer.Argument for a Path: an empty value is refused naming the argument (`given_path`)."""
    return typer.Argument(parser=given_path, **options)


def typed_text(text: str) -> str:
    """A text argument as typed: under a C locale without UTF-8 mode (LC_ALL=C PYTHONUTF8=0) Python decodes the
    command line as ASCII, each byte of a UTF-8 `é` a lone surrogate, which would refuse the text as "not valid UTF-8".
    Such bytes are taken as the UTF-8 they are; a text whose bytes are not UTF-8 stays as it was, to be refused."""
    if not any("\udc80" <= char <= "\udcff" for char in text):
        return text
    try:
        return os.fsencode(text).decode("utf-8")
    except (UnicodeError, ValueError):
        return text


def fail(message: str, code: int) -> typer.Exit:
    line = f"bertctl: error: {' '.join(str(message).split())}"
    if _first_to_say(line):
        typer.echo(line, err=True)
    return typer.Exit(code)


def _first_to_say(line: str) -> bool:
    """Under torchrun every process runs the same command and mostly fails the same way (a bad flag, a missing
    file), which printed N copies of one line. The first process of this node to fail with a line claims it
    with a marker file in torchrun's folder for this launch (new for every launch and restart); the others
    exit silently with the same code. A line only some processes meet (after they diverged) is claimed by the
    first of them, so every different line is still said. Outside torchrun, or where its folder is not as
    expected, every process says its own; so does one whose stderr nobody else shares (`_stderr_private`)."""
    error_file = Path(os.environ.get("TORCHELASTIC_ERROR_FILE") or os.devnull)
    if (os.environ.get("LOCAL_WORLD_SIZE", "1") == "1" or error_file.parent.name != os.environ.get("LOCAL_RANK")
            or _stderr_private(error_file.parent)):
        return True
    claim = error_file.parent.parent / f"bertctl-said-{hashlib.sha256(line.encode()).hexdigest()[:16]}"
    try:
        os.close(os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        return False
    except OSError:  # torchrun's folder is gone or not ours to write: saying it twice beats not at all
        return True
    return True


def _stderr_private(rank_folder: Path) -> bool:
    """Whether torchrun sends this process's stderr nowhere (a rank `--local-ranks-filter` leaves out: /dev/null)
    or to this rank's own stderr.log (`--redirects`, `--tee`). Such a process must not claim a line: claimed
    there, the line never reaches the console the other ranks share, or is missing from their logs."""
    try:
        mine = os.fstat(2)
    except OSError:
        return True
    for private in (Path(os.devnull), rank_folder / "stderr.log"):
        with contextlib.suppress(OSError):
            if os.path.samestat(mine, private.stat()):
                return True
    return False


def _usage(exc: Any, ctx: Any) -> Exception:
    """click's own usage errors (a bad flag value, an unknown option or command) in the same one line; a
    group run with no arguments still shows its help. The hint names the command that was given the bad
    arguments: click leaves `exc.ctx` unset for an option without its value, and then `ctx`, the group that
    caught the error, says which of its commands it was invoking (none yet: the group's own arguments)."""
    if type(exc).__name__ == "NoArgsIsHelpError":
        return exc
    where = exc.ctx.command_path if exc.ctx else " ".join(filter(None, (ctx.command_path, ctx.invoked_subcommand)))
    if getattr(exc, "option_name", None) == "--debug":  # appended as an error line's "rerun with --debug" reads
        prog, _, command = where.partition(" ")
        return fail(f"--debug goes before the command: {prog} --debug {command} ...", exc.exit_code)
    return fail(f"{exc.format_message()} (see '{where} --help')", exc.exit_code)


class Group(TyperGroup):
    """Turns library errors into one line and an exit code (a traceback only with --debug)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except ClickUsageError as exc:
            raise _usage(exc, ctx) from None

    def invoke(self, ctx: Any) -> Any:
        try:
            result = super().invoke(ctx)
            sys.stdout.flush()  # a failure to write the output's last block is this command's, reported as any
            return result
        except ClickUsageError as exc:
            raise _usage(exc, ctx) from None
        except BertctlError as exc:
            if _debug:
                traceback.print_exc()
            worker = _in_loader_worker(exc)
            raise fail(worker[0].partition(": ")[2] if worker else str(exc), exc.exit_code) from None
        except KeyboardInterrupt as exc:
            raise (fail("terminated", 143) if isinstance(exc, Terminated) else fail("interrupted", 130)) from None
        except BrokenPipeError as exc:
            if not _reader_gone():
                raise _failure(exc) from None
            _stdout_to_devnull()
            raise typer.Exit(128 + SIGPIPE) from None  # as a Unix tool killed by SIGPIPE: `yes | head -1`
        except Exception as exc:
            if type(exc).__module__.split(".")[0] in ("click", "typer"):
                raise  # usage errors and exits, which click reports itself
            raise _failure(exc) from None


SIGPIPE = 13


def _failure(exc: Exception) -> Exception:
    """An unexpected error in one line (its traceback first under --debug); a file system error names its file
    (or standard output) and what to do."""
    if _debug:
        traceback.print_exception(exc)
    if isinstance(exc, OSError) and exc.errno:
        from bertctl.files import write_hint

        if isinstance(sys.stdout, ClosedStdout) and exc.errno == errno.EBADF and exc.filename is None:
            return fail("cannot write standard output: it is closed; run without `>&-`, or send it to /dev/null", 1)
        if (folders := _no_temp_folder(exc)) is not None:
            return fail(f"no usable temporary folder: cannot write a file in {folders} (is it full or read-only?); "
                        "point TMPDIR at a writable folder", 1)
        if exc.errno in _WRITE_ERRNOS:
            _flush_or_drop_stdout()
            where = os.fsdecode(exc.filename) if exc.filename is not None else "standard output or an output file"
            return fail(f"cannot write {where}: {write_hint(exc)}", 1)
        if exc.filename is not None:
            return fail(f"{os.fsdecode(exc.filename)}: {os.strerror(exc.errno)} (rerun with --debug for the "
                        "traceback)", 1)
    if isinstance(exc, UnicodeEncodeError) and _stdout_lacks(exc):
        return fail(f"cannot write standard output: its encoding ({sys.stdout.encoding}) has no character "
                    f"U+{ord(exc.object[exc.start]):04X}; set PYTHONIOENCODING=utf-8 or a UTF-8 locale", 1)
    if lost_peer(exc):
        return fail(LOST_PEER, 1)
    worker = _in_loader_worker(exc)
    if worker:
        return fail(f"{worker[0]} ({worker[1]}; rerun with --debug for the traceback)", 1)
    return fail(f"{type(exc).__name__}: {exc} (rerun with --debug for the traceback)", 1)


def _no_temp_folder(exc: OSError) -> str | None:
    """The folders tried, where `exc` is Python's tempfile finding none it can write a file in (TMPDIR's, /tmp, ...,
    the working folder: full, read-only, missing), as torch's import does (dill asks for one): every command failed
    with a bare FileNotFoundError that said neither why nor what to do."""
    head, found, tried = (exc.strerror or "").partition(_NO_TEMP)
    if head or not found:
        return None
    try:
        return ", ".join(ast.literal_eval(tried))
    except (ValueError, SyntaxError, TypeError):
        return tried


_NO_TEMP = "No usable temporary directory found in "  # tempfile's words, followed by the list of folders it tried


def _stdout_lacks(exc: UnicodeEncodeError) -> bool:
    """Whether `exc` is standard output's encoding (PYTHONIOENCODING=latin-1, an ASCII locale) meeting a character
    it has no bytes for, which the codec's own message ("position 11-13: ordinal not in range(256)") never said.
    Every file bertctl writes is UTF-8, so an error of any other encoding is stdout's."""
    try:
        ours, theirs = codecs.lookup(sys.stdout.encoding).name, codecs.lookup(exc.encoding).name
    except (LookupError, TypeError, AttributeError):
        return False
    return ours == theirs != "utf-8"


def _in_loader_worker(exc: Exception) -> tuple[str, str] | None:
    """(the error's own lines, where) of an error torch re-raised from a DataLoader worker, whose message holds the
    worker's whole traceback ("Caught MemoryError in DataLoader worker process 0. Original Traceback ..."): the
    error line keeps the end of it, the error itself as Python prints it (`Name: message`, every line of a message
    of several, not its last line alone, nor the end of a traceback its message holds). The error's own traceback
    is the last of a chain (its cause's or context's come first), and its first line that reads like the error's
    (frames are indented) starts the error."""
    head, found, worker_traceback = str(exc).partition(".\nOriginal Traceback")
    if not found or not head.startswith("Caught ") or not worker_traceback.strip():
        return None
    name, _, where = head.removeprefix("Caught ").partition(" ")
    lines = worker_traceback.strip().splitlines()
    own = max((i + 1 for i in range(len(lines)) if _links_a_chain(lines, i)), default=0)
    error = re.compile(rf"([\w.]+\.)?{re.escape(name)}(: |$)")  # the error's first line
    first = next((i for i in range(own, len(lines)) if error.match(lines[i])), len(lines) - 1)
    return " ".join(lines[first:]), where


def _links_a_chain(lines: list[str], i: int) -> bool:
    """Whether line i is one Python prints between the errors of a chain, not a line of an error's message that
    reads so: Python's stands between blank lines, before the traceback of the error raised (which has one)."""
    return lines[i] in _CHAINED and lines[i - 1:i] == [""] and lines[i + 1:i + 3] == ["", _TRACEBACK]


# the lines Python's traceback prints between the errors of a chain (`raise ... from`, or raised in an except)
_CHAINED = ("The above exception was the direct cause of the following exception:",
            "During handling of the above exception, another exception occurred:")
_TRACEBACK = "Traceback (most recent call last):"


LOST_PEER = ("another process of this run failed; this one stopped with it (that process's own line, or "
             "torchrun's summary, says why)")
_PEER_GONE = ("connection closed by peer", "connection reset by peer", "broken pipe", "ncclremoteerror")


def lost_peer(exc: Exception) -> bool:
    """Whether a process of a torchrun job failed because another one stopped: rank 0 failing alone (in a step the
    others wait for) left them in a collective that failed with gloo's "Connection closed by peer" (NCCL's
    ncclRemoteError), said as a second error line that hid the real one. Told by the message of a RuntimeError
    (torch.distributed's DistBackendError is one); other backend errors (a timeout, a CUDA error) keep theirs."""
    message = str(exc).casefold()
    return (isinstance(exc, RuntimeError) and os.environ.get("WORLD_SIZE", "1") != "1"
            and any(gone in message for gone in _PEER_GONE))


_WRITE_ERRNOS = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS}  # only writing fails so


class ClosedStdout(io.TextIOBase):
    """sys.stdout when bertctl was started with it closed (`>&-`): output fails as it does for cat or ls
    ("Bad file descriptor", exit 1) instead of vanishing with exit code 0."""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, os.strerror(errno.EBADF))


def buffer_raw_stdout() -> None:
    """Under PYTHONUNBUFFERED=1 or `python -u` (Docker images, CI runners) stdout is a raw file, and a short write
    to it (a file-size limit reached mid-write, a pipe's reader gone) is taken as complete: output cut short, exit
    0. Through a buffer flushed at each line, as on a terminal, a write completes or fails with one error line."""
    stream = sys.stdout
    if not isinstance(getattr(stream, "buffer", None), io.RawIOBase):
        return
    with contextlib.suppress(OSError, ValueError):
        raw = io.FileIO(stream.fileno(), "w", closefd=False)  # the original stays open for sys.__stdout__
        sys.stdout = io.TextIOWrapper(io.BufferedWriter(raw), encoding=stream.encoding, errors=stream.errors,
                                      line_buffering=True)


def _flush_or_drop_stdout() -> None:
    """After a write failed: stdout's pending output goes out if it can (the failure may be an output file's);
    if stdout itself fails, Python's own flush at exit must not fail again ("Exception ignored", exit 120)."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        _stdout_to_devnull()


def _stdout_to_devnull() -> None:
    with contextlib.suppress(OSError, ValueError):  # no more flushes into the failed stdout at exit
        devnull_onto(sys.stdout.fileno(), os.O_WRONLY)


def devnull_onto(fd: int, mode: int) -> None:
    """/dev/null as file descriptor `fd`: for a standard stream closed at start (so that no file opened later gets
    its number, and takes in what libraries write there), or one that failed."""
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, mode)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)


def _reader_gone() -> bool:
    """Whether our stdout is a pipe whose reader went away (`| head`), rather than some other pipe breaking
    (a worker process's, say): the write end of a pipe without a reader polls as an error."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLERR)
        return bool(poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), or no real stdout (a test runner's)
        return False


def command_group(help_text: str) -> typer.Typer:
    """A sub-command group (`bertctl corpus ...`) whose errors Group reports."""
    return typer.Typer(cls=Group, help=help_text, no_args_is_help=True, add_completion=False,
                       pretty_exceptions_enable=False, rich_markup_mode=None)


def set_debug(on: bool) -> None:
    global _debug
    _debug = on


class _AboveTheBar(logging.Handler):
    """Warnings go through tqdm, so each lands on a line of its own above a running progress bar; `bertctl: `
    first, as every line bertctl writes on stderr (`bertctl: warning: ...`)."""

    def emit(self, record: logging.LogRecord) -> None:
        from tqdm import tqdm

        tqdm.write(f"bertctl: {self.format(record)}", file=sys.stderr)


def show_warnings() -> None:
    """bertctl's warnings on stderr (once per process, however many commands a test runs), and the Python
    warnings of the libraries it runs (torch, datasets) in the same form."""
    logger = logging.getLogger("bertctl")
    if not any(isinstance(h, _AboveTheBar) for h in logger.handlers):
        logger.addHandler(_AboveTheBar(logging.WARNING))
    warnings.showwarning = _python_warning


def _python_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                    file: Any = None, line: str | None = None) -> None:
    """`warnings.showwarning` for the CLI: a library's warning (torch's DataLoader on more workers than cores) as
    one `bertctl: warning: ...` line, not Python's file, line number and source line, which lack `bertctl: `."""
    logging.getLogger("bertctl").warning("warning: %s", " ".join(str(message).split()))


Command = TypeVar("Command", bound=Callable[..., Any])


def shared_options(template: Callable[..., None]) -> Callable[[Command], Command]:
    """Gives a command the options of `template` (a function whose parameters are those options), so options that
    several commands take are written once. --help lists them in the template's order, after the command's
    leading parameters; a parameter of the command's own named as a template one replaces it there (its own
    default and help), and the command's parameters after it follow it (squad's window options come after
    --max-seq-length). The command takes the template's options as `**shared`, which `command_config` spreads."""
    def decorate(command: Command) -> Command:
        merged = list(inspect.signature(template, eval_str=True).parameters.values())
        at = 0  # where the command's next parameter goes
        for param in inspect.signature(command, eval_str=True).parameters.values():
            if param.kind is param.VAR_KEYWORD:
                continue
            names = [p.name for p in merged]
            if param.name in names:
                at = names.index(param.name)
                merged[at] = param
            else:
                merged.insert(at, param)
            at += 1
        command.__signature__ = inspect.Signature(merged, return_annotation=None)  # what typer reads
        return command

    return decorate


# a results table's width off a terminal: what it holds sets its width, never COLUMNS (cells cut with "…")
_UNCUT_WIDTH = 1_000_000


def table_console() -> Any:
    """rich's Console for a results table (`fill`, `info`): on a terminal rich fits the table to its width; on a
    file or pipe (`> out.txt`) no width limit, so no cell is cut however narrow the COLUMNS the shell exported."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=_UNCUT_WIDTH)


def command_config(cls: type, flags: dict[str, Any], defaults: dict[str, Any] | None = None) -> Any:
    """A command's config dataclass from its flags (a command's `locals()`, its `**shared` options spread) over
    its `--config` file over `defaults` (a task's own, where they differ from the dataclass's); INPUTS arguments
    become a tuple. Importing the config modules here keeps `bertctl --help` fast."""
    from bertctl.config_files import build_config, read_config_file

    flags = dict(flags)
    flags.update(flags.pop("shared", None) or {})
    config = flags.pop("config")
    if "inputs" in flags:
        flags["inputs"] = tuple(flags["inputs"]) if flags["inputs"] else None
    return build_config(cls, {**(defaults or {}), **(read_config_file(config) if config else {})}, config_file=config,
                        **flags)

