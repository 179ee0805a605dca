"""How many CPU threads torch uses: the cores that other processes leave free, measured every second,
and, for a training run, decided once at its start and kept (`decide_for_run`).

Why: torch's OpenMP threads spin while they wait for each other at the end of every parallel region.
A small model's step is hundreds of short regions, so when another process holds one of two cores,
the thread that shares that core keeps the other one spinning for most of each region: the quick
start's step fell from 45,000 to 12,500 tokens/s beside one busy process, where one thread alone
kept 31,000. Passive waiting (`OMP_WAIT_POLICY=PASSIVE`) recovers most of that but costs 25-30% on
an idle machine (tiny and base models), so the wait policy stays as it is and the thread count
follows the load instead: every second, the CPU time that processes other than this one and its
children used is read from /proc, and torch gets the cores it leaves (at least one, at most what it
started with). On an idle machine nothing changes. Measured in `bench/threads.py` (docs/benchmarks.md,
"Threads beside other work").

A training run's weights depend on its thread count: the forward pass is the same to the bit at 1 and
2 threads, but the backward's reductions over the batch's rows (the weight and bias gradients of every
LayerNorm and Linear) are split between the threads, so their sums round differently (after the quick
start's first step its gradients differ by up to 7e-5, its weights after 60 steps by up to 8.5e-3;
docs/pretraining.md, "What is bit-identical to what"). So a training run (`decide_for_run`) takes the
cores free when it starts (after a half-second look at the load when the command has not measured
longer) and keeps that count to its end, records it in its checkpoints, and a `--resume` uses the
recorded count whatever the load then: a resumed run ends bit-identical to the straight run. A run that
starts with fewer threads than idle cores would give says so before its first step, with the option that
pins the count. Commands that only run a model forward (predict, evaluate) follow the load every second.

An explicit count always wins: `OMP_NUM_THREADS` in the environment, or `--threads N` (`threads: N` in a
`--config` file), fixes it and turns the measurement off. Outside Linux (no /proc) the count stays
torch's default.

torch is imported by the functions that set or read its threads: `add_option` and the load measurement
serve parsers and plans that load no torch (every `spanbert <command> --help`).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spanbert.environment import omp_threads_setting

INTERVAL_S = 1.0
"""Seconds between two measurements of the load (a step boundary after this long re-measures)."""
MARGIN = 0.25
"""Other processes' load below this many cores is noise (daemons, a terminal): not worth a thread."""


def choose_threads(others: float, cores: int, most: int) -> int:
    """Threads for torch when other processes keep ``others`` cores busy, of ``cores`` usable ones:
    the cores they leave, with their first ``MARGIN`` of a core forgiven; at least 1, at most ``most``."""
    taken = max(0, math.ceil(others - MARGIN))
    return max(1, min(most, cores - taken))


def _busy_jiffies() -> int | None:
    """Clock ticks all CPUs spent on anything but idling since boot (/proc/stat), or None."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    # cpu user nice system idle iowait irq softirq steal [guest guest_nice: already in user and nice]
    ticks = [int(x) for x in fields[1:9]]
    return sum(ticks) - ticks[3] - ticks[4]


def _tree_jiffies(pid: int) -> int:
    """Clock ticks (user + system) used by process ``pid`` and its descendants, live or ended
    (DataLoader workers, preprocessing workers): this run's own work, which must not count as a
    neighbour's. One pass over /proc (under a millisecond for a hundred processes): not every kernel
    has the per-task `children` lists."""
    parent, ticks = {}, {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue  # the process ended in between
        # the fields after the command name, which is in parentheses and may hold spaces
        rest = stat[stat.rindex(")") + 2 :].split()
        parent[int(name)] = int(rest[1])  # ppid (field 4)
        # utime, stime (fields 14, 15) and cutime, cstime (16, 17): the children it has reaped. A worker
        # pool that ended leaves /proc with its ticks; without these, the machine's busy ticks would keep
        # them and the run's would not, and its own preprocessing would read as a neighbour's load
        ticks[int(name)] = sum(int(x) for x in rest[11:15])
    children: dict[int, list[int]] = {}
    for child, ppid in parent.items():
        children.setdefault(ppid, []).append(child)
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += ticks.get(p, 0)
        todo += children.get(p, [])
    return total


def add_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup, scope: str = "") -> None:
    """``--threads N`` for a command's parser (the command line reads it early too: `cli._threads_option`);
    ``scope`` says what it applies to when that is not the whole command (a study's cells)."""
    parser.add_argument(
        "--threads", type=_thread_count, default=0, metavar="N",
        help=f"CPU threads{scope} (default 0: the cores other processes leave free; a training run decides "
        "once at its start, keeps the count to its end and when it is resumed, since its weights depend on it; "
        "OMP_NUM_THREADS also fixes it)",
    )  # fmt: skip


def _thread_count(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"found {text!r}, expected a whole number >= 0 (0: follow the free cores)")
    return n


@dataclass
class _Policy:
    cores: int
    most: int
    last_time: float
    last_busy: int
    last_ours: int
    ticks_per_s: float


_policy: _Policy | None = None
_fixed = 0  # a count given by --threads, kept for the rest of the process (a study's cells)
_said: set[str] = set()
_run: tuple[int, str] | None = None
"""(count, why) a training run of this process decided (`decide_for_run`): kept for the process's
later runs (a study's cells, a length schedule's stages) unless one is given a count."""
_window: tuple[float, int, int] | None = None
"""(time, busy ticks of the machine, this run's ticks) where the next `others_cores` reading starts."""


_noted: set[str] = set()


def _note_once(line: str) -> None:
    """``line`` on stderr once per process, by rank 0 of a torchrun job (every rank reaches the same cap)."""
    if line in _noted or os.environ.get("RANK", "0") != "0":
        return
    _noted.add(line)
    print(line, file=sys.stderr, flush=True)


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask, e.g. under taskset or a container's cpuset)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def most_threads() -> int:
    """The most threads worth running: the cores this process may use, shared with the other processes of a
    torchrun job on this machine (LOCAL_WORLD_SIZE). More threads than cores only wait for each other: a
    tiny model's step at 999 threads on 2 cores took 22x as long as at one."""
    try:
        local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        local = 1
    return max(1, usable_cores() // local)


def configure_from(options: Mapping[str, Any]) -> str:
    """`configure` with the ``threads`` of a Python call's options (``tasks.finetune(..., threads=4)``,
    a study cell's): a count given as an int fixes it; absent or anything else, the free cores decide."""
    count = options.get("threads")
    return configure(int(count) if isinstance(count, int) and not isinstance(count, bool) else 0)


def configure(threads: int = 0) -> str:
    """Set torch's thread policy for this process and return it in words. ``threads`` > 0 fixes the
    count (``--threads``), as `OMP_NUM_THREADS` in the environment does; otherwise the count follows
    the free cores (`tick`). A count above the cores (`most_threads`) is capped at them, with a note on
    stderr (once per value, by the first process of a torchrun job). Calling it again (a study's cells)
    keeps a policy already in force unless a count is given."""
    import torch

    global _policy, _fixed
    _start_window()
    if threads > 0:
        most = most_threads()
        if threads > most:
            _note_once(
                f"note: --threads {threads}: found {most} usable core(s) for this process, expected at most that "
                f"many threads (more only wait for each other, many times slower); using {most}"
            )
            threads = most
        _policy, _fixed = None, threads
        torch.set_num_threads(threads)
        return describe()
    if omp_threads_setting():
        _policy = None
        return describe()
    if _policy is not None or _fixed:  # a study's cell: the study's choice stays
        return describe()
    busy = _busy_jiffies()
    if busy is None:
        return f"{torch.get_num_threads()} thread(s) (torch's default)"
    clk = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    _policy = _Policy(
        cores=usable_cores(),
        most=torch.get_num_threads(),
        last_time=time.monotonic(),
        last_busy=busy,
        last_ours=_tree_jiffies(os.getpid()),
        ticks_per_s=float(clk),
    )
    return describe()


def load_mark() -> tuple[float, int, int] | None:
    """(time, busy ticks of the machine, this process tree's ticks): where an `others_since` reading
    starts; None outside Linux. A measurement of its own, apart from `configure`'s window (which every
    command run in this process restarts: a study's dry run reads the load over all its probes)."""
    busy = _busy_jiffies()
    return None if busy is None else (time.monotonic(), busy, _tree_jiffies(os.getpid()))


def others_since(mark: tuple[float, int, int] | None) -> float | None:
    """Cores that processes other than this one and its children kept busy, on average, since ``mark``
    (`load_mark`); None outside Linux, or when under half a second has passed."""
    if mark is None:
        return None
    start, busy0, ours0 = mark
    dt = time.monotonic() - start
    busy = _busy_jiffies()
    if busy is None or dt < 0.5:
        return None
    ours = _tree_jiffies(os.getpid())
    clk = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    return max(0.0, (busy - busy0) - (ours - ours0)) / clk / dt


def _start_window() -> None:
    global _window
    _window = load_mark()


def others_cores() -> float | None:
    """Cores that processes other than this run kept busy, on average, since `configure` (or the last
    call); None outside Linux, or when under half a second has passed. Whatever the thread count, a
    plan measured on idle cores takes longer beside such work: the lines that promise a time say so."""
    others = others_since(_window)
    if others is not None:
        _start_window()
    return others


def sharing(others: float | None = None) -> str | None:
    """``"other processes kept about 1.4 of the 2 cores busy"``, when they used more than `MARGIN` of a
    core since the last reading (`others_cores`), or ``others`` cores when given (`others_since`); None
    on a machine this run has to itself."""
    others = others_cores() if others is None else others
    if others is None or others < MARGIN:
        return None
    cores = usable_cores()
    return f"other processes kept about {min(others, cores):.1f} of the {cores} cores busy"


def fixed_count() -> int:
    """The thread count fixed for this process (``--threads N``, or the first level of `OMP_NUM_THREADS`);
    0 while the count follows the free cores."""
    if _fixed:
        return _fixed
    setting = omp_threads_setting()
    return int(setting.split(",")[0]) if setting else 0


def describe() -> str:
    """The policy in force, in words: the line a command prints before its first step."""
    import torch

    n = torch.get_num_threads()
    count = f"{n} CPU thread{'' if n == 1 else 's'}"
    if _fixed:
        return f"{count}, fixed by --threads"
    if omp_threads_setting():
        return f"{count}, fixed by OMP_NUM_THREADS"
    if _run is not None:
        return f"{count}, {_run[1]}"
    if _policy is None:
        return count
    return f"{count}, fewer while other processes use the cores (--threads N fixes the count)"


SAMPLE_S = 0.5
"""The shortest look at the load a training run decides its thread count from."""


def decide_for_run(recorded: int | None = None, pinned: int = 0) -> tuple[int, str | None]:
    """Fix torch's thread count for a training run and return (the count, a note for stderr or None).

    ``pinned`` (``--threads N``, ``threads: N``) or `OMP_NUM_THREADS` wins; else ``recorded`` (the count a
    resumed run's checkpoint holds: its weights depend on it); else the count an earlier run of this
    process decided; else, with the load policy in force (a command's `configure`), the cores other
    processes leave free now (measured since the command started, at least `SAMPLE_S`), and otherwise
    torch's own count. Either way the per-second policy is off from here: a count that changed during a
    run would make its weights depend on the load's history. The note says when the count is below what
    idle cores give, or differs from ``recorded``, and how to pin it."""
    import torch

    global _policy, _run
    note = None
    if pinned > 0:
        configure(pinned)
        n, why = torch.get_num_threads(), "fixed by --threads"
    elif omp_threads_setting() or _fixed:
        n, why = torch.get_num_threads(), "fixed by OMP_NUM_THREADS" if omp_threads_setting() else "fixed by --threads"
    elif recorded:
        n, why = int(recorded), "the count this run started with, kept on --resume (its weights depend on it)"
        if n > usable_cores():
            note = (f"note: --resume: this run started with {n} CPU threads and keeps them for bit-identical "
                    f"weights, on {usable_cores()} usable core(s) now (slower); --threads N changes the count")
        torch.set_num_threads(n)
        _policy = None
    elif _policy is not None:
        p = _policy
        idle = p.most
        others = None
        if idle > 1:
            if time.monotonic() - (_window[0] if _window else 0.0) < SAMPLE_S:
                time.sleep(SAMPLE_S)
            others = others_since(_window)
        n = choose_threads(others or 0.0, p.cores, p.most)
        torch.set_num_threads(n)
        _policy = None
        why = "the cores free when the run started, kept to its end (--threads N fixes the count)"
        if n < idle:
            note = (f"note: {n} CPU thread{'' if n == 1 else 's'}, not the {idle} of idle cores: other processes keep "
                    f"about {min(others or 0.0, p.cores):.1f} of the {p.cores} cores busy. A run's weights depend on "
                    f"its thread count (bit-identical only at the same count): --threads {n} repeats this run, "
                    f"--threads {idle} matches a run on idle cores")  # fmt: skip
    else:  # torch's count: a Python caller's own, or what an earlier run of this process decided
        n = torch.get_num_threads()
        why = _run[1] if _run is not None and _run[0] == n else "torch's count, kept to the run's end"
    if recorded and n != int(recorded) and note is None:
        note = (f"note: --resume with {n} CPU thread(s) where the run started with {recorded}: its weights from "
                f"here on differ from the straight run's in the last bits (--threads {recorded} keeps them equal)")
    _run = (n, why)
    if note in _said:  # the command decided before the trainer: one note
        return n, None
    if note is not None:
        _said.add(note)
    return n, note


def follow_main(n: int) -> None:
    """A torchrun rank takes rank 0's decision (``n``): one count for every rank, chosen once."""
    import torch

    global _policy, _run
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    _policy = None
    _run = (n, _run[1] if _run is not None else "rank 0's count, kept to the run's end")


def run_threads() -> int | None:
    """The count `decide_for_run` fixed in this process (None: no training run decided one)."""
    return _run[0] if _run is not None else None


def tick() -> None:
    """At a step or batch boundary: after `INTERVAL_S` seconds, measure what other processes used
    since the last measurement and set torch's threads to the cores they leave. A few /proc reads,
    about once a second; nothing when the policy is off."""
    p = _policy
    if p is None:
        return
    now = time.monotonic()
    dt = now - p.last_time
    if dt < INTERVAL_S:
        return
    busy, ours = _busy_jiffies(), _tree_jiffies(os.getpid())
    if busy is None:
        return
    others = max(0.0, (busy - p.last_busy) - (ours - p.last_ours)) / p.ticks_per_s / dt
    p.last_time, p.last_busy, p.last_ours = now, busy, ours
    want = choose_threads(others, p.cores, p.most)
    import torch

    if want != torch.get_num_threads():
        torch.set_num_threads(want)


def active() -> bool:
    """Whether the thread count follows the load (no explicit count was given)."""
    return _policy is not None


def reset() -> None:
    """Forget the policy, any fixed count and a run's decision (tests)."""
    global _policy, _fixed, _run
    _policy, _fixed, _run = None, 0, None
