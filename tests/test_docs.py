"""The documentation runs verbatim.

Every ```python block of README.md and docs/*.md is executed as written, and so is every
`python - <<'EOF'` script inside a ```bash block. Each runs in a fresh namespace in a temporary project
folder that already holds what the commands documented before it would have made (tiny stand-ins: a
quick-start model in `runs/spanbert-quickstart/final`, the small model of the README's end-to-end path in
`runs/spanbert-small/final`, a tokenizer, a preprocessed corpus, coreference models), with
`../shared` pointing at the real data folder so that `../shared/data/...` paths resolve as in a
checkout. A snippet that names `../shared/data` is skipped with a reason when the data is absent.

A block that cannot run is marked in the document itself, visibly, by an HTML comment on the line
before its fence: `<!-- no-run: REASON -->`. The test checks that such a reason is given.

Every `spanbert ...` command line of the ```bash blocks is also checked against the command's parser:
the command exists and every `--flag` it uses is one that `spanbert <command> --help` lists.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

_FENCE = re.compile(r"^```(\w*)\s*$")
_NO_RUN = re.compile(r"<!--\s*no-run:\s*(.*?)\s*-->")
_HEREDOC = re.compile(r"^python3? - <<'?(\w+)'?\s*$")


@dataclass
class Block:
    doc: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    no_run: str | None  # the reason given in a `<!-- no-run: ... -->` comment before the fence

    @property
    def id(self) -> str:
        return f"{self.doc.relative_to(REPO)}:{self.line}"


def code_blocks(doc: Path) -> list[Block]:
    """The fenced code blocks of a Markdown file, with the no-run marker that precedes each, if any."""
    lines = doc.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start = i
        i += 1
        body: list[str] = []
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        prev = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        marker = _NO_RUN.search(prev)
        blocks.append(Block(doc, start + 1, m.group(1), "\n".join(body) + "\n", marker.group(1) if marker else None))
        i += 1
    return blocks


def heredoc_scripts(block: Block) -> list[Block]:
    """`python - <<'EOF' ... EOF` scripts inside a bash block, as Python blocks of their own."""
    out: list[Block] = []
    lines = block.code.splitlines()
    i = 0
    while i < len(lines):
        m = _HEREDOC.match(lines[i].strip())
        if m:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == m.group(1))
            script = "\n".join(lines[i + 1 : end]) + "\n"
            out.append(Block(block.doc, block.line + i + 1, "python", script, block.no_run))
            i = end
        i += 1
    return out


ALL_BLOCKS = [b for doc in DOCS for b in code_blocks(doc)]
PYTHON_BLOCKS = [b for b in ALL_BLOCKS if b.lang == "python"] + [
    s for b in ALL_BLOCKS if b.lang == "bash" for s in heredoc_scripts(b)
]
BASH_BLOCKS = [b for b in ALL_BLOCKS if b.lang == "bash"]


def test_the_docs_have_python_snippets_and_every_skip_has_a_reason():
    assert len(PYTHON_BLOCKS) >= 5, [b.id for b in PYTHON_BLOCKS]
    for b in PYTHON_BLOCKS:
        assert b.no_run is None or b.no_run.strip(), f"{b.id}: no-run marker without a reason"
    # sparingly: most Python in the docs must really run
    assert sum(b.no_run is not None for b in PYTHON_BLOCKS) <= len(PYTHON_BLOCKS) // 3


# ---------------------------------------------------------------------------------------------
# The project folder a newcomer would have after the documented commands (tiny stand-ins)


TEXTS = [
    "The Denver Broncos defeated the Carolina Panthers in Super Bowl 50.",
    "Alice met Bob in Paris. She liked him, and he liked the city.",
    "The def statement defines a function; use the break keyword to leave a loop.",
    "A span boundary objective predicts every token of a masked span from its boundaries.",
] * 20


SWAG_HEADER = ["", "video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source",
               "ending0", "ending1", "ending2", "ending3", "label"]  # fmt: skip


def _write_swag(folder: Path, n: int = 12) -> None:
    """train.csv, val.csv and test.csv (no label column) in the released SWAG layout, n rows each."""
    import csv

    folder.mkdir(parents=True)
    words = TEXTS[0].rstrip(".").split()
    for split in ("train", "val", "test"):
        with open(folder / f"{split}.csv", "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(SWAG_HEADER if split != "test" else SWAG_HEADER[:-1])
            for i in range(n):
                sent1, sent2 = " ".join(words[i % 4 : i % 4 + 5]) + ".", words[(i + 5) % len(words)].capitalize()
                endings = [" ".join(words[(i + k) % len(words) :][:3]) + " ." for k in range(4)]
                row = [str(i), f"lsmdc{i // 3}", str(i), f"{sent1} {sent2}", sent1, sent2, "gold", *endings]
                w.writerow(row if split == "test" else [*row, str(i % 4)])


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    import torch

    from spanbert import cloze, folders
    from spanbert.config import model_config
    from spanbert.model import SpanBertForPreTraining
    from spanbert.preprocess import preprocess
    from spanbert.tasks.coref import CorefConfig, CorefModel, save_coref_model
    from spanbert.tokenization import train_tokenizer

    root = tmp_path_factory.mktemp("checkout")
    proj = root / "spanbert"
    runs = proj / "runs"
    runs.mkdir(parents=True)
    if SHARED.exists():  # `../shared/data/...` resolves from the project folder, as in a checkout
        (root / "shared").symlink_to(SHARED.resolve(), target_is_directory=True)

    # `spanbert tokenizer train ... --output_dir runs/tokenizer`
    tok = train_tokenizer(None, vocab_size=300, output_dir=runs / "tokenizer", texts=TEXTS, show_progress=False)
    # `spanbert preprocess ... --output_dir runs/corpus`
    corpus = root / "corpus.txt"
    corpus.write_text("\n\n".join(TEXTS) + "\n", encoding="utf-8")
    preprocess([corpus], runs / "tokenizer", runs / "corpus", num_workers=1, progress=False)

    # `spanbert pretrain` (quick start), the README's small model and its random-init control, and the
    # other pre-training outputs the documents fine-tune (docs/pretraining.md: runs/spanbert-base,
    # runs/bert-base; docs/gpu.md: runs/spanbert-base; docs/results.md: the study's runs/fam/spanbert):
    # the pre-training export layout. Four layers, as the `small` preset, so that the feature-based NER's
    # "last four" rows (`--features table7`) run.
    torch.manual_seed(0)
    config = model_config("tiny", vocab_size=tok.vocab_size, num_hidden_layers=4)
    spanbert = SpanBertForPreTraining(config, sbo=True, nsp=False)
    for name in ("spanbert-quickstart", "spanbert-small", "random-init-small", "spanbert-base", "fam/spanbert"):
        spanbert.save_pretrained(runs / name / "final", tokenizer=tok, extra={"system": "spanbert", "masking": "span"})
    bert = SpanBertForPreTraining(config, sbo=False, nsp=True)
    bert.save_pretrained(runs / "bert-base" / "final", tokenizer=tok, extra={"system": "bert", "masking": "random"})
    # docs/results.md's `spanbert tokenizer train ... --output_dir runs/tok-wiki16k`
    tok.save(runs / "tok-wiki16k")

    # `spanbert pretrain --system cloze ... --output_dir runs/cloze` (docs/cloze.md) and the
    # byte-level BPE runs/bpe/cloze-quick of docs/results.md: the two-tower family
    bpe = cloze.train_cloze_tokenizer(None, 400, texts=TEXTS)
    torch.manual_seed(0)
    lm = cloze.build_model(cloze.cloze_config("tiny", d_model=32, num_heads=2, ffn_dim=64, final_heads=2), bpe)
    for name in ("cloze", "bpe/cloze-quick"):
        lm.save_pretrained(runs / name / "final", tokenizer=bpe)

    # `spanbert finetune coref ... --output_dir runs/coref-litbank` (and docs/coref.md's runs/coref)
    coref = CorefModel(
        model_config("tiny", vocab_size=tok.vocab_size),
        CorefConfig(max_seq_length=32, ffnn_size=16, feature_size=4, max_top_antecedents=5),
    )
    for name in ("coref-litbank", "coref"):
        # claimed as `finetune coref` claims its output folder, so that the documented command may reuse it
        folders.claim_manifest(runs / name, "run", "spanbert finetune coref")
        save_coref_model(coref, runs / name, tok)

    # SWAG is not staged in ../shared/data (the released CSVs are downloaded from rowanz/swagaf): a few
    # rows in that layout, at the path the documents name (`git clone` of swagaf, so swagaf/data/*.csv)
    _write_swag(proj / "swagaf" / "data")
    return proj


def _needs_data(code: str) -> bool:
    return "../shared/data" in code


@pytest.mark.parametrize(
    "block", [pytest.param(b, id=b.id, marks=[pytest.mark.realdata] if _needs_data(b.code) else []) for b in PYTHON_BLOCKS]
)
def test_python_snippet_runs_verbatim(block: Block, project: Path, monkeypatch):
    if block.no_run is not None:
        pytest.skip(f"marked no-run in the document: {block.no_run}")
    if _needs_data(block.code) and not (SHARED / "data").exists():
        pytest.skip(f"needs {SHARED / 'data'}, which is absent")
    monkeypatch.chdir(project)
    code = compile(block.code, block.id, "exec", dont_inherit=True)  # a snippet runs as a user runs it: not under this file's __future__ imports
    with contextlib.redirect_stdout(io.StringIO()):
        exec(code, {"__name__": "__docs__"})


# ---------------------------------------------------------------------------------------------
# Command lines: the command exists and takes every flag shown


def logical_lines(block: Block) -> list[tuple[int, str]]:
    """(line index in the block, text) of each shell line of a bash block: lines continued with a
    backslash joined, trailing ``# comments`` removed."""
    out: list[tuple[int, str]] = []
    lines = block.code.splitlines()
    i = 0
    while i < len(lines):
        start, text = i, lines[i]
        while text.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text.rstrip()[:-1] + " " + lines[i]
        i += 1
        out.append((start, text.split(" #")[0].strip()))
    return out


def _command_lines(block: Block) -> list[tuple[int, list[str]]]:
    """(line, argv after `spanbert`) of each spanbert invocation in a bash block."""
    out: list[tuple[int, list[str]]] = []
    for start, text in logical_lines(block):
        if text.startswith("#"):
            continue
        try:
            words = shlex.split(text)
        except ValueError:
            continue
        for k, w in enumerate(words):
            # `spanbert ...`, `torchrun ... -m spanbert ...`, `OMP_NUM_THREADS=1 spanbert ...`
            if w == "spanbert" and all("=" in v for v in words[:k]) or (w == "spanbert" and words[k - 1] == "-m"):
                out.append((block.line + start + 1, words[k + 1 :]))
                break
    return out


COMMAND_LINES = [
    pytest.param(argv, id=f"{b.doc.relative_to(REPO)}:{line}")
    for b in BASH_BLOCKS
    if b.no_run is None
    for line, argv in _command_lines(b)
]

_COMMANDS_WITH_SUBCOMMAND = {"finetune", "predict", "evaluate", "tokenizer"}


def _help(argv: list[str]) -> str:
    from spanbert.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
        try:
            rc = main([*argv, "--help"])
        except SystemExit as e:  # argparse's --help exits
            rc = e.code
    assert rc in (0, None), f"`spanbert {' '.join(argv)} --help` exited {rc}"
    return buf.getvalue()


def test_commands_are_found():
    assert len(COMMAND_LINES) >= 20


@pytest.mark.parametrize("argv", COMMAND_LINES)
def test_command_line_uses_existing_command_and_flags(argv: list[str]):
    if not argv or argv[0].startswith("-"):
        return  # `spanbert --help`
    n = 2 if argv[0] in _COMMANDS_WITH_SUBCOMMAND else 1
    command = argv[:n]
    text = _help(command)
    known = set(re.findall(r"(?<![\w-])(--[\w-]+)", text))
    for w in argv[n:]:
        if w.startswith("--"):
            flag = w.split("=")[0]
            assert flag in known, f"`spanbert {' '.join(command)}` has no option {flag}"
