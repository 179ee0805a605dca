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
from spanbert.training_args import TrainingArguments


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
    from spanbert.pretrain_config import SYSTEMS

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


def _parser_for(*classes):
    p = argparse.ArgumentParser()
    for cls in classes:
        add_dataclass_arguments(p, cls)
    return p


def test_yaml_keys_of_no_section_are_errors(tmp_path):
    from spanbert.masking import MaskingConfig

    y = tmp_path / "c.yaml"
    y.write_text("learning_rate: 2.0e-5\nmask_prob: 0.2\n")
    args = _parser_for(TrainingArguments, MaskingConfig).parse_args([])
    # the command builds both classes from one file: each takes its keys
    sections = [TrainingArguments, MaskingConfig]
    targs = dataclass_from_args(TrainingArguments, args, yaml_path=str(y), sections=sections)
    masking = dataclass_from_args(MaskingConfig, args, yaml_path=str(y), sections=sections)
    assert targs.learning_rate == 2e-5 and masking.mask_prob == 0.2
    # a call that does not say which other classes share the file is strict: mask_prob is unknown
    with pytest.raises(SpanBertError, match=r"c.yaml:2: found unknown option 'mask_prob'"):
        dataclass_from_args(TrainingArguments, args, yaml_path=str(y))
    # so is a key=value override
    with pytest.raises(SpanBertError, match="'mask_probb'"):
        dataclass_from_args(TrainingArguments, args, overrides=["mask_probb=0.1"], sections=sections)


def test_yaml_sections_and_flat_keys_merge(tmp_path):
    from spanbert.config import check_yaml
    from spanbert.masking import MaskingConfig

    y = tmp_path / "c.yaml"
    y.write_text("seed: 3\nTrainingArguments:\n  learning_rate: 1.0e-4\nMaskingConfig:\nmask_prob: 0.3\n")
    out = check_yaml(y, [TrainingArguments, MaskingConfig])
    assert out == {"TrainingArguments": {"seed": 3, "learning_rate": 1e-4}, "MaskingConfig": {"mask_prob": 0.3}}
    y.write_text("TrainingArguments: [1]\n")
    with pytest.raises(SpanBertError, match=r"c.yaml:1: section TrainingArguments: found a list \[1\]"):
        check_yaml(y, [TrainingArguments])


@pytest.mark.parametrize(
    "yaml_text,match",
    [
        ("max_steps: [1, 2]", "option max_steps: found a list [1, 2], expected an integer"),
        ("learning_rate: {a: 1}", "option learning_rate: found a mapping {'a': 1}, expected a number"),
        ("resume: maybe", "option resume: found 'maybe', expected a boolean"),
        ("max_steps: false", "option max_steps: found false (a boolean), expected an integer"),
        ("learning_rate: .nan", "option learning_rate: found NaN, expected a number"),
        ("max_steps: 1.5", "option max_steps: found 1.5, expected an integer"),
        ("precision: [fp32]", "option precision: found a list ['fp32'], expected one of auto, fp32, bf16, fp16"),
        ("output_dir: [a]", "option output_dir: found a list ['a'], expected a string"),
        ("output_dir: yes", "option output_dir: found true (a boolean), expected a string"),
        ("learning_rate:", "option learning_rate: found None, expected a number"),
    ],
)
def test_yaml_wrong_types_name_file_line_and_option(tmp_path, yaml_text, match):
    import re

    y = tmp_path / "c.yaml"
    y.write_text("seed: 1\n" + yaml_text + "\n")
    with pytest.raises(SpanBertError, match=re.escape(f"{y}:2: {match}")):
        dataclass_from_args(TrainingArguments, argparse.Namespace(), yaml_path=str(y))


def test_convert_value_raises_only_spanbert_errors():
    """Whatever a YAML file holds, converting it is a value or a SpanBertError, never a TypeError."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from spanbert.config import convert_value
    from spanbert.masking import MaskingConfig

    scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
    values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=6)
    names = [(cls, f) for cls in (TrainingArguments, MaskingConfig, BertConfig) for f in cls.__dataclass_fields__]

    @settings(max_examples=60, deadline=None)
    @given(st.sampled_from(names), values)
    def check(name, value):
        try:
            convert_value(name[0], name[1], value, source="x.yaml")
        except SpanBertError as e:
            assert str(e).startswith(f"x.yaml: option {name[1]}: found ")

    check()


@pytest.mark.parametrize(
    "edit,match",
    [
        ({"hidden_size": "64"}, '"hidden_size": "64" (a string), expected an integer'),
        ({"hidden_size": 64.0}, '"hidden_size": 64.0 (a number), expected an integer'),
        ({"num_hidden_layers": True}, '"num_hidden_layers": true (a boolean), expected an integer'),
        ({"layer_norm_eps": "1e-12"}, "expected a number"),
        ({"num_attention_heads": 0}, "expected a positive integer"),
        ({"hidden_dropout_prob": 1.5}, "expected a probability in [0, 1)"),
        ({"hidden_act": "swish"}, "expected gelu, gelu_new or relu"),
        ({"vocab_size": None}, "found no vocab_size"),
    ],
)
def test_hf_config_is_type_checked(edit, match):
    d = {**model_config("tiny").to_hf_dict(), **edit}
    with pytest.raises(SpanBertError, match=r"^m/config.json: .*" + __import__("re").escape(match)):
        BertConfig.from_hf_dict(d, source="m/config.json")
    with pytest.raises(SpanBertError, match="found a JSON array"):
        BertConfig.from_hf_dict([1], source="m/config.json")  # type: ignore[arg-type]
    # keys HF writes that are not ours, and nulls, are ignored
    assert BertConfig.from_hf_dict({**model_config("tiny").to_hf_dict(), "pad_token_id": None, "foo": [1]}) == model_config("tiny")


# ---------------------------------------------------------------------------------------------
# One reader for every command's --config (issue 29): the same FILE:LINE error, the same sections

# every command that takes --config: (argv before --config, {section: (option, YAML value)} it accepts)
CONFIG_COMMANDS = {
    "pretrain": (["pretrain"], {"PretrainConfig": ("max_seq_length", 64), "MaskingConfig": ("mask_prob", 0.2)}),
    "squad": (["finetune", "squad", "--train_file", "t.json"], {"QAConfig": ("doc_stride", 64)}),
    "mrqa": (["finetune", "mrqa", "--train_file", "t.jsonl"], {"QAConfig": ("doc_stride", 64)}),
    "tacred": (["finetune", "tacred", "--train", "t.json"], {}),
    "semeval": (["finetune", "semeval", "--train", "t.txt"], {}),
    "glue": (["finetune", "glue", "--task", "SST-2", "--data_dir", "d"], {}),
    "ner": (["finetune", "ner", "--train", "t.conll"], {}),
    "ner-features": (["finetune", "ner", "--features", "last_hidden", "--train", "t.conll"], {"HeadConfig": ("lstm_hidden_size", 8)}),
    "coref": (["finetune", "coref", "--train", "t.conll"], {"CorefConfig": ("max_span_width", 10)}),
    "swag": (["finetune", "swag", "--train", "t.csv"], {}),
    "parse": (["finetune", "parse", "--train", "t.mrg"], {"ParseConfig": ("parser_layers", 1)}),
}


def _config_argv(name: str, tmp_path, text: str) -> tuple[list, object]:
    prefix, _ = CONFIG_COMMANDS[name]
    y = tmp_path / "cfg.yaml"
    y.write_text(text)
    model = [] if name == "pretrain" else ["--model", tmp_path / "no-model"]
    return [*prefix, *model, "--output_dir", tmp_path / "out", "--config", y], y


@pytest.mark.parametrize("name", sorted(CONFIG_COMMANDS))
def test_every_command_reports_a_yaml_typo_with_file_line_and_suggestion(name, tmp_path, cli_error):
    argv, y = _config_argv(name, tmp_path, "seed: 1\nlearnig_rate: 0.1\n")
    cli_error(argv, contains=f"error: {y}:2: found unknown option 'learnig_rate' (did you mean 'learning_rate'?)",
              out=tmp_path)  # fmt: skip
    # a value of the wrong type names the file and line too
    argv, y = _config_argv(name, tmp_path, "seed: 1\nTrainingArguments:\n  max_steps: many\n")
    cli_error(argv, contains=f"{y}:3: option max_steps: found 'many', expected an integer", out=tmp_path)


@pytest.mark.parametrize("name", sorted(CONFIG_COMMANDS))
def test_every_command_refuses_a_section_it_does_not_use_with_its_line(name, tmp_path, cli_error):
    unused = "QAConfig" if name != "squad" and name != "mrqa" else "MaskingConfig"
    argv, y = _config_argv(name, tmp_path, f"seed: 1\n{unused}:\n  doc_stride: 64\n")
    cli_error(argv, contains=f"error: {y}:2: found section '{unused}', which this command does not use", out=tmp_path)


@pytest.mark.parametrize("name", sorted(CONFIG_COMMANDS))
def test_every_command_accepts_the_sections_of_its_config_classes(name, tmp_path, monkeypatch):
    """TrainingArguments and the command's own classes as sections: parsed, and the values arrive."""
    import yaml

    from spanbert import pretrain_command
    from spanbert.cli import main
    from spanbert.tasks import finetuning

    seen = {}

    def stop(*args, **kwargs):
        seen["targs"] = next(a for a in [*args, *kwargs.values()] if isinstance(a, TrainingArguments))
        raise KeyboardInterrupt  # parsed: stop before any work

    monkeypatch.setattr(finetuning, "check_output_dir", stop)  # the first step of every task's `finetune`
    monkeypatch.setattr(pretrain_command, "pretrain", stop)  # the job the command calls
    _, sections = CONFIG_COMMANDS[name]
    text = {"TrainingArguments": {"learning_rate": 0.25}}
    text.update({section: {key: value} for section, (key, value) in sections.items()})
    argv, _ = _config_argv(name, tmp_path, yaml.safe_dump(text))
    assert main([str(a) for a in argv]) == 130  # "interrupted" by the spy: the file was read
    assert seen["targs"].learning_rate == 0.25


def test_a_yaml_file_is_read_once_per_version(tmp_path, monkeypatch):
    # one `finetune` asks for its --config from the parser's defaults, the family's, the checks: once is enough
    import os
    from pathlib import Path

    from spanbert.config import load_yaml

    f = tmp_path / "c.yaml"
    f.write_text("learning_rate: 1.0e-3\nlabels: [a]\n")
    reads = []
    real = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: reads.append(self.name) or real(self))
    first = load_yaml(f)
    first["labels"].append("b")  # a caller's change stays its own
    assert load_yaml(f) == {"learning_rate": 1e-3, "labels": ["a"]} and reads == ["c.yaml"]
    f.write_text("learning_rate: 3.0e-3\nlabels: [a]\n")
    os.utime(f, ns=(1, 1))  # another version of the file: read again
    assert load_yaml(f)["learning_rate"] == 3e-3 and len(reads) == 2
    f.write_text("learning_rate: [\n")
    os.utime(f, ns=(2, 2))
    for _ in range(2):  # an error is said every time, not kept
        with pytest.raises(SpanBertError, match="not valid YAML"):
            load_yaml(f)
    assert len(reads) == 4
