"""A time budget for training: how many steps fit in a wall-clock budget, planned from the run's own
speed and re-planned as that speed changes.

`spanbert pretrain --max_time 60m` trains the first warm-up steps, measures how long a step takes (and
one held-out evaluation), and plans the total number of steps so that the linear decay ends when the
budget does, counted from the command's start (data preparation included). As the run goes, the plan
is checked against the measured speed every few steps (`replan_every`): when the predicted end drifts
more than `REPLAN_TOLERANCE` of the budget away from it (other work took or left cores), the total
moves and the learning-rate schedule is bent so that it goes on from the rate it reached and still
reaches zero at the new end (`planned_lambda`). Warm-up, evaluation and checkpoint intervals that do
not fit the first plan are scaled to shares of it (`fit_plan`), with a note.

A resumed run goes on with the plans it finds in its checkpoint (the schedule up to the checkpoint is
the same function of the step) and measures its own speed from its own steps: a plan is made only from
timings of the process that measured them. A run that was never re-planned equals a run given its
total from the start (``--max_steps N --warmup_steps W``, printed at the end); the plans of one that was
are in every checkpoint's ``trainer_state.json``.

Every time here comes from `TimeBudget.clock` (`time.perf_counter` unless a test passes another), so
the arithmetic can be checked with made-up timings.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from spanbert.errors import SpanBertError

_PART = re.compile(r"(\d+(?:\.\d+)?)([hms])")
_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0}
# Steps timed before the total is first planned: after the first (allocations, caches), at most this many.
MEASURE_STEPS = 25
MIN_WARMUP = 5
MIN_MEASURED = 4
"""Steps a process times (after its first) before it plans: a resumed run's own, not its predecessor's."""
REPLANS_PER_RUN = 50
"""How often the plan is checked: every 1/50th of the planned steps (`replan_every`)."""
REPLAN_TOLERANCE = 0.01
"""The total moves when the predicted end is further than this share of the budget from it: steady
speed keeps the first plan (and so the ``--max_steps`` rerun exact), a change of load moves it."""
MAX_WARMUP_SHARE = 0.2
"""A warm-up longer than this share of the planned steps is shortened to it (`fit_plan`): 200 warm-up
steps of 298 left 98 steps at or near the peak rate."""
MIN_EVENTS = 3
"""Evaluations (and checkpoints) a plan keeps at the least, counting the one at the end: an interval
longer than a third of the planned steps is shortened to it (`fit_plan`)."""


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
    """A wall-clock budget for a training run, counted from ``clock_start`` (a reading of ``clock``).

    ``spent_before``: seconds of the budget that earlier processes of a resumed run used up to their
    checkpoint (the trainer sets it from the checkpoint); ``includes_data``: whether the budget counts
    the data preparation (`spanbert pretrain`: from the command's start), said on the lines that
    report it."""

    seconds: float
    text: str
    clock_start: float | None = None
    clock: Callable[[], float] = field(default=time.perf_counter, repr=False)
    spent_before: float = 0.0
    includes_data: bool = True
    plans: list[Plan] = field(default_factory=list)
    """The run's plans so far (the trainer keeps them here and in its checkpoints)."""

    def __post_init__(self) -> None:
        if self.clock_start is None:
            self.clock_start = self.clock()

    def elapsed(self) -> float:
        """Seconds of the budget used: this process's since ``clock_start`` and the earlier ones'."""
        return self.spent_before + self.clock() - self.clock_start

    def remaining(self) -> float:
        return self.seconds - self.elapsed()

    def measure_until(self, warmup_steps: int) -> int:
        """The step after which the total is first planned: the end of the warm-up, at most `MEASURE_STEPS`."""
        if warmup_steps < MIN_WARMUP:
            raise SpanBertError(
                f"--max_time: found --warmup_steps {warmup_steps}, expected at least {MIN_WARMUP}: the step "
                f"speed is measured during the warm-up, whose rates do not depend on the total"
            )
        return min(warmup_steps, MEASURE_STEPS)


def first_plan_step(decide_at: int, start: int, warmup: int) -> int:
    """The step after which a process that starts at step ``start`` plans for the first time: ``decide_at``,
    or later when that leaves it fewer than `MIN_MEASURED` steps of its own to time (a run killed in the
    warm-up and resumed near its end), but never after the warm-up (whose rates do not depend on the
    total)."""
    return max(start + 1, min(max(warmup, decide_at), max(decide_at, start + 1 + MIN_MEASURED)))


def evaluations_between(done: int, total: int, eval_every: int) -> int:
    """Evaluations a run makes after step ``done`` up to step ``total``: every ``eval_every`` steps
    before the end, and one at the end (the trainer's rule); 0 without an evaluation."""
    if eval_every <= 0:
        return 1 if total > done else 0
    inside = (total - 1) // eval_every - done // eval_every  # multiples of eval_every in (done, total)
    return max(0, inside) + (1 if total > done else 0)


def seconds_needed(done: int, total: int, step_seconds: float, eval_seconds: float, eval_every: int,
                   save_seconds: float = 0.0, save_every: int = 0, end_seconds: float = 0.0) -> float:  # fmt: skip
    """What steps ``done`` + 1 .. ``total`` take: the steps, the evaluations (`evaluations_between`), the
    checkpoints (every ``save_every`` steps before the end and one at the end, as the trainer writes them;
    none with 0) and ``end_seconds`` (the export after the last step)."""
    n = max(0, total - done)
    saves = evaluations_between(done, total, save_every) if save_every > 0 else 0
    return n * step_seconds + evaluations_between(done, total, eval_every) * eval_seconds + saves * save_seconds \
        + (end_seconds if n else 0.0)  # fmt: skip


def total_steps(done: int, remaining: float, step_seconds: float, eval_seconds: float, eval_every: int,
                save_seconds: float = 0.0, save_every: int = 0, end_seconds: float = 0.0) -> int:  # fmt: skip
    """The total steps of a run at step ``done`` with ``remaining`` seconds left: the most steps whose
    training, evaluations, checkpoints and end fit (`seconds_needed`), and never fewer than ``done`` + 1
    (a budget already spent ends at the next step)."""
    if step_seconds <= 0:
        raise ValueError("step_seconds must be positive")
    per_step = step_seconds + (eval_seconds / eval_every if eval_every > 0 else 0.0)
    per_step += save_seconds / save_every if save_every > 0 else 0.0
    n = max(1, math.floor((remaining - eval_seconds - save_seconds - end_seconds) / per_step))

    def fits(k: int) -> bool:
        return seconds_needed(done, done + k, step_seconds, eval_seconds, eval_every, save_seconds, save_every,
                              end_seconds) <= remaining  # fmt: skip

    while fits(n + 1):  # the estimate above counts evaluations on average: the exact count may leave room
        n += 1
    while n > 1 and not fits(n):
        n -= 1
    return done + n


def replan_every(total: int) -> int:
    """Steps between two checks of the plan (`REPLANS_PER_RUN` a run)."""
    return max(1, total // REPLANS_PER_RUN)


# ---------------------------------------------------------------------------------------------
# The plans and the schedule they make


@dataclass(frozen=True)
class Plan:
    """From step ``step`` on (0: the start), the run has ``total`` steps and warms up until ``warmup``."""

    step: int
    total: int
    warmup: int


def plans_from(rows: list[dict[str, Any]] | None, total: int, warmup: int) -> list[Plan]:
    """The plans a checkpoint recorded (``time_budget.plans``), or one plan of ``total`` and ``warmup``."""
    if not rows:
        return [Plan(0, total, warmup)]
    return [Plan(int(r["step"]), int(r["total"]), int(r["warmup"])) for r in rows]


def plan_rows(plans: list[Plan]) -> list[dict[str, int]]:
    return [asdict(p) for p in plans]


def planned_lambda(plans: list[Plan], make: Callable[[int, int], Callable[[float], float]]) -> Callable[[int], float]:
    """The learning-rate multiplier of step index t (`LambdaLR`'s) under a run's successive plans;
    ``make(total, warmup)`` is the schedule of one plan (linear, polynomial, cosine, constant).

    The first plan's schedule holds until the second plan's step s; from s on the multiplier goes on
    from the value it had at s: within the new warm-up, in a straight line to the new plan's peak at its
    warm-up's end (unchanged warm-up: the new plan's own rates, so a run re-planned during its warm-up
    equals a run given the new total from the start); after it, along the new plan's decay from the
    point where that decay has the same value, stretched or squeezed to end at the new total (for the
    linear decay: a straight line from the value at s to zero at the new end)."""
    f = make(plans[0].total, plans[0].warmup)
    prev = plans[0]
    for p in plans[1:]:
        f = _continue(f, prev, p, make(p.total, p.warmup))
        prev = p
    return f


def _continue(before: Callable[[float], float], old: Plan, new: Plan, f: Callable[[float], float]) -> Callable[[float], float]:
    s, total, warmup = new.step, new.total, new.warmup
    at_s = before(s)
    if s < warmup and warmup == old.warmup:
        def g(t: float) -> float:  # the warm-up's rates do not depend on the total
            return before(t) if t < s else f(t)
        return g
    if s < warmup:
        peak = f(warmup)

        def g(t: float) -> float:
            if t < s:
                return before(t)
            if t < warmup:
                return at_s + (peak - at_s) * (t - s) / (warmup - s)
            return f(t)
        return g
    # after the warm-up: the point v of the new decay with the value at s (decays fall: bisection)
    lo, hi = float(warmup), float(max(total, warmup))
    if f(lo) <= at_s:
        v = lo
    else:
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if f(mid) > at_s else (lo, mid)
        v = hi
    span = max(1e-9, total - s)

    def g(t: float) -> float:
        if t < s:
            return before(t)
        if t >= total:
            return f(total)
        return f(v + (t - s) * (total - v) / span)
    return g


# ---------------------------------------------------------------------------------------------
# The first plan's shares: warm-up and intervals


@dataclass(frozen=True)
class Fit:
    """What a plan of ``total`` steps keeps of the user's warm-up and intervals, and the notes that say
    what changed."""

    warmup: int
    eval_steps: int
    save_steps: int
    notes: tuple[str, ...] = ()


def fit_plan(total: int, step: int, warmup: int, eval_steps: int, save_steps: int) -> Fit:
    """The warm-up and intervals of a first plan of ``total`` steps made after ``step``: a warm-up of more
    than `MAX_WARMUP_SHARE` of the total is shortened to that share (never to end before the next step;
    the rate goes on from where it is, `planned_lambda`); an evaluation or checkpoint interval that
    leaves fewer than `MIN_EVENTS` of them (the end's included) is shortened to a third of the total,
    when at least that many steps are left. 0 (no evaluation before the end, no checkpoint) is kept."""
    notes = []
    most = max(step + 1, math.floor(MAX_WARMUP_SHARE * total))
    new_warmup = warmup
    if warmup > step and warmup > most:
        new_warmup = most
        until = (f"warming up over {new_warmup} instead (at most {MAX_WARMUP_SHARE:.0%} of them)" if new_warmup > step + 1
                 else f"the warm-up ends at the next step instead ({MAX_WARMUP_SHARE:.0%} of them have passed)")  # fmt: skip
        notes.append(
            f"--warmup_steps {warmup} is {warmup / total:.0%} of the {total:,} planned steps: {until}, from the rate "
            f"of step {step} on"
        )
    share = math.ceil(total / MIN_EVENTS)
    fitted = []
    for flag, every, what in (("--eval_steps", eval_steps, "evaluation"), ("--save_steps", save_steps, "checkpoint")):
        if every > share and total - step >= MIN_EVENTS:  # (a budget spent already ends at the next step)
            notes.append(
                f"{flag} {every} leaves {evaluations_between(0, total, every)} {what}(s) in the {total:,} planned "
                f"steps: every {share} steps instead (at least {MIN_EVENTS}, the end's included)"
            )
            every = share
        fitted.append(every)
    return Fit(new_warmup, fitted[0], fitted[1], tuple(notes))


# ---------------------------------------------------------------------------------------------
# The speed of this process


@dataclass
class Pace:
    """The step times this process measured (after its first step, which pays for start-up), without
    the evaluations and checkpoints between them (timed apart), and what one of those costs."""

    clock: Callable[[], float]
    started: float = 0.0
    """When this process's training began (a reading of ``clock``)."""
    last_end: float | None = None
    """When the last step ended (None: this process ran no step yet)."""
    pending: float = 0.0
    """Seconds of evaluations and checkpoints since the last step ended."""
    steps: list[float] = field(default_factory=list)
    """Each timed step's seconds, in order."""
    first_step: int = 0
    """The step this process ran first (its time is not in ``steps``)."""
    eval_s: float = 0.0
    save_s: float = 0.0

    def step_done(self, step: int) -> None:
        now = self.clock()
        if self.last_end is None:
            self.first_step = step
        else:
            self.steps.append(max(0.0, now - self.last_end - self.pending))
        self.last_end, self.pending = now, 0.0

    def overhead(self, kind: str, seconds: float) -> None:
        """An evaluation or a checkpoint took ``seconds``: not a step's time; its cost is the latest one."""
        self.pending += seconds
        if kind == "eval":
            self.eval_s = seconds
        elif kind == "save":
            self.save_s = max(self.save_s, seconds)

    def step_seconds(self, ahead: int) -> float | None:
        """The mean of the last steps, as many as the ``ahead`` steps still to come (at least
        `MIN_MEASURED`, at most what was timed): far from the end a long average, near it the latest
        speed. None before anything was timed."""
        if not self.steps:
            return None
        n = min(len(self.steps), max(MIN_MEASURED, ahead))
        return sum(self.steps[-n:]) / n


__all__ = ["MEASURE_STEPS", "MIN_WARMUP", "Fit", "Pace", "Plan", "TimeBudget", "evaluations_between", "first_plan_step",
           "fit_plan", "format_duration", "parse_duration", "planned_lambda", "plan_rows", "plans_from",
           "replan_every", "seconds_needed", "total_steps"]  # fmt: skip
