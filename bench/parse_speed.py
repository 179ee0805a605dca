"""Parsing speed: sentences/s of `spanbert predict parse` on the PTB sample's test split, and the share of
the time spent decoding (CKY over all spans + building the trees) against the network.

    python bench/parse_speed.py [--model RUN/parse] [--preset small] [--device cpu] [--threads 2]
    python bench/parse_speed.py --smoke        # tiny encoder, 40 sentences: checks the script runs

Without --model the parser is freshly initialised on a random encoder of --preset (the work per
sentence is the same as a trained model's: CKY costs the same whatever the scores). Also times CKY alone
on one 40-word sentence (the issue's "milliseconds on a CPU"), median of 50 runs.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from spanbert.tasks import parse as P
from spanbert.tasks.trees import read_trees

ROOT = Path(__file__).resolve().parents[1]
TEST = ROOT / "../shared/data/ptb_sample/test"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="a parser saved by `spanbert finetune parse` (default: a random one)")
    p.add_argument("--preset", default="small", help="encoder size of the random parser (default: small)")
    p.add_argument("--data", default=str(TEST), help="trees to parse (default: the PTB sample's test split)")
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--smoke", action="store_true", help="tiny preset, 40 sentences")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    trees = read_trees(a.data).trees[: 40 if a.smoke else None]
    sentences, tags = [t.words() for t in trees], [t.tags() for t in trees]
    if a.model:
        model, tok = P.load_parser(a.model, a.device)
    else:
        from spanbert.config import model_config
        from spanbert.model import Encoder
        from spanbert.tokenization import train_tokenizer

        tok = train_tokenizer(None, vocab_size=8000, texts=[" ".join(s) for s in sentences], show_progress=False)
        encoder = Encoder(model_config("tiny" if a.smoke else a.preset, vocab_size=tok.vocab_size))
        train = read_trees(Path(a.data).parent / "train").trees if not a.smoke else trees
        model = P.ChartParser(encoder, P.chart_labels(train), P.tag_list(train), P.ParseConfig())
        model.to(a.device).eval()
    P.parse_sentences(model, tok, sentences[:8], tags[:8], batch_size=a.batch_size)  # warm-up
    if a.device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    parsed = P.parse_sentences(model, tok, sentences, tags, batch_size=a.batch_size)
    seconds = time.perf_counter() - t0
    words = sum(len(s) for s in sentences)
    print(f"device {a.device} ({torch.get_num_threads()} threads), encoder {a.model or ('tiny' if a.smoke else a.preset)}, "
          f"parser layers {model.config.parser_layers} x d_model {model.config.d_model}, {len(model.labels)} labels")  # fmt: skip
    print(f"{len(sentences)} sentences ({words} words, longest {max(map(len, sentences))}) in {seconds:.2f}s: "
          f"{len(sentences) / seconds:.1f} sentences/s; decoding {parsed.decode_seconds:.2f}s "
          f"= {100 * parsed.decode_seconds / seconds:.1f}% of the time")  # fmt: skip
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(1, 41, 41))
    runs = []
    for _ in range(50):
        t = time.perf_counter()
        P.cky(scores, [40])
        runs.append(time.perf_counter() - t)
    print(f"CKY alone, one 40-word sentence: {1000 * statistics.median(runs):.2f} ms (median of 50)")


if __name__ == "__main__":
    main()
