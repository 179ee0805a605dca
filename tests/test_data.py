"""Pre-training data: preprocess -> memory-mapped shards -> blocks / NSP pairs -> masked batches."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from spanbert.blocks import block_ends_mid_word, sentence_blocks, single_segment_blocks
from spanbert.collate import collate_pretrain, pretrain_dataloader
from spanbert.corpus import TokenCorpus, has_tokenizer, is_preprocessed, tokenizer_dir_of
from spanbert.dataset import PretrainDataset
from spanbert.errors import DataError, SpanBertError
from spanbert.masking import IGNORE_INDEX
from spanbert.preprocess import builtin_corpus, main, preprocess
from spanbert.tokenization import train_tokenizer

REAL = Path(__file__).resolve().parents[1] / "../shared/data/pretrain-corpus"

WORDS = (
    "the Denver Broncos won a game in 2016 and fans celebrated loudly while analysts wrote long reports "
    "about defence offence quarterbacks stadiums weather tickets résumé café naïve"
).split()


def synthetic_docs(n_docs=40, seed=0):
    rng = np.random.default_rng(seed)
    docs = []
    for d in range(n_docs):
        paras = []
        for _ in range(int(rng.integers(1, 6))):
            n = int(rng.integers(5, 80))
            paras.append(f"Doc{d} " + " ".join(rng.choice(WORDS, n)) + ".")
        docs.append(paras)
    return docs


def write_txt(path: Path, docs) -> Path:
    path.write_text("\n\n".join("\n".join(p) for p in docs) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tok")
    texts = [" ".join(p) for p in synthetic_docs(40)]
    train_tokenizer(None, 120, out, texts=texts, show_progress=False)
    return out


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory, tok_dir):
    tmp = tmp_path_factory.mktemp("corpus")
    src = write_txt(tmp / "a.txt", synthetic_docs(40))
    return preprocess(src, tok_dir, tmp / "out", num_workers=1, progress=False)


def test_preprocess_arrays_match_the_tokenizer(tmp_path, tok_dir):
    docs = synthetic_docs(12, seed=1)
    write_txt(tmp_path / "a.txt", docs[:4])
    with gzip.open(tmp_path / "b.txt.gz", "wt", encoding="utf-8") as f:
        f.write("\n\n".join("\n".join(p) for p in docs[4:8]))
    (tmp_path / "c.jsonl").write_text("".join(json.dumps({"text": "\n".join(p)}) + "\n" for p in docs[8:]))
    out = preprocess(
        [tmp_path / "a.txt", tmp_path / "b.txt.gz", tmp_path / "c.jsonl"],
        tok_dir,
        tmp_path / "out",
        num_workers=1,
        progress=False,
    )
    c = TokenCorpus(out)
    assert c.num_docs == 12 and len(c.para_starts) == sum(len(p) for p in docs)
    tok = c.tokenizer
    for (s, e), paras in zip(c.doc_bounds, docs):
        ids, ws = c.tokens(int(s), int(e))
        want = np.concatenate([tok.encode(p).ids for p in paras])
        assert ids.tolist() == want.tolist()
        assert ws.tolist() == tok.word_starts_of(want).tolist()
    assert c.unigram_counts().sum() == c.num_tokens


def test_one_doc_per_line(tmp_path, tok_dir):
    (tmp_path / "a.txt").write_text("first doc here\nsecond doc\n\nthird doc\n", encoding="utf-8")
    c = TokenCorpus(preprocess(tmp_path / "a.txt", tok_dir, tmp_path / "o", one_doc_per_line=True, progress=False))
    assert c.num_docs == 3


def test_1_and_4_workers_and_shards_give_identical_arrays(tmp_path, tok_dir):
    src = write_txt(tmp_path / "a.txt", synthetic_docs(60, seed=2))
    kw = dict(progress=False, chunk_chars=2000, shard_tokens=3000)
    a = TokenCorpus(preprocess(src, tok_dir, tmp_path / "w1", num_workers=1, **kw))
    b = TokenCorpus(preprocess(src, tok_dir, tmp_path / "w4", num_workers=4, **kw))
    assert len(a.meta["shards"]) > 1
    assert a.meta["shards"] == b.meta["shards"]
    assert np.array_equal(a.doc_bounds, b.doc_bounds) and np.array_equal(a.para_starts, b.para_starts)
    for s, e in a.doc_bounds:
        for x, y in zip(a.tokens(int(s), int(e)), b.tokens(int(s), int(e))):
            assert np.array_equal(x, y)
    assert np.array_equal(a.unigram_counts(), b.unigram_counts())


def test_bad_input_is_reported_with_file_and_line(tmp_path, tok_dir):
    bad = tmp_path / "latin.txt"
    bad.write_bytes("good line\n\nstill good\ncaf\xe9 au lait\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"latin.txt:4: not UTF-8"):
        preprocess(bad, tok_dir, tmp_path / "o1", progress=False)
    assert not (tmp_path / "o1").exists()  # nothing that looks complete
    js = tmp_path / "x.jsonl"
    js.write_text('{"text": "ok"}\n{not json}\n')
    with pytest.raises(DataError, match=r"x.jsonl:2: not valid JSON"):
        preprocess(js, tok_dir, tmp_path / "o2", progress=False)
    js.write_text('{"text": "ok"}\n{"body": "no text"}\n')
    with pytest.raises(DataError, match=r"x.jsonl:2: expected a JSON object with a string field 'text'"):
        preprocess(js, tok_dir, tmp_path / "o3", progress=False)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n   \n")
    with pytest.raises(DataError, match="empty corpus"):
        preprocess(empty, tok_dir, tmp_path / "o4", progress=False)
    with pytest.raises(SpanBertError, match="does not exist"):
        preprocess(tmp_path / "missing.txt", tok_dir, tmp_path / "o5", progress=False)
    with pytest.raises(SpanBertError, match="not a preprocessed corpus"):
        TokenCorpus(tmp_path)


def test_candidates_need_spacy_with_an_install_hint(tmp_path, tok_dir):
    try:
        import spacy  # noqa: F401

        pytest.skip("spaCy is installed: the missing-extra message cannot be shown")
    except ImportError:
        pass
    src = write_txt(tmp_path / "a.txt", synthetic_docs(2))
    with pytest.raises(SpanBertError, match=r"pip install 'spanbert\[spacy\]'.*spacy download en_core_web_sm"):
        preprocess(src, tok_dir, tmp_path / "o", candidates="entity", progress=False)


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


def test_dataloader_workers_give_the_same_masks(corpus_dir):
    ds = PretrainDataset(corpus_dir, max_seq_length=64, seed=4)
    ds.set_epoch(2)
    loader = pretrain_dataloader(ds, batch_size=4, shuffle=False, num_workers=2, max_predictions=12)
    for epoch in (2, 3):  # persistent workers must see set_epoch of the main process
        ds.set_epoch(epoch)
        first = next(iter(loader))
        direct = collate_pretrain([ds[i] for i in range(4)], max_predictions=12)
        for k in direct:
            assert torch.equal(first[k], direct[k]), (epoch, k)


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


def test_collate_matches_the_batch_table(corpus_dir):
    ds = PretrainDataset(corpus_dir, max_seq_length=64, seed=6)
    items = [ds[i] for i in range(6)]
    b = collate_pretrain(items)
    B, T = b["input_ids"].shape
    assert B == 6 and T == max(len(it["input_ids"]) for it in items)
    lens = [len(it["input_ids"]) for it in items]
    if min(lens) < T:
        assert b["attention_mask"].sum(1).tolist() == lens
    labels = torch.full((B, T), IGNORE_INDEX)
    for i, it in enumerate(items):
        labels[i, : len(it["labels"])] = torch.from_numpy(it["labels"])
    flat = labels.view(-1)
    assert torch.equal(flat[b["mlm_positions"]], b["mlm_labels"])
    assert (b["mlm_labels"] != IGNORE_INDEX).all()
    assert torch.equal(flat[b["sbo_positions"]], b["sbo_labels"])
    # external boundaries are observed tokens of the same row, on either side of the target
    assert (flat[b["sbo_left"]] == IGNORE_INDEX).all() and (flat[b["sbo_right"]] == IGNORE_INDEX).all()
    assert (b["sbo_left"] < b["sbo_positions"]).all() and (b["sbo_positions"] < b["sbo_right"]).all()
    assert torch.equal(b["sbo_positions"] - b["sbo_left"] - 1, b["sbo_rel"])
    assert (b["sbo_left"] // T == b["sbo_positions"] // T).all()
    # fixed shapes: exactly k entries per sequence, padding entries ignored
    k = 20
    f = collate_pretrain(items, max_predictions=k, pad_to=64)
    assert f["input_ids"].shape == (6, 64) and f["mlm_positions"].shape == (6 * k,)
    assert f["sbo_rel"].shape == (6 * k,)
    kept = f["mlm_labels"] != IGNORE_INDEX
    assert torch.equal(
        f["mlm_labels"][kept],
        torch.from_numpy(np.concatenate([it["labels"][it["labels"] != IGNORE_INDEX][:k] for it in items])),
    )
    # no padding -> no attention mask
    same = [ds[i] for i in range(len(ds)) if len(ds[i]["input_ids"]) == 64][:3]
    assert same and "attention_mask" not in collate_pretrain(same)


def test_builtin_corpus_quick_start_path(tmp_path):
    path = builtin_corpus(tmp_path / "corpus.txt")
    text = path.read_text(encoding="utf-8")
    docs = text.strip("\n").split("\n\n")
    assert len(docs) == 79 and len(text) > 400_000 and all(d.strip() for d in docs)
    # the calls `spanbert pretrain` (quick start) makes
    tok = train_tokenizer([path], vocab_size=3000, output_dir=tmp_path / "tok", show_progress=False)
    out = preprocess([path], tok, tmp_path / "data", num_workers=2, candidates=None, progress=False)
    assert is_preprocessed(out) and tokenizer_dir_of(out) == out / "tokenizer" and has_tokenizer(tmp_path / "tok")
    ds = PretrainDataset(
        out,
        tok,
        max_seq_length=128,
        mode="single",
        scheme="span",
        seed=0,
        short_seq_prob=0.0,
        mask_ratio=0.15,
        geometric_p=0.2,
        max_span_length=10,
    )
    assert ds.corpus.num_docs == 79 and len(ds) > 500
    batch = collate_pretrain([ds[i] for i in range(8)], pad_id=tok.pad_id)
    assert batch["input_ids"].shape[0] == 8 and len(batch["mlm_positions"]) > 8 * 10


def test_cli(tmp_path, tok_dir, capsys):
    src = write_txt(tmp_path / "a.txt", synthetic_docs(3))
    assert (
        main(
            [
                "--corpus",
                str(src),
                "--tokenizer",
                str(tok_dir),
                "--output_dir",
                str(tmp_path / "o"),
                "--num_workers",
                "1",
                "--quiet",
            ]
        )
        == 0
    )
    assert "3 documents" in capsys.readouterr().out


# ------------------------------------------------------------------------------------ long lines


def long_line(n_bytes: int, seed: int) -> str:
    """About ``n_bytes`` of words on one line, with double spaces, tabs and multi-byte characters."""
    rng = np.random.default_rng(seed)
    words = rng.choice(WORDS + ["naïve\tcafé", "x" * 40], n_bytes // 6)
    seps = rng.choice([" ", " ", " ", "  "], len(words))
    return "".join(w + s for w, s in zip(words, seps)).strip()


def documented_pieces(line: str, max_bytes: int) -> list[str]:
    """docs/data.md's rule: pieces of at most max_bytes bytes, each cut before the last space or tab."""
    raw, out, start = line.encode(), [], 0
    while len(raw) - start > max_bytes:
        window = raw[start + 1 : start + max_bytes + 1]
        cut = start + 1 + max(window.rfind(b" "), window.rfind(b"\t"))
        out.append(raw[start:cut].decode())
        start = cut
    return out + [raw[start:].decode()]


def assert_same_corpus(a: TokenCorpus, b: TokenCorpus, paragraphs: bool = True) -> None:
    assert np.array_equal(a.doc_bounds, b.doc_bounds)
    if paragraphs:
        assert np.array_equal(a.para_starts, b.para_starts)
    for s, e in a.doc_bounds.tolist():
        for x, y in zip(a.tokens(s, e), b.tokens(s, e)):
            assert np.array_equal(x, y)
    assert np.array_equal(a.unigram_counts(), b.unigram_counts())


def test_a_long_line_is_split_before_a_space_with_one_warning(tmp_path, tok_dir, capsys):
    """Issue 22 item 11: a line of megabytes is read and tokenized in pieces of at most max_line_bytes
    (memory does not grow with it: bench/long_line_memory.py), giving the tokens of the whole line."""
    lines = [long_line(1_500_000, 0), "a short line after it", long_line(300_000, 1)]
    docs = [lines[:2], ["Doc1 " + " ".join(WORDS)], lines[2:]]
    src = write_txt(tmp_path / "long.txt", docs)
    kw = dict(num_workers=1, progress=False)
    c = TokenCorpus(preprocess(src, tok_dir, tmp_path / "c", max_line_bytes=4000, chunk_chars=20_000, **kw))
    warnings = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1 and f"{src}:1: found a line of more than 4,000 bytes" in warnings[0]
    assert c.meta["max_line_bytes"] == 4000

    # the documented behaviour: the same text with each long line cut into those pieces by hand
    pieces = [[q for line in d for q in documented_pieces(line, 4000)] for d in docs]
    assert max(len(q.encode()) for d in pieces for q in d) <= 4000 and len(pieces[0]) > 300
    ref = TokenCorpus(preprocess(write_txt(tmp_path / "pieces.txt", pieces), tok_dir, tmp_path / "r", **kw))
    assert_same_corpus(c, ref)
    assert len(c.para_starts) == sum(map(len, pieces))
    # ... whose tokens are those of the whole lines (cut here at other spaces, every 500 words)
    words = [[line.split(" ") for line in d] for d in docs]
    coarse = [[" ".join(w[i : i + 500]) for w in d for i in range(0, len(w), 500)] for d in words]
    other = TokenCorpus(preprocess(write_txt(tmp_path / "coarse.txt", coarse), tok_dir, tmp_path / "o", **kw))
    assert_same_corpus(c, other, paragraphs=False)
    assert capsys.readouterr().err.count("warning:") == 0  # no line of those two files is long
    with pytest.raises(SpanBertError, match="--max_line_bytes: found 0, expected at least 1"):
        preprocess(src, tok_dir, tmp_path / "x", max_line_bytes=0, **kw)


def test_a_long_line_in_jsonl_and_one_doc_per_line(tmp_path, tok_dir, capsys):
    line = long_line(200_000, 2)
    pieces = documented_pieces(line, 3000)
    kw = dict(num_workers=1, progress=False, max_line_bytes=3000, chunk_chars=10_000)
    (tmp_path / "a.jsonl").write_text(json.dumps({"text": "first paragraph\n" + line}) + "\n", encoding="utf-8")
    c = TokenCorpus(preprocess(tmp_path / "a.jsonl", tok_dir, tmp_path / "j", **kw))
    assert "a.jsonl:1: found a line of more than 3,000 bytes" in capsys.readouterr().err
    ref = write_txt(tmp_path / "ref.txt", [["first paragraph", *pieces]])
    assert_same_corpus(c, TokenCorpus(preprocess(ref, tok_dir, tmp_path / "jr", num_workers=1, progress=False)))
    # one document per line: the pieces of a long line stay one document
    (tmp_path / "b.txt").write_text(f"one\n{line}\ntwo\n", encoding="utf-8")
    d = TokenCorpus(preprocess(tmp_path / "b.txt", tok_dir, tmp_path / "d", one_doc_per_line=True, **kw))
    assert d.num_docs == 3 and len(d.para_starts) == 2 + len(pieces)
    assert_same_corpus(d, TokenCorpus(preprocess(write_txt(tmp_path / "r2.txt", [["one"], pieces, ["two"]]),
                                                 tok_dir, tmp_path / "dr", num_workers=1, progress=False)))  # fmt: skip


def test_documents_longer_than_a_chunk_give_the_same_arrays(tmp_path, tok_dir):
    """A document longer than chunk_chars is tokenized in parts and joined again: the arrays are those
    of whole-document chunks, with any worker count; a part with no tokens joins nothing."""
    docs = synthetic_docs(30, seed=3)
    docs[3] = ["\x07\x07", *docs[3], "\x07"]  # control characters: paragraphs with no tokens
    docs[7] = ["\x07"] * 5  # a document with no tokens at all
    src = write_txt(tmp_path / "a.txt", docs)
    (tmp_path / "b.jsonl").write_text("".join(json.dumps({"text": "\n".join(p)}) + "\n" for p in docs[:10]))
    files = [src, tmp_path / "b.jsonl"]
    whole = TokenCorpus(preprocess(files, tok_dir, tmp_path / "w", num_workers=1, progress=False))
    assert whole.num_docs == 29 + 9  # the document with no tokens is dropped, in both files
    for workers in (1, 2):
        parts = TokenCorpus(preprocess(files, tok_dir, tmp_path / f"p{workers}", num_workers=workers,
                                       chunk_chars=40, shard_tokens=500, progress=False))  # fmt: skip
        assert len(parts.meta["shards"]) > 1
        assert_same_corpus(parts, whole)
    one = TokenCorpus(preprocess(src, tok_dir, tmp_path / "o1", one_doc_per_line=True, progress=False))
    small = TokenCorpus(preprocess(src, tok_dir, tmp_path / "o2", one_doc_per_line=True, chunk_chars=10,
                                   num_workers=1, progress=False))  # fmt: skip
    assert_same_corpus(small, one)


# ------------------------------------------------------------------------------------ real text


def real_slice(tmp_path: Path, chars: int = 300_000) -> Path:
    """Whole documents from the start of one Wikipedia chunk and one Gutenberg chunk (a few hundred KB)."""
    out = tmp_path / "real.txt"
    parts = []
    for name, limit in (("enwiki-2015-00.txt.gz", chars), ("gutenberg-00.txt.gz", chars // 2)):
        lines, size = [], 0
        with gzip.open(REAL / name, "rt", encoding="utf-8") as f:
            for line in f:
                if size >= limit and not line.strip():
                    break
                if size >= limit and name.startswith("gutenberg"):
                    break  # a book is one long document: cut it at a paragraph
                lines.append(line.rstrip("\n"))
                size += len(line)
        parts.append("\n".join(lines).strip("\n"))
    out.write_text("\n\n".join(parts) + "\n", encoding="utf-8")
    return out


@pytest.mark.realdata
def test_real_text_pipeline(tmp_path):
    if not (REAL / "enwiki-2015-00.txt.gz").is_file():
        pytest.skip(f"pre-training corpus not found at {REAL}")
    src = real_slice(tmp_path)
    train_tokenizer([src], 4000, tmp_path / "tok", show_progress=False)
    a = TokenCorpus(
        preprocess(src, tmp_path / "tok", tmp_path / "w1", num_workers=1, chunk_chars=50_000, progress=False)
    )
    b = TokenCorpus(
        preprocess(src, tmp_path / "tok", tmp_path / "w4", num_workers=4, chunk_chars=50_000, progress=False)
    )
    assert a.num_docs > 20 and a.meta["shards"] == b.meta["shards"]
    for x, y in zip(a.tokens(0, a.num_tokens), b.tokens(0, b.num_tokens)):
        assert np.array_equal(x, y)

    ds = PretrainDataset(a, max_seq_length=512, seed=0)
    masked = maskable = 0
    span_words = []
    for i in range(len(ds)):
        it = ds[i]
        s, e = ds.blocks[i]
        ws = a.tokens(int(s), int(e))[1]
        ws = np.concatenate([[True], ws, [True]])
        ws[1] = True
        m = it["labels"] != IGNORE_INDEX
        masked += int(m.sum())
        maskable += len(m) - 2
        d = np.flatnonzero(np.diff(np.concatenate([[0], m.astype(np.int8), [0]])))
        for st, en in zip(d[::2], d[1::2] - 1):
            assert ws[st] and ws[en + 1], "complete words"
            span_words.append(int(ws[st : en + 1].sum()))
    # ~90k maskable tokens in ~190 blocks: the rate is 15% up to rounding and the occasional span that
    # cannot be placed at the end; ±0.3 points is ~270 tokens
    assert masked / maskable == pytest.approx(0.15, abs=0.003)
    span_words = np.array(span_words)
    # ~3,500 spans, SE of the mean ~0.045: the realised mean must stay >= 3.55 (docs/data.md)
    assert len(span_words) > 2000 and span_words.max() <= 10 and span_words.mean() >= 3.55

    nsp = PretrainDataset(a, a.tokenizer, 256, mode="nsp", seed=0)
    n = len(nsp)
    assert abs(nsp.pairs[:, 4].mean() - 0.5) <= 5 * 0.5 / np.sqrt(n)


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


def test_corpus_pickles_as_a_path(corpus_dir):
    import pickle

    c = TokenCorpus(corpus_dir)
    blob = pickle.dumps(c)
    assert len(blob) < 1000  # the memory maps are not copied into the pickle
    d = pickle.loads(blob)
    assert d.num_tokens == c.num_tokens and np.array_equal(d.tokens(0, 10)[0], c.tokens(0, 10)[0])


SPACY_TEXT = (
    "Barack Obama visited Paris in 2015 with 300 advisers.\n"
    "The old president met Angela Merkel near the Eiffel Tower.\n\n"
    "Microsoft opened a new office in Berlin on Monday.\n"
)


def test_entity_and_noun_phrase_candidates(tmp_path):
    spacy = pytest.importorskip(
        "spacy", reason="spaCy is not installed (optional extra: pip install 'spanbert[spacy]')"
    )
    import os

    model = os.environ.get("SPANBERT_SPACY_MODEL", "en_core_web_sm")  # another package name of the same model
    try:
        spacy.load(model)
    except OSError:
        pytest.skip(f"the spaCy English model {model} is not installed (python -m spacy download {model})")
    src = tmp_path / "a.txt"
    src.write_text(SPACY_TEXT * 3, encoding="utf-8")
    tok = train_tokenizer([src], 200, tmp_path / "tok", show_progress=False)
    c = TokenCorpus(
        preprocess(
            src,
            tmp_path / "tok",
            tmp_path / "o",
            candidates="entity,noun_phrase",
            spacy_model=model,
            num_workers=1,
            progress=False,
        )
    )
    ids = c.tokens(0, c.num_tokens)[0]
    ents = {tok.decode(ids[s : e + 1]) for s, e in c.candidates("entity", 0, c.num_tokens)}
    nps = {tok.decode(ids[s : e + 1]) for s, e in c.candidates("noun_phrase", 0, c.num_tokens)}
    assert {"Barack Obama", "Paris", "Angela Merkel"} <= ents
    assert not any(any(ch.isdigit() for ch in e) for e in ents)  # DATE / CARDINAL mentions are dropped
    assert "The old president" in nps
    ds = PretrainDataset(c, max_seq_length=64, scheme="named_entity")
    item = ds[0]
    assert (item["labels"] != IGNORE_INDEX).sum() > 0


def test_corpus_directory_reads_only_text_files(tmp_path, tok_dir):
    d = tmp_path / "corpus"
    d.mkdir()
    write_txt(d / "a.txt", synthetic_docs(2, seed=3))
    (d / "b.jsonl").write_text(json.dumps({"text": "one more document"}) + "\n", encoding="utf-8")
    (d / "README.md").write_text("# not corpus text\n\nmanifest\n", encoding="utf-8")
    (d / "manifest.tsv").write_bytes(b"\xff\xfe binary-ish")
    c = TokenCorpus(preprocess(d, tok_dir, tmp_path / "o", num_workers=1, progress=False))
    assert c.num_docs == 3 and len(c.meta["sources"]) == 2


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


def test_damaged_corpus_is_a_data_error(tmp_path, corpus_dir):
    import shutil

    from spanbert.corpus import TokenCorpus

    bad = tmp_path / "bad"
    shutil.copytree(corpus_dir, bad)
    (bad / "meta.json").write_text((corpus_dir / "meta.json").read_text()[:30])
    with pytest.raises(DataError, match="meta.json:.*invalid JSON"):
        TokenCorpus(bad)
    shutil.copy(corpus_dir / "meta.json", bad / "meta.json")
    (bad / "shard-00000.docs").write_bytes((corpus_dir / "shard-00000.docs").read_bytes()[:-8])
    with pytest.raises(DataError, match="shard-00000.docs: found .* document offsets"):
        TokenCorpus(bad)
