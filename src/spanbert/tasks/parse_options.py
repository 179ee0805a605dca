"""The options of ``spanbert finetune|predict|evaluate parse``, one dataclass an action, and the parser's
settings (`ParseConfig`, saved with the model). No torch: ``--help`` is built from these alone
(`spanbert.tasks.options`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spanbert.config import FinetuneHabits
from spanbert.tasks.options import (
    Finetune,
    Inference,
    finetune_defaults,
    model_family_defaults,
    model_habits,
    nested,
    option,
)
from spanbert.training_args import TrainingArguments


@dataclass
class ParseConfig:
    """The parser on top of the encoder (Kitaev & Klein 2018), and its encoder's learning rate."""

    parser_layers: int = 2
    """Transformer layers of the parsing encoder on the word vectors (§6.2.2: two)."""
    d_model: int = 256
    """Width of the parser layers (K&K 2018: 1024; small by default, as the models here are)."""
    num_heads: int = 8
    """Attention heads of each parser layer."""
    d_ff: int = 1024
    """Feed-forward width of each parser layer."""
    label_hidden: int = 250
    """Hidden width of the span label MLP (K&K 2018: 250)."""
    parser_dropout: float = 0.2
    """Dropout in the parser layers and on their input (K&K 2018: 0.2)."""
    max_words: int = 300
    """Longest sentence in words (the parser's learned position table)."""
    max_seq_length: int = 512
    """Longest sentence in sub-word tokens with [cls]/[sep]; a longer one is an error naming it."""
    encoder_learning_rate: float = -1.0
    """Peak rate of the encoder's (language model's) weights; --learning_rate is the parser's. -1: the
    family's default (two-tower: 8e-4 with the parser at 8e-3, §6.2.2; BERT family: 5e-5 with 8e-4)."""
    tag_loss_weight: float = 1.0
    """Weight of the POS tagging loss beside the parsing loss (0: no tagger training)."""


DEFAULTS: dict[str, Any] = finetune_defaults(
    "f1", output_dir="runs/parse", learning_rate=8e-4, max_tokens_per_batch=1000, num_train_epochs=10.0,
    evals_per_epoch=1,
)
"""Training defaults: batches of sentences of similar length, at most 1,000 sub-word tokens with padding
(about 30 sentences; a long sentence's chart is quadratic in its words, so a 249-word sentence of the
sample must not pad 31 others to its length), 10 epochs with 10% warmup, the parser at the BERT
family's rate (another family's are set by `family_rates`); the model of the best dev EVALB F1
of one evaluation an epoch is kept (each evaluation parses the whole dev set)."""


def family_rates(model_dir: str | None) -> tuple[float, float]:
    """(encoder, parser) learning rates of the family in ``model_dir``, as its habits give them
    (`FinetuneHabits.parse_learning_rates`); the default habits' when the folder is unreadable (the load
    reports its problem later)."""
    return (model_habits(model_dir) or FinetuneHabits()).parse_learning_rates



def training_defaults(given: Mapping[str, Any]) -> dict[str, Any]:
    """The `TrainingArguments` defaults of ``finetune parse`` for the ``--model`` given: the task's, the
    family's over them, and the parser's rate of the family on top (`family_rates`)."""
    model = given.get("model")
    return {**DEFAULTS, **model_family_defaults(model), "learning_rate": family_rates(model)[1]}


@dataclass(kw_only=True)
class ParseFinetune(Finetune):
    """``spanbert finetune parse --model DIR --train_file TREES [--validation_file TREES]``."""

    train_file: str = option(path="input", flags=("--train",))
    """training trees: a PTB .mrg file, a folder of them, or one tree a line"""
    validation_file: str | None = option(None, path="input", flags=("--dev",))
    """dev trees, parsed and scored with EVALB (COLLINS.prm) to select the model"""
    max_train_examples: int | None = None
    """use only the first N training trees"""
    max_eval_examples: int | None = None
    """use only the first N dev trees"""
    # the encoder's rate of the model's family (as the parser's is --learning_rate's default): --help shows it
    parser: ParseConfig = nested(ParseConfig, defaults=lambda given: {"encoder_learning_rate": family_rates(
        given.get("model"))[0]}, title="parser")  # fmt: skip
    training: TrainingArguments = nested(TrainingArguments, defaults=training_defaults, title="training")


@dataclass(kw_only=True)
class ParsePredict(Inference):
    """``spanbert predict parse --model DIR (--data TREES --output FILE | --text SENTENCE ...)``."""

    model: str = option(path="input")
    """folder saved by `spanbert finetune parse`"""
    data: str | None = option(None, path="input")
    """trees to parse again (their words; a .mrg file, a folder or one tree a line): scored with EVALB too"""
    text: list[str] | None = option(None, append=True)
    """a raw sentence to parse (repeatable)"""
    output: str | None = option(None, path="output_file")
    """file to write, one tree a line in input order (default with --text: stdout)"""
    tags: str = option("input", choices=("input", "predicted"))
    """POS tags of the output trees: the input's (--text has none, so predicted) or the parser's tagger"""
    batch_size: int = 64
    """sentences per batch"""


@dataclass(kw_only=True)
class ParseEvaluate(Inference):
    """``spanbert evaluate parse --data GOLD (--predictions TREES | --model DIR) [--summary]``: EVALB."""

    data: str = option(path="input")
    """gold trees: a .mrg file, a folder of them or one tree a line"""
    predictions: str | None = option(None, path="input")
    """predicted trees, one a line in the gold order (`spanbert predict parse`)"""
    model: str | None = option(None, path="input")
    """fine-tuned model folder: predict, then score"""
    summary: bool = False
    """also print EVALB's '=== Summary ===' block (stderr)"""
    batch_size: int = 64
    """sentences per batch (with --model)"""


ACTIONS = {"finetune": ParseFinetune, "predict": ParsePredict, "evaluate": ParseEvaluate}
"""Each action's options, for the registry (`spanbert.tasks.registry.TASKS.options`)."""
