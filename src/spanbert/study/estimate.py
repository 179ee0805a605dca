"""What a study costs before it runs (`--dry-run`, and the warning or refusal before the cells run):
tokens and steps per cell, a short measured pre-training probe that writes only to a temporary
folder, and an estimate of every fine-tuning cell from `spanbert.cost`."""

from __future__ import annotations

import gzip
import json
import tempfile
from pathlib import Path

import numpy as np
import torch

from spanbert import cost, distributed
from spanbert.config import MODEL_PRESETS
from spanbert.data import is_preprocessed, preprocess
from spanbert.errors import SpanBertError
from spanbert.study.cells import candidate_kinds, is_done, plan
from spanbert.study.heldout import HELDOUT_SEED, heldout_plan, study_is_legacy
from spanbert.study.layout import Cell, shared_dir
from spanbert.study.runner import run_command
from spanbert.study.spec import Study
from spanbert.tokenization import corpus_files, load_tokenizer, train_tokenizer


def dry_run(study: Study, probe_steps: int = 0) -> str:
    """The plan with its cost: tokens and steps per cell, and time from a short measured probe."""
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
    if probe_steps and pre:
        per_step, what = _probe(study, pre[0], probe_steps)
        lines.append(f"probe: {probe_steps} steps of {pre[0].system} on {what}, at {per_step:.2f} s a step → about "
                     f"{_human(per_step * study.pretrain_steps)} per system, {_human(per_step * study.pretrain_steps * len(pre))} "
                     f"for all pre-training on this machine (fine-tuning not probed)")  # fmt: skip
    if fine:
        line, large = finetune_estimate(study)
        lines.append(("warning: this study's fine-tuning is very large for this machine; " if large else "") + line)
    for c in cells:
        lines.append(f"  {'[done] ' if is_done(c) else ''}{c.label}: {c.dir}")
    return "\n".join(lines)


# The probe's text when the shared corpus is not prepared yet: enough for a tokenizer and the blocks of
# a few steps, read in seconds (the full corpus is the study's first step, not the dry run's).
PROBE_SAMPLE_CHARS = 2_000_000


def _probe_corpus(study: Study, tmp: Path) -> tuple[str, str]:
    """(preprocessed corpus folder, what it is) for the probe, writing only under ``tmp``: the study's
    shared corpus when an earlier run prepared it, the study's own corpus when it is already
    preprocessed, else a sample of the first ``PROBE_SAMPLE_CHARS`` characters tokenized here."""
    shared = shared_dir(study)
    if (shared / "prepared.json").is_file() and is_preprocessed(shared / "corpus"):
        return str(shared / "corpus"), "the study's prepared corpus"
    needs_candidates = sorted({k for s in study.systems if not s.checkpoint for k in candidate_kinds(s)})
    if is_preprocessed(study.corpus) and not needs_candidates and not study.tokenizer:
        return study.corpus, "the preprocessed corpus"
    files = corpus_files([study.corpus])
    jsonl = ".jsonl" in files[0].suffixes
    sample = tmp / ("sample.jsonl" if jsonl else "sample.txt")
    left = PROBE_SAMPLE_CHARS
    with open(sample, "w", encoding="utf-8") as out:
        for f in (f for f in files if (".jsonl" in f.suffixes) == jsonl):
            opener = gzip.open if f.suffix == ".gz" else open
            with opener(f, "rt", encoding="utf-8", errors="replace") as src:
                for line in src:  # whole lines, so documents and JSON records stay intact
                    out.write(line if line.endswith("\n") else line + "\n")
                    left -= len(line)
                    if left <= 0:
                        break
            if left <= 0:
                break
    if study.tokenizer:
        tok = load_tokenizer(study.tokenizer)
    else:
        tok = train_tokenizer([sample], vocab_size=study.vocab_size, output_dir=tmp / "tokenizer", show_progress=False)
    preprocess([sample], tok, tmp / "corpus", num_workers=0, candidates=needs_candidates, progress=False)
    what = f"a {PROBE_SAMPLE_CHARS / 1e6:g} M-character sample of the corpus, vocabulary {tok.vocab_size:,}"
    return str(tmp / "corpus"), what


def _probe(study: Study, cell: Cell, steps: int) -> tuple[float, str]:
    """(seconds per pre-training step of ``cell``, the text it ran on), measured over ``steps`` steps
    after the first (the first pays for start-up): a step's nominal tokens over the median logged
    tokens/s. Everything it writes is in a temporary folder: a dry run leaves the study's folder as
    it was (no vocabulary trained, no corpus preprocessed there)."""
    with tempfile.TemporaryDirectory() as tmp:
        corpus, what = distributed.on_main(lambda: _probe_corpus(study, Path(tmp)))
        argv = list(cell.argv)
        argv[argv.index("--max_steps") + 1] = str(steps + 1)
        argv[argv.index("--corpus") + 1] = corpus
        out = Path(tmp) / "probe"
        argv += ["--output_dir", str(out), "--save_steps", "0", "--max_eval_blocks", "0", "--logging_steps", "1",
                 "--report_to", "none"]  # fmt: skip
        code, last = run_command(argv, Path(tmp) / "probe.log")
        if code != 0:
            raise SpanBertError(f"study: the probe failed: {last}")
        rates = [json.loads(x).get("train/tokens_per_s") for x in (out / "log.jsonl").read_text().splitlines()]
        rates = [r for r in rates[1:] if r]
    if not rates:
        raise SpanBertError("study: the probe logged no throughput; run without --probe_steps")
    return study.batch_size * study.max_seq_length / float(np.median(rates)), what


_human = cost.human_duration


# Fine-tuning epochs assumed for a task whose options name none (most tasks' defaults are 2 to 4).
ASSUMED_EPOCHS = 3


# Characters of a training file per token, for a file whose examples are not counted (English text
# in WordPiece: about 4; JSON keys and markup make this an overestimate of the tokens, on purpose).
CHARS_PER_TOKEN = 4


def finetune_estimate(
    study: Study, device_type: str | None = None, threads: int | None = None, over: float = cost.LONG_PLAN_SECONDS
) -> tuple[str, bool]:
    """(a line estimating every fine-tuning cell's cost, whether it exceeds ``over`` seconds: a day, or
    `cost.LONG_RUN_SECONDS` for the refusal of a week).

    Tokens of one cell: ``max_train_examples`` x ``max_seq_length`` when the task's options bound the
    examples, else the training file's size / `CHARS_PER_TOKEN`; times its ``num_train_epochs``
    (`ASSUMED_EPOCHS` when unnamed); through the encoder of the study's model size
    (`cost.encoder_params`), on this machine (`cost.machine_flops`). Reads file sizes only."""
    device_type = device_type or ("cuda" if torch.cuda.is_available() else "cpu")
    threads = threads or torch.get_num_threads()
    size = MODEL_PRESETS.get(study.model, MODEL_PRESETS["base"])
    params = cost.encoder_params(size["hidden_size"], size["num_hidden_layers"], size.get("intermediate_size"))
    cells = {t.name: 0 for t in study.tasks}
    for c in plan(study):
        if c.kind == "finetune":
            cells[c.task] += 1
    total_seconds, parts = 0.0, []
    for t in study.tasks:
        epochs = float(t.options.get("num_train_epochs", ASSUMED_EPOCHS))
        if "max_train_examples" in t.options:
            per_epoch = int(t.options["max_train_examples"]) * int(t.options.get("max_seq_length", study.max_seq_length))
        else:
            path = Path(t.train)
            files = [f for f in path.rglob("*") if f.is_file()] if path.is_dir() else [path] if path.is_file() else []
            per_epoch = sum(f.stat().st_size for f in files) // CHARS_PER_TOKEN
        seconds = cost.training_flops(params, per_epoch * epochs) / cost.machine_flops(device_type, threads)
        total_seconds += seconds * cells[t.name]
        parts.append(f"{t.name}: {cells[t.name]} × {_human(seconds)}")
    line = (
        f"fine-tuning estimate: {_human(total_seconds)} for all {sum(cells.values())} cells on {device_type} "
        f"({'; '.join(parts)}; {study.model} encoder, {ASSUMED_EPOCHS} epochs where none is named, a training "
        f"file's characters / {CHARS_PER_TOKEN} as its tokens where max_train_examples is not set)"
    )
    return line, total_seconds > over
