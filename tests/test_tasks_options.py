"""spanbert/tasks/options.py: an action's options as one typed object, the same from a command line and
from Python keywords (issue 59)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

import pytest

from spanbert.errors import SpanBertError
from spanbert.tasks import options as O
from spanbert.training_args import TrainingArguments


@dataclass
class Knobs:
    """A task's own option class, nested in the action's options."""

    window: int | None = None
    """tokens per window"""
    decode: bool = False
    """decode harder"""


@dataclass(kw_only=True)
class Toy:
    """``spanbert finetune toy``."""

    model: str = O.option(path="input")
    """the encoder"""
    train_file: str = O.option(path="input")
    """training data"""
    labels: list[str] | None = None
    """the labels, in order"""
    mode: str = O.option("fast", choices=("fast", "slow"))
    """how"""
    report: str | None = O.option(None, path="output_file")
    """where to write a report"""
    sweep: bool = False
    """try the grid"""
    knobs: Knobs = O.nested(Knobs, title="toy")
    training: TrainingArguments = O.nested(TrainingArguments, defaults={"learning_rate": 2e-5, "output_dir": "runs/toy"})


def test_a_command_line_and_keywords_give_the_same_options(tmp_path):
    report = str(tmp_path / "report.json")
    argv = ["--model", "m", "--train_file", "t.txt", "--labels", "A", "B", "--mode", "slow", "--report", report,
            "--sweep", "--window", "128", "--decode", "false", "--learning_rate", "3e-5", "warmup_ratio=0.2"]  # fmt: skip
    cli = O.parse(Toy, argv, "spanbert finetune toy", "Fine-tune a toy.")
    py = O.from_keywords(Toy, dict(model="m", train_file="t.txt", labels=["A", "B"], mode="slow", report=report,
                                   sweep=True, window=128, decode=False, learning_rate=3e-5, warmup_ratio=0.2), "tasks.finetune('toy')", "spanbert finetune toy")  # fmt: skip
    assert cli == py
    assert cli.knobs == Knobs(window=128, decode=False)
    assert (cli.training.learning_rate, cli.training.warmup_ratio, cli.training.output_dir) == (3e-5, 0.2, "runs/toy")
    assert cli.labels == ["A", "B"] and cli.training.device == "auto"


@dataclass(kw_only=True)
class ToyPredict(O.Inference):
    """``spanbert predict toy``."""

    model: str = O.option(path="input")
    """the fine-tuned model"""
    batch_size: int = 16
    """sentences per batch"""


def test_the_inference_options_are_shared_and_a_task_names_its_batch():
    opts = O.parse(ToyPredict, ["--model", "m", "--disable_tqdm", "--threads", "2"], "p", "d")
    assert (opts.batch_size, opts.device, opts.disable_tqdm, opts.threads) == (16, "auto", True, 2)
    assert opts == O.from_keywords(ToyPredict, {"model": "m", "disable_tqdm": True, "threads": 2}, "c", "p")
    text = O.usage(ToyPredict, "spanbert predict toy", "Predict.")
    assert "sentences per batch (default: 16)" in " ".join(text.split())
    assert text.index("--model") < text.index("--batch_size") < text.index("--device")  # the action's own first


def test_an_option_named_twice_is_a_mistake_of_the_class():
    @dataclass(kw_only=True)
    class Twice(O.Inference):
        training: TrainingArguments = O.nested(TrainingArguments)  # its own --device, as Inference's

    with pytest.raises(ValueError, match="Twice: option 'device' of TrainingArguments is also"):
        O.names(Twice)


def test_the_task_defaults_stand_where_nothing_is_named():
    opts = O.from_keywords(Toy, {"model": "m", "train_file": "t"}, "c", "spanbert finetune toy")
    assert opts.training.learning_rate == 2e-5 and opts.training.max_eval_share == TrainingArguments().max_eval_share
    assert opts == O.parse(Toy, ["--model", "m", "--train_file", "t"], "p", "d")


def test_a_tasks_finetune_defaults_warm_up_a_tenth_and_select_on_dev_unless_it_says_otherwise():
    d = O.finetune_defaults("f1", learning_rate=3e-5, num_train_epochs=2.0)
    assert d == {**O.selection_defaults("f1"), "warmup_ratio": 0.1, "learning_rate": 3e-5, "num_train_epochs": 2.0}
    assert O.finetune_defaults("accuracy", evals_per_epoch=1, warmup_ratio=0.0)["evals_per_epoch"] == 1
    assert O.finetune_defaults("accuracy", warmup_ratio=0.0)["warmup_ratio"] == 0.0
    TrainingArguments(**O.finetune_defaults("f1"))  # every key is a `TrainingArguments` field


def test_naming_an_evaluation_schedule_keeps_it_as_given():
    for opts in (O.parse(Toy, ["--model", "m", "--train_file", "t", "--evals_per_epoch", "2"], "p", "d"),
                 O.from_keywords(Toy, {"model": "m", "train_file": "t", "evals_per_epoch": 2}, "c", "p")):  # fmt: skip
        assert opts.training.evals_per_epoch == 2 and opts.training.max_eval_share == 0.0
    opts = O.from_keywords(Toy, {"model": "m", "train_file": "t", "eval_steps": 5, "max_eval_share": 0.3}, "c", "p")
    assert opts.training.max_eval_share == 0.3


def test_a_mistake_names_a_keyword_from_python_and_a_flag_from_the_command_line():
    with pytest.raises(SpanBertError, match=r"c: found unknown option 'learnig_rate' \(did you mean 'learning_rate'\?\); "
                                            r"expected an option of `spanbert finetune toy`"):  # fmt: skip
        O.from_keywords(Toy, {"model": "m", "train_file": "t", "learnig_rate": 1}, "c", "spanbert finetune toy")
    with pytest.raises(SpanBertError, match=r"found unknown option '--learnig_rate' \(did you mean '--learning_rate'\?\)"):
        O.parse(Toy, ["--model", "m", "--train_file", "t", "--learnig_rate", "1"], "spanbert finetune toy", "d")
    with pytest.raises(SpanBertError, match=r"tasks.finetune\('toy'\): found no train_file=, expected it"):
        O.from_keywords(Toy, {"model": "m"}, "tasks.finetune('toy')", "p")
    with pytest.raises(SpanBertError, match=r"required: --train_file"):
        O.parse(Toy, ["--model", "m"], "p", "d")
    with pytest.raises(SpanBertError, match=r"option mode: found 'quick'.*expected one of: fast, slow"):
        O.from_keywords(Toy, {"model": "m", "train_file": "t", "mode": "quick"}, "c", "p")
    with pytest.raises(SpanBertError, match=r"--mode: found 'quick'"):
        O.parse(Toy, ["--model", "m", "--train_file", "t", "--mode", "quick"], "p", "d")
    with pytest.raises(SpanBertError, match=r"option window: found 'wide', expected an integer"):
        O.from_keywords(Toy, {"model": "m", "train_file": "t", "window": "wide"}, "c", "p")
    with pytest.raises(SpanBertError, match=r"option learning_rate: found 'fast', expected"):
        O.parse(Toy, ["--model", "m", "--train_file", "t", "--learning_rate", "fast"], "p", "d")


def test_a_missing_required_option_is_left_unset_when_only_checking():
    opts = O.from_keywords(Toy, {"window": 64}, "c", "p", partial=True)
    assert opts.model is None and opts.knobs.window == 64


def test_an_output_is_checked_against_every_input_before_anything_runs(tmp_path):
    data = tmp_path / "train.txt"
    data.write_text("x\n")
    for read in (lambda: O.from_keywords(Toy, {"model": "m", "train_file": str(data), "report": str(data)}, "c", "p"),
                 lambda: O.parse(Toy, ["--model", "m", "--train_file", str(data), "--report", str(data)], "p", "d")):  # fmt: skip
        with pytest.raises(SpanBertError, match="train"):
            read()


def test_a_yaml_file_sets_options_under_the_flags_and_the_keywords(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("train_file: t.txt\nwindow: 96\nTrainingArguments:\n  learning_rate: 5.0e-5\n  seed: 3\n")
    cli = O.parse(Toy, ["--model", "m", "--config", str(cfg), "--seed", "4"], "p", "d")
    py = O.from_keywords(Toy, {"model": "m", "config": str(cfg), "seed": 4}, "c", "p")
    assert cli == py
    assert (cli.train_file, cli.knobs.window, cli.training.learning_rate, cli.training.seed) == ("t.txt", 96, 5e-5, 4)
    cfg.write_text("windw: 96\n")
    with pytest.raises(SpanBertError, match=r"c.yaml:1: found unknown option 'windw' \(did you mean 'window'\?\)"):
        O.from_keywords(Toy, {"model": "m", "train_file": "t", "config": str(cfg)}, "c", "p")


def test_help_lists_each_option_with_its_docstring_and_the_task_defaults():
    text = O.usage(Toy, "spanbert finetune toy", "Fine-tune a toy.")
    assert text.startswith("usage: spanbert finetune toy") and "Fine-tune a toy." in text
    for line in ("the labels, in order", "tokens per window", "--config FILE", "key=value"):
        assert line in text, line
    assert "(default: 2e-05)" in " ".join(text.split())
    assert O.names(Toy) >= {"model", "window", "learning_rate", "labels"}


def test_a_task_commands_help_loads_no_torch():
    code = ("import sys; from spanbert.tasks.options import main\n"
            "try:\n    main('squad', 'finetune', ['--help'])\nexcept SystemExit as e:\n    assert e.code == 0\n"
            "assert 'torch' not in sys.modules, 'torch was imported'")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "usage: spanbert finetune squad" in out.stdout and "Fine-tune a pre-trained encoder for squad" in out.stdout


@dataclass(kw_only=True)
class Pick:
    """Training defaults that follow another option (GLUE's follow its ``task``)."""

    task: str = "a"
    """which sub-task"""
    training: TrainingArguments = O.nested(
        TrainingArguments, defaults=lambda given: {"learning_rate": 1e-5 if given.get("task") == "b" else 2e-5})


def test_a_nested_class_takes_defaults_that_follow_another_option():
    assert O.parse(Pick, ["--task", "b"], "p", "d").training.learning_rate == 1e-5
    assert O.from_keywords(Pick, {"task": "b"}, "c", "p").training.learning_rate == 1e-5
    assert O.from_keywords(Pick, {}, "c", "p").training.learning_rate == 2e-5
    assert O.parse(Pick, ["--task", "b", "--learning_rate", "3e-5"], "p", "d").training.learning_rate == 3e-5
    assert "(default: 1e-05)" in " ".join(O.usage(Pick, "p", "d", {"task": "b"}).split())


def test_an_option_set_in_the_yaml_file_is_named_as_a_flag_or_a_keyword_is(tmp_path):
    # what a head's refusals read (`named`): a --config file's key is the user's as much as a flag
    cfg = tmp_path / "run.yaml"
    cfg.write_text("mode: slow\nlearning_rate: 0.01\n")
    cli = O.parse(Toy, ["--model", "m", "--train_file", "t", "--config", str(cfg)], "p", "d")
    py = O.from_keywords(Toy, {"model": "m", "train_file": "t", "config": str(cfg)}, "c", "p")
    assert cli == py and cli.mode == "slow"
    assert O.named(cli) == O.named(py) == {"model", "train_file", "mode", "learning_rate"}
    assert O.named(O.parse(Toy, ["--model", "m", "--train_file", "t"], "p", "d")) == {"model", "train_file"}
