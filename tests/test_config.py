"""Configs: presets build, overrides are type-checked, unknown keys are errors listing the valid ones."""

from __future__ import annotations

import argparse

import pytest

from spanbert.config import (
    MODEL_PRESETS,
    BertConfig,
    add_dataclass_arguments,
    dataclass_from_args,
    field_docs,
    model_config,
    replace_checked,
)
from spanbert.errors import SpanBertError
from spanbert.trainer import TrainingArguments


@pytest.mark.parametrize("name", list(MODEL_PRESETS))
def test_every_preset_builds(name):
    cfg = model_config(name)
    assert cfg.vocab_size == 28996 and cfg.layer_norm_eps == 1e-12 and cfg.hidden_act == "gelu"
    assert cfg.hidden_dropout_prob == cfg.attention_probs_dropout_prob == 0.1
    if name in ("tiny", "small"):  # the big ones are only checked as configs, to keep tests fast
        from spanbert import Encoder

        enc = Encoder(model_config(name, vocab_size=50))
        assert len(enc.encoder.layer) == cfg.num_hidden_layers


def test_base_and_large_are_the_papers():
    base, large = model_config("base"), model_config("large")
    assert (base.num_hidden_layers, base.hidden_size, base.num_attention_heads) == (12, 768, 12)
    assert (large.num_hidden_layers, large.hidden_size, large.num_attention_heads, large.intermediate_size) == (
        24,
        1024,
        16,
        4096,
    )


def test_every_preset_of_the_systems_builds():
    from spanbert.model import SpanBertForPreTraining
    from spanbert.pretrain import SYSTEMS

    for name, (_, mode, sbo, _) in SYSTEMS.items():
        model = SpanBertForPreTraining(model_config("tiny", vocab_size=50), sbo=sbo, nsp=mode == "nsp")
        assert (model.cls.span_predictions is not None) == sbo, name


def test_unknown_preset_lists_valid():
    with pytest.raises(SpanBertError, match="tiny, small, base, large"):
        model_config("huge")


def test_unknown_key_lists_valid_ones():
    with pytest.raises(SpanBertError) as e:
        replace_checked(TrainingArguments(), {"learning_rat": "1e-4"})
    assert "learning_rat" in str(e.value) and "learning_rate" in str(e.value)


@pytest.mark.parametrize(
    "key,value",
    [("max_steps", "ten"), ("max_steps", "1.5"), ("learning_rate", "fast"), ("resume", "maybe"), ("precision", "fp8")],
)
def test_wrong_type_is_an_error(key, value):
    with pytest.raises(SpanBertError, match=key):
        replace_checked(TrainingArguments(), {key: value})


def test_values_are_converted():
    args = replace_checked(
        TrainingArguments(), {"max_steps": "1e4", "learning_rate": "2e-5", "resume": "true", "precision": "bf16"}
    )
    assert args.max_steps == 10_000 and args.learning_rate == 2e-5 and args.resume is True
    assert args.precision == "bf16"


def test_help_comes_from_field_docstrings():
    docs = field_docs(TrainingArguments)
    assert set(docs) == {f for f in TrainingArguments.__dataclass_fields__}
    assert "warmup" in docs["warmup_steps"]
    p = argparse.ArgumentParser()
    add_dataclass_arguments(p, BertConfig)
    assert "Width H of every layer" in p.format_help()


def test_layering_defaults_yaml_flags_overrides(tmp_path):
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text("learning_rate: 3.0e-5\nmax_steps: 7\nseed: 5\n")
    p = argparse.ArgumentParser()
    add_dataclass_arguments(p, TrainingArguments)
    args = p.parse_args(["--max_steps", "9"])
    out = dataclass_from_args(
        TrainingArguments, args, defaults={"seed": 1, "logging_steps": 3}, yaml_path=str(yaml_file), overrides=["seed=11"]
    )
    assert (out.learning_rate, out.max_steps, out.seed, out.logging_steps) == (3e-5, 9, 11, 3)


def test_yaml_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("learning_rate: [1, 2\n")
    p = argparse.ArgumentParser()
    add_dataclass_arguments(p, TrainingArguments)
    with pytest.raises(SpanBertError, match="bad.yaml"):
        dataclass_from_args(TrainingArguments, p.parse_args([]), yaml_path=str(bad))
    typo = tmp_path / "typo.yaml"
    typo.write_text("lerning_rate: 1\n")
    from spanbert.config import check_unknown_overrides, load_yaml

    with pytest.raises(SpanBertError, match="lerning_rate"):
        check_unknown_overrides([f"{k}=x" for k in load_yaml(typo)], [TrainingArguments])


def test_bert_config_checks_heads():
    with pytest.raises(SpanBertError, match="divisible"):
        BertConfig(hidden_size=100, num_attention_heads=3)


def test_hf_config_round_trip():
    cfg = model_config("small")
    assert BertConfig.from_hf_dict({**cfg.to_hf_dict(), "architectures": ["BertModel"]}) == cfg
