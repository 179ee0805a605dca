"""The data of a pre-training run: what it reads, checked before any work, and what it trains on.

- `resolve`: a system's family row, sampler, masking scheme and NSP short-sequence probability, resolved
  once at the start of `spanbert.pretrain.pretrain` and passed down (`Resolved`);
- `check_sources`: the corpus, tokenizer and ``--init_from`` checkpoint exist and agree (the vocabulary
  behind a prepared corpus's ids, `check_corpus_vocabulary`; a continued checkpoint's, `check_init_vocabulary`);
- `prepare_data`: a raw-text corpus and the family's vocabulary prepared once into the run's folder (rank 0,
  atomically), or reused when the run resumes;
- `build_datasets`: the training and held-out blocks of the system's sampler, split by whole documents.

The job itself (the model built, trained, evaluated and exported) is `spanbert.pretrain`; the command
line and its presets `spanbert.pretrain_command`; the options `spanbert.pretrain_config`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spanbert import preprocess, tokenization, vocab_match
from spanbert.block_index import held_out_split
from spanbert.cloze_config import ClozeConfig
from spanbert.config import BertConfig
from spanbert.corpus import TokenCorpus, has_tokenizer, tokenizer_dir_of
from spanbert.distributed import eprint0, print0
from spanbert.errors import SpanBertError
from spanbert.families import FAMILIES, Pretraining, family_of
from spanbert.hub import resolve_model
from spanbert.masking import MaskingConfig
from spanbert.pretrain_config import SYSTEM_PRESETS, PretrainConfig, System, system_of
from spanbert.samplers import SAMPLERS, Cut, HeldOut, Sampler
from spanbert.static_masks import static_mask_sets
from spanbert.tokenization import load_tokenizer
from spanbert.training_args import TrainingArguments
from spanbert.utils import atomic_dir, atomic_write

_SAMPLER_WORDS = {"single": "single-sequence blocks", "nsp": "two-segment blocks with NSP",
                  "causal": "left-to-right blocks", "cloze": "two-tower cloze blocks"}  # fmt: skip


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


def looks_preprocessed(path: Path) -> bool:
    # meta.json marks a `spanbert preprocess` folder even when it is damaged: such a folder is an
    # error naming the file, never read as text (which would train on its tokenizer's vocab.txt).
    return path.is_dir() and (path / "meta.json").exists()


@dataclass
class Sources:
    """What `pretrain` reads, checked before any work."""

    corpus: Path | None  # None: the bundled corpus
    preprocessed: bool
    tokenizer: str | None  # a tokenizer folder to use instead of training one
    init_config: BertConfig | None  # the --init_from checkpoint's architecture
    init_from: str | None = None  # the --init_from folder, resolved once (a hub name: its snapshot)


def check_sources(cfg: PretrainConfig, vocab_size_given: bool = False) -> Sources:
    """Check the corpus, tokenizer and checkpoint paths (and a preprocessed corpus's files) exist and
    are readable, and that they agree (the vocabulary behind a prepared corpus's ids, a --vocab_size the
    user gave: ``vocab_size_given``); nothing is written. A hub name for --init_from is resolved here, once."""
    corpus = Path(cfg.corpus) if cfg.corpus else None
    preprocessed = corpus is not None and looks_preprocessed(corpus)
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
    return Sources(corpus, preprocessed, tokenizer, init_config, init_from)


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


def corpus_or_builtin(sources: Sources, tmp: Path, work_dir: Path) -> list:
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
    cfg: PretrainConfig, args: TrainingArguments, sources: Sources, run: Resolved | None = None, planned: Any = None
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
    work_dir: Path, vocab_size: int, num_proc: int, quiet: bool, sources: Sources, spec: dict, family: Pretraining,
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


def build_cloze_datasets(cfg: Any, corpus_dir: str | Path, model_cfg: ClozeConfig):
    """(training blocks, held-out blocks or None) of a two-tower system (`build_datasets`)."""
    class _Ids:  # the markers' ids, as the framed tokenizer gives them
        def token_to_id(self, t: str) -> int:
            return {"<s>": model_cfg.bos_id, "</s>": model_cfg.eos_id}[t]

    return build_datasets(cfg, corpus_dir, _Ids(), 0)
