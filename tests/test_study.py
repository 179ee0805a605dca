"""`spanbert study` and `spanbert curve` end to end (`spanbert.study`): a tiny preset through the CLI, killed in the
middle and resumed without redoing finished cells, its pre-training cells under torchrun, `curve` fine-tuning
every checkpoint and checking its options first: the tests of spanbert/study/command.py, spanbert/study/options.py,
spanbert/study/runner.py and spanbert/study/layout.py, which only a whole study exercises.

The other modules' tests are in test_study_<module>.py (spec, cells, heldout, stats, summary, trial, estimate);
the study files and data they share are made here."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from test_glue import synthetic_sst
from test_pretrain import synthetic_docs
from test_qa import synthetic_squad

from spanbert.cli import main

# ---------------------------------------------------------------------------------------------
# a tiny preset end to end, killed and resumed


def _fake_data_root(root: Path) -> Path:
    """The files the presets read, in their layouts, made small."""
    (root / "pretrain-corpus").mkdir(parents=True)
    with gzip.open(root / "pretrain-corpus" / "enwiki-2015-00.txt.gz", "wt") as f:
        f.write("\n\n".join(synthetic_docs(n_docs=24)) + "\n")
    (root / "squad").mkdir()
    with gzip.open(root / "squad" / "train-v1.1.rebuilt.json.gz", "wt") as f:
        json.dump(synthetic_squad(8, seed=1), f)
    (root / "squad" / "dev-v1.1.json").write_text(json.dumps(synthetic_squad(4, seed=2)))
    _sst_folder(root / "glue" / "SST-2")
    return root


def _sst_folder(sst: Path, n: int = 32) -> Path:
    """A GLUE SST-2 folder as the study checks it (train.tsv and dev.tsv)."""
    sst.mkdir(parents=True, exist_ok=True)
    body = "".join(f"{s}\t{lab}\n" for s, lab in synthetic_sst(n))
    (sst / "train.tsv").write_text("sentence\tlabel\n" + body)
    (sst / "dev.tsv").write_text("sentence\tlabel\n" + body)
    return sst


def _study_cmd(data: Path, out: Path) -> list[str]:
    # the tiny preset of Table 7, shrunk: 1 pre-training step's worth of tokens, 2 seeds
    return [sys.executable, "-m", "spanbert", "study", "--preset", "table7", "--scale", "tiny",
            "--data_root", str(data), "--output_dir", str(out), "--budget_tokens", "8192", "--seeds", "2"]  # fmt: skip


@pytest.mark.slow
def test_tiny_preset_end_to_end_killed_and_resumed(tmp_path):
    data = _fake_data_root(tmp_path / "data")
    out = tmp_path / "study"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # first run: killed once the first fine-tuning cell has finished
    proc = subprocess.Popen(_study_cmd(data, out), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=tmp_path)
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        if list(out.glob("finetune/*/*/*/result.json")):
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    finished = {p: p.stat().st_mtime_ns for p in out.glob("*/*/cell.json")}
    finished |= {p: p.stat().st_mtime_ns for p in out.glob("finetune/*/*/*/result.json")}
    assert len(finished) >= 4  # three pre-training cells and at least one fine-tuning cell
    # second run: resumes, redoes nothing finished
    done = subprocess.run(_study_cmd(data, out), env=env, capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for p, mtime in finished.items():
        assert p.stat().st_mtime_ns == mtime, f"{p} was redone"
        assert (p.parent / "log.txt").read_text().count("$ spanbert") == 1, f"{p.parent} ran twice"
    results = sorted(out.glob("finetune/*/*/*/result.json"))
    assert len(results) == 3 * 2 * 2  # systems x tasks x seeds (one learning rate each)
    assert not list(out.glob("finetune/*/*/*/checkpoint-*"))  # no optimizer state kept
    table = (out / "summary" / "table.md").read_text().splitlines()
    header = next(line for line in table if line.startswith("| system"))
    assert header == "| system | squad | SST-2 |"
    rows = [line for line in table if line.startswith("| span-")]
    assert [r.split("|")[1].strip() for r in rows] == ["span-2seq-nsp", "span-1seq", "span-1seq-sbo"]
    comps = (out / "summary" / "comparisons.csv").read_text().splitlines()
    assert len(comps) == 1 + 2 * 3  # 3 pairs per task
    assert "summary:" in done.stdout


@pytest.mark.slow
def test_pretraining_cells_under_torchrun(tmp_path):
    data = _fake_data_root(tmp_path / "data")
    study = tmp_path / "s.yaml"
    study.write_text(
        f"corpus: {data}/pretrain-corpus/enwiki-2015-00.txt.gz\nvocab_size: 300\nmodel: tiny\n"
        f"budget_tokens: 8192\nmax_seq_length: 64\nbatch_size: 8\nseeds: 1\noutput_dir: {tmp_path}/out\n"
        f"pretrain_options: {{max_eval_blocks: 4}}\nsystems: [spanbert]\n"
        f"tasks:\n  - {{task: glue, glue_task: SST-2, train: {data}/glue/SST-2}}\n"
    )
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "-m", "spanbert", "study", str(study), "--only", "pretrain"]  # fmt: skip
    proc = subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    cell = tmp_path / "out" / "pretrain" / "spanbert"
    info = json.loads((cell / "cell.json").read_text())
    assert info["steps"] == 16  # 8192 / (8 x 64)
    assert (cell / "final" / "config.json").is_file()
    assert (cell / "log.txt").is_file() and (cell / "log.rank1.txt").is_file()
    ckpt = json.loads(next(cell.glob("checkpoint-*/trainer_state.json")).read_text())
    assert ckpt["world_size"] == 2 and ckpt["args"]["per_device_train_batch_size"] == 4
    assert proc.stdout.count("done: pretrain spanbert") == 1


@pytest.mark.slow
def test_curve_fine_tunes_every_checkpoint(tmp_path):
    data = _fake_data_root(tmp_path / "data")
    run = tmp_path / "run"
    assert main(["pretrain", "--corpus", str(data / "pretrain-corpus"), "--model", "tiny", "--vocab_size", "300",
                 "--max_seq_length", "64", "--max_steps", "6", "--save_steps", "2", "--save_total_limit", "10",
                 "--per_device_train_batch_size", "4", "--max_eval_blocks", "0", "--output_dir", str(run),
                 "--disable_tqdm", "--report_to", "none"]) == 0  # fmt: skip
    argv = ["curve", str(run), "--task", "glue", "--glue_task", "SST-2", "--train", str(data / "glue" / "SST-2"),
            "--learning_rate", "1e-3", "--option", "num_train_epochs=1", "--option", "per_device_train_batch_size=16"]  # fmt: skip
    assert main(argv) == 0
    out = run / "curve-SST-2"
    rows = (out / "curve.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in rows] == ["step", "2", "4", "6"]
    # the exported step-6 model is the run's final model
    from safetensors.torch import load_file

    a, b = load_file(out / "models" / "step-6" / "model.safetensors"), load_file(run / "final" / "model.safetensors")
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    # a second call redoes nothing
    before = {p: p.stat().st_mtime_ns for p in out.glob("finetune/*/*/*/result.json")}
    assert main(argv) == 0
    assert {p: p.stat().st_mtime_ns for p in out.glob("finetune/*/*/*/result.json")} == before


# ---------------------------------------------------------------------------------------------
# `spanbert curve`: its options checked before a checkpoint is exported (issue 22.13)


def _fake_run(root: Path) -> Path:
    """A pre-training run folder as `spanbert curve` checks it: final/ and one complete checkpoint."""
    (root / "final").mkdir(parents=True)
    (root / "final" / "config.json").write_text("{}")
    (root / "checkpoint-2").mkdir()
    torch.save({}, root / "checkpoint-2" / "state.pt")  # a whole torch file: a 0-byte one is no complete checkpoint
    (root / "checkpoint-2" / "trainer_state.json").write_text("{}")
    return root


@pytest.mark.parametrize(
    "extra, names, contains",
    [
        pytest.param(["--task", "glue", "--train", "{sst}"], "spanbert curve", "glue needs glue_task", id="no-glue-task"),
        pytest.param(["--task", "glue", "--glue_task", "SST-2", "--train", "{sst}/nowhere"], "nowhere",
                     "no such file or folder", id="train-missing"),
        pytest.param(["--task", "glue", "--glue_task", "SST-2", "--train", "{sst}", "--seeds", "0"], "seeds",
                     "expected an integer >= 1", id="no-seeds"),
        pytest.param(["--task", "glue", "--glue_task", "SST-2", "--train", "{sst}", "--learning_rate", "-1"],
                     "learning_rates", "expected positive numbers", id="negative-learning-rate"),
    ],
)  # fmt: skip
def test_curve_checks_its_options_before_exporting_a_checkpoint(tmp_path, cli_error, extra, names, contains):
    run = _fake_run(tmp_path / "run")
    sst = tmp_path / "SST-2"
    _sst_folder(sst)
    argv = ["curve", run, *[a.format(sst=sst) for a in extra]]
    cli_error(argv, names=names, contains=contains, out=run)  # nothing exported, no curve folder


def test_curve_refuses_a_run_without_checkpoints_before_any_work(tmp_path, cli_error):
    run = _fake_run(tmp_path / "run")
    shutil.rmtree(run / "checkpoint-2")
    # --train beside the run, not around it (an output inside a data folder is refused first)
    cli_error(["curve", run, "--task", "glue", "--glue_task", "SST-2", "--train", tmp_path / "SST-2"], names=run,
              contains="found no complete checkpoint-N folder", out=run)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# a study file on a raw-text corpus (the docs' case), for test_study_spec.py, test_study_cells.py and
# test_study_trial.py


def _raw_study(tmp_path: Path, out: Path, tasks: str | None = None) -> Path:
    """A study file on a raw-text corpus (the docs' case: a vocabulary to train, a corpus to preprocess)."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    with gzip.open(corpus / "wiki.txt.gz", "wt") as f:
        f.write("\n\n".join(synthetic_docs(n_docs=24)) + "\n")
    sst = _sst_folder(tmp_path / "SST-2")
    f = tmp_path / "s.yaml"
    f.write_text(
        f"corpus: {corpus}\nvocab_size: 300\nmodel: tiny\nbudget_tokens: 100000\nmax_seq_length: 64\nbatch_size: 4\n"
        f"seeds: 1\noutput_dir: {out}\nsystems: [spanbert]\ntasks:\n"
        + (tasks or f"  - {{task: glue, glue_task: SST-2, train: {sst}}}\n")
    )
    return f
