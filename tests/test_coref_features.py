"""From documents to model inputs (`spanbert.tasks.coref.features`): segments that end at a sentence end, else at
a word end; sub-token features whose gold spans map back to the gold words and lie among the candidate spans;
a training item that is a random run of segments, reproducible per epoch."""

from __future__ import annotations

import numpy as np
import torch
from test_coref import CharTokenizer, toy_doc

from spanbert.tasks.coref.features import CorefDataset, candidate_spans, featurize, split_into_segments


def test_segments_end_at_sentence_then_word_ends():
    sentence_end = np.array([0, 0, 1, 0, 0, 0, 0, 1, 0, 1], bool)
    word_end = np.array([1, 0, 1, 1, 0, 1, 0, 1, 1, 1], bool)
    segs = split_into_segments(10, 4, sentence_end, word_end)
    assert segs == [(0, 3), (3, 6), (6, 10)]  # [3, 7) holds no sentence end: cut after word end 5
    assert split_into_segments(3, 2, np.zeros(3, bool), np.zeros(3, bool)) == [(0, 2), (2, 3)]  # one long word


def test_featurize_segments_and_gold_spans():
    doc = toy_doc()
    f = featurize(doc, CharTokenizer(), max_seq_length=12)
    assert all(len(s) <= 10 for s in f.segments)
    assert sum(len(s) for s in f.segments) == f.num_subtokens == len(f.word_map)
    # gold sub-token spans map back to the gold word spans
    back = sorted(zip(f.word_map[f.gold_starts].tolist(), f.word_map[f.gold_ends].tolist()))
    assert back == sorted(m for c in doc.clusters for m in c)
    starts, ends = candidate_spans(f.sentence_map, f.word_map, 30)
    assert (f.sentence_map[starts] == f.sentence_map[ends]).all()
    assert (ends - starts < 30).all()
    gold = set(zip(f.gold_starts.tolist(), f.gold_ends.tolist()))
    assert gold <= set(zip(starts.tolist(), ends.tolist()))


def test_training_cuts_a_random_run_of_segments():
    f = featurize(toy_doc(12), CharTokenizer(), max_seq_length=12)
    ds = CorefDataset([f], 30, 0, 2, 3, max_training_segments=2, seed=1)
    batches = []
    for epoch in range(6):
        ds.set_epoch(epoch)
        batches.append(ds[0])
    assert all(b["input_ids"].shape[0] == 2 for b in batches)
    assert len({tuple(b["input_ids"][0].tolist()) for b in batches}) > 1  # the run changes with the epoch
    ds.set_epoch(0)
    assert torch.equal(ds[0]["input_ids"], batches[0]["input_ids"])  # and is reproducible
    for b in batches:
        n = b["token_index"].numel()
        assert ((b["gold_starts"] >= 0) & (b["gold_ends"] < n)).all()
