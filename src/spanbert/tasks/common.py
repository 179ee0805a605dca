"""What every fine-tuning task shares: training options on the command line, loading an encoder and
its tokenizer, saving a fine-tuned model in the HF layout, and the Appendix B hyper-parameter sweep.

Tasks differ in reader, head and metric; the loop is `spanbert.trainer.train` for all of them.

Under ``torchrun`` every task command runs on every rank and goes through the few functions here:

- `start_distributed(device)` joins the process group (predict/evaluate commands too, so that
  `write_once` and `predict_sharded` know the other ranks);
- `predict_sharded(n, predict)`: each rank predicts its share of the n items, every rank gets all
  predictions in the original order (contract 7: evaluation runs on every rank);
- `write_once(fn)`: rank 0 writes, the others wait; its return value (a chosen threshold, the best
  sweep run) or its error reaches every rank. `save_finetuned` and `write_json` use it;
- `seed_init(seed)` before building a head, `seed_dropout(seed)` after: the same head on every rank
  and run, a per-rank dropout stream.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
from torch import nn

from spanbert import distributed
from spanbert.config import (
    add_dataclass_arguments,
    check_unknown_overrides,
    dataclass_from_args,
    load_yaml,
    replace_checked,
)
from spanbert.errors import SpanBertError
from spanbert.model import Encoder, load_checkpoint, save_checkpoint
from spanbert.trainer import TrainingArguments

T = TypeVar("T")

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


def parse_task_args(
    parser: argparse.ArgumentParser,
    argv: list[str],
    defaults: dict[str, Any] | None = None,
    configs: Sequence[type] = (),
) -> argparse.Namespace:
    """``parser.parse_args(argv)`` with the ``--config`` YAML applied first, strictly.

    The YAML is a flat mapping (or sections, e.g. ``TrainingArguments:`` / ``QAConfig:``, merged)
    of options of this command: every ``--flag`` the parser has (TrainingArguments fields and the
    task's own, e.g. ``max_seq_length``, ``doc_stride``). Its values become the parser's defaults,
    so a flag typed on the command line still wins. An unknown key is an error naming the file: a
    typo in ``learning_rate`` must not train at the default rate. Values of `TrainingArguments` and
    of the task's ``configs`` dataclasses (e.g. ``QAConfig``) are type-checked here, naming the file.
    """
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", default=None)
    known, _ = pre.parse_known_args(argv)
    if known.config:
        data = load_yaml(known.config)
        flat: dict[str, Any] = {}
        for key, value in data.items():
            if isinstance(value, dict) and str(key)[:1].isupper():  # a section named after a config class
                flat.update({str(k).replace("-", "_"): v for k, v in value.items()})
            else:
                flat[str(key).replace("-", "_")] = value
        # an option by its dest or by any of its flags (``train_file`` and its alias ``train``)
        actions: dict[str, argparse.Action] = {}
        for a in parser._actions:
            if a.option_strings and a.dest not in ("help", "config"):
                for name in [a.dest, *(o.lstrip("-").replace("-", "_") for o in a.option_strings)]:
                    actions.setdefault(name, a)
        unknown = sorted(k for k in flat if k not in actions)
        if unknown:
            raise SpanBertError(
                f"{known.config}: found unknown option(s) {unknown}; expected options of this command: "
                f"{', '.join(sorted(actions))}"
            )
        train_keys = {f.name for f in dataclasses.fields(TrainingArguments)}
        train_part = {k: v for k, v in flat.items() if k in train_keys}
        # type-check the training options now, so a bad value names the YAML file, not the command line
        replace_checked(TrainingArguments(**(defaults or {})), train_part, source=str(known.config))
        for cls in configs:
            names = {f.name for f in dataclasses.fields(cls)}
            replace_checked(cls(), {k: v for k, v in flat.items() if k in names}, source=str(known.config))
        for key, value in flat.items():
            action = actions[key]
            if value is not None and action.type is not None and not isinstance(value, bool):
                try:
                    value = action.type(value)
                except (TypeError, ValueError):
                    expected = getattr(action.type, "__name__", "a value")
                    raise SpanBertError(f"{known.config}: option {key}: found {value!r}, expected {expected}") from None
            if isinstance(value, bool) and action.nargs == "?":  # dataclass bool flags take strings
                value = str(value).lower()
            parser.set_defaults(**{action.dest: value})
            action.required = False  # given in the YAML
    return parser.parse_args(argv)


def training_arguments(args: argparse.Namespace, defaults: dict[str, Any] | None = None) -> TrainingArguments:
    """TrainingArguments from defaults < YAML (--config) < --flags < key=value.

    The YAML reaches ``args`` through `parse_task_args` (as parser defaults), already checked for
    unknown keys against every option of the command.
    """
    overrides = getattr(args, "overrides", None) or []
    check_unknown_overrides(overrides, [TrainingArguments])
    return dataclass_from_args(TrainingArguments, args, defaults=defaults, overrides=overrides)


def check_output_dir(targs: TrainingArguments) -> None:
    """Refuse to train into a folder that already holds a run, unless --resume / --overwrite_output_dir
    (contract 3; the check itself is `spanbert.trainer.check_output_dir`). Call it before any work."""
    from spanbert import trainer

    check = getattr(trainer, "check_output_dir", None)
    if check is not None:
        check(targs)


# ---------------------------------------------------------------------------------------------
# Several processes: one writer, values chosen once, predictions sharded


def start_distributed(device: str = "auto") -> torch.device:
    """This process's device; joins the process group under torchrun (a no-op in one process)."""
    dev = distributed.resolve_device(device)
    distributed.init_distributed(dev)
    return dev


_writing = False


def write_once(fn: Callable[[], T]) -> T:
    """Run ``fn`` (which writes files or chooses a value) on rank 0 only; the other ranks wait and
    get its result (or its error). Nested calls run ``fn`` directly, so a helper that writes once can
    be called from inside another."""
    global _writing
    if _writing:
        return fn()

    def guarded() -> T:
        global _writing
        _writing = True
        try:
            return fn()
        finally:
            _writing = False

    return distributed.on_main(guarded)


def predict_sharded(n: int, predict: Callable[[Sequence[int]], list[T]]) -> list[T]:
    """Contract 7: ``predict(indices)`` returns the outputs of those items; each rank predicts its
    share (`distributed.shard_range`), and every rank returns all n outputs in the original order.
    In one process this is ``predict(range(n))``."""
    mine = predict(distributed.shard_range(n))
    return [x for part in distributed.all_gather_objects(mine) for x in part]


def seed_init(seed: int) -> None:
    """Seed the global torch RNG before building a head: the same initialisation on every rank and in
    every run with this ``--seed`` (the initialisers draw from the global RNG)."""
    torch.manual_seed(seed)


def seed_dropout(seed: int) -> None:
    """After the model is built: a dropout stream of its own per rank (rank 0 of N and a single
    process draw the same), so ranks do not drop the same units on their different examples."""
    r = distributed.rank()
    if r > 0:
        torch.manual_seed(int(np.random.SeedSequence([seed, r]).generate_state(1)[0]))


def write_json(path: str | Path, data: Any) -> None:
    """Pretty JSON, atomically, written once (rank 0)."""
    from spanbert.utils import atomic_write

    def write() -> None:
        with atomic_write(path, encoding="utf-8") as f:
            json.dump(data, f, indent=2, sort_keys=True, ensure_ascii=False)
            f.write("\n")

    write_once(write)


# ---------------------------------------------------------------------------------------------
# Scores on one scale


def percent(metrics: dict[str, Any], keep: Sequence[str] = ()) -> dict[str, Any]:
    """Every float score x100 (0-100, as SQuAD, coref and the GLUE leaderboard report them); ints
    (counts) and the keys in ``keep`` unchanged; nested dicts (per-type scores) too."""
    out: dict[str, Any] = {}
    for k, v in metrics.items():
        if isinstance(v, dict):
            out[k] = percent(v, keep)
        elif isinstance(v, float) and k not in keep:
            out[k] = 100.0 * v
        else:
            out[k] = v
    return out


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
    # after DDP every rank holds the same weights: one writes, the others wait (a shared temporary
    # name written by two ranks at once was a FileNotFoundError in half of the 2-process runs)
    write_once(lambda: save_checkpoint(output_dir, model.state_dict(), config_json, tokenizer=tokenizer))


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
    returns the dev score (higher is better; every task's on the 0-100 scale). The best run's files
    are copied to ``output_dir``; every run's score is written to ``output_dir/sweep.json``.

    Under torchrun every rank runs every training run; the best run is chosen once (rank 0) and the
    copy and sweep.json are written once."""
    from spanbert.utils import atomic_write

    output_dir = Path(output_dir)
    results = []
    for lr in learning_rates:
        for bs in batch_sizes:
            run_dir = output_dir / "sweep" / f"lr{lr:g}_bs{bs}"
            score = float(run_one(lr, bs, run_dir))
            results.append({"learning_rate": lr, "batch_size": bs, "dev_score": score, "dir": str(run_dir)})
            distributed.print0(f"sweep: lr={lr:g} batch={bs}: dev {score:.4f}")

    def choose_and_copy() -> dict[str, Any]:
        best = max(results, key=lambda r: r["dev_score"])  # the first of equal scores, as before
        for item in Path(best["dir"]).iterdir():
            if item.is_file():
                with atomic_write(output_dir / item.name, "wb") as f, open(item, "rb") as src:
                    shutil.copyfileobj(src, f)
        summary = {"best": best, "runs": results}
        with atomic_write(output_dir / "sweep.json", encoding="utf-8") as f:
            f.write(json.dumps(summary, indent=2) + "\n")
        return summary

    return write_once(choose_and_copy)
