"""A preprocessed corpus read back (`spanbert.corpus`): it pickles as its path, and a damaged folder is a data
error naming the file."""

from __future__ import annotations

import numpy as np
import pytest

from spanbert.corpus import TokenCorpus
from spanbert.errors import DataError


def test_corpus_pickles_as_a_path(corpus_dir):
    import pickle

    c = TokenCorpus(corpus_dir)
    blob = pickle.dumps(c)
    assert len(blob) < 1000  # the memory maps are not copied into the pickle
    d = pickle.loads(blob)
    assert d.num_tokens == c.num_tokens and np.array_equal(d.tokens(0, 10)[0], c.tokens(0, 10)[0])


def test_damaged_corpus_is_a_data_error(tmp_path, corpus_dir):
    import shutil

    from spanbert.corpus import TokenCorpus

    bad = tmp_path / "bad"
    shutil.copytree(corpus_dir, bad)
    (bad / "meta.json").write_text((corpus_dir / "meta.json").read_text()[:30])
    with pytest.raises(DataError, match="meta.json:.*invalid JSON"):
        TokenCorpus(bad)
    shutil.copy(corpus_dir / "meta.json", bad / "meta.json")
    (bad / "shard-00000.docs").write_bytes((corpus_dir / "shard-00000.docs").read_bytes()[:-8])
    with pytest.raises(DataError, match="shard-00000.docs: found .* document offsets"):
        TokenCorpus(bad)
