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
    n = math.prod(shape)
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device="cpu").random_(-(2**63), 2**63 - 1)  # 64 random bits each
    u = words.view(torch.int16)[:n]  # uniform over [-32768, 32767]
    return (u >= -32768 + _drop_threshold(p)).view(shape)


__all__ = ["Dropout", "cpu_keep_mask", "keep_scale"]
