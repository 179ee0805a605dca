"""The span probes by name (`spanbert.tasks.probe_sets`): one reader each, the spellings a user may type, sizes that
fit the set's budget, and every default file present in ../shared/data (realdata)."""

from __future__ import annotations

import sys

import pytest
from conftest import REPO

from spanbert.tasks import probe_data
from spanbert.tasks.probe_sets import DATA_SEED, NAMES, PROBE_SETS, canonical


def test_every_probe_has_a_reader_sizes_and_its_spellings():
    assert set(probe_data.READERS) == set(NAMES) == set(PROBE_SETS)
    assert NAMES == ("entities", "constituents", "pos", "relations", "gap", "litbank")
    assert canonical("Entity") == "entities" and canonical(" POS ") == "pos" and canonical("relation") == "relations"
    assert canonical("ner") is None and canonical("") is None
    for p in PROBE_SETS.values():
        assert p.spans in (1, 2) and p.train_examples > p.eval_examples > 0 and len(p.files) == 3
    assert PROBE_SETS["relations"].files[0] == PROBE_SETS["relations"].files[1]  # dev carved from train
    assert DATA_SEED == 2019  # the subsamples every encoder is probed on: changing it changes every table


def test_the_table_loads_no_torch():
    assert "spanbert.tasks.probe_sets" in sys.modules
    import subprocess

    code = "import sys, spanbert.tasks.probe_sets; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.realdata
@pytest.mark.parametrize("name", NAMES)
def test_every_default_file_is_in_the_shared_data(name):
    root = REPO.parent / "shared" / "data"
    if not root.exists():
        pytest.skip(f"{root} not present")
    assert all((root / f).exists() for f in PROBE_SETS[name].files), PROBE_SETS[name].files
