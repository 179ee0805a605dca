"""The exact batches of a seed, pinned: blocks, NSP pairs, held-out splits and every rank's micro-batches.

Issue 57 replaced how blocks, pairs and batch plans are computed (vectorised, cached in the corpus
folder, each rank materialising its own share) under the promise "the same batches as today for the
same seed". The digests below were recorded with the code before that change (main at b634355) on a
fabricated corpus whose content depends on numpy alone (a fixed WordPiece vocabulary, ids drawn from
a seeded generator, written in the `spanbert preprocess` layout), so they hold on any machine: a digest
that changes is a changed batch. Covered: sentence and fixed packing at two lengths (one short enough
that a single word is longer than a block), NSP pairs of both packings with short sequences, a
document range, `pretrain_data.build_datasets`' held-out split, and the trainer's plans (token budget and
sequence batching, 1, 2 and 3 ranks, accumulation, epochs 0 and 1, a resumed start step), down to the
masked items of the first steps.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from spanbert.corpus import TokenCorpus
from spanbert.dataset import PretrainDataset

# a WordPiece vocabulary: BERT's special tokens, then words and "##" continuations
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(30)] + [f"##c{i}" for i in range(25)]
CONTINUATION = np.array([t.startswith("##") for t in VOCAB])


def fabricate(folder: Path, seed: int = 57, shards: int = 3, docs_per_shard: int = 14, starts_file: bool = True) -> Path:
    """A corpus in the `spanbert preprocess` layout: documents of 1..12 lines of 1..60 tokens (a few
    of 90), a token a continuation piece 35% of the time, never at a line's start."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    (folder / "tokenizer").mkdir()
    (folder / "tokenizer" / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    words, pieces = np.arange(5, 35), np.arange(35, 60)
    meta_shards, counts = [], np.zeros(len(VOCAB), np.int64)
    for k in range(shards):
        ids, docs, paras = [], [0], []
        n = 0
        for _ in range(docs_per_shard):
            for _ in range(int(rng.integers(1, 13))):
                length = int(rng.integers(1, 61)) if rng.random() > 0.08 else 90
                cont = rng.random(length) < 0.35
                cont[0] = False
                line = np.where(cont, rng.choice(pieces, length), rng.choice(words, length))
                if length == 90 and rng.random() < 0.5:
                    line[10:40] = rng.choice(pieces, 30)  # one word of 31 pieces: longer than a short block
                paras.append(n)
                ids.append(line)
                n += length
            docs.append(n)
        arr = np.concatenate(ids).astype(np.uint16)
        name = f"shard-{k:05d}"
        arr.tofile(folder / f"{name}.ids")
        if starts_file:
            (~CONTINUATION[arr]).astype(np.uint8).tofile(folder / f"{name}.starts")
        np.asarray(docs, np.int64).tofile(folder / f"{name}.docs")
        np.asarray(paras, np.int64).tofile(folder / f"{name}.paras")
        counts += np.bincount(arr, minlength=len(VOCAB))
        meta_shards.append({"name": name, "num_tokens": int(n), "num_docs": docs_per_shard,
                            "num_paragraphs": len(paras), "num_candidates": {}})  # fmt: skip
    np.save(folder / "unigram.npy", counts)
    meta = {"format": "spanbert-corpus-v1", "num_tokens": sum(s["num_tokens"] for s in meta_shards),
            "num_docs": shards * docs_per_shard, "vocab_size": len(VOCAB), "id_dtype": "uint16", "candidates": [],
            "one_doc_per_line": False, "max_line_bytes": 100000, "sources": ["fabricated"], "seconds": 0.0,
            "shards": meta_shards}  # fmt: skip
    (folder / "meta.json").write_text(json.dumps(meta, indent=2))
    return folder


def digest(value) -> str:
    h = hashlib.sha256()

    def feed(v):
        if isinstance(v, np.ndarray):
            h.update(str(v.shape).encode())
            h.update(np.ascontiguousarray(v, dtype=np.int64).tobytes())
        elif isinstance(v, dict):
            for k in sorted(v):
                h.update(str(k).encode())
                feed(v[k])
        elif isinstance(v, (list, tuple)):
            h.update(f"[{len(v)}:{type(v).__name__ == 'PadBatch'}".encode())
            for x in v:
                feed(x)
            h.update(b"]")
        else:
            h.update(repr(int(v) if isinstance(v, (np.integer, bool)) else v).encode())

    feed(value)
    return h.hexdigest()[:16]


@pytest.fixture(scope="module")
def pinned_corpus(tmp_path_factory) -> Path:
    return fabricate(tmp_path_factory.mktemp("pinned") / "corpus")


# (name -> PretrainDataset keywords)
DATASETS = {
    "sentences-32": dict(max_seq_length=32),
    "sentences-12": dict(max_seq_length=12),
    "fixed-32": dict(max_seq_length=32, block_packing="fixed"),
    "sentences-32-docs": dict(max_seq_length=32, documents=(3, 30)),
    "nsp-sentences-40": dict(max_seq_length=40, mode="nsp", short_seq_prob=0.1),
    "nsp-fixed-24": dict(max_seq_length=24, mode="nsp", short_seq_prob=0.2, block_packing="fixed"),
    "nsp-sentences-16-docs": dict(max_seq_length=16, mode="nsp", documents=(5, 40)),
}
SEEDS = (0, 3)

GOLDEN_EXAMPLES = {
    # recorded at b634355: digest of (blocks or pairs, lengths())
    "sentences-32/0": "34df50c5b8f2ff87",
    "sentences-32/3": "34df50c5b8f2ff87",
    "sentences-12/0": "85d3247f293c513d",
    "sentences-12/3": "85d3247f293c513d",
    "fixed-32/0": "59e8be51c656468d",
    "fixed-32/3": "59e8be51c656468d",
    "sentences-32-docs/0": "f28514f1e9f541fd",
    "sentences-32-docs/3": "f28514f1e9f541fd",
    "nsp-sentences-40/0": "871f871496621186",
    "nsp-sentences-40/3": "259f0eeb5f9bbb67",
    "nsp-fixed-24/0": "51c28c7239e352d1",
    "nsp-fixed-24/3": "a1d4caec57cc2b52",
    "nsp-sentences-16-docs/0": "5bac648f99d55bfa",
    "nsp-sentences-16-docs/3": "b0f8bfbb5cd1aed9",
}


def examples_of(ds: PretrainDataset):
    return {"rows": np.asarray(ds.pairs if ds.nsp else ds.blocks), "lengths": np.asarray(ds.lengths())}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", list(DATASETS))
def test_blocks_and_pairs_are_pinned(pinned_corpus, name, seed):
    ds = PretrainDataset(pinned_corpus, seed=seed, **DATASETS[name])
    assert digest(examples_of(ds)) == GOLDEN_EXAMPLES[f"{name}/{seed}"]


# (name -> TrainingArguments keywords); the plans of every rank for several world sizes
PLANS = {
    "tokens-96": dict(max_tokens_per_batch=96, gradient_accumulation_steps=1),
    "tokens-80-accum-2": dict(max_tokens_per_batch=80, gradient_accumulation_steps=2),
    "sequences-3-accum-2": dict(per_device_train_batch_size=3, gradient_accumulation_steps=2),
    "sequences-5": dict(per_device_train_batch_size=5, gradient_accumulation_steps=1),
}
GOLDEN_PLANS = {
    # recorded at b634355: digest of every rank's plan for epochs 0 and 1 (and epoch 1 from step 2)
    "sentences-32/tokens-96/1": "e14e72bb44090ab1",
    "sentences-32/tokens-96/2": "1078e1aa2fa74f31",
    "sentences-32/tokens-96/3": "214ffa6dc990c32d",
    "sentences-32/tokens-80-accum-2/1": "4554afb234339fdb",
    "sentences-32/tokens-80-accum-2/2": "d438bb05a6f35425",
    "sentences-32/tokens-80-accum-2/3": "c3a376b2d66577ac",
    "sentences-32/sequences-3-accum-2/1": "b8133f84d8d4b94b",
    "sentences-32/sequences-3-accum-2/2": "5d26091b654f330b",
    "sentences-32/sequences-3-accum-2/3": "f770cda427bb8f21",
    "sentences-32/sequences-5/1": "22bcd5c03da4b979",
    "sentences-32/sequences-5/2": "ced12d60eb55b5aa",
    "sentences-32/sequences-5/3": "e71ecff12af7a124",
    "nsp-sentences-40/tokens-96/1": "210c9cc251b65a9e",
    "nsp-sentences-40/tokens-96/2": "43b6ea8d06b9ae45",
    "nsp-sentences-40/tokens-96/3": "81eb17913b6af6d5",
    "nsp-sentences-40/tokens-80-accum-2/1": "847d24b396d444e6",
    "nsp-sentences-40/tokens-80-accum-2/2": "ed15636f9b636e7a",
    "nsp-sentences-40/tokens-80-accum-2/3": "988776b0dcaf9275",
    "nsp-sentences-40/sequences-3-accum-2/1": "1fda58a142b7d27c",
    "nsp-sentences-40/sequences-3-accum-2/2": "5a7f462299f76f8c",
    "nsp-sentences-40/sequences-3-accum-2/3": "a0db763a2b8136a8",
    "nsp-sentences-40/sequences-5/1": "5d4ab3f962d33ef5",
    "nsp-sentences-40/sequences-5/2": "0526a689bb9ae0ec",
    "nsp-sentences-40/sequences-5/3": "00e9077f1818b224",
    "fixed-32/tokens-96/1": "a76acd2e72fd14d0",
    "fixed-32/tokens-96/2": "5d60a40a9312ba0b",
    "fixed-32/tokens-96/3": "e6695c234cfd3b0b",
    "fixed-32/tokens-80-accum-2/1": "37b3ea3221ab1601",
    "fixed-32/tokens-80-accum-2/2": "2299b4aa1f4ded51",
    "fixed-32/tokens-80-accum-2/3": "5774789d9fa93e1c",
    "fixed-32/sequences-3-accum-2/1": "8e50be17de136a74",
    "fixed-32/sequences-3-accum-2/2": "94b3c8460a0a22f8",
    "fixed-32/sequences-3-accum-2/3": "80fbbc7f26cc2443",
    "fixed-32/sequences-5/1": "edf88115f9d917f3",
    "fixed-32/sequences-5/2": "1e9022918d3c6470",
    "fixed-32/sequences-5/3": "fb293888d1f27b6e",
}
GOLDEN_ITEMS = {
    # recorded at b634355: digest of the masked items of rank 0's first two steps, epoch 1
    "sentences-32/tokens-96": "fe0d9ef397af87b1",
    "sentences-32/tokens-80-accum-2": "0058bb47a04e951e",
    "sentences-32/sequences-3-accum-2": "898e0394184bf91b",
    "sentences-32/sequences-5": "15104cdf7135d7c1",
    "nsp-sentences-40/tokens-96": "64b644882a30468f",
    "nsp-sentences-40/tokens-80-accum-2": "6f92cfb345824d80",
    "nsp-sentences-40/sequences-3-accum-2": "c3a895e9e91f7f0c",
    "nsp-sentences-40/sequences-5": "1ead03d682674d36",
    "fixed-32/tokens-96": "249a4ddf5f1ba257",
    "fixed-32/tokens-80-accum-2": "b1a11354323d926a",
    "fixed-32/sequences-3-accum-2": "12c5f2709003e7e3",
    "fixed-32/sequences-5": "fc57cd639d480398",
}


def plans_of(ds, targs, world: int):
    from spanbert.trainer import _epoch_length, _epoch_plan

    lengths, n_batches, epoch_steps = _epoch_length(ds, targs, world)
    out = {"n_batches": -1 if n_batches is None else n_batches, "epoch_steps": epoch_steps}
    for epoch, start in ((0, 0), (1, 0), (1, 2)):
        for rank in range(world):
            plan = _epoch_plan(ds, targs, lengths, epoch, start, rank, world)
            out[f"{epoch}/{start}/{rank}"] = [[list(mb) if type(mb) is list else mb for mb in step] for step in plan]
    return out


@pytest.mark.parametrize("world", (1, 2, 3))
@pytest.mark.parametrize("plan", list(PLANS))
@pytest.mark.parametrize("name", ["sentences-32", "nsp-sentences-40", "fixed-32"])
def test_trainer_plans_are_pinned(pinned_corpus, name, plan, world, tmp_path):
    from spanbert.training_args import TrainingArguments

    ds = PretrainDataset(pinned_corpus, seed=3, **DATASETS[name])
    targs = TrainingArguments(output_dir=str(tmp_path / "run"), seed=11, **PLANS[plan])
    plans = plans_of(ds, targs, world)
    assert digest(plans) == GOLDEN_PLANS[f"{name}/{plan}/{world}"]
    if world == 2:  # the items themselves: masks and all
        from spanbert.trainer import _epoch_length, _epoch_plan

        lengths, _, _ = _epoch_length(ds, targs, world)
        ds.set_epoch(1)
        steps = _epoch_plan(ds, targs, lengths, 1, 0, 0, world)
        items = [ds[i] for step in list(steps)[:2] for mb in step for i in mb]
        assert digest(items) == GOLDEN_ITEMS[f"{name}/{plan}"]


GOLDEN_SPLITS = {
    # recorded at b634355: digest of `build_datasets`' training and held-out examples
    "spanbert": "0c643b7011fd777e",
    "bert": "cef5fee8aaa147bc",
}


@pytest.mark.parametrize("system", ["spanbert", "bert"])
def test_build_datasets_split_is_pinned(pinned_corpus, system):
    from spanbert.pretrain_config import PretrainConfig
    from spanbert.pretrain_data import build_datasets

    cfg = PretrainConfig(system=system, max_seq_length=32, eval_fraction=0.1, max_eval_blocks=7)
    c = TokenCorpus(pinned_corpus)
    train_set, eval_set = build_datasets(cfg, pinned_corpus, c.tokenizer, 5)
    value = {"train": examples_of(train_set), "docs": list(train_set.documents),
             "eval": examples_of(eval_set.dataset), "eval_range": [eval_set.start, eval_set.stop],
             "eval_docs": list(eval_set.dataset.documents)}  # fmt: skip
    assert digest(value) == GOLDEN_SPLITS[system]
