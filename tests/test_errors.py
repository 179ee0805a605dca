"""User-facing errors (`spanbert.errors`): what a `DataError` names, UTF-8 checked with the line and byte of the
first bad byte (a file's bytes, a command-line argument), and a full disk told apart from other failures however
the writer reports it. Every command's use of them is tested in the malformed-input tables (test_malformed_*.py)
and test_output_contract.py."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from spanbert import errors
from spanbert.errors import DataError, NoSpaceError, SpanBertError, decode_utf8, out_of_space, utf8_argument


def test_a_data_error_names_the_file_line_and_record():
    e = DataError("data/train.json", "found 3 fields, expected 4", line=12, record="q7")
    assert isinstance(e, SpanBertError)
    assert str(e) == "data/train.json:12 (record q7): found 3 fields, expected 4"
    assert (e.path, e.line, e.record) == ("data/train.json", 12, "q7")
    assert str(DataError("corpus.txt", "empty corpus")) == "corpus.txt: empty corpus"


def test_decode_utf8_drops_a_byte_order_mark_and_names_the_first_bad_byte():
    assert decode_utf8("\ufeffcafé\n".encode(), "a.txt") == "café\n"
    with pytest.raises(DataError) as e:
        decode_utf8(b"good\nstill good\ncaf\xe9 au lait\n", "latin.txt", expected="CoNLL lines in UTF-8")
    assert e.value.line == 3
    assert str(e.value).startswith("latin.txt:3: found bytes that are not UTF-8 (")
    assert "at byte 19); expected CoNLL lines in UTF-8" in str(e.value)
    with pytest.raises(DataError, match=r"b.txt:1: .* at byte 5\)"):  # offsets count the mark's three bytes
        decode_utf8(b"\xef\xbb\xbfab\xff", "b.txt")


def test_a_command_line_argument_that_is_not_utf8_names_its_option():
    assert utf8_argument("Zoë’s café", "--text") == "Zoë’s café"
    argv = os.fsdecode(b"caf\xe9 au lait")  # what Python makes of argv bytes that are not UTF-8 (PEP 383)
    with pytest.raises(SpanBertError, match=r"^--text: found bytes that are not UTF-8 \(.* at byte 3: b'\\xe9'\)"):
        utf8_argument(argv, "--text")


def test_a_full_disk_says_the_output_is_left_as_it_was():
    e = NoSpaceError("runs/x/model.safetensors", "no space left on the device")
    assert isinstance(e, SpanBertError) and e.path == "runs/x/model.safetensors"
    assert e.reason == "no space left on the device"
    assert str(e).startswith("runs/x/model.safetensors: found no space left on the device while writing it")
    assert "runs/x/model.safetensors is left as it was before this write" in str(e)


def test_torchs_zip_writer_is_a_full_disk_only_when_the_disk_is_full(monkeypatch, tmp_path):
    zip_error = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
    assert out_of_space(zip_error) is None  # no folder to look at: another failure
    monkeypatch.setattr(errors.os, "statvfs", lambda folder: SimpleNamespace(f_bavail=10, f_frsize=4096))
    assert out_of_space(zip_error, tmp_path) == "no space left on the device"
    monkeypatch.setattr(errors.os, "statvfs", lambda folder: SimpleNamespace(f_bavail=1 << 20, f_frsize=4096))
    assert out_of_space(zip_error, tmp_path) is None  # room left: the zip writer failed for another reason


def test_a_cycle_of_causes_ends():
    a, b = ValueError("a"), ValueError("b")
    a.__context__, b.__context__ = b, a
    assert out_of_space(a) is None
    b.__cause__ = OSError(122, "Disk quota exceeded")
    assert out_of_space(a) == "the disk quota used up"


def test_out_of_space_is_told_by_each_writer():
    from spanbert.errors import out_of_space

    assert out_of_space(OSError(28, "No space left on device")) == "no space left on the device"
    assert out_of_space(OSError(122, "Disk quota exceeded")) == "the disk quota used up"
    assert out_of_space(Exception("Error while serializing: I/O error: No space left on device (os error 28)"))
    torch_error = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
    torch_error.__context__ = OSError(28, "No space left on device")  # torch.save into a Python file
    assert out_of_space(torch_error) == "no space left on the device"
    assert out_of_space(OSError(13, "Permission denied")) is None and out_of_space(ValueError("x")) is None
