"""The commands: `spanbert study` (`main`: a study file or preset, its checks, the cost, the lock, the
cells, the summary) and `spanbert curve` (`curve_main`: fine-tune from every checkpoint of a
pre-training run, BERT Appendix C.1, Figure 5)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch
import yaml

from spanbert import cost, distributed, families, folders
from spanbert.budget import parse_duration
from spanbert.config import _read_yaml
from spanbert.errors import SpanBertError
from spanbert.model import SpanBertForPreTraining
from spanbert.runs import _ckpt_step, _complete
from spanbert.study.cells import check_finished, plan, run_study, study_lock
from spanbert.study.estimate import dry_run, finetune_estimate
from spanbert.study.layout import ESTIMATE_FILE
from spanbert.study.options import curve_parser, study_parser
from spanbert.study.runner import write_csv
from spanbert.study.spec import (
    CPU_TIME_LIMIT,
    Study,
    StudyTask,
    SystemSpec,
    check_study,
    item_lines,
    preset,
    study_from_dict,
)
from spanbert.study.stats import mean_std
from spanbert.study.summary import collect, summarize
from spanbert.tasks import TASKS
from spanbert.utils import atomic_dir, atomic_write, check_output, output_file, remove_debris


def _shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise SpanBertError(f"--shard: found {text!r}, expected I/N (e.g. 0/4)") from None
    if not (n >= 1 and 0 <= i < n):
        raise SpanBertError(f"--shard: found {text!r}, expected 0 <= I < N")
    return i, n


def _time_limit(args: argparse.Namespace) -> tuple[float, str] | None:
    """``--time_limit`` (seconds, as written), checked before any work; the cpu preset's own by default."""
    if args.time_limit is None:
        return (parse_duration(CPU_TIME_LIMIT), CPU_TIME_LIMIT) if args.preset == "cpu" else None
    if not args.dry_run or args.trial_steps <= 0:
        raise SpanBertError(f"--time_limit: found it {'with --trial_steps 0' if args.dry_run else 'without --dry-run'}, "
                            "expected it with a measured dry run (--dry-run, --trial_steps > 0): it checks that "
                            "run's estimate")  # fmt: skip
    return parse_duration(args.time_limit, "--time_limit"), args.time_limit


def main(argv: list[str], prog: str = "spanbert study") -> int:
    args = study_parser(prog).parse_args(argv)
    if bool(args.study) == bool(args.preset):
        raise SpanBertError("found " + ("both a study file and --preset" if args.study else "neither a study file nor --preset")
                            + ", expected exactly one")  # fmt: skip
    shard = _shard(args.shard)
    time_limit = _time_limit(args)
    if args.preset:
        data = preset(args.preset, args.scale, args.data_root)
        if args.preset == "cpu":
            data["output_dir"] = args.output_dir or "runs/study-cpu"
            where = "--preset cpu"
        else:
            scale = args.scale or "tiny"
            data["output_dir"] = args.output_dir or f"runs/study-{args.preset}-{scale}"
            where = f"--preset {args.preset} --scale {scale}"
    elif args.scale:
        raise SpanBertError(f"--scale: found {args.scale!r} with a study file, expected it with a table preset only")
    else:
        data, lines = _read_yaml(args.study)
        data = {**data, "__lines__": {**lines, **item_lines(Path(args.study))}}
        if args.output_dir:
            data["output_dir"] = args.output_dir
        where = args.study
    if args.seeds is not None:
        data["seeds"] = args.seeds
    if args.budget_tokens is not None:
        data["budget_tokens"] = args.budget_tokens
    if args.families is not None:
        data["families"] = [f.strip() for f in args.families.split(",")]
    if args.write_config:
        data.pop("__lines__", None)
        with atomic_write(args.write_config) as f:
            yaml.safe_dump(data, f, sort_keys=False)
        distributed.print0(f"wrote {args.write_config}; run it with: spanbert study {args.write_config}")
        return 0
    study = study_from_dict(data, where)
    # the output contract before any work, a dry run's too: it plans cells into this folder; a study folder
    # (its manifest) or a new one, apart from every file and model the study reads
    inputs = study_inputs(study) + ([("the study file", args.study, False)] if args.study else [])
    check_output(study.output_dir, folder=True, owner="study", inputs=inputs)
    distributed.init_distributed(distributed.resolve_device("auto"))
    estimate = _estimate_file(args.estimate, study, args.dry_run) if args.estimate else None
    if args.dry_run:  # writes nothing in the study's folder: no lock either
        distributed.print0(dry_run(study, args.trial_steps, save=estimate, time_limit=time_limit))
        if estimate:
            distributed.print0(f"wrote the estimate to {estimate}; give it to the real run (--estimate {estimate}) "
                               "for the summary's table of estimated and measured stage times")  # fmt: skip
        return 0
    # the folder held from here to the end: a second study on it is refused before it estimates anything
    with study_lock(study.output_dir, shard):
        if args.only in ("all", "finetune"):
            line, large = distributed.on_main(lambda: finetune_estimate(study))  # one decision, rank 0's machine
            week = distributed.on_main(lambda: finetune_estimate(study, over=cost.LONG_RUN_SECONDS)[1])
            if week and not args.allow_long_run:
                raise SpanBertError(f"this study's fine-tuning would take more than a week on this machine ({line}); "
                                    "make it smaller (fewer tasks, seeds or learning rates, max_train_examples, "
                                    "num_train_epochs), or pass --allow_long_run to start it anyway")  # fmt: skip
            if large:  # said before the first cell runs; every cell's own `finetune` warns again in its log
                distributed.eprint0(f"warning: this study's fine-tuning is very large for this machine; {line}")
        if estimate:  # kept with the study: every later summary sets it beside the measured stage times
            distributed.on_main(lambda: check_finished(plan(study)))  # a refused re-run leaves the folder's as it was
            distributed.on_main(lambda: keep_estimate(study, estimate))
        if args.only != "summary":
            run_study(study, args.only, shard, args.allow_long_run)
        if shard[1] > 1:
            distributed.print0(f"shard {shard[0]}/{shard[1]} finished; when every shard has: spanbert study ... --only summary")
            return 0
        summary = summarize(study)
    if distributed.is_main():
        text = (summary / "table.md").read_text()
        print(text)
        print((summary / "stages.md").read_text())
        print(f"summary: {summary}/ (table.md, table.csv, comparisons.md, stages.md, *.png)")
        print(f"next: read {summary / 'comparisons.md'} to see which differences the seeds support")
    return 0


def _estimate_file(path: str, study: Study, dry_run: bool) -> Path:
    """``--estimate FILE``: where a dry run writes its estimate (a file outside the study's folder, which a
    dry run leaves as it was), or the file of an earlier dry run that a real run keeps."""
    file = Path(path)
    if dry_run:
        out = Path(study.output_dir).resolve()
        if file.resolve() == out or out in file.resolve().parents:
            raise SpanBertError(f"--estimate: found {path} inside the study's folder {study.output_dir}, expected a "
                                "file outside it (a dry run writes nothing there)")  # fmt: skip
        return Path(output_file(path))
    try:
        data = json.loads(file.read_text())
    except (OSError, ValueError) as e:
        raise SpanBertError(f"--estimate: {path}: cannot read it ({e}), expected the JSON file of a dry run "
                            "(spanbert study ... --dry-run --estimate FILE)") from None  # fmt: skip
    if not isinstance(data, dict) or not isinstance(data.get("stages"), dict):
        raise SpanBertError(f"--estimate: {path}: found no \"stages\", expected the JSON file of a dry run "
                            "(spanbert study ... --dry-run --estimate FILE)")  # fmt: skip
    return file


def keep_estimate(study: Study, file: Path) -> None:
    """A dry run's estimate as OUT/estimate.json (`summary.stage_table` reads it)."""
    target = Path(study.output_dir) / ESTIMATE_FILE
    if file.resolve() != target.resolve():
        with atomic_write(target) as f:
            f.write(file.read_text())


def study_inputs(study: Study) -> list[tuple[str, str, bool]]:
    """(what, path, read by name) of everything a study reads: the corpus and tokenizer, the systems'
    checkpoints, the tasks' data; its output folder must be apart from each (`spanbert.utils.check_apart`)."""
    out = [("corpus:", study.corpus, False), ("tokenizer:", study.tokenizer, True)]
    out += [(f"systems: {s.name}: checkpoint:", s.checkpoint, True) for s in study.systems]  # read by name
    out += [(f"tasks: {t.name}: {key}:", getattr(t, key), False) for t in study.tasks for key in ("train", "dev", "test")]
    return [item for item in out if item[1]]


def run_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """The complete `checkpoint-N` folders of a finished pre-training run, by step; an error naming the
    folder when it is not a finished run or keeps none (checked before anything is exported)."""
    final = run_dir / "final"
    if not (final / "config.json").is_file():
        raise SpanBertError(f"{run_dir}: found no final/config.json, expected a finished `spanbert pretrain` run")
    found = [
        (int(_ckpt_step(p)), p)
        for p in sorted((p for p in run_dir.glob("checkpoint-*") if _ckpt_step(p) is not None), key=_ckpt_step)
        if _complete(p) is None
    ]
    if not found:
        raise SpanBertError(
            f"{run_dir}: found no complete checkpoint-N folder, expected the checkpoints of the run (pre-train "
            f"with --save_steps N --save_total_limit M to keep M of them; the last is the final model)"
        )
    return found


def export_checkpoints(run_dir: Path, out: Path) -> list[tuple[int, Path]]:
    """Every complete `checkpoint-N` of a pre-training run as a model folder ``out/step-N`` (exported
    once, with the tokenizer and heads of the run's `final/`); returns [(step, folder)] by step."""
    checkpoints = run_checkpoints(run_dir)
    final = run_dir / "final"
    tokenizer = families.load_framed_tokenizer(final)
    remove_debris(out)  # what a killed export left (`.step-N.tmp-*`): the step is exported again
    models: list[tuple[int, Path]] = []
    for step, ckpt in checkpoints:
        target = out / f"step-{step}"
        if not (target / "config.json").is_file():
            model = SpanBertForPreTraining.from_pretrained(final)
            state = torch.load(ckpt / "state.pt", map_location="cpu", weights_only=True)
            model.load_state_dict(state["model"])
            with atomic_dir(target) as tmp:  # whole or absent: a killed curve redoes the step
                model.save_pretrained(tmp, tokenizer=tokenizer)
        models.append((step, target))
    return models


def _option_value(text: str) -> Any:
    return yaml.safe_load(text)


def curve_main(argv: list[str], prog: str = "spanbert curve") -> int:
    args = curve_parser(prog).parse_args(argv)
    run = Path(args.run)
    options = {}
    for item in args.option:
        if "=" not in item:
            raise SpanBertError(f"--option: found {item!r}, expected KEY=VALUE")
        key, value = item.split("=", 1)
        options[key.strip().lstrip("-")] = _option_value(value)
    task = StudyTask(args.task, train=args.train, dev=args.dev, subtask=args.subtask, folds=args.fold,
                    learning_rates=[args.learning_rate], options=options)  # fmt: skip
    # a curve folder (its manifest) or a new one, apart from what the curve reads: the run's final model and
    # checkpoints (the default RUN/curve-TASK lies beside them), the task's data
    reads = [("the run's model", run / "final", True), *[("a checkpoint", p, True) for p in run.glob("checkpoint-*")],
             ("--train", args.train), ("--dev", args.dev)]  # fmt: skip
    out = check_output(args.output_dir or run / f"curve-{task.name}", folder=True, owner="study", inputs=reads)
    # everything the arguments decide is checked before a checkpoint is exported: the
    # run, then the task, its files, the grid and the seeds, with the run's final model standing in for
    # the exported ones
    run_checkpoints(run)
    check_study(Study(systems=[SystemSpec("final", checkpoint=str(run / "final"))], tasks=[task], seeds=args.seeds,
                      output_dir=str(out)), prog)  # fmt: skip
    distributed.init_distributed(distributed.resolve_device("auto"))
    with study_lock(out):
        models = distributed.on_main(lambda: [(s, str(p)) for s, p in export_checkpoints(run, out / "models")])
        study = Study(systems=[SystemSpec(f"step-{s}", checkpoint=p) for s, p in models], tasks=[task],
                      seeds=args.seeds, output_dir=str(out))  # fmt: skip
        check_study(study, prog)
        run_study(study)
    results = collect(study)

    def write() -> str:
        metric = TASKS[task.task].metric
        rows = [["step", f"dev {metric} mean", "std", "seeds"]]
        md = [f"| pre-training step | dev {metric} (mean ± std over {args.seeds} seeds) |", "|---|---|"]
        points = []
        for step, _ in models:
            r = results.get(f"step-{step}", {}).get(task.name)
            if not r:
                continue
            m, sd = mean_std(r["scores"])
            points.append((step, m, sd))
            rows.append([str(step), f"{m:.4f}", f"{sd:.4f}", str(len(r["scores"]))])
            md.append(f"| {step:,} | {m:.1f} ± {sd:.1f} |")
        with atomic_write(out / "curve.md") as f:
            f.write("\n".join(md) + "\n")
        write_csv(out / "curve.csv", rows)
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt

            fig, ax = plt.subplots(figsize=(6, 4))
            ax.errorbar([p[0] for p in points], [p[1] for p in points], yerr=[p[2] for p in points], marker="o", capsize=3)
            ax.set_xlabel("pre-training step")
            ax.set_ylabel(f"{task.name} dev {metric}")
            ax.set_title(f"{run.name}: fine-tuning score vs pre-training")
            fig.tight_layout()
            folders.record(out / "curve.png")
            fig.savefig(out / "curve.png", dpi=120)
            plt.close(fig)
        except ImportError:
            print("note: no curve.png (pip install 'spanbert[plot]' for matplotlib)", file=sys.stderr)
        return "\n".join(md)

    text = distributed.on_main(write)
    distributed.print0(text)
    distributed.print0(f"curve: {out}/curve.md, curve.csv, curve.png")
    return 0
