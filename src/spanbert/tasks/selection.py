"""Choosing a model on dev as the released fine-tuning scripts do: the best evaluation of a run
(`KeepBest`, `selection_summary`; the options that ask for it, `selection_defaults`, are torch-free in
`spanbert.tasks.options`) and the best run of a grid (the Appendix B `sweep`, with its disk kept bounded
and its resume), over the grid the encoder's family names (`sweep_grid`)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from spanbert import _aliases, distributed, families, folders
from spanbert.errors import SpanBertError
from spanbert.microbatch import planned_batch_size
from spanbert.runs import BEST_DIR, latest_checkpoint, steps_per_epoch
from spanbert.tasks.ranks import write_once
from spanbert.training_args import TrainingArguments
from spanbert.utils import atomic_write

# Appendix B: learning rate from {5e-6, 1e-5, 2e-5, 3e-5, 5e-5}, batch size from {16, 32}.
SWEEP_LEARNING_RATES = (5e-6, 1e-5, 2e-5, 3e-5, 5e-5)


SWEEP_BATCH_SIZES = (16, 32)


def sweep_grid(model_dir: str | Path) -> dict[str, tuple]:
    """``learning_rates`` and ``batch_sizes`` of `sweep` for the family in ``model_dir`` (SpanBERT
    Appendix B; the two-tower model's §4 grid)."""
    habits = families.habits_of(model_dir)
    return {"learning_rates": habits.sweep_learning_rates, "batch_sizes": habits.sweep_batch_sizes}


class KeepBest:
    """Wraps a task's dev evaluation for `spanbert.trainer.train` and keeps what the evaluation made
    (predictions, a chosen threshold: its ``payload``) at the evaluation the trainer selects.

    ``evaluate(model, step)`` returns ``(scalar metrics, payload)``; the wrapper hands the metrics to
    the trainer, which saves the best weights (``metric_for_best_model``) to ``output_dir/best/``. The
    same rule picks the payload here (a strictly better score; ties keep the earlier step), so the
    predictions written beside the saved model are those of the saved weights, not of the last step.
    Every rank holds the same gathered metrics, so every rank keeps the same payload.
    """

    def __init__(self, evaluate: Callable[[nn.Module, int], tuple[dict[str, float], Any]], args: TrainingArguments):
        self.evaluate = evaluate
        self.metric = args.metric_for_best_model
        self.greater = args.greater_is_better
        self.best: dict[str, Any] = {}
        self.last: dict[str, Any] = {}

    def __call__(self, model: nn.Module, step: int) -> dict[str, float]:
        metrics, payload = self.evaluate(model, step)
        entry = {"step": step, "metrics": metrics, "payload": payload}
        self.last = entry
        if self.metric and self.metric in metrics:
            old = self.best.get("metrics", {}).get(self.metric)
            new = metrics[self.metric]
            if old is None or (new > old if self.greater else new < old):
                self.best = entry
        return metrics

    def chosen(
        self, model: nn.Module, args: TrainingArguments, result: Any, train_examples: int
    ) -> tuple[Any, int | None]:
        """(payload of the model ``train`` returned, its step when it was selected on dev, else None).

        The trainer loads the best weights only at the planned last step (not after an earlier
        --stop_at_step); a resumed run may have found its best before the resume, whose payload is
        not here: then the model (holding those weights) is evaluated again.
        """
        stopped = 0 < args.stop_at_step == result.global_step < planned_steps(train_examples, args)
        selected = None if stopped else result.best_step
        step = selected if selected is not None else result.global_step
        kept = self.best if selected is not None else self.last
        if kept.get("step") != step:
            was_training = model.training
            model.eval()
            try:
                with torch.no_grad():
                    self(model, step)
            finally:
                model.train(was_training)
            kept = self.last
            if selected is not None:
                self.best = kept
        return kept["payload"], selected


def planned_steps(train_examples: int, args: TrainingArguments) -> int:
    """The optimizer steps of a whole run, as `spanbert.trainer.train` computes them when it batches by
    sequence count (the task datasets have no token lengths for ``max_tokens_per_batch``)."""
    world = distributed.distributed_env()[1]
    G = planned_batch_size(args.per_device_train_batch_size) * args.gradient_accumulation_steps * world
    if args.max_steps > 0:
        return args.max_steps
    return math.ceil(args.num_train_epochs * steps_per_epoch(train_examples, G, world))


def selection_summary(selected_step: int | None, args: TrainingArguments) -> dict[str, Any]:
    """``{"selected_step": N, "selected_by": METRIC}`` for a run whose model was chosen on dev (what the
    results files and the printed summary report), else ``{}``."""
    if selected_step is None:
        return {}
    return {"selected_step": int(selected_step), "selected_by": args.metric_for_best_model}


SELECTION_KEYS = ("selected_step", "selected_by")
"""What `selection_summary` adds to a run's results (and a sweep copies into each row of sweep.json)."""


def cell_arguments(targs: TrainingArguments, learning_rate: float, batch_size: int, run_dir: Path) -> TrainingArguments:
    """The training arguments of one sweep cell. With --resume a cell that has no checkpoint yet
    starts fresh (the sweep skips the finished cells; only the interrupted one resumes)."""
    resume = targs.resume and latest_checkpoint(run_dir) is not None
    return dataclasses.replace(
        targs,
        learning_rate=learning_rate,
        per_device_train_batch_size=batch_size,
        output_dir=str(run_dir),
        resume=resume,
        overwrite_output_dir=targs.overwrite_output_dir or (targs.resume and not resume),
    )


SWEEP_SUMMARY = "sweep.json"


WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
"""The large files of a saved model; a sweep keeps them for the best run only."""


def prune_run(run_dir: Path, keep_weights: bool) -> None:
    """Bounded disk for a finished sweep run: remove its resumable checkpoints (optimizer state),
    ``latest`` and ``best/`` (the selected weights are the saved model); without ``keep_weights`` also
    the saved model's weights. Its small results (config, dev scores, predictions, log) stay."""
    for p in run_dir.glob("checkpoint-*"):
        if p.is_dir():
            folders.remove(p)
    folders.remove(run_dir / BEST_DIR)
    folders.remove(run_dir / "latest")
    if not keep_weights:
        for name in WEIGHT_FILES:
            folders.remove(run_dir / name)


def sweep(
    run_one: Callable[[float, int, Path], float | dict[str, Any]],
    output_dir: str | Path,
    learning_rates: tuple[float, ...] = SWEEP_LEARNING_RATES,
    batch_sizes: tuple[int, ...] = SWEEP_BATCH_SIZES,
    resume: bool = False,
) -> dict[str, Any]:
    """Appendix B grid search. ``run_one(lr, batch_size, run_dir)`` fine-tunes into ``run_dir`` and
    returns the dev score (higher is better; every task's on the 0-100 scale), or a dict with it as
    ``dev_score`` and more to record (``selected_step``, ``selected_by``). With best-on-dev selection
    a run's score is that of its selected model, so the run with the best selected dev score wins, as
    in the released scripts (one best over the whole learning-rate grid).

    Disk stays bounded: after each run its checkpoints (optimizer state) and ``best/`` are removed,
    and the weights of every run but the best so far; the best run's model ends in ``output_dir``
    (its weights moved, its small files copied). ``output_dir/sweep.json`` lists every run's score and
    is rewritten after each run (``"complete": false`` until the end), so ``resume`` skips the runs
    it lists and continues the interrupted one.

    Under torchrun every rank runs every training run; the best run is chosen once (rank 0) and the
    files are pruned, moved and written once."""
    output_dir = Path(output_dir)
    summary_path = output_dir / SWEEP_SUMMARY

    def read_done() -> list[dict[str, Any]]:
        if not (resume and summary_path.is_file()):
            return []
        try:
            old = json.loads(summary_path.read_text())
            runs = list(old["runs"])
            if old.get("complete"):
                raise SpanBertError(f"{summary_path}: the sweep is complete; nothing to resume")
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise SpanBertError(
                f"{summary_path}: cannot read the sweep to resume ({e}); start over with --overwrite_output_dir"
            ) from None
        return runs

    results = write_once(read_done)
    done = {(r["learning_rate"], r["batch_size"]) for r in results}

    def best_of(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
        return max(runs, key=lambda r: r["dev_score"]) if runs else None  # the first of equal scores

    def record(complete: bool) -> dict[str, Any]:
        summary = {"best": best_of(results), "runs": results, "complete": complete}
        with atomic_write(summary_path, encoding="utf-8") as f:
            f.write(json.dumps(summary, indent=2) + "\n")
        return summary

    for lr in learning_rates:
        for bs in batch_sizes:
            if (lr, bs) in done:
                continue
            run_dir = output_dir / "sweep" / f"lr{lr:g}_bs{bs}"
            got = run_one(lr, bs, run_dir)
            row: dict[str, Any] = {"learning_rate": lr, "batch_size": bs}
            if isinstance(got, dict):
                row.update({k: v for k, v in got.items() if k != "dev_score"})
                row["dev_score"] = float(got["dev_score"])
            else:
                row["dev_score"] = float(got)
            row["dir"] = str(run_dir)
            before = best_of(results)
            results.append(row)
            at = f" (step {row['selected_step']})" if row.get("selected_step") is not None else ""
            distributed.print0(f"sweep: lr={lr:g} batch={bs}: dev {row['dev_score']:.4f}{at}")

            def prune(row: dict[str, Any] = row, before: dict[str, Any] | None = before) -> None:
                now = best_of(results)
                prune_run(Path(row["dir"]), keep_weights=now is row)
                if before is not None and now is row:  # a new best: the old best's weights go
                    prune_run(Path(before["dir"]), keep_weights=False)
                record(complete=False)

            write_once(prune)

    def choose_and_copy() -> dict[str, Any]:
        best = best_of(results)
        assert best is not None
        for item in Path(best["dir"]).iterdir():
            if not item.is_file() or folders.is_bookkeeping(item.name):  # the run's own manifest stays its own
                continue
            if item.name in WEIGHT_FILES:
                folders.record(output_dir / item.name)
                os.replace(item, output_dir / item.name)  # moved, not copied: one copy of the weights
            else:
                with atomic_write(output_dir / item.name, "wb") as f, open(item, "rb") as src:
                    shutil.copyfileobj(src, f)
        return record(complete=True)

    return write_once(choose_and_copy)


__getattr__ = _aliases.getter(__name__)  # old spellings: the defaults moved to spanbert.tasks.options
