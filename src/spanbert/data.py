"""Pre-training data, one idea per module; this module re-exports their public names.

The data flows text -> tokens on disk -> blocks -> masked examples -> batches:

    spanbert.preprocess     `spanbert preprocess`: text files -> tokenizer workers -> shards on disk
                            (`preprocess`, `iter_documents`, `PreprocessConfig`, `main`), the stored
                            static masks (`write_static_masks`) and the quick-start text (`builtin_corpus`)
    spanbert.corpus         the preprocessed folder read back memory-mapped (`TokenCorpus`,
                            `is_preprocessed`, `has_tokenizer`, `tokenizer_dir_of`, `FORMAT`)
    spanbert.blocks         token stream -> blocks: whole lines (`sentence_blocks`), fixed cuts
                            (`single_segment_blocks`), NSP pairs (`nsp_pairs`), `held_out_documents`
    spanbert.static_masks   Google BERT's stored masks: options (`StaticMaskingConfig`), settings,
                            finding and opening a set (`find_static_masks`, `static_mask_sets`)
    spanbert.dataset        blocks -> masked examples (`PretrainDataset`, `example_generator`)
    spanbert.collate        examples -> batches (`collate_pretrain`, `make_collate`,
                            `pretrain_dataloader`, `pretrain_target_counts`)

`from spanbert import data; data.TokenCorpus` and `from spanbert.data import preprocess` keep working,
as do the names data.py imported before it was split (`data.DataError`, `data.MaskingConfig`, ...).
New code may import from either place.
"""

from __future__ import annotations

from spanbert.blocks import (
    BLOCK_PACKINGS,
    block_ends_mid_word,
    held_out_documents,
    nsp_pairs,
    sentence_blocks,
    single_segment_blocks,
)
from spanbert.collate import collate_pretrain, make_collate, pretrain_dataloader, pretrain_target_counts
from spanbert.corpus import (
    CANDIDATE_KINDS,
    FORMAT,
    STATIC_FORMAT,
    TokenCorpus,
    has_tokenizer,
    is_preprocessed,
    tokenizer_dir_of,
)
from spanbert.dataset import PretrainDataset, example_generator
from spanbert.errors import DataError, SpanBertError
from spanbert.masking import (
    IGNORE_INDEX,
    SCHEMES,
    MaskingConfig,
    MaskResult,
    UnigramSampler,
    check_replace_probs,
    mask_block,
)
from spanbert.preprocess import (
    NUMERIC_ENTITY_LABELS,
    PreprocessConfig,
    builtin_corpus,
    iter_documents,
    load_spacy,
    main,
    preprocess,
    write_static_masks,
)
from spanbert.static_masks import StaticMaskingConfig, find_static_masks, static_mask_sets, static_settings
from spanbert.tokenization import Tokenizer, corpus_files, is_jsonl, iter_lines, load_tokenizer, parse_jsonl_text
from spanbert.utils import atomic_dir, atomic_write

__all__ = [
    # spanbert.preprocess
    "NUMERIC_ENTITY_LABELS",
    "PreprocessConfig",
    "builtin_corpus",
    "iter_documents",
    "load_spacy",
    "main",
    "preprocess",
    "write_static_masks",
    # spanbert.corpus
    "CANDIDATE_KINDS",
    "FORMAT",
    "STATIC_FORMAT",
    "TokenCorpus",
    "has_tokenizer",
    "is_preprocessed",
    "tokenizer_dir_of",
    # spanbert.blocks
    "BLOCK_PACKINGS",
    "block_ends_mid_word",
    "held_out_documents",
    "nsp_pairs",
    "sentence_blocks",
    "single_segment_blocks",
    # spanbert.static_masks
    "StaticMaskingConfig",
    "find_static_masks",
    "static_mask_sets",
    "static_settings",
    # spanbert.dataset
    "PretrainDataset",
    "example_generator",
    # spanbert.collate
    "collate_pretrain",
    "make_collate",
    "pretrain_dataloader",
    "pretrain_target_counts",
    # re-exported from lower modules, as before the split
    "DataError",
    "SpanBertError",
    "IGNORE_INDEX",
    "SCHEMES",
    "MaskingConfig",
    "MaskResult",
    "UnigramSampler",
    "check_replace_probs",
    "mask_block",
    "Tokenizer",
    "corpus_files",
    "is_jsonl",
    "iter_lines",
    "load_tokenizer",
    "parse_jsonl_text",
    "atomic_dir",
    "atomic_write",
]
