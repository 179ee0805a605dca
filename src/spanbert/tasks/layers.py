"""Layers the task heads share: the output layer every family configures through its fine-tuning
habits, dropout control, ELMo's scalar mix and a linear-chain CRF.

`CRF` is written here (forward algorithm, gold-path score, Viterbi; about 60 lines), tested against
brute-force enumeration of every tag sequence: the pip package ``pytorch-crf`` has had no release since
2019 and would be one more dependency for these few lines.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from spanbert.dropout import Dropout, set_dropout
from spanbert.errors import SpanBertError


def output_layer(encoder: nn.Module, in_features: int, num_labels: int, dropout: float | None = None
                 ) -> tuple[float, nn.Module, nn.Linear]:  # fmt: skip
    """(output scale, dropout, linear layer) of a new head on ``encoder``, initialised as its family's
    habits say (``dropout`` overrides the family's head dropout)."""
    habits = encoder.habits
    classifier = nn.Linear(in_features, num_labels)
    if habits.zero_init_head:
        nn.init.zeros_(classifier.weight)  # two-tower §4: "initialize all weights as well as the bias to zero"
    else:
        nn.init.normal_(classifier.weight, std=habits.init_std)
    nn.init.zeros_(classifier.bias)
    return habits.output_scale, Dropout(habits.head_dropout if dropout is None else dropout), classifier


def scaled(x: Tensor, scale: float) -> Tensor:
    """``x * scale``, skipped at 1 (BERT) so its numbers stay bit for bit what they were."""
    return x if scale == 1.0 else x * scale


def apply_encoder_dropout(encoder: nn.Module) -> None:
    """Set the encoder's dropout as its family fine-tunes sentence-level heads (two-tower §4: none
    "in the language model"); BERT keeps its pre-trained rates."""
    p = encoder.habits.encoder_dropout
    if p is not None:
        set_dropout(encoder, p)


class ScalarMix(nn.Module):
    """ELMo's task-specific combination of layers (Peters et al. 2018, eq. 1): gamma * sum_j s_j h_j
    with s = softmax(w); w starts at zero (an even mix), gamma at one."""

    def __init__(self, num_layers: int):
        super().__init__()
        self.weights = nn.Parameter(torch.zeros(num_layers))
        self.gamma = nn.Parameter(torch.ones(()))

    def forward(self, layers: Sequence[Tensor]) -> Tensor:
        if len(layers) != self.weights.numel():
            raise SpanBertError(f"ScalarMix: found {len(layers)} layers, expected {self.weights.numel()}")
        s = torch.softmax(self.weights, dim=0)  # (L,)
        return self.gamma * sum(w * h for w, h in zip(s, layers))  # (B, T, d)


class CRF(nn.Module):
    """A linear-chain CRF over K tags: score(y) = start[y_1] + sum_t emit[t, y_t] + sum_t
    trans[y_{t-1}, y_t] + end[y_n]. Sequences are left-aligned: ``mask`` (B, W) is True on a
    prefix of each row, at least one position long."""

    def __init__(self, num_tags: int):
        super().__init__()
        self.num_tags = num_tags
        self.transitions = nn.Parameter(torch.zeros(num_tags, num_tags))  # [from, to]
        self.start = nn.Parameter(torch.zeros(num_tags))
        self.end = nn.Parameter(torch.zeros(num_tags))

    def _check(self, emissions: Tensor, mask: Tensor) -> Tensor:
        if emissions.ndim != 3 or emissions.shape[-1] != self.num_tags or mask.shape != emissions.shape[:2]:
            raise SpanBertError(f"CRF: found emissions {tuple(emissions.shape)} and mask {tuple(mask.shape)}, "
                                f"expected (B, W, {self.num_tags}) and (B, W)")  # fmt: skip
        mask = mask.bool()
        if not bool(mask[:, 0].all()):
            raise SpanBertError("CRF: found a sequence without positions, expected at least one per row")
        return mask

    def log_partition(self, emissions: Tensor, mask: Tensor) -> Tensor:
        """log Z of each sequence (B,) by the forward algorithm."""
        mask = self._check(emissions, mask)
        alpha = self.start + emissions[:, 0]  # (B, K)
        for t in range(1, emissions.shape[1]):
            # (B, K, 1) + (K, K) + (B, 1, K) -> logsumexp over the previous tag
            nxt = torch.logsumexp(alpha[:, :, None] + self.transitions + emissions[:, t, None, :], dim=1)
            alpha = torch.where(mask[:, t, None], nxt, alpha)  # padding carries alpha unchanged
        return torch.logsumexp(alpha + self.end, dim=1)

    def score(self, emissions: Tensor, tags: Tensor, mask: Tensor) -> Tensor:
        """Score of the given tag sequences (B,); tags at padded positions are ignored."""
        mask = self._check(emissions, mask)
        tags = tags.clamp(min=0).masked_fill(~mask, 0)
        m = mask.to(emissions.dtype)
        emit = emissions.gather(2, tags[..., None]).squeeze(-1)  # (B, W)
        trans = self.transitions[tags[:, :-1], tags[:, 1:]]  # (B, W-1)
        last = tags.gather(1, (mask.sum(1) - 1)[:, None]).squeeze(1)  # (B,)
        return self.start[tags[:, 0]] + (emit * m).sum(1) + (trans * m[:, 1:]).sum(1) + self.end[last]

    def log_likelihood(self, emissions: Tensor, tags: Tensor, mask: Tensor) -> Tensor:
        """log p(tags | emissions) of each sequence (B,)."""
        return self.score(emissions, tags, mask) - self.log_partition(emissions, mask)

    def decode(self, emissions: Tensor, mask: Tensor) -> Tensor:
        """The highest-scoring tag sequence of each row (Viterbi), (B, W) with -1 at padding."""
        mask = self._check(emissions, mask)
        B, W, K = emissions.shape
        best = self.start + emissions[:, 0]  # (B, K)
        back = []
        for t in range(1, W):
            cand = best[:, :, None] + self.transitions  # (B, K_prev, K)
            val, arg = cand.max(dim=1)  # (B, K)
            best = torch.where(mask[:, t, None], val + emissions[:, t], best)
            back.append(arg)
        best = best + self.end
        lengths = mask.sum(1)
        out = torch.full((B, W), -1, dtype=torch.long, device=emissions.device)
        for b in range(B):
            tag = int(best[b].argmax())
            n = int(lengths[b])
            out[b, n - 1] = tag
            for t in range(n - 1, 0, -1):
                tag = int(back[t - 1][b, tag])
                out[b, t - 1] = tag
        return out
