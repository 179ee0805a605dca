"""Issue 22.1: every `spanbert evaluate` matches predictions to gold by id (or, where the official
format has none, by what identifies a record), so a predictions file in another order scores exactly
the same, and the missing, extra or repeated ids are an error naming the first few."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from spanbert.cli import main


def _evaluate(argv: list, capsys) -> dict:
    capsys.readouterr()
    assert main([str(a) for a in argv]) == 0
    return json.loads(capsys.readouterr().out)


def _shuffled(lines: list[str], seed: int = 0) -> list[str]:
    out = list(lines)
    while out == lines:
        random.Random(seed).shuffle(out)
        seed += 1
    return out


# ---- GLUE: the index column (the row number in a dev file without one)
def _sst2(tmp: Path, n: int = 40) -> tuple[Path, list[str]]:
    gold = [str((i * 7) % 3 % 2) for i in range(n)]
    d = tmp / "SST-2"
    d.mkdir()
    (d / "dev.tsv").write_text("sentence\tlabel\n" + "".join(f"sentence {i}\t{g}\n" for i, g in enumerate(gold)))
    return d, gold


def test_glue_gold_as_predictions_in_any_order_scores_100(tmp_path, capsys):
    d, gold = _sst2(tmp_path)
    rows = [f"{i}\t{g}" for i, g in enumerate(gold)]
    for name, body in [("in_order", rows), ("shuffled", _shuffled(rows)), ("sorted", sorted(rows, key=lambda r: r[-1]))]:
        p = tmp_path / f"{name}.tsv"
        p.write_text("index\tprediction\n" + "\n".join(body) + "\n")
        m = _evaluate(["evaluate", "glue", "--task", "SST-2", "--data_dir", d, "--predictions", p], capsys)
        assert m["accuracy"] == 100.0, name


def test_glue_shuffled_predictions_score_the_same_as_in_order(tmp_path, capsys):
    d, gold = _sst2(tmp_path)
    pred = [str((i * 5) % 2) for i in range(len(gold))]  # some right, some wrong
    rows = [f"{i}\t{p}" for i, p in enumerate(pred)]
    scores = []
    for name, body in [("a", rows), ("b", _shuffled(rows, 3))]:
        p = tmp_path / f"{name}.tsv"
        p.write_text("index\tprediction\n" + "\n".join(body) + "\n")
        scores.append(_evaluate(["evaluate", "glue", "--task", "SST-2", "--data_dir", d, "--predictions", p], capsys))
    assert scores[0] == scores[1] and 0 < scores[0]["accuracy"] < 100


@pytest.mark.parametrize(
    "body, contains",
    [
        pytest.param(lambda rows: rows[1:], "no prediction for 1 example id(s) ['0']", id="missing"),
        pytest.param(lambda rows: rows + ["40\t1"], "1 id(s) that are not in the dev data ['40']", id="extra"),
        pytest.param(lambda rows: rows[:-1] + ["x\t1"], "and 1 id(s) that are not in the dev data ['x']", id="swapped"),
    ],
)
def test_glue_id_sets_that_differ_are_an_error_naming_them(tmp_path, cli_error, body, contains):
    d, gold = _sst2(tmp_path)
    p = tmp_path / "p.tsv"
    p.write_text("index\tprediction\n" + "\n".join(body([f"{i}\t{g}" for i, g in enumerate(gold)])) + "\n")
    cli_error(["evaluate", "glue", "--task", "SST-2", "--data_dir", d, "--predictions", p], names=p, contains=contains)


# ---- SemEval and TACRED: ids (TACRED's bare labels, scorer.py's format, have none: by line)
SEMEVAL_BLOCK = '{i}\t"The <e1>child{i}</e1> was carried into the <e2>cradle</e2> by the mother."\n{label}\nComment:\n\n'
LABELS = ["Entity-Destination(e1,e2)", "Other", "Cause-Effect(e2,e1)", "Message-Topic(e1,e2)"]


def test_semeval_shuffled_predictions_score_the_same(tmp_path, capsys):
    gold = [LABELS[i % 4] for i in range(1, 21)]
    d = tmp_path / "TEST.TXT"
    d.write_text("".join(SEMEVAL_BLOCK.format(i=i, label=g) for i, g in enumerate(gold, 1)))
    rows = [f"{i}\t{LABELS[(i * 3) % 4]}" for i in range(1, 21)]
    scores = []
    for name, body in [("a", rows), ("b", _shuffled(rows))]:
        p = tmp_path / f"{name}.txt"
        p.write_text("\n".join(body) + "\n")
        scores.append(_evaluate(["evaluate", "semeval", "--data", d, "--predictions", p], capsys))
    assert scores[0] == scores[1]


def _tacred(tmp: Path, relations: list[str]) -> Path:
    rec = {"token": ["Alice", "was", "born", "in", "Paris", "."], "subj_start": 0, "subj_end": 0, "obj_start": 4,
           "obj_end": 4, "subj_type": "PERSON", "obj_type": "CITY"}  # fmt: skip
    d = tmp / "dev.json"
    d.write_text(json.dumps([{**rec, "id": f"t{i}", "relation": r} for i, r in enumerate(relations)]))
    return d


def test_tacred_predictions_with_ids_score_as_bare_labels_in_order(tmp_path, capsys):
    gold = ["per:city_of_birth", "no_relation", "per:title", "no_relation", "per:city_of_birth", "per:title"]
    pred = ["per:city_of_birth", "per:title", "per:title", "no_relation", "no_relation", "per:title"]
    d = _tacred(tmp_path, gold)
    bare = tmp_path / "bare.txt"
    bare.write_text("\n".join(pred) + "\n")
    ids = tmp_path / "ids.txt"
    ids.write_text("\n".join(_shuffled([f"t{i}\t{p}" for i, p in enumerate(pred)])) + "\n")
    a = _evaluate(["evaluate", "tacred", "--data", d, "--predictions", bare], capsys)
    b = _evaluate(["evaluate", "tacred", "--data", d, "--predictions", ids], capsys)
    assert a == b and 0 < a["f1"] < 100


def test_tacred_bare_labels_of_another_count_are_an_error(tmp_path, cli_error):
    d = _tacred(tmp_path, ["no_relation", "per:title"])
    p = tmp_path / "p.txt"
    p.write_text("no_relation\n")
    cli_error(["evaluate", "tacred", "--data", d, "--predictions", p], names=p, contains="found 1 predicted labels")


# ---- NER: conlleval's format has no ids; a sentence's words identify it
CONLL = "-DOCSTART- -X- -X- O\n\n" + "".join(
    f"W{i} NNP B-NP {'B-PER' if i % 3 else 'O'}\nsaid VBD B-VP O\nX{i} NNP B-NP {'B-LOC' if i % 2 else 'O'}\n\n"
    for i in range(12)
)


def test_ner_sentences_in_another_order_score_the_same(tmp_path, capsys):
    d = tmp_path / "dev.txt"
    d.write_text(CONLL)
    blocks = [
        f"W{i} {'B-PER' if i % 3 else 'O'} {'B-PER' if i % 2 else 'O'}\nsaid O O\nX{i} {'B-LOC' if i % 2 else 'O'} B-LOC\n"
        for i in range(12)
    ]
    scores = []
    for name, body in [("a", blocks), ("b", _shuffled(blocks))]:
        p = tmp_path / f"{name}.txt"
        p.write_text("\n".join(body))
        scores.append(_evaluate(["evaluate", "ner", "--data", d, "--predictions", p], capsys))
    assert scores[0] == scores[1] and 0 < scores[0]["f1"] < 100


def test_ner_missing_sentence_is_an_error_naming_its_line(tmp_path, cli_error):
    d = tmp_path / "dev.txt"
    d.write_text(CONLL)
    p = tmp_path / "p.txt"
    p.write_text("".join(f"W{i} O O\nsaid O O\nX{i} O O\n\n" for i in range(11)))  # W11's sentence is missing
    cli_error(["evaluate", "ner", "--data", d, "--predictions", p], names=p,
              contains="no predicted sentence with the words of the data file's sentence at line 47 ('W11 said X11')")  # fmt: skip


# ---- SQuAD: question ids (the official scripts'); unknown ids are said, not silently dropped
SQUAD = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": "Alice was born in Paris.", "qas": [
    {"id": f"q{i}", "question": "Where?", "answers": [{"text": "Paris", "answer_start": 18}]} for i in range(6)
]}]}]}  # fmt: skip


def test_squad_predictions_in_any_order_score_the_same_and_unknown_ids_are_said(tmp_path, capsys):
    d = tmp_path / "dev.json"
    d.write_text(json.dumps(SQUAD))
    pred = {f"q{i}": "Paris" if i % 2 else "Alice" for i in range(6)}
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(pred))
    b.write_text(json.dumps(dict(list(reversed(pred.items())) + [("zz", "Rome")])))
    ma = _evaluate(["evaluate", "squad", "--data", d, "--predictions", a], capsys)
    capsys.readouterr()
    assert main(["evaluate", "squad", "--data", str(d), "--predictions", str(b)]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out) == ma and ma["exact_match"] == 50.0
    assert "1 of 7 predictions are for question ids not in" in out.err and "(zz)" in out.err
