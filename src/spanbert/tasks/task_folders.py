"""A task's model folders: the encoder and framed tokenizer of any family's checkpoint, a fine-tuned
task model saved in the HF layout (once, by rank 0) and loaded back with its head, a folder saved for
another task refused, and the encoder's positions that a sequence length must fit."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from spanbert import families
from spanbert.distributed import resolve_device
from spanbert.errors import SpanBertError
from spanbert.tasks.ranks import write_once


def model_positions(model_dir: str | Path) -> int | None:
    """`families.max_positions_of` a local model folder (its config.json read strictly: a damaged one is an
    error now); None for a name that is no local folder (a hub name, a typo, GLUE's WNLI that reads no
    model): the task checks it where it loads the model."""
    if not Path(model_dir).is_dir():
        return None
    return families.max_positions_of(model_dir)


def check_sequence_length(
    model_dir: str | Path, length: int, option: str = "--max_seq_length", positions: int | None = None
) -> None:
    """Refuse a sequence length the encoder in ``model_dir`` has no positions for, from its config.json
    (``positions`` when the caller has read it; a name that is no local folder is checked where the task
    loads it), before any data is read (a longer input would fail deep in the model after the featurizing,
    or be read past a RoPE model's trained context)."""
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise SpanBertError(f"{option}: found {length!r}, expected a positive integer")
    positions = positions if positions is not None else model_positions(model_dir)
    if positions is not None and length > positions:
        raise SpanBertError(
            f"{option}: found {length:,}, expected at most the {positions:,} positions of the encoder "
            f"({Path(model_dir) / 'config.json'}); pass a shorter --max_seq_length"
        )


def load_encoder(model_dir: str | Path, add_pooling_layer: bool = False) -> nn.Module:
    """The encoder of any family's checkpoint (`spanbert.families.load_encoder`): spanbert pre-training,
    a fine-tuned folder, HF BertModel/BertFor*, the original releases, the two-tower model."""
    return families.load_encoder(model_dir, add_pooling_layer=add_pooling_layer)


def load_tokenizer_for(model_dir: str | Path, tokenizer_dir: str | Path | None = None) -> Any:
    """The tokenizer saved with a checkpoint (or the one given), framed for the checkpoint's family
    (`spanbert.families.load_framed_tokenizer`): tasks frame ``cls_id a sep_id`` and ``cls_id a mid_id b sep_id``."""
    return families.load_framed_tokenizer(model_dir, tokenizer_dir)


def save_finetuned(
    model: nn.Module, output_dir: str | Path, tokenizer: Any, architecture: str, extra: dict[str, Any] | None = None
) -> None:
    """Save a task model (``model.bert``, any family, + an HF-named head) as config.json + model.safetensors
    + tokenizer (`spanbert.families.save_task_model`), once (rank 0).

    ``extra`` goes into config.json: HF keys (`id2label`, `num_labels`, `problem_type`) at the top
    level, and spanbert's own task settings under ``"spanbert"``.
    """
    # after DDP every rank holds the same weights: one writes, the others wait (a shared temporary
    # name written by two ranks at once was a FileNotFoundError in half of the 2-process runs)
    write_once(lambda: families.save_task_model(model, output_dir, tokenizer, architecture, extra))


def check_task_settings(
    model_dir: str | Path, architectures: tuple[str, ...], needs: str, tasks: tuple[str, ...]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(config.json dict, its ``spanbert`` settings) of a folder a predict/evaluate command reads a task
    model from (`spanbert.families.check_task_folder`), refused when spanbert saved it for a task not in
    ``tasks``; a folder without settings (transformers' own) passes."""
    raw = families.check_task_folder(model_dir, architectures, needs)
    settings = raw.get("spanbert") if isinstance(raw.get("spanbert"), dict) else {}
    if settings.get("task") not in (None, *tasks):
        raise SpanBertError(f"{model_dir}: found a {settings['task']} model, expected {needs}")
    return raw, settings


def load_finetuned(model_dir: str | Path) -> tuple[dict[str, Any], dict[str, torch.Tensor], Any]:
    """(config.json dict, state dict, framed tokenizer) of a folder saved by `save_finetuned`."""
    config_json, state = families.load_checkpoint(model_dir)
    return config_json, state, load_tokenizer_for(model_dir)


def load_task_model(
    model_dir: str | Path,
    build: Callable[[nn.Module, dict[str, Any]], nn.Module],
    architectures: tuple[str, ...],
    needs: str,
    device: str = "cpu",
    add_pooling_layer: bool = False,
) -> tuple[nn.Module, dict[str, Any], Any]:
    """A fine-tuned task model of any family -> (model in eval mode on ``device``, config.json dict,
    tokenizer framed for its family). ``build(encoder, config_json)`` puts the task's head on an encoder
    of the saved family and sizes; the folder is refused before anything is read when its config.json
    names none of ``architectures`` (``needs`` says what the command needs), and every weight must fit."""
    families.check_task_folder(model_dir, architectures, needs)
    config_json, state, tokenizer = load_finetuned(model_dir)
    source = str(Path(model_dir) / "config.json")
    encoder = families.encoder_from_config(config_json, add_pooling_layer=add_pooling_layer, source=source)
    model = build(encoder, config_json)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise SpanBertError(
            f"{model_dir}: weights do not match a {type(model).__name__}; missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    model.to(resolve_device(device)).eval()
    return model, config_json, tokenizer
