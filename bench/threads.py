"""Pre-training speed beside other work: torch's default threads, one thread, and spanbert's thread
policy (`spanbert.threads`: the cores other processes leave free), on an idle machine and beside one
busy neighbour process that this script starts and stops itself; transformers' BertForPreTraining at
torch's default threads beside them, as a user of transformers gets it.

    python bench/threads.py                      # tiny, small and base; about 7 minutes on 2 cores
    python bench/threads.py --sizes tiny --seconds 10
    python bench/threads.py --sizes base --rounds 3   # the median of 3 interleaved rounds
    python bench/threads.py --smoke              # tiny, half-second windows, idle machine only (tests/test_bench.py)

Each setting runs in its own process, as a `spanbert` command does: the thread count is chosen at its
start and (policy) re-chosen every second. A window runs steps for a fixed wall time and counts the
tokens; the first steps (warm-up) are not counted. Shapes: tiny = the quick start's batch (16 x 128),
small = the README's small recipe (32 x 128), base = 2 x 128 (a base step on 2 CPU cores is a second).

Prints tokens/s for each setting and the ratios the policy is judged by: beside a neighbour, policy
over one thread (goal >= 0.8) and over the default; idle, policy over the default (goal: no loss
for base, whose step is matrix-multiply bound); and spanbert's policy over transformers' default.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

SHAPES = {"tiny": (16, 128), "small": (32, 128), "base": (2, 128)}
VOCAB = {"tiny": 4000, "small": 8000, "base": 28996}
# how long a window runs (s): long enough for a neighbour's scheduler slices to average out
WINDOW = {"tiny": 8.0, "small": 12.0, "base": 20.0}
SETTINGS = ("default", "one thread", "policy", "transformers default")


def child(size: str, setting: str, seconds: float) -> None:
    """One measurement window in this process; prints one JSON line."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from pretrain_step import hf_batch, make_step, span_batch

    from spanbert import threads
    from spanbert.config import model_config
    from spanbert.model import SpanBertForPreTraining

    if setting == "one thread":
        threads.configure(1)
    elif setting == "policy":
        threads.configure()
    cfg = model_config(size, vocab_size=VOCAB[size])
    B, T = SHAPES[size]
    torch.manual_seed(0)
    batch = span_batch(B, T, cfg.vocab_size)
    if setting == "transformers default":
        import transformers

        hf_cfg = transformers.BertConfig(**cfg.to_hf_dict())
        hf_cfg._attn_implementation = "sdpa"
        model = transformers.BertForPreTraining(hf_cfg).train()
        step = make_step(model, hf_batch(batch), torch.device("cpu"), None, True)
    else:
        model = SpanBertForPreTraining(cfg, sbo=True).train()
        step = make_step(model, batch, torch.device("cpu"), None, True)
    for _ in range(2):
        step()
    n, used = 0, []
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds or n == 0:
        threads.tick()
        used.append(torch.get_num_threads())
        step()
        n += 1
    elapsed = time.perf_counter() - t0
    print(json.dumps({"tok_s": n * B * T / elapsed, "steps": n, "threads": sorted(set(used))}))


def measure(size: str, setting: str, seconds: float) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    root = Path(__file__).resolve().parents[1]
    env["PYTHONPATH"] = os.pathsep.join([str(root / "src"), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, __file__, "--child", size, setting, str(seconds)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"{setting} on {size} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def rounds(size: str, seconds: float, n: int) -> dict[str, dict]:
    """Every setting ``n`` times, the settings interleaved (a slow spell of the machine hits all of
    them alike); per setting the round of median speed."""
    runs: dict[str, list[dict]] = {s: [] for s in SETTINGS}
    for _ in range(n):
        for s in SETTINGS:
            runs[s].append(measure(size, s, seconds))
    return {s: sorted(r, key=lambda x: x["tok_s"])[len(r) // 2] for s, r in runs.items()}


def neighbour(limit_s: float) -> subprocess.Popen:
    """A process that keeps one core busy (pure Python), ending by itself after ``limit_s`` seconds
    at the latest: a bounded stand-in for another user's job."""
    code = f"import time\nend = time.time() + {limit_s}\nwhile time.time() < end:\n    sum(range(10000))\n"
    return subprocess.Popen([sys.executable, "-c", code])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="tiny,small,base", help="comma-separated model presets")
    p.add_argument("--seconds", type=float, default=None, help="window per setting (default: by size)")
    p.add_argument("--rounds", type=int, default=1, help="measure every setting this many times, interleaved; report the median")
    p.add_argument("--smoke", action="store_true", help="tiny, half-second windows, no neighbour's pass: a check that it runs")
    p.add_argument("--child", nargs=3, metavar=("SIZE", "SETTING", "SECONDS"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child(a.child[0], a.child[1], float(a.child[2]))
        return
    sizes = ["tiny"] if a.smoke else a.sizes.split(",")
    import torch

    print(f"cores {os.cpu_count()}, torch {torch.__version__}, default threads {torch.get_num_threads()}, "
          f"load average {os.getloadavg()[0]:.2f} at start")  # fmt: skip
    rows = []
    for size in sizes:
        seconds = 0.5 if a.smoke else (a.seconds or WINDOW[size])
        idle = rounds(size, seconds, a.rounds)
        busy = None  # the smoke run measures the idle machine only: the neighbour's pass is the same code, twice the time
        if not a.smoke:
            busy_proc = neighbour(limit_s=a.rounds * len(SETTINGS) * (seconds + 60))
            try:
                busy = rounds(size, seconds, a.rounds)
            finally:
                busy_proc.kill()
                busy_proc.wait()
        for where, r in (("idle", idle), ("one busy neighbour", busy)):
            if r is None:
                continue
            print(f"{size:5s} {where:18s} " + "  ".join(
                f"{s}: {r[s]['tok_s']:8.0f} tok/s (threads {','.join(map(str, r[s]['threads']))})" for s in SETTINGS))  # fmt: skip
        rows.append((size, idle, busy))
    print()
    print("| model | machine | default | one thread | policy | transformers (default) | policy / one thread | policy / default | policy / transformers |")
    print("|---|---|---|---|---|---|---|---|---|")
    for size, idle, busy in rows:
        for where, r in (("idle", idle), ("one busy neighbour", busy)):
            if r is None:
                continue
            tok = {s: r[s]["tok_s"] for s in SETTINGS}
            print(f"| {size} | {where} | {tok['default']:,.0f} | {tok['one thread']:,.0f} | {tok['policy']:,.0f} | "
                  f"{tok['transformers default']:,.0f} | {tok['policy'] / tok['one thread']:.2f} | "
                  f"{tok['policy'] / tok['default']:.2f} | {tok['policy'] / tok['transformers default']:.2f} |")  # fmt: skip
    if any(busy for _, _, busy in rows):
        print("ratio policy / one thread beside a neighbour: " + ", ".join(
            f"{size} {busy['policy']['tok_s'] / busy['one thread']['tok_s']:.2f}" for size, _, busy in rows if busy))  # fmt: skip


if __name__ == "__main__":
    main()
