"""Penn Treebank trees: reading ``.mrg`` files, folders of them and one-tree-a-line files; the standard
cleaning; writing one tree a line (no torch).

Formats read (the same bracket reader for all): the LDC ``.mrg`` layout (each tree over several
lines, several trees a file, each inside an outer bracket with no label, ``( (S ...) )``), and the
one-tree-a-line files parsers exchange, with or without a ``TOP``/``ROOT`` wrapper. A folder is read
as its ``*.mrg`` files (recursively), sorted by path.

Cleaning (`clean`), as parsing work on the PTB usually does (Collins 1999; Kitaev & Klein 2018):

1. the outer wrapper (no label, ``TOP`` or ``ROOT``) becomes the root ``TOP``; a tree without one is
   put under ``TOP``. Every tree this module returns has the root ``TOP``, which EVALB's COLLINS.prm
   does not score, so written trees score the same whatever wrapper the input had;
2. empty elements go: ``-NONE-`` leaves (traces ``*T*-1``, ``0``, ``*U*``...), then every constituent
   left without words (``(NP-SBJ (-NONE- *))`` disappears entirely);
3. function tags and co-indices go: a phrase label is cut at its first ``-`` or ``=``
   (``NP-SBJ-1`` -> ``NP``, ``PP-LOC=2`` -> ``PP``, ``S-TPC-1`` -> ``S``), as EVALB cuts labels; a label
   that starts with ``-`` is whole (``-LRB-``, ``-RRB-``, ``-NONE-``), and tags keep their form;
4. nothing else: ``PRT`` and ``ADVP`` stay distinct (only the metric treats them as equal, EQ_LABEL),
   punctuation stays in the tree (only the metric deletes it), unary chains stay (the parser collapses
   them for its chart and restores them on output).

Malformed input (unbalanced brackets, a word without a tag, ``()``, an empty file) is a
`spanbert.errors.DataError` naming the file and the line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from spanbert.errors import DataError, SpanBertError, decode_utf8
from spanbert.utils import atomic_write

WRAPPERS = ("", "TOP", "ROOT")
"""Labels of the outer bracket that wraps a whole tree (LDC: none; parsers: TOP; Stanford: ROOT)."""

ROOT = "TOP"


@dataclass
class Tree:
    """A constituent (``children``) or a preterminal (``word`` set, no children)."""

    label: str
    children: list[Tree] = field(default_factory=list)
    word: str | None = None
    line: int = 0
    """Line of its opening bracket in the file it came from (0 when built in memory)."""

    @property
    def is_preterminal(self) -> bool:
        return self.word is not None

    def leaves(self) -> list[Tree]:
        """The preterminals, left to right."""
        if self.is_preterminal:
            return [self]
        return [leaf for c in self.children for leaf in c.leaves()]

    def words(self) -> list[str]:
        return [t.word for t in self.leaves()]  # type: ignore[misc]

    def tags(self) -> list[str]:
        return [t.label for t in self.leaves()]

    def __str__(self) -> str:
        """One line, ``(TOP (S (NP (DT The) (NN cat)) ...))``: what EVALB reads."""
        if self.is_preterminal:
            return f"({self.label} {self.word})"
        return f"({self.label} {' '.join(str(c) for c in self.children)})"


@dataclass
class TreeFile:
    """The trees of one input, each with the file and line it starts at."""

    trees: list[Tree]
    sources: list[tuple[str, int]]


def parse_brackets(text: str, path: str | Path) -> Iterator[Tree]:
    """Every top-level bracket of ``text`` as a raw `Tree` (no cleaning)."""
    tokens: list[str] = []
    lines: list[int] = []  # the line of each token, for the trees' sources and the errors
    for n, row in enumerate(text.split("\n"), 1):
        got = row.replace("(", " ( ").replace(")", " ) ").split()
        tokens += got
        lines += [n] * len(got)
    i = 0

    def node(k: int) -> tuple[Tree, int]:
        # tokens[k] is "("; returns the node and the index after its ")"
        start = lines[k]
        k += 1
        label = ""
        if k < len(tokens) and tokens[k] not in "()":
            label = tokens[k]
            k += 1
        if k >= len(tokens):
            raise DataError(
                path, f"unbalanced brackets: the bracket opened here{_at(label)} is never closed", line=start
            )
        tok, pos = tokens[k], lines[k]
        if tok == ")":
            what = "empty brackets" if not label else "a tag without its word, or a word without its tag"
            raise DataError(path, f"found '({label})', {what}; expected (TAG word) or (LABEL (...) ...)",
                            line=start)  # fmt: skip
        if tok != "(":  # (TAG word)
            word = tok
            k += 1
            if k >= len(tokens):
                raise DataError(path, f"unbalanced brackets: the bracket opened here{_at(label)} is never closed",
                                line=start)  # fmt: skip
            if tokens[k] != ")":
                raise DataError(
                    path, f"found {tokens[k]!r} after '({label} {word}'; expected ')' closing the word "
                    "(one word per (TAG word), a word inside a phrase needs its own tag)", line=lines[k],
                )  # fmt: skip
            if not label:
                raise DataError(path, f"found the word {word!r} without a tag; expected (TAG {word})", line=start)
            return Tree(label, word=word, line=start), k + 1
        children = []
        while True:
            if k >= len(tokens):
                raise DataError(path, f"unbalanced brackets: the bracket opened here{_at(label)} is never closed",
                                line=start)  # fmt: skip
            tok, pos = tokens[k], lines[k]
            if tok == ")":
                return Tree(label, children, line=start), k + 1
            if tok != "(":
                raise DataError(
                    path, f"found the word {tok!r} without a tag inside{_at(label)}; expected (TAG {tok})", line=pos
                )  # fmt: skip
            child, k = node(k)
            children.append(child)

    while i < len(tokens):
        tok, pos = tokens[i], lines[i]
        if tok == ")":
            raise DataError(path, "unbalanced brackets: found ')' with no open bracket to close", line=pos)
        if tok != "(":
            raise DataError(path, f"found {tok!r} outside any tree; expected a tree starting with '('", line=pos)
        tree, i = node(i)
        yield tree


def _at(label: str) -> str:
    return f" ({label})" if label else ""


def strip_label(label: str) -> str:
    """``NP-SBJ-1`` -> ``NP``, ``PP=2`` -> ``PP``; ``-LRB-``, ``-NONE-`` stay whole."""
    if label.startswith("-"):
        return label
    return re.split(r"[-=]", label, maxsplit=1)[0] or label


def clean(tree: Tree) -> Tree | None:
    """The tree under ``TOP`` without empty elements, function tags or indices (see the module notes);
    None when no word is left."""

    def walk(t: Tree) -> Tree | None:
        if t.is_preterminal:
            return None if t.label == "-NONE-" else Tree(t.label, word=t.word, line=t.line)
        kids = [c for c in (walk(c) for c in t.children) if c is not None]
        return Tree(strip_label(t.label), kids, line=t.line) if kids else None

    if not tree.is_preterminal and tree.label in WRAPPERS:
        kids = [c for c in (walk(c) for c in tree.children) if c is not None]
        return Tree(ROOT, kids, line=tree.line) if kids else None
    inner = walk(tree)
    return Tree(ROOT, [inner], line=tree.line) if inner is not None else None


def read_trees(path: str | Path, do_clean: bool = True) -> TreeFile:
    """Every tree of a file (``.mrg`` or one a line) or of a folder's ``*.mrg`` files, in order,
    cleaned unless ``do_clean`` is False (then only wrapped under ``TOP``). A tree left without words
    by the cleaning is an error naming its line (a parser has nothing to parse)."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.mrg") if p.is_file())
        if not files:
            raise DataError(path, "found no *.mrg files in this folder; expected PTB .mrg files or a file of trees")
    elif path.is_file():
        files = [path]
    else:
        raise SpanBertError(f"{path}: no such file or folder (expected PTB trees: .mrg files or one tree a line)")
    trees: list[Tree] = []
    sources: list[tuple[str, int]] = []
    for f in files:
        text = decode_utf8(f.read_bytes(), f, "PTB trees in UTF-8")
        n = 0
        for raw in parse_brackets(text, f):
            n += 1
            t = clean(raw) if do_clean else (raw if raw.label in WRAPPERS else Tree(ROOT, [raw], line=raw.line))
            if t is None:
                raise DataError(f, "found a tree with no words once -NONE- elements are removed; expected words",
                                line=raw.line)  # fmt: skip
            if not do_clean:
                t.label = ROOT
            trees.append(t)
            sources.append((str(f), raw.line))
        if n == 0:
            raise DataError(f, "found no trees (empty file); expected PTB trees such as ( (S (NP (NNP Ms.) ...)) )")
    return TreeFile(trees, sources)


def write_trees(path: str | Path, trees: list[Tree]) -> None:
    """One tree a line (``(TOP ...)``), atomically: the file EVALB and `read_trees` read."""
    with atomic_write(path, encoding="utf-8") as f:
        for t in trees:
            f.write(f"{t}\n")


def escape_word(word: str) -> str:
    """A raw token as the treebank writes it: brackets become -LRB- / -RRB- (a bracket cannot be a leaf)."""
    return {"(": "-LRB-", ")": "-RRB-", "[": "-LSB-", "]": "-RSB-", "{": "-LCB-", "}": "-RCB-"}.get(word, word)


# A token: a clitic as PTB splits it ('s, n't, also with a typographic ’), a word of letters and digits
# in any script with inner hyphens, apostrophes, periods and commas (3,000, U.S, Zoë’s), or any other
# mark alone. `[^\W_]` is a letter or digit in any script: an ASCII class cut "café" into "caf", "é".
_WORD = re.compile(
    r"['’](?:s|re|ve|ll|d|m)\b|n['’]t\b|[^\W_]+(?:[-'’.,/&][^\W_]+)*|\.\.\.|--|``|''|\S", re.IGNORECASE
)


def tokenize(text: str) -> list[str]:
    """A raw sentence split into PTB-like tokens: words in any script (with inner hyphens, apostrophes,
    periods and commas, as in ``3,000``, ``U.S`` or ``Zoë’s``), every other punctuation mark apart,
    brackets escaped. Simple on purpose: text already split at spaces by a PTB tokenizer keeps its
    tokens (``John 's``, ``do n't``, ``café``), so pass that for exact treebank tokens."""
    words = []
    for chunk in text.split():
        words += [escape_word(w) for w in _WORD.findall(chunk)]
    return words
