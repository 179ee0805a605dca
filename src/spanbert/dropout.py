"""Dropout whose CPU masks are cheap: the one piece of layer code every family and the task heads share.

It lives below `spanbert.model`, `spanbert.cloze` and `spanbert.tasks` so that a task head can use it
without importing a model file (`spanbert.model.Dropout` stays importable: it is this class).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class Dropout(nn.Module):
    """Dropout whose CPU masks are drawn 16 bits at a time.

    PyTorch's CPU `bernoulli_` draws one Mersenne-Twister number per element and dominates the cost
    of attention dropout (~4x a softmax over the same tensor). Here one 64-bit draw gives four 16-bit
    uniforms: an element is dropped with probability ceil(p * 65536) / 65536 (0.100006 for p = 0.1) and
    kept ones are scaled by the exact inverse keep rate, so the layer stays unbiased. The draws come
    from torch's global generator, so seeding and checkpoint resume work as with `nn.Dropout`. On
    other devices this is `F.dropout`.
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


def keep_scale(p: float) -> float:
    """1 / the keep rate of `cpu_keep_mask` at ``p``: the factor on kept elements that keeps dropout unbiased."""
    return 65536.0 / (65536 - _drop_threshold(p))


def _drop_threshold(p: float) -> int:
    return min(65536, math.ceil(p * 65536))


def cpu_keep_mask(shape: torch.Size | tuple[int, ...], p: float) -> Tensor:
    """Boolean keep-mask, True with probability 1 - ceil(p * 65536) / 65536, from 16-bit uniforms."""
    return (int16_uniforms(math.prod(shape)) >= keep_from(p)).view(shape)


def int16_uniforms(n: int, words: Tensor | None = None) -> Tensor:
    """``n`` uniforms over the int16 range, four from each 64-bit draw of torch's global generator.

    ``words``: a CPU int64 buffer of at least (n + 3) // 4 elements to draw into (the result views it)."""
    m = (n + 3) // 4
    words = torch.empty(m, dtype=torch.int64, device="cpu") if words is None else words[:m]
    words.random_(-(2**63), 2**63 - 1)  # 64 random bits each
    return words.view(torch.int16)[:n]  # uniform over [-32768, 32767]


def keep_from(p: float) -> int:
    """The least int16 uniform that keeps an element under dropout ``p`` (`cpu_keep_mask`'s rule)."""
    return -32768 + _drop_threshold(p)


__all__ = ["Dropout", "cpu_keep_mask", "int16_uniforms", "keep_from", "keep_scale"]
