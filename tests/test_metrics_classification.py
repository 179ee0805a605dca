"""Classification metrics against hand-computed values (and scipy/sklearn formulas where they apply)."""

from __future__ import annotations

import math

import pytest

from spanbert.metrics.classification import (
    accuracy,
    average_ranks,
    binary_f1,
    conll_chunks,
    conlleval,
    matthews_corrcoef,
    pearson,
    semeval_official,
    spearman,
    tacred_prf,
)


def test_tacred_micro_f1_excludes_no_relation():
    gold = ["per:age", "per:age", "no_relation", "org:founded", "no_relation"]
    pred = ["per:age", "no_relation", "org:founded", "org:founded", "no_relation"]
    # guessed: 3 non-negative predictions; gold: 3 non-negative labels; correct: positions 0 and 3
    r = tacred_prf(gold, pred)
    assert r["precision"] == pytest.approx(2 / 3)
    assert r["recall"] == pytest.approx(2 / 3)
    assert r["f1"] == pytest.approx(2 / 3)


def test_tacred_scorer_edge_conventions():
    # the official scorer: precision 1.0 when nothing is guessed, recall 0.0 without gold relations
    r = tacred_prf(["per:age", "no_relation"], ["no_relation", "no_relation"])
    assert (r["precision"], r["recall"], r["f1"]) == (1.0, 0.0, 0.0)
    r = tacred_prf(["no_relation"], ["per:age"])
    assert (r["precision"], r["recall"], r["f1"]) == (0.0, 0.0, 0.0)
    # a correct no_relation is not a hit: only the relation counts
    r = tacred_prf(["no_relation", "per:age"], ["no_relation", "per:title"])
    assert r["precision"] == 0.0 and r["recall"] == 0.0


def test_semeval_official_wrong_direction_is_an_error_but_a_prediction():
    CE12, CE21, MT12 = "Cause-Effect(e1,e2)", "Cause-Effect(e2,e1)", "Message-Topic(e1,e2)"
    gold = [CE12, CE12, "Other", MT12, MT12]
    pred = [CE21, CE12, CE12, MT12, "Other"]
    r = semeval_official(gold, pred)
    # Cause-Effect: 1 hit; 3 predictions of Cause-Effect (one with the wrong direction); 2 gold
    p_ce, r_ce = 1 / 3, 1 / 2
    f_ce = 2 * p_ce * r_ce / (p_ce + r_ce)  # 0.4
    # Message-Topic: 1 hit, 1 prediction, 2 gold -> P 1, R 0.5, F1 2/3
    f_mt = 2 * 1 * 0.5 / 1.5
    assert r["macro_f1"] == pytest.approx((f_ce + f_mt) / 2)
    assert r["macro_precision"] == pytest.approx((p_ce + 1.0) / 2)
    assert r["micro_precision"] == pytest.approx(2 / 4)
    assert r["micro_recall"] == pytest.approx(2 / 4)
    assert r["accuracy"] == pytest.approx(2 / 5)


def test_semeval_official_matches_the_scripts_printed_example():
    # The scorer's own example output (one relation): Cause-Effect P = 307/(370 + 0), R = 307/326.
    gold = ["Cause-Effect(e1,e2)"] * 326 + ["Other"] * 63
    pred = ["Cause-Effect(e1,e2)"] * 307 + ["Other"] * 19 + ["Cause-Effect(e1,e2)"] * 63
    r = semeval_official(gold, pred)
    assert round(100 * r["macro_precision"], 2) == 82.97
    assert round(100 * r["macro_recall"], 2) == 94.17
    assert round(100 * r["macro_f1"], 2) == 88.22


def test_accuracy_and_binary_f1():
    gold = [1, 1, 0, 0, 1]
    pred = [1, 0, 0, 1, 1]
    assert accuracy(gold, pred) == pytest.approx(3 / 5)
    # tp 2, fp 1, fn 1 -> F1 = 4 / 6
    assert binary_f1(gold, pred) == pytest.approx(2 / 3)
    assert binary_f1([0, 0], [0, 0]) == 0.0


def test_matthews_corrcoef_binary_and_degenerate():
    gold = [1, 1, 1, 0, 0, 0, 0, 1]
    pred = [1, 1, 0, 0, 0, 1, 0, 1]
    tp, tn, fp, fn = 3, 3, 1, 1
    expected = (tp * tn - fp * fn) / math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    assert matthews_corrcoef(gold, pred) == pytest.approx(expected)  # 0.5
    assert matthews_corrcoef(gold, [1 - g for g in gold]) == pytest.approx(-1.0)
    assert matthews_corrcoef(gold, [1] * len(gold)) == 0.0  # constant prediction: undefined -> 0


def test_matthews_corrcoef_labels_may_be_strings():
    assert matthews_corrcoef(["1", "0", "1", "0"], ["1", "0", "1", "0"]) == pytest.approx(1.0)


def test_pearson_and_spearman_with_ties():
    x = [1.0, 2.0, 2.0, 3.0, 5.0]
    y = [2.0, 1.0, 4.0, 4.0, 6.0]
    assert average_ranks(x) == [1.0, 2.5, 2.5, 4.0, 5.0]
    assert average_ranks(y) == [2.0, 1.0, 3.5, 3.5, 5.0]
    # Pearson of the average ranks, by hand: rx - 3 = [-2, -.5, -.5, 1, 2], ry - 3 = [-1, -2, .5, .5, 2]
    sxy = 2 + 1 - 0.25 + 0.5 + 4
    sxx = 4 + 0.25 + 0.25 + 1 + 4
    syy = 1 + 4 + 0.25 + 0.25 + 4
    assert spearman(x, y) == pytest.approx(sxy / math.sqrt(sxx * syy))  # 0.7368...
    # Pearson by hand: mean x 2.6, mean y 3.4
    dx = [a - 2.6 for a in x]
    dy = [b - 3.4 for b in y]
    expected = sum(a * b for a, b in zip(dx, dy)) / math.sqrt(sum(a * a for a in dx) * sum(b * b for b in dy))
    assert pearson(x, y) == pytest.approx(expected)
    assert pearson([1.0, 1.0], [1.0, 2.0]) == 0.0


def test_conll_chunks_iob2_and_ill_formed_sequences():
    assert conll_chunks(["B-PER", "I-PER", "O", "B-LOC"]) == [(0, 1, "PER"), (3, 3, "LOC")]
    # an I- after O starts an entity (conlleval), and so does an I- of another type
    assert conll_chunks(["O", "I-PER", "I-PER", "I-LOC"]) == [(1, 2, "PER"), (3, 3, "LOC")]
    # B- directly after an entity of the same type ends it and starts a new one
    assert conll_chunks(["B-ORG", "B-ORG", "I-ORG"]) == [(0, 0, "ORG"), (1, 2, "ORG")]
    # IOB1: consecutive I- of one type form one entity
    assert conll_chunks(["I-MISC", "I-MISC", "O"]) == [(0, 1, "MISC")]
    # IOBES
    assert conll_chunks(["S-PER", "B-LOC", "E-LOC", "O"]) == [(0, 0, "PER"), (1, 2, "LOC")]


def test_iobes_is_read_as_documented_chunks_not_as_conlleval():
    """conlleval (2004) has no S- rule and does not split E-X B-X; we read IOBES as the chunks it
    denotes (documented in docs/tasks.md): S-X alone, E-X closes, B-X after E-X opens a new entity."""
    assert conll_chunks(["S-PER", "S-PER"]) == [(0, 0, "PER"), (1, 1, "PER")]
    assert conll_chunks(["B-LOC", "E-LOC", "B-LOC", "E-LOC"]) == [(0, 1, "LOC"), (2, 3, "LOC")]
    assert conll_chunks(["B-ORG", "I-ORG", "E-ORG", "S-ORG"]) == [(0, 2, "ORG"), (3, 3, "ORG")]
    # an E- or I- after a closed entity starts a new one (ill-formed, read as conlleval reads I- after O)
    assert conll_chunks(["S-PER", "E-PER"]) == [(0, 0, "PER"), (1, 1, "PER")]
    # IOB2 is unchanged: exactly conlleval
    assert conll_chunks(["B-PER", "I-PER", "B-PER"]) == [(0, 1, "PER"), (2, 2, "PER")]


def test_conlleval_entity_level_scores():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    pred = [["B-PER", "O", "O", "B-LOC"], ["I-ORG", "O"]]
    r = conlleval(gold, pred)
    # gold: PER(0-1), LOC(3), ORG(0); predicted: PER(0), LOC(3), ORG(0) via I- after sentence start
    assert r["gold_entities"] == 3 and r["predicted_entities"] == 3
    assert r["precision"] == pytest.approx(2 / 3)
    assert r["recall"] == pytest.approx(2 / 3)
    assert r["f1"] == pytest.approx(2 / 3)
    assert r["per_type"]["PER"]["f1"] == 0.0
    assert r["per_type"]["LOC"]["f1"] == 1.0
    assert r["accuracy"] == pytest.approx(4 / 6)  # token tags: 2 of 6 differ (I-PER vs O, B-ORG vs I-ORG)


def test_length_mismatch_is_an_error():
    with pytest.raises(ValueError, match="one prediction per example"):
        accuracy([1, 2], [1])
    with pytest.raises(ValueError, match="sentence 0"):
        conlleval([["O", "O"]], [["O"]])
