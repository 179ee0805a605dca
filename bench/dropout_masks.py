"""CPU dropout masks side by side, in one process, rounds alternating: the random numbers alone and a
dropout layer's forward + backward.

- **random numbers for n elements**: ours (`spanbert.dropout.int16_uniforms`: SplitMix64 words, four
  16-bit uniforms each, vectorised int64 passes on every thread) against torch's CPU Mersenne Twister
  drawing the same 16 bits an element (`random_` on int64 words: what spanbert drew before, 2026-11-26)
  and against `bernoulli_`, one Mersenne-Twister draw an element (what `F.dropout`, and so
  transformers' dropout, draws on CPU);
- **a dropout layer**, forward + backward, at BERT's hidden and intermediate shapes: `spanbert.dropout.
  Dropout` against `nn.Dropout` (transformers' `BertSelfOutput`/`BertOutput` dropout).

Each at every thread count of ``--threads`` (default 1 and all of torch's): the Mersenne Twister is
sequential, so its cost does not shrink with threads, and the gap grows with cores.

``--step MODEL`` adds **the whole training step** (bench/profile_step.py's: forward, backward, clipping,
fused AdamW) with every CPU mask drawn by each generator in turn, in one process on the same model and
batch, pairs of steps alternating: what the generator is worth in a step.

    python bench/dropout_masks.py                      # 8 x 512 x 256 and 8 x 512 x 1024, threads 1 and all
    python bench/dropout_masks.py --threads 2 --rounds 15
    python bench/dropout_masks.py --threads 2 --step small --task pretrain --rounds 12
    python bench/dropout_masks.py --smoke              # tiny, seconds (tests/test_bench.py)
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

import torch
from torch import nn

import spanbert.attention
import spanbert.dropout
from spanbert.dropout import Dropout, int16_uniforms

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attention_core import timed  # noqa: E402  (the sibling benchmark's alternating timer)


def random_numbers(n: int, p: float) -> dict:
    """The three ways to draw a mask's random numbers for n elements, into buffers made once."""
    words = torch.empty((n + 3) // 4, dtype=torch.int64)
    probs = torch.empty(n)
    return {
        "spanbert (SplitMix64, 16 bits an element)": lambda: int16_uniforms(n, words),
        "torch Mersenne Twister, 16 bits an element": lambda: words.random_(-(2**63), 2**63 - 1),
        "torch bernoulli_ (F.dropout, transformers)": lambda: probs.bernoulli_(1 - p),
    }


def layers(shape: tuple[int, ...], p: float) -> dict:
    """Forward + backward of a dropout layer in training mode on an input of ``shape``."""
    x = torch.randn(shape, requires_grad=True)
    grad = torch.randn(shape)

    def run(layer: nn.Module):
        def go() -> None:
            layer(x).backward(grad)
            x.grad = None

        return go

    return {"spanbert Dropout": run(Dropout(p).train()), "nn.Dropout (transformers)": run(nn.Dropout(p).train())}


def mersenne_uniforms(n: int, out: torch.Tensor | None = None, seed: int | None = None, start: int = 0) -> torch.Tensor:
    """`int16_uniforms`' signature, drawn as spanbert drew before: torch's Mersenne Twister, 64 bits a
    word (``seed`` and ``start`` unused: a sequential generator has no random access)."""
    words = torch.empty((n + 3) // 4, dtype=torch.int64) if out is None else out[: (n + 3) // 4]
    words.random_(-(2**63), 2**63 - 1)
    return words.view(torch.int16)[:n]


def use_generator(fn) -> None:
    spanbert.dropout.int16_uniforms = fn  # `cpu_keep_mask` (hidden dropout) looks it up here
    spanbert.attention.int16_uniforms = fn  # the attention core imported it by name


def step_ab(model: str, task: str, batch: int | None, seq: int, rounds: int) -> dict[str, list[float]]:
    """Seconds a step with each generator, pairs of steps alternating (the order flips every round)."""
    from profile_step import build, make_step, model_config  # the sibling benchmark's step

    cfg = model_config(model)
    ours, data, _, _ = build(task, cfg, batch or (2 if model in ("base", "large") else 8), seq)
    step = make_step(ours, data, None)
    gens = {"SplitMix64": int16_uniforms, "Mersenne Twister": mersenne_uniforms}
    times: dict[str, list[float]] = {name: [] for name in gens}
    try:
        for name in gens:
            use_generator(gens[name])
            step()  # warm-up
        for r in range(rounds):
            for name in list(gens)[:: 1 if r % 2 == 0 else -1]:
                use_generator(gens[name])
                step()
                t = time.perf_counter()
                step()
                step()
                times[name].append((time.perf_counter() - t) / 2)
    finally:
        use_generator(int16_uniforms)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", action="append", default=None, help="a dropout input, e.g. 8,512,256 (repeatable)")
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--threads", default=None, help="comma-separated thread counts (default: 1 and torch's)")
    ap.add_argument("--step", default=None, metavar="MODEL", help="also time the training step of this size preset "
                    "(tiny, small, base) with each generator")  # fmt: skip
    ap.add_argument("--task", choices=("pretrain", "qa"), default="pretrain", help="the step of --step")
    ap.add_argument("--batch", type=int, default=None, help="sequences a step of --step (default 8; 2 for base)")
    ap.add_argument("--seq", type=int, default=512, help="sequence length of --step")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes, seconds: a check that it runs")
    a = ap.parse_args()
    if a.smoke:
        a.step, a.batch, a.seq = "tiny", 2, 64
    most = torch.get_num_threads()
    threads = [int(t) for t in a.threads.split(",")] if a.threads else sorted({1, most})
    shapes = a.shape or (["2,16,32"] if a.smoke else ["8,512,256", "8,512,1024"])
    rounds = 2 if a.smoke else a.rounds
    print(f"dropout_masks: torch {torch.__version__}, dropout {a.dropout}, median of {rounds} rounds")
    for n_threads in threads:
        torch.set_num_threads(n_threads)
        for text in shapes:
            shape = tuple(int(x) for x in text.split(","))
            n = math.prod(shape)
            t = timed(random_numbers(n, a.dropout), rounds)
            print(f"\nthreads {n_threads}, {n:,} elements ({text}): random numbers")
            for name, sec in t.items():
                print(f"  {name:44s} {sec * 1e3:8.2f} ms")
            ours = t["spanbert (SplitMix64, 16 bits an element)"]
            print(f"ratio Mersenne Twister 16-bit / spanbert: {t['torch Mersenne Twister, 16 bits an element'] / ours:.2f}x; "
                  f"bernoulli_ / spanbert: {t['torch bernoulli_ (F.dropout, transformers)'] / ours:.2f}x")  # fmt: skip
            t = timed(layers(shape, a.dropout), rounds)
            print(f"threads {n_threads}, {text}: dropout layer, forward + backward")
            for name, sec in t.items():
                print(f"  {name:44s} {sec * 1e3:8.2f} ms")
            print(f"ratio transformers / spanbert (dropout layer): "
                  f"{t['nn.Dropout (transformers)'] / t['spanbert Dropout']:.2f}x")  # fmt: skip
        if a.step:
            times = step_ab(a.step, a.task, a.batch, a.seq, rounds)
            print(
                f"threads {n_threads}, {a.task} step, {a.step}: every CPU mask from each generator, {rounds} pairs of steps"
            )
            for name, ts in times.items():
                print(f"  {name:44s} {statistics.median(ts) * 1e3:8.1f} ms median   {min(ts) * 1e3:8.1f} ms min")
            saved = statistics.median(times["Mersenne Twister"]) - statistics.median(times["SplitMix64"])
            print(f"saved a step by SplitMix64: {saved * 1e3:.1f} ms median")


if __name__ == "__main__":
    main()
