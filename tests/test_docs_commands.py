"""Every documented fine-tuning, prediction and evaluation command runs as written (issue 23.1).

Each ```bash block of README.md and docs/*.md is taken in order, as a reader would type it: its
`python - <<'EOF'` scripts (the documents make their LitBank splits and random encoders that way) and
`mkdir -p` lines run in place, and its `spanbert finetune|predict|evaluate` lines run in-process, one
after the other, in the project folder of tests/test_docs.py (tiny stand-ins for the models the
documents pre-train, a few SWAG rows since SWAG is not staged, `../shared` pointing at the real data).
Variables assigned inside the block (`T=../shared/data/tacred_sample`) are expanded. Only size options
are appended: to fine-tuning a few training examples and steps, one dev article of the documented
slice and small task layers (coreference, the feature-based NER's biLSTM); to SQuAD/MRQA prediction one
article of the documented slice.

The commands read `../shared/data` through a mirror (`staged`): every file is the staged one (a
link), except the evaluation files that documented prediction and scoring commands read whole, which
are their first records (the first 200 CoNLL-2003 sentences of valid/test, 200 SemEval test records,
100 rows of each GLUE dev/test file, the first paragraph of each SQuAD dev article, 5 PTB files of
dev/test, 2 LitBank documents of dev/test and 4 of train): the same formats and commands, on a prefix of the staged data, so that the file runs in a few
minutes.

A command is skipped, with the reason, when it fine-tunes a model named on the Hugging Face hub
(`--model SpanBERT/spanbert-base-cased`: the tests run offline), or when it names a placeholder
(`DIR`), a variable the block does not set or an input no earlier step makes (none does today). A
fine-tuning command that an earlier document ran already, with the same options and inputs (a document
repeating another's run), is not run twice; its predictions still are. Blocks
marked `<!-- no-run: REASON -->` in a document are left out (docs/parse.md: a folder made by a script
outside the documents). Known failures of the documents are marked xfail (strict) with the issue item
that fixes them.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import test_docs
from test_docs import BASH_BLOCKS, Block, heredoc_scripts, logical_lines, project  # noqa: F401  (the fixture)

# a worktree whose ../shared is elsewhere: SPANBERT_SHARED=/path/to/shared (the folder holding data/)
if os.environ.get("SPANBERT_SHARED"):
    test_docs.SHARED = Path(os.environ["SPANBERT_SHARED"])
SHARED = test_docs.SHARED

ACTIONS = ("finetune", "predict", "evaluate")
# appended to every fine-tuning command: sizes only (and permission to reuse an output folder that an
# earlier document's command made)
FINETUNE_SIZES = {
    "squad": ["--max_train_examples", "16"],
    "mrqa": ["--max_train_examples", "16"],
    # coreference has no example limit: small task layers keep the full LitBank dev evaluation short
    # (and one document a step, its only batch size)
    "coref": ["--ffnn_size", "16", "--max_top_antecedents", "5", "--max_top_spans", "300"],
    # enough examples that every label of the dev set occurs (NER's I-LOC is not in the first 16)
    "default": ["--max_train_examples", "500", "--per_device_train_batch_size", "4"],
}
FINETUNE_SIZES["squad"] += ["--per_device_train_batch_size", "4"]
FINETUNE_SIZES["mrqa"] += ["--per_device_train_batch_size", "4"]
COMMON_SIZES = ["--max_steps", "2", "--evals_per_epoch", "1", "--overwrite_output_dir", "true", "--disable_tqdm"]
# the feature-based NER (`--features`): its own, smaller option set; six heads, so a small biLSTM
FEATURE_SIZES = ["--max_train_examples", "200", "--max_eval_examples", "100", "--max_steps", "2",
                 "--per_device_train_batch_size", "4", "--lstm_hidden_size", "16", "--overwrite_output_dir", "true"]  # fmt: skip
INPUTS = ("--train_file", "--validation_file", "--train", "--dev", "--data", "--data_dir", "--gold", "--model",
          "--predictions", "--drop_ids", "--na_prob")  # fmt: skip
# (document, task) -> why the command fails today (xfail, strict: a fix turns it into a failure to remove)
KNOWN: dict[tuple[str, str], str] = {}
PLACEHOLDERS = {"DIR", ":K", "K:"}
_ASSIGN = re.compile(r"^(?:export\s+)?([A-Za-z_]\w*)=(.*)$")


@dataclass
class Script:
    """A step of a block that is not a spanbert command: Python run in the project folder."""

    code: str


def _commands(block: Block) -> list[tuple[int, list[str] | str | Script]]:
    """(line, step) of each step of a bash block, in order: argv after `spanbert` of a task command,
    variables expanded; a `Script` for a `python - <<'EOF'` heredoc or a `mkdir -p` line; a string
    instead of argv is the reason the command cannot run."""
    env: dict[str, str] = {}
    out: list[tuple[int, list[str] | str | Script]] = []
    scripts = {s.line - block.line - 1: s for s in heredoc_scripts(block)}
    skip_to = -1  # the heredoc's terminator line: its body lines are Python, not shell
    for start, text in logical_lines(block):
        if start <= skip_to:
            continue
        if start in scripts:
            out.append((scripts[start].line, Script(scripts[start].code)))
            skip_to = start + len(scripts[start].code.splitlines()) + 1
            continue
        if text.startswith("#"):
            continue
        m = _ASSIGN.match(text)
        if m and " " not in m.group(2).strip().strip("'\"") or (m and m.group(2).strip()[:1] in "'\""):
            env[m.group(1)] = " ".join(shlex.split(m.group(2)))
            continue
        words = text.split()
        if words[:2] == ["mkdir", "-p"]:  # the one shell command the blocks use to make a folder
            code = "".join(f"Path({w!r}).mkdir(parents=True, exist_ok=True)\n" for w in words[2:])
            out.append((block.line + start + 1, Script("from pathlib import Path\n" + code)))
            continue
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


def _one_article(argv: list[str], option: str) -> list[str]:
    """`option` narrowed to one article of the documented slice (`17:` -> `17:18`), else the first."""
    given = argv[argv.index(option) + 1] if option in argv else ":"
    start = int(given.split(":")[0] or 0)
    return [option, f"{start}:{start + 1}"]


def _sized(argv: list[str]) -> list[str]:
    action, task = argv[0], argv[1]
    if action == "finetune":
        if "--features" in argv:
            return [*argv, *FEATURE_SIZES]
        sizes = FINETUNE_SIZES.get(task, FINETUNE_SIZES["default"])
        if task in ("squad", "mrqa"):
            sizes = [*sizes, *_one_article(argv, "--validation_articles")]
        return [*argv, *sizes, *COMMON_SIZES]
    if task in ("squad", "mrqa") and action in ("predict", "evaluate"):
        return [*argv, *_one_article(argv, "--articles")]
    return argv


_RAN: dict[tuple, str] = {}  # fine-tuning commands run in this session -> where


def _canonical(argv: list[str]) -> tuple:
    """A command with its options in sorted order (the same run, whatever order a document writes them)."""
    head = [w for w in argv[: next((j for j, w in enumerate(argv) if w.startswith("--")), len(argv))]]
    groups: list[tuple[str, ...]] = []
    for w in argv[len(head) :]:
        if w.startswith("--") or not groups:
            groups.append((w,))
        else:
            groups[-1] = (*groups[-1], w)
    return (*head, *sorted(groups))


def _first_records(separator: str, n: int) -> Callable[[str], str]:
    """The first ``n`` records of a text whose records end with ``separator``, header lines included."""

    def cut(text: str) -> str:
        return separator.join(text.split(separator)[:n]) + separator

    return cut


def _first_lines(n: int) -> Callable[[str], str]:
    return lambda text: "".join(text.splitlines(keepends=True)[:n])


def _first_paragraph(text: str) -> str:
    """A SQuAD file with every article cut to its first paragraph (article slices still name the same articles)."""
    squad = json.loads(text)
    squad["data"] = [{**a, "paragraphs": a["paragraphs"][:1]} for a in squad["data"]]
    return json.dumps(squad)


def _prefixes(data: Path) -> dict[str, Callable[[str], str] | int]:
    """Relative path under data/ -> how the mirror shortens it (a text function, or for a folder the
    number of its first files kept)."""
    out: dict[str, Callable[[str], str] | int] = {
        "conll2003/valid.txt": _first_records("\n\n", 200),
        "conll2003/test.txt": _first_records("\n\n", 200),
        "semeval2010_task8/SemEval2010_task8_testing_keys/TEST_FILE_FULL.TXT": _first_records("\n\n", 200),
        "semeval2010_task8/SemEval2010_task8_testing_keys/TEST_FILE_CLEAN.TXT": _first_lines(200),
        "squad/dev-v1.1.json": _first_paragraph,
        "squad/dev-v2.0.rebuilt.json": _first_paragraph,
        "ptb_sample/dev": 5,
        "ptb_sample/test": 5,
        "litbank_coref/tenfold_splits/0/dev.ids": _first_lines(2),
        "litbank_coref/tenfold_splits/0/test.ids": _first_lines(2),
        "litbank_coref/tenfold_splits/0/train.ids": _first_lines(4),
    }
    for tsv in sorted(data.glob("glue/*/*.tsv")):
        if tsv.name.startswith(("dev", "test")):
            out[str(tsv.relative_to(data))] = _first_lines(101)  # the header and 100 rows
    return out


def _mirror(src: Path, dst: Path, rel: str, short: dict[str, Callable[[str], str] | int]) -> None:
    """``dst`` as ``src``: links, except the entries of ``short`` (and the folders holding them)."""
    dst.mkdir()
    for entry in sorted(src.iterdir()):
        r = f"{rel}{entry.name}"
        how = short.get(r)
        if callable(how):
            (dst / entry.name).write_text(how(entry.read_text(encoding="utf-8")), encoding="utf-8")
        elif isinstance(how, int):
            (dst / entry.name).mkdir()
            for f in sorted(entry.iterdir())[:how]:
                (dst / entry.name / f.name).symlink_to(f.resolve())
        elif any(k.startswith(r + "/") for k in short):
            _mirror(entry, dst / entry.name, r + "/", short)
        else:
            (dst / entry.name).symlink_to(entry.resolve(), target_is_directory=entry.is_dir())


@pytest.fixture(scope="module")
def staged(project: Path) -> Path:  # noqa: F811
    """The project folder, its `../shared/data` a mirror of the staged data with shortened evaluation files."""
    shared = project.parent / "shared"
    if (SHARED / "data").exists():
        if shared.is_symlink():
            shared.unlink()
        shared.mkdir(exist_ok=True)
        if not (shared / "data").exists():
            _mirror((SHARED / "data").resolve(), shared / "data", "", _prefixes((SHARED / "data").resolve()))
    return project


@pytest.mark.slow
@pytest.mark.realdata
@pytest.mark.parametrize("block", [pytest.param(b, id=b.id) for b in BLOCKS])
def test_documented_commands_run(block: Block, staged: Path, monkeypatch, request):
    from spanbert.cli import main
    from spanbert.hub import looks_like_hub_id

    if not (SHARED / "data").exists():
        pytest.skip(f"needs {SHARED / 'data'}, which is absent")
    monkeypatch.chdir(staged)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    ran, skipped = 0, []
    for line, argv in _commands(block):
        where = f"{block.doc.name}:{line}"
        if isinstance(argv, Script):
            t = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(argv.code, where, "exec"), {"__name__": "__docs__"})
            print(f"{where}: script, {time.perf_counter() - t:.1f} s")
            continue
        if isinstance(argv, str):
            skipped.append(f"{where}: {argv}")
            continue
        hub = [argv[j + 1] for j, w in enumerate(argv[:-1]) if w == "--model" and looks_like_hub_id(argv[j + 1])]
        if hub:
            skipped.append(f"{where}: downloads {hub[0]} from the Hugging Face hub (the tests run offline)")
            continue
        missing = [argv[j + 1] for j, w in enumerate(argv[:-1]) if w in INPUTS and not Path(argv[j + 1]).exists()]
        if missing:
            skipped.append(f"{where}: needs {missing[0]}, which no earlier command makes")
            continue
        # a document repeating another's command on the same inputs: once is enough
        key = _canonical(_sized(argv))
        if key in _RAN:
            skipped.append(f"{where}: ran already as {_RAN[key]}")
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
        if argv[0] == "finetune":  # its output folder is what later commands read
            _RAN[key] = where
        ran += 1
    if not ran:
        pytest.skip("; ".join(skipped) or "no runnable command")
    print(f"{block.id}: ran {ran}, skipped {len(skipped)}: " + "; ".join(skipped))
