"""`spanbert preprocess`: a text corpus -> the memory-mapped token arrays of `spanbert.corpus`.

`preprocess` streams a text corpus through the WordPiece tokenizer in worker processes and writes, per
shard, flat binary arrays that are memory-mapped at training time (the folder's layout is in
`spanbert.corpus`). With ``static`` (``--dupe_factor N``) it also stores N masked copies of the
examples (`write_static_masks`, Google BERT's static masking, `spanbert.static_masks`). The whole
directory appears atomically (`atomic_dir`). Also here: `builtin_corpus`, the quick-start corpus, and
the command line (`main`).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import importlib
import json
import multiprocessing as mp
import os
import pkgutil
import re
import shutil
import struct
import sys
import threading
import time
import warnings
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from pydoc_data.topics import topics
from typing import Any

import numpy as np

from spanbert import folders, vocab_match
from spanbert.block_index import held_out_split
from spanbert.blocks import BLOCK_PACKINGS
from spanbert.config import ArgumentParser, add_dataclass_arguments, dataclass_from_args, field_docs
from spanbert.corpus import CANDIDATE_KINDS, FORMAT, STATIC_FORMAT, WORD_STARTS, TokenCorpus
from spanbert.corpus_parts import build_parts, default_parts_dir, merge
from spanbert.dataset import PretrainDataset
from spanbert.distributed import eprint0, print0
from spanbert.errors import DataError, SpanBertError
from spanbert.masking import IGNORE_INDEX, SCHEMES, MaskingConfig, add_replace_probs_arguments
from spanbert.static_masks import StaticMaskingConfig, static_mask_sets, static_settings
from spanbert.tokenization import (
    MAX_LINE_BYTES,
    Tokenizer,
    corpus_files,
    cut_before_space,
    is_jsonl,
    iter_lines,
    load_tokenizer,
    parse_jsonl_text,
)
from spanbert.utils import atomic_dir, atomic_write, check_output, close_inherited_sockets, input_paths, progress_bar

# spaCy entity labels that are numbers, not names (§6.1 "non-numerical named entity mentions").
NUMERIC_ENTITY_LABELS = frozenset({"DATE", "TIME", "PERCENT", "MONEY", "QUANTITY", "ORDINAL", "CARDINAL"})


# =============================================================================================
# Reading the corpus


@dataclass
class _Doc:
    paragraphs: list[str]
    path: str
    line: int
    continues: bool = False
    """This part goes on with the document of the part before it (a document longer than
    ``part_chars`` comes in parts; `_ShardWriter` joins them again)."""


def iter_documents(
    files: Sequence[Path],
    one_doc_per_line: bool = False,
    max_line_bytes: int | None = None,
    part_chars: int | None = None,
) -> Iterator[_Doc]:
    """Documents of the corpus in file order.

    Plain text: a blank line separates documents, each non-blank line is a paragraph (or every
    non-blank line is a document with ``one_doc_per_line``). ``.jsonl``: one JSON object per line with a
    string field ``text`` (its lines are the paragraphs). Files may be gzipped.

    Memory stays bounded however long a line or a document is: with ``max_line_bytes`` a longer line
    becomes several lines (paragraphs of its document) of at most that many bytes, each cut before a
    space or tab (`iter_lines`, `cut_before_space`), so they tokenize as the whole line does; a
    one-time ``warning:`` on stderr names the first such line. A JSONL record is read whole, then its
    longer paragraphs are cut the same way. With ``part_chars`` a document longer than that comes in
    parts of about that many characters (`_Doc.continues`).
    """
    warned = False

    def warn(path: Path, lineno: int) -> None:
        nonlocal warned
        if not warned:
            warned = True
            print(
                f"warning: {path}:{lineno}: found a line of more than {max_line_bytes:,} bytes, expected shorter "
                f"lines; it is split before a space into lines of at most {max_line_bytes:,} bytes (paragraphs of "
                "its document; --max_line_bytes sets the bound), and so is every later long line, without another "
                "warning",
                file=sys.stderr,
            )

    for path in files:
        if is_jsonl(path):
            for lineno, line in iter_lines(path):
                if not line.strip():
                    continue
                text = parse_jsonl_text(path, lineno, line)
                paras = [p for p in text.split("\n") if p.strip()]
                if max_line_bytes is not None:
                    pieces = [q for p in paras for q in _pieces(p, max_line_bytes)]
                    if pieces != paras:
                        warn(path, lineno)
                    paras = pieces
                for k, part in enumerate(_parts(paras, part_chars)):
                    yield _Doc(part, str(path), lineno, continues=k > 0)
            continue
        paras: list[str] = []
        first = size = prev = 0
        continues = False
        for lineno, line in iter_lines(path, max_line_bytes):
            piece = lineno == prev  # the next piece of a line longer than max_line_bytes
            prev = lineno
            if piece:
                warn(path, lineno)
            if not line.strip():
                if paras:
                    yield _Doc(paras, str(path), first, continues)
                paras, size, continues = [], 0, False
                continue
            if one_doc_per_line:
                yield _Doc([line], str(path), lineno, continues=piece)
                continue
            if not paras:
                first = lineno
            paras.append(line)
            size += len(line)
            if part_chars is not None and size >= part_chars:
                yield _Doc(paras, str(path), first, continues)
                paras, size, continues = [], 0, True
        if paras:
            yield _Doc(paras, str(path), first, continues)


def _pieces(text: str, max_bytes: int) -> list[str]:
    """``text`` cut as `iter_lines` cuts a line of more than ``max_bytes`` bytes (pieces of at most that
    many, before a space or tab, the blank ones left out); ``[text]`` when it is not longer."""
    if len(text) * 4 <= max_bytes:  # a character is at most 4 bytes: short enough, no need to encode
        return [text]
    raw = text.encode("utf-8", "surrogatepass")  # JSON may hold a lone surrogate; the tokenizer decides
    limit = max(max_bytes, 4)  # as `iter_lines`: a piece holds at least one whole character
    if len(raw) <= limit:
        return [text]
    out, start = [], 0
    while len(raw) - start > limit:
        cut = cut_before_space(raw, limit, start)
        out.append(raw[start:cut].decode("utf-8", "surrogatepass"))
        start = cut
    out.append(raw[start:].decode("utf-8", "surrogatepass"))
    return [q for q in out if q.strip()]


def _parts(paras: list[str], part_chars: int | None) -> Iterator[list[str]]:
    """``paras`` in consecutive groups of about ``part_chars`` characters (all of them when None)."""
    if part_chars is None:
        if paras:
            yield paras
        return
    part: list[str] = []
    size = 0
    for p in paras:
        part.append(p)
        size += len(p)
        if size >= part_chars:
            yield part
            part, size = [], 0
    if part:
        yield part


def _chunks(docs: Iterable[_Doc], chunk_chars: int) -> Iterator[list[_Doc]]:
    """Group documents into chunks of about ``chunk_chars`` characters (the unit of work of a worker).

    Chunking depends only on the corpus, never on the worker count, so any worker count gives the
    same arrays.
    """
    chunk: list[_Doc] = []
    size = 0
    for doc in docs:
        chunk.append(doc)
        size += sum(len(p) for p in doc.paragraphs)
        if size >= chunk_chars:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


# =============================================================================================
# Tokenizing a chunk (runs in the worker processes)

_WORKER: dict[str, Any] = {}


def _init_worker(tokenizer_dir: str, candidate_kinds: tuple[str, ...], spacy_model: str, threads: bool) -> None:
    if not threads:
        # N worker processes on N cores: HF tokenizers' own thread pool would oversubscribe them.
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        close_inherited_sockets()  # forked from a torchrun rank: its gloo connections are not ours
        _leave_with_parent()
    _WORKER["tok"] = load_tokenizer(tokenizer_dir)
    _WORKER["kinds"] = candidate_kinds
    _WORKER["nlp"] = load_spacy(spacy_model) if candidate_kinds else None


def _leave_with_parent() -> None:
    """End this worker when the process that started it is gone (killed with -9, it cannot stop its pool):
    an orphaned worker would go on tokenizing and print a BrokenPipeError traceback when it hands in its chunk."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="leave-with-parent", daemon=True).start()


@dataclass
class _ChunkResult:
    ids: np.ndarray  # (n,) int32
    starts: np.ndarray  # (n,) bool
    doc_lens: np.ndarray  # (D,) tokens per document, 0 for one with none (the writer drops those)
    para_lens: np.ndarray  # (P,) tokens per (non-empty) paragraph
    candidates: dict[str, np.ndarray]  # kind -> (C, 2) inclusive spans, chunk coordinates
    chars: int
    continues: bool = False  # the first document goes on with the last one of the chunk before


def _tokenize_chunk(docs: list[tuple[list[str], str, int, bool]]) -> _ChunkResult:
    tok: Tokenizer = _WORKER["tok"]
    paras = [p for d in docs for p in d[0]]
    encs = tok.hf.encode_batch(paras, add_special_tokens=False)
    para_lens = np.fromiter((len(e.ids) for e in encs), dtype=np.int64, count=len(encs))
    ids = np.fromiter((i for e in encs for i in e.ids), dtype=np.int32, count=int(para_lens.sum()))
    starts = tok.word_starts_of(ids)
    # a paragraph's first token starts a word (byte-level BPE writes no leading space there)
    starts[(np.cumsum(para_lens) - para_lens)[para_lens > 0]] = True
    per_doc = np.array([len(d[0]) for d in docs], dtype=np.int64)
    # the parts of one document (`_Doc.continues`) count as one; the first may go on with the last
    # document of the chunk before, which `_ShardWriter.add` joins
    new_doc = np.array([not d[3] for d in docs], dtype=bool)
    new_doc[0] = True
    doc_of_part = np.cumsum(new_doc) - 1  # (parts,)
    doc_of_para = np.repeat(doc_of_part, per_doc)
    doc_lens = np.bincount(doc_of_para, weights=para_lens, minlength=int(doc_of_part[-1]) + 1).astype(np.int64)
    candidates: dict[str, np.ndarray] = {}
    if _WORKER["kinds"]:
        candidates = _find_candidates(_WORKER["nlp"], _WORKER["kinds"], paras, encs, para_lens, starts)
    # empty paragraphs (nothing left after normalisation) are dropped; empty documents by the writer
    return _ChunkResult(
        ids, starts, doc_lens, para_lens[para_lens > 0], candidates, sum(len(p) for p in paras), bool(docs[0][3])
    )


def load_spacy(model: str):
    """Load a spaCy pipeline for the named_entity / noun_phrase schemes, with an install hint if missing."""
    try:
        import spacy
    except ImportError:
        raise SpanBertError(
            "the named_entity and noun_phrase masking schemes need spaCy at preprocess time: "
            f"pip install 'spanbert[spacy]' && python -m spacy download {model}"
        ) from None
    try:
        return spacy.load(model, disable=["lemmatizer"])
    except OSError:
        raise SpanBertError(
            f"spaCy is installed but its English model {model!r} is not: python -m spacy download {model}"
        ) from None


def _find_candidates(nlp, kinds, paras, encs, para_lens, starts) -> dict[str, np.ndarray]:
    """§6.1: spaCy entity mentions (non-numeric) and noun chunks, as inclusive token spans of whole words."""
    out: dict[str, list[tuple[int, int]]] = {k: [] for k in kinds}
    base = np.concatenate([[0], np.cumsum(para_lens)])
    for p, doc in enumerate(nlp.pipe(paras, batch_size=64)):
        offs = np.asarray(encs[p].offsets, dtype=np.int64).reshape(-1, 2)  # (n_p, 2)
        if len(offs) == 0:
            continue
        groups = []
        if "entity" in kinds:
            groups.append(
                ("entity", [(e.start_char, e.end_char) for e in doc.ents if e.label_ not in NUMERIC_ENTITY_LABELS])
            )
        if "noun_phrase" in kinds:
            groups.append(("noun_phrase", [(c.start_char, c.end_char) for c in doc.noun_chunks]))
        for kind, char_spans in groups:
            for cs, ce in char_spans:
                s = int(np.searchsorted(offs[:, 1], cs, side="right"))  # first token ending after cs
                e = int(np.searchsorted(offs[:, 0], ce, side="left")) - 1  # last token starting before ce
                if s > e:
                    continue
                s, e = s + int(base[p]), e + int(base[p])
                # snap to whole words: back to the word start, forward to the end of the last word
                while s > base[p] and not starts[s]:
                    s -= 1
                while e + 1 < base[p + 1] and not starts[e + 1]:
                    e += 1
                out[kind].append((s, e))
    return {k: np.asarray(v, dtype=np.int32).reshape(-1, 2) for k, v in out.items()}


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask; the machine's count where that is unknown)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


# =============================================================================================
# Writing shards


class _ShardWriter:
    """Appends chunk results to flat binary files; memory holds only offsets, never tokens."""

    def __init__(self, root: Path, index: int, id_dtype: np.dtype, kinds: tuple[str, ...], table: np.ndarray | None = None):
        self.name = f"shard-{index:05d}"
        self.root = root
        self.id_dtype = id_dtype
        self.kinds = kinds
        # (V,) bool word-start flag of each id: while the shard's word starts are exactly table[ids], its
        # .starts file is dropped at the end (`corpus.WORD_STARTS`); None: always kept
        self.table = table
        self.from_ids = table is not None
        self.f_ids = open(root / f"{self.name}.ids", "wb")
        self.f_starts = open(root / f"{self.name}.starts", "wb")
        self.f_cand = {k: open(root / f"{self.name}.{k}", "wb") for k in kinds}
        self.doc_offsets = [np.zeros(1, np.int64)]
        self.para_offsets: list[np.ndarray] = []
        self.n_tokens = 0
        self.n_docs = 0
        self.max_id = -1  # recorded in meta.json: the corpus's ids are checked against a vocabulary without reading them
        self.n_cand = dict.fromkeys(kinds, 0)
        self.open_tokens = 0  # tokens so far of the document the last chunk ended in

    def add(self, r: _ChunkResult) -> None:
        self.f_ids.write(r.ids.astype(self.id_dtype).tobytes())
        if len(r.ids):
            self.max_id = max(self.max_id, int(r.ids.max()))
        self.f_starts.write(r.starts.astype(np.uint8).tobytes())
        if self.from_ids and not np.array_equal(self.table[r.ids], r.starts):
            self.from_ids = False  # a line's first token that the table calls a continuation (byte-level BPE)
        ends = self.n_tokens + np.cumsum(r.doc_lens)  # (D,) where each document of the chunk ends
        new = r.doc_lens > 0  # a document with no tokens (nothing left after normalisation) is dropped
        if r.continues and self.open_tokens > 0:  # the first document goes on with the last one written
            self.doc_offsets[-1][-1] = ends[0]
            new[0] = False
        if new.any():
            self.doc_offsets.append(ends[new])
        same = r.continues and len(r.doc_lens) == 1  # the chunk holds only a part of the open document
        self.open_tokens = int(r.doc_lens[-1]) + (self.open_tokens if same else 0)
        self.para_offsets.append(self.n_tokens + np.concatenate([[0], np.cumsum(r.para_lens)[:-1]]))
        for k in self.kinds:
            c = r.candidates.get(k, np.zeros((0, 2), np.int32)).astype(np.int64) + self.n_tokens
            self.f_cand[k].write(c.astype(np.int32).tobytes())
            self.n_cand[k] += len(c)
        self.n_tokens += len(r.ids)
        self.n_docs += int(new.sum())

    def close(self) -> dict[str, Any]:
        for f in [self.f_ids, self.f_starts, *self.f_cand.values()]:
            f.close()
        np.concatenate(self.doc_offsets).tofile(self.root / f"{self.name}.docs")
        paras = np.concatenate(self.para_offsets) if self.para_offsets else np.zeros(0, np.int64)
        paras.astype(np.int64).tofile(self.root / f"{self.name}.paras")
        entry = {
            "name": self.name,
            "num_tokens": self.n_tokens,
            "num_docs": self.n_docs,
            "num_paragraphs": int(len(paras)),
            "max_id": self.max_id,
            "num_candidates": self.n_cand,
        }
        if self.from_ids:  # derivable: 1 of the 3 bytes a token takes on disk saved, one memory map fewer
            (self.root / f"{self.name}.starts").unlink()
            entry["word_starts"] = "from_ids"
        return entry


@dataclass
class PreprocessConfig:
    """Options of `spanbert preprocess` (besides the corpus, the tokenizer and the output directory)."""

    one_doc_per_line: bool = False
    """Plain text has one document per line (default: a blank line separates documents, a line is a paragraph)."""
    num_workers: int = 0
    """Tokenizer processes; 0 = one per CPU core this process may use."""
    shard_tokens: int = 100_000_000
    """Start a new shard after this many tokens (at a document boundary)."""
    chunk_chars: int = 1_000_000
    """Characters of text per unit of work sent to a worker (a longer document is sent in parts)."""
    max_line_bytes: int = MAX_LINE_BYTES
    """A longer line is split, before a space, into lines of at most this many bytes (with a warning): memory stays flat whatever the line length."""
    candidates: str = ""
    """Candidate spans for the §6.1 schemes, comma-separated: entity, noun_phrase (needs spaCy); empty = none."""
    spacy_model: str = "en_core_web_sm"
    """spaCy English pipeline used for the candidate spans."""


def preprocess(
    corpus: str | os.PathLike | Sequence[str | os.PathLike],
    tokenizer: str | os.PathLike | Tokenizer,
    output_dir: str | os.PathLike,
    *,
    one_doc_per_line: bool = False,
    num_workers: int = 0,
    shard_tokens: int = 100_000_000,
    chunk_chars: int = 1_000_000,
    max_line_bytes: int = MAX_LINE_BYTES,
    candidates: Sequence[str] | str | None = (),
    spacy_model: str = "en_core_web_sm",
    progress: bool = True,
    static: StaticMaskingConfig | None = None,
    part: dict[str, Any] | None = None,
) -> Path:
    """Tokenize ``corpus`` (files or directories) into memory-mapped shards in ``output_dir``.

    Returns ``output_dir``. An earlier corpus there is replaced; a file or a folder of other files is
    refused before any work (`utils.check_output`). Memory stays flat: text is read in chunks, at most two chunks per worker
    are in flight, and tokens go straight to disk. Output appears only when complete. A line longer
    than ``max_line_bytes`` becomes several lines of at most that many bytes, cut before a space (a
    one-time ``warning:`` on stderr names the first), and a document longer than ``chunk_chars`` is
    tokenized in parts (`iter_documents`), so no line or document, however long, is held whole.
    ``static`` with ``dupe_factor`` > 0 also stores that many masked copies of the examples, per
    sequence length (`write_static_masks`; Google BERT's static masking), inside the same atomic folder.
    """
    files = corpus_files([corpus] if isinstance(corpus, (str, os.PathLike)) else corpus)
    # an earlier corpus is replaced whole (atomically); a file, or a folder of anything else, is refused
    output_dir = check_output(output_dir, folder=True, ours=lambda d: (d / "meta.json").is_file())
    if candidates is None:
        candidates = ()
    aliases = {"entities": "entity", "named_entity": "entity", "noun_phrases": "noun_phrase"}
    kinds = tuple(
        aliases.get(k.strip(), k.strip())
        for k in (candidates.split(",") if isinstance(candidates, str) else candidates)
        if k.strip()
    )
    for k in kinds:
        if k not in CANDIDATE_KINDS:
            raise SpanBertError(f"unknown candidate kind {k!r}; choose from: {', '.join(CANDIDATE_KINDS)}")
    if num_workers < 0:
        raise SpanBertError(f"--num_workers: found {num_workers}, expected 0 (one per CPU core) or more")
    if chunk_chars < 1:
        raise SpanBertError(f"chunk_chars: found {chunk_chars}, expected at least 1")
    if max_line_bytes < 1:
        raise SpanBertError(f"--max_line_bytes: found {max_line_bytes}, expected at least 1")
    if not 0 < shard_tokens <= 2**30:  # candidate spans are stored as int32 offsets inside a shard
        raise SpanBertError(f"shard_tokens={shard_tokens}; expected 1 .. {2**30}")
    if static is not None:
        static.check(kinds)  # before any work
    if kinds:
        load_spacy(spacy_model)  # fail now, with the install hint, not in a worker
    tok = tokenizer if isinstance(tokenizer, Tokenizer) else load_tokenizer(tokenizer)
    if not isinstance(tokenizer, Tokenizer):  # a vocabulary that leaves most of the text [UNK]: before any work
        unk, total = vocab_match.unknown_share(tok, vocab_match.text_sample(files))
        warning = vocab_match.check_coverage(unk, total, "--tokenizer", str(tokenizer), "a sample of the corpus")
        if warning:
            eprint0(warning)
    if num_workers <= 0:
        num_workers = usable_cores()  # the main process feeds ~20 workers: no fixed cap below that
    id_dtype = np.dtype(np.uint16 if tok.vocab_size <= 65536 else np.int32)
    with atomic_dir(output_dir) as tmp:
        tok.save(tmp / "tokenizer")
        counts = np.zeros(tok.vocab_size, dtype=np.int64)
        shards: list[dict[str, Any]] = []
        table = tok.word_starts_of(np.arange(tok.vocab_size))  # (V,) bool
        writer = _ShardWriter(tmp, 0, id_dtype, kinds, table)
        docs = iter_documents(files, one_doc_per_line, max_line_bytes=max_line_bytes, part_chars=chunk_chars)
        chunk_iter = _chunks(docs, chunk_chars)
        bar = _progress_bar(progress, files)
        chars = 0
        t0 = time.perf_counter()
        try:
            for result in _map_chunks(chunk_iter, str(tmp / "tokenizer"), kinds, spacy_model, num_workers):
                if writer.n_tokens >= shard_tokens and not result.continues:  # documents never cross shards
                    shards.append(writer.close())
                    writer = _ShardWriter(tmp, len(shards), id_dtype, kinds, table)
                writer.add(result)
                counts += np.bincount(result.ids, minlength=tok.vocab_size)
                chars += result.chars
                if bar is not None:
                    bar.update(len(result.ids))
                    bar.set_postfix_str(f"{chars / 1e6:.1f}M chars", refresh=False)
        finally:
            if bar is not None:
                bar.close()
        shards.append(writer.close())
        n_tokens = sum(s["num_tokens"] for s in shards)
        if n_tokens == 0:
            raise DataError(
                ", ".join(map(str, files)), "empty corpus: no text to tokenize; expected at least one non-blank line"
            )
        np.save(tmp / "unigram.npy", counts)
        if any(s.get("word_starts") == "from_ids" for s in shards):
            np.save(tmp / WORD_STARTS, table.astype(np.uint8))
        meta = {
            "format": FORMAT,
            "num_tokens": n_tokens,
            "num_docs": sum(s["num_docs"] for s in shards),
            "vocab_size": tok.vocab_size,
            "vocab_fingerprint": vocab_match.tokenizer_fingerprint(tok),  # what a --tokenizer given later is checked against
            "id_dtype": id_dtype.name,
            "candidates": list(kinds),
            "one_doc_per_line": one_doc_per_line,
            "max_line_bytes": max_line_bytes,
            "sources": [str(p) for p in files],
            "seconds": round(time.perf_counter() - t0, 3),
            "shards": shards,
        }
        if part is not None:
            meta["part"] = part  # what this part of a corpus was made from (`spanbert.corpus_parts`)
        with atomic_write(tmp / "meta.json") as f:
            json.dump(meta, f, indent=2)
        if static is not None and static.dupe_factor > 0:
            meta["static_masks"] = _write_static_sets(TokenCorpus(tmp), static, progress)
            with atomic_write(tmp / "meta.json") as f:
                json.dump(meta, f, indent=2)
    return output_dir


def _write_static_sets(corpus: TokenCorpus, static: StaticMaskingConfig, progress: bool) -> list[dict[str, Any]]:
    """One `write_static_masks` set per length, over the documents a pre-training run with
    ``--eval_fraction static.eval_fraction`` trains on (the held-out documents are masked on the fly
    with a fixed mask, as always)."""
    nsp = static.mode == "nsp"
    min_docs = 2 if nsp else 1  # as spanbert pretrain's split (NSP's random next needs another document)
    split = corpus.num_docs
    if static.eval_fraction > 0:
        split = held_out_split(corpus, static.eval_fraction, min_docs, min_docs)
    if nsp and split < 2:
        raise SpanBertError("--dupe_factor with --mode nsp: found fewer than 2 training documents, expected 2 or more")
    return [
        write_static_masks(
            corpus,
            corpus.path / f"static-{int(length)}",
            dupe_factor=static.dupe_factor,
            max_seq_length=int(length),
            mode=static.mode,
            short_seq_prob=static.short_seq_prob,
            block_packing=static.block_packing,
            seed=static.masking_seed,
            masking=static.masking,
            documents=(0, split),
            progress=progress,
        )
        for length in sorted(set(static.max_seq_length))
    ]


def _progress_bar(enabled: bool, files: list[Path]):
    if not enabled:
        return None
    # the text's size, as the user counts it; a compressed corpus's size on disk beside it
    text, disk = sum(uncompressed_size(p) for p in files), sum(p.stat().st_size for p in files)
    size = f"{text / 1e6:.1f} MB" + (f" of text, {disk / 1e6:.1f} MB on disk" if text != disk else "")
    return progress_bar(unit="tok", unit_scale=True, desc=f"preprocess ({size})", file=sys.stderr, mininterval=0.5)


def uncompressed_size(path: Path) -> int:
    """Bytes of text in a corpus file: its size, or for a .gz file the size its gzip trailer records
    (ISIZE, the last 4 bytes: the length modulo 4 GiB), or, for a file so large that the trailer may
    have wrapped, its size times the compression ratio of its first megabyte."""
    size = path.stat().st_size
    if path.suffix != ".gz":
        return size
    with open(path, "rb") as f:
        if size < 2**28:  # under 256 MiB compressed: under 4 GiB of text for any ratio below 16
            f.seek(-4, os.SEEK_END)
            return struct.unpack("<I", f.read(4))[0]
        head = f.read(1 << 20)
    inflate = zlib.decompressobj(wbits=31)
    text = inflate.decompress(head)
    return int(size * len(text) / max(1, len(head) - len(inflate.unconsumed_tail)))


def _map_chunks(chunks, tokenizer_dir: str, kinds, spacy_model: str, num_workers: int) -> Iterator[_ChunkResult]:
    """Tokenize chunks in order, with at most 2 chunks per worker in flight (memory stays flat)."""
    payload = ([(d.paragraphs, d.path, d.line, d.continues) for d in chunk] for chunk in chunks)
    if num_workers <= 1:
        _init_worker(tokenizer_dir, kinds, spacy_model, threads=True)
        try:
            for p in payload:
                yield _tokenize_chunk(p)
        finally:
            _WORKER.clear()
        return
    method = "fork" if sys.platform == "linux" else "spawn"
    ctx = mp.get_context(method)
    with ctx.Pool(num_workers, _init_worker, (tokenizer_dir, kinds, spacy_model, False)) as pool:
        pending: collections.deque = collections.deque()
        for p in payload:
            pending.append(pool.apply_async(_tokenize_chunk, (p,)))
            if len(pending) >= 2 * num_workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()



def write_static_masks(
    corpus: TokenCorpus,
    output_dir: str | os.PathLike,
    *,
    dupe_factor: int,
    max_seq_length: int,
    mode: str = "nsp",
    short_seq_prob: float = 0.1,
    block_packing: str = "sentences",
    seed: int = 12345,
    masking: MaskingConfig | None = None,
    documents: tuple[int, int] | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """Mask every example of ``corpus`` ``dupe_factor`` times and store the masks in ``output_dir``
    (a new folder inside the corpus, named ``static-<max_seq_length>``); returns its meta.json entry.

    The examples (blocks or NSP pairs) are those of ``PretrainDataset(corpus, max_seq_length, mode=mode,
    seed=seed, ...)``, drawn once; duplicate d of example i is ``mask_block`` with
    ``example_generator(seed, d, i)`` — exactly the masks a dynamic dataset of that seed gives example i
    in epoch d. Written straight to disk, one duplicate at a time (memory stays flat); the caller makes
    the folder appear atomically (`preprocess` writes it inside its temporary corpus folder).
    """
    masking = masking or MaskingConfig(scheme="subword")
    ds = PretrainDataset(
        corpus,
        max_seq_length=max_seq_length,
        mode=mode,
        seed=seed,
        short_seq_prob=short_seq_prob,
        masking=masking,
        documents=documents,
        block_packing=block_packing,
    )
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=False)
    examples = np.ascontiguousarray(ds.pairs if ds.nsp else ds.blocks, dtype=np.int64)
    np.save(out / "examples.npy", examples)
    n = len(examples)
    small = max_seq_length <= np.iinfo(np.uint16).max and corpus.vocab_size <= np.iinfo(np.uint16).max + 1
    dtype = np.dtype(np.uint16 if small else np.int32)
    bar = None
    if progress:

        bar = progress_bar(total=n * dupe_factor, unit="ex", desc=f"static masks ({max_seq_length} tokens)", file=sys.stderr)
    counts, masked, tokens = [], 0, 0
    try:
        for d in range(dupe_factor):
            offsets = np.zeros((n + 1, 2), dtype=np.int64)
            k = m = 0
            with open(out / f"dup-{d:03d}.mlm", "wb") as f_mlm, open(out / f"dup-{d:03d}.sbo", "wb") as f_sbo:
                for i in range(n):
                    ids, ws, _, cand, _ = ds.sequence(i)
                    r = ds.mask(ids, ws, cand, ds.example_rng(i, epoch=d))
                    pos = np.flatnonzero(r.labels != IGNORE_INDEX)  # (K_i,)
                    f_mlm.write(np.stack([pos, r.input_ids[pos]], axis=1).astype(dtype).tobytes())
                    sbo = np.stack([r.sbo_positions, r.sbo_left, r.sbo_right, r.sbo_rel], axis=1)  # (M_i, 4)
                    f_sbo.write(sbo.astype(dtype).tobytes())
                    k += len(pos)
                    m += len(sbo)
                    offsets[i + 1] = (k, m)
                    if d == 0:
                        tokens += len(ids)
                    if bar is not None:
                        bar.update(1)
            offsets.tofile(out / f"dup-{d:03d}.offsets")
            counts.append([k, m])
            masked += k
    finally:
        if bar is not None:
            bar.close()
    return {
        "format": STATIC_FORMAT,
        "dir": out.name,
        "settings": static_settings(ds.nsp, max_seq_length, block_packing, short_seq_prob, masking, ds.documents),
        "seed": int(seed),
        "dupe_factor": int(dupe_factor),
        "num_examples": n,
        "num_tokens": tokens,
        "dtype": dtype.name,
        "mask_id": int(ds.mask_id),
        "counts": counts,
        "masked_fraction": round(masked / max(1, tokens * dupe_factor), 6),
    }


# =============================================================================================
# The quick-start corpus


def builtin_corpus(path: str | os.PathLike, include_module_docs: bool = False) -> Path:
    """Write an English corpus every Python carries, offline: the reference-manual topics of
    ``pydoc_data.topics`` (79 documents, ~465k characters), optionally plus the docstrings of the
    standard-library modules. Plain text, one paragraph per line, a blank line between documents.
    """

    docs = [topics[k] for k in sorted(topics)]
    if include_module_docs:
        docs += _stdlib_docstrings()
    path = Path(path)
    with atomic_write(path, encoding="utf-8") as f:
        first = True
        for doc in docs:
            # one line per paragraph: unwrap the hard-wrapped lines of each blank-line separated
            # paragraph, and drop reStructuredText heading underlines ("*****", "=====")
            lines = []
            for para in re.split(r"\n\s*\n", doc):
                words = [ln.strip() for ln in para.splitlines()]
                words = [ln for ln in words if ln and not (len(set(ln)) == 1 and not ln[0].isalnum())]
                if words:
                    lines.append(" ".join(words))
            if not lines:
                continue
            if not first:
                f.write("\n")
            f.write("\n".join(lines) + "\n")
            first = False
    return path


def _stdlib_docstrings() -> list[str]:

    out = []
    names = sorted(m.name for m in pkgutil.iter_modules() if not m.name.startswith("_"))
    stdlib = getattr(sys, "stdlib_module_names", set())
    for name in names:
        if name not in stdlib or name in ("antigravity", "this", "idlelib", "turtledemo", "tkinter", "turtle"):
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                mod = importlib.import_module(name)
        except Exception:  # some stdlib modules need optional system libraries
            continue
        if mod.__doc__ and len(mod.__doc__) > 200:
            out.append(mod.__doc__)
    return out


# =============================================================================================
# CLI


def main(argv: list[str], prog: str = "spanbert preprocess") -> int:
    """``spanbert preprocess --corpus FILES|DIR --tokenizer DIR --output_dir DIR``."""
    p = ArgumentParser(
        prog=prog,
        description="Tokenize a text corpus into sharded memory-mapped token arrays for pre-training. "
        "Plain text: a blank line separates documents, a line is a paragraph; .jsonl: a 'text' field per line; "
        "files may be .gz.",
    )
    p.add_argument("--corpus", nargs="+", metavar="PATH", help="text / .jsonl files or directories (required unless --merge)")
    p.add_argument(
        "--tokenizer", metavar="DIR", help="tokenizer directory (tokenizer.json or vocab.txt; required unless --merge)"
    )
    p.add_argument("--output_dir", "--output-dir", dest="output_dir", required=True, metavar="DIR")
    d = PreprocessConfig()
    p.add_argument(
        "--one-doc-per-line",
        "--one_doc_per_line",
        dest="one_doc_per_line",
        action="store_true",
        help="plain text has one document per line (default: blank line between documents)",
    )
    p.add_argument(
        "--num_workers",
        "--num-workers",
        dest="num_workers",
        type=int,
        default=d.num_workers,
        help="tokenizer processes (default: 0 = one per CPU core this process may use)",
    )
    p.add_argument(
        "--shard_tokens",
        "--shard-tokens",
        dest="shard_tokens",
        type=int,
        default=d.shard_tokens,
        help=f"tokens per shard (default: {d.shard_tokens})",
    )
    p.add_argument(
        "--candidates",
        default="",
        metavar="KINDS",
        help="candidate spans for the named_entity / noun_phrase schemes (§6.1): entity, noun_phrase "
        "(comma-separated; needs `pip install 'spanbert[spacy]'` and a spaCy English model)",
    )
    p.add_argument(
        "--spacy_model",
        "--spacy-model",
        dest="spacy_model",
        default=d.spacy_model,
        help=f"spaCy pipeline for --candidates (default: {d.spacy_model})",
    )
    p.add_argument(
        "--max_line_bytes",
        "--max-line-bytes",
        dest="max_line_bytes",
        type=int,
        default=d.max_line_bytes,
        help=f"split a longer line before a space into lines of at most this many bytes, with a warning "
        f"(default: {d.max_line_bytes:,})",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_parts_arguments(p)
    _add_static_arguments(p)
    args = p.parse_args(argv)
    if args.merge:
        return _merge_command(args, prog)
    for name in ("corpus", "tokenizer"):
        if not getattr(args, name):
            raise SpanBertError(f"--{name}: found none, expected one (or --merge CORPUS ... to join preprocessed corpora)")
    static = _static_from_args(args)
    if args.parts or args.part:
        return _parts_command(args, prog, static)
    preprocess_folder(args.corpus, args.tokenizer, args.output_dir, one_doc_per_line=args.one_doc_per_line,
                      num_workers=args.num_workers, shard_tokens=args.shard_tokens, max_line_bytes=args.max_line_bytes,
                      candidates=args.candidates, spacy_model=args.spacy_model, progress=not args.quiet,
                      static=static, prog=prog)  # fmt: skip
    return 0


def preprocess_folder(
    corpus: Sequence[str | os.PathLike], tokenizer: str | os.PathLike, output_dir: str | os.PathLike, *,
    prog: str = "spanbert preprocess", **options: Any,
) -> TokenCorpus:  # fmt: skip
    """What ``spanbert preprocess`` does in one piece (``prog`` names it in the folder's manifest), from
    Python: `preprocess` (``options``: its keywords) into a corpus folder of its own, refused first when
    that folder is another command's or lies in the text or the tokenizer it reads; says what it wrote and
    returns the corpus."""
    # before any work: a corpus folder of this command's (its manifest; it is replaced whole) or a new one,
    # apart from the text and the tokenizer it reads; then held while it is written
    inputs = input_paths({"corpus": list(corpus), "tokenizer": tokenizer}, ("corpus", "tokenizer"))
    check_output(output_dir, folder=True, owner="corpus", whole=True, inputs=inputs)
    with folders.Claim(output_dir, "corpus", prog):
        out = preprocess(corpus, tokenizer, output_dir, **options)
    c = TokenCorpus(out)
    print0(f"wrote {c.num_tokens:,} tokens in {c.num_docs:,} documents, {len(c.meta['shards'])} shard(s) to {out}")
    for e in static_mask_sets(c):
        print0(
            f"static masks: {e['dupe_factor']} duplicate(s) of {e['num_examples']:,} {e['settings']['mode']} examples "
            f"of <= {e['settings']['max_seq_length']} tokens in {out / e['dir']}"
        )
    return c


def _add_parts_arguments(p: argparse.ArgumentParser) -> None:
    """Preprocessing in parts (`spanbert.corpus_parts`)."""
    g = p.add_argument_group(
        "parts (spread preprocessing over processes or machines that share the output's folder)"
    )
    g.add_argument("--parts", type=int, default=0, metavar="N",
                   help="cut the input files into N parts of whole files, each an independent corpus folder in "
                   "--parts_dir; parts already complete are kept (a killed run resumes part by part); without "
                   "--part: build the missing parts, then merge them into --output_dir (default: 0, one folder)")
    g.add_argument("--part", type=int, default=0, metavar="K",
                   help="build only part K (1..N) of --parts N, e.g. one per machine; then run without --part to merge")
    g.add_argument("--parts_dir", "--parts-dir", dest="parts_dir", metavar="DIR",
                   help="where the parts go (default: OUTPUT_DIR.parts beside --output_dir)")
    g.add_argument("--merge", nargs="+", metavar="CORPUS",
                   help="join these preprocessed corpora (made with the same tokenizer: parts, or an old corpus and "
                   "a new one) into --output_dir, unigram counts summed; no tokenizing")  # fmt: skip


def _parts_command(args: argparse.Namespace, prog: str, static: StaticMaskingConfig | None) -> int:
    """``--parts N [--part K]``: build the missing parts (or part K), then merge them when all are there."""
    if args.part and not args.parts:
        raise SpanBertError(f"--part {args.part}: found no --parts, expected --parts N with it")
    if static is not None:
        raise SpanBertError("--dupe_factor: found it with --parts, expected one or the other (static masks depend "
                            "on the whole corpus's held-out split: make them on a corpus preprocessed in one piece)")  # fmt: skip
    files = corpus_files(args.corpus)
    parts_dir = Path(args.parts_dir) if args.parts_dir else default_parts_dir(Path(args.output_dir))
    inputs = input_paths(args, ("corpus", "tokenizer"))
    options = {"one_doc_per_line": args.one_doc_per_line, "shard_tokens": args.shard_tokens,
               "max_line_bytes": args.max_line_bytes, "candidates": args.candidates, "spacy_model": args.spacy_model}  # fmt: skip

    def build(part_files: list[Path], folder: Path, spec: dict[str, Any]) -> None:
        check_output(folder, folder=True, owner="corpus", whole=True, inputs=inputs)
        with folders.Claim(folder, "corpus", f"{prog} --part {spec['index']}"):
            for debris in folder.parent.glob(f".{folder.name}.tmp-*"):  # a killed build's (the claim is ours now)
                shutil.rmtree(debris, ignore_errors=True)
            preprocess(part_files, args.tokenizer, folder, one_doc_per_line=args.one_doc_per_line,
                       num_workers=args.num_workers, shard_tokens=args.shard_tokens, max_line_bytes=args.max_line_bytes,
                       candidates=args.candidates, spacy_model=args.spacy_model, progress=not args.quiet, part=spec)  # fmt: skip

    tok = vocab_match.tokenizer_fingerprint(load_tokenizer(args.tokenizer))
    folders_, busy = build_parts(build, files, args.parts, parts_dir, tok, options, only=args.part or None, say=print0)
    if args.part:
        print0(f"part {args.part} of {args.parts} is in {folders_[args.part - 1]}; when every part is done, "
               f"{prog} --corpus ... --tokenizer ... --output_dir {args.output_dir} --parts {args.parts} merges them")  # fmt: skip
        return 0
    if busy:
        print0(f"parts {', '.join(map(str, busy))} of {args.parts} are being built by other processes: run this "
               "command again when they are done to merge the parts")  # fmt: skip
        return 0
    check_output(args.output_dir, folder=True, owner="corpus", whole=True, inputs=[*inputs, ("--parts_dir", parts_dir)])
    with folders.Claim(args.output_dir, "corpus", prog):
        out = merge(folders_, args.output_dir)
    c = TokenCorpus(out)
    print0(f"wrote {c.num_tokens:,} tokens in {c.num_docs:,} documents, {c.num_shards} shard(s) to {out}, merged from "
           f"{args.parts} part(s) (hard links to the files in {parts_dir}, which may be deleted now)")  # fmt: skip
    return 0


def _merge_command(args: argparse.Namespace, prog: str) -> int:
    """``--merge CORPUS ...``: join preprocessed corpora into --output_dir."""
    named = [n for n in ("corpus", "tokenizer") if getattr(args, n)] + (["parts"] if args.parts or args.part else [])
    if named:
        raise SpanBertError(f"--{named[0]}: found it with --merge, expected --merge CORPUS ... --output_dir DIR alone "
                            "(the corpora are tokenized already)")  # fmt: skip
    inputs = [("--merge", m) for m in args.merge]
    check_output(args.output_dir, folder=True, owner="corpus", whole=True, inputs=inputs)
    with folders.Claim(args.output_dir, "corpus", prog):
        out = merge(args.merge, args.output_dir)
    c = TokenCorpus(out)
    print0(f"wrote {c.num_tokens:,} tokens in {c.num_docs:,} documents, {c.num_shards} shard(s) to {out}, merged from "
           f"{len(args.merge)} corpora (hard links where they share a file system)")  # fmt: skip
    return 0


def _add_static_arguments(p: argparse.ArgumentParser) -> None:
    """Google BERT's static masking options (`StaticMaskingConfig`; the masking ones are `MaskingConfig`'s)."""
    g = p.add_argument_group(
        "static masking (Google BERT's create_pretraining_data.py; only with --dupe_factor N > 0)"
    )
    d, docs = StaticMaskingConfig(), field_docs(StaticMaskingConfig)

    def helptext(name: str, default: Any) -> str:
        return f"{docs[name]} (default: {default})".replace("%", "%%")

    g.add_argument("--dupe_factor", "--dupe-factor", type=int, default=d.dupe_factor, help=helptext("dupe_factor", 0))
    g.add_argument(
        "--max_seq_length", "--max-seq-length", type=int, nargs="+", default=list(d.max_seq_length), metavar="N",
        help=helptext("max_seq_length", " ".join(map(str, d.max_seq_length))),
    )  # fmt: skip
    g.add_argument("--mode", choices=("nsp", "single"), default=d.mode, help=helptext("mode", d.mode))
    g.add_argument("--short_seq_prob", type=float, default=d.short_seq_prob, help=helptext("short_seq_prob", 0.1))
    g.add_argument(
        "--block_packing", choices=BLOCK_PACKINGS, default=d.block_packing, help=helptext("block_packing", "sentences")
    )
    g.add_argument("--masking_seed", type=int, default=d.masking_seed, help=helptext("masking_seed", d.masking_seed))
    g.add_argument("--eval_fraction", type=float, default=d.eval_fraction, help=helptext("eval_fraction", 0.01))
    g.add_argument(
        "--masking",
        default="subword",
        metavar="SCHEME",
        help=f"masking scheme of the stored masks: {', '.join(SCHEMES)} (default: subword)",
    )
    add_dataclass_arguments(g, MaskingConfig, exclude=("scheme", "replace_probs"))
    add_replace_probs_arguments(g)


def _static_from_args(args: argparse.Namespace) -> StaticMaskingConfig | None:

    if args.dupe_factor == 0:
        d = StaticMaskingConfig()
        given = [k for k in (f.name for f in dataclasses.fields(MaskingConfig)) if k in vars(args)]
        given += [k for k in ("mode", "short_seq_prob", "block_packing", "masking_seed", "eval_fraction")
                  if getattr(args, k) != getattr(d, k)]  # fmt: skip
        given += ["max_seq_length"] if tuple(args.max_seq_length) != d.max_seq_length else []
        given += ["masking"] if args.masking != "subword" else []
        if given:
            raise SpanBertError(
                f"--{given[0]}: found it without --dupe_factor, expected --dupe_factor N (static masking)"
            )
        return None
    masking = dataclass_from_args(MaskingConfig, args, defaults={"scheme": args.masking})
    return StaticMaskingConfig(
        dupe_factor=args.dupe_factor,
        max_seq_length=tuple(args.max_seq_length),
        mode=args.mode,
        short_seq_prob=args.short_seq_prob,
        block_packing=args.block_packing,
        masking_seed=args.masking_seed,
        eval_fraction=args.eval_fraction,
        masking=masking,
    )
