"""The higher-order coarse-to-fine span-ranking model (Lee et al. 2018) on any family's encoder
(`CorefModel`, `CorefConfig`) and cluster decoding."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from spanbert import families
from spanbert.tasks.coref.data import GENRES, Span
from spanbert.tasks.coref.features import segment_length
from spanbert.tasks.coref.options import CorefConfig
from spanbert.tasks.coref.pruning import bucket_distance, prune_non_crossing, segment_distance

# =============================================================================================
# The model


def _ffnn(in_dim: int, hidden: int, depth: int, out_dim: int, dropout: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(in_dim, hidden), nn.ReLU(), nn.Dropout(dropout)]
        in_dim = hidden
    layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)


class CorefModel(nn.Module):
    """(Span)BERT + the higher-order coarse-to-fine span-ranking model (Lee et al. 2018, Joshi et al. 2019).

    ``model(**batch)`` for one document (see `make_batch`) returns a dict with ``loss`` when gold
    mentions are given, and the predictions: ``top_starts``/``top_ends`` (k,) the kept spans in
    sub-tokens, ``top_mention_scores`` (k,), ``antecedents`` (k, K) indices into the kept spans and
    ``antecedent_scores`` (k, K+1) with the dummy antecedent (score 0) in column 0.
    """

    def __init__(self, bert_config: Any, config: CorefConfig, encoder: nn.Module | None = None):
        super().__init__()
        # any family (`spanbert.families`); ``bert_config`` builds a BERT encoder when none is given
        self.bert = encoder if encoder is not None else families.encoder_from_config(bert_config.to_hf_dict(), add_pooling_layer=False)
        # the segment length is fixed here, so that predictions and the saved config use the same one
        self.config = config = replace(config, max_seq_length=segment_length(config.max_seq_length, self.bert.max_positions)[0])
        h, fs, c = self.bert.hidden_size, config.feature_size, config
        self.span_dim = d = 3 * h + fs  # [x_start, x_end, head attention, width embedding]
        self.dropout = nn.Dropout(c.dropout)
        self.token_dropout = nn.Dropout(c.token_dropout)
        self.head_attention = nn.Linear(h, 1)  # α_t = w · x_t, softmax over the span's tokens
        self.span_width_embeddings = nn.Embedding(c.max_span_width, fs)
        self.mention_scorer = _ffnn(d, c.ffnn_size, c.ffnn_depth, 1, c.dropout)
        self.width_prior_embeddings = nn.Embedding(c.max_span_width, fs)  # learned prior over widths
        self.width_scorer = _ffnn(fs, c.ffnn_size, c.ffnn_depth, 1, c.dropout)
        self.coarse_bilinear = nn.Linear(d, d)  # s_c(i, j) = g_i^T W g_j
        self.distance_prior_embeddings = nn.Embedding(10, fs)
        self.distance_prior = nn.Linear(fs, 1)
        self.distance_embeddings = nn.Embedding(10, fs)  # φ(i, j): bucketed distance
        self.speaker_embeddings = nn.Embedding(2, fs)  # same speaker or not
        self.genre_embeddings = nn.Embedding(len(GENRES), fs)
        # released `independent.py`: the segment distance of a pair, clipped to [0, max_training_segments
        # - 1], one embedding row per value, a fourth part of φ(i, j)
        self.segment_distance_embeddings = (
            nn.Embedding(c.max_training_segments, fs) if c.use_segment_distance else None
        )
        n_features = 4 if c.use_segment_distance else 3
        self.pair_scorer = _ffnn(3 * d + n_features * fs, c.ffnn_size, c.ffnn_depth, 1, c.dropout)
        # f = σ(W [g_i, a_i]) (Lee et al. 2018, eq. 5); only with a second round: a parameter outside
        # the graph would stop DDP ("parameters that were not used in producing loss")
        self.refine_gate = nn.Linear(2 * d, d) if c.coref_depth > 1 else None
        if c.gradient_checkpointing:
            self.bert.set_gradient_checkpointing(True)

    # -------------------------------------------------------------- span representations
    def _head_logits(self, x: Tensor) -> Tensor:
        """α_t = w · x_t in float64, (N,): the head-attention logits of the tokens."""
        return self.head_attention(x).squeeze(-1).double()  # (N,)

    @staticmethod
    def _span_mean(values: Tensor, alpha: Tensor, starts: Tensor, ends: Tensor) -> Tensor:
        """Σ_{t in span} softmax(α)_t v_t for every span: (N, E) -> (C, E), exact at any logit gap.

        Fast path: prefix sums of exp(α - max α)·v in float64, O(N·E) memory instead of the
        reference's (C, 30, E) gather. A prefix-sum difference loses the digits of everything before
        the span: its relative error is about ε64 · κ with κ = Σ_{t<=end} e^α / Σ_{t in span} e^α,
        and e^(α - max α) underflows for a span far below the maximum. Both are measured per span
        exactly in log space (a masked logsumexp over the (C, L) window of the span's logits and a
        logcumsumexp), and the spans where the prefix sums cannot be trusted (κ > e^9, or the span's
        mass below e^-600 of the maximum) take the direct softmax over their window instead. In
        trained models such spans are rare, so the memory stays O(N·E + C·L).
        """
        n, c = alpha.shape[0], starts.shape[0]
        if c == 0:
            return values.new_zeros(0, values.shape[-1])
        width = int((ends - starts).max()) + 1
        offsets = torch.arange(width, device=starts.device)
        window = (starts[:, None] + offsets[None, :]).clamp(max=n - 1)  # (C, L)
        inside = offsets[None, :] <= (ends - starts)[:, None]  # (C, L)
        top = alpha.max().detach()
        with torch.no_grad():
            lse = torch.logsumexp(alpha[window].masked_fill(~inside, float("-inf")), 1)  # (C,) log Σ_span e^α
            kappa = torch.logcumsumexp(alpha, 0)[ends] - lse  # (C,) log κ >= 0
            exact = (kappa > 9.0) | (lse - top < -600.0)  # (C,)
        w = torch.exp(alpha - top)  # (N,) in (0, 1]
        num = F.pad(torch.cumsum(w[:, None] * values.double(), 0), (0, 0, 1, 0))  # (N+1, E)
        den = F.pad(torch.cumsum(w, 0), (1, 0))  # (N+1,)
        # the spans taken exactly get denominator 1 here, so their unused rows stay finite (no NaN
        # gradients through the branch that is not selected)
        den_span = torch.where(exact, torch.ones_like(lse), den[ends + 1] - den[starts])  # (C,)
        out = (num[ends + 1] - num[starts]) / den_span.clamp(min=1e-300)[:, None]  # (C, E)
        idx = torch.nonzero(exact).squeeze(1)  # (U,)
        if idx.numel():
            p = alpha[window[idx]].masked_fill(~inside[idx], float("-inf")).softmax(1)  # (U, L)
            direct = torch.einsum("ul,ule->ue", p, values.double()[window[idx]])  # (U, E)
            out = out.index_put((idx,), direct)
        return out.to(values.dtype)

    def span_embeddings(self, x: Tensor, starts: Tensor, ends: Tensor, width_table: Tensor | None = None) -> Tensor:
        """g = [x_start, x_end, Σ softmax(α)·x over the span, width embedding]: (C, D)."""
        width_table = self.span_width_embeddings.weight if width_table is None else width_table
        head = self._span_mean(x, self._head_logits(x), starts, ends)  # (C, H)
        return torch.cat([x[starts], x[ends], head, width_table[ends - starts]], -1)  # (C, D)

    def mention_scores(self, x: Tensor, starts: Tensor, ends: Tensor, width_table: Tensor) -> Tensor:
        """FFNN_m(g) for every candidate without building g: (C,).

        The first layer is linear, so W·g = W_s x_start + W_e x_end + Σ softmax(α)·(W_h x) + W_w φ(width):
        the token projections cost O(N·H·hidden) once, each candidate only O(hidden). Equal to
        ``mention_scorer(span_embeddings(...))`` (checked in the tests).
        """
        if self.config.ffnn_depth == 0:
            return self.mention_scorer(self.span_embeddings(x, starts, ends, width_table)).squeeze(-1)
        first: nn.Linear = self.mention_scorer[0]  # type: ignore[assignment]
        h_dim = x.shape[-1]
        w = first.weight  # (hidden, D)
        proj_s = x @ w[:, :h_dim].T  # (N, hidden)
        proj_e = x @ w[:, h_dim : 2 * h_dim].T
        proj_h = x @ w[:, 2 * h_dim : 3 * h_dim].T
        head = self._span_mean(proj_h, self._head_logits(x), starts, ends)  # (C, hidden)
        width = (width_table @ w[:, 3 * h_dim :].T)[ends - starts]  # (C, hidden)
        h = proj_s[starts] + proj_e[ends] + head + width + first.bias  # (C, hidden)
        return self.mention_scorer[1:](h).squeeze(-1)

    # -------------------------------------------------------------- pair scores
    def fine_scores(self, g: Tensor, antecedents: Tensor, phi: Tensor) -> Tensor:
        """FFNN([g_i, g_j, g_i∘g_j, φ(i,j)]) for the (k, K) pairs -> (k, K).

        The first layer is applied to the four parts separately (the same linear map), so the
        (k, K, 3D) concatenation is never built.
        """
        d = self.span_dim
        first: nn.Linear = self.pair_scorer[0] if self.config.ffnn_depth > 0 else None  # type: ignore[assignment]
        g_j = g[antecedents]  # (k, K, D)
        if first is None:
            return self.pair_scorer(torch.cat([g[:, None].expand_as(g_j), g_j, g[:, None] * g_j, phi], -1)).squeeze(-1)
        w = first.weight  # (hidden, 3D + 3F or 4F)
        h = (
            (g @ w[:, :d].T)[:, None]  # (k, 1, hidden)
            + (g @ w[:, d : 2 * d].T)[antecedents]  # (k, K, hidden)
            + (g[:, None] * g_j) @ w[:, 2 * d : 3 * d].T
            + phi @ w[:, 3 * d :].T
            + first.bias
        )
        return self.pair_scorer[1:](h).squeeze(-1)  # (k, K)

    def forward(self, input_ids: Tensor, attention_mask: Tensor, token_index: Tensor, sentence_map: Tensor,
                speaker_ids: Tensor, genre: Tensor, span_starts: Tensor, span_ends: Tensor,
                gold_starts: Tensor | None = None, gold_ends: Tensor | None = None,
                gold_cluster_ids: Tensor | None = None) -> dict[str, Tensor]:
        c = self.config
        hidden = self.bert(input_ids, attention_mask=attention_mask)  # (S, T, H)
        x = self.token_dropout(hidden.reshape(-1, hidden.shape[-1])[token_index])  # (N, H)
        n = x.shape[0]
        starts, ends = span_starts, span_ends  # (C,)
        width_table = self.dropout(self.span_width_embeddings.weight)  # (W, F)
        mention = self.mention_scores(x, starts, ends, width_table)  # (C,)
        mention = mention + self.width_scorer(self.width_prior_embeddings.weight).squeeze(-1)[ends - starts]

        # Gold entity of each candidate (0 = not a mention): span (s, e) -> id via a (N, N)-free hash.
        training = gold_starts is not None
        cand_cluster = torch.zeros_like(starts)
        if training and gold_starts.numel():
            cand_key = starts * n + ends  # (C,)
            gold_key = gold_starts * n + gold_ends  # (M,)
            match = cand_key[:, None] == gold_key[None, :]  # (C, M)
            cand_cluster = (match.long() * gold_cluster_ids[None, :]).max(1).values

        # Prune to λT spans, no two crossing (§4.1; Lee et al. 2017)
        k = max(1, min(int(math.floor(n * c.top_span_ratio)), c.max_top_spans, starts.numel()))
        top = prune_non_crossing(mention.detach(), starts, ends, k)  # (k,)
        k = top.numel()
        top_starts, top_ends, m = starts[top], ends[top], mention[top]  # (k,)
        g = self.span_embeddings(x, top_starts, top_ends, width_table)  # (k, D), only for the kept spans
        top_cluster = cand_cluster[top]  # (k,)

        # Coarse scores: bilinear + both mention scores + distance prior; only earlier spans.
        K = min(c.max_top_antecedents, k)
        offsets = torch.arange(k, device=g.device)[:, None] - torch.arange(k, device=g.device)[None, :]  # (k, k)
        valid = offsets >= 1
        # dropout on both sides, as the released `get_fast_antecedent_scores`
        coarse = (self.dropout(self.coarse_bilinear(g)) @ self.dropout(g).T) + m[:, None] + m[None, :]  # (k, k)
        prior = self.distance_prior(self.dropout(self.distance_prior_embeddings.weight)).squeeze(-1)  # (10,)
        coarse = coarse + prior[bucket_distance(offsets.clamp(min=0))]
        coarse = coarse.masked_fill(~valid, float("-inf"))
        coarse_top, antecedents = torch.topk(coarse, K, dim=1)  # (k, K)
        ante_mask = torch.isfinite(coarse_top)  # (k, K): early spans have fewer than K antecedents
        coarse_top = coarse_top.masked_fill(~ante_mask, -1e4)

        # φ(i, j): same speaker, genre, bucketed distance (, segment distance)
        speaker = speaker_ids[top_starts]  # (k,)
        same_speaker = (speaker[:, None] == speaker[antecedents]).long()  # (k, K)
        distance = bucket_distance(torch.arange(k, device=g.device)[:, None] - antecedents)  # (k, K)
        features = [
            self.speaker_embeddings(same_speaker),
            self.genre_embeddings(genre.view(1, 1)).expand(k, K, -1),
            self.distance_embeddings(distance),
        ]
        if self.segment_distance_embeddings is not None:
            seg = segment_distance(token_index, input_ids.shape[1], top_starts, antecedents, c.max_training_segments)
            features.append(self.segment_distance_embeddings(seg))
        phi = self.dropout(torch.cat(features, -1))  # (k, K, 3F or 4F)

        dummy = torch.zeros(k, 1, dtype=g.dtype, device=g.device)
        for depth in range(c.coref_depth):
            scores = coarse_top + self.fine_scores(g, antecedents, phi)  # (k, K)
            scores = torch.cat([dummy, scores], 1)  # (k, K+1)
            if depth + 1 < c.coref_depth:  # higher-order refinement (Lee et al. 2018 §3)
                p = scores.softmax(-1)  # (k, K+1); the dummy's share stays on g_i itself
                # a_i = p_ε g_i + Σ_j p_j g_j, as a (k, k) matrix product rather than a (k, K, D) gather
                attn = torch.zeros(k, k, dtype=p.dtype, device=p.device).scatter_add(1, antecedents, p[:, 1:])
                a = p[:, :1] * g + attn @ g  # (k, D)
                assert self.refine_gate is not None
                f = torch.sigmoid(self.refine_gate(torch.cat([g, a], -1)))
                g = f * a + (1 - f) * g

        out: dict[str, Tensor] = {
            "top_starts": top_starts,
            "top_ends": top_ends,
            "top_mention_scores": m,
            "antecedents": antecedents,
            "antecedent_scores": scores,
        }
        if training:
            # Marginal log-likelihood of all gold antecedents; the dummy is gold when there is none.
            same = (top_cluster[antecedents] == top_cluster[:, None]) & (top_cluster[:, None] > 0) & ante_mask
            gold = torch.cat([~same.any(1, keepdim=True), same], 1)  # (k, K+1)
            log_norm = torch.logsumexp(scores, 1)
            log_gold = torch.logsumexp(scores.masked_fill(~gold, float("-inf")), 1)
            coref_loss = (log_norm - log_gold).sum()
            out["coref_loss"] = coref_loss.detach()
            loss = coref_loss
            if self.predicts_singletons:
                # Mention detection loss on every candidate, so lone mentions can be output.
                mention_loss = F.binary_cross_entropy_with_logits(
                    mention, (cand_cluster > 0).to(mention.dtype), reduction="sum"
                )
                out["mention_loss"] = mention_loss.detach()
                loss = loss + mention_loss
            out["loss"] = loss
        return out

    @property
    def predicts_singletons(self) -> bool:
        return self.config.singletons == "true"


def decode_clusters(out: dict[str, Tensor], word_map: np.ndarray, singletons: bool) -> list[list[Span]]:
    """Link every kept span to its best antecedent (or none) and return word-span clusters.

    With ``singletons``, a kept span that is linked to nothing and has a positive mention score is an
    entity of its own (LitBank annotates singletons).
    """
    starts = out["top_starts"].cpu().numpy()
    ends = out["top_ends"].cpu().numpy()
    antecedents = out["antecedents"].cpu().numpy()
    best = out["antecedent_scores"].float().argmax(1).cpu().numpy() - 1  # -1 = dummy
    mention = out["top_mention_scores"].float().cpu().numpy()
    cluster_of: dict[int, int] = {}
    clusters: list[list[int]] = []
    for i in range(len(starts)):
        if best[i] < 0:
            continue
        j = int(antecedents[i, best[i]])
        if j not in cluster_of:
            cluster_of[j] = len(clusters)
            clusters.append([j])
        cluster_of[i] = cluster_of[j]
        clusters[cluster_of[i]].append(i)
    if singletons:
        for i in range(len(starts)):
            if i not in cluster_of and mention[i] > 0:
                cluster_of[i] = len(clusters)
                clusters.append([i])
    out_clusters = []
    for cl in clusters:
        spans = sorted({(int(word_map[starts[i]]), int(word_map[ends[i]])) for i in cl})
        out_clusters.append(spans)
    return sorted(out_clusters)


