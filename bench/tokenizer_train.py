"""Train a WordPiece vocabulary with spanbert's deterministic learner and with HF `tokenizers`' trainer
on the same text, and print the wall / CPU time of each and how much their vocabularies share.

    python bench/tokenizer_train.py --corpus ../shared/data/pretrain-corpus --vocab-size 28996
    python bench/tokenizer_train.py --smoke     # 200 k characters of the built-in text (tests/test_bench.py)

Each trainer runs in its own process (HF's trainer is multi-threaded: CPU time counts every thread).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys, time, resource
from pathlib import Path
which, corpus, size, out = sys.argv[1], sys.argv[2:-2], int(sys.argv[-2]), sys.argv[-1]
t0 = time.perf_counter()
if which == "spanbert":
    from spanbert.tokenization import train_tokenizer
    train_tokenizer(corpus, size, out)
else:
    import tokenizers as t
    from spanbert.tokenization import SPECIAL_TOKENS, UNK, _build_pipeline, _iter_training_lines, corpus_files
    tk = t.Tokenizer(t.models.WordPiece(unk_token=UNK, continuing_subword_prefix="##"))
    _build_pipeline(tk, False)
    trainer = t.trainers.WordPieceTrainer(vocab_size=size, min_frequency=2, limit_alphabet=1000,
        special_tokens=SPECIAL_TOKENS, continuing_subword_prefix="##", show_progress=False)
    tk.train_from_iterator(_iter_training_lines(corpus_files(corpus)), trainer=trainer)
    Path(out).mkdir(parents=True, exist_ok=True)
    vocab = sorted(tk.get_vocab().items(), key=lambda kv: kv[1])
    (Path(out) / "vocab.txt").write_text("".join(k + "\n" for k, _ in vocab), encoding="utf-8")
wall = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "max_rss_mb": ru.ru_maxrss / 1024}))
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", nargs="+")
    p.add_argument("--vocab-size", type=int, default=28996)
    p.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: a check that it runs and prints its figures (tests/test_bench.py)")
    args = p.parse_args()
    if args.smoke:
        from pathlib import Path

        from smoke import tiny_text

        args.corpus, args.vocab_size = [str(tiny_text(Path(tempfile.mkdtemp())))], 2000
    if not args.corpus:
        p.error("--corpus is required (or --smoke)")
    results, vocabs = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for which in ("spanbert", "hf"):
            out = os.path.join(tmp, which)
            proc = subprocess.run(
                [sys.executable, "-c", CHILD, which, *args.corpus, str(args.vocab_size), out],
                capture_output=True, text=True, check=True,
            )
            results[which] = json.loads(proc.stdout.strip().splitlines()[-1])
            with open(os.path.join(out, "vocab.txt"), encoding="utf-8") as f:
                vocabs[which] = set(f.read().splitlines())
    for which, r in results.items():
        print(f"{which:9s} wall {r['wall_s']:7.1f} s  cpu {r['cpu_s']:7.1f} s  max RSS {r['max_rss_mb']:6.0f} MB")
    shared = len(vocabs["spanbert"] & vocabs["hf"])
    print(f"vocabularies share {shared} of {len(vocabs['hf'])} tokens ({shared / len(vocabs['hf']):.2%})")


if __name__ == "__main__":
    main()
