"""Example indices: a corpus's blocks or NSP pairs computed once per corpus and settings, cached in the corpus
folder, memory-mapped read-only by every process (issue 57).

Before, every rank of every start packed every block of the corpus in a Python loop over its lines
(48.6 CPU-s and 2.6 GB per rank for 4 B tokens). Now `example_index` looks the settings up in
``CORPUS/index/`` (`IndexSpec`: single blocks or NSP pairs, length, packing, documents, and NSP's seed
and short-sequence probability); when they are not there one process builds them -- rank 0 under
torchrun, while the others wait on the rendezvous store, not in a collective with a timeout
(`distributed.on_main_long`) -- and writes them atomically, and every rank maps the files:

    index/<mode>-<packing>-<length>-<hash>/
      index.json     format, settings, the corpus's fingerprint, the example count, the column count
      rows.bin       (N, 2) int64 blocks [start, end), or (N, 5) NSP pairs (a0, a1, b0, b1, label)
      lengths.bin    (N,) uint16 (int32 past 65,535) tokens of each example, special tokens included

The hash covers the format, the settings and the corpus's meta.json (without the entries that change
when nothing of the token stream does: static masks, timing), so a corpus made again is indexed again.
A corpus folder that cannot be written (a read-only mount) has its indices in the user's cache
(``$XDG_CACHE_HOME/spanbert/index``, else ``~/.cache/spanbert/index``).

The blocks are those of `blocks.sentence_blocks` / `blocks.single_segment_blocks` on the corpus's
documents, computed shard by shard (documents never cross shards) in windows of whole documents, so
the builder's memory is bounded by a window, never the corpus; the sentence packing is vectorised
(`blocks.pack_sentences`). NSP pairs are BERT's sequential recipe with one generator over the whole
corpus (`blocks.nsp_pairs`): their random draws depend on every earlier decision, so they are built by
that loop, once, and cached like the blocks (the exact pairs of a seed are kept: tests/test_batch_pinning.py).
`held_out_split` finds the held-out documents from the last shards' document offsets alone.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spanbert import distributed
from spanbert.blocks import BLOCK_PACKINGS, nsp_pairs, pack_sentences, single_segment_blocks
from spanbert.corpus import TokenCorpus, _check_size
from spanbert.errors import DataError, SpanBertError
from spanbert.folders import make_folders
from spanbert.utils import atomic_dir

INDEX_FORMAT = "spanbert-example-index-v1"
INDEX_DIR = "index"
WINDOW_TOKENS = 1 << 22
"""Tokens of whole documents packed at once (a longer document is a window of its own): the builder's
memory is a few bytes per token of a window."""


@dataclass(frozen=True)
class IndexSpec:
    """What decides a corpus's examples: the rest (masking, batching) is applied when they are read."""

    mode: str
    """single: [CLS] block [SEP] blocks; nsp: BERT's [CLS] A [SEP] B [SEP] pairs."""
    max_seq_length: int
    block_packing: str = "sentences"
    documents: tuple[int, int] = (0, 0)
    """Documents [lo, hi) the examples come from (NSP's random B too)."""
    seed: int = 0
    """NSP: the pairing's generator (`dataset.PretrainDataset`'s ``seed``); no part in single blocks."""
    short_seq_prob: float = 0.0
    """NSP: the share of pairs with a shorter target length."""

    def settings(self) -> dict[str, Any]:
        out = {"mode": self.mode, "max_seq_length": int(self.max_seq_length), "block_packing": self.block_packing,
               "documents": [int(x) for x in self.documents]}  # fmt: skip
        if self.mode == "nsp":
            out.update(seed=int(self.seed), short_seq_prob=float(self.short_seq_prob))
        return out

    @property
    def columns(self) -> int:
        return 5 if self.mode == "nsp" else 2


@dataclass
class ExampleIndex:
    """A corpus's examples: ``rows`` (N, 2) blocks or (N, 5) pairs, int64; ``lengths`` (N,) tokens each, special
    tokens included; read-only memory maps of the files in ``path`` (None: built in memory, not cached)."""

    rows: np.ndarray
    lengths: np.ndarray
    path: Path | None = None

    @classmethod
    def open(cls, path: Path, spec: IndexSpec | None = None, fingerprint: str | None = None) -> ExampleIndex:
        """Map the index in ``path``; `DataError` when it is damaged or made for other settings."""
        meta_file = path / "index.json"
        try:
            meta = json.loads(meta_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise DataError(meta_file, f"cannot read the example index ({e}); delete {path} to build it again") from None
        expected = {"format": INDEX_FORMAT}
        if spec is not None:
            expected["settings"] = spec.settings()
        if fingerprint is not None:
            expected["corpus"] = fingerprint
        for key, value in expected.items():
            if meta.get(key) != value:
                raise DataError(meta_file, f"found {key} {meta.get(key)!r}, expected {value!r}; delete {path} to build it again")
        n, columns = int(meta["num_examples"]), int(meta["columns"])
        length_dtype = np.dtype(meta["length_dtype"])
        arrays = []
        for name, dtype, shape in (("rows.bin", np.int64, (n, columns)), ("lengths.bin", length_dtype, (n,))):
            f = path / name
            _check_size(f, int(np.prod(shape)) * np.dtype(dtype).itemsize, f"{n:,} rows",
                        f"delete {path} to build the index again")  # fmt: skip
            arrays.append(np.memmap(f, dtype=dtype, mode="r", shape=shape) if n else np.zeros(shape, dtype))
        return cls(arrays[0], arrays[1], path)


def corpus_fingerprint(corpus: TokenCorpus) -> str:
    """A hash of what the corpus's examples depend on: its meta.json less static masks and timing."""
    meta = {k: v for k, v in corpus.meta.items() if k not in ("static_masks", "seconds")}
    return hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()[:16]


def entry_name(spec: IndexSpec, fingerprint: str) -> str:
    key = json.dumps({"format": INDEX_FORMAT, "corpus": fingerprint, **spec.settings()}, sort_keys=True)
    return f"{spec.mode}-{spec.block_packing}-{spec.max_seq_length}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def index_roots(corpus: TokenCorpus) -> list[Path]:
    """Where a corpus's indices go, in order of preference: its own folder, then the user's cache."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "spanbert" / INDEX_DIR
    folder = hashlib.sha256(str(corpus.path.resolve()).encode()).hexdigest()[:16]
    return [corpus.path / INDEX_DIR, cache / folder]


def example_index(corpus: TokenCorpus, spec: IndexSpec, cache: bool = True) -> ExampleIndex:
    """The examples of ``corpus`` under ``spec``: read from its cache, else built once and cached.

    Under torchrun rank 0 looks up or builds the index and tells the others where it is through the
    rendezvous store (`distributed.on_main_long`: a build longer than the process group's timeout is
    fine); every rank then maps the same files. A rank that cannot see them (another machine, a folder
    that is not shared) builds its own copy. ``cache=False`` builds in memory and writes nothing.
    """
    _check_spec(corpus, spec)
    if not cache:
        rows = _concat(_iter_rows(corpus, spec), spec.columns)
        return ExampleIndex(rows, lengths_of(rows, spec))
    fp = corpus_fingerprint(corpus)
    name = entry_name(spec, fp)
    where = distributed.on_main_long(lambda: str(_find_or_build(corpus, spec, fp, name)), key=f"index/{name}")
    try:
        return ExampleIndex.open(Path(where), spec, fp)
    except DataError:
        if distributed.is_main():
            raise
        return ExampleIndex.open(_find_or_build(corpus, spec, fp, name), spec, fp)  # not shared with rank 0


def build_index(corpus: TokenCorpus, spec: IndexSpec, root: Path, name: str, fp: str) -> Path:
    """Compute the examples and write ``root/name`` atomically (a kill leaves no index that looks complete);
    returns its path. Memory: one shard's offsets and one window's arrays at a time."""
    make_folders(root)  # recorded in the corpus folder's manifest, where it has one
    n = 0
    longest = 0
    with atomic_dir(root / name) as tmp:
        with open(tmp / "rows.bin", "wb") as f_rows, open(tmp / "lengths.bin.i64", "wb") as f_len:
            for rows in _iter_rows(corpus, spec):
                lengths = lengths_of(rows, spec, np.int64)
                f_rows.write(np.ascontiguousarray(rows, dtype=np.int64).tobytes())
                f_len.write(lengths.tobytes())
                n += len(rows)
                longest = max(longest, int(lengths.max()) if len(lengths) else 0)
        length_dtype = np.dtype(np.uint16 if longest <= np.iinfo(np.uint16).max else np.int32)
        wide = np.fromfile(tmp / "lengths.bin.i64", dtype=np.int64)
        wide.astype(length_dtype).tofile(tmp / "lengths.bin")
        del wide
        (tmp / "lengths.bin.i64").unlink()
        meta = {"format": INDEX_FORMAT, "corpus": fp, "settings": spec.settings(), "num_examples": n,
                "columns": spec.columns, "length_dtype": length_dtype.name}  # fmt: skip
        (tmp / "index.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return root / name


def _find_or_build(corpus: TokenCorpus, spec: IndexSpec, fp: str, name: str) -> Path:
    """The folder of a valid cached index (the first root that has one), else of one built in the first
    root that can be written."""
    roots = index_roots(corpus)
    for root in roots:
        if (root / name / "index.json").is_file():
            try:
                ExampleIndex.open(root / name, spec, fp)
                return root / name
            except DataError:
                pass  # damaged or stale: built again below
    errors = []
    for root in roots:
        try:
            return build_index(corpus, spec, root, name, fp)
        except (PermissionError, SpanBertError) as e:  # a read-only corpus folder, an `index` of the user's
            errors.append(f"{root}: {e}")
        except OSError as e:
            if e.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise
            errors.append(f"{root}: {e.strerror}")
    raise SpanBertError(f"{corpus.path}: cannot write its example index ({'; '.join(errors)}); expected a writable "
                        "corpus folder or cache folder")  # fmt: skip


def _check_spec(corpus: TokenCorpus, spec: IndexSpec) -> None:
    if spec.mode not in ("single", "nsp"):
        raise SpanBertError(f"mode must be 'single' or 'nsp', not {spec.mode!r}")
    if spec.block_packing not in BLOCK_PACKINGS:
        raise SpanBertError(f"block_packing: found {spec.block_packing!r}, expected one of: {', '.join(BLOCK_PACKINGS)}")
    lo, hi = spec.documents
    if not 0 <= lo <= hi <= corpus.num_docs:
        raise SpanBertError(f"documents=({lo}, {hi}) is outside the corpus's {corpus.num_docs} documents")


def lengths_of(rows: np.ndarray, spec: IndexSpec, dtype: Any = None) -> np.ndarray:
    """(N,) tokens of each example with its special tokens: [CLS] block [SEP], or [CLS] A [SEP] B [SEP]."""
    rows = np.asarray(rows, dtype=np.int64).reshape(-1, spec.columns)
    if spec.mode == "nsp":
        out = (rows[:, 1] - rows[:, 0]) + (rows[:, 3] - rows[:, 2]) + 3
    else:
        out = rows[:, 1] - rows[:, 0] + 2
    if dtype is None:
        dtype = np.uint16 if spec.max_seq_length <= np.iinfo(np.uint16).max else np.int32
    return out.astype(dtype)


def _concat(parts: Iterator[np.ndarray], columns: int) -> np.ndarray:
    arrays = list(parts)
    return np.concatenate(arrays) if arrays else np.zeros((0, columns), np.int64)


def _iter_rows(corpus: TokenCorpus, spec: IndexSpec) -> Iterator[np.ndarray]:
    """The examples in corpus order, a shard (single blocks) or the whole range (NSP pairs) at a time."""
    lo, hi = spec.documents
    if spec.mode == "nsp":
        bounds, paras = document_range(corpus, lo, hi)
        rng = np.random.default_rng([spec.seed, 0x5EED])  # `PretrainDataset`'s generator of the pairing
        yield nsp_pairs(bounds, paras, corpus.tokens, spec.max_seq_length - 3, rng, spec.short_seq_prob,
                        whole_words=spec.block_packing == "sentences")  # fmt: skip
        return
    max_tokens = spec.max_seq_length - 2
    for k in range(corpus.num_shards):
        d0 = int(corpus.shard_doc_offsets[k])
        a, b = max(lo - d0, 0), min(hi - d0, int(corpus.shard_doc_offsets[k + 1]) - d0)
        if a >= b:
            continue
        docs = corpus.shard_docs(k)
        base = int(corpus.shard_offsets[k])
        if spec.block_packing == "fixed":
            yield single_segment_blocks(np.stack([docs[a:b], docs[a + 1 : b + 1]], axis=1), max_tokens) + base
            continue
        paras = corpus.shard_paras(k)
        for w0, w1 in _windows(docs, a, b):
            yield _pack_window(corpus, k, docs, paras, w0, w1, max_tokens) + base


def _windows(docs: np.ndarray, a: int, b: int) -> Iterator[tuple[int, int]]:
    """Document ranges [w0, w1) of about `WINDOW_TOKENS` tokens covering documents a..b-1 (at least one each)."""
    w0 = a
    while w0 < b:
        w1 = int(np.searchsorted(docs, docs[w0] + WINDOW_TOKENS, side="right")) - 1
        w1 = min(b, max(w0 + 1, w1))
        yield w0, w1
        w0 = w1


def _pack_window(corpus: TokenCorpus, k: int, docs: np.ndarray, paras: np.ndarray, w0: int, w1: int,
                 max_tokens: int) -> np.ndarray:  # fmt: skip
    """`pack_sentences` of documents w0..w1-1 of shard k, in shard coordinates."""
    t0, t1 = int(docs[w0]), int(docs[w1])
    bounds = np.stack([docs[w0:w1], docs[w0 + 1 : w1 + 1]], axis=1) - t0
    lines = paras[np.searchsorted(paras, t0) : np.searchsorted(paras, t1)] - t0

    def word_starts_in(la: np.ndarray, lb: np.ndarray) -> np.ndarray:
        inner = lb - la - 1  # (L,) positions after each long line's first token
        at = np.arange(int(inner.sum()), dtype=np.int64) + np.repeat(la + 1 - (np.cumsum(inner) - inner), inner)
        return at[corpus.shard_word_starts(k, at + t0)]

    return pack_sentences(bounds, lines, word_starts_in, max_tokens) + t0


def document_range(corpus: TokenCorpus, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """(doc bounds (hi-lo, 2), paragraph starts inside them), global, read from the shards that hold them."""
    bounds, paras = [], []
    for k in range(corpus.num_shards):
        d0, d1 = int(corpus.shard_doc_offsets[k]), int(corpus.shard_doc_offsets[k + 1])
        a, b = max(lo - d0, 0), min(hi, d1) - d0
        if a >= b:
            continue
        docs, base = corpus.shard_docs(k), int(corpus.shard_offsets[k])
        p = corpus.shard_paras(k)
        bounds.append(np.stack([docs[a:b], docs[a + 1 : b + 1]], axis=1) + base)
        paras.append(p[np.searchsorted(p, docs[a]) : np.searchsorted(p, docs[b])] + base)
    if not bounds:
        return np.zeros((0, 2), np.int64), np.zeros(0, np.int64)
    return np.concatenate(bounds), np.concatenate(paras)


def held_out_split(corpus: TokenCorpus, fraction: float, min_train_docs: int = 1, min_eval_docs: int = 1) -> int:
    """`blocks.held_out_documents` of the whole corpus, reading only the last shards' document offsets (as
    many as hold ``fraction`` of the tokens): the index of the first held-out document."""
    n_docs = corpus.num_docs
    if fraction <= 0 or n_docs < min_train_docs + min_eval_docs:
        return n_docs
    target = fraction * corpus.num_tokens
    seen_docs, seen_tokens = 0, 0
    k_docs = None
    for k in reversed(range(corpus.num_shards)):
        docs = corpus.shard_docs(k)
        lens = np.diff(docs)[::-1]  # the shard's documents, last first
        from_end = seen_tokens + np.cumsum(lens)
        i = int(np.searchsorted(from_end, target))
        if i < len(lens):
            k_docs = seen_docs + i + 1
            break
        seen_docs += len(lens)
        seen_tokens = int(from_end[-1]) if len(lens) else seen_tokens
    if k_docs is None:  # the share is every token (numerically): as searchsorted past the end
        k_docs = n_docs + 1
    k_docs = min(max(k_docs, min_eval_docs), n_docs - min_train_docs)
    return n_docs - k_docs


__all__ = ["ExampleIndex", "IndexSpec", "build_index", "corpus_fingerprint", "example_index", "held_out_split"]
