"""Small helpers shared by every module: atomic file and directory writes; reading a text file that may be
gzipped; the C heap (glibc)."""

from __future__ import annotations

import argparse
import contextlib
import copy
import ctypes
import ctypes.util
import functools
import glob
import gzip
import io
import json
import os
import re
import shutil
import socket
import stat
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm as auto_tqdm
from tqdm.std import tqdm as std_tqdm

from spanbert.checkpoint_files import is_model_file
from spanbert.errors import DataError, NoSpaceError, SpanBertError, decode_utf8, out_of_space
from spanbert.folders import (
    KINDS,
    MANIFEST,
    carry_claim,
    fsync_dir,
    holds,
    is_bookkeeping,
    is_debris,
    make_folders,
    name_output,
    read_manifest,
    record,
)

_PARSED: dict[tuple[str, str, int, int], Any] = {}  # `parsed_once`'s files, by (reader, path, mtime, size)


def parsed_once(path: Path, parse: Callable[[Path], Any]) -> Any:
    """``parse(path)``, once per version of the file: a command asks for a model's config.json or its
    --config YAML from several places (the family's habits, the loader, the tokenizer, the parser's
    defaults, the checks), so the result is kept by (reader, path, mtime, size) and each caller gets its
    own copy (callers may change theirs). Errors are raised every time, not kept; a path that cannot be
    stat'ed is left to ``parse`` to name."""
    try:
        st = path.stat()
    except OSError:
        return parse(path)
    key = (getattr(parse, "__qualname__", repr(parse)), str(path), st.st_mtime_ns, st.st_size)
    if key not in _PARSED:
        if len(_PARSED) >= 64:
            _PARSED.clear()
        _PARSED[key] = parse(path)
    return copy.deepcopy(_PARSED[key])


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", **open_kwargs) -> Iterator:
    """Open a temporary file beside ``path``; on success fsync and rename it over ``path``. The one writer of
    every single-file output (issue 58.2): what it may replace is a regular file or a new path; a symbolic
    link to one keeps the link and replaces the file it reaches; anything else that can be written (a named
    pipe, a character device such as /dev/null or a terminal, /dev/stdout, a link to /proc/self/fd/1) is
    written through, as tee does (`writes_through`), once the whole text is ready.

    A crash or an exception leaves the previous file (or no file), never a half-written one; a full disk
    or quota is one `NoSpaceError` naming ``path`` (`no_space_as_error`).
    """
    path = Path(path)
    if writes_through(path):
        with _write_through(path, mode, **open_kwargs) as f:
            yield f
        return
    if path.is_symlink():  # a link to a file (or to a name not yet used): the file is replaced, the link kept
        path = Path(os.path.realpath(path))
    with _created_folders(path.parent), no_space_as_error(path):
        tmp = temporary_file(path)
        try:
            with open(tmp, mode, **open_kwargs) as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            publish_file(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise


def _own_fd(path: str | os.PathLike) -> int | None:
    """The descriptor of this process's a path names (/dev/stdout: 1, /dev/fd/2, /proc/self/fd/1, a link to
    one), or None. Written through it, the output goes where the shell connected it, at its offset (reopened,
    a file the shell opened with > would be written from its start again and then overwritten). The links are
    followed one by one: the last one (/proc/self/fd/1 -> the file) would hide where it came from."""
    p = os.path.abspath(path)
    for _ in range(40):  # the kernel's own limit on a chain of links
        std = {"/dev/stdout": 1, "/dev/stderr": 2, "/dev/stdin": 0}.get(p)
        if std is not None:
            return std
        m = re.fullmatch(r"/(?:proc/(self|\d+)|dev)/fd/(\d+)", p)
        if m and m.group(1) in (None, "self", str(os.getpid())):
            return int(m.group(2))
        if not os.path.islink(p):
            return None
        p = os.path.normpath(os.path.join(os.path.dirname(p), os.readlink(p)))
    return None


def writes_through(path: str | os.PathLike) -> bool:
    """Whether an output at ``path`` is written through rather than replaced: a named pipe, a character device
    (``/dev/null``, a terminal), one of this process's open files (``/dev/stdout``), or a link to one of them."""
    path = Path(path)
    try:
        st = os.stat(path)  # follows links
    except OSError:
        return False
    return stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode) or _own_fd(path) is not None


def not_writable_through(path: str | os.PathLike) -> str | None:
    """What ``path`` is when it exists, is not a regular file, a folder or something `writes_through` writes
    (a block device, a socket), or None: an output there is refused."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    kinds = {stat.S_ISBLK: "a block device", stat.S_ISSOCK: "a socket"}
    return next((what for test, what in kinds.items() if test(st.st_mode)), None)


@contextlib.contextmanager
def _write_through(path: Path, mode: str, **open_kwargs: Any) -> Iterator[Any]:
    """`atomic_write` onto what is written through: the text is gathered first (an error while it is made
    writes nothing), then written in one go: through this process's own descriptor when ``path`` names one
    (`_own_fd`: Python's buffered stdout is flushed first, so the lines keep their order), else opened (a
    pipe, a device)."""
    binary = "b" in mode
    with tempfile.TemporaryFile("w+b") as buffer:
        stream = buffer if binary else io.TextIOWrapper(buffer, **{"encoding": "utf-8", **open_kwargs})
        yield stream
        stream.flush()
        buffer.seek(0)
        fd = _own_fd(path)
        if fd is None:
            with open(path, "wb") as out:
                shutil.copyfileobj(buffer, out)
        else:
            for s in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    s.flush()
            while chunk := buffer.read(1 << 20):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]
            if fd == 1 and _MESSAGES_LEAVE_STDOUT:  # stdout holds the output: what the command says next goes to stderr
                sys.stdout = sys.stderr
        if not binary:
            stream.detach()


_MESSAGES_LEAVE_STDOUT: list[bool] = []


@contextlib.contextmanager
def messages_leave_a_taken_stdout() -> Iterator[None]:
    """Within it (a command, a task run from Python): once an output is written through this process's stdout
    (``--output /dev/stdout``, a link to ``/proc/self/fd/1``: `atomic_write`), what the command prints after
    goes to stderr, so that stdout holds the output alone (the audit of issue 58 found the "wrote ..." line
    and the scores after the predictions); stdout is put back at the end."""
    saved = sys.stdout
    _MESSAGES_LEAVE_STDOUT.append(True)
    try:
        yield
    finally:
        _MESSAGES_LEAVE_STDOUT.pop()
        sys.stdout = saved


def write_json(path: str | os.PathLike, data: Any, *, sort_keys: bool = False, ensure_ascii: bool = True) -> None:
    """``data`` as JSON indented by 2, then a newline, written atomically (`atomic_write`) by this process;
    under torchrun a task writes through `spanbert.tasks.ranks.write_json_once` (rank 0 only)."""
    with atomic_write(path, encoding="utf-8") as f:
        json.dump(data, f, indent=2, sort_keys=sort_keys, ensure_ascii=ensure_ascii)
        f.write("\n")


def read_text(path: str | os.PathLike, expected: str = "UTF-8 text") -> str:
    """A whole text file, decompressed when its name ends in ``.gz``, decoded by `decode_utf8` (a leading
    byte-order mark dropped; a byte that is not UTF-8 is named with its line and byte offset, in the
    decompressed text of a ``.gz``). Line endings are kept as the file has them. A missing, unreadable or
    damaged file is a DataError naming it."""
    path = Path(path)
    if not path.is_file():
        raise DataError(path, "file not found")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise DataError(path, f"cannot read: {e.strerror or e}") from None
    if path.suffix == ".gz":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:  # not gzip, or cut short
            raise DataError(path, f"found a damaged or truncated gzip file ({e}); expected gzip data") from None
    return decode_utf8(data, path, expected)


def open_text(path: str | os.PathLike, errors: str = "strict") -> Any:
    """A UTF-8 text file opened for reading line by line, through gzip when its name ends in ``.gz``
    (`read_text` reads a whole file); a missing file is a DataError naming it."""
    path = Path(path)
    if not path.is_file():
        raise DataError(path, "file not found")
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", errors=errors)
    return open(path, encoding="utf-8", errors=errors)


@contextlib.contextmanager
def atomic_files(folder: str | os.PathLike) -> Iterator[Callable[..., Any]]:
    """Write several files of ``folder`` as one: ``open_file(name, mode="w", **open_kwargs)`` opens a
    temporary beside ``folder/name``; when the block ends, every file is complete and each is renamed into
    place (renames need no room). When the block fails (a full disk: one `NoSpaceError` naming ``folder``)
    no file is replaced: the folder is as it was."""
    folder = Path(folder)
    staged: list[tuple[Path, Path]] = []

    @contextlib.contextmanager
    def open_file(name: str, mode: str = "w", **open_kwargs: Any) -> Iterator[Any]:
        tmp = temporary_file(folder / name)
        staged.append((tmp, folder / name))
        with open(tmp, mode, **open_kwargs) as f:
            yield f

    with _created_folders(folder), no_space_as_error(folder):
        try:
            yield open_file
            for tmp, path in staged:
                publish_file(tmp, path)
        except BaseException:
            for tmp, _ in staged:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
            raise


def temporary_file(path: str | os.PathLike) -> Path:
    """A new empty file beside ``path`` named ``.NAME.XXXX.tmp`` (unique per process; `is_debris`), for
    writers that need a path (safetensors' ``save_file``); finish with `publish_file`. ``path``'s name
    is recorded first in its folder's manifest (`spanbert.folders.record`), where there is one."""
    path = Path(path)
    make_folders(path.parent)
    record(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    return Path(tmp)


def publish_file(tmp: str | os.PathLike, path: str | os.PathLike) -> None:
    """fsync ``tmp``, give it the permissions the umask gives a new file (mkstemp and safetensors create
    0600: a model saved for a team must be readable by it), and rename it over ``path``."""
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.chmod(tmp, 0o666 & ~_umask())
    record(path)
    os.replace(tmp, path)
    fsync_dir(Path(path).parent)


@contextlib.contextmanager
def _created_folders(folder: Path) -> Iterator[None]:
    """Create ``folder`` (and missing parents, each recorded in its parent's manifest); if the block fails,
    remove those it created that are still empty, so a command that stops with an error leaves the disk
    as it found it."""
    created = make_folders(folder)
    try:
        yield
    except BaseException:
        for d in created:  # deepest first
            try:
                d.rmdir()
            except OSError:  # not empty (another writer put something there) or gone: leave it
                break
        raise


# ---------------------------------------------------------------------------------------------
# A full disk


@contextlib.contextmanager
def no_space_as_error(path: str | os.PathLike) -> Iterator[None]:
    """Turn a write inside the block that fails for space or quota into one `NoSpaceError` naming ``path``
    (the destination: a temporary's name says nothing to the user). The block must leave ``path`` as it
    was on failure (the atomic writers do); an inner `NoSpaceError` is named again by the outermost
    destination."""
    path = Path(path)
    try:
        yield
    except NoSpaceError as e:
        raise NoSpaceError(path, e.reason) from None
    except SpanBertError:
        raise
    except Exception as e:  # OSError, torch's RuntimeError, safetensors' SafetensorError (no OSError)
        where = next((p for p in path.parents if p.is_dir()), None)
        reason = out_of_space(e, where)
        if reason is None:
            raise
        raise NoSpaceError(path, reason) from None


# ---------------------------------------------------------------------------------------------
# The output contract

INPUT_OPTIONS = (
    "model", "tokenizer", "config", "corpus", "init_from", "data", "data_dir", "train", "dev", "test", "train_file",
    "validation_file", "predictions", "gold", "context_file", "drop_ids", "run", "study",
)  # fmt: skip
"""The options (argparse dests) that name a path a command reads: a corpus, a data file or folder, a model
or tokenizer folder, a YAML file. `input_paths` collects them for the check of an output against the
inputs (`check_output`)."""


def input_paths(values: Any, names: Iterable[str] = INPUT_OPTIONS) -> list[tuple[str, str]]:
    """(``--option``, path) for every input option set in ``values`` (an argparse namespace, a dataclass
    or a dict); a list value (``--corpus A B``) gives one pair per path."""
    get = values.get if isinstance(values, dict) else (lambda k, d=None: getattr(values, k, d))
    out = []
    for name in names:
        value = get(name, None)
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(v, (str, os.PathLike)) and str(v):
                out.append((f"--{name}", str(v)))
    return out


Input = tuple[str, str | os.PathLike] | tuple[str, str | os.PathLike, bool]
"""What a command reads: (option, path), or (what, path, read by name) (`check_apart`)."""

READ_BY_NAME = ("--model", "--tokenizer", "--init_from")
"""Inputs that are folders the command reads file by file, by name (a model, a tokenizer): an output beside
their files (a predictions file in the model's run folder) is fine, an output named like one of them is
not. Every other input folder (a corpus, a GLUE task folder, a LitBank folder) is read whole: nothing may
be written inside it."""


def _within(inner: str, outer: str) -> bool:
    return inner != outer and inner.startswith(outer.rstrip(os.sep) + os.sep)


def check_apart(path: str | os.PathLike, inputs: Iterable[Input]) -> None:
    """Refuse an output ``path`` that is an input, holds one, or lies inside one: the command would overwrite
    what it reads, replace it with its own files, or read back what it writes (a vocabulary inside the corpus
    folder is read as a document). ``inputs`` are (option, path) pairs, or (what, path, by_name): a folder read
    by name (`READ_BY_NAME`, a model, a checkpoint) only refuses an output in it named like a model's file
    (`spanbert.checkpoint_files.is_model_file`). Symbolic links and hard links count as the file they reach.
    Creates nothing."""
    out = os.path.realpath(path)
    for item in inputs:
        option, given = item[0], item[1]
        by_name = item[2] if len(item) > 2 else option in READ_BY_NAME
        if given is None or not str(given):
            continue
        src = os.path.realpath(given)
        named = f"{given} ({option})" if option else str(given)
        same = out == src
        if not same and os.path.exists(out) and os.path.exists(src):
            with contextlib.suppress(OSError):
                same = os.path.samefile(out, src)
        if same:
            raise SpanBertError(
                f"{path}: found the output is the input {named}, expected an output apart from every input "
                f"(writing it would replace what the command reads; nothing was written)"
            )
        if _within(out, src) and not by_name:
            raise SpanBertError(
                f"{path}: found the output inside the input folder {named}, expected an output outside every "
                f"input (what it writes there would be read back as input; nothing was written)"
            )
        if _within(out, src) and os.path.dirname(out) == src and is_model_file(os.path.basename(out)):
            raise SpanBertError(
                f"{path}: found the output over a file of the model folder {named}, expected an output apart "
                f"from the files the command reads (a predictions file beside them is fine; nothing was written)"
            )
        if _within(src, out):
            raise SpanBertError(
                f"{path}: found the input {named} inside the output folder, expected an output folder that "
                f"holds no input (the command replaces what it writes there; nothing was written)"
            )


def check_output(
    path: str | os.PathLike,
    folder: bool,
    ours: Callable[[Path], bool] | None = None,
    inputs: Iterable[Input] = (),
    owner: str | None = None,
    writes: Iterable[str] = (),
    whole: bool = False,
) -> Path:
    """The output contract, checked before any work: ``path`` (a folder if ``folder``, else a file) can
    be written, and writing it loses nothing of the user's. Refused, each with one `SpanBertError`:

    - an output that is one of ``inputs`` ((option, path) pairs, `input_paths`), lies inside one (a model
      folder, read by name: over one of its files), or holds one (`check_apart`);
    - a file where a folder is expected (at ``path`` or at a parent) or a folder where a file is;
    - for a folder the command owns as a whole (``owner``: a kind of `spanbert.folders.KINDS`), a folder
      that holds anything without a spanbert manifest of that kind (a user's folder, another command's
      output), or that has one but holds, under a name in ``writes`` (what the command writes at the top),
      an entry the manifest does not list. A folder of ours that also holds the user's notes is fine: they
      stay; unless the command replaces the folder ``whole`` (`spanbert preprocess`), which would lose
      them: then any entry the manifest does not list is refused. Without ``owner``, ``ours(path)`` says
      whether a folder without a manifest is an earlier output (library calls; `checkpoints.save_folder`);
    - a location where nothing can be created.

    The manifest, the lock and temporaries (`spanbert.folders.is_bookkeeping`) hold nothing. Returns ``path``."""
    path = Path(path)
    check_apart(path, inputs)
    existing = next((p for p in path.parents if os.path.lexists(p)), Path("."))
    if not existing.is_dir():
        raise SpanBertError(f"{path}: found a file at {existing}, expected a folder there to hold the output")
    if not folder and (os.path.lexists(path) or path.is_symlink()):
        odd = not_writable_through(path)
        if odd:
            raise SpanBertError(
                f"{path}: found {odd}, expected a file name for the output (a regular file, a named pipe or a "
                f"character device such as /dev/null or /dev/stdout, which it is written through)"
            )
        if writes_through(path):  # written through, never replaced: what counts is that it can be written
            if not os.access(path, os.W_OK):
                raise SpanBertError(f"{path}: found it not writable (no permission), expected a writable output")
            return path
        if path.is_symlink():  # a link to a file (or a name not yet used): what it reaches is what is written
            path = Path(os.path.realpath(path))
            existing = next((p for p in path.parents if os.path.lexists(p)), Path("."))
            if not existing.is_dir():
                raise SpanBertError(f"{path}: found a file at {existing}, expected a folder there to hold the output")
    if os.path.lexists(path):
        if folder and not path.is_dir():
            raise SpanBertError(f"{path}: found a file, expected a folder for the output (or a path not yet used)")
        if not folder and path.is_dir():
            raise SpanBertError(f"{path}: found a folder, expected a file name for the output")
        if folder:
            _check_owned_folder(path, ours, owner, writes, whole)
        existing = path if path.is_dir() else path.parent
    if not writable(existing):
        raise SpanBertError(
            f"{path}: found {existing} not writable (no permission, or a read-only file system); "
            "expected a writable location"
        )
    return path


def _check_owned_folder(
    path: Path, ours: Callable[[Path], bool] | None, owner: str | None, writes: Iterable[str], whole: bool
) -> None:
    names = sorted(p.name for p in path.iterdir() if not is_bookkeeping(p.name))
    if not names:
        return
    manifest = read_manifest(path)
    if manifest is None:
        if owner is None and (ours is None or ours(path)):
            return
        shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
        if owner == "run" and _looks_like_a_run(path):
            # issue 58.8: a run copied without its hidden files (`cp -r run/* copy/`): say how to resume it
            listed = json.dumps({"kind": "run", "command": "spanbert", "files": names})
            raise SpanBertError(
                f"{path}: found a training run without its {MANIFEST} (copied without its hidden files, as "
                f"`cp -r RUN/* {path}` does), expected a run folder with it; to resume it, copy the run again with "
                f"its hidden files (`cp -a RUN/. {path}/`), or, when the original is gone, write back what it lists: "
                f"echo '{listed}' > {path / MANIFEST}; then run the same command with --resume"
            )
        raise SpanBertError(
            f"{path}: found a folder holding other files ({shown}), expected an empty folder or an earlier "
            f"output of this command (a folder spanbert wrote, with its {MANIFEST}); choose another output "
            f"folder (nothing was changed)"
        )
    if owner is not None and manifest["kind"] != owner:
        raise SpanBertError(
            f"{path}: found {KINDS[manifest['kind']]}, the output of `{manifest.get('command') or 'spanbert'}`, "
            f"expected an empty folder or {KINDS[owner]} (an earlier output of this command); choose another "
            f"output folder (nothing was changed)"
        )
    clash = sorted(n for n in names if n not in manifest["files"] and (whole or n in set(writes)))
    if clash and whole:
        raise SpanBertError(
            f"{path}: found {', '.join(clash[:4])}{', ...' if len(clash) > 4 else ''} that spanbert did not write, "
            f"in a folder this command replaces whole; move {'it' if len(clash) == 1 else 'them'} away or choose "
            f"another output folder (nothing was changed)"
        )
    if clash:
        raise SpanBertError(
            f"{path}: found {', '.join(clash)} that spanbert did not write, where this command writes its own "
            f"{', '.join(clash)}; move {'it' if len(clash) == 1 else 'them'} away or choose another output folder "
            f"(nothing was changed)"
        )


def _looks_like_a_run(path: Path) -> bool:
    """Whether a folder without a manifest holds a spanbert training run: its ``latest`` pointer naming a
    ``checkpoint-N`` folder that holds a ``trainer_state.json``."""
    try:
        name = (path / "latest").read_text().strip()
    except (OSError, UnicodeDecodeError):
        return False
    return name.startswith("checkpoint-") and (path / name / "trainer_state.json").is_file()


def writable(folder: Path) -> bool:
    """Whether this process may create files in ``folder``. access(2) knows read-only mounts and what
    root may do, and creates nothing: under torchrun every rank checks its outputs and only rank 0
    writes (a probe file would be a write by every rank)."""
    return os.access(folder, os.W_OK | os.X_OK)


def user_path(value: Any, option: str) -> Any:
    """A path the user gave (``option``: how they named it, ``--output_dir`` or ``output_dir``), read the same
    way from the command line, a ``--config`` YAML and Python (issue 58.5): ``~`` and ``~user`` expanded (a
    shell expands them on the command line only, so a YAML ``output_dir: ~/run`` made a folder named ``~``);
    an empty path, or None where a path is required (``output_dir=None`` trained into ``./None``), refused.
    None stays None (an option left unset); a list is read item by item."""
    if isinstance(value, (list, tuple)):
        return type(value)(user_path(v, option) for v in value)
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise SpanBertError(f"{option}: found {value!r} ({type(value).__name__}), expected a path")
    text = os.fspath(value)
    if not text.strip():
        raise SpanBertError(f"{option}: found an empty path {text!r}, expected a file or folder name")
    return os.path.expanduser(text)


def _typed_path(value: str, what: str) -> str:
    """`user_path` inside an argparse ``type``, whose errors argparse names by the option."""
    if not str(value).strip():
        raise argparse.ArgumentTypeError(f"found an empty path {value!r}, expected a {what} name")
    return os.path.expanduser(value)


def output_file(value: str) -> str:
    """The argparse ``type`` of an option naming a file the command writes (``--output``,
    ``--write_config``): the output contract (`check_output`) is checked as the option is parsed, so
    a bad path is refused before the command reads a model or a line of data. The file is the user's
    to replace (`spanbert.folders.name_output`), also beside a model in its run folder."""
    value = _typed_path(value, "file")
    check_output(value, folder=False)
    name_output(value)
    return value


def output_folder(value: str) -> str:
    """The argparse ``type`` of an option naming a folder the command fills with files of its own
    names beside whatever is there (``predict glue --output_dir``: one submission file per split):
    only a file in the way and an unwritable location are refused, a folder of other files is normal.
    A folder a command owns as a whole (a training run, a study) is checked by that command instead,
    with its rule of what an earlier output of its own looks like (`check_output`'s ``ours``)."""
    value = _typed_path(value, "folder")
    check_output(value, folder=True)
    return value


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike, overwrite: bool = True) -> Iterator[Path]:
    """Yield a fresh temporary directory beside ``path``; on success it replaces ``path``.

    Files written into the yielded directory appear at ``path`` all at once; an interrupted run
    leaves at most a hidden ``.<name>.tmp-*`` directory, never output that looks complete; a full disk or
    quota leaves the old ``path`` and is one `NoSpaceError` naming it. ``path``'s name is recorded first in
    its folder's manifest (`spanbert.folders.record`), where there is one.
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} already exists")
    with _created_folders(path.parent), no_space_as_error(path):
        record(path)
        _remove_stale_temporaries(path)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp creates 0700
        yield from _fill_and_swap(tmp, path)


def _remove_stale_temporaries(path: Path) -> None:
    """Remove the ``.NAME.tmp-*`` folders an earlier writer of ``path`` left when it was killed (issue 58.8: a
    study killed in its shared preprocessing kept a 10 MB ``shared/.corpus.tmp-*`` after the rerun), when
    this process holds ``path``'s lock (`spanbert.folders.holds`): no other writer of it can be at work, so
    every such folder is a dead one's. An unheld target's siblings are left (`remove_debris` at a run's start)."""
    if not holds(path):
        return
    for entry in path.parent.glob(f".{glob.escape(path.name)}.tmp-*"):
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)


def _fill_and_swap(tmp: Path, path: Path) -> Iterator[Path]:
    """`atomic_dir`'s body: yield ``tmp`` to be filled, then fsync it and swap it in (or remove it)."""
    try:
        yield tmp
        for root, _, files in os.walk(tmp):
            for name in files:
                with open(os.path.join(root, name), "rb") as f:
                    os.fsync(f.fileno())
        carry_claim(path, tmp)  # a claimed folder replaced whole keeps its lock and manifest
        if path.exists() and _exchange(tmp, path):
            # one atomic swap: `path` is the complete old or the complete new folder at every instant
            fsync_dir(path.parent)
            shutil.rmtree(tmp, ignore_errors=True)
            return
        old = None
        if path.exists():
            # no atomic swap here: for an instant `path` is missing; a kill then leaves the complete
            # old folder at `.<name>.old-PID`, which `remove_debris` puts back at the next start
            old = path.parent / f".{path.name}.old-{os.getpid()}"
            os.replace(path, old)
        os.replace(tmp, path)
        fsync_dir(path.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    rc = renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    return rc == 0


def remove_debris(folder: str | os.PathLike, keep: Iterable[str] = ()) -> list[str]:
    """Remove what a killed run left in ``folder`` (not recursive): temporary files and folders, and
    ``.X.old-PID`` folders, except that an ``.X.old-*`` whose ``X`` is missing is moved back to ``X``
    (a kill inside `atomic_dir` between its two renames). Names in ``keep`` are left alone.

    Call it on one process only, at the start of a run. Returns the names removed or restored.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return []
    done = []
    keep = set(keep)
    for entry in sorted(folder.iterdir()):
        name = entry.name
        if name in keep or not is_debris(name):
            continue
        if ".old-" in name:
            original = folder / name[1:].rsplit(".old-", 1)[0]
            if not original.exists() and not os.path.lexists(original):
                os.replace(entry, original)
                done.append(name)
                continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                entry.unlink()
        done.append(name)
    if done:
        fsync_dir(folder)
    return done


def close_inherited_sockets() -> int:
    """Close the TCP sockets this process inherited (a worker forked from a rank of a torchrun job);
    returns how many. Call it first thing in a forked worker process.

    Why: a worker forked after the process group was joined holds copies of the rank's gloo
    connections. When the rank dies they stay open until the orphaned worker notices (a data-loader
    worker checks every 5 s), and the other ranks wait on them instead of stopping at once. Workers
    talk to their parent through pipes and Unix sockets, never TCP, so nothing of theirs is closed.
    """

    closed = 0
    try:
        fds = [int(x) for x in os.listdir("/proc/self/fd")]
    except OSError:  # no /proc (macOS): workers are spawned there, nothing was inherited
        return 0
    for fd in fds:
        try:
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
            sock = socket.socket(fileno=fd)
        except OSError:
            continue
        family = sock.family
        sock.detach()  # the object must not close it again
        if family in (socket.AF_INET, socket.AF_INET6):
            os.close(fd)
            closed += 1
    return closed


_libc: Any = None
_last_trim = 0.0
_malloc_configured: bool | None = None

# glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8


def _glibc() -> Any:
    """glibc's C library via ctypes, or False where the C library is not glibc (musl, macOS)."""
    global _libc
    if _libc is None:
        try:
            lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _libc = lib if hasattr(lib, "malloc_trim") and hasattr(lib, "mallopt") else False
        except OSError:
            _libc = False
    return _libc


MMAP_THRESHOLD = 8 << 20
"""`configure_malloc`'s fixed glibc mmap threshold: an allocation of at least this many bytes is mapped
afresh (and page-faulted in) each time, a smaller one reuses heap memory."""


def configure_malloc(mmap_threshold: int = MMAP_THRESHOLD, arena_max: int | None = None) -> bool:
    """Fix glibc's mmap threshold (and optionally the number of malloc arenas), once per process.
    Returns whether the settings are in force (False off glibc, or when the user set the
    ``MALLOC_*`` / ``GLIBC_TUNABLES`` environment variables, which then win).

    Why: glibc serves allocations of at least the mmap threshold with their own mmap, unmapped at
    free; smaller ones come from the heap, whose freed pages stay resident. The threshold starts at
    128 kB but rises (up to 32 MB) each time a large block is freed, so after the first steps the
    step's tensors of changing sizes (block lengths and masked-target counts vary per batch) are
    carved from the heap and resident memory wanders with what was freed last. A fixed threshold
    sends every tensor of 8 MB or more (attention scores, MLM logits, evaluation batches) to mmap,
    returned at free; the smaller ones stay in the heap, reused without page faults, and `trim_heap`
    bounds what they leave. 8 MB, not 1 MB: at 1 MB every hidden state is mapped and faulted in afresh
    at each step, 1.7x the CPU time of the quick start and 1.45x in `small` pre-training against 8 MB
    with huge pages (docs/benchmarks.md, "Memory", third pass).
    """
    global _malloc_configured
    if _malloc_configured is not None:
        return _malloc_configured
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or "glibc.malloc.mmap_threshold" in tunables:
        _malloc_configured = False  # the user's own setting wins
        return False
    lib = _glibc()
    ok = bool(lib) and lib.mallopt(_M_MMAP_THRESHOLD, int(mmap_threshold)) == 1
    if ok and "MALLOC_TRIM_THRESHOLD_" not in os.environ and "glibc.malloc.trim_threshold" not in tunables:
        # free space at the top of the heap given back at once: 2 x the mmap threshold, the ratio
        # glibc itself keeps while it adjusts both (fixing one stops the adjustment of the other)
        ok = lib.mallopt(_M_TRIM_THRESHOLD, 2 * int(mmap_threshold)) == 1
    if ok and arena_max is not None and "MALLOC_ARENA_MAX" not in os.environ:
        ok = lib.mallopt(_M_ARENA_MAX, int(arena_max)) == 1
    _malloc_configured = ok
    return ok


def trim_heap(min_interval: float = 2.0) -> bool:
    """Give the C heap's free pages back to the system (glibc `malloc_trim`; no-op elsewhere), at
    most once every ``min_interval`` seconds. Returns whether it trimmed.

    Why: CPU tensors live in glibc's heap. After large blocks are freed, glibc raises its mmap
    threshold (up to 32 MB), so later tensors of changing sizes (variable block lengths and masked
    target counts) are carved out of the heap, whose freed pages it keeps: resident memory grew
    1.0 GB -> 1.5 GB in 100 steps of the tiny model on 512-token blocks with no Python object or
    tensor leaking (docs/benchmarks.md, bench/memory.py). A trim costs ~70 ms with the page faults
    that follow it: at every step it halved the quick start's speed (~0.1 s steps), so it runs at
    most every 2 s — every step or two of a real run, a few % of the quick start.
    """
    global _last_trim

    now = time.monotonic()
    if now - _last_trim < min_interval:
        return False
    lib = _glibc()
    if not lib:
        return False
    lib.malloc_trim(0)
    _last_trim = time.monotonic()
    return True


# ---------------------------------------------------------------------------------------------
# Progress bars that suit a terminal and a log file

LINE_INTERVAL_S = 30.0
"""Seconds between two progress lines when the output is a file (a log, a pipe): often enough to see a
run move, rarely enough that a day's run is a few thousand lines."""


def progress_bar(iterable: Iterable | None = None, **tqdm_kwargs: Any) -> Any:
    """A tqdm progress bar where its output stream (``file``, default stderr) is a terminal, else one
    that writes complete lines (`LineProgress`).

    A terminal bar redraws itself with carriage returns; written to a file, those redraws glue the
    next message to the bar's text (``...lr=1.46e-03]held-out at step 400: ...``) and fill the log with
    one long line. tqdm.auto's choice (a notebook widget inside Jupyter) is kept where it is not the
    plain text bar.
    """

    stream = tqdm_kwargs.get("file") or sys.stderr
    if _is_terminal(stream) or any(c.__module__ == "tqdm.notebook" for c in auto_tqdm.__mro__):
        return auto_tqdm(iterable, **tqdm_kwargs)
    return _line_progress_class()(iterable, **tqdm_kwargs)


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


@functools.cache
def _line_progress_class() -> type:

    class LineProgress(std_tqdm):
        """tqdm that writes its own text (``str(bar)``: ``train:  33%|███▎      | 400/1200 [01:02<02:04,
        6.4step/s, loss=...]``) as a newline-terminated line, never a carriage return: at most one line
        every `LINE_INTERVAL_S` seconds (however often tqdm refreshes, e.g. on ``set_postfix``), and a
        last line when the bar closes. A bar that is meant to vanish (``leave=False``, an evaluation
        loop) writes that last line only if it wrote any: a short loop adds nothing to the log."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self._interval = kwargs.pop("line_interval", LINE_INTERVAL_S)
            self._last_line_t = time.time()
            self._lines = 0
            self._last_n: float | None = None
            kwargs.setdefault("mininterval", min(self._interval, 1.0))
            super().__init__(*args, **kwargs)
            self._last_n = getattr(self, "n", 0)  # the starting point (a resumed run's step) is no news

        def display(self, msg: str | None = None, pos: int | None = None) -> bool:
            if msg is None and time.time() - self._last_line_t >= self._interval:
                self._write_line()
            return True

        def _write_line(self) -> None:
            text = self.__str__().strip()
            if text and self.n != self._last_n:
                self.fp.write(text + "\n")
                self.fp.flush()
                self._lines += 1
                self._last_n = self.n
            self._last_line_t = time.time()

        def clear(self, nolock: bool = False) -> None:
            pass  # nothing to erase: every line is complete (tqdm.write calls this before a message)

        def moveto(self, n: int) -> None:
            pass  # no cursor movement in a file

        def close(self) -> None:
            if getattr(self, "disable", True):
                return
            if (self.leave is None or self.leave or self._lines) and hasattr(self, "last_print_t"):
                self._ema_dt = lambda: None  # the last line shows the overall rate
                with self._lock:
                    self._write_line()
            self.disable = True
            self._decr_instances(self)

    return LineProgress


def __getattr__(name: str) -> Any:
    # LineProgress is built on first use: tqdm is imported only by commands that show progress
    if name == "LineProgress":
        return _line_progress_class()
    raise AttributeError(name)


def write_line(text: str, file: Any = None, end: str = "\n") -> None:
    """Print ``text`` on a line of its own while a progress bar may be showing: through ``tqdm.write``
    (which lifts a terminal bar off its line and redraws it below) when a bar is open, else ``print``.
    A line bar (`LineProgress`) always ends its lines, so the message starts a line there too."""
    file = file if file is not None else sys.stdout
    tqdm_module = sys.modules.get("tqdm.std")
    if tqdm_module is not None and getattr(tqdm_module.tqdm, "_instances", None):
        tqdm_module.tqdm.write(text, file=file, end=end)
    else:
        print(text, file=file, end=end)
    file.flush()
