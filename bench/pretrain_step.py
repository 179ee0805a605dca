"""A full pre-training step (forward, backward, AdamW) of our SpanBERT (MLM + SBO) against
transformers' BertForPreTraining (MLM + NSP) on the same config and the same token batch, in one run.

    python bench/pretrain_step.py                       # CPU: 4 layers x 256, seq 512, batch 8
    python bench/pretrain_step.py --smoke               # tiny sizes, seconds (tests/test_bench.py)
    python bench/pretrain_step.py --device cuda --model base --batch 32 --dtype bf16   # GPU
    python bench/pretrain_step.py --device cuda --model base --dtype bf16 --out bench.json  # as bench/gpu.sh

Prints tokens/s for each, the ratio, and the SBO overhead (our step with and without SBO); the
transformers model runs with SDPA attention. It also prints MFU from the useful FLOPs per token
(`spanbert.model.flops_per_token`) against two ceilings: the device's dense peak (a table of known
GPUs; none on CPU) and a measured large matmul in the same dtype (what this device really reaches).
``--out`` writes every figure as JSON.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np
import torch

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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="size preset (default: 4 layers x 256 on CPU, base on GPU)")
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", choices=("fp32", "bf16"), default=None, help="default: fp32 on CPU, bf16 on GPU")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--compile", action="store_true", help="also time our model under torch.compile")
    p.add_argument("--matmul", type=int, default=None, help="size of the measured matmul (default 8192 on GPU, 1024 on CPU)")
    p.add_argument("--out", default=None, help="also write every figure to this JSON file")
    p.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: a check that it runs and prints its ratio (tests/test_bench.py)")
    a = p.parse_args()
    if a.smoke:
        a.model = "tiny"
        a.seq = 64
        a.batch = 2
        a.warmup = 1
        a.repeats = 1
        a.matmul = 128
    import transformers

    device = torch.device(a.device)
    if a.threads:
        torch.set_num_threads(a.threads)
    name = a.model or ("small" if device.type == "cpu" else "base")
    cfg = model_config(name)
    dtype = {"fp32": None, "bf16": torch.bfloat16}[a.dtype or ("fp32" if device.type == "cpu" else "bf16")]
    batch = span_batch(a.batch, a.seq, cfg.vocab_size)
    n_tokens = a.batch * a.seq
    fused = True  # the trainer's choice on CPU and GPU, for both models alike

    torch.manual_seed(0)
    ours = SpanBertForPreTraining(cfg, sbo=True).to(device).train()
    ours_nosbo = SpanBertForPreTraining(cfg, sbo=False).to(device).train()
    hf_cfg = transformers.BertConfig(**cfg.to_hf_dict())
    hf_cfg._attn_implementation = "sdpa"  # transformers' fastest BERT attention: the fair comparison
    hf = transformers.BertForPreTraining(hf_cfg).to(device).train()
    steps = {
        "spanbert (MLM+SBO)": make_step(ours, batch, device, dtype, fused),
        "spanbert (MLM only)": make_step(ours_nosbo, batch, device, dtype, fused),
        "transformers BertForPreTraining (MLM+NSP)": make_step(hf, hf_batch(batch), device, dtype, fused),
    }
    if a.compile:
        steps["spanbert (MLM+SBO) compiled"] = make_step(torch.compile(ours), batch, device, dtype, fused)
    # interleave the measurements so that load from other processes hits all of them alike
    times: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(3):
        for k, s in steps.items():
            times[k].append(timeit(s, device, a.warmup, a.repeats))
    med = {k: statistics.median(v) for k, v in times.items()}
    header = (
        f"config {name}: {cfg.num_hidden_layers} layers x {cfg.hidden_size}, vocab {cfg.vocab_size}, "
        f"seq {a.seq}, batch {a.batch}, device {device}, dtype {dtype or 'fp32'}, threads {torch.get_num_threads()}, "
        f"torch {torch.__version__}, transformers {transformers.__version__}"
    )
    print(header)
    for k, t in med.items():
        print(f"{k:45s} {n_tokens / t:10.0f} tokens/s  ({t * 1000:.1f} ms/step)")
    hf_key = "transformers BertForPreTraining (MLM+NSP)"
    ratio = med[hf_key] / med["spanbert (MLM+SBO)"]
    print(f"speed-up spanbert (MLM+SBO) vs transformers: {ratio:.2f}x")
    overhead = med["spanbert (MLM+SBO)"] / med["spanbert (MLM only)"] - 1
    print(f"SBO overhead: {overhead * 100:+.1f}%")
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    peak = next((v for k, v in PEAK_FLOPS.items() if k in device_name), None) if device.type == "cuda" else None
    fpt = flops_per_token(cfg, a.seq)
    measured = matmul_flops(device, dtype, a.matmul or (8192 if device.type == "cuda" else 1024))
    achieved = {k: fpt * n_tokens / t for k, t in med.items()}
    ours = achieved["spanbert (MLM+SBO)"]
    print(f"useful FLOPs/token {fpt / 1e6:.1f} M; spanbert achieves {ours / 1e12:.3f} TFLOP/s")
    print(f"dense {dtype or 'fp32'} peak of {device_name}: " + (f"{peak / 1e12:.0f} TFLOP/s, MFU {ours / peak * 100:.1f}%"
          if peak else "unknown (no MFU against it)"))  # fmt: skip
    print(f"measured matmul: {measured / 1e12:.3f} TFLOP/s, spanbert at {ours / measured * 100:.1f}% of it; "
          f"transformers at {achieved[hf_key] / measured * 100:.1f}%")
    if a.out:
        figures = {
            "header": header, "device": device_name, "model": name, "seq": a.seq, "batch": a.batch,
            "dtype": str(dtype or "fp32"), "torch": torch.__version__, "transformers": transformers.__version__,
            "tokens_per_s": {k: n_tokens / t for k, t in med.items()}, "ms_per_step": {k: t * 1000 for k, t in med.items()},
            "speedup_vs_transformers": ratio, "sbo_overhead": overhead, "flops_per_token": fpt,
            "achieved_flops": achieved, "dense_peak_flops": peak, "mfu_vs_peak": ours / peak if peak else None,
            "matmul_flops": measured, "mfu_vs_matmul": ours / measured,
        }  # fmt: skip
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
