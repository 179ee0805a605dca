"""Output folders: which of their entries spanbert wrote (the manifest) and which process writes one now
(the lock). Every command that owns its output folder (a training run, a vocabulary, a prepared corpus,
a study) claims it before its work and keeps it until it ends (`Claim`):

- the **lock** is ``.spanbert.lock`` in the folder, held with `fcntl.flock`: one writer per folder. A
  second command is refused at once with the holder's pid (written into the file); the kernel drops the
  lock when the holder ends, by a crash or kill -9 too, so no stale lock is ever left to remove;
- the **manifest** is ``.spanbert-manifest.json``: the kind of output (`KINDS`), the command, and the
  top-level names spanbert created in the folder. It is written when the folder is claimed and each
  name is added *before* the entry is created (`record`, called by the atomic writers of
  `spanbert.utils` and by the few writers that create entries themselves), so a kill at any instant
  never leaves an entry of ours unlisted. A folder is an earlier output of a command only by its
  manifest; ``--overwrite_output_dir`` and a fresh start remove or replace only listed names, and a name
  in the way that is not listed stops the write (`record`) instead of replacing a user's file.

This module sits below `spanbert.utils` (whose writers call `record`) and imports only the errors.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from spanbert.errors import NoSpaceError, SpanBertError, out_of_space

MANIFEST = ".spanbert-manifest.json"
LOCK = ".spanbert.lock"

KINDS = {
    "run": "a training run",  # spanbert pretrain, finetune
    "tokenizer": "a vocabulary",  # spanbert tokenizer train
    "corpus": "a prepared corpus",  # spanbert preprocess
    "study": "a study or a learning curve",  # spanbert study, curve
}
"""What a claimed folder holds: a command reuses a folder of its own kind only."""


def fsync_dir(path: str | os.PathLike) -> None:
    """Flush a directory entry to disk so a rename inside it survives a power cut."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # not supported everywhere (e.g. some network filesystems)
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def is_debris(name: str) -> bool:
    """Names of the temporary files and folders that `atomic_write`, `atomic_dir` and the trainer's
    checkpoint writer create: ``.X.tmp-*``, ``.X.*.tmp``, ``.X.old-*``."""
    return name.startswith(".") and (".tmp-" in name or name.endswith(".tmp") or ".old-" in name)


def is_bookkeeping(name: str) -> bool:
    """The manifest, the lock and temporaries: entries spanbert keeps in any folder it claims, which
    never make a folder count as holding something."""
    return name in (MANIFEST, LOCK) or is_debris(name)


# ---------------------------------------------------------------------------------------------
# The manifest


def read_manifest(folder: str | os.PathLike) -> dict[str, Any] | None:
    """The manifest of ``folder`` ({"kind", "command", "files"}), or None when it has none (a folder spanbert
    never claimed). A damaged manifest is an error naming it: spanbert cannot tell its own files there."""
    path = Path(folder) / MANIFEST
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        data = json.loads(text)
    except ValueError as e:
        data = e
    if (
        not isinstance(data, dict)
        or data.get("kind") not in KINDS
        or not isinstance(data.get("files"), list)
        or not all(isinstance(x, str) for x in data["files"])
    ):
        raise SpanBertError(
            f"{path}: found {'text that is not JSON' if isinstance(data, ValueError) else 'a damaged manifest'}, "
            f'expected {{"kind": one of {", ".join(KINDS)}, "command": ..., "files": [names]}} (spanbert\'s list of '
            f"the files it wrote there); choose another output folder"
        )
    return data


def owned(folder: str | os.PathLike, name: str) -> bool:
    """Whether the entry ``name`` of ``folder`` is spanbert's to replace or remove: listed in the manifest,
    or bookkeeping (`is_bookkeeping`). In a folder without a manifest every name is (an unclaimed folder:
    a temporary one being filled, or a library call's)."""
    if is_bookkeeping(name):
        return True
    manifest = read_manifest(folder)
    return manifest is None or name in manifest["files"]


def foreign(folder: str | os.PathLike) -> list[str]:
    """The entries of a claimed ``folder`` that spanbert did not write (a user's notes), sorted."""
    manifest = read_manifest(folder)
    listed = set(manifest["files"]) if manifest else set()
    return sorted(p.name for p in Path(folder).iterdir() if not is_bookkeeping(p.name) and p.name not in listed)


def _write_manifest(folder: Path, data: dict[str, Any]) -> None:
    """Replace the manifest atomically; a full disk is one `NoSpaceError` naming the output folder."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f"{MANIFEST}.", suffix=".tmp", dir=folder)
    except OSError as e:
        _raise_if_full(e, folder)
        raise
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(data, indent=2) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, folder / MANIFEST)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        _raise_if_full(e, folder)
        raise
    fsync_dir(folder)


def _raise_if_full(error: BaseException, folder: Path) -> None:
    reason = out_of_space(error)
    if reason is not None:
        raise NoSpaceError(folder, reason) from None


@contextlib.contextmanager
def _manifest_mutex(folder: Path) -> Iterator[None]:
    """Serialise read-modify-writes of one manifest across processes (a study's cells, run in this
    process, and the study itself add names to the same top folder): a short flock on the folder."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the flock


_named: set[str] = set()
"""Files the user named as a command's output (`name_output`): replaced when asked, wherever they are."""


def name_output(path: str | os.PathLike) -> None:
    """``path`` is a file output the user named (``predict --output runs/ner/test_pred.txt``): writing it
    replaces what is there, as asked, also in a claimed folder whose manifest does not list it (`record`
    then lists it instead of refusing)."""
    _named.add(os.path.realpath(path))


def record(path: str | os.PathLike) -> None:
    """Before spanbert creates or replaces ``path``: add its name to the manifest of its folder (a folder
    without one is not claimed: nothing to do). An entry already there that the manifest does not list
    is someone else's: refused, naming it, and nothing is written; unless the user named that very file
    as the output (`name_output`)."""
    path = Path(path)
    folder, name = path.parent, path.name
    if is_bookkeeping(name) or not (folder / MANIFEST).is_file():
        return
    with _manifest_mutex(folder):
        manifest = read_manifest(folder)
        if manifest is None or name in manifest["files"]:
            return
        if os.path.lexists(path) and os.path.realpath(path) not in _named:
            raise SpanBertError(
                f"{path}: found a {'folder' if path.is_dir() else 'file'} that spanbert did not write, expected "
                f"no such name in the output folder (spanbert writes {name} there); move it away or choose "
                f"another output folder (it was left as it is)"
            )
        manifest["files"] = sorted({*manifest["files"], name})
        _write_manifest(folder, manifest)


def make_folders(folder: str | os.PathLike) -> list[Path]:
    """Create ``folder`` and its missing parents, each recorded in its parent's manifest first (a study's
    `finetune/` in its top folder). Returns those created, deepest first."""
    folder = Path(folder)
    missing = [d for d in (folder, *folder.parents) if not os.path.lexists(d)]
    for d in reversed(missing):  # from the top down: each parent exists when its child is recorded
        record(d)
        with contextlib.suppress(FileExistsError):  # another process made it meanwhile
            d.mkdir()
    return missing


def claim_manifest(folder: str | os.PathLike, kind: str, command: str) -> bool:
    """Make ``folder`` a claimed output of ``kind`` (creating it, recorded in its parent's manifest): write
    its manifest unless it has one. Returns whether this call wrote it. Call it on the one writing process."""
    folder = Path(folder)
    make_folders(folder)
    if read_manifest(folder) is not None:
        return False
    with _manifest_mutex(folder):
        if read_manifest(folder) is not None:
            return False
        _write_manifest(folder, {"kind": kind, "command": command, "files": []})
    return True


def remove(path: str | os.PathLike) -> bool:
    """Remove the file or folder ``path`` when it is spanbert's (`owned`); a name the manifest does not list
    is left alone. Returns whether something was removed."""
    path = Path(path)
    if not os.path.lexists(path) or not owned(path.parent, path.name):
        return False
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    return True


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# ---------------------------------------------------------------------------------------------
# The lock: one writer per folder

_held: dict[str, int] = {}
"""realpath of a folder this process holds -> how many `Claim`s hold it (a command's and the
training loop's inside it)."""


def _holder_text(fd: int) -> str:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        return os.read(fd, 200).decode("utf-8", "replace").strip()
    except OSError:
        return ""


class Claim:
    """``folder`` claimed as an output of ``kind`` by ``command`` (a line that names it, e.g.
    ``spanbert finetune ner``): `acquire` takes the lock and writes the manifest, `release` gives them
    back. Re-entrant in one process: a claim of a folder this process already holds (a training loop
    inside the command that claimed its folder) or of a folder inside one (a sweep's runs) takes no
    second lock. Under torchrun one rank (0) claims (`spanbert.runs.claim_run_dir`)."""

    def __init__(self, folder: str | os.PathLike, kind: str, command: str) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown kind of output {kind!r}")
        self.folder = Path(folder)
        self.kind = kind
        self.command = command
        self._fd: int | None = None
        self._key: str | None = None
        self._created: list[Path] = []
        self._wrote_manifest = False

    def acquire(self) -> None:
        key = os.path.realpath(self.folder)
        inside = holds(self.folder)
        self._created = make_folders(self.folder)
        if not inside:
            try:
                self._fd = self._lock()
            except BaseException:
                self._remove_created()  # refused (or a full disk): the disk as it was
                raise
        self._key = key
        _held[key] = _held.get(key, 0) + 1
        try:
            self._wrote_manifest = claim_manifest(self.folder, self.kind, self.command)
        except BaseException:
            self._wrote_manifest = False
            self.release()
            self._remove_created()
            raise

    def _remove_created(self) -> None:
        for d in self._created:  # deepest first, each only while empty
            try:
                d.rmdir()
            except OSError:
                break

    def _lock(self) -> int:
        lock = self.folder / LOCK
        while True:
            try:
                fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
            except OSError as e:  # no inode left
                _raise_if_full(e, self.folder)
                raise
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                holder = _holder_text(fd) or "another process"
                os.close(fd)
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
                raise SpanBertError(
                    f"{self.folder}: found another command writing this folder ({holder}), expected one writer "
                    f"at a time; wait for it to end (or stop it) and run again, or choose another output folder"
                ) from None
            # the holder removes the file as it releases: lock the file that is there now, not one unlinked
            try:
                same = os.stat(lock).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        try:
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, f"{self.command}, pid {os.getpid()}\n".encode())
        except OSError as e:  # a full disk: no room for the holder's line
            with contextlib.suppress(FileNotFoundError):
                lock.unlink()
            os.close(fd)
            _raise_if_full(e, self.folder)
            raise
        return fd

    def release(self) -> None:
        """Give the folder back. A claim that wrote nothing (a command that stopped with an error before its
        first file, a dry run) leaves the disk as it found it: its manifest, lock and created folders go."""
        if self._key is None:
            return
        _held[self._key] -= 1
        if not _held[self._key]:
            del _held[self._key]
        # the manifest may list names whose writing failed (recorded first, never created): what counts is
        # that the folder holds nothing but bookkeeping
        untouched = (
            self._wrote_manifest
            and self.folder.is_dir()
            and all(is_bookkeeping(p.name) for p in self.folder.iterdir())
        )
        if untouched:
            with contextlib.suppress(FileNotFoundError):
                (self.folder / MANIFEST).unlink()
        if self._fd is not None:
            # unlinked while still held: a process waiting on this file sees it gone and takes a new one
            with contextlib.suppress(FileNotFoundError):
                (self.folder / LOCK).unlink()
            os.close(self._fd)
            self._fd = None
        if untouched:
            self._remove_created()
        self._key = None

    def __enter__(self) -> Claim:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def carry_claim(folder: str | os.PathLike, replacement: str | os.PathLike) -> None:
    """Before a folder this process holds is replaced whole by ``replacement`` (`spanbert.utils.atomic_dir`:
    `spanbert preprocess` writes its corpus that way): give the new folder the lock (a second name of the
    same file, so that the flock held goes with it) and a manifest listing what it holds. A folder not held
    by this process is left alone."""
    folder, replacement = Path(folder), Path(replacement)
    if os.path.realpath(folder) not in _held:
        return
    manifest = read_manifest(folder)
    if manifest is None:
        return
    if (folder / LOCK).exists() and not (replacement / LOCK).exists():
        os.link(folder / LOCK, replacement / LOCK)
    names = sorted(p.name for p in replacement.iterdir() if not is_bookkeeping(p.name))
    _write_manifest(replacement, {**manifest, "files": names})


def holds(folder: str | os.PathLike) -> bool:
    """Whether this process holds ``folder`` (or a folder it lies in)."""
    key = os.path.realpath(folder)
    return any(key == k or key.startswith(k.rstrip(os.sep) + os.sep) for k in _held)
