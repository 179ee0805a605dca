"""A task action's options as one typed object, read from a command line or from Python keywords.

Each action of a task is a plain function of one option dataclass (``predict(task, opts: QAPredict)``);
the dataclass's fields, with their docstrings, are the action's options. This module is the one place
that turns a command line into such an object (`parse`: the ``--config`` YAML read once, applied under
the flags) and the one that turns Python keywords into the same object (`from_keywords`: no argv, no
parser), so a flag and a keyword cannot mean different things:

    @dataclass(kw_only=True)
    class QAPredict:
        model: str = option(path="input")
        \"\"\"fine-tuned QA model folder\"\"\"
        batch_size: int = 64
        \"\"\"windows per batch\"\"\"

A field without a default is required; ``bool`` is a switch (``--flag``, ``--flag true|false``);
``X | None`` may be left unset; ``list[str]`` takes several values; `nested` fields (`TrainingArguments`,
a task's config such as ``QAConfig``) are flattened: their fields are options of the command too, and
their defaults can come from the task (``defaults``) and from the encoder family of ``--model``
(``family=True``). A mistake is one `SpanBertError`, naming a ``--flag`` from the command line and a
keyword from Python.

No torch here: a command's ``--help`` is built from the dataclasses alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, fields
from typing import Any, TypeVar

from spanbert import threads
from spanbert.config import (
    ArgumentParser,
    _convert_scalar,
    _did_you_mean,
    _is_optional,
    add_dataclass_arguments,
    check_unknown_overrides,
    check_yaml,
    convert_value,
    dataclass_from_args,
    field_docs,
    parse_args_with_config,
    parse_key_values,
    replace_checked,
)
from spanbert.config_json import type_hints
from spanbert.errors import SpanBertError
from spanbert.tasks.registry import TASKS
from spanbert.tasks.spec import ACTIONS, print_results
from spanbert.utils import check_apart, input_paths, output_file, output_folder, user_path

T = TypeVar("T")

PATH_KINDS = ("input", "output_file", "output_folder")
"""What a path option names: something the command reads, a file it writes, a folder it fills."""


def option(default: Any = MISSING, *, flags: Sequence[str] = (), metavar: str | None = None, path: str = "",
           choices: Sequence[Any] | None = None, append: bool = False) -> Any:  # fmt: skip
    """A field of an option dataclass with what the command line needs beyond its type and docstring:
    other spellings of its flag (``flags``), the word naming its value in ``--help`` (``metavar``), what a
    path names (``path``: `PATH_KINDS`; an output is checked as it is read, against every input), the values
    it takes (``choices``); a list given one value a flag (``append``: ``--text A --text B``) instead of
    several after one flag."""
    if path and path not in PATH_KINDS:
        raise ValueError(f"option(path={path!r}): expected one of {PATH_KINDS}")
    meta = {"flags": tuple(flags), "metavar": metavar, "path": path, "choices": choices, "append": append}
    return dataclasses.field(default=default, metadata=meta)


Defaults = Mapping[str, Any] | Callable[[Mapping[str, Any]], Mapping[str, Any]]
"""A nested class's defaults: a mapping, or a function of the action's other options as given (by name, the
command line's text or the Python values; GLUE's training defaults follow its ``task``)."""


def nested(cls: type, *, defaults: Defaults | None = None, family: bool = False,
           exclude: Sequence[str] = (), shown: Mapping[str, Any] | None = None, title: str = "") -> Any:  # fmt: skip
    """A field holding a whole option class (`TrainingArguments`, ``QAConfig``) whose fields are options of
    the command, flat. Its values come from the class's defaults < ``defaults`` (`Defaults`) < the family
    of ``--model`` (``family=True``: `FinetuneHabits.training_defaults`) < ``--config`` YAML < flags or
    keywords < ``key=value``. ``exclude``: fields that are not options of this command; ``shown``: what
    ``--help`` says of a default set later (``max_seq_length``: "follows the encoder")."""
    meta = {"nested": True, "defaults": defaults if callable(defaults) else dict(defaults or {}), "family": family,
            "exclude": tuple(exclude),
            "shown": dict(shown or {}), "title": title or cls.__name__}  # fmt: skip
    return dataclasses.field(default_factory=cls, metadata=meta)


# --------------------------------------------------------------------------- defaults of every fine-tuning


EVALS_PER_EPOCH = 10
"""Dev evaluations per epoch: the default ``--eval_per_epoch 10`` of the released fine-tuning scripts
(facebookresearch/SpanBERT code/run_squad.py, run_mrqa.py, run_tacred.py, run_glue.py)."""


EVAL_SHARE = 0.5
"""The default schedule is lowered when its evaluations would take more than this share of the training
time (`TrainingArguments.max_eval_share`): a short run on a small training set must not spend most of its
time scoring the whole dev set; a full-size run of the paper keeps its schedule."""


def selection_defaults(metric: str) -> dict[str, Any]:
    """`TrainingArguments` defaults that select the model on dev as the released scripts do: evaluate
    `EVALS_PER_EPOCH` times an epoch and keep the weights of the best ``metric`` (higher is better;
    the released scripts compare ``result[eval_metric] > best``, so ties keep the earlier step). Only
    the newest resumable checkpoint is kept beside ``best/`` (bounded disk: best + latest)."""
    return {
        "evals_per_epoch": EVALS_PER_EPOCH,
        "max_eval_share": EVAL_SHARE,
        "metric_for_best_model": metric,
        "greater_is_better": True,
        "save_total_limit": 1,
    }


def finetune_defaults(metric: str, **values: Any) -> dict[str, Any]:
    """A task's `TrainingArguments` defaults as its released script sets them: ``values`` (its rate, batch,
    epochs, output folder; `TrainingArguments` names) over a linear warm-up on the first tenth of the steps
    (BERT's ``warmup_proportion`` 0.1) and the model of the best dev ``metric`` kept (`selection_defaults`)."""
    return {"warmup_ratio": 0.1, **selection_defaults(metric), **values}


@dataclasses.dataclass(kw_only=True)
class Inference:
    """The options every task's ``predict`` (and ``evaluate`` with ``--model``) shares; a task's class names
    what a batch holds by declaring ``batch_size`` again with its own docstring."""

    batch_size: int = 64
    """examples per batch"""
    device: str = "auto"
    """auto, cpu, cuda, cuda:N"""
    disable_tqdm: bool = False
    """hide the progress bars"""
    threads: int = 0
    """CPU threads (0: the cores other processes leave free)"""


@dataclasses.dataclass(kw_only=True)
class Finetune:
    """The options every task's ``finetune`` shares besides its data and its `nested` classes (a task's class
    adds those: its `TrainingArguments` with the task's defaults, its own settings)."""

    model: str = option(path="input")
    """pre-trained checkpoint folder (spanbert or any HF BERT)"""
    tokenizer: str | None = option(None, path="input")
    """tokenizer folder or vocab.txt, when the checkpoint has none"""
    sweep: bool = False
    """try every learning rate in {5e-6,1e-5,2e-5,3e-5,5e-5} x batch size {16,32} (Appendix B); each run
    keeps its best dev evaluation (--evals_per_epoch, --metric_for_best_model) and the run with the best
    selected dev score is saved in --output_dir (sweep.json lists every run and its selected step)"""


# --------------------------------------------------------------------------- what a class declares


def _nested(cls: type) -> list[dataclasses.Field]:
    return [f for f in fields(cls) if f.metadata.get("nested")]


def _plain(cls: type) -> list[dataclasses.Field]:
    return [f for f in fields(cls) if not f.metadata.get("nested")]


def _nested_names(f: dataclasses.Field) -> list[str]:
    return [g.name for g in fields(_type_of(f)) if g.name not in f.metadata["exclude"]]


def _type_of(f: dataclasses.Field) -> Any:
    return f.default_factory  # a nested field's class is its factory (`nested`)


def names(cls: type) -> set[str]:
    """Every option of the action whose options are ``cls``, by name: its own fields and its nested ones (a
    name that two of them declare is a mistake of the class: ValueError)."""
    out = {f.name for f in _plain(cls)}
    for f in _nested(cls):
        for name in _nested_names(f):
            if name in out:
                raise ValueError(f"{cls.__name__}: option {name!r} of {_type_of(f).__name__} is also one of its "
                                 "other fields; exclude it from one of them (`nested(exclude=...)`)")  # fmt: skip
            out.add(name)
    return out


def _required(f: dataclasses.Field) -> bool:
    return f.default is MISSING and f.default_factory is MISSING  # type: ignore[misc]


def _default(f: dataclasses.Field) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return None


def nested_defaults(cls: type, name: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """The defaults of nested field ``name`` of ``cls`` for the other options ``given``: the task's, with
    those of the encoder family of ``given["model"]`` on top when the field asks for them (a missing or
    unreadable model keeps the task's: loading it reports it later)."""
    f = next(g for g in fields(cls) if g.name == name)
    defaults = f.metadata["defaults"]
    out = dict(defaults(given) if callable(defaults) else defaults)
    if f.metadata["family"]:
        out.update(model_family_defaults(given.get("model")))
    return out


def model_habits(model: Any) -> Any:
    """The fine-tuning habits of the encoder family of ``model`` (`spanbert.families.FinetuneHabits`: its
    training defaults, its NER tagger); None for no model, or a missing or unreadable one (loading it
    reports it later)."""
    if not model:
        return None
    from spanbert import families  # torch: only when a run (or a --help naming --model) needs it

    try:
        return families.habits_of(str(model))
    except SpanBertError:
        return None


def model_family_defaults(model: Any) -> dict[str, Any]:
    """The `TrainingArguments` defaults of the encoder family of ``model`` (`FinetuneHabits.training_defaults`);
    none for no model, or a missing or unreadable one."""
    habits = model_habits(model)
    return {} if habits is None else dict(habits.training_defaults())


# --------------------------------------------------------------------------- the command line


ACTION_SENTENCES = {
    "finetune": "Fine-tune a pre-trained encoder for {name} ({what}) and keep the model that scores best on "
    "the dev data; prints its dev scores.",
    "predict": "Write a fine-tuned model's predictions for {name} ({what}) in the task's official format.",
    "evaluate": "Score predictions, or a fine-tuned model on labelled data, for {name} ({what}) with the "
    "task's official metrics.",
}
"""The sentence each task command's --help opens with: what the command does, for its user."""


def sentence(action: str, task: str) -> str:
    """The opening sentence of ``spanbert ACTION TASK --help`` (`ACTION_SENTENCES`)."""
    return ACTION_SENTENCES[action].format(name=task, what=TASKS.describe(task))


def main(task: str, action: str, argv: Sequence[str]) -> int:
    """``spanbert ACTION TASK ARGV``: the options parsed once (``--help`` reads no task module and no torch),
    the action run, what it returned printed (`spanbert.tasks.spec.print_results`); exit code 0 (errors are
    raised)."""
    if action not in ACTIONS:
        raise SpanBertError(f"spanbert: found action {action!r}; expected one of: {', '.join(ACTIONS)}")
    prog = f"spanbert {action} {task}"
    cls = TASKS.options_class(task, action)
    opts = parse(cls, argv, prog, sentence(action, task))  # before the task's module loads: --help exits here
    value = getattr(TASKS[task], action)(task, opts)
    print_results(value)
    return 0


def build_parser(cls: type, prog: str, description: str, given: Mapping[str, Any] | None = None,
                 epilog: str = "") -> ArgumentParser:  # fmt: skip
    """The parser of a command whose options are ``cls``: one ``--field`` per field (help from its
    docstring), the nested classes' fields in a group each, and ``--config FILE`` and ``key=value`` when
    ``cls`` has nested fields. ``given``: the options named so far (``--model``, ``--task``), whose defaults
    ``--help`` shows (`nested_defaults`). ``epilog``: text after the options (examples), as written."""
    names(cls)  # every option once
    parser = ArgumentParser(prog=prog, description=description)
    if epilog:
        parser.epilog, parser.formatter_class = epilog, argparse.RawDescriptionHelpFormatter
    docs = field_docs(cls)
    hints = type_hints(cls)
    inherited = {f.name for base in cls.__mro__[1:] if dataclasses.is_dataclass(base) for f in fields(base)}
    own = set(vars(cls).get("__annotations__", {})) - inherited  # the action's own options first, shared ones after
    for f in sorted(_plain(cls), key=lambda f: f.name not in own):
        _add_field(parser, f, hints[f.name], docs.get(f.name, ""))
    if _nested(cls):
        parser.add_argument("--config", default=None, metavar="FILE",
                            help="YAML file of options (flat, or in sections named after the groups below); "
                                 "a flag on the command line wins over it")  # fmt: skip
        for f in _nested(cls):
            shown = {**nested_defaults(cls, f.name, given or {}), **f.metadata["shown"]}
            group = parser.add_argument_group(f.metadata["title"])
            add_dataclass_arguments(group, _type_of(f), shown, exclude=f.metadata["exclude"])
        parser.add_argument("overrides", nargs="*", metavar="key=value", help="further option overrides")
    return parser


def _add_field(parser: argparse.ArgumentParser, f: dataclasses.Field, tp: Any, doc: str) -> None:
    flags = [f"--{f.name}", *f.metadata.get("flags", ())]
    _, inner = _is_optional(tp)
    default = _default(f)
    shown = "" if _required(f) or default in (None, False, "", [], ()) else f" (default: {default})"
    kind = f.metadata.get("path", "")
    kwargs: dict[str, Any] = dict(dest=f.name, help=(doc + shown).replace("%", "%%"), required=_required(f))
    if f.name == "threads":  # the command line reads it before parsing too (`spanbert.cli`)
        threads.add_option(parser)
        return
    if inner is bool:
        kwargs.update(nargs="?", const=True, default=default, type=_converter(bool), metavar="BOOL")
    elif typing.get_origin(inner) in (list, tuple):
        item = typing.get_args(inner)[0]
        if f.metadata.get("append"):
            kwargs.update(action="append", default=default, type=_converter(item))
        else:
            kwargs.update(nargs="+", default=default, type=_converter(item))
    else:
        choices = f.metadata.get("choices")
        if typing.get_origin(inner) is typing.Literal:
            choices = typing.get_args(inner)
        typed = {"output_file": output_file, "output_folder": output_folder}.get(kind) or _converter(inner)
        kwargs.update(default=default, type=typed, choices=choices)
        kwargs["metavar"] = f.metadata.get("metavar") or (None if choices else f.name.split("_")[-1].upper())
    parser.add_argument(*flags, **kwargs)


def _converter(tp: Any) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        try:
            return _convert_scalar(tp, text)
        except (TypeError, ValueError):
            kind = {bool: "true or false", int: "an integer", float: "a number"}.get(tp, "a value")
            raise argparse.ArgumentTypeError(f"found {text!r}, expected {kind}") from None

    convert.__name__ = getattr(tp, "__name__", "value")
    return convert


def parse(cls: type[T], argv: Sequence[str], prog: str, description: str, epilog: str = "") -> T:
    """The options of one command line: ``argv`` parsed (``--help`` prints the usage and exits, as any
    command's), the ``--config`` YAML applied under the flags, the nested classes built over the task's
    and the family's defaults. A mistake is one `SpanBertError` naming the flag."""
    argv = list(argv)
    given = _given(cls, argv)
    parser = build_parser(cls, prog, description, given, epilog)
    classes = [_type_of(f) for f in _nested(cls)]
    from_file: set[str] = set()  # the options the --config file set
    args = parse_args_with_config(parser, argv, classes, from_file) if classes else parser.parse_args(argv)
    overrides = list(getattr(args, "overrides", None) or [])
    if overrides:
        check_unknown_overrides(overrides, classes)
    # a nested option is in the namespace only when given (a flag, the file); an action's own one always is
    named = (set(vars(args)) - {"config", "overrides"}) | set(parse_key_values(overrides))
    values = {f.name: getattr(args, f.name) for f in _plain(cls)}
    for f in _nested(cls):
        sub = _type_of(f)
        own = argparse.Namespace(**{k: v for k, v in vars(args).items() if k not in f.metadata["exclude"]})
        obj = dataclass_from_args(sub, own, defaults=nested_defaults(cls, f.name, values),
                                  overrides=overrides, sections=classes)  # fmt: skip
        values[f.name] = _finish(obj, named)
    return _remember(cls(**values), (named - {f.name for f in _plain(cls)}) | set(given) | from_file)


def _given(cls: type, argv: list[str]) -> dict[str, Any]:
    """The action's own options as the command line spells them (text), read before its parser is built:
    what the nested classes' defaults shown by ``--help`` depend on."""
    pre = argparse.ArgumentParser(add_help=False)
    for f in _plain(cls):
        pre.add_argument(f"--{f.name}", *f.metadata.get("flags", ()), dest=f.name, nargs="?")
    known, _ = pre.parse_known_args(argv)
    return {k: v for k, v in vars(known).items() if v is not None}


_NAMED = "_options_named"
"""The attribute where `parse` and `from_keywords` leave the names of the options the user gave (`named`)."""


def _remember(opts: T, named: set[str]) -> T:
    object.__setattr__(opts, _NAMED, frozenset(named))
    return opts


def named(opts: Any) -> frozenset[str]:
    """The options of ``opts`` the user gave (flags, keywords, ``--config``, ``key=value``; not those left at
    a default): where a head's options given without that head are refused (``finetune ner``)."""
    return getattr(opts, _NAMED, frozenset())


def _finish(obj: Any, named: set[str]) -> Any:
    """What naming an option changes in the rest: an evaluation schedule the user gave is kept as given
    (`TrainingArguments.max_eval_share` 0, unless named too)."""
    if hasattr(obj, "max_eval_share") and named & {"evals_per_epoch", "eval_steps"} and "max_eval_share" not in named:
        return dataclasses.replace(obj, max_eval_share=0.0)
    return obj


# --------------------------------------------------------------------------- Python keywords


def from_keywords(cls: type[T], keywords: Mapping[str, Any], call: str, command: str, *, partial: bool = False) -> T:
    """The options ``cls`` from Python keywords (``learning_rate=3e-5``; a nested class's fields flat, or the
    class itself as ``training=TrainingArguments(...)``), each checked as its flag would be; ``config=FILE``
    reads that YAML under the keywords. ``call`` names the caller in errors (``tasks.finetune('squad')``),
    ``command`` the command whose options these are (``spanbert finetune squad``).
    ``partial``: a required option may be missing (a study checks its options before its data exists)."""
    plain = {f.name: f for f in _plain(cls)}
    spelled = {flag.lstrip("-").replace("-", "_"): f.name
               for f in [*plain.values(), *(g for n in _nested(cls) for g in fields(_type_of(n)))]
               for flag in f.metadata.get("flags", ())}  # fmt: skip
    given: dict[str, Any] = {}
    for key, value in keywords.items():  # a flag's other spelling is a keyword too (``train=``: ``--train``)
        name = str(key).replace("-", "_")
        name = spelled.get(name, name)
        if name in given:
            raise SpanBertError(f"{call}: found {name} twice (as {key!r} too), expected each option once")
        given[name] = value
    nested_of = {n: f for f in _nested(cls) for n in _nested_names(f)}
    for key in given:
        if key not in plain and key not in nested_of and key not in {f.name for f in _nested(cls)}:
            if key == "config" and _nested(cls):
                continue
            raise SpanBertError(f"{call}: found unknown option {key!r}{_did_you_mean(key, sorted(names(cls)))}; "
                                f"expected an option of `{command}`")  # fmt: skip
    yaml_values: dict[str, dict[str, Any]] = {}
    if given.get("config") and _nested(cls):
        path = str(user_path(given.pop("config"), "config"))
        converters = {n: (lambda v: v) for n in plain}
        yaml_values = check_yaml(path, [_type_of(f) for f in _nested(cls)], plain=converters,
                                 only=names(cls))  # fmt: skip
        for key, value in yaml_values.pop("", {}).items():
            given.setdefault(key, value)
    given.pop("config", None)
    values: dict[str, Any] = {}
    for name, f in plain.items():
        if name in given:
            values[name] = _keyword_value(cls, f, given[name])
        elif _required(f) and not partial:
            raise SpanBertError(f"{call}: found no {name}=, expected it (required)")
        elif _required(f):
            values[name] = None
    for f in _nested(cls):
        sub = _type_of(f)
        whole = given.get(f.name)
        if whole is not None and not isinstance(whole, sub):
            raise SpanBertError(f"{call}: option {f.name}: found {type(whole).__name__}, expected {sub.__name__}")
        base = whole or sub(**nested_defaults(cls, f.name, values))
        updates = {**yaml_values.get(sub.__name__, {}), **{k: v for k, v in given.items() if nested_of.get(k) is f}}
        for key in updates:
            convert_value(sub, key, updates[key])
        obj = replace_checked(base, updates)
        values[f.name] = _finish(obj, set(updates))
    out = cls(**values)
    _check_paths(out)
    return _remember(out, set(given) | {k for sub in yaml_values.values() for k in sub})


def _keyword_value(cls: type, f: dataclasses.Field, value: Any) -> Any:
    kind = f.metadata.get("path", "")
    if kind or f.name in ("model", "tokenizer"):
        value = user_path(value, f.name)  # a list item by item
        if isinstance(value, (list, tuple)):
            value = [str(v) for v in value]
        elif value is not None:
            value = str(value)
    if value is None:
        return None
    value = convert_value(cls, f.name, value)
    choices = f.metadata.get("choices")
    if choices is not None and value not in choices:
        raise SpanBertError(f"option {f.name}: found {value!r}{_did_you_mean(str(value), [str(c) for c in choices])}; "
                            f"expected one of: {', '.join(map(str, choices))}")  # fmt: skip
    if kind == "output_file":
        value = output_file(value)
    elif kind == "output_folder":
        value = output_folder(value)
    return value


def _check_paths(opts: Any) -> None:
    """Each output against every input (the command line's parser checks the same as it parses)."""
    inputs = input_paths(opts)
    for f in _plain(type(opts)):
        value = getattr(opts, f.name)
        if f.metadata.get("path") in ("output_file", "output_folder") and value:
            check_apart(value, inputs)


def one_of(opts: Any, *names: str) -> str:
    """The one of ``names`` that ``opts`` sets (``--predictions FILE`` or ``--model DIR``: what `evaluate`
    scores); none or several is one error naming them."""
    given = [n for n in names if getattr(opts, n) not in (None, [], "")]
    if len(given) != 1:
        found = "none" if not given else " and ".join(f"--{n}" for n in given)
        raise SpanBertError(f"found {found} of {', '.join(f'--{n}' for n in names)}, expected exactly one of them")
    return given[0]


def usage(cls: type, prog: str, description: str, keywords: Mapping[str, Any] | None = None) -> str:
    """``--help`` of the command, as text (what ``help=True`` prints from Python)."""
    return build_parser(cls, prog, description, dict(keywords or {})).format_help()
