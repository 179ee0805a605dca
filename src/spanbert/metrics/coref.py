"""Coreference metrics exactly as the CoNLL-2012 reference scorer v8.01 computes them (no torch).

MUC (Vilain et al. 1995), B-cubed (Bagga & Baldwin 1998) and entity-based CEAF, CEAF-phi4 (Luo 2005),
each as recall, precision and F1, and the "CoNLL F1" = their average F1 (the number SpanBERT reports in
Table 3). The treatment of predicted (not gold) mentions follows Pradhan et al. (2014), "Scoring
coreference partitions of predicted mentions: a reference implementation", which is what v8.01 does:

* singletons count: a singleton entity adds to B3 and CEAF (MUC has no links in it, so it adds 0/0);
* twinless mentions (in only one of key and response) are kept as they are: they lower B3 and CEAF
  precision (response side) or recall (key side) and, for MUC, are their own partitions;
* a mention repeated inside a clustering (same span twice) is counted once, at its first occurrence
  (the scorer's de-duplication, test cases TC-A-7 to TC-A-9);
* a metric whose denominator is 0 scores 0 (the scorer prints 0 rather than failing).

Also `ceafm` (mention-based CEAF, phi3) since it costs one line once the alignment exists.

A *clustering* is a list of entities; an entity is a list of hashable mentions, for example
``(start, end)`` word offsets, inclusive. Corpus-level scores sum the numerators and denominators of
every document (micro-average), as the scorer does for a multi-document file.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

Mention = Hashable
Clustering = Sequence[Iterable[Mention]]

METRICS = ("muc", "bcub", "ceafe")


def dedup(clusters: Clustering) -> list[list[Mention]]:
    """Drop repeated mentions (keep the first occurrence) and entities left empty, as the scorer does."""
    seen: set[Mention] = set()
    out: list[list[Mention]] = []
    for entity in clusters:
        kept = []
        for m in entity:
            if m not in seen:
                seen.add(m)
                kept.append(m)
        if kept:
            out.append(kept)
    return out


def _f1(p_num: float, p_den: float, r_num: float, r_den: float) -> tuple[float, float, float]:
    p = p_num / p_den if p_den else 0.0
    r = r_num / r_den if r_den else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return p, r, f


# ----------------------------------------------------------------------------------------------
# Per-document counts: each function returns (recall numerator, recall denominator, precision
# numerator, precision denominator) so that documents can be summed.


def muc_counts(key: Clustering, response: Clustering) -> tuple[float, float, float, float]:
    """MUC link counts. Recall = sum_K (|K| - p(K)) / sum_K (|K| - 1), p(K) = partitions of K by the response."""
    key, response = dedup(key), dedup(response)

    def links(gold: list[list[Mention]], pred: list[list[Mention]]) -> tuple[float, float]:
        where = {m: i for i, entity in enumerate(pred) for m in entity}
        num = den = 0
        for entity in gold:
            # a mention missing from `pred` is a partition of its own (a twinless mention)
            parts = {where.get(m, ("missing", m)) for m in entity}
            num += len(entity) - len(parts)
            den += len(entity) - 1
        return num, den

    r_num, r_den = links(key, response)
    p_num, p_den = links(response, key)
    return r_num, r_den, p_num, p_den


def b_cubed_counts(key: Clustering, response: Clustering) -> tuple[float, float, float, float]:
    """B3 counts: recall = sum_K sum_R |K∩R|^2/|K| over all key mentions, precision the mirror image."""
    key, response = dedup(key), dedup(response)

    def score(gold: list[list[Mention]], pred: list[list[Mention]]) -> tuple[float, float]:
        where = {m: i for i, entity in enumerate(pred) for m in entity}
        num = 0.0
        for entity in gold:
            counts: dict[int, int] = {}
            for m in entity:
                if m in where:
                    counts[where[m]] = counts.get(where[m], 0) + 1
            num += sum(c * c for c in counts.values()) / len(entity)
        return num, float(sum(len(e) for e in gold))

    r_num, r_den = score(key, response)
    p_num, p_den = score(response, key)
    return r_num, r_den, p_num, p_den


def _overlaps(key: list[list[Mention]], response: list[list[Mention]]) -> np.ndarray:
    """(K, R) matrix of |K_i ∩ R_j|."""
    where = {m: j for j, entity in enumerate(response) for m in entity}
    out = np.zeros((len(key), len(response)), dtype=np.float64)
    for i, entity in enumerate(key):
        for m in entity:
            if m in where:
                out[i, where[m]] += 1
    return out


def linear_assignment(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Maximum-weight matching of a (n, m) matrix (Kuhn-Munkres); returns (rows, cols) of the pairs.

    Shortest augmenting paths with potentials (the O(n^2 m) Hungarian method): each row is added in
    turn and the inner step is vectorised over columns, so there is a Python loop of at most n*m
    steps, not n^3. Pairs are returned for every row of the smaller side (a pair may have weight 0).
    """
    weights = np.asarray(weights, dtype=np.float64)
    transposed = weights.shape[0] > weights.shape[1]
    cost = -(weights.T if transposed else weights)  # minimise cost; n <= m
    n, m = cost.shape
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    inf = np.inf
    u = np.zeros(n + 1)
    v = np.zeros(m + 1)
    match = np.zeros(m + 1, dtype=np.int64)  # match[j] = row (1-based) assigned to column j; 0 = none
    way = np.zeros(m + 1, dtype=np.int64)
    padded = np.zeros((n + 1, m + 1))
    padded[1:, 1:] = cost
    for i in range(1, n + 1):
        match[0] = i
        j0 = 0
        minv = np.full(m + 1, inf)
        used = np.zeros(m + 1, dtype=bool)
        while True:
            used[j0] = True
            i0 = match[j0]
            free = ~used
            free[0] = False
            cur = padded[i0] - u[i0] - v
            better = free & (cur < minv)
            minv[better] = cur[better]
            way[better] = j0
            candidates = np.where(free, minv, inf)
            j1 = int(np.argmin(candidates))
            delta = candidates[j1]
            u[match[used]] += delta
            v[used] -= delta
            minv[free] -= delta
            j0 = j1
            if match[j0] == 0:
                break
        while j0:  # augment along the path
            j1 = way[j0]
            match[j0] = match[j1]
            j0 = j1
    cols = np.nonzero(match[1:])[0]
    rows = match[1:][cols] - 1
    order = np.argsort(rows)
    rows, cols = rows[order], cols[order]
    return (cols, rows) if transposed else (rows, cols)


def _ceaf_counts(key: Clustering, response: Clustering, entity_based: bool) -> tuple[float, float, float, float]:
    key, response = dedup(key), dedup(response)
    overlap = _overlaps(key, response)
    if entity_based:  # phi4(K, R) = 2 |K∩R| / (|K| + |R|)
        sizes_k = np.array([len(e) for e in key], dtype=np.float64)
        sizes_r = np.array([len(e) for e in response], dtype=np.float64)
        sim = 2 * overlap / (sizes_k[:, None] + sizes_r[None, :]) if overlap.size else overlap
        r_den, p_den = float(len(key)), float(len(response))
    else:  # phi3(K, R) = |K∩R|
        sim = overlap
        r_den = float(sum(len(e) for e in key))
        p_den = float(sum(len(e) for e in response))
    total = 0.0
    # Only entities that overlap something can gain weight: align that (usually small) block.
    rows_any = np.nonzero(sim.sum(axis=1) > 0)[0] if sim.size else np.zeros(0, dtype=np.int64)
    cols_any = np.nonzero(sim.sum(axis=0) > 0)[0] if sim.size else np.zeros(0, dtype=np.int64)
    if len(rows_any) and len(cols_any):
        block = sim[np.ix_(rows_any, cols_any)]
        rows, cols = linear_assignment(block)
        total = float(block[rows, cols].sum())
    return total, r_den, total, p_den


def ceafe_counts(key: Clustering, response: Clustering) -> tuple[float, float, float, float]:
    """Entity-based CEAF (phi4): best one-to-one entity alignment; recall / |key entities|, precision / |response entities|."""
    return _ceaf_counts(key, response, entity_based=True)


def ceafm_counts(key: Clustering, response: Clustering) -> tuple[float, float, float, float]:
    """Mention-based CEAF (phi3 = |K∩R|); recall / key mentions, precision / response mentions."""
    return _ceaf_counts(key, response, entity_based=False)


COUNTS = {"muc": muc_counts, "bcub": b_cubed_counts, "ceafe": ceafe_counts, "ceafm": ceafm_counts}


def score(key: Clustering, response: Clustering, metric: str) -> tuple[float, float, float]:
    """(recall, precision, F1) of one document for ``metric`` in muc, bcub, ceafe, ceafm."""
    r_num, r_den, p_num, p_den = COUNTS[metric](key, response)
    p, r, f = _f1(p_num, p_den, r_num, r_den)
    return r, p, f


@dataclass
class CorefEvaluator:
    """Accumulates counts over documents; `scores()` gives the corpus-level numbers of the scorer.

    >>> ev = CorefEvaluator(); ev.update([[1], [2, 3]], [[1], [2, 3]]); ev.scores()["conll_f1"]
    100.0
    """

    metrics: tuple[str, ...] = ("muc", "bcub", "ceafe", "ceafm")
    counts: dict[str, list[float]] = field(default_factory=dict)
    mentions: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    """Mention detection: [correct, key mentions, response mentions]."""

    def update(self, key: Clustering, response: Clustering) -> None:
        """Add one document."""
        key, response = dedup(key), dedup(response)
        for metric in self.metrics:
            c = COUNTS[metric](key, response)
            acc = self.counts.setdefault(metric, [0.0, 0.0, 0.0, 0.0])
            for i in range(4):
                acc[i] += c[i]
        gold = {m for e in key for m in e}
        pred = {m for e in response for m in e}
        self.mentions[0] += len(gold & pred)
        self.mentions[1] += len(gold)
        self.mentions[2] += len(pred)

    def scores(self) -> dict[str, float]:
        """Percentages: ``{metric}_p``, ``_r``, ``_f1`` for each metric, mention P/R/F1 and ``conll_f1``
        (the mean F1 of MUC, B3 and CEAF-phi4)."""
        out: dict[str, float] = {}
        for metric in self.metrics:
            r_num, r_den, p_num, p_den = self.counts.get(metric, [0.0, 0.0, 0.0, 0.0])
            p, r, f = _f1(p_num, p_den, r_num, r_den)
            out[f"{metric}_p"], out[f"{metric}_r"], out[f"{metric}_f1"] = 100 * p, 100 * r, 100 * f
        correct, n_key, n_resp = self.mentions
        p, r, f = _f1(correct, n_resp, correct, n_key)
        out["mention_p"], out["mention_r"], out["mention_f1"] = 100 * p, 100 * r, 100 * f
        out["conll_f1"] = sum(out.get(f"{m}_f1", 0.0) for m in METRICS) / len(METRICS)
        return out


def document_rows(keys: Sequence[Clustering], responses: Sequence[Clustering]) -> list[list[float]]:
    """Per document, for MUC, B3 and CEAF-e in turn, ``[precision numerator, precision denominator, recall
    numerator, recall denominator]``: summed over documents, the CoNLL F1 of `evaluate_documents` (a
    ``conll`` row of `spanbert.metrics.resample`, to resample the documents)."""
    if len(keys) != len(responses):
        raise ValueError(f"{len(keys)} key documents but {len(responses)} response documents")
    rows = []
    for key, response in zip(keys, responses):
        key, response = dedup(key), dedup(response)
        row: list[float] = []
        for metric in METRICS:
            r_num, r_den, p_num, p_den = COUNTS[metric](key, response)
            row += [p_num, p_den, r_num, r_den]
        rows.append(row)
    return rows


def evaluate_documents(keys: Sequence[Clustering], responses: Sequence[Clustering]) -> dict[str, float]:
    """Corpus scores (percent) for parallel lists of key and response clusterings."""
    if len(keys) != len(responses):
        raise ValueError(f"{len(keys)} key documents but {len(responses)} response documents")
    ev = CorefEvaluator()
    for k, r in zip(keys, responses):
        ev.update(k, r)
    return ev.scores()
