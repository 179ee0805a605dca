"""A task's finetune frame (`spanbert.tasks.finetuning`): the output folder checked before any work (an
earlier sweep's summary refused without --resume), and the `Results` of the saved model. The whole frame
runs in every task's tests (test_ner.py, test_glue.py, test_qa.py, ...)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from spanbert import folders
from spanbert.errors import SpanBertError
from spanbert.runs import RUN
from spanbert.tasks import finetuning
from spanbert.tasks import options as O
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


@dataclass
class Segments:
    max_seq_length: int | None = None
    """tokens per segment"""


@dataclass
class Cap:
    max_seq_length: int = 512
    """longest sentence"""


@dataclass(kw_only=True)
class Run:
    model: str = "m"
    """the encoder"""
    preset: int | None = None
    """a preset length"""
    segments: Segments = O.nested(Segments, defaults=lambda given: {"max_seq_length": given.get("preset")})
    cap: Cap = O.nested(Cap)


def test_a_length_in_force_is_checked_against_the_encoder_and_a_class_default_is_not(monkeypatch):
    """A task class's length given or set by a preset (coreference's ``--preset spanbert_base``: 384) is
    checked before any data is read; its own default (parse's 512, a cap on sentences) is not."""
    checked: list[int] = []
    monkeypatch.setattr(finetuning, "check_sequence_length", lambda model, length: checked.append(length))
    # a length named (a flag, a keyword) is checked even at its class's default: the user asked for it
    for keywords, expected in [({}, []), ({"preset": 384}, [384]), ({"max_seq_length": 512}, [512])]:
        checked.clear()
        finetuning.resolve_lengths(O.from_keywords(Run, keywords, "c", "p"))
        assert checked == expected, (keywords, checked)
