"""The time budget (`spanbert.budget`, `spanbert pretrain --max_time`): durations, the arithmetic of what
fits, and a budgeted run that equals a run given its total from the start, resumed or not."""

from __future__ import annotations

import json
import time

import pytest
import torch
from test_trainer import Net, Regression, args, params

from spanbert.budget import TimeBudget, evaluations_between, format_duration, parse_duration, total_steps
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


class SlowNet(Net):
    """A step takes at least 10 ms: a budget of B seconds fits at most B / 0.01 steps."""

    def forward(self, x, y):
        time.sleep(0.01)
        return super().forward(x, y)


def test_budgeted_run_equals_a_run_given_its_total_and_resumes_with_it(tmp_path):
    budget = TimeBudget(1.5, "1.5s")
    first = SlowNet()
    run = train(first, Regression(), args(tmp_path / "b", max_steps=-1, warmup_steps=6, save_steps=4), time_budget=budget)
    state = json.loads((latest_checkpoint(tmp_path / "b") / "trainer_state.json").read_text())["time_budget"]
    total = state["max_steps"]
    assert run.global_step == run.total_steps == total
    assert state["decided_at_step"] == 6 and state["max_time"] == "1.5s"
    assert 6 < total <= 6 + 1.5 / 0.01  # the measured steps, then no more than fit
    # the same steps given as --max_steps from the start: the same weights, bit for bit
    straight = SlowNet()
    train(straight, Regression(), args(tmp_path / "s", max_steps=total, warmup_steps=6, save_steps=4))
    for (k, a), b in zip(params(straight).items(), params(first).values()):
        assert torch.equal(a, b), k
    budgeted = SlowNet()
    train(budgeted, Regression(), args(tmp_path / "c", max_steps=-1, warmup_steps=6, save_steps=4, stop_at_step=8),
          time_budget=TimeBudget(1.5, "1.5s"))  # fmt: skip
    # a resume keeps the decision it finds (whatever the clock says now)
    saved = json.loads((latest_checkpoint(tmp_path / "c") / "trainer_state.json").read_text())["time_budget"]
    resumed = SlowNet()
    result = train(resumed, Regression(), args(tmp_path / "c", max_steps=-1, warmup_steps=6, save_steps=4, resume=True),
                   time_budget=TimeBudget(1000.0, "1.5s"))  # fmt: skip
    assert result.global_step == saved["max_steps"]
    again = SlowNet()
    train(again, Regression(), args(tmp_path / "t", max_steps=saved["max_steps"], warmup_steps=6, save_steps=4))
    for (k, a), b in zip(params(again).items(), params(resumed).values()):
        assert torch.equal(a, b), k


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
