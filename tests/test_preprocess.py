"""`spanbert preprocess` (`spanbert.preprocess`): text files (plain, gzip, JSON lines, a folder of them) -> the
memory-mapped token arrays of a corpus, the same with any number of workers, chunks and shards; bad input named
with its file and line; lines of megabytes read in pieces; entity and noun-phrase candidates; the quick start's
built-in text; the whole pipeline on real text.

The corpus read back is tested in test_corpus.py, its blocks in test_blocks.py, the masked dataset in
test_dataset.py and the batches in test_collate.py; the synthetic corpus they share is in conftest.py."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import WORDS, synthetic_docs, write_txt

from spanbert.collate import collate_pretrain
from spanbert.corpus import TokenCorpus, has_tokenizer, is_preprocessed, tokenizer_dir_of
from spanbert.dataset import PretrainDataset
from spanbert.errors import DataError, SpanBertError
from spanbert.masking import IGNORE_INDEX
from spanbert.preprocess import builtin_corpus, main, preprocess
from spanbert.tokenization import train_tokenizer

REAL = Path(__file__).resolve().parents[1] / "../shared/data/pretrain-corpus"


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


def test_word_starts_come_from_the_ids_where_the_vocabulary_tells_them(tmp_path, tok_dir, monkeypatch):
    import spanbert.preprocess as P

    src = write_txt(tmp_path / "a.txt", synthetic_docs(30, seed=4))
    kw = dict(progress=False, chunk_chars=2000, shard_tokens=3000, num_workers=1)
    c = TokenCorpus(preprocess(src, tok_dir, tmp_path / "derived", **kw))
    # WordPiece: a token starts a word unless it is a ## piece, so the ids tell every flag: no .starts file
    assert not list(c.path.glob("*.starts")) and (c.path / "word_starts.npy").is_file()
    assert all(s["word_starts"] == "from_ids" for s in c.meta["shards"]) and c.num_shards > 1
    ids, ws = c.tokens(0, int(c.shard_offsets[1]))
    assert ws.tolist() == c.tokenizer.word_starts_of(ids).tolist()
    # a shard whose flags the ids do not give (a line starting with a continuation piece, as byte-level BPE's
    # lines can) keeps its file, the others still drop theirs
    real = P._tokenize_chunk
    seen = []

    def flip(docs):
        r = real(docs)
        if not seen:
            seen.append(1)
            r.starts[1] = not r.starts[1]
        return r

    monkeypatch.setattr(P, "_tokenize_chunk", flip)
    d = TokenCorpus(preprocess(src, tok_dir, tmp_path / "stored", **kw))
    assert [s.get("word_starts") for s in d.meta["shards"]][:2] == [None, "from_ids"]
    assert (d.path / "shard-00000.starts").is_file() and not (d.path / "shard-00001.starts").exists()
    assert d.tokens(0, 3)[1].tolist() == [True, not c.tokens(0, 3)[1][1], c.tokens(0, 3)[1][2]]
    for s, e in c.doc_bounds[5:]:  # every other flag as derived
        assert np.array_equal(c.tokens(int(s), int(e))[1], d.tokens(int(s), int(e))[1])


def test_the_default_worker_count_follows_the_cores(monkeypatch):
    import spanbert.preprocess as P

    monkeypatch.setattr(P.os, "sched_getaffinity", lambda pid: set(range(20)), raising=False)
    assert P.usable_cores() == 20  # not capped at 8: the main process feeds about 20


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
