"""Seed-to-seed spread of SST-2 fine-tuning: spanbert against a plain transformers loop (issue 23.11).

    python scripts/seed_spread.py --model /path/to/all-MiniLM-L6-v2 --seeds 5
    python scripts/seed_spread.py --model DIR --side spanbert --label last \\
        --spanbert_args='--evals_per_epoch 0 --metric_for_best_model ""'

Both sides fine-tune ``--model`` (an HF BERT folder) on the same first ``--train_examples`` training
sentences of ``--data_dir`` for the same epochs, batch, learning rate, warm-up fraction (linear decay),
AdamW settings and max length, once per seed 1..N, and score the whole dev split. spanbert runs its CLI
in this process (``finetune glue``, defaults unless ``--spanbert_args`` changes them; by default it
keeps the best of 10 dev evaluations per epoch). transformers runs ``BertForSequenceClassification``
from the same folder in the loop its ``Trainer`` runs (shuffle by seed, AdamW without decay on biases
and LayerNorm, clipping at 1.0, linear warm-up and decay) and keeps the last model, or with
``--hf_select N`` evaluates N times per epoch and keeps the best, as spanbert does.
Prints each run, mean ± std (sample std) per side, the ratio of the stds and the two-sided F-test
p-value of equal variances. ``--out FILE`` appends each run as a JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import math
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def read_tsv(path: Path, limit: int | None) -> list[tuple[str, int]]:
    with open(path, encoding="utf-8", newline="") as f:
        rows = [(r["sentence"], int(r["label"])) for r in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]
    return rows[:limit] if limit else rows


def run_spanbert(args, seed: int, out: Path) -> float:
    from spanbert import cli

    argv = ["finetune", "glue", "--task", "SST-2", "--data_dir", str(args.data_dir), "--model", str(args.model),
            "--max_train_examples", str(args.train_examples), "--num_train_epochs", str(args.epochs),
            "--per_device_train_batch_size", str(args.batch_size), "--learning_rate", str(args.learning_rate),
            "--warmup_ratio", str(args.warmup_ratio), "--max_seq_length", str(args.max_seq_length),
            "--seed", str(seed), "--output_dir", str(out), "--save_steps", "0", "--disable_tqdm",
            "--device", "cpu"]  # fmt: skip
    argv += shlex.split(args.spanbert_args)
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli.run(argv) == 0, argv
    # dev_results.json: the dev scores of the model at the end (the selected one when selecting)
    return float(json.loads((out / "dev_results.json").read_text())["accuracy"])


def run_transformers(args, seed: int) -> float:
    from transformers import AutoTokenizer, BertForSequenceClassification, get_linear_schedule_with_warmup

    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(args.tokenizer or args.model)
    model = BertForSequenceClassification.from_pretrained(args.model, num_labels=2)
    train = read_tsv(args.data_dir / "train.tsv", args.train_examples)
    dev = read_tsv(args.data_dir / "dev.tsv", None)

    def encode(rows):
        enc = tok([s for s, _ in rows], truncation=True, max_length=args.max_seq_length, padding=True,
                  return_tensors="pt")  # fmt: skip
        return enc, torch.tensor([y for _, y in rows])

    def evaluate() -> float:
        model.eval()
        right = 0
        with torch.no_grad():
            for i in range(0, len(dev), 64):
                enc, y = encode(dev[i : i + 64])
                right += int((model(**enc).logits.argmax(-1) == y).sum())
        model.train()
        return 100.0 * right / len(dev)

    steps_per_epoch = math.ceil(len(train) / args.batch_size)
    total = int(steps_per_epoch * args.epochs)
    no_decay = ("bias", "LayerNorm.weight")
    groups = [
        {"params": [p for n, p in model.named_parameters() if not n.endswith(no_decay)], "weight_decay": 0.01},
        {"params": [p for n, p in model.named_parameters() if n.endswith(no_decay)], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=args.learning_rate, eps=1e-8)
    sched = get_linear_schedule_with_warmup(opt, math.ceil(args.warmup_ratio * total), total)
    every = max(1, steps_per_epoch // args.hf_select) if args.hf_select else 0
    g = torch.Generator().manual_seed(seed)
    best, step = -1.0, 0
    model.train()
    while step < total:
        for idx in torch.randperm(len(train), generator=g).split(args.batch_size):
            enc, y = encode([train[i] for i in idx])
            loss = model(**enc, labels=y).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            step += 1
            if every and (step % every == 0 or step == total):
                best = max(best, evaluate())
            if step == total:
                break
    return best if every else evaluate()


def f_test(a: list[float], b: list[float]) -> float:
    """Two-sided p-value of the F-test of equal variances."""
    from scipy.stats import f

    va, vb = statistics.variance(a), statistics.variance(b)
    if va == 0 or vb == 0:
        return float("nan")
    F = va / vb
    p = f.cdf(F, len(a) - 1, len(b) - 1)
    return 2 * min(p, 1 - p)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, required=True, help="HF BERT folder (config.json + weights + tokenizer)")
    p.add_argument("--tokenizer", type=Path, help="tokenizer folder when --model has none")
    p.add_argument("--data_dir", type=Path, default=ROOT / "../shared/data/glue/SST-2")
    p.add_argument("--train_examples", type=int, default=2000)
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--learning_rate", type=float, default=5e-5)
    p.add_argument("--warmup_ratio", type=float, default=0.1)
    p.add_argument("--max_seq_length", type=int, default=64)
    p.add_argument("--seeds", type=int, default=5, help="seeds 1..N")
    p.add_argument("--side", choices=("both", "spanbert", "transformers"), default="both")
    p.add_argument("--spanbert_args", default="", help="extra spanbert finetune options (the ablations)")
    p.add_argument("--hf_select", type=int, default=0, help="transformers: keep the best of N dev evaluations")
    p.add_argument("--label", default="", help="name of this variant in the output")
    p.add_argument("--out", type=Path, help="append each run as a JSON line")
    args = p.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))

    scores: dict[str, list[float]] = {}
    sides = ("spanbert", "transformers") if args.side == "both" else (args.side,)
    for side in sides:
        for seed in range(1, args.seeds + 1):
            with tempfile.TemporaryDirectory() as tmp:
                acc = run_spanbert(args, seed, Path(tmp) / "run") if side == "spanbert" else run_transformers(args, seed)
            scores.setdefault(side, []).append(acc)
            row = {"side": side, "label": args.label, "seed": seed, "accuracy": acc}
            print(json.dumps(row), flush=True)
            if args.out:
                with open(args.out, "a", encoding="utf-8") as f:
                    f.write(json.dumps(row) + "\n")
    for side, s in scores.items():
        sd = statistics.stdev(s) if len(s) > 1 else float("nan")
        print(f"{side:12s} {args.label:10s} {statistics.mean(s):.1f} ± {sd:.1f}  ({len(s)} seeds)")
    if len(scores) == 2 and args.seeds > 1:
        a, b = scores["spanbert"], scores["transformers"]
        ratio = statistics.stdev(a) / statistics.stdev(b) if statistics.stdev(b) else float("inf")
        print(f"std ratio spanbert / transformers: {ratio:.2f}; F-test p = {f_test(a, b):.3f}")


if __name__ == "__main__":
    sys.exit(main())
