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
from spanbert.optim import lr_lambda
from spanbert.runs import latest_checkpoint
from spanbert.trainer import micro_batches, train
from spanbert.training_args import TrainingArguments


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


def test_train_seconds_count_every_run_of_a_resumed_run(tmp_path):
    """Each checkpoint records the wall time of training so far; a resumed run goes on from its checkpoint's
    count (what `spanbert study` reports as a killed pre-training cell's time), not from zero."""
    first = train(Net(), Regression(), args(tmp_path, stop_at_step=6))
    state = tmp_path / "checkpoint-6" / "trainer_state.json"
    saved = json.loads(state.read_text())
    assert 0 < saved["train_seconds"] <= first.train_seconds
    saved["train_seconds"] = 1000.0  # as if the killed run had trained for 1,000 s
    state.write_text(json.dumps(saved))
    result = train(Net(), Regression(), args(tmp_path, resume=True))
    assert result.global_step == 12 and 1000.0 < result.train_seconds < 1000.0 + 600
    assert json.loads((tmp_path / "checkpoint-9" / "trainer_state.json").read_text())["train_seconds"] > 1000.0


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


def _assert_two_processes_match_one(tmp_path: Path, script_template: str) -> None:
    """Run ``script_template`` under torchrun with 2 gloo processes and accumulation 1, and with 1
    process and accumulation 2; the final weights must agree."""
    tests = str(Path(__file__).parent)
    path = os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")]))  # the caller's spanbert first
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    results = {}
    for name, nproc, accum in (("one", 1, 2), ("two", 2, 1)):
        out = tmp_path / name
        out.mkdir()
        script = tmp_path / f"{name}.py"
        script.write_text(script_template.format(tests=tests, out=str(out), accum=accum))
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", str(script)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, proc.stderr[-3000:]
        results[name] = torch.load(out / "final.pt", weights_only=True)
    for k in results["one"]:
        assert torch.allclose(results["one"][k], results["two"][k], atol=1e-6), k
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.mark.slow
def test_two_processes_match_one(tmp_path):
    """torchrun --nproc_per_node 2 (gloo) == one process with accumulation 2 (same global batch)."""
    _assert_two_processes_match_one(tmp_path, DDP_SCRIPT)


@pytest.mark.slow
def test_two_processes_match_one_with_a_term_schedule(tmp_path):
    """A step-dependent loss factor (`train`'s ``term_schedule``, pre-training's --sbo_warmup_steps) is
    the same on both ranks and for both micro-batches of an accumulated step."""
    schedule = "term_schedule=lambda step: {{'loss': min(1.0, step / 4)}})"
    _assert_two_processes_match_one(tmp_path, DDP_SCRIPT.replace("save_steps=0))", f"save_steps=0), {schedule}"))


def test_denormals_are_flushed_only_while_training(tmp_path):
    seen = {}

    class Probe(Net):
        def forward(self, x, y):
            seen["inside"] = float(torch.tensor([1e-39]) * 1.0)  # a float32 subnormal
            return super().forward(x, y)

    train(Probe(), Regression(), args(tmp_path, max_steps=1))
    assert seen["inside"] == 0.0  # flushed during the step (fast CPU arithmetic)
    assert float(torch.tensor([1e-39]) * 1.0) != 0.0  # the caller's float mode is restored


def test_denormals_are_flushed_on_torchs_worker_threads_too(tmp_path):
    """torch's OpenMP workers exist before a run starts (`torch.set_num_threads` makes them) and a thread's
    flush flag is its own: with the flag on the calling thread only, the workers' share of every large op
    kept its denormals, ~100x slower arithmetic (half of each op on 2 threads)."""
    from spanbert import threads
    from spanbert.precision import _openmp_runtime

    if _openmp_runtime() is None or not torch.set_flush_denormal(False):
        pytest.skip("no OpenMP runtime with omp_pause_resource_all, or a CPU without flush-to-zero")
    if threads.most_threads() < 2:
        pytest.skip("one usable core: no worker thread to check")
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    subnormals = torch.full((1 << 20,), 1e-39)  # large enough to be split between the threads
    try:
        assert bool(((subnormals * 0.5) != 0).all())  # the pool exists, without the flag
        seen = {}

        class Probe(Net):
            def forward(self, x, y):
                seen["threads"] = torch.get_num_threads()
                seen["kept"] = int(((subnormals * 0.5) != 0).sum())
                return super().forward(x, y)

        train(Probe(), Regression(), args(tmp_path, max_steps=1, threads=2))
        assert seen["threads"] == 2
        assert seen["kept"] == 0  # every thread flushed them (old code: the worker's half, 524,288)
        assert bool(((subnormals * 0.5) != 0).all())  # and every thread has IEEE subnormals again
    finally:
        threads.reset()  # --threads 2 fixed the count for this process
        torch.set_num_threads(before)


# --- token-budget batching (max_tokens_per_batch), fairseq's schedule and decay of every parameter ---

import numpy as np  # noqa: E402

from spanbert.trainer import token_batches, token_micro_batches  # noqa: E402


class Ragged(torch.utils.data.Dataset):
    """Regression items of varying length (padded by the collator), with lengths() for token batching."""

    def __init__(self, n: int = 40):
        self.lens = np.random.default_rng(3).integers(2, 9, size=n)

    def __len__(self):
        return len(self.lens)

    def lengths(self):
        return self.lens

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(int(self.lens[i]), 4, generator=g)
        return {"x": x, "y": x.sum(1, keepdim=True)}


def ragged_collate(items):
    T = max(len(it["x"]) for it in items)
    x = torch.zeros(len(items), T, 4)
    y = torch.zeros(len(items), T, 1)
    mask = torch.zeros(len(items), T)
    for b, it in enumerate(items):
        n = len(it["x"])
        x[b, :n], y[b, :n], mask[b, :n] = it["x"], it["y"], 1
    return {"x": x, "y": y, "mask": mask}


class TokenNet(Net):
    """Per-token regression: one loss term, a mean over the real tokens of the micro-batch."""

    def forward(self, x, y, mask):
        pred = self.l2(self.drop(self.norm(torch.relu(self.l1(x)))))  # (B, T, 1)
        err = ((pred - y) ** 2).squeeze(-1) * mask  # (B, T)
        mean = err.sum() / mask.sum()
        return {"loss": mean, "loss_terms": {"tok": mean}}


def token_counts(batch):
    return {"tok": int(batch["mask"].sum())}


def test_token_batches_cover_every_example_once_within_the_budget():
    lengths = np.random.default_rng(0).integers(3, 60, size=500)
    sizes = set()
    for epoch in (0, 1):
        batches = token_batches(lengths, 128, seed=5, epoch=epoch)
        assert sorted(i for b in batches for i in b) == list(range(500))  # each example once
        assert all(len(b) * lengths[b].max() <= 128 for b in batches)  # padded size within budget
        # greedy: the next example of the length order would not have fitted
        sizes.add(len(batches))
    assert len(sizes) == 1  # the same number of batches in every epoch
    a, b = token_batches(lengths, 128, 5, 0), token_batches(lengths, 128, 5, 1)
    assert a != b and a == token_batches(lengths, 128, 5, 0)  # a pure function of (seed, epoch)
    with pytest.raises(SpanBertError, match="max_tokens_per_batch"):
        token_batches(lengths, 50, 5, 0)  # the longest example does not fit


def test_token_batches_are_greedy_like_fairseq():
    # sorted lengths 2,2,3,3,5: budget 9 -> [2,2,3 -> 3 x 3 = 9], [3,5 -> 2 x 5 = 10 > 9: cut] ...
    batches = token_batches(np.array([5, 2, 3, 2, 3]), 9, seed=0, epoch=0)
    lens = sorted(sorted(int(x) for x in np.array([5, 2, 3, 2, 3])[b]) for b in batches)
    assert lens == [[2, 2, 3], [3], [5]]


def test_token_micro_batches_one_vs_two_processes():
    lengths = np.random.default_rng(1).integers(2, 20, size=200)
    one = token_micro_batches(lengths, 40, 0, 0, accum=2, rank=0, world=1, start_step=0)
    r0 = token_micro_batches(lengths, 40, 0, 0, accum=1, rank=0, world=2, start_step=0)
    r1 = token_micro_batches(lengths, 40, 0, 0, accum=1, rank=1, world=2, start_step=0)
    n = len(r0)
    assert [s[0] for s in one[:n]] == [s[0] for s in r0] and [s[1] for s in one[:n]] == [s[0] for s in r1]
    assert token_micro_batches(lengths, 40, 0, 0, 2, 0, 1, start_step=3) == one[3:]


def test_token_batching_resume_is_exact(tmp_path):
    kw = dict(max_tokens_per_batch=16, gradient_accumulation_steps=2, max_steps=12, save_steps=4)
    straight = TokenNet()
    train(straight, Ragged(), args(tmp_path / "a", **kw), collate_fn=ragged_collate, count_targets=token_counts)
    part = TokenNet()
    train(part, Ragged(), args(tmp_path / "b", stop_at_step=6, **kw), collate_fn=ragged_collate, count_targets=token_counts)
    resumed = TokenNet()
    result = train(resumed, Ragged(), args(tmp_path / "b", resume=True, **kw), collate_fn=ragged_collate, count_targets=token_counts)
    assert result.global_step == 12  # crosses epochs: 40 examples make fewer than 12 x 2 batches of 16 tokens
    for (k, a), b in zip(params(straight).items(), params(resumed).values()):
        assert torch.equal(a, b), k


def test_token_batching_accumulation_weighs_by_targets(tmp_path, adamw_grads):
    """One step of 2 accumulated token micro-batches == the mean over all their tokens (hand-computed)."""
    ds = Ragged(12)
    grads = adamw_grads
    net = TokenNet(dropout=0.0)
    train(net, ds, args(tmp_path, max_tokens_per_batch=16, gradient_accumulation_steps=2, max_steps=1,
                        warmup_steps=0, max_grad_norm=0.0), collate_fn=ragged_collate, count_targets=token_counts)
    step0 = token_micro_batches(ds.lengths(), 16, TrainingArguments().seed, 0, 2, 0, 1, 0)[0]
    assert len(step0) == 2 and len({int(ds.lengths()[mb].sum()) for mb in step0}) == 2  # unequal token counts
    ref = TokenNet(dropout=0.0)
    batches = [ragged_collate([ds[i] for i in mb]) for mb in step0]
    total_err = sum(((ref.l2(ref.norm(torch.relu(ref.l1(b["x"])))) - b["y"]) ** 2).squeeze(-1).mul(b["mask"]).sum()
                    for b in batches)
    (total_err / sum(b["mask"].sum() for b in batches)).backward()
    for (name, p), q in zip(net.named_parameters(), ref.parameters()):
        assert torch.allclose(grads[0][id(p)], q.grad, atol=1e-6), name


def test_token_batching_needs_lengths(tmp_path):
    with pytest.raises(SpanBertError, match="lengths"):
        train(Net(), Regression(), args(tmp_path, max_tokens_per_batch=8))


TOKEN_DDP_SCRIPT = """
import sys, torch
sys.path.insert(0, {tests!r})
from test_trainer import TokenNet, Ragged, ragged_collate, token_counts, args
from spanbert.trainer import train
model = TokenNet(dropout=0.0)
train(model, Ragged(), args({out!r}, max_tokens_per_batch=16, gradient_accumulation_steps={accum}, max_steps=6,
      save_steps=0), collate_fn=ragged_collate, count_targets=token_counts)
import os
if int(os.environ.get("RANK", 0)) == 0:
    torch.save(model.state_dict(), {out!r} + "/final.pt")
"""


@pytest.mark.slow
def test_two_processes_match_one_with_a_token_budget(tmp_path):
    """torchrun 2 x gloo with token batches == one process with accumulation 2 (same micro-batches,
    micro-batches of unequal token counts weighted by their targets)."""
    _assert_two_processes_match_one(tmp_path, TOKEN_DDP_SCRIPT)


# --- an example count that is not a multiple of the global batch (issue 22.3) ---------------------


@pytest.mark.parametrize("n", [1, 7, 43, 44, 45])
@pytest.mark.parametrize("world,accum", [(1, 1), (1, 2), (2, 1), (2, 2), (3, 1)])
def test_every_example_once_per_epoch_whatever_the_processes(n, world, accum):
    """Each epoch trains on every example exactly once, with one process or several: the short last
    step is spread over the ranks, a rank with no share left runs a weight-0 `PadBatch`, and every rank
    has the same number of steps and micro-batches per step (DDP's collectives stay paired)."""
    from spanbert.trainer import PadBatch

    plans = [micro_batches(n, 3, 1, 4, accum, rank=r, world=world, start_step=0) for r in range(world)]
    assert len({len(p) for p in plans}) == 1 and all(len(p) == -(-n // (4 * world * accum)) for p in plans)
    for steps in zip(*plans):
        assert len({len(mbs) for mbs in steps}) == 1
    real = [i for p in plans for step in p for mb in step if not isinstance(mb, PadBatch) for i in mb]
    assert sorted(real) == list(range(n))
    pads = [(s, mb) for p in plans for s, step in enumerate(p) for mb in step if isinstance(mb, PadBatch)]
    assert all(s == len(plans[0]) - 1 and len(mb) == 1 for s, mb in pads)  # only in the short last step
    # the same examples in each step as one process with the same global batch
    one = micro_batches(n, 3, 1, 4, accum * world, rank=0, world=1, start_step=0)
    for s, step in enumerate(one):
        mine = sorted(i for p in plans for mb in p[s] if not isinstance(mb, PadBatch) for i in mb)
        assert mine == sorted(i for mb in step for i in mb)


@pytest.mark.parametrize("n", [5, 40, 41])
def test_token_micro_batches_cover_every_batch_once_with_two_processes(n):
    from spanbert.trainer import PadBatch, token_batches, token_micro_batches

    lengths = Ragged(n).lengths()
    plans = [token_micro_batches(lengths, 24, 0, 2, 2, rank=r, world=2, start_step=0) for r in range(2)]
    assert len(plans[0]) == len(plans[1])
    for a, b in zip(*plans):
        assert len(a) == len(b)
    real = sorted(tuple(mb) for p in plans for step in p for mb in step if not isinstance(mb, PadBatch))
    assert real == sorted(tuple(mb) for mb in token_batches(lengths, 24, 0, 2))


ODD_SCRIPT = """
import sys, torch
sys.path.insert(0, {tests!r})
from test_trainer import Net, Regression, args
from spanbert.trainer import train


class Odd(Regression):
    def __len__(self):
        return 43  # 5 global batches of 8 and 3 left: rank 0 takes them, rank 1 pads


model = Net(dropout=0.0)
train(model, Odd(), args({out!r}, per_device_train_batch_size=4, gradient_accumulation_steps={accum}, max_steps=-1,
                         num_train_epochs=2, save_steps=0))
import os
if int(os.environ.get("RANK", 0)) == 0:
    torch.save(model.state_dict(), {out!r} + "/final.pt")
"""


@pytest.mark.slow
def test_two_processes_match_one_with_an_odd_example_count(tmp_path):
    """43 examples, global batch 8, two epochs: torchrun 2 x gloo == one process with accumulation 2
    (12 steps each; the short last step of each epoch trained on, not dropped under DDP)."""
    _assert_two_processes_match_one(tmp_path, ODD_SCRIPT)


def test_a_resume_with_more_steps_runs_the_new_schedule_from_the_first_step(tmp_path):
    """--resume with a larger max_steps: the first resumed step already runs at the new schedule's rate
    (it ran at the old schedule's last rate, 0 for a linear decay, so it changed nothing)."""
    train(Net(), Regression(), args(tmp_path, max_steps=4, logging_steps=1))
    train(Net(), Regression(), args(tmp_path, max_steps=8, logging_steps=1, resume=True))
    log = {r["step"]: r for r in map(json.loads, (tmp_path / "log.jsonl").read_text().splitlines())}
    new = lr_lambda(8, 3, "linear")
    assert log[5]["train/lr"] == pytest.approx(1e-2 * new(4)) and log[5]["train/lr"] > 0


def _progress_run(tmp_path, capsys, **kw):
    """A tiny training with its progress bar on, stderr captured (not a terminal), a held-out line
    printed at every evaluation as `pretrain` prints it; returns the captured stderr."""
    from spanbert.distributed import eprint0

    def evaluate(model, step):
        eprint0(f"held-out at step {step}: loss 1.0000")
        return {"loss": 1.0}

    capsys.readouterr()
    train(Net(), Regression(), args(tmp_path, disable_tqdm=False, eval_steps=4, **kw), eval_fn=evaluate)
    return capsys.readouterr().err


def test_progress_to_a_file_is_whole_lines(tmp_path, capsys, monkeypatch):
    import re

    from spanbert import utils

    monkeypatch.setattr(utils, "LINE_INTERVAL_S", 0.0)  # a line at every refresh: many lines to check
    err = _progress_run(tmp_path, capsys)
    assert "\r" not in err and err.endswith("\n")
    lines = err.splitlines()
    bars = [line for line in lines if line.startswith("train:")]
    assert len(bars) >= 3, err
    for line in bars:  # tqdm's own text, one bar per line, nothing glued after it
        assert re.fullmatch(r"train: +\d+%\|.*\| \d+/12 \[[^\]]*\]", line), line
    held_out = [line for line in lines if "held-out at step" in line]
    assert len(held_out) == 3 and all(line.startswith("held-out at step") for line in held_out), err
    assert bars[-1].startswith("train: 100%|") and "12/12" in bars[-1]


def test_progress_to_a_file_is_rate_limited(tmp_path, capsys):
    """At the default interval (30 s) a run of seconds writes one progress line: its last."""
    err = _progress_run(tmp_path, capsys)
    assert [line for line in err.splitlines() if line.startswith("train:")] == [err.splitlines()[-1]]
    assert "12/12" in err.splitlines()[-1] and "\r" not in err
