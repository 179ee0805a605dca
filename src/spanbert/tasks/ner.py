"""Named entity recognition on CoNLL-2003 (BERT §5.3): a token classifier, no CRF, conlleval F1.

Each word is split into WordPieces; only the first sub-token of a word feeds the classifier ("we use
the representation of the first sub-token as the input to the token-level classifier over the NER
label set", BERT §5.3), the others carry label -100 and are ignored. A sentence longer than
``max_seq_length`` tokens is cut into consecutive pieces at word boundaries, so every word gets a
prediction. The score is entity-level F1 as ``conlleval`` computes it
(`spanbert.metrics.classification.conlleval`), reported x100 (0-100) as conlleval prints it. IOB1 and
IOB2 tags are scored exactly as conlleval; IOBES tags (``S-``/``E-``) are read as the chunks they
denote, which conlleval (2004) does not do (docs/tasks.md).

Document context (BERT §5.3: "we include the maximal document context provided by the data"): with
``document_context`` each sentence (or piece) is encoded inside the WordPieces of its document
(``-DOCSTART-`` to ``-DOCSTART-``), as many neighbouring tokens as fit in ``max_seq_length``, centred
on it; labels and predictions stay on its own words. `spanbert finetune ner` does this by default
(``--document_context false``: each sentence alone) and saves the setting with the model, so a model
predicts as it was trained (models saved before the option: sentences alone).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spanbert.distributed import print0
from spanbert.errors import DataError, SpanBertError, decode_utf8
from spanbert.metrics.classification import conlleval
from spanbert.tasks.common import add_inference_arguments, selection_defaults, selection_summary
from spanbert.utils import atomic_write

_TAG = re.compile(r"^(O|[BIES]-\S+)$")


@dataclass
class NerSentence:
    words: list[str]
    tags: list[str] | None
    """One IOB tag per word; None for unlabelled input."""
    line: int
    """Line of the first word in its file (for error messages)."""
    document: int = 0
    """Index of its document in the file (counted at ``-DOCSTART-`` lines; 0 in a file without them):
    the neighbours that may give it context."""


def read_conll(path: str | Path, require_tags: bool = True) -> list[NerSentence]:
    """Read CoNLL-2003 column format: ``word POS chunk NER`` (the tag is the last column), blank lines
    between sentences, ``-DOCSTART-`` lines between documents (each sentence records its document
    index; a file without them is one document). A file of single-column lines is read as unlabelled
    words when ``require_tags`` is False."""
    path = Path(path)
    try:
        text = decode_utf8(path.read_bytes(), path, "UTF-8 CoNLL-2003 text")
    except FileNotFoundError:
        raise SpanBertError(f"{path}: file not found (expected a CoNLL-2003 file)") from None
    sentences: list[NerSentence] = []
    words: list[str] = []
    tags: list[str] = []
    start = 0
    document = 0

    def flush() -> None:
        if words:
            sentences.append(NerSentence(list(words), list(tags) if tags else None, start, document))
        words.clear()
        tags.clear()

    for n, raw in enumerate(text.split("\n"), 1):
        line = raw.rstrip("\r")
        if not line.strip():
            flush()
            continue
        cols = line.split()
        if cols[0] == "-DOCSTART-":
            flush()
            if sentences and sentences[-1].document == document:  # a new document after a non-empty one
                document += 1
            continue
        if not words:
            start = n
        if len(cols) == 1:
            if require_tags:
                raise DataError(
                    path, f"found {line[:80]!r}: one column; expected 'word ... TAG' (tag in the last column)", line=n
                )
            if tags:
                raise DataError(path, "a word without a tag inside a tagged sentence", line=n)
            words.append(cols[0])
            continue
        if not _TAG.match(cols[-1]):
            raise DataError(
                path, f"found tag {cols[-1]!r} in {line[:80]!r}; expected O or B-/I-/E-/S-TYPE (IOB or IOBES)", line=n
            )
        if len(tags) != len(words):
            raise DataError(path, "a tagged word inside an untagged sentence", line=n)
        words.append(cols[0])
        tags.append(cols[-1])
    flush()
    if not sentences:
        raise DataError(path, "no sentences found; expected CoNLL-2003 column format")
    return sentences


def label_list(sentences: list[NerSentence]) -> list[str]:
    """``O`` first, then the other tags sorted: a fixed order, saved with the model as id2label."""
    tags = {t for s in sentences for t in (s.tags or [])}
    return ["O"] + sorted(tags - {"O"})


# ---------------------------------------------------------------------------------------------
# Features and decoding


def ner_features(
    sentences: list[NerSentence], tokenizer: Any, label2id: dict[str, int] | None, max_seq_length: int = 128,
    source: str = "data", document_context: bool = False,
) -> list[dict[str, Any]]:  # fmt: skip
    """One feature per sentence, or per piece of a long sentence (cut at word boundaries).

    Keys: ``input_ids`` (T,), ``labels`` (T,) with the word's tag id on its first sub-token and -100
    elsewhere, ``first_token`` (W,) position of each word's first sub-token, ``sentence`` and
    ``first_word`` (which words of which sentence the feature covers).

    With ``document_context`` (§5.3) the piece sits inside the WordPieces of its document: the tokens
    left over in ``max_seq_length`` are filled with its neighbours, half before and half after it
    (the rest to the other side at a document edge), ``[CLS] left piece right [SEP]``; the context
    carries label -100, so the loss and the predictions are on the piece's own words only. The
    document is a run of consecutive sentences with the same ``document`` index.
    """
    from spanbert.tasks.classification import IGNORE_INDEX

    budget = max_seq_length - 2
    features = []
    all_pieces: list[list[list[int]]] = []  # sentence -> word -> its WordPiece ids
    for s in sentences:
        enc = tokenizer.encode_words(s.words)
        pieces: list[list[int]] = [[] for _ in s.words]
        for tid, wid in zip(enc.ids.tolist(), enc.word_ids.tolist()):
            pieces[wid].append(tid)
        all_pieces.append(pieces)
    # the token stream of each document and where each sentence starts in it
    streams: list[list[int]] = []
    doc_of: list[int] = []
    offset: list[int] = []
    for si, s in enumerate(sentences):
        if document_context and si > 0 and s.document == sentences[si - 1].document:
            doc_of.append(doc_of[-1])
        else:
            streams.append([])
            doc_of.append(len(streams) - 1)
        offset.append(len(streams[-1]))
        for p in all_pieces[si]:
            streams[-1].extend(p)
    for si, s in enumerate(sentences):
        pieces = all_pieces[si]
        stream = streams[doc_of[si]]
        word_start = np.cumsum([0] + [len(p) for p in pieces]) + offset[si]  # (W + 1,) in the stream
        w = 0
        while w < len(s.words):
            ids, firsts, labels = [tokenizer.cls_id], [], [IGNORE_INDEX]
            start = w
            while w < len(s.words) and (len(ids) - 1 + min(len(pieces[w]), budget) <= budget):
                p = pieces[w][:budget]  # a single word longer than the budget keeps its first pieces
                firsts.append(len(ids))
                if label2id is not None:
                    tag = s.tags[w]
                    if tag not in label2id:
                        raise DataError(
                            source, f"tag {tag!r} is not a label of this model: {sorted(label2id)}", line=s.line + w
                        )
                    labels += [label2id[tag]] + [IGNORE_INDEX] * (len(p) - 1)
                ids += p
                w += 1
            if document_context:
                room = budget - (len(ids) - 1)
                a, b = int(word_start[start]), int(word_start[w])  # the piece's tokens in the stream
                right = min(len(stream) - b, room - min(a, room // 2))  # centred; the rest to the open side
                left = min(a, room - right)
                ids = [tokenizer.cls_id, *stream[a - left : a], *ids[1:], *stream[b : b + right]]
                firsts = [k + left for k in firsts]
                labels = [IGNORE_INDEX] * (left + 1) + labels[1:] + [IGNORE_INDEX] * right
            ids.append(tokenizer.sep_id)
            f: dict[str, Any] = {
                "input_ids": np.asarray(ids, dtype=np.int64),
                "first_token": np.asarray(firsts, dtype=np.int64),
                "sentence": si,
                "first_word": start,
            }
            if label2id is not None:
                f["labels"] = np.asarray(labels + [IGNORE_INDEX], dtype=np.int64)
            features.append(f)
    return features


def decode(
    sentences: list[NerSentence], features: list[dict[str, Any]], logits: list[np.ndarray], labels: list[str]
) -> list[list[str]]:
    """The predicted tag of every word: argmax at its first sub-token."""
    out = [["O"] * len(s.words) for s in sentences]
    for f, l in zip(features, logits):
        best = l[f["first_token"]].argmax(-1)  # (W,)
        for k, label_id in enumerate(best.tolist()):
            out[f["sentence"]][f["first_word"] + k] = labels[label_id]
    return out


def score(sentences: list[NerSentence], pred: list[list[str]]) -> dict[str, Any]:
    """conlleval's entity-level precision / recall / F1 and per-type scores, x100 (0-100, as the
    conlleval script prints them)."""
    from spanbert.tasks.common import percent

    return percent(conlleval([s.tags for s in sentences], pred))


def write_predictions(path: str | Path, sentences: list[NerSentence], pred: list[list[str]]) -> None:
    """CoNLL lines ``word gold predicted`` (``word predicted`` without gold), blank line between
    sentences: the input format of the ``conlleval`` script."""
    with atomic_write(path, encoding="utf-8") as f:
        for s, tags in zip(sentences, pred):
            for k, (word, tag) in enumerate(zip(s.words, tags)):
                f.write(f"{word} {s.tags[k]} {tag}\n" if s.tags else f"{word} {tag}\n")
            f.write("\n")


def read_predictions(path: str | Path, sentences: list[NerSentence]) -> list[list[str]]:
    """Predicted tags (last column) of a CoNLL file (as `write_predictions` writes it), in the order of
    ``sentences``.

    conlleval's format has no sentence ids, so a sentence's words are its id: predicted sentences are
    matched to the data's by their words (sentences with the same words in file order), and a file in
    another order scores the same. A sentence of the data without a prediction, or a predicted one
    that is not in the data, is an error naming its line."""
    pred = read_conll(path, require_tags=True)
    by_words: dict[tuple[str, ...], list[NerSentence]] = {}
    for p in pred:
        by_words.setdefault(tuple(p.words), []).append(p)
    out = []
    for s in sentences:
        queue = by_words.get(tuple(s.words))
        if not queue:
            # name the predicted sentence in the same place: usually the one whose words differ
            here = pred[len(out)] if len(out) < len(pred) else None
            found = repr(" ".join(here.words)[:60]) if here else "the end of the file"
            raise DataError(
                path, f"found {found}, and no predicted "
                f"sentence with the words of the data file's sentence at line {s.line} ({' '.join(s.words)[:60]!r}); "
                "expected every sentence of the data file, with its words",
                line=here.line if here else None,
            )  # fmt: skip
        out.append(queue.pop(0).tags)
    left = [p for queue in by_words.values() for p in queue]
    if left:
        first = min(left, key=lambda p: p.line)
        raise DataError(
            path, f"found {len(left)} predicted sentence(s) that are not in the data file (the first: "
            f"{' '.join(first.words)[:60]!r}); expected the data file's {len(sentences)} sentences",
            line=first.line,
        )  # fmt: skip
    return out


# ---------------------------------------------------------------------------------------------
# Fine-tuning, prediction, CLI

DEFAULTS = dict(
    output_dir="runs/ner",
    learning_rate=5e-5,
    per_device_train_batch_size=32,
    num_train_epochs=4.0,
    warmup_ratio=0.1,
    **selection_defaults("f1"),
)
"""BERT's fine-tuning recipe (§A.3: lr in {5e-5, 3e-5, 2e-5}, batch 16/32, 2-4 epochs); the model of the
best dev conlleval F1 of 10 evaluations an epoch is kept, as the SpanBERT scripts select theirs."""


def finetune_ner(
    model_dir: str | Path,
    train_path: str | Path,
    dev_path: str | Path | None,
    args: Any,
    tokenizer_dir: str | Path | None = None,
    max_seq_length: int = 128,
    max_train_examples: int | None = None,
    max_eval_examples: int | None = None,
    document_context: bool = True,
) -> dict[str, Any]:
    """Fine-tune a token classifier and save it in ``args.output_dir``; returns dev conlleval scores.
    ``document_context`` (§5.3, on by default as in the paper) is saved in config.json for prediction."""
    from spanbert.tasks import classification as C
    from spanbert.tasks.common import load_tokenizer_for, write_once

    train = read_conll(train_path)[:max_train_examples]
    dev = read_conll(dev_path)[:max_eval_examples] if dev_path else []
    labels = label_list(train)
    label2id = {l: i for i, l in enumerate(labels)}
    for s in dev:  # a tag the model cannot predict would only be scored as a silent miss
        for k, tag in enumerate(s.tags or []):
            if tag not in label2id:
                raise DataError(
                    dev_path, f"found tag {tag!r}, which the training file {train_path} never has; "
                    f"expected one of {labels}", line=s.line + k,
                )  # fmt: skip
    tokenizer = load_tokenizer_for(model_dir, tokenizer_dir)
    train_features = ner_features(train, tokenizer, label2id, max_seq_length, str(train_path), document_context)
    dev_features = ner_features(dev, tokenizer, None, max_seq_length, str(dev_path), document_context)
    model = C.build_model("token", model_dir, len(labels), seed=args.seed)

    def predict(m: Any) -> list[list[str]]:
        return decode(
            dev,
            dev_features,
            C.predict_logits(m, dev_features, tokenizer.pad_id, args.per_device_eval_batch_size),
            labels,
        )

    done = C.finetune_selected(
        model, train_features, args, tokenizer.pad_id, predict if dev else None, lambda p: score(dev, p)
    )
    pred = done.predictions
    out = Path(args.output_dir)
    metrics: dict[str, Any] = {**score(dev, pred), **selection_summary(done.selected_step, args)} if dev else {}

    def write() -> None:
        settings = {"task": "ner", "max_seq_length": max_seq_length, "document_context": document_context}
        C.save_model(model, out, tokenizer, "token", labels, settings)
        if dev:
            write_predictions(out / "dev_predictions.txt", dev, pred)
            C.write_json(out / "dev_results.json", metrics)

    write_once(write)
    return metrics


def predict_ner(
    model_dir: str | Path, sentences: list[NerSentence], batch_size: int = 64, device: str = "cpu",
    progress: bool = True, source: str | Path | None = None,
) -> list[list[str]]:  # fmt: skip
    """Tags for every word of ``sentences`` with a model saved by `finetune_ner`. With ``source`` (the
    data file), a gold tag the model never saw in training is an error naming its line."""
    from spanbert.tasks import classification as C
    from spanbert.tasks import cloze_heads

    if cloze_heads.is_two_tower(model_dir):  # fine-tuned from a two-tower cloze model
        return cloze_heads.predict_ner(model_dir, sentences, batch_size, device, progress, source)
    from spanbert.tasks import ner_features as NF

    if NF.is_feature_model(model_dir):  # a biLSTM on frozen features (`finetune ner --features`)
        return NF.predict(model_dir, sentences, batch_size, device, progress, source)
    model, config_json, tokenizer = C.load_model("token", model_dir, device)
    config_file = Path(model_dir) / "config.json"
    labels = C.labels_from_config(config_json, str(config_file))
    bad = [l for l in labels or [] if not _TAG.match(l)]
    if labels is None or bad:
        raise DataError(config_file, f"found labels {bad or labels}; expected NER tags (O, B-TYPE, I-TYPE, ...)")
    for s in sentences if source is not None else []:
        for k, tag in enumerate(s.tags or []):
            if tag not in labels:
                raise DataError(
                    source, f"found tag {tag!r}, which the model never saw in training; expected one of {labels}",
                    line=s.line + k,
                )  # fmt: skip
    settings = config_json.get("spanbert", {})
    # a model saved before the option was trained on sentences alone: it predicts that way
    features = ner_features(
        sentences, tokenizer, None, settings.get("max_seq_length", 128),
        document_context=bool(settings.get("document_context", False)),
    )  # fmt: skip
    return decode(
        sentences, features, C.predict_logits(model, features, tokenizer.pad_id, batch_size, progress=progress), labels
    )


def parse_bool(value: str) -> bool:
    """``true``/``false`` (also 1/0, yes/no, on/off) for a boolean option's value."""
    s = str(value).lower()
    if s in ("1", "true", "yes", "on"):
        return True
    if s in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"found {value!r}, expected true or false")


def add_document_context_argument(parser: argparse.ArgumentParser) -> None:
    """``--document_context true|false`` (default true: BERT §5.3's setting for its Table 7)."""
    parser.add_argument(
        "--document_context", type=parse_bool, nargs="?", const=True, default=True, metavar="BOOL",
        help="encode each sentence inside its document's neighbouring tokens, as many as fit in max_seq_length, "
        "centred on it (BERT §5.3, 'the maximal document context'; documents start at -DOCSTART- lines); false: "
        "each sentence alone. Saved with the model (default: true)",
    )  # fmt: skip


def _wants_features(argv: list[str]) -> bool:
    """Whether ``finetune ner`` is asked for the feature-based approach (``--features``, or
    ``features:`` in its ``--config`` YAML)."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--features")
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(argv)
    if known.features:
        return True
    if known.config:
        from spanbert.config import load_yaml

        data = load_yaml(known.config)
        return any(k == "features" or (isinstance(v, dict) and "features" in v) for k, v in data.items())
    return False


def cli(action: str, task: str, argv: list[str], prog: str) -> int:
    """``spanbert {finetune,predict,evaluate} ner ...``."""
    from spanbert.tasks import classification as C
    from spanbert.tasks import cloze_heads
    from spanbert.tasks.common import parse_task_args, start_distributed, write_once

    if action == "finetune" and cloze_heads.is_two_tower(cloze_heads.model_in_argv(argv)):
        return cloze_heads.ner_finetune_cli(argv, prog)  # a two-tower cloze model: biLSTM-CRF (§6.2.1)
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    if action == "finetune":
        from spanbert.tasks.common import add_finetune_arguments

        parser.add_argument(
            "--train_file", "--train", dest="train", required=True, help="CoNLL-2003 training file (word POS chunk TAG)"
        )
        parser.add_argument(
            "--validation_file",
            "--dev",
            dest="dev",
            help="CoNLL-2003 dev file, scored with conlleval during and after training",
        )
        parser.add_argument("--max_seq_length", type=int, default=128, help="tokens per input piece (default: 128)")
        parser.add_argument("--max_train_examples", type=int, help="use only the first N training sentences")
        parser.add_argument("--max_eval_examples", type=int, help="use only the first N dev sentences")
        add_document_context_argument(parser)
        from spanbert.config import add_dataclass_arguments
        from spanbert.tasks import ner_features as NF

        if _wants_features(argv):
            return NF.finetune_cli(argv, prog)
        # listed for --help; they take effect only with --features (a frozen encoder + biLSTM, Table 7)
        add_dataclass_arguments(
            parser.add_argument_group("feature-based NER (BERT §5.3 Table 7; with --features, whose training "
                                      "defaults differ: see docs/tasks.md)"), NF.HeadConfig,
        )  # fmt: skip
        add_finetune_arguments(parser, DEFAULTS)
        args = parse_task_args(parser, argv, DEFAULTS, configs=[NF.HeadConfig])
        stray = sorted(f"--{f.name}" for f in dataclasses.fields(NF.HeadConfig) if f.name in vars(args))
        if stray:
            raise SpanBertError(f"found {', '.join(stray)} without --features; expected them with --features only")

        def run_one(targs: Any) -> dict[str, Any]:
            return finetune_ner(
                args.model, args.train, args.dev, targs, args.tokenizer, args.max_seq_length,
                args.max_train_examples, args.max_eval_examples, args.document_context,
            )  # fmt: skip

        return C.run_finetune_cli(args, DEFAULTS, run_one, metric="f1")
    parser.add_argument("--data", required=True, help="CoNLL-2003 file (tags optional for predict)")
    if action == "predict":
        parser.add_argument("--model", required=True, help="folder saved by `spanbert finetune ner`")
        parser.add_argument("--output", required=True, help="CoNLL file to write: word [gold] predicted")
        add_inference_arguments(parser, "sequences")
        args = parser.parse_args(argv)
        start_distributed(args.device)
        sentences = read_conll(args.data, require_tags=False)
        pred = predict_ner(args.model, sentences, args.batch_size, args.device, not args.disable_tqdm)
        write_once(lambda: write_predictions(args.output, sentences, pred))
        print0(f"wrote tags for {len(pred)} sentences to {args.output}")
        if all(s.tags for s in sentences):
            C.print_metrics(score(sentences, pred))
        return 0
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument(
        "--predictions", help="file written by `spanbert predict ner` (predicted tag in the last column)"
    )
    group.add_argument("--model", help="fine-tuned model folder: predict, then score")
    add_inference_arguments(parser, "sequences", with_model=True)
    args = parser.parse_args(argv)
    if args.model:
        start_distributed(args.device)
    sentences = read_conll(args.data)
    pred = (
        predict_ner(args.model, sentences, args.batch_size, args.device, not args.disable_tqdm, source=args.data)
        if args.model
        else read_predictions(args.predictions, sentences)
    )
    C.print_metrics({**score(sentences, pred), "sentences": len(sentences)})
    return 0
