"""The span probes' data: each probe's files read into contexts (the words one encoder input holds: a
sentence, a GAP paragraph, a window of LitBank sentences) with their targets (one or two word spans and
the set of gold labels), and the fixed subsamples every encoder is probed on.

Spans are inclusive word indices here; `spanbert.tasks.probe_features` maps them to sub-word positions.
The readers are the tasks' own where one exists (`conll.read_conll`, `trees.read_trees`,
`relation.read_relation_file`, `coref.data.read_documents`); GAP's TSV is read here. A subsample is drawn
by a seed of its own (`probe_sets.DATA_SEED`), never the training seed, and depends on the words only, not
on a tokenizer, so every encoder is probed on the very same targets (docs/probes.md, "Data").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from spanbert.errors import DataError, SpanBertError, decode_utf8
from spanbert.metrics.classification import conll_chunks
from spanbert.tasks.conll import read_conll
from spanbert.tasks.coref.data import CorefDocument, read_documents
from spanbert.tasks.coref.data import read_conll as read_coref_conll
from spanbert.tasks.probe_sets import DATA_SEED, PROBE_SETS
from spanbert.tasks.relation import PTB_BRACKETS, read_relation_file
from spanbert.tasks.trees import Tree, read_trees

Span = tuple[int, int]
"""Inclusive (first word, last word)."""

COREFERENT, DISTINCT = "coreferent", "distinct"
"""The two labels of a coreference arc (edge probing's coreference tasks have two labels too)."""


@dataclass(frozen=True)
class Target:
    """What one probe prediction is about: its spans (one, or two in order) and the gold label set."""

    spans: tuple[Span, ...]
    labels: tuple[str, ...]
    """Sorted; several for a span that carries more than one (a unary chain of constituents)."""


@dataclass
class Context:
    """The words of one encoder input and the targets inside them."""

    id: str
    """Where it comes from (``file:line``, a record id, ``document:first word``), for errors and predictions."""
    words: list[str]
    targets: list[Target] = field(default_factory=list)


def n_targets(contexts: list[Context]) -> int:
    return sum(len(c.targets) for c in contexts)


def label_list(contexts: list[Context]) -> list[str]:
    """Every gold label of the contexts, sorted: the probe's outputs, saved with it as id2label."""
    return sorted({label for c in contexts for t in c.targets for label in t.labels})


# ---------------------------------------------------------------------------------------------
# Readers


def read_entities(path: Path, seed: int = DATA_SEED) -> list[Context]:
    """CoNLL-2003: every gold entity of a sentence, typed (PER, LOC, ORG, MISC); sentences without one add
    nothing (edge probing's entity labelling classifies given spans, it does not find them)."""
    out = []
    for s in read_conll(path):
        targets = [Target(((a, b),), (kind,)) for a, b, kind in conll_chunks(s.tags or [])]
        if targets:
            out.append(Context(f"{path.name}:{s.line}", list(s.words), targets))
    if not out:
        raise DataError(path, "found no entity; expected CoNLL-2003 sentences with B-/I- entity tags")
    return out


def constituent_spans(tree: Tree) -> dict[Span, list[str]]:
    """The labels of every non-terminal span of a tree but its root (``TOP``), by span: a unary chain
    (``(S (VP ...))`` over the same words) gives one span several labels."""
    spans: dict[Span, list[str]] = {}

    def walk(t: Tree, start: int) -> int:  # returns the word after t
        if t.is_preterminal:
            return start + 1
        end = start
        for child in t.children:
            end = walk(child, end)
        if t is not tree:
            spans.setdefault((start, end - 1), [])
            if t.label not in spans[(start, end - 1)]:
                spans[(start, end - 1)].append(t.label)
        return end

    walk(tree, 0)
    return spans


def _ptb_contexts(path: Path, targets_of: Callable[[Tree], list[Target]]) -> list[Context]:
    got = read_trees(path)
    out = []
    for tree, (file, line) in zip(got.trees, got.sources):
        words = [PTB_BRACKETS.get(w, w) for w in tree.words()]  # -LRB- is "(" to a sub-word vocabulary
        out.append(Context(f"{Path(file).name}:{line}", words, targets_of(tree)))
    return out


def read_constituents(path: Path, seed: int = DATA_SEED) -> list[Context]:
    """PTB trees (cleaned as the parser reads them: no empty elements, no function tags): every
    non-terminal span with its label set, from the whole sentence down to two-word phrases and the
    non-terminals over one word."""
    return _ptb_contexts(path, lambda tree: [Target((span,), tuple(sorted(labels)))
                                             for span, labels in sorted(constituent_spans(tree).items())])  # fmt: skip


def read_pos(path: Path, seed: int = DATA_SEED) -> list[Context]:
    """PTB trees: every word a one-word span labelled with its part-of-speech tag."""
    return _ptb_contexts(path, lambda tree: [Target(((i, i),), (tag,)) for i, tag in enumerate(tree.tags())])


def read_relations(path: Path, seed: int = DATA_SEED) -> list[Context]:
    """SemEval-2010 Task 8 (or TACRED JSON): the e1 and e2 spans (subject, object) with the directed relation."""
    out = []
    for ex in read_relation_file(path):
        spans = ((ex.subj_start, ex.subj_end), (ex.obj_start, ex.obj_end))
        out.append(Context(ex.id, [PTB_BRACKETS.get(w, w) for w in ex.tokens], [Target(spans, (str(ex.relation),))]))
    return out


GAP_COLUMNS = ("ID", "Text", "Pronoun", "Pronoun-offset", "A", "A-offset", "A-coref", "B", "B-offset", "B-coref")
"""The GAP TSV's columns (a last URL column is optional)."""
_WORD = re.compile(r"\w+|[^\w\s]")  # letters/digits runs and single marks, as SemEval's words are cut


def _mention_words(path: Path, line: int, text: str, starts: list[int], ends: list[int], mention: str,
                   offset: str) -> Span:  # fmt: skip
    """The words a GAP mention covers (its characters ``offset .. offset + len(mention)``), checked."""
    if not offset.strip().isdigit():
        raise DataError(
            path, f"found offset {offset!r} of {mention!r}; expected a character offset (an integer)", line=line
        )
    a = int(offset)
    b = a + len(mention)
    if not mention or text[a:b] != mention:
        raise DataError(path, f"found {text[a:b]!r} at offset {a} of the text, expected the mention {mention!r} "
                        "(offsets count characters of the Text column from 0)", line=line)  # fmt: skip
    covered = [i for i, (s, e) in enumerate(zip(starts, ends)) if s < b and e > a]
    if not covered:
        raise DataError(
            path, f"found no word at offset {a} ({mention!r}); expected the mention to hold a word", line=line
        )
    return covered[0], covered[-1]


def _coref_flag(path: Path, line: int, value: str, column: str) -> str:
    flag = value.strip().upper()
    if flag not in ("TRUE", "FALSE"):
        raise DataError(path, f"found {column} {value!r}; expected TRUE or FALSE", line=line)
    return COREFERENT if flag == "TRUE" else DISTINCT


def read_gap(path: Path, seed: int = DATA_SEED) -> list[Context]:
    """GAP TSV (a header, then ID, Text, Pronoun, Pronoun-offset, A, A-offset, A-coref, B, B-offset,
    B-coref, URL): one context a row, two arcs (pronoun, name A) and (pronoun, name B), each coreferent or
    distinct. Words are runs of letters and digits and single marks; a mention covers the words its
    characters touch."""
    try:
        text = decode_utf8(path.read_bytes(), path, "UTF-8 GAP TSV")
    except FileNotFoundError:
        raise SpanBertError(f"{path}: file not found (expected a GAP TSV file)") from None
    lines = text.split("\n")
    header = tuple(lines[0].rstrip("\r").split("\t")[: len(GAP_COLUMNS)]) if lines else ()
    if header != GAP_COLUMNS:
        raise DataError(path, f"found the header {lines[0][:80]!r}; expected the GAP columns {', '.join(GAP_COLUMNS)}, URL",
                        line=1)  # fmt: skip
    out = []
    for n, raw in enumerate(lines[1:], 2):
        row = raw.rstrip("\r")
        if not row.strip():
            continue
        cols = row.split("\t")
        if len(cols) not in (len(GAP_COLUMNS), len(GAP_COLUMNS) + 1):
            raise DataError(path, f"found {len(cols)} tab-separated columns; expected {len(GAP_COLUMNS) + 1} "
                            f"({', '.join(GAP_COLUMNS)}, URL)", line=n)  # fmt: skip
        rid, body = cols[0], cols[1]
        found = list(_WORD.finditer(body))
        words, starts, ends = [m.group() for m in found], [m.start() for m in found], [m.end() for m in found]
        pronoun = _mention_words(path, n, body, starts, ends, cols[2], cols[3])
        targets = []
        for mention, offset, flag, column in (
            (cols[4], cols[5], cols[6], "A-coref"),
            (cols[7], cols[8], cols[9], "B-coref"),
        ):
            name = _mention_words(path, n, body, starts, ends, mention, offset)
            targets.append(Target((pronoun, name), (_coref_flag(path, n, flag, column),)))
        out.append(Context(rid or f"{path.name}:{n}", words, targets))
    if not out:
        raise DataError(path, "found no rows after the header; expected GAP rows")
    return out


WINDOW_WORDS = 80
"""Words of a LitBank window (whole sentences; a longer sentence is a window alone): about 100 sub-words
for a WordPiece vocabulary, inside a 128-token input. In words, so that every tokenizer sees the same
windows; one that needs more sub-words cuts the window, and the arcs it cuts are counted."""


def litbank_documents(path: Path) -> list[CorefDocument]:
    """A tenfold split's ``.ids`` file (``tenfold_splits/K/train.ids``, each line ``NAME.tsv`` naming
    ``conll/NAME.conll.gz`` of the LitBank folder), or CoNLL-2012 files or a folder of them."""
    if path.suffix != ".ids":
        return read_documents(path)
    try:
        names = decode_utf8(path.read_bytes(), path, "a list of LitBank document names").split()
    except FileNotFoundError:
        raise SpanBertError(f"{path}: file not found (expected a LitBank tenfold_splits/K/*.ids file)") from None
    if not names:
        raise DataError(path, "found no document names; expected one NAME.tsv a line")
    conll = path.resolve().parents[2] / "conll"
    docs = []
    for n, name in enumerate(names, 1):
        file = conll / name.replace(".tsv", ".conll.gz")
        if not file.is_file():
            raise DataError(path, f"found {name!r}, but {file} is not there; expected the LitBank folder's conll/ "
                            "two levels above tenfold_splits/K/", line=n)  # fmt: skip
        docs += read_coref_conll(file)
    return docs


def litbank_windows(doc: CorefDocument, max_words: int = WINDOW_WORDS) -> list[tuple[int, int]]:
    """(first word, end) of each window of a document: consecutive whole sentences up to ``max_words``."""
    windows: list[tuple[int, int]] = []
    start = end = 0
    for sentence in doc.sentences:
        if end > start and end + len(sentence) - start > max_words:
            windows.append((start, end))
            start = end
        end += len(sentence)
    if end > start:
        windows.append((start, end))
    return windows


def mention_pairs(doc: CorefDocument, window: tuple[int, int], rng: np.random.Generator) -> list[Target]:
    """The arcs of one window: every pair of its mentions in one cluster (coreferent), and as many pairs
    from two clusters (distinct; all of them when there are fewer), drawn by ``rng``, so both labels are
    about equally frequent; in text order, the earlier mention first. Spans are relative to the window's
    first word."""
    a, b = window
    mentions = sorted({(s, e, k) for k, cluster in enumerate(doc.clusters) for s, e in cluster if a <= s and e < b})
    same, other = [], []
    for i, (s1, e1, k1) in enumerate(mentions):
        for s2, e2, k2 in mentions[i + 1 :]:
            if (s1, e1) == (s2, e2):
                continue  # one span in two clusters: not an arc between two mentions
            (same if k1 == k2 else other).append(((s1 - a, e1 - a), (s2 - a, e2 - a)))
    picked = sorted(rng.choice(len(other), size=min(len(same), len(other)), replace=False).tolist()) if same else []
    arcs = [(p, COREFERENT) for p in same] + [(other[i], DISTINCT) for i in picked]
    return [Target(spans, (label,)) for spans, label in sorted(arcs)]


def read_litbank(path: Path, seed: int = DATA_SEED) -> list[Context]:
    """LitBank: windows of whole sentences (`litbank_windows`), each with its arcs (`mention_pairs`); the
    distinct pairs are drawn by ``seed``, one generator per (document, window), so a window's arcs do not
    depend on the other files read."""
    out = []
    for d, doc in enumerate(litbank_documents(path)):
        words = doc.words
        for w, (a, b) in enumerate(litbank_windows(doc)):
            targets = mention_pairs(doc, (a, b), np.random.default_rng([seed, d, w]))
            if targets:
                out.append(Context(f"{doc.doc_id}:{a}", words[a:b], targets))
    if not out:
        raise DataError(path, "found no window with two mentions of one entity; expected LitBank coreference")
    return out


READERS: dict[str, Callable[[Path, int], list[Context]]] = {
    "entities": read_entities,
    "constituents": read_constituents,
    "pos": read_pos,
    "relations": read_relations,
    "gap": read_gap,
    "litbank": read_litbank,
}
"""Probe name -> its reader (path, data seed) -> contexts; every name of `probe_sets.PROBE_SETS`."""


def read_probe(name: str, path: str | Path, seed: int = DATA_SEED) -> list[Context]:
    """The contexts of a probe's file (or folder), every span checked against its words."""
    path = Path(path)
    if not path.exists():
        raise SpanBertError(f"{path}: no such file or folder (expected {PROBE_SETS[name].data})")
    contexts = READERS[name](path, seed)
    for c in contexts:
        for t in c.targets:
            if any(not 0 <= s <= e < len(c.words) for s, e in t.spans):
                raise DataError(path, f"found the span(s) {list(t.spans)} outside the {len(c.words)} words of "
                                "the text; expected spans inside it", record=c.id)  # fmt: skip
    return contexts


# ---------------------------------------------------------------------------------------------
# Fixed subsamples


DEV_SHARE = 0.1
"""The share of a training file's contexts carved out as dev when the dev file is the training file (SemEval
has train and test only): drawn with `probe_sets.DATA_SEED` whatever ``--data_seed``, so the carve is fixed."""


def carve_dev(contexts: list[Context], share: float = DEV_SHARE) -> tuple[list[Context], list[Context]]:
    """(train, dev) of one file's contexts: a fixed ``share`` of them (at least one) is dev, the rest
    train, each in the file's order; disjoint, and the same on every call."""
    n = len(contexts)
    k = max(1, round(share * n)) if n > 1 else 0
    dev = set(np.random.default_rng(DATA_SEED).permutation(n)[:k].tolist())
    return [c for i, c in enumerate(contexts) if i not in dev], [c for i, c in enumerate(contexts) if i in dev]


def subsample(contexts: list[Context], max_targets: int | None, seed: int = DATA_SEED) -> list[Context]:
    """At most ``max_targets`` targets (None or 0: all): whole contexts in an order drawn by ``seed`` until
    there are that many (the last one keeps its first targets), returned in the file's order. The
    targets of one context stay together: they share one encoder input, which is computed once."""
    total = n_targets(contexts)
    if not max_targets or total <= max_targets:
        return contexts
    keep: dict[int, int] = {}
    count = 0
    for i in np.random.default_rng(seed).permutation(len(contexts)).tolist():
        take = min(len(contexts[i].targets), max_targets - count)
        if take:
            keep[i] = take
            count += take
        if count >= max_targets:
            break
    return [Context(c.id, c.words, c.targets[: keep[i]]) for i, c in enumerate(contexts) if i in keep]
