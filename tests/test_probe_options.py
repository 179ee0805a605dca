"""spanbert/tasks/probe_options.py: the options of the span probes (finetune, predict, evaluate probe, and
`spanbert probe`), the same object from the command line and from `spanbert.tasks` keywords (issue 59)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from spanbert import tasks
from spanbert.errors import SpanBertError
from spanbert.tasks import options as O
from spanbert.tasks.probe_options import (
    ACTIONS,
    DEFAULTS,
    ProbeConfig,
    ProbeEvaluate,
    ProbeFinetune,
    ProbePredict,
    ProbeRun,
)
from spanbert.tasks.probe_sets import NAMES, PROBE_SETS


def test_each_action_reads_the_same_options_from_flags_and_keywords(tmp_path):
    out = str(tmp_path / "preds.jsonl")
    cases = [
        (ProbeFinetune, ["--probe", "pos", "--model", "m", "--train", "t", "--dev", "d", "--layers", "0",
                         "--max_seq_length", "64", "--learning_rate", "3e-4", "--features_cache", "c"],
         dict(probe="pos", model="m", train_file="t", validation_file="d", layers="0", max_seq_length=64,
              learning_rate=3e-4, features_cache="c")),
        (ProbePredict, ["--model", "m", "--data", "d", "--output", out, "--batch_size", "8", "--disable_tqdm",
                        "--max_examples", "0"],
         dict(model="m", data="d", output=out, batch_size=8, disable_tqdm=True, max_examples=0)),
        (ProbeEvaluate, ["--probe", "pos", "--predictions", "p", "--data", "d", "--example_stats", "s.json"],
         dict(probe="pos", predictions="p", data="d", example_stats="s.json")),
        (ProbeRun, ["--model", "m", "--probes", "pos,gap", "--layers", "all", "--overwrite_output_dir", "--seed", "3"],
         dict(model="m", probes="pos,gap", layers="all", overwrite_output_dir=True, seed=3)),
    ]  # fmt: skip
    for cls, argv, keywords in cases:
        assert O.parse(cls, argv, "p", "d") == O.from_keywords(cls, keywords, "c", "p"), cls.__name__


def test_finetune_starts_from_the_probes_training_defaults():
    opts = O.from_keywords(ProbeFinetune, {"probe": "pos", "model": "m", "train_file": "t", "validation_file": "d"},
                           "c", "p")  # fmt: skip
    assert opts.probe_config == ProbeConfig() and opts.max_seq_length is None and not opts.sweep
    assert {k: getattr(opts.training, k) for k in DEFAULTS} == DEFAULTS
    run = O.parse(ProbeRun, ["--model", "m"], "p", "d")
    assert (run.data_root, run.probes, run.layers, run.device) == ("../shared/data", ",".join(NAMES), "all,0", "auto")
    with pytest.raises(SpanBertError, match="--layers: found '2'"):
        O.parse(ProbeFinetune, ["--probe", "pos", "--model", "m", "--train", "t", "--dev", "d", "--layers", "2"], "p",
                "d")  # fmt: skip


def test_the_probe_help_lists_the_probe_sets():
    from spanbert.config import field_docs

    listing = "which probe (" + "; ".join(f"{p.name}: {p.description}" for p in PROBE_SETS.values()) + ")"
    data = "the probe's training data: " + "; ".join(f"{p.name}: {p.data}" for p in PROBE_SETS.values())
    assert field_docs(ProbeFinetune)["probe"] == listing and field_docs(ProbeFinetune)["train_file"] == data
    for cls in (ProbePredict, ProbeEvaluate):
        assert field_docs(cls)["probe"] == listing + "; default: the one the model folder holds"


def test_the_specs_hold_the_options():
    assert tasks.TASKS.options("probe") is ACTIONS
    assert tasks.TASKS["probe"].options is ACTIONS


def test_a_python_mistake_names_the_keyword():
    with pytest.raises(SpanBertError, match=r"tasks.evaluate\('probe'\): found unknown option 'exemple_stats' \(did "
                                            r"you mean 'example_stats'\?\)"):  # fmt: skip
        tasks.evaluate("probe", model="m", data="d", exemple_stats="s.json")
    with pytest.raises(SpanBertError, match=r"found none of model, predictions, expected exactly one of them"):
        tasks.evaluate("probe", data="d", probe="pos")
    with pytest.raises(SpanBertError, match=r"found no probe=, expected it"):
        O.from_keywords(ProbeFinetune, {"model": "m", "train_file": "t", "validation_file": "d"},
                        "tasks.finetune('probe')", "spanbert finetune probe")  # fmt: skip


def test_the_options_module_imports_no_torch():
    code = "import sys, spanbert.tasks.probe_options; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_every_encoder_family_is_probed_with_the_one_recipe(monkeypatch):
    # a family's fine-tuning habits (the two-tower's cosine schedule and batch 16) are not a probe's: the probe
    # trains alike on every encoder (docs/probes.md), where the tasks' heads take their family's recipe
    monkeypatch.setattr(O, "model_family_defaults", lambda model: {"lr_scheduler_type": "cosine",
                                                                   "per_device_train_batch_size": 16})  # fmt: skip
    opts = O.parse(ProbeFinetune, ["--probe", "pos", "--model", "m", "--train", "t", "--dev", "d"], "p", "d")
    assert opts.training.lr_scheduler_type != "cosine"
    assert opts.training.per_device_train_batch_size == DEFAULTS["per_device_train_batch_size"] == 32
