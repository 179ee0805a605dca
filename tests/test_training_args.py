"""`TrainingArguments` (`spanbert.training_args`): the options of the training loop, each checked when the
arguments are made, so a mistake is one clear error before any work."""

from __future__ import annotations

import pytest

from spanbert.errors import SpanBertError
from spanbert.training_args import TrainingArguments


@pytest.mark.parametrize(
    "kw, text",
    [
        ({"learning_rate": -1.0}, "--learning_rate"),
        ({"learning_rate": float("nan")}, "finite"),
        ({"adam_beta1": 1.0}, "--adam_beta1"),
        ({"adam_epsilon": 0.0}, "--adam_epsilon"),
        ({"seed": -1}, "--seed"),
        ({"warmup_ratio": 1.5}, "--warmup_ratio"),
        ({"device": "cpux"}, "cpux"),
        ({"device": "cuda:x"}, "cuda:x"),
        ({"device": "gpu"}, "gpu"),
        ({"resume": True, "overwrite_output_dir": True}, "at most one"),
    ],
)
def test_training_arguments_are_validated(kw, text):
    with pytest.raises(SpanBertError, match=text):
        TrainingArguments(**kw)
