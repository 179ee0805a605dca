"""What every fine-tuning task shares: training options on the command line, loading an encoder and
its tokenizer, saving a fine-tuned model in the HF layout, and the Appendix B hyper-parameter sweep.

Tasks differ in reader, head and metric; the loop is `spanbert.trainer.train` for all of them.

Under ``torchrun`` every task command runs on every rank and goes through the few functions here:

- `start_distributed(device)` joins the process group (predict/evaluate commands too, so that
  `write_once` and `predict_sharded` know the other ranks);
- `predict_sharded(n, predict)`: each rank predicts its share of the n items, every rank gets all
  predictions in the original order (contract 7: evaluation runs on every rank);
- `write_once(fn)`: rank 0 writes, the others wait; its return value (a chosen threshold, the best
  sweep run) or its error reaches every rank. `save_finetuned` and `write_json_once` use it;
- `with seeded_model(seed):` around building a model: the same head on every rank and run, drawn from
  the seed alone, then a per-rank dropout stream.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import shutil
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import nn

from spanbert import _aliases, distributed, families, folders, runs, threads, utils, vocab_match
from spanbert.config import (
    ArgumentParser,
    add_dataclass_arguments,
    check_unknown_overrides,
    dataclass_from_args,
    load_yaml,
    parse_args_with_config,
    parse_key_values,
)
from spanbert.corpus import has_tokenizer
from spanbert.distributed import resolve_device
from spanbert.dropout import seeded_build
from spanbert.errors import DataError, SpanBertError
from spanbert.hub import resolve_model
from spanbert.microbatch import planned_batch_size
from spanbert.runs import BEST_DIR, claim_run_dir, latest_checkpoint, steps_per_epoch
from spanbert.tasks.registry import TASKS
from spanbert.tasks.spec import Results
from spanbert.tokenization import Tokenizer
from spanbert.training_args import TrainingArguments
from spanbert.utils import MMAP_THRESHOLD, atomic_write, input_paths, output_file

T = TypeVar("T")

# Appendix B: learning rate from {5e-6, 1e-5, 2e-5, 3e-5, 5e-5}, batch size from {16, 32}.
SWEEP_LEARNING_RATES = (5e-6, 1e-5, 2e-5, 3e-5, 5e-5)
SWEEP_BATCH_SIZES = (16, 32)

EVALS_PER_EPOCH = 10
"""Dev evaluations per epoch: the default ``--eval_per_epoch 10`` of the released fine-tuning scripts
(facebookresearch/SpanBERT code/run_squad.py, run_mrqa.py, run_tacred.py, run_glue.py)."""


EVAL_SHARE = 0.5
"""The default schedule is lowered when its evaluations would take more than this share of the training
time (`TrainingArguments.max_eval_share`): a short run on a small training set must not spend most of its
time scoring the whole dev set; a full-size run of the paper keeps its schedule."""

SCHEDULE_OPTIONS = ("evals_per_epoch", "eval_steps")
"""Naming either keeps the evaluation schedule as given (`training_arguments`)."""


def selection_defaults(metric: str) -> dict[str, Any]:
    """`TrainingArguments` defaults that select the model on dev as the released scripts do: evaluate
    `EVALS_PER_EPOCH` times an epoch and keep the weights of the best ``metric`` (higher is better;
    the released scripts compare ``result[eval_metric] > best``, so ties keep the earlier step). Only
    the newest resumable checkpoint is kept beside ``best/`` (bounded disk: best + latest)."""
    return {
        "evals_per_epoch": EVALS_PER_EPOCH,
        "max_eval_share": EVAL_SHARE,
        "metric_for_best_model": metric,
        "greater_is_better": True,
        "save_total_limit": 1,
    }


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


ACTION_SENTENCES = {
    "finetune": "Fine-tune a pre-trained encoder for {name} ({what}) and keep the model that scores best on "
    "the dev data; prints its dev scores.",
    "predict": "Write a fine-tuned model's predictions for {name} ({what}) in the task's official format.",
    "evaluate": "Score predictions, or a fine-tuned model on labelled data, for {name} ({what}) with the "
    "task's official metrics.",
}
"""The sentence each task command's --help opens with: what the command does, for its user."""


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


def finetune_command(
    prog: str,
    doc: str | None,
    argv: list[str],
    add_options: Callable[[argparse.ArgumentParser], None],
    defaults: dict[str, Any],
    run_one: Callable[[argparse.Namespace, TrainingArguments], dict[str, Any]],
    metric: str,
    configs: Sequence[type] = (),
    check: Callable[[argparse.Namespace], None] | None = None,
) -> Results:
    """The `finetune` action of a task: its own options (``add_options``), then --model, --config and every
    `TrainingArguments` option under ``defaults``; parsed with the ``--config`` YAML (``configs``: the
    task's option dataclasses); ``check(args)`` refuses what the task cannot run; then `run_finetune`
    (one run, or the Appendix B ``--sweep``, compared on ``metric``)."""
    parser = task_parser(prog, doc)
    add_options(parser)
    add_finetune_arguments(parser, defaults)
    args = parse_task_args(parser, argv, configs)
    if check is not None:
        check(args)
    return run_finetune(args, defaults, lambda targs: run_one(args, targs), metric, prog)


def run_finetune(
    args: Any, defaults: dict[str, Any], run_one: Callable[[Any], dict[str, float]], metric: str,
    prog: str = "spanbert finetune",
) -> Results:  # fmt: skip
    """One run, or the Appendix B ``--sweep`` keeping the best: the output checks, the process group, the
    claim of the output folder (its lock and manifest, for the whole command) and the summary line,
    shared by every task's `finetune`; returns the saved model's dev `Results`.

    ``run_one(training_arguments)`` fine-tunes, saves into ``training_arguments.output_dir`` and
    returns the dev metrics; ``metric`` names the headline (and the one the sweep maximises). The output
    is checked against every path the command reads (`spanbert.utils.input_paths` of ``args``: --model,
    --train, ...).
    """
    targs = training_arguments(args, defaults)
    check_output_dir(targs, input_paths(args))  # before reading any data (a sweep: the top folder)
    resolve_sequence_length(args)  # before any data is read
    check_training_text(args)
    start_distributed(targs.device)
    with claim_run_dir(targs.output_dir, prog):
        return _finetune_claimed(args, targs, run_one, metric)


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
    """`run_finetune` once its output folder is held."""
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


def print_metrics(metrics: dict[str, Any]) -> None:
    """Metrics as JSON on stdout (what `spanbert evaluate` prints), once under torchrun."""
    distributed.print0(json.dumps(metrics, indent=2, sort_keys=True))


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


def model_positions(model_dir: str | Path) -> int | None:
    """`families.max_positions_of` a local model folder (its config.json read strictly: a damaged one is an
    error now); None for a name that is no local folder (a hub name, a typo, GLUE's WNLI that reads no
    model): the task checks it where it loads the model."""
    if not Path(model_dir).is_dir():
        return None
    return families.max_positions_of(model_dir)


def check_sequence_length(
    model_dir: str | Path, length: int, option: str = "--max_seq_length", positions: int | None = None
) -> None:
    """Refuse a sequence length the encoder in ``model_dir`` has no positions for, from its config.json
    (``positions`` when the caller has read it; a name that is no local folder is checked where the task
    loads it), before any data is read (a longer input would fail deep in the model after the featurizing,
    or be read past a RoPE model's trained context)."""
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise SpanBertError(f"{option}: found {length!r}, expected a positive integer")
    positions = positions if positions is not None else model_positions(model_dir)
    if positions is not None and length > positions:
        raise SpanBertError(
            f"{option}: found {length:,}, expected at most the {positions:,} positions of the encoder "
            f"({Path(model_dir) / 'config.json'}); pass a shorter --max_seq_length"
        )


# ---------------------------------------------------------------------------------------------
# Several processes: one writer, values chosen once, predictions sharded


def start_distributed(device: str = "auto") -> torch.device:
    """This process's device; joins the process group under torchrun (a no-op in one process)."""
    dev = distributed.resolve_device(device)
    distributed.init_distributed(dev)
    return dev


_writing = False


def write_once(fn: Callable[[], T]) -> T:
    """Run ``fn`` (which writes files or chooses a value) on rank 0 only; the other ranks wait and
    get its result (or its error). Nested calls run ``fn`` directly, so a helper that writes once can
    be called from inside another."""
    global _writing
    if _writing:
        return fn()

    def guarded() -> T:
        global _writing
        _writing = True
        try:
            return fn()
        finally:
            _writing = False

    return distributed.on_main(guarded)


def predict_sharded(n: int, predict: Callable[[Sequence[int]], list[T]]) -> list[T]:
    """Contract 7: ``predict(indices)`` returns the outputs of those items; each rank predicts its
    share (`distributed.shard_range`), and every rank returns all n outputs in the original order.
    In one process this is ``predict(range(n))``."""
    mine = predict(distributed.shard_range(n))
    return [x for part in distributed.all_gather_objects(mine) for x in part]


def length_batches(
    indices: Sequence[int], lengths: Sequence[int], batch_size: int, same_length: bool = False, max_tokens: int = 0
) -> list[list[int]]:
    """``indices`` in prediction batches: sorted by length (equal lengths keep their order), at most
    ``batch_size`` a batch; with ``same_length`` a batch holds one length only (no padding, so the
    encoder runs no mask and no unpadding), with ``max_tokens`` at most that many tokens, padding
    included (at least one item). ``lengths[i]`` is item i's token count."""
    order = sorted(indices, key=lambda i: lengths[i])
    batches: list[list[int]] = []
    cur: list[int] = []
    for i in order:
        n = lengths[i]  # the longest of the batch so far, as the order is sorted
        if cur and (
            len(cur) >= batch_size
            or (same_length and n != lengths[cur[0]])
            or (max_tokens and (len(cur) + 1) * n > max_tokens)
        ):
            batches.append(cur)
            cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    return batches


def cpu_batch_tokens(encoder: families.Family) -> int:
    """Tokens per prediction batch on CPU whose widest activation (the feed-forward's, `Family.ffn_size`
    floats a token) stays under glibc's mmap threshold
    (`spanbert.utils.MMAP_THRESHOLD`): such a batch reuses heap memory, a larger one maps and page-faults
    its activations in afresh at every layer (MiniLM 6 x 384, windows of 384 tokens: 60,000 page faults
    and ~10% more CPU time for batches of 64 than of 2). The matrix multiplies are as fast on a few
    hundred rows as on thousands."""
    return max(1, MMAP_THRESHOLD // (4 * encoder.ffn_size))


def seeded_model(seed: int | None) -> contextlib.AbstractContextManager[None]:
    """``with seeded_model(seed): model = ...``: the new weights are drawn from ``seed`` alone (the same
    head on every rank and in every run with this ``--seed``), then this rank's dropout stream is seeded
    (`spanbert.dropout.seeded_build`)."""
    return seeded_build(seed, distributed.rank())


def write_json_once(path: str | Path, data: Any, sort_keys: bool = True) -> None:
    """Pretty JSON (UTF-8 as is), atomically, written once (rank 0): `spanbert.utils.write_json`."""
    write_once(lambda: utils.write_json(path, data, sort_keys=sort_keys, ensure_ascii=False))


# ---------------------------------------------------------------------------------------------
# Scores on one scale


def percent(metrics: dict[str, Any], keep: Sequence[str] = ()) -> dict[str, Any]:
    """Every float score x100 (0-100, as SQuAD, coref and the GLUE leaderboard report them); ints
    (counts) and the keys in ``keep`` unchanged; nested dicts (per-type scores) too."""
    out: dict[str, Any] = {}
    for k, v in metrics.items():
        if isinstance(v, dict):
            out[k] = percent(v, keep)
        elif isinstance(v, float) and k not in keep:
            out[k] = 100.0 * v
        else:
            out[k] = v
    return out


def load_encoder(model_dir: str | Path, add_pooling_layer: bool = False) -> nn.Module:
    """The encoder of any family's checkpoint (`spanbert.families.load_encoder`): spanbert pre-training,
    a fine-tuned folder, HF BertModel/BertFor*, the original releases, the two-tower model."""
    return families.load_encoder(model_dir, add_pooling_layer=add_pooling_layer)


def load_tokenizer_for(model_dir: str | Path, tokenizer_dir: str | Path | None = None) -> Any:
    """The tokenizer saved with a checkpoint (or the one given), framed for the checkpoint's family
    (`spanbert.families.load_framed_tokenizer`): tasks frame ``cls_id a sep_id`` and ``cls_id a mid_id b sep_id``."""
    return families.load_framed_tokenizer(model_dir, tokenizer_dir)


def match_by_id(path: str | Path, by_id: dict[str, Any], wanted: Sequence[str], data: str, how: str = "") -> list[Any]:
    """The predictions ``by_id`` (read from ``path``) in the order of the data's ids ``wanted``: a file in any
    order scores the same. Ids the data repeats, ids without a prediction and predictions of no
    id of the data are errors naming the first few; ``data`` names the data (e.g. "the dev data") and
    ``how`` says how the file's ids are read."""
    if len(set(wanted)) != len(wanted):
        twice = sorted(x for x, c in Counter(wanted).items() if c > 1)
        raise SpanBertError(f"{data} repeats the id(s) {twice[:5]}: predictions cannot be matched to examples by id")
    known = set(wanted)
    missing = [x for x in wanted if x not in by_id]
    extra = [x for x in by_id if x not in known]
    if missing or extra:
        first = lambda ids: "[" + ", ".join(map(repr, ids[:5])) + (", ...]" if len(ids) > 5 else "]")  # noqa: E731
        found = []
        if missing:
            found.append(f"no prediction for {len(missing)} example id(s) {first(missing)}")
        if extra:
            found.append(f"{len(extra)} id(s) that are not in {data} {first(extra)}")
        raise DataError(path, f"found {' and '.join(found)}; expected one prediction per example ({len(wanted)}){how}")
    return [by_id[x] for x in wanted]


def warn_unseen(path: str | Path, found: Sequence[str], known: Sequence[str], what: str, trained_on: str) -> list[str]:
    """Warn once (rank 0) about the gold labels of a dev or test file that the model never saw in training
    (it cannot predict them): the official scorers count those items as misses, which is
    what a user expects; refusing the file would stop every run on a training subset. Returns them."""
    unseen = sorted(set(found) - set(known))
    if unseen:
        n = sum(label in unseen for label in found)
        distributed.eprint0(
            f"warning: {path}: {n} gold {what}(s) {unseen[:5]}{' ...' if len(unseen) > 5 else ''} never occur in "
            f"{trained_on}; the model cannot predict them, so they count as misses"
        )
    return unseen


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


def sweep_grid(model_dir: str | Path) -> dict[str, tuple]:
    """``learning_rates`` and ``batch_sizes`` of `sweep` for the family in ``model_dir`` (SpanBERT
    Appendix B; the two-tower model's §4 grid)."""
    habits = families.habits_of(model_dir)
    return {"learning_rates": habits.sweep_learning_rates, "batch_sizes": habits.sweep_batch_sizes}


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


def save_finetuned(
    model: nn.Module, output_dir: str | Path, tokenizer: Any, architecture: str, extra: dict[str, Any] | None = None
) -> None:
    """Save a task model (``model.bert``, any family, + an HF-named head) as config.json + model.safetensors
    + tokenizer (`spanbert.families.save_task_model`), once (rank 0).

    ``extra`` goes into config.json: HF keys (`id2label`, `num_labels`, `problem_type`) at the top
    level, and spanbert's own task settings under ``"spanbert"``.
    """
    # after DDP every rank holds the same weights: one writes, the others wait (a shared temporary
    # name written by two ranks at once was a FileNotFoundError in half of the 2-process runs)
    write_once(lambda: families.save_task_model(model, output_dir, tokenizer, architecture, extra))


def check_task_settings(
    model_dir: str | Path, architectures: tuple[str, ...], needs: str, tasks: tuple[str, ...]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(config.json dict, its ``spanbert`` settings) of a folder a predict/evaluate command reads a task
    model from (`spanbert.families.check_task_folder`), refused when spanbert saved it for a task not in
    ``tasks``; a folder without settings (transformers' own) passes."""
    raw = families.check_task_folder(model_dir, architectures, needs)
    settings = raw.get("spanbert") if isinstance(raw.get("spanbert"), dict) else {}
    if settings.get("task") not in (None, *tasks):
        raise SpanBertError(f"{model_dir}: found a {settings['task']} model, expected {needs}")
    return raw, settings


def load_finetuned(model_dir: str | Path) -> tuple[dict[str, Any], dict[str, torch.Tensor], Any]:
    """(config.json dict, state dict, framed tokenizer) of a folder saved by `save_finetuned`."""
    config_json, state = families.load_checkpoint(model_dir)
    return config_json, state, load_tokenizer_for(model_dir)


def load_task_model(
    model_dir: str | Path,
    build: Callable[[nn.Module, dict[str, Any]], nn.Module],
    architectures: tuple[str, ...],
    needs: str,
    device: str = "cpu",
    add_pooling_layer: bool = False,
) -> tuple[nn.Module, dict[str, Any], Any]:
    """A fine-tuned task model of any family -> (model in eval mode on ``device``, config.json dict,
    tokenizer framed for its family). ``build(encoder, config_json)`` puts the task's head on an encoder
    of the saved family and sizes; the folder is refused before anything is read when its config.json
    names none of ``architectures`` (``needs`` says what the command needs), and every weight must fit."""
    families.check_task_folder(model_dir, architectures, needs)
    config_json, state, tokenizer = load_finetuned(model_dir)
    source = str(Path(model_dir) / "config.json")
    encoder = families.encoder_from_config(config_json, add_pooling_layer=add_pooling_layer, source=source)
    model = build(encoder, config_json)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise SpanBertError(
            f"{model_dir}: weights do not match a {type(model).__name__}; missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    model.to(resolve_device(device)).eval()
    return model, config_json, tokenizer


# ---------------------------------------------------------------------------------------------
# Model selection on dev: the best evaluation of a run, the best run of a grid


class KeepBest:
    """Wraps a task's dev evaluation for `spanbert.trainer.train` and keeps what the evaluation made
    (predictions, a chosen threshold: its ``payload``) at the evaluation the trainer selects.

    ``evaluate(model, step)`` returns ``(scalar metrics, payload)``; the wrapper hands the metrics to
    the trainer, which saves the best weights (``metric_for_best_model``) to ``output_dir/best/``. The
    same rule picks the payload here (a strictly better score; ties keep the earlier step), so the
    predictions written beside the saved model are those of the saved weights, not of the last step.
    Every rank holds the same gathered metrics, so every rank keeps the same payload.
    """

    def __init__(self, evaluate: Callable[[nn.Module, int], tuple[dict[str, float], Any]], args: TrainingArguments):
        self.evaluate = evaluate
        self.metric = args.metric_for_best_model
        self.greater = args.greater_is_better
        self.best: dict[str, Any] = {}
        self.last: dict[str, Any] = {}

    def __call__(self, model: nn.Module, step: int) -> dict[str, float]:
        metrics, payload = self.evaluate(model, step)
        entry = {"step": step, "metrics": metrics, "payload": payload}
        self.last = entry
        if self.metric and self.metric in metrics:
            old = self.best.get("metrics", {}).get(self.metric)
            new = metrics[self.metric]
            if old is None or (new > old if self.greater else new < old):
                self.best = entry
        return metrics

    def chosen(
        self, model: nn.Module, args: TrainingArguments, result: Any, train_examples: int
    ) -> tuple[Any, int | None]:
        """(payload of the model ``train`` returned, its step when it was selected on dev, else None).

        The trainer loads the best weights only at the planned last step (not after an earlier
        --stop_at_step); a resumed run may have found its best before the resume, whose payload is
        not here: then the model (holding those weights) is evaluated again.
        """
        stopped = 0 < args.stop_at_step == result.global_step < planned_steps(train_examples, args)
        selected = None if stopped else result.best_step
        step = selected if selected is not None else result.global_step
        kept = self.best if selected is not None else self.last
        if kept.get("step") != step:
            was_training = model.training
            model.eval()
            try:
                with torch.no_grad():
                    self(model, step)
            finally:
                model.train(was_training)
            kept = self.last
            if selected is not None:
                self.best = kept
        return kept["payload"], selected


def planned_steps(train_examples: int, args: TrainingArguments) -> int:
    """The optimizer steps of a whole run, as `spanbert.trainer.train` computes them when it batches by
    sequence count (the task datasets have no token lengths for ``max_tokens_per_batch``)."""
    world = distributed.distributed_env()[1]
    G = planned_batch_size(args.per_device_train_batch_size) * args.gradient_accumulation_steps * world
    if args.max_steps > 0:
        return args.max_steps
    return math.ceil(args.num_train_epochs * steps_per_epoch(train_examples, G, world))


def selection_summary(selected_step: int | None, args: TrainingArguments) -> dict[str, Any]:
    """``{"selected_step": N, "selected_by": METRIC}`` for a run whose model was chosen on dev (what the
    results files and the printed summary report), else ``{}``."""
    if selected_step is None:
        return {}
    return {"selected_step": int(selected_step), "selected_by": args.metric_for_best_model}


SELECTION_KEYS = ("selected_step", "selected_by")
"""What `selection_summary` adds to a run's results (and a sweep copies into each row of sweep.json)."""


def cell_arguments(targs: TrainingArguments, learning_rate: float, batch_size: int, run_dir: Path) -> TrainingArguments:
    """The training arguments of one sweep cell. With --resume a cell that has no checkpoint yet
    starts fresh (the sweep skips the finished cells; only the interrupted one resumes)."""
    resume = targs.resume and latest_checkpoint(run_dir) is not None
    return dataclasses.replace(
        targs,
        learning_rate=learning_rate,
        per_device_train_batch_size=batch_size,
        output_dir=str(run_dir),
        resume=resume,
        overwrite_output_dir=targs.overwrite_output_dir or (targs.resume and not resume),
    )


SWEEP_SUMMARY = "sweep.json"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
"""The large files of a saved model; a sweep keeps them for the best run only."""


def prune_run(run_dir: Path, keep_weights: bool) -> None:
    """Bounded disk for a finished sweep run: remove its resumable checkpoints (optimizer state),
    ``latest`` and ``best/`` (the selected weights are the saved model); without ``keep_weights`` also
    the saved model's weights. Its small results (config, dev scores, predictions, log) stay."""
    for p in run_dir.glob("checkpoint-*"):
        if p.is_dir():
            folders.remove(p)
    folders.remove(run_dir / BEST_DIR)
    folders.remove(run_dir / "latest")
    if not keep_weights:
        for name in WEIGHT_FILES:
            folders.remove(run_dir / name)


def sweep(
    run_one: Callable[[float, int, Path], float | dict[str, Any]],
    output_dir: str | Path,
    learning_rates: tuple[float, ...] = SWEEP_LEARNING_RATES,
    batch_sizes: tuple[int, ...] = SWEEP_BATCH_SIZES,
    resume: bool = False,
) -> dict[str, Any]:
    """Appendix B grid search. ``run_one(lr, batch_size, run_dir)`` fine-tunes into ``run_dir`` and
    returns the dev score (higher is better; every task's on the 0-100 scale), or a dict with it as
    ``dev_score`` and more to record (``selected_step``, ``selected_by``). With best-on-dev selection
    a run's score is that of its selected model, so the run with the best selected dev score wins, as
    in the released scripts (one best over the whole learning-rate grid).

    Disk stays bounded: after each run its checkpoints (optimizer state) and ``best/`` are removed,
    and the weights of every run but the best so far; the best run's model ends in ``output_dir``
    (its weights moved, its small files copied). ``output_dir/sweep.json`` lists every run's score and
    is rewritten after each run (``"complete": false`` until the end), so ``resume`` skips the runs
    it lists and continues the interrupted one.

    Under torchrun every rank runs every training run; the best run is chosen once (rank 0) and the
    files are pruned, moved and written once."""
    output_dir = Path(output_dir)
    summary_path = output_dir / SWEEP_SUMMARY

    def read_done() -> list[dict[str, Any]]:
        if not (resume and summary_path.is_file()):
            return []
        try:
            old = json.loads(summary_path.read_text())
            runs = list(old["runs"])
            if old.get("complete"):
                raise SpanBertError(f"{summary_path}: the sweep is complete; nothing to resume")
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise SpanBertError(
                f"{summary_path}: cannot read the sweep to resume ({e}); start over with --overwrite_output_dir"
            ) from None
        return runs

    results = write_once(read_done)
    done = {(r["learning_rate"], r["batch_size"]) for r in results}

    def best_of(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
        return max(runs, key=lambda r: r["dev_score"]) if runs else None  # the first of equal scores

    def record(complete: bool) -> dict[str, Any]:
        summary = {"best": best_of(results), "runs": results, "complete": complete}
        with atomic_write(summary_path, encoding="utf-8") as f:
            f.write(json.dumps(summary, indent=2) + "\n")
        return summary

    for lr in learning_rates:
        for bs in batch_sizes:
            if (lr, bs) in done:
                continue
            run_dir = output_dir / "sweep" / f"lr{lr:g}_bs{bs}"
            got = run_one(lr, bs, run_dir)
            row: dict[str, Any] = {"learning_rate": lr, "batch_size": bs}
            if isinstance(got, dict):
                row.update({k: v for k, v in got.items() if k != "dev_score"})
                row["dev_score"] = float(got["dev_score"])
            else:
                row["dev_score"] = float(got)
            row["dir"] = str(run_dir)
            before = best_of(results)
            results.append(row)
            at = f" (step {row['selected_step']})" if row.get("selected_step") is not None else ""
            distributed.print0(f"sweep: lr={lr:g} batch={bs}: dev {row['dev_score']:.4f}{at}")

            def prune(row: dict[str, Any] = row, before: dict[str, Any] | None = before) -> None:
                now = best_of(results)
                prune_run(Path(row["dir"]), keep_weights=now is row)
                if before is not None and now is row:  # a new best: the old best's weights go
                    prune_run(Path(before["dir"]), keep_weights=False)
                record(complete=False)

            write_once(prune)

    def choose_and_copy() -> dict[str, Any]:
        best = best_of(results)
        assert best is not None
        for item in Path(best["dir"]).iterdir():
            if not item.is_file() or folders.is_bookkeeping(item.name):  # the run's own manifest stays its own
                continue
            if item.name in WEIGHT_FILES:
                folders.record(output_dir / item.name)
                os.replace(item, output_dir / item.name)  # moved, not copied: one copy of the weights
            else:
                with atomic_write(output_dir / item.name, "wb") as f, open(item, "rb") as src:
                    shutil.copyfileobj(src, f)
        return record(complete=True)

    return write_once(choose_and_copy)


__getattr__ = _aliases.getter(__name__)
