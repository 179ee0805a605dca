"""Samplers: how a pre-training system cuts its items from a `TokenCorpus`, one registry for all four.

`blocks` cuts the token stream into [start, end) rows; a sampler turns a document range of the corpus
into a map-style dataset of items, and names the collate that batches them:

| sampler | items | collate | systems |
|---|---|---|---|
| single | [CLS] block [SEP], masked (`dataset.PretrainDataset`, §3.3) | `collate.collate_pretrain` | spanbert, bert-1seq, span-1seq* |
| nsp | [CLS] A [SEP] B [SEP] + NSP label (BERT §3.1) | `collate.collate_pretrain` | bert, google-bert, mask-*, span-2seq-nsp |
| causal | [CLS] block [SEP], unmasked, every next token a target (`CausalLMBlocks`) | `collate.collate_pretrain` | ltr |
| cloze | <s> block </s>, unmasked, every token a target (`cloze.ClozeBlocks`) | `cloze.collate_blocks` (over `cloze.cloze_collate`) | cloze, bilm, cloze-bilm |

`spanbert.pretrain_data.resolve` looks a system's sampler up in `SAMPLERS`; the job never learns its name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from spanbert import _aliases, cloze
from spanbert.collate import collate_pretrain
from spanbert.corpus import TokenCorpus
from spanbert.dataset import PretrainDataset
from spanbert.errors import SpanBertError
from spanbert.masking import MaskingConfig


class HeldOut(torch.utils.data.Dataset):
    """A contiguous range of a pre-training dataset's items, passing `set_epoch` through (the held-out
    set: ``fixed_epoch`` keeps one epoch's masks, the same examples at every evaluation)."""

    def __init__(self, dataset, start: int, stop: int, fixed_epoch: int | None = None):
        self.dataset, self.start, self.stop = dataset, start, stop
        if fixed_epoch is not None:
            dataset.set_epoch(fixed_epoch)

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, i: int):
        return self.dataset[self.start + i]

    def set_epoch(self, epoch: int) -> None:
        self.dataset.set_epoch(epoch)


class CausalLMBlocks(torch.utils.data.Dataset):
    """BERT §5.1 "LTR & No NSP": the single-sequence blocks of a `PretrainDataset`, unmasked, with
    every position i labelled with token i+1 (a standard left-to-right LM predicts every token; the
    last position, [SEP], has no target). Items have `collate_pretrain`'s layout, so the MLM head
    (`cls.predictions`) of a causal model becomes the next-token head and the trainer, the target
    counts and the held-out evaluation work unchanged (`mlm_loss` is then the next-token loss)."""

    def __init__(self, dataset):
        if dataset.nsp:
            raise SpanBertError("the left-to-right LM reads single-sequence blocks, not NSP pairs")
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def lengths(self):
        return self.dataset.lengths()  # the same blocks: [CLS] block [SEP]

    @property
    def plan_cache(self):
        return self.dataset.plan_cache  # the same blocks: the same epoch orders

    def set_epoch(self, epoch: int) -> None:
        self.dataset.set_epoch(epoch)  # nothing is random here; kept for the trainer's contract

    def __getitem__(self, index: int) -> dict[str, Any]:
        ds = self.dataset
        start, end = ds.blocks[index].tolist()
        body, _ = ds.corpus.tokens(start, end)
        ids = np.concatenate(([ds.cls_id], body, [ds.sep_id])).astype(np.int64)  # (T,) [CLS] block [SEP]
        labels = np.full(len(ids), -100, dtype=np.int64)
        labels[:-1] = ids[1:]  # (T,) position i predicts token i+1 from positions <= i
        empty = np.zeros(0, dtype=np.int64)
        return {
            "input_ids": ids,
            "labels": labels,
            "token_type_ids": np.zeros(len(ids), dtype=np.int64),
            "sbo_positions": empty,
            "sbo_left": empty,
            "sbo_right": empty,
            "sbo_rel": empty,
        }


@dataclass(frozen=True)
class Cut:
    """What every sampler is given: the block length and packing, the seed and masking of masked
    samplers (`PretrainDataset`), NSP's short-sequence probability, and whether to read stored masks."""

    max_seq_length: int
    block_packing: str = "sentences"
    seed: int = 0
    masking: MaskingConfig | None = None
    short_seq_prob: float = 0.0
    static: bool = False


@dataclass(frozen=True)
class Sampler:
    """One row of `SAMPLERS`."""

    build: Callable[[TokenCorpus, Any, tuple[int, int], Cut], Any]
    """(corpus, tokenizer framed for the family, [first, last) documents, cut) -> a map-style dataset
    with ``lengths()`` and ``set_epoch(epoch)``."""
    collate: Callable[..., dict[str, Any]]
    """(items, pad_id=, max_predictions=, pad_to=) -> a batch."""
    min_docs: int = 1
    """Documents each of the training and the held-out side needs (NSP's random B is another document's)."""
    masks: bool = True
    """Whether items are masked (a masking scheme applies; stored static masks can be read)."""


def _pretrain_dataset(mode: str) -> Callable[[TokenCorpus, Any, tuple[int, int], Cut], PretrainDataset]:
    def build(corpus: TokenCorpus, tok: Any, documents: tuple[int, int], cut: Cut) -> PretrainDataset:
        return PretrainDataset(
            corpus, tok, max_seq_length=cut.max_seq_length, mode=mode, seed=cut.seed, short_seq_prob=cut.short_seq_prob,
            masking=cut.masking, block_packing=cut.block_packing, documents=documents, static=cut.static,
        )  # fmt: skip

    return build


def _causal(corpus: TokenCorpus, tok: Any, documents: tuple[int, int], cut: Cut) -> CausalLMBlocks:
    return CausalLMBlocks(_pretrain_dataset("single")(corpus, tok, documents, cut))


SAMPLERS: dict[str, Sampler] = {
    "single": Sampler(_pretrain_dataset("single"), collate_pretrain),
    "nsp": Sampler(_pretrain_dataset("nsp"), collate_pretrain, min_docs=2),
    "causal": Sampler(_causal, collate_pretrain, masks=False),
    "cloze": Sampler(cloze.build_blocks, cloze.collate_blocks, masks=False),  # the two-tower family's own
}
"""`System.sampler` -> how its items are cut and batched."""

__getattr__ = _aliases.getter(__name__)  # the old spellings of names that moved (`spanbert._aliases`)
