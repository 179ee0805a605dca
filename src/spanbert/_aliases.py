"""Old spellings of moved names, all in one table.

A name has one home, the module that defines it. Where users were told to import a name from
somewhere else (a facade that re-exported it, its module before a split, its name before a rename),
that old spelling stays here: the module that held it ends with ``__getattr__ = _aliases.getter(__name__)``
(PEP 562), so ``spanbert.data.TokenCorpus`` or ``from spanbert.data import preprocess`` resolves to the
object in its home, with a DeprecationWarning that names the home. Spanbert's own modules, tests and
benchmarks import from the homes (tests/test_aliases.py reads the source to check).

Nothing is imported here until an old spelling is used, so any module may import this one.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any


def _moved(home: str, *names: str) -> dict[str, tuple[str, str]]:
    return {name: (home, name) for name in names}


OLD_SPELLINGS: dict[str, dict[str, tuple[str, str]]] = {
    # the study's task entry was a second `TaskSpec` beside the tasks' own (spanbert.tasks.spec): renamed
    "spanbert.study.spec": {"TaskSpec": ("spanbert.study.spec", "StudyTask")},
    "spanbert.study": {"TaskSpec": ("spanbert.study.spec", "StudyTask")},
    # users import the pre-training data's names from here: docs/data.md and docs/architecture.md said it
    # re-exported all six modules, and its docstring promised the lower modules' names it imported
    "spanbert.data": {
        **_moved("spanbert.preprocess", "NUMERIC_ENTITY_LABELS", "PreprocessConfig", "builtin_corpus",
                 "iter_documents", "load_spacy", "main", "preprocess", "write_static_masks"),
        **_moved("spanbert.corpus", "CANDIDATE_KINDS", "FORMAT", "STATIC_FORMAT", "TokenCorpus", "has_tokenizer",
                 "is_preprocessed", "tokenizer_dir_of"),
        **_moved("spanbert.blocks", "BLOCK_PACKINGS", "block_ends_mid_word", "held_out_documents", "nsp_pairs",
                 "sentence_blocks", "single_segment_blocks"),
        **_moved("spanbert.static_masks", "StaticMaskingConfig", "find_static_masks", "static_mask_sets",
                 "static_settings"),
        **_moved("spanbert.dataset", "PretrainDataset", "example_generator"),
        **_moved("spanbert.collate", "collate_pretrain", "make_collate", "pretrain_dataloader",
                 "pretrain_target_counts"),
        **_moved("spanbert.errors", "DataError", "SpanBertError"),
        **_moved("spanbert.masking", "IGNORE_INDEX", "SCHEMES", "MaskingConfig", "MaskResult", "UnigramSampler",
                 "check_replace_probs", "mask_block"),
        **_moved("spanbert.tokenization", "Tokenizer", "corpus_files", "is_jsonl", "iter_lines", "load_tokenizer",
                 "parse_jsonl_text"),
        **_moved("spanbert.utils", "atomic_dir", "atomic_write"),
    },
    # docs/architecture.md ("Model") told task authors to take the checkpoint helpers from the model file
    "spanbert.model": {
        **_moved("spanbert.checkpoint_files", "CONFIG_FILES", "SBO_FILE"),
        **_moved("spanbert.checkpoints", "check_checkpoint", "read_json", "read_safetensors", "save_checkpoint"),
    },
    # docs/architecture.md and docs/pretraining.md named these importable from `spanbert.pretrain` (the
    # systems and parsers live where no torch is loaded, the samplers and collates with their kin)
    "spanbert.pretrain": {
        **_moved("spanbert.pretrain_config", "CAUSAL_SYSTEMS", "FAMILY_CHOICES", "MIN_SEQ_LENGTH", "STATIC_MASKS",
                 "SYSTEMS", "fill_parser"),
        **_moved("spanbert.samplers", "CausalLMBlocks"),
        **_moved("spanbert.cloze", "ClozeBlocks", "cloze_collate"),
        # the plan's cost, apart from the job since issue 59
        **_moved("spanbert.pretrain_plan", "LONG_PRETRAIN_HINT", "plan_flops", "refuse_long_plan", "plan_warning"),
        **_moved("spanbert.cost", "ASSUMED_FLOPS", "LONG_PLAN_SECONDS"),
        # the command line and the Python entry, apart from the job since issue 59
        **_moved("spanbert.pretrain_command", "main", "preset_line", "scale_warmup", "quick_start_in_force",
                 "named_options", "pretrain_from_keywords"),
        # the run's data (sources checked, corpus prepared, blocks built), apart from the job since issue 59
        **_moved("spanbert.pretrain_data", "prepare_data", "build_datasets", "uses_static_masks",
                 "check_corpus_vocabulary", "corpus_or_builtin", "reuse_prepared", "build_cloze_datasets"),
    },
    # the defaults of selection on dev went where the option classes are, which import no torch (issue 59)
    "spanbert.tasks.selection": _moved("spanbert.tasks.options", "EVALS_PER_EPOCH", "EVAL_SHARE", "selection_defaults"),
    # tasks/common.py was split by idea (issue 59); docs/tasks.md told task authors to import from it
    "spanbert.tasks.common": {
        # the argv helpers (add_switch, task_parser, parse_task_args, finetune_command, ...) are gone: a task's
        # actions take typed options (`spanbert.tasks.options`, docs/architecture.md "Adding a task")
        **_moved("spanbert.tasks.finetuning", "SEQ_LENGTH", "TRAINING_INPUTS", "check_training_text",
                 "finetune_results", "check_output_dir"),
        **_moved("spanbert.tasks.options", "EVALS_PER_EPOCH", "EVAL_SHARE", "selection_defaults", "ACTION_SENTENCES"),
        **_moved("spanbert.tasks.selection", "SWEEP_LEARNING_RATES", "SWEEP_BATCH_SIZES", "sweep_grid", "KeepBest", "planned_steps", "selection_summary",
                 "SELECTION_KEYS", "cell_arguments", "SWEEP_SUMMARY", "WEIGHT_FILES", "prune_run", "sweep"),
        **_moved("spanbert.tasks.ranks", "print_metrics", "start_distributed", "write_once", "predict_sharded",
                 "seeded_model", "write_json_once"),
        **_moved("spanbert.tasks.batching", "length_batches", "cpu_batch_tokens"),
        **_moved("spanbert.tasks.task_folders", "model_positions", "check_sequence_length", "load_encoder",
                 "load_tokenizer_for", "save_finetuned", "check_task_settings", "load_finetuned", "load_task_model"),
        **_moved("spanbert.tasks.scores", "percent", "match_by_id", "warn_unseen"),
        "write_json": ("spanbert.tasks.ranks", "write_json_once"),
    },
    # the two-tower family's config, presets and --model spec went to their own torch-free module
    "spanbert.config": _moved("spanbert.cloze_config", "CLOZE_MODEL_TYPE", "CLOZE_SYSTEMS", "PAPER_CHAR_FILTERS",
                              "ClozeConfig", "CLOZE_PRESETS", "parse_model_spec"),
    # the two-tower family's blocks and batches went to its module (issue 59)
    "spanbert.samplers": _moved("spanbert.cloze", "ClozeBlocks"),
    "spanbert.collate": _moved("spanbert.cloze", "cloze_collate"),
    # a task's defaults and settings went to its torch-free options module, for --help (issue 59)
    "spanbert.tasks.ner": _moved("spanbert.tasks.ner_options", "DEFAULTS"),
    "spanbert.tasks.ner_features": {"DEFAULTS": ("spanbert.tasks.ner_options", "FEATURES_DEFAULTS")},
    "spanbert.tasks.crf_tagger": {"TRAINING_DEFAULTS": ("spanbert.tasks.ner_options", "CRF_DEFAULTS"),
                                  "OLD_FLAGS": ("spanbert.tasks.ner_options", "OLD_FLAGS")},
    "spanbert.tasks.coref.finetune": _moved("spanbert.tasks.coref.options", "DEFAULTS", "COREF_PRESETS"),
    "spanbert.tasks.parse": _moved("spanbert.tasks.parse_options", "DEFAULTS"),
    "spanbert.tasks.glue": _moved("spanbert.tasks.glue_options", "default_arguments"),
    "spanbert.tasks.probe": _moved("spanbert.tasks.probe_options", "DEFAULTS", "LAYERS", "POOLINGS"),
    "spanbert.tasks.probe_features": _moved("spanbert.tasks.probe_options", "DTYPES"),
    "spanbert.tasks.probe_command": {"DESCRIPTION": ("spanbert.tasks.probe_options", "PROBE_DESCRIPTION"),
                                     "EXAMPLES": ("spanbert.tasks.probe_options", "PROBE_EXAMPLES")},
    # a run's options as a command line: what the study records of a cell since every task takes typed options
    "spanbert.tasks.spec": {"options_argv": ("spanbert.study.runner", "options_argv")},
    # docs/architecture.md listed `families.load_tokenizer`; renamed apart from `tokenization.load_tokenizer`,
    # which reads a plain tokenizer where this one frames it for the checkpoint's family
    "spanbert.families": {"load_tokenizer": ("spanbert.families", "load_framed_tokenizer")},
}  # fmt: skip
"""old module -> {old name: (home module, name there)}."""


def resolve(module: str, name: str) -> Any:
    """The object ``module.name`` spells, from its home; AttributeError when ``name`` is no old spelling."""
    try:
        home, new = OLD_SPELLINGS[module][name]
    except KeyError:
        raise AttributeError(f"module {module!r} has no attribute {name!r}") from None
    return getattr(importlib.import_module(home), new)


def getter(module: str, stacklevel: int = 2) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``module``: its old spellings, each with a DeprecationWarning that points at the
    caller (``stacklevel``: 3 when a module's own ``__getattr__`` calls this one's)."""

    def __getattr__(name: str) -> Any:
        value = resolve(module, name)
        home, new = OLD_SPELLINGS[module][name]
        warnings.warn(f"{module}.{name} moved to {home}.{new}; import it from there", DeprecationWarning,
                      stacklevel=stacklevel)  # fmt: skip
        return value

    return __getattr__


def package_names(
    package: str, homes: dict[str, tuple[str, ...]], submodules: tuple[str, ...] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` of a package whose names live in its submodules (``homes``: submodule, or a
    whole module path ``spanbert.x``, -> the names it lends the package): each is imported from its home on
    first use and kept, so importing the package loads none of them (a task's options, for ``--help``, load
    no torch). ``submodules``: the package's modules reachable as attributes (``spanbert.study.cells``). A
    name that is neither is an old spelling (`OLD_SPELLINGS`, with its warning) or an AttributeError."""
    home_of = {name: module for module, names in homes.items() for name in names}
    namespace = importlib.import_module(package).__dict__
    old = getter(package, stacklevel=3)

    def getattr_(name: str) -> Any:
        if name in submodules:
            return importlib.import_module(f"{package}.{name}")
        if name not in home_of:
            return old(name)
        home = home_of[name]
        value = getattr(importlib.import_module(home if home.startswith("spanbert.") else f"{package}.{home}"), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(home_of) | set(submodules))

    return getattr_, dir_
