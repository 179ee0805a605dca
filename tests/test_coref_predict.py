"""Resolving raw text (`spanbert.tasks.coref.predict`): the light splitter's words and sentences, and each
word's character offsets. A fine-tuned model's predictor is tested in test_coref.py and test_long_context.py."""

from __future__ import annotations

from spanbert.tasks.coref.predict import split_text


def test_split_text_words_sentences_and_offsets():
    text = "Mr. Darcy didn't come. She waited—then left!  Fine."
    sentences, offsets = split_text(text)
    assert sentences == [
        ["Mr", ".", "Darcy", "didn't", "come", "."],
        ["She", "waited", "—", "then", "left", "!"],
        ["Fine", "."],
    ]
    words = [w for s in sentences for w in s]
    assert [text[a:b] for a, b in offsets] == words
