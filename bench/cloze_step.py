"""Training throughput of the two-tower cloze model against SpanBERT at a comparable parameter count.

    python bench/cloze_step.py                       # CPU: two-tower "small" (2 x 4 blocks x 256) vs
    python bench/cloze_step.py --smoke               # tiny sizes, seconds (tests/test_bench.py)
                                                     # SpanBERT 8 layers x 256, seq 128, batch 8
    python bench/cloze_step.py --device cuda --preset bpe_large --bert-layers 24 --seq 512 --batch 16 --dtype bf16

A full step each (forward, backward, clipping, AdamW) on the same random token batch; the towers of
N blocks are compared with a SpanBERT encoder of 2N layers of the same width (the non-embedding
parameter counts are printed: the two-tower model has one more block, its combination module).
Prints tokens/s, the ratio, and the training FLOPs per token of each (`spanbert.cloze.flops_per_token`,
`spanbert.model.flops_per_token`); the measurements are interleaved so that load from other
processes hits both alike.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from pretrain_step import make_step, span_batch, timeit  # noqa: E402

from spanbert import cloze  # noqa: E402
from spanbert.config import model_config  # noqa: E402
from spanbert.model import SpanBertForPreTraining, flops_per_token  # noqa: E402


def non_embedding(model: torch.nn.Module) -> int:
    skip = (
        "embed_tokens",
        "word_embeddings",
        "position_embeddings",
        "token_type_embeddings",
        "adaptive_softmax",
        "cls.predictions.decoder",
    )
    return sum(p.numel() for n, p in model.named_parameters() if not any(s in n for s in skip))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--preset", default="small", help="two-tower preset (spanbert.cloze_config.CLOZE_PRESETS, :field=value,... allowed)"
    )
    p.add_argument("--objective", default="cloze", choices=cloze.SYSTEMS)
    p.add_argument("--bert-layers", type=int, default=None, help="SpanBERT layers (default: 2 x blocks per tower)")
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", choices=("fp32", "bf16"), default=None, help="default: fp32 on CPU, bf16 on GPU")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: a check that it runs and prints its ratio (tests/test_bench.py)")
    a = p.parse_args()
    if a.smoke:
        a.preset = "tiny"
        a.vocab = 2000
        a.seq = 32
        a.batch = 2
        a.warmup = 1
        a.repeats = 1
        a.rounds = 1
    device = torch.device(a.device)
    if a.threads:
        torch.set_num_threads(a.threads)
    dtype = {"fp32": None, "bf16": torch.bfloat16}[a.dtype or ("fp32" if device.type == "cpu" else "bf16")]
    ccfg = cloze.cloze_config(
        a.preset, objective=a.objective, vocab_size=a.vocab, pad_id=0, bos_id=2, eos_id=3, sep_id=4
    )
    d = ccfg.d_model
    bcfg = model_config(
        "small", hidden_size=d, num_hidden_layers=a.bert_layers or 2 * ccfg.num_layers, num_attention_heads=ccfg.num_heads,
        intermediate_size=ccfg.ffn_dim, vocab_size=a.vocab, max_position_embeddings=max(512, a.seq),
    )  # fmt: skip
    torch.manual_seed(0)
    chars = None
    if ccfg.input == "char_cnn":
        chars = cloze.word_characters([f"w{i}" for i in range(a.vocab)], ccfg.max_word_chars)
    two = cloze.TwoTowerModel(ccfg, word_chars=chars).to(device).train()
    bert = SpanBertForPreTraining(bcfg, sbo=True).to(device).train()
    rng = np.random.default_rng(0)
    ids = torch.from_numpy(rng.integers(5, a.vocab, size=(a.batch, a.seq)))
    ids[:, 0], ids[:, -1] = 2, 3
    steps = {
        f"two-tower {a.preset} ({a.objective})": make_step(two, {"input_ids": ids}, device, dtype, True),
        f"spanbert {bcfg.num_hidden_layers} x {d} (MLM+SBO)": make_step(
            bert, span_batch(a.batch, a.seq, a.vocab), device, dtype, True
        ),
    }
    times: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(a.rounds):
        for k, s in steps.items():
            times[k].append(timeit(s, device, a.warmup, a.repeats))
    med = {k: statistics.median(v) for k, v in times.items()}
    n_tokens = a.batch * a.seq
    flops = {
        list(steps)[0]: cloze.flops_per_token(ccfg, a.seq),
        list(steps)[1]: flops_per_token(bcfg, a.seq),
    }
    params = {list(steps)[0]: non_embedding(two), list(steps)[1]: non_embedding(bert)}
    print(
        f"seq {a.seq}, batch {a.batch}, vocab {a.vocab}, device {device}, dtype {dtype or 'fp32'}, "
        f"threads {torch.get_num_threads()}, torch {torch.__version__}"
    )
    for k, t in med.items():
        print(
            f"{k:38s} {n_tokens / t:9.0f} tokens/s ({t * 1000:7.1f} ms/step)  {params[k] / 1e6:6.2f}M non-embedding "
            f"params  {flops[k] / 1e6:8.1f} MFLOPs/token"
        )
    k1, k2 = list(steps)
    print(
        f"two-tower / spanbert: time per token {med[k1] / med[k2]:.2f}x, FLOPs per token {flops[k1] / flops[k2]:.2f}x"
    )


if __name__ == "__main__":
    main()
