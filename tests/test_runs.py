"""A training run's folder (`spanbert.runs`): checkpoints that stay complete through a kill at any instant, the
`latest` pointer and its fallback, a killed run's debris removed, the exact rules of a resume (what may change and
what may not), an output folder that holds a run refused, the log of a run started again or resumed, each rank's
random state restored, and a full disk during a checkpoint or a log row.

The loop's own part of trust at scale (loss weighting by targets, fp16 skips) is in test_loop.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_trainer import Net, Regression, args
from test_utils import _full_after

from spanbert import errors, folders
from spanbert.errors import SpanBertError
from spanbert.folders import MANIFEST, record
from spanbert.runs import check_output_dir, find_resume_checkpoint, latest_checkpoint
from spanbert.trainer import train

# --- checkpoints after a kill ------------------------------------------------------------------


def test_resave_keeps_latest_complete_at_every_instant(tmp_path, monkeypatch):
    """Re-save checkpoint-12 (resume at the last step) and 'kill' it at each rename in turn."""
    train(Net(), Regression(), args(tmp_path / "ref"))
    expected = params_of_checkpoint(tmp_path / "ref" / "checkpoint-12")
    real_replace = os.replace
    k = 0
    while True:
        out = tmp_path / f"run{k}"
        train(Net(), Regression(), args(out))
        calls = {"n": 0}

        def flaky(a, b, _k=k):
            calls["n"] += 1  # noqa: B023
            if calls["n"] == _k + 1:  # noqa: B023
                raise KeyboardInterrupt("killed")
            return real_replace(a, b)

        monkeypatch.setattr(os, "replace", flaky)
        try:
            train(Net(), Regression(), args(out, resume=True))
            finished = True
        except KeyboardInterrupt:
            finished = False
        monkeypatch.setattr(os, "replace", real_replace)
        ckpt = latest_checkpoint(out)
        assert ckpt is not None, f"latest broken after a kill at rename {k}"
        assert params_of_checkpoint(ckpt) == expected
        assert train(Net(), Regression(), args(out, resume=True)).global_step == 12
        assert [p.name for p in out.iterdir() if p.name.startswith(".")] == [MANIFEST]  # debris removed
        if finished:
            break
        k += 1
    assert k >= 3  # the re-save path has several renames


def params_of_checkpoint(path: Path) -> dict:
    state = torch.load(path / "state.pt", weights_only=True)
    return {k: v.tolist() for k, v in state["model"].items()}


def test_debris_of_a_killed_run_is_removed(tmp_path):
    train(Net(), Regression(), args(tmp_path, stop_at_step=6))
    (tmp_path / ".checkpoint-9.tmp-123").mkdir()
    (tmp_path / ".checkpoint-9.tmp-123" / "state.pt").write_bytes(b"half")
    (tmp_path / ".latest.abc.tmp").write_text("checkpoint-9")
    (tmp_path / ".checkpoint-3.old-77").mkdir()
    record(tmp_path / "final")  # as the export does (listed in the run's manifest before it is made)
    (tmp_path / "final").mkdir()
    (tmp_path / "final" / ".config.json.x1.tmp").write_text("{")
    (tmp_path / ".final.tmp-zz").mkdir()
    train(Net(), Regression(), args(tmp_path, resume=True))
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [MANIFEST]
    assert not list((tmp_path / "final").iterdir())


def test_missing_or_broken_latest_falls_back_to_the_newest_complete(tmp_path, capsys):
    train(Net(), Regression(), args(tmp_path, stop_at_step=9))
    (tmp_path / "latest").unlink()
    capsys.readouterr()
    assert train(Net(), Regression(), args(tmp_path, resume=True, stop_at_step=10)).global_step == 10
    out = capsys.readouterr().out
    assert "latest is missing" in out and "checkpoint-9" in out
    (tmp_path / "latest").write_text("checkpoint-77\n")
    path, note = find_resume_checkpoint(tmp_path)
    assert path.name == "checkpoint-10" and "checkpoint-77" in note
    for p in tmp_path.glob("checkpoint-*"):
        (p / "state.pt").unlink()
    with pytest.raises(SpanBertError, match="no usable checkpoint.*has no state.pt"):
        train(Net(), Regression(), args(tmp_path, resume=True))


def test_a_resume_before_the_first_checkpoint_says_to_start_again(tmp_path):
    """The re-audit of issue 58 (I04, I05): killed before its first checkpoint, `--resume` was refused without
    saying that the same command without it starts the run again (it does, and trains the same weights)."""
    from spanbert.runs import find_resume_checkpoint

    (tmp_path / "log.jsonl").write_text("")
    with pytest.raises(SpanBertError, match=r"no checkpoint-N folder in .*run the same command without --resume"):
        find_resume_checkpoint(tmp_path)


def test_checkpoint_missing_a_key_or_of_another_size_is_a_clear_error(tmp_path):
    train(Net(), Regression(), args(tmp_path, stop_at_step=3))
    state_file = tmp_path / "checkpoint-3" / "state.pt"
    state = torch.load(state_file, weights_only=True)
    torch.save({k: v for k, v in state.items() if k != "optimizer"}, state_file)
    with pytest.raises(SpanBertError, match="found no optimizer"):
        train(Net(), Regression(), args(tmp_path, resume=True))
    torch.save(state, state_file)

    class Wider(Net):
        def __init__(self):
            super().__init__()
            self.l1, self.norm, self.l2 = torch.nn.Linear(4, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 1)

    with pytest.raises(SpanBertError, match="do not fit this model"):
        train(Wider(), Regression(), args(tmp_path, resume=True))


def test_resume_with_changed_settings(tmp_path, capsys):
    train(Net(), Regression(), args(tmp_path, stop_at_step=3), run_config={"mask_ratio": 0.15})
    with pytest.raises(SpanBertError, match=r"learning_rate: 0.01 -> 0.02; .*mask_ratio: 0.15 -> 0.2"):
        train(Net(), Regression(), args(tmp_path, resume=True, learning_rate=2e-2), run_config={"mask_ratio": 0.2})
    with pytest.raises(SpanBertError, match=r"per_device_train_batch_size: 4 -> 2 \(global batch 4 -> 2\)"):
        train(Net(), Regression(), args(tmp_path, resume=True, per_device_train_batch_size=2), run_config={"mask_ratio": 0.15})
    capsys.readouterr()
    # the same global batch split otherwise, and a new logging interval, are accepted with a note
    result = train(Net(), Regression(), args(tmp_path, resume=True, per_device_train_batch_size=2,
                                             gradient_accumulation_steps=2, logging_steps=1, stop_at_step=6),
                   run_config={"mask_ratio": 0.15})
    assert result.global_step == 6
    out = capsys.readouterr().out
    assert "gradient_accumulation_steps: 1 -> 2" in out and "logging_steps: 3 -> 1" in out
    state = json.loads((tmp_path / "checkpoint-6" / "trainer_state.json").read_text())
    assert state["world_size"] == 1 and state["run_config"] == {"mask_ratio": 0.15}


def test_output_dir_with_a_run_is_refused(tmp_path):
    train(Net(), Regression(), args(tmp_path, max_steps=3))
    with pytest.raises(SpanBertError, match="--resume.*--overwrite_output_dir"):
        check_output_dir(args(tmp_path))
    with pytest.raises(SpanBertError, match="--overwrite_output_dir"):
        train(Net(), Regression(), args(tmp_path, max_steps=3))
    train(Net(), Regression(), args(tmp_path, max_steps=2, save_steps=1, overwrite_output_dir=True))
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]


def test_a_folder_held_by_its_command_is_checked_once(tmp_path, monkeypatch):
    """The command checks its folder, then claims it (`claim_run_dir`); the task function and the loop inside
    it do not check it again. A folder inside the held one (a sweep's run) and the folder once the claim is
    given back (the next command) are checked."""
    from spanbert import runs

    train(Net(), Regression(), args(tmp_path / "done", max_steps=1))
    checked: list[str] = []
    real = runs.check_output
    monkeypatch.setattr(runs, "check_output", lambda path, **kw: checked.append(Path(path).name) or real(path, **kw))
    check_output_dir(args(tmp_path / "run"))
    with runs.claim_run_dir(tmp_path / "run", "spanbert test"):
        check_output_dir(args(tmp_path / "run"))
        check_output_dir(args(tmp_path / "run" / "sweep-1"))
        with runs.claim_run_dir(tmp_path / "done", "spanbert test"):
            check_output_dir(args(tmp_path / "done"))  # held: its command decided, before claiming it
    assert checked == ["run", "sweep-1"]
    with pytest.raises(SpanBertError, match="--resume"):  # given back: the next command is refused again
        check_output_dir(args(tmp_path / "done"))


# --- two processes -------------------------------------------------------------------------------

RESUME_SCRIPT = """
import os, sys, torch
sys.path.insert(0, {tests!r})
from test_trainer import Net, Regression, args
from spanbert.trainer import train
model = Net(dropout=0.3)
torch.manual_seed(1000 + int(os.environ.get("RANK", 0)))  # each rank its own dropout stream
train(model, Regression(), args({out!r}, max_steps=8, save_steps=2, stop_at_step={stop}, resume={resume}))
if int(os.environ.get("RANK", 0)) == 0:
    torch.save(model.state_dict(), {out!r} + "/params-{tag}.pt")
"""


@pytest.mark.slow
def test_two_process_resume_with_dropout_is_exact(tmp_path):
    """torchrun 2 x gloo, dropout on: 4 steps + --resume + 4 steps == 8 straight steps, bit for bit
    (each rank restores its own RNG stream)."""
    tests = str(Path(__file__).parent)
    path = os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")]))  # the caller's spanbert first
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    runs = [("straight", "a", -1, False), ("first", "b", 4, False), ("second", "b", -1, True)]
    for tag, folder, stop, resume in runs:
        script = tmp_path / f"{tag}.py"
        script.write_text(RESUME_SCRIPT.format(tests=tests, out=str(tmp_path / folder), stop=stop, resume=resume, tag=tag))
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, proc.stderr[-3000:]
    state = torch.load(latest_checkpoint(tmp_path / "b") / "state.pt", weights_only=True)
    assert len(state["rng"]) == 2 and not torch.equal(state["rng"][0]["torch"], state["rng"][1]["torch"])
    a = torch.load(tmp_path / "a" / "params-straight.pt", weights_only=True)
    b = torch.load(tmp_path / "b" / "params-second.pt", weights_only=True)
    for k in a:
        assert torch.equal(a[k], b[k]), k


def _logged_steps(path: Path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def test_a_run_started_again_into_the_same_folder_logs_afresh(tmp_path, capsys):
    """A run killed before its first checkpoint leaves only log.jsonl, which `check_output_dir` accepts:
    the next run moves that log aside (never lost) and writes one run's rows."""
    train(Net(), Regression(), args(tmp_path, max_steps=6, save_steps=100, logging_steps=2, stop_at_step=4))
    for p in tmp_path.glob("checkpoint-*"):  # as if killed before the first checkpoint
        import shutil

        shutil.rmtree(p)
    (tmp_path / "latest").unlink(missing_ok=True)
    old = (tmp_path / "log.jsonl").read_text()
    check_output_dir(args(tmp_path))  # only a log: accepted
    capsys.readouterr()
    train(Net(), Regression(), args(tmp_path, max_steps=6, logging_steps=2))
    out = capsys.readouterr().out
    assert f"note: {tmp_path / 'log.jsonl'} is an earlier run's log; moved it to log.jsonl.1" in out
    assert _logged_steps(tmp_path / "log.jsonl") == [2, 4, 6]
    assert (tmp_path / "log.jsonl.1").read_text() == old


def test_resume_drops_the_rows_logged_after_the_checkpoint(tmp_path, capsys):
    train(Net(), Regression(), args(tmp_path, max_steps=12, save_steps=4, logging_steps=1, stop_at_step=4))
    # the killed run logged steps 5 and 6 past checkpoint-4, the last line cut short
    with open(tmp_path / "log.jsonl", "a") as f:
        f.write('{"step": 5, "train/loss": 1.0}\n{"step": 6, "train/loss": 1.0}\n{"step": 7, "tra')
    capsys.readouterr()
    train(Net(), Regression(), args(tmp_path, max_steps=12, save_steps=4, logging_steps=1, resume=True))
    out = capsys.readouterr().out
    assert "dropped 3 row(s) after step 4" in out
    assert _logged_steps(tmp_path / "log.jsonl") == list(range(1, 13))
    assert not list(tmp_path.glob("log.jsonl.*"))  # a resume continues the log, nothing moved aside


# --- a full disk during a checkpoint or a log row --------------------------------------------------


def test_a_full_disk_during_a_checkpoint_or_a_log_row(tmp_path, monkeypatch):
    import torch

    from spanbert.runs import _Logger, latest_checkpoint, save_training_state
    from spanbert.training_args import TrainingArguments

    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    args = TrainingArguments(output_dir=str(tmp_path))
    save_training_state(tmp_path, 1, model, opt, sched, None, args, {})
    log = _Logger(tmp_path, True, False)
    log.log(1, {"loss": 1.0})
    kept = (tmp_path / "log.jsonl").read_bytes()
    _full_after(monkeypatch, 64)
    with pytest.raises(errors.NoSpaceError, match=rf"{tmp_path / 'checkpoint-2'}: found no space"):
        save_training_state(tmp_path, 2, model, opt, sched, None, args, {})
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint-1" and not (tmp_path / "checkpoint-2").exists()
    assert not [p for p in tmp_path.iterdir() if folders.is_debris(p.name)]
    monkeypatch.undo()
    # the log: a row that does not fit is not left half-written
    class FullLog:
        def __init__(self, f):
            self.f = f

        def tell(self):
            return self.f.tell()

        def write(self, text):
            self.f.write(text[:5])
            self.f.flush()
            raise OSError(28, "No space left on device")

        def flush(self):
            self.f.flush()

        def close(self):
            self.f.close()

    log.jsonl.close()
    log.jsonl = FullLog(open(tmp_path / "log.jsonl", "a"))
    with pytest.raises(errors.NoSpaceError, match="log.jsonl: found no space"):
        log.log(2, {"loss": 0.5})
    assert (tmp_path / "log.jsonl").read_bytes() == kept
