"""A rank's batches of an epoch (`spanbert.batch_plan`): the vectorised plans equal the list-building loops the
trainer used before issue 57 (kept below as the reference) for every rank, world size, accumulation, start step
and epoch, token budgets and sequence counts alike; the permutation is numpy's, in half the bytes."""

from __future__ import annotations

import numpy as np
import pytest

from spanbert.batch_plan import (
    EpochPlan,
    PadBatch,
    flat_micro_batches,
    permutation,
    sequence_plan,
    token_batch_count,
    token_batch_cuts,
    token_plan,
)
from spanbert.errors import SpanBertError
from spanbert.trainer import epoch_permutation, micro_batches, token_batches, token_micro_batches


def _short_step(parts, first, present, world):
    k = -(-present // world)
    return [mb if mb else PadBatch([first]) for mb in parts[:k]]


def ref_micro_batches(n, seed, epoch, batch, accum, rank, world, start_step):
    G = batch * world * accum
    perm = epoch_permutation(n, seed, epoch)
    steps = []
    for s in range(start_step, -(-n // G)):
        chunk = perm[s * G : (s + 1) * G]
        parts = [chunk[(m * world + rank) * batch :][:batch].tolist() for m in range(accum)]
        steps.append(_short_step(parts, int(chunk[0]), -(-len(chunk) // batch), world))
    return steps


def ref_token_batches(lengths, max_tokens, seed, epoch):
    lengths = np.asarray(lengths, dtype=np.int64)
    perm = epoch_permutation(len(lengths), seed, epoch)
    order = perm[np.argsort(lengths[perm], kind="stable")]
    sorted_len = lengths[order].tolist()
    batches, lo = [], 0
    for hi in range(1, len(order) + 1):
        if hi == len(order) or (hi + 1 - lo) * sorted_len[hi] > max_tokens:
            batches.append(order[lo:hi].tolist())
            lo = hi
    shuffle = np.random.default_rng([seed, epoch, 0xBA7C]).permutation(len(batches))
    return [batches[j] for j in shuffle]


def ref_token_micro_batches(lengths, max_tokens, seed, epoch, accum, rank, world, start_step):
    batches = ref_token_batches(lengths, max_tokens, seed, epoch)
    M = world * accum
    steps = []
    for s in range(start_step, -(-len(batches) // M)):
        parts = [batches[j] if j < len(batches) else [] for j in (s * M + m * world + rank for m in range(accum))]
        steps.append(_short_step(parts, batches[s * M][0], min(M, len(batches) - s * M), world))
    return steps


def same(a, b) -> bool:
    """Equal steps, micro-batches and examples, and `PadBatch` exactly where the reference has one."""
    return len(a) == len(b) and all(
        len(x) == len(y) and all(list(p) == list(q) and isinstance(p, PadBatch) == isinstance(q, PadBatch)
                                 for p, q in zip(x, y))  # fmt: skip
        for x, y in zip(a, b)
    )


def test_the_permutation_is_numpys_in_int32():
    for n in (0, 1, 7, 1000, 65_537):
        assert permutation(n, 3, 1).dtype == np.int32
        assert np.array_equal(permutation(n, 3, 1), np.random.default_rng([3, 1]).permutation(n))


@pytest.mark.parametrize("seed", range(8))
def test_token_batches_equal_the_loop(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 3000))
    # a few distinct lengths (as blocks of a corpus: most full), or many
    pool = rng.integers(2, 130, int(rng.integers(1, 40)))
    lengths = rng.choice(pool, n).astype(np.uint16 if seed % 2 else np.int64)
    for budget in (130, 257, 1000, 4096):
        for epoch in (0, 2):
            expected = ref_token_batches(lengths, budget, seed, epoch)
            assert token_batches(lengths, budget, seed, epoch) == expected
            assert token_batch_count(lengths, budget) == len(expected)
            assert token_batch_cuts(lengths, budget)[-1] == n


def test_a_budget_below_the_longest_example_is_refused():
    with pytest.raises(SpanBertError, match="--max_tokens_per_batch: found 10, expected at least the longest example \\(12"):
        token_batch_count(np.array([5, 12, 3]), 10)


@pytest.mark.parametrize("world", (1, 2, 3, 4))
@pytest.mark.parametrize("accum", (1, 2, 3))
def test_token_plans_equal_the_loop_on_every_rank(world, accum):
    rng = np.random.default_rng(world * 10 + accum)
    lengths = rng.choice(rng.integers(2, 66, 12), int(rng.integers(1, 900))).astype(np.uint16)
    for budget in (66, 200):
        n_batches = len(ref_token_batches(lengths, budget, 5, 0))
        steps = -(-n_batches // (world * accum))
        for start in sorted({0, 1, max(0, steps - 1), steps}):
            for rank in range(world):
                for epoch in (0, 3):
                    expected = ref_token_micro_batches(lengths, budget, 5, epoch, accum, rank, world, start)
                    plan = token_plan(lengths, budget, 5, epoch, accum, rank, world, start)
                    assert isinstance(plan, EpochPlan) and same(plan, expected)
                    assert same(token_micro_batches(lengths, budget, 5, epoch, accum, rank, world, start), expected)
                    assert list(flat_micro_batches(plan)) == [mb for step in expected for mb in step]
                    assert len(flat_micro_batches(plan)) == sum(len(step) for step in expected)


@pytest.mark.parametrize("world", (1, 2, 3))
@pytest.mark.parametrize("accum", (1, 2))
@pytest.mark.parametrize("n", (1, 5, 37, 240))
def test_sequence_plans_equal_the_loop_on_every_rank(world, accum, n):
    for batch in (1, 4):
        steps = -(-n // (batch * world * accum))
        for start in sorted({0, 1, max(0, steps - 1), steps}):
            for rank in range(world):
                expected = ref_micro_batches(n, 9, 1, batch, accum, rank, world, start)
                assert same(sequence_plan(n, 9, 1, batch, accum, rank, world, start), expected)
                assert same(micro_batches(n, 9, 1, batch, accum, rank, world, start), expected)


def test_a_plan_keeps_only_this_ranks_share():
    lengths = np.full(40_000, 130, dtype=np.uint16)
    plans = [token_plan(lengths, 4096, 0, 0, 1, r, 4, 0) for r in range(4)]
    sizes = [len(p.examples) for p in plans]
    assert sum(sizes) == 40_000 and max(sizes) - min(sizes) <= 31  # a quarter each, not the epoch each
    assert plans[1][0] == [[int(x) for x in plans[1].examples[:31]]]  # a step's lists come from the array


def test_cached_plans_equal_the_in_memory_ones(tmp_path):
    rng = np.random.default_rng(7)
    lengths = rng.choice(rng.integers(2, 66, 9), 700).astype(np.uint16)
    for world, accum in ((1, 1), (2, 3), (3, 2)):
        for rank in range(world):
            for epoch, start in ((0, 0), (1, 2)):
                got = token_plan(lengths, 150, 4, epoch, accum, rank, world, start, cache=tmp_path)
                assert same(got, ref_token_micro_batches(lengths, 150, 4, epoch, accum, rank, world, start))
                got = sequence_plan(700, 4, epoch, 6, accum, rank, world, start, cache=tmp_path)
                assert same(got, ref_micro_batches(700, 4, epoch, 6, accum, rank, world, start))
    # a file per (kind, seed, epoch), mapped read-only; the order is the loop's
    assert sorted(p.name for p in tmp_path.iterdir()) == ["order-s4-e0.bin", "order-s4-e1.bin", "perm-s4-e0.bin",
                                                           "perm-s4-e1.bin"]  # fmt: skip
    order = np.fromfile(tmp_path / "order-s4-e1.bin", np.int32)
    perm = epoch_permutation(len(lengths), 4, 1)
    assert np.array_equal(order, perm[np.argsort(lengths[perm], kind="stable")])
    # epochs done with go: the one being trained and the one before stay
    token_plan(lengths, 150, 4, 3, 1, 0, 1, 0, cache=tmp_path)
    assert sorted(p.name for p in tmp_path.glob("order-*")) == ["order-s4-e3.bin"]
