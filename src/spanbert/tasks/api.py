"""Every task from Python: fine-tune, predict, evaluate and score it, and get values back.

    from spanbert import tasks

    run = tasks.finetune("squad", model="runs/spanbert/final", train="train.json", dev="dev.json",
                         output_dir="runs/squad", num_train_epochs=2)
    run.score, run.best_step, run.output_dir           # the headline dev score, its step, the folder
    tasks.score("squad", run.output_dir, "test.json")  # the fine-tuned model on a labelled file

Options are the task command's own options by name (``spanbert finetune squad --help`` lists them),
with Python values: numbers, booleans, strings and paths, lists for options that take several. They are
read by the task's own parser, the one the command line goes through, so a keyword and a flag cannot
mean different things and a mistake is the same one-line `SpanBertError`. The command line
(`spanbert.cli`) and the study (`spanbert.study`) are thin layers over these functions: the CLI prints
what they return, the study keeps it.

No torch here: a task's module is imported when the task is first used (`spanbert.tasks.TASKS`).
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import io
import re
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from spanbert import threads
from spanbert.config import _did_you_mean, convert_value
from spanbert.errors import SpanBertError, in_keywords
from spanbert.tasks.options import from_keywords, names, sentence, usage
from spanbert.tasks.registry import TASKS
from spanbert.tasks.spec import ACTIONS, Results, TaskSpec, options_argv
from spanbert.training_args import TrainingArguments
from spanbert.utils import messages_leave_a_taken_stdout, user_path


def spec_of(name: str) -> TaskSpec:
    """The registered task ``name``; an unknown one is an error listing the tasks."""
    if name not in TASKS:
        raise SpanBertError(f"found unknown task {name!r}{_did_you_mean(name, list(TASKS))}; expected one of: "
                            f"{', '.join(TASKS)}")  # fmt: skip
    return TASKS[name]


def run(name: str, action: str, options: Mapping[str, Any]) -> Any:
    """``action`` (finetune, predict, evaluate) of task ``name`` with ``options`` by the command's names:
    what `finetune`, `predict` and `evaluate` call. The options become the action's options object
    (`spanbert.tasks.options.from_keywords`), as the command line's flags do; ``threads`` sets torch's CPU
    threads for the run, as ``--threads`` does on the command line (unset: the cores other processes leave
    free). ``help=True`` prints the command's usage and returns None."""
    if action not in ACTIONS:
        raise SpanBertError(f"found action {action!r}, expected one of: {', '.join(ACTIONS)}")
    spec = spec_of(name)
    cls = TASKS.options(name).get(action)
    call = f"tasks.{action}({name!r})"
    if options.get("help"):  # issue 58.8: the usage, printed; nothing is run
        rest = {k: v for k, v in options.items() if k != "help"}
        if cls is not None:
            print(usage(cls, f"spanbert {action} {name}", sentence(action, name), rest), end="")
            return None
        code, out, err = _help(name, action, rest)
        print(out, end="")
        if code != 0:
            raise SpanBertError(_last_error(err) or f"`spanbert {action} {name} --help` failed")
        return None
    count = options.get("threads")
    threads.configure(int(count) if isinstance(count, int) and not isinstance(count, bool) else 0)
    prog = f"spanbert {action} {name}"
    try:
        with messages_leave_a_taken_stdout():  # `output="/dev/stdout"`: stdout holds the output alone
            if cls is not None:
                return getattr(spec, action)(name, from_keywords(cls, options, call, prog))
            return getattr(spec, action)(name, options_argv(options), prog)
    except SystemExit as e:  # an option that makes argparse exit (--version-like): an error, not an exit
        raise SpanBertError(f"spanbert {action} {name}: the options ended the command (exit status {e.code}) "
                            "instead of running it") from None  # fmt: skip
    except SpanBertError as e:  # the same mistake, named as the caller wrote it: a keyword, not a flag
        if type(e) is not SpanBertError:  # a DataError & co. keep their type (and their file and line)
            raise
        raise SpanBertError(in_keywords(str(e), prog, call)) from None


def finetune(
    name: str, *, model: str | Path | None = None, train: str | Path | None = None, dev: str | Path | None = None,
    output_dir: str | Path | None = None, **options: Any,
) -> Results:  # fmt: skip
    """Fine-tune the encoder in ``model`` on task ``name``'s training data, selecting on ``dev`` (when
    given), and save the selected model in ``output_dir``. Returns its dev scores (`Results.score`: the
    task's headline metric), the step whose weights were saved and the folder. ``options``: any option of
    ``spanbert finetune NAME`` (``learning_rate=3e-5``, ``num_train_epochs=2``, ``task="SST-2"``). The data:
    ``train`` and ``dev``, or the command's own options for it instead (``train_file=``,
    ``validation_file=``; GLUE's ``data_dir=``)."""
    spec = spec_of(name)
    if options.get("help"):  # the usage alone: nothing else is needed for it
        return run(name, "finetune", options)
    # read as the command line reads them (`spanbert.utils.user_path`): ~ expanded, None and "" refused by
    # keyword (str(None) trained into ./None)
    model, output_dir = (_required_path(v, k) for k, v in (("model", model), ("output_dir", output_dir)))
    data: dict[str, str] = {}
    if train is not None:
        dev = None if dev is None else _required_path(dev, "dev")
        data = spec.finetune_data(_required_path(train, "train"), "" if dev is None else dev)
        data = {k: v for k, v in data.items() if v}  # no dev: none passed, not an empty name
        both = sorted(set(data) & set(options))
        if both:
            raise SpanBertError(f"tasks.finetune({name!r}): found train= and {both[0]}=, expected one of them")
    elif dev is not None:
        raise SpanBertError(f"tasks.finetune({name!r}): found dev= without train=, expected both (or neither, "
                            "with the command's own data options)")  # fmt: skip
    return run(name, "finetune", {**data, "model": model, "output_dir": output_dir, **options})


def _required_path(value: Any, keyword: str) -> str:
    if value is None:
        raise SpanBertError(f"{keyword}: found None, expected a path")
    return str(user_path(value, keyword))


def predict(name: str, model: str | Path | None = None, data: str | Path | None = None, **options: Any) -> Path:
    """Write the predictions of the fine-tuned ``model`` on ``data`` in the task's official format (as
    `score`, positionally or by name); returns what it wrote (a file, or GLUE's folder of submission
    files). ``options``: the others of ``spanbert predict NAME`` (usually ``output``)."""
    given = {k: str(_required_path(v, k)) for k, v in (("model", model), ("data", data)) if v is not None}
    return run(name, "predict", {**given, **options})


def evaluate(name: str, **options: Any) -> Results:
    """Score predictions (``predictions=FILE``) or a fine-tuned model (``model=DIR``) with the task's
    official metrics. ``options``: those of ``spanbert evaluate NAME`` (usually ``data``)."""
    return run(name, "evaluate", options)


def score(name: str, model: str | Path, data: str | Path, **options: Any) -> Results:
    """A fine-tuned model folder scored on a labelled data file (a test split, a held-out half of dev),
    the way the task says (`TaskSpec.score_model`; by default ``evaluate(model=, data=)``). ``options``:
    the options that pick a sub-task (``task="SST-2"``)."""
    spec = spec_of(name)
    if spec.score_model is not None:
        threads.configure(0)
        return spec.score_model(str(model), str(data), dict(options))
    return evaluate(name, model=str(model), data=str(data), **{"disable_tqdm": True, **options})


def _help(name: str, action: str, options: Mapping[str, Any]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``spanbert ACTION NAME OPTIONS --help`` run in this process: the task's
    parser reads every option given before ``--help`` (a bad value is refused) and prints its usage, without
    reading a file or building a model."""
    out, err = io.StringIO(), io.StringIO()
    spec = spec_of(name)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            getattr(spec, action)(name, [*options_argv(options), "--help"], f"spanbert {action} {name}")
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 2
        except SpanBertError as e:
            print(f"error: {e}", file=err)
            code = 2
    return int(code or 0), out.getvalue(), err.getvalue()


def option_names(name: str, action: str = "finetune", **context: Any) -> set[str]:
    """The options ``action`` of task ``name`` takes, by name, as its own parser lists them; ``context``: the
    options that may change the list, set first (the sub-task: GLUE's ``task``)."""
    cls = TASKS.options(name).get(action)
    if cls is not None:
        return names(cls)
    code, text, err = _help(name, action, context)
    if code != 0:
        raise SpanBertError(_last_error(err) or f"`spanbert {action} {name} --help` failed")
    return {flag[2:].replace("-", "_") for flag in re.findall(r"(?<![\w-])--[\w-]+", text)}


def check_options(name: str, options: Mapping[str, Any], context: Mapping[str, Any] | None = None) -> None:
    """Refuse before anything runs what ``finetune`` of task ``name`` would refuse of ``options``: an
    unknown option, a value of the wrong type for its field (`TrainingArguments`, the task's `configs`) or
    for its parser (a type, a choice). One `SpanBertError`: ``option KEY: found ..., expected ...`` or the
    parser's line. ``context``: options set with them that pick the parser (the sub-task)."""
    context = dict(context or {})
    cls = TASKS.options(name).get("finetune")
    if cls is not None:  # every check the options object makes, with no data needed (`partial`)
        from_keywords(cls, {**context, **options}, f"tasks.finetune({name!r})",
                                   f"spanbert finetune {name}", partial=True)
        return
    known = option_names(name, "finetune", **context)
    for key in options:
        if key.replace("-", "_") not in known:
            near = difflib.get_close_matches(key, sorted(known), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise SpanBertError(f"found unknown option {key!r}{hint}; expected an option of `spanbert finetune {name}`")
    configs = [TrainingArguments] + [getattr(importlib.import_module(m), c) for m, c in spec_of(name).configs]
    for key, value in options.items():
        for cls in configs:
            if key in {f.name for f in fields(cls)}:
                convert_value(cls, key, value)
                break
    code, _, err = _help(name, "finetune", {**context, **options})
    if code != 0:
        raise SpanBertError(_last_error(err))


def _last_error(err: str) -> str:
    last = next((x for x in reversed(err.splitlines()) if x.strip()), "")
    return last.split("error: ", 1)[-1]
