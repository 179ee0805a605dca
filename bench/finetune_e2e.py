"""SQuAD fine-tuning end to end: `spanbert finetune squad` against a transformers loop (the steps of its
`run_qa.py`: fast-tokenizer features, `BertForQuestionAnswering`, AdamW with linear decay, n-best
post-processing, `save_pretrained`) on the same data, model, epochs, batch and learning rate, in one
process, with and without evaluation during training. Where does the time go?

    python bench/finetune_e2e.py                         # tiny random BERT, synthetic SQuAD
    python bench/finetune_e2e.py --data squad --train_examples 2000 --dev_articles 4 --preset small
    python bench/finetune_e2e.py --data squad --model MINILM --train_examples 128 --dev_articles 1 \
        --dev_examples 16 --epochs 1 --max_seq_length 384 --doc_stride 128 --learning_rate 5e-5 \
        --hf_padding longest            # real weights (docs/benchmarks.md); MINILM: an HF BERT folder
    python bench/finetune_e2e.py --family modernbert --preset small   # the ModernBERT family, both sides
    python bench/finetune_e2e.py --smoke                 # seconds: checks it runs (tests/test_bench.py)

With `--hf_padding longest` transformers pads each batch to its longest window, in the data's order, as
run_qa.py's `DataCollatorWithPadding` does (spanbert sorts dev windows by length); `max_length` pads
every window to max_seq_length (run_qa.py's default). Both sides start from one tiny random BERT saved by spanbert (its HF layout is what transformers
loads) with a vocabulary trained on the data. Each phase is timed: feature building (train and dev),
training (without the evaluations inside it), evaluation (every evaluation: the forward passes, the
n-best decoding, the metric), selection (keeping the best weights: spanbert writes them to best/ and
takes them back at the end when they are not the last; transformers clones them in memory), saving.
With evaluation during training, transformers evaluates as often as spanbert did (`--evals_per_epoch`,
spanbert's default 10) and keeps the best weights in memory, as spanbert's selection does. Without it,
each side trains, saves and evaluates once at the end, in the same process (spanbert: `--evals_per_epoch
0` with the dev file: the features built once, the model in memory). `spanbert predict squad` +
`evaluate` from the saved folder (a new load of the model and the dev set) is timed apart and compared
with that one evaluation. Prints the seconds per phase (wall and process CPU), the ratio transformers /
spanbert of each phase and of the whole (> 1: spanbert faster), and the evaluation ratios on one line. A first run of each side, on 16 questions, is made before the measured ones and only
its total printed: it pays one-time costs (imports inside spanbert's commands, allocator warm-up) that
a fine-tuning process pays once.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import gzip
import io
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
SQUAD = ROOT / "../shared/data/squad"


class Clock:
    """Seconds per phase; ``wrap(module, name, phase)`` times every call of ``module.name``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = collections.defaultdict(float)
        # process CPU seconds: on a machine shared with other jobs the wall time of a phase includes
        # their load; with one thread the CPU time is the work (the ratios are printed for both)
        self.cpu: dict[str, float] = collections.defaultdict(float)
        self.calls: dict[str, int] = collections.defaultdict(int)

    @contextlib.contextmanager
    def phase(self, name: str):
        t, c = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - t
            self.cpu[name] += time.process_time() - c
            self.calls[name] += 1

    def wrap(self, module, name: str, phase: str) -> None:
        fn = getattr(module, name)

        def timed(*args, **kwargs):
            self.calls[name] += 1
            with self.phase(phase):
                return fn(*args, **kwargs)

        setattr(module, name, timed)
        self._undo.append((module, name, fn))

    def __enter__(self) -> Clock:
        self._undo: list = []
        return self

    def __exit__(self, *exc) -> None:
        for module, name, fn in reversed(self._undo):
            setattr(module, name, fn)


def first_questions(articles: list[dict], n: int) -> list[dict]:
    """Whole paragraphs, from the first, until they hold ``n`` questions (or the articles end)."""
    kept, seen = [], 0
    for art in articles:
        paragraphs = []
        for par in art["paragraphs"]:
            if seen >= n:
                break
            paragraphs.append(par)
            seen += len(par["qas"])
        if paragraphs:
            kept.append({**art, "paragraphs": paragraphs})
    return kept


def data_files(args, tmp: Path) -> tuple[Path, Path]:
    if args.data == "squad":
        train = json.load(gzip.open(SQUAD / "train-v1.1.rebuilt.json.gz", "rt"))
        dev = json.loads((SQUAD / "dev-v1.1.json").read_text())
        train["data"] = first_questions(train["data"], args.train_examples)
        dev["data"] = first_questions(dev["data"][: args.dev_articles], args.dev_examples or 10**9)
    else:
        sys.path.insert(0, str(Path(__file__).parent))
        from gpu_dry_data import squad  # the synthetic SQuAD of bench/gpu.sh --dry-run

        rng = random.Random(0)
        train, dev = squad(rng, max(1, args.train_examples // 4)), squad(rng, args.dev_articles)
    (tmp / "train.json").write_text(json.dumps(train))
    (tmp / "dev.json").write_text(json.dumps(dev))
    return tmp / "train.json", tmp / "dev.json"


def tiny_model(args, train: Path, out: Path) -> Path:
    if args.model:
        return Path(args.model)
    from spanbert.config import model_config
    from spanbert.model import SpanBertForPreTraining
    from spanbert.modernbert import ModernBertForPreTraining, modernbert_config
    from spanbert.tokenization import train_byte_level_tokenizer, train_tokenizer

    texts = [p["context"] for a in json.loads(train.read_text())["data"] for p in a["paragraphs"]]
    texts += [q["question"] for a in json.loads(train.read_text())["data"] for p in a["paragraphs"] for q in p["qas"]]
    torch.manual_seed(0)
    if args.family == "modernbert":  # its byte-level BPE vocabulary with BERT's special tokens
        tok = train_byte_level_tokenizer(None, max(args.vocab_size, 300), output_dir=out / "tok", texts=texts)
        cfg = modernbert_config(args.preset, vocab_size=tok.vocab_size, pad_token_id=tok.pad_id, cls_token_id=tok.cls_id,
                                sep_token_id=tok.sep_id, bos_token_id=tok.cls_id, eos_token_id=tok.sep_id)  # fmt: skip
        ModernBertForPreTraining(cfg, sbo=False).save_pretrained(out / "model", tokenizer=tok)
        return out / "model"
    tok = train_tokenizer(None, vocab_size=args.vocab_size, output_dir=out / "tok", texts=texts, show_progress=False)
    SpanBertForPreTraining(model_config(args.preset, vocab_size=tok.vocab_size), sbo=False, nsp=False).save_pretrained(
        out / "model", tokenizer=tok
    )
    return out / "model"


def run_spanbert(args, model: Path, train: Path, dev: Path, out: Path, evaluate_during: bool) -> tuple[Clock, dict]:
    from spanbert import cli, loop
    from spanbert.tasks.qa import decoding as qa_decoding
    from spanbert.tasks.qa import finetune as qa_finetune

    argv = ["finetune", "squad", "--model", str(model), "--train_file", str(train), "--output_dir", str(out),
            "--num_train_epochs", str(args.epochs), "--per_device_train_batch_size", str(args.batch_size),
            "--learning_rate", str(args.learning_rate), "--max_seq_length", str(args.max_seq_length),
            "--doc_stride", str(args.doc_stride), "--disable_tqdm", "--seed", "0", "--device", "cpu",
            "--validation_file", str(dev)]  # fmt: skip
    # without evaluation during training: the one evaluation at the end, in this process (features and
    # model in memory), as transformers' loop does it
    argv += ["--evals_per_epoch", str(args.evals_per_epoch if evaluate_during else 0)]
    with Clock() as clock:
        # each name where the QA package looks it up when it runs (bound in its module: qa.finetune calls
        # the training loop and the decoders, qa.decoding calls its own helpers)
        modules = (qa_finetune, qa_decoding)
        for name, phase in (("features_for", "features"), ("predict_logits", "evaluation"),
                            ("predict_window_spans", "evaluation"), ("decode", "evaluation"),
                            ("decode_spans", "evaluation"), ("score", "evaluation"), ("train", "training+eval"),
                            ("save_finetuned", "saving")):  # fmt: skip
            for module in modules:
                if hasattr(module, name):
                    clock.wrap(module, name, phase)
        for name in ("save_best_weights", "load_best_weights"):  # the names the loop calls (bound in its module)
            clock.wrap(loop, name, "selection")
        with clock.phase("total"), contextlib.redirect_stdout(io.StringIO()):
            assert cli.run(argv) == 0
    for kind in (clock.seconds, clock.cpu):
        kind["training"] = kind.pop("training+eval") - kind["evaluation"] - kind["selection"]
    metrics = json.loads((out / "dev_results.json").read_text())
    if not evaluate_during:
        # the final evaluation as a separate command: `spanbert predict squad` loads the saved model and
        # builds the dev features again; not part of the total (the run above evaluated already)
        buf = io.StringIO()
        with clock.phase("predict command"), contextlib.redirect_stdout(buf):
            assert cli.run(["predict", "squad", "--model", str(out), "--data", str(dev), "--output", str(out / "p.json"),
                             "--disable_tqdm", "--device", "cpu"]) == 0  # fmt: skip
            assert cli.run(["evaluate", "squad", "--data", str(dev), "--predictions", str(out / "p.json")]) == 0
        again = json.loads(buf.getvalue()[buf.getvalue().rfind("{") :])
        assert again["f1"] == metrics["f1"], (again, metrics)  # the same predictions either way
    return clock, metrics


def run_transformers(args, model: Path, train: Path, dev: Path, out: Path, evaluations: int) -> tuple[Clock, dict]:
    """`run_qa.py`'s steps, written out: features with overflowing windows, a plain training loop, n-best
    decoding of (start, end) logits over the windows of each question, `save_pretrained`."""
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer, get_linear_schedule_with_warmup

    from spanbert.metrics.squad import evaluate_v1

    clock = Clock().__enter__()
    with clock.phase("total"):
        tok = AutoTokenizer.from_pretrained(str(model))  # BertTokenizerFast, or ModernBERT's fast BPE tokenizer
        train_data, dev_data = json.loads(train.read_text()), json.loads(dev.read_text())
        # transformers' --doc_stride is the overlap of windows; spanbert's the step between them
        context_len = args.max_seq_length - 64 - 3
        stride = max(0, context_len - args.doc_stride)

        def examples(data):
            return [(q["id"], q["question"], p["context"], q.get("answers", []))
                    for a in data["data"] for p in a["paragraphs"] for q in p["qas"]]  # fmt: skip

        def featurize(exs, training: bool):
            enc = tok([e[1] for e in exs], [e[2] for e in exs], truncation="only_second", max_length=args.max_seq_length,
                      stride=stride, return_overflowing_tokens=True, return_offsets_mapping=True,
                      padding="max_length" if args.hf_padding == "max_length" else False)  # fmt: skip
            starts, ends = [], []
            for i, offsets in enumerate(enc["offset_mapping"]):
                seq = enc.sequence_ids(i)
                ex = exs[enc["overflow_to_sample_mapping"][i]]
                if training:
                    ans = ex[3][0]
                    s_char, e_char = ans["answer_start"], ans["answer_start"] + len(ans["text"])
                    ctx = [k for k, s in enumerate(seq) if s == 1]
                    if offsets[ctx[0]][0] > s_char or offsets[ctx[-1]][1] < e_char:
                        starts.append(0), ends.append(0)
                    else:
                        starts.append(next(k for k in ctx if offsets[k][1] > s_char))
                        ends.append(next(k for k in reversed(ctx) if offsets[k][0] < e_char))
                else:
                    enc["offset_mapping"][i] = [o if seq[k] == 1 else None for k, o in enumerate(offsets)]
            return enc, starts, ends

        with clock.phase("features"):
            tr_exs, dev_exs = examples(train_data), examples(dev_data)
            tr_enc, st, en = featurize(tr_exs, True)
            dev_enc, _, _ = featurize(dev_exs, False)
            # ModernBERT's models take no token types
            cols = ("input_ids", "attention_mask") + (("token_type_ids",) if args.family == "bert" else ())
            tr = [tr_enc[c] for c in cols]
            labels = torch.tensor(st), torch.tensor(en)
            dv = [dev_enc[c] for c in cols]

        def batch(rows: list[list[list[int]]], idx) -> dict[str, torch.Tensor]:
            """The windows ``idx`` padded to the longest of them (DataCollatorWithPadding; windows padded to
            max_length are all that long already)."""
            T = max(len(rows[0][i]) for i in idx)
            return {c: torch.tensor([r[i] + [0] * (T - len(r[i])) for i in idx]) for c, r in zip(cols, rows)}
        torch.manual_seed(0)
        m = AutoModelForQuestionAnswering.from_pretrained(str(model))  # BertForQuestionAnswering, ModernBertFor...
        opt = torch.optim.AdamW(m.parameters(), lr=args.learning_rate, weight_decay=0.01)
        n = len(tr[0])
        steps_per_epoch = (n + args.batch_size - 1) // args.batch_size
        total = steps_per_epoch * args.epochs
        sched = get_linear_schedule_with_warmup(opt, int(0.1 * total), total)
        eval_at = set(np.linspace(0, total, evaluations + 1, dtype=int)[1:].tolist()) if evaluations else set()

        def evaluate() -> dict:
            m.eval()
            with torch.no_grad():
                s_all, e_all = [], []
                for i in range(0, len(dv[0]), 64):  # in the data's order, as run_qa.py's eval loader
                    o = m(**batch(dv, range(i, min(i + 64, len(dv[0])))))
                    s_all += list(o.start_logits.numpy())  # (T,) each: a window's logits, padding included
                    e_all += list(o.end_logits.numpy())
            best: dict[str, tuple[float, str]] = {}
            for i in range(len(s_all)):
                ex = dev_exs[dev_enc["overflow_to_sample_mapping"][i]]
                offs = dev_enc["offset_mapping"][i]
                for a in np.argsort(s_all[i])[-20:][::-1]:
                    for b in np.argsort(e_all[i])[-20:][::-1]:
                        if offs[a] is None or offs[b] is None or b < a or b - a + 1 > 30:
                            continue
                        sc = float(s_all[i][a] + e_all[i][b])
                        if ex[0] not in best or sc > best[ex[0]][0]:
                            best[ex[0]] = (sc, ex[2][offs[a][0] : offs[b][1]])
            m.train()
            return evaluate_v1(dev_data["data"], {q: t for q, (_, t) in best.items()})

        metrics, best_f1, best_state = {}, -1.0, None
        m.train()
        step = 0
        for epoch in range(args.epochs):
            g = torch.Generator().manual_seed(epoch)
            perm = torch.randperm(n, generator=g)
            for i in range(0, n, args.batch_size):
                with clock.phase("training"):
                    idx = perm[i : i + args.batch_size]
                    o = m(**batch(tr, idx.tolist()), start_positions=labels[0][idx], end_positions=labels[1][idx])
                    o.loss.backward()
                    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
                    opt.step(), sched.step(), opt.zero_grad()
                step += 1
                if step in eval_at:
                    with clock.phase("evaluation"):
                        metrics = evaluate()
                    if metrics["f1"] > best_f1:  # keep the best weights, as spanbert's selection does
                        with clock.phase("selection"):
                            best_f1, best_state = metrics["f1"], {k: v.clone() for k, v in m.state_dict().items()}
        if best_state is not None:
            with clock.phase("selection"):
                m.load_state_dict(best_state)
        with clock.phase("saving"):
            m.save_pretrained(out)
            tok.save_pretrained(out)
        if not evaluations:
            with clock.phase("evaluation"):
                metrics = evaluate()
    clock.windows = (len(tr[0]), len(dv[0]))
    return clock, metrics


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", choices=("synthetic", "squad"), default="synthetic", help="squad: ../shared/data/squad")
    p.add_argument("--train_examples", type=int, default=400, help="training questions (about)")
    p.add_argument("--dev_articles", type=int, default=20)
    p.add_argument("--dev_examples", type=int, default=0, help="with --data squad: at most this many dev questions (0: all)")
    p.add_argument("--model", help="start both from this HF BERT folder (e.g. all-MiniLM-L6-v2) instead of a tiny random one")
    p.add_argument("--preset", default="tiny")
    p.add_argument("--family", choices=("bert", "modernbert"), default="bert",
                   help="the tiny random model's family (ModernBERT: transformers' ModernBertForQuestionAnswering beside ours)")
    p.add_argument("--vocab_size", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--learning_rate", type=float, default=1e-4)
    p.add_argument("--max_seq_length", type=int, default=128)
    p.add_argument("--doc_stride", type=int, default=64)
    p.add_argument("--evals_per_epoch", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--hf_padding", choices=("max_length", "longest"), default="max_length",
                   help="transformers' windows: padded to max_seq_length (run_qa.py's default) or each batch to its longest "
                        "window (run_qa.py --pad_to_max_length false)")  # fmt: skip
    p.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: a check that it runs (tests/test_bench.py)")
    args = p.parse_args()
    if args.smoke:
        args.data, args.train_examples, args.dev_articles, args.epochs, args.evals_per_epoch = "synthetic", 32, 2, 1, 2
    torch.set_num_threads(args.threads)
    import transformers

    transformers.logging.set_verbosity_error()  # its load report: the QA head is new, the MLM head unused
    transformers.logging.disable_progress_bar()  # 5.x: bars for loading and writing weights

    tmp = Path(tempfile.mkdtemp())
    train, dev = data_files(args, tmp)
    model = tiny_model(args, train, tmp)
    print(f"SQuAD fine-tuning end to end, {args.data} data, model {args.model or args.family + ' preset ' + args.preset}, {args.epochs} epochs, batch "
          f"{args.batch_size}, max_seq_length {args.max_seq_length}, {args.threads} thread(s); torch {torch.__version__}, "
          f"transformers {transformers.__version__}")  # fmt: skip
    phases = ("features", "training", "evaluation", "selection", "saving", "total")
    # a first run of each pays one-time costs (lazy imports, allocator warm-up): timed apart, not compared
    # (on a few questions: the one-time costs do not grow with the data)
    small = []
    for path, n in ((train, 16), (dev, 4)):
        data = json.loads(path.read_text())
        small.append(tmp / f"warm-{path.name}")
        small[-1].write_text(json.dumps({**data, "data": first_questions(data["data"], n)}))
    t = time.perf_counter()
    run_spanbert(args, model, *small, tmp / "warm-ours", False)
    first = time.perf_counter() - t
    t = time.perf_counter()
    run_transformers(args, model, *small, tmp / "warm-hf", 0)
    print(f"first run (one-time costs included, not compared): spanbert {first:.2f} s, transformers "
          f"{time.perf_counter() - t:.2f} s")  # fmt: skip
    for during in (True, False):
        ours, om = run_spanbert(args, model, train, dev, tmp / f"ours-{during}", during)
        # one forward pass over dev per evaluation (fine-tuning's evaluations call one of the two)
        passes = ours.calls["predict_logits"] + ours.calls["predict_window_spans"]
        evaluations = passes if during else 0
        hf, hm = run_transformers(args, model, train, dev, tmp / f"hf-{during}", evaluations)
        label = f"with {evaluations} evaluations during training" if during else "no evaluation during training (one at the end)"
        print(f"\n{label}; transformers windows: {hf.windows[0]} train, {hf.windows[1]} dev")
        print(f"{'phase':<12} {'spanbert s':>11} {'transformers s':>15} {'ratio':>7}   {'CPU s: spanbert':>16} "
              f"{'transformers':>13} {'ratio':>7}")  # fmt: skip
        for ph in phases:
            a, b = ours.seconds.get(ph, 0.0), hf.seconds.get(ph, 0.0)
            ca, cb = ours.cpu.get(ph, 0.0), hf.cpu.get(ph, 0.0)
            print(f"{ph:<12} {a:>11.2f} {b:>15.2f} {b / a if a else float('nan'):>6.2f}x   {ca:>16.2f} {cb:>13.2f} "
                  f"{cb / ca if ca else float('nan'):>6.2f}x")  # fmt: skip
        print(f"dev f1: spanbert {om.get('f1', float('nan')):.1f}, transformers {hm['f1']:.1f}")
        ev = passes
        a, b, ca, cb = ours.seconds["evaluation"], hf.seconds["evaluation"], ours.cpu["evaluation"], hf.cpu["evaluation"]
        what = "evaluation phase" if during else "final evaluation, in process"
        print(f"{what}: {ev} x {hf.windows[1]} dev windows, spanbert {a / ev:.3f} s each, transformers {b / ev:.3f} s: "
              f"ratio {b / a:.2f}x wall, {cb / ca:.2f}x CPU")  # fmt: skip
        if not during:
            a, ca = ours.seconds["predict command"], ours.cpu["predict command"]
            print(f"spanbert predict + evaluate commands from the saved folder (model and dev set loaded again): "
                  f"{a:.3f} s; transformers' final evaluation: ratio {b / a:.2f}x wall, {cb / ca:.2f}x CPU")  # fmt: skip
        print(f"ratio end to end transformers / spanbert ({'eval' if during else 'no eval'}): "
              f"{hf.seconds['total'] / ours.seconds['total']:.2f}x wall, {hf.cpu['total'] / ours.cpu['total']:.2f}x CPU")  # fmt: skip


if __name__ == "__main__":
    main()
