"""spanbert/tasks/glue_options.py: the options of glue, the same object from flags and keywords, with training
defaults that follow --task (issue 59)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from test_glue import _write_sst, tiny_model  # noqa: F401  (tiny_model: a fixture)

from spanbert import tasks
from spanbert.errors import SpanBertError
from spanbert.tasks import options as O
from spanbert.tasks.glue_options import (
    ACTIONS,
    GLUE_TASKS,
    GlueEvaluate,
    GlueFinetune,
    GluePredict,
    default_arguments,
)
from spanbert.training_args import TrainingArguments


def test_each_action_reads_the_same_options_from_flags_and_keywords(tmp_path):
    out = str(tmp_path / "sub")
    cases = [
        (GlueFinetune, ["--task", "CoLA", "--data_dir", "d", "--model", "m", "--max_seq_length", "64", "--heldout_half",
                        "--max_eval_examples", "10", "--learning_rate", "3e-5"],
         dict(task="CoLA", data_dir="d", model="m", max_seq_length=64, heldout_half=True, max_eval_examples=10,
              learning_rate=3e-5)),
        (GluePredict, ["--task", "sst2", "--data_dir", "d", "--model", "m", "--split", "dev", "--output_dir", out,
                       "--batch_size", "8"],
         dict(task="sst2", data_dir="d", model="m", split="dev", output_dir=out, batch_size=8)),
        (GlueEvaluate, ["--task", "MNLI", "--data_dir", "d", "--predictions", "a.tsv", "b.tsv"],
         dict(task="MNLI", data_dir="d", predictions=["a.tsv", "b.tsv"])),
        (GlueEvaluate, ["--task", "RTE", "--data_dir", "d", "--model", "m", "--heldout_half"],
         dict(task="RTE", data_dir="d", model="m", heldout_half=True)),
    ]  # fmt: skip
    for cls, argv, keywords in cases:
        assert O.parse(cls, argv, "p", "d") == O.from_keywords(cls, keywords, "c", "p"), cls.__name__
    # the task's folder is also `data`, what `tasks.predict(name, model, data)` passes for every task
    assert O.from_keywords(GluePredict, dict(task="sst2", data="d", model="m", output_dir=out), "c", "p") == (
        O.parse(GluePredict, ["--task", "sst2", "--data", "d", "--model", "m", "--output_dir", out], "p", "d"))  # fmt: skip


def test_the_training_defaults_follow_the_task():
    def training(**keywords) -> TrainingArguments:
        return O.from_keywords(GlueFinetune, {"data_dir": "d", "model": "m", **keywords}, "c", "p").training

    cola = training(task="cola")  # any spelling of a GLUE task's name
    assert cola == TrainingArguments(**default_arguments(GLUE_TASKS["CoLA"]))
    assert cola.num_train_epochs == 4.0 and cola.output_dir == "runs/glue-CoLA"
    sst = O.parse(GlueFinetune, ["--task", "SST2", "--data_dir", "d", "--model", "m"], "p", "d").training
    assert sst.num_train_epochs == 10.0 and sst.output_dir == "runs/glue-SST-2" and sst.metric_for_best_model == "score"
    assert training(task="nonsense").output_dir == "runs/glue-RTE"  # reported by the action, not here
    assert training(task="CoLA", num_train_epochs=2).num_train_epochs == 2.0  # a keyword wins
    # --help shows the defaults of the task it names (RTE's before it names one)
    assert "(default: runs/glue-CoLA)" in O.usage(GlueFinetune, "p", "d", {"task": "CoLA"})
    assert "(default: runs/glue-RTE)" in O.usage(GlueFinetune, "p", "d")


def test_the_task_option_lists_the_tasks_and_the_registry_names_the_options():
    assert f"GLUE task: {', '.join(GLUE_TASKS)}" in O.usage(GluePredict, "p", "d").replace("\n", " ").replace("  ", "")
    assert tasks.TASKS.options("glue") is ACTIONS and tasks.TASKS["glue"].options is ACTIONS


def test_python_mistakes_name_the_keyword(tmp_path):
    with pytest.raises(SpanBertError, match=r"tasks.evaluate\('glue'\): found unknown option 'batch_siz' \(did you mean "
                                            r"'batch_size'\?\); expected an option of `spanbert evaluate glue`"):  # fmt: skip
        tasks.evaluate("glue", task="SST-2", data_dir="d", model="m", batch_siz=3)
    with pytest.raises(SpanBertError, match=r"found no data_dir=, expected it \(required\)"):
        tasks.predict("glue", model="m", task="SST-2", output_dir=str(tmp_path / "sub"))
    with pytest.raises(SpanBertError, match=r"found none of predictions, model, expected exactly one of them"):
        tasks.evaluate("glue", task="SST-2", data_dir="d")
    out = tmp_path / "ft"
    with pytest.raises(SpanBertError, match=r"unknown GLUE task 'SST-3'; choose from: CoLA, SST-2"):
        tasks.finetune("glue", task="SST-3", data_dir=str(tmp_path), model="m", output_dir=str(out))
    assert not out.exists()


def test_prediction_files_from_python_are_read_as_paths_item_by_item(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    opts = O.from_keywords(GlueEvaluate, dict(task="MNLI", data_dir="d", predictions=["~/m.tsv", "mm.tsv"]), "c", "p")
    assert opts.predictions == [str(tmp_path / "m.tsv"), "mm.tsv"]
    with pytest.raises(SpanBertError, match="predictions: found an empty path"):
        O.from_keywords(GlueEvaluate, dict(task="MNLI", data_dir="d", predictions=["m.tsv", ""]), "c", "p")


def test_finetune_from_python_names_the_glue_task(tiny_model, tmp_path):  # noqa: F811
    data = tmp_path / "SST-2"
    _write_sst(data)
    run = tasks.finetune("glue", task="SST-2", data_dir=data, model=tiny_model, output_dir=tmp_path / "ft",
                         max_steps=2, per_device_train_batch_size=8, report_to="none", disable_tqdm=True,
                         device="cpu")  # fmt: skip
    assert run.output_dir == tmp_path / "ft" and "accuracy" in run.scores
    saved = json.loads((tmp_path / "ft" / "config.json").read_text())["spanbert"]
    assert saved["glue_task"] == "SST-2" and saved["max_seq_length"] == 128
    scored = tasks.score("glue", run.output_dir, data, task="SST-2")
    assert scored.scores["examples"] == 32


def test_the_options_module_imports_no_torch():
    code = "import sys, spanbert.tasks.glue_options; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"
