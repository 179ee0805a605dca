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
from spanbert.metrics.resample import ExampleStats, read_example_stats
from spanbert.study.cells import plan
from spanbert.study.layout import (
    ESTIMATE_FILE,
    HELDOUT_STATS,
    finetune_cell_dir,
    pretrain_dir,
    pretrain_seeds_of,
    shared_dir,
)
from spanbert.study.runner import in_log, write_csv
from spanbert.study.spec import Study, StudyTask, SystemSpec, is_random_init, subtask_options
from spanbert.study.stats import Comparison, example_sampling_variance, mean_std, paired_comparison, seed_comparison
from spanbert.tasks import TASKS
from spanbert.tasks import score as score_model
from spanbert.utils import atomic_write, write_json


def _read(marker: Path) -> dict[str, Any] | None:
    try:
        return json.loads(marker.read_text())
    except (OSError, ValueError):
        return None


def _units(study: Study, s: SystemSpec, t: StudyTask, lr: float, over: list[int | None],
           replicated: bool) -> list[list[tuple[str, Path, dict[str, Any]]]] | None:  # fmt: skip
    """The finished cells of row ``s`` and task ``t`` at ``lr`` grouped by unit ((test set, folder, result)
    each), the pre-training seeds ``over``; None while one is unfinished. A pre-training seed's unit holds all
    its cells; without pre-training seeds each fine-tuning seed is one."""
    out = []
    for k in over:
        group = []
        for seed in range(study.seeds):
            cells = []
            for f in t.folds or [None]:
                d = finetune_cell_dir(study, s.name, t.name, lr, seed, f, k)
                info = _read(d / "result.json")
                if info is None:
                    return None
                cells.append(("heldout" if f is None else f"fold{f}", d, info))
            group.append(cells)
        out += [[c for g in group for c in g]] if replicated else group
    return out


def collect(study: Study) -> dict[str, dict[str, dict[str, Any]]]:
    """results[system][task] = {lr (selected), scores (dev, per unit at that lr), by_lr, heldout (per unit),
    unit, cells, ...}. A unit is a pre-training seed (its score the mean over its fine-tuning seeds and
    folds) when the study has several; else a fine-tuning seed of the one checkpoint (the mean over its
    folds). The rate is the paper's choice, per system and task: the best mean dev score, over the first
    pre-training seed's cells when only it ran the grid (`Study.grid_on_first_seed`)."""
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for s in study.systems:
        seeds = pretrain_seeds_of(study, s)
        replicated = len(seeds) > 1
        grid_seeds = seeds[:1] if study.grid_on_first_seed and replicated else seeds
        for t in study.tasks:
            by_lr: dict[float, list[float]] = {}
            for lr in t.learning_rates:
                got = _units(study, s, t, lr, grid_seeds, replicated)
                if got is not None:
                    by_lr[lr] = [float(np.mean([i["dev"] for _, _, i in u])) for u in got]
            if len(by_lr) < len(t.learning_rates):
                continue  # the grid is not finished: no rate is selected yet
            best_lr = max(by_lr, key=lambda lr: (np.mean(by_lr[lr]), -lr))  # the paper: best dev mean
            chosen = _units(study, s, t, best_lr, seeds, replicated)
            if chosen is None:
                continue
            infos = [i for u in chosen for _, _, i in u]
            sources = {i.get("heldout_source", "legacy") for i in infos}
            held = None
            if all(i.get("heldout") is not None for i in infos):
                held = [float(np.mean([i["heldout"] for _, _, i in u])) for u in chosen]
            if held is not None:
                note = f"{sources.pop()}" if len(sources) == 1 else "mixed"
            elif "legacy" in sources:
                note = "none: cells finished before held-out scoring (rerun into a new output_dir to get one)"
            else:
                note = "none: the task has no test file and its dev set is not split (give test:)"
            results.setdefault(s.name, {})[t.name] = {
                "lr": best_lr, "scores": [float(np.mean([i["dev"] for _, _, i in u])) for u in chosen], "by_lr": by_lr,
                "heldout": held, "heldout_source": note,
                "unit": "pre-training seeds" if replicated else "fine-tuning seeds",
                "replicated": replicated, "fixed": bool(s.checkpoint),
                "rate_chosen_on": "pre-training seed 0" if grid_seeds != seeds else "every checkpoint",
                "cells": [[(key, str(d)) for key, d, _ in u] for u in chosen],
            }  # fmt: skip
    return results


def score_tests(study: Study, results: dict) -> None:
    """Score each task's test split with the selected models only (every cell at the chosen rate), when
    the held-out scoring has not done it already; each unit's test score is the mean of its cells'."""
    for s in study.systems:
        for t in study.tasks:
            cell = results.get(s.name, {}).get(t.name)
            if not t.test or cell is None:
                continue
            tests = []
            for unit in cell["cells"]:
                scores = []
                for _, d in unit:
                    d = Path(d)
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
                    scores.append(float(numbers.get(TASKS[t.task].metric, float("nan"))))
                tests.append(float(np.mean(scores)))
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
            rate = f"; lr {r['lr']:g}" if len(study_rates(study, c)) > 1 else ""
            cells.append(f"{text} (dev {m:.1f} ± {sd:.1f}{rate})" if split == "dev" else text)
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


def study_rates(study: Study, task: str) -> list[float]:
    return next(t.learning_rates for t in study.tasks if t.name == task)


def _example_stats(cells: list[list[tuple[str, str]]]) -> list[list[tuple[str, ExampleStats]]] | None:
    """Each unit's cells' per-example statistics on their held-out data (`HELDOUT_STATS`), or None when a
    cell has none (a task that writes none, a cell finished before they existed)."""
    out = []
    for unit in cells:
        group = []
        for key, d in unit:
            path = Path(d) / HELDOUT_STATS
            if not path.is_file():
                return None
            group.append((key, read_example_stats(path)))
        out.append(group)
    return out


def comparisons(study: Study, results: dict) -> list[tuple[str, Comparison]]:
    """Every pair of rows on every task, on the held-out scores when both have them. Rows with several
    pre-training seeds (or a fixed checkpoint) are compared over those seeds, with the test examples'
    sampling variance when every cell wrote its per-example statistics (`seed_comparison`); a trained row
    with one pre-training run gives a comparison of two checkpoints (paired over fine-tuning seeds), said so."""
    out = []
    names = [s.name for s in study.systems]
    for t in study.tasks:
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                ra, rb = results.get(a, {}).get(t.name), results.get(b, {}).get(t.name)
                if not (ra and rb):
                    continue
                # on the held-out scores when both have them: the dev scores selected the models
                on = "heldout" if ra.get("heldout") and rb.get("heldout") else "scores"
                by_seed = all(r.get("replicated") or r.get("fixed") for r in (ra, rb)) and not (ra.get("fixed") and rb.get("fixed"))
                if by_seed:
                    stats_a = _example_stats(ra["cells"]) if on == "heldout" else None
                    stats_b = _example_stats(rb["cells"]) if on == "heldout" else None
                    v = example_sampling_variance(stats_a, stats_b) if stats_a and stats_b else None
                    c = seed_comparison(a, b, ra[on], rb[on], v, fixed_a=ra.get("fixed", False), fixed_b=rb.get("fixed", False))
                elif len(ra[on]) == len(rb[on]):
                    c = paired_comparison(a, b, ra[on], rb[on], replicated=False)
                else:
                    continue
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
    cells = plan(study)  # a pending cell (its rate not chosen yet) is planned, not done
    for s in trained:
        infos = [read(c.dir / "cell.json") for c in cells if c.kind == "pretrain" and c.system == s.name]
        got = [i.get("seconds") for i in infos if i]
        rows.append({"stage": f"pre-training {s.name}", "seconds": sum(got) if got else None,
                     "cells": len(infos), "done": len(got)})  # fmt: skip
    for t in study.tasks:
        total, done, planned = 0.0, 0, 0
        for c in cells:
            if c.kind != "finetune" or c.task != t.name:
                continue
            planned += 1
            info = None if c.pending else read(c.dir / "result.json")
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


def _over(study: Study) -> str:
    """What a table's mean ± std is over, in words."""
    if study.pretrain_seeds > 1:
        each = "" if study.seeds == 1 else f", each the mean of {study.seeds} fine-tuning seeds"
        return f"mean ± std over {study.pretrain_seeds} pre-training seeds{each}; a checkpoint row over its fine-tuning seeds"
    return f"mean ± std over {study.seeds} fine-tuning seeds of one pre-training run per system"


def summarize(study: Study) -> Path:
    """Write OUT/summary/ (tables, comparisons, plots) from the finished cells; returns the folder."""
    results = collect(study)
    score_tests(study, results)
    summary = Path(study.output_dir) / "summary"

    def write() -> None:
        folders.make_folders(summary)
        md, rows = table(study, results, "dev")
        parts = [f"## Held-out score (dev score) ({_over(study)} at the learning rate with the best dev mean, per system and task)\n",
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
        lines = ["| task | A | B | scored on | mean A − B | 95% interval | interval | verdict |",
                 "|---|---|---|---|---|---|---|---|"]  # fmt: skip
        crow = [["task", "a", "b", "n", "diff", "low", "high", "method", "verdict", "scored_on"]]
        for task, c in comps:
            interval = "–" if np.isnan(c.t_low) else f"[{c.t_low:+.2f}, {c.t_high:+.2f}]"
            lines.append(f"| {task} | {c.a} | {c.b} | {c.scored_on} | {c.diff:+.2f} | {interval} | {c.method} | {c.verdict} |")
            crow.append([task, c.a, c.b, str(c.n), f"{c.diff:.4f}", f"{c.t_low:.4f}", f"{c.t_high:.4f}", c.method,
                         c.verdict, c.scored_on])  # fmt: skip
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
        if s.checkpoint or is_random_init(s):  # the control trains nothing: no curve
            continue
        # the first pre-training seed's curve stands for the system's (the others' are in their folders)
        log = pretrain_dir(study, s, pretrain_seeds_of(study, s)[0]) / "log.jsonl"
        if not log.is_file():
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
        ax.set_title(f"{t.name}: mean ± std over {rows[0].get('unit', 'seeds')}")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(summary / f"task_{t.name}.png", dpi=120)
        plt.close(fig)
