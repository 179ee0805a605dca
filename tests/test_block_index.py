"""Example indices (`spanbert.block_index`): built once per corpus and settings, atomically, into the corpus
folder (or the user's cache when it cannot be written), read back memory-mapped by every later start; the
held-out split from the last shards alone; under two gloo processes one writer, and a build longer than
the process group's timeout waited for through the store."""

from __future__ import annotations

import os
import pickle
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from test_batch_pinning import fabricate

from spanbert import block_index
from spanbert.block_index import ExampleIndex, IndexSpec, example_index, held_out_split
from spanbert.blocks import held_out_documents
from spanbert.corpus import TokenCorpus
from spanbert.dataset import PretrainDataset
from spanbert.errors import DataError


@pytest.fixture
def corpus(tmp_path) -> Path:
    return fabricate(tmp_path / "corpus")


def test_the_index_is_built_once_then_read(corpus, monkeypatch):
    ds = PretrainDataset(corpus, max_seq_length=32)
    entries = sorted((corpus / "index").iterdir())
    assert len(entries) == 1 and (entries[0] / "index.json").is_file()
    assert isinstance(ds.blocks, np.memmap) and not ds.blocks.flags.writeable  # mapped, read-only
    fresh = example_index(TokenCorpus(corpus), IndexSpec("single", 32, documents=(0, ds.corpus.num_docs)), cache=False)
    assert np.array_equal(ds.blocks, fresh.rows) and np.array_equal(ds.lengths(), fresh.lengths)

    def no_build(*a, **k):
        raise AssertionError("built again")

    monkeypatch.setattr(block_index, "_iter_rows", no_build)
    again = PretrainDataset(corpus, max_seq_length=32)  # a second start, a resume: the cache
    assert np.array_equal(again.blocks, ds.blocks)
    with pytest.raises(AssertionError, match="built again"):
        PretrainDataset(corpus, max_seq_length=48)  # other settings: another index
    monkeypatch.undo()
    PretrainDataset(corpus, max_seq_length=48)
    PretrainDataset(corpus, max_seq_length=40, mode="nsp", seed=3)
    assert len(list((corpus / "index").iterdir())) == 3


def test_a_dataset_pickles_the_index_path_not_its_rows(corpus):
    ds = PretrainDataset(corpus, max_seq_length=16)
    state = ds.__getstate__()
    assert "blocks" not in state and state["_index"] == ds._index.path  # spawned workers map the files again
    back = pickle.loads(pickle.dumps(ds))
    assert np.array_equal(back.blocks, ds.blocks) and np.array_equal(back[5]["input_ids"], ds[5]["input_ids"])


def test_a_damaged_or_interrupted_index_is_built_again(corpus, monkeypatch):
    expected = np.array(PretrainDataset(corpus, max_seq_length=32).blocks)
    entry = next((corpus / "index").iterdir())
    (entry / "rows.bin").write_bytes((entry / "rows.bin").read_bytes()[:-8])
    with pytest.raises(DataError, match="rows.bin: .* bytes, expected"):
        ExampleIndex.open(entry)
    assert np.array_equal(PretrainDataset(corpus, max_seq_length=32).blocks, expected)  # rebuilt, same blocks
    shutil.rmtree(corpus / "index")

    def killed(*a, **k):
        yield np.zeros((1, 2), np.int64)
        raise KeyboardInterrupt

    monkeypatch.setattr(block_index, "_iter_rows", killed)
    with pytest.raises(KeyboardInterrupt):
        PretrainDataset(corpus, max_seq_length=32)
    assert not any((p / "index.json").is_file() for p in (corpus / "index").iterdir())  # nothing looks complete


def test_a_corpus_folder_that_cannot_be_written_indexes_into_the_cache(corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    real = block_index.build_index

    def read_only(c, spec, root, name, fp):
        if root == corpus / "index":
            raise PermissionError(13, "Permission denied", str(root))
        return real(c, spec, root, name, fp)

    monkeypatch.setattr(block_index, "build_index", read_only)
    ds = PretrainDataset(corpus, max_seq_length=32)
    assert not (corpus / "index").exists()
    assert ds._index.path.is_relative_to(tmp_path / "cache" / "spanbert" / "index")


@pytest.mark.parametrize("fraction", [0.0, 0.01, 0.1, 0.37, 0.9, 1.0])
def test_held_out_split_equals_held_out_documents(corpus, fraction):
    c = TokenCorpus(corpus)
    for lo, hi in ((1, 1), (2, 2), (1, 40), (30, 15)):
        assert held_out_split(c, fraction, lo, hi) == held_out_documents(c.doc_bounds, fraction, lo, hi)


def test_opening_a_corpus_reads_no_offsets(corpus, monkeypatch):
    import spanbert.corpus as corpus_module

    def refuse(*a, **k):
        raise AssertionError("read an offsets file")

    monkeypatch.setattr(corpus_module, "_offsets_file", refuse)
    c = TokenCorpus(corpus)  # sizes checked with stat: nothing read, nothing kept open
    assert c.num_docs == 42 and c.tokens(5, 9)[0].shape == (4,)


# ---------------------------------------------------------------------------------------------
# Two gloo processes: one writer, and a build longer than the process group's timeout

RANKS = """
import datetime, json, os, sys, time
import torch.distributed as dist
real_init = dist.init_process_group
dist.init_process_group = lambda *a, **k: real_init(*a, **{**k, "timeout": datetime.timedelta(seconds=3)})
from spanbert import block_index, distributed
real_build = block_index.build_index
def slow_build(*a, **k):
    with open(sys.argv[2] + f".built{os.environ['RANK']}", "a") as f:
        f.write("built\\n")
    time.sleep(6)  # longer than the group's timeout: a wait in a collective would fail
    return real_build(*a, **k)
block_index.build_index = slow_build
distributed.init_distributed()
from spanbert.dataset import PretrainDataset
ds = PretrainDataset(sys.argv[1], max_seq_length=32)
pairs = PretrainDataset(sys.argv[1], max_seq_length=40, mode="nsp", seed=2)
distributed.barrier()  # the group still works after the long wait
print(json.dumps({"blocks": ds.blocks.tolist()[:50], "n": len(ds), "pairs": len(pairs)}))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_ranks_map_one_index_that_rank_0_built(corpus, tmp_path):
    import json

    script = tmp_path / "ranks.py"
    script.write_text(textwrap.dedent(RANKS))
    port, procs = _free_port(), []
    for r in range(2):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "2",
               "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}  # fmt: skip
        procs.append(subprocess.Popen([sys.executable, str(script), str(corpus), str(tmp_path / "log")], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))  # fmt: skip
    outs = [p.communicate(timeout=240) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    assert results[0] == results[1]
    assert (tmp_path / "log.built0").read_text() == "built\nbuilt\n"  # rank 0 built both indices
    assert not (tmp_path / "log.built1").exists()  # rank 1 waited on the store, then mapped them
    assert len(list((corpus / "index").iterdir())) == 2
    assert results[0]["n"] == len(PretrainDataset(corpus, max_seq_length=32, index_cache=False))
