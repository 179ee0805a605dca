"""From start/end logits to answers (`spanbert.tasks.qa.decoding`): the max answer length and the SQuAD 2.0 null
score, the best span of a batch of windows equal to each window's, and prediction that keeps four numbers a
window giving the answers of the reference decoding over all windows' full logits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from test_qa import _write, synthetic_squad, tok  # noqa: F401 - tok is a fixture

from spanbert.config import model_config
from spanbert.tasks import qa


def _one_window_data(tok, tmp_path: Path, version_2: bool):  # noqa: F811
    ctx = "alpha beta gamma delta epsilon zeta eta theta"
    d = {"version": "v2.0" if version_2 else "1.1",
         "data": [{"paragraphs": [{"context": ctx, "qas": [{"id": "q", "question": "x", "answers": [{"text": "beta", "answer_start": 6}]}]}]}]}  # fmt: skip
    data = qa.read_squad(_write(tmp_path / "d.json", d))
    td = qa.tokenize_data(data, tok, progress=False)
    feats = qa.make_features(data, td, tok.cls_id, tok.sep_id, max_seq_length=64)
    return ctx, data, td, feats


def test_decode_constraints_and_null_threshold(tok, tmp_path: Path) -> None:  # noqa: F811
    ctx, data, td, feats = _one_window_data(tok, tmp_path, version_2=True)
    T = len(feats.input_ids[0])
    p0 = feats.query_len[0] + 2  # first passage position
    off = td.context_offsets[0]

    def text(i: int, j: int) -> str:  # passage tokens i..j
        return ctx[off[i, 0] : off[j, 1]]

    s_log, e_log = np.zeros(T), np.zeros(T)
    s_log[1] = e_log[1] = 50.0  # a question token: never part of an answer
    s_log[p0 + 3], e_log[p0 + 1] = 20.0, 20.0  # end before start: not a span
    e_log[p0 + 5], e_log[p0 + 4] = 9.0, 3.0  # best valid span: 3..5 (29), then 3..4 (23)
    s_log[0], e_log[0] = 17.0, 17.0  # null score 34 vs best span 29: difference 5
    out = qa.decode(data, td, feats, [s_log], [e_log], version_2=True, null_score_diff_threshold=4.0)
    assert out.best_non_null["q"] == text(3, 5)
    assert out.null_odds["q"] == pytest.approx(5.0) and out.predictions["q"] == ""
    out = qa.decode(data, td, feats, [s_log], [e_log], version_2=True, null_score_diff_threshold=5.0)
    assert out.predictions["q"] == text(3, 5)
    out = qa.decode(data, td, feats, [s_log], [e_log], max_answer_length=2)  # v1.1: never null
    assert out.predictions["q"] == text(3, 4) and not out.null_odds


def _reference_decode(data, td, feats, start_logits, end_logits, n_best, max_len, version_2, thresh):
    """BERT's ``write_predictions`` over every window's full logits, as `qa.decode` was written before
    prediction kept four numbers per window instead of the logits (the reference for equality)."""
    import math

    predictions, null_odds, best_non_null = {}, {}, {}
    for ei, ex in enumerate(data.examples):
        best_score, best_span, score_null = -math.inf, None, math.inf
        for fi in [f for f, e in enumerate(feats.example_index) if e == ei]:
            n = len(feats.input_ids[fi])
            sl = np.asarray(start_logits[fi][:n], dtype=np.float64)
            el = np.asarray(end_logits[fi][:n], dtype=np.float64)
            score_null = min(score_null, sl[0] + el[0])
            p0, mc = feats.query_len[fi] + 2, feats.max_context[fi]
            W, k = len(mc), min(n_best, n)
            S, E = np.meshgrid(np.argsort(-sl, kind="stable")[:k], np.argsort(-el, kind="stable")[:k], indexing="ij")
            ok = (S >= p0) & (S < p0 + W) & (E >= p0) & (E < p0 + W) & (E >= S) & (E - S + 1 <= max_len)
            if W == 0 or not np.any(ok):
                continue
            ok &= mc[np.clip(S - p0, 0, W - 1)]
            if not np.any(ok):
                continue
            scores = np.where(ok, sl[S] + el[E], -np.inf)
            j = int(np.argmax(scores))
            if scores.flat[j] > best_score:
                best_score = float(scores.flat[j])
                ds = feats.doc_start[fi] - p0
                best_span = (int(S.flat[j]) + ds, int(E.flat[j]) + ds)
        off, ctx = td.context_offsets[ex.context_index], data.contexts[ex.context_index]
        text = ctx[off[best_span[0], 0] : off[best_span[1], 1]] if best_span is not None else ""
        best_non_null[ex.qid] = text
        if version_2:
            diff = score_null - best_score if best_span is not None else 1e9
            null_odds[ex.qid] = float(diff)
            predictions[ex.qid] = "" if diff > thresh else text
        else:
            predictions[ex.qid] = text
    return qa.Decoded(predictions, null_odds, best_non_null)


@pytest.mark.parametrize("n_best_size", [3, 20])
def test_best_spans_in_batch_is_best_span_in_window_on_every_row(n_best_size: int) -> None:
    """The vectorised reduction of a batch gives each window's `best_span_in_window` exactly: ties
    (integer logits), windows shorter than the batch (padding of any value), windows shorter than
    n_best_size, windows where no span is valid, an empty passage."""
    rng = np.random.default_rng(0)
    for trial in range(200):
        B, T = int(rng.integers(1, 6)), int(rng.integers(4, 40))
        qlen, mcs = [], []
        for _ in range(B):
            q = int(rng.integers(0, T - 3))
            w = int(rng.integers(0, T - q - 2)) if trial % 7 else T - q - 3  # a full-length row now and then
            qlen.append(q)
            mcs.append(rng.random(w) < (0.8 if trial % 5 else 0.0))  # no max-context start at all: no span
        start = rng.integers(-3, 4, (B, T)).astype(np.float32)  # few distinct values: ties everywhere
        end = rng.integers(-3, 4, (B, T)).astype(np.float32)
        for b in range(B):  # padding past the window: anything (here large values a bad gather would pick)
            start[b, qlen[b] + 3 + len(mcs[b]) :] = 99.0
            end[b, qlen[b] + 3 + len(mcs[b]) :] = 99.0
        got = qa.best_spans_in_batch(start, end, qlen, mcs, n_best_size, 4)
        want = [qa.best_span_in_window(start[b], end[b], qlen[b], mcs[b], n_best_size, 4) for b in range(B)]
        assert got == want, trial
    assert qa.best_spans_in_batch(np.zeros((0, 5)), np.zeros((0, 5)), [], [], 20, 30) == []


@pytest.mark.parametrize("version_2", [False, True])
def test_prediction_reduces_each_batch_to_spans_with_the_same_answers(tok, tmp_path: Path, version_2: bool) -> None:  # noqa: F811
    """`run_prediction` keeps four numbers per window, not its logits: the answers, null odds and best
    non-null spans are exactly those of the reference decoding over all windows' full logits."""
    data = qa.read_squad(_write(tmp_path / "d.json", synthetic_squad(3, seed=1, unanswerable=version_2)))
    cfg = qa.QAConfig(max_seq_length=24, doc_stride=4, n_best_size=5, max_answer_length=4,
                      version_2_with_negative=version_2)  # fmt: skip
    torch.manual_seed(0)
    model = qa.SpanBertForQuestionAnswering(model_config("tiny", vocab_size=tok.vocab_size, hidden_dropout_prob=0.0))
    td, feats = qa.features_for(data, tok, cfg, training=False, progress=False)
    assert len(feats) >= 3 * len(data.examples)  # several windows per question: the max over windows matters
    starts, ends = qa.predict_logits(model, feats, tok.pad_id, batch_size=7, device="cpu")
    ref = _reference_decode(data, td, feats, starts, ends, 5, 4, version_2, 0.0)
    if version_2:  # a threshold that leaves some questions answered and some not
        cfg.null_score_diff_threshold = float(np.median(list(ref.null_odds.values())))
        ref = _reference_decode(data, td, feats, starts, ends, 5, 4, True, cfg.null_score_diff_threshold)
        assert "" in ref.predictions.values() and set(ref.predictions.values()) != {""}
    assert len(set(ref.best_non_null.values())) > 3  # not one constant answer
    got = qa.run_prediction(model, data, tok, cfg, batch_size=7, device="cpu", progress=False)
    assert got == ref
    # the logits path (`decode`, used by fine-tuning's evaluation) answers the same
    assert qa.decode(data, td, feats, starts, ends, 5, 4, version_2, cfg.null_score_diff_threshold) == ref
