"""What relation extraction, GLUE and NER share: features, the two heads, fine-tuning and prediction.

The three task families differ only in their reader, their head (one label per sequence from the
encoder's sentence vector, or one label per word from its first sub-token) and their metric. This
module holds the rest once, for every model family (`spanbert.families`):

- features are plain dicts of numpy arrays (``input_ids``, ``token_type_ids``, ``labels``) and
  `Collator` pads a list of them into a batch;
- `SequenceClassifier` (a linear layer over the sentence vector: BERT's pooled ``[CLS]``, BERT §4.1 and
  SpanBERT §4.1; the two-tower model's boundary states, its §4) and `TokenClassifier` (a linear layer
  over every token, BERT §5.3), named as HF ``BertForSequenceClassification`` /
  ``BertForTokenClassification`` so a BERT model's saved weights load there; the output layer follows
  the family's habits (`spanbert.tasks.layers.output_layer`);
- `finetune` runs the one training loop of `spanbert.trainer` with an evaluation callback;
- `predict_logits` runs a model over features in batches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from spanbert import families
from spanbert.distributed import is_main
from spanbert.errors import DataError, SpanBertError
from spanbert.masking import IGNORE_INDEX
from spanbert.tasks.layers import apply_encoder_dropout, output_layer, scaled
from spanbert.tasks.ranks import predict_sharded, seeded_model
from spanbert.tasks.selection import KeepBest
from spanbert.tasks.task_folders import load_encoder, load_task_model, save_finetuned
from spanbert.trainer import predict_batches, train

# ---------------------------------------------------------------------------------------------
# Features


def pair_input(
    cls_id: int,
    sep_id: int,
    a: Sequence[int],
    b: Sequence[int] | None,
    max_length: int,
    mid_id: int | None = None,
) -> tuple[np.ndarray, np.ndarray, int]:
    """``[CLS] a [SEP]`` or ``[CLS] a [SEP] b [SEP]`` with token types 0/1, cut to ``max_length``; with
    ``mid_id`` the token between the two texts is that one (the family's framing, `Tokenizer.mid_id`:
    the two-tower model's ``<s> a <sep> b </s>``).

    Pairs are cut longest-first, one token at a time (BERT's ``_truncate_seq_pair``), so the shorter
    text keeps as much as it can. Returns (input_ids, token_type_ids, tokens removed).
    """
    a, b = list(a), (list(b) if b is not None else None)
    budget = max_length - (3 if b is not None else 2)
    if budget < 2:
        raise SpanBertError(f"max_seq_length={max_length} is too short for [CLS]/[SEP] and any text")
    removed = 0
    if b is None:
        removed = max(0, len(a) - budget)
        a = a[:budget]
    else:
        while len(a) + len(b) > budget:
            (a if len(a) >= len(b) else b).pop()
            removed += 1
    if b is None:
        ids = [cls_id, *a, sep_id]
        types = [0] * len(ids)
    else:
        ids = [cls_id, *a, sep_id if mid_id is None else mid_id, *b, sep_id]
        types = [0] * (len(a) + 2) + [1] * (len(b) + 1)
    return np.asarray(ids, dtype=np.int64), np.asarray(types, dtype=np.int64), removed


def token_outputs(logits: Tensor, labels: Tensor | None) -> dict[str, Tensor]:
    """A token tagger's outputs: logits (B, T, L), and with labels the cross-entropy and accuracy over
    the labelled positions (IGNORE_INDEX elsewhere)."""
    out = {"logits": logits}
    if labels is not None:
        out["loss"] = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)
        keep = labels != IGNORE_INDEX
        out["acc"] = (logits.argmax(-1)[keep] == labels[keep]).float().mean().detach()
    return out

class FeatureDataset(torch.utils.data.Dataset):
    """A map-style dataset over a list of feature dicts (what `spanbert.trainer.train` takes)."""

    def __init__(self, features: list[dict[str, Any]]):
        self.features = features

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.features[i]

    def lengths(self) -> np.ndarray:
        """(N,) tokens of each feature (all its choices for multiple choice): the trainer's token-budget
        batching (``--max_tokens_per_batch``) and its cost estimate read them."""
        return np.asarray([_token_count(f["input_ids"]) for f in self.features], dtype=np.int64)


def _token_count(ids: Any) -> int:
    """Tokens of one feature's ``input_ids``: one sequence, or one per choice (SWAG), whose lengths differ
    (so not one array)."""
    if len(ids) and not np.isscalar(ids[0]) and np.ndim(ids[0]) > 0:
        return sum(len(x) for x in ids)
    return len(ids)


class Collator:
    """Pads a list of features into a batch of tensors (a class so it pickles for DataLoader workers).

    ``input_ids`` is padded with ``pad_id``, ``token_type_ids`` with 0, per-token ``labels`` with -100;
    ``attention_mask`` is added only when the batch has padding (the encoder then skips masking).
    Keys other than the model inputs (``example_index`` ...) are dropped.
    """

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Tensor]:
        lengths = [len(f["input_ids"]) for f in features]
        B, T = len(features), max(lengths)
        input_ids = torch.full((B, T), self.pad_id, dtype=torch.long)  # (B, T)
        token_type_ids = torch.zeros((B, T), dtype=torch.long)  # (B, T)
        for i, f in enumerate(features):
            input_ids[i, : lengths[i]] = torch.as_tensor(f["input_ids"])
            if "token_type_ids" in f:
                token_type_ids[i, : lengths[i]] = torch.as_tensor(f["token_type_ids"])
        batch = {"input_ids": input_ids, "token_type_ids": token_type_ids}
        if min(lengths) < T:
            mask = torch.zeros((B, T), dtype=torch.long)
            for i, n in enumerate(lengths):
                mask[i, :n] = 1
            batch["attention_mask"] = mask  # (B, T)
        if "labels" in features[0]:
            first = np.asarray(features[0]["labels"])
            if first.ndim == 1:  # token labels (B, T)
                labels = torch.full((B, T), IGNORE_INDEX, dtype=torch.long)
                for i, f in enumerate(features):
                    labels[i, : lengths[i]] = torch.as_tensor(f["labels"])
            elif np.issubdtype(first.dtype, np.floating):  # regression (B,)
                labels = torch.tensor([float(f["labels"]) for f in features], dtype=torch.float32)
            else:  # one class per sequence (B,)
                labels = torch.tensor([int(f["labels"]) for f in features], dtype=torch.long)
            batch["labels"] = labels
        return batch


# ---------------------------------------------------------------------------------------------
# Models


class SequenceClassifier(nn.Module):
    """Encoder + dropout + linear layer on the sentence vector (HF ``BertForSequenceClassification``
    for BERT: the pooled ``[CLS]``; the two-tower model: its boundary states, §4).

    ``num_labels == 1`` is regression with a mean squared error loss (STS-B); otherwise
    cross-entropy over the classes.
    """

    def __init__(self, encoder: nn.Module, num_labels: int, dropout: float | None = None):
        super().__init__()
        self.bert = encoder
        self.num_labels = num_labels
        apply_encoder_dropout(encoder)
        self.output_scale, self.dropout, self.classifier = output_layer(
            encoder, encoder.sentence_size, num_labels, dropout
        )

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                labels: Tensor | None = None) -> dict[str, Tensor]:
        hidden = self.bert(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)  # (B, T, H)
        sentence = self.bert.sentence(hidden, attention_mask, input_ids)  # (B, S); a causal encoder: last token
        logits = self.classifier(self.dropout(scaled(sentence, self.output_scale)))  # (B, num_labels)
        out = {"logits": logits}
        if labels is not None:
            if self.num_labels == 1:
                out["loss"] = F.mse_loss(logits.squeeze(-1), labels.float())
            else:
                out["loss"] = F.cross_entropy(logits, labels)
                out["acc"] = (logits.argmax(-1) == labels).float().mean().detach()
        return out


class TokenClassifier(nn.Module):
    """Encoder + dropout + linear layer on every token (HF ``BertForTokenClassification``).

    Positions labelled -100 (special tokens, non-first sub-tokens of a word) carry no loss: BERT §5.3
    feeds only the first sub-token of each word to the classifier, no CRF.
    """

    def __init__(self, encoder: nn.Module, num_labels: int, dropout: float | None = None):
        super().__init__()
        self.bert = encoder
        self.num_labels = num_labels
        apply_encoder_dropout(encoder)
        self.output_scale, self.dropout, self.classifier = output_layer(encoder, encoder.hidden_size, num_labels, dropout)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                labels: Tensor | None = None) -> dict[str, Tensor]:
        hidden = self.bert(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)  # (B, T, H)
        logits = self.classifier(self.dropout(scaled(hidden, self.output_scale)))  # (B, T, num_labels)
        return token_outputs(logits, labels)


HEADS: dict[str, tuple[type[nn.Module], str, bool]] = {
    # kind -> (class, task part of the architecture name, encoder needs the [CLS] pooler)
    "sequence": (SequenceClassifier, "ForSequenceClassification", True),
    "token": (TokenClassifier, "ForTokenClassification", False),
}
NEEDS = {"sequence": "a sentence classifier", "token": "a token tagger"}


def resize_token_embeddings(encoder: nn.Module, vocab_size: int) -> None:
    """Grow the encoder's input vocabulary to ``vocab_size`` (`Family.resize_token_embeddings`): the
    relation task adds entity-marker tokens the vocabulary does not have."""
    encoder.resize_token_embeddings(vocab_size)


def label_config(labels: list[str] | None) -> dict[str, Any]:
    """The HF config.json keys of a head: ``id2label``/``label2id``/``num_labels`` or regression."""
    if labels is None:
        return {"num_labels": 1, "problem_type": "regression", "id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}}
    return {
        "num_labels": len(labels),
        "id2label": {str(i): l for i, l in enumerate(labels)},
        "label2id": {l: i for i, l in enumerate(labels)},
    }


def labels_from_config(config_json: dict[str, Any], source: str = "config.json") -> list[str] | None:
    """Inverse of `label_config`: the label list, or None for a regression head. ``source`` names the
    file in errors (a config.json without usable labels)."""
    if config_json.get("problem_type") == "regression":
        return None
    id2label = config_json.get("id2label")
    if not id2label or not isinstance(id2label, dict):
        raise DataError(
            source, f"found id2label {id2label!r:.60}; expected a mapping of class ids to labels "
            "(was the model saved by spanbert finetune?)",
        )  # fmt: skip
    keys = {str(k) for k in id2label}
    if keys != {str(i) for i in range(len(id2label))}:
        raise DataError(source, f"found id2label keys {sorted(keys)[:5]}; expected 0..{len(id2label) - 1}")
    labels = [id2label[str(i)] for i in range(len(id2label))]
    if not all(isinstance(l, str) for l in labels) or len(set(labels)) != len(labels):
        raise DataError(source, f"found id2label values {labels[:5]}; expected distinct label strings")
    num = config_json.get("num_labels")
    if num is not None and num != len(labels):
        raise DataError(source, f"found num_labels {num}; expected {len(labels)} as id2label has")
    return labels


def build_model(
    kind: str, model_dir: str | Path, num_labels: int, vocab_size: int | None = None, seed: int | None = None
) -> nn.Module:
    """A fresh head on the pre-trained encoder (any family) in ``model_dir`` (grown to ``vocab_size`` if given).

    With ``seed`` (``--seed``) the new weights (head, pooler, grown embeddings) are the same in every
    run and on every rank, and each rank then gets its own dropout stream.
    """
    cls, _, pooled = HEADS[kind]
    with seeded_model(seed):
        encoder = load_encoder(model_dir, add_pooling_layer=pooled)
        if vocab_size is not None:
            resize_token_embeddings(encoder, vocab_size)
        model = cls(encoder, num_labels)
    return model


def load_model(
    kind: str, model_dir: str | Path, device: str = "cpu", needs: str | None = None
) -> tuple[nn.Module, dict[str, Any], Any]:
    """A fine-tuned model saved by `save_model` (any family) -> (model in eval mode on ``device``,
    config.json dict, framed tokenizer). ``device``: cpu, cuda, cuda:N, mps or auto. A folder holding
    another kind of model is refused before anything is read (``needs`` says what the command needs)."""
    cls, task, pooled = HEADS[kind]
    source = str(Path(model_dir) / "config.json")

    def build(encoder: nn.Module, config_json: dict[str, Any]) -> nn.Module:
        labels = labels_from_config(config_json, source)
        return cls(encoder, 1 if labels is None else len(labels))

    return load_task_model(
        model_dir, build, families.architectures(task), needs or NEEDS[kind], device, add_pooling_layer=pooled
    )


def save_model(
    model: nn.Module, output_dir: str | Path, tokenizer: Any, kind: str, labels: list[str] | None, spanbert: dict
) -> None:
    """Save in the HF layout (config.json with id2label/label2id, model.safetensors, tokenizer files)."""
    architecture = families.architecture(model.bert, HEADS[kind][1])
    save_finetuned(model, output_dir, tokenizer, architecture, {**label_config(labels), "spanbert": spanbert})


# ---------------------------------------------------------------------------------------------
# Training and prediction


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def predict_logits(
    model: nn.Module, features: list[dict[str, Any]], pad_id: int, batch_size: int = 64, progress: bool = False
) -> list[np.ndarray]:
    """Logits of every feature, in order: (num_labels,) per sequence or (T_i, num_labels) per token.

    Under torchrun each rank predicts its share and every rank returns all logits (contract 7), so
    call it on every rank.
    """
    quiet = not progress or not is_main()  # one bar under torchrun, none with --disable_tqdm

    def predict(indices) -> list[np.ndarray]:
        # sort by length so batches carry little padding; outputs go back in the original order
        order = sorted(indices, key=lambda i: len(features[i]["input_ids"]))
        inputs = [{k: v for k, v in features[i].items() if k != "labels"} for i in order]
        results: dict[int, np.ndarray] = {}
        done = 0
        for _, out in predict_batches(
            model, inputs, batch_size, Collator(pad_id), device=_device(model), disable_tqdm=quiet
        ):
            logits = out["logits"].float().cpu().numpy()  # (b, num_labels) or (b, T, num_labels)
            for j, i in enumerate(order[done : done + len(logits)]):
                n = len(features[i]["input_ids"])
                results[i] = logits[j, :n] if logits.ndim == 3 else logits[j]
            done += len(logits)
        return [results[i] for i in indices]

    return predict_sharded(len(features), predict)


@dataclass
class Finetuned:
    """What `finetune_selected` returns."""

    predictions: Any
    """Dev predictions of the model ``finetune_selected`` leaves (None without ``predict``)."""
    selected_step: int | None
    """The step whose weights the model holds when they were chosen on dev (`TrainingArguments`
    ``metric_for_best_model``), else None (the model of the last step)."""
    global_step: int


def finetune_selected(
    model: nn.Module,
    train_features: list[dict[str, Any]],
    args: Any,
    pad_id: int,
    predict: Callable[[nn.Module], Any] | None = None,
    score: Callable[[Any], dict[str, Any]] | None = None,
    eval_size: Any = None,
) -> Finetuned:
    """Train ``model`` with the one loop of `spanbert.trainer`, evaluating on dev as ``args`` says.

    ``predict(model)`` predicts the dev set (in the task's own form) and ``score(predictions)`` turns
    them into metrics; the trainer logs the scalar ones at every evaluation and, with
    ``args.metric_for_best_model``, leaves ``model`` holding the weights of the best evaluation. The
    predictions returned are those of the model left (kept from its evaluation, not predicted twice).
    ``eval_size`` (`spanbert.trainer.eval_size` of the dev features) lets the trainer estimate an
    evaluation, print it in the plan and lower the evaluations of a short run (`trainer.plan_finetuning`).
    """
    if not train_features:
        raise SpanBertError("no training examples")

    def evaluate(m: nn.Module, step: int) -> tuple[dict[str, float], Any]:
        predictions = predict(m)
        metrics = score(predictions) if score else {}
        return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}, predictions

    keeper = KeepBest(evaluate, args)
    result = train(
        model, FeatureDataset(train_features), args, collate_fn=Collator(pad_id), eval_fn=keeper if predict else None,
        eval_size=eval_size,
    )
    if predict is None:
        return Finetuned(None, None, result.global_step)
    predictions, selected = keeper.chosen(model, args, result, len(train_features))
    return Finetuned(predictions, selected, result.global_step)


def finetune(model: nn.Module, train_features: list[dict[str, Any]], args: Any, pad_id: int,
             predict: Callable[[nn.Module], Any] | None = None,
             score: Callable[[Any], dict[str, Any]] | None = None) -> Any:
    """`finetune_selected`'s dev predictions only (None without ``predict``)."""
    return finetune_selected(model, train_features, args, pad_id, predict, score).predictions
