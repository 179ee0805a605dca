"""Fine-tuning: the defaults, the released runs' presets (`COREF_PRESETS`), the config's checks and
`finetune_coref` (the released optimizer: encoder and task layers at their own rates)."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from spanbert import _aliases, distributed, runs, trainer
from spanbert.distributed import broadcast_object, is_main, print0
from spanbert.errors import SpanBertError
from spanbert.tasks.coref.data import CorefDocument, Span, read_documents, write_conll
from spanbert.tasks.coref.features import (
    CorefDataset,
    CorefFeatures,
    collate_document,
    featurize,
    segment_length,
    segments_line,
)
from spanbert.tasks.coref.folder import evaluate_clusters, save_coref_model
from spanbert.tasks.coref.model import CorefConfig, CorefModel
from spanbert.tasks.coref.predict import CorefPredictor
from spanbert.tasks.finetuning import check_output_dir
from spanbert.tasks.ranks import predict_sharded, seeded_model, start_distributed, write_once
from spanbert.tasks.spec import RESULTS_FILE
from spanbert.tasks.task_folders import load_encoder, load_tokenizer_for
from spanbert.utils import atomic_write, progress_bar


def _featurize_all(
    docs: Sequence[CorefDocument], tokenizer: Any, max_seq_length: int, desc: str, progress: bool = True
) -> list[CorefFeatures]:
    bar = progress_bar(docs, desc=desc, unit="doc", leave=False, disable=not progress)
    return [featurize(d, tokenizer, max_seq_length) for d in bar]


def check_coref_config(config: CorefConfig) -> None:
    """Values no model can run with, named as the options that set them."""
    if config.singletons not in ("auto", "true", "false"):
        raise SpanBertError(f"--singletons: found {config.singletons!r}; expected auto, true or false")
    for name in ("max_seq_length", "max_training_segments", "max_span_width", "max_top_antecedents",
                 "max_top_spans", "ffnn_size", "feature_size", "coref_depth"):  # fmt: skip
        value = getattr(config, name)
        if value is not None and value < 1:  # max_seq_length unset: it follows the encoder
            raise SpanBertError(f"--{name}: found {value}; expected an integer >= 1")
    if config.max_seq_length is not None and config.max_seq_length < 3:
        raise SpanBertError(f"--max_seq_length: found {config.max_seq_length}; expected >= 3 ([CLS], a token, [SEP])")
    if config.ffnn_depth < 0:
        raise SpanBertError(f"--ffnn_depth: found {config.ffnn_depth}; expected an integer >= 0")
    if not 0 < config.top_span_ratio <= 1 or math.isnan(config.top_span_ratio):
        raise SpanBertError(f"--top_span_ratio: found {config.top_span_ratio}; expected a number in (0, 1]")
    for name in ("dropout", "token_dropout"):
        value = getattr(config, name)
        if not 0 <= value < 1 or math.isnan(value):
            raise SpanBertError(f"--{name}: found {value}; expected a number in [0, 1)")
    if not config.task_weight_decay >= 0:
        raise SpanBertError(f"--task_weight_decay: found {config.task_weight_decay}; expected a number >= 0")
    if not config.encoder_learning_rate >= 0:
        raise SpanBertError(f"--encoder_learning_rate: found {config.encoder_learning_rate}; expected a number >= 0")


def finetune_coref(model_dir: str | Path, train_path: str | Path, dev_path: str | Path | None, targs: Any,
                   config: CorefConfig, tokenizer_dir: str | Path | None = None,
                   max_eval_examples: int | None = None) -> dict[str, Any]:
    """Fine-tune on a CoNLL-2012 file (or folder) and save to ``targs.output_dir``; returns dev scores.
    ``max_eval_examples`` keeps the first N dev documents for the evaluations during training.

    With a dev set and ``targs.metric_for_best_model`` (``conll_f1`` on the command line), the dev set
    is scored every ``eval_steps`` (or ``evals_per_epoch`` times an epoch) and at the end; the model
    saved is the one of the best evaluation, its step is ``selected_step`` in the summary, and the
    scores and ``dev_predictions.conll`` are that model's. Score a test set with that saved model in a
    separate command (``spanbert predict coref``), never while choosing.

    Under torchrun every rank trains on its share of the documents; dev documents are split across
    the ranks and their predictions gathered, so every rank returns the same scores; rank 0 writes.
    """
    check_output_dir(targs)  # an existing run is refused before any work
    if targs.per_device_train_batch_size != 1:
        raise SpanBertError(
            f"--per_device_train_batch_size: found {targs.per_device_train_batch_size}; expected 1 (coreference "
            f"trains on one document per step, Appendix B); use --gradient_accumulation_steps for larger batches"
        )
    check_coref_config(config)
    start_distributed(targs.device)
    progress = not targs.disable_tqdm and is_main()
    tokenizer = load_tokenizer_for(model_dir, tokenizer_dir)
    train_docs = read_documents(train_path)
    dev_docs = read_documents(dev_path)[:max_eval_examples] if dev_path else []
    if config.singletons == "auto":
        has = any(len(c) == 1 for d in train_docs for c in d.clusters)
        config = CorefConfig(**{**asdict(config), "singletons": "true" if has else "false"})
        print0(f"singletons: {config.singletons} (the training key {'has' if has else 'has no'} singleton entities)")
    # --seed fixes the task layers' initialisation (the same on every rank) and, per rank, dropout;
    # the document order and the training segment runs are drawn from (seed, epoch) by the trainer
    # and `CorefDataset`
    with seeded_model(targs.seed):
        encoder = load_encoder(model_dir)
        if config.max_seq_length is not None and config.max_seq_length > encoder.max_positions:
            raise SpanBertError(
                f"--max_seq_length: found {config.max_seq_length}; expected at most the encoder's "
                f"{encoder.max_positions} positions"
            )
        length, why = segment_length(config.max_seq_length, encoder.max_positions)
        config = replace(config, max_seq_length=length)  # saved with the model: predict cuts documents the same way
        model = CorefModel(None, config, encoder=encoder)
    feats = _featurize_all(train_docs, tokenizer, length, "featurize train", progress)
    print0(segments_line(length, why, feats))
    dataset = CorefDataset(
        feats, config.max_span_width, tokenizer.pad_id, tokenizer.cls_id, tokenizer.sep_id,
        max_training_segments=config.max_training_segments, seed=targs.seed,
    )  # fmt: skip
    output_dir = Path(targs.output_dir)
    metric = targs.metric_for_best_model if dev_docs else ""
    if targs.metric_for_best_model and not dev_docs:
        print0(f"note: no --dev, so no model selection on {targs.metric_for_best_model}: the last model is kept")

    last_eval: dict[str, Any] = {}
    best_eval: dict[str, Any] = {}  # the predictions of the best evaluation so far (the same rule as the trainer)
    history: list[dict[str, float]] = []

    # featurized once, not at every evaluation (`CorefPredictor.predict_documents` featurizes each time)
    dev_feats = _featurize_all(dev_docs, tokenizer, config.max_seq_length, "featurize dev", progress)

    def predict_shard(predictor: CorefPredictor, idx: Sequence[int]) -> list[list[list[Span]]]:
        bar = progress_bar(idx, desc="predict", unit="doc", disable=not progress or not is_main(), leave=False)
        return [predictor.predict_features(dev_feats[i]) for i in bar]

    def predict_dev(m: nn.Module, step: int) -> dict[str, float]:
        # contract 7: on every rank, each predicting its share of the documents
        t = time.perf_counter()
        predictor = CorefPredictor(m, tokenizer, device=next(m.parameters()).device)  # type: ignore[arg-type]
        predictions = predict_sharded(len(dev_docs), lambda idx: predict_shard(predictor, idx))
        seconds = time.perf_counter() - t
        scores = evaluate_clusters(dev_docs, predictions)
        last_eval.update(step=step, predictions=predictions, scores=scores, seconds=seconds)
        last_eval["eval_seconds"] = last_eval.get("eval_seconds", 0.0) + seconds
        history.append({"step": step, **{k: scores[k] for k in ("conll_f1", "mention_f1")}})
        if metric and metric in scores:
            old = best_eval.get("scores", {}).get(metric)
            better = old is None or (scores[metric] > old if targs.greater_is_better else scores[metric] < old)
            if better:
                best_eval.update(step=step, predictions=predictions, scores=scores, seconds=seconds)
        print0(
            f"step {step}: dev CoNLL F1 {scores['conll_f1']:.2f} (MUC {scores['muc_f1']:.2f}, B3 "
            f"{scores['bcub_f1']:.2f}, CEAFe {scores['ceafe_f1']:.2f}, mentions {scores['mention_f1']:.2f})"
        )
        return {k: scores[k] for k in ("conll_f1", "muc_f1", "bcub_f1", "ceafe_f1", "mention_f1")}

    if targs.metric_for_best_model != metric:
        targs = replace(targs, metric_for_best_model=metric)
    # The released optimizer: the encoder at its own rate with --weight_decay (not biases / LayerNorm),
    # the task layers at --learning_rate with task_weight_decay, each set clipped to max_grad_norm apart.
    task_prefixes = [f"{name}." for name, child in model.named_children() if child is not model.bert]
    t0 = time.perf_counter()
    result = trainer.train(
        model, dataset, targs, collate_fn=collate_document,
        lr_by_prefix={"bert.": config.encoder_learning_rate}, eval_fn=predict_dev if dev_docs else None,
        run_config={"task": "coref", "coref": asdict(config)},  # compared on --resume
        weight_decay_by_prefix={"bert.": targs.weight_decay, **{p: config.task_weight_decay for p in task_prefixes}},
        clip_by_prefix=("bert.",) if config.separate_clipping else None,
    )  # fmt: skip
    train_s = time.perf_counter() - t0 - last_eval.get("eval_seconds", 0.0)  # dev evaluation timed apart
    summary: dict[str, Any] = {
        "train_steps": result.global_step,
        "train_seconds": train_s,
        "train_docs": len(train_docs),
        # one document (a run of at most max_training_segments segments) per step
        "train_docs_per_s": result.global_step * targs.gradient_accumulation_steps / train_s if train_s > 0 else 0.0,
    }
    # the trainer loads the best weights only at the planned end (not after an earlier --stop_at_step)
    world = distributed.world_size()
    planned = targs.max_steps if targs.max_steps > 0 else math.ceil(
        targs.num_train_epochs * runs.steps_per_epoch(len(dataset), targs.gradient_accumulation_steps * world, world)
    )
    selected = result.best_step if metric and result.global_step == planned else None
    if dev_docs:
        if selected is not None and best_eval.get("step") != selected:
            # chosen before a --resume: this process has not seen its predictions; the model holds its weights
            _predict_again(model, predict_dev, selected)
            best_eval.update(last_eval)
        elif selected is None and last_eval.get("step") != result.global_step:
            _predict_again(model, predict_dev, result.global_step)  # the trainer evaluates only at the planned end
        chosen = best_eval if selected is not None else last_eval
        summary.update(chosen["scores"])
        summary["dev_docs"] = len(dev_docs)
        summary["predict_docs_per_s"] = len(dev_docs) / chosen["seconds"] if chosen["seconds"] else 0.0
        summary["dev_history"] = history
        if selected is not None:
            summary["selected_step"] = selected
            summary["selected_by"] = metric
    summary = broadcast_object(summary)  # rank 0's timings in every rank's summary, as in the file

    def write() -> None:
        save_coref_model(model, output_dir, tokenizer)
        if dev_docs:
            write_conll(output_dir / "dev_predictions.conll", dev_docs, chosen["predictions"])
        with atomic_write(output_dir / RESULTS_FILE) as f:
            json.dump(summary, f, indent=2, sort_keys=True)
            f.write("\n")

    write_once(write)  # one rank writes (the weights are the same on every rank after DDP), the others wait
    return summary


def _predict_again(model: nn.Module, predict_dev: Any, step: int) -> None:
    was_training = model.training
    model.eval()
    with torch.no_grad():
        predict_dev(model, step)
    model.train(was_training)

__getattr__ = _aliases.getter(__name__)  # the old spellings of names that moved (`spanbert._aliases`)
