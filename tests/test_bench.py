"""Every benchmark in bench/ still runs: each script's `--smoke` mode (tiny sizes, seconds) runs in a
subprocess, exits 0 and prints its side-by-side figure, so a benchmark broken by a change of defaults
(issue 23.13: `bench/masking.py` failed once sentence packing became the default) is seen in CI.
`bench/gpu.sh --dry-run` has its own test (tests/test_gpu_script.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
DATA = ROOT.parent / "shared" / "data"  # where the scripts look for real data (../shared/data)

# script -> (what its smoke output must contain: the ratio or figure it exists for, data it needs or "",
# slow: more than a few seconds on 2 shared cores)
SMOKE = {
    "masking.py": ("ratio span / HF whole-word:", "", False),
    "cloze_step.py": ("two-tower / spanbert: time per token", "", False),
    "pretrain_step.py": ("speed-up spanbert (MLM+SBO) vs transformers:", "", True),
    "qa_step.py": ("ratio spanbert / transformers, identical batches:", "", True),
    "profile_step.py": ("speed-up spanbert vs transformers:", "", True),
    "finetune_e2e.py": ("ratio end to end transformers / spanbert (no eval):", "", True),
    "coref_throughput.py": ("ours/HF time", "litbank_coref", True),
    "parse_speed.py": ("sentences/s", "ptb_sample", False),
    "blocks.py": ("| packing | blocks |", "", False),
    "tokens_per_update.py": ("| sentences |", "", False),
    "threads.py": ("| policy / one thread | policy / default | policy / transformers |", "", True),
    "tokenizer_train.py": ("vocabularies share", "", True),
    "kill_test.py": ("final parameters equal the uninterrupted run bit for bit: checkpoint yes, final/ yes", "", True),
    "long_line_memory.py": ('"worker_MB"', "", True),
    "preprocess_memory.py": ("peak main MB", "pretrain-corpus", True),
    "memory.py": ("peak ratio ours/transformers:", "", True),
    "allocator.py": ("page faults", "", True),
    "modernbert_step.py": ("speed-up spanbert (MLM) vs transformers:", "", True),
    "modernbert_length.py": ("local layer at 512 tokens: spanbert", "", True),
    "attention_core.py": ("ratio transformers / spanbert:", "", False),
    "dropout_masks.py": ("ratio transformers / spanbert (dropout layer):", "", False),
    "learning_speed.py": ("ratio spanbert / transformers (held-out MLM accuracy at equal tokens):", "", True),
    "gpu_summary.py": ("## For docs/benchmarks.md", "", False),
    "scale.py": ("| corpus | ranks | first start: s to step |", "", True),
}
# not benchmarks of their own: run by another test
OTHERS = {
    "gpu.sh": "tests/test_gpu_script.py runs `bench/gpu.sh --dry-run`",
    "gpu_dry_data.py": "the synthetic data of `bench/gpu.sh --dry-run` (tests/test_gpu_script.py)",
    "smoke.py": "the tiny corpus the smoke modes share",
}


def test_every_script_in_bench_has_a_smoke_run():
    scripts = {p.name for p in BENCH.iterdir() if p.suffix in (".py", ".sh")}
    assert scripts == set(SMOKE) | set(OTHERS), "a new bench/ script needs a --smoke mode and a row in SMOKE"


@pytest.mark.parametrize(
    "script",
    [
        pytest.param(name, marks=[*([pytest.mark.slow] if slow else []), *([pytest.mark.realdata] if data else [])])
        for name, (_, data, slow) in SMOKE.items()
    ],
)
def test_smoke_run(script: str, tmp_path: Path):
    expected, data, _ = SMOKE[script]
    if data and not (DATA / data).exists():
        pytest.skip(f"needs {DATA / data}, which is absent")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(BENCH / script), "--smoke"], capture_output=True, text=True, timeout=300,
                          env=env, cwd=tmp_path)  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert expected in out, out[-3000:]
