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
| ltr | none (every token is a target) | single | left-to-right LM, causal attention | BERT §5.1 "LTR & No NSP" |
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import math
import os
import sys
import time
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from spanbert import _aliases, distributed, preprocess, tokenization, trained_inputs, vocab_match
from spanbert.batch_plan import token_batch_count
from spanbert.block_index import held_out_split
from spanbert.budget import TimeBudget, format_duration, parse_duration
from spanbert.cloze_config import CLOZE_SYSTEMS, ClozeConfig
from spanbert.collate import collate_pretrain
from spanbert.config import BertConfig
from spanbert.corpus import TokenCorpus, has_tokenizer, tokenizer_dir_of
from spanbert.distributed import eprint0, print0
from spanbert.dropout import seeded_build, set_dropout
from spanbert.errors import SpanBertError
from spanbert.families import (
    BERT_PRETRAINING,
    FAMILIES,
    Pretraining,
    bert_target_counts,
    family_of,
)
from spanbert.hub import resolve_model
from spanbert.masking import SCHEMES, MaskingConfig
from spanbert.microbatch import AUTO, planned_batch_size
from spanbert.pretrain_config import (
    QUICKSTART_CONFIG,
    RECIPES,
    RELEASED_MAX_TOKENS,
    SYSTEM_PRESETS,
    PretrainConfig,
    System,
    seq_length_stages,
    system_masking,
    system_of,
)
from spanbert.pretrain_plan import check_plan
from spanbert.runs import check_output_dir, claim_run_dir, find_resume_checkpoint
from spanbert.samplers import SAMPLERS, Cut, HeldOut, Sampler
from spanbert.static_masks import static_mask_sets
from spanbert.tokenization import load_tokenizer
from spanbert.trainer import predict_batches, train
from spanbert.training_args import TrainingArguments
from spanbert.utils import atomic_dir, atomic_write, input_paths

_SAMPLER_WORDS = {"single": "single-sequence blocks", "nsp": "two-segment blocks with NSP",
                  "causal": "left-to-right blocks", "cloze": "two-tower cloze blocks"}  # fmt: skip


def apply_batching(cfg: PretrainConfig, args: TrainingArguments, world: int) -> TrainingArguments:
    """``args`` with the batching of ``cfg.tokens_per_update`` for ``world`` processes.

    tokens_per_update > 0: micro-batches of ``max_tokens_per_batch`` tokens (4096 when 0) and the
    accumulation that brings processes x accumulation x budget to tokens_per_update (rounded to the
    nearest integer, at least 1; `batching_line` says when it is not exact). 0: ``args`` unchanged.
    """
    if not cfg.tokens_per_update:
        return args
    budget = args.max_tokens_per_batch or RELEASED_MAX_TOKENS
    accum = max(1, round(cfg.tokens_per_update / (budget * world)))
    return dataclasses.replace(args, max_tokens_per_batch=budget, gradient_accumulation_steps=accum)


def batching_line(cfg: PretrainConfig, args: TrainingArguments, world: int) -> str:
    """How an update is batched, in words (after `apply_batching`)."""
    accum = args.gradient_accumulation_steps
    if args.max_tokens_per_batch:
        total = args.max_tokens_per_batch * accum * world
        line = (
            f"batches of <= {args.max_tokens_per_batch:,} tokens x {accum} accumulation x {world} process(es) "
            f"= <= {total:,} tokens per update"
        )
        if cfg.tokens_per_update and total != cfg.tokens_per_update:
            line += f" (tokens_per_update {cfg.tokens_per_update:,} is not a multiple of the budget x processes)"
        return line
    b = args.per_device_train_batch_size
    if b == AUTO:  # the trainer's probe decides (spanbert.microbatch)
        return f"batches of auto (the largest that fits) sequences x {accum} accumulation x {world} process(es)"
    return f"batches of {b} sequences x {accum} accumulation x {world} process(es) = {b * accum * world} sequences per update"


def released_term_weights(counts: dict[str, int], totals: dict[str, float], world: int) -> dict[str, float]:
    """The released SpanBERT loss normalisation, as `train`'s ``term_weights``.

    fairseq's ``span_bert_loss`` (criterions/spanbert_loss.py) gives each micro-batch the loss
    sum CE(MLM) / n + sum CE(SBO) / (p + 1) (n MLM targets, p SBO targets; mlm_nsp_sbo_loss.py adds
    sum CE(NSP) / sentences) with sample size n, and its trainer (fairseq/trainer.py) multiplies the
    summed gradients by world / (n summed over the micro-batches and processes). Each micro-batch's
    mean losses are so weighted by 1 / (the step's MLM targets), the SBO one also by p / (p + 1):
    a gradient about (micro-batches per update / targets per update) of the paper's mean, which is
    why clipping at 1.0 hardly ever binds in the released run. Times ``world``: DDP averages.
    """
    n = totals.get("mlm", 0.0)
    if not n:
        return {}
    p = counts.get("sbo", 0)
    return {"mlm": world / n, "sbo": world * p / (p + 1) / n, "nsp": world / n}


def sbo_warmup(steps: int) -> Callable[[int], dict[str, float]] | None:
    """--sbo_warmup_steps as `train`'s ``term_schedule``: the SBO term of step s (1-based) weighs
    min(1, s / steps) of --sbo_weight; None (no schedule) for 0."""
    if steps <= 0:
        return None
    return lambda step: {"sbo": min(1.0, step / steps)}




@dataclass(frozen=True)
class Resolved:
    """A system resolved once, at the start of `pretrain`, and passed down: its family's pre-training
    row, its sampler, the masking scheme and NSP short-sequence probability in force."""

    system: System
    family: Pretraining
    sampler: Sampler
    scheme: str | None  # None: nothing is masked (ltr, the two-tower systems)
    short_seq_prob: float

    @property
    def causal(self) -> bool:
        return self.system.sampler == "causal"


def resolve(cfg: PretrainConfig) -> Resolved:
    """The family row, sampler, masking scheme and short-sequence probability of ``cfg``'s system."""
    system = system_of(cfg)
    family = FAMILIES[system.family].pretraining
    if family is None or system.sampler not in family.samplers:
        fits = [n for n, s in SYSTEM_PRESETS.items() if family is not None and s.sampler in family.samplers]
        raise SpanBertError(
            f"--system {cfg.system}: found a system of {_SAMPLER_WORDS[system.sampler]}, which the "
            f"{system.family} family does not pre-train on; expected one of: {', '.join(fits)}"
        )
    sampler = SAMPLERS[system.sampler]
    # a system that masks nothing reads the BERT default's scheme where its family keeps a MaskingConfig
    # (the run's settings: ltr's checkpoints record subword), and none otherwise
    scheme = cfg.masking or system.masking or ("subword" if family.masked else None)
    short = system.short_seq_prob if cfg.short_seq_prob is None else cfg.short_seq_prob
    return Resolved(system, family, sampler, scheme, short)


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
    if m.random_token not in ("unigram", "uniform"):
        raise SpanBertError(f"--random_token: found {m.random_token!r}, expected unigram or uniform")


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
    init_config: BertConfig | None  # the --init_from checkpoint's architecture
    init_from: str | None = None  # the --init_from folder, resolved once (a hub name: its snapshot)


def check_sources(cfg: PretrainConfig, vocab_size_given: bool = False) -> _Sources:
    """Check the corpus, tokenizer and checkpoint paths (and a preprocessed corpus's files) exist and
    are readable, and that they agree (the vocabulary behind a prepared corpus's ids, a --vocab_size the
    user gave: ``vocab_size_given``); nothing is written. A hub name for --init_from is resolved here, once."""
    corpus = Path(cfg.corpus) if cfg.corpus else None
    preprocessed = corpus is not None and _looks_preprocessed(corpus)
    tokenizer = cfg.tokenizer
    if tokenizer is not None and not has_tokenizer(tokenizer):
        raise SpanBertError(
            f"{tokenizer}: found no tokenizer.json or vocab.txt, expected a tokenizer folder (--tokenizer)"
        )
    init_config = init_from = None
    if cfg.init_from:
        init_from = str(resolve_model(cfg.init_from))  # a hub name: its snapshot holds the vocabulary
        family = system_of(cfg).family
        found = family_of(init_from)
        if found != family:
            raise SpanBertError(
                f"--init_from: found a {found} checkpoint ({init_from}), expected a {family} one for --system "
                f"{cfg.system}{' --family ' + cfg.family if cfg.family else ''}"
            )
        # config.json checked, weights present; no tensor read
        init_config = FAMILIES[family].pretraining.init_config(init_from)
        if tokenizer is None and has_tokenizer(init_from):
            tokenizer = init_from
    option = "--tokenizer" if cfg.tokenizer else "--init_from"
    if preprocessed:
        corpus_data = TokenCorpus(corpus)  # checks meta.json and every array's size
        counts = corpus_data.unigram_counts()
        if tokenizer is None:
            tok_dir = tokenizer_dir_of(corpus)
            if tok_dir is None:
                raise SpanBertError(
                    f"{corpus / 'tokenizer'}: not found, expected the corpus's tokenizer (or pass --tokenizer)"
                )
            tokenizer, option = str(tok_dir), "--corpus"
        check_corpus_vocabulary(corpus_data, counts, tokenizer, option)
    elif corpus is not None:
        files = tokenization.corpus_files([corpus])  # exists, and a folder holds text files
        if tokenizer is not None:  # a vocabulary that does not cover the text is refused before any work
            tok = load_tokenizer(tokenizer)
            unk, total = vocab_match.unknown_share(tok, vocab_match.text_sample(files))
            warning = vocab_match.check_coverage(unk, total, option, str(tokenizer), f"a sample of {corpus}")
            if warning:
                eprint0(warning)
    if vocab_size_given and tokenizer is not None:
        size = load_tokenizer(tokenizer).vocab_size
        if size != cfg.vocab_size:
            raise SpanBertError(
                f"--vocab_size: found {cfg.vocab_size:,}, expected the {size:,} ids of {tokenizer} ({option}), the "
                f"vocabulary this run uses (--vocab_size sizes a vocabulary trained from text): drop --vocab_size, "
                f"or train a {cfg.vocab_size:,}-token vocabulary from the text (pass the text as --corpus)"
            )
    return _Sources(corpus, preprocessed, tokenizer, init_config, init_from)


def check_corpus_vocabulary(corpus: TokenCorpus, counts: np.ndarray, tokenizer: str, option: str) -> None:
    """The vocabulary ``tokenizer`` (given with ``option``) must be the one the ids of the prepared ``corpus``
    were made with (issue 58.1): the fingerprint recorded in its meta.json, or, for a corpus prepared before
    fingerprints, its own ``tokenizer/`` compared id by id; a casing that differs is a warning. A vocabulary
    under which most of the corpus is ``[UNK]`` (``counts``: its unigram counts) is refused too."""
    tok = load_tokenizer(tokenizer)
    own_dir = tokenizer_dir_of(corpus.path)
    recorded = corpus.meta.get("vocab_fingerprint")
    ours = own_dir is not None and os.path.realpath(own_dir) == os.path.realpath(tokenizer)
    if not ours and recorded != vocab_match.tokenizer_fingerprint(tok):
        why = "its token ids were made with it: drop the option to use its tokenizer/, or preprocess the text again"
        if own_dir is not None:
            own = load_tokenizer(own_dir)
            vocab_match.check_same_ids(own.get_vocab(), tok.get_vocab(), option, tokenizer, str(own_dir), why)
            warning = vocab_match.casing_warning(tok, f"{tokenizer} ({option})", own, f"the corpus {corpus.path}")
            if warning:
                eprint0(warning)
        elif recorded:
            raise SpanBertError(
                f"{option}: found {tokenizer} with the vocabulary {vocab_match.tokenizer_fingerprint(tok)}, expected "
                f"the vocabulary {recorded} that {corpus.path}/meta.json records ({why})"
            )
    if tok.vocab_size < corpus.vocab_size:
        raise SpanBertError(
            f"{option}: found {tokenizer} with {tok.vocab_size:,} ids, expected the {corpus.vocab_size:,} ids of the "
            f"vocabulary {corpus.path} was prepared with (use the corpus's own tokenizer/)"
        )
    specials = [i for i in tok.special_ids().tolist() if i != tok.unk_id and i < len(counts)]
    total = int(counts.sum()) - int(counts[specials].sum())
    warning = vocab_match.check_coverage(int(counts[tok.unk_id]), total, option, tokenizer, f"the corpus {corpus.path}")
    if warning:
        eprint0(warning)


def check_init_vocabulary(init_from: str, rows: int, tokenizer: str | None, vocab_size: int) -> None:
    """The vocabulary a run continuing ``init_from`` (its embedding table: ``rows`` ids) tokenizes with must be
    the checkpoint's own: each id is a row the checkpoint learned for that token. Refused before any work:
    no tokenizer at all (the run would train a new ``vocab_size``-token vocabulary, whose ids name other
    tokens: the rows would be trained under the wrong words, whatever the sizes), a tokenizer with more ids
    than the table has rows, and a tokenizer (--tokenizer, a preprocessed corpus's) that gives a token
    another id than the checkpoint's own tokenizer does. A tokenizer that extends the checkpoint's with new
    ids below ``rows`` (padded tables, ModernBERT's) is fine."""
    if tokenizer is None:
        raise SpanBertError(
            f"--init_from: found {init_from} without a tokenizer, and this run would train a new {vocab_size}-token "
            f"vocabulary whose ids name other tokens than the checkpoint's {rows} embedding rows; expected the "
            f"checkpoint's own vocabulary: pass it with --tokenizer (a folder with its vocab.txt or tokenizer.json)"
        )
    if Path(tokenizer).resolve() == Path(init_from).resolve():
        return
    tok = load_tokenizer(tokenizer)
    if tok.vocab_size > rows:
        raise SpanBertError(
            f"--init_from: found the tokenizer {tokenizer} with {tok.vocab_size} ids, expected at most the "
            f"{rows} embedding rows of {init_from} (use the checkpoint's own tokenizer)"
        )
    if not has_tokenizer(init_from):
        return  # the checkpoint names no tokens: its size is all that can be checked
    own = load_tokenizer(init_from).get_vocab()
    ids = tok.get_vocab()
    moved = sorted((i, t) for t, i in own.items() if ids.get(t) != i)
    if moved:
        i, token = moved[0]
        now = ids.get(token)
        raise SpanBertError(
            f"--init_from: found the tokenizer {tokenizer} giving {token!r} "
            f"{'no id' if now is None else f'id {now}'} where {init_from}'s own tokenizer gives id {i} "
            f"({len(moved)} token(s) differ), expected the checkpoint's vocabulary (its rows are learned per id): "
            f"use the checkpoint's own tokenizer"
        )


def corpus_or_builtin(sources: _Sources, tmp: Path, work_dir: Path) -> list:
    """The text files to prepare: the user's corpus, or the bundled Python reference manual written
    into the folder being prepared (``tmp``, renamed to ``work_dir`` when it is complete)."""

    if sources.corpus is not None:
        return [sources.corpus]
    files = [preprocess.builtin_corpus(tmp / "corpus.txt")]
    print0(f"corpus: the Python reference manual (pydoc topics), written to {work_dir / 'corpus.txt'}")
    return files


def reuse_prepared(work_dir: Path, spec: dict[str, Any], args: TrainingArguments) -> tuple[str, str] | None:
    """(corpus, tokenizer) folders of ``work_dir`` when a resumed run prepared them from ``spec`` (its
    `prepared.json`); None when there is nothing to reuse; an error when they were made otherwise."""
    marker = work_dir / "prepared.json"
    if not (args.resume and marker.is_file()):
        return None
    try:
        before = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        before = None
    if before != spec:
        raise SpanBertError(
            f"{marker}: found the run's data prepared from {before}, expected {spec}; resume with the run's "
            "own --corpus/--tokenizer/--vocab_size/--model, or start over with --overwrite_output_dir"
        )
    print0(f"corpus and tokenizer: reusing {work_dir} (prepared by the run being resumed)")
    return str(work_dir / "preprocessed"), str(work_dir / "tokenizer")


def plan_model(cfg: PretrainConfig, run: Resolved, init_config: Any = None, overrides: dict[str, Any] | None = None) -> Any:
    """The model config of ``cfg``'s system before the vocabulary exists (the family's `config`)."""
    return run.family.config(
        cfg.model, vocab_size=cfg.vocab_size, max_seq_length=cfg.max_seq_length, objectives=run.system.objectives,
        causal=run.causal, init_config=init_config, overrides=overrides,
    )  # fmt: skip


def prepare_data(
    cfg: PretrainConfig, args: TrainingArguments, sources: _Sources, run: Resolved | None = None, planned: Any = None
) -> tuple[str, str]:
    """(preprocessed corpus folder, tokenizer folder) of the run, preparing them if needed.

    Runs on one process (rank 0, `distributed.on_main`); every rank then loads the tokenizer from
    the returned folder, so the ids trained on, every resume and the exported vocab.txt are the same
    file. A raw-text corpus and the family's vocabulary (`Pretraining.vocabulary`) are prepared once
    into ``output_dir/data`` (atomically: a run killed mid-way leaves no `data/`, and the next run
    prepares it again); a resumed run reuses them and never retrains the tokenizer.
    """
    if sources.preprocessed:
        return str(sources.corpus), str(sources.tokenizer)
    run = run or resolve(cfg)
    planned = planned if planned is not None else plan_model(cfg, run, sources.init_config)
    work_dir = Path(args.output_dir) / "data"
    spec = dict(corpus=cfg.corpus, tokenizer=sources.tokenizer, vocab_size=cfg.vocab_size)
    spec.update(run.family.data_spec(planned, run.scheme))
    reused = reuse_prepared(work_dir, spec, args)
    if reused is not None:
        return reused
    created = [d for d in (work_dir.parent, *work_dir.parent.parents) if not d.exists()]
    try:
        _prepare_into(work_dir, cfg.vocab_size, cfg.num_proc, args.disable_tqdm, sources, spec, run.family, planned)
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
    work_dir: Path, vocab_size: int, num_proc: int, quiet: bool, sources: _Sources, spec: dict, family: Pretraining,
    planned: Any,
) -> None:  # fmt: skip
    with atomic_dir(work_dir) as tmp:
        files = corpus_or_builtin(sources, tmp, work_dir)
        if sources.tokenizer:
            family.frame(load_tokenizer(sources.tokenizer)).save(tmp / "tokenizer")
        else:
            try:
                family.vocabulary(files, vocab_size, tmp / "tokenizer", planned)
            except SpanBertError as e:
                if any(str(f) in str(e) for f in files):
                    raise
                raise SpanBertError(f"{', '.join(map(str, files))}: {e}") from None  # name the corpus
        # preprocess with the tokenizer as saved, the one every rank will load
        preprocess.preprocess(
            files, load_tokenizer(tmp / "tokenizer"), tmp / "preprocessed", num_workers=num_proc,
            candidates=spec.get("candidates"), progress=not quiet,
        )  # fmt: skip
        with atomic_write(tmp / "prepared.json") as f:
            json.dump(spec, f, indent=2)


def uses_static_masks(cfg: PretrainConfig, corpus: Any) -> bool:
    """Whether the run reads the corpus's stored masks (`PretrainConfig.static_masks`; ``corpus`` a
    `TokenCorpus`). auto: when the corpus has some and the system masks (not ltr, not the
    two-tower systems); on: always (an error for a system that masks nothing, and later for a corpus
    without them)."""

    if cfg.static_masks == "off":
        return False
    if not SAMPLERS[SYSTEM_PRESETS[cfg.system].sampler].masks:
        if cfg.static_masks == "on":
            raise SpanBertError(
                f"--static_masks on: found --system {cfg.system}, expected a masked-LM system (the left-to-right "
                "LM masks nothing)"
            )
        return False
    return cfg.static_masks == "on" or bool(static_mask_sets(corpus))


def build_datasets(
    cfg: PretrainConfig, corpus_dir: Path | str, tok: Any, seed: int, masking: MaskingConfig | None = None,
    run: Resolved | None = None,
):  # fmt: skip
    """(training set, held-out set or None) of the system's sampler, split by whole documents
    (`held_out_documents`).

    Each set draws blocks, NSP pairs and NSP "random next" segments from its own documents only, so
    no held-out text is trained on. The held-out set keeps epoch 0's masks: the same examples at
    every evaluation. With static masks (`uses_static_masks`) the training set reads the examples and
    masks stored in the corpus (`PretrainDataset(static=True)`, which refuses a set made with
    other settings); the held-out set is masked as always. ``tok`` is the family's framed tokenizer.
    """
    run = run or resolve(cfg)
    if run.family.masked:
        masking = dataclasses.replace(masking or MaskingConfig(), scheme=run.scheme)
    cut = Cut(cfg.max_seq_length, cfg.block_packing, seed, masking, run.short_seq_prob)
    corpus = TokenCorpus(corpus_dir)
    n_docs = corpus.num_docs
    split = n_docs
    if cfg.max_eval_blocks:
        min_docs = run.sampler.min_docs  # NSP's random next segment comes from another document
        split = held_out_split(corpus, cfg.eval_fraction, min_docs, min_docs)  # = held_out_documents, from the last shards
    train_set = run.sampler.build(corpus, tok, (0, split), dataclasses.replace(cut, static=uses_static_masks(cfg, corpus)))
    eval_set = None
    if split < n_docs:
        held_out = run.sampler.build(corpus, tok, (split, n_docs), cut)
        if len(held_out):
            eval_set = HeldOut(held_out, 0, min(len(held_out), cfg.max_eval_blocks), fixed_epoch=0)
    return train_set, eval_set


def make_eval_fn(eval_set, batch_size: int, collate, count_targets=None, precision: str = "auto", metrics=None):
    """``evaluate(model, step)``: held-out loss and accuracy of each loss term (``metrics``: term ->
    metric names, BERT's heads by default), each averaged over its targets (a batch's mean weighs by
    its target count), not over batches.

    Called on every rank (contract 7): each rank predicts its share (`distributed.shard_range`), the
    sums are gathered, and every rank returns the same numbers.
    """
    count_targets = count_targets or bert_target_counts
    metrics = metrics or BERT_PRETRAINING.metrics

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
                    for key in metrics.get(head, ()):
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


@dataclasses.dataclass
class PretrainResult:
    """What a pre-training run returns (`pretrain`; from Python, `spanbert.pretrain(...)`)."""

    model_dir: Path
    """The exported model folder (``output_dir/final``): a HuggingFace BERT layout (or the family's),
    with its tokenizer; give it to ``spanbert.Encoder.from_pretrained`` or ``tasks.finetune(model=...)``.
    Absent when the run stopped before its end (``--stop_at_step``)."""
    output_dir: Path
    """The run folder: checkpoints, logs, the run's settings."""
    metrics: dict[str, float]
    """The exported model's ``train_metrics.json`` (the last training losses, the held-out evaluation)."""
    held_out_blocks: int = 0
    """The held-out blocks each evaluation scores (``max_eval_blocks`` of the held-out documents' blocks;
    0: none, or no training)."""


def pretrain(
    cfg: PretrainConfig, args: TrainingArguments, masking: MaskingConfig | None = None,
    model_overrides: dict[str, Any] | None = None, vocab_size_given: bool | None = None,
) -> PretrainResult:  # fmt: skip
    """Run a pre-training job end to end, the same steps for every system; returns the exported model's
    folder, its metrics and the size of the held-out evaluation (`PretrainResult`).

    1. resolve the system once (`resolve`: family row, sampler, masking scheme) and check every option
       and input before any work (the family's `check`, the plan's cost);
    2. prepare the corpus and the family's vocabulary once (rank 0, `prepare_data`), read from disk by
       every rank;
    3. build the family's model (`Pretraining.build`) and cut the blocks with the system's sampler
       (`build_datasets`);
    4. train with the one loop (`trainer.train`), one call per stage of a length schedule;
    5. export ``output_dir/<output_name>`` atomically, with the family's config.json keys.

    ``model_overrides`` sets the family's model config fields directly (tests: the two-tower's dropout 0).
    ``vocab_size_given``: whether the user set ``vocab_size`` (None: when it is neither the field's default
    nor the quick start's), refused when a tokenizer or a prepared corpus decides another size.
    """
    started = time.perf_counter()  # a --max_time budget counts from here, data preparation included
    cfg.__post_init__()  # a config edited after construction is checked again
    run = resolve(cfg)
    family, system = run.family, run.system
    checks = dict(
        system=cfg.system, masking=cfg.masking, init_from=cfg.init_from, causal=run.causal,
        max_seq_length=cfg.max_seq_length, max_predictions=cfg.max_predictions,
    )  # fmt: skip
    family.check(None, **checks)  # what the options alone decide (None: no model config yet)
    if cfg.recipe == "released" and not (args.decay_all_parameters and args.lr_scheduler_type == "polynomial"):
        eprint0(
            "note: --recipe released sets only the loss normalisation here; the command line also sets "
            f"{RECIPES['released']} (spanbert.pretrain.RECIPES)"
        )
    if family.masked:
        masking = dataclasses.replace(masking or MaskingConfig(**system_masking(system)), scheme=run.scheme)
        check_masking(masking)
    else:
        masking = None  # the family masks nothing
    if cfg.pad_to is not None and cfg.pad_to < cfg.max_seq_length:
        raise SpanBertError(f"--pad_to: found {cfg.pad_to}, expected at least --max_seq_length ({cfg.max_seq_length})")
    if cfg.seq_length_schedule and args.max_steps <= 0:
        raise SpanBertError("--seq_length_schedule: found no --max_steps, expected one (the shares are of the steps)")
    stages = seq_length_stages(cfg.seq_length_schedule, cfg.max_seq_length, args.max_steps)
    budget = TimeBudget(parse_duration(cfg.max_time), cfg.max_time, started) if cfg.max_time else None
    device = distributed.resolve_device(args.device)
    distributed.init_distributed(device)
    args = apply_batching(cfg, args, distributed.world_size())  # tokens_per_update -> accumulation
    check_output_dir(args, input_paths(cfg, ("corpus", "tokenizer", "init_from")))  # contract 3, before any work
    # the folder is held (lock and manifest) from here to the export: data/, checkpoints, final/
    with claim_run_dir(args.output_dir, "spanbert pretrain"):
        if vocab_size_given is None:  # the command line checks a --vocab_size it was given (`main`)
            vocab_size_given = cfg.vocab_size not in (PretrainConfig.vocab_size, QUICKSTART_CONFIG["vocab_size"])
        sources = check_sources(cfg, vocab_size_given)
        planned = plan_model(cfg, run, sources.init_config, model_overrides)
        family.check(planned, **checks)  # and what needs the planned model (its positions, causal or not)
        if sources.init_from is not None:  # the vocabulary the run tokenizes with names the checkpoint's rows
            check_init_vocabulary(sources.init_from, sources.init_config.vocab_size, sources.tokenizer, cfg.vocab_size)
        args = family.training_args(planned, args)
        sbo = "sbo" in system.objectives
        if args.max_steps > 0 and not cfg.random_init:  # before the vocabulary, the corpus and any file (an epoch's length is known later)
            warning = check_plan(planned, cfg, args, args.max_steps, sbo, device)
            if warning:
                eprint0(warning)

        # rank 0 prepares, the others poll the store: preparing a large raw-text corpus may outlast the
        # process group's timeout, which a wait in a collective would not (distributed.on_main_long)
        prepare = lambda: prepare_data(cfg, args, sources, run, planned)  # noqa: E731
        corpus_dir, tok_dir = distributed.on_main_long(prepare, key="prepare_data")
        tok = family.frame(load_tokenizer(tok_dir))  # from disk on every rank: the file that is exported

        with seeded_build(args.seed, distributed.rank()):  # the same weights on every rank, then a dropout stream per rank
            # --random_init with --init_from M: M's architecture and vocabulary, none of its weights (the
            # untrained twin a calibration compares M with)
            model = family.build(
                planned, tok, init_from=None if cfg.random_init else sources.init_from, objectives=system.objectives,
                mlm_weight=cfg.mlm_weight, sbo_weight=cfg.sbo_weight,
            )  # fmt: skip
        if cfg.random_init:
            final = Path(args.output_dir) / cfg.output_name
            extra = {**family.export_extra(cfg.system, None if run.causal else run.scheme), "random_init": True}
            distributed.on_main(lambda: export(model, tok, final, extra, {}))
            print0(f"no pre-training (--random_init): the freshly initialised model ({family.describe(model)}, seed {args.seed}) is in {final}")
            return PretrainResult(final, Path(args.output_dir), {})
        if cfg.dropout is not None:
            set_dropout(model, cfg.dropout)  # pre-training only: the exported config keeps the preset's rate
        train_set, eval_set = build_datasets(cfg, corpus_dir, tok, args.seed, masking, run)
        run_config = json.loads(json.dumps(family.run_config(
            dataclasses.asdict(cfg), masking.settings() if masking else None, model.config
        )))  # fmt: skip
        static = getattr(train_set, "static", None)
        if static is not None:
            # which stored masks the run reads: a resume on a corpus re-made with other copies is refused
            run_config["StaticMasks"] = {"dupe_factor": static["dupe_factor"], "seed": static["seed"]}
        if args.max_steps <= 0 and budget is None:  # the length of an epoch is known only now
            if args.max_tokens_per_batch:  # an epoch is the same number of token batches every epoch
                units = token_batch_count(train_set.lengths(), args.max_tokens_per_batch)
                G = args.gradient_accumulation_steps * distributed.world_size()
            else:
                G = planned_batch_size(args.per_device_train_batch_size) * args.gradient_accumulation_steps * distributed.world_size()
                units = len(train_set)
            steps = math.ceil(args.num_train_epochs * units / G)
            warning = check_plan(model.config, cfg, args, steps, sbo, device)
            if warning:
                eprint0(warning)
        collate = functools.partial(
            _collate, pad_id=tok.pad_id, max_predictions=cfg.max_predictions, pad_to=cfg.pad_to, collate=run.sampler.collate
        )
        count = family.count_targets(model, system.objectives)

        def evaluation(held_out):
            if held_out is None:
                return None
            return make_eval_fn(held_out, args.per_device_eval_batch_size, collate, count, args.precision, family.metrics)

        eval_fn = evaluation(eval_set)
        print0(
            f"pre-training {cfg.system} ({_objective_line(run)}), model {cfg.init_from or cfg.model}: "
            f"{family.describe(model)}, {len(train_set)} blocks of <= {cfg.max_seq_length} tokens, "
            f"{len(eval_set) if eval_set else 0} held out"
        )
        print0(f"{batching_line(cfg, args, distributed.world_size())}; {cfg.recipe} optimisation")
        if static is not None:
            print0(
                f"static masks: {static['dupe_factor']} masked copies made by spanbert preprocess (seed {static['seed']}, "
                f"{cfg.static_masks}); epoch e reads copy e mod {static['dupe_factor']}"
            )
        model.train()
        # Appendix A.2's length schedule: one train() call per stage, all under this run's schedule of
        # max_steps; an earlier stage stops at its switch step with a checkpoint (--stop_at_step) and the
        # next resumes from it, so a straight run and a run killed and resumed anywhere take the same path
        # (model, optimizer, schedule and RNG states all pass through the switch checkpoint).
        resumed = distributed.on_main(lambda: _resume_step(args.output_dir)) if args.resume and len(stages) > 1 else 0
        user_stop = args.stop_at_step if args.stop_at_step > 0 else args.max_steps
        began, begin = False, 0
        for i, (length, end) in enumerate(stages):
            last = i == len(stages) - 1
            if not last and resumed >= end:
                begin = end
                continue  # resumed after this stage's switch
            stage_set, stage_eval = train_set, eval_fn  # the final length's, built above
            if length != cfg.max_seq_length:
                stage_cfg = dataclasses.replace(cfg, max_seq_length=length, seq_length_schedule=None)
                stage_set, held_out = build_datasets(stage_cfg, corpus_dir, tok, args.seed, masking, run)
                stage_eval = evaluation(held_out)
            if len(stages) > 1:
                print0(f"sequence length {length} for steps {begin + 1}-{end} ({len(stage_set)} blocks)")
            stage_args = args if len(stages) == 1 else dataclasses.replace(
                args,
                stop_at_step=args.stop_at_step if last else min(end, user_stop),
                resume=args.resume or began,
                overwrite_output_dir=args.overwrite_output_dir and not began,  # never the switch checkpoint
            )
            result = train(
                model, stage_set, stage_args, collate_fn=collate, eval_fn=stage_eval,
                count_targets=count, run_config=run_config,
                term_weights=released_term_weights if cfg.recipe == "released" else None,
                term_schedule=sbo_warmup(cfg.sbo_warmup_steps), cost_warning=False,
                time_budget=budget,
            )  # fmt: skip
            began, begin = True, end
            if result.global_step < end:
                break  # the user's --stop_at_step
        final = Path(args.output_dir) / cfg.output_name
        metrics: dict[str, float] = {}
        if result.global_step >= (args.max_steps if args.max_steps > 0 else 0) and result.global_step >= result.total_steps:
            metrics = dict(result.metrics)
            extra = family.export_extra(cfg.system, None if run.causal else run.scheme)
            # what fine-tuning may rely on: the positions of the longest block, and type 1 only from two segments
            extra |= trained_inputs.record(max(length for length, _ in stages), 2 if system.sampler == "nsp" else 1)
            distributed.on_main(lambda: export(model, tok, final, extra, result.metrics))
            if budget is not None:
                print0(budget_end_line(budget, args.resume))
        return PretrainResult(final, Path(args.output_dir), metrics, len(eval_set) if eval_set else 0)


def budget_end_line(budget: TimeBudget, resumed: bool) -> str:
    """The last line of a --max_time run: what it took against the budget (a resumed run: its processes
    together, each up to its last checkpoint), how its plan moved, and how to rerun its steps."""
    took = budget.elapsed()
    off = took - budget.seconds
    line = (f"time budget {budget.text}: the run took {format_duration(took)}"
            + (" (its processes together)" if resumed else "")
            + f", {format_duration(abs(off))} ({abs(off) / budget.seconds:.1%}) {'over' if off > 0 else 'under'} it")  # fmt: skip
    planned = budget.plans[1:]  # the first is the provisional one, before the speed was measured
    if not planned:
        return line
    last = planned[-1]
    if len(planned) == 1:
        return line + f"; to rerun exactly these steps: --max_steps {last.total} --warmup_steps {last.warmup}"
    moves = " -> ".join(f"{p.total:,}" for p in planned)
    return (line + f"; the plan moved {len(planned) - 1} time(s) with the speed ({moves} steps, each from the rate "
            f"reached: the plans are in trainer_state.json); --max_steps {last.total} --warmup_steps {last.warmup} "
            "trains as many steps on the last plan's schedule")  # fmt: skip


def _objective_line(run: Resolved) -> str:
    """What the system trains, in words: its objective, its sequences and heads."""
    s = run.system
    if not run.family.masked:
        return "+".join(s.objectives) + ", nothing masked"
    objective = "left-to-right LM, every token" if run.causal else f"{run.scheme} masking"
    sbo = " + SBO" if "sbo" in s.objectives else ""
    return f"{objective}, {'two segments + NSP' if s.sampler == 'nsp' else 'single sequence'}{sbo}"


def _resume_step(output_dir: str) -> int:
    """The step of the checkpoint `--resume` will continue from."""
    ckpt, _ = find_resume_checkpoint(output_dir)
    return int(ckpt.name.rsplit("-", 1)[-1])


def _collate(items, pad_id: int, max_predictions: int | None, pad_to: int | None, collate: Callable = collate_pretrain):
    """The run's batches: the sampler's collate with the run's padding (one module-level function, so a
    test can watch every batch)."""
    return collate(items, pad_id=pad_id, max_predictions=max_predictions, pad_to=pad_to)


def export(model: nn.Module, tok: Any, final: Path, extra: dict[str, Any], metrics: dict[str, float]) -> None:
    """Write the pre-trained model (any family's `save_pretrained`) with its tokenizer and training
    metrics into ``final``: written beside it and swapped in whole, so a kill leaves the old export or
    the new one, never new weights beside an old config.json and old metrics."""
    with atomic_dir(final) as tmp:
        model.save_pretrained(tmp, tokenizer=tok, extra=extra)
        (tmp / "train_metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")


# ---------------------------------------------------------------------------------------------
# The earlier two-tower entry points: the one pipeline above, kept under their names


def pretrain_cloze(cfg: Any, args: Any, masking: Any = None, model_overrides: dict[str, Any] | None = None) -> PretrainResult:
    """`pretrain` for --system cloze | bilm | cloze-bilm (kept for callers of the earlier API)."""
    cfg.__post_init__()
    if cfg.system not in CLOZE_SYSTEMS:
        raise SpanBertError(f"--system: found {cfg.system!r}, expected one of: {', '.join(CLOZE_SYSTEMS)}")
    return pretrain(cfg, args, masking, model_overrides)


def build_cloze_datasets(cfg: Any, corpus_dir: str | Path, model_cfg: ClozeConfig):
    """(training blocks, held-out blocks or None) of a two-tower system (`build_datasets`)."""
    class _Ids:  # the markers' ids, as the framed tokenizer gives them
        def token_to_id(self, t: str) -> int:
            return {"<s>": model_cfg.bos_id, "</s>": model_cfg.eos_id}[t]

    return build_datasets(cfg, corpus_dir, _Ids(), 0)


class _CallableModule(types.ModuleType):
    """`spanbert.pretrain` is this module and, called, the Python entry of pre-training
    (``spanbert.pretrain(corpus=..., system=...)``: `spanbert.pretrain_command.pretrain_from_keywords`, the
    command's presets and checks; the job does not import its command, so the call reaches it on use)."""

    def __call__(self, **options: Any) -> Any:
        return importlib.import_module("spanbert.pretrain_command").pretrain_from_keywords(**options)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["PretrainResult", "uses_static_masks", "pretrain"]

__getattr__ = _aliases.getter(__name__)
