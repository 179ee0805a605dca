"""Prediction batches (`spanbert.tasks.batching`): sorted by length, bounded in items and in tokens, one
length a batch when asked, every item once."""

from __future__ import annotations

from spanbert.tasks.batching import cpu_batch_tokens, length_batches
from spanbert.utils import MMAP_THRESHOLD


def test_batches_are_sorted_by_length_and_hold_every_item_once():
    lengths = [5, 1, 3, 3, 9, 1, 2]
    batches = length_batches(range(len(lengths)), lengths, batch_size=3)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    flat = [lengths[i] for b in batches for i in b]
    assert flat == sorted(flat)
    assert batches[0] == [1, 5, 6]  # equal lengths keep their order
    assert all(len(b) <= 3 for b in batches)


def test_same_length_batches_hold_one_length_and_max_tokens_counts_the_padding():
    lengths = [4, 4, 2, 2, 2, 8]
    same = length_batches(range(6), lengths, batch_size=10, same_length=True)
    assert [{lengths[i] for i in b} for b in same] == [{2}, {4}, {8}]
    # at most 8 tokens a batch, padding to the batch's longest included; a longer item still goes alone
    capped = length_batches(range(6), lengths, batch_size=10, max_tokens=8)
    assert all(len(b) * max(lengths[i] for i in b) <= 8 for b in capped)
    assert [5] in capped
    assert length_batches([2, 4], lengths, batch_size=1) == [[2], [4]]  # a subset of the items (a rank's share)


def test_the_cpu_batch_stays_under_the_mmap_threshold():
    class Family:
        ffn_size = 1536

    tokens = cpu_batch_tokens(Family())
    assert tokens * 4 * Family.ffn_size <= MMAP_THRESHOLD < (tokens + 1) * 4 * Family.ffn_size
