"""The cells of a study (`spanbert.study.cells`): a finished cell run with other settings is refused and the
study's plan left as it was, and one study (or one shard) at a time holds a folder, the lock of a killed study
released."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_study import _raw_study

from spanbert import study as S


def test_a_finished_cell_run_with_other_settings_is_refused(tmp_path):
    study = S.Study(systems=[S.SystemSpec("bert")], tasks=[S.StudyTask("glue", subtask="SST-2", train=str(tmp_path))],
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


def test_a_refused_study_leaves_study_json_as_it_was(tmp_path):
    study = S.Study(systems=[S.SystemSpec("bert")], tasks=[S.StudyTask("glue", subtask="SST-2", train=str(tmp_path))],
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


def test_a_resumed_pretraining_cell_counts_the_time_before_its_checkpoint(tmp_path, monkeypatch):
    """A pre-training cell killed and resumed reports the stage's whole time (what its checkpoint recorded, then
    the resumed run), so the summary's measured column compares with the dry run's estimate."""
    from spanbert.study import cells

    study = S.Study(systems=[S.SystemSpec("bert")], tasks=[S.StudyTask("glue", subtask="SST-2", train=str(tmp_path))],
                    seeds=1, output_dir=str(tmp_path / "out"), corpus="c")  # fmt: skip
    cell = next(c for c in S.plan(study) if c.kind == "pretrain")
    ckpt = cell.dir / "checkpoint-5"
    ckpt.mkdir(parents=True)
    torch.save({}, ckpt / "state.pt")  # a whole torch file: a 0-byte one is no complete checkpoint
    (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": 5, "train_seconds": 500.0}))
    (cell.dir / "latest").write_text("checkpoint-5\n")
    ran = []
    monkeypatch.setattr(cells, "pretrain_from_keywords", lambda **options: ran.append(options))
    cells.run_cell(cell, study)
    assert ran[0]["resume"] is True and ran[0]["output_dir"] == str(cell.dir)
    info = json.loads((cell.dir / "cell.json").read_text())
    assert info["seconds_before_resume"] == 500.0 and 500.0 <= info["seconds"] < 560.0
