"""One rank's batches of an epoch, from a few arrays, made into lists one step at a time (issue 57).

The trainer's sample order (`spanbert.trainer`: a (seed, epoch) permutation; under a token budget
fairseq's ``batch_by_size`` cuts over the examples sorted by length, the batches then shuffled) is
unchanged, but it was materialised as Python lists of every example of the epoch on every rank, built
twice (the epoch length, then the plan), though a rank uses 1/world of them: 12 CPU-s and ~1 GB of
lists per rank at 4 B tokens. Here:

- the cuts of the length-sorted order depend only on how many examples there are of each length (not
  on the epoch), so they come from the (L,) histogram of the lengths, one vectorised step per distinct
  length (`token_batch_cuts`, `token_batch_count`);
- the epoch's permutation is drawn into an int32 array (the same numbers as
  ``default_rng([seed, epoch]).permutation(n)``: the same shuffle, half the bytes), and the stable sort
  by length is a counting sort done in chunks, keeping only the positions of this rank's batches;
- `EpochPlan` holds this rank's examples as one int32 array and gives each step's micro-batches as
  lists (and `PadBatch` where a rank's share of a short step is empty) when the loop asks for them.

`trainer.micro_batches`, `trainer.token_batches` and `trainer.token_micro_batches` keep their lists;
they are these plans materialised.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np

from spanbert.errors import SpanBertError

CHUNK = 1 << 16
"""Examples sorted at a time by the counting sort (its temporary arrays are a few bytes per example of a chunk)."""


class PadBatch(list):
    """A micro-batch that only keeps a rank in step with the others: in an epoch's short last step a
    rank whose share is empty runs one example forward and backward with weight 0 (DDP needs a backward
    on every rank for every micro-batch), and adds nothing to the gradient, the counts or the logs."""


def permutation(n: int, seed: int, epoch: int) -> np.ndarray:
    """``default_rng([seed, epoch]).permutation(n)`` as int32 (int64 past 2^31 - 1): shuffling an arange draws
    the same numbers whatever its dtype."""
    out = np.arange(n, dtype=np.int32 if n < 2**31 else np.int64)
    np.random.default_rng([seed, epoch]).shuffle(out)
    return out


def length_histogram(lengths: np.ndarray) -> np.ndarray:
    """(L+1,) int64 count of each length, a chunk at a time (`np.bincount` would copy all of ``lengths`` to int64)."""
    hist = np.zeros(int(lengths.max()) + 1 if len(lengths) else 1, dtype=np.int64)
    for c0 in range(0, len(lengths), CHUNK):
        h = np.bincount(np.asarray(lengths[c0 : c0 + CHUNK]))
        hist[: len(h)] += h
    return hist


def check_budget(lengths: np.ndarray, max_tokens: int) -> None:
    if len(lengths) and int(lengths.max()) > max_tokens:
        i = int(np.argmax(lengths))
        raise SpanBertError(
            f"--max_tokens_per_batch: found {max_tokens}, expected at least the longest example ({int(lengths[i])} "
            f"tokens, example {i})"
        )


def token_batch_cuts(lengths: np.ndarray, max_tokens: int) -> np.ndarray:
    """(B+1,) int64 where the batches of the length-sorted order start (and the end): fairseq's greedy cut, a
    batch closed before the example that would bring count x longest over ``max_tokens``.

    Within a run of equal lengths v the cuts are every max_tokens // v examples after the first one that
    does not fit the batch open when the run starts; so one arange per distinct length, in order.
    """
    lengths = np.asarray(lengths)
    check_budget(lengths, max_tokens)
    n = len(lengths)
    if n == 0:
        return np.zeros(1, dtype=np.int64)
    hist = length_histogram(lengths)
    values = np.flatnonzero(hist)
    run_end = np.cumsum(hist[values])  # (V,) where each length's run ends in the sorted order
    run_start = run_end - hist[values]
    cuts = [np.zeros(1, np.int64)]
    lo = 0  # the open batch's first position
    for v, rs, re in zip(values.tolist(), run_start.tolist(), run_end.tolist()):
        cap = max_tokens // v if v else n + 1  # >= 1: no example is longer than the budget (empty ones never overflow)
        first = max(rs, lo + cap)  # the first position of this run that does not fit the open batch
        if first < re:
            c = np.arange(first, re, cap, dtype=np.int64)
            cuts.append(c)
            lo = int(c[-1])
    cuts.append(np.array([n], np.int64))
    return np.concatenate(cuts).astype(np.int32 if n < 2**31 else np.int64)


def token_batch_count(lengths: np.ndarray, max_tokens: int) -> int:
    """The micro-batches of an epoch under a token budget (the same in every epoch)."""
    return len(token_batch_cuts(lengths, max_tokens)) - 1


def _batch_shuffle(n_batches: int, seed: int, epoch: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch, 0xBA7C]).permutation(n_batches)


def _counting_sort(lengths: np.ndarray, perm: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(sorted positions, examples) of ``perm``'s examples, a chunk at a time: the stable sort by length of
    ``perm`` (examples by length, equal lengths in the permutation's order) as a counting sort, so that no
    (n,) int64 array of the sorted order is ever made."""
    hist = length_histogram(lengths)
    next_slot = np.cumsum(hist) - hist  # (L,) the next free sorted position of each length
    for c0 in range(0, len(perm), CHUNK):
        p = perm[c0 : c0 + CHUNK]
        v = np.asarray(lengths[p])  # (C,) uint16 for blocks: a radix sort
        o = np.argsort(v, kind="stable")
        vs = v[o]
        first = np.flatnonzero(np.concatenate([[True], vs[1:] != vs[:-1]]))  # where each length's run starts
        run = np.diff(np.append(first, len(vs)))
        dest = next_slot[vs] + (np.arange(len(vs)) - np.repeat(first, run))  # (C,) sorted positions
        next_slot[vs[first]] += run
        yield dest, p[o]


def sorted_positions(lengths: np.ndarray, perm: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """``order[wanted]`` where ``order = perm[argsort(lengths[perm], kind="stable")]``, without making ``order``
    (``wanted``: sorted, unique sorted positions)."""
    wanted = np.asarray(wanted, dtype=np.int64)
    out = np.empty(len(wanted), dtype=perm.dtype)
    if not len(wanted):
        return out
    for dest, examples in _counting_sort(lengths, perm):
        slot = np.searchsorted(wanted, dest)
        hit = slot < len(wanted)
        hit[hit] = wanted[slot[hit]] == dest[hit]
        out[slot[hit]] = examples[hit]
    return out


def _batches_of(lengths: np.ndarray, perm: np.ndarray, cuts: np.ndarray, slot: np.ndarray, size: int,
                extra: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """(the examples of the batches b with ``slot[b]`` >= 0, each batch's at slot[b] on in an array of ``size``;
    the examples at the sorted positions ``extra``): this rank's share of the sorted order, nothing else kept."""
    out = np.empty(size, dtype=perm.dtype)
    extra = np.asarray(extra, dtype=np.int64)
    extra_out = np.empty(len(extra), dtype=perm.dtype)
    for dest, examples in _counting_sort(lengths, perm):
        # (C,) the batch of each sorted position (dest in the cuts' dtype: searchsorted would copy the cuts)
        b = np.searchsorted(cuts, dest.astype(cuts.dtype), side="right") - 1
        base = slot[b]
        mine = base >= 0
        out[base[mine] + dest[mine] - cuts[b[mine]]] = examples[mine]
        if len(extra):
            at = np.minimum(np.searchsorted(extra, dest), len(extra) - 1)
            hit = extra[at] == dest
            extra_out[at[hit]] = examples[hit]
    return out, extra_out


class EpochPlan(Sequence):
    """One rank's micro-batches of one epoch from its start step on, grouped by optimizer step: step i is a
    list of micro-batches (lists of example indices; `PadBatch` where this rank has none in a short step).

    ``examples``: this rank's examples in plan order; ``mb_bounds`` (M+1,) where each micro-batch's examples
    start in it; ``step_bounds`` (S+1,) where each step's micro-batches start; ``pad`` (M,) the example a
    padding micro-batch runs (-1: a real one)."""

    def __init__(self, examples: np.ndarray, mb_bounds: np.ndarray, step_bounds: np.ndarray, pad: np.ndarray):
        self.examples, self.mb_bounds, self.step_bounds, self.pad = examples, mb_bounds, step_bounds, pad

    def __len__(self) -> int:
        return len(self.step_bounds) - 1

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"step {i} out of range for a plan of {len(self)} steps")
        return [self._micro_batch(m) for m in range(int(self.step_bounds[i]), int(self.step_bounds[i + 1]))]

    def _micro_batch(self, m: int) -> list[int]:
        if self.pad[m] >= 0:
            return PadBatch([int(self.pad[m])])
        return self.examples[self.mb_bounds[m] : self.mb_bounds[m + 1]].tolist()

    def micro_batches(self) -> MicroBatches:
        """Every micro-batch of the plan in order, made one at a time (a DataLoader's ``batch_sampler``)."""
        return MicroBatches(self)


class MicroBatches:
    """`EpochPlan`'s micro-batches, flattened, as an iterable with a length (what a ``batch_sampler`` is)."""

    def __init__(self, plan: EpochPlan):
        self.plan = plan

    def __len__(self) -> int:
        return len(self.plan.pad)

    def __iter__(self) -> Iterator[list[int]]:
        return (self.plan._micro_batch(m) for m in range(len(self.plan.pad)))


def flat_micro_batches(plan: Sequence[Sequence[list[int]]]):
    """The micro-batches of ``plan`` (an `EpochPlan`, or a list of steps) in order, for a DataLoader."""
    if isinstance(plan, EpochPlan):
        return plan.micro_batches()
    return [mb for step_mbs in plan for mb in step_mbs]


def _plan(parts: list[tuple[np.ndarray, int]], steps: list[int]) -> EpochPlan:
    """An `EpochPlan` of micro-batches given as (examples, pad example or -1), ``steps`` micro-batches each."""
    sizes = np.array([len(e) for e, _ in parts], dtype=np.int64)
    examples = np.concatenate([e for e, _ in parts]) if parts else np.zeros(0, np.int32)
    mb_bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    step_bounds = np.concatenate([[0], np.cumsum(steps)]).astype(np.int64)
    pad = np.array([p for _, p in parts], dtype=np.int64)
    return EpochPlan(examples, mb_bounds, step_bounds, pad)


def _short_step_parts(parts: list[np.ndarray], first: int, present: int, world: int) -> list[tuple[np.ndarray, int]]:
    """A rank's micro-batches of a short step, ``parts[m]`` empty where its share has run out: as many as
    rank 0 has (``present`` = micro-batches of the step over all ranks), empty ones padded with example
    ``first`` (`PadBatch`), so one process and N processes train on the same examples, each once."""
    k = -(-present // world)
    return [(mb, -1) if len(mb) else (np.zeros(0, np.int32), first) for mb in parts[:k]]


def sequence_plan(n: int, seed: int, epoch: int, batch: int, accum: int, rank: int, world: int,
                  start_step: int) -> EpochPlan:  # fmt: skip
    """`trainer.micro_batches` as an `EpochPlan`: global step s covers perm[s*G : (s+1)*G], G = batch x world x
    accum; micro-batch m of rank r is the slice at (m * world + r) * batch. Full steps are one reshape."""
    G = batch * world * accum
    steps = math.ceil(n / G)
    perm = permutation(n, seed, epoch)
    full = n // G  # steps with every micro-batch full
    first = min(max(start_step, 0), steps)
    parts: list[tuple[np.ndarray, int]] = []
    counts: list[int] = []
    if first < full:
        block = perm[first * G : full * G].reshape(full - first, accum, world, batch)[:, :, rank, :]  # (S, accum, batch)
        mine = np.ascontiguousarray(block).reshape(-1)
        n_mb = (full - first) * accum
        examples = mine
        mb_bounds = np.arange(n_mb + 1, dtype=np.int64) * batch
        step_bounds = np.arange(full - first + 1, dtype=np.int64) * accum
        pad = np.full(n_mb, -1, dtype=np.int64)
        plan = EpochPlan(examples, mb_bounds, step_bounds, pad)
    else:
        plan = None
    for s in range(max(first, full), steps):  # the short last step
        chunk = perm[s * G : (s + 1) * G]
        mbs = [chunk[(m * world + rank) * batch :][:batch] for m in range(accum)]
        step = _short_step_parts(mbs, int(chunk[0]), -(-len(chunk) // batch), world)
        parts += step
        counts.append(len(step))
    tail = _plan(parts, counts) if counts else None
    return _join(plan, tail)


def _join(a: EpochPlan | None, b: EpochPlan | None) -> EpochPlan:
    if a is None and b is None:
        return _plan([], [])
    if a is None or b is None:
        return a if b is None else b
    return EpochPlan(
        np.concatenate([a.examples, b.examples.astype(a.examples.dtype)]),
        np.concatenate([a.mb_bounds, a.mb_bounds[-1] + b.mb_bounds[1:]]),
        np.concatenate([a.step_bounds, a.step_bounds[-1] + b.step_bounds[1:]]),
        np.concatenate([a.pad, b.pad]),
    )


def token_plan(lengths: np.ndarray, max_tokens: int, seed: int, epoch: int, accum: int, rank: int, world: int,
               start_step: int) -> EpochPlan:  # fmt: skip
    """`trainer.token_micro_batches` as an `EpochPlan`: step s takes micro-batches [s*M, (s+1)*M) of the epoch's
    shuffled token batches, M = world x accum, micro-batch m of rank r being number s*M + m*world + r. Only
    this rank's batches (and the example a short last step pads with) are taken out of the sorted order."""
    lengths = np.asarray(lengths)
    cuts = token_batch_cuts(lengths, max_tokens)
    n_batches = len(cuts) - 1
    M = world * accum
    steps = math.ceil(n_batches / M)
    first = min(max(start_step, 0), steps)
    shuffle = _batch_shuffle(n_batches, seed, epoch)
    # the batch numbers j of this rank, step by step: s*M + m*world + rank; only the micro-batches it runs
    # (every rank runs as many as rank 0 has in a short step) are kept
    s_idx = np.arange(first, steps, dtype=np.int64)
    present = np.minimum(M, n_batches - s_idx * M)  # (S,) micro-batches of each step over all ranks
    keep_k = -(-present // world)  # (S,) rank 0's count: the micro-batches every rank runs
    kept = (np.arange(accum)[None, :] < keep_k[:, None]).reshape(-1)  # (S*accum,)
    j = (s_idx[:, None] * M + np.arange(accum, dtype=np.int64)[None, :] * world + rank).reshape(-1)[kept]
    step_kept = np.repeat(s_idx, accum)[kept]
    keep_k = keep_k.astype(np.int32)
    del kept, present, s_idx
    real_kept = j < n_batches
    b_kept = np.where(real_kept, shuffle[np.minimum(j, max(n_batches - 1, 0))], 0)
    sizes = np.where(real_kept, cuts[b_kept + 1] - cuts[b_kept], 0).astype(np.int32)
    step_kept = step_kept.astype(np.int32)
    del j
    # where each of this rank's batches goes in its examples array; the first example of each step where it
    # pads (a short last step: the step's first batch, rank 0's)
    slot = np.full(n_batches, -1, dtype=np.int64 if len(lengths) >= 2**31 else np.int32)
    slot[b_kept[real_kept]] = (np.cumsum(sizes) - sizes)[real_kept]
    pad_steps = np.unique(step_kept[~real_kept])
    pad_first = cuts[shuffle[pad_steps * M]] if len(pad_steps) else np.zeros(0, np.int64)  # (P,) sorted positions
    del shuffle, b_kept
    perm = permutation(len(lengths), seed, epoch)
    pad_pos = np.unique(pad_first)
    examples, firsts = _batches_of(lengths, perm, cuts, slot, int(sizes.sum()), pad_pos)
    del perm, slot
    pad = np.full(len(sizes), -1, dtype=np.int32 if len(lengths) < 2**31 else np.int64)
    empty = np.flatnonzero(~real_kept)  # at most accum - 1, in the short last step
    if len(empty):
        first_of = dict(zip(pad_steps.tolist(), firsts[np.searchsorted(pad_pos, pad_first)].tolist()))
        pad[empty] = [first_of[int(s)] for s in step_kept[empty]]
    small = np.int32 if len(lengths) < 2**31 else np.int64  # a rank's offsets: 4 bytes each
    mb_bounds = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(small)
    step_bounds = np.concatenate([[0], np.cumsum(np.minimum(keep_k, accum))]).astype(small)
    return EpochPlan(examples, mb_bounds, step_bounds, pad)


__all__ = [
    "EpochPlan",
    "PadBatch",
    "flat_micro_batches",
    "permutation",
    "sequence_plan",
    "sorted_positions",
    "token_batch_count",
    "token_batch_cuts",
    "token_plan",
]
