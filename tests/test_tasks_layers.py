"""Layers the task heads share (`spanbert.tasks.layers`): the linear-chain CRF (forward algorithm, gold-path score,
Viterbi) against brute-force enumeration of every tag sequence, and its refusal of an empty sequence. ELMo's
scalar mix and a family's output layer are tested with the heads that use them (test_crf_tagger.py,
test_cloze_finetune.py)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from spanbert.tasks.layers import CRF


def brute_force(crf: CRF, emissions: torch.Tensor, n: int) -> tuple[float, list[int], dict[tuple, float]]:
    """log Z, best path and every path's score of one sequence of length n, by enumeration."""
    K = crf.num_tags
    scores = {}
    for path in itertools.product(range(K), repeat=n):
        s = crf.start[path[0]] + crf.end[path[-1]] + sum(emissions[t, path[t]] for t in range(n))
        s = s + sum(crf.transitions[path[t - 1], path[t]] for t in range(1, n))
        scores[path] = float(s.detach())
    log_z = float(torch.logsumexp(torch.tensor(list(scores.values()), dtype=torch.float64), 0))
    return log_z, list(max(scores, key=scores.get)), scores


def test_crf_matches_brute_force_enumeration():
    g = torch.Generator().manual_seed(0)
    K, lengths = 3, [4, 1, 3, 2]
    crf = CRF(K).double()
    with torch.no_grad():
        for p in crf.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64))
    emissions = torch.randn(len(lengths), max(lengths), K, generator=g, dtype=torch.float64)
    mask = torch.tensor([[t < n for t in range(max(lengths))] for n in lengths])
    tags = torch.randint(0, K, mask.shape, generator=g).masked_fill(~mask, -100)
    with torch.no_grad():
        log_z = crf.log_partition(emissions, mask)
        best = crf.decode(emissions, mask)
        ll = crf.log_likelihood(emissions, tags, mask)
    for i, n in enumerate(lengths):
        z, path, scores = brute_force(crf, emissions[i], n)
        assert math.isclose(float(log_z[i]), z, rel_tol=1e-9)
        assert best[i, :n].tolist() == path and (best[i, n:] == -1).all()
        gold = tuple(tags[i, :n].tolist())
        assert math.isclose(float(ll[i]), scores[gold] - z, rel_tol=1e-9, abs_tol=1e-9)
    # probabilities of all paths sum to one
    _, _, scores = brute_force(crf, emissions[0], 4)
    total = sum(math.exp(s - float(log_z[0])) for s in scores.values())
    assert math.isclose(total, 1.0, rel_tol=1e-9)


def test_crf_rejects_an_empty_sequence():
    from spanbert.errors import SpanBertError

    with pytest.raises(SpanBertError, match="at least one"):
        CRF(2).log_partition(torch.zeros(1, 2, 2), torch.tensor([[False, False]]))
