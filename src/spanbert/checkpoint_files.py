"""The names a model folder holds (any family's, spanbert's and transformers' saves): what a folder save may
replace (`spanbert.checkpoints.save_folder`) and what no command's output may be written over
(`spanbert.utils.check_apart`: a predictions file beside a model is fine, a file named like one of the
model's is not). Below `utils` and `spanbert.checkpoints`, which import them."""

from __future__ import annotations

import re

from spanbert.folders import is_debris

# HF's name first; `bert_config.json` is the original Google BERT and SpanBERT release name (the
# released fine-tuning code reads either, in this order).
CONFIG_FILES = ("config.json", "bert_config.json")
SBO_FILE = "span_boundary_head.safetensors"
"""The span boundary head of a pre-training folder, beside model.safetensors so that transformers
loads the main file (`BertForMaskedLM`, `BertForPreTraining`) without warnings."""
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", SBO_FILE)
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json")
MODEL_FILES = (*CONFIG_FILES, *WEIGHT_FILES, *TOKENIZER_FILES, "generation_config.json", "train_metrics.json")
"""Every name a save of a model (any family; spanbert's, and HF's `save_pretrained`) or a pre-training
export writes into a model folder. A folder save (`save_folder`) replaces a folder that holds only
these (an earlier save: none of its files survives beside the new model's) and refuses any other."""
_SHARD = re.compile(r"model-\d+-of-\d+\.safetensors")  # HF's sharded weights, named by the index


def is_model_file(name: str) -> bool:
    """True for a name in `MODEL_FILES`, a weights shard, or what a killed atomic write left."""
    return name in MODEL_FILES or bool(_SHARD.fullmatch(name)) or is_debris(name)


