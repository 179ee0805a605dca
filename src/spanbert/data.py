"""The old spelling of the pre-training data's names: each lives in the module of its idea.

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

Import them from there. `spanbert.data.TokenCorpus`, `from spanbert.data import preprocess` and the
other names this module once held still resolve, with a DeprecationWarning (`spanbert._aliases`).
"""

from __future__ import annotations

from spanbert import _aliases

__getattr__ = _aliases.getter(__name__)
__all__ = sorted(_aliases.OLD_SPELLINGS[__name__])  # `from spanbert.data import *`, as before (each name warns)
