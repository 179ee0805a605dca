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
    with pytest.raises(SpanBertError, match="special tokens"):
        load_tokenizer(tmp_path)


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
