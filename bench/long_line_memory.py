"""Peak memory of `spanbert preprocess` on one long line with no newline (issue 22 item 11).

    python bench/long_line_memory.py [--mb 30] [--layout line|lines] [--workers 1] [--stage preprocess|vocab]
    python bench/long_line_memory.py --smoke     # 1 MB (tests/test_bench.py)

Writes ``--mb`` MB of English text (the quick-start corpus, repeated) as a single line (``line``) or as
lines of ~100 characters (``lines``, the same text as a normal file, for comparison) to a temporary
folder, then preprocesses it in a fresh child process and prints that process's peak resident memory
and its largest worker's (getrusage), the tokens and the seconds. No data needed: the tokenizer is
trained on the quick-start corpus (vocabulary 8,000). ``--stage vocab`` measures training a vocabulary
on the text instead (what `spanbert pretrain --corpus` does before preprocessing).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import json, resource, sys, time
from spanbert.corpus import TokenCorpus
from spanbert.preprocess import preprocess
t = time.perf_counter()
out = preprocess(sys.argv[1], sys.argv[2], sys.argv[3], num_workers=int(sys.argv[4]), progress=False)
sec = time.perf_counter() - t
c = TokenCorpus(out)
print(json.dumps({"seconds": round(sec, 1), "tokens": c.num_tokens,
                  "self_MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
                  "worker_MB": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024}))
"""
VOCAB_CHILD = """
import json, resource, sys, time
from spanbert.tokenization import train_tokenizer
t = time.perf_counter()
tok = train_tokenizer([sys.argv[1]], 8000, sys.argv[3], show_progress=False)
print(json.dumps({"seconds": round(time.perf_counter() - t, 1), "vocab": tok.vocab_size,
                  "self_MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}))
"""


def write_text(path: Path, mb: int, layout: str, source: Path) -> None:
    """``mb`` MB of the quick-start corpus's words: one line without a newline, or lines of ~100 chars."""
    words = source.read_text(encoding="utf-8").split()
    limit = mb * 1_000_000
    size = 0
    with open(path, "w", encoding="utf-8") as f:
        line = 0
        while size < limit:
            for w in words:
                sep = " "
                if layout == "lines" and line >= 100:
                    sep, line = "\n", 0
                f.write(w + sep)
                size += len(w) + 1
                line += len(w) + 1
                if size >= limit:
                    break


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=30)
    ap.add_argument("--layout", choices=("line", "lines"), default="line")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--stage", choices=("preprocess", "vocab"), default="preprocess")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: a check that it runs and prints its figures (tests/test_bench.py)")
    args = ap.parse_args()
    if args.smoke:
        args.mb = 1
    from spanbert.preprocess import builtin_corpus
    from spanbert.tokenization import train_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        source = builtin_corpus(tmp / "builtin.txt")
        train_tokenizer([source], 8000, tmp / "tok", show_progress=False)
        text = tmp / "corpus.txt"
        write_text(text, args.mb, args.layout, source)
        size = text.stat().st_size
        child = CHILD if args.stage == "preprocess" else VOCAB_CHILD
        cmd = [sys.executable, "-c", child, str(text), str(tmp / "tok"), str(tmp / "out"), str(args.workers)]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode:
            raise SystemExit(res.stderr)
        warnings = [ln for ln in res.stderr.splitlines() if ln.startswith("warning:")]
        row = {"MB": round(size / 1e6, 1), "layout": args.layout, "stage": args.stage, "workers": args.workers}
        row.update(json.loads(res.stdout))
        print(json.dumps(row))
        for w in warnings:
            print(w)


if __name__ == "__main__":
    main()
