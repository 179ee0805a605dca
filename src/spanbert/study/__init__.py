"""`spanbert study`: the paper's comparisons (Tables 1, 6, 7) rerun on any corpus, budget and tasks;
`spanbert curve`: fine-tuning score against pre-training step.

A study is a grid of cells, each its own folder with its own log (`layout`); a killed study started
again skips finished cells and resumes the interrupted one (`cells`). Model selection follows the
paper: for each system and task the learning rate with the best mean dev score over seeds is chosen,
and the table reports mean ± standard deviation over the seeds at that rate (`summary`, `stats`).
Those dev scores were used for selection twice, so every cell is also scored on data that selection
did not see: the task's test split where the study names one, else the held-out half of dev
(`heldout`).

The modules, each using only those above it in this list:

    spec       the YAML schema (Study, SystemSpec, TaskSpec), its checks, the paper's presets
    layout     a cell and the folders of a study
    runner     one `spanbert` command run in this process; what it printed and wrote
    heldout    the held-out half of dev (or the test split) and scoring a cell on it
    cells      planning and running cells: resume, locks, shards
    stats      mean ± std, paired t and bootstrap intervals
    summary    model selection, tables, comparisons, plots
    estimate   the cost of a study before it runs (--dry-run)
    command    `main` (spanbert study) and `curve_main` (spanbert curve)

Every name below was importable from the single-file `spanbert.study` and still is.
"""

from __future__ import annotations

from spanbert.errors import SpanBertError  # tests expect `S.SpanBertError`, as the single file exposed it
from spanbert.study.cells import (
    check_finished,
    is_done,
    plan,
    read_dev_score,
    run_cell,
    run_study,
    study_lock,
)
from spanbert.study.command import curve_main, export_checkpoints, main, run_checkpoints
from spanbert.study.estimate import ASSUMED_EPOCHS, CHARS_PER_TOKEN, PROBE_SAMPLE_CHARS, dry_run, finetune_estimate
from spanbert.study.heldout import (
    HELDOUT_SEED,
    HeldOut,
    heldout_plan,
    legacy_folder,
    score_heldout,
    split_dev,
    split_half,
    study_is_legacy,
)
from spanbert.study.layout import (
    STUDY_NAMES,
    Cell,
    heldout_dir,
    holds_a_study,
    litbank_fold_dir,
    model_dir,
    shared_dir,
)
from spanbert.study.spec import (
    PRESET_SYSTEMS,
    STUDY_SET_OPTIONS,
    Study,
    SystemSpec,
    TaskSpec,
    check_study,
    check_task_options,
    load_study,
    preset,
    study_from_dict,
)
from spanbert.study.stats import Comparison, mean_std, paired_comparison, t_quantile_975
from spanbert.study.summary import collect, comparisons, heldout_notes, score_tests, summarize, table

__all__ = [
    "ASSUMED_EPOCHS", "CHARS_PER_TOKEN", "HELDOUT_SEED", "PRESET_SYSTEMS", "PROBE_SAMPLE_CHARS", "STUDY_NAMES",
    "STUDY_SET_OPTIONS", "Cell", "Comparison", "HeldOut", "SpanBertError", "Study", "SystemSpec", "TaskSpec",
    "check_finished", "check_study", "check_task_options", "collect", "comparisons", "curve_main", "dry_run",
    "export_checkpoints", "finetune_estimate", "heldout_dir", "heldout_notes", "heldout_plan", "holds_a_study",
    "is_done", "legacy_folder", "litbank_fold_dir", "load_study", "main", "mean_std", "model_dir", "paired_comparison",
    "plan", "preset", "read_dev_score", "run_cell", "run_checkpoints", "run_study", "score_heldout", "score_tests",
    "shared_dir", "split_dev", "split_half", "study_from_dict", "study_is_legacy", "study_lock", "summarize", "table",
    "t_quantile_975",
]  # fmt: skip
