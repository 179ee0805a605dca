"""The training loop: exact resume, accumulation, clipping, NaN handling, schedule, DDP under torchrun."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from spanbert.errors import SpanBertError
from spanbert.trainer import (
    TrainingArguments,
    latest_checkpoint,
    lr_lambda,
    micro_batches,
    param_groups,
    train,
)


class Regression(torch.utils.data.Dataset):
    def __len__(self):
        return 48

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(4, generator=g)
        return {"x": x, "y": x.sum().unsqueeze(0)}


class Net(nn.Module):
    def __init__(self, dropout: float = 0.1):
        super().__init__()
        torch.manual_seed(0)
        self.l1 = nn.Linear(4, 16)
        self.norm = nn.LayerNorm(16)
        self.l2 = nn.Linear(16, 1)
        self.drop = nn.Dropout(dropout)
        self.scale = 1.0

    def forward(self, x, y):
        pred = self.l2(self.drop(self.norm(torch.relu(self.l1(x)))))
        return {"loss": ((pred - y) ** 2).mean() * self.scale}


def args(tmp, **kw) -> TrainingArguments:
    base = dict(
        output_dir=str(tmp),
        max_steps=12,
        per_device_train_batch_size=4,
        learning_rate=1e-2,
        warmup_steps=3,
        save_steps=3,
        logging_steps=3,
        disable_tqdm=True,
        report_to="none",
    )
    return TrainingArguments(**{**base, **kw})


def params(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("accum", [1, 3])
def test_resume_gives_identical_parameters(tmp_path, accum):
    straight = Net()
    train(straight, Regression(), args(tmp_path / "a", gradient_accumulation_steps=accum))
    first = Net()
    train(first, Regression(), args(tmp_path / "b", gradient_accumulation_steps=accum, stop_at_step=6))
    assert latest_checkpoint(tmp_path / "b").name == "checkpoint-6"
    resumed = Net()  # a fresh process would start from a fresh model; resume restores everything
    result = train(resumed, Regression(), args(tmp_path / "b", gradient_accumulation_steps=accum, resume=True))
    assert result.global_step == 12
    for (k, a), b in zip(params(straight).items(), params(resumed).values()):
        assert torch.equal(a, b), k


def test_resume_across_an_epoch_boundary(tmp_path):
    # 48 examples / batch 4 = 12 steps per epoch; 20 steps cross into epoch 2
    straight = Net()
    train(straight, Regression(), args(tmp_path / "a", max_steps=20))
    part = Net()
    train(part, Regression(), args(tmp_path / "b", max_steps=20, stop_at_step=14))
    resumed = Net()
    train(resumed, Regression(), args(tmp_path / "b", max_steps=20, resume=True))
    for a, b in zip(params(straight).values(), params(resumed).values()):
        assert torch.equal(a, b)


def test_accumulation_equals_a_big_batch(tmp_path):
    big, small = Net(dropout=0.0), Net(dropout=0.0)
    train(big, Regression(), args(tmp_path / "a", per_device_train_batch_size=8, max_steps=5))
    train(small, Regression(), args(tmp_path / "b", per_device_train_batch_size=4, gradient_accumulation_steps=2, max_steps=5))
    for a, b in zip(params(big).values(), params(small).values()):
        assert torch.allclose(a, b, atol=1e-6)


def test_checkpoints_are_complete_and_pruned(tmp_path):
    train(Net(), Regression(), args(tmp_path, save_total_limit=2))
    ckpts = sorted(p.name for p in tmp_path.glob("checkpoint-*"))
    assert ckpts == ["checkpoint-12", "checkpoint-9"]
    assert (tmp_path / "latest").read_text().strip() == "checkpoint-12"
    assert not list(tmp_path.glob(".checkpoint-*"))  # no temporary folder left behind
    state = json.loads((tmp_path / "checkpoint-12" / "trainer_state.json").read_text())
    assert state["global_step"] == 12


def test_interrupted_checkpoint_write_keeps_the_previous_one(tmp_path, monkeypatch):
    """A crash while writing checkpoint-6 leaves `latest` on checkpoint-3, and resume works."""
    import spanbert.trainer as trainer_mod

    real_save = torch.save
    calls = {"n": 0}

    def flaky_save(obj, f, *a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt("killed while writing")
        return real_save(obj, f, *a, **k)

    monkeypatch.setattr(trainer_mod.torch, "save", flaky_save)
    with pytest.raises(KeyboardInterrupt):
        train(Net(), Regression(), args(tmp_path))
    monkeypatch.setattr(trainer_mod.torch, "save", real_save)
    assert latest_checkpoint(tmp_path).name == "checkpoint-3"
    assert train(Net(), Regression(), args(tmp_path, resume=True)).global_step == 12


def test_clipping_really_applies(tmp_path):
    seen = []
    model = Net(dropout=0.0)
    model.scale = 1e4  # enormous gradients

    original = torch.optim.AdamW.step

    def spy(self, *a, **k):
        norms = [p.grad.norm() ** 2 for g in self.param_groups for p in g["params"] if p.grad is not None]
        seen.append(float(torch.stack(norms).sum().sqrt()))
        return original(self, *a, **k)

    torch.optim.AdamW.step = spy
    try:
        train(model, Regression(), args(tmp_path, max_steps=3, max_grad_norm=1.0))
    finally:
        torch.optim.AdamW.step = original
    assert len(seen) == 3 and max(seen) <= 1.0 + 1e-4


def test_nan_stops_with_the_step(tmp_path):
    model = Net()
    model.scale = float("nan")
    with pytest.raises(SpanBertError, match="step 1"):
        train(model, Regression(), args(tmp_path))


def test_nan_skip_policy(tmp_path):
    class SometimesNan(Net):
        def forward(self, x, y):
            out = super().forward(x, y)
            if x[:, 0].max() > 1.0:  # about half of the batches
                out["loss"] = out["loss"] * float("nan")
            return out

    model = SometimesNan()
    result = train(model, Regression(), args(tmp_path, nan_policy="skip"))
    assert result.global_step == 12 and 0 < result.skipped_steps < 12
    assert all(torch.isfinite(v).all() for v in model.state_dict().values())


def test_weight_decay_groups_skip_layernorm_and_bias():
    groups = param_groups(Net(), 1e-4, 0.1, lr_by_prefix={"l2.": 1e-3})
    by_decay = {}
    for g in groups:
        for p in g["params"]:
            by_decay[id(p)] = (g["weight_decay"], g["lr"])
    net = Net()
    groups = param_groups(net, 1e-4, 0.1, lr_by_prefix={"l2.": 1e-3})
    lookup = {id(p): (g["weight_decay"], g["lr"]) for g in groups for p in g["params"]}
    assert lookup[id(net.l1.weight)] == (0.1, 1e-4)
    assert lookup[id(net.l1.bias)] == (0.0, 1e-4)
    assert lookup[id(net.norm.weight)] == (0.0, 1e-4)
    assert lookup[id(net.l2.weight)] == (0.1, 1e-3)


def test_linear_warmup_then_decay():
    f = lr_lambda(total_steps=100, warmup_steps=10, kind="linear")
    assert f(0) == pytest.approx(0.1) and f(9) == pytest.approx(1.0)
    assert f(10) == pytest.approx(1.0) and f(55) == pytest.approx(0.5) and f(100) == 0.0


def test_micro_batches_one_vs_two_processes_cover_the_same_samples():
    one = micro_batches(40, 0, 0, 4, 2, rank=0, world=1, start_step=0)
    r0 = micro_batches(40, 0, 0, 4, 1, rank=0, world=2, start_step=0)
    r1 = micro_batches(40, 0, 0, 4, 1, rank=1, world=2, start_step=0)
    assert [s[0] for s in one] == [s[0] for s in r0] and [s[1] for s in one] == [s[0] for s in r1]


def test_last_partial_step_has_fewer_micro_batches():
    # one process: 10 examples, batch 4, accumulation 2 -> steps of [4, 4] and [2]
    plan = micro_batches(10, 0, 0, 4, 2, rank=0, world=1, start_step=0)
    assert [[len(mb) for mb in step] for step in plan] == [[4, 4], [2]]
    assert sorted(i for step in plan for mb in step for i in mb) == list(range(10))


def test_too_small_dataset_is_an_error(tmp_path):
    class Empty(torch.utils.data.Dataset):
        def __len__(self):
            return 0

    with pytest.raises(SpanBertError, match="empty"):
        train(Net(), Empty(), args(tmp_path))


DDP_SCRIPT = """
import sys, torch
sys.path.insert(0, {tests!r})
from test_trainer import Net, Regression, args
from spanbert.trainer import train
model = Net(dropout=0.0)
train(model, Regression(), args({out!r}, per_device_train_batch_size=4, gradient_accumulation_steps={accum}, max_steps=6, save_steps=0))
import os
if int(os.environ.get("RANK", 0)) == 0:
    torch.save(model.state_dict(), {out!r} + "/final.pt")
"""


@pytest.mark.slow
def test_two_processes_match_one(tmp_path):
    """torchrun --nproc_per_node 2 (gloo) == one process with accumulation 2 (same global batch)."""
    tests = str(Path(__file__).parent)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": tests}
    results = {}
    for name, nproc, accum in (("one", 1, 2), ("two", 2, 1)):
        out = tmp_path / name
        out.mkdir()
        script = tmp_path / f"{name}.py"
        script.write_text(DDP_SCRIPT.format(tests=tests, out=str(out), accum=accum))
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", str(script)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, proc.stderr[-3000:]
        results[name] = torch.load(out / "final.pt", weights_only=True)
    for k in results["one"]:
        assert torch.allclose(results["one"][k], results["two"][k], atol=1e-6), k
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_denormals_are_flushed_only_while_training(tmp_path):
    seen = {}

    class Probe(Net):
        def forward(self, x, y):
            seen["inside"] = float(torch.tensor([1e-39]) * 1.0)  # a float32 subnormal
            return super().forward(x, y)

    train(Probe(), Regression(), args(tmp_path, max_steps=1))
    assert seen["inside"] == 0.0  # flushed during the step (fast CPU arithmetic)
    assert float(torch.tensor([1e-39]) * 1.0) != 0.0  # the caller's float mode is restored
