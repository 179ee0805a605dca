"""The options of ``spanbert finetune|predict|evaluate ner``, one dataclass an action; the settings of the
two other heads fine-tuning offers (`HeadConfig`: BERT's feature-based NER; `CrfTaggerConfig`: the
two-tower biLSTM-CRF) and each head's training defaults. No torch: ``--help`` is built from these alone
(`spanbert.tasks.options`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from spanbert.tasks.options import (
    Finetune,
    Inference,
    finetune_defaults,
    model_family_defaults,
    model_habits,
    nested,
    option,
)
from spanbert.training_args import TrainingArguments

TAGGERS = ("linear", "bilstm-crf")
"""The heads of fine-tuned NER: BERT §5.3's linear one, the two-tower paper's biLSTM-CRF (§6.2.1)."""

DEFAULTS: dict[str, Any] = finetune_defaults(
    "f1", output_dir="runs/ner", learning_rate=5e-5, per_device_train_batch_size=32, num_train_epochs=4.0
)
"""BERT's fine-tuning recipe (§A.3: lr in {5e-5, 3e-5, 2e-5}, batch 16/32, 2-4 epochs); the model of the
best dev conlleval F1 of 10 evaluations an epoch is kept, as the SpanBERT scripts select theirs."""


@dataclass
class HeadConfig:
    """Options of the feature-based tagger (`spanbert finetune ner --features ...`)."""

    features: str = "concat_last_four"
    """Table 7 feature choice(s): table7 (all six), or a comma list of embeddings, second_to_last_hidden,
    last_hidden, weighted_sum_last_four, concat_last_four, weighted_sum_all."""
    feature_cache: str = ""
    """Folder of the cached activations (shared by runs: same encoder, data and settings reuse it).
    Empty = OUTPUT_DIR/feature_cache."""
    feature_dtype: str = "float32"
    """Storage type of the cache: float32, or float16 (half the disk; BERT-base on CoNLL-2003 train is
    about 8 GB in float32)."""
    lstm_hidden_size: int = 768
    """Hidden units of each direction of the biLSTM (§5.3: "two-layer 768-dimensional BiLSTM")."""
    lstm_layers: int = 2
    """Stacked biLSTM layers (§5.3: two)."""
    head_dropout: float = 0.1
    """Dropout on the biLSTM's input, between its layers and before the classifier."""
    extract_batch_size: int = 32
    """Sequences per batch when running the encoder to fill the cache."""


FEATURES_DEFAULTS: dict[str, Any] = dict(
    output_dir="runs/ner-features", learning_rate=1e-3, per_device_train_batch_size=32, num_train_epochs=10.0,
    warmup_ratio=0.1, evals_per_epoch=1, metric_for_best_model="f1", greater_is_better=True, save_total_limit=1,
)
"""The head's recipe (the paper gives none): AdamW at 1e-3, batch 32 sentences, 10 epochs, and the
model of the best dev F1 of one evaluation an epoch (the best epoch on dev)."""


@dataclass
class CrfTaggerConfig:
    """Settings of the biLSTM-CRF tagger (`--tagger bilstm-crf`; two-tower §4, §6.2.1)."""

    stacking: Literal["finetune", "frozen"] = "finetune"
    """finetune: train the encoder too, at --encoder_learning_rate (Table 3 "fine-tune"); frozen: keep it fixed and learn a softmax-weighted mix of its layers (Table 3 "ELMo")."""
    encoder_learning_rate: float = option(1e-5, flags=("--model_learning_rate",))
    """Peak learning rate of the encoder with --stacking finetune (§6.2.1: 1e-5; the head uses --learning_rate, 1e-3)."""
    tagger_dropout: float = option(0.3, flags=("--dropout",))
    """Dropout in the encoder (finetune), between encoder and head, and in the head (§4: 0.3 at all levels)."""
    tagger_projection_dim: int = option(200, flags=("--projection_dim",))
    """Width of the linear projection before the biLSTM (not given in the paper)."""
    tagger_lstm_hidden_size: int = 200
    """Hidden units of the biLSTM in each direction (not given in the paper; AllenNLP's ELMo NER: 200)."""
    early_stopping: bool = True
    """Stop when the dev loss does not improve over the previous epoch, keeping that epoch (§4)."""


CRF_DEFAULTS: dict[str, Any] = dict(learning_rate=1e-3, per_device_train_batch_size=16, num_train_epochs=25.0, weight_decay=0.0)
"""§4 and §6.2.1: head 1e-3 (the encoder 1e-5), batch 16, up to 25 epochs, Adam without weight decay."""


OLD_FLAGS = {"--model_learning_rate": "--encoder_learning_rate", "--projection_dim": "--tagger_projection_dim",
             "--lstm_hidden_size": "--tagger_lstm_hidden_size", "--dropout": "--tagger_dropout"}  # fmt: skip
"""The flags of the two-tower NER command before the tagger became an option of `spanbert finetune ner`,
still accepted with --tagger bilstm-crf (the first three are other spellings of `CrfTaggerConfig`'s fields;
``--lstm_hidden_size``, `HeadConfig`'s too, is the tagger's when there is no --features)."""


def tagger_of(given: Mapping[str, Any]) -> str:
    """The tagger fine-tuning trains: ``--tagger``, else the ``--model`` family's default (linear when the
    folder cannot be read yet: loading it reports that later)."""
    if given.get("tagger"):
        return str(given["tagger"])
    habits = model_habits(given.get("model"))
    return "linear" if habits is None else habits.tagger


def training_defaults(given: Mapping[str, Any]) -> dict[str, Any]:
    """The `TrainingArguments` defaults of the head asked for: --features has its own recipe; the linear
    head BERT's over the family's; the biLSTM-CRF its paper's (§4, §6.2.1: its own rates, batch and epochs;
    one evaluation an epoch, early stopping on the dev loss)."""
    if given.get("features"):
        return dict(FEATURES_DEFAULTS)
    out = {**DEFAULTS, **model_family_defaults(given.get("model"))}
    if tagger_of(given) == "bilstm-crf":
        out.update(CRF_DEFAULTS, evals_per_epoch=1, metric_for_best_model=None)
    return out


@dataclass(kw_only=True)
class NerFinetune(Finetune):
    """``spanbert finetune ner --model DIR --train_file CONLL [--validation_file CONLL]``: the linear or
    biLSTM-CRF tagger, or with --features BERT's feature-based NER."""

    train_file: str = option(path="input", flags=("--train",))
    """CoNLL-2003 training file (word POS chunk TAG)"""
    validation_file: str | None = option(None, path="input", flags=("--dev",))
    """CoNLL-2003 dev file, scored with conlleval during and after training"""
    max_seq_length: int | None = option(None, metavar="N")
    """tokens per input piece (default: 128, or the encoder's positions when it has fewer)"""
    max_train_examples: int | None = None
    """use only the first N training sentences"""
    max_eval_examples: int | None = None
    """use only the first N dev sentences"""
    document_context: bool = True
    """encode each sentence inside its document's neighbouring tokens, as many as fit in max_seq_length,
    centred on it (BERT §5.3, 'the maximal document context'; documents start at -DOCSTART- lines); false:
    each sentence alone. Saved with the model"""
    tagger: Literal["linear", "bilstm-crf"] | None = None
    """the head: linear (BERT §5.3: softmax on each word's first sub-token) or bilstm-crf (two-tower §6.2.1:
    projection, biLSTM, CRF, early stopping on the dev loss); default: the model family's (BERT: linear,
    two-tower: bilstm-crf)"""
    features: str | None = None
    """BERT's feature-based NER instead (§5.3 Table 7: a frozen encoder's activations, cached, under a
    two-layer biLSTM): the feature choice(s), table7 (all six) or a comma list of embeddings,
    second_to_last_hidden, last_hidden, weighted_sum_last_four, concat_last_four, weighted_sum_all. Its
    training defaults differ (docs/tasks.md)"""
    head: HeadConfig = nested(HeadConfig, exclude=("features",), title="feature-based NER (with --features)")
    crf: CrfTaggerConfig = nested(CrfTaggerConfig, title="biLSTM-CRF tagger (with --tagger bilstm-crf)")
    training: TrainingArguments = nested(TrainingArguments, defaults=training_defaults, title="training")


@dataclass(kw_only=True)
class NerPredict(Inference):
    """``spanbert predict ner --data FILE --model DIR --output FILE``."""

    data: str = option(path="input")
    """CoNLL-2003 file (tags optional for predict)"""
    model: str = option(path="input")
    """folder saved by `spanbert finetune ner`"""
    output: str = option(path="output_file")
    """CoNLL file to write: word [gold] predicted"""
    batch_size: int = 64
    """sequences per batch"""


@dataclass(kw_only=True)
class NerEvaluate(Inference):
    """``spanbert evaluate ner --data FILE (--predictions FILE | --model DIR)``."""

    data: str = option(path="input")
    """CoNLL-2003 file with its gold tags"""
    predictions: str | None = option(None, path="input")
    """file written by `spanbert predict ner` (predicted tag in the last column)"""
    model: str | None = option(None, path="input")
    """fine-tuned model folder: predict, then score"""
    example_stats: str | None = None
    """also write each example's counts behind the headline score to FILE (JSON; what `spanbert study`
    resamples for its intervals)"""
    batch_size: int = 64
    """sequences per batch (with --model)"""


ACTIONS = {"finetune": NerFinetune, "predict": NerPredict, "evaluate": NerEvaluate}
"""Each action's options, for the registry (`spanbert.tasks.registry.TASKS.options`)."""
