"""SQuAD v1.1 / v2.0 / MRQA metrics on hand-made cases whose scores are worked out by hand."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from spanbert.errors import SpanBertError
from spanbert.metrics import squad as m

DATA = Path(__file__).parents[1] / "../shared/data/squad"


def _dataset(qas: list[tuple[str, list[str]]]) -> list[dict]:
    return [
        {
            "paragraphs": [
                {"context": "", "qas": [{"id": q, "answers": [{"text": t} for t in golds]} for q, golds in qas]}
            ]
        }
    ]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("The Denver Broncos!", "denver broncos"),
        ("  an   apple,  a  pear ", "apple pear"),
        ("Theatre and another answer", "theatre and another answer"),  # articles only as whole words
        ("A.B.C.", "abc"),  # punctuation removed before articles: "a" stays part of "abc"
        ("the", ""),
        ("Éclair — “quoted”", "éclair — “quoted”"),  # only ASCII punctuation is removed, as official
    ],
)
def test_normalize_answer(text: str, expected: str) -> None:
    assert m.normalize_answer(text) == expected


def test_v1_em_f1_max_over_golds_and_missing() -> None:
    dataset = _dataset(
        [
            ("q1", ["The Denver Broncos", "Broncos"]),
            ("q2", ["Santa Clara, California"]),
            ("q3", ["an apple"]),
            ("q4", ["never answered"]),
        ]
    )
    preds = {"q1": "denver broncos!", "q2": "in Santa Clara", "q3": ""}
    with pytest.warns(UserWarning, match="q4"):
        out = m.evaluate_v1(dataset, preds)
    # q1 exact via the first gold; q2 P = R = 2/3; q3 empty prediction scores 0; q4 missing scores 0
    f1_q2 = (2 * (2 / 3) * (2 / 3)) / (2 / 3 + 2 / 3)
    assert out == {"exact_match": 25.0, "f1": 100.0 * (1.0 + f1_q2) / 4}
    assert list(out) == ["exact_match", "f1"]


def test_v1_and_v2_differ_on_empty_answers_as_the_official_scripts() -> None:
    # gold "a" normalises to "": v1.1 F1 is 0 (no shared token), v2.0 F1 is 1 (both no-answer)
    assert m.exact_match_score_v1("the", "a") is True
    assert m.f1_score_v1("the", "a") == 0
    assert m.compute_f1("a", "the") == 1
    assert m.compute_f1("", "something") == 0
    assert m.compute_exact("", "") == 1


def test_v2_breakdown_and_threshold_search() -> None:
    dataset = [
        {
            "paragraphs": [
                {
                    "context": "",
                    "qas": [
                        {"id": "h1", "answers": [{"text": "Paris"}], "is_impossible": False},
                        {"id": "h2", "answers": [{"text": "blue whale"}], "is_impossible": False},
                        {"id": "n1", "answers": [], "is_impossible": True},
                        {"id": "n2", "answers": [], "is_impossible": True},
                    ],
                }
            ]
        }
    ]
    preds = {"h1": "Paris", "h2": "whale shark", "n1": "something", "n2": ""}
    na = {"h1": 0.1, "n1": 0.2, "h2": 0.3, "n2": 0.4}
    out = m.evaluate_v2(dataset, preds, na)
    f1_h2 = (2 * 0.5 * 0.5) / (0.5 + 0.5)  # "whale" shared: P = R = 1/2
    assert list(out) == [
        "exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total", "NoAns_exact", "NoAns_f1",
        "NoAns_total", "best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh",
    ]  # fmt: skip
    assert out["exact"] == 50.0 and out["total"] == 4
    assert out["f1"] == 100.0 * (1 + f1_h2 + 0 + 1) / 4
    assert (out["HasAns_exact"], out["HasAns_f1"], out["HasAns_total"]) == (50.0, 100.0 * (1 + f1_h2) / 2, 2)
    assert (out["NoAns_exact"], out["NoAns_f1"], out["NoAns_total"]) == (50.0, 50.0, 2)
    # walk by na prob: start 2 (both NoAns right); h1 +1 -> 3 at 0.1; n1 -1 -> 2; h2 +0 (EM) / +0.5 (F1); n2 +0
    assert (out["best_exact"], out["best_exact_thresh"]) == (75.0, 0.1)
    assert (out["best_f1"], out["best_f1_thresh"]) == (75.0, 0.1)
    # with h2 F1 of 1 the F1 walk reaches 3 again at 0.3: ties keep the earlier (lower) threshold
    preds2 = {**preds, "h2": "blue whale"}
    out2 = m.evaluate_v2(dataset, preds2, na)
    assert (out2["best_f1"], out2["best_f1_thresh"]) == (75.0, 0.1)
    # na prob above the applied threshold (default 1.0) makes a question "no answer"
    out3 = m.evaluate_v2(dataset, preds, {**na, "n1": 2.0, "h1": 1.5})
    assert out3["NoAns_exact"] == 100.0 and out3["HasAns_exact"] == 0.0


def test_v2_without_na_probs_has_no_best_keys_and_missing_prediction_is_an_error() -> None:
    dataset = _dataset([("a", ["x y"]), ("b", [])])
    out = m.evaluate_v2(dataset, {"a": "x", "b": ""})
    assert "best_f1" not in out
    assert out["total"] == 2 and out["exact"] == 50.0 and out["f1"] == 100.0 * ((2 * 1 * 0.5) / 1.5 + 1) / 2
    with pytest.raises(SpanBertError, match="no answer for 1 of 2 questions .*'b'"):
        m.evaluate_v2(dataset, {"a": "x"})
    with pytest.raises(SpanBertError, match="no-answer probability file has no entry"):
        m.evaluate_v2(dataset, {"a": "x", "b": ""}, {"a": 0.5})


def test_mrqa_counts_missing_unless_skipped() -> None:
    answers = {"a": ["The Broncos", "Denver Broncos"], "b": ["7"]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert m.evaluate_mrqa(answers, {"a": "Broncos"}) == {"exact_match": 50.0, "f1": 50.0}
        assert m.evaluate_mrqa(answers, {"a": "Broncos"}, skip_no_answer=True) == {"exact_match": 100.0, "f1": 100.0}


def test_v1_counts_each_question_as_it_comes_as_the_official_script() -> None:
    # evaluate-v1.1.py loops over the questions, not over their ids: a repeated id counts twice
    dataset = _dataset([("q1", ["Broncos"]), ("q1", ["Broncos"]), ("q2", ["Panthers"])])
    assert m.evaluate_v1(dataset, {"q1": "Broncos", "q2": "Panthers"}) == {"exact_match": 100.0, "f1": 100.0}
    assert m.evaluate_v1(dataset, {"q1": "Broncos", "q2": "no"}) == {"exact_match": 200 / 3, "f1": 200 / 3}


@pytest.mark.realdata
def test_gold_answers_score_100_on_official_dev_files() -> None:
    if not DATA.is_dir():
        pytest.skip(f"SQuAD data not found at {DATA}")
    v1 = json.loads((DATA / "dev-v1.1.json").read_text())
    preds = {qa["id"]: qa["answers"][0]["text"] for a in v1["data"] for p in a["paragraphs"] for qa in p["qas"]}
    assert m.evaluate_v1(v1["data"], preds) == {"exact_match": 100.0, "f1": 100.0}
    v2 = json.loads((DATA / "dev-v2.0.rebuilt.json").read_text())
    assert m.is_v2_dataset(v2) and not m.is_v2_dataset(v1)
    qas = [qa for a in v2["data"] for p in a["paragraphs"] for qa in p["qas"]]
    preds = {qa["id"]: qa["answers"][0]["text"] if qa["answers"] else "" for qa in qas}
    out = m.evaluate_v2(v2["data"], preds)
    assert (out["exact"], out["f1"], out["total"]) == (100.0, 100.0, 11873)
    assert (out["HasAns_total"], out["NoAns_total"]) == (5928, 5945)
