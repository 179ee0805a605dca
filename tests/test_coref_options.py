"""spanbert/tasks/coref/options.py: the options of finetune, predict and evaluate coref, the same object from
flags and keywords; the presets under them (issue 59)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from spanbert import tasks
from spanbert.errors import SpanBertError
from spanbert.tasks import options as O
from spanbert.tasks.coref.options import ACTIONS, COREF_PRESETS, CorefEvaluate, CorefFinetune, CorefPredict


def test_predict_and_evaluate_read_the_same_options_from_flags_and_keywords(tmp_path):
    out = str(tmp_path / "out.conll")
    assert O.parse(CorefPredict, ["--model", "m", "--data", "d.conll", "--output", out], "p", "d") == (
        O.from_keywords(CorefPredict, dict(model="m", data="d.conll", output=out), "c", "p"))  # fmt: skip
    assert O.parse(CorefEvaluate, ["--gold", "g", "--predictions", "r"], "p", "d") == CorefEvaluate(gold="g", predictions="r")
    assert tasks.TASKS.options("coref") is ACTIONS and set(ACTIONS) == {"finetune", "predict", "evaluate"}


def test_finetune_reads_the_same_options_from_flags_and_keywords_over_the_preset(tmp_path):
    out = str(tmp_path / "run")
    flags = ["--model", "m", "--train", "t.conll", "--preset", "spanbert_large", "--ffnn_size", "150",
             "--learning_rate", "5e-5", "--output_dir", out]  # fmt: skip
    parsed = O.parse(CorefFinetune, flags, "p", "d")
    keywords = dict(model="m", train="t.conll", preset="spanbert_large", ffnn_size=150, learning_rate=5e-5, output_dir=out)
    assert parsed == O.from_keywords(CorefFinetune, keywords, "c", "p")
    released = COREF_PRESETS["spanbert_large"]
    assert (parsed.coref.max_seq_length, parsed.coref.encoder_learning_rate) == (512, 1e-5)  # the preset's
    assert (parsed.training.eval_steps, parsed.training.adam_epsilon) == (1000, released["training"]["adam_epsilon"])
    assert (parsed.coref.ffnn_size, parsed.training.learning_rate) == (150, 5e-5)  # given: over the preset
    plain = O.parse(CorefFinetune, ["--model", "m", "--train", "t.conll"], "p", "d")
    assert (plain.coref.max_seq_length, plain.training.learning_rate, plain.training.output_dir) == (None, 2e-4, "runs/coref")
    with pytest.raises(SpanBertError, match="'ffnn_sise' .did you mean 'ffnn_size'"):
        O.from_keywords(CorefFinetune, dict(model="m", train="t", ffnn_sise=10), "tasks.finetune('coref')", "p")


def test_the_options_and_the_package_import_no_torch():
    code = "import sys, spanbert.tasks.coref, spanbert.tasks.coref.options; assert 'torch' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).returncode == 0
