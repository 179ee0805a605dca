"""Coreference data: `CorefDocument`, the CoNLL-2012 reader (strict about its `#begin document` lines and
coreference column) and writer, OntoNotes genres."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from spanbert.errors import DataError, SpanBertError
from spanbert.utils import atomic_write, read_text

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
    # read whole, so a byte that is not UTF-8 is named with its line and offset; split on "\n" only, as
    # reading the file line by line did (str.splitlines also splits at \x0b, \x1c, ...)
    pieces = read_text(path).split("\n")
    if pieces and pieces[-1] == "":
        pieces.pop()
    lineno = 0
    for lineno, raw in enumerate(pieces, 1):
        line = raw.rstrip("\n").rstrip("\r")
        if line.startswith("#begin document"):
            if doc is not None:
                raise DataError(
                    path, f"found '#begin document' inside document {doc.key!r} (begun at line "
                    f"{doc.source.rsplit(':', 1)[-1]}); expected '#end document' first", line=lineno,
                )  # fmt: skip
            m = _BEGIN.match(line)
            if not m or not m.group("key").strip():
                raise DataError(path, f"found {line[:80]!r}; expected '#begin document (KEY); part NNN'", line=lineno)
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


