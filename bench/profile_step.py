"""Where the time of a training step goes, and how far the step is from this CPU's matrix-multiply rate
at the model's own shapes (issue 32.1).

For the pre-training step (MLM + SBO, `SpanBertForPreTraining`, the batch of bench/pretrain_step.py's
`span_batch`) and a QA fine-tuning step (`SpanBertForQuestionAnswering`, full windows), in fp32 and
under bf16 autocast, it:

1. times our step and transformers' (BertForPreTraining / BertForQuestionAnswering, SDPA attention,
   same config and tokens, the same fused AdamW and clipping), alternating round by round, and prints
   the ratio;
2. profiles our step (torch.profiler) and sorts every operator's own time into categories: matrix
   multiplies of the encoder and of the heads, the attention core (scores, softmax, attention dropout,
   SDPA), elementwise (LayerNorm, GELU, dropout, residual adds), copies/casts/fills, embeddings, the
   heads' and losses' other work, the optimizer (clipping, fused AdamW, zero_grad), data (masking +
   collation of a batch of the same shape, timed apart: the trainer does it in the step's loop), and
   framework/Python (autograd bookkeeping, view ops, Python between operators). A backward operator
   counts where its forward operator ran (matched by autograd sequence number);
3. measures the matrix-multiply rate at the step's own GEMM shapes ("roofline"): every forward and
   backward GEMM of the step (QKV, attention output, FFN in and out, the heads; attention's batched
   QK^T and AV products) timed alone in the step's dtype and layout; the step's useful FLOP/s
   (`spanbert.model.flops_per_token`) is reported as a share of that rate.

    python bench/profile_step.py                                  # small, seq 512, batch 8, both tasks, fp32 + bf16
    python bench/profile_step.py --task pretrain --dtype fp32 --threads 1
    python bench/profile_step.py --model base --batch 2 --task pretrain --dtype bf16
    python bench/profile_step.py --smoke                          # tiny, seconds (tests/test_bench.py)

``--out`` writes every figure as JSON. Category times are shares of the profiled step scaled to the
unprofiled step time (the profiler's own cost, a few microseconds per operator, is spread over all).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

from spanbert.collate import collate_pretrain
from spanbert.config import BertConfig, model_config
from spanbert.masking import mask_block
from spanbert.model import (
    Embeddings,
    MaskedLMHead,
    SelfAttention,
    SpanBertForPreTraining,
    SpanBoundaryHead,
    flops_per_token,
)
from spanbert.precision import flush_denormals
from spanbert.tasks import qa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pretrain_step import hf_batch, span_batch  # noqa: E402  (the sibling benchmark's batch)

CATEGORIES = (
    "matmul (encoder)",
    "matmul (heads)",
    "attention core",
    "elementwise (LN, GELU, dropout, adds)",
    "copies, casts, fills",
    "embeddings",
    "heads and losses (non-GEMM)",
    "optimizer (clip, AdamW, zero_grad)",
    "data (masking + collation)",
    "framework and Python",
)
GEMM_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm", "aten::mv", "aten::addmv",
            "aten::mkldnn_linear", "aten::_mkldnn_linear", "aten::dot"}  # fmt: skip
COPY_OPS = {"aten::copy_", "aten::_to_copy", "aten::clone", "aten::cat", "aten::fill_", "aten::zero_", "aten::zeros",
            "aten::new_zeros", "aten::zeros_like", "aten::index_copy", "aten::index_copy_", "aten::index",
            "aten::index_select", "aten::_index_put_impl_", "aten::stack", "aten::contiguous"}  # fmt: skip
LOSS_WORDS = ("log_softmax", "nll_loss", "cross_entropy", "argmax")
# operators that only make views or run the autograd machinery: their own time is dispatch overhead
FRAMEWORK_WORDS = ("autograd::engine::evaluate_function", "Backward0", "Backward1", "AccumulateGrad", "region:")
VIEW_OPS = {"aten::view", "aten::reshape", "aten::_reshape_alias", "aten::t", "aten::transpose", "aten::permute",
            "aten::expand", "aten::as_strided", "aten::unbind", "aten::split", "aten::split_with_sizes",
            "aten::select", "aten::slice", "aten::squeeze", "aten::unsqueeze", "aten::detach", "detach",
            "aten::resolve_conj", "aten::resolve_neg", "aten::empty", "aten::empty_strided", "aten::empty_like",
            "aten::lift_fresh", "aten::alias", "aten::_unsafe_view", "aten::flatten", "aten::numpy_T",
            "aten::is_nonzero", "aten::item", "aten::_local_scalar_dense", "aten::result_type",
            "aten::ones_like", "aten::unflatten"}  # fmt: skip


# ---------------------------------------------------------------------------------------------
# The two steps


def qa_batch(B: int, T: int, V: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """B full windows of T tokens (question of 24, passage, answer inside the passage): no padding."""
    return qa.collate_qa(_qa_items(B, T, V, seed))


def _qa_items(B: int, T: int, V: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    items = []
    for _ in range(B):
        ids = rng.integers(1000, V, T)
        ids[0], ids[25], ids[-1] = 101, 102, 102
        start = int(rng.integers(26, T - 12))
        items.append({"input_ids": ids, "query_len": 24, "start_positions": start, "end_positions": start + 5})
    return items


def data_seconds(task: str, B: int, T: int, V: int, repeats: int) -> float:
    """Time to make one batch as the trainer's data loader does: span masking + collation (pre-training),
    collation (QA); token blocks come from memory (reading them is a memory map)."""
    rng = np.random.default_rng(0)
    blocks = [rng.integers(1000, V, T) for _ in range(B)]
    for b in blocks:
        b[0], b[-1] = 101, 102
    starts = np.ones(T, dtype=bool)
    items = _qa_items(B, T, V, 0)

    def make() -> None:
        if task == "qa":
            qa.collate_qa(items)
            return
        out = []
        for ids in blocks:
            r = mask_block(ids, starts, "span", rng, mask_id=103, special_ids=(0, 101, 102), vocab_size=V)
            out.append(dict(input_ids=r.input_ids, labels=r.labels, sbo_positions=r.sbo_positions,
                            sbo_left=r.sbo_left, sbo_right=r.sbo_right, sbo_rel=r.sbo_rel,
                            token_type_ids=np.zeros(T, np.int64)))  # fmt: skip
        collate_pretrain(out)

    make()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        make()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def build(task: str, cfg: BertConfig, B: int, T: int):
    """Our model and batch, transformers' model and batch (SDPA attention, its fastest BERT path)."""
    import transformers

    hf_cfg = transformers.BertConfig(**cfg.to_hf_dict())
    hf_cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    if task == "pretrain":
        batch = span_batch(B, T, cfg.vocab_size)
        ours = SpanBertForPreTraining(cfg, sbo=True).train()
        hf = transformers.BertForPreTraining(hf_cfg).train()
        return ours, batch, hf, hf_batch(batch)
    batch = qa_batch(B, T, cfg.vocab_size)
    ours = qa.SpanBertForQuestionAnswering(cfg).train()
    hf = transformers.BertForQuestionAnswering(hf_cfg).train()
    hf_in = {**batch, "attention_mask": torch.ones_like(batch["input_ids"])}
    return ours, batch, hf, hf_in


def make_step(model: nn.Module, batch: dict, dtype: torch.dtype | None, regions: bool = False) -> Callable[[], None]:
    """forward + backward + clip + fused AdamW + zero_grad, as the trainer's step (bench/pretrain_step.py's)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=True)
    region = (lambda name: record_function(f"region:{name}")) if regions else (lambda name: contextlib.nullcontext())

    def step() -> None:
        with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            out = model(**batch)
        loss = out["loss"] if isinstance(out, dict) else out.loss
        loss.backward()
        with region("optimizer"):
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)

    return step


def add_region_hooks(model: nn.Module) -> list:
    """record_function regions around the modules whose operators the profile attributes to a scope."""
    kinds = {Embeddings: "embeddings", SelfAttention: "attention", MaskedLMHead: "heads", SpanBoundaryHead: "heads"}
    handles = []
    for name, m in model.named_modules():
        scope = next((v for k, v in kinds.items() if isinstance(m, k)), None)
        if name.endswith("qa_outputs") or name.endswith("seq_relationship"):
            scope = "heads"
        if scope is None:
            continue
        stack: list = []

        def pre(_m, _a, scope=scope, stack=stack):
            r = record_function(f"region:{scope}")
            r.__enter__()
            stack.append(r)

        def post(_m, _a, _o, stack=stack):
            stack.pop().__exit__(None, None, None)

        handles += [m.register_forward_pre_hook(pre), m.register_forward_hook(post)]
    return handles


# ---------------------------------------------------------------------------------------------
# Profile -> categories


def _scope(e, seq_scope: dict[int, str]) -> str:
    """The region an event ran in: its enclosing record_function, or for a backward operator the region
    of the forward operator that made its autograd node."""
    p = e.cpu_parent
    while p is not None:
        if p.name.startswith("region:"):
            return p.name[len("region:") :]
        if p.name.startswith("autograd::engine::evaluate_function"):
            return seq_scope.get(p.sequence_nr, "")
        p = p.cpu_parent
    return ""


def _category(name: str, scope: str) -> str:
    if scope == "optimizer":
        return "optimizer (clip, AdamW, zero_grad)"
    if any(w in name for w in FRAMEWORK_WORDS) or name in VIEW_OPS:
        return "framework and Python"
    if name in GEMM_OPS:
        if scope == "attention" and "bmm" in name:
            return "attention core"
        return "matmul (heads)" if scope == "heads" else "matmul (encoder)"
    if any(w in name for w in LOSS_WORDS) or scope == "heads":
        return "heads and losses (non-GEMM)"
    if scope == "attention":
        return "attention core"
    if scope == "embeddings":
        return "embeddings"
    if name in COPY_OPS:
        return "copies, casts, fills"
    return "elementwise (LN, GELU, dropout, adds)"


def profile_categories(step: Callable[[], None], n_steps: int) -> tuple[dict[str, float], float, dict[str, float]]:
    """Seconds per step in each category (profiled), the profiled step's wall time, and the top operators."""
    walls = []
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(n_steps):
            t = time.perf_counter()
            step()
            walls.append(time.perf_counter() - t)
    events = [e for e in prof.events() if not e.is_async]
    seq_scope: dict[int, str] = {}
    for e in events:  # forward operators: the region of each autograd node's maker
        if e.sequence_nr >= 0 and not e.name.startswith("autograd::engine") and "Backward" not in e.name:
            seq_scope.setdefault(e.sequence_nr, _scope(e, {}))
    cats: dict[str, float] = defaultdict(float)
    ops: dict[str, float] = defaultdict(float)
    inside = 0.0
    for e in events:
        self_s = e.self_cpu_time_total / 1e6
        cats[_category(e.name, _scope(e, seq_scope))] += self_s
        ops[e.name] += self_s
        if e.cpu_parent is None:
            inside += e.cpu_time_total / 1e6
    wall = sum(walls)
    cats["framework and Python"] += max(0.0, wall - inside)  # Python between operators
    per_step = {k: v / n_steps for k, v in cats.items()}
    top = dict(sorted(((k, v / n_steps) for k, v in ops.items()), key=lambda kv: -kv[1])[:12])
    return per_step, wall / n_steps, top


# ---------------------------------------------------------------------------------------------
# The matmul rate at the model's own shapes


def step_gemms(task: str, cfg: BertConfig, B: int, T: int, mask_rate: float = 0.15) -> list[tuple[str, int, int, int, int, str]]:
    """(name, m, k, n, count, layout) of every GEMM of one training step, forward and backward.

    A linear layer y = x W^T (x: (N, in), W: (out, in)) makes three: forward x @ W^T, input gradient
    dy @ W, weight gradient dy^T @ x, in the layouts PyTorch runs them ("nt", "nn", "tn"). Attention's
    products are batched over B x heads: S = Q K^T, Y = P V, each with two backward products."""
    H, L, Inter, V = cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size, cfg.vocab_size
    N = B * T
    out = []

    def linear(name: str, rows: int, fin: int, fout: int, count: int) -> None:
        out.append((f"{name} fwd", rows, fin, fout, count, "nt"))
        out.append((f"{name} dX", rows, fout, fin, count, "nn"))
        out.append((f"{name} dW", fout, rows, fin, count, "tn"))

    linear("QKV", N, H, 3 * H, L)
    linear("attn out", N, H, H, L)
    linear("FFN in", N, H, Inter, L)
    linear("FFN out", N, Inter, H, L)
    hs, bh = H // cfg.num_attention_heads, B * cfg.num_attention_heads
    # batched: (bh, T, hs) @ (bh, hs, T) and (bh, T, T) @ (bh, T, hs), and their gradients
    out += [("QK^T fwd", T, hs, T, L * bh, "b"), ("QK^T dQ", T, T, hs, L * bh, "b"), ("QK^T dK", T, T, hs, L * bh, "b"),
            ("PV fwd", T, T, hs, L * bh, "b"), ("PV dP", T, hs, T, L * bh, "b"), ("PV dV", T, T, hs, L * bh, "b")]  # fmt: skip
    if task == "pretrain":
        M = int(round(mask_rate * N))
        linear("MLM transform", M, H, H, 1)
        linear("MLM decoder", M, H, V, 1)
        linear("SBO dense1", M, 2 * H + 200, H, 1)
        linear("SBO dense2", M, H, H, 1)
        linear("SBO decoder", M, H, V, 1)
    else:
        linear("QA outputs", N, H, 2, 1)
    return out


def gemm_rate(gemms, dtype: torch.dtype, repeats: int) -> tuple[float, list[dict]]:
    """FLOP/s of the step's GEMMs, each timed alone: total FLOPs / total time (a time-weighted rate)."""
    flops = seconds = 0.0
    rows = []
    for name, m, k, n, count, layout in gemms:
        if layout == "b":  # one batch of the step's (B x heads) products: time a slice of up to 16, scale
            bh = min(count, 16)
            a, b = torch.randn(bh, m, k, dtype=dtype), torch.randn(bh, k, n, dtype=dtype)

            def run(a=a, b=b) -> None:
                torch.bmm(a, b)

            t = _median_time(run, repeats) * count / bh
        else:
            a = torch.randn(k, m, dtype=dtype).t() if layout == "tn" else torch.randn(m, k, dtype=dtype)
            b = torch.randn(n, k, dtype=dtype).t() if layout == "nt" else torch.randn(k, n, dtype=dtype)

            def run(a=a, b=b) -> None:
                torch.mm(a, b)

            t = _median_time(run, repeats) * count
        f = 2.0 * m * k * n * count
        flops += f
        seconds += t
        rows.append({"gemm": name, "m": m, "k": k, "n": n, "count": count, "gflops": f / 1e9, "gflop_s": f / t / 1e9})
    return flops / seconds, rows


def _median_time(fn: Callable[[], None], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def useful_flops(task: str, cfg: BertConfig, T: int) -> float:
    """Training FLOPs per token of the useful work (3x the forward matmul FLOPs)."""
    if task == "pretrain":
        return flops_per_token(cfg, T)
    return flops_per_token(cfg, T, mask_rate=0.0, sbo=False) + 3 * 2 * cfg.hidden_size * 2  # + qa_outputs


def cpu_description() -> str:
    """CPU model, the flags that decide its matmul speed, and the cores torch may use."""
    model, flags = platform.processor() or "cpu", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and model in ("", "cpu", platform.machine()):
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_tile", "amx_int8", "avx512_fp16")
    have = [f for f in wanted if f in flags]
    missing = [f for f in wanted if f not in flags]
    return (f"{model}; has {' '.join(have) or '-'}; lacks {' '.join(missing) or '-'}; "
            f"torch cpu capability {torch.backends.cpu.get_cpu_capability()}; {os.cpu_count()} cores")  # fmt: skip


# ---------------------------------------------------------------------------------------------


def run_one(task: str, name: str, cfg: BertConfig, B: int, T: int, dtype_name: str, a, roofs: dict) -> dict:
    dtype = {"fp32": None, "bf16": torch.bfloat16}[dtype_name]
    ours, batch, hf, hf_in = build(task, cfg, B, T)
    steps = {"spanbert": make_step(ours, batch, dtype), "transformers": make_step(hf, hf_in, dtype)}
    for s in steps.values():
        for _ in range(a.warmup):
            s()
    times: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(a.rounds):  # alternate, so that load from other processes hits both alike
        for k, s in steps.items():
            for _ in range(a.steps):
                t = time.perf_counter()
                s()
                times[k].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    handles = add_region_hooks(ours)
    cats, prof_wall, top = profile_categories(make_step(ours, batch, dtype, regions=True), a.profile_steps)
    for h in handles:
        h.remove()
    cats["data (masking + collation)"] = data_seconds(task, B, T, cfg.vocab_size, a.steps)
    key = (task, dtype_name)
    if key not in roofs:
        roofs[key] = gemm_rate(step_gemms(task, cfg, B, T), dtype or torch.float32, a.matmul_repeats)
    roof, gemm_rows = roofs[key]
    tokens = B * T
    useful = useful_flops(task, cfg, T) * tokens / med["spanbert"]
    useful_hf = useful_flops(task, cfg, T) * tokens / med["transformers"]
    # the profiled step is slower (the profiler's cost); shares of it, scaled to the unprofiled step
    prof_total = sum(v for k, v in cats.items() if not k.startswith("data"))
    scaled = {k: (v / prof_total * med["spanbert"] if not k.startswith("data") else v) for k, v in cats.items()}
    return {
        "task": task, "model": name, "dtype": dtype_name, "batch": B, "seq": T,
        "ms_per_step": {k: v * 1000 for k, v in med.items()},
        "tokens_per_s": {k: tokens / v for k, v in med.items()},
        "speedup_vs_transformers": med["transformers"] / med["spanbert"],
        "useful_gflop_s": useful / 1e9, "useful_gflop_s_transformers": useful_hf / 1e9,
        "roofline_gflop_s": roof / 1e9, "share_of_roofline": useful / roof,
        "share_of_roofline_transformers": useful_hf / roof,
        "profiled_ms_per_step": prof_wall * 1000,
        "categories_ms": {k: scaled.get(k, 0.0) * 1000 for k in CATEGORIES},
        "top_ops_ms_profiled": {k: v * 1000 for k, v in top.items()},
        "gemms": gemm_rows,
    }  # fmt: skip


def print_result(r: dict) -> None:
    ms = r["ms_per_step"]
    print(f"\n{r['task']} step, {r['model']}, {r['dtype']}, batch {r['batch']} x seq {r['seq']}: "
          f"spanbert {ms['spanbert']:.1f} ms ({r['tokens_per_s']['spanbert']:.0f} tok/s), transformers "
          f"{ms['transformers']:.1f} ms ({r['tokens_per_s']['transformers']:.0f} tok/s)")  # fmt: skip
    print(f"speed-up spanbert vs transformers: {r['speedup_vs_transformers']:.2f}x")
    print(f"matmul rate at the model's shapes ({r['dtype']}): {r['roofline_gflop_s']:.1f} GFLOP/s; useful "
          f"{r['useful_gflop_s']:.1f} GFLOP/s = {r['share_of_roofline'] * 100:.1f}% of it "
          f"(transformers {r['share_of_roofline_transformers'] * 100:.1f}%)")  # fmt: skip
    total = sum(r["categories_ms"].values())
    print("| category | ms/step | share |\n|---|---:|---:|")
    for k, v in r["categories_ms"].items():
        print(f"| {k} | {v:.1f} | {v / total * 100:.1f}% |")
    print("top operators (own time, profiled ms/step): "
          + ", ".join(f"{k} {v:.1f}" for k, v in list(r["top_ops_ms_profiled"].items())[:8]))  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="small", help="size preset: tiny, small, base (default small)")
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--batch", type=int, default=None, help="sequences per step (default 8; 2 for base)")
    p.add_argument("--dtype", choices=("fp32", "bf16", "both"), default="both", help="bf16 = bf16 autocast")
    p.add_argument("--task", choices=("pretrain", "qa", "both"), default="both")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps per model first")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds of the side-by-side timing")
    p.add_argument("--steps", type=int, default=2, help="timed steps per model and round")
    p.add_argument("--profile_steps", type=int, default=2)
    p.add_argument("--matmul_repeats", type=int, default=3)
    p.add_argument("--out", default=None, help="also write every figure to this JSON file")
    p.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: a check that it runs (tests/test_bench.py)")
    a = p.parse_args()
    if a.smoke:
        a.model, a.seq, a.batch, a.rounds, a.steps, a.profile_steps, a.matmul_repeats = "tiny", 64, 2, 1, 1, 1, 1
    import transformers

    if a.threads:
        torch.set_num_threads(a.threads)
    cfg = model_config(a.model)
    B = a.batch or (2 if a.model in ("base", "large") else 8)
    header = (f"profile_step: {a.model} ({cfg.num_hidden_layers} layers x {cfg.hidden_size}, vocab {cfg.vocab_size}), "
              f"seq {a.seq}, batch {B}, threads {torch.get_num_threads()}, torch {torch.__version__}, "
              f"transformers {transformers.__version__}\ncpu: {cpu_description()}")  # fmt: skip
    print(header)
    results, roofs = [], {}
    with flush_denormals():  # as the trainer (denormals made fresh models' CPU steps 3-25x slower)
        for task in ("pretrain", "qa") if a.task == "both" else (a.task,):
            for dtype_name in ("fp32", "bf16") if a.dtype == "both" else (a.dtype,):
                r = run_one(task, a.model, cfg, B, a.seq, dtype_name, a, roofs)
                print_result(r)
                results.append(r)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps({"header": header, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
