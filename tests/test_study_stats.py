"""Statistics of a study's seeds (`spanbert.study.stats`): mean ± the sample deviation, t quantiles, and the paired
comparison of two systems (a paired-t and a percentile-bootstrap interval) on hand-made numbers."""

from __future__ import annotations

import math

import pytest

from spanbert import study as S


def test_paired_t_interval_by_hand():
    # differences 1, 2, 3: mean 2, sd 1, se 1/sqrt(3), t(0.975, 2) = 4.303
    c = S.paired_comparison("a", "b", [2.0, 4.0, 6.0], [1.0, 2.0, 3.0])
    half = 4.303 / math.sqrt(3)
    assert c.n == 3 and c.diff == pytest.approx(2.0)
    assert (c.t_low, c.t_high) == (pytest.approx(2 - half), pytest.approx(2 + half))
    assert c.verdict == "not distinguishable"
    # the bootstrap means of three differences lie between the smallest and the largest
    assert 1.0 <= c.boot_low <= 2.0 <= c.boot_high <= 3.0


def test_a_consistent_difference_is_significant_both_ways():
    c = S.paired_comparison("span", "bert", [80.0, 81.0, 82.0, 80.5], [78.0, 79.2, 80.1, 78.4])
    assert c.t_low > 0 and c.boot_low > 0 and c.verdict == "span better"
    r = S.paired_comparison("bert", "span", [78.0, 79.2, 80.1, 78.4], [80.0, 81.0, 82.0, 80.5])
    assert r.t_high < 0 and r.verdict == "span better"


def test_one_seed_gives_no_interval():
    c = S.paired_comparison("a", "b", [1.0], [0.0])
    assert c.diff == 1.0 and math.isnan(c.t_low) and c.verdict == "too few seeds"


def test_t_quantiles():
    assert S.t_quantile_975(1) == 12.706 and S.t_quantile_975(30) == 2.042
    assert S.t_quantile_975(60) == pytest.approx(2.0003, abs=1e-3)
    assert S.t_quantile_975(120) == pytest.approx(1.9799, abs=1e-3)
    assert S.t_quantile_975(10**6) == pytest.approx(1.95996, abs=1e-4)


def test_mean_std_uses_the_sample_deviation():
    assert S.mean_std([1.0, 2.0, 3.0]) == (2.0, 1.0)
    assert S.mean_std([5.0]) == (5.0, 0.0)
