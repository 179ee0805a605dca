"""The biLSTM-CRF tagger (Baevski et al. 2019 §6.2.1; Peters et al. 2018's NER head) on any model family.

`spanbert finetune ner --tagger bilstm-crf` (the two-tower family's default; BERT's is the linear head
of `spanbert.tasks.ner`): the first sub-token of each word from the encoder, a linear projection, one
biLSTM layer and a CRF, with dropout 0.3 at every level (§4). Two ways to stack it (Table 3):

- ``--stacking finetune``: the encoder is trained too, at its own rate (``--encoder_learning_rate``,
  §6.2.1: 1e-5; the head at ``--learning_rate``, 1e-3), with dropout 0.3 inside it;
- ``--stacking frozen``: the encoder is fixed (no dropout, no gradients) and the head reads an ELMo-style
  learned mix of its layers (`spanbert.tasks.layers.ScalarMix`).

Training stops early when the dev loss does not improve over the previous epoch (§4,
`train_with_early_stopping`). Features are those of `spanbert.tasks.conll.ner_features`; `WordCollator`
turns them into word-level batches.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from spanbert import _aliases, runs, trainer
from spanbert.distributed import is_main, print0, world_size
from spanbert.dropout import Dropout, set_dropout
from spanbert.errors import SpanBertError
from spanbert.masking import IGNORE_INDEX
from spanbert.tasks.classification import FeatureDataset
from spanbert.tasks.layers import CRF, ScalarMix
from spanbert.tasks.ner_options import CrfTaggerConfig
from spanbert.tasks.ranks import predict_sharded
from spanbert.trainer import predict_batches, train

TASK = "ForCrfTagging"
"""The task part of the saved architecture name (``BertForCrfTagging``, ``TwoTowerForCrfTagging``)."""


class CrfTagger(nn.Module):
    """Encoder + the paper's biLSTM-CRF over the first sub-token of each word.

    Batch keys (`WordCollator`): ``input_ids``, ``attention_mask`` (B, T); ``first_token``,
    ``word_mask`` (B, W); ``labels`` (B, W) tag ids, -100 at padding.
    """

    def __init__(self, encoder: nn.Module, num_tags: int, stacking: str = "finetune", projection_dim: int = 200,
                 lstm_hidden_size: int = 200, dropout: float = 0.3):  # fmt: skip
        super().__init__()
        if stacking not in ("finetune", "frozen"):
            raise SpanBertError(f"--stacking: found {stacking!r}, expected finetune or frozen")
        self.bert, self.stacking = encoder, stacking
        d = encoder.hidden_size
        if stacking == "frozen":
            encoder.requires_grad_(False)
            self.scalar_mix = ScalarMix(encoder.num_layers + 1)  # every layer state, embeddings included
        else:
            set_dropout(encoder, dropout)  # §4: 0.3 "within the pretrained model"
        self.dropout = Dropout(dropout)  # §4: 0.3 "on the weights connecting them" and in the head
        self.projection = nn.Linear(d, projection_dim)  # §6.2.1: "a linear projection layer"
        self.lstm = nn.LSTM(projection_dim, lstm_hidden_size, batch_first=True, bidirectional=True)
        self.tag_projection = nn.Linear(2 * lstm_hidden_size, num_tags)
        self.crf = CRF(num_tags)

    def train(self, mode: bool = True) -> CrfTagger:
        super().train(mode)
        if self.stacking == "frozen":
            self.bert.eval()  # fixed features, as ELMo's biLM
        return self

    def emissions(self, input_ids: Tensor, attention_mask: Tensor | None, first_token: Tensor,
                  word_mask: Tensor) -> Tensor:  # fmt: skip
        """Tag scores of every word (B, W, K)."""
        if self.stacking == "frozen":
            with torch.no_grad():
                layers = self.bert(input_ids, attention_mask, output_hidden_states=True)
            x = self.scalar_mix(layers)  # (B, T, H)
        else:
            x = self.bert(input_ids, attention_mask)  # (B, T, H)
        words = x.gather(1, first_token[..., None].expand(-1, -1, x.shape[-1]))  # (B, W, H)
        z = self.dropout(self.projection(self.dropout(words)))  # (B, W, p)
        lengths = word_mask.long().sum(1).clamp(min=1).cpu()  # pack_padded_sequence wants host lengths
        packed = nn.utils.rnn.pack_padded_sequence(z, lengths, batch_first=True, enforce_sorted=False)
        h, _ = self.lstm(packed)
        h, _ = nn.utils.rnn.pad_packed_sequence(h, batch_first=True, total_length=z.shape[1])  # (B, W, 2h)
        return self.tag_projection(self.dropout(h))  # (B, W, K)

    def forward(self, input_ids: Tensor, first_token: Tensor, word_mask: Tensor,
                attention_mask: Tensor | None = None, labels: Tensor | None = None) -> dict[str, Tensor]:  # fmt: skip
        emissions = self.emissions(input_ids, attention_mask, first_token, word_mask).float()
        mask = word_mask.bool()
        out: dict[str, Tensor] = {"logits": emissions}
        if labels is not None:
            nll = -self.crf.log_likelihood(emissions, labels, mask)  # (B,)
            out["loss"] = nll.mean()
            out["nll"] = nll.detach()  # (B,): the dev loss per sequence (not logged: not a scalar)
        if not self.training:
            out["tags"] = self.crf.decode(emissions, mask)  # (B, W), -1 at padding
        return out


def build(encoder: nn.Module, num_tags: int, settings: dict[str, Any]) -> CrfTagger:
    """The tagger on ``encoder`` with the settings saved under config.json's ``"spanbert"``."""
    return CrfTagger(encoder, num_tags, stacking=settings.get("stacking", "finetune"),
                     projection_dim=int(settings.get("projection_dim", 200)),
                     lstm_hidden_size=int(settings.get("lstm_hidden_size", 200)),
                     dropout=float(settings.get("dropout", 0.3)))  # fmt: skip


def settings_of(config: CrfTaggerConfig) -> dict[str, Any]:
    """What config.json keeps of the tagger (under ``"spanbert"``) to rebuild it for prediction."""
    return {"tagger": "bilstm-crf", "stacking": config.stacking, "projection_dim": config.tagger_projection_dim,
            "lstm_hidden_size": config.tagger_lstm_hidden_size, "dropout": config.tagger_dropout}  # fmt: skip


class WordCollator:
    """Pads NER features (`spanbert.tasks.conll.ner_features`) into a word-level batch for the CRF.

    ``labels`` of a feature are per token (the tag on each word's first sub-token); the batch holds
    them per word: (B, W), -100 at padding. A class so it pickles for DataLoader workers."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Tensor]:
        B = len(features)
        T = max(len(f["input_ids"]) for f in features)
        W = max(1, max(len(f["first_token"]) for f in features))
        input_ids = torch.full((B, T), self.pad_id, dtype=torch.long)  # (B, T)
        attention_mask = torch.zeros((B, T), dtype=torch.long)
        first_token = torch.zeros((B, W), dtype=torch.long)  # (B, W)
        word_mask = torch.zeros((B, W), dtype=torch.long)
        labels = torch.full((B, W), IGNORE_INDEX, dtype=torch.long)
        for i, f in enumerate(features):
            n, w = len(f["input_ids"]), len(f["first_token"])
            input_ids[i, :n] = torch.as_tensor(f["input_ids"])
            attention_mask[i, :n] = 1
            first_token[i, :w] = torch.as_tensor(f["first_token"])
            word_mask[i, :w] = 1
            if "labels" in f:
                labels[i, :w] = torch.as_tensor(np.asarray(f["labels"])[f["first_token"]])
        batch = {"input_ids": input_ids, "first_token": first_token, "word_mask": word_mask}
        if int(attention_mask.sum()) < B * T:
            batch["attention_mask"] = attention_mask
        if "labels" in features[0]:
            batch["labels"] = labels
        return batch


def predict_tags(model: nn.Module, features: list[dict[str, Any]], pad_id: int, batch_size: int = 64,
                 progress: bool = False) -> tuple[list[np.ndarray], float | None]:  # fmt: skip
    """(Viterbi tag ids of each feature's words, mean NLL per feature or None without labels). Under
    torchrun each rank runs its share and every rank gets everything (call it on every rank)."""
    def run(indices: Sequence[int]) -> list[tuple[np.ndarray, float | None]]:
        items = [features[i] for i in indices]
        res: list[tuple[np.ndarray, float | None]] = []
        device = next(model.parameters()).device
        for _, out in predict_batches(model, items, batch_size, WordCollator(pad_id), device=device,
                                      desc="predict", disable_tqdm=not progress or not is_main()):  # fmt: skip
            tags = out["tags"].cpu().numpy()  # (b, W)
            nll = out["nll"].cpu().tolist() if "nll" in out else [None] * len(tags)
            for j in range(len(tags)):
                res.append((tags[j, : len(items[len(res)]["first_token"])], nll[j]))
        return res

    results = predict_sharded(len(features), run)
    losses = [l for _, l in results if l is not None]
    return [t for t, _ in results], (float(np.mean(losses)) if losses else None)


def words_to_tags(sentences: list[Any], features: list[dict[str, Any]], tag_ids: list[np.ndarray],
                  labels: list[str]) -> list[list[str]]:  # fmt: skip
    """The tag of every word of every sentence from the per-feature (piece) predictions."""
    out = [["O"] * len(s.words) for s in sentences]
    for f, ids in zip(features, tag_ids):
        for k, t in enumerate(ids.tolist()):
            out[f["sentence"]][f["first_word"] + k] = labels[t]
    return out


def train_with_early_stopping(model: nn.Module, dataset: Any, args: Any, collate_fn: Callable,
                              eval_fn: Callable[[nn.Module, int], dict[str, float]],
                              lr_by_prefix: dict[str, float] | None = None) -> Any:  # fmt: skip
    """§4: train up to ``args.num_train_epochs`` epochs and stop when the dev loss (``eval_fn``'s
    ``"loss"``) does not improve over the previous epoch; the model ends with the best epoch's weights.

    Built on the trainer's documented pieces, so a stopped run is an exact prefix of a straight one:
    each epoch is a ``stop_at_step`` job continued with ``resume`` (the schedule stays that of all the
    epochs, as in the paper), the dev loss is evaluated once per epoch and the best epoch is kept with
    ``metric_for_best_model``. Returns the last `spanbert.trainer.TrainResult`."""
    if args.max_tokens_per_batch:
        raise SpanBertError("--max_tokens_per_batch: early stopping counts epochs in batches of sentences; "
                            "expected 0 (use --per_device_train_batch_size) or --early_stopping false")  # fmt: skip
    if args.per_device_train_batch_size == "auto":  # each epoch is its own train() call: one size for all of them
        raise SpanBertError("--per_device_train_batch_size auto: early stopping counts epochs in batches of a "
                            "known size; expected a number or --early_stopping false")  # fmt: skip
    G = args.per_device_train_batch_size * args.gradient_accumulation_steps * world_size()
    epoch_steps = runs.steps_per_epoch(len(dataset), G, world_size())
    if epoch_steps == 0:
        raise SpanBertError(f"{len(dataset)} training examples are fewer than one global batch of {G}")
    total = args.max_steps if args.max_steps > 0 else math.ceil(args.num_train_epochs * epoch_steps)
    base = dataclasses.replace(args, eval_steps=epoch_steps, evals_per_epoch=0, metric_for_best_model="loss",
                               greater_is_better=False)  # fmt: skip
    start = 0
    if args.resume:
        ckpt = runs.latest_checkpoint(args.output_dir)
        start = int(ckpt.name.split("-")[-1]) if ckpt is not None else 0
    stop = (start // epoch_steps + 1) * epoch_steps
    first = True
    while True:
        run = dataclasses.replace(base, stop_at_step=stop if stop < total else -1, resume=args.resume or not first,
                                  overwrite_output_dir=args.overwrite_output_dir and first)  # fmt: skip
        result = trainer.train(model, dataset, run, collate_fn=collate_fn, eval_fn=eval_fn, lr_by_prefix=lr_by_prefix)
        first = False
        if result.global_step >= total:
            return result  # the trainer has loaded the best epoch's weights
        if result.best_step is not None and result.best_step < result.global_step:
            runs.load_best_weights(Path(args.output_dir), model)
            best_loss = result.best_metrics.get("loss", float("nan"))
            print0(f"early stopping at step {result.global_step}: the dev loss did not improve; kept the "
                   f"model of step {result.best_step} (dev loss {best_loss:.4f})")  # fmt: skip
            return result
        stop += epoch_steps


def finetune(model: CrfTagger, train_features: list[dict[str, Any]], dev: list[Any],
             dev_features: list[dict[str, Any]], labels: list[str], args: Any, pad_id: int,
             config: CrfTaggerConfig, score: Callable[[list[Any], list[list[str]]], dict[str, Any]],
             ) -> tuple[dict[str, Any], list[list[str]]]:  # fmt: skip
    """Train the tagger (early stopping on the dev loss when there is a dev set and ``config.early_stopping``);
    returns (dev metrics with ``loss``, dev predictions), both empty without a dev set."""
    def eval_fn(m: nn.Module, step: int) -> dict[str, float]:
        tag_ids, loss = predict_tags(m, dev_features, pad_id, args.per_device_eval_batch_size)
        scores = score(dev, words_to_tags(dev, dev_features, tag_ids, labels))
        return {"loss": float(loss), **{k: float(v) for k, v in scores.items() if isinstance(v, (int, float))}}

    # §6.2.1: the encoder at 1e-5, the head at --learning_rate (1e-3); frozen: no trainable encoder weights
    lr_by_prefix = {"bert.": config.encoder_learning_rate} if config.stacking == "finetune" else None
    dataset = FeatureDataset(train_features)
    if dev and config.early_stopping:
        train_with_early_stopping(model, dataset, args, WordCollator(pad_id), eval_fn, lr_by_prefix)
    else:
        train(model, dataset, args, collate_fn=WordCollator(pad_id), eval_fn=eval_fn if dev else None,
              lr_by_prefix=lr_by_prefix)  # fmt: skip
    if not dev:
        return {}, []
    tag_ids, loss = predict_tags(model, dev_features, pad_id, args.per_device_eval_batch_size)
    pred = words_to_tags(dev, dev_features, tag_ids, labels)
    return {**score(dev, pred), "loss": loss}, pred

__getattr__ = _aliases.getter(__name__)  # the old spellings of names that moved (`spanbert._aliases`)
