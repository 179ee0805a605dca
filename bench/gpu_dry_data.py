"""Tiny stand-ins for the files `bench/gpu.sh` reads, for its CPU dry run: a pre-training corpus
(gzipped text, documents separated by blank lines) and SQuAD 1.1 train/dev files in the official
layout. Written in seconds, deterministic; they show that the script works, not anything about
models.

    python bench/gpu_dry_data.py OUT/data      # OUT/data/pretrain-corpus/..., OUT/data/squad/...
"""

from __future__ import annotations

import gzip
import json
import random
import sys
from pathlib import Path

WORDS = (
    "the river flows past old stone bridges while merchants sell bread and fish to travellers who "
    "arrive by boat each morning before the bells of the cathedral ring across the quiet valley"
).split()
NAMES = ["Alice", "Bruno", "Chiara", "Dmitri", "Emeka", "Fatima", "Gustav", "Hana", "Ivan", "Jun", "Kofi", "Lena"]
CITIES = ["Paris", "Lagos", "Osaka", "Lima", "Oslo", "Quito", "Hanoi", "Accra", "Bern", "Cairo", "Dakar", "Kyiv"]
THINGS = ["violin", "bicycle", "lantern", "teapot", "compass", "kayak", "piano", "telescope"]


def corpus(rng: random.Random, n_docs: int = 40, n_paras: int = 5) -> str:
    docs = []
    for _ in range(n_docs):
        paras = [" ".join(rng.choice(WORDS) for _ in range(24)).capitalize() + "." for _ in range(n_paras)]
        docs.append("\n".join(paras))
    return "\n\n".join(docs) + "\n"


def squad(rng: random.Random, n_articles: int) -> dict:
    data = []
    for a in range(n_articles):
        paragraphs = []
        for p in range(2):
            x, y, z = rng.sample(NAMES, 3)
            c1, c2 = rng.sample(CITIES, 2)
            thing, year = rng.choice(THINGS), rng.randint(1900, 2020)
            ctx = (f"{x} was born in {c1} in {year}. Later {x} moved to {c2} with {y}. "
                   f"{y} plays the {thing} every evening, and {z} repairs old clocks in {c1}.")  # fmt: skip
            qas = [
                {"id": f"q{a}-{p}-{k}", "question": q, "answers": [{"text": ans, "answer_start": ctx.index(ans)}]}
                for k, (q, ans) in enumerate([(f"Where was {x} born?", c1), (f"What does {y} play?", f"the {thing}")])
            ]
            paragraphs.append({"context": ctx, "qas": qas})
        data.append({"title": f"article {a}", "paragraphs": paragraphs})
    return {"version": "1.1", "data": data}


def main(root: str) -> None:
    out = Path(root)
    rng = random.Random(0)
    (out / "pretrain-corpus").mkdir(parents=True, exist_ok=True)
    with gzip.open(out / "pretrain-corpus" / "enwiki-2015-00.txt.gz", "wt", encoding="utf-8") as f:
        f.write(corpus(rng))
    (out / "squad").mkdir(parents=True, exist_ok=True)
    with gzip.open(out / "squad" / "train-v1.1.rebuilt.json.gz", "wt", encoding="utf-8") as f:
        json.dump(squad(rng, 8), f)
    (out / "squad" / "dev-v1.1.json").write_text(json.dumps(squad(rng, 3)), encoding="utf-8")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python bench/gpu_dry_data.py OUT_FOLDER")
    main(sys.argv[1])
