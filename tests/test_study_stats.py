"""Statistics of a study's scores (`spanbert.study.stats`): mean ± the sample deviation, t quantiles, the paired
comparison of one checkpoint each, and the comparison over pre-training seeds with test sampling, whose 95%
interval must cover a known difference at its nominal rate on simulated studies."""

from __future__ import annotations

import math

import numpy as np
import pytest

from spanbert import study as S
from spanbert.metrics.resample import ExampleStats
from spanbert.study.stats import NOT_SYSTEMS, seed_comparison, example_sampling_variance


def test_paired_t_interval_by_hand():
    # differences 1, 2, 3: mean 2, sd 1, se 1/sqrt(3), t(0.975, 2) = 4.303
    c = S.paired_comparison("a", "b", [2.0, 4.0, 6.0], [1.0, 2.0, 3.0])
    half = 4.303 / math.sqrt(3)
    assert c.n == 3 and c.diff == pytest.approx(2.0)
    assert (c.t_low, c.t_high) == (pytest.approx(2 - half), pytest.approx(2 + half))
    assert c.verdict == "not distinguishable"


def test_a_consistent_difference_is_significant_both_ways():
    c = S.paired_comparison("span", "bert", [80.0, 81.0, 82.0, 80.5], [78.0, 79.2, 80.1, 78.4])
    assert c.t_low > 0 and c.verdict == "span better"
    r = S.paired_comparison("bert", "span", [78.0, 79.2, 80.1, 78.4], [80.0, 81.0, 82.0, 80.5])
    assert r.t_high < 0 and r.verdict == "span better"


def test_one_seed_gives_no_interval_and_one_run_each_is_no_comparison_of_systems():
    c = S.paired_comparison("a", "b", [1.0], [0.0])
    assert c.diff == 1.0 and math.isnan(c.t_low) and c.verdict == "too few seeds"
    c = S.paired_comparison("a", "b", [2.0, 4.0, 6.0], [1.0, 2.0, 3.0], replicated=False)
    assert c.verdict == NOT_SYSTEMS
    c = seed_comparison("a", "b", [70.0], [60.0, 61.0, 62.0])
    assert c.verdict == NOT_SYSTEMS and math.isnan(c.t_low)


def test_the_seed_interval_by_hand():
    # A: 10, 12, 14 (var 4), B: 5, 6, 7 (var 1): SE² = 4/3 + 1/3 (+ V_test 1), Welch df = (5/3)² / ((4/3)²/2 + (1/3)²/2)
    c = seed_comparison("a", "b", [10.0, 12.0, 14.0], [5.0, 6.0, 7.0])
    df = (5 / 3) ** 2 / ((4 / 3) ** 2 / 2 + (1 / 3) ** 2 / 2)
    assert int(df) == 2 and c.diff == pytest.approx(6.0)
    assert c.t_high - c.diff == pytest.approx(4.303 * math.sqrt(5 / 3))
    with_test = seed_comparison("a", "b", [10.0, 12.0, 14.0], [5.0, 6.0, 7.0], test_variance=1.0)
    df = (8 / 3) ** 2 / ((4 / 3) ** 2 / 2 + (1 / 3) ** 2 / 2)
    assert int(df) == 7 and with_test.t_high - 6.0 == pytest.approx(2.365 * math.sqrt(8 / 3))
    assert "bootstrap of test examples" in with_test.method and "no test sampling" in c.method
    # a fixed checkpoint row (the calibration): no between-seed term of its own
    fixed = seed_comparison("cal", "b", [20.0], [5.0, 6.0, 7.0], test_variance=0.0, fixed_a=True)
    assert fixed.replicated and fixed.t_high - 14.0 == pytest.approx(4.303 * math.sqrt(1 / 3))


def test_the_sampling_variance_of_one_model_each_is_the_bootstrap_variance_of_the_difference():
    rng = np.random.default_rng(1)
    a = ExampleStats("accuracy", rng.integers(0, 2, (500, 1)).astype(float))
    b = ExampleStats("accuracy", rng.integers(0, 2, (500, 1)).astype(float))
    v = example_sampling_variance([[("test", a)]], [[("test", b)]], resamples=4000)
    d = 100 * (a.rows[:, 0] - b.rows[:, 0])
    assert v == pytest.approx(d.var(ddof=0) / 500, rel=0.1)  # the variance of a mean of 500 paired differences
    assert example_sampling_variance([[("test", a)]], [[("test", a)]]) == 0.0  # the same model: the draw cancels
    with pytest.raises(ValueError, match="scored 500 and 3"):
        example_sampling_variance([[("test", a)]], [[("test", ExampleStats("accuracy", np.ones((3, 1))))]])


def _simulated_study(rng: np.random.Generator, n_seeds: int, n_examples: int, delta: float) -> tuple[list, list]:
    """Per-example scores (0..1) of n_seeds models of systems A and B on one test set drawn afresh: a seed
    effect per model (sd 3 points), an example's difficulty shared by all models (sd 15), an example effect
    of each system (sd 8: what makes the test draw matter for the difference) and noise (sd 10)."""
    common = rng.normal(0, 0.15, n_examples)
    units = []
    for mean in (0.55 + delta, 0.55):
        own = rng.normal(0, 0.08, n_examples)
        seeds = []
        for _ in range(n_seeds):
            y = mean + rng.normal(0, 0.03) + common + own + rng.normal(0, 0.10, n_examples)
            seeds.append([("test", ExampleStats("accuracy", np.clip(y, 0, None)[:, None]))])
        units.append(seeds)
    return units[0], units[1]


def test_the_seed_interval_covers_a_known_difference_at_its_nominal_rate_and_a_seed_bootstrap_does_not():
    rng = np.random.default_rng(0)
    delta, covered, boot_covered, n = 0.02, 0, 0, 300
    for i in range(n):
        a, b = _simulated_study(rng, 3, 300, delta)
        xs = [u[0][1].score() for u in a]
        ys = [u[0][1].score() for u in b]
        v = example_sampling_variance(a, b, resamples=400, seed=i)
        c = seed_comparison("a", "b", xs, ys, test_variance=v)
        covered += c.t_low <= 100 * delta <= c.t_high
        # the percentile bootstrap over three seeds that the study used to print beside the t interval
        boots = np.take(xs, rng.integers(0, 3, (400, 3))).mean(1) - np.take(ys, rng.integers(0, 3, (400, 3))).mean(1)
        lo, hi = np.percentile(boots, [2.5, 97.5])
        boot_covered += lo <= 100 * delta <= hi
    assert 0.92 <= covered / n <= 0.995, covered / n
    assert boot_covered / n < 0.85, boot_covered / n


def test_t_quantiles():
    assert S.t_quantile_975(1) == 12.706 and S.t_quantile_975(30) == 2.042
    assert S.t_quantile_975(2.7) == 4.303  # a fractional df rounds down: the wider interval
    assert S.t_quantile_975(60) == pytest.approx(2.0003, abs=1e-3)
    assert S.t_quantile_975(120) == pytest.approx(1.9799, abs=1e-3)
    assert S.t_quantile_975(10**6) == pytest.approx(1.95996, abs=1e-4)
    assert S.t_quantile_975(math.inf) == pytest.approx(1.95996, abs=1e-4)


def test_mean_std_uses_the_sample_deviation():
    assert S.mean_std([1.0, 2.0, 3.0]) == (2.0, 1.0)
    assert S.mean_std([5.0]) == (5.0, 0.0)
