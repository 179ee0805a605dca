"""Pure, seeded masking schemes for masked-language-model pre-training (SpanBERT §3.1, §6.1; BERT §3.1).

`mask_block(token_ids, word_starts, scheme, rng, **params)` masks one block and returns a `MaskResult`:
the corrupted ``input_ids``, the ``labels`` (-100 where not masked), the masked ``spans`` and, for the
span boundary objective (§3.2), one entry per SBO target with the positions of its span's external
boundaries x_{s-1}, x_{e+1} and its relative position i-s.

Schemes (all spend a 15% budget of the block's word pieces, Appendix A (b)):

- ``subword``: BERT (§3.1 of the BERT paper): uniformly random word pieces; 80/10/10 per token.
- ``whole_word``: random whole words (SpanBERT §6.1 "Whole Words"); 80/10/10 per token as Google's
  whole-word-masking BERT.
- ``span`` (default): SpanBERT §3.1. Span length in words ℓ ~ Geo(p=0.2) truncated to ℓ <= 10 (the
  distribution renormalised over 1..10, mean 3.797, Figure 2), start uniform over word starts, complete
  words only, repeated until the budget is spent; 80/10/10 decided once per span.
- ``named_entity`` / ``noun_phrase``: §6.1: half of the budget from candidate spans found by spaCy at
  preprocess time (passed in as ``candidates``), the rest random whole words; 80/10/10 per span.

Rules the paper leaves open, and the defaults chosen here (docs/data.md discusses how they bend the
span-length distribution):

- Collisions: a span that overlaps *or touches* an already masked span is rejected and a fresh
  (length, start) pair is drawn. Spans therefore never merge, and both external boundaries of every
  span are observed tokens, which is what the SBO is defined on (§3.2 "the observed tokens at the
  boundaries").
- The span that meets the budget: its length in words is shortened to the longest prefix that fits
  (complete words only, so the budget is never overshot); if not even its first word fits, it is
  rejected. Sampling stops when the budget is spent or after 50 rejections in a row.
- A span is clipped where its segment ends (a special token such as [SEP], or the end of the block).
- The budget is round(15% x maskable tokens) with random (unbiased) rounding, so the expected mask
  rate is exactly 15% also for short blocks.

The official implementation (facebookresearch/SpanBERT, ``pretraining/fairseq/data/masking.py``)
differs; each difference is an option:

- ``stop_mid_word=True``: count the budget in word pieces and stop in the middle of a word.
- ``anchor="subword"``: draw the anchor uniformly over word pieces and move it to its word's start
  (words made of more pieces are likelier span starts).
- ``merge_adjacent=True``: only reject a span whose first token is already masked; overlapping and
  touching spans are merged (a merged span may exceed 10 words), and the 80/10/10 decision is made
  once per merged run (the official ``span_masking`` draws after ``merge_intervals``).
- ``max_sbo_targets=15``: at most 15 SBO targets per span (the first 15 tokens).
- ``sbo_skip_edge=True``: no SBO target for a span touching the edge of the text (its boundary would
  be [CLS], [SEP] or outside the block).

Special tokens (``special_ids``: [CLS], [SEP], [PAD], ...) are never masked and end words and spans.
The only Python loop is over sampled spans (about 20 per 512-token block), never over tokens.

``replace_probs`` = (mask, random, unchanged) is an option of every scheme (BERT Appendix C.2, Table 8):
decided per span for span-level schemes, per token for subword and whole_word. Table 8 lists its rows
as MASK/SAME/RND, i.e. (mask, unchanged, random): `MASK_RATES` holds them by that name ("80/0/20" ->
``(0.8, 0.2, 0.0)``) and `parse_mask_rates` reads any such triple.
"""

from __future__ import annotations

import argparse
import bisect
import dataclasses
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from spanbert.errors import SpanBertError

SCHEMES = ("subword", "whole_word", "span", "named_entity", "noun_phrase")
Scheme = Literal["subword", "whole_word", "span", "named_entity", "noun_phrase"]
IGNORE_INDEX = -100
"""Label of a position without a target, as in HF and `F.cross_entropy`'s default ``ignore_index``: an unmasked
token here; a special token or a non-first sub-token in the tasks (`spanbert.tasks.classification`)."""
_START_TRIES = 20  # starts tried for one drawn span length before the length is given up
_ONES = b"\x01" * 64  # marks for up to 64 words at once (`_select_spans_word_anchor`)


@dataclass
class MaskingConfig:
    """How pre-training blocks are masked (the keyword arguments of `mask_block`)."""

    scheme: Scheme = "span"
    """Masking scheme: subword (BERT), whole_word, span (SpanBERT §3.1), named_entity or noun_phrase (§6.1)."""
    mask_prob: float = 0.15
    """Fraction of the block's word pieces to mask (the budget)."""
    geometric_p: float = 0.2
    """Span scheme: parameter p of the geometric span-length distribution (§3.1)."""
    max_span_len: int = 10
    """Span scheme: longest span in words; Geo(p) is truncated and renormalised to 1..max_span_len (§3.1)."""
    replace_probs: tuple[float, ...] = (0.8, 0.1, 0.1)
    """Probabilities of [MASK] / random token / unchanged for a masked span (span schemes) or token (subword, whole_word); BERT Table 8 lists them as MASK/SAME/RND (--mask_rates)."""
    anchor: Literal["word", "subword"] = "word"
    """Span starts uniform over word starts (paper) or over word pieces moved to their word start (official code)."""
    stop_mid_word: bool = False
    """Official code: the span that meets the budget stops in the middle of a word (paper: complete words only)."""
    merge_adjacent: bool = False
    """Official code: allow overlapping/touching spans and merge them (paper default: reject and resample)."""
    max_sbo_targets: int | None = None
    """Official code: at most this many SBO targets per span (15); None = every token of the span."""
    sbo_skip_edge: bool = False
    """Official code: no SBO target for a span whose boundary is [CLS]/[SEP] or outside the block."""
    candidate_fraction: float = 0.5
    """named_entity/noun_phrase: share of the budget drawn from the candidate spans (§6.1: 50%)."""
    random_token: Literal["unigram", "uniform"] = "unigram"
    """Where the random replacements come from: unigram = a token drawn from the corpus (SpanBERT §2, "according to the unigram distribution", and the released code), uniform = any ordinary token of the vocabulary alike (Google BERT's create_pretraining_data.py, transformers' DataCollatorForLanguageModeling); uniform is the one to use at a small budget: through 2 M tokens it learns per token as fast as transformers' BertForMaskedLM, unigram a little slower (the measurements: docs/pretraining.md, "Learning speed")."""

    def settings(self) -> dict[str, Any]:
        """The fields as a dict for a run's settings and stored masks: ``random_token`` left out at its
        default, so runs and masks made before the option compare equal."""
        out = dataclasses.asdict(self)
        if out["random_token"] == "unigram":
            del out["random_token"]
        return out


# BERT Appendix C.2, Table 8, in the paper's column order MASK/SAME/RND -> replace_probs (mask, random, unchanged)
MASK_RATES: dict[str, tuple[float, float, float]] = {
    "80/10/10": (0.8, 0.1, 0.1),  # BERT's (and SpanBERT's) setting
    "100/0/0": (1.0, 0.0, 0.0),
    "80/0/20": (0.8, 0.2, 0.0),
    "80/20/0": (0.8, 0.0, 0.2),
    "0/20/80": (0.0, 0.8, 0.2),
    "0/0/100": (0.0, 1.0, 0.0),
}


def check_replace_probs(probs: Sequence[float], option: str = "--replace_probs") -> tuple[float, float, float]:
    """``probs`` as a (mask, random, unchanged) tuple of floats; a `SpanBertError` naming ``option``
    unless they are three finite non-negative numbers summing to 1 (within 1e-6)."""
    try:
        values = tuple(float(p) for p in probs)
    except (TypeError, ValueError):
        values = None
    if values is None or len(values) != 3 or not all(math.isfinite(p) and p >= 0 for p in values) or abs(
        sum(values) - 1.0
    ) > 1e-6:
        shown = " ".join(map(str, probs)) if isinstance(probs, (list, tuple)) else repr(probs)
        raise SpanBertError(
            f"{option}: found {shown}, expected three non-negative numbers ([MASK], random, unchanged) "
            "summing to 1, e.g. 0.8 0.1 0.1"
        )
    return values  # type: ignore[return-value]


def parse_mask_rates(text: str) -> tuple[float, float, float]:
    """Table 8's notation, percentages in the paper's order MASK/SAME/RND ("80/0/20"), as
    ``replace_probs`` (mask, random, unchanged) = (0.8, 0.2, 0.0). Any triple summing to 100 is accepted."""
    parts = str(text).split("/")
    try:
        mask, same, rnd = (float(x) for x in parts)
    except ValueError:
        raise SpanBertError(
            f"--mask_rates: found {text!r}, expected MASK/SAME/RND percentages summing to 100 in BERT "
            f"Table 8's order, e.g. one of {', '.join(MASK_RATES)}"
        ) from None
    if not all(math.isfinite(x) and x >= 0 for x in (mask, same, rnd)) or abs(mask + same + rnd - 100) > 1e-4:
        raise SpanBertError(
            f"--mask_rates: found {text!r}, expected three non-negative percentages MASK/SAME/RND summing to "
            f"100, e.g. one of {', '.join(MASK_RATES)}"
        )
    return (mask / 100, rnd / 100, same / 100)


class _ReplaceProbsAction(argparse.Action):
    """``--replace_probs P P P`` (or ``P,P,P``) and ``--mask_rates M/S/R``, both into ``replace_probs``."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, self.dest, None) is not None:
            raise SpanBertError(
                f"{option_string}: the masking rates were already given (--replace_probs and --mask_rates "
                "set the same thing): give them once"
            )
        if option_string in ("--mask_rates", "--mask-rates"):
            probs = parse_mask_rates(values)
        elif any("=" in str(v) for v in values):  # nargs="+" swallowed the key=value overrides after it
            raise SpanBertError(
                f"{option_string}: found {' '.join(values)}, expected three numbers; put key=value overrides "
                f"before {option_string}"
            )
        else:  # "0.8 0.1 0.1" as three words, or "0.8,0.1,0.1" as the key=value form spells it
            probs = check_replace_probs([x for v in values for x in str(v).replace(",", " ").split()])
        setattr(namespace, self.dest, probs)


def add_replace_probs_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """Add ``--replace_probs MASK RANDOM UNCHANGED`` and ``--mask_rates M/S/R`` (BERT Table 8's order)
    to a parser; both set ``replace_probs`` (absent from the namespace unless given)."""
    parser.add_argument(
        "--replace_probs",
        "--replace-probs",
        dest="replace_probs",
        nargs="+",
        action=_ReplaceProbsAction,
        default=argparse.SUPPRESS,
        metavar="P",
        help="probabilities that a masked span (span schemes) or token (subword, whole_word) becomes "
        "[MASK], a random token, or stays unchanged: three numbers summing to 1 (default: 0.8 0.1 0.1)",
    )
    parser.add_argument(
        "--mask_rates",
        "--mask-rates",
        dest="replace_probs",
        action=_ReplaceProbsAction,
        default=argparse.SUPPRESS,
        metavar="M/S/R",
        help="the same in BERT Table 8's notation, percentages in the order MASK/SAME/RND: "
        f"{', '.join(MASK_RATES)} (80/0/20 = 80%% [MASK], 0%% unchanged, 20%% random)",
    )


@dataclass
class MaskResult:
    """One masked block. Positions are indices into the block (the collator flattens them)."""

    input_ids: np.ndarray
    """(N,) int64 corrupted tokens."""
    labels: np.ndarray
    """(N,) int64 original token where masked, -100 elsewhere."""
    spans: np.ndarray
    """(S, 2) int64 inclusive [start, end] token positions of each maximal run of masked tokens."""
    sbo_positions: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """(M,) positions of the tokens with an SBO target (every masked token under the paper's rules)."""
    sbo_left: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """(M,) position s-1 of the span's left external boundary (§3.2)."""
    sbo_right: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """(M,) position e+1 of the span's right external boundary."""
    sbo_rel: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """(M,) relative position i-s (0-based; the paper's p_{i-s+1})."""
    unit_spans: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))
    """(U, 2) inclusive token spans as sampled (spans of words, words, tokens or candidates), before merging."""

    @property
    def masked_positions(self) -> np.ndarray:
        return np.flatnonzero(self.labels != IGNORE_INDEX)


class UnigramSampler:
    """Draws random replacement tokens from the corpus unigram distribution (BERT §3.1 via SpanBERT §2).

    Built once from token counts (``TokenCorpus.unigram_counts()``); special tokens get probability 0.
    """

    def __init__(self, counts: np.ndarray, special_ids: Sequence[int] = ()):
        counts = np.asarray(counts, dtype=np.float64).copy()  # (V,)
        if counts.ndim != 1 or (counts < 0).any():
            raise SpanBertError("unigram counts must be a 1-D array of non-negative numbers")
        counts[np.asarray(list(special_ids), dtype=np.int64)] = 0
        total = counts.sum()
        if total <= 0:
            raise SpanBertError("unigram counts are all zero: no ordinary token to draw random replacements from")
        self.probs = counts / total
        self.cdf = np.cumsum(self.probs)
        self.cdf[-1] = 1.0

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """(n,) int64 token ids."""
        return self.cdf.searchsorted(rng.random(n), side="right").astype(np.int64, copy=False)


def span_length_probs(p: float = 0.2, max_len: int = 10) -> np.ndarray:
    """(max_len,) P(ℓ = 1..max_len) of Geo(p) truncated and renormalised (§3.1, Figure 2; mean 3.797)."""
    lengths = np.arange(1, max_len + 1)
    probs = p * (1 - p) ** (lengths - 1)
    return probs / probs.sum()


def sample_span_lengths(rng: np.random.Generator, n: int, p: float = 0.2, max_len: int = 10) -> np.ndarray:
    """(n,) int64 span lengths in words drawn from `span_length_probs` (inverse CDF, vectorized)."""
    return np.searchsorted(_length_cdf(p, max_len), rng.random(n), side="right") + 1


@functools.lru_cache(maxsize=16)
def _length_cdf(p: float, max_len: int) -> np.ndarray:
    cdf = np.cumsum(span_length_probs(p, max_len))
    cdf[-1] = 1.0
    return cdf


# ---------------------------------------------------------------------------------------------
# Word segmentation


@dataclass
class _Words:
    start: np.ndarray  # (W,) first token of each word
    end: np.ndarray  # (W,) one past its last token
    seg_end: np.ndarray | None  # (W,) one past the last word of its segment (words between special tokens);
    # None: one segment of contiguous words ([CLS] words [SEP]), where word k ends where word k+1 starts
    maskable: np.ndarray  # (N,) bool
    n_maskable: int  # maskable.sum()


@functools.lru_cache(maxsize=16)
def _special_lut(special_ids: tuple[int, ...]) -> np.ndarray:
    """(max+2,) bool, False at the special ids; ids above max map to the last (True) entry."""
    special_ids = tuple(int(i) for i in special_ids)
    lut = np.ones(max(special_ids) + 2, dtype=bool)
    lut[list(special_ids)] = False
    return lut


def _words(token_ids: np.ndarray, word_starts: np.ndarray, special_ids: Sequence[int]) -> _Words:
    n = len(token_ids)
    if len(special_ids):
        key = special_ids if type(special_ids) is tuple else tuple(int(i) for i in special_ids)
        lut = _special_lut(key)
        maskable = lut.take(token_ids, mode="clip")  # (N,) ids above the largest special id map to True
    else:
        maskable = np.ones(n, dtype=bool)
    n_maskable = int(np.count_nonzero(maskable))
    if n >= 3 and n_maskable == n - 2 and not maskable[0] and not maskable[-1]:
        # Fast path for the usual block, [CLS] tokens [SEP]: one segment, words run to the next start.
        # (Array methods rather than np.* wrappers: at this size the call overhead is the cost.)
        b = word_starts.copy()
        b[0], b[1], b[-1] = False, True, True  # [SEP] marked too: it ends the last word
        bounds = b.nonzero()[0]  # (W+1,) word starts, then n-1
        return _Words(bounds[:-1], bounds[1:], None, maskable, n - 2)
    # Unit boundaries: word starts, special tokens, and a "##" piece right after a special token
    # (a block cut mid-word), which starts a word of its own.
    boundary = word_starts | ~maskable
    boundary[0] = True
    boundary[1:] |= ~maskable[:-1]
    bpos = np.flatnonzero(np.append(boundary, True))  # (U+1,) unit starts, then n
    is_word = maskable[bpos[:-1]]
    starts = bpos[:-1][is_word]  # (W,)
    ends = bpos[1:][is_word]  # (W,) the next unit start
    # a word is the last of its segment when a special token or the block end follows it
    breaks = ~np.append(maskable, False)[ends]  # (W,)
    if len(breaks):
        breaks[-1] = True
    brk = np.flatnonzero(breaks) + 1  # one past the last word of each segment
    seg_end = brk[np.cumsum(breaks) - breaks]  # (W,) segment index of each word -> its end
    return _Words(starts, ends, seg_end, maskable, n_maskable)


def _budget(rng: np.random.Generator, n_maskable: int, mask_prob: float) -> int:
    # Unbiased random rounding: E[budget] = mask_prob * n exactly, so short blocks are not under-masked.
    x = mask_prob * n_maskable
    return int(np.floor(x + rng.random()))


# ---------------------------------------------------------------------------------------------
# Selection: each returns a list of inclusive (start, end) token spans (the sampled units)


def _select_subword(rng, words: _Words, budget: int) -> list[tuple[int, int]]:
    pos = np.flatnonzero(words.maskable)
    chosen = np.sort(rng.choice(pos, size=min(budget, len(pos)), replace=False))
    return [(int(i), int(i)) for i in chosen]


def _select_whole_words(rng, words: _Words, budget: int, taken: np.ndarray | None = None) -> list[tuple[int, int]]:
    """Random whole words until ``budget`` tokens; a word that does not fit is skipped (as Google BERT)."""
    if budget <= 0 or len(words.start) == 0:
        return []
    lens = words.end - words.start  # (W,)
    order = rng.permutation(len(words.start))
    if taken is not None:  # skip words that overlap tokens already masked (by candidate spans)
        cum_taken = np.concatenate([[0], np.cumsum(taken)])
        free = cum_taken[words.end] == cum_taken[words.start]
        order = order[free[order]]
    cum = np.cumsum(lens[order])
    k = int(np.searchsorted(cum, budget, side="right"))  # the prefix that fits
    chosen = list(order[:k])
    left = budget - (int(cum[k - 1]) if k else 0)
    if left > 0:  # fill the remainder with the next words short enough (a short tail loop)
        for w in order[k:][lens[order[k:]] <= left].tolist():
            if lens[w] <= left:
                chosen.append(w)
                left -= int(lens[w])
                if left == 0:
                    break
    chosen = np.sort(np.asarray(chosen, dtype=np.int64))
    return list(zip(words.start[chosen].tolist(), (words.end[chosen] - 1).tolist()))


def _select_spans(
    rng,
    words: _Words,
    budget: int,
    p: float,
    max_len: int,
    anchor: str,
    stop_mid_word: bool,
    merge_adjacent: bool,
) -> list[tuple[int, int]]:
    """§3.1: iteratively sample (ℓ ~ Geo(p) ≤ max_len words, uniform start) until the budget is spent."""
    W = len(words.start)
    if budget <= 0 or W == 0:
        return []
    starts = words.start.tolist()
    seg_end = [W] * W if words.seg_end is None else words.seg_end.tolist()
    ends = words.end.tolist() if merge_adjacent else []
    cum = np.concatenate([[0], np.cumsum(words.end - words.start)]).tolist()  # tokens in words [0, k)
    occ = bytearray(W)  # 1 = word (partly) masked
    word_of_token = None
    if anchor == "subword":
        mask_pos = np.flatnonzero(words.maskable)
        word_of_token = np.searchsorted(words.start, mask_pos, side="right") - 1
    spans: list[tuple[int, int]] = []
    masked_tok: set[int] | None = set() if merge_adjacent else None
    remaining, fails = budget, 0
    batch = max(16, 2 * (budget // 3 + 1))  # ~ expected number of draws (budget / mean span tokens)
    pool: list[int] = []

    def draw_start() -> int:
        # uniform word index (anchor="word") or the word of a uniform word piece (anchor="subword"),
        # drawn in vectorized batches
        if not pool:
            if word_of_token is not None:
                pool.extend(word_of_token[rng.integers(0, len(mask_pos), 4 * batch)].tolist())
            else:
                pool.extend(rng.integers(0, W, 4 * batch).tolist())
        return pool.pop()

    while remaining > 0 and fails < 50:
        # candidates are drawn in vectorized batches; the loop below only does integer bookkeeping
        for length in sample_span_lengths(rng, batch, p, max_len).tolist():
            if remaining <= 0 or fails >= 50:
                break
            k = pool.pop() if pool else draw_start()
            m = min(length, seg_end[k] - k)  # clip at the end of the segment
            if merge_adjacent:
                assert masked_tok is not None
                s = starts[k]
                if s in masked_tok:  # official: only the anchor may not be masked already
                    fails += 1
                    continue
                toks = [t for t in range(s, ends[k + m - 1]) if t not in masked_tok]
                if len(toks) > remaining:
                    if stop_mid_word:
                        toks = toks[:remaining]
                    else:  # complete words only: keep the words whose new tokens fit
                        cut, n_new = starts[k], 0
                        for j in range(k, k + m):
                            new_j = sum(1 for t in range(starts[j], ends[j]) if t not in masked_tok)
                            if n_new + new_j > remaining:
                                break
                            n_new, cut = n_new + new_j, ends[j]
                        toks = [t for t in toks if t < cut]
                        if not toks:
                            fails += 1
                            continue
                masked_tok.update(toks)
                remaining -= len(toks)
                spans.append((s, max(toks) if toks else s))
                fails = 0
                continue
            # Paper default: keep the drawn length and look for a start where it fits (resampling
            # the start only, so collisions do not bias the length distribution towards short spans).
            tries = 1
            while True:
                if m < length and tries < _START_TRIES:
                    # prefer a start whose whole span lies in its segment; clip only as a last resort
                    ok = False
                else:
                    need = cum[k + m] - cum[k]
                    if need > remaining:
                        if stop_mid_word:
                            need = remaining
                        else:  # the span that meets the budget: longest prefix of complete words that fits
                            m = bisect.bisect_right(cum, cum[k] + remaining, lo=k) - 1 - k
                            need = cum[k + m] - cum[k]
                    # rejected if empty, or if it overlaps or touches a masked span
                    ok = m > 0 and 1 not in occ[k - 1 if k else 0 : k + m + 1]
                if ok:
                    occ[k : k + m] = b"\x01" * m
                    spans.append((starts[k], starts[k] + need - 1))
                    remaining -= need
                    fails = 0
                    break
                if tries == _START_TRIES:
                    fails += 1
                    break
                tries += 1
                k = pool.pop() if pool else draw_start()
                m = min(length, seg_end[k] - k)
    spans.sort()
    return spans


def _select_spans_word_anchor(
    lengths: list[int],
    ks: list[int],
    refill,
    starts: Sequence[int],
    ends: Sequence[int],
    seg: Sequence[int] | None,
    budget: int,
    stop_mid_word: bool,
) -> tuple[list[int], list[int]]:
    """§3.1 with word anchors and no merging (the paper's rules): the rules of `_select_spans`, on
    Python ints only. ``lengths`` (ℓ in words) and ``ks`` (uniform word indices) are pools drawn up
    front in vectorized calls; ``refill(lengths, ks)`` tops them up when they run dry (rarely).
    ``starts``/``ends``: first token and one past the last token of each word; ``seg``: one past the
    last word of each word's segment, None when the block is one segment.

    Returns the sorted span starts (token positions) and their lengths in tokens."""
    W = len(starts)
    if budget <= 0 or W == 0:
        return [], []
    occ = bytearray(W + 1)  # 1 = word masked; the extra slot keeps the "touches" check in range at k+m
    spans: list[tuple[int, int]] = []
    remaining, fails = budget, 0
    # bound methods and a counter instead of a range per span: this loop is a third of a block's masking
    bisect_right, find, pop_length, pop_k = bisect.bisect_right, occ.find, lengths.pop, ks.pop
    while remaining > 0 and fails < 50:
        if not lengths:
            refill(lengths, ks)
        length = pop_length()
        tries = 0
        while tries < _START_TRIES:
            tries += 1
            if not ks:
                refill(lengths, ks)
            k = pop_k()  # uniform word start
            m = (W if seg is None else seg[k]) - k  # words left in the segment
            if m >= length:
                m = length
            elif tries < _START_TRIES:
                continue  # prefer a start whose whole span lies in its segment; clip only as a last resort
            s = starts[k]
            need = ends[k + m - 1] - s
            if need > remaining:
                if stop_mid_word:
                    need = remaining
                else:  # the span that meets the budget: longest prefix of complete words that fits
                    m = bisect_right(ends, s + remaining, k, k + m) - k
                    if m == 0:
                        continue
                    need = ends[k + m - 1] - s
            if find(1, k - 1 if k else 0, k + m + 1) >= 0:
                continue  # overlaps or touches a masked span
            occ[k : k + m] = _ONES[:m] if m <= len(_ONES) else b"\x01" * m
            spans.append((s, need))  # (start token, length in tokens)
            remaining -= need
            fails = 0
            break
        else:
            fails += 1
    spans.sort()
    return [a for a, _ in spans], [b for _, b in spans]


def _select_candidates(
    rng, words: _Words, budget: int, candidates: np.ndarray | None, fraction: float
) -> list[tuple[int, int]]:
    """§6.1: ``fraction`` of the budget from candidate spans (entities / noun phrases), the rest whole words."""
    n = len(words.maskable)
    taken = np.zeros(n, dtype=np.int8)
    spans: list[tuple[int, int]] = []
    target = int(round(fraction * budget))
    used = 0
    if candidates is not None and len(candidates):
        cand = np.asarray(candidates, dtype=np.int64).reshape(-1, 2)
        ok = (cand[:, 0] >= 0) & (cand[:, 1] < n) & (cand[:, 0] <= cand[:, 1])
        cand = cand[ok]
        cum_m = np.concatenate([[0], np.cumsum(~words.maskable)])
        cand = cand[cum_m[cand[:, 1] + 1] == cum_m[cand[:, 0]]]  # never a special token inside
        for s, e in cand[rng.permutation(len(cand))].tolist():
            if used >= target:
                break
            size = e - s + 1
            if used + size > target or taken[s : e + 1].any():
                continue
            taken[s : e + 1] = 1
            spans.append((s, e))
            used += size
    spans += _select_whole_words(rng, words, budget - used, taken)
    spans.sort()
    return spans


# ---------------------------------------------------------------------------------------------


def _runs(masked: np.ndarray) -> np.ndarray:
    """(S, 2) inclusive [start, end] of the maximal runs of True in a (N,) bool array."""
    d = np.diff(np.concatenate([[0], masked.astype(np.int8), [0]]))
    return np.stack([np.flatnonzero(d == 1), np.flatnonzero(d == -1) - 1], axis=1).astype(np.int64)


def mask_block(
    token_ids: np.ndarray,
    word_starts: np.ndarray,
    scheme: Scheme = "span",
    rng: np.random.Generator | None = None,
    *,
    mask_id: int,
    special_ids: Sequence[int] = (),
    random_tokens: UnigramSampler | np.ndarray | None = None,
    vocab_size: int | None = None,
    mask_prob: float = 0.15,
    replace_probs: Sequence[float] = (0.8, 0.1, 0.1),
    geometric_p: float = 0.2,
    max_span_len: int = 10,
    anchor: str = "word",
    stop_mid_word: bool = False,
    merge_adjacent: bool = False,
    max_sbo_targets: int | None = None,
    sbo_skip_edge: bool = False,
    candidates: np.ndarray | None = None,
    candidate_fraction: float = 0.5,
    replace_per_span: bool | None = None,
) -> MaskResult:
    """Mask one block (see the module docstring for the schemes and rules).

    token_ids: (N,) ids of the block, special tokens included. word_starts: (N,) bool, True where a
    token starts a word. rng: the only source of randomness. mask_id: id of [MASK]. special_ids: ids
    never masked ([CLS], [SEP], [PAD]). random_tokens: a `UnigramSampler` (or unigram counts (V,)) for
    the 10% random replacements; None draws uniformly from ``vocab_size`` ids except ``special_ids``.
    candidates: (C, 2) inclusive token spans for named_entity / noun_phrase. replace_per_span: decide
    80/10/10 once per sampled unit (default for span, named_entity, noun_phrase) or per token
    (default for subword, whole_word).
    """
    if scheme not in SCHEMES:
        raise SpanBertError(f"unknown masking scheme {scheme!r}; choose from: {', '.join(SCHEMES)}")
    if rng is None:
        raise SpanBertError("mask_block needs a numpy.random.Generator (rng): masks must be reproducible")
    if anchor not in ("word", "subword"):
        raise SpanBertError(f"anchor must be 'word' or 'subword', not {anchor!r}")
    if type(token_ids) is not np.ndarray or token_ids.dtype != np.int64:  # (a fast check: this runs per block)
        token_ids = np.asarray(token_ids, dtype=np.int64)  # (N,)
    if type(word_starts) is not np.ndarray or word_starts.dtype != np.bool_:
        word_starts = np.asarray(word_starts, dtype=bool)  # (N,)
    n = len(token_ids)
    if word_starts.shape != (n,):
        raise SpanBertError(f"word_starts has shape {word_starts.shape}; expected ({n},) like token_ids")
    if len(replace_probs) != 3 or abs(sum(replace_probs) - 1) > 1e-6 or min(replace_probs) < 0:
        check_replace_probs(replace_probs, "replace_probs")  # raises, with the message of the CLI
    words = _words(token_ids, word_starts, special_ids)
    if scheme == "span" and anchor == "word" and not merge_adjacent and replace_per_span in (None, True):
        return _mask_spans_fast(
            token_ids,
            words,
            rng,
            mask_id,
            special_ids,
            random_tokens,
            vocab_size,
            mask_prob,
            replace_probs,
            geometric_p,
            max_span_len,
            stop_mid_word,
            max_sbo_targets,
            sbo_skip_edge,
        )  # fmt: skip (one argument per line would take 16 lines)
    budget = _budget(rng, words.n_maskable, mask_prob)

    if scheme == "subword":
        units = _select_subword(rng, words, budget)
    elif scheme == "whole_word":
        units = _select_whole_words(rng, words, budget)
    elif scheme == "span":
        units = _select_spans(rng, words, budget, geometric_p, max_span_len, anchor, stop_mid_word, merge_adjacent)
    else:
        units = _select_candidates(rng, words, budget, candidates, candidate_fraction)
    unit_arr = np.asarray(units, dtype=np.int64).reshape(-1, 2)  # (U, 2)

    # 80/10/10: one draw per unit (§3.1 "we perform this replacement at the span level") or per token.
    per_span = scheme in ("span", "named_entity", "noun_phrase") if replace_per_span is None else replace_per_span
    c_mask = float(replace_probs[0])
    c_rand = c_mask + float(replace_probs[1])
    input_ids = token_ids.copy()
    labels = np.full(n, IGNORE_INDEX, dtype=np.int64)
    masked = np.zeros(n, dtype=bool)  # (N,)
    for st, en in units:  # one slice per unit (a few dozen), never a loop over tokens
        masked[st : en + 1] = True
    pos = np.flatnonzero(masked)  # (K,)
    labels[pos] = token_ids[pos]
    if per_span:
        # The official code (``span_masking`` after ``merge_intervals``) draws once per merged run, so
        # with merge_adjacent a run built from several sampled spans is all [MASK], all random or all
        # unchanged; the paper's rules never merge, so there a unit is a run.
        decided = _runs(masked).tolist() if merge_adjacent else units
        rand_slices = []
        for (st, en), u in zip(decided, rng.random(len(decided)).tolist()):
            if u < c_mask:
                input_ids[st : en + 1] = mask_id
            elif u < c_rand:
                rand_slices.append((st, en))
        if rand_slices:
            sizes = [en - st + 1 for st, en in rand_slices]
            toks = _random_tokens(rng, sum(sizes), random_tokens, vocab_size, special_ids)
            i = 0
            for (st, en), k in zip(rand_slices, sizes):
                input_ids[st : en + 1] = toks[i : i + k]
                i += k
    else:
        u = rng.random(len(pos))  # (K,)
        input_ids[pos[u < c_mask]] = mask_id
        rand_pos = pos[(u >= c_mask) & (u < c_rand)]
        if len(rand_pos):
            input_ids[rand_pos] = _random_tokens(rng, len(rand_pos), random_tokens, vocab_size, special_ids)

    if scheme == "span" and not merge_adjacent:
        spans = unit_arr  # sampled spans never overlap or touch: they are the maximal runs already
    else:
        spans = _runs(masked)  # (S, 2)
    sbo = _sbo_targets(spans, n, words.maskable, max_sbo_targets, sbo_skip_edge)
    return MaskResult(input_ids, labels, spans, *sbo, unit_spans=unit_arr)


def _mask_spans_fast(
    token_ids: np.ndarray,
    words: _Words,
    rng: np.random.Generator,
    mask_id: int,
    special_ids: Sequence[int],
    random_tokens,
    vocab_size: int | None,
    mask_prob: float,
    replace_probs: Sequence[float],
    p: float,
    max_len: int,
    stop_mid_word: bool,
    max_sbo_targets: int | None,
    sbo_skip_edge: bool,
) -> MaskResult:
    """The ``span`` scheme with word anchors and no merging (the paper's rules; the default).

    Same rules and statistics as the general path, built for speed: at about 16 spans per 512-token
    block the cost is numpy's per-call overhead, not arithmetic, so the span lengths and candidate
    starts are drawn up front in one vectorized call (oversampled; topped up in the rare block that
    needs more), the greedy placement runs on a few dozen Python ints, and the outputs are built with
    about twenty array calls whatever the number of spans. Everything is drawn from ``rng`` alone, in
    an order fixed by the block, so masks stay reproducible.
    """
    n = len(token_ids)
    expected = mask_prob * words.n_maskable
    W = len(words.start)
    size = int(expected) // 3 + 16  # ~16 spans and ~21 starts tried per 512-token block: rarely refilled
    cdf = _length_cdf_from_1(p, max_len)

    def refill(lengths: list[int], ks: list[int]) -> None:
        r = rng.random(2 * size)  # (2*size,)
        lengths += cdf.searchsorted(r[:size], side="right").tolist()  # ℓ ~ Geo(p) truncated (inverse CDF)
        # uniform word index; random() <= 1 - 2**-53, so u * W < W exactly in floating point
        ks += (r[size:] * W).astype(np.intp).tolist()

    budget = int(expected + rng.random())  # unbiased random rounding, as `_budget`
    lengths: list[int] = []
    ks: list[int] = []
    # memoryviews: indexing one gives a Python int, and the loop reads only a few dozen of the ~400 words
    # (``tolist()`` of them all would cost as much as the loop)
    starts, ends = memoryview(words.start), memoryview(words.end)
    seg = None if words.seg_end is None or (W and words.seg_end[0] == W) else memoryview(words.seg_end)
    st_l, len_l = _select_spans_word_anchor(lengths, ks, refill, starts, ends, seg, budget, stop_mid_word)

    S = len(st_l)
    # the spans as (3, S) rows: start, end (inclusive), length in tokens
    sel = np.array(st_l + [a + b - 1 for a, b in zip(st_l, len_l)] + len_l, dtype=np.int64).reshape(3, S)
    spans = sel[:2].T  # (S, 2) inclusive, sorted, never overlapping or touching
    st, en, lens = sel[0], sel[1], sel[2]  # (S,) each
    first = np.add.accumulate(lens) - lens  # (S,) index of each span's first token in `pos`
    K = sum(len_l)  # masked tokens
    rel = np.arange(K) - first.repeat(lens)  # (K,) i - s
    pos = st.repeat(lens) + rel  # (K,) masked positions, sorted
    labels = np.empty(n, dtype=np.int64)  # (N,)
    labels.fill(IGNORE_INDEX)
    labels[pos] = token_ids[pos]
    input_ids = token_ids.copy()  # (N,)
    input_ids[pos] = mask_id
    # §3.1: 80/10/10 decided once per span; 80% stay [MASK], the others (~3 per block) are redone by slice
    c_mask = float(replace_probs[0])
    c_rand = c_mask + float(replace_probs[1])
    rand_spans: list[tuple[int, int]] = []
    for a, b, x in zip(st_l, len_l, rng.random(S).tolist()):
        if x >= c_rand:  # unchanged
            input_ids[a : a + b] = token_ids[a : a + b]
        elif x >= c_mask:  # random tokens
            rand_spans.append((a, b))
    if rand_spans:
        toks = _random_tokens(rng, sum(b for _, b in rand_spans), random_tokens, vocab_size, special_ids)
        i = 0
        for a, b in rand_spans:
            input_ids[a : a + b] = toks[i : i + b]
            i += b

    # §3.2: x_i is predicted from x_{s-1}, x_{e+1} and p_{i-s+1}; both boundaries must lie in the block
    if S and (st_l[0] < 1 or st_l[-1] + len_l[-1] > n - 1 or sbo_skip_edge or max_sbo_targets is not None):
        sbo = _sbo_targets(spans, n, words.maskable, max_sbo_targets, sbo_skip_edge)
        return MaskResult(input_ids, labels, spans, *sbo, unit_spans=spans)
    return MaskResult(
        input_ids, labels, spans, pos, (st - 1).repeat(lens), (en + 1).repeat(lens), rel, unit_spans=spans
    )


@functools.lru_cache(maxsize=16)
def _length_cdf_from_1(p: float, max_len: int) -> np.ndarray:
    """(max_len+1,) `_length_cdf` after a leading -1: ``searchsorted(u, side="right")`` is then ℓ itself."""
    return np.concatenate(([-1.0], _length_cdf(p, max_len)))


def _random_tokens(rng, k: int, random_tokens, vocab_size: int | None, special_ids: Sequence[int]) -> np.ndarray:
    if isinstance(random_tokens, UnigramSampler):
        return random_tokens.sample(rng, k)
    if random_tokens is not None:
        return UnigramSampler(random_tokens, special_ids).sample(rng, k)
    if vocab_size is None:
        raise SpanBertError("mask_block needs random_tokens (unigram counts) or vocab_size for random replacements")
    counts = np.ones(vocab_size)
    return UnigramSampler(counts, special_ids).sample(rng, k)


def _sbo_targets(
    spans: np.ndarray, n: int, maskable: np.ndarray, max_targets: int | None, skip_edge: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """§3.2: every token x_i of a masked span (x_s..x_e) is predicted from x_{s-1}, x_{e+1} and p_{i-s+1}.

    Returns (positions, left, right, rel), each (M,).
    """
    s, e = spans[:, 0], spans[:, 1]  # (S,)
    if len(s) and (s[0] < 1 or e[-1] > n - 2 or skip_edge):  # spans are sorted: only the ends can be at the edge
        keep = (s >= 1) & (e <= n - 2)  # both external boundaries must exist in the block
        if skip_edge:  # official: no target when a boundary is a special token ([CLS], [SEP], [PAD])
            keep &= maskable[np.clip(s - 1, 0, n - 1)] & maskable[np.clip(e + 1, 0, n - 1)]
        s, e = s[keep], e[keep]
    lens = e - s + 1  # (S',)
    if max_targets is not None:
        lens = np.minimum(lens, max_targets)
    s_rep = np.repeat(s, lens)  # (M,)
    rel = np.arange(len(s_rep)) - np.repeat(np.cumsum(lens) - lens, lens)  # (M,) i - s
    return s_rep + rel, s_rep - 1, np.repeat(e + 1, lens), rel
