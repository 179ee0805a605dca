"""Dev cut into a selection half and a held-out half (`spanbert.tasks.splits`): a seeded partition by record, the
halves written in the dev file's own format (its header, its line endings), a restriction applied before the cut.
The study's use of them, a format per task, is tested in test_study_heldout.py."""

from __future__ import annotations

import json

import pytest

from spanbert import study as S
from spanbert.errors import SpanBertError
from spanbert.tasks.splits import FORMATS, HELDOUT_SEED, RecordSplit, restricted, split_half


def test_jsonl_after_a_header_keeps_the_header_in_both_halves(tmp_path):
    lines = [json.dumps({"header": {"dataset": "SQuAD"}})] + [json.dumps({"id": i}) for i in range(7)]
    dev = tmp_path / "dev.jsonl"
    dev.write_text("\n".join(lines))  # no newline at the end: each half still ends its lines
    rule = RecordSplit(".jsonl", "jsonl-after-header")
    said = rule.split("train.jsonl", str(dev), {}, tmp_path)
    select, held = rule.halves("train.jsonl", str(dev), {}, tmp_path)
    assert said == {"dev": str(dev), "seed": HELDOUT_SEED, "records": 7, "select": 4, "heldout": 3}
    halves = [p.read_text().splitlines(keepends=True) for p in (select, held)]
    assert all(h[0] == lines[0] + "\n" and all(x.endswith("\n") for x in h) for h in halves)
    ids = [[json.loads(x)["id"] for x in h[1:]] for h in halves]
    assert ids == [[i for i in range(7) if i in split_half(7)[0]], split_half(7)[1]]


def test_a_restriction_is_applied_before_the_cut(tmp_path):
    dev = tmp_path / "dev.tsv"
    dev.write_text("sentence\tlabel\r\n" + "".join(f"s{i}\t{i % 2}\r\n" for i in range(10)))
    rule = RecordSplit(".tsv", "rows-after-header", restriction=("max_eval_examples",))
    assert rule.split("t", str(dev), {"max_eval_examples": 4}, tmp_path)["records"] == 4
    rows = [p.read_bytes().decode() for p in rule.halves("t", str(dev), {}, tmp_path)]
    assert all(r.startswith("sentence\tlabel\r\n") for r in rows)
    assert sorted(x for r in rows for x in r.split("\r\n")[1:] if x) == [f"s{i}\t{i % 2}" for i in range(4)]
    assert restricted({"max_eval_examples": None, "other": 2}, ("max_eval_examples", "other")) == ("other", 2)
    assert restricted({}, ("max_eval_examples",)) == ("", None)


def test_a_file_of_one_record_and_an_unknown_format_are_refused(tmp_path):
    dev = tmp_path / "dev.json"
    dev.write_text(json.dumps([{"id": "1"}]))
    with pytest.raises(SpanBertError, match=r"dev.json: found 1 record\(s\), expected at least 2"):
        RecordSplit(".json", "json-list").split("t", str(dev), {}, tmp_path)
    with pytest.raises(ValueError, match="found record format 'csv', expected one of: " + ", ".join(FORMATS)):
        RecordSplit(".csv", "csv")


def test_split_half_is_a_seeded_partition():
    select, held = S.split_half(11)
    assert sorted(select + held) == list(range(11)) and len(held) == 5 and len(select) == 6
    assert select == sorted(select) and held == sorted(held)
    assert S.split_half(11) == (select, held)  # fixed by the seed: every cell scored on the same half
    assert S.split_half(11, seed=1) != (select, held)
    assert S.split_half(2) in (([0], [1]), ([1], [0]))
    with pytest.raises(ValueError):
        S.split_half(1)


def test_header_and_plain_row_formats_cut_every_line_into_one_half():
    text = "a\nb\nc\nd\ne\n"
    head, rows = FORMATS["rows"].read(text)
    assert head == [] and rows == ["a\n", "b\n", "c\n", "d\n", "e\n"]
    select, held = split_half(len(rows))
    halves = [FORMATS["rows"].write(head, [rows[i] for i in ix]) for ix in (select, held)]
    assert sorted("".join(halves).split()) == list("abcde")  # no line in both halves, none lost
    head, rows = FORMATS["rows-after-header"].read("label\tsentence\n" + text)
    assert head == ["label\tsentence\n"] and len(rows) == 5
    assert FORMATS["rows-after-header"].write(head, rows[:2]) == "label\tsentence\na\nb\n"
