"""CoNLL-2003 named-entity data (BERT §5.3): the reader, word-level features for any tagger, decoding,
conlleval scoring and the prediction files. `spanbert.tasks.ner` (fine-tuning and the commands),
`spanbert.tasks.crf_tagger` and `spanbert.tasks.ner_features` build on it.

The score is entity-level F1 as ``conlleval`` computes it (`spanbert.metrics.classification.conlleval`),
reported x100 (0-100) as conlleval prints it. IOB1 and IOB2 tags are scored exactly as conlleval;
IOBES tags (``S-``/``E-``) are read as the chunks they denote, which conlleval (2004) does not do
(docs/tasks.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spanbert.errors import DataError, SpanBertError, decode_utf8
from spanbert.masking import IGNORE_INDEX
from spanbert.metrics.classification import conlleval
from spanbert.tasks.scores import percent
from spanbert.utils import atomic_write

_TAG = re.compile(r"^(O|[BIES]-\S+)$")
# CoNLL-2000 phrase-chunk types: CoNLL-2003's third column. A last column of these is the chunk column
# of a file whose NER column is missing; trained on, every phrase would become an "entity" type.
CHUNK_TYPES = frozenset({"NP", "VP", "PP", "ADJP", "ADVP", "SBAR", "PRT", "CONJP", "INTJ", "LST", "UCP"})


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
        if cols[-1][2:] in CHUNK_TYPES:
            raise DataError(
                path, f"found tag {cols[-1]!r} in {line[:80]!r}, a phrase-chunk tag (CoNLL-2000 types "
                f"{', '.join(sorted(CHUNK_TYPES))}); expected a named-entity tag in the last column "
                "('word POS chunk NER'): is the NER column missing?", line=n,
            )  # fmt: skip
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
