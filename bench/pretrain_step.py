"""A full pre-training step (forward, backward, AdamW) of our SpanBERT (MLM + SBO) against
transformers' BertForPreTraining (MLM + NSP) on the same config and the same token batch, in one run.

    python bench/pretrain_step.py                       # CPU: 4 layers x 256, seq 512, batch 8
    python bench/pretrain_step.py --smoke               # tiny sizes, seconds (tests/test_bench.py)
    python bench/pretrain_step.py --device cuda --model base --batch 32 --dtype bf16   # GPU
    python bench/pretrain_step.py --device cuda --model base --seq 128,512 --batch 32,64 --compile \
        --profile --out bench.json                      # as bench/gpu.sh: every setting, eager and compiled

Prints tokens/s for each, the ratio, and the SBO overhead (our step with and without SBO); the
transformers model runs with SDPA attention. It also prints MFU from the useful FLOPs per token
(`spanbert.model.flops_per_token`) against two ceilings: the device's dense peak (a table of known
GPUs; none on CPU) and a measured large matmul in the same dtype (what this device really reaches).

``--seq`` and ``--batch`` take lists: every (sequence length, batch) pair is a setting, all in one
process on the same weights (compiled graphs are reused across settings: they have dynamic shapes).
``--compile`` adds spanbert's step compiled as the trainer compiles it (`spanbert.compile`: embeddings,
layers and heads) and transformers' compiled the same way (each `BertLayer`), so eager and compiled, ours
and theirs, are timed side by side; the compilation's time is printed. ``--profile`` profiles our
fastest step at the first setting and sorts the device's time into matmuls, attention, fused
(compiled) kernels, the optimizer, other kernels and idle (the device waiting on the host).
A variant that fails (out of memory, a compiler error) is reported and the others still run.
``--out`` writes every figure as JSON.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import platform
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from spanbert.compile import compile_regions
from spanbert.config import model_config
from spanbert.model import SpanBertForPreTraining, flops_per_token

# dense bf16 peak FLOP/s by GPU name fragment, for MFU
PEAK_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L4": 121e12, "A10": 125e12}


def span_batch(B: int, T: int, V: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random tokens with geometric spans masked to 15% (the shape of a real SpanBERT batch)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, V, size=(B, T))
    ids[:, 0], ids[:, -1] = 101, 102
    pos, left, right, rel = [], [], [], []
    for b in range(B):
        taken = np.zeros(T, bool)
        budget = int(round(0.15 * (T - 2)))
        while taken.sum() < budget:
            n = min(int(rng.geometric(0.2)), 10, budget - int(taken.sum()))
            s = int(rng.integers(1, T - 1 - n))
            if taken[s - 1 : s + n + 1].any():
                continue
            taken[s : s + n] = True
            for i in range(n):
                pos.append(b * T + s + i)
                left.append(b * T + s - 1)
                right.append(b * T + s + n)
                rel.append(i)
    pos_t = torch.tensor(pos)
    labels = torch.from_numpy(ids).view(-1)[pos_t].clone()
    masked = torch.from_numpy(ids).clone()
    masked.view(-1)[pos_t] = 103
    return dict(
        input_ids=masked,
        mlm_positions=pos_t,
        mlm_labels=labels,
        sbo_positions=pos_t,
        sbo_labels=labels,
        sbo_left=torch.tensor(left),
        sbo_right=torch.tensor(right),
        sbo_rel=torch.tensor(rel),
    )


def hf_batch(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    B, T = batch["input_ids"].shape
    labels = torch.full((B * T,), -100, dtype=torch.long)
    labels[batch["mlm_positions"]] = batch["mlm_labels"]
    return dict(
        input_ids=batch["input_ids"],
        token_type_ids=torch.zeros_like(batch["input_ids"]),
        attention_mask=torch.ones_like(batch["input_ids"]),
        labels=labels.view(B, T),
        next_sentence_label=torch.zeros(B, dtype=torch.long),
    )


def matmul_flops(device: torch.device, dtype: torch.dtype | None, n: int, repeats: int = 10) -> float:
    """FLOP/s of an n x n x n matmul in ``dtype`` (the practical ceiling of this device and dtype)."""
    a = torch.randn(n, n, device=device, dtype=dtype or torch.float32)
    b = torch.randn(n, n, device=device, dtype=dtype or torch.float32)

    def step() -> None:
        a @ b

    return 2 * n**3 / timeit(step, device, warmup=2, repeats=repeats)


def make_step(model, batch, device, dtype, fused):
    batch = {k: v.to(device) for k, v in batch.items()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=fused or None)

    def step():
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            out = model(**batch)
        loss = out["loss"] if isinstance(out, dict) else out.loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def timeit(step, device, warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


OURS, OURS_COMPILED, OURS_MLM = "spanbert (MLM+SBO)", "spanbert (MLM+SBO) compiled", "spanbert (MLM only)"
HF, HF_COMPILED = "transformers BertForPreTraining (MLM+NSP)", "transformers BertForPreTraining compiled"

# what a kernel's (CUDA) or an operator's (CPU) name says it does, first match wins
CATEGORIES = [
    ("attention", r"flash|fmha|attention|sdpa|scaled_dot_product"),
    ("matmul", r"gemm|sm90_|sm80_|cutlass|cublas|xmma|matmul|aten::(mm|addmm|bmm|linear)\b|nvjet"),
    ("optimizer", r"adam|multi_tensor|foreach"),
    ("fused (compiled)", r"^triton_|cpp_fused|graph_\d+_cpp|inductor"),
]


def profile_categories(step: Callable[[], None], device: torch.device, steps: int = 3) -> dict[str, float]:
    """Milliseconds a step of ``step`` spends in each category of `CATEGORIES` (+ other), its wall time,
    and on a GPU the idle time (wall time less the kernels' time: the device waiting for the host)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    step()  # warm
    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    if cuda:
        torch.cuda.synchronize()
    t = time.perf_counter()
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        if cuda:
            torch.cuda.synchronize()
    wall = (time.perf_counter() - t) / steps * 1000
    out = {name: 0.0 for name, _ in CATEGORIES} | {"other": 0.0}
    for e in prof.key_averages():
        if cuda:
            if e.device_type != DeviceType.CUDA:
                continue
            us = e.self_device_time_total
        else:
            if not e.key.startswith(("aten::", "cpp_fused", "graph_")) and "inductor" not in e.key:
                continue
            us = e.self_cpu_time_total
        name = next((c for c, rx in CATEGORIES if re.search(rx, e.key, re.I)), "other")
        out[name] += us / 1000 / steps
    busy = sum(out.values())
    out = {k: round(v, 3) for k, v in out.items()}
    out["step (profiled)"] = round(wall, 3)
    if cuda:
        out["idle"] = round(max(0.0, wall - busy), 3)
    return out


def _int_list(text: str) -> list[int]:
    return [int(x) for x in str(text).split(",") if x.strip()]


def _time_variants(steps: dict[str, Callable[[], None]], device: torch.device, warmup: int, repeats: int,
                   rounds: int) -> tuple[dict[str, float], dict[str, float], dict[str, str]]:  # fmt: skip
    """(median seconds, peak GiB, errors) of each step, interleaved round by round so that load from
    other processes hits all alike; a step that raises is dropped with its error."""
    times: dict[str, list[float]] = {k: [] for k in steps}
    peak: dict[str, float] = {}
    errors: dict[str, str] = {}
    for _ in range(rounds):
        for k, s in steps.items():
            if k in errors:
                continue
            try:
                if device.type == "cuda":
                    torch.cuda.reset_peak_memory_stats(device)
                times[k].append(timeit(s, device, warmup, repeats))
                if device.type == "cuda":
                    peak[k] = max(peak.get(k, 0.0), torch.cuda.max_memory_allocated(device) / 2**30)
            except Exception as e:  # noqa: BLE001 -- a benchmark reports a failing variant and goes on
                errors[k] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
                if device.type == "cuda":
                    torch.cuda.empty_cache()
    return {k: statistics.median(v) for k, v in times.items() if v and k not in errors}, peak, errors


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="size preset (default: 4 layers x 256 on CPU, base on GPU)")
    p.add_argument("--seq", type=str, default="512", help="sequence length(s), comma-separated")
    p.add_argument("--batch", type=str, default="8", help="sequences per step, comma-separated")
    p.add_argument("--settings", default=None, help="SEQxBATCH pairs, comma-separated (512x32,128x128): these instead of --seq x --batch")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", choices=("fp32", "bf16"), default=None, help="default: fp32 on CPU, bf16 on GPU")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--compile", action="store_true", help="also time both models compiled (as the trainer compiles)")
    p.add_argument("--backend", default="inductor", help="torch.compile backend of --compile (aot_eager: a quick check)")
    p.add_argument("--no_transformers_compile", action="store_true", help="with --compile, leave transformers eager")
    p.add_argument("--profile", action="store_true", help="profile our fastest step at the first setting")
    p.add_argument("--matmul", type=int, default=None, help="size of the measured matmul (default 8192 on GPU, 1024 on CPU)")
    p.add_argument("--out", default=None, help="also write every figure to this JSON file")
    p.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: a check that it runs and prints its ratio (tests/test_bench.py)")
    a = p.parse_args()
    if a.smoke:
        a.model, a.seq, a.batch, a.warmup, a.repeats, a.matmul = "tiny", "64", "2", 1, 1, 128
    import transformers

    device = torch.device(a.device)
    if a.threads:
        torch.set_num_threads(a.threads)
    name = a.model or ("small" if device.type == "cpu" else "base")
    cfg = model_config(name)
    dtype = {"fp32": None, "bf16": torch.bfloat16}[a.dtype or ("fp32" if device.type == "cpu" else "bf16")]
    if a.settings:
        try:
            pairs = [tuple(int(x) for x in item.lower().split("x")) for item in a.settings.split(",") if item.strip()]
        except ValueError:
            p.error(f"--settings: found {a.settings!r}, expected SEQxBATCH pairs such as 512x32,128x128")
        if not pairs or any(len(t) != 2 or min(t) < 1 for t in pairs):
            p.error(f"--settings: found {a.settings!r}, expected SEQxBATCH pairs such as 512x32,128x128")
    else:
        pairs = [(T, B) for T in _int_list(a.seq) for B in _int_list(a.batch)]
    fused = True  # the trainer's choice on CPU and GPU, for both models alike

    torch.manual_seed(0)
    ours = SpanBertForPreTraining(cfg, sbo=True).to(device).train()
    ours_nosbo = SpanBertForPreTraining(cfg, sbo=False).to(device).train()
    hf_cfg = transformers.BertConfig(**cfg.to_hf_dict())
    hf_cfg._attn_implementation = "sdpa"  # transformers' fastest BERT attention: the fair comparison
    hf = transformers.BertForPreTraining(hf_cfg).to(device).train()
    models = {OURS: ours, OURS_MLM: ours_nosbo, HF: hf}
    if a.compile:
        ours_c = copy.deepcopy(ours)  # the same weights, compiled in place
        compile_regions(ours_c, backend=a.backend)
        models[OURS_COMPILED] = ours_c
        if not a.no_transformers_compile:
            hf_c = copy.deepcopy(hf)
            for layer in hf_c.bert.encoder.layer:  # the same regions: each layer, dynamic shapes
                layer.compile(backend=a.backend, dynamic=True)
            models[HF_COMPILED] = hf_c
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    peak_flops = next((v for k, v in PEAK_FLOPS.items() if k in device_name), None) if device.type == "cuda" else None
    measured = matmul_flops(device, dtype, a.matmul or (8192 if device.type == "cuda" else 1024))
    header = (
        f"config {name}: {cfg.num_hidden_layers} layers x {cfg.hidden_size}, vocab {cfg.vocab_size}, "
        f"device {device}, dtype {dtype or 'fp32'}, threads {torch.get_num_threads()}, "
        f"torch {torch.__version__}, transformers {transformers.__version__}"
    )
    print(header)
    print(f"measured matmul: {measured / 1e12:.3f} TFLOP/s; dense {dtype or 'fp32'} peak of {device_name}: "
          + (f"{peak_flops / 1e12:.0f} TFLOP/s" if peak_flops else "unknown (no MFU against it)"))  # fmt: skip
    settings, compile_s, profile = [], {}, None

    def write() -> None:  # after every setting: a run stopped by its time limit keeps what it measured
        if not a.out:
            return
        first = settings[0]
        figures = {
            "header": header, "device": device_name, "model": name, "dtype": str(dtype or "fp32"),
            "torch": torch.__version__, "transformers": transformers.__version__, "dense_peak_flops": peak_flops,
            "matmul_flops": measured, "compile_seconds": compile_s, "backend": a.backend if a.compile else None,
            "settings": settings, "profile": profile, "complete": len(settings) == len(pairs),
            # the first setting's figures under the names of earlier versions of this file
            "seq": first["seq"], "batch": first["batch"], "tokens_per_s": first["tokens_per_s"],
            "ms_per_step": first["ms_per_step"], "speedup_vs_transformers": first.get("speedup_vs_transformers"),
            "flops_per_token": first["flops_per_token"], "achieved_flops": first["achieved_flops"],
            "mfu_vs_peak": (first["mfu_vs_peak"] or {}).get(OURS), "mfu_vs_matmul": first["share_of_matmul"].get(OURS),
        }  # fmt: skip
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(a.out).with_suffix(".tmp")
        tmp.write_text(json.dumps(figures, indent=2) + "\n")
        tmp.replace(a.out)

    for T, B in pairs:
        batch = span_batch(B, T, cfg.vocab_size)
        n_tokens = B * T
        steps = {k: make_step(m, hf_batch(batch) if k.startswith("transformers") else batch, device, dtype, fused)
                 for k, m in models.items()}  # fmt: skip
        for k in (OURS_COMPILED, HF_COMPILED):  # the first call compiles: timed apart, once a process
            if k in steps and k not in compile_s:
                t = time.perf_counter()
                try:
                    steps[k]()
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                except Exception:  # noqa: BLE001 -- `_time_variants` reports it
                    pass
                compile_s[k] = time.perf_counter() - t
        med, peak_gib, errors = _time_variants(steps, device, a.warmup, a.repeats, a.rounds)
        fpt = flops_per_token(cfg, T)
        achieved = {k: fpt * n_tokens / t for k, t in med.items()}
        row = {
            "seq": T, "batch": B, "tokens": n_tokens, "flops_per_token": fpt,
            "tokens_per_s": {k: n_tokens / t for k, t in med.items()}, "ms_per_step": {k: t * 1000 for k, t in med.items()},
            "achieved_flops": achieved, "mfu_vs_peak": {k: f / peak_flops for k, f in achieved.items()} if peak_flops else None,
            "share_of_matmul": {k: f / measured for k, f in achieved.items()}, "peak_memory_gib": peak_gib,
            "errors": errors,
        }  # fmt: skip
        ours_keys = [k for k in (OURS, OURS_COMPILED) if k in med]
        hf_keys = [k for k in (HF, HF_COMPILED) if k in med]
        if OURS in med and HF in med:
            row["speedup_vs_transformers"] = med[HF] / med[OURS]
        if ours_keys and hf_keys:
            best_ours, best_hf = min(ours_keys, key=med.get), min(hf_keys, key=med.get)
            row["best"] = {"spanbert": best_ours, "transformers": best_hf, "ratio": med[best_hf] / med[best_ours]}
        row["compiled_vs_eager"] = {who: med[e] / med[c] for who, e, c in (("spanbert", OURS, OURS_COMPILED),
                                    ("transformers", HF, HF_COMPILED)) if e in med and c in med}  # fmt: skip
        if OURS in med and OURS_MLM in med:
            row["sbo_overhead"] = med[OURS] / med[OURS_MLM] - 1
        settings.append(row)
        print(f"-- seq {T}, batch {B} ({n_tokens} tokens a step), useful work {fpt / 1e6:.1f} MFLOP/token")
        for k, t in med.items():
            mfu = f", MFU {achieved[k] / peak_flops * 100:.1f}%" if peak_flops else ""
            mem = f", peak {peak_gib[k]:.1f} GiB" if k in peak_gib else ""
            print(f"{k:45s} {n_tokens / t:10.0f} tokens/s  ({t * 1000:.1f} ms/step, {achieved[k] / 1e12:.3f} TFLOP/s"
                  f"{mfu}, {achieved[k] / measured * 100:.1f}% of the matmul{mem})")  # fmt: skip
        for k, e in errors.items():
            print(f"{k:45s} failed: {e}")
        if "speedup_vs_transformers" in row:
            print(f"speed-up spanbert (MLM+SBO) vs transformers: {row['speedup_vs_transformers']:.2f}x")
        if "best" in row:
            b_ = row["best"]
            print(f"speed-up spanbert at its best ({b_['spanbert']}) vs transformers at its best ({b_['transformers']}): "
                  f"{b_['ratio']:.2f}x")  # fmt: skip
        for who, r in row["compiled_vs_eager"].items():
            print(f"compiled vs eager, {who}: {r:.2f}x")
        if "sbo_overhead" in row:
            print(f"SBO overhead: {row['sbo_overhead'] * 100:+.1f}%")
        if a.profile and profile is None and ours_keys:
            best = min(ours_keys, key=med.get)
            try:
                profile = {"variant": best, "seq": T, "batch": B, "ms": profile_categories(steps[best], device)}
                print(f"profile of {best} (ms a step): " + ", ".join(f"{k} {v:.2f}" for k, v in profile["ms"].items()))
            except Exception as e:  # noqa: BLE001
                profile = {"variant": best, "seq": T, "batch": B, "error": f"{type(e).__name__}: {e}"}
                print(f"profile of {best} failed: {profile['error']}")
        del steps
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        write()
    for k, s in compile_s.items():
        print(f"compilation of {k}: {s:.1f} s (the first step, once a process)")


if __name__ == "__main__":
    main()
