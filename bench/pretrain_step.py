"""A full pre-training step (forward, backward, AdamW) of our SpanBERT (MLM + SBO) against
transformers' BertForPreTraining (MLM + NSP) on the same config and the same token batch, in one run.

    python bench/pretrain_step.py                       # CPU: 4 layers x 256, seq 512, batch 8
    python bench/pretrain_step.py --device cuda --model base --batch 32 --dtype bf16   # GPU

Prints tokens/s for each, the ratio, and the SBO overhead (our step with and without SBO). On a GPU
it also prints MFU from the useful FLOPs per token (`spanbert.model.flops_per_token`).
"""

from __future__ import annotations

import argparse
import statistics
import time

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
    a = p.parse_args()
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
    hf = transformers.BertForPreTraining(transformers.BertConfig(**cfg.to_hf_dict())).to(device).train()
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
    print(
        f"config {name}: {cfg.num_hidden_layers} layers x {cfg.hidden_size}, vocab {cfg.vocab_size}, "
        f"seq {a.seq}, batch {a.batch}, device {device}, dtype {dtype or 'fp32'}, threads {torch.get_num_threads()}, "
        f"torch {torch.__version__}, transformers {transformers.__version__}"
    )
    for k, t in med.items():
        print(f"{k:45s} {n_tokens / t:10.0f} tokens/s  ({t * 1000:.1f} ms/step)")
    hf_key = "transformers BertForPreTraining (MLM+NSP)"
    ratio = med[hf_key] / med["spanbert (MLM+SBO)"]
    print(f"speed-up spanbert (MLM+SBO) vs transformers: {ratio:.2f}x")
    overhead = med["spanbert (MLM+SBO)"] / med["spanbert (MLM only)"] - 1
    print(f"SBO overhead: {overhead * 100:+.1f}%")
    if device.type == "cuda":
        peak = next((v for k, v in PEAK_FLOPS.items() if k in torch.cuda.get_device_name()), None)
        fpt = flops_per_token(cfg, a.seq)
        achieved = fpt * n_tokens / med["spanbert (MLM+SBO)"]
        print(f"useful FLOPs/token {fpt / 1e6:.0f} M; achieved {achieved / 1e12:.1f} TFLOP/s", end="")
        print(f"; MFU {achieved / peak * 100:.1f}%" if peak else "")


if __name__ == "__main__":
    main()
