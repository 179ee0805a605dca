"""Masking schemes: budget, span-length distribution, 80/10/10 per span, unigram replacements, SBO targets.

Statistical tolerances are derived from the sample sizes in each test (k standard errors, k >= 5, so a
correct implementation fails with probability < 1e-6 per check; the seeds are fixed anyway).
"""

from __future__ import annotations

import numpy as np
import pytest

from spanbert.errors import SpanBertError
from spanbert.masking import (
    IGNORE_INDEX,
    SCHEMES,
    UnigramSampler,
    mask_block,
    sample_span_lengths,
    span_length_probs,
)

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
SPECIALS = (PAD, UNK, CLS, SEP, MASK)
V = 1000


def synthetic_block(rng, n=512, piece_prob=0.25, sep_at=None, pad=0):
    """[CLS] tokens [SEP] (+ [PAD]s): words of 1+ pieces (a piece continues a word with piece_prob)."""
    ids = rng.integers(5, V, n)
    ws = rng.random(n) >= piece_prob
    ids[0], ws[0], ws[1] = CLS, True, True
    end = n - 1 - pad
    ids[end], ws[end] = SEP, True
    ids[end + 1 :], ws[end + 1 :] = PAD, True
    if sep_at is not None:
        ids[sep_at], ws[sep_at] = SEP, True
        ws[sep_at + 1] = True  # a "##" piece right after a special token counts as a word start anyway
    return ids, ws


def mask(ids, ws, scheme="span", rng=None, **kw):
    kw.setdefault("vocab_size", V)
    return mask_block(ids, ws, scheme, rng, mask_id=MASK, special_ids=SPECIALS, **kw)


def word_lengths_of_spans(spans, ws):
    return np.array([int(ws[s : e + 1].sum()) for s, e in spans])


def test_span_length_sampler_is_truncated_geometric():
    rng = np.random.default_rng(0)
    n = 200_000
    lengths = sample_span_lengths(rng, n, 0.2, 10)
    assert lengths.min() == 1 and lengths.max() == 10
    # mean of Geo(0.2) truncated to 1..10 is 3.797; sd ~2.6, so the SE over 200k draws is 0.006: ±0.05 is ~8 SE
    assert span_length_probs() @ np.arange(1, 11) == pytest.approx(3.797, abs=5e-4)
    assert lengths.mean() == pytest.approx(3.797, abs=0.05)
    freq = np.bincount(lengths, minlength=11)[1:] / n
    p = span_length_probs()
    se = np.sqrt(p * (1 - p) / n)  # binomial SE of each frequency (<= 0.0009)
    assert np.all(np.abs(freq - p) <= 6 * se), (freq, p)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_mask_rate_is_15_percent(scheme):
    rng = np.random.default_rng(1)
    masked = total = 0
    for _ in range(150):
        ids, ws = synthetic_block(rng)
        cand = np.array([[5, 7], [40, 42], [100, 104], [300, 301], [400, 409]])
        r = mask(ids, ws, scheme, rng, candidates=cand)
        masked += int((r.labels != IGNORE_INDEX).sum())
        total += 510
        assert (r.labels[[0, 511]] == IGNORE_INDEX).all()  # [CLS] and [SEP] are never masked
    # The budget is 15% with unbiased rounding; the only loss is a span that cannot be placed at the
    # end (at most a few tokens of a 76-token budget, rarely). 76,500 tokens: ±0.3 points is ~230 tokens.
    assert masked / total == pytest.approx(0.15, abs=0.003)


def test_spans_are_complete_words_and_realised_lengths_stay_close():
    rng = np.random.default_rng(2)
    lengths = []
    for _ in range(400):
        ids, ws = synthetic_block(rng, sep_at=200)
        r = mask(ids, ws, "span", rng)
        for s, e in r.spans:
            assert ws[s], "a span starts at a word start"
            assert e + 1 == len(ids) or ws[e + 1], "a span ends at a word end"
            assert not np.isin(ids[s : e + 1], SPECIALS).any(), "no special token inside a span"
        wl = word_lengths_of_spans(r.spans, ws)
        assert wl.min() >= 1 and wl.max() <= 10
        lengths += wl.tolist()
        # spans never touch: their external boundaries are observed (unmasked) tokens
        assert (r.labels[r.spans[:, 0] - 1] == IGNORE_INDEX).all()
        assert (r.labels[r.spans[:, 1] + 1] == IGNORE_INDEX).all()
    lengths = np.array(lengths)
    # ~6,000 spans, sd ~2.6 -> SE 0.035. The start is resampled on collisions (the length is kept), so
    # only the span that meets the budget and the clipping at [SEP] shorten spans (docs/data.md).
    assert len(lengths) > 5000
    assert 3.55 <= lengths.mean() <= 3.797 + 0.1


def test_80_10_10_is_decided_per_span_and_random_tokens_follow_the_unigram():
    rng = np.random.default_rng(3)
    counts = np.zeros(V)
    counts[5:] = 1.0 / np.arange(1, V - 4)  # Zipf unigram over ordinary tokens
    sampler = UnigramSampler(counts, SPECIALS)
    kinds = []
    random_tokens = []
    for _ in range(500):
        ids, ws = synthetic_block(rng)
        r = mask(ids, ws, "span", rng, random_tokens=sampler)
        for s, e in r.spans:
            got, orig = r.input_ids[s : e + 1], ids[s : e + 1]
            if (got == MASK).all():
                kinds.append(0)
            elif (got == orig).all():
                kinds.append(2)
            else:
                assert not (got == MASK).any(), "one decision per span"
                kinds.append(1)
                random_tokens += got.tolist()
    freq = np.bincount(kinds, minlength=3) / len(kinds)
    # ~8,000 spans: the SE of a 10% share is 0.0034, so ±2 points is ~6 SE
    assert len(kinds) > 7000
    assert freq == pytest.approx([0.8, 0.1, 0.1], abs=0.02)
    # random tokens: the 10 most frequent ids each within 6 SE of their unigram probability
    random_tokens = np.array(random_tokens)
    assert not np.isin(random_tokens, SPECIALS).any()
    emp = np.bincount(random_tokens, minlength=V) / len(random_tokens)
    top = np.argsort(-sampler.probs)[:10]
    se = np.sqrt(sampler.probs[top] * (1 - sampler.probs[top]) / len(random_tokens))
    assert np.all(np.abs(emp[top] - sampler.probs[top]) <= 6 * se)


def test_subword_and_whole_word_decide_per_token():
    rng = np.random.default_rng(4)
    mixed = 0
    for _ in range(50):
        ids, ws = synthetic_block(rng, piece_prob=0.5)
        r = mask(ids, ws, "whole_word", rng)
        for s, e in r.unit_spans:
            assert ws[s] and (e + 1 == len(ids) or ws[e + 1]), "whole words only"
            got = r.input_ids[s : e + 1]
            mixed += (got == MASK).any() and not (got == MASK).all()
    assert mixed > 0  # per-token decisions do mix inside a word (as Google's whole-word BERT)


def test_same_seed_same_masks_other_seed_other_masks():
    ids, ws = synthetic_block(np.random.default_rng(5))
    for scheme in SCHEMES:
        a = mask(ids, ws, scheme, np.random.default_rng([7, 0, 3]), candidates=np.array([[5, 8]]))
        b = mask(ids, ws, scheme, np.random.default_rng([7, 0, 3]), candidates=np.array([[5, 8]]))
        c = mask(ids, ws, scheme, np.random.default_rng([7, 1, 3]), candidates=np.array([[5, 8]]))
        assert np.array_equal(a.input_ids, b.input_ids) and np.array_equal(a.labels, b.labels)
        assert not np.array_equal(a.labels, c.labels)


def test_sbo_targets_match_spans():
    rng = np.random.default_rng(6)
    ids, ws = synthetic_block(rng, pad=20, sep_at=250)
    r = mask(ids, ws, "span", rng)
    masked = np.flatnonzero(r.labels != IGNORE_INDEX)
    assert np.array_equal(np.sort(r.sbo_positions), masked)  # M = N under the paper's rules
    for pos, left, right, rel in zip(r.sbo_positions, r.sbo_left, r.sbo_right, r.sbo_rel):
        (k,) = np.flatnonzero((r.spans[:, 0] <= pos) & (pos <= r.spans[:, 1]))
        s, e = r.spans[k]
        assert (left, right, rel) == (s - 1, e + 1, pos - s)
    assert (r.labels[ids == PAD] == IGNORE_INDEX).all() and (r.labels[250] == IGNORE_INDEX)


def test_official_options():
    rng = np.random.default_rng(8)
    n_long = 0
    for _ in range(100):
        ids, ws = synthetic_block(rng)
        # budget in word pieces, stopping mid-word: exactly the budget is masked
        r = mask(ids, ws, "span", rng, stop_mid_word=True, anchor="subword")
        assert abs(int((r.labels != IGNORE_INDEX).sum()) - 0.15 * 510) < 1
        # merged spans may touch nothing else (maximal runs) and may exceed 10 words
        r = mask(ids, ws, "span", rng, merge_adjacent=True, geometric_p=0.05)
        runs = r.spans
        assert (r.labels[runs[:, 0] - 1] == IGNORE_INDEX).all() and (r.labels[runs[:, 1] + 1] == IGNORE_INDEX).all()
        n_long += int((word_lengths_of_spans(runs, ws) > 10).sum())
        # at most 15 SBO targets per span
        r = mask(ids, ws, "span", rng, max_sbo_targets=15, geometric_p=0.05)
        assert r.sbo_rel.max(initial=0) <= 14
        # no SBO target for spans touching [CLS] or [SEP]
        r = mask(ids, ws, "span", rng, sbo_skip_edge=True)
        assert not np.isin(r.sbo_left, [0]).any() and not np.isin(r.sbo_right, [511]).any()
    assert n_long > 0


def test_fast_span_path_keeps_the_rules_with_each_option():
    # The paper's configuration (word anchors, no merging) takes a dedicated fast path, also with
    # stop_mid_word, max_sbo_targets and sbo_skip_edge; check the rules hold there on their own.
    rng = np.random.default_rng(13)
    n_edge = 0
    for _ in range(150):
        ids, ws = synthetic_block(rng)
        # the budget in word pieces, stopping mid-word: exactly the (randomly rounded) budget
        r = mask(ids, ws, "span", rng, stop_mid_word=True)
        assert abs(int((r.labels != IGNORE_INDEX).sum()) - 0.15 * 510) < 1
        r = mask(ids, ws, "span", rng, max_sbo_targets=2)
        lens = r.spans[:, 1] - r.spans[:, 0] + 1
        assert len(r.sbo_positions) == np.minimum(lens, 2).sum() and r.sbo_rel.max(initial=0) <= 1
        # raw tokens, no [CLS]/[SEP]: a span at the block edge has no external boundary, so no target
        raw_ids, raw_ws = ids[1:-1], ws[1:-1].copy()
        raw_ws[0] = True
        r = mask(raw_ids, raw_ws, "span", rng)
        n = len(raw_ids)
        inner = (r.spans[:, 0] >= 1) & (r.spans[:, 1] <= n - 2)
        n_edge += int((~inner).sum())
        assert len(r.sbo_positions) == (r.spans[inner, 1] - r.spans[inner, 0] + 1).sum()
        assert ((r.sbo_left >= 0) & (r.sbo_right <= n - 1)).all()
        # spans never touch, so every external boundary is an observed token
        assert (r.labels[r.sbo_left] == IGNORE_INDEX).all() and (r.labels[r.sbo_right] == IGNORE_INDEX).all()
    assert n_edge > 0  # the edge rule was exercised


def test_subword_anchor_favours_long_words():
    # words alternate: one piece, three pieces; count how often each kind starts a span
    pattern = np.array([True, True, False, False])  # word A (1 piece), word B (3 pieces)
    ws = np.tile(pattern, 128)
    ws[0] = True
    ids = np.arange(512) % 900 + 5
    ids[0], ids[-1] = CLS, SEP
    ws[-1] = True
    long_word = np.tile([False, True, False, False], 128)
    ratios = {}
    for anchor in ("word", "subword"):
        rng = np.random.default_rng(9)
        hits = np.zeros(2)
        for _ in range(200):
            r = mask(ids, ws, "span", rng, anchor=anchor, max_span_len=1)
            hits += [np.sum(~long_word[r.spans[:, 0]]), np.sum(long_word[r.spans[:, 0]])]
        ratios[anchor] = hits[1] / hits[0]
    # spans of one word: per-word starts are uniform (ratio ~1, minus budget effects on 3-piece words)
    # versus 3x likelier for the 3-piece words when anchored on word pieces
    assert ratios["word"] < 1.3 and ratios["subword"] > 2.0, ratios


def test_candidate_schemes_take_half_the_budget_from_candidates():
    rng = np.random.default_rng(10)
    inside = total = 0
    for _ in range(100):
        ids, ws = synthetic_block(rng, piece_prob=0.0)
        cand = np.stack([np.arange(1, 500, 10), np.arange(1, 500, 10) + 2], axis=1)  # 3-token entities
        r = mask(ids, ws, "named_entity", rng, candidates=cand)
        in_cand = np.zeros(len(ids), bool)
        for s, e in cand:
            in_cand[s : e + 1] = True
        m = r.labels != IGNORE_INDEX
        inside += int((m & in_cand).sum())
        total += int(m.sum())
    # half of the budget from candidates, plus random words that happen to fall inside one (30% of tokens)
    assert 0.5 <= inside / total <= 0.5 + 0.5 * 0.3 + 0.05


def test_errors():
    ids, ws = synthetic_block(np.random.default_rng(11))
    with pytest.raises(SpanBertError, match="unknown masking scheme"):
        mask(ids, ws, "bogus", np.random.default_rng(0))
    with pytest.raises(SpanBertError, match="Generator"):
        mask(ids, ws, "span", None)
    with pytest.raises(SpanBertError, match="shape"):
        mask(ids, ws[:-1], "span", np.random.default_rng(0))


def test_padding_does_not_change_the_masks():
    # [CLS] ... [SEP] takes a fast path in the word segmentation; a trailing [PAD] takes the general one
    rng = np.random.default_rng(12)
    for scheme in SCHEMES:
        for _ in range(20):
            ids, ws = synthetic_block(rng, n=100)
            a = mask(ids, ws, scheme, np.random.default_rng(1), candidates=np.array([[3, 5]]))
            b = mask(
                np.append(ids, [PAD, PAD]),
                np.append(ws, [True, True]),
                scheme,
                np.random.default_rng(1),
                candidates=np.array([[3, 5]]),
            )
            assert np.array_equal(a.input_ids, b.input_ids[:100]) and np.array_equal(a.labels, b.labels[:100])
            assert np.array_equal(a.sbo_positions, b.sbo_positions) and np.array_equal(a.sbo_right, b.sbo_right)


def test_official_mode_decides_80_10_10_once_per_merged_run():
    # merge_adjacent (the released code): spans that overlap or touch merge, and the released
    # `span_masking` draws 80/10/10 after `merge_intervals`: a merged run is all [MASK], all random or
    # all unchanged. (Deciding per sampled span left ~3% of merged runs mixed.)
    rng = np.random.default_rng(21)
    kinds = {"mask": 0, "random": 0, "same": 0}
    n_merged = n_mixed_random_same = 0
    for _ in range(300):
        ids, ws = synthetic_block(rng)
        r = mask(ids, ws, "span", rng, merge_adjacent=True, anchor="subword", stop_mid_word=True, geometric_p=0.1)
        units = r.unit_spans
        for s, e in r.spans.tolist():
            got, orig = r.input_ids[s : e + 1], ids[s : e + 1]
            n_units = int(((units[:, 0] <= e) & (units[:, 1] >= s)).sum())
            n_merged += n_units > 1
            n_mask = int((got == MASK).sum())
            assert n_mask in (0, len(got)), "a merged run mixes [MASK] with other treatments"
            if n_mask:
                kinds["mask"] += 1
            elif (got == orig).all():
                kinds["same"] += 1
            else:
                kinds["random"] += 1
                # a random token equals the original with probability ~1/995: at most a few such tokens
                n_mixed_random_same += (got == orig).sum() > 0.5 * len(got)
    n = sum(kinds.values())
    assert n_merged > 300  # enough merged runs that a per-span decision would have mixed some
    assert n_mixed_random_same == 0
    # ~4,000 runs: SE of a share <= 0.008; 5 SE
    assert kinds["mask"] / n == pytest.approx(0.8, abs=0.04)
    assert kinds["random"] / n == pytest.approx(0.1, abs=0.03) and kinds["same"] / n == pytest.approx(0.1, abs=0.03)


# BERT Appendix C.2, Table 8: (MASK, SAME, RND) in the paper's column order
TABLE_8 = [(1.0, 0.0, 0.0), (0.8, 0.0, 0.2), (0.8, 0.2, 0.0), (0.8, 0.1, 0.1), (0.0, 0.2, 0.8), (0.0, 0.0, 1.0)]


@pytest.mark.parametrize("scheme", ["subword", "span", "whole_word"])
@pytest.mark.parametrize("row", TABLE_8, ids=lambda r: "/".join(str(round(100 * x)) for x in r))
def test_table_8_mask_rates(scheme, row):
    from spanbert.masking import MASK_RATES, parse_mask_rates

    m, same, rnd = row
    name = "/".join(str(round(100 * x)) for x in row)
    probs = parse_mask_rates(name)
    assert probs == pytest.approx((m, rnd, same)) and MASK_RATES[name] == pytest.approx(probs)
    rng = np.random.default_rng([len(scheme), *(round(100 * x) for x in row)])
    counts = np.zeros(3)  # units (tokens for subword/whole_word, spans for span) made [MASK], unchanged, random
    for _ in range(60):
        ids, ws = synthetic_block(rng)
        r = mask(ids, ws, scheme, rng, replace_probs=probs)
        units = r.spans if scheme == "span" else r.masked_positions[:, None].repeat(2, 1)
        for s, e in units.tolist():
            got, orig = r.input_ids[s : e + 1], ids[s : e + 1]
            if (got == MASK).all():
                counts[0] += 1
            elif (got == orig).mean() > 0.5:  # a random token equals the original with p ~ 1/995
                counts[1] += 1
            else:
                counts[2] += 1
            if scheme == "span":  # one decision per span
                assert (got == MASK).all() or not (got == MASK).any()
    n = counts.sum()
    # spans: ~60 x 20 = 1,200 (SE of a share <= 0.015); tokens: ~4,600 (SE <= 0.0074); 5 SE
    tol = 0.075 if scheme == "span" else 0.037
    assert counts / n == pytest.approx([m, same, rnd], abs=tol), (counts / n, row)
    # a zero MASK or RND rate is exactly zero (a zero SAME rate is not: a random token can be the original)
    assert (m > 0 or counts[0] == 0) and (rnd > 0 or counts[2] == 0)


def test_replace_probs_are_checked():
    from spanbert.masking import check_replace_probs, parse_mask_rates

    ids, ws = synthetic_block(np.random.default_rng(0))
    for bad in [(0.8, 0.1), (0.8, 0.3, -0.1), (0.5, 0.2, 0.2)]:
        with pytest.raises(SpanBertError, match="expected three non-negative numbers"):
            mask(ids, ws, "span", np.random.default_rng(0), replace_probs=bad)
    assert check_replace_probs(["0.8", "0", "0.2"]) == (0.8, 0.0, 0.2)
    with pytest.raises(SpanBertError, match="--mask_rates: found '80/10'"):
        parse_mask_rates("80/10")
    with pytest.raises(SpanBertError, match="summing to 100"):
        parse_mask_rates("80/10/20")


def test_cli_reads_replace_probs_and_table_8_names(capsys):
    from spanbert.cli import main as cli_main
    from spanbert.config import dataclass_from_args
    from spanbert.masking import MaskingConfig
    from spanbert.pretrain_config import PRETRAIN_DEFAULTS, pretrain_parser

    p = pretrain_parser("spanbert pretrain", PRETRAIN_DEFAULTS, {})
    for argv, want in [
        (["--replace_probs", "0.8", "0.1", "0.1"], (0.8, 0.1, 0.1)),
        (["--replace_probs", "1,0,0"], (1.0, 0.0, 0.0)),
        (["--mask_rates", "80/0/20"], (0.8, 0.2, 0.0)),  # MASK/SAME/RND -> (mask, random, unchanged)
        (["--mask_rates", "0/20/80"], (0.0, 0.8, 0.2)),
        ([], (0.8, 0.1, 0.1)),
    ]:
        assert dataclass_from_args(MaskingConfig, p.parse_args(argv)).replace_probs == pytest.approx(want), argv
    for argv, message in [
        (["--replace_probs", "0.8", "0.1"], "--replace_probs: found 0.8 0.1, expected three non-negative numbers"),
        (["--replace_probs", "0.8", "0.1", "x=1"], "put key=value overrides before --replace_probs"),
        (["--mask_rates", "80/0/30"], "--mask_rates: found '80/0/30', expected three non-negative percentages"),
        (["--mask_rates", "80/0/20", "--replace_probs", "1", "0", "0"], "give them once"),
    ]:
        assert cli_main(["pretrain", *argv]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err
