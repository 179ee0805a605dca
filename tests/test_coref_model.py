"""The coreference model (`spanbert.tasks.coref.model`): head attention and decomposed mention scores equal their
explicit forms, the forward pass's shapes, loss and gradients (every parameter, with gradient checkpointing
too), the spans kept, the segment-distance feature acting only through its embedding, and antecedents decoded
into clusters."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_coref import tiny_model, toy_batch

from spanbert.tasks.coref.model import decode_clusters


def test_head_attention_prefix_sums_match_explicit_softmax():
    model = tiny_model()
    x = torch.randn(20, 64)
    starts = torch.tensor([0, 3, 5, 19, 7])
    ends = torch.tensor([0, 9, 5, 19, 18])
    g = model.span_embeddings(x, starts, ends)
    alpha = model.head_attention(x).squeeze(-1)
    for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist())):
        w = alpha[s : e + 1].softmax(0)
        assert torch.allclose(g[i, 128:192], (w[:, None] * x[s : e + 1]).sum(0), atol=1e-5)
        assert torch.equal(g[i, :64], x[s]) and torch.equal(g[i, 64:128], x[e])


@pytest.mark.parametrize("gap", [0.0, 30.0, 40.0, 100.0, 1000.0])
def test_head_attention_is_exact_at_any_logit_gap(gap):
    """Prefix sums of exp(α - max α) lost 0.1 % at a 30-logit gap and returned inf at 40: compare with
    a direct per-span softmax where a few tokens sit ``gap`` logits above (or below) the rest."""
    model = tiny_model()
    with torch.no_grad():  # α_t = x_t[0]: the gap is set through the first feature
        model.head_attention.weight.zero_()
        model.head_attention.weight[0, 0] = 1.0
        model.head_attention.bias.zero_()
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(40, 64, generator=gen, dtype=torch.float64)
    x[:, 0] = torch.randn(40, generator=gen, dtype=torch.float64)
    x[[2, 17, 30], 0] += gap  # high tokens before, inside and after the spans below
    x[[25, 26], 0] -= gap  # and a low run
    x = x.float().requires_grad_(True)
    spans = [(0, 0), (3, 9), (3, 16), (15, 20), (18, 29), (25, 26), (24, 27), (31, 39), (30, 39), (2, 2)]
    starts = torch.tensor([s for s, _ in spans])
    ends = torch.tensor([e for _, e in spans])
    g = model.span_embeddings(x, starts, ends)
    alpha = x.double()[:, 0]  # the head-attention logits, exactly
    for i, (s, e) in enumerate(spans):
        ref = (alpha[s : e + 1].softmax(0)[:, None] * x.double()[s : e + 1]).sum(0)
        assert torch.allclose(g[i, 128:192].double(), ref, rtol=1e-5, atol=1e-6), (gap, s, e)
    table = model.span_width_embeddings.weight
    fast = model.mention_scores(x, starts, ends, table)
    direct = model.mention_scorer(model.span_embeddings(x, starts, ends, table)).squeeze(-1)
    assert torch.allclose(fast, direct, atol=1e-5)
    fast.sum().backward()
    assert torch.isfinite(x.grad).all() and torch.isfinite(model.head_attention.weight.grad).all()


def test_decomposed_mention_scores_equal_the_ffnn_on_span_embeddings():
    model = tiny_model()
    x = torch.randn(30, 64)
    starts = torch.tensor([0, 3, 5, 29, 7, 10])
    ends = torch.tensor([0, 9, 5, 29, 18, 28])
    table = model.span_width_embeddings.weight
    direct = model.mention_scorer(model.span_embeddings(x, starts, ends, table)).squeeze(-1)
    assert torch.allclose(model.mention_scores(x, starts, ends, table), direct, atol=1e-5)


def test_forward_shapes_loss_and_gradients():
    model = tiny_model(singletons="true")
    f, batch = toy_batch(model)
    out = model(**batch)
    k, K1 = out["antecedent_scores"].shape
    assert out["antecedents"].shape == (k, K1 - 1) and out["top_starts"].shape == (k,)
    assert k == int(f.num_subtokens * 0.4)
    assert (out["antecedent_scores"][:, 0] == 0).all()  # dummy antecedent
    assert torch.isfinite(out["loss"]) and out["loss"] > 0
    out["loss"].backward()
    assert model.bert.embeddings.word_embeddings.weight.grad.abs().sum() > 0
    assert model.pair_scorer[0].weight.grad.abs().sum() > 0
    assert model.refine_gate.weight.grad.abs().sum() > 0  # the higher-order round is in the graph
    # antecedents always come earlier in the (start, end) order of the kept spans
    ante, valid = out["antecedents"], out["antecedent_scores"][:, 1:] > -1e3
    assert (ante[valid] < torch.arange(k)[:, None].expand_as(ante)[valid]).all()


@pytest.mark.parametrize("depth, singletons", [(1, "false"), (1, "true"), (2, "false"), (2, "true")])
def test_every_parameter_gets_a_gradient(depth, singletons):
    """DDP stops on a parameter outside the graph: with one inference round the refinement gate is
    not built at all, and every other parameter takes part in the loss."""
    model = tiny_model(coref_depth=depth, singletons=singletons)
    assert (model.refine_gate is None) == (depth == 1)
    _, batch = toy_batch(model)
    model(**batch)["loss"].backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None]
    assert not missing, missing


def test_gradient_checkpointing_gives_the_same_loss():
    f, batch = toy_batch(tiny_model())
    plain = tiny_model()(**batch)["loss"]
    ckpt_model = tiny_model(gradient_checkpointing=True)
    ckpt_model.train()
    ckpt = ckpt_model(**batch)["loss"]
    assert torch.allclose(plain, ckpt)
    ckpt.backward()


def test_decode_links_antecedents_into_clusters():
    out = {
        "top_starts": torch.tensor([0, 2, 4, 6]),
        "top_ends": torch.tensor([0, 3, 4, 6]),
        "top_mention_scores": torch.tensor([1.0, 1.0, 1.0, -1.0]),
        "antecedents": torch.tensor([[0, 0], [0, 0], [0, 1], [2, 1]]),
        "antecedent_scores": torch.tensor([[0, -1e4, -1e4], [0, -1.0, -1e4], [0, -2.0, 3.0], [0, -1.0, -1.0]]),
    }
    word_map = np.arange(8) // 2  # two sub-tokens per word
    assert decode_clusters(out, word_map, singletons=False) == [[(1, 1), (2, 2)]]
    assert decode_clusters(out, word_map, singletons=True) == [[(0, 0)], [(1, 1), (2, 2)]]


def test_top_spans_are_capped():
    model = tiny_model(max_top_spans=3).eval()
    _, batch = toy_batch(model)
    assert model(**batch)["top_starts"].shape == (3,)


def test_segment_distance_changes_scores_only_through_its_embedding():
    """A model with the feature whose own weights contribute nothing scores exactly as the model
    without it; changing one row of its embedding changes the fine scores of exactly the pairs at
    that segment distance, and nothing before the fine scorer (kept spans, antecedents)."""
    from spanbert.tasks.coref import segment_distance

    without = tiny_model(use_segment_distance=False, coref_depth=1).eval()
    with_ = tiny_model(use_segment_distance=True, coref_depth=1).eval()
    assert without.segment_distance_embeddings is None
    state = without.state_dict()
    w = state["pair_scorer.0.weight"]  # (hidden, 3D + 3F)
    fs = with_.config.feature_size
    state["pair_scorer.0.weight"] = torch.cat([w, torch.zeros(w.shape[0], fs)], 1)  # the 4th feature: no effect
    state["segment_distance_embeddings.weight"] = with_.segment_distance_embeddings.weight.detach()
    with_.load_state_dict(state)
    f, batch = toy_batch(with_)
    with torch.no_grad():
        a, b = without(**batch), with_(**batch)
        assert torch.equal(a["antecedents"], b["antecedents"]) and torch.equal(a["top_starts"], b["top_starts"])
        assert torch.allclose(a["antecedent_scores"], b["antecedent_scores"])
        with_.pair_scorer[0].weight[:, -fs:].normal_(generator=torch.Generator().manual_seed(1))
        before = with_(**batch)
        with_.segment_distance_embeddings.weight[1] += 1.0
        after = with_(**batch)
    assert torch.equal(before["antecedents"], after["antecedents"])
    width = batch["input_ids"].shape[1]
    dist = segment_distance(batch["token_index"], width, before["top_starts"], before["antecedents"], 3)
    changed = ~torch.isclose(before["antecedent_scores"][:, 1:], after["antecedent_scores"][:, 1:])
    real = before["antecedent_scores"][:, 1:] > -1e3  # pairs with a real antecedent
    assert (dist[real] == 1).any() and (dist[real] != 1).any()
    assert torch.equal(changed[real], dist[real] == 1)
