"""Every documented fine-tuning, prediction and evaluation command runs as written (issue 23.1).

Each ```bash block of README.md and docs/*.md is taken in order; its `spanbert finetune|predict|evaluate`
lines run in-process, one after the other, in the project folder of tests/test_docs.py (tiny stand-ins
for the models the documents pre-train, `../shared` pointing at the real data), with only size options
appended to fine-tuning (a few training examples and steps, a slice of dev) and to SQuAD prediction
(one article). Variables assigned inside the block (`T=../shared/data/tacred_sample`) are expanded. A
command is skipped, with the reason, when it names a placeholder (`DIR`, `TRAIN.jsonl.gz`), a variable
the block does not set, or an input no earlier command makes (files the documents make in Python or
by hand). Known failures of the documents are marked xfail (strict) with the issue item that fixes them.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import time
from pathlib import Path

import pytest
import test_docs
from test_docs import BASH_BLOCKS, Block, logical_lines, project  # noqa: F401  (the fixture)

# a worktree whose ../shared is elsewhere: SPANBERT_SHARED=/path/to/shared (the folder holding data/)
if os.environ.get("SPANBERT_SHARED"):
    test_docs.SHARED = Path(os.environ["SPANBERT_SHARED"])
SHARED = test_docs.SHARED

ACTIONS = ("finetune", "predict", "evaluate")
# appended to every fine-tuning command: sizes only (and permission to reuse an output folder that an
# earlier document's command made)
FINETUNE_SIZES = {
    "squad": ["--max_train_examples", "16", "--validation_articles", ":1"],
    "mrqa": ["--max_train_examples", "16", "--validation_articles", ":1"],
    "coref": [],
    # enough examples that every label of the dev set occurs (NER's I-LOC is not in the first 16)
    "default": ["--max_train_examples", "500"],
}
COMMON_SIZES = ["--max_steps", "2", "--evals_per_epoch", "1", "--per_device_train_batch_size", "4",
                "--overwrite_output_dir", "true", "--disable_tqdm"]  # fmt: skip
INPUTS = ("--train_file", "--validation_file", "--train", "--dev", "--data", "--data_dir", "--gold", "--model",
          "--predictions", "--drop_ids", "--na_prob")  # fmt: skip
# (document, task) -> why the command fails today (xfail, strict: a fix turns it into a failure to remove)
KNOWN: dict[tuple[str, str], str] = {}
PLACEHOLDERS = {"DIR", ":K", "K:"}
_ASSIGN = re.compile(r"^(?:export\s+)?([A-Za-z_]\w*)=(.*)$")


def _commands(block: Block) -> list[tuple[int, list[str] | str]]:
    """(line, argv after `spanbert`) of each task command of a bash block, variables expanded; a
    string instead of argv is the reason the command cannot run."""
    env: dict[str, str] = {}
    out: list[tuple[int, list[str] | str]] = []
    for start, text in logical_lines(block):
        m = _ASSIGN.match(text)
        if m and " " not in m.group(2).strip().strip("'\"") or (m and m.group(2).strip()[:1] in "'\""):
            env[m.group(1)] = " ".join(shlex.split(m.group(2)))
            continue
        words = text.split()
        k = next((j for j, w in enumerate(words) if w == "spanbert"), None)
        if k is None or len(words) <= k + 1 or words[k + 1] not in ACTIONS:
            continue
        unknown = [v for v in re.findall(r"\$\{?(\w+)\}?", text) if v not in env]
        if unknown:
            out.append((block.line + start + 1, f"uses ${unknown[0]}, which the block does not set"))
            continue
        expanded = re.sub(r"\$\{?(\w+)\}?", lambda v: env[v.group(1)], text)
        try:
            argv = shlex.split(expanded)[k + 1 :]
        except ValueError:
            continue
        if any(w.startswith("[") or w in PLACEHOLDERS or re.fullmatch(r"[A-Z]+\.jsonl\.gz", w) for w in argv):
            out.append((block.line + start + 1, "names a placeholder"))
            continue
        out.append((block.line + start + 1, argv))
    return out


BLOCKS = [b for b in BASH_BLOCKS if b.no_run is None and any(isinstance(c, list) for _, c in _commands(b))]


def _sized(argv: list[str]) -> list[str]:
    action, task = argv[0], argv[1]
    if action == "finetune":
        if "--features" in argv:  # the feature-based NER: its own, smaller option set
            return [*argv, "--max_train_examples", "500", "--overwrite_output_dir", "true"]
        return [*argv, *FINETUNE_SIZES.get(task, FINETUNE_SIZES["default"]), *COMMON_SIZES]
    if task in ("squad", "mrqa") and action in ("predict", "evaluate"):
        # one article, predicted and scored: of the documented slice (`--articles 17:` -> `17:18`), else the first
        given = argv[argv.index("--articles") + 1] if "--articles" in argv else ":"
        start = int(given.split(":")[0] or 0)
        return [*argv, "--articles", f"{start}:{start + 1}"]
    return argv


@pytest.mark.slow
@pytest.mark.realdata
@pytest.mark.parametrize("block", [pytest.param(b, id=b.id) for b in BLOCKS])
def test_documented_commands_run(block: Block, project: Path, monkeypatch, request):  # noqa: F811
    from spanbert.cli import main

    if not (SHARED / "data").exists():
        pytest.skip(f"needs {SHARED / 'data'}, which is absent")
    monkeypatch.chdir(project)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    ran, skipped = 0, []
    for line, argv in _commands(block):
        where = f"{block.doc.name}:{line}"
        if isinstance(argv, str):
            skipped.append(f"{where}: {argv}")
            continue
        missing = [argv[j + 1] for j, w in enumerate(argv[:-1]) if w in INPUTS and not Path(argv[j + 1]).exists()]
        if missing:
            skipped.append(f"{where}: needs {missing[0]}, which no earlier command makes")
            continue
        if "--features" in argv and any(a in argv for a in ("table7", "weighted_sum_last_four", "concat_last_four")):
            skipped.append(f"{where}: needs an encoder of at least 4 layers (the stand-in has 2)")
            continue
        known = KNOWN.get((block.doc.name, argv[1]))
        if known:
            request.applymarker(pytest.mark.xfail(reason=known, strict=True))
        err = io.StringIO()
        t = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            rc = main(_sized(argv))
        print(f"{where}: {time.perf_counter() - t:.1f} s")
        assert rc == 0, f"{where}: `spanbert {' '.join(_sized(argv))}` exited {rc}: {err.getvalue()[-2000:]}"
        ran += 1
    if not ran:
        pytest.skip("; ".join(skipped) or "no runnable command")
    print(f"{block.id}: ran {ran}, skipped {len(skipped)}: " + "; ".join(skipped))
