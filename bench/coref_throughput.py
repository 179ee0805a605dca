"""Coreference throughput: documents/s of a training step and of prediction, ours against the HF
`transformers.BertModel` encoding the same segments, on real LitBank documents, in one process.

    python bench/coref_throughput.py [--preset small] [--docs 4] [--max-seq-length 384] [--threads 2]
    python bench/coref_throughput.py --smoke     # tiny sizes, seconds (tests/test_bench.py)

There is no HF coreference model, so the HF side is the encoder alone (same weights, same segments):
the ratio "ours / HF encoder" is the share of the time the coarse-to-fine task layers cost on top of the
encoder (1.0 would be free). Prints wall and process-CPU seconds; CPU time is less disturbed by other
users of the cores.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from spanbert.config import model_config
from spanbert.tasks.coref import CorefConfig, CorefDataset, CorefModel, featurize, make_batch, read_conll
from spanbert.tokenization import train_tokenizer

ROOT = Path(__file__).resolve().parents[1]
LITBANK = ROOT / "../shared/data/litbank_coref/conll"


def timed(fn, n):
    w, c = time.perf_counter(), time.process_time()
    for i in range(n):
        fn(i)
    return time.perf_counter() - w, time.process_time() - c


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="small")
    p.add_argument("--docs", type=int, default=4)
    p.add_argument("--max-seq-length", type=int, default=384)
    p.add_argument("--ffnn-size", type=int, default=300)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: a check that it runs and prints its ratio (tests/test_bench.py)")
    a = p.parse_args()
    if a.smoke:
        a.preset = "tiny"
        a.docs = 1
        a.max_seq_length = 64
        a.ffnn_size = 16
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    files = sorted(LITBANK.glob("*.conll.gz"))[: a.docs]
    if not files:
        raise SystemExit(f"no LitBank documents in {LITBANK.resolve()}: this benchmark reads the real data")
    docs = [d for f in files for d in read_conll(f)]
    tok = train_tokenizer(None, vocab_size=8000, texts=[" ".join(d.words) for d in docs], show_progress=False)
    cfg = CorefConfig(max_seq_length=a.max_seq_length, ffnn_size=a.ffnn_size, singletons="true")
    bert_cfg = model_config(a.preset, vocab_size=tok.vocab_size)
    model = CorefModel(bert_cfg, cfg)
    feats = [featurize(d, tok, cfg.max_seq_length) for d in docs]
    train_ds = CorefDataset(feats, cfg.max_span_width, tok.pad_id, tok.cls_id, tok.sep_id, cfg.max_training_segments)
    full = [
        {k: v for k, v in make_batch(f, 0, len(f.segments), cfg.max_span_width, tok.pad_id, tok.cls_id, tok.sep_id).items()
         if not k.startswith("gold_")}
        for f in feats
    ]  # fmt: skip
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def train_step(i):
        out = model(**train_ds[i % len(train_ds)])
        opt.zero_grad()
        out["loss"].backward()
        opt.step()

    def predict(i):
        with torch.no_grad():
            model(**full[i % len(full)])

    from transformers import BertConfig as HFConfig
    from transformers import BertModel

    hf = BertModel(HFConfig(**bert_cfg.to_hf_dict()), add_pooling_layer=False)
    hf.load_state_dict(model.bert.state_dict(), strict=False)
    hf_opt = torch.optim.AdamW(hf.parameters(), lr=1e-4)

    def hf_train_step(i):
        b = train_ds[i % len(train_ds)]
        h = hf(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).last_hidden_state
        hf_opt.zero_grad()
        h.float().pow(2).mean().backward()
        hf_opt.step()

    def hf_predict(i):
        b = full[i % len(full)]
        with torch.no_grad():
            hf(input_ids=b["input_ids"], attention_mask=b["attention_mask"])

    model.train(), hf.train()
    train_step(0), hf_train_step(0)  # warm-up
    n = len(docs)
    ours_t, hf_t = timed(train_step, n), timed(hf_train_step, n)
    model.eval(), hf.eval()
    ours_p, hf_p = timed(predict, n), timed(hf_predict, n)
    words = sum(d.num_words for d in docs) / n
    print(f"{n} LitBank documents (~{words:.0f} words each), preset {a.preset}, segments {a.max_seq_length}, "
          f"ffnn {a.ffnn_size}, {a.threads} threads; training cuts documents to {cfg.max_training_segments} segments")  # fmt: skip
    for name, ours, ref in (("train step", ours_t, hf_t), ("predict", ours_p, hf_p)):
        print(f"{name:10s}: ours {n / ours[0]:.3f} docs/s (cpu {ours[1]:.1f}s) | HF BertModel encoder only "
              f"{n / ref[0]:.3f} docs/s (cpu {ref[1]:.1f}s) | ours/HF time {ours[0] / ref[0]:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
