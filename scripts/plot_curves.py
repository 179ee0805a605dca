"""Plot and tabulate pre-training curves from the `log.jsonl` files that `spanbert pretrain` writes.

    python scripts/plot_curves.py runs/spanbert-small runs/bert-small --out docs/pretrain_curves.png

Prints a markdown table of the held-out losses at every evaluation step and writes one PNG with the
training MLM loss (and SBO / NSP loss where present) and the held-out MLM loss of each run.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def read_log(run: Path) -> list[dict]:
    path = run / "log.jsonl"
    if not path.exists():
        raise SystemExit(f"{path}: no log (is {run} a spanbert pretrain output folder?)")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def series(log: list[dict], key: str) -> tuple[list[int], list[float]]:
    points = [(r["step"], r[key]) for r in log if key in r]
    return [p[0] for p in points], [p[1] for p in points]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--out", type=Path, default=None, help="PNG to write (needs matplotlib)")
    a = p.parse_args()
    logs = {run.name: read_log(run) for run in a.runs}

    keys = ["eval/mlm_loss", "eval/mlm_acc", "eval/sbo_loss", "eval/nsp_loss"]
    print("| run | step | " + " | ".join(k.split("/")[1] for k in keys) + " |")
    print("|---|---|" + "---|" * len(keys))
    for name, log in logs.items():
        for r in log:
            if "eval/mlm_loss" in r:
                cells = [f"{r[k]:.3f}" if k in r else "–" for k in keys]
                print(f"| {name} | {r['step']} | " + " | ".join(cells) + " |")

    if a.out:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for name, log in logs.items():
            for key, style in (("train/mlm_loss", "-"), ("train/sbo_loss", "--"), ("train/nsp_loss", ":")):
                xs, ys = series(log, key)
                if xs:
                    axes[0].plot(xs, ys, style, label=f"{name} {key.split('/')[1]}")
            xs, ys = series(log, "eval/mlm_loss")
            if xs:
                axes[1].plot(xs, ys, "o-", label=f"{name} held-out MLM")
            xs, ys = series(log, "eval/sbo_loss")
            if xs:
                axes[1].plot(xs, ys, "s--", label=f"{name} held-out SBO")
        axes[0].set(title="training losses", xlabel="step", ylabel="cross-entropy")
        axes[1].set(title="held-out losses", xlabel="step", ylabel="cross-entropy")
        for ax in axes:
            ax.legend(fontsize=8)
            ax.grid(alpha=0.3)
        fig.tight_layout()
        a.out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(a.out, dpi=110)
        print(f"\nwrote {a.out}")


if __name__ == "__main__":
    main()
