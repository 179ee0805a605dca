"""Shard arrays mapped on demand, a bounded number at a time (`spanbert.shards`): the tokens read back are the
files', the maps stay under the open-file limit, a 2,000-shard corpus pre-trains under ``ulimit -n 256``, the
soft limit is raised towards the hard one, and a limit still too low is one error naming ``ulimit -n``."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_batch_pinning import fabricate

from spanbert.corpus import TokenCorpus

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def many_shards(tmp_path_factory) -> Path:
    """2,000 shards of one short document each (8,000 files)."""
    return fabricate(tmp_path_factory.mktemp("shards") / "corpus", shards=2000, docs_per_shard=1)


def test_maps_are_bounded_and_tokens_are_the_files(tmp_path):
    corpus = fabricate(tmp_path / "corpus", shards=9, docs_per_shard=2)
    c = TokenCorpus(corpus)
    c._shards.map_limit = 3
    rng = np.random.default_rng(0)
    for k in rng.integers(0, 9, 60).tolist():
        a, b = int(c.shard_offsets[k]), int(c.shard_offsets[k + 1])
        ids, starts = c.tokens(a, b)
        name = corpus / f"shard-{k:05d}"
        assert np.array_equal(ids, np.fromfile(f"{name}.ids", np.uint16))
        assert np.array_equal(starts, np.fromfile(f"{name}.starts", np.uint8).astype(bool))
        assert len(c._shards._open) <= 3


def _limited(limit: int, code: str, *args: str, soft: int | None = None) -> subprocess.CompletedProcess:
    """``code`` run by a fresh interpreter whose open-file limit is ``limit`` (soft ``soft``, default the same)."""

    def preexec():
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft or limit, limit))

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-c", code, *args], preexec_fn=preexec, capture_output=True, text=True,
                          timeout=600, env=env)  # fmt: skip


READ_ALL = """
import sys, resource
from spanbert.corpus import TokenCorpus
c = TokenCorpus(sys.argv[1])
total = sum(int(c.tokens(int(c.shard_offsets[k]), int(c.shard_offsets[k + 1]))[0].sum()) for k in range(c.num_shards))
print(total, c._shards.map_limit, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
"""


def test_every_shard_is_read_under_ulimit_256(many_shards):
    expected = sum(int(np.fromfile(p, np.uint16).sum()) for p in sorted(many_shards.glob("*.ids")))
    proc = _limited(256, READ_ALL, str(many_shards))
    assert proc.returncode == 0, proc.stderr[-2000:]
    total, maps, soft = map(int, proc.stdout.split())
    assert total == expected and maps == 256 // 4 // 2 and soft == 256  # 2 maps a shard (it stores .starts)
    # where the hard limit allows more, the soft limit is raised to what the corpus needs
    proc = _limited(20_000, READ_ALL, str(many_shards), soft=256)
    assert proc.returncode == 0, proc.stderr[-2000:]
    total, maps, soft = map(int, proc.stdout.split())
    assert total == expected and soft > 256 and maps >= 2000


def test_too_low_a_limit_is_an_error_naming_ulimit(many_shards):
    proc = _limited(40, READ_ALL, str(many_shards))
    assert proc.returncode != 0 and "ulimit -n" in proc.stderr and "40" in proc.stderr, proc.stderr[-2000:]
    # descriptors used up by something else: the one map that cannot be made is an error naming ulimit too
    exhaust = "import os\nheld = []\ntry:\n    while True: held.append(os.open(os.devnull, os.O_RDONLY))\nexcept OSError: pass\n"
    proc = _limited(256, exhaust.replace("import os", "import os, sys\nfrom spanbert.corpus import TokenCorpus\nc = TokenCorpus(sys.argv[1])")
                    + "c.tokens(0, 3)\n", str(many_shards))  # fmt: skip
    assert proc.returncode != 0 and "ulimit -n" in proc.stderr and "Traceback" in proc.stderr, proc.stderr[-2000:]
    assert "SpanBertError" in proc.stderr and "found no free file descriptor" in proc.stderr


@pytest.mark.slow
def test_a_2000_shard_corpus_pretrains_under_ulimit_256(many_shards, tmp_path):
    code = "import sys\nfrom spanbert.cli import main\nsys.exit(main(sys.argv[1:]))"
    argv = ["pretrain", "--corpus", str(many_shards), "--model", "tiny", "--max_seq_length", "32", "--max_steps", "3",
            "--per_device_train_batch_size", "4", "--output_dir", str(tmp_path / "run"), "--device", "cpu",
            "--disable_tqdm", "--report_to", "none", "--warmup_steps", "0", "--save_steps", "2"]  # fmt: skip
    proc = _limited(256, code, *argv)
    assert proc.returncode == 0, proc.stdout[-1500:] + proc.stderr[-3000:]
    assert (tmp_path / "run" / "final" / "config.json").is_file()
