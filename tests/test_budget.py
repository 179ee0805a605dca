"""The time budget (`spanbert.budget`, `spanbert pretrain --max_time`): durations, the arithmetic of what
fits, and a budgeted run that equals a run given its total from the start, resumed or not."""

from __future__ import annotations

import json

import pytest
import torch
from test_trainer import Net, Regression, args, params

from spanbert.budget import (
    TimeBudget,
    evaluations_between,
    format_duration,
    parse_duration,
    seconds_needed,
    total_steps,
)
from spanbert.errors import SpanBertError
from spanbert.runs import latest_checkpoint
from spanbert.trainer import train


@pytest.mark.parametrize("text,seconds", [("90s", 90), ("45m", 2700), ("1h30m", 5400), ("2.5h", 9000), (" 1h 5s ", 3605)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "60", "1x", "m", "0m", "1h-5m", "1.5"])
def test_bad_durations_are_refused_with_the_option(text):
    with pytest.raises(SpanBertError, match="--max_time"):
        parse_duration(text)


def test_format_duration():
    assert (format_duration(42), format_duration(725), format_duration(3725.4)) == ("42s", "12m 05s", "1h 02m 05s")


def test_evaluations_counted_as_the_trainer_runs_them():
    # every 10 steps before the end, and one at the end: after step 5 up to 30 -> 10, 20, 30
    assert evaluations_between(5, 30, 10) == 3
    assert evaluations_between(5, 31, 10) == 4  # 10, 20, 30, 31
    assert evaluations_between(10, 10, 10) == 0
    assert evaluations_between(0, 7, 0) == 1  # only the final one


def test_total_steps_fill_the_budget_and_no_more():
    # 100 s left, 1 s a step, 5 s an evaluation every 20 steps: n + 5 * evals(n) <= 100
    total = total_steps(10, 100.0, 1.0, 5.0, 20)
    n = total - 10
    assert n + 5 * evaluations_between(10, total, 20) <= 100
    assert (n + 1) + 5 * evaluations_between(10, total + 1, 20) > 100
    assert total_steps(10, -3.0, 1.0, 0.0, 0) == 11  # a spent budget ends at the next step
    # checkpoints every 10 steps and at the end (2 s each), and the export after it (3 s)
    total = total_steps(0, 100.0, 1.0, 0.0, 0, 2.0, 10, 3.0)
    assert seconds_needed(0, total, 1.0, 0.0, 0, 2.0, 10, 3.0) <= 100 < seconds_needed(0, total + 1, 1.0, 0.0, 0, 2.0, 10, 3.0)


class Clock:
    """A made-up clock that the model moves: each forward pass takes ``step_s(calls)`` seconds. Times in
    multiples of 1/8 s, so every sum is exact and two runs that should plan alike plan alike to the bit."""

    def __init__(self, start: float = 0.0):
        self.t = start

    def __call__(self) -> float:
        return self.t


class TimedNet(Net):
    def __init__(self, clock: Clock, step_s=lambda calls: 0.125):
        super().__init__()
        self.clock, self.step_s, self.calls = clock, step_s, 0

    def forward(self, x, y):
        self.calls += 1
        self.clock.t += self.step_s(self.calls)
        return super().forward(x, y)


def _budget(seconds: float, clock: Clock) -> TimeBudget:
    return TimeBudget(seconds, f"{seconds:g}s", clock=clock)


def _state(run_dir) -> dict:
    return json.loads((latest_checkpoint(run_dir) / "trainer_state.json").read_text())["time_budget"]


def _same(a, b):
    for (k, x), y in zip(params(a).items(), params(b).values()):
        assert torch.equal(x, y), k


BUDGET_ARGS = dict(max_steps=-1, warmup_steps=6, save_steps=4, logging_steps=50)


def test_steady_speed_keeps_the_first_plan_and_equals_a_run_given_its_total(tmp_path):
    clock = Clock()
    budgeted = TimedNet(clock)
    result = train(budgeted, Regression(), args(tmp_path / "b", **BUDGET_ARGS), time_budget=_budget(12.5, clock))
    state = _state(tmp_path / "b")
    # 0.125 s a step: 6 steps measured, 11.75 s left -> 94 more; the end lands on the budget exactly
    assert state["decided_at_step"] == 6 and state["max_time"] == "12.5s"
    assert result.global_step == result.total_steps == state["max_steps"] == 100
    assert [p["total"] for p in state["plans"]][1:] == [100]  # no re-plan at a steady speed
    assert clock.t == 12.5
    straight = Net()
    train(straight, Regression(), args(tmp_path / "s", max_steps=100, warmup_steps=6, save_steps=4))
    _same(straight, budgeted)


def test_a_slower_machine_moves_the_end_and_the_decay_still_reaches_zero(tmp_path):
    clock = Clock()
    slower = TimedNet(clock, lambda calls: 0.125 if calls <= 40 else 0.375)  # other work took the cores
    run = train(slower, Regression(), args(tmp_path / "b", **BUDGET_ARGS), time_budget=_budget(12.5, clock))
    state = _state(tmp_path / "b")
    totals = [p["total"] for p in state["plans"]][1:]
    assert totals[0] == 100 and len(totals) > 1 and totals[-1] < 70  # the end moved in
    assert run.global_step == totals[-1]
    assert abs(clock.t - 12.5) <= 0.05 * 12.5  # the budget kept within 5%
    # the schedule the run followed: continuous, and zero at the end
    from spanbert.budget import plans_from
    from spanbert.loop import planned_schedule
    from spanbert.optim import param_groups

    plans = plans_from(state["plans"], 0, 0)
    groups = param_groups(Net(), 1.0, 0.0)
    f = planned_schedule(plans, groups, args(tmp_path, warmup_steps=6))[0]
    rates = [f(t) for t in range(run.global_step + 1)]
    assert rates[-1] == 0.0 and min(rates) >= 0.0
    assert max(abs(a - b) for a, b in zip(rates[6:], rates[7:])) < 0.2  # no jump after the warm-up


def test_a_run_killed_in_the_warm_up_plans_from_its_own_steps_and_resumes_exactly(tmp_path):
    # issue 58.4: the resumed process never ran step 1 and divided the clock's reading (the machine's
    # uptime) by the steps: "505.76 s a step over steps 2-8 -> 9 steps in all", 8 s into a 40 s budget
    clock = Clock()
    straight = TimedNet(clock)
    train(straight, Regression(), args(tmp_path / "s", **BUDGET_ARGS), time_budget=_budget(12.5, clock))
    first_clock = Clock(start=2.0**20)  # a perf_counter reading long after boot
    first = TimedNet(first_clock)
    train(first, Regression(), args(tmp_path / "b", **BUDGET_ARGS, stop_at_step=3), time_budget=_budget(12.5, first_clock))
    assert _state(tmp_path / "b")["decided"] is False and _state(tmp_path / "b")["elapsed_seconds"] == 0.375
    later = Clock(start=2.0**21)
    resumed = TimedNet(later)
    result = train(resumed, Regression(), args(tmp_path / "b", **BUDGET_ARGS, resume=True), time_budget=_budget(12.5, later))
    state = _state(tmp_path / "b")
    assert state["decided_at_step"] == 6 and state["step_seconds"] == 0.125  # its own steps 5-6, not the uptime
    assert result.global_step == 100 and later.t - 2.0**21 == 12.5 - 0.375
    _same(straight, resumed)


def test_a_run_resumed_after_its_plan_goes_on_with_it(tmp_path):
    clock = Clock()
    straight = TimedNet(clock)
    train(straight, Regression(), args(tmp_path / "s", **BUDGET_ARGS), time_budget=_budget(12.5, clock))
    first_clock = Clock()
    train(TimedNet(first_clock), Regression(), args(tmp_path / "b", **BUDGET_ARGS, stop_at_step=40),
          time_budget=_budget(12.5, first_clock))  # fmt: skip
    later = Clock(start=2.0**20)
    resumed = TimedNet(later)
    result = train(resumed, Regression(), args(tmp_path / "b", **BUDGET_ARGS, resume=True), time_budget=_budget(12.5, later))
    assert result.global_step == 100 and [p["total"] for p in _state(tmp_path / "b")["plans"]][1:] == [100]
    _same(straight, resumed)


def test_a_resumed_run_whose_clock_runs_slower_replans_from_its_own_speed(tmp_path):
    first_clock = Clock()
    train(TimedNet(first_clock), Regression(), args(tmp_path / "b", **BUDGET_ARGS, stop_at_step=40),
          time_budget=_budget(12.5, first_clock))  # fmt: skip
    later = Clock()
    result = train(TimedNet(later, lambda calls: 0.375), Regression(),
                   args(tmp_path / "b", **BUDGET_ARGS, resume=True), time_budget=_budget(12.5, later))  # fmt: skip
    assert result.global_step < 100
    assert abs(5.0 + later.t - 12.5) <= 0.05 * 12.5  # 40 steps of 0.125 s before, then this process's


@pytest.mark.parametrize("kind", ["linear", "polynomial", "cosine", "constant"])
def test_planned_schedule_goes_on_from_the_rate_reached(kind):
    from spanbert.budget import Plan, planned_lambda
    from spanbert.optim import cosine_lambda, lr_lambda

    def make(total, warmup):
        if kind == "cosine":
            return cosine_lambda(total, warmup, 1.0, 0.0, 0.0)
        return lr_lambda(total, warmup, kind)

    one = planned_lambda([Plan(0, 300, 20)], make)
    assert [one(t) for t in range(301)] == [make(300, 20)(t) for t in range(301)]
    # re-planned inside the warm-up, the warm-up unchanged: the run given the new total from the start
    early = planned_lambda([Plan(0, 300, 20), Plan(10, 200, 20)], make)
    assert [early(t) for t in range(201)] == [make(200, 20)(t) for t in range(201)]
    # a shorter warm-up from step 10: a straight line from the rate reached to the peak
    short = planned_lambda([Plan(0, 300, 200), Plan(10, 300, 40)], make)
    assert short(10) == make(300, 200)(10) and short(40) == make(300, 40)(40)
    assert all(short(t) <= short(t + 1) for t in range(10, 40))
    # after the warm-up: continuous at the re-plan, and at the new end the schedule's own end
    late = planned_lambda([Plan(0, 300, 20), Plan(100, 300, 20), Plan(150, 180, 20)], make)
    assert late(150) == pytest.approx(make(300, 20)(150), abs=1e-9)
    assert late(180) == make(180, 20)(180)
    assert all(late(t) >= late(t + 1) - 1e-12 for t in range(20, 180))
    if kind in ("linear", "polynomial", "cosine"):
        assert late(180) == pytest.approx(0.0, abs=1e-12)
        # linear: a straight line from the rate at the re-plan to zero at the new end
        if kind == "linear":
            assert late(165) == pytest.approx(late(150) / 2)


def test_fit_plan_keeps_sensible_shares_and_says_so():
    from spanbert.budget import fit_plan

    fit = fit_plan(298, 25, 200, 300, 300)  # issue 60: 200 of 298 steps warming up, no evaluation fired
    assert fit.warmup == 59 and fit.eval_steps == fit.save_steps == 100 and len(fit.notes) == 3
    assert "--warmup_steps 200 is 67% of the 298 planned steps" in fit.notes[0]
    assert "--eval_steps 300 leaves 1 evaluation(s)" in fit.notes[1]
    kept = fit_plan(1492, 25, 200, 300, 300)  # the README's 40-minute run: every value fits
    assert (kept.warmup, kept.eval_steps, kept.save_steps, kept.notes) == (200, 300, 300, ())
    short = fit_plan(60, 25, 200, 0, 0)
    assert (short.warmup, short.eval_steps, short.save_steps) == (26, 0, 0)  # never a warm-up ending before the next step; 0 kept


def test_first_plan_step_needs_steps_of_its_own():
    from spanbert.budget import first_plan_step

    assert first_plan_step(25, 0, 200) == 25
    assert first_plan_step(25, 8, 200) == 25
    assert first_plan_step(25, 23, 200) == 28  # resumed near the measurement's end: 4 timed steps of its own
    assert first_plan_step(25, 23, 25) == 25  # but never after the warm-up
    assert first_plan_step(6, 5, 6) == 6


def test_pace_leaves_evaluations_and_checkpoints_out_of_the_step_time():
    from spanbert.budget import Pace

    clock = Clock()
    pace = Pace(clock)
    for step, dt in enumerate([3.0, 1.0, 1.0, 2.0, 2.0], start=1):
        clock.t += dt
        if step == 3:
            clock.t += 5.0
            pace.overhead("eval", 5.0)
        pace.step_done(step)
    assert pace.steps == [1.0, 1.0, 2.0, 2.0] and pace.first_step == 1 and pace.eval_s == 5.0
    assert pace.step_seconds(ahead=2) == 1.5  # at least MIN_MEASURED (4) of the latest
    assert pace.step_seconds(ahead=100) == 1.5


def test_a_budget_needs_a_warmup_to_measure_in(tmp_path):
    with pytest.raises(SpanBertError, match="--warmup_steps 2, expected at least 5"):
        train(Net(), Regression(), args(tmp_path, max_steps=-1, warmup_steps=2), time_budget=TimeBudget(5.0, "5s"))


def _pretrain(tmp, *argv):
    return ["pretrain", "--output_dir", str(tmp / "run"), "--disable_tqdm", *argv]


@pytest.mark.parametrize("argv,contains", [
    (("--max_time", "1 hour", "--warmup_steps", "10"), "expected a duration such as 90s"),
    (("--max_time", "0s", "--warmup_steps", "10"), "expected a duration above zero"),
    (("--max_time", "5m", "--warmup_steps", "10", "--max_steps", "100"), "found --max_steps 100 too"),
    (("--max_time", "5m"), "found no --warmup_steps"),
    (("--max_time", "5m", "--warmup_steps", "10", "--seq_length_schedule", "64:0.5,128"), "--seq_length_schedule too"),
    (("--dropout", "1.0"), "expected a rate in [0, 1)"),
    (("--dropout", "-0.1"), "expected a rate in [0, 1)"),
])  # fmt: skip
def test_pretrain_time_budget_and_dropout_options_are_checked_before_any_work(argv, contains, tmp_path, cli_error):
    cli_error(_pretrain(tmp_path, *argv), names=argv[0], contains=contains, out=tmp_path)


def test_set_dropout_reaches_every_rate_of_every_family():
    from spanbert import cloze, modernbert
    from spanbert.config import model_config
    from spanbert.dropout import Dropout, set_dropout
    from spanbert.model import SpanBertForPreTraining

    def rates(m):
        return [x.p for x in m.modules() if isinstance(x, Dropout)] + [x.dropout_p for x in m.modules() if hasattr(x, "dropout_p")]

    bert = SpanBertForPreTraining(model_config("tiny", vocab_size=50))
    mb = modernbert.ModernBertForPreTraining(modernbert.modernbert_config(
        "tiny", vocab_size=50, attention_dropout=0.1, mlp_dropout=0.1, embedding_dropout=0.1))  # fmt: skip
    two_tower = cloze.TwoTowerModel(cloze.cloze_config("tiny", vocab_size=50))
    for m in (bert, mb, two_tower):
        assert rates(m) and max(rates(m)) > 0
        set_dropout(m, 0.0)
        assert set(rates(m)) == {0.0}, type(m).__name__
    for m in (bert, mb):  # no rate left: two training-mode forwards agree
        m.train()
        ids = torch.randint(5, 50, (2, 12))
        assert torch.equal(m(input_ids=ids)["hidden_states"], m(input_ids=ids)["hidden_states"])
    with pytest.raises(ValueError):
        set_dropout(bert, 1.0)


_RANKS_SCRIPT = '''
import json, sys
import torch
import torch.distributed as dist
from torch import nn
from spanbert.budget import TimeBudget
from spanbert.trainer import train
from spanbert.training_args import TrainingArguments

class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 48
    def __getitem__(self, i):
        x = torch.randn(4, generator=torch.Generator().manual_seed(i))
        return {"x": x, "y": x.sum().unsqueeze(0)}

class Clock:
    t = 0.0
    def __call__(self):
        return self.t

class Net(nn.Module):
    def __init__(self, clock, step_s):
        super().__init__()
        torch.manual_seed(0)
        self.l1, self.l2 = nn.Linear(4, 16), nn.Linear(16, 1)
        self.clock, self.step_s = clock, step_s
    def forward(self, x, y):
        self.clock.t += self.step_s
        return {"loss": ((self.l2(torch.relu(self.l1(x))) - y) ** 2).mean()}

out, rank = sys.argv[1], int(__import__("os").environ["RANK"])
clock = Clock()
# rank 1's clock runs three times as fast: were each rank to plan from its own, they would part ways
model = Net(clock, 0.125 if rank == 0 else 0.375)
args = TrainingArguments(output_dir=out, max_steps=-1, warmup_steps=6, save_steps=20, logging_steps=50,
                         per_device_train_batch_size=2, learning_rate=1e-2, disable_tqdm=True, report_to="none")
result = train(model, Data(), args, time_budget=TimeBudget(12.5, "12.5s", clock=clock))
w = torch.cat([p.detach().flatten() for p in model.parameters()])
json.dump({"step": result.global_step, "total": result.total_steps, "w": w.tolist()}, open(f"{out}/rank{rank}.json", "w"))
'''


@pytest.mark.slow
def test_under_torchrun_rank_0_plans_for_every_rank(tmp_path):
    import os
    import subprocess
    import sys

    script = tmp_path / "ranks.py"
    script.write_text(_RANKS_SCRIPT)
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script), str(out)]
    proc = subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["step"] == ranks[1]["step"] == ranks[0]["total"] == 100  # rank 0's clock: 0.125 s a step
    assert ranks[0]["w"] == ranks[1]["w"]  # the same schedule on both: the same weights
    state = _state(out)
    assert state["step_seconds"] == 0.125 and [p["total"] for p in state["plans"]][1:] == [100]
