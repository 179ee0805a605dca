"""Reading extractive-QA data (`spanbert.tasks.qa.data`): SQuAD v1.1 and v2.0, MRQA plain and gzipped (training on
the earliest span over all detected answers), and malformed files named with what was found and expected."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from test_qa import _write, synthetic_squad

from spanbert.errors import DataError, SpanBertError
from spanbert.tasks import qa


def test_read_squad_v1_and_v2(tmp_path: Path) -> None:
    d1 = qa.read_squad(_write(tmp_path / "v1.json", synthetic_squad(2)))
    assert not d1.version_2 and len(d1.contexts) == 4 and len(d1.examples) == 8 and d1.num_articles == 2
    ex = d1.examples[1]
    assert d1.contexts[ex.context_index][ex.answer_start : ex.answer_end] == ex.answers[0]
    d2 = qa.read_squad(_write(tmp_path / "v2.json", synthetic_squad(2, unanswerable=True)))
    assert d2.version_2
    impossible = [e for e in d2.examples if e.is_impossible]
    assert len(impossible) == 4 and all(e.answers == [] and e.answer_start == -1 for e in impossible)
    # article halves, as for training and testing on the two halves of SQuAD 2.0 dev
    first, second = d2.select_articles(":1"), d2.select_articles("1:")
    assert {e.article for e in first.examples} == {0} and {e.article for e in second.examples} == {1}
    assert len(first.raw["data"]) == 1
    dropped, n = d1.drop_ids({"q0-0-0", "nope"})
    assert n == 1 and "q0-0-0" not in {e.qid for e in dropped.examples}


def test_read_mrqa_plain_and_gz(tmp_path: Path) -> None:
    ctx = "The Broncos beat the Panthers 24-10 in Santa Clara."
    lines = [
        {"header": {"dataset": "SQuAD", "split": "dev"}},
        {
            "context": ctx,
            "qas": [
                {
                    "qid": "u1",
                    "id": "orig1",
                    "question": "Who won?",
                    "answers": ["The Broncos", "Broncos"],
                    "detected_answers": [{"text": "The Broncos", "char_spans": [[4, 10]], "token_spans": [[1, 1]]}],
                }
            ],
        },
    ]
    text = "\n".join(json.dumps(x) for x in lines) + "\n"
    for path in (tmp_path / "d.jsonl", tmp_path / "d.jsonl.gz"):
        if path.suffix == ".gz":
            with gzip.open(path, "wt", encoding="utf-8") as f:
                f.write(text)
        else:
            path.write_text(text)
        data = qa.read_mrqa(path)
        (ex,) = data.examples
        # prediction key is the MRQA qid; the char span end is inclusive
        assert ex.qid == "u1" and ctx[ex.answer_start : ex.answer_end] == "Broncos"


def test_mrqa_trains_on_the_earliest_span_over_all_detected_answers(tmp_path: Path) -> None:
    """As the released reader (run_mrqa.py: ``sorted(all char_spans)[0]``), not the first span of the
    first detected answer: the smallest start, then the smallest end."""
    ctx = "Paris is big. The capital, Paris, is in France; Paris again."
    qa_line = {
        "context": ctx,
        "qas": [
            {
                "qid": "q",
                "question": "Which city?",
                "answers": ["the capital, Paris", "Paris"],
                "detected_answers": [
                    {"text": "The capital, Paris", "char_spans": [[14, 31]]},
                    {"text": "Paris", "char_spans": [[48, 52], [0, 4], [27, 31]]},
                ],
            },
            {
                "qid": "r",
                "question": "Which city again?",
                "answers": ["The capital", "The capital, Paris"],
                "detected_answers": [
                    {"text": "The capital, Paris", "char_spans": [[14, 31]]},
                    {"text": "The capital", "char_spans": [[14, 24]]},
                ],
            },
        ],
    }
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"header": {}}) + "\n" + json.dumps(qa_line) + "\n")
    q, r = qa.read_mrqa(path).examples
    assert (q.answer_start, q.answer_end) == (0, 5) and ctx[q.answer_start : q.answer_end] == "Paris"
    assert ctx[r.answer_start : r.answer_end] == "The capital"  # same start: the shorter span first
    detected = [{"char_spans": [[0, 4]]}, {"char_spans": [[3]]}]  # every span is checked, not the first only
    bad = {**qa_line, "qas": [{**qa_line["qas"][0], "detected_answers": detected}]}
    path.write_text(json.dumps(bad) + "\n")
    with pytest.raises(DataError, match=r"jsonl:1 \(record qid q\): detected_answers\[1\]\.char_spans holds \[3\]"):
        qa.read_mrqa(path)


@pytest.mark.parametrize(
    "content, match",
    [
        ('{"version": "1.1", "data": [{"paragraphs": [{"context": "ab', r"bad\.json:1: not valid JSON.*truncated"),
        ('[1, 2]', r"expected SQuAD JSON"),
        ('{"data": [{"paragraphs": [{"context": "abc", "qas": [{"id": "x1", "answers": [{"text": "c", "answer_start": 2}]}]}]}]}',
         r"record id x1\): missing field 'question'"),
        ('{"data": [{"paragraphs": [{"context": "abc", "qas": [{"id": "x2", "question": "q?", "answers": [{"text": "cd", "answer_start": 2}]}]}]}]}',
         r"record id x2\).*ends at 4, outside the context of 3 characters"),
        ('{"data": [{"paragraphs": [{"context": "abc", "qas": [{"id": "x3", "question": "q?", "answers": [{"text": "b", "answer_start": 0}]}]}]}]}',
         r"record id x3\).*points at 'a', expected the answer text 'b'"),
        ('{"data": [{"paragraphs": [{"context": "abc", "qas": [{"id": "x4", "question": "q?", "answers": [{"text": "b", "answer_start": "1"}]}]}]}]}',
         r"field 'answer_start' is str '1', expected int"),
        ('{"data": [{"paragraphs": [{"qas": []}]}]}', r"record data\[0\]\.paragraphs\[0\]\): missing field 'context'"),
    ],
)  # fmt: skip
def test_bad_squad_files(tmp_path: Path, content: str, match: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(DataError, match=match):
        qa.read_squad(path)


def test_bad_mrqa_files(tmp_path: Path) -> None:
    good = {
        "context": "abc",
        "qas": [{"qid": "m1", "question": "q", "answers": ["b"], "detected_answers": [{"char_spans": [[1, 1]]}]}],
    }
    bad_span = {
        "context": "abc",
        "qas": [{"qid": "m2", "question": "q", "answers": ["b"], "detected_answers": [{"char_spans": [[1, 7]]}]}],
    }
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad_span) + "\n")
    with pytest.raises(
        DataError, match=r"bad\.jsonl:2 \(record qid m2\): char span \[1, 7\].*outside the context of 3"
    ):
        qa.read_mrqa(path)
    path.write_text(json.dumps(good) + "\n" + '{"context": "abc", "qas": [\n')
    with pytest.raises(DataError, match=r"bad\.jsonl:2: not valid JSON"):
        qa.read_mrqa(path)
    gz = tmp_path / "cut.jsonl.gz"
    gz.write_bytes(gzip.compress((json.dumps(good) + "\n").encode() * 50)[:-30])
    with pytest.raises(DataError, match="truncated gzip"):
        qa.read_mrqa(gz)
    with pytest.raises(SpanBertError, match="file not found"):
        qa.read_mrqa(tmp_path / "missing.jsonl")
