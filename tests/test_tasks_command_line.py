"""A task command's parser (`spanbert.tasks.command_line`): switches take a bare flag or true/false, the help
opens with the action's sentence, the model is found in the flags or the --config YAML, and an unset
--max_seq_length becomes the task's default or the encoder's positions when fewer."""

from __future__ import annotations

import argparse

import pytest

from spanbert.errors import SpanBertError
from spanbert.tasks.command_line import (
    add_sequence_length_argument,
    add_switch,
    model_in_argv,
    parse_bool,
    resolve_sequence_length,
    task_parser,
    training_arguments,
)


def test_a_switch_is_a_bare_flag_or_a_boolean_value():
    parser = argparse.ArgumentParser()
    add_switch(parser, "--disable_tqdm", help="hide the bars")
    assert parser.parse_args([]).disable_tqdm is False
    assert parser.parse_args(["--disable_tqdm"]).disable_tqdm is True
    assert parser.parse_args(["--disable_tqdm", "false"]).disable_tqdm is False
    assert [parse_bool(x) for x in ("yes", "0", "ON", "False")] == [True, False, True, False]
    with pytest.raises(argparse.ArgumentTypeError, match="expected true or false"):
        parse_bool("maybe")


def test_the_help_of_a_registered_task_opens_with_its_actions_sentence():
    text = task_parser("spanbert predict ner", "module docstring\n\nmore").format_help()
    assert "Write a fine-tuned model's predictions for ner" in text and "module docstring" not in text
    assert task_parser("spanbert other", "First paragraph.\n\nSecond.").description == "First paragraph."


def test_the_model_is_read_from_the_flags_or_from_the_yaml(tmp_path):
    assert model_in_argv(["--model", "m1", "--train", "t"]) == "m1"
    config = tmp_path / "c.yaml"
    config.write_text("model: from-yaml\nlearning_rate: 0.1\n")
    assert model_in_argv(["--config", str(config)]) == "from-yaml"
    assert model_in_argv(["--config", str(config), "--model", "flag"]) == "flag"  # the flag wins
    assert model_in_argv(["--train", "t"]) is None


def test_an_unset_sequence_length_is_the_default_and_a_given_one_must_fit(tmp_path):
    from spanbert.config import model_config
    from spanbert.model import Encoder

    model = tmp_path / "m"
    Encoder(model_config("tiny", vocab_size=30, max_position_embeddings=64)).save_pretrained(model)
    parser = argparse.ArgumentParser()
    parser.add_argument("--model")
    add_sequence_length_argument(parser, "tokens per input")
    args = parser.parse_args(["--model", str(model)])
    resolve_sequence_length(args)
    assert args.max_seq_length == 64  # the default 128 is more than the encoder's positions
    args = parser.parse_args(["--model", str(model), "--max_seq_length", "100"])
    with pytest.raises(SpanBertError, match="expected at most the 64 positions"):
        resolve_sequence_length(args)


def test_training_arguments_take_the_defaults_under_the_flags_and_the_overrides():
    args = argparse.Namespace(learning_rate=3e-5, overrides=["max_steps=7"])
    targs = training_arguments(args, {"learning_rate": 1e-3, "num_train_epochs": 2.0})
    assert (targs.learning_rate, targs.num_train_epochs, targs.max_steps) == (3e-5, 2.0, 7)
