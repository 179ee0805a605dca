"""The measurements behind a study's dry run: short runs of the study's own commands on this machine, in
a temporary folder (the study's folder is left as it was), each returning raw timings that
`spanbert.study.estimate` turns into a time per stage.

- data: the vocabulary and the preprocessing on a sample of the corpus taken from every file, and the
  distinct words of its first half too (`trial_corpus`);
- pre-training: a few steps of each system's own cell command, its held-out evaluation and a checkpoint
  (`trial_pretraining`), in several rounds that take the systems in turn, so that every system is timed
  beside the same load (a step's time is the mean of its round's steps after the first, the system's the median of its
  rounds, and the rounds' spread is the estimate's range); a random-init row is its export, timed as it is;
- fine-tuning: each task's first cell command with its training cut short, each step timed, then the
  held-out scoring the study does after every cell (`trial_finetuning`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from spanbert import threads
from spanbert.corpus import is_preprocessed
from spanbert.errors import SpanBertError
from spanbert.preprocess import preprocess, uncompressed_size  # noqa: F401 - uncompressed_size: its name here too
from spanbert.study.cells import candidate_kinds, plan, prepare_folds, run_finetune, run_pretrain
from spanbert.study.heldout import heldout_plan, score_heldout, split_dev
from spanbert.study.layout import shared_dir
from spanbert.study.spec import Study, StudyTask, is_random_init
from spanbert.tasks import TASKS
from spanbert.threads import load_mark, others_since
from spanbert.tokenization import corpus_files, count_corpus_words, load_tokenizer, train_tokenizer
from spanbert.utils import open_text

TRIAL_SAMPLE_CHARS = 2_000_000
"""Characters of the corpus the trial prepares when the study's corpus is not prepared yet: enough for a
vocabulary, the blocks of a few steps and a held-out evaluation, read in seconds (the full corpus is the
study's first stage, not the dry run's)."""
PROBE_SAMPLE_CHARS = TRIAL_SAMPLE_CHARS  # its name before study/probe.py became study/trials.py

FINETUNE_TRIAL_SHARE = 0.125
"""A task's trial run trains on this share of a cell's examples (or steps): its steps give the step time
(their mean after the first, `step_seconds`), the rest of its wall time the cell's fixed part."""

MIN_TRIAL_STEPS = 4
"""A trial run trains at least this many steps: the first pays for start-up, the mean of the others is
the step time."""

TRIAL_ROUNDS = 3
"""Rounds of pre-training trials a dry run makes: each times every system once, in turn. One round put
spanbert at 3.30 s a step beside bert-1seq's 1.02 s (a ratio no run showed: the load rose between the
two), and two dry runs of one evening 5 h 31 min and 9 h 42 min apart; the median of three rounds
taken in turn is timed beside the same load for every system, and their spread says how far the
load moved the figure."""


def _since(t0: float) -> float:
    return time.perf_counter() - t0


def megabytes(n: float) -> str:
    """A size in bytes as a person reads it: "261.5 MB", "2.1 MB", "46 kB"."""
    return f"{n / 1e6:,.1f} MB" if n >= 1e5 else f"{n / 1e3:,.0f} kB"


@dataclass
class DataTimings:
    """The vocabulary and the preprocessing, timed on a sample of the corpus and on its first half."""

    corpus_bytes: int
    """The whole corpus, uncompressed."""
    sample_bytes: int
    half_bytes: int
    words: int
    """Distinct words of the sample (what learning the vocabulary takes time in proportion to)."""
    half_words: int
    count_s: float
    """Counting the sample's words: the vocabulary's first pass, in proportion to the text."""
    tokenizer_s: float
    """The whole vocabulary training on the sample (counting, learning, writing); 0 with the study's
    own tokenizer."""
    preprocess_s: float
    """Preprocessing the sample in this process (the whole corpus's takes this in proportion)."""


@dataclass
class TrialCorpus:
    path: str
    """The preprocessed corpus the pre-training trials read."""
    what: str
    data: DataTimings | None
    """None when the study has nothing to prepare: ``why``."""
    why: str = ""


def trial_corpus(study: Study, tmp: Path) -> TrialCorpus:
    """The corpus for the trials, writing only under ``tmp``: the study's shared corpus when an earlier run
    prepared it, the study's own corpus when it is already preprocessed (both: no data stage), else a sample
    of `TRIAL_SAMPLE_CHARS` characters, an equal share from the start of every corpus file (all the text
    kinds a corpus mixes), with the vocabulary and preprocessing timed on it and on its first half."""
    shared = shared_dir(study)
    if (shared / "prepared.json").is_file() and is_preprocessed(shared / "corpus"):
        return TrialCorpus(str(shared / "corpus"), "the study's prepared corpus", None, f"already prepared in {shared}")
    needs_candidates = sorted({k for s in study.systems if not s.checkpoint for k in candidate_kinds(s)})
    if is_preprocessed(study.corpus) and not needs_candidates and not study.tokenizer:
        return TrialCorpus(study.corpus, "the preprocessed corpus", None, "the corpus is preprocessed already (linked)")
    files = corpus_files([study.corpus])
    jsonl = ".jsonl" in files[0].suffixes
    files = [f for f in files if (".jsonl" in f.suffixes) == jsonl]
    suffix = ".jsonl" if jsonl else ".txt"
    sample, half = tmp / f"sample{suffix}", tmp / f"sample-half{suffix}"
    share = TRIAL_SAMPLE_CHARS // len(files) + 1
    with open(sample, "w", encoding="utf-8") as out, open(half, "w", encoding="utf-8") as out_half:
        for f in files:
            left = share
            with open_text(f, errors="replace") as src:
                for line in src:  # whole lines, so documents and JSON records stay intact
                    line = line if line.endswith("\n") else line + "\n"
                    out.write(line)
                    if left > share / 2:
                        out_half.write(line)
                    left -= len(line)
                    if left <= 0:
                        break
            if not jsonl:  # a document ends at the file's end: a blank line, so two files' texts do not run together
                out.write("\n")
                out_half.write("\n")
    corpus_bytes = sum(uncompressed_size(f) for f in corpus_files([study.corpus]))
    half_words = len(count_corpus_words([half]))
    t0 = time.perf_counter()
    words = len(count_corpus_words([sample]))
    count_s = _since(t0)
    if study.tokenizer:
        tok, tokenizer_s = load_tokenizer(study.tokenizer), 0.0
    else:
        t0 = time.perf_counter()
        tok = train_tokenizer([sample], vocab_size=study.vocab_size, output_dir=tmp / "tokenizer", show_progress=False)
        tokenizer_s = _since(t0)
    t0 = time.perf_counter()
    preprocess([sample], tok, tmp / "corpus", num_workers=0, candidates=needs_candidates, progress=False)
    preprocess_s = _since(t0)
    timings = DataTimings(corpus_bytes, sample.stat().st_size, half.stat().st_size, words, half_words, count_s,
                          tokenizer_s, preprocess_s)  # fmt: skip
    what = (f"a {megabytes(timings.sample_bytes)} sample of the corpus (the start of each of its {len(files)} "
            f"file(s)), vocabulary {tok.vocab_size:,}")  # fmt: skip
    return TrialCorpus(str(tmp / "corpus"), what, timings)


@dataclass
class PretrainTimings:
    """One system's trial: a few steps of its cell command, an evaluation at the end, one checkpoint."""

    system: str
    random_init: bool = False
    """A random-init row: nothing trains; ``wall_s`` is its whole cell (the export)."""
    wall_s: float = 0.0
    """The trial command, start to end."""
    steps: int = 0
    step_s: float = 0.0
    """The mean step after the first (the first pays for start-up; `step_seconds`)."""
    eval_s: float | None = None
    """One held-out evaluation of ``eval_blocks`` blocks (None: the sample held out nothing)."""
    eval_blocks: int = 0
    save_s: float = 0.0
    """One checkpoint: the trial's, written again."""
    round_step_s: list[float] = field(default_factory=list)
    """The step time of each round (`step_seconds` of its steps), in the order run; ``step_s`` is their median."""
    others: list[float | None] = field(default_factory=list)
    """Cores that other processes kept busy during each round's trial (None: not known here)."""
    threads: int = 0
    """The thread count the trials ran at (0: not known)."""
    idle_threads: int = 0
    """The count idle cores would have given; above ``threads`` when the trials took fewer because other
    processes kept cores busy (the count followed the free cores): `idle_step_range` then projects idle
    cores."""

    @property
    def step_range(self) -> tuple[float, float]:
        """(fastest, slowest) step time: the rounds' own, and at the fast end the projection to idle cores
        (`idle_step_range`) when the trials ran fewer threads than idle cores give."""
        times = self.round_step_s or [self.step_s]
        idle = self.idle_step_range
        return min(min(times), idle[0]) if idle else min(times), max(times)

    @property
    def idle_step_range(self) -> tuple[float, float] | None:
        """(fastest, slowest) step time on idle cores projected from trials at fewer threads, by the speed-up
        of `idle_threads` over ``threads`` that the small model measured (`THREAD_SPEEDUP`); None when the
        trials ran the count idle cores give."""
        if not self.threads or self.idle_threads <= self.threads:
            return None
        lo, hi = thread_speedup(self.threads, self.idle_threads)
        fastest = min(self.round_step_s or [self.step_s])
        return fastest / hi, self.step_s / lo


THREAD_SPEEDUP = (1.45, 1.75)
"""How much faster a pre-training step runs at 2 threads than at 1 on 2 idle cores: 1.46 (tiny), 1.74
(small), 1.53 (base), `bench/threads.py` on the 2-core VM (docs/benchmarks.md, "Threads beside other
work"). Beside a process that keeps one core busy, one thread keeps 94-101% of its idle speed (the same
table), so a trial that the load held to one thread times idle cores at one thread, and this range turns
it into idle cores at two."""


def thread_speedup(threads: int, idle: int) -> tuple[float, float]:
    """(least, most) speed-up of ``idle`` threads over ``threads`` on idle cores: `THREAD_SPEEDUP` for one
    doubling, the same exponents of the ratio for another (1 to 4 threads: 2.1-3.1)."""
    ratio = idle / threads
    lo, hi = (math.log(x) / math.log(2.0) for x in THREAD_SPEEDUP)
    return ratio**lo, ratio**hi


def _log_rows(run: Path) -> list[dict]:
    path = run / "log.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []


def _step_durations(rows: list[dict]) -> list[float]:
    """Each logged step's wall time, in order, from a log written every step: its real tokens over its
    tokens per second (a step with an evaluation or a checkpoint after it carries them into the next)."""
    return [r["train/tokens_per_step"] / r["train/tokens_per_s"] for r in rows
            if r.get("train/tokens_per_s") and "train/tokens_per_step" in r]  # fmt: skip


def step_seconds(durations: list[float]) -> float:
    """A trial's step time from its steps' wall times: the mean of those after the first (which pays for
    start-up). A cell's time is the sum of its steps, so the mean is the figure to scale; the steps of a
    pre-training run on 2 cores scatter by a fifth around it (the cpu preset's spanbert cell on a 2-core
    AMD EPYC VM, 2026-12-02: 0.84-1.77 s, a mean of 1.10 s over 80 steps, the same as its whole 448-step
    cell's), skewed towards slow steps, so that a median reads low (the same trial on the sample corpus:
    median 1.17 s, mean 1.22 s). One step alone: that step."""
    if not durations:
        return 0.0
    rest = durations[1:] or durations
    return sum(rest) / len(rest)


def _save_seconds(run: Path, tmp: Path) -> float:
    """A checkpoint's cost, measured by writing the trial's training state again (what every save writes:
    the model, the optimizer's moments, the RNG states), flushed to disk."""
    states = sorted(run.glob("checkpoint-*/state.pt"))
    if not states:
        return 0.0
    state = torch.load(states[-1], map_location="cpu", weights_only=False)
    t0 = time.perf_counter()
    with open(tmp / "save-trial.pt", "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    seconds = _since(t0)
    (tmp / "save-trial.pt").unlink()
    return seconds


def trial_threads() -> tuple[int, int]:
    """(the thread count the last trial trained at, the count idle cores would give): equal when the count
    is fixed (``--threads``, `OMP_NUM_THREADS`: a fixed count is what the study runs too) or unknown."""
    used = threads.run_threads() or 0
    if not used or threads.fixed_count():
        return used, used
    return used, max(used, threads.most_threads())


def trial_pretraining(study: Study, tmp_study: Study, corpus: str, steps: int, tmp: Path,
                      rounds: int = 1) -> list[PretrainTimings]:  # fmt: skip
    """Every pre-training row of the study on the trial corpus: ``steps`` + 1 steps of each system's cell
    command (a step's time from the log: its real tokens over its tokens per second), the held-out
    evaluation the cell makes (its ``max_eval_blocks``) once at the end, one checkpoint; a random-init
    row's command as it is. Each run's model lands where ``tmp_study`` plans it (``model_dir``), so the
    fine-tuning trials read it.

    ``rounds`` > 1: every system's trial again, the systems in turn in each round (A B C, A B C, ...), so
    that each is timed beside the same load as the others; a system's step time is the median of its
    rounds' (each the mean of its steps after the first, `step_seconds`), the rounds' own are kept (`PretrainTimings.round_step_s`),
    with the load beside each. The evaluation, checkpoint and start-up are the first round's."""
    # one trial per system: its other pre-training seeds run the same command at the same speed
    cells = [c for c in plan(tmp_study) if c.kind == "pretrain" and not c.pretrain_seed]
    out: dict[str, PretrainTimings] = {}
    for r in range(max(1, rounds)):
        for cell in cells:
            system = next(s for s in study.systems if s.name == cell.system)
            if r and is_random_init(system):
                continue  # nothing trains: its export, timed once
            run = Path(cell.dir) if r == 0 else Path(f"{cell.dir}-round{r + 1}")
            options = {**cell.options, "corpus": corpus, "output_dir": str(run)}
            if not is_random_init(system):
                options.update(max_steps=steps + 1, save_steps=steps + 1, eval_steps=0, logging_steps=1)
            log = tmp / f"pretrain-{cell.system}{'' if r == 0 else f'-round{r + 1}'}.log"
            mark = load_mark()
            t0 = time.perf_counter()
            try:
                result = run_pretrain(options, log)
            except SpanBertError as e:
                raise SpanBertError(f"study: the trial of {cell.label} failed: {e}; run without --trial_steps") from None
            wall = _since(t0)
            others = others_since(mark)
            if is_random_init(system):
                out[cell.system] = PretrainTimings(cell.system, random_init=True, wall_s=wall, others=[others])
                continue
            rows = _log_rows(run)
            durations = _step_durations(rows)
            if len(durations) < 2:
                raise SpanBertError(f"study: the trial of {cell.label} logged no step time; run without --trial_steps")
            step_s = step_seconds(durations)
            if r:
                p = out[cell.system]
                p.round_step_s.append(step_s)
                p.others.append(others)
                p.step_s = statistics.median(p.round_step_s)
                shutil.rmtree(run, ignore_errors=True)  # only its log was needed
                continue
            evals = [row["time/eval_s"] for row in rows if "time/eval_s" in row]
            used, idle = trial_threads()
            out[cell.system] = PretrainTimings(
                cell.system, wall_s=wall, steps=len(durations), step_s=step_s,
                eval_s=evals[-1] if evals else None, eval_blocks=result.held_out_blocks,
                save_s=_save_seconds(run, tmp), round_step_s=[step_s], others=[others],
                threads=used, idle_threads=idle,
            )  # fmt: skip
    return [out[c.system] for c in cells]


@dataclass
class FinetuneTimings:
    """One reduced run of a task's first cell command (its training cut to `trial_size`), and the
    held-out scoring the study does after every cell."""

    task: str
    unit: str
    """"examples" or "steps": what a cell's size counts and the run was cut by."""
    size: int
    """A cell's real size in that unit."""
    trial_size: int
    wall_s: float
    """The run, start to end: start-up, training, evaluations, the selected model written."""
    steps: int
    step_s: float
    """The mean step after the first (the first pays for start-up; `step_seconds`); its log's real tokens over
    tokens/s."""
    full_steps: float = 0.0
    """``steps`` counted in steps of the median's tokens: the last step of an epoch holds what is left
    (250 questions make 15.03 steps of 32 windows, logged as 16)."""
    eval_s: list[float] = field(default_factory=list)
    """Each dev evaluation it made (its log's ``time/eval_s``)."""
    one_eval_per_epoch: bool = False
    """The run evaluated once an epoch where the cell evaluates ``evals_per_epoch`` times: the same cost an
    evaluation, fewer of them."""
    heldout_s: float = 0.0
    """Scoring the run's model on the held-out data, as the study does after each cell."""
    prepare_s: float = 0.0
    """The task's shared files (LitBank's fold, the dev halves): once per study."""
    model: str = ""
    """The row whose architecture the run fine-tuned."""
    cold_s: float | None = None
    """A task with a features cache (`TaskSpec.cache_option`): a whole cell and its held-out scoring with the
    cache empty (the encoder's features computed), beside ``warm_s``, the same again reading them."""
    warm_s: float | None = None


def size_option(t: StudyTask) -> tuple[str, str, int] | None:
    """(option, unit, a cell's size) of the option that bounds a task's training, or None when none does
    (its whole training file: not timed)."""
    for key, unit in (("max_steps", "steps"), ("max_train_examples", "examples")):
        value = t.options.get(key)
        if value not in (None, "", -1, 0):
            return key, unit, int(value)
    return None


def trial_size(t: StudyTask, unit: str, size: int) -> int:
    """The reduced size a task is timed at: `FINETUNE_TRIAL_SHARE` of a cell's, and at least
    `MIN_TRIAL_STEPS` steps (their mean after the first is the step time), at most the cell's size."""
    batch = int(t.options.get("per_device_train_batch_size", 1)) if unit == "examples" else 1
    return min(size, max(math.ceil(size * FINETUNE_TRIAL_SHARE), MIN_TRIAL_STEPS * batch))


def per_epoch_schedule(t: StudyTask) -> bool:
    """Whether a task's cells evaluate a named ``evals_per_epoch`` times an epoch over a named number of
    epochs (no ``eval_steps``, no ``max_steps``): then a cell's evaluations are known without running it,
    and the trial needs only one of them."""
    o = t.options
    return bool(o.get("evals_per_epoch")) and bool(o.get("num_train_epochs")) and not o.get("eval_steps") \
        and not o.get("max_steps")  # fmt: skip


def trial_cached(t: StudyTask, cell: Any, tmp_study: Study, tmp: Path) -> FinetuneTimings:
    """A task whose cells share a features cache (the probes): its first cell whole, with its held-out
    scoring, twice: first with the trial's cache empty, then reading what the first run stored. A study's
    cells pay the first cost once per encoder and data, and the second for every other rate, seed and row;
    a cell is short once its features are there, so it is run whole rather than cut."""
    t0 = time.perf_counter()
    split_dev(tmp_study, t)
    prepare_s = _since(t0)
    h = heldout_plan(tmp_study, t, cell.fold)
    times = []
    for k in ("cold", "warm"):
        run = tmp / "finetune" / f"{t.name}-{k}"
        t0 = time.perf_counter()
        try:
            run_finetune(t.task, {**cell.options, "output_dir": str(run)}, tmp / f"finetune-{t.name}-{k}.log")
            if h is not None:
                score_heldout(dataclasses.replace(cell, dir=run), t, h)
        except SpanBertError as e:
            raise SpanBertError(f"study: the trial of {cell.label} failed: {e}; run without --trial_steps") from None
        times.append(_since(t0))
    return FinetuneTimings(t.name, "cells", 1, 1, times[0], 0, 0.0, prepare_s=prepare_s, model=cell.system,
                           cold_s=times[0], warm_s=times[1])  # fmt: skip


def trial_finetuning(study: Study, tmp_study: Study, tmp: Path) -> dict[str, FinetuneTimings]:
    """Each task whose cells' training is bounded (`size_option`): its first cell's command cut to
    `trial_size`, fine-tuning the first row's trial model (a few steps trained, or untrained: the
    architecture is what costs), logging every step, evaluating once an epoch where the cell's count is
    known anyway (`per_epoch_schedule`); then its model scored on the held-out data. Tasks without a bound
    are left out (the estimate says so)."""
    out: dict[str, FinetuneTimings] = {}
    cells = [c for c in plan(tmp_study) if c.kind == "finetune"]
    for t in study.tasks:
        if TASKS[t.task].cache_option and cells:
            out[t.name] = trial_cached(t, next(c for c in cells if c.task == t.name), tmp_study, tmp)
            continue
        bound = size_option(t)
        if bound is None or not cells:
            continue
        key, unit, size = bound
        cell = next(c for c in cells if c.task == t.name)
        t0 = time.perf_counter()
        for fold in t.folds:
            prepare_folds(tmp_study, t, fold)
        split_dev(tmp_study, t)
        prepare_s = _since(t0)
        n = trial_size(t, unit, size)
        run = tmp / "finetune" / t.name
        options = {**cell.options, key: n, "output_dir": str(run), "logging_steps": 1}
        once = per_epoch_schedule(t)
        if once:
            options["evals_per_epoch"] = 1
        t0 = time.perf_counter()
        try:
            run_finetune(t.task, options, tmp / f"finetune-{t.name}.log")
        except SpanBertError as e:
            raise SpanBertError(f"study: the trial of {cell.label} failed: {e}; run without --trial_steps") from None
        wall = _since(t0)
        rows = _log_rows(run)
        durations = _step_durations(rows)
        step_s = step_seconds(durations)
        tokens = [r["train/tokens_per_step"] for r in rows if r.get("train/tokens_per_s") and "train/tokens_per_step" in r]
        full_steps = sum(tokens) / statistics.median(tokens) if tokens else 0.0
        h = heldout_plan(tmp_study, t, cell.fold)
        heldout_s = 0.0
        if h is not None:
            t0 = time.perf_counter()
            score_heldout(dataclasses.replace(cell, dir=run), t, h)
            heldout_s = _since(t0)
        out[t.name] = FinetuneTimings(t.name, unit, size, n, wall, len(durations), step_s, full_steps,
                                      [r["time/eval_s"] for r in rows if "time/eval_s" in r], once, heldout_s,
                                      prepare_s, cell.system)  # fmt: skip
    return out
