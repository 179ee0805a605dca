"""What a study's folder holds and where: a cell (one `spanbert pretrain` or `finetune` run) and its
folder, the shared corpus, the models, a task's folds, the held-out halves, and the names a study
writes at the top of its output_dir (the output contract's "an earlier output of this command").

    OUT/shared/tokenizer, OUT/shared/corpus        one vocabulary and one preprocessed corpus for all
    OUT/pretrain/<system>/                         `spanbert pretrain` with an equal budget of tokens
    OUT/finetune/<system>/<task>/lr<lr>_seed<s>/   `spanbert finetune <task>` (best dev checkpoint)
    OUT/shared/<folds>/fold<k>/, OUT/shared/heldout/<task>/   a fold's files, the dev halves
    OUT/summary/                                   table.md, table.csv, comparisons.md/.csv, *.png
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spanbert import folders
from spanbert.study.spec import Study, SystemSpec, TaskSpec
from spanbert.tasks import TASKS


@dataclass
class Cell:
    kind: str  # "pretrain" or "finetune"
    system: str
    dir: Path
    argv: list[str]
    task: str = ""
    lr: float = 0.0
    seed: int = 0
    fold: int | None = None
    options: dict[str, Any] = field(default_factory=dict)
    """A fine-tuning cell's options for `spanbert.tasks.finetune` (``argv`` is their command line: the
    cell's identity, kept in its marker)."""

    @property
    def label(self) -> str:
        if self.kind == "pretrain":
            return f"pretrain {self.system}"
        fold = "" if self.fold is None else f" / fold {self.fold}"
        return f"finetune {self.system} / {self.task} / lr {self.lr:g} / seed {self.seed}{fold}"


def shared_dir(study: Study) -> Path:
    return Path(study.output_dir) / "shared"


def model_dir(study: Study, system: SystemSpec) -> Path:
    if system.checkpoint:
        return Path(system.checkpoint)
    return Path(study.output_dir) / "pretrain" / system.name / "final"


def _lr_name(lr: float) -> str:
    return f"lr{lr:g}"


def finetune_cell_dir(study: Study, system: str, task: str, lr: float, seed: int, fold: int | None = None) -> Path:
    suffix = "" if fold is None else f"_fold{fold}"
    return Path(study.output_dir) / "finetune" / system / task / f"{_lr_name(lr)}_seed{seed}{suffix}"


def fold_dir(study: Study, t: TaskSpec, fold: int) -> Path:
    """Where fold ``fold`` of ``t``'s data is written (its train, dev and test files): shared by every
    system, learning rate and seed, and by every task of the study on the same folds."""
    folds = TASKS[t.task].folds
    if folds is None:
        raise ValueError(f"task {t.task} has no folds")
    return shared_dir(study) / folds.name / f"fold{fold}"


def heldout_dir(study: Study, t: TaskSpec) -> Path:
    return shared_dir(study) / "heldout" / t.name


ESTIMATE_FILE = "estimate.json"
"""A dry run's estimate of every stage, kept in the study's folder when the real run is given it (``--estimate``)."""

STUDY_NAMES = frozenset({".lock", "study.json", "shared", "pretrain", "finetune", "summary", "models", "curve.md",
                         "curve.csv", "curve.png", ESTIMATE_FILE})  # fmt: skip
"""What a study (or a curve) writes at the top of its output_dir: the lock, the plan, the shared corpus,
the cells, the summary, a dry run's estimate; a curve's exported checkpoints and its table and plot. Each
is listed in the folder's manifest (`spanbert.folders`) as it is written."""


def holds_a_study(folder: Path) -> bool:
    """Whether ``folder`` is an earlier study's or curve's output_dir: its manifest (`spanbert.folders`) says
    so; nothing else counts (the output contract's "an earlier output of this command", `check_output`).
    Such a folder is resumed; a folder without one holding anything is refused, before any work."""
    manifest = folders.read_manifest(folder)
    return manifest is not None and manifest["kind"] == "study"
