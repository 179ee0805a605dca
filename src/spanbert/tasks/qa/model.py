"""The QA head on any family's encoder (SpanBERT §4.1): start and end logits of every token, optionally
after a biLSTM."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from spanbert import families
from spanbert.tasks.layers import apply_encoder_dropout, output_layer, scaled

# ---------------------------------------------------------------------------------------------
# Model


class SpanBertForQuestionAnswering(nn.Module):
    """Encoder + ``qa_outputs`` (H -> 2: start and end logits), as HF `BertForQuestionAnswering`.

    Its `state_dict()` is HF's, so a fine-tuned model loads in `transformers`. The loss is the mean
    of the start and end cross-entropies (BERT §4.2); padding positions are excluded from the softmax.

    ``bilstm=True`` is BERT Table 5's "+ BiLSTM" (§5.1): a randomly initialised one-layer biLSTM
    between the encoder and ``qa_outputs`` (H/2 units each way, so its output is H wide), giving a
    left-to-right encoder's token states some right context. Its weights (`bilstm.*`) are not HF's:
    transformers loads such a model without them.
    """

    def __init__(self, config: Any = None, encoder: nn.Module | None = None, bilstm: bool = False):
        super().__init__()
        self.bert = encoder if encoder is not None else families.encoder_from_config(config.to_hf_dict(), add_pooling_layer=False)  # any family
        self.config = self.bert.config
        H = self.bert.hidden_size
        # PyTorch's LSTM initialisation (uniform in ±1/sqrt(H/2)); the paper says only "randomly initialized"
        self.bilstm = nn.LSTM(H, H // 2, batch_first=True, bidirectional=True) if bilstm else None
        apply_encoder_dropout(self.bert)
        # the family's output layer (BERT: N(0, 0.02); two-tower: x16 and zero-initialised); no dropout
        # before it, as BertForQuestionAnswering
        self.output_scale, _, self.qa_outputs = output_layer(self.bert, H, 2)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                start_positions: Tensor | None = None, end_positions: Tensor | None = None) -> dict[str, Tensor]:
        hidden = self.bert(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)  # (B, T, H)
        if self.bilstm is not None:
            hidden = _run_bilstm(self.bilstm, hidden, attention_mask)  # (B, T, H)
        logits = self.qa_outputs(scaled(hidden, self.output_scale)).float()  # (B, T, 2)
        start_logits, end_logits = logits.unbind(-1)  # (B, T) each
        if attention_mask is not None:
            pad = attention_mask == 0
            start_logits = start_logits.masked_fill(pad, torch.finfo(start_logits.dtype).min)
            end_logits = end_logits.masked_fill(pad, torch.finfo(end_logits.dtype).min)
        out = {"start_logits": start_logits, "end_logits": end_logits}
        if start_positions is not None and end_positions is not None:
            out["loss"] = (
                F.cross_entropy(start_logits, start_positions) + F.cross_entropy(end_logits, end_positions)
            ) / 2
        return out


def _run_bilstm(lstm: nn.LSTM, hidden: Tensor, attention_mask: Tensor | None) -> Tensor:
    """The biLSTM over each sequence's real tokens only (packed: the backward direction starts at the
    last real token, not at padding); padded positions come back as zeros. (B, T, H) -> (B, T, H)."""
    if attention_mask is None:
        return lstm(hidden)[0]
    lengths = attention_mask.sum(1).cpu()  # (B,) right padding
    packed = pack_padded_sequence(hidden, lengths, batch_first=True, enforce_sorted=False)
    out, _ = pad_packed_sequence(lstm(packed)[0], batch_first=True, total_length=hidden.shape[1])
    return out  # (B, T, H)


