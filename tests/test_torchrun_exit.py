"""How two-process runs end (issue 22.8, 22.9): a finished rank exits 0 every time (no SIGABRT at exit),
and when a rank dies the other stops at once with one line naming it and its log."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

# A short run on 2 gloo processes: a few steps with a data-loader worker and a checkpoint, then the
# process ends as a user's script does (atexit leaves the group); KILL_AT=k: rank 1 SIGKILLs itself at
# its k-th forward, after writing the time to DIED. Self-contained (no test module, no pytest import):
# 40 interpreters start in the stress test.
SCRIPT = """
import os, signal, sys, time
import torch
from torch import nn
from spanbert.training_args import TrainingArguments
from spanbert.trainer import train

kill_at = int(os.environ.get("KILL_AT", 0))


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 37  # not a multiple of the global batch: the last step is short

    def __getitem__(self, i):
        x = torch.randn(4, generator=torch.Generator().manual_seed(i))
        return {{"x": x, "y": x.sum().unsqueeze(0)}}


class Net(nn.Module):
    calls = 0

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, x, y):
        Net.calls += 1
        if kill_at and os.environ["RANK"] == "1" and Net.calls == kill_at:
            with open(os.environ["DIED"], "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
        return {{"loss": ((self.body(x) - y) ** 2).mean()}}


args = TrainingArguments(output_dir=sys.argv[1], max_steps=int(sys.argv[2]), per_device_train_batch_size=4,
                         save_steps=2, logging_steps=1, disable_tqdm=True, report_to="none", dataloader_num_workers=1)
train(Net(), Data(), args)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(script: Path, out: Path, steps: int, extra_env: dict | None = None) -> list[subprocess.CompletedProcess]:
    """Start both ranks as torchrun does (its environment variables, no agent: a launch costs two
    interpreters, not three) and wait for both."""
    port = _free_port()
    procs = []
    for r in range(2):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "RANK": str(r), "LOCAL_RANK": str(r),
               "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               **(extra_env or {})}  # fmt: skip
        procs.append(subprocess.Popen([sys.executable, str(script), str(out), str(steps)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))  # fmt: skip
    done = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=240)
        done.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return done


# The stress test's launcher: it imports torch and spanbert once, then for each launch forks the two
# ranks, which set torchrun's environment variables, run the short job (SCRIPT's body) and leave through
# the interpreter's normal exit (SystemExit unwinds to the top: atexit handlers, finalisation, C++
# destructors, where the SIGABRT came from). A launch costs two forks, not two interpreter starts, so
# 20 launches take seconds. Each rank's stderr goes to its own file; the launcher prints one status line
# per rank: "launch rank exit-status signal".
LAUNCHER = """
import os, socket, sys
import torch
import torch._dynamo  # what the children would import first (AdamW's constructor): once, here
import torch.distributed
import torch.utils.data
import spanbert.trainer

launches, work = int(sys.argv[1]), sys.argv[2]
body = open(sys.argv[3]).read()
for i in range(launches):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pids = []
    for r in range(2):
        pid = os.fork()
        if pid == 0:
            out = os.open(os.path.join(work, f"out.{{i}}.{{r}}"), os.O_WRONLY | os.O_CREAT, 0o644)
            os.dup2(out, 1)
            err = os.open(os.path.join(work, f"stderr.{{i}}.{{r}}"), os.O_WRONLY | os.O_CREAT, 0o644)
            os.dup2(err, 2)
            os.environ.update(RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                              MASTER_PORT=str(port))
            sys.argv = ["run", os.path.join(work, f"run{{i}}"), "2"]
            exec(compile(body, "run.py", "exec"), {{"__name__": "__main__"}})
            sys.exit(0)
        pids.append(pid)
    for r, pid in enumerate(pids):
        _, status = os.waitpid(pid, 0)
        print(i, r, os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1,
              os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0, flush=True)
"""


@pytest.mark.slow
def test_twenty_two_process_launches_all_exit_cleanly(tmp_path):
    """Issue 22.8: 20 launches of a short two-process run (a data-loader worker, checkpoints), 0 abnormal
    exits: every rank exits 0, killed by no signal, with no ``terminate called`` on its way out."""
    (tmp_path / "run.py").write_text(SCRIPT.format())
    (tmp_path / "launcher.py").write_text(LAUNCHER.format())
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, str(tmp_path / "launcher.py"), "20", str(tmp_path), str(tmp_path / "run.py")]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [tuple(map(int, line.split())) for line in proc.stdout.splitlines()]
    assert len(rows) == 40, proc.stdout + proc.stderr[-2000:]
    bad = [(i, r, code, sig) for i, r, code, sig in rows if code != 0 or sig != 0]
    aborted = [p.name for p in tmp_path.glob("stderr.*") if "terminate called" in p.read_text()]
    assert not bad and not aborted, f"abnormal exits (launch, rank, status, signal): {bad}; aborts: {aborted}"


@pytest.mark.slow
def test_a_dead_rank_is_named_in_one_line(tmp_path):
    """Issue 22.9: rank 1 is killed mid-run; rank 0 exits non-zero within a second with one line that
    names rank 1, its pid and its log, instead of gloo's traceback."""
    script = tmp_path / "run.py"
    script.write_text(SCRIPT.format())
    died = tmp_path / "died"
    logs = tmp_path / "logs"
    # the log folder as torchrun gives it (TORCHELASTIC_ERROR_FILE = <attempt dir>/<local rank>/error.json)
    for r in range(2):
        (logs / str(r)).mkdir(parents=True)
        (logs / str(r) / "stderr.log").write_text("")
    env = {"KILL_AT": "3", "DIED": str(died)}
    t0 = time.time()
    procs = []
    port = _free_port()
    for r in range(2):
        penv = {**os.environ, **env, "OMP_NUM_THREADS": "1", "RANK": str(r), "LOCAL_RANK": str(r),
                "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                "TORCHELASTIC_ERROR_FILE": str(logs / str(r) / "error.json")}  # fmt: skip
        procs.append(subprocess.Popen([sys.executable, str(script), str(tmp_path / "out"), "50"], env=penv,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))  # fmt: skip
    _, err0 = procs[0].communicate(timeout=240)
    end0 = time.time()
    procs[1].communicate(timeout=60)
    assert procs[1].returncode == -9
    assert procs[0].returncode not in (0, None)
    lines = [x for x in err0.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in err0, err0
    assert re.fullmatch(rf"error: rank 1 \(pid {procs[1].pid} on this host\) stopped; its log: .*", lines[0]), lines[0]
    assert str(logs / "1" / "stderr.log") in lines[0]
    assert end0 - float(died.read_text()) < 3.0, f"rank 0 took {end0 - float(died.read_text()):.1f} s to stop"
    assert end0 > t0


def _two_ranks_one_dead(monkeypatch) -> int:
    """This process as rank 0 of 2, rank 1 a process that has ended; returns rank 1's pid."""
    from spanbert import distributed

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    host = socket.gethostname()
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(distributed, "_peers", [{"host": host, "pid": os.getpid(), "log_dir": ""},
                                                {"host": host, "pid": gone.pid, "log_dir": "/logs/1"}])  # fmt: skip
    return gone.pid


def test_only_a_broken_collective_is_told_as_a_dead_rank(monkeypatch):
    from spanbert import distributed

    pid = _two_ranks_one_dead(monkeypatch)
    line = distributed.peer_failure(RuntimeError("[pair.cc:553] Connection closed by peer [127.0.0.1]:5547"))
    assert line.startswith(f"rank 1 (pid {pid} on this host) stopped; its output is above, on torchrun's console")
    assert distributed.peer_failure(RuntimeError("shape mismatch")) is None  # a bug of ours stays a traceback
    monkeypatch.setattr(distributed, "_peers", [])
    assert distributed.peer_failure(RuntimeError("Connection closed by peer")) is None  # one process


def test_the_cli_ends_at_once_with_the_line(monkeypatch, capsys):
    """`spanbert ...` under torchrun: a collective broken by a dead rank ends the command with the one
    line and exit status 1 (at once: os._exit, the teardown after a broken group takes seconds)."""
    from spanbert import cli, distributed

    _two_ranks_one_dead(monkeypatch)

    def broken(argv):
        raise RuntimeError("Connection closed by peer [127.0.0.1]:5547. This is typically caused by a remote worker crashing.")

    def exit_now(code):
        raise SystemExit(code)

    monkeypatch.setattr(cli, "run", broken)
    monkeypatch.setattr(distributed.os, "_exit", exit_now)
    monkeypatch.setattr(distributed, "_failed", False)
    with pytest.raises(SystemExit) as stop:
        cli.main(["pretrain"])
    assert stop.value.code == 1
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert len(err) == 1 and err[0].startswith("error: rank 1 (pid "), err
