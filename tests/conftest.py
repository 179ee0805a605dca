"""Shared test setup.

Tests use tiny models, where a second OpenMP thread buys nothing and, on a loaded machine, costs a lot
(threads spin-wait for a busy core): one thread keeps the suite fast and its run time predictable.
"""

from __future__ import annotations

import torch

torch.set_num_threads(1)


# ---------------------------------------------------------------------------------------------
# The clean-error contract of every command (docs/reliability.md, "Scores, refused models and bad input";
# docs/usage.md): a user's mistake gives `error: FILE[:LINE]: found ..., expected ...` on stderr, exit
# status 2, no traceback, and leaves no output behind. Malformed-input tables (tests/test_malformed*.py) assert it through `cli_error`.

import os  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402


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
# sees a CPU without them unless it says otherwise (tests/test_cpu_precision.py patches `cpu_flags`).


@pytest.fixture(autouse=True)
def _cpu_without_native_bf16(monkeypatch):
    monkeypatch.setenv("SPANBERT_CPU_FLAGS", "fpu avx2")

