"""Model selection (`spanbert.tasks.selection`): the Appendix B sweep keeps one model, the best
run's, and no optimizer state, and resumes without redoing a finished run. Loading an encoder and saving a
fine-tuned model are tested with each task (test_qa.py, test_glue.py, test_model.py), the sequence-length checks
in test_output_contract.py."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest


def _fake_run(scores: dict[tuple[float, int], float], calls: list):
    """A sweep run that writes what a real one leaves (a model, a resumable checkpoint, best/, results)."""

    def run_one(lr: float, bs: int, run_dir: Path) -> dict:
        calls.append((lr, bs))
        (run_dir / "checkpoint-7").mkdir(parents=True)
        (run_dir / "checkpoint-7" / "state.pt").write_bytes(b"optimizer state")
        (run_dir / "best").mkdir()
        (run_dir / "best" / "state.pt").write_bytes(b"best weights")
        (run_dir / "latest").write_text("checkpoint-7\n")
        (run_dir / "model.safetensors").write_text(f"weights {lr} {bs}")
        (run_dir / "config.json").write_text("{}")
        (run_dir / "dev_results.json").write_text(json.dumps({"f1": scores[lr, bs]}))
        return {"dev_score": scores[lr, bs], "selected_step": int(lr * 1e6) + bs, "selected_by": "f1"}

    return run_one


def _check_pruned_sweep(out: Path, scores: dict) -> dict:
    summary = json.loads((out / "sweep.json").read_text())
    best = max(scores, key=scores.get)
    assert summary["complete"] is True and len(summary["runs"]) == len(scores)
    assert (summary["best"]["learning_rate"], summary["best"]["batch_size"]) == best
    assert summary["best"]["selected_step"] == int(best[0] * 1e6) + best[1]
    # one model, the best run's, in the top folder; the runs keep their small results only
    assert [p.relative_to(out) for p in out.rglob("model.safetensors")] == [Path("model.safetensors")]
    assert (out / "model.safetensors").read_text() == f"weights {best[0]} {best[1]}"
    assert not list(out.rglob("checkpoint-*")) and not list(out.rglob("best")) and not list(out.rglob("latest"))
    assert len(list(out.glob("sweep/*/dev_results.json"))) == len(scores)
    return summary


def test_sweep_keeps_one_model_and_no_optimizer_state(tmp_path):
    from spanbert.tasks.selection import SWEEP_BATCH_SIZES, SWEEP_LEARNING_RATES, sweep

    rng = random.Random(0)
    scores = {(lr, bs): float(rng.randint(0, 50)) for lr in SWEEP_LEARNING_RATES for bs in SWEEP_BATCH_SIZES}
    scores[2e-5, 16] = 99.0
    calls: list = []
    sweep(_fake_run(scores, calls), tmp_path)
    assert len(calls) == 10
    _check_pruned_sweep(tmp_path, scores)


def test_sweep_resume_skips_the_finished_runs(tmp_path):
    from spanbert.errors import SpanBertError
    from spanbert.tasks.selection import SWEEP_BATCH_SIZES, SWEEP_LEARNING_RATES, sweep

    scores = {(lr, bs): lr * 1e5 + bs / 100 for lr in SWEEP_LEARNING_RATES for bs in SWEEP_BATCH_SIZES}
    scores[1e-5, 32] = 100.0  # the best run is finished before the interruption
    calls: list = []
    fake = _fake_run(scores, calls)

    def interrupted(lr, bs, run_dir):
        if len(calls) == 5:
            raise KeyboardInterrupt
        return fake(lr, bs, run_dir)

    with pytest.raises(KeyboardInterrupt):
        sweep(interrupted, tmp_path)
    assert json.loads((tmp_path / "sweep.json").read_text())["complete"] is False
    sweep(fake, tmp_path, resume=True)
    assert calls[5:] == [(lr, bs) for lr in SWEEP_LEARNING_RATES for bs in SWEEP_BATCH_SIZES][5:]
    _check_pruned_sweep(tmp_path, scores)
    with pytest.raises(SpanBertError, match="the sweep is complete"):
        sweep(fake, tmp_path, resume=True)
