"""The suite itself: every test runs in a folder of pytest's and writes nothing anywhere else, so the
README's two commands, run in order in a checkout, leave it green (conftest.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import REPO

# the tests that run `spanbert pretrain` with its default output folder (runs/spanbert-quickstart): once
# relative to the checkout, where the README's quick start had left a run they refused to overwrite
DEFAULT_OUTPUT_TESTS = (
    "quick_start_stays_until_a_corpus_or_model_is_named or yaml_sections_are_accepted or next_hint_fits_the_system"
    " or paper_recipe_batches_131k_tokens_per_update or shortened_run_scales_the_warmup"
)


def _files(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def test_a_test_runs_in_its_own_folder_and_writes_temporary_files_under_pytests(tmp_path):
    assert Path.cwd() == tmp_path and not Path.cwd().is_relative_to(REPO)
    base = tmp_path.parent.parent  # pytest's base folder of this run: <base>/<test>0 is tmp_path's parent
    assert Path(tempfile.gettempdir()).is_relative_to(base) and Path(os.environ["TMPDIR"]).is_relative_to(base)
    with tempfile.NamedTemporaryFile() as f:
        assert Path(f.name).is_relative_to(base)


@pytest.mark.slow
def test_the_readme_quick_start_then_the_suite_leaves_the_checkout_green(tmp_path):
    """The README in order in a checkout: `spanbert pretrain` (shortened to 2 steps: the same folder, a
    resumable run and a `latest` pointer), then the tests that use the default output folder, green, and
    the quick start's run untouched."""
    checkout = tmp_path / "checkout"
    shutil.copytree(REPO / "tests", checkout / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", checkout)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "PYTHONDONTWRITEBYTECODE": "1"}
    subprocess.run([sys.executable, "-m", "spanbert", "pretrain", "--max_steps", "2", "--disable_tqdm"], cwd=checkout,
                   env=env, check=True, capture_output=True)  # fmt: skip
    assert (checkout / "runs" / "spanbert-quickstart" / "latest").exists()
    before = _files(checkout)
    suite = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_pretrain.py", "-k", DEFAULT_OUTPUT_TESTS],
        cwd=checkout, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert suite.returncode == 0, suite.stdout[-3000:] + suite.stderr[-2000:]
    assert " passed" in suite.stdout and "deselected" in suite.stdout, suite.stdout[-500:]
    assert _files(checkout) == before  # nothing written into the checkout, the user's run untouched
