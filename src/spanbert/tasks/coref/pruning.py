"""Span pruning without crossing brackets (`prune_non_crossing`, a tensorised exact equivalent of the
reference's C++ `extract_spans` op) and the distance buckets of the pair features."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

# =============================================================================================
# Non-crossing pruning (replaces the reference's C++ `extract_spans` op)


def crossing(s1: Any, e1: Any, s2: Any, e2: Any) -> Any:
    """Elementwise (ints or tensors): do spans (s1, e1) and (s2, e2) cross, i.e. overlap without one
    containing the other? Nested and disjoint spans may both be kept (Lee et al. 2017 §5)."""
    return ((s1 < s2) & (s2 <= e1) & (e1 < e2)) | ((s2 < s1) & (s1 <= e2) & (e2 < e1))


def prune_non_crossing(scores: Tensor, starts: Tensor, ends: Tensor, k: int, chunk: int | None = None) -> Tensor:
    """Indices of the top-``k`` spans chosen greedily by score, skipping any span that crosses an
    already chosen one; returned sorted by (start, end). Same result as the reference's C++ loop.

    Tensorised: candidates are taken in score order in chunks; inside a chunk every span that no
    higher-scoring surviving span crosses is chosen at once, and the spans crossing the new choices
    are dropped, until the chunk is settled. Each round is a (chunk x chunk) boolean matrix product,
    and the rounds needed are few (a chain of crossing spans is short), so it runs on GPU without a
    per-span Python loop. A span's fate depends only on higher-scoring spans, so taking the first
    ``k`` chosen spans equals stopping the sequential loop at ``k``.
    """
    c = scores.shape[0]
    k = min(k, c)
    device = starts.device
    if k <= 0:
        return torch.zeros(0, dtype=torch.long, device=device)
    chunk = chunk or 512  # (512 x 512) boolean rounds; a few chunks usually settle k spans
    order = torch.argsort(scores, descending=True, stable=True)  # (C,)
    s_sorted, e_sorted = starts[order], ends[order]
    kept: list = []  # positions in `order`
    acc_s = starts.new_zeros(0)
    acc_e = ends.new_zeros(0)
    n_kept = 0
    for lo in range(0, c, chunk):
        cs, ce = s_sorted[lo : lo + chunk], e_sorted[lo : lo + chunk]  # (c,)
        m = cs.shape[0]
        alive = ~crossing(cs[:, None], ce[:, None], acc_s[None, :], acc_e[None, :]).any(1)  # (c,)
        cross = crossing(cs[:, None], ce[:, None], cs[None, :], ce[None, :])  # (c, c)
        earlier = torch.ones(m, m, dtype=torch.bool, device=device).tril(-1)  # [i, j]: j ranks above i
        blocking = cross & earlier
        chosen = torch.zeros(m, dtype=torch.bool, device=device)
        while bool(alive.any()):
            blocked = (blocking & alive[None, :]).any(1)
            new = alive & ~blocked
            chosen |= new
            alive &= ~new & ~(cross & new[None, :]).any(1)
        pos = torch.nonzero(chosen).squeeze(1)
        kept.append(pos + lo)
        acc_s, acc_e = torch.cat([acc_s, cs[pos]]), torch.cat([acc_e, ce[pos]])
        n_kept += pos.numel()
        if n_kept >= k:
            break
    idx = order[torch.cat(kept)[:k]]
    # sort by (start, end): antecedents are the spans that come earlier in this order
    key = starts[idx] * (int(ends.max()) + 1) + ends[idx]
    return idx[torch.argsort(key)]


def segment_distance(
    token_index: Tensor, segment_width: int, starts: Tensor, antecedents: Tensor, buckets: int
) -> Tensor:
    """Segment of each kept span's start minus that of each of its antecedents' starts, clipped to
    [0, buckets - 1]: (k, K). As the released `independent.py` (``segment_distance``), where the
    bucket count is ``max_training_sentences`` (3); in training a document has at most that many
    segments, at prediction time farther pairs share the last bucket.

    ``token_index`` (N,) is the flat position of each sub-token in the (S, T) segment batch, so its
    segment is ``token_index // T``.
    """
    segment = torch.div(token_index, segment_width, rounding_mode="floor")  # (N,)
    span_segment = segment[starts]  # (k,)
    return (span_segment[:, None] - span_segment[antecedents]).clamp(0, buckets - 1)  # (k, K)


def bucket_distance(distance: Tensor) -> Tensor:
    """Lee et al. (2017): buckets [0, 1, 2, 3, 4, 5-7, 8-15, 16-31, 32-63, 64+] -> 0..9."""
    log = torch.floor(torch.log2(distance.clamp(min=1).float())).long() + 3
    return torch.where(distance <= 4, distance, log).clamp(0, 9)


