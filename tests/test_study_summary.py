"""The summary of a study (`spanbert.study.summary`): the learning rate with the best mean dev score is selected,
the table has a row per system with the held-out score (the best in bold) beside the dev score that selected it,
the stage table sets measured times beside the dry run's estimate, and each task's chart draws the held-out
score beside the dev score."""

from __future__ import annotations

import json

import pytest

from spanbert import study as S
from spanbert.study.layout import ESTIMATE_FILE, finetune_cell_dir
from spanbert.study.summary import _plots, stage_table


def test_table_has_a_row_per_system_and_the_best_in_bold(tmp_path):
    study = S.Study(
        systems=[S.SystemSpec("bert"), S.SystemSpec("spanbert")],
        tasks=[S.StudyTask("glue", name="SST-2"), S.StudyTask("squad")],
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
    study = S.Study(systems=[S.SystemSpec("bert")], tasks=[S.StudyTask("glue", name="SST-2", learning_rates=[1e-4, 3e-4])],
                    seeds=2, output_dir=str(tmp_path))  # fmt: skip
    for lr, scores in ((1e-4, [70.0, 90.0]), (3e-4, [85.0, 86.0])):
        for seed, score in enumerate(scores):
            d = tmp_path / "finetune" / "bert" / "SST-2" / f"lr{lr:g}_seed{seed}"
            d.mkdir(parents=True)
            (d / "result.json").write_text(json.dumps({"dev": score}))
    r = S.collect(study)["bert"]["SST-2"]
    assert r["lr"] == 3e-4 and r["scores"] == [85.0, 86.0]


def test_the_summary_sets_measured_stage_times_beside_the_estimate(tmp_path):
    study = S.Study(systems=[S.SystemSpec("spanbert"), S.SystemSpec("random-init", system="spanbert",
                    options={"random_init": True})], tasks=[S.StudyTask("squad", train="t", dev="d")], seeds=2,
                    corpus="c", output_dir=str(tmp_path))  # fmt: skip
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "prepared.json").write_text(json.dumps({"seconds": {"tokenizer": 60.0, "preprocess": 90.0}}))
    for name, seconds in (("spanbert", 3000.0), ("random-init", 2.0)):
        (tmp_path / "pretrain" / name).mkdir(parents=True)
        (tmp_path / "pretrain" / name / "cell.json").write_text(json.dumps({"seconds": seconds}))
    for system in ("spanbert", "random-init"):
        for seed in (0, 1):
            d = finetune_cell_dir(study, system, "squad", 3e-5, seed)
            d.mkdir(parents=True)
            (d / "result.json").write_text(json.dumps({"seconds": 100.0, "heldout_seconds": 20.0}))
    md, rows = stage_table(study)
    assert "No estimate kept" in md
    assert "| data | – | 2 min | – | 1/1 |" in md and "| fine-tuning squad | – | 8 min (2 min a cell) | – | 4/4 |" in md, md
    assert rows[1] == ["data", "", "150.0", "", "", "1", "1"]
    assert rows[2][:3] == ["pre-training spanbert", "", "3000.0"] and rows[3][:3] == ["pre-training random-init", "", "2.0"]
    assert rows[4] == ["fine-tuning squad", "", "480.0", "", "120.0", "4", "4"]
    assert rows[5][:3] == ["total", "", f"{150 + 3002 + 480:.1f}"]
    (tmp_path / ESTIMATE_FILE).write_text(json.dumps({
        "stages": {"data": 100.0, "pre-training spanbert": 2400.0, "pre-training random-init": 1.0,
                   "fine-tuning squad": 400.0}, "total": 2901.0, "per_cell": {"fine-tuning squad": 100.0}}))  # fmt: skip
    md, rows = stage_table(study)
    assert "| pre-training spanbert | 40 min | 50 min | 1.25 | 1/1 |" in md, md
    assert "| data | 2 min | 2 min | 1.50 | 1/1 |" in md and rows[1][:3] == ["data", "100.0", "150.0"]
    assert rows[4][:5] == ["fine-tuning squad", "400.0", "480.0", "100.0", "120.0"]
    assert rows[5][:3] == ["total", "2901.0", "3632.0"]


def test_the_task_plots_show_the_held_out_score_beside_the_dev_score_that_selected(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib", reason="the plots need matplotlib (pip install 'spanbert[plot]')")
    from matplotlib.axes import Axes

    drawn: list[tuple[str, list[float]]] = []
    bar = Axes.bar

    def recording_bar(self, x, height, *args, **kwargs):
        drawn.append((kwargs.get("label"), [round(h, 3) for h in height]))
        return bar(self, x, height, *args, **kwargs)

    monkeypatch.setattr(Axes, "bar", recording_bar)
    study = S.Study(systems=[S.SystemSpec("bert"), S.SystemSpec("spanbert")], tasks=[S.StudyTask("glue", name="SST-2")],
                    seeds=2, output_dir=str(tmp_path))  # fmt: skip
    results = {
        "bert": {"SST-2": {"lr": 1e-4, "scores": [80.0, 82.0], "heldout": [78.0, 80.0]}},
        "spanbert": {"SST-2": {"lr": 1e-4, "scores": [79.0, 79.0], "heldout": [77.0, 77.0]}},
    }
    _plots(study, results, tmp_path)
    assert (tmp_path / "task_SST-2.png").stat().st_size > 0
    assert drawn == [("held-out", [79.0, 77.0]), ("dev (selection)", [81.0, 79.0])]
    # cells finished before held-out scoring: the dev score alone
    drawn.clear()
    results["spanbert"]["SST-2"]["heldout"] = None
    _plots(study, results, tmp_path)
    assert drawn == [("dev", [81.0, 79.0])]
