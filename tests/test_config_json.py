"""spanbert.config_json: a config.json value of the wrong JSON type, a missing size or a number out of
its range is one SpanBertError naming the key, for every family's reader."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from spanbert.config_json import check_ranges, check_settings, json_item, json_kind, type_name, typed_fields
from spanbert.errors import SpanBertError


@dataclass
class Sizes:
    width: int = 8
    rate: float = 0.1
    causal: bool = False
    act: str = "gelu"


def test_typed_fields_keeps_what_is_given_and_names_a_wrong_type():
    assert typed_fields(Sizes, {"width": 16, "rate": None, "extra": 1}, "c.json: ") == {"width": 16}
    assert typed_fields(Sizes, {"width": 16, "act": "relu"}, "", skip=("act",)) == {"width": 16}
    with pytest.raises(SpanBertError, match=r'c.json: found "width": "16" \(a string\), expected an integer'):
        typed_fields(Sizes, {"width": "16"}, "c.json: ")
    with pytest.raises(SpanBertError, match=r'"causal": 1 \(a number\), expected a boolean'):
        typed_fields(Sizes, {"causal": 1}, "")
    with pytest.raises(SpanBertError, match=r'"width": true \(a boolean\), expected an integer'):
        typed_fields(Sizes, {"width": True}, "")  # a bool is no integer here


def test_check_settings_wants_an_object_with_the_sizes():
    check_settings({"width": 8}, "", "toy", "a toy model", ("width",))
    with pytest.raises(SpanBertError, match="found a JSON array, expected a JSON object of toy settings"):
        check_settings([1], "", "toy", "a toy model", ("width",))
    with pytest.raises(SpanBertError, match=r"found no width, expected the sizes of a toy model \(width\)"):
        check_settings({"width": None}, "", "toy", "a toy model", ("width",))


def test_check_ranges_in_order_and_absent_keys_pass():
    check_ranges({"width": 1, "rate": 0.0}, "", positive=("width", "depth"), probabilities=("rate",))
    with pytest.raises(SpanBertError, match=r'"width": 0 \(a number\), expected a positive integer'):
        check_ranges({"width": 0}, "", positive=("width",))
    with pytest.raises(SpanBertError, match=r"expected a probability in \[0, 1\)"):
        check_ranges({"rate": 1.0}, "", probabilities=("rate",))
    with pytest.raises(SpanBertError, match="expected a number > 0"):
        check_ranges({"eps": 0.0}, "", above_zero=("eps",))


def test_how_values_and_types_read_in_errors():
    assert json_kind({}) == "object" and json_kind(None) == "null" and json_kind(1.5) == "number"
    assert json_item("k", "x" * 50) == '"k": "' + "x" * 36 + '... (a string)'  # cut at 40 characters
    assert type_name(int) == "an integer" and type_name(bool) == "a boolean (true/false)"
