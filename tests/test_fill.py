"""`spanbert fill` (`spanbert.fill`): the masked tokens of a text predicted with the MLM head or the span
boundary head, and its clean errors. A ModernBERT folder's heads are tested in test_modernbert.py, a fairseq
checkpoint's in test_model.py."""

from __future__ import annotations

import pytest
import torch
from test_pretrain import corpus  # noqa: F401 - the module-scoped tiny corpus fixture

from spanbert.config import model_config
from spanbert.errors import SpanBertError
from spanbert.fill import fill
from spanbert.model import SpanBertForPreTraining


def test_fill_with_both_heads(corpus, tmp_path):  # noqa: F811
    _, _, tok, _ = corpus
    torch.manual_seed(0)
    model = SpanBertForPreTraining(model_config("tiny", vocab_size=tok.vocab_size))
    for head in ("mlm", "sbo"):
        out = fill(model, tok, "the river {MASK*2} past old stone bridges", head=head, top_k=3)
        assert len(out["predictions"]) == 2 and len(out["predictions"][0]["candidates"]) == 3
        assert "[MASK]" not in out["text"]
    with pytest.raises(SpanBertError, match="no \\[MASK\\]"):
        fill(model, tok, "no masks here")
    with pytest.raises(SpanBertError, match="span boundary head"):
        fill(SpanBertForPreTraining(model_config("tiny", vocab_size=tok.vocab_size), sbo=False), tok, "a [MASK]", head="sbo")


def test_fill_says_what_to_expect_of_an_undertrained_model(tmp_path):
    import json

    from spanbert.fill import expectation

    folder = tmp_path / "final"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", "spanbert": {"system": "spanbert"}}))
    (folder / "train_metrics.json").write_text(json.dumps({"mlm_acc": 0.2, "eval_mlm_acc": 0.12, "sbo_acc": 0.7}))
    note = expectation(folder, "mlm")
    assert "MLM head predicted 12% of the masked tokens of its last held-out batches" in note
    assert "expect frequent tokens" in note
    assert expectation(folder, "sbo") is None  # 70% of its training batches: nothing to warn of
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", "spanbert": {"random_init": True}}))
    assert "never trained" in expectation(folder, "mlm")
    (folder / "train_metrics.json").unlink()
    (folder / "config.json").write_text(json.dumps({"model_type": "bert"}))
    assert expectation(folder, "mlm") is None  # an imported checkpoint records nothing: nothing said


def test_a_run_folder_given_as_the_model_points_to_its_final(tmp_path, cli_error):
    run = tmp_path / "runs" / "spanbert-small"
    (run / "final").mkdir(parents=True)
    (run / "final" / "config.json").write_text("{}")
    cli_error(["fill", "--model", str(run), "--text", "a [MASK] b"], contains=f"its model is {run}/final (--model {run}/final)")
    from spanbert.families import read_config

    with pytest.raises(SpanBertError, match="its model is .*final"):  # what every command reads a model folder with
        read_config(run)
    (run / "final" / "config.json").unlink()
    (run / "checkpoint-300").mkdir()
    cli_error(["fill", "--model", str(run), "--text", "a [MASK] b"], contains="its last checkpoint: checkpoint-300")
