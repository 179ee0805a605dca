"""The BERT family: the encoder (and its causal variant) and the pre-training heads (MLM, SBO, NSP).

Parameter names are those of HF `BertModel` / `BertForPreTraining`, so checkpoints move both ways with
no remapping. Three things make it faster than the HF implementation on the same work:
- attention is `spanbert.attention.attention` over a fused QKV projection, with no mask at all when
  the batch has no padding: SDPA, or in training on CPU, where SDPA has no fused kernel with dropout,
  a chunked attention-with-dropout that keeps its working set in cache;
- a padded batch does no work on its padding: the token-wise layers run on the real tokens only
  (`Unpad`), and on CPU attention too, a sequence at a time (`SelfAttention._ragged`);
- the MLM and SBO heads run only at the masked positions (15% of tokens) instead of producing
  vocabulary logits for every token, which dominates the cost of a small model's pre-training step.

How a folder of weights is read and written (every BERT layout, key renames, atomic saves) is
`spanbert.checkpoints`, and `Dropout` is `spanbert.dropout` (task heads share it): import those names
from there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from spanbert import _aliases
from spanbert.attention import attention
from spanbert.checkpoints import (
    config_path,
    describe_checkpoint,
    encoder_state_dict,
    head_weights,
    load_checkpoint,
    load_encoder_weights,
    load_pretraining_checkpoint,
    save_folder,
    split_pretraining_state,
    unplaced_weights,
)
from spanbert.compile import any_compiled
from spanbert.config import BertConfig, FinetuneHabits
from spanbert.distributed import eprint0
from spanbert.dropout import Dropout
from spanbert.errors import SpanBertError
from spanbert.hub import resolve_model

# ---------------------------------------------------------------------------------------------
# Encoder


def _act(name: str):
    if name == "gelu":
        return F.gelu  # exact (erf) GELU, as BERT
    if name == "gelu_new":
        return lambda x: F.gelu(x, approximate="tanh")
    if name == "relu":
        return F.relu
    raise SpanBertError(f"unsupported hidden_act {name!r}")



class Embeddings(nn.Module):
    compile_region = True  # `spanbert.compile`: compiled on its own under --compile

    def __init__(self, config: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None) -> Tensor:
        T = input_ids.shape[1]
        x = self.word_embeddings(input_ids) + self.position_embeddings.weight[:T]  # (B, T, H)
        if token_type_ids is None:
            x = x + self.token_type_embeddings.weight[0]
        else:
            x = x + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(x))


# Attention a sequence at a time (`SelfAttention._ragged`) when its work, sum(L^2), is at most
# RAGGED_SAVING x B T^2 and the work saved, (B T^2 - sum(L^2)) x hidden, is at least RAGGED_MIN_WORK a
# sequence: the loop's own cost (about 2 MFLOP of attention a sequence; measured on CPU: 10-35% slower
# steps for the 2 x 64 tiny preset below it, 7% faster for 4 x 256 at lengths 60-128 above it, 45% for
# MiniLM's 6 x 384 at 120-300).
RAGGED_SAVING = 0.75
RAGGED_MIN_WORK = 1e6
RAGGED_DEVICES = ("cpu",)


class Unpad:
    """Where the real tokens of a padded (B, T) batch sit, to run token-wise layers on them alone.

    As in MosaicBERT: projections, feed-forward, LayerNorm and dropout see (N, H) real-token rows;
    only attention re-pads to (B, T, .). With padding, that skips the padded rows' work entirely.
    """

    def __init__(self, attention_mask: Tensor, hidden_size: int = 0, allow_ragged: bool = True):
        self.B, self.T = attention_mask.shape
        self.index = attention_mask.reshape(-1).nonzero().squeeze(1)  # (N,) flat positions of real tokens
        # On CPU, attention too skips the padding (`SelfAttention._ragged`: a sequence at a time) when
        # that saves enough work (RAGGED_SAVING, RAGGED_MIN_WORK); a loop of small kernels would starve a GPU.
        # Not into compiled layers (``allow_ragged`` False): each batch's lengths would make a new graph.
        self.lengths: list[int] = []
        self.ragged = False
        if attention_mask.device.type in RAGGED_DEVICES and allow_ragged and not torch.compiler.is_compiling():
            # a read of host memory on CPU, not a device sync (a GPU batch takes the grid)
            self.lengths = attention_mask.ne(0).sum(1).tolist()  # ints, whatever the mask's dtype
            grid, work = self.B * self.T * self.T, sum(n * n for n in self.lengths)
            self.ragged = work <= RAGGED_SAVING * grid and (grid - work) * hidden_size >= RAGGED_MIN_WORK * self.B

    def gather(self, x: Tensor) -> Tensor:
        return x.reshape(self.B * self.T, -1)[self.index]  # (B, T, D) -> (N, D)

    def pad(self, x: Tensor) -> Tensor:
        out = x.new_zeros(self.B * self.T, x.shape[-1]).index_copy(0, self.index, x)
        return out.view(self.B, self.T, -1)  # (N, D) -> (B, T, D), zeros at padding


class SelfAttention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        H = config.hidden_size
        self.n_head = config.num_attention_heads
        self.query = nn.Linear(H, H)
        self.key = nn.Linear(H, H)
        self.value = nn.Linear(H, H)
        self.dropout_p = config.attention_probs_dropout_prob
        # §5.1 LTR baseline: left context only. Without padding the causal mask is SDPA's `is_causal`
        # (or a lower triangle on the explicit path); with padding `Encoder.forward` folds it into `mask`.
        self.causal = config.is_decoder

    def forward(self, x: Tensor, mask: Tensor | None, unpad: Unpad | None = None) -> Tensor:
        H = x.shape[-1]
        # One fused projection: three matmuls become one; names stay HF's query/key/value.
        w = torch.cat([self.query.weight, self.key.weight, self.value.weight])  # (3H, H)
        b = torch.cat([self.query.bias, self.key.bias, self.value.bias])
        qkv = F.linear(x, w, b)  # (B, T, 3H), or (N, 3H) for the N real tokens when unpadded
        if unpad is not None and unpad.ragged:
            return self._ragged(qkv, unpad.lengths)  # (N, H)
        if unpad is not None:
            qkv = unpad.pad(qkv)  # (B, T, 3H): attention is the one step that needs the grid
        B, T = qkv.shape[:2]
        qkv = qkv.view(B, T, 3, self.n_head, H // self.n_head)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, nh, T, hs)
        causal = self.causal and mask is None  # with padding the causal part is already in `mask`
        y = self._attend(q, k, v, mask, causal)  # (B, nh, T, hs)
        y = y.transpose(1, 2).reshape(B, T, H)
        return unpad.gather(y) if unpad is not None else y

    def _ragged(self, qkv: Tensor, lengths: list[int]) -> Tensor:
        """Each sequence attends over its own real tokens, one sequence at a time: (N, 3H) -> (N, H).

        The same result as the padded grid with its key mask (a padded key gets no weight), without
        the work on padding: attention costs sum(L^2) instead of B * T^2, no mask is built or applied,
        and no (B, T, 3H) re-padding is made. A causal encoder is causal within each sequence, which is
        what the grid's folded mask gives its real tokens."""
        H = qkv.shape[-1] // 3
        hs = H // self.n_head
        out = []
        for part in qkv.split(lengths):  # (L, 3H) per sequence, in batch order
            L = part.shape[0]
            if L == 0:
                continue
            # each (1, nh, L, hs): SDPA's fused CPU kernel takes 4-d inputs only (3-d: the math path)
            q, k, v = part.view(1, L, 3, self.n_head, hs).permute(2, 0, 3, 1, 4).unbind(0)
            out.append(self._attend(q, k, v, None, self.causal).transpose(1, 2).reshape(L, H))
        return torch.cat(out) if out else qkv.new_zeros(0, H)  # a batch of padding only: no token

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool) -> Tensor:
        """softmax(q k^T / sqrt(hs) + mask) v with attention dropout: (..., T, hs) -> (..., T, hs)."""
        return attention(q, k, v, mask, self.dropout_p if self.training else 0.0, causal)


class SelfOutput(nn.Module):
    def __init__(self, config: BertConfig, in_features: int):
        super().__init__()
        self.dense = nn.Linear(in_features, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = Dropout(config.hidden_dropout_prob)

    def forward(self, h: Tensor, residual: Tensor) -> Tensor:
        return self.LayerNorm(self.dropout(self.dense(h)) + residual)  # post-LN, as BERT


class Attention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.self = SelfAttention(config)
        self.output = SelfOutput(config, config.hidden_size)

    def forward(self, x: Tensor, mask: Tensor | None, unpad: Unpad | None = None) -> Tensor:
        return self.output(self.self(x, mask, unpad), x)


class Intermediate(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.act = _act(config.hidden_act)

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.dense(x))


class Layer(nn.Module):
    compile_region = True  # `spanbert.compile`: one graph serves every layer

    def __init__(self, config: BertConfig):
        super().__init__()
        self.attention = Attention(config)
        self.intermediate = Intermediate(config)
        self.output = SelfOutput(config, config.intermediate_size)

    def forward(self, x: Tensor, mask: Tensor | None, unpad: Unpad | None = None) -> Tensor:
        x = self.attention(x, mask, unpad)
        return self.output(self.intermediate(x), x)


class LayerStack(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList(Layer(config) for _ in range(config.num_hidden_layers))
        self.gradient_checkpointing = False

    def forward(
        self, x: Tensor, mask: Tensor | None, unpad: Unpad | None = None, states: list[Tensor] | None = None
    ) -> Tensor:
        for layer in self.layer:
            if self.gradient_checkpointing and self.training:
                x = torch.utils.checkpoint.checkpoint(layer, x, mask, unpad, use_reentrant=False)
            else:
                x = layer(x, mask, unpad)
            if states is not None:  # every layer's output (feature-based NER, BERT §5.3 Table 7)
                states.append(x)
        return x


class Pooler(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden: Tensor) -> Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))  # (B, H) from [CLS]


def init_weights(module: nn.Module, std: float) -> None:
    """BERT's initialisation: N(0, std) weights, zero biases, unit LayerNorm, zero padding embedding."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=std)
            if m.padding_idx is not None:
                with torch.no_grad():
                    m.weight[m.padding_idx].zero_()
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


def grow_embedding(old: nn.Embedding, vocab_size: int, init: Callable[[Tensor], Any]) -> nn.Embedding:
    """A copy of ``old`` with ``vocab_size`` rows (on its device, in its dtype): the existing rows
    unchanged, the new ones drawn by ``init`` (each family's own initialisation), for tokens added
    after pre-training (relation extraction's entity markers)."""
    new = nn.Embedding(vocab_size, old.embedding_dim, padding_idx=old.padding_idx)
    new.to(device=old.weight.device, dtype=old.weight.dtype)
    with torch.no_grad():
        init(new.weight)
        new.weight[: old.num_embeddings] = old.weight
    return new


def config_size(field: str, doc: str = "") -> property:
    """A size of the family protocol (`spanbert.families.Family`) read from the encoder's config by its HF
    name: ``num_layers = config_size("num_hidden_layers")``. The encoders whose configs keep transformers'
    names (BERT's, ModernBERT's) declare their sizes so, one line each."""
    return property(lambda self: getattr(self.config, field), doc=doc or f"``config.{field}``.")


class Encoder(nn.Module):
    """A BERT encoder whose `state_dict()` is exactly HF `BertModel`'s.

    `encoder(input_ids, attention_mask=None, token_type_ids=None)` returns the last hidden states,
    shape (B, T, H). `attention_mask` is 1 for real tokens; without padding (no mask, or all ones)
    attention runs unmasked, with padding the token-wise layers run on the real tokens only and padded
    positions come back as zeros.
    """

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True):
        super().__init__()
        self.config = config
        self.embeddings = Embeddings(config)
        self.encoder = LayerStack(config)
        self.pooler = Pooler(config) if add_pooling_layer else None
        init_weights(self, config.initializer_range)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                output_hidden_states: bool = False) -> Tensor | tuple[Tensor, ...]:
        """The last hidden states (B, T, H); with ``output_hidden_states`` instead the tuple of the
        embedding output and every layer's output, L + 1 tensors (B, T, H), as HF ``hidden_states``
        (its last item is the usual return value; padded positions are zeros in each)."""
        if input_ids.shape[1] > self.config.max_position_embeddings:
            raise SpanBertError(
                f"sequence of {input_ids.shape[1]} tokens is longer than max_position_embeddings="
                f"{self.config.max_position_embeddings}"
            )
        x = self.embeddings(input_ids, token_type_ids)  # (B, T, H)
        states: list[Tensor] | None = [] if output_hidden_states else None
        # A mask costs one host sync (`nonzero`: the number of real tokens is a shape); an unpadded
        # batch should come without one (the pre-training collator leaves it out) and costs none.
        unpad = None
        if attention_mask is not None:
            unpad = Unpad(attention_mask, self.config.hidden_size, allow_ragged=not any_compiled(self.encoder.layer))
        if unpad is None or (unpad.index.numel() == unpad.B * unpad.T and not torch.compiler.is_compiling()):
            out = self.encoder(x, None, states=states)  # no padding: no mask at all (a causal model: SDPA's is_causal)
            return out if states is None else (x, *states)
        # (B, 1, 1, T) boolean: True = may attend. Only keys are masked, as in BERT.
        mask = attention_mask.bool()[:, None, None, :]
        if self.config.is_decoder:
            T = input_ids.shape[1]
            tril = torch.ones(T, T, dtype=torch.bool, device=mask.device).tril()  # (T, T) key <= query
            # (B, 1, T, T); the diagonal keeps every row non-empty, so a padded query row before the
            # first real token (left padding) gets no all -inf softmax whose NaN gradient would reach
            # real keys; real queries never see a padded key either way
            mask = (mask & tril) | torch.eye(T, dtype=torch.bool, device=mask.device)
        x0 = unpad.gather(x)  # (N, H): real tokens only
        x = self.encoder(x0, mask, unpad, states=states)  # (N, H)
        # Padded positions come back as zeros (HF returns values there that no loss should use).
        if states is not None:
            return tuple(unpad.pad(h) for h in (x0, *states))  # L + 1 x (B, T, H)
        return unpad.pad(x)  # (B, T, H)

    def pool(self, hidden: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """The tanh pooler over [CLS] used by NSP and sentence classification: (B, T, H) -> (B, H).

        A causal encoder (`is_decoder`, the §5.1 LTR baseline) pools the **last real token** instead
        ([SEP]: the only position that has seen the whole input, as GPT classifies from its last token;
        [CLS] at position 0 sees only itself). Pass ``attention_mask`` when the batch is padded.
        """
        if self.pooler is None:
            raise SpanBertError("this encoder was built without a pooling layer (add_pooling_layer=False)")
        if self.config.is_decoder:
            B, T = hidden.shape[:2]
            last = (
                attention_mask.long().sum(1) - 1 if attention_mask is not None
                else torch.full((B,), T - 1, dtype=torch.long, device=hidden.device)
            )  # (B,) index of each row's last real token (right padding)
            return self.pooler(hidden[torch.arange(B, device=hidden.device), last][:, None])  # (B, H)
        return self.pooler(hidden)

    def set_gradient_checkpointing(self, enabled: bool = True) -> None:
        """Recompute each layer's activations in the backward pass: less memory, ~30% more compute."""
        self.encoder.gradient_checkpointing = enabled

    # ----------------------------------------------------------------- the family protocol
    # What a task may use of an encoder (`spanbert.families.Family`); the two-tower model's
    # `spanbert.cloze.TwoTowerEncoder` has the same members.
    model_type = "bert"
    hidden_size = config_size("hidden_size", "H of the token states.")
    sentence_size = config_size("hidden_size", "Width of `sentence`'s vector: the pooler's H.")
    num_layers = config_size("num_hidden_layers", "Layers; ``output_hidden_states`` gives num_layers + 1 states.")
    max_positions = config_size("max_position_embeddings", "The longest input, [CLS] and [SEP] included.")
    vocab_size = config_size("vocab_size")
    ffn_size = config_size("intermediate_size", "Width of a feed-forward layer's inner activation.")

    @property
    def habits(self) -> FinetuneHabits:
        """BERT's fine-tuning (§4; SpanBERT Appendix B): heads drawn from N(0, initializer_range) after
        dropout hidden_dropout_prob, AdamW with linear decay and clipping at 1 (the trainer's defaults)."""
        return FinetuneHabits(init_std=self.config.initializer_range, head_dropout=self.config.hidden_dropout_prob)

    def sentence(self, hidden: Tensor, attention_mask: Tensor | None = None, input_ids: Tensor | None = None) -> Tensor:
        """The sentence vector of classification heads, (B, T, H) -> (B, H): the tanh pooler over [CLS]
        (over the last real token for the causal variant, see `pool`). ``input_ids`` is unused."""
        return self.pool(hidden, attention_mask)

    def frame(self, tokenizer: Any) -> Any:
        """The tokenizer as tasks use it: ``[CLS] a [SEP] (b [SEP])``, BERT's own ids."""
        return tokenizer

    def config_json(self) -> dict[str, Any]:
        """The encoder's keys of a saved model's config.json (HF `BertConfig`, ``model_type`` "bert")."""
        return self.config.to_hf_dict()

    def resize_token_embeddings(self, vocab_size: int) -> None:
        """Grow the word embeddings to ``vocab_size`` rows (relation extraction's entity markers); new rows
        drawn as BERT initialises them, existing ids unchanged."""
        if vocab_size <= self.embeddings.word_embeddings.num_embeddings:
            return
        std = self.config.initializer_range
        self.embeddings.word_embeddings = grow_embedding(self.embeddings.word_embeddings, vocab_size,
                                                         lambda w: w.normal_(0.0, std))  # fmt: skip
        self.config.vocab_size = vocab_size

    @classmethod
    def from_pretrained(cls, path: str | Path, add_pooling_layer: bool = True) -> Encoder:
        """Load a BERT folder: ours, HF's, Google's / SpanBERT's original release layout
        (`bert_config.json`), or a fairseq-era SpanBERT state dict (`decoder.` prefix); see
        `load_checkpoint` and docs/architecture.md "Checkpoint layouts".

        Keys may carry the `bert.` prefix (task and pre-training checkpoints) or not (`BertModel`). A
        checkpoint without a pooler (the SpanBERT release) gets a freshly initialised one.
        """
        path = resolve_model(path)
        config_json, state = load_checkpoint(path)
        config = BertConfig.from_hf_dict(config_json, source=str(config_path(path)))
        encoder = cls(config, add_pooling_layer=add_pooling_layer)
        encoder.load_bert_state(encoder_state_dict(state), source=str(path))
        return encoder.eval()  # as transformers: a loaded model predicts; `trainer.train` switches to train()

    def load_bert_state(self, state: dict[str, Tensor], source: str = "checkpoint") -> None:
        """Load encoder weights (keys without `bert.`); a missing pooler is left freshly initialised."""
        load_encoder_weights(self, state, source, "BERT", optional="pooler.")

    def save_pretrained(self, path: str | Path, tokenizer: Any = None) -> None:
        """Write `config.json` + `model.safetensors` (+ tokenizer files) that `BertModel` loads, as one
        atomic folder (`spanbert.checkpoints.save_folder`: it replaces an earlier model's folder whole
        and refuses a folder of other files)."""
        config_json = {**self.config.to_hf_dict(), "architectures": ["BertModel"]}
        save_folder(path, self.state_dict(), config_json, tokenizer=tokenizer)


# ---------------------------------------------------------------------------------------------
# Pre-training heads (§3.2) and the pre-training model


class PredictionTransform(nn.Module):
    """dense -> GELU -> LayerNorm, the transform before the tied decoder (HF `cls.predictions.transform`)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = _act(config.hidden_act)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, x: Tensor) -> Tensor:
        return self.LayerNorm(self.act(self.dense(x)))


class MaskedLMHead(nn.Module):
    """HF `BertLMPredictionHead`: the decoder weight is the input embedding matrix, with its own bias."""

    compile_region = True  # `spanbert.compile`: (K, H) rows of the masked positions, K dynamic

    def __init__(self, config: BertConfig):
        super().__init__()
        self.transform = PredictionTransform(config)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, x: Tensor, embedding: Tensor) -> Tensor:
        return F.linear(self.transform(x), embedding, self.bias)  # (N, V)


class SpanBoundaryHead(nn.Module):
    """§3.2: y_i = f(x_{s-1}, x_{e+1}, p_{i-s+1}), a 2-layer GELU + LayerNorm MLP, tied decoder.

    h0 = [x_{s-1}; x_{e+1}; p_{i-s+1}];  h1 = LN(GELU(W1 h0));  y_i = LN(GELU(W2 h1)).
    """

    compile_region = True  # `spanbert.compile`

    def __init__(self, config: BertConfig, position_dim: int = 200, max_positions: int | None = None):
        super().__init__()
        H = config.hidden_size
        # One row per relative position inside a span; spans never exceed the block length.
        self.position_embeddings = nn.Embedding(max_positions or config.max_position_embeddings, position_dim)
        self.dense1 = nn.Linear(2 * H + position_dim, H)
        self.LayerNorm1 = nn.LayerNorm(H, eps=config.layer_norm_eps)
        self.dense2 = nn.Linear(H, H)
        self.LayerNorm2 = nn.LayerNorm(H, eps=config.layer_norm_eps)
        self.act = _act(config.hidden_act)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def represent(self, left: Tensor, right: Tensor, rel: Tensor) -> Tensor:
        """(M, H), (M, H), (M,) -> y (M, H): depends only on the two boundary states and the offset."""
        h0 = torch.cat([left, right, self.position_embeddings(rel)], dim=-1)  # (M, 2H + P)
        h1 = self.LayerNorm1(self.act(self.dense1(h0)))
        return self.LayerNorm2(self.act(self.dense2(h1)))  # (M, H)

    def forward(self, left: Tensor, right: Tensor, rel: Tensor, embedding: Tensor) -> Tensor:
        return F.linear(self.represent(left, right, rel), embedding, self.bias)  # (M, V)


class PreTrainingHeads(nn.Module):
    """HF's `cls` module: `cls.predictions` (MLM) and `cls.seq_relationship` (NSP), plus our SBO."""

    def __init__(self, config: BertConfig, sbo: bool, nsp: bool, sbo_position_dim: int = 200):
        super().__init__()
        self.predictions = MaskedLMHead(config)
        self.span_predictions = SpanBoundaryHead(config, sbo_position_dim) if sbo else None
        self.seq_relationship = nn.Linear(config.hidden_size, 2) if nsp else None


class _SummedCrossEntropy(torch.autograd.Function):
    """Summed cross-entropy over the rows whose label is not -100, and the count of rows whose label has
    the top score, in one log-softmax pass over (N, V) logits.

    `F.cross_entropy` + `argmax` read the heads' (N, V) logits six times and write them three: a
    log-softmax output, a zero-filled (N, V) gradient for `nll_loss`'s backward, then the
    log-softmax backward; argmax is an unvectorised pass of its own. Here the forward writes the
    log-softmax once (kept for the backward) and reads it once for the row maxima; the backward turns it
    into the gradient in place, softmax - one-hot, times the incoming gradient: two passes."""

    @staticmethod
    def forward(ctx, logits: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        lsm = torch.log_softmax(logits.float(), dim=-1)  # (N, V) fp32, also under bf16 autocast
        keep = labels != -100  # (N,)
        safe = labels.clamp(min=0)  # -100 -> 0: a valid index, its row weighted 0
        picked = lsm.gather(1, safe[:, None]).squeeze(1)  # (N,) log p(label)
        loss = (-picked * keep).sum()  # (-x).sum(): +0.0, not -0.0, over no target
        correct = ((picked >= lsm.amax(-1)) & keep).sum().float()  # label at the top (ties count)
        ctx.save_for_backward(lsm, safe, keep)
        ctx.mark_non_differentiable(correct)
        return loss, correct

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_loss: Tensor, _grad_correct: Tensor) -> tuple[Tensor, None]:
        lsm, safe, keep = ctx.saved_tensors
        grad = lsm.exp_()  # (N, V) softmax, in place: the saved log-softmax is used only here
        rows = torch.arange(grad.shape[0], device=grad.device)
        grad[rows, safe] -= 1.0
        grad.mul_((keep * grad_loss)[:, None])  # rows without a target: 0 (no boolean indexing: no host sync)
        return grad, None


def ce_and_acc(logits: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    """Mean cross-entropy and accuracy over the targets (labels != -100). With no target both are 0,
    the loss still attached to the graph so the head's parameters get (zero) gradients, as DDP needs.
    Sum / max(count, 1) rather than a branch on the count: no host sync in the training step."""
    count = (labels != -100).sum().clamp(min=1)  # not the NaN of a mean over nothing
    if logits.requires_grad and torch.is_grad_enabled():
        loss, correct = _SummedCrossEntropy.apply(logits, labels)
        return loss / count, correct.detach() / count
    loss = F.cross_entropy(logits.float(), labels, ignore_index=-100, reduction="sum") / count
    acc = ((logits.argmax(-1) == labels) & (labels != -100)).sum() / count
    return loss, acc


def masked_heads(
    out: dict[str, Tensor],
    hidden: Tensor,
    mlm: Callable[[Tensor], Tensor],
    sbo: SpanBoundaryHead | None,
    embedding: Tensor,
    mlm_weight: float = 1.0,
    sbo_weight: float = 1.0,
    *,
    mlm_positions: Tensor | None = None,
    mlm_labels: Tensor | None = None,
    sbo_positions: Tensor | None = None,
    sbo_labels: Tensor | None = None,
    sbo_left: Tensor | None = None,
    sbo_right: Tensor | None = None,
    sbo_rel: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """The MLM and SBO terms of a pre-training batch (§3.2), the same for every family: ``mlm`` maps the
    (N, H) states at the masked positions to (N, V) logits, the span boundary head reads the states at
    each target's outside boundaries. The keywords are the batch's targets as the collator names them
    (`spanbert.collate`): a family's pre-training ``forward`` passes them on as it got them. Logits,
    losses and accuracies go into ``out``; returns the weighted sum and the weighted terms (trainer
    contract 1: each a mean over its own targets, 0 but attached without targets)."""
    flat = hidden.reshape(-1, hidden.shape[-1])  # (B*T, H)
    loss = hidden.new_zeros((), dtype=torch.float32)
    terms: dict[str, Tensor] = {}
    if mlm_positions is not None:
        logits = mlm(flat[mlm_positions])  # (N, V): masked positions only
        out["mlm_logits"] = logits
        if mlm_labels is not None:
            out["mlm_loss"], out["mlm_acc"] = ce_and_acc(logits, mlm_labels)
            terms["mlm"] = mlm_weight * out["mlm_loss"]
            loss = loss + terms["mlm"]
    if sbo is not None and sbo_positions is not None and sbo_left is not None:
        # run on the empty set too: the head's parameters then get zero gradients instead of none,
        # which DDP requires of every parameter at every step
        logits = sbo(flat[sbo_left], flat[sbo_right], sbo_rel, embedding)  # (M, V)
        out["sbo_logits"] = logits
        if sbo_labels is not None:
            out["sbo_loss"], out["sbo_acc"] = ce_and_acc(logits, sbo_labels)
            terms["sbo"] = sbo_weight * out["sbo_loss"]
            loss = loss + terms["sbo"]
    return loss, terms


class SpanBertForPreTraining(nn.Module):
    """Encoder + MLM head, with the SBO head (SpanBERT) and/or the NSP head (BERT baseline).

    Loss (§3.2): mlm_weight * mean CE(MLM) + sbo_weight * mean CE(SBO) [+ CE(NSP)]; every masked token
    contributes one MLM and one SBO term. The batch layout is `spanbert.collate.collate_pretrain`'s.

    BERT's left-to-right baseline (§5.1, `--system ltr`) is this model with a causal config
    (`is_decoder`), no SBO and no NSP: its batches (`spanbert.samplers.CausalLMBlocks`) list every
    position i with the label token i+1, so the same `cls.predictions` head is a next-token head.
    """

    def __init__(
        self,
        config: BertConfig,
        sbo: bool = True,
        nsp: bool = False,
        mlm_weight: float = 1.0,
        sbo_weight: float = 1.0,
        sbo_position_dim: int = 200,
    ):
        super().__init__()
        self.config = config
        self.bert = Encoder(config, add_pooling_layer=nsp)
        self.cls = PreTrainingHeads(config, sbo=sbo, nsp=nsp, sbo_position_dim=sbo_position_dim)
        init_weights(self.cls, config.initializer_range)
        self.mlm_weight, self.sbo_weight = mlm_weight, sbo_weight

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                next_sentence_label: Tensor | None = None, **targets: Tensor | None) -> dict[str, Tensor]:
        """MLM and SBO logits at the masked positions (`masked_heads`, which takes ``targets``: the batch's
        positions, labels and span boundaries), NSP logits when the model has the head; given labels, the
        ``loss`` and its ``loss_terms``."""
        hidden = self.bert(input_ids, attention_mask, token_type_ids)  # (B, T, H)
        emb = self.bert.embeddings.word_embeddings.weight  # (V, H), tied decoder (§2)
        out: dict[str, Tensor] = {"hidden_states": hidden}
        loss, terms = masked_heads(
            out, hidden, lambda h: self.cls.predictions(h, emb), self.cls.span_predictions, emb,
            self.mlm_weight, self.sbo_weight, **targets,
        )  # fmt: skip
        if self.cls.seq_relationship is not None:
            nsp_logits = self.cls.seq_relationship(self.bert.pool(hidden))  # (B, 2)
            out["nsp_logits"] = nsp_logits
            if next_sentence_label is not None:
                out["nsp_loss"], out["nsp_acc"] = ce_and_acc(nsp_logits, next_sentence_label)
                terms["nsp"] = out["nsp_loss"]
                loss = loss + terms["nsp"]
        if targets.get("mlm_labels") is not None or next_sentence_label is not None:
            out["loss"] = loss
            out["loss_terms"] = terms
        return out

    # -- checkpoints ---------------------------------------------------------------------------

    def save_pretrained(self, path: str | Path, tokenizer: Any = None, extra: dict | None = None) -> None:
        """HF layout: `bert.*` + `cls.predictions.*` (+ `cls.seq_relationship.*`) in model.safetensors,
        loadable by `BertForMaskedLM` / `BertForPreTraining`; the SBO head beside it in
        `span_boundary_head.safetensors` so that transformers loads the main file without warnings.
        One atomic folder (`spanbert.checkpoints.save_folder`): a model without an SBO head saved over
        one with it leaves no SBO file behind."""
        main, extra_files = split_pretraining_state(self.state_dict())
        sbo = bool(extra_files)
        arch = "BertForPreTraining" if self.cls.seq_relationship is not None else "BertForMaskedLM"
        if self.config.is_decoder:  # §5.1 LTR: `cls.predictions` is then a next-token head, HF's causal BERT
            arch = "BertLMHeadModel"
        config_json = {**self.config.to_hf_dict(), "architectures": [arch]}
        spanbert_meta = {
            "sbo": sbo,
            "nsp": self.cls.seq_relationship is not None,
            "sbo_position_dim": self.cls.span_predictions.position_embeddings.embedding_dim if sbo else None,
            "mlm_weight": self.mlm_weight,
            "sbo_weight": self.sbo_weight,
            **(extra or {}),
        }
        config_json["spanbert"] = spanbert_meta
        save_folder(path, main, config_json, tokenizer=tokenizer, extra_files=extra_files)

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        sbo: bool | None = None,
        nsp: bool | None = None,
        *,
        require: Sequence[str] = (),
        needed_by: str = "this command",
        **kwargs: Any,
    ) -> SpanBertForPreTraining:
        """Load our pre-training checkpoint, or start from any BERT checkpoint (`--init_from`).

        Heads absent from the checkpoint (SBO for a HF BERT, MLM head for a bare `BertModel`) are
        freshly initialised, and said on stderr (as transformers says "newly initialized"); heads
        present are loaded. ``require`` names heads (``mlm``, ``sbo``, ``nsp``) that ``needed_by`` (a
        command, for the message) uses to predict: one the checkpoint does not hold is an error naming
        the folder, what it holds and what is needed, never a head initialised at random. Without
        spanbert's own settings in the config (any checkpoint not saved by spanbert), ``sbo``/``nsp``
        default to the heads the weights hold. A fairseq-era SpanBERT span head arrives renamed by
        `load_checkpoint`; its position table has fewer rows than ours (`--max-pair-targets 15`):
        those rows fill ours from the start and the rest keep their initialisation. What is not
        loaded is reported on stderr.
        """
        path = resolve_model(path)
        config_json, state = load_pretraining_checkpoint(path)
        meta = config_json.get("spanbert", {})
        has_sbo = any(k.startswith("cls.span_predictions.") for k in state)
        has_nsp = any(k.startswith("cls.seq_relationship.") for k in state)
        sbo = meta.get("sbo", has_sbo) if sbo is None else sbo
        nsp = meta.get("nsp", has_nsp) if nsp is None else nsp
        # the checkpoint's own SBO width wins: its saved position embeddings have that size
        table = state.get("cls.span_predictions.position_embeddings.weight")
        dim = meta.get("sbo_position_dim") or (table.shape[1] if table is not None else None)
        dim = dim or kwargs.get("sbo_position_dim") or 200
        kwargs.pop("sbo_position_dim", None)
        config = BertConfig.from_hf_dict(config_json, source=str(config_path(path)))
        model = cls(config, sbo=sbo, nsp=nsp, sbo_position_dim=dim, **kwargs)
        model.bert.load_bert_state(encoder_state_dict(state), source=str(path))
        heads = head_weights(state)  # `cls.*` in the heads' names, tied decoders dropped
        notes = []
        own = model.cls.state_dict()
        key = "span_predictions.position_embeddings.weight"
        if key in heads and key in own and heads[key].shape[0] != own[key].shape[0]:
            src, rows = heads.pop(key), own[key].shape[0]
            n = min(src.shape[0], rows)
            merged = own[key].clone()
            merged[:n] = src[:n].to(merged.dtype)
            heads[key] = merged
            kept = f"rows {n}-{rows - 1} keep their initialisation" if n < rows else f"rows {n}+ dropped"
            notes.append(
                f"span boundary head: the checkpoint's position table has {src.shape[0]} rows, this model "
                f"{rows}; rows 0-{n - 1} loaded, {kept} (spans longer than {n} tokens were never trained)"
            )
        ignored = sorted(f"cls.{k}" for k in heads if k not in own) + unplaced_weights(state, model.bert.pooler is not None)
        if ignored:
            notes.append(f"ignored {len(ignored)} weight(s) of {path} that this model has no place for: {ignored[:8]}"
                         f"{' ...' if len(ignored) > 8 else ''}")
        for k, v in heads.items():
            if k in own and tuple(v.shape) != tuple(own[k].shape):
                raise SpanBertError(f"{path}: cls.{k} has shape {tuple(v.shape)}, this model needs {tuple(own[k].shape)}")
        loaded = {k: v for k, v in heads.items() if k in own}
        fresh = sorted(k for k in own if k not in loaded)
        for head in require:
            prefix = _HEAD_PREFIX[head]
            if getattr(model.cls, prefix.rstrip(".")) is None or any(k.startswith(prefix) for k in fresh):
                raise SpanBertError(
                    f"{path}: holds {describe_checkpoint(config_json, state)}; {needed_by} needs "
                    f"{_HEAD_NAME[head]} (cls.{prefix}*), which it does not hold. Pass a pre-training "
                    "checkpoint that has it (spanbert pretrain's output, or HF BertForMaskedLM/BertForPreTraining)"
                )
        model.cls.load_state_dict(loaded, strict=False)
        if fresh:
            heads_fresh = [
                f"{_HEAD_NAME[h]} (cls.{prefix}*: {n} of {sum(k.startswith(prefix) for k in own)} tensors)"
                for h, prefix in _HEAD_PREFIX.items()
                if (n := sum(k.startswith(prefix) for k in fresh))
            ]
            notes.append(f"{path} has no weights for {', '.join(heads_fresh)}: freshly initialised")
        if notes:
            for note in notes:
                eprint0(f"note: {note}")
        return model.eval()  # as transformers: a loaded model predicts; `trainer.train` switches to train()


_HEAD_PREFIX = {"mlm": "predictions.", "sbo": "span_predictions.", "nsp": "seq_relationship."}
_HEAD_NAME = {"mlm": "the masked-LM head", "sbo": "the span boundary head", "nsp": "the next-sentence head"}


def flops_per_token(config: BertConfig, seq_len: int, mask_rate: float = 0.15, sbo: bool = True) -> float:
    """Training FLOPs per token of the useful work (forward + backward = 3x forward matmul FLOPs)."""
    H, L, I, V = config.hidden_size, config.num_hidden_layers, config.intermediate_size, config.vocab_size
    per_layer = 2 * (4 * H * H + 2 * H * I) + 2 * 2 * seq_len * H  # projections + QK^T and AV
    return 3 * (L * per_layer + head_flops(H, V, mask_rate, sbo))


def head_flops(hidden: int, vocab: int, mask_rate: float, sbo: bool) -> float:
    """Forward FLOPs per token of the pre-training heads at the masked positions (``mask_rate`` of the
    tokens): MLM's transform and tied decoder, and SBO's two-layer MLP (200-d positions) and decoder."""
    H, V = hidden, vocab
    heads = mask_rate * (2 * H * H + 2 * H * V)
    if sbo:
        heads += mask_rate * (2 * (2 * H + 200) * H + 2 * H * H + 2 * H * V)
    return heads


__all__ = [
    "Encoder",
    "SpanBertForPreTraining",
    "SpanBoundaryHead",
    "MaskedLMHead",
    "flops_per_token",
]

__getattr__ = _aliases.getter(__name__)
