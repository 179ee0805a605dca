"""Small helpers (`spanbert.utils`): atomic writes (all or nothing, with ordinary permissions, a killed export put
back), the C heap settings (glibc), the progress bar, and the output checks: an output refused before any
work, apart from its inputs, and a full disk that leaves every file of a save as it was."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap

import pytest

from spanbert import utils
from spanbert.errors import SpanBertError
from spanbert.utils import atomic_dir, atomic_write, check_output


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


# ---------------------------------------------------------------------------------------------
# The output checks (`check_output`): a file where a folder is expected, a folder of someone else's files, a
# location that cannot be written, an output that is, holds or lies inside an input is refused with one error
# naming the path, before any work, and nothing on disk changes (every command's use of them:
# test_output_contract.py; the manifest and the lock: test_folders.py).


def test_new_and_own_outputs_pass(tmp_path):
    assert check_output(tmp_path / "new" / "deeper", folder=True) == tmp_path / "new" / "deeper"
    assert not (tmp_path / "new").exists()  # checking creates nothing
    own = tmp_path / "own"
    own.mkdir()
    (own / "meta.json").write_text("{}")
    check_output(own, folder=True, ours=lambda d: (d / "meta.json").is_file())
    check_output(tmp_path / "empty", folder=True, ours=lambda d: False)
    (tmp_path / "out.json").write_text("old")
    check_output(tmp_path / "out.json", folder=False)  # a file output replaces its old version


@pytest.mark.parametrize(
    "make, folder, contains",
    [
        (lambda t: (t / "f").write_text("x") and t / "f", True, "found a file, expected a folder"),
        (lambda t: (t / "f").write_text("x") and t / "f" / "sub" / "out", True, "found a file at"),
        (lambda t: (t / "f").write_text("x") and t / "f" / "preds.json", False, "found a file at"),
        (lambda t: (t / "d").mkdir() or t / "d", False, "found a folder, expected a file name"),
        (lambda t: ((t / "d").mkdir(), (t / "d" / "notes.txt").write_text("x")) and t / "d", True,
         "found a folder holding other files (notes.txt)"),
    ],
)
def test_refused_outputs(tmp_path, make, folder, contains):
    path = make(tmp_path)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with pytest.raises(SpanBertError) as e:
        check_output(path, folder=folder, ours=lambda d: False)
    assert str(e.value).startswith(f"{path}: ") and contains in str(e.value), str(e.value)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_an_unwritable_location_is_refused(tmp_path, monkeypatch):
    # root may write anywhere but a read-only mount, so the refusal is simulated where the check asks
    # the system (access(2))
    monkeypatch.setattr(utils, "writable", lambda folder: False)
    with pytest.raises(SpanBertError, match=r"not writable \(no permission, or a read-only file system\); expected"):
        check_output(tmp_path / "ro" / "preds.json", folder=False)
    assert not (tmp_path / "ro").exists()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="mounts a read-only tmpfs: needs root")
def test_a_read_only_mount_is_refused(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro", "tmpfs", str(ro)], capture_output=True).returncode != 0:
        pytest.skip("this machine does not let the test mount a file system")
    try:
        with pytest.raises(SpanBertError, match="not writable"):
            check_output(ro / "out", folder=True)
    finally:
        subprocess.run(["umount", str(ro)], check=True)


# ---------------------------------------------------------------------------------------------
# An output apart from its inputs (`check_apart`)


@pytest.mark.parametrize(
    "output, says",
    [
        ("data/train.json", "found the output is the input"),
        ("data/sub", "found the output inside the input folder"),
        (".", "inside the output folder"),
        ("link.json", "found the output is the input"),  # a symbolic link to an input is that input
        ("hard.json", "found the output is the input"),  # so is a second name (hard link) of it
    ],
)
def test_an_output_is_refused_when_it_is_holds_or_lies_in_an_input(tmp_path, monkeypatch, output, says):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.json").write_text("{}")
    os.symlink(tmp_path / "data" / "train.json", tmp_path / "link.json")
    os.link(tmp_path / "data" / "train.json", tmp_path / "hard.json")
    inputs = [("--train", "data/train.json"), ("--data_dir", "data")] if output != "hard.json" else [("--train", "data/train.json")]
    with pytest.raises(SpanBertError) as e:
        check_output(output, folder=output in (".", "data/sub"), inputs=inputs)
    assert str(e.value).startswith(f"{output}: ") and says in str(e.value), str(e.value)
    check_output("preds.json", folder=False, inputs=inputs)  # beside the inputs: fine
    assert not (tmp_path / "data" / "sub").exists()


def test_a_model_folder_takes_a_predictions_file_but_nothing_named_like_its_files(tmp_path):
    """A model (or tokenizer) folder is read by name: `predict --model runs/ner --output runs/ner/test_pred.txt`
    (the documented habit, and the study's held-out scoring) is fine; an output named like one of the model's
    files (config.json, a shard, vocab.txt) would replace what the command reads."""
    model = tmp_path / "runs" / "ner"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    check_output(model / "test_pred.txt", folder=False, inputs=[("--model", str(model))])
    check_output(model / "sub" / "config.json", folder=False, inputs=[("--model", str(model))])
    for name in ("config.json", "vocab.txt", "model-00001-of-00002.safetensors", "span_boundary_head.safetensors"):
        with pytest.raises(SpanBertError, match="found the output over a file of the model folder"):
            check_output(model / name, folder=False, inputs=[("--model", str(model))])
    with pytest.raises(SpanBertError, match="found the output inside the input folder"):  # a data folder: nothing inside
        check_output(model / "test_pred.txt", folder=False, inputs=[("--data_dir", str(model))])


# ---------------------------------------------------------------------------------------------
# A full disk: every writer leaves its destination as it was and says so in one line (`out_of_space` itself:
# test_errors.py; a checkpoint and the log: test_runs.py)


def _full_after(monkeypatch, nbytes: int) -> None:
    """Writes of Python files fail with ENOSPC once ``nbytes`` have been written (a disk filling up)."""
    import builtins
    import io

    left = {"n": nbytes}
    real_open = builtins.open

    class Full(io.BufferedWriter):
        def write(self, b):
            if left["n"] - len(b) < 0:
                raise OSError(28, "No space left on device")
            left["n"] -= len(b)
            return super().write(b)

    def fake_open(file, mode="r", *a, **k):
        f = real_open(file, mode, *a, **k)
        if "w" in mode and "b" in mode and isinstance(f, io.BufferedWriter):
            raw = f.detach()
            return Full(raw)
        return f

    monkeypatch.setattr(builtins, "open", fake_open)


def test_a_full_disk_leaves_every_file_of_a_multi_file_save_as_it_was(tmp_path, monkeypatch):
    out = tmp_path / "tok"
    with utils.atomic_files(out) as open_file:
        for name in ("vocab.txt", "tokenizer.json"):
            with open_file(name, "wb") as f:
                f.write(b"old " + name.encode())
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    _full_after(monkeypatch, 10)
    with pytest.raises(utils.NoSpaceError, match=rf"{out}: found no space left on the device"):
        with utils.atomic_files(out) as open_file:
            for name in ("vocab.txt", "tokenizer.json"):
                with open_file(name, "wb") as f:
                    f.write(b"a new, longer " + name.encode())
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # the first file was not replaced either


def test_interrupted_final_export_is_put_back(tmp_path):
    """atomic_dir without an atomic swap: a kill between its renames leaves `.final.old-PID`."""
    from spanbert.utils import remove_debris

    (tmp_path / ".final.old-5").mkdir()
    (tmp_path / ".final.old-5" / "config.json").write_text("{}")
    (tmp_path / ".final.tmp-abc").mkdir()
    remove_debris(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final"]
    assert (tmp_path / "final" / "config.json").exists()
