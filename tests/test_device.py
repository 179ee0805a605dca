"""Device placement and bf16 without a GPU (issue 24, docs/gpu.md).

Bugs that only a GPU shows are mostly tensors made on the wrong device: a mask built with
`torch.zeros(n)` inside `forward`, an index moved to the CPU, a `.item()` that stalls the device.
Three checks catch them on a CPU-only machine, for every model family, every task head and the
batches of their real collators:

- **meta**: model and batch on PyTorch's `meta` device (shapes, no values). A tensor made on the CPU
  inside forward or backward meets a meta tensor and raises "not on the expected device"; `.item()`,
  `.cpu()` and `bool(tensor)` raise too. `nonzero` (the unpadding of a padded batch, boolean masks)
  has no value to count on meta: the `meta_nonzero` fixture lets it answer "all but one element" so
  padded batches still take the padded path.
- **stray factories**: model and batch on the CPU with real values, the default device set to `meta`
  for the forward and backward pass: any tensor made without ``device=`` lands on meta and fails at its
  first use beside the model's. This runs the models whose forward depends on values (coreference's
  span pruning, the biLSTM's packed lengths, the CRF, the character CNN's `unique`), where meta cannot.
- **bf16**: the loss under ``torch.autocast("cpu", dtype=torch.bfloat16)`` within ``BF16_RTOL`` of the
  fp32 loss (bf16 keeps 8 significant bits, ~0.4% per rounding; these tiny models stay well inside
  1%: the largest gap seen is 0.11%, coreference), and the backward pass gives finite gradients of
  the parameters' own dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from spanbert import modernbert
from spanbert.config import BertConfig, model_config
from spanbert.model import Encoder, SpanBertForPreTraining

V = 64
BF16_RTOL = 0.01
"""|loss_bf16 - loss_fp32| <= BF16_RTOL * |loss_fp32| + BF16_ATOL for every model below."""
BF16_ATOL = 1e-3


def bert(**kw: Any) -> BertConfig:
    base = dict(vocab_size=V, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    return model_config("tiny", **{**base, **kw})


# ---------------------------------------------------------------------------------------------
# The three checks


def on(batch: Any, device: str) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, dict):
        return {k: on(v, device) for k, v in batch.items()}
    return batch


@pytest.fixture
def meta_nonzero(monkeypatch):
    """`nonzero` on meta: all but the last element non-zero (a padded batch stays padded on meta);
    boolean-mask indexing (C++ nonzero) takes torch's own "assume all non-zero" fake."""
    import torch.fx.experimental._config as fx_config

    real = torch.Tensor.nonzero

    def fake(self: torch.Tensor, *a: Any, **k: Any) -> torch.Tensor:
        if self.is_meta:
            return torch.empty((max(self.numel() - 1, 0), self.dim()), dtype=torch.long, device="meta")
        return real(self, *a, **k)

    monkeypatch.setattr(torch.Tensor, "nonzero", fake)
    # A torch config module keeps its options in a table behind `__getattr__`/`__setattr__`, not in its
    # `__dict__`. pytest >= 9.2's monkeypatch takes the old value from `__dict__`, finds none and undoes
    # with `delattr`, which deletes the option for the rest of the session. The module's own `patch`
    # restores the old value.
    with fx_config.patch(meta_nonzero_assume_all_nonzero=True):
        yield


def check_meta(model: nn.Module, batch: dict[str, Any]) -> None:
    """Forward and backward with model and batch on `meta`: every output and gradient stays there."""
    model = model.to("meta").train()
    out = model(**on(batch, "meta"))
    for k, v in out.items():
        if isinstance(v, torch.Tensor):
            assert v.is_meta, f"output {k} is on {v.device}"
    out["loss"].backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert grads, "no gradient reached the parameters"
    for n, g in grads.items():
        assert g.is_meta, f"{n}.grad is on {g.device}"


def check_stray_factories(model: nn.Module, batch: dict[str, Any]) -> None:
    """Real values on the CPU, default device meta: a tensor made without device= inside forward or
    backward lands on meta and fails beside the model's CPU tensors."""
    model = model.train()
    with torch.device("meta"):
        out = model(**batch)
        out["loss"].backward()
    assert out["loss"].device.type == "cpu" and torch.isfinite(out["loss"])


def check_bf16(model: nn.Module, batch: dict[str, Any]) -> None:
    """The loss under CPU bf16 autocast within BF16_RTOL of fp32 (dropout off: the same function)."""
    model = model.eval()  # no dropout, so both passes compute the same function
    with torch.no_grad():
        ref = float(model(**batch)["loss"])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(**batch)
    loss = out["loss"]
    assert loss.dtype == torch.float32, "losses are computed in fp32 (logits upcast before the softmax)"
    loss.backward()
    got = float(loss.detach())
    assert abs(got - ref) <= BF16_RTOL * abs(ref) + BF16_ATOL, f"bf16 loss {got:.5f} vs fp32 {ref:.5f}"
    for n, p in model.named_parameters():
        if p.grad is not None:
            assert p.grad.dtype == p.dtype and torch.isfinite(p.grad).all(), n


# ---------------------------------------------------------------------------------------------
# The cases: (model builder, batch builder), each batch from the task's own collator


class EncoderLoss(nn.Module):
    """The bare encoder with a loss on its states (and every layer's, for the feature path)."""

    def __init__(self, config: BertConfig, hidden_states: bool = False):
        super().__init__()
        self.bert = Encoder(config)
        self.hidden_states = hidden_states

    def forward(self, input_ids, attention_mask=None, token_type_ids=None) -> dict[str, torch.Tensor]:
        if self.hidden_states:
            states = self.bert(input_ids, attention_mask, token_type_ids, output_hidden_states=True)
            h = torch.stack(states).sum(0)
        else:
            h = self.bert(input_ids, attention_mask, token_type_ids)  # (B, T, H)
        pooled = self.bert.pool(h, attention_mask)  # (B, H): [CLS], or the last real token when causal
        return {"loss": h.float().pow(2).mean() + pooled.float().pow(2).mean()}


def modern(local_attention: int = 2, **kw: Any) -> modernbert.ModernBertConfig:
    """A tiny ModernBERT with dropout on: local window 2, so batches longer than 8 tokens run the
    chunked local attention; pad id 0 as the collators'."""
    base = dict(vocab_size=V, pad_token_id=0, cls_token_id=1, sep_token_id=2, attention_dropout=0.1,
                embedding_dropout=0.1, mlp_dropout=0.1, local_attention=local_attention)  # fmt: skip
    torch.manual_seed(0)
    return modernbert.modernbert_config("tiny", **{**base, **kw})


class ModernBertLoss(nn.Module):
    """The ModernBERT encoder with a loss on every layer's states and on its sentence vector."""

    def __init__(self, config: modernbert.ModernBertConfig):
        super().__init__()
        self.bert = modernbert.Encoder(config)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None) -> dict[str, torch.Tensor]:
        states = self.bert(input_ids, attention_mask, output_hidden_states=True)
        h = torch.stack(states).sum(0)  # (B, T, H)
        pooled = self.bert.sentence(states[-1], attention_mask, input_ids)
        return {"loss": h.float().pow(2).mean() + pooled.float().pow(2).mean()}


def token_batch(lengths: list[int], seed: int = 0) -> dict[str, torch.Tensor]:
    """Right-padded ids with an attention mask when lengths differ (the classification collator's)."""
    from spanbert.tasks.classification import Collator

    rng = np.random.default_rng(seed)
    feats = [
        {"input_ids": rng.integers(5, V, n).tolist(), "token_type_ids": [0] * (n // 2) + [1] * (n - n // 2)}
        for n in lengths
    ]
    return Collator(0)(feats)


def pretrain_items(lengths: list[int], nsp: bool, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Items as `spanbert.dataset.PretrainDataset` gives them: span-masked labels and SBO boundaries."""
    rng = np.random.default_rng(seed)
    items = []
    for n in lengths:
        ids = rng.integers(5, V, size=n)
        s = int(rng.integers(2, n - 4))
        pos = np.arange(s, s + 3)  # one masked span of 3 tokens: boundaries s-1 and s+3
        labels = np.full(n, -100)
        labels[pos] = ids[pos]
        item = {
            "input_ids": ids, "token_type_ids": (np.arange(n) >= n // 2).astype(np.int64), "labels": labels,
            "sbo_positions": pos, "sbo_left": np.full(3, s - 1), "sbo_right": np.full(3, s + 3),
            "sbo_rel": np.arange(3),
        }  # fmt: skip
        if nsp:
            item["next_sentence_label"] = len(items) % 2
        items.append(item)
    return items


def pretrain_batch(lengths: list[int], nsp: bool = False) -> dict[str, torch.Tensor]:
    from spanbert.collate import collate_pretrain

    return collate_pretrain(pretrain_items(lengths, nsp))


def causal_batch(lengths: list[int]) -> dict[str, torch.Tensor]:
    """The LTR system's batch: every position predicts the next token (`samplers.CausalLMBlocks`)."""
    from spanbert.collate import collate_pretrain

    rng = np.random.default_rng(3)
    items = []
    for n in lengths:
        ids = rng.integers(5, V, size=n)
        labels = np.full(n, -100)
        labels[:-1] = ids[1:]
        items.append({"input_ids": ids, "token_type_ids": np.zeros(n, np.int64), "labels": labels,
                      "sbo_positions": np.zeros(0, np.int64), "sbo_left": np.zeros(0, np.int64),
                      "sbo_right": np.zeros(0, np.int64), "sbo_rel": np.zeros(0, np.int64)})  # fmt: skip
    return collate_pretrain(items)


def two_tower(objective: str = "cloze", input: str = "bpe", **kw: Any):
    from spanbert.cloze import TwoTowerModel
    from spanbert.cloze_config import ClozeConfig

    torch.manual_seed(0)
    extra = {"char_filters": [[1, 4], [2, 8]], "max_word_chars": 6} if input == "char_cnn" else {}
    cfg = ClozeConfig(vocab_size=V, d_model=16, num_layers=2, num_heads=2, ffn_dim=32, final_heads=2,
                      objective=objective, input=input, **{**extra, **kw})  # fmt: skip
    word_chars = torch.randint(3, 60, (V, 8)) if input == "char_cnn" else None
    return TwoTowerModel(cfg, word_chars=word_chars)


def cloze_batch(lengths: list[int]) -> dict[str, torch.Tensor]:
    from spanbert.cloze import cloze_collate

    cfg = two_tower().config
    rng = np.random.default_rng(4)
    items = [{"input_ids": np.concatenate([[cfg.bos_id], rng.integers(5, V, n - 2), [cfg.eos_id]])} for n in lengths]
    return cloze_collate(items, cfg.pad_id)


class TwoTowerEncode(nn.Module):
    """`TwoTowerModel.encode`, the fine-tuning interface, with a loss on its representations."""

    def __init__(self, objective: str):
        super().__init__()
        self.lm = two_tower(objective)

    def forward(self, input_ids, attention_mask=None) -> dict[str, torch.Tensor]:
        out = self.lm.encode(input_ids, attention_mask)
        return {"loss": out["hidden"].float().pow(2).mean() + sum(h.float().mean() for h in out["layers"])}


def qa_model(bilstm: bool = False):
    from spanbert.tasks.qa import SpanBertForQuestionAnswering

    torch.manual_seed(0)
    return SpanBertForQuestionAnswering(bert(), bilstm=bilstm)


def qa_batch(lengths: list[int]) -> dict[str, torch.Tensor]:
    from spanbert.tasks.qa import collate_qa

    rng = np.random.default_rng(5)
    items = [{"input_ids": rng.integers(5, V, n).tolist(), "query_len": 3, "start_positions": n - 3,
              "end_positions": n - 2} for n in lengths]  # fmt: skip
    return collate_qa(items)


def classifier(kind: str, num_labels: int = 3, causal: bool = False):
    from spanbert.tasks.classification import SequenceClassifier, TokenClassifier

    torch.manual_seed(0)
    encoder = Encoder(bert(is_decoder=causal))
    return (SequenceClassifier if kind == "sequence" else TokenClassifier)(encoder, num_labels)


def sequence_batch(lengths: list[int], regression: bool = False) -> dict[str, torch.Tensor]:
    batch = token_batch(lengths)
    B = len(lengths)
    batch["labels"] = torch.linspace(0, 1, B) if regression else torch.arange(B) % 3
    return batch


def token_label_batch(lengths: list[int]) -> dict[str, torch.Tensor]:
    batch = token_batch(lengths)
    labels = torch.randint(0, 3, batch["input_ids"].shape, generator=torch.Generator().manual_seed(0))
    labels[:, 0] = -100  # [CLS] and padding carry no label
    if "attention_mask" in batch:
        labels[batch["attention_mask"] == 0] = -100
    batch["labels"] = labels
    return batch


def relation_model():
    """The relation task: a sequence classifier whose vocabulary grew by the entity-marker tokens."""
    from spanbert.tasks.classification import resize_token_embeddings

    model = classifier("sequence", num_labels=5)
    resize_token_embeddings(model.bert, V + 8)
    return model


def relation_batch(lengths: list[int]) -> dict[str, torch.Tensor]:
    batch = sequence_batch(lengths)
    batch["input_ids"][:, 1] = V + 3  # an entity marker: one of the new rows
    return batch


def choice_model():
    from spanbert.tasks.swag import MultipleChoice

    torch.manual_seed(0)
    return MultipleChoice(Encoder(bert()))


def choice_batch(lengths: list[int]) -> dict[str, torch.Tensor]:
    from spanbert.tasks.swag import ChoiceCollator

    rng = np.random.default_rng(6)
    feats = [
        {"input_ids": [rng.integers(5, V, n - c).tolist() for c in range(4)],
         "token_type_ids": [[0] * (n - c) for c in range(4)], "labels": i % 4}
        for i, n in enumerate(lengths)
    ]  # fmt: skip
    return ChoiceCollator(0)(feats)


def coref_case():
    from test_coref import tiny_model, toy_batch

    model = tiny_model(dropout=0.2, coref_depth=2, use_segment_distance=True)
    return model, toy_batch(model)[1]


def cloze_heads_case(kind: str):
    """The two-tower model in the shared heads: the sentence classifier (pair, boundary states, x16, zero
    init) and the biLSTM-CRF tagger (scalar mix, biLSTM, CRF)."""
    from test_cloze_finetune import _ner_batch, tiny_lm

    from spanbert.cloze import TwoTowerEncoder
    from spanbert.tasks.classification import SequenceClassifier
    from spanbert.tasks.crf_tagger import CrfTagger

    lm = tiny_lm()
    cfg = lm.config
    if kind == "sequence":
        ids = torch.tensor([[cfg.bos_id, 7, 8, cfg.sep_id, 9, cfg.eos_id], [cfg.bos_id, 11, cfg.sep_id, 12, cfg.eos_id, 0]])
        mask = (torch.arange(6)[None] < torch.tensor([[6], [5]])).long()
        return SequenceClassifier(TwoTowerEncoder(lm), 3), {
            "input_ids": ids, "attention_mask": mask, "labels": torch.tensor([0, 2])}
    stacking = "finetune" if kind == "tagger" else "frozen"
    model = CrfTagger(TwoTowerEncoder(lm), 3, stacking=stacking, projection_dim=8, lstm_hidden_size=6)
    return model, _ner_batch(cfg)


def feature_tagger_case(mode: str):
    from spanbert.tasks import ner_features as NF

    rng = np.random.default_rng(7)
    k = 1 if mode == "single" else 3
    arrays = [rng.standard_normal((7, 16)).astype(np.float32) for _ in range(k)]
    data = NF.SentenceFeatures(arrays, np.array([0, 3, 7]), [np.array([0, 1, 2]), np.array([2, 1, 0, 1])])
    torch.manual_seed(0)
    return NF.FeatureTagger(mode, k, 16, 3, lstm_hidden_size=8), NF.collate([data[0], data[1]])


PADDED, FULL = [12, 9, 7], [10, 10]

# name -> () -> (model, batch). All run under "stray factories" and bf16; those in META_REFUSED
# cannot run on meta and say why.
CASES: dict[str, Callable[[], tuple[nn.Module, dict[str, Any]]]] = {
    "encoder-padded": lambda: (EncoderLoss(bert()), token_batch(PADDED)),
    "encoder-full": lambda: (EncoderLoss(bert()), token_batch(FULL)),
    "encoder-hidden-states": lambda: (EncoderLoss(bert(), hidden_states=True), token_batch(PADDED)),
    "encoder-causal-padded": lambda: (EncoderLoss(bert(is_decoder=True)), token_batch(PADDED)),
    "encoder-causal-full": lambda: (EncoderLoss(bert(is_decoder=True)), token_batch(FULL)),
    "pretrain-mlm-sbo": lambda: (SpanBertForPreTraining(bert(), sbo=True, sbo_position_dim=8), pretrain_batch(FULL)),
    "pretrain-mlm-sbo-padded": lambda: (SpanBertForPreTraining(bert(), sbo=True, sbo_position_dim=8),
                                        pretrain_batch(PADDED)),
    "pretrain-mlm-nsp": lambda: (SpanBertForPreTraining(bert(), sbo=False, nsp=True), pretrain_batch(PADDED, nsp=True)),
    "pretrain-ltr": lambda: (SpanBertForPreTraining(bert(is_decoder=True), sbo=False), causal_batch(PADDED)),
    "two-tower-cloze": lambda: (two_tower("cloze"), cloze_batch(PADDED)),
    "two-tower-bilm": lambda: (two_tower("bilm"), cloze_batch(PADDED)),
    "two-tower-cloze-bilm": lambda: (two_tower("cloze-bilm"), cloze_batch(PADDED)),
    "two-tower-char-cnn": lambda: (two_tower("cloze", input="char_cnn"), cloze_batch(PADDED)),
    "two-tower-encode": lambda: (TwoTowerEncode("cloze"), cloze_batch(PADDED)),
    "two-tower-encode-bilm": lambda: (TwoTowerEncode("bilm"), cloze_batch(PADDED)),
    "qa": lambda: (qa_model(), qa_batch(PADDED)),
    "qa-bilstm": lambda: (qa_model(bilstm=True), qa_batch(PADDED)),
    "sequence-classification": lambda: (classifier("sequence"), sequence_batch(PADDED)),
    "sequence-regression": lambda: (classifier("sequence", num_labels=1), sequence_batch(PADDED, regression=True)),
    "sequence-classification-causal": lambda: (classifier("sequence", causal=True), sequence_batch(PADDED)),
    "token-classification": lambda: (classifier("token"), token_label_batch(PADDED)),
    "relation": lambda: (relation_model(), relation_batch(PADDED)),
    "swag": lambda: (choice_model(), choice_batch([9, 8])),
    "coref": coref_case,
    "cloze-glue-head": lambda: cloze_heads_case("sequence"),
    "cloze-ner-tagger-crf": lambda: cloze_heads_case("tagger"),
    "cloze-ner-frozen-scalar-mix": lambda: cloze_heads_case("frozen"),
    "feature-ner-tagger-weighted": lambda: feature_tagger_case("weighted"),
    "feature-ner-tagger-concat": lambda: feature_tagger_case("concat"),
    "modernbert-padded": lambda: (ModernBertLoss(modern()), token_batch(PADDED)),
    "modernbert-full": lambda: (ModernBertLoss(modern()), token_batch(FULL)),
    "modernbert-mean-pooling": lambda: (ModernBertLoss(modern(classifier_pooling="mean")), token_batch(PADDED)),
    "modernbert-pretrain-mlm-sbo": lambda: (modernbert.ModernBertForPreTraining(modern(), sbo_position_dim=8),
                                            pretrain_batch(FULL)),
    "modernbert-pretrain-mlm-sbo-padded": lambda: (modernbert.ModernBertForPreTraining(modern(), sbo_position_dim=8),
                                                   pretrain_batch(PADDED)),
}

META_REFUSED = {
    # the forward reads values: pruning, packed sequences and `unique` need them (one host sync each
    # on a GPU, by the nature of the computation); "stray factories" checks these models instead
    "coref": "span pruning picks spans by their scores (prune_non_crossing)",
    "qa-bilstm": "pack_padded_sequence takes the lengths on the CPU",
    "cloze-ner-tagger-crf": "pack_padded_sequence takes the lengths on the CPU; the CRF checks its mask",
    "cloze-ner-frozen-scalar-mix": "pack_padded_sequence takes the lengths on the CPU; the CRF checks its mask",
    "feature-ner-tagger-weighted": "pack_padded_sequence takes the lengths on the CPU",
    "feature-ner-tagger-concat": "pack_padded_sequence takes the lengths on the CPU",
    "two-tower-char-cnn": "the character CNN embeds each distinct word once (torch.unique)",
}


@pytest.mark.parametrize("name", [n for n in CASES if n not in META_REFUSED])
def test_forward_and_backward_on_meta(name, meta_nonzero):
    model, batch = CASES[name]()
    check_meta(model, batch)


@pytest.mark.parametrize("name", list(CASES))
def test_no_tensor_is_made_without_a_device(name):
    model, batch = CASES[name]()
    check_stray_factories(model, batch)


@pytest.mark.parametrize("name", list(CASES))
def test_bf16_autocast_loss_is_within_tolerance_of_fp32(name):
    model, batch = CASES[name]()
    check_bf16(model, batch)


def test_the_checks_catch_a_tensor_made_on_the_cpu(meta_nonzero):
    """Each check fails on the bug it is for: a mask made inside forward without device=."""
    class Stray(EncoderLoss):
        def forward(self, input_ids, attention_mask=None, token_type_ids=None):
            h = self.bert(input_ids, attention_mask, token_type_ids)  # (B, T, H)
            keep = torch.ones(input_ids.shape)  # (B, T) the bug: no device=
            return {"loss": (h * keep[..., None]).float().pow(2).mean()}

    with pytest.raises(RuntimeError, match="device"):
        check_meta(Stray(bert()), token_batch(PADDED))
    with pytest.raises(RuntimeError, match="device"):
        check_stray_factories(Stray(bert()), token_batch(PADDED))


def test_meta_refuses_a_host_sync():
    """`.item()` inside forward (a GPU stall) cannot run on meta."""
    class Syncs(EncoderLoss):
        def forward(self, input_ids, attention_mask=None, token_type_ids=None):
            out = super().forward(input_ids, attention_mask, token_type_ids)
            if out["loss"].item() > 0:
                return out
            return out

    with pytest.raises(RuntimeError, match="meta"):
        check_meta(Syncs(bert()), token_batch(FULL))
