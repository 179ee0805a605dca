"""Task commands with several processes (`spanbert.tasks.ranks`), here in one: `write_once` runs its function
and hands back its value or its error, nested calls run directly, `predict_sharded` returns every item in order,
`seeded_model` draws the same head from the same seed. The 2-process behaviour is in test_finetune_ddp.py
and test_torchrun_exit.py."""

from __future__ import annotations

import json

import pytest
import torch

from spanbert.errors import SpanBertError
from spanbert.tasks.ranks import predict_sharded, seeded_model, start_distributed, write_json_once, write_once


def test_write_once_returns_the_value_and_raises_the_error():
    assert write_once(lambda: 41 + 1) == 42

    def fails():
        raise SpanBertError("no room")

    with pytest.raises(SpanBertError, match="no room"):
        write_once(fails)
    assert write_once(lambda: write_once(lambda: "nested")) == "nested"  # a helper that writes once, inside another


def test_predict_sharded_in_one_process_predicts_every_item_in_order():
    seen = []

    def predict(indices):
        seen.append(list(indices))
        return [i * i for i in indices]

    assert predict_sharded(5, predict) == [0, 1, 4, 9, 16]
    assert seen == [[0, 1, 2, 3, 4]]


def test_the_same_seed_builds_the_same_head_whatever_was_drawn_before():
    torch.manual_seed(1)
    with seeded_model(7):
        a = torch.nn.Linear(4, 3)
    torch.rand(100)  # other draws in between change nothing
    with seeded_model(7):
        b = torch.nn.Linear(4, 3)
    with seeded_model(8):
        c = torch.nn.Linear(4, 3)
    assert torch.equal(a.weight, b.weight) and not torch.equal(a.weight, c.weight)


def test_write_json_once_writes_utf8_sorted(tmp_path):
    write_json_once(tmp_path / "r.json", {"b": 1, "a": "Zoë"})
    text = (tmp_path / "r.json").read_text(encoding="utf-8")
    assert json.loads(text) == {"a": "Zoë", "b": 1} and text.index('"a"') < text.index('"b"') and "Zoë" in text
    assert start_distributed("cpu") == torch.device("cpu")
