"""spanbert/study/runner.py: a run's options spelled as the command line a study records, and the log a
step runs in."""

from __future__ import annotations

import pytest

from spanbert.errors import SpanBertError
from spanbert.study.runner import in_log, options_argv


def test_options_are_spelled_as_the_command_line():
    options = {"learning_rate": 3e-5, "do_lower_case": False, "layers": [1, 2], "task": "SST-2", "seed": None}
    assert options_argv(options) == ["--learning_rate", "3e-05", "--do_lower_case", "false", "--layers", "1", "2",
                                     "--task", "SST-2"]  # fmt: skip
    with pytest.raises(SpanBertError, match="option learning_rate: found nan, expected a finite number"):
        options_argv({"learning_rate": float("nan")})
    with pytest.raises(SpanBertError, match="option schedule: found a mapping, expected a value"):
        options_argv({"schedule": {"warmup": 1}})


def test_a_step_s_output_and_its_failure_go_to_its_log(tmp_path):
    log = tmp_path / "step.log"
    with pytest.raises(SpanBertError, match="^no corpus$"):
        with in_log(log, "spanbert preprocess --corpus none"):
            print("reading")
            raise SpanBertError("no corpus")
    assert log.read_text().splitlines() == ["$ spanbert preprocess --corpus none", "reading", "error: no corpus"]
