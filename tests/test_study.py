"""`spanbert study`: statistics on hand-made numbers, the study file's errors, and a tiny preset end
to end through the CLI, killed in the middle and resumed without redoing finished cells."""

from __future__ import annotations

import gzip
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_glue import synthetic_sst
from test_pretrain import synthetic_docs
from test_qa import synthetic_squad

from spanbert import study as S
from spanbert.cli import main
from spanbert.study import heldout

# ---------------------------------------------------------------------------------------------
# statistics


def test_paired_t_interval_by_hand():
    # differences 1, 2, 3: mean 2, sd 1, se 1/sqrt(3), t(0.975, 2) = 4.303
    c = S.paired_comparison("a", "b", [2.0, 4.0, 6.0], [1.0, 2.0, 3.0])
    half = 4.303 / math.sqrt(3)
    assert c.n == 3 and c.diff == pytest.approx(2.0)
    assert (c.t_low, c.t_high) == (pytest.approx(2 - half), pytest.approx(2 + half))
    assert c.verdict == "not distinguishable"
    # the bootstrap means of three differences lie between the smallest and the largest
    assert 1.0 <= c.boot_low <= 2.0 <= c.boot_high <= 3.0


def test_a_consistent_difference_is_significant_both_ways():
    c = S.paired_comparison("span", "bert", [80.0, 81.0, 82.0, 80.5], [78.0, 79.2, 80.1, 78.4])
    assert c.t_low > 0 and c.boot_low > 0 and c.verdict == "span better"
    r = S.paired_comparison("bert", "span", [78.0, 79.2, 80.1, 78.4], [80.0, 81.0, 82.0, 80.5])
    assert r.t_high < 0 and r.verdict == "span better"


def test_one_seed_gives_no_interval():
    c = S.paired_comparison("a", "b", [1.0], [0.0])
    assert c.diff == 1.0 and math.isnan(c.t_low) and c.verdict == "too few seeds"


def test_t_quantiles():
    assert S.t_quantile_975(1) == 12.706 and S.t_quantile_975(30) == 2.042
    assert S.t_quantile_975(60) == pytest.approx(2.0003, abs=1e-3)
    assert S.t_quantile_975(120) == pytest.approx(1.9799, abs=1e-3)
    assert S.t_quantile_975(10**6) == pytest.approx(1.95996, abs=1e-4)


def test_mean_std_uses_the_sample_deviation():
    assert S.mean_std([1.0, 2.0, 3.0]) == (2.0, 1.0)
    assert S.mean_std([5.0]) == (5.0, 0.0)


def test_table_has_a_row_per_system_and_the_best_in_bold(tmp_path):
    study = S.Study(
        systems=[S.SystemSpec("bert"), S.SystemSpec("spanbert")],
        tasks=[S.TaskSpec("glue", name="SST-2"), S.TaskSpec("squad")],
        seeds=2,
    )
    results = {
        "bert": {"SST-2": {"lr": 1e-4, "scores": [80.0, 82.0]}, "squad": {"lr": 3e-5, "scores": [50.0, 52.0]}},
        "spanbert": {"SST-2": {"lr": 1e-4, "scores": [79.0, 79.0]}, "squad": {"lr": 3e-5, "scores": [60.0, 61.0]}},
    }
    # cells finished before held-out scoring: the dev score, labelled, and no held-out score
    md, rows = S.table(study, results)
    lines = md.strip().splitlines()
    assert lines[0] == "| system | SST-2 | squad |" and len(lines) == 4
    assert lines[2] == "| bert | – (dev 81.0 ± 1.4) | – (dev 51.0 ± 1.4) |"
    assert [r[0] for r in rows] == ["system", "bert", "spanbert"]
    # held-out scores: ranked (bold) by them, the dev score that selected beside each
    results["bert"]["SST-2"]["heldout"] = [78.0, 80.0]
    results["spanbert"]["SST-2"]["heldout"] = [77.0, 77.0]
    results["bert"]["squad"]["heldout"] = [49.0, 50.0]
    results["spanbert"]["squad"]["heldout"] = [58.0, 60.0]
    md, rows = S.table(study, results)
    lines = md.strip().splitlines()
    assert lines[2] == "| bert | **79.0 ± 1.4** (dev 81.0 ± 1.4) | 49.5 ± 0.7 (dev 51.0 ± 1.4) |"
    assert lines[3] == "| spanbert | 77.0 ± 0.0 (dev 79.0 ± 0.0) | **59.0 ± 1.4** (dev 60.5 ± 0.7) |"
    assert rows[0][-4:] == ["SST-2 heldout mean", "squad heldout mean", "SST-2 heldout std", "squad heldout std"]
    assert rows[1][1] == "81.0000" and rows[1][-4] == "79.0000"
    assert [c.scored_on for _, c in S.comparisons(study, results)] == ["held-out", "held-out"]


def test_the_learning_rate_with_the_best_dev_mean_is_selected(tmp_path):
    study = S.Study(systems=[S.SystemSpec("bert")], tasks=[S.TaskSpec("glue", name="SST-2", learning_rates=[1e-4, 3e-4])],
                    seeds=2, output_dir=str(tmp_path))  # fmt: skip
    for lr, scores in ((1e-4, [70.0, 90.0]), (3e-4, [85.0, 86.0])):
        for seed, score in enumerate(scores):
            d = tmp_path / "finetune" / "bert" / "SST-2" / f"lr{lr:g}_seed{seed}"
            d.mkdir(parents=True)
            (d / "result.json").write_text(json.dumps({"dev": score}))
    r = S.collect(study)["bert"]["SST-2"]
    assert r["lr"] == 3e-4 and r["scores"] == [85.0, 86.0]


# ---------------------------------------------------------------------------------------------
# the study file


def test_study_file_errors_name_the_file_and_line(tmp_path, cli_error):
    f = tmp_path / "s.yaml"
    f.write_text("systems: [spanbert]\ntasks:\n  - {task: glue, glue_task: SST-2, train: " + str(tmp_path) + "}\nseedz: 3\n")
    err = cli_error(["study", str(f)])
    assert "found unknown key 'seedz'" in err
    f.write_text("systems: [spanbertt]\ntasks:\n  - {task: glue, glue_task: SST-2, train: " + str(tmp_path) + "}\ncorpus: x\n")
    assert f"{f}:1: " in cli_error(["study", str(f)]) or "found 'spanbertt'" in cli_error(["study", str(f)])
    f.write_text("systems: [spanbert]\ncorpus: x\ntasks:\n  - {task: squad, train: /no/such.json, dev: /no/dev.json}\n")
    assert "/no/such.json: no such file or folder" in cli_error(["study", str(f)])
    assert "expected exactly one" in cli_error(["study"])
    assert "--shard: found '3/2'" in cli_error(["study", "--preset", "table7", "--shard", "3/2"])


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


def test_a_finished_cell_run_with_other_settings_is_refused(tmp_path):
    study = S.Study(systems=[S.SystemSpec("bert")], tasks=[S.TaskSpec("glue", subtask="SST-2", train=str(tmp_path))],
                    seeds=1, output_dir=str(tmp_path / "out"), corpus="c")  # fmt: skip
    cell = next(c for c in S.plan(study) if c.kind == "finetune")
    cell.dir.mkdir(parents=True)
    (cell.dir / "result.json").write_text(json.dumps({"dev": 1.0, "argv": [*cell.argv, "--output_dir", str(cell.dir)]}))
    S.check_finished(S.plan(study))  # the same settings: fine
    study.tasks[0].options = {"num_train_epochs": 5}
    with pytest.raises(Exception, match="run with other settings .*num_train_epochs"):
        S.check_finished(S.plan(study))
    study.tasks[0].options = {}
    study.seeds = 3  # more seeds only add cells
    S.check_finished(S.plan(study))


# ---------------------------------------------------------------------------------------------
# issue 22: the study YAML as the other commands read it (12), options checked before work (13)


def test_the_docs_example_values_are_read_as_a_user_means_them(tmp_path):
    """YAML 1.1 reads `1e-4` as a string; the study takes it as the number, as every other command's
    YAML does (docs/study.md's example was refused)."""
    sst = tmp_path / "SST-2"
    _sst_folder(sst)
    f = tmp_path / "s.yaml"
    f.write_text(f"corpus: {tmp_path}\npretrain_options: {{learning_rate: 5e-4}}\nbudget_tokens: 5e4\nsystems: [spanbert]\n"
                 f"tasks:\n  - {{task: glue, glue_task: SST-2, train: {sst}, learning_rates: [1e-4, 3e-4]}}\n")  # fmt: skip
    study = S.load_study(f)
    assert study.tasks[0].learning_rates == [1e-4, 3e-4] and study.budget_tokens == 50000


@pytest.mark.parametrize(
    "body, line, contains",
    [
        pytest.param("seeds: three\n", 6, "option seeds: found 'three', expected an integer", id="seeds-text"),
        pytest.param("model: [tiny]\n", 6, "option model: found a list", id="model-list"),
        pytest.param("budget_tokens: 1.5\n", 6, "option budget_tokens: found 1.5, expected an integer", id="budget-float"),
        pytest.param("", 5, "option learning_rates: found a list ['fast']", id="task-learning-rate-text"),
        pytest.param("", 6, "option folds: found a list ['zero']", id="task-folds-text"),
        pytest.param("", 7, "expected a mapping of option: value", id="system-options-list"),
    ],
)
def test_study_yaml_values_of_the_wrong_type_name_file_and_line(tmp_path, cli_error, body, line, contains):
    sst = tmp_path / "SST-2"
    _sst_folder(sst)
    tasks = f"  - {{task: glue, glue_task: SST-2, train: {sst}}}\n"
    if contains.startswith("option learning_rates"):
        tasks = f"  - task: glue\n    train: {sst}\n    learning_rates: [fast]\n    glue_task: SST-2\n"
    if contains.startswith("option folds"):
        tasks = f"  - task: glue\n    train: {sst}\n    glue_task: SST-2\n    folds: [zero]\n"
    systems = "  - spanbert\n"
    if "mapping" in contains:
        tasks = f"  - {{task: glue, glue_task: SST-2, train: {sst}}}\n  - {{task: ner, train: {sst}, dev: {sst}}}\n"
        systems = "  - spanbert\n  - {name: bert, options: [masking]}\n"
    f = tmp_path / "s.yaml"
    f.write_text(f"corpus: {tmp_path}\ntasks:\n{tasks}systems:\n{systems}{body}")
    lines = f.read_text().splitlines()
    assert 0 < line <= len(lines), lines
    cli_error(["study", f], names=f"{f}:{line}:", contains=contains, out=tmp_path)


def test_a_refused_study_leaves_study_json_as_it_was(tmp_path):
    study = S.Study(systems=[S.SystemSpec("bert")], tasks=[S.TaskSpec("glue", subtask="SST-2", train=str(tmp_path))],
                    seeds=1, output_dir=str(tmp_path / "out"), corpus="c")  # fmt: skip
    cell = next(c for c in S.plan(study) if c.kind == "finetune")
    cell.dir.mkdir(parents=True)
    (cell.dir / "result.json").write_text(json.dumps({"dev": 1.0, "argv": [*cell.argv, "--output_dir", str(cell.dir)]}))
    plan_file = tmp_path / "out" / "study.json"
    plan_file.write_text("the plan of the cells that ran\n")
    study.tasks[0].options = {"num_train_epochs": 5}
    with pytest.raises(Exception, match="run with other settings"):
        S.run_study(study, "finetune")
    assert plan_file.read_text() == "the plan of the cells that ran\n"


def _fake_run(root: Path) -> Path:
    """A pre-training run folder as `spanbert curve` checks it: final/ and one complete checkpoint."""
    (root / "final").mkdir(parents=True)
    (root / "final" / "config.json").write_text("{}")
    (root / "checkpoint-2").mkdir()
    (root / "checkpoint-2" / "state.pt").write_bytes(b"")
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


def test_study_checks_name_the_line_of_the_item_and_key(tmp_path, cli_error):
    sst = tmp_path / "SST-2"
    _sst_folder(sst)
    f = tmp_path / "s.yaml"
    f.write_text(f"corpus: {tmp_path}\nsystems:\n  - spanbert\n  - spanbertt\ntasks:\n"
                 f"  - {{task: glue, glue_task: SST-2, train: {sst}}}\n  - task: ner\n    train: {sst}\n"
                 f"    dev: {tmp_path}/nowhere.txt\n")  # fmt: skip
    cli_error(["study", f], names=f"{f}:4:", contains="found 'spanbertt'")
    f.write_text(f.read_text().replace("spanbertt", "bert"))
    cli_error(["study", f], names=f"{f}:9:", contains="nowhere.txt: no such file or folder")


# ---------------------------------------------------------------------------------------------
# issue 23.7: a dry run writes nothing; every value is checked before work; one study per folder


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


def test_a_dry_run_probes_without_writing_into_the_study(tmp_path, capsys):
    out = tmp_path / "out"
    f = _raw_study(tmp_path, out)
    assert main(["study", str(f), "--dry-run", "--probe_steps", "2"]) == 0
    text = capsys.readouterr().out
    assert "kB sample of the corpus (the start of each of its 1 file(s))" in text and "\n  pre-training spanbert: " in text, text
    assert not out.exists()  # no vocabulary trained, no corpus preprocessed, no lock, no study.json
    # a folder with finished work (a study's: its manifest lists it) stays exactly as it was
    from spanbert.folders import claim_manifest, record

    claim_manifest(out, "study", "spanbert study")
    record(out / "finetune")
    (out / "finetune").mkdir(parents=True)
    (out / "finetune" / "note.txt").write_text("x")
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    assert main(["study", str(f), "--dry-run", "--probe_steps", "0"]) == 0
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before


@pytest.mark.parametrize(
    "task, line, contains",
    [
        pytest.param("  - {task: glue, glue_task: SST-3, train: {sst}}\n", 11,
                     "found glue_task 'SST-3', expected one of: CoLA, SST-2", id="glue-task-name"),
        pytest.param("  - {task: glue, glue_task: SST-2, train: {sst}/..}\n", 11, "found no train.tsv in", id="glue-files"),
        pytest.param("  - {task: glue, glue_task: SST-2, train: {sst}, options: {num_train_epoch: 2}}\n", 11,
                     "found 'num_train_epoch', expected an option of `spanbert finetune glue` (did you mean "
                     "'num_train_epochs'?)", id="option-name"),
        pytest.param("  - task: glue\n    glue_task: SST-2\n    train: {sst}\n    options: {num_train_epochs: two}\n", 14,
                     "option num_train_epochs: found 'two', expected a number", id="option-value-dataclass"),
        pytest.param("  - task: glue\n    glue_task: SST-2\n    train: {sst}\n    options: {max_seq_length: long}\n", 14,
                     "argument --max_seq_length: invalid int value: 'long'", id="option-value-parser"),
        pytest.param("  - {task: squad, train: {sst}/train.tsv, dev: {sst}/dev.tsv, options: {doc_stride: x}}\n", 11,
                     "option doc_stride: found 'x'", id="option-value-task-config"),
        pytest.param("  - {task: glue, glue_task: SST-2, train: {sst}, options: {learning_rate: 1e-3}}\n", 11,
                     "found 'learning_rate', expected none of", id="option-the-study-sets"),
    ],
)  # fmt: skip
def test_every_value_of_the_study_is_checked_before_work(tmp_path, cli_error, task, line, contains):
    out = tmp_path / "out"
    f = _raw_study(tmp_path, out, task.replace("{sst}", str(tmp_path / "SST-2")))
    for argv in (["study", f], ["study", f, "--dry-run", "--probe_steps", "0"]):
        cli_error(argv, names=f"{f}:{line}:", contains=contains)
        assert not out.exists()


def test_two_studies_on_one_folder_do_not_both_run(tmp_path, cli_error):
    out = tmp_path / "out"
    f = _raw_study(tmp_path, out)
    with S.study_lock(out):
        err = cli_error(["study", f, "--only", "summary"], names=out, contains="already running on this folder")
        assert f"pid {os.getpid()}" in err and len(err.strip().splitlines()) == 1
        cli_error(["study", f, "--only", "finetune", "--shard", "0/2"], names=out, contains="already running")
    # shards of one study run side by side; the same shard twice, or a whole study beside one, do not
    with S.study_lock(out, (0, 2)), S.study_lock(out, (1, 2)):
        with pytest.raises(S.SpanBertError, match="shard 1/2 already running"), S.study_lock(out, (1, 2)):
            pass
        with pytest.raises(S.SpanBertError, match="already running"), S.study_lock(out):
            pass
    with S.study_lock(out):  # released on exit
        pass


def test_the_lock_of_a_killed_study_is_released(tmp_path):
    out = tmp_path / "out"
    code = f"from spanbert import study as S\nimport time\nwith S.study_lock({str(out)!r}):\n    print('held', flush=True)\n    time.sleep(60)\n"
    env = {**os.environ, "PYTHONPATH": str(Path(S.__file__).parents[2])}
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(S.SpanBertError, match=f"pid {proc.pid}"), S.study_lock(out):
            pass
    finally:
        proc.send_signal(signal.SIGKILL)  # a crash: no cleanup code runs
        proc.wait()
    with S.study_lock(out):
        pass


# ---------------------------------------------------------------------------------------------
# issue 23.10: every cell scored on data that selection did not see


def test_split_half_is_a_seeded_partition():
    select, held = S.split_half(11)
    assert sorted(select + held) == list(range(11)) and len(held) == 5 and len(select) == 6
    assert select == sorted(select) and held == sorted(held)
    assert S.split_half(11) == (select, held)  # fixed by the seed: every cell scored on the same half
    assert S.split_half(11, seed=1) != (select, held)
    assert S.split_half(2) in (([0], [1]), ([1], [0]))
    with pytest.raises(ValueError):
        S.split_half(1)


def _split(tmp_path: Path, task: S.TaskSpec) -> tuple[S.HeldOut, Path]:
    study = S.Study(systems=[S.SystemSpec("bert", checkpoint=str(tmp_path))], tasks=[task], output_dir=str(tmp_path / "out"))
    h = S.heldout_plan(study, task)
    S.split_dev(study, task)
    return h, S.heldout_dir(study, task)


def test_dev_is_split_by_record_in_each_format(tmp_path):
    # SQuAD: by article, the top-level keys kept
    squad = synthetic_squad(6, seed=2)
    (tmp_path / "dev.json").write_text(json.dumps(squad))
    h, d = _split(tmp_path, S.TaskSpec("squad", train="x", dev=str(tmp_path / "dev.json")))
    assert h.source == "dev half" and Path(h.select).parent == d
    a, b = (json.loads(Path(p).read_text()) for p in (h.select, h.heldout))
    titles = [x["title"] for x in squad["data"]]
    assert sorted(x["title"] for x in a["data"] + b["data"]) == sorted(titles) and len(b["data"]) == len(titles) // 2
    assert a["version"] == squad["version"]
    # blank-line blocks with CRLF and no blank line at the end (SemEval's files)
    recs = [f'{i}\t"s {i}"\r\nOther\r\nComment:\r\n' for i in range(5)]
    (tmp_path / "sem.txt").write_bytes("\r\n".join(recs).encode())
    h, _ = _split(tmp_path, S.TaskSpec("semeval", train="x", dev=str(tmp_path / "sem.txt")))
    got = [Path(p).read_bytes().decode().split("\r\n\r\n") for p in (h.select, h.heldout)]
    blocks = sorted(b.strip() for part in got for b in part if b.strip())
    assert blocks == sorted(r.strip() for r in recs) and len([b for b in got[1] if b.strip()]) == 2
    # CoNLL-2012 documents
    docs = "".join(f"#begin document (d{i}); part 000\nd{i} 0 0 w{i} _ _ _ _ _ _ -\n\n#end document\n" for i in range(4))
    (tmp_path / "dev.conll").write_text(docs)
    h, _ = _split(tmp_path, S.TaskSpec("coref", name="c", train="x", dev=str(tmp_path / "dev.conll")))
    from spanbert.tasks.coref import read_conll

    names = sorted(doc.key for p in (h.select, h.heldout) for doc in read_conll(p))
    assert names == sorted(doc.key for doc in read_conll(tmp_path / "dev.conll")) and len(read_conll(h.heldout)) == 2
    # GLUE: a folder per half, the training file linked, the header kept
    sst = _sst_folder(tmp_path / "SST-2", n=10)
    h, _ = _split(tmp_path, S.TaskSpec("glue", subtask="SST-2", train=str(sst)))
    rows = [Path(p, "dev.tsv").read_text().splitlines() for p in (h.select, h.heldout)]
    assert all(r[0] == "sentence\tlabel" for r in rows) and len(rows[0]) == 6 and len(rows[1]) == 6
    assert sorted(rows[0][1:] + rows[1][1:]) == sorted((sst / "dev.tsv").read_text().splitlines()[1:])
    assert Path(h.select, "train.tsv").read_text() == (sst / "train.tsv").read_text()
    # a test file, when the study names one, is the held-out data: dev is not split
    assert S.heldout_plan(S.Study([], [], output_dir=str(tmp_path)), S.TaskSpec("ner", train="a", dev="b", test="c")) == \
        S.HeldOut("test", "b", "c")  # fmt: skip


def test_a_task_on_litbanks_folds_splits_no_dev_set(tmp_path):
    """Its cells are scored on their fold's test file: there is no dev file to halve."""
    study = S.Study(systems=[S.SystemSpec("bert", checkpoint=str(tmp_path))], seeds=1, output_dir=str(tmp_path / "out"),
                    tasks=[S.TaskSpec("coref", name="LitBank", train=str(tmp_path), folds=[0])])  # fmt: skip
    S.split_dev(study, study.tasks[0])
    assert not (tmp_path / "out").exists()


def test_a_dev_set_of_one_record_cannot_be_split(tmp_path):
    (tmp_path / "dev.json").write_text(json.dumps([{"id": "1"}]))
    with pytest.raises(S.SpanBertError, match="found 1 record.*expected at least 2"):
        _split(tmp_path, S.TaskSpec("tacred", train="x", dev=str(tmp_path / "dev.json")))


def test_a_tiny_study_scores_every_cell_on_the_held_out_half(tmp_path, capsys):
    import torch

    from spanbert.config import model_config
    from spanbert.model import SpanBertForPreTraining
    from spanbert.tokenization import train_tokenizer

    texts = [s for s, _ in synthetic_sst(64)] + [p["context"] for a in synthetic_squad(8)["data"] for p in a["paragraphs"]]
    tok = train_tokenizer(None, vocab_size=300, output_dir=tmp_path / "tok", texts=texts, show_progress=False)
    torch.manual_seed(0)
    SpanBertForPreTraining(model_config("tiny", vocab_size=tok.vocab_size), sbo=True, nsp=False).save_pretrained(
        tmp_path / "model", tokenizer=tok)
    sst = _sst_folder(tmp_path / "SST-2", n=40)
    (tmp_path / "train.json").write_text(json.dumps(synthetic_squad(4, seed=1)))
    (tmp_path / "dev.json").write_text(json.dumps(synthetic_squad(4, seed=2)))
    out = tmp_path / "out"
    f = tmp_path / "s.yaml"
    opts = "{num_train_epochs: 1, per_device_train_batch_size: 16}"
    f.write_text(f"systems:\n  - {{name: mine, checkpoint: {tmp_path / 'model'}}}\nseeds: 2\noutput_dir: {out}\ntasks:\n"
                 f"  - {{task: glue, glue_task: SST-2, train: {sst}, learning_rates: [1e-3], options: {opts}}}\n"
                 f"  - {{task: squad, train: {tmp_path}/train.json, dev: {tmp_path}/dev.json, learning_rates: [1e-3], "
                 f"options: {{num_train_epochs: 1, max_seq_length: 64}}}}\n")  # fmt: skip
    assert main(["study", str(f)]) == 0
    for task, metric in (("SST-2", "score"), ("squad", "f1")):
        for seed in (0, 1):
            cell = out / "finetune" / "mine" / task / f"lr0.001_seed{seed}"
            info = json.loads((cell / "result.json").read_text())
            assert info["heldout_source"] == "dev half" and 0 <= info["heldout"] <= 100
            assert info["heldout"] == info["heldout_results"][metric]
            # the cell selected on the selection half only
            sel = S.heldout_dir(S.load_study(f), next(t for t in S.load_study(f).tasks if t.name == task)) / (
                "select" if task == "SST-2" else "select.json")
            assert str(sel) in info["argv"]
    table = (out / "summary" / "table.md").read_text()
    assert "(dev " in table and "held-out = dev half" in table, table
    # a folder whose cells finished before held-out scoring stays readable: said in the table
    for marker in out.glob("finetune/*/*/*/result.json"):
        info = json.loads(marker.read_text())
        for k in ("heldout", "heldout_source", "heldout_data", "heldout_results"):
            info.pop(k)
        marker.write_text(json.dumps(info))
    heldout._LEGACY.clear()
    assert main(["study", str(f), "--only", "summary"]) == 0
    table = (out / "summary" / "table.md").read_text()
    assert "none: cells finished before held-out scoring" in table and "| mine | – (dev " in table, table


def test_a_dev_restriction_is_applied_before_the_split(tmp_path):
    """The tiny preset's `validation_articles: ":4"`: both halves come from those 4 articles, and the
    cells are not restricted a second time."""
    squad = synthetic_squad(10, seed=2)
    (tmp_path / "dev.json").write_text(json.dumps(squad))
    task = S.TaskSpec("squad", train="x", dev=str(tmp_path / "dev.json"), options={"validation_articles": ":4", "num_train_epochs": 1})
    h, _ = _split(tmp_path, task)
    a, b = (json.loads(Path(p).read_text())["data"] for p in (h.select, h.heldout))
    assert sorted(x["title"] for x in a + b) == sorted(x["title"] for x in squad["data"][:4]) and len(b) == 2
    study = S.Study(systems=[S.SystemSpec("bert", checkpoint=str(tmp_path))], tasks=[task], seeds=1, output_dir=str(tmp_path / "out"))
    argv = next(c for c in S.plan(study) if c.kind == "finetune").argv
    assert "--validation_articles" not in argv and "--num_train_epochs" in argv and h.select in argv
