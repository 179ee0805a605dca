"""Shared test setup.

Tests use tiny models, where a second OpenMP thread buys nothing and, on a loaded machine, costs a lot
(threads spin-wait for a busy core): one thread keeps the suite fast and its run time predictable.

Tests write only under pytest's own folder: each test runs with its own temporary folder as the working
directory (a command's default output, such as the quick start's `runs/spanbert-quickstart`, lands
there and never in the checkout, where a user's own run would otherwise break the test), and the
session's temporary files (`tempfile`, in this process and in every process a test starts) go under
pytest's base folder too, which pytest removes after a green run (`tmp_path_retention_policy`).
A test reaches the repository through `REPO`, never through the working directory.
"""

from __future__ import annotations

import os
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from spanbert.preprocess import preprocess
from spanbert.tokenization import train_tokenizer

torch.set_num_threads(1)

REPO = Path(__file__).resolve().parents[1]
"""The checkout's root: README.md, docs/, and `../shared/data` beside it."""


@pytest.fixture(autouse=True, scope="session")
def _session_writes_under_pytests_folder(tmp_path_factory) -> Iterator[None]:
    """Session and module fixtures run in a folder of pytest's, and `tempfile` writes under pytest's."""
    tmp = tmp_path_factory.mktemp("tmp")
    cwd = tmp_path_factory.mktemp("session-cwd")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TMPDIR", str(tmp))
        mp.setattr(tempfile, "tempdir", str(tmp))
        mp.chdir(cwd)
        yield


@pytest.fixture(autouse=True)
def _in_own_folder(tmp_path, monkeypatch) -> None:
    """Every test starts in its own temporary folder (see the module's doc)."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(autouse=True)
def _ctrl_c_as_it_was() -> Iterator[None]:
    """A test that runs a command in this process may leave Ctrl-C's handler changed (the CLI's own, after
    a first Ctrl-C, ends the process at once): the next test, and the processes it starts, get it back as
    it was. Two workers share no handler, but each runs many tests."""
    before = signal.getsignal(signal.SIGINT)
    yield
    if signal.getsignal(signal.SIGINT) is not before and before is not None:
        signal.signal(signal.SIGINT, before)


# ---------------------------------------------------------------------------------------------
# The clean-error contract of every command (docs/reliability.md, "Scores, refused models and bad input";
# docs/usage.md): a user's mistake gives `error: FILE[:LINE]: found ..., expected ...` on stderr, exit
# status 2, no traceback, and leaves no output behind. Malformed-input tables (tests/test_malformed*.py) assert it through `cli_error`.

def _snapshot(root: Path) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), root) for d, dirs, files in os.walk(root) for f in files + dirs}


@pytest.fixture
def cli_error(capsys):
    """``cli_error(argv, names=..., contains=..., out=...)`` runs `spanbert argv` in-process and asserts
    the clean-error contract: exit 2, stderr starting with ``error:``, naming ``names`` (a file, usually)
    and containing ``contains``, no traceback, and nothing new under ``out`` (a folder, or None).
    Returns the stderr text for further checks."""
    from spanbert.cli import main

    def run(argv: list[str], names: str | os.PathLike | None = None, contains: str | None = None, out=None) -> str:
        out = Path(out) if out is not None else None
        before = _snapshot(out) if out is not None and out.exists() else set()
        capsys.readouterr()
        rc = main([str(a) for a in argv])
        captured = capsys.readouterr()
        err = captured.err
        assert rc == 2, f"exit status {rc}, expected 2; stderr: {err!r}"
        assert "Traceback" not in err + captured.out, err
        assert any(line.startswith("error: ") for line in err.splitlines()), f"no 'error: ' line in {err!r}"
        if names is not None:
            assert str(names) in err, f"{names} not named in {err!r}"
        if contains is not None:
            assert contains in err, f"{contains!r} not in {err!r}"
        if out is not None:
            after = _snapshot(out) if out.exists() else set()
            assert after <= before, f"left behind under {out}: {sorted(after - before)}"
        return err

    return run


@pytest.fixture
def adamw_grads(monkeypatch) -> list[dict[int, torch.Tensor]]:
    """The gradients AdamW sees at each `step`, one {id(param): grad} dict per optimizer step."""
    grads: list[dict[int, torch.Tensor]] = []
    real_step = torch.optim.AdamW.step

    def spy(self, *a, **k):
        grads.append({id(p): p.grad.clone() for g in self.param_groups for p in g["params"]})
        return real_step(self, *a, **k)

    monkeypatch.setattr(torch.optim.AdamW, "step", spy)
    return grads


# ---------------------------------------------------------------------------------------------
# `--precision auto` is bf16 on a CPU with native bf16 matrix units (issue 32.3). The suite's tolerances
# are fp32's, so every test, and every process a test starts (torchrun, the CLI in a subprocess),
# sees a CPU without them unless it says otherwise (tests/test_precision.py patches `spanbert.precision.cpu_flags`).


@pytest.fixture(autouse=True)
def _cpu_without_native_bf16(monkeypatch):
    monkeypatch.setenv("SPANBERT_CPU_FLAGS", "fpu avx2")


# ---------------------------------------------------------------------------------------------
# Pre-training data, shared by the tests of the modules it flows through (test_preprocess.py, test_corpus.py,
# test_blocks.py, test_dataset.py, test_collate.py): synthetic documents, a small vocabulary trained on them
# (`tok_dir`) and the corpus `spanbert preprocess` makes of them (`corpus_dir`), built once per test module.

WORDS = (
    "the Denver Broncos won a game in 2016 and fans celebrated loudly while analysts wrote long reports "
    "about defence offence quarterbacks stadiums weather tickets résumé café naïve"
).split()


def synthetic_docs(n_docs=40, seed=0):
    rng = np.random.default_rng(seed)
    docs = []
    for d in range(n_docs):
        paras = []
        for _ in range(int(rng.integers(1, 6))):
            n = int(rng.integers(5, 80))
            paras.append(f"Doc{d} " + " ".join(rng.choice(WORDS, n)) + ".")
        docs.append(paras)
    return docs


def write_txt(path: Path, docs) -> Path:
    path.write_text("\n\n".join("\n".join(p) for p in docs) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tok")
    texts = [" ".join(p) for p in synthetic_docs(40)]
    train_tokenizer(None, 120, out, texts=texts, show_progress=False)
    return out


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory, tok_dir):
    tmp = tmp_path_factory.mktemp("corpus")
    src = write_txt(tmp / "a.txt", synthetic_docs(40))
    return preprocess(src, tok_dir, tmp / "out", num_workers=1, progress=False)
