"""`spanbert pretrain` and `spanbert fill`: the paper's systems as presets, and the pre-training job.

Systems (§4.2, §5, §6 of the paper), each at any model size (tiny/small/base/large):

| system | masking | sequences | objectives | paper |
|---|---|---|---|---|
| spanbert | geometric spans | single, up to 512 | MLM + SBO | §3, Table 1-5 |
| bert | subword tokens | two segments | MLM + NSP | "Our BERT" |
| bert-1seq | subword tokens | single | MLM | "Our BERT-1seq" |
| google-bert | subword tokens | two segments, 10% short | MLM + NSP | Google BERT's data recipe |
| mask-subword, mask-whole-word, mask-named-entity, mask-noun-phrase, mask-span | as named | two segments | MLM + NSP | Table 6 |
| span-2seq-nsp, span-1seq, span-1seq-sbo | geometric spans | as named | as named | Table 7 |
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from spanbert.config import (
    add_dataclass_arguments,
    check_unknown_overrides,
    dataclass_from_args,
    model_config,
)
from spanbert.errors import SpanBertError
from spanbert.masking import MaskingConfig
from spanbert.trainer import TrainingArguments, predict_batches, train

# system -> (masking scheme, "single" | "nsp", sbo, short_seq_prob)
SYSTEMS: dict[str, tuple[str, str, bool, float]] = {
    "spanbert": ("span", "single", True, 0.0),
    "bert": ("subword", "nsp", False, 0.0),
    "bert-1seq": ("subword", "single", False, 0.0),
    "google-bert": ("subword", "nsp", False, 0.1),
    # Table 6: masking ablations, all bi-sequence with NSP
    "mask-subword": ("subword", "nsp", False, 0.0),
    "mask-whole-word": ("whole_word", "nsp", False, 0.0),
    "mask-named-entity": ("named_entity", "nsp", False, 0.0),
    "mask-noun-phrase": ("noun_phrase", "nsp", False, 0.0),
    "mask-span": ("span", "nsp", False, 0.0),
    # Table 7: auxiliary objectives with span masking
    "span-2seq-nsp": ("span", "nsp", False, 0.0),
    "span-1seq": ("span", "single", False, 0.0),
    "span-1seq-sbo": ("span", "single", True, 0.0),
}


@dataclass
class PretrainConfig:
    """What to pre-train and on which data. Training-loop options are in TrainingArguments."""

    system: str = "spanbert"
    """Paper system: spanbert, bert, bert-1seq, google-bert, mask-{subword,whole-word,named-entity,noun-phrase,span}, span-2seq-nsp, span-1seq, span-1seq-sbo."""
    model: str = "base"
    """Model size preset: tiny, small, base, large (the quick start uses tiny)."""
    corpus: str | None = None
    """Text files or folders (plain text, blank line between documents, or JSONL with a text field), or a `spanbert preprocess` output folder. Default: the English reference text every Python installation carries (pydoc topics)."""
    tokenizer: str | None = None
    """Tokenizer folder (tokenizer.json or vocab.txt). Default: the --init-from checkpoint's, else one trained on the corpus."""
    vocab_size: int = 8000
    """Vocabulary size when a tokenizer is trained on the corpus."""
    init_from: str | None = None
    """Continue pre-training from this HF BERT / SpanBERT checkpoint folder (architecture comes from it)."""
    max_seq_length: int = 512
    """Block length in tokens, [CLS] and [SEP] included (§4.2: up to 512)."""
    masking: str | None = None
    """Override the system's masking scheme: subword, whole_word, span, named_entity, noun_phrase (the masking options below tune it)."""
    short_seq_prob: float | None = None
    """NSP pairs: probability of a shorter target length (Google BERT: 0.1). Default: the system's."""
    mlm_weight: float = 1.0
    """Weight of the MLM loss."""
    sbo_weight: float = 1.0
    """Weight of the SBO loss (§3.2 sums the two with weight 1)."""
    eval_fraction: float = 0.01
    """Fraction of blocks (the last ones, i.e. the last documents) held out for MLM/SBO evaluation."""
    max_eval_blocks: int = 256
    """Cap on held-out blocks."""
    max_predictions: int | None = None
    """Pad every sequence's masked targets to this count (fixed batch shapes for compiled GPU code); None = as many as masked."""
    pad_to: int | None = None
    """Pad every batch to this length (fixed shapes); None = the longest sequence in the batch."""
    num_proc: int = 2
    """Worker processes for on-the-fly preprocessing."""
    output_name: str = "final"
    """Subfolder of output_dir that receives the exported HF-format model."""


# Defaults of the training loop for pre-training (§4.2 / Appendix A): peak 1e-4 after 10k warmup steps,
# linear decay, decoupled weight decay 0.1 (not on biases and LayerNorm), clipping at 1.0, batch 256.
PRETRAIN_DEFAULTS: dict[str, Any] = dict(
    output_dir="runs/spanbert",
    learning_rate=1e-4,
    warmup_steps=10_000,
    weight_decay=0.1,
    max_grad_norm=1.0,
    per_device_train_batch_size=32,
    gradient_accumulation_steps=8,
    max_steps=2_400_000,
    logging_steps=100,
    save_steps=2000,
    eval_steps=2000,
)

# `spanbert pretrain` with no arguments: tiny model, bundled corpus, CPU, a few minutes.
QUICKSTART: dict[str, Any] = dict(
    output_dir="runs/spanbert-quickstart",
    max_steps=1200,
    warmup_steps=100,
    learning_rate=2e-3,
    per_device_train_batch_size=16,
    gradient_accumulation_steps=1,
    logging_steps=100,
    save_steps=400,
    eval_steps=400,
)
QUICKSTART_CONFIG: dict[str, Any] = dict(model="tiny", max_seq_length=128, vocab_size=4000)


def _resolve_system(cfg: PretrainConfig) -> tuple[str, str, bool, float]:
    if cfg.system not in SYSTEMS:
        raise SpanBertError(f"unknown system {cfg.system!r}; choose from: {', '.join(SYSTEMS)}")
    scheme, mode, sbo, short = SYSTEMS[cfg.system]
    return cfg.masking or scheme, mode, sbo, short if cfg.short_seq_prob is None else cfg.short_seq_prob


class _Blocks(torch.utils.data.Dataset):
    """A contiguous range of a pre-training dataset's items, passing `set_epoch` through."""

    def __init__(self, dataset, start: int, stop: int, fixed_epoch: int | None = None):
        self.dataset, self.start, self.stop = dataset, start, stop
        if fixed_epoch is not None:
            dataset.set_epoch(fixed_epoch)

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, i: int):
        return self.dataset[self.start + i]

    def set_epoch(self, epoch: int) -> None:
        self.dataset.set_epoch(epoch)


def prepare_corpus(cfg: PretrainConfig, work_dir: Path, tokenizer_dir: str | None) -> tuple[Path, Any]:
    """Return (preprocessed corpus folder, Tokenizer), preprocessing the text on the fly if needed."""
    from spanbert import data
    from spanbert.tokenization import load_tokenizer, train_tokenizer

    scheme, _, _, _ = _resolve_system(cfg)
    corpus = Path(cfg.corpus) if cfg.corpus else None
    if corpus is not None and data.is_preprocessed(corpus):
        tok_dir = tokenizer_dir or data.tokenizer_dir_of(corpus)
        if tok_dir is None:
            raise SpanBertError(f"{corpus}: preprocessed corpus without a tokenizer; pass --tokenizer")
        return corpus, load_tokenizer(tok_dir)
    if corpus is None:
        files = [data.builtin_corpus(work_dir / "corpus.txt")]
        print(f"corpus: the Python reference manual (pydoc topics) written to {files[0]}")
    else:
        if not corpus.exists():
            raise SpanBertError(f"{corpus}: corpus not found")
        files = [corpus]
    if tokenizer_dir:
        tok = load_tokenizer(tokenizer_dir)
    else:
        print(f"training a {cfg.vocab_size}-token cased WordPiece vocabulary on the corpus")
        tok = train_tokenizer(files, vocab_size=cfg.vocab_size, output_dir=work_dir / "tokenizer")
    out = work_dir / "preprocessed"
    candidates = {"named_entity": "entities", "noun_phrase": "noun_phrases"}.get(scheme)
    data.preprocess(files, tok, out, num_workers=cfg.num_proc, candidates=candidates)
    return out, tok


def build_datasets(cfg: PretrainConfig, corpus_dir: Path, tok: Any, seed: int, masking: MaskingConfig | None = None):
    from spanbert import data

    scheme, mode, _, short = _resolve_system(cfg)
    masking = dataclasses.replace(masking or MaskingConfig(), scheme=scheme)
    kwargs = dict(max_seq_length=cfg.max_seq_length, mode=mode, seed=seed, short_seq_prob=short, masking=masking)
    full = data.PretrainDataset(corpus_dir, tok, **kwargs)
    n = len(full)
    n_eval = min(cfg.max_eval_blocks, int(n * cfg.eval_fraction)) if n >= 20 else 0
    train_set = _Blocks(full, 0, n - n_eval)
    eval_set = _Blocks(data.PretrainDataset(corpus_dir, tok, **kwargs), n - n_eval, n, fixed_epoch=0) if n_eval else None
    return train_set, eval_set


def make_eval_fn(eval_set, batch_size: int, collate):
    def evaluate(model, step: int) -> dict[str, float]:
        sums: dict[str, float] = {}
        count = 0
        for _, out in predict_batches(model, eval_set, batch_size, collate, device=next(model.parameters()).device, desc="held-out", disable_tqdm=True):
            for k in ("mlm_loss", "sbo_loss", "nsp_loss", "mlm_acc", "sbo_acc", "nsp_acc"):
                if k in out:
                    sums[k] = sums.get(k, 0.0) + float(out[k])
            count += 1
        results = {k: v / max(1, count) for k, v in sums.items()}
        if results:
            print("held-out " + " ".join(f"{k} {v:.4f}" for k, v in results.items()), file=sys.stderr)
        return results

    return evaluate


def pretrain(cfg: PretrainConfig, args: TrainingArguments, masking: MaskingConfig | None = None) -> Path:
    """Run a pre-training job end to end; returns the folder of the exported HF-format model."""
    from spanbert import data
    from spanbert.model import SpanBertForPreTraining

    scheme, mode, sbo, _ = _resolve_system(cfg)
    output_dir = Path(args.output_dir)
    work_dir = output_dir / "data"
    work_dir.mkdir(parents=True, exist_ok=True)
    tokenizer_dir = cfg.tokenizer
    if tokenizer_dir is None and cfg.init_from and data.has_tokenizer(cfg.init_from):
        tokenizer_dir = cfg.init_from
    corpus_dir, tok = prepare_corpus(cfg, work_dir, tokenizer_dir)

    torch.manual_seed(args.seed)
    if cfg.init_from:
        model = SpanBertForPreTraining.from_pretrained(
            cfg.init_from, sbo=sbo, nsp=mode == "nsp", mlm_weight=cfg.mlm_weight, sbo_weight=cfg.sbo_weight
        )
        if model.config.vocab_size < tok.vocab_size:
            raise SpanBertError(
                f"{cfg.init_from}: vocabulary of {model.config.vocab_size} is smaller than the tokenizer's "
                f"{tok.vocab_size}; use the checkpoint's own tokenizer"
            )
    else:
        mcfg = model_config(cfg.model, vocab_size=tok.vocab_size, max_position_embeddings=max(512, cfg.max_seq_length))
        model = SpanBertForPreTraining(
            mcfg, sbo=sbo, nsp=mode == "nsp", mlm_weight=cfg.mlm_weight, sbo_weight=cfg.sbo_weight
        )
    if cfg.max_seq_length > model.config.max_position_embeddings:
        raise SpanBertError(
            f"max_seq_length {cfg.max_seq_length} exceeds the model's {model.config.max_position_embeddings} positions"
        )
    train_set, eval_set = build_datasets(cfg, corpus_dir, tok, args.seed, masking)
    collate = data.make_collate(tok.pad_id, max_predictions=cfg.max_predictions, pad_to=cfg.pad_to)
    eval_fn = make_eval_fn(eval_set, args.per_device_eval_batch_size, collate) if eval_set is not None else None
    print(
        f"pre-training {cfg.system} ({scheme} masking, {'two segments + NSP' if mode == 'nsp' else 'single sequence'}"
        f"{' + SBO' if sbo else ''}), model {cfg.model if not cfg.init_from else cfg.init_from}: "
        f"{model.config.num_hidden_layers} layers x {model.config.hidden_size}, {len(train_set)} blocks of "
        f"<= {cfg.max_seq_length} tokens, {len(eval_set) if eval_set else 0} held out"
    )
    result = train(model, train_set, args, collate_fn=collate, eval_fn=eval_fn)
    rank = int(os.environ.get("RANK", 0))
    final = output_dir / cfg.output_name
    if rank == 0 and result.global_step >= (args.max_steps if args.max_steps > 0 else 0):
        model.save_pretrained(final, tokenizer=tok, extra={"system": cfg.system, "masking": scheme})
        (final / "train_metrics.json").write_text(json.dumps(result.metrics, indent=2) + "\n")
    return final


def _parser(prog: str, defaults: dict[str, Any], cfg_defaults: dict[str, Any]) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Pre-train SpanBERT (span masking + span boundary objective, single sequences; Joshi et al. 2020) "
            "or one of the paper's baselines. With no arguments: the quick start, a tiny SpanBERT on the English "
            "reference text bundled with Python, on CPU, in a few minutes."
        ),
    )
    p.add_argument("--config", default=None, help="YAML file of option overrides (PretrainConfig and TrainingArguments keys)")
    add_dataclass_arguments(p.add_argument_group("pre-training"), PretrainConfig, defaults=cfg_defaults)
    # `--init-from` is the spelling users know from the issue tracker; `--init_from` works too.
    p.add_argument("--init-from", dest="init_from", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    add_dataclass_arguments(
        p.add_argument_group("masking (§3.1; the official implementation's variants are options)"),
        MaskingConfig,
        exclude=("scheme",),
    )
    add_dataclass_arguments(p.add_argument_group("training loop"), TrainingArguments, defaults=defaults)
    p.add_argument("overrides", nargs="*", metavar="key=value", help="further overrides of any option above")
    return p


def main(argv: list[str], prog: str = "spanbert pretrain") -> int:
    quick = not argv
    train_defaults = {**PRETRAIN_DEFAULTS, **(QUICKSTART if quick else {})}
    cfg_defaults = QUICKSTART_CONFIG if quick else {}
    p = _parser(prog, train_defaults, cfg_defaults)
    args = p.parse_args(argv)
    sections = [PretrainConfig, MaskingConfig, TrainingArguments]
    check_unknown_overrides(args.overrides, sections)
    if args.config:  # one YAML file may hold keys of all three dataclasses
        from spanbert.config import load_yaml

        check_unknown_overrides([f"{k}=x" for k in load_yaml(args.config)], sections)
    cfg = dataclass_from_args(PretrainConfig, args, defaults=cfg_defaults, yaml_path=args.config, overrides=args.overrides)
    targs = dataclass_from_args(TrainingArguments, args, defaults=train_defaults, yaml_path=args.config, overrides=args.overrides)
    if quick:
        print("quick start: tiny SpanBERT on the Python reference manual, CPU (spanbert pretrain --help for options)")
    masking = dataclass_from_args(MaskingConfig, args, yaml_path=args.config, overrides=args.overrides)
    final = pretrain(cfg, targs, masking)
    if final.exists():
        print(f"\nsaved the model to {final} (HF layout: config.json, model.safetensors, tokenizer files)")
        print("next: fill a masked span with the MLM or the span boundary head:")
        print(f'  spanbert fill --model {final} --text "The {{MASK*3}} is used to define a function." --head sbo')
        print(f"  or fine-tune it: spanbert finetune squad --model {final} --train_file ... --validation_file ...")
    return 0


# ---------------------------------------------------------------------------------------------
# spanbert fill

_MASK_RUN = re.compile(r"\{MASK\*(\d+)\}")


def fill(model, tok, text: str, head: str = "mlm", top_k: int = 5) -> dict[str, Any]:
    """Predict every `[MASK]` in ``text``; `{MASK*n}` is shorthand for n masks.

    head="mlm": the MLM head at each masked position. head="sbo": the span boundary head, which
    sees only the two tokens around each run of masks and the position inside it (§3.2).
    """
    text = _MASK_RUN.sub(lambda m: " ".join(["[MASK]"] * int(m.group(1))), text)
    pieces = text.split("[MASK]")
    ids: list[int] = [tok.cls_id]
    masked: list[int] = []
    for i, piece in enumerate(pieces):
        if piece.strip():
            ids += tok.encode(piece.strip()).ids.tolist()
        if i < len(pieces) - 1:
            masked.append(len(ids))
            ids.append(tok.mask_id)
    ids.append(tok.sep_id)
    if not masked:
        raise SpanBertError("the text has no [MASK] (write [MASK] per token, or {MASK*n} for a run of n)")
    if head == "sbo" and model.cls.span_predictions is None:
        raise SpanBertError("this model has no span boundary head (pre-trained without SBO); use --head mlm")
    if len(ids) > model.config.max_position_embeddings:
        raise SpanBertError(f"the text is {len(ids)} tokens; the model takes at most {model.config.max_position_embeddings}")
    input_ids = torch.tensor([ids])
    positions = torch.tensor(masked)
    # runs of consecutive masks are the spans; their outside neighbours are the SBO boundaries
    starts = [p for j, p in enumerate(masked) if j == 0 or masked[j - 1] != p - 1]
    span_start = {p: max(s for s in starts if s <= p) for p in masked}
    span_end = {}
    for p in reversed(masked):
        span_end[p] = span_end.get(p + 1, p) if (p + 1) in masked else p
    batch = dict(input_ids=input_ids, mlm_positions=positions)
    if head == "sbo":
        batch.update(
            sbo_positions=positions,
            sbo_left=torch.tensor([span_start[p] - 1 for p in masked]),
            sbo_right=torch.tensor([span_end[p] + 1 for p in masked]),
            sbo_rel=torch.tensor([p - span_start[p] for p in masked]),
        )
    model.eval()
    with torch.no_grad():
        out = model(**batch)
    logits = out["sbo_logits" if head == "sbo" else "mlm_logits"]  # (N, V)
    # never propose special tokens
    logits[:, torch.as_tensor(tok.special_ids(), dtype=torch.long)] = -float("inf")
    probs = logits.softmax(-1)
    top = probs.topk(top_k, dim=-1)
    filled = list(ids)
    predictions = []
    for j, p in enumerate(masked):
        cands = [(tok.id_to_token(int(i)), float(pr)) for pr, i in zip(top.values[j], top.indices[j])]
        filled[p] = int(top.indices[j, 0])
        predictions.append({"position": p, "candidates": cands})
    return {"text": tok.decode(filled[1:-1]), "predictions": predictions}


def fill_main(argv: list[str], prog: str = "spanbert fill") -> int:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Predict masked tokens: [MASK] per token, {MASK*n} for a span of n. "
        "--head sbo fills a span from its two boundary tokens only (the span boundary objective, §3.2).",
    )
    p.add_argument("--model", required=True, help="pre-trained model folder (from spanbert pretrain)")
    p.add_argument("--text", required=True, help='e.g. "The {MASK*2} won Super Bowl 50."')
    p.add_argument("--head", choices=("mlm", "sbo"), default="mlm", help="which head predicts (default: mlm)")
    p.add_argument("--top_k", "--top-k", type=int, default=5, help="candidates shown per position (default: 5)")
    p.add_argument("--tokenizer", default=None, help="tokenizer folder when the model has none")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    args = p.parse_args(argv)
    from spanbert.model import SpanBertForPreTraining
    from spanbert.tasks.common import load_tokenizer_for

    model = SpanBertForPreTraining.from_pretrained(args.model)
    tok = load_tokenizer_for(args.model, args.tokenizer)
    result = fill(model, tok, args.text, head=args.head, top_k=args.top_k)
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
        return 0
    print(result["text"])
    for pred in result["predictions"]:
        cands = ", ".join(f"{t} {pr:.2f}" for t, pr in pred["candidates"])
        print(f"  position {pred['position']}: {cands}")
    return 0


__all__ = ["SYSTEMS", "PretrainConfig", "pretrain", "fill", "main", "fill_main"]
