"""The task interface (`spanbert.tasks.registry`): a task is one `TaskSpec` in `spanbert.tasks.TASKS`.

The toy task below (does a sentence have an even number of words?) is written here, in the test, the
way docs/architecture.md ("Adding a task") says a task file is written, and registered from here: the
CLI's finetune, predict and evaluate, the Python API (test_tasks_api.py) and a study cell then run it, with
no other file edited. A second toy task ("words") has two sub-tasks (its ``--rule``: parity or length) and its own rule
for cutting dev into a selection half and a held-out half; a study runs both sub-tasks, holding out the
half the task's rule chose, with no other file edited either.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from spanbert.cli import main
from spanbert.config import model_config
from spanbert.model import Encoder
from spanbert.tasks import TASKS
from spanbert.tasks import classification as C
from spanbert.tasks import options as O
from spanbert.tasks.finetuning import finetune_options
from spanbert.tasks.ranks import start_distributed, write_json_once
from spanbert.tasks.spec import RESULTS_FILE, Results, SubTasks, TaskSpec
from spanbert.tasks.splits import RecordSplit
from spanbert.tasks.task_folders import load_tokenizer_for
from spanbert.training_args import TrainingArguments

# ----------------------------------------------------------------------------- the toy task file

LABELS = ["odd", "even"]


def read_sentences(path: str, rule: str = "") -> list[tuple[str, str | None]]:
    """One sentence a line, then a tab and its label (optional); with a ``rule`` (the words task's
    sub-task) the label is the rule's, computed from the sentence."""
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        text, _, label = line.partition("\t")
        rows.append((text, RULES[rule](text) if rule else label or None))
    return rows


RULES = {  # the words task's sub-tasks: sentence -> its label (one of LABELS, to share the head)
    "parity": lambda text: LABELS[len(text.split()) % 2 == 0],
    "length": lambda text: LABELS[len(text.split()) > 3],
}


def features(rows: list[tuple[str, str | None]], tokenizer: Any) -> list[dict[str, Any]]:
    out = []
    for text, label in rows:
        ids, types, _ = C.pair_input(tokenizer.cls_id, tokenizer.sep_id, tokenizer.encode(text).ids, None, 32)
        f: dict[str, Any] = {"input_ids": ids, "token_type_ids": types}
        if label is not None:
            f["labels"] = np.int64(LABELS.index(label))
        out.append(f)
    return out


def predict(model_dir: str, rows: list[tuple[str, str | None]]) -> list[str]:
    model, _, tokenizer = C.load_model("sequence", model_dir)
    return [LABELS[int(np.argmax(x))] for x in C.predict_logits(model, features(rows, tokenizer), tokenizer.pad_id)]


def score(gold: list[str | None], pred: list[str]) -> dict[str, float]:
    return {"accuracy": 100.0 * sum(g == p for g, p in zip(gold, pred)) / len(gold)}


def finetune_parity(model_dir: str, train: str, dev: str, targs: Any, rule: str = "") -> dict[str, Any]:
    tokenizer = load_tokenizer_for(model_dir)
    train_rows, dev_rows = read_sentences(train, rule), read_sentences(dev, rule)
    model = C.build_model("sequence", model_dir, len(LABELS), seed=targs.seed)
    dev_features = features(dev_rows, tokenizer)

    def predict_dev(m: Any) -> list[str]:
        return [LABELS[int(np.argmax(x))] for x in C.predict_logits(m, dev_features, tokenizer.pad_id)]

    done = C.finetune_selected(model, features(train_rows, tokenizer), targs, tokenizer.pad_id, predict_dev,
                               lambda p: score([r[1] for r in dev_rows], p))  # fmt: skip
    C.save_model(model, targs.output_dir, tokenizer, "sequence", LABELS, {"task": "parity"})
    metrics = score([r[1] for r in dev_rows], done.predictions)
    write_json_once(Path(targs.output_dir) / RESULTS_FILE, metrics)
    return metrics


@dataclass(kw_only=True)
class ParityFinetune(O.Finetune):
    train_file: str = O.option(path="input")
    """sentences with labels"""
    validation_file: str | None = O.option(None, path="input")
    """dev sentences with labels"""
    training: TrainingArguments = O.nested(TrainingArguments, title="training",
                                           defaults={"output_dir": "runs/parity", **O.selection_defaults("accuracy")})  # fmt: skip


@dataclass(kw_only=True)
class ParityPredict(O.Inference):
    model: str = O.option(path="input")
    """fine-tuned parity model"""
    data: str = O.option(path="input")
    """sentences"""
    output: str = O.option(path="output_file")
    """one label a line"""


@dataclass(kw_only=True)
class ParityEvaluate(O.Inference):
    data: str = O.option(path="input")
    """sentences with labels"""
    predictions: str | None = O.option(None, path="input")
    """labels written by predict"""
    model: str | None = O.option(None, path="input")
    """fine-tuned model folder: predict, then score"""


def _finetune(task: str, opts: ParityFinetune) -> Results:
    run = lambda targs: finetune_parity(opts.model, opts.train_file, opts.validation_file, targs)  # noqa: E731
    return finetune_options(opts, run, "accuracy", f"spanbert finetune {task}")


def _predict(task: str, opts: ParityPredict) -> Path:
    start_distributed(opts.device)
    Path(opts.output).write_text("".join(p + "\n" for p in predict(opts.model, read_sentences(opts.data))))
    return Path(opts.output)


def _evaluate(task: str, opts: ParityEvaluate) -> Results:
    O.one_of(opts, "predictions", "model")
    rows = read_sentences(opts.data)
    pred = predict(opts.model, rows) if opts.model else Path(opts.predictions).read_text().split()
    return Results(score([r[1] for r in rows], pred), "accuracy")


SPEC = TaskSpec(
    name="parity",
    description="toy: does a sentence have an even number of words?",
    finetune=_finetune,
    predict=_predict,
    evaluate=_evaluate,
    metric="accuracy",
    data="one sentence a line, a tab, odd or even",
    dev_split=RecordSplit(".txt", "rows"),  # no header line: every line is a sentence
    scores_test=True,
    options={"finetune": ParityFinetune, "predict": ParityPredict, "evaluate": ParityEvaluate},
)

# ----------------------------------------------------------------------------- the words task file


@dataclass(kw_only=True)
class WordsFinetune(ParityFinetune):
    rule: str = O.option(choices=tuple(RULES))
    """the sub-task: which label to learn"""
    training: TrainingArguments = O.nested(TrainingArguments, title="training",
                                           defaults={"output_dir": "runs/words", **O.selection_defaults("accuracy")})  # fmt: skip


@dataclass(kw_only=True)
class WordsEvaluate(ParityEvaluate):
    rule: str = O.option(choices=tuple(RULES))
    """the sub-task: which label to learn"""


def _words_finetune(task: str, opts: WordsFinetune) -> Results:
    run = lambda targs: finetune_parity(opts.model, opts.train_file, opts.validation_file, targs, opts.rule)  # noqa: E731
    return finetune_options(opts, run, "accuracy", f"spanbert finetune {task}")


def _words_evaluate(task: str, opts: WordsEvaluate) -> Results:
    O.one_of(opts, "predictions", "model")
    rows = read_sentences(opts.data, opts.rule)
    pred = predict(opts.model, rows) if opts.model else Path(opts.predictions).read_text().split()
    return Results(score([r[1] for r in rows], pred), "accuracy")


@dataclass(frozen=True)
class EveryOtherLine:
    """The words task's own dev rule: the odd lines of dev select, the even lines are held out."""

    restriction: tuple[str, ...] = ()

    def halves(self, train: str, dev: str, options: Any, folder: Path) -> tuple[Path, Path]:
        return folder / "odd-lines.txt", folder / "even-lines.txt"

    def split(self, train: str, dev: str, options: Any, folder: Path) -> dict[str, Any]:
        lines = Path(dev).read_text().splitlines(keepends=True)
        select, held = self.halves(train, dev, options, folder)
        select.write_text("".join(lines[0::2]))
        held.write_text("".join(lines[1::2]))
        return {"dev": dev, "rule": "every other line", "select": len(lines[0::2]), "heldout": len(lines[1::2])}


WORDS_SPEC = TaskSpec(
    name="words",
    description="toy: a label of a sentence's words, by one of two rules (--rule)",
    finetune=_words_finetune,
    predict=_predict,
    evaluate=_words_evaluate,
    metric="accuracy",
    data="one sentence a line",
    dev_split=EveryOtherLine(),
    subtasks=SubTasks(option="rule", key="words_rule", names=tuple(RULES),
                      canonical=lambda name: name.lower() if name.lower() in RULES else None),
    options={"finetune": WordsFinetune, "predict": ParityPredict, "evaluate": WordsEvaluate},
)

# ----------------------------------------------------------------------------- the tests

WORDS = "the cat sat on a mat and dog ran far".split()


def _write(path: Path, n: int, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(n):
        k = int(rng.integers(1, 8))
        lines.append(" ".join(rng.choice(WORDS, k)) + "\t" + LABELS[k % 2 == 0])
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def parity(monkeypatch, tmp_path):
    monkeypatch.setitem(TASKS._entries, "parity", SPEC)  # the one registry entry, undone after the test
    from spanbert.tokenization import train_tokenizer

    tok = train_tokenizer(None, 120, texts=[" ".join(WORDS)] * 20, show_progress=False)
    torch.manual_seed(0)
    Encoder(model_config("tiny", vocab_size=tok.vocab_size, max_position_embeddings=64)).save_pretrained(
        tmp_path / "encoder", tokenizer=tok
    )
    return tmp_path


TRAIN = ["--max_steps", "2", "--per_device_train_batch_size", "4", "--device", "cpu", "--disable_tqdm",
         "--report_to", "none", "--save_steps", "0", "--logging_steps", "1000", "--warmup_steps", "0"]  # fmt: skip


def test_every_task_has_a_spec_with_its_facts():
    for name in TASKS:
        spec = TASKS[name]
        assert spec.name == name and spec.description and spec.metric and spec.results_file == RESULTS_FILE
        assert set(spec.options) == {"finetune", "predict", "evaluate"}, name


def test_the_task_list_describes_each_task_as_its_spec_does():
    # `spanbert finetune --help` lists the registry's lines without loading a task: each is its spec's
    from spanbert.tasks.registry import _DESCRIPTIONS, _MODULES, Registry

    assert set(_DESCRIPTIONS) == set(_MODULES)
    fresh = Registry(_MODULES, _DESCRIPTIONS)
    for name in _MODULES:
        assert fresh.describe(name) == TASKS[name].description, name


def test_a_task_registered_from_a_test_runs_through_the_cli(parity, capsys):
    d = parity
    train, dev = _write(d / "train.txt", 24, 0), _write(d / "dev.txt", 8, 1)
    out = d / "out"
    assert main(["finetune", "parity", "--model", str(d / "encoder"), "--train_file", str(train),
                 "--validation_file", str(dev), "--output_dir", str(out), *TRAIN]) == 0  # fmt: skip
    assert "accuracy" in json.loads((out / RESULTS_FILE).read_text())
    preds = d / "preds.txt"
    assert main(["predict", "parity", "--model", str(out), "--data", str(dev), "--output", str(preds)]) == 0
    assert len(preds.read_text().split()) == 8
    capsys.readouterr()
    assert main(["evaluate", "parity", "--data", str(dev), "--predictions", str(preds)]) == 0
    by_file = json.loads(capsys.readouterr().out)
    assert main(["evaluate", "parity", "--data", str(dev), "--model", str(out), "--disable_tqdm"]) == 0
    assert json.loads(capsys.readouterr().out) == by_file
    # the task list of `spanbert finetune` comes from the registry
    assert main(["finetune"]) == 2
    assert "parity" in capsys.readouterr().out


def test_a_registered_task_runs_as_a_study_cell(parity, capsys):
    from spanbert import study as S

    d = parity
    train, dev, test = _write(d / "train.txt", 24, 0), _write(d / "dev.txt", 8, 1), _write(d / "test.txt", 8, 2)
    st = S.Study(systems=[S.SystemSpec("enc", checkpoint=str(d / "encoder"))],
                 tasks=[S.StudyTask("parity", train=str(train), dev=str(dev), test=str(test),
                                   options={"max_steps": 2, "per_device_train_batch_size": 4, "report_to": "none"})],
                 seeds=1, output_dir=str(d / "study"))  # fmt: skip
    S.check_study(st, "study")
    cells = [c for c in S.plan(st) if c.kind != "pretrain"]
    assert len(cells) == 1
    S.run_cell(cells[0], st)
    result = json.loads((cells[0].dir / "result.json").read_text())
    assert 0 <= result["dev"] <= 100 and result["heldout_source"] == "test"
    assert 0 <= result["heldout"] <= 100


@pytest.fixture
def words(parity, monkeypatch):
    monkeypatch.setitem(TASKS._entries, "words", WORDS_SPEC)
    return parity


def test_a_task_with_its_own_dev_rule_and_sub_tasks_runs_through_a_study(words):
    from spanbert import study as S

    d = words
    train, dev = _write(d / "train.txt", 24, 0), _write(d / "dev.txt", 9, 1)
    f = d / "study.yaml"
    opts = "{max_steps: 2, per_device_train_batch_size: 4, report_to: none, save_steps: 0}"
    f.write_text(f"systems: [{{name: enc, checkpoint: {d / 'encoder'}}}]\nseeds: 1\noutput_dir: {d / 'study'}\n"
                 f"tasks:\n  - {{task: words, words_rule: parity, train: {train}, dev: {dev}, options: {opts}}}\n"
                 f"  - {{task: words, subtask: length, train: {train}, dev: {dev}, options: {opts}}}\n")  # fmt: skip
    st = S.load_study(f)
    assert [t.name for t in st.tasks] == ["parity", "length"]  # a column per sub-task, by the task's key or subtask:
    cells = [c for c in S.plan(st) if c.kind == "finetune"]
    assert [c.argv[c.argv.index("--rule") + 1] for c in cells] == ["parity", "length"]
    for t in st.tasks:
        S.split_dev(st, t)
    for cell in cells:
        # each sub-task selects on the odd lines of dev (the task's rule) and is scored on the even ones
        odd = S.heldout_dir(st, next(t for t in st.tasks if t.name == cell.task)) / "odd-lines.txt"
        assert cell.options["validation_file"] == str(odd) and len(odd.read_text().splitlines()) == 5
        S.run_cell(cell, st)
        result = json.loads((cell.dir / "result.json").read_text())
        assert result["heldout_source"] == "dev half" and result["heldout_data"].endswith("even-lines.txt")
        assert 0 <= result["dev"] <= 100 and 0 <= result["heldout"] <= 100, result
    split = json.loads((S.heldout_dir(st, st.tasks[0]) / "split.json").read_text())
    assert split == {"dev": str(dev), "rule": "every other line", "select": 5, "heldout": 4}
    # a sub-task the task does not have is refused before any work, with the task's own key and names
    f.write_text(f.read_text().replace("words_rule: parity", "words_rule: colour"))
    with pytest.raises(S.SpanBertError, match="found words_rule 'colour', expected one of: parity, length"):
        S.load_study(f)
