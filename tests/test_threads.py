"""The CPU thread policy (`spanbert.threads`): the count follows the cores other processes leave free,
an explicit count wins, and every command that runs a model applies it. Speed is measured in
bench/threads.py, never here."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
import types
from typing import ClassVar

import pytest
import torch

from spanbert import cli, threads


@pytest.fixture(autouse=True)
def restore_threads(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    threads.reset()
    yield
    threads.reset()
    torch.set_num_threads(before)


@pytest.mark.parametrize(
    "others, cores, most, expected",
    [
        (0.0, 2, 2, 2),  # idle: every core
        (0.2, 2, 2, 2),  # a terminal, a daemon: noise
        (0.3, 2, 2, 1),  # a neighbour that the scheduler already squeezes
        (1.0, 2, 2, 1),  # one busy neighbour
        (2.0, 2, 2, 1),  # two: still one thread, never zero
        (1.0, 8, 8, 7),
        (0.0, 8, 4, 4),  # never more than torch started with (or the user set)
        (3.0, 8, 4, 4),
    ],
)
def test_choose_threads(others, cores, most, expected):
    assert threads.choose_threads(others, cores, most) == expected


def test_an_explicit_count_wins(monkeypatch):
    assert "fixed by --threads" in threads.configure(1)
    assert torch.get_num_threads() == 1 and not threads.active()
    threads.reset()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert "fixed by OMP_NUM_THREADS" in threads.configure()
    assert not threads.active()
    threads.tick()  # a no-op without a policy
    assert torch.get_num_threads() == 1


def ticks(pid: int) -> int:
    stat = open(f"/proc/{pid}/stat").read()
    rest = stat[stat.rindex(")") + 2 :].split()
    return int(rest[11]) + int(rest[12])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the load is read from /proc")
def test_own_children_are_not_neighbours():
    # a DataLoader or preprocessing worker of this run is this run's work: it must not cost a thread
    work = "import time\nend = time.time() + 1.5\nwhile time.time() < end: pass"
    child = subprocess.Popen([sys.executable, "-c", work])
    time.sleep(1.0)
    try:
        mine, theirs = ticks(os.getpid()), ticks(child.pid)
        assert theirs > 0
        assert threads._tree_jiffies(os.getpid()) >= mine + theirs
    finally:
        child.kill()
        child.wait()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the load is read from /proc")
def test_the_work_of_children_that_ended_stays_this_runs():
    # the preprocessing pool of `spanbert pretrain` ends before training starts: its ticks leave /proc
    # with it, and read as a neighbour's unless the reaped children's ticks (cutime, cstime) are counted
    before = threads._tree_jiffies(os.getpid())
    work = "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass"
    subprocess.run([sys.executable, "-c", work], check=True)  # waited for: reaped
    clk = os.sysconf("SC_CLK_TCK")
    assert threads._tree_jiffies(os.getpid()) - before >= 0.4 * clk


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the load is read from /proc")
@pytest.mark.skipif(threads.usable_cores() < 2, reason="needs two cores to give one up")
def test_a_busy_neighbour_takes_a_thread():
    # a process that is not ours (started by a shell that exits at once: no child of this one) keeps a
    # core busy; within a measurement the policy gives that core up. Other load on the machine can
    # only lower the count further, so the assertion holds on a busy CI machine too.
    torch.set_num_threads(2)
    threads.configure()
    code = "import time\nend = time.time() + 4\nwhile time.time() < end: pass"
    subprocess.run(["sh", "-c", f'"{sys.executable}" -c "{code}" >/dev/null 2>&1 &'], check=True)
    time.sleep(0.3)
    threads.tick()  # starts a fresh measurement window (the first one spans the start-up)
    deadline = time.monotonic() + 3.0
    while torch.get_num_threads() == 2 and time.monotonic() < deadline:
        time.sleep(threads.INTERVAL_S + 0.05)
        threads.tick()
    assert torch.get_num_threads() == 1


def test_a_fixed_count_outlives_the_cells_of_a_study():
    threads.configure(1)
    threads.configure()  # a cell's own command, with no --threads of its own
    assert torch.get_num_threads() == 1 and not threads.active()


def test_threads_option_is_read_before_the_command_parses():
    assert cli._threads_option(["--model", "m", "--threads", "3"]) == 3
    assert cli._threads_option(["--threads=2"]) == 2
    assert cli._threads_option(["--threads", "x"]) == 0  # the command's parser reports it
    assert cli._threads_option(["--model", "m"]) == 0


def test_every_model_command_applies_the_policy(monkeypatch):
    seen = []
    monkeypatch.setattr(threads, "configure", lambda n=0: seen.append(n) or "")
    from spanbert.tasks import TASKS
    from spanbert.tasks.options import Inference
    from spanbert.tasks.spec import TaskSpec

    @dataclasses.dataclass(kw_only=True)
    class Toy(Inference):  # the options of a command that takes an options object: --threads among them
        HELP: ClassVar[tuple[str, str]] = ("a command that does nothing", "")

    run = lambda *a: 0  # noqa: E731 - the command itself is not under test
    parser = lambda prog: types.SimpleNamespace(parse_args=run)  # noqa: E731 - a --help that prints nothing
    fake = types.SimpleNamespace(main=run, fill_main=run, curve_main=run, run_probes=run, ProbeRun=Toy,
                                 pretrain_parser=parser, fill_parser=parser, study_parser=parser, curve_parser=parser)  # fmt: skip
    monkeypatch.setattr(cli.importlib, "import_module", lambda name: fake)
    toy = TaskSpec("toy", "a task that does nothing", run, run, run, "f1", "none",
                   options={"finetune": Toy, "predict": Toy, "evaluate": Toy})  # fmt: skip
    monkeypatch.setitem(TASKS, "toy", toy)
    for command in cli.COMPUTE:
        task = ["toy"] if command in cli.TASK_ACTIONS else []
        seen.clear()
        assert cli.run([command, *task, "--threads", "3"]) == 0
        assert seen == [3], command
        seen.clear()
        cli.run([command, *task])
        assert seen == [0], command
    seen.clear()
    cli.run(["pretrain", "--help"])  # help only: nothing to run
    cli.run(["tokenizer", "train"])  # no model: torch's own default
    assert seen == []


def test_training_takes_threads_from_its_arguments(tmp_path):
    from spanbert.runs import SAFE_TO_CHANGE
    from spanbert.training_args import TrainingArguments

    assert TrainingArguments().threads == 0
    assert "threads" in SAFE_TO_CHANGE  # a resumed run may use another count


@pytest.mark.parametrize("action", ["predict", "evaluate"])
def test_every_task_that_runs_a_model_takes_threads(action, capsys):
    # `--threads` is read before the command parses (cli._threads_option); each parser must accept it
    from spanbert.tasks import TASKS

    for name in TASKS:
        with pytest.raises(SystemExit):
            cli.run([action, name, "--help"])
        text = capsys.readouterr().out
        if "--model" in text:  # runs a model (evaluate coref scores two files and runs none)
            assert "--threads" in text, f"{action} {name}"


@pytest.mark.parametrize(
    "argv",
    [["pretrain", "--threads", "-1"], ["predict", "ner", "--model", "m", "--data", "d", "--output", "o", "--threads", "-2"],
     ["study", "--preset", "table1", "--threads", "x"]],
)
def test_a_negative_or_non_numeric_thread_count_is_refused(argv, cli_error, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cli_error(argv, contains="--threads", out=tmp_path)


def test_what_other_processes_use_of_the_cores_is_told(monkeypatch):
    # /proc as it would read: the machine busy for 300 ticks over 1 s, this run for 100 of them: others 2 cores
    from spanbert import cost

    clock = {"t": 100.0, "busy": 1000, "ours": 500}
    monkeypatch.setattr(threads.time, "monotonic", lambda: clock["t"])
    monkeypatch.setattr(threads, "_busy_jiffies", lambda: clock["busy"])
    monkeypatch.setattr(threads, "_tree_jiffies", lambda pid: clock["ours"])
    monkeypatch.setattr(threads.os, "sysconf", lambda name: 100)
    monkeypatch.setattr(threads, "usable_cores", lambda: 4)
    threads.reset()
    threads.configure(1)  # a fixed count still measures: the time a plan promises depends on the load
    clock.update(t=101.0, busy=1300, ours=600)
    assert threads.others_cores() == pytest.approx(2.0)
    clock.update(t=102.0, busy=1400, ours=700)  # the next window: only this run worked
    assert threads.others_cores() == 0.0
    clock.update(t=103.0, busy=1530, ours=800)
    assert threads.sharing() == "other processes kept about 0.3 of the 4 cores busy"
    clock.update(t=104.0, busy=1640, ours=900)  # 0.1 of a core: noise, nothing to say
    assert threads.sharing() is None
    plan = cost.FinetunePlan(94, 1.0, "cpu", 300.0, shared="other processes kept about 1.4 of the 2 cores busy")
    assert plan.line() == ("plan: 94 steps (1 epoch), about 5 min of training on idle cpu cores; other processes "
                           "kept about 1.4 of the 2 cores busy: expect longer")  # fmt: skip
    threads.reset()


# ---------------------------------------------------------------------------------------------
# A training run's count: decided once, recorded, reused on --resume (its weights depend on it)


def _fake_proc(monkeypatch, others: float) -> None:
    """/proc as it reads when other processes keep ``others`` of 2 cores busy (and this run none)."""
    monkeypatch.setattr(threads, "others_since", lambda mark: others)
    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    monkeypatch.setattr(threads, "SAMPLE_S", 0.0)


def test_a_run_takes_the_free_cores_once_and_says_how_to_pin_them(monkeypatch):
    _fake_proc(monkeypatch, 1.2)
    torch.set_num_threads(2)
    threads.configure()  # a command's policy: follow the load
    n, note = threads.decide_for_run()
    assert n == torch.get_num_threads() == 1 and not threads.active()
    assert "not the 2 of idle cores" in note and "--threads 1 repeats this run" in note and "--threads 2 matches" in note
    assert "the cores free when the run started, kept to its end" in threads.describe()
    torch.set_num_threads(1)
    monkeypatch.setattr(threads, "others_since", lambda mark: 0.0)  # the load went: the run keeps its count
    threads.tick()
    assert torch.get_num_threads() == 1
    assert threads.decide_for_run() == (1, None)  # the trainer's own call: the same count, said once


def test_idle_cores_give_every_thread_and_no_note(monkeypatch):
    _fake_proc(monkeypatch, 0.1)
    torch.set_num_threads(2)
    threads.configure()
    assert threads.decide_for_run() == (2, None)


def test_a_resumed_run_takes_its_recorded_count_whatever_the_load(monkeypatch):
    _fake_proc(monkeypatch, 1.5)
    torch.set_num_threads(2)
    threads.configure()
    n, note = threads.decide_for_run(recorded=2)
    assert n == torch.get_num_threads() == 2 and note is None
    assert "kept on --resume" in threads.describe()
    threads.reset()
    n, note = threads.decide_for_run(recorded=2, pinned=1)  # the user's count wins, and is told what it costs
    assert n == 1 and "where the run started with 2" in note and "--threads 2 keeps them equal" in note


def test_a_killed_run_resumed_at_another_count_ends_bit_identical_to_the_straight_run(tmp_path):
    # the straight run at 1 thread; the resumed one would get 2 (torch's count now) but takes the recorded 1
    from test_trainer import Net, Regression, args, params

    from spanbert.runs import latest_checkpoint
    from spanbert.trainer import train

    if threads.most_threads() < 2:
        pytest.skip("one usable core: no other count to resume at")
    torch.set_num_threads(1)
    straight = Net()
    train(straight, Regression(), args(tmp_path / "a"))
    first = Net()
    train(first, Regression(), args(tmp_path / "b", stop_at_step=6))
    state = json.loads((latest_checkpoint(tmp_path / "b") / "trainer_state.json").read_text())
    assert state["threads"] == 1
    threads.reset()
    torch.set_num_threads(2)
    seen = {}

    class Watch(Net):
        def forward(self, x, y):
            seen["threads"] = torch.get_num_threads()
            return super().forward(x, y)

    resumed = Watch()
    train(resumed, Regression(), args(tmp_path / "b", resume=True))
    assert seen["threads"] == 1
    for (k, a), b in zip(params(straight).items(), params(resumed).values()):
        assert torch.equal(a, b), k


def test_a_python_call_s_threads_option_is_a_count_or_the_free_cores(monkeypatch):
    seen = []
    monkeypatch.setattr(threads, "configure", lambda n=0: seen.append(n) or "")
    for options in ({"threads": 3}, {}, {"threads": True}, {"threads": None}):
        threads.configure_from(options)
    assert seen == [3, 0, 0, 0]  # True is a bool, no count
