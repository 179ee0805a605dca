"""The output contract (`spanbert.utils.check_output`): a file where a folder is expected, a folder of
someone else's files, or a location that cannot be written is refused with one error naming the path,
before any work, and nothing on disk changes."""

from __future__ import annotations

import tempfile

import pytest

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
    # root may write anywhere that is not a read-only mount, so the refusal is simulated where the
    # check asks the system: creating a file there
    def refuse(*a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "TemporaryFile", refuse)
    with pytest.raises(SpanBertError, match=r"not writable \(Permission denied\); expected a writable location"):
        check_output(tmp_path / "ro" / "preds.json", folder=False)
