"""The extractive-QA head (`spanbert.tasks.qa.model`): its state dict loads in transformers'
`BertForQuestionAnswering` and gives the same logits. A left-to-right model's biLSTM head is tested in
test_ltr.py."""

from __future__ import annotations

import pytest
import torch
from test_qa import tok  # noqa: F401 - tok is a fixture

from spanbert.config import model_config
from spanbert.tasks import qa


def test_head_state_dict_loads_in_transformers(tok) -> None:  # noqa: F811
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = model_config("tiny", vocab_size=tok.vocab_size, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    ours = qa.SpanBertForQuestionAnswering(cfg).eval()
    hf = transformers.BertForQuestionAnswering(transformers.BertConfig(**cfg.to_hf_dict())).eval()
    missing, unexpected = hf.load_state_dict(ours.state_dict(), strict=False)
    assert not unexpected and all("position_ids" in k for k in missing)
    ids = torch.randint(5, tok.vocab_size, (2, 12))
    tt = torch.zeros_like(ids)
    tt[:, 5:] = 1
    with torch.no_grad():
        a = ours(input_ids=ids, token_type_ids=tt)
        b = hf(input_ids=ids, token_type_ids=tt)
    torch.testing.assert_close(a["start_logits"], b.start_logits, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(a["end_logits"], b.end_logits, atol=1e-5, rtol=1e-4)
    labels = torch.tensor([3, 0])
    loss = ours(input_ids=ids, token_type_ids=tt, start_positions=labels, end_positions=labels)["loss"]
    ref = hf(input_ids=ids, token_type_ids=tt, start_positions=labels, end_positions=labels).loss
    torch.testing.assert_close(loss, ref, atol=1e-5, rtol=1e-4)
