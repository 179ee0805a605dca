"""The cloze-driven two-tower model (Baevski, Edunov, Liu, Zettlemoyer, Auli; EMNLP 2019), in one file.

Read it top to bottom: config and presets, the building blocks (sinusoidal positions, attention with
an extra zero state, pre-LayerNorm blocks), the character-CNN word input, the two towers and the
combination module (`TwoTowerModel`), the three pre-training objectives (cloze, bilm, cloze-bilm),
the model as a fine-tuning encoder (`TwoTowerEncoder`: the family protocol of `spanbert.families`,
with the paper's fine-tuning habits), its pre-training blocks and batches (`ClozeBlocks`, `cloze_collate`:
the sampler `samplers.SAMPLERS["cloze"]` names), its tokenizers, the paper's optimiser and schedule,
saving and loading. `spanbert.pretrain` builds the `--system cloze|bilm|cloze-bilm` presets from these parts.

Notation follows the paper (§3): a sample t_1..t_n wrapped in boundary markers; the forward tower's
state at token i is F_i (it has seen t_1..t_i), the backward tower's B_i (it has seen t_i..t_n). The
combination module predicts t_i from F_1..F_{i-1} and B_{i+1}..B_n, with the query F_{i-1} + B_{i+1}
(summed, base) or [F_{i-1}; B_{i+1}] (concatenated, large). docs/cloze.md lists where this differs
from the paper and from the released fairseq code.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from safetensors.torch import load_file
from torch import Tensor, nn

from spanbert.attention import attention
from spanbert.block_index import IndexSpec, example_index
from spanbert.checkpoints import save_folder
from spanbert.cloze_config import CLOZE_MODEL_TYPE, CLOZE_PRESETS, CLOZE_SYSTEMS, ClozeConfig, parse_model_spec
from spanbert.config import FinetuneHabits, replace_checked
from spanbert.config_json import check_ranges, check_settings, json_item, typed_fields
from spanbert.dropout import Dropout
from spanbert.errors import SpanBertError
from spanbert.model import grow_embedding
from spanbert.tokenization import (
    SPECIAL_TOKENS,
    UNK,
    Tokenizer,
    _build_pipeline,
    _hf,
    _iter_training_lines,
    byte_level_bpe,
    corpus_files,
    count_words,
    load_tokenizer,
)

MODEL_TYPE = CLOZE_MODEL_TYPE
SYSTEMS = CLOZE_SYSTEMS
"""`spanbert pretrain --system` values handled here (§6.3, Table 5)."""
BOUNDARY_TOKENS = ("<s>", "</s>", "<sep>")
"""Sample boundary markers (§3) and the pair separator added for fine-tuning (§4)."""
CHAR_PAD, CHAR_BOW, CHAR_EOW = 0, 1, 2  # character ids 3..258 are the UTF-8 bytes 0..255
CHAR_VOCAB = 259


# ---------------------------------------------------------------------------------------------
# config and presets (`ClozeConfig`, `CLOZE_PRESETS` and `parse_model_spec` are in `spanbert.cloze_config`)


def cloze_config(spec: str, **fields_: Any) -> ClozeConfig:
    """The `ClozeConfig` of a preset spec (`parse_model_spec`), then ``fields_`` (vocab and special ids)."""
    name, overrides = parse_model_spec(spec)
    cfg = ClozeConfig(**{**CLOZE_PRESETS[name], **fields_})
    for key, value in overrides.items():
        if key in ("char_filters", "adaptive_cutoffs"):  # lists: JSON on the command line
            try:
                value = json.loads(value.replace(";", ","))
            except ValueError:
                raise SpanBertError(
                    f"--model: found {key}={value!r}, expected a JSON list (use ; between items)"
                ) from None
            cfg = dataclasses.replace(cfg, **{key: value})
        else:
            cfg = replace_checked(cfg, {key: value}, source="--model")
    return cfg


def adaptive_cutoffs(vocab_size: int) -> list[int]:
    """Adaptive-softmax band ends for ``vocab_size`` types (§5.2, scaled down).

    The paper's bands: the 60K most frequent types at d, the next 160K at d/4 (256), the rest at d/16
    (64), for output vocabularies of 700K (base) and 1M (large). For a small vocabulary the same
    shares are kept (60/700 and 220/700 of the types), each band at least one type, and a band is
    dropped when nothing is left for it.
    """
    if vocab_size < 4:
        return []
    cuts = sorted({max(2, round(vocab_size * 60 / 700)), max(3, round(vocab_size * 220 / 700))})
    return [c for c in cuts if c < vocab_size - 1]


# ---------------------------------------------------------------------------------------------
# building blocks


def sinusoidal_positions(length: int, dim: int, device: torch.device | None = None) -> Tensor:
    """(length, dim) fixed sinusoidal position embeddings (§3.1), sines then cosines (fairseq's layout)."""
    half = dim // 2
    freq = torch.exp(torch.arange(half, dtype=torch.float32, device=device) * -(math.log(10000.0) / max(1, half - 1)))
    angles = torch.arange(length, dtype=torch.float32, device=device)[:, None] * freq[None, :]  # (T, d/2)
    pe = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
    if dim % 2:
        pe = F.pad(pe, (0, 1))
    return pe  # (T, d)


class Attention(nn.Module):
    """Multi-head attention over keys/values plus one extra zero state (§3: "an extra zero state over
    which the self-attention mechanism can attend"): a key and value of zeros after projection, which
    every query may attend to, so a query with nothing else allowed still has a distribution.

    The query may be wider than the keys (`q_dim`, the concatenated query of the large models), and
    the inner width is heads x (d // heads), so 12 heads over d = 1024 (Table 1, base) work.
    """

    def __init__(self, d: int, heads: int, dropout: float, q_dim: int | None = None):
        super().__init__()
        self.heads, self.head_dim = heads, d // heads
        inner = heads * self.head_dim
        self.q_proj = nn.Linear(q_dim or d, inner)
        self.k_proj = nn.Linear(d, inner)
        self.v_proj = nn.Linear(d, inner)
        self.out_proj = nn.Linear(inner, d)
        self.dropout_p = dropout  # attention-weight dropout (`spanbert.dropout.set_dropout` finds it by name)

    def forward(self, q: Tensor, kv: Tensor, allowed: Tensor) -> Tensor:
        """q (B, Tq, Dq), kv (B, Tk, d), allowed (B, Tq, Tk) bool (True = may attend) -> (B, Tq, d)."""
        B, Tq, _ = q.shape
        Tk = kv.shape[1]
        h, hd = self.heads, self.head_dim
        qh = self.q_proj(q).view(B, Tq, h, hd).transpose(1, 2)  # (B, h, Tq, hd)
        k = self.k_proj(kv).view(B, Tk, h, hd).transpose(1, 2)  # (B, h, Tk, hd)
        v = self.v_proj(kv).view(B, Tk, h, hd).transpose(1, 2)
        zero = k.new_zeros(B, h, 1, hd)
        k, v = torch.cat([zero, k], dim=2), torch.cat([zero, v], dim=2)  # (B, h, 1 + Tk, hd)
        mask = torch.cat([allowed.new_ones(B, Tq, 1), allowed], dim=2)[:, None]  # (B, 1, Tq, 1 + Tk)
        p = self.dropout_p if self.training else 0.0
        out = attention(qh, k, v, mask, p)  # (B, h, Tq, hd)
        return self.out_proj(out.transpose(1, 2).reshape(B, Tq, h * hd))


class FeedForward(nn.Module):
    """ReLU(W1 x + b1) W2 + b2 (§3.1), with ReLU dropout (§5.2)."""

    def __init__(self, d: int, ffn_dim: int, relu_dropout: float):
        super().__init__()
        self.fc1 = nn.Linear(d, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, d)
        self.relu_dropout = Dropout(relu_dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.relu_dropout(F.relu(self.fc1(x))))


class Block(nn.Module):
    """One tower block (§3.1): LayerNorm before self-attention and before the FFN, residual around each."""

    def __init__(self, cfg: ClozeConfig):
        super().__init__()
        d = cfg.d_model
        self.attn_norm = nn.LayerNorm(d)
        self.attn = Attention(d, cfg.num_heads, cfg.attention_dropout)
        self.ffn_norm = nn.LayerNorm(d)
        self.ffn = FeedForward(d, cfg.ffn_dim, cfg.relu_dropout)
        self.dropout = Dropout(cfg.dropout)

    def forward(self, x: Tensor, allowed: Tensor) -> Tensor:
        h = self.attn_norm(x)
        x = x + self.dropout(self.attn(h, h, allowed))
        return x + self.dropout(self.ffn(self.ffn_norm(x)))  # (B, T, d)


class Highway(nn.Module):
    """y = g * relu(W_h x) + (1 - g) * x, g = sigmoid(W_g x) (Srivastava et al., as Kim et al. 2016)."""

    def __init__(self, dim: int):
        super().__init__()
        self.proj = nn.Linear(dim, 2 * dim)
        nn.init.constant_(self.proj.bias[dim:], 1.0)  # gates start open towards the carry path

    def forward(self, x: Tensor) -> Tensor:
        h, g = self.proj(x).chunk(2, dim=-1)
        g = torch.sigmoid(g)
        return g * F.relu(h) + (1 - g) * x


class CharCNN(nn.Module):
    """Word embeddings from characters (§3.1, §5.2; Kim et al. 2016): character embeddings, one
    convolution per filter width, max over positions, ReLU, highway layer(s), projection to d."""

    def __init__(self, cfg: ClozeConfig):
        super().__init__()
        self.char_embed = nn.Embedding(CHAR_VOCAB, cfg.char_dim, padding_idx=CHAR_PAD)
        self.convs = nn.ModuleList(nn.Conv1d(cfg.char_dim, n, w) for w, n in cfg.char_filters)
        width = sum(n for _, n in cfg.char_filters)
        self.highways = nn.ModuleList(Highway(width) for _ in range(cfg.highway_layers))
        self.proj = nn.Linear(width, cfg.d_model)

    def forward(self, chars: Tensor) -> Tensor:
        """chars (W, C) character ids of W words -> (W, d)."""
        x = self.char_embed(chars).transpose(1, 2)  # (W, char_dim, C)
        x = torch.cat([F.relu(conv(x).max(dim=2).values) for conv in self.convs], dim=1)  # (W, width)
        for hw in self.highways:
            x = hw(x)
        return self.proj(x)


def word_characters(tokens: list[str], max_chars: int) -> Tensor:
    """(V, max_chars + 2) character ids of each vocabulary word: begin-of-word, its UTF-8 bytes (cut
    at ``max_chars``), end-of-word, padding."""
    out = torch.full((len(tokens), max_chars + 2), CHAR_PAD, dtype=torch.long)
    for i, tok in enumerate(tokens):
        b = list(tok.encode("utf-8"))[:max_chars]
        out[i, 0] = CHAR_BOW
        out[i, 1 : len(b) + 1] = torch.tensor([c + 3 for c in b], dtype=torch.long)
        out[i, len(b) + 1] = CHAR_EOW
    return out


# ---------------------------------------------------------------------------------------------
# the model


class TwoTowerModel(nn.Module):
    """Forward and backward towers over shared input embeddings, the combination module and the
    output classifier (§3, Figure 1). ``model(**batch)`` returns the pre-training loss of
    ``config.objective``; ``model.encode(...)`` returns the representations used for fine-tuning."""

    def __init__(self, config: ClozeConfig, word_chars: Tensor | None = None):
        super().__init__()
        config.__post_init__()
        if config.vocab_size < 2:
            raise SpanBertError(f"cloze model option vocab_size: found {config.vocab_size}, expected at least 2")
        self.config = cfg = config
        d = cfg.d_model
        self.embed_scale = math.sqrt(d)  # fairseq scales token embeddings by sqrt(d) before adding positions
        if cfg.input == "bpe":
            self.embed_tokens = nn.Embedding(cfg.vocab_size, d, padding_idx=cfg.pad_id)
            nn.init.normal_(self.embed_tokens.weight, std=d**-0.5)
            with torch.no_grad():
                self.embed_tokens.weight[cfg.pad_id].zero_()
        else:
            self.char_cnn = CharCNN(cfg)
            # (V, C) spelling of every output type: the CNN embeds a word from its characters (§3.1)
            if word_chars is None:
                word_chars = torch.zeros(cfg.vocab_size, cfg.max_word_chars + 2, dtype=torch.long)
            self.register_buffer("word_chars", word_chars.long(), persistent=True)
        self.embed_dropout = Dropout(cfg.dropout)
        self.forward_layers = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.backward_layers = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.gradient_checkpointing = False  # `TwoTowerEncoder.set_gradient_checkpointing`
        self.forward_norm = nn.LayerNorm(d)  # pre-LN stacks end with a norm: F^L, B^L are normalised
        self.backward_norm = nn.LayerNorm(d)
        self.has_combination = cfg.objective != "bilm"  # §6.3: bilm removes the combination module
        if self.has_combination:
            q_dim = 2 * d if cfg.query == "concat" else d
            self.combine_attn = Attention(d, cfg.final_heads, cfg.attention_dropout, q_dim=q_dim)
            self.combine_ffn_norm = nn.LayerNorm(d)
            self.combine_ffn = FeedForward(d, cfg.ffn_dim, cfg.relu_dropout)
            self.combine_norm = nn.LayerNorm(d)
            self.combine_dropout = Dropout(cfg.dropout)
        for module in self.modules():  # fairseq's initialisation of attention and FFN projections
            if isinstance(module, (Attention, FeedForward)):
                for lin in module.modules():
                    if isinstance(lin, nn.Linear):
                        nn.init.xavier_uniform_(lin.weight)
                        nn.init.zeros_(lin.bias)
        if cfg.input == "char_cnn":
            cutoffs = (
                list(cfg.adaptive_cutoffs) if cfg.adaptive_cutoffs is not None else adaptive_cutoffs(cfg.vocab_size)
            )
            # §5.2: head band at d, then d/4, then d/16 (div_value 4): 1024, 256, 64 at d = 1024
            self.adaptive_softmax = nn.AdaptiveLogSoftmaxWithLoss(d, cfg.vocab_size, cutoffs, div_value=4.0)

    @property
    def d_model(self) -> int:
        return self.config.d_model

    # -------------------------------------------------------------- input
    def embed(self, input_ids: Tensor) -> Tensor:
        """(B, T) ids -> (B, T, d): scaled token embedding + sinusoidal position (dropout is the caller's)."""
        if self.config.input == "bpe":
            x = self.embed_tokens(input_ids)
        else:
            # embed each distinct word once: the CNN is the costly part
            uniq, inverse = torch.unique(input_ids, return_inverse=True)
            x = self.char_cnn(self.word_chars[uniq])[inverse]  # (B, T, d)
        x = self.embed_scale * x + sinusoidal_positions(input_ids.shape[1], self.config.d_model, input_ids.device)
        return x

    # -------------------------------------------------------------- towers
    def towers(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> dict[str, Any]:
        """Run both towers. Returns ``embedded`` (B, T, d), ``forward`` F^L and ``backward`` B^L
        (B, T, d, normalised), ``layers`` [(F^l, B^l) per block], ``mask`` (B, T) bool."""
        B, T = input_ids.shape
        real = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
        pos = torch.arange(T, device=input_ids.device)
        # forward tower: token i attends to j <= i; backward: j >= i; never to padding
        fwd_allowed = (pos[None, :] <= pos[:, None])[None] & real[:, None, :]  # (B, T, T)
        bwd_allowed = (pos[None, :] >= pos[:, None])[None] & real[:, None, :]
        x0 = self.embed(input_ids)
        f = b = self.embed_dropout(x0)
        layers = []
        for fl, bl in zip(self.forward_layers, self.backward_layers):
            if self.gradient_checkpointing and self.training:  # dropout's RNG state is replayed in backward
                f = torch.utils.checkpoint.checkpoint(fl, f, fwd_allowed, use_reentrant=False)
                b = torch.utils.checkpoint.checkpoint(bl, b, bwd_allowed, use_reentrant=False)
            else:
                f, b = fl(f, fwd_allowed), bl(b, bwd_allowed)
            layers.append((f, b))
        return dict(embedded=x0, forward=self.forward_norm(f), backward=self.backward_norm(b), layers=layers, mask=real)

    # -------------------------------------------------------------- combination module
    def combine(self, fwd: Tensor, bwd: Tensor, real: Tensor, full_context: bool = False) -> Tensor:
        """The combination module (§3.2): token i's output from F_1..F_{i-1} and B_{i+1}..B_n, query
        F_{i-1} (+ or ;) B_{i+1}; ``full_context`` (fine-tuning, §4 "No Masking") lets every token
        attend to all forward and backward states. fwd, bwd (B, T, d); real (B, T) bool -> (B, T, d)."""
        B, T, d = fwd.shape
        fwd = fwd * real[..., None]  # padding states are zero: a query built from them carries nothing
        bwd = bwd * real[..., None]
        f_prev, b_next = bilm_inputs(fwd, bwd)  # (B, T, d) each: F_{i-1} (zero at i = 0), B_{i+1} (zero past the end)
        q = torch.cat([f_prev, b_next], dim=-1) if self.config.query == "concat" else f_prev + b_next
        kv = torch.cat([fwd, bwd], dim=1)  # (B, 2T, d): F_1..F_T then B_1..B_T
        keys_real = torch.cat([real, real], dim=1)[:, None, :]  # (B, 1, 2T)
        if full_context:
            allowed = keys_real.expand(B, T, 2 * T)
        else:
            pos = torch.arange(T, device=fwd.device)
            f_ok = pos[None, :] < pos[:, None]  # (T, T): F_j with j < i
            b_ok = pos[None, :] > pos[:, None]  # B_j with j > i
            allowed = torch.cat([f_ok, b_ok], dim=1)[None] & keys_real  # (B, T, 2T)
        # No residual around this attention (the released code's layer): the query holds neither
        # side's state at i, and the output should be what the attention found.
        x = self.combine_dropout(self.combine_attn(q, kv, allowed))
        x = x + self.combine_dropout(self.combine_ffn(self.combine_ffn_norm(x)))
        return self.combine_norm(x)  # (B, T, d): the representation f before the classifier

    # -------------------------------------------------------------- fine-tuning interface
    def encode(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, full_context: bool = True
    ) -> dict[str, Any]:
        """Representations for fine-tuning. ``input_ids`` (B, T) are already wrapped in <s> ... </s>.

        Returns ``hidden`` (B, T, d): the combination module's output f (§4: "the representations f
        just before the final softmax layer"), with all states visible when ``full_context`` (the
        towers below stay causal); ``layers``: the embedding layer, F^l + B^l of each block, then
        ``hidden`` (the layers an ELMo-style scalar mix combines). A bilm model (no combination
        module) gives F^L + B^L as ``hidden``. Padded positions are zero.
        """
        t = self.towers(input_ids, attention_mask)
        real = t["mask"][..., None]
        if self.has_combination:
            hidden = self.combine(t["forward"], t["backward"], t["mask"], full_context=full_context)
        else:
            hidden = t["forward"] + t["backward"]
        hidden = hidden * real
        layers = [t["embedded"] * real] + [(f + b) * real for f, b in t["layers"]] + [hidden]
        return {"hidden": hidden, "layers": layers, "forward": t["forward"], "backward": t["backward"]}

    # -------------------------------------------------------------- output classifier
    def _predict(self, h: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
        """h (N, d) states predicting targets (N,) -> (mean cross-entropy, accuracy); flat softmax with
        the input embeddings (bpe) or the adaptive softmax (char_cnn). Empty -> 0 (still in the graph)."""
        if targets.numel() == 0:
            zero = h.sum() * 0.0 + sum(p.sum() * 0.0 for p in self.parameters())
            return zero, zero.detach()
        if self.config.input == "bpe":
            logits = F.linear(h, self.embed_tokens.weight)  # (N, V): input and output embeddings shared
            loss = F.cross_entropy(logits.float(), targets)
            acc = (logits.argmax(-1) == targets).float().mean()
        else:
            # in fp32 outside autocast: torch's adaptive softmax writes the bands' log-probabilities
            # (autocast's dtype) into an fp32 buffer with index_copy_, which refuses mixed dtypes
            with torch.autocast(h.device.type, enabled=False):
                out = self.adaptive_softmax(h.float(), targets)
            # A tail band no target of this batch falls in gets no gradient; DDP requires every
            # parameter in the graph, so they join with weight 0.
            loss = out.loss + sum(p.sum() for p in self.adaptive_softmax.tail.parameters()) * 0.0
            with torch.no_grad():
                acc = (self.adaptive_softmax.predict(h.float()) == targets).float().mean()
        return loss, acc.detach()

    def _predict_at(self, h: Tensor, ids: Tensor, m: Tensor) -> tuple[Tensor, Tensor]:
        """h (B, T, d) states predicting ids (B, T) where m (B, T) -> (mean cross-entropy, accuracy).

        bpe: every position's logits, the others ignored (-100) and the mean taken as sum / count, so
        no host sync (a boolean selection's size is a value); char_cnn selects the rows (the adaptive
        softmax takes its targets' rows, and its bands' sizes are values: one sync either way)."""
        if self.config.input != "bpe":
            return self._predict(h[m], ids[m])
        logits = F.linear(h, self.embed_tokens.weight).float()  # (B, T, V): input and output embeddings shared
        targets = ids.masked_fill(~m, -100)  # (B, T)
        count = m.sum().clamp(min=1)  # no targets: loss 0, still in the graph
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100, reduction="sum") / count
        with torch.no_grad():
            acc = ((logits.argmax(-1) == ids) & m).sum() / count
        return loss, acc

    def log_probs(self, hidden: Tensor) -> Tensor:
        """(..., d) -> (..., V) log-probabilities of the output classifier (for inspection and `fill`)."""
        if self.config.input == "bpe":
            return F.log_softmax(F.linear(hidden, self.embed_tokens.weight).float(), dim=-1)
        flat = hidden.reshape(-1, hidden.shape[-1]).float()
        with torch.autocast(flat.device.type, enabled=False):  # as in `_predict`
            return self.adaptive_softmax.log_prob(flat).view(*hidden.shape[:-1], -1)

    # -------------------------------------------------------------- pre-training
    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, **_: Any) -> dict[str, Any]:
        """Pre-training loss of ``config.objective`` on a batch of <s> ... </s> samples.

        Targets (`target_masks`): cloze predicts every token between the markers (§3.2: "we predict
        every token in this way"); the forward tower's state i predicts token i+1 and the backward
        tower's state i token i-1 (bilm), the markers included as targets, never as predictors' own
        input. ``loss_terms`` hold each term's mean over its targets (the bilm terms times
        ``bilm_weight`` in cloze-bilm), for the trainer's exact weighting by `count_targets`.
        """
        cfg = self.config
        t = self.towers(input_ids, attention_mask)
        masks = target_masks(t["mask"])
        out: dict[str, Any] = {}
        terms: dict[str, Tensor] = {}
        if cfg.objective in ("cloze", "cloze-bilm"):
            hidden = self.combine(t["forward"], t["backward"], t["mask"], full_context=False)
            loss, acc = self._predict_at(hidden, input_ids, masks["cloze"])
            terms["cloze"], out["cloze_loss"], out["cloze_acc"] = loss, loss.detach(), acc
        if cfg.objective in ("bilm", "cloze-bilm"):
            weight = cfg.bilm_weight if cfg.objective == "cloze-bilm" else 1.0
            f_prev, b_next = bilm_inputs(t["forward"], t["backward"])
            lf, af = self._predict_at(f_prev, input_ids, masks["bilm_fwd"])  # masks: (B, T) at the targets
            lb, ab = self._predict_at(b_next, input_ids, masks["bilm_bwd"])
            terms["bilm_fwd"], terms["bilm_bwd"] = weight * lf, weight * lb
            out.update(bilm_fwd_loss=lf.detach(), bilm_fwd_acc=af, bilm_bwd_loss=lb.detach(), bilm_bwd_acc=ab)
        out["loss"] = sum(terms.values())
        out["loss_terms"] = terms
        return out

    # -------------------------------------------------------------- saving
    def save_pretrained(self, path: str | Path, tokenizer: Any = None, extra: dict[str, Any] | None = None) -> None:
        """Write an HF-like folder: config.json ("model_type": "cloze-two-tower"), model.safetensors and
        the tokenizer files (`save_tokenizer`), as one atomic folder (`spanbert.checkpoints.save_folder`:
        it replaces an earlier model's folder whole and refuses a folder of other files)."""
        config_json = {
            "model_type": MODEL_TYPE,
            "architectures": ["TwoTowerModel"],
            **dataclasses.asdict(self.config),
            "spanbert": dict(extra or {}),
        }
        save_folder(path, self.state_dict(), config_json, tokenizer=tokenizer)


# ---------------------------------------------------------------------------------------------
# the model as a fine-tuning encoder (§4): the family protocol of `spanbert.families`

FINETUNE_HABITS = FinetuneHabits(
    init_std=0.02,
    zero_init_head=True,  # §4: "initialize all weights as well as the bias to zero"
    output_scale=16.0,  # §4: the LM output is multiplied by 16 (a larger rate for the new weights)
    head_dropout=0.1,  # §4: dropout 0.1 before the projection ...
    encoder_dropout=0.0,  # ... "we disable dropout in the language model" (sentence tasks)
    tagger="bilstm-crf",  # §6.2.1: projection, one biLSTM layer, a CRF
    # §4: a cosine schedule warming up from 1e-7 over 10% of the updates and annealing to 1e-6; Adam
    # without weight decay; batches of 16. The paper states no gradient clipping for fine-tuning: none here (with the
    # x16 output scale, clipping the global norm at 1 would rescale the encoder's gradients by ~0.03).
    training=(
        ("lr_scheduler_type", "cosine"), ("warmup_ratio", 0.1), ("warmup_init_lr", 1e-7), ("min_lr", 1e-6),
        ("weight_decay", 0.0), ("max_grad_norm", 0.0), ("per_device_train_batch_size", 16),
    ),
    sweep_learning_rates=(1e-4, 5e-5, 3e-5),  # §4: "the best value over three settings"
    sweep_batch_sizes=(16,),  # §4: batch 16
    parse_learning_rates=(8e-4, 8e-3),  # §6.2.2: language model 8E-04, parsing model 8E-03
)  # fmt: skip
"""The two-tower model's fine-tuning recipe (§4, §6.2.1), as defaults of the shared task heads."""

MAX_POSITIONS = 4096
"""The longest input tasks may frame: positions are sinusoidal (no table), so this only bounds the
quadratic attention cost; §5.1 pre-trains on blocks of up to 512 tokens."""


class TwoTowerEncoder(nn.Module):
    """The two-tower model as every task sees it (§4): token states are the combination module's output
    with every forward and backward state visible ("No Masking"), the towers below staying causal.

    A task's input is framed ``<s> a </s>`` or ``<s> a <sep> b </s>`` (`frame`); the sentence vector is
    the concatenation of the states at ``<s>``, ``</s>`` and the first ``<sep>`` (zeros without one), so
    one output layer serves single texts and pairs (§4's W1 and W2: with a zero-initialised projection the
    zero third of a single text's vector never receives weight). The pre-training output classifier is
    kept (it is tied to the input embeddings for BPE input) but never used: the character model's
    adaptive softmax is frozen, so no optimiser or DDP sees it.
    """

    model_type = MODEL_TYPE

    def __init__(self, lm: TwoTowerModel):
        super().__init__()
        self.lm = lm
        if hasattr(lm, "adaptive_softmax"):
            lm.adaptive_softmax.requires_grad_(False)

    @property
    def config(self) -> ClozeConfig:
        return self.lm.config

    @property
    def hidden_size(self) -> int:
        return self.lm.config.d_model

    @property
    def sentence_size(self) -> int:
        return 3 * self.lm.config.d_model

    @property
    def num_layers(self) -> int:
        """Layer states beyond the embeddings: each tower block (F^l + B^l) and the combination output."""
        return self.lm.config.num_layers + 1

    @property
    def max_positions(self) -> int:
        return MAX_POSITIONS

    @property
    def vocab_size(self) -> int:
        return self.lm.config.vocab_size

    @property
    def ffn_size(self) -> int:
        return self.lm.config.ffn_dim

    @property
    def habits(self) -> FinetuneHabits:
        return FINETUNE_HABITS

    def set_gradient_checkpointing(self, enabled: bool = True) -> None:
        """Recompute each tower block's activations in the backward pass: less memory, more compute."""
        self.lm.gradient_checkpointing = enabled

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                output_hidden_states: bool = False) -> Tensor | tuple[Tensor, ...]:
        """(B, T, d) token states; with ``output_hidden_states`` the embeddings, F^l + B^l of each block and
        the output: num_layers + 1 tensors (B, T, d). ``token_type_ids`` is unused (no segment embeddings:
        pairs are told apart by ``<sep>``). Padded positions are zero."""
        if input_ids.shape[1] > MAX_POSITIONS:
            raise SpanBertError(f"sequence of {input_ids.shape[1]} tokens is longer than {MAX_POSITIONS}")
        out = self.lm.encode(input_ids, attention_mask, full_context=True)
        return tuple(out["layers"]) if output_hidden_states else out["hidden"]

    def sentence(self, hidden: Tensor, attention_mask: Tensor | None = None, input_ids: Tensor | None = None) -> Tensor:
        """[h(<s>); h(</s>); h(<sep>)] (B, 3d) (§4; zeros for the third part of a single text)."""
        B, T, d = hidden.shape
        rows = torch.arange(B, device=hidden.device)
        if attention_mask is None:
            last = torch.full((B,), T - 1, dtype=torch.long, device=hidden.device)
        else:
            last = attention_mask.long().sum(1) - 1  # (B,) the closing </s> (right padding)
        if input_ids is None:
            sep = hidden.new_zeros(B, d)
        else:
            is_sep = input_ids == self.lm.config.sep_id  # (B, T)
            sep = hidden[rows, is_sep.long().argmax(1)] * is_sep.any(1, keepdim=True).to(hidden.dtype)  # (B, d)
        return torch.cat([hidden[:, 0], hidden[rows, last], sep], dim=-1)  # (B, 3d)

    def frame(self, tokenizer: Any) -> Any:
        """The tokenizer with ``cls_id`` = <s>, ``mid_id`` = <sep>, ``sep_id`` = </s> (§3, §4)."""
        return frame_tokenizer(self.lm.config, tokenizer)

    def config_json(self) -> dict[str, Any]:
        return {"model_type": MODEL_TYPE, **dataclasses.asdict(self.lm.config)}

    def resize_token_embeddings(self, vocab_size: int) -> None:
        """Grow the (tied) token embeddings for added tokens (relation extraction's entity markers)."""
        cfg = self.lm.config
        if vocab_size <= cfg.vocab_size:
            return
        if cfg.input != "bpe":
            raise SpanBertError(
                f"adding tokens to a two-tower model with input {cfg.input!r}: found a word vocabulary spelled "
                "by the character CNN, expected input bpe (the new tokens have no spelling to embed)"
            )
        self.lm.embed_tokens = grow_embedding(self.lm.embed_tokens, vocab_size, lambda w: w.normal_(0.0, cfg.d_model**-0.5))
        cfg.vocab_size = vocab_size


def frame_tokenizer(cfg: ClozeConfig, tokenizer: Any) -> Any:
    """``tokenizer`` framing task inputs as ``<s> a </s>`` and ``<s> a <sep> b </s>`` (§4)."""
    return tokenizer.framed(cfg.bos_id, cfg.sep_id, cfg.eos_id)


CONFIG_REQUIRED = ("vocab_size", "d_model", "num_layers", "num_heads", "ffn_dim", "final_heads", "input")
"""The keys a two-tower config.json must have: the sizes and the input kind; every other key has the
default every spanbert save writes anyway."""


def config_from_json(raw: dict[str, Any], source: str = "config.json") -> ClozeConfig:
    """The `ClozeConfig` of a saved config.json, read strictly: the sizes must be there (a missing one is
    an error naming ``source`` and the key, not a default that builds another model), every known key is
    type-checked and range-checked, each error starts with ``source``; unknown keys (HF label keys,
    spanbert's own ``spanbert`` section) are ignored."""
    where = f"{source}: "
    check_settings(raw, where, "two-tower", "a two-tower model", CONFIG_REQUIRED)
    kwargs = typed_fields(ClozeConfig, raw, where, skip=("char_filters", "adaptive_cutoffs"))
    for key in ("char_filters", "adaptive_cutoffs"):
        value = raw.get(key)
        if value is None:
            continue
        flat = value if key == "adaptive_cutoffs" else [x for pair in value for x in (pair if isinstance(pair, list) else [None])]
        if not isinstance(value, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in flat):
            raise SpanBertError(f"{where}found {json_item(key, value)}, expected a list of "
                                + ("[width, filters] integer pairs" if key == "char_filters" else "integers"))  # fmt: skip
        kwargs[key] = value
    check_ranges(kwargs, where, positive=("vocab_size",))
    for key in ("pad_id", "bos_id", "eos_id", "sep_id"):
        if key in kwargs and not 0 <= kwargs[key] < kwargs["vocab_size"]:
            raise SpanBertError(
                f"{where}found {json_item(key, kwargs[key])}, expected an id of the vocabulary (0 to {kwargs['vocab_size'] - 1})"
            )
    try:
        return ClozeConfig(**kwargs)
    except SpanBertError as e:  # the range checks of the dataclass, named by the file
        raise SpanBertError(f"{where}{str(e).replace('cloze model option ', '')}") from None


def encoder_from_config(raw: dict[str, Any], source: str = "config.json") -> TwoTowerEncoder:
    """An encoder of the saved architecture, weights freshly initialised (then loaded by the caller)."""
    return TwoTowerEncoder(TwoTowerModel(config_from_json(raw, source)))


def encoder_state(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """A checkpoint's weights in `TwoTowerEncoder`'s names: a pre-trained folder's `TwoTowerModel` keys
    get ``lm.``; a fine-tuned folder's ``bert.lm.*`` lose ``bert.`` and its head is dropped."""
    if any(k.startswith("bert.lm.") for k in state):
        return {k[len("bert.") :]: v for k, v in state.items() if k.startswith("bert.lm.")}
    return {"lm." + k: v for k, v in state.items()}


def bilm_inputs(fwd: Tensor, bwd: Tensor) -> tuple[Tensor, Tensor]:
    """The states that predict token i in the bilm loss (§6.3), aligned with i: F_{i-1} (the forward
    tower's next-token prediction) and B_{i+1} (the backward tower's); zeros where none exists.
    fwd, bwd (B, T, d) -> two (B, T, d)."""
    zeros = fwd.new_zeros(fwd.shape[0], 1, fwd.shape[2])
    return torch.cat([zeros, fwd[:, :-1]], dim=1), torch.cat([bwd[:, 1:], zeros], dim=1)


def target_masks(real: Tensor) -> dict[str, Tensor]:
    """(B, T) bool of real tokens (each row <s> t_1..t_n </s> then padding) -> the target positions
    of each loss term: ``cloze`` the tokens between the markers; ``bilm_fwd`` positions 1..last
    (predicted from the forward state before them); ``bilm_bwd`` positions 0..last-1 (from the
    backward state after them)."""
    lengths = real.long().sum(1, keepdim=True)  # (B, 1)
    pos = torch.arange(real.shape[1], device=real.device)[None, :]
    inner = (pos >= 1) & (pos <= lengths - 2)
    return {"cloze": inner, "bilm_fwd": (pos >= 1) & (pos <= lengths - 1), "bilm_bwd": pos <= lengths - 2}


def count_targets(batch: dict[str, Any], objective: str = "cloze") -> dict[str, int]:
    """Targets of each loss term in a collated batch (the trainer's ``count_targets``; keys match
    the model's ``loss_terms``)."""
    ids = batch["input_ids"]
    real = batch.get("attention_mask")
    lengths = (ids.new_full((ids.shape[0],), ids.shape[1]) if real is None else real.long().sum(1)).long()
    out = {}
    if objective in ("cloze", "cloze-bilm"):
        out["cloze"] = int((lengths - 2).clamp(min=0).sum())
    if objective in ("bilm", "cloze-bilm"):
        n = int((lengths - 1).clamp(min=0).sum())
        out["bilm_fwd"] = out["bilm_bwd"] = n
    return out


def flops_per_token(cfg: ClozeConfig, seq_len: int) -> float:
    """Training FLOPs per token of the two-tower model (forward + backward = 3x the forward matmul
    FLOPs), counted as `spanbert.model.flops_per_token` counts SpanBERT's: 2 per multiply-add of the
    projections, QK^T and AV over the full length (a causal mask saves nothing in a dense kernel),
    the output classifier at every predicted token (cloze: all; bilm: both towers, each all)."""
    d, f, N, V, T = cfg.d_model, cfg.ffn_dim, cfg.num_layers, cfg.vocab_size, seq_len
    block = 2 * (4 * d * d + 2 * d * f) + 2 * 2 * (T + 1) * d  # +1: the zero state
    total = 2 * N * block  # two towers
    heads = 0.0
    if cfg.objective != "bilm":
        dq = 2 * d if cfg.query == "concat" else d
        total += 2 * (dq * d + 3 * d * d + 2 * d * f) + 2 * 2 * (2 * T + 1) * d  # attends over 2T states
        heads += 2 * d * V
    if cfg.objective != "cloze":
        heads += 2 * (2 * d * V)
    if cfg.input == "char_cnn" and V:  # the adaptive softmax computes the head band always, tails only when needed
        # (V is 0 before the word vocabulary exists: the long-plan check before any work counts no head)
        heads = heads * (adaptive_cutoffs(V)[0] if adaptive_cutoffs(V) else V) / V
    return 3 * (total + heads)


# ---------------------------------------------------------------------------------------------
# the family's pre-training blocks and batches (its sampler: `samplers.SAMPLERS["cloze"]`)


class ClozeBlocks(torch.utils.data.Dataset):
    """Blocks of documents [d0, d1) of a `TokenCorpus`, each wrapped in boundary markers (two-tower
    paper §3: "samples are prepended and appended with sample boundary markers"). No masking, no
    randomness: every token of a block is a target, so an item is the same in every epoch."""

    def __init__(self, corpus: Any, documents: tuple[int, int], max_seq_length: int, bos_id: int, eos_id: int,
                 packing: str = "sentences", limit: int | None = None):  # fmt: skip
        # the blocks of `blocks.sentence_blocks` / `single_segment_blocks`, cached in the corpus folder
        spec = IndexSpec("single", max_seq_length, packing, (int(documents[0]), int(documents[1])))
        index = example_index(corpus, spec)
        self.corpus, self.blocks = corpus, index.rows[:limit]  # (N, 2) (limit None: all)
        self._lengths = index.lengths[:limit]
        self.plan_cache = index.path if limit is None else None  # the trainer's epoch orders go beside it
        self.bos_id, self.eos_id = bos_id, eos_id

    def __len__(self) -> int:
        return len(self.blocks)

    def lengths(self) -> np.ndarray:
        """(N,) tokens of each item, markers included (the trainer's token-budget batching): the index's."""
        return self._lengths

    def set_epoch(self, epoch: int) -> None:
        pass  # every epoch reads the same items

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        s, e = self.blocks[i].tolist()
        ids, _ = self.corpus.tokens(s, e)
        return {"input_ids": np.concatenate([[self.bos_id], ids.astype(np.int64), [self.eos_id]])}


def cloze_collate(items: list[dict[str, np.ndarray]], pad_id: int, pad_to: int | None = None) -> dict[str, Any]:
    """The two-tower batch (`ClozeBlocks` items): pad to the longest item (or ``pad_to``):
    ``input_ids`` (B, T) and ``attention_mask`` (B, T)."""

    T = max(len(x["input_ids"]) for x in items)
    T = max(T, pad_to or 0)
    ids = torch.full((len(items), T), pad_id, dtype=torch.long)
    mask = torch.zeros((len(items), T), dtype=torch.long)
    for r, x in enumerate(items):
        n = len(x["input_ids"])
        ids[r, :n] = torch.from_numpy(np.asarray(x["input_ids"], dtype=np.int64))
        mask[r, :n] = 1
    return {"input_ids": ids, "attention_mask": mask}


def build_blocks(corpus: Any, tok: Any, documents: tuple[int, int], cut: Any) -> ClozeBlocks:
    """The sampler's build (`samplers.Sampler`): documents [d0, d1) cut as ``cut`` says, in <s> ... </s>."""
    bos, eos = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    return ClozeBlocks(corpus, documents, cut.max_seq_length, bos_id=bos, eos_id=eos, packing=cut.block_packing)


def collate_blocks(items: list[dict[str, np.ndarray]], pad_id: int, max_predictions: int | None = None,
                   pad_to: int | None = None) -> dict[str, Any]:  # fmt: skip
    """The sampler's collate: `cloze_collate` (every token is a target: no prediction cap)."""
    return cloze_collate(items, pad_id=pad_id, pad_to=pad_to)


# ---------------------------------------------------------------------------------------------
# tokenizers: BPE (default) or words (char_cnn input), both with the boundary markers


def with_boundary_tokens(tok: Any) -> Any:
    """``tok`` with <s>, </s> and <sep> as special tokens (added at the end when missing; ids of the
    existing tokens unchanged)."""
    missing = [t for t in BOUNDARY_TOKENS if tok.token_to_id(t) is None]
    return tok.with_added_tokens(missing) if missing else tok


def special_ids(tok: Any) -> dict[str, int]:
    """The `ClozeConfig` special-token fields of a tokenizer that has the boundary markers."""
    return dict(
        pad_id=tok.pad_id,
        bos_id=tok.token_to_id("<s>"),
        eos_id=tok.token_to_id("</s>"),
        sep_id=tok.token_to_id("<sep>"),
    )


def train_cloze_tokenizer(
    files: list[Any] | None,
    vocab_size: int,
    kind: str = "bpe",
    output_dir: str | Path | None = None,
    texts: list[str] | None = None,
) -> Any:
    """Train the input vocabulary on a corpus: byte-level BPE (``kind="bpe"``, HF `tokenizers`'
    BpeTrainer, §5.2's BPE model) or whole words (``kind="words"``, the output vocabulary of the
    character-CNN models: the most frequent words after BERT's normalizer and pre-tokenizer, ties by
    the word itself). Special tokens: BERT's five ([PAD] = 0, the ids the data pipeline expects),
    then <s>, </s>, <sep>.

    Reproducibility: the word vocabulary is deterministic (counts, then a fixed tie rule). HF's BPE
    trainer is not bit-reproducible across processes (ties in hash-map order, see docs/tokenizer.md):
    the run's tokenizer is therefore trained once, on rank 0, saved with the run and reused on resume.
    """
    t = _hf()
    specials = list(SPECIAL_TOKENS) + list(BOUNDARY_TOKENS)
    if vocab_size < len(specials) + 1:
        raise SpanBertError(
            f"--vocab_size: found {vocab_size}, expected at least {len(specials) + 1} ({len(specials)} special tokens + 1)"
        )
    if texts is None:
        paths = corpus_files(files or [])
        lines = list(_iter_training_lines(paths))
        if not lines:
            raise SpanBertError(
                f"{', '.join(map(str, files or []))}: found no text, expected a corpus to train the vocabulary on"
            )
    else:
        lines = list(texts)
    if kind == "bpe":
        hf = byte_level_bpe(lines, vocab_size, specials)
    elif kind == "words":
        pipe = t.Tokenizer(t.models.WordLevel(vocab={UNK: 0}, unk_token=UNK))
        _build_pipeline(pipe, False)
        counts = count_words(lines, pipe.normalizer, pipe.pre_tokenizer)
        words = sorted(counts, key=lambda w: (-counts[w], w))[: vocab_size - len(specials)]
        vocab = {w: i for i, w in enumerate(specials + [w for w in words if w not in specials])}
        hf = t.Tokenizer(t.models.WordLevel(vocab=vocab, unk_token=UNK))
        _build_pipeline(hf, False)
        hf.decoder = None
        hf.add_special_tokens(specials)
    else:
        raise SpanBertError(f"tokenizer kind: found {kind!r}, expected bpe or words")
    tok = Tokenizer(hf)
    if output_dir is not None:
        save_tokenizer(tok, output_dir)
    return tok


def save_tokenizer(tok: Any, path: str | Path) -> None:
    """`Tokenizer.save`: a BPE or word tokenizer is not a `BertTokenizer` (its vocab.txt is not a
    WordPiece vocabulary), so its tokenizer_config.json makes `transformers.AutoTokenizer` read
    tokenizer.json instead."""
    tok.save(Path(path))


def vocabulary_strings(tok: Any) -> list[str]:
    """Token string of every id (for the character CNN's spelling table); ids without a token are ''."""
    out = [""] * tok.vocab_size
    for token, i in tok.get_vocab().items():
        out[i] = token
    return out


def build_model(cfg: ClozeConfig, tok: Any) -> TwoTowerModel:
    """A fresh model for tokenizer ``tok`` (its size and special ids; the character table for char_cnn)."""
    cfg = dataclasses.replace(cfg, vocab_size=tok.vocab_size, **special_ids(tok))
    chars = word_characters(vocabulary_strings(tok), cfg.max_word_chars) if cfg.input == "char_cnn" else None
    return TwoTowerModel(cfg, word_chars=chars)


def load_two_tower(path: str | Path) -> tuple[TwoTowerModel, Any]:
    """(model in eval mode, tokenizer) from a folder written by `TwoTowerModel.save_pretrained`."""


    path = Path(path)
    cfg_path = path / "config.json"
    if not cfg_path.is_file():
        raise SpanBertError(f"{path}: no config.json (expected a folder written by spanbert pretrain --system cloze)")
    try:
        raw = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise SpanBertError(
            f"{cfg_path}: found unreadable JSON ({str(e).splitlines()[0]}), expected a model config"
        ) from None
    if not isinstance(raw, dict) or raw.get("model_type") != MODEL_TYPE:
        found = raw.get("model_type") if isinstance(raw, dict) else type(raw).__name__
        raise SpanBertError(f"{cfg_path}: found model_type {found!r}, expected {MODEL_TYPE!r}")
    cfg = config_from_json(raw, str(cfg_path))
    weights = path / "model.safetensors"
    if not weights.is_file():
        raise SpanBertError(f"{path}: no weights (expected model.safetensors)")
    try:
        state = load_file(str(weights))
    except Exception as e:  # noqa: BLE001 -- safetensors raises its own error types on a bad file
        raise SpanBertError(f"{weights}: found {str(e).splitlines()[0]}, expected a safetensors weights file") from None
    model = TwoTowerModel(cfg, word_chars=state.get("word_chars"))
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise SpanBertError(
            f"{weights}: found weights that do not fit the config (missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    return model.eval(), load_tokenizer(path)


# ---------------------------------------------------------------------------------------------
# the paper's optimiser (§5.2)

PAPER_MOMENTUM = 0.99
PAPER_MAX_GRAD_NORM = 0.1
PAPER_WARMUP_STEPS = 16_000
PAPER_PEAK_LR = 1.0
PAPER_INIT_LR = 1e-7
PAPER_FINAL_LR = 1e-4


def paper_training_arguments(args: Any) -> Any:
    """``args`` (TrainingArguments) with §5.2's optimisation: Nesterov's accelerated gradient with momentum
    0.99 (`spanbert.trainer`'s ``--optim nesterov``), no weight decay, gradients renormalised above norm
    0.1, and the rate warmed up linearly from 1e-7 to the peak 1 over ``warmup_steps`` (the paper: 16K),
    then one cosine cycle down to 1e-4 (``--lr_scheduler_type cosine``)."""
    return dataclasses.replace(
        args,
        optim="nesterov",
        momentum=PAPER_MOMENTUM,
        weight_decay=0.0,
        max_grad_norm=PAPER_MAX_GRAD_NORM,
        learning_rate=PAPER_PEAK_LR,
        lr_scheduler_type="cosine",
        warmup_init_lr=PAPER_INIT_LR,
        min_lr=PAPER_FINAL_LR,
    )


__all__ = [
    "SYSTEMS",
    "TwoTowerModel",
    "build_model",
    "cloze_config",
    "count_targets",
    "load_two_tower",
    "paper_training_arguments",
    "train_cloze_tokenizer",
    "TwoTowerEncoder",
]
