"""A task's ``finetune`` from its parsed options to its saved model: the output folder checked and
claimed once for the whole command, the process group joined, the training text's vocabulary checked,
one run or the Appendix B ``--sweep`` (`spanbert.tasks.selection`), and the dev `Results` of the saved
model. Tasks differ in reader, head and metric; the loop is `spanbert.trainer.train` for all of them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from spanbert import distributed, runs, vocab_match
from spanbert.corpus import has_tokenizer
from spanbert.errors import SpanBertError
from spanbert.hub import resolve_model
from spanbert.runs import claim_run_dir
from spanbert.tasks.options import named
from spanbert.tasks.ranks import start_distributed
from spanbert.tasks.selection import SELECTION_KEYS, SWEEP_SUMMARY, cell_arguments, sweep, sweep_grid
from spanbert.tasks.spec import Results
from spanbert.tasks.task_folders import check_sequence_length, model_positions
from spanbert.tokenization import Tokenizer
from spanbert.training_args import TrainingArguments
from spanbert.utils import input_paths


def finetune_options(
    opts: Any, run_one: Callable[[TrainingArguments], dict[str, Any]], metric: str, prog: str,
    seq_length: int | None = None,
) -> Results:  # fmt: skip
    """The `finetune` action of a task whose options are one typed object (`spanbert.tasks.options`): one
    run, or the Appendix B ``--sweep`` keeping the best, compared on ``metric``. Its
    `TrainingArguments` are ``opts.training``, built already over the task's and the family's defaults;
    a ``max_seq_length`` the user gave (in ``opts`` or one of its option classes) is checked against the
    encoder's positions before any data is read. ``seq_length``: the task's default length (Appendix B:
    128), which an unset ``opts.max_seq_length`` becomes, or the encoder's positions when it has fewer."""
    targs = opts.training
    check_output_dir(targs, input_paths(opts))  # before reading any data (a sweep: the top folder)
    resolve_lengths(opts, seq_length)
    check_training_text(opts)
    start_distributed(targs.device)
    with claim_run_dir(targs.output_dir, prog):
        return _finetune_claimed(opts, targs, run_one, metric)


SEQ_LENGTH = 128
"""The default ``--max_seq_length`` of the sentence and token tasks (Appendix B: 128), when the encoder has
that many positions."""


def resolve_lengths(opts: Any, seq_length: int | None = None) -> None:
    """Each ``max_seq_length`` in force (in ``opts``, or in one of its option classes when given or set by
    other than that class's default: a flag, a YAML key, coreference's ``--preset``) checked against the
    encoder's positions, before any data is read; an unset ``opts.max_seq_length`` set to ``seq_length``
    (the task's default), or to the encoder's positions when it has fewer. None: the task's length follows
    the encoder later (QA's windows, coreference's segments). A class's own default is not checked (parse's
    512 is a cap on sentences, not a window)."""
    given = "max_seq_length" in named(opts)
    for holder in (opts, *(getattr(opts, f.name) for f in dataclasses.fields(opts) if f.metadata.get("nested"))):
        length = getattr(holder, "max_seq_length", None)
        default = next((f.default for f in dataclasses.fields(holder) if f.name == "max_seq_length"), None)
        if length is not None and (holder is opts or given or length != default):
            check_sequence_length(opts.model, length)
    if seq_length is not None and opts.max_seq_length is None:
        positions = model_positions(opts.model)
        opts.max_seq_length = seq_length if positions is None else min(seq_length, positions)


TRAINING_INPUTS = ("train", "train_file", "data_dir")
"""The options naming a task's training text (a GLUE task folder: its files)."""


def check_training_text(args: Any) -> None:
    """The vocabulary a fine-tuning run tokenizes with covers its training text (issue 58.1): a sample of the
    training file(s) with a sizable share of [UNK] under it is said (`spanbert.vocab_match.check_coverage`; the
    raw file holds tags and keys too, so it is not refused), before any data is read. Nothing to check without a vocabulary (the task names the missing one)."""
    given = getattr(args, "tokenizer", None)
    source = given or getattr(args, "model", None)
    try:
        path = resolve_model(source) if source else None
    except SpanBertError:
        return  # the task's own loader names it
    if path is None or not has_tokenizer(path):
        return
    tok = Tokenizer.from_dir(path)
    paths = [p for _, p in input_paths(args, TRAINING_INPUTS)]
    if not paths:
        return
    unk, total = vocab_match.unknown_share(tok, vocab_match.text_sample(paths))
    option = "--tokenizer" if given else "--model"
    warning = vocab_match.check_coverage(unk, total, option, str(source), f"a sample of {paths[0]}", refuse=False)
    if warning:
        distributed.eprint0(warning)


def finetune_results(metrics: dict[str, Any], metric: str, output_dir: str | Path) -> Results:
    """The `Results` of a run that saved its model in ``output_dir`` with these dev ``metrics`` (the step
    its weights are from when it was selected on dev: ``selected_step``)."""
    step = metrics.get("selected_step")
    return Results(dict(metrics), metric, int(step) if step is not None else None, Path(output_dir))


def _finetune_claimed(
    args: Any, targs: TrainingArguments, run_one: Callable[[Any], dict[str, float]], metric: str
) -> Results:
    """`finetune_options` once its output folder is held."""
    if not getattr(args, "sweep", False):
        metrics = run_one(targs)
        distributed.print0(f"saved the fine-tuned model to {targs.output_dir}")
        if "selected_step" in metrics:
            distributed.print0(f"the saved model is that of step {metrics['selected_step']} (best dev {metrics['selected_by']})")
        return finetune_results(metrics, metric, targs.output_dir)

    compared = targs.metric_for_best_model or metric  # the runs are compared on the score that selects within each
    if targs.metric_for_best_model and not targs.greater_is_better:
        raise SpanBertError("--sweep keeps the run with the highest dev score: found --greater_is_better false, "
                            "expected a metric where higher is better")  # fmt: skip

    def one(lr: float, batch_size: int, run_dir: Path) -> dict[str, Any]:
        metrics = run_one(cell_arguments(targs, lr, batch_size, run_dir))
        if compared not in metrics:
            raise SpanBertError(f"--sweep keeps the best run on the dev set: pass --dev (no {compared!r} was computed)")
        return {"dev_score": metrics[compared], **{k: metrics[k] for k in SELECTION_KEYS if k in metrics}}

    summary = sweep(one, targs.output_dir, resume=targs.resume, **sweep_grid(args.model))
    distributed.print0(f"best run copied to {targs.output_dir}")
    # the best run's row of sweep.json: its rate, batch size and selected dev score ("dev_score")
    return finetune_results(summary["best"], "dev_score", targs.output_dir)


def check_output_dir(targs: TrainingArguments, inputs: Sequence[tuple[str, str]] = ()) -> None:
    """The output contract of a fine-tuning folder (`spanbert.runs.check_output_dir`: an output that is,
    holds or lies inside one of ``inputs``, a file in the way, an unwritable place or a folder without a
    spanbert run's manifest refused; an earlier run refused unless --resume / --overwrite_output_dir,
    contract 3), and an earlier sweep's summary likewise. Every task's finetune calls it as soon as its
    `TrainingArguments` are built, before any work."""
    runs.check_output_dir(targs, inputs)
    summary = Path(targs.output_dir) / SWEEP_SUMMARY
    if summary.is_file() and not (targs.resume or targs.overwrite_output_dir):
        raise SpanBertError(
            f"{targs.output_dir}: found {SWEEP_SUMMARY} of an earlier sweep, expected an empty or new output_dir; "
            f"pass --resume to continue it or --overwrite_output_dir to start over"
        )
