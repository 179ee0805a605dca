"""What a task is to the rest of the package: a `TaskSpec`, what its actions return (`Results`), and
the three things a task knows about its data that a study needs (`DevSplit`, `SubTasks`, `Folds`).

Each task file exports its specs (``SPECS = {name: TaskSpec(...)}``); `spanbert.tasks.TASKS` collects
them. The Python API (`spanbert.tasks.api`), the command line (``spanbert finetune|predict|evaluate
<task>``) and `spanbert.study` read only the registry, so a new task is one file plus one registry
entry (docs/architecture.md, "Adding a task").

This module imports no torch and no task: the registry and the CLI's help stay light; a task file's
heavy imports happen when its spec is first used.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from spanbert import _aliases
from spanbert.distributed import print0
from spanbert.errors import SpanBertError

ACTIONS = ("finetune", "predict", "evaluate")

RESULTS_FILE = "dev_results.json"
"""The one file name under which every task's `finetune` leaves the dev metrics of the saved model."""

OLD_RESULTS_FILES = ("eval_results.json", "finetune_results.json")
"""Names an older run folder may hold its dev metrics under (QA, coreference): still read back."""


def flat_numbers(d: Any) -> dict[str, float]:
    """Every number of a (nested) results mapping under its own key; the first of a key wins, so a
    headline at the top is kept over a per-split one of the same name further down."""
    out: dict[str, float] = {}
    if isinstance(d, Mapping):
        for k, v in d.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out.setdefault(str(k), float(v))
            elif isinstance(v, Mapping):
                for kk, vv in flat_numbers(v).items():
                    out.setdefault(kk, vv)
    return out


@dataclass(frozen=True)
class Results:
    """What `finetune` and `evaluate` return: the task's scores (0-100), and for a fine-tuning run the
    step whose weights were saved and the folder they were saved in."""

    scores: dict[str, Any]
    """Every number the action computed, as ``spanbert evaluate`` prints them (nested where the task
    reports per split)."""
    metric: str
    """The key of the headline score (`TaskSpec.metric`)."""
    best_step: int | None = None
    """The training step whose weights were saved, when the model was selected on dev."""
    output_dir: Path | None = None
    """The fine-tuned model's folder (`finetune`)."""

    @property
    def numbers(self) -> dict[str, float]:
        """`scores` flattened: every number under its own key."""
        return flat_numbers(self.scores)

    @property
    def score(self) -> float:
        """The headline score: `metric`, as the action named it (a dev or test prefix included)."""
        numbers = self.numbers
        for key in (self.metric, f"dev_{self.metric}", f"eval_{self.metric}", f"test_{self.metric}"):
            if key in numbers:
                return numbers[key]
        raise SpanBertError(f"found no {self.metric!r} among the scores {sorted(numbers)[:12]}, expected the "
                            "task's headline score")  # fmt: skip


def read_results(folder: str | Path, metric: str, results_file: str = RESULTS_FILE) -> Results:
    """The `Results` a finished `finetune` left in ``folder`` (its results file, or the name an older
    run wrote it under)."""
    folder = Path(folder)
    path = next((p for p in (folder / n for n in (results_file, *OLD_RESULTS_FILES)) if p.is_file()),
                folder / results_file)  # fmt: skip
    try:
        scores = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise SpanBertError(f"{path}: cannot read the run's dev results ({e})") from None
    if not isinstance(scores, dict):
        raise SpanBertError(f"{path}: found {type(scores).__name__}, expected a mapping of scores")
    step = scores.get("selected_step")
    return Results(scores, metric, step if isinstance(step, int) else None, folder)


# --------------------------------------------------------------------------- what a study asks of a task


class DevSplit(Protocol):
    """How a task's dev data is cut into a selection half and a held-out half (`spanbert.tasks.splits`
    has the usual file formats; a task with another layout writes its own, GLUE's task folders)."""

    restriction: tuple[str, ...]
    """Options that restrict dev (SQuAD's ``validation_articles``): applied before the cut, so both
    halves come from the part of dev the user chose, and then left out of the runs' options."""

    def halves(self, train: str, dev: str, options: Mapping[str, Any], folder: Path) -> tuple[Path, Path] | None:
        """(selection half, held-out half) that `split` writes under ``folder``; None when this dev set
        is not split (several dev files, no file to cut). Reads nothing but names."""
        ...

    def split(self, train: str, dev: str, options: Mapping[str, Any], folder: Path) -> dict[str, Any]:
        """Write both halves under ``folder``, each in the task's own format; what was cut (the file, the
        seed, the number of records in all and in each half), for the record a study keeps."""
        ...


@dataclass(frozen=True)
class SubTasks:
    """A task that is several tasks (GLUE's nine): the option that picks one and what each is called."""

    option: str
    """The task option that names the sub-task (GLUE: ``task``, i.e. ``--task SST-2``)."""
    key: str
    """What a study file and ``spanbert curve`` call the choice (GLUE: ``glue_task``)."""
    names: tuple[str, ...]
    """Every sub-task, in the order a list of them is shown."""
    canonical: Callable[[str], str | None]
    """A user's spelling (``sst2``) -> the sub-task's name, or None when it is none of them."""
    check: Callable[[str, str], str | None] = lambda name, train: None
    """(sub-task, training data) -> what is wrong with the data for it (a missing file), or None."""


@dataclass(frozen=True)
class Folds:
    """A data set published as k folds (LitBank's ten-fold split): a run trains and selects on one fold's
    train and dev files and is scored on its test file; a study's score is the mean over the folds."""

    name: str
    """The folder a study writes the folds' files under (``shared/NAME/foldK``)."""
    count: int
    """How many folds there are (0 .. count - 1)."""
    source: str
    """What the training data must be for folds, in words ("the LitBank folder (with tenfold_splits/)")."""
    applies: Callable[[str], bool]
    """Whether a run's training data names the folds' source (else it is a plain training file)."""
    holds_folds: Callable[[str], bool]
    """Whether that source really holds the split (checked before any work)."""
    prepare: Callable[[str, int, Path], None]
    """(source, fold, folder): write the fold's train, dev and test files (`files`) into ``folder``."""
    files: Callable[[Path], tuple[Path, Path, Path]] = lambda folder: (
        folder / "train", folder / "dev", folder / "test")  # fmt: skip
    """The (train, dev, test) files `prepare` writes into a folder."""


Action = Callable[[str, Any], Any]
"""``action(task, opts)``: one of ``spanbert finetune|predict|evaluate <task>``, a function of the action's
options (`TaskSpec.options`: a dataclass, `spanbert.tasks.options`); ``finetune`` and ``evaluate`` return
`Results`, ``predict`` the `Path` it wrote."""


@dataclass(frozen=True)
class TaskSpec:
    """One task as the Python API, the CLI and the study see it."""

    name: str
    """The task name of ``spanbert finetune <name>``."""
    description: str
    """One line for ``spanbert finetune`` (the task list)."""
    finetune: Action
    predict: Action
    evaluate: Action
    metric: str
    """The headline dev metric: the key in `RESULTS_FILE` and in `Results.scores` (0-100)."""
    data: str
    """The data the task needs (format), for the task list and the docs."""
    dev_split: DevSplit | None = None
    """How a study holds out half of dev when no test file is given; None: the task has no dev half."""
    scores_test: bool = False
    """``evaluate --data FILE --model DIR`` scores a labelled file with a model (a study's ``test:``)."""
    data_options: Callable[[str, str], dict[str, str]] | None = None
    """(train, dev) -> the `finetune` options naming them; default ``--train_file``/``--validation_file``."""
    dev_in_train: bool = False
    """The training data is a folder that holds the dev split too (a GLUE task folder): no dev file is given."""
    score_model: Callable[[str, str, dict[str, Any]], Results] | None = None
    """(model folder, labelled data, options picking a sub-task) -> its scores; default: ``evaluate --data
    DATA --model DIR`` (`spanbert.tasks.api.score`)."""
    subtasks: SubTasks | None = None
    """The sub-tasks a run picks one of (GLUE's); None: the task is one task."""
    folds: Folds | None = None
    """The fold split its data may come as (LitBank's); None: plain train and dev files only."""
    results_file: str = RESULTS_FILE
    options: Mapping[str, type] = dataclasses.field(default_factory=dict)
    """Action -> the dataclass of its options (`spanbert.tasks.options`), one for each of ``finetune``,
    ``predict`` and ``evaluate``, from a module that imports no torch (the registry names it too, for
    ``--help``: `spanbert.tasks.registry`)."""
    cache_option: str = ""
    """The option naming a cache of encoder features the task's runs share (the probes' ``features_cache``):
    a study points it into its own shared folder, and its dry run times a cell with the cache cold and warm
    (the features are computed once per encoder and data, then reused by every rate and row)."""
    example_stats: bool = False
    """Scoring a model on labelled data (``evaluate --model``, or `score_model`) takes ``example_stats=FILE``
    and writes there the per-example statistics of its headline score (`spanbert.metrics.resample`), from
    which a study's intervals resample the test examples."""

    def finetune_data(self, train: str, dev: str) -> dict[str, str]:
        """The `finetune` options naming the training and dev data (what a study cell passes)."""
        if self.data_options is not None:
            return self.data_options(train, dev)
        return {"train_file": train, "validation_file": dev}

    def subtask_options(self, subtask: str) -> dict[str, str]:
        """The options that pick ``subtask`` (``{"task": "SST-2"}``); none for a task without sub-tasks."""
        return {self.subtasks.option: subtask} if self.subtasks is not None and subtask else {}

    def read_results(self, folder: str | Path) -> Results:
        """The `Results` a finished `finetune` of this task left in ``folder``."""
        return read_results(folder, self.metric, self.results_file)


def print_results(value: Any) -> None:
    """What ``spanbert <action> <task>`` prints of the value its action returned: the scores as JSON
    (``finetune`` and ``evaluate``; once under torchrun). A ``predict`` says what it wrote itself."""
    if isinstance(value, Results):
        print0(json.dumps(value.scores, indent=2, sort_keys=True))


__getattr__ = _aliases.getter(__name__)  # the old spellings of names that moved (`spanbert._aliases`)
