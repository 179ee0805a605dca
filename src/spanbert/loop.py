"""The pieces of the training loop (`spanbert.trainer.train`), each named: one epoch's data stream, one
optimisation step (micro-batches, accumulation, loss weights, clipping, the fp16 scaler, skipped steps),
the logging of a window of steps, an evaluation and the keeping of the best weights, a checkpoint, the
time budget's decision, and the end of a run.

`train` sets a run up (device, batch size, length, optimizer, resume) and calls these; what they share
is a `Run` (what the run trains with, fixed once set up) and a `State` (where the run is, moved by the
pieces).

No host sync inside a step (docs/gpu.md): with fused AdamW and no fp16 scaler, a step with a non-finite
loss or gradient is skipped on the device (the optimizer's `found_inf`), and the counts are read on the
host only at logging steps, checkpoints and the end (`settle_skips`).
"""

from __future__ import annotations

import functools
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from spanbert.attention import release_buffers
from spanbert.batch_plan import flat_micro_batches
from spanbert.budget import (
    REPLAN_TOLERANCE,
    Pace,
    Plan,
    TimeBudget,
    fit_plan,
    format_duration,
    plan_rows,
    planned_lambda,
    replan_every,
    seconds_needed,
    total_steps,
)
from spanbert.distributed import all_gather_objects, on_main, print0
from spanbert.errors import SpanBertError
from spanbert.optim import clip_gradients, cosine_lambda, lr_lambda
from spanbert.runs import _Logger, _rng_state, load_best_weights, save_best_weights, save_training_state
from spanbert.training_args import TrainingArguments
from spanbert.utils import close_inherited_sockets, trim_heap


@dataclass
class Run:
    """What one run trains with and reports to, fixed once `train` has set it up."""

    model: nn.Module
    """What a step runs: the model, DDP-wrapped with several processes."""
    raw_model: nn.Module
    """The model itself: what evaluations run and the best weights are saved from."""
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    scaler: Any
    """fp16's loss scaler (`trainer.make_grad_scaler`); None in fp32 and bf16."""
    groups: list[dict[str, Any]]
    """The optimizer's parameter groups (`optim.param_groups`): a new total makes their schedule again."""
    clipped: list[list[nn.Parameter]]
    """The parameters clipped together, each group to max_grad_norm (`optim.clip_groups`)."""
    args: TrainingArguments
    device: torch.device
    amp_dtype: torch.dtype | None
    rank: int
    world: int
    warmup: int
    """Warm-up steps of the schedule."""
    device_skip: bool
    """A step with a non-finite loss or gradient is skipped on the device (fused AdamW, no scaler), not
    by the host."""
    max_scaler_skips: int
    """--nan_policy stop: this many fp16 overflow skips in a row stop the run."""
    logger: _Logger
    bar: Any
    """The progress bar (rank 0 without --disable_tqdm), else None."""


@dataclass
class State:
    """Where a run is: its step and its end, and what its next log line and checkpoint need."""

    step: int
    total: int
    """The run's total steps (a time budget decides it after its warm-up)."""
    end: int
    """The step this call stops at: the total, or --stop_at_step when sooner (`stop_step`)."""
    best: dict[str, Any]
    """The best evaluation so far: its step, score and metrics (the step None before any)."""
    extra_state: dict[str, Any]
    """What every checkpoint keeps beside the weights: world size, run config, ``best``, time budget."""
    skipped_t: torch.Tensor
    """Steps skipped on the device, not yet added to ``skipped`` (`settle_skips`)."""
    first_bad: torch.Tensor
    """(step, loss, grad norm) of the first step skipped on the device; step 0: none."""
    decide_at: int = 0
    """The step after which a time budget plans the total for the first time (0: planned already, or no
    budget)."""
    budget: TimeBudget | None = None
    """The time budget, if any: its plans (`spanbert.budget.Plan`) are in ``extra_state["time_budget"]``."""
    pace: Pace | None = None
    """This process's step times (a time budget plans from these only)."""
    next_check: int = 0
    """The step after which a time budget checks its plan next (0: none)."""
    eval_every: int | None = None
    """A time budget's evaluation interval when it shortened --eval_steps (`spanbert.budget.fit_plan`)."""
    save_every: int | None = None
    """A time budget's checkpoint interval when it shortened --save_steps."""
    skipped: int = 0
    """Steps skipped for a non-finite loss or gradient (or an fp16 overflow), read on the host."""
    scaler_skips_in_a_row: int = 0
    window: dict[str, list[torch.Tensor]] = field(default_factory=dict)
    """Each step's logged values since the last logging step, kept on the device until then."""
    tokens: int = 0
    """Real (unpadded) tokens this rank trained on since the last logging step."""
    t0: float = field(default_factory=time.perf_counter)
    """When the logging window began."""
    lr_used: float = 0.0
    """The rate of the last step (read before its scheduler.step)."""
    last: dict[str, float] = field(default_factory=dict)
    """The last logged training averages, and the evaluation results since."""
    seconds_before: float = 0.0
    """Wall seconds of training that earlier runs of a resumed run did up to its checkpoint."""
    started: float = field(default_factory=time.perf_counter)
    """When this call's training began."""


def train_seconds(state: State) -> float:
    """Wall seconds of training from step 0 to now, earlier runs of a resumed run included."""
    return state.seconds_before + time.perf_counter() - state.started


def stop_step(total: int, args: TrainingArguments) -> int:
    """The step a call of `train` stops at: ``total``, or --stop_at_step when sooner."""
    return min(total, args.stop_at_step) if args.stop_at_step > 0 else total


def schedule(
    total: int, warmup: int, groups: list[dict[str, Any]], args: TrainingArguments
) -> list[Callable[[int], float]]:
    """The learning-rate multipliers of each parameter group (`LambdaLR`'s ``lr_lambda`` list)."""
    if args.lr_scheduler_type == "cosine":
        # absolute start and end rates: each group (peak rates differ under lr_by_prefix) its own multiplier
        return [cosine_lambda(total, warmup, g["initial_lr"], args.warmup_init_lr, args.min_lr) for g in groups]
    return [lr_lambda(total, warmup, args.lr_scheduler_type)] * len(groups)


# ---------------------------------------------------------------------------------------------
# Batches


def to_device(batch: Any, device: torch.device) -> Any:
    """``batch`` (a tensor, or dicts, lists and tuples of them) on ``device``; anything else as it is."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device) for v in batch)
    return batch


def _count_tokens(batch: Any) -> int:
    """Real tokens of a collated batch, read from its host (CPU) tensors: numpy, never a device sync."""
    if isinstance(batch, dict):
        if batch.get("attention_mask") is not None:
            return int(batch["attention_mask"].numpy().sum())
        if isinstance(batch.get("input_ids"), torch.Tensor):
            return batch["input_ids"].numel()
    return 0


def _examples(batch: Any) -> int:
    if isinstance(batch, dict) and isinstance(batch.get("input_ids"), torch.Tensor):
        return int(batch["input_ids"].shape[0])
    if isinstance(batch, dict):
        for v in batch.values():
            if isinstance(v, torch.Tensor) and v.ndim > 0:
                return int(v.shape[0])
    return 1


def epoch_stream(run: Run, dataset: Any, plan: list[list[list[int]]], collate_fn: Callable | None, epoch: int,
                 previous: Any) -> Iterator[Any]:  # fmt: skip
    """The collated micro-batches of one epoch's ``plan`` (this rank's, grouped by step), in order; the
    ``previous`` epoch's loader workers are joined first."""
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_sampler=flat_micro_batches(plan),  # made one micro-batch at a time (batch_plan.EpochPlan)
        collate_fn=collate_fn,
        num_workers=run.args.dataloader_num_workers,
        pin_memory=run.device.type == "cuda",
        # worker seeds come from this generator, not the global RNG, so resumes stay exact
        generator=torch.Generator().manual_seed(run.args.seed * 1000 + epoch),
        persistent_workers=False,
        # a worker must not keep its rank's gloo connections open after the rank dies
        worker_init_fn=_forget_sockets if run.world > 1 else None,
    )
    close_loader(previous)
    return iter(loader)


def _forget_sockets(worker_id: int) -> None:
    close_inherited_sockets()  # utils.close_inherited_sockets: why


def close_loader(stream: Any) -> None:
    """Join a DataLoader iterator's worker processes now, not whenever the iterator is collected (on an
    error path the traceback keeps it alive until after `distributed.shutdown`)."""
    shutdown = getattr(stream, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()


# ---------------------------------------------------------------------------------------------
# One optimisation step


def optimisation_step(
    run: Run, state: State, mbs: list[Any], pads: list[bool], count_targets: Callable[[Any], dict[str, int]] | None,
    term_weights: Callable[[dict[str, int], dict[str, float], int], dict[str, float]] | None,
    term_schedule: Callable[[int], dict[str, float]] | None = None,
) -> None:  # fmt: skip
    """One optimizer step over this rank's micro-batches ``mbs`` of the step (collated, on the host;
    ``pads[i]``: micro-batch i is a `trainer.PadBatch`): forward and backward with the loss weights of
    the whole step, clipping, the update (or its skip) and the schedule's step; ``state.step`` advances.
    ``term_schedule(step)`` (1-based) scales the step's loss terms (`train`)."""
    counts, totals = step_counts(mbs, pads, count_targets, run.world, run.device)
    state.lr_used = _shown_lr(run.optimizer, run.args)  # the rate this step uses (before scheduler.step)
    # from the step count, not a count of calls: the same factor on every rank, after a resume and
    # for every micro-batch of an accumulated step
    scale = term_schedule(state.step + 1) if term_schedule is not None else None
    loss_sum = accumulate(run, state, mbs, pads, counts, totals, count_targets, term_weights, scale)
    if run.scaler is not None:
        run.scaler.unscale_(run.optimizer)
    norms = [clip_gradients(g, run.args.max_grad_norm) for g in run.clipped]
    grad_norm = norms[0] if len(norms) == 1 else torch.linalg.vector_norm(torch.stack(norms))
    apply_update(run, state, loss_sum, grad_norm)
    with warnings.catch_warnings():
        # a skipped step still advances the schedule (the step count decides the rate)
        warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step", category=UserWarning)
        run.scheduler.step()
    state.step += 1
    state.window.setdefault("grad_norm", []).append(grad_norm.detach())


def step_counts(
    mbs: list[Any], pads: list[bool], count_targets: Callable[[Any], dict[str, int]] | None, world: int,
    device: torch.device,
) -> tuple[list[dict[str, int]], dict[str, float]]:  # fmt: skip
    """(each micro-batch's counts: examples as ``loss`` and ``count_targets``'s, the step's totals over all
    micro-batches and ranks)."""

    def counts_of(mb: Any) -> dict[str, int]:
        c = {"loss": _examples(mb)}
        if count_targets is not None:
            c.update({k: int(v) for k, v in count_targets(mb).items()})
        return c

    # a padding micro-batch counts no target (the same keys, so the all-reduce matches)
    counts = [{k: 0 for k in counts_of(mb)} if pad else counts_of(mb) for mb, pad in zip(mbs, pads)]
    keys = sorted(set().union(*counts))
    totals = {k: float(sum(c.get(k, 0) for c in counts)) for k in keys}
    if world > 1:
        # every rank's counts before the first backward: the one host sync of a DDP step
        totals_t = torch.tensor([totals[k] for k in keys], dtype=torch.float64, device=device)
        dist.all_reduce(totals_t)
        totals = dict(zip(keys, totals_t.tolist()))
    return counts, totals


def accumulate(
    run: Run, state: State, mbs: list[Any], pads: list[bool], counts: list[dict[str, int]], totals: dict[str, float],
    count_targets: Callable[[Any], dict[str, int]] | None,
    term_weights: Callable[[dict[str, int], dict[str, float], int], dict[str, float]] | None,
    scale: dict[str, float] | None = None,
) -> torch.Tensor:  # fmt: skip
    """Forward and backward over the step's micro-batches, their gradients added up (DDP syncs on the
    last); returns the sum of their weighted losses (on the device), each term times ``scale``'s factor
    (`weighted_loss`). Counts the tokens and keeps the model's scalar losses and accuracies (unscaled)
    in the logging window."""
    model, device, amp_dtype = run.model, run.device, run.amp_dtype
    loss_sum = torch.zeros((), device=device)
    for i, mb in enumerate(mbs):
        state.tokens += 0 if pads[i] else _count_tokens(mb)  # on the host batch, before the copy
        mb = to_device(mb, device)
        sync = run.world == 1 or i == len(mbs) - 1
        ctx = model.no_sync() if not sync else nullcontext()
        with ctx, torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            out = model(**mb)
            loss = weighted_loss(out, counts[i], totals, run.world, count_targets, term_weights, scale)
            if pads[i]:
                loss = loss * 0.0  # a backward for DDP, no contribution (also under term_weights)
        if run.scaler is not None:
            run.scaler.scale(loss).backward()
        else:
            loss.backward()
        loss_sum += loss.detach()
        for k, v in out.items() if not pads[i] else ():  # a padding micro-batch is not logged
            if (k.endswith("loss") or k.endswith("acc")) and isinstance(v, torch.Tensor) and v.ndim == 0:
                state.window.setdefault(k, []).append(v.detach())  # read at the logging step
    return loss_sum


def weighted_loss(
    out: dict[str, Any], counts: dict[str, int], totals: dict[str, float], world: int,
    count_targets: Callable[[Any], dict[str, int]] | None,
    term_weights: Callable[[dict[str, int], dict[str, float], int], dict[str, float]] | None,
    scale: dict[str, float] | None = None,
) -> torch.Tensor:  # fmt: skip
    """One micro-batch's loss: each of its terms (``loss_terms`` with ``count_targets``, else ``loss``)
    times the micro-batch's share of the step's targets, so accumulation and N processes equal one batch,
    and times ``scale[term]`` (a term it does not name: 1)."""
    terms = out.get("loss_terms") if count_targets is not None else None
    if not terms:
        terms = {"loss": out["loss"]}
    loss = 0.0
    weights = term_weights(counts, totals, world) if term_weights is not None else None
    for k, term in terms.items():
        if weights is not None:
            w = weights.get(k, 0.0)
        else:
            total_k = totals.get(k, 0.0)
            # DDP averages gradients over ranks: times world makes that a sum
            w = counts.get(k, 0) * world / total_k if total_k else 0.0
        if scale is not None:
            w = w * scale.get(k, 1.0)
        loss = loss + term.float() * w
    return loss


def apply_update(run: Run, state: State, loss_sum: torch.Tensor, grad_norm: torch.Tensor) -> None:
    """The optimizer's update of the step, or its skip when the loss or a gradient is not finite on any
    rank (--nan_policy stop: an error instead); the gradients are zeroed either way."""
    optimizer, scaler, device = run.optimizer, run.scaler, run.device
    step = state.step
    bad_loss = (~torch.isfinite(loss_sum)).float().reshape(1)
    bad_grad = (~torch.isfinite(grad_norm.to(device))).float().reshape(1)
    bad = torch.cat([bad_loss, bad_grad])
    if run.world > 1:
        dist.all_reduce(bad)
    if run.device_skip:
        found = (bad.sum() > 0).float()  # 1.0: the fused optimizer skips this update on the device
        optimizer.found_inf = found
        optimizer.step()
        optimizer.found_inf = None
        optimizer.zero_grad(set_to_none=True)
        new_bad = (found > 0) & (state.first_bad[0] == 0)
        state.first_bad.copy_(torch.where(new_bad, torch.stack([
            torch.full((), step + 1.0, device=device), loss_sum.float(), grad_norm.float().to(device)
        ]), state.first_bad))  # fmt: skip
        state.skipped_t += found
    # Otherwise (fp16, a non-fused optimizer) the host decides, one sync per step.
    # fp16: a non-finite gradient with a finite loss is the scaler's overflow, expected
    # while it finds its scale: the scaler skips the step, we count it. A non-finite loss
    # follows --nan_policy as in fp32/bf16.
    elif bool(bad[0].item()) or (scaler is None and bool(bad[1].item())):
        if run.args.nan_policy == "stop":
            raise SpanBertError(
                f"non-finite loss or gradient at step {step + 1} (loss {loss_sum.item():.4g}, "
                f"grad norm {grad_norm.item():.4g}); lower the learning rate, use fp32, "
                f"or pass --nan_policy skip to skip such steps"
            )
        state.skipped += 1
        optimizer.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.update(scaler.get_scale() * scaler.get_backoff_factor())
    else:
        if scaler is not None:
            before = scaler.get_scale()
            scaler.step(optimizer)
            scaler.update()
            if scaler.get_scale() < before:  # overflow: the scaler skipped this step
                state.skipped += 1
                state.scaler_skips_in_a_row += 1
                if run.args.nan_policy == "stop" and state.scaler_skips_in_a_row >= run.max_scaler_skips:
                    raise SpanBertError(
                        f"{state.scaler_skips_in_a_row} fp16 overflow steps in a row up to step {step + 1}: "
                        f"the gradients are not finite at any scale; lower the learning rate or "
                        f"use bf16/fp32"
                    )
            else:
                state.scaler_skips_in_a_row = 0
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def settle_skips(run: Run, state: State) -> None:
    """Read the device's skip counts (a sync: logging steps, checkpoints and the end only)."""
    if not run.device_skip:
        return
    state.skipped += int(state.skipped_t.item())
    state.skipped_t.zero_()
    bad_step, bad_loss, bad_norm = state.first_bad.tolist()
    if bad_step and run.args.nan_policy == "stop":
        raise SpanBertError(
            f"non-finite loss or gradient at step {int(bad_step)} (loss {bad_loss:.4g}, "
            f"grad norm {bad_norm:.4g}); lower the learning rate, use fp32, "
            f"or pass --nan_policy skip to skip such steps"
        )


def step_done(run: Run, state: State, compile_report: Any) -> None:
    """After each step: the compilation's report, the CPU heap's trim, the progress bar, and the time
    budget's clock (this process's step times)."""
    if compile_report is not None:
        compile_report.step_done(state.step)  # the compilation's time and graphs, in the log
    if run.device.type == "cpu":
        trim_heap()  # bounded resident memory on CPU, at most every 2 s (utils.trim_heap)
    if run.bar is not None:
        run.bar.update(1)
    if state.pace is not None:
        state.pace.step_done(state.step)


def _shown_lr(optimizer, args: TrainingArguments) -> float:
    # the rate of the group at --learning_rate (not e.g. the encoder's under lr_by_prefix)
    return float(
        next(
            (g["lr"] for g in optimizer.param_groups if g["initial_lr"] == args.learning_rate),
            optimizer.param_groups[0]["lr"],
        )
    )


# ---------------------------------------------------------------------------------------------
# Logging, evaluation, checkpoints


_SHOWN = ("loss", "mlm_loss", "sbo_loss", "nsp_loss", "mlm_acc", "sbo_acc", "nsp_acc")


def log_window(run: Run, state: State) -> None:
    """Log the averages of the steps since the last logging step (``state.last``), on rank 0 a line on
    screen too, and start a new window."""
    settle_skips(run, state)
    window, tokens, world = state.window, state.tokens, run.world
    dt = time.perf_counter() - state.t0
    last = {k: float(torch.stack([x.double().cpu() for x in v]).mean()) for k, v in window.items()}
    last["lr"] = state.lr_used
    last["tokens_per_s"] = tokens * world / dt if dt > 0 else 0.0
    # real (unpadded) tokens per update, averaged over the window (this rank's x world)
    last["tokens_per_step"] = tokens * world / max(1, len(window.get("grad_norm", ())))
    last["skipped_steps"] = float(state.skipped)
    state.last = last
    run.logger.log(state.step, {f"train/{k}": v for k, v in last.items()})
    if run.rank == 0:
        shown = {k: f"{last[k]:.3f}" for k in _SHOWN if k in last}
        shown |= {"tok/s": f"{last['tokens_per_s']:.0f}", "lr": f"{last['lr']:.2e}"}
        # a line per logging step, so the history of the losses stays on screen
        # before a time budget's first plan the total is not known: "?" (the bar shows no total either)
        total = "?" if state.decide_at else state.total
        line = f"step {state.step}/{total} " + " ".join(f"{k} {v}" for k, v in shown.items())
        if run.bar is not None:
            run.bar.set_postfix(shown)
            run.bar.write(line)
        else:
            print(line, flush=True)
    state.window, state.tokens, state.t0 = {}, 0, time.perf_counter()


def evaluate(run: Run, state: State, eval_fn: Callable[[nn.Module, int], dict[str, float]]) -> None:
    """Evaluate at this step, log the results, and keep the weights when they are the best so far."""
    t = state.budget.clock() if state.budget is not None else 0.0
    results = _run_eval(eval_fn, run.raw_model, state.step, run.rank, run.logger, state.last)
    _select(results, state.step, run.raw_model, run.args, state.best)
    if state.pace is not None:  # not a step's time; what an evaluation costs, for the plan
        state.pace.overhead("eval", state.budget.clock() - t)


def _select(results: dict[str, Any], step: int, model: nn.Module, args: TrainingArguments, best: dict) -> None:
    """Keep ``model``'s weights in ``output_dir/best/`` when ``results`` beat the best so far.

    Every rank holds the same results (eval_fn gathers), so every rank takes the same decision; only
    rank 0 writes. Equal scores keep the earlier step (as a resumed run re-evaluating a step does)."""
    metric = args.metric_for_best_model
    if not metric:
        return
    if metric not in results or not isinstance(results[metric], (int, float)):
        keys = ", ".join(sorted(k for k, v in results.items() if isinstance(v, (int, float))))
        raise SpanBertError(
            f"--metric_for_best_model: found {metric!r}, expected one of the evaluation's results: {keys}"
        )
    score = float(results[metric])
    old = best["score"]
    if old is not None and not (score > old if args.greater_is_better else score < old):
        return
    best.update(
        step=step, score=score, metrics={k: float(v) for k, v in results.items() if isinstance(v, (int, float))}
    )
    on_main(lambda: save_best_weights(Path(args.output_dir), model, dict(best)))


def _run_eval(eval_fn, model: nn.Module, step: int, rank: int, logger: _Logger, last: dict) -> dict[str, Any]:
    """Every rank evaluates (contract 7: eval_fn shards and gathers); rank 0's logger writes."""
    was_training = model.training
    model.eval()
    release_buffers()  # the training steps' attention buffers, not on top of the evaluation's peak
    t = time.perf_counter()
    try:
        with torch.no_grad():
            results = eval_fn(model, step) or {}
    finally:
        model.train(was_training)
        if next(model.parameters()).device.type == "cpu":
            trim_heap(min_interval=0.0)  # the evaluation's large batches leave the most freed heap
    # its wall time beside its numbers: what an evaluation costs (a study's dry run reads it from its probes)
    seconds = {"time/eval_s": time.perf_counter() - t}
    logger.log(step, {**{f"eval/{k}": float(v) for k, v in results.items() if isinstance(v, (int, float))}, **seconds})
    last.update({f"eval_{k}": float(v) for k, v in results.items() if isinstance(v, (int, float))})
    return results


def checkpoint(run: Run, state: State) -> None:
    """Save the training state at this step (rank 0 writes; every rank's RNG streams, so each resumes its own)."""
    settle_skips(run, state)
    t = state.budget.clock() if state.budget is not None else 0.0
    state.extra_state["train_seconds"] = train_seconds(state)
    if state.budget is not None:  # what the budget has used up to this checkpoint, for a resumed run
        state.extra_state["time_budget"]["elapsed_seconds"] = state.budget.elapsed()
    rngs = all_gather_objects(_rng_state())  # every rank's stream, so each resumes its own
    on_main(lambda: save_training_state(Path(run.args.output_dir), state.step, run.model, run.optimizer,
                                        run.scheduler, run.scaler, run.args, state.extra_state, rngs))  # fmt: skip
    if state.pace is not None:
        state.pace.overhead("save", state.budget.clock() - t)


# ---------------------------------------------------------------------------------------------
# The time budget and the end of a run


def eval_interval(run: Run, state: State, epoch_steps: int) -> int:
    """Steps between two evaluations (0: at the end only): a time budget's, --eval_steps, or an epoch's
    share under --evals_per_epoch."""
    args = run.args
    if state.eval_every is not None:
        return state.eval_every
    return args.eval_steps or (max(1, epoch_steps // args.evals_per_epoch) if args.evals_per_epoch else 0)


def save_interval(run: Run, state: State) -> int:
    """Steps between two checkpoints (0: none before the end): a time budget's or --save_steps."""
    return state.save_every if state.save_every is not None else run.args.save_steps


def decide_time_budget(
    run: Run, state: State, budget: TimeBudget, eval_fn: Callable[[nn.Module, int], dict[str, float]] | None,
    epoch_steps: int,
) -> bool:  # fmt: skip
    """The time budget's first plan, at the step `State.decide_at` names (in the warm-up): time one
    evaluation, plan the total steps that fit what is left of the budget from this process's step times,
    fit the warm-up and the intervals to it (`spanbert.budget.fit_plan`), all on rank 0 for every rank,
    and make the schedule, the stop step and the bar follow it. Returns whether it evaluated."""
    evaluated = False
    if eval_fn is not None:  # one evaluation, timed (`evaluate` tells the pace) and logged as any other
        evaluate(run, state, eval_fn)
        evaluated = True
    pace, args = state.pace, run.args
    eval_s = pace.eval_s if eval_fn is not None else 0.0
    every, save_every = eval_interval(run, state, epoch_steps), save_interval(run, state)
    decision = on_main(functools.partial(_first_plan, budget, pace, state.step, run.warmup, eval_s, every, save_every,
                                         eval_fn is not None and bool(args.eval_steps)))  # fmt: skip
    budget_state = state.extra_state["time_budget"]
    budget_state.update(decision["state"])
    if decision["eval_steps"] != every:
        state.eval_every = decision["eval_steps"]
    if decision["save_steps"] != save_every:
        state.save_every = decision["save_steps"]
    run.warmup = decision["warmup"]
    state.decide_at = 0
    _follow_plans(run, state)
    first = decision["state"]
    steps = f"steps {pace.first_step + 1}-{state.step}" if pace.steps else f"step {state.step}"
    print0(
        f"time budget {budget.text}" + (" (data preparation included)" if budget.includes_data else "")
        + f": {first['step_seconds']:.2f} s a step over {steps}"
        + (f", {eval_s:.1f} s an evaluation" if eval_fn is not None else "")
        + f"; {format_duration(budget.seconds - first['remaining_seconds'])} of it used so far -> {state.total} steps "
        f"in all, re-planned if the speed changes"
    )  # fmt: skip
    for note in decision["notes"]:
        print0(f"note: {note}")
    return evaluated


def _first_plan(budget: TimeBudget, pace: Pace, step: int, warmup: int, eval_s: float, every: int, save_every: int,
                fit_evals: bool) -> dict[str, Any]:  # fmt: skip
    """Rank 0's first plan at ``step``: the total, the warm-up and intervals that fit it, its notes."""
    step_s = pace.step_seconds(ahead=1 << 30)  # every step this process timed
    if step_s is None:  # no step after this process's first: the first, start-up and all (errs short)
        step_s = max(1e-6, pace.clock() - pace.started) / max(1, step - pace.first_step + 1)
    remaining = budget.remaining()
    end_s = pace.save_s  # the export after the last step: about a checkpoint's writing, once measured
    total = total_steps(step, remaining, step_s, eval_s, every, pace.save_s, save_every, end_s)
    for _ in range(3):  # shorter intervals make more evaluations and checkpoints: fewer steps fit, and so on
        fit = fit_plan(total, step, warmup, every if fit_evals else 0, save_every)
        new_every = fit.eval_steps if fit_evals else every
        again = total_steps(step, remaining, step_s, eval_s, new_every, pace.save_s, fit.save_steps, end_s)
        if again == total:
            break
        total = again
    plans = [*budget.plans, Plan(step, total, fit.warmup)]
    # the intervals only where the plan shortened them: a resumed run reads its own options otherwise
    state = {"max_steps": total, "decided_at_step": step, "step_seconds": step_s, "eval_seconds": eval_s,
             "remaining_seconds": remaining, "plans": plan_rows(plans), "decided": True, "warmup_steps": fit.warmup,
             "eval_steps": new_every if new_every != every else None,
             "save_steps": fit.save_steps if fit.save_steps != save_every else None}  # fmt: skip
    return {"state": state, "warmup": fit.warmup, "eval_steps": new_every, "save_steps": fit.save_steps,
            "notes": list(fit.notes)}  # fmt: skip


def check_time_budget(run: Run, state: State, epoch_steps: int) -> None:
    """Every few steps after the first plan (`spanbert.budget.replan_every`): on rank 0 for every rank,
    whether the steps left still end the run at the budget at this process's latest speed; when the end
    it predicts is more than `REPLAN_TOLERANCE` of the budget away, a new total (`Plan`), and the
    schedule, stop step, bar and log follow it."""
    budget = state.budget
    every, save_every = eval_interval(run, state, epoch_steps), save_interval(run, state)
    plan = on_main(functools.partial(_replan, budget, state.pace, state.step, state.total, run.warmup, every,
                                     save_every))  # fmt: skip
    if plan is None:
        state.next_check = state.step + replan_every(state.total)
        return
    was = state.total
    budget_state = state.extra_state["time_budget"]
    budget_state["plans"] = plan_rows([*budget.plans, Plan(**plan["plan"])])
    budget_state["max_steps"] = plan["plan"]["total"]
    _follow_plans(run, state)
    print0(
        f"time budget {budget.text}: {plan['step_seconds']:.2f} s a step over the last {plan['timed']} steps, "
        f"{format_duration(max(0.0, plan['remaining']))} left -> {state.total} steps in all (was {was})"
    )


def _replan(budget: TimeBudget, pace: Pace, step: int, total: int, warmup: int, every: int,
            save_every: int) -> dict[str, Any] | None:  # fmt: skip
    """Rank 0's check of the plan at ``step``: None to keep it, else the new plan and what it came from."""
    ahead = total - step
    step_s = pace.step_seconds(ahead)
    if step_s is None or len(pace.steps) < 2:
        return None
    remaining = budget.remaining()
    end_s = pace.save_s
    need = seconds_needed(step, total, step_s, pace.eval_s, every, pace.save_s, save_every, end_s)
    if abs(need - remaining) <= REPLAN_TOLERANCE * budget.seconds:
        return None
    new = total_steps(step, remaining, step_s, pace.eval_s, every, pace.save_s, save_every, end_s)
    if new == total:
        return None
    timed = min(len(pace.steps), max(4, ahead))
    return {"plan": {"step": step, "total": new, "warmup": warmup}, "step_seconds": step_s, "remaining": remaining,
            "timed": timed}  # fmt: skip


def _follow_plans(run: Run, state: State) -> None:
    """The schedule, the stop step, the bar and the next check made from ``extra_state``'s plans."""
    budget_state, budget = state.extra_state["time_budget"], state.budget
    budget.plans = [Plan(**p) for p in budget_state["plans"]]
    state.total = budget.plans[-1].total
    state.end = stop_step(state.total, run.args)
    run.scheduler.lr_lambdas = planned_schedule(budget.plans, run.groups, run.args)
    state.next_check = state.step + replan_every(state.total)
    if run.bar is not None:
        run.bar.total = state.total
        run.bar.refresh()


def planned_schedule(plans: list[Plan], groups: list[dict[str, Any]], args: TrainingArguments) -> list[Callable[[int], float]]:
    """Each parameter group's multipliers under a time budget's successive plans (`spanbert.budget.planned_lambda`)."""
    return [planned_lambda(plans, lambda total, warmup, i=i: schedule(total, warmup, groups, args)[i])
            for i in range(len(groups))]  # fmt: skip


def finish(run: Run, state: State, eval_fn: Callable[[nn.Module, int], dict[str, float]] | None) -> None:
    """After the last step of this call: the skip counts settled, the last checkpoint (with --save_steps,
    or when the run stopped before its total), and the evaluation at the run's last step."""
    settle_skips(run, state)
    if run.args.save_steps > 0 or state.step < state.total:
        checkpoint(run, state)
    if eval_fn is not None and state.step == state.total:
        evaluate(run, state, eval_fn)


def close_run(run: Run, stream: Any) -> None:
    """On every exit path: the loader's workers joined (before the process group goes), the bar and the
    log closed, the attention core's buffers kept between steps released (`spanbert.attention`)."""
    close_loader(stream)
    if run.bar is not None:
        run.bar.close()
    run.logger.close()
    release_buffers()


def restore_best(run: Run, state: State) -> None:
    """With --metric_for_best_model, at the end of a run that reached its total: the model takes the
    best evaluation's weights."""
    args, best = run.args, state.best
    if args.metric_for_best_model and best["step"] is not None and state.step == state.total:
        if best["step"] != state.step:  # the last evaluation's weights are the model's already: nothing to read back
            load_best_weights(Path(args.output_dir), run.raw_model)
        print0(
            f"selected the model of step {best['step']} ({args.metric_for_best_model} {best['score']:.4f}, "
            f"best of the evaluations on dev)"
        )
