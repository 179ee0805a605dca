"""The options of ``spanbert finetune|predict|evaluate glue``, one dataclass an action, and what they need
of the nine GLUE tasks: their layouts (`GLUE_TASKS`, what ``--task`` names) and their training defaults
(`default_arguments`, which follow ``--task``). No torch: ``--help`` is built from these alone
(`spanbert.tasks.options`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spanbert.errors import SpanBertError
from spanbert.tasks.options import Finetune, Inference, finetune_defaults, nested, option
from spanbert.training_args import TrainingArguments


@dataclass(frozen=True)
class GlueTask:
    """Layout and metric of one GLUE task."""

    name: str
    labels: tuple[str, ...] | None
    """Class labels as they appear in the files (and in the submission); None = regression (STS-B)."""
    text_a: str
    """Header name of the first sentence column."""
    text_b: str | None
    """Header name of the second sentence column (None for single-sentence tasks)."""
    label: str
    """Header name of the label column."""
    test_id: str = "index"
    """Header name of the id column of the test file."""
    dev: dict[str, tuple[str, ...]] = field(default_factory=lambda: {"dev": ("dev.tsv",)})
    """Dev split name -> files (relative to the task folder), read one after the other."""
    test: dict[str, str] = field(default_factory=dict)
    """Submission file name -> test file."""
    train: tuple[str, ...] = ("train.tsv",)
    headerless: tuple[str, ...] | None = None
    """Column names of files that have no header row (CoLA's raw release)."""


def _t(name: str, labels, a, b, label, **kw) -> GlueTask:
    kw.setdefault("test", {f"{name}.tsv": "test.tsv"})
    return GlueTask(name, labels, a, b, label, **kw)


_BINARY = ("0", "1")
GLUE_TASKS: dict[str, GlueTask] = {
    t.name: t
    for t in [
        _t("CoLA", _BINARY, "sentence", None, "label", headerless=("source", "label", "mark", "sentence")),
        _t("SST-2", _BINARY, "sentence", None, "label"),
        _t("MRPC", _BINARY, "#1 String", "#2 String", "Quality"),
        _t("STS-B", None, "sentence1", "sentence2", "score"),
        _t("QQP", _BINARY, "question1", "question2", "is_duplicate", test_id="id"),
        _t(
            "MNLI",
            ("contradiction", "entailment", "neutral"),
            "sentence1",
            "sentence2",
            "gold_label",
            dev={"matched": ("dev_matched.tsv",), "mismatched": ("dev_mismatched.tsv",)},
            test={"MNLI-m.tsv": "test_matched.tsv", "MNLI-mm.tsv": "test_mismatched.tsv", "AX.tsv": "diagnostic.tsv"},
        ),  # fmt: skip
        _t("QNLI", ("entailment", "not_entailment"), "question", "sentence", "label"),
        _t("RTE", ("entailment", "not_entailment"), "sentence1", "sentence2", "label"),
        _t("WNLI", _BINARY, "sentence1", "sentence2", "label"),
    ]
}


def canonical_name(name: str) -> str | None:
    """The GLUE task a user's spelling names (``sst-2``, ``SST2`` and ``SST-2`` all name SST-2), or None."""
    return {k.lower().replace("-", ""): k for k in GLUE_TASKS}.get(name.lower().replace("-", ""))


def glue_task(name: str) -> GlueTask:
    """A task by name, case-insensitively (``sst-2``, ``SST2`` and ``SST-2`` all work)."""
    key = canonical_name(name)
    if key is None:
        raise SpanBertError(f"unknown GLUE task {name!r}; choose from: {', '.join(GLUE_TASKS)}")
    return GLUE_TASKS[key]


def default_arguments(task: GlueTask) -> dict[str, Any]:
    """Appendix B: lr in {5e-6..5e-5} (2e-5 without --sweep), batch 32, 10 epochs, CoLA 4; the model of
    the best dev ``score`` of 10 evaluations an epoch is kept (the released run_glue.py: its
    EVAL_METRICS are the same numbers, MNLI on matched dev)."""
    epochs = 4.0 if task.name == "CoLA" else 10.0
    return finetune_defaults(
        "score", output_dir=f"runs/glue-{task.name}", learning_rate=2e-5, per_device_train_batch_size=32,
        num_train_epochs=epochs,
    )


DEFAULT_TASK = "RTE"
"""Whose training defaults ``--help`` shows before ``--task`` names a GLUE task."""


def training_defaults(given: Mapping[str, Any]) -> dict[str, Any]:
    """The `TrainingArguments` defaults of the GLUE task the options ``given`` name (``task``; `DEFAULT_TASK`
    when they name none, or no GLUE task: the action reports an unknown name)."""
    name = given.get("task")
    return default_arguments(GLUE_TASKS[(canonical_name(name) if isinstance(name, str) else None) or DEFAULT_TASK])


@dataclass(kw_only=True)
class GlueData:
    """The options every GLUE action starts with: which task, and its folder."""

    task: str
    """GLUE task: CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE, WNLI"""
    data_dir: str = option(path="input", flags=("--data",))
    """the task's folder of GLUE tsv files (train.tsv, dev.tsv, test.tsv); --data too, the name the other
    tasks' predict and evaluate give their data (``tasks.predict("glue", model, data, task=...)``)"""


@dataclass(kw_only=True)
class GlueFinetune(Finetune, GlueData):
    """``spanbert finetune glue --task NAME --data_dir DIR ...``."""

    max_seq_length: int | None = option(None, metavar="N")
    """tokens per input (Appendix B) (default: 128, or the encoder's positions when it has fewer)"""
    max_train_examples: int | None = None
    """use only the first N training examples"""
    max_eval_examples: int | None = None
    """use only the first N examples of each dev split"""
    heldout_half: bool = False
    """keep half of each dev split (a fixed, seeded half: the one `spanbert study` holds out) away from
    model selection: the best evaluation is chosen on the other half, and `spanbert evaluate glue
    --heldout_half` scores the model on the half it never saw"""
    training: TrainingArguments = nested(TrainingArguments, defaults=training_defaults, family=True, title="training")


@dataclass(kw_only=True)
class GluePredict(Inference, GlueData):
    """``spanbert predict glue --task NAME --data_dir DIR --model M --output_dir OUT``."""

    model: str = option(path="input")
    """folder saved by `spanbert finetune glue`"""
    split: str = option("test", choices=("test", "dev"))
    """which split to predict"""
    output_dir: str = option(path="output_folder")
    """folder for the submission files (CoLA.tsv, MNLI-m.tsv, ...)"""
    batch_size: int = 64
    """sequences per batch"""


@dataclass(kw_only=True)
class GlueEvaluate(Inference, GlueData):
    """``spanbert evaluate glue --task NAME --data_dir DIR (--predictions F ... | --model M) [--heldout_half]``."""

    predictions: list[str] | None = option(None, path="input")
    """dev predictions (submission format), one file per dev split"""
    model: str | None = option(None, path="input")
    """fine-tuned model folder: predict, then score"""
    heldout_half: bool = False
    """score the model (--model) on the half of dev that `finetune glue --heldout_half` kept away from
    model selection: a score on data selection never saw"""
    batch_size: int = 64
    """sequences per batch with --model"""


ACTIONS = {"finetune": GlueFinetune, "predict": GluePredict, "evaluate": GlueEvaluate}
"""Each action's options, for the registry (`spanbert.tasks.registry.TASKS.options`)."""
