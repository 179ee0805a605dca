"""Atomic writes: all or nothing, with ordinary permissions."""

from __future__ import annotations

import os
import stat

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
