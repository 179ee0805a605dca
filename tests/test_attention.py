"""`spanbert.attention`: the CPU attention-with-dropout core equals the math it replaces.

The reference is attention written out with `spanbert.dropout.cpu_keep_mask` drawn from the same seed:
the fused path draws the same uniforms in the same order, so outputs and gradients must agree to
rounding, whatever the chunking, masks and shapes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import spanbert.attention as sa
from spanbert.dropout import cpu_keep_mask, keep_scale


@pytest.fixture(autouse=True)
def fused(monkeypatch):
    """The chunked function at every size (the tiny shapes here would take the plain path)."""
    monkeypatch.setattr(sa, "FUSED_MIN_ELEMENTS", 0)


def reference(q, k, v, mask, p, causal=False):
    scores = (q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)  # (B, nh, Tq, Tk)
    if causal:
        mask = torch.ones(scores.shape[-2:], dtype=torch.bool).tril()
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    probs = scores.softmax(-1)
    return (probs * cpu_keep_mask(probs.shape, p)) @ v * keep_scale(p)


def inputs(B, nh, Tq, Tk, hs, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Tq, nh, hs, generator=g, dtype=dtype).transpose(1, 2)  # strided, as a model's heads
    k = torch.randn(B, Tk, nh, hs, generator=g, dtype=dtype).transpose(1, 2)
    v = torch.randn(B, Tk, nh, hs, generator=g, dtype=dtype).transpose(1, 2)
    return [t.detach().requires_grad_() for t in (q, k, v)]


def run(fn, q, k, v, seed=7):
    torch.manual_seed(seed)
    out = fn(q, k, v)
    w = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
    (out * w).sum().backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    return out.detach(), grads


def key_padding(B, Tk):
    lengths = torch.arange(B) % Tk + max(1, Tk - B)
    return (torch.arange(Tk)[None] < lengths[:, None])[:, None, None, :]  # (B, 1, 1, Tk)


MASKS = {
    "none": lambda B, nh, Tq, Tk: None,
    "key padding": lambda B, nh, Tq, Tk: key_padding(B, Tk),
    "per head and query": lambda B, nh, Tq, Tk: (torch.rand(B, nh, Tq, Tk, generator=torch.Generator().manual_seed(3)) > 0.2)
    | (torch.arange(Tk) == 0),  # every query keeps key 0
    "additive float": lambda B, nh, Tq, Tk: torch.randn(1, 1, Tq, Tk, generator=torch.Generator().manual_seed(4), dtype=torch.float64),
}


@pytest.mark.parametrize("chunk", [1, 50, 10**9])  # one score a chunk (slices alone), chunks across sequences, all at once
@pytest.mark.parametrize("mask", list(MASKS))
def test_equals_the_math_path_with_the_same_mask(monkeypatch, chunk, mask):
    B, nh, Tq, Tk, hs = 3, 2, 5, 7, 4  # Tq != Tk, as the two-tower model's combination attention
    monkeypatch.setattr(sa, "CHUNK_ELEMENTS", chunk)
    q, k, v = inputs(B, nh, Tq, Tk, hs)
    m = MASKS[mask](B, nh, Tq, Tk)
    want, want_grads = run(lambda q, k, v: reference(q, k, v, m, 0.3), q, k, v)
    got, got_grads = run(lambda q, k, v: sa.attention(q, k, v, m, 0.3), q, k, v)
    assert torch.allclose(got, want, atol=1e-12)
    for g, w in zip(got_grads, want_grads):
        assert torch.allclose(g, w, atol=1e-12)


def test_causal_equals_the_math_path(monkeypatch):
    monkeypatch.setattr(sa, "CHUNK_ELEMENTS", 30)
    q, k, v = inputs(2, 3, 6, 6, 4)
    want, want_grads = run(lambda q, k, v: reference(q, k, v, None, 0.2, causal=True), q, k, v)
    got, got_grads = run(lambda q, k, v: sa.attention(q, k, v, None, 0.2, causal=True), q, k, v)
    assert torch.allclose(got, want, atol=1e-12)
    assert all(torch.allclose(g, w, atol=1e-12) for g, w in zip(got_grads, want_grads))


def test_dropout_is_unbiased_at_its_rate():
    """With values of ones every row's output is keep_scale x (kept probability): 1 on average, and
    the share of zeroed probabilities is p (to ceil(p * 65536) / 65536)."""
    B, nh, T, hs, p = 4, 4, 64, 8, 0.25
    q, k = torch.randn(B, nh, T, hs), torch.randn(B, nh, T, hs)
    v = torch.ones(B, nh, T, hs)
    torch.manual_seed(0)
    out = sa.attention(q, k, v, None, p)
    assert abs(out.mean().item() - 1.0) < 0.02
    assert out.std().item() > 0.05  # the mask varies per query: not a constant
    torch.manual_seed(0)  # uniform probabilities (q = k = 0): the output is the kept share x keep_scale
    kept = sa.attention(torch.zeros_like(q), torch.zeros_like(k), v, None, p)[..., 0] / keep_scale(p)
    assert abs(1 - kept.mean().item() - p) < 0.01, kept.mean()


def test_bf16_autocast_is_close_to_fp32_and_keeps_the_input_dtypes():
    q, k, v = inputs(2, 2, 16, 16, 8, dtype=torch.float32)
    want, want_grads = run(lambda q, k, v: sa.attention(q, k, v, key_padding(2, 16), 0.1), q, k, v)
    qb, kb, vb = [t.detach().to(torch.bfloat16).requires_grad_() for t in (q, k, v)]
    got, got_grads = run(lambda q, k, v: sa.attention(q, k, v, key_padding(2, 16), 0.1), qb, kb, vb)
    assert got.dtype == torch.bfloat16 and all(g.dtype == torch.bfloat16 for g in got_grads)
    assert torch.allclose(got.float(), want, atol=0.05, rtol=0.05)
    for g, w in zip(got_grads, want_grads):
        assert torch.allclose(g.float(), w, atol=0.05, rtol=0.05)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # as a model's projections hand it bf16 inputs
        got2, _ = run(lambda q, k, v: sa.attention(q, k, v, key_padding(2, 16), 0.1), qb, kb, vb)
    assert torch.equal(got2, got)


def test_without_dropout_it_is_sdpa_and_draws_nothing():
    q, k, v = inputs(2, 2, 8, 8, 4, dtype=torch.float32)
    state = torch.get_rng_state()
    out = sa.attention(q, k, v, key_padding(2, 8), 0.0)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.allclose(out, F.scaled_dot_product_attention(q, k, v, attn_mask=key_padding(2, 8)))


def test_checkpointed_recompute_draws_the_same_mask():
    """Activation checkpointing replays the forward with the saved RNG state: same mask, same gradients."""
    from torch.utils.checkpoint import checkpoint

    q, k, v = inputs(2, 2, 8, 8, 4)
    want, want_grads = run(lambda q, k, v: sa.attention(q, k, v, None, 0.3), q, k, v)
    got, got_grads = run(lambda q, k, v: checkpoint(sa.attention, q, k, v, None, 0.3, use_reentrant=False), q, k, v)
    assert torch.equal(got, want)
    assert all(torch.allclose(g, w, atol=1e-12) for g, w in zip(got_grads, want_grads))


@pytest.mark.parametrize("mask", list(MASKS))
def test_the_plain_path_for_small_cores_equals_the_chunked_one(monkeypatch, mask):
    q, k, v = inputs(2, 2, 5, 7, 4)
    m = MASKS[mask](2, 2, 5, 7)
    want, want_grads = run(lambda q, k, v: sa.attention(q, k, v, m, 0.3), q, k, v)
    monkeypatch.setattr(sa, "FUSED_MIN_ELEMENTS", 10**9)
    monkeypatch.setattr(sa, "_DropoutAttention", None)  # would fail if it were called
    got, got_grads = run(lambda q, k, v: sa.attention(q, k, v, m, 0.3), q, k, v)
    assert torch.allclose(got, want, atol=1e-12)
    assert all(torch.allclose(g, w, atol=1e-12) for g, w in zip(got_grads, want_grads))


def test_a_second_backward_is_refused_not_read_from_reused_buffers():
    q, k, v = inputs(2, 2, 8, 8, 4)
    out = sa.attention(q, k, v, None, 0.3)
    out.sum().backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="second backward"):
        out.sum().backward()


def test_kept_buffers_are_reused_and_released(monkeypatch):
    q, k, v = inputs(2, 2, 64, 64, 4, dtype=torch.float32)  # 2 x 2 x 64 x 64 = 16K scores a buffer
    sa.release_buffers()
    monkeypatch.setattr(sa._Pool, "MIN_ELEMENTS", 1)  # pool every buffer at this small size
    run(lambda q, k, v: sa.attention(q, k, v, None, 0.1), q, k, v)
    kept = sa._POOL.bytes
    assert kept > 0
    run(lambda q, k, v: sa.attention(q, k, v, None, 0.1), q, k, v)
    assert sa._POOL.bytes == kept  # the second step took the first step's buffers and gave them back
    sa.release_buffers()
    assert sa._POOL.bytes == 0 and not sa._POOL.free
