"""The data path at scale: time to the first step, CPU-s and private memory per rank, and restart time, of
`spanbert pretrain` on synthetic corpora of given sizes in the exact `spanbert preprocess` format (issue 57).

    nice -n 19 python bench/scale.py --sizes 250M 1B 4B --work_dir /tmp/i57-scale   # fabricate, measure, print
    python bench/scale.py --smoke      # one tiny size, 2 ranks, first start and restart only (tests/test_bench.py)
    python bench/scale.py --src /path/to/other/checkout/src ...   # the same measurement of other code

The corpora: a real token stream (``../shared/data/pretrain-corpus``'s first Wikipedia and first
Gutenberg chunk, tokenized with a 28,996-token cased WordPiece trained on them; the built-in text when
the data is absent) is preprocessed once, then its documents -- with their own Wikipedia- and book-like
document and line lengths -- are tiled until the corpus holds the size asked for, in shards of
``--shard_tokens`` (default 100 M, `spanbert preprocess`'s), documents never crossing a shard. The
folder is what `spanbert preprocess` writes (meta.json, tokenizer/, unigram.npy, and per shard
.ids/.starts/.docs/.paras), so any version of spanbert reads it.

For each size and each rank count (``--ranks``, default 1 and 2; two ranks run under torchrun, gloo on
the CPU) three starts of ``spanbert pretrain --model tiny`` at the paper's settings (512 tokens,
sentence packing, token-budget batching of 4,096-token micro-batches; ``--tokens_per_update`` 8,192 so
that the one step taken is short, which changes nothing before it) are measured up to the first
optimisation step:

- first start: a fresh output folder and no index in the corpus folder (it is removed first);
- second start: a fresh output folder, the corpus as the first start left it (its cached index);
- restart: ``--resume`` of the first start's run (its checkpoint of step 1).

Columns, per rank (the larger of the ranks): wall seconds from the launch to the first step, CPU-s of
the rank's process to it (interpreter, imports and model included), of them the data path's (opening
the corpus, blocks or their index, the held-out split, the epoch's plan: `pretrain_data.build_datasets`,
`trainer._epoch_length`, `trainer._epoch_plan`), and peak private memory (anonymous resident memory,
RssAnon: what the rank allocated itself; memory-mapped corpus and index pages are the page cache's and
shared, not counted), sampled every 5 ms from outside the rank. The machine's load average is printed
beside each start: CPU-seconds are less sensitive to other load than wall seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "pretrain-corpus"
SOURCES = ("enwiki-2015-00.txt.gz", "gutenberg-00.txt.gz")
DATA_FUNCTIONS = (("spanbert.pretrain_data", "build_datasets"), ("spanbert.trainer", "_epoch_length"),
                  ("spanbert.trainer", "_epoch_plan"))  # fmt: skip
INDEX_FUNCTIONS = (("spanbert.block_index", "build_index"),)  # the first start's index build (where it exists)


def parse_size(text: str) -> int:
    units = {"k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9}
    t = text.strip().lower()
    if t and t[-1] in units:
        return int(float(t[:-1]) * units[t[-1]])
    return int(t)


def human(n: int) -> str:
    for unit, div in (("B", 10**9), ("M", 10**6), ("k", 10**3)):
        if n >= div:
            return f"{n / div:.3g} {unit}"
    return str(n)


# ---------------------------------------------------------------------------------------------
# The corpora


def source_corpus(work: Path, smoke: bool) -> Path:
    """The real token stream to tile: preprocessed once into ``work/source`` (reused)."""
    from spanbert.preprocess import preprocess
    from spanbert.tokenization import train_tokenizer

    out = work / "source"
    if (out / "corpus" / "meta.json").is_file():
        return out / "corpus"
    out.mkdir(parents=True, exist_ok=True)
    files = [DATA / s for s in SOURCES]
    vocab = 28996
    if smoke or not all(f.exists() for f in files):
        sys.path.insert(0, str(Path(__file__).parent))
        from smoke import tiny_text

        files, vocab = [tiny_text(out / "text")], 2000
    print(f"source: tokenizing {', '.join(f.name for f in files)} (vocabulary {vocab:,}) ...", file=sys.stderr)
    train_tokenizer(files, vocab_size=vocab, output_dir=out / "tok", show_progress=False)
    preprocess(files, out / "tok", out / "corpus", num_workers=2, progress=False)
    return out / "corpus"


def fabricate(source: Path, out: Path, tokens: int, shard_tokens: int, word_starts: str = "file") -> Path:
    """A corpus of about ``tokens`` tokens (whole source documents tiled, the last one completed) in the
    `spanbert preprocess` layout, written into ``out`` (reused when it was made with the same numbers).
    ``word_starts``: "file" writes every shard's .starts (what every version of spanbert reads), "ids" none
    (the flags from the ids, `corpus.WORD_STARTS`: what `spanbert preprocess` writes for WordPiece now)."""
    import numpy as np

    from spanbert.corpus import TokenCorpus

    stamp = {"source": str(source), "tokens": tokens, "shard_tokens": shard_tokens}
    if word_starts != "file":
        stamp["word_starts"] = word_starts
    if (out / "meta.json").is_file() and (out / "fabricated.json").is_file():
        if json.loads((out / "fabricated.json").read_text()) == stamp:
            return out
    src = TokenCorpus(source)
    if len(src.meta["shards"]) != 1:
        raise SystemExit(f"{source}: expected a source corpus of one shard")
    name = source / src.meta["shards"][0]["name"]
    dtype = np.dtype(src.meta["id_dtype"])
    ids = np.fromfile(f"{name}.ids", dtype=dtype)
    table = np.load(source / "word_starts.npy") if (source / "word_starts.npy").is_file() else None
    if Path(f"{name}.starts").is_file():
        starts = np.fromfile(f"{name}.starts", dtype=np.uint8)
    else:  # a source preprocessed with its word starts left to the ids
        starts = table[ids].astype(np.uint8)
    if word_starts == "ids" and table is None:
        table = src.tokenizer.word_starts_of(np.arange(src.vocab_size)).astype(np.uint8)
    docs = np.fromfile(f"{name}.docs", dtype=np.int64)  # (D+1,)
    paras = np.fromfile(f"{name}.paras", dtype=np.int64)
    n_src, vocab = len(ids), src.vocab_size
    need = tokens * (dtype.itemsize + 1) * 1.1 + (1 << 30)
    free = shutil.disk_usage(out.parent if out.parent.exists() else Path(tempfile.gettempdir())).free
    if free < need:
        raise SystemExit(f"{out}: needs about {need / 1e9:.1f} GB of disk, {free / 1e9:.1f} GB free (check df -h)")
    src_counts = np.bincount(ids, minlength=vocab).astype(np.int64)

    def boundary_at_or_after(x: int) -> int:  # the first document boundary of the tiled stream at or after x
        c, r = divmod(x, n_src)
        return c * n_src + int(docs[np.searchsorted(docs, r, side="left")])

    total_end = boundary_at_or_after(tokens)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    shutil.copytree(source / "tokenizer", tmp / "tokenizer")
    counts = np.zeros(vocab, dtype=np.int64)
    shards, s, k = [], 0, 0
    while s < total_end:
        e = min(boundary_at_or_after(s + shard_tokens), total_end)
        base = f"shard-{k:05d}"
        doc_off, para_off = [np.zeros(1, np.int64)], []
        with open(tmp / f"{base}.ids", "wb") as f_ids, open(tmp / f"{base}.starts", "wb") as f_st:  # .starts: below
            p = s
            while p < e:
                off = p % n_src
                take = min(e - p, n_src - off)
                f_ids.write(ids[off : off + take].tobytes())
                f_st.write(starts[off : off + take].tobytes())
                counts += src_counts if take == n_src else np.bincount(ids[off : off + take], minlength=vocab)
                d = docs[(docs > off) & (docs <= off + take)]
                doc_off.append(d - off + (p - s))
                q = paras[(paras >= off) & (paras < off + take)]
                para_off.append(q - off + (p - s))
                p += take
        doc_arr = np.concatenate(doc_off)
        doc_arr.tofile(tmp / f"{base}.docs")
        para_arr = np.concatenate(para_off) if para_off else np.zeros(0, np.int64)
        para_arr.tofile(tmp / f"{base}.paras")
        shards.append({"name": base, "num_tokens": int(e - s), "num_docs": int(len(doc_arr) - 1),
                       "num_paragraphs": int(len(para_arr)), "num_candidates": {}})  # fmt: skip
        if word_starts == "ids":
            (tmp / f"{base}.starts").unlink()
            shards[-1]["word_starts"] = "from_ids"
        s, k = e, k + 1
    np.save(tmp / "unigram.npy", counts)
    if word_starts == "ids":
        np.save(tmp / "word_starts.npy", np.asarray(table, dtype=np.uint8))
    meta = {"format": src.meta["format"], "num_tokens": int(total_end), "num_docs": sum(x["num_docs"] for x in shards),
            "vocab_size": vocab, "id_dtype": dtype.name, "candidates": [], "one_doc_per_line": False,
            "max_line_bytes": src.meta.get("max_line_bytes", 100000),
            "sources": [f"bench/scale.py: {source} tiled"], "seconds": 0.0, "shards": shards}  # fmt: skip
    (tmp / "meta.json").write_text(json.dumps(meta, indent=2))
    (tmp / "fabricated.json").write_text(json.dumps(stamp))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


# ---------------------------------------------------------------------------------------------
# One rank (this script again, under torchrun or alone): `spanbert pretrain` with the first step watched


def as_rank(result_dir: Path, stop: bool, argv: list[str]) -> None:
    import importlib

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    (result_dir / f"pid-{rank}").write_text(str(os.getpid()))
    spent: dict[str, list[float]] = {}

    def watch(module: str, name: str, key: str) -> None:
        try:
            mod = importlib.import_module(module)
        except ImportError:
            return
        fn = getattr(mod, name, None)
        if fn is None:
            return

        def timed(*a, **k):
            c0, w0 = time.process_time(), time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                acc = spent.setdefault(key, [0.0, 0.0])
                acc[0] += time.process_time() - c0
                acc[1] += time.perf_counter() - w0

        setattr(mod, name, timed)

    for module, name in DATA_FUNCTIONS:
        watch(module, name, "data")
    for module, name in INDEX_FUNCTIONS:
        watch(module, name, "index")
    import spanbert.trainer as trainer

    real_step = trainer.optimisation_step
    seen = []

    def first_step(*a, **k):
        if not seen:
            seen.append(1)
            result = {"rank": rank, "world": world, "wall": time.time(), "cpu": time.process_time(),
                      "data_cpu": spent.get("data", [0, 0])[0], "data_wall": spent.get("data", [0, 0])[1],
                      "index_cpu": spent.get("index", [0, 0])[0], "index_wall": spent.get("index", [0, 0])[1]}  # fmt: skip
            tmp = result_dir / f".rank-{rank}.json"
            tmp.write_text(json.dumps(result))
            tmp.rename(result_dir / f"rank-{rank}.json")
            if stop:
                _leave_together(world)
        return real_step(*a, **k)

    trainer.optimisation_step = first_step
    from spanbert.cli import main

    sys.exit(main(["pretrain", *argv]))


def _leave_together(world: int) -> None:
    """Every rank has reached its first step: leave now (through the store, not a collective)."""
    if world > 1:
        try:
            import torch.distributed as dist

            store = dist.distributed_c10d._get_default_store()
            store.add("bench/first_step", 1)
            deadline = time.monotonic() + 60
            while store.add("bench/first_step", 0) < world and time.monotonic() < deadline:
                time.sleep(0.01)
        except Exception:  # noqa: BLE001 - the store went with a rank that left first: leave too
            pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _rss_anon_kb(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def launch(src: Path, ranks: int, argv: list[str], stop: bool, log: Path) -> dict:
    """Run one start; returns the slowest rank's figures and every rank's peak private memory."""
    result_dir = Path(tempfile.mkdtemp(prefix="scale-"))
    me = [str(Path(__file__).resolve()), "--_rank", str(result_dir), "--_stop" if stop else "--_run", "--", *argv]
    if ranks == 1:
        cmd = [sys.executable, *me]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}", *me]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")])}
    load = os.getloadavg()[0]
    t0 = time.time()
    with open(log, "a") as out:
        out.write(f"\n$ {' '.join(cmd)}\n")
        out.flush()
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        peak: dict[int, int] = {}
        pids: dict[int, int] = {}
        while proc.poll() is None:
            for r in range(ranks):
                if r not in pids and (result_dir / f"pid-{r}").is_file():
                    text = (result_dir / f"pid-{r}").read_text().strip()
                    if text:
                        pids[r] = int(text)
                if r in pids and not (result_dir / f"rank-{r}.json").is_file():
                    kb = _rss_anon_kb(pids[r])
                    if kb is not None:
                        peak[r] = max(peak.get(r, 0), kb)
            time.sleep(0.005)
    results = [json.loads((result_dir / f"rank-{r}.json").read_text()) for r in range(ranks)
               if (result_dir / f"rank-{r}.json").is_file()]  # fmt: skip
    shutil.rmtree(result_dir, ignore_errors=True)
    if proc.returncode != 0 or len(results) != ranks:
        raise SystemExit(f"a start failed (exit status {proc.returncode}); its output is in {log}")
    return {
        "to_step_s": max(r["wall"] for r in results) - t0,
        "cpu_s": max(r["cpu"] for r in results),
        "data_cpu_s": max(r["data_cpu"] for r in results),
        "data_wall_s": max(r["data_wall"] for r in results),
        "index_cpu_s": max(r["index_cpu"] for r in results),
        "private_mb": [round(peak.get(r, 0) / 1024) for r in range(ranks)],
        "load": round(load, 2),
    }


def measure(src: Path, corpus: Path, ranks: int, work: Path, seq: int, log: Path, second: bool = True) -> dict:
    run = work / f"run-{corpus.name}-{ranks}"
    warm_run = work / f"run-{corpus.name}-{ranks}-second"
    for d in (run, warm_run, corpus / "index"):
        shutil.rmtree(d, ignore_errors=True)
    common = ["--corpus", str(corpus), "--model", "tiny", "--max_seq_length", str(seq), "--device", "cpu",
              "--disable_tqdm", "--report_to", "none", "--tokens_per_update", "8192", "--warmup_steps", "0",
              "--save_steps", "1"]  # fmt: skip
    out = {"first": launch(src, ranks, [*common, "--output_dir", str(run), "--max_steps", "1"], False, log)}
    if second:
        out["second"] = launch(src, ranks, [*common, "--output_dir", str(warm_run), "--max_steps", "1"], True, log)
    out["restart"] = launch(src, ranks, [*common, "--output_dir", str(run), "--max_steps", "2", "--resume"], True, log)
    for d in (run, warm_run):
        shutil.rmtree(d, ignore_errors=True)
    return out


def table(rows: list[dict]) -> str:
    head = ("| corpus | ranks | first start: s to step | CPU-s per rank | of it data (index build) | private MB per rank "
            "| second start: s to step | CPU-s per rank | of it data | private MB per rank | restart: s to step "
            "| of it data CPU-s | load (1 min) |")  # fmt: skip
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        none = {"to_step_s": float("nan"), "cpu_s": float("nan"), "data_cpu_s": float("nan"), "private_mb": ["-"],
                "load": "-"}  # fmt: skip
        f, s, re_ = r["first"], r.get("second", none), r["restart"]
        idx = f" ({f['index_cpu_s']:.1f})" if f["index_cpu_s"] else ""
        lines.append(
            f"| {human(r['tokens'])} tokens, {r['shards']} shards | {r['ranks']} | {f['to_step_s']:.1f} | {f['cpu_s']:.1f} "
            f"| {f['data_cpu_s']:.2f}{idx} | {' / '.join(map(str, f['private_mb']))} | {s['to_step_s']:.1f} | {s['cpu_s']:.1f} "
            f"| {s['data_cpu_s']:.2f} | {' / '.join(map(str, s['private_mb']))} | {re_['to_step_s']:.1f} "
            f"| {re_['data_cpu_s']:.2f} | {f['load']} / {s['load']} / {re_['load']} |"
        )
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--_rank":
        as_rank(Path(sys.argv[2]), sys.argv[3] == "--_stop", sys.argv[5:])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=["250M", "1B", "4B"], help="corpus sizes in tokens (250M, 1B, 4B, ...)")
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2], help="process counts to measure (default: 1 2)")
    ap.add_argument("--work_dir", type=Path, default=Path(tempfile.gettempdir()) / "spanbert-scale",
                    help="where the corpora, runs and log go (several GB per billion tokens: check df -h)")
    ap.add_argument("--shard_tokens", default="100M", help="tokens per shard (default: 100M, spanbert preprocess's)")
    ap.add_argument("--max_seq_length", type=int, default=512)
    ap.add_argument("--word_starts", choices=("file", "ids"), default="file",
                    help="file: every shard stores .starts (every version reads it); ids: none, the flags from the "
                    "ids as spanbert preprocess writes WordPiece corpora now (default: file)")
    ap.add_argument("--src", type=Path, default=ROOT / "src", help="the spanbert source folder to measure (default: this checkout's)")
    ap.add_argument("--keep", action="store_true", help="keep the fabricated corpora (default: delete each after its rows)")
    ap.add_argument("--json", type=Path, help="also write the figures as JSON here")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: a check that it runs and prints its figures (tests/test_bench.py)")
    args = ap.parse_args()
    if args.smoke:
        # no second start, two ranks only (the path with a writer and a waiter): 2 launches
        args.sizes, args.shard_tokens, args.max_seq_length, args.ranks = ["60k"], "25k", 128, [2]
        args.work_dir = Path(tempfile.mkdtemp(prefix="scale-smoke-"))
    sys.path.insert(0, str(args.src))
    work = args.work_dir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    log = work / "scale.log"
    print(f"spanbert from {args.src}; work folder {work}; log {log}; {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.2f} at the start", flush=True)  # fmt: skip
    source = source_corpus(work, args.smoke)
    rows = []
    for size in args.sizes:
        tokens = parse_size(size)
        name = f"corpus-{size}" + ("-ids" if args.word_starts == "ids" else "")
        corpus = fabricate(source, work / name, tokens, parse_size(args.shard_tokens), args.word_starts)
        meta = json.loads((corpus / "meta.json").read_text())
        print(f"corpus {corpus}: {meta['num_tokens']:,} tokens, {meta['num_docs']:,} documents, "
              f"{len(meta['shards'])} shard(s)", flush=True)  # fmt: skip
        for ranks in args.ranks:
            m = measure(args.src, corpus, ranks, work, args.max_seq_length, log, second=not args.smoke)
            rows.append({"tokens": meta["num_tokens"], "shards": len(meta["shards"]), "ranks": ranks, **m})
            print(json.dumps(rows[-1]), flush=True)
        if not args.keep:
            shutil.rmtree(corpus, ignore_errors=True)
    print()
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    if args.smoke:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
