"""Every task from Python (`spanbert.tasks.api`): a task's actions return values (`Results`, the `Path` written),
an unknown task or action is one clear error, and a task's options are known and checked by its own parser before
anything runs. The toy task it runs is written and registered in test_tasks_registry.py."""

from __future__ import annotations

import json

import pytest
from test_tasks_registry import _write, parity  # noqa: F401 - parity is a fixture

from spanbert import tasks
from spanbert.errors import SpanBertError
from spanbert.tasks.api import check_options, option_names, spec_of
from spanbert.tasks.spec import RESULTS_FILE, Results


def test_an_unknown_task_or_action_is_one_error():
    assert spec_of("squad") is tasks.TASKS["squad"]
    with pytest.raises(SpanBertError, match=r"found unknown task 'sqaud'.*did you mean 'squad'.*expected one of: "):
        spec_of("sqaud")
    with pytest.raises(SpanBertError, match="found action 'train', expected one of: finetune, predict, evaluate"):
        tasks.run("squad", "train", {})


def test_a_tasks_options_are_its_parsers():
    names = option_names("squad")
    assert {"model", "train_file", "output_dir", "learning_rate", "doc_stride"} <= names
    assert "doc_stride" not in option_names("glue", task="SST-2")


def test_options_are_checked_before_anything_runs():
    check_options("squad", {"learning_rate": 3e-5, "num_train_epochs": 2, "doc_stride": 64})
    with pytest.raises(SpanBertError, match=r"found unknown option 'learning_rat' \(did you mean 'learning_rate'\?\); "
                                            r"expected an option of `spanbert finetune squad`"):  # fmt: skip
        check_options("squad", {"learning_rat": 3e-5})
    with pytest.raises(SpanBertError, match="learning_rate"):
        check_options("squad", {"learning_rate": "fast"})


def test_a_registered_task_runs_from_python(parity):  # noqa: F811
    # the Python API: the same task, its scores as values (no log, no exit code)
    d = parity
    train, dev = _write(d / "train.txt", 24, 0), _write(d / "dev.txt", 8, 1)
    run = tasks.finetune("parity", model=d / "encoder", train=train, dev=dev, output_dir=d / "py", max_steps=2,
                         per_device_train_batch_size=4, device="cpu", disable_tqdm=True, report_to="none",
                         save_steps=0, warmup_steps=0)  # fmt: skip
    assert isinstance(run, Results) and run.output_dir == d / "py" and 0 <= run.score <= 100
    assert run.scores == json.loads((d / "py" / RESULTS_FILE).read_text())
    scored = tasks.score("parity", run.output_dir, dev)
    preds = tasks.predict("parity", model=run.output_dir, data=dev, output=d / "preds.txt")
    assert preds == d / "preds.txt" and len(preds.read_text().split()) == 8
    assert tasks.evaluate("parity", data=dev, predictions=preds).scores == scored.scores
    with pytest.raises(tasks.api.SpanBertError, match="found unknown task 'parityy'.*did you mean 'parity'"):
        tasks.finetune("parityy", model=d, train=train, output_dir=d / "x")


def test_a_registered_task_takes_its_commands_data_options_and_positional_model_and_data(parity):  # noqa: F811
    """Issue 59: ``tasks.finetune`` with the command's own data options (``train_file=``, as GLUE's
    ``data_dir=``) instead of ``train=``; ``tasks.predict(name, model, data)`` as `score` takes them."""
    d = parity
    train, dev = _write(d / "train.txt", 24, 0), _write(d / "dev.txt", 8, 1)
    common = dict(max_steps=2, per_device_train_batch_size=4, device="cpu", disable_tqdm=True, report_to="none",
                  save_steps=0, warmup_steps=0)  # fmt: skip
    run = tasks.finetune("parity", model=d / "encoder", train_file=train, validation_file=dev, output_dir=d / "own",
                         **common)  # fmt: skip
    same = tasks.finetune("parity", model=d / "encoder", train=train, dev=dev, output_dir=d / "kw", **common)
    assert run.scores == same.scores
    preds = tasks.predict("parity", run.output_dir, dev, output=d / "preds.txt")
    assert preds == d / "preds.txt" and len(preds.read_text().split()) == 8
    with pytest.raises(SpanBertError, match=r"found train= and train_file=, expected one of them"):
        tasks.finetune("parity", model=d / "encoder", train=train, train_file=train, output_dir=d / "x")
    with pytest.raises(SpanBertError, match=r"found dev= without train="):
        tasks.finetune("parity", model=d / "encoder", dev=dev, output_dir=d / "x")
    assert not (d / "x").exists()


def test_python_errors_name_keywords_and_the_command_line_names_flags(parity, capsys):  # noqa: F811
    from spanbert.cli import main

    d = parity
    train = _write(d / "train.txt", 24, 0)
    with pytest.raises(SpanBertError) as e:
        tasks.finetune("parity", model=d / "encoder", train=train, output_dir=d / "x", learnig_rate=1e-3)
    assert str(e.value).startswith("tasks.finetune('parity'): found unknown option 'learnig_rate' (did you mean "
                                   "'learning_rate'?)") and "--" not in str(e.value).split("`")[0]  # fmt: skip
    with pytest.raises(SpanBertError, match=r"^option max_steps: found 'many', expected an integer$"):
        tasks.finetune("parity", model=d / "encoder", train=train, output_dir=d / "x", max_steps="many")
    assert main(["finetune", "parity", "--model", str(d / "encoder"), "--train_file", str(train), "--output_dir",
                 str(d / "x"), "--learnig_rate", "1e-3"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "found unknown option '--learnig_rate' (did you mean '--learning_rate'?)" in err
    assert not (d / "x").exists()


def test_keyword_spelling_of_a_message():
    from spanbert.errors import in_keywords

    said = in_keywords("spanbert finetune ner: found --max-steps and --tokens_per_update; run `spanbert pretrain "
                       "--max_steps 2`, or pass --resume", "spanbert finetune ner", "tasks.finetune('ner')")  # fmt: skip
    assert said == ("tasks.finetune('ner'): found max_steps and tokens_per_update; run `spanbert pretrain "
                    "--max_steps 2`, or pass resume")  # fmt: skip
    assert in_keywords("a-b --x --1 x--y", "p", "c") == "a-b x --1 x--y"


@pytest.mark.parametrize("name", sorted(tasks.TASKS))
def test_every_task_commands_help_opens_with_a_sentence_for_its_user(name, capsys):
    """Issue 59: `finetune squad --help` opened with its module's docstring ("scoring prediction files
    (`evaluate_files`), the actions of the command line and the Python API, and the tasks' `TaskSpec`s")."""
    from spanbert.tasks.options import ACTION_SENTENCES

    for action in ("finetune", "predict", "evaluate"):
        context = {"task": "SST-2"} if name == "glue" else {"probe": "pos"} if name == "probe" else {}
        assert tasks.run(name, action, {**context, "help": True}) is None
        out = capsys.readouterr().out
        opening = " ".join(out.split("\n\n", 1)[1].split("\n\n", 1)[0].split())
        expected = ACTION_SENTENCES[action].format(name=name, what=tasks.TASKS.describe(name))
        assert opening == expected, (action, opening)


def test_help_alone_and_score_with_the_progress_option(parity, capsys):  # noqa: F811
    """The re-audit of issue 58: `tasks.finetune('ner', help=True)` alone was a TypeError (model, train,
    output_dir missing), `tasks.score(..., disable_tqdm=True)` a TypeError (the keyword given twice)."""
    assert tasks.finetune("ner", help=True) is None
    assert "usage: spanbert finetune ner" in capsys.readouterr().out
    d = parity
    train, dev = _write(d / "train.txt", 24, 0), _write(d / "dev.txt", 8, 1)
    run = tasks.finetune("parity", model=d / "encoder", train=train, dev=dev, output_dir=d / "s", max_steps=2,
                         per_device_train_batch_size=4, device="cpu", disable_tqdm=True, report_to="none",
                         save_steps=0, warmup_steps=0)  # fmt: skip
    assert tasks.score("parity", run.output_dir, dev, disable_tqdm=True).scores == tasks.score("parity", run.output_dir, dev).scores
    with pytest.raises(SpanBertError, match=r"^model: found None, expected a path"):
        tasks.finetune("parity", train=train, output_dir=d / "x")
