"""Dataclass configs, named presets, and the plumbing that turns them into command-line options.

Every config field carries a docstring (a string literal on the line after it); that text becomes the
option's `--help`. Values are resolved in this order: dataclass default < preset < YAML file <
`--flag value` / `key=value` on the command line. Every override is type-checked, and an unknown key is
an error that lists the valid ones.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import textwrap
import types
import typing
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

from spanbert.errors import SpanBertError

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
    def from_hf_dict(cls, d: dict[str, Any]) -> BertConfig:
        """Read a HF (or original Google/SpanBERT) config.json; unknown keys are ignored."""
        names = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in names}
        if kwargs.get("hidden_act") not in (None, "gelu", "gelu_new", "relu"):
            raise SpanBertError(f"unsupported hidden_act {kwargs['hidden_act']!r} (gelu, gelu_new or relu)")
        return cls(**kwargs)


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
    return typing.get_type_hints(cls)[name]


def _is_optional(tp: Any) -> tuple[bool, Any]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return True, args[0]
    return False, tp


def convert_value(cls: type, name: str, value: Any, source: str = "") -> Any:
    """Check and convert ``value`` (a string from the command line, or a YAML value) to the field's type."""
    tp = _field_type(cls, name)
    optional, inner = _is_optional(tp)
    where = f" ({source})" if source else ""
    if value is None or (optional and isinstance(value, str) and value.lower() in ("none", "null", "")):
        if optional:
            return None
        raise SpanBertError(f"{name}{where}: None is not allowed; expected {getattr(inner, '__name__', inner)}")
    origin = typing.get_origin(inner)
    if origin is typing.Literal:
        choices = typing.get_args(inner)
        if value not in choices:
            raise SpanBertError(f"{name}{where}: {value!r} is not one of {', '.join(map(str, choices))}")
        return value
    if origin in (list, tuple):
        (item,) = typing.get_args(inner)[:1]
        items = value if isinstance(value, (list, tuple)) else [v for v in str(value).split(",") if v.strip()]
        try:
            out = [item(v) if not isinstance(v, item) else v for v in items]
        except (TypeError, ValueError):
            raise SpanBertError(f"{name}{where}: {value!r} is not a comma-separated list of {item.__name__}") from None
        return out if origin is list else tuple(out)
    if inner is bool:
        if isinstance(value, bool):
            return value
        s = str(value).lower()
        if s in ("1", "true", "yes", "on"):
            return True
        if s in ("0", "false", "no", "off"):
            return False
        raise SpanBertError(f"{name}{where}: {value!r} is not a boolean (true/false)")
    if inner is int:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise SpanBertError(f"{name}{where}: {value!r} is not an integer")
        try:
            return int(value) if not isinstance(value, str) else int(value.replace("_", ""))
        except ValueError:
            try:  # accept 1e4 for integer fields such as steps
                f = float(value)
            except ValueError:
                f = None
            if f is not None and f.is_integer():
                return int(f)
            raise SpanBertError(f"{name}{where}: {value!r} is not an integer") from None
    if inner is float:
        if isinstance(value, bool):
            raise SpanBertError(f"{name}{where}: {value!r} is not a number")
        try:
            return float(value)
        except ValueError:
            raise SpanBertError(f"{name}{where}: {value!r} is not a number") from None
    if inner is str:
        if not isinstance(value, (str, int, float)):
            raise SpanBertError(f"{name}{where}: {value!r} is not a string")
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
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpanBertError(f"{path}: config file not found") from None
    except yaml.YAMLError as e:
        raise SpanBertError(f"{path}: not valid YAML: {e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SpanBertError(f"{path}: expected a mapping of option: value, found {type(data).__name__}")
    return data


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
        flag = f"--{f.name}"
        if inner is bool:
            parser.add_argument(
                flag, nargs="?", const="true", default=argparse.SUPPRESS, metavar="BOOL", help=help_text
            )
        else:
            metavar = f.name.split("_")[-1].upper()
            parser.add_argument(flag, default=argparse.SUPPRESS, metavar=metavar, help=help_text)


def dataclass_from_args(
    cls: type[T],
    args: argparse.Namespace,
    defaults: dict[str, Any] | None = None,
    yaml_path: str | None = None,
    overrides: list[str] | None = None,
) -> T:
    """Build ``cls`` from its defaults < ``defaults`` < YAML < ``--flags`` < ``key=value`` overrides."""
    obj = cls(**{k: v for k, v in (defaults or {}).items()})  # type: ignore[call-arg]
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    if yaml_path:
        data = load_yaml(yaml_path)
        section = data.get(cls.__name__, data)
        obj = replace_checked(obj, {k: v for k, v in section.items() if k in names}, source=str(yaml_path))
    given = {k: v for k, v in vars(args).items() if k in names}
    obj = replace_checked(obj, given, source="command line")
    if overrides:
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
            raise SpanBertError(f"unknown option {key!r}; valid options: {', '.join(sorted(set(valid)))}")
