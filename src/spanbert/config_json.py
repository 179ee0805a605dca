"""Reading a model's config.json, checked: each value of the right JSON type for its dataclass field
(`typed_fields`), the sizes present (`check_settings`), each number in its range (`check_ranges`), and how
a JSON value reads in the error (`json_item`). Every family's reader (BERT's `config.BertConfig.from_hf_dict`,
ModernBERT's, the two-tower model's) opens with these, so a config.json that describes no model of the
family is one `SpanBertError` naming the key, never a crash deep inside a model. No torch: the command
parsers read the types' names from here too (`type_name`, `type_hints`)."""

from __future__ import annotations

import functools
import json
import math
import types
import typing
from dataclasses import fields
from typing import Any

from spanbert.errors import SpanBertError


@functools.cache
def type_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return "one of " + ", ".join(map(str, typing.get_args(tp)))
    if origin in (list, tuple):
        return f"a comma-separated list of {type_name(typing.get_args(tp)[0])}"
    if origin in (typing.Union, types.UnionType):  # int | Literal["auto"]: "an integer or auto"
        return " or ".join(type_name(a) if typing.get_origin(a) is not typing.Literal else "/".join(map(str, typing.get_args(a)))
                           for a in typing.get_args(tp))  # fmt: skip
    return {bool: "a boolean (true/false)", int: "an integer", float: "a number", str: "a string"}.get(
        tp, getattr(tp, "__name__", str(tp))
    )


def typed_fields(cls: type, d: dict[str, Any], where: str, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The values ``d`` (a config.json dict) gives the int, float, bool and str fields of the dataclass
    ``cls``, each type-checked (``"hidden_size": "768"`` is an error naming the key, not a crash deep in
    a model); absent or null keys and those in ``skip`` are left out. ``where`` starts every message."""
    hints = type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in fields(cls):
        value = d.get(f.name)
        if value is None or f.name in skip:
            continue
        tp = hints[f.name]
        if tp is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif tp is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        elif tp is bool:
            ok = isinstance(value, bool)
        else:
            ok = isinstance(value, str)
        if not ok:
            raise SpanBertError(f"{where}found {json_item(f.name, value)}, expected {type_name(tp)}")
        kwargs[f.name] = value
    return kwargs


def check_settings(d: Any, where: str, family: str, model: str, required: tuple[str, ...]) -> None:
    """Refuse a config.json value that is no JSON object of ``family`` settings, or one without a key of
    ``required`` (the sizes: a default would build another ``model`` than the saved one). ``where`` starts
    every message."""
    if not isinstance(d, dict):
        raise SpanBertError(f"{where}found a JSON {json_kind(d)}, expected a JSON object of {family} settings")
    missing = [k for k in required if d.get(k) is None]
    if missing:
        raise SpanBertError(
            f"{where}found no {', '.join(missing)}, expected the sizes of {model} ({', '.join(required)})"
        )


def check_ranges(
    kwargs: dict[str, Any],
    where: str,
    positive: tuple[str, ...] = (),
    above_zero: tuple[str, ...] = (),
    non_negative: tuple[str, ...] = (),
    probabilities: tuple[str, ...] = (),
) -> None:
    """Refuse a value of ``kwargs`` (config.json values `typed_fields` read) out of its range, in this
    order: ``positive`` integers (sizes), numbers ``above_zero`` (epsilons, RoPE bases), ``non_negative``
    numbers (initialisation scales), ``probabilities`` in [0, 1) (dropout). A key absent from ``kwargs``
    passes; ``where`` starts every message."""
    rules = (
        (positive, lambda v: not v < 1, "a positive integer"),
        (above_zero, lambda v: v > 0, "a number > 0"),
        (non_negative, lambda v: not v < 0, "a number >= 0"),
        (probabilities, lambda v: 0 <= v < 1, "a probability in [0, 1)"),
    )
    for keys, ok, expected in rules:
        for k in keys:
            if k in kwargs and not ok(kwargs[k]):
                raise SpanBertError(f"{where}found {json_item(k, kwargs[k])}, expected {expected}")


def json_kind(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number"
    )


def json_item(key: str, value: Any) -> str:
    text = json.dumps(value)
    text = text if len(text) <= 40 else text[:37] + "..."
    kind = json_kind(value)
    return f'"{key}": {text} ({"an" if kind[0] in "aeiou" else "a"} {kind})'
