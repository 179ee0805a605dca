"""Learning speed per token: `spanbert pretrain` against transformers' `BertForMaskedLM`, held-out MLM
accuracy against tokens seen, on the same held-out blocks with the same masks, side by side with the ratio.

- **spanbert**: the real command, `spanbert pretrain --system SYSTEM` (in this process, fp32), with
  the issue's settings by default: model `small` (4 x 256), 128-token blocks, 64 sequences a step, peak
  1e-3 after 50 warmup steps, linear decay over 500 steps, dropout 0.1. Its held-out accuracy is what
  the run itself logs (`log.jsonl`).
- **transformers**: `BertForMaskedLM` of the same size and initialisation scheme, trained as
  `../shared/tools/hf_mlm_plateau.py` does (its `DataCollatorForLanguageModeling`, 15% of the tokens,
  80/10/10, with the corpus's own tokenizer read from its folder: the tool's
  `BertTokenizerFast(vocab_file=)` holds 5 tokens in transformers 5, so its random replacements were
  special tokens; `torch.optim.AdamW`, weight decay 0.01 on every parameter; clipping at 1; the same
  warmup and linear decay). ``--hf_blocks same`` (default) trains it on **the same training blocks in
  the same order** as the spanbert run (the sentence-packed blocks of the training documents, masked by
  transformers' collator); ``--hf_blocks contiguous`` on the shared tool's blocks instead (the training
  documents' tokens cut every SEQ - 2 tokens across document ends).
- **held out**: both are scored on the blocks and masks the spanbert run evaluates on (the first 256
  blocks of the last 1% of the documents, epoch-0 masks of the system's scheme); the script rebuilds
  that set and checks it against the run's own last logged score.

Accuracy at equal tokens seen: with the same blocks both sides see the same tokens at every step; with
contiguous blocks transformers' curve is interpolated at spanbert's token counts. With several
``--seeds`` each cell is the mean over seeds (± the standard deviation); the ratio is of the means.

    python bench/learning_speed.py ../shared/data/pretrain-corpus/enwiki-2015-00.txt.gz --stop 320 --eval 40 --seeds 0,1,2
    python bench/learning_speed.py PREPROCESSED --system spanbert --stop 320      # a `spanbert preprocess` folder
    python bench/learning_speed.py --smoke                                         # tiny, seconds (tests/test_bench.py)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", nargs="?", help="a `spanbert preprocess` folder, or text (a tokenizer is trained on it)")
    ap.add_argument("--system", default="bert-1seq", help="spanbert's system (default: bert-1seq)")
    ap.add_argument("--model", default="small")
    ap.add_argument("--vocab_size", type=int, default=8000, help="when a tokenizer is trained on text")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--steps", type=int, default=500, help="length of the schedule")
    ap.add_argument("--stop", type=int, default=320, help="last step trained (the schedule stays --steps long)")
    ap.add_argument("--eval", type=int, default=40, help="evaluate every N steps")
    ap.add_argument("--seeds", default="0", help="comma-separated seeds: initialisation, order, masks, dropout")
    ap.add_argument("--hf_blocks", choices=("same", "contiguous"), default="same")
    ap.add_argument("--spanbert_args", default="", help="further `spanbert pretrain` options, e.g. '--dropout 0'")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: spanbert's own choice)")
    ap.add_argument("--work_dir", default=None, help="where runs go (default: a temporary folder)")
    ap.add_argument("--json", default=None, help="also write the curves here")
    ap.add_argument("--transformers_from", default=None,
                    help="reuse the transformers curves of an earlier --json run with the same seeds, blocks and "
                         "settings (spanbert options changed only): transformers is not trained again")
    ap.add_argument("--smoke", action="store_true", help="tiny corpus and model, a few steps (CI)")
    a = ap.parse_args(argv)
    if a.smoke:
        a.model, a.seq, a.batch, a.warmup, a.steps, a.stop, a.eval = "tiny", 64, 8, 2, 8, 6, 3
    elif not a.corpus:
        ap.error("name a corpus (or --smoke)")
    return a


def prepared_corpus(a: argparse.Namespace, work: Path) -> Path:
    """A `spanbert preprocess` folder: the corpus itself, or one made from text (vocabulary trained on it)."""
    from spanbert.preprocess import preprocess
    from spanbert.tokenization import train_tokenizer

    if a.smoke:
        from smoke import tiny_corpus

        return tiny_corpus(work / "smoke")[1]
    src = Path(a.corpus)
    if (src / "meta.json").exists():
        return src
    out = work / "corpus"
    if not (out / "meta.json").exists():
        train_tokenizer([src], vocab_size=a.vocab_size, output_dir=work / "tok", show_progress=False)
        preprocess([src], work / "tok", out, num_workers=0, progress=False)
    return out


def spanbert_run(a: argparse.Namespace, corpus: Path, seed: int, out: Path) -> dict[int, dict[str, float]]:
    """Run `spanbert pretrain`; {step: {"tokens": seen after it, "acc", "loss"}} at every evaluation."""
    from spanbert.pretrain_command import main as pretrain_main

    argv = [
        "--system", a.system, "--corpus", str(corpus), "--model", a.model, "--max_seq_length", str(a.seq),
        "--learning_rate", str(a.lr), "--warmup_steps", str(a.warmup), "--max_steps", str(a.steps),
        "--stop_at_step", str(a.stop), "--per_device_train_batch_size", str(a.batch),
        "--gradient_accumulation_steps", "1", "--eval_steps", str(a.eval), "--logging_steps", str(a.eval),
        "--save_steps", str(a.eval if a.spanbert_args else a.stop), "--save_total_limit", "1000",
        "--precision", "fp32", "--seed", str(seed), "--output_dir", str(out), "--disable_tqdm", "--overwrite_output_dir",
    ]  # fmt: skip
    if a.threads:
        argv += ["--threads", str(a.threads)]
    argv += a.spanbert_args.split()
    if pretrain_main(argv) != 0:
        raise SystemExit(f"spanbert pretrain {' '.join(argv)} failed")
    curve: dict[int, dict[str, float]] = {}
    seen, last = 0.0, 0
    for line in (out / "log.jsonl").read_text().splitlines():
        row = json.loads(line)
        if "train/tokens_per_step" in row:  # a logging window: its steps x real tokens a step
            seen += row["train/tokens_per_step"] * (row["step"] - last)
            last = row["step"]
        if "eval/mlm_acc" in row:
            curve[row["step"]] = {"tokens": seen, "acc": row["eval/mlm_acc"], "loss": row["eval/mlm_loss"]}
    return curve


def held_out_set(a: argparse.Namespace, corpus: Path, seed: int):
    """The spanbert run's held-out blocks and masks (`pretrain_data.build_datasets`) and its training set."""
    from spanbert.corpus import TokenCorpus
    from spanbert.pretrain_config import PretrainConfig
    from spanbert.pretrain_data import build_datasets

    packing = argparse.ArgumentParser(add_help=False)
    packing.add_argument("--block_packing", default="sentences")
    blocks = packing.parse_known_args(a.spanbert_args.split())[0].block_packing  # the blocks spanbert trains on
    cfg = PretrainConfig(system=a.system, model=a.model, corpus=str(corpus), max_seq_length=a.seq, block_packing=blocks)
    train_set, held = build_datasets(cfg, corpus, TokenCorpus(corpus).tokenizer, seed)
    if blocks != "sentences":  # scored on the default held-out blocks and masks, whatever spanbert trained on
        held = build_datasets(dataclasses.replace(cfg, block_packing="sentences"), corpus, TokenCorpus(corpus).tokenizer, seed)[1]
    return train_set, held


def batches_of(items: list[dict], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids, labels with -100, attention_mask), each (B, T), from `PretrainDataset` items."""
    T = max(len(it["input_ids"]) for it in items)
    x = torch.full((len(items), T), pad_id, dtype=torch.long)
    y = torch.full((len(items), T), -100, dtype=torch.long)
    m = torch.zeros((len(items), T), dtype=torch.long)
    for r, it in enumerate(items):
        n = len(it["input_ids"])
        x[r, :n] = torch.from_numpy(np.asarray(it["input_ids"], dtype=np.int64))
        y[r, :n] = torch.from_numpy(np.asarray(it["labels"], dtype=np.int64))
        m[r, :n] = 1
    return x, y, m


def score(model, batches) -> tuple[float, float]:
    """Held-out (MLM accuracy, MLM loss), each over all targets; ``model(x, mask) -> (B, T, V) logits``."""
    correct = total = 0
    loss = 0.0
    with torch.no_grad():
        for x, y, m in batches:
            logits = model(x, m)[y != -100].float()  # (N, V)
            t = y[y != -100]
            correct += int((logits.argmax(-1) == t).sum())
            loss += float(torch.nn.functional.cross_entropy(logits, t, reduction="sum"))
            total += len(t)
    return correct / max(1, total), loss / max(1, total)


def transformers_run(a, corpus: Path, seed: int, train_set, held_batches, steps: int) -> dict[int, dict[str, float]]:
    """transformers' BertForMaskedLM as `hf_mlm_plateau.py` trains it; {step: tokens, acc, loss}."""
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast, DataCollatorForLanguageModeling

    from spanbert.config import MODEL_PRESETS
    from spanbert.corpus import TokenCorpus
    from spanbert.trainer import micro_batches

    corp = TokenCorpus(corpus)
    # from the folder, not `BertTokenizerFast(vocab_file=...)`: in transformers 5 that gives a tokenizer of the
    # 5 special tokens alone (len 5), whose collator then draws its "random" replacements among [PAD], [UNK],
    # [CLS], [SEP] and [MASK]: an 80/10/10 that is really 90/0/10, which `hf_mlm_plateau.py` ran
    tok = BertTokenizerFast.from_pretrained(str(corpus / "tokenizer"))
    if len(tok) != corp.vocab_size:
        raise SystemExit(f"{corpus / 'tokenizer'}: found a transformers tokenizer of {len(tok)} tokens, expected the "
                         f"corpus's {corp.vocab_size} (the collator draws its random replacements among them)")
    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=corp.vocab_size, max_position_embeddings=512, **MODEL_PRESETS[a.model])
    model = BertForMaskedLM(cfg)
    coll = DataCollatorForLanguageModeling(tok, mlm_probability=0.15)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)
    w, n = a.warmup, a.steps
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) / w, max(0.0, (n - s) / (n - w))))

    if a.hf_blocks == "same":  # spanbert's training blocks, in its order (epoch by epoch), unmasked
        def rows_of(step: int) -> list[np.ndarray]:
            epoch, at = divmod(step, math.ceil(len(train_set) / a.batch))
            train_set.set_epoch(epoch)
            ix = micro_batches(len(train_set), seed, epoch, a.batch, 1, 0, 1, at)[0][0]
            out = []
            for i in ix:
                it = train_set[i]
                ids = np.where(it["labels"] != -100, it["labels"], it["input_ids"])  # the original tokens
                out.append(ids)
            return out
    else:  # the shared tool's blocks: the training documents' tokens cut every seq - 2
        lo, hi = train_set.doc_bounds[0, 0], train_set.doc_bounds[-1, 1]
        ids = corp.tokens(int(lo), int(hi))[0].astype(np.int64)
        body = a.seq - 2
        blocks = ids[: len(ids) // body * body].reshape(-1, body)
        blocks = np.concatenate([np.full((len(blocks), 1), tok.cls_token_id), blocks,
                                 np.full((len(blocks), 1), tok.sep_token_id)], 1)  # fmt: skip
        rng = np.random.default_rng(seed)

        def rows_of(step: int) -> list[np.ndarray]:
            return list(blocks[rng.integers(0, len(blocks), a.batch)])

    def logits(x, m):
        return model(input_ids=x, attention_mask=m).logits

    curve: dict[int, dict[str, float]] = {}
    seen = 0
    model.train()
    for step in range(1, steps + 1):
        rows = rows_of(step - 1)
        b = coll([{"input_ids": torch.from_numpy(np.asarray(r, dtype=np.int64))} for r in rows])
        # real tokens by length (the collator's random replacements may draw [PAD]'s id)
        lens = torch.tensor([len(r) for r in rows])
        mask = (torch.arange(b["input_ids"].shape[1])[None, :] < lens[:, None]).long()
        seen += int(mask.sum())
        loss = model(input_ids=b["input_ids"], attention_mask=mask, labels=b["labels"]).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
        if step % a.eval == 0:
            model.eval()
            acc, held_loss = score(logits, held_batches)
            model.train()
            curve[step] = {"tokens": float(seen), "acc": acc, "loss": held_loss}
            print(f"  transformers step {step}: {seen:,} tokens, held-out MLM acc {acc:.4f} loss {held_loss:.4f}", flush=True)
    return curve


def at_tokens(curve: dict[int, dict[str, float]], tokens: float, key: str) -> float:
    """``key`` of ``curve`` linearly interpolated at ``tokens`` seen (nan beyond its ends)."""
    pts = sorted((v["tokens"], v[key]) for v in curve.values())
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    if not xs or tokens < xs[0] - 1e-6 or tokens > xs[-1] + 1e-6:
        return math.nan
    return float(np.interp(tokens, xs, ys))


def checkpoint_model(a, corpus: Path, ckpt: Path):
    """The MLM of a `spanbert pretrain` checkpoint: ``(x, mask) -> (B, T, V)`` logits."""
    from spanbert.config import model_config
    from spanbert.corpus import TokenCorpus
    from spanbert.model import SpanBertForPreTraining
    from spanbert.pretrain_config import PretrainConfig
    from spanbert.pretrain_data import resolve

    heads = set(resolve(PretrainConfig(system=a.system, model=a.model)).system.objectives)
    state = torch.load(ckpt / "state.pt", map_location="cpu", weights_only=True)["model"]
    cfg = model_config(a.model, vocab_size=TokenCorpus(corpus).vocab_size)
    model = SpanBertForPreTraining(cfg, sbo="sbo" in heads, nsp="nsp" in heads)
    model.load_state_dict(state)
    model.eval()
    emb = model.bert.embeddings.word_embeddings.weight

    def logits(x, m):
        return model.cls.predictions(model.bert(x, m), emb)

    return logits


def check_rebuilt_set(a, corpus: Path, out: Path, held_batches, curve) -> None:
    """The rebuilt held-out set is the run's own: its last checkpoint scores what the run logged."""
    ckpt = out / (out / "latest").read_text().strip()
    acc, _ = score(checkpoint_model(a, corpus, ckpt), held_batches)
    step = max(curve)
    if abs(acc - curve[step]["acc"]) > 2e-3:
        raise SystemExit(f"the rebuilt held-out set scores {acc:.4f} at step {step}, the run logged {curve[step]['acc']:.4f}")


def rescore(a, corpus: Path, out: Path, held_batches, curve) -> None:
    """With --spanbert_args the run may mask its own held-out set otherwise (--random_token, --mask_prob):
    every evaluation step's checkpoint is scored on the default held-out blocks and masks instead, the
    ones transformers is scored on."""
    for step in curve:
        ckpt = out / f"checkpoint-{step}"
        if not ckpt.is_dir():
            raise SystemExit(f"{ckpt}: missing, expected a checkpoint at every evaluation step")
        acc, loss = score(checkpoint_model(a, corpus, ckpt), held_batches)
        curve[step].update(acc=acc, loss=loss)


def mean_sd(xs: list[float]) -> str:
    xs = [x for x in xs if not math.isnan(x)]
    if not xs:
        return "—"
    return f"{100 * statistics.mean(xs):.2f}" + (f" ± {100 * statistics.stdev(xs):.2f}" if len(xs) > 1 else "")


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    seeds = [int(s) for s in a.seeds.split(",")]
    tmp = tempfile.TemporaryDirectory(prefix="learning_speed.") if a.work_dir is None else None
    work = Path(a.work_dir or tmp.name)
    work.mkdir(parents=True, exist_ok=True)
    corpus = prepared_corpus(a, work)
    earlier = None
    if a.transformers_from:
        saved = json.loads(Path(a.transformers_from).read_text())
        earlier = {r["seed"]: {int(k): v for k, v in r["transformers"].items()} for r in saved["runs"]}
        if saved.get("hf_tokenizer") != "folder":  # curves of the 5-token tokenizer (`transformers_run`)
            raise SystemExit(f"{a.transformers_from}: found transformers curves trained with a 5-token tokenizer (before "
                             f"2026-11-28), expected curves of this version; run without --transformers_from")  # fmt: skip
        missing = [x for x in seeds if x not in earlier]
        same = {k: saved["args"].get(k) for k in ("corpus", "system", "model", "seq", "batch", "lr", "warmup", "steps", "hf_blocks")}
        if missing or same != {k: getattr(a, k) for k in same}:
            raise SystemExit(f"{a.transformers_from}: found seeds {sorted(earlier)} and settings {same}, expected seeds "
                             f"{seeds} and this run's settings")  # fmt: skip
    runs = []
    for seed in seeds:
        t0 = time.perf_counter()
        out = work / f"spanbert-{a.system}-seed{seed}"
        print(f"seed {seed}: spanbert pretrain --system {a.system} ...", flush=True)
        ours = spanbert_run(a, corpus, seed, out)
        t1 = time.perf_counter()
        train_set, held = held_out_set(a, corpus, seed)
        items = [held[i] for i in range(len(held))]
        pad = train_set.pad_id
        held_batches = [batches_of(items[i : i + 32], pad) for i in range(0, len(items), 32)]
        if a.spanbert_args:
            rescore(a, corpus, out, held_batches, ours)
        else:
            check_rebuilt_set(a, corpus, out, held_batches, ours)
        last_tokens = max(v["tokens"] for v in ours.values())
        hf_steps = a.stop if a.hf_blocks == "same" else math.ceil(last_tokens / (a.batch * a.seq) / a.eval + 1) * a.eval
        if earlier is not None:
            theirs = earlier[seed]
            print(f"seed {seed}: transformers' curve from {a.transformers_from}", flush=True)
        else:
            print(f"seed {seed}: transformers BertForMaskedLM ({a.hf_blocks} blocks, {hf_steps} steps) ...", flush=True)
            theirs = transformers_run(a, corpus, seed, train_set, held_batches, hf_steps)
        t2 = time.perf_counter()
        runs.append({"seed": seed, "spanbert": ours, "transformers": theirs,
                     "seconds": {"spanbert": t1 - t0, "transformers": t2 - t1}})  # fmt: skip

    steps = sorted(set.intersection(*(set(r["spanbert"]) for r in runs)))
    print()
    print(f"held-out MLM accuracy (%) against tokens seen: spanbert --system {a.system} vs transformers "
          f"BertForMaskedLM ({a.hf_blocks} blocks), model {a.model}, seeds {a.seeds}, "
          f"{len(items)} held-out blocks")  # fmt: skip
    print("| step | tokens seen | spanbert acc | transformers acc | ratio | spanbert loss | transformers loss |")
    print("|---|---|---|---|---|---|---|")
    ratios = []
    for s in steps:
        toks = [r["spanbert"][s]["tokens"] for r in runs]
        ours_acc = [r["spanbert"][s]["acc"] for r in runs]
        same = a.hf_blocks == "same"  # the same tokens at every step: no interpolation
        hf_acc = [r["transformers"][s]["acc"] if same else at_tokens(r["transformers"], r["spanbert"][s]["tokens"], "acc") for r in runs]
        ours_loss = [r["spanbert"][s]["loss"] for r in runs]
        hf_loss = [r["transformers"][s]["loss"] if same else at_tokens(r["transformers"], r["spanbert"][s]["tokens"], "loss") for r in runs]
        good = [x for x in hf_acc if not math.isnan(x)]
        ratio = statistics.mean(ours_acc) / statistics.mean(good) if good and statistics.mean(good) > 0 else math.nan
        ratios.append(ratio)
        print(f"| {s} | {statistics.mean(toks):,.0f} | {mean_sd(ours_acc)} | {mean_sd(hf_acc)} | {ratio:.2f} | "
              f"{statistics.mean(ours_loss):.3f} | {statistics.mean([x for x in hf_loss if not math.isnan(x)] or [math.nan]):.3f} |")  # fmt: skip
    finite = [r for r in ratios if not math.isnan(r)]
    print(f"ratio spanbert / transformers (held-out MLM accuracy at equal tokens): "
          f"min {min(finite):.2f}, mean {statistics.mean(finite):.2f}" if finite else "ratio: no common point")  # fmt: skip
    secs = {k: sum(r["seconds"][k] for r in runs) for k in ("spanbert", "transformers")}
    print(f"wall time: spanbert {secs['spanbert']:.0f} s, transformers {secs['transformers']:.0f} s "
          f"(torch threads {torch.get_num_threads()}; learning per token does not depend on them)")  # fmt: skip
    if a.json:
        Path(a.json).write_text(json.dumps({"args": vars(a), "hf_tokenizer": "folder", "runs": runs}, indent=1))
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
