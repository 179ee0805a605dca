"""Samplers (`spanbert.samplers`): every system's sampler is in the one registry, and each cuts its items from a
range of the corpus's documents with the lengths it reports: masked blocks and NSP pairs (`PretrainDataset`),
the left-to-right LM's unmasked next-token blocks, the two-tower model's blocks between boundary markers; a
held-out range passes the epoch through. The causal blocks in a run are tested in test_ltr.py."""

from __future__ import annotations

import numpy as np
import pytest

from spanbert.cloze import ClozeBlocks
from spanbert.corpus import TokenCorpus
from spanbert.dataset import PretrainDataset
from spanbert.errors import SpanBertError
from spanbert.pretrain_config import SYSTEM_PRESETS
from spanbert.samplers import SAMPLERS, CausalLMBlocks, Cut, HeldOut


class _Framed:
    """The tokenizer a sampler is given: the corpus's own, with the two-tower markers as extra ids."""

    def __init__(self, tok):
        self.tok = tok

    def __getattr__(self, name: str):
        return getattr(self.tok, name)

    def token_to_id(self, token: str) -> int:
        return {"<s>": 1000, "</s>": 1001}[token]


def test_every_system_cuts_its_items_with_a_registered_sampler():
    assert set(SAMPLERS) == {"single", "nsp", "causal", "cloze"}
    assert {system.sampler for system in SYSTEM_PRESETS.values()} <= set(SAMPLERS)
    assert SAMPLERS["nsp"].min_docs == 2 and SAMPLERS["single"].min_docs == 1
    assert [name for name, s in SAMPLERS.items() if not s.masks] == ["causal", "cloze"]


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_each_sampler_reads_only_its_documents_with_the_lengths_it_reports(corpus_dir, name):
    corpus = TokenCorpus(corpus_dir)
    first = corpus.num_docs // 2
    items = SAMPLERS[name].build(corpus, _Framed(corpus.tokenizer), (first, corpus.num_docs), Cut(max_seq_length=32))
    lengths = items.lengths()
    assert len(items) > 0 and lengths.shape == (len(items),) and lengths.max() <= 32
    assert [len(items[i]["input_ids"]) for i in range(len(items))] == lengths.tolist()
    rows = items.pairs[:, :4].reshape(-1, 2) if name == "nsp" else (items.dataset if name == "causal" else items).blocks
    assert rows.min() >= corpus.doc_bounds[first, 0] and rows.max() <= corpus.doc_bounds[-1, 1]
    batch = SAMPLERS[name].collate([items[0], items[1]], pad_id=corpus.tokenizer.pad_id)
    assert batch["input_ids"].shape == (2, int(lengths[:2].max()))


def test_the_causal_and_cloze_items_are_the_blocks_unmasked(corpus_dir):
    corpus = TokenCorpus(corpus_dir)
    masked = PretrainDataset(corpus, max_seq_length=32, seed=1)
    causal = CausalLMBlocks(masked)
    cloze = ClozeBlocks(corpus, (0, corpus.num_docs), 32, bos_id=1000, eos_id=1001)
    assert np.array_equal(cloze.blocks, masked.blocks)  # the same packing, the same blocks
    for i in (0, len(masked) - 1):
        body = corpus.tokens(*masked.blocks[i].tolist())[0]
        assert causal[i]["input_ids"][1:-1].tolist() == body.tolist()
        assert causal[i]["labels"][:-1].tolist() == causal[i]["input_ids"][1:].tolist()
        assert cloze[i]["input_ids"].tolist() == [1000, *body.tolist(), 1001]
    with pytest.raises(SpanBertError, match="not NSP pairs"):
        CausalLMBlocks(PretrainDataset(corpus, max_seq_length=32, mode="nsp"))


def test_a_held_out_range_keeps_one_epochs_masks(corpus_dir):
    ds = PretrainDataset(corpus_dir, max_seq_length=32, seed=3)
    first = ds[4]["input_ids"]
    held = HeldOut(ds, 2, 7, fixed_epoch=1)
    assert len(held) == 5
    epoch_1 = held[2]["input_ids"]
    assert not np.array_equal(epoch_1, first) and np.array_equal(epoch_1, ds[4]["input_ids"])
    held.set_epoch(0)
    assert np.array_equal(held[2]["input_ids"], first)
