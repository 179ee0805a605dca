"""The options of ``spanbert finetune|predict|evaluate coref``, one dataclass an action; the model's settings
(`CorefConfig`), the fine-tuning defaults and the released runs' presets (`COREF_PRESETS`). No torch:
``--help`` is built from these alone (`spanbert.tasks.options`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spanbert.tasks.options import Finetune, nested, option
from spanbert.training_args import TrainingArguments


@dataclass
class CorefConfig:
    """Task layers and inputs of the coreference model.

    The model settings are those of the released SpanBERT coreference code (mandarjoshi90/coref
    `experiments.conf`, `independent.py`), which §4.1 uses; the learning rates and segment length are
    one point of the Appendix B grid (the released values: presets `spanbert_base`, `spanbert_large`).
    """

    max_seq_length: int | None = None
    """Segment length in sub-tokens with [CLS] and [SEP] (Appendix B grid 128-512; released SpanBERT:
    384 base, 512 large). Unset: it follows the encoder (`segment_length`): 384 for BERT's 512
    positions, and for an encoder of a longer context (ModernBERT: 8,192) that context up to 8,192, so
    that a whole LitBank document is one segment. The value chosen is printed and saved with the model."""
    max_training_segments: int = 3
    """In training, a longer document is cut to a random run of this many segments (memory); also the
    number of segment-distance buckets (released: 3)."""
    max_span_width: int = 30
    """Longest candidate mention, in sub-tokens (§4.1 / Lee et al.: 30)."""
    top_span_ratio: float = 0.4
    """Keep the top λ·T spans by mention score (λ = 0.4, T = sub-tokens)."""
    max_top_spans: int = 3900
    """At most this many kept spans per document, whatever λ·T is (released code: 3900)."""
    max_top_antecedents: int = 50
    """Antecedents per span kept by the coarse scorer (K = 50)."""
    ffnn_size: int = 3000
    """Hidden width of the mention and pair scorers (reference: 3000; use ~150-300 on CPU)."""
    ffnn_depth: int = 1
    """Hidden layers of the mention and pair scorers."""
    feature_size: int = 20
    """Width of the span-width, distance, speaker and genre embeddings."""
    dropout: float = 0.3
    """Dropout on the scorers' hidden layers, the width / distance / pair-feature embeddings and the
    coarse scorer's two sides (released: 0.3)."""
    token_dropout: float = 0.0
    """Dropout on the encoder's sub-token states before the span representations (released code:
    none, only the encoder's own hidden dropout; earlier spanbert versions used --dropout here)."""
    use_segment_distance: bool = True
    """Add the segment distance of a mention and its antecedent (clipped to max_training_segments - 1)
    as a pair feature of the fine scorer, as the released model does."""
    coref_depth: int = 2
    """Rounds of antecedent scoring; rounds after the first use spans refined by attention over their
    antecedents (higher-order inference, Lee et al. 2018). 1 = no refinement."""
    singletons: str = "auto"
    """Predict singleton entities: true, false, or auto (true when the training key has singletons,
    as LitBank does; OntoNotes has none). Adds a mention-detection loss on candidate spans."""
    encoder_learning_rate: float = 1e-5
    """Peak learning rate of the encoder (`bert.*`); --learning_rate is the task layers' (Appendix B:
    1e-5 / 2e-5 encoder, 1e-4 ... 3e-4 task)."""
    task_weight_decay: float = 0.0
    """AdamW weight decay of the task layers (released: none); --weight_decay is the encoder's."""
    separate_clipping: bool = True
    """Clip the encoder's and the task layers' gradients separately, each to --max_grad_norm (released
    code); false = one global norm over all parameters."""
    gradient_checkpointing: bool = False
    """Recompute encoder activations in the backward pass (less memory, more compute)."""


# Appendix B: one document per step, task layers 2e-4 (a point of the grid {1e-4, 2e-4, 3e-4}; the encoder's
# 1e-5 is in CorefConfig), 20 epochs; 10% warm-up as the released code. The model of the best dev CoNLL F1
# is kept, evaluated about as often as the released run (every 1,000 of OntoNotes' 2,802 documents).
DEFAULTS: dict[str, Any] = dict(
    output_dir="runs/coref", learning_rate=2e-4, per_device_train_batch_size=1, num_train_epochs=20.0,
    warmup_ratio=0.1, logging_steps=10, save_steps=500, evals_per_epoch=3, metric_for_best_model="conll_f1",
)

# The released SpanBERT coreference runs (mandarjoshi90/coref `experiments.conf` sections spanbert_base and
# spanbert_large, over its `best` section; `optimization.py`; `train.py`): settings of `TrainingArguments`
# ("training") and `CorefConfig` ("coref"). `spanbert finetune coref --preset NAME`; flags and --config win.
_RELEASED_TRAINING: dict[str, Any] = dict(
    num_train_epochs=20.0,  # num_epochs = 20
    per_device_train_batch_size=1,  # single_example = true: one document per step
    warmup_ratio=0.1,  # num_warmup_steps = 0.1 * num_train_steps (optimization.py)
    lr_scheduler_type="linear",  # polynomial_decay(power=1.0) to 0
    adam_epsilon=1e-6,  # adam_eps = 1e-6
    weight_decay=0.01,  # AdamWeightDecayOptimizer(weight_decay_rate=0.01), not LayerNorm / bias
    max_grad_norm=1.0,  # clip_by_global_norm(clip_norm=1.0), encoder and task layers apart
    eval_steps=1000,  # eval_frequency = 1000
    evals_per_epoch=0,
    metric_for_best_model="conll_f1",  # model.max.ckpt = the best dev F1 (train.py)
    greater_is_better=True,
)
_RELEASED_MODEL: dict[str, Any] = dict(
    max_training_segments=3,  # max_training_sentences = 3
    max_span_width=30,
    top_span_ratio=0.4,
    max_top_spans=3900,  # k = min(3900, floor(num_words * top_span_ratio))
    max_top_antecedents=50,
    ffnn_size=3000,
    ffnn_depth=1,
    feature_size=20,
    dropout=0.3,  # dropout_rate
    token_dropout=0.0,  # no dropout on the encoder output in independent.py
    coref_depth=2,
    use_segment_distance=True,
    task_weight_decay=0.0,  # task_optimizer = adam (tf.train.AdamOptimizer, no decay)
    separate_clipping=True,
)
COREF_PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "spanbert_base": {
        "training": {**_RELEASED_TRAINING, "learning_rate": 1e-4},  # task_learning_rate = 0.0001
        "coref": {**_RELEASED_MODEL, "max_seq_length": 384, "encoder_learning_rate": 2e-5},
    },
    "spanbert_large": {
        "training": {**_RELEASED_TRAINING, "learning_rate": 3e-4},  # task_learning_rate = 0.0003
        "coref": {**_RELEASED_MODEL, "max_seq_length": 512, "encoder_learning_rate": 1e-5},
    },
}




def _preset(given: Mapping[str, Any], part: str) -> dict[str, Any]:
    """The ``part`` ("training" or "coref") of the ``--preset`` given (none: nothing; an unknown name is
    refused by the option's choices)."""
    return dict(COREF_PRESETS.get(str(given.get("preset")), {}).get(part, {}))


@dataclass(kw_only=True)
class CorefFinetune(Finetune):
    """``spanbert finetune coref --model DIR --train CONLL [--dev CONLL]``: one run (no --sweep); values
    come from the defaults < ``--preset`` < ``--config`` YAML < flags < ``key=value``."""

    train: str = option(path="input")
    """CoNLL-2012 file or folder of *.conll[.gz] files to train on"""
    dev: str | None = option(None, path="input")
    """CoNLL-2012 file or folder scored during training (every --eval_steps, or --evals_per_epoch times an
    epoch) and at the end; the model of the best --metric_for_best_model (conll_f1) is kept"""
    preset: str | None = option(None, choices=tuple(sorted(COREF_PRESETS)))
    """the released SpanBERT coreference settings (mandarjoshi90/coref experiments.conf): spanbert_base
    (segments 384, encoder 2e-5, task 1e-4) or spanbert_large (512, 1e-5, 3e-4), with Adam eps 1e-6, dev
    evaluation every 1000 steps, ...; options given on the command line or in --config win"""
    max_eval_examples: int | None = None
    """use only the first N dev documents"""
    coref: CorefConfig = nested(CorefConfig, defaults=lambda given: _preset(given, "coref"), title="coreference model",
                                shown={"max_seq_length": "unset, following the encoder"})  # fmt: skip
    training: TrainingArguments = nested(TrainingArguments, defaults=lambda given: {**DEFAULTS, **_preset(given, "training")},
                                         title="training")  # fmt: skip


@dataclass(kw_only=True)
class CorefPredict:
    """``spanbert predict coref --model DIR (--data CONLL --output OUT | --text TEXT)``."""

    model: str = option(path="input")
    """folder of a model saved by `spanbert finetune coref`"""
    data: str | None = option(None, path="input")
    """CoNLL-2012 file or folder to resolve"""
    text: str | None = None
    """raw text: prints its clusters as JSON with character offsets"""
    output: str | None = option(None, path="output_file")
    """CoNLL-2012 file to write (with --data)"""
    device: str = "auto"
    """cpu, cuda, cuda:N or auto"""
    disable_tqdm: bool = False
    """hide the progress bar"""
    threads: int = 0
    """CPU threads (0: the cores other processes leave free)"""


@dataclass(kw_only=True)
class CorefEvaluate:
    """``spanbert evaluate coref --gold KEY --predictions RESPONSE``: MUC, B3, CEAF-e and their mean."""

    gold: str = option(path="input")
    """gold CoNLL-2012 file or folder (the key)"""
    predictions: str = option(path="input")
    """CoNLL-2012 file written by `spanbert predict coref` (the response)"""


ACTIONS = {"finetune": CorefFinetune, "predict": CorefPredict, "evaluate": CorefEvaluate}
"""Each action's options, for the registry (`spanbert.tasks.registry.TASKS.options`)."""
