"""What a study's folder holds and where: a cell (one `spanbert pretrain` or `finetune` run) and its
folder, the shared corpus, the models, a task's folds, the held-out halves, and the names a study
writes at the top of its output_dir (the output contract's "an earlier output of this command").

    OUT/shared/tokenizer, OUT/shared/corpus        one vocabulary and one preprocessed corpus for all
    OUT/pretrain/<system>/                         `spanbert pretrain` with an equal budget of tokens
    OUT/finetune/<system>/<task>/lr<lr>_seed<s>/   `spanbert finetune <task>` (best dev checkpoint)
    with several pre-training seeds (`Study.pretrain_seeds`): OUT/pretrain/<system>/seed<k>/ and
    OUT/finetune/<system>/pretrain-seed<k>/<task>/lr<lr>_seed<s>/ (a checkpoint row: pretrain-seed0)
    OUT/shared/<folds>/fold<k>/, OUT/shared/heldout/<task>/   a fold's files, the dev halves
    OUT/summary/                                   table.md, table.csv, comparisons.md/.csv, *.png
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spanbert import folders
from spanbert.study.spec import Study, StudyTask, SystemSpec
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
    """The cell's options for `spanbert.pretrain` or `spanbert.tasks.finetune` (``argv`` is their command
    line: the cell's identity, kept in its marker)."""
    pretrain_seed: int | None = None
    """The pre-training seed of the checkpoint (None: the study has one pre-training run per system)."""
    pending: bool = False
    """A fine-tuning cell whose learning rate is not chosen yet: the rate the grid on the first pre-training
    seed selects (`Study.grid_on_first_seed`); it has no folder and no command until then."""

    @property
    def label(self) -> str:
        ps = "" if self.pretrain_seed is None else f" / pre-training seed {self.pretrain_seed}"
        if self.kind == "pretrain":
            return f"pretrain {self.system}{ps}"
        fold = "" if self.fold is None else f" / fold {self.fold}"
        lr = "the selected lr" if self.pending else f"lr {self.lr:g}"
        return f"finetune {self.system}{ps} / {self.task} / {lr} / seed {self.seed}{fold}"


def shared_dir(study: Study) -> Path:
    return Path(study.output_dir) / "shared"


def replicates(study: Study, system: SystemSpec) -> int:
    """How many checkpoints a row has: one per pre-training seed, one for a checkpoint row."""
    return 1 if system.checkpoint else study.pretrain_seeds


def pretrain_seeds_of(study: Study, system: SystemSpec) -> list[int | None]:
    """The pre-training seeds of a row's checkpoints; [None] when the study has one run per system (its
    folders and commands as before pre-training seeds existed)."""
    return [None] if study.pretrain_seeds == 1 else list(range(replicates(study, system)))


def pretrain_dir(study: Study, system: SystemSpec, pretrain_seed: int | None = None) -> Path:
    d = Path(study.output_dir) / "pretrain" / system.name
    return d if pretrain_seed is None else d / f"seed{pretrain_seed}"


def model_dir(study: Study, system: SystemSpec, pretrain_seed: int | None = None) -> Path:
    if system.checkpoint:
        return Path(system.checkpoint)
    return pretrain_dir(study, system, pretrain_seed) / "final"


def _lr_name(lr: float) -> str:
    return f"lr{lr:g}"


def finetune_cell_dir(study: Study, system: str, task: str, lr: float, seed: int, fold: int | None = None,
                      pretrain_seed: int | None = None) -> Path:  # fmt: skip
    suffix = "" if fold is None else f"_fold{fold}"
    base = Path(study.output_dir) / "finetune" / system
    base = base if pretrain_seed is None else base / f"pretrain-seed{pretrain_seed}"
    return base / task / f"{_lr_name(lr)}_seed{seed}{suffix}"


def fold_dir(study: Study, t: StudyTask, fold: int) -> Path:
    """Where fold ``fold`` of ``t``'s data is written (its train, dev and test files): shared by every
    system, learning rate and seed, and by every task of the study on the same folds."""
    folds = TASKS[t.task].folds
    if folds is None:
        raise ValueError(f"task {t.task} has no folds")
    return shared_dir(study) / folds.name / f"fold{fold}"


def features_dir(study: Study) -> Path:
    """Where the cells of a task with a features cache (`spanbert.tasks.spec.TaskSpec.cache_option`) keep it:
    one cache for the study, each encoder's features computed once and read by every rate, seed and row."""
    return shared_dir(study) / "features"


def heldout_dir(study: Study, t: StudyTask) -> Path:
    return shared_dir(study) / "heldout" / t.name


HELDOUT_STATS = "heldout_stats.json"
"""A fine-tuning cell's per-example statistics on its held-out data (`spanbert.metrics.resample`), for the
test-sampling term of the comparisons; written when the task can (`spanbert.tasks.spec.TaskSpec.example_stats`)."""

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
