"""spanbert/tasks/coref/options.py: the options of predict and evaluate coref, the same object from flags and
keywords (issue 59)."""

from __future__ import annotations

import subprocess
import sys

from spanbert import tasks
from spanbert.tasks import options as O
from spanbert.tasks.coref.options import ACTIONS, CorefEvaluate, CorefPredict


def test_predict_and_evaluate_read_the_same_options_from_flags_and_keywords(tmp_path):
    out = str(tmp_path / "out.conll")
    assert O.parse(CorefPredict, ["--model", "m", "--data", "d.conll", "--output", out], "p", "d") == (
        O.from_keywords(CorefPredict, dict(model="m", data="d.conll", output=out), "c", "p"))  # fmt: skip
    assert O.parse(CorefEvaluate, ["--gold", "g", "--predictions", "r"], "p", "d") == CorefEvaluate(gold="g", predictions="r")
    assert tasks.TASKS.options("coref") is ACTIONS and "finetune" not in ACTIONS  # finetune parses its own


def test_the_options_and_the_package_import_no_torch():
    code = "import sys, spanbert.tasks.coref, spanbert.tasks.coref.options; assert 'torch' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).returncode == 0
