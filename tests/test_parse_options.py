"""spanbert/tasks/parse_options.py: the options of finetune, predict and evaluate parse, the same object from
flags and keywords; the parser's rate from the family (issue 59)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from spanbert import tasks
from spanbert.errors import SpanBertError
from spanbert.tasks import options as O
from spanbert.tasks.parse_options import ACTIONS, DEFAULTS, ParseEvaluate, ParseFinetune, ParsePredict


def test_each_action_reads_the_same_options_from_flags_and_keywords(tmp_path):
    out = str(tmp_path / "run")
    flags = ["--model", "m", "--train", "t.mrg", "--dev", "d.mrg", "--d_model", "64", "--output_dir", out]
    parsed = O.parse(ParseFinetune, flags, "p", "d")
    assert parsed == O.from_keywords(ParseFinetune, dict(model="m", train="t.mrg", dev="d.mrg", d_model=64,
                                                         output_dir=out), "c", "p")  # fmt: skip
    assert (parsed.train_file, parsed.validation_file, parsed.parser.d_model) == ("t.mrg", "d.mrg", 64)
    # no readable model: the task's defaults, the parser at the BERT family's rate (8e-4)
    assert (parsed.training.learning_rate, parsed.training.max_tokens_per_batch) == (8e-4, DEFAULTS["max_tokens_per_batch"])
    assert parsed.parser.encoder_learning_rate == 5e-5  # and the encoder at its rate: the options hold both
    trees = str(tmp_path / "trees.txt")
    assert O.parse(ParsePredict, ["--model", "m", "--text", "A b .", "--text", "C d .", "--output", trees], "p", "d") == (
        O.from_keywords(ParsePredict, dict(model="m", text=["A b .", "C d ."], output=trees), "c", "p"))  # fmt: skip
    assert O.parse(ParseEvaluate, ["--data", "g.mrg", "--predictions", "p.txt", "--summary"], "p", "d") == (
        ParseEvaluate(data="g.mrg", predictions="p.txt", summary=True))  # fmt: skip
    assert tasks.TASKS.options("parse") is ACTIONS and set(ACTIONS) == {"finetune", "predict", "evaluate"}


def test_a_keyword_mistake_is_named_as_the_keyword():
    with pytest.raises(SpanBertError, match="'d_modle' .did you mean 'd_model'"):
        O.from_keywords(ParseFinetune, dict(model="m", train="t", d_modle=64), "tasks.finetune('parse')", "p")


def test_the_options_import_no_torch():
    code = "import sys, spanbert.tasks.parse_options; assert 'torch' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).returncode == 0
