"""`spanbert study`: the paper's comparisons (Tables 1, 6, 7) rerun on any corpus, budget and tasks.

A study is a grid of cells, each its own folder with its own log:

    OUT/shared/tokenizer, OUT/shared/corpus        one vocabulary and one preprocessed corpus for all
    OUT/pretrain/<system>/                         `spanbert pretrain` with an equal budget of tokens
    OUT/finetune/<system>/<task>/lr<lr>_seed<s>/   `spanbert finetune <task>` (best dev checkpoint)
    OUT/summary/                                   table.md, table.csv, comparisons.md/.csv, *.png

A cell is finished when its marker exists (`cell.json` for pre-training, `result.json` for
fine-tuning); a killed study started again skips finished cells and resumes the interrupted one
(pre-training continues from its last checkpoint with --resume). Cells run in this process through
the same code as the CLI commands, so under `torchrun` every pre-training cell is one distributed
run; fine-tuning cells can be spread over processes with `--shard I/N` (one study process per device,
each running every N-th cell), then `--only summary` collects them.

Model selection follows the paper: for each system and task the learning rate with the best mean dev
score over seeds is chosen, and the table reports mean ± standard deviation over the seeds at that
rate. Those dev scores were used for selection twice (inside each run, then across rates), so every
cell is also scored on data that selection did not see: the task's test split where the study names
one, else the held-out half of dev (the cells select on the other half; SpanBERT §4.1 for MRQA); the
table reports that score with the dev score beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import difflib
import io
import json
import math
import re
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from spanbert import cost, distributed
from spanbert.config import ArgumentParser
from spanbert.errors import SpanBertError
from spanbert.tasks import TASKS
from spanbert.tasks.spec import OLD_RESULTS_FILES
from spanbert.utils import atomic_dir, atomic_write, check_output, output_file, remove_debris

# ---------------------------------------------------------------------------------------------
# What a study is


@dataclass
class TaskSpec:
    """One downstream task of a study."""

    task: str
    """squad, mrqa, semeval, tacred, glue, ner, coref, swag or parse (the `spanbert finetune` task names)."""
    name: str = ""
    """Column name in the table (default: the GLUE task name, else the task)."""
    train: str = ""
    """Training file (or, for glue, the task folder)."""
    dev: str = ""
    """Dev file: fine-tuning selects the best checkpoint and the learning rate on it."""
    test: str = ""
    """Optional test file, scored only with the selected models (ner, semeval, tacred, parse)."""
    glue_task: str = ""
    """glue only: SST-2, CoLA, MRPC, STS-B, RTE, ..."""
    folds: list[int] = field(default_factory=list)
    """coref on LitBank (train: the litbank_coref folder): the folds of its ten-fold split to run (e.g.
    [0], or 0..9); a seed's score is the mean over the folds. Empty for a task given as train/dev files."""
    learning_rates: list[float] = field(default_factory=lambda: [3e-5])
    """The learning-rate grid (Appendix B: 1e-5 … 5e-5 for most tasks)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Further `spanbert finetune <task>` options, e.g. {num_train_epochs: 2, max_train_examples: 2000}."""

    def __post_init__(self) -> None:
        self.name = self.name or (self.glue_task if self.task == "glue" and self.glue_task else self.task)


@dataclass
class SystemSpec:
    """One row of the table: a pre-training system of `spanbert pretrain`, or an existing checkpoint."""

    name: str
    """Row name; also the --system of `spanbert pretrain` unless checkpoint is given."""
    checkpoint: str = ""
    """An existing model folder (e.g. your own BERT): no pre-training cell, fine-tuned as it is."""
    options: dict[str, Any] = field(default_factory=dict)
    """Further `spanbert pretrain` options for this system only (e.g. {masking: whole_word})."""


@dataclass
class Study:
    systems: list[SystemSpec]
    tasks: list[TaskSpec]
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
    """Fine-tuning seeds per task and learning rate (the table's mean ± std is over them)."""
    output_dir: str = "runs/study"
    """Where every cell and the summary go."""

    @property
    def pretrain_steps(self) -> int:
        return max(1, math.ceil(self.budget_tokens / (self.batch_size * self.max_seq_length)))


# Every per-task fact (names, option classes, headline metric, results file, how dev is split, how a
# model is scored on held-out data) comes from the task registry `spanbert.tasks.TASKS`.


def _head(t: TaskSpec) -> list[str]:
    """The task name and the options that pick a sub-task, as every command of a cell starts."""
    return [t.task, *(["--task", t.glue_task] if t.glue_task else [])]


def _test_tasks() -> list[str]:
    """Tasks whose `evaluate` scores a labelled file with a model (a study's test: file)."""
    return [name for name in TASKS if TASKS[name].scores_test]


def _check_type(value: Any, tp: Any) -> bool:
    if tp in (int,):
        return isinstance(value, int) and not isinstance(value, bool)
    if tp in (float,):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp in (str,):
        return isinstance(value, str)
    return True


_NESTED = {"systems", "tasks"}  # Study's lists of SystemSpec / TaskSpec, built before Study itself


def _build(cls: type, data: Any, where: str | Callable[..., str]) -> Any:
    """``cls(**data)`` with every key known and every value converted to its field's type as the other
    commands' YAML is (`spanbert.config.convert_value`: ``1e-4``, which YAML 1.1 reads as a string, is
    the number a user meant; ``[1e-4]`` a list of numbers); errors name ``where``, or ``where(key)``:
    the file and the key's line."""
    from spanbert.config import convert_value

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
    tasks = [_build(TaskSpec, item, lambda *k, i=i: at("tasks", i, *k)) for i, item in enumerate(data.pop("tasks"))]
    study = _build(Study, {**data, "systems": systems, "tasks": tasks}, at)
    check_study(study, where, at)
    return study


def _item_lines(path: Path) -> dict[tuple[str, ...], int]:
    """The 1-based line of each item of the ``systems`` and ``tasks`` lists and of each key inside an
    item (``("tasks", "0", "learning_rates")``): `spanbert.config`'s reader knows only mapping keys."""
    import yaml

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
    from spanbert.config import MODEL_PRESETS
    from spanbert.pretrain import SYSTEM_PRESETS as SYSTEMS

    names = [s.name for s in study.systems]
    if len(set(names)) != len(names):
        raise SpanBertError(f"{at('systems')}: systems: found a name twice in {names}, expected distinct names")
    for i, s in enumerate(study.systems):
        if not s.checkpoint and s.name not in SYSTEMS:
            raise SpanBertError(
                f"{at('systems', i)}: systems: found {s.name!r}, expected a `spanbert pretrain --system` "
                f"({', '.join(SYSTEMS)}) or an entry with checkpoint: FOLDER"
            )
        if s.checkpoint and not Path(s.checkpoint).is_dir():
            raise SpanBertError(
                f"{at('systems', i, 'checkpoint')}: systems: {s.name}: checkpoint {s.checkpoint!r} is not a folder"
            )
    if any(not s.checkpoint for s in study.systems) and not study.corpus:
        raise SpanBertError(
            f"{at('corpus')}: corpus: found none, expected the pre-training corpus (text or preprocessed folder)"
        )
    if study.model not in MODEL_PRESETS:
        raise SpanBertError(f"{at('model')}: model: found {study.model!r}, expected one of: {', '.join(MODEL_PRESETS)}")
    for name in ("budget_tokens", "max_seq_length", "batch_size", "gradient_accumulation_steps", "seeds", "vocab_size"):
        if getattr(study, name) < 1:
            raise SpanBertError(f"{at(name)}: {name}: found {getattr(study, name)!r}, expected an integer >= 1")
    columns = []
    for i, t in enumerate(study.tasks):
        if t.task not in TASKS:
            raise SpanBertError(
                f"{at('tasks', i, 'task')}: tasks: found task {t.task!r}, expected one of: {', '.join(TASKS)}"
            )
        if t.task == "glue" and not t.glue_task:
            raise SpanBertError(f"{at('tasks', i)}: tasks: glue needs glue_task (e.g. SST-2)")
        if t.glue_task and t.task != "glue":
            raise SpanBertError(f"{at('tasks', i, 'glue_task')}: tasks: {t.name}: found glue_task, expected it for glue only")
        columns.append(t.name)
        litbank = t.task == "coref" and Path(t.train).is_dir()
        if litbank != bool(t.folds):
            raise SpanBertError(
                f"{at('tasks', i, 'folds')}: tasks: {t.name}: found folds {t.folds} with train {t.train!r}, "
                f"expected folds (e.g. [0]) "
                f"exactly when train is the LitBank folder (with tenfold_splits/)"
            )
        if litbank and (not (Path(t.train) / "tenfold_splits").is_dir() or any(not 0 <= k <= 9 for k in t.folds)):
            raise SpanBertError(
                f"{at('tasks', i, 'folds')}: tasks: {t.name}: expected {t.train}/tenfold_splits/ and folds in 0..9"
            )
        if not t.train or (t.task != "glue" and not t.dev and not litbank):
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


# Options a study sets itself for every fine-tuning cell: one in a task's `options` would silently
# relabel the cells (a learning rate that is not the grid's) or break the harness (another output).
STUDY_SET_OPTIONS = ("model", "learning_rate", "seed", "output_dir", "overwrite_output_dir", "resume", "sweep",
                     "train_file", "validation_file", "train", "dev", "task", "data_dir")  # fmt: skip


def _finetune_help(argv: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``spanbert finetune ARGV --help`` run in this process: argparse
    converts every option given before ``--help`` (so a bad value is refused) and then prints the
    usage, without reading a file or building a model."""
    from spanbert import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli._run(["finetune", *argv, "--help"])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 2
        except SpanBertError as e:
            print(f"error: {e}", file=err)
            code = 2
    return int(code or 0), out.getvalue(), err.getvalue()


def check_task_options(t: TaskSpec, at: Callable[..., str]) -> None:
    """What a task's cells would be refused for, found before any cell runs: the GLUE task name and its
    files, and every key and value of ``options`` against the task's own `spanbert finetune` parser."""
    if t.task == "glue":
        from spanbert.tasks.glue import _FALLBACK, GLUE_TASKS

        known = {k.lower().replace("-", ""): k for k in GLUE_TASKS}
        name = known.get(t.glue_task.lower().replace("-", ""))
        if name is None:
            raise SpanBertError(
                f"{at('glue_task')}: tasks: {t.name}: found glue_task {t.glue_task!r}, expected one of: "
                f"{', '.join(GLUE_TASKS)}"
            )
        spec = GLUE_TASKS[name]
        for f in [*spec.train, *(f for files in spec.dev.values() for f in files)]:
            paths = [Path(t.train) / f, *(Path(t.train) / g for g in _FALLBACK.get((name, f), ()))]
            if not any(p.is_file() for p in paths):
                raise SpanBertError(
                    f"{at('train')}: tasks: {t.name}: found no {f} in {t.train}, expected the {name} folder of GLUE "
                    f"(train.tsv and its dev file)"
                )
    for key in t.options:
        if key.replace("-", "_") in STUDY_SET_OPTIONS:
            raise SpanBertError(
                f"{at('options')}: tasks: {t.name}: options: found {key!r}, expected none of "
                f"{', '.join(STUDY_SET_OPTIONS)}: the study sets them for every cell (learning rates: learning_rates:)"
            )
    if not t.options:
        return
    head = _head(t)
    code, text, _ = _finetune_help(head)
    flags = set(re.findall(r"(?<![\w-])--[\w-]+", text))
    if code != 0 or not flags:
        raise SpanBertError(f"{at('task')}: tasks: {t.name}: `spanbert finetune {t.task} --help` failed")
    for key in t.options:
        if f"--{key}" not in flags:
            near = difflib.get_close_matches(f"--{key}", sorted(flags), n=1)
            hint = f" (did you mean {near[0][2:]!r}?)" if near else ""
            raise SpanBertError(
                f"{at('options')}: tasks: {t.name}: options: found {key!r}, expected an option of "
                f"`spanbert finetune {t.task}`{hint}"
            )
    # values: the dataclass options (training and the task's configs) as their YAML reader converts
    # them, the parser's own (typed, with choices) by argparse before `--help`
    import importlib

    from spanbert.config import convert_value
    from spanbert.trainer import TrainingArguments

    configs = [TrainingArguments] + [
        getattr(importlib.import_module(module), name) for module, name in TASKS[t.task].configs
    ]
    for key, value in t.options.items():
        for cls in configs:
            if key in {f.name for f in fields(cls)}:
                convert_value(cls, key, value, source=f"{at('options')}: tasks: {t.name}: options")
                break
    code, _, err = _finetune_help([*head, *_options(t.options)])
    if code != 0:
        last = next((x for x in reversed(err.splitlines()) if x.strip()), "")
        last = last.split("error: ", 1)[-1]
        raise SpanBertError(f"{at('options')}: tasks: {t.name}: options: {last}")


def load_study(path: str | Path) -> Study:
    from spanbert.config import _read_yaml

    data, lines = _read_yaml(path)
    return study_from_dict({**data, "__lines__": {**lines, **_item_lines(Path(path))}}, str(path))


# ---------------------------------------------------------------------------------------------
# Presets: the paper's three comparisons at three scales

PRESET_SYSTEMS = {
    "table1": ["google-bert", "bert", "bert-1seq", "spanbert"],
    "table6": ["mask-subword", "mask-whole-word", "mask-named-entity", "mask-noun-phrase", "mask-span"],
    "table7": ["span-2seq-nsp", "span-1seq", "span-1seq-sbo"],
}


def preset(table: str, scale: str, data_root: str = "../shared/data") -> dict[str, Any]:
    """The study description of a preset (a dict as the YAML would hold it)."""
    if table not in PRESET_SYSTEMS:
        raise SpanBertError(f"--preset: found {table!r}, expected one of: {', '.join(PRESET_SYSTEMS)}")
    if scale not in ("tiny", "small", "base"):
        raise SpanBertError(f"--scale: found {scale!r}, expected tiny, small or base")
    d = data_root.rstrip("/")
    squad = {
        "task": "squad",
        "train": f"{d}/squad/train-v1.1.rebuilt.json.gz",
        "dev": f"{d}/squad/dev-v1.1.json",
    }
    sst = {"task": "glue", "glue_task": "SST-2", "train": f"{d}/glue/SST-2"}
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
                    "max_seq_length": 192, "per_device_train_batch_size": 32}},
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
                {**squad, "learning_rates": [1e-4, 3e-4], "options": {"num_train_epochs": 2, "max_seq_length": 384}},
                {**litbank, "learning_rates": [1e-4], "options": {"num_train_epochs": 10}},
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


# ---------------------------------------------------------------------------------------------
# Cells


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

    @property
    def label(self) -> str:
        if self.kind == "pretrain":
            return f"pretrain {self.system}"
        fold = "" if self.fold is None else f" / fold {self.fold}"
        return f"finetune {self.system} / {self.task} / lr {self.lr:g} / seed {self.seed}{fold}"


def _options(opts: dict[str, Any]) -> list[str]:
    argv: list[str] = []
    for key, value in opts.items():
        if isinstance(value, bool):
            argv += [f"--{key}", "true" if value else "false"]
        elif isinstance(value, (list, tuple)):
            argv += [f"--{key}", *map(str, value)]
        elif value is not None:
            argv += [f"--{key}", str(value)]
    return argv


def shared_dir(study: Study) -> Path:
    return Path(study.output_dir) / "shared"


def model_dir(study: Study, system: SystemSpec) -> Path:
    if system.checkpoint:
        return Path(system.checkpoint)
    return Path(study.output_dir) / "pretrain" / system.name / "final"


def _lr_name(lr: float) -> str:
    return f"lr{lr:g}"


def plan(study: Study) -> list[Cell]:
    """Every cell of the study in the order they run: pre-training, then fine-tuning."""
    out = Path(study.output_dir)
    cells: list[Cell] = []
    corpus = str(shared_dir(study) / "corpus")
    world = distributed.world_size()
    per_device = study.batch_size // (world * study.gradient_accumulation_steps)
    for s in study.systems:
        if s.checkpoint:
            continue
        opts = {
            "system": s.name,
            "corpus": corpus,
            "model": study.model,
            "max_seq_length": study.max_seq_length,
            "max_steps": study.pretrain_steps,
            "per_device_train_batch_size": max(1, per_device),
            "gradient_accumulation_steps": study.gradient_accumulation_steps,
            "disable_tqdm": True,
            **study.pretrain_options,
            **s.options,
        }
        cells.append(Cell("pretrain", s.name, out / "pretrain" / s.name, ["pretrain", *_options(opts)]))
    for s in study.systems:
        for t in study.tasks:
            for lr in t.learning_rates:
                for seed in range(study.seeds):
                    for fold in t.folds or [None]:
                        d = _cell_dir(study, s.name, t.name, lr, seed, fold)
                        argv = _finetune_argv(study, t, model_dir(study, s), lr, seed, fold)
                        cells.append(Cell("finetune", s.name, d, argv, t.name, lr, seed, fold))
    return cells


def _cell_dir(study: Study, system: str, task: str, lr: float, seed: int, fold: int | None = None) -> Path:
    suffix = "" if fold is None else f"_fold{fold}"
    return Path(study.output_dir) / "finetune" / system / task / f"{_lr_name(lr)}_seed{seed}{suffix}"


def litbank_fold_dir(study: Study, fold: int) -> Path:
    return shared_dir(study) / "litbank" / f"fold{fold}"


def _prepare_litbank(root: Path, fold: int, out: Path) -> None:
    """train/dev/test.conll of one fold of LitBank's ten-fold split (the ids files name the documents)."""
    from spanbert.tasks.coref import read_conll, write_conll

    if (out / "done").is_file():
        return
    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev", "test"):
        ids = (root / "tenfold_splits" / str(fold) / f"{split}.ids").read_text().split()
        files = [root / "conll" / i.replace(".tsv", ".conll.gz") for i in ids]
        write_conll(out / f"{split}.conll", [d for f in files for d in read_conll(f)])
    (out / "done").write_text("ok\n")


def _finetune_argv(study: Study, t: TaskSpec, model: Path, lr: float, seed: int, fold: int | None) -> list[str]:
    h = None
    if fold is not None:
        folder = litbank_fold_dir(study, fold)
        data = {"train": str(folder / "train.conll"), "dev": str(folder / "dev.conll")}
    else:
        # the cells select on the selection half of dev when the other half is held out (issue 23.10);
        # a folder whose cells finished before that keeps selecting on the whole dev set
        h = None if study_is_legacy(study) else heldout_plan(study, t)
        # a GLUE task is its folder (train's, or the selection half's when dev is split): no dev of its own
        dev = h.select if h is not None else ("" if t.glue_task else t.dev)
        data = {**({"task": t.glue_task} if t.glue_task else {}), **TASKS[t.task].finetune_data(t.train, dev)}
    options = dict(t.options)
    if fold is None and h is not None and h.source == "dev half":
        options.pop(_dev_restriction(t)[0], None)  # already applied to the halves
    opts = {**data, "model": str(model), "learning_rate": lr, "seed": seed, "disable_tqdm": True, **options}
    return ["finetune", t.task, *_options(opts)]


def read_dev_score(task: str, cell_dir: Path) -> tuple[float, dict[str, Any]]:
    """(headline dev score, every number of the results file) of a finished fine-tuning cell (the task's
    `TaskSpec.results_file`, or the name an older run wrote it under), on the 0-100 scale."""
    spec = TASKS[task]
    key = spec.metric
    path = next((p for p in (cell_dir / n for n in (spec.results_file, *OLD_RESULTS_FILES)) if p.is_file()),
                cell_dir / spec.results_file)  # fmt: skip
    try:
        results = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise SpanBertError(f"{path}: cannot read the cell's dev results ({e}); remove {cell_dir} to redo it") from None
    flat = _numbers(results)
    for k in (key, f"dev_{key}", f"eval_{key}"):
        if k in flat:
            return flat[k], flat
    raise SpanBertError(f"{path}: found no {key!r} among {sorted(flat)[:12]}, expected the task's headline score")


def _numbers(d: Any, prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out.setdefault(str(k), float(v))
            elif isinstance(v, dict):
                for kk, vv in _numbers(v).items():
                    out.setdefault(kk, vv)
    return out


# ---------------------------------------------------------------------------------------------
# Running


def _marker(cell: Cell) -> Path:
    return cell.dir / ("cell.json" if cell.kind == "pretrain" else "result.json")


def is_done(cell: Cell) -> bool:
    return _marker(cell).is_file()


def _run_command(argv: list[str], log: Path) -> tuple[int, str]:
    """Run one `spanbert` command in this process with its output in ``log``; (exit code, last line)."""
    from spanbert import cli

    log.parent.mkdir(parents=True, exist_ok=True)
    name = log.name if distributed.is_main() else f"{log.stem}.rank{distributed.rank()}{log.suffix}"
    with open(log.parent / name, "a", encoding="utf-8") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        print(f"$ spanbert {' '.join(argv)}", flush=True)
        try:
            code = cli._run(argv)  # not cli.main: that would also leave the process group
        except SpanBertError as e:
            print(f"error: {e}", flush=True)
            code = 2
        except KeyboardInterrupt:
            raise
        except Exception as e:  # noqa: BLE001 - a failed cell is reported with its log, the study stops
            import traceback

            traceback.print_exc()
            print(f"error: {type(e).__name__}: {e}", flush=True)
            code = 1
    last = ""
    with contextlib.suppress(OSError):
        lines = [x for x in (log.parent / name).read_text(encoding="utf-8", errors="replace").splitlines() if x.strip()]
        last = lines[-1] if lines else ""
    return code, last


def _prepare_shared(study: Study) -> None:
    """One tokenizer and one preprocessed corpus for every system (rank 0; the others wait)."""
    from spanbert.data import is_preprocessed, tokenizer_dir_of

    shared = shared_dir(study)
    done = shared / "prepared.json"
    if all(s.checkpoint for s in study.systems):
        return
    wanted = {"corpus": study.corpus, "tokenizer": study.tokenizer, "vocab_size": study.vocab_size}
    if done.is_file():
        had = json.loads(done.read_text()).get("settings", wanted)
        if had != wanted:
            raise SpanBertError(
                f"{done}: found the shared corpus made with {had}, expected {wanted}; use a new output_dir "
                f"for another corpus or vocabulary"
            )
        return
    needs_candidates = sorted(
        {k for s in study.systems if not s.checkpoint for k in _candidate_kinds(s)}
    )
    steps: list[tuple[str, list[str]]] = []
    corpus = Path(study.corpus)
    if is_preprocessed(corpus):
        tok = study.tokenizer or str(tokenizer_dir_of(corpus))
        if not needs_candidates and not study.tokenizer:
            # already what we need: link it instead of re-tokenizing
            distributed.print0(f"study: using the preprocessed corpus {corpus}")
            shared.mkdir(parents=True, exist_ok=True)
            link = shared / "corpus"
            if not link.exists():
                link.symlink_to(corpus.resolve(), target_is_directory=True)
            with atomic_write(done) as f:
                f.write(json.dumps({"corpus": str(corpus), "settings": wanted}) + "\n")
            return
        raise SpanBertError(
            f"{corpus}: found a preprocessed corpus, expected raw text when a tokenizer or candidate spans are "
            f"needed (pass the text files as corpus)"
        )
    tok = study.tokenizer
    if not tok:
        tok = str(shared / "tokenizer")
        if not (Path(tok) / "vocab.txt").is_file():
            steps.append(("tokenizer", ["tokenizer", "train", "--corpus", study.corpus, "--vocab_size",
                                        str(study.vocab_size), "--output_dir", tok, "--disable_tqdm"]))  # fmt: skip
    pre = ["preprocess", "--corpus", study.corpus, "--tokenizer", tok, "--output_dir", str(shared / "corpus"), "--quiet"]
    if needs_candidates:
        pre += ["--candidates", ",".join(needs_candidates)]
    steps.append(("preprocess", pre))
    for name, argv in steps:
        distributed.print0(f"study: {name} (log: {shared / (name + '.log')})")
        code, last = _run_command(argv, shared / f"{name}.log")
        if code != 0:
            raise SpanBertError(f"study: the shared {name} step failed ({last}); see {shared / (name + '.log')}")
    with atomic_write(done) as f:
        f.write(json.dumps({"corpus": study.corpus, "tokenizer": tok, "settings": wanted}) + "\n")


def _candidate_kinds(s: SystemSpec) -> list[str]:
    from spanbert.pretrain import SYSTEM_PRESETS

    scheme = s.options.get("masking") or SYSTEM_PRESETS[s.name].masking
    return {"named_entity": ["entity"], "noun_phrase": ["noun_phrase"]}.get(scheme, [])


def run_cell(cell: Cell, study: Study, allow_long_run: bool = False) -> None:
    """Run one unfinished cell; a pre-training cell killed earlier resumes from its checkpoint."""
    argv = list(cell.argv)
    argv += ["--output_dir", str(cell.dir)] + (["--allow_long_run"] if allow_long_run else [])
    if cell.kind == "pretrain":
        from spanbert.trainer import latest_checkpoint

        resumable = distributed.on_main(lambda: latest_checkpoint(cell.dir) is not None)
        if resumable:
            argv.append("--resume")
        elif cell.dir.exists():
            argv += ["--overwrite_output_dir", "true"]
    elif cell.dir.exists():
        argv += ["--overwrite_output_dir", "true"]  # a fine-tuning cell killed midway starts over
    t0 = time.perf_counter()
    code, last = _run_command(argv, cell.dir / "log.txt")
    if code != 0:
        raise SpanBertError(f"study: cell '{cell.label}' failed (exit {code}): {last}; its log: {cell.dir / 'log.txt'}")
    seconds = time.perf_counter() - t0
    if cell.kind == "pretrain":
        info = {"system": cell.system, "seconds": seconds, "steps": study.pretrain_steps,
                "budget_tokens": study.budget_tokens, "argv": argv}  # fmt: skip
    else:
        task = next(t for t in study.tasks if t.name == cell.task)
        score, numbers = read_dev_score(task.task, cell.dir)
        info = {"system": cell.system, "task": cell.task, "learning_rate": cell.lr, "seed": cell.seed, "fold": cell.fold,
                "dev": score, "dev_results": numbers, "seconds": seconds, "argv": argv}  # fmt: skip
        _drop_training_state(cell.dir)
        if not study_is_legacy(study):
            h = heldout_plan(study, task, cell.fold)
            held = score_heldout(cell, task, h) if h is not None else None
            info |= {"heldout_source": h.source if h else None, "heldout": held["score"] if held else None,
                     "heldout_data": h.heldout if h else None, "heldout_results": held}  # fmt: skip
            if held is not None and h.source == "test" and cell.fold is None:
                # the same numbers `score_tests` would compute for the selected models: not run twice
                distributed.on_main(lambda: _write_json(cell.dir / "test.json", {k: v for k, v in held.items() if k != "score"}))

    def write() -> None:
        with atomic_write(_marker(cell)) as f:
            f.write(json.dumps(info, indent=2) + "\n")

    distributed.on_main(write)


def _drop_training_state(cell_dir: Path) -> None:
    """A finished fine-tuning cell keeps its model and results, not its optimizer state (disk stays bounded)."""

    def drop() -> None:
        for p in cell_dir.glob("checkpoint-*"):
            shutil.rmtree(p, ignore_errors=True)
        (cell_dir / "latest").unlink(missing_ok=True)
        shutil.rmtree(cell_dir / "best", ignore_errors=True)

    distributed.on_main(drop)


def run_study(
    study: Study, only: str = "all", shard: tuple[int, int] = (0, 1), allow_long_run: bool = False
) -> list[Cell]:
    """Run every unfinished cell (those of this shard); returns the plan. ``allow_long_run`` passes
    --allow_long_run to every cell's command."""
    cells = plan(study)
    todo = [c for c in cells if only == "all" or c.kind == only]
    if shard[1] > 1:
        if only != "finetune":
            raise SpanBertError("--shard: found it without --only finetune, expected the pre-training cells to run "
                                "first (--only pretrain, under torchrun if you like) and the shards to split fine-tuning")  # fmt: skip
        todo = todo[shard[0] :: shard[1]]
    # refused before anything is written: a changed study must not overwrite the study.json of the
    # cells that were run (issue 22.13)
    distributed.on_main(lambda: check_finished(cells))
    Path(study.output_dir).mkdir(parents=True, exist_ok=True)
    distributed.on_main(lambda: _write_plan(study, cells))
    if only in ("all", "pretrain"):
        distributed.on_main(lambda: _prepare_shared(study))
    for t in study.tasks:
        for fold in t.folds:
            distributed.on_main(lambda t=t, fold=fold: _prepare_litbank(Path(t.train), fold, litbank_fold_dir(study, fold)))
        if not study_is_legacy(study) and only in ("all", "finetune"):
            distributed.on_main(lambda t=t: split_dev(study, t))
    from spanbert.utils import progress_bar

    done_before = distributed.on_main(lambda: [is_done(c) for c in todo])
    bar = progress_bar(total=len(todo), initial=sum(done_before), desc="study", unit="cell", disable=not distributed.is_main())
    for cell, done in zip(todo, done_before):
        if done:
            continue
        if cell.kind == "finetune":
            system = next(s for s in study.systems if s.name == cell.system)
            if not distributed.on_main(lambda s=system: (model_dir(study, s) / "config.json").is_file()):
                raise SpanBertError(f"study: {cell.label}: the model {model_dir(study, system)} does not exist yet; "
                                    f"run the pre-training cells first (--only pretrain)")  # fmt: skip
        bar.set_postfix_str(cell.label)
        run_cell(cell, study, allow_long_run)
        bar.update(1)
        if distributed.is_main():
            bar.write(f"done: {cell.label} ({cell.dir})")
    bar.close()
    return cells


def check_finished(cells: list[Cell]) -> None:
    """A finished cell must have run the command this study plans for it: a study file changed after
    some cells finished (another budget, other task options) would otherwise mix results silently.
    Adding systems, tasks, learning rates or seeds only adds cells and is fine."""
    for cell in cells:
        marker = _marker(cell)
        if not marker.is_file():
            continue
        try:
            ran = json.loads(marker.read_text()).get("argv") or []
        except (OSError, ValueError):
            raise SpanBertError(f"{marker}: unreadable; remove {cell.dir} to redo the cell") from None
        if ran[: len(cell.argv)] != cell.argv:
            diff = sorted(set(ran[: len(cell.argv)]) ^ set(cell.argv))[:6]
            raise SpanBertError(
                f"{marker}: found a finished cell '{cell.label}' run with other settings ({' '.join(diff)}), "
                f"expected the study's; use a new output_dir for a changed study, or remove {cell.dir} to redo it"
            )


STUDY_NAMES = frozenset({".lock", "study.json", "shared", "pretrain", "finetune", "summary", "models", "curve.md",
                         "curve.csv", "curve.png"})  # fmt: skip
"""What a study (or a curve) writes at the top of its output_dir: the lock, the plan, the shared corpus,
the cells, the summary; a curve's exported checkpoints and its table and plot."""


def holds_a_study(folder: Path) -> bool:
    """Whether ``folder`` holds something an earlier study or curve wrote (`STUDY_NAMES`, a shard's lock,
    a hidden temporary): the output contract's "an earlier output of this command" (`check_output`).
    Such a folder is resumed; a folder of only other files is refused, before any work."""
    return any(
        p.name in STUDY_NAMES or p.name.startswith(".lock.") or (p.name.startswith(".") and ".tmp" in p.name)
        for p in folder.iterdir()
    )


@contextlib.contextmanager
def study_lock(output_dir: str | Path, shard: tuple[int, int] = (0, 1)) -> Any:
    """Hold OUT/.lock while a study runs in ``output_dir``, so two `spanbert study` processes never run
    (and overwrite) the same cells: a second one is refused at once with the holder's pid. The lock is
    `fcntl.flock`, which the kernel releases when the process ends, a crash or kill -9 included, so
    no stale lock is ever left to remove. Shards of one study (``--shard I/N``, one process per device)
    share the folder lock and each holds its own shard's: shards run side by side, the same shard
    twice or a whole study beside a shard does not. Rank 0 holds it for a torchrun group."""
    import fcntl
    import os

    out = Path(output_dir)
    held: list[Any] = []

    def take(name: str, mode: int, what: str) -> None:
        f = open(out / name, "a+", encoding="utf-8")  # noqa: SIM115 - held until the study ends
        try:
            fcntl.flock(f, mode | fcntl.LOCK_NB)
        except OSError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            f.close()
            raise SpanBertError(
                f"{out}: found {what} already running on this folder ({holder}), expected one at a time; wait for "
                f"it to finish (or stop it) and run again, or use another --output_dir"
            ) from None
        held.append(f)
        if mode == fcntl.LOCK_EX:  # only the exclusive holder names itself: shared holders would race
            f.seek(0)
            f.truncate()
            f.write(f"spanbert study, pid {os.getpid()}\n")
            f.flush()

    def take_all() -> None:
        out.mkdir(parents=True, exist_ok=True)
        if shard[1] == 1:
            take(".lock", fcntl.LOCK_EX, "another `spanbert study`")
        else:
            take(".lock", fcntl.LOCK_SH, "a whole `spanbert study` (not a shard)")
            take(f".lock.shard{shard[0]}of{shard[1]}", fcntl.LOCK_EX, f"shard {shard[0]}/{shard[1]}")

    try:
        distributed.on_main(take_all)
        yield
    finally:
        for f in held:
            f.close()


def _write_plan(study: Study, cells: list[Cell]) -> None:
    with atomic_write(Path(study.output_dir) / "study.json") as f:
        f.write(json.dumps({"study": asdict(study), "cells": [str(c.dir) for c in cells]}, indent=2, default=str) + "\n")


# ---------------------------------------------------------------------------------------------
# Held-out scores: what selection did not see (issue 23.10)
#
# A cell's dev score was used twice for selection (the best evaluation inside the run, then the best
# learning rate), so it is optimistic. Every cell is therefore also scored on data neither selection
# saw: the task's test split where the study names one (ner, semeval, tacred, parse; LitBank's fold
# test), else the held-out half of dev: dev is split once, by record, with a fixed seed; the cells
# select on one half and are scored on the other (SpanBERT §4.1 does this for MRQA).

HELDOUT_SEED = 23
"""The seed of the dev split: fixed, so every system, learning rate and seed is scored on the same half."""


def split_half(n: int, seed: int = HELDOUT_SEED) -> tuple[list[int], list[int]]:
    """(selection indices, held-out indices) of ``n`` records: a seeded permutation cut in two, the
    held-out half the smaller when ``n`` is odd, each half in the file's order."""
    if n < 2:
        raise ValueError(f"cannot split {n} record(s) in two halves")
    perm = np.random.default_rng(seed).permutation(n)
    held = sorted(int(i) for i in perm[: n // 2])
    select = sorted(int(i) for i in perm[n // 2 :])
    return select, held


@dataclass
class HeldOut:
    """Where a task's cells select and where they are scored afterwards."""

    source: str
    """"test" (the study's test file, or LitBank's fold test) or "dev half" (the other half of dev)."""
    select: str
    """The dev data the cells select on: the whole dev set, or its selection half (file or GLUE folder)."""
    heldout: str
    """The data every cell is scored on afterwards."""


# the dev file formats a dev half is cut from: each task's `TaskSpec.dev_split` (suffix, kind of record)


def heldout_dir(study: Study, t: TaskSpec) -> Path:
    return shared_dir(study) / "heldout" / t.name


def heldout_plan(study: Study, t: TaskSpec, fold: int | None = None) -> HeldOut | None:
    """The held-out data of a task's cells (nothing is written); None when the task has none (a GLUE
    task with several dev files, parse without a test file)."""
    if fold is not None:
        folder = litbank_fold_dir(study, fold)
        return HeldOut("test", str(folder / "dev.conll"), str(folder / "test.conll"))
    if t.test:
        return HeldOut("test", t.dev, t.test)
    split = TASKS[t.task].dev_split
    if split is None:
        return None
    if t.task == "glue":
        from spanbert.tasks.glue import GLUE_TASKS, glue_task

        spec = glue_task(t.glue_task)
        if spec.dev != GLUE_TASKS["SST-2"].dev or spec.headerless or not (Path(t.train) / "dev.tsv").is_file():
            return None  # MNLI's two dev files, CoLA's raw release: not split (said in the table)
    suffix = split.suffix
    d = heldout_dir(study, t)
    return HeldOut("dev half", str(d / f"select{suffix}"), str(d / f"heldout{suffix}"))


def _read_text(path: Path) -> str:
    import gzip

    # newline="": the halves keep the file's line endings (SemEval's are CRLF)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", newline="") as f:
        return f.read()


def _blocks(lines: list[str], starts: Callable[[str], bool] | None = None) -> tuple[list[str], list[list[str]]]:
    """(lines before the first record, records): records separated by blank lines, or each starting at a
    line where ``starts`` holds."""
    head: list[str] = []
    records: list[list[str]] = []
    current: list[str] = []
    for line in lines:
        if starts is None:
            if line.strip():
                current.append(line)
            elif current:
                records.append(current + [line])
                current = []
        else:
            if starts(line):
                if current:
                    records.append(current)
                current = [line]
            elif current:
                current.append(line)
            else:
                head.append(line)
    if current:
        records.append(current)
    return head, records


def _dev_restriction(t: TaskSpec) -> tuple[str, Any]:
    """(option, value) of a task option that restricts dev (SQuAD/MRQA ``validation_articles``, GLUE
    ``max_eval_examples``), else ("", None). With a dev half it is applied before the split, so both
    halves come from the part of dev the user chose, and it is left out of the cells' options."""
    split = TASKS[t.task].dev_split
    for key in split.restriction if split else ():
        if t.options.get(key) not in (None, ""):
            return key, t.options[key]
    return "", None


def split_dev(study: Study, t: TaskSpec) -> None:
    """Write the selection half and the held-out half of ``t``'s dev data (once; rank 0) into
    OUT/shared/heldout/<task>/, each in the task's own format."""
    plan_ = heldout_plan(study, t)
    if plan_ is None or plan_.source != "dev half":
        return
    out = heldout_dir(study, t)
    done = out / "split.json"
    if done.is_file():
        return
    out.mkdir(parents=True, exist_ok=True)
    kind = TASKS[t.task].dev_split.kind
    dev = Path(t.train) / "dev.tsv" if t.task == "glue" else Path(t.dev)
    head: Any
    if kind == "squad-articles":
        data = json.loads(_read_text(dev))
        head, records = data, data["data"]
    elif kind == "json-list":
        head, records = None, json.loads(_read_text(dev))
    else:
        lines = _read_text(dev).splitlines(keepends=True)
        if kind == "jsonl-after-header":
            has_header = bool(lines) and "header" in json.loads(lines[0])
            head, records = lines[:has_header], lines[has_header:]
        elif kind in ("rows-after-header", "glue-rows"):
            head, records = lines[:1], [x for x in lines[1:] if x.strip()]
        elif kind == "blank-line-blocks":
            head, records = _blocks(lines)
        else:  # conll-documents
            head, records = _blocks(lines, starts=lambda x: x.startswith("#begin document"))
    if kind not in ("squad-articles", "json-list"):
        eol = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
        for r in records if kind in ("blank-line-blocks", "conll-documents") else []:
            if not r[-1].endswith("\n"):
                r[-1] += eol
            if kind == "blank-line-blocks" and r[-1].strip():
                r.append(eol)  # the file's last record had no blank line after it
        records = [r if isinstance(r, list) or r.endswith("\n") else r + eol for r in records]
    key, value = _dev_restriction(t)
    if key == "validation_articles":  # the user's slice of dev, then its halves
        from spanbert.tasks.qa import _parse_slice

        records = records[_parse_slice(str(value))]
    elif key == "max_eval_examples":
        records = records[: int(value)]
    try:
        halves = split_half(len(records))
    except ValueError:
        raise SpanBertError(f"{dev}: found {len(records)} record(s), expected at least 2 to split dev into a "
                            f"selection half and a held-out half (or give a test: file)") from None  # fmt: skip
    for name, idx in zip(("select", "heldout"), halves):
        part = [records[i] for i in idx]
        suffix = TASKS[t.task].dev_split.suffix
        if kind == "glue-rows":
            folder = out / name
            folder.mkdir(exist_ok=True)
            for f in ("train.tsv",):  # the task folder's training file, linked, not copied
                with contextlib.suppress(FileExistsError):  # shards of one study may split at once
                    (folder / f).symlink_to((Path(t.train) / f).resolve())
            target, text = folder / "dev.tsv", "".join(head + part)
        elif kind == "squad-articles":
            target, text = out / f"{name}{suffix}", json.dumps({**head, "data": part})
        elif kind == "json-list":
            target, text = out / f"{name}{suffix}", json.dumps(part)
        elif kind in ("blank-line-blocks", "conll-documents"):
            target, text = out / f"{name}{suffix}", "".join(head + [x for r in part for x in r])
        else:
            target, text = out / f"{name}{suffix}", "".join(head + part)
        with atomic_write(target, newline="") as f:
            f.write(text)
    _write_json(done, {"dev": str(dev), "seed": HELDOUT_SEED, "records": len(records),
                       "select": len(halves[0]), "heldout": len(halves[1])})  # fmt: skip


def score_heldout(cell: Cell, t: TaskSpec, h: HeldOut) -> dict[str, Any]:
    """Score a finished cell's selected model (its folder) on the held-out data; the numbers the
    evaluation printed, the headline under "score"."""
    d = cell.dir
    log = d / "heldout_log.txt"
    steps = TASKS[t.task].heldout_commands(str(d), h.heldout, _head(t))
    text = ""
    for argv in steps:
        start = distributed.on_main(lambda: log.stat().st_size if log.is_file() else 0)
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            code, last = _run_command(argv, log)
        if code != 0:
            raise SpanBertError(f"study: scoring {cell.label} on {h.heldout} failed: {last}; see {log}")
        text = distributed.on_main(lambda s=start: log.read_bytes()[s:].decode("utf-8", errors="replace"))
    numbers = _last_json(text)
    key = TASKS[t.task].metric
    for k in (key, f"eval_{key}", f"test_{key}"):
        if k in numbers:
            return {"score": numbers[k], **numbers}
    raise SpanBertError(f"study: scoring {cell.label} on {h.heldout} printed no {key!r}; see {log}")


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


# ---------------------------------------------------------------------------------------------
# Statistics

# Two-sided 95% quantiles of Student's t (df 1..30), from the standard tables.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)  # fmt: skip


def t_quantile_975(df: int) -> float:
    """t_{0.975, df}: the table for df ≤ 30, then the Cornish-Fisher expansion (error < 1e-3)."""
    if df < 1:
        raise ValueError("df must be >= 1")
    if df <= 30:
        return _T975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


@dataclass
class Comparison:
    a: str
    b: str
    n: int
    diff: float
    """mean over seeds of score(a) − score(b), seed by seed (paired: the same fine-tuning seed)."""
    t_low: float
    t_high: float
    boot_low: float
    boot_high: float
    scored_on: str = "dev"
    """The scores compared: "held-out" (data selection did not see) or "dev" (where there is none)."""

    @property
    def verdict(self) -> str:
        if self.n < 2 or math.isnan(self.t_low):
            return "too few seeds"
        if self.t_low > 0:
            return f"{self.a} better"
        if self.t_high < 0:
            return f"{self.b} better"
        return "not distinguishable"


def paired_comparison(a: str, b: str, xs: list[float], ys: list[float], resamples: int = 10_000, seed: int = 0) -> Comparison:
    """Difference of means of paired scores with a paired-t 95% interval and a percentile-bootstrap one
    (seeds resampled with replacement, ``resamples`` times, a fixed generator so the summary is stable)."""
    if len(xs) != len(ys):
        raise ValueError("paired scores need the same number of seeds")
    d = np.asarray(xs, dtype=float) - np.asarray(ys, dtype=float)
    n = len(d)
    mean = float(d.mean()) if n else float("nan")
    if n < 2:
        return Comparison(a, b, n, mean, float("nan"), float("nan"), float("nan"), float("nan"))
    half = t_quantile_975(n - 1) * float(d.std(ddof=1)) / math.sqrt(n)
    rng = np.random.default_rng(seed)
    boots = d[rng.integers(0, n, size=(resamples, n))].mean(axis=1)
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return Comparison(a, b, n, mean, mean - half, mean + half, float(lo), float(hi))


def mean_std(xs: list[float]) -> tuple[float, float]:
    arr = np.asarray(xs, dtype=float)
    return float(arr.mean()), float(arr.std(ddof=1)) if len(arr) > 1 else 0.0


# ---------------------------------------------------------------------------------------------
# Summary


def collect(study: Study) -> dict[str, dict[str, dict[str, Any]]]:
    """results[system][task] = {lr, scores (per seed at the selected lr), by_lr, test (if any)}."""
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for s in study.systems:
        for t in study.tasks:
            by_lr: dict[float, list[float]] = {}
            held_by_lr: dict[float, list[float] | None] = {}
            sources: set[Any] = set()
            for lr in t.learning_rates:
                scores, held = [], []
                for seed in range(study.seeds):
                    markers = [_cell_dir(study, s.name, t.name, lr, seed, f) / "result.json" for f in t.folds or [None]]
                    if all(m.is_file() for m in markers):  # a seed's score: the mean over its folds
                        infos = [json.loads(m.read_text()) for m in markers]
                        scores.append(float(np.mean([i["dev"] for i in infos])))
                        sources |= {i.get("heldout_source", "legacy") for i in infos}
                        if all(i.get("heldout") is not None for i in infos):
                            held.append(float(np.mean([i["heldout"] for i in infos])))
                if len(scores) == study.seeds:
                    by_lr[lr] = scores
                    held_by_lr[lr] = held if len(held) == study.seeds else None
            if not by_lr:
                continue
            best_lr = max(by_lr, key=lambda lr: (np.mean(by_lr[lr]), -lr))  # the paper: best dev mean
            held = held_by_lr[best_lr]
            if held is not None:
                note = f"{sources.pop()}" if len(sources) == 1 else "mixed"
            elif "legacy" in sources:
                note = "none: cells finished before held-out scoring (rerun into a new output_dir to get one)"
            else:
                note = "none: the task has no test file and its dev set is not split (give test:)"
            results.setdefault(s.name, {})[t.name] = {"lr": best_lr, "scores": by_lr[best_lr], "by_lr": by_lr,
                                                      "heldout": held, "heldout_source": note}  # fmt: skip
    return results


def score_tests(study: Study, results: dict) -> None:
    """Score each task's test split with the selected models only (one per seed at the chosen rate)."""
    for s in study.systems:
        for t in study.tasks:
            cell = results.get(s.name, {}).get(t.name)
            if not t.test or cell is None:
                continue
            tests = []
            for seed in range(study.seeds):
                d = _cell_dir(study, s.name, t.name, cell["lr"], seed)
                marker = d / "test.json"
                if not distributed.on_main(marker.is_file):
                    log = d / "test_log.txt"
                    argv = ["evaluate", *_head(t), "--data", t.test, "--model", str(d), "--disable_tqdm"]
                    buf = io.StringIO()
                    with contextlib.redirect_stdout(buf):
                        code, last = _run_command(argv, log)
                    if code != 0:
                        raise SpanBertError(f"study: scoring {t.test} with {d} failed: {last}; see {log}")
                    text = (d / log.name).read_text() if distributed.is_main() else ""
                    numbers = _last_json(text)
                    distributed.on_main(lambda m=marker, n=numbers: _write_json(m, n))
                numbers = distributed.on_main(lambda m=marker: json.loads(m.read_text()))
                key = TASKS[t.task].metric
                tests.append(float(numbers.get(key, float("nan"))))
            cell["test"] = tests


def _last_json(text: str) -> dict[str, Any]:
    """The last JSON object a command printed (evaluate commands print their metrics as JSON)."""
    end = text.rfind("}")
    while end != -1:
        start = text.rfind("{", 0, end)
        while start != -1:
            try:
                value = json.loads(text[start : end + 1])
                if isinstance(value, dict):
                    return _numbers(value)
            except ValueError:
                pass
            start = text.rfind("{", 0, start)
        end = text.rfind("}", 0, end)
    return {}


def _write_json(path: Path, data: Any) -> None:
    with atomic_write(path) as f:
        f.write(json.dumps(data, indent=2) + "\n")


def table(study: Study, results: dict, split: str = "dev") -> tuple[str, list[list[str]]]:
    """(Markdown, CSV rows) in the paper's layout: a row per system, a column per task, mean ± std over
    seeds at the selected learning rate, the best mean of each column in bold. ``split="dev"``: each
    cell gives the held-out score (data selection did not see) with the dev score that selected it
    beside it, "(dev …)"; "–" where a cell has no held-out score. ``split="test"``: the test split
    scored with the selected models."""
    columns = [t.name for t in study.tasks]
    key = "scores" if split == "dev" else "test"

    def shown(r: dict[str, Any] | None) -> list[float] | None:
        """The scores a cell is ranked by: held-out where there is one (test split: the test scores)."""
        if not r:
            return None
        return (r.get("heldout") or None) if split == "dev" else (r.get("test") or None)

    best = {}
    for c in columns:
        means = [np.mean(v) for s in study.systems if (v := shown(results.get(s.name, {}).get(c)))]
        best[c] = max(means) if means else None
    md = ["| system | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    rows = [["system", *[f"{c} mean" for c in columns], *[f"{c} std" for c in columns], *[f"{c} lr" for c in columns]]]
    if split == "dev":
        rows[0] += [*[f"{c} heldout mean" for c in columns], *[f"{c} heldout std" for c in columns]]
    for s in study.systems:
        cells, means, stds, lrs, hmeans, hstds = [], [], [], [], [], []
        for c in columns:
            r = results.get(s.name, {}).get(c)
            if not r or not r.get(key):
                cells.append("–")
                means.append("")
                stds.append("")
                lrs.append("")
                hmeans.append("")
                hstds.append("")
                continue
            m, sd = mean_std(r[key])
            v = shown(r)
            if v is not None:
                hm, hsd = mean_std(v)
                text = f"{hm:.1f} ± {hsd:.1f}"
                text = f"**{text}**" if best[c] is not None and hm == best[c] else text
                hmeans.append(f"{hm:.4f}")
                hstds.append(f"{hsd:.4f}")
            else:
                text = "–"
                hmeans.append("")
                hstds.append("")
            cells.append(f"{text} (dev {m:.1f} ± {sd:.1f})" if split == "dev" else text)
            means.append(f"{m:.4f}")
            stds.append(f"{sd:.4f}")
            lrs.append(f"{r['lr']:g}")
        md.append(f"| {s.name} | " + " | ".join(cells) + " |")
        rows.append([s.name, *means, *stds, *lrs, *((hmeans + hstds) if split == "dev" else [])])
    return "\n".join(md) + "\n", rows


def heldout_notes(study: Study, results: dict) -> list[str]:
    """One line per task: what its held-out score is (or why it has none)."""
    out = []
    for t in study.tasks:
        notes = sorted({r[t.name]["heldout_source"] for r in results.values() if t.name in r})
        if notes:
            out.append(f"- {t.name}: held-out = {'; '.join(notes)}")
    return out


def comparisons(study: Study, results: dict) -> list[tuple[str, Comparison]]:
    out = []
    names = [s.name for s in study.systems]
    for t in study.tasks:
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                ra, rb = results.get(a, {}).get(t.name), results.get(b, {}).get(t.name)
                if ra and rb:
                    # on the held-out scores when both have them: the dev scores selected the models
                    on = "heldout" if ra.get("heldout") and rb.get("heldout") else "scores"
                    c = paired_comparison(a, b, ra[on], rb[on])
                    c.scored_on = "held-out" if on == "heldout" else "dev"
                    out.append((t.name, c))
    return out


def summarize(study: Study) -> Path:
    """Write OUT/summary/ (tables, comparisons, plots) from the finished cells; returns the folder."""
    results = collect(study)
    score_tests(study, results)
    summary = Path(study.output_dir) / "summary"

    def write() -> None:
        summary.mkdir(parents=True, exist_ok=True)
        md, rows = table(study, results, "dev")
        parts = [f"## Held-out score (dev score) (mean ± std over {study.seeds} seeds at the learning rate with the best dev mean)\n",
                 "Each cell: the score on data that selection did not see (below, per task), then in parentheses the "
                 "dev score that selected the checkpoint and the learning rate (optimistic: used twice for selection). "
                 "Bold: the best held-out mean.\n", *[n + "\n" for n in heldout_notes(study, results)], "\n", md]
        if any(r.get("test") for rs in results.values() for r in rs.values()):
            tmd, trows = table(study, results, "test")
            parts += ["\n## Test (the selected models only)\n", tmd]
            _write_csv(summary / "table_test.csv", trows)
        with atomic_write(summary / "table.md") as f:
            f.write("\n".join(parts))
        _write_csv(summary / "table.csv", rows)
        comps = comparisons(study, results)
        lines = ["| task | A | B | scored on | mean A − B | 95% t interval | 95% bootstrap interval | verdict |",
                 "|---|---|---|---|---|---|---|---|"]  # fmt: skip
        crow = [["task", "a", "b", "n", "diff", "t_low", "t_high", "boot_low", "boot_high", "verdict", "scored_on"]]
        for task, c in comps:
            lines.append(f"| {task} | {c.a} | {c.b} | {c.scored_on} | {c.diff:+.2f} | [{c.t_low:+.2f}, {c.t_high:+.2f}] | "
                         f"[{c.boot_low:+.2f}, {c.boot_high:+.2f}] | {c.verdict} |")  # fmt: skip
            crow.append([task, c.a, c.b, str(c.n), f"{c.diff:.4f}", f"{c.t_low:.4f}", f"{c.t_high:.4f}",
                         f"{c.boot_low:.4f}", f"{c.boot_high:.4f}", c.verdict, c.scored_on])  # fmt: skip
        with atomic_write(summary / "comparisons.md") as f:
            f.write("\n".join(lines) + "\n")
        _write_csv(summary / "comparisons.csv", crow)
        with atomic_write(summary / "results.json") as f:
            f.write(json.dumps(results, indent=2, default=str) + "\n")
        _plots(study, results, summary)

    distributed.on_main(write)
    return summary


def _write_csv(path: Path, rows: list[list[str]]) -> None:
    with atomic_write(path, newline="") as f:
        csv.writer(f).writerows(rows)


def _plots(study: Study, results: dict, summary: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("note: no plots (pip install 'spanbert[plot]' for matplotlib)", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    drawn = False
    for s in study.systems:
        log = Path(study.output_dir) / "pretrain" / s.name / "log.jsonl"
        if not log.is_file():
            continue
        steps, losses, esteps, elosses = [], [], [], []
        for line in log.read_text().splitlines():
            with contextlib.suppress(ValueError):
                rec = json.loads(line)
                if "train/mlm_loss" in rec:
                    steps.append(rec["step"])
                    losses.append(rec["train/mlm_loss"])
                if "eval/mlm_loss" in rec:
                    esteps.append(rec["step"])
                    elosses.append(rec["eval/mlm_loss"])
        if steps:
            line = ax.plot(steps, losses, label=f"{s.name} (train)")[0]
            if esteps:
                ax.plot(esteps, elosses, "o--", color=line.get_color(), label=f"{s.name} (held out)")
            drawn = True
    if drawn:
        ax.set_xlabel("step")
        ax.set_ylabel("MLM loss (nats)")
        ax.set_title(f"pre-training, {study.budget_tokens:,} tokens per system")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(summary / "pretraining.png", dpi=120)
    plt.close(fig)
    for t in study.tasks:
        names = [s.name for s in study.systems if t.name in results.get(s.name, {})]
        if not names:
            continue
        stats = [mean_std(results[n][t.name]["scores"]) for n in names]
        fig, ax = plt.subplots(figsize=(max(4, 1.2 * len(names)), 3.5))
        ax.bar(range(len(names)), [m for m, _ in stats], yerr=[sd for _, sd in stats], capsize=4)
        ax.set_xticks(range(len(names)), names, rotation=20, fontsize=8)
        ax.set_ylabel(f"dev {TASKS[t.task].metric}")
        ax.set_title(f"{t.name}: mean ± std over {study.seeds} seeds")
        fig.tight_layout()
        fig.savefig(summary / f"task_{t.name}.png", dpi=120)
        plt.close(fig)


# ---------------------------------------------------------------------------------------------
# Dry run


def dry_run(study: Study, probe_steps: int = 0) -> str:
    """The plan with its cost: tokens and steps per cell, and time from a short measured probe."""
    cells = plan(study)
    pre = [c for c in cells if c.kind == "pretrain"]
    fine = [c for c in cells if c.kind == "finetune"]
    done = sum(is_done(c) for c in cells)
    lines = [
        f"study: {len(study.systems)} systems × {len(study.tasks)} tasks; {len(cells)} cells ({done} finished)",
        f"pre-training: {len(pre)} cells, {study.budget_tokens:,} tokens each = {study.pretrain_steps:,} steps of "
        f"{study.batch_size} × {study.max_seq_length} tokens ({study.model} model)",
        f"fine-tuning: {len(fine)} cells ({', '.join(f'{t.name}: {len(t.learning_rates)} lr × {study.seeds} seeds' for t in study.tasks)})",
    ]
    for t in study.tasks:
        h = None if study_is_legacy(study) else heldout_plan(study, t, t.folds[0] if t.folds else None)
        what = {"test": f"its test split ({h.heldout})" if h and h.source == "test" else "",
                "dev half": f"the held-out half of its dev set (seed {HELDOUT_SEED}); cells select on the other half"}
        lines.append(f"held-out {t.name}: " + (what[h.source] if h else "none (cells finished before held-out scoring, "
                     "or no test file and a dev set that is not split)"))  # fmt: skip
    if probe_steps and pre:
        per_step, what = _probe(study, pre[0], probe_steps)
        lines.append(f"probe: {probe_steps} steps of {pre[0].system} on {what}, at {per_step:.2f} s a step → about "
                     f"{_human(per_step * study.pretrain_steps)} per system, {_human(per_step * study.pretrain_steps * len(pre))} "
                     f"for all pre-training on this machine (fine-tuning not probed)")  # fmt: skip
    if fine:
        line, large = finetune_estimate(study)
        lines.append(("warning: this study's fine-tuning is very large for this machine; " if large else "") + line)
    for c in cells:
        lines.append(f"  {'[done] ' if is_done(c) else ''}{c.label}: {c.dir}")
    return "\n".join(lines)


# The probe's text when the shared corpus is not prepared yet: enough for a tokenizer and the blocks of
# a few steps, read in seconds (the full corpus is the study's first step, not the dry run's).
PROBE_SAMPLE_CHARS = 2_000_000


def _probe_corpus(study: Study, tmp: Path) -> tuple[str, str]:
    """(preprocessed corpus folder, what it is) for the probe, writing only under ``tmp``: the study's
    shared corpus when an earlier run prepared it, the study's own corpus when it is already
    preprocessed, else a sample of the first ``PROBE_SAMPLE_CHARS`` characters tokenized here."""
    import gzip

    from spanbert.data import is_preprocessed, preprocess
    from spanbert.tokenization import corpus_files, load_tokenizer, train_tokenizer

    shared = shared_dir(study)
    if (shared / "prepared.json").is_file() and is_preprocessed(shared / "corpus"):
        return str(shared / "corpus"), "the study's prepared corpus"
    needs_candidates = sorted({k for s in study.systems if not s.checkpoint for k in _candidate_kinds(s)})
    if is_preprocessed(study.corpus) and not needs_candidates and not study.tokenizer:
        return study.corpus, "the preprocessed corpus"
    files = corpus_files([study.corpus])
    jsonl = ".jsonl" in files[0].suffixes
    sample = tmp / ("sample.jsonl" if jsonl else "sample.txt")
    left = PROBE_SAMPLE_CHARS
    with open(sample, "w", encoding="utf-8") as out:
        for f in (f for f in files if (".jsonl" in f.suffixes) == jsonl):
            opener = gzip.open if f.suffix == ".gz" else open
            with opener(f, "rt", encoding="utf-8", errors="replace") as src:
                for line in src:  # whole lines, so documents and JSON records stay intact
                    out.write(line if line.endswith("\n") else line + "\n")
                    left -= len(line)
                    if left <= 0:
                        break
            if left <= 0:
                break
    if study.tokenizer:
        tok = load_tokenizer(study.tokenizer)
    else:
        tok = train_tokenizer([sample], vocab_size=study.vocab_size, output_dir=tmp / "tokenizer", show_progress=False)
    preprocess([sample], tok, tmp / "corpus", num_workers=0, candidates=needs_candidates, progress=False)
    what = f"a {PROBE_SAMPLE_CHARS / 1e6:g} M-character sample of the corpus, vocabulary {tok.vocab_size:,}"
    return str(tmp / "corpus"), what


def _probe(study: Study, cell: Cell, steps: int) -> tuple[float, str]:
    """(seconds per pre-training step of ``cell``, the text it ran on), measured over ``steps`` steps
    after the first (the first pays for start-up): a step's nominal tokens over the median logged
    tokens/s. Everything it writes is in a temporary folder: a dry run leaves the study's folder as
    it was (no vocabulary trained, no corpus preprocessed there)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        corpus, what = distributed.on_main(lambda: _probe_corpus(study, Path(tmp)))
        argv = list(cell.argv)
        argv[argv.index("--max_steps") + 1] = str(steps + 1)
        argv[argv.index("--corpus") + 1] = corpus
        out = Path(tmp) / "probe"
        argv += ["--output_dir", str(out), "--save_steps", "0", "--max_eval_blocks", "0", "--logging_steps", "1",
                 "--report_to", "none"]  # fmt: skip
        code, last = _run_command(argv, Path(tmp) / "probe.log")
        if code != 0:
            raise SpanBertError(f"study: the probe failed: {last}")
        rates = [json.loads(x).get("train/tokens_per_s") for x in (out / "log.jsonl").read_text().splitlines()]
        rates = [r for r in rates[1:] if r]
    if not rates:
        raise SpanBertError("study: the probe logged no throughput; run without --probe_steps")
    return study.batch_size * study.max_seq_length / float(np.median(rates)), what


_human = cost.human_duration

# Fine-tuning epochs assumed for a task whose options name none (most tasks' defaults are 2 to 4).
ASSUMED_EPOCHS = 3
# Characters of a training file per token, for a file whose examples are not counted (English text
# in WordPiece: about 4; JSON keys and markup make this an overestimate of the tokens, on purpose).
CHARS_PER_TOKEN = 4


def finetune_estimate(
    study: Study, device_type: str | None = None, threads: int | None = None, over: float = cost.LONG_PLAN_SECONDS
) -> tuple[str, bool]:
    """(a line estimating every fine-tuning cell's cost, whether it exceeds ``over`` seconds: a day, or
    `cost.LONG_RUN_SECONDS` for the refusal of a week).

    Tokens of one cell: ``max_train_examples`` x ``max_seq_length`` when the task's options bound the
    examples, else the training file's size / `CHARS_PER_TOKEN`; times its ``num_train_epochs``
    (`ASSUMED_EPOCHS` when unnamed); through the encoder of the study's model size
    (`cost.encoder_params`), on this machine (`cost.machine_flops`). Reads file sizes only."""
    import torch

    from spanbert.config import MODEL_PRESETS

    device_type = device_type or ("cuda" if torch.cuda.is_available() else "cpu")
    threads = threads or torch.get_num_threads()
    size = MODEL_PRESETS.get(study.model, MODEL_PRESETS["base"])
    params = cost.encoder_params(size["hidden_size"], size["num_hidden_layers"], size.get("intermediate_size"))
    cells = {t.name: 0 for t in study.tasks}
    for c in plan(study):
        if c.kind == "finetune":
            cells[c.task] += 1
    total_seconds, parts = 0.0, []
    for t in study.tasks:
        epochs = float(t.options.get("num_train_epochs", ASSUMED_EPOCHS))
        if "max_train_examples" in t.options:
            per_epoch = int(t.options["max_train_examples"]) * int(t.options.get("max_seq_length", study.max_seq_length))
        else:
            path = Path(t.train)
            files = [f for f in path.rglob("*") if f.is_file()] if path.is_dir() else [path] if path.is_file() else []
            per_epoch = sum(f.stat().st_size for f in files) // CHARS_PER_TOKEN
        seconds = cost.training_flops(params, per_epoch * epochs) / cost.machine_flops(device_type, threads)
        total_seconds += seconds * cells[t.name]
        parts.append(f"{t.name}: {cells[t.name]} × {_human(seconds)}")
    line = (
        f"fine-tuning estimate: {_human(total_seconds)} for all {sum(cells.values())} cells on {device_type} "
        f"({'; '.join(parts)}; {study.model} encoder, {ASSUMED_EPOCHS} epochs where none is named, a training "
        f"file's characters / {CHARS_PER_TOKEN} as its tokens where max_train_examples is not set)"
    )
    return line, total_seconds > over


# ---------------------------------------------------------------------------------------------
# CLI


def _parser(prog: str) -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog=prog,
        description="Rerun the paper's comparisons (Table 1: BERT baselines vs SpanBERT; Table 6: masking "
        "schemes; Table 7: NSP / single sequence / SBO) on a corpus, budget and tasks of your choice. "
        "Every cell is its own folder; a killed study resumes where it stopped.",
        epilog="examples:\n  spanbert study --preset table1 --scale tiny --dry-run\n"
        "  spanbert study --preset table1 --scale tiny --output_dir runs/study-table1\n"
        "  spanbert study my_study.yaml --only summary",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("study", nargs="?", help="the study's YAML file (see docs/study.md); or use --preset")
    p.add_argument("--preset", choices=sorted(PRESET_SYSTEMS), help="one of the paper's comparisons instead of a file")
    p.add_argument("--scale", default="tiny", choices=("tiny", "small", "base"),
                   help="preset size: tiny (CPU smoke test, < 1 h on 2 cores), small, base (GPU) (default: tiny)")
    p.add_argument("--data_root", "--data-root", default="../shared/data", help="presets: the data folder (default: ../shared/data)")
    p.add_argument("--output_dir", "--output-dir", help="where the cells and the summary go (default: the study's, or runs/study-PRESET-SCALE)")
    p.add_argument("--dry-run", "--dry_run", action="store_true", help="print the plan and its cost; run nothing")
    p.add_argument("--probe_steps", "--probe-steps", type=int, default=20,
                   help="with --dry-run: time this many pre-training steps to estimate the cost (0: no probe)")
    p.add_argument("--only", choices=("all", "pretrain", "finetune", "summary"), default="all",
                   help="run only these cells (summary: only collect finished cells)")
    p.add_argument("--shard", default="0/1", help="I/N: this process runs every N-th fine-tuning cell, from the I-th (parallel devices)")
    p.add_argument("--threads", type=int, default=0, metavar="N",
                   help="CPU threads of every cell (default 0: the cores other processes, other shards included, leave free)")
    p.add_argument("--seeds", type=int, help="override the number of fine-tuning seeds")
    p.add_argument("--budget_tokens", "--budget-tokens", type=int, help="override the pre-training budget in tokens")
    p.add_argument("--write_config", "--write-config", type=output_file,
                   help="write the study (e.g. a preset) as YAML to this file and stop")
    p.add_argument("--allow_long_run", "--allow-long-run", action="store_true",
                   help="start a study whose fine-tuning is estimated at more than a week on this machine anyway; "
                        "passed to every cell's command, whose own plan is refused over a week without it")
    return p  # fmt: skip


def _shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise SpanBertError(f"--shard: found {text!r}, expected I/N (e.g. 0/4)") from None
    if not (n >= 1 and 0 <= i < n):
        raise SpanBertError(f"--shard: found {text!r}, expected 0 <= I < N")
    return i, n


def main(argv: list[str], prog: str = "spanbert study") -> int:
    args = _parser(prog).parse_args(argv)
    if bool(args.study) == bool(args.preset):
        raise SpanBertError("found " + ("both a study file and --preset" if args.study else "neither a study file nor --preset")
                            + ", expected exactly one")  # fmt: skip
    shard = _shard(args.shard)
    if args.preset:
        data = preset(args.preset, args.scale, args.data_root)
        data["output_dir"] = args.output_dir or f"runs/study-{args.preset}-{args.scale}"
        where = f"--preset {args.preset} --scale {args.scale}"
    else:
        from spanbert.config import _read_yaml

        data, lines = _read_yaml(args.study)
        data = {**data, "__lines__": {**lines, **_item_lines(Path(args.study))}}
        if args.output_dir:
            data["output_dir"] = args.output_dir
        where = args.study
    if args.seeds is not None:
        data["seeds"] = args.seeds
    if args.budget_tokens is not None:
        data["budget_tokens"] = args.budget_tokens
    if args.write_config:
        import yaml

        data.pop("__lines__", None)
        with atomic_write(args.write_config) as f:
            yaml.safe_dump(data, f, sort_keys=False)
        distributed.print0(f"wrote {args.write_config}; run it with: spanbert study {args.write_config}")
        return 0
    study = study_from_dict(data, where)
    # the output contract before any work, a dry run's too: it plans cells into this folder
    check_output(study.output_dir, folder=True, ours=holds_a_study)
    distributed.init_distributed(distributed.resolve_device("auto"))
    if args.dry_run:
        distributed.print0(dry_run(study, args.probe_steps))
        return 0
    if args.only in ("all", "finetune"):
        line, large = distributed.on_main(lambda: finetune_estimate(study))  # one decision, rank 0's machine
        week = distributed.on_main(lambda: finetune_estimate(study, over=cost.LONG_RUN_SECONDS)[1])
        if week and not args.allow_long_run:
            raise SpanBertError(f"this study's fine-tuning would take more than a week on this machine ({line}); "
                                "make it smaller (fewer tasks, seeds or learning rates, max_train_examples, "
                                "num_train_epochs), or pass --allow_long_run to start it anyway")  # fmt: skip
        if large:  # said before the first cell runs; every cell's own `finetune` warns again in its log
            distributed.eprint0(f"warning: this study's fine-tuning is very large for this machine; {line}")
    with study_lock(study.output_dir, shard):
        if args.only != "summary":
            run_study(study, args.only, shard, args.allow_long_run)
        if shard[1] > 1:
            distributed.print0(f"shard {shard[0]}/{shard[1]} finished; when every shard has: spanbert study ... --only summary")
            return 0
        summary = summarize(study)
    if distributed.is_main():
        text = (summary / "table.md").read_text()
        print(text)
        print(f"summary: {summary}/ (table.md, table.csv, comparisons.md, *.png)")
        print(f"next: read {summary / 'comparisons.md'} to see which differences the seeds support")
    return 0


# ---------------------------------------------------------------------------------------------
# `spanbert curve`: fine-tuning score against pre-training steps (BERT Appendix C.1, Figure 5)


def run_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """The complete `checkpoint-N` folders of a finished pre-training run, by step; an error naming the
    folder when it is not a finished run or keeps none (checked before anything is exported)."""
    from spanbert.trainer import _ckpt_step, _complete

    final = run_dir / "final"
    if not (final / "config.json").is_file():
        raise SpanBertError(f"{run_dir}: found no final/config.json, expected a finished `spanbert pretrain` run")
    found = [
        (int(_ckpt_step(p)), p)
        for p in sorted((p for p in run_dir.glob("checkpoint-*") if _ckpt_step(p) is not None), key=_ckpt_step)
        if _complete(p) is None
    ]
    if not found:
        raise SpanBertError(
            f"{run_dir}: found no complete checkpoint-N folder, expected the checkpoints of the run (pre-train "
            f"with --save_steps N --save_total_limit M to keep M of them; the last is the final model)"
        )
    return found


def export_checkpoints(run_dir: Path, out: Path) -> list[tuple[int, Path]]:
    """Every complete `checkpoint-N` of a pre-training run as a model folder ``out/step-N`` (exported
    once, with the tokenizer and heads of the run's `final/`); returns [(step, folder)] by step."""
    from spanbert.model import SpanBertForPreTraining
    from spanbert.tasks.common import load_tokenizer_for

    checkpoints = run_checkpoints(run_dir)
    final = run_dir / "final"
    tokenizer = load_tokenizer_for(final)
    remove_debris(out)  # what a killed export left (`.step-N.tmp-*`): the step is exported again
    models: list[tuple[int, Path]] = []
    for step, ckpt in checkpoints:
        target = out / f"step-{step}"
        if not (target / "config.json").is_file():
            import torch

            model = SpanBertForPreTraining.from_pretrained(final)
            state = torch.load(ckpt / "state.pt", map_location="cpu", weights_only=True)
            model.load_state_dict(state["model"])
            with atomic_dir(target) as tmp:  # whole or absent: a killed curve redoes the step
                model.save_pretrained(tmp, tokenizer=tokenizer)
        models.append((step, target))
    return models


def _curve_parser(prog: str) -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog=prog,
        description="Fine-tune from every saved checkpoint of a pre-training run and draw the score against "
        "the pre-training step (BERT Appendix C.1, Figure 5): when is a (continued) pre-training run good "
        "enough? Keep the checkpoints when pre-training (--save_total_limit, e.g. 100). Resumable like a study.",
        epilog="example:\n  spanbert curve runs/spanbert-small --task glue --glue_task SST-2 "
        "--train ../shared/data/glue/SST-2 --learning_rate 3e-4 --option max_train_examples=2000",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("run", help="a `spanbert pretrain` output folder (checkpoint-N/ and final/)")
    p.add_argument("--task", required=True, choices=list(TASKS), help="the fine-tuning task")
    p.add_argument("--train", required=True, help="training file (glue: the task folder; coref: LitBank folder or file)")
    p.add_argument("--dev", default="", help="dev file (not for glue)")
    p.add_argument("--glue_task", "--glue-task", default="", help="glue only: SST-2, CoLA, MRPC, STS-B, RTE")
    p.add_argument("--fold", type=int, action="append", default=[], help="coref on LitBank: a fold of the ten-fold split")
    p.add_argument("--learning_rate", "--learning-rate", type=float, default=3e-5, help="fine-tuning learning rate")
    p.add_argument("--seeds", type=int, default=1, help="fine-tuning seeds per checkpoint (default: 1)")
    p.add_argument("--threads", type=int, default=0, metavar="N",
                   help="CPU threads (default 0: the cores other processes leave free, re-measured every second)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a further `spanbert finetune TASK` option (repeatable), e.g. num_train_epochs=1")
    p.add_argument("--output_dir", "--output-dir", help="default: RUN/curve-TASK")
    return p  # fmt: skip


def _option_value(text: str) -> Any:
    import yaml

    return yaml.safe_load(text)


def curve_main(argv: list[str], prog: str = "spanbert curve") -> int:
    args = _curve_parser(prog).parse_args(argv)
    run = Path(args.run)
    options = {}
    for item in args.option:
        if "=" not in item:
            raise SpanBertError(f"--option: found {item!r}, expected KEY=VALUE")
        key, value = item.split("=", 1)
        options[key.strip().lstrip("-")] = _option_value(value)
    task = TaskSpec(args.task, train=args.train, dev=args.dev, glue_task=args.glue_task, folds=args.fold,
                    learning_rates=[args.learning_rate], options=options)  # fmt: skip
    out = check_output(args.output_dir or run / f"curve-{task.name}", folder=True, ours=holds_a_study)
    # everything the arguments decide is checked before a checkpoint is exported (issue 22.13): the
    # run, then the task, its files, the grid and the seeds, with the run's final model standing in for
    # the exported ones
    run_checkpoints(run)
    check_study(Study(systems=[SystemSpec("final", checkpoint=str(run / "final"))], tasks=[task], seeds=args.seeds,
                      output_dir=str(out)), prog)  # fmt: skip
    distributed.init_distributed(distributed.resolve_device("auto"))
    with study_lock(out):
        models = distributed.on_main(lambda: [(s, str(p)) for s, p in export_checkpoints(run, out / "models")])
        study = Study(systems=[SystemSpec(f"step-{s}", checkpoint=p) for s, p in models], tasks=[task],
                      seeds=args.seeds, output_dir=str(out))  # fmt: skip
        check_study(study, prog)
        run_study(study)
    results = collect(study)

    def write() -> str:
        metric = TASKS[task.task].metric
        rows = [["step", f"dev {metric} mean", "std", "seeds"]]
        md = [f"| pre-training step | dev {metric} (mean ± std over {args.seeds} seeds) |", "|---|---|"]
        points = []
        for step, _ in models:
            r = results.get(f"step-{step}", {}).get(task.name)
            if not r:
                continue
            m, sd = mean_std(r["scores"])
            points.append((step, m, sd))
            rows.append([str(step), f"{m:.4f}", f"{sd:.4f}", str(len(r["scores"]))])
            md.append(f"| {step:,} | {m:.1f} ± {sd:.1f} |")
        with atomic_write(out / "curve.md") as f:
            f.write("\n".join(md) + "\n")
        _write_csv(out / "curve.csv", rows)
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt

            fig, ax = plt.subplots(figsize=(6, 4))
            ax.errorbar([p[0] for p in points], [p[1] for p in points], yerr=[p[2] for p in points], marker="o", capsize=3)
            ax.set_xlabel("pre-training step")
            ax.set_ylabel(f"{task.name} dev {metric}")
            ax.set_title(f"{run.name}: fine-tuning score vs pre-training")
            fig.tight_layout()
            fig.savefig(out / "curve.png", dpi=120)
            plt.close(fig)
        except ImportError:
            print("note: no curve.png (pip install 'spanbert[plot]' for matplotlib)", file=sys.stderr)
        return "\n".join(md)

    text = distributed.on_main(write)
    distributed.print0(text)
    distributed.print0(f"curve: {out}/curve.md, curve.csv, curve.png")
    return 0
