"""Best-on-dev model selection and per-prefix optimizer groups of `spanbert.trainer.train`."""

from __future__ import annotations

import json

import pytest
import torch
from test_trainer import Net, Regression, args

from spanbert.errors import SpanBertError
from spanbert.trainer import eval_schedule, train


def _peaking_eval(peak: int, seen: dict):
    """An eval_fn whose score is highest at step ``peak``; it records the weights it saw at each step."""

    def evaluate(model, step):
        seen[step] = {k: v.clone() for k, v in model.state_dict().items()}
        return {"score": -abs(step - peak), "other": float(step)}

    return evaluate


def test_the_best_evaluation_is_the_model_at_the_end(tmp_path):
    seen: dict = {}
    model = Net()
    # 48 examples / batch 4 = 12 steps per epoch; 4 evaluations per epoch: steps 3, 6, 9, 12
    a = args(tmp_path, max_steps=12, evals_per_epoch=4, metric_for_best_model="score", save_steps=0)
    result = train(model, Regression(), a, eval_fn=_peaking_eval(6, seen))
    assert sorted(seen) == [3, 6, 9, 12]
    assert result.best_step == 6 and result.best_metrics["score"] == 0
    for k, v in model.state_dict().items():
        assert torch.equal(v, seen[6][k]), k
    assert not torch.equal(seen[6]["l1.weight"], seen[12]["l1.weight"])
    info = json.loads((tmp_path / "best" / "best.json").read_text())
    assert info["step"] == 6 and info["metrics"]["other"] == 6.0


@pytest.mark.parametrize(
    "epoch_steps, per_epoch, expected",
    [
        (25, 10, [3, 5, 8, 10, 13, 15, 18, 20, 23, 25]),  # 10, not the 12 of an interval 25 // 10 = 2
        (12, 4, [3, 6, 9, 12]),
        (3, 10, [1, 2, 3]),  # fewer steps than evaluations: every step
        (7, 1, [7]),
    ],
)
def test_evals_per_epoch_evaluates_exactly_that_many_times(epoch_steps, per_epoch, expected):
    due = eval_schedule(0, per_epoch, epoch_steps)
    assert [s for s in range(1, epoch_steps + 1) if due(s)] == expected
    # the second epoch repeats the first's points
    assert [s - epoch_steps for s in range(epoch_steps + 1, 2 * epoch_steps + 1) if due(s)] == expected
    assert [s for s in range(1, 13) if eval_schedule(5, per_epoch, epoch_steps)(s)] == [5, 10]  # eval_steps wins


def test_without_a_metric_the_last_model_is_kept(tmp_path):
    seen: dict = {}
    model = Net()
    result = train(model, Regression(), args(tmp_path, evals_per_epoch=4, save_steps=0), eval_fn=_peaking_eval(6, seen))
    assert result.best_step is None and not (tmp_path / "best").exists()
    for k, v in model.state_dict().items():
        assert torch.equal(v, seen[12][k])


def test_lower_is_better_for_a_loss(tmp_path):
    model = Net()

    def evaluate(m, step):
        return {"loss": abs(step - 9)}

    a = args(tmp_path, evals_per_epoch=4, metric_for_best_model="loss", greater_is_better=False, save_steps=0)
    assert train(model, Regression(), a, eval_fn=evaluate).best_step == 9


def test_selection_survives_a_resume(tmp_path):
    straight_seen: dict = {}
    straight = Net()
    a = dict(max_steps=12, evals_per_epoch=4, metric_for_best_model="score", save_steps=3)
    train(straight, Regression(), args(tmp_path / "a", **a), eval_fn=_peaking_eval(6, straight_seen))

    first = Net()
    train(first, Regression(), args(tmp_path / "b", stop_at_step=7, **a), eval_fn=_peaking_eval(6, {}))
    resumed = Net()
    result = train(resumed, Regression(), args(tmp_path / "b", resume=True, **a), eval_fn=_peaking_eval(6, {}))
    assert result.best_step == 6
    for k, v in resumed.state_dict().items():
        assert torch.equal(v, straight.state_dict()[k]), k


def test_an_unknown_metric_names_the_results(tmp_path):
    a = args(tmp_path, evals_per_epoch=4, metric_for_best_model="f1", save_steps=0)
    with pytest.raises(SpanBertError, match=r"--metric_for_best_model: found 'f1', expected one of .*other, score"):
        train(Net(), Regression(), a, eval_fn=_peaking_eval(6, {}))


def test_clip_by_prefix_clips_each_group_on_its_own(tmp_path):
    seen = []
    model = Net(dropout=0.0)
    model.scale = 1e4  # enormous gradients: every group is clipped
    original = torch.optim.AdamW.step

    def spy(self, *a, **k):
        norm = {
            name: float(torch.stack([p.grad.norm() ** 2 for p in mod.parameters()]).sum().sqrt())
            for name, mod in (("l1", model.l1), ("rest", nn_rest(model)))
        }
        seen.append(norm)
        return original(self, *a, **k)

    def nn_rest(m):
        return torch.nn.ModuleList([m.norm, m.l2])

    torch.optim.AdamW.step = spy
    try:
        train(model, Regression(), args(tmp_path, max_steps=2, max_grad_norm=1.0), clip_by_prefix=("l1.",))
    finally:
        torch.optim.AdamW.step = original
    for norm in seen:
        assert norm["l1"] == pytest.approx(1.0, rel=1e-3) and norm["rest"] == pytest.approx(1.0, rel=1e-3)


def test_each_group_reaches_its_own_minimum_under_cosine(tmp_path):
    model = Net()
    seen = []
    a = args(tmp_path, max_steps=12, warmup_steps=2, lr_scheduler_type="cosine", warmup_init_lr=0.0, min_lr=1e-5,
             save_steps=0)  # fmt: skip
    original = torch.optim.AdamW.step

    def spy(self, *x, **k):
        seen.append(sorted(g["lr"] for g in self.param_groups))
        return original(self, *x, **k)

    torch.optim.AdamW.step = spy
    try:
        train(model, Regression(), a, lr_by_prefix={"l2.": 1e-1})
    finally:
        torch.optim.AdamW.step = original
    assert seen[2][0] == pytest.approx(1e-2) and seen[2][-1] == pytest.approx(1e-1)  # the peaks after warmup
    assert all(lr > 1e-5 for lr in seen[-1])  # the last step runs just above the floor


def test_nesterov_trains_and_resumes_exactly(tmp_path):
    a = dict(optim="nesterov", momentum=0.99, max_grad_norm=0.1, learning_rate=1e-2, save_steps=3)
    straight = Net()
    first = train(straight, Regression(), args(tmp_path / "a", **a))
    assert first.metrics["loss"] < 10
    b = Net()
    train(b, Regression(), args(tmp_path / "b", stop_at_step=5, **a))
    resumed = Net()
    train(resumed, Regression(), args(tmp_path / "b", resume=True, **a))
    for k, v in resumed.state_dict().items():
        assert torch.equal(v, straight.state_dict()[k]), k
    state = torch.load(tmp_path / "b" / "checkpoint-12" / "state.pt", weights_only=True)
    assert state["optimizer"]["param_groups"][0]["nesterov"] is True
