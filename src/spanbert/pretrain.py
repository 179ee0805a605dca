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
import functools
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from spanbert import distributed
from spanbert.config import (
    MODEL_PRESETS,
    BertConfig,
    add_dataclass_arguments,
    check_unknown_overrides,
    check_yaml,
    dataclass_from_args,
    model_config,
)
from spanbert.distributed import eprint0, print0
from spanbert.errors import SpanBertError
from spanbert.masking import SCHEMES, MaskingConfig
from spanbert.trainer import TrainingArguments, check_output_dir, predict_batches, train

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

# The fewest tokens a block may have: [CLS] + [SEP] (+ [SEP]) leave room for a few words.
MIN_SEQ_LENGTH = 8


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
    """Share of the corpus's tokens held out for MLM/SBO evaluation: whole documents, the last ones (0 < x < 1; --max_eval_blocks 0 turns evaluation off)."""
    max_eval_blocks: int = 256
    """Cap on held-out blocks (0 = no held-out evaluation)."""
    max_predictions: int | None = None
    """Pad every sequence's masked targets to this count (fixed batch shapes for compiled GPU code); None = as many as masked."""
    pad_to: int | None = None
    """Pad every batch to this length (fixed shapes); None = the longest sequence in the batch."""
    num_proc: int = 2
    """Worker processes for on-the-fly preprocessing (0 = one per CPU core, at most 8)."""
    output_name: str = "final"
    """Subfolder of output_dir that receives the exported HF-format model."""

    def __post_init__(self) -> None:
        # Each field alone; checks that involve the model or the data are in `pretrain` (a config is
        # built field by field from presets, YAML and flags, so a pair may be briefly inconsistent).
        if self.system not in SYSTEMS:
            raise SpanBertError(
                f"--system: found unknown system {self.system!r}, expected one of: {', '.join(SYSTEMS)}"
            )
        if self.model not in MODEL_PRESETS:
            raise SpanBertError(
                f"--model: found unknown model preset {self.model!r}, expected one of: {', '.join(MODEL_PRESETS)}"
            )
        if self.masking is not None and self.masking not in SCHEMES:
            raise SpanBertError(
                f"--masking: found unknown masking scheme {self.masking!r}, expected one of: {', '.join(SCHEMES)}"
            )
        if not MIN_SEQ_LENGTH <= self.max_seq_length:
            raise SpanBertError(f"--max_seq_length: found {self.max_seq_length}, expected at least {MIN_SEQ_LENGTH}")
        if self.vocab_size < 6:
            raise SpanBertError(f"--vocab_size: found {self.vocab_size}, expected at least 6 (5 special tokens + 1)")
        if not 0.0 < self.eval_fraction < 1.0:  # also rejects NaN
            raise SpanBertError(
                f"--eval_fraction: found {self.eval_fraction}, expected a number between 0 and 1 (exclusive)"
            )
        if self.max_eval_blocks < 0:
            raise SpanBertError(f"--max_eval_blocks: found {self.max_eval_blocks}, expected 0 or more")
        if self.num_proc < 0:
            raise SpanBertError(f"--num_proc: found {self.num_proc}, expected 0 (one per CPU core) or more")
        for name in ("mlm_weight", "sbo_weight"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise SpanBertError(f"--{name}: found {value}, expected a finite number >= 0")
        if self.short_seq_prob is not None and not 0.0 <= self.short_seq_prob <= 1.0:
            raise SpanBertError(f"--short_seq_prob: found {self.short_seq_prob}, expected a probability in [0, 1]")
        if self.max_predictions is not None and self.max_predictions < 1:
            raise SpanBertError(f"--max_predictions: found {self.max_predictions}, expected at least 1 (or none)")
        if self.pad_to is not None and self.pad_to < MIN_SEQ_LENGTH:
            raise SpanBertError(f"--pad_to: found {self.pad_to}, expected at least {MIN_SEQ_LENGTH} (or none)")
        if not self.output_name or Path(self.output_name).name != self.output_name or self.output_name in (".", ".."):
            raise SpanBertError(f"--output_name: found {self.output_name!r}, expected a folder name (no '/')")


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

# The quick start: tiny model, bundled corpus, CPU, a few minutes. In force until the user names a
# corpus, a model or --init-from (`quick_start_in_force`), whatever else is changed.
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
# Options that leave the quick start: what to train on and what to train.
LEAVES_QUICKSTART = ("corpus", "model", "init_from")

# Sustained training FLOP/s assumed for the time estimate (a planning figure, not a benchmark): fp32
# matmuls on one CPU core, and bf16 on a recent datacenter GPU at a typical share of its peak.
ASSUMED_FLOPS = {"cpu_per_thread": 2e10, "cuda": 1e14, "mps": 5e12}
# A plan longer than this is worth a warning before it starts.
LONG_PLAN_SECONDS = 24 * 3600


def _resolve_system(cfg: PretrainConfig) -> tuple[str, str, bool, float]:
    if cfg.system not in SYSTEMS:
        raise SpanBertError(f"--system: found unknown system {cfg.system!r}, expected one of: {', '.join(SYSTEMS)}")
    scheme, mode, sbo, short = SYSTEMS[cfg.system]
    return cfg.masking or scheme, mode, sbo, short if cfg.short_seq_prob is None else cfg.short_seq_prob


def check_masking(masking: MaskingConfig) -> None:
    """Reject masking options `mask_block` could not use, before any data is prepared."""
    m = masking
    if m.scheme not in SCHEMES:
        raise SpanBertError(
            f"--masking: found unknown masking scheme {m.scheme!r}, expected one of: {', '.join(SCHEMES)}"
        )
    if not 0.0 < m.mask_prob < 1.0:
        raise SpanBertError(f"--mask_prob: found {m.mask_prob}, expected a number between 0 and 1 (exclusive)")
    if not 0.0 < m.geometric_p <= 1.0:
        raise SpanBertError(f"--geometric_p: found {m.geometric_p}, expected a probability in (0, 1]")
    if m.max_span_len < 1:
        raise SpanBertError(f"--max_span_len: found {m.max_span_len}, expected at least 1")
    probs = tuple(m.replace_probs)
    if len(probs) != 3 or any(not (0.0 <= p <= 1.0) for p in probs) or abs(sum(probs) - 1.0) > 1e-6:
        raise SpanBertError(
            f"--replace_probs: found {probs}, expected 3 probabilities ([MASK], random, unchanged) that sum to 1"
        )
    if m.anchor not in ("word", "subword"):
        raise SpanBertError(f"--anchor: found {m.anchor!r}, expected word or subword")
    if m.max_sbo_targets is not None and m.max_sbo_targets < 1:
        raise SpanBertError(f"--max_sbo_targets: found {m.max_sbo_targets}, expected at least 1 (or none)")
    if not 0.0 <= m.candidate_fraction <= 1.0:
        raise SpanBertError(f"--candidate_fraction: found {m.candidate_fraction}, expected a fraction in [0, 1]")


def _looks_preprocessed(path: Path) -> bool:
    # meta.json marks a `spanbert preprocess` folder even when it is damaged: such a folder is an
    # error naming the file, never read as text (which would train on its tokenizer's vocab.txt).
    return path.is_dir() and (path / "meta.json").exists()


@dataclass
class _Sources:
    """What `pretrain` reads, checked before any work."""

    corpus: Path | None  # None: the bundled corpus
    preprocessed: bool
    tokenizer: str | None  # a tokenizer folder to use instead of training one
    init_config: BertConfig | None  # the --init-from checkpoint's architecture


def check_sources(cfg: PretrainConfig) -> _Sources:
    """Check the corpus, tokenizer and checkpoint paths (and a preprocessed corpus's files) exist and
    are readable; nothing is written."""
    from spanbert import data
    from spanbert.tokenization import corpus_files

    corpus = Path(cfg.corpus) if cfg.corpus else None
    preprocessed = corpus is not None and _looks_preprocessed(corpus)
    tokenizer = cfg.tokenizer
    if tokenizer is not None and not data.has_tokenizer(tokenizer):
        raise SpanBertError(
            f"{tokenizer}: found no tokenizer.json or vocab.txt, expected a tokenizer folder (--tokenizer)"
        )
    init_config = None
    if cfg.init_from:
        from spanbert.model import check_checkpoint

        init_config = check_checkpoint(cfg.init_from)  # config.json checked, weights present; no tensor read
        if tokenizer is None and data.has_tokenizer(cfg.init_from):
            tokenizer = cfg.init_from
    if preprocessed:
        corpus_data = data.TokenCorpus(corpus)  # checks meta.json and every array's size
        corpus_data.unigram_counts()
        if tokenizer is None:
            tok_dir = data.tokenizer_dir_of(corpus)
            if tok_dir is None:
                raise SpanBertError(
                    f"{corpus / 'tokenizer'}: not found, expected the corpus's tokenizer (or pass --tokenizer)"
                )
            tokenizer = str(tok_dir)
    elif corpus is not None:
        corpus_files([corpus])  # exists, and a folder holds text files
    return _Sources(corpus, preprocessed, tokenizer, init_config)


def plan_flops(config: BertConfig, cfg: PretrainConfig, args: TrainingArguments, steps: int, sbo: bool) -> float:
    """Training FLOPs of the whole plan: `flops_per_token` x tokens per step x steps (full blocks)."""
    from spanbert.model import flops_per_token

    world = distributed.world_size()
    tokens_per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps * world * cfg.max_seq_length
    return flops_per_token(config, cfg.max_seq_length, sbo=sbo) * tokens_per_step * steps


def _human(seconds: float) -> str:
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} seconds"


def plan_warning(
    config: BertConfig, cfg: PretrainConfig, args: TrainingArguments, steps: int, sbo: bool, device: torch.device
) -> str | None:
    """A warning line when the plan is enormous for this machine (base or larger on CPU, or an
    estimated time over a day), with the estimate and how to make it smaller; else None."""
    flops = plan_flops(config, cfg, args, steps, sbo)
    if device.type == "cpu":
        rate = ASSUMED_FLOPS["cpu_per_thread"] * torch.get_num_threads()
    else:
        rate = ASSUMED_FLOPS.get(device.type, ASSUMED_FLOPS["cuda"])
    seconds = flops / rate / max(1, distributed.world_size()) if device.type != "cpu" else flops / rate
    big_on_cpu = device.type == "cpu" and config.hidden_size >= MODEL_PRESETS["base"]["hidden_size"]
    if seconds < LONG_PLAN_SECONDS and not big_on_cpu:
        return None
    size = f"{config.num_hidden_layers} layers x {config.hidden_size}"
    return (
        f"warning: this plan is very large for this machine: {size}, {steps:,} steps of "
        f"{args.per_device_train_batch_size * args.gradient_accumulation_steps * distributed.world_size()} x "
        f"{cfg.max_seq_length} tokens = {flops:.2g} FLOPs, about {_human(seconds)} on {device.type} "
        f"(assuming {rate:.1g} FLOP/s); make it smaller with --max_steps, --model tiny or small, "
        "--max_seq_length or --per_device_train_batch_size, or run the quick start (no --corpus/--model)"
    )


def prepare_data(cfg: PretrainConfig, args: TrainingArguments, sources: _Sources) -> tuple[str, str]:
    """(preprocessed corpus folder, tokenizer folder) of the run, preparing them if needed.

    Runs on one process (rank 0, `distributed.on_main`); every rank then loads the tokenizer from
    the returned folder, so the ids trained on, every resume and the exported vocab.txt are the same
    file. A raw-text corpus and the tokenizer are prepared once into ``output_dir/data`` (atomically:
    a run killed mid-way leaves no `data/`, and the next run prepares it again); a resumed run reuses
    them and never retrains the tokenizer.
    """
    if sources.preprocessed:
        return str(sources.corpus), str(sources.tokenizer)
    scheme, _, _, _ = _resolve_system(cfg)
    candidates = {"named_entity": "entities", "noun_phrase": "noun_phrases"}.get(scheme)
    work_dir = Path(args.output_dir) / "data"
    marker = work_dir / "prepared.json"
    spec = dict(corpus=cfg.corpus, tokenizer=sources.tokenizer, vocab_size=cfg.vocab_size, candidates=candidates)
    if args.resume and marker.is_file():
        try:
            before = json.loads(marker.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            before = None
        if before != spec:
            raise SpanBertError(
                f"{marker}: found the run's data prepared from {before}, expected {spec}; resume with the run's "
                "own --corpus/--tokenizer/--vocab_size, or start over with --overwrite_output_dir"
            )
        print0(f"corpus and tokenizer: reusing {work_dir} (prepared by the run being resumed)")
        return str(work_dir / "preprocessed"), str(work_dir / "tokenizer")
    created = [d for d in (work_dir.parent, *work_dir.parent.parents) if not d.exists()]
    try:
        _prepare_into(work_dir, cfg, args, sources, spec, candidates)
    except BaseException:
        # a failed preparation leaves nothing: atomic_dir removed its temporary folder, and the run
        # folders it created for it go too (only while empty)
        for d in created:
            try:
                d.rmdir()
            except OSError:
                break
        raise
    return str(work_dir / "preprocessed"), str(work_dir / "tokenizer")


def _prepare_into(
    work_dir: Path, cfg: PretrainConfig, args: TrainingArguments, sources: _Sources, spec: dict, candidates: str | None
) -> None:
    from spanbert import data
    from spanbert.tokenization import load_tokenizer, train_tokenizer
    from spanbert.utils import atomic_dir, atomic_write

    with atomic_dir(work_dir) as tmp:
        if sources.corpus is None:
            files = [data.builtin_corpus(tmp / "corpus.txt")]
            print0(f"corpus: the Python reference manual (pydoc topics), written to {work_dir / 'corpus.txt'}")
        else:
            files = [sources.corpus]
        if sources.tokenizer:
            tok = load_tokenizer(sources.tokenizer)
            tok.save(tmp / "tokenizer")
        else:
            print0(f"training a {cfg.vocab_size}-token cased WordPiece vocabulary on the corpus")
            try:
                train_tokenizer(files, vocab_size=cfg.vocab_size, output_dir=tmp / "tokenizer", show_progress=False)
            except SpanBertError as e:
                if any(str(f) in str(e) for f in files):
                    raise
                raise SpanBertError(f"{', '.join(map(str, files))}: {e}") from None  # name the corpus
        # preprocess with the tokenizer as saved, the one every rank will load
        data.preprocess(
            files, load_tokenizer(tmp / "tokenizer"), tmp / "preprocessed", num_workers=cfg.num_proc,
            candidates=candidates, progress=not args.disable_tqdm,
        )
        with atomic_write(tmp / "prepared.json") as f:
            json.dump(spec, f, indent=2)


def prepare_corpus(cfg: PretrainConfig, work_dir: Path, tokenizer_dir: str | None) -> tuple[Path, Any]:
    """(preprocessed corpus folder, Tokenizer) with the data prepared under ``work_dir``'s parent run
    folder (`prepare_data`); kept for callers of the earlier API."""
    from spanbert.tokenization import load_tokenizer

    sources = check_sources(dataclasses.replace(cfg, tokenizer=tokenizer_dir or cfg.tokenizer))
    args = TrainingArguments(output_dir=str(Path(work_dir).parent), disable_tqdm=True)
    corpus_dir, tok_dir = prepare_data(cfg, args, sources)
    return Path(corpus_dir), load_tokenizer(tok_dir)


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


def build_datasets(
    cfg: PretrainConfig, corpus_dir: Path | str, tok: Any, seed: int, masking: MaskingConfig | None = None
):
    """(training set, held-out set or None), split by whole documents (`data.held_out_documents`).

    Each set draws blocks, NSP pairs and NSP "random next" segments from its own documents only, so
    no held-out text is trained on. The held-out set keeps epoch 0's masks: the same examples at
    every evaluation.
    """
    from spanbert import data

    scheme, mode, _, short = _resolve_system(cfg)
    masking = dataclasses.replace(masking or MaskingConfig(), scheme=scheme)
    kwargs = dict(max_seq_length=cfg.max_seq_length, mode=mode, seed=seed, short_seq_prob=short, masking=masking)
    corpus = data.TokenCorpus(corpus_dir)
    n_docs = corpus.num_docs
    min_docs = 2 if mode == "nsp" else 1  # NSP's random next segment comes from another document
    split = n_docs
    if cfg.max_eval_blocks:
        split = data.held_out_documents(corpus.doc_bounds, cfg.eval_fraction, min_docs, min_docs)
    train_set = data.PretrainDataset(corpus, tok, documents=(0, split), **kwargs)
    eval_set = None
    if split < n_docs:
        held_out = data.PretrainDataset(corpus, tok, documents=(split, n_docs), **kwargs)
        if len(held_out):
            eval_set = _Blocks(held_out, 0, min(len(held_out), cfg.max_eval_blocks), fixed_epoch=0)
    return train_set, eval_set


# loss_terms / target-count key of each head, and the metrics averaged over its targets
HEAD_METRICS = {"mlm": ("mlm_loss", "mlm_acc"), "sbo": ("sbo_loss", "sbo_acc"), "nsp": ("nsp_loss", "nsp_acc")}


def target_counts(batch: dict[str, Any], heads: tuple[str, ...] = ("mlm", "sbo", "nsp")) -> dict[str, int]:
    """Real targets of each of ``heads`` in a pre-training batch (contract 1's `count_targets`):
    `data.pretrain_target_counts`, restricted to the heads the model has."""
    from spanbert import data

    return {k: v for k, v in data.pretrain_target_counts(batch).items() if k in heads}


def make_eval_fn(eval_set, batch_size: int, collate, count_targets=None, precision: str = "auto"):
    """``evaluate(model, step)``: held-out MLM/SBO/NSP loss and accuracy, each averaged over its
    targets (a batch's mean weighs by its target count), not over batches.

    Called on every rank (contract 7): each rank predicts its share (`distributed.shard_range`), the
    sums are gathered, and every rank returns the same numbers.
    """
    count_targets = count_targets or target_counts

    def evaluate(model, step: int) -> dict[str, float]:
        share = list(distributed.shard_range(len(eval_set)))
        sums: dict[str, float] = {}
        weights: dict[str, int] = {}
        if share:
            subset = torch.utils.data.Subset(eval_set, share)
            device = next(model.parameters()).device
            batches = predict_batches(
                model, subset, batch_size, collate, device=device, precision=precision, disable_tqdm=True
            )
            for batch, out in batches:
                for head, n in count_targets(batch).items():
                    if n <= 0:
                        continue  # no targets: the model's mean is 0 or NaN and weighs nothing
                    for key in HEAD_METRICS.get(head, ()):
                        if key in out:
                            sums[key] = sums.get(key, 0.0) + float(out[key]) * n
                            weights[key] = weights.get(key, 0) + n
        total: dict[str, float] = {}
        count: dict[str, int] = {}
        for part_sums, part_weights in distributed.all_gather_objects((sums, weights)):  # rank order
            for k, v in part_sums.items():
                total[k] = total.get(k, 0.0) + v
                count[k] = count.get(k, 0) + part_weights[k]
        sums, weights = total, count
        results = {k: sums[k] / weights[k] for k in sorted(sums) if weights.get(k)}
        if results:
            eprint0(f"held-out at step {step}: " + " ".join(f"{k} {v:.4f}" for k, v in results.items()))
        return results

    return evaluate


def run_config_of(cfg: PretrainConfig, masking: MaskingConfig) -> dict[str, Any]:
    """The settings a resume must keep (contract 2): everything but the worker count. As JSON values
    (tuples become lists), so that it compares equal to its copy read back from a checkpoint."""
    config = {
        "PretrainConfig": {k: v for k, v in dataclasses.asdict(cfg).items() if k != "num_proc"},
        "MaskingConfig": dataclasses.asdict(masking),
    }
    return json.loads(json.dumps(config))


def pretrain(cfg: PretrainConfig, args: TrainingArguments, masking: MaskingConfig | None = None) -> Path:
    """Run a pre-training job end to end; returns the folder of the exported HF-format model.

    Every option and input is checked before any work; the corpus and tokenizer are prepared once
    (rank 0) and read from disk by every rank (`prepare_data`).
    """
    from spanbert.model import SpanBertForPreTraining
    from spanbert.tokenization import load_tokenizer

    cfg.__post_init__()  # a config edited after construction is checked again
    scheme, mode, sbo, _ = _resolve_system(cfg)
    masking = dataclasses.replace(masking or MaskingConfig(), scheme=scheme)
    check_masking(masking)
    if cfg.pad_to is not None and cfg.pad_to < cfg.max_seq_length:
        raise SpanBertError(f"--pad_to: found {cfg.pad_to}, expected at least --max_seq_length ({cfg.max_seq_length})")
    device = distributed.resolve_device(args.device)
    distributed.init_distributed(device)
    check_output_dir(args)  # contract 3: a previous run is refused before any work
    sources = check_sources(cfg)
    planned = sources.init_config or model_config(
        cfg.model, vocab_size=cfg.vocab_size, max_position_embeddings=max(512, cfg.max_seq_length)
    )
    if cfg.max_seq_length > planned.max_position_embeddings:
        raise SpanBertError(
            f"--max_seq_length: found {cfg.max_seq_length}, expected at most the model's "
            f"{planned.max_position_embeddings} positions ({cfg.init_from})"
        )
    if args.max_steps > 0:
        warning = plan_warning(planned, cfg, args, args.max_steps, sbo, device)
        if warning:
            eprint0(warning)

    corpus_dir, tok_dir = distributed.on_main(lambda: prepare_data(cfg, args, sources))
    tok = load_tokenizer(tok_dir)  # from disk on every rank: the file that is exported

    torch.manual_seed(args.seed)
    heads = ("mlm",) + (("sbo",) if sbo else ()) + (("nsp",) if mode == "nsp" else ())
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
    train_set, eval_set = build_datasets(cfg, corpus_dir, tok, args.seed, masking)
    if args.max_steps <= 0:  # the length of an epoch is known only now
        G = args.per_device_train_batch_size * args.gradient_accumulation_steps * distributed.world_size()
        steps = math.ceil(args.num_train_epochs * len(train_set) / G)
        warning = plan_warning(model.config, cfg, args, steps, sbo, device)
        if warning:
            eprint0(warning)
    collate = functools.partial(
        _collate, pad_id=tok.pad_id, max_predictions=cfg.max_predictions, pad_to=cfg.pad_to
    )
    count = functools.partial(target_counts, heads=heads)
    eval_fn = None
    if eval_set is not None:
        eval_fn = make_eval_fn(eval_set, args.per_device_eval_batch_size, collate, count, args.precision)
    print0(
        f"pre-training {cfg.system} ({scheme} masking, {'two segments + NSP' if mode == 'nsp' else 'single sequence'}"
        f"{' + SBO' if sbo else ''}), model {cfg.model if not cfg.init_from else cfg.init_from}: "
        f"{model.config.num_hidden_layers} layers x {model.config.hidden_size}, {len(train_set)} blocks of "
        f"<= {cfg.max_seq_length} tokens, {len(eval_set) if eval_set else 0} held out"
    )
    model.train()
    result = train(
        model, train_set, args, collate_fn=collate, eval_fn=eval_fn,
        count_targets=count, run_config=run_config_of(cfg, masking),
    )  # fmt: skip
    final = Path(args.output_dir) / cfg.output_name
    if result.global_step >= (args.max_steps if args.max_steps > 0 else 0):
        distributed.on_main(lambda: _export(model, tok, final, cfg, scheme, result.metrics))
    return final


def _collate(items, pad_id: int, max_predictions: int | None, pad_to: int | None):
    from spanbert import data

    return data.collate_pretrain(items, pad_id=pad_id, max_predictions=max_predictions, pad_to=pad_to)


def _export(model, tok, final: Path, cfg: PretrainConfig, scheme: str, metrics: dict[str, float]) -> None:
    from spanbert.utils import atomic_write

    model.save_pretrained(final, tokenizer=tok, extra={"system": cfg.system, "masking": scheme})
    with atomic_write(final / "train_metrics.json") as f:
        f.write(json.dumps(metrics, indent=2) + "\n")


def _parser(prog: str, defaults: dict[str, Any], cfg_defaults: dict[str, Any]) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Pre-train SpanBERT (span masking + span boundary objective, single sequences; Joshi et al. 2020) "
            "or one of the paper's baselines. Until you name a --corpus, a --model or --init-from, the quick "
            "start is in force: a tiny SpanBERT on the English reference text bundled with Python, on CPU, in "
            "a few minutes (its own defaults: tiny model, 128 tokens, 1200 steps of 16, lr 2e-3, output "
            "runs/spanbert-quickstart; any option below still changes them). Naming a corpus or a model "
            "switches to the paper's recipe, whose defaults are shown below."
        ),
    )
    p.add_argument(
        "--config",
        default=None,
        help="YAML file of options: flat, or in sections PretrainConfig:, MaskingConfig:, TrainingArguments:",
    )
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


SECTIONS = (PretrainConfig, MaskingConfig, TrainingArguments)


def quick_start_in_force(args: argparse.Namespace) -> bool:
    """True until the command line, a key=value override or the YAML file names a corpus, a model
    or --init-from (`LEAVES_QUICKSTART`); `spanbert pretrain --max_steps 100` is the quick start with
    100 steps."""
    from spanbert.config import parse_key_values

    named = {k for k in LEAVES_QUICKSTART if k in vars(args)}
    named |= set(parse_key_values(args.overrides)) & set(LEAVES_QUICKSTART)
    if args.config:
        named |= set(check_yaml(args.config, list(SECTIONS))["PretrainConfig"]) & set(LEAVES_QUICKSTART)
    return not named


def preset_line(quick: bool, cfg: PretrainConfig, args: TrainingArguments) -> str:
    """The first line `spanbert pretrain` prints: which preset is in force, with its size."""
    world = distributed.world_size()
    batch = args.per_device_train_batch_size * args.gradient_accumulation_steps * world
    length = f"{args.max_steps:,} steps" if args.max_steps > 0 else f"{args.num_train_epochs:g} epoch(s)"
    model = f"model from {cfg.init_from}" if cfg.init_from else f"{cfg.model} model"
    plan = f"{model}, {length} of {batch} x {cfg.max_seq_length} tokens, output {args.output_dir}"
    if quick:
        return (
            f"preset: quick start (tiny SpanBERT on the Python reference manual; {plan}); "
            "name a --corpus or a --model for the paper's recipe"
        )
    return f"preset: paper recipe (§4.2, Appendix A; {cfg.system}, {plan})"


def main(argv: list[str], prog: str = "spanbert pretrain") -> int:
    p = _parser(prog, PRETRAIN_DEFAULTS, {})
    args = p.parse_args(argv)
    check_unknown_overrides(args.overrides, list(SECTIONS))
    quick = quick_start_in_force(args)  # reads (and checks) the YAML file
    train_defaults = {**PRETRAIN_DEFAULTS, **(QUICKSTART if quick else {})}
    cfg_defaults = QUICKSTART_CONFIG if quick else {}
    build = functools.partial(
        dataclass_from_args, args=args, yaml_path=args.config, overrides=args.overrides, sections=list(SECTIONS)
    )
    cfg = build(PretrainConfig, defaults=cfg_defaults)
    targs = build(TrainingArguments, defaults=train_defaults)
    masking = build(MaskingConfig)
    print0(preset_line(quick, cfg, targs))
    final = pretrain(cfg, targs, masking)
    if final.exists():
        _, _, sbo, _ = _resolve_system(cfg)
        print0(f"\nsaved the model to {final} (HF layout: config.json, model.safetensors, tokenizer files)")
        if sbo:
            print0("next: fill a masked span with the MLM or the span boundary head:")
            print0(f'  spanbert fill --model {final} --text "The {{MASK*3}} is used to define a function." --head sbo')
        else:  # no span boundary head: --head sbo would be refused
            print0("next: fill masked tokens with the MLM head:")
            print0(f'  spanbert fill --model {final} --text "The {{MASK*3}} is used to define a function." --head mlm')
        print0(f"  or fine-tune it: spanbert finetune squad --model {final} --train_file ... --validation_file ...")
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
        print0(json.dumps(result, indent=2, ensure_ascii=False))
        return 0
    print0(result["text"])
    for pred in result["predictions"]:
        cands = ", ".join(f"{t} {pr:.2f}" for t, pr in pred["candidates"])
        print0(f"  position {pred['position']}: {cands}")
    return 0


__all__ = ["SYSTEMS", "PretrainConfig", "pretrain", "fill", "main", "fill_main"]
