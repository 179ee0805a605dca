"""A ModernBERT pre-training step: spanbert's (`spanbert.modernbert.ModernBertForPreTraining`, MLM
only and MLM + SBO) against transformers' `ModernBertForMaskedLM` (SDPA attention) on the same
weights config and the same padded batch, in one run, models alternating round by round.

    python bench/modernbert_step.py                          # CPU: small, seq 512, batch 8, realistic padding
    python bench/modernbert_step.py --seq 2048 --batch 2
    python bench/modernbert_step.py --model base --seq 512 --batch 2
    python bench/modernbert_step.py --device cuda --model base --seq 2048 --batch 16 --dtype bf16
    python bench/modernbert_step.py --device cuda --model base --seq 2048 --batch 16 --dtype bf16 --compile
    python bench/modernbert_step.py --smoke                  # tiny sizes, seconds (tests/test_bench.py)

Batches with realistic padding (``--padding realistic``, the default): half the rows are full blocks
(sentence-packed, as pre-training cuts them), the others short documents of 1/8 to the whole block
length, right-padded; 30% of the real tokens are masked in spans (ModernBERT's rate). transformers
computes the vocabulary logits at every position unless ``sparse_prediction`` is on, which this script
also times. It prints tokens/s (real tokens), the ratio to transformers, and the step's useful FLOP/s
against the matmul rate measured at the model's own shapes (the roofline of this model on this device).
``--compile`` adds spanbert's MLM step compiled as the trainer compiles it (`spanbert.compile`; on CUDA
in bf16 its layers keep the packed FlashAttention path), with the compilation's time; a variant that
fails is reported and the others still run.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import numpy as np
import torch
from pretrain_step import PEAK_FLOPS, _time_variants, make_step, timeit

from spanbert.compile import compile_regions
from spanbert.modernbert import ModernBertForPreTraining, flops_per_token, modernbert_config


def padded_batch(B: int, T: int, V: int, padding: str, mask_rate: float = 0.3, seed: int = 0) -> dict[str, torch.Tensor]:
    """Right-padded ids, spans of 1-10 tokens masked to ``mask_rate`` of each row's real tokens."""
    rng = np.random.default_rng(seed)
    lengths = [T if padding == "none" or b % 2 == 0 else int(rng.integers(T // 8, T + 1)) for b in range(B)]
    ids = rng.integers(10, V, size=(B, T))
    mask = np.zeros((B, T), dtype=np.int64)
    pos, left, right, rel = [], [], [], []
    for b, n in enumerate(lengths):
        mask[b, :n] = 1
        ids[b, 0], ids[b, n - 1] = 1, 2
        ids[b, n:] = 0
        taken = np.zeros(T, bool)
        budget = int(mask_rate * (n - 2))
        while taken.sum() < budget and n > 4:
            k = min(int(rng.geometric(0.2)), 10, budget - int(taken.sum()), n - 3)
            s = int(rng.integers(1, n - 1 - k))
            if taken[s - 1 : s + k + 1].any():
                continue
            taken[s : s + k] = True
            for i in range(k):
                pos.append(b * T + s + i)
                left.append(b * T + s - 1)
                right.append(b * T + s + k)
                rel.append(i)
    pos_t = torch.tensor(pos)
    labels = torch.from_numpy(ids).view(-1)[pos_t].clone()
    masked = torch.from_numpy(ids).clone()
    masked.view(-1)[pos_t] = 4
    return dict(input_ids=masked, attention_mask=torch.from_numpy(mask), mlm_positions=pos_t, mlm_labels=labels,
                sbo_positions=pos_t, sbo_labels=labels, sbo_left=torch.tensor(left), sbo_right=torch.tensor(right),
                sbo_rel=torch.tensor(rel))  # fmt: skip


def hf_batch(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    B, T = batch["input_ids"].shape
    labels = torch.full((B * T,), -100, dtype=torch.long)
    labels[batch["mlm_positions"]] = batch["mlm_labels"]
    return dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels.view(B, T))


def model_shape_matmul_rate(cfg, n_tokens: int, device: torch.device, dtype: torch.dtype | None, repeats: int) -> float:
    """FLOP/s of the encoder's GEMMs at their own shapes (N real tokens), forward and both backward
    products, weighted by their FLOPs: what a step made only of its matrix multiplies would reach."""
    H, I = cfg.hidden_size, cfg.intermediate_size
    total_flops = total_time = 0.0
    dt = dtype or torch.float32
    for k, m in ((H, 3 * H), (H, H), (H, 2 * I), (I, H)):
        x = torch.randn(n_tokens, k, device=device, dtype=dt)
        w = torch.randn(k, m, device=device, dtype=dt)
        g = torch.randn(n_tokens, m, device=device, dtype=dt)
        for a, b in ((x, w), (g, w.t()), (x.t(), g)):  # forward, grad of the input, grad of the weight
            t = timeit(lambda a=a, b=b: a @ b, device, warmup=1, repeats=repeats)
            total_flops += 2 * a.shape[0] * a.shape[1] * b.shape[1]
            total_time += t
    return total_flops / total_time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="small", help="ModernBERT preset: tiny, small, base, large")
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--padding", choices=("realistic", "none"), default="realistic")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", choices=("fp32", "bf16"), default=None, help="default: fp32 on CPU, bf16 on GPU")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--compile", action="store_true", help="also time spanbert's MLM step compiled (as the trainer compiles)")
    p.add_argument("--backend", default="inductor", help="torch.compile backend of --compile (aot_eager: a quick check)")
    p.add_argument("--out", default=None, help="also write every figure to this JSON file")
    p.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: a check that it runs (tests/test_bench.py)")
    a = p.parse_args()
    if a.smoke:
        a.model, a.seq, a.batch, a.warmup, a.repeats, a.rounds = "tiny", 96, 2, 0, 1, 1
    import transformers

    device = torch.device(a.device)
    if a.threads:
        torch.set_num_threads(a.threads)
    dtype = {"fp32": None, "bf16": torch.bfloat16}[a.dtype or ("fp32" if device.type == "cpu" else "bf16")]
    cfg = modernbert_config(a.model, vocab_size=50368, pad_token_id=0, cls_token_id=1, sep_token_id=2)
    batch = padded_batch(a.batch, a.seq, cfg.vocab_size, a.padding)
    n_real = int(batch["attention_mask"].sum())
    torch.manual_seed(0)
    hf_cfg = transformers.ModernBertConfig(**{k: v for k, v in cfg.to_hf_dict().items() if k != "model_type"})
    hf_cfg._attn_implementation = "sdpa"
    sparse_cfg = transformers.ModernBertConfig(**{**hf_cfg.to_dict(), "sparse_prediction": True})
    sparse_cfg._attn_implementation = "sdpa"
    models = {
        "spanbert ModernBERT (MLM)": (ModernBertForPreTraining(cfg, sbo=False), batch),
        "spanbert ModernBERT (MLM+SBO)": (ModernBertForPreTraining(cfg, sbo=True), batch),
        "transformers ModernBertForMaskedLM": (transformers.ModernBertForMaskedLM(hf_cfg), hf_batch(batch)),
        "transformers, sparse_prediction": (transformers.ModernBertForMaskedLM(sparse_cfg), hf_batch(batch)),
    }
    compile_s = None
    if a.compile:
        compiled = copy.deepcopy(models["spanbert ModernBERT (MLM)"][0])  # the same weights, compiled in place
        compile_regions(compiled, backend=a.backend)
        models["spanbert ModernBERT (MLM) compiled"] = (compiled, batch)
    steps = {k: make_step(m.to(device).train(), b, device, dtype, True) for k, (m, b) in models.items()}
    if a.compile:  # the first call compiles: timed apart
        t = time.perf_counter()
        try:
            steps["spanbert ModernBERT (MLM) compiled"]()
            if device.type == "cuda":
                torch.cuda.synchronize()
        except Exception:  # noqa: BLE001 -- `_time_variants` reports it
            pass
        compile_s = time.perf_counter() - t
    med, peak_gib, errors = _time_variants(steps, device, a.warmup, a.repeats, a.rounds)
    header = (f"ModernBERT {a.model}: {cfg.num_hidden_layers} layers x {cfg.hidden_size}, seq {a.seq}, batch {a.batch}, "
              f"{a.padding} padding ({n_real} real tokens of {a.batch * a.seq}), device {device}, dtype {dtype or 'fp32'}, "
              f"threads {torch.get_num_threads()}, torch {torch.__version__}, transformers {transformers.__version__}")  # fmt: skip
    print(header)
    fpt = flops_per_token(cfg, a.seq, mask_rate=0.3, sbo=False)  # the MLM step's useful work (the SBO row does more)
    rate = model_shape_matmul_rate(cfg, n_real, device, dtype, a.repeats)
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    peak = next((v for k, v in PEAK_FLOPS.items() if k in device_name), None) if device.type == "cuda" else None
    useful_of = {k: fpt * n_real / t for k, t in med.items() if "SBO" not in k}
    for k, t in med.items():
        extra = ""
        if k in useful_of:
            mfu = f", MFU {useful_of[k] / peak * 100:.1f}%" if peak else ""
            extra = f", {useful_of[k] / rate * 100:.0f}% of its matmuls' rate{mfu}"
        mem = f", peak {peak_gib[k]:.1f} GiB" if k in peak_gib else ""
        print(f"{k:38s} {n_real / t:10.0f} real tokens/s  ({t * 1000:.1f} ms/step{extra}{mem})")
    for k, e in errors.items():
        print(f"{k:38s} failed: {e}")
    ours, hf, sparse = "spanbert ModernBERT (MLM)", "transformers ModernBertForMaskedLM", "transformers, sparse_prediction"
    ratio = med[hf] / med[ours] if ours in med and hf in med else None
    ratio_sparse = med[sparse] / med[ours] if ours in med and sparse in med else None
    if ratio is not None and ratio_sparse is not None:
        print(f"speed-up spanbert (MLM) vs transformers: {ratio:.2f}x (vs its sparse_prediction: {ratio_sparse:.2f}x)")
    best = min((k for k in (ours, ours + " compiled") if k in med), key=med.get, default=None)
    best_hf = min((k for k in (hf, sparse) if k in med), key=med.get, default=None)
    best_ratio = med[best_hf] / med[best] if best and best_hf else None
    if best_ratio is not None:
        print(f"speed-up spanbert at its best ({best}) vs transformers at its best ({best_hf}): {best_ratio:.2f}x")
    compiled_vs_eager = med[ours] / med[ours + " compiled"] if ours in med and ours + " compiled" in med else None
    if compiled_vs_eager is not None:
        print(f"compiled vs eager, spanbert: {compiled_vs_eager:.2f}x; compilation {compile_s:.1f} s")
    useful = useful_of.get(best) if best else None
    if useful is not None:
        print(f"useful work {fpt / 1e6:.1f} MFLOP/token: {best} {useful / 1e9:.1f} GFLOP/s, "
              f"{useful / rate * 100:.0f}% of the {rate / 1e9:.1f} GFLOP/s its matmuls reach at the model's shapes")  # fmt: skip
    if a.out:
        figures = {"header": header, "device": device_name, "model": a.model, "seq": a.seq, "batch": a.batch,
                   "padding": a.padding, "real_tokens": n_real, "ms_per_step": {k: t * 1000 for k, t in med.items()},
                   "real_tokens_per_s": {k: n_real / t for k, t in med.items()}, "speedup_vs_transformers": ratio,
                   "speedup_vs_transformers_sparse": ratio_sparse, "best": {"spanbert": best, "transformers": best_hf,
                   "ratio": best_ratio}, "compiled_vs_eager": compiled_vs_eager, "compile_seconds": compile_s,
                   "flops_per_token": fpt, "useful_flops": useful_of, "model_shape_matmul_flops": rate,
                   "share_of_matmul_rate": {k: u / rate for k, u in useful_of.items()}, "dense_peak_flops": peak,
                   "mfu_vs_peak": {k: u / peak for k, u in useful_of.items()} if peak else None,
                   "peak_memory_gib": peak_gib, "errors": errors}  # fmt: skip
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(figures, indent=2) + "\n")

if __name__ == "__main__":
    main()
