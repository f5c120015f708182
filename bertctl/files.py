"""Atomic writes: a file or folder appears complete or not at all, with the user's usual permissions.

Every output of bertctl (model folders, tokenizers, corpora, run files, submission files) goes through
here: write beside the target under a hidden temporary name, then rename. Commands check their outputs with
`check_out` / `check_new_out` before any work, so a long run never fails at the end for want of a place to
save; `make_folder` still turns a path blocked by a file into one line naming the flag if something slips
through.
"""

from __future__ import annotations

import errno
import fnmatch
import hashlib
import json
import math
import os
import re
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from bertctl.errors import BertctlError, UsageError, quoted


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_above(path: Path | str) -> Path | None:
    """The nearest existing parent of `path` when it is a file: nothing can be created below it."""
    for parent in Path(path).parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


def user_path(path: Path | str, flag: str = "path") -> Path:
    """A path the user gave, `~` expanded: a quoted "~/x", `--out=~/x` (the shell expands only a word that
    starts with ~) and a Python argument all arrive as written. None, a number or "" (the working folder, by
    accident) from a Python caller is one line, not a TypeError."""
    if not isinstance(path, (str, os.PathLike)) or not str(path).strip():
        raise UsageError(f"{flag}: give a file or folder name, got {quoted(path)}")
    return Path(path).expanduser()


_COMPRESSED = (".gz", ".bz2", ".xz", ".zst", ".zip")  # names of files whose bytes are no text until decompressed


def compressed(path: Path, where: str, reader: str) -> UsageError | None:
    """`WHERE is compressed; decompress it first` for a file named as compressed, which a reader of plain text
    could not decode: "not UTF-8" would send the user to convert its encoding. None for any other name."""
    if path.suffix.lower() not in _COMPRESSED:
        return None
    return UsageError(f"{where} is compressed; decompress it first ({reader} reads plain UTF-8 text)")


# What to do when writing fails, by errno: every failure to write is one line naming the output and this.
_WRITE_HINTS = {
    errno.ENOSPC: "free some disk space or choose another path",
    errno.EDQUOT: "free some space under your disk quota or choose another path",
    errno.EFBIG: "a file-size limit (ulimit -f) stopped it; raise the limit or choose another path",
    errno.EACCES: "you may not write there; choose another path",
    errno.EPERM: "you may not write there; choose another path",
    errno.EROFS: "that file system is read-only; choose another path",
    errno.ENAMETOOLONG: "choose a shorter name",
    errno.ELOOP: "a symbolic link there points back at itself; fix it or choose another path",
}
NAME_ROOM = 40  # bytes a temp name beside OUT adds to OUT's name (`.OUT.partial-PID-MACHIN-xxxxxxxx`)


def os_error(exc: BaseException) -> OSError | None:
    """The OSError behind `exc`: itself, or the one a writer wrapped (safetensors' "I/O error: ... (os error
    27)"); None for anything else."""
    if isinstance(exc, OSError):
        return exc
    if isinstance(exc, WriteFailed):
        return exc.os_error
    found = re.search(r"\(os error (\d+)\)", str(exc)) if type(exc).__name__ == "SafetensorError" else None
    return OSError(int(found.group(1)), os.strerror(int(found.group(1)))) if found else None


def write_hint(exc: OSError) -> str:
    """The reason (the errno's own words, not a writer's wrapping) and what to do, for a failed write."""
    reason = os.strerror(exc.errno) if exc.errno else (exc.strerror or str(exc))
    return f"{reason}; {_WRITE_HINTS.get(exc.errno, 'choose another path')}"


class WriteFailed(BertctlError):
    """Writing an output failed (disk full, a size limit, no permission): one line naming the output, and `part`,
    the file or folder of it (or of its work folder) that failed, where that is not the output itself."""

    def __init__(self, target: Path | str, exc: OSError, part: Path | str | None = None) -> None:
        where = f" (writing {part})" if part is not None else ""
        super().__init__(f"cannot write {target}: {write_hint(exc)}{where}")
        self.target, self.os_error, self.part = target, exc, part

    def __reduce__(self) -> tuple[Any, ...]:  # from a worker process: its arguments, not its message
        return (type(self), (self.target, OSError(self.os_error.errno, self.os_error.strerror), self.part))


class OutAppeared(BertctlError):
    """OUT was not there when the command checked it, but was when the command came to put its own in place
    (another program made it meanwhile) and --overwrite was not given: it is left as it is, the new one dropped."""

    def __init__(self, target: Path | str, remedy: str = "pass --overwrite to replace it") -> None:
        super().__init__(f"--out {target} appeared while this command ran (another program made it) and was left "
                         f"as it is; choose another --out, or {remedy}")
        self.target = target


# errnos a rename onto an existing target gives when it may not replace it (a folder onto a non-empty folder or onto
# a file or link): the rename itself refused, so the target is as the other program left it
_TARGET_TAKEN = (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR)


# errnos only a write gives: a plain OSError with one of them, naming a file of OUT's, is a failure to write OUT
_WRITE_ONLY = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)


@contextmanager
def failures_named_by(out: Path | str) -> Iterator[None]:
    """A write that fails anywhere in OUT's keeping (inside OUT, in its work folder `OUT.partial/` or
    `.OUT.work/`) is said as the output the user named, `cannot write OUT: REASON; ... (writing PART)`: the
    internal path alone (`OUT.partial/shards/...`, `.OUT.work/seed-42/step-000005`) named no flag the user gave."""
    try:
        yield
    except Exception as exc:
        part = _failed_part(exc)
        if part is None or not _in_keeping_of(part, out) or out_location(part) == out_location(out):
            raise
        raise WriteFailed(out, os_error(exc), part) from None


def _failed_part(exc: Exception) -> Path | str | None:
    """The path a failed write names: a WriteFailed's own, or the file of a plain OSError only writes give."""
    if isinstance(exc, WriteFailed):
        return exc.part if exc.part is not None else exc.target
    if isinstance(exc, OSError) and exc.errno in _WRITE_ONLY and exc.filename:
        return os.fsdecode(exc.filename)
    return None


def _in_keeping_of(path: Path | str, out: Path | str) -> bool:
    """Whether `path` is OUT or inside it, or is or lies inside a name bertctl keeps beside it for OUT (its work
    folder `OUT.partial/` or `.OUT.work/`, temp and moved-aside names `.OUT.tmp-*`, `.OUT.old-*`)."""
    at, home = out_location(path), out_location(out)
    if not at.is_relative_to(home.parent) or at == home.parent:
        return False
    first = at.relative_to(home.parent).parts[0]
    return first == home.name or first.startswith((f"{home.name}.", f".{home.name}."))


def _named(path: Path) -> Path:
    """`path` with a last part that names the folder: `.`, `/` and `x/..` resolved (only the file system knows
    which folder they mean); temp names beside OUT and the final rename need that name."""
    return path.resolve() if path.name in ("", "..") else path


def out_location(path: Path | str) -> Path:
    """OUT as an absolute path, the way a rename onto it sees it: `.`, `..` and links above it worked out, a link
    as OUT itself kept (it is replaced as a link, never its target)."""
    path = _named(user_path(path))
    return path.parent.resolve() / path.name


def check_out(path: Path | str, folder: bool = True) -> Path:
    """Refuse an output that can never be written, before any work: one below a file, a file where a folder
    goes, a folder where a file goes. Whether it may already exist is the command's call (--overwrite,
    --resume). Returns the path to write, `~` expanded, and resolved when its last part is no name (`.`, `..`),
    which temp names beside it and the final rename need."""
    try:
        path = _named(user_path(path, "--out"))
        path.resolve()  # a link loop raises here, not deep inside the command
        blocker = file_above(path)
        if blocker is not None:
            raise UsageError(f"--out {path}: its parent {blocker} is a file, not a folder; choose another path")
        if folder and path.exists() and not path.is_dir():
            raise UsageError(f"--out {path} is a file, not a folder; choose another path")
        if not folder and path.is_dir():
            raise UsageError(f"--out {path} is a folder, not a file; give a file name")
        _check_writable(path)
    except RuntimeError:  # Python < 3.13: a link loop
        raise UsageError(f"--out {path}: {write_hint(OSError(errno.ELOOP, ''))}") from None
    except OSError as exc:
        raise UsageError(f"--out {path}: {write_hint(exc)}") from None
    return path


def _check_writable(path: Path) -> None:
    """A new OUT is made in its nearest existing folder, with temp names longer than its own beside it: refuse
    a folder the user may not write in (read-only, another's) and a name the file system cannot hold with
    those temp names, before any work, rather than when the work is done."""
    if path.exists() or path.is_symlink():
        return
    where = next((parent for parent in path.parents if parent.exists()), None)
    if where is None:
        return
    room = os.pathconf(where, "PC_NAME_MAX") if hasattr(os, "pathconf") else 255
    *above, last = (len(os.fsencode(part)) for part in path.relative_to(where).parts)
    if above and max(above) > room:  # folders made above OUT need room for their own names only
        raise UsageError(f"--out {path}: a folder name of {max(above)} bytes is longer than this file system allows "
                         f"({room}); choose a shorter name")
    if last + NAME_ROOM > room:
        raise UsageError(f"--out {path}: a name of {last} bytes leaves no room for the temporary names "
                         f"beside it (this file system allows {room}); choose a shorter name")
    try:  # the file system's own answer (permissions, ACLs, read-only mounts), not a guess from mode bits
        os.rmdir(tempfile.mkdtemp(prefix=".bertctl-probe-", dir=where))
    except OSError as exc:
        raise UsageError(f"--out {path}: cannot create it in {where}: {write_hint(exc)}") from None


def named_with_suffix(path: Path | str, suffix: str) -> Path:
    """A predictions file's name: OUT as given, or with its format's `suffix` when it has none (`--out preds`
    writes preds.csv), in every `predict` command that writes one file."""
    path = Path(path)
    return path if path.suffix else path.with_name(path.name + suffix)


def new_file_named(out: Path | str, suffix: str, overwrite: bool) -> Path:
    """`check_new_out` for a predictions file named by `named_with_suffix`; a folder OUT is refused as itself
    rather than taken for a name (FOLDER.csv beside it)."""
    check_out(out, folder=False)
    return check_new_out(named_with_suffix(out, suffix), overwrite=overwrite, folder=False)


def check_new_out(path: Path | str, overwrite: bool = False, folder: bool = True) -> Path:
    """`check_out`, and an existing output is refused unless --overwrite (every command replaces only
    what the user said it may), and never the working folder or one holding it, which a command cannot
    move aside while it runs in it."""
    given, path = path, check_out(path, folder)
    here, target = Path.cwd().resolve(), out_location(path)
    if here.is_relative_to(target):
        where = "is the working folder" if here == target else f"holds the working folder {here}"
        raise UsageError(f"--out {given} {where}, which a command cannot replace; give a new folder's name")
    if path.exists() and not overwrite:
        raise UsageError(f"--out {path} already exists; pass --overwrite to replace it")
    return path


def refuse_inputs_inside(out: Path | str, inputs: Iterable[Path | str | None],
                         read_whole: Iterable[Path | str] = ()) -> None:
    """An input that is OUT or inside it would be deleted when --overwrite replaces OUT; names that are no path
    here (a hub id, a dataset name) are not inputs on this disk. OUT inside an input folder that is `read_whole`
    (every file in it is input, hidden ones aside) would be read as input by the next run of the same command."""
    out_at = out_location(out)
    for item in inputs:
        if item is None or not (given := user_path(item)).exists():
            continue
        item_at = given.resolve()
        if item_at.is_relative_to(out_at):
            where = "is" if item_at == out_at else "holds"
            raise UsageError(f"--out {out} {where} the input {item}, which replacing it would delete; "
                             "choose a path outside it")
    for item in read_whole:
        folder = user_path(item)
        if (folder.is_dir() and out_at.is_relative_to(folder.resolve())
                and not any(part.startswith(".") for part in out_at.relative_to(folder.resolve()).parts)):
            raise UsageError(f"--out {out} is inside the input folder {item}, whose files are all read, so the "
                             "next run would read this output as input; choose a path outside it")


def file_sha256(path: Path | str) -> str:
    """The sha256 of a file, read a MiB at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def make_folder(folder: Path | str) -> Path:
    """mkdir -p with a one-line error naming --out (every output's flag) and the file in the way, not
    `[Errno 17] File exists`."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        dangling = next((path for path in (folder, *folder.parents) if path.is_symlink() and not path.exists()),
                        None)
        blocker = folder if folder.exists() else file_above(folder)
        reason = (f"{dangling} is a link to {os.readlink(dangling)}, which does not exist" if dangling is not None
                  else f"{blocker} is a file, not a folder" if blocker is not None else exc.strerror)
        raise UsageError(f"--out: cannot create the folder {folder}: {reason}; choose another path") from None
    return folder


@contextmanager
def folder_undone_on_failure(folder: Path | str) -> Iterator[Path]:
    """`make_folder` undone when the block fails: a command that cannot start (its first record cannot be
    written, the disk already full) leaves no empty folder behind, and a folder that was there stays as it was."""
    folder = Path(folder)
    made = not folder.exists()
    with empty_folders_undone(folder):
        make_folder(folder)
        try:
            yield folder
        except BaseException:
            if made:
                shutil.rmtree(folder, ignore_errors=True)
            raise


@contextmanager
def empty_folders_undone(folder: Path | str) -> Iterator[None]:
    """The folders from `folder` up that do not exist yet are removed again if the block fails and leaves them
    empty: one another process has written in since, or that holds complete work, stays."""
    made = [path for path in (Path(folder), *Path(folder).parents) if not path.exists()]
    try:
        yield
    except BaseException:
        for path in made:
            with suppress(OSError):  # not empty
                path.rmdir()
        raise


def write_text_atomic(path: Path | str, text: str | Iterable[str], overwrite: bool = True) -> None:
    """Write through a temp file and rename, so a reader never sees half a file. `text` may come in pieces (a
    generator), written as they come: a large file need never be held whole. `overwrite`: as write_texts_atomic."""
    write_texts_atomic({Path(path): text}, overwrite)


def write_texts_atomic(texts: dict[Path, str | Iterable[str]], overwrite: bool = True) -> None:
    """Write every file through a temp file beside it, then rename them all: a failed write (a full disk) leaves
    none of them changed, so a set of outputs is never half old, half new (only kill -9 in the microseconds between
    two renames could make one). Without `overwrite` (the command checked the files were not there when it
    started), one that appeared meanwhile is left as it is and OutAppeared raised, none of them written."""
    written: list[tuple[str, Path]] = []
    try:
        for path, text in texts.items():
            make_folder(path.parent)
            remove_stale_temps(path)
            try:
                fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(path, "tmp"), dir=path.parent)
            except OSError as exc:
                raise WriteFailed(path, exc) from None
            written.append((tmp, path))
            try:
                with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
                    handle.writelines([text] if isinstance(text, str) else text)
                os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600 files
            except OSError as exc:
                raise WriteFailed(path, exc) from None
        with _signals_held():  # SIGINT/SIGTERM wait until every rename is done: no set half old, half new
            _put_files_in_place(written, overwrite)
    finally:
        for tmp, _ in written:
            Path(tmp).unlink(missing_ok=True)


def _put_files_in_place(written: list[tuple[str, Path]], overwrite: bool) -> None:
    """Rename each temp file onto its path; without `overwrite`, only onto a path still free, and when one is
    taken or cannot be written the ones already put in place (this call's own new files) are taken back."""
    if not overwrite:  # a link to nothing is no output to check_new_out: replaced, as it always was
        taken = next((path for _, path in written if path.exists()), None)
        if taken is not None:
            raise OutAppeared(taken)
    placed: list[Path] = []
    try:
        for tmp, path in written:
            try:
                if overwrite:
                    os.replace(tmp, path)
                else:
                    _link_new(tmp, path)
            except OSError as exc:
                raise WriteFailed(path, exc) from None
            placed.append(path)
    except (OutAppeared, WriteFailed):
        if not overwrite:  # with it, the placed files replaced older ones, which are gone
            for path in placed:
                path.unlink(missing_ok=True)
        raise


def _link_new(tmp: str, path: Path) -> None:
    """tmp under the name `path` only if no file has it: a hard link fails on a taken name in the one system call
    that makes it (a rename would replace it). Where hard links are not supported, a look at `path` just before
    the rename leaves a window of microseconds."""
    try:
        os.link(tmp, path)  # the temp name goes as the others do (write_texts_atomic)
    except OSError:  # the name taken, or no hard links on this file system
        if path.exists():
            raise OutAppeared(path) from None
        os.replace(tmp, path)  # free, or a link to nothing, which check_new_out took for a free name


def json_ready(data: Any) -> Any:
    """`data` with every NaN/inf float, however nested, as None: bare NaN is not JSON (jq and most parsers
    refuse it). Scores keep their NaN in memory, where they print as nan and compare as -inf."""
    if isinstance(data, dict):
        return {key: json_ready(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [json_ready(value) for value in data]
    return None if isinstance(data, float) and not math.isfinite(data) else data


def stdin_text() -> str:
    """All of stdin, decoded as UTF-8 as every input file is, whatever the locale says: a text stream under
    LC_ALL=C with PYTHONUTF8=0 or PYTHONIOENCODING=ascii refused `é` as "not valid UTF-8", and under a Latin-1
    one turned it into `Ã©` and encoded that. A stream without bytes (a test's StringIO) is taken as it is."""
    stream = sys.stdin
    if not hasattr(stream, "buffer"):
        return stream.read()
    data = stream.buffer.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise UsageError(f"stdin: line {line} is not valid UTF-8 (byte {data[exc.start]:#04x}); convert the text "
                         "to UTF-8 first") from None


def json_text(data: Any, **options: Any) -> str:
    """JSON with null for NaN/inf, and an error rather than a bare NaN for anything `json_ready` missed."""
    return json.dumps(json_ready(data), allow_nan=False, **options)


def write_json_atomic(path: Path | str, data: Any) -> None:
    write_text_atomic(path, json_text(data, indent=2) + "\n")


def refuse_empty(path: Path, remedy: str = "re-download or re-save it") -> None:
    """An empty (0-byte) input file is one line saying so, not its parser's words for no bytes (`EOFError`,
    `header too small`, `Expecting value: line 1 column 1`), which do not tell a copy cut short."""
    with suppress(OSError):
        if path.is_file() and path.stat().st_size == 0:
            raise UsageError(f"{path} is empty (0 bytes: a download or copy cut short?); {remedy}")


def read_json_object(path: Path | str, needs: Iterable[str] = ()) -> dict[str, Any]:
    """A record bertctl wrote (run.json, trainer_state.json, manifest.json, ...): a damaged or hand-edited one
    is one line naming the file, not a JSONDecodeError or a KeyError from deep inside a resume."""
    path = Path(path)
    if path.exists() and not path.is_file():
        raise UsageError(f"{path} is damaged (not a file); restore or delete it")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{path} is damaged (not JSON: {str(exc).splitlines()[0]}); restore or delete it") from exc
    missing = [key for key in needs if key not in data] if isinstance(data, dict) else []
    if not isinstance(data, dict) or missing:
        what = f"has no {', '.join(missing)}" if missing else f"holds a {type(data).__name__}, not a JSON object"
        raise UsageError(f"{path} is damaged ({what}); restore or delete it")
    return data


def _machine_tag() -> str:
    """This machine and process namespace, in six hex digits: a process id means a process only there, so a
    writer on another host of a shared file system (or in another container) is never taken for a dead one."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    return hashlib.sha256(f"{socket.gethostname()}|{namespace}".encode()).hexdigest()[:6]


MACHINE_TAG = _machine_tag()


def _temp_prefix(target: Path, tag: str) -> str:
    """Every hidden name beside `target` names the process (and machine) that made it, so a leftover of one that
    was killed can be told from the work of one still writing."""
    return f".{target.name}.{tag}-{os.getpid()}-{MACHINE_TAG}-"


# what _temp_prefix makes, then mkdtemp's or secrets' random part
_TEMP_NAME = re.compile(r"\.(?P<target>.+)\.(?:tmp|partial|old)-(?P<pid>\d+)-(?P<machine>[0-9a-f]{6})-[a-z0-9_]+")


def remove_stale_temps(target: Path | str) -> None:
    """Remove what killed writers of `target` left beside it (kill -9 or a power cut while writing it or
    moving the old one aside): hidden temp and moved-aside folders or files, never read again and as large as
    the output. Only those of processes of this machine that are gone: a writer still at work keeps its own."""
    target = Path(target)
    _remove_stale(target.parent, lambda name: name == target.name)


def remove_stale_temps_of(folder: Path | str, pattern: str) -> None:
    """`remove_stale_temps` for every target in `folder` whose name matches the glob `pattern` (`step-*`)."""
    _remove_stale(Path(folder), lambda name: fnmatch.fnmatchcase(name, pattern))


def _remove_stale(folder: Path, owned: Callable[[str], bool]) -> None:
    try:
        entries = list(os.scandir(folder))
    except OSError:  # no folder yet, or one we may not list: nothing of ours to clean there
        return
    for entry in entries:
        found = _TEMP_NAME.fullmatch(entry.name)
        if found and owned(found["target"]) and found["machine"] == MACHINE_TAG and _process_gone(int(found["pid"])):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                with suppress(OSError):
                    os.unlink(entry.path)


def _process_gone(pid: int) -> bool:
    """Whether no process `pid` runs on this machine (signal 0 only asks). Where that cannot be asked, and for
    a process of another user, the answer is no: a leftover kept costs disk, one removed too soon a write."""
    if os.name != "posix" or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def temp_folder_beside(target: Path | str, tag: str = "tmp") -> Path:
    """A hidden, empty folder next to `target` (same file system, so the final rename is atomic); stale ones
    of earlier, killed writers of `target` go first, freeing their space."""
    target = Path(target)
    make_folder(target.parent)
    remove_stale_temps(target)
    try:
        return Path(tempfile.mkdtemp(prefix=_temp_prefix(target, tag), dir=target.parent))
    except OSError as exc:
        raise WriteFailed(target, exc) from None


def replace_folder(tmp: Path | str, target: Path | str, retire: Path | None = None, overwrite: bool = True) -> None:
    """Rename the finished tmp folder onto target; an existing target is moved aside first, removed after.

    Everything inside gets the usual permissions first: mkdtemp makes 0700 folders, and some writers
    (safetensors, mkstemp) make 0600 files. The renames are one step: SIGINT/SIGTERM wait until all are done,
    and when one fails everything is put back, so target is never missing. `retire`: the work folder target was
    built in (`tmp` may be inside it), of no more use once target is in place: moved aside first, under a hidden
    name of a writer of target, and removed after as the old target is. So a kill -9 at any moment never leaves it
    under its own name beside a complete target (the next run would take it for an unfinished one); what a kill
    leaves is a dead writer's, which the next writer of target removes (killed between the renames, before
    target was in place, the run's finished work goes with it: the next run starts over). Without `overwrite` (the
    command checked target was not there when it started), a target that appeared meanwhile is left as it is, and
    so are tmp and `retire`: OutAppeared. The rename itself refuses a folder or file there (only an empty folder
    made in the microseconds after the last look would be replaced). A link to nothing is replaced either way:
    check_new_out takes its name for a free one.
    """
    tmp, target = Path(tmp), Path(target)
    remove_stale_temps(target)
    mask = _umask()
    old = None
    retired = _aside(target) if retire is not None and os.path.lexists(retire) else None
    moved = retired / tmp.relative_to(retire) if retired is not None and tmp.is_relative_to(retire) else tmp
    try:
        for folder, _, names in os.walk(tmp):
            os.chmod(folder, 0o777 & ~mask)
            for name in names:
                os.chmod(os.path.join(folder, name), 0o666 & ~mask)
        with _signals_held():  # a signal held here is raised as the block ends, and what was moved aside still goes
            try:
                if not overwrite and target.exists():  # a link to nothing was no output when checked
                    raise OutAppeared(target)
                if retired is not None:
                    os.replace(retire, retired)
                if target.is_symlink() or (overwrite and target.exists()):  # a folder cannot be renamed onto a link
                    old = _aside(target)
                    os.replace(target, old)
                os.replace(moved, target)
            except BaseException:  # also a KeyboardInterrupt whose signal came before the handlers were swapped
                if os.path.lexists(moved) or os.path.lexists(tmp):  # target is not in place: all back as it was
                    old, retired = _put_back(old, target), _put_back(retired, retire)
                raise
    except OSError as exc:
        if not overwrite and exc.errno in _TARGET_TAKEN and os.path.lexists(target):
            raise OutAppeared(target) from None
        raise WriteFailed(target, exc) from None
    finally:
        for aside in (old, retired):
            if aside is not None and aside.is_dir() and not aside.is_symlink():
                shutil.rmtree(aside, ignore_errors=True)
            elif aside is not None:
                aside.unlink(missing_ok=True)


def _put_back(aside: Path | None, home: Path | None) -> Path | None:
    """Rename what a failed replace moved aside back home (when it went and home is free); returns what is still
    aside, to be removed."""
    if aside is not None and home is not None and os.path.lexists(aside) and not os.path.lexists(home):
        os.replace(aside, home)
        return None
    return aside


def _aside(target: Path) -> Path:
    """A hidden name beside target that no other save uses and that names this process: a leftover of one killed
    while removing what it moved there must not block this one, and is the next writer's to remove."""
    return target.with_name(f"{_temp_prefix(target, 'old')}{secrets.token_hex(4)}")


@contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait until the block ends, then reach their own handlers. The Python handlers are
    swapped, not the thread's signal mask: torch's worker threads leave the signals unblocked, the kernel hands
    them one, and Python runs the handler in the main thread all the same."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, _frame: caught.append(signum))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        for sig in dict.fromkeys(caught):
            signal.raise_signal(sig)


@contextmanager
def building_folder(target: Path | str, tag: str = "tmp", retire: Path | None = None,
                    overwrite: bool = True) -> Iterator[Path]:
    """A temp folder beside `target` to fill; it becomes `target` when the block ends, and is removed if the
    block raises, so `target` is only ever absent, the old folder, or the complete new one. `retire` and
    `overwrite`: as for replace_folder."""
    tmp = temp_folder_beside(target, tag)
    try:
        try:
            yield tmp
        except Exception as exc:  # a write into tmp failed: name the output, not the temp folder
            failed = os_error(exc)
            if failed is None or not _written_in(failed, tmp):
                raise
            raise WriteFailed(target, failed) from None
        replace_folder(tmp, target, retire, overwrite)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _written_in(exc: OSError, tmp: Path) -> bool:
    """Whether a failure is the temp folder's (a file it names is in it, or it names none, as a full disk's
    write does), not some input's read while filling it."""
    if exc.filename is None:
        return True
    return any(Path(os.fsdecode(name)).is_relative_to(tmp) for name in (exc.filename, exc.filename2) if name)
