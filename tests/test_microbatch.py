"""`--per_device_train_batch_size auto` (spanbert.microbatch): the search, the CUDA memory oracle (with
a fake card: allocations and out-of-memory errors simulated), the rule off CUDA, and resume."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from test_host_sync import pretraining_case

import spanbert.microbatch as mb
from spanbert.config import convert_value
from spanbert.errors import SpanBertError
from spanbert.loop import to_device
from spanbert.microbatch import largest_fitting, planned_batch_size, probe_rows, resolve_batch_size
from spanbert.trainer import train
from spanbert.training_args import TrainingArguments


@pytest.mark.parametrize("threshold", [1, 2, 3, 7, 8, 9, 31, 100, 511, 512, 1000])
@pytest.mark.parametrize("start", [1, 8])
def test_the_search_finds_the_largest_size_that_fits(threshold, start):
    limit = 512
    found, tried = largest_fitting(lambda n: n <= threshold, limit, start=start)
    assert found == min(threshold, limit)
    assert len(tried) == len(set(tried))  # no size tried twice
    assert len(tried) <= 2 * math.ceil(math.log2(limit)) + 2  # doubling then bisection: O(log n) probes


def test_the_search_when_nothing_fits_or_everything_does():
    assert largest_fitting(lambda n: False, 64, start=8) == (0, [8, 4, 2, 1])
    assert largest_fitting(lambda n: True, 20, start=8) == (20, [8, 16, 20])
    assert largest_fitting(lambda n: True, 5, start=8) == (5, [5])  # the start clamped to the limit
    with pytest.raises(ValueError):
        largest_fitting(lambda n: True, 0)


class FakeCard:
    """torch.cuda's memory calls for a card of ``total`` bytes: a forward and backward of n sequences
    peaks at ``base + per_row * n``, and raises CUDA's out-of-memory error above the card's size."""

    def __init__(self, monkeypatch, total: int, base: int, per_row: int):
        self.total, self.base, self.per_row = total, base, per_row
        self.peak = 0
        self.calls: list[str] = []

        class Props:
            total_memory = total

        fake = {
            "get_device_properties": lambda device=None: Props,
            "empty_cache": lambda: self.calls.append("empty_cache"),
            "reset_peak_memory_stats": lambda device=None: setattr(self, "peak", 0),
            "synchronize": lambda device=None: None,
            "max_memory_allocated": lambda device=None: self.peak,
        }
        for name, fn in fake.items():
            monkeypatch.setattr(torch.cuda, name, fn)

    def allocate(self, n: int) -> None:
        need = self.base + self.per_row * n
        if need > self.total:
            raise torch.cuda.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {need} bytes")
        self.peak = max(self.peak, need)


class Model(torch.nn.Module):
    def __init__(self, card: FakeCard):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(4))
        self.card = card
        self.seen: list[int] = []

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        self.seen.append(x.shape[0])
        self.card.allocate(x.shape[0])
        return {"loss": (x @ self.w).sum()}


def test_the_cuda_oracle_counts_the_optimizer_state_and_catches_out_of_memory(monkeypatch):
    GiB = 1 << 30
    card = FakeCard(monkeypatch, total=80 * GiB, base=2 * GiB, per_row=GiB // 2)
    model = Model(card)
    fits = mb.cuda_fits(model, lambda n: {"x": torch.ones(n, 4)}, torch.device("cuda"), None, reserve_bytes=4 * GiB)
    # under 90% of 80 GiB = 72 GiB: 2 + 0.5 n + 4 <= 72 -> n <= 132; 157 rows raise out-of-memory
    assert fits(132) and not fits(133) and not fits(200)
    assert model.w.grad is None  # the probe leaves no gradient behind
    found, tried = largest_fitting(fits, 4096, start=8)
    assert found == 132 and tried[:6] == [8, 16, 32, 64, 128, 256]
    assert len(tried) <= 2 * 12 + 2


def test_probe_batches_are_the_longest_examples():
    assert probe_rows(np.array([5, 9, 3, 9, 7]), 5, 3) == [1, 3, 4]  # longest first, ties in order
    assert probe_rows(np.array([5, 9]), 2, 5) == [1, 0, 1, 0, 1]  # fewer examples than rows: repeated
    assert probe_rows(None, 3, 4) == [0, 1, 2, 0]  # lengths unknown: the first ones


def test_auto_is_an_option_value_and_plans_assume_the_rule():
    assert convert_value(TrainingArguments, "per_device_train_batch_size", "auto") == "auto"
    assert convert_value(TrainingArguments, "per_device_train_batch_size", "48") == 48
    with pytest.raises(SpanBertError, match="expected an integer or auto"):
        convert_value(TrainingArguments, "per_device_train_batch_size", "most", source="command line")
    with pytest.raises(SpanBertError, match="per_device_train_batch_size"):
        TrainingArguments(per_device_train_batch_size=0)
    assert planned_batch_size("auto") == mb.CPU_BATCH and planned_batch_size(12) == 12


def _args(tmp, **kw) -> TrainingArguments:
    base = dict(output_dir=str(tmp), max_steps=4, logging_steps=2, save_steps=2, learning_rate=1e-3,
                warmup_steps=1, disable_tqdm=True, report_to="none", device="cpu", precision="fp32",
                per_device_train_batch_size="auto")  # fmt: skip
    return TrainingArguments(**{**base, **kw})


def test_off_cuda_auto_is_the_rule_and_a_token_budget_is_refused(tmp_path):
    model, ds, collate, _ = pretraining_case("spanbert", dropout=0.0)
    cpu = torch.device("cpu")
    got = resolve_batch_size(_args(tmp_path), model, ds, collate, cpu, None, to_device)
    assert got.per_device_train_batch_size == mb.CPU_BATCH
    with pytest.raises(SpanBertError, match="--max_tokens_per_batch 512 too"):
        resolve_batch_size(_args(tmp_path, max_tokens_per_batch=512), model, ds, collate, cpu, None, to_device)


def test_a_run_with_auto_saves_its_size_and_resume_keeps_it(tmp_path, monkeypatch, capsys):
    """The found size goes into the checkpoint's settings; --resume with auto takes it (no new probe,
    whatever this machine would find now), so the resumed run is the run."""
    model, ds, collate, count = pretraining_case("spanbert", dropout=0.0)
    monkeypatch.setattr(mb, "CPU_BATCH", 4)
    train(model, ds, _args(tmp_path, stop_at_step=2), collate_fn=collate, count_targets=count)
    saved = json.loads((tmp_path / "checkpoint-2" / "trainer_state.json").read_text())["args"]
    assert saved["per_device_train_batch_size"] == 4
    monkeypatch.setattr(mb, "CPU_BATCH", 8)  # what a probe would say now
    capsys.readouterr()
    result = train(model, ds, _args(tmp_path, resume=True), collate_fn=collate, count_targets=count)
    out = capsys.readouterr().out
    assert "auto: 4, the size the resumed run found" in out and "changed setting: per_device" not in out
    assert result.global_step == 4
