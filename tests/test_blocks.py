"""Blocks (`spanbert.blocks`): a corpus's token stream cut into pre-training sequences. Whole lines packed up to
the block length, cut only at word starts; the fixed cuts that stop at a document boundary; NSP segments that end
at word boundaries; the held-out documents taken from the end of the corpus."""

from __future__ import annotations

import numpy as np
import pytest
from test_preprocess import REAL

from spanbert.blocks import block_ends_mid_word, held_out_documents, sentence_blocks, single_segment_blocks
from spanbert.corpus import TokenCorpus
from spanbert.dataset import PretrainDataset
from spanbert.errors import SpanBertError
from spanbert.preprocess import preprocess
from spanbert.tokenization import train_tokenizer


def check_sentence_blocks(c: TokenCorpus, blocks: np.ndarray, max_tokens: int, doc_bounds=None) -> dict[str, int]:
    """The properties of `sentence_blocks` on a whole corpus; returns counts for the caller to bound."""
    doc_bounds = c.doc_bounds if doc_bounds is None else doc_bounds
    lens = blocks[:, 1] - blocks[:, 0]
    assert (lens >= 1).all() and (lens <= max_tokens).all()
    # every token of every document lies in exactly one block, in order (nothing dropped)
    assert blocks[0, 0] == doc_bounds[0, 0] and blocks[-1, 1] == doc_bounds[-1, 1]
    assert (blocks[1:, 0] == blocks[:-1, 1]).all() and lens.sum() == (doc_bounds[:, 1] - doc_bounds[:, 0]).sum()
    doc_of = np.searchsorted(doc_bounds[:, 0], blocks[:, 0], side="right") - 1
    assert (blocks[:, 1] <= doc_bounds[doc_of, 1]).all(), "a block crosses a document boundary"
    # line starts of the corpus, document starts included; a block starts at a line start unless it
    # continues a line longer than a block
    line_starts = np.union1d(c.para_starts, doc_bounds[:, 0])
    line_of_start = np.searchsorted(line_starts, blocks[:, 0], side="right") - 1
    line_end = np.append(line_starts, c.num_tokens)[line_of_start + 1]
    line_end = np.minimum(line_end, doc_bounds[doc_of, 1])
    at_line = line_starts[line_of_start] == blocks[:, 0]
    long_line = line_end - line_starts[line_of_start] > max_tokens
    assert (at_line | long_line).all(), "a block starts inside a line that fits a block"
    # greedy: the next line (same document, whole, not longer than a block) did not fit
    nxt = np.flatnonzero(np.isin(blocks[1:, 0], line_starts) & (doc_of[1:] == doc_of[:-1])) + 1
    next_line = np.append(line_starts, c.num_tokens)[np.searchsorted(line_starts, blocks[nxt, 0]) + 1]
    nxt_line_end = np.minimum(next_line, doc_bounds[doc_of[nxt], 1])
    assert (nxt_line_end - blocks[nxt - 1, 0] > max_tokens).all(), "a line that fits was left for the next block"
    mid = block_ends_mid_word(blocks, doc_bounds, c.tokens)
    return {"blocks": len(blocks), "mid_word_ends": int(mid.sum()), "long_line_starts": int((~at_line).sum())}


def test_sentence_blocks_pack_whole_lines(corpus_dir):
    c = TokenCorpus(corpus_dir)
    ds = PretrainDataset(c, max_seq_length=32, seed=1)  # block_packing="sentences" is the default
    assert ds.block_packing == "sentences"
    stats = check_sentence_blocks(c, ds.blocks, 30)
    assert stats["mid_word_ends"] == 0
    assert stats["long_line_starts"] > 0  # the corpus has lines longer than 30 tokens: they were split
    # the old blocks of the same corpus do end inside words (so the check above can fail)
    fixed = PretrainDataset(c, max_seq_length=32, seed=1, block_packing="fixed")
    assert block_ends_mid_word(fixed.blocks, c.doc_bounds, c.tokens).sum() > 0
    item = ds[3]
    ids = item["input_ids"]
    assert ids[0] == ds.cls_id and ids[-1] == ds.sep_id and len(ids) <= 32


def test_fixed_packing_keeps_the_old_blocks(corpus_dir):
    c = TokenCorpus(corpus_dir)
    ds = PretrainDataset(c, max_seq_length=32, seed=1, block_packing="fixed")
    assert np.array_equal(ds.blocks, single_segment_blocks(c.doc_bounds, 30))
    with pytest.raises(SpanBertError, match="block_packing: found 'words', expected one of: sentences, fixed"):
        PretrainDataset(c, max_seq_length=32, block_packing="words")


def fake_tokens(word_starts: np.ndarray):
    return lambda s, e: (np.zeros(e - s, np.int64), word_starts[s:e])


def test_long_lines_split_at_word_starts():
    # one document of two lines: [0, 19) and [19, 23); words of 1-3 pieces; blocks of 8 tokens
    ws = np.zeros(23, dtype=bool)
    ws[[0, 2, 5, 6, 7, 10, 12, 13, 15, 18, 19, 21]] = True
    blocks = sentence_blocks(np.array([[0, 23]]), np.array([0, 19]), fake_tokens(ws), 8)
    # the long line's pieces end at word starts, each the longest whole-word prefix that fits; its
    # last piece [15, 19) is packed with the next line [19, 23)
    assert blocks.tolist() == [[0, 7], [7, 15], [15, 23]]
    # a word longer than a block (positions 1..11 continue word 0) is the one cut inside a word
    ws = np.zeros(14, dtype=bool)
    ws[[0, 12]] = True
    blocks = sentence_blocks(np.array([[0, 14]]), np.array([0]), fake_tokens(ws), 5)
    assert blocks.tolist() == [[0, 5], [5, 10], [10, 14]]
    assert block_ends_mid_word(blocks, np.array([[0, 14]]), fake_tokens(ws)).tolist() == [True, True, False]
    # lines are never merged across documents, and a document always starts a block
    ws = np.ones(10, dtype=bool)
    blocks = sentence_blocks(np.array([[0, 3], [3, 6], [6, 10]]), np.array([0, 1, 3, 6, 8]), fake_tokens(ws), 8)
    assert blocks.tolist() == [[0, 3], [3, 6], [6, 10]]


def test_single_segment_blocks_stop_at_document_boundaries(corpus_dir):
    c = TokenCorpus(corpus_dir)
    ds = PretrainDataset(c, max_seq_length=32, seed=1, block_packing="fixed")
    doc_of = np.searchsorted(c.doc_bounds[:, 0], ds.blocks[:, 0], side="right") - 1
    assert (ds.blocks[:, 1] <= c.doc_bounds[doc_of, 1]).all()  # never crosses a document boundary
    assert (ds.blocks[:, 1] - ds.blocks[:, 0] <= 30).all()
    # the blocks tile every document exactly
    assert (ds.blocks[:, 1] - ds.blocks[:, 0]).sum() == c.num_tokens
    item = ds[3]
    ids = item["input_ids"]
    assert ids[0] == ds.cls_id and ids[-1] == ds.sep_id and len(ids) <= 32
    assert (item["token_type_ids"] == 0).all()


def test_nsp_segments_end_at_word_boundaries(corpus_dir):
    c = TokenCorpus(corpus_dir)
    kw = dict(max_seq_length=24, nsp=True, seed=5, short_seq_prob=0.1)
    words = PretrainDataset(c, **kw).pairs  # block_packing="sentences"
    fixed = PretrainDataset(c, block_packing="fixed", **kw).pairs  # Google's token-level cuts
    assert abs(words[:, 4].mean() - 0.5) <= 5 * 0.5 / np.sqrt(len(words))
    ws = np.append(c.tokens(0, c.num_tokens)[1], True)  # (n+1,) a token past the end starts a "word"
    ws[c.doc_bounds[:, 1]] = True  # a document end is a word end
    ws[c.doc_bounds[:, 0]] = True

    def cut_mid_word(pairs):  # segment starts that are not word starts, ends before a "##" piece
        return int((~ws[pairs[:, [0, 2]]]).sum() + (~ws[pairs[:, [1, 3]]]).sum())

    assert cut_mid_word(fixed) > 0 and cut_mid_word(words) == 0
    assert ((words[:, 1] - words[:, 0]) + (words[:, 3] - words[:, 2]) <= 21).all()


@pytest.mark.realdata
@pytest.mark.slow
def test_sentence_blocks_on_a_real_corpus_file(tmp_path):
    """One whole corpus file (Wikipedia, 1,191 articles, ~4 M tokens): the block properties hold."""
    src = REAL / "enwiki-2015-00.txt.gz"
    if not src.is_file():
        pytest.skip(f"pre-training corpus not found at {REAL}")
    train_tokenizer([src], 8000, tmp_path / "tok", show_progress=False)
    c = TokenCorpus(preprocess(src, tmp_path / "tok", tmp_path / "c", num_workers=2, progress=False))
    assert c.num_docs == 1191  # SOURCE.md
    for length in (512, 128):
        ds = PretrainDataset(c, max_seq_length=length, seed=0)
        stats = check_sentence_blocks(c, ds.blocks, length - 2)
        # no word of this corpus is longer than 126 pieces, so no block ends inside a word
        assert stats["mid_word_ends"] == 0, (length, stats)
        fixed = single_segment_blocks(c.doc_bounds, length - 2)
        assert block_ends_mid_word(fixed, c.doc_bounds, c.tokens).sum() > 100  # what the old blocks did
        nsp = PretrainDataset(c, max_seq_length=length, mode="nsp", seed=0, short_seq_prob=0.1).pairs
        ws = np.append(c.tokens(0, c.num_tokens)[1], True)
        ws[c.doc_bounds[:, 1]] = True
        assert ws[nsp[:, :4]].all(), "an NSP segment starts or ends inside a word"


def test_held_out_documents_takes_the_last_documents_by_tokens():
    bounds = np.array([[0, 10], [10, 20], [20, 30], [30, 130]])  # the last document is 100 of 130 tokens
    assert held_out_documents(bounds, 0.05) == 3  # one document at least, the last one
    assert held_out_documents(bounds, 0.9) == 1  # 0.9 * 130 = 117 tokens: the last three
    assert held_out_documents(bounds, 0.99) == 1  # one document is always kept for training
    assert held_out_documents(bounds, 0.5, min_train_docs=2, min_eval_docs=2) == 2
    assert held_out_documents(bounds[:1], 0.5) == 1  # one document: nothing held out


# ---------------------------------------------------------------------------------------------
# The vectorised packing (issue 57) against the loop it replaced, kept here as the reference


def _reference_sentence_blocks(doc_bounds, line_starts, tokens, max_tokens):
    """`sentence_blocks` as it was before issue 57: a Python loop over every document, line and piece."""
    line_starts = np.asarray(line_starts, dtype=np.int64)
    rows = []
    for ds, de in np.asarray(doc_bounds, dtype=np.int64).tolist():
        if de <= ds:
            continue
        lo, hi = np.searchsorted(line_starts, [ds, de])
        cuts = line_starts[lo:hi].tolist()
        if not cuts or cuts[0] != ds:
            cuts.insert(0, ds)
        cuts.append(de)
        cur_start = cur_end = -1
        for a, b in zip(cuts[:-1], cuts[1:]):
            if b - a > max_tokens:
                starts = a + np.flatnonzero(tokens(a, b)[1])
                pieces, p = [], a
                while b - p > max_tokens:
                    k = int(np.searchsorted(starts, p + max_tokens, side="right")) - 1
                    q = int(starts[k]) if k >= 0 and starts[k] > p else p + max_tokens
                    pieces.append((p, q))
                    p = q
                pieces.append((p, b))
            else:
                pieces = ((a, b),)
            for pa, pb in pieces:
                if cur_start >= 0 and pb - cur_start <= max_tokens:
                    cur_end = pb
                    continue
                if cur_start >= 0:
                    rows.append((cur_start, cur_end))
                cur_start, cur_end = pa, pb
        if cur_start >= 0:
            rows.append((cur_start, cur_end))
    return np.asarray(rows, dtype=np.int64).reshape(-1, 2)


@pytest.mark.parametrize("seed", range(12))
def test_vectorised_packing_equals_the_loop(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 4000))
    ws = rng.random(n) < rng.uniform(0.05, 0.95)  # sparse word starts make words longer than a block
    cuts = np.unique(rng.integers(0, n, int(rng.integers(1, 60))))
    bounds = np.unique(np.concatenate([[0, n], cuts]))
    docs = np.stack([bounds[:-1], bounds[1:]], axis=1)
    if seed % 3 == 0:  # a subset of the documents, with gaps between them
        docs = docs[rng.random(len(docs)) < 0.6]
    lines = np.unique(rng.integers(0, n, int(rng.integers(0, n // 3 + 2))))
    if seed % 4 == 1:
        lines = np.zeros(0, np.int64)  # no paragraph marks at all: each document is one line

    def tokens(a, b):
        return np.zeros(b - a, np.int64), ws[a:b]

    for max_tokens in (1, 2, 3, 7, 30, 200, 5000):
        expected = _reference_sentence_blocks(docs, lines, tokens, max_tokens)
        assert np.array_equal(sentence_blocks(docs, lines, tokens, max_tokens), expected), max_tokens
