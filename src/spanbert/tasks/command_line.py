"""How a task command reads its options: the parser every ``spanbert finetune|predict|evaluate TASK``
builds (its opening sentence, the shared options of fine-tuning, prediction and scoring, switches that
take ``true``/``false``), the ``--config`` YAML applied under the flags, `TrainingArguments` built from
them over the task's and the encoder family's defaults, and ``--max_seq_length`` against the encoder's
positions before any data is read."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from typing import Any

from spanbert import families, threads
from spanbert.config import (
    ArgumentParser,
    add_dataclass_arguments,
    check_unknown_overrides,
    dataclass_from_args,
    load_yaml,
    parse_args_with_config,
    parse_key_values,
)
from spanbert.errors import SpanBertError
from spanbert.tasks.options import ACTION_SENTENCES
from spanbert.tasks.registry import TASKS
from spanbert.tasks.task_folders import check_sequence_length, model_positions
from spanbert.training_args import TrainingArguments
from spanbert.utils import output_file

SCHEDULE_OPTIONS = ("evals_per_epoch", "eval_steps")
"""Naming either keeps the evaluation schedule as given (`training_arguments`)."""


def parse_bool(value: Any) -> bool:
    """``true``/``false`` (also 1/0, yes/no, on/off) for a boolean option's value."""
    s = str(value).lower()
    if s in ("1", "true", "yes", "on"):
        return True
    if s in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"found {value!r}, expected true or false")


def add_switch(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *flags: str, help: str) -> None:
    """A boolean option of a task command, off by default: the bare flag turns it on, ``--flag
    true|false`` says which. The second spelling is the one a study records and the Python API writes
    (`spanbert.tasks.spec.options_argv`), so a keyword ``flag=True`` and a flag ``--flag`` are one thing."""
    parser.add_argument(*flags, nargs="?", const=True, default=False, type=parse_bool, metavar="BOOL", help=help)


def add_finetune_arguments(parser: argparse.ArgumentParser, defaults: dict[str, Any] | None = None) -> None:
    """--model, --tokenizer, --config and every `TrainingArguments` field, plus --sweep and key=value."""
    parser.add_argument("--model", required=True, help="pre-trained checkpoint folder (spanbert or any HF BERT)")
    parser.add_argument(
        "--tokenizer", default=None, help="tokenizer folder or vocab.txt, when the checkpoint has none"
    )
    parser.add_argument("--config", default=None, help="YAML file of option overrides")
    add_switch(
        parser,
        "--sweep",
        help="try every learning rate in {5e-6,1e-5,2e-5,3e-5,5e-5} x batch size {16,32} (Appendix B); each run keeps "
        "its best dev evaluation (--evals_per_epoch, --metric_for_best_model) and the run with the best selected dev "
        "score is saved in --output_dir (sweep.json lists every run and its selected step)",
    )
    group = parser.add_argument_group("training")
    add_dataclass_arguments(group, TrainingArguments, defaults=defaults)
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="further option overrides")


def add_inference_arguments(parser: argparse.ArgumentParser, unit: str, with_model: bool = False) -> None:
    """--batch_size, --device, --disable_tqdm and --threads: the options every task's `predict` (and `evaluate`
    with --model) shares; ``unit`` names what a batch holds (sequences, windows, examples)."""
    when = " with --model" if with_model else ""
    parser.add_argument("--batch_size", type=int, default=64, help=f"{unit} per batch{when} (default: 64)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N (default: auto)")
    add_switch(parser, "--disable_tqdm", help="hide the progress bars")
    threads.add_option(parser)


def task_parser(prog: str, doc: str | None) -> ArgumentParser:
    """The parser of one task command ``prog`` (``spanbert ACTION TASK``): its help opens with the action's
    sentence (`ACTION_SENTENCES`) for the registered task; another ``prog`` with the first paragraph of
    ``doc``."""
    words = prog.split()
    if len(words) >= 2 and words[-2] in ACTION_SENTENCES and words[-1] in TASKS:
        description = ACTION_SENTENCES[words[-2]].format(name=words[-1], what=TASKS.describe(words[-1]))
    else:
        description = (doc or "").split("\n\n")[0]
    return ArgumentParser(prog=prog, description=description)


def add_predict_arguments(parser: argparse.ArgumentParser, model_help: str, output_help: str, unit: str) -> None:
    """--model (required), --output (required, checked by the output contract) and the inference options:
    the options of every `predict` that reads one data file and writes one predictions file."""
    parser.add_argument("--model", required=True, help=model_help)
    parser.add_argument("--output", required=True, type=output_file, help=output_help)
    add_inference_arguments(parser, unit)


def add_scoring_source(parser: argparse.ArgumentParser, predictions_help: str, unit: str, nargs: str | None = None) -> None:
    """--predictions FILE or --model DIR (predict, then score), and the inference options: the options of
    every `evaluate` that scores either a predictions file or a model."""
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--predictions", nargs=nargs, help=predictions_help)
    group.add_argument("--model", help="fine-tuned model folder: predict, then score")
    add_inference_arguments(parser, unit, with_model=True)


def add_example_stats_argument(parser: argparse.ArgumentParser) -> None:
    """``--example_stats FILE``: also write the per-example statistics of the headline score (the input of a
    study's test-sampling intervals; `spanbert.metrics.resample`)."""
    parser.add_argument("--example_stats", metavar="FILE",
                        help="also write each example's counts behind the headline score to FILE (JSON; what "
                             "`spanbert study` resamples for its intervals)")  # fmt: skip


def parse_task_args(
    parser: argparse.ArgumentParser, argv: list[str], configs: Sequence[type] = ()
) -> argparse.Namespace:
    """``parser.parse_args(argv)`` with the ``--config`` YAML applied first, strictly
    (`spanbert.config.parse_args_with_config`, the reader `spanbert pretrain` uses too).

    The YAML holds options of this command: every ``--flag`` the parser has, flat, and the fields of
    `TrainingArguments` and of the task's ``configs`` (e.g. ``QAConfig``) flat or in sections named
    after them. An unknown key, a section of a class this command does not use and a value of the
    wrong type are errors naming the file and line; a flag on the command line wins over the file.
    """
    return parse_args_with_config(parser, argv, [TrainingArguments, *configs])


def training_arguments(args: argparse.Namespace, defaults: dict[str, Any] | None = None) -> TrainingArguments:
    """TrainingArguments from defaults < YAML (--config) < --flags < key=value.

    The YAML reaches ``args`` through `parse_task_args` (as parser defaults), already checked by
    `spanbert.config.check_yaml` against every option of the command.
    """
    overrides = getattr(args, "overrides", None) or []
    check_unknown_overrides(overrides, [TrainingArguments])
    targs = dataclass_from_args(TrainingArguments, args, defaults=defaults, overrides=overrides)
    if named_schedule(args) and "max_eval_share" not in _named(args):
        targs = dataclasses.replace(targs, max_eval_share=0.0)  # the user's schedule is kept as given
    return targs


def _named(args: argparse.Namespace) -> set[str]:
    """The options the user named: flags and ``--config`` YAML keys (both reach ``args``,
    `parse_task_args`) and key=value overrides."""
    return set(vars(args)) | set(parse_key_values(getattr(args, "overrides", None) or []))


def named_schedule(args: argparse.Namespace) -> bool:
    """Whether the user named --evals_per_epoch or --eval_steps (flag, YAML or key=value)."""
    return bool(_named(args) & set(SCHEDULE_OPTIONS))


SEQ_LENGTH = 128
"""The default ``--max_seq_length`` of the sentence and token tasks (Appendix B: 128), when the encoder has
that many positions."""


def add_sequence_length_argument(parser: argparse.ArgumentParser, what: str, default: int = SEQ_LENGTH) -> None:
    """``--max_seq_length N`` of a task whose inputs are cut at N tokens: unset, it is ``default`` or the
    encoder's positions when it has fewer (`resolve_sequence_length`); given, it must fit them."""
    parser.add_argument(
        "--max_seq_length", type=int, default=None, metavar="N",
        help=f"{what} (default: {default}, or the encoder's positions when it has fewer)",
    )  # fmt: skip
    parser.set_defaults(max_seq_length_default=default)


def resolve_sequence_length(args: argparse.Namespace) -> None:
    """``args.max_seq_length`` against the encoder of ``args.model``, from its config.json, before any data is
    read: a value the user gave (flag, --config YAML) must fit the encoder's positions (`check_sequence_length`);
    an unset one (`add_sequence_length_argument`) becomes the task's default, or the positions when fewer.
    A task whose length option is a dataclass field (QA, parse) has it only when the user gave it."""
    length = getattr(args, "max_seq_length", None)
    if isinstance(length, str):  # a dataclass option (QAConfig, ParseConfig) as typed: converted later
        text = length.strip()
        length = None if text.lower() in ("", "none", "null") else int(text) if text.isdigit() else text
    default = getattr(args, "max_seq_length_default", None)
    if length is None and default is None:
        return
    positions = model_positions(args.model)
    if length is not None:
        check_sequence_length(args.model, length, positions=positions)
    else:
        args.max_seq_length = default if positions is None else min(default, positions)


def family_defaults(argv: Sequence[str], defaults: dict[str, Any]) -> dict[str, Any]:
    """A task's `TrainingArguments` defaults with the family's own (`FinetuneHabits.training`) on top,
    read from the ``--model`` folder's config.json before the options are parsed, so ``--help`` and the
    run show them and a flag on the command line still wins (the two-tower model: cosine schedule, no
    clipping). A missing or unreadable folder keeps the task's defaults: loading reports it later."""
    model_dir = model_in_argv(argv)
    if model_dir is None:
        return dict(defaults)
    try:
        habits = families.habits_of(model_dir)
    except SpanBertError:
        return dict(defaults)
    return {**defaults, **habits.training_defaults()}


def model_in_argv(argv: Sequence[str]) -> str | None:
    """The ``--model`` value of a command line, or the ``model`` key of its ``--config`` YAML (None when
    neither gives one)."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--model")
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(list(argv))
    if known.model is None and known.config:
        try:
            data = load_yaml(known.config)
        except SpanBertError:
            return None  # reported with its line when the command reads the file
        value = data.get("model")
        return value if isinstance(value, str) else None
    return known.model
