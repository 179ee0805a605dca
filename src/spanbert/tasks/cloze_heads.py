"""Fine-tuning the cloze-driven two-tower model (Baevski et al. 2019, §4, §6.1, §6.2.1): GLUE and NER.

The readers, features, metrics and submission formats are those of `spanbert.tasks.glue` and
`spanbert.tasks.ner`; `spanbert finetune glue|ner --model DIR` comes here when ``DIR/config.json``
says ``"model_type": "cloze-two-tower"`` (and `predict`/`evaluate --model` when the fine-tuned
folder says so). What differs from BERT fine-tuning, and lives here:

- the inputs are wrapped in the boundary markers ``<s> ... </s>``, pairs joined by ``<sep>`` (§4);
  the combination module sees every forward and backward state ("No Masking", §4);
- GLUE: `ClozeForSequenceClassification` projects the outputs at the two boundary tokens (and at
  ``<sep>`` for pairs) with W ∈ R^{C×2d} (C×3d), weights and bias zero at the start; the LM output
  is scaled by 16 before the projection (the paper's way of giving the new weights a larger rate),
  dropout is off in the LM and 0.1 before the projection;
- NER: `ClozeForTokenTagging`, the paper's biLSTM-CRF (a linear projection, one biLSTM layer, a
  CRF), stacked on the frozen LM through an ELMo-style learned mix of its layers (`ScalarMix`) or on
  the fine-tuned LM with its own learning rate (1e-5, head 1e-3); dropout 0.3 at every level;
  early stopping when the dev loss stops improving (`train_with_early_stopping`);
- the paper's schedule: `spanbert.trainer`'s cosine schedule, warming up from 1e-7 over 10% of the
  steps and annealing to 1e-6 (`schedule_defaults`).

`CRF` is written here (forward algorithm, gold-path score, Viterbi; about 60 lines), tested against
brute-force enumeration of every tag sequence: the pip package ``pytorch-crf`` has had no release since
2019 and would be one more dependency for these few lines.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor, nn

from spanbert.distributed import print0
from spanbert.errors import DataError, SpanBertError

GLUE_LEARNING_RATES = (1e-4, 5e-5, 3e-5)
"""§4: the GLUE learning rate is the best of these three on dev."""
LM_SCALE = 16.0
"""§4: the LM output is multiplied by 16 before the GLUE projection (a larger rate for W, b)."""
WARMUP_INIT_LR = 1e-7
"""§4: the cosine schedule warms up linearly from this rate."""
FINAL_LR = 1e-6
"""§4: ... and anneals to this one at the last step."""


# ---------------------------------------------------------------------------------------------
# Which models come here


def model_type(model_dir: str | Path) -> str | None:
    """``model_type`` of ``model_dir/config.json`` (None when absent or unreadable: the BERT path
    then reports the problem with its own message)."""
    path = Path(model_dir) / "config.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return raw.get("model_type") if isinstance(raw, dict) else None


def is_two_tower(model_dir: str | Path | None) -> bool:
    """True when ``model_dir`` holds a two-tower model (pre-trained, or fine-tuned here)."""
    from spanbert.cloze import MODEL_TYPE

    return model_dir is not None and model_type(model_dir) == MODEL_TYPE


def model_in_argv(argv: Sequence[str]) -> str | None:
    """The ``--model`` value of a command line (None when not given)."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--model")
    known, _ = pre.parse_known_args(list(argv))
    return known.model


# ---------------------------------------------------------------------------------------------
# The §4 schedule


def schedule_defaults() -> dict[str, Any]:
    """The training options of the §4 schedule: `spanbert.trainer`'s cosine schedule, warming up from
    1e-7 over 10% of the steps and annealing to 1e-6."""
    return {"lr_scheduler_type": "cosine", "warmup_ratio": 0.1, "warmup_init_lr": WARMUP_INIT_LR, "min_lr": FINAL_LR}


# ---------------------------------------------------------------------------------------------
# Building blocks


def set_dropout(module: nn.Module, p: float) -> None:
    """Set every dropout rate inside ``module`` to ``p`` (dropout modules and the attention's own
    rate): §4 turns dropout off in the LM for GLUE and sets it to 0.3 for structured prediction."""
    from spanbert.model import Dropout

    for m in module.modules():
        if isinstance(m, (Dropout, nn.Dropout)):
            m.p = p
        elif isinstance(getattr(m, "dropout", None), float):  # spanbert.cloze.Attention keeps a float
            m.dropout = p


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


# ---------------------------------------------------------------------------------------------
# GLUE head (§4, Classification and regression tasks)


class ClozeForSequenceClassification(nn.Module):
    """Two-tower LM + W over the outputs at ``<s>``, ``</s>`` (and ``<sep>`` for pairs).

    ``num_labels == 1`` is regression with mean squared error (STS-B, §4); otherwise cross-entropy.
    """

    def __init__(self, lm: nn.Module, num_labels: int, pair: bool, scale: float = LM_SCALE,
                 dropout: float = 0.1, lm_dropout: float = 0.0):  # fmt: skip
        super().__init__()
        from spanbert.model import Dropout

        self.lm = lm
        set_dropout(lm, lm_dropout)  # §4: "we disable dropout in the language model"
        self.num_labels, self.pair, self.scale = num_labels, pair, scale
        self.sep_id = lm.config.sep_id
        self.dropout = Dropout(dropout)
        self.classifier = nn.Linear((3 if pair else 2) * lm.config.d_model, num_labels)  # W1 (C, 2d) / W2 (C, 3d)
        nn.init.zeros_(self.classifier.weight)  # §4: "initialize all weights as well as the bias to zero"
        nn.init.zeros_(self.classifier.bias)

    def features(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """The concatenated boundary outputs (B, 2d) or (B, 3d), before scaling."""
        h = self.lm.encode(input_ids, attention_mask, full_context=True)["hidden"]  # (B, T, d)
        B, T = input_ids.shape
        rows = torch.arange(B, device=input_ids.device)
        if attention_mask is None:
            last = torch.full((B,), T - 1, dtype=torch.long, device=input_ids.device)
        else:
            last = attention_mask.long().sum(1) - 1  # the closing </s>
        parts = [h[:, 0], h[rows, last]]  # (B, d) each: <s> and </s>
        if self.pair:
            is_sep = input_ids == self.sep_id
            if not bool(is_sep.any(1).all()):
                raise SpanBertError("a sentence-pair input without <sep>; expected <s> a <sep> b </s>")
            parts.append(h[rows, is_sep.long().argmax(1)])  # the first <sep>
        return torch.cat(parts, dim=-1)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                labels: Tensor | None = None) -> dict[str, Tensor]:  # fmt: skip
        x = self.dropout(self.scale * self.features(input_ids, attention_mask))
        logits = self.classifier(x)  # (B, C)
        out = {"logits": logits}
        if labels is not None:
            if self.num_labels == 1:
                out["loss"] = nn.functional.mse_loss(logits.squeeze(-1), labels.float())
            else:
                out["loss"] = nn.functional.cross_entropy(logits, labels)
                out["acc"] = (logits.argmax(-1) == labels).float().mean().detach()
        return out


# ---------------------------------------------------------------------------------------------
# NER head (§6.2.1: projection -> one biLSTM layer -> CRF)


class ClozeForTokenTagging(nn.Module):
    """Two-tower LM + the paper's biLSTM-CRF over the first sub-token of each word.

    ``stacking="frozen"``: the LM is not trained (and runs without dropout); the head reads an
    ELMo-style mix of its layers (`ScalarMix` over ``encode()["layers"]``). ``"finetune"``: the head
    reads the LM output (``hidden``) and the LM is trained too, with dropout ``dropout`` inside it.

    Batch keys (`ner_collate`): ``input_ids``, ``attention_mask`` (B, T); ``first_token``,
    ``word_mask`` (B, W); ``labels`` (B, W) tag ids, -100 at padding.
    """

    def __init__(self, lm: nn.Module, num_tags: int, stacking: str = "finetune", projection_dim: int = 200,
                 lstm_hidden_size: int = 200, dropout: float = 0.3):  # fmt: skip
        super().__init__()
        from spanbert.model import Dropout

        if stacking not in ("finetune", "frozen"):
            raise SpanBertError(f"--stacking: found {stacking!r}, expected finetune or frozen")
        self.lm, self.stacking = lm, stacking
        d = lm.config.d_model
        if stacking == "frozen":
            lm.requires_grad_(False)
            self.scalar_mix = ScalarMix(lm.config.num_layers + 2)  # embeddings, each block, the output
        else:
            set_dropout(lm, dropout)  # §4: 0.3 "within the pretrained model"
        self.dropout = Dropout(dropout)  # §4: 0.3 "on the weights connecting them" and in the head
        self.projection = nn.Linear(d, projection_dim)  # §6.2.1: "a linear projection layer"
        self.lstm = nn.LSTM(projection_dim, lstm_hidden_size, batch_first=True, bidirectional=True)
        self.tag_projection = nn.Linear(2 * lstm_hidden_size, num_tags)
        self.crf = CRF(num_tags)

    def train(self, mode: bool = True) -> ClozeForTokenTagging:
        super().train(mode)
        if self.stacking == "frozen":
            self.lm.eval()  # fixed features, as ELMo's biLM
        return self

    def emissions(self, input_ids: Tensor, attention_mask: Tensor | None, first_token: Tensor,
                  word_mask: Tensor) -> Tensor:  # fmt: skip
        """Tag scores of every word (B, W, K)."""
        if self.stacking == "frozen":
            with torch.no_grad():
                layers = self.lm.encode(input_ids, attention_mask, full_context=True)["layers"]
            x = self.scalar_mix(layers)  # (B, T, d)
        else:
            x = self.lm.encode(input_ids, attention_mask, full_context=True)["hidden"]  # (B, T, d)
        words = x.gather(1, first_token[..., None].expand(-1, -1, x.shape[-1]))  # (B, W, d)
        z = self.dropout(self.projection(self.dropout(words)))  # (B, W, p)
        lengths = word_mask.long().sum(1).clamp(min=1).cpu()
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


# ---------------------------------------------------------------------------------------------
# Features and batches


class BoundaryTokens:
    """A tokenizer seen through the ``cls_id``/``sep_id`` the BERT feature builders use, giving them
    the two-tower model's ``<s>`` and ``</s>`` (so `ner_features` wraps words in the boundary markers)."""

    def __init__(self, tokenizer: Any, config: Any):
        self._tok = tokenizer
        self.cls_id, self.sep_id, self.pad_id = config.bos_id, config.eos_id, config.pad_id

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tok, name)


def glue_features(task: Any, examples: list[Any], tokenizer: Any, config: Any, max_seq_length: int = 128,
                  with_labels: bool = True) -> list[dict[str, Any]]:  # fmt: skip
    """``<s> a </s>`` or ``<s> a <sep> b </s>`` (§4), pairs cut longest-first to ``max_seq_length``."""
    from spanbert.tasks.classification import pair_input

    enc_a = tokenizer.encode_batch([e.text_a for e in examples])
    enc_b = tokenizer.encode_batch([e.text_b for e in examples]) if task.text_b else [None] * len(examples)
    label2id = {l: i for i, l in enumerate(task.labels)} if task.labels else None
    features = []
    for ex, a, b in zip(examples, enc_a, enc_b):
        # pair_input makes [x] a [y] (b [y]) with BERT's truncation; here x = <s>, y = <sep>, last = </s>
        ids, _, _ = pair_input(config.bos_id, config.sep_id, a.ids, None if b is None else b.ids, max_seq_length)
        ids[-1] = config.eos_id
        f: dict[str, Any] = {"input_ids": ids}
        if with_labels and ex.label is not None:
            f["labels"] = np.float32(ex.label) if label2id is None else np.int64(label2id[ex.label])
        features.append(f)
    return features


class NerCollator:
    """Pads NER features (`spanbert.tasks.ner.ner_features`) into a word-level batch for the CRF.

    ``labels`` of a feature are per token (the tag on each word's first sub-token); the batch holds
    them per word: (B, W), -100 at padding. A class so it pickles for DataLoader workers."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Tensor]:
        from spanbert.tasks.classification import IGNORE_INDEX

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


# ---------------------------------------------------------------------------------------------
# Saving and loading a fine-tuned model (config.json says model_type cloze-two-tower)

HEAD_ARCHITECTURES = {"sequence": "ClozeForSequenceClassification", "tagger": "ClozeForTokenTagging"}


def save_task_model(model: nn.Module, output_dir: str | Path, tokenizer: Any, kind: str,
                    labels: list[str] | None, task: dict[str, Any]) -> None:  # fmt: skip
    """config.json (the LM's `ClozeConfig`, ``model_type``, HF label keys, the head's settings under
    ``"spanbert"``), model.safetensors (``lm.*`` and the head) and the tokenizer; written once."""
    from spanbert.cloze import MODEL_TYPE, save_tokenizer
    from spanbert.model import save_checkpoint
    from spanbert.tasks.classification import label_config
    from spanbert.tasks.common import write_once

    config_json = {
        "model_type": MODEL_TYPE,
        "architectures": [HEAD_ARCHITECTURES[kind]],
        **dataclasses.asdict(model.lm.config),
        **label_config(labels),
        "spanbert": task,
    }

    def write() -> None:
        save_tokenizer(tokenizer, output_dir)
        save_checkpoint(output_dir, model.state_dict(), config_json)  # config.json last

    write_once(write)


def build_head(kind: str, lm: nn.Module, num_labels: int, task: dict[str, Any]) -> nn.Module:
    """The head ``kind`` on ``lm`` with the settings saved under config.json's ``"spanbert"``."""
    if kind == "sequence":
        return ClozeForSequenceClassification(lm, num_labels, pair=bool(task.get("pair")),
                                              scale=float(task.get("scale", LM_SCALE)),
                                              dropout=float(task.get("head_dropout", 0.1)))  # fmt: skip
    return ClozeForTokenTagging(lm, num_labels, stacking=task.get("stacking", "finetune"),
                                projection_dim=int(task.get("projection_dim", 200)),
                                lstm_hidden_size=int(task.get("lstm_hidden_size", 200)),
                                dropout=float(task.get("dropout", 0.3)))  # fmt: skip


def load_task_model(kind: str, model_dir: str | Path, device: str = "cpu") -> tuple[nn.Module, dict[str, Any], Any]:
    """A model saved by `save_task_model` -> (model in eval mode on ``device``, config.json, tokenizer)."""
    from safetensors.torch import load_file

    from spanbert.cloze import ClozeConfig, TwoTowerModel
    from spanbert.tasks.classification import labels_from_config
    from spanbert.tokenization import load_tokenizer
    from spanbert.trainer import resolve_device

    model_dir = Path(model_dir)
    cfg_path = model_dir / "config.json"
    raw = json.loads(cfg_path.read_text(encoding="utf-8"))
    if raw.get("architectures") != [HEAD_ARCHITECTURES[kind]]:
        raise DataError(cfg_path, f"found architectures {raw.get('architectures')}, expected "
                        f"[{HEAD_ARCHITECTURES[kind]!r}] (a folder written by spanbert finetune)")  # fmt: skip
    names = {f.name for f in dataclasses.fields(ClozeConfig)}
    try:
        cfg = ClozeConfig(**{k: v for k, v in raw.items() if k in names})
    except TypeError as e:
        raise DataError(cfg_path, f"found {e}, expected ClozeConfig fields") from None
    weights = model_dir / "model.safetensors"
    if not weights.is_file():
        raise SpanBertError(f"{model_dir}: no weights (expected model.safetensors)")
    state = load_file(str(weights))
    labels = labels_from_config(raw, str(cfg_path))
    lm = TwoTowerModel(cfg, word_chars=state.get("lm.word_chars"))
    model = build_head(kind, lm, 1 if labels is None else len(labels), raw.get("spanbert", {}))
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise SpanBertError(f"{weights}: weights do not match a {HEAD_ARCHITECTURES[kind]}; "
                            f"missing {missing[:5]}, unexpected {unexpected[:5]}")  # fmt: skip
    model.to(resolve_device(device)).eval()
    return model, raw, load_tokenizer(model_dir)


def load_pretrained(model_dir: str | Path) -> tuple[nn.Module, Any]:
    """(two-tower LM in train mode, tokenizer) of a pre-trained folder; a fine-tuned folder is refused
    with a message (its head would be dropped silently otherwise)."""
    from spanbert.cloze import load_two_tower

    raw = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    if raw.get("architectures") in ([a] for a in HEAD_ARCHITECTURES.values()):
        raise SpanBertError(f"{model_dir}: found a fine-tuned model ({raw['architectures'][0]}), expected a "
                            f"pre-trained two-tower model (spanbert pretrain --system cloze)")  # fmt: skip
    lm, tokenizer = load_two_tower(model_dir)
    return lm.train(), tokenizer


# ---------------------------------------------------------------------------------------------
# GLUE


@dataclass
class ClozeGlueConfig:
    """Settings of the two-tower GLUE head (§4)."""

    max_seq_length: int = 128
    """Tokens per input, <s> ... </s> included (longer pairs are cut longest-first)."""
    lm_scale: float = LM_SCALE
    """Factor on the LM outputs before the projection (§4: 16)."""
    head_dropout: float = 0.1
    """Dropout between the LM output and the projection (§4: 0.1; the LM itself runs without)."""
    max_train_examples: int | None = None
    """Use only the first N training examples."""
    max_eval_examples: int | None = None
    """Use only the first N examples of each dev split."""


def glue_defaults(task: Any) -> dict[str, Any]:
    """§4: batch 16, three epochs keeping the best epoch on dev, lr 5e-5 (the grid's middle; --sweep
    tries 1e-4, 5e-5, 3e-5), cosine schedule with 10% warm-up, Adam without weight decay."""
    return dict(
        output_dir=f"runs/cloze-glue-{task.name}", learning_rate=5e-5, per_device_train_batch_size=16,
        num_train_epochs=3.0, weight_decay=0.0, evals_per_epoch=1, metric_for_best_model="score",
        **schedule_defaults(),
    )  # fmt: skip


def finetune_glue(task: Any, model_dir: str | Path, data_dir: str | Path, args: Any,
                  config: ClozeGlueConfig | None = None) -> dict[str, float]:  # fmt: skip
    """Fine-tune the two-tower model in ``model_dir`` on one GLUE task; save to ``args.output_dir``
    (with the dev predictions and ``dev_results.json``); return the dev metrics of the kept model."""
    from spanbert.tasks import classification as C
    from spanbert.tasks import glue as G
    from spanbert.tasks.common import seed_dropout, seed_init, write_once

    config = config or ClozeGlueConfig()
    out = Path(args.output_dir)
    train = G.read_split(task, data_dir, task.train)[: config.max_train_examples]
    dev = {s: G.read_split(task, data_dir, files)[: config.max_eval_examples] for s, files in task.dev.items()}
    gold = {s: [e.label for e in exs] for s, exs in dev.items()}
    seed_init(args.seed)
    lm, tokenizer = load_pretrained(model_dir)
    cfg = lm.config
    train_features = glue_features(task, train, tokenizer, cfg, config.max_seq_length)
    dev_features = {s: glue_features(task, exs, tokenizer, cfg, config.max_seq_length, False) for s, exs in dev.items()}
    num_labels = 1 if task.labels is None else len(task.labels)
    model = ClozeForSequenceClassification(lm, num_labels, pair=task.text_b is not None, scale=config.lm_scale,
                                           dropout=config.head_dropout)  # fmt: skip
    seed_dropout(args.seed)

    def predict_all(m: nn.Module) -> dict[str, list[str]]:
        return {
            s: G.labels_of(task, C.predict_logits(m, f, cfg.pad_id, args.per_device_eval_batch_size))
            for s, f in dev_features.items()
        }

    def score(pred: dict[str, list[str]]) -> dict[str, float]:
        return G.score_splits(task, gold, pred)

    C.finetune(model, train_features, args, cfg.pad_id, predict_all, score)
    pred = predict_all(model)  # the kept weights: the best epoch on dev with metric_for_best_model
    metrics = score(pred)
    task_meta = {
        "task": "glue", "glue_task": task.name, "max_seq_length": config.max_seq_length,
        "pair": task.text_b is not None, "scale": config.lm_scale, "head_dropout": config.head_dropout,
    }  # fmt: skip
    save_task_model(model, out, tokenizer, "sequence", list(task.labels) if task.labels else None, task_meta)

    def write() -> None:
        for split, exs in dev.items():
            G.write_submission(out / G._dev_name(task, split), exs, pred[split])
        C.write_json(out / "dev_results.json", metrics)

    write_once(write)
    return metrics


def predict_glue(task: Any, model_dir: str | Path, examples: list[Any], batch_size: int = 64, device: str = "cpu",
                 progress: bool = True) -> list[str]:  # fmt: skip
    """Labels of ``examples`` from a folder written by `finetune_glue` (what `spanbert predict glue`
    and `evaluate glue --model` call for a two-tower model)."""
    from spanbert.tasks import classification as C
    from spanbert.tasks import glue as G

    model, config_json, tokenizer = load_task_model("sequence", model_dir, device)
    labels = C.labels_from_config(config_json, str(Path(model_dir) / "config.json"))
    saved = config_json.get("spanbert", {}).get("glue_task")
    if saved and saved != task.name:
        raise SpanBertError(f"{model_dir} was fine-tuned on {saved}, not {task.name}; pass --task {saved}")
    max_len = config_json.get("spanbert", {}).get("max_seq_length", 128)
    features = glue_features(task, examples, tokenizer, model.lm.config, max_len, with_labels=False)
    logits = C.predict_logits(model, features, model.lm.config.pad_id, batch_size, progress=progress)
    if labels is None:
        return G.labels_of(task, logits)
    return [labels[int(np.argmax(l))] for l in logits]


def glue_finetune_cli(argv: list[str], prog: str) -> int:
    """``spanbert finetune glue --task NAME --data_dir DIR --model TWO_TOWER_DIR ...`` (§4 defaults)."""
    from spanbert.config import dataclass_from_args
    from spanbert.tasks import glue as G
    from spanbert.tasks.classification import print_metrics
    from spanbert.tasks.common import (
        add_finetune_arguments,
        check_output_dir,
        parse_task_args,
        start_distributed,
        sweep,
        training_arguments,
    )  # fmt: skip

    task = G._task_from_argv(argv)
    defaults = glue_defaults(task or G.GLUE_TASKS["RTE"])
    parser = argparse.ArgumentParser(prog=prog, description="Fine-tune a two-tower cloze model on GLUE (§4).")
    parser.add_argument("--task", required=True, help=f"GLUE task: {', '.join(G.GLUE_TASKS)}")
    parser.add_argument("--data_dir", required=True, help="the task's folder of GLUE tsv files")
    from spanbert.config import add_dataclass_arguments

    add_dataclass_arguments(parser.add_argument_group("two-tower GLUE head"), ClozeGlueConfig)
    add_finetune_arguments(parser, defaults)
    args = parse_task_args(parser, argv, defaults, configs=(ClozeGlueConfig,))
    config = dataclass_from_args(ClozeGlueConfig, args)
    targs = training_arguments(args, defaults)
    check_output_dir(targs)
    start_distributed(targs.device)
    if task.name == "WNLI":  # no model: the training set's majority class, as for BERT (glue.py)
        metrics = G.finetune_glue(task, args.model, args.data_dir, targs, None, config.max_seq_length,
                                  config.max_train_examples, config.max_eval_examples)  # fmt: skip
        print_metrics(metrics)
        return 0
    if not args.sweep:
        metrics = finetune_glue(task, args.model, args.data_dir, targs, config)
        print0(f"saved the fine-tuned model to {targs.output_dir}")
        print_metrics(metrics)
        return 0

    def one(lr: float, batch_size: int, run_dir: Path) -> float:
        run = dataclasses.replace(
            targs, learning_rate=lr, per_device_train_batch_size=batch_size, output_dir=str(run_dir)
        )
        return finetune_glue(task, args.model, args.data_dir, run, config)["score"]

    # §4: "chose the best value over three settings: 1e-04, 5e-05 and 3e-05", batch 16
    summary = sweep(one, targs.output_dir, GLUE_LEARNING_RATES, (targs.per_device_train_batch_size,))
    print0(f"best run copied to {targs.output_dir}")
    print_metrics(summary["best"])
    return 0


# ---------------------------------------------------------------------------------------------
# NER


@dataclass
class ClozeNerConfig:
    """Settings of the two-tower biLSTM-CRF NER head (§4, §6.2.1)."""

    stacking: Literal["finetune", "frozen"] = "finetune"
    """finetune: train the LM too, at --model_learning_rate (Table 3 "fine-tune"); frozen: keep the LM
    fixed and learn a softmax-weighted mix of its layers (Table 3 "ELMo")."""
    model_learning_rate: float = 1e-5
    """Peak learning rate of the LM with --stacking finetune (§6.2.1: 1e-5; the head uses --learning_rate, 1e-3)."""
    dropout: float = 0.3
    """Dropout in the LM, between LM and head, and in the head (§4: 0.3 at all levels)."""
    projection_dim: int = 200
    """Width of the linear projection before the biLSTM (not given in the paper)."""
    lstm_hidden_size: int = 200
    """Hidden units of the biLSTM in each direction (not given in the paper; AllenNLP's ELMo NER: 200)."""
    early_stopping: bool = True
    """Stop when the dev loss does not improve over the previous epoch, keeping that epoch (§4)."""
    max_seq_length: int = 128
    """Tokens per input piece; longer sentences are cut at word boundaries."""
    max_train_examples: int | None = None
    """Use only the first N training sentences."""
    max_eval_examples: int | None = None
    """Use only the first N dev sentences."""


NER_DEFAULTS = dict(
    output_dir="runs/cloze-ner", learning_rate=1e-3, per_device_train_batch_size=16, num_train_epochs=25.0,
    weight_decay=0.0, **schedule_defaults(),
)  # fmt: skip
"""§4 and §6.2.1: head 1e-3 (the LM 1e-5), batch 16, up to 25 epochs, cosine schedule, Adam."""


def ner_predict(model: nn.Module, features: list[dict[str, Any]], pad_id: int, batch_size: int = 64,
                progress: bool = False) -> tuple[list[np.ndarray], float | None]:  # fmt: skip
    """(Viterbi tag ids of each feature's words, mean NLL per feature or None without labels). Under
    torchrun each rank runs its share and every rank gets everything (call it on every rank)."""
    from spanbert.distributed import is_main
    from spanbert.tasks.common import predict_sharded
    from spanbert.trainer import predict_batches

    def run(indices: Sequence[int]) -> list[tuple[np.ndarray, float | None]]:
        items = [features[i] for i in indices]
        res: list[tuple[np.ndarray, float | None]] = []
        device = next(model.parameters()).device
        for _, out in predict_batches(model, items, batch_size, NerCollator(pad_id), device=device,
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
    from spanbert import trainer
    from spanbert.distributed import world_size

    if args.max_tokens_per_batch:
        raise SpanBertError("--max_tokens_per_batch: early stopping counts epochs in batches of sentences; "
                            "expected 0 (use --per_device_train_batch_size) or --early_stopping false")  # fmt: skip
    G = args.per_device_train_batch_size * args.gradient_accumulation_steps * world_size()
    epoch_steps = trainer.steps_per_epoch(len(dataset), G, world_size())
    if epoch_steps == 0:
        raise SpanBertError(f"{len(dataset)} training examples are fewer than one global batch of {G}")
    total = args.max_steps if args.max_steps > 0 else math.ceil(args.num_train_epochs * epoch_steps)
    base = dataclasses.replace(args, eval_steps=epoch_steps, evals_per_epoch=0, metric_for_best_model="loss",
                               greater_is_better=False)  # fmt: skip
    start = 0
    if args.resume:
        ckpt = trainer.latest_checkpoint(args.output_dir)
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
            trainer.load_best_weights(Path(args.output_dir), model)
            best_loss = result.best_metrics.get("loss", float("nan"))
            print0(f"early stopping at step {result.global_step}: the dev loss did not improve; kept the "
                   f"model of step {result.best_step} (dev loss {best_loss:.4f})")  # fmt: skip
            return result
        stop += epoch_steps


def finetune_ner(model_dir: str | Path, train_path: str | Path, dev_path: str | Path | None, args: Any,
                 config: ClozeNerConfig | None = None) -> dict[str, Any]:  # fmt: skip
    """Fine-tune the biLSTM-CRF on the two-tower model in ``model_dir`` (§6.2.1) and save it to
    ``args.output_dir``; returns the dev conlleval scores (empty without a dev file)."""
    from spanbert.tasks import classification as C
    from spanbert.tasks import ner as N
    from spanbert.tasks.common import seed_dropout, seed_init, write_once
    from spanbert.trainer import train

    config = config or ClozeNerConfig()
    train_sents = N.read_conll(train_path)[: config.max_train_examples]
    dev = N.read_conll(dev_path)[: config.max_eval_examples] if dev_path else []
    labels = N.label_list(train_sents)
    label2id = {l: i for i, l in enumerate(labels)}
    for s in dev:  # a tag the model cannot predict would only be scored as a silent miss
        for k, tag in enumerate(s.tags or []):
            if tag not in label2id:
                raise DataError(dev_path, f"found tag {tag!r}, which the training file {train_path} never has; "
                                f"expected one of {labels}", line=s.line + k)  # fmt: skip
    seed_init(args.seed)
    lm, tokenizer = load_pretrained(model_dir)
    tok = BoundaryTokens(tokenizer, lm.config)
    train_features = N.ner_features(train_sents, tok, label2id, config.max_seq_length, str(train_path))
    dev_features = N.ner_features(dev, tok, label2id, config.max_seq_length, str(dev_path))
    model = ClozeForTokenTagging(lm, len(labels), config.stacking, config.projection_dim, config.lstm_hidden_size,
                                 config.dropout)  # fmt: skip
    seed_dropout(args.seed)
    pad_id = lm.config.pad_id
    last: dict[str, Any] = {}

    def eval_fn(m: nn.Module, step: int) -> dict[str, float]:
        tag_ids, loss = ner_predict(m, dev_features, pad_id, args.per_device_eval_batch_size)
        scores = N.score(dev, words_to_tags(dev, dev_features, tag_ids, labels))
        last.update(step=step, scores=scores)
        return {"loss": float(loss), **{k: float(v) for k, v in scores.items() if isinstance(v, (int, float))}}

    # §6.2.1: the LM at 1e-5, the head at --learning_rate (1e-3); frozen: the LM has no trainable weights
    lr_by_prefix = {"lm.": config.model_learning_rate} if config.stacking == "finetune" else None
    dataset = C.FeatureDataset(train_features)
    if dev and config.early_stopping:
        train_with_early_stopping(model, dataset, args, NerCollator(pad_id), eval_fn, lr_by_prefix)
    else:
        train(model, dataset, args, collate_fn=NerCollator(pad_id), eval_fn=eval_fn if dev else None,
              lr_by_prefix=lr_by_prefix)  # fmt: skip
    metrics: dict[str, Any] = {}
    pred: list[list[str]] = []
    if dev:
        tag_ids, loss = ner_predict(model, dev_features, pad_id, args.per_device_eval_batch_size)
        pred = words_to_tags(dev, dev_features, tag_ids, labels)
        metrics = {**N.score(dev, pred), "loss": loss}
    out = Path(args.output_dir)
    meta = {"task": "ner", "max_seq_length": config.max_seq_length, "stacking": config.stacking,
            "projection_dim": config.projection_dim, "lstm_hidden_size": config.lstm_hidden_size,
            "dropout": config.dropout}  # fmt: skip
    save_task_model(model, out, tokenizer, "tagger", labels, meta)

    def write() -> None:
        if dev:
            N.write_predictions(out / "dev_predictions.txt", dev, pred)
            C.write_json(out / "dev_results.json", metrics)

    write_once(write)
    return metrics


def predict_ner(model_dir: str | Path, sentences: list[Any], batch_size: int = 64, device: str = "cpu",
                progress: bool = True, source: str | Path | None = None) -> list[list[str]]:  # fmt: skip
    """Tags of every word of ``sentences`` with a model saved by `finetune_ner` (what `spanbert predict
    ner` and `evaluate ner --model` call for a two-tower model)."""
    from spanbert.tasks import classification as C
    from spanbert.tasks import ner as N

    model, config_json, tokenizer = load_task_model("tagger", model_dir, device)
    labels = C.labels_from_config(config_json, str(Path(model_dir) / "config.json")) or []
    for s in sentences if source is not None else []:
        for k, tag in enumerate(s.tags or []):
            if tag not in labels:
                raise DataError(source, f"found tag {tag!r}, which the model never saw in training; expected one "
                                f"of {labels}", line=s.line + k)  # fmt: skip
    tok = BoundaryTokens(tokenizer, model.lm.config)
    features = N.ner_features(sentences, tok, None, config_json.get("spanbert", {}).get("max_seq_length", 128))
    tag_ids, _ = ner_predict(model, features, model.lm.config.pad_id, batch_size, progress)
    return words_to_tags(sentences, features, tag_ids, labels)


def ner_finetune_cli(argv: list[str], prog: str) -> int:
    """``spanbert finetune ner --train_file F --validation_file F --model TWO_TOWER_DIR ...``."""
    from spanbert.config import add_dataclass_arguments, dataclass_from_args
    from spanbert.tasks.classification import print_metrics
    from spanbert.tasks.common import (
        add_finetune_arguments,
        check_output_dir,
        parse_task_args,
        start_distributed,
        training_arguments,
    )  # fmt: skip

    parser = argparse.ArgumentParser(
        prog=prog, description="Fine-tune a biLSTM-CRF on a two-tower cloze model (§6.2.1)."
    )
    parser.add_argument("--train_file", "--train", dest="train", required=True,
                        help="CoNLL-2003 training file (word POS chunk TAG)")  # fmt: skip
    parser.add_argument("--validation_file", "--dev", dest="dev",
                        help="CoNLL-2003 dev file: early stopping on its loss, conlleval scores")  # fmt: skip
    add_dataclass_arguments(parser.add_argument_group("two-tower NER head"), ClozeNerConfig)
    add_finetune_arguments(parser, NER_DEFAULTS)
    args = parse_task_args(parser, argv, NER_DEFAULTS, configs=(ClozeNerConfig,))
    if args.sweep:
        raise SpanBertError("--sweep: the two-tower NER head has no grid here; the paper tuned (head, LM) rate "
                            "pairs: run --learning_rate / --model_learning_rate once per pair")  # fmt: skip
    config = dataclass_from_args(ClozeNerConfig, args)
    targs = training_arguments(args, NER_DEFAULTS)
    check_output_dir(targs)
    start_distributed(targs.device)
    metrics = finetune_ner(args.model, args.train, args.dev, targs, config)
    print0(f"saved the fine-tuned model to {targs.output_dir}")
    print_metrics(metrics)
    return 0
