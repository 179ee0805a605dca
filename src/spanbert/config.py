"""Dataclass configs, named presets, and the plumbing that turns them into command-line options.

Every config field carries a docstring (a string literal on the line after it); that text becomes the
option's `--help`. Values are resolved in this order: dataclass default < preset < YAML file <
`--flag value` / `key=value` on the command line. Every override is type-checked, and an unknown key is
an error that lists the valid ones.

A command's YAML file holds options of every config class the command builds (`check_yaml`; the
classes are passed as ``sections``): flat, or in sections named after the classes
(``TrainingArguments:``, ``MaskingConfig:``). A key that belongs to none of them is an error naming the
file, the line and the key: a typo must never train at the default value.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import functools
import inspect
import math
import sys
import textwrap
import types
import typing
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

import yaml

from spanbert import _aliases
from spanbert.config_json import check_ranges, check_settings, json_item, type_hints, type_name, typed_fields
from spanbert.errors import SpanBertError
from spanbert.utils import INPUT_OPTIONS, check_apart, input_paths, output_file, output_folder, parsed_once, user_path

PATH_OPTIONS = (*INPUT_OPTIONS, "output_dir", "output", "null_odds", "write_config")
"""The argparse dests that name a path: what a command reads (`spanbert.utils.INPUT_OPTIONS`) and writes."""

T = TypeVar("T")


@dataclass
class BertConfig:
    """Architecture of a BERT encoder. Field names and meanings are those of HF `BertConfig`."""

    vocab_size: int = 28996
    """WordPiece vocabulary size (28,996 = the cased BERT/SpanBERT vocabulary)."""
    hidden_size: int = 768
    """Width H of every layer."""
    num_hidden_layers: int = 12
    """Number of Transformer layers."""
    num_attention_heads: int = 12
    """Attention heads per layer (hidden_size must be divisible by it)."""
    intermediate_size: int = 3072
    """Width of the feed-forward sublayer."""
    hidden_act: str = "gelu"
    """Activation of the feed-forward sublayer: gelu (exact, erf-based, as BERT) or gelu_new (tanh approx.)."""
    hidden_dropout_prob: float = 0.1
    """Dropout on embeddings and on every sublayer output."""
    attention_probs_dropout_prob: float = 0.1
    """Dropout on the attention weights."""
    max_position_embeddings: int = 512
    """Longest sequence the position embeddings cover."""
    type_vocab_size: int = 2
    """Number of token-type (segment) ids."""
    initializer_range: float = 0.02
    """Standard deviation of the truncated-normal weight initialisation."""
    layer_norm_eps: float = 1e-12
    """Epsilon of every LayerNorm (BERT uses 1e-12)."""
    pad_token_id: int = 0
    """Id of [PAD]; its word embedding starts at zero."""
    is_decoder: bool = False
    """Causal (left-context-only) attention: position i attends to positions <= i only. BERT's left-to-right
    baseline (§5.1, `--system ltr`); HF `BertModel` reads the same key and masks the same way."""

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise SpanBertError(
                f"hidden_size={self.hidden_size} is not divisible by num_attention_heads={self.num_attention_heads}"
            )

    def to_hf_dict(self) -> dict[str, Any]:
        """The config.json that `transformers.BertConfig` reads."""
        d = dataclasses.asdict(self)
        d.update(model_type="bert", position_embedding_type="absolute", use_cache=True)
        return d

    @classmethod
    def from_hf_dict(cls, d: dict[str, Any], source: str = "") -> BertConfig:
        """Read a HF (or original Google/SpanBERT) config.json; unknown keys are ignored.

        Every known key is type-checked (``"hidden_size": "768"`` is an error, not a crash deep in
        the model) and the sizes must be there; ``source`` (the file) starts every error message.
        """
        where = f"{source}: " if source else ""
        check_settings(d, where, "BERT", "a BERT encoder", _REQUIRED_SIZES)
        # features transformers' BertModel would apply that this encoder does not have: refused by name, so
        # that hidden states never silently differ from transformers'
        position = d.get("position_embedding_type")
        if position not in (None, "absolute"):
            raise SpanBertError(
                f"{where}found {json_item('position_embedding_type', position)}, expected \"absolute\" (relative "
                "position embeddings are not implemented here)"
            )
        if d.get("add_cross_attention"):
            raise SpanBertError(
                f"{where}found {json_item('add_cross_attention', d['add_cross_attention'])}, expected false (an "
                "encoder-decoder's cross-attention is not implemented here)"
            )
        kwargs = typed_fields(cls, d, where)  # absent or null: the BERT default
        check_ranges(kwargs, where, positive=(*_REQUIRED_SIZES, "max_position_embeddings", "type_vocab_size"),
                     above_zero=("layer_norm_eps",), non_negative=("initializer_range",))  # fmt: skip
        if "pad_token_id" in kwargs and not 0 <= kwargs["pad_token_id"] < kwargs["vocab_size"]:
            raise SpanBertError(
                f"{where}found {json_item('pad_token_id', kwargs['pad_token_id'])}, expected an id of the vocabulary "
                f"(0 to {kwargs['vocab_size'] - 1})"
            )
        check_ranges(kwargs, where, probabilities=("hidden_dropout_prob", "attention_probs_dropout_prob"))
        if kwargs.get("hidden_act") not in (None, "gelu", "gelu_new", "relu"):
            raise SpanBertError(
                f"{where}found {json_item('hidden_act', kwargs['hidden_act'])}, expected gelu, gelu_new or relu"
            )
        if kwargs["hidden_size"] % kwargs["num_attention_heads"]:
            raise SpanBertError(
                f"{where}found hidden_size {kwargs['hidden_size']} and num_attention_heads "
                f"{kwargs['num_attention_heads']}, expected a hidden size divisible by the number of heads"
            )
        return cls(**kwargs)


# A config.json without these describes no encoder: BERT's defaults would silently build the wrong one.
_REQUIRED_SIZES = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")


# Named sizes (§4.2: SpanBERT matches BERT-large; base and large are the two released sizes).
MODEL_PRESETS: dict[str, dict[str, Any]] = {
    # tests and the CPU quick start: runs in seconds
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=256),
    # CPU experiments and benchmarks (4 layers x 256, as in the pre-training benchmark)
    "small": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024),
    "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
    "large": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096),
}


def model_config(name: str, **overrides: Any) -> BertConfig:
    """Build the `BertConfig` of a named preset (tiny, small, base, large), with field overrides."""
    if name not in MODEL_PRESETS:
        raise SpanBertError(f"unknown model preset {name!r}; choose from: {', '.join(MODEL_PRESETS)}")
    return BertConfig(**{**MODEL_PRESETS[name], **overrides})


# ---------------------------------------------------------------------------------------------
# The ModernBERT family's presets (its config and model: `spanbert.modernbert`)

MODERNBERT_MODEL_TYPE = "modernbert"
"""config.json ``model_type`` of the ModernBERT family (`spanbert.modernbert.MODEL_TYPE`)."""
MODERNBERT_PRESETS: dict[str, dict[str, Any]] = {
    # tests and the CPU quick start: three layers, so one global layer and two local ones
    "tiny": dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=2, intermediate_size=96, local_attention=64),
    # CPU experiments and benchmarks: the BERT family's small width (256), ModernBERT's proportions
    "small": dict(hidden_size=256, num_hidden_layers=6, num_attention_heads=4, intermediate_size=384),
    # ModernBERT-base and -large (Warner et al. 2024, Table 4)
    "base": dict(hidden_size=768, num_hidden_layers=22, num_attention_heads=12, intermediate_size=1152),
    "large": dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, intermediate_size=2624),
}
"""`spanbert pretrain --family modernbert --model NAME` (`spanbert.modernbert.PRESETS`)."""


# ---------------------------------------------------------------------------------------------
# A model family's fine-tuning habits


@dataclass(frozen=True)
class FinetuneHabits:
    """How a model family is fine-tuned: the defaults every shared task head takes from its encoder
    (``encoder.habits``), so a family's paper recipe is a set of options, not a second pipeline.

    BERT (Devlin et al. §4, SpanBERT Appendix B): heads drawn from N(0, initializer_range), dropout
    hidden_dropout_prob before them, AdamW with linear decay, gradients clipped at 1.0. The two-tower
    cloze model (Baevski et al. §4): the encoder output multiplied by 16 before a zero-initialised
    projection, no dropout inside the language model for sentence tasks, a cosine schedule, no clipping,
    the biLSTM-CRF tagger for NER, and its own learning-rate grid.
    """

    init_std: float = 0.02
    """Standard deviation of a new output layer's weights (unless zero_init_head)."""
    zero_init_head: bool = False
    """Start output-layer weights and bias at zero (two-tower §4)."""
    output_scale: float = 1.0
    """Factor on the encoder's output before the output layer (two-tower §4: 16, a larger rate for the new weights)."""
    head_dropout: float = 0.1
    """Dropout between the encoder's output and the output layer."""
    encoder_dropout: float | None = None
    """Set every dropout rate inside the encoder to this for sentence-level heads (two-tower §4: 0); None keeps the pre-trained rates."""
    tagger: str = "linear"
    """Default NER head: linear (BERT §5.3: softmax on each word's first sub-token) or bilstm-crf (two-tower §6.2.1)."""
    training: tuple[tuple[str, Any], ...] = ()
    """`TrainingArguments` defaults of the family (schedule, clipping), as (name, value) pairs."""
    sweep_learning_rates: tuple[float, ...] = (5e-6, 1e-5, 2e-5, 3e-5, 5e-5)
    """--sweep's learning-rate grid (SpanBERT Appendix B; two-tower §4: 1e-4, 5e-5, 3e-5)."""
    sweep_batch_sizes: tuple[int, ...] = (16, 32)
    """--sweep's batch sizes (SpanBERT Appendix B: 16, 32; two-tower §4: 16)."""
    parse_learning_rates: tuple[float, float] = (5e-5, 8e-4)
    """(encoder, parser) learning rates of the constituency parser (BERT's fine-tuning rate and Kitaev &
    Klein 2018's Adam rate for the parser; two-tower §6.2.2: 8e-4 for the language model, 8e-3 for the parser)."""

    def training_defaults(self) -> dict[str, Any]:
        """`training` as a dict of `TrainingArguments` field values."""
        return dict(self.training)


# ---------------------------------------------------------------------------------------------
# Field docstrings -> help text


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """Docstrings of a dataclass's fields (the string literal after each annotated field)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        body = ast.parse(source).body[0].body  # type: ignore[attr-defined]
        for node, nxt in zip(body, body[1:]):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def _field_type(cls: type, name: str) -> Any:
    return type_hints(cls)[name]


def _is_optional(tp: Any) -> tuple[bool, Any]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return True, args[0]
    return False, tp


def _describe(value: Any) -> str:
    """How a wrong value reads in an error message: its text and, for what is not a scalar, its kind."""
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, dict):
        return f"a mapping {_short(value)}"
    if isinstance(value, (list, tuple)):
        return f"a list {_short(list(value))}"
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    return _short(value)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def convert_value(cls: type, name: str, value: Any, source: str = "") -> Any:
    """Check and convert ``value`` (a string from the command line, or a YAML value) to the field's type.

    A value that does not fit raises `SpanBertError` (never TypeError/ValueError): ``SOURCE: option
    NAME: found VALUE, expected TYPE``, where ``source`` is the YAML file or "command line".
    """
    tp = _field_type(cls, name)
    optional, inner = _is_optional(tp)

    def wrong(expected: str | None = None) -> SpanBertError:
        where = f"{source}: " if source else ""
        expected = expected or type_name(inner) + (" or null" if optional else "")
        return SpanBertError(f"{where}option {name}: found {_describe(value)}, expected {expected}")

    if value is None or (optional and isinstance(value, str) and value.lower() in ("none", "null", "")):
        if optional:
            return None
        raise wrong()
    # a mapping is never a value of a scalar or list option (a YAML section under the wrong name, a typo'd indent)
    if isinstance(value, dict):
        raise wrong()
    origin = typing.get_origin(inner)
    if origin is typing.Literal:
        choices = typing.get_args(inner)
        if isinstance(value, (list, tuple)) or value not in choices:
            raise wrong()
        return value
    if origin in (typing.Union, types.UnionType):  # a word or a scalar (int | Literal["auto"], bool | Literal["auto"])
        kinds = typing.get_args(inner)
        words = [w for a in kinds if typing.get_origin(a) is typing.Literal for w in typing.get_args(a)]
        if isinstance(value, str) and value in words:
            return value
        for kind in kinds:
            if typing.get_origin(kind) is not typing.Literal:
                try:
                    return _convert_scalar(kind, value)
                except (TypeError, ValueError, OverflowError):
                    pass
        raise wrong()
    if origin in (list, tuple):
        item = typing.get_args(inner)[0]
        items = value if isinstance(value, (list, tuple)) else [v for v in str(value).split(",") if v.strip()]
        try:
            out = [_convert_scalar(item, v) for v in items]
        except (TypeError, ValueError, OverflowError):
            raise wrong() from None
        return out if origin is list else tuple(out)
    if isinstance(value, (list, tuple)):
        raise wrong()
    try:
        return _convert_scalar(inner, value)
    except (TypeError, ValueError, OverflowError):
        raise wrong() from None


def _convert_scalar(tp: Any, value: Any) -> Any:
    """``value`` as ``tp`` (bool, int, float, str or anything else left as is); TypeError/ValueError if not."""
    if tp is bool:
        if isinstance(value, bool):
            return value
        s = str(value).lower() if isinstance(value, (str, int)) else ""
        if s in ("1", "true", "yes", "on"):
            return True
        if s in ("0", "false", "no", "off"):
            return False
        raise ValueError(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise TypeError(value)
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            try:
                return int(value.strip().replace("_", ""))
            except ValueError:
                value = float(value)  # accept 1e4 for integer fields such as steps
        if not value.is_integer():  # also NaN and inf
            raise ValueError(value)
        return int(value)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise TypeError(value)
        out = float(value.strip().replace("_", "") if isinstance(value, str) else value)
        if math.isnan(out):  # NaN is never a setting: every comparison with it is False
            raise ValueError(value)
        return out
    if tp is str:
        # a YAML `yes`/`1` where text is expected is a mistake more often than not: ask for quotes
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise TypeError(value)
        return str(value)
    return value


def replace_checked(obj: T, updates: dict[str, Any], source: str = "") -> T:
    """``dataclasses.replace`` with type checking; an unknown key lists the valid ones."""
    cls = type(obj)
    valid = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    for key in updates:
        if key not in valid:
            where = f" in {source}" if source else ""
            raise SpanBertError(f"unknown option {key!r}{where}; valid options: {', '.join(valid)}")
    converted = {k: convert_value(cls, k, v, source) for k, v in updates.items()}
    return dataclasses.replace(obj, **converted)  # type: ignore[type-var]


def parse_key_values(items: list[str]) -> dict[str, str]:
    """Parse ``["lr=1e-4", "max_steps=10"]``; an item without ``=`` is an error."""
    out = {}
    for item in items:
        if "=" not in item:
            raise SpanBertError(f"override {item!r} is not of the form key=value")
        key, value = item.split("=", 1)
        out[key.strip().replace("-", "_")] = value
    return out


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML file of overrides (a flat mapping, or sections named after configs)."""
    return _read_yaml(path)[0]


def _read_yaml(path: str | Path) -> tuple[dict[str, Any], dict[tuple[str, ...], int]]:
    """(the mapping, the 1-based line of each top-level key and section key) of a YAML config file. Read once
    per version of the file (`spanbert.utils.parsed_once`; issue 59: one ``finetune`` read its --config up
    to 8 times, from the parser's defaults, the family's defaults, the checks and the sub-mode's choice)."""
    return parsed_once(Path(path), _parse_yaml)


def _parse_yaml(path: Path) -> tuple[dict[str, Any], dict[tuple[str, ...], int]]:
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise SpanBertError(f"{path}: config file not found") from None
    except IsADirectoryError:
        raise SpanBertError(f"{path}: found a folder, expected a YAML config file") from None
    except OSError as e:
        raise SpanBertError(f"{path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        line = e.object[: e.start].count(b"\n") + 1
        raise SpanBertError(f"{path}:{line}: found byte 0x{e.object[e.start]:02x} that is not UTF-8, expected UTF-8 YAML") from None
    try:
        data = yaml.safe_load(text)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise SpanBertError(f"{where}: not valid YAML ({problem}); expected a mapping of option: value") from None
    if data is None:
        return {}, {}
    if not isinstance(data, dict):
        raise SpanBertError(f"{path}: found {_describe(data)}, expected a mapping of option: value")
    lines: dict[tuple[str, ...], int] = {}
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            lines[(str(key_node.value),)] = key_node.start_mark.line + 1
            if isinstance(value_node, yaml.MappingNode):
                for sub_key, _ in value_node.value:
                    lines[(str(key_node.value), str(sub_key.value))] = sub_key.start_mark.line + 1
    return data, lines


COMMAND_OPTIONS = ""
"""The key of `check_yaml`'s result that holds the command's own options (``plain``), which belong to no class."""


def check_yaml(
    path: str | Path,
    classes: Sequence[type],
    plain: Mapping[str, Callable[[Any], Any]] | None = None,
    only: Collection[str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Read a command's YAML config and check every key against the options the command takes.

    This is the one reader of every ``--config`` file (`spanbert pretrain`, every ``finetune`` task).
    The file is a flat mapping of options (each goes to every class in ``classes`` that has the
    field), or has sections named after the classes (``TrainingArguments: {learning_rate: 3e-5}``),
    or both. ``plain`` holds the command's options that belong to no class (``train_file``), each
    with a converter that returns the value or raises ValueError("expected ..."); they are flat keys
    only. ``only``, when given, limits the classes' fields to those the command exposes. Keys are
    read in either spelling (``learning-rate`` = ``learning_rate``), as on the command line.

    A key that is neither an option nor a section of ``classes``, a section of a class the command
    does not use, a section that is not a mapping, an option set twice and a value of the wrong type
    are errors naming the file and line. Returns ``{class name: {option: value}}`` for every class
    (empty when the file sets none) and, with ``plain``, ``{COMMAND_OPTIONS: {option: converted value}}``.
    """
    data, lines = _read_yaml(path)
    plain = dict(plain or {})
    by_name = {cls.__name__: cls for cls in classes}
    valid_of = {
        cls.__name__: [f.name for f in fields(cls) if only is None or f.name in only] for cls in classes
    }
    options: dict[str, list[type]] = {}
    for cls in classes:
        for name in valid_of[cls.__name__]:
            options.setdefault(name, []).append(cls)
    out: dict[str, dict[str, Any]] = {name: {} for name in by_name}
    if plain:
        out[COMMAND_OPTIONS] = {}
    origin: dict[tuple[str, str], tuple[str, ...]] = {}

    def where(*key: str) -> str:
        line = lines.get(key)
        return f"{path}:{line}" if line else str(path)

    def put(section: str, key: str, value: Any, at: tuple[str, ...]) -> None:
        if (section, key) in origin:
            raise SpanBertError(
                f"{where(*at)}: found option {key} a second time (first at {where(*origin[section, key])}), "
                "expected each option once"
            )
        origin[section, key] = at
        out[section][key] = value

    sections_hint = f"a section {', '.join(by_name)}" if by_name else "no sections"
    for raw, value in data.items():
        raw = str(raw)
        key = raw.replace("-", "_")
        if raw in by_name:
            if value is None:  # an empty section
                continue
            if not isinstance(value, dict):
                raise SpanBertError(
                    f"{where(raw)}: section {raw}: found {_describe(value)}, expected a mapping of option: value"
                )
            valid = valid_of[raw]
            for raw_sub, sub_value in value.items():
                raw_sub = str(raw_sub)
                sub = raw_sub.replace("-", "_")
                if sub not in valid:
                    raise SpanBertError(
                        f"{where(raw, raw_sub)}: found unknown option {raw_sub!r} in section {raw}"
                        f"{_did_you_mean(sub, valid)}; expected one of: {', '.join(valid)}"
                    )
                convert_value(by_name[raw], sub, sub_value, source=where(raw, raw_sub))  # type check, file:line
                put(raw, sub, sub_value, (raw, raw_sub))
        elif key in options:
            for cls in options[key]:
                convert_value(cls, key, value, source=where(raw))
                put(cls.__name__, key, value, (raw,))
        elif key in plain:
            try:
                converted = plain[key](value)
            except (TypeError, ValueError) as e:
                expected = str(e) if isinstance(e, ValueError) and str(e).startswith("expected") else "expected a valid value"
                raise SpanBertError(f"{where(raw)}: option {key}: found {_describe(value)}, {expected}") from None
            put(COMMAND_OPTIONS, key, converted, (raw,))
        elif isinstance(value, dict):  # a section, but of a class this command does not build
            raise SpanBertError(
                f"{where(raw)}: found section {raw!r}, which this command does not use; expected {sections_hint}, "
                "or flat options"
            )
        else:
            raise SpanBertError(
                f"{where(raw)}: found unknown option {raw!r}{_did_you_mean(key, [*options, *plain, *by_name])}; "
                f"expected an option that --help lists (flat, or in {sections_hint})"
            )
    return out


def parse_args_with_config(
    parser: argparse.ArgumentParser, argv: Sequence[str], classes: Sequence[type], applied: set[str] | None = None
) -> argparse.Namespace:
    """``parser.parse_args(argv)`` with the ``--config`` YAML (`check_yaml`) applied first.

    The file may set every option of ``parser``: the fields of ``classes`` that the parser exposes
    (flat or in their sections) and the parser's own options (flat). Its values become the parser's
    defaults, so a flag typed on the command line still wins, and an option required on the command
    line is satisfied by the file. ``applied``: a set that receives the dest of every option the file set
    (what the user named there, which the namespace alone does not tell from a default).
    """
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", default=None)
    known, _ = pre.parse_known_args(list(argv))
    if not known.config:
        return parser.parse_args(argv)
    # an option by its dest or by any of its flags (``train_file`` and its alias ``train``)
    actions: dict[str, argparse.Action] = {}
    for a in parser._actions:
        if a.option_strings and a.dest not in ("help", "config"):
            for name in [a.dest, *(o.lstrip("-").replace("-", "_") for o in a.option_strings)]:
                actions.setdefault(name, a)
    fields_of = {f.name for cls in classes for f in fields(cls)}
    plain = {name: _yaml_converter(a) for name, a in actions.items() if name not in fields_of}
    checked = check_yaml(known.config, classes, plain=plain, only=set(actions))
    for values in checked.values():
        for key, value in values.items():
            action = actions[key]
            if isinstance(value, bool) and action.nargs == "?":  # dataclass bool flags take strings
                value = str(value).lower()
            parser.set_defaults(**{action.dest: value})
            action.required = False  # given in the file
            if applied is not None:
                applied.add(action.dest)
    return parser.parse_args(argv)


def _yaml_converter(action: argparse.Action) -> Callable[[Any], Any]:
    """How a YAML value of an argparse option is checked: its ``type``, its ``choices``, a boolean for a
    switch (``store_true``), a list for ``nargs``; ValueError("expected ...") when it does not fit."""

    def one(value: Any) -> Any:
        if value is None:  # null: the option stays unset
            return None
        try:
            if isinstance(value, (dict, list, tuple, bool)):
                raise TypeError(value)
            tp = action.type or str
            # int/float/str as the dataclass options read them: 1.5 is no integer, yes is no text
            value = _convert_scalar(tp, value) if tp in (int, float, str) else tp(value)
        except (TypeError, ValueError, argparse.ArgumentTypeError):
            raise ValueError(f"expected {_action_kind(action)}") from None
        if action.choices is not None and value not in action.choices:
            raise ValueError(f"expected one of: {', '.join(map(str, action.choices))}")
        return value

    def convert(value: Any) -> Any:
        if action.nargs == 0:  # a switch
            try:
                return _convert_scalar(bool, value)
            except (TypeError, ValueError):
                raise ValueError("expected a boolean (true/false)") from None
        if action.nargs in ("+", "*") or isinstance(action.nargs, int):
            return [one(v) for v in (value if isinstance(value, list) else [value])]
        return one(value)

    return convert


def _action_kind(action: argparse.Action) -> str:
    return {int: "an integer", float: "a number", str: "a string"}.get(action.type, "a string")  # type: ignore[arg-type]


def _did_you_mean(key: str, valid: Sequence[str]) -> str:

    close = difflib.get_close_matches(key, list(valid), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


class ArgumentParser(argparse.ArgumentParser):
    """The parser of every `spanbert` command: forgiving spellings, one-line errors with a suggestion.

    ``--learning-rate`` and ``--learning_rate`` name the same option (both spellings are common: HF
    scripts use underscores, most Unix tools hyphens), for options declared either way. A mistyped
    option or choice is one ``error:`` line that suggests the closest valid one, as YAML keys and
    ``key=value`` overrides do, instead of argparse's usage block (`SpanBertError`, exit status 2).
    """

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        args = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(self._respell(args), namespace)

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            for word in extras:
                if word.startswith("--"):
                    name = word.split("=", 1)[0]
                    self.error(f"found unknown option {name!r}{self._suggest(name)}; expected one of the options "
                               f"that `{self.prog} --help` lists")  # fmt: skip
            self.error(f"found unexpected argument(s) {' '.join(extras)!r}; expected the options that `{self.prog} --help` lists")
        self._read_paths(parsed)
        self._check_outputs(parsed)
        return parsed

    def _read_paths(self, parsed: argparse.Namespace) -> None:
        # every option naming a path, from argv or a --config YAML (the parser's defaults): ~ expanded, an
        # empty path refused (`spanbert.utils.user_path`), as a dataclass field and a Python keyword are
        for action in self._actions:
            if action.option_strings and (action.dest in PATH_OPTIONS or action.type in (output_file, output_folder)):
                value = getattr(parsed, action.dest, None)
                if value == "" and action.dest in INPUT_OPTIONS:
                    continue  # an input given as '' is one not given (`spanbert curve` passes --dev '')
                if value is not None:
                    setattr(parsed, action.dest, user_path(value, action.option_strings[0]))

    def _check_outputs(self, parsed: argparse.Namespace) -> None:
        # an output option (``--output``, ``--null_odds``, ``predict glue --output_dir``) against the paths
        # the command reads (`spanbert.utils.input_paths`), before any of them is opened: the type checked
        # the output alone as it was parsed, the inputs are known only now
        inputs = input_paths(parsed)
        for action in self._actions:
            value = getattr(parsed, action.dest, None) if action.type in (output_file, output_folder) else None
            if value:
                check_apart(value, inputs)

    def error(self, message: str) -> typing.NoReturn:  # type: ignore[override]
        raise SpanBertError(f"{self.prog}: {message}")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        # a mistyped choice (``--tagger crf``, a subcommand) names the closest valid one
        if action.choices is not None and value not in action.choices:
            choices = [str(c) for c in action.choices]
            name = "/".join(action.option_strings) or action.metavar or action.dest
            raise argparse.ArgumentError(
                None,
                f"{name}: found {value!r}{_did_you_mean(str(value), choices)}; expected one of: {', '.join(choices)}",
            )

    def _suggest(self, name: str) -> str:
        """`` (did you mean '--learning_rate'?)`` for ``--learnig-rate``, in the declared spelling."""
        declared = {_canonical(o): o for o in reversed(self._long_options())}
        close = difflib.get_close_matches(_canonical(name), list(declared), n=1)
        return f" (did you mean {declared[close[0]]!r}?)" if close else ""

    def _long_options(self) -> list[str]:
        return [o for o in self._option_string_actions if o.startswith("--")]

    def _respell(self, args: list[str]) -> list[str]:
        """``--a-b`` as ``--a_b`` (or back) where only the other spelling is an option of this parser;
        a unique prefix in the other spelling too, as argparse allows abbreviations."""
        options = self._long_options()
        by_canonical: dict[str, str] = {}
        for o in options:
            by_canonical.setdefault(_canonical(o), o)
        out: list[str] = []
        for k, word in enumerate(args):
            if word == "--":  # everything after it is a positional value
                return out + args[k:]
            name, eq, value = word.partition("=")
            if not name.startswith("--") or name in self._option_string_actions:
                out.append(word)
                continue
            key = _canonical(name)
            match = by_canonical.get(key)
            if match is None and self.allow_abbrev:
                starts = {o for c, o in by_canonical.items() if c.startswith(key)}
                match = starts.pop() if len(starts) == 1 else None
            out.append(match + eq + value if match else word)
        return out


def _canonical(option: str) -> str:
    return "--" + option[2:].replace("-", "_")


def add_dataclass_arguments(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    cls: type,
    defaults: dict[str, Any] | None = None,
    exclude: tuple[str, ...] = (),
) -> None:
    """Add one ``--field`` option per dataclass field; help text from the field docstrings.

    Options default to ``argparse.SUPPRESS`` so that only what the user typed reaches
    `dataclass_from_args`, which layers it over presets and YAML. ``defaults`` only changes the
    default shown in the help (pass the same dict to `dataclass_from_args`).
    """
    docs = field_docs(cls)
    defaults = defaults or {}
    for f in fields(cls):
        if f.name in exclude:
            continue
        default = defaults.get(f.name, f.default if f.default is not dataclasses.MISSING else None)
        if f.default is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            default = defaults.get(f.name, f.default_factory())  # type: ignore[misc]
        help_text = docs.get(f.name, "")
        help_text = f"{help_text} (default: {default})".replace("%", "%%")
        _, inner = _is_optional(_field_type(cls, f.name))
        flags = [f"--{f.name}"]
        for alias in (*_ALIASES.get(f.name, ()), *f.metadata.get("flags", ())):  # taken, not listed: the help names each option once
            parser.add_argument(alias, dest=f.name, default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        if inner is bool:
            parser.add_argument(
                *flags, dest=f.name, nargs="?", const="true", default=argparse.SUPPRESS, metavar="BOOL", help=help_text
            )
        else:
            # the last word names the value (--learning_rate RATE), except where it names the unit
            metavar = _METAVARS.get(f.name, f.name.split("_")[-1].upper())
            parser.add_argument(*flags, dest=f.name, default=argparse.SUPPRESS, metavar=metavar, help=help_text)


_METAVARS = {"evals_per_epoch": "N", "metric_for_best_model": "METRIC", "precision": "DTYPE"}
# Older spellings of an option, still taken but not listed: --dtype is what the benchmarks call --precision.
_ALIASES = {"precision": ("--dtype",)}


def dataclass_from_args(
    cls: type[T],
    args: argparse.Namespace,
    defaults: dict[str, Any] | None = None,
    yaml_path: str | None = None,
    overrides: list[str] | None = None,
    *,
    sections: Sequence[type] | None = None,
) -> T:
    """Build ``cls`` from its defaults < ``defaults`` < YAML < ``--flags`` < ``key=value`` overrides.

    ``sections``: every config class the command builds from the same YAML file and ``key=value``
    list (``cls`` itself is always one). A YAML key or an override that belongs to none of them is an
    error listing the valid ones; keys of the other classes are left to their own call.
    """
    classes = list(sections or [])
    if cls not in classes:
        classes.append(cls)
    obj = cls(**{k: v for k, v in (defaults or {}).items()})  # type: ignore[call-arg]
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    if yaml_path:
        values = check_yaml(yaml_path, classes)[cls.__name__]
        obj = replace_checked(obj, values, source=str(yaml_path))
    given = {k: v for k, v in vars(args).items() if k in names}
    obj = replace_checked(obj, given, source="command line")
    if overrides:
        check_unknown_overrides(overrides, classes)
        kv = parse_key_values(overrides)
        obj = replace_checked(obj, {k: v for k, v in kv.items() if k in names}, source="command line")
    return obj


def check_unknown_overrides(overrides: list[str], classes: list[type]) -> None:
    """Fail on a ``key=value`` whose key belongs to none of ``classes``, listing the valid keys."""
    valid: list[str] = []
    for cls in classes:
        valid += [f.name for f in fields(cls)]
    for key in parse_key_values(overrides):
        if key not in valid:
            raise SpanBertError(
                f"command line: found unknown option {key!r} in {key}=...{_did_you_mean(key, valid)}; "
                f"valid options: {', '.join(sorted(set(valid)))}"
            )


__getattr__ = _aliases.getter(__name__)  # the old spellings of names that moved (`spanbert._aliases`)
