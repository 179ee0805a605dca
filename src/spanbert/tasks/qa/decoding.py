"""From start/end logits to answers: the best span of a window (and of a batch of windows at once), n-best
decoding with max answer length and the SQuAD 2.0 null score, the no-answer threshold, the official scores."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from spanbert.metrics import squad as squad_metrics
from spanbert.tasks.qa.data import QAData
from spanbert.tasks.qa.features import QAFeatures, TokenizedData

# ---------------------------------------------------------------------------------------------
# Decoding


@dataclass
class Decoded:
    predictions: dict[str, str]
    """qid -> answer text ("" = no answer, SQuAD 2.0 only)."""
    null_odds: dict[str, float]
    """qid -> null score minus best span score (SQuAD 2.0 only; BERT's null_odds.json)."""
    best_non_null: dict[str, str]
    """qid -> best non-empty span text, whatever the null score."""


NO_SPAN = (-math.inf, -1, -1)
"""`best_span_in_window`'s answer for a window with no valid span (score, start, end)."""


def best_span_in_window(
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    query_len: int,
    max_context: np.ndarray,
    n_best_size: int = 20,
    max_answer_length: int = 30,
) -> tuple[float, int, int, float]:
    """One window's share of `decode`: ``(best span score, start, end, null score)``.

    ``start_logits`` / ``end_logits`` are the window's (T,) logits (padding may follow: only the
    window's own ``query_len + 3 + len(max_context)`` positions are read). ``start``/``end`` count
    from the window's first passage token; ``(-inf, -1, -1)`` (`NO_SPAN`) when no pair is valid.
    The null score is the ``[CLS]`` start + end logit. Four numbers per window are all decoding
    needs, so a prediction keeps these instead of the logits (a full-dev run keeps O(windows)
    numbers, not O(windows x T)).
    """
    p0 = query_len + 2  # first passage position
    W = len(max_context)
    n = p0 + W + 1  # [CLS] question [SEP] passage [SEP]
    sl = np.asarray(start_logits[:n], dtype=np.float64)  # (T,)
    el = np.asarray(end_logits[:n], dtype=np.float64)  # (T,)
    null = float(sl[0] + el[0])
    k = min(n_best_size, n)
    starts = np.argsort(-sl, kind="stable")[:k]
    ends = np.argsort(-el, kind="stable")[:k]
    S, E = np.meshgrid(starts, ends, indexing="ij")  # (k, k)
    ok = (S >= p0) & (S < p0 + W) & (E >= p0) & (E < p0 + W) & (E >= S) & (E - S + 1 <= max_answer_length)
    if W == 0 or not np.any(ok):
        return (*NO_SPAN, null)
    ok &= max_context[np.clip(S - p0, 0, W - 1)]  # the start must have maximal context here
    if not np.any(ok):
        return (*NO_SPAN, null)
    scores = np.where(ok, sl[S] + el[E], -np.inf)
    j = int(np.argmax(scores))
    return float(scores.flat[j]), int(S.flat[j]) - p0, int(E.flat[j]) - p0, null


def best_spans_in_batch(
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    query_len: Sequence[int],
    max_context: Sequence[np.ndarray],
    n_best_size: int = 20,
    max_answer_length: int = 30,
) -> list[tuple[float, int, int, float]]:
    """`best_span_in_window` of every row of a batch at once, with the same numbers: ``start_logits`` /
    ``end_logits`` (B, T) (each row's padding, past its window, is never read), ``query_len[b]`` and
    ``max_context[b]`` of row b's window. The top-k and the (k, k) candidate grid of all rows are a few
    array operations instead of a dozen per window."""
    B, T = start_logits.shape
    if B == 0:
        return []
    p0 = np.asarray(query_len, dtype=np.int64) + 2  # (B,) first passage position
    W = np.array([len(m) for m in max_context], dtype=np.int64)  # (B,)
    past = np.arange(T)[None, :] >= (p0 + W + 1)[:, None]  # (B, T): beyond [CLS] q [SEP] passage [SEP]
    # past the window: -inf, so a stable sort puts those positions after all of the window's, in the
    # order `best_span_in_window` finds among the window's own positions
    sl = np.where(past, -np.inf, np.asarray(start_logits, dtype=np.float64))  # (B, T)
    el = np.where(past, -np.inf, np.asarray(end_logits, dtype=np.float64))  # (B, T)
    null = sl[:, 0] + el[:, 0]  # (B,)
    k = min(n_best_size, T)
    starts = np.argsort(-sl, axis=1, kind="stable")[:, :k]  # (B, k)
    ends = np.argsort(-el, axis=1, kind="stable")[:, :k]  # (B, k)
    S, E = starts[:, :, None], ends[:, None, :]  # (B, k, 1), (B, 1, k)
    lo, hi = p0[:, None, None], (p0 + W)[:, None, None]
    ok = (S >= lo) & (S < hi) & (E >= lo) & (E < hi) & (E >= S) & (E - S + 1 <= max_answer_length)  # (B, k, k)
    # a position past a short window (a row with fewer than k positions) is never a passage token
    mc = np.zeros((B, max(1, int(W.max()))), dtype=bool)  # (B, W_max) max-context flags, False past W
    for b, m in enumerate(max_context):
        mc[b, : len(m)] = m
    ok &= mc[np.arange(B)[:, None, None], np.clip(S - lo, 0, mc.shape[1] - 1)]  # the start has maximal context
    scores = np.where(ok, np.take_along_axis(sl, starts, 1)[:, :, None] + np.take_along_axis(el, ends, 1)[:, None, :],
                      -np.inf).reshape(B, k * k)  # fmt: skip
    j = scores.argmax(1)  # (B,) the first best in (start rank, end rank) order, as `best_span_in_window`
    found = ok.reshape(B, k * k).any(1)  # (B,)
    best = scores[np.arange(B), j]
    s_best, e_best = starts[np.arange(B), j // k] - p0, ends[np.arange(B), j % k] - p0
    return [
        (float(best[b]), int(s_best[b]), int(e_best[b]), float(null[b])) if found[b] else (*NO_SPAN, float(null[b]))
        for b in range(B)
    ]


def decode(
    data: QAData,
    tok: TokenizedData,
    features: QAFeatures,
    start_logits: Sequence[np.ndarray],
    end_logits: Sequence[np.ndarray],
    n_best_size: int = 20,
    max_answer_length: int = 30,
    version_2: bool = False,
    null_score_diff_threshold: float = 0.0,
) -> Decoded:
    """BERT's ``write_predictions``: best span per question over all its windows.

    Candidates are the top ``n_best_size`` start and end positions of each window; a pair is kept
    when both ends are passage tokens, the start has maximal context in this window, end >= start
    and the span has at most ``max_answer_length`` tokens; its score is start + end logit. SQuAD 2.0:
    the null score is the smallest ``[CLS]`` start+end score over the windows; the answer is "" when
    ``null - best span > threshold``. The text is the context between the span's character offsets
    (no need for BERT's ``get_final_text`` heuristic, which undid lower-casing).

    The same as `best_span_in_window` on each window then `decode_spans` (what `run_prediction`
    does batch by batch, without keeping the logits).
    """
    spans = [
        best_span_in_window(start_logits[fi], end_logits[fi], features.query_len[fi], features.max_context[fi],
                            n_best_size, max_answer_length)  # fmt: skip
        for fi in range(len(features))
    ]
    return decode_spans(data, tok, features, spans, version_2, null_score_diff_threshold)


def decode_spans(
    data: QAData,
    tok: TokenizedData,
    features: QAFeatures,
    spans: Sequence[tuple[float, int, int, float]],
    version_2: bool = False,
    null_score_diff_threshold: float = 0.0,
) -> Decoded:
    """The answers from each window's `best_span_in_window`: per question the best span over its
    windows (the earliest window on ties), the smallest null score, and the SQuAD 2.0 threshold."""
    by_example: dict[int, list[int]] = {}
    for fi, ei in enumerate(features.example_index):
        by_example.setdefault(ei, []).append(fi)
    predictions: dict[str, str] = {}
    null_odds: dict[str, float] = {}
    best_non_null: dict[str, str] = {}
    for ei, ex in enumerate(data.examples):
        context = data.contexts[ex.context_index]
        offsets = tok.context_offsets[ex.context_index]
        best_score, best_span = -math.inf, None
        score_null = math.inf
        for fi in by_example.get(ei, []):
            s_score, s, e, null = spans[fi]
            score_null = min(score_null, null)
            if s >= 0 and s_score > best_score:
                best_score = s_score
                ds = features.doc_start[fi]
                best_span = (s + ds, e + ds)  # context token indices
        text = ""
        if best_span is not None:
            text = context[offsets[best_span[0], 0] : offsets[best_span[1], 1]]
        best_non_null[ex.qid] = text
        if version_2:
            # no valid span at all: the null answer wins whatever the threshold
            diff = score_null - best_score if best_span is not None else 1e9
            null_odds[ex.qid] = float(diff)
            predictions[ex.qid] = "" if diff > null_score_diff_threshold else text
        else:
            predictions[ex.qid] = text
    return Decoded(predictions, null_odds, best_non_null)


def choose_threshold(data: QAData, decoded: Decoded) -> tuple[float, dict[str, float]]:
    """SQuAD 2.0: the null-score-difference threshold that maximises F1 on ``data``.

    The official v2.0 ``find_best_thresh`` over the best non-null answers (what is predicted when
    the threshold lets a question be answered). Returns the threshold and ``best_f1`` /
    ``best_exact`` (the latter at its own best threshold, as the official script reports it).
    """
    assert data.raw is not None, "thresholds are chosen on SQuAD 2.0 files"
    dataset = data.raw["data"]
    has_ans = squad_metrics.make_qid_to_has_ans(dataset)
    exact_raw, f1_raw = squad_metrics.get_raw_scores(dataset, decoded.best_non_null)
    best_f1, thresh = squad_metrics.find_best_thresh(decoded.best_non_null, f1_raw, decoded.null_odds, has_ans)
    best_exact, _ = squad_metrics.find_best_thresh(decoded.best_non_null, exact_raw, decoded.null_odds, has_ans)
    return float(thresh), {"best_f1": best_f1, "best_exact": best_exact}


def score(data: QAData, predictions: dict[str, str], na_probs: dict[str, float] | None = None) -> dict[str, float]:
    """Official metrics: v1.1 script for SQuAD 1.1, v2.0 script for SQuAD 2.0, MRQA script for MRQA."""
    if data.format == "mrqa":
        return squad_metrics.evaluate_mrqa(data.gold_answers(), predictions)
    assert data.raw is not None
    if data.version_2:
        return squad_metrics.evaluate_v2(data.raw["data"], predictions, na_probs)
    return squad_metrics.evaluate_v1(data.raw["data"], predictions)


