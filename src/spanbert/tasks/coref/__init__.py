"""Coreference resolution: CoNLL-2012 reader/writer, segments, the coarse-to-fine span-ranking model, CLI.

The model is the higher-order coarse-to-fine model of Lee et al. (2018) with the encoder replaced by
(Span)BERT as in Joshi et al. (2019), the "independent" variant SpanBERT §4.1 uses: a document is cut
into non-overlapping segments of up to `max_seq_length` sub-tokens, each encoded on its own, and the
task layers run over the concatenated sub-token states. Everything is plain PyTorch: the reference's
custom C++ span-pruning op is replaced by `prune_non_crossing`, a tensorised exact equivalent.

Pipeline: `read_conll` -> `CorefDocument` (words, sentences, speakers, gold clusters as word spans)
-> `featurize` (segments of sub-token ids, sentence / speaker / word maps, gold spans in sub-tokens)
-> `CorefModel` (loss, or top spans + antecedents) -> `decode_clusters` (word spans) -> `write_conll`
/ `spanbert.metrics.coref`.

The package, each module using only those above it:

    options    the options of each action (`CorefFinetune`, `CorefPredict`, `CorefEvaluate`), `CorefConfig`,
               the fine-tuning `DEFAULTS` and `COREF_PRESETS`; no torch
    data       `CorefDocument`, the CoNLL-2012 reader and writer
    features   segments, candidate spans, the dataset and the batch (`featurize`, `CorefDataset`)
    pruning    `prune_non_crossing` and the distance buckets
    model      `CorefModel`, `decode_clusters`
    folder     a fine-tuned folder: `save_coref_model`, `load_coref_model`, `evaluate_clusters`
    predict    `CorefPredictor`, `resolve_text`
    finetune   `check_coref_config`, `finetune_coref`
    command    the command line's actions, `evaluate_files`, `LITBANK_FOLDS`, the `TaskSpec`

Every name of the single-file module is still importable from here; each is loaded from its module on
first use, so that importing the package (the options, for ``--help``) loads no torch.
"""

from __future__ import annotations

from spanbert import _aliases

# module -> the names it lends the package
_HOMES: dict[str, tuple[str, ...]] = {
    "command": (
        "LITBANK_FOLDS",
        "SPECS",
        "evaluate_files",
        "prepare_litbank_fold",
    ),
    "data": (
        "GENRES",
        "NO_SPEAKER",
        "CorefDocument",
        "Span",
        "coref_column",
        "genre_of",
        "parse_coref_column",
        "read_conll",
        "read_documents",
        "write_conll",
    ),
    "features": (
        "BERT_SEGMENT",
        "LONG_SEGMENT_CAP",
        "CorefDataset",
        "CorefFeatures",
        "candidate_spans",
        "collate_document",
        "featurize",
        "make_batch",
        "segment_length",
        "segments_line",
        "split_into_segments",
    ),
    "finetune": (
        "check_coref_config",
        "finetune_coref",
    ),
    "folder": (
        "ARCHITECTURE",
        "NEEDS",
        "check_model",
        "evaluate_clusters",
        "load_coref_model",
        "save_coref_model",
    ),
    "model": (
        "CorefModel",
        "decode_clusters",
    ),
    "predict": (
        "CorefPredictor",
        "resolve_text",
        "split_text",
    ),
    "pruning": (
        "bucket_distance",
        "crossing",
        "prune_non_crossing",
        "segment_distance",
    ),
    "options": (
        "COREF_PRESETS",
        "DEFAULTS",
        "CorefConfig",
        "CorefEvaluate",
        "CorefFinetune",
        "CorefPredict",
    ),
}
__getattr__, __dir__ = _aliases.package_names(__name__, _HOMES)
