"""spanbert/pretrain_plan.py: what a pre-training plan costs before it runs, and the warning it gets when it
is enormous for this machine."""

from __future__ import annotations

import re

import torch

from spanbert.config import model_config
from spanbert.pretrain_config import QUICKSTART, QUICKSTART_CONFIG, PretrainConfig
from spanbert.pretrain_plan import plan_flops, plan_warning
from spanbert.training_args import TrainingArguments


def test_enormous_plans_are_announced(capsys):
    cpu = torch.device("cpu")
    base = model_config("base", vocab_size=8000)
    line = plan_warning(base, PretrainConfig(), TrainingArguments(per_device_train_batch_size=32, gradient_accumulation_steps=8), 2_400_000, True, cpu)
    assert line.startswith("warning:") and "--max_steps" in line and "FLOPs" in line
    assert re.search(r"about [\d,]+ years on cpu", line), line  # read as a person reads it, not "106824.4 days"
    # base on CPU is announced even for a few steps; the quick start is not
    assert plan_warning(base, PretrainConfig(), TrainingArguments(), 10, True, cpu) is not None
    tiny = model_config("tiny", vocab_size=4000)
    qs = TrainingArguments(**{k: v for k, v in QUICKSTART.items()})
    assert plan_warning(tiny, PretrainConfig(**QUICKSTART_CONFIG), qs, qs.max_steps, True, cpu) is None
    # a small model for very many steps is announced by its time alone
    assert plan_warning(tiny, PretrainConfig(**QUICKSTART_CONFIG), qs, 10**9, True, cpu) is not None


def test_the_plan_s_flops_grow_with_its_steps_and_its_batch():
    tiny = model_config("tiny", vocab_size=4000)
    cfg = PretrainConfig(**QUICKSTART_CONFIG)
    one = plan_flops(tiny, cfg, TrainingArguments(per_device_train_batch_size=4, max_tokens_per_batch=0), 10, True)
    assert one > 0
    assert plan_flops(tiny, cfg, TrainingArguments(per_device_train_batch_size=4, max_tokens_per_batch=0), 20, True) == 2 * one
    assert plan_flops(tiny, cfg, TrainingArguments(per_device_train_batch_size=8, max_tokens_per_batch=0), 10, True) == 2 * one
