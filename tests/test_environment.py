"""The process environment a command starts with (`spanbert.environment`): an `OMP_NUM_THREADS` that OpenMP
accepts is kept as the user's fixed count; one it would reject is dropped, with one note, before torch loads. The
CLI's use of it is tested in test_output_contract.py
(`test_garbage_omp_num_threads_is_one_note_not_libgomps_complaint`)."""

from __future__ import annotations

import os

import pytest

from spanbert.environment import check_omp_environment, omp_threads_setting


@pytest.mark.parametrize("value", ["4", " 8 ", "4,2", "1,1,1"])
def test_a_thread_count_openmp_accepts_is_the_setting(monkeypatch, value):
    monkeypatch.setenv("OMP_NUM_THREADS", value)
    assert omp_threads_setting() == value.strip()
    assert check_omp_environment() is None and os.environ["OMP_NUM_THREADS"] == value  # kept as it was


def test_no_setting_is_nothing_to_drop(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert omp_threads_setting() is None and check_omp_environment() is None
    assert "OMP_NUM_THREADS" not in os.environ


@pytest.mark.parametrize("value", ["garbage", "0", "-1", "4,", "2.5", "", "   "])
def test_a_value_openmp_rejects_is_dropped_with_one_note(monkeypatch, value):
    monkeypatch.setenv("OMP_NUM_THREADS", value)
    assert omp_threads_setting() is None
    note = check_omp_environment()
    assert note is not None and note.startswith(f"note: OMP_NUM_THREADS={value!r} is not a number of threads")
    assert "OMP_NUM_THREADS" not in os.environ  # libgomp, loaded later with torch, never sees it
    assert check_omp_environment() is None  # said once
