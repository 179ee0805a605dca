"""spanbert/tasks/qa/options.py: the options of squad and mrqa, the same object from the command line and
from `spanbert.tasks` keywords (issue 59)."""

from __future__ import annotations

import pytest

from spanbert import tasks
from spanbert.errors import SpanBertError
from spanbert.tasks import options as O
from spanbert.tasks.qa.options import ACTIONS, DEFAULTS, QAConfig, QAEvaluate, QAFinetune, QAPredict


def test_each_action_reads_the_same_options_from_flags_and_keywords(tmp_path):
    out = str(tmp_path / "preds.json")
    cases = [
        (QAFinetune, ["--model", "m", "--train_file", "t.json", "--validation_file", "d.json", "--doc_stride", "64",
                      "--version_2_with_negative", "--learning_rate", "3e-5", "--train_articles", ":17"],
         dict(model="m", train_file="t.json", validation_file="d.json", doc_stride=64, version_2_with_negative=True,
              learning_rate=3e-5, train_articles=":17")),
        (QAPredict, ["--model", "m", "--data", "d.json", "--output", out, "--batch_size", "8", "--disable_tqdm"],
         dict(model="m", data="d.json", output=out, batch_size=8, disable_tqdm=True)),
        (QAEvaluate, ["--data", "d.json", "--predictions", "p.json", "--na-prob", "n.json", "--na-prob-thresh", "0.5"],
         dict(data="d.json", predictions="p.json", na_prob="n.json", na_prob_thresh=0.5)),
    ]  # fmt: skip
    for cls, argv, keywords in cases:
        assert O.parse(cls, argv, "p", "d") == O.from_keywords(cls, keywords, "c", "p"), cls.__name__


def test_finetune_starts_from_appendix_b_and_keeps_the_threshold_for_dev():
    opts = O.from_keywords(QAFinetune, {"model": "m", "train_file": "t.json"}, "c", "p")
    assert opts.qa == QAConfig()
    assert {k: getattr(opts.training, k) for k in DEFAULTS} == DEFAULTS
    assert "null_score_diff_threshold" not in O.names(QAFinetune)  # chosen on dev, not an option of finetune
    assert "null_score_diff_threshold" in O.names(QAPredict)  # predict may override the saved one


def test_the_registry_names_the_options_the_specs_hold():
    for name in ("squad", "mrqa"):
        assert tasks.TASKS.options(name) is ACTIONS
        assert tasks.TASKS[name].options is ACTIONS


def test_a_python_mistake_names_the_keyword():
    with pytest.raises(SpanBertError, match=r"tasks.predict\('squad'\): found 'batch_siz', expected an option of "
                                            r"`spanbert predict squad` \(did you mean 'batch_size'\?\)"):  # fmt: skip
        tasks.predict("squad", "m", "d.json", batch_siz=3)
    with pytest.raises(SpanBertError, match=r"found no data or output, expected data FILE output FILE, or question"):
        tasks.predict("squad", model="m")
