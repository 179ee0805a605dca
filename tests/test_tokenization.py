"""Tokenizer: training, word starts and offsets on tricky text, loading vocab.txt, AutoTokenizer interop."""

from __future__ import annotations

import json

import numpy as np
import pytest

from spanbert.errors import DataError, SpanBertError
from spanbert.tokenization import Tokenizer, load_tokenizer, main, train_tokenizer

TRICKY = "The Denver Broncos' café in Zürich costs 3.50 dollars, naïve résumé! Ökonomie (2015)."
CORPUS = [
    TRICKY,
    "The Denver Broncos won Super Bowl 50 in 2016; the café was full.",
    "Résumé writing is an art. A naïve approach costs 1,000 dollars or 3.50 euros.",
    "Unbelievable, unthinkable, undeniable: the tokenizer splits rare words into pieces.",
] * 5


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return train_tokenizer(None, 200, texts=CORPUS, show_progress=False)


def words_of(tok: Tokenizer, enc) -> list[str]:
    """Reassemble whole words from tokens using the word-start flags."""
    words: list[str] = []
    for t, start in zip(tok.convert_ids_to_tokens(enc.ids), enc.word_starts):
        if start:
            words.append(t)
        else:
            words[-1] += t[2:]
    return words


def test_specials_and_cased(tok):
    assert [tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id] == [0, 1, 2, 3, 4]
    assert tok.do_lower_case is False
    # cased and accents kept: "Résumé" and "résumé" are different, and neither is "resume"
    assert tok.encode("Résumé").ids.tolist() != tok.encode("résumé").ids.tolist()
    assert "cafe" not in tok.convert_ids_to_tokens(tok.encode("café").ids)


def test_word_starts_and_offsets_on_tricky_text(tok):
    enc = tok.encode(TRICKY)
    assert enc.ids.dtype == np.int32 and enc.offsets.shape == (len(enc), 2) and enc.word_starts.dtype == np.bool_
    tokens = tok.convert_ids_to_tokens(enc.ids)
    # every token's offsets slice exactly its text out of the original string (## removed)
    for t, (s, e) in zip(tokens, enc.offsets):
        assert TRICKY[s:e] == (t[2:] if t.startswith("##") else t)
    # word starts are exactly the non-"##" tokens
    assert enc.word_starts.tolist() == [not t.startswith("##") for t in tokens]
    # BERT's pre-tokenizer: punctuation is a word of its own, numbers split at "." and ","
    assert words_of(tok, enc) == [
        "The",
        "Denver",
        "Broncos",
        "'",
        "café",
        "in",
        "Zürich",
        "costs",
        "3",
        ".",
        "50",
        "dollars",
        ",",
        "naïve",
        "résumé",
        "!",
        "Ökonomie",
        "(",
        "2015",
        ")",
        ".",
    ]


def test_rare_word_is_split_into_continuations(tok):
    enc = tok.encode("Zürichbroncos")
    assert len(enc) > 1
    assert enc.word_starts.tolist() == [True] + [False] * (len(enc) - 1)
    assert enc.offsets[0, 0] == 0 and enc.offsets[-1, 1] == len("Zürichbroncos")
    assert (enc.offsets[1:, 0] == enc.offsets[:-1, 1]).all()  # contiguous pieces


def test_unknown_character_is_unk(tok):
    enc = tok.encode("Denver ☃ Broncos")
    assert tok.unk_id in enc.ids.tolist()


def test_encode_batch_equals_encode(tok):
    batch = tok.encode_batch(CORPUS[:4])
    for text, enc in zip(CORPUS[:4], batch):
        assert enc.ids.tolist() == tok.encode(text).ids.tolist()


def test_encode_words_maps_tokens_to_words(tok):
    words = ["Denver", "Broncos'", "", "3.50", "Zürichbroncos"]
    enc = tok.encode_words(words)
    assert sorted(set(enc.word_ids.tolist())) == list(range(len(words)))  # every word has a token
    assert enc.word_ids.tolist() == sorted(enc.word_ids.tolist())
    assert enc.ids[enc.word_ids == 2].tolist() == [tok.unk_id]  # the empty word became [UNK]
    assert len(enc.ids[enc.word_ids == 1]) == 2  # "Broncos" + "'"


def test_save_load_roundtrip_and_bare_vocab(tok, tmp_path):
    tok.save(tmp_path / "t")
    assert {p.name for p in (tmp_path / "t").iterdir()} >= {"vocab.txt", "tokenizer.json", "tokenizer_config.json"}
    assert json.loads((tmp_path / "t" / "tokenizer_config.json").read_text())["do_lower_case"] is False
    again = load_tokenizer(tmp_path / "t")
    assert again.encode(TRICKY).ids.tolist() == tok.encode(TRICKY).ids.tolist()
    # a bare vocab.txt (how BERT and SpanBERT vocabularies ship) gives the same ids, cased by default
    (tmp_path / "v").mkdir()
    (tmp_path / "v" / "vocab.txt").write_text((tmp_path / "t" / "vocab.txt").read_text())
    bare = Tokenizer.from_dir(tmp_path / "v")
    assert bare.do_lower_case is False
    assert bare.encode(TRICKY).ids.tolist() == tok.encode(TRICKY).ids.tolist()
    assert bare.encode(TRICKY).word_starts.tolist() == tok.encode(TRICKY).word_starts.tolist()
    # tokenizer_config.json's do_lower_case is honoured
    (tmp_path / "v" / "tokenizer_config.json").write_text('{"do_lower_case": true}')
    lower = Tokenizer.from_dir(tmp_path / "v")
    assert lower.do_lower_case is True
    assert lower.convert_ids_to_tokens(lower.encode("The").ids)[0] == "the"


def test_autotokenizer_loads_saved_files_cased(tok, tmp_path):
    transformers = pytest.importorskip("transformers")
    tok.save(tmp_path)
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    for text in CORPUS[:4] + ["Café CAFÉ café"]:
        assert hf(text, add_special_tokens=False)["input_ids"] == tok.encode(text).ids.tolist()
    assert hf("Denver")["input_ids"] == [tok.cls_id, *tok.encode("Denver").ids.tolist(), tok.sep_id]


def test_missing_tokenizer_errors(tmp_path):
    with pytest.raises(SpanBertError, match="does not exist"):
        load_tokenizer(tmp_path / "nope")
    with pytest.raises(SpanBertError, match="tokenizer.json or vocab.txt"):
        load_tokenizer(tmp_path)
    (tmp_path / "vocab.txt").write_text("a\nb\n")
    with pytest.raises(SpanBertError, match=r"vocab.txt: found a vocabulary without the BERT special token\(s\)"):
        load_tokenizer(tmp_path)  # the file is named (issue 22.14)


def test_cli_train_on_files(tmp_path):
    (tmp_path / "a.txt").write_text("\n\n".join(CORPUS), encoding="utf-8")
    (tmp_path / "b.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in CORPUS), encoding="utf-8")
    out = tmp_path / "tok"
    assert (
        main(
            [
                "train",
                "--corpus",
                str(tmp_path / "a.txt"),
                str(tmp_path / "b.jsonl"),
                "--vocab-size",
                "150",
                "--output_dir",
                str(out),
            ],
            "spanbert tokenizer",
        )
        == 0
    )
    loaded = load_tokenizer(out)
    assert 100 < loaded.vocab_size <= 150
    assert loaded.convert_ids_to_tokens(loaded.encode("Denver").ids) == ["Denver"]


def test_bad_jsonl_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"txt": "no text field"}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"bad.jsonl:2.*'text'"):
        train_tokenizer([bad], 100, show_progress=False)
    latin = tmp_path / "latin.txt"
    latin.write_bytes("ok line\ncaf\xe9\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"latin.txt:2.*UTF-8"):
        train_tokenizer([latin], 100, show_progress=False)


def test_with_added_tokens_keeps_markers_whole(tok, tmp_path):
    ext = tok.with_added_tokens(["[E1]", "[/E1]"])
    assert ext.vocab_size == tok.vocab_size + 2 and tok.token_to_id("[E1]") is None
    ids = ext.encode("[E1] Denver [/E1] won").ids.tolist()
    assert ids[0] == ext.token_to_id("[E1]") and ext.token_to_id("[/E1]") in ids
    assert ext.get_vocab()["Denver"] == tok.get_vocab()["Denver"]
    ext.save(tmp_path)
    assert load_tokenizer(tmp_path).encode("[E1] Denver").ids.tolist() == ext.encode("[E1] Denver").ids.tolist()


def test_saved_padding_and_truncation_are_cleared_on_load(tok, tmp_path):
    # §10.14: many published tokenizer.json files ship with padding/truncation on; encode must ignore them
    tok.save(tmp_path)
    hf = __import__("tokenizers").Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    hf.enable_padding(length=64, pad_id=tok.pad_id, pad_token="[PAD]")
    hf.enable_truncation(max_length=5)
    (tmp_path / "tokenizer.json").write_text(hf.to_str(), encoding="utf-8")
    assert json.loads((tmp_path / "tokenizer.json").read_text())["truncation"] is not None
    loaded = Tokenizer.from_dir(tmp_path)
    enc = loaded.encode(TRICKY)
    assert list(enc.ids) == list(tok.encode(TRICKY).ids) and len(enc) > 5 and tok.pad_id not in enc.ids
    assert [len(e) for e in loaded.encode_batch(["a", TRICKY])] == [1, len(enc)]
    loaded.save(tmp_path / "again")  # and the re-saved file no longer carries them
    again = json.loads((tmp_path / "again" / "tokenizer.json").read_text())
    assert again["padding"] is None and again["truncation"] is None


def test_learned_vocab_breaks_ties_by_rule():
    from spanbert.tokenization import learn_wordpiece_vocab

    # "ab" and "cd" occur equally often: the pair with the smaller ids (a, ##b) merges first; the
    # alphabet is cut at a tie by code point (x and y have the same count: x is kept, y dropped)
    counts = {"ab": 3, "cd": 3, "x": 1, "y": 1}
    vocab = learn_wordpiece_vocab(counts, 15, limit_alphabet=5, min_frequency=1)
    assert vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert vocab[5:] == ["a", "b", "c", "d", "x", "##b", "##d", "ab", "cd"]  # then no pair is left
    assert learn_wordpiece_vocab(dict(reversed(counts.items())), 15, limit_alphabet=5, min_frequency=1) == vocab
    # min_frequency stops merging: no pair occurs twice
    assert learn_wordpiece_vocab({"ab": 1, "cd": 1}, 50)[-1] == "##d"


def test_learned_vocab_is_close_to_upstream_trainer(tmp_path):
    """Same algorithm as `tokenizers`' WordPieceTrainer: on the quick-start corpus the vocabularies differ
    only where upstream broke a tie by hash-map order (a few tokens of 1,000)."""
    import tokenizers as t

    from spanbert.preprocess import builtin_corpus
    from spanbert.tokenization import SPECIAL_TOKENS, UNK, _build_pipeline, _iter_training_lines, corpus_files

    corpus = builtin_corpus(tmp_path / "corpus.txt")
    ours = set(train_tokenizer([corpus], 1000).get_vocab())
    hf = t.Tokenizer(t.models.WordPiece(unk_token=UNK, continuing_subword_prefix="##"))
    _build_pipeline(hf, False)
    trainer = t.trainers.WordPieceTrainer(
        vocab_size=1000, min_frequency=2, limit_alphabet=1000, special_tokens=SPECIAL_TOKENS,
        continuing_subword_prefix="##", show_progress=False,
    )  # fmt: skip
    hf.train_from_iterator(_iter_training_lines(corpus_files([corpus])), trainer=trainer)
    theirs = set(hf.get_vocab())
    assert len(ours) == len(theirs) == 1000
    assert len(ours & theirs) >= 980, sorted(ours ^ theirs)


def test_training_is_byte_identical_across_processes(tmp_path):
    """Two trainings in two processes with different hash seeds write identical files (upstream's
    trainer does not: huggingface/tokenizers#1794)."""
    import os
    import subprocess
    import sys

    from spanbert.preprocess import builtin_corpus

    corpus = builtin_corpus(tmp_path / "corpus.txt")
    code = "import sys; from spanbert.tokenization import train_tokenizer; train_tokenizer([sys.argv[1]], 2000, sys.argv[2])"
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run([sys.executable, "-c", code, str(corpus), str(tmp_path / seed)], env=env, check=True)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json"):
        assert (tmp_path / "1" / name).read_bytes() == (tmp_path / "2" / name).read_bytes(), name
    assert len((tmp_path / "1" / "vocab.txt").read_text(encoding="utf-8").splitlines()) == 2000


def test_tokenizer_files_errors_name_the_file(tmp_path):
    (tmp_path / "vocab.txt").write_bytes(b"[PAD]\n[UNK]\n\xe9t\xe9\n")
    with pytest.raises(DataError, match=r"vocab.txt:3: found byte 0xe9"):
        Tokenizer.from_dir(tmp_path)
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n", encoding="utf-8")
    (tmp_path / "tokenizer_config.json").write_text('["do_lower_case"]')
    with pytest.raises(DataError, match="tokenizer_config.json: found a JSON list, expected a JSON object"):
        Tokenizer.from_dir(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text('{"do_lower_case": false}')
    assert Tokenizer.from_dir(tmp_path).vocab_size == 6  # the final newline adds no token


def test_count_words_equals_pretokenizing_every_line():
    """`count_words` splits on whitespace in Python before the Rust pre-tokenizer; the counts must be
    those of pre-tokenizing each normalized line, on any text (odd spaces, control and CJK characters)."""
    from collections import Counter

    import tokenizers as t
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from spanbert.tokenization import UNK, _build_pipeline, count_words

    hf = t.Tokenizer(t.models.WordPiece(unk_token=UNK))
    _build_pipeline(hf, False)

    def reference(texts):
        out: Counter[str] = Counter()
        for text in texts:
            out.update(w for w, _ in hf.pre_tokenizer.pre_tokenize_str(hf.normalizer.normalize_str(text)))
        return out

    tricky = [TRICKY, "a\u2028b\u2029c\x85d\xa0e\u3000f\x1cg\x1fh\u200bi\tj\rk", "中文字 and 日本\ufffd語!", "\x00\x7f\u0301x"]
    assert count_words(tricky, hf.normalizer, hf.pre_tokenizer) == reference(tricky)

    @settings(max_examples=100, deadline=None)
    @given(st.lists(st.text(max_size=30), max_size=4))
    def check(texts):
        assert count_words(texts, hf.normalizer, hf.pre_tokenizer) == reference(texts)

    check()


def test_a_long_line_comes_in_pieces_that_tokenize_as_the_whole_line(tok, tmp_path):
    """`iter_lines(path, max_bytes)`: pieces of at most max_bytes bytes, cut before a space or tab, so
    the tokens are those of the whole line (issue 22 item 11: memory must not grow with the line)."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from spanbert.tokenization import iter_lines

    word = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp")), min_size=1, max_size=8)
    seps = st.sampled_from([" ", "  ", "\t", " \t "])

    @settings(max_examples=80, deadline=None)
    @given(st.lists(st.tuples(word, seps), min_size=1, max_size=50), st.integers(1, 60))
    def check(items, max_bytes):
        line = "".join(w + s for w, s in items).rstrip()
        path = tmp_path / "line.txt"
        path.write_text(f"{line}\n\nnext\n", encoding="utf-8")
        got = list(iter_lines(path, max_bytes))
        if len(line.encode()) <= max_bytes and max_bytes >= 4:  # no line is long: read as without a bound
            assert got == list(iter_lines(path, None))
        pieces = [text for n, text in got if n == 1]
        assert [x for x in got if x[0] == 2] == [(2, "")] and "".join(t for n, t in got if n == 3) == "next"
        assert all(len(t.encode()) <= max(max_bytes, 4) for _, t in got)
        assert "".join("".join(pieces).split()) == "".join(line.split())  # only whitespace-only pieces left out
        if all(len(w.encode()) + 3 < max_bytes for w, _ in items):  # no word is longer than a piece: none is cut
            whole = tok.hf.encode(line, add_special_tokens=False).ids
            assert [i for e in tok.hf.encode_batch(pieces, add_special_tokens=False) for i in e.ids] == whole

    check()


def test_long_line_pieces_keep_errors_and_blank_lines(tmp_path):
    from spanbert.tokenization import iter_lines

    path = tmp_path / "a.txt"
    path.write_bytes(b"ok\n" + b"word " * 30 + b"caf\xe9 end\n")
    with pytest.raises(DataError, match=r"a.txt:2: not UTF-8 text: byte 0xe9 at column 154"):
        list(iter_lines(path, max_bytes=16))  # the bad byte is in the 10th piece; its column is the line's
    path.write_text("a\n" + " \t" * 50 + "\nb\n", encoding="utf-8")
    assert list(iter_lines(path, max_bytes=8)) == [(1, "a"), (2, ""), (3, "b")]  # still a blank line
    path.write_text("ééé\n", encoding="utf-8")
    assert list(iter_lines(path, max_bytes=1)) == [(1, "éé"), (1, "é")]  # 4 bytes: a piece holds a character


def test_a_long_line_trains_the_vocabulary_of_its_words(tmp_path):
    """Vocabulary training reads a long line in pieces (a 30 MB line took 1.9 GB before: bench/long_line_memory.py --stage vocab): the
    words, hence the vocabulary, are those of the same text on short lines."""
    from spanbert.tokenization import MAX_LINE_BYTES

    words = " ".join(CORPUS).split()
    words = [words[i % len(words)] for i in range(3 * MAX_LINE_BYTES // 6)]
    line = " ".join(words)
    assert len(line.encode()) > 2 * MAX_LINE_BYTES
    (tmp_path / "long.txt").write_text(line + "\n", encoding="utf-8")
    short = "\n".join(" ".join(words[i : i + 500]) for i in range(0, len(words), 500))
    (tmp_path / "short.txt").write_text(short + "\n", encoding="utf-8")
    a = train_tokenizer([tmp_path / "long.txt"], 150, tmp_path / "a", show_progress=False)
    b = train_tokenizer([tmp_path / "short.txt"], 150, tmp_path / "b", show_progress=False)
    assert (tmp_path / "a" / "vocab.txt").read_text() == (tmp_path / "b" / "vocab.txt").read_text()
    assert a.vocab_size == b.vocab_size
