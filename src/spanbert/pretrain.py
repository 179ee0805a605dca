"""The pre-training job: one pipeline that builds, trains, evaluates and exports every system (`pretrain`).

Its data (the system resolved, the inputs checked, the corpus prepared, the blocks) is `spanbert.pretrain_data`;
the plan's cost `spanbert.pretrain_plan`; the options and presets `spanbert.pretrain_config`; the command line
and the Python entry ``spanbert.pretrain(...)`` `spanbert.pretrain_command`.

Systems (§4.2, §5, §6 of the paper), each at any model size (tiny/small/base/large):

| system | masking | sequences | objectives | paper |
|---|---|---|---|---|
| spanbert | geometric spans | single, up to 512 | MLM + SBO | §3, Table 1-5 |
| bert | subword tokens | two segments | MLM + NSP | "Our BERT" |
| bert-1seq | subword tokens | single | MLM | "Our BERT-1seq" |
| google-bert | subword tokens | two segments, 10% short | MLM + NSP | Google BERT's data recipe |
| mask-subword, mask-whole-word, mask-named-entity, mask-noun-phrase, mask-span | as named | two segments | MLM + NSP | Table 6 |
| span-2seq-nsp, span-1seq, span-1seq-sbo | geometric spans | as named | as named | Table 7 |
| ltr | none (every token is a target) | single | left-to-right LM, causal attention | BERT §5.1 "LTR & No NSP" |
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import math
import sys
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from spanbert import _aliases, distributed, pretrain_data, trained_inputs
from spanbert.batch_plan import token_batch_count
from spanbert.budget import TimeBudget, format_duration, parse_duration
from spanbert.cloze_config import CLOZE_SYSTEMS
from spanbert.collate import collate_pretrain
from spanbert.distributed import eprint0, print0
from spanbert.dropout import seeded_build, set_dropout
from spanbert.errors import SpanBertError
from spanbert.families import (
    BERT_PRETRAINING,
    bert_target_counts,
)
from spanbert.masking import SCHEMES, MaskingConfig
from spanbert.microbatch import AUTO, planned_batch_size
from spanbert.pretrain_config import (
    QUICKSTART_CONFIG,
    RECIPES,
    RELEASED_MAX_TOKENS,
    PretrainConfig,
    seq_length_stages,
    system_masking,
)
from spanbert.pretrain_data import Resolved, check_init_vocabulary, check_sources, plan_model, resolve
from spanbert.pretrain_plan import check_plan
from spanbert.runs import check_output_dir, claim_run_dir, find_resume_checkpoint
from spanbert.tokenization import load_tokenizer
from spanbert.trainer import predict_batches, train
from spanbert.training_args import TrainingArguments
from spanbert.utils import atomic_dir, input_paths


def apply_batching(cfg: PretrainConfig, args: TrainingArguments, world: int) -> TrainingArguments:
    """``args`` with the batching of ``cfg.tokens_per_update`` for ``world`` processes.

    tokens_per_update > 0: micro-batches of ``max_tokens_per_batch`` tokens (4096 when 0) and the
    accumulation that brings processes x accumulation x budget to tokens_per_update (rounded to the
    nearest integer, at least 1; `batching_line` says when it is not exact). 0: ``args`` unchanged.
    """
    if not cfg.tokens_per_update:
        return args
    budget = args.max_tokens_per_batch or RELEASED_MAX_TOKENS
    accum = max(1, round(cfg.tokens_per_update / (budget * world)))
    return dataclasses.replace(args, max_tokens_per_batch=budget, gradient_accumulation_steps=accum)


def batching_line(cfg: PretrainConfig, args: TrainingArguments, world: int) -> str:
    """How an update is batched, in words (after `apply_batching`)."""
    accum = args.gradient_accumulation_steps
    if args.max_tokens_per_batch:
        total = args.max_tokens_per_batch * accum * world
        line = (
            f"batches of <= {args.max_tokens_per_batch:,} tokens x {accum} accumulation x {world} process(es) "
            f"= <= {total:,} tokens per update"
        )
        if cfg.tokens_per_update and total != cfg.tokens_per_update:
            line += f" (tokens_per_update {cfg.tokens_per_update:,} is not a multiple of the budget x processes)"
        return line
    b = args.per_device_train_batch_size
    if b == AUTO:  # the trainer's probe decides (spanbert.microbatch)
        return f"batches of auto (the largest that fits) sequences x {accum} accumulation x {world} process(es)"
    return f"batches of {b} sequences x {accum} accumulation x {world} process(es) = {b * accum * world} sequences per update"


def released_term_weights(counts: dict[str, int], totals: dict[str, float], world: int) -> dict[str, float]:
    """The released SpanBERT loss normalisation, as `train`'s ``term_weights``.

    fairseq's ``span_bert_loss`` (criterions/spanbert_loss.py) gives each micro-batch the loss
    sum CE(MLM) / n + sum CE(SBO) / (p + 1) (n MLM targets, p SBO targets; mlm_nsp_sbo_loss.py adds
    sum CE(NSP) / sentences) with sample size n, and its trainer (fairseq/trainer.py) multiplies the
    summed gradients by world / (n summed over the micro-batches and processes). Each micro-batch's
    mean losses are so weighted by 1 / (the step's MLM targets), the SBO one also by p / (p + 1):
    a gradient about (micro-batches per update / targets per update) of the paper's mean, which is
    why clipping at 1.0 hardly ever binds in the released run. Times ``world``: DDP averages.
    """
    n = totals.get("mlm", 0.0)
    if not n:
        return {}
    p = counts.get("sbo", 0)
    return {"mlm": world / n, "sbo": world * p / (p + 1) / n, "nsp": world / n}


def sbo_warmup(steps: int) -> Callable[[int], dict[str, float]] | None:
    """--sbo_warmup_steps as `train`'s ``term_schedule``: the SBO term of step s (1-based) weighs
    min(1, s / steps) of --sbo_weight; None (no schedule) for 0."""
    if steps <= 0:
        return None
    return lambda step: {"sbo": min(1.0, step / steps)}


def check_masking(masking: MaskingConfig) -> None:
    """Reject masking options `mask_block` could not use, before any data is prepared."""
    m = masking
    if m.scheme not in SCHEMES:
        raise SpanBertError(
            f"--masking: found unknown masking scheme {m.scheme!r}, expected one of: {', '.join(SCHEMES)}"
        )
    if not 0.0 < m.mask_prob < 1.0:
        raise SpanBertError(f"--mask_prob: found {m.mask_prob}, expected a number between 0 and 1 (exclusive)")
    if not 0.0 < m.geometric_p <= 1.0:
        raise SpanBertError(f"--geometric_p: found {m.geometric_p}, expected a probability in (0, 1]")
    if m.max_span_len < 1:
        raise SpanBertError(f"--max_span_len: found {m.max_span_len}, expected at least 1")
    probs = tuple(m.replace_probs)
    if len(probs) != 3 or any(not (0.0 <= p <= 1.0) for p in probs) or abs(sum(probs) - 1.0) > 1e-6:
        raise SpanBertError(
            f"--replace_probs: found {probs}, expected 3 probabilities ([MASK], random, unchanged) that sum to 1"
        )
    if m.anchor not in ("word", "subword"):
        raise SpanBertError(f"--anchor: found {m.anchor!r}, expected word or subword")
    if m.max_sbo_targets is not None and m.max_sbo_targets < 1:
        raise SpanBertError(f"--max_sbo_targets: found {m.max_sbo_targets}, expected at least 1 (or none)")
    if not 0.0 <= m.candidate_fraction <= 1.0:
        raise SpanBertError(f"--candidate_fraction: found {m.candidate_fraction}, expected a fraction in [0, 1]")
    if m.random_token not in ("unigram", "uniform"):
        raise SpanBertError(f"--random_token: found {m.random_token!r}, expected unigram or uniform")


def make_eval_fn(eval_set, batch_size: int, collate, count_targets=None, precision: str = "auto", metrics=None):
    """``evaluate(model, step)``: held-out loss and accuracy of each loss term (``metrics``: term ->
    metric names, BERT's heads by default), each averaged over its targets (a batch's mean weighs by
    its target count), not over batches.

    Called on every rank (contract 7): each rank predicts its share (`distributed.shard_range`), the
    sums are gathered, and every rank returns the same numbers.
    """
    count_targets = count_targets or bert_target_counts
    metrics = metrics or BERT_PRETRAINING.metrics

    def evaluate(model, step: int) -> dict[str, float]:
        share = list(distributed.shard_range(len(eval_set)))
        sums: dict[str, float] = {}
        weights: dict[str, int] = {}
        if share:
            subset = torch.utils.data.Subset(eval_set, share)
            device = next(model.parameters()).device
            batches = predict_batches(
                model, subset, batch_size, collate, device=device, precision=precision, disable_tqdm=True
            )
            for batch, out in batches:
                for head, n in count_targets(batch).items():
                    if n <= 0:
                        continue  # no targets: the model's mean is 0 or NaN and weighs nothing
                    for key in metrics.get(head, ()):
                        if key in out:
                            sums[key] = sums.get(key, 0.0) + float(out[key]) * n
                            weights[key] = weights.get(key, 0) + n
        total: dict[str, float] = {}
        count: dict[str, int] = {}
        for part_sums, part_weights in distributed.all_gather_objects((sums, weights)):  # rank order
            for k, v in part_sums.items():
                total[k] = total.get(k, 0.0) + v
                count[k] = count.get(k, 0) + part_weights[k]
        sums, weights = total, count
        results = {k: sums[k] / weights[k] for k in sorted(sums) if weights.get(k)}
        if results:
            eprint0(f"held-out at step {step}: " + " ".join(f"{k} {v:.4f}" for k, v in results.items()))
        return results

    return evaluate


@dataclasses.dataclass
class PretrainResult:
    """What a pre-training run returns (`pretrain`; from Python, `spanbert.pretrain(...)`)."""

    model_dir: Path
    """The exported model folder (``output_dir/final``): a HuggingFace BERT layout (or the family's),
    with its tokenizer; give it to ``spanbert.Encoder.from_pretrained`` or ``tasks.finetune(model=...)``.
    Absent when the run stopped before its end (``--stop_at_step``)."""
    output_dir: Path
    """The run folder: checkpoints, logs, the run's settings."""
    metrics: dict[str, float]
    """The exported model's ``train_metrics.json`` (the last training losses, the held-out evaluation)."""
    held_out_blocks: int = 0
    """The held-out blocks each evaluation scores (``max_eval_blocks`` of the held-out documents' blocks;
    0: none, or no training)."""


def pretrain(
    cfg: PretrainConfig, args: TrainingArguments, masking: MaskingConfig | None = None,
    model_overrides: dict[str, Any] | None = None, vocab_size_given: bool | None = None,
    inputs: Sequence[tuple[str, str]] = (),
) -> PretrainResult:  # fmt: skip
    """Run a pre-training job end to end, the same steps for every system; returns the exported model's
    folder, its metrics and the size of the held-out evaluation (`PretrainResult`).

    1. resolve the system once (`resolve`: family row, sampler, masking scheme) and check every option
       and input before any work (the family's `check`, the plan's cost);
    2. prepare the corpus and the family's vocabulary once (rank 0, `prepare_data`), read from disk by
       every rank;
    3. build the family's model (`Pretraining.build`) and cut the blocks with the system's sampler
       (`build_datasets`);
    4. train with the one loop (`trainer.train`), one call per stage of a length schedule;
    5. export ``output_dir/<output_name>`` atomically, with the family's config.json keys.

    ``model_overrides`` sets the family's model config fields directly (tests: the two-tower's dropout 0).
    ``vocab_size_given``: whether the user set ``vocab_size`` (None: when it is neither the field's default
    nor the quick start's), refused when a tokenizer or a prepared corpus decides another size.
    ``inputs``: (option, path) pairs besides the run's own inputs that the output folder must not be, is
    not in and does not hold (the command's --config file).
    """
    started = time.perf_counter()  # a --max_time budget counts from here, data preparation included
    cfg.__post_init__()  # a config edited after construction is checked again
    run = resolve(cfg)
    family, system = run.family, run.system
    checks = dict(
        system=cfg.system, masking=cfg.masking, init_from=cfg.init_from, causal=run.causal,
        max_seq_length=cfg.max_seq_length, max_predictions=cfg.max_predictions,
    )  # fmt: skip
    family.check(None, **checks)  # what the options alone decide (None: no model config yet)
    if cfg.recipe == "released" and not (args.decay_all_parameters and args.lr_scheduler_type == "polynomial"):
        eprint0(
            "note: --recipe released sets only the loss normalisation here; the command line also sets "
            f"{RECIPES['released']} (spanbert.pretrain.RECIPES)"
        )
    if family.masked:
        masking = dataclasses.replace(masking or MaskingConfig(**system_masking(system)), scheme=run.scheme)
        check_masking(masking)
    else:
        masking = None  # the family masks nothing
    if cfg.pad_to is not None and cfg.pad_to < cfg.max_seq_length:
        raise SpanBertError(f"--pad_to: found {cfg.pad_to}, expected at least --max_seq_length ({cfg.max_seq_length})")
    if cfg.seq_length_schedule and args.max_steps <= 0:
        raise SpanBertError("--seq_length_schedule: found no --max_steps, expected one (the shares are of the steps)")
    stages = seq_length_stages(cfg.seq_length_schedule, cfg.max_seq_length, args.max_steps)
    budget = TimeBudget(parse_duration(cfg.max_time), cfg.max_time, started) if cfg.max_time else None
    device = distributed.resolve_device(args.device)
    distributed.init_distributed(device)
    args = apply_batching(cfg, args, distributed.world_size())  # tokens_per_update -> accumulation
    # contract 3, before any work; the output apart from every path the run reads (``inputs``: the
    # command's --config file besides the corpus, a tokenizer, an --init_from model)
    check_output_dir(args, input_paths(cfg, ("corpus", "tokenizer", "init_from")) + list(inputs))
    # the folder is held (lock and manifest) from here to the export: data/, checkpoints, final/
    with claim_run_dir(args.output_dir, "spanbert pretrain"):
        if vocab_size_given is None:  # a Python caller of the job: a size other than the defaults was given
            vocab_size_given = cfg.vocab_size not in (PretrainConfig.vocab_size, QUICKSTART_CONFIG["vocab_size"])
        sources = check_sources(cfg, vocab_size_given)
        planned = plan_model(cfg, run, sources.init_config, model_overrides)
        family.check(planned, **checks)  # and what needs the planned model (its positions, causal or not)
        if sources.init_from is not None:  # the vocabulary the run tokenizes with names the checkpoint's rows
            check_init_vocabulary(sources.init_from, sources.init_config.vocab_size, sources.tokenizer, cfg.vocab_size)
        args = family.training_args(planned, args)
        sbo = "sbo" in system.objectives
        if args.max_steps > 0 and not cfg.random_init:  # before the vocabulary, the corpus and any file (an epoch's length is known later)
            warning = check_plan(planned, cfg, args, args.max_steps, sbo, device)
            if warning:
                eprint0(warning)

        # rank 0 prepares, the others poll the store: preparing a large raw-text corpus may outlast the
        # process group's timeout, which a wait in a collective would not (distributed.on_main_long)
        prepare = lambda: pretrain_data.prepare_data(cfg, args, sources, run, planned)  # noqa: E731
        corpus_dir, tok_dir = distributed.on_main_long(prepare, key="prepare_data")
        tok = family.frame(load_tokenizer(tok_dir))  # from disk on every rank: the file that is exported

        with seeded_build(args.seed, distributed.rank()):  # the same weights on every rank, then a dropout stream per rank
            # --random_init with --init_from M: M's architecture and vocabulary, none of its weights (the
            # untrained twin a calibration compares M with)
            model = family.build(
                planned, tok, init_from=None if cfg.random_init else sources.init_from, objectives=system.objectives,
                mlm_weight=cfg.mlm_weight, sbo_weight=cfg.sbo_weight,
            )  # fmt: skip
        if cfg.random_init:
            final = Path(args.output_dir) / cfg.output_name
            extra = {**family.export_extra(cfg.system, None if run.causal else run.scheme), "random_init": True}
            distributed.on_main(lambda: export(model, tok, final, extra, {}))
            print0(f"no pre-training (--random_init): the freshly initialised model ({family.describe(model)}, seed {args.seed}) is in {final}")
            return PretrainResult(final, Path(args.output_dir), {})
        if cfg.dropout is not None:
            set_dropout(model, cfg.dropout)  # pre-training only: the exported config keeps the preset's rate
        train_set, eval_set = pretrain_data.build_datasets(cfg, corpus_dir, tok, args.seed, masking, run)
        run_config = json.loads(json.dumps(family.run_config(
            dataclasses.asdict(cfg), masking.settings() if masking else None, model.config
        )))  # fmt: skip
        static = getattr(train_set, "static", None)
        if static is not None:
            # which stored masks the run reads: a resume on a corpus re-made with other copies is refused
            run_config["StaticMasks"] = {"dupe_factor": static["dupe_factor"], "seed": static["seed"]}
        if args.max_steps <= 0 and budget is None:  # the length of an epoch is known only now
            if args.max_tokens_per_batch:  # an epoch is the same number of token batches every epoch
                units = token_batch_count(train_set.lengths(), args.max_tokens_per_batch)
                G = args.gradient_accumulation_steps * distributed.world_size()
            else:
                G = planned_batch_size(args.per_device_train_batch_size) * args.gradient_accumulation_steps * distributed.world_size()
                units = len(train_set)
            steps = math.ceil(args.num_train_epochs * units / G)
            warning = check_plan(model.config, cfg, args, steps, sbo, device)
            if warning:
                eprint0(warning)
        collate = functools.partial(
            _collate, pad_id=tok.pad_id, max_predictions=cfg.max_predictions, pad_to=cfg.pad_to, collate=run.sampler.collate
        )
        count = family.count_targets(model, system.objectives)

        def evaluation(held_out):
            if held_out is None:
                return None
            return make_eval_fn(held_out, args.per_device_eval_batch_size, collate, count, args.precision, family.metrics)

        eval_fn = evaluation(eval_set)
        print0(
            f"pre-training {cfg.system} ({_objective_line(run)}), model {cfg.init_from or cfg.model}: "
            f"{family.describe(model)}, {len(train_set)} blocks of <= {cfg.max_seq_length} tokens, "
            f"{len(eval_set) if eval_set else 0} held out"
        )
        print0(f"{batching_line(cfg, args, distributed.world_size())}; {cfg.recipe} optimisation")
        if static is not None:
            print0(
                f"static masks: {static['dupe_factor']} masked copies made by spanbert preprocess (seed {static['seed']}, "
                f"{cfg.static_masks}); epoch e reads copy e mod {static['dupe_factor']}"
            )
        model.train()
        # Appendix A.2's length schedule: one train() call per stage, all under this run's schedule of
        # max_steps; an earlier stage stops at its switch step with a checkpoint (--stop_at_step) and the
        # next resumes from it, so a straight run and a run killed and resumed anywhere take the same path
        # (model, optimizer, schedule and RNG states all pass through the switch checkpoint).
        resumed = distributed.on_main(lambda: _resume_step(args.output_dir)) if args.resume and len(stages) > 1 else 0
        user_stop = args.stop_at_step if args.stop_at_step > 0 else args.max_steps
        began, begin = False, 0
        for i, (length, end) in enumerate(stages):
            last = i == len(stages) - 1
            if not last and resumed >= end:
                begin = end
                continue  # resumed after this stage's switch
            stage_set, stage_eval = train_set, eval_fn  # the final length's, built above
            if length != cfg.max_seq_length:
                stage_cfg = dataclasses.replace(cfg, max_seq_length=length, seq_length_schedule=None)
                stage_set, held_out = pretrain_data.build_datasets(stage_cfg, corpus_dir, tok, args.seed, masking, run)
                stage_eval = evaluation(held_out)
            if len(stages) > 1:
                print0(f"sequence length {length} for steps {begin + 1}-{end} ({len(stage_set)} blocks)")
            stage_args = args if len(stages) == 1 else dataclasses.replace(
                args,
                stop_at_step=args.stop_at_step if last else min(end, user_stop),
                resume=args.resume or began,
                overwrite_output_dir=args.overwrite_output_dir and not began,  # never the switch checkpoint
            )
            result = train(
                model, stage_set, stage_args, collate_fn=collate, eval_fn=stage_eval,
                count_targets=count, run_config=run_config,
                term_weights=released_term_weights if cfg.recipe == "released" else None,
                term_schedule=sbo_warmup(cfg.sbo_warmup_steps), cost_warning=False,
                time_budget=budget,
            )  # fmt: skip
            began, begin = True, end
            if result.global_step < end:
                break  # the user's --stop_at_step
        final = Path(args.output_dir) / cfg.output_name
        metrics: dict[str, float] = {}
        if result.global_step >= (args.max_steps if args.max_steps > 0 else 0) and result.global_step >= result.total_steps:
            metrics = dict(result.metrics)
            extra = family.export_extra(cfg.system, None if run.causal else run.scheme)
            # what fine-tuning may rely on: the positions of the longest block, and type 1 only from two segments
            extra |= trained_inputs.record(max(length for length, _ in stages), 2 if system.sampler == "nsp" else 1)
            distributed.on_main(lambda: export(model, tok, final, extra, result.metrics))
            if budget is not None:
                print0(budget_end_line(budget, args.resume))
        return PretrainResult(final, Path(args.output_dir), metrics, len(eval_set) if eval_set else 0)


def budget_end_line(budget: TimeBudget, resumed: bool) -> str:
    """The last line of a --max_time run: what it took against the budget (a resumed run: its processes
    together, each up to its last checkpoint), how its plan moved, and how to rerun its steps."""
    took = budget.elapsed()
    off = took - budget.seconds
    line = (f"time budget {budget.text}: the run took {format_duration(took)}"
            + (" (its processes together)" if resumed else "")
            + f", {format_duration(abs(off))} ({abs(off) / budget.seconds:.1%}) {'over' if off > 0 else 'under'} it")  # fmt: skip
    planned = budget.plans[1:]  # the first is the provisional one, before the speed was measured
    if not planned:
        return line
    last = planned[-1]
    if len(planned) == 1:
        return line + f"; to rerun exactly these steps: --max_steps {last.total} --warmup_steps {last.warmup}"
    moves = " -> ".join(f"{p.total:,}" for p in planned)
    return (line + f"; the plan moved {len(planned) - 1} time(s) with the speed ({moves} steps, each from the rate "
            f"reached: the plans are in trainer_state.json); --max_steps {last.total} --warmup_steps {last.warmup} "
            "trains as many steps on the last plan's schedule")  # fmt: skip


def _objective_line(run: Resolved) -> str:
    """What the system trains, in words: its objective, its sequences and heads."""
    s = run.system
    if not run.family.masked:
        return "+".join(s.objectives) + ", nothing masked"
    objective = "left-to-right LM, every token" if run.causal else f"{run.scheme} masking"
    sbo = " + SBO" if "sbo" in s.objectives else ""
    return f"{objective}, {'two segments + NSP' if s.sampler == 'nsp' else 'single sequence'}{sbo}"


def _resume_step(output_dir: str) -> int:
    """The step of the checkpoint `--resume` will continue from."""
    ckpt, _ = find_resume_checkpoint(output_dir)
    return int(ckpt.name.rsplit("-", 1)[-1])


def _collate(items, pad_id: int, max_predictions: int | None, pad_to: int | None, collate: Callable = collate_pretrain):
    """The run's batches: the sampler's collate with the run's padding (one module-level function, so a
    test can watch every batch)."""
    return collate(items, pad_id=pad_id, max_predictions=max_predictions, pad_to=pad_to)


def export(model: nn.Module, tok: Any, final: Path, extra: dict[str, Any], metrics: dict[str, float]) -> None:
    """Write the pre-trained model (any family's `save_pretrained`) with its tokenizer and training
    metrics into ``final``: written beside it and swapped in whole, so a kill leaves the old export or
    the new one, never new weights beside an old config.json and old metrics."""
    with atomic_dir(final) as tmp:
        model.save_pretrained(tmp, tokenizer=tok, extra=extra)
        (tmp / "train_metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")


# ---------------------------------------------------------------------------------------------
# The earlier two-tower entry points: the one pipeline above, kept under their names


def pretrain_cloze(cfg: Any, args: Any, masking: Any = None, model_overrides: dict[str, Any] | None = None) -> PretrainResult:
    """`pretrain` for --system cloze | bilm | cloze-bilm (kept for callers of the earlier API)."""
    cfg.__post_init__()
    if cfg.system not in CLOZE_SYSTEMS:
        raise SpanBertError(f"--system: found {cfg.system!r}, expected one of: {', '.join(CLOZE_SYSTEMS)}")
    return pretrain(cfg, args, masking, model_overrides)


class _CallableModule(types.ModuleType):
    """`spanbert.pretrain` is this module and, called, the Python entry of pre-training
    (``spanbert.pretrain(corpus=..., system=...)``: `spanbert.pretrain_command.pretrain_from_keywords`, the
    command's presets and checks; the job does not import its command, so the call reaches it on use)."""

    def __call__(self, **options: Any) -> Any:
        return importlib.import_module("spanbert.pretrain_command").pretrain_from_keywords(**options)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["PretrainResult", "pretrain"]

__getattr__ = _aliases.getter(__name__)
