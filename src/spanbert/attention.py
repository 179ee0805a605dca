"""Scaled dot-product attention with attention dropout that is fast on CPU: the one attention core
every family calls (`spanbert.model`, `spanbert.cloze`, `spanbert.modernbert`).

Everywhere but one case this is `F.scaled_dot_product_attention`. The case is training on CPU with
attention dropout (BERT's 0.1): SDPA's fused CPU kernels have no dropout, so SDPA falls back to its
math path, which materialises the (B, heads, Tq, Tk) scores, probabilities, Bernoulli mask and
dropped probabilities as whole tensors, each pass over them bound by memory, and draws the mask one
Mersenne-Twister number an element. `_DropoutAttention` instead:

- walks the (batch x head) slices in chunks of about `CHUNK_ELEMENTS` scores, so a chunk's scores,
  probabilities and mask stay in the core's L2 cache between the passes over them;
- draws the mask 16 bits an element from a counter-based generator (`spanbert.dropout`), chunk by
  chunk, as one float 0/1 tensor made by a single comparison (a bool mask costs three times as much
  to apply);
- puts the softmax scale on q and dropout's 1/keep scale on the (Tq, hs) output, not on the
  (Tq, Tk) scores;
- keeps the probabilities and the dropped probabilities for the backward, which uses FlashAttention's
  identity rowsum(dP * P) = rowsum(dO * O) so no (Tq, Tk) reduction is needed.

Measured against transformers' training attention with `bench/attention_core.py`: docs/benchmarks.md
("Second pass: the attention core with dropout").
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from spanbert.dropout import cpu_keep_mask, draw_seed, int16_uniforms, keep_from, keep_scale

# Scores a chunk: 1M fp32 elements = 4 MB. Forward + backward on the 2-core VM (kept buffers warm, median
# of 7, 2026-11-26), chunks of 256K / 512K / 1M / 2M scores: 8 x 4 heads x 512^2 66.7 / 61.4 / 60.3 /
# 69.7 ms, 2 x 12 x 512^2 49.9 / 44.2 / 42.6 / 41.6 ms (docs/benchmarks.md, "Second pass").
CHUNK_ELEMENTS = 1 << 20
# Below this many scores (B x nh x Tq x Tk) the chunked function's own Python work outweighs what it
# saves (the ragged path's short sequences): the same math as plain tensor operations. Measured on the
# 2-core VM, forward + backward: 1 x 2 x 128^2 scores 0.53 ms plain vs 0.65 ms chunked, 1 x 4 x 200^2
# 2.9 vs 2.2 ms, 16 x 2 x 128^2 9.6 vs 5.1 ms.
FUSED_MIN_ELEMENTS = 1 << 16


def attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, dropout_p: float = 0.0, causal: bool = False
) -> Tensor:
    """softmax(q k^T / sqrt(hs) + mask) v, with dropout on the probabilities: (B, nh, Tq, hs) -> same.

    ``mask``: bool (True = may attend) or additive float, broadcastable to (B, nh, Tq, Tk); ``causal``:
    query i sees keys <= i (with no ``mask``). ``dropout_p`` applies as given (pass 0 in eval mode).
    """
    if dropout_p > 0 and q.device.type == "cpu" and not torch.compiler.is_compiling() and q.dim() == 4:
        if causal:
            Tq, Tk = q.shape[-2], k.shape[-2]
            mask = torch.ones(Tq, Tk, dtype=torch.bool, device=q.device).tril()
        bias = _additive(mask)
        if q.shape[0] * q.shape[1] * q.shape[2] * k.shape[2] < FUSED_MIN_ELEMENTS:
            return _plain_dropout_attention(q, k, v, bias, dropout_p)
        return _DropoutAttention.apply(q, k, v, bias, dropout_p)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=causal)


def _plain_dropout_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, p: float) -> Tensor:
    """The same computation and the same mask (the same uniforms, in the same order) as plain tensor
    operations that autograd differentiates."""
    scores = (q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)  # (B, nh, Tq, Tk)
    half = scores.dtype in (torch.float16, torch.bfloat16)  # the softmax in fp32 then, as autocast's
    probs = (scores if bias is None else scores + bias).softmax(-1, dtype=torch.float32 if half else None)
    return (torch.mul(probs, cpu_keep_mask(probs.shape, p)).to(v.dtype) @ v).mul_(keep_scale(p))


def _additive(mask: Tensor | None) -> Tensor | None:
    """A bool mask as 0 / -inf in fp32, (..., Tq, Tk) with at most 4 dims; a float mask as it is."""
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device).masked_fill_(~mask, float("-inf"))
    while mask.dim() < 4:
        mask = mask.unsqueeze(0)
    return mask


class _DropoutAttention(torch.autograd.Function):
    """Attention with dropout over (batch x head) chunks; see the module's docstring.

    Computes in q's dtype (bf16 under CPU autocast, as SDPA's math path would: the products in bf16,
    the softmax and its gradient in fp32). Its (Tq, Tk)-sized buffers come from `_Pool` and go back
    to it after the backward."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, p: float) -> Tensor:
        with torch.autocast("cpu", enabled=False):
            B, nh, Tq, hs = q.shape
            Tk = k.shape[-2]
            dtype = torch.promote_types(torch.promote_types(q.dtype, k.dtype), v.dtype)
            acc = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype  # softmax precision
            n = B * nh
            qs = (q.to(dtype) * hs**-0.5).reshape(n, Tq, hs)  # the softmax scale on q, not on the scores
            k2 = k.to(dtype).reshape(n, Tk, hs)
            v2 = v.to(dtype).reshape(n, Tk, hs)
            c = max(1, min(n, CHUNK_ELEMENTS // (Tq * Tk)))  # slices a chunk
            m = c * Tq * Tk
            # one stream for the whole core, as `Dropout` draws, made chunk by chunk into a kept buffer
            # (so a chunk's uniforms are still in cache when the mask is made from them)
            seed, threshold = draw_seed(), keep_from(p)
            words = _POOL.take(m // 4 + 2, torch.int64)
            work, keep = _POOL.take(m, dtype), _POOL.take(m, dtype)  # scores; the mask as 0 / 1
            wide = _POOL.take(m, acc) if acc != dtype else work  # the scores in fp32 for half inputs
            out = torch.empty(n, Tq, hs, dtype=dtype, device=q.device)
            saved = []  # per chunk: probabilities (acc) and dropped probabilities (dtype, unscaled)
            for i in range(0, n, c):
                j = min(n, i + c)
                shape = (j - i, Tq, Tk)
                s = torch.bmm(qs[i:j], k2[i:j].transpose(1, 2), out=_view(work, shape))
                s = _view(wide, shape).copy_(s) if wide is not work else s
                if bias is not None:
                    s.add_(_chunk_bias(bias, i, j, nh))
                P, Pd = _POOL.take(m, acc), _POOL.take(m, dtype)
                torch.ops.aten._softmax.out(s, -1, False, out=_view(P, shape))
                u = int16_uniforms((j - i) * Tq * Tk, words, seed, start=i * Tq * Tk).view(shape)
                torch.mul(_view(P, shape), torch.ge(u, threshold, out=_view(keep, shape)), out=_view(Pd, shape))
                torch.bmm(_view(Pd, shape), v2[i:j], out=out[i:j])
                saved += [P, Pd]
            out.mul_(keep_scale(p))
            _POOL.give(words, work, keep, *([wide] if wide is not work else []))
        ctx.save_for_backward(qs, k2, v2, out)
        ctx.buffers, ctx.chunk, ctx.p, ctx.dtypes = saved, c, p, (q.dtype, k.dtype, v.dtype)
        return out.view(B, nh, Tq, hs)

    @staticmethod
    @once_differentiable  # no double backward: the gradient is computed with in-place passes on kept buffers
    def backward(ctx, grad: Tensor):
        if ctx.buffers is None:
            raise RuntimeError(
                "spanbert.attention: a second backward through CPU attention with dropout "
                "(retain_graph=True) is not supported: its buffers were reused after the first"
            )
        qs, k2, v2, out = ctx.saved_tensors
        with torch.autocast("cpu", enabled=False):
            n, Tq, hs = qs.shape
            Tk = k2.shape[1]
            dtype, acc = qs.dtype, ctx.buffers[0].dtype
            dO = grad.reshape(n, Tq, hs).to(dtype)
            # rowsum(dP * P) over the keys equals rowsum(dO * O) over the head dims (O the scaled output)
            r = (dO.to(acc) * out.to(acc)).sum(-1, keepdim=True)  # (n, Tq, 1)
            dOs = dO * keep_scale(ctx.p)
            dq, dk, dv = torch.empty_like(qs), torch.empty_like(k2), torch.empty_like(v2)
            c = ctx.chunk
            work = _POOL.take(c * Tq * Tk, dtype)
            wide = _POOL.take(c * Tq * Tk, acc) if acc != dtype else work  # fp32 for half inputs
            for chunk, i in enumerate(range(0, n, c)):
                j = min(n, i + c)
                shape = (j - i, Tq, Tk)
                P, Pd = _view(ctx.buffers[2 * chunk], shape), _view(ctx.buffers[2 * chunk + 1], shape)
                torch.bmm(Pd.transpose(1, 2), dOs[i:j], out=dv[i:j])
                g = torch.bmm(dOs[i:j], v2[i:j].transpose(1, 2), out=_view(work, shape))  # dL/d(dropped probs)
                # dL/dscores = Pd * g - P * r (the softmax backward through the mask)
                ds = (_view(wide, shape).copy_(g) if wide is not work else g).mul_(Pd).addcmul_(P, r[i:j], value=-1)
                ds = g.copy_(ds) if wide is not work else ds  # back to the products' dtype, in place
                torch.bmm(ds, k2[i:j], out=dq[i:j])
                torch.bmm(ds.transpose(1, 2), qs[i:j], out=dk[i:j])
            dq.mul_(hs**-0.5)
            _POOL.give(work, *ctx.buffers, *([wide] if wide is not work else []))
            ctx.buffers = None
        qdt, kdt, vdt = ctx.dtypes
        return (
            dq.view_as(grad).to(qdt),
            dk.view(*grad.shape[:2], Tk, hs).to(kdt),
            dv.view(*grad.shape[:2], Tk, hs).to(vdt),
            None,
            None,
        )


def _view(buf: Tensor, shape: tuple[int, int, int]) -> Tensor:
    """The first prod(shape) elements of a flat pool buffer, as ``shape``."""
    return buf[: shape[0] * shape[1] * shape[2]].view(shape)


class _Pool:
    """Flat CPU buffers kept between steps for the attention core's (Tq, Tk)-sized tensors.

    A tensor of megabytes is a fresh mapping from the C allocator whose pages the kernel zeroes and
    faults in on first touch: about 1 ms for 4 MB and 8 ms for 32 MB on the 2-core VM, more than the
    softmax over them. Reusing them, as a GPU's caching allocator does, removes that from every step.
    Buffers are sized in powers of two (at most 2x the request) so the variable shapes of ragged
    batches share them; small ones and anything past `POOL_MAX_BYTES` go to the allocator."""

    MIN_ELEMENTS = 1 << 16
    POOL_MAX_BYTES = 1 << 31

    def __init__(self):
        self.free: dict[tuple[int, torch.dtype], list[Tensor]] = {}
        self.bytes = 0

    def take(self, numel: int, dtype: torch.dtype) -> Tensor:
        if numel < self.MIN_ELEMENTS:
            return torch.empty(numel, dtype=dtype, device="cpu")
        size = 1 << (numel - 1).bit_length()
        free = self.free.get((size, dtype))
        if free:
            buf = free.pop()
            self.bytes -= buf.nbytes
            return buf
        return torch.empty(size, dtype=dtype, device="cpu")

    def give(self, *bufs: Tensor) -> None:
        for buf in bufs:
            size = buf.numel()
            if size >= self.MIN_ELEMENTS and size & (size - 1) == 0 and self.bytes + buf.nbytes <= self.POOL_MAX_BYTES:
                self.free.setdefault((size, buf.dtype), []).append(buf)
                self.bytes += buf.nbytes

    def clear(self) -> None:
        self.free.clear()
        self.bytes = 0


_POOL = _Pool()


def release_buffers() -> None:
    """Hand the attention core's kept buffers back to the C allocator (they are kept between steps)."""
    _POOL.clear()


def _chunk_bias(bias: Tensor, i: int, j: int, nh: int) -> Tensor:
    """The rows of a (B or 1, nh or 1, Tq or 1, Tk) additive mask for flattened slices i..j of B x nh."""
    Bm, Hm = bias.shape[0], bias.shape[1]
    if Bm == 1 and Hm == 1:
        return bias[0, 0]
    if Hm == 1 and i // nh == (j - 1) // nh:
        return bias[i // nh, 0]  # a chunk within one sequence: no gather
    idx = torch.arange(i, j, device=bias.device)
    b = idx // nh if Bm > 1 else torch.zeros_like(idx)
    h = idx % nh if Hm > 1 else torch.zeros_like(idx)
    return bias[b, h]  # (c, Tq or 1, Tk)
