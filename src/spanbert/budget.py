"""A time budget for training: how many steps fit in a wall-clock budget, decided from the run's own speed.

`spanbert pretrain --max_time 60m` trains the warm-up steps, measures how long a step takes (and one
held-out evaluation), and then fixes the total number of steps so that the linear decay ends when the
budget does, counted from the command's start (data preparation included). The warm-up's learning
rates do not depend on the total, so the steps trained while measuring are the same as in a run given
that total from the start: the derived total, written into the run's checkpoints, makes `--resume` and
a rerun with `--max_steps N` reproduce the run exactly.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field

from spanbert.errors import SpanBertError

_PART = re.compile(r"(\d+(?:\.\d+)?)([hms])")
_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0}
# Steps timed before the total is fixed: after the first (allocations, caches), at most this many.
MEASURE_STEPS = 25
MIN_WARMUP = 5


def parse_duration(text: str, option: str = "--max_time") -> float:
    """Seconds of a duration written as ``90s``, ``45m``, ``1h30m`` or ``2.5h``."""
    s = str(text).strip().lower().replace(" ", "")
    parts = _PART.findall(s)
    if not s or "".join(n + u for n, u in parts) != s:
        raise SpanBertError(f"{option}: found {text!r}, expected a duration such as 90s, 45m, 1h30m or 2.5h")
    seconds = sum(float(n) * _SECONDS[u] for n, u in parts)
    if not seconds > 0:
        raise SpanBertError(f"{option}: found {text!r}, expected a duration above zero")
    return seconds


def format_duration(seconds: float) -> str:
    """``3725.4`` -> ``1h 02m 05s``; under an hour ``12m 05s``; under a minute ``42s``."""
    s = int(round(seconds))
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    if h:
        return f"{h}h {m:02d}m {sec:02d}s"
    return f"{m}m {sec:02d}s" if m else f"{sec}s"


@dataclass
class TimeBudget:
    """A wall-clock budget for a training run, counted from ``clock_start`` (a `time.perf_counter()`)."""

    seconds: float
    text: str
    clock_start: float = field(default_factory=time.perf_counter)

    def remaining(self) -> float:
        return self.seconds - (time.perf_counter() - self.clock_start)

    def measure_until(self, warmup_steps: int) -> int:
        """The step after which the total is fixed: the end of the warm-up, at most `MEASURE_STEPS`."""
        if warmup_steps < MIN_WARMUP:
            raise SpanBertError(
                f"--max_time: found --warmup_steps {warmup_steps}, expected at least {MIN_WARMUP}: the step "
                f"speed is measured during the warm-up, whose rates do not depend on the total"
            )
        return min(warmup_steps, MEASURE_STEPS)


def evaluations_between(done: int, total: int, eval_every: int) -> int:
    """Evaluations a run makes after step ``done`` up to step ``total``: every ``eval_every`` steps
    before the end, and one at the end (the trainer's rule); 0 without an evaluation."""
    if eval_every <= 0:
        return 1 if total > done else 0
    inside = (total - 1) // eval_every - done // eval_every  # multiples of eval_every in (done, total)
    return max(0, inside) + (1 if total > done else 0)


def total_steps(done: int, remaining: float, step_seconds: float, eval_seconds: float, eval_every: int) -> int:
    """The total steps of a run at step ``done`` with ``remaining`` seconds left: the most steps whose
    training and evaluations fit, and never fewer than ``done`` + 1 (a budget already spent ends at the
    next step)."""
    if step_seconds <= 0:
        raise ValueError("step_seconds must be positive")
    per_step = step_seconds + (eval_seconds / eval_every if eval_every > 0 else 0.0)
    n = max(1, math.floor((remaining - eval_seconds) / per_step))
    while n > 1 and n * step_seconds + evaluations_between(done, done + n, eval_every) * eval_seconds > remaining:
        n -= 1
    return done + n


__all__ = ["MEASURE_STEPS", "MIN_WARMUP", "TimeBudget", "evaluations_between", "format_duration",
           "parse_duration", "total_steps"]  # fmt: skip
