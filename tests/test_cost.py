"""Cost before work: durations a person reads, and the warning before an enormous fine-tuning or study
(issue 23 item 5)."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch
from torch import nn

from spanbert import cost
from spanbert.errors import SpanBertError
from spanbert.trainer import train
from spanbert.training_args import TrainingArguments


@pytest.mark.parametrize(
    "seconds, text",
    [
        (40, "40 s"),
        (12 * 60 + 10, "12 min"),
        (3 * 3600 + 20 * 60, "3 h 20 min"),
        (5 * 3600, "5 h"),
        (5 * 86400, "about 5 days"),
        (200 * 86400, "about 7 months"),
        (106824.4 * 86400, "about 292 years"),
        (5e6 * 365.25 * 86400, "about 5,000,000 years"),
    ],
)
def test_durations_read_as_a_person_reads_them(seconds, text):
    assert cost.human_duration(seconds) == text


def test_finetune_warning_only_for_a_plan_over_a_day():
    base = cost.encoder_params(768, 12, 3072)
    assert base == 12 * (4 * 768 * 768 + 2 * 768 * 3072)  # 85M: BERT-base without its embeddings
    # full SST-2 (67k sentences of ~64 tokens) x the paper's 10 epochs on 2 CPU threads
    line = cost.finetune_warning(base, 67_349 * 64 * 10, "cpu", threads=2)
    assert line and line.startswith("warning:") and "--num_train_epochs" in line
    seconds = 6 * base * 67_349 * 64 * 10 / (2 * cost.ASSUMED_FLOPS["cpu_per_thread"])
    assert cost.human_duration(seconds) in line and "days" in line
    assert cost.finetune_warning(base, 67_349 * 64 * 10, "cuda") is None  # about 1 h on a GPU
    assert cost.finetune_warning(cost.encoder_params(64, 2), 10_000 * 128, "cpu") is None


class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        return {"input_ids": torch.arange(10) % 7, "labels": torch.tensor(i % 2)}


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embeddings = nn.Embedding(7, 8)
        self.out = nn.Linear(8, 2)

    def forward(self, input_ids, labels):
        logits = self.out(self.embeddings(input_ids).mean(1))
        return {"loss": nn.functional.cross_entropy(logits, labels)}


def test_fine_tuning_warns_before_the_first_step(tmp_path, monkeypatch, capsys):
    args = TrainingArguments(output_dir=str(tmp_path / "run"), max_steps=2, per_device_train_batch_size=4,
                             save_steps=0, logging_steps=1, disable_tqdm=True, report_to="none")  # fmt: skip
    train(Classifier(), Tokens(), args)
    assert "warning:" not in capsys.readouterr().err  # a second's work
    # the same run on a machine 1e10 times slower: 2 steps x 4 examples x 10 tokens x 6 x 18 weights
    monkeypatch.setitem(cost.ASSUMED_FLOPS, "cpu_per_thread", 1e-6)
    slow = TrainingArguments(**{**args.__dict__, "output_dir": str(tmp_path / "run2")})
    with pytest.raises(SpanBertError, match="more than a week.*--allow_long_run"):  # issue 29: over a week
        train(Classifier(), Tokens(), slow)
    assert not (tmp_path / "run2").exists()
    train(Classifier(), Tokens(), dataclasses.replace(slow, allow_long_run=True))
    err = capsys.readouterr().err
    assert "warning: this fine-tuning is very large for this machine: 80 tokens through 0.0M weights" in err, err
    assert re.search(r"about [\d,]+ (days|months|years) on cpu", err), err


def test_study_estimates_its_fine_tuning(tmp_path):
    from spanbert import study as S

    sst = tmp_path / "SST-2"
    sst.mkdir()
    (sst / "train.tsv").write_text("sentence\tlabel\n" + "a fine film\t1\n" * 1000)
    (sst / "dev.tsv").write_text("sentence\tlabel\na fine film\t1\n")  # the study checks the folder first
    f = tmp_path / "s.yaml"
    f.write_text(f"corpus: {tmp_path}\nmodel: base\nseeds: 5\nsystems: [spanbert, bert]\noutput_dir: {tmp_path}/out\n"
                 f"tasks:\n  - {{task: glue, glue_task: SST-2, train: {sst}, learning_rates: [1e-5, 2e-5],\n"
                 "      options: {max_train_examples: 67349, num_train_epochs: 10, max_seq_length: 64}}\n")  # fmt: skip
    study = S.load_study(f)
    line, large = S.finetune_estimate(study, "cpu", threads=2)
    per_cell = 6 * cost.encoder_params(768, 12, 3072) * 67_349 * 64 * 10 / (2 * cost.ASSUMED_FLOPS["cpu_per_thread"])
    assert large and f"SST-2: 20 × {cost.human_duration(per_cell)}" in line
    assert f"{cost.human_duration(20 * per_cell)} for all 20 cells on cpu" in line
    # without max_train_examples: the training file's characters / 4 as its tokens, 3 epochs
    study.tasks[0].options = {}
    line, large = S.finetune_estimate(study, "cpu", threads=2)
    tokens = (sst / "train.tsv").stat().st_size // 4 * 3
    assert not large and cost.human_duration(6 * cost.encoder_params(768, 12, 3072) * tokens / 4e10) in line
    # a span probe trains no encoder: one forward pass over its training text, whatever its epochs (the cpu
    # preset's v3 once said 32 h for fine-tuning that took 2: every probe cell priced as 3 epochs of training)
    probe = dataclasses.replace(study.tasks[0], task="probe", options={"num_train_epochs": 10})
    study.tasks = [probe]
    line, _ = S.finetune_estimate(study, "cpu", threads=2)
    forward = cost.evaluation_flops(cost.encoder_params(768, 12, 3072), (sst / "train.tsv").stat().st_size // 4)
    assert cost.human_duration(forward / 4e10) in line
