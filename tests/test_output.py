"""The output contract (`spanbert.utils.check_output`): a file where a folder is expected, a folder of
someone else's files, or a location that cannot be written is refused with one error naming the path,
before any work, and nothing on disk changes."""

from __future__ import annotations

import os
import subprocess

import pytest

from spanbert import utils
from spanbert.errors import SpanBertError
from spanbert.utils import check_output


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
