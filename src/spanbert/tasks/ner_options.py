"""The options of ``spanbert predict|evaluate ner``, one dataclass an action. No torch: ``--help`` is built
from these alone (`spanbert.tasks.options`). ``finetune ner`` still parses its own command line: its
options depend on ``--features`` and ``--tagger`` (`spanbert.tasks.ner`)."""

from __future__ import annotations

from dataclasses import dataclass

from spanbert.tasks.options import Inference, option


@dataclass(kw_only=True)
class NerPredict(Inference):
    """``spanbert predict ner --data FILE --model DIR --output FILE``."""

    data: str = option(path="input")
    """CoNLL-2003 file (tags optional for predict)"""
    model: str = option(path="input")
    """folder saved by `spanbert finetune ner`"""
    output: str = option(path="output_file")
    """CoNLL file to write: word [gold] predicted"""
    batch_size: int = 64
    """sequences per batch"""


@dataclass(kw_only=True)
class NerEvaluate(Inference):
    """``spanbert evaluate ner --data FILE (--predictions FILE | --model DIR)``."""

    data: str = option(path="input")
    """CoNLL-2003 file with its gold tags"""
    predictions: str | None = option(None, path="input")
    """file written by `spanbert predict ner` (predicted tag in the last column)"""
    model: str | None = option(None, path="input")
    """fine-tuned model folder: predict, then score"""
    example_stats: str | None = None
    """also write each example's counts behind the headline score to FILE (JSON; what `spanbert study`
    resamples for its intervals)"""
    batch_size: int = 64
    """sequences per batch (with --model)"""


ACTIONS = {"predict": NerPredict, "evaluate": NerEvaluate}
"""Each action's options, for the registry (`spanbert.tasks.registry.TASKS.options`): finetune parses its own."""
