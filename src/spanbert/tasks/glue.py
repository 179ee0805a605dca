"""GLUE (SpanBERT §4.1, Table 5): sentence and sentence-pair classification and regression.

All nine tasks read their official GLUE tsv layouts (columns found by header name, so the files'
extra columns do not matter; CoLA's headerless raw release is read by position). The model is the
encoder's pooled ``[CLS]`` plus a linear layer (cross-entropy; mean squared error for STS-B), as
BERT and SpanBERT do ("we follow BERT's single-task setting and only add a linear classifier on top
of the [CLS] token"). Metrics are the leaderboard's: Matthews correlation (CoLA), F1 and accuracy
(MRPC, QQP), Pearson and Spearman (STS-B), accuracy otherwise, matched and mismatched for MNLI.
WNLI is predicted as the training set's majority class (Table 5 note; GLUE's construction issues make
models do worse than that). Test predictions are written in the GLUE submission format: one file per
task (``CoLA.tsv``, ``MNLI-m.tsv``, ...) with an ``index<TAB>prediction`` header.

Scores are reported x100 (0-100), as the GLUE leaderboard and the paper's Table 5 show them.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spanbert import _aliases, families
from spanbert.distributed import eprint0, print0
from spanbert.errors import DataError, SpanBertError, decode_utf8
from spanbert.metrics.classification import accuracy, binary_f1, matthews_corrcoef, pearson, spearman
from spanbert.tasks import api
from spanbert.tasks import classification as C
from spanbert.tasks.classification import pair_input
from spanbert.tasks.finetuning import SEQ_LENGTH, finetune_options
from spanbert.tasks.glue_options import (  # the task table and its defaults: torch-free, for --help
    ACTIONS,
    GLUE_TASKS,
    GlueEvaluate,
    GlueFinetune,
    GluePredict,
    GlueTask,
    canonical_name,
    glue_task,
)
from spanbert.tasks.options import one_of
from spanbert.tasks.ranks import start_distributed, write_json_once, write_once
from spanbert.tasks.scores import match_by_id, percent
from spanbert.tasks.selection import selection_summary
from spanbert.tasks.spec import RESULTS_FILE, Results, SubTasks, TaskSpec
from spanbert.tasks.splits import HELDOUT_SEED, cut, record, split_half
from spanbert.tasks.task_folders import check_task_settings, load_tokenizer_for
from spanbert.trainer import eval_size
from spanbert.utils import atomic_write

STSB_RANGE = (0.0, 5.0)
"""STS-B similarity scores lie in [0, 5]."""


def check_score(path: Path, value: str, line: int, what: str = "score") -> float:
    """An STS-B score: a finite number in [0, 5], else an error naming the file and line."""
    try:
        x = float(value)
    except ValueError:
        raise DataError(path, f"found {what} {value!r}; expected a number in [0, 5]", line=line) from None
    if not (STSB_RANGE[0] <= x <= STSB_RANGE[1]):  # also false for nan
        raise DataError(path, f"found {what} {value!r}; expected a number in [0, 5]", line=line)
    return x


# The raw CoLA release (what ../shared/data/glue/CoLA holds) splits GLUE's dev.tsv in two files.
_FALLBACK = {
    ("CoLA", "train.tsv"): ("raw/in_domain_train.tsv",),
    ("CoLA", "dev.tsv"): ("raw/in_domain_dev.tsv", "raw/out_of_domain_dev.tsv"),
}


@dataclass
class GlueExample:
    guid: str
    """The id column's value, or the row number (from 0) when the file has none."""
    text_a: str
    text_b: str | None
    label: str | None
    """As in the file (a class name or a score); None for unlabelled test rows."""


def resolve_files(task: GlueTask, data_dir: str | Path, names: tuple[str, ...]) -> list[Path]:
    """The files of a split inside ``data_dir`` (GLUE names, or CoLA's raw release names)."""
    data_dir = Path(data_dir)
    out = []
    for name in names:
        if (data_dir / name).exists():
            out.append(data_dir / name)
            continue
        alt = _FALLBACK.get((task.name, name))
        if alt and all((data_dir / a).exists() for a in alt):
            out += [data_dir / a for a in alt]
            continue
        raise SpanBertError(f"{data_dir / name}: not found (expected the GLUE {task.name} folder with {name})")
    return out


def read_glue(task: GlueTask, path: str | Path, labelled: bool = True, start_index: int = 0) -> list[GlueExample]:
    """Read one GLUE tsv. Errors name the file, the line, what was found and what was expected.

    Fields are split on tabs with no quote processing (GLUE's own reader uses ``quotechar=None``:
    MRPC and SST-2 contain unbalanced quotes).
    """
    path = Path(path)
    try:
        lines = decode_utf8(path.read_bytes(), path, f"a UTF-8 GLUE {task.name} tsv").split("\n")
    except FileNotFoundError:
        raise SpanBertError(f"{path}: file not found") from None
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise DataError(path, "empty file; expected a GLUE tsv")
    first = lines[0].rstrip("\r").split("\t")
    wanted = [task.text_a] + ([task.text_b] if task.text_b else [])
    if task.headerless and task.text_a not in first and len(first) == len(task.headerless):
        header, body_start = list(task.headerless), 0
    else:
        header, body_start = first, 1
        missing = [c for c in wanted if c not in header]
        if missing:
            raise DataError(
                path, f"header {header} lacks the column(s) {missing}; expected the GLUE {task.name} layout with {wanted}", line=1
            )  # fmt: skip
    col = {name: i for i, name in reversed(list(enumerate(header)))}
    has_label = task.label in col
    if labelled and not has_label:
        raise DataError(
            path, f"no {task.label!r} column in header {header}; expected labelled {task.name} data", line=1
        )
    id_col = col.get("index", col.get("id"))  # QQP names it "id"; CoLA/SST-2/MRPC train and dev have none
    examples = []
    for n in range(body_start, len(lines)):
        line = lines[n].rstrip("\r")
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != len(header):
            raise DataError(
                path,
                f"found {len(fields)} tab-separated columns, expected {len(header)} ({', '.join(header)})",
                line=n + 1,
            )
        label = fields[col[task.label]].strip() if has_label else None
        if label is not None:
            if task.labels is None:
                check_score(path, label, n + 1)
            elif label not in task.labels:
                raise DataError(path, f"label {label!r}; expected one of {list(task.labels)}", line=n + 1)
        guid = fields[id_col].strip() if id_col is not None else str(start_index + len(examples))
        b = fields[col[task.text_b]] if task.text_b else None
        examples.append(GlueExample(guid, fields[col[task.text_a]], b, label))
    if not examples:  # a header alone: training on it, or selecting on it (a dev score of 0 examples), means nothing
        raise DataError(path, f"found a header and no examples; expected at least one {task.name} example", line=1)
    return examples


def read_split(
    task: GlueTask, data_dir: str | Path, files: tuple[str, ...], labelled: bool = True
) -> list[GlueExample]:
    """Read the files of one split in order (CoLA's two raw dev files become GLUE's one dev set)."""
    out: list[GlueExample] = []
    for path in resolve_files(task, data_dir, files):
        out += read_glue(task, path, labelled, start_index=len(out))
    return out


# ---------------------------------------------------------------------------------------------
# Features and metrics


def glue_features(
    task: GlueTask, examples: list[GlueExample], tokenizer: Any, max_seq_length: int = 128, with_labels: bool = True
) -> list[dict[str, Any]]:
    """``[CLS] a [SEP] (b [SEP])`` ids and token types, pairs cut longest-first to ``max_seq_length``, in
    the tokenizer's family framing (the two-tower model: ``<s> a <sep> b </s>``)."""
    enc_a = tokenizer.encode_batch([e.text_a for e in examples])
    enc_b = tokenizer.encode_batch([e.text_b for e in examples]) if task.text_b else [None] * len(examples)
    label2id = {l: i for i, l in enumerate(task.labels)} if task.labels else None
    features = []
    for ex, a, b in zip(examples, enc_a, enc_b):
        ids, types, _ = pair_input(
            tokenizer.cls_id, tokenizer.sep_id, a.ids, None if b is None else b.ids, max_seq_length, tokenizer.mid_id
        )
        f: dict[str, Any] = {"input_ids": ids, "token_type_ids": types}
        if with_labels and ex.label is not None:
            f["labels"] = np.float32(ex.label) if label2id is None else np.int64(label2id[ex.label])
        features.append(f)
    return features


def glue_metrics(task: GlueTask, gold: list[str], pred: list[str]) -> dict[str, float]:
    """The leaderboard metrics of one dev split, plus ``score``: the task's single number in the GLUE
    average (the mean of the two metrics for MRPC, QQP and STS-B). All x100 (0-100), as the
    leaderboard shows them."""
    return percent(_glue_metrics(task, gold, pred))


def _glue_metrics(task: GlueTask, gold: list[str], pred: list[str]) -> dict[str, float]:
    if task.labels is None:
        g, p = [float(x) for x in gold], [float(x) for x in pred]
        m = {"pearson": pearson(g, p), "spearman": spearman(g, p)}
        return {**m, "score": (m["pearson"] + m["spearman"]) / 2}
    m = {"accuracy": accuracy(gold, pred)}
    if task.name == "CoLA":
        m["mcc"] = matthews_corrcoef(gold, pred)
        m["score"] = m["mcc"]
    elif task.name in ("MRPC", "QQP"):
        m["f1"] = binary_f1(gold, pred, positive="1")
        m["score"] = (m["f1"] + m["accuracy"]) / 2
    else:
        m["score"] = m["accuracy"]
    return m


def score_splits(task: GlueTask, gold: dict[str, list[str]], pred: dict[str, list[str]]) -> dict[str, float]:
    """Metrics of every dev split; with several (MNLI) keys get the split's name as a suffix and
    ``score`` is that of the first (matched) split."""
    out: dict[str, float] = {}
    for k, split in enumerate(gold):
        m = glue_metrics(task, gold[split], pred[split])
        if len(gold) == 1:
            return m
        out.update({f"{name}_{split}": v for name, v in m.items()})
        if k == 0:
            out["score"] = m["score"]
    return out


def labels_of(task: GlueTask, logits: list[np.ndarray]) -> list[str]:
    """Predicted labels as the files write them (a class name, or the score for STS-B)."""
    if task.labels is None:
        return [f"{float(l[0]):.3f}" for l in logits]
    return [task.labels[int(np.argmax(l))] for l in logits]


def write_submission(path: str | Path, examples: list[GlueExample], labels: list[str]) -> None:
    """GLUE submission format: header ``index<TAB>prediction``, one row per example (written once
    under torchrun)."""
    def write() -> None:
        with atomic_write(path, encoding="utf-8") as f:
            f.write("index\tprediction\n")
            for ex, label in zip(examples, labels):
                f.write(f"{ex.guid}\t{label}\n")

    write_once(write)


def read_submission(
    path: str | Path, examples: int | list[GlueExample], task: GlueTask | None = None
) -> list[str]:
    """The predictions of a submission-format file, checked against the examples and (with ``task``)
    the task's labels: a class name of the task, or an STS-B score in [0, 5].

    Given the examples, rows are matched to them by the ``index`` column (their ``guid``): a file
    sorted, shuffled or written by another tool scores the same, and ids that are missing, extra or
    repeated are an error naming the first few. Given a count, the labels come back in file order
    (for a file whose order is known, e.g. one `write_submission` just wrote)."""
    path = Path(path)
    try:
        text = decode_utf8(path.read_bytes(), path)
    except FileNotFoundError:
        raise SpanBertError(f"{path}: predictions file not found") from None
    lines = [(k, l.rstrip("\r")) for k, l in enumerate(text.split("\n"), 1)]
    lines = [(k, l) for k, l in lines if l.strip()]
    if not lines or lines[0][1].split("\t") != ["index", "prediction"]:
        raise DataError(path, "expected the header 'index<TAB>prediction' (GLUE submission format)", line=1)
    rows: list[tuple[int, str, str]] = []  # (line, index, label)
    for k, line in lines[1:]:
        parts = line.split("\t")
        if len(parts) != 2:
            raise DataError(path, f"expected 'index<TAB>prediction', found {line[:80]!r}", line=k)
        label = parts[1].strip()
        if task is not None and task.labels is None:
            # a regression output may stray a little outside [0, 5]; it must be a finite number
            try:
                finite = math.isfinite(float(label))
            except ValueError:
                finite = False
            if not finite:
                raise DataError(path, f"found predicted score {label!r}; expected a finite number", line=k)
        elif task is not None and label not in task.labels:
            raise DataError(path, f"found predicted label {label!r}; expected one of {list(task.labels)}", line=k)
        rows.append((k, parts[0].strip(), label))
    if isinstance(examples, int):
        if len(rows) != examples:
            raise DataError(path, f"found {len(rows)} predictions; expected one per example ({examples})")
        return [label for _, _, label in rows]
    by_id: dict[str, str] = {}
    for k, index, label in rows:
        if index in by_id:
            raise DataError(path, f"found index {index!r} a second time; expected one prediction per example", line=k)
        by_id[index] = label
    how = ", matched by the index column (the row number from 0 in a dev file without an index/id column)"
    return match_by_id(path, by_id, [e.guid for e in examples], "the dev data", how)


# ---------------------------------------------------------------------------------------------
# Fine-tuning, prediction, CLI

MAJORITY_FILE = "majority.json"
"""What `spanbert finetune glue --task WNLI` saves instead of a model: the majority class."""


def finetune_glue(task: GlueTask, model_dir: str | Path, data_dir: str | Path, args: Any,
                  tokenizer_dir: str | Path | None = None, max_seq_length: int = 128,
                  max_train_examples: int | None = None, max_eval_examples: int | None = None,
                  heldout_half: bool = False) -> dict[str, float]:
    """Fine-tune on ``data_dir``'s train split, score every dev split, save to ``args.output_dir``.
    ``heldout_half``: select (and score) on the selection half of each dev split only (`dev_halves`);
    the other half stays unseen for `spanbert evaluate glue --heldout_half`."""
    out = Path(args.output_dir)
    selected = None
    train = read_split(task, data_dir, task.train)[:max_train_examples]
    dev = {split: read_split(task, data_dir, files)[:max_eval_examples] for split, files in task.dev.items()}
    if heldout_half:
        dev = {split: halves[0] for split, halves in dev_halves(dev, data_dir).items()}
    gold = {split: [e.label for e in exs] for split, exs in dev.items()}
    if task.name == "WNLI":  # Table 5 note: WNLI is always the majority class, no model is trained
        majority = Counter(e.label for e in train).most_common(1)[0][0]
        write_json_once(out / MAJORITY_FILE, {"task": task.name, "label": majority, "train_examples": len(train)})
        pred = {s: [majority] * len(g) for s, g in gold.items()}
    else:
        tokenizer = load_tokenizer_for(model_dir, tokenizer_dir)
        train_features = glue_features(task, train, tokenizer, max_seq_length)
        dev_features = {s: glue_features(task, exs, tokenizer, max_seq_length, False) for s, exs in dev.items()}
        num_labels = 1 if task.labels is None else len(task.labels)
        model = C.build_model("sequence", model_dir, num_labels, seed=args.seed)

        def predict_all(m: Any) -> dict[str, list[str]]:
            return {
                s: labels_of(task, C.predict_logits(m, f, tokenizer.pad_id, args.per_device_eval_batch_size))
                for s, f in dev_features.items()
            }

        done = C.finetune_selected(
            model, train_features, args, tokenizer.pad_id, predict_all, lambda p: score_splits(task, gold, p),
            eval_size(sum(map(len, dev.values())), [f for fs in dev_features.values() for f in fs]),
        )
        pred, selected = done.predictions, done.selected_step
        meta = {"task": "glue", "glue_task": task.name, "max_seq_length": max_seq_length}
        if heldout_half:  # what `evaluate --heldout_half` needs to cut the same halves
            meta["heldout_half"] = {"seed": HELDOUT_SEED, "max_eval_examples": max_eval_examples}
        C.save_model(model, out, tokenizer, "sequence", list(task.labels) if task.labels else None, meta)
    metrics = {**score_splits(task, gold, pred), **selection_summary(selected, args)}
    if heldout_half:
        metrics["dev_half"] = "selection"  # these scores are on the half selection saw
        print0(f"selected on half of dev ({sum(map(len, dev.values()))} examples); the other half is held out: "
               f"spanbert evaluate glue --task {task.name} --heldout_half --model {out} scores it")  # fmt: skip

    def write() -> None:
        for split, exs in dev.items():
            write_submission(out / _dev_name(task, split), exs, pred[split])
        write_json_once(out / RESULTS_FILE, metrics)

    write_once(write)
    return metrics


def dev_halves(dev: dict[str, list[GlueExample]], data_dir: str | Path) -> dict[str, tuple[list, list]]:
    """Each dev split cut into (selection half, held-out half) by `split_half`: by example, with the
    fixed seed `spanbert study` uses, so a study and ``--heldout_half`` hold out the same sentences."""
    out = {}
    for split, exs in dev.items():
        if len(exs) < 2:
            raise SpanBertError(f"--heldout_half: found {len(exs)} dev example(s) in {data_dir} "
                                f"{split or 'dev'}, expected at least 2 to split dev in two halves")  # fmt: skip
        select, held = split_half(len(exs))
        out[split] = ([exs[i] for i in select], [exs[i] for i in held])
    return out


def _dev_name(task: GlueTask, split: str) -> str:
    return f"{task.name}.dev.tsv" if len(task.dev) == 1 else f"{task.name}-{split}.dev.tsv"


def predict_glue(
    task: GlueTask, model_dir: str | Path, examples: list[GlueExample], batch_size: int = 64, device: str = "cpu",
    progress: bool = True,
) -> list[str]:  # fmt: skip
    """Labels for ``examples`` from a folder saved by `finetune_glue` (or WNLI's majority class)."""
    model_dir = Path(model_dir)
    if (model_dir / MAJORITY_FILE).exists():
        path = model_dir / MAJORITY_FILE
        try:
            label = json.loads(path.read_text(encoding="utf-8"))["label"]
        except (ValueError, KeyError, TypeError) as e:
            raise DataError(
                path, f"found no readable 'label' ({type(e).__name__}); expected {{\"label\": ...}}"
            ) from None
        if task.labels is not None and label not in task.labels:
            raise DataError(path, f"found label {label!r}; expected one of {list(task.labels)}")
        return [label] * len(examples)
    model, config_json, tokenizer = C.load_model("sequence", model_dir, device, needs=NEEDS)
    labels = C.labels_from_config(config_json, str(model_dir / "config.json"))
    expected = list(task.labels) if task.labels else None
    if labels != expected and (labels is None or expected is None or sorted(labels) != sorted(expected)):
        raise DataError(model_dir / "config.json", f"found labels {labels}; expected the {task.name} labels {expected}")
    saved = config_json.get("spanbert", {}).get("glue_task")
    if saved and saved != task.name:
        raise SpanBertError(f"{model_dir} was fine-tuned on {saved}, not {task.name}; pass --task {saved}")
    max_len = config_json.get("spanbert", {}).get("max_seq_length", 128)
    features = glue_features(task, examples, tokenizer, max_len, with_labels=False)
    logits = C.predict_logits(model, features, tokenizer.pad_id, batch_size, progress=progress)
    if labels is None:
        return labels_of(task, logits)
    return [labels[int(np.argmax(l))] for l in logits]  # the model's own label order


NEEDS = "a GLUE model (spanbert finetune glue)"


def check_model(task: GlueTask, model_dir: str | Path) -> None:
    """Refuse, before any data is read, a folder that holds no model for ``task``: a pre-trained-only
    folder, another task's model, or a GLUE model of another GLUE task."""
    if (Path(model_dir) / MAJORITY_FILE).exists():
        return
    _, settings = check_task_settings(model_dir, families.architectures("ForSequenceClassification"), NEEDS, ("glue",))
    saved = settings.get("glue_task")
    if saved and saved != task.name:
        raise SpanBertError(f"{model_dir} was fine-tuned on {saved}, not {task.name}; pass --task {saved}")


def _finetune(task_name: str, opts: GlueFinetune) -> Results:
    """``spanbert finetune glue --task NAME --data_dir DIR ...``."""
    task = glue_task(opts.task)

    def run_one(targs: Any) -> dict[str, float]:
        return finetune_glue(
            task, opts.model, opts.data_dir, targs, opts.tokenizer, opts.max_seq_length,
            opts.max_train_examples, opts.max_eval_examples, opts.heldout_half,
        )  # fmt: skip

    return finetune_options(opts, run_one, "score", f"spanbert finetune {task_name}", seq_length=SEQ_LENGTH)


def _predict(task_name: str, opts: GluePredict) -> Path:
    """``spanbert predict glue --task NAME --data_dir DIR --model M --output_dir OUT``: submission files,
    in the folder returned."""
    task = glue_task(opts.task)
    check_model(task, opts.model)
    start_distributed(opts.device)
    if opts.split == "test":
        outputs = {name: (file,) for name, file in task.test.items()}
    else:
        outputs = {_dev_name(task, s): files for s, files in task.dev.items()}
    for name, files in outputs.items():
        if name == "AX.tsv" and not (Path(opts.data_dir) / files[0]).exists():
            continue  # the diagnostic set is optional
        examples = read_split(task, opts.data_dir, files, labelled=False)
        pred = predict_glue(task, opts.model, examples, opts.batch_size, opts.device, not opts.disable_tqdm)
        write_submission(Path(opts.output_dir) / name, examples, pred)
        print0(f"wrote {len(pred)} predictions to {Path(opts.output_dir) / name}")
    return Path(opts.output_dir)


def _evaluate(task_name: str, opts: GlueEvaluate) -> Results:
    """``spanbert evaluate glue --task NAME --data_dir DIR (--predictions F ... | --model M) [--heldout_half]``."""
    task = glue_task(opts.task)
    one_of(opts, "predictions", "model")
    heldout = None
    if opts.model:
        check_model(task, opts.model)
        heldout = _heldout_settings(opts.model, opts.heldout_half)
        start_distributed(opts.device)
    elif opts.heldout_half:
        raise SpanBertError("--heldout_half: found --predictions, expected --model (the model folder says which half "
                            "of dev its fine-tuning held out)")  # fmt: skip
    dev = {s: read_split(task, opts.data_dir, files) for s, files in task.dev.items()}
    if opts.heldout_half:
        dev = {s: exs[: heldout["max_eval_examples"]] for s, exs in dev.items()}
        dev = {s: halves[1] for s, halves in dev_halves(dev, opts.data_dir).items()}
    if opts.predictions and len(opts.predictions) != len(dev):
        raise SpanBertError(
            f"--predictions: found {len(opts.predictions)} file(s); expected one per {task.name} dev split, in "
            f"this order: {', '.join(dev)}"
        )
    pred = {}
    for k, (s, exs) in enumerate(dev.items()):
        pred[s] = (
            predict_glue(task, opts.model, exs, opts.batch_size, opts.device, not opts.disable_tqdm)
            if opts.model
            else read_submission(opts.predictions[k], exs, task)
        )
    gold = {s: [e.label for e in exs] for s, exs in dev.items()}
    extra = {"dev_half": "held-out"} if opts.heldout_half else {}
    return Results({**score_splits(task, gold, pred), "examples": sum(map(len, gold.values())), **extra}, "score")


def _heldout_settings(model_dir: str | Path, heldout_half: bool) -> dict[str, Any] | None:
    """What the model folder says of its dev halves (`finetune glue --heldout_half`), checked against what
    the command asks: a held-out score needs a model whose selection saw only the other half; a score on
    the whole dev set of such a model is said to include the half it was selected on."""
    if (Path(model_dir) / MAJORITY_FILE).exists():  # WNLI's majority class: nothing was selected on dev
        return {"max_eval_examples": None}
    settings = families.read_config(model_dir).get("spanbert", {})
    halves = settings.get("heldout_half") if isinstance(settings, dict) else None
    if heldout_half and not isinstance(halves, dict):
        raise SpanBertError(
            f"{model_dir}: found a model selected on the whole dev set (fine-tuned without --heldout_half), "
            "expected one that held half of dev out of selection; fine-tune with --heldout_half, or evaluate "
            "without it (a score on data selection saw)"
        )
    if not heldout_half and isinstance(halves, dict):
        eprint0(f"note: {model_dir} was selected on half of dev: this score includes that half "
                "(--heldout_half scores only the other)")  # fmt: skip
    return halves


def missing_files(name: str, data_dir: str) -> str | None:
    """What the folder ``data_dir`` lacks for GLUE task ``name`` (its training and dev files), or None."""
    spec = GLUE_TASKS[name]
    for f in [*spec.train, *(f for files in spec.dev.values() for f in files)]:
        paths = [Path(data_dir) / f, *(Path(data_dir) / g for g in _FALLBACK.get((name, f), ()))]
        if not any(p.is_file() for p in paths):
            return f"found no {f} in {data_dir}, expected the {name} folder of GLUE (train.tsv and its dev file)"
    return None


@dataclass(frozen=True)
class FolderSplit:
    """The dev halves of a GLUE task: two task folders, ``select/`` and ``heldout/``, each with the task's
    train.tsv (linked, not copied) and half of its dev.tsv rows, so a run names one folder as it names the
    whole task's. A task with several dev files (MNLI) or the raw CoLA release is not split."""

    restriction: tuple[str, ...] = ("max_eval_examples",)

    def halves(self, train: str, dev: str, options: Any, folder: Path) -> tuple[Path, Path] | None:
        spec = glue_task(str(options.get("task", "")))
        if spec.dev != GLUE_TASKS["SST-2"].dev or spec.headerless or not (Path(train) / "dev.tsv").is_file():
            return None  # MNLI's two dev files, CoLA's raw release
        return folder / "select", folder / "heldout"

    def split(self, train: str, dev: str, options: Any, folder: Path) -> dict[str, Any]:
        source = Path(train) / "dev.tsv"
        head, select, held = cut(source, "rows-after-header", options, self.restriction)
        for half, part in zip(self.halves(train, dev, options, folder) or (), (select, held)):
            half.mkdir(exist_ok=True)
            for f in ("train.tsv",):  # the task folder's training file, linked, not copied
                with contextlib.suppress(FileExistsError):  # shards of one study may split at once
                    (half / f).symlink_to((Path(train) / f).resolve())
            with atomic_write(half / "dev.tsv", newline="") as out:
                out.write("".join(head + part))
        return record(source, select, held)


def _score_model(model: str, data: str, options: dict[str, Any]) -> Results:
    """A fine-tuned model scored on a task folder's dev split(s)."""
    return api.evaluate("glue", data_dir=data, model=model, disable_tqdm=True, **options)


SPECS = {
    "glue": TaskSpec(
        "glue", "GLUE sentence(-pair) classification and regression (--task)", _finetune, _predict, _evaluate,
        options=ACTIONS, metric="score", data="a GLUE task folder (train.tsv, dev.tsv, test.tsv)",
        dev_split=FolderSplit(),
        # the runs name the task folder (the selection half's, when dev is split)
        data_options=lambda train, dev: {"data_dir": dev or train},
        dev_in_train=True,
        score_model=_score_model,
        subtasks=SubTasks(option="task", key="glue_task", names=tuple(GLUE_TASKS), canonical=canonical_name,
                          check=missing_files),
    )
}

__getattr__ = _aliases.getter(__name__)  # the old spellings of names that moved (`spanbert._aliases`)
