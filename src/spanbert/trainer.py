"""One explicit training loop for pre-training and fine-tuning.

AdamW with decoupled weight decay (LayerNorm weights and biases exempt unless told), linear warmup
then linear (or fairseq polynomial) decay, batches of a sequence count or a token budget, gradient
clipping, gradient accumulation, bf16/fp16 autocast, atomic checkpoints with exact resume, and DDP
under `torchrun` (NCCL on GPU, gloo on CPU).

Determinism: the sample order is a function of (seed, epoch) only and the micro-batches of global step
s are the slice [s*G, (s+1)*G) of that epoch's permutation (G = global batch). So the data position
is derived from the step count, a resume needs nothing but the step, and 1 process with accumulation
sees exactly the micro-batches that N processes see together. With a token budget
(`max_tokens_per_batch`) the same holds with micro-batches in place of examples: epoch e's
micro-batches are a pure function of (seed, e, the dataset's lengths, the budget) (`token_batches`)
and step s takes [s*M, (s+1)*M) of them, M = processes x accumulation.
"""

from __future__ import annotations

import functools
import json
import math
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from spanbert import cost, threads
from spanbert.attention import release_buffers
from spanbert.budget import TimeBudget, total_steps
from spanbert.compile import CompileReport, compile_regions, graphs_compiled, wants_compile
from spanbert.cost import finetune_warning
from spanbert.distributed import (  # noqa: F401 - distributed_env, init_distributed, resolve_device re-exported
    all_gather_objects,
    distributed_env,
    eprint0,
    init_distributed,
    is_main,
    on_main,
    print0,
    resolve_device,
)
from spanbert.errors import SpanBertError
from spanbert.microbatch import AUTO, resolve_batch_size
from spanbert.optim import clip_gradients, clip_groups, cosine_lambda, lr_lambda, make_optimizer, param_groups
from spanbert.precision import _with_flushed_denormals, autocast_dtype, flush_denormals, precision_note, precision_text

# the run folder on disk (checkpoints, resume, output contract, log, best weights): `spanbert.runs`,
# its names re-exported here, where callers and docs have always found them
from spanbert.runs import (  # noqa: F401
    BATCH_SPLIT,
    BEST_DIR,
    LOG_FILE,
    RUN,
    RUN_NAMES,
    SAFE_TO_CHANGE,
    STATE_KEYS,
    TENSORBOARD_DIR,
    _ckpt_step,
    _complete,
    _flatten,
    _Logger,
    _point_latest,
    _rng_state,
    _start_log,
    _start_run_dir,
    _unwrap,
    check_output_dir,
    claim_run_dir,
    compare_settings,
    find_resume_checkpoint,
    holds_a_run,
    latest_checkpoint,
    load_best_weights,
    load_training_state,
    save_best_weights,
    save_training_state,
    steps_per_epoch,
)
from spanbert.training_args import TrainingArguments  # noqa: F401 -- its old home
from spanbert.utils import close_inherited_sockets, configure_malloc, progress_bar, trim_heap


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


# ---------------------------------------------------------------------------------------------
# Sample order


def epoch_permutation(n: int, seed: int, epoch: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(n)


class PadBatch(list):
    """A micro-batch that only keeps a rank in step with the others: in an epoch's short last step a
    rank whose share is empty runs one example forward and backward with weight 0 (DDP needs a backward
    on every rank for every micro-batch), and adds nothing to the gradient, the counts or the logs."""


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


def _short_step(parts: list[list[int]], first: int, present: int, world: int) -> list[list[int]]:
    """A rank's micro-batches of one step, ``parts[m]`` empty where its share has run out: as many as
    rank 0 has (``present`` = micro-batches of the step over all ranks), empty ones padded with example
    ``first`` (`PadBatch`), so one process and N processes train on the same examples, each once."""
    k = -(-present // world)  # rank 0's count, the most any rank has
    return [mb if mb else PadBatch([first]) for mb in parts[:k]]


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
    G = batch * world * accum
    perm = epoch_permutation(n, seed, epoch)
    steps = []
    for s in range(start_step, steps_per_epoch(n, G)):
        chunk = perm[s * G : (s + 1) * G]
        parts = [chunk[(m * world + rank) * batch :][:batch].tolist() for m in range(accum)]
        steps.append(_short_step(parts, int(chunk[0]), -(-len(chunk) // batch), world))
    return steps


def token_batches(lengths: np.ndarray, max_tokens: int, seed: int, epoch: int) -> list[list[int]]:
    """The micro-batches of one epoch under a token budget, in the order they are used.

    As fairseq's ``batch_by_size`` (the released SpanBERT run): examples sorted by length are cut
    greedily into batches whose padded size, count x longest, stays <= ``max_tokens``; the batches are
    then shuffled. Unlike fairseq, examples of equal length are ordered by a (seed, epoch) permutation
    first, so a batch's members change every epoch (fairseq sorts equal lengths by index and keeps the
    same batches in every epoch). A pure function of (lengths, max_tokens, seed, epoch); every epoch has
    the same number of batches (the sorted lengths, and so the cuts, do not depend on the epoch).
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if len(lengths) and int(lengths.max()) > max_tokens:
        i = int(lengths.argmax())
        raise SpanBertError(
            f"--max_tokens_per_batch: found {max_tokens}, expected at least the longest example ({lengths[i]} "
            f"tokens, example {i})"
        )
    perm = epoch_permutation(len(lengths), seed, epoch)
    order = perm[np.argsort(lengths[perm], kind="stable")]  # by length; equal lengths in a random order
    sorted_len = lengths[order].tolist()
    batches: list[list[int]] = []
    lo = 0
    for hi in range(1, len(order) + 1):
        # ascending lengths: the longest of order[lo:hi+1] is its last; close the batch before it overflows
        if hi == len(order) or (hi + 1 - lo) * sorted_len[hi] > max_tokens:
            batches.append(order[lo:hi].tolist())
            lo = hi
    shuffle = np.random.default_rng([seed, epoch, 0xBA7C]).permutation(len(batches))
    return [batches[j] for j in shuffle]


def token_micro_batches(
    lengths: np.ndarray, max_tokens: int, seed: int, epoch: int, accum: int, rank: int, world: int, start_step: int
) -> list[list[list[int]]]:
    """`micro_batches` under a token budget: step s takes micro-batches [s*M, (s+1)*M) of
    `token_batches`, M = world * accum, micro-batch m of rank r being number s*M + m*world + r; so one
    process with accumulation M sees what M processes see together. The last step may be short, as in
    `micro_batches` (`PadBatch` where a rank has no micro-batch left)."""
    batches = token_batches(lengths, max_tokens, seed, epoch)
    M = world * accum
    steps = []
    for s in range(start_step, steps_per_epoch(len(batches), M)):
        parts = [batches[j] if j < len(batches) else [] for j in (s * M + m * world + rank for m in range(accum))]
        steps.append(_short_step(parts, batches[s * M][0], min(M, len(batches) - s * M), world))
    return steps


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
        return per_epoch, cost.FinetunePlan(total, epochs, device_type, train_s, params=params, train_tokens=tokens), None
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
    lengths = np.asarray(get() if callable(get) else get, dtype=np.int64)
    if lengths.shape != (len(dataset),):
        raise SpanBertError(
            f"{type(dataset).__name__}.lengths(): found shape {lengths.shape}, expected ({len(dataset)},)"
        )
    return lengths


def _to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(v, device) for v in batch)
    return batch


def _count_tokens(batch: Any) -> int:
    """Real tokens of a collated batch, read from its host (CPU) tensors: numpy, never a device sync."""
    if isinstance(batch, dict):
        if batch.get("attention_mask") is not None:
            return int(batch["attention_mask"].numpy().sum())
        if isinstance(batch.get("input_ids"), torch.Tensor):
            return batch["input_ids"].numel()
    return 0


# ---------------------------------------------------------------------------------------------
# The loop


def _examples(batch: Any) -> int:
    if isinstance(batch, dict) and isinstance(batch.get("input_ids"), torch.Tensor):
        return int(batch["input_ids"].shape[0])
    if isinstance(batch, dict):
        for v in batch.values():
            if isinstance(v, torch.Tensor) and v.ndim > 0:
                return int(v.shape[0])
    return 1


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
        per_epoch, plan, note = plan_finetuning(model, dataset, args, epoch_steps, total, device.type, threads, world, dev)
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

    ``time_budget`` (`spanbert.budget`): the total is not ``args.max_steps`` but what fits the budget,
    decided once after the first warm-up steps (`TimeBudget.measure_until`) from their speed and one
    timed evaluation, on rank 0 for every rank; the warm-up's rates do not depend on the total, so the
    run equals one given that total from the start. The decision is kept in every checkpoint, and
    ``--resume`` continues with it (not a new one).

    ``cost_warning``: warn (stderr, rank 0) before the first step when the run would take more than a
    day on this machine (`cost.finetune_warning`); pre-training passes False, having warned with its
    own estimate (`spanbert.pretrain.plan_warning`). With it, the plan line (steps, estimated training
    and evaluation time; `plan_finetuning`, ``eval_size`` telling one evaluation pass) is printed before
    the first step, the evaluations per epoch may be lowered (``args.max_eval_share``), and a plan over
    a week is refused before anything is written unless ``args.allow_long_run`` (decided on rank 0).
    """
    rank, world, _ = distributed_env()
    device = resolve_device(args.device)
    init_distributed(device)
    if args.threads:  # also from a --config file, which the command line's early read does not see
        threads.configure(args.threads)
    # what else keeps the cores busy, since the command started: the time a plan promises is an idle
    # machine's, so the lines that promise one say when it is not
    shared = threads.sharing() if device.type == "cpu" else None
    if device.type == "cpu":
        beside = f"; {shared}: expect a slower run than on idle cores" if shared else ""
        print0(f"{threads.describe()}; {precision_text(args.precision, device)}{beside}")
        note = precision_note(args.precision, device)
        if note:
            eprint0(note)
    if device.type == "cpu":
        configure_malloc()  # tensors >= 8 MB go back to the system when freed (utils.configure_malloc)
    output_dir = Path(args.output_dir)
    check_output_dir(args)
    n = len(train_dataset)
    if n == 0:
        raise SpanBertError("the training set is empty")
    n_regions = compile_regions(model) if wants_compile(args.compile, device) else 0  # in place: same state_dict
    if wants_compile(args.compile, device) and not n_regions:
        print0(f"torch.compile: {type(model).__name__} has no region to compile (spanbert.compile); it runs eager")
    graphs_before = graphs_compiled()
    if args.per_device_train_batch_size == AUTO:  # the probe runs the model: on the device, compiled as it trains
        model.to(device)
        lengths_or_none = dataset_lengths(train_dataset) if hasattr(train_dataset, "lengths") else None
        args = resolve_batch_size(args, model, train_dataset, collate_fn, device, autocast_dtype(args.precision, device),
                                  _to_device, lengths=lengths_or_none)  # fmt: skip
    b, accum = args.per_device_train_batch_size, args.gradient_accumulation_steps
    if b < 1 or accum < 1:
        raise SpanBertError("per_device_train_batch_size and gradient_accumulation_steps must be >= 1")
    budget = args.max_tokens_per_batch
    lengths = dataset_lengths(train_dataset) if budget else None
    if budget:
        # the batch count is the same in every epoch (token_batches), so epoch 0's tells the epoch length
        n_batches = len(token_batches(lengths, budget, args.seed, 0))
        epoch_steps = steps_per_epoch(n_batches, world * accum)
    else:
        epoch_steps = steps_per_epoch(n, b * world * accum)  # >= 1: a short step takes what there is
    total = args.max_steps if args.max_steps > 0 else math.ceil(args.num_train_epochs * epoch_steps)
    decide_at = 0  # the step after which a time budget fixes the total (0: no decision to make)
    budget_state: dict[str, Any] | None = None
    if time_budget is not None:
        decide_at = time_budget.measure_until(args.warmup_steps)
        if args.resume:  # the total the resumed run decided, if it got that far
            budget_state = on_main(lambda: _saved_time_budget(output_dir))
        if budget_state is not None:
            total, decide_at = int(budget_state["max_steps"]), 0
        else:
            total = max(total, decide_at + 1)  # provisional, until the warm-up's speed is measured
    warmup = args.warmup_steps or math.ceil(args.warmup_ratio * total)
    run_config = json.loads(json.dumps(run_config, default=str)) if run_config is not None else None
    settings = {"args": asdict(args), "run_config": run_config, "world_size": world, "train_examples": n}
    if budget:
        settings["train_micro_batches"] = n_batches

    evals_per_epoch = args.evals_per_epoch
    if cost_warning:
        evals_per_epoch = _announce_plan(
            model, train_dataset, args, epoch_steps, total, device, world, eval_size if eval_fn else None, shared
        )
    is_eval_step = eval_schedule(args.eval_steps, evals_per_epoch, epoch_steps)

    removed = on_main(lambda: _start_run_dir(output_dir, args))
    if removed:
        print0(f"note: removed what an interrupted run left in {output_dir}: {', '.join(removed)}")

    model.to(device)
    raw_model = model
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    groups = param_groups(
        raw_model, args.learning_rate, args.weight_decay, lr_by_prefix, weight_decay_by_prefix, args.decay_all_parameters
    )
    optimizer = make_optimizer(groups, args, device)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _schedule(total, warmup, groups, args))
    amp_dtype = autocast_dtype(args.precision, device)
    scaler = make_grad_scaler(amp_dtype, device)
    params = [p for g in groups for p in g["params"]]
    clipped = clip_groups(raw_model, params, clip_by_prefix)
    best: dict[str, Any] = {"step": None, "score": None, "metrics": {}}

    step = 0
    if args.resume:

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

    resume_step = step if args.resume else None
    log_note = on_main(lambda: _start_log(output_dir, resume_step))
    if log_note:
        print0(f"note: {log_note}")
    logger = _Logger(output_dir, rank == 0, args.report_to == "tensorboard", resume_step)
    bar = None
    if rank == 0 and not args.disable_tqdm:

        bar = progress_bar(total=total, initial=step, desc="train", unit="step", dynamic_ncols=True)
    window: dict[str, list[float]] = {}
    tokens, t0 = 0, time.perf_counter()
    skipped = 0
    scaler_skips_in_a_row = 0
    last: dict[str, float] = {}
    pin = device.type == "cuda"
    extra_state = {"world_size": world, "run_config": run_config, "best": best}
    if budget_state is not None:
        extra_state["time_budget"] = budget_state
    t_step1 = 0.0  # when step 1 ended: the time budget's measurement starts there
    # No host sync inside a step (docs/gpu.md): with fused AdamW and no fp16 scaler, a step with a
    # non-finite loss or gradient is skipped on the device (the optimizer's `found_inf`), and the
    # counts below are read on the host only at logging steps and checkpoints.
    device_skip = scaler is None and getattr(optimizer, "_step_supports_amp_scaling", False)
    skipped_t = torch.zeros((), device=device)  # steps skipped, not yet added to `skipped`
    first_bad = torch.zeros(3, device=device)  # (step, loss, grad norm) of the first bad step; step 0 = none
    compile_report = CompileReport(n_regions, total, graphs_before) if n_regions else None

    def settle_skips() -> None:
        """Read the device's skip counts (a sync: logging steps, checkpoints and the end only)."""
        nonlocal skipped
        if not device_skip:
            return
        skipped += int(skipped_t.item())
        skipped_t.zero_()
        bad_step, bad_loss, bad_norm = first_bad.tolist()
        if bad_step and args.nan_policy == "stop":
            raise SpanBertError(
                f"non-finite loss or gradient at step {int(bad_step)} (loss {bad_loss:.4g}, "
                f"grad norm {bad_norm:.4g}); lower the learning rate, use fp32, "
                f"or pass --nan_policy skip to skip such steps"
            )

    def checkpoint() -> None:
        settle_skips()
        rngs = all_gather_objects(_rng_state())  # every rank's stream, so each resumes its own
        on_main(lambda: save_training_state(output_dir, step, model, optimizer, scheduler, scaler, args, extra_state, rngs))

    def counts_of(mb: Any) -> dict[str, int]:
        c = {"loss": _examples(mb)}
        if count_targets is not None:
            c.update({k: int(v) for k, v in count_targets(mb).items()})
        return c

    model.train()
    stream = None
    if compile_report is not None:
        compile_report.start()
    try:
        end = min(total, args.stop_at_step) if args.stop_at_step > 0 else total
        while step < end:
            epoch, start = divmod(step, epoch_steps)
            if hasattr(train_dataset, "set_epoch"):
                train_dataset.set_epoch(epoch)
            if budget:
                plan = token_micro_batches(lengths, budget, args.seed, epoch, accum, rank, world, start)
            else:
                plan = micro_batches(n, args.seed, epoch, b, accum, rank, world, start)
            loader = torch.utils.data.DataLoader(
                train_dataset,
                batch_sampler=[mb for step_mbs in plan for mb in step_mbs],
                collate_fn=collate_fn,
                num_workers=args.dataloader_num_workers,
                pin_memory=pin,
                # worker seeds come from this generator, not the global RNG, so resumes stay exact
                generator=torch.Generator().manual_seed(args.seed * 1000 + epoch),
                persistent_workers=False,
                # a worker must not keep its rank's gloo connections open after the rank dies
                worker_init_fn=_forget_sockets if world > 1 else None,
            )
            _close_loader(stream)
            stream = iter(loader)
            for step_mbs in plan:
                if step >= end:
                    break
                threads.tick()
                # The whole step's micro-batches first (collated, on CPU): the loss weights need the
                # target counts of all of them, summed over the ranks, before the first backward.
                mbs = [next(stream) for _ in step_mbs]
                pads = [isinstance(ix, PadBatch) for ix in step_mbs]
                # a padding micro-batch counts no target (the same keys, so the all-reduce matches)
                counts = [{k: 0 for k in counts_of(mb)} if pad else counts_of(mb) for mb, pad in zip(mbs, pads)]
                keys = sorted(set().union(*counts))
                totals = {k: float(sum(c.get(k, 0) for c in counts)) for k in keys}
                if world > 1:
                    # every rank's counts before the first backward: the one host sync of a DDP step
                    totals_t = torch.tensor([totals[k] for k in keys], dtype=torch.float64, device=device)
                    dist.all_reduce(totals_t)
                    totals = dict(zip(keys, totals_t.tolist()))
                loss_sum = torch.zeros((), device=device)
                lr_used = _shown_lr(optimizer, args)  # the rate this step uses (before scheduler.step)
                for i, mb in enumerate(mbs):
                    tokens += 0 if pads[i] else _count_tokens(mb)  # on the host batch, before the copy
                    mb = _to_device(mb, device)
                    sync = world == 1 or i == len(mbs) - 1
                    ctx = model.no_sync() if not sync else nullcontext()
                    with ctx, torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                        out = model(**mb)
                        terms = out.get("loss_terms") if count_targets is not None else None
                        if not terms:
                            terms = {"loss": out["loss"]}
                        loss = 0.0
                        weights = term_weights(counts[i], totals, world) if term_weights is not None else None
                        for k, term in terms.items():
                            if weights is not None:
                                w = weights.get(k, 0.0)
                            else:
                                total_k = totals.get(k, 0.0)
                                # DDP averages gradients over ranks: times world makes that a sum
                                w = counts[i].get(k, 0) * world / total_k if total_k else 0.0
                            loss = loss + term.float() * w
                        if pads[i]:
                            loss = loss * 0.0  # a backward for DDP, no contribution (also under term_weights)
                    if scaler is not None:
                        scaler.scale(loss).backward()
                    else:
                        loss.backward()
                    loss_sum += loss.detach()
                    for k, v in out.items() if not pads[i] else ():  # a padding micro-batch is not logged
                        if (k.endswith("loss") or k.endswith("acc")) and isinstance(v, torch.Tensor) and v.ndim == 0:
                            window.setdefault(k, []).append(v.detach())  # read at the logging step
                if scaler is not None:
                    scaler.unscale_(optimizer)
                norms = [clip_gradients(g, args.max_grad_norm) for g in clipped]
                grad_norm = norms[0] if len(norms) == 1 else torch.linalg.vector_norm(torch.stack(norms))
                bad_loss = (~torch.isfinite(loss_sum)).float().reshape(1)
                bad_grad = (~torch.isfinite(grad_norm.to(device))).float().reshape(1)
                bad = torch.cat([bad_loss, bad_grad])
                if world > 1:
                    dist.all_reduce(bad)
                if device_skip:
                    found = (bad.sum() > 0).float()  # 1.0: the fused optimizer skips this update on the device
                    optimizer.found_inf = found
                    optimizer.step()
                    optimizer.found_inf = None
                    optimizer.zero_grad(set_to_none=True)
                    new_bad = (found > 0) & (first_bad[0] == 0)
                    first_bad.copy_(torch.where(new_bad, torch.stack([
                        torch.full((), step + 1.0, device=device), loss_sum.float(), grad_norm.float().to(device)
                    ]), first_bad))
                    skipped_t += found
                # Otherwise (fp16, a non-fused optimizer) the host decides, one sync per step.
                # fp16: a non-finite gradient with a finite loss is the scaler's overflow, expected
                # while it finds its scale: the scaler skips the step, we count it. A non-finite loss
                # follows --nan_policy as in fp32/bf16.
                elif bool(bad[0].item()) or (scaler is None and bool(bad[1].item())):
                    if args.nan_policy == "stop":
                        raise SpanBertError(
                            f"non-finite loss or gradient at step {step + 1} (loss {loss_sum.item():.4g}, "
                            f"grad norm {grad_norm.item():.4g}); lower the learning rate, use fp32, "
                            f"or pass --nan_policy skip to skip such steps"
                        )
                    skipped += 1
                    optimizer.zero_grad(set_to_none=True)
                    if scaler is not None:
                        scaler.update(scaler.get_scale() * scaler.get_backoff_factor())
                else:
                    if scaler is not None:
                        before = scaler.get_scale()
                        scaler.step(optimizer)
                        scaler.update()
                        if scaler.get_scale() < before:  # overflow: the scaler skipped this step
                            skipped += 1
                            scaler_skips_in_a_row += 1
                            if args.nan_policy == "stop" and scaler_skips_in_a_row >= MAX_CONSECUTIVE_SCALER_SKIPS:
                                raise SpanBertError(
                                    f"{scaler_skips_in_a_row} fp16 overflow steps in a row up to step {step + 1}: "
                                    f"the gradients are not finite at any scale; lower the learning rate or "
                                    f"use bf16/fp32"
                                )
                        else:
                            scaler_skips_in_a_row = 0
                    else:
                        optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                with warnings.catch_warnings():
                    # a skipped step still advances the schedule (the step count decides the rate)
                    warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step", category=UserWarning)
                    scheduler.step()
                step += 1
                if compile_report is not None:
                    compile_report.step_done(step)  # the compilation's time and graphs, in the log
                if device.type == "cpu":
                    trim_heap()  # bounded resident memory on CPU, at most every 2 s (utils.trim_heap)
                window.setdefault("grad_norm", []).append(grad_norm.detach())
                if bar is not None:
                    bar.update(1)
                if decide_at and step == 1:
                    t_step1 = time.perf_counter()
                if step % max(1, args.logging_steps) == 0 or step == end:
                    settle_skips()
                    dt = time.perf_counter() - t0
                    last = {k: float(torch.stack([x.double().cpu() for x in v]).mean()) for k, v in window.items()}
                    last["lr"] = lr_used
                    last["tokens_per_s"] = tokens * world / dt if dt > 0 else 0.0
                    # real (unpadded) tokens per update, averaged over the window (this rank's x world)
                    last["tokens_per_step"] = tokens * world / max(1, len(window.get("grad_norm", ())))
                    last["skipped_steps"] = float(skipped)
                    logger.log(step, {f"train/{k}": v for k, v in last.items()})
                    if rank == 0:
                        shown = {k: f"{last[k]:.3f}" for k in _SHOWN if k in last}
                        shown |= {"tok/s": f"{last['tokens_per_s']:.0f}", "lr": f"{last['lr']:.2e}"}
                        # a line per logging step, so the history of the losses stays on screen
                        line = f"step {step}/{total} " + " ".join(f"{k} {v}" for k, v in shown.items())
                        if bar is not None:
                            bar.set_postfix(shown)
                            bar.write(line)
                        else:
                            print(line, flush=True)
                    window, tokens, t0 = {}, 0, time.perf_counter()
                evaluated = False
                if decide_at and step == decide_at:
                    step_s = (time.perf_counter() - t_step1) / max(1, step - 1)
                    eval_s = 0.0
                    if eval_fn is not None:  # one evaluation, timed (and logged as any other)
                        t = time.perf_counter()
                        _select(_run_eval(eval_fn, raw_model, step, rank, logger, last), step, raw_model, args, best)
                        eval_s, evaluated = time.perf_counter() - t, True
                    # evaluations every `every` steps (0: at the end only); none without an eval_fn (eval_s 0)
                    every = args.eval_steps or (max(1, epoch_steps // args.evals_per_epoch) if args.evals_per_epoch else 0)
                    budget_state = on_main(functools.partial(_decide_total, time_budget, step, step_s, eval_s, every))
                    total, decide_at = int(budget_state["max_steps"]), 0
                    end = min(total, args.stop_at_step) if args.stop_at_step > 0 else total
                    scheduler.lr_lambdas = _schedule(total, warmup, groups, args)
                    extra_state["time_budget"] = budget_state
                    if bar is not None:
                        bar.total = total
                        bar.refresh()
                    print0(
                        f"time budget {time_budget.text}: {step_s:.2f} s a step over steps 2-{step}"
                        + (f", {eval_s:.1f} s an evaluation" if eval_fn is not None else "")
                        + f" -> {total} steps in all (to rerun exactly these steps: --max_steps {total} "
                        f"--warmup_steps {warmup})"
                    )
                if eval_fn is not None and is_eval_step(step) and step != total and not evaluated:
                    _select(_run_eval(eval_fn, raw_model, step, rank, logger, last), step, raw_model, args, best)
                if args.save_steps and step % args.save_steps == 0 and step != end:
                    checkpoint()
        settle_skips()
        if args.save_steps > 0 or step < total:
            checkpoint()
        if eval_fn is not None and step == total:
            _select(_run_eval(eval_fn, raw_model, step, rank, logger, last), step, raw_model, args, best)
    finally:
        _close_loader(stream)  # workers joined on every exit path, before the process group goes
        if bar is not None:
            bar.close()
        logger.close()
        release_buffers()  # the attention core's buffers kept between steps (spanbert.attention)
    if world > 1:
        dist.barrier()
    if args.metric_for_best_model and best["step"] is not None and step == total:
        if best["step"] != step:  # the last evaluation's weights are the model's already: nothing to read back
            load_best_weights(output_dir, raw_model)
        print0(
            f"selected the model of step {best['step']} ({args.metric_for_best_model} {best['score']:.4f}, "
            f"best of the evaluations on dev)"
        )
    return TrainResult(
        global_step=step,
        skipped_steps=skipped,
        metrics=last,
        best_step=best["step"],
        best_metrics=dict(best["metrics"]),
        total_steps=total,
    )


def _forget_sockets(worker_id: int) -> None:
    close_inherited_sockets()  # utils.close_inherited_sockets: why


def _close_loader(stream: Any) -> None:
    """Join a DataLoader iterator's worker processes now, not whenever the iterator is collected (on an
    error path the traceback keeps it alive until after `distributed.shutdown`)."""
    shutdown = getattr(stream, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()


def _schedule(total: int, warmup: int, groups: list[dict[str, Any]], args: TrainingArguments) -> list[Callable[[int], float]]:
    """The learning-rate multipliers of each parameter group (`LambdaLR`'s ``lr_lambda`` list)."""
    if args.lr_scheduler_type == "cosine":
        # absolute start and end rates: each group (peak rates differ under lr_by_prefix) its own multiplier
        return [cosine_lambda(total, warmup, g["initial_lr"], args.warmup_init_lr, args.min_lr) for g in groups]
    return [lr_lambda(total, warmup, args.lr_scheduler_type)] * len(groups)


def _saved_time_budget(output_dir: Path) -> dict[str, Any] | None:
    """The time budget's decision kept in the checkpoint a resume starts from, if it was made."""
    ckpt, _ = find_resume_checkpoint(output_dir)
    return json.loads((ckpt / "trainer_state.json").read_text()).get("time_budget")


def _decide_total(budget: TimeBudget, step: int, step_s: float, eval_s: float, every: int) -> dict[str, Any]:
    """The time budget's decision at ``step``: the total steps that fit what is left of it."""
    remaining = budget.remaining()
    total = total_steps(step, remaining, step_s, eval_s, every)
    return {"max_time": budget.text, "max_steps": total, "decided_at_step": step, "step_seconds": step_s,
            "eval_seconds": eval_s, "remaining_seconds": remaining}  # fmt: skip


def _shown_lr(optimizer, args: TrainingArguments) -> float:
    # the rate of the group at --learning_rate (not e.g. the encoder's under lr_by_prefix)
    return float(
        next(
            (g["lr"] for g in optimizer.param_groups if g["initial_lr"] == args.learning_rate),
            optimizer.param_groups[0]["lr"],
        )
    )


_SHOWN = ("loss", "mlm_loss", "sbo_loss", "nsp_loss", "mlm_acc", "sbo_acc", "nsp_acc")


def _select(results: dict[str, Any], step: int, model: nn.Module, args: TrainingArguments, best: dict) -> None:
    """Keep ``model``'s weights in ``output_dir/best/`` when ``results`` beat the best so far.

    Every rank holds the same results (eval_fn gathers), so every rank takes the same decision; only
    rank 0 writes. Equal scores keep the earlier step (as a resumed run re-evaluating a step does)."""
    metric = args.metric_for_best_model
    if not metric:
        return
    if metric not in results or not isinstance(results[metric], (int, float)):
        keys = ", ".join(sorted(k for k, v in results.items() if isinstance(v, (int, float))))
        raise SpanBertError(f"--metric_for_best_model: found {metric!r}, expected one of the evaluation's results: {keys}")
    score = float(results[metric])
    old = best["score"]
    if old is not None and not (score > old if args.greater_is_better else score < old):
        return
    best.update(step=step, score=score, metrics={k: float(v) for k, v in results.items() if isinstance(v, (int, float))})
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
    length, `spanbert.tasks.common.length_batches`); ``batch_size`` is then unused.
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
            bar = progress_bar(loader, desc=desc, disable=disable_tqdm or not is_main(), leave=False, dynamic_ncols=True)
            for batch in bar:
                threads.tick()
                with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                    out = model(**_to_device(batch, device))
                yield batch, out
    finally:
        model.train(was_training)
