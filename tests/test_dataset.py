"""The pre-training dataset (`spanbert.dataset`): each block or NSP pair of a corpus masked when it is read,
reproducibly from (seed, epoch, index) whatever thread reads it; items that hold the corpus's tokens; NSP pairs
with half random next segments; a dataset restricted to a range of documents."""

from __future__ import annotations

import numpy as np
import pytest
from test_pretrain import corpus  # noqa: F401 - the module-scoped tiny corpus fixture

from spanbert.corpus import TokenCorpus
from spanbert.dataset import PretrainDataset
from spanbert.errors import SpanBertError
from spanbert.masking import IGNORE_INDEX, MaskingConfig


def test_masks_are_reproducible_per_seed_epoch_index(corpus_dir):
    ds = PretrainDataset(corpus_dir, max_seq_length=64, seed=3)
    a = ds[5]["input_ids"]
    assert np.array_equal(a, PretrainDataset(corpus_dir, max_seq_length=64, seed=3)[5]["input_ids"])
    ds.set_epoch(1)
    assert not np.array_equal(a, ds[5]["input_ids"])  # dynamic masking: another epoch, another mask
    ds.set_epoch(0)
    assert np.array_equal(a, ds[5]["input_ids"])


def test_example_generator_depends_on_seed_epoch_index_only(corpus_dir):
    ds = PretrainDataset(corpus_dir, max_seq_length=64, seed=3)
    first = ds.example_rng(5, epoch=0).random(8)
    ds.example_rng(7).random(3)  # another example in between changes nothing
    assert np.array_equal(ds.example_rng(5, epoch=0).random(8), first)
    assert not np.array_equal(ds.example_rng(6, epoch=0).random(8), first)
    assert not np.array_equal(ds.example_rng(5, epoch=1).random(8), first)
    assert not np.array_equal(PretrainDataset(corpus_dir, max_seq_length=64, seed=4).example_rng(5, 0).random(8), first)
    # threads reading the same dataset (each thread has its own bit generator) get the same masks
    from concurrent.futures import ThreadPoolExecutor

    idx = list(range(min(len(ds), 24))) * 2
    with ThreadPoolExecutor(2) as pool:
        threaded = list(pool.map(lambda i: ds[i]["input_ids"], idx))
    assert all(np.array_equal(a, ds[i]["input_ids"]) for i, a in zip(idx, threaded))


def test_example_generator_is_the_dataset_s_generator(corpus_dir):
    """`example_generator(seed, epoch, index)` (the static masks' documented seed) draws what the
    dataset's per-thread `example_rng` draws."""
    from spanbert.dataset import example_generator

    ds = PretrainDataset(corpus_dir, max_seq_length=32, seed=7)
    for epoch, index in ((0, 0), (3, 5), (1, 17)):
        a = ds.example_rng(index, epoch=epoch).random(4)
        np.testing.assert_array_equal(a, example_generator(7, epoch, index).random(4))
    assert not np.array_equal(example_generator(7, 0, 1).random(4), example_generator(7, 1, 0).random(4))


def test_items_hold_the_corpus_tokens(corpus_dir):
    # the dataset reads blocks through its own views of the memory maps: same tokens as TokenCorpus.tokens
    c = TokenCorpus(corpus_dir)
    ds = PretrainDataset(c, max_seq_length=64, seed=2)
    for i in range(len(ds)):
        start, end = ds.blocks[i].tolist()
        ids, _ = c.tokens(start, end)
        it = ds[i]
        original = np.where(it["labels"] != IGNORE_INDEX, it["labels"], it["input_ids"])
        assert np.array_equal(original, np.concatenate([[ds.cls_id], ids, [ds.sep_id]])), i


def test_nsp_pairs(corpus_dir):
    c = TokenCorpus(corpus_dir)
    ds = PretrainDataset(c, max_seq_length=48, nsp=True, seed=5, short_seq_prob=0.1)
    pairs = ds.pairs
    labels = pairs[:, 4]
    n = len(labels)
    # 50/50 labels: SE of the share is 0.5/sqrt(n); allow 5 SE (n ~ 150 -> ±0.2 at worst)
    assert abs(labels.mean() - 0.5) <= 5 * 0.5 / np.sqrt(n)
    doc = lambda p: int(np.searchsorted(c.doc_bounds[:, 0], p, side="right") - 1)  # noqa: E731
    for a0, a1, b0, b1, label in pairs.tolist():
        assert (a1 - a0) + (b1 - b0) <= 45 and a1 > a0 and b1 > b0
        assert doc(a0) == doc(a1 - 1) and doc(b0) == doc(b1 - 1)
        if label == 0:  # "next" really is next: same document, B follows A
            assert doc(a0) == doc(b0) and b0 >= a1
        else:
            assert doc(a0) != doc(b0)
    item = ds[0]
    tt = item["token_type_ids"]
    assert tt[0] == 0 and tt[-1] == 1 and (np.diff(tt) >= 0).all()
    assert (item["input_ids"] == ds.sep_id).sum() >= 2 and int(item["next_sentence_label"]) == labels[0]


def test_dataset_restricted_to_documents(corpus_dir):
    from spanbert.blocks import held_out_documents
    from spanbert.corpus import TokenCorpus
    from spanbert.dataset import PretrainDataset

    tc = TokenCorpus(corpus_dir)
    split = held_out_documents(tc.doc_bounds, 0.2, 2, 2)
    assert 2 <= split <= tc.num_docs - 2
    lo_tok, hi_tok = int(tc.doc_bounds[split, 0]), int(tc.doc_bounds[-1, 1])
    single = PretrainDataset(tc, max_seq_length=32, documents=(split, tc.num_docs))
    assert (single.blocks[:, 0] >= lo_tok).all() and (single.blocks[:, 1] <= hi_tok).all()
    nsp = PretrainDataset(tc, max_seq_length=32, mode="nsp", documents=(0, split))
    assert (nsp.pairs[:, 4] == 1).any()  # some random next segments, all from documents 0..split-1
    assert (nsp.pairs[:, [1, 3]] <= lo_tok).all()
    with pytest.raises(SpanBertError, match="outside the corpus"):
        PretrainDataset(tc, max_seq_length=32, documents=(0, tc.num_docs + 1))


@pytest.mark.parametrize("system", ["named_entity", "noun_phrase"])
def test_linguistic_schemes_need_candidates(corpus, system):  # noqa: F811
    _, _, tok, out = corpus
    with pytest.raises(SpanBertError, match="candidate"):
        PretrainDataset(out, tok, max_seq_length=48, masking=MaskingConfig(scheme=system))


def test_dataset_lengths_are_the_items_lengths(corpus):  # noqa: F811
    for mode in ("single", "nsp"):
        ds = PretrainDataset(corpus[3], max_seq_length=64, mode=mode, seed=0)
        lengths = ds.lengths()
        assert lengths.shape == (len(ds),) and lengths.max() <= 64
        assert [len(ds[i]["input_ids"]) for i in range(len(ds))] == lengths.tolist()
