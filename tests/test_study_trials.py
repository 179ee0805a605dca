"""The measurements behind a study's dry run (`spanbert.study.trials`): a trial trains a share of a cell and a few
steps at least, a gzip file's size is read from its trailer, and a dry run trials in a folder of its own, leaving
the study's folder as it was."""

from __future__ import annotations

import gzip

from test_study import _raw_study

from spanbert import study as S
from spanbert.cli import main
from spanbert.study.trials import trial_size, uncompressed_size


def test_a_trial_trains_a_share_of_a_cell_and_a_few_steps_at_least():
    assert trial_size(S.TaskSpec("coref", options={"max_steps": 300}), "steps", 300) == 38
    batch = S.TaskSpec("squad", options={"max_train_examples": 2000, "per_device_train_batch_size": 32})
    assert trial_size(batch, "examples", 2000) == 250
    assert trial_size(batch, "examples", 400) == 128  # 4 steps of 32
    assert trial_size(batch, "examples", 64) == 64  # never more than the cell


def test_the_uncompressed_size_of_a_gzip_file_is_its_trailers(tmp_path):
    text = "".join(f"line {i} of a corpus\n" for i in range(5000)).encode()
    with gzip.open(tmp_path / "a.txt.gz", "wb") as f:
        f.write(text)
    (tmp_path / "b.txt").write_bytes(text)
    assert uncompressed_size(tmp_path / "a.txt.gz") == len(text) == uncompressed_size(tmp_path / "b.txt")


def test_a_dry_run_trials_without_writing_into_the_study(tmp_path, capsys):
    out = tmp_path / "out"
    f = _raw_study(tmp_path, out)
    assert main(["study", str(f), "--dry-run", "--trial_steps", "2"]) == 0
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
    assert main(["study", str(f), "--dry-run", "--trial_steps", "0"]) == 0
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before
