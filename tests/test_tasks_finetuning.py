"""A task's finetune frame (`spanbert.tasks.finetuning`): the output folder checked before any work (an
earlier sweep's summary refused without --resume), and the `Results` of the saved model. The whole frame
runs in every task's tests (test_ner.py, test_glue.py, test_qa.py, ...)."""

from __future__ import annotations

import pytest

from spanbert import folders
from spanbert.errors import SpanBertError
from spanbert.runs import RUN
from spanbert.tasks.finetuning import check_output_dir, finetune_results
from spanbert.tasks.selection import SWEEP_SUMMARY
from spanbert.training_args import TrainingArguments


def test_an_earlier_sweep_is_refused_unless_resumed_or_overwritten(tmp_path):
    out = tmp_path / "run"
    check_output_dir(TrainingArguments(output_dir=str(out)))  # a new folder: fine, and nothing is created
    assert not out.exists()
    folders.claim_manifest(out, RUN, "spanbert finetune ner")
    folders.record(out / SWEEP_SUMMARY)
    (out / SWEEP_SUMMARY).write_text('{"runs": [], "complete": false}')
    with pytest.raises(SpanBertError, match=r"found sweep.json of an earlier sweep.*pass --resume"):
        check_output_dir(TrainingArguments(output_dir=str(out)))
    check_output_dir(TrainingArguments(output_dir=str(out), resume=True))
    check_output_dir(TrainingArguments(output_dir=str(out), overwrite_output_dir=True))


def test_an_output_that_is_an_input_is_refused(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    with pytest.raises(SpanBertError, match=r"found the output is the input .*\(--train\), expected an output apart"):
        check_output_dir(TrainingArguments(output_dir=str(data)), [("--train", str(data))])


def test_the_results_carry_the_selected_step_and_the_folder(tmp_path):
    r = finetune_results({"f1": 81.5, "selected_step": 300, "selected_by": "f1"}, "f1", tmp_path)
    assert (r.score, r.best_step, r.output_dir) == (81.5, 300, tmp_path)
    assert finetune_results({"f1": 1.0}, "f1", tmp_path).best_step is None
