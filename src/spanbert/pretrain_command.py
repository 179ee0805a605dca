"""`spanbert pretrain` and `spanbert.pretrain(...)`: the options a user names, the presets they fall on, the
first line, then the job (`spanbert.pretrain.pretrain`).

The command line is parsed once (`named_values`: the flags, the ``--config`` YAML read once, the
``key=value`` overrides), Python keywords the same way (`keyword_values`); `configure` puts what the user
named on the presets' defaults (the quick start until a corpus or a model is named, the recipe, the
system's masking); `run_pretraining` checks the output, decides the thread count, prints the first line,
plans a time budget or scales the warm-up, and runs the job.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass
from typing import Any

import torch

from spanbert import distributed, threads
from spanbert.config import (
    _did_you_mean,
    check_unknown_overrides,
    check_yaml,
    convert_value,
    parse_key_values,
    replace_checked,
)
from spanbert.distributed import eprint0, print0, resolve_device
from spanbert.errors import SpanBertError
from spanbert.families import FAMILIES
from spanbert.masking import MaskingConfig
from spanbert.microbatch import AUTO, planned_batch_size
from spanbert.precision import precision_text
from spanbert.pretrain import PretrainResult, apply_batching, pretrain
from spanbert.pretrain_config import (
    LEAVES_QUICKSTART,
    PRETRAIN_DEFAULTS,
    QUICKSTART,
    QUICKSTART_CONFIG,
    RECIPES,
    SECTIONS,
    SEQUENCE_BATCHING,
    PretrainConfig,
    pretrain_parser,
    system_masking,
    system_of,
)
from spanbert.trainer import recorded_threads
from spanbert.training_args import TrainingArguments
from spanbert.utils import input_paths


def quick_start_in_force(named: argparse.Namespace | dict[str, dict[str, Any]]) -> bool:
    """True until the user names a corpus, a model or --init_from (`LEAVES_QUICKSTART`) as a flag, a
    key=value override, a key of the YAML file or a Python keyword: `spanbert pretrain --max_steps 100` is
    the quick start with 100 steps. ``named``: `named_values` (or the parsed command line, read by it)."""
    if isinstance(named, argparse.Namespace):
        named = named_values(named)
    return not set(named["PretrainConfig"]) & set(LEAVES_QUICKSTART)


def named_options(named: dict[str, dict[str, Any]], section: str, keys: tuple[str, ...]) -> set[str]:
    """Which of ``keys`` the user named in ``section`` (`named_values`)."""
    return set(named[section]) & set(keys)


def named_values(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """What the user named on the command line, by section (`SECTIONS`: ``{"PretrainConfig": {field:
    value}, ...}``), each value converted and checked where it came from: the ``--config`` YAML file (read
    here, once; flat keys go to every section with the field), then the flags, then the ``key=value``
    overrides, a later one winning. Only what was named: the defaults are the presets' (`configure`)."""
    out: dict[str, dict[str, Any]] = {cls.__name__: {} for cls in SECTIONS}
    layers: list[tuple[str, dict[str, dict[str, Any]]]] = []
    if args.config:
        layers.append((str(args.config), check_yaml(args.config, list(SECTIONS))))
    given = vars(args)
    layers.append(("command line", {cls.__name__: given for cls in SECTIONS}))
    if args.overrides:
        check_unknown_overrides(args.overrides, list(SECTIONS))
        kv = parse_key_values(args.overrides)
        layers.append(("command line", {cls.__name__: kv for cls in SECTIONS}))
    for source, values in layers:
        for cls in SECTIONS:
            names = {f.name for f in dataclasses.fields(cls)}
            section = out[cls.__name__]
            section.update({k: convert_value(cls, k, v, source) for k, v in values[cls.__name__].items() if k in names})
    return out


def keyword_values(options: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """`named_values` of a Python call's keywords: each goes to every section with the field; a keyword of
    none of them is one error naming it, with the nearest option (``learnig_rate``: did you mean
    ``learning_rate``?)."""
    valid = sorted({f.name for cls in SECTIONS for f in dataclasses.fields(cls)})
    for key in options:
        if key not in valid:
            raise SpanBertError(
                f"found unknown keyword {key!r}{_did_you_mean(key, valid)}; expected an option of "
                "spanbert.pretrain (`spanbert pretrain --help` lists them, by the same names)"
            )
    out: dict[str, dict[str, Any]] = {}
    for cls in SECTIONS:
        names = {f.name for f in dataclasses.fields(cls)}
        out[cls.__name__] = {k: convert_value(cls, k, _plain(v)) for k, v in options.items() if k in names}
    return out


def _plain(value: Any) -> Any:
    """A Python value as the option parsers take it: a path as its string (``Path("~/c")`` -> ``"~/c"``, which
    the options expand as the command line does), in a list too."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@dataclass
class Configured:
    """One pre-training run as the user's options and the presets decide it (`configure`)."""

    quick: bool
    """The quick start is in force (`quick_start_in_force`)."""
    cfg: PretrainConfig
    targs: TrainingArguments
    masking: MaskingConfig
    defaults: dict[str, Any]
    """The training-loop defaults in force (the preset's and the recipe's): what `scale_warmup` scales."""
    named: dict[str, dict[str, Any]]
    """What the user named (`named_values`)."""


def configure(named: dict[str, dict[str, Any]]) -> Configured:
    """The run's settings: each section's defaults (the quick start's until a corpus or a model is named, the
    recipe's, the system's masking), then what the user named on top. Naming a sequence count asks for
    sequence batching, and the token budget then defaults to off."""
    quick = quick_start_in_force(named)
    cfg_defaults = dict(QUICKSTART_CONFIG if quick else {})
    sequences = named_options(named, "TrainingArguments", SEQUENCE_BATCHING)
    if sequences and not named_options(named, "PretrainConfig", ("tokens_per_update",)):
        cfg_defaults["tokens_per_update"] = 0

    def build(cls: type, defaults: dict[str, Any]) -> Any:
        return replace_checked(cls(**defaults), named[cls.__name__])

    cfg = build(PretrainConfig, cfg_defaults)
    if "gradient_accumulation_steps" in sequences and cfg.tokens_per_update:
        raise SpanBertError(
            f"--gradient_accumulation_steps and --tokens_per_update {cfg.tokens_per_update}: found both, expected "
            "one (tokens_per_update sets the accumulation; pass --tokens_per_update 0 to set it yourself)"
        )
    train_defaults = {**PRETRAIN_DEFAULTS, **(QUICKSTART if quick else {}), **RECIPES[cfg.recipe]}
    if sequences and not named_options(named, "TrainingArguments", ("max_tokens_per_batch",)):
        train_defaults["max_tokens_per_batch"] = 0
    targs = build(TrainingArguments, train_defaults)
    masking = build(MaskingConfig, system_masking(system_of(cfg)))  # a flag or YAML key still wins
    return Configured(quick, cfg, targs, masking, train_defaults, named)


def preset_line(quick: bool, cfg: PretrainConfig, args: TrainingArguments) -> str:
    """The first line `spanbert pretrain` prints: which preset is in force, with its size."""
    world = distributed.world_size()
    args = apply_batching(cfg, args, world)
    batch = planned_batch_size(args.per_device_train_batch_size) * args.gradient_accumulation_steps * world
    length = f"{args.max_steps:,} steps" if args.max_steps > 0 else f"{args.num_train_epochs:g} epoch(s)"
    model = f"model from {cfg.init_from}" if cfg.init_from else f"{cfg.model} model"
    if args.max_tokens_per_batch:
        size = f"<= {args.max_tokens_per_batch * args.gradient_accumulation_steps * world:,} tokens"
    elif args.per_device_train_batch_size == AUTO:  # the trainer's probe decides (spanbert.microbatch)
        size = f"auto x {args.gradient_accumulation_steps * world} x {cfg.max_seq_length} tokens"
    else:
        size = f"{batch} x {cfg.max_seq_length} tokens"
    device = resolve_device(args.device)
    precision = f"on {device.type}, {precision_text(args.precision, device)}"  # which dtype, and why
    if device.type == "cpu":  # the weights depend on the thread count (`threads.decide_for_run`)
        n = torch.get_num_threads()
        precision += f", {n} CPU thread{'' if n == 1 else 's'}"
    steps = f"{length} of {size}"
    if cfg.random_init:  # nothing trains: the preset's count would be a promise not kept
        steps = "no training steps (--random_init exports the initialised model)"
    elif cfg.max_time:
        steps = (f"as many steps of {size} as fit --max_time {cfg.max_time} (data preparation included; planned "
                 "from the speed measured in the warm-up, re-planned as it changes)")
    plan = f"{model}, {steps}, {cfg.recipe} optimisation, {precision}, output {args.output_dir}"
    if quick:
        return (
            f"preset: quick start (tiny SpanBERT on the Python reference manual; {plan}); "
            "name a --corpus or a --model for the paper's recipe"
        )
    return f"preset: paper recipe (§4.2, Appendix A; {cfg.system}, {plan})"


def scale_warmup(
    targs: TrainingArguments, defaults: dict[str, Any], named: set[str]
) -> tuple[TrainingArguments, str | None]:
    """The preset's warm-up scaled to a shortened run, and the line that says so (None when unchanged).

    A preset's warm-up is a fixed step count (quick start: 100 of 1200; paper: 10k of 2.4M): kept
    for ``--max_steps 100`` the rate would still be rising at the last step and never decay. When the
    user shortens ``max_steps`` and names no warm-up (``named``: the options they gave), the warm-up
    keeps the preset's fraction of the run. A ``--warmup_ratio`` alone replaces the preset's count.
    """
    if "warmup_ratio" in named and "warmup_steps" not in named:
        # the ratio the user names applies only when warmup_steps is 0: the preset's count would win
        return dataclasses.replace(targs, warmup_steps=0), None
    preset_steps, preset_warmup = defaults.get("max_steps", 0), defaults.get("warmup_steps", 0)
    shortened = "max_steps" in named and 0 < targs.max_steps < preset_steps
    if not shortened or named & {"warmup_steps", "warmup_ratio"} or not preset_warmup:
        return targs, None
    warmup = round(preset_warmup * targs.max_steps / preset_steps)
    note = (
        f"warm-up: {warmup} steps of {targs.max_steps:,} (the preset's {preset_warmup:,} of {preset_steps:,}, "
        f"{preset_warmup / preset_steps:.2%}, scaled to the shorter run; --warmup_steps sets it)"
    )
    return dataclasses.replace(targs, warmup_steps=warmup), note


def run_pretraining(c: Configured, input_files: list[tuple[str, str]] | None = None) -> PretrainResult:
    """The job of `spanbert pretrain` and of `spanbert.pretrain(...)`, once `configure` has decided its
    settings: the thread count, the first line, the time budget or the warm-up scaled to a shortened run,
    then `pretrain`, which checks the output contract once (``input_files``: paths besides the run's inputs
    the output folder must not be: the --config file). Returns the run's `PretrainResult`."""
    cfg, targs, masking, named = c.cfg, c.targs, c.masking, c.named
    note = None
    if resolve_device(targs.device).type == "cpu" and not cfg.random_init:  # before the first line, which says it
        recorded = recorded_threads(targs) if targs.resume else None
        _, note = threads.decide_for_run(recorded, targs.threads)
    print0(preset_line(c.quick, cfg, targs))
    if note:
        eprint0(note)
    named_schedule = named_options(named, "TrainingArguments", ("max_steps", "warmup_steps", "warmup_ratio"))
    if cfg.max_time:
        if "max_steps" in named_schedule:
            raise SpanBertError(f"--max_time {cfg.max_time}: found --max_steps {targs.max_steps} too, expected one of them")
        if "warmup_steps" not in named_schedule:
            raise SpanBertError(
                f"--max_time {cfg.max_time}: found no --warmup_steps, expected one (at least 5): the step speed is "
                "measured during the warm-up, which must not depend on the total it decides"
            )
        targs = dataclasses.replace(targs, max_steps=-1)  # decided by the budget
    else:
        targs, note = scale_warmup(targs, c.defaults, named_schedule)
        if note:
            print0(note)
    # a --vocab_size the user gave that the corpus or tokenizer contradicts is refused by the job's one
    # check of its sources (`pretrain_data.check_sources`), before any work
    given = bool(named_options(named, "PretrainConfig", ("vocab_size",)))
    return pretrain(cfg, targs, masking, vocab_size_given=given, inputs=input_files or ())


def pretrain_from_keywords(**options: Any) -> PretrainResult:
    """Pre-train from Python with the options of `spanbert pretrain`, by name, with Python values; what
    ``spanbert.pretrain(...)`` calls::

        import spanbert
        run = spanbert.pretrain(corpus="corpus.txt", system="spanbert", model="small", max_steps=2000,
                                output_dir="runs/spanbert-small")
        run.model_dir, run.metrics

    The same presets as the command line (no corpus, model or ``init_from``: the quick start), the same
    checks and the same job; an unknown keyword or a value of the wrong type is one `SpanBertError` naming
    the keyword. ``threads`` sets the CPU threads as the flag does (unset: the cores other processes leave
    free)."""
    threads.configure_from(options)
    return run_pretraining(configure(keyword_values(options)))


def main(argv: list[str], prog: str = "spanbert pretrain") -> int:
    p = pretrain_parser(prog, PRETRAIN_DEFAULTS, {})
    args = p.parse_args(argv)
    c = configure(named_values(args))  # the YAML file read once, here
    final = run_pretraining(c, input_paths(args, ("config",))).model_dir
    cfg = c.cfg
    if final.exists():
        system = system_of(cfg)
        lines = FAMILIES[system.family].pretraining.next_steps(final, system.objectives)
        if cfg.random_init:  # untrained heads fill nothing worth reading: only the fine-tuning hint
            lines = [f"next: fine-tune it as the pre-trained model it is a control for, e.g.: spanbert finetune squad "
                     f"--model {final} --train_file ... --validation_file ..."]  # fmt: skip
        for line in lines:
            print0(line)
    return 0


__all__ = ["PretrainResult", "main", "pretrain_from_keywords"]
