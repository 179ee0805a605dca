"""Small helpers shared by every module: atomic file and directory writes."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


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


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", **open_kwargs) -> Iterator:
    """Open a temporary file beside ``path``; on success fsync and rename it over ``path``.

    A crash or an exception leaves the previous file (or no file), never a half-written one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        with open(tmp, mode, **open_kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; give the file the usual permissions
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike, overwrite: bool = True) -> Iterator[Path]:
    """Yield a fresh temporary directory beside ``path``; on success it replaces ``path``.

    Files written into the yielded directory appear at ``path`` all at once; an interrupted run
    leaves at most a hidden ``.<name>.tmp-*`` directory, never output that looks complete.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} already exists")
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp creates 0700
    try:
        yield tmp
        for root, _, files in os.walk(tmp):
            for name in files:
                with open(os.path.join(root, name), "rb") as f:
                    os.fsync(f.fileno())
        old = None
        if path.exists():
            old = path.parent / f".{path.name}.old-{os.getpid()}"
            os.replace(path, old)
        os.replace(tmp, path)
        fsync_dir(path.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
