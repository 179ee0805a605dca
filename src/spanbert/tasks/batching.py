"""Prediction batches: items sorted by length into batches of a bounded size (and tokens), and the
batch size in tokens that keeps a CPU forward pass out of fresh page faults."""

from __future__ import annotations

from collections.abc import Sequence

from spanbert import families
from spanbert.utils import MMAP_THRESHOLD


def length_batches(
    indices: Sequence[int], lengths: Sequence[int], batch_size: int, same_length: bool = False, max_tokens: int = 0
) -> list[list[int]]:
    """``indices`` in prediction batches: sorted by length (equal lengths keep their order), at most
    ``batch_size`` a batch; with ``same_length`` a batch holds one length only (no padding, so the
    encoder runs no mask and no unpadding), with ``max_tokens`` at most that many tokens, padding
    included (at least one item). ``lengths[i]`` is item i's token count."""
    order = sorted(indices, key=lambda i: lengths[i])
    batches: list[list[int]] = []
    cur: list[int] = []
    for i in order:
        n = lengths[i]  # the longest of the batch so far, as the order is sorted
        if cur and (
            len(cur) >= batch_size
            or (same_length and n != lengths[cur[0]])
            or (max_tokens and (len(cur) + 1) * n > max_tokens)
        ):
            batches.append(cur)
            cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    return batches


def cpu_batch_tokens(encoder: families.Family) -> int:
    """Tokens per prediction batch on CPU whose widest activation (the feed-forward's, `Family.ffn_size`
    floats a token) stays under glibc's mmap threshold
    (`spanbert.utils.MMAP_THRESHOLD`): such a batch reuses heap memory, a larger one maps and page-faults
    its activations in afresh at every layer (MiniLM 6 x 384, windows of 384 tokens: 60,000 page faults
    and ~10% more CPU time for batches of 64 than of 2). The matrix multiplies are as fast on a few
    hundred rows as on thousands."""
    return max(1, MMAP_THRESHOLD // (4 * encoder.ffn_size))
