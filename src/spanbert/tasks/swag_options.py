"""The options of ``spanbert finetune|predict|evaluate swag``, one dataclass an action, and the task's
training defaults (`DEFAULTS`). No torch: ``--help`` is built from these alone (`spanbert.tasks.options`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spanbert.tasks.options import Finetune, Inference, finetune_defaults, nested, option
from spanbert.training_args import TrainingArguments

DEFAULTS: dict[str, Any] = finetune_defaults(
    "accuracy", output_dir="runs/swag", learning_rate=2e-5, per_device_train_batch_size=16, num_train_epochs=3.0
)
"""BERT §4.4: 3 epochs, learning rate 2e-5, batch size 16 (10% warmup, BERT's fine-tuning default). As
every spanbert task, the model of the best dev accuracy of 10 evaluations an epoch is kept when a
validation file is given (the released SpanBERT scripts' selection; BERT reports the final model)."""


@dataclass(kw_only=True)
class SwagFinetune(Finetune):
    """``spanbert finetune swag``."""

    train_file: str = option(path="input", flags=("--train",))
    """SWAG train.csv"""
    validation_file: str | None = option(None, path="input", flags=("--dev",))
    """SWAG val.csv: accuracy during and after training"""
    max_seq_length: int | None = option(None, metavar="N")
    """tokens per choice sequence (default: 128, or the encoder's positions when it has fewer)"""
    max_train_examples: int | None = None
    """use only the first N training examples"""
    max_eval_examples: int | None = None
    """use only the first N dev examples"""
    training: TrainingArguments = nested(TrainingArguments, defaults=DEFAULTS, family=True, title="training")


@dataclass(kw_only=True)
class SwagPredict(Inference):
    """``spanbert predict swag --data CSV --model DIR --output CSV``."""

    data: str = option(path="input")
    """SWAG CSV file (val.csv, or test.csv for predict)"""
    model: str = option(path="input")
    """folder saved by `spanbert finetune swag`"""
    output: str = option(path="output_file")
    """CSV to write: video-id,fold-ind,label"""
    batch_size: int = 64
    """examples per batch"""


@dataclass(kw_only=True)
class SwagEvaluate(Inference):
    """``spanbert evaluate swag --data CSV (--predictions CSV | --model DIR)``."""

    data: str = option(path="input")
    """SWAG CSV file (val.csv, or test.csv for predict)"""
    predictions: str | None = option(None, path="input")
    """CSV written by `spanbert predict swag`"""
    model: str | None = option(None, path="input")
    """fine-tuned model folder: predict, then score"""
    batch_size: int = 64
    """examples per batch (with --model)"""


ACTIONS = {"finetune": SwagFinetune, "predict": SwagPredict, "evaluate": SwagEvaluate}
"""Each action's options, for the registry (`spanbert.tasks.registry.TASKS.options`)."""
