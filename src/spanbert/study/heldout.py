"""Held-out scores: what selection did not see.

A cell's dev score was used twice for selection (the best evaluation inside the run, then the best
learning rate), so it is optimistic. Every cell is therefore also scored on data neither selection
saw: the task's test split where the study names one (or a fold's test file), else the held-out half
of dev. How a task's dev data is halved is the task's own rule (`TaskSpec.dev_split`); how a model is
scored on a file, its own too (`spanbert.tasks.score`). Nothing here knows a task.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spanbert import folders
from spanbert.errors import SpanBertError
from spanbert.study.layout import HELDOUT_STATS, Cell, fold_dir, heldout_dir
from spanbert.study.runner import in_log
from spanbert.study.spec import Study, StudyTask, subtask_options
from spanbert.tasks import TASKS
from spanbert.tasks import score as score_model
from spanbert.utils import write_json


@dataclass
class HeldOut:
    """Where a task's cells select and where they are scored afterwards."""

    source: str
    """"test" (the study's test file, or a fold's test file) or "dev half" (the other half of dev)."""
    select: str
    """The dev data the cells select on: the whole dev set, or its selection half."""
    heldout: str
    """The data every cell is scored on afterwards."""


def _options(t: StudyTask) -> dict[str, Any]:
    """The task's options with the one that picks its sub-task: what its dev rule may read."""
    return {**t.options, **subtask_options(t)}


def heldout_plan(study: Study, t: StudyTask, fold: int | None = None) -> HeldOut | None:
    """The held-out data of a task's cells (nothing is written); None when the task has none (no test
    file and a dev set its rule does not split)."""
    spec = TASKS[t.task]
    if fold is not None and spec.folds is not None:
        _, dev, test = spec.folds.files(fold_dir(study, t, fold))
        return HeldOut("test", str(dev), str(test))
    if t.test:
        return HeldOut("test", t.dev, t.test)
    if spec.dev_split is None:
        return None
    halves = spec.dev_split.halves(t.train, t.dev, _options(t), heldout_dir(study, t))
    if halves is None:
        return None
    return HeldOut("dev half", str(halves[0]), str(halves[1]))


def dev_restriction(t: StudyTask) -> tuple[str, Any]:
    """(option, value) of a task option that restricts dev (its rule's `restriction`), else ("", None).
    With a dev half it is applied before the split, so both halves come from the part of dev the user
    chose, and it is left out of the cells' options."""
    split = TASKS[t.task].dev_split
    for key in split.restriction if split else ():
        if t.options.get(key) not in (None, ""):
            return key, t.options[key]
    return "", None


def split_dev(study: Study, t: StudyTask) -> None:
    """Write the selection half and the held-out half of ``t``'s dev data (once; rank 0) into
    OUT/shared/heldout/<task>/, by the task's own rule, and what was cut into split.json."""
    if t.folds:  # each cell is scored on its fold's test file, no dev set is split
        return
    plan_ = heldout_plan(study, t)
    if plan_ is None or plan_.source != "dev half":
        return
    out = heldout_dir(study, t)
    done = out / "split.json"
    if done.is_file():
        return
    folders.make_folders(out)
    info = TASKS[t.task].dev_split.split(t.train, t.dev, _options(t), out)
    write_json(done, info)


def score_heldout(cell: Cell, t: StudyTask, h: HeldOut) -> dict[str, Any]:
    """Score a finished cell's selected model (its folder) on the held-out data: every number the task
    computed, the headline under "score". What the scoring prints goes to the cell's heldout_log.txt; the
    per-example statistics, where the task writes them, to its `HELDOUT_STATS`."""
    spec = TASKS[t.task]
    stats = {"example_stats": str(cell.dir / HELDOUT_STATS)} if spec.example_stats else {}
    if spec.cache_option and cell.options.get(spec.cache_option):  # the cache the cell trained with
        stats[spec.cache_option] = cell.options[spec.cache_option]
    try:
        with in_log(cell.dir / "heldout_log.txt", f"score {cell.dir} on {h.heldout}"):
            results = score_model(t.task, cell.dir, h.heldout, **subtask_options(t), **stats)
    except SpanBertError as e:
        raise SpanBertError(f"study: scoring {cell.label} on {h.heldout} failed: {e}; see {cell.dir / 'heldout_log.txt'}") from None
    return {"score": results.score, **results.numbers}


_LEGACY: dict[str, bool] = {}


def study_is_legacy(study: Study) -> bool:
    """`legacy_folder`, read once per folder and process (`plan` asks for every cell; a folder cannot
    become legacy later: every cell this code finishes records its held-out score)."""
    key = str(Path(study.output_dir).resolve())
    if key not in _LEGACY:
        _LEGACY[key] = legacy_folder(study)
    return _LEGACY[key]


def legacy_folder(study: Study) -> bool:
    """True when the study's folder holds fine-tuning cells finished before held-out scoring (their
    result.json has no "heldout_source"): the folder keeps selecting on the whole dev set, so its
    cells stay comparable, and its table says that no held-out score exists."""
    root = Path(study.output_dir) / "finetune"
    for marker in root.glob("*/*/*/result.json") if root.is_dir() else []:
        with contextlib.suppress(OSError, ValueError):
            if "heldout_source" not in json.loads(marker.read_text()):
                return True
    return False
