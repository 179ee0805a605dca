"""What a task is to the rest of the package (`spanbert.tasks.spec`): what its actions return (`Results`: every
number of the scores under its own key, the headline score under any of its prefixes), a finished run's results
read back (under the names older runs used too), and keyword options spelled as the command line. Every task's
spec is checked in test_tasks_registry.py."""

from __future__ import annotations

import json

import pytest

from spanbert.errors import SpanBertError
from spanbert.tasks.spec import OLD_RESULTS_FILES, RESULTS_FILE, Results, flat_numbers, read_results


def test_every_number_is_under_its_own_key_and_the_first_wins():
    scores = {"f1": 80.0, "exact": 70, "done": True, "name": "dev", "dev": {"f1": 10.0, "n": 4}, "test": {"em": 1.5}}
    assert flat_numbers(scores) == {"f1": 80.0, "exact": 70.0, "n": 4.0, "em": 1.5}  # no bool, the top f1 kept
    assert flat_numbers([1, 2]) == {} and flat_numbers({}) == {}


def test_the_headline_score_under_any_prefix():
    assert Results({"f1": 91.0, "dev": {"f1": 1.0}}, "f1").score == 91.0
    assert Results({"dev_accuracy": 88.5}, "accuracy").score == 88.5
    assert Results({"eval_mcc": 40.0, "test_mcc": 45.0}, "mcc").score == 40.0  # dev before test
    assert Results({"test": {"test_las": 77.0}}, "las").score == 77.0
    with pytest.raises(SpanBertError, match=r"found no 'f1' among the scores \['exact'\], expected the task's headline"):
        _ = Results({"exact": 1.0}, "f1").score


def test_a_finished_runs_results_are_read_back(tmp_path):
    (tmp_path / RESULTS_FILE).write_text(json.dumps({"f1": 50.0, "selected_step": 12}))
    run = read_results(tmp_path, "f1")
    assert (run.score, run.best_step, run.output_dir) == (50.0, 12, tmp_path)
    old = tmp_path / "old"
    old.mkdir()
    (old / OLD_RESULTS_FILES[0]).write_text(json.dumps({"eval_f1": 40.0, "selected_step": "last"}))
    run = read_results(old, "f1")
    assert run.score == 40.0 and run.best_step is None  # an older run's name; a step that is no number is none
    with pytest.raises(SpanBertError, match=rf"{tmp_path / 'none' / RESULTS_FILE}: cannot read the run's dev results"):
        read_results(tmp_path / "none", "f1")
    (old / RESULTS_FILE).write_text("[1, 2]")
    with pytest.raises(SpanBertError, match="found list, expected a mapping of scores"):
        read_results(old, "f1")
