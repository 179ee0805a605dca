"""Kill test: SIGKILL a training job at random instants, resume it each time, and check that

(a) `--resume` always works (once a first checkpoint exists),
(b) the final parameters equal those of an uninterrupted run bit for bit,
(c) no temporary debris (`.checkpoint-*.tmp-*`, `.latest.*.tmp`, `.X.old-*`) remains.

The job is `spanbert.trainer.train` on a small regression model (dropout on, so the RNG state matters)
with a checkpoint after every step, so that many kills land inside checkpoint writes.

    python bench/kill_test.py --kills 20 --steps 40 --seed 0
    python bench/kill_test.py --smoke     # 1 kill of a 5-step job (tests/test_bench.py)
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKER = r"""
import sys, torch
from torch import nn
from spanbert.trainer import TrainingArguments, train

out, steps, resume = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 96

    def __getitem__(self, i):
        x = torch.randn(32, generator=torch.Generator().manual_seed(i))
        return {"x": x, "y": x.sum().unsqueeze(0)}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        # wide enough that a checkpoint takes a noticeable time to write (kills land inside writes)
        self.body = nn.Sequential(nn.Linear(32, 512), nn.ReLU(), nn.Dropout(0.2), nn.Linear(512, 512), nn.ReLU(),
                                  nn.Dropout(0.2), nn.Linear(512, 1))

    def forward(self, x, y):
        return {"loss": ((self.body(x) - y) ** 2).mean()}


args = TrainingArguments(output_dir=out, max_steps=steps, per_device_train_batch_size=8, gradient_accumulation_steps=2,
                         learning_rate=1e-3, warmup_steps=3, save_steps=1, save_total_limit=2, logging_steps=5,
                         disable_tqdm=True, report_to="none", resume=resume)
train(Net(), Data(), args)
"""


def final_params(out: Path, steps: int) -> dict:
    import torch

    state = torch.load(out / f"checkpoint-{steps}" / "state.pt", weights_only=True)
    return state["model"]


def debris(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if p.name.startswith("."))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=20, help="how many times the job is killed")
    ap.add_argument("--steps", type=int, default=40, help="optimizer steps of the job")
    ap.add_argument("--seed", type=int, default=0, help="seed of the kill instants")
    ap.add_argument("--max_delay", type=float, default=0.0,
                    help="kill after a random 0.2..max_delay seconds (0: the uninterrupted run's duration)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: a check that it runs and prints its figures (tests/test_bench.py)")
    opts = ap.parse_args()
    if opts.smoke:
        opts.kills, opts.steps = 1, 5
    rng = random.Random(opts.seed)
    work = Path(tempfile.mkdtemp(prefix="spanbert-kill-"))
    worker = work / "worker.py"
    worker.write_text(WORKER)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def run(out: Path, resume: bool) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, str(worker), str(out), str(opts.steps), "1" if resume else "0"],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    t0 = time.time()
    ref = work / "reference"
    proc = run(ref, False)
    if proc.wait() != 0:
        sys.exit(f"the uninterrupted run failed: {proc.stderr.read()[-2000:]}")
    t_ref = time.time() - t0
    max_delay = opts.max_delay or t_ref
    out = work / "killed"
    kills, resumes, in_write, started = 0, 0, 0, 0
    while True:
        resume = (out / "latest").exists() or any(out.glob("checkpoint-*"))
        proc = run(out, resume)
        started += 1
        resumes += resume
        if kills < opts.kills:
            try:
                proc.wait(timeout=rng.uniform(0.2, max_delay))
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                kills += 1
                # a temporary checkpoint folder or pointer left behind = killed inside a checkpoint write
                in_write += bool([n for n in debris(out) if ".tmp" in n or ".old-" in n]) if out.exists() else 0
                continue
        err = proc.stderr.read() if proc.wait() == 0 else None
        if proc.returncode != 0:
            sys.exit(f"FAIL (a): run {started} (resume={resume}) exited {proc.returncode}: {(proc.stderr.read() or '')[-3000:]}")
        if kills >= opts.kills:
            break
        # finished before the planned kills: start over in a fresh folder to place the remaining kills
        del err
        shutil.rmtree(out)
    a, b = final_params(ref, opts.steps), final_params(out, opts.steps)
    import torch

    same = all(torch.equal(a[k], b[k]) for k in a)
    left = debris(out)
    print(f"kills {kills} (of which {in_write} left a checkpoint write unfinished), runs {started}, resumes {resumes}")
    print("(a) resume always worked: yes")
    print(f"(b) final parameters equal the uninterrupted run bit for bit: {'yes' if same else 'NO'}")
    print(f"(c) temporary debris left: {left or 'none'}")
    print(f"uninterrupted run {t_ref:.1f} s, whole test {time.time() - t0:.1f} s")
    shutil.rmtree(work, ignore_errors=True)
    sys.exit(0 if same and not left else 1)


if __name__ == "__main__":
    main()
