"""Time and activation memory of one ModernBERT layer against the sequence length, local and global,
spanbert's beside transformers' (SDPA), up to 8,192 tokens; a plot with ``--plot``.

    python bench/modernbert_length.py                                   # CPU, base width, 512 .. 8192
    python bench/modernbert_length.py --plot docs/modernbert_length.png
    python bench/modernbert_length.py --device cuda --dtype bf16 --out length.json
    python bench/modernbert_length.py --smoke                           # seconds (tests/test_bench.py)

Each point is one forward and backward pass of a one-layer model (the layer, its embeddings and final
norm) at batch 1: ``layer_types`` ["sliding_attention"] for a local layer (window 128, RoPE base
10,000) and ["full_attention"] for a global one. Memory is what the pass keeps for its backward: the
bytes of every distinct tensor saved by autograd (`torch.autograd.graph.saved_tensors_hooks`), on any
device; on a GPU also the peak allocated. spanbert's local layer attends in chunks (linear in T);
transformers' builds a (T, T) sliding-window mask, so its local layer costs what a global one does.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from pretrain_step import timeit

from spanbert.modernbert import Encoder, modernbert_config


def saved_bytes(fn) -> int:
    """Bytes of the distinct tensors autograd saves while ``fn`` runs (views of one storage count once)."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor):
        try:
            storage = t.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
        except (RuntimeError, NotImplementedError):  # a tensor without storage (meta, sparse)
            pass
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


def one_layer(kind: str, hidden: int, heads: int, inter: int, library: str, device: torch.device):
    import transformers

    cfg = modernbert_config("base", num_hidden_layers=1, hidden_size=hidden, num_attention_heads=heads,
                            intermediate_size=inter, layer_types=(kind,), vocab_size=1024, pad_token_id=0, bos_token_id=1,
                            cls_token_id=1, eos_token_id=2, sep_token_id=2)  # fmt: skip
    if library == "spanbert":
        return Encoder(cfg, add_pooling_layer=False).to(device).train()
    hf_cfg = transformers.ModernBertConfig(**{k: v for k, v in cfg.to_hf_dict().items() if k != "model_type"})
    hf_cfg._attn_implementation = "sdpa"
    return transformers.ModernBertModel(hf_cfg).to(device).train()


def measure(model, T: int, device: torch.device, dtype, repeats: int) -> tuple[float, int, int | None]:
    ids = torch.randint(5, 1024, (1, T), device=device)
    mask = torch.ones(1, T, dtype=torch.long, device=device)

    def forward():
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            out = model(ids, attention_mask=mask) if not isinstance(model, Encoder) else model(ids)
        return out if isinstance(out, torch.Tensor) else out.last_hidden_state

    def step():
        forward().float().pow(2).mean().backward()
        model.zero_grad(set_to_none=True)

    seconds = timeit(step, device, warmup=1, repeats=repeats)
    peak = None
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        step()
        peak = torch.cuda.max_memory_allocated(device)
    kept = saved_bytes(lambda: forward().float().pow(2).mean())
    return seconds, kept, peak


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", default="512,1024,2048,4096,8192")
    p.add_argument("--hidden", type=int, default=768, help="ModernBERT-base's width (12 heads, intermediate 1152)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", choices=("fp32", "bf16"), default=None, help="default: fp32 on CPU, bf16 on GPU")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--plot", default=None, help="write the curves to this PNG (needs matplotlib)")
    p.add_argument("--out", default=None, help="also write every figure to this JSON file")
    p.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: a check that it runs (tests/test_bench.py)")
    a = p.parse_args()
    if a.smoke:
        a.lengths, a.hidden, a.repeats = "256,512", 64, 1
    device = torch.device(a.device)
    if a.threads:
        torch.set_num_threads(a.threads)
    dtype = {"fp32": None, "bf16": torch.bfloat16}[a.dtype or ("fp32" if device.type == "cpu" else "bf16")]
    heads = max(1, a.hidden // 64)
    inter = a.hidden * 3 // 2
    lengths = [int(x) for x in a.lengths.split(",")]
    rows = []
    print(f"one ModernBERT layer, width {a.hidden}, {heads} heads, batch 1, device {device}, dtype {dtype or 'fp32'}, "
          f"threads {torch.get_num_threads()}")  # fmt: skip
    print(f"{'layer':>7} {'library':>12} {'T':>6} {'ms':>9} {'saved MiB':>10}" + (" peak MiB" if device.type == "cuda" else ""))
    for kind, label in (("sliding_attention", "local"), ("full_attention", "global")):
        for library in ("spanbert", "transformers"):
            torch.manual_seed(0)
            model = one_layer(kind, a.hidden, heads, inter, library, device)
            for T in lengths:
                seconds, kept, peak = measure(model, T, device, dtype, a.repeats)
                rows.append(dict(layer=label, library=library, T=T, ms=seconds * 1000, saved_bytes=kept, peak_bytes=peak))
                extra = f" {peak / 2**20:8.1f}" if peak is not None else ""
                print(f"{label:>7} {library:>12} {T:6d} {seconds * 1000:9.1f} {kept / 2**20:10.1f}{extra}", flush=True)
    for label in ("local", "global"):
        for library in ("spanbert", "transformers"):
            pts = [r for r in rows if r["layer"] == label and r["library"] == library]
            if len(pts) > 1:
                grow_t = pts[-1]["ms"] / pts[0]["ms"]
                grow_m = pts[-1]["saved_bytes"] / pts[0]["saved_bytes"]
                print(f"{label} {library}: {pts[-1]['T'] // pts[0]['T']}x the length -> {grow_t:.1f}x the time, {grow_m:.1f}x the memory")
    last = {(r["layer"], r["library"]): r for r in rows if r["T"] == lengths[-1]}
    ratio = last[("local", "transformers")]["ms"] / last[("local", "spanbert")]["ms"]
    print(f"local layer at {lengths[-1]} tokens: spanbert {ratio:.2f}x transformers' speed")
    if a.out:
        Path(a.out).write_text(json.dumps({"device": str(device), "dtype": str(dtype or "fp32"), "rows": rows}, indent=2) + "\n")
    if a.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        for (label, library), style in {("local", "spanbert"): "o-", ("global", "spanbert"): "s-",
                                        ("local", "transformers"): "o--", ("global", "transformers"): "s--"}.items():  # fmt: skip
            pts = [r for r in rows if r["layer"] == label and r["library"] == library]
            xs = [r["T"] for r in pts]
            axes[0].plot(xs, [r["ms"] for r in pts], style, label=f"{library}, {label}")
            axes[1].plot(xs, [r["saved_bytes"] / 2**20 for r in pts], style, label=f"{library}, {label}")
        for ax, what in zip(axes, ("ms per forward + backward", "MiB saved for the backward")):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("sequence length (tokens)")
            ax.set_ylabel(what)
            ax.grid(True, alpha=0.3)
        axes[0].legend(fontsize=8)
        fig.suptitle(f"One ModernBERT layer (width {a.hidden}), batch 1, {device}, {dtype or 'fp32'}")
        fig.tight_layout()
        fig.savefig(a.plot, dpi=110)
        print(f"plot: {a.plot}")


if __name__ == "__main__":
    main()
