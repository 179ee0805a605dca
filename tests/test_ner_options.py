"""spanbert/tasks/ner_options.py: the options of predict and evaluate ner, the same object from flags and
keywords (issue 59)."""

from __future__ import annotations

import pytest

from spanbert import tasks
from spanbert.errors import SpanBertError
from spanbert.tasks import options as O
from spanbert.tasks.ner_options import ACTIONS, NerEvaluate, NerPredict


def test_predict_and_evaluate_read_the_same_options_from_flags_and_keywords(tmp_path):
    out = str(tmp_path / "tags.txt")
    assert O.parse(NerPredict, ["--model", "m", "--data", "d.txt", "--output", out], "p", "d") == O.from_keywords(
        NerPredict, dict(model="m", data="d.txt", output=out), "c", "p")  # fmt: skip
    stats = str(tmp_path / "stats.json")
    assert O.parse(NerEvaluate, ["--data", "d.txt", "--model", "m", "--example_stats", stats], "p", "d") == (
        O.from_keywords(NerEvaluate, dict(data="d.txt", model="m", example_stats=stats), "c", "p"))  # fmt: skip
    assert tasks.TASKS.options("ner") is ACTIONS and "finetune" not in ACTIONS  # finetune parses its own


def test_evaluate_takes_predictions_or_a_model_not_both(tmp_path):
    data = tmp_path / "d.txt"
    data.write_text("John NNP B-NP B-PER\n")
    with pytest.raises(SpanBertError, match="found predictions and model of predictions, model, expected exactly one"):
        tasks.evaluate("ner", data=data, predictions=data, model=tmp_path)
