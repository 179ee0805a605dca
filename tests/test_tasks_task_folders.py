"""A task's model folders (`spanbert.tasks.task_folders`): a fine-tuned model saved and loaded back with its
head and weights, a folder saved for another task refused, a sequence length the encoder has no positions
for refused before any data is read. Each task's own folders are tested with it (test_qa.py, test_glue.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from spanbert.errors import SpanBertError
from spanbert.tasks.task_folders import (
    check_sequence_length,
    check_task_settings,
    load_encoder,
    load_task_model,
    save_finetuned,
)


class _Tagger(nn.Module):
    def __init__(self, encoder: nn.Module, labels: int = 3):
        super().__init__()
        self.bert = encoder
        self.classifier = nn.Linear(encoder.config.hidden_size, labels)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    from spanbert.config import model_config
    from spanbert.model import Encoder
    from spanbert.tokenization import train_tokenizer

    tok = train_tokenizer(None, 60, texts=["a tiny text for a tiny vocabulary"] * 5, show_progress=False)
    root = tmp_path_factory.mktemp("folders")
    Encoder(model_config("tiny", vocab_size=tok.vocab_size, max_position_embeddings=32)).save_pretrained(
        root / "pre", tokenizer=tok
    )
    torch.manual_seed(0)
    model = _Tagger(load_encoder(root / "pre"))
    save_finetuned(model, root / "tagger", tok, "BertForTokenClassification", {"spanbert": {"task": "ner"}})
    return root, model


def test_a_saved_task_model_loads_back_with_its_weights(saved):
    root, model = saved
    loaded, config_json, tokenizer = load_task_model(
        root / "tagger", lambda enc, cfg: _Tagger(enc), ("BertForTokenClassification",), "an NER model"
    )
    assert config_json["spanbert"]["task"] == "ner" and tokenizer is not None
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), loaded.state_dict().values()))
    assert not loaded.training


def test_a_folder_saved_for_another_task_is_refused(saved):
    root, _ = saved
    _, settings = check_task_settings(root / "tagger", ("BertForTokenClassification",), "an NER model", ("ner",))
    assert settings == {"task": "ner"}
    with pytest.raises(SpanBertError, match="found a ner model, expected a parse model"):
        check_task_settings(root / "tagger", ("BertForTokenClassification",), "a parse model", ("parse",))


def test_a_sequence_length_past_the_encoders_positions_is_refused(saved):
    root, _ = saved
    check_sequence_length(root / "pre", 32)
    with pytest.raises(SpanBertError, match=r"found 33, expected at most the 32 positions"):
        check_sequence_length(root / "pre", 33)
    with pytest.raises(SpanBertError, match="expected a positive integer"):
        check_sequence_length(root / "pre", 0)
    check_sequence_length("no/such/folder", 10_000)  # not a local folder: checked where the task loads it
