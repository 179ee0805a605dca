"""What a task is to the rest of the package: a `TaskSpec`, and the one skeleton that runs its actions.

Each task file exports its specs (``SPECS = {name: TaskSpec(...)}``); `spanbert.tasks.TASKS` collects
them. `cli.py` (``spanbert finetune|predict|evaluate <task>``) and `spanbert.study` read only the
registry, so a new task is one file plus one registry entry (docs/architecture.md, "Adding a task").

This module imports no torch and no task: the registry (`spanbert.tasks`) and the CLI's help stay
light; a task file's heavy imports happen when its spec is first used.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from spanbert.errors import SpanBertError

ACTIONS = ("finetune", "predict", "evaluate")

RESULTS_FILE = "dev_results.json"
"""The one file name under which every task's `finetune` leaves the dev metrics of the saved model."""

OLD_RESULTS_FILES = ("eval_results.json", "finetune_results.json")
"""Names an older run folder may hold its dev metrics under (QA, coreference): still read back."""

Action = Callable[[str, list[str], str], int]
"""``action(task, argv, prog) -> exit code``: one of ``spanbert finetune|predict|evaluate <task> ARGV``."""


@dataclass(frozen=True)
class DevSplit:
    """How a study cuts a task's dev data into a selection half and a held-out half."""

    suffix: str
    """File suffix of the halves ('' for a GLUE task folder)."""
    kind: str
    """The kind of record the file is a list of: squad-articles, jsonl-after-header, glue-rows,
    rows-after-header, blank-line-blocks, json-list, conll-documents (`spanbert.study.split_dev`)."""
    restriction: tuple[str, ...] = ()
    """Options that restrict dev (SQuAD's ``validation_articles``, GLUE's ``max_eval_examples``): applied
    before the split, so both halves come from the part of dev the user chose."""


@dataclass(frozen=True)
class TaskSpec:
    """One task as the CLI and the study see it."""

    name: str
    """The task name of ``spanbert finetune <name>``."""
    description: str
    """One line for ``spanbert finetune`` (the task list)."""
    finetune: Action
    predict: Action
    evaluate: Action
    metric: str
    """The headline dev metric: the key in `RESULTS_FILE` and in what ``evaluate`` prints (0-100)."""
    data: str
    """The data the task needs (format), for the task list and the docs."""
    configs: tuple[tuple[str, str], ...] = ()
    """(module, class) of the option dataclasses whose fields ``finetune`` also takes (besides
    `TrainingArguments`): the study checks a task's options against them before any cell runs."""
    dev_split: DevSplit | None = None
    """How a study holds out half of dev when no test file is given; None: the task has no dev half."""
    scores_test: bool = False
    """``evaluate --data FILE --model DIR`` scores a labelled file with a model (the study's test: key)."""
    data_options: Callable[[str, str], dict[str, str]] | None = None
    """(train, dev) -> the `finetune` options naming them; default ``--train_file``/``--validation_file``."""
    heldout_steps: Callable[[list[str], str, str], list[list[str]]] | None = None
    """(head, model folder, held-out data) -> the commands scoring the model on it, the last printing the
    metrics as JSON; ``head`` is the task name and the options that pick a sub-task (GLUE's ``--task``).
    Default: ``evaluate HEAD --data DATA --model DIR``."""
    results_file: str = RESULTS_FILE

    def finetune_data(self, train: str, dev: str) -> dict[str, str]:
        """The `finetune` options naming the training and dev data (what a study cell passes)."""
        if self.data_options is not None:
            return self.data_options(train, dev)
        return {"train_file": train, "validation_file": dev}

    def heldout_commands(self, model_dir: str, data: str, head: list[str] | None = None) -> list[list[str]]:
        """The commands that score a fine-tuned model folder on held-out data (the last prints JSON)."""
        head = head or [self.name]
        if self.heldout_steps is not None:
            return self.heldout_steps(head, model_dir, data)
        return [["evaluate", *head, "--data", data, "--model", model_dir, "--disable_tqdm"]]


def run_action(spec: TaskSpec, action: str, argv: list[str], prog: str) -> int:
    """The one skeleton every task command goes through: ``spanbert <action> <task> ARGV``."""
    if action not in ACTIONS:
        raise SpanBertError(f"{prog}: found action {action!r}; expected one of: {', '.join(ACTIONS)}")
    return int(getattr(spec, action)(spec.name, list(argv), prog) or 0)


def task_cli(specs: dict[str, TaskSpec]) -> Callable[[str, str, list[str], str], int]:
    """The old ``cli(action, task, argv, prog)`` entry of a task file, kept for callers of it."""

    def cli(action: str, task: str, argv: list[str], prog: str) -> int:
        return run_action(specs[task], action, argv, prog)

    return cli
