"""Peak memory of `spanbert preprocess` as the corpus grows (goal: flat, no growth beyond output buffers).

    python bench/preprocess_memory.py [--sizes 10 30] [--workers 2]
    python bench/preprocess_memory.py --smoke     # 1 MB, one worker (tests/test_bench.py)

For each size (MB of raw text cut from ../shared/data/pretrain-corpus, Wikipedia then Gutenberg) it runs
preprocessing in a fresh child process and prints the peak resident memory of that process and of its
largest tokenizer worker (getrusage), tokens/s, and the output size. The tokenizer is trained once on
the first 2 MB (vocabulary 28,996, as cased BERT).
"""

from __future__ import annotations

import argparse
import gzip
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "../shared/data/pretrain-corpus"
CHILD = """
import json, resource, sys, time
from spanbert.corpus import TokenCorpus
from spanbert.preprocess import preprocess
t = time.perf_counter()
out = preprocess(sys.argv[1], sys.argv[2], sys.argv[3], num_workers=int(sys.argv[4]), progress=False)
sec = time.perf_counter() - t
c = TokenCorpus(out)
print(json.dumps({"seconds": sec, "tokens": c.num_tokens,
                  "self_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "worker_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""


def write_text(path: Path, mb: int) -> None:
    """The first ``mb`` MB of the corpus chunks, cut at a document boundary."""
    limit = mb * 1_000_000
    size = 0
    with open(path, "w", encoding="utf-8") as out:
        for chunk in sorted(DATA.glob("enwiki-*.txt.gz")) + sorted(DATA.glob("gutenberg-*.txt.gz")):
            with gzip.open(chunk, "rt", encoding="utf-8") as f:
                for line in f:
                    if size >= limit and not line.strip():
                        return
                    out.write(line)
                    size += len(line.encode("utf-8"))
            out.write("\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[10, 30])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: a check that it runs and prints its figures (tests/test_bench.py)")
    args = ap.parse_args()
    if args.smoke:
        args.sizes, args.workers = [1], 1
    if not DATA.is_dir():
        raise SystemExit(f"corpus not found at {DATA}")
    from spanbert.tokenization import train_tokenizer

    tmp = Path(tempfile.mkdtemp())
    write_text(tmp / "tok.txt", 1 if args.smoke else 2)
    train_tokenizer([tmp / "tok.txt"], 2000 if args.smoke else 28996, tmp / "tok", show_progress=False)
    print(f"workers={args.workers}")
    print(
        f"{'text MB':>8} {'tokens':>12} {'sec':>7} {'tok/s':>9} {'peak main MB':>13} {'peak worker MB':>15} {'output MB':>10}"
    )
    for mb in args.sizes:
        src = tmp / f"corpus-{mb}.txt"
        write_text(src, mb)
        out = tmp / f"out-{mb}"
        t = time.perf_counter()
        res = subprocess.run(
            [sys.executable, "-c", CHILD, str(src), str(tmp / "tok"), str(out), str(args.workers)],
            capture_output=True,
            text=True,
            check=True,
        )
        r = json.loads(res.stdout.strip().splitlines()[-1])
        out_mb = sum(p.stat().st_size for p in out.iterdir() if p.is_file()) / 1e6
        print(
            f"{src.stat().st_size / 1e6:>8.1f} {r['tokens']:>12,} {r['seconds']:>7.1f} {r['tokens'] / r['seconds']:>9,.0f} "
            f"{r['self_kb'] / 1024:>13.0f} {r['worker_kb'] / 1024:>15.0f} {out_mb:>10.1f}"
        )
        src.unlink()
        del t
    _ = resource  # getrusage runs in the child


if __name__ == "__main__":
    main()
