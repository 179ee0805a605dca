"""`spanbert fill` (`spanbert.fill`): the masked tokens of a text predicted with the MLM head or the span
boundary head, and its clean errors. A ModernBERT folder's heads are tested in test_modernbert.py, a fairseq
checkpoint's in test_model.py."""

from __future__ import annotations

import pytest
import torch
from test_pretrain import corpus  # noqa: F401 - the module-scoped tiny corpus fixture

from spanbert.config import model_config
from spanbert.errors import SpanBertError
from spanbert.fill import fill
from spanbert.model import SpanBertForPreTraining


def test_fill_with_both_heads(corpus, tmp_path):  # noqa: F811
    _, _, tok, _ = corpus
    torch.manual_seed(0)
    model = SpanBertForPreTraining(model_config("tiny", vocab_size=tok.vocab_size))
    for head in ("mlm", "sbo"):
        out = fill(model, tok, "the river {MASK*2} past old stone bridges", head=head, top_k=3)
        assert len(out["predictions"]) == 2 and len(out["predictions"][0]["candidates"]) == 3
        assert "[MASK]" not in out["text"]
    with pytest.raises(SpanBertError, match="no \\[MASK\\]"):
        fill(model, tok, "no masks here")
    with pytest.raises(SpanBertError, match="span boundary head"):
        fill(SpanBertForPreTraining(model_config("tiny", vocab_size=tok.vocab_size), sbo=False), tok, "a [MASK]", head="sbo")
