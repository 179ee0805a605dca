"""The options of ``spanbert predict|evaluate coref``, one dataclass an action. No torch: ``--help`` is built
from these alone (`spanbert.tasks.options`). ``finetune coref`` still parses its own command line
(`spanbert.tasks.coref.command`)."""

from __future__ import annotations

from dataclasses import dataclass

from spanbert.tasks.options import option


@dataclass(kw_only=True)
class CorefPredict:
    """``spanbert predict coref --model DIR (--data CONLL --output OUT | --text TEXT)``."""

    model: str = option(path="input")
    """folder of a model saved by `spanbert finetune coref`"""
    data: str | None = option(None, path="input")
    """CoNLL-2012 file or folder to resolve"""
    text: str | None = None
    """raw text: prints its clusters as JSON with character offsets"""
    output: str | None = option(None, path="output_file")
    """CoNLL-2012 file to write (with --data)"""
    device: str = "auto"
    """cpu, cuda, cuda:N or auto"""
    disable_tqdm: bool = False
    """hide the progress bar"""
    threads: int = 0
    """CPU threads (0: the cores other processes leave free)"""


@dataclass(kw_only=True)
class CorefEvaluate:
    """``spanbert evaluate coref --gold KEY --predictions RESPONSE``: MUC, B3, CEAF-e and their mean."""

    gold: str = option(path="input")
    """gold CoNLL-2012 file or folder (the key)"""
    predictions: str = option(path="input")
    """CoNLL-2012 file written by `spanbert predict coref` (the response)"""


ACTIONS = {"predict": CorefPredict, "evaluate": CorefEvaluate}
"""Each action's options, for the registry (`spanbert.tasks.registry.TASKS.options`): finetune parses its own."""
