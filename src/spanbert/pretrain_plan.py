"""What a pre-training plan costs before it runs: its training FLOPs (the family's `flops_per_token`), the
time they take on this machine, a warning for a plan that is enormous here and the refusal of one over a
week (`check_plan`, called by `spanbert.pretrain.pretrain` before any work and again once an epoch's
length is known)."""

from __future__ import annotations

from typing import Any

import torch

from spanbert import cost, distributed
from spanbert.config import MODEL_PRESETS
from spanbert.errors import SpanBertError
from spanbert.families import FAMILIES
from spanbert.microbatch import planned_batch_size
from spanbert.pretrain_config import PretrainConfig, system_of
from spanbert.training_args import TrainingArguments


def plan_flops(config: Any, cfg: PretrainConfig, args: TrainingArguments, steps: int, sbo: bool) -> float:
    """Training FLOPs of the whole plan: the family's `flops_per_token` x tokens per step x steps (full
    blocks, or a full token budget)."""
    system = system_of(cfg)
    objectives = tuple(o for o in system.objectives if o != "sbo") + (("sbo",) if sbo else ())
    per_token = FAMILIES[system.family].pretraining.flops_per_token(config, cfg.max_seq_length, objectives)
    return per_token * _tokens_per_step(cfg, args) * steps


def _tokens_per_step(cfg: PretrainConfig, args: TrainingArguments) -> int:
    """Tokens of a full update: the token budget, or sequences x max_seq_length."""
    world = distributed.world_size()
    per_micro_batch = args.max_tokens_per_batch or planned_batch_size(args.per_device_train_batch_size) * cfg.max_seq_length
    return per_micro_batch * args.gradient_accumulation_steps * world


def _plan_seconds(flops: float, device: torch.device) -> tuple[float, float]:
    """(assumed FLOP/s of one device, estimated seconds of ``flops`` on this machine)."""
    rate = cost.machine_flops(device.type, torch.get_num_threads())
    return rate, flops / rate / max(1, distributed.world_size()) if device.type != "cpu" else flops / rate


LONG_PRETRAIN_HINT = "--max_steps, --model tiny or small, --max_seq_length or --tokens_per_update, or a GPU"


def refuse_long_plan(flops: float, steps: int, args: TrainingArguments, device: torch.device) -> None:
    """Refuse (`SpanBertError`) a plan of ``flops`` estimated over a week on this device, unless
    --allow_long_run or --resume (that run was started). Call it before any work: decided once, on
    rank 0 (its thread count), and the same on every rank."""

    def decide() -> None:
        seconds = _plan_seconds(flops, device)[1]
        error = cost.long_run_error(seconds, device.type, f"this pre-training ({steps:,} steps)", LONG_PRETRAIN_HINT)
        if error and not (args.allow_long_run or args.resume):
            raise SpanBertError(error)

    distributed.on_main(decide)


def check_plan(
    config: Any, cfg: PretrainConfig, args: TrainingArguments, steps: int, sbo: bool, device: torch.device
) -> str | None:
    """`refuse_long_plan`, then `plan_warning`."""
    refuse_long_plan(plan_flops(config, cfg, args, steps, sbo), steps, args, device)
    return plan_warning(config, cfg, args, steps, sbo, device)


def plan_warning(
    config: Any, cfg: PretrainConfig, args: TrainingArguments, steps: int, sbo: bool, device: torch.device
) -> str | None:
    """A warning line when the plan is enormous for this machine (base or larger on CPU, or an
    estimated time over a day), with the estimate and how to make it smaller; else None."""
    flops = plan_flops(config, cfg, args, steps, sbo)
    rate, seconds = _plan_seconds(flops, device)
    layers, hidden = FAMILIES[system_of(cfg).family].pretraining.sizes(config)
    big_on_cpu = device.type == "cpu" and hidden >= MODEL_PRESETS["base"]["hidden_size"]
    if seconds < cost.LONG_PLAN_SECONDS and not big_on_cpu:  # a day (`cost`, shared with fine-tuning)
        return None
    size = f"{layers} layers x {hidden}"
    return (
        f"warning: this plan is very large for this machine: {size}, {steps:,} steps of "
        f"{_tokens_per_step(cfg, args):,} tokens = {flops:.2g} FLOPs, {cost.human_duration(seconds)} on {device.type} "
        f"(assuming {rate:.1g} FLOP/s); make it smaller with --max_steps, --model tiny or small, "
        "--max_seq_length or --tokens_per_update, or run the quick start (no --corpus/--model)"
    )
