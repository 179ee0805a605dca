"""Block lengths of the two single-sequence packings, and NSP segment cuts, on a preprocessed corpus.

    spanbert tokenizer train --corpus ../shared/data/pretrain-corpus/enwiki-2015-00.txt.gz \
        --vocab_size 28996 --output_dir /tmp/blocks/tok
    spanbert preprocess --corpus ../shared/data/pretrain-corpus/enwiki-2015-00.txt.gz \
        --tokenizer /tmp/blocks/tok --output_dir /tmp/blocks/enwiki-00
    python bench/blocks.py /tmp/blocks/enwiki-00 [more corpora] [--max_seq_length 512 128]
    python bench/blocks.py --smoke     # a tiny corpus of the built-in text, seconds (tests/test_bench.py)

For each corpus and block length, three packings of the same documents:

- ``fixed``: each document cut every max_seq_length - 2 tokens (`single_segment_blocks`, spanbert
  before 2026-11-23);
- ``sentences``: whole lines packed greedily, a line longer than a block split at word starts
  (`sentence_blocks`, the default now);
- ``released``: the rule of the released SpanBERT code (``BlockDataset``, break_mode "doc"): whole lines
  packed greedily, a line longer than a block dropped. Emulated here for the token-loss column only.

Prints a Markdown table: blocks, tokens kept (and lost against ``fixed``), block length (body tokens,
without [CLS]/[SEP]) mean / median / percentiles, share of full blocks, blocks ending inside a word,
then a length histogram, and for NSP pairs the segment ends that cut a word. No timings.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from spanbert.blocks import block_ends_mid_word, sentence_blocks, single_segment_blocks
from spanbert.corpus import TokenCorpus
from spanbert.dataset import PretrainDataset


def line_bounds(c: TokenCorpus) -> np.ndarray:
    """(L, 2) [start, end) of every line (paragraph) of the corpus; documents start lines."""
    starts = np.union1d(c.para_starts, c.doc_bounds[:, 0])
    cuts = np.union1d(starts, c.doc_bounds[:, 1])
    return np.stack([cuts[:-1], cuts[1:]], axis=1)[np.isin(cuts[:-1], starts)]


def released_blocks(c: TokenCorpus, max_tokens: int) -> np.ndarray:
    """The released code's packing, for comparison: lines longer than a block are dropped (their tokens
    are lost) and do not close the open block. Also its other edge case: when a document's *last* line
    is too long, the block still open is never emitted (its tokens are lost too)."""
    rows = []
    lines = line_bounds(c)
    doc_of = np.searchsorted(c.doc_bounds[:, 0], lines[:, 0], side="right") - 1
    for d in range(c.num_docs):
        sel = lines[doc_of == d].tolist()
        chunk: list[tuple[int, int]] = []
        for i, (a, b) in enumerate(sel):
            if b - a > max_tokens:
                continue  # dropped, and (as there) the flush below is skipped for this line
            chunk.append((a, b))
            length = chunk[-1][1] - chunk[0][0]
            if i == len(sel) - 1 or length > max_tokens:
                if length > max_tokens:  # the line does not fit: close the block without it, retry it
                    chunk.pop()
                    if chunk:
                        rows.append((chunk[0][0], chunk[-1][1]))
                    chunk = [(a, b)]
                    if i == len(sel) - 1:
                        rows.append((a, b))
                        chunk = []
                    continue
                rows.append((chunk[0][0], chunk[-1][1]))
                chunk = []
    return np.asarray(rows, dtype=np.int64).reshape(-1, 2)


def describe(name: str, blocks: np.ndarray, c: TokenCorpus, max_tokens: int, baseline: int) -> dict:
    lens = blocks[:, 1] - blocks[:, 0]
    kept = int(lens.sum())
    mid = int(block_ends_mid_word(blocks, c.doc_bounds, c.tokens).sum())
    p = np.percentile(lens, [10, 25, 50, 75, 90]) if len(lens) else np.zeros(5)
    return {
        "packing": name,
        "blocks": len(blocks),
        "tokens": kept,
        "lost": baseline - kept,
        "mean": lens.mean(),
        "p10": p[0], "p25": p[1], "median": p[2], "p75": p[3], "p90": p[4],
        "full": float((lens >= max_tokens - 16).mean()),  # within 16 tokens of full
        "mid_word": mid,
    }  # fmt: skip


def histogram(rows: list[tuple[str, np.ndarray]], max_tokens: int, bins: int = 8) -> list[str]:
    edges = np.linspace(0, max_tokens, bins + 1).round().astype(int)
    edges[-1] = max_tokens + 1
    head = "| body tokens | " + " | ".join(name for name, _ in rows) + " |"
    out = [head, "|---|" + "---:|" * len(rows)]
    counts = [np.histogram(b[:, 1] - b[:, 0], edges)[0] / max(len(b), 1) for _, b in rows]
    for i in range(bins):
        lo, hi = max(edges[i], 1), min(edges[i + 1] - 1, max_tokens)
        out.append(f"| {lo}–{hi} | " + " | ".join(f"{100 * c[i]:.1f}%" for c in counts) + " |")
    return out


def nsp_cuts(c: TokenCorpus, max_seq_length: int, packing: str) -> tuple[int, int]:
    """(segments, segment starts/ends inside a word) of the NSP pairs (Google's short_seq_prob 0.1)."""
    pairs = PretrainDataset(
        c, max_seq_length=max_seq_length, mode="nsp", seed=0, short_seq_prob=0.1, block_packing=packing
    ).pairs
    ws = np.append(c.tokens(0, c.num_tokens)[1], True)  # a token past the end "starts a word"
    ws[c.doc_bounds[:, 1]] = True
    return 2 * len(pairs), int((~ws[pairs[:, :4]]).sum())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpora", nargs="*", type=Path, help="spanbert preprocess output folders")
    ap.add_argument("--max_seq_length", type=int, nargs="+", default=[512, 128])
    ap.add_argument("--no_nsp", action="store_true", help="skip the NSP pair counts")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: a check that it runs and prints its figures (tests/test_bench.py)")
    args = ap.parse_args()
    if args.smoke:
        import tempfile

        from smoke import tiny_corpus

        args.corpora = [tiny_corpus(Path(tempfile.mkdtemp()))[1]]
        args.max_seq_length = [128, 64]
    if not args.corpora:
        ap.error("give one or more preprocessed corpora (or --smoke)")
    for path in args.corpora:
        c = TokenCorpus(path)
        lines = line_bounds(c)
        line_lens = lines[:, 1] - lines[:, 0]
        print(f"\n### {path.name}: {c.num_tokens:,} tokens, {c.num_docs:,} documents, {len(lines):,} lines")
        print(f"line length: mean {line_lens.mean():.1f}, median {np.median(line_lens):.0f}, p99 "
              f"{np.percentile(line_lens, 99):.0f}, max {line_lens.max()} tokens")  # fmt: skip
        for L in args.max_seq_length:
            m = L - 2
            fixed = single_segment_blocks(c.doc_bounds, m)
            sent = sentence_blocks(c.doc_bounds, c.para_starts, c.tokens, m)
            rel = released_blocks(c, m)
            long_lines = line_lens > m
            print(f"\n**max_seq_length {L}** (body ≤ {m} tokens): {int(long_lines.sum()):,} lines longer than a "
                  f"block ({line_lens[long_lines].sum():,} tokens, "
                  f"{100 * line_lens[long_lines].sum() / c.num_tokens:.2f}% of the corpus)\n")  # fmt: skip
            packings = (("fixed", fixed), ("sentences", sent), ("released", rel))
            rows = [describe(n, b, c, m, c.num_tokens) for n, b in packings]
            print("| packing | blocks | tokens kept | lost vs fixed | mean | p10 | p25 | median | p75 | p90 "
                  "| ≥ full−16 | end mid-word |")  # fmt: skip
            print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
            for r in rows:
                print(f"| {r['packing']} | {r['blocks']:,} | {r['tokens']:,} | {r['lost']:,} "
                      f"({100 * r['lost'] / c.num_tokens:.2f}%) | {r['mean']:.1f} | {r['p10']:.0f} | {r['p25']:.0f} | "
                      f"{r['median']:.0f} | {r['p75']:.0f} | {r['p90']:.0f} | {100 * r['full']:.1f}% | {r['mid_word']:,} |")  # fmt: skip
            print()
            print("\n".join(histogram(list(packings), m)))
            if not args.no_nsp:
                for packing in ("fixed", "sentences"):
                    n, cut = nsp_cuts(c, L, packing)
                    print(f"\nNSP pairs ({packing}): {n:,} segments, {cut:,} segment ends inside a word")


if __name__ == "__main__":
    main()
