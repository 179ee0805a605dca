"""The names a model folder holds (`spanbert.checkpoint_files`): every name a save of any family writes, listed
once, and what counts as one of them (a weights shard, a killed write's temporary). What a folder save does with
them is tested in test_checkpoints.py, what no output may be written over in test_utils.py."""

from __future__ import annotations

import pytest

from spanbert import checkpoint_files

OWN = ["config.json", "bert_config.json", "model.safetensors", "pytorch_model.bin", "span_boundary_head.safetensors",
       "vocab.txt", "tokenizer.json", "model-00002-of-00003.safetensors", ".config.json.x1.tmp", ".final.tmp-zz"]


@pytest.mark.parametrize("name", OWN)
def test_a_models_own_names_and_its_debris_are_model_files(name):
    assert checkpoint_files.is_model_file(name)


@pytest.mark.parametrize("name", ["notes.txt", "test_pred.txt", "model-1-of-two.safetensors", "model.safetensors.bak",
                                  "log.jsonl", "checkpoint-4", "config.json.old"])
def test_other_names_are_not(name):
    assert not checkpoint_files.is_model_file(name)


def test_every_list_is_part_of_the_model_files():
    files = set(checkpoint_files.MODEL_FILES)
    assert len(files) == len(checkpoint_files.MODEL_FILES)  # each name once
    assert files >= {*checkpoint_files.CONFIG_FILES, *checkpoint_files.WEIGHT_FILES, *checkpoint_files.TOKENIZER_FILES}
    assert checkpoint_files.CONFIG_FILES[0] == "config.json"  # transformers' name is read first


def test_model_files_are_listed_once():
    assert checkpoint_files.SBO_FILE in checkpoint_files.MODEL_FILES
    assert checkpoint_files.is_model_file("model-00001-of-00002.safetensors")
    assert checkpoint_files.is_model_file(".model.safetensors.abcd.tmp")
    assert not checkpoint_files.is_model_file("notes.txt")
