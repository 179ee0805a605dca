"""Vocabularies compared by content (`spanbert.vocab_match`): the fingerprint names the tokens in id order and the
casing, a moved id is one error naming the option and both places, casing and [UNK] shares are told or refused.
The commands that call these checks are tested in test_reliability_vocab_outputs.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from spanbert import vocab_match as V
from spanbert.errors import SpanBertError

BASE = {"[PAD]": 0, "[UNK]": 1, "the": 2, "cat": 3, "##s": 4}


def test_the_fingerprint_follows_the_tokens_in_id_order_and_the_casing():
    same = dict(reversed(list(BASE.items())))  # another order of the mapping, the same ids
    assert V.fingerprint(BASE, False) == V.fingerprint(same, False)
    assert V.fingerprint(BASE, False) != V.fingerprint(BASE, True)
    swapped = {**BASE, "the": 3, "cat": 2}
    assert V.fingerprint(BASE, False) != V.fingerprint(swapped, False)
    assert V.tokens_by_id({"a": 0, "c": 2}) == ["a", None, "c"]


def test_a_moved_id_is_one_error_and_an_extension_is_not():
    V.check_same_ids(BASE, {**BASE, "[E1]": 5}, "--tokenizer", "OTHER", "P", "why")  # new ids at the end: fine
    with pytest.raises(SpanBertError) as e:
        V.check_same_ids(BASE, {**BASE, "the": 3, "cat": 2}, "--tokenizer", "OTHER", "P", "its rows are per id")
    msg = str(e.value)
    assert msg.startswith("--tokenizer: found OTHER giving id 2 to 'cat' where P gives it to 'the'")
    assert "(2 of 5 ids name other tokens)" in msg and "its rows are per id" in msg


def _vocab(words: list[str]) -> dict[str, int]:
    return {w: i for i, w in enumerate(["[CLS]", "[SEP]", *words])}


def test_the_casing_of_a_vocabulary_and_a_tokenizer_that_disagrees_with_it():
    cased = _vocab([f"Word{i}" for i in range(30)])
    lower = _vocab([f"word{i}" for i in range(30)])
    assert V.cased_vocabulary(cased) is True and V.cased_vocabulary(lower) is False
    assert V.cased_vocabulary(_vocab(["a", "b"])) is None  # too few letters to tell
    tok = SimpleNamespace(do_lower_case=True, get_vocab=lambda: cased)
    assert "lower-cases its input" in V.casing_warning(tok, "T")
    keep = SimpleNamespace(do_lower_case=False, get_vocab=lambda: lower)
    assert "keeps the case" in V.casing_warning(keep, "T")
    assert V.casing_warning(SimpleNamespace(do_lower_case=False, get_vocab=lambda: cased), "T") is None
    # against the tokenizer the ids were made with
    own = SimpleNamespace(do_lower_case=False, get_vocab=lambda: cased)
    assert "the tokenizer of M keeps the case" in V.casing_warning(tok, "T", own, "M")


def test_the_share_of_unknown_pieces_warns_refuses_or_says_nothing():
    assert V.check_coverage(10, 999, "--tokenizer", "V", "the text") is None  # too small a sample
    assert V.check_coverage(10, 1000, "--tokenizer", "V", "the text") is None
    assert V.check_coverage(100, 1000, "--tokenizer", "V", "the text").startswith("warning: 100 of 1,000")
    with pytest.raises(SpanBertError, match="--tokenizer: found 600 of 1,000 word pieces"):
        V.check_coverage(600, 1000, "--tokenizer", "V", "the text")
    assert "warning" in V.check_coverage(600, 1000, "--tokenizer", "V", "a task file", refuse=False)
