"""The cells of a study: planning them (every pre-training cell, then every system x task x learning
rate x seed (x fold) fine-tuning cell), running them in this process (pre-training through
`spanbert.pretrain`, which returns its `PretrainResult`, fine-tuning through the task API, `spanbert.tasks`,
which returns its `Results`), and what
makes a study resumable and shardable.

A cell is finished when its marker exists (`cell.json` for pre-training, `result.json` for
fine-tuning); a killed study started again skips finished cells and resumes the interrupted one
(pre-training continues from its last checkpoint with --resume). Under `torchrun` every pre-training
cell is one distributed run; fine-tuning cells can be spread over processes with `--shard I/N`. One
study at a time holds a folder (`study_lock`), and a finished cell must have run the command the
study plans for it (`check_finished`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from spanbert import distributed, folders
from spanbert.corpus import is_preprocessed, tokenizer_dir_of
from spanbert.errors import SpanBertError
from spanbert.preprocess import preprocess_folder
from spanbert.pretrain import PretrainResult
from spanbert.pretrain_command import pretrain_from_keywords
from spanbert.pretrain_config import SYSTEM_PRESETS
from spanbert.runs import latest_checkpoint, resume_state
from spanbert.study.heldout import dev_restriction, heldout_plan, score_heldout, split_dev, study_is_legacy
from spanbert.study.layout import (
    Cell,
    features_dir,
    finetune_cell_dir,
    fold_dir,
    model_dir,
    pretrain_dir,
    pretrain_seeds_of,
    shared_dir,
)
from spanbert.study.pace import pace_of, stage_of
from spanbert.study.runner import in_log, options_argv
from spanbert.study.spec import Study, StudyTask, SystemSpec, subtask_options
from spanbert.tasks import TASKS
from spanbert.tasks import run as run_task
from spanbert.tokenization import train_tokenizer_folder
from spanbert.utils import atomic_write, progress_bar, write_json


def plan(study: Study) -> list[Cell]:
    """Every cell of the study in the order they run: pre-training (each system, each pre-training seed),
    then fine-tuning. With `Study.grid_on_first_seed`, a later seed's cells take the rate the first seed's
    grid selected: `pending` until that grid is finished (the plan made after it names the rate)."""
    cells: list[Cell] = []
    corpus = str(shared_dir(study) / "corpus")
    world = distributed.world_size()
    per_device = study.batch_size // (world * study.gradient_accumulation_steps)
    for s in study.systems:
        if s.checkpoint:
            continue
        for k in pretrain_seeds_of(study, s):
            opts = {
                "system": s.pretrain_system,
                **({"family": s.family} if s.family else {}),  # absent: the argv of studies before families
                "corpus": corpus,
                "model": study.model,
                "max_seq_length": study.max_seq_length,
                "max_steps": study.pretrain_steps,
                "per_device_train_batch_size": max(1, per_device),
                "gradient_accumulation_steps": study.gradient_accumulation_steps,
                "disable_tqdm": True,
                **study.pretrain_options,
                **s.options,
                **({} if k is None else {"seed": k}),  # absent: the argv of studies of one pre-training run
            }
            argv = ["pretrain", *options_argv(opts)]
            cells.append(Cell("pretrain", s.name, pretrain_dir(study, s, k), argv, options=opts, pretrain_seed=k))
    for s in study.systems:
        for k in pretrain_seeds_of(study, s):
            for t in study.tasks:
                rates: list[float | None] = list(t.learning_rates)
                if study.grid_on_first_seed and k is not None and k > 0 and len(rates) > 1:
                    rates = [chosen_rate(study, s, t)]
                for lr in rates:
                    for seed in range(study.seeds):
                        for fold in t.folds or [None]:
                            if lr is None:
                                cells.append(Cell("finetune", s.name, Path(), [], t.name, 0.0, seed, fold,
                                                  pretrain_seed=k, pending=True))  # fmt: skip
                                continue
                            d = finetune_cell_dir(study, s.name, t.name, lr, seed, fold, k)
                            opts = finetune_options(study, t, model_dir(study, s, k), lr, seed, fold)
                            argv = ["finetune", t.task, *options_argv(opts)]
                            cells.append(Cell("finetune", s.name, d, argv, t.name, lr, seed, fold, opts, pretrain_seed=k))
    return cells


def chosen_rate(study: Study, s: SystemSpec, t: StudyTask) -> float | None:
    """The learning rate the grid on ``s``'s first pre-training seed selected for ``t`` (the best mean dev
    score over its fine-tuning seeds and folds; a tie goes to the smaller rate, as the summary's selection),
    or None while a cell of that grid is unfinished."""
    k = None if study.pretrain_seeds == 1 else 0
    means = {}
    for lr in t.learning_rates:
        scores = []
        for seed in range(study.seeds):
            for fold in t.folds or [None]:
                marker = finetune_cell_dir(study, s.name, t.name, lr, seed, fold, k) / "result.json"
                if not marker.is_file():
                    return None
                scores.append(float(json.loads(marker.read_text())["dev"]))
        means[lr] = sum(scores) / len(scores)
    return max(means, key=lambda lr: (means[lr], -lr))


def finetune_options(study: Study, t: StudyTask, model: Path, lr: float, seed: int, fold: int | None) -> dict[str, Any]:
    """The options of one fine-tuning cell (`spanbert.tasks.finetune`'s, by the command's names): the task's
    data (a fold's files, or the selection half of dev when the other half is held out), the model, the
    rate and the seed, then the study's options for the task."""
    h = None
    spec = TASKS[t.task]
    if fold is not None:
        train, dev, _ = spec.folds.files(fold_dir(study, t, fold))
        data = spec.finetune_data(str(train), str(dev))
    else:
        # the cells select on the selection half of dev when the other half is held out; a folder whose
        # cells finished before held-out scoring keeps selecting on the whole dev set
        h = None if study_is_legacy(study) else heldout_plan(study, t)
        dev = h.select if h is not None else ("" if spec.dev_in_train else t.dev)
        data = {**subtask_options(t), **spec.finetune_data(t.train, dev)}
    options = dict(t.options)
    if fold is None and h is not None and h.source == "dev half":
        options.pop(dev_restriction(t)[0], None)  # already applied to the halves
    cache = spec.cache_option
    if cache and cache not in options:  # the study's own cache, not the user's: features shared by its cells
        options[cache] = str(features_dir(study))
    rate = {"learning_rate": lr} if t.rate_option == "learning_rate" else {}  # the argv of studies before rate_option
    return {**data, "model": str(model), **rate, "seed": seed, "disable_tqdm": True, **options,
            **({} if rate else {t.rate_option: lr})}  # fmt: skip


def read_dev_score(task: str, cell_dir: Path) -> tuple[float, dict[str, Any]]:
    """(headline dev score, every number of the results file) of a finished fine-tuning cell (the task's
    `TaskSpec.results_file`, or the name an older run wrote it under), on the 0-100 scale."""
    try:
        results = TASKS[task].read_results(cell_dir)
        return results.score, results.numbers
    except SpanBertError as e:
        raise SpanBertError(f"{e}; remove {cell_dir} to redo the cell") from None


def prepare_folds(study: Study, t: StudyTask, fold: int) -> None:
    """Write fold ``fold`` of ``t``'s data into its shared folder (once: a ``done`` file marks it)."""
    out = fold_dir(study, t, fold)
    if (out / "done").is_file():
        return
    folders.make_folders(out)
    TASKS[t.task].folds.prepare(t.train, fold, out)
    (out / "done").write_text("ok\n")


def _marker(cell: Cell) -> Path:
    return cell.dir / ("cell.json" if cell.kind == "pretrain" else "result.json")


def is_done(cell: Cell) -> bool:
    return not cell.pending and _marker(cell).is_file()


def _prepare_shared(study: Study) -> None:
    """One tokenizer and one preprocessed corpus for every system (rank 0; the others wait)."""
    shared = shared_dir(study)
    done = shared / "prepared.json"
    if all(s.checkpoint for s in study.systems):
        return
    wanted = {"corpus": study.corpus, "tokenizer": study.tokenizer, "vocab_size": study.vocab_size}
    if done.is_file():
        had = json.loads(done.read_text()).get("settings", wanted)
        if had != wanted:
            raise SpanBertError(
                f"{done}: found the shared corpus made with {had}, expected {wanted}; use a new output_dir "
                f"for another corpus or vocabulary"
            )
        return
    needs_candidates = sorted(
        {k for s in study.systems if not s.checkpoint for k in candidate_kinds(s)}
    )
    steps: list[tuple[str, list[str], Callable[[], Any]]] = []  # (name, its command line for the log, the call)
    corpus = Path(study.corpus)
    if is_preprocessed(corpus):
        tok = study.tokenizer or str(tokenizer_dir_of(corpus))
        if not needs_candidates and not study.tokenizer:
            # already what we need: link it instead of re-tokenizing
            distributed.print0(f"study: using the preprocessed corpus {corpus}")
            folders.make_folders(shared)
            link = shared / "corpus"
            if not link.exists():
                link.symlink_to(corpus.resolve(), target_is_directory=True)
            with atomic_write(done) as f:
                f.write(json.dumps({"corpus": str(corpus), "settings": wanted, "seconds": {}}) + "\n")
            return
        raise SpanBertError(
            f"{corpus}: found a preprocessed corpus, expected raw text when a tokenizer or candidate spans are "
            f"needed (pass the text files as corpus)"
        )
    tok = study.tokenizer
    if not tok:
        tok = str(shared / "tokenizer")
        if not (Path(tok) / "vocab.txt").is_file():
            spelled = {"corpus": study.corpus, "vocab_size": study.vocab_size, "output_dir": tok}
            steps.append(("tokenizer", ["tokenizer", "train", *options_argv(spelled), "--disable_tqdm"],
                          lambda: train_tokenizer_folder([study.corpus], study.vocab_size, tok, progress=False)))  # fmt: skip
    candidates = ",".join(needs_candidates)
    spelled = {"corpus": study.corpus, "tokenizer": tok, "output_dir": shared / "corpus", "candidates": candidates or None}
    steps.append(("preprocess", ["preprocess", *options_argv(spelled), "--quiet"],
                  lambda: preprocess_folder([study.corpus], tok, shared / "corpus", candidates=candidates, progress=False)))  # fmt: skip
    seconds = {}  # each step's wall time: the data stage of the summary's stage table
    for name, command, call in steps:
        log = shared / f"{name}.log"
        distributed.print0(f"study: {name} (log: {log})")
        t0 = time.perf_counter()
        try:
            with in_log(log, f"spanbert {' '.join(command)}"):
                call()
        except SpanBertError as e:
            raise SpanBertError(f"study: the shared {name} step failed ({e}); see {log}") from None
        seconds[name] = time.perf_counter() - t0
    with atomic_write(done) as f:
        f.write(json.dumps({"corpus": study.corpus, "tokenizer": tok, "settings": wanted, "seconds": seconds}) + "\n")


def candidate_kinds(s: SystemSpec) -> list[str]:
    """The candidate spans a system's masking needs from `spanbert preprocess --candidates`: none, entity or
    noun_phrase."""
    scheme = s.options.get("masking") or SYSTEM_PRESETS[s.pretrain_system].masking
    return {"named_entity": ["entity"], "noun_phrase": ["noun_phrase"]}.get(scheme, [])


def run_finetune(task: str, options: dict[str, Any], log: Path) -> Any:
    """`spanbert.tasks.finetune`'s action of ``task`` with ``options`` in this process, its output in
    ``log``: the `Results` it returns. A failure is one `SpanBertError` line (the log has the rest)."""
    with in_log(log, f"spanbert finetune {task} {' '.join(options_argv(options))}"):
        return run_task(task, "finetune", options)


def run_pretrain(options: dict[str, Any], log: Path) -> PretrainResult:
    """`spanbert.pretrain` with ``options`` (those of ``spanbert pretrain``, by name) in this process, its
    output in ``log``: the `PretrainResult` it returns (its ``threads`` set as the flag sets them). A failure
    is one `SpanBertError` line (the log has the rest)."""
    with in_log(log, f"spanbert pretrain {' '.join(options_argv(options))}"):
        return pretrain_from_keywords(**options)


def run_cell(cell: Cell, study: Study, allow_long_run: bool = False) -> None:
    """Run one unfinished cell; a pre-training cell killed earlier resumes from its checkpoint."""
    argv = list(cell.argv)  # the cell's identity, kept in its marker: what the options mean on the command line
    argv += ["--output_dir", str(cell.dir)] + (["--allow_long_run"] if allow_long_run else [])
    extra: dict[str, Any] = {"output_dir": str(cell.dir), **({"allow_long_run": True} if allow_long_run else {})}
    if cell.kind == "pretrain":
        resumable = distributed.on_main(lambda: latest_checkpoint(cell.dir) is not None)
        if resumable:
            argv.append("--resume")
            extra["resume"] = True
        elif cell.dir.exists():
            argv += ["--overwrite_output_dir", "true"]
            extra["overwrite_output_dir"] = True
    elif cell.dir.exists():
        argv += ["--overwrite_output_dir", "true"]  # a fine-tuning cell killed midway starts over
        extra["overwrite_output_dir"] = True
    # the cell's folder is a run folder (its manifest) before the study writes the cell's log into it: the
    # cell's command then finds an earlier output of its own kind, never a folder of other files
    distributed.on_main(lambda: folders.claim_manifest(cell.dir, "run", "spanbert study"))
    log = cell.dir / "log.txt"
    t0 = time.perf_counter()
    if cell.kind == "pretrain":
        # a resumed cell's time goes on from what its checkpoint recorded: the stage's time as if never killed
        before = distributed.on_main(lambda: resume_state(cell.dir).get("train_seconds", 0.0)) if resumable else 0.0
        try:
            run_pretrain({**cell.options, **extra}, log)
        except SpanBertError as e:
            raise SpanBertError(f"study: cell '{cell.label}' failed: {e}; its log: {log}") from None
        info = {"system": cell.system, "seconds": before + time.perf_counter() - t0, "steps": study.pretrain_steps,
                "budget_tokens": study.budget_tokens, "argv": argv,
                **({} if cell.pretrain_seed is None else {"pretrain_seed": cell.pretrain_seed})}  # fmt: skip
        if resumable:
            info["seconds_before_resume"] = before
    else:
        task = next(t for t in study.tasks if t.name == cell.task)
        try:
            results = run_finetune(task.task, {**cell.options, **extra}, log)
        except SpanBertError as e:
            raise SpanBertError(f"study: cell '{cell.label}' failed: {e}; its log: {log}") from None
        seconds = time.perf_counter() - t0
        score, numbers = distributed.on_main(lambda: (results.score, results.numbers))
        info = {"system": cell.system, "task": cell.task, "learning_rate": cell.lr, "seed": cell.seed, "fold": cell.fold,
                "dev": score, "dev_results": numbers, "seconds": seconds, "argv": argv,
                **({} if cell.pretrain_seed is None else {"pretrain_seed": cell.pretrain_seed})}  # fmt: skip
        _drop_training_state(cell.dir)
        if not study_is_legacy(study):
            h = heldout_plan(study, task, cell.fold)
            t0 = time.perf_counter()
            held = score_heldout(cell, task, h) if h is not None else None
            info |= {"heldout_source": h.source if h else None, "heldout": held["score"] if held else None,
                     "heldout_data": h.heldout if h else None, "heldout_results": held,
                     "heldout_seconds": time.perf_counter() - t0}  # fmt: skip
            if held is not None and h.source == "test" and cell.fold is None:
                # the same numbers `score_tests` would compute for the selected models: not run twice
                distributed.on_main(lambda: write_json(cell.dir / "test.json", {k: v for k, v in held.items() if k != "score"}))

    def write() -> None:
        with atomic_write(_marker(cell)) as f:
            f.write(json.dumps(info, indent=2) + "\n")

    distributed.on_main(write)


def _drop_training_state(cell_dir: Path) -> None:
    """A finished fine-tuning cell keeps its model and results, not its optimizer state (disk stays bounded)."""

    def drop() -> None:
        for p in cell_dir.glob("checkpoint-*"):
            folders.remove(p)
        folders.remove(cell_dir / "latest")
        folders.remove(cell_dir / "best")

    distributed.on_main(drop)


def run_study(
    study: Study, only: str = "all", shard: tuple[int, int] = (0, 1), allow_long_run: bool = False
) -> list[Cell]:
    """Run every unfinished cell (those of this shard); returns the plan. ``allow_long_run`` passes
    --allow_long_run to every cell's command. A pending cell (its rate chosen by the first pre-training
    seed's grid) is planned again when it is reached: by then that grid has run, in the plan's order."""
    if shard[1] > 1 and only != "finetune":
        raise SpanBertError("--shard: found it without --only finetune, expected the pre-training cells to run "
                            "first (--only pretrain, under torchrun if you like) and the shards to split fine-tuning")  # fmt: skip

    def select(cells: list[Cell]) -> list[Cell]:
        todo = [c for c in cells if only == "all" or c.kind == only]
        return todo[shard[0] :: shard[1]] if shard[1] > 1 else todo

    # planned on rank 0 (a pending cell's rate is read from the cells' markers) and the same on every rank
    cells = distributed.on_main(lambda: plan(study))
    todo = select(cells)
    # refused before anything is written: a changed study must not overwrite the study.json of the
    # cells that were run
    distributed.on_main(lambda: check_finished(cells))
    distributed.on_main(lambda: folders.make_folders(study.output_dir))
    distributed.on_main(lambda: _write_plan(study, cells))
    if only in ("all", "pretrain"):
        distributed.on_main(lambda: _prepare_shared(study))
    for t in study.tasks:
        for fold in t.folds:
            distributed.on_main(lambda t=t, fold=fold: prepare_folds(study, t, fold))
        if not study_is_legacy(study) and only in ("all", "finetune"):
            distributed.on_main(lambda t=t: split_dev(study, t))

    done_before = distributed.on_main(lambda: [is_done(c) for c in todo])
    # with a kept estimate: after each cell, how the cells run compare with it and the time left at that pace
    pace = pace_of(study.output_dir, [c for c, done in zip(todo, done_before) if not done]) if distributed.is_main() else None
    bar = progress_bar(total=len(todo), initial=sum(done_before), desc="study", unit="cell", disable=not distributed.is_main())
    i = 0
    while i < len(todo):
        cell = todo[i]
        if cell.pending:
            cells = distributed.on_main(lambda: plan(study))  # the grid before it has finished: its rate is known
            todo = select(cells)
            if todo[i].pending:
                raise SpanBertError(f"study: {cell.label}: the learning-rate grid of {cell.system} / {cell.task} on "
                                    f"pre-training seed 0 is not finished; run its cells first (they come before "
                                    f"this one: drop --shard, or run that shard first)")  # fmt: skip
            distributed.on_main(lambda cells=cells: _write_plan(study, cells))
            cell = todo[i]
        i += 1
        if distributed.on_main(lambda c=cell: is_done(c)):
            continue
        if cell.kind == "finetune":
            system = next(s for s in study.systems if s.name == cell.system)
            model = model_dir(study, system, cell.pretrain_seed)
            if not distributed.on_main(lambda m=model: (m / "config.json").is_file()):
                raise SpanBertError(f"study: {cell.label}: the model {model} does not exist yet; "
                                    f"run the pre-training cells first (--only pretrain)")  # fmt: skip
        bar.set_postfix_str(cell.label)
        t0 = time.perf_counter()
        run_cell(cell, study, allow_long_run)
        bar.update(1)
        if distributed.is_main():
            bar.write(f"done: {cell.label} ({cell.dir})")
            if pace is not None:
                pace.done(stage_of(cell), time.perf_counter() - t0)
                line = pace.line()
                if line:
                    bar.write(line)
    bar.close()
    return cells


def check_finished(cells: list[Cell]) -> None:
    """A finished cell must have run the command this study plans for it: a study file changed after
    some cells finished (another budget, other task options) would otherwise mix results silently.
    Adding systems, tasks, learning rates or seeds only adds cells and is fine."""
    for cell in cells:
        if cell.pending:
            continue
        marker = _marker(cell)
        if not marker.is_file():
            continue
        try:
            ran = json.loads(marker.read_text()).get("argv") or []
        except (OSError, ValueError):
            raise SpanBertError(f"{marker}: unreadable; remove {cell.dir} to redo the cell") from None
        if ran[: len(cell.argv)] != cell.argv:
            diff = sorted(set(ran[: len(cell.argv)]) ^ set(cell.argv))[:6]
            raise SpanBertError(
                f"{marker}: found a finished cell '{cell.label}' run with other settings ({' '.join(diff)}), "
                f"expected the study's; use a new output_dir for a changed study, or remove {cell.dir} to redo it"
            )


@contextlib.contextmanager
def study_lock(output_dir: str | Path, shard: tuple[int, int] = (0, 1)) -> Any:
    """Hold OUT/.lock while a study runs in ``output_dir``, so two `spanbert study` processes never run
    (and overwrite) the same cells: a second one is refused at once with the holder's pid. The lock is
    `fcntl.flock`, which the kernel releases when the process ends, a crash or kill -9 included, so
    no stale lock is ever left to remove. Shards of one study (``--shard I/N``, one process per device)
    share the folder lock and each holds its own shard's: shards run side by side, the same shard
    twice or a whole study beside a shard does not. Rank 0 holds it for a torchrun group."""
    out = Path(output_dir)
    held: list[Any] = []

    def take(name: str, mode: int, what: str) -> None:
        folders.record(out / name)
        f = open(out / name, "a+", encoding="utf-8")  # noqa: SIM115 - held until the study ends
        try:
            fcntl.flock(f, mode | fcntl.LOCK_NB)
        except OSError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            f.close()
            raise SpanBertError(
                f"{out}: found {what} already running on this folder ({holder}), expected one at a time; wait for "
                f"it to finish (or stop it) and run again, or use another --output_dir"
            ) from None
        held.append(f)
        if mode == fcntl.LOCK_EX:  # only the exclusive holder names itself: shared holders would race
            f.seek(0)
            f.truncate()
            f.write(f"spanbert study, pid {os.getpid()}\n")
            f.flush()

    created: list[Path] = []
    claimed = []

    def take_all() -> None:
        # the folder's manifest (`spanbert.folders`): what the study writes at its top is listed as it goes
        created.extend(d for d in (out, *out.parents) if not d.exists())
        try:
            claimed.append(folders.claim_manifest(out, "study", "spanbert study"))
        except BaseException:  # a full disk: the folders made for it go
            for d in created:
                with contextlib.suppress(OSError):
                    d.rmdir()
            raise
        if shard[1] == 1:
            take(".lock", fcntl.LOCK_EX, "another `spanbert study`")
        else:
            take(".lock", fcntl.LOCK_SH, "a whole `spanbert study` (not a shard)")
            take(f".lock.shard{shard[0]}of{shard[1]}", fcntl.LOCK_EX, f"shard {shard[0]}/{shard[1]}")

    try:
        distributed.on_main(take_all)
        yield
    finally:
        for f in held:
            f.close()
        # a study that wrote nothing (refused after taking its folder, e.g. a plan over a week) leaves the
        # disk as it found it: its own lock files, manifest and the folders it made go
        if claimed and claimed[0] and all(p.name.startswith(".lock") or folders.is_bookkeeping(p.name)
                                          for p in out.iterdir()):  # fmt: skip
            for p in out.iterdir():
                p.unlink(missing_ok=True)
            for d in created:
                try:
                    d.rmdir()
                except OSError:
                    break


def _write_plan(study: Study, cells: list[Cell]) -> None:
    with atomic_write(Path(study.output_dir) / "study.json") as f:
        f.write(json.dumps({"study": asdict(study), "cells": [f"pending: {c.label}" if c.pending else str(c.dir)
                                                             for c in cells]}, indent=2, default=str) + "\n")  # fmt: skip
