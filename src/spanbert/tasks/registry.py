"""The task registry: task name -> `spec.TaskSpec`, read by the Python API, the CLI and the study.

An entry is the module that exports the spec (``SPECS[name]``), imported on first use, so listing the tasks with their
one-line descriptions (``spanbert --help``, ``spanbert finetune --help``) imports no task file and no
torch. A new task is one file plus one line in `_MODULES` (or, from Python, ``TASKS["name"] = spec``):
docs/architecture.md, "Adding a task".
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping, MutableMapping

from spanbert.errors import SpanBertError
from spanbert.tasks.spec import TaskSpec

# task -> the module whose SPECS holds it
_MODULES: dict[str, str] = {
    "squad": "spanbert.tasks.qa",
    "mrqa": "spanbert.tasks.qa",
    "tacred": "spanbert.tasks.relation",
    "semeval": "spanbert.tasks.relation",
    "glue": "spanbert.tasks.glue",
    "ner": "spanbert.tasks.ner",
    "coref": "spanbert.tasks.coref",
    "swag": "spanbert.tasks.swag",
    "parse": "spanbert.tasks.parse",
    "probe": "spanbert.tasks.probe",
}

# task -> its spec's one-line description, for the task list before any task is loaded (a test keeps
# each equal to its spec's `description`)
_DESCRIPTIONS: dict[str, str] = {
    "squad": "extractive QA, SQuAD v1.1/v2.0 JSON",
    "mrqa": "extractive QA, MRQA jsonl(.gz)",
    "tacred": "relation extraction, TACRED JSON, entity masking",
    "semeval": "relation classification, SemEval-2010 Task 8",
    "glue": "GLUE sentence(-pair) classification and regression (--task)",
    "ner": "named entity recognition, CoNLL-2003 IOB",
    "coref": "coreference resolution, CoNLL-2012 format",
    "swag": "multiple choice, SWAG CSV (BERT §4.4)",
    "parse": "constituency parsing, Penn Treebank trees, EVALB F1 (cloze paper §6.2.2)",
    "probe": "span probes of a frozen encoder (edge probing, Tenney et al. 2019; --probe)",
}


# task -> the module whose ACTIONS names each action's options class (or, keyed by task, each of its tasks') (no torch: ``--help`` is built from it);
# a task missing here parses its own command line in its actions (a test keeps each equal to its spec's `options`)
_OPTIONS: dict[str, str] = {
    "squad": "spanbert.tasks.qa.options",
    "mrqa": "spanbert.tasks.qa.options",
    "swag": "spanbert.tasks.swag_options",
    "tacred": "spanbert.tasks.relation_options",
    "semeval": "spanbert.tasks.relation_options",
    "ner": "spanbert.tasks.ner_options",
    "coref": "spanbert.tasks.coref.options",
    "glue": "spanbert.tasks.glue_options",
    "probe": "spanbert.tasks.probe_options",
    "parse": "spanbert.tasks.parse_options",
}


class Registry(MutableMapping[str, TaskSpec]):
    """name -> `TaskSpec`; an entry given as a module path is loaded (``module.SPECS[name]``) when read."""

    def __init__(
        self, entries: dict[str, str | TaskSpec], descriptions: dict[str, str] | None = None,
        options: dict[str, str] | None = None,
    ) -> None:  # fmt: skip
        self._entries: dict[str, str | TaskSpec] = dict(entries)
        self._descriptions: dict[str, str] = dict(descriptions or {})
        self._options: dict[str, str] = dict(options or {})

    def options(self, name: str) -> Mapping[str, type]:
        """Action -> its options class for task ``name`` (`TaskSpec.options`), without loading the task's
        module when the registry knows the options' module."""
        if isinstance(self._entries[name], str) and name in self._options:
            actions = importlib.import_module(self._options[name]).ACTIONS
            return actions[name] if name in actions else actions  # per task, or one table for the module's tasks
        return self[name].options

    def options_class(self, name: str, action: str) -> type:
        """The options class of ``action`` of task ``name``; a task that declares none is one error (a task
        before issue 59's typed options, whose actions parsed their own command line)."""
        cls = self.options(name).get(action)
        if cls is None:
            raise SpanBertError(f"task {name!r}: found no options class for {action!r} in its TaskSpec.options, "
                                "expected one per action (docs/architecture.md, 'Adding a task')")  # fmt: skip
        return cls

    def describe(self, name: str) -> str:
        """The task's one-line description, without loading its module when the registry knows it."""
        entry = self._entries[name]
        if isinstance(entry, str) and name in self._descriptions:
            return self._descriptions[name]
        return self[name].description

    def __getitem__(self, name: str) -> TaskSpec:
        entry = self._entries[name]
        if isinstance(entry, str):
            entry = importlib.import_module(entry).SPECS[name]
            self._entries[name] = entry
        return entry

    def __setitem__(self, name: str, spec: str | TaskSpec) -> None:
        self._entries[name] = spec
        self._descriptions.pop(name, None)  # a replaced entry describes itself
        self._options.pop(name, None)

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __contains__(self, name: object) -> bool:  # without loading the task (Mapping's reads the entry)
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


TASKS = Registry(_MODULES, _DESCRIPTIONS, _OPTIONS)
