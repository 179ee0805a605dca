"""EVALB with COLLINS.prm on hand-made tree pairs; every expected figure is derived by hand from the
rules in evalb.c / COLLINS.prm (spelled out in each case's comment), not from running the code."""

from __future__ import annotations

import pytest

from spanbert.metrics.evalb import (
    COLLINS,
    ERROR,
    OK,
    SKIP,
    EvalbAbort,
    EvalbParams,
    cut_label,
    evalb,
    read_bracketing,
    score_sentence,
    summary_text,
)

# gold S(0,6) NP(0,2) VP(2,6) PP(3,6) NP(4,6): the final "." is deleted, so S ends at word 6; TOP is
# not scored, preterminals are never brackets
GOLD_A = "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .)))"
# test S(0,6) NP(0,2) VP(2,3) PP(3,6) NP(4,6): 4 of 5 match (VP differs)
TEST_A = "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (PP (IN on) (NP (DT the) (NN mat))) (. .)))"
# PRT and ADVP are one label (EQ_LABEL); S-SBJ is cut to S: all 4 brackets match
GOLD_B = "(TOP (S (NP (PRP He)) (VP (VBD gave) (PRT (RP up)))))"
TEST_B = "(TOP (S-SBJ (NP (PRP He)) (VP (VBD gave) (ADVP (RP up)))))"
# the NP-SBJ holds only a -NONE- terminal: deleted with it ("zero element"); S(0,1) VP(0,1) both sides
GOLD_E = "(TOP (S (NP-SBJ (-NONE- *)) (VP (VB Go))))"
TEST_E = "(TOP (S (VP (VB Go))))"
# ROOT is not a DELETE_LABEL: the test has ROOT(0,2) and S(0,2), the gold S(0,2) only
GOLD_F = "(TOP (S (NN a) (NN b)))"
TEST_F = "(ROOT (S (NN a) (NN b)))"


def test_one_sentence_recall_precision_and_what_is_not_a_bracket():
    r = score_sentence(GOLD_A, TEST_A)
    assert (r.status, r.gold, r.test, r.matched) == (OK, 5, 5, 4)
    assert r.recall == pytest.approx(80.0) and r.precision == pytest.approx(80.0)
    assert r.crossing == 0  # VP(2,3) sits inside the gold VP(2,6), beside PP(3,6): no crossing
    assert (r.words, r.correct_tags) == (6, 6)  # the "." is not a word of the scoring
    assert r.length == 7  # ... but it counts in the length of the cutoff


def test_label_equivalence_and_cut_labels():
    r = score_sentence(GOLD_B, TEST_B)
    assert (r.gold, r.test, r.matched) == (4, 4, 4)
    assert cut_label("NP-SBJ-1") == "NP" and cut_label("PP=2") == "PP" and cut_label("S") == "S"
    # unlabelled scoring ignores labels altogether
    r = score_sentence(
        "(TOP (S (NP (NN a)) (VP (VB b))))", "(TOP (X (Y (NN a)) (Z (VB b))))", EvalbParams(labeled=False)
    )
    assert r.matched == 3


def test_none_elements_and_empty_brackets_are_deleted():
    r = score_sentence(GOLD_E, TEST_E)
    assert (r.gold, r.test, r.matched, r.words, r.length) == (2, 2, 2, 1, 1)  # -NONE- not in the length
    # a constituent of punctuation only spans no word: deleted; punctuation attachment does not matter
    r = score_sentence(
        "(TOP (S (NP (NN a)) (, ,) (VP (VB b))))", "(TOP (S (NP (NN a) (, ,)) (PRN (: --)) (VP (VB b))))"
    )
    assert (r.gold, r.test, r.matched) == (3, 3, 3)


def test_root_and_the_empty_outer_bracket_count_but_top_does_not():
    r = score_sentence(GOLD_F, TEST_F)
    assert (r.gold, r.test, r.matched) == (1, 2, 1)
    assert r.recall == 100.0 and r.precision == 50.0
    r = score_sentence(GOLD_F, "( (S (NN a) (NN b)))")  # LDC's unlabelled outer bracket: label ""
    assert (r.gold, r.test, r.matched) == (1, 2, 1)
    assert score_sentence("( (S (NN a) (NN b)))", "( (S (NN a) (NN b)))").matched == 2


def test_repeated_brackets_count_each_time():
    r = score_sentence("(TOP (NP (NP (NN a))))", "(TOP (NP (NN a)))")
    assert (r.gold, r.test, r.matched) == (2, 1, 1)


def test_crossing_counts_test_brackets():
    # X(1,3) crosses the gold NP(0,2) and VP(2,4): one crossing test bracket
    r = score_sentence("(TOP (S (NP (NN a) (NN b)) (VP (VB c) (NN d))))", "(TOP (S (NN a) (X (NN b) (VB c)) (NN d)))")
    assert (r.gold, r.test, r.matched, r.crossing) == (3, 2, 1, 1)


def test_error_and_skip_sentences():
    # a word tagged "." in the gold but NN in the test is deleted on one side only: Length unmatch
    r = score_sentence("(TOP (S (NN a) (. b)))", "(TOP (S (NN a) (NN b)))")
    assert r.status == ERROR and "Length unmatch (1|2)" in r.reasons
    r = score_sentence("(TOP (S (NN a) (NN b)))", "(TOP (S (NN a) (NN c)))")
    assert r.status == ERROR and r.reasons == ["Words unmatch (b|c)"]
    assert score_sentence("(TOP (S (NN a)))", "").status == SKIP  # no test words: skip
    assert score_sentence("(TOP (S (NN a)))", "(TOP (S (. .)))").status == SKIP  # only deleted words
    # unbalanced lines are error sentences
    assert score_sentence("(TOP (S (NN a)))", "(TOP (S (NN a))").status == ERROR
    assert score_sentence("(TOP (S (NN a)))", "(TOP (S (NN a))))").status == ERROR
    # a word where evalb's scanner expects a bracket makes evalb.c loop on "Reading sentence" until
    # MAX_ERROR ends it: "(NN a )" (a space before ")"), "(NN b c)", a word outside the brackets
    for line in ("(TOP (S (NN a )))", "(TOP (S (NN a c)))", "(TOP (S (NN a))) b"):
        with pytest.raises(EvalbAbort, match="Reading sentence"):
            score_sentence("(TOP (S (NN a)))", line)


def test_tagging_accuracy_counts_words_after_deletion():
    r = score_sentence("(TOP (S (DT a) (NN b) (. .)))", "(TOP (S (DT a) (VB b) (. .)))")
    assert (r.words, r.correct_tags) == (2, 1)


def test_corpus_summary_and_its_printout():
    gold = [GOLD_A, GOLD_B, "(TOP (S (NN a) (NN b)))", "(TOP (S (NN a)))", GOLD_E, GOLD_F]
    test = [TEST_A, TEST_B, "(TOP (S (NN a)))", "", TEST_E, TEST_F]
    res = evalb(gold, test)
    s = res.all
    # valid: A, B, E, F. brackets gold 5+4+2+1 = 12, test 5+4+2+2 = 13, matched 4+4+2+1 = 11
    assert (s["sentences"], s["error_sentences"], s["skip_sentences"], s["valid_sentences"]) == (6, 1, 1, 4)
    assert (s["gold_brackets"], s["test_brackets"], s["matched_brackets"]) == (12, 13, 11)
    r, p = 100 * 11 / 12, 100 * 11 / 13
    assert s["recall"] == pytest.approx(r) and s["precision"] == pytest.approx(p)
    assert s["f1"] == pytest.approx(2 * p * r / (p + r))
    assert s["complete_match"] == pytest.approx(50.0)  # B and E complete; A has a miss, F an extra ROOT
    assert (s["average_crossing"], s["no_crossing"], s["two_or_less_crossing"]) == (0.0, 100.0, 100.0)
    assert (s["words"], s["tagging_accuracy"]) == (12, 100.0)
    assert res.cutoff == res.all  # every sentence is short
    text = summary_text(res)
    assert "Number of Error sentence  =      1" in text
    assert f"Bracketing Recall         = {r:6.2f}" in text and "Bracketing Recall         =  91.67" in text
    assert "Bracketing FMeasure       =  88.00" in text  # 2 * 84.615 * 91.667 / 176.282
    assert "-- len<=40 --" in text


def test_length_cutoff_counts_punctuation_but_not_none():
    words40 = " ".join(f"(NN w{i})" for i in range(40))
    in_cut = f"(TOP (S {words40} (-NONE- *)))"  # 40 words + an empty element: length 40
    out_cut = f"(TOP (S {words40} (. .)))"  # 40 words + a period: length 41, though "." is not scored
    res = evalb([in_cut, out_cut], [in_cut, out_cut])
    assert res.all["sentences"] == 2 and res.cutoff["sentences"] == 1
    assert [r.length for r in res.sentences] == [40, 41]
    assert res.all["gold_brackets"] == 2 and res.cutoff["gold_brackets"] == 1


def test_no_brackets_at_all_is_a_complete_match_and_f_is_zero_not_nan():
    res = evalb(["(TOP (NN a))"], ["(TOP (NN a))"])
    assert res.all["complete_match"] == 100.0
    assert res.all["recall"] == 0.0 and res.all["f1"] == 0.0  # evalb prints nan for 0/0


def test_collins_parameters_and_reader():
    assert COLLINS.delete_labels == ("TOP", "-NONE-", ",", ":", "``", "''", ".")
    assert COLLINS.delete_labels_for_length == ("-NONE-",) and COLLINS.equivalent_labels == (("ADVP", "PRT"),)
    b = read_bracketing("( (S (NP-SBJ (-NONE- *)) (`` ``) (VP (VB Go)) ('' '')))")
    assert b.words == ["Go"] and b.length == 3
    assert b.brackets == [(0, 1, ""), (0, 1, "S"), (0, 0, "NP-SBJ"), (0, 1, "VP")]


def test_max_error_stops_as_evalb_does():
    bad = ["(TOP (S (NN a)))"] * 4
    evalb(bad, ["(TOP (S (NN b)))"] * 4, EvalbParams(max_error=3))  # errors 1..4: the count before the 4th is 3
    with pytest.raises(EvalbAbort, match="MAX_ERROR"):
        evalb(bad + bad[:1], ["(TOP (S (NN b)))"] * 5, EvalbParams(max_error=3))
