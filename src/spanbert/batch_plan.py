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
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from spanbert import distributed
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


def epoch_permutation(n: int, seed: int, epoch: int, cache: Path | None = None) -> np.ndarray:
    """`permutation` (n, seed, epoch); with ``cache`` (a folder), a file there: built once (rank 0 under torchrun,
    the others waiting on the store), memory-mapped read-only by every rank, so no rank holds a copy."""
    if cache is None:
        return permutation(n, seed, epoch)

    def fill(out: np.ndarray) -> None:
        for c0 in range(0, n, CHUNK * 16):
            out[c0 : c0 + CHUNK * 16] = np.arange(c0, min(n, c0 + CHUNK * 16), dtype=out.dtype)
        # in place, in the file: the numbers of `permutation` (a plain ndarray view: numpy shuffles a memmap,
        # an ndarray subclass, with a Python loop)
        np.random.default_rng([seed, epoch]).shuffle(np.asarray(out))

    return _cached(Path(cache), "perm", seed, epoch, n, fill)


def epoch_order(lengths: np.ndarray, seed: int, epoch: int, cache: Path | None = None) -> np.ndarray:
    """(n,) the examples sorted by length, equal lengths in the epoch's permutation order: ``perm[argsort(
    lengths[perm], kind="stable")]``, the order token batches are cut from. With ``cache`` (a folder) a file
    there, built once and memory-mapped by every rank (Megatron-LM caches its shuffle index the same way);
    the permutation it is made from is a temporary file, so the builder holds neither in its own memory."""
    n = len(lengths)
    if cache is None:
        return sorted_positions(lengths, permutation(n, seed, epoch), np.arange(n))

    def fill(out: np.ndarray) -> None:
        tmp = Path(cache) / f".perm-s{seed}-e{epoch}.order.tmp-{os.getpid()}"
        try:
            perm = np.memmap(tmp, dtype=out.dtype, mode="w+", shape=(n,))
            for c0 in range(0, n, CHUNK * 16):
                perm[c0 : c0 + CHUNK * 16] = np.arange(c0, min(n, c0 + CHUNK * 16), dtype=out.dtype)
            np.random.default_rng([seed, epoch]).shuffle(np.asarray(perm))  # see epoch_permutation
            for dest, examples in _counting_sort(lengths, perm):
                out[dest] = examples
            del perm
        finally:
            tmp.unlink(missing_ok=True)

    return _cached(Path(cache), "order", seed, epoch, n, fill)


KEEP_EPOCHS = 2
"""Epoch files (`epoch_order`, `epoch_permutation`) kept per seed: the one being trained and the one before."""


def _cached(folder: Path, kind: str, seed: int, epoch: int, n: int, fill) -> np.ndarray:
    """(n,) int32 (int64 past 2^31 examples) array ``folder/<kind>-s<seed>-e<epoch>.bin``, written by
    ``fill(memmap)`` into a temporary file renamed in whole (one writer: `distributed.on_main_long`), then
    memory-mapped read-only; older epochs of the seed removed. A rank that cannot see rank 0's file (no
    shared folder) builds its own."""
    dtype = np.dtype(_offsets_dtype(n))
    name = f"{kind}-s{seed}-e{epoch}.bin"
    path = folder / name

    def build() -> str:
        if path.is_file() and path.stat().st_size == n * dtype.itemsize:
            return str(path)
        tmp = folder / f".{name}.tmp-{os.getpid()}"
        try:
            if n:
                out = np.memmap(tmp, dtype=dtype, mode="w+", shape=(n,))
                fill(out)
                out.flush()
                del out
            else:
                tmp.write_bytes(b"")
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        for old in folder.glob(f"{kind}-s{seed}-e*.bin"):  # epochs done with (a resume builds one again)
            e = old.name[len(f"{kind}-s{seed}-e") : -len(".bin")]
            if e.isdigit() and int(e) <= epoch - KEEP_EPOCHS:
                old.unlink(missing_ok=True)
        return str(path)

    where = Path(distributed.on_main_long(build, key=f"batch_plan/{folder.name}/{name}"))
    if not (where.is_file() and where.stat().st_size == n * dtype.itemsize):
        where = Path(build())  # rank 0's folder is not this machine's: a copy of its own
    return np.memmap(where, dtype=dtype, mode="r", shape=(n,)) if n else np.zeros(0, dtype)


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
    small = _offsets_dtype(n)
    cuts = [np.zeros(1, small)]
    lo = 0  # the open batch's first position
    for v, rs, re in zip(values.tolist(), run_start.tolist(), run_end.tolist()):
        cap = max_tokens // v if v else n + 1  # >= 1: no example is longer than the budget (empty ones never overflow)
        first = max(rs, lo + cap)  # the first position of this run that does not fit the open batch
        if first < re:
            c = np.arange(first, re, cap, dtype=small)
            cuts.append(c)
            lo = int(c[-1])
    cuts.append(np.array([n], small))
    return np.concatenate(cuts)


def token_batch_count(lengths: np.ndarray, max_tokens: int) -> int:
    """The micro-batches of an epoch under a token budget (the same in every epoch)."""
    return len(token_batch_cuts(lengths, max_tokens)) - 1


def _batch_shuffle(n_batches: int, seed: int, epoch: int) -> np.ndarray:
    """The order the epoch's token batches are used in: ``default_rng([seed, epoch, 0xBA7C]).permutation``, int32."""
    out = np.arange(n_batches, dtype=_offsets_dtype(n_batches))
    np.random.default_rng([seed, epoch, 0xBA7C]).shuffle(out)
    return out


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

    Micro-batch m is ``source[mb_start[m] : mb_start[m] + mb_size[m]]``: ``source`` is this rank's own
    examples, or the epoch's order shared by every rank (a memory-mapped file, `epoch_order`); ``step_bounds``
    (S+1,) says where each step's micro-batches start, ``pad`` (M,) the example a padding micro-batch runs
    (-1: a real one)."""

    def __init__(self, source: np.ndarray, mb_start: np.ndarray, mb_size: np.ndarray, step_bounds: np.ndarray,
                 pad: np.ndarray):  # fmt: skip
        self.source, self.mb_start, self.mb_size, self.step_bounds, self.pad = source, mb_start, mb_size, step_bounds, pad

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
        a = int(self.mb_start[m])
        return self.source[a : a + int(self.mb_size[m])].tolist()

    @property
    def examples(self) -> np.ndarray:
        """Every example of the plan in order (pads left out), as one array."""
        return _gather(self.source, self.mb_start, self.mb_size)

    def micro_batches(self) -> MicroBatches:
        """Every micro-batch of the plan in order, made one at a time (a DataLoader's ``batch_sampler``)."""
        return MicroBatches(self)


def _gather(source: np.ndarray, start: np.ndarray, size: np.ndarray) -> np.ndarray:
    """``concatenate([source[a : a + k] for a, k in zip(start, size)])`` in a few array calls."""
    size = np.asarray(size, dtype=np.int64)
    at = np.repeat(np.asarray(start, dtype=np.int64) - (np.cumsum(size) - size), size) + np.arange(int(size.sum()))
    return np.asarray(source[at])


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


def _offsets_dtype(n: int):
    return np.int32 if n < 2**31 else np.int64


def sequence_plan(n: int, seed: int, epoch: int, batch: int, accum: int, rank: int, world: int,
                  start_step: int, cache: Path | None = None) -> EpochPlan:  # fmt: skip
    """`trainer.micro_batches` as an `EpochPlan`: global step s covers perm[s*G : (s+1)*G], G = batch x world x
    accum; micro-batch m of rank r is the slice at (m * world + r) * batch; in a short last step every rank runs
    as many micro-batches as rank 0 has, an empty one padding with the step's first example. With ``cache`` (a
    folder) the permutation is a file there (`epoch_permutation`), shared by the ranks; else this rank's
    examples are copied out of it."""
    G = batch * world * accum
    steps = math.ceil(n / G)
    first = min(max(start_step, 0), steps)
    perm = epoch_permutation(n, seed, epoch, cache)
    s_idx = np.arange(first, steps, dtype=np.int64)
    chunk = np.minimum(G, n - s_idx * G)  # (S,) examples of each step
    present = -(-chunk // batch)  # (S,) micro-batches of the step over all ranks
    keep_k = -(-present // world)  # (S,) rank 0's count: the micro-batches every rank runs
    at = (np.arange(accum, dtype=np.int64) * world + rank) * batch  # (accum,) offset of micro-batch m in a step
    kept = (np.arange(accum)[None, :] < keep_k[:, None]).reshape(-1)  # (S*accum,)
    start = (s_idx[:, None] * G + at[None, :]).reshape(-1)[kept]
    size = np.clip((chunk[:, None] - at[None, :]).reshape(-1)[kept], 0, batch)
    step_first = np.repeat(s_idx * G, accum)[kept]
    pad = np.where(size > 0, -1, np.asarray(perm[np.minimum(step_first, max(n - 1, 0))]) if n else -1)
    small = _offsets_dtype(n)
    step_bounds = np.concatenate([[0], np.cumsum(keep_k)]).astype(small)
    if cache is None:  # this rank's share copied out, the permutation dropped
        source = _gather(perm, start, size)
        start = np.cumsum(size) - size
        perm = source
    return EpochPlan(perm, start.astype(small), size.astype(small), step_bounds, pad.astype(small))


def token_plan(lengths: np.ndarray, max_tokens: int, seed: int, epoch: int, accum: int, rank: int, world: int,
               start_step: int, cache: Path | None = None) -> EpochPlan:  # fmt: skip
    """`trainer.token_micro_batches` as an `EpochPlan`: step s takes micro-batches [s*M, (s+1)*M) of the epoch's
    shuffled token batches, M = world x accum, micro-batch m of rank r being number s*M + m*world + r. Only
    this rank's batches (and the example a short last step pads with) are taken out of the sorted order. With
    ``cache`` (a folder) the epoch's sorted order is a file there, built once and mapped by every rank
    (`epoch_order`): a micro-batch is then a slice of it, and the rank keeps only where each one starts."""
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
    # the first example of each step where this rank pads (a short last step: the step's first batch, rank 0's)
    pad_steps = np.unique(step_kept[~real_kept])
    pad_first = cuts[shuffle[pad_steps * M]] if len(pad_steps) else np.zeros(0, np.int64)  # (P,) sorted positions
    del shuffle
    small = _offsets_dtype(len(lengths))  # a rank's offsets: 4 bytes each
    pad = np.full(len(sizes), -1, dtype=small)
    empty = np.flatnonzero(~real_kept)  # at most accum - 1, in the short last step
    step_bounds = np.concatenate([[0], np.cumsum(np.minimum(keep_k, accum))]).astype(small)
    if cache is not None:  # the epoch's order is a file every rank maps: a micro-batch is a slice of it
        order = epoch_order(lengths, seed, epoch, cache)
        if len(empty):
            first_of = dict(zip(pad_steps.tolist(), np.asarray(order[pad_first]).tolist()))
            pad[empty] = [first_of[int(s)] for s in step_kept[empty]]
        start = np.where(real_kept, cuts[b_kept], 0).astype(small)  # batch b's examples start at cuts[b]
        return EpochPlan(order, start, sizes.astype(small), step_bounds, pad)
    slot = np.full(n_batches, -1, dtype=small)  # where each of this rank's batches goes in its own array
    slot[b_kept[real_kept]] = (np.cumsum(sizes) - sizes)[real_kept]
    perm = permutation(len(lengths), seed, epoch)
    pad_pos = np.unique(pad_first)
    examples, firsts = _batches_of(lengths, perm, cuts, slot, int(sizes.sum()), pad_pos)
    del perm, slot
    if len(empty):
        first_of = dict(zip(pad_steps.tolist(), firsts[np.searchsorted(pad_pos, pad_first)].tolist()))
        pad[empty] = [first_of[int(s)] for s in step_kept[empty]]
    start = (np.cumsum(sizes, dtype=np.int64) - sizes).astype(small)
    return EpochPlan(examples, start, sizes.astype(small), step_bounds, pad)


__all__ = [
    "EpochPlan",
    "epoch_order",
    "epoch_permutation",
    "PadBatch",
    "flat_micro_batches",
    "permutation",
    "sequence_plan",
    "sorted_positions",
    "token_batch_count",
    "token_batch_cuts",
    "token_plan",
]
