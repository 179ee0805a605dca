"""Statistics of a study's seeds: mean ± std, and paired comparisons of two systems (the difference
of means with a paired-t and a percentile-bootstrap 95% interval). No torch, no files."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Two-sided 95% quantiles of Student's t (df 1..30), from the standard tables.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)  # fmt: skip


def t_quantile_975(df: int) -> float:
    """t_{0.975, df}: the table for df ≤ 30, then the Cornish-Fisher expansion (error < 1e-3)."""
    if df < 1:
        raise ValueError("df must be >= 1")
    if df <= 30:
        return _T975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


@dataclass
class Comparison:
    a: str
    b: str
    n: int
    diff: float
    """mean over seeds of score(a) − score(b), seed by seed (paired: the same fine-tuning seed)."""
    t_low: float
    t_high: float
    boot_low: float
    boot_high: float
    scored_on: str = "dev"
    """The scores compared: "held-out" (data selection did not see) or "dev" (where there is none)."""

    @property
    def verdict(self) -> str:
        if self.n < 2 or math.isnan(self.t_low):
            return "too few seeds"
        if self.t_low > 0:
            return f"{self.a} better"
        if self.t_high < 0:
            return f"{self.b} better"
        return "not distinguishable"


def paired_comparison(a: str, b: str, xs: list[float], ys: list[float], resamples: int = 10_000, seed: int = 0) -> Comparison:
    """Difference of means of paired scores with a paired-t 95% interval and a percentile-bootstrap one
    (seeds resampled with replacement, ``resamples`` times, a fixed generator so the summary is stable)."""
    if len(xs) != len(ys):
        raise ValueError("paired scores need the same number of seeds")
    d = np.asarray(xs, dtype=float) - np.asarray(ys, dtype=float)
    n = len(d)
    mean = float(d.mean()) if n else float("nan")
    if n < 2:
        return Comparison(a, b, n, mean, float("nan"), float("nan"), float("nan"), float("nan"))
    half = t_quantile_975(n - 1) * float(d.std(ddof=1)) / math.sqrt(n)
    rng = np.random.default_rng(seed)
    boots = d[rng.integers(0, n, size=(resamples, n))].mean(axis=1)
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return Comparison(a, b, n, mean, mean - half, mean + half, float(lo), float(hi))


def mean_std(xs: list[float]) -> tuple[float, float]:
    arr = np.asarray(xs, dtype=float)
    return float(arr.mean()), float(arr.std(ddof=1)) if len(arr) > 1 else 0.0
