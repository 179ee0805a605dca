"""Blocks: the corpus's token stream cut into pre-training sequences, as global [start, end) rows.

- `sentence_blocks` (``block_packing="sentences"``, the default): whole lines of a document packed up
  to the block length, as the released SpanBERT code does;
- `single_segment_blocks` (``"fixed"``): SpanBERT's single contiguous segments of up to 512 tokens
  that stop at a document boundary (§3.3, §4.2), cut every ``max_tokens``;
- `nsp_pairs`: BERT's next-sentence pairs (BERT §3.1, Google's ``create_pretraining_data.py``);
- `held_out_documents`: the last documents, held out from training by whole documents;
- `block_ends_mid_word`: how often a packing ends a block inside a word.

Functions of the document and line bounds of a `TokenCorpus` (and of ``tokens(start, end)``,
`TokenCorpus.tokens`, where a word boundary matters), so every system packs its blocks with this code.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

import numpy as np

from spanbert.errors import SpanBertError


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
    Vectorised (`pack_sentences`); `spanbert.block_index` computes the same blocks shard by shard.
    """

    def word_starts_in(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        parts = [a0 + 1 + np.flatnonzero(tokens(a0 + 1, b0)[1]) for a0, b0 in zip(a.tolist(), b.tolist())]
        return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)

    return pack_sentences(doc_bounds, line_starts, word_starts_in, max_tokens)


def pack_sentences(
    doc_bounds: np.ndarray,
    line_starts: np.ndarray,
    word_starts_in: Callable[[np.ndarray, np.ndarray], np.ndarray],
    max_tokens: int,
) -> np.ndarray:
    """`sentence_blocks` with the word starts of the long lines read at once: ``word_starts_in(a, b)``
    returns, sorted, every position p with a[i] < p < b[i] (for some i) where a word starts, for the
    (L,) lines [a, b) longer than ``max_tokens``.

    Greedy packing is sequential (where a block starts depends on where the one before ended), but
    it is a path in a graph with an edge from each unit (a line, or a piece of a long one) to the
    unit that starts the next block; every such edge is one `searchsorted`, and the units on the
    paths from the documents' first units are found by pointer doubling (`reached`): O(U log B) array
    work for U units and B blocks in the longest document, no Python loop per line or block. Lines
    longer than a block are cut the same way, a path over their word starts.
    """
    if max_tokens < 1:
        raise SpanBertError(f"max_tokens={max_tokens}; expected at least 1")
    db = np.asarray(doc_bounds, dtype=np.int64).reshape(-1, 2)
    db = db[db[:, 1] > db[:, 0]]  # empty documents have no blocks
    if not len(db):
        return np.zeros((0, 2), dtype=np.int64)
    ds, de = db[:, 0], db[:, 1]
    paras = np.asarray(line_starts, dtype=np.int64)
    doc = np.searchsorted(ds, paras, side="right") - 1
    starts = paras[(doc >= 0) & (paras < de[np.maximum(doc, 0)])]  # the line starts inside the documents
    at = np.minimum(np.searchsorted(starts, ds), max(len(starts) - 1, 0))
    if not len(starts) or (starts[at] != ds).any():  # a document always starts a line
        starts = np.union1d(starts, ds)
    doc = np.searchsorted(ds, starts, side="right") - 1  # (L,) the document of each line
    ends = np.minimum(np.append(starts[1:], de[-1]), de[doc])  # (L,) a line ends at the next or at its document's end
    long = np.flatnonzero(ends - starts > max_tokens)
    if len(long):
        piece_line, piece_start, piece_end = _split_long_lines(starts[long], ends[long], word_starts_in, max_tokens)
        # the units in order: each short line, or the pieces of a long one in its place
        count = np.ones(len(starts), dtype=np.int64)
        count[long] = np.bincount(piece_line, minlength=len(long))
        first_unit = np.cumsum(count) - count
        n = int(count.sum())
        unit_start, unit_end, unit_doc = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64)
        short = np.ones(len(starts), dtype=bool)
        short[long] = False
        at = first_unit[short]
        unit_start[at], unit_end[at], unit_doc[at] = starts[short], ends[short], doc[short]
        at = first_unit[long[piece_line]] + np.arange(len(piece_line)) - np.searchsorted(piece_line, piece_line)
        unit_start[at], unit_end[at], unit_doc[at] = piece_start, piece_end, doc[long[piece_line]]
    else:
        unit_start, unit_end, unit_doc = starts, ends, doc
    n = len(unit_start)
    first = np.searchsorted(unit_doc, np.arange(len(db)), side="left")  # (D,) each document's first unit
    last = np.searchsorted(unit_doc, np.arange(len(db)), side="right") - 1  # (D,) and its last
    last_of = last[unit_doc]  # (U,)
    # a block opened at unit u takes the units after it while they fit: up to the last one ending by start + max
    upto = np.minimum(np.searchsorted(unit_end, unit_start + max_tokens, side="right") - 1, last_of)  # (U,)
    nxt = np.where(upto == last_of, n, upto + 1)  # the unit opening the next block; n: the document is done
    opens = reached(nxt, first)
    return np.stack([unit_start[opens], unit_end[upto[opens]]], axis=1)


def _split_long_lines(
    a: np.ndarray, b: np.ndarray, word_starts_in: Callable[[np.ndarray, np.ndarray], np.ndarray], max_tokens: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(line, start, end) of the pieces of the (L,) long lines [a, b), in order: each piece ends at the last
    word start that fits (a word longer than a block is cut every ``max_tokens``), the last at b."""
    ws = np.asarray(word_starts_in(a, b), dtype=np.int64)  # sorted, inside the lines
    n_lines = len(a)
    lines = np.arange(n_lines)
    inner = np.searchsorted(ws, b) - np.searchsorted(ws, a, side="right")  # (L,) word starts inside each line
    # the nodes of line i, in order: a_i, its word starts, b_i (no sort: each line's slots are known)
    size = inner + 2
    first = np.cumsum(size) - size
    n = int(size.sum())
    pos, line = np.empty(n, np.int64), np.repeat(lines, size)
    pos[first], pos[first + size - 1] = a, b
    inside = np.ones(n, dtype=bool)
    inside[first] = inside[first + size - 1] = False
    pos[inside] = ws
    gap = np.diff(pos)
    big = (line[1:] == line[:-1]) & (gap > max_tokens)  # a word longer than a block: cut it every max_tokens
    if big.any():  # rare (tiny blocks): add the cuts and sort again
        k = (gap[big] - 1) // max_tokens  # (G,) cuts inside each such word
        before = np.repeat(np.cumsum(k) - k, k)
        extra = np.repeat(pos[:-1][big], k) + max_tokens * (np.arange(int(k.sum())) - before + 1)
        pos = np.concatenate([pos, extra])
        line = np.concatenate([line, np.repeat(line[:-1][big], k)])
        order = np.lexsort((pos, line))
        pos, line = pos[order], line[order]
        n = len(pos)
    last = np.searchsorted(line, lines, side="right") - 1  # (L,) each line's end node
    last_of = last[line]
    # from node p the piece ends at the last node within p + max_tokens, of the same line
    upto = np.minimum(np.searchsorted(pos, pos + max_tokens, side="right") - 1, last_of)  # (n,)
    is_end = np.arange(n) == last_of
    nxt = np.where(is_end, n, upto)
    cuts = reached(nxt, np.searchsorted(line, lines, side="left")) & ~is_end  # (n,) the pieces' starts
    return line[cuts], pos[cuts], pos[upto[cuts]]


def reached(nxt: np.ndarray, roots: np.ndarray) -> np.ndarray:
    """(n,) bool: the nodes on the paths that start at ``roots`` and follow ``nxt`` (nxt[i] > i, or n where
    the path ends). Pointer doubling: after step k the marked nodes are those fewer than 2^k steps from a
    root and ``jump`` goes 2^k steps; O(n) array work per step, log2(longest path) steps."""
    n = len(nxt)
    jump = np.append(np.asarray(nxt, dtype=np.int64), n)  # (n+1,): the end maps to itself
    on = np.zeros(n + 1, dtype=bool)
    roots = np.asarray(roots, dtype=np.int64)
    on[roots] = True
    while len(roots) and not (jump[roots] == n).all():
        on[jump[np.flatnonzero(on)]] = True
        jump = jump[jump]
    return on[:n]


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
