"""Statistics of a study's scores: mean ± std, and the comparison of two rows with a 95% interval that
covers the variance that matters. No torch, no files.

What varies between two runs of one system is mostly the pre-training seed (v1 and v2 of the cpu study
disagreed by 2.4 SQuAD F1 on other checkpoints, more than the paper's SpanBERT-vs-BERT effects), then the
fine-tuning seed, then which test examples were drawn. So a comparison of systems takes the pre-training
seed as its unit (`seed_comparison`):

    diff = mean(A's seeds) − mean(B's seeds), each seed's score the mean over its fine-tuning seeds
    SE² = s²_A / n_A + s²_B / n_B + V_test
    95% interval: diff ± t(0.975, df) · SE, df by Welch–Satterthwaite (V_test counted as known)

where s² is the sample variance between a row's pre-training seeds (it holds the fine-tuning seeds'
variance too, since each seed's score averages them) and V_test the variance of the difference over
test sets drawn like this one: a bootstrap of the test examples, the same resample for every model of
both rows (`example_sampling_variance`). A checkpoint row (one fixed model) has no between-seed term. A
trained row with one pre-training run has no estimate of it: the comparison is then printed as what it
is, two checkpoints, not two systems. No percentile bootstrap over a handful of seeds: with three, it
has ten distinct resample means and covers less than its nominal rate (tests/test_study_stats.py
measures both on simulated studies).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from spanbert.metrics.resample import ExampleStats, resample_counts

# Two-sided 95% quantiles of Student's t (df 1..30), from the standard tables.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)  # fmt: skip

NOT_SYSTEMS = "one pre-training run each: not a comparison of the systems"
"""The verdict of a comparison whose rows have one pre-training run each (or one of them has)."""

TEST_RESAMPLES = 2000
"""Bootstrap resamples of the test examples behind V_test (its Monte Carlo error is about 3% of V_test)."""


def t_quantile_975(df: float) -> float:
    """t_{0.975, df}: the table for df ≤ 30 (a fractional df rounds down: the wider interval), then the
    Cornish-Fisher expansion (error < 1e-3); infinite df: the normal quantile."""
    if df < 1:
        raise ValueError("df must be >= 1")
    if math.isinf(df):
        return 1.959964
    if df <= 30:
        return _T975[int(df) - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


@dataclass
class Comparison:
    a: str
    b: str
    n: int
    """Units behind each row's mean: pre-training seeds (the smaller row's count), or fine-tuning seeds of
    one pre-training run (`replicated` False)."""
    diff: float
    """mean(a) − mean(b)."""
    t_low: float
    t_high: float
    method: str = "paired t over fine-tuning seeds"
    """How the 95% interval was made, in words (the comparisons table names it)."""
    scored_on: str = "dev"
    """The scores compared: "held-out" (data selection did not see) or "dev" (where there is none)."""
    replicated: bool = True
    """False: at least one trained row has one pre-training run, so the interval describes these checkpoints
    and says nothing of the systems."""

    @property
    def verdict(self) -> str:
        if not self.replicated:
            return NOT_SYSTEMS
        if self.n < 2 or math.isnan(self.t_low):
            return "too few seeds"
        if self.t_low > 0:
            return f"{self.a} better"
        if self.t_high < 0:
            return f"{self.b} better"
        return "not distinguishable"


def paired_comparison(a: str, b: str, xs: list[float], ys: list[float], replicated: bool = True) -> Comparison:
    """Difference of means of paired scores (the same fine-tuning seed of one checkpoint each) with a
    paired-t 95% interval. ``replicated``: whether the pairs are independent runs of the systems; a study
    with one pre-training run per system passes False (`NOT_SYSTEMS`)."""
    if len(xs) != len(ys):
        raise ValueError("paired scores need the same number of seeds")
    d = np.asarray(xs, dtype=float) - np.asarray(ys, dtype=float)
    n = len(d)
    mean = float(d.mean()) if n else float("nan")
    if n < 2:
        return Comparison(a, b, n, mean, float("nan"), float("nan"), replicated=replicated)
    half = t_quantile_975(n - 1) * float(d.std(ddof=1)) / math.sqrt(n)
    return Comparison(a, b, n, mean, mean - half, mean + half, replicated=replicated)


def seed_comparison(
    a: str, b: str, xs: Sequence[float], ys: Sequence[float], test_variance: float | None = None,
    fixed_a: bool = False, fixed_b: bool = False,
) -> Comparison:  # fmt: skip
    """mean(xs) − mean(ys) with the 95% interval of the module's doc: ``xs``/``ys`` a score per pre-training
    seed (each the mean over its fine-tuning seeds and folds), ``test_variance`` V_test (None: not known,
    the interval then leaves test sampling out and says so). ``fixed_a``/``fixed_b``: the row is one fixed
    model (a checkpoint row), whose scores vary only with fine-tuning and test sampling."""
    x, y = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    diff = float(x.mean() - y.mean())
    terms, dfs = [], []
    for v, fixed in ((x, fixed_a), (y, fixed_b)):
        if fixed:
            if len(v) > 1:  # one model fine-tuned with several seeds: their spread is its only between-run term
                terms.append(float(v.var(ddof=1)) / len(v))
                dfs.append(len(v) - 1)
            continue
        if len(v) < 2:
            return Comparison(a, b, min(len(x), len(y)), diff, float("nan"), float("nan"),
                              "one pre-training run: no between-seed variance", replicated=False)  # fmt: skip
        terms.append(float(v.var(ddof=1)) / len(v))
        dfs.append(len(v) - 1)
    se2 = sum(terms) + (test_variance or 0.0)
    denominator = sum(t * t / df for t, df in zip(terms, dfs))
    df = se2 * se2 / denominator if denominator > 0 else math.inf
    half = t_quantile_975(max(1.0, df)) * math.sqrt(se2)
    method = "Welch t over pre-training seeds"
    method += " + bootstrap of test examples" if test_variance is not None else " (no test sampling: no per-example scores)"
    n = min(len(v) for v, fixed in ((x, fixed_a), (y, fixed_b)) if not fixed) if not (fixed_a and fixed_b) else 1
    return Comparison(a, b, n, diff, diff - half, diff + half, method)


def example_sampling_variance(
    a_units: Sequence[Sequence[tuple[str, ExampleStats]]], b_units: Sequence[Sequence[tuple[str, ExampleStats]]],
    resamples: int = TEST_RESAMPLES, seed: int = 0,
) -> float:  # fmt: skip
    """V_test: the variance, over bootstrap resamples of the test examples, of mean(a's units) − mean(b's
    units), each unit's score the mean of its cells' scores on the resample. A unit is a list of (test set,
    per-example statistics) cells; cells on the same test set (a fold's, or the one held-out file) draw the
    same resample, so the models' shared luck with the examples cancels and what remains is how the
    difference would move with another draw of them. A fixed generator: the summary is stable."""
    rng = np.random.default_rng(seed)
    sizes: dict[str, int] = {}
    for unit in (*a_units, *b_units):
        for key, stats in unit:
            if sizes.setdefault(key, len(stats.rows)) != len(stats.rows):
                raise ValueError(f"test set {key!r}: cells scored {sizes[key]} and {len(stats.rows)} examples")
    counts = {key: resample_counts(n, resamples, rng) for key, n in sorted(sizes.items())}

    def row_mean(units: Sequence[Sequence[tuple[str, ExampleStats]]]) -> np.ndarray:
        per_unit = [np.mean([stats.resampled(counts[key]) for key, stats in unit], axis=0) for unit in units]
        return np.mean(per_unit, axis=0)

    return float(np.var(row_mean(a_units) - row_mean(b_units), ddof=1))


def mean_std(xs: list[float]) -> tuple[float, float]:
    arr = np.asarray(xs, dtype=float)
    return float(arr.mean()), float(arr.std(ddof=1)) if len(arr) > 1 else 0.0
