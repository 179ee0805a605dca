"""The two-tower family's settings without torch (`spanbert.cloze_config`): every preset builds and the paper's
are Table 1's, a config's checks name the option, the `--model` spec's form, and importing it loads no torch."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import typing

import pytest

from spanbert.cloze_config import CLOZE_PRESETS, CLOZE_SYSTEMS, PAPER_CHAR_FILTERS, ClozeConfig, parse_model_spec
from spanbert.errors import SpanBertError
from spanbert.pretrain_config import PretrainConfig


@pytest.mark.parametrize("name", list(CLOZE_PRESETS))
def test_every_preset_builds(name):
    cfg = ClozeConfig(**CLOZE_PRESETS[name], vocab_size=40)
    assert cfg.d_model % cfg.num_heads == 0 and cfg.objective == "cloze"


def test_the_paper_presets_are_table_1():
    base, large = ClozeConfig(**CLOZE_PRESETS["cnn_base"]), ClozeConfig(**CLOZE_PRESETS["bpe_large"])
    assert (base.num_layers, base.ffn_dim, base.d_model, base.final_heads, base.query, base.input) == (
        6, 4096, 1024, 12, "sum", "char_cnn")  # fmt: skip
    assert (large.num_layers, large.final_heads, large.query, large.input) == (12, 32, "concat", "bpe")
    assert base.optimizer == large.optimizer == "nesterov"


def test_the_defaults_are_the_papers_and_each_config_owns_its_lists():
    a, b = ClozeConfig(), ClozeConfig()
    assert a.char_filters == [list(f) for f in PAPER_CHAR_FILTERS] and a.char_filters is not b.char_filters
    assert (a.dropout, a.attention_dropout, a.relu_dropout, a.bilm_weight) == (0.1, 0.1, 0.05, 0.15)
    # the objectives a config takes are the family's --system values
    assert typing.get_args(typing.get_type_hints(ClozeConfig)["objective"]) == CLOZE_SYSTEMS


@pytest.mark.parametrize(
    ("fields", "name", "expected"),
    [
        ({"d_model": 0}, "d_model", "a positive integer"),
        ({"num_layers": 1.5}, "num_layers", "a positive integer"),
        ({"num_heads": 3}, "num_heads", "a divisor of d_model 64"),
        ({"final_heads": 65}, "final_heads", "at most d_model 64"),
        ({"query": "mean"}, "query", "sum or concat"),
        ({"objective": "mlm"}, "objective", "cloze, bilm or cloze-bilm"),
        ({"input": "bytes"}, "input", "bpe or char_cnn"),
        ({"optimizer": "sgd"}, "optimizer", "adamw or nesterov"),
        ({"relu_dropout": 1.0}, "relu_dropout", r"a probability in \[0, 1\)"),
        ({"bilm_weight": float("nan")}, "bilm_weight", "a finite number >= 0"),
        ({"highway_layers": -1}, "highway_layers", "0 or more"),
        ({"char_filters": [[1, 4, 2]]}, "char_filters", r"a list of \[width, filters\] pairs"),
        ({"char_filters": []}, "char_filters", r"a list of \[width, filters\] pairs"),
        ({"input": "char_cnn", "max_word_chars": 3}, "max_word_chars", "room for the widest character filter"),
        ({"adaptive_cutoffs": [20, 10]}, "adaptive_cutoffs", "increasing positive band ends"),
        ({"adaptive_cutoffs": [0, 10]}, "adaptive_cutoffs", "increasing positive band ends"),
    ],
    ids=lambda v: "-".join(v) if isinstance(v, dict) else None,
)
def test_a_bad_setting_is_refused_by_name(fields, name, expected):
    with pytest.raises(SpanBertError, match=rf"cloze model option {name}: found .*, expected {expected}"):
        ClozeConfig(**fields)


def test_a_setting_that_fits_is_taken():
    cfg = ClozeConfig(input="char_cnn", char_filters=[[1, 4], [6, 8]], max_word_chars=4, adaptive_cutoffs=[10, 20])
    assert cfg.adaptive_cutoffs == [10, 20] and dataclasses.replace(cfg, highway_layers=0).highway_layers == 0


def test_a_model_spec_is_a_preset_then_field_values():
    assert parse_model_spec("tiny") == ("tiny", {})
    assert parse_model_spec("cnn_large:input=bpe, dropout = 0,") == ("cnn_large", {"input": "bpe", "dropout": "0"})
    assert parse_model_spec("tiny:char_filters=[[1;4]]") == ("tiny", {"char_filters": "[[1;4]]"})  # text, as typed
    for spec, text in [
        ("huge", "--model: found unknown two-tower preset 'huge', expected one of: tiny, small, cnn_base"),
        ("tiny:nope=1", "found unknown field 'nope'"),
        ("tiny:vocab_size=5", "found unknown field 'vocab_size'"),  # set from the tokenizer, never by hand
        ("tiny:input", r"found 'input' in 'tiny:input', expected field=value"),
    ]:
        with pytest.raises(SpanBertError, match=text):
            parse_model_spec(spec)


def test_a_two_tower_run_takes_a_model_spec_and_no_bert_preset():
    PretrainConfig(system="bilm", model="cnn_large")
    with pytest.raises(SpanBertError, match="--model"):
        PretrainConfig(system="cloze", model="base")  # a BERT preset is not a two-tower preset


def test_importing_the_settings_loads_no_torch():
    code = ("import sys, spanbert.cloze_config as c\n"
            "c.ClozeConfig(**c.CLOZE_PRESETS['tiny']); c.parse_model_spec('tiny:input=char_cnn')\n"
            "assert 'torch' not in sys.modules and 'spanbert.cloze' not in sys.modules, 'torch was imported'")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
