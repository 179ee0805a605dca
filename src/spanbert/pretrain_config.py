"""What a pre-training run is, before any model exists: the paper's systems as presets, `PretrainConfig`,
the training loop's presets (the paper's recipe, the quick start), and the parsers of `spanbert pretrain`
and `spanbert fill`.

`spanbert.pretrain` builds and trains what these describe. They live apart from it so that a parser, and
so `spanbert pretrain --help`, is built without loading torch.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spanbert.budget import parse_duration
from spanbert.cloze_config import CLOZE_MODEL_TYPE, CLOZE_SYSTEMS, parse_model_spec
from spanbert.config import (
    MODEL_PRESETS,
    MODERNBERT_MODEL_TYPE,
    MODERNBERT_PRESETS,
    ArgumentParser,
    add_dataclass_arguments,
)
from spanbert.errors import SpanBertError
from spanbert.masking import SCHEMES, MaskingConfig, add_replace_probs_arguments
from spanbert.training_args import TrainingArguments
from spanbert.utils import user_path


@dataclass(frozen=True)
class System:
    """A pre-training system is a preset of four choices; `pretrain` builds it and `spanbert.trainer`
    trains it. ``family`` names the model file (`spanbert.families`), ``sampler`` how blocks are cut
    from the corpus, ``masking`` the scheme (`spanbert.masking.SCHEMES`; None where nothing is masked)
    and ``objectives`` the losses summed per target."""

    family: str
    """bert (spanbert/model.py, with causal attention for ltr), cloze-two-tower (spanbert/cloze.py) or
    modernbert (spanbert/modernbert.py); ``--family`` puts a system's objectives on another family."""
    sampler: str
    """single (one block, §3.3), nsp (two segments + NSP label), causal (every next token), cloze (<s> block </s>)."""
    masking: str | None
    """The masking scheme, or None."""
    objectives: tuple[str, ...]
    """mlm, sbo, nsp (BERT heads); lm (left-to-right); cloze, bilm (two-tower §6.3)."""
    short_seq_prob: float = 0.0
    """NSP pairs: probability of a shorter target length (Google BERT: 0.1)."""
    mask_prob: float | None = None
    """The system's default masking budget (--mask_prob; None: MaskingConfig's 15%)."""


SYSTEM_PRESETS: dict[str, System] = {
    "spanbert": System("bert", "single", "span", ("mlm", "sbo")),
    "bert": System("bert", "nsp", "subword", ("mlm", "nsp")),
    "bert-1seq": System("bert", "single", "subword", ("mlm",)),
    "google-bert": System("bert", "nsp", "subword", ("mlm", "nsp"), 0.1),
    # Table 6: masking ablations, all bi-sequence with NSP
    "mask-subword": System("bert", "nsp", "subword", ("mlm", "nsp")),
    "mask-whole-word": System("bert", "nsp", "whole_word", ("mlm", "nsp")),
    "mask-named-entity": System("bert", "nsp", "named_entity", ("mlm", "nsp")),
    "mask-noun-phrase": System("bert", "nsp", "noun_phrase", ("mlm", "nsp")),
    "mask-span": System("bert", "nsp", "span", ("mlm", "nsp")),
    # Table 7: auxiliary objectives with span masking
    "span-2seq-nsp": System("bert", "nsp", "span", ("mlm", "nsp")),
    "span-1seq": System("bert", "single", "span", ("mlm",)),
    "span-1seq-sbo": System("bert", "single", "span", ("mlm", "sbo")),
    # BERT §5.1 / Table 5 "LTR & No NSP": a left-to-right LM on the single-sequence blocks (nothing is
    # masked, every next token is a target: `CausalLMBlocks`)
    "ltr": System("bert", "causal", None, ("lm",)),
    # the two-tower model (Baevski et al. 2019, §6.3 Table 5): every token is a target, nothing masked
    "cloze": System("cloze-two-tower", "cloze", None, ("cloze",)),
    "bilm": System("cloze-two-tower", "cloze", None, ("bilm",)),
    "cloze-bilm": System("cloze-two-tower", "cloze", None, ("cloze", "bilm")),
    # ModernBERT's own recipe (Warner et al. 2024, §2.2): MLM alone, 30% of the tokens masked, single sequences
    "modernbert-mlm": System("modernbert", "single", "subword", ("mlm",), mask_prob=0.3),
}
"""Every ``--system``: the paper's (§4.2, §5, §6), BERT's LTR baseline and the two-tower systems."""

def _preset_check(presets: dict[str, Any], kind: str) -> Callable[[str], None]:
    def check(model: str) -> None:
        if model not in presets:
            raise SpanBertError(f"--model: found unknown {kind} {model!r}, expected one of: {', '.join(presets)}")

    return check


@dataclass(frozen=True)
class FamilyModels:
    """A pre-training family's ``--model`` values, known without torch (``spanbert pretrain --help`` and
    a config's checks run before any model file is imported). The family's whole row is
    `spanbert.families.FAMILIES`; a test keeps the two tables naming the same families."""

    check_model: Callable[[str], Any]
    """Refuse a ``--model`` the family has no preset for (one `SpanBertError` listing the presets)."""


PRETRAINING_FAMILIES: dict[str, FamilyModels] = {
    "bert": FamilyModels(_preset_check(MODEL_PRESETS, "model preset")),
    CLOZE_MODEL_TYPE: FamilyModels(parse_model_spec),  # a preset, then :field=value,... (docs/cloze.md)
    MODERNBERT_MODEL_TYPE: FamilyModels(_preset_check(MODERNBERT_PRESETS, "ModernBERT preset")),
}
"""What `spanbert pretrain` knows of each family that pre-trains before torch is loaded, in the order
``--family`` lists them (`spanbert.families.register_family` adds a registered family's row)."""
DEFAULT_FAMILY = "bert"
"""The family of the paper's systems, and of a checkpoint folder whose config.json names no family (every
BERT release predates the key)."""
FAMILY_CHOICES = PRETRAINING_FAMILIES.keys()
"""--family values: the families that pre-train (`PRETRAINING_FAMILIES`, the light mirror of the
`spanbert.families.FAMILIES` rows with `pretraining`). A live view, not a copy: a family that
`spanbert.families.register_family` adds is a choice too."""

# The paper's systems (those on the default family) as (masking scheme, "single" | "nsp", sbo,
# short_seq_prob): what `pretrain`'s earlier API returned for a system (ltr's scheme is unused).
SYSTEMS: dict[str, tuple[str, str, bool, float]] = {
    name: (s.masking or "subword", "nsp" if s.sampler == "nsp" else "single", "sbo" in s.objectives, s.short_seq_prob)
    for name, s in SYSTEM_PRESETS.items()
    if s.family == DEFAULT_FAMILY
}


def system_masking(system: System) -> dict[str, Any]:
    """The `MaskingConfig` defaults a system sets (modernbert-mlm: 30% masked); options override them."""
    return {} if system.mask_prob is None else {"mask_prob": system.mask_prob}


def system_of(cfg: PretrainConfig) -> System:
    """``cfg``'s system, on ``--family`` when one is named (the system's objectives, sampler and
    masking on that family's model; `resolve` checks that the family reads the system's sampler)."""
    system = SYSTEM_PRESETS[cfg.system]
    return dataclasses.replace(system, family=cfg.family) if cfg.family else system


# Systems whose encoder is causal (config.json `is_decoder: true`), kept so at fine-tuning (§5.1)
CAUSAL_SYSTEMS = frozenset(n for n, s in SYSTEM_PRESETS.items() if s.sampler == "causal")

# --static_masks values (see PretrainConfig.static_masks)
STATIC_MASKS = ("auto", "on", "off")

# The fewest tokens a block may have: [CLS] + [SEP] (+ [SEP]) leave room for a few words.
MIN_SEQ_LENGTH = 8


@dataclass
class PretrainConfig:
    """What to pre-train and on which data. Training-loop options are in TrainingArguments."""

    system: str = "spanbert"
    """Paper system: spanbert, bert, bert-1seq (BERT's "No NSP"), google-bert, mask-{subword,whole-word,named-entity,noun-phrase,span}, span-2seq-nsp, span-1seq, span-1seq-sbo; ltr (BERT §5.1's left-to-right LM, causal attention); the two-tower model (docs/cloze.md): cloze, bilm, cloze-bilm; modernbert-mlm (ModernBERT's own recipe: MLM alone, 30% masked, docs/modernbert.md)."""
    family: str | None = None
    """Model family: the system's own when not given (bert; cloze-two-tower for cloze, bilm, cloze-bilm; modernbert for modernbert-mlm), or modernbert to put the system's objectives on the ModernBERT architecture (RoPE, GeGLU, local/global attention, 8,192-token context: spanbert, bert-1seq, span-1seq, span-1seq-sbo, modernbert-mlm, and --masking for the masking ablations on single sequences)."""
    model: str = "base"
    """Model size preset: tiny, small, base, large (the quick start uses tiny; with --family modernbert ModernBERT's presets of those names); for --system cloze/bilm/cloze-bilm one of tiny, small, cnn_base, cnn_large, bpe_large, optionally followed by :field=value,... (docs/cloze.md)."""
    corpus: str | None = None
    """Text files or folders (plain text, blank line between documents, or JSONL with a text field), or a `spanbert preprocess` output folder. Default: the English reference text every Python installation carries (pydoc topics)."""
    tokenizer: str | None = None
    """Tokenizer folder (tokenizer.json or vocab.txt). Default: the --init_from checkpoint's, else one trained on the corpus."""
    vocab_size: int = 28996
    """Vocabulary size when a tokenizer is trained on the corpus (BERT cased's 28,996, as the paper; the quick start: 4,000). For BERT's own cased vocabulary pass --tokenizer with a folder holding its vocab.txt."""
    recipe: str = "paper"
    """Optimisation: paper = §4.2 (AdamW, decoupled weight decay 0.1 not on biases/LayerNorm, linear warmup and decay, each loss a mean over its targets); released = the released fairseq command (weight decay 0.01 on every parameter, polynomial decay, fairseq's loss normalisation). Sets the defaults of those training-loop options."""
    tokens_per_update: int = 131072
    """Tokens per optimizer update, all processes together (§4.2 footnote 8; the released run: 4096 tokens a GPU, fairseq's max-tokens, x 32 GPUs = 131,072): micro-batches of --max_tokens_per_batch tokens (4096 when 0), accumulation = this / (max_tokens_per_batch x processes). 0 = take --max_tokens_per_batch, --per_device_train_batch_size and --gradient_accumulation_steps as given. Default 0 in the quick start, and when --per_device_train_batch_size or --gradient_accumulation_steps is named."""
    init_from: str | None = None
    """Continue pre-training from this HF BERT / SpanBERT checkpoint folder (architecture comes from it)."""
    max_seq_length: int = 512
    """Block length in tokens, [CLS] and [SEP] included (§4.2: up to 512)."""
    seq_length_schedule: str | None = None
    """Block lengths in stages within one run, LENGTH:SHARE,...,LENGTH (shares of --max_steps; the last stage takes the rest at --max_seq_length). Google BERT (Appendix A.2): 128:0.9,512 = 90% of the steps at 128 tokens, then 512. Needs --max_steps; resume works across a switch."""
    block_packing: str = "sentences"
    """Blocks: sentences = whole lines of a document packed up to max_seq_length - 2 (as the released code; a longer line is split at word starts) and NSP segments cut at word boundaries; fixed = each document cut every max_seq_length - 2 tokens (runs before 2026-11-23)."""
    static_masks: str = "auto"
    """Google BERT's static masking: auto = read the masks a `spanbert preprocess --dupe_factor N` corpus stores (epoch e reads copy e mod N) when it has them, else mask on the fly; on = require them; off = mask on the fly (dynamic, §4.2 (a)) even when the corpus has them."""
    masking: str | None = None
    """Override the system's masking scheme: subword, whole_word, span, named_entity, noun_phrase (the masking options below tune it)."""
    short_seq_prob: float | None = None
    """NSP pairs: probability of a shorter target length (Google BERT: 0.1). Default: the system's."""
    mlm_weight: float = 1.0
    """Weight of the MLM loss."""
    sbo_weight: float = 1.0
    """Weight of the SBO loss (§3.2 sums the two with weight 1)."""
    sbo_warmup_steps: int = 0
    """Raise the SBO loss's weight linearly from 0 to --sbo_weight over the first N optimizer steps (step s of the run weighs s/N of it), then keep it; 0 = the paper's weight from the first step. Not in the paper or the released code: a small-budget option. A few hundred steps from random init, the SBO's gradient into the encoder holds spanbert on the unigram plateau, and a ramp lets the MLM leave it first: with 200 of a 500-step schedule, three seeds ended 0.22-0.31 nats below the plateau at 2 M tokens where the paper's weight left them within 0.11, and the SBO was better too (docs/pretraining.md, "Learning speed", part 5)."""
    eval_fraction: float = 0.01
    """Share of the corpus's tokens held out for MLM/SBO evaluation: whole documents, the last ones (0 < x < 1; --max_eval_blocks 0 turns evaluation off)."""
    max_eval_blocks: int = 256
    """Cap on held-out blocks (0 = no held-out evaluation)."""
    max_predictions: int | None = None
    """Pad every sequence's masked targets to this count (fixed batch shapes for compiled GPU code); None = as many as masked."""
    pad_to: int | None = None
    """Pad every batch to this length (fixed shapes); None = the longest sequence in the batch."""
    num_proc: int = 2
    """Worker processes for on-the-fly preprocessing (0 = one per CPU core this process may use)."""
    output_name: str = "final"
    """Subfolder of output_dir that receives the exported HF-format model."""
    max_time: str | None = None
    """A wall-clock budget for the whole command, e.g. 45m, 1h30m (data preparation included): the step speed is measured during the warm-up (--warmup_steps, at least 5, must be named), the total steps are then fixed so that the linear decay ends at the budget, and the run's checkpoints keep that total (--resume continues it; the log prints the --max_steps that reruns it exactly). Replaces --max_steps."""
    random_init: bool = False
    """Train nothing: export the freshly initialised model (seeded by --seed) with the vocabulary and heads of the system, the random-init control a pre-trained model is compared with (a study row: {name: random-init, system: spanbert, options: {random_init: true}})."""
    dropout: float | None = None
    """Dropout rate during pre-training, for every dropout of the model (embeddings, attention weights, sublayer outputs). Default: the model preset's (BERT 0.1, as the paper; ModernBERT 0). The exported config.json keeps the preset's rate, which fine-tuning starts from. Cramming (Geiping & Goldstein 2022) pre-trains without dropout at small budgets: --dropout 0."""

    def __post_init__(self) -> None:
        # Each field alone; checks that involve the model or the data are in `pretrain` (a config is
        # built field by field from presets, YAML and flags, so a pair may be briefly inconsistent).
        for name in ("corpus", "tokenizer", "init_from"):  # ~ expanded, "" refused, as on the command line
            setattr(self, name, user_path(getattr(self, name), f"--{name}"))
        if self.system not in SYSTEM_PRESETS:
            raise SpanBertError(
                f"--system: found unknown system {self.system!r}, expected one of: {', '.join(SYSTEM_PRESETS)}"
            )
        if self.family is not None and self.family not in FAMILY_CHOICES:
            raise SpanBertError(f"--family: found {self.family!r}, expected one of: {', '.join(FAMILY_CHOICES)}")
        PRETRAINING_FAMILIES[system_of(self).family].check_model(self.model)
        if self.masking is not None and self.system in CAUSAL_SYSTEMS:
            raise SpanBertError(
                f"--masking: found {self.masking!r} with --system {self.system}, expected none "
                "(the left-to-right LM masks nothing: every next token is a target)"
            )
        if self.masking is not None and self.masking not in SCHEMES:
            raise SpanBertError(
                f"--masking: found unknown masking scheme {self.masking!r}, expected one of: {', '.join(SCHEMES)}"
            )
        if not MIN_SEQ_LENGTH <= self.max_seq_length:
            raise SpanBertError(f"--max_seq_length: found {self.max_seq_length}, expected at least {MIN_SEQ_LENGTH}")
        if self.recipe not in RECIPES:
            raise SpanBertError(f"--recipe: found {self.recipe!r}, expected one of: {', '.join(RECIPES)}")
        if isinstance(self.tokens_per_update, bool) or not isinstance(self.tokens_per_update, int) or self.tokens_per_update < 0:
            raise SpanBertError(f"--tokens_per_update: found {self.tokens_per_update!r}, expected an integer >= 0")
        if self.vocab_size < 6:
            raise SpanBertError(f"--vocab_size: found {self.vocab_size}, expected at least 6 (5 special tokens + 1)")
        if not 0.0 < self.eval_fraction < 1.0:  # also rejects NaN
            raise SpanBertError(
                f"--eval_fraction: found {self.eval_fraction}, expected a number between 0 and 1 (exclusive)"
            )
        if self.static_masks not in STATIC_MASKS:
            raise SpanBertError(
                f"--static_masks: found {self.static_masks!r}, expected one of: {', '.join(STATIC_MASKS)}"
            )
        if self.static_masks == "on" and self.system in CLOZE_SYSTEMS:
            raise SpanBertError(f"--static_masks on: found --system {self.system}, expected a masked-LM system")
        if self.block_packing not in ("sentences", "fixed"):
            raise SpanBertError(f"--block_packing: found {self.block_packing!r}, expected sentences or fixed")
        if self.max_eval_blocks < 0:
            raise SpanBertError(f"--max_eval_blocks: found {self.max_eval_blocks}, expected 0 or more")
        if self.num_proc < 0:
            raise SpanBertError(f"--num_proc: found {self.num_proc}, expected 0 (one per CPU core) or more")
        for name in ("mlm_weight", "sbo_weight"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise SpanBertError(f"--{name}: found {value}, expected a finite number >= 0")
        if isinstance(self.sbo_warmup_steps, bool) or not isinstance(self.sbo_warmup_steps, int) or self.sbo_warmup_steps < 0:
            raise SpanBertError(f"--sbo_warmup_steps: found {self.sbo_warmup_steps!r}, expected an integer >= 0")
        if self.sbo_warmup_steps and "sbo" not in system_of(self).objectives:
            sbo_systems = ", ".join(n for n, s in SYSTEM_PRESETS.items() if "sbo" in s.objectives)
            raise SpanBertError(
                f"--sbo_warmup_steps: found {self.sbo_warmup_steps} with --system {self.system}, which has no SBO; "
                f"expected 0, or a system with one ({sbo_systems})"
            )
        if self.short_seq_prob is not None and not 0.0 <= self.short_seq_prob <= 1.0:
            raise SpanBertError(f"--short_seq_prob: found {self.short_seq_prob}, expected a probability in [0, 1]")
        if self.max_predictions is not None and self.max_predictions < 1:
            raise SpanBertError(f"--max_predictions: found {self.max_predictions}, expected at least 1 (or none)")
        if self.seq_length_schedule is not None:
            seq_length_stages(self.seq_length_schedule, self.max_seq_length, 1000)  # the syntax, now
        if self.pad_to is not None and self.pad_to < MIN_SEQ_LENGTH:
            raise SpanBertError(f"--pad_to: found {self.pad_to}, expected at least {MIN_SEQ_LENGTH} (or none)")
        if self.max_time is not None:
            parse_duration(self.max_time)  # the syntax, now
            if self.seq_length_schedule:
                raise SpanBertError("--max_time: found --seq_length_schedule too, expected one of them (the stages are shares of a known total)")
        if self.dropout is not None and not 0.0 <= self.dropout < 1.0:  # also rejects NaN
            raise SpanBertError(f"--dropout: found {self.dropout}, expected a rate in [0, 1)")
        if not self.output_name or Path(self.output_name).name != self.output_name or self.output_name in (".", ".."):
            raise SpanBertError(f"--output_name: found {self.output_name!r}, expected a folder name (no '/')")


# Defaults of the training loop for pre-training (§4.2 / Appendix A): peak 1e-4 after 10k warmup steps,
# linear decay, decoupled weight decay 0.1 (not on biases and LayerNorm), clipping at 1.0, AdamW eps
# 1e-8; batches of 4096 tokens per micro-batch, 131,072 per update (PretrainConfig.tokens_per_update;
# footnote 8). With tokens_per_update 0: 256 sequences (32 x 8).
PRETRAIN_DEFAULTS: dict[str, Any] = dict(
    output_dir="runs/spanbert",
    learning_rate=1e-4,
    warmup_steps=10_000,
    weight_decay=0.1,
    max_grad_norm=1.0,
    per_device_train_batch_size=32,
    gradient_accumulation_steps=8,
    max_tokens_per_batch=4096,
    adam_epsilon=1e-8,
    max_steps=2_400_000,
    logging_steps=100,
    save_steps=2000,
    eval_steps=2000,
    # held-out evaluation batches of 16 x 512 tokens: at 64 x 512 the MLM logits alone took the CPU
    # peak to 2.6-2.9 GB (docs/benchmarks.md, "Memory"); the losses do not depend on the batch size
    per_device_eval_batch_size=16,
)

# The quick start: tiny model, bundled corpus, CPU (its wall time: the README). In force until the user names a
# corpus, a model or --init_from (`quick_start_in_force`), whatever else is changed.
QUICKSTART: dict[str, Any] = dict(
    output_dir="runs/spanbert-quickstart",
    max_steps=1200,
    warmup_steps=100,
    learning_rate=2e-3,
    per_device_train_batch_size=16,
    gradient_accumulation_steps=1,
    max_tokens_per_batch=0,
    logging_steps=100,
    save_steps=400,
    eval_steps=400,
)
QUICKSTART_CONFIG: dict[str, Any] = dict(model="tiny", max_seq_length=128, vocab_size=4000, tokens_per_update=0)
# Options that leave the quick start: what to train on and what to train.
LEAVES_QUICKSTART = ("corpus", "model", "init_from")

# --recipe: the training-loop defaults each one sets (on top of PRETRAIN_DEFAULTS / QUICKSTART; a flag
# the user gives still wins). "released" is facebookresearch/SpanBERT pretraining/README.md's command:
# --weight-decay 0.01 in fairseq's Adam (optim/adam.py: one group, every parameter decays),
# --lr-scheduler polynomial_decay (power 1, end 0), plus its loss normalisation (released_term_weights).
RECIPES: dict[str, dict[str, Any]] = {
    "paper": {},
    "released": dict(weight_decay=0.01, decay_all_parameters=True, lr_scheduler_type="polynomial"),
}
# Per-GPU budget of the released run (fairseq max-tokens 4096), used when tokens_per_update is set and
# max_tokens_per_batch is 0.
RELEASED_MAX_TOKENS = 4096
# Sequence-count options: naming one asks for sequence batching (tokens_per_update then defaults to 0).
SEQUENCE_BATCHING = ("per_device_train_batch_size", "gradient_accumulation_steps")


def seq_length_stages(schedule: str | None, max_seq_length: int, max_steps: int) -> list[tuple[int, int]]:
    """``[(block length, last step of the stage)]`` of a ``--seq_length_schedule`` such as ``128:0.9,512``
    (BERT Appendix A.2: 90% of the steps at 128 tokens, the rest at 512). Stage k ends after step
    round(cumulative share x max_steps); the last stage is at ``max_seq_length`` and ends at max_steps.
    No schedule: one stage."""
    if not schedule:
        return [(max_seq_length, max_steps)]
    where = f"--seq_length_schedule: found {schedule!r}, expected LENGTH:SHARE,...,LENGTH"
    parts = [x.strip() for x in schedule.split(",")]
    stages, cum = [], 0.0
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        length_text, _, share_text = part.partition(":")
        try:
            length = int(length_text)
            share = float(share_text) if share_text else None
        except ValueError:
            raise SpanBertError(f"{where} (e.g. 128:0.9,512)") from None
        if (share is None) != last:
            raise SpanBertError(f"{where}: every stage but the last needs a share of the steps (e.g. 128:0.9,512)")
        if length < MIN_SEQ_LENGTH or length > max_seq_length:
            raise SpanBertError(f"{where}: length {length} is outside [{MIN_SEQ_LENGTH}, --max_seq_length {max_seq_length}]")
        if last:
            if length != max_seq_length:
                raise SpanBertError(f"{where}: the last length {length} must be --max_seq_length ({max_seq_length})")
            stages.append((length, max_steps))
            continue
        if not 0.0 < share < 1.0 or cum + share >= 1.0:  # also NaN
            raise SpanBertError(f"{where}: shares must be in (0, 1) and sum to less than 1")
        cum += share
        end = round(cum * max_steps)
        if end <= (stages[-1][1] if stages else 0):
            raise SpanBertError(f"{where}: stage {i + 1} gets no steps of --max_steps {max_steps}")
        stages.append((length, end))
    if len(stages) > 1 and stages[-2][1] >= max_steps:
        raise SpanBertError(f"{where}: the last stage gets no steps of --max_steps {max_steps}")
    return stages


# ---------------------------------------------------------------------------------------------
# The parsers


def pretrain_parser(
    prog: str = "spanbert pretrain", defaults: dict[str, Any] | None = None, cfg_defaults: dict[str, Any] | None = None
) -> argparse.ArgumentParser:
    """The options of `spanbert pretrain`; ``defaults`` (`PRETRAIN_DEFAULTS` when None) and
    ``cfg_defaults`` only change the defaults its help shows."""
    defaults = PRETRAIN_DEFAULTS if defaults is None else defaults
    p = ArgumentParser(
        prog=prog,
        description=(
            "Pre-train SpanBERT (span masking + span boundary objective, single sequences; Joshi et al. 2020) "
            "or one of the paper's baselines. Until you name a --corpus, a --model or --init_from, the quick "
            "start is in force: a tiny SpanBERT on the English reference text bundled with Python, on CPU "
            "(its own defaults: tiny model, 128 tokens, 1200 steps of 16, lr 2e-3, output "
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
    # an older spelling, still taken (not listed: the help names each option once, as --init_from)
    p.add_argument("--init-from", dest="init_from", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    masking_group = p.add_argument_group("masking (§3.1; the official implementation's variants are options)")
    add_dataclass_arguments(masking_group, MaskingConfig, exclude=("scheme", "replace_probs"))
    add_replace_probs_arguments(masking_group)  # --replace_probs P P P, --mask_rates M/S/R (BERT Table 8)
    add_dataclass_arguments(p.add_argument_group("training loop"), TrainingArguments, defaults=defaults)
    p.add_argument("overrides", nargs="*", metavar="key=value", help="further overrides of any option above")
    return p


SECTIONS = (PretrainConfig, MaskingConfig, TrainingArguments)


def fill_parser(prog: str = "spanbert fill") -> argparse.ArgumentParser:
    """The options of `spanbert fill`."""
    p = ArgumentParser(
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
    return p
