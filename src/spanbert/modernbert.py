"""The ModernBERT family (Warner et al., 2024): the encoder and its pre-training heads, one file.

ModernBERT is a pre-LayerNorm encoder without bias terms, with rotary position embeddings (RoPE), a
GeGLU feed-forward, and attention that alternates between global layers (every
``global_attn_every_n_layers``-th, RoPE base ``global_rope_theta``) and sliding-window local layers
(each token sees ``local_attention // 2`` tokens either side, RoPE base ``local_rope_theta``); its
context is 8,192 tokens. Config fields and parameter names are transformers' `ModernBertModel` /
`ModernBertForMaskedLM`, so folders move both ways with no remapping (docs/architecture.md).

What SpanBERT puts on it: span masking, the span boundary objective (the same `SpanBoundaryHead` as
the BERT family, over ModernBERT's final states) and single-sequence blocks, through the one
pre-training pipeline (`spanbert pretrain --family modernbert --system spanbert`).

Speed, as the BERT family: padding is never computed on. A padded batch runs its token-wise layers
on the real tokens only (`spanbert.model.Unpad`), and on CPU attention too, one sequence at a time;
RoPE positions restart at each sequence, which is what transformers computes for right-padded rows.
Local layers cost linear time in the sequence length: queries are cut into chunks of
``local_attention`` tokens, each attending to its own chunk and ``local_attention // 2`` tokens either
side (`local_attention_chunked`), instead of a (T, T) band mask whose cost grows with T^2. Attention
itself is `F.scaled_dot_product_attention` (FlashAttention / memory-efficient kernels on a GPU).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from spanbert.attention import attention
from spanbert.checkpoint_files import SBO_FILE
from spanbert.checkpoints import load_encoder_weights, load_safetensors_checkpoint, read_safetensors, save_folder
from spanbert.compile import any_compiled
from spanbert.config import (
    MODERNBERT_MODEL_TYPE,
    MODERNBERT_PRESETS,
    BertConfig,
    FinetuneHabits,
)
from spanbert.config_json import check_ranges, check_settings, json_item, typed_fields
from spanbert.distributed import eprint0
from spanbert.dropout import Dropout
from spanbert.errors import SpanBertError
from spanbert.hub import resolve_model
from spanbert.model import SpanBoundaryHead, Unpad, config_size, grow_embedding, head_flops, masked_heads

varlen_attn: Any = None
"""PyTorch's variable-length FlashAttention (CUDA, fp16/bf16), once `varlen_available` has loaded it."""

MODEL_TYPE = MODERNBERT_MODEL_TYPE
GLOBAL, LOCAL = "full_attention", "sliding_attention"
"""transformers' names of the two kinds of layer (config.json ``layer_types``)."""


# ---------------------------------------------------------------------------------------------
# Config


@dataclass
class ModernBertConfig:
    """transformers' `ModernBertConfig` fields (those that shape the model), ModernBERT-base's defaults."""

    vocab_size: int = 50368
    hidden_size: int = 768
    intermediate_size: int = 1152
    num_hidden_layers: int = 22
    num_attention_heads: int = 12
    hidden_activation: str = "gelu"
    max_position_embeddings: int = 8192
    initializer_range: float = 0.02
    initializer_cutoff_factor: float = 2.0
    norm_eps: float = 1e-5
    norm_bias: bool = False
    pad_token_id: int = 50283
    eos_token_id: int = 50282
    bos_token_id: int = 50281
    cls_token_id: int = 50281
    sep_token_id: int = 50282
    global_rope_theta: float = 160000.0
    local_rope_theta: float = 10000.0
    global_attn_every_n_layers: int = 3
    """Layer i is global when i % n == 0 (unless ``layer_types`` says otherwise)."""
    local_attention: int = 128
    """The local layers' whole window: each token sees local_attention // 2 tokens either side."""
    attention_bias: bool = False
    attention_dropout: float = 0.0
    embedding_dropout: float = 0.0
    mlp_bias: bool = False
    mlp_dropout: float = 0.0
    decoder_bias: bool = True
    classifier_pooling: str = "cls"
    """The sentence vector: the first token's state (cls) or the mean of the real tokens' (mean)."""
    classifier_dropout: float = 0.0
    classifier_bias: bool = False
    classifier_activation: str = "gelu"
    layer_types: tuple[str, ...] = ()
    """GLOBAL or LOCAL per layer; empty: from global_attn_every_n_layers."""

    def __post_init__(self) -> None:
        if not self.layer_types:
            self.layer_types = _every_n(self.global_attn_every_n_layers, self.num_hidden_layers)
        self.layer_types = tuple(self.layer_types)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def to_hf_dict(self) -> dict[str, Any]:
        """The config.json that transformers' `ModernBertConfig` reads, in both of its spellings: 4.x's
        (global_attn_every_n_layers, global_rope_theta, local_rope_theta) and 5.x's (layer_types,
        rope_parameters), which agree."""
        d = dataclasses.asdict(self)
        d["layer_types"] = list(self.layer_types)
        if _every_n(self.global_attn_every_n_layers, self.num_hidden_layers) != self.layer_types:
            del d["global_attn_every_n_layers"]  # a pattern 4.x cannot spell: only layer_types says it
        d.update(
            model_type=MODEL_TYPE,
            rope_parameters={
                GLOBAL: {"rope_type": "default", "rope_theta": self.global_rope_theta},
                LOCAL: {"rope_type": "default", "rope_theta": self.local_rope_theta},
            },
            tie_word_embeddings=True,
        )
        return d

    @classmethod
    def from_hf_dict(cls, d: dict[str, Any], source: str = "") -> ModernBertConfig:
        """Read a config.json written by transformers 4.x or 5.x (or by spanbert), strictly: the sizes must
        be there (`REQUIRED`: a missing one is an error naming ``source`` and the key, not ModernBERT-base's
        default building another model), every known key is type-checked and range-checked, and a feature
        transformers would apply but this file does not implement (scaled RoPE: ``rope_scaling``, a
        ``rope_type`` other than default) is refused by name, so hidden states never silently differ from
        transformers'. Unknown keys are ignored; ``source`` starts every error message."""
        where = f"{source}: " if source else ""
        check_settings(d, where, "ModernBERT", "a ModernBERT encoder", REQUIRED)
        scaling = d.get("rope_scaling")
        if scaling is not None and not (isinstance(scaling, dict) and scaling.get("rope_type", scaling.get("type")) == "default"):
            raise SpanBertError(
                f"{where}found {json_item('rope_scaling', d['rope_scaling'])}, expected none: scaled RoPE is not "
                "implemented here (transformers would apply it, and the hidden states would differ)"
            )
        kwargs = typed_fields(cls, d, where, skip=("layer_types",))
        kwargs.update(_rope_thetas(d.get("rope_parameters"), where))
        types = d.get("layer_types")
        if types is not None:
            if not (isinstance(types, list) and all(t in (GLOBAL, LOCAL) for t in types)):
                raise SpanBertError(f"{where}found {json_item('layer_types', types)}, expected a list of {GLOBAL!r} / {LOCAL!r}")
            kwargs["layer_types"] = tuple(types)
        check_ranges(kwargs, where, positive=("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "max_position_embeddings", "global_attn_every_n_layers"))  # fmt: skip
        if "local_attention" in kwargs and kwargs["local_attention"] < 2:  # a window of local_attention // 2 a side
            raise SpanBertError(f"{where}found {json_item('local_attention', kwargs['local_attention'])}, expected an integer >= 2")
        check_ranges(kwargs, where, above_zero=("global_rope_theta", "local_rope_theta", "norm_eps"),
                     non_negative=("initializer_range", "initializer_cutoff_factor"),
                     probabilities=("attention_dropout", "embedding_dropout", "mlp_dropout", "classifier_dropout"))  # fmt: skip
        for k in ("pad_token_id", "eos_token_id", "bos_token_id", "cls_token_id", "sep_token_id"):
            if k in kwargs and kwargs[k] < 0:  # the ids are the tokenizer's business: only their sign is the config's
                raise SpanBertError(f"{where}found {json_item(k, kwargs[k])}, expected an id >= 0")
        for k in ("hidden_activation", "classifier_activation"):
            if kwargs.get(k) not in (None, *ACTIVATIONS):
                raise SpanBertError(f"{where}found {json_item(k, kwargs[k])}, expected one of {', '.join(ACTIVATIONS)}")
        if kwargs.get("classifier_pooling") not in (None, "cls", "mean"):
            raise SpanBertError(f"{where}found {json_item('classifier_pooling', kwargs['classifier_pooling'])}, expected cls or mean")
        if "layer_types" in kwargs and "global_attn_every_n_layers" not in kwargs:  # 5.x: the n that spells it
            L = len(kwargs["layer_types"])
            kwargs["global_attn_every_n_layers"] = next(
                (n for n in range(1, L + 1) if _every_n(n, L) == kwargs["layer_types"]), cls.global_attn_every_n_layers
            )
        config = cls(**kwargs)
        if config.hidden_size % config.num_attention_heads or config.head_dim % 2:
            raise SpanBertError(
                f"{where}found hidden_size {config.hidden_size} and num_attention_heads {config.num_attention_heads}, "
                "expected a hidden size divisible by the number of heads into an even head size (RoPE rotates pairs)"
            )
        if len(config.layer_types) != config.num_hidden_layers:
            raise SpanBertError(
                f"{where}found {len(config.layer_types)} layer_types, expected one per layer ({config.num_hidden_layers})"
            )
        return config


REQUIRED = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
"""The keys a ModernBERT config.json must have (transformers writes them all)."""


def _rope_thetas(rope: Any, where: str) -> dict[str, float]:
    """``global_rope_theta`` / ``local_rope_theta`` from transformers 5.x's ``rope_parameters`` ({layer type:
    {"rope_type": "default", "rope_theta": x}}), checked: a part that is no object, a theta that is no
    positive number, a scaled ``rope_type`` or another key are errors naming the key."""
    if rope is None:
        return {}
    if not isinstance(rope, dict):
        raise SpanBertError(f"{where}found {json_item('rope_parameters', rope)}, expected a JSON object")
    unknown = sorted(set(rope) - {GLOBAL, LOCAL})
    if unknown:
        raise SpanBertError(
            f"{where}found rope_parameters.{unknown[0]}, expected only {GLOBAL} and {LOCAL} (one RoPE per kind of layer)"
        )
    out: dict[str, float] = {}
    for kind, key in ((GLOBAL, "global_rope_theta"), (LOCAL, "local_rope_theta")):
        part = rope.get(kind)
        if part is None:
            continue
        if not isinstance(part, dict):
            raise SpanBertError(f"{where}found {json_item(f'rope_parameters.{kind}', part)}, expected a JSON object")
        if part.get("rope_type", "default") != "default":
            raise SpanBertError(
                f"{where}found rope_parameters.{kind}.rope_type {part['rope_type']!r}, expected 'default' "
                "(scaled RoPE variants are not implemented)"
            )
        theta = part.get("rope_theta")
        if theta is None:
            continue
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not math.isfinite(theta) or theta <= 0:
            raise SpanBertError(
                f"{where}found {json_item(f'rope_parameters.{kind}.rope_theta', theta)}, expected a number > 0"
            )
        out[key] = float(theta)
    return out


def _every_n(n: int, layers: int) -> tuple[str, ...]:
    """Layer types of a model whose every n-th layer (from the first) is global."""
    return tuple(GLOBAL if i % n == 0 else LOCAL for i in range(layers))


ACTIVATIONS = {
    "gelu": F.gelu,  # exact (erf) GELU, transformers' ACT2FN["gelu"]
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
    "silu": F.silu,
}

PRESETS = MODERNBERT_PRESETS
"""The named sizes (tiny, small, base, large): `spanbert.config.MODERNBERT_PRESETS`."""


def modernbert_config(name: str, **overrides: Any) -> ModernBertConfig:
    """The `ModernBertConfig` of a named preset (tiny, small, base, large), with field overrides."""
    if name not in PRESETS:
        raise SpanBertError(f"--model: found unknown ModernBERT preset {name!r}, expected one of {', '.join(PRESETS)}")
    return ModernBertConfig(**{**PRESETS[name], **overrides})


# ---------------------------------------------------------------------------------------------
# Rotary position embeddings and attention


def rope_tables(theta: float, head_dim: int, length: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """cos and signed sin (length, head_dim) fp32 of positions 0..length-1: transformers' default RoPE
    tables (the frequencies repeated over the two halves of the head), the sine negated on the first
    half so that the rotation is two products and a sum (`apply_rope`)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float, device=device) / head_dim))
    freqs = torch.arange(length, dtype=torch.float, device=device)[:, None] * inv_freq  # (L, hs/2)
    cos, sin = freqs.cos(), freqs.sin()
    return torch.cat((cos, cos), dim=-1), torch.cat((-sin, sin), dim=-1)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate (..., hs) by position, cos/sin (`rope_tables`) broadcasting to it: transformers'
    x * cos + rotate_half(x) * sin, with rotate_half(x) = (-x2, x1) written as (x2, x1) against the
    signed sine: the same products and sums (a negation is exact), on a contiguous copy, in half the
    passes (measured 3.1 against 7.5 ms for a (4, 512, 2, 4, 64) forward and backward). In fp32 as
    transformers (a bf16 rotation would blur the position of late tokens), back in x's dtype."""
    xf = x.float().contiguous()
    x1, x2 = xf.chunk(2, dim=-1)
    return (xf * cos + torch.cat((x2, x1), dim=-1) * sin).to(x.dtype)


def _sdpa(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout_p: float) -> Tensor:
    return attention(q, k, v, mask, dropout_p)


def local_attention_chunked(q: Tensor, k: Tensor, v: Tensor, half: int, key_mask: Tensor | None, dropout_p: float = 0.0) -> Tensor:
    """Sliding-window attention, |query - key| <= ``half``, in time linear in T: (B, nh, T, hs) each
    -> (B, nh, T, hs). ``key_mask`` (B, T) bool: False keys get no weight (a padded grid).

    Queries go in chunks of c = 2 * half; chunk j attends to keys [j c - half, (j + 1) c + half), a
    (c, c + 2 half) block of which the band is kept. Work: T (c + 2 half) scores instead of T^2. Every
    query row keeps its own key (the diagonal), so no row is empty: a padded query far from any real
    token gets a finite, unused value instead of a NaN that would reach the gradients."""
    B, nh, T, hs = q.shape
    c = 2 * half
    n = -(-T // c)
    Tp = n * c
    qp = F.pad(q, (0, 0, 0, Tp - T))  # (B, nh, Tp, hs)
    kp = F.pad(k, (0, 0, half, Tp - T + half))  # (B, nh, Tp + 2 half, hs)
    vp = F.pad(v, (0, 0, half, Tp - T + half))
    w = c + 2 * half
    # (B, nh, n, w, hs) windows of keys, chunks moved into the batch: (B n, nh, ., hs)
    kc = kp.unfold(2, w, c).transpose(-1, -2).transpose(1, 2).reshape(B * n, nh, w, hs)
    vc = vp.unfold(2, w, c).transpose(-1, -2).transpose(1, 2).reshape(B * n, nh, w, hs)
    qc = qp.view(B, nh, n, c, hs).transpose(1, 2).reshape(B * n, nh, c, hs)
    a = torch.arange(c, device=q.device)
    b = torch.arange(w, device=q.device)
    band = (b[None, :] - a[:, None] >= 0) & (b[None, :] - a[:, None] <= 2 * half)  # (c, w): |query - key| <= half
    key_pos = torch.arange(n, device=q.device)[:, None] * c - half + b  # (n, w) global key positions
    valid = (key_pos >= 0) & (key_pos < T)  # (n, w)
    if key_mask is not None:
        km = F.pad(key_mask, (half, Tp - T + half)).unfold(1, w, c)  # (B, n, w)
        valid = valid & km
    else:
        valid = valid.expand(B, n, w)
    mask = band & valid.reshape(B * n, 1, 1, w)  # (B n, 1, c, w)
    mask = mask | (b[None, :] - a[:, None] == half)  # the diagonal: every row has a key
    out = _sdpa(qc, kc, vc, mask, dropout_p)  # (B n, nh, c, hs)
    return out.view(B, n, nh, c, hs).transpose(1, 2).reshape(B, nh, Tp, hs)[:, :, :T]


BAND_UP_TO = 8
"""Local attention with one (T, T) band mask up to T = BAND_UP_TO x half, in chunks beyond. Measured on
the 2-core CPU VM (2 x 4 heads x 64, half 64, forward + backward): the band is faster at 512 tokens
(172 vs 360 ms), the chunks from 1,024 (116 vs 219 ms) and by 2.4x at 2,048; memory is linear either
way only with the chunks."""


def _varlen_windows() -> bool:
    global varlen_attn
    if varlen_attn is None:
        try:  # its window_size came in a later release; an older torch: the padded grid with SDPA instead
            from torch.nn.attention.varlen import varlen_attn
        except ImportError:
            return False
    try:
        return "window_size" in inspect.signature(varlen_attn).parameters
    except (TypeError, ValueError):
        return False


VARLEN: bool | None = None
"""Whether `varlen_attn` (FlashAttention over packed sequences, sliding windows included) is available;
None until a batch on a `VARLEN_DEVICES` device first asks (`varlen_available`)."""


def varlen_available() -> bool:
    """`VARLEN`, looked up on first use: importing torch.nn.attention.varlen loads torch._dynamo (about
    2 s on a CPU), which a CPU run and `spanbert <command> --help` never need."""
    global VARLEN
    if VARLEN is None:
        VARLEN = _varlen_windows()
    return VARLEN
VARLEN_DEVICES = ("cuda",)
"""Devices whose half-precision batches take `varlen_attn` (its kernels are CUDA's)."""


def attend(q: Tensor, k: Tensor, v: Tensor, half: int | None, key_mask: Tensor | None, dropout_p: float = 0.0) -> Tensor:
    """Global (``half`` None) or local attention, (B, nh, T, hs) -> (B, nh, T, hs); ``key_mask`` (B, T) bool."""
    T = q.shape[2]
    if half is None or T <= half + 1:  # every key is inside every window: a global layer
        mask = None if key_mask is None else key_mask[:, None, None, :]
        return _sdpa(q, k, v, mask, dropout_p)
    if T <= BAND_UP_TO * half:  # a short sequence: one band mask is cheaper than the chunks' copies
        i = torch.arange(T, device=q.device)
        band = (i[:, None] - i[None, :]).abs() <= half  # (T, T)
        mask = band if key_mask is None else (band & key_mask[:, None, None, :]) | torch.eye(T, dtype=torch.bool, device=q.device)
        return _sdpa(q, k, v, mask, dropout_p)
    return local_attention_chunked(q, k, v, half, key_mask, dropout_p)


class Layout:
    """How one batch is laid out, computed once a forward pass, and the RoPE tables of the two bases
    for the rows attention sees. Three ways:

    - ``grid``: (B, T) rows, a key mask where padded (RoPE tables (T, 1, 1, hs));
    - ``ragged`` (CPU, padded, when it saves work): the real tokens, attended a sequence at a time;
    - ``varlen`` (CUDA, half precision, no attention dropout, `varlen_attn` with windows): the real
      tokens packed, FlashAttention over each sequence, local layers in its native sliding window.
    The latter two give each real token its position in its row (tables (N, 1, 1, hs))."""

    def __init__(self, config: ModernBertConfig, input_ids: Tensor, attention_mask: Tensor | None,
                 half_precision: bool = False, dropout: bool = False, allow_ragged: bool = True):  # fmt: skip
        B, T = input_ids.shape
        dev = input_ids.device
        self.unpad = None
        if attention_mask is not None:
            unpad = Unpad(attention_mask, config.hidden_size, allow_ragged=allow_ragged)
            if unpad.index.numel() != B * T or torch.compiler.is_compiling():
                self.unpad = unpad
        self.varlen = (dev.type in VARLEN_DEVICES and half_precision and not dropout
                       and not torch.compiler.is_compiling() and varlen_available())  # fmt: skip
        self.ragged = self.unpad is not None and self.unpad.ragged and not self.varlen
        self.max_len = T
        self.cu_seqlens = None
        pos = None
        if self.varlen and self.unpad is None:  # no padding: the (B, T) rows packed as they are, no sync
            self.cu_seqlens = torch.arange(0, (B + 1) * T, T, dtype=torch.int32, device=dev)
        elif self.varlen:
            lengths = attention_mask.ne(0).sum(1, dtype=torch.int32)  # (B,) on the device: no sync
            self.cu_seqlens = F.pad(lengths.cumsum(0, dtype=torch.int32), (1, 0))  # (B + 1,)
        # the grid's key mask (a padded batch attended on the grid); None without padding
        self.key_mask = attention_mask.bool() if self.unpad is not None and not (self.ragged or self.varlen) else None
        if self.unpad is not None and (self.ragged or self.varlen):  # each real token's position in its row
            pos = (attention_mask.ne(0).long().cumsum(1) - 1).reshape(-1)[self.unpad.index]  # (N,)
        self.tables: dict[float, tuple[Tensor, Tensor]] = {}
        for theta in {config.global_rope_theta, config.local_rope_theta}:
            cos, sin = rope_tables(theta, config.head_dim, T, dev)
            if pos is not None:
                cos, sin = cos[pos], sin[pos]
            self.tables[theta] = cos[:, None, None, :], sin[:, None, None, :]


class Attention(nn.Module):
    def __init__(self, config: ModernBertConfig, layer_id: int):
        super().__init__()
        H = config.hidden_size
        self.n_head, self.head_dim = config.num_attention_heads, config.head_dim
        self.Wqkv = nn.Linear(H, 3 * H, bias=config.attention_bias)
        self.Wo = nn.Linear(H, H, bias=config.attention_bias)
        self.out_drop = Dropout(config.attention_dropout)
        self.dropout_p = config.attention_dropout
        local = config.layer_types[layer_id] == LOCAL
        self.half = config.local_attention // 2 if local else None  # None: a global layer
        self.theta = config.local_rope_theta if local else config.global_rope_theta

    def forward(self, x: Tensor, layout: Layout) -> Tensor:
        """(B, T, H) or, unpadded, (N, H) -> the same shape."""
        nh, hs = self.n_head, self.head_dim
        unpad = layout.unpad
        ragged = layout.ragged
        qkv = self.Wqkv(x)  # (B, T, 3H), or (N, 3H) for the N real tokens
        if unpad is not None and not (ragged or layout.varlen):
            qkv = unpad.pad(qkv)  # (B, T, 3H): the grid, for attention alone (one re-padding, not three)
        # split, not sliced: the backward of a split is one concatenation, a slice's a zero-filled copy
        qk, v = qkv.split((2 * nh * hs, nh * hs), dim=-1)
        cos, sin = layout.tables[self.theta]
        qk = apply_rope(qk.unflatten(-1, (2, nh, hs)), cos, sin)  # q and k in one rotation: (.., 2, nh, hs)
        q, k = qk.unbind(-3)  # each (B, T, nh, hs) or (N, nh, hs)
        v = v.unflatten(-1, (nh, hs))
        p = self.dropout_p if self.training else 0.0
        if layout.varlen:  # (N, nh, hs) packed; a local layer sees `half` tokens either side
            window = (self.half, self.half) if self.half is not None else (-1, -1)
            q, k, v = (t.reshape(-1, nh, hs) for t in (q, k, v))  # a batch without padding: (B T, nh, hs)
            y = varlen_attn(q, k, v, layout.cu_seqlens, layout.cu_seqlens, layout.max_len, layout.max_len,
                            window_size=window)  # fmt: skip
            y = y.reshape(*x.shape[:-1], nh * hs)
        elif ragged:  # CPU: each sequence over its own real tokens
            # split, not sliced, for the same reason as above: B slices' backward wrote B zero-filled
            # (N, nh, hs) copies a tensor, quadratic in the batch (64 x 128 tokens: a third of the step)
            out = []
            parts = (t.split(unpad.lengths) for t in (q, k, v))
            for qs, ks, vs in zip(*parts):
                L = qs.shape[0]
                if L:
                    y = attend(*(t.transpose(0, 1)[None] for t in (qs, ks, vs)), self.half, None, p)  # (1, nh, L, hs)
                    out.append(y[0].transpose(0, 1).reshape(L, nh * hs))
            y = torch.cat(out) if out else x.new_zeros(0, nh * hs)
        else:
            y = attend(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), self.half, layout.key_mask, p)
            y = y.transpose(1, 2).flatten(-2)  # (B, T, H)
            if unpad is not None:
                y = unpad.gather(y)
        return self.out_drop(self.Wo(y))


class MLP(nn.Module):
    """GeGLU: Wo(act(x Wi_in) * (x Wi_gate)); Wi holds both halves, as transformers."""

    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.Wi = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=config.mlp_bias)
        self.act = ACTIVATIONS[config.hidden_activation]
        self.drop = Dropout(config.mlp_dropout)
        self.Wo = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.mlp_bias)

    def forward(self, x: Tensor) -> Tensor:
        a, gate = self.Wi(x).chunk(2, dim=-1)
        return self.Wo(self.drop(self.act(a) * gate))


class Layer(nn.Module):
    """Pre-LN: x + attn(norm(x)), then x + mlp(norm(x)); the first layer's input is the embeddings'
    own norm, so its attn_norm is the identity (transformers' layout)."""

    compile_region = True  # `spanbert.compile`: one graph per kind of layer (first, global, local)

    def __init__(self, config: ModernBertConfig, layer_id: int):
        super().__init__()
        norm = lambda: nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)  # noqa: E731
        self.attn_norm = nn.Identity() if layer_id == 0 else norm()
        self.attn = Attention(config, layer_id)
        self.mlp_norm = norm()
        self.mlp = MLP(config)

    def forward(self, x: Tensor, layout: Layout) -> Tensor:
        x = x + self.attn(self.attn_norm(x), layout)
        return x + self.mlp(self.mlp_norm(x))


class Embeddings(nn.Module):
    compile_region = True  # `spanbert.compile`

    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=_pad_idx(config))
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        self.drop = Dropout(config.embedding_dropout)

    def forward(self, input_ids: Tensor) -> Tensor:
        return self.drop(self.norm(self.tok_embeddings(input_ids)))


def _pad_idx(config: ModernBertConfig) -> int | None:
    return config.pad_token_id if 0 <= config.pad_token_id < config.vocab_size else None


class PredictionHead(nn.Module):
    """dense -> act -> norm: the transform before the MLM decoder, and the sentence head of
    transformers' classification models (which load it from the MLM checkpoint)."""

    compile_region = True  # `spanbert.compile`

    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size, bias=config.classifier_bias)
        self.act = ACTIVATIONS[config.classifier_activation]
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(self.act(self.dense(x)))


def init_weights(module: nn.Module, config: ModernBertConfig) -> None:
    """transformers' ModernBERT initialisation: truncated normals (cut at initializer_cutoff_factor
    std), std initializer_range for inputs and initializer_range / sqrt(2 L) for the outputs that feed
    the residual stream (Wo) and the prediction head; zero biases, unit norms."""
    std_in = config.initializer_range
    std_out = config.initializer_range / math.sqrt(2.0 * config.num_hidden_layers)
    cut = config.initializer_cutoff_factor

    def trunc(weight: Tensor, std: float) -> None:
        nn.init.trunc_normal_(weight, mean=0.0, std=std, a=-cut * std, b=cut * std)

    for name, m in module.named_modules():
        if isinstance(m, nn.Linear):
            trunc(m.weight, std_out if name.endswith(("Wo", "dense")) else std_in)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            trunc(m.weight, std_in)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)


class Encoder(nn.Module):
    """A ModernBERT encoder whose `state_dict()` is transformers' `ModernBertModel`'s (+ ``head.*``, the
    sentence head, when built with ``add_pooling_layer``). It implements the family protocol
    (`spanbert.families.Family`): every task fine-tunes it through the same commands as BERT.

    `encoder(input_ids, attention_mask=None)` returns the final states (B, T, H), zeros at padding.
    """

    model_type = MODEL_TYPE

    def __init__(self, config: ModernBertConfig, add_pooling_layer: bool = True):
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        self.layers = nn.ModuleList(Layer(config, i) for i in range(config.num_hidden_layers))
        self.final_norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        self.head = PredictionHead(config) if add_pooling_layer else None
        self.gradient_checkpointing = False
        init_weights(self, config)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                output_hidden_states: bool = False) -> Tensor | tuple[Tensor, ...]:
        """Final states (B, T, H); with ``output_hidden_states`` the embeddings' output and every
        layer's, num_layers + 1 tensors, the last after the final norm (the usual return value).
        ``token_type_ids`` are ignored: ModernBERT has no segment embeddings."""
        T = input_ids.shape[1]
        if T > self.config.max_position_embeddings:
            raise SpanBertError(
                f"sequence of {T} tokens is longer than max_position_embeddings={self.config.max_position_embeddings}"
            )
        halves, dev = (torch.float16, torch.bfloat16), input_ids.device.type
        half = dev in VARLEN_DEVICES and (
            (torch.is_autocast_enabled(dev) and torch.get_autocast_dtype(dev) in halves)
            or self.embeddings.tok_embeddings.weight.dtype in halves
        )  # FlashAttention's varlen kernel computes in half precision only
        # the layers' own rate: `spanbert pretrain --dropout` sets it on the modules, not in the config
        dropout = self.training and any(layer.attn.dropout_p > 0 for layer in self.layers)
        # compiled layers (`spanbert.compile`) take no CPU ragged batch: its lengths would make a graph a batch
        layout = Layout(self.config, input_ids, attention_mask, half_precision=half, dropout=dropout,
                        allow_ragged=not any_compiled(self.layers))  # fmt: skip
        x = self.embeddings(input_ids)  # (B, T, H)
        if layout.unpad is not None:
            x = layout.unpad.gather(x)  # (N, H): the real tokens only
        states = [x] if output_hidden_states else None
        for layer in self.layers:
            if self.gradient_checkpointing and self.training:
                x = torch.utils.checkpoint.checkpoint(layer, x, layout, use_reentrant=False)
            else:
                x = layer(x, layout)
            if states is not None:
                states.append(x)
        x = self.final_norm(x)
        if states is not None:
            states[-1] = x
            return tuple(layout.unpad.pad(h) for h in states) if layout.unpad is not None else tuple(states)
        return layout.unpad.pad(x) if layout.unpad is not None else x

    def set_gradient_checkpointing(self, enabled: bool = True) -> None:
        """Recompute each layer's activations in the backward pass: less memory, ~30% more compute."""
        self.gradient_checkpointing = enabled

    # ----------------------------------------------------------------- the family protocol
    hidden_size = config_size("hidden_size")
    sentence_size = config_size("hidden_size", "Width of `sentence`'s vector: the sentence head's H.")
    num_layers = config_size("num_hidden_layers")
    max_positions = config_size("max_position_embeddings", "RoPE has no table: the context ModernBERT was trained for.")
    vocab_size = config_size("vocab_size")
    ffn_size = config_size("intermediate_size")

    @property
    def habits(self) -> FinetuneHabits:
        return family_habits(self.config)

    def sentence(self, hidden: Tensor, attention_mask: Tensor | None = None, input_ids: Tensor | None = None) -> Tensor:
        """transformers' classification pooling: the first token's state (``classifier_pooling`` cls) or
        the mean over the real tokens (mean), then the head (dense, act, norm): (B, T, H) -> (B, H)."""
        if self.head is None:
            raise SpanBertError("this encoder was built without a sentence head (add_pooling_layer=False)")
        if self.config.classifier_pooling == "mean":
            if attention_mask is None:
                pooled = hidden.mean(1)
            else:
                m = attention_mask.to(hidden.dtype)[..., None]  # (B, T, 1)
                pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1)
        else:
            pooled = hidden[:, 0]
        return self.head(pooled)

    def frame(self, tokenizer: Any) -> Any:
        """``[CLS] a [SEP] (b [SEP])``, as ModernBERT's own tokenizer frames its inputs."""
        return tokenizer

    def config_json(self) -> dict[str, Any]:
        return self.config.to_hf_dict()

    def resize_token_embeddings(self, vocab_size: int) -> None:
        """Grow the token embeddings to ``vocab_size`` rows (new rows initialised as the family does)."""
        if vocab_size <= self.embeddings.tok_embeddings.num_embeddings:
            return
        std, cut = self.config.initializer_range, self.config.initializer_cutoff_factor
        self.embeddings.tok_embeddings = grow_embedding(
            self.embeddings.tok_embeddings, vocab_size, lambda w: nn.init.trunc_normal_(w, std=std, a=-cut * std, b=cut * std)
        )
        self.config.vocab_size = vocab_size


    def save_pretrained(self, path: str | Path, tokenizer: Any = None) -> None:
        """A folder transformers' `ModernBertModel` loads (config.json, model.safetensors, the
        tokenizer), written as one atomic folder (`spanbert.checkpoints.save_folder`)."""
        config_json = {**self.config.to_hf_dict(), "architectures": ["ModernBertModel"]}
        save_folder(path, self.state_dict(), config_json, tokenizer=tokenizer)


def family_habits(config: ModernBertConfig) -> FinetuneHabits:
    """transformers' ModernBERT task heads: the output layer drawn with std hidden_size^-0.5 after
    dropout classifier_dropout (0 in the released models); BERT's schedule and clipping."""
    return FinetuneHabits(init_std=config.hidden_size**-0.5, head_dropout=config.classifier_dropout)


def encoder_state(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """The encoder's keys of any ModernBERT state dict: `ModernBertModel` (as is), the MLM or a
    transformers task model (``model.`` prefix, ``head.*`` kept: the sentence head, as transformers
    loads it), spanbert's task models (``bert.`` prefix); decoder, classifier and SBO dropped."""
    out = {}
    for k, v in state.items():
        for prefix in ("bert.", "model."):
            if k.startswith(prefix):
                k = k[len(prefix) :]
                break
        if k.startswith(("embeddings.", "layers.", "final_norm.", "head.")):
            out[k] = v
    return out


def load_encoder_state(encoder: Encoder, own: dict[str, Tensor], source: str) -> None:
    """Every encoder weight from ``own``; a missing sentence head (a bare `ModernBertModel` folder)
    stays freshly initialised, as transformers does for its classification models."""
    load_encoder_weights(encoder, own, source, "ModernBERT", optional="head.")


# ---------------------------------------------------------------------------------------------
# Pre-training: MLM (transformers' `ModernBertForMaskedLM` names) + SpanBERT's span boundary objective


class TiedDecoder(nn.Module):
    """transformers' ``decoder``: its weight is the token embeddings (tied, not stored), its bias its own."""

    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(config.vocab_size)) if config.decoder_bias else None


def _sbo_shape(config: ModernBertConfig) -> BertConfig:
    """The sizes `SpanBoundaryHead` reads (it is the BERT family's head, §3.2: GELU + LayerNorm)."""
    return BertConfig(vocab_size=config.vocab_size, hidden_size=config.hidden_size, num_attention_heads=1,
                      max_position_embeddings=config.max_position_embeddings, layer_norm_eps=config.norm_eps)  # fmt: skip


class ModernBertForPreTraining(nn.Module):
    """The encoder (``model``), the MLM head (``head`` + ``decoder``, transformers' names) and,
    for SpanBERT, the span boundary head (``span_predictions``). The batch and the loss are
    `spanbert.model.SpanBertForPreTraining`'s: MLM and SBO at the masked positions only, one term
    each per masked token (§3.2)."""

    def __init__(self, config: ModernBertConfig, sbo: bool = True, mlm_weight: float = 1.0, sbo_weight: float = 1.0,
                 sbo_position_dim: int = 200):  # fmt: skip
        super().__init__()
        self.config = config
        self.model = Encoder(config, add_pooling_layer=False)
        self.head = PredictionHead(config)
        self.decoder = TiedDecoder(config)
        self.span_predictions = SpanBoundaryHead(_sbo_shape(config), sbo_position_dim) if sbo else None
        init_weights(self.head, config)
        if self.span_predictions is not None:
            init_weights(self.span_predictions, config)
        self.mlm_weight, self.sbo_weight = mlm_weight, sbo_weight

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                next_sentence_label: Tensor | None = None, **targets: Tensor | None) -> dict[str, Tensor]:
        """`spanbert.model.SpanBertForPreTraining`'s batch and outputs, without NSP: ``token_type_ids`` are
        ignored (no segment embeddings) and a ``next_sentence_label`` is refused."""
        if next_sentence_label is not None:
            raise SpanBertError("ModernBERT pre-trains on single sequences: it has no next-sentence head")
        hidden = self.model(input_ids, attention_mask)  # (B, T, H)
        emb = self.model.embeddings.tok_embeddings.weight  # (V, H), the tied decoder
        out: dict[str, Tensor] = {"hidden_states": hidden}
        loss, terms = masked_heads(
            out, hidden, lambda h: F.linear(self.head(h), emb, self.decoder.bias), self.span_predictions, emb,
            self.mlm_weight, self.sbo_weight, **targets,
        )  # fmt: skip
        if targets.get("mlm_labels") is not None:
            out["loss"] = loss
            out["loss_terms"] = terms
        return out

    def save_pretrained(self, path: str | Path, tokenizer: Any = None, extra: dict | None = None) -> None:
        """A folder that transformers opens as `ModernBertForMaskedLM` (model.safetensors: ``model.*``,
        ``head.*``, ``decoder.bias``; the decoder weight is the tied embeddings), the span boundary
        head beside it in `SBO_FILE`; one atomic folder (`spanbert.checkpoints.save_folder`)."""
        state = self.state_dict()
        main = {k: v for k, v in state.items() if not k.startswith("span_predictions.")}
        sbo = {k: v for k, v in state.items() if k.startswith("span_predictions.")}
        config_json = {**self.config.to_hf_dict(), "architectures": ["ModernBertForMaskedLM"]}
        config_json["spanbert"] = {
            "sbo": bool(sbo),
            "sbo_position_dim": self.span_predictions.position_embeddings.embedding_dim if sbo else None,
            "mlm_weight": self.mlm_weight,
            "sbo_weight": self.sbo_weight,
            **(extra or {}),
        }
        save_folder(path, main, config_json, tokenizer=tokenizer, extra_files={SBO_FILE: sbo} if sbo else None)

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        sbo: bool | None = None,
        *,
        require: Sequence[str] = (),
        needed_by: str = "this command",
        **kwargs: Any,
    ) -> ModernBertForPreTraining:
        """Continue from a ModernBERT folder (`--init_from`: transformers' MLM or bare model, or ours):
        the encoder must load whole; MLM and span boundary heads it lacks start fresh, said on stderr.
        ``sbo`` None: a span boundary head when the folder holds one. ``require`` names heads (``mlm``,
        ``sbo``) that ``needed_by`` (a command, for the message) predicts with: one the folder does not
        hold is an error naming the folder, never a head initialised at random (`spanbert fill`)."""
        raw, state = load_safetensors_checkpoint(path)  # a hub name resolved, as every loader does
        from_dir = resolve_model(path)
        if (from_dir / SBO_FILE).is_file():
            state.update(read_safetensors(from_dir / SBO_FILE))
        held = {head for head, prefixes in _HEADS.items() if any(k.startswith(prefixes) for k in state)}
        sbo = "sbo" in held if sbo is None else sbo
        for head in require:
            if head not in held:
                what = ", ".join(_HEAD_NAMES[h] for h in sorted(held)) or "no pre-training head"
                raise SpanBertError(
                    f"{path}: holds a ModernBERT encoder with {what}; {needed_by} needs {_HEAD_NAMES[head]} "
                    f"({' and '.join(p + '*' for p in _HEADS[head])}), which it does not hold. Pass a pre-training "
                    "folder that has it (spanbert pretrain --family modernbert's output; the span boundary head "
                    "with --system spanbert)"
                )
        pre = cls(ModernBertConfig.from_hf_dict(raw, source=str(from_dir / "config.json")), sbo=sbo, **kwargs)
        # the encoder's keys (an MLM head's `head.*` is ignored: this encoder has no sentence head)
        load_encoder_state(pre.model, encoder_state(state), str(from_dir))
        heads = {k: v for k, v in state.items() if k.startswith(("head.", "decoder.bias", "span_predictions."))}
        missing, _ = pre.load_state_dict(heads, strict=False)
        fresh = sorted({k.split(".")[0] for k in missing if not k.startswith("model.")})
        if fresh:
            eprint0(f"note: {path} has no weights for {', '.join(fresh)}: freshly initialised")
        return pre.eval()


_HEADS = {"mlm": ("head.", "decoder.bias"), "sbo": ("span_predictions.",)}
"""A pre-training head -> the prefixes of its weights (transformers' MLM names, SpanBERT's SBO head)."""
_HEAD_NAMES = {"mlm": "the masked-LM head", "sbo": "the span boundary head"}


def flops_per_token(config: ModernBertConfig, seq_len: int, mask_rate: float = 0.15, sbo: bool = True) -> float:
    """Training FLOPs per token of the useful work (3x the forward matmuls). Attention scores cost
    2 x 2 x keys x H a token, keys = seq_len in a global layer and the window in a local one."""
    H, I, V = config.hidden_size, config.intermediate_size, config.vocab_size
    local_keys = min(seq_len, config.local_attention + 1)
    attn = sum(2 * 2 * (seq_len if t == GLOBAL else local_keys) * H for t in config.layer_types)
    per_layer = 2 * (4 * H * H + 3 * H * I)  # Wqkv + Wo, Wi (H -> 2I) + Wo (I -> H)
    return 3 * (config.num_hidden_layers * per_layer + attn + head_flops(H, V, mask_rate, sbo))


__all__ = [
    "MODEL_TYPE",
    "ModernBertConfig",
    "Encoder",
    "ModernBertForPreTraining",
    "modernbert_config",
    "local_attention_chunked",
    "flops_per_token",
]
