"""What relation extraction, GLUE and NER share (`spanbert.tasks.classification`): a text or a pair framed and cut
longest-first, features padded into a batch (token labels, classes or regression targets), a head's labels written
to config.json and read back with clean errors, and feature lengths for the trainer. The heads at work are tested
with each task (test_glue.py, test_ner.py, test_relation.py), a two-tower model's habits in test_cloze_finetune.py."""

from __future__ import annotations

import pytest
import torch

from spanbert.errors import DataError, SpanBertError
from spanbert.tasks.classification import Collator, label_config, labels_from_config, pair_input


def test_a_pair_is_cut_longest_first_and_framed():
    ids, types, removed = pair_input(101, 102, [1, 2, 3, 4, 5], [6, 7], 8)
    assert ids.tolist() == [101, 1, 2, 3, 102, 6, 7, 102] and types.tolist() == [0, 0, 0, 0, 0, 1, 1, 1]
    assert removed == 2
    ids, types, removed = pair_input(101, 102, [1, 2, 3], None, 4)
    assert ids.tolist() == [101, 1, 2, 102] and types.tolist() == [0, 0, 0, 0] and removed == 1
    ids, _, _ = pair_input(0, 2, [5], [6], 8, mid_id=3)  # the two-tower framing: <s> a <sep> b </s>
    assert ids.tolist() == [0, 5, 3, 6, 2]
    with pytest.raises(SpanBertError, match="max_seq_length=4 is too short"):
        pair_input(101, 102, [1], [2], 4)


def test_features_are_padded_into_a_batch():
    batch = Collator(pad_id=0)([{"input_ids": [5, 6, 7], "labels": [1, 2, 3], "example_index": 0},
                                {"input_ids": [8], "token_type_ids": [1], "labels": [4]}])  # fmt: skip
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert batch["token_type_ids"].tolist() == [[0, 0, 0], [1, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["labels"].tolist() == [[1, 2, 3], [4, -100, -100]] and "example_index" not in batch
    same = Collator(pad_id=0)([{"input_ids": [1, 2], "labels": 1}, {"input_ids": [3, 4], "labels": 0}])
    assert "attention_mask" not in same and same["labels"].tolist() == [1, 0]  # no padding, no mask
    scores = Collator(pad_id=0)([{"input_ids": [1], "labels": 0.5}, {"input_ids": [2], "labels": 4.0}])
    assert scores["labels"].dtype == torch.float32 and scores["labels"].tolist() == [0.5, 4.0]


def test_a_heads_labels_round_trip_through_config_json():
    labels = ["no_relation", "per:title"]
    assert labels_from_config(label_config(labels)) == labels
    assert labels_from_config(label_config(None)) is None  # regression
    for bad, says in [({"id2label": None}, "found id2label None"),
                      ({"id2label": {"1": "a"}}, r"found id2label keys \['1'\]; expected 0..0"),
                      ({"id2label": {"0": "a", "1": "a"}}, r"found id2label values .*; expected distinct label strings"),
                      ({"id2label": {"0": "a"}, "num_labels": 2}, "found num_labels 2; expected 1")]:  # fmt: skip
        with pytest.raises(DataError, match=rf"^model/config.json: {says}"):
            labels_from_config(bad, "model/config.json")


def test_feature_lengths_count_every_choice_of_unequal_length():
    # the trainer's cost estimate and token-budget batching read lengths(); SWAG's four choices differ in
    # length, which np.asarray cannot make one array of
    from spanbert.tasks.classification import FeatureDataset

    ds = FeatureDataset([{"input_ids": [[1, 2, 3], [1, 2], [1], [1, 2, 3, 4]]}, {"input_ids": [5, 6]}])
    assert ds.lengths().tolist() == [10, 2]
