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

    spec       the YAML schema (Study, SystemSpec, StudyTask), its checks, the paper's presets
    layout     a cell and the folders of a study
    runner     a task action (the Python API) or a `spanbert` command run in this process, into a log
    heldout    the held-out half of dev (or the test split) and scoring a cell on it
    cells      planning and running cells: resume, locks, shards
    stats      mean ± std, paired t and bootstrap intervals
    summary    model selection, tables, comparisons, plots, each stage's wall time
    trials     short measured runs of the study's own commands, in a temporary folder (--dry-run)
    estimate   the cost of each stage of a study before it runs, from the trials (--dry-run)
    command    `main` (spanbert study) and `curve_main` (spanbert curve)

Every name below was importable from the single-file `spanbert.study` and still is; each is loaded from
its module on first use, so that importing the package (`spanbert study --help`, `spanbert.study.options`)
loads neither torch nor a task.
"""

from __future__ import annotations

from spanbert import _aliases

# module (a submodule, or a full name for one outside the package) -> the names it lends the package
_HOMES: dict[str, tuple[str, ...]] = {
    "cells": (
        "check_finished",
        "is_done",
        "plan",
        "read_dev_score",
        "run_cell",
        "run_study",
        "study_lock",
    ),
    "command": (
        "curve_main",
        "export_checkpoints",
        "main",
        "run_checkpoints",
    ),
    "estimate": (
        "ASSUMED_EPOCHS",
        "CHARS_PER_TOKEN",
        "dry_run",
        "finetune_estimate",
    ),
    "heldout": (
        "HeldOut",
        "heldout_plan",
        "legacy_folder",
        "score_heldout",
        "split_dev",
        "study_is_legacy",
    ),
    "layout": (
        "ESTIMATE_FILE",
        "STUDY_NAMES",
        "Cell",
        "heldout_dir",
        "holds_a_study",
        "fold_dir",
        "model_dir",
        "shared_dir",
    ),
    "options": ("PRESET_SYSTEMS",),
    "trials": ("TRIAL_SAMPLE_CHARS", "PROBE_SAMPLE_CHARS"),
    "spec": (
        "STUDY_SET_OPTIONS",
        "Study",
        "SystemSpec",
        "StudyTask",
        "check_study",
        "check_task_options",
        "load_study",
        "preset",
        "study_from_dict",
    ),
    "stats": (
        "Comparison",
        "mean_std",
        "paired_comparison",
        "t_quantile_975",
    ),
    "summary": (
        "collect",
        "comparisons",
        "heldout_notes",
        "score_tests",
        "summarize",
        "table",
    ),
    "spanbert.errors": ("SpanBertError",),  # tests expect `S.SpanBertError`, as the single file exposed it
    "spanbert.tasks.splits": (
        "HELDOUT_SEED",
        "split_half",
    ),
}
__getattr__, __dir__ = _aliases.package_names(
    __name__, _HOMES,
    submodules=("spec", "options", "layout", "runner", "heldout", "cells", "stats", "summary", "trials", "estimate",
                "command"),
)  # fmt: skip
