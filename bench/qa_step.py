"""QA fine-tuning step: spanbert's `SpanBertForQuestionAnswering` vs `transformers.BertForQuestionAnswering`.

Both models get the same weights, the same batches (real SQuAD dev windows when the data is there,
padded to the longest window of each batch), the same dtype (fp32), the same number of threads and
an AdamW step each; dropout is on in both (training mode). Steps alternate between the models
repeat by repeat so that background load hits all alike. Prints examples/s (windows/s) and ratios for
(a) identical dynamically padded batches (the model alone) and (b) HF padded to max_seq_length, the
default of its `run_qa.py` (`pad_to_max_length=True`), against our dynamic padding (the pipeline).

    python bench/qa_step.py                       # small preset, batch 16, max_seq_length 384
    python bench/qa_step.py --smoke               # tiny sizes, seconds (tests/test_bench.py)
    python bench/qa_step.py --preset tiny --steps 3 --repeats 2
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from spanbert.config import model_config
from spanbert.tasks import qa

ROOT = Path(__file__).resolve().parents[1]
SQUAD = ROOT / "../shared/data/squad/dev-v1.1.json"


def make_batches(batch_size: int, n_batches: int, max_seq_length: int, seed: int, full_windows: bool = False):
    """Batches of real SQuAD dev windows (tokenizer trained on the dev contexts), else random ids.

    ``full_windows``: only windows of exactly max_seq_length tokens (long contexts), so no batch is padded.
    """
    from spanbert.tokenization import train_tokenizer

    rng = np.random.default_rng(seed)
    if SQUAD.is_file():
        data = qa.read_squad(SQUAD)
        data = qa.QAData(
            data.path,
            data.format,
            False,
            data.contexts,
            data.examples if full_windows else data.examples[:2000],
            data.num_articles,
            data.raw,
        )
        tok = train_tokenizer(None, 8000, texts=data.contexts, show_progress=False)
        td = qa.tokenize_data(data, tok, progress=False)
        feats = qa.make_features(data, td, tok.cls_id, tok.sep_id, max_seq_length, 128, training=True)
        ds = qa.QAFeatureDataset(feats)
        order = rng.permutation(len(ds))
        if full_windows:
            order = np.array([i for i in order if len(feats.input_ids[i]) == max_seq_length])
            if len(order) < batch_size * n_batches:
                raise SystemExit(f"only {len(order)} full windows of {max_seq_length} tokens in the sample")
        batches = [
            qa.collate_qa([ds[int(i)] for i in order[b * batch_size : (b + 1) * batch_size]], tok.pad_id)
            for b in range(n_batches)
        ]
        return batches, tok.vocab_size, "SQuAD v1.1 dev windows"
    vocab = 8000
    batches = []
    for _ in range(n_batches):
        items = []
        for _ in range(batch_size):
            n = int(rng.integers(max_seq_length // 2, max_seq_length + 1))
            pos = int(rng.integers(12, n - 1))
            items.append(
                {"input_ids": rng.integers(5, vocab, n), "query_len": 10, "start_positions": pos, "end_positions": pos}
            )
        batches.append(qa.collate_qa(items))
    return batches, vocab, "random ids (SQuAD data not found)"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="small", help="model preset (default: small)")
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--max_seq_length", type=int, default=384)
    p.add_argument("--steps", type=int, default=4, help="timed steps per repeat and model")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--full_windows", action="store_true", help="only unpadded batches of full-length windows")
    p.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: a check that it runs and prints its ratio (tests/test_bench.py)")
    args = p.parse_args()
    if args.smoke:
        args.preset = "tiny"
        args.batch_size = 4
        args.max_seq_length = 64
        args.steps = 1
        args.repeats = 1
        args.warmup = 1

    import transformers

    torch.set_num_threads(args.threads)
    batches, vocab, source = make_batches(
        args.batch_size, args.steps, args.max_seq_length, args.seed, args.full_windows
    )
    cfg = model_config(args.preset, vocab_size=vocab)
    torch.manual_seed(args.seed)
    ours = qa.SpanBertForQuestionAnswering(cfg).train()
    hf = transformers.BertForQuestionAnswering(transformers.BertConfig(**cfg.to_hf_dict())).train()
    missing, unexpected = hf.load_state_dict(ours.state_dict(), strict=False)
    assert not unexpected and all("position_ids" in k for k in missing), (missing, unexpected)
    attn = getattr(hf.config, "_attn_implementation", "?")

    def hf_batch(b):  # HF always takes a mask; ones where the batch has no padding (same information)
        return {**b, "attention_mask": b.get("attention_mask", torch.ones_like(b["input_ids"]))}

    def pad_to_max(b):  # HF run_qa.py's default (pad_to_max_length=True): every window padded to max_seq_length
        out = hf_batch(b)
        extra = args.max_seq_length - out["input_ids"].shape[1]
        for k in ("input_ids", "token_type_ids", "attention_mask"):
            out[k] = torch.nn.functional.pad(out[k], (0, extra))
        return out

    hf_opt = torch.optim.AdamW(hf.parameters(), lr=3e-5)
    models = {
        "spanbert": (ours, torch.optim.AdamW(ours.parameters(), lr=3e-5), lambda b: ours(**b)["loss"]),
        "transformers": (hf, hf_opt, lambda b: hf(**hf_batch(b)).loss),
        "transformers_pad_max": (hf, hf_opt, lambda b: hf(**pad_to_max(b)).loss),
    }

    def run(name: str, n: int) -> float:
        _, opt, loss_of = models[name]
        t0 = time.perf_counter()
        for i in range(n):
            loss = loss_of(batches[i % len(batches)])
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return time.perf_counter() - t0

    for name in models:
        run(name, args.warmup)
    rates: dict[str, list[float]] = {name: [] for name in models}
    examples = args.steps * args.batch_size
    for _ in range(args.repeats):
        for name in models:
            rates[name].append(examples / run(name, args.steps))
    lengths = [b["input_ids"].shape[1] for b in batches]
    padded = sum("attention_mask" in b for b in batches)
    print(
        f"QA training step, preset {args.preset} (H={cfg.hidden_size}, L={cfg.num_hidden_layers}), batch {args.batch_size}, "
        f"max_seq_length {args.max_seq_length}, {source}; padded lengths {lengths} ({padded}/{len(batches)} batches padded); "
        f"fp32, {args.threads} threads, AdamW step included; HF attention: {attn}; torch {torch.__version__}, "
        f"transformers {transformers.__version__}"
    )
    med = {name: statistics.median(r) for name, r in rates.items()}
    for name, r in rates.items():
        print(
            f"  {name:<21} {med[name]:8.2f} examples/s (median of {args.repeats}: {', '.join(f'{x:.2f}' for x in r)})"
        )
    print(
        f"  ratio spanbert / transformers, identical batches:            {med['spanbert'] / med['transformers']:.2f}x"
    )
    print(
        f"  ratio spanbert / transformers padded to max_seq_length (run_qa.py default): "
        f"{med['spanbert'] / med['transformers_pad_max']:.2f}x"
    )


if __name__ == "__main__":
    main()
