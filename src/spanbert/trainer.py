"""One explicit training loop for pre-training and fine-tuning.

AdamW with decoupled weight decay (LayerNorm weights and biases exempt unless told), linear warmup
then linear (or fairseq polynomial) decay, batches of a sequence count or a token budget, gradient
clipping, gradient accumulation, bf16/fp16 autocast, atomic checkpoints with exact resume, and DDP
under `torchrun` (NCCL on GPU, gloo on CPU).

`train` sets a run up and then loops over named pieces (`spanbert.loop`: one optimisation step, the
logging of a window, an evaluation, a checkpoint, the time budget's decision); this module keeps the
sample order below, the plan of a fine-tuning run and the setting up.

Determinism: the sample order is a function of (seed, epoch) only and the micro-batches of global step
s are the slice [s*G, (s+1)*G) of that epoch's permutation (G = global batch). So the data position
is derived from the step count, a resume needs nothing but the step, and 1 process with accumulation
sees exactly the micro-batches that N processes see together. With a token budget
(`max_tokens_per_batch`) the same holds with micro-batches in place of examples: epoch e's
micro-batches are a pure function of (seed, e, the dataset's lengths, the budget) (`token_batches`)
and step s takes [s*M, (s+1)*M) of them, M = processes x accumulation.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from spanbert import cost, threads, trained_inputs
from spanbert.batch_plan import (
    PadBatch,
    permutation,
    sequence_plan,
    sorted_positions,
    token_batch_count,
    token_batch_cuts,
    token_plan,
)
from spanbert.budget import MIN_MEASURED, Pace, TimeBudget, first_plan_step, plans_from, replan_every
from spanbert.compile import CompileReport, compile_regions, graphs_compiled, wants_compile
from spanbert.cost import finetune_warning
from spanbert.distributed import distributed_env, eprint0, init_distributed, is_main, on_main, print0, resolve_device
from spanbert.errors import SpanBertError
from spanbert.loop import (
    Run,
    State,
    check_time_budget,
    checkpoint,
    close_run,
    decide_time_budget,
    epoch_stream,
    evaluate,
    finish,
    log_window,
    optimisation_step,
    planned_schedule,
    restore_best,
    save_interval,
    schedule,
    step_done,
    stop_step,
    to_device,
    train_seconds,
)
from spanbert.microbatch import AUTO, resolve_batch_size
from spanbert.optim import clip_groups, make_optimizer, param_groups
from spanbert.precision import _with_flushed_denormals, autocast_dtype, flush_denormals, precision_note, precision_text
from spanbert.runs import (
    _Logger,
    _start_log,
    _start_run_dir,
    check_output_dir,
    compare_settings,
    find_resume_checkpoint,
    load_training_state,
    resume_state,
    steps_per_epoch,
)
from spanbert.training_args import TrainingArguments
from spanbert.utils import configure_malloc, progress_bar


@dataclass
class TrainResult:
    global_step: int
    skipped_steps: int
    metrics: dict[str, float]
    """The last logged training averages and evaluation results."""
    best_step: int | None = None
    """With metric_for_best_model: the step of the best evaluation so far (None: no evaluation). The
    model holds its weights at the end of a run that reached its last step; a run stopped by
    stop_at_step keeps its last weights (its best is still to be decided)."""
    best_metrics: dict[str, float] = field(default_factory=dict)
    """With metric_for_best_model: the evaluation results of best_step."""
    total_steps: int = 0
    """The run's total steps (max_steps, the epochs' steps, or what a time budget decided)."""
    train_seconds: float = 0.0
    """Wall seconds of training from step 0 to the end of this call, every run of it counted: a resumed
    run adds its own to what its checkpoint recorded (the work a killed run did after that checkpoint,
    done again, counts once)."""


# ---------------------------------------------------------------------------------------------
# Sample order


def epoch_permutation(n: int, seed: int, epoch: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(n)


def eval_schedule(eval_steps: int, evals_per_epoch: int, epoch_steps: int) -> Callable[[int], bool]:
    """Whether the evaluation runs after step ``step`` (1-based): every ``eval_steps`` steps, or else
    ``evals_per_epoch`` times an epoch at the evenly spaced steps ceil(k * epoch_steps / N), k = 1..N, the
    last at the epoch's end. Exactly N a epoch (an interval rounded down, 25 // 10 = 2, gave 12), or
    every step when the epoch has fewer than N."""
    if eval_steps:
        return lambda step: step % eval_steps == 0
    if not evals_per_epoch:
        return lambda step: False
    points = {math.ceil(k * epoch_steps / evals_per_epoch) for k in range(1, evals_per_epoch + 1)}
    return lambda step: (step % epoch_steps or epoch_steps) in points


def micro_batches(
    n: int, seed: int, epoch: int, batch: int, accum: int, rank: int, world: int, start_step: int
) -> list[list[list[int]]]:
    """This rank's micro-batches of one epoch from ``start_step`` on, grouped by optimizer step.

    Global step s covers perm[s*G : (s+1)*G], G = batch * world * accum; its micro-batch m on rank r is
    the slice at offset (m * world + r) * batch. The last step may be short: one process splits it into
    fewer micro-batches, N processes into the same micro-batches spread over the ranks, a rank left
    without one in a micro-batch slot running a `PadBatch` of weight 0. So every example is trained on
    once per epoch whatever the number of processes.
    """
    return list(sequence_plan(n, seed, epoch, batch, accum, rank, world, start_step))


def token_batches(lengths: np.ndarray, max_tokens: int, seed: int, epoch: int) -> list[list[int]]:
    """The micro-batches of one epoch under a token budget, in the order they are used.

    As fairseq's ``batch_by_size`` (the released SpanBERT run): examples sorted by length are cut
    greedily into batches whose padded size, count x longest, stays <= ``max_tokens``; the batches are
    then shuffled. Unlike fairseq, examples of equal length are ordered by a (seed, epoch) permutation
    first, so a batch's members change every epoch (fairseq sorts equal lengths by index and keeps the
    same batches in every epoch). A pure function of (lengths, max_tokens, seed, epoch); every epoch has
    the same number of batches (the sorted lengths, and so the cuts, do not depend on the epoch).
    """
    lengths = np.asarray(lengths)
    cuts = token_batch_cuts(lengths, max_tokens)  # the greedy cuts of the sorted order, from the length histogram
    order = sorted_positions(lengths, permutation(len(lengths), seed, epoch), np.arange(len(lengths)))
    shuffle = np.random.default_rng([seed, epoch, 0xBA7C]).permutation(len(cuts) - 1)
    return [order[cuts[j] : cuts[j + 1]].tolist() for j in shuffle]


def token_micro_batches(
    lengths: np.ndarray, max_tokens: int, seed: int, epoch: int, accum: int, rank: int, world: int, start_step: int
) -> list[list[list[int]]]:
    """`micro_batches` under a token budget: step s takes micro-batches [s*M, (s+1)*M) of
    `token_batches`, M = world * accum, micro-batch m of rank r being number s*M + m*world + r; so one
    process with accumulation M sees what M processes see together. The last step may be short, as in
    `micro_batches` (`PadBatch` where a rank has no micro-batch left)."""
    return list(token_plan(lengths, max_tokens, seed, epoch, accum, rank, world, start_step))


def _mean_tokens(dataset: Any) -> float | None:
    """Mean tokens of an example of ``dataset``: from ``lengths()``, or from the ``input_ids`` of up to 64
    examples; None when neither tells (no estimate is made then)."""
    try:
        return float(np.mean(dataset_lengths(dataset)))
    except SpanBertError:
        sizes = []
        for i in range(min(64, len(dataset))):
            item = dataset[i]
            ids = item.get("input_ids") if isinstance(item, dict) else None
            if ids is not None:
                sizes.append(int(np.asarray(ids).size))
        return float(np.mean(sizes)) if sizes else None


def _trainable_params(model: nn.Module) -> int:
    """The weights the cost estimate counts: trainable ones outside the embedding tables."""
    embedding = {id(p) for m in model.modules() if isinstance(m, nn.Embedding) for p in m.parameters()}
    return sum(p.numel() for p in model.parameters() if p.requires_grad and id(p) not in embedding)


@dataclass(frozen=True)
class EvalSize:
    """What one evaluation pass reads, for the plan's estimate: the dev examples as the user counts them
    (questions, sentences, documents) and the tokens of the features the model runs on."""

    examples: int
    tokens: float


def eval_size(examples: int, features: Any) -> EvalSize | None:
    """`EvalSize` of ``examples`` dev examples made into ``features`` (a sequence of dicts with
    ``input_ids``, or a dataset with ``lengths()``); None when they tell no token count."""
    mean = _mean_tokens(features) if len(features) else 0.0
    return None if mean is None else EvalSize(examples, mean * len(features))


def evaluations(eval_steps: int, evals_per_epoch: int, epoch_steps: int, total: int) -> int:
    """How many times `train` evaluates in a run of ``total`` steps: at the `eval_schedule` steps before
    the last, and at the last."""
    if eval_steps:
        return (total - 1) // eval_steps + 1
    if not evals_per_epoch:
        return 1
    points = {math.ceil(k * epoch_steps / evals_per_epoch) for k in range(1, evals_per_epoch + 1)}
    full, rest = divmod(total - 1, epoch_steps)
    return full * len(points) + sum(p <= rest for p in points) + 1


def plan_finetuning(
    model: nn.Module, dataset: Any, args: TrainingArguments, epoch_steps: int, total: int,
    device_type: str, threads: int, world: int, dev: EvalSize | None,
) -> tuple[int, Any, str | None]:  # fmt: skip
    """(the evaluations per epoch to use, the `cost.FinetunePlan`, a note when they were lowered).

    Training is estimated as `cost.finetune_warning` does (6 N FLOPs a token over the training set's
    tokens); an evaluation pass as forward only (`cost.evaluation_flops`) over the dev features
    (``dev``; None when there is no evaluation or no token count). With ``args.max_eval_share`` and
    no ``eval_steps``, evals_per_epoch is lowered to the largest number whose evaluations take at most
    that share of the training time (at least 1); without token counts the schedule is kept."""

    per_epoch, epochs = args.evals_per_epoch, total / epoch_steps
    mean = _mean_tokens(dataset)
    if mean is None:
        return per_epoch, cost.FinetunePlan(total, epochs, device_type, None), None
    rate = cost.machine_flops(device_type, threads) * max(1, world)
    params, tokens = _trainable_params(model), epochs * len(dataset) * mean
    train_s = cost.training_flops(params, tokens) / rate
    if dev is None:
        return (
            per_epoch,
            cost.FinetunePlan(total, epochs, device_type, train_s, params=params, train_tokens=tokens),
            None,
        )
    pass_s = cost.evaluation_flops(params, dev.tokens) / rate

    def count(n: int) -> int:
        return evaluations(args.eval_steps, n, epoch_steps, total)

    note = None
    if args.max_eval_share > 0 and not args.eval_steps and per_epoch > 1:
        chosen = cost.evals_within(args.max_eval_share, per_epoch, train_s, pass_s, count)
        if chosen < per_epoch:
            note = (
                f"note: evaluating {chosen} time{'' if chosen == 1 else 's'} per epoch, not {per_epoch}: "
                f"{count(per_epoch):,} evaluations of {dev.examples:,} dev examples would take about "
                f"{cost.human_duration(count(per_epoch) * pass_s)}, more than {args.max_eval_share:.0%} of the "
                f"{cost.human_duration(train_s)} of training; --evals_per_epoch {per_epoch} keeps the paper's "
                "schedule (--max_eval_examples N evaluates on fewer dev examples)"
            )
            per_epoch = chosen
    n = count(per_epoch)
    plan = cost.FinetunePlan(total, epochs, device_type, train_s, n, n * pass_s, dev.examples, params, tokens)
    return per_epoch, plan, note


LONG_FINETUNE_HINT = (
    "--num_train_epochs or --max_steps, --max_train_examples, --max_eval_examples or fewer --evals_per_epoch, "
    "a smaller model, or a GPU"
)


def dataset_lengths(dataset: Any) -> np.ndarray:
    """Per-example token counts of ``dataset`` (its ``lengths()``), for token-budget batching."""
    get = getattr(dataset, "lengths", None)
    if get is None:
        raise SpanBertError(
            f"--max_tokens_per_batch: found a training set ({type(dataset).__name__}) without lengths(), "
            "expected one that tells each example's token count (or batch by sequences: --max_tokens_per_batch 0)"
        )
    lengths = np.asarray(get() if callable(get) else get)  # a memory-mapped index stays one (no int64 copy)
    if lengths.dtype.kind not in "iu":
        lengths = lengths.astype(np.int64)
    if lengths.shape != (len(dataset),):
        raise SpanBertError(
            f"{type(dataset).__name__}.lengths(): found shape {lengths.shape}, expected ({len(dataset)},)"
        )
    return lengths


# ---------------------------------------------------------------------------------------------
# The loop


def make_grad_scaler(amp_dtype: torch.dtype | None, device: torch.device):
    """The fp16 loss scaler (None for fp32/bf16); a function so tests can force one on CPU."""
    return torch.amp.GradScaler("cuda") if amp_dtype == torch.float16 else None


def _announce_plan(
    model: nn.Module, dataset: Any, args: TrainingArguments, epoch_steps: int, total: int,
    device: torch.device, world: int, dev: EvalSize | None, shared: str | None = None,
) -> int:  # fmt: skip
    """Print the plan (rank 0), the note of a lowered schedule and the day warning; refuse a plan over a
    week (not on --resume: that run was started); return the evaluations per epoch to use. Estimated
    once on rank 0 (its thread count) and shared, so every rank evaluates at the same steps. ``shared``
    (`threads.sharing`): what other processes use of the cores, said on the plan line."""

    def decide() -> tuple[int, Any, str | None, str | None]:
        threads = torch.get_num_threads()
        per_epoch, plan, note = plan_finetuning(
            model, dataset, args, epoch_steps, total, device.type, threads, world, dev
        )
        plan = replace(plan, shared=shared)
        error = cost.long_run_error(plan.seconds, device.type, "this fine-tuning", LONG_FINETUNE_HINT)
        if error and not (args.allow_long_run or args.resume):
            raise SpanBertError(f"{error}; {plan.line()}")
        # the day warning from the plan's own count of weights and tokens (no second pass over the data)
        warning = None
        if plan.train_seconds is not None and not args.resume:
            warning = finetune_warning(plan.params, plan.train_tokens, device.type, threads, world)
        return per_epoch, plan, note, warning

    per_epoch, plan, note, warning = on_main(decide)
    print0(plan.line())
    if note:
        print0(note)
    if warning:
        eprint0(warning)
    return per_epoch


MAX_CONSECUTIVE_SCALER_SKIPS = 25
"""--nan_policy stop: this many fp16 overflow skips in a row stop the run (the scale fell by 2^25)."""


@_with_flushed_denormals
def train(
    model: nn.Module,
    train_dataset: Any,
    args: TrainingArguments,
    *,
    collate_fn: Callable | None = None,
    lr_by_prefix: dict[str, float] | None = None,
    eval_fn: Callable[[nn.Module, int], dict[str, float]] | None = None,
    count_targets: Callable[[Any], dict[str, int]] | None = None,
    run_config: dict | None = None,
    weight_decay_by_prefix: dict[str, float] | None = None,
    clip_by_prefix: tuple[str, ...] | None = None,
    term_weights: Callable[[dict[str, int], dict[str, float], int], dict[str, float]] | None = None,
    term_schedule: Callable[[int], dict[str, float]] | None = None,
    cost_warning: bool = True,
    eval_size: EvalSize | None = None,
    time_budget: TimeBudget | None = None,
) -> TrainResult:
    """Train ``model`` on ``train_dataset`` (map-style) and return the final step and metrics.

    ``model(**batch)`` must return a dict with a scalar ``"loss"``; other scalar entries whose names
    end in ``loss`` or ``acc`` are averaged and logged. With ``count_targets`` and a model output
    ``"loss_terms"`` (each a mean over its targets), every term is weighted by its micro-batch's share
    of the step's targets over all micro-batches and ranks, so accumulation and N processes equal
    one big batch exactly; otherwise ``loss`` is weighted by the examples of the micro-batch.
    ``eval_fn(model, step)`` runs every ``eval_steps`` and at the end on every rank (eval mode, no
    grad); rank 0 logs its result. ``run_config`` (extra settings of the run) is saved in every
    checkpoint and compared with --resume, as the arguments are.

    ``weight_decay_by_prefix`` gives parameters whose name starts with a prefix their own weight
    decay; ``clip_by_prefix`` clips the gradients of each prefix's parameters (and of the rest) as
    separate groups, each to ``max_grad_norm`` (the released coreference code clips encoder and task
    layers separately). With ``args.metric_for_best_model`` each evaluation whose result improves on
    the best so far saves the weights to ``output_dir/best/`` (rank 0), and the model returned holds
    the best weights; ``TrainResult.best_step`` says which step they are from.

    ``args.max_tokens_per_batch`` batches by a token budget (`token_micro_batches`; the dataset must
    have ``lengths()``). ``term_weights(counts, totals, world)`` replaces the weighting of the loss
    terms: it gets one micro-batch's counts, the step's totals (all micro-batches and ranks) and the
    world size, and returns each term's factor (default: ``counts[k] * world / totals[k]``; the
    released SpanBERT normalisation is `spanbert.pretrain.released_term_weights`).
    ``term_schedule(step)`` returns, for the optimizer step being taken (1-based, counted over the whole
    run, so a resumed run goes on with it), a factor per term that multiplies that term's weight (a term
    it leaves out: 1); the logged losses stay unscaled (pre-training's --sbo_warmup_steps,
    `spanbert.pretrain.sbo_warmup`).

    ``time_budget`` (`spanbert.budget`): the total is not ``args.max_steps`` but what fits the budget,
    decided once after the first warm-up steps (`TimeBudget.measure_until`) from their speed and one
    timed evaluation, on rank 0 for every rank; the warm-up's rates do not depend on the total, so the
    run equals one given that total from the start. The decision is kept in every checkpoint, and
    ``--resume`` continues with it (not a new one).

    ``cost_warning``: warn (stderr, rank 0) before the first step when the run would take more than a
    day on this machine (`cost.finetune_warning`); pre-training passes False, having warned with its
    own estimate (`spanbert.pretrain_plan.plan_warning`). With it, the plan line (steps, estimated training
    and evaluation time; `plan_finetuning`, ``eval_size`` telling one evaluation pass) is printed before
    the first step, the evaluations per epoch may be lowered (``args.max_eval_share``), and a plan over
    a week is refused before anything is written unless ``args.allow_long_run`` (decided on rank 0).
    """
    rank, world, device, shared = _set_up_device(args)
    output_dir = Path(args.output_dir)
    check_output_dir(args)
    n = len(train_dataset)
    if n == 0:
        raise SpanBertError("the training set is empty")
    n_regions, graphs_before = _compile(model, args, device)
    args = _batch_size(args, model, train_dataset, collate_fn, device)
    lengths, n_batches, epoch_steps = _epoch_length(train_dataset, args, world)
    total, decide_at, budget_state = _planned_total(args, epoch_steps, time_budget, output_dir)
    warmup = args.warmup_steps or math.ceil(args.warmup_ratio * total)
    if budget_state is not None:  # a time budget's plans (the first: provisional, until its speed is measured)
        warmup = int(budget_state.get("warmup_steps") or warmup)
        budget_state["plans"] = [dict(p) for p in budget_state.get("plans") or
                                 [{"step": 0, "total": total, "warmup": warmup}]]  # fmt: skip
    settings = _settings(args, run_config, world, n, n_batches)
    evals_per_epoch = args.evals_per_epoch
    if cost_warning:
        dev = eval_size if eval_fn else None
        evals_per_epoch = _announce_plan(model, train_dataset, args, epoch_steps, total, device, world, dev, shared)
    is_eval_step = eval_schedule(args.eval_steps, evals_per_epoch, epoch_steps)
    removed = on_main(lambda: _start_run_dir(output_dir, args))
    if removed:
        print0(f"note: removed what an interrupted run left in {output_dir}: {', '.join(removed)}")

    plans = plans_from(budget_state["plans"], total, warmup) if budget_state is not None else None
    run, step, best = _start(model, args, rank, world, device, total, warmup, settings, lr_by_prefix,
                             weight_decay_by_prefix, clip_by_prefix, plans, undecided=bool(decide_at))  # fmt: skip
    # the wall time of training so far: a resumed run's goes on from what its checkpoint recorded
    seconds_before = float(on_main(lambda: resume_state(output_dir).get("train_seconds", 0.0))) if args.resume else 0.0
    extra_state = {"world_size": world, "run_config": settings["run_config"], "best": best}
    if device.type == "cpu":  # the weights depend on it: a --resume takes it again (`_set_up_device`)
        extra_state["threads"] = torch.get_num_threads()
    if budget_state is not None:
        extra_state["time_budget"] = budget_state
    state = State(step, total, stop_step(total, args), best, extra_state, skipped_t=torch.zeros((), device=device),
                  first_bad=torch.zeros(3, device=device), decide_at=decide_at, seconds_before=seconds_before)  # fmt: skip
    if time_budget is not None:
        _start_budget(state, time_budget, budget_state, plans, step, warmup, args)
    compile_report = CompileReport(n_regions, total, graphs_before) if n_regions else None
    run.model.train()
    stream = None
    untrained = trained_inputs.watch(model)  # warns once when a batch uses inputs pre-training never trained
    if compile_report is not None:
        compile_report.start()
    try:
        while state.step < state.end:
            epoch, start = divmod(state.step, epoch_steps)
            plan = _epoch_plan(train_dataset, args, lengths, epoch, start, rank, world)
            stream = epoch_stream(run, train_dataset, plan, collate_fn, epoch, stream)
            for step_mbs in plan:
                if state.step >= state.end:
                    break
                threads.tick()
                # The whole step's micro-batches first (collated, on CPU): the loss weights need the
                # target counts of all of them, summed over the ranks, before the first backward.
                mbs = [next(stream) for _ in step_mbs]
                if untrained is not None:
                    untrained(mbs)
                pads = [isinstance(ix, PadBatch) for ix in step_mbs]
                optimisation_step(run, state, mbs, pads, count_targets, term_weights, term_schedule)
                step_done(run, state, compile_report)
                if state.step % max(1, args.logging_steps) == 0 or state.step == state.end:
                    log_window(run, state)
                evaluated = False
                if state.decide_at and state.step == state.decide_at:
                    evaluated = decide_time_budget(run, state, time_budget, eval_fn, epoch_steps)
                elif state.next_check and state.step >= state.next_check and state.step < state.end:
                    check_time_budget(run, state, epoch_steps)
                due = state.step % state.eval_every == 0 if state.eval_every else is_eval_step(state.step)
                if eval_fn is not None and due and state.step != state.total and not evaluated:
                    evaluate(run, state, eval_fn)
                save_every = save_interval(run, state)
                if save_every and state.step % save_every == 0 and state.step != state.end:
                    checkpoint(run, state)
        finish(run, state, eval_fn)
    finally:
        close_run(run, stream)  # workers joined on every exit path, before the process group goes
    if world > 1:
        dist.barrier()
    restore_best(run, state)
    return TrainResult(
        global_step=state.step,
        skipped_steps=state.skipped,
        metrics=state.last,
        best_step=best["step"],
        best_metrics=dict(best["metrics"]),
        total_steps=state.total,
        train_seconds=train_seconds(state),
    )


def _set_up_device(args: TrainingArguments) -> tuple[int, int, torch.device, str | None]:
    """(rank, world size, device, what else keeps the cores busy): the process group started, the threads
    set and, on the CPU, the threads and the precision said and the allocator configured."""
    rank, world, _ = distributed_env()
    device = resolve_device(args.device)
    init_distributed(device)
    note = None
    if device.type == "cpu":
        # one count for the whole run (its weights depend on it): --threads (also from a --config file,
        # which the command line's early read does not see), the resumed run's own, or the free cores now;
        # rank 0's for every rank
        recorded = on_main(lambda: recorded_threads(args)) if args.resume else None
        n, note = threads.decide_for_run(recorded, args.threads)
        if world > 1:
            threads.follow_main(on_main(lambda: n))
    elif args.threads:
        threads.configure(args.threads)
    # what else keeps the cores busy, since the command started: the time a plan promises is an idle
    # machine's, so the lines that promise one say when it is not
    shared = threads.sharing() if device.type == "cpu" else None
    if device.type == "cpu":
        beside = f"; {shared}: expect a slower run than on idle cores" if shared else ""
        print0(f"{threads.describe()}; {precision_text(args.precision, device)}{beside}")
        if note:
            eprint0(note)
        note = precision_note(args.precision, device)
        if note:
            eprint0(note)
        configure_malloc()  # tensors >= 8 MB go back to the system when freed (utils.configure_malloc)
    return rank, world, device, shared


def recorded_threads(args: TrainingArguments) -> int | None:
    """The CPU threads the run being resumed trained with (its checkpoint's), None when it recorded none."""
    try:
        count = resume_state(args.output_dir).get("threads")
    except (SpanBertError, OSError, ValueError):  # no usable checkpoint: `_resume` says why, later
        return None
    return int(count) if isinstance(count, int) and count > 0 else None


def _compile(model: nn.Module, args: TrainingArguments, device: torch.device) -> tuple[int, int]:
    """(the regions compiled in place (same state_dict) with --compile, the graphs compiled before them)."""
    n_regions = compile_regions(model) if wants_compile(args.compile, device) else 0
    if wants_compile(args.compile, device) and not n_regions:
        print0(f"torch.compile: {type(model).__name__} has no region to compile (spanbert.compile); it runs eager")
    return n_regions, graphs_compiled()


def _batch_size(
    args: TrainingArguments, model: nn.Module, dataset: Any, collate_fn: Callable | None, device: torch.device
) -> TrainingArguments:
    """``args`` with --per_device_train_batch_size auto resolved, refused when it or the accumulation is
    under 1."""
    if args.per_device_train_batch_size == AUTO:  # the probe runs the model: on the device, compiled as it trains
        model.to(device)
        lengths_or_none = dataset_lengths(dataset) if hasattr(dataset, "lengths") else None
        args = resolve_batch_size(args, model, dataset, collate_fn, device, autocast_dtype(args.precision, device),
                                  to_device, lengths=lengths_or_none)  # fmt: skip
    if args.per_device_train_batch_size < 1 or args.gradient_accumulation_steps < 1:
        raise SpanBertError("per_device_train_batch_size and gradient_accumulation_steps must be >= 1")
    return args


def _epoch_length(dataset: Any, args: TrainingArguments, world: int) -> tuple[np.ndarray | None, int | None, int]:
    """(each example's tokens and the micro-batches of an epoch, both None without a token budget; the
    optimizer steps of an epoch)."""
    accum, budget = args.gradient_accumulation_steps, args.max_tokens_per_batch
    if not budget:
        # >= 1: a short step takes what there is
        return None, None, steps_per_epoch(len(dataset), args.per_device_train_batch_size * world * accum)
    lengths = dataset_lengths(dataset)
    # the batch count is the same in every epoch (token_batches): it follows from the lengths alone
    n_batches = token_batch_count(lengths, budget)
    return lengths, n_batches, steps_per_epoch(n_batches, world * accum)


def _planned_total(
    args: TrainingArguments, epoch_steps: int, time_budget: TimeBudget | None, output_dir: Path
) -> tuple[int, int, dict[str, Any] | None]:
    """(the run's total steps, the step after which a time budget plans the total first (0: no plan to make),
    a time budget's state: the one a resumed run recorded, or a new one)."""
    total = args.max_steps if args.max_steps > 0 else math.ceil(args.num_train_epochs * epoch_steps)
    if time_budget is None:
        return total, 0, None
    decide_at = time_budget.measure_until(args.warmup_steps)
    budget_state = None
    if args.resume:  # the plans the resumed run made, if it got that far
        budget_state = on_main(lambda: resume_state(output_dir).get("time_budget"))
    if budget_state is not None and budget_state.get("decided", True):  # a checkpoint of before 'decided': planned
        return int(budget_state["max_steps"]), 0, {**budget_state, "decided": True}
    if budget_state is None:
        budget_state = {"max_time": time_budget.text, "decided": False, "elapsed_seconds": 0.0}
    provisional = max(total, decide_at + 1)  # until the warm-up's speed is measured
    if budget_state.get("plans"):
        provisional = int(budget_state["plans"][0]["total"])
    return provisional, decide_at, budget_state


def _start_budget(state: State, budget: TimeBudget, budget_state: dict[str, Any], plans: list[Any], step: int,
                  warmup: int, args: TrainingArguments) -> None:  # fmt: skip
    """A time budget's part of the run's state: the plans (a resumed run's, from its checkpoint), what the
    budget's earlier processes used of it, this process's own pace, and when it plans or checks first
    (after steps of its own: a plan is made from this process's timings only, `budget.first_plan_step`)."""
    budget.spent_before = float(budget_state.get("elapsed_seconds") or 0.0)
    budget.plans = list(plans)
    state.budget = budget
    state.pace = Pace(budget.clock, started=budget.clock())
    if state.decide_at:
        state.decide_at = first_plan_step(state.decide_at, step, warmup)
        if state.total <= state.decide_at:  # a provisional total that would end before the plan is made
            state.total = state.decide_at + 1
            state.end = stop_step(state.total, args)
    else:
        state.next_check = step + max(replan_every(state.total), 2 + MIN_MEASURED)
        state.eval_every = budget_state.get("eval_steps")
        state.save_every = budget_state.get("save_steps")


def _settings(
    args: TrainingArguments, run_config: dict | None, world: int, n: int, n_batches: int | None
) -> dict[str, Any]:
    """What a checkpoint records of the run's settings and --resume compares (``run_config`` made JSON)."""
    run_config = json.loads(json.dumps(run_config, default=str)) if run_config is not None else None
    settings = {"args": asdict(args), "run_config": run_config, "world_size": world, "train_examples": n}
    if n_batches is not None:
        settings["train_micro_batches"] = n_batches
    return settings


def _start(
    model: nn.Module, args: TrainingArguments, rank: int, world: int, device: torch.device, total: int, warmup: int,
    settings: dict[str, Any], lr_by_prefix: dict[str, float] | None, weight_decay_by_prefix: dict[str, float] | None,
    clip_by_prefix: tuple[str, ...] | None, plans: list[Any] | None = None, undecided: bool = False,
) -> tuple[Run, int, dict[str, Any]]:  # fmt: skip
    """(the `Run`, the step it starts at, the best evaluation so far): the model on its device (DDP-wrapped
    with several processes), its optimizer, schedule (a time budget's ``plans``: `loop.planned_schedule`),
    loss scaler and clipping groups, restored with --resume; the log and the progress bar opened (with no
    total while a time budget is ``undecided``)."""
    output_dir = Path(args.output_dir)
    model.to(device)
    raw_model = model
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    groups = param_groups(raw_model, args.learning_rate, args.weight_decay, lr_by_prefix, weight_decay_by_prefix,
                          args.decay_all_parameters)  # fmt: skip
    optimizer = make_optimizer(groups, args, device)
    lambdas = planned_schedule(plans, groups, args) if plans else schedule(total, warmup, groups, args)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambdas)
    amp_dtype = autocast_dtype(args.precision, device)
    scaler = make_grad_scaler(amp_dtype, device)
    params = [p for g in groups for p in g["params"]]
    clipped = clip_groups(raw_model, params, clip_by_prefix)
    best: dict[str, Any] = {"step": None, "score": None, "metrics": {}}
    step = 0
    if args.resume:
        step = _resume(model, optimizer, scheduler, scaler, output_dir, settings, "?" if undecided else total, best)
    resume_step = step if args.resume else None
    log_note = on_main(lambda: _start_log(output_dir, resume_step))
    if log_note:
        print0(f"note: {log_note}")
    logger = _Logger(output_dir, rank == 0, args.report_to == "tensorboard", resume_step)
    bar = None
    if rank == 0 and not args.disable_tqdm:
        bar = progress_bar(total=None if undecided else total, initial=step, desc="train", unit="step",
                           dynamic_ncols=True)  # fmt: skip
    device_skip = scaler is None and getattr(optimizer, "_step_supports_amp_scaling", False)
    run = Run(model=model, raw_model=raw_model, optimizer=optimizer, scheduler=scheduler, scaler=scaler, groups=groups,
              clipped=clipped, args=args, device=device, amp_dtype=amp_dtype, rank=rank, world=world, warmup=warmup,
              device_skip=device_skip, max_scaler_skips=MAX_CONSECUTIVE_SCALER_SKIPS, logger=logger, bar=bar)  # fmt: skip
    return run, step, best


def _resume(
    model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any, scaler: Any, output_dir: Path,
    settings: dict[str, Any], total: int | str, best: dict[str, Any],
) -> int:  # fmt: skip
    """--resume: the step of the checkpoint chosen (once, on rank 0, for every rank) after its settings were
    compared with this run's; the training state restored, ``best`` updated to the saved one."""

    def choose() -> tuple[str, str | None, list[str]]:
        ckpt, note = find_resume_checkpoint(output_dir)
        saved = json.loads((ckpt / "trainer_state.json").read_text())
        refused, accepted = compare_settings(saved, settings)
        if refused:
            raise SpanBertError(
                f"{ckpt}/trainer_state.json: found settings that differ from this run's, expected the "
                f"same to --resume: " + "; ".join(refused) + " (restore them, or start over with "
                "--overwrite_output_dir)"
            )
        return str(ckpt), note, accepted

    ckpt_name, note, accepted = on_main(choose)  # chosen once, the same on every rank
    ckpt = Path(ckpt_name)
    if note:
        print0(f"note: {note}")
    for line in accepted:
        print0(f"note: --resume with a changed setting: {line}")
    step = load_training_state(ckpt, model, optimizer, scheduler, scaler)
    # the rate of the next step from this run's schedule: the saved one is the old schedule's
    # (a changed max_steps), and the same number when nothing changed
    for g, rate in zip(optimizer.param_groups, scheduler.lr_lambdas):
        g["lr"] = g["initial_lr"] * rate(step)
    best.update(on_main(lambda: json.loads((ckpt / "trainer_state.json").read_text()).get("best") or {}))
    print0(f"resumed from {ckpt} at step {step}/{total}")
    return step


def _epoch_plan(
    dataset: Any, args: TrainingArguments, lengths: np.ndarray | None, epoch: int, start: int, rank: int, world: int
) -> list[list[list[int]]]:
    """This rank's micro-batches of ``epoch`` from its step ``start`` on, grouped by step (the dataset told
    the epoch first, when it wants to know): an `EpochPlan`, whose steps are made into lists when asked for
    (the lists of `token_micro_batches` / `micro_batches`)."""
    if hasattr(dataset, "set_epoch"):
        dataset.set_epoch(epoch)
    accum, budget = args.gradient_accumulation_steps, args.max_tokens_per_batch
    cache = getattr(dataset, "plan_cache", None)  # a folder for the epoch's order, shared by the ranks
    if budget:
        return token_plan(lengths, budget, args.seed, epoch, accum, rank, world, start, cache)
    return sequence_plan(len(dataset), args.seed, epoch, args.per_device_train_batch_size, accum, rank, world, start,
                         cache)  # fmt: skip


def predict_batches(
    model: nn.Module,
    dataset: Any,
    batch_size: int,
    collate_fn: Callable | None = None,
    device: str | torch.device = "auto",
    precision: str = "auto",
    desc: str = "predict",
    disable_tqdm: bool = False,
    batches: Sequence[Sequence[int]] | None = None,
) -> Iterator[tuple[Any, dict[str, torch.Tensor]]]:
    """Run ``model`` over ``dataset`` in order, in eval mode without gradients; yield (batch, outputs).

    The batch is yielded as collated (on CPU), the outputs as the model returned them (on device).
    ``batches``: the dataset indices of each batch, in the order to run them (e.g. windows grouped by
    length, `spanbert.tasks.batching.length_batches`); ``batch_size`` is then unused.
    """
    device = device if isinstance(device, torch.device) else resolve_device(device)
    amp_dtype = autocast_dtype(precision, device)
    if device.type == "cpu":
        configure_malloc()  # each batch's activations go back to the system (utils.configure_malloc)
    model.to(device)
    was_training = model.training
    model.eval()
    if batches is not None:
        loader = torch.utils.data.DataLoader(dataset, batch_sampler=batches, collate_fn=collate_fn)
    else:
        loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=False, collate_fn=collate_fn)

    try:
        with flush_denormals(), torch.no_grad():
            bar = progress_bar(
                loader, desc=desc, disable=disable_tqdm or not is_main(), leave=False, dynamic_ncols=True
            )
            for batch in bar:
                threads.tick()
                with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                    out = model(**to_device(batch, device))
                yield batch, out
    finally:
        model.train(was_training)
