"""Which change moved the two-tower BPE NER numbers in docs/results.md: the running-text word encoding
(issue 21) or the family's no-clipping default? Runs `spanbert finetune ner` once, optionally with the
old per-word encoding patched back in.

    python scripts/bpe_ner_ablation.py --encoding alone --max_grad_norm 1 --model runs/bpe/cloze-quick/final \
        --output_dir runs/bpe/ablate/alone-1
"""

from __future__ import annotations

import argparse
import sys

from spanbert.cli import main
from spanbert.tokenization import Tokenizer


def encode_each_word_alone(self: Tokenizer, words: list[str]):
    """The encoding before issue 21: each word without the space that precedes it in running text."""
    return self._wrap(self.hf.encode(words, is_pretokenized=True, add_special_tokens=False), True)


def run(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--encoding", choices=("running-text", "alone"), default="running-text")
    p.add_argument("--max_grad_norm", default="0")
    p.add_argument("--stacking", choices=("frozen", "finetune"), default="frozen")
    p.add_argument("--model", required=True, help="a two-tower model with a byte-level BPE vocabulary")
    p.add_argument("--data", default="../shared/data/conll2003", help="folder with train.txt and valid.txt")
    p.add_argument("--output_dir", required=True)
    args = p.parse_args(argv)
    if args.encoding == "alone":
        Tokenizer._encode_words = encode_each_word_alone
    return main([
        "finetune", "ner", "--model", args.model, "--train_file", f"{args.data}/train.txt",
        "--validation_file", f"{args.data}/valid.txt", "--max_train_examples", "1000", "--max_eval_examples", "300",
        "--num_train_epochs", "3", "--document_context", "false", "--stacking", args.stacking,
        "--max_grad_norm", args.max_grad_norm, "--output_dir", args.output_dir, "--disable_tqdm",
    ])  # fmt: skip


if __name__ == "__main__":
    sys.exit(run())
