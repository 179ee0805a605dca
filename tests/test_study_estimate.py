"""What a study costs before it runs (`spanbert.study.estimate`): the arithmetic that turns trial timings into
stage times (checked with made-up timings against sums done by hand and against the trainer's own schedule), and
a tiny dry run with every trial on that prints every stage and writes nothing into the study's folder, its
estimate kept for the real run's stage table. The CPU preset is tested in test_study_spec.py, the trials in
test_study_trial.py, the stage table in test_study_summary.py."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest
from conftest import REPO
from test_glue import synthetic_sst
from test_pretrain import synthetic_docs
from test_qa import synthetic_squad

from spanbert import study as S
from spanbert.cli import main
from spanbert.study import estimate as E
from spanbert.study.layout import ESTIMATE_FILE
from spanbert.study.trials import DataTimings, FinetuneTimings, PretrainTimings
from spanbert.trainer import eval_schedule

DATA = REPO.parent / "shared" / "data"


# ---------------------------------------------------------------------------------------------
# the arithmetic, with made-up timings


def test_distinct_words_follow_heaps_law():
    # D = 10 * sqrt(bytes): 1,000 words in 10,000 bytes, 707.1 in 5,000
    assert E.distinct_words(1000, 10 * math.sqrt(5000), 1e6, 1e4, 5e3) == pytest.approx(10_000)
    assert E.distinct_words(1000, 1000, 1e6, 1e4, 5e3) == pytest.approx(100_000)  # no growth seen: in proportion


def test_the_data_stage_scales_counting_learning_and_preprocessing_apart():
    d = DataTimings(corpus_bytes=400_000_000, sample_bytes=4_000_000, half_bytes=2_000_000, words=40_000,
                    half_words=20_000, count_s=0.5, tokenizer_s=2.5, preprocess_s=2.2)  # fmt: skip
    stage = E.data_estimate(d)
    # counting: 0.5 s x 100; learning: 2 s x distinct words, which double with the text (power 1 here);
    # preprocessing: the whole sample's 2.2 s x 100 (in proportion: the trial's in-process run has no start-up)
    assert stage.stage == "data"
    assert stage.seconds == pytest.approx(0.5 * 100 + 2.0 * 100 + 2.2 * 100)
    d.half_words = 28_284  # power 0.5: words x 10, learning x 10
    assert E.data_estimate(d).seconds == pytest.approx(50 + 2.0 * 10 + 220.0, rel=1e-3)
    d.tokenizer_s = 0.0  # the study's own tokenizer: no vocabulary to train
    assert E.data_estimate(d).seconds == pytest.approx(220.0)


@pytest.mark.parametrize("steps, every", [(1465, 150), (300, 100), (301, 100), (10, 0), (7, 7), (5, 10)])
def test_evaluations_count_as_the_trainer_schedules_them(steps, every):
    due = eval_schedule(every, 0, steps)
    assert E.evaluations(steps, every) == sum(due(s) for s in range(1, steps)) + 1  # and one at the end


def test_a_pretraining_stage_is_its_steps_evaluations_checkpoints_and_start_up():
    p = PretrainTimings("spanbert", wall_s=30.0, steps=7, step_s=2.0, eval_s=4.0, eval_blocks=128, save_s=1.0)
    argv = ["pretrain", "--eval_steps", "150", "--max_eval_blocks", "256", "--save_steps", "200"]
    stage = E.pretrain_estimate(p, 1465, argv)
    # start-up and export: 30 - 7 x 2 - 4 - 1 = 11 s; 10 evaluations of 256 blocks (8 s, twice the trial's
    # 128); 8 checkpoints (at 200, ..., 1400 and the end)
    assert stage.seconds == pytest.approx(11 + 1465 * 2.0 + 10 * 8.0 + 8 * 1.0)
    assert stage.stage == "pre-training spanbert" and "10 evaluations" in stage.how and "8 checkpoints" in stage.how
    none = E.pretrain_estimate(p, 1465, ["pretrain", "--max_eval_blocks", "0", "--save_steps", "0"])
    assert none.seconds == pytest.approx(11 + 1465 * 2.0)
    control = E.pretrain_estimate(PretrainTimings("random-init", random_init=True, wall_s=3.0), 1465, argv)
    assert control.seconds == 3.0 and "no training" in control.how


def _fit_case(steps: int = 1600) -> tuple[E.Estimate, S.Study]:
    """A plan of two pre-training cells (2 s and 1 s a step) beside 1 hour of fine-tuning and a control."""
    argv = ["pretrain", "--eval_steps", "300", "--max_eval_blocks", "256", "--save_steps", "300", "--warmup_steps", "200"]
    pre = [PretrainTimings("spanbert", wall_s=40.0, steps=10, step_s=2.0, eval_s=10.0, eval_blocks=256, save_s=1.0),
           PretrainTimings("bert-1seq", wall_s=30.0, steps=10, step_s=1.0, eval_s=5.0, eval_blocks=256, save_s=1.0),
           PretrainTimings("random-init", random_init=True, wall_s=2.0)]  # fmt: skip
    stages = [E.StageEstimate("data", 180.0, "")] + [E.pretrain_estimate(p, steps, argv) for p in pre]
    stages.append(E.StageEstimate("fine-tuning squad", 3600.0, ""))
    study = S.Study(corpus="c", systems=[S.SystemSpec("spanbert")], tasks=[], budget_tokens=steps * 64 * 128,
                    batch_size=64, max_seq_length=128)  # fmt: skip
    return E.Estimate(stages, 1.0, "", "", None, [(p, argv) for p in pre]), study


def test_a_time_limit_is_met_by_the_largest_pre_training_budget_that_fits_it():
    est, study = _fit_case()
    assert est.total_at(1600) == pytest.approx(est.total)
    # each pre-training step costs 3 s of the two cells (and their evaluations and checkpoints on the way)
    assert 3 * 100 <= est.total_at(1700) - est.total_at(1600) < 3.2 * 100
    total = est.total  # about 2 h 25 min; 2 h 40 min at the slow end (one round: no spread, the long-run allowance)
    assert est.high == pytest.approx(total * (1 + E.LONG_RUN_ALLOWANCE))
    (fits,) = E.fit_lines(est, study, 3 * 3600, "3h")
    assert fits.startswith(f"time limit 3h: the estimate ({E._human(est.high)} at the slow end of its range) fits it")
    (over,) = E.fit_lines(est, study, 2 * 3600, "2h")
    assert "over it" in over and "--budget_tokens" in over
    steps = int(over.split(" pre-training steps instead of")[0].split("; ")[-1].replace(",", ""))
    target = 0.9 * 2 * 3600
    assert est.total_at(steps, "high") <= target < est.total_at(steps + 1, "high")  # the largest that keeps 10% free
    assert over.endswith(f"--budget_tokens {steps * 64 * 128}")
    # over 90% of the limit but under it: still refitted; nothing fits once the other stages fill it
    (close,) = E.fit_lines(est, study, est.high / 0.95, "x")
    assert "keeps less than 10% of it free" in close and "--budget_tokens" in close
    (none,) = E.fit_lines(est, study, 3600, "1h")
    assert "no pre-training longer than its 200 warm-up steps fits" in none and "--budget_tokens" not in none
    checkpoint_only = E.Estimate([E.StageEstimate("fine-tuning squad", 7200.0, "")], 1.0, "", "")
    (fine,) = E.fit_lines(checkpoint_only, study, 3600, "1h")
    assert "there is no pre-training to shorten" in fine


def _rounds_case() -> tuple[E.Estimate, S.Study]:
    """Three rounds of trials taken in turn: spanbert 1.8, 2.0 and 2.6 s a step, bert-1seq 0.9, 1.0, 1.1."""
    argv = ["pretrain", "--eval_steps", "300", "--max_eval_blocks", "256", "--save_steps", "300", "--warmup_steps", "200"]
    pre = [PretrainTimings("spanbert", wall_s=40.0, steps=10, step_s=2.0, eval_s=10.0, eval_blocks=256, save_s=1.0,
                           round_step_s=[2.6, 1.8, 2.0], others=[1.5, 0.2, 0.6]),
           PretrainTimings("bert-1seq", wall_s=30.0, steps=10, step_s=1.0, eval_s=5.0, eval_blocks=256, save_s=1.0,
                           round_step_s=[1.1, 0.9, 1.0], others=[1.4, 0.3, 0.5])]  # fmt: skip
    spread = E.spread_of(pre)
    stages = [E.with_spread(E.StageEstimate("data", 180.0, ""), spread)]
    stages += [E.pretrain_estimate(p, 1600, argv) for p in pre]
    stages.append(E.with_spread(E.StageEstimate("fine-tuning sst2", 3600.0, "", cells=6, per_cell=600.0), spread))
    study = S.Study(corpus="c", systems=[S.SystemSpec("spanbert"), S.SystemSpec("bert-1seq")], tasks=[],
                    budget_tokens=1600 * 64 * 128, batch_size=64, max_seq_length=128)  # fmt: skip
    est = E.Estimate(stages, 60.0, "", "", 0.7, [(p, argv) for p in pre], spread=spread, rounds=3, others_range=(0.2, 1.5))
    return est, study


def test_an_estimate_says_how_sure_it_is_from_rounds_timed_beside_the_same_load():
    est, _ = _rounds_case()
    assert est.spread == (0.9, 1.3)  # spanbert's rounds: 1.8 / 2.0 and 2.6 / 2.0, the widest of the two
    spanbert = est.stages[1]
    # the median round's step time; the steps at the fastest and slowest round's, the rest scaled alike
    rest = spanbert.seconds - 1600 * 2.0
    assert spanbert.low == pytest.approx(1600 * 1.8 + rest * 0.9) and spanbert.high == pytest.approx(1600 * 2.6 + rest * 1.3)
    assert "median of 3 rounds, 1.80-2.60 s" in spanbert.how
    data = est.stages[0]  # timed once: the rounds' relative spread
    assert (data.low, data.seconds, data.high) == pytest.approx((162.0, 180.0, 234.0))
    assert est.low < est.total < est.high
    assert est.high == pytest.approx(sum(s.high for s in est.stages) * (1 + E.LONG_RUN_ALLOWANCE))
    total = est.lines()[-1]
    assert f"total: {E._human(est.total)}, range {E._human(est.low)} to {E._human(est.high)}" in total
    assert "the fastest and the slowest round" in total and "other processes kept 0.2-1.5 of the" in total
    saved = est.as_json()
    assert saved["low"] == est.low and saved["high"] == est.high and saved["rounds"] == 3
    assert saved["other_cores_range"] == [0.2, 1.5]


def test_a_time_limit_is_fitted_to_the_pessimistic_end():
    est, study = _rounds_case()
    # a limit the median fits with 10% to spare but the slow end does not: refitted to the slow end
    limit = est.total / 0.85
    assert est.total <= 0.9 * limit < est.high
    (line,) = E.fit_lines(est, study, limit, "x")
    assert "at the slow end of its range" in line and "--budget_tokens" in line
    steps = int(line.split(" pre-training steps instead of")[0].split("; ")[-1].replace(",", ""))
    assert est.total_at(steps, "high") <= 0.9 * limit < est.total_at(steps + 1, "high")
    (fits,) = E.fit_lines(est, study, est.high / 0.85, "y")
    assert "fits it" in fits


def test_a_time_limit_needs_a_measured_dry_run(cli_error):
    cli_error(["study", "--preset", "cpu", "--time_limit", "3h"], names="--time_limit", contains="without --dry-run")
    cli_error(["study", "--preset", "cpu", "--dry-run", "--trial_steps", "0", "--time_limit", "3h"],
              names="--time_limit", contains="with --trial_steps 0")  # fmt: skip
    cli_error(["study", "--preset", "cpu", "--dry-run", "--time_limit", "3 hours"], names="--time_limit",
              contains="expected a duration")  # fmt: skip


def test_a_fine_tuning_stage_extrapolates_the_steps_and_counts_the_evaluations():
    squad = S.StudyTask("squad", train="t", dev="d", options={"max_train_examples": 2000, "num_train_epochs": 1,
                                                             "evals_per_epoch": 2})  # fmt: skip
    f = FinetuneTimings("squad", "examples", size=2000, trial_size=250, wall_s=60.0, steps=8, step_s=2.5,
                        full_steps=7.5, eval_s=[20.0], one_eval_per_epoch=True, heldout_s=18.0, prepare_s=1.0,
                        model="spanbert")  # fmt: skip
    stage = E.finetune_task_estimate(f, squad, cells=9)
    # 8 steps logged, the last half full: fixed 60 - 7.5 x 2.5 - 20 = 21.25 s; 60 steps (7.5 x 2000 / 250);
    # 2 evaluations (2 an epoch, 1 epoch)
    cell = 21.25 + 60 * 2.5 + 2 * 20.0 + 18.0
    assert stage.per_cell == pytest.approx(cell) and stage.seconds == pytest.approx(9 * cell + 1.0)
    assert "60 steps × 2.50 s + 2 evaluations × 20.0 s" in stage.how
    coref = S.StudyTask("coref", train="t", folds=[0], options={"max_steps": 300, "eval_steps": 100})
    f = FinetuneTimings("LitBank", "steps", size=300, trial_size=38, wall_s=40.0, steps=38, step_s=0.5,
                        eval_s=[9.0], heldout_s=10.0)  # fmt: skip
    # fixed 40 - 19 - 9 = 12 s; 300 steps; evaluations at 100, 200 and the end
    assert E.finetune_task_estimate(f, coref, 3).per_cell == pytest.approx(12 + 150 + 3 * 9.0 + 10)
    # no schedule named: as many evaluations as the trial made
    sst = S.StudyTask("glue", subtask="SST-2", train="t", options={"max_train_examples": 800})
    f = FinetuneTimings("SST-2", "examples", size=800, trial_size=100, wall_s=20.0, steps=4, step_s=1.0,
                        eval_s=[2.0, 3.0])  # fmt: skip
    assert E.finetune_task_estimate(f, sst, 1).per_cell == pytest.approx(11 + 32 * 1.0 + 2 * 2.5)


# ---------------------------------------------------------------------------------------------
# a tiny dry run with every trial on


def _tiny_study(tmp_path: Path, out: Path) -> Path:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    with gzip.open(corpus / "wiki.txt.gz", "wt") as f:
        f.write("\n\n".join(synthetic_docs(n_docs=40)) + "\n")
    sst = tmp_path / "SST-2"
    sst.mkdir()
    body = "".join(f"{s}\t{lab}\n" for s, lab in synthetic_sst(48))
    for name in ("train.tsv", "dev.tsv"):
        (sst / name).write_text("sentence\tlabel\n" + body)
    (tmp_path / "train.json").write_text(json.dumps(synthetic_squad(6, seed=1)))
    (tmp_path / "dev.json").write_text(json.dumps(synthetic_squad(4, seed=2)))
    f = tmp_path / "s.yaml"
    f.write_text(
        f"corpus: {corpus}\nvocab_size: 300\nmodel: tiny\nbudget_tokens: 20000\nmax_seq_length: 64\nbatch_size: 4\n"
        f"seeds: 2\noutput_dir: {out}\npretrain_options: {{eval_steps: 20, max_eval_blocks: 8, save_steps: 30}}\n"
        "systems: [spanbert, {name: random-init, system: spanbert, options: {random_init: true}}]\ntasks:\n"
        f"  - {{task: glue, glue_task: SST-2, train: {sst}, learning_rates: [1e-3], options: {{max_train_examples: 32, "
        "num_train_epochs: 1, per_device_train_batch_size: 4, evals_per_epoch: 2}}\n"
        f"  - {{task: squad, train: {tmp_path}/train.json, dev: {tmp_path}/dev.json, learning_rates: [1e-3], "
        "options: {max_train_examples: 16, num_train_epochs: 1, max_seq_length: 64, per_device_train_batch_size: 4}}\n"
    )
    return f


def test_a_dry_run_estimates_every_stage_and_writes_nothing(tmp_path, capsys, cli_error):
    out = tmp_path / "out"
    f = _tiny_study(tmp_path, out)
    cli_error(["study", str(f), "--dry-run", "--estimate", str(out / "e.json")], names="--estimate",
              contains="inside the study's folder")  # fmt: skip
    saved = tmp_path / "estimate.json"
    assert main(["study", str(f), "--dry-run", "--trial_steps", "2", "--estimate", str(saved), "--time_limit", "1s"]) == 0
    text = capsys.readouterr().out
    assert "\ntime limit 1s: the estimate (" in text and "over it" in text
    for stage in ("data", "pre-training spanbert", "pre-training random-init", "fine-tuning SST-2", "fine-tuning squad",
                  "total"):  # fmt: skip
        assert f"\n  {stage}: " in text, text
    assert "estimate per stage, measured on this machine" in text and "no training: --random_init" in text
    assert "4 cells ×" in text  # 2 systems x 2 seeds of each task
    assert not out.exists()  # no vocabulary, corpus, model, lock or plan in the study's folder
    data = json.loads(saved.read_text())
    assert set(data["stages"]) == {"data", "pre-training spanbert", "pre-training random-init", "fine-tuning SST-2",
                                   "fine-tuning squad"}  # fmt: skip
    assert data["total"] == pytest.approx(sum(data["stages"].values())) and data["total"] > 0


def test_a_real_run_keeps_the_dry_runs_estimate_for_its_stage_table(tmp_path, capsys, cli_error):
    import torch

    from spanbert.config import model_config
    from spanbert.model import SpanBertForPreTraining
    from spanbert.tokenization import train_tokenizer

    tok = train_tokenizer(None, vocab_size=200, output_dir=tmp_path / "tok", texts=[s for s, _ in synthetic_sst(48)],
                          show_progress=False)  # fmt: skip
    torch.manual_seed(0)
    SpanBertForPreTraining(model_config("tiny", vocab_size=tok.vocab_size), sbo=True, nsp=False).save_pretrained(
        tmp_path / "model", tokenizer=tok)  # fmt: skip
    sst = tmp_path / "SST-2"
    sst.mkdir()
    body = "".join(f"{s}\t{lab}\n" for s, lab in synthetic_sst(40))
    for name in ("train.tsv", "dev.tsv"):
        (sst / name).write_text("sentence\tlabel\n" + body)
    out = tmp_path / "out"
    f = tmp_path / "s.yaml"
    f.write_text(f"systems:\n  - {{name: mine, checkpoint: {tmp_path / 'model'}}}\nseeds: 1\noutput_dir: {out}\ntasks:\n"
                 f"  - {{task: glue, glue_task: SST-2, train: {sst}, learning_rates: [1e-3], options: "
                 "{num_train_epochs: 1, per_device_train_batch_size: 16}}\n")  # fmt: skip
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    cli_error(["study", str(f), "--estimate", str(bad)], names=bad, contains='found no "stages"')
    assert not out.exists()
    estimate = tmp_path / "estimate.json"
    estimate.write_text(json.dumps({"stages": {"fine-tuning SST-2": 10.0}, "total": 10.0,
                                    "per_cell": {"fine-tuning SST-2": 10.0}}))  # fmt: skip
    assert main(["study", str(f), "--estimate", str(estimate)]) == 0
    printed = capsys.readouterr().out
    assert json.loads((out / ESTIMATE_FILE).read_text())["total"] == 10.0
    stages = (out / "summary" / "stages.md").read_text()
    assert stages in printed and "| fine-tuning SST-2 | 10 s | " in stages and "| 1/1 |" in stages, stages
    measured = json.loads((out / "finetune" / "mine" / "SST-2" / "lr0.001_seed0" / "result.json").read_text())
    assert measured["seconds"] > 0 and measured["heldout_seconds"] > 0
    # kept: a later summary shows it without the option
    assert main(["study", str(f), "--only", "summary"]) == 0
    assert "| fine-tuning SST-2 | 10 s | " in (out / "summary" / "stages.md").read_text()


def test_fixed_threads_beside_other_work_say_the_estimate_holds_only_beside_that_load(monkeypatch):
    # 2 fixed threads, other processes up to 1.5 of 2 cores: the threads wait at every step (13-20x measured)
    assert "holds only beside the same load" in E.crowded_threads(2, (0.2, 1.5), cores=2)
    assert E.crowded_threads(1, (0.2, 1.0), cores=2) == ""  # one thread, one core left: no waiting
    assert E.crowded_threads(2, (0.0, 0.2), cores=2) == ""  # idle cores (a daemon's 0.2 forgiven)
    assert E.crowded_threads(0, (1.0, 1.5), cores=2) == ""  # the count follows the free cores
    assert E.crowded_threads(2, None, cores=2) == ""  # the load is not known here
    monkeypatch.setattr(E, "usable_cores", lambda: 2)
    est, _ = _rounds_case()
    assert not any(x.startswith("warning:") for x in est.lines())  # the trials' count was not fixed
    est.fixed_threads = 2
    assert est.lines()[-1].startswith("warning: the trials ran 2 fixed thread(s) while other processes kept up to 1.5")


def test_the_fixed_thread_count_is_the_flag_or_the_environment(monkeypatch):
    from spanbert import threads

    monkeypatch.setattr(threads, "_fixed", 0)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert threads.fixed_count() == 0
    monkeypatch.setenv("OMP_NUM_THREADS", "3,1")
    assert threads.fixed_count() == 3
    monkeypatch.setattr(threads, "_fixed", 2)
    assert threads.fixed_count() == 2


def test_trials_the_load_held_to_fewer_threads_project_idle_cores_at_the_low_end():
    from spanbert.study.trials import thread_speedup

    assert thread_speedup(1, 2) == pytest.approx((1.45, 1.75))
    assert thread_speedup(1, 4) == pytest.approx((1.45**2, 1.75**2))  # two doublings
    # a made-up machine: idle cores run a step in 1.0 s at 2 threads (1.6x one thread); beside one busy
    # process the policy gave the trials 1 thread (1.6 s a step, the rounds 1.55-1.7 s)
    argv = ["pretrain", "--eval_steps", "300", "--max_eval_blocks", "256", "--save_steps", "300"]
    loaded = PretrainTimings("spanbert", wall_s=40.0, steps=13, step_s=1.6, eval_s=3.0, eval_blocks=256, save_s=0.5,
                             round_step_s=[1.6, 1.55, 1.7], others=[1.0, 1.0, 1.0], threads=1, idle_threads=2)  # fmt: skip
    assert loaded.idle_step_range == pytest.approx((1.55 / 1.75, 1.6 / 1.45))
    assert loaded.step_range == pytest.approx((1.55 / 1.75, 1.7))
    stage = E.pretrain_estimate(loaded, 1600, argv)
    idle_cell = 1600 * 1.0 + 6 * 3.0 / 1.6 + 6 * 0.5 + 10.0  # what the cell takes on idle cores
    beside = 1600 * 1.6 + 6 * 3.0 + 6 * 0.5 + 15.0  # and beside the same load
    assert stage.low <= idle_cell <= stage.high and stage.low <= beside <= stage.high
    assert "on idle cores 0.89-1.10 s: the trials ran 1 thread(s) beside the load, idle cores give 2" in stage.how
    est = E.Estimate([stage], 60.0, "", "", 1.0, [(loaded, argv)], spread=E.spread_of([loaded]), rounds=3,
                     others_range=(1.0, 1.0))  # fmt: skip
    assert "the low end is idle cores, projected from trials that the load held to 1 thread(s)" in est.lines()[-1]
    # the same machine idle: trials at the 2 threads idle cores give, no projection, the same cell inside
    quiet = PretrainTimings("spanbert", wall_s=30.0, steps=13, step_s=1.0, eval_s=1.9, eval_blocks=256, save_s=0.5,
                            round_step_s=[1.0, 0.95, 1.08], others=[0.0, 0.0, 0.0], threads=2, idle_threads=2)  # fmt: skip
    assert quiet.idle_step_range is None
    calm = E.pretrain_estimate(quiet, 1600, argv)
    assert calm.low <= idle_cell <= calm.high


def test_the_trials_thread_counts_are_the_runs_decision_and_idle_cores(monkeypatch):
    from spanbert import threads
    from spanbert.study import trials as T

    monkeypatch.setattr(threads, "run_threads", lambda: 1)
    monkeypatch.setattr(threads, "most_threads", lambda: 2)
    monkeypatch.setattr(threads, "fixed_count", lambda: 0)
    assert T.trial_threads() == (1, 2)  # the load held the run to one thread of two
    monkeypatch.setattr(threads, "fixed_count", lambda: 1)
    assert T.trial_threads() == (1, 1)  # a fixed count is what the study runs too: nothing to project
    monkeypatch.setattr(threads, "run_threads", lambda: None)
    assert T.trial_threads() == (0, 0)
