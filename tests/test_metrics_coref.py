"""MUC / B3 / CEAF-e against the CoNLL-2012 reference scorer's own published test cases.

Cases and expected numbers: conll/reference-coreference-scorers, test/TestCases.README and
test/CorefMetricTestConfig.pm (v8.01). Letters are mentions; an upper-case letter is a different
mention overlapping the lower-case one (TC-A-5/6); a repeated letter is a duplicate mention (TC-A-7/8/9,
which test the scorer's de-duplication).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from spanbert.metrics.coref import CorefEvaluator, evaluate_documents, linear_assignment, score


def C(text: str) -> list[list[str]]:
    """'a|bc|def' -> [['a'], ['b', 'c'], ['d', 'e', 'f']]."""
    return [list(e) for e in text.split("|")] if text else []


KEY_A = C("a|bc|def")

# id, key, response, {metric: (recall, precision)}
CASES = [
    ("A1", KEY_A, C("a|bc|def"), {"muc": (1, 1), "bcub": (1, 1), "ceafe": (1, 1), "ceafm": (1, 1)}),
    ("A2", KEY_A, C("a|de"), {"muc": (1 / 3, 1), "bcub": (7 / 18, 1), "ceafe": (0.6, 0.9), "ceafm": (0.5, 1)}),
    (
        "A3",
        KEY_A,
        C("a|bcx|defy|z"),
        {
            "muc": (1, 3 / 5),
            "bcub": (1, (4 + 7 / 12) / 9),
            "ceafe": ((1 + 4 / 5 + 6 / 7) / 3, (1 + 4 / 5 + 6 / 7) / 4),
            "ceafm": (1, 6 / 9),
        },
    ),
    (
        "A4",
        KEY_A,
        C("a|bcx|dy|z"),
        {"muc": (1 / 3, 1 / 3), "bcub": ((3 + 1 / 3) / 6, (1 + 4 / 3 + 1 / 2) / 7), "ceafe": (2.2 / 3, 2.2 / 4)},
    ),
    (
        "A5 overlapping mention B in the aligned entity",
        KEY_A,
        C("a|bcxB|dy|z"),
        {
            "muc": (1 / 3, 1 / 4),
            "bcub": ((3 + 1 / 3) / 6, 2.5 / 8),
            "ceafe": ((1 + 4 / 6 + 2 / 5) / 3, (1 + 4 / 6 + 2 / 5) / 4),
            "ceafm": (4 / 6, 4 / 8),
        },
    ),
    (
        "A6 overlapping mention B in another entity",
        KEY_A,
        C("a|bcx|dy|Bz"),
        {"muc": (1 / 3, 1 / 4), "bcub": ((10 / 3) / 6, (1 + 4 / 3 + 1 / 2) / 8), "ceafe": (2.2 / 3, 2.2 / 4)},
    ),
    (
        "A7 duplicate mention in the same entity",
        KEY_A,
        C("a|bcxb|dy|z"),
        {"muc": (1 / 3, 1 / 3), "bcub": ((10 / 3) / 6, (1 + 4 / 3 + 1 / 2) / 7), "ceafe": (2.2 / 3, 2.2 / 4)},
    ),
    (
        "A8 duplicate mention in another entity",
        KEY_A,
        C("a|bcx|dy|bz"),
        {"muc": (1 / 3, 1 / 3), "bcub": ((10 / 3) / 6, (1 + 4 / 3 + 1 / 2) / 7), "ceafe": (2.2 / 3, 2.2 / 4)},
    ),
    (
        "A9 ten duplicates cannot game B3",
        KEY_A,
        C("a|bcx|dy|" + "b" * 10 + "z"),
        {"muc": (1 / 3, 1 / 3), "bcub": ((10 / 3) / 6, (1 + 4 / 3 + 1 / 2) / 7), "ceafe": (2.2 / 3, 2.2 / 4)},
    ),
    ("A10 gold mentions, all singletons", KEY_A, C("a|b|c|d|e|f"), {"muc": (0, 0), "bcub": (3 / 6, 1)}),
    ("A11 gold mentions, one entity", KEY_A, C("abcdef"), {"muc": (1, 3 / 5), "bcub": (1, 7 / 18)}),
    (
        "A12 system mentions, singletons",
        KEY_A,
        C("a|x|y|c|d|e|z"),
        {"muc": (0, 0), "bcub": ((1 + 1 / 2 + 2 / 3) / 6, 4 / 7)},
    ),
    (
        "A13 system mentions, one entity",
        KEY_A,
        C("axycdez"),
        {"muc": (1 / 3, 1 / 6), "bcub": ((1 + 1 / 2 + 2 * 2 / 3) / 6, (1 / 7 + 1 / 7 + 2 * 2 / 7) / 7)},
    ),
    ("D1 B3 paper", C("12345|67|89ABC"), C("12345|6789ABC"), {"muc": (1, 9 / 10), "bcub": (1, 16 / 21)}),
    ("E1 B3 paper", C("12345|67|89ABC"), C("1234589ABC|67"), {"muc": (1, 9 / 10), "bcub": (1, 7 / 12)}),
    ("F1 MUC paper", C("ABCD"), C("AB|CD"), {"muc": (2 / 3, 1)}),
    ("G1 MUC paper", C("AB|CD"), C("ABCD"), {"muc": (1, 2 / 3)}),
    ("H1 MUC paper", C("ABCD"), C("ABCD"), {"muc": (1, 1)}),
    ("J1 MUC paper", C("ABC"), C("AC"), {"muc": (1 / 2, 1)}),
    ("K1 MUC paper", C("BCDEGHJ"), C("ABC|DEF|GHI"), {"muc": (3 / 6, 3 / 6)}),
    ("L1 MUC paper", C("ABC|DEFG"), C("AB|CD|FGH"), {"muc": (2 / 5, 2 / 4)}),
    ("M1", C("abcdef"), C("abcdef"), {"muc": (1, 1), "bcub": (1, 1), "ceafe": (1, 1), "ceafm": (1, 1)}),
    ("M2", C("abcdef"), C("a|b|c|d|e|f"), {"muc": (0, 0)}),
    ("N1 only singletons", C("a|b|c|d|e|f"), C("a|b|c|d|e|f"), {"muc": (0, 0), "bcub": (1, 1), "ceafe": (1, 1)}),
    ("N4", C("a|b|c|d|e|f"), C("a|b|c|x|y|z"), {"muc": (0, 0), "bcub": (0.5, 0.5), "ceafe": (0.5, 0.5)}),
    ("empty response", KEY_A, [], {"muc": (0, 0), "bcub": (0, 0), "ceafe": (0, 0), "ceafm": (0, 0)}),
    ("empty key", [], KEY_A, {"muc": (0, 0), "bcub": (0, 0), "ceafe": (0, 0)}),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_reference_scorer_cases(case):
    _, key, response, expected = case
    for metric, (recall, precision) in expected.items():
        r, p, f = score(key, response, metric)
        f_expected = 2 * recall * precision / (recall + precision) if recall + precision else 0.0
        assert (r, p, f) == pytest.approx((recall, precision, f_expected), abs=1e-9), metric


def test_published_f1_values():
    # F1 values printed in TestCases.README (rounded there)
    assert score(KEY_A, C("a|de"), "bcub")[2] == pytest.approx(14 / 25)
    assert score(KEY_A, C("a|bcx|defy|z"), "bcub")[2] == pytest.approx(110 / 163)
    assert score(KEY_A, C("a|bcx|defy|z"), "ceafe")[2] == pytest.approx(0.75918, abs=1e-5)
    assert score(KEY_A, C("a|bcxB|dy|z"), "ceafe")[2] == pytest.approx(0.59048, abs=1e-5)


def test_corpus_scores_sum_counts_over_documents():
    # MUC over two documents: (1 + 0) / (1 + 2) recall, not the mean of per-document recalls
    scores = evaluate_documents([C("ab"), C("cde")], [C("ab"), C("c|d|e")])
    assert scores["muc_r"] == pytest.approx(100 / 3)
    assert scores["muc_p"] == pytest.approx(100.0)
    assert scores["conll_f1"] == pytest.approx((scores["muc_f1"] + scores["bcub_f1"] + scores["ceafe_f1"]) / 3)
    assert scores["mention_r"] == pytest.approx(100.0)


def test_evaluator_perfect_and_empty():
    ev = CorefEvaluator()
    ev.update([[(0, 1), (5, 5)], [(7, 8)]], [[(0, 1), (5, 5)], [(7, 8)]])
    assert ev.scores()["conll_f1"] == pytest.approx(100.0)
    assert CorefEvaluator().scores()["conll_f1"] == 0.0


def test_linear_assignment_matches_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n, m = (int(x) for x in rng.integers(1, 6, 2))
        w = rng.random((n, m)) * (rng.random((n, m)) < 0.6)
        rows, cols = linear_assignment(w)
        assert len(set(rows.tolist())) == len(rows) == min(n, m) == len(set(cols.tolist()))
        if n <= m:
            best = max(sum(w[i, p[i]] for i in range(n)) for p in itertools.permutations(range(m), n))
        else:
            best = max(sum(w[p[j], j] for j in range(m)) for p in itertools.permutations(range(n), m))
        assert w[rows, cols].sum() == pytest.approx(best)
