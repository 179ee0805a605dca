"""Scores against the data (`spanbert.tasks.scores`): one scale, predictions matched by id whatever their
order, and the gold labels a model never saw said once."""

from __future__ import annotations

import pytest

from spanbert.errors import DataError, SpanBertError
from spanbert.tasks.scores import match_by_id, percent, warn_unseen


def test_percent_scales_the_floats_and_keeps_counts_and_the_kept_keys():
    got = percent({"f1": 0.5, "n": 7, "threshold": 0.25, "per_type": {"PER": 0.75, "count": 3}}, keep=("threshold",))
    assert got == {"f1": 50.0, "n": 7, "threshold": 0.25, "per_type": {"PER": 75.0, "count": 3}}


def test_predictions_are_matched_by_id_in_the_datas_order():
    assert match_by_id("p.json", {"b": 2, "a": 1, "c": 3}, ["a", "b", "c"], "the dev data") == [1, 2, 3]


def test_a_missing_an_extra_or_a_repeated_id_is_an_error_naming_them(tmp_path):
    with pytest.raises(DataError, match=r"no prediction for 1 example id\(s\) \['c'\] and 1 id\(s\) that are not in "
                                        r"the dev data \['z'\]"):  # fmt: skip
        match_by_id(tmp_path / "p.json", {"a": 1, "b": 2, "z": 9}, ["a", "b", "c"], "the dev data")
    with pytest.raises(SpanBertError, match=r"the dev data repeats the id\(s\) \['a'\]"):
        match_by_id("p.json", {"a": 1}, ["a", "a"], "the dev data")


def test_unseen_gold_labels_are_warned_about_and_returned(capsys):
    unseen = warn_unseen("dev.txt", ["PER", "LOC", "MISC", "MISC"], ["PER", "LOC"], "tag", "the training data")
    assert unseen == ["MISC"]
    err = capsys.readouterr().err
    assert "dev.txt: 2 gold tag(s) ['MISC'] never occur in the training data" in err and "count as misses" in err
    assert warn_unseen("dev.txt", ["PER"], ["PER"], "tag", "the training data") == []
    assert capsys.readouterr().err == ""
