"""The measurements behind a study's dry run (`spanbert.study.trials`): a trial trains a share of a cell and a few
steps at least, a gzip file's size is read from its trailer, and a dry run trials in a folder of its own, leaving
the study's folder as it was."""

from __future__ import annotations

import dataclasses
import gzip
from pathlib import Path

import pytest
from test_study import _raw_study

from spanbert import study as S
from spanbert.cli import main
from spanbert.pretrain import PretrainResult
from spanbert.study.trials import step_seconds, trial_size, uncompressed_size


def test_a_trial_trains_a_share_of_a_cell_and_a_few_steps_at_least():
    assert trial_size(S.StudyTask("coref", options={"max_steps": 300}), "steps", 300) == 38
    batch = S.StudyTask("squad", options={"max_train_examples": 2000, "per_device_train_batch_size": 32})
    assert trial_size(batch, "examples", 2000) == 250
    assert trial_size(batch, "examples", 400) == 128  # 4 steps of 32
    assert trial_size(batch, "examples", 64) == 64  # never more than the cell


def test_a_trials_step_time_is_the_mean_after_the_first_so_a_cell_of_skewed_steps_sums_right():
    # made-up steps skewed slow, as on 2 cores (a run of slow steps, the rest fast): the median reads the
    # fast ones, the mean what the steps add up to
    durations = [9.0, 1.0, 1.0, 1.0, 1.0, 1.6, 1.6, 1.0, 1.0, 1.0, 1.0, 1.6, 1.6]
    assert step_seconds(durations) == pytest.approx(sum(durations[1:]) / 12)  # 1.2 s: the start-up left out
    cell = 448 * step_seconds(durations)
    assert cell == pytest.approx(448 * 1.2) and 448 * 1.0 < 0.85 * cell  # the median (1.0) would read 17% low
    assert step_seconds([2.5]) == 2.5 and step_seconds([]) == 0.0


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


def test_pre_training_trials_take_the_systems_in_turn_and_keep_the_median_round(tmp_path, monkeypatch):
    # made-up trials: each run "logs" its steps at a time that depends on the round (the load moved)
    import json as _json

    from spanbert.study import trials as T

    study = S.Study(corpus="c", systems=[S.SystemSpec("spanbert"), S.SystemSpec("bert-1seq")], tasks=[],
                    budget_tokens=1000 * 64 * 128, batch_size=64, max_seq_length=128, output_dir=str(tmp_path / "s"))  # fmt: skip
    order, per_round = [], {"spanbert": [2.0, 3.0, 2.2], "bert-1seq": [1.0, 1.5, 1.1]}

    def fake_run(options, log):
        out = options["output_dir"]
        system = next(s for s in per_round if f"/{s}" in out)
        r = sum(1 for s in order if s == system)
        order.append(system)
        Path(out).mkdir(parents=True)
        step_s = per_round[system][r]
        rows = [{"train/tokens_per_step": 100.0, "train/tokens_per_s": 100.0 / (9.0 if i == 0 else step_s)} for i in range(3)]
        (Path(out) / "log.jsonl").write_text("".join(_json.dumps(x) + "\n" for x in rows))
        return PretrainResult(Path(out) / "final", Path(out), {}, held_out_blocks=12)

    monkeypatch.setattr(T, "run_pretrain", fake_run)
    monkeypatch.setattr(T, "trial_threads", lambda: (2, 2))  # the count idle cores give: nothing projected
    tmp_study = dataclasses.replace(study, output_dir=str(tmp_path / "t"))
    timings = T.trial_pretraining(study, tmp_study, "corpus", 2, tmp_path, rounds=3)
    assert order == ["spanbert", "bert-1seq"] * 3  # each round beside the same load for both
    spanbert, bert = timings
    assert spanbert.round_step_s == [2.0, 3.0, 2.2] and spanbert.step_s == 2.2 and spanbert.step_range == (2.0, 3.0)
    assert bert.step_s == 1.1 and len(bert.others) == 3
