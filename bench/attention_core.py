"""The attention core in training on CPU (scores, softmax, attention dropout, weighted values; forward and
backward) side by side: ours (`spanbert.attention.attention`) against what transformers' BERT runs with
`attn_implementation="sdpa"` in training (`F.scaled_dot_product_attention(..., dropout_p=0.1)`: SDPA's
math path, as its fused CPU kernels have no dropout), in one process, rounds alternating.

Two more lines bound it: SDPA without dropout (its fused CPU kernel: what attention costs when dropout
is off) and the core's six batched products alone (QK^T, PV, and the four of the backward) timed at
the same shapes, the matmul floor of any implementation.

    python bench/attention_core.py                       # small (8 x 4 heads x 512, hs 64) and base (2 x 12 x 512)
    python bench/attention_core.py --shape 8,4,512,64 --threads 2
    python bench/attention_core.py --smoke               # tiny, seconds (tests/test_bench.py)
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from spanbert.attention import attention


def fwd_bwd(fn, shape: tuple[int, int, int, int]):
    """Forward and backward of ``fn`` on q, k, v as a model hands them over: strided head views of one
    (B, T, 3, nh, hs) projection, made once (outside the timing)."""
    B, nh, T, hs = shape
    x = torch.randn(B, T, 3, nh, hs, requires_grad=True)
    grad = torch.randn(B, nh, T, hs)

    def run() -> None:
        q, k, v = x.permute(2, 0, 3, 1, 4).unbind(0)
        fn(q, k, v).backward(grad)
        x.grad = None

    return run


def products(shape: tuple[int, int, int, int]):
    """The six (B * nh) batched products of the forward and backward, nothing else: into buffers made
    once, so that neither allocation nor page faults count (the floor of any implementation)."""
    B, nh, T, hs = shape
    a, b, o = torch.randn(B * nh, T, hs), torch.randn(B * nh, T, hs), torch.empty(B * nh, T, hs)
    s, so = torch.randn(B * nh, T, T), torch.empty(B * nh, T, T)

    def run() -> None:
        torch.bmm(a, b.transpose(1, 2), out=so)  # scores
        torch.bmm(s, b, out=o)  # P V
        torch.bmm(s.transpose(1, 2), a, out=o)  # dV
        torch.bmm(a, b.transpose(1, 2), out=so)  # dP
        torch.bmm(s, b, out=o)  # dQ
        torch.bmm(s.transpose(1, 2), a, out=o)  # dK

    return run


def measure(shape: tuple[int, int, int, int], p: float, rounds: int) -> dict[str, float]:
    cases = {
        "spanbert attention (dropout)": fwd_bwd(lambda q, k, v: attention(q, k, v, None, p), shape),
        "transformers sdpa (dropout)": fwd_bwd(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, dropout_p=p), shape),
        "sdpa without dropout (fused kernel)": fwd_bwd(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), shape),
        "the six batched products alone": products(shape),
    }
    return timed(cases, rounds)


def timed(cases: dict, rounds: int) -> dict[str, float]:
    """Median seconds of each case, the cases alternating round by round (after one warm-up each)."""
    for run in cases.values():
        run()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, run in cases.items():
            t = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - t)
    return {name: statistics.median(ts) for name, ts in times.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", action="append", default=None, help="B,heads,T,head_size (repeatable)")
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--smoke", action="store_true", help="tiny shapes, seconds: a check that it runs")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    shapes = args.shape or (["2,2,32,8"] if args.smoke else ["8,4,512,64", "2,12,512,64"])
    rounds = 2 if args.smoke else args.rounds
    print(f"attention_core: torch {torch.__version__}, threads {torch.get_num_threads()}, dropout {args.dropout}, "
          f"median of {rounds} rounds, forward + backward")
    for text in shapes:
        shape = tuple(int(x) for x in text.split(","))
        B, nh, T, hs = shape
        t = measure(shape, args.dropout, rounds)
        flops = 6 * 2 * B * nh * T * T * hs
        print(f"\nB {B}, heads {nh}, T {T}, head size {hs}: {flops / 1e9:.2f} GFLOP of products")
        for name, sec in t.items():
            print(f"  {name:38s} {sec * 1e3:8.1f} ms   {flops / sec / 1e9:6.1f} GFLOP/s")
        ours, hf = t["spanbert attention (dropout)"], t["transformers sdpa (dropout)"]
        print(f"ratio transformers / spanbert: {hf / ours:.2f}x; spanbert at "
              f"{t['the six batched products alone'] / ours:.0%} of the products' rate; "
              f"sdpa without dropout / spanbert: {t['sdpa without dropout (fused kernel)'] / ours:.2f}")


if __name__ == "__main__":
    main()
