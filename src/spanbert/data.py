"""Pre-training data: corpus -> sharded memory-mapped token arrays -> blocks -> masked batches.

`spanbert preprocess` (`preprocess`) streams a text corpus through the WordPiece tokenizer in worker
processes and writes, per shard, flat binary arrays that are memory-mapped at training time:

    output_dir/
      meta.json                  format, counts, dtypes, shard list
      tokenizer/                 the tokenizer used (the corpus is self-contained)
      unigram.npy                (V,) int64 token counts: random replacements follow them (§2)
      shard-00000.ids            (n,) uint16 | int32 token ids
      shard-00000.starts         (n,) uint8 1 where the token starts a word
      shard-00000.docs           (D+1,) int64 document offsets into the shard
      shard-00000.paras          (P,) int64 paragraph (line) start offsets (NSP segment boundaries)
      shard-00000.entity         (C, 2) int32 inclusive token spans (named_entity scheme, optional)
      shard-00000.noun_phrase    (C, 2) int32 inclusive token spans (noun_phrase scheme, optional)
      static-128/                stored masks (``--dupe_factor N``, Google BERT's static masking, optional)

Documents never cross shards. The whole directory appears atomically (`atomic_dir`).

`TokenCorpus` reads that directory; `PretrainDataset` cuts it into blocks — SpanBERT's single
contiguous segments of up to 512 tokens that stop at a document boundary (§3.3, §4.2; whole lines
packed as the released code does, `sentence_blocks`, or fixed-length cuts, `single_segment_blocks`),
or BERT's NSP sentence pairs (BERT §3.1, Google's `create_pretraining_data.py`) — and masks each block with
`spanbert.masking.mask_block`, reproducibly from (seed, epoch, index), or reads the masks stored at
preprocess time (`write_static_masks`; epoch e reads copy e mod dupe_factor). `collate_pretrain` makes the
batch described in docs/architecture.md ("Pre-training batches").
"""

from __future__ import annotations

import argparse
import bisect
import collections
import dataclasses
import functools
import hashlib
import json
import multiprocessing as mp
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from spanbert.errors import DataError, SpanBertError
from spanbert.masking import (
    IGNORE_INDEX,
    SCHEMES,
    MaskingConfig,
    MaskResult,
    UnigramSampler,
    check_replace_probs,
    mask_block,
)
from spanbert.tokenization import (
    Tokenizer,
    corpus_files,
    is_jsonl,
    iter_lines,
    load_tokenizer,
    parse_jsonl_text,
)
from spanbert.utils import atomic_dir, atomic_write, close_inherited_sockets

FORMAT = "spanbert-corpus-v1"
CANDIDATE_KINDS = ("entity", "noun_phrase")
# spaCy entity labels that are numbers, not names (§6.1 "non-numerical named entity mentions").
NUMERIC_ENTITY_LABELS = frozenset({"DATE", "TIME", "PERCENT", "MONEY", "QUANTITY", "ORDINAL", "CARDINAL"})


# =============================================================================================
# Reading the corpus


@dataclass
class _Doc:
    paragraphs: list[str]
    path: str
    line: int


def iter_documents(files: Sequence[Path], one_doc_per_line: bool = False) -> Iterator[_Doc]:
    """Documents of the corpus in file order.

    Plain text: a blank line separates documents, each non-blank line is a paragraph (or every
    non-blank line is a document with ``one_doc_per_line``). ``.jsonl``: one JSON object per line with a
    string field ``text`` (its lines are the paragraphs). Files may be gzipped.
    """
    for path in files:
        if is_jsonl(path):
            for lineno, line in iter_lines(path):
                if not line.strip():
                    continue
                text = parse_jsonl_text(path, lineno, line)
                paras = [p for p in text.split("\n") if p.strip()]
                if paras:
                    yield _Doc(paras, str(path), lineno)
            continue
        paras: list[str] = []
        first = 0
        for lineno, line in iter_lines(path):
            if not line.strip():
                if paras:
                    yield _Doc(paras, str(path), first)
                    paras = []
                continue
            if one_doc_per_line:
                yield _Doc([line], str(path), lineno)
                continue
            if not paras:
                first = lineno
            paras.append(line)
        if paras:
            yield _Doc(paras, str(path), first)


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
    _WORKER["tok"] = load_tokenizer(tokenizer_dir)
    _WORKER["kinds"] = candidate_kinds
    _WORKER["nlp"] = load_spacy(spacy_model) if candidate_kinds else None


@dataclass
class _ChunkResult:
    ids: np.ndarray  # (n,) int32
    starts: np.ndarray  # (n,) bool
    doc_lens: np.ndarray  # (D,) tokens per (non-empty) document
    para_lens: np.ndarray  # (P,) tokens per (non-empty) paragraph
    candidates: dict[str, np.ndarray]  # kind -> (C, 2) inclusive spans, chunk coordinates
    chars: int


def _tokenize_chunk(docs: list[tuple[list[str], str, int]]) -> _ChunkResult:
    tok: Tokenizer = _WORKER["tok"]
    paras = [p for d in docs for p in d[0]]
    encs = tok.hf.encode_batch(paras, add_special_tokens=False)
    para_lens = np.fromiter((len(e.ids) for e in encs), dtype=np.int64, count=len(encs))
    ids = np.fromiter((i for e in encs for i in e.ids), dtype=np.int32, count=int(para_lens.sum()))
    starts = tok.word_starts_of(ids)
    per_doc = np.array([len(d[0]) for d in docs], dtype=np.int64)
    doc_of_para = np.repeat(np.arange(len(docs)), per_doc)
    doc_lens = np.bincount(doc_of_para, weights=para_lens, minlength=len(docs)).astype(np.int64)
    candidates: dict[str, np.ndarray] = {}
    if _WORKER["kinds"]:
        candidates = _find_candidates(_WORKER["nlp"], _WORKER["kinds"], paras, encs, para_lens, starts)
    # empty paragraphs and documents (nothing left after normalisation) are dropped
    return _ChunkResult(
        ids, starts, doc_lens[doc_lens > 0], para_lens[para_lens > 0], candidates, sum(len(p) for p in paras)
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


# =============================================================================================
# Writing shards


class _ShardWriter:
    """Appends chunk results to flat binary files; memory holds only offsets, never tokens."""

    def __init__(self, root: Path, index: int, id_dtype: np.dtype, kinds: tuple[str, ...]):
        self.name = f"shard-{index:05d}"
        self.root = root
        self.id_dtype = id_dtype
        self.kinds = kinds
        self.f_ids = open(root / f"{self.name}.ids", "wb")
        self.f_starts = open(root / f"{self.name}.starts", "wb")
        self.f_cand = {k: open(root / f"{self.name}.{k}", "wb") for k in kinds}
        self.doc_offsets = [np.zeros(1, np.int64)]
        self.para_offsets: list[np.ndarray] = []
        self.n_tokens = 0
        self.n_docs = 0
        self.n_cand = dict.fromkeys(kinds, 0)

    def add(self, r: _ChunkResult) -> None:
        self.f_ids.write(r.ids.astype(self.id_dtype).tobytes())
        self.f_starts.write(r.starts.astype(np.uint8).tobytes())
        self.doc_offsets.append(self.n_tokens + np.cumsum(r.doc_lens))
        self.para_offsets.append(self.n_tokens + np.concatenate([[0], np.cumsum(r.para_lens)[:-1]]))
        for k in self.kinds:
            c = r.candidates.get(k, np.zeros((0, 2), np.int32)).astype(np.int64) + self.n_tokens
            self.f_cand[k].write(c.astype(np.int32).tobytes())
            self.n_cand[k] += len(c)
        self.n_tokens += len(r.ids)
        self.n_docs += len(r.doc_lens)

    def close(self) -> dict[str, Any]:
        for f in [self.f_ids, self.f_starts, *self.f_cand.values()]:
            f.close()
        np.concatenate(self.doc_offsets).tofile(self.root / f"{self.name}.docs")
        paras = np.concatenate(self.para_offsets) if self.para_offsets else np.zeros(0, np.int64)
        paras.astype(np.int64).tofile(self.root / f"{self.name}.paras")
        return {
            "name": self.name,
            "num_tokens": self.n_tokens,
            "num_docs": self.n_docs,
            "num_paragraphs": int(len(paras)),
            "num_candidates": self.n_cand,
        }


@dataclass
class PreprocessConfig:
    """Options of `spanbert preprocess` (besides the corpus, the tokenizer and the output directory)."""

    one_doc_per_line: bool = False
    """Plain text has one document per line (default: a blank line separates documents, a line is a paragraph)."""
    num_workers: int = 0
    """Tokenizer processes; 0 = one per CPU core (at most 8)."""
    shard_tokens: int = 100_000_000
    """Start a new shard after this many tokens (at a document boundary)."""
    chunk_chars: int = 1_000_000
    """Characters of text per unit of work sent to a worker."""
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
    candidates: Sequence[str] | str | None = (),
    spacy_model: str = "en_core_web_sm",
    progress: bool = True,
    static: StaticMaskingConfig | None = None,
) -> Path:
    """Tokenize ``corpus`` (files or directories) into memory-mapped shards in ``output_dir``.

    Returns ``output_dir``. Memory stays flat: text is read in chunks, at most two chunks per worker
    are in flight, and tokens go straight to disk. Output appears only when complete.
    ``static`` with ``dupe_factor`` > 0 also stores that many masked copies of the examples, per
    sequence length (`write_static_masks`; Google BERT's static masking), inside the same atomic folder.
    """
    files = corpus_files([corpus] if isinstance(corpus, (str, os.PathLike)) else corpus)
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
    if not 0 < shard_tokens <= 2**30:  # candidate spans are stored as int32 offsets inside a shard
        raise SpanBertError(f"shard_tokens={shard_tokens}; expected 1 .. {2**30}")
    if static is not None:
        static.check(kinds)  # before any work
    if kinds:
        load_spacy(spacy_model)  # fail now, with the install hint, not in a worker
    tok = tokenizer if isinstance(tokenizer, Tokenizer) else load_tokenizer(tokenizer)
    if num_workers <= 0:
        num_workers = min(os.cpu_count() or 1, 8)
    id_dtype = np.dtype(np.uint16 if tok.vocab_size <= 65536 else np.int32)
    output_dir = Path(output_dir)
    total_bytes = sum(p.stat().st_size for p in files)

    with atomic_dir(output_dir) as tmp:
        tok.save(tmp / "tokenizer")
        counts = np.zeros(tok.vocab_size, dtype=np.int64)
        shards: list[dict[str, Any]] = []
        writer = _ShardWriter(tmp, 0, id_dtype, kinds)
        chunk_iter = _chunks(iter_documents(files, one_doc_per_line), chunk_chars)
        bar = _progress_bar(progress, total_bytes)
        chars = 0
        t0 = time.perf_counter()
        try:
            for result in _map_chunks(chunk_iter, str(tmp / "tokenizer"), kinds, spacy_model, num_workers):
                if writer.n_tokens >= shard_tokens:
                    shards.append(writer.close())
                    writer = _ShardWriter(tmp, len(shards), id_dtype, kinds)
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
        meta = {
            "format": FORMAT,
            "num_tokens": n_tokens,
            "num_docs": sum(s["num_docs"] for s in shards),
            "vocab_size": tok.vocab_size,
            "id_dtype": id_dtype.name,
            "candidates": list(kinds),
            "one_doc_per_line": one_doc_per_line,
            "sources": [str(p) for p in files],
            "seconds": round(time.perf_counter() - t0, 3),
            "shards": shards,
        }
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
        split = held_out_documents(corpus.doc_bounds, static.eval_fraction, min_docs, min_docs)
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


def _progress_bar(enabled: bool, total_bytes: int):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(
        unit="tok", unit_scale=True, desc=f"preprocess ({total_bytes / 1e6:.1f} MB)", file=sys.stderr, mininterval=0.5
    )


def _map_chunks(chunks, tokenizer_dir: str, kinds, spacy_model: str, num_workers: int) -> Iterator[_ChunkResult]:
    """Tokenize chunks in order, with at most 2 chunks per worker in flight (memory stays flat)."""
    payload = ([(d.paragraphs, d.path, d.line) for d in chunk] for chunk in chunks)
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


# =============================================================================================
# Reading the preprocessed corpus


def is_preprocessed(path: str | os.PathLike) -> bool:
    """True if ``path`` is a `preprocess` output directory."""
    meta = Path(path) / "meta.json"
    if not meta.is_file():
        return False
    try:
        return json.loads(meta.read_text(encoding="utf-8")).get("format") == FORMAT
    except (json.JSONDecodeError, OSError):
        return False


def has_tokenizer(path: str | os.PathLike) -> bool:
    """True if ``path`` is a directory with ``tokenizer.json`` or ``vocab.txt``."""
    p = Path(path)
    return p.is_dir() and ((p / "tokenizer.json").is_file() or (p / "vocab.txt").is_file())


def tokenizer_dir_of(path: str | os.PathLike) -> Path | None:
    """The tokenizer saved inside a preprocessed corpus (``path/tokenizer``), or None."""
    p = Path(path) / "tokenizer"
    return p if has_tokenizer(p) else None


class TokenCorpus:
    """Read-only view of a `preprocess` output directory (memory-mapped; opening it reads no tokens).

    Token positions are global: shard k's tokens follow shard k-1's.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        meta_file = self.path / "meta.json"
        if not meta_file.is_file():
            raise SpanBertError(
                f"{self.path} is not a preprocessed corpus (no meta.json); "
                "create one with `spanbert preprocess --corpus FILES --tokenizer DIR --output_dir DIR`"
            )
        self.meta = _read_meta(meta_file)
        self.vocab_size: int = int(self.meta["vocab_size"])
        dtype = np.dtype(self.meta["id_dtype"])
        self._ids, self._starts = [], []
        doc_bounds, paras, offsets = [], [], [0]
        self._cand: dict[str, list[np.ndarray]] = {k: [] for k in self.meta.get("candidates", [])}
        for s in self.meta["shards"]:
            base = offsets[-1]
            n = int(s["num_tokens"])
            name = self.path / s["name"]
            self._ids.append(_memmap(Path(f"{name}.ids"), dtype, n))
            self._starts.append(_memmap(Path(f"{name}.starts"), np.uint8, n))
            docs = _offsets_file(Path(f"{name}.docs"), n, count=int(s["num_docs"]) + 1, what="document")
            doc_bounds.append(np.stack([docs[:-1], docs[1:]], axis=1) + base)
            para_offsets = _offsets_file(Path(f"{name}.paras"), n, count=s.get("num_paragraphs"), what="paragraph")
            paras.append(para_offsets + base)
            for k in self._cand:
                c = _read_array(Path(f"{name}.{k}"), np.int32).reshape(-1, 2).astype(np.int64) + base
                self._cand[k].append(c[np.argsort(c[:, 0], kind="stable")])
            offsets.append(base + n)
        self.shard_offsets = np.asarray(offsets, dtype=np.int64)  # (K+1,)
        self.doc_bounds = np.concatenate(doc_bounds) if doc_bounds else np.zeros((0, 2), np.int64)
        """(D, 2) global [start, end) of every document."""
        self.para_starts = np.concatenate(paras) if paras else np.zeros(0, np.int64)
        """(P,) global start of every paragraph (line), sorted."""
        self.candidate_spans = {
            k: np.concatenate(v) if v else np.zeros((0, 2), np.int64) for k, v in self._cand.items()
        }
        self.num_tokens = int(self.shard_offsets[-1])
        self.num_docs = len(self.doc_bounds)
        self._tokenizer: Tokenizer | None = None
        # Plain-ndarray views of the memory maps for `tokens`: slicing numpy's memmap subclass costs
        # ~3 µs a call in Python, which adds up when the dataset reads a block for every example.
        self._offsets: list[int] = self.shard_offsets.tolist()
        self._id_views = [np.asarray(a) for a in self._ids]
        self._start_views = [np.asarray(a).view(bool) for a in self._starts]  # uint8 0/1 flags as bool

    def __getstate__(self) -> dict[str, Any]:
        # Pickle the path, not the memory maps (which numpy would copy into the pickle): DataLoader
        # workers started with "spawn" reopen the files instead.
        return {"path": str(self.path)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"])

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.path / "tokenizer")
        return self._tokenizer

    def tokens(self, start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """(ids (n,), word_starts bool (n,)) of global positions [start, end) inside one shard.

        Read-only views, no copy: ids keep the corpus' dtype (``meta["id_dtype"]``, uint16 for
        vocabularies up to 65,536), so cast before arithmetic that could overflow it.
        """
        k = bisect.bisect_right(self._offsets, start) - 1
        if not 0 <= k < len(self._id_views) or end < start:
            raise IndexError(f"token range [{start}, {end}) is outside the corpus of {self.num_tokens} tokens")
        if end > self._offsets[k + 1]:
            raise IndexError(f"token range [{start}, {end}) crosses a shard boundary")
        a, b = start - self._offsets[k], end - self._offsets[k]
        return self._id_views[k][a:b], self._start_views[k][a:b]

    def candidates(self, kind: str, start: int, end: int) -> np.ndarray:
        """(C, 2) candidate spans of ``kind`` inside [start, end), inclusive, relative to ``start``."""
        if kind not in self.candidate_spans:
            raise SpanBertError(
                f"{self.path} has no {kind!r} candidate spans; re-run spanbert preprocess with --candidates {kind}"
            )
        c = self.candidate_spans[kind]
        lo, hi = np.searchsorted(c[:, 0], [start, end])
        c = c[lo:hi]
        return c[c[:, 1] < end] - start

    def unigram_counts(self) -> np.ndarray:
        """(V,) int64 count of every token id in the corpus."""
        path = self.path / "unigram.npy"
        try:
            counts = np.load(path)
        except (OSError, ValueError, EOFError) as e:
            raise DataError(path, f"cannot read the token counts ({e}): {_DAMAGED}") from None
        if counts.shape != (self.vocab_size,):
            raise DataError(path, f"found shape {counts.shape}, expected ({self.vocab_size},): {_DAMAGED}")
        return counts

    def __repr__(self) -> str:
        return (
            f"TokenCorpus({str(self.path)!r}, tokens={self.num_tokens}, docs={self.num_docs}, shards={len(self._ids)})"
        )


_META_KEYS: dict[str, type] = {
    "format": str, "num_tokens": int, "num_docs": int, "vocab_size": int, "id_dtype": str, "shards": list
}  # fmt: skip
_SHARD_KEYS: dict[str, type] = {"name": str, "num_tokens": int, "num_docs": int}
_RERUN = "re-run spanbert preprocess"
_DAMAGED = "the corpus is damaged, " + _RERUN


def _bad_value(value: Any, tp: type) -> str | None:
    """What a meta.json value should have been, or None when it is fine."""
    if tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        return None if ok else "a non-negative integer"
    return None if isinstance(value, tp) else f"a {tp.__name__}"


def _read_meta(meta_file: Path) -> dict[str, Any]:
    """The checked ``meta.json`` of a preprocessed corpus; a truncated or hand-edited file is a `DataError`."""
    try:
        meta = json.loads(meta_file.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(
            meta_file,
            f"found invalid JSON ({e}), expected the meta.json that spanbert preprocess writes; {_RERUN}",
            line=getattr(e, "lineno", None),
        ) from None
    except OSError as e:
        raise DataError(meta_file, f"cannot read: {e.strerror or e}") from None
    if not isinstance(meta, dict):
        raise DataError(meta_file, f"found a JSON {type(meta).__name__}, expected an object; {_RERUN}")
    if meta.get("format") != FORMAT:
        raise DataError(meta_file, f"found format {meta.get('format')!r}, expected {FORMAT!r} ({_RERUN})")
    for key, tp in _META_KEYS.items():
        expected = _bad_value(meta.get(key), tp)
        if expected:
            raise DataError(meta_file, f"found {key}={meta.get(key)!r}, expected {expected}; {_RERUN}")
    if meta["id_dtype"] not in ("uint16", "int32"):
        raise DataError(meta_file, f"found id_dtype={meta['id_dtype']!r}, expected uint16 or int32; {_RERUN}")
    if not meta["shards"]:
        raise DataError(meta_file, f"found no shards, expected at least one; {_RERUN}")
    for i, shard in enumerate(meta["shards"]):
        for key, tp in _SHARD_KEYS.items():
            value = shard.get(key) if isinstance(shard, dict) else None
            expected = _bad_value(value, tp)
            if expected:
                raise DataError(meta_file, f"found shards[{i}].{key}={value!r}, expected {expected}; {_RERUN}")
        if Path(shard["name"]).name != shard["name"] or shard["name"].startswith("."):
            raise DataError(meta_file, f"found shard name {shard['name']!r}, expected a file name like shard-00000")
    total = sum(s["num_tokens"] for s in meta["shards"])
    if total != meta["num_tokens"]:
        raise DataError(meta_file, f"found num_tokens={meta['num_tokens']}, expected the shards' sum {total}; {_RERUN}")
    static = meta.get("static_masks", [])
    if not isinstance(static, list) or not all(
        isinstance(e, dict)
        and e.get("format") == STATIC_FORMAT
        and isinstance(e.get("dir"), str)
        and re.fullmatch(r"static-\d+", e["dir"])
        and isinstance(e.get("settings"), dict)
        and isinstance(e.get("dupe_factor"), int)
        and isinstance(e.get("counts"), list)
        and len(e["counts"]) == e["dupe_factor"]
        and e.get("dtype") in ("uint16", "int32")
        for e in static
    ):
        raise DataError(meta_file, f"found a static_masks entry that is not {STATIC_FORMAT}'s: {_DAMAGED}")
    cands = meta.get("candidates", [])
    if not isinstance(cands, list) or any(c not in CANDIDATE_KINDS for c in cands):
        raise DataError(
            meta_file, f"found candidates={cands!r}, expected a list of {', '.join(CANDIDATE_KINDS)}; {_RERUN}"
        )
    return meta


def _read_array(path: Path, dtype) -> np.ndarray:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise DataError(path, f"cannot read: {e.strerror or e}; {_DAMAGED}") from None
    size = np.dtype(dtype).itemsize
    if len(data) % size:
        raise DataError(path, f"found {len(data)} bytes, expected a multiple of {size}: {_DAMAGED}")
    return np.frombuffer(data, dtype=dtype).copy()


def _offsets_file(path: Path, n_tokens: int, count: int | None, what: str) -> np.ndarray:
    """(count,) int64 sorted offsets into a shard of ``n_tokens`` tokens (documents: 0 first, n_tokens last)."""
    a = _read_array(path, np.int64)
    damaged = _DAMAGED
    if count is not None and len(a) != count:
        raise DataError(path, f"found {len(a)} {what} offsets, expected {count}: {damaged}")
    if len(a) and (a[0] < 0 or a[-1] > n_tokens or (np.diff(a) < 0).any()):
        raise DataError(path, f"found {what} offsets outside 0..{n_tokens} or out of order: {damaged}")
    if what == "document" and (len(a) == 0 or a[0] != 0 or a[-1] != n_tokens):
        raise DataError(path, f"found document offsets that do not cover the shard's {n_tokens} tokens: {damaged}")
    return a


def _memmap(path: Path, dtype, n: int) -> np.ndarray:
    if n == 0:
        return np.zeros(0, dtype=dtype)
    size = path.stat().st_size if path.is_file() else -1
    if size == -1:
        raise DataError(path, f"file missing, expected {n} tokens: the corpus is damaged, re-run spanbert preprocess")
    if size != n * np.dtype(dtype).itemsize:
        raise DataError(
            path,
            f"{size} bytes; expected {n * np.dtype(dtype).itemsize} ({n} tokens): the corpus is damaged, re-run spanbert preprocess",
        )
    return np.memmap(path, dtype=dtype, mode="r", shape=(n,))


# =============================================================================================
# Blocks and the pre-training dataset


def single_segment_blocks(doc_bounds: np.ndarray, max_tokens: int) -> np.ndarray:
    """(N, 2) global [start, end) blocks: each document cut into consecutive pieces of ``max_tokens``.

    SpanBERT §4.2: "we always take sequences of up to 512 tokens until it reaches a document
    boundary"; Appendix A step 1. No block crosses a document boundary.
    """
    lens = doc_bounds[:, 1] - doc_bounds[:, 0]  # (D,)
    n_blocks = -(-lens // max_tokens)  # ceil
    doc_of = np.repeat(np.arange(len(doc_bounds)), n_blocks)  # (N,)
    first = np.repeat(np.cumsum(n_blocks) - n_blocks, n_blocks)
    start = doc_bounds[doc_of, 0] + (np.arange(len(doc_of)) - first) * max_tokens
    end = np.minimum(start + max_tokens, doc_bounds[doc_of, 1])
    return np.stack([start, end], axis=1).astype(np.int64)


BLOCK_PACKINGS = ("sentences", "fixed")


def sentence_blocks(
    doc_bounds: np.ndarray,
    line_starts: np.ndarray,
    tokens: Callable[[int, int], tuple[np.ndarray, np.ndarray]],
    max_tokens: int,
) -> np.ndarray:
    """(N, 2) global [start, end) blocks: whole lines of each document packed greedily up to ``max_tokens``.

    The released SpanBERT code (``BlockDataset``, break_mode "doc") packs whole input lines into blocks
    of up to 510 tokens and never crosses a document; so does this. Lines are the corpus's paragraphs
    (``TokenCorpus.para_starts``). Where the released code *drops* a line longer than a block, it is
    split here into pieces of at most ``max_tokens`` ending at word starts (the longest such prefix
    each time), so no text is lost; the last piece is packed with the lines after it. A single word
    longer than a block (only at tiny ``max_tokens``) is the one case cut inside a word.
    The blocks tile every document exactly, in order. ``tokens(start, end) -> (ids, word_starts)``
    reads the corpus (`TokenCorpus.tokens`); it is called only for lines longer than a block.
    """
    if max_tokens < 1:
        raise SpanBertError(f"max_tokens={max_tokens}; expected at least 1")
    line_starts = np.asarray(line_starts, dtype=np.int64)
    rows: list[tuple[int, int]] = []
    for ds, de in np.asarray(doc_bounds, dtype=np.int64).tolist():
        if de <= ds:
            continue
        lo, hi = np.searchsorted(line_starts, [ds, de])
        cuts = line_starts[lo:hi].tolist()
        if not cuts or cuts[0] != ds:  # a document always starts a line
            cuts.insert(0, ds)
        cuts.append(de)
        cur_start = cur_end = -1  # the open block, [cur_start, cur_end); -1 = none
        for a, b in zip(cuts[:-1], cuts[1:]):
            if b - a > max_tokens:
                pieces = _split_line(a, b, tokens(a, b)[1], max_tokens)
            else:
                pieces = ((a, b),)
            for pa, pb in pieces:
                if cur_start >= 0 and pb - cur_start <= max_tokens:
                    cur_end = pb  # the piece still fits the open block
                    continue
                if cur_start >= 0:
                    rows.append((cur_start, cur_end))
                cur_start, cur_end = pa, pb
        if cur_start >= 0:
            rows.append((cur_start, cur_end))
    return np.asarray(rows, dtype=np.int64).reshape(-1, 2)


def _split_line(a: int, b: int, word_starts: np.ndarray, max_tokens: int) -> list[tuple[int, int]]:
    """[a, b) cut into pieces of at most ``max_tokens``, each ending where a word starts (or at b)."""
    starts = a + np.flatnonzero(word_starts)  # (W,) global positions of the word starts in the line
    pieces = []
    p = a
    while b - p > max_tokens:
        # the last word start in (p, p + max_tokens]: the longest prefix of whole words that fits
        k = int(np.searchsorted(starts, p + max_tokens, side="right")) - 1
        q = int(starts[k]) if k >= 0 and starts[k] > p else p + max_tokens  # one word > a block: cut it
        pieces.append((p, q))
        p = q
    pieces.append((p, b))
    return pieces


def block_ends_mid_word(
    blocks: np.ndarray, doc_bounds: np.ndarray, tokens: Callable[[int, int], tuple[np.ndarray, np.ndarray]]
) -> np.ndarray:
    """(N,) bool: True where a block ends inside a word (the token after it, in the same document,
    is a ``##`` continuation). The measure of `sentence_blocks` against `single_segment_blocks`."""
    blocks = np.asarray(blocks, dtype=np.int64).reshape(-1, 2)
    ends = blocks[:, 1]
    doc_ends = np.asarray(doc_bounds, dtype=np.int64)[:, 1]
    inside = ~np.isin(ends, doc_ends)  # a block ending at its document's end ends a word
    out = np.zeros(len(blocks), dtype=bool)
    for i in np.flatnonzero(inside).tolist():
        out[i] = not bool(tokens(int(ends[i]), int(ends[i]) + 1)[1][0])
    return out


def held_out_documents(doc_bounds: np.ndarray, fraction: float, min_train_docs: int = 1, min_eval_docs: int = 1) -> int:
    """Index of the first held-out document: the last documents holding about ``fraction`` of the tokens.

    The split is by whole documents, never inside one, so no held-out text is also trained on (a
    block split would cut the document at the boundary in two). Returns ``len(doc_bounds)`` (nothing
    held out) when the corpus cannot spare ``min_eval_docs`` documents while keeping ``min_train_docs``.
    """
    n_docs = len(doc_bounds)
    if fraction <= 0 or n_docs < min_train_docs + min_eval_docs:
        return n_docs
    lens = (doc_bounds[:, 1] - doc_bounds[:, 0]).astype(np.int64)  # (D,)
    from_end = np.cumsum(lens[::-1])  # tokens of the last 1, 2, ... documents
    k = int(np.searchsorted(from_end, fraction * lens.sum())) + 1  # fewest last documents reaching the share
    k = min(max(k, min_eval_docs), n_docs - min_train_docs)
    return n_docs - k


def nsp_pairs(
    doc_bounds: np.ndarray,
    para_starts: np.ndarray,
    tokens: Callable[[int, int], tuple[np.ndarray, np.ndarray]],
    max_tokens: int,
    rng: np.random.Generator,
    short_seq_prob: float = 0.0,
    whole_words: bool = False,
) -> np.ndarray:
    """(N, 5) int64 rows (a_start, a_end, b_start, b_end, label) of BERT's next-sentence pairs.

    Google BERT's ``create_instances_from_document``: paragraphs (lines) are the segments; they are
    gathered until ``max_tokens`` (= max_seq_length - 3), A is the first 1..k-1 of them, B is the
    rest (label 0, "is next") or, half of the time, a stretch of a random other document (label 1);
    with ``short_seq_prob`` the target length is drawn from [2, max_tokens] (BERT Appendix A: short
    sequences to reduce the pre-train/fine-tune mismatch). A chunk that is a single paragraph is split
    at a random word start (Google's code would force a random B, skewing the 50/50 labels). The
    pair is then truncated to ``max_tokens``, dropping tokens from the front or back of the longer side.
    ``tokens(start, end) -> (ids, word_starts)`` reads the corpus (`TokenCorpus.tokens`).

    Google's code cuts two ends token by token: a random B's end (at the length budget) and the
    truncation. With ``whole_words`` (``block_packing="sentences"``) a random B runs to the end of
    the word its length budget stops in, and the truncation drops a whole word at a time from the
    front or back of the longer side (`_truncate_pair_words`), so every segment starts and ends at a
    word boundary; only a side that is a single word longer than the room left is cut inside it.
    """
    rows: list[tuple[int, int, int, int, int]] = []
    n_docs = len(doc_bounds)
    if n_docs < 2:
        raise SpanBertError("NSP pairs need a corpus of at least 2 documents (random B comes from another document)")
    for d in range(n_docs):
        ds, de = int(doc_bounds[d, 0]), int(doc_bounds[d, 1])
        lo, hi = np.searchsorted(para_starts, [ds, de])
        seg_starts = para_starts[lo:hi].tolist()
        if not seg_starts or seg_starts[0] != ds:
            seg_starts = [ds, *seg_starts]
        seg_bounds = list(zip(seg_starts, seg_starts[1:] + [de]))
        target = max_tokens
        if rng.random() < short_seq_prob:
            target = int(rng.integers(2, max_tokens + 1))
        i = 0
        chunk: list[tuple[int, int]] = []
        size = 0
        while i < len(seg_bounds):
            seg = seg_bounds[i]
            chunk.append(seg)
            size += seg[1] - seg[0]
            if i == len(seg_bounds) - 1 or size >= target:
                a_start = chunk[0][0]
                chunk_end = chunk[-1][1]
                if len(chunk) >= 2:
                    a_end = chunk[int(rng.integers(1, len(chunk)))][0]
                else:  # one long paragraph: split at a random word start inside it
                    cands = a_start + 1 + np.flatnonzero(tokens(a_start + 1, chunk_end)[1])
                    a_end = int(rng.choice(cands)) if len(cands) else chunk_end
                if a_end < chunk_end and rng.random() >= 0.5:
                    b_start, b_end, label = a_end, chunk_end, 0
                else:
                    label = 1
                    other = int(rng.integers(0, n_docs - 1))
                    other += other >= d  # any document but this one
                    os_, oe = int(doc_bounds[other, 0]), int(doc_bounds[other, 1])
                    olo, ohi = np.searchsorted(para_starts, [os_, oe])
                    ostarts = [s for s in para_starts[olo:ohi].tolist()] or [os_]
                    b_start = int(ostarts[int(rng.integers(0, len(ostarts)))])
                    b_end = min(oe, b_start + max(target - (a_end - a_start), 1))
                    if whole_words:  # finish the word B stops in; the truncation below makes room
                        b_end = _word_end(b_end, oe, tokens)
                    # the segments of this chunk that B did not use go back (Google's "put back")
                    if a_end < chunk_end:
                        back = sum(1 for s in chunk if s[0] >= a_end)
                        i -= back
                    chunk_end = a_end
                if whole_words:
                    a_start, a_end, b_start, b_end = _truncate_pair_words(
                        a_start, a_end, b_start, b_end, max_tokens, rng, tokens
                    )
                else:
                    a_start, a_end, b_start, b_end = _truncate_pair(a_start, a_end, b_start, b_end, max_tokens, rng)
                if a_end > a_start and b_end > b_start:
                    rows.append((a_start, a_end, b_start, b_end, label))
                chunk, size = [], 0
                target = max_tokens
                if rng.random() < short_seq_prob:
                    target = int(rng.integers(2, max_tokens + 1))
            i += 1
    return np.asarray(rows, dtype=np.int64).reshape(-1, 5)


def _word_end(end: int, doc_end: int, tokens) -> int:
    """The first word boundary at or after ``end`` (a word start, or ``doc_end``)."""
    if end >= doc_end:
        return doc_end
    for stop in (min(doc_end, end + 64), doc_end):  # a word is rarely 64 pieces: read a short window first
        nxt = np.flatnonzero(tokens(end, stop)[1])  # word starts from ``end`` on
        if len(nxt):
            return end + int(nxt[0])
    return doc_end


def _truncate_pair_words(a0, a1, b0, b1, max_tokens, rng, tokens):
    """`_truncate_pair` one whole word at a time: the longer side loses its first or last word (at
    random). Segments start and end at word boundaries, so they still do; a side that is a single
    word longer than the room left loses tokens instead."""
    wa = collections.deque((a0 + np.flatnonzero(tokens(a0, a1)[1])).tolist())  # word starts of A
    wb = collections.deque((b0 + np.flatnonzero(tokens(b0, b1)[1])).tolist())
    while (a1 - a0) + (b1 - b0) > max_tokens:
        if (a1 - a0) > (b1 - b0):
            a0, a1 = _drop_word(wa, a0, a1, rng.random() < 0.5)
        else:
            b0, b1 = _drop_word(wb, b0, b1, rng.random() < 0.5)
    return a0, a1, b0, b1


def _drop_word(starts: collections.deque, s: int, e: int, front: bool) -> tuple[int, int]:
    """[s, e) without its first (``front``) or last word; ``starts`` (its word starts) is updated."""
    while starts and starts[0] < s:  # word starts the token-level fallback cut past
        starts.popleft()
    if len(starts) < 2:  # one word (or part of one) left: drop a token
        return (s + 1, e) if front else (s, e - 1)
    if front:
        starts.popleft()
        return starts[0], e
    return s, starts.pop()


def _truncate_pair(a0, a1, b0, b1, max_tokens, rng):
    """Google BERT's truncate_seq_pair: cut the longer side, at its front or back at random."""
    while (a1 - a0) + (b1 - b0) > max_tokens:
        if (a1 - a0) > (b1 - b0):
            if rng.random() < 0.5:
                a0 += 1
            else:
                a1 -= 1
        else:
            if rng.random() < 0.5:
                b0 += 1
            else:
                b1 -= 1
    return a0, a1, b0, b1


_TRUE = np.ones(1, dtype=bool)


def _example_state(seed: int, epoch: int, index: int) -> dict[str, Any]:
    """PCG64 state whose 128-bit state and increment are a BLAKE2b hash of (seed, epoch, index)."""
    h = hashlib.blake2b(f"{seed},{epoch},{int(index)}".encode(), digest_size=32, person=b"spanbert-mask").digest()
    return {
        "bit_generator": "PCG64",
        "state": {"state": int.from_bytes(h[:16], "little"), "inc": int.from_bytes(h[16:], "little") | 1},
        "has_uint32": 0,
        "uinteger": 0,
    }


def example_generator(seed: int, epoch: int, index: int) -> np.random.Generator:
    """A fresh generator seeded from (seed, epoch, index) alone: the one `PretrainDataset` masks
    example ``index`` of ``epoch`` with, and the one `write_static_masks` masks example ``index`` of
    duplicate ``epoch`` with (the static masks' documented seed)."""
    gen = np.random.Generator(np.random.PCG64(0))
    gen.bit_generator.state = _example_state(seed, epoch, index)
    return gen


class PretrainDataset:
    """Map-style dataset of masked pre-training examples (numpy dicts; `collate_pretrain` batches them).

    Example i of epoch e is masked with a generator seeded from (seed, e, i) alone (`example_rng`), so
    masks are the same whatever the worker count, the batch or a resume, and differ between epochs
    (dynamic masking, §4.2 (a)). With ``static=True`` example i of epoch e is read from the masks
    stored in the corpus (copy e mod dupe_factor), equally a pure function of (i, e).
    """

    def __init__(
        self,
        corpus: TokenCorpus | str | os.PathLike,
        tokenizer: Tokenizer | None = None,
        max_seq_length: int = 512,
        *,
        nsp: bool = False,
        mode: Literal["single", "nsp"] | None = None,
        scheme: str | None = None,
        short_seq_prob: float = 0.0,
        seed: int = 0,
        masking: MaskingConfig | None = None,
        mask_ratio: float | None = None,
        max_span_length: int | None = None,
        documents: tuple[int, int] | None = None,
        block_packing: Literal["sentences", "fixed"] = "sentences",
        static: bool = False,
        **masking_overrides: Any,
    ):
        """``corpus``: a `preprocess` output (path or `TokenCorpus`). ``tokenizer``: defaults to the corpus's
        own. ``mode="nsp"`` (or ``nsp=True``): BERT sentence pairs; ``"single"``: SpanBERT blocks.
        Masking: a `MaskingConfig`, and/or its fields as keywords (``scheme``, ``mask_ratio`` = mask_prob,
        ``max_span_length`` = max_span_len, ``geometric_p``, ``anchor``, ...). ``documents=(lo, hi)``:
        use only documents lo..hi-1 — blocks, NSP pairs and their "random next" segments all come from
        them, so a held-out split by documents (`held_out_documents`) shares no text with training.
        ``block_packing="sentences"`` (default): single-sequence blocks are whole lines packed up to
        ``max_seq_length - 2`` (`sentence_blocks`) and NSP segments end at word boundaries; ``"fixed"``:
        the blocks of versions before 2026-11-23, each document cut every ``max_seq_length - 2`` tokens
        (`single_segment_blocks`), and NSP segments cut token by token as Google's code.
        ``static=True``: read the masks `spanbert preprocess --dupe_factor` stored in the corpus for
        ``max_seq_length`` (Google BERT's static masking; epoch e reads duplicate e mod dupe_factor) and
        its stored blocks or NSP pairs; ``seed`` then plays no part (the masks were seeded at preprocess
        time). The stored settings must equal this dataset's (`static_settings`), else a
        `SpanBertError` names both."""
        self.corpus = corpus if isinstance(corpus, TokenCorpus) else TokenCorpus(corpus)
        n_docs = self.corpus.num_docs
        lo, hi = documents if documents is not None else (0, n_docs)
        if not 0 <= lo <= hi <= n_docs:
            raise SpanBertError(f"documents=({lo}, {hi}) is outside the corpus's {n_docs} documents")
        self.documents = (int(lo), int(hi))
        self.doc_bounds = self.corpus.doc_bounds[lo:hi]  # (D', 2) the documents this dataset draws from
        tok = tokenizer if tokenizer is not None else self.corpus.tokenizer
        if tok.vocab_size != self.corpus.vocab_size:
            raise SpanBertError(
                f"the tokenizer has {tok.vocab_size} tokens but {self.corpus.path} was preprocessed with "
                f"{self.corpus.vocab_size}; use the corpus's own tokenizer ({self.corpus.path / 'tokenizer'})"
            )
        if mode is not None:
            if mode not in ("single", "nsp"):
                raise SpanBertError(f"mode must be 'single' or 'nsp', not {mode!r}")
            nsp = mode == "nsp"
        if max_seq_length < 5:
            raise SpanBertError(f"max_seq_length={max_seq_length} is too short; expected at least 5")
        if block_packing not in BLOCK_PACKINGS:
            raise SpanBertError(
                f"block_packing: found {block_packing!r}, expected one of: {', '.join(BLOCK_PACKINGS)}"
            )
        self.block_packing = block_packing
        self.max_seq_length = max_seq_length
        self.nsp = nsp
        self.seed = seed
        cfg = masking or MaskingConfig()
        if scheme is not None:
            masking_overrides["scheme"] = scheme
        if mask_ratio is not None:
            masking_overrides["mask_prob"] = mask_ratio
        if max_span_length is not None:
            masking_overrides["max_span_len"] = max_span_length
        if masking_overrides:
            import dataclasses

            valid = {f.name for f in dataclasses.fields(MaskingConfig)}
            unknown = sorted(set(masking_overrides) - valid)
            if unknown:
                raise SpanBertError(f"unknown masking option(s) {unknown}; valid: {', '.join(sorted(valid))}")
            cfg = dataclasses.replace(cfg, **masking_overrides)
        if cfg.scheme not in SCHEMES:
            raise SpanBertError(f"unknown masking scheme {cfg.scheme!r}; choose from: {', '.join(SCHEMES)}")
        self.masking = cfg
        self._kind = {"named_entity": "entity", "noun_phrase": "noun_phrase"}.get(cfg.scheme)
        if self._kind is not None and self._kind not in self.corpus.candidate_spans:
            raise SpanBertError(
                f"the {cfg.scheme} scheme needs candidate spans: re-run spanbert preprocess with --candidates {self._kind}"
            )
        self.cls_id, self.sep_id, self.pad_id, self.mask_id = tok.cls_id, tok.sep_id, tok.pad_id, tok.mask_id
        self._cls, self._sep = np.array([self.cls_id], dtype=np.int64), np.array([self.sep_id], dtype=np.int64)
        self.special_ids = tuple(int(i) for i in tok.special_ids())
        self.sampler = UnigramSampler(self.corpus.unigram_counts(), self.special_ids)
        # The epoch lives in shared memory so that persistent DataLoader workers see `set_epoch` too.
        import torch

        self._epoch = torch.zeros(1, dtype=torch.long).share_memory_()
        self.static: dict[str, Any] | None = None
        if static:
            settings = static_settings(nsp, max_seq_length, block_packing, short_seq_prob, cfg, self.documents)
            self.static = find_static_masks(self.corpus, settings, self.mask_id)
            examples = _load_examples(self.corpus.path, self.static)
            self.pairs, self.blocks = (examples, None) if nsp else (None, examples)
        elif nsp:
            rng = np.random.default_rng([seed, 0x5EED])
            self.pairs = nsp_pairs(
                self.doc_bounds,
                self.corpus.para_starts,
                self.corpus.tokens,
                max_seq_length - 3,
                rng,
                short_seq_prob,
                whole_words=block_packing == "sentences",
            )  # (N, 5)
            self.blocks = None
        elif block_packing == "sentences":
            self.blocks = sentence_blocks(
                self.doc_bounds, self.corpus.para_starts, self.corpus.tokens, max_seq_length - 2
            )  # (N, 2)
            self.pairs = None
        else:
            self.blocks = single_segment_blocks(self.doc_bounds, max_seq_length - 2)  # (N, 2)
            self.pairs = None

    def set_epoch(self, epoch: int) -> None:
        """Masks of the next epoch (dynamic masking, RoBERTa/SpanBERT §4.2 (a))."""
        self._epoch[0] = int(epoch)

    @property
    def epoch(self) -> int:
        view = self.__dict__.get("_epoch_view")
        if view is None:  # a numpy view of the shared tensor: reading it costs nanoseconds, not microseconds
            view = self._epoch_view = self._epoch.numpy()
        return int(view[0])

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_epoch_view", None)  # rebuilt from the shared tensor after unpickling
        state.pop("_local", None)  # per-thread generators, rebuilt on demand
        state.pop("_static_cache", None)  # memory maps of the static masks, reopened on demand
        return state

    def example_rng(self, index: int, epoch: int | None = None) -> np.random.Generator:
        """The generator example ``index`` of ``epoch`` (default: the current one) is masked with.

        A PCG64 whose 128-bit state and increment are a BLAKE2b hash of (seed, epoch, index): a pure
        function of the three, as ``default_rng([seed, epoch, index])`` would be, at a fifth of the cost
        (that call hashes with a SeedSequence and builds a new bit generator: ~20 µs, as much as
        masking half a block). The generator is reused per thread (re-seeded by each call), so the
        one returned is only valid until this thread's next call.
        """
        epoch = self.epoch if epoch is None else int(epoch)
        local = self.__dict__.get("_local")
        if local is None:
            local = self._local = threading.local()
        gen = getattr(local, "generator", None)
        if gen is None:
            gen = local.generator = np.random.Generator(np.random.PCG64(0))
        gen.bit_generator.state = _example_state(self.seed, epoch, index)
        return gen

    def __len__(self) -> int:
        return len(self.pairs) if self.nsp else len(self.blocks)

    def lengths(self) -> np.ndarray:
        """(N,) int64 tokens of each example, special tokens included (the same in every epoch: blocks
        and pairs are fixed, only the masks change); the trainer's token-budget batching reads them."""
        if self.nsp:
            p = self.pairs.astype(np.int64)
            return (p[:, 1] - p[:, 0]) + (p[:, 3] - p[:, 2]) + 3  # [CLS] A [SEP] B [SEP]
        b = self.blocks.astype(np.int64)
        return b[:, 1] - b[:, 0] + 2  # [CLS] block [SEP]

    def sequence(self, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, int | None]:
        """Example ``index`` before masking: (ids (T,) int64 with [CLS]/[SEP], word starts (T,) bool,
        token_type_ids (T,) int64, candidate spans (C, 2) or None, NSP label or None)."""
        cand = None
        label = None
        if self.nsp:
            a0, a1, b0, b1, label = (int(x) for x in self.pairs[index])
            a_ids, a_ws = self.corpus.tokens(a0, a1)
            b_ids, b_ws = self.corpus.tokens(b0, b1)
            ids = np.concatenate([[self.cls_id], a_ids, [self.sep_id], b_ids, [self.sep_id]])  # (T,)
            ws = np.concatenate([[True], a_ws, [True], b_ws, [True]])
            token_type_ids = np.zeros(len(ids), dtype=np.int64)
            token_type_ids[len(a_ids) + 2 :] = 1
            if self._kind is not None:
                ca = self.corpus.candidates(self._kind, a0, a1) + 1
                cb = self.corpus.candidates(self._kind, b0, b1) + len(a_ids) + 2
                cand = np.concatenate([ca, cb])
        else:
            start, end = self.blocks[index].tolist()
            body, body_ws = self.corpus.tokens(start, end)
            ids = np.concatenate((self._cls, body, self._sep))  # (T,) [CLS] body [SEP]
            ws = np.concatenate((_TRUE, body_ws, _TRUE))  # (T,)
            token_type_ids = np.zeros(len(ids), dtype=np.int64)
            if self._kind is not None:
                cand = self.corpus.candidates(self._kind, start, end) + 1
        return ids, ws, token_type_ids, cand, label

    def mask(self, ids: np.ndarray, ws: np.ndarray, cand: np.ndarray | None, rng: np.random.Generator) -> MaskResult:
        """`mask_block` with this dataset's masking settings."""
        m = self.masking
        return mask_block(
            ids,
            ws,
            m.scheme,
            rng,
            mask_id=self.mask_id,
            special_ids=self.special_ids,
            random_tokens=self.sampler,
            mask_prob=m.mask_prob,
            replace_probs=m.replace_probs,
            geometric_p=m.geometric_p,
            max_span_len=m.max_span_len,
            anchor=m.anchor,
            stop_mid_word=m.stop_mid_word,
            merge_adjacent=m.merge_adjacent,
            max_sbo_targets=m.max_sbo_targets,
            sbo_skip_edge=m.sbo_skip_edge,
            candidates=cand,
            candidate_fraction=m.candidate_fraction,
        )

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} examples")
        ids, ws, token_type_ids, cand, label = self.sequence(index)
        if self.static is not None:
            item = self._static_item(index, ids)
        else:
            r = self.mask(ids, ws, cand, self.example_rng(index))
            item = {
                "input_ids": r.input_ids,
                "labels": r.labels,
                "sbo_positions": r.sbo_positions,
                "sbo_left": r.sbo_left,
                "sbo_right": r.sbo_right,
                "sbo_rel": r.sbo_rel,
            }
        item["token_type_ids"] = token_type_ids
        if self.nsp:
            item["next_sentence_label"] = np.int64(label)
        return item

    @property
    def duplicate(self) -> int | None:
        """The static duplicate the current epoch reads (epoch mod dupe_factor); None when masking is dynamic."""
        return None if self.static is None else self.epoch % int(self.static["dupe_factor"])

    def _static_item(self, index: int, ids: np.ndarray) -> dict[str, np.ndarray]:
        """Example ``index`` with the stored masks of duplicate epoch mod dupe_factor (Google's data is
        reused across epochs: epoch e sees the masks of duplicate e mod dupe_factor)."""
        offsets, mlm, sbo = self._static_arrays(self.epoch % int(self.static["dupe_factor"]))
        m0, s0 = offsets[index].tolist()
        m1, s1 = offsets[index + 1].tolist()
        targets = mlm[m0:m1].astype(np.int64)  # (K, 2) position, input id there
        pos = targets[:, 0]
        ids = ids.astype(np.int64)
        input_ids = ids.copy()  # (T,)
        input_ids[pos] = targets[:, 1]
        labels = np.full(len(ids), IGNORE_INDEX, dtype=np.int64)  # (T,)
        labels[pos] = ids[pos]
        s = sbo[s0:s1].astype(np.int64)  # (M, 4) position, left, right, rel
        return {
            "input_ids": input_ids,
            "labels": labels,
            "sbo_positions": s[:, 0].copy(),
            "sbo_left": s[:, 1].copy(),
            "sbo_right": s[:, 2].copy(),
            "sbo_rel": s[:, 3].copy(),
        }

    def _static_arrays(self, duplicate: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(offsets (N+1, 2), mlm (K, 2), sbo (M, 4)) of one stored duplicate, memory-mapped on first use
        (per process: the maps are not pickled into DataLoader workers)."""
        cache = self.__dict__.get("_static_cache")
        if cache is None:
            cache = self._static_cache = {}
        arrays = cache.get(duplicate)
        if arrays is None:
            arrays = cache[duplicate] = _open_duplicate(self.corpus.path, self.static, duplicate)
        return arrays


# =============================================================================================
# Static masking (Google BERT's create_pretraining_data.py --dupe_factor)
#
# corpus/static-<max_seq_length>/
#   examples.npy          (N, 2) int64 blocks [start, end) or (N, 5) NSP pairs (a0, a1, b0, b1, label)
#   dup-000.offsets       (N+1, 2) int64 start of each example's rows in .mlm and .sbo
#   dup-000.mlm           (K, 2) position in the sequence, input id there ([MASK], random or unchanged)
#   dup-000.sbo           (M, 4) SBO target: position, left boundary, right boundary, relative position
#   dup-001.* ...         one set per duplicate
# The labels are the corpus tokens at the .mlm positions, so they are not stored. meta.json's
# "static_masks" lists the sets with the settings they were made with (`static_settings`).

STATIC_FORMAT = "spanbert-static-masks-v1"


@dataclass
class StaticMaskingConfig:
    """Static masking at preprocess time (Google BERT's ``create_pretraining_data.py``); defaults are Google's."""

    dupe_factor: int = 0
    """Masked copies of the data made at preprocess time (Google: 10); 0 = none, the pre-training run masks on the fly (dynamic masking)."""
    max_seq_length: tuple[int, ...] = (128,)
    """Sequence length(s) to make static masks for, one set each (Google BERT: 128, and 512 for the last 10% of steps)."""
    mode: str = "nsp"
    """Examples: nsp = BERT sentence pairs (google-bert, bert, mask-*), single = SpanBERT single sequences."""
    short_seq_prob: float = 0.1
    """NSP pairs: probability of a shorter target length (Google BERT: 0.1)."""
    block_packing: str = "sentences"
    """As spanbert pretrain --block_packing: sentences or fixed."""
    masking_seed: int = 12345
    """Seed of the stored pairs and masks (Google's --random_seed 12345)."""
    eval_fraction: float = 0.01
    """As spanbert pretrain --eval_fraction: the last documents holding this share of the tokens are held out and get no static masks (0 = none held out, for pretrain --max_eval_blocks 0)."""
    masking: MaskingConfig = dataclasses.field(default_factory=lambda: MaskingConfig(scheme="subword"))
    """The masking (scheme and its options) applied to each duplicate; Google BERT's: subword, 15%, 80/10/10."""

    def check(self, candidate_kinds: Sequence[str] = ()) -> None:
        """Reject settings no pre-training run could use, before any work."""
        if isinstance(self.dupe_factor, bool) or not isinstance(self.dupe_factor, int) or self.dupe_factor < 0:
            raise SpanBertError(f"--dupe_factor: found {self.dupe_factor!r}, expected an integer >= 0")
        if not self.max_seq_length or any(int(n) < 8 for n in self.max_seq_length):
            raise SpanBertError(f"--max_seq_length: found {list(self.max_seq_length)}, expected lengths of at least 8")
        if self.mode not in ("nsp", "single"):
            raise SpanBertError(f"--mode: found {self.mode!r}, expected nsp or single")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise SpanBertError(f"--short_seq_prob: found {self.short_seq_prob}, expected a probability in [0, 1]")
        if self.block_packing not in BLOCK_PACKINGS:
            raise SpanBertError(f"--block_packing: found {self.block_packing!r}, expected sentences or fixed")
        if not 0.0 <= self.eval_fraction < 1.0:
            raise SpanBertError(f"--eval_fraction: found {self.eval_fraction}, expected a number in [0, 1)")
        m = self.masking
        if m.scheme not in SCHEMES:
            raise SpanBertError(f"--masking: found {m.scheme!r}, expected one of: {', '.join(SCHEMES)}")
        if not 0.0 < m.mask_prob < 1.0:
            raise SpanBertError(f"--mask_prob: found {m.mask_prob}, expected a number between 0 and 1 (exclusive)")
        check_replace_probs(m.replace_probs)
        kind = {"named_entity": "entity", "noun_phrase": "noun_phrase"}.get(m.scheme)
        if kind is not None and kind not in candidate_kinds:
            raise SpanBertError(
                f"--masking {m.scheme}: found no --candidates {kind}, expected it (the scheme needs them)"
            )


def static_settings(
    nsp: bool,
    max_seq_length: int,
    block_packing: str,
    short_seq_prob: float,
    masking: MaskingConfig,
    documents: tuple[int, int],
) -> dict[str, Any]:
    """What static masks depend on, as JSON values: a pre-training dataset may read a stored set only
    when its own settings are these (`find_static_masks` compares them key by key)."""
    return json.loads(
        json.dumps(
            {
                "mode": "nsp" if nsp else "single",
                "max_seq_length": int(max_seq_length),
                "block_packing": block_packing,
                "short_seq_prob": float(short_seq_prob) if nsp else 0.0,  # single sequences do not use it
                "documents": [int(documents[0]), int(documents[1])],
                "masking": dataclasses.asdict(masking),
            }
        )
    )


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def static_mask_sets(corpus: TokenCorpus) -> list[dict[str, Any]]:
    """The static mask sets a corpus holds (meta.json ``static_masks``; empty for a dynamic corpus)."""
    return list(corpus.meta.get("static_masks") or [])


def find_static_masks(corpus: TokenCorpus, settings: dict[str, Any], mask_id: int | None = None) -> dict[str, Any]:
    """The corpus's static mask set for ``settings`` (`static_settings`); a `SpanBertError` naming the
    stored settings and the wanted ones when there is none, or when the set differs."""
    sets = static_mask_sets(corpus)
    if not sets:
        raise SpanBertError(
            f"{corpus.path}: found no static masks, expected some (spanbert preprocess --dupe_factor N); "
            "or mask on the fly (spanbert pretrain --static_masks off)"
        )
    length = settings["max_seq_length"]
    entry = next((e for e in sets if e.get("settings", {}).get("max_seq_length") == length), None)
    if entry is None:
        have = ", ".join(str(e.get("settings", {}).get("max_seq_length")) for e in sets)
        raise SpanBertError(
            f"{corpus.path}: found static masks for max_seq_length {have}, expected {length}; re-run spanbert "
            f"preprocess --dupe_factor N --max_seq_length {length}, or pass --static_masks off (dynamic masking)"
        )
    stored, wanted = _flat(entry["settings"]), _flat(settings)
    diff = [k for k in sorted(set(stored) | set(wanted)) if stored.get(k) != wanted.get(k)]
    if diff:
        found = ", ".join(f"{k}={stored.get(k)!r}" for k in diff)
        expected = ", ".join(f"{k}={wanted.get(k)!r}" for k in diff)
        raise SpanBertError(
            f"{corpus.path / entry['dir']}: found static masks made with {found}, expected this run's {expected}; "
            "re-run spanbert preprocess --dupe_factor with the run's settings, or pass --static_masks off "
            "(dynamic masking)"
        )
    if mask_id is not None and entry.get("mask_id") != mask_id:
        raise SpanBertError(
            f"{corpus.path / entry['dir']}: found static masks with [MASK] id {entry.get('mask_id')}, expected the "
            f"tokenizer's {mask_id}; use the corpus's own tokenizer"
        )
    return entry


def _load_examples(root: Path, entry: dict[str, Any]) -> np.ndarray:
    path = root / entry["dir"] / "examples.npy"
    width = 5 if entry["settings"]["mode"] == "nsp" else 2
    try:
        examples = np.load(path, mmap_mode="r")
    except (OSError, ValueError, EOFError) as e:
        raise DataError(path, f"cannot read the stored examples ({e}): {_DAMAGED}") from None
    if examples.shape != (int(entry["num_examples"]), width) or examples.dtype != np.int64:
        raise DataError(
            path,
            f"found {examples.dtype} {examples.shape}, expected int64 ({entry['num_examples']}, {width}): {_DAMAGED}",
        )
    return np.asarray(examples)


def _open_duplicate(root: Path, entry: dict[str, Any], d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    base = root / entry["dir"] / f"dup-{d:03d}"
    dtype = np.dtype(entry["dtype"])
    n = int(entry["num_examples"])
    k, m = (int(x) for x in entry["counts"][d])
    offsets = _memmap(Path(f"{base}.offsets"), np.int64, 2 * (n + 1)).reshape(n + 1, 2)
    if n and (offsets[-1, 0] != k or offsets[-1, 1] != m):
        raise DataError(
            Path(f"{base}.offsets"), f"found totals {offsets[-1].tolist()}, expected [{k}, {m}]: {_DAMAGED}"
        )
    mlm = _memmap(Path(f"{base}.mlm"), dtype, 2 * k).reshape(k, 2)
    sbo = _memmap(Path(f"{base}.sbo"), dtype, 4 * m).reshape(m, 4)
    return np.asarray(offsets), np.asarray(mlm), np.asarray(sbo)


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
        from tqdm import tqdm

        bar = tqdm(total=n * dupe_factor, unit="ex", desc=f"static masks ({max_seq_length} tokens)", file=sys.stderr)
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
# Collation


def collate_pretrain(
    items: Sequence[dict[str, np.ndarray]],
    pad_id: int = 0,
    max_predictions: int | None = None,
    pad_to: int | None = None,
) -> dict[str, Any]:
    """Batch `PretrainDataset` items into the tensors of docs/architecture.md ("Pre-training batches").

    MLM and SBO targets are flat lists of positions into the flattened (B*T) batch. With
    ``max_predictions`` every sequence contributes exactly that many MLM and SBO entries (padding
    entries point at its [CLS] with label -100; masked tokens beyond it keep their corrupted input
    but are not scored), so every shape but (B, T) is fixed; with ``pad_to`` T is fixed too.
    ``attention_mask`` is left out when no sequence is padded.
    """
    import torch

    B = len(items)
    lens = np.array([len(it["input_ids"]) for it in items])
    T = int(lens.max()) if pad_to is None else int(pad_to)
    if lens.max() > T:
        raise SpanBertError(f"a sequence of {lens.max()} tokens does not fit pad_to={T}")
    # One (B, T) array per field, filled row by row; the targets are then found for the whole batch at
    # once (a handful of numpy calls per batch instead of a dozen per sequence).
    input_ids = np.full((B, T), pad_id, dtype=np.int64)  # (B, T)
    token_type_ids = np.zeros((B, T), dtype=np.int64)  # (B, T)
    labels = np.full((B, T), IGNORE_INDEX, dtype=np.int64)  # (B, T)
    for b, it in enumerate(items):
        n = len(it["input_ids"])
        input_ids[b, :n] = it["input_ids"]
        token_type_ids[b, :n] = it["token_type_ids"]
        labels[b, :n] = it["labels"]
    flat_labels = labels.reshape(-1)  # (B*T,)
    if max_predictions is None:
        mlm_pos = (flat_labels != IGNORE_INDEX).nonzero()[0]  # (K,) flat positions b*T+t, in order
        counts = [len(it["sbo_positions"]) for it in items]
        base = np.repeat(np.arange(B, dtype=np.int64) * T, counts)  # (M,) b*T of each SBO target
        sbo_pos = np.concatenate([it["sbo_positions"] for it in items], dtype=np.int64) + base  # (M,)
        cols = {
            "mlm_positions": mlm_pos,
            "mlm_labels": flat_labels[mlm_pos],
            "sbo_positions": sbo_pos,
            "sbo_labels": flat_labels[sbo_pos],
            "sbo_left": np.concatenate([it["sbo_left"] for it in items], dtype=np.int64) + base,
            "sbo_right": np.concatenate([it["sbo_right"] for it in items], dtype=np.int64) + base,
            "sbo_rel": np.concatenate([it["sbo_rel"] for it in items], dtype=np.int64),
        }
    else:  # a fixed number of entries per sequence: truncate or pad each one
        parts: dict[str, list[np.ndarray]] = {k: [] for k in ("mpos", "mlab", "pos", "lab", "left", "right", "rel")}
        for b, it in enumerate(items):
            base = b * T
            row = labels[b]
            pos = (row != IGNORE_INDEX).nonzero()[0]  # (n_b,)
            pos, lab = _fix(pos, row[pos], max_predictions)
            sp = it["sbo_positions"]
            sp, s_lab = _fix(sp, row[sp], max_predictions)
            parts["mpos"].append(pos + base)
            parts["mlab"].append(lab)
            parts["pos"].append(sp + base)
            parts["lab"].append(s_lab)
            parts["left"].append(_fix(it["sbo_left"], s_lab, max_predictions)[0] + base)
            parts["right"].append(_fix(it["sbo_right"], s_lab, max_predictions)[0] + base)
            parts["rel"].append(_fix(it["sbo_rel"], s_lab, max_predictions)[0])
        names = dict(mpos="mlm_positions", mlab="mlm_labels", pos="sbo_positions", lab="sbo_labels")
        names.update(left="sbo_left", right="sbo_right", rel="sbo_rel")
        cols = {names[k]: np.concatenate(v, dtype=np.int64) for k, v in parts.items()}

    batch: dict[str, Any] = {"input_ids": torch.from_numpy(input_ids)}
    if (lens < T).any():
        batch["attention_mask"] = torch.from_numpy((np.arange(T)[None, :] < lens[:, None]).astype(np.int64))
    batch["token_type_ids"] = torch.from_numpy(token_type_ids)
    for name, col in cols.items():
        batch[name] = torch.from_numpy(col)
    if "next_sentence_label" in items[0]:
        batch["next_sentence_label"] = torch.tensor([int(it["next_sentence_label"]) for it in items], dtype=torch.long)
    return batch


def pretrain_target_counts(batch: dict[str, Any]) -> dict[str, int]:
    """Real (non-padding) targets of each pre-training head in a `collate_pretrain` batch, keyed as
    `SpanBertForPreTraining`'s ``loss_terms``: mlm, sbo (when the batch has SBO targets), nsp (when
    it has NSP labels). The trainer weights each head's mean loss by these counts (`count_targets`)."""
    counts = {"mlm": int((batch["mlm_labels"] != IGNORE_INDEX).sum())}
    if batch.get("sbo_labels") is not None:
        counts["sbo"] = int((batch["sbo_labels"] != IGNORE_INDEX).sum())
    if batch.get("next_sentence_label") is not None:
        counts["nsp"] = int((batch["next_sentence_label"] != IGNORE_INDEX).sum())
    return counts


def _fix(values: np.ndarray, labels: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Truncate or pad to exactly k entries; padding entries are position 0 ([CLS]) with label -100."""
    values, labels = values[:k], labels[:k]
    pad = k - len(values)
    if pad:
        values = np.concatenate([values, np.zeros(pad, dtype=np.int64)])
        labels = np.concatenate([labels, np.full(pad, IGNORE_INDEX, dtype=np.int64)])
    return values, labels


def make_collate(pad_id: int = 0, max_predictions: int | None = None, pad_to: int | None = None):
    """A picklable ``collate_fn`` (for DataLoader workers) with these options."""
    return functools.partial(collate_pretrain, pad_id=pad_id, max_predictions=max_predictions, pad_to=pad_to)


def pretrain_dataloader(
    dataset: PretrainDataset,
    batch_size: int,
    *,
    shuffle: bool = True,
    seed: int = 0,
    num_workers: int = 2,
    pin_memory: bool | None = None,
    max_predictions: int | None = None,
    pad_to: int | None = None,
    drop_last: bool = False,
):
    """A torch DataLoader over ``dataset``: seeded shuffling, worker processes, pinned memory on CUDA."""
    import torch
    from torch.utils.data import DataLoader

    if pin_memory is None:
        pin_memory = torch.cuda.is_available()
    gen = torch.Generator()
    gen.manual_seed(seed)
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle,
        generator=gen,
        num_workers=num_workers,
        pin_memory=pin_memory,
        drop_last=drop_last,
        persistent_workers=num_workers > 0,
        collate_fn=make_collate(dataset.pad_id, max_predictions, pad_to),
    )


# =============================================================================================
# The quick-start corpus


def builtin_corpus(path: str | os.PathLike, include_module_docs: bool = False) -> Path:
    """Write an English corpus every Python carries, offline: the reference-manual topics of
    ``pydoc_data.topics`` (79 documents, ~465k characters), optionally plus the docstrings of the
    standard-library modules. Plain text, one paragraph per line, a blank line between documents.
    """
    from pydoc_data.topics import topics

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
    import importlib
    import pkgutil
    import warnings

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
    p = argparse.ArgumentParser(
        prog=prog,
        description="Tokenize a text corpus into sharded memory-mapped token arrays for pre-training. "
        "Plain text: a blank line separates documents, a line is a paragraph; .jsonl: a 'text' field per line; "
        "files may be .gz.",
    )
    p.add_argument("--corpus", nargs="+", required=True, metavar="PATH", help="text / .jsonl files or directories")
    p.add_argument(
        "--tokenizer", required=True, metavar="DIR", help="tokenizer directory (tokenizer.json or vocab.txt)"
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
        help="tokenizer processes (default: 0 = one per CPU core, at most 8)",
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
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_static_arguments(p)
    args = p.parse_args(argv)
    static = _static_from_args(args)
    out = preprocess(
        args.corpus,
        args.tokenizer,
        args.output_dir,
        one_doc_per_line=args.one_doc_per_line,
        num_workers=args.num_workers,
        shard_tokens=args.shard_tokens,
        candidates=args.candidates,
        spacy_model=args.spacy_model,
        progress=not args.quiet,
        static=static,
    )
    from spanbert.distributed import print0

    c = TokenCorpus(out)
    print0(f"wrote {c.num_tokens:,} tokens in {c.num_docs:,} documents, {len(c.meta['shards'])} shard(s) to {out}")
    for e in static_mask_sets(c):
        print0(
            f"static masks: {e['dupe_factor']} duplicate(s) of {e['num_examples']:,} {e['settings']['mode']} examples "
            f"of <= {e['settings']['max_seq_length']} tokens in {out / e['dir']}"
        )
    return 0


def _add_static_arguments(p: argparse.ArgumentParser) -> None:
    """Google BERT's static masking options (`StaticMaskingConfig`; the masking ones are `MaskingConfig`'s)."""
    from spanbert.config import add_dataclass_arguments, field_docs
    from spanbert.masking import add_replace_probs_arguments

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
    from spanbert.config import dataclass_from_args

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
