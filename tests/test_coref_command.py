"""``spanbert finetune|predict|evaluate coref`` (`spanbert.tasks.coref.command`): scoring a predictions file
against the gold documents, and the released settings as ``--preset`` (`spanbert.tasks.coref.finetune`'s
`COREF_PRESETS`), overridden by a flag or ``--config``, with the default selecting on dev CoNLL F1. The commands
run end to end in test_coref.py."""

from __future__ import annotations

import pytest
from test_coref import SAMPLE

from spanbert.tasks.coref.command import evaluate_files
from spanbert.tasks.coref.data import CorefDocument, read_conll, write_conll


def test_evaluate_files_matches_documents_and_rejects_mismatches(tmp_path):
    from spanbert.errors import SpanBertError

    gold = tmp_path / "gold.conll"
    gold.write_text(SAMPLE)
    (doc,) = read_conll(gold)
    pred = tmp_path / "pred.conll"
    write_conll(pred, [doc], [[[(0, 0), (2, 2)]]])  # finds one of the two entities
    scores = evaluate_files(gold, pred)
    assert scores["documents"] == 1
    assert scores["muc_r"] == pytest.approx(50.0) and scores["muc_p"] == pytest.approx(100.0)
    other = CorefDocument("other", 0, [["x"]])
    write_conll(pred, [other])
    with pytest.raises(SpanBertError, match="found no prediction for 1 gold document"):
        evaluate_files(gold, pred)


# Transcribed from mandarjoshi90/coref @ bd04f2e: experiments.conf (`best`, `spanbert_base`,
# `spanbert_large`), independent.py (k <= 3900, segment distance), optimization.py (eps, decay, clipping),
# train.py (eval_frequency, model.max.ckpt).
RELEASED = {
    "spanbert_base": dict(max_seq_length=384, encoder_learning_rate=2e-5, learning_rate=1e-4),
    "spanbert_large": dict(max_seq_length=512, encoder_learning_rate=1e-5, learning_rate=3e-4),
}


RELEASED_SHARED = dict(
    adam_epsilon=1e-6, weight_decay=0.01, task_weight_decay=0.0, separate_clipping=True, max_grad_norm=1.0,
    warmup_ratio=0.1, lr_scheduler_type="linear", num_train_epochs=20.0, per_device_train_batch_size=1,
    max_top_spans=3900, max_span_width=30, top_span_ratio=0.4, max_top_antecedents=50, ffnn_size=3000,
    ffnn_depth=1, feature_size=20, dropout=0.3, token_dropout=0.0, coref_depth=2, max_training_segments=3,
    use_segment_distance=True, eval_steps=1000, metric_for_best_model="conll_f1",
)  # fmt: skip


def _parsed(monkeypatch, argv):
    """(TrainingArguments, CorefConfig) that `spanbert finetune coref ARGV` would train with."""
    from spanbert.cli import main
    from spanbert.tasks import coref

    seen = {}

    def fake(model_dir, train_path, dev_path, targs, config, tokenizer_dir=None, max_eval_examples=None):
        seen.update(targs=targs, config=config)
        return {}

    monkeypatch.setattr(coref.command, "finetune_coref", fake)  # where the command calls it
    assert main(["finetune", "coref", "--model", "m", "--train", "t.conll", "--output_dir", "o", *argv]) == 0
    return seen["targs"], seen["config"]


@pytest.mark.parametrize("name", sorted(RELEASED))
def test_presets_are_the_released_settings(monkeypatch, name, tmp_path):
    targs, config = _parsed(monkeypatch, ["--preset", name])
    for key, value in {**RELEASED_SHARED, **RELEASED[name]}.items():
        got = getattr(targs, key) if hasattr(targs, key) else getattr(config, key)
        assert got == value, (key, got, value)
    # options given on the command line or in --config win over the preset
    yaml = tmp_path / "c.yaml"
    yaml.write_text("ffnn_size: 150\nadam_epsilon: 1.0e-8\n")
    targs, config = _parsed(monkeypatch, ["--preset", name, "--config", str(yaml), "--learning_rate", "5e-5"])
    assert (targs.learning_rate, targs.adam_epsilon, config.ffnn_size) == (5e-5, 1e-8, 150)
    assert config.max_seq_length == RELEASED[name]["max_seq_length"]


def test_default_selects_on_dev_conll_f1_and_an_unknown_preset_is_an_error(monkeypatch, tmp_path, capsys):
    from spanbert.cli import main

    targs, config = _parsed(monkeypatch, [])
    assert targs.metric_for_best_model == "conll_f1" and targs.evals_per_epoch == 3
    assert config.use_segment_distance and config.max_top_spans == 3900 and config.task_weight_decay == 0
    yaml = tmp_path / "c.yaml"
    yaml.write_text("preset: spanbert_huge\n")
    argv = ["finetune", "coref", "--model", "m", "--train", "t.conll", "--output_dir", "o", "--config", str(yaml)]
    assert main(argv) == 2
    # the YAML value is checked as the flag is, naming the file and line
    err = capsys.readouterr().err
    assert f"{yaml}:1: option preset: found 'spanbert_huge', expected one of: spanbert_base, spanbert_large" in err
