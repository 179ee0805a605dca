"""Calling the tokenizer (`spanbert.model_inputs`, `Tokenizer.__call__`): the inputs a transformers tokenizer
gives, equal to `transformers.BertTokenizerFast` on the same vocabulary (framing, pairs, padding, truncation,
tensors), and one clear error for what it cannot do."""

from __future__ import annotations

import pytest
from test_tokenization import CORPUS, tok  # noqa: F401 - tok is a fixture

from spanbert.errors import SpanBertError
from spanbert.tokenization import load_tokenizer

_CALLS = [
    {},
    {"padding": True},
    {"padding": "max_length", "max_length": 40},
    {"padding": True, "truncation": True, "max_length": 9},
    {"truncation": True, "max_length": 13, "padding": True},
]
_PAIR_ONLY = [
    {"truncation": "only_first", "max_length": 30, "padding": "longest"},
    {"truncation": "only_second", "max_length": 30, "padding": True},
]


@pytest.mark.parametrize(("options", "pairs"), [(o, False) for o in _CALLS] + [(o, True) for o in _CALLS + _PAIR_ONLY])
def test_calling_the_tokenizer_equals_transformers_bert_tokenizer_fast(tok, tmp_path, options, pairs):  # noqa: F811
    transformers = pytest.importorskip("transformers")
    tok.save(tmp_path)
    hf = transformers.BertTokenizerFast.from_pretrained(str(tmp_path))
    texts = CORPUS[:4] + ["Denver"]
    second = [CORPUS[3], "café", CORPUS[0], CORPUS[1], "won 50 dollars"] if pairs else None
    ours = tok(texts, second, **options)
    theirs = hf(texts, second, **options)
    assert ours == {k: theirs[k] for k in ("input_ids", "token_type_ids", "attention_mask")}
    one, theirs_one = (f(texts[0], second[0] if second else None, **options) for f in (tok, hf))
    assert one == {k: theirs_one[k] for k in one}  # a single text: unnested lists, as transformers


def test_calling_the_tokenizer_gives_tensors_the_encoder_takes(tok):  # noqa: F811
    import torch

    batch = tok(["The café.", "Super Bowl 50 in 2016, the Denver Broncos won it."], padding=True, return_tensors="pt")
    assert set(batch) == {"input_ids", "token_type_ids", "attention_mask"}
    assert batch["input_ids"].dtype == torch.long and batch["input_ids"].shape == batch["attention_mask"].shape
    assert batch["attention_mask"][0].sum() < batch["attention_mask"][1].sum() == batch["input_ids"].shape[1]
    assert (batch["input_ids"][0][batch["attention_mask"][0] == 0] == tok.pad_id).all()
    assert tok("The café.", return_tensors="pt")["input_ids"].shape[0] == 1
    assert tok(CORPUS[3], truncation=True)["input_ids"] == tok(CORPUS[3])["input_ids"]  # under 512: uncut
    assert len(tok(CORPUS[3] * 40, truncation=True)["input_ids"]) == tok.model_max_length == 512


def test_calling_the_tokenizer_refuses_what_it_cannot_do(tok):  # noqa: F811
    with pytest.raises(SpanBertError, match="padding=True"):
        tok(["a", "a longer text"], return_tensors="pt")
    with pytest.raises(SpanBertError, match="padding: found 'left', expected True, False or one of"):
        tok("a", padding="left")
    with pytest.raises(SpanBertError, match="text_pair: found 1 texts, expected one for each of the 2"):
        tok(["a", "b"], ["c"])
    with pytest.raises(SpanBertError, match="text: found int 3"):
        tok([3])
    with pytest.raises(SpanBertError, match="return_tensors: found 'np'"):
        tok("a", return_tensors="np")


def test_a_saved_model_max_length_bounds_truncation(tok, tmp_path):  # noqa: F811
    tok.save(tmp_path, model_max_length=16)
    short = load_tokenizer(tmp_path)
    assert short.model_max_length == 16
    assert len(short(CORPUS[3] * 4, truncation=True)["input_ids"]) == 16
    assert short.with_added_tokens(["<e1>"]).model_max_length == 16
