"""The options of ``spanbert finetune|predict|evaluate tacred|semeval``, one dataclass an action, and the
tasks' training defaults (`DEFAULTS`). No torch: ``--help`` is built from these alone
(`spanbert.tasks.options`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spanbert.tasks.options import Finetune, Inference, finetune_defaults, nested, option
from spanbert.training_args import TrainingArguments

# Appendix B (TACRED/GLUE): max length 128, lr in {5e-6 .. 5e-5}, batch in {16, 32}, 10 epochs;
# the model of the best dev F1 of 10 evaluations an epoch (released run_tacred.py, --eval_metric f1)
DEFAULTS: dict[str, Any] = finetune_defaults(
    "f1", learning_rate=2e-5, per_device_train_batch_size=32, num_train_epochs=10.0
)

ENTITY_MODES = ("mask", "mark")
"""How the two entities are shown to the encoder: replaced by markers, or kept between markers."""


@dataclass(kw_only=True)
class RelationFinetune(Finetune):
    """``spanbert finetune tacred|semeval``."""

    train_file: str = option(path="input", flags=("--train",))
    """training file: TACRED .json, or a SemEval-2010 .TXT"""
    validation_file: str | None = option(None, path="input", flags=("--dev",))
    """dev file scored during and after training (same formats)"""
    entity_mode: str | None = option(None, choices=ENTITY_MODES)
    """mask: replace entities by a marker (§4.1; default for tacred); mark: keep the words between markers
    (default for semeval)"""
    max_seq_length: int | None = option(None, metavar="N")
    """tokens per input (Appendix B) (default: 128, or the encoder's positions when it has fewer)"""
    max_train_examples: int | None = None
    """use only the first N training examples"""
    max_eval_examples: int | None = None
    """use only the first N dev examples"""
    training: TrainingArguments = nested(TrainingArguments, defaults={**DEFAULTS, "output_dir": "runs/tacred"},
                                         family=True, title="training")  # fmt: skip


@dataclass(kw_only=True)
class SemevalFinetune(RelationFinetune):
    """``spanbert finetune semeval``: the same options, another output folder by default."""

    training: TrainingArguments = nested(TrainingArguments, defaults={**DEFAULTS, "output_dir": "runs/semeval"},
                                         family=True, title="training")  # fmt: skip


@dataclass(kw_only=True)
class RelationPredict(Inference):
    """``spanbert predict tacred|semeval --data FILE --model DIR --output FILE``."""

    data: str = option(path="input")
    """TACRED .json or SemEval-2010 .TXT file"""
    model: str = option(path="input")
    """folder of a model saved by `spanbert finetune`"""
    output: str = option(path="output_file")
    """predictions file to write"""
    batch_size: int = 64
    """sequences per batch"""


@dataclass(kw_only=True)
class RelationEvaluate(Inference):
    """``spanbert evaluate tacred|semeval --data FILE (--predictions FILE | --model DIR)``."""

    data: str = option(path="input")
    """TACRED .json or SemEval-2010 .TXT file"""
    predictions: str | None = option(None, path="input")
    """predictions file written by `spanbert predict`"""
    model: str | None = option(None, path="input")
    """fine-tuned model folder: predict, then score"""
    batch_size: int = 64
    """sequences per batch (with --model)"""


ACTIONS = {
    "tacred": {"finetune": RelationFinetune, "predict": RelationPredict, "evaluate": RelationEvaluate},
    "semeval": {"finetune": SemevalFinetune, "predict": RelationPredict, "evaluate": RelationEvaluate},
}
"""Each task's actions' options, for the registry (`spanbert.tasks.registry.TASKS.options`)."""
