"""The suite itself: every test runs in a folder of pytest's and writes nothing anywhere else, so the
README's two commands, run in order in a checkout, leave it green (conftest.py); and a module's tests are
found by its name (tests/README.md)."""

from __future__ import annotations

import os
import re
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
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "tests/test_pretrain.py", "-k",
         DEFAULT_OUTPUT_TESTS],
        cwd=checkout, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert suite.returncode == 0, suite.stdout[-3000:] + suite.stderr[-2000:]
    assert " passed" in suite.stdout and "deselected" in suite.stdout, suite.stdout[-500:]
    assert _files(checkout) == before  # nothing written into the checkout, the user's run untouched


# ---------------------------------------------------------------------------------------------
# The layout (tests/README.md, "Where a module's tests are")

SRC = REPO / "src" / "spanbert"
TESTS = REPO / "tests"

# The modules with no test file of their own, each with the reason. Keep it short: a module with logic of its
# own gets a test file (an entry whose module is gone, or has a test file now, fails the test below).
NO_TEST_FILE = {
    "__init__.py": "the package's version and two lazy names (`import spanbert`: test_imports.py, test_utils.py)",
    "__main__.py": "`python -m spanbert` is one call of `spanbert.cli.main` (test_cli.py)",
    "data.py": "no code: the old spellings of the data modules' names, resolved by _aliases.py (test_aliases.py)",
    "metrics/__init__.py": "a docstring",
    "tasks/common.py": "no code: the old spellings of the names it held before its split, resolved by _aliases.py (test_aliases.py)",
    "tasks/__init__.py": "re-exports the registry's and the Python API's names (test_tasks_registry.py, test_tasks_api.py)",
}


def _rule_files(module: Path) -> list[Path]:
    """The test files of ``module`` (a file under src/spanbert) by tests/README.md's rule, those that exist."""
    *packages, name = module.relative_to(SRC).with_suffix("").parts
    if name == "__init__":  # the package itself: its package's file
        return [p for p in [TESTS / f"test_{packages[-1]}.py"] if p.is_file()] if packages else []
    name = name.lstrip("_")
    if not packages:
        return [p for p in [TESTS / f"test_{name}.py"] if p.is_file()]
    package = packages[-1]
    own = [TESTS / f"test_{package}_{name}.py"] + ([TESTS / f"test_{name}.py"] if packages == ["tasks"] else [])
    if any(p.is_file() for p in own):
        return [p for p in own if p.is_file()]
    # a small module's tests in the package's file, which names it by its path (or its dotted name)
    shared = TESTS / f"test_{package}.py"
    path = module.relative_to(SRC.parent)
    dotted = ".".join(path.with_suffix("").parts)
    named = rf"{re.escape(path.as_posix())}|{re.escape(dotted)}(?!\w)"
    return [shared] if shared.is_file() and re.search(named, shared.read_text(encoding="utf-8")) else []


def test_every_module_has_its_test_file():
    modules = sorted(p.relative_to(SRC).as_posix() for p in SRC.rglob("*.py"))
    missing = [m for m in modules if m not in NO_TEST_FILE and not _rule_files(SRC / m)]
    assert not missing, f"no test file by tests/README.md's rule (nor an entry in NO_TEST_FILE) for {missing}"
    stale = [m for m in NO_TEST_FILE if m not in modules or _rule_files(SRC / m)]
    assert not stale, f"NO_TEST_FILE lists modules that are gone or have a test file now: {stale}"


def test_every_test_file_is_a_modules_or_a_listed_topic():
    readme = (TESTS / "README.md").read_text(encoding="utf-8")
    of_modules = {p.name for m in SRC.rglob("*.py") for p in _rule_files(m)}
    topics = [p.name for p in sorted(TESTS.glob("test_*.py")) if p.name not in of_modules]
    unlisted = [name for name in topics if f"| `{name}` |" not in readme]
    assert not unlisted, f"test files of no module and not in tests/README.md's topic table: {unlisted}"
    gone = sorted({name for name in re.findall(r"test_\w+\.py", readme) if not (TESTS / name).is_file()})
    assert not gone, f"tests/README.md names test files that do not exist: {gone}"


def test_the_rule_finds_each_kind_of_home():
    assert _rule_files(SRC / "blocks.py") == [TESTS / "test_blocks.py"]
    assert _rule_files(SRC / "_aliases.py") == [TESTS / "test_aliases.py"]
    assert _rule_files(SRC / "study" / "spec.py") == [TESTS / "test_study_spec.py"]
    assert _rule_files(SRC / "tasks" / "glue.py") == [TESTS / "test_glue.py"]
    assert _rule_files(SRC / "tasks" / "registry.py") == [TESTS / "test_tasks_registry.py"]
    assert _rule_files(SRC / "tasks" / "qa" / "finetune.py") == [TESTS / "test_qa.py"]  # named in the package's file
    assert _rule_files(SRC / "tasks" / "coref" / "__init__.py") == [TESTS / "test_coref.py"]
    assert _rule_files(SRC / "tasks" / "qa" / "nowhere.py") == []  # a module the package's file does not name
    assert _rule_files(SRC / "data.py") == [] and _rule_files(SRC / "__init__.py") == []
