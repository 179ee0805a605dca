"""Batches: `PretrainDataset` items -> the tensors of docs/architecture.md ("Pre-training batches").

`collate_pretrain` pads the sequences and lists the MLM and SBO targets as flat positions;
`make_collate` binds its options for DataLoader workers; `pretrain_dataloader` is the seeded
DataLoader; `pretrain_target_counts` counts a batch's real targets per head (the trainer weights each
head's loss by them).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from spanbert import _aliases
from spanbert.errors import SpanBertError
from spanbert.masking import IGNORE_INDEX

if TYPE_CHECKING:  # only annotated: collation needs items, not the dataset that makes them
    from spanbert.dataset import PretrainDataset


def collate_pretrain(
    items: Sequence[dict[str, np.ndarray]],
    pad_id: int = 0,
    max_predictions: int | None = None,
    pad_to: int | None = None,
) -> dict[str, Any]:
    """Batch `PretrainDataset` items into the tensors of docs/architecture.md ("Pre-training batches").

    MLM and SBO targets are flat lists of positions into the flattened (B*T) batch. With
    ``max_predictions`` every sequence contributes exactly that many MLM and SBO entries (padding
    entries point at its [CLS] with label -100; masked tokens beyond it keep their corrupted input
    but are not scored), so every shape but (B, T) is fixed; with ``pad_to`` T is fixed too.
    ``attention_mask`` is left out when no sequence is padded.
    """

    B = len(items)
    lens = np.array([len(it["input_ids"]) for it in items])
    T = int(lens.max()) if pad_to is None else int(pad_to)
    if lens.max() > T:
        raise SpanBertError(f"a sequence of {lens.max()} tokens does not fit pad_to={T}")
    # One (B, T) array per field, filled row by row; the targets are then found for the whole batch at
    # once (a handful of numpy calls per batch instead of a dozen per sequence).
    input_ids = np.full((B, T), pad_id, dtype=np.int64)  # (B, T)
    token_type_ids = np.zeros((B, T), dtype=np.int64)  # (B, T)
    labels = np.full((B, T), IGNORE_INDEX, dtype=np.int64)  # (B, T)
    for b, it in enumerate(items):
        n = len(it["input_ids"])
        input_ids[b, :n] = it["input_ids"]
        token_type_ids[b, :n] = it["token_type_ids"]
        labels[b, :n] = it["labels"]
    flat_labels = labels.reshape(-1)  # (B*T,)
    if max_predictions is None:
        mlm_pos = (flat_labels != IGNORE_INDEX).nonzero()[0]  # (K,) flat positions b*T+t, in order
        counts = [len(it["sbo_positions"]) for it in items]
        base = np.repeat(np.arange(B, dtype=np.int64) * T, counts)  # (M,) b*T of each SBO target
        sbo_pos = np.concatenate([it["sbo_positions"] for it in items], dtype=np.int64) + base  # (M,)
        cols = {
            "mlm_positions": mlm_pos,
            "mlm_labels": flat_labels[mlm_pos],
            "sbo_positions": sbo_pos,
            "sbo_labels": flat_labels[sbo_pos],
            "sbo_left": np.concatenate([it["sbo_left"] for it in items], dtype=np.int64) + base,
            "sbo_right": np.concatenate([it["sbo_right"] for it in items], dtype=np.int64) + base,
            "sbo_rel": np.concatenate([it["sbo_rel"] for it in items], dtype=np.int64),
        }
    else:  # a fixed number of entries per sequence: truncate or pad each one
        parts: dict[str, list[np.ndarray]] = {k: [] for k in ("mpos", "mlab", "pos", "lab", "left", "right", "rel")}
        for b, it in enumerate(items):
            base = b * T
            row = labels[b]
            pos = (row != IGNORE_INDEX).nonzero()[0]  # (n_b,)
            pos, lab = _fix(pos, row[pos], max_predictions)
            sp = it["sbo_positions"]
            sp, s_lab = _fix(sp, row[sp], max_predictions)
            parts["mpos"].append(pos + base)
            parts["mlab"].append(lab)
            parts["pos"].append(sp + base)
            parts["lab"].append(s_lab)
            parts["left"].append(_fix(it["sbo_left"], s_lab, max_predictions)[0] + base)
            parts["right"].append(_fix(it["sbo_right"], s_lab, max_predictions)[0] + base)
            parts["rel"].append(_fix(it["sbo_rel"], s_lab, max_predictions)[0])
        names = dict(mpos="mlm_positions", mlab="mlm_labels", pos="sbo_positions", lab="sbo_labels")
        names.update(left="sbo_left", right="sbo_right", rel="sbo_rel")
        cols = {names[k]: np.concatenate(v, dtype=np.int64) for k, v in parts.items()}

    batch: dict[str, Any] = {"input_ids": torch.from_numpy(input_ids)}
    if (lens < T).any():
        batch["attention_mask"] = torch.from_numpy((np.arange(T)[None, :] < lens[:, None]).astype(np.int64))
    batch["token_type_ids"] = torch.from_numpy(token_type_ids)
    for name, col in cols.items():
        batch[name] = torch.from_numpy(col)
    if "next_sentence_label" in items[0]:
        batch["next_sentence_label"] = torch.tensor([int(it["next_sentence_label"]) for it in items], dtype=torch.long)
    return batch


def pretrain_target_counts(batch: dict[str, Any]) -> dict[str, int]:
    """Real (non-padding) targets of each pre-training head in a `collate_pretrain` batch, keyed as
    `SpanBertForPreTraining`'s ``loss_terms``: mlm, sbo (when the batch has SBO targets), nsp (when
    it has NSP labels). The trainer weights each head's mean loss by these counts (`count_targets`)."""
    counts = {"mlm": int((batch["mlm_labels"] != IGNORE_INDEX).sum())}
    if batch.get("sbo_labels") is not None:
        counts["sbo"] = int((batch["sbo_labels"] != IGNORE_INDEX).sum())
    if batch.get("next_sentence_label") is not None:
        counts["nsp"] = int((batch["next_sentence_label"] != IGNORE_INDEX).sum())
    return counts


def _fix(values: np.ndarray, labels: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Truncate or pad to exactly k entries; padding entries are position 0 ([CLS]) with label -100."""
    values, labels = values[:k], labels[:k]
    pad = k - len(values)
    if pad:
        values = np.concatenate([values, np.zeros(pad, dtype=np.int64)])
        labels = np.concatenate([labels, np.full(pad, IGNORE_INDEX, dtype=np.int64)])
    return values, labels


def make_collate(pad_id: int = 0, max_predictions: int | None = None, pad_to: int | None = None):
    """A picklable ``collate_fn`` (for DataLoader workers) with these options."""
    return functools.partial(collate_pretrain, pad_id=pad_id, max_predictions=max_predictions, pad_to=pad_to)


def pretrain_dataloader(
    dataset: PretrainDataset,
    batch_size: int,
    *,
    shuffle: bool = True,
    seed: int = 0,
    num_workers: int = 2,
    pin_memory: bool | None = None,
    max_predictions: int | None = None,
    pad_to: int | None = None,
    drop_last: bool = False,
):
    """A torch DataLoader over ``dataset``: seeded shuffling, worker processes, pinned memory on CUDA."""

    if pin_memory is None:
        pin_memory = torch.cuda.is_available()
    gen = torch.Generator()
    gen.manual_seed(seed)
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle,
        generator=gen,
        num_workers=num_workers,
        pin_memory=pin_memory,
        drop_last=drop_last,
        persistent_workers=num_workers > 0,
        collate_fn=make_collate(dataset.pad_id, max_predictions, pad_to),
    )

__getattr__ = _aliases.getter(__name__)  # the old spellings of names that moved (`spanbert._aliases`)
