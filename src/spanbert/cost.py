"""What a plan will cost before it runs: assumed machine speeds, training FLOPs, readable durations.

`spanbert pretrain` (`pretrain.plan_warning`), every `spanbert finetune` task (`trainer.train`) and
`spanbert study --dry-run` estimate with these, so their numbers agree and read the same. Estimates
are order-of-magnitude ("about 3 days"), not promises: they exist to stop a plan that would take
years from starting without a word. No torch here: the callers pass the device type and thread count.
"""

from __future__ import annotations

import math

# Sustained training FLOP/s assumed per device type (a CPU per thread); deliberately round numbers.
ASSUMED_FLOPS = {"cpu_per_thread": 2e10, "cuda": 1e14, "mps": 5e12}
# A plan estimated to take longer than this is warned about before it starts.
LONG_PLAN_SECONDS = 24 * 3600


def machine_flops(device_type: str, threads: int = 1) -> float:
    """Assumed training FLOP/s of one device of ``device_type`` ("cpu": ``threads`` x per thread)."""
    if device_type == "cpu":
        return ASSUMED_FLOPS["cpu_per_thread"] * max(1, threads)
    return ASSUMED_FLOPS.get(device_type, ASSUMED_FLOPS["cuda"])


def training_flops(params: int, tokens: float) -> float:
    """Forward + backward FLOPs of ``tokens`` through ``params`` non-embedding weights (6 N per token,
    Kaplan et al. 2020; attention's own term is small at fine-tuning lengths and left out)."""
    return 6.0 * params * tokens


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
