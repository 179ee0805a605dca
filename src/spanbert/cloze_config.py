"""The two-tower cloze family's architecture settings, its presets and its `spanbert pretrain --model` spec.

`ClozeConfig` (the architecture and pre-training objective, checked when built), `CLOZE_PRESETS` (Table 1
and the CPU sizes) and `parse_model_spec` (``PRESET:field=value,...``). The model, its blocks and its
tokenizers are `spanbert.cloze`; these live apart from it, importing no torch, so that `spanbert pretrain
--help` and a run's config checks (`spanbert.pretrain_config`) load none.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Literal

from spanbert.errors import SpanBertError

CLOZE_MODEL_TYPE = "cloze-two-tower"
"""config.json ``model_type`` of the two-tower family (`spanbert.cloze.MODEL_TYPE`)."""
CLOZE_SYSTEMS = ("cloze", "bilm", "cloze-bilm")
"""`spanbert pretrain --system` values of the two-tower family (§6.3, Table 5)."""
# The paper's character-CNN filters (§5.2): (width, number of filters).
PAPER_CHAR_FILTERS = ((1, 128), (2, 256), (3, 384), (4, 512), (5, 512), (6, 512))


@dataclass
class ClozeConfig:
    """Architecture and pre-training objective of a two-tower model (§3, Table 1)."""

    vocab_size: int = 0
    """Output (and, for BPE, input) vocabulary size; set from the tokenizer."""
    d_model: int = 64
    """Model dimension d of the towers and the combination module."""
    num_layers: int = 2
    """Blocks N per tower."""
    num_heads: int = 4
    """Attention heads in the tower blocks."""
    ffn_dim: int = 256
    """Inner width f of every FFN (ReLU(W1 x + b1) W2 + b2)."""
    final_heads: int = 4
    """Attention heads in the combination module (Table 1: 12 base, 32 large)."""
    query: Literal["sum", "concat"] = "sum"
    """Query of the combination module: F_{i-1} + B_{i+1} (sum, base) or [F_{i-1}; B_{i+1}] projected to d (concat, large)."""
    objective: Literal["cloze", "bilm", "cloze-bilm"] = "cloze"
    """Pre-training loss (§6.3): cloze (centre token), bilm (each tower predicts its next token, no combination module), or both."""
    bilm_weight: float = 0.15
    """Weight of the bilm term in cloze-bilm (§6.3: 0.15)."""
    dropout: float = 0.1
    """Dropout on embeddings and sub-block outputs (§5.2: 0.1)."""
    attention_dropout: float = 0.1
    """Dropout on attention weights (§5.2: 0.1)."""
    relu_dropout: float = 0.05
    """Dropout after the FFN's ReLU (§5.2: 0.05)."""
    input: Literal["bpe", "char_cnn"] = "bpe"
    """Input embedding: a token table shared with the output (bpe, flat softmax) or the character CNN over each word's spelling (char_cnn, with an adaptive softmax)."""
    char_dim: int = 128
    """char_cnn: character embedding size (§5.2: 128)."""
    char_filters: list[list[int]] = field(default_factory=lambda: [list(f) for f in PAPER_CHAR_FILTERS])
    """char_cnn: [width, filters] of each convolution (§5.2: 1x128, 2x256, 3x384, 4x512, 5x512, 6x512)."""
    highway_layers: int = 1
    """char_cnn: highway layers after the convolutions (§5.2: one)."""
    max_word_chars: int = 50
    """char_cnn: characters kept per word (longer words are cut; the released code's max_char_len)."""
    adaptive_cutoffs: list[int] | None = None
    """char_cnn: adaptive-softmax band ends (§5.2: 60K, 160K+60K); None = scaled to the vocabulary (`adaptive_cutoffs`)."""
    optimizer: Literal["adamw", "nesterov"] = "adamw"
    """adamw (small CPU runs) or the paper's Nesterov momentum 0.99 with a cosine schedule (§5.2)."""
    pad_id: int = 0
    """Padding id (never attended to, never predicted)."""
    bos_id: int = 2
    """Id of the leading boundary marker <s>."""
    eos_id: int = 3
    """Id of the trailing boundary marker </s>."""
    sep_id: int = 4
    """Id of the <sep> token between the two texts of a pair (fine-tuning, §4)."""

    def __post_init__(self) -> None:
        def bad(name: str, found: Any, expected: str) -> SpanBertError:
            return SpanBertError(f"cloze model option {name}: found {found!r}, expected {expected}")

        for name in ("d_model", "num_layers", "num_heads", "ffn_dim", "final_heads", "char_dim", "max_word_chars"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise bad(name, getattr(self, name), "a positive integer")
        if self.d_model % self.num_heads:
            raise bad("num_heads", self.num_heads, f"a divisor of d_model {self.d_model}")
        if self.final_heads > self.d_model:
            raise bad("final_heads", self.final_heads, f"at most d_model {self.d_model}")
        if self.query not in ("sum", "concat"):
            raise bad("query", self.query, "sum or concat")
        if self.objective not in CLOZE_SYSTEMS:
            raise bad("objective", self.objective, "cloze, bilm or cloze-bilm")
        if self.input not in ("bpe", "char_cnn"):
            raise bad("input", self.input, "bpe or char_cnn")
        if self.optimizer not in ("adamw", "nesterov"):
            raise bad("optimizer", self.optimizer, "adamw or nesterov")
        for name in ("dropout", "attention_dropout", "relu_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise bad(name, getattr(self, name), "a probability in [0, 1)")
        if not (math.isfinite(self.bilm_weight) and self.bilm_weight >= 0):
            raise bad("bilm_weight", self.bilm_weight, "a finite number >= 0")
        if self.highway_layers < 0:
            raise bad("highway_layers", self.highway_layers, "0 or more")
        if not self.char_filters or any(len(f) != 2 or min(f) < 1 for f in self.char_filters):
            raise bad("char_filters", self.char_filters, "a list of [width, filters] pairs of positive integers")
        if self.input == "char_cnn" and max(w for w, _ in self.char_filters) > self.max_word_chars + 2:
            raise bad("max_word_chars", self.max_word_chars, "room for the widest character filter")
        if self.adaptive_cutoffs is not None and (
            list(self.adaptive_cutoffs) != sorted(set(self.adaptive_cutoffs))
            or min(self.adaptive_cutoffs, default=1) < 1
        ):
            raise bad("adaptive_cutoffs", self.adaptive_cutoffs, "increasing positive band ends")


# Table 1 and the CPU sizes. Every preset uses d = 1024 and 16 tower heads at paper scale (§5.2).
CLOZE_PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(d_model=64, num_layers=2, num_heads=4, ffn_dim=256, final_heads=4, query="sum"),
    "small": dict(d_model=256, num_layers=4, num_heads=4, ffn_dim=1024, final_heads=4, query="sum"),
    "cnn_base": dict(
        d_model=1024, num_layers=6, num_heads=16, ffn_dim=4096, final_heads=12, query="sum",
        input="char_cnn", optimizer="nesterov",
    ),
    "cnn_large": dict(
        d_model=1024, num_layers=12, num_heads=16, ffn_dim=4096, final_heads=32, query="concat",
        input="char_cnn", optimizer="nesterov",
    ),
    "bpe_large": dict(
        d_model=1024, num_layers=12, num_heads=16, ffn_dim=4096, final_heads=32, query="concat",
        input="bpe", optimizer="nesterov",
    ),
}  # fmt: skip


def parse_model_spec(spec: str) -> tuple[str, dict[str, str]]:
    """``"tiny"`` or ``"tiny:input=char_cnn,optimizer=nesterov"`` -> (preset, {field: text value}).

    `spanbert pretrain --model` takes this form for the cloze systems, so any `ClozeConfig` field can be
    set from the command line without a second option namespace."""
    name, _, rest = spec.partition(":")
    if name not in CLOZE_PRESETS:
        raise SpanBertError(
            f"--model: found unknown two-tower preset {name!r}, expected one of: {', '.join(CLOZE_PRESETS)} "
            "(optionally followed by :field=value,...)"
        )
    overrides: dict[str, str] = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq:
            raise SpanBertError(f"--model: found {item!r} in {spec!r}, expected field=value")
        overrides[key.strip()] = value.strip()
    valid = {f.name for f in dataclasses.fields(ClozeConfig)} - {"vocab_size", "pad_id", "bos_id", "eos_id", "sep_id"}
    unknown = sorted(set(overrides) - valid)
    if unknown:
        raise SpanBertError(
            f"--model: found unknown field {unknown[0]!r} in {spec!r}, expected one of: {', '.join(sorted(valid))}"
        )
    return name, overrides
