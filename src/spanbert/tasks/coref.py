"""Coreference resolution: CoNLL-2012 reader/writer, segments, the coarse-to-fine span-ranking model, CLI.

The model is the higher-order coarse-to-fine model of Lee et al. (2018) with the encoder replaced by
(Span)BERT as in Joshi et al. (2019), the "independent" variant SpanBERT §4.1 uses: a document is cut
into non-overlapping segments of up to `max_seq_length` sub-tokens, each encoded on its own, and the
task layers run over the concatenated sub-token states. Everything is plain PyTorch: the reference's
custom C++ span-pruning op is replaced by `prune_non_crossing`, a tensorised exact equivalent.

Pipeline: `read_conll` -> `CorefDocument` (words, sentences, speakers, gold clusters as word spans)
-> `featurize` (segments of sub-token ids, sentence / speaker / word maps, gold spans in sub-tokens)
-> `CorefModel` (loss, or top spans + antecedents) -> `decode_clusters` (word spans) -> `write_conll`
/ `spanbert.metrics.coref`.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import math
import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from spanbert import distributed, families, threads, trainer
from spanbert.config import add_dataclass_arguments, dataclass_from_args, parse_key_values
from spanbert.distributed import broadcast_object, eprint0, is_main, print0, resolve_device
from spanbert.errors import DataError, SpanBertError, decode_utf8, utf8_argument
from spanbert.metrics.coref import evaluate_documents
from spanbert.tasks import api, common
from spanbert.tasks.common import (
    add_finetune_arguments,
    add_switch,
    check_output_dir,
    check_sequence_length,
    load_encoder,
    load_finetuned,
    load_tokenizer_for,
    parse_task_args,
    predict_sharded,
    print_metrics,
    save_finetuned,
    seeded_model,
    start_distributed,
    task_parser,
    write_once,
)
from spanbert.tasks.spec import RESULTS_FILE, Folds, Results, TaskSpec
from spanbert.tasks.splits import RecordSplit
from spanbert.trainer import claim_run_dir
from spanbert.utils import atomic_write, input_paths, output_file, progress_bar

Span = tuple[int, int]  # inclusive (start, end) word or sub-token indices

# OntoNotes genres; the genre is the first two characters of the document key ("bc/cctv/00/...").
# Any other key (LitBank's "1023_bleak_house_brat") gets the extra genre "other".
GENRES = ("bc", "bn", "mz", "nw", "pt", "tc", "wb", "other")
NO_SPEAKER = "-"


def genre_of(key: str) -> str:
    """Genre of a document from its key, as the reference implementation does (``key[:2]``)."""
    return key[:2] if key[:2] in GENRES else "other"


# =============================================================================================
# CoNLL-2012 reader and writer


@dataclass
class CorefDocument:
    """One CoNLL-2012 document part."""

    key: str
    """The document name inside ``#begin document (key); part N``."""
    part: int
    """The part number."""
    sentences: list[list[str]]
    """Words, sentence by sentence."""
    speakers: list[list[str]] = field(default_factory=list)
    """Speaker of each word (column 10 of CoNLL-2012; ``-`` when the file has none)."""
    clusters: list[list[Span]] = field(default_factory=list)
    """Gold entities: lists of inclusive (start, end) word indices into the whole document."""
    rows: list[list[str]] | None = None
    """The original columns of each word line (to write predictions into a copy of the input)."""
    source: str = ""
    """Where it was read from, ``file:line`` of its ``#begin document``, for error messages."""

    @property
    def doc_id(self) -> str:
        """``key_part``, unique in a file."""
        return f"{self.key}_{self.part}"

    @property
    def genre(self) -> str:
        return genre_of(self.key)

    @property
    def words(self) -> list[str]:
        return [w for s in self.sentences for w in s]

    @property
    def num_words(self) -> int:
        return sum(len(s) for s in self.sentences)


# CoNLL-2012's `#begin document (KEY); part NNN` (the reference scorer and e2e-coref's reader read
# exactly this; whitespace between the fields is free). A line missing the parentheses, the ';' or the
# part number is an error: read loosely, a typo silently became another document name.
_BEGIN = re.compile(r"^#begin document\s+\((?P<key>[^()]*)\);\s*part\s+(?P<part>\d+)\s*$")
_ENTRY = re.compile(r"^(\()?(\d+)(\))?$")
_EMPTY_COREF = ("", "-", "_")


def _open_text(path: Path) -> TextIO:
    try:
        if path.suffix == ".gz":
            return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
        return open(path, encoding="utf-8")
    except OSError as e:
        raise DataError(path, f"cannot read: {e.strerror or e}") from None


def parse_coref_column(value: str, path: Path | str = "<string>", line: int | None = None) -> list[tuple[str, int]]:
    """``"(1)|(2|3)"`` -> ``[("single", 1), ("open", 2), ("close", 3)]``; ``-``/``_``/empty -> []."""
    if value in _EMPTY_COREF:
        return []
    out = []
    for entry in value.split("|"):
        m = _ENTRY.match(entry)
        if not m or not (m.group(1) or m.group(3)):
            raise DataError(
                path,
                f"found coreference entry {entry!r} in {value!r}; expected '(N', 'N)' or '(N)' with an integer "
                f"entity id N, joined with '|', or '-'",
                line=line,
            )
        kind = "single" if m.group(1) and m.group(3) else "open" if m.group(1) else "close"
        out.append((kind, int(m.group(2))))
    return out


def read_conll(path: str | Path) -> list[CorefDocument]:
    """Read every document of a CoNLL-2012 file (plain or ``.gz``).

    Columns are tab-separated when the line has a tab (LitBank, whose coreference column may be empty),
    else whitespace-separated (OntoNotes). The word is column 4, the speaker column 10 when the line
    has at least 12 columns, the coreference annotation the last column.
    """
    path = Path(path)
    docs: list[CorefDocument] = []
    doc: CorefDocument | None = None
    sentence: list[str] = []
    speakers: list[str] = []
    open_spans: dict[int, list[tuple[int, int]]] = {}  # cluster id -> stack of (start word, line)
    clusters: dict[int, list[Span]] = {}
    n_words = 0

    def close_sentence() -> None:
        nonlocal sentence, speakers
        if sentence:
            assert doc is not None
            doc.sentences.append(sentence)
            doc.speakers.append(speakers)
        sentence, speakers = [], []

    n_columns = 0  # of the document's first word line: every word line of a document has as many
    first_row = 0
    with _open_text(path) as f:
        lineno = 0
        try:
            data = f.buffer.read()
        except (OSError, EOFError) as e:  # a .gz that is not gzip, or is cut short
            raise DataError(path, f"found a file that cannot be decompressed ({e}); expected gzip data") from None
        # decoded whole, so a byte that is not UTF-8 is named with its line and offset; split on "\n"
        # only, as reading the file line by line did (str.splitlines also splits at \x0b, \x1c, ...)
        pieces = decode_utf8(data, path).split("\n")
        if pieces and pieces[-1] == "":
            pieces.pop()
        lines = list(enumerate(pieces, 1))
        for lineno, raw in lines:
            line = raw.rstrip("\n").rstrip("\r")
            if line.startswith("#begin document"):
                if doc is not None:
                    raise DataError(
                        path, f"found '#begin document' inside document {doc.key!r} (begun at line "
                        f"{doc.source.rsplit(':', 1)[-1]}); expected '#end document' first", line=lineno,
                    )  # fmt: skip
                m = _BEGIN.match(line)
                if not m or not m.group("key").strip():
                    raise DataError(
                        path, f"found {line[:80]!r}; expected '#begin document (KEY); part NNN'", line=lineno
                    )
                doc = CorefDocument(
                    key=m.group("key").strip(),
                    part=int(m.group("part") or 0),
                    sentences=[],
                    rows=[],
                    source=f"{path}:{lineno}",
                )
                open_spans, clusters, n_words, n_columns = {}, {}, 0, 0
                continue
            if line.startswith("#end document"):
                if doc is None:
                    raise DataError(
                        path, "found '#end document' outside a document; expected '#begin document' first", line=lineno
                    )
                close_sentence()
                unclosed = [(cid, ln) for cid, stack in open_spans.items() for _, ln in stack]
                if unclosed:
                    cid, ln = unclosed[0]
                    raise DataError(
                        path,
                        f"found a mention of entity {cid} opened here that is never closed (document {doc.key!r} "
                        f"ends at line {lineno}); expected a matching '{cid})'",
                        line=ln,
                    )
                doc.clusters = [clusters[c] for c in clusters]
                docs.append(doc)
                doc = None
                continue
            if not line.strip():
                if doc is not None:
                    close_sentence()
                continue
            if line.startswith("#"):  # other comment lines
                continue
            if doc is None:
                raise DataError(
                    path, f"found a word line outside a document ({line[:60]!r}); expected '#begin document' first",
                    line=lineno,
                )  # fmt: skip
            cols = line.split("\t") if "\t" in line else line.split()
            if len(cols) < 5:
                raise DataError(
                    path,
                    f"found {len(cols)} columns; expected at least 5 (document, part, index, word, ..., coreference)",
                    line=lineno,
                )
            if n_columns and len(cols) != n_columns:
                raise DataError(
                    path,
                    f"found {len(cols)} columns; expected {n_columns}, as on line {first_row} of document {doc.key!r}",
                    line=lineno,
                )
            if not n_columns:
                n_columns, first_row = len(cols), lineno
            word = cols[3]
            if not word.strip():
                raise DataError(path, "found an empty word (column 4); expected a token", line=lineno)
            speaker = cols[9] if len(cols) >= 12 else NO_SPEAKER
            for kind, cid in parse_coref_column(cols[-1].strip(), path, lineno):
                if kind == "single":
                    clusters.setdefault(cid, []).append((n_words, n_words))
                elif kind == "open":
                    open_spans.setdefault(cid, []).append((n_words, lineno))
                else:
                    stack = open_spans.get(cid)
                    if not stack:
                        raise DataError(
                            path, f"found '{cid})' closing a mention of entity {cid} that was never opened; "
                            f"expected a '({cid}' on this or an earlier line", line=lineno,
                        )  # fmt: skip
                    start, _ = stack.pop()
                    if not stack:
                        del open_spans[cid]
                    clusters.setdefault(cid, []).append((start, n_words))
            sentence.append(word)
            speakers.append(speaker)
            assert doc.rows is not None
            doc.rows.append(cols)
            n_words += 1
    if doc is not None:
        raise DataError(
            path, f"found the end of the file inside document {doc.key!r} (begun at line "
            f"{doc.source.rsplit(':', 1)[-1]}); expected '#end document'", line=lineno,
        )  # fmt: skip
    return docs


def read_documents(paths: str | Path | Sequence[str | Path]) -> list[CorefDocument]:
    """Read one file, a directory of ``*.conll[.gz]`` files, or a list of either; fail when none is found."""
    items = [paths] if isinstance(paths, (str, Path)) else list(paths)
    files: list[Path] = []
    for item in map(Path, items):
        if item.is_dir():
            files += sorted(p for p in item.iterdir() if p.name.endswith(("conll", "conll.gz")))
        elif item.exists():
            files.append(item)
        else:
            raise SpanBertError(
                f"{item}: found no such file or directory; expected a CoNLL-2012 file or a folder of them"
            )
    docs: list[CorefDocument] = []
    seen: dict[str, str] = {}
    for f in files:
        for d in read_conll(f):
            if d.doc_id in seen:  # scoring matches documents by (key, part): a repeat would be lost
                file, line = d.source.rsplit(":", 1)
                raise DataError(
                    file, f"found document {d.key!r} part {d.part} a second time (first at {seen[d.doc_id]}); "
                    f"expected each (key, part) once", line=int(line),
                )  # fmt: skip
            seen[d.doc_id] = d.source
            docs.append(d)
    if not docs:
        raise SpanBertError(
            f"{', '.join(map(str, items))}: found no '#begin document' line; expected CoNLL-2012 documents"
        )
    return docs


def coref_column(n_words: int, clusters: Sequence[Sequence[Span]]) -> list[str]:
    """The coreference column for a document of ``n_words`` words; entity ids are cluster indices.

    On one word, closing entries come first, then one-word mentions, then openings, so that a reader
    keeping one stack per entity (as `read_conll` does) pairs "1)" with the mention opened earlier and
    not with one opened on this word. (Two mentions of one entity that cross cannot be written in this
    format; no such pair exists in LitBank.)
    """
    opens: list[list[int]] = [[] for _ in range(n_words)]
    closes: list[list[int]] = [[] for _ in range(n_words)]
    singles: list[list[int]] = [[] for _ in range(n_words)]
    for cid, cluster in enumerate(clusters):
        for start, end in cluster:
            if not 0 <= start <= end < n_words:
                raise SpanBertError(f"mention ({start}, {end}) lies outside a document of {n_words} words")
            if start == end:
                singles[start].append(cid)
            else:
                opens[start].append(cid)
                closes[end].append(cid)
    out = []
    for i in range(n_words):
        parts = [f"{cid})" for cid in sorted(closes[i])]
        parts += [f"({cid})" for cid in sorted(singles[i])]
        parts += [f"({cid}" for cid in sorted(opens[i])]
        out.append("|".join(parts) if parts else "-")
    return out


def write_conll(
    out: str | Path | TextIO,
    documents: Sequence[CorefDocument],
    clusters: Sequence[Sequence[Sequence[Span]]] | None = None,
) -> None:
    """Write documents in CoNLL-2012 format with ``clusters`` (default: their own) in the last column.

    Documents read from a file keep their original columns; only the coreference column changes, so
    the output can be scored against the input with any scorer. A path is written atomically.
    """
    if isinstance(out, (str, Path)):
        with atomic_write(out, "w", encoding="utf-8") as f:
            write_conll(f, documents, clusters)
        return
    if clusters is not None and len(clusters) != len(documents):
        raise ValueError(f"{len(documents)} documents but {len(clusters)} cluster lists")
    for d, doc in enumerate(documents):
        column = coref_column(doc.num_words, doc.clusters if clusters is None else clusters[d])
        out.write(f"#begin document ({doc.key}); part {doc.part:03d}\n")
        i = 0
        for s, sentence in enumerate(doc.sentences):
            for j, word in enumerate(sentence):
                if doc.rows:
                    cols = list(doc.rows[i])
                    sep = "\t"
                else:
                    speaker = doc.speakers[s][j] if doc.speakers else NO_SPEAKER
                    cols = [doc.key, str(doc.part), str(j), word] + ["-"] * 5 + [speaker, "*", "-"]
                    sep = "\t"
                cols[-1] = column[i] if (doc.rows is None or cols[-1] != "" or column[i] != "-") else ""
                out.write(sep.join(cols) + "\n")
                i += 1
            out.write("\n")
        out.write("#end document\n")


# =============================================================================================
# Segments and features


@dataclass
class CorefFeatures:
    """A document as sub-tokens, cut into independently encoded segments (Joshi et al. 2019)."""

    doc_id: str
    segments: list[np.ndarray]
    """Sub-token ids of each segment, without [CLS]/[SEP]; they cover the document in order."""
    sentence_map: np.ndarray
    """(N,) sentence index of each sub-token."""
    word_map: np.ndarray
    """(N,) document word index of each sub-token."""
    speaker_ids: np.ndarray
    """(N,) speaker index (per document) of each sub-token."""
    genre: int
    """Index into `GENRES`."""
    gold_starts: np.ndarray
    """(M,) first sub-token of each gold mention."""
    gold_ends: np.ndarray
    """(M,) last sub-token of each gold mention (inclusive)."""
    gold_cluster_ids: np.ndarray
    """(M,) entity of each gold mention, 1-based (0 is "no entity")."""

    @property
    def num_subtokens(self) -> int:
        return len(self.sentence_map)


def split_into_segments(
    num_tokens: int, max_len: int, sentence_end: np.ndarray, word_end: np.ndarray
) -> list[tuple[int, int]]:
    """[start, end) runs of at most ``max_len`` tokens, each ending at a sentence end where possible,
    else at a word end, else (a single word longer than a segment) wherever the limit falls."""
    if max_len < 1:
        raise SpanBertError(f"segments must hold at least one sub-token, got max_len={max_len}")
    out = []
    start = 0
    while start < num_tokens:
        end = min(start + max_len, num_tokens)  # exclusive
        if end < num_tokens:
            cut = next((e for e in range(end - 1, start - 1, -1) if sentence_end[e]), None)
            if cut is None:
                cut = next((e for e in range(end - 1, start - 1, -1) if word_end[e]), end - 1)
            end = cut + 1
        out.append((start, end))
        start = end
    return out


BERT_SEGMENT = 384
"""The segment length an encoder of at most 512 positions gets by default: the released SpanBERT-base
setting, and this command's default before segments followed the encoder."""
LONG_SEGMENT_CAP = 8192
"""The longest segment chosen by default for a long-context encoder: ModernBERT's context, which holds a
whole LitBank document (at most 3,419 words) in one segment. An encoder of more positions is still read
in segments of this many sub-tokens, so one training step (at most max_training_segments segments)
keeps a bounded memory."""


def segment_length(max_seq_length: int | None, max_positions: int) -> tuple[int, str]:
    """(segment length in sub-tokens with [CLS] and [SEP], why it is that): ``max_seq_length`` when the
    options set it; else 384 (`BERT_SEGMENT`) for an encoder of at most 512 positions (BERT: the released
    base setting; fewer positions: all of them), and for a longer context the encoder's positions up to
    `LONG_SEGMENT_CAP`."""
    if max_seq_length is not None:
        return max_seq_length, "--max_seq_length"
    if max_positions <= 512:
        if max_positions < BERT_SEGMENT:
            return max_positions, f"the encoder's {max_positions:,} positions"
        return BERT_SEGMENT, f"SpanBERT-base's setting for an encoder of {max_positions:,} positions"
    if max_positions > LONG_SEGMENT_CAP:
        return LONG_SEGMENT_CAP, f"the encoder's {max_positions:,} positions, capped at {LONG_SEGMENT_CAP:,}"
    return max_positions, "the encoder's context"


def segments_line(length: int, why: str, feats: Sequence[CorefFeatures]) -> str:
    """The one line that says how documents are cut: ``segments: up to 8,192 sub-tokens (the encoder's
    context): 1 segment a document``, or with several, how many documents are read whole."""
    counts = [len(f.segments) for f in feats if f.segments]
    head = f"segments: up to {length:,} sub-tokens ({why})"
    if not counts:
        return head
    lo, hi = min(counts), max(counts)
    spread = f"{lo} segment{'s' * (lo > 1)}" if lo == hi else f"{lo} to {hi} segments"
    whole = sum(c == 1 for c in counts)
    return f"{head}: {spread} a document" + ("" if lo == hi else f", {whole} of {len(counts)} in one segment")


def featurize(doc: CorefDocument, tokenizer: Any, max_seq_length: int) -> CorefFeatures:
    """Sub-tokenize ``doc`` and cut it into segments of up to ``max_seq_length`` (with [CLS] and [SEP])."""
    words = doc.words
    enc = tokenizer.encode_words(words)
    ids = np.asarray(enc.ids, dtype=np.int64)  # (N,)
    word_map = np.asarray(enc.word_ids, dtype=np.int64)  # (N,)
    sentence_of_word = np.repeat(np.arange(len(doc.sentences)), [len(s) for s in doc.sentences])
    sentence_map = sentence_of_word[word_map]
    n = len(ids)
    word_end = np.ones(n, dtype=bool)
    word_end[:-1] = word_map[1:] != word_map[:-1]
    sentence_end = np.ones(n, dtype=bool)
    sentence_end[:-1] = sentence_map[1:] != sentence_map[:-1]
    segments = [ids[a:b] for a, b in split_into_segments(n, max_seq_length - 2, sentence_end, word_end)]
    speakers = [s for sent in (doc.speakers or [[NO_SPEAKER] * len(x) for x in doc.sentences]) for s in sent]
    speaker_index: dict[str, int] = {}
    speaker_of_word = np.array([speaker_index.setdefault(s, len(speaker_index)) for s in speakers], dtype=np.int64)
    # first and last sub-token of every word
    first = np.full(len(words), -1, dtype=np.int64)
    last = np.full(len(words), -1, dtype=np.int64)
    first[word_map[::-1]] = np.arange(n)[::-1]
    last[word_map] = np.arange(n)
    starts, ends, cids = [], [], []
    for c, cluster in enumerate(doc.clusters, 1):
        for s, e in cluster:
            starts.append(first[s])
            ends.append(last[e])
            cids.append(c)
    return CorefFeatures(
        doc_id=doc.doc_id,
        segments=segments,
        sentence_map=sentence_map,
        word_map=word_map,
        speaker_ids=speaker_of_word[word_map] if n else np.zeros(0, dtype=np.int64),
        genre=GENRES.index(doc.genre),
        gold_starts=np.asarray(starts, dtype=np.int64),
        gold_ends=np.asarray(ends, dtype=np.int64),
        gold_cluster_ids=np.asarray(cids, dtype=np.int64),
    )


def candidate_spans(sentence_map: np.ndarray, word_map: np.ndarray, max_width: int) -> tuple[np.ndarray, np.ndarray]:
    """All spans of up to ``max_width`` sub-tokens inside one sentence that start and end on word
    boundaries -> (starts, ends), (C,) each, sorted by (start, end).

    §4.1 / Lee et al. (2017): candidates are every span up to a width limit within a sentence. Spans
    that cut a word in two can never be mentions (gold mentions are word spans), so they are left out:
    fewer candidates, same reachable mentions.
    """
    n = len(sentence_map)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    word_start = np.ones(n, dtype=bool)
    word_start[1:] = word_map[1:] != word_map[:-1]
    word_end = np.ones(n, dtype=bool)
    word_end[:-1] = word_map[1:] != word_map[:-1]
    starts = np.arange(n)[:, None].repeat(max_width, 1)  # (N, W)
    ends = starts + np.arange(max_width)[None, :]  # (N, W)
    ok = ends < n
    ends_c = np.minimum(ends, n - 1)
    ok &= sentence_map[starts] == sentence_map[ends_c]
    ok &= word_start[starts] & word_end[ends_c]
    return starts[ok], ends[ok]


class CorefDataset:
    """Map-style dataset of featurized documents; items are model batches (one document each).

    In training, a document longer than ``max_training_segments`` segments is cut to a random run of
    that many consecutive segments (Joshi et al. 2019, to fit in memory); the run is drawn from a
    generator seeded by (seed, epoch, index), so it is reproducible and changes every epoch.
    """

    def __init__(
        self,
        features: Sequence[CorefFeatures],
        max_span_width: int,
        pad_id: int,
        cls_id: int,
        sep_id: int,
        max_training_segments: int | None = None,
        seed: int = 0,
    ):
        self.features = list(features)
        self.max_span_width = max_span_width
        self.pad_id, self.cls_id, self.sep_id = pad_id, cls_id, sep_id
        self.max_training_segments = max_training_segments
        self.seed = seed
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.features)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __getitem__(self, i: int) -> dict[str, Any]:
        f = self.features[i]
        first, last = 0, len(f.segments)
        if self.max_training_segments and len(f.segments) > self.max_training_segments:
            rng = np.random.default_rng((self.seed, self.epoch, i))
            first = int(rng.integers(0, len(f.segments) - self.max_training_segments + 1))
            last = first + self.max_training_segments
        return make_batch(f, first, last, self.max_span_width, self.pad_id, self.cls_id, self.sep_id)


def make_batch(
    f: CorefFeatures, first: int, last: int, max_span_width: int, pad_id: int, cls_id: int, sep_id: int
) -> dict[str, Any]:
    """Tensors for segments [first, last) of a document: the model's keyword arguments."""
    lengths = [len(s) for s in f.segments]
    offset = sum(lengths[:first])
    n = sum(lengths[first:last])
    segs = f.segments[first:last]
    width = max(lengths[first:last]) + 2
    input_ids = np.full((len(segs), width), pad_id, dtype=np.int64)  # (S, T)
    attention_mask = np.zeros((len(segs), width), dtype=np.int64)
    token_index = []  # flat position in (S*T) of each document sub-token, skipping [CLS]/[SEP]/padding
    for s, seg in enumerate(segs):
        input_ids[s, 0], input_ids[s, 1 : len(seg) + 1], input_ids[s, len(seg) + 1] = cls_id, seg, sep_id
        attention_mask[s, : len(seg) + 2] = 1
        token_index.append(s * width + 1 + np.arange(len(seg)))
    sentence_map = f.sentence_map[offset : offset + n]
    word_map = f.word_map[offset : offset + n]
    starts, ends = candidate_spans(sentence_map, word_map, max_span_width)
    inside = (f.gold_starts >= offset) & (f.gold_ends < offset + n)
    return {
        "input_ids": torch.from_numpy(input_ids),
        "attention_mask": torch.from_numpy(attention_mask),
        "token_index": torch.from_numpy(np.concatenate(token_index) if token_index else np.zeros(0, np.int64)),
        "sentence_map": torch.from_numpy(sentence_map.copy()),
        "speaker_ids": torch.from_numpy(f.speaker_ids[offset : offset + n].copy()),
        "genre": torch.tensor(f.genre),
        "span_starts": torch.from_numpy(starts),
        "span_ends": torch.from_numpy(ends),
        "gold_starts": torch.from_numpy(f.gold_starts[inside] - offset),
        "gold_ends": torch.from_numpy(f.gold_ends[inside] - offset),
        "gold_cluster_ids": torch.from_numpy(f.gold_cluster_ids[inside]),
    }


def collate_document(items: list[dict[str, Any]]) -> dict[str, Any]:
    """One document per step (Appendix B): the batch is the document itself."""
    if len(items) != 1:
        raise SpanBertError(
            f"coreference trains on one document per step; got a batch of {len(items)} (use batch size 1)"
        )
    return items[0]


# =============================================================================================
# Non-crossing pruning (replaces the reference's C++ `extract_spans` op)


def crossing(s1: Any, e1: Any, s2: Any, e2: Any) -> Any:
    """Elementwise (ints or tensors): do spans (s1, e1) and (s2, e2) cross, i.e. overlap without one
    containing the other? Nested and disjoint spans may both be kept (Lee et al. 2017 §5)."""
    return ((s1 < s2) & (s2 <= e1) & (e1 < e2)) | ((s2 < s1) & (s1 <= e2) & (e2 < e1))


def prune_non_crossing(scores: Tensor, starts: Tensor, ends: Tensor, k: int, chunk: int | None = None) -> Tensor:
    """Indices of the top-``k`` spans chosen greedily by score, skipping any span that crosses an
    already chosen one; returned sorted by (start, end). Same result as the reference's C++ loop.

    Tensorised: candidates are taken in score order in chunks; inside a chunk every span that no
    higher-scoring surviving span crosses is chosen at once, and the spans crossing the new choices
    are dropped, until the chunk is settled. Each round is a (chunk x chunk) boolean matrix product,
    and the rounds needed are few (a chain of crossing spans is short), so it runs on GPU without a
    per-span Python loop. A span's fate depends only on higher-scoring spans, so taking the first
    ``k`` chosen spans equals stopping the sequential loop at ``k``.
    """
    c = scores.shape[0]
    k = min(k, c)
    device = starts.device
    if k <= 0:
        return torch.zeros(0, dtype=torch.long, device=device)
    chunk = chunk or 512  # (512 x 512) boolean rounds; a few chunks usually settle k spans
    order = torch.argsort(scores, descending=True, stable=True)  # (C,)
    s_sorted, e_sorted = starts[order], ends[order]
    kept: list = []  # positions in `order`
    acc_s = starts.new_zeros(0)
    acc_e = ends.new_zeros(0)
    n_kept = 0
    for lo in range(0, c, chunk):
        cs, ce = s_sorted[lo : lo + chunk], e_sorted[lo : lo + chunk]  # (c,)
        m = cs.shape[0]
        alive = ~crossing(cs[:, None], ce[:, None], acc_s[None, :], acc_e[None, :]).any(1)  # (c,)
        cross = crossing(cs[:, None], ce[:, None], cs[None, :], ce[None, :])  # (c, c)
        earlier = torch.ones(m, m, dtype=torch.bool, device=device).tril(-1)  # [i, j]: j ranks above i
        blocking = cross & earlier
        chosen = torch.zeros(m, dtype=torch.bool, device=device)
        while bool(alive.any()):
            blocked = (blocking & alive[None, :]).any(1)
            new = alive & ~blocked
            chosen |= new
            alive &= ~new & ~(cross & new[None, :]).any(1)
        pos = torch.nonzero(chosen).squeeze(1)
        kept.append(pos + lo)
        acc_s, acc_e = torch.cat([acc_s, cs[pos]]), torch.cat([acc_e, ce[pos]])
        n_kept += pos.numel()
        if n_kept >= k:
            break
    idx = order[torch.cat(kept)[:k]]
    # sort by (start, end): antecedents are the spans that come earlier in this order
    key = starts[idx] * (int(ends.max()) + 1) + ends[idx]
    return idx[torch.argsort(key)]


def segment_distance(
    token_index: Tensor, segment_width: int, starts: Tensor, antecedents: Tensor, buckets: int
) -> Tensor:
    """Segment of each kept span's start minus that of each of its antecedents' starts, clipped to
    [0, buckets - 1]: (k, K). As the released `independent.py` (``segment_distance``), where the
    bucket count is ``max_training_sentences`` (3); in training a document has at most that many
    segments, at prediction time farther pairs share the last bucket.

    ``token_index`` (N,) is the flat position of each sub-token in the (S, T) segment batch, so its
    segment is ``token_index // T``.
    """
    segment = torch.div(token_index, segment_width, rounding_mode="floor")  # (N,)
    span_segment = segment[starts]  # (k,)
    return (span_segment[:, None] - span_segment[antecedents]).clamp(0, buckets - 1)  # (k, K)


def bucket_distance(distance: Tensor) -> Tensor:
    """Lee et al. (2017): buckets [0, 1, 2, 3, 4, 5-7, 8-15, 16-31, 32-63, 64+] -> 0..9."""
    log = torch.floor(torch.log2(distance.clamp(min=1).float())).long() + 3
    return torch.where(distance <= 4, distance, log).clamp(0, 9)


# =============================================================================================
# The model


@dataclass
class CorefConfig:
    """Task layers and inputs of the coreference model.

    The model settings are those of the released SpanBERT coreference code (mandarjoshi90/coref
    `experiments.conf`, `independent.py`), which §4.1 uses; the learning rates and segment length are
    one point of the Appendix B grid (the released values: presets `spanbert_base`, `spanbert_large`).
    """

    max_seq_length: int | None = None
    """Segment length in sub-tokens with [CLS] and [SEP] (Appendix B grid 128-512; released SpanBERT:
    384 base, 512 large). Unset: it follows the encoder (`segment_length`): 384 for BERT's 512
    positions, and for an encoder of a longer context (ModernBERT: 8,192) that context up to 8,192, so
    that a whole LitBank document is one segment. The value chosen is printed and saved with the model."""
    max_training_segments: int = 3
    """In training, a longer document is cut to a random run of this many segments (memory); also the
    number of segment-distance buckets (released: 3)."""
    max_span_width: int = 30
    """Longest candidate mention, in sub-tokens (§4.1 / Lee et al.: 30)."""
    top_span_ratio: float = 0.4
    """Keep the top λ·T spans by mention score (λ = 0.4, T = sub-tokens)."""
    max_top_spans: int = 3900
    """At most this many kept spans per document, whatever λ·T is (released code: 3900)."""
    max_top_antecedents: int = 50
    """Antecedents per span kept by the coarse scorer (K = 50)."""
    ffnn_size: int = 3000
    """Hidden width of the mention and pair scorers (reference: 3000; use ~150-300 on CPU)."""
    ffnn_depth: int = 1
    """Hidden layers of the mention and pair scorers."""
    feature_size: int = 20
    """Width of the span-width, distance, speaker and genre embeddings."""
    dropout: float = 0.3
    """Dropout on the scorers' hidden layers, the width / distance / pair-feature embeddings and the
    coarse scorer's two sides (released: 0.3)."""
    token_dropout: float = 0.0
    """Dropout on the encoder's sub-token states before the span representations (released code:
    none, only the encoder's own hidden dropout; earlier spanbert versions used --dropout here)."""
    use_segment_distance: bool = True
    """Add the segment distance of a mention and its antecedent (clipped to max_training_segments - 1)
    as a pair feature of the fine scorer, as the released model does."""
    coref_depth: int = 2
    """Rounds of antecedent scoring; rounds after the first use spans refined by attention over their
    antecedents (higher-order inference, Lee et al. 2018). 1 = no refinement."""
    singletons: str = "auto"
    """Predict singleton entities: true, false, or auto (true when the training key has singletons,
    as LitBank does; OntoNotes has none). Adds a mention-detection loss on candidate spans."""
    encoder_learning_rate: float = 1e-5
    """Peak learning rate of the encoder (`bert.*`); --learning_rate is the task layers' (Appendix B:
    1e-5 / 2e-5 encoder, 1e-4 ... 3e-4 task)."""
    task_weight_decay: float = 0.0
    """AdamW weight decay of the task layers (released: none); --weight_decay is the encoder's."""
    separate_clipping: bool = True
    """Clip the encoder's and the task layers' gradients separately, each to --max_grad_norm (released
    code); false = one global norm over all parameters."""
    gradient_checkpointing: bool = False
    """Recompute encoder activations in the backward pass (less memory, more compute)."""


def _ffnn(in_dim: int, hidden: int, depth: int, out_dim: int, dropout: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(in_dim, hidden), nn.ReLU(), nn.Dropout(dropout)]
        in_dim = hidden
    layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)


class CorefModel(nn.Module):
    """(Span)BERT + the higher-order coarse-to-fine span-ranking model (Lee et al. 2018, Joshi et al. 2019).

    ``model(**batch)`` for one document (see `make_batch`) returns a dict with ``loss`` when gold
    mentions are given, and the predictions: ``top_starts``/``top_ends`` (k,) the kept spans in
    sub-tokens, ``top_mention_scores`` (k,), ``antecedents`` (k, K) indices into the kept spans and
    ``antecedent_scores`` (k, K+1) with the dummy antecedent (score 0) in column 0.
    """

    def __init__(self, bert_config: Any, config: CorefConfig, encoder: nn.Module | None = None):
        super().__init__()
        # any family (`spanbert.families`); ``bert_config`` builds a BERT encoder when none is given
        self.bert = encoder if encoder is not None else families.encoder_from_config(bert_config.to_hf_dict(), add_pooling_layer=False)
        # the segment length is fixed here, so that predictions and the saved config use the same one
        self.config = config = replace(config, max_seq_length=segment_length(config.max_seq_length, self.bert.max_positions)[0])
        h, fs, c = self.bert.hidden_size, config.feature_size, config
        self.span_dim = d = 3 * h + fs  # [x_start, x_end, head attention, width embedding]
        self.dropout = nn.Dropout(c.dropout)
        self.token_dropout = nn.Dropout(c.token_dropout)
        self.head_attention = nn.Linear(h, 1)  # α_t = w · x_t, softmax over the span's tokens
        self.span_width_embeddings = nn.Embedding(c.max_span_width, fs)
        self.mention_scorer = _ffnn(d, c.ffnn_size, c.ffnn_depth, 1, c.dropout)
        self.width_prior_embeddings = nn.Embedding(c.max_span_width, fs)  # learned prior over widths
        self.width_scorer = _ffnn(fs, c.ffnn_size, c.ffnn_depth, 1, c.dropout)
        self.coarse_bilinear = nn.Linear(d, d)  # s_c(i, j) = g_i^T W g_j
        self.distance_prior_embeddings = nn.Embedding(10, fs)
        self.distance_prior = nn.Linear(fs, 1)
        self.distance_embeddings = nn.Embedding(10, fs)  # φ(i, j): bucketed distance
        self.speaker_embeddings = nn.Embedding(2, fs)  # same speaker or not
        self.genre_embeddings = nn.Embedding(len(GENRES), fs)
        # released `independent.py`: the segment distance of a pair, clipped to [0, max_training_segments
        # - 1], one embedding row per value, a fourth part of φ(i, j)
        self.segment_distance_embeddings = (
            nn.Embedding(c.max_training_segments, fs) if c.use_segment_distance else None
        )
        n_features = 4 if c.use_segment_distance else 3
        self.pair_scorer = _ffnn(3 * d + n_features * fs, c.ffnn_size, c.ffnn_depth, 1, c.dropout)
        # f = σ(W [g_i, a_i]) (Lee et al. 2018, eq. 5); only with a second round: a parameter outside
        # the graph would stop DDP ("parameters that were not used in producing loss")
        self.refine_gate = nn.Linear(2 * d, d) if c.coref_depth > 1 else None
        if c.gradient_checkpointing:
            self.bert.set_gradient_checkpointing(True)

    # -------------------------------------------------------------- span representations
    def _head_logits(self, x: Tensor) -> Tensor:
        """α_t = w · x_t in float64, (N,): the head-attention logits of the tokens."""
        return self.head_attention(x).squeeze(-1).double()  # (N,)

    @staticmethod
    def _span_mean(values: Tensor, alpha: Tensor, starts: Tensor, ends: Tensor) -> Tensor:
        """Σ_{t in span} softmax(α)_t v_t for every span: (N, E) -> (C, E), exact at any logit gap.

        Fast path: prefix sums of exp(α - max α)·v in float64, O(N·E) memory instead of the
        reference's (C, 30, E) gather. A prefix-sum difference loses the digits of everything before
        the span: its relative error is about ε64 · κ with κ = Σ_{t<=end} e^α / Σ_{t in span} e^α,
        and e^(α - max α) underflows for a span far below the maximum. Both are measured per span
        exactly in log space (a masked logsumexp over the (C, L) window of the span's logits and a
        logcumsumexp), and the spans where the prefix sums cannot be trusted (κ > e^9, or the span's
        mass below e^-600 of the maximum) take the direct softmax over their window instead. In
        trained models such spans are rare, so the memory stays O(N·E + C·L).
        """
        n, c = alpha.shape[0], starts.shape[0]
        if c == 0:
            return values.new_zeros(0, values.shape[-1])
        width = int((ends - starts).max()) + 1
        offsets = torch.arange(width, device=starts.device)
        window = (starts[:, None] + offsets[None, :]).clamp(max=n - 1)  # (C, L)
        inside = offsets[None, :] <= (ends - starts)[:, None]  # (C, L)
        top = alpha.max().detach()
        with torch.no_grad():
            lse = torch.logsumexp(alpha[window].masked_fill(~inside, float("-inf")), 1)  # (C,) log Σ_span e^α
            kappa = torch.logcumsumexp(alpha, 0)[ends] - lse  # (C,) log κ >= 0
            exact = (kappa > 9.0) | (lse - top < -600.0)  # (C,)
        w = torch.exp(alpha - top)  # (N,) in (0, 1]
        num = F.pad(torch.cumsum(w[:, None] * values.double(), 0), (0, 0, 1, 0))  # (N+1, E)
        den = F.pad(torch.cumsum(w, 0), (1, 0))  # (N+1,)
        # the spans taken exactly get denominator 1 here, so their unused rows stay finite (no NaN
        # gradients through the branch that is not selected)
        den_span = torch.where(exact, torch.ones_like(lse), den[ends + 1] - den[starts])  # (C,)
        out = (num[ends + 1] - num[starts]) / den_span.clamp(min=1e-300)[:, None]  # (C, E)
        idx = torch.nonzero(exact).squeeze(1)  # (U,)
        if idx.numel():
            p = alpha[window[idx]].masked_fill(~inside[idx], float("-inf")).softmax(1)  # (U, L)
            direct = torch.einsum("ul,ule->ue", p, values.double()[window[idx]])  # (U, E)
            out = out.index_put((idx,), direct)
        return out.to(values.dtype)

    def span_embeddings(self, x: Tensor, starts: Tensor, ends: Tensor, width_table: Tensor | None = None) -> Tensor:
        """g = [x_start, x_end, Σ softmax(α)·x over the span, width embedding]: (C, D)."""
        width_table = self.span_width_embeddings.weight if width_table is None else width_table
        head = self._span_mean(x, self._head_logits(x), starts, ends)  # (C, H)
        return torch.cat([x[starts], x[ends], head, width_table[ends - starts]], -1)  # (C, D)

    def mention_scores(self, x: Tensor, starts: Tensor, ends: Tensor, width_table: Tensor) -> Tensor:
        """FFNN_m(g) for every candidate without building g: (C,).

        The first layer is linear, so W·g = W_s x_start + W_e x_end + Σ softmax(α)·(W_h x) + W_w φ(width):
        the token projections cost O(N·H·hidden) once, each candidate only O(hidden). Equal to
        ``mention_scorer(span_embeddings(...))`` (checked in the tests).
        """
        if self.config.ffnn_depth == 0:
            return self.mention_scorer(self.span_embeddings(x, starts, ends, width_table)).squeeze(-1)
        first: nn.Linear = self.mention_scorer[0]  # type: ignore[assignment]
        h_dim = x.shape[-1]
        w = first.weight  # (hidden, D)
        proj_s = x @ w[:, :h_dim].T  # (N, hidden)
        proj_e = x @ w[:, h_dim : 2 * h_dim].T
        proj_h = x @ w[:, 2 * h_dim : 3 * h_dim].T
        head = self._span_mean(proj_h, self._head_logits(x), starts, ends)  # (C, hidden)
        width = (width_table @ w[:, 3 * h_dim :].T)[ends - starts]  # (C, hidden)
        h = proj_s[starts] + proj_e[ends] + head + width + first.bias  # (C, hidden)
        return self.mention_scorer[1:](h).squeeze(-1)

    # -------------------------------------------------------------- pair scores
    def fine_scores(self, g: Tensor, antecedents: Tensor, phi: Tensor) -> Tensor:
        """FFNN([g_i, g_j, g_i∘g_j, φ(i,j)]) for the (k, K) pairs -> (k, K).

        The first layer is applied to the four parts separately (the same linear map), so the
        (k, K, 3D) concatenation is never built.
        """
        d = self.span_dim
        first: nn.Linear = self.pair_scorer[0] if self.config.ffnn_depth > 0 else None  # type: ignore[assignment]
        g_j = g[antecedents]  # (k, K, D)
        if first is None:
            return self.pair_scorer(torch.cat([g[:, None].expand_as(g_j), g_j, g[:, None] * g_j, phi], -1)).squeeze(-1)
        w = first.weight  # (hidden, 3D + 3F or 4F)
        h = (
            (g @ w[:, :d].T)[:, None]  # (k, 1, hidden)
            + (g @ w[:, d : 2 * d].T)[antecedents]  # (k, K, hidden)
            + (g[:, None] * g_j) @ w[:, 2 * d : 3 * d].T
            + phi @ w[:, 3 * d :].T
            + first.bias
        )
        return self.pair_scorer[1:](h).squeeze(-1)  # (k, K)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        token_index: Tensor,
        sentence_map: Tensor,
        speaker_ids: Tensor,
        genre: Tensor,
        span_starts: Tensor,
        span_ends: Tensor,
        gold_starts: Tensor | None = None,
        gold_ends: Tensor | None = None,
        gold_cluster_ids: Tensor | None = None,
    ) -> dict[str, Tensor]:
        c = self.config
        hidden = self.bert(input_ids, attention_mask=attention_mask)  # (S, T, H)
        x = self.token_dropout(hidden.reshape(-1, hidden.shape[-1])[token_index])  # (N, H)
        n = x.shape[0]
        starts, ends = span_starts, span_ends  # (C,)
        width_table = self.dropout(self.span_width_embeddings.weight)  # (W, F)
        mention = self.mention_scores(x, starts, ends, width_table)  # (C,)
        mention = mention + self.width_scorer(self.width_prior_embeddings.weight).squeeze(-1)[ends - starts]

        # Gold entity of each candidate (0 = not a mention): span (s, e) -> id via a (N, N)-free hash.
        training = gold_starts is not None
        cand_cluster = torch.zeros_like(starts)
        if training and gold_starts.numel():
            cand_key = starts * n + ends  # (C,)
            gold_key = gold_starts * n + gold_ends  # (M,)
            match = cand_key[:, None] == gold_key[None, :]  # (C, M)
            cand_cluster = (match.long() * gold_cluster_ids[None, :]).max(1).values

        # Prune to λT spans, no two crossing (§4.1; Lee et al. 2017)
        k = max(1, min(int(math.floor(n * c.top_span_ratio)), c.max_top_spans, starts.numel()))
        top = prune_non_crossing(mention.detach(), starts, ends, k)  # (k,)
        k = top.numel()
        top_starts, top_ends, m = starts[top], ends[top], mention[top]  # (k,)
        g = self.span_embeddings(x, top_starts, top_ends, width_table)  # (k, D), only for the kept spans
        top_cluster = cand_cluster[top]  # (k,)

        # Coarse scores: bilinear + both mention scores + distance prior; only earlier spans.
        K = min(c.max_top_antecedents, k)
        offsets = torch.arange(k, device=g.device)[:, None] - torch.arange(k, device=g.device)[None, :]  # (k, k)
        valid = offsets >= 1
        # dropout on both sides, as the released `get_fast_antecedent_scores`
        coarse = (self.dropout(self.coarse_bilinear(g)) @ self.dropout(g).T) + m[:, None] + m[None, :]  # (k, k)
        prior = self.distance_prior(self.dropout(self.distance_prior_embeddings.weight)).squeeze(-1)  # (10,)
        coarse = coarse + prior[bucket_distance(offsets.clamp(min=0))]
        coarse = coarse.masked_fill(~valid, float("-inf"))
        coarse_top, antecedents = torch.topk(coarse, K, dim=1)  # (k, K)
        ante_mask = torch.isfinite(coarse_top)  # (k, K): early spans have fewer than K antecedents
        coarse_top = coarse_top.masked_fill(~ante_mask, -1e4)

        # φ(i, j): same speaker, genre, bucketed distance (, segment distance)
        speaker = speaker_ids[top_starts]  # (k,)
        same_speaker = (speaker[:, None] == speaker[antecedents]).long()  # (k, K)
        distance = bucket_distance(torch.arange(k, device=g.device)[:, None] - antecedents)  # (k, K)
        features = [
            self.speaker_embeddings(same_speaker),
            self.genre_embeddings(genre.view(1, 1)).expand(k, K, -1),
            self.distance_embeddings(distance),
        ]
        if self.segment_distance_embeddings is not None:
            seg = segment_distance(token_index, input_ids.shape[1], top_starts, antecedents, c.max_training_segments)
            features.append(self.segment_distance_embeddings(seg))
        phi = self.dropout(torch.cat(features, -1))  # (k, K, 3F or 4F)

        dummy = torch.zeros(k, 1, dtype=g.dtype, device=g.device)
        for depth in range(c.coref_depth):
            scores = coarse_top + self.fine_scores(g, antecedents, phi)  # (k, K)
            scores = torch.cat([dummy, scores], 1)  # (k, K+1)
            if depth + 1 < c.coref_depth:  # higher-order refinement (Lee et al. 2018 §3)
                p = scores.softmax(-1)  # (k, K+1); the dummy's share stays on g_i itself
                # a_i = p_ε g_i + Σ_j p_j g_j, as a (k, k) matrix product rather than a (k, K, D) gather
                attn = torch.zeros(k, k, dtype=p.dtype, device=p.device).scatter_add(1, antecedents, p[:, 1:])
                a = p[:, :1] * g + attn @ g  # (k, D)
                assert self.refine_gate is not None
                f = torch.sigmoid(self.refine_gate(torch.cat([g, a], -1)))
                g = f * a + (1 - f) * g

        out: dict[str, Tensor] = {
            "top_starts": top_starts,
            "top_ends": top_ends,
            "top_mention_scores": m,
            "antecedents": antecedents,
            "antecedent_scores": scores,
        }
        if training:
            # Marginal log-likelihood of all gold antecedents; the dummy is gold when there is none.
            same = (top_cluster[antecedents] == top_cluster[:, None]) & (top_cluster[:, None] > 0) & ante_mask
            gold = torch.cat([~same.any(1, keepdim=True), same], 1)  # (k, K+1)
            log_norm = torch.logsumexp(scores, 1)
            log_gold = torch.logsumexp(scores.masked_fill(~gold, float("-inf")), 1)
            coref_loss = (log_norm - log_gold).sum()
            out["coref_loss"] = coref_loss.detach()
            loss = coref_loss
            if self.predicts_singletons:
                # Mention detection loss on every candidate, so lone mentions can be output.
                mention_loss = F.binary_cross_entropy_with_logits(
                    mention, (cand_cluster > 0).to(mention.dtype), reduction="sum"
                )
                out["mention_loss"] = mention_loss.detach()
                loss = loss + mention_loss
            out["loss"] = loss
        return out

    @property
    def predicts_singletons(self) -> bool:
        return self.config.singletons == "true"


def decode_clusters(out: dict[str, Tensor], word_map: np.ndarray, singletons: bool) -> list[list[Span]]:
    """Link every kept span to its best antecedent (or none) and return word-span clusters.

    With ``singletons``, a kept span that is linked to nothing and has a positive mention score is an
    entity of its own (LitBank annotates singletons).
    """
    starts = out["top_starts"].cpu().numpy()
    ends = out["top_ends"].cpu().numpy()
    antecedents = out["antecedents"].cpu().numpy()
    best = out["antecedent_scores"].float().argmax(1).cpu().numpy() - 1  # -1 = dummy
    mention = out["top_mention_scores"].float().cpu().numpy()
    cluster_of: dict[int, int] = {}
    clusters: list[list[int]] = []
    for i in range(len(starts)):
        if best[i] < 0:
            continue
        j = int(antecedents[i, best[i]])
        if j not in cluster_of:
            cluster_of[j] = len(clusters)
            clusters.append([j])
        cluster_of[i] = cluster_of[j]
        clusters[cluster_of[i]].append(i)
    if singletons:
        for i in range(len(starts)):
            if i not in cluster_of and mention[i] > 0:
                cluster_of[i] = len(clusters)
                clusters.append([i])
    out_clusters = []
    for cl in clusters:
        spans = sorted({(int(word_map[starts[i]]), int(word_map[ends[i]])) for i in cl})
        out_clusters.append(spans)
    return sorted(out_clusters)


# =============================================================================================
# Prediction


_WORD = re.compile(r"\w+(?:[-'’]\w+)*|[^\w\s]")
_SENTENCE_END = {".", "!", "?"}
_ABBREVIATIONS = {"Mr", "Mrs", "Ms", "Dr", "St", "Prof", "Sr", "Jr", "Mt", "Capt", "Col", "Gen", "Lt", "Rev", "vs"}


def split_text(text: str) -> tuple[list[list[str]], list[tuple[int, int]]]:
    """Raw text -> sentences of words and each word's character [start, end): words are runs of
    letters/digits (with inner hyphens and apostrophes) or single punctuation marks; a sentence ends
    after '.', '!' or '?' (not the '.' of a title such as "Mr.")."""
    sentences: list[list[str]] = [[]]
    offsets = []
    for m in _WORD.finditer(text):
        previous = sentences[-1][-1] if sentences[-1] else ""
        sentences[-1].append(m.group())
        offsets.append((m.start(), m.end()))
        if m.group() in _SENTENCE_END and not (m.group() == "." and previous in _ABBREVIATIONS):
            sentences.append([])
    return [s for s in sentences if s], offsets


class CorefPredictor:
    """A fine-tuned coreference model ready to resolve documents or raw text.

    >>> predictor = CorefPredictor.from_pretrained("runs/coref")          # doctest: +SKIP
    >>> predictor.predict_text("Alice said she would come.")               # doctest: +SKIP
    [[{'start': 0, 'end': 5, 'text': 'Alice'}, {'start': 11, 'end': 14, 'text': 'she'}]]
    """

    def __init__(self, model: CorefModel, tokenizer: Any, device: str | torch.device = "auto"):
        self.model = model
        self.tokenizer = tokenizer
        self.device = device if isinstance(device, torch.device) else resolve_device(device)
        self.model.to(self.device).eval()

    @classmethod
    def from_pretrained(cls, model_dir: str | Path, device: str = "auto") -> CorefPredictor:
        model, tokenizer = load_coref_model(model_dir)
        return cls(model, tokenizer, device)

    def predict_features(self, f: CorefFeatures) -> list[list[Span]]:
        """Clusters (word spans) of one featurized document; all its segments are used at once."""
        threads.tick()  # a document is the unit of work: the thread count follows the load between them
        tok = self.tokenizer
        if f.num_subtokens == 0:
            return []
        batch = make_batch(f, 0, len(f.segments), self.model.config.max_span_width, tok.pad_id, tok.cls_id, tok.sep_id)
        batch = {k: v.to(self.device) for k, v in batch.items() if not k.startswith("gold_")}
        with torch.no_grad():
            out = self.model(**batch)
        return decode_clusters(out, f.word_map, self.model.predicts_singletons)

    def predict_documents(self, docs: Sequence[CorefDocument], progress: bool = True) -> list[list[list[Span]]]:
        out = []
        for doc in progress_bar(docs, desc="predict", unit="doc", disable=not progress or not is_main(), leave=False):
            out.append(self.predict_features(featurize(doc, self.tokenizer, self.model.config.max_seq_length)))
        return out

    def predict_text(self, text: str) -> list[list[dict[str, Any]]]:
        """Clusters of mentions in raw text, each mention ``{"start", "end", "text"}`` with character
        offsets into ``text`` (end exclusive)."""
        sentences, offsets = split_text(text)
        if not sentences:
            return []
        doc = CorefDocument(key="text", part=0, sentences=sentences)
        clusters = self.predict_documents([doc], progress=False)[0]
        out = []
        for cluster in clusters:
            mentions = []
            for s, e in cluster:
                a, b = offsets[s][0], offsets[e][1]
                mentions.append({"start": a, "end": b, "text": text[a:b]})
            out.append(mentions)
        return out


def resolve_text(text: str, model_dir: str | Path) -> list[list[dict[str, Any]]]:
    """Raw text in, clusters with character offsets out (loads the model each call; keep a
    `CorefPredictor` for repeated use)."""
    return CorefPredictor.from_pretrained(model_dir).predict_text(text)


# =============================================================================================
# Saving, loading, fine-tuning

ARCHITECTURE = "SpanBertForCoreference"
"""The BERT family's coreference model; another family's is its prefix + ``ForCoreference``."""
NEEDS = "a coreference model (spanbert finetune coref)"


_BERT_ARCHITECTURE = "BertForCoreference"
"""What `families.architecture` calls a BERT encoder's coreference model: such folders are written, as they
always were, under the released model's name `ARCHITECTURE`."""


def _architectures() -> tuple[str, ...]:
    return (ARCHITECTURE, *(a for a in families.architectures("ForCoreference") if a != _BERT_ARCHITECTURE))


def save_coref_model(model: CorefModel, output_dir: str | Path, tokenizer: Any) -> None:
    name = families.architecture(model.bert, "ForCoreference")
    name = ARCHITECTURE if name == _BERT_ARCHITECTURE else name
    save_finetuned(
        model, output_dir, tokenizer, name, {"spanbert": {"task": "coref", "coref": asdict(model.config)}}
    )


def check_model(model_dir: str | Path) -> None:
    """Refuse, before any data is read, a folder that holds no coreference model."""
    families.check_task_folder(model_dir, _architectures(), NEEDS)


def load_coref_model(model_dir: str | Path) -> tuple[CorefModel, Any]:
    """A model saved by `save_coref_model` (``spanbert finetune coref``, any family), in eval mode, and its
    tokenizer framed for its family."""
    check_model(model_dir)
    config_json, state, tokenizer = load_finetuned(model_dir)
    settings = config_json.get("spanbert", {}).get("coref")
    if settings is None:
        raise SpanBertError(
            f"{model_dir}: not a coreference model (config.json has no spanbert.coref settings); "
            f"fine-tune one with `spanbert finetune coref`"
        )
    # models saved before these settings existed were built without them: keep what they were
    settings = {
        "use_segment_distance": False,
        "token_dropout": settings.get("dropout", 0.0),
        "max_top_spans": 2**31 - 1,
        **settings,
    }
    config = CorefConfig(**{k: v for k, v in settings.items() if k in CorefConfig.__dataclass_fields__})
    encoder = families.encoder_from_config(config_json, add_pooling_layer=False, source=str(Path(model_dir) / "config.json"))
    model = CorefModel(None, config, encoder=encoder)
    if model.refine_gate is None:  # saved before depth 1 stopped building the unused gate
        state = {k: v for k, v in state.items() if not k.startswith("refine_gate.")}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise SpanBertError(
            f"{model_dir}: weights do not match the coreference model: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    return model.eval(), tokenizer  # eval mode, as transformers' from_pretrained


def evaluate_clusters(
    docs: Sequence[CorefDocument], predictions: Sequence[Sequence[Sequence[Span]]]
) -> dict[str, float]:
    return evaluate_documents([d.clusters for d in docs], predictions)


# Appendix B: one document per step, task layers 2e-4 (a point of the grid {1e-4, 2e-4, 3e-4}; the encoder's
# 1e-5 is in CorefConfig), 20 epochs; 10% warm-up as the released code. The model of the best dev CoNLL F1
# is kept, evaluated about as often as the released run (every 1,000 of OntoNotes' 2,802 documents).
DEFAULTS: dict[str, Any] = dict(
    output_dir="runs/coref",
    learning_rate=2e-4,
    per_device_train_batch_size=1,
    num_train_epochs=20.0,
    warmup_ratio=0.1,
    logging_steps=10,
    save_steps=500,
    evals_per_epoch=3,
    metric_for_best_model="conll_f1",
)

# The released SpanBERT coreference runs (mandarjoshi90/coref `experiments.conf` sections spanbert_base and
# spanbert_large, over its `best` section; `optimization.py`; `train.py`): settings of `TrainingArguments`
# ("training") and `CorefConfig` ("coref"). `spanbert finetune coref --preset NAME`; flags and --config win.
_RELEASED_TRAINING: dict[str, Any] = dict(
    num_train_epochs=20.0,  # num_epochs = 20
    per_device_train_batch_size=1,  # single_example = true: one document per step
    warmup_ratio=0.1,  # num_warmup_steps = 0.1 * num_train_steps (optimization.py)
    lr_scheduler_type="linear",  # polynomial_decay(power=1.0) to 0
    adam_epsilon=1e-6,  # adam_eps = 1e-6
    weight_decay=0.01,  # AdamWeightDecayOptimizer(weight_decay_rate=0.01), not LayerNorm / bias
    max_grad_norm=1.0,  # clip_by_global_norm(clip_norm=1.0), encoder and task layers apart
    eval_steps=1000,  # eval_frequency = 1000
    evals_per_epoch=0,
    metric_for_best_model="conll_f1",  # model.max.ckpt = the best dev F1 (train.py)
    greater_is_better=True,
)
_RELEASED_MODEL: dict[str, Any] = dict(
    max_training_segments=3,  # max_training_sentences = 3
    max_span_width=30,
    top_span_ratio=0.4,
    max_top_spans=3900,  # k = min(3900, floor(num_words * top_span_ratio))
    max_top_antecedents=50,
    ffnn_size=3000,
    ffnn_depth=1,
    feature_size=20,
    dropout=0.3,  # dropout_rate
    token_dropout=0.0,  # no dropout on the encoder output in independent.py
    coref_depth=2,
    use_segment_distance=True,
    task_weight_decay=0.0,  # task_optimizer = adam (tf.train.AdamOptimizer, no decay)
    separate_clipping=True,
)
COREF_PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "spanbert_base": {
        "training": {**_RELEASED_TRAINING, "learning_rate": 1e-4},  # task_learning_rate = 0.0001
        "coref": {**_RELEASED_MODEL, "max_seq_length": 384, "encoder_learning_rate": 2e-5},
    },
    "spanbert_large": {
        "training": {**_RELEASED_TRAINING, "learning_rate": 3e-4},  # task_learning_rate = 0.0003
        "coref": {**_RELEASED_MODEL, "max_seq_length": 512, "encoder_learning_rate": 1e-5},
    },
}


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


def finetune_coref(
    model_dir: str | Path,
    train_path: str | Path,
    dev_path: str | Path | None,
    targs: Any,
    config: CorefConfig,
    tokenizer_dir: str | Path | None = None,
    max_eval_examples: int | None = None,
) -> dict[str, Any]:
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
        targs.num_train_epochs * trainer.steps_per_epoch(len(dataset), targs.gradient_accumulation_steps * world, world)
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


# =============================================================================================
# Command line


def _add_coref_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("coreference model")
    add_dataclass_arguments(group, CorefConfig, defaults={"max_seq_length": "unset, following the encoder"})


def _finetune(task: str, argv: list[str], prog: str) -> Results:
    """``spanbert finetune coref ...``: one run (no --sweep), the released presets under the options."""
    parser = task_parser(prog, __doc__)
    parser.add_argument(
        "--train", required=True, help="CoNLL-2012 file or folder of *.conll[.gz] files to train on"
    )
    parser.add_argument(
        "--dev",
        help="CoNLL-2012 file or folder scored during training (every --eval_steps, or --evals_per_epoch times "
        "an epoch) and at the end; the model of the best --metric_for_best_model (conll_f1) is kept",
    )
    parser.add_argument(
        "--preset",
        choices=sorted(COREF_PRESETS),
        help="the released SpanBERT coreference settings (mandarjoshi90/coref experiments.conf): spanbert_base "
        "(segments 384, encoder 2e-5, task 1e-4) or spanbert_large (512, 1e-5, 3e-4), with Adam eps 1e-6, "
        "dev evaluation every 1000 steps, ...; options given on the command line or in --config win",
    )
    parser.add_argument("--max_eval_examples", type=int, help="use only the first N dev documents")
    _add_coref_arguments(parser)
    add_finetune_arguments(parser, DEFAULTS)
    args = parse_task_args(parser, argv, configs=(CorefConfig,))  # --config YAML, strict
    preset = COREF_PRESETS[args.preset] if args.preset else {"training": {}, "coref": {}}
    if args.sweep:
        raise SpanBertError(
            "--sweep runs the Appendix B grid of the classification/QA tasks; for coreference set "
            "--learning_rate (task layers, 1e-4 ... 3e-4) and --encoder_learning_rate (1e-5 / 2e-5) instead"
        )
    overrides = list(args.overrides or [])
    coref_keys = set(CorefConfig.__dataclass_fields__)
    kv = parse_key_values(overrides)
    args.overrides = [o for o, k in zip(overrides, kv) if k not in coref_keys]
    # defaults < preset < --config YAML < --flags < key=value
    targs = common.training_arguments(args, {**DEFAULTS, **preset["training"]})
    config = dataclass_from_args(
        CorefConfig, args, defaults=preset["coref"],
        overrides=[o for o, k in zip(overrides, kv) if k in coref_keys],
    )  # fmt: skip
    # the output contract (apart from every input), the segment length against the encoder's positions, then
    # the folder held for the whole command: all before a document is read
    check_output_dir(targs, input_paths(args))
    if config.max_seq_length is not None:
        check_sequence_length(args.model, config.max_seq_length)
    start_distributed(targs.device)
    with claim_run_dir(targs.output_dir, prog):
        summary = finetune_coref(args.model, args.train, args.dev, targs, config, args.tokenizer, args.max_eval_examples)
    step = summary.get("selected_step")
    return Results(summary, "conll_f1", int(step) if step is not None else None, Path(targs.output_dir))


def _predict(task: str, argv: list[str], prog: str) -> Path | None:
    """``spanbert predict coref (--data CONLL --output OUT | --text TEXT)``: the file written (None for a
    --text, whose clusters are printed)."""
    parser = task_parser(prog, __doc__)
    parser.add_argument("--model", required=True, help="folder of a model saved by `spanbert finetune coref`")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", help="CoNLL-2012 file or folder to resolve")
    source.add_argument("--text", help="raw text: prints its clusters as JSON with character offsets")
    parser.add_argument("--output", type=output_file, help="CoNLL-2012 file to write (with --data)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (default: auto)")
    add_switch(parser, "--disable_tqdm", help="hide the progress bar")
    threads.add_option(parser)
    args = parser.parse_args(argv)
    if args.data is not None and not args.output:
        parser.error("--output OUT.conll is required with --data")
    if args.text is not None:
        args.text = utf8_argument(args.text, "--text")
    device = start_distributed(args.device)
    docs = read_documents(args.data) if args.data is not None else []  # bad data fails before loading
    predictor = CorefPredictor.from_pretrained(args.model, device=str(device))
    if args.text is not None:
        print0(json.dumps({"clusters": predictor.predict_text(args.text)}, indent=2, ensure_ascii=False))
        return None
    t0 = time.perf_counter()
    # each rank resolves its share of the documents; rank 0 writes them all
    predictions = predict_sharded(
        len(docs), lambda idx: predictor.predict_documents([docs[i] for i in idx], not args.disable_tqdm)
    )
    seconds = time.perf_counter() - t0
    write_once(lambda: write_conll(args.output, docs, predictions))
    eprint0(f"wrote {len(docs)} documents to {args.output} ({len(docs) / seconds:.2f} documents/s)")
    if any(d.clusters for d in docs):
        print_metrics(evaluate_clusters(docs, predictions))
    return Path(args.output)


def _evaluate(task: str, argv: list[str], prog: str) -> Results:
    """``spanbert evaluate coref --gold KEY --predictions RESPONSE``: MUC, B3, CEAF-e and their mean."""
    parser = task_parser(prog, __doc__)
    parser.add_argument("--gold", required=True, help="gold CoNLL-2012 file or folder (the key)")
    parser.add_argument(
        "--predictions", required=True, help="CoNLL-2012 file written by `spanbert predict coref` (the response)"
    )
    args = parser.parse_args(argv)
    return Results(evaluate_files(args.gold, args.predictions), "conll_f1")


def _score_model(model: str, data: str, options: dict[str, Any]) -> Results:
    """A fine-tuned model scored on gold documents: resolved into the model folder, then scored."""
    predictions = api.predict("coref", model=model, data=data, output=Path(model) / "heldout.conll",
                              disable_tqdm=True, **options)  # fmt: skip
    return Results(evaluate_files(data, predictions), "conll_f1")


# LitBank's ten-fold split (Bamman et al. 2020): tenfold_splits/K/{train,dev,test}.ids name the documents of
# fold K, each a conll/NAME.conll.gz file


def _is_litbank(source: str) -> bool:
    return Path(source).is_dir()


def _holds_litbank_folds(source: str) -> bool:
    return (Path(source) / "tenfold_splits").is_dir()


def prepare_litbank_fold(source: str, fold: int, folder: Path) -> None:
    """train.conll, dev.conll and test.conll of fold ``fold`` of the LitBank folder ``source``."""
    root = Path(source)
    for split in ("train", "dev", "test"):
        ids = (root / "tenfold_splits" / str(fold) / f"{split}.ids").read_text().split()
        files = [root / "conll" / i.replace(".tsv", ".conll.gz") for i in ids]
        write_conll(folder / f"{split}.conll", [d for f in files for d in read_conll(f)])


LITBANK_FOLDS = Folds(
    name="litbank",
    count=10,
    source="the LitBank folder (with tenfold_splits/)",
    applies=_is_litbank,
    holds_folds=_holds_litbank_folds,
    prepare=prepare_litbank_fold,
    files=lambda folder: (folder / "train.conll", folder / "dev.conll", folder / "test.conll"),
)


def evaluate_files(gold: str | Path, predictions: str | Path) -> dict[str, float]:
    """Score a response file against a key file, matching documents by (key, part); every key
    document must be in the response (extra response documents are an error too)."""
    key_docs = read_documents(gold)
    resp = {d.doc_id: d for d in read_documents(predictions)}
    missing = [d.doc_id for d in key_docs if d.doc_id not in resp]
    if missing:
        raise SpanBertError(
            f"{predictions}: found no prediction for {len(missing)} gold document(s), e.g. {missing[:3]}; expected "
            f"every document of {gold}"
        )
    extra = set(resp) - {d.doc_id for d in key_docs}
    if extra:
        raise SpanBertError(
            f"{predictions}: found {len(extra)} document(s) not in {gold}, e.g. {sorted(extra)[:3]}; expected only "
            f"the gold documents"
        )
    for d in key_docs:
        r = resp[d.doc_id]
        if r.num_words != d.num_words:
            raise SpanBertError(
                f"{r.source}: found {r.num_words} words in document {d.doc_id!r}; expected {d.num_words}, as the "
                f"gold one ({d.source})"
            )
    scores = evaluate_clusters(key_docs, [resp[d.doc_id].clusters for d in key_docs])
    scores["documents"] = len(key_docs)
    return scores


SPECS = {
    "coref": TaskSpec(
        name="coref",
        description="coreference resolution, CoNLL-2012 format",
        finetune=_finetune,
        predict=_predict,
        evaluate=_evaluate,
        metric="conll_f1",
        data="CoNLL-2012 files or folders of *.conll[.gz] (OntoNotes, LitBank)",
        configs=(("spanbert.tasks.coref", "CorefConfig"),),
        dev_split=RecordSplit(".conll", "conll-documents"),
        data_options=lambda train, dev: {"train": train, "dev": dev},
        score_model=_score_model,
        folds=LITBANK_FOLDS,
    )
}
