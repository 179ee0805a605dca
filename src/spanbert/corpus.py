"""A preprocessed corpus: the folder `spanbert preprocess` writes, read back memory-mapped.

    output_dir/
      meta.json                  format, counts, dtypes, shard list
      tokenizer/                 the tokenizer used (the corpus is self-contained)
      unigram.npy                (V,) int64 token counts: random replacements follow them (§2)
      shard-00000.ids            (n,) uint16 | int32 token ids
      shard-00000.starts         (n,) uint8 1 where the token starts a word (none where the ids tell it:
                                 ``"word_starts": "from_ids"`` in the shard's entry, flags from word_starts.npy)
      word_starts.npy            (V,) uint8 1 where a token id starts a word
      shard-00000.docs           (D+1,) int64 document offsets into the shard
      shard-00000.paras          (P,) int64 paragraph (line) start offsets (NSP segment boundaries)
      shard-00000.entity         (C, 2) int32 inclusive token spans (named_entity scheme, optional)
      shard-00000.noun_phrase    (C, 2) int32 inclusive token spans (noun_phrase scheme, optional)
      static-128/                stored masks (``--dupe_factor N``, `spanbert.static_masks`, optional)
      index/                     example indices and epoch orders (`spanbert.block_index`, written on first use)

Documents never cross shards. `TokenCorpus` opens the folder (checking meta.json and the size of every
array, so a damaged corpus is a `DataError` naming the file; nothing is read or kept open) and reads
tokens by global position, mapping a shard when a read first needs it (`spanbert.shards`).
`spanbert.preprocess` writes the folder.
"""

from __future__ import annotations

import bisect
import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from spanbert.errors import DataError, SpanBertError
from spanbert.shards import ShardArrays
from spanbert.tokenization import Tokenizer, load_tokenizer

FORMAT = "spanbert-corpus-v1"
CANDIDATE_KINDS = ("entity", "noun_phrase")
# The format of the static mask sets meta.json lists under "static_masks" (`spanbert.static_masks`):
# here, because reading meta.json checks those entries.
STATIC_FORMAT = "spanbert-static-masks-v1"
WORD_STARTS = "word_starts.npy"
"""(V,) uint8: 1 where a token id starts a word. A shard whose meta.json entry says ``"word_starts":
"from_ids"`` has no ``.starts`` file: its word starts are this table at its ids (`spanbert preprocess`
writes that where the table gives every token's flag, as for WordPiece, whose ``##`` pieces alone
continue a word)."""


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

    Token positions are global: shard k's tokens follow shard k-1's. Opening checks meta.json and the
    size of every file (no file is read or kept open); a shard's token arrays are mapped when a read
    first needs them, a bounded number at a time (`spanbert.shards`), and its document and line offsets
    are read (and checked) when first asked for: `shard_docs`, `shard_paras`, or the whole corpus's
    `doc_bounds` and `para_starts`, which a training process never needs (`spanbert.block_index`).
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
        offsets, doc_counts, names, stored = [0], [0], [], []
        for s in self.meta["shards"]:
            n = int(s["num_tokens"])
            name = self.path / s["name"]
            _check_size(Path(f"{name}.ids"), n * dtype.itemsize, f"{n} tokens")
            stored.append(s.get("word_starts", "file") != "from_ids")
            if stored[-1]:
                _check_size(Path(f"{name}.starts"), n, f"{n} tokens")
            _check_offsets_size(Path(f"{name}.docs"), int(s["num_docs"]) + 1, "document")
            _check_offsets_size(Path(f"{name}.paras"), s.get("num_paragraphs"), "paragraph")
            names.append(name)
            offsets.append(offsets[-1] + n)
            doc_counts.append(doc_counts[-1] + int(s["num_docs"]))
        table = _word_start_table(self.path / WORD_STARTS, self.vocab_size) if not all(stored) else None
        self.shard_offsets = np.asarray(offsets, dtype=np.int64)  # (K+1,)
        self.shard_doc_offsets = np.asarray(doc_counts, dtype=np.int64)
        """(K+1,) index of each shard's first document (documents are numbered across shards)."""
        self.num_tokens = int(self.shard_offsets[-1])
        self.num_docs = int(self.shard_doc_offsets[-1])
        self._shards = ShardArrays(names, [int(s["num_tokens"]) for s in self.meta["shards"]], dtype, stored, table)
        self._tokenizer: Tokenizer | None = None
        self._offsets: list[int] = self.shard_offsets.tolist()
        self._doc_bounds: np.ndarray | None = None
        self._para_starts: np.ndarray | None = None
        self._candidate_spans: dict[str, np.ndarray] | None = None
        self._ids_checked = [self._check_ids(k) for k in range(self.num_shards)]

    @property
    def num_shards(self) -> int:
        return len(self._offsets) - 1

    def shard_docs(self, k: int) -> np.ndarray:
        """(D_k+1,) int64 document offsets of shard k, relative to the shard (0 first, its tokens last)."""
        s = self.meta["shards"][k]
        return _offsets_file(Path(f"{self.path / s['name']}.docs"), int(s["num_tokens"]), int(s["num_docs"]) + 1, "document")

    def shard_paras(self, k: int) -> np.ndarray:
        """(P_k,) int64 paragraph (line) starts of shard k, relative to the shard."""
        s = self.meta["shards"][k]
        return _offsets_file(Path(f"{self.path / s['name']}.paras"), int(s["num_tokens"]), s.get("num_paragraphs"), "paragraph")

    def shard_word_starts(self, k: int, positions: np.ndarray) -> np.ndarray:
        """(n,) bool: whether a word starts at each of ``positions`` (relative to shard k)."""
        ids, starts = self._shards.arrays(k)
        if starts is None and not self._ids_checked[k]:  # the table is indexed by ids: they must lie below it first
            self._ids_checked[k] = self._check_ids(k, read=True)
        return starts[positions] if starts is not None else self._shards.table[ids[positions]]

    @property
    def doc_bounds(self) -> np.ndarray:
        """(D, 2) global [start, end) of every document (read from every shard on first use)."""
        if self._doc_bounds is None:
            parts = [np.stack([d[:-1], d[1:]], axis=1) + base
                     for base, d in ((self._offsets[k], self.shard_docs(k)) for k in range(self.num_shards))]  # fmt: skip
            self._doc_bounds = np.concatenate(parts) if parts else np.zeros((0, 2), np.int64)
        return self._doc_bounds

    @property
    def para_starts(self) -> np.ndarray:
        """(P,) global start of every paragraph (line), sorted (read from every shard on first use)."""
        if self._para_starts is None:
            parts = [self.shard_paras(k) + self._offsets[k] for k in range(self.num_shards)]
            self._para_starts = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        return self._para_starts

    @property
    def candidate_spans(self) -> dict[str, np.ndarray]:
        """kind -> (C, 2) global inclusive candidate spans sorted by start (read on first use)."""
        if self._candidate_spans is None:
            spans: dict[str, list[np.ndarray]] = {k: [] for k in self.meta.get("candidates", [])}
            for k, s in enumerate(self.meta["shards"]):
                for kind in spans:
                    c = _read_array(Path(f"{self.path / s['name']}.{kind}"), np.int32).reshape(-1, 2).astype(np.int64)
                    c += self._offsets[k]
                    spans[kind].append(c[np.argsort(c[:, 0], kind="stable")])
            self._candidate_spans = {
                k: np.concatenate(v) if v else np.zeros((0, 2), np.int64) for k, v in spans.items()
            }
        return self._candidate_spans

    @candidate_spans.setter
    def candidate_spans(self, value: dict[str, np.ndarray]) -> None:
        self._candidate_spans = value

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

        Read-only views, no copy (the word starts of a shard that stores none are ``table[ids]``, a new
        array): ids keep the corpus' dtype (``meta["id_dtype"]``, uint16 for vocabularies up to 65,536),
        so cast before arithmetic that could overflow it.
        """
        k = bisect.bisect_right(self._offsets, start) - 1
        if not 0 <= k < self.num_shards or end < start:
            raise IndexError(f"token range [{start}, {end}) is outside the corpus of {self.num_tokens} tokens")
        if end > self._offsets[k + 1]:
            raise IndexError(f"token range [{start}, {end}) crosses a shard boundary")
        if not self._ids_checked[k]:
            self._ids_checked[k] = self._check_ids(k, read=True)
        a = start - self._offsets[k]
        ids = self._shards.arrays(k)[0][a : a + end - start]
        # what is read is checked too (a microsecond a block): a shard damaged after meta.json recorded its
        # largest id was an IndexError deep in training, naming no file
        if len(ids) and int(ids.max()) >= self.vocab_size:
            shard = self.meta["shards"][k]
            raise DataError(
                self.path / f"{shard['name']}.ids",
                f"found token id {int(ids.max())} at position {a + int(ids.argmax())}, expected ids below the "
                f"{self.vocab_size:,} of the corpus's vocabulary (meta.json vocab_size, max_id {shard.get('max_id')}): "
                f"{_DAMAGED}",
            )
        return self._shards.tokens(k, a, end - self._offsets[k])

    def _check_ids(self, k: int, read: bool = False) -> bool:
        """Whether shard ``k``'s ids are known to lie below the vocabulary (issue 58.6: an id past it was an
        IndexError at step 1 naming no file): from the largest id `spanbert preprocess` records per shard,
        at open, reading no token; a shard of a corpus prepared before that record is read once, when its
        tokens are first read (``read``), never all shards at the start. An id past it is a DataError naming
        the shard's file."""
        shard = self.meta["shards"][k]
        top = shard.get("max_id")
        if top is None:
            if not read:
                return False
            ids = self._shards.arrays(k)[0]
            top = int(ids.max()) if len(ids) else -1
        if isinstance(top, int) and top < self.vocab_size:
            return True
        raise DataError(
            self.path / f"{shard['name']}.ids",
            f"found token id {top!r}, expected ids below the {self.vocab_size:,} of the corpus's vocabulary "
            f"(meta.json vocab_size): {_DAMAGED}",
        )

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
            f"TokenCorpus({str(self.path)!r}, tokens={self.num_tokens}, docs={self.num_docs}, shards={self.num_shards})"
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


def _check_size(path: Path, size: int, what: str, remedy: str = _DAMAGED) -> None:
    """The file exists and holds ``size`` bytes (``what``: the count it should hold, in words), without opening it;
    else a `DataError` ending in ``remedy`` (what to do about it)."""
    try:
        found = path.stat().st_size
    except OSError:
        raise DataError(path, f"file missing, expected {what}: {remedy}") from None
    if found != size:
        raise DataError(path, f"{found} bytes, expected {size} ({what}): {remedy}")


def _check_offsets_size(path: Path, count: int | None, what: str) -> None:
    """An offsets file holds whole int64s, ``count`` of them when given (its content is checked when read)."""
    try:
        found = path.stat().st_size
    except OSError:
        raise DataError(path, f"cannot read: file missing; {_DAMAGED}") from None
    if found % 8:
        raise DataError(path, f"found {found} bytes, expected a multiple of 8: {_DAMAGED}")
    if count is not None and found // 8 != count:
        raise DataError(path, f"found {found // 8} {what} offsets, expected {count}: {_DAMAGED}")


def _word_start_table(path: Path, vocab_size: int) -> np.ndarray:
    """(V,) bool word-start flag of each token id (`WORD_STARTS`)."""
    try:
        table = np.load(path)
    except (OSError, ValueError, EOFError) as e:
        raise DataError(path, f"cannot read the word-start flags of the token ids ({e}): {_DAMAGED}") from None
    if table.shape != (vocab_size,):
        raise DataError(path, f"found shape {table.shape}, expected ({vocab_size},): {_DAMAGED}")
    return table.astype(bool)


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
