"""SWAG (BERT §4.4): multiple choice over four endings of a video-caption sentence; accuracy.

Each example becomes four sequences ``[CLS] context [SEP] ending_k [SEP]`` (token types 0 / 1), where
the context is ``sent1`` and ending k is ``sent2 + " " + ending_k`` (the released BERT and transformers
SWAG scripts split the start phrase this way). The model scores each sequence's pooled ``[CLS]`` with
one learned vector (a linear layer H -> 1) and takes a softmax over the four scores (§4.4: "the only
task-specific parameters introduced is a vector whose dot product with the [CLS] token representation
C denotes a score for each choice which is normalized with a softmax layer"). Parameter names are
those of HF ``BertForMultipleChoice`` (``bert``, ``dropout``, ``classifier``), so a fine-tuned model
loads there. Accuracy is reported x100 (0-100).

Files are the released CSV layout (rowanz/swagaf ``data/{train,val,test}.csv``): a header naming
``video-id, fold-ind, startphrase, sent1, sent2, gold-source, ending0..ending3`` and ``label`` (the test
file has no label), usually after an unnamed index column; columns are found by header name. Predictions
are a CSV ``video-id,fold-ind,label`` in the input's order (label = the predicted ending, 0-3).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from spanbert import families
from spanbert.distributed import is_main, print0
from spanbert.errors import DataError, SpanBertError, decode_utf8
from spanbert.metrics.classification import accuracy
from spanbert.tasks.classification import FeatureDataset, pair_input
from spanbert.tasks.finetuning import SEQ_LENGTH, finetune_options
from spanbert.tasks.layers import apply_encoder_dropout, output_layer, scaled
from spanbert.tasks.options import one_of
from spanbert.tasks.ranks import (
    predict_sharded,
    print_metrics,
    seeded_model,
    start_distributed,
    write_json_once,
    write_once,
)
from spanbert.tasks.scores import percent
from spanbert.tasks.selection import KeepBest, selection_summary
from spanbert.tasks.spec import RESULTS_FILE, Results, TaskSpec
from spanbert.tasks.splits import RecordSplit
from spanbert.tasks.swag_options import ACTIONS, SwagEvaluate, SwagFinetune, SwagPredict
from spanbert.tasks.task_folders import load_encoder, load_task_model, load_tokenizer_for, save_finetuned
from spanbert.trainer import predict_batches, train
from spanbert.utils import atomic_write

NUM_CHOICES = 4
ENDINGS = tuple(f"ending{k}" for k in range(NUM_CHOICES))
COLUMNS = ("video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source", *ENDINGS)
"""Columns every SWAG file has (the train and val files add ``label``)."""



# ---------------------------------------------------------------------------------------------
# Reader


@dataclass(frozen=True)
class SwagExample:
    video_id: str
    fold_ind: str
    context: str
    """``sent1``: the first sentence, the context of every choice."""
    start: str
    """``sent2``: the start of the second sentence, which each ending completes."""
    endings: tuple[str, ...]
    label: int | None
    line: int
    """The example's line in its file (for error messages)."""


def _csv_rows(path: Path, text: str, expected: str) -> list[tuple[int, list[str]]]:
    """Every record of the CSV ``text`` (read from ``path``) with the line it starts on; malformed CSV is an
    error naming the line and what was ``expected``."""
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    rows: list[tuple[int, list[str]]] = []
    line = 1
    try:
        for row in reader:
            rows.append((line, row))
            line = reader.line_num + 1  # a quoted field may span lines: the next record starts here
    except csv.Error as e:
        raise DataError(path, f"found malformed CSV ({e}); expected {expected}", line=line) from None
    return rows


def read_swag(path: str | Path, labelled: bool | None = None) -> list[SwagExample]:
    """The examples of a SWAG CSV file. ``labelled=True`` requires a ``label`` column (train, val),
    False ignores it, None reads it when the header has it (the test file has none)."""
    path = Path(path)
    try:
        text = decode_utf8(path.read_bytes(), path, "UTF-8 CSV")
    except FileNotFoundError:
        raise SpanBertError(f"{path}: file not found (expected a SWAG CSV file)") from None
    rows = _csv_rows(path, text, 'comma-separated fields, quoted with "')
    rows = [(k, r) for k, r in rows if any(x.strip() for x in r)]
    if not rows:
        raise DataError(path, "found no rows; expected a header and one row per example")
    head_line, header = rows[0]
    header = [h.strip() for h in header]
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise DataError(
            path, f"found header {header[:12]}, expected the SWAG columns {list(COLUMNS)} (+ label); missing {missing}",
            line=head_line,
        )  # fmt: skip
    has_label = "label" in header
    if labelled and not has_label:
        raise DataError(path, "found no label column in the header, expected one (a labelled file: train or val)", line=head_line)
    use_label = has_label if labelled is None else labelled
    col = {name: header.index(name) for name in header}
    out = []
    for k, row in rows[1:]:
        if len(row) != len(header):
            raise DataError(path, f"found {len(row)} fields, expected {len(header)} as the header has", line=k)
        get = {name: row[i] for name, i in col.items()}
        for name in ("sent1", *ENDINGS):
            if not get[name].strip():
                raise DataError(path, f"found an empty {name}, expected text", line=k)
        label = None
        if use_label:
            value = get["label"].strip()
            if value not in {str(i) for i in range(NUM_CHOICES)}:
                raise DataError(path, f"found label {value!r}, expected 0, 1, 2 or 3 (the right ending)", line=k)
            label = int(value)
        out.append(
            SwagExample(get["video-id"], get["fold-ind"], get["sent1"], get["sent2"],
                        tuple(get[e] for e in ENDINGS), label, k)  # fmt: skip
        )
    return out


# ---------------------------------------------------------------------------------------------
# Features


def swag_features(
    examples: list[SwagExample], tokenizer: Any, max_seq_length: int = 128, with_labels: bool = True
) -> list[dict[str, Any]]:
    """Four ``[CLS] sent1 [SEP] sent2 ending_k [SEP]`` sequences per example, pairs cut longest-first
    to ``max_seq_length`` (BERT's ``_truncate_seq_pair``). Each feature holds lists of four arrays."""
    texts = sorted({e.context for e in examples} | {f"{e.start} {x}".strip() for e in examples for x in e.endings})
    ids = dict(zip(texts, (enc.ids for enc in tokenizer.encode_batch(texts))))
    out = []
    for e in examples:
        choices = [pair_input(tokenizer.cls_id, tokenizer.sep_id, ids[e.context], ids[f"{e.start} {x}".strip()], max_seq_length,
                              tokenizer.mid_id)
                   for x in e.endings]  # fmt: skip
        f: dict[str, Any] = {"input_ids": [c[0] for c in choices], "token_type_ids": [c[1] for c in choices]}
        if with_labels:
            f["labels"] = e.label
        out.append(f)
    return out


class ChoiceCollator:
    """Pads a list of four-choice features into (B, 4, T) tensors; ``attention_mask`` only with padding."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Tensor]:
        B, C = len(features), NUM_CHOICES
        T = max(len(x) for f in features for x in f["input_ids"])
        input_ids = torch.full((B, C, T), self.pad_id, dtype=torch.long)  # (B, 4, T)
        token_type_ids = torch.zeros((B, C, T), dtype=torch.long)
        mask = torch.zeros((B, C, T), dtype=torch.long)
        for i, f in enumerate(features):
            for c in range(C):
                n = len(f["input_ids"][c])
                input_ids[i, c, :n] = torch.as_tensor(f["input_ids"][c])
                token_type_ids[i, c, :n] = torch.as_tensor(f["token_type_ids"][c])
                mask[i, c, :n] = 1
        batch = {"input_ids": input_ids, "token_type_ids": token_type_ids}
        if not bool(mask.all()):
            batch["attention_mask"] = mask
        if features[0].get("labels") is not None:
            batch["labels"] = torch.tensor([int(f["labels"]) for f in features], dtype=torch.long)  # (B,)
        return batch


# ---------------------------------------------------------------------------------------------
# Model


class MultipleChoice(nn.Module):
    """Encoder + dropout + one vector scoring each choice's sentence vector (HF ``BertForMultipleChoice``
    for BERT: the pooled ``[CLS]``; any family: `Family.sentence`).

    Inputs are (B, C, T); logits (B, C); the loss is cross-entropy over the C choices.
    """

    def __init__(self, encoder: nn.Module, dropout: float | None = None):
        super().__init__()
        self.bert = encoder
        apply_encoder_dropout(encoder)
        # classifier: Linear(S, 1), as the family initialises output layers
        self.output_scale, self.dropout, self.classifier = output_layer(encoder, encoder.sentence_size, 1, dropout)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                labels: Tensor | None = None) -> dict[str, Tensor]:
        B, C, T = input_ids.shape
        flat = lambda x: None if x is None else x.reshape(B * C, T)  # noqa: E731
        hidden = self.bert(flat(input_ids), attention_mask=flat(attention_mask), token_type_ids=flat(token_type_ids))
        sentence = self.bert.sentence(hidden, flat(attention_mask), flat(input_ids))  # (B*C, S)
        logits = self.classifier(self.dropout(scaled(sentence, self.output_scale))).view(B, C)  # (B, C): a score per choice
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = F.cross_entropy(logits.float(), labels)  # softmax over the choices
            out["acc"] = (logits.argmax(-1) == labels).float().mean().detach()
        return out


def build_model(model_dir: str | Path, seed: int | None = None) -> MultipleChoice:
    """A fresh choice-scoring vector (and pooler, when the checkpoint has none) on a pre-trained encoder."""
    with seeded_model(seed):
        return MultipleChoice(load_encoder(model_dir, add_pooling_layer=True))


NEEDS = "a SWAG model (spanbert finetune swag)"


def check_model(model_dir: str | Path) -> None:
    """Refuse, before any data is read, a folder that holds no SWAG model."""
    raw = families.check_task_folder(model_dir, families.architectures("ForMultipleChoice"), NEEDS)
    settings = raw.get("spanbert") if isinstance(raw.get("spanbert"), dict) else {}
    if settings.get("task") != "swag":
        raise SpanBertError(
            f"{model_dir}: found no spanbert.task \"swag\" in config.json, expected a model saved by `spanbert finetune swag`"
        )


def load_model(model_dir: str | Path, device: str = "cpu") -> tuple[MultipleChoice, dict[str, Any], Any]:
    """A model saved by `finetune_swag` (any family) -> (model in eval mode on ``device``, config.json
    dict, framed tokenizer)."""
    check_model(model_dir)
    return load_task_model(
        model_dir, lambda encoder, raw: MultipleChoice(encoder), families.architectures("ForMultipleChoice"), NEEDS,
        device, add_pooling_layer=True,
    )  # fmt: skip


def predict_logits(
    model: nn.Module, features: list[dict[str, Any]], pad_id: int, batch_size: int = 64, progress: bool = False
) -> list[np.ndarray]:
    """(4,) logits per feature, in order; each rank predicts its share (call it on every rank)."""
    quiet = not progress or not is_main()
    device = next(model.parameters()).device

    def predict(indices) -> list[np.ndarray]:
        # longest choice first-to-last so batches carry little padding; outputs back in input order
        order = sorted(indices, key=lambda i: max(len(x) for x in features[i]["input_ids"]))
        inputs = [{k: v for k, v in features[i].items() if k != "labels"} for i in order]
        results: dict[int, np.ndarray] = {}
        done = 0
        for _, out in predict_batches(model, inputs, batch_size, ChoiceCollator(pad_id), device=device, disable_tqdm=quiet):
            logits = out["logits"].float().cpu().numpy()  # (b, 4)
            for j, i in enumerate(order[done : done + len(logits)]):
                results[i] = logits[j]
            done += len(logits)
        return [results[i] for i in indices]

    return predict_sharded(len(features), predict)


def score(gold: list[int], pred: list[int]) -> dict[str, Any]:
    """Accuracy x100 and the number of examples."""
    return {**percent({"accuracy": accuracy(gold, pred)}), "examples": len(gold)}


# ---------------------------------------------------------------------------------------------
# Fine-tuning, prediction files


def finetune_swag(model_dir: str | Path, train_path: str | Path, dev_path: str | Path | None, args: Any,
                  tokenizer_dir: str | Path | None = None, max_seq_length: int = 128,
                  max_train_examples: int | None = None, max_eval_examples: int | None = None) -> dict[str, Any]:
    """Fine-tune on ``train_path``, select on ``dev_path`` (when given), save to ``args.output_dir``;
    returns the dev metrics of the saved model (and writes them and its dev predictions there)."""
    out = Path(args.output_dir)
    train_examples = read_swag(train_path, labelled=True)[:max_train_examples]
    dev = read_swag(dev_path, labelled=True)[:max_eval_examples] if dev_path else []
    if not train_examples:
        raise DataError(train_path, "found no examples; expected one row per example after the header")
    tokenizer = load_tokenizer_for(model_dir, tokenizer_dir)
    train_features = swag_features(train_examples, tokenizer, max_seq_length)
    dev_features = swag_features(dev, tokenizer, max_seq_length, with_labels=False)
    gold = [e.label for e in dev]
    model = build_model(model_dir, seed=args.seed)

    def evaluate(m: nn.Module, step: int) -> tuple[dict[str, float], list[int]]:
        logits = predict_logits(m, dev_features, tokenizer.pad_id, args.per_device_eval_batch_size)
        pred = [int(np.argmax(l)) for l in logits]
        metrics = score(gold, pred)
        return {k: float(v) for k, v in metrics.items()}, pred

    keeper = KeepBest(evaluate, args)
    result = train(
        model, FeatureDataset(train_features), args, collate_fn=ChoiceCollator(tokenizer.pad_id),
        eval_fn=keeper if dev else None,
    )  # fmt: skip
    metrics: dict[str, Any] = {}
    if dev:
        pred, selected = keeper.chosen(model, args, result, len(train_features))
        metrics = {**score(gold, pred), **selection_summary(selected, args)}
    meta = {"task": "swag", "max_seq_length": max_seq_length}
    save_finetuned(model, out, tokenizer, families.architecture(model.bert, "ForMultipleChoice"), {"spanbert": meta})
    if dev:
        write_once(lambda: write_predictions(out / "dev_predictions.csv", dev, pred))
        write_json_once(out / RESULTS_FILE, metrics)
    return metrics


def predict_swag(
    model_dir: str | Path, examples: list[SwagExample], batch_size: int = 64, device: str = "cpu", progress: bool = True
) -> list[int]:
    """The predicted ending (0-3) of every example, from a folder saved by `finetune_swag`."""
    model, config_json, tokenizer = load_model(model_dir, device)
    max_len = config_json.get("spanbert", {}).get("max_seq_length", 128)
    features = swag_features(examples, tokenizer, max_len, with_labels=False)
    return [int(np.argmax(l)) for l in predict_logits(model, features, tokenizer.pad_id, batch_size, progress)]


PREDICTION_COLUMNS = ("video-id", "fold-ind", "label")


def write_predictions(path: str | Path, examples: list[SwagExample], pred: list[int]) -> None:
    """CSV ``video-id,fold-ind,label``, one row per example in the input's order (atomically)."""
    with atomic_write(path, encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(PREDICTION_COLUMNS)
        for e, p in zip(examples, pred):
            w.writerow([e.video_id, e.fold_ind, p])


def read_predictions(path: str | Path, examples: list[SwagExample]) -> list[int]:
    """The labels of a predictions file in the order of ``examples``, matched by (video-id, fold-ind):
    rows in another order score the same (rows with the same pair are taken in file order). An example
    without a row, or a row of no example, is an error naming its line."""
    path = Path(path)
    try:
        text = decode_utf8(path.read_bytes(), path, "UTF-8 CSV")
    except FileNotFoundError:
        raise SpanBertError(f"{path}: predictions file not found") from None
    rows = [(k, r) for k, r in _csv_rows(path, text, f"{','.join(PREDICTION_COLUMNS)} rows") if r]
    if not rows or tuple(h.strip() for h in rows[0][1]) != PREDICTION_COLUMNS:
        found = rows[0][1] if rows else []
        raise DataError(path, f"found header {found}, expected {','.join(PREDICTION_COLUMNS)}", line=1)
    by_key: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for k, row in rows[1:]:
        if len(row) != 3 or row[2].strip() not in {str(i) for i in range(NUM_CHOICES)}:
            raise DataError(path, f"found {row[:4]}, expected video-id,fold-ind,label with a label in 0-3", line=k)
        by_key.setdefault((row[0], row[1]), []).append((k, int(row[2])))
    out = []
    for e in examples:
        queue = by_key.get((e.video_id, e.fold_ind))
        if not queue:
            raise DataError(
                path, f"found no row for example {e.video_id!r}/{e.fold_ind!r} (line {e.line} of the data file); "
                f"expected one row per example ({len(examples)})",
            )  # fmt: skip
        out.append(queue.pop(0)[1])
    left = sorted(r for queue in by_key.values() for r in queue)
    if left:
        k = left[0][0]
        row = next(r for n, r in rows if n == k)
        raise DataError(
            path, f"found {len(left)} row(s) of no example of the data file, the first {row[0]!r}/{row[1]!r}; "
            f"expected one row per example ({len(examples)})", line=k,
        )  # fmt: skip
    return out


# ---------------------------------------------------------------------------------------------
# CLI


def _finetune(task: str, opts: SwagFinetune) -> Results:
    """``spanbert finetune swag ...``."""

    def run_one(targs: Any) -> dict[str, Any]:
        return finetune_swag(
            opts.model, opts.train_file, opts.validation_file, targs, opts.tokenizer, opts.max_seq_length,
            opts.max_train_examples, opts.max_eval_examples,
        )  # fmt: skip

    return finetune_options(opts, run_one, "accuracy", f"spanbert finetune {task}", seq_length=SEQ_LENGTH)


def _predict(task: str, opts: SwagPredict) -> Path:
    """``spanbert predict swag ...``."""
    check_model(opts.model)
    examples = read_swag(opts.data)
    start_distributed(opts.device)
    pred = predict_swag(opts.model, examples, opts.batch_size, opts.device, not opts.disable_tqdm)
    write_once(lambda: write_predictions(opts.output, examples, pred))
    print0(f"wrote predictions for {len(pred)} examples to {opts.output}")
    if examples and all(e.label is not None for e in examples):
        print_metrics(score([e.label for e in examples], pred))
    return Path(opts.output)


def _evaluate(task: str, opts: SwagEvaluate) -> Results:
    """``spanbert evaluate swag ...``."""
    if one_of(opts, "predictions", "model") == "model":
        check_model(opts.model)
    examples = read_swag(opts.data, labelled=True)
    if opts.model:
        start_distributed(opts.device)
        pred = predict_swag(opts.model, examples, opts.batch_size, opts.device, not opts.disable_tqdm)
    else:
        pred = read_predictions(opts.predictions, examples)
    return Results(score([e.label for e in examples], pred), "accuracy")


SPECS = {
    "swag": TaskSpec(
        "swag", "multiple choice, SWAG CSV (BERT §4.4)", _finetune, _predict, _evaluate, options=ACTIONS,
        metric="accuracy", data="SWAG train.csv / val.csv", dev_split=RecordSplit(".csv", "rows-after-header"),
    )
}
