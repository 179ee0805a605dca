"""`bench/gpu.sh`: its CPU dry run does everything the GPU run does, at tiny sizes, on synthetic data
(so the script is known to work before a GPU minute is spent), its summary reads a GPU run's figures
into the Markdown the docs take, and its mistakes are one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).parents[1]
SCRIPT = ROOT / "bench" / "gpu.sh"
sys.path.insert(0, str(ROOT / "bench"))
import gpu_summary  # noqa: E402  (bench/ is no package)

VARIANTS = {"spanbert (MLM+SBO)", "spanbert (MLM+SBO) compiled", "spanbert (MLM only)",
            "transformers BertForPreTraining (MLM+NSP)", "transformers BertForPreTraining compiled"}  # fmt: skip


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
    base = json.loads((out / "bench_base.json").read_text())
    assert [(s["seq"], s["batch"]) for s in base["settings"]] == [(64, 2), (32, 4)] and base["complete"]
    for setting in base["settings"]:
        assert set(setting["tokens_per_s"]) == VARIANTS and not setting["errors"]
        assert setting["best"]["ratio"] > 0 and set(setting["compiled_vs_eager"]) == {"spanbert", "transformers"}
    assert set(base["compile_seconds"]) == {"spanbert (MLM+SBO) compiled", "transformers BertForPreTraining compiled"}
    assert base["matmul_flops"] > 0 and base["profile"]["ms"]["matmul"] > 0
    assert "speed-up spanbert (MLM+SBO) vs transformers" in (out / "bench_base.log").read_text()
    assert json.loads((out / "bench_small.json").read_text())["settings"]
    modern = json.loads((out / "modernbert_step.json").read_text())
    assert "spanbert ModernBERT (MLM) compiled" in modern["ms_per_step"] and modern["compile_seconds"] > 0
    table = (out / "study" / "summary" / "table.md").read_text()
    assert "| bert-1seq |" in table and "| spanbert |" in table
    assert len(list(out.glob("study/finetune/*/squad/*/result.json"))) == 2
    summary = (out / "summary.md").read_text()
    assert "A dry run on the CPU" in summary and "## For docs/gpu.md" in summary and "## For docs/benchmarks.md" in summary
    assert "0 failed, 102 skipped" in summary or "skipped" in summary.split("CUDA tests")[1].splitlines()[0]
    rows = [ln for ln in summary.splitlines() if ln.startswith("| tiny | 64 | 2 |")]
    assert len(rows) == len(VARIANTS), rows  # a row per step of the setting
    assert "ModernBERT-tiny, sequence 96 x 2" in summary and "### Study" in summary and "| spanbert |" in summary
    assert proc.stdout.rstrip().endswith(summary.rstrip().splitlines()[-1])  # printed last: the device tool's tail


def test_the_summary_of_a_gpu_run(tmp_path):
    """A GPU run's figures (known peak, compiled and eager, a failed step, a profile) as Markdown: a row
    per setting and step, the issue's goals met or not, the failure named, the tests counted."""
    gpu_summary.smoke_figures(tmp_path)
    text = gpu_summary.summary(tmp_path, ["bench_small (time limit 60 s)"])
    assert text.startswith("# `bench/gpu.sh` on NVIDIA H100 80GB HBM3, 2026-12-01") and "dry run" not in text.lower()
    assert "CUDA tests (`pytest -m cuda`): 103 passed in 95.1s" in text
    assert "Failed or stopped: bench_small (time limit 60 s)" in text
    assert "| base | 512 | 32 | spanbert compiled | 546,133 | 30.0 | 332 | 33.6% | 43.8% | 2.08x | 2.08x | 20.0 |" in text
    assert "| base | 512 | 32 | transformers compiled | failed: OutOfMemoryError: x |" in text
    assert "base, sequence 512: best MFU 33.6% (batch 32, spanbert compiled), 2.08x transformers at its best -- goal >= 40% MFU and >= 2x: not met" in text
    assert "sequence 128 not worse than 512 in MFU" in text
    assert "a step of 30.50 ms: matmul 14.00 ms (46%), fused (compiled) 6.00 ms (20%)" in text and "idle 3.50 ms" in text
    assert "compilation, BERT base (`--compile`, inductor): spanbert compiled 31.0 s" in text
    assert "ModernBERT benchmark: not run or no figures." in text
    bench = json.loads((tmp_path / "bench_base.json").read_text())
    for s in bench["settings"]:
        s["ms_per_step"]["spanbert (MLM+SBO) compiled"] = 24.0
        s["mfu_vs_peak"]["spanbert (MLM+SBO) compiled"] = 0.42
        s["best"]["ratio"] = 62.5 / 24.0
    (tmp_path / "bench_base.json").write_text(json.dumps(bench))
    assert "best MFU 42.0% (batch 32, spanbert compiled), 2.60x transformers at its best -- goal >= 40% MFU and >= 2x: met" in gpu_summary.summary(tmp_path, [])


def test_mistakes_are_one_line_errors(tmp_path):
    proc = run("--only", "everything", str(tmp_path / "x"))
    assert proc.returncode == 2 and proc.stderr.startswith("error: bench/gpu.sh: --only: found 'everything'")
    assert len(proc.stderr.splitlines()) == 1 and not (tmp_path / "x").exists()
    proc = run("--fast")
    assert proc.returncode == 2 and "found option --fast" in proc.stderr
    proc = run("--dry-run", "--only", "tests,speed", str(tmp_path / "y"))
    assert proc.returncode == 2 and "--only: found 'speed'" in proc.stderr and not (tmp_path / "y").exists()
    proc = run("--data")
    assert proc.returncode == 2 and "found --data without a folder" in proc.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_without_a_gpu_only_the_dry_run_runs(tmp_path):
    proc = run(str(tmp_path / "x"), PYTHON="python")
    assert proc.returncode == 2 and "no CUDA GPU" in proc.stderr and not (tmp_path / "x").exists()


def test_the_summary_without_a_folder_is_a_one_line_error():
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_summary.py")], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("error: bench/gpu_summary.py: found no output folder")
