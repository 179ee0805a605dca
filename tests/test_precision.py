"""`--precision auto` (alias `--dtype auto`) on CPU (issue 32.3): bf16 autocast where the CPU has native
bf16 matrix units (AMX-BF16 or AVX512-BF16 in its flags), fp32 elsewhere; the first line a command
prints says which; a short bf16 run's losses stay within the bf16 tolerance of fp32; checkpoints stay
fp32. The CPU's flags are patched (`spanbert.precision.cpu_flags`), so every machine runs every case."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_device import BF16_ATOL, BF16_RTOL, bert, pretrain_items
from torch import nn

import spanbert.precision as precision_mod
from spanbert.collate import collate_pretrain, pretrain_target_counts
from spanbert.model import SpanBertForPreTraining
from spanbert.precision import autocast_dtype, native_bf16, precision_text
from spanbert.pretrain_command import preset_line
from spanbert.pretrain_config import PretrainConfig, pretrain_parser
from spanbert.trainer import train
from spanbert.training_args import TrainingArguments

CPU = torch.device("cpu")


@pytest.mark.parametrize(
    "flags, native",
    [
        ({"avx512f", "avx512_bf16", "amx_tile", "amx_bf16"}, "amx_bf16"),  # Sapphire Rapids and later
        ({"avx512f", "avx512_bf16"}, "avx512_bf16"),  # Cooper Lake, Zen 4
        ({"avx512f", "avx512_vnni", "avx512_vbmi"}, None),  # Ice Lake: bf16 only emulated
        ({"avx2", "fma"}, None),
    ],
)
def test_auto_is_bf16_only_with_native_bf16(monkeypatch, flags, native):
    monkeypatch.setattr(precision_mod, "cpu_flags", lambda: set(flags))
    assert native_bf16() == native
    assert autocast_dtype("auto", CPU) == (torch.bfloat16 if native else None)
    assert autocast_dtype("fp32", CPU) is None  # --dtype fp32: today's behaviour on any CPU
    assert autocast_dtype("bf16", CPU) == torch.bfloat16
    text = precision_text("auto", CPU)
    assert text == (f"bf16 autocast (native bf16: {native})" if native else "fp32 (no native bf16 on this CPU; --precision bf16 emulates it)")
    assert precision_text("fp32", CPU) == "fp32 (--precision fp32)"


def test_the_first_line_of_pretrain_names_the_precision(monkeypatch):
    targs = TrainingArguments(output_dir="runs/x", device="cpu")
    monkeypatch.setattr(precision_mod, "cpu_flags", lambda: {"avx512f", "amx_bf16"})
    assert "on cpu, bf16 autocast (native bf16: amx_bf16)" in preset_line(True, PretrainConfig(model="tiny"), targs)
    monkeypatch.setattr(precision_mod, "cpu_flags", lambda: {"avx512f"})
    assert "on cpu, fp32 (no native bf16" in preset_line(True, PretrainConfig(model="tiny"), targs)


@pytest.mark.parametrize("option", ["--dtype", "--precision"])
def test_dtype_is_the_precision_option(option):
    args = pretrain_parser("spanbert pretrain", {}, {}).parse_args([option, "fp32"])
    assert args.precision == "fp32"


class Recording(nn.Module):
    """The model, with each forward's loss and whether bf16 autocast was in force (a test may sync)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.losses: list[float] = []
        self.bf16: list[bool] = []

    def forward(self, **batch):
        out = self.model(**batch)
        self.losses.append(float(out["loss"].detach()))
        self.bf16.append(torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16)
        return out


def _run(tmp: Path, precision: str) -> Recording:
    torch.manual_seed(0)
    model = Recording(SpanBertForPreTraining(bert(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
                                             sbo=True, sbo_position_dim=8))  # fmt: skip
    args = TrainingArguments(output_dir=str(tmp), max_steps=4, per_device_train_batch_size=4, learning_rate=1e-3,
                             warmup_steps=1, save_steps=4, logging_steps=1, disable_tqdm=True, report_to="none",
                             device="cpu", precision=precision)  # fmt: skip
    items = pretrain_items([16] * 16, nsp=False)
    train(model, items, args, collate_fn=collate_pretrain, count_targets=pretrain_target_counts)
    return model


def test_a_short_run_in_auto_bf16_stays_near_fp32_and_saves_fp32(monkeypatch, tmp_path):
    monkeypatch.setattr(precision_mod, "cpu_flags", lambda: {"avx512f", "amx_bf16"})  # auto -> bf16
    ref = _run(tmp_path / "fp32", "fp32")
    got = _run(tmp_path / "auto", "auto")
    assert ref.bf16 == [False] * 4 and got.bf16 == [True] * 4
    for step, (a, b) in enumerate(zip(got.losses, ref.losses), 1):
        assert abs(a - b) <= BF16_RTOL * abs(b) + BF16_ATOL, f"step {step}: bf16 loss {a:.5f} vs fp32 {b:.5f}"
    assert all(p.dtype == torch.float32 for p in got.parameters())
    state = torch.load(tmp_path / "auto" / "checkpoint-4" / "state.pt", weights_only=False)
    assert {v.dtype for v in state["model"].values() if v.is_floating_point()} == {torch.float32}


def test_the_flags_can_be_set_for_a_process_and_its_children(monkeypatch):
    """SPANBERT_CPU_FLAGS decides, so a process started by a test (torchrun) sees the suite's CPU."""
    monkeypatch.setenv("SPANBERT_CPU_FLAGS", "avx512f amx_bf16")
    assert native_bf16() == "amx_bf16"
    monkeypatch.setenv("SPANBERT_CPU_FLAGS", "avx512f")
    assert native_bf16() is None
    code = "from spanbert.precision import native_bf16; print(native_bf16())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "None"
