"""`bench/gpu.sh`: its CPU dry run does everything the GPU run does, at tiny sizes, on synthetic data
(so the script is known to work before a GPU minute is spent), and its mistakes are one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).parents[1]
SCRIPT = ROOT / "bench" / "gpu.sh"


def run(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **env})  # fmt: skip


@pytest.mark.slow
def test_the_dry_run_writes_every_part_under_out(tmp_path):
    out = tmp_path / "out"
    proc = run("--dry-run", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "mode: dry-run on CPU" in (out / "env.txt").read_text()
    tests = (out / "tests.log").read_text()
    assert "skipped" in tests and "error" not in tests.lower(), tests  # collected, none failed to import
    assert (out / "tests.xml").is_file()
    bench = json.loads((out / "bench.json").read_text())
    assert set(bench["tokens_per_s"]) == {"spanbert (MLM+SBO)", "spanbert (MLM only)",
                                          "transformers BertForPreTraining (MLM+NSP)"}  # fmt: skip
    assert bench["speedup_vs_transformers"] > 0 and 0 < bench["mfu_vs_matmul"] and bench["matmul_flops"] > 0
    assert "speed-up spanbert (MLM+SBO) vs transformers" in (out / "bench.log").read_text()
    table = (out / "study" / "summary" / "table.md").read_text()
    assert "| bert-1seq |" in table and "| spanbert |" in table
    assert len(list(out.glob("study/finetune/*/squad/*/result.json"))) == 2


def test_mistakes_are_one_line_errors(tmp_path):
    proc = run("--only", "everything", str(tmp_path / "x"))
    assert proc.returncode == 2 and proc.stderr.startswith("error: bench/gpu.sh: --only: found 'everything'")
    assert len(proc.stderr.splitlines()) == 1 and not (tmp_path / "x").exists()
    proc = run("--fast")
    assert proc.returncode == 2 and "found option --fast" in proc.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_without_a_gpu_only_the_dry_run_runs(tmp_path):
    proc = run(str(tmp_path / "x"), PYTHON="python")
    assert proc.returncode == 2 and "no CUDA GPU" in proc.stderr and not (tmp_path / "x").exists()
