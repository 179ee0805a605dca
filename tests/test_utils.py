"""Atomic writes: all or nothing, with ordinary permissions; the C heap settings (glibc)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap

import pytest

from spanbert.utils import atomic_dir, atomic_write


def test_atomic_write_all_or_nothing(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_write(target) as f:
            f.write("half")
            raise RuntimeError("crash")
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["out.json"]
    with atomic_write(target) as f:
        f.write("new")
    assert target.read_text() == "new"


def test_atomic_outputs_have_umask_permissions(tmp_path):
    mask = os.umask(0o022)
    try:
        with atomic_write(tmp_path / "f.txt") as f:
            f.write("x")
        with atomic_dir(tmp_path / "d") as d:
            (d / "a").write_text("y")
    finally:
        os.umask(mask)
    assert stat.S_IMODE((tmp_path / "f.txt").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "d").stat().st_mode) == 0o755


def test_atomic_dir_replaces_only_on_success(tmp_path):
    target = tmp_path / "d"
    with atomic_dir(target) as d:
        (d / "a").write_text("1")
    with pytest.raises(KeyboardInterrupt):
        with atomic_dir(target) as d:
            (d / "b").write_text("2")
            raise KeyboardInterrupt
    assert sorted(os.listdir(target)) == ["a"] and os.listdir(tmp_path) == ["d"]


# A child process (malloc settings are per process): raise glibc's dynamic mmap threshold by freeing
# a 16 MB block, then allocate 48 MB in 2 MB blocks and free all but the last (which pins the heap
# top). Prints the resident memory in MB the freed blocks still hold.
_HEAP_PROBE = textwrap.dedent("""
    import ctypes, os, sys
    from spanbert import utils
    if sys.argv[1] == "fixed":
        assert utils.configure_malloc(1 << 20)
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    page = os.sysconf("SC_PAGE_SIZE")
    def rss():
        return int(open("/proc/self/statm").read().split()[1]) * page / 2**20
    big = libc.malloc(16 << 20); ctypes.memset(big, 1, 16 << 20); libc.free(big)
    before = rss()
    blocks = [libc.malloc(2 << 20) for _ in range(25)]
    for b in blocks:
        ctypes.memset(b, 1, 2 << 20)
    for b in blocks[:-1]:
        libc.free(b)
    print(rss() - before)
""")


def _glibc() -> bool:
    import platform

    return sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


@pytest.mark.skipif(not _glibc(), reason="glibc's malloc only")
def test_fixed_mmap_threshold_gives_freed_tensors_back():
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}

    def kept(mode: str) -> float:
        out = subprocess.run([sys.executable, "-c", _HEAP_PROBE, mode], env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return float(out.stdout)

    assert kept("dynamic") > 40  # glibc's default: the 24 freed blocks stay in the heap, resident
    assert kept("fixed") < 8  # each 2 MB block had its own mmap, given back at free


def test_malloc_settings_are_a_no_op_off_glibc_or_under_the_users_own(monkeypatch):
    from spanbert import utils

    monkeypatch.setattr(utils, "_malloc_configured", None)
    monkeypatch.setattr(utils, "_libc", False)  # what _glibc() caches on musl or macOS
    assert utils.configure_malloc() is False and utils.trim_heap(min_interval=0.0) is False
    calls = []

    class FakeLibc:
        def mallopt(self, param, value):
            calls.append((param, value))
            return 1

    monkeypatch.setattr(utils, "_malloc_configured", None)
    monkeypatch.setattr(utils, "_libc", FakeLibc())
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert utils.configure_malloc() is False and calls == []  # the user's environment wins
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_")
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    monkeypatch.setattr(utils, "_malloc_configured", None)
    assert utils.configure_malloc(1 << 20) is True
    assert calls == [(utils._M_MMAP_THRESHOLD, 1 << 20), (utils._M_TRIM_THRESHOLD, 2 << 20)]
    assert utils.configure_malloc() is True and len(calls) == 2  # once per process


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="transparent huge pages are Linux's")
def test_import_turns_on_huge_pages_for_torch_unless_the_user_set_it():
    # c10 reads THP_MEM_ALLOC_ENABLE once, at the first tensor allocation: `import spanbert` must set it
    # before torch is imported, and leave the user's own value alone
    code = "import os, spanbert, sys; assert 'torch' not in sys.modules; print(os.environ['THP_MEM_ALLOC_ENABLE'])"
    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1"
    out = subprocess.run([sys.executable, "-c", code], env={**env, "THP_MEM_ALLOC_ENABLE": "0"},
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert out.stdout.strip() == "0"


def test_progress_bar_is_tqdm_on_a_terminal_and_lines_elsewhere(tmp_path):
    import io

    from tqdm.auto import tqdm

    from spanbert.utils import LineProgress, progress_bar

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    on_tty = progress_bar(total=3, file=Terminal())
    to_file = progress_bar(total=3, file=io.StringIO())
    try:
        assert type(on_tty) is tqdm and isinstance(to_file, LineProgress)
    finally:
        on_tty.close()
        to_file.close()
    assert to_file.fp.getvalue() == ""  # closed at 0/3 with nothing new to say: no line
