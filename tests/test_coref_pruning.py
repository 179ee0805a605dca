"""Span pruning and distances (`spanbert.tasks.coref.pruning`): `prune_non_crossing` keeps no crossing pair and
is the reference's greedy choice (property-based, against a plain loop), and the segment distance of a pair is
the clipped difference of the segments its two spans start in."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_coref import tiny_model, toy_batch

from spanbert.tasks.coref.pruning import crossing, prune_non_crossing


def greedy_reference(scores, starts, ends, k):
    """The reference C++ op as a plain loop: best first, skip spans crossing a chosen one, stop at k."""
    chosen = []
    for i in sorted(range(len(scores)), key=lambda i: -scores[i]):
        if len(chosen) == k:
            break
        if not any(crossing(starts[i], ends[i], starts[j], ends[j]) for j in chosen):
            chosen.append(i)
    return sorted(chosen, key=lambda i: (starts[i], ends[i]))


@st.composite
def span_sets(draw):
    spans = draw(
        st.lists(st.tuples(st.integers(0, 25), st.integers(0, 8)), min_size=1, max_size=60, unique_by=lambda t: t)
    )
    spans = sorted({(s, s + w) for s, w in spans})
    scores = draw(
        st.lists(st.floats(-5, 5, allow_nan=False, width=32), min_size=len(spans), max_size=len(spans), unique=True)
    )
    k = draw(st.integers(1, len(spans)))
    chunk = draw(st.sampled_from([None, 1, 3, 8]))
    return spans, scores, k, chunk


@settings(max_examples=150, deadline=None)
@given(span_sets())
def test_pruning_keeps_no_crossing_pair_and_is_the_greedy_choice(case):
    spans, scores, k, chunk = case
    starts = torch.tensor([s for s, _ in spans])
    ends = torch.tensor([e for _, e in spans])
    kept = prune_non_crossing(torch.tensor(scores), starts, ends, k, chunk=chunk).tolist()
    for a in kept:
        for b in kept:
            assert not crossing(spans[a][0], spans[a][1], spans[b][0], spans[b][1])
    assert kept == greedy_reference(scores, starts.tolist(), ends.tolist(), k)
    assert len(kept) <= k
    assert [spans[i] for i in kept] == sorted(spans[i] for i in kept)


def test_segment_distance_is_the_clipped_difference_of_the_start_segments():
    from spanbert.tasks.coref import segment_distance

    model = tiny_model()
    f, batch = toy_batch(model)
    width = batch["input_ids"].shape[1]
    segment_of = {}  # brute force: walk the (S, T) rows
    position = 0
    for s, seg in enumerate(f.segments):
        for _ in seg:
            segment_of[position] = s
            position += 1
    assert len(f.segments) >= 4  # pairs farther apart than the last bucket exist
    starts = torch.arange(f.num_subtokens)
    antecedents = torch.randint(0, f.num_subtokens, (f.num_subtokens, 7), generator=torch.Generator().manual_seed(0))
    got = segment_distance(batch["token_index"], width, starts, antecedents, 3)
    for i in range(f.num_subtokens):
        for j, a in enumerate(antecedents[i].tolist()):
            assert got[i, j] == min(2, max(0, segment_of[i] - segment_of[a]))
