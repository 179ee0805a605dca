"""Tokens per optimizer update: 256 sequences (32 x 8) against the paper's 131,072-token budget (4096-token
micro-batches x 32), for both block packings, on a preprocessed corpus. Pure batching arithmetic over the
dataset's block lengths, with the trainer's own planning functions (no model, no timing):

    python bench/tokens_per_update.py /tmp/mem/corpus

Prints a Markdown table (docs/results.md).
"""

from __future__ import annotations

import argparse

import numpy as np

from spanbert.dataset import PretrainDataset
from spanbert.trainer import micro_batches, token_micro_batches


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("corpus", nargs="?", help="a `spanbert preprocess` folder")
    p.add_argument("--max_seq_length", type=int, default=512)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: a check that it runs and prints its figures (tests/test_bench.py)")
    args = p.parse_args()
    if args.smoke:
        import tempfile
        from pathlib import Path

        from smoke import tiny_corpus

        args.corpus, args.max_seq_length = str(tiny_corpus(Path(tempfile.mkdtemp()))[1]), 128
    if not args.corpus:
        p.error("give a preprocessed corpus (or --smoke)")
    print("| blocks | examples | mean block length | batching | updates per epoch | sequences per update "
          "| real tokens per update | padded tokens per update | padding |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for packing in ("fixed", "sentences"):
        ds = PretrainDataset(
            args.corpus, max_seq_length=args.max_seq_length, mode="single", seed=0, block_packing=packing
        )
        lengths = ds.lengths()
        plans = (
            ("256 sequences (32 x 8)", micro_batches(len(lengths), args.seed, 0, 32, 8, 0, 1, 0)),
            ("131,072-token budget (4096 x 32)", token_micro_batches(lengths, 4096, args.seed, 0, 32, 0, 1, 0)),
        )
        for name, plan in plans:
            whole = plan[:-1]  # the last update of an epoch may be partial
            real = np.mean([sum(int(lengths[mb].sum()) for mb in step) for step in whole])
            padded = np.mean([sum(len(mb) * int(lengths[mb].max()) for mb in step) for step in whole])
            seqs = np.mean([sum(len(mb) for mb in step) for step in whole])
            print(f"| {packing} | {len(lengths):,} | {lengths.mean():.1f} | {name} | {len(plan)} | {seqs:.1f} "
                  f"| {real:,.0f} | {padded:,.0f} | {100 * (1 - real / padded):.1f}% |")  # fmt: skip


if __name__ == "__main__":
    main()
