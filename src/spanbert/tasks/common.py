"""What every fine-tuning task shares: training options on the command line, loading an encoder and
its tokenizer, saving a fine-tuned model in the HF layout, and the Appendix B hyper-parameter sweep.

Tasks differ in reader, head and metric; the loop is `spanbert.trainer.train` for all of them.
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from spanbert.config import add_dataclass_arguments, check_unknown_overrides, dataclass_from_args
from spanbert.errors import SpanBertError
from spanbert.model import Encoder, load_checkpoint, save_checkpoint
from spanbert.trainer import TrainingArguments

# Appendix B: learning rate from {5e-6, 1e-5, 2e-5, 3e-5, 5e-5}, batch size from {16, 32}.
SWEEP_LEARNING_RATES = (5e-6, 1e-5, 2e-5, 3e-5, 5e-5)
SWEEP_BATCH_SIZES = (16, 32)


def add_finetune_arguments(parser: argparse.ArgumentParser, defaults: dict[str, Any] | None = None) -> None:
    """--model, --tokenizer, --config and every `TrainingArguments` field, plus --sweep and key=value."""
    parser.add_argument("--model", required=True, help="pre-trained checkpoint folder (spanbert or any HF BERT)")
    parser.add_argument(
        "--tokenizer", default=None, help="tokenizer folder or vocab.txt, when the checkpoint has none"
    )
    parser.add_argument("--config", default=None, help="YAML file of option overrides")
    parser.add_argument(
        "--sweep",
        action="store_true",
        help="try every learning rate in {5e-6,1e-5,2e-5,3e-5,5e-5} x batch size {16,32} (Appendix B), keep the best on dev",
    )
    group = parser.add_argument_group("training")
    add_dataclass_arguments(group, TrainingArguments, defaults=defaults)
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="further option overrides")


def training_arguments(args: argparse.Namespace, defaults: dict[str, Any] | None = None) -> TrainingArguments:
    """TrainingArguments from defaults < YAML (--config) < --flags < key=value."""
    overrides = getattr(args, "overrides", None) or []
    check_unknown_overrides(overrides, [TrainingArguments])
    return dataclass_from_args(
        TrainingArguments, args, defaults=defaults, yaml_path=getattr(args, "config", None), overrides=overrides
    )


def load_encoder(model_dir: str | Path, add_pooling_layer: bool = False) -> Encoder:
    """The encoder of any BERT checkpoint (spanbert pre-training, fine-tuned, HF BertModel/BertFor*)."""
    return Encoder.from_pretrained(model_dir, add_pooling_layer=add_pooling_layer)


def load_tokenizer_for(model_dir: str | Path, tokenizer_dir: str | Path | None = None):
    """The tokenizer saved with a checkpoint, or the one given; a clear error when there is none."""
    from spanbert.tokenization import Tokenizer

    if not Path(model_dir).is_dir():
        raise SpanBertError(f"{model_dir}: model folder not found")
    source = Path(tokenizer_dir) if tokenizer_dir else Path(model_dir)
    if source.is_file() and source.name.endswith(".txt"):
        source = source.parent
    if not ((source / "tokenizer.json").exists() or (source / "vocab.txt").exists()):
        if tokenizer_dir:
            raise SpanBertError(f"{source}: no tokenizer.json or vocab.txt")
        raise SpanBertError(
            f"{model_dir}: the checkpoint has no vocabulary (tokenizer.json or vocab.txt). The official "
            f"SpanBERT release ships none: it uses the cased BERT vocabulary (bert-base-cased / bert-large-cased, "
            f"28,996 tokens). Pass --tokenizer DIR pointing at a folder with that vocab.txt."
        )
    return Tokenizer.from_dir(source)


def save_finetuned(
    model: nn.Module, output_dir: str | Path, tokenizer: Any, architecture: str, extra: dict[str, Any] | None = None
) -> None:
    """Save a task model (`self.bert` + HF-named head) as config.json + model.safetensors + tokenizer.

    ``extra`` goes into config.json: HF keys (`id2label`, `num_labels`, `problem_type`) at the top
    level, and spanbert's own task settings under ``"spanbert"``.
    """
    encoder: Encoder = model.bert  # type: ignore[assignment]
    config_json = {**encoder.config.to_hf_dict(), "architectures": [architecture]}
    for k, v in (extra or {}).items():
        if k == "spanbert":
            config_json.setdefault("spanbert", {}).update(v)
        else:
            config_json[k] = v
    save_checkpoint(output_dir, model.state_dict(), config_json, tokenizer=tokenizer)


def load_finetuned(model_dir: str | Path) -> tuple[dict[str, Any], dict[str, torch.Tensor], Any]:
    """(config.json dict, state dict, tokenizer) of a fine-tuned model saved by `save_finetuned`."""
    config_json, state = load_checkpoint(model_dir)
    return config_json, state, load_tokenizer_for(model_dir)


def sweep(
    run_one: Callable[[float, int, Path], float],
    output_dir: str | Path,
    learning_rates: tuple[float, ...] = SWEEP_LEARNING_RATES,
    batch_sizes: tuple[int, ...] = SWEEP_BATCH_SIZES,
) -> dict[str, Any]:
    """Appendix B grid search. ``run_one(lr, batch_size, run_dir)`` fine-tunes into ``run_dir`` and
    returns the dev score (higher is better). The best run's files are copied to ``output_dir``; every
    run's score is written to ``output_dir/sweep.json``."""
    output_dir = Path(output_dir)
    results = []
    best: tuple[float, Path] | None = None
    for lr in learning_rates:
        for bs in batch_sizes:
            run_dir = output_dir / "sweep" / f"lr{lr:g}_bs{bs}"
            score = float(run_one(lr, bs, run_dir))
            results.append({"learning_rate": lr, "batch_size": bs, "dev_score": score, "dir": str(run_dir)})
            print(f"sweep: lr={lr:g} batch={bs}: dev {score:.4f}")
            if best is None or score > best[0]:
                best = (score, run_dir)
    assert best is not None
    for item in best[1].iterdir():
        if item.is_file():
            shutil.copy2(item, output_dir / item.name)
    summary = {"best": next(r for r in results if r["dir"] == str(best[1])), "runs": results}
    (output_dir / "sweep.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
