"""Per-example statistics of a scored data set: the few numbers of each example (or document) from which a
task's score is recomputed on any resample of its examples. A study's intervals use them to include the
variance of test sampling (`spanbert.study.stats`): the same resampled examples for every model compared.

Kinds (the columns of a row, and how a score is made from their sums):
- ``accuracy``: ``[correct]`` (0 or 1) -> 100 x mean;
- ``f1``: ``[true positives, predicted, gold]`` -> micro F1 = 100 x 2 tp / (predicted + gold);
- ``conll``: MUC, B3 and CEAF-e, each ``[precision numerator, precision denominator, recall numerator,
  recall denominator]`` (12 columns, per document) -> the mean of the three F1s, as the CoNLL-2012 scorer
  sums each metric's numerators and denominators over documents.

No torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from spanbert.errors import SpanBertError
from spanbert.utils import atomic_write

COLUMNS = {"accuracy": 1, "f1": 3, "conll": 12}
"""Columns of a row of each kind."""

STATS_FILE = "example_stats.json"
"""The file name a scored data set's per-example statistics are written under, beside its scores."""


def _f1(tp: np.ndarray, pred: np.ndarray, gold: np.ndarray) -> np.ndarray:
    den = pred + gold
    return np.where(den > 0, 200.0 * tp / np.where(den > 0, den, 1), 0.0)


def _conll(sums: np.ndarray) -> np.ndarray:
    """(..., 12) summed columns -> (...) CoNLL F1 (0-100)."""
    f1s = []
    for m in range(3):
        pn, pd, rn, rd = (sums[..., 4 * m + k] for k in range(4))
        p = np.where(pd > 0, pn / np.where(pd > 0, pd, 1), 0.0)
        r = np.where(rd > 0, rn / np.where(rd > 0, rd, 1), 0.0)
        f1s.append(np.where(p + r > 0, 2 * p * r / np.where(p + r > 0, p + r, 1), 0.0))
    return 100.0 * sum(f1s) / 3


def score_of_sums(kind: str, sums: np.ndarray, count: np.ndarray | int) -> np.ndarray:
    """The score (0-100) from column sums ``sums`` (..., C) over ``count`` examples."""
    if kind == "accuracy":
        return 100.0 * sums[..., 0] / np.maximum(count, 1)
    if kind == "f1":
        return _f1(sums[..., 0], sums[..., 1], sums[..., 2])
    if kind == "conll":
        return _conll(sums)
    raise SpanBertError(f"example statistics: found kind {kind!r}, expected one of: {', '.join(COLUMNS)}")


@dataclass(frozen=True)
class ExampleStats:
    """One model's per-example statistics on one data set."""

    kind: str
    rows: np.ndarray
    """(N, C): one row per example (or document), `COLUMNS[kind]` columns."""

    def score(self) -> float:
        """The score on the data set itself."""
        return float(score_of_sums(self.kind, self.rows.sum(axis=0), len(self.rows)))

    def resampled(self, counts: np.ndarray) -> np.ndarray:
        """(R,) scores on R resamples, each given as how often it draws every example: ``counts`` (R, N)."""
        return score_of_sums(self.kind, counts @ self.rows, counts.sum(axis=1))


def check_rows(kind: str, rows: np.ndarray, where: str) -> np.ndarray:
    rows = np.asarray(rows, dtype=float)
    if rows.ndim == 1 and rows.size == 0:
        rows = rows.reshape(0, COLUMNS.get(kind, 1))
    if kind not in COLUMNS:
        raise SpanBertError(f"{where}: found kind {kind!r}, expected one of: {', '.join(COLUMNS)}")
    if rows.ndim != 2 or rows.shape[1] != COLUMNS[kind] or not np.isfinite(rows).all() or (rows < 0).any():
        raise SpanBertError(f"{where}: found rows of shape {rows.shape}, expected (examples, {COLUMNS[kind]}) "
                            f"non-negative numbers for kind {kind}")  # fmt: skip
    return rows


def write_example_stats(path: str | Path, kind: str, rows: list | np.ndarray) -> None:
    """Write one model's per-example statistics (atomically: a reader never sees half a file)."""
    rows = check_rows(kind, rows, str(path))
    with atomic_write(Path(path)) as f:
        f.write(json.dumps({"kind": kind, "rows": rows.tolist()}) + "\n")


def read_example_stats(path: str | Path) -> ExampleStats:
    """The statistics `write_example_stats` wrote; a damaged file is one `SpanBertError` naming it."""
    try:
        data = json.loads(Path(path).read_text())
        kind, rows = data["kind"], data["rows"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SpanBertError(f"{path}: cannot read the per-example statistics ({e})") from None
    return ExampleStats(kind, check_rows(kind, rows, str(path)))


def resample_counts(n: int, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(resamples, n): how often each of ``n`` examples is drawn in each bootstrap resample of size n."""
    return rng.multinomial(n, np.full(n, 1.0 / n), size=resamples) if n else np.zeros((resamples, 0))
