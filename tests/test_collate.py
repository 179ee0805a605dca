"""Batches (`spanbert.collate`): the tensors of docs/architecture.md ("Pre-training batches") from dataset
items, and a seeded DataLoader whose workers draw the masks the main process would."""

from __future__ import annotations

import numpy as np
import torch

from spanbert.collate import collate_pretrain, pretrain_dataloader
from spanbert.dataset import PretrainDataset
from spanbert.masking import IGNORE_INDEX


def test_collate_matches_the_batch_table(corpus_dir):
    ds = PretrainDataset(corpus_dir, max_seq_length=64, seed=6)
    items = [ds[i] for i in range(6)]
    b = collate_pretrain(items)
    B, T = b["input_ids"].shape
    assert B == 6 and T == max(len(it["input_ids"]) for it in items)
    lens = [len(it["input_ids"]) for it in items]
    if min(lens) < T:
        assert b["attention_mask"].sum(1).tolist() == lens
    labels = torch.full((B, T), IGNORE_INDEX)
    for i, it in enumerate(items):
        labels[i, : len(it["labels"])] = torch.from_numpy(it["labels"])
    flat = labels.view(-1)
    assert torch.equal(flat[b["mlm_positions"]], b["mlm_labels"])
    assert (b["mlm_labels"] != IGNORE_INDEX).all()
    assert torch.equal(flat[b["sbo_positions"]], b["sbo_labels"])
    # external boundaries are observed tokens of the same row, on either side of the target
    assert (flat[b["sbo_left"]] == IGNORE_INDEX).all() and (flat[b["sbo_right"]] == IGNORE_INDEX).all()
    assert (b["sbo_left"] < b["sbo_positions"]).all() and (b["sbo_positions"] < b["sbo_right"]).all()
    assert torch.equal(b["sbo_positions"] - b["sbo_left"] - 1, b["sbo_rel"])
    assert (b["sbo_left"] // T == b["sbo_positions"] // T).all()
    # fixed shapes: exactly k entries per sequence, padding entries ignored
    k = 20
    f = collate_pretrain(items, max_predictions=k, pad_to=64)
    assert f["input_ids"].shape == (6, 64) and f["mlm_positions"].shape == (6 * k,)
    assert f["sbo_rel"].shape == (6 * k,)
    kept = f["mlm_labels"] != IGNORE_INDEX
    assert torch.equal(
        f["mlm_labels"][kept],
        torch.from_numpy(np.concatenate([it["labels"][it["labels"] != IGNORE_INDEX][:k] for it in items])),
    )
    # no padding -> no attention mask
    same = [ds[i] for i in range(len(ds)) if len(ds[i]["input_ids"]) == 64][:3]
    assert same and "attention_mask" not in collate_pretrain(same)


def test_dataloader_workers_give_the_same_masks(corpus_dir):
    ds = PretrainDataset(corpus_dir, max_seq_length=64, seed=4)
    ds.set_epoch(2)
    loader = pretrain_dataloader(ds, batch_size=4, shuffle=False, num_workers=2, max_predictions=12)
    for epoch in (2, 3):  # persistent workers must see set_epoch of the main process
        ds.set_epoch(epoch)
        first = next(iter(loader))
        direct = collate_pretrain([ds[i] for i in range(4)], max_predictions=12)
        for k in direct:
            assert torch.equal(first[k], direct[k]), (epoch, k)
