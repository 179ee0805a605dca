"""Model families: the one protocol every task uses, and the one loader that dispatches on config.json.

A family is one readable model file: `spanbert.model` (the BERT encoder, and its causal variant for
BERT's left-to-right baseline), `spanbert.cloze` (the two-tower cloze model) and `spanbert.modernbert`.
Tasks never import them: they load an encoder here and use only the members of `Family`, so a new family
reaches QA, coreference, relation extraction, GLUE, NER, SWAG and parsing by implementing those members
and adding one row to `FAMILIES` (or, from another package or a test, `register_family`). The family's
fine-tuning habits (the two-tower paper's x16 output scale and zero-initialised projection, its cosine
schedule and learning-rate grid) are defaults the family supplies to the shared heads (`Family.habits`),
not a second pipeline.

Checkpoints say which family they hold in config.json's ``model_type`` (``"bert"``, ``"cloze-two-tower"``,
``"modernbert"``); a folder without it (HF BERT, Google's and SpanBERT's ``bert_config.json`` releases, a
fairseq state dict) is BERT, as it always was. ``FAMILIES`` maps model_type to its `FamilySpec`, as
transformers' ``AutoModel`` maps it to a class. A family's row also says how its folders are read, checked
and written (`spanbert.checkpoints` holds the layouts) and how it pre-trains (`Pretraining`): the functions
here dispatch on the row and never on a family's name. A row lists only what is its family's own: every
field it leaves out has a default, BERT's way where that is general (HF-named config fields, WordPiece, the
masked heads, a safetensors folder) and else the encoder's own answer (`habits`), so a new family states
its model and what differs, and nothing else.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from spanbert import _aliases, checkpoints, cloze, model, modernbert, trained_inputs
from spanbert.cloze_config import ClozeConfig
from spanbert.collate import pretrain_target_counts
from spanbert.config import BertConfig, FinetuneHabits, model_config
from spanbert.config_json import json_kind
from spanbert.distributed import print0
from spanbert.errors import SpanBertError
from spanbert.hub import resolve_model
from spanbert.pretrain_config import DEFAULT_FAMILY, PRETRAINING_FAMILIES, FamilyModels
from spanbert.tokenization import load_tokenizer_for, train_byte_level_tokenizer, train_tokenizer


class Family(Protocol):
    """What a task may use of an encoder, and nothing else (`spanbert.model.Encoder` and
    `spanbert.cloze.TwoTowerEncoder` implement it)."""

    model_type: str
    hidden_size: int  # H of the token states
    sentence_size: int  # width of `sentence`'s vector
    num_layers: int  # `output_hidden_states` gives num_layers + 1 states
    max_positions: int  # the longest framed input
    vocab_size: int
    ffn_size: int  # width of a feed-forward layer's inner activation, per token
    habits: FinetuneHabits  # the family's fine-tuning defaults for the shared heads

    def __call__(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                 output_hidden_states: bool = False) -> Tensor | tuple[Tensor, ...]:
        """Token states (B, T, H); with ``output_hidden_states`` the num_layers + 1 layer states (B, T, H)."""
        ...

    def sentence(self, hidden: Tensor, attention_mask: Tensor | None = None, input_ids: Tensor | None = None) -> Tensor:
        """The sentence vector of classification heads, (B, T, H) -> (B, sentence_size)."""
        ...

    def frame(self, tokenizer: Any) -> Any:
        """The tokenizer with the family's start (``cls_id``), between-segment (``mid_id``) and end
        (``sep_id``) ids: tasks frame ``cls a sep`` and ``cls a mid b sep``."""
        ...

    def config_json(self) -> dict[str, Any]:
        """The encoder's keys of a saved model's config.json, ``model_type`` among them."""
        ...

    def resize_token_embeddings(self, vocab_size: int) -> None:
        """Grow the input vocabulary (added tokens keep their ids)."""
        ...

    def set_gradient_checkpointing(self, enabled: bool = True) -> None:
        """Recompute each layer's activations in the backward pass: less memory, more compute."""
        ...


# ---------------------------------------------------------------------------------------------
# The defaults of a row. A row states what is its family's own and takes the rest from here: BERT's way
# (HF-named config fields, cased WordPiece, the masked heads' batch, a config.json + model.safetensors
# folder whose encoder loads whole), which any family whose config and model follow it gets for free.


def check_positions(config: Any, *, max_seq_length: int, init_from: str | None, **_: Any) -> None:
    """`Pretraining.check`'s default: a block longer than the planned model's positions (the HF-named
    ``max_position_embeddings``) is refused; before the model is planned (``config`` None) nothing is."""
    if config is not None and max_seq_length > config.max_position_embeddings:
        raise SpanBertError(
            f"--max_seq_length: found {max_seq_length}, expected at most the model's "
            f"{config.max_position_embeddings} positions ({init_from or 'max_position_embeddings'})"
        )


def as_given(config: Any, args: Any) -> Any:
    """`Pretraining.training_args`' default: the run's own `TrainingArguments`."""
    return args


def masked_lm_flops(config: Any, seq_len: int, objectives: tuple[str, ...]) -> float:
    """`Pretraining.flops_per_token`'s default: a BERT layer stack of the config's HF-named sizes, its MLM
    (and SBO) head at 15% of the tokens (`spanbert.model.flops_per_token`)."""
    return model.flops_per_token(config, seq_len, sbo="sbo" in objectives)


def hf_sizes(config: Any) -> tuple[int, int]:
    """`Pretraining.sizes`' default: (num_hidden_layers, hidden_size) of an HF-named config."""
    return config.num_hidden_layers, config.hidden_size


def _vocabulary_line(kind: str, asked: int, train: Callable[[], Any], note: str = "") -> None:
    """Train a vocabulary (``train()`` returns its tokenizer) and say what it came to: a small corpus has
    fewer distinct pieces (or merges) than --vocab_size asks for, and the model is sized by the result."""
    print0(f"training a {kind} vocabulary of up to {asked:,} tokens on the corpus{note}")
    got = train().vocab_size
    if got < asked:
        print0(f"vocabulary: {got:,} tokens, all that the corpus gives (--vocab_size {asked:,} asked for more)")


def wordpiece_vocabulary(files: list, vocab_size: int, folder: Path, config: Any) -> None:
    """`Pretraining.vocabulary`'s default: BERT's cased WordPiece."""
    _vocabulary_line("cased WordPiece", vocab_size,
                     lambda: train_tokenizer(files, vocab_size=vocab_size, output_dir=folder, show_progress=False))  # fmt: skip


def unframed(tokenizer: Any) -> Any:
    """`Pretraining.frame`'s default: the tokenizer as trained (BERT's [CLS], [SEP], [MASK])."""
    return tokenizer


def masking_candidates(config: Any, scheme: str | None) -> dict[str, Any]:
    """`Pretraining.data_spec`'s default: the spans a masking scheme draws from, marked in the prepared data
    (named_entity: entities, noun_phrase: noun phrases; None for the others)."""
    return {"candidates": {"named_entity": "entities", "noun_phrase": "noun_phrases"}.get(scheme)}


def bert_heads(objectives: tuple[str, ...]) -> tuple[str, ...]:
    """The `SpanBertForPreTraining` loss terms of a system's objectives (ltr's next-token LM is the MLM head)."""
    return ("mlm",) + (("sbo",) if "sbo" in objectives else ()) + (("nsp",) if "nsp" in objectives else ())


def bert_target_counts(batch: dict[str, Any], heads: tuple[str, ...] = ("mlm", "sbo", "nsp")) -> dict[str, int]:
    """Real targets of each of ``heads`` in a pre-training batch: `collate.pretrain_target_counts`,
    restricted to the heads the model has."""
    return {k: v for k, v in pretrain_target_counts(batch).items() if k in heads}


def masked_lm_counts(pre: nn.Module, objectives: tuple[str, ...]) -> Callable[[dict[str, Any]], dict[str, int]]:
    """`Pretraining.count_targets`' default: the targets of the masked heads the objectives train."""
    return functools.partial(bert_target_counts, heads=bert_heads(objectives))


MASKED_LM_METRICS: dict[str, tuple[str, ...]] = {
    "mlm": ("mlm_loss", "mlm_acc"), "sbo": ("sbo_loss", "sbo_acc"), "nsp": ("nsp_loss", "nsp_acc"),
}  # fmt: skip
"""`Pretraining.metrics`' default: the masked heads' held-out metrics (a term the model lacks counts no target)."""


# Each option's value in the runs from before it existed: a run with that value leaves the key out, so
# their checkpoints still resume (block_packing: the blocks those runs had; the rest: the defaults).
BEFORE_THE_OPTION = {
    "block_packing": "fixed", "recipe": "paper", "tokens_per_update": 0, "seq_length_schedule": None,
    "static_masks": "auto", "dropout": None, "max_time": None, "sbo_warmup_steps": 0,
}


def recorded_options(options: dict[str, Any], before: dict[str, Any] = BEFORE_THE_OPTION) -> dict[str, Any]:
    """The options a checkpoint records and --resume compares: all but the worker count, and but those
    at their value of ``before`` (the runs from before the option, whose checkpoints lack the key)."""
    return {k: v for k, v in options.items() if k != "num_proc" and not (k in before and v == before[k])}


def masked_lm_run_config(options: dict[str, Any], masking: dict[str, Any] | None, config: Any) -> dict[str, Any]:
    """`Pretraining.run_config`'s default: every option but the worker count, and the masking."""
    return {"PretrainConfig": recorded_options(options), "MaskingConfig": masking}


def describe_layers(pre: nn.Module) -> str:
    """`Pretraining.describe`'s default: "L layers x H" of the model's HF-named config."""
    return f"{pre.config.num_hidden_layers} layers x {pre.config.hidden_size}"


def system_and_masking(system: str, scheme: str | None) -> dict[str, Any]:
    """`Pretraining.export_extra`'s default: the system and its masking scheme."""
    return {"system": system, "masking": scheme or "none"}


def fine_tune_next(final: Path, objectives: tuple[str, ...]) -> list[str]:
    """`Pretraining.next_steps`' default: where the model is and how to fine-tune it."""
    return [
        f"\nsaved the model to {final}",
        f"next: fine-tune it on any task, e.g.: spanbert finetune squad --model {final} --train_file ... --validation_file ...",
    ]


def no_init_from(folder: str) -> Any:
    """`Pretraining.init_config`'s default: the family continues no checkpoint, so --init_from is refused."""
    raise SpanBertError(f"--init_from: found {folder}, expected none: this family does not continue a checkpoint")


def continued(pre: nn.Module, init_from: str, tok: Any) -> nn.Module:
    """For a `Pretraining.build`: the model loaded from --init_from, refused when its vocabulary has fewer
    rows than the run's tokenizer has ids."""
    if pre.config.vocab_size < tok.vocab_size:
        raise SpanBertError(
            f"{init_from}: vocabulary of {pre.config.vocab_size} is smaller than the tokenizer's "
            f"{tok.vocab_size}; use the checkpoint's own tokenizer"
        )
    return pre


def unframed_by_config(raw: dict[str, Any], tokenizer: Any) -> Any:
    """`FamilySpec.frame`'s default: the tokenizer as saved (``[CLS] a [SEP] b [SEP]``, BERT's framing)."""
    return tokenizer


def encoder_keys(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """`FamilySpec.encoder_state`'s default: the keys under ``bert.``, without it (where a task model keeps
    its encoder, and a pre-training model that does as BERT's); a state with none is a bare encoder's."""
    inner = {k[len("bert.") :]: v for k, v in state.items() if k.startswith("bert.")}
    return inner or dict(state)


def load_strict(encoder: nn.Module, own: dict[str, Tensor], source: str) -> None:
    """`FamilySpec.load_encoder_state`'s default: every weight of the encoder from ``own``, nothing else."""
    checkpoints.load_encoder_weights(encoder, own, source, encoder.model_type)


def save_in_place(path: Path, state: dict[str, Tensor], config_json: dict[str, Any], tokenizer: Any) -> None:
    """`FamilySpec.save`'s default: config.json + model.safetensors (+ the tokenizer) in the run folder."""
    checkpoints.save_checkpoint(path, state, config_json, tokenizer=tokenizer)


@dataclass(frozen=True)
class Pretraining:
    """What a family's pre-training needs (`FamilySpec.pretraining`). `spanbert.pretrain.pretrain` runs
    the same steps for every system (plan, prepare the data, build, cut the blocks, train, export) and
    calls these where the family matters; the system's sampler (`spanbert.samplers.SAMPLERS`) cuts the
    blocks and batches them. A row states ``config`` and ``build`` and whatever else is its own; every
    other field defaults to BERT's way (a model whose config has HF names and whose forward takes the
    masked heads' batch, `spanbert.model.masked_heads`)."""

    config: Callable[..., Any]
    """(model preset, vocab_size=, max_seq_length=, objectives=, causal=, init_config=, overrides=) -> the
    model's config, planned before the vocabulary exists (the plan's cost is estimated from it)."""
    build: Callable[..., nn.Module]
    """(planned config, tokenizer, init_from=, objectives=, mlm_weight=, sbo_weight=) -> the model, its
    `forward` returning ``loss`` and ``loss_terms``, its ``config`` the planned one, its
    ``save_pretrained(folder, tokenizer=, extra=)`` the export."""
    samplers: tuple[str, ...] = ("single",)
    """The samplers whose items the family's pre-training model reads."""
    masked: bool = True
    """Whether its systems take the masking options (a `MaskingConfig` is checked and kept by a resume)."""
    check: Callable[..., None] = check_positions
    """(planned config, system=, masking=, init_from=, causal=, max_seq_length=, max_predictions=) -> None:
    the family's refusals, before any work (first with no config, then with the planned one)."""
    training_args: Callable[[Any, Any], Any] = as_given
    """(planned config, TrainingArguments) -> the arguments the family trains with (two-tower §5.2's
    Nesterov schedule)."""
    flops_per_token: Callable[[Any, int, tuple[str, ...]], float] = masked_lm_flops
    """(config, block length, objectives) -> training FLOPs per token (the plan's cost)."""
    sizes: Callable[[Any], tuple[int, int]] = hf_sizes
    """config -> (layers, hidden size), for the plan's warning."""
    vocabulary: Callable[[list, int, Path, Any], None] = wordpiece_vocabulary
    """(corpus files, vocab_size, folder, planned config) -> None: trains the family's vocabulary into
    folder (BERT: cased WordPiece; two-tower: byte-level BPE or words, as the config's input)."""
    frame: Callable[[Any], Any] = unframed
    """tokenizer -> the tokenizer the family pre-trains with (two-tower: + <s>, </s>, <sep>)."""
    data_spec: Callable[[Any, str | None], dict[str, Any]] = masking_candidates
    """(planned config, masking scheme) -> what else shaped the prepared data (`prepared.json`)."""
    count_targets: Callable[[nn.Module, tuple[str, ...]], Callable[[dict[str, Any]], dict[str, int]]] = masked_lm_counts
    """(model, objectives) -> batch -> real targets of each loss term (the trainer's weights)."""
    metrics: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(MASKED_LM_METRICS))
    """Loss term -> the held-out metrics averaged over its targets."""
    run_config: Callable[[dict[str, Any], dict[str, Any] | None, Any], dict[str, Any]] = masked_lm_run_config
    """(PretrainConfig fields, MaskingConfig fields or None, model config) -> the settings a resume keeps."""
    describe: Callable[[nn.Module], str] = describe_layers
    """model -> its size, in words (the line `spanbert pretrain` prints)."""
    export_extra: Callable[[str, str | None], dict[str, Any]] = system_and_masking
    """(system, masking scheme or None) -> the keys the exported config.json records."""
    next_steps: Callable[[Path, tuple[str, ...]], list[str]] = fine_tune_next
    """(exported folder, objectives) -> what to run next, printed after the export."""
    init_config: Callable[[str], Any] = no_init_from
    """--init_from folder -> the checkpoint's architecture, its weights checked present (no tensor read)."""
    load_heads: Callable[[str, tuple[str, ...], str], nn.Module] | None = None
    """(folder, heads, command) -> the pre-trained model with those heads (mlm, sbo) loaded from the folder,
    an error naming it when one is missing (`spanbert fill`); None: the family fills no masks."""


@dataclass(frozen=True)
class FamilySpec:
    """How to build and load one family (one row of `FAMILIES`). A row states ``from_config`` and ``prefix``
    and whatever else is its own; the rest defaults to BERT's framing and to a folder of config.json +
    model.safetensors whose encoder (the task model's ``bert.``) loads whole."""

    from_config: Callable[[dict[str, Any], bool, str], nn.Module]
    """(config.json dict, add_pooling_layer, source) -> an encoder, weights freshly initialised."""
    prefix: str
    """The family's part of a task model's architecture name (``Bert`` -> ``BertForQuestionAnswering``)."""
    habits: Callable[[dict[str, Any], str], FinetuneHabits] | None = None
    """(config.json dict, source) -> the fine-tuning habits (`Family.habits`) from config.json alone. None:
    the encoder's own, asked of one built on the meta device (`sized`); a row answers from the config where
    a command needs them early (before its options are parsed, its ``--help`` too), as a first build on the
    meta device imports torch._dynamo, seconds."""
    frame: Callable[[dict[str, Any], Any], Any] = unframed_by_config
    """(config.json dict, tokenizer) -> the tokenizer framed for the family (`Family.frame`, without
    weights); default: BERT's, the tokenizer's own [CLS] and [SEP]."""
    encoder_state: Callable[[dict[str, Tensor]], dict[str, Tensor]] = encoder_keys
    """A checkpoint's state dict (pre-trained or fine-tuned) -> the encoder's own keys."""
    load: Callable[[Path], tuple[dict[str, Any], dict[str, Tensor]]] = checkpoints.load_safetensors_checkpoint
    """folder -> (config.json dict, state dict in the family's own key names): every weights layout
    the family reads (BERT: HF, Google's and SpanBERT's releases, fairseq, shards, .bin)."""
    check: Callable[[Path], None] = checkpoints.check_safetensors_checkpoint
    """folder -> None; fails, naming the file, where `load` would (no weights, a broken header), without
    reading a tensor: what a command checks before it writes anything."""
    load_encoder_state: Callable[[nn.Module, dict[str, Tensor], str], None] = load_strict
    """(encoder, its own keys from `encoder_state`, source) -> None: loads them, or an error naming
    ``source`` when they do not fit (BERT: a missing pooler stays freshly initialised)."""
    save: Callable[[Path, dict[str, Tensor], dict[str, Any], Any], None] = save_in_place
    """(folder, state dict, config.json dict, tokenizer or None) -> None: writes a task model's files into a
    run folder, in place beside the run's other outputs (`spanbert.checkpoints.save_checkpoint`)."""
    pretraining: Pretraining | None = None
    """How the family pre-trains (`spanbert pretrain`); None: it is only loaded and fine-tuned."""
    bare_task_folders: bool = False
    """A folder whose config.json has no ``architectures`` may still hold a task model, its weights
    decide (HF BERT folders written without the key); otherwise such a folder holds no task head."""


# ---------------------------------------------------------------------------------------------
# BERT (spanbert/model.py): its layouts, its causal variant (ltr), NSP, --init_from, `spanbert fill`


def _bert_from_config(raw: dict[str, Any], add_pooling_layer: bool, source: str) -> nn.Module:
    return model.Encoder(BertConfig.from_hf_dict(raw, source=source), add_pooling_layer=add_pooling_layer)


def _bert_habits(raw: dict[str, Any], source: str) -> FinetuneHabits:
    cfg = BertConfig.from_hf_dict(raw, source=source)
    return FinetuneHabits(init_std=cfg.initializer_range, head_dropout=cfg.hidden_dropout_prob)


def _bert_config(name: str, *, vocab_size: int, max_seq_length: int, causal: bool, init_config: BertConfig | None,
                 **_: Any) -> BertConfig:  # fmt: skip
    if init_config is not None:  # --init_from: the architecture is the checkpoint's
        return init_config
    return model_config(
        name, vocab_size=vocab_size, max_position_embeddings=max(512, max_seq_length), is_decoder=causal
    )


def _bert_check(config: BertConfig, *, system: str, masking: str | None, init_from: str | None, causal: bool,
                max_seq_length: int, max_predictions: int | None) -> None:  # fmt: skip
    if config is None:
        return  # every BERT check needs the planned model
    if config.is_decoder != causal:  # a causal encoder under a bidirectional objective, or the reverse
        raise SpanBertError(
            f"--init_from: found a {'causal' if config.is_decoder else 'bidirectional'} checkpoint "
            f"({init_from}, is_decoder {config.is_decoder}), expected a "
            f"{'causal' if causal else 'bidirectional'} one for --system {system}"
        )
    if causal and max_predictions is not None and max_predictions < max_seq_length - 1:
        raise SpanBertError(
            f"--max_predictions: found {max_predictions}, expected at least --max_seq_length - 1 "
            f"({max_seq_length - 1}) for --system {system}: every token is a target"
        )
    check_positions(config, max_seq_length=max_seq_length, init_from=init_from)


def _bert_flops(config: BertConfig, seq_len: int, objectives: tuple[str, ...]) -> float:
    rate = 1.0 if config.is_decoder else 0.15  # the LM head runs on every token
    return model.flops_per_token(config, seq_len, mask_rate=rate, sbo="sbo" in objectives)


def _bert_build(config: BertConfig, tok: Any, *, init_from: str | None, objectives: tuple[str, ...],
                mlm_weight: float, sbo_weight: float) -> nn.Module:  # fmt: skip
    heads = dict(sbo="sbo" in objectives, nsp="nsp" in objectives, mlm_weight=mlm_weight, sbo_weight=sbo_weight)
    if init_from:
        return continued(model.SpanBertForPreTraining.from_pretrained(init_from, **heads), init_from, tok)
    return model.SpanBertForPreTraining(dataclasses.replace(config, vocab_size=tok.vocab_size), **heads)


def _bert_next_steps(final: Path, objectives: tuple[str, ...]) -> list[str]:
    lines = [f"\nsaved the model to {final} (HF layout: config.json, model.safetensors, tokenizer files)"]
    text = "The {MASK*3} is used to define a function."
    if "sbo" in objectives:
        lines += ["next: fill a masked span with the MLM or the span boundary head:",
                  f'  spanbert fill --model {final} --text "{text}" --head sbo']  # fmt: skip
    elif "mlm" in objectives:  # no span boundary head: --head sbo would be refused
        # (a causal model's head predicts the next token, not a [MASK]: no fill hint)
        lines += [
            "next: fill masked tokens with the MLM head:",
            f'  spanbert fill --model {final} --text "{text}" --head mlm',
        ]
    lines.append(f"  or fine-tune it: spanbert finetune squad --model {final} --train_file ... --validation_file ...")
    return lines


BERT_PRETRAINING = Pretraining(
    config=_bert_config,
    build=_bert_build,
    samplers=("single", "nsp", "causal"),
    check=_bert_check,
    flops_per_token=_bert_flops,
    next_steps=_bert_next_steps,
    init_config=checkpoints.check_checkpoint,
    load_heads=lambda folder, heads, command: model.SpanBertForPreTraining.from_pretrained(
        folder, require=heads, needed_by=command
    ),
)


# ---------------------------------------------------------------------------------------------
# The two-tower cloze model (spanbert/cloze.py): its own blocks, vocabulary, objectives and schedule


def _two_tower_config(
    name: str, *, objectives: tuple[str, ...], overrides: dict[str, Any] | None, **_: Any
) -> ClozeConfig:
    config = cloze.cloze_config(name, objective="-".join(objectives))  # cloze, bilm, cloze-bilm
    if overrides:
        config = dataclasses.replace(config, **overrides)
        config.__post_init__()
    return config


def _two_tower_check(config: ClozeConfig, *, masking: str | None, init_from: str | None, **_: Any) -> None:
    if masking is not None:
        raise SpanBertError(f"--masking: found {masking!r}, expected none: the two-tower systems mask nothing (§3)")
    if init_from:
        raise SpanBertError(f"--init_from: found {init_from!r}, expected none: continuing a two-tower run is --resume")


def _two_tower_args(config: ClozeConfig, args: Any) -> Any:
    if config.optimizer != "nesterov":
        return args
    if args.learning_rate != cloze.PAPER_PEAK_LR:
        print0(
            f"note: optimizer=nesterov runs §5.2's schedule, peak rate {cloze.PAPER_PEAK_LR:g} (not --learning_rate {args.learning_rate:g})"
        )
    return cloze.paper_training_arguments(args)


def _two_tower_vocabulary(files: list, vocab_size: int, folder: Path, config: ClozeConfig) -> None:
    kind = "bpe" if config.input == "bpe" else "words"
    _vocabulary_line("byte-level BPE" if kind == "bpe" else "word", vocab_size,
                     lambda: cloze.train_cloze_tokenizer(files, vocab_size, kind, output_dir=folder))  # fmt: skip


def _two_tower_describe(lm: nn.Module) -> str:
    c = lm.config
    n_params = sum(p.numel() for p in lm.parameters())
    return f"two-tower, {c.input} input, {c.optimizer}: {c.num_layers} blocks per tower x {c.d_model}, {n_params / 1e6:.1f}M parameters"


def _two_tower_next_steps(final: Path, objectives: tuple[str, ...]) -> list[str]:
    return [
        f"\nsaved the model to {final} (config.json with model_type {cloze.MODEL_TYPE!r}, model.safetensors, tokenizer files)",
        f"  fine-tune it on any task, e.g.: spanbert finetune glue --task SST-2 --data_dir ../shared/data/glue/SST-2 "
        f"--model {final} --output_dir runs/sst2-two-tower",
    ]


TWO_TOWER_PRETRAINING = Pretraining(
    config=_two_tower_config,
    build=lambda config, tok, **_: cloze.build_model(config, tok),
    samplers=("cloze",),
    masked=False,
    check=_two_tower_check,
    training_args=_two_tower_args,
    flops_per_token=lambda config, seq_len, objectives: cloze.flops_per_token(config, seq_len),
    sizes=lambda config: (config.num_layers, config.d_model),
    vocabulary=_two_tower_vocabulary,
    frame=cloze.with_boundary_tokens,
    data_spec=lambda config, scheme: {"kind": "bpe" if config.input == "bpe" else "words"},
    count_targets=lambda lm, objectives: functools.partial(cloze.count_targets, objective=lm.config.objective),
    metrics={
        "cloze": ("cloze_loss", "cloze_acc"),
        "bilm_fwd": ("bilm_fwd_loss", "bilm_fwd_acc"),
        "bilm_bwd": ("bilm_bwd_loss", "bilm_bwd_acc"),
    },
    run_config=lambda options, masking, config: {
        # two-tower checkpoints record the older options of BEFORE_THE_OPTION; these three came after them
        "PretrainConfig": recorded_options(
            options, {k: BEFORE_THE_OPTION[k] for k in ("dropout", "max_time", "sbo_warmup_steps")}
        ),
        "ClozeConfig": dataclasses.asdict(config),
    },
    describe=_two_tower_describe,
    export_extra=lambda system, scheme: {"system": system},
    next_steps=_two_tower_next_steps,
)


# ---------------------------------------------------------------------------------------------
# ModernBERT (spanbert/modernbert.py): BERT's masked heads on its own architecture and byte-level BPE


def _modernbert_config(name: str, *, vocab_size: int, init_config: Any, overrides: dict[str, Any] | None,
                       **_: Any) -> modernbert.ModernBertConfig:  # fmt: skip
    if init_config is not None:  # --init_from: the architecture is the checkpoint's
        return init_config
    return modernbert.modernbert_config(name, vocab_size=vocab_size, **(overrides or {}))


def _modernbert_vocabulary(files: list, vocab_size: int, folder: Path, config: Any) -> None:
    _vocabulary_line("byte-level BPE", vocab_size, lambda: train_byte_level_tokenizer(files, vocab_size, output_dir=folder),
                     note=" (BERT's special tokens, as ModernBERT's)")  # fmt: skip


def _modernbert_build(config: Any, tok: Any, *, init_from: str | None, objectives: tuple[str, ...],
                      mlm_weight: float, sbo_weight: float) -> nn.Module:  # fmt: skip
    heads = dict(sbo="sbo" in objectives, mlm_weight=mlm_weight, sbo_weight=sbo_weight)
    if init_from:
        return continued(modernbert.ModernBertForPreTraining.from_pretrained(init_from, **heads), init_from, tok)
    ids = dict(pad_token_id=tok.pad_id, cls_token_id=tok.cls_id, bos_token_id=tok.cls_id, sep_token_id=tok.sep_id,
               eos_token_id=tok.sep_id)  # fmt: skip
    return modernbert.ModernBertForPreTraining(dataclasses.replace(config, vocab_size=tok.vocab_size, **ids), **heads)


def _modernbert_init_config(folder: str) -> modernbert.ModernBertConfig:
    checkpoints.check_safetensors_checkpoint(Path(folder))
    return modernbert.ModernBertConfig.from_hf_dict(
        read_config(folder), source=str(checkpoints.config_path(Path(folder)))
    )


def _modernbert_next_steps(final: Path, objectives: tuple[str, ...]) -> list[str]:
    head = "the MLM or the span boundary head" if "sbo" in objectives else "the MLM head"
    text = "The {MASK*3} is used to define a function."
    return [
        f"\nsaved the model to {final} (transformers' ModernBertForMaskedLM layout: config.json, model.safetensors, "
        "tokenizer files)",
        f"next: fill a masked span with {head}:",
        f'  spanbert fill --model {final} --text "{text}" --head {"sbo" if "sbo" in objectives else "mlm"}',
        f"  or fine-tune it on any task, e.g.: spanbert finetune squad --model {final} --train_file ... --validation_file ...",
    ]


MODERNBERT_PRETRAINING = Pretraining(
    config=_modernbert_config,
    build=_modernbert_build,
    flops_per_token=lambda config, seq_len, objectives: modernbert.flops_per_token(
        config, seq_len, sbo="sbo" in objectives
    ),
    vocabulary=_modernbert_vocabulary,
    data_spec=lambda config, scheme: {"kind": "byte-level-bpe", **masking_candidates(config, scheme)},
    describe=lambda pre: (
        f"ModernBERT, {pre.config.num_hidden_layers} layers x {pre.config.hidden_size} "
        f"(global every {pre.config.global_attn_every_n_layers}, local window {pre.config.local_attention})"
    ),
    next_steps=_modernbert_next_steps,
    init_config=_modernbert_init_config,
    load_heads=lambda folder, heads, command: modernbert.ModernBertForPreTraining.from_pretrained(
        folder, require=heads, needed_by=command
    ),
)


FAMILIES: dict[str, FamilySpec] = {
    "bert": FamilySpec(
        from_config=_bert_from_config,
        prefix="Bert",
        habits=_bert_habits,
        encoder_state=checkpoints.encoder_state_dict,
        load=checkpoints.load_checkpoint,
        check=checkpoints.check_checkpoint,
        load_encoder_state=lambda encoder, own, source: encoder.load_bert_state(own, source=source),
        pretraining=BERT_PRETRAINING,
        bare_task_folders=True,
    ),
    cloze.MODEL_TYPE: FamilySpec(
        from_config=lambda raw, pooled, source: cloze.encoder_from_config(raw, source),
        prefix="TwoTower",
        habits=lambda raw, source: cloze.FINETUNE_HABITS,
        frame=lambda raw, tok: cloze.frame_tokenizer(cloze.config_from_json(raw), tok),
        encoder_state=cloze.encoder_state,
        pretraining=TWO_TOWER_PRETRAINING,
    ),
    modernbert.MODEL_TYPE: FamilySpec(
        from_config=lambda raw, pooled, source: modernbert.Encoder(
            modernbert.ModernBertConfig.from_hf_dict(raw, source=source), add_pooling_layer=pooled
        ),
        prefix="SpanbertModernBert",
        habits=lambda raw, source: modernbert.family_habits(
            modernbert.ModernBertConfig.from_hf_dict(raw, source=source)
        ),
        encoder_state=modernbert.encoder_state,
        load_encoder_state=modernbert.load_encoder_state,
        pretraining=MODERNBERT_PRETRAINING,
    ),
}
"""config.json ``model_type`` -> family. Any other model_type (or none) reads as `DEFAULT_FAMILY`; a family
of another package joins with `register_family`."""
BUILT_IN = frozenset(FAMILIES)
"""The families spanbert ships (`unregister_family` leaves them)."""


def register_family(name: str, spec: FamilySpec, check_model: Callable[[str], Any] | None = None) -> None:
    """Add a family to `FAMILIES`: ``name`` is the config.json ``model_type`` its folders record and its
    encoder's `Family.model_type`; ``spec`` its row. From then on the one loader reads its folders, every
    task fine-tunes it and, when the row has `pretraining`, ``spanbert pretrain --family NAME`` pre-trains
    it. ``check_model`` refuses a ``--model`` the family has no preset for before any work (default: none
    is refused here, the row's `Pretraining.config` decides). It holds in this process: a program calls it
    before `spanbert.cli.run`, a test registers its own family and removes it with `unregister_family`."""
    if name in FAMILIES:
        raise SpanBertError(f"register_family: found {name!r}, a family already; expected a new model_type")
    FAMILIES[name] = spec
    if spec.pretraining is not None:
        PRETRAINING_FAMILIES[name] = FamilyModels(check_model or (lambda model_name: None))


def unregister_family(name: str) -> None:
    """Remove a family that `register_family` added; the built-in ones (`BUILT_IN`) stay."""
    if name in BUILT_IN or name not in FAMILIES:
        added = sorted(set(FAMILIES) - BUILT_IN)
        raise SpanBertError(
            f"unregister_family: found {name!r}, expected a family that register_family added: {', '.join(added) or 'none'}"
        )
    del FAMILIES[name]
    PRETRAINING_FAMILIES.pop(name, None)


# ---------------------------------------------------------------------------------------------
# Reading a folder


def read_config(path: str | Path) -> dict[str, Any]:
    """config.json (or the original releases' bert_config.json) of a checkpoint folder, as a dict.
    Reads no weights; a missing folder or file, or bad JSON, is an error naming it. A hub name that
    is no local folder is read from its hub snapshot (`spanbert.hub.resolve_model`)."""
    path = resolve_model(path)
    if not path.is_dir():
        raise SpanBertError(f"{path}: model folder not found, expected a folder with config.json and weights")
    cfg_path = checkpoints.config_path(path)
    if not cfg_path.is_file():
        raise SpanBertError(f"{path}: no config.json or bert_config.json, expected a model folder"
                            + checkpoints.run_folder_hint(path))  # fmt: skip
    raw = checkpoints.read_json(cfg_path, "a JSON object of model settings")
    if not isinstance(raw, dict):
        raise SpanBertError(f"{cfg_path}: found a JSON {json_kind(raw)}, expected a JSON object of model settings")
    return raw


def family_name(raw: dict[str, Any]) -> str:
    """The `FAMILIES` key of a config.json dict: its model_type when it names a family, else bert."""
    kind = raw.get("model_type")
    return kind if isinstance(kind, str) and kind in FAMILIES else DEFAULT_FAMILY


def family_of(path: str | Path) -> str:
    """The family of the checkpoint folder ``path`` (reads config.json only)."""
    return family_name(read_config(path))


def sized(raw: dict[str, Any], source: str = "config.json") -> nn.Module:
    """The encoder ``raw`` (a config.json dict) describes, built on the meta device: no memory and no
    initialisation, yet every protocol member a command asks before it loads weights is there (the sizes,
    `Family.habits`)."""
    with torch.device("meta"):
        return FAMILIES[family_name(raw)].from_config(raw, False, source)


def habits_of(path: str | Path) -> FinetuneHabits:
    """The fine-tuning habits of the family in ``path`` (reads config.json only): what a task command
    needs before it parses its options, to show and use the family's defaults."""
    path = resolve_model(path)
    raw, source = read_config(path), str(checkpoints.config_path(path))
    answer = FAMILIES[family_name(raw)].habits
    return answer(raw, source) if answer is not None else sized(raw, source).habits


def num_layers_of(path: str | Path) -> int:
    """`Family.num_layers` of the checkpoint in ``path``, from its config.json; the weights are checked
    to be there and readable (`FamilySpec.check`), nothing is loaded."""
    path = resolve_model(path)
    raw = read_config(path)
    FAMILIES[family_name(raw)].check(path)
    return sized(raw, str(checkpoints.config_path(path))).num_layers


def max_positions_of(path: str | Path) -> int:
    """`Family.max_positions` (the longest framed input) of the checkpoint in ``path``, from its config.json
    alone: what a task's sequence length is checked against before any data is read."""
    path = resolve_model(path)
    return int(sized(read_config(path), str(checkpoints.config_path(path))).max_positions)


def load_checkpoint(path: str | Path) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """(config.json dict, state dict) of any family's folder (pre-trained or fine-tuned)."""
    path = resolve_model(path)
    return FAMILIES[family_name(read_config(path))].load(path)


def encoder_from_config(raw: dict[str, Any], add_pooling_layer: bool = True, source: str = "config.json") -> nn.Module:
    """An encoder of the family and sizes ``raw`` (a config.json dict) describes, freshly initialised:
    a task builds its saved model around it, then loads the folder's weights."""
    return FAMILIES[family_name(raw)].from_config(raw, add_pooling_layer, source)


def load_encoder(path: str | Path, add_pooling_layer: bool = False) -> nn.Module:
    """The encoder of any family's checkpoint folder (pre-trained, or a fine-tuned task folder whose head
    is dropped), in eval mode: a loaded model predicts; `spanbert.trainer.train` switches to train().

    Every layout the family's `FamilySpec.load` reads (BERT: `spanbert.checkpoints.load_checkpoint`'s); a
    BERT checkpoint without a pooler (the SpanBERT release) gets a freshly initialised one when
    ``add_pooling_layer``.
    """
    path = resolve_model(path)
    raw, state = load_checkpoint(path)
    encoder = encoder_from_config(raw, add_pooling_layer, str(checkpoints.config_path(path)))
    load_encoder_state(encoder, state, str(path))
    trained_inputs.attach(encoder, raw)  # what pre-training trained of its inputs: fine-tuning warns beyond it
    return encoder.eval()


def load_encoder_state(encoder: nn.Module, state: dict[str, Tensor], source: str) -> None:
    """Load a checkpoint's encoder weights (pre-trained or fine-tuned names) into ``encoder``; every
    weight must fit (BERT: a missing pooler stays freshly initialised, as `Encoder.load_bert_state`)."""
    spec = FAMILIES[encoder.model_type]
    spec.load_encoder_state(encoder, spec.encoder_state(state), source)


def load_framed_tokenizer(path: str | Path, tokenizer_dir: str | Path | None = None) -> Any:
    """The tokenizer saved with a checkpoint (or the one given), framed for the checkpoint's family
    (reads config.json, no weights): ``cls_id``/``mid_id``/``sep_id`` are the family's markers."""
    path = resolve_model(path)
    raw = read_config(path)
    tok = load_tokenizer_for(path, tokenizer_dir)
    rows = raw.get("vocab_size")
    if isinstance(rows, int) and not isinstance(rows, bool) and tok.vocab_size > rows:
        # an id past the embedding table: an IndexError at the first batch, naming nothing (issue 58.1)
        where = f"{tokenizer_dir} (--tokenizer)" if tokenizer_dir else f"{path}'s own tokenizer"
        raise SpanBertError(
            f"{'--tokenizer' if tokenizer_dir else path}: found {where} with {tok.vocab_size:,} ids, expected at "
            f"most the {rows:,} embedding rows of {path} (config.json vocab_size): use the model's own vocabulary"
        )
    return FAMILIES[family_name(raw)].frame(raw, tok)


def architecture(encoder: Any, task: str) -> str:
    """A task model's architecture name for config.json: the family's prefix + ``task``
    (``BertForSequenceClassification``, the HF name; ``TwoTowerForSequenceClassification``)."""
    return FAMILIES[encoder.model_type].prefix + task


def architectures(task: str) -> tuple[str, ...]:
    """Every family's architecture name for ``task`` (what a predict command accepts)."""
    return tuple(spec.prefix + task for spec in FAMILIES.values())


# ---------------------------------------------------------------------------------------------
# Task folders


def save_task_model(
    task_model: nn.Module,
    output_dir: str | Path,
    tokenizer: Any,
    architecture: str,
    extra: dict[str, Any] | None = None,
) -> None:
    """Save a task model (its encoder as ``task_model.bert`` + a head) as config.json (the encoder's keys,
    ``architectures``, then ``extra``: HF keys such as ``id2label`` at the top level, spanbert's task
    settings under ``"spanbert"``) + model.safetensors + the tokenizer. Call it on one rank
    (`spanbert.tasks.ranks.write_once`)."""
    config_json = {**task_model.bert.config_json(), "architectures": [architecture]}
    for k, v in (extra or {}).items():
        if k == "spanbert":
            config_json.setdefault("spanbert", {}).update(v)
        else:
            config_json[k] = v
    FAMILIES[task_model.bert.model_type].save(Path(output_dir), task_model.state_dict(), config_json, tokenizer)


def check_task_folder(path: str | Path, architectures: tuple[str, ...], needs: str) -> dict[str, Any]:
    """config.json of a folder that a predict/evaluate command reads a task model from; refused before any
    data is read when it holds no such model (a pre-trained-only folder, another task's model), naming
    the folder, what it holds and what the command needs (``needs``, e.g. "a GLUE model: spanbert
    finetune glue")."""
    raw = read_config(path)
    found = raw.get("architectures")
    if found is None and FAMILIES[family_name(raw)].bare_task_folders and "spanbert" not in raw:
        return raw  # a HF folder written without architectures: its weights decide (the loader checks them)
    held = found[0] if isinstance(found, list) and found and isinstance(found[0], str) else None
    if held not in architectures:
        what = f"a {held} model" if held else f"a {family_name(raw)} model without a task head"
        raise SpanBertError(f"{path}: found {what}, expected {needs} (architectures {list(architectures)})")
    return raw


__getattr__ = _aliases.getter(__name__)
