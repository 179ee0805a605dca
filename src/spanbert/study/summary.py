"""The summary of a study from its finished cells: model selection as in the paper (for each system
and task the learning rate with the best mean dev score over seeds), the test split scored with the
selected models only, the tables (held-out score beside the dev score that selected it), the paired
comparisons, and the plots (matplotlib, optional)."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from spanbert import distributed, folders
from spanbert.cost import human_duration
from spanbert.errors import SpanBertError
from spanbert.study.layout import ESTIMATE_FILE, finetune_cell_dir, shared_dir
from spanbert.study.runner import in_log, write_csv
from spanbert.study.spec import Study, is_random_init, subtask_options
from spanbert.study.stats import Comparison, mean_std, paired_comparison
from spanbert.tasks import TASKS
from spanbert.tasks import score as score_model
from spanbert.utils import atomic_write, write_json


def collect(study: Study) -> dict[str, dict[str, dict[str, Any]]]:
    """results[system][task] = {lr, scores (per seed at the selected lr), by_lr, test (if any)}."""
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for s in study.systems:
        for t in study.tasks:
            by_lr: dict[float, list[float]] = {}
            held_by_lr: dict[float, list[float] | None] = {}
            sources: set[Any] = set()
            for lr in t.learning_rates:
                scores, held = [], []
                for seed in range(study.seeds):
                    markers = [finetune_cell_dir(study, s.name, t.name, lr, seed, f) / "result.json" for f in t.folds or [None]]
                    if all(m.is_file() for m in markers):  # a seed's score: the mean over its folds
                        infos = [json.loads(m.read_text()) for m in markers]
                        scores.append(float(np.mean([i["dev"] for i in infos])))
                        sources |= {i.get("heldout_source", "legacy") for i in infos}
                        if all(i.get("heldout") is not None for i in infos):
                            held.append(float(np.mean([i["heldout"] for i in infos])))
                if len(scores) == study.seeds:
                    by_lr[lr] = scores
                    held_by_lr[lr] = held if len(held) == study.seeds else None
            if not by_lr:
                continue
            best_lr = max(by_lr, key=lambda lr: (np.mean(by_lr[lr]), -lr))  # the paper: best dev mean
            held = held_by_lr[best_lr]
            if held is not None:
                note = f"{sources.pop()}" if len(sources) == 1 else "mixed"
            elif "legacy" in sources:
                note = "none: cells finished before held-out scoring (rerun into a new output_dir to get one)"
            else:
                note = "none: the task has no test file and its dev set is not split (give test:)"
            results.setdefault(s.name, {})[t.name] = {"lr": best_lr, "scores": by_lr[best_lr], "by_lr": by_lr,
                                                      "heldout": held, "heldout_source": note}  # fmt: skip
    return results


def score_tests(study: Study, results: dict) -> None:
    """Score each task's test split with the selected models only (one per seed at the chosen rate)."""
    for s in study.systems:
        for t in study.tasks:
            cell = results.get(s.name, {}).get(t.name)
            if not t.test or cell is None:
                continue
            tests = []
            for seed in range(study.seeds):
                d = finetune_cell_dir(study, s.name, t.name, cell["lr"], seed)
                marker = d / "test.json"
                if not distributed.on_main(marker.is_file):
                    log = d / "test_log.txt"
                    try:
                        with in_log(log, f"score {d} on {t.test}"):
                            numbers = score_model(t.task, d, t.test, **subtask_options(t)).numbers
                    except SpanBertError as e:
                        raise SpanBertError(f"study: scoring {t.test} with {d} failed: {e}; see {log}") from None
                    distributed.on_main(lambda m=marker, n=numbers: write_json(m, n))
                numbers = distributed.on_main(lambda m=marker: json.loads(m.read_text()))
                key = TASKS[t.task].metric
                tests.append(float(numbers.get(key, float("nan"))))
            cell["test"] = tests


def table(study: Study, results: dict, split: str = "dev") -> tuple[str, list[list[str]]]:
    """(Markdown, CSV rows) in the paper's layout: a row per system, a column per task, mean ± std over
    seeds at the selected learning rate, the best mean of each column in bold. ``split="dev"``: each
    cell gives the held-out score (data selection did not see) with the dev score that selected it
    beside it, "(dev …)"; "–" where a cell has no held-out score. ``split="test"``: the test split
    scored with the selected models."""
    columns = [t.name for t in study.tasks]
    key = "scores" if split == "dev" else "test"

    def shown(r: dict[str, Any] | None) -> list[float] | None:
        """The scores a cell is ranked by: held-out where there is one (test split: the test scores)."""
        if not r:
            return None
        return (r.get("heldout") or None) if split == "dev" else (r.get("test") or None)

    best = {}
    for c in columns:
        means = [np.mean(v) for s in study.systems if (v := shown(results.get(s.name, {}).get(c)))]
        best[c] = max(means) if means else None
    md = ["| system | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    rows = [["system", *[f"{c} mean" for c in columns], *[f"{c} std" for c in columns], *[f"{c} lr" for c in columns]]]
    if split == "dev":
        rows[0] += [*[f"{c} heldout mean" for c in columns], *[f"{c} heldout std" for c in columns]]
    for s in study.systems:
        cells, means, stds, lrs, hmeans, hstds = [], [], [], [], [], []
        for c in columns:
            r = results.get(s.name, {}).get(c)
            if not r or not r.get(key):
                cells.append("–")
                means.append("")
                stds.append("")
                lrs.append("")
                hmeans.append("")
                hstds.append("")
                continue
            m, sd = mean_std(r[key])
            v = shown(r)
            if v is not None:
                hm, hsd = mean_std(v)
                text = f"{hm:.1f} ± {hsd:.1f}"
                text = f"**{text}**" if best[c] is not None and hm == best[c] else text
                hmeans.append(f"{hm:.4f}")
                hstds.append(f"{hsd:.4f}")
            else:
                text = "–"
                hmeans.append("")
                hstds.append("")
            cells.append(f"{text} (dev {m:.1f} ± {sd:.1f})" if split == "dev" else text)
            means.append(f"{m:.4f}")
            stds.append(f"{sd:.4f}")
            lrs.append(f"{r['lr']:g}")
        md.append(f"| {s.name} | " + " | ".join(cells) + " |")
        rows.append([s.name, *means, *stds, *lrs, *((hmeans + hstds) if split == "dev" else [])])
    return "\n".join(md) + "\n", rows


def heldout_notes(study: Study, results: dict) -> list[str]:
    """One line per task: what its held-out score is (or why it has none)."""
    out = []
    for t in study.tasks:
        notes = sorted({r[t.name]["heldout_source"] for r in results.values() if t.name in r})
        if notes:
            out.append(f"- {t.name}: held-out = {'; '.join(notes)}")
    return out


def comparisons(study: Study, results: dict) -> list[tuple[str, Comparison]]:
    out = []
    names = [s.name for s in study.systems]
    for t in study.tasks:
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                ra, rb = results.get(a, {}).get(t.name), results.get(b, {}).get(t.name)
                if ra and rb:
                    # on the held-out scores when both have them: the dev scores selected the models
                    on = "heldout" if ra.get("heldout") and rb.get("heldout") else "scores"
                    c = paired_comparison(a, b, ra[on], rb[on])
                    c.scored_on = "held-out" if on == "heldout" else "dev"
                    out.append((t.name, c))
    return out


def stage_times(study: Study) -> list[dict[str, Any]]:
    """Every stage's measured wall time from what the finished cells recorded: the shared data (vocabulary
    and preprocessing, `prepared.json`), each system's pre-training cell (`cell.json`), each task's
    fine-tuning cells (`result.json`: the run and the held-out scoring after it). Rows: {stage, seconds
    (None: nothing recorded), cells, done}. A pre-training cell resumed after a kill counts its earlier runs
    up to the checkpoint it resumed from (the checkpoint's ``train_seconds``; the work done again after it
    counts once); a fine-tuning cell killed midway starts over and counts its last run."""
    out = Path(study.output_dir)
    rows: list[dict[str, Any]] = []

    def read(path: Path) -> dict[str, Any] | None:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    trained = [s for s in study.systems if not s.checkpoint]
    if trained:
        prepared = read(shared_dir(study) / "prepared.json") or {}
        seconds = prepared.get("seconds")
        rows.append({"stage": "data", "seconds": sum(seconds.values()) if isinstance(seconds, dict) else None,
                     "cells": 1, "done": int(isinstance(seconds, dict))})  # fmt: skip
    for s in trained:
        info = read(out / "pretrain" / s.name / "cell.json")
        rows.append({"stage": f"pre-training {s.name}", "seconds": info.get("seconds") if info else None,
                     "cells": 1, "done": int(info is not None)})  # fmt: skip
    for t in study.tasks:
        total, done, planned = 0.0, 0, 0
        for s in study.systems:
            for lr in t.learning_rates:
                for seed in range(study.seeds):
                    for fold in t.folds or [None]:
                        planned += 1
                        info = read(finetune_cell_dir(study, s.name, t.name, lr, seed, fold) / "result.json")
                        if info is not None and "seconds" in info:
                            total += float(info["seconds"]) + float(info.get("heldout_seconds") or 0.0)
                            done += 1
        rows.append({"stage": f"fine-tuning {t.name}", "seconds": total if done else None, "cells": planned, "done": done})
    return rows


def stage_table(study: Study) -> tuple[str, list[list[str]]]:
    """(Markdown, CSV rows): each stage's measured wall time (`stage_times`) beside the dry run's estimate
    when the study keeps one (OUT/estimate.json, ``--estimate``), with their ratio: the check that a run
    took what its dry run said."""
    rows = stage_times(study)
    try:
        estimate = json.loads((Path(study.output_dir) / ESTIMATE_FILE).read_text())
    except (OSError, ValueError):
        estimate = {}
    est = estimate.get("stages", {}) if isinstance(estimate, dict) else {}
    per_cell = estimate.get("per_cell", {}) if isinstance(estimate, dict) else {}

    def shown(seconds: float | None, cells: int = 1) -> str:
        if seconds is None:
            return "–"
        return human_duration(seconds) + (f" ({human_duration(seconds / cells)} a cell)" if cells > 1 else "")

    md = ["| stage | estimated | measured | measured / estimated | cells finished |", "|---|---|---|---|---|"]
    csv_rows = [["stage", "estimated_seconds", "measured_seconds", "estimated_per_cell", "measured_per_cell", "cells",
                 "finished"]]  # fmt: skip
    complete = all(r["done"] == r["cells"] for r in rows)
    measured = [r["seconds"] for r in rows if r["seconds"] is not None]
    total = {"stage": "total", "seconds": sum(measured) if measured else None, "cells": 1, "done": int(complete)}
    for r in [*rows, total]:
        name, seconds = r["stage"], r["seconds"]
        e = (estimate.get("total") if isinstance(estimate, dict) else None) if name == "total" else est.get(name)
        e_cell = per_cell.get(name)
        m_cell = seconds / r["done"] if seconds is not None and r["done"] > 1 else None
        ratio = f"{seconds / e:.2f}" if seconds is not None and e and r["done"] == r["cells"] else "–"
        cells = f"{r['done']}/{r['cells']}" if name != "total" else ""
        estimated = "–" if e is None else human_duration(e) + (
            f" ({human_duration(e_cell)} a cell)" if e_cell and r["cells"] > 1 else "")
        md.append(f"| {name} | {estimated} | {shown(seconds, max(1, r['done']))} | {ratio} | {cells} |")
        csv_rows.append([name, "" if e is None else f"{e:.1f}", "" if seconds is None else f"{seconds:.1f}",
                         "" if e_cell is None else f"{e_cell:.1f}", "" if m_cell is None else f"{m_cell:.1f}",
                         str(r["cells"]), str(r["done"])])  # fmt: skip
    note = ("" if est else "No estimate kept: run the dry run with --estimate FILE and give the real run "
            "--estimate FILE to see it here.\n")  # fmt: skip
    return "## Wall time of each stage\n\n" + note + "\n".join(md) + "\n", csv_rows


def summarize(study: Study) -> Path:
    """Write OUT/summary/ (tables, comparisons, plots) from the finished cells; returns the folder."""
    results = collect(study)
    score_tests(study, results)
    summary = Path(study.output_dir) / "summary"

    def write() -> None:
        folders.make_folders(summary)
        md, rows = table(study, results, "dev")
        parts = [f"## Held-out score (dev score) (mean ± std over {study.seeds} seeds at the learning rate with the best dev mean)\n",
                 "Each cell: the score on data that selection did not see (below, per task), then in parentheses the "
                 "dev score that selected the checkpoint and the learning rate (optimistic: used twice for selection). "
                 "Bold: the best held-out mean.\n", *[n + "\n" for n in heldout_notes(study, results)], "\n", md]
        if any(r.get("test") for rs in results.values() for r in rs.values()):
            tmd, trows = table(study, results, "test")
            parts += ["\n## Test (the selected models only)\n", tmd]
            write_csv(summary / "table_test.csv", trows)
        with atomic_write(summary / "table.md") as f:
            f.write("\n".join(parts))
        write_csv(summary / "table.csv", rows)
        comps = comparisons(study, results)
        lines = ["| task | A | B | scored on | mean A − B | 95% t interval | 95% bootstrap interval | verdict |",
                 "|---|---|---|---|---|---|---|---|"]  # fmt: skip
        crow = [["task", "a", "b", "n", "diff", "t_low", "t_high", "boot_low", "boot_high", "verdict", "scored_on"]]
        for task, c in comps:
            lines.append(f"| {task} | {c.a} | {c.b} | {c.scored_on} | {c.diff:+.2f} | [{c.t_low:+.2f}, {c.t_high:+.2f}] | "
                         f"[{c.boot_low:+.2f}, {c.boot_high:+.2f}] | {c.verdict} |")  # fmt: skip
            crow.append([task, c.a, c.b, str(c.n), f"{c.diff:.4f}", f"{c.t_low:.4f}", f"{c.t_high:.4f}",
                         f"{c.boot_low:.4f}", f"{c.boot_high:.4f}", c.verdict, c.scored_on])  # fmt: skip
        with atomic_write(summary / "comparisons.md") as f:
            f.write("\n".join(lines) + "\n")
        write_csv(summary / "comparisons.csv", crow)
        with atomic_write(summary / "results.json") as f:
            f.write(json.dumps(results, indent=2, default=str) + "\n")
        smd, srows = stage_table(study)
        with atomic_write(summary / "stages.md") as f:
            f.write(smd)
        write_csv(summary / "stages.csv", srows)
        _plots(study, results, summary)

    distributed.on_main(write)
    return summary


def _plots(study: Study, results: dict, summary: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("note: no plots (pip install 'spanbert[plot]' for matplotlib)", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    drawn = False
    for s in study.systems:
        log = Path(study.output_dir) / "pretrain" / s.name / "log.jsonl"
        if is_random_init(s) or not log.is_file():  # the control trains nothing: no curve
            continue
        steps, losses, esteps, elosses = [], [], [], []
        for line in log.read_text().splitlines():
            with contextlib.suppress(ValueError):
                rec = json.loads(line)
                if "train/mlm_loss" in rec:
                    steps.append(rec["step"])
                    losses.append(rec["train/mlm_loss"])
                if "eval/mlm_loss" in rec:
                    esteps.append(rec["step"])
                    elosses.append(rec["eval/mlm_loss"])
        if steps:
            line = ax.plot(steps, losses, label=f"{s.name} (train)")[0]
            if esteps:
                ax.plot(esteps, elosses, "o--", color=line.get_color(), label=f"{s.name} (held out)")
            drawn = True
    if drawn:
        ax.set_xlabel("step")
        ax.set_ylabel("MLM loss (nats)")
        ax.set_title(f"pre-training, {study.budget_tokens:,} tokens per system")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(summary / "pretraining.png", dpi=120)
    plt.close(fig)
    for t in study.tasks:
        names = [s.name for s in study.systems if t.name in results.get(s.name, {})]
        if not names:
            continue
        rows = [results[n][t.name] for n in names]
        # the held-out score where every row has one (what comparisons.md compares), the selection's dev
        # score beside it, lighter: it chose the checkpoint, so it flatters every row
        held = all(r.get("heldout") for r in rows)
        bars = [("held-out", "heldout")] if held else []
        bars.append(("dev (selection)" if held else "dev", "scores"))
        fig, ax = plt.subplots(figsize=(max(4, 1.5 * len(names)), 3.5))
        width = 0.8 / len(bars)
        for i, (label, key) in enumerate(bars):
            stats = [mean_std(r[key]) for r in rows]
            ax.bar([x + (i - (len(bars) - 1) / 2) * width for x in range(len(names))], [m for m, _ in stats],
                   width, yerr=[sd for _, sd in stats], capsize=4, label=label, alpha=1.0 if i == 0 else 0.45)  # fmt: skip
        ax.set_xticks(range(len(names)), names, rotation=20, fontsize=8)
        ax.set_ylabel(TASKS[t.task].metric)
        ax.set_title(f"{t.name}: mean ± std over {study.seeds} seeds")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(summary / f"task_{t.name}.png", dpi=120)
        plt.close(fig)
