"""What a plan will cost before it runs: assumed machine speeds, training FLOPs, readable durations.

`spanbert pretrain` (`pretrain_plan.plan_warning`), every `spanbert finetune` task (`trainer.train`) and
`spanbert study --dry-run` estimate with these, so their numbers agree and read the same. Estimates
are order-of-magnitude ("about 3 days"), not promises: they exist to stop a plan that would take
years from starting without a word. No torch here: the callers pass the device type and thread count.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

# Sustained training FLOP/s assumed per device type (a CPU per thread); deliberately round numbers.
ASSUMED_FLOPS = {"cpu_per_thread": 2e10, "cuda": 1e14, "mps": 5e12}
# A plan estimated to take longer than this is warned about before it starts.
LONG_PLAN_SECONDS = 24 * 3600
# A plan estimated to take longer than this is refused before any work, unless --allow_long_run: a
# week is past any first try, and a wrong size (a base model on CPU, a typo in --max_steps) shows
# up as months or years, never as days.
LONG_RUN_SECONDS = 7 * 24 * 3600
# An evaluation pass runs forward only: 2 N FLOPs a token against training's 6 N, so a third of a
# training step's cost per token (Kaplan et al. 2020).
EVAL_COST_SHARE = 1 / 3


def machine_flops(device_type: str, threads: int = 1) -> float:
    """Assumed training FLOP/s of one device of ``device_type`` ("cpu": ``threads`` x per thread)."""
    if device_type == "cpu":
        return ASSUMED_FLOPS["cpu_per_thread"] * max(1, threads)
    return ASSUMED_FLOPS.get(device_type, ASSUMED_FLOPS["cuda"])


def training_flops(params: int, tokens: float) -> float:
    """Forward + backward FLOPs of ``tokens`` through ``params`` non-embedding weights (6 N per token,
    Kaplan et al. 2020; attention's own term is small at fine-tuning lengths and left out)."""
    return 6.0 * params * tokens


def evaluation_flops(params: int, tokens: float) -> float:
    """Forward-only FLOPs of ``tokens`` through ``params`` weights: `EVAL_COST_SHARE` of training's."""
    return EVAL_COST_SHARE * training_flops(params, tokens)


def encoder_params(hidden_size: int, num_layers: int, intermediate_size: int | None = None) -> int:
    """Non-embedding weights of a transformer encoder: 4 H^2 attention + 2 H I feed-forward per layer."""
    inter = intermediate_size or 4 * hidden_size
    return num_layers * (4 * hidden_size * hidden_size + 2 * hidden_size * inter)


def human_duration(seconds: float) -> str:
    """A duration as a person reads it: "40 s", "12 min", "3 h 20 min", "about 5 days",
    "about 7 months", "about 290 years"."""
    if not math.isfinite(seconds):
        return "forever"
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    if seconds < 48 * 3600:
        hours, minutes = divmod(minutes, 60)
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days = seconds / 86400
    if days < 60:
        return f"about {days:.0f} days"
    if days < 730:
        return f"about {days / 30.44:.0f} months"
    return f"about {days / 365.25:,.0f} years"


def finetune_warning(
    params: int, tokens: float, device_type: str, threads: int = 1, world: int = 1, what: str = "this fine-tuning"
) -> str | None:
    """A warning line when ``tokens`` training tokens through ``params`` weights would take more than
    `LONG_PLAN_SECONDS` on this machine, with the estimate and how to make it smaller; else None."""
    rate = machine_flops(device_type, threads) * max(1, world)
    flops = training_flops(params, tokens)
    seconds = flops / rate
    if seconds < LONG_PLAN_SECONDS:
        return None
    return (
        f"warning: {what} is very large for this machine: {tokens:,.0f} tokens through {params / 1e6:,.1f}M weights "
        f"= {flops:.2g} FLOPs, {human_duration(seconds)} on {device_type} (assuming {rate:.1g} FLOP/s); make it "
        "smaller with --num_train_epochs or --max_steps, fewer examples (--max_train_examples where the task has "
        "it), a smaller model, or a GPU"
    )


def long_run_error(seconds: float, device_type: str, what: str, smaller: str) -> str | None:
    """The refusal of a plan estimated over `LONG_RUN_SECONDS` (a week) on this device: the estimate,
    how to make it ``smaller`` and how to start it anyway (--allow_long_run); else None."""
    if seconds <= LONG_RUN_SECONDS:
        return None
    return (
        f"{what} would take {human_duration(seconds)} on {device_type}, more than a week; make it smaller "
        f"({smaller}), or pass --allow_long_run to start it anyway"
    )


@dataclass(frozen=True)
class FinetunePlan:
    """What a fine-tuning run will cost, as the one line printed before its first step."""

    steps: int
    epochs: float
    device_type: str
    train_seconds: float | None
    """None when no token count is known (no estimate)."""
    evaluations: int = 0
    eval_seconds: float = 0.0
    """All evaluations together."""
    eval_examples: int = 0
    params: int = 0
    """The weights the estimate counts (trainable, outside the embedding tables)."""
    train_tokens: float = 0.0
    """Training tokens over the whole run (every epoch)."""
    shared: str | None = None
    """What other processes used of the cores when the plan was made (`threads.sharing`); None: idle."""

    def line(self) -> str:
        """"plan: 94 steps (1 epoch), about 5 min of training + 4 min of evaluation (1 evaluation of
        2,000 dev examples; 44% of the time) on cpu"."""
        head = f"plan: {self.steps:,} steps ({self.epochs:g} epoch{'' if self.epochs == 1 else 's'})"
        if self.train_seconds is None:
            return f"{head} on {self.device_type} (no time estimate: the training set tells no token counts)"
        text = f"{head}, {_about(self.train_seconds)} of training"
        if self.evaluations:
            share = self.eval_seconds / max(self.train_seconds + self.eval_seconds, 1e-9)
            n = self.evaluations
            text += (
                f" + {human_duration(self.eval_seconds)} of evaluation ({n:,} evaluation{'' if n == 1 else 's'} of "
                f"{self.eval_examples:,} dev examples; {share:.0%} of the time)"
            )
        if self.shared:  # the estimate is an idle machine's
            return f"{text} on idle {self.device_type} cores; {self.shared}: expect longer"
        return f"{text} on {self.device_type}"

    @property
    def seconds(self) -> float:
        return (self.train_seconds or 0.0) + self.eval_seconds


def _about(seconds: float) -> str:
    """ "about 5 min"; `human_duration` says "about" itself from two days on."""
    text = human_duration(seconds)
    return text if text.startswith("about") else f"about {text}"


def evals_within(
    share: float, default: int, train_seconds: float, pass_seconds: float, count: Callable[[int], int]
) -> int:
    """The evaluations per epoch to use: ``default`` when its evaluations (``count(n)`` passes of
    ``pass_seconds`` each) take at most ``share`` x ``train_seconds``; else the largest n >= 1 that does
    (1 when even that does not)."""
    for n in range(default, 0, -1):
        if count(n) * pass_seconds <= share * train_seconds:
            return n
    return 1
