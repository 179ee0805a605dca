"""The command line forgives: both spellings of an option, and a suggestion for a typo (issue 23 item 3)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from spanbert.config import ArgumentParser, add_dataclass_arguments
from spanbert.errors import SpanBertError
from spanbert.training_args import TrainingArguments

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


def _command_parsers(monkeypatch) -> dict[str, argparse.ArgumentParser]:
    """Every command's parser (and every task action's), as `--help` builds it: prog -> parser."""
    import contextlib
    import io

    from spanbert import cli
    from spanbert.tasks import TASKS

    parsers: dict[str, argparse.ArgumentParser] = {}
    real = argparse.ArgumentParser.parse_known_args

    def keep(self, args=None, namespace=None):
        if self.add_help and "--help" in (args or []):
            parsers.setdefault(self.prog, self)
        return real(self, args, namespace)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", keep)
    helps = [["tokenizer", "train"], ["preprocess"], ["pretrain"], ["fill"], ["study"], ["curve"]]
    helps += [[action, task] for action in cli.TASK_ACTIONS for task in TASKS]
    for argv in helps:
        with contextlib.redirect_stdout(io.StringIO()), pytest.raises(SystemExit):
            cli.main([*argv, "--help"])
    return parsers


def test_help_texts_name_every_option_as_it_is_listed(monkeypatch):
    """One spelling per option: an option a help text names (`--init_from`, not `--init-from`) is one the help
    lists, of this command or of the `spanbert COMMAND` the text names just before it."""
    parsers = _command_parsers(monkeypatch)
    assert "spanbert pretrain" in parsers and "spanbert finetune glue" in parsers and len(parsers) >= 30

    def listed(prog: str) -> set[str]:
        p = parsers[prog]
        return {o for a in p._actions if a.help != argparse.SUPPRESS for o in a.option_strings}

    bad = []
    for prog, p in parsers.items():
        texts = [p.description or "", p.epilog or ""]
        texts += [a.help for a in p._actions if isinstance(a.help, str) and a.help != argparse.SUPPRESS]
        for text in texts:
            for m in re.finditer(r"(?<![\w-])--[a-zA-Z][\w-]*", text):
                before = re.findall(r"spanbert (\w+(?: \w+)?)", text[max(0, m.start() - 60) : m.start()])
                named = [c for c in (before[-1], before[-1].split()[0]) if f"spanbert {c}" in parsers] if before else []
                if m.group() not in listed(f"spanbert {named[0]}" if named else prog):
                    bad.append(f"{prog}: {m.group()} in {text[max(0, m.start() - 40) : m.end() + 20]!r}")
    assert not bad, "\n".join(bad)
