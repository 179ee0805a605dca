"""The CPU dropout masks' generator (`spanbert.dropout.int16_uniforms`): SplitMix64 words, four 16-bit
uniforms each, seeded from torch's global generator. Pinned against the algorithm written out in Python
integers, drawn in pieces against drawn whole, and checked for rate and independence."""

import math

import pytest
import torch
from torch import nn

from spanbert import dropout as D

_MASK = (1 << 64) - 1


def splitmix64(seed: int, i: int) -> int:
    """Word i of a draw, in Python integers (Steele, Lea and Flood 2014)."""
    z = (seed + (i + 1) * 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def lanes(word: int) -> list[int]:
    """The four int16 of a word in memory order (little-endian), as signed values."""
    return [((word >> (16 * j)) & 0xFFFF) - (0x10000 if (word >> (16 * j)) & 0x8000 else 0) for j in range(4)]


@pytest.mark.parametrize("seed", [0, 1, -1, 0x123456789ABCDEF, -(1 << 63)])
def test_words_are_splitmix64_in_python_integers(monkeypatch, seed):
    monkeypatch.setattr(D, "_BLOCK_PER_THREAD", 4)  # several blocks, and a partial one
    monkeypatch.setattr(D, "_STEPS", None)
    n = 4 * 21 + 3
    got = D.int16_uniforms(n, seed=seed).tolist()
    want = [x for i in range(22) for x in lanes(splitmix64(seed & _MASK, i))][:n]
    assert got == want


def test_a_stream_drawn_in_pieces_equals_the_stream_drawn_whole():
    whole = D.int16_uniforms(1000, seed=42)
    buf = torch.empty(300, dtype=torch.int64)
    for start, stop in [(0, 1), (1, 6), (6, 7), (7, 333), (333, 334), (334, 1000)]:
        assert torch.equal(D.int16_uniforms(stop - start, buf, 42, start=start), whole[start:stop])


def test_empty_draws_and_an_empty_dropout_input():
    assert D.int16_uniforms(0).numel() == 0 and D.int16_uniforms(0, seed=1, start=3).numel() == 0
    assert D.Dropout(0.1).train()(torch.ones(0, 8)).shape == (0, 8)


def test_the_stream_does_not_depend_on_the_thread_count(monkeypatch):
    """The block a pass covers grows with torch's threads; the numbers must not."""
    monkeypatch.setattr(D, "_BLOCK_PER_THREAD", 16)
    before = torch.get_num_threads()
    try:
        draws = []
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            draws.append(D.int16_uniforms(1001, seed=7))
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(d, draws[0]) for d in draws[1:])


def test_the_seed_comes_from_torchs_global_generator():
    torch.manual_seed(3)
    a = D.int16_uniforms(64)
    b = D.int16_uniforms(64)
    torch.manual_seed(3)
    assert torch.equal(D.int16_uniforms(64), a) and not torch.equal(a, b)
    torch.manual_seed(3)
    assert torch.equal(D.int16_uniforms(64, seed=D.draw_seed()), a)  # a draw is one seed, then the hash


def test_uniforms_are_uniform_and_neighbours_independent():
    torch.manual_seed(0)
    n = 1 << 21
    u = D.int16_uniforms(n).to(torch.int64) + 32768  # 0 .. 65535
    sd = 0.5 / math.sqrt(n)
    for b in range(16):  # every bit is a fair coin
        assert abs(((u >> b) & 1).double().mean().item() - 0.5) < 6 * sd, b
    counts = torch.bincount(u >> 8, minlength=256).double()  # the top 8 bits over 256 bins
    assert ((counts - n / 256) ** 2 / (n / 256)).sum().item() / 255 < 1.5
    drop = (u < D._drop_threshold(0.1)).double()
    p = drop.mean().item()
    assert abs(p - 0.1) < 6 * math.sqrt(0.09 / n)
    for lag in (1, 2, 3, 4, 5, 512):  # lanes of one word, neighbouring words, rows apart
        joint = (drop[:-lag] * drop[lag:]).mean().item()
        assert abs(joint - p * p) < 6 * math.sqrt(p * p / n), lag


def test_nearby_seeds_give_unrelated_streams():
    a = D.int16_uniforms(1 << 16, seed=5).double()
    for other in (4, 6, 5 ^ (1 << 40)):
        b = D.int16_uniforms(1 << 16, seed=other).double()
        assert abs(torch.corrcoef(torch.stack([a, b]))[0, 1].item()) < 0.02


def test_dropout_layer_rate_scale_and_reproducibility():
    x = torch.ones(256, 512)
    layer = D.Dropout(0.1).train()
    torch.manual_seed(1)
    y = layer(x)
    kept = y != 0
    assert abs(1 - kept.double().mean().item() - math.ceil(0.1 * 65536) / 65536) < 0.005
    assert torch.allclose(y[kept], torch.full_like(y[kept], D.keep_scale(0.1)))
    torch.manual_seed(1)
    assert torch.equal(layer(x), y)
    assert torch.equal(layer.eval()(x), x)


def test_a_model_built_in_a_seeded_block_depends_on_the_seed_alone():
    from spanbert.dropout import seeded_build

    def build(seed, rank=0, before=0):
        torch.rand(before)  # whatever the process drew before
        with seeded_build(seed, rank):
            layer = nn.Linear(4, 3)
        return layer.weight.detach().clone(), torch.rand(2)  # the weights, then the dropout stream's first draws

    (w1, d1), (w2, d2), (w3, d3) = build(7), build(7, before=5), build(7, rank=1)
    assert torch.equal(w1, w2) and torch.equal(w1, w3)  # the same head on every rank, whatever came before
    assert torch.equal(d1, d2) and not torch.equal(d1, d3)  # a dropout stream per rank, seeded
    assert not torch.equal(build(8)[0], w1)
    torch.manual_seed(0)
    expected = torch.rand(1)
    torch.manual_seed(0)
    with seeded_build(None):  # no seed: nothing is seeded, the process's stream goes on
        pass
    assert torch.equal(torch.rand(1), expected)
