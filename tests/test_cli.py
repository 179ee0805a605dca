"""The command line forgives: both spellings of an option, and a suggestion for a typo (issue 23 item 3)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from spanbert.config import ArgumentParser, add_dataclass_arguments
from spanbert.errors import SpanBertError
from spanbert.trainer import TrainingArguments

SRC = Path(__file__).resolve().parents[1] / "src" / "spanbert"


def _parser() -> ArgumentParser:
    p = ArgumentParser(prog="spanbert demo")
    add_dataclass_arguments(p, TrainingArguments)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--init-from", dest="init_from")
    p.add_argument("--init_from", dest="init_from")
    p.add_argument("--mode", choices=("nsp", "single"))
    return p


@pytest.mark.parametrize(
    "argv",
    [
        ["--learning_rate", "3e-5"],
        ["--learning-rate", "3e-5"],
        ["--learning-rate=3e-5"],
        ["--learning-ra", "3e-5"],  # a unique prefix, as argparse allows, in the other spelling
    ],
)
def test_hyphen_and_underscore_name_the_same_option(argv):
    assert _parser().parse_args(argv).learning_rate == "3e-5"


def test_options_declared_with_hyphens_take_underscores():
    args = _parser().parse_args(["--dry_run", "--per-device-train-batch-size", "8", "--init-from", "m"])
    assert args.dry_run and args.per_device_train_batch_size == "8" and args.init_from == "m"


def test_values_and_everything_after_double_dash_are_left_alone():
    p = ArgumentParser(prog="demo")
    p.add_argument("--output_dir")
    p.add_argument("rest", nargs="*")
    args = p.parse_args(["--output-dir=my-dir", "--", "--output-dir"])
    assert args.output_dir == "my-dir" and args.rest == ["--output-dir"]


def test_typo_suggests_the_option_in_its_declared_spelling():
    with pytest.raises(SpanBertError, match=re.escape("found unknown option '--learnig_rate' (did you mean '--learning_rate'?)")):
        _parser().parse_args(["--learnig_rate", "1e-3"])
    with pytest.raises(SpanBertError, match=re.escape("(did you mean '--dry-run'?)")):
        _parser().parse_args(["--dryrun"])
    with pytest.raises(SpanBertError, match=re.escape("--mode: found 'singel' (did you mean 'single'?)")):
        _parser().parse_args(["--mode", "singel"])


@pytest.mark.parametrize(
    "argv, contains",
    [
        (["pretrian"], "found unknown command 'pretrian' (did you mean 'pretrain'?)"),
        (["finetune", "sqaud"], "found unknown task 'sqaud' (did you mean 'squad'?)"),
        (["predict", "semevl"], "(did you mean 'semeval'?)"),
        (["pretrain", "--learnig_rate", "1e-3"], "found unknown option '--learnig_rate' (did you mean '--learning_rate'?)"),
        (["finetune", "squad", "--model", "m", "--train_file", "t", "--num_train_epoch", "2", "--doc-sride", "1"],
         "did you mean"),  # a misspelling in the other spelling
        (["tokenizer", "trian"], "found 'trian' (did you mean 'train'?)"),
        (["study", "--dryrun"], "(did you mean '--dry-run'?)"),
    ],
)  # fmt: skip
def test_cli_suggests_commands_tasks_and_options(cli_error, argv, contains):
    err = cli_error(argv, contains=contains)
    assert "usage:" not in err  # one line, not argparse's usage block


def test_cli_takes_hyphenated_options(cli_error):
    # the option is recognised (its value is what is wrong), in the spelling the user typed
    cli_error(["pretrain", "--learning-rate", "abc"], contains="option learning_rate: found 'abc', expected a number")
    cli_error(
        ["finetune", "squad", "--model", "m", "--train-file", "t", "--per-device-train-batch-size", "z"],
        contains="option per_device_train_batch_size: found 'z', expected an integer",
    )


def test_every_command_parser_is_the_forgiving_one():
    """A command's parser built with plain argparse would lose the spellings and the suggestions;
    only the pre-parsers that pick one option out of argv (``add_help=False``) may be plain."""
    plain = []
    for path in SRC.rglob("*.py"):
        for k, line in enumerate(path.read_text().splitlines(), 1):
            if "argparse.ArgumentParser(" in line and "add_help=False" not in line and "class " not in line:
                plain.append(f"{path.relative_to(SRC)}:{k}")
    assert not plain, plain


def test_doc_stride_help_says_step_not_overlap(capsys):
    """spanbert's --doc_stride is run_squad.py's step; transformers' run_qa.py --doc_stride is the overlap
    (issue 23 item 8): the help must say which, with the conversion."""
    from spanbert.cli import main

    with pytest.raises(SystemExit):
        main(["finetune", "squad", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    start = text.index("--doc_stride STRIDE ")
    stride_help = text[start : text.index("(default: 128)", start)]
    for phrase in ["step", "run_squad.py", "overlap", "run_qa.py", "max_seq_length - question tokens - 3 - D"]:
        assert phrase in stride_help, (phrase, stride_help)
    qa_doc = " ".join((SRC.parents[1] / "docs" / "qa.md").read_text().split())
    assert "`--doc_stride` is the *step*" in qa_doc and "is the *overlap*" in qa_doc


@pytest.mark.parametrize("command", ["pretrain", "fill", "study", "curve"])
def test_help_from_the_light_parser_is_the_commands_own(command, capsys):
    """`spanbert COMMAND --help` prints from a parser built without torch (`cli.HELP_PARSERS`); the command's
    own `main` parses with the same function, so both print the same help."""
    import importlib

    from spanbert import cli

    assert command in cli.HELP_PARSERS
    with pytest.raises(SystemExit) as light:
        cli.main([command, "--help"])
    shown = capsys.readouterr().out
    module, func, _ = cli.COMMANDS[command]
    with pytest.raises(SystemExit) as own:
        getattr(importlib.import_module(module), func)(["--help"], f"spanbert {command}")
    assert light.value.code == own.value.code == 0
    assert shown == capsys.readouterr().out and shown.startswith(f"usage: spanbert {command}")


def test_a_usage_error_before_help_is_the_commands_clean_error(cli_error):
    # argparse reads left to right: a missing value before --help is an error, from the light parser too
    cli_error(["pretrain", "--max_steps", "--help"], contains="--max_steps: expected one argument")
