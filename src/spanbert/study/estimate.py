"""What a study costs before it runs (`--dry-run`, and the warning or refusal before the cells run): the
plan, then an estimate of every stage (the shared data, each system's pre-training, each task's
fine-tuning, the total) from short measured runs of the study's own commands (`spanbert.study.trials`,
in a temporary folder), or, without trials, an estimate of the fine-tuning cells from their FLOPs.

The arithmetic is here, apart from the measurements, so that it can be checked with made-up timings:
a stage's time is its fixed part (start-up, evaluations, saves, held-out scoring) plus its size (steps,
examples, bytes of text) times a measured cost per unit.

How sure an estimate is: the pre-training trials run in rounds that take the systems in turn
(`spanbert.study.trials.TRIAL_ROUNDS`), so every system is timed beside the same load; a stage's figure
is its median round, its range the fastest and the slowest round (the slow end `LONG_RUN_ALLOWANCE`
longer), and the stages timed once (data, fine-tuning) take the same relative spread. The load beside
the trials is reported with the range, and `--time_limit` fits the study to the pessimistic end."""

from __future__ import annotations

import json
import math
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from spanbert import cost, distributed, threads
from spanbert.config import MODEL_PRESETS
from spanbert.errors import SpanBertError
from spanbert.pretrain_config import PRETRAIN_DEFAULTS, PretrainConfig
from spanbert.study.cells import is_done, plan
from spanbert.study.heldout import heldout_plan, study_is_legacy
from spanbert.study.spec import Study, StudyTask
from spanbert.study.trials import (
    TRIAL_ROUNDS,
    DataTimings,
    FinetuneTimings,
    PretrainTimings,
    megabytes,
    thread_speedup,
    trial_corpus,
    trial_finetuning,
    trial_pretraining,
)
from spanbert.tasks import TASKS
from spanbert.tasks.splits import HELDOUT_SEED
from spanbert.threads import MARGIN, load_mark, others_since, sharing, usable_cores
from spanbert.utils import atomic_write


def plan_lines(study: Study) -> list[str]:
    """The plan in words: cells, tokens and steps, what each task's held-out score is."""
    cells = plan(study)
    pre = [c for c in cells if c.kind == "pretrain"]
    fine = [c for c in cells if c.kind == "finetune"]
    done = sum(is_done(c) for c in cells)
    lines = [
        f"study: {len(study.systems)} systems × {len(study.tasks)} tasks; {len(cells)} cells ({done} finished)",
        f"pre-training: {len(pre)} cells, {study.budget_tokens:,} tokens each = {study.pretrain_steps:,} steps of "
        f"{study.batch_size} × {study.max_seq_length} tokens ({study.model} model)",
        f"fine-tuning: {len(fine)} cells ({', '.join(f'{t.name}: {len(t.learning_rates)} lr × {study.seeds} seeds' for t in study.tasks)})",
    ]
    for t in study.tasks:
        h = None if study_is_legacy(study) else heldout_plan(study, t, t.folds[0] if t.folds else None)
        what = {"test": f"its test split ({h.heldout})" if h and h.source == "test" else "",
                "dev half": f"the held-out half of its dev set (seed {HELDOUT_SEED}); cells select on the other half"}
        lines.append(f"held-out {t.name}: " + (what[h.source] if h else "none (cells finished before held-out scoring, "
                     "or no test file and a dev set that is not split)"))  # fmt: skip
    return lines


def dry_run(study: Study, trial_steps: int = 0, save: str | Path | None = None,
            time_limit: tuple[float, str] | None = None, rounds: int = TRIAL_ROUNDS) -> str:
    """The plan with its cost: with ``trial_steps`` > 0 an estimate of every stage measured on this machine
    (`measure`, ``rounds`` rounds of pre-training trials), checked against ``time_limit`` (seconds, as
    written) when given (`fit_lines`), else the fine-tuning cells' FLOPs; then every cell. ``save``: also
    write the estimate there as JSON (`--estimate FILE`), for the summary to set beside the measured times."""
    cells = plan(study)
    lines = plan_lines(study)
    fine = [c for c in cells if c.kind == "finetune"]
    if trial_steps > 0:
        estimate = measure(study, trial_steps, rounds)
        lines += estimate.lines()
        if time_limit:
            lines += fit_lines(estimate, study, *time_limit)
        if save:
            with atomic_write(save) as f:
                f.write(json.dumps(estimate.as_json(), indent=2) + "\n")
    elif fine:
        line, large = finetune_estimate(study)
        lines.append(("warning: this study's fine-tuning is very large for this machine; " if large else "") + line)
    for c in cells:
        lines.append(f"  {'[done] ' if is_done(c) else ''}{c.label}: {c.dir}")
    return "\n".join(lines)


@dataclass
class StageEstimate:
    """The estimated wall time of one stage, and how it was reckoned."""

    stage: str
    """"data", "pre-training SYSTEM", "fine-tuning TASK": the names the summary's stage table uses."""
    seconds: float
    how: str
    cells: int = 1
    per_cell: float | None = None
    low: float | None = None
    """The fastest round's figure (None: ``seconds``)."""
    high: float | None = None
    """The slowest round's figure (None: ``seconds``)."""

    def at(self, end: str) -> float:
        """The figure at ``end``: "low", "median" (``seconds``) or "high"."""
        value = {"low": self.low, "high": self.high}.get(end)
        return self.seconds if value is None else value


ENDS = ("low", "median", "high")

LONG_RUN_ALLOWANCE = 0.10
"""The slow end of a study's range is its slowest round's figure this much longer: the trials see a few
minutes of the machine, a study hours of it, and the hours ran slower. On the 2-core AMD VM, on quiet
cores, a whole cpu-preset study took 1.10x its dry run's middle figure and one of its pre-training cells
1.12x (2026-12-02), while the rounds beside each other spread by 3-7%; a second quiet dry run (2026-12-03)
put its slowest round 7% under the same measured total (docs/study.md, "The dry run's estimate")."""


@dataclass
class Estimate:
    stages: list[StageEstimate]
    trial_s: float
    """What the dry run's trials took."""
    corpus: str
    """The text the pre-training trials ran on, in words."""
    load: str
    """What else used the cores during the trials, in words."""
    others: float | None = None
    pretrain: list[tuple[PretrainTimings, list[str]]] = field(default_factory=list)
    """Each pre-training trial with its cell's command: the pre-training stages at another step count
    (`total_at`)."""
    pretrain_runs: int = 1
    """Pre-training cells per system (the study's pre-training seeds): each stage above is that many runs."""
    spread: tuple[float, float] = (1.0, 1.0)
    """The rounds' fastest and slowest step time over their median, the widest of any system: the range
    of the stages timed once (`spread_of`)."""
    rounds: int = 1
    others_range: tuple[float, float] | None = None
    """The least and the most cores other processes kept busy during one round's trial."""
    fixed_threads: int = 0
    """The thread count the trials ran at when it was fixed (``--threads``, `OMP_NUM_THREADS`); 0: it
    followed the free cores."""

    @property
    def total(self) -> float:
        return sum(s.seconds for s in self.stages)

    @property
    def low(self) -> float:
        return sum(s.at("low") for s in self.stages)

    @property
    def high(self) -> float:
        """The pessimistic end: every stage at its slowest round, and `LONG_RUN_ALLOWANCE` on top (`fit_lines`
        fits to it)."""
        return sum(s.at("high") for s in self.stages) * (1 + LONG_RUN_ALLOWANCE)

    def total_at(self, steps: int, end: str = "median") -> float:
        """The total with every pre-training cell at ``steps`` steps and every other stage as estimated, at
        ``end`` of the range ("low", "median", "high": with `LONG_RUN_ALLOWANCE`)."""
        at = [pretrain_estimate(p, steps, argv, self.pretrain_runs) for p, argv in self.pretrain]
        replaced = {s.stage for s in at}
        total = sum(s.at(end) for s in self.stages if s.stage not in replaced) + sum(s.at(end) for s in at)
        return total * (1 + LONG_RUN_ALLOWANCE) if end == "high" else total

    def lines(self) -> list[str]:
        rounds = f"{self.rounds} rounds of pre-training trials, " if self.rounds > 1 else ""
        out = [f"estimate per stage, measured on this machine (trials: {rounds}{_human(self.trial_s)}"
               + (f", pre-training on {self.corpus}" if self.corpus else "") + f"; {self.load}):"]
        out += [f"  {s.stage}: {_human(s.seconds)}{_range(s.at('low'), s.at('high'))} ({s.how})" for s in self.stages]
        beside = ""
        if self.others_range is not None:
            lo, hi = self.others_range
            beside = (f"; other processes kept {lo:.1f}-{hi:.1f} of the {usable_cores()} cores busy during the "
                      f"rounds: beside more load than that, longer")  # fmt: skip
        how = ("the fastest and the slowest round; the stages timed once take the same relative spread"
               if self.rounds > 1 else "one round of trials: no spread measured")  # fmt: skip
        how += f"; the slow end {LONG_RUN_ALLOWANCE:.0%} longer: hours of a machine run slower than minutes of it"
        projected = [p for p, _ in self.pretrain if p.idle_step_range]
        if projected:
            p = projected[0]
            lo, hi = thread_speedup(p.threads, p.idle_threads)
            how = (f"{how}; the low end is idle cores, projected from trials that the load held to {p.threads} "
                   f"thread(s): {p.idle_threads} threads run {lo:.2f}-{hi:.2f}x as fast (bench/threads.py)")
        out.append(f"  total: {_human(self.total)}, range {_human(self.low)} to {_human(self.high)} ({how}{beside})")
        crowded = crowded_threads(self.fixed_threads, self.others_range)
        if crowded:
            out.append(f"warning: {crowded}")
        return out

    def as_json(self) -> dict[str, Any]:
        return {"stages": {s.stage: s.seconds for s in self.stages}, "total": self.total,
                "low": self.low, "high": self.high,
                "per_cell": {s.stage: s.per_cell for s in self.stages if s.per_cell is not None},
                "details": [asdict(s) for s in self.stages], "trial_seconds": self.trial_s, "corpus": self.corpus,
                "load": self.load, "other_cores": self.others, "rounds": self.rounds,
                "other_cores_range": list(self.others_range) if self.others_range else None}  # fmt: skip


def crowded_threads(fixed: int, others_range: tuple[float, float] | None, cores: int | None = None) -> str:
    """What to say when the trials ran a fixed thread count on cores that other processes shared (more
    threads than the cores they left, `threads.MARGIN` forgiven), or "". Such threads wait for each other
    at every parallel region, so the slowdown is many times the share of the cores lost and no estimate
    of idle cores can be read off it: two 2-thread processes side by side on 2 cores took 12.85 s a
    pre-training step against 0.64-0.95 s alone (13-20x, where sharing the cores would make it 2x; 2-core
    Intel Xeon VM, 2026-12-02, docs/results.md, study v3)."""
    if not fixed or others_range is None:
        return ""
    cores = cores or usable_cores()
    most = others_range[1]
    if fixed + most <= cores + MARGIN:
        return ""
    return (f"the trials ran {fixed} fixed thread(s) while other processes kept up to {most:.1f} of the {cores} "
            f"cores busy: fixed threads beside other work wait for each other at every step, many times "
            f"slower than the cores lost (13-20x for 2 threads beside two busy processes on 2 cores), so this "
            f"estimate holds only beside the same load and says nothing of idle cores; take the dry run on idle "
            f"cores, or run the dry run and the study without --threads (the count then follows the free cores)")


def _range(low: float, high: float) -> str:
    return "" if math.isclose(low, high, rel_tol=1e-3) else f", {_human(low)} to {_human(high)}"


def spread_of(pretrain: list[PretrainTimings]) -> tuple[float, float]:
    """(fastest round / median, slowest round / median), the widest over the trained systems: how far the
    load moved a step time between rounds taken beside each other; (1, 1) with one round or none."""
    lo, hi = 1.0, 1.0
    for p in pretrain:
        if p.random_init or not p.step_s:
            continue
        fast, slow = p.step_range
        lo, hi = min(lo, fast / p.step_s), max(hi, slow / p.step_s)
    return lo, hi


def with_spread(stage: StageEstimate, spread: tuple[float, float]) -> StageEstimate:
    """A stage timed once, its range the pre-training rounds' relative spread."""
    return replace(stage, low=stage.seconds * spread[0], high=stage.seconds * spread[1])


def measure(study: Study, trial_steps: int, rounds: int = TRIAL_ROUNDS) -> Estimate:
    """Every stage's estimate from trials run here, in a temporary folder (the study's folder is left as
    it was): the data (`trial_corpus`), each system's pre-training (`trial_pretraining`, ``rounds`` rounds
    taking the systems in turn), each task's fine-tuning (`trial_finetuning`); with what else used the
    cores meanwhile, since a real run beside another load takes as much longer, and the range the rounds
    give (`spread_of`)."""
    if distributed.world_size() > 1:
        raise SpanBertError("--dry-run: found several processes (torchrun), expected one: the trials time this "
                            "machine from one process (or pass --trial_steps 0)")  # fmt: skip
    mark = load_mark()
    t0 = time.perf_counter()
    stages: list[StageEstimate] = []
    pretrain: list[tuple[PretrainTimings, list[str]]] = []
    what = ""
    trained = [s for s in study.systems if not s.checkpoint]
    with tempfile.TemporaryDirectory(prefix="spanbert-dry-run-") as folder:
        tmp = Path(folder)
        tmp_study = replace(study, output_dir=str(tmp / "study"))
        if trained:
            corpus = trial_corpus(study, tmp)
            what = corpus.what
            stages.append(data_estimate(corpus.data) if corpus.data else StageEstimate("data", 0.0, corpus.why))
            pre = trial_pretraining(study, tmp_study, corpus.path, trial_steps, tmp, rounds)
            argv = {c.system: c.argv for c in plan(study) if c.kind == "pretrain" and not c.pretrain_seed}
            stages += [pretrain_estimate(p, study.pretrain_steps, argv[p.system], study.pretrain_seeds) for p in pre]
            pretrain = [(p, argv[p.system]) for p in pre]
        fine = trial_finetuning(study, tmp_study, tmp)
    cells = _finetune_cells(study)
    extractions = feature_extractions(study)
    for t in study.tasks:
        if t.name in fine and fine[t.name].warm_s is not None:
            stages.append(cached_task_estimate(fine[t.name], t, cells[t.name], extractions[t.name]))
        elif t.name in fine:
            stages.append(finetune_task_estimate(fine[t.name], t, cells[t.name]))
        else:
            seconds = flop_seconds(study, t)
            stages.append(StageEstimate(f"fine-tuning {t.name}", seconds * cells[t.name],
                                        f"{_n(cells[t.name], 'cell')} × {_human(seconds)} from FLOPs: not timed, set "
                                        "max_train_examples or max_steps in its options to have it measured",
                                        cells[t.name], seconds))  # fmt: skip
    trial_s = time.perf_counter() - t0
    others = others_since(mark)
    shared = sharing(others) if others is not None else None
    if others is None:
        load = "what else used the cores is not known here (no /proc): a run beside other work takes longer"
    elif shared:
        load = f"{shared}: a run beside the same load takes about this long"
    else:
        load = "the other processes left the cores idle: a run beside other work takes longer"
    spread = spread_of([p for p, _ in pretrain])
    timed = {f"pre-training {p.system}" for p, _ in pretrain}
    stages = [s if s.stage in timed else with_spread(s, spread) for s in stages]
    seen = [x for p, _ in pretrain for x in p.others if x is not None]
    others_range = (min(seen), max(seen)) if seen else None
    return Estimate(stages, trial_s, what, load, others, pretrain, study.pretrain_seeds, spread, max(1, rounds),
                    others_range, threads.fixed_count())  # fmt: skip


FIT_MARGIN = 0.10
"""`--time_limit`: the share of the limit a plan keeps free. The same plan ran 1.21 and 0.99 times the
estimates of two dry runs on two evenings of the 2-core VM (docs/results.md, study v2); the dry run
right before a study is the one to trust, and this margin is for what moves within an evening."""


def fit_lines(estimate: Estimate, study: Study, limit_s: float, limit: str) -> list[str]:
    """`--time_limit`: whether the estimate fits ``limit_s`` with `FIT_MARGIN` of it to spare; if not, the
    largest pre-training budget that does (every pre-training cell at that step count, the other stages as
    estimated), as the ``--budget_tokens`` to run it with."""
    target = limit_s * (1 - FIT_MARGIN)
    total = estimate.high  # the pessimistic end of the range: a limit is a promise
    shown = _human(total) if math.isclose(total, estimate.total) else f"{_human(total)} at the slow end of its range"
    head = f"time limit {limit}: the estimate ({shown}) "
    if total <= target:
        return [head + f"fits it, {_human(limit_s - total)} to spare"]
    if total > limit_s:
        head += f"is {_human(total - limit_s)} over it"
    else:
        head += f"keeps less than {FIT_MARGIN:.0%} of it free ({_human(limit_s - total)})"
    smaller = "make the fine-tuning smaller (fewer tasks, seeds or learning rates, max_train_examples) or raise --time_limit"
    trained = [(p, argv) for p, argv in estimate.pretrain if not p.random_init]
    if not trained:
        return [head + f"; there is no pre-training to shorten: {smaller}"]
    lo, hi = 0, study.pretrain_steps
    while lo < hi:  # the largest step count that fits (the total grows with the steps)
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if estimate.total_at(mid, "high") <= target else (lo, mid - 1)
    warmup = max(_argv_int(argv, "warmup_steps", 0) for _, argv in trained)
    if lo <= warmup:
        return [head + f"; no pre-training longer than its {warmup} warm-up steps fits (every stage but the "
                f"pre-training steps takes {_human(estimate.total_at(0, 'high'))}): {smaller}"]
    tokens = lo * study.batch_size * study.max_seq_length
    return [head + f"; {lo:,} pre-training steps instead of {study.pretrain_steps:,} fit it with "
            f"{FIT_MARGIN:.0%} to spare (estimated total {_human(estimate.total_at(lo, 'high'))} at the slow end): run "
            "the study with "
            f"--budget_tokens {tokens}"]


def _finetune_cells(study: Study) -> dict[str, int]:
    cells = {t.name: 0 for t in study.tasks}
    for c in plan(study):
        if c.kind == "finetune":
            cells[c.task] += 1
    return cells


# ---------------------------------------------------------------------------------------------
# the arithmetic: measured timings -> a stage's time


def distinct_words(words: int, half_words: int, size: float, sample: float, half: float) -> float:
    """Distinct words in ``size`` bytes of text, from ``words`` in ``sample`` bytes and ``half_words`` in
    ``half`` bytes: Heaps' law (distinct words grow as the text's size to a power below 1), the power from
    the two samples."""
    if half_words <= 0 or words <= half_words or sample <= half:
        return words * size / sample if sample else 0.0  # no growth measured: in proportion (errs long)
    power = min(1.0, math.log(words / half_words) / math.log(sample / half))
    return words * (size / sample) ** power


def data_estimate(d: DataTimings) -> StageEstimate:
    """The shared data stage: vocabulary training and preprocessing of the whole corpus. Counting words and
    preprocessing grow with the text; learning the vocabulary grows with the distinct words (measured: 44
    µs a distinct word at 20,000, 31,000 and 70,000 of them), which grow more slowly (`distinct_words`);
    preprocessing in proportion to the whole sample's time: the trial runs it in this process, so it has
    no start-up to separate, and a line through two samples of 1 and 2 MB put a third of their time in a
    fixed part and the rest at 0.04 s a MB (the whole corpus then took 45 s, not the 10 s that line gave:
    0.17 s a MB, the whole sample's own rate)."""
    scale = d.corpus_bytes / d.sample_bytes
    words = distinct_words(d.words, d.half_words, d.corpus_bytes, d.sample_bytes, d.half_bytes)
    learn = max(0.0, d.tokenizer_s - d.count_s)
    vocab = 0.0 if d.tokenizer_s == 0 else d.count_s * scale + learn * words / d.words
    per_byte = d.preprocess_s / d.sample_bytes if d.sample_bytes else 0.0
    pre = per_byte * d.corpus_bytes
    vocab_how = (f"vocabulary {_human(vocab)}: words counted in {d.count_s:.2f} s × {scale:,.0f}, learned in "
                 f"{learn:.2f} s × {words / d.words:.1f} for ~{words:,.0f} distinct words" if d.tokenizer_s
                 else "the study's tokenizer: no vocabulary to train")  # fmt: skip
    how = (f"{megabytes(d.corpus_bytes)} of text, {scale:,.0f}× the {megabytes(d.sample_bytes)} sample; "
           f"{vocab_how}; preprocessing {_human(pre)}: {per_byte * 1e6:.2f} s a MB")
    return StageEstimate("data", vocab + pre, how)


def _n(count: float, noun: str) -> str:
    """``count`` and ``noun`` in the plural where it is not 1: "1 evaluation", "10 evaluations"."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def _argv_int(argv: list[str], key: str, default: int) -> int:
    flag = f"--{key}"
    return int(float(argv[argv.index(flag) + 1])) if flag in argv else int(default)


def evaluations(steps: float, every: int) -> int:
    """Evaluations of a run of ``steps`` steps evaluated every ``every`` (0: only at the end): the trainer's
    every ``every``-th step before the last, and one at the end."""
    steps = max(1, math.ceil(steps))
    return (steps - 1) // every + 1 if every > 0 else 1


def pretrain_estimate(p: PretrainTimings, steps: int, argv: list[str], runs: int = 1) -> StageEstimate:
    """A system's pre-training: ``runs`` cells (its pre-training seeds), each its steps at the trial's step
    time, its evaluations (``--eval_steps``, of ``--max_eval_blocks`` blocks: the trial's evaluation scaled
    by blocks), its checkpoints (``--save_steps``), and the trial's start-up and export (what the trial took
    beyond its steps, evaluation and checkpoint). A random-init row: its export, as measured. With several
    rounds of trials, its range: the steps at the fastest and the slowest round's step time, the rest in
    the same proportion (`StageEstimate.low`, ``high``)."""
    one = _one_pretrain_estimate(p, steps, argv)
    if runs == 1:
        return one
    return StageEstimate(one.stage, runs * one.seconds, f"{runs} pre-training seeds × ({one.how})", runs, one.seconds,
                         low=runs * one.at("low"), high=runs * one.at("high"))  # fmt: skip


def _one_pretrain_estimate(p: PretrainTimings, steps: int, argv: list[str]) -> StageEstimate:
    name = f"pre-training {p.system}"
    if p.random_init:
        return StageEstimate(name, p.wall_s, "no training: --random_init exports the initial model, as measured")
    blocks = _argv_int(argv, "max_eval_blocks", PretrainConfig.max_eval_blocks)
    every = _argv_int(argv, "eval_steps", PRETRAIN_DEFAULTS["eval_steps"])
    save_every = _argv_int(argv, "save_steps", PRETRAIN_DEFAULTS["save_steps"])
    n_evals = evaluations(steps, every) if blocks > 0 else 0
    n_saves = (steps - 1) // save_every + 1 if save_every > 0 else 0
    eval_s = p.eval_s * blocks / p.eval_blocks if p.eval_s is not None and p.eval_blocks > 0 else 0.0
    fixed = max(0.0, p.wall_s - p.steps * p.step_s - (p.eval_s or 0.0) - p.save_s)
    seconds = fixed + steps * p.step_s + n_evals * eval_s + n_saves * p.save_s
    fast, slow = p.step_range
    scale = (fast / p.step_s, slow / p.step_s) if p.step_s else (1.0, 1.0)
    # the rounds' spread: the steps at each end's step time, the rest (timed once) in the same proportion
    low = steps * fast + (seconds - steps * p.step_s) * scale[0]
    high = steps * slow + (seconds - steps * p.step_s) * scale[1]
    evals = (f"{_n(n_evals, 'evaluation')} × {eval_s:.1f} s" if p.eval_s is not None or not n_evals
             else f"{_n(n_evals, 'evaluation')} not measured (the trial's sample held out no document)")  # fmt: skip
    measured = p.round_step_s or [p.step_s]
    rounds = (f" (median of {len(measured)} rounds, {min(measured):.2f}-{max(measured):.2f} s)"
              if len(measured) > 1 else "")  # fmt: skip
    idle = p.idle_step_range
    if idle:
        rounds += (f" (on idle cores {idle[0]:.2f}-{idle[1]:.2f} s: the trials ran {p.threads} thread(s) beside the "
                   f"load, idle cores give {p.idle_threads})")  # fmt: skip
    how = (f"{_n(steps, 'step')} × {p.step_s:.2f} s{rounds} + {evals} + {_n(n_saves, 'checkpoint')} × {p.save_s:.1f} s "
           f"+ start-up and export {fixed:.0f} s")
    return StageEstimate(name, seconds, how, low=low, high=high)


def cached_task_estimate(f: FinetuneTimings, t: StudyTask, cells: int, extractions: int) -> StageEstimate:
    """A task whose cells share a features cache: every cell at the warm trial's time (features read), plus
    ``extractions`` times what the cold trial took beyond it (the features of one encoder and data set
    computed: once per encoder, shared with every other rate, seed and row on the same data)."""
    warm, extra = f.warm_s or 0.0, max(0.0, (f.cold_s or 0.0) - (f.warm_s or 0.0))
    seconds = cells * warm + extractions * extra + f.prepare_s
    how = (f"{_n(cells, 'cell')} × {warm:.0f} s (features read) + {_n(extractions, 'encoder')} × {extra:.0f} s "
           f"computing the features; timed whole, cache cold then warm, with {f.model}'s architecture")
    return StageEstimate(f"fine-tuning {t.name}", seconds, how, cells, seconds / max(1, cells))


def feature_extractions(study: Study) -> dict[str, int]:
    """Per task with a features cache: how many encoders compute its features, counted on the first task of
    each data set (the layer-0 row of a probe reads the features of its all-layer row) and 0 on the others."""
    seen: dict[tuple, set[str]] = {}
    out: dict[str, int] = {}
    cells = [c for c in plan(study) if c.kind == "finetune"]
    for t in study.tasks:
        if not TASKS[t.task].cache_option:
            continue
        key = (t.task, t.subtask, t.train, t.dev, t.test)
        first = key not in seen
        models = {str(c.options.get("model")) for c in cells if c.task == t.name and not c.pending}
        models |= {f"{c.system}/{c.pretrain_seed}" for c in cells if c.task == t.name and c.pending}
        out[t.name] = len(models - seen.get(key, set())) if first else 0
        seen.setdefault(key, set()).update(models)
    return out


def finetune_task_estimate(f: FinetuneTimings, t: StudyTask, cells: int) -> StageEstimate:
    """A task's cells: each its fixed part (what the trial run took beyond its steps and evaluations:
    start-up, reading and featurizing, the selected model written), its steps at the trial's step time (a
    cell's steps: ``max_steps``, or the trial's steps, in full steps, scaled by the examples), its dev
    evaluations at the trial's time each (``eval_steps`` when the task names it, ``evals_per_epoch`` x
    ``num_train_epochs`` when it names those, else as many as the trial made), and the held-out scoring
    after it; times the cells, plus the task's shared files once."""
    full = f.full_steps or f.steps
    fixed = max(0.0, f.wall_s - full * f.step_s - sum(f.eval_s))
    steps = f.size if f.unit == "steps" else math.ceil(full * f.size / max(1, f.trial_size))
    eval_s = statistics.mean(f.eval_s) if f.eval_s else 0.0
    every = int(t.options.get("eval_steps") or 0)
    if every and f.eval_s:
        n_evals = evaluations(steps, every)
    elif f.one_eval_per_epoch:
        n_evals = int(t.options["evals_per_epoch"]) * math.ceil(float(t.options["num_train_epochs"]))
    else:
        n_evals = len(f.eval_s)
    cell = fixed + steps * f.step_s + n_evals * eval_s + f.heldout_s
    how = (f"{_n(cells, 'cell')} × {_human(cell)}: start-up {fixed:.0f} s + {_n(round(steps), 'step')} × "
           f"{f.step_s:.2f} s + {_n(n_evals, 'evaluation')} × {eval_s:.1f} s + held-out scoring {f.heldout_s:.0f} s; "
           f"timed on {f.trial_size:,} {f.unit}" + (f" ({_n(f.steps, 'step')})" if f.unit != "steps" else "")
           + f" with {f.model}'s architecture"
           + (f"; shared files {f.prepare_s:.0f} s once" if f.prepare_s >= 0.5 else ""))  # fmt: skip
    return StageEstimate(f"fine-tuning {t.name}", cell * cells + f.prepare_s, how, cells, cell)


_human = cost.human_duration


# Fine-tuning epochs assumed for a task whose options name none (most tasks' defaults are 2 to 4).
ASSUMED_EPOCHS = 3


# Characters of a training file per token, for a file whose examples are not counted (English text
# in WordPiece: about 4; JSON keys and markup make this an overestimate of the tokens, on purpose).
CHARS_PER_TOKEN = 4


def flop_seconds(study: Study, t: StudyTask, device_type: str | None = None, threads: int | None = None) -> float:
    """One fine-tuning cell of ``t`` from its FLOPs. Tokens: ``max_train_examples`` x ``max_seq_length``
    when the task's options bound the examples, else the training file's size / `CHARS_PER_TOKEN`; times
    its ``num_train_epochs`` (`ASSUMED_EPOCHS` when unnamed); through the encoder of the study's model size
    (`cost.encoder_params`), on this machine (`cost.machine_flops`). A span probe trains no encoder: one
    forward pass over its training text (`cost.evaluation_flops`). Reads file sizes only."""
    device_type = device_type or ("cuda" if torch.cuda.is_available() else "cpu")
    threads = threads or torch.get_num_threads()
    size = MODEL_PRESETS.get(study.model, MODEL_PRESETS["base"])
    params = cost.encoder_params(size["hidden_size"], size["num_hidden_layers"], size.get("intermediate_size"))
    epochs = float(t.options.get("num_train_epochs", ASSUMED_EPOCHS))
    if "max_train_examples" in t.options:
        per_epoch = int(t.options["max_train_examples"]) * int(t.options.get("max_seq_length", study.max_seq_length))
    else:
        path = Path(t.train)
        files = [f for f in path.rglob("*") if f.is_file()] if path.is_dir() else [path] if path.is_file() else []
        per_epoch = sum(f.stat().st_size for f in files) // CHARS_PER_TOKEN
    if TASKS[t.task].cache_option:  # a frozen encoder's cached features: one forward pass over the training text, not epochs of training
        return cost.evaluation_flops(params, per_epoch) / cost.machine_flops(device_type, threads)
    return cost.training_flops(params, per_epoch * epochs) / cost.machine_flops(device_type, threads)


def finetune_estimate(
    study: Study, device_type: str | None = None, threads: int | None = None, over: float = cost.LONG_PLAN_SECONDS
) -> tuple[str, bool]:
    """(a line estimating every fine-tuning cell's cost from its FLOPs (`flop_seconds`), whether it exceeds
    ``over`` seconds: a day, or `cost.LONG_RUN_SECONDS` for the refusal of a week). Reads file sizes only:
    what a real run checks before its first cell, and a dry run without trials prints."""
    device_type = device_type or ("cuda" if torch.cuda.is_available() else "cpu")
    cells = _finetune_cells(study)
    total_seconds, parts = 0.0, []
    for t in study.tasks:
        seconds = flop_seconds(study, t, device_type, threads)
        total_seconds += seconds * cells[t.name]
        parts.append(f"{t.name}: {cells[t.name]} × {_human(seconds)}")
    line = (
        f"fine-tuning estimate: {_human(total_seconds)} for all {sum(cells.values())} cells on {device_type} "
        f"({'; '.join(parts)}; {study.model} encoder, {ASSUMED_EPOCHS} epochs where none is named, a training "
        f"file's characters / {CHARS_PER_TOKEN} as its tokens where max_train_examples is not set)"
    )
    return line, total_seconds > over
