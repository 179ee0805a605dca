"""Kill test: SIGKILL a training job at random instants, resume it each time, and check that

(a) `--resume` always works (once a first checkpoint exists),
(b) the final parameters (last checkpoint and exported `final/`) equal those of an uninterrupted run
    bit for bit,
(c) no temporary debris (`.checkpoint-*.tmp-*`, `.latest.*.tmp`, `.X.old-*`, `final/.X.*.tmp`) remains,
(d) `final/` is, right after every kill, absent (before the first export) or a complete export: never
    new weights beside an old head or config.

The job is `spanbert.trainer.train` on a small regression model (dropout on, so the RNG state matters)
with a checkpoint after every step, so that many kills land inside checkpoint writes; after training it
exports `final/` as `spanbert pretrain` does (`utils.atomic_dir` + `checkpoints.save_checkpoint`: weights, a
second weights file like the SBO head, config.json, train_metrics.json). Phase 1 kills the job at
random instants of its work (timed from the start of training, which the job prints, so the kills do not
fall into the imports). Phase 2 (`--export_kills`) re-runs the finished job with --resume, which
re-saves the last checkpoint and re-exports `final/`, and kills it at a random instant inside the
export (timed from the export's start).

    python bench/kill_test.py --kills 20 --export_kills 20 --steps 40 --seed 0
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

from spanbert.folders import MANIFEST

WORKER = r"""
import sys, torch
from torch import nn
from spanbert.trainer import train
from spanbert.training_args import TrainingArguments

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
model = Net()
import time
print("train-start", time.time(), flush=True)
result = train(model, Data(), args)

# the export of `spanbert pretrain` (pretrain.export): a folder written beside final/ and swapped in
import json, time
from pathlib import Path
from spanbert.checkpoints import save_checkpoint
from spanbert.utils import atomic_dir

state = model.state_dict()
print("export-start", time.time(), flush=True)
with atomic_dir(Path(out) / "final") as tmp:
    save_checkpoint(tmp, {k: v for k, v in state.items() if not k.startswith("body.4")}, {"model_type": "kill-test"},
                    extra_files={"head.safetensors": {k: v for k, v in state.items() if k.startswith("body.4")}})
    (tmp / "train_metrics.json").write_text(json.dumps(result.metrics) + "\n")
print("export-end", time.time(), flush=True)
"""

FINAL_FILES = ("config.json", "head.safetensors", "model.safetensors", "train_metrics.json")


def final_params(out: Path, steps: int) -> dict:
    import torch

    state = torch.load(out / f"checkpoint-{steps}" / "state.pt", weights_only=True)
    return state["model"]


def exported(out: Path) -> dict:
    """The weights in ``out/final`` (both files); raises if the folder is not a complete export."""
    import json

    from safetensors.torch import load_file

    names = sorted(p.name for p in (out / "final").iterdir() if not p.name.startswith("."))
    if names != sorted(FINAL_FILES):
        raise AssertionError(f"final/ holds {names}, expected {sorted(FINAL_FILES)}")
    json.loads((out / "final" / "config.json").read_text())
    json.loads((out / "final" / "train_metrics.json").read_text())
    return {**load_file(out / "final" / "model.safetensors"), **load_file(out / "final" / "head.safetensors")}


def debris(out: Path) -> list[str]:
    # hidden names, less the manifest: the record of what the run wrote, kept on purpose (spanbert.folders)
    found = [p.name for p in out.iterdir() if p.name.startswith(".") and p.name != MANIFEST]
    if (out / "final").is_dir():
        found += [f"final/{p.name}" for p in (out / "final").iterdir() if p.name.startswith(".")]
    return sorted(found)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=20, help="how many times the job is killed at random instants")
    ap.add_argument("--export_kills", type=int, default=20, help="how many times a re-export of final/ is killed")
    ap.add_argument("--steps", type=int, default=40, help="optimizer steps of the job")
    ap.add_argument("--seed", type=int, default=0, help="seed of the kill instants")
    ap.add_argument("--max_delay", type=float, default=0.0,
                    help="kill a random 0..max_delay seconds after training starts (0: the uninterrupted run's "
                         "training and export time)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: a check that it runs and prints its figures (tests/test_bench.py)")
    opts = ap.parse_args()
    if opts.smoke:
        opts.kills, opts.export_kills, opts.steps = 1, 1, 5
    rng = random.Random(opts.seed)
    work = Path(tempfile.mkdtemp(prefix="spanbert-kill-"))
    worker = work / "worker.py"
    worker.write_text(WORKER)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def run(out: Path, resume: bool) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, str(worker), str(out), str(opts.steps), "1" if resume else "0"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def check_final(out: Path, when: str) -> None:
        """(d): right after a kill, final/ is absent or a complete export of the reference weights."""
        if not (out / "final").exists():
            return
        try:
            got = exported(out)
        except Exception as e:  # noqa: BLE001 - any way of being incomplete is the failure reported
            sys.exit(f"FAIL (d): {when}: final/ is not a complete export: {e}")
        if ref_export and not all(torch.equal(got[k], ref_export[k]) for k in ref_export):
            sys.exit(f"FAIL (d): {when}: final/ holds other weights than the uninterrupted run's")

    import torch

    t0 = time.time()
    ref = work / "reference"
    proc = run(ref, False)
    stdout, stderr = proc.communicate()
    if proc.returncode != 0:
        sys.exit(f"the uninterrupted run failed: {stderr[-2000:]}")
    t_ref = time.time() - t0
    marks = dict(line.split()[:2] for line in stdout.splitlines() if line.startswith(("train-", "export-")))
    t_train = float(marks["export-end"]) - float(marks["train-start"])  # training, checkpoints and export
    ref_export: dict = exported(ref)
    # how long a re-export takes (a finished run resumed: re-saves its last checkpoint, exports again)
    proc = run(ref, True)
    marks = dict(line.split()[:2] for line in proc.communicate()[0].splitlines() if line.startswith("export-"))
    t_export = float(marks["export-end"]) - float(marks["export-start"])
    max_delay = opts.max_delay or t_train
    out = work / "killed"

    # Phase 1: kills at random instants of the training job
    kills, resumes, in_write, started = 0, 0, 0, 0
    while True:
        resume = (out / "latest").exists() or any(out.glob("checkpoint-*"))
        proc = run(out, resume)
        started += 1
        resumes += resume
        if kills < opts.kills:
            # the instant is drawn over the job's work, timed from its start (after the imports)
            line = proc.stdout.readline()
            while line and not line.startswith("train-start"):
                line = proc.stdout.readline()
            try:
                proc.wait(timeout=rng.uniform(0.0, max_delay))
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                kills += 1
                # a temporary checkpoint folder or pointer left behind = killed inside a checkpoint write
                in_write += bool([n for n in debris(out) if ".tmp" in n or ".old-" in n]) if out.exists() else 0
                check_final(out, f"kill {kills}")
                continue
        _, err = proc.communicate()
        if proc.returncode != 0:
            sys.exit(f"FAIL (a): run {started} (resume={resume}) exited {proc.returncode}: {err[-3000:]}")
        if kills >= opts.kills:
            break
        # finished before the planned kills: start over in a fresh folder to place the remaining kills
        shutil.rmtree(out)

    # Phase 2: kills inside the re-export of final/ (timed from the export's start)
    export_kills, inside, left_tmp = 0, 0, 0
    while export_kills < opts.export_kills:
        proc = run(out, True)
        started += 1
        resumes += 1
        line = proc.stdout.readline()
        while line and not line.startswith("export-start"):
            line = proc.stdout.readline()
        if not line:
            sys.exit(f"FAIL (a): a resumed run ended before its export: {proc.communicate()[1][-3000:]}")
        time.sleep(rng.uniform(0.0, 1.5 * t_export))
        proc.send_signal(signal.SIGKILL)
        rest, _ = proc.communicate()
        export_kills += 1
        inside += "export-end" not in rest and proc.returncode == -signal.SIGKILL
        left_tmp += any(n.startswith(".final.") for n in debris(out))
        check_final(out, f"export kill {export_kills}")

    # one last resumed run to the end: it cleans up and exports
    proc = run(out, True)
    started += 1
    resumes += 1
    _, err = proc.communicate()
    if proc.returncode != 0:
        sys.exit(f"FAIL (a): the last resumed run exited {proc.returncode}: {err[-3000:]}")
    a, b = final_params(ref, opts.steps), final_params(out, opts.steps)
    same = all(torch.equal(a[k], b[k]) for k in a)
    got = exported(out)
    same_export = all(torch.equal(got[k], ref_export[k]) for k in ref_export)
    left = debris(out)
    print(f"phase 1: kills {kills} at random instants (of which {in_write} left a checkpoint write unfinished)")
    print(f"phase 2: kills {export_kills} during the re-export of final/ (export takes {t_export * 1000:.0f} ms; "
          f"{inside} killed before it finished, {left_tmp} left a .final.* temporary)")
    print(f"runs {started}, resumes {resumes}")
    print("(a) resume always worked: yes")
    print(f"(b) final parameters equal the uninterrupted run bit for bit: checkpoint {'yes' if same else 'NO'}, "
          f"final/ {'yes' if same_export else 'NO'}")
    print(f"(c) temporary debris left: {left or 'none'}")
    print("(d) final/ after every kill: absent or a complete export of the same weights: yes")
    print(f"uninterrupted run {t_ref:.1f} s, whole test {time.time() - t0:.1f} s")
    shutil.rmtree(work, ignore_errors=True)
    sys.exit(0 if same and same_export and not left else 1)


if __name__ == "__main__":
    main()
