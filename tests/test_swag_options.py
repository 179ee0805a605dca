"""spanbert/tasks/swag_options.py: the options of swag, the same object from flags and keywords (issue 59)."""

from __future__ import annotations

from spanbert import tasks
from spanbert.tasks import options as O
from spanbert.tasks.swag_options import ACTIONS, DEFAULTS, SwagEvaluate, SwagFinetune, SwagPredict


def test_each_action_reads_the_same_options_from_flags_and_keywords(tmp_path):
    out = str(tmp_path / "preds.csv")
    cases = [
        (SwagFinetune, ["--model", "m", "--train", "t.csv", "--dev", "v.csv", "--max_seq_length", "64"],
         dict(model="m", train="t.csv", validation_file="v.csv", max_seq_length=64)),
        (SwagPredict, ["--model", "m", "--data", "v.csv", "--output", out, "--batch_size", "8"],
         dict(model="m", data="v.csv", output=out, batch_size=8)),
        (SwagEvaluate, ["--data", "v.csv", "--predictions", "p.csv"], dict(data="v.csv", predictions="p.csv")),
    ]  # fmt: skip
    for cls, argv, keywords in cases:
        assert O.parse(cls, argv, "p", "d") == O.from_keywords(cls, keywords, "c", "p"), cls.__name__


def test_finetune_starts_from_bert_s_swag_recipe():
    opts = O.from_keywords(SwagFinetune, {"model": "m", "train_file": "t.csv"}, "c", "p")
    assert {k: getattr(opts.training, k) for k in DEFAULTS} == DEFAULTS
    assert opts.max_seq_length is None  # 128, or the encoder's positions: resolved when the run starts
    assert tasks.TASKS.options("swag") is ACTIONS and tasks.TASKS["swag"].options is ACTIONS
