"""A running study's time left, from its dry run's estimate corrected by what the finished cells took.

A dry run times this machine for a few minutes; the study then runs for hours, and the machine's speed
moves (the cpu preset's spanbert cell: 0.97 s a step in its dry run, 1.10 s in the real cell half an
hour later on the same idle VM; v3's first whole run 1.41 times its dry run's middle figure). So the
study, once it holds an estimate (`--estimate FILE`, kept as OUT/estimate.json), says after every cell
how the cells run so far compare with their estimate and what is left at that pace: the estimate's
error is then measured on this run, not assumed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spanbert.cost import human_duration
from spanbert.study.layout import ESTIMATE_FILE, Cell


def stage_of(cell: Cell) -> str:
    """The dry run's stage a cell belongs to (its line in the estimate and in `summary/stages.md`)."""
    return f"pre-training {cell.system}" if cell.kind == "pretrain" else f"fine-tuning {cell.task}"


@dataclass
class Pace:
    """The estimate's seconds per cell of each stage, and the cells run in this process against them."""

    per_cell: dict[str, float]
    """Estimated seconds of one cell, by stage (a stage's estimate over its cells)."""
    estimated: float = 0.0
    """The estimate of the cells run so far in this process."""
    measured: float = 0.0
    """Their wall time."""
    left: dict[str, int] = field(default_factory=dict)
    """Cells still to run, by stage."""

    def done(self, stage: str, seconds: float) -> None:
        """One cell of ``stage`` finished in ``seconds``."""
        if stage in self.per_cell:
            self.estimated += self.per_cell[stage]
            self.measured += seconds
        if self.left.get(stage, 0) > 0:
            self.left[stage] -= 1

    @property
    def ratio(self) -> float | None:
        """Measured over estimated for the cells run so far (None before one that the estimate times)."""
        return self.measured / self.estimated if self.estimated > 0 else None

    def line(self) -> str:
        """``pace: the N min of cells run took 1.12x their estimate; about 1 h 40 min left at that pace
        (the estimate says 1 h 30 min)``, or "" before a timed cell has finished."""
        ratio = self.ratio
        if ratio is None:
            return ""
        left = sum(self.per_cell.get(s, 0.0) * n for s, n in self.left.items())
        if left <= 0:
            return f"pace: the cells run took {ratio:.2f}x their estimate"
        return (f"pace: the {human_duration(self.measured)} of cells run took {ratio:.2f}x their estimate; "
                f"about {human_duration(left * ratio)} left at that pace (the estimate says {human_duration(left)})")


def pace_of(output_dir: str | Path, todo: list[Cell]) -> Pace | None:
    """The `Pace` of a study about to run the cells ``todo`` (those not finished), from the estimate it keeps
    (OUT/estimate.json); None when it keeps none or the file holds no stages."""
    try:
        estimate: Any = json.loads((Path(output_dir) / ESTIMATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    stages = estimate.get("stages") if isinstance(estimate, dict) else None
    if not isinstance(stages, dict):
        return None
    counts: dict[str, int] = {}
    for details in estimate.get("details") or []:  # the cells each stage's estimate is for
        if isinstance(details, dict) and details.get("cells"):
            counts[str(details.get("stage"))] = int(details["cells"])
    per_cell = {}
    for stage, seconds in stages.items():
        if stage == "data" or not isinstance(seconds, (int, float)):
            continue
        per_cell[stage] = float(seconds) / max(1, counts.get(stage, 1))
    left: dict[str, int] = {}
    for cell in todo:
        left[stage_of(cell)] = left.get(stage_of(cell), 0) + 1
    return Pace(per_cell, left=left)
