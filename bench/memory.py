"""Resident memory over a long pre-training run and over a full-dev SQuAD prediction, ours against
the transformers equivalent at the same sizes, each in its own child process (so one's heap does not
count in the other's RSS).

    # pre-training: RSS every 100 steps over 2,000 steps of the small model on a preprocessed corpus
    python bench/memory.py pretrain --corpus /tmp/mem/corpus --model small --steps 2000 --batch 2
    # prediction: a randomly initialised QA model (--model size) predicting the whole SQuAD dev set,
    # once on a quarter of the articles and once on all of them (the peak must not scale with the set)
    python bench/memory.py predict --tokenizer /tmp/mem/tok --model small

`--no-reference` skips the transformers line (it doubles the run time). Growth after warm-up is
(max RSS after the warm-up step - RSS at the warm-up step) / RSS at the warm-up step; the goal is <= 5%.
The trend is the mean of the last fifth of the samples after warm-up against the mean of the first fifth.
Prints one line per sample and a summary; `--json` adds a machine-readable line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

_PAGE = os.sysconf("SC_PAGE_SIZE")
MB = 1024 * 1024


def rss_mb() -> float:
    """Current resident set size of this process (no psutil needed)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE / MB


def peak_mb() -> float:
    """The high-water mark of the resident set (VmHWM) since the start or the last `reset_peak`."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def reset_peak() -> None:
    """Reset VmHWM to the current RSS (Linux >= 4.0: write 5 to clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


class Sampler:
    """A thread that samples RSS every ``interval`` seconds; ``max`` is the highest value seen."""

    def __init__(self, interval: float = 0.2):
        self.interval, self.max, self._stop = interval, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.max = max(self.max, rss_mb())
            self._stop.wait(self.interval)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.max = max(self.max, rss_mb())


def growth(samples: list[tuple[int, float]], warmup: int) -> dict[str, float]:
    """RSS at the first sample at or after ``warmup``, the max after it, and the growth in percent."""
    after = [(s, r) for s, r in samples if s >= warmup]
    if not after:
        return {}
    base = after[0][1]
    top = max(r for _, r in after)
    # the trend, robust to the between-trim swings of single samples: mean of the last fifth of the
    # samples after warm-up against the mean of the first fifth
    k = max(1, len(after) // 5)
    first, last = sum(r for _, r in after[:k]) / k, sum(r for _, r in after[-k:]) / k
    return {"warmup_step": after[0][0], "rss_warmup_mb": base, "rss_max_after_mb": top,
            "rss_end_mb": after[-1][1], "growth_pct": 100.0 * (top - base) / base,
            "trend_pct": 100.0 * (last - first) / first}  # fmt: skip


# ---------------------------------------------------------------------------------------------
# pre-training


def run_pretrain_ours(a: argparse.Namespace) -> dict:
    """`spanbert pretrain` itself, in this process; an optimizer-step hook samples RSS every N steps."""
    import gc

    from spanbert import pretrain_command

    samples: list[tuple[int, float]] = []
    state = {"step": 0, "t": time.perf_counter()}
    times: list[tuple[int, float]] = []

    def hook(opt, args, kwargs) -> None:
        state["step"] += 1
        s = state["step"]
        if s % a.every == 0:
            r = rss_mb()
            samples.append((s, r))
            now = time.perf_counter()
            times.append((s, a.every / (now - state["t"])))
            state["t"] = now
            extra = f" gc_objects {len(gc.get_objects())}" if a.gc else ""
            print(f"[ours] step {s:5d} rss {r:7.1f} MB  {times[-1][1]:.2f} steps/s{extra}", flush=True)

    from torch.optim.optimizer import register_optimizer_step_post_hook

    register_optimizer_step_post_hook(hook)
    with tempfile.TemporaryDirectory() as out:
        argv = ["--corpus", a.corpus, "--model", a.size, "--max_steps", str(a.steps), "--output_dir", out,
                "--per_device_train_batch_size", str(a.batch), "--gradient_accumulation_steps", "1",
                "--warmup_steps", "100", "--learning_rate", "1e-4", "--logging_steps", str(a.every),
                "--save_steps", str(a.save_steps), "--eval_steps", str(a.eval_steps), "--disable_tqdm",
                "--max_seq_length", str(a.seq), "--device", "cpu", "--report_to", "none",
                "--dataloader_num_workers", str(a.workers), *a.extra]  # fmt: skip
        with Sampler() as smp:
            t0 = time.perf_counter()
            pretrain_command.main(argv)
            wall = time.perf_counter() - t0
    return {"samples": samples, "peak_mb": smp.max, "wall_s": wall, **growth(samples, a.warmup)}


def run_pretrain_hf(a: argparse.Namespace) -> dict:
    """transformers' BertForPreTraining at the same size on the same masked batches: a plain loop."""
    import torch
    from transformers import BertConfig as HFConfig
    from transformers import BertForPreTraining

    from spanbert.collate import make_collate
    from spanbert.config import model_config
    from spanbert.dataset import PretrainDataset

    ds = PretrainDataset(a.corpus, max_seq_length=a.seq, mode="single", seed=42, scheme="span")
    collate = make_collate(ds.pad_id)
    cfg = model_config(a.size, vocab_size=ds.corpus.vocab_size)
    torch.manual_seed(42)
    model = BertForPreTraining(HFConfig(**cfg.to_hf_dict()))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=True)
    perm = torch.randperm(len(ds), generator=torch.Generator().manual_seed(42)).tolist()
    samples: list[tuple[int, float]] = []
    model.train()
    with Sampler() as smp:
        t0 = time.perf_counter()
        for s in range(1, a.steps + 1):
            lo = ((s - 1) * a.batch) % (len(perm) - a.batch)
            b = collate([ds[i] for i in perm[lo : lo + a.batch]])
            B, T = b["input_ids"].shape
            labels = torch.full((B * T,), -100, dtype=torch.long)
            labels[b["mlm_positions"]] = b["mlm_labels"]
            out = model(input_ids=b["input_ids"], attention_mask=b.get("attention_mask"),
                        token_type_ids=b["token_type_ids"], labels=labels.view(B, T),
                        next_sentence_label=torch.zeros(B, dtype=torch.long))  # fmt: skip
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            if s % a.every == 0:
                r = rss_mb()
                samples.append((s, r))
                print(f"[transformers] step {s:5d} rss {r:7.1f} MB", flush=True)
        wall = time.perf_counter() - t0
    return {"samples": samples, "peak_mb": smp.max, "wall_s": wall, **growth(samples, a.warmup)}


# ---------------------------------------------------------------------------------------------
# prediction


def _qa_model_dir(a: argparse.Namespace, root: Path) -> Path:
    """A randomly initialised QA model of the requested size saved as a fine-tuned one (decoding
    quality is irrelevant to memory; the shapes are those of a real model)."""
    import torch

    from spanbert.config import model_config
    from spanbert.tasks.qa import SpanBertForQuestionAnswering
    from spanbert.tasks.task_folders import save_finetuned
    from spanbert.tokenization import load_tokenizer

    tok = load_tokenizer(a.tokenizer)
    torch.manual_seed(0)
    model = SpanBertForQuestionAnswering(model_config(a.size, vocab_size=tok.vocab_size))
    out = root / "qa-model"
    save_finetuned(model, out, tok, "BertForQuestionAnswering")
    return out


def _subset(path: str, fraction: float, root: Path) -> Path:
    """The first ``fraction`` of the articles of a SQuAD file."""
    d = json.loads(Path(path).read_text(encoding="utf-8"))
    n = max(1, round(len(d["data"]) * fraction))
    out = root / f"dev-{fraction:g}.json"
    out.write_text(json.dumps({**d, "data": d["data"][:n]}), encoding="utf-8")
    return out


def run_predict_ours(a: argparse.Namespace) -> dict:
    """`spanbert predict squad` itself on ``a.data``; the peak RSS during the command."""
    from spanbert.cli import main

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model_dir = _qa_model_dir(a, root)
        data = _subset(a.data, a.fraction, root) if a.fraction < 1 else Path(a.data)
        base = rss_mb()
        reset_peak()
        with Sampler(0.05) as smp:
            t0 = time.perf_counter()
            main(["predict", "squad", "--model", str(model_dir), "--data", str(data), "--output",
                  str(root / "pred.json"), "--batch_size", str(a.batch), "--device", "cpu", "--disable_tqdm"])  # fmt: skip
            wall = time.perf_counter() - t0
        n = len(json.loads((root / "pred.json").read_text()))
    peak = max(smp.max, peak_mb())
    print(f"[ours] {n} questions: rss before {base:.1f} MB, peak {peak:.1f} MB, {wall:.1f} s", flush=True)
    return {"questions": n, "rss_before_mb": base, "peak_mb": peak, "wall_s": wall}


def run_predict_hf(a: argparse.Namespace) -> dict:
    """transformers' BertForQuestionAnswering over the same windows (our featurizer), keeping every
    window's logits as numpy as `run_squad.py` keeps RawResults; the peak RSS."""
    import numpy as np
    import torch
    from transformers import BertConfig as HFConfig
    from transformers import BertForQuestionAnswering

    from spanbert.config import model_config
    from spanbert.tasks.qa import QAConfig, collate_qa, make_features, read_squad, tokenize_data
    from spanbert.tokenization import load_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        data_path = _subset(a.data, a.fraction, Path(tmp)) if a.fraction < 1 else Path(a.data)
        tok = load_tokenizer(a.tokenizer)
        torch.manual_seed(0)
        model = BertForQuestionAnswering(HFConfig(**model_config(a.size, vocab_size=tok.vocab_size).to_hf_dict())).eval()
        base = rss_mb()
        reset_peak()
        with Sampler(0.05) as smp:
            t0 = time.perf_counter()
            data = read_squad(data_path)
            cfg = QAConfig(max_seq_length=512, doc_stride=128)  # BERT's windows (unset, they follow the encoder)
            feats = make_features(data, tokenize_data(data, tok, cfg.max_query_length, progress=False),
                                  tok.cls_id, tok.sep_id, cfg.max_seq_length, cfg.doc_stride)  # fmt: skip
            order = sorted(range(len(feats)), key=lambda i: len(feats.input_ids[i]))
            results = {}
            with torch.no_grad():
                for lo in range(0, len(order), a.batch):
                    idx = order[lo : lo + a.batch]
                    b = collate_qa([{"input_ids": feats.input_ids[i], "query_len": feats.query_len[i]} for i in idx], tok.pad_id)
                    out = model(input_ids=b["input_ids"], attention_mask=b.get("attention_mask"), token_type_ids=b.get("token_type_ids"))
                    for j, i in enumerate(idx):
                        n = len(feats.input_ids[i])
                        results[i] = (out.start_logits[j, :n].numpy().copy(), out.end_logits[j, :n].numpy().copy())
            wall = time.perf_counter() - t0
        n_q = len(data.examples)
        del results, np
    peak = max(smp.max, peak_mb())
    print(f"[transformers] {n_q} questions: rss before {base:.1f} MB, peak {peak:.1f} MB, {wall:.1f} s", flush=True)
    return {"questions": n_q, "rss_before_mb": base, "peak_mb": peak, "wall_s": wall}


# ---------------------------------------------------------------------------------------------
# driver


def _keep_glibc_defaults() -> None:
    """Make `configure_malloc` a no-op in this process (where the trainer imported it too)."""
    from spanbert import trainer, utils

    def off(*args, **kwargs) -> bool:
        return False

    utils.configure_malloc = trainer.configure_malloc = off


def _child(argv: list[str]) -> dict:
    """Run this script in a fresh process (its own heap and RSS) and read back its JSON result line."""
    result = None
    with subprocess.Popen([sys.executable, __file__, *argv, "--_child"], stdout=subprocess.PIPE, text=True) as proc:
        for line in proc.stdout:  # streamed: the samples show while the run goes on
            if line.startswith("RESULT "):
                result = json.loads(line[7:])
            else:
                sys.stdout.write(line)
                sys.stdout.flush()
    if proc.returncode != 0 or result is None:
        raise SystemExit(f"child {argv[:2]} failed with exit {proc.returncode}")
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("phase", nargs="?", choices=("pretrain", "predict"))
    p.add_argument("--model", dest="size", default="small", help="model preset: tiny, small, base (default: small)")
    p.add_argument("--corpus", help="pretrain: a `spanbert preprocess` output folder")
    p.add_argument("--steps", type=int, default=2000, help="pretrain: optimizer steps (default: 2000)")
    p.add_argument("--batch", type=int, default=2, help="sequences per step / windows per prediction batch")
    p.add_argument("--seq", type=int, default=512, help="pretrain: block length (default: 512)")
    p.add_argument("--every", type=int, default=100, help="pretrain: sample RSS every N steps (default: 100)")
    p.add_argument("--warmup", type=int, default=200, help="pretrain: growth is measured from this step on")
    p.add_argument("--save_steps", type=int, default=500, help="pretrain: checkpoint interval (default: 500)")
    p.add_argument("--eval_steps", type=int, default=500, help="pretrain: held-out evaluation interval")
    p.add_argument("--workers", type=int, default=0, help="pretrain: DataLoader workers (default: 0)")
    p.add_argument("--gc", action="store_true", help="pretrain: also print the count of live Python objects")
    p.add_argument("--tokenizer", help="predict: tokenizer folder of the QA model")
    p.add_argument("--data", default="../shared/data/squad/dev-v1.1.json", help="predict: SQuAD file")
    p.add_argument("--fraction", type=float, default=1.0, help=argparse.SUPPRESS)
    p.add_argument("--impl", choices=("ours", "hf"), default="ours", help=argparse.SUPPRESS)
    p.add_argument("--glibc-defaults", action="store_true",
                   help="ours without spanbert.utils.configure_malloc (glibc's dynamic mmap threshold: the 'before')")  # fmt: skip
    p.add_argument("--no-reference", action="store_true", help="skip the transformers reference run")
    p.add_argument("--json", action="store_true", help="print the results as one JSON line too")
    p.add_argument("--_child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: a check that it runs and prints its figures (tests/test_bench.py)")
    a, extra = p.parse_known_args()
    if a.smoke:  # pre-training only (prediction reads SQuAD), tiny model and corpus, a few steps
        import tempfile

        from smoke import tiny_corpus

        corpus = str(tiny_corpus(Path(tempfile.mkdtemp()))[1])
        sys.argv[1:] = ["pretrain", "--corpus", corpus, "--model", "tiny", "--steps", "6", "--seq", "64", "--every", "2",
                        "--warmup", "2", "--save_steps", "3", "--eval_steps", "3"]  # fmt: skip
        a, extra = p.parse_known_args()
    if a.phase is None:
        p.error("give the phase: pretrain or predict (or --smoke)")
    a.extra = extra  # further `spanbert pretrain` options for our run, e.g. --pad_to 512
    if a._child:
        if a.glibc_defaults:
            _keep_glibc_defaults()
        fn = {("pretrain", "ours"): run_pretrain_ours, ("pretrain", "hf"): run_pretrain_hf,
              ("predict", "ours"): run_predict_ours, ("predict", "hf"): run_predict_hf}[a.phase, a.impl]  # fmt: skip
        print("RESULT " + json.dumps(fn(a)), flush=True)
        return
    base_argv = [a for a in sys.argv[1:] if a not in ("--json", "--no-reference")]  # --glibc-defaults passes on
    impls = ["ours"] + ([] if a.no_reference else ["hf"])
    results: dict = {}
    if a.phase == "pretrain":
        if not a.corpus:
            p.error("pretrain needs --corpus (a spanbert preprocess output)")
        for impl in impls:
            results[impl] = _child([*base_argv, "--impl", impl])
        print(f"\npre-training, model {a.size}, {a.steps} steps of {a.batch} x {a.seq} tokens, RSS in MB:")
        for impl, r in results.items():
            print(f"  {impl:13s} at step {r.get('warmup_step')}: {r.get('rss_warmup_mb', 0):.0f}, max after: "
                  f"{r.get('rss_max_after_mb', 0):.0f}, end: {r.get('rss_end_mb', 0):.0f}, growth "
                  f"{r.get('growth_pct', 0):+.1f}%, trend {r.get('trend_pct', 0):+.1f}%, peak {r['peak_mb']:.0f}, "
                  f"{r['wall_s']:.0f} s")  # fmt: skip
        if "hf" in results:
            print(f"  peak ratio ours/transformers: {results['ours']['peak_mb'] / results['hf']['peak_mb']:.2f}")
    else:
        if not a.tokenizer:
            p.error("predict needs --tokenizer")
        for impl in impls:
            for frac in (0.25, 1.0):
                results[f"{impl}@{frac:g}"] = _child([*base_argv, "--impl", impl, "--fraction", str(frac)])
        print(f"\nprediction, model {a.size}, batch {a.batch}, RSS in MB (peak - before = what predicting costs):")
        for key, r in results.items():
            print(f"  {key:16s} {r['questions']:6d} questions: before {r['rss_before_mb']:.0f}, peak "
                  f"{r['peak_mb']:.0f} (+{r['peak_mb'] - r['rss_before_mb']:.0f}), {r['wall_s']:.0f} s")  # fmt: skip
        for impl in impls:
            small, full = results[f"{impl}@0.25"], results[f"{impl}@1"]
            d_small = small["peak_mb"] - small["rss_before_mb"]
            d_full = full["peak_mb"] - full["rss_before_mb"]
            print(f"  {impl}: prediction cost full dev / quarter dev: {d_full / max(d_small, 1):.2f}")
        if "hf@1" in results:
            print(f"  peak ratio ours/transformers (full dev): {results['ours@1']['peak_mb'] / results['hf@1']['peak_mb']:.2f}")
    if a.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
