"""The options of `spanbert study` and `spanbert curve`, and the paper's comparisons a study names by
``--preset``: apart from the commands (`spanbert.study.command`), so that their parsers, and so
``--help``, load neither torch nor a task.
"""

from __future__ import annotations

import argparse

from spanbert import threads
from spanbert.config import ArgumentParser
from spanbert.tasks import TASKS
from spanbert.utils import output_file

TRIAL_STEPS = 12
"""``--trial_steps`` by default: the step time is the mean of the steps after the first (which pays for
start-up; `spanbert.study.trials.step_seconds`). A step on 2 cores scatters by 15-20% and slow steps come
in runs: consecutive 5-step means of an 80-step run of the cpu preset's spanbert cell differed by 10-12%
(coefficient of variation), 11-step means by 8-10% (2-core AMD EPYC VM, 2026-12-02); the median of 3
rounds is on top. At that cell's ~1.1 s a step the 3 rounds of its two trained systems take about 80 s."""


PRESET_SYSTEMS: dict[str, list[str]] = {
    "table1": ["google-bert", "bert", "bert-1seq", "spanbert"],
    "table6": ["mask-subword", "mask-whole-word", "mask-named-entity", "mask-noun-phrase", "mask-span"],
    "table7": ["span-2seq-nsp", "span-1seq", "span-1seq-sbo"],
}
"""The systems of each of the paper's comparisons (Tables 1, 6 and 7), by ``--preset`` name."""

PRESETS: tuple[str, ...] = (*sorted(PRESET_SYSTEMS), "cpu")
"""Every ``--preset``: the paper's comparisons (each at a ``--scale``) and ``cpu``, SpanBERT against BERT
and a random-init control sized for 2 CPU cores and 3 hours (one size: no ``--scale``)."""


def study_parser(prog: str = "spanbert study") -> argparse.ArgumentParser:
    """The options of `spanbert study`."""
    p = ArgumentParser(
        prog=prog,
        description="Rerun the paper's comparisons (Table 1: BERT baselines vs SpanBERT; Table 6: masking "
        "schemes; Table 7: NSP / single sequence / SBO) on a corpus, budget and tasks of your choice. "
        "Every cell is its own folder; a killed study resumes where it stopped.",
        epilog="examples:\n  spanbert study --preset cpu --dry-run\n"
        "  spanbert study --preset table1 --scale tiny --dry-run\n"
        "  spanbert study --preset table1 --scale tiny --output_dir runs/study-table1\n"
        "  spanbert study my_study.yaml --only summary",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("study", nargs="?", help="the study's YAML file (see docs/study.md); or use --preset")
    p.add_argument("--preset", choices=PRESETS,
                   help="a preset instead of a file: one of the paper's comparisons (table1, table6, table7, at a "
                        "--scale), or cpu: spanbert, bert-1seq and a random-init control, 3 pre-training seeds each, "
                        "beside the real all-MiniLM-L6-v2 weights, on the span probes, CoNLL-2003 NER and LitBank "
                        "in about 3 hours on 2 CPU cores")
    p.add_argument("--scale", choices=("tiny", "small", "base"),
                   help="size of a table preset: tiny (CPU smoke test, < 1 h on 2 cores), small, base (GPU) "
                        "(default: tiny; the cpu preset has one size)")
    p.add_argument("--data_root", "--data-root", default="../shared/data", help="presets: the data folder (default: ../shared/data)")
    p.add_argument("--output_dir", "--output-dir",
                   help="where the cells and the summary go (default: the study's, runs/study-PRESET-SCALE, or runs/study-cpu)")
    p.add_argument("--dry-run", "--dry_run", action="store_true",
                   help="print the plan and a measured estimate of each stage (data, each system's pre-training, each "
                        "task's fine-tuning); run nothing, write nothing in the output folder")
    p.add_argument("--trial_steps", "--trial-steps", "--probe_steps", "--probe-steps", dest="trial_steps", type=int, default=TRIAL_STEPS,
                   help=f"with --dry-run: time this many pre-training steps of each system, and short fine-tuning runs "
                        f"of each task (0: no trial, an estimate from FLOPs only) (default: {TRIAL_STEPS})")
    p.add_argument("--time_limit", "--time-limit", metavar="DURATION",
                   help="with --dry-run: check the measured estimate against this wall time (e.g. 3h, 2h30m) and, "
                        "if it does not fit with 10%% to spare, print the pre-training budget (--budget_tokens) that "
                        "does (default: 3h for --preset cpu, none otherwise)")
    p.add_argument("--estimate", metavar="FILE",
                   help="with --dry-run: also write the estimate to FILE (JSON, outside the output folder); otherwise: "
                        "FILE of an earlier dry run, kept in the study folder so that the summary's stage table "
                        "shows it beside the measured times")
    p.add_argument("--only", choices=("all", "pretrain", "finetune", "summary"), default="all",
                   help="run only these cells (summary: only collect finished cells)")
    p.add_argument("--shard", default="0/1", help="I/N: this process runs every N-th fine-tuning cell, from the I-th (parallel devices)")
    threads.add_option(p, " of every cell (other shards count as other processes)")
    p.add_argument("--seeds", type=int, help="override the number of fine-tuning seeds")
    p.add_argument("--budget_tokens", "--budget-tokens", type=int, help="override the pre-training budget in tokens")
    p.add_argument("--families", metavar="F[,F]",
                   help="override the study's families: put every system row that names no family or checkpoint "
                        "on each of these model families (bert, modernbert; e.g. --preset cpu --families modernbert)")
    p.add_argument("--write_config", "--write-config", type=output_file,
                   help="write the study (e.g. a preset) as YAML to this file and stop")
    p.add_argument("--allow_long_run", "--allow-long-run", action="store_true",
                   help="start a study whose fine-tuning is estimated at more than a week on this machine anyway; "
                        "passed to every cell's command, whose own plan is refused over a week without it")
    return p  # fmt: skip


def curve_parser(prog: str = "spanbert curve") -> argparse.ArgumentParser:
    """The options of `spanbert curve`."""
    p = ArgumentParser(
        prog=prog,
        description="Fine-tune from every saved checkpoint of a pre-training run and draw the score against "
        "the pre-training step (BERT Appendix C.1, Figure 5): when is a (continued) pre-training run good "
        "enough? Keep the checkpoints when pre-training (spanbert pretrain --save_total_limit 100, say). "
        "Resumable like a study.",
        epilog="example:\n  spanbert curve runs/spanbert-small --task glue --glue_task SST-2 "
        "--train ../shared/data/glue/SST-2 --learning_rate 3e-4 --option max_train_examples=2000",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("run", help="a `spanbert pretrain` output folder (checkpoint-N/ and final/)")
    p.add_argument("--task", required=True, choices=list(TASKS), help="the fine-tuning task")
    p.add_argument("--train", required=True, help="training file (glue: the task folder; coref: LitBank folder or file)")
    p.add_argument("--dev", default="", help="dev file (not for glue)")
    p.add_argument("--subtask", "--glue_task", "--glue-task", dest="subtask", default="",
                   help="for a task made of several, the one to run (glue: SST-2, CoLA, MRPC, STS-B, RTE, ...)")
    p.add_argument("--fold", type=int, action="append", default=[],
                   help="for data published as folds, a fold to run (coref on the LitBank folder: 0..9)")
    p.add_argument("--learning_rate", "--learning-rate", type=float, default=3e-5, help="fine-tuning learning rate")
    p.add_argument("--seeds", type=int, default=1, help="fine-tuning seeds per checkpoint (default: 1)")
    threads.add_option(p)
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a further `spanbert finetune TASK` option (repeatable), e.g. num_train_epochs=1")
    p.add_argument("--output_dir", "--output-dir", help="default: RUN/curve-TASK")
    return p  # fmt: skip
