"""The options of ``spanbert finetune|predict|evaluate probe`` and of ``spanbert probe``, one dataclass an
action; the settings a span probe keeps (`ProbeConfig`) and its training defaults (`DEFAULTS`). No torch:
``--help`` is built from these alone (`spanbert.tasks.options`).

The ``--probe`` and ``--train_file`` help lists the probe sets of `spanbert.tasks.probe_sets` (written out:
a field's help is its docstring; `tests/test_probe_options.py` keeps the two the same)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from spanbert.errors import SpanBertError
from spanbert.tasks.options import Finetune, Inference, nested, option
from spanbert.tasks.probe_sets import DATA_SEED, NAMES
from spanbert.training_args import TrainingArguments

LAYERS = ("all", "0")
POOLINGS = ("attention", "endpoints")
DTYPES = ("float16", "float32")
"""Storage types of the cached hidden states (`spanbert.tasks.probe_features`)."""


@dataclasses.dataclass
class ProbeConfig:
    """Options of a span probe (`spanbert finetune probe`)."""

    layers: str = "all"
    """all: a learned scalar mix of the encoder's num_layers + 1 hidden states (ELMo's, as the paper); 0: hidden state 0 alone, the embeddings' output (token and position, no context: the paper's lexical baseline)."""
    pooling: str = "attention"
    """A span's sub-word states to one vector: attention (self-attentive pooling, Lee et al. 2017, as the paper) or endpoints (its first and last sub-word, concatenated)."""
    projection_dim: int = 256
    """Width of the per-span projection before pooling (the paper: 256)."""
    mlp_hidden_size: int = 256
    """Hidden units of the classifier MLP (the paper: 256; tanh, LayerNorm, dropout)."""
    head_dropout: float = 0.3
    """Dropout in the classifier MLP (jiant's edge-probing setting: 0.3)."""
    max_train_examples: int | None = None
    """Training targets: a fixed subsample drawn with --data_seed; default: the probe's (docs/probes.md); 0: all."""
    max_eval_examples: int | None = None
    """Dev targets, and the test targets `spanbert evaluate probe` scores by default: a fixed subsample; default: the probe's; 0: all."""
    data_seed: int = DATA_SEED
    """Seed of the subsamples, apart from --seed (the probe's initialisation and order), so that every encoder and every training seed is probed on the same targets."""
    features_cache: str = ""
    """Folder of the cached encoder features (one store per encoder and data; every run reuses it). Empty: $XDG_CACHE_HOME/spanbert/probe_features (~/.cache/spanbert/probe_features)."""
    feature_dtype: str = "float16"
    """Storage type of the cached hidden states: float16 (half the disk and memory) or float32."""
    extract_batch_size: int = 32
    """Texts per encoder batch when the features are computed."""

    def __post_init__(self) -> None:
        for name, choices in (("layers", LAYERS), ("pooling", POOLINGS), ("feature_dtype", DTYPES)):
            if str(getattr(self, name)) not in choices:
                raise SpanBertError(f"--{name}: found {getattr(self, name)!r}, expected one of: {', '.join(choices)}")
        self.layers = str(self.layers)
        for name in ("max_train_examples", "max_eval_examples"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise SpanBertError(f"--{name}: found {value}, expected a positive number of targets (0: all)")
        for name in ("projection_dim", "mlp_hidden_size", "extract_batch_size"):
            if getattr(self, name) < 1:
                raise SpanBertError(f"--{name}: found {getattr(self, name)}, expected a positive integer")
        if not 0.0 <= self.head_dropout < 1.0:
            raise SpanBertError(f"--head_dropout: found {self.head_dropout}, expected a rate in [0, 1)")


DEFAULTS: dict[str, Any] = dict(output_dir="runs/probe", learning_rate=1e-3, per_device_train_batch_size=32,
                                num_train_epochs=10.0, warmup_ratio=0.0, weight_decay=0.0, evals_per_epoch=1,
                                metric_for_best_model="f1", greater_is_better=True, save_steps=0, save_total_limit=1,
                                precision="fp32")  # fmt: skip
"""The probe's training (docs/probes.md, "Training"): Adam(W) without weight decay at batch 32, as the paper,
at 1e-3 for 10 epochs of the 2,000-target subsample (the paper: 1e-4, halved on plateaus, over up to 250 k
steps); one dev evaluation an epoch, the best epoch kept; float32 (a probe's matrices are too small for
bf16 to be faster, and its scores stay the same on every CPU)."""

@dataclass(kw_only=True)
class ProbeFinetune(Finetune):
    """``spanbert finetune probe --probe NAME ...``."""

    probe: str
    """which probe (entities: entity types of CoNLL-2003's gold entity spans; constituents: constituent labels of
    the PTB sample's non-terminal spans; pos: part-of-speech tags of single words (PTB sample); relations:
    SemEval-2010 Task 8 relations of the e1/e2 pairs; gap: GAP pronoun-name coreference arcs (pronoun with name A,
    pronoun with name B); litbank: LitBank mention-pair coreference arcs inside one window of sentences)"""
    train_file: str = option(path="input", flags=("--train",))
    """the probe's training data: entities: CoNLL-2003 IOB files; constituents: Penn Treebank .mrg files or
    folders; pos: Penn Treebank .mrg files or folders; relations: SemEval-2010 Task 8 files (or TACRED JSON); gap:
    GAP TSV files; litbank: LitBank tenfold_splits .ids files, or CoNLL-2012 files or folders"""
    validation_file: str = option(path="input", flags=("--dev",))
    """dev data: the best epoch is kept by its micro F1; the training file itself for a data set without dev
    (SemEval): a fixed 10% of it is carved out as dev"""
    max_seq_length: int | None = option(None, metavar="N")
    """tokens of an encoder input (a longer text is cut to a window around its targets) (default: 128, or the
    encoder's positions when it has fewer)"""
    probe_config: ProbeConfig = nested(ProbeConfig, title="probe")
    # no family defaults: every encoder is probed with the one recipe (docs/probes.md, "optimisation")
    training: TrainingArguments = nested(TrainingArguments, defaults=DEFAULTS, title="training")


@dataclass(kw_only=True)
class _ProbeScoring(Inference):
    """What ``predict`` and ``evaluate`` share: the probe, the labelled data and its subsample."""

    probe: str | None = None
    """which probe (entities: entity types of CoNLL-2003's gold entity spans; constituents: constituent labels of
    the PTB sample's non-terminal spans; pos: part-of-speech tags of single words (PTB sample); relations:
    SemEval-2010 Task 8 relations of the e1/e2 pairs; gap: GAP pronoun-name coreference arcs (pronoun with name A,
    pronoun with name B); litbank: LitBank mention-pair coreference arcs inside one window of sentences); default:
    the one the model folder holds"""
    data: str = option(path="input")
    """labelled data in the probe's format (a test file)"""
    max_examples: int | None = option(None, metavar="N")
    """targets of the fixed subsample scored (default: the dev size of the probe's run, spanbert finetune probe
    --max_eval_examples; 0: all)"""
    features_cache: str | None = None
    """folder of the cached encoder features (default: the one the probe's training run used)"""


@dataclass(kw_only=True)
class ProbePredict(_ProbeScoring):
    """``spanbert predict probe --model RUN --data FILE --output PRED.jsonl``."""

    model: str = option(path="input")
    """folder saved by `spanbert finetune probe`"""
    output: str = option(path="output_file")
    """JSON lines to write: one per target (id, target, spans, gold, predicted)"""
    batch_size: int = 64
    """targets per batch"""


@dataclass(kw_only=True)
class ProbeEvaluate(_ProbeScoring):
    """``spanbert evaluate probe --model RUN --data TEST [--example_stats FILE]`` (or ``--predictions``)."""

    model: str | None = option(None, path="input")
    """folder saved by `spanbert finetune probe`: predict, then score"""
    predictions: str | None = option(None, path="input")
    """file written by `spanbert predict probe` (needs --probe)"""
    example_stats: str | None = option(None, metavar="FILE")
    """also write per-example statistics (one row a text: true positives, predicted labels, gold labels) for
    resampled intervals (spanbert.metrics.resample)"""
    batch_size: int = 64
    """targets per batch with --model"""


ACTIONS = {"finetune": ProbeFinetune, "predict": ProbePredict, "evaluate": ProbeEvaluate}
"""Each action's options, for the registry (`spanbert.tasks.registry.TASKS.options`)."""


# --------------------------------------------------------------------------- spanbert probe


PROBE_DESCRIPTION = (
    "Run every span probe (edge probing, Tenney et al. 2019: entity types, constituent labels, POS, SemEval relations, "
    "GAP and LitBank coreference arcs) on one frozen encoder, with a scalar mix of all its layers and with layer 0 "
    "alone (the embeddings: what the words give without context), and print one table of dev and test micro F1. "
    "docs/probes.md describes the set-up."
)
PROBE_EXAMPLES = """examples:
  spanbert probe --model runs/spanbert-small/final
  spanbert probe --model runs/spanbert-small/final --probes entities,pos --layers all
  torchrun --nproc_per_node 2 -m spanbert probe --model runs/spanbert-small/final"""




@dataclass(kw_only=True)
class ProbeRun:
    """``spanbert probe``: every span probe on one encoder, with all its layers and with layer 0 only."""

    HELP: ClassVar[tuple[str, str]] = (PROBE_DESCRIPTION, PROBE_EXAMPLES)
    """What ``spanbert probe --help`` opens and closes with (`spanbert.cli.TYPED_COMMANDS`)."""

    model: str = option(path="input")
    """the encoder folder (any family: a `spanbert pretrain` final/, an HF BERT folder)"""
    data_root: str = option("../shared/data", path="input")
    """the folder holding conll2003/, ptb_sample/, semeval2010_task8/, gap_coreference/ and litbank_coref/"""
    output_dir: str | None = option(None, path="output_folder")
    """where the runs, the table and results.json go (default: runs/probe-NAME, NAME the model folder's, or its
    run's for final/)"""
    probes: str = ",".join(NAMES)
    """comma list of probes to run"""
    layers: str = "all,0"
    """comma list of rows: all (the scalar mix of every layer) and 0 (the embeddings' output alone)"""
    learning_rate: float | None = None
    """the probes' rate (default: spanbert finetune probe's, 1e-3)"""
    num_train_epochs: float | None = None
    """epochs of each probe (default: 10)"""
    seed: int | None = None
    """the probes' initialisation and training order (the subsamples are fixed by --data_seed, not by this)"""
    data_seed: int | None = None
    """seed of the fixed subsamples (default: 2019, the same for every encoder)"""
    max_train_examples: int | None = option(None, metavar="N")
    """training targets of each probe (default: the probe's own, docs/probes.md; 0: all)"""
    max_eval_examples: int | None = option(None, metavar="N")
    """dev and test targets of each probe (default: the probe's own; 0: all)"""
    max_seq_length: int | None = option(None, metavar="N")
    """tokens of an encoder input (default: 128, or the encoder's positions when fewer)"""
    features_cache: str | None = None
    """folder of the cached encoder features (default: $XDG_CACHE_HOME/spanbert/probe_features, shared with
    spanbert finetune probe)"""
    device: str = "auto"
    """auto, cpu, cuda, cuda:N"""
    overwrite_output_dir: bool = False
    """redo the runs already finished in --output_dir"""
    disable_tqdm: bool = False
    """hide the progress bars"""
    threads: int = 0
    """CPU threads (0: the cores other processes leave free)"""
