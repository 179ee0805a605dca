"""The optimiser and its schedule (`spanbert.optim`): parameter groups (no decay for biases and LayerNorm unless
every parameter decays, a learning rate or a weight decay by name prefix) and the learning-rate multipliers of
the linear, polynomial (fairseq's) and cosine schedules with warm-up. Their use in a run (clipping each group,
each group's minimum under cosine) is tested in test_selection.py and test_trainer.py."""

from __future__ import annotations

import pytest
from test_trainer import Net

from spanbert.optim import lr_lambda, param_groups
from spanbert.training_args import TrainingArguments


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


def test_decay_all_parameters_decays_biases_and_layernorm():
    net = Net()
    lookup = {id(p): g["weight_decay"] for g in param_groups(net, 1e-4, 0.01, decay_all=True) for p in g["params"]}
    assert {lookup[id(p)] for p in net.parameters()} == {0.01}
    lookup = {id(p): g["weight_decay"] for g in param_groups(net, 1e-4, 0.01) for p in g["params"]}
    assert lookup[id(net.l1.bias)] == 0.0 and lookup[id(net.norm.weight)] == 0.0 and lookup[id(net.l1.weight)] == 0.01


def test_linear_warmup_then_decay():
    f = lr_lambda(total_steps=100, warmup_steps=10, kind="linear")
    assert f(0) == pytest.approx(0.1) and f(9) == pytest.approx(1.0)
    assert f(10) == pytest.approx(1.0) and f(55) == pytest.approx(0.5) and f(100) == 0.0


def test_polynomial_schedule_is_fairseqs():
    # fairseq polynomial_decay, warmup 10, total 100: update k (1-based) runs at max(1, k-1)/10, then 1 - (k-1)/100
    f = lr_lambda(total_steps=100, warmup_steps=10, kind="polynomial")
    assert [f(s) for s in (0, 1, 2, 9, 10)] == pytest.approx([0.1, 0.1, 0.2, 0.9, 1.0])
    assert f(11) == pytest.approx(0.89) and f(50) == pytest.approx(0.5) and f(100) == 0.0
    assert TrainingArguments(lr_scheduler_type="polynomial").lr_scheduler_type == "polynomial"


def test_weight_decay_by_prefix_keeps_bias_and_layernorm_at_zero():
    net = Net()
    groups = param_groups(net, 1e-4, 0.01, weight_decay_by_prefix={"l2.": 0.0, "l1.": 0.5})
    lookup = {id(p): g["weight_decay"] for g in groups for p in g["params"]}
    assert lookup[id(net.l1.weight)] == 0.5 and lookup[id(net.l1.bias)] == 0.0
    assert lookup[id(net.l2.weight)] == 0.0 and lookup[id(net.norm.weight)] == 0.0


def test_cosine_schedule_from_init_to_min():
    from spanbert.optim import cosine_lambda

    f = cosine_lambda(total_steps=110, warmup_steps=10, peak=1e-3, init_lr=1e-7, min_lr=1e-4)
    assert f(0) * 1e-3 == pytest.approx(1e-7) and f(5) * 1e-3 == pytest.approx(1e-7 + (1e-3 - 1e-7) / 2)
    assert f(10) == pytest.approx(1.0) and f(60) * 1e-3 == pytest.approx((1e-3 + 1e-4) / 2)
    assert f(110) * 1e-3 == pytest.approx(1e-4) and f(500) * 1e-3 == pytest.approx(1e-4)
