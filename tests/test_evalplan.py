"""Issue 29: the plan line, evaluation scaled to the run, --max_eval_examples for QA, and plans over a
week refused before any work unless --allow_long_run. Tiny configs, seconds each."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from test_qa import _pretrained, _write, synthetic_squad, tok  # noqa: F401 - tok is a fixture

from spanbert import cost
from spanbert.cli import main
from spanbert.errors import SpanBertError
from spanbert.trainer import eval_schedule, evaluations


@pytest.mark.parametrize("eval_steps,per_epoch,epoch_steps,total", [
    (0, 10, 4, 4), (0, 10, 25, 60), (0, 3, 7, 20), (0, 1, 5, 5), (0, 0, 5, 9), (3, 0, 5, 10), (0, 4, 10, 31),
])  # fmt: skip
def test_evaluations_counts_what_train_runs(eval_steps: int, per_epoch: int, epoch_steps: int, total: int) -> None:
    is_eval = eval_schedule(eval_steps, per_epoch, epoch_steps)
    assert evaluations(eval_steps, per_epoch, epoch_steps, total) == sum(map(is_eval, range(1, total))) + 1


def test_evals_within_keeps_the_default_when_it_fits_else_the_largest_that_does() -> None:
    count = lambda n: n  # noqa: E731 - one epoch
    assert cost.evals_within(0.5, 10, train_seconds=100.0, pass_seconds=5.0, count=count) == 10
    assert cost.evals_within(0.5, 10, train_seconds=100.0, pass_seconds=12.0, count=count) == 4
    assert cost.evals_within(0.5, 10, train_seconds=100.0, pass_seconds=500.0, count=count) == 1


def test_plan_line_reads_as_the_issue_says() -> None:
    plan = cost.FinetunePlan(94, 1, "cpu", 300.0, 1, 240.0, 2000)
    assert plan.line() == (
        "plan: 94 steps (1 epoch), about 5 min of training + 4 min of evaluation (1 evaluation of 2,000 dev "
        "examples; 44% of the time) on cpu"
    )


def _squad(tok, tmp_path: Path, *extra: str) -> tuple[list[str], Path]:  # noqa: F811
    data = _write(tmp_path / "train.json", synthetic_squad(8))
    enc = _pretrained(tok, tmp_path / "enc")
    out = tmp_path / "ft"
    argv = ["finetune", "squad", "--model", str(enc), "--train_file", str(data), "--validation_file", str(data),
            "--output_dir", str(out), "--max_seq_length", "32", "--doc_stride", "8", "--num_train_epochs", "1",
            "--per_device_train_batch_size", "8", "--report_to", "none", "--disable_tqdm", "--device", "cpu", *extra]  # fmt: skip
    return argv, out


def _run(argv: list[str], capsys) -> str:
    capsys.readouterr()
    assert main(argv) == 0
    return capsys.readouterr().out


def test_short_run_evaluates_less_and_says_so(tok, tmp_path: Path, capsys) -> None:  # noqa: F811
    # 32 training questions against the same 32 as dev: 10 evaluations would cost ~3x the training
    argv, _ = _squad(tok, tmp_path)
    out = _run(argv, capsys)
    plan = [line for line in out.splitlines() if line.startswith("plan: ")]
    # on cpu, or on idle cpu cores and what other processes used of them (a shared machine: threads.sharing)
    assert len(plan) == 1 and "(1 evaluation of 32 dev examples;" in plan[0], out
    assert plan[0].endswith("on cpu") or re.search(r"on idle cpu cores; other processes kept about [\d.]+ of the \d+ "
                                                   r"cores busy: expect longer$", plan[0]), out  # fmt: skip
    notes = [line for line in out.splitlines() if line.startswith("note: evaluating")]
    assert len(notes) == 1 and "not 10" in notes[0] and "--evals_per_epoch 10" in notes[0], out
    assert len(re.findall(r"^step \d+: dev ", out, re.M)) == 1, out


def test_named_evals_per_epoch_wins(tok, tmp_path: Path, capsys) -> None:  # noqa: F811
    argv, _ = _squad(tok, tmp_path, "--evals_per_epoch", "10")
    out = _run(argv, capsys)
    steps = len(re.findall(r"^step \d+: dev ", out, re.M))
    assert "note: evaluating" not in out and steps >= 4, out  # an epoch of fewer steps than 10: every step
    assert f"({steps} evaluations of 32 dev examples;" in out, out


def test_max_eval_examples_limits_the_dev_of_squad(tok, tmp_path: Path, capsys) -> None:  # noqa: F811
    argv, out_dir = _squad(tok, tmp_path, "--max_eval_examples", "5")
    out = _run(argv, capsys)
    assert re.search(r"\(\d+ evaluations? of 5 dev examples;", out), out
    assert len(json.loads((out_dir / "dev_predictions.json").read_text())) == 5


def _huge(monkeypatch) -> None:
    """Every machine at 1 FLOP/s: any plan takes years."""
    monkeypatch.setattr(cost, "machine_flops", lambda device_type, threads=1: 1.0)


def test_finetune_over_a_week_is_refused_before_anything_is_written(tok, tmp_path: Path, monkeypatch, capsys, cli_error) -> None:  # noqa: F811,E501
    argv, out_dir = _squad(tok, tmp_path)
    _huge(monkeypatch)
    err = cli_error(argv, contains="--allow_long_run", out=tmp_path)
    assert "years on cpu" in err and "plan: " in err, err
    assert not out_dir.exists()
    out = _run([*argv, "--allow_long_run"], capsys)
    assert "plan: " in out and (out_dir / "config.json").is_file()


def test_pretrain_over_a_week_is_refused_before_the_vocabulary(tmp_path: Path, monkeypatch, cli_error, capsys) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("A few words of text.\n" * 20)
    argv = ["pretrain", "--corpus", corpus, "--model", "tiny", "--max_steps", "1000", "--device", "cpu",
            "--output_dir", tmp_path / "run", "--report_to", "none", "--disable_tqdm"]  # fmt: skip
    _huge(monkeypatch)
    err = cli_error(argv, contains="--allow_long_run", out=tmp_path)
    assert "this pre-training (1,000 steps) would take" in err, err
    # --allow_long_run gets past the check (stopped right after it here, to stay fast)
    import spanbert.pretrain_data as P

    def stop(*a, **k):
        raise SpanBertError("stopped after the check")

    monkeypatch.setattr(P, "prepare_data", stop)
    err = cli_error([*argv, "--allow_long_run"], contains="stopped after the check")
    assert "would take" not in err.split("error:")[-1]
    assert math.isfinite(cost.LONG_RUN_SECONDS)


def test_study_over_a_week_is_refused_before_any_cell(tmp_path: Path, cli_error) -> None:
    sst = tmp_path / "SST-2"
    sst.mkdir()
    (sst / "train.tsv").write_text("sentence\tlabel\n" + "a fine film\t1\n" * 1000)
    (sst / "dev.tsv").write_text("sentence\tlabel\na fine film\t1\n")
    corpus = tmp_path / "corpus"  # beside the study's folder: a corpus folder holding it is refused first
    corpus.mkdir()
    (corpus / "text.txt").write_text("A fine film.\n")
    f = tmp_path / "s.yaml"
    f.write_text(f"corpus: {corpus}\nmodel: base\nseeds: 5\nsystems: [spanbert, bert]\noutput_dir: {tmp_path}/out\n"
                 f"tasks:\n  - {{task: glue, glue_task: SST-2, train: {sst}, learning_rates: [1e-5, 2e-5],\n"
                 "      options: {max_train_examples: 67349, num_train_epochs: 10, max_seq_length: 64}}\n")  # fmt: skip
    err = cli_error(["study", f], contains="--allow_long_run", out=tmp_path)
    assert "more than a week" in err and not (tmp_path / "out").exists()
