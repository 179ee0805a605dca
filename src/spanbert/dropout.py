"""Dropout whose CPU masks are cheap: the one piece of layer code every family and the task heads share,
and `seeded_build`, which says where a new model's initial weights and each rank's dropout stream draw from.

It lives below `spanbert.model`, `spanbert.cloze` and `spanbert.tasks` so that a task head can use it
without importing a model file.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn


class Dropout(nn.Module):
    """Dropout whose CPU masks are drawn 16 bits at a time.

    PyTorch's CPU `bernoulli_` draws one Mersenne-Twister number per element and dominates the cost
    of attention dropout (~4x a softmax over the same tensor). Here each 64-bit word of a counter-based
    generator (`int16_uniforms`) gives four 16-bit uniforms: an element is dropped with probability
    ceil(p * 65536) / 65536 (0.100006 for p = 0.1) and kept ones are scaled by the exact inverse keep
    rate, so the layer stays unbiased. Each mask's seed is drawn from torch's global generator, so
    seeding and checkpoint resume work as with `nn.Dropout`. On other devices this is `F.dropout`.
    """

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        if x.device.type != "cpu" or torch.compiler.is_compiling():
            return F.dropout(x, self.p, True)
        # x * bool mask (one pass, the mask kept as bytes for the backward), then the scale in place:
        # a float copy of the mask was a third pass and 4 bytes an element
        return torch.mul(x, cpu_keep_mask(x.shape, self.p)).mul_(keep_scale(self.p))

    def extra_repr(self) -> str:
        return f"p={self.p}"


def set_dropout(module: nn.Module, p: float) -> None:
    """Set every dropout rate inside ``module`` to ``p``: each `Dropout` (and `nn.Dropout`) layer and
    each attention module's ``dropout_p`` (the attention-weight rate, a plain float attribute in every
    family). For a rate used in training only, e.g. pre-training without dropout (Geiping & Goldstein
    2022) while the saved config keeps the rate fine-tuning starts from."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout rate {p} is outside [0, 1)")
    for m in module.modules():
        if isinstance(m, (Dropout, nn.Dropout)):
            m.p = float(p)
        if isinstance(getattr(m, "dropout_p", None), float):
            m.dropout_p = float(p)


@contextlib.contextmanager
def seeded_build(seed: int | None, rank: int = 0) -> Iterator[None]:
    """Build a model inside the block: every weight drawn there (a new task head, a pooler, grown
    embeddings, a model pre-trained from scratch) comes from a stream seeded with ``seed`` alone, the same
    on every rank and in every run with this seed, whatever the process drew before. After the block the
    dropout stream of ``rank`` (torch's generator, which `Dropout` draws its masks' seeds from) is seeded
    from (seed, rank): ranks drop different units on their different examples, and rank 0 of N draws as
    one process does. ``seed`` None: nothing is seeded.

    PyTorch's initialisers take no generator in a module's constructor, so the seed is given to the block
    that builds the model rather than to each layer; what is built depends on the seed passed in and on
    nothing drawn before."""
    if seed is None:
        yield
        return
    torch.manual_seed(seed)
    yield
    torch.manual_seed(int(np.random.SeedSequence([seed, rank]).generate_state(1)[0]))


def keep_scale(p: float) -> float:
    """1 / the keep rate of `cpu_keep_mask` at ``p``: the factor on kept elements that keeps dropout unbiased."""
    return 65536.0 / (65536 - _drop_threshold(p))


def _drop_threshold(p: float) -> int:
    return min(65536, math.ceil(p * 65536))


def cpu_keep_mask(shape: torch.Size | tuple[int, ...], p: float) -> Tensor:
    """Boolean keep-mask, True with probability 1 - ceil(p * 65536) / 65536, from 16-bit uniforms."""
    return (int16_uniforms(math.prod(shape)) >= keep_from(p)).view(shape)


def keep_from(p: float) -> int:
    """The least int16 uniform that keeps an element under dropout ``p`` (`cpu_keep_mask`'s rule)."""
    return -32768 + _drop_threshold(p)


# The uniforms come from a counter-based generator, SplitMix64 (Steele, Lea and Flood, "Fast splittable
# pseudorandom number generators", OOPSLA 2014; Java's SplittableRandom): word i of a draw is
# mix64(seed + (i + 1) * golden-ratio gamma), the seed one 64-bit number drawn from torch's global
# generator per draw, and each word gives four 16-bit uniforms. Why not torch's own CPU generator
# (`random_`, a Mersenne Twister): it is sequential and holds the GIL, so its cost does not shrink with
# threads (51 ms of the small pre-training step on the 2-core VM), while mix64 is twelve int64 passes
# that torch runs vectorised on every thread (docs/benchmarks.md, "Third pass").
_GAMMA = 0x9E3779B97F4A7C15
_MIX = ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB), (31, None))  # xor-shift, then multiply
# Words a block, per thread: 64K int64 = 512 KB, in a core's L2 cache across the passes over it. The
# block does not change the stream, only the speed. 4M uniforms on the 2-core VM: 1 thread 5.0 ms with
# blocks of 64K words (5.7 with 128K; the Mersenne Twister 4.9), 2 threads 3.0 ms with 128K (3.3 with
# 64K; the Mersenne Twister 5.0).
_BLOCK_PER_THREAD = 1 << 16
_STEPS: Tensor | None = None  # arange(block) * _GAMMA (mod 2^64), read-only, grown as needed


def draw_seed() -> Tensor:
    """The seed of one draw of `int16_uniforms`: 64 bits from torch's global generator, so seeding,
    per-rank seeds and activation checkpointing's replay of the RNG state apply to the masks. A 0-d
    tensor, not read into Python: a training step reads no value back from a tensor (on a GPU that
    would wait for the device; tests/test_host_sync.py holds every path to it)."""
    return torch.empty((), dtype=torch.int64, device="cpu").random_(-(1 << 63), (1 << 63) - 1)


def int16_uniforms(n: int, out: Tensor | None = None, seed: int | Tensor | None = None, start: int = 0) -> Tensor:
    """``n`` uniforms over the int16 range: elements start .. start + n - 1 of the stream of ``seed``
    (an int, a 0-d int64 CPU tensor, or a fresh `draw_seed()` when None). Element e is int16 lane
    e % 4 (in memory order) of SplitMix64 word e // 4, so a stream drawn in pieces equals the stream
    drawn whole, whatever the thread count.

    ``out``: a CPU int64 buffer of at least (start % 4 + n + 3) // 4 elements to draw into (the result
    views it)."""
    seed = draw_seed() if seed is None else seed
    if not isinstance(seed, Tensor):
        seed = torch.tensor(_int64(seed), dtype=torch.int64, device="cpu")
    first, lane = start >> 2, start & 3
    m = (lane + n + 3) >> 2  # words that cover the n elements
    words = torch.empty(m, dtype=torch.int64, device="cpu") if out is None else out[:m]
    block = max(1, min(m, _BLOCK_PER_THREAD * max(1, torch.get_num_threads())))
    steps = _steps(block)
    tmp = torch.empty(block, dtype=torch.int64, device="cpu")
    for b in range(0, m, block):
        x = words[b : b + block]
        t = tmp[: x.numel()]
        torch.add(steps[: x.numel()], seed + _int64((first + b + 1) * _GAMMA), out=x)  # int64 wraps mod 2^64
        for shift, mul in _MIX:
            # x ^= x >>> shift: torch's >> is arithmetic, the mask makes it logical
            x.bitwise_xor_(torch.bitwise_right_shift(x, shift, out=t).bitwise_and_((1 << (64 - shift)) - 1))
            if mul is not None:
                x.mul_(_int64(mul))
    return words.view(torch.int16)[lane : lane + n]


def _int64(v: int) -> int:
    """``v`` modulo 2^64 as a signed int64 (torch's int64 arithmetic wraps modulo 2^64)."""
    return ((v + (1 << 63)) & 0xFFFFFFFFFFFFFFFF) - (1 << 63)


def _steps(n: int) -> Tensor:
    """arange(n) * _GAMMA modulo 2^64, from a cache made once per size reached."""
    global _STEPS
    if _STEPS is None or _STEPS.numel() < n:
        _STEPS = torch.arange(max(n, _BLOCK_PER_THREAD), dtype=torch.int64, device="cpu").mul_(_int64(_GAMMA))
    return _STEPS


__all__ = ["Dropout", "cpu_keep_mask", "draw_seed", "int16_uniforms", "keep_from", "keep_scale", "set_dropout"]
