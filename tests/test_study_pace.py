"""The running study's time left: the kept estimate, corrected by the cells run so far (made-up timings)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spanbert.study.layout import ESTIMATE_FILE, Cell
from spanbert.study.pace import Pace, pace_of, stage_of


def _cell(kind: str, system: str = "spanbert", task: str = "") -> Cell:
    return Cell(kind=kind, system=system, dir=Path("x"), argv=[], task=task)


def _estimate(tmp_path: Path) -> Path:
    est = {"stages": {"data": 120.0, "pre-training spanbert": 1200.0, "fine-tuning NER": 600.0}, "total": 1920.0,
           "details": [{"stage": "data", "cells": 1}, {"stage": "pre-training spanbert", "cells": 3},
                       {"stage": "fine-tuning NER", "cells": 6}]}  # fmt: skip
    (tmp_path / ESTIMATE_FILE).write_text(json.dumps(est))
    return tmp_path


def test_a_cell_belongs_to_its_stage_line():
    assert stage_of(_cell("pretrain", "bert-1seq")) == "pre-training bert-1seq"
    assert stage_of(_cell("finetune", task="NER")) == "fine-tuning NER"


def test_the_time_left_is_the_estimate_of_the_cells_left_at_the_pace_measured(tmp_path):
    todo = [_cell("pretrain")] * 3 + [_cell("finetune", task="NER")] * 6
    pace = pace_of(_estimate(tmp_path), todo)
    assert pace.per_cell == {"pre-training spanbert": 400.0, "fine-tuning NER": 100.0}  # the data stage is no cell
    assert pace.line() == ""  # nothing measured yet
    pace.done("pre-training spanbert", 480.0)  # the first cell ran 1.2x its estimate
    assert pace.ratio == pytest.approx(1.2)
    # left: 2 x 400 + 6 x 100 = 1400 s estimated, 1680 s at 1.2x
    assert pace.line() == ("pace: the 8 min of cells run took 1.20x their estimate; about 28 min left at that pace "
                           "(the estimate says 23 min)")  # fmt: skip
    pace.done("pre-training spanbert", 400.0)
    pace.done("pre-training spanbert", 320.0)
    assert pace.ratio == pytest.approx(1.0)
    for _ in range(6):
        pace.done("fine-tuning NER", 150.0)
    assert pace.ratio == pytest.approx((1200 + 900) / 1800)
    assert pace.line() == "pace: the cells run took 1.17x their estimate"  # nothing left


def test_a_resumed_study_paces_only_the_cells_it_runs_and_no_estimate_means_no_pace(tmp_path):
    pace = pace_of(_estimate(tmp_path), [_cell("finetune", task="NER")] * 2)  # the rest finished before
    assert pace.left == {"fine-tuning NER": 2}
    pace.done("fine-tuning NER", 50.0)
    assert pace.line().endswith("about 50 s left at that pace (the estimate says 2 min)")
    assert pace_of(tmp_path / "none", []) is None
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / ESTIMATE_FILE).write_text("{not json")
    assert pace_of(tmp_path / "bad", []) is None


def test_a_stage_the_estimate_does_not_time_counts_no_pace():
    pace = Pace({"pre-training spanbert": 100.0}, left={"fine-tuning X": 1})
    pace.done("fine-tuning X", 30.0)
    assert pace.ratio is None and pace.line() == ""
