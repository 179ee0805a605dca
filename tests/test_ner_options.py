"""spanbert/tasks/ner_options.py: the options of finetune, predict and evaluate ner, the same object from flags and
keywords (issue 59)."""

from __future__ import annotations

import pytest

from spanbert import tasks
from spanbert.errors import SpanBertError
from spanbert.tasks import options as O
from spanbert.tasks.ner_options import ACTIONS, NerEvaluate, NerFinetune, NerPredict


def test_predict_and_evaluate_read_the_same_options_from_flags_and_keywords(tmp_path):
    out = str(tmp_path / "tags.txt")
    assert O.parse(NerPredict, ["--model", "m", "--data", "d.txt", "--output", out], "p", "d") == O.from_keywords(
        NerPredict, dict(model="m", data="d.txt", output=out), "c", "p")  # fmt: skip
    stats = str(tmp_path / "stats.json")
    assert O.parse(NerEvaluate, ["--data", "d.txt", "--model", "m", "--example_stats", stats], "p", "d") == (
        O.from_keywords(NerEvaluate, dict(data="d.txt", model="m", example_stats=stats), "c", "p"))  # fmt: skip
    assert tasks.TASKS.options("ner") is ACTIONS and set(ACTIONS) == {"finetune", "predict", "evaluate"}


def test_finetune_reads_the_same_options_from_flags_and_keywords_and_each_head_its_defaults(tmp_path):
    out = str(tmp_path / "run")
    flags = ["--model", "m", "--train", "t.txt", "--tagger", "bilstm-crf", "--dropout", "0.5", "--output_dir", out]
    parsed = O.parse(NerFinetune, flags, "p", "d")
    assert parsed == O.from_keywords(NerFinetune, dict(model="m", train="t.txt", tagger="bilstm-crf", dropout=0.5,
                                                       output_dir=out), "c", "p")  # fmt: skip
    assert parsed.crf.tagger_dropout == 0.5 and O.named(parsed) >= {"tagger", "tagger_dropout"}  # --dropout: old spelling
    assert (parsed.training.learning_rate, parsed.training.num_train_epochs, parsed.training.evals_per_epoch) == (
        1e-3, 25.0, 1)  # the biLSTM-CRF's recipe (§4, §6.2.1)
    linear = O.parse(NerFinetune, ["--model", "m", "--train", "t.txt"], "p", "d")
    assert (linear.training.learning_rate, linear.training.output_dir, O.named(linear) & {"tagger", "features"}) == (
        5e-5, "runs/ner", set())
    features = O.parse(NerFinetune, ["--model", "m", "--train", "t.txt", "--features", "last_hidden",
                                     "--lstm_layers", "1"], "p", "d")  # fmt: skip
    assert (features.features, features.head.lstm_layers, features.training.output_dir) == (
        "last_hidden", 1, "runs/ner-features")
    with pytest.raises(SpanBertError, match="'lstm_layer' .did you mean 'lstm_layers'"):
        O.from_keywords(NerFinetune, dict(model="m", train="t", lstm_layer=1), "tasks.finetune('ner')", "p")


@pytest.mark.parametrize("argv, message", [
    (["--lstm_layers", "1"], "found --lstm_layers without --features"),
    (["--stacking", "frozen"], "found --stacking with the linear tagger"),
    (["--features", "last_hidden", "--tagger", "linear"], "found --tagger with --features"),
])  # fmt: skip
def test_finetune_refuses_a_head_s_options_without_that_head(argv, message, tmp_path, capsys):
    from spanbert.cli import main

    model = tmp_path / "no-model"
    assert main(["finetune", "ner", "--model", str(model), "--train", "t.txt", "--output_dir", str(tmp_path / "o"),
                 *argv]) == 2  # fmt: skip
    assert message in capsys.readouterr().err


def test_evaluate_takes_predictions_or_a_model_not_both(tmp_path):
    data = tmp_path / "d.txt"
    data.write_text("John NNP B-NP B-PER\n")
    with pytest.raises(SpanBertError, match="found predictions and model of predictions, model, expected exactly one"):
        tasks.evaluate("ner", data=data, predictions=data, model=tmp_path)
