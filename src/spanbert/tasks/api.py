"""Every task from Python: fine-tune, predict, evaluate and score it, and get values back.

    from spanbert import tasks

    run = tasks.finetune("squad", model="runs/spanbert/final", train="train.json", dev="dev.json",
                         output_dir="runs/squad", num_train_epochs=2)
    run.score, run.best_step, run.output_dir           # the headline dev score, its step, the folder
    tasks.score("squad", run.output_dir, "test.json")  # the fine-tuned model on a labelled file

Options are the task command's own options by name (``spanbert finetune squad --help`` lists them),
with Python values: numbers, booleans, strings and paths, lists for options that take several. They
become the action's options object (`spanbert.tasks.options.from_keywords`), the one the command line's
flags become, so a keyword and a flag cannot mean different things and a mistake is the same one-line
`SpanBertError`, naming the keyword. The command line (`spanbert.cli`) and the study (`spanbert.study`)
are thin layers over these functions: the CLI prints what they return, the study keeps it.

No torch here: a task's module is imported when the task is first used (`spanbert.tasks.TASKS`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spanbert import threads
from spanbert.config import _did_you_mean
from spanbert.errors import SpanBertError, in_keywords
from spanbert.tasks.options import from_keywords, names, sentence, usage
from spanbert.tasks.registry import TASKS
from spanbert.tasks.spec import ACTIONS, Results, TaskSpec
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
    cls = TASKS.options_class(name, action)
    call = f"tasks.{action}({name!r})"
    prog = f"spanbert {action} {name}"
    if options.get("help"):  # issue 58.8: the usage, printed; nothing is run
        print(usage(cls, prog, sentence(action, name), {k: v for k, v in options.items() if k != "help"}), end="")
        return None
    threads.configure_from(options)
    try:
        with messages_leave_a_taken_stdout():  # `output="/dev/stdout"`: stdout holds the output alone
            return getattr(spec, action)(name, from_keywords(cls, options, call, prog))
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


def option_names(name: str, action: str = "finetune", **context: Any) -> set[str]:
    """The options ``action`` of task ``name`` takes, by name (its options class's, `options.names`);
    ``context``: the options set with them (the sub-task), which name no other options since issue 59."""
    return names(TASKS.options_class(name, action))


def check_options(name: str, options: Mapping[str, Any], context: Mapping[str, Any] | None = None) -> None:
    """Refuse before anything runs what ``finetune`` of task ``name`` would refuse of ``options``: an
    unknown option, a value of the wrong type or outside its choices, a path option that is no path. One
    `SpanBertError`: ``option KEY: found ..., expected ...``. ``context``: options set with them (the
    sub-task). Every check the options object makes, with no data needed (a required option may be
    missing: a study checks its cells before their data exists)."""
    cls = TASKS.options_class(name, "finetune")
    from_keywords(cls, {**(context or {}), **options}, f"tasks.finetune({name!r})", f"spanbert finetune {name}",
                  partial=True)  # fmt: skip
