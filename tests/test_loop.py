"""The training loop's pieces (`spanbert.loop`): the stop step and the schedule of each parameter group, batches
on the device, each micro-batch's share of the step's targets; through `spanbert.trainer.train`, accumulation
weighed as one big batch (the pre-training heads each by their own target counts, the released recipe by
fairseq's formula), fp16 loss-scaler overflows skipped and counted, the learning rate logged as the step used it."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from test_trainer import Net, Regression, args, params

import spanbert.trainer as trainer_mod
from spanbert import loop
from spanbert.errors import SpanBertError
from spanbert.trainer import train
from spanbert.training_args import TrainingArguments

# --- the pieces on their own --------------------------------------------------------------------


def test_a_run_stops_at_its_total_or_at_stop_at_step_when_sooner():
    assert loop.stop_step(100, TrainingArguments()) == 100
    assert loop.stop_step(100, TrainingArguments(stop_at_step=30)) == 30
    assert loop.stop_step(20, TrainingArguments(stop_at_step=30)) == 20


def test_cosine_gives_each_group_its_own_multiplier_and_the_others_share_one():
    groups = [{"initial_lr": 1e-3}, {"initial_lr": 1e-4}]
    linear = loop.schedule(100, 10, groups, TrainingArguments(lr_scheduler_type="linear"))
    assert len(linear) == 2 and linear[0] is linear[1]
    assert [linear[0](s) for s in (0, 4, 10, 55, 100)] == pytest.approx([0.1, 0.5, 1.0, 0.5, 0.0])
    cosine = loop.schedule(100, 10, groups, TrainingArguments(lr_scheduler_type="cosine", warmup_init_lr=1e-7,
                                                              min_lr=1e-6))  # fmt: skip
    # absolute rates: each group warms up from the same start to its own peak, then anneals to the same floor
    assert [g["initial_lr"] * f(10) for g, f in zip(groups, cosine)] == pytest.approx([1e-3, 1e-4])
    assert [g["initial_lr"] * f(100) for g, f in zip(groups, cosine)] == pytest.approx([1e-6, 1e-6])
    assert [g["initial_lr"] * f(0) for g, f in zip(groups, cosine)] == pytest.approx([1e-7, 1e-7])


def test_to_device_moves_the_tensors_of_nested_batches_and_keeps_the_rest():
    batch = {"input_ids": torch.ones(2, 3), "spans": [torch.zeros(1), (torch.zeros(2), "id-7")], "n": 4, "x": None}
    moved = loop.to_device(batch, torch.device("meta"))
    assert moved["input_ids"].device.type == "meta" and moved["input_ids"].shape == (2, 3)
    assert isinstance(moved["spans"], list) and isinstance(moved["spans"][1], tuple)
    assert moved["spans"][0].device.type == "meta" and moved["spans"][1][0].device.type == "meta"
    assert moved["spans"][1][1] == "id-7" and moved["n"] == 4 and moved["x"] is None


def test_a_padding_micro_batch_counts_no_target():
    mbs = [{"input_ids": torch.ones(3, 5)}, {"input_ids": torch.ones(2, 5)}, {"input_ids": torch.ones(1, 5)}]
    counts, totals = loop.step_counts(mbs, [False, False, True], lambda mb: {"mlm": 2 * len(mb["input_ids"])}, 1,
                                      torch.device("cpu"))  # fmt: skip
    assert counts == [{"loss": 3, "mlm": 6}, {"loss": 2, "mlm": 4}, {"loss": 0, "mlm": 0}]
    assert totals == {"loss": 5.0, "mlm": 10.0}


def test_each_micro_batch_weighs_its_share_of_the_steps_targets():
    one = torch.tensor(1.0)
    totals = {"mlm": 10.0, "sbo": 4.0, "loss": 5.0}
    out = {"loss": one * 7, "loss_terms": {"mlm": one, "sbo": one * 2}}
    # with counted targets each term weighs count / total (times the world size: DDP averages over ranks)
    counted = loop.weighted_loss(out, {"mlm": 6, "sbo": 1, "loss": 3}, totals, 1, lambda mb: {}, None)
    assert float(counted) == pytest.approx(6 / 10 + 2 * 1 / 4)
    assert float(loop.weighted_loss(out, {"mlm": 6, "sbo": 1, "loss": 3}, totals, 2, lambda mb: {}, None)) == \
        pytest.approx(2 * (6 / 10 + 2 * 1 / 4))
    # without, the whole loss by the micro-batch's share of the examples; a term with no target weighs nothing
    assert float(loop.weighted_loss(out, {"loss": 3}, totals, 1, None, None)) == pytest.approx(7 * 3 / 5)
    assert float(loop.weighted_loss(out, {"mlm": 0, "sbo": 0}, {"mlm": 0.0, "sbo": 0.0}, 1, lambda mb: {}, None)) == 0
    # a recipe's own weights replace the shares
    weights = lambda counts, totals, world: {"mlm": 0.5}  # noqa: E731
    assert float(loop.weighted_loss(out, {"mlm": 6}, totals, 1, lambda mb: {}, weights)) == pytest.approx(0.5)
    # a step's scale multiplies the terms it names, on top of either weighting
    scaled = loop.weighted_loss(out, {"mlm": 6, "sbo": 1, "loss": 3}, totals, 1, lambda mb: {}, None, {"sbo": 0.5})
    assert float(scaled) == pytest.approx(6 / 10 + 0.5 * 2 * 1 / 4)
    assert float(loop.weighted_loss(out, {"mlm": 6}, totals, 1, lambda mb: {}, weights, {"mlm": 0.5})) == pytest.approx(0.25)


# --- accumulation through `train`: a short last step weighs as one big batch ----------------------


class Small(torch.utils.data.Dataset):
    def __init__(self, n: int = 8):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return Regression()[i]


def test_partial_last_step_equals_one_big_batch(tmp_path):
    """8 examples, batch 3, accumulation 3: micro-batches of 3, 3, 2 weigh as one batch of 8."""
    big, acc = Net(dropout=0.0), Net(dropout=0.0)
    train(big, Small(8), args(tmp_path / "a", per_device_train_batch_size=8, max_steps=2, warmup_steps=0))
    train(acc, Small(8), args(tmp_path / "b", per_device_train_batch_size=3, gradient_accumulation_steps=3,
                              max_steps=2, warmup_steps=0))
    for (k, a), b in zip(params(big).items(), params(acc).values()):
        assert torch.allclose(a, b, atol=1e-6), k


# --- pre-training: MLM/SBO/NSP terms weighted by their own target counts -----------------------


class PretrainItems(torch.utils.data.Dataset):
    """Random pre-training items with very unequal numbers of MLM/SBO targets (some none)."""

    def __init__(self, n: int = 6, T: int = 12, V: int = 60):
        rng = np.random.default_rng(0)
        self.items = []
        for i in range(n):
            ids = rng.integers(5, V, size=T)
            k = [0, 1, 5, 2, 7, 3][i % 6]
            pos = np.sort(rng.choice(np.arange(2, T - 2), size=k, replace=False)) if k else np.zeros(0, np.int64)
            labels = np.full(T, -100)
            labels[pos] = ids[pos]
            self.items.append({
                "input_ids": ids, "token_type_ids": np.zeros(T, np.int64), "labels": labels,
                "sbo_positions": pos.astype(np.int64), "sbo_left": (pos - 1).astype(np.int64),
                "sbo_right": (pos + 1).astype(np.int64), "sbo_rel": np.zeros(k, np.int64),
                "next_sentence_label": i % 2,
            })

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def _tiny_pretraining_model():
    from spanbert.config import model_config
    from spanbert.model import SpanBertForPreTraining

    torch.manual_seed(0)
    cfg = model_config("tiny", vocab_size=60, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return SpanBertForPreTraining(cfg, sbo=True, nsp=True, sbo_position_dim=8)


def test_pretraining_accumulation_equals_the_big_batch(tmp_path, monkeypatch):
    """Gradients of each step (compared before AdamW, which turns rounding noise on near-zero
    gradients into visible parameter differences) equal those of the big batch."""
    from spanbert.collate import collate_pretrain, pretrain_target_counts

    ds = PretrainItems(6)
    counts = [pretrain_target_counts(collate_pretrain([ds[i], ds[i + 1]])) for i in (0, 2, 4)]
    assert len({c["mlm"] for c in counts}) > 1  # unequal MLM/SBO counts per micro-batch
    grads: dict[str, list[torch.Tensor]] = {}
    real_step = torch.optim.AdamW.step

    def spy(self, *a, **k):
        grads.setdefault(name, []).append(torch.cat([p.grad.flatten() for g in self.param_groups for p in g["params"]]))
        return real_step(self, *a, **k)

    monkeypatch.setattr(torch.optim.AdamW, "step", spy)
    for name, b, accum in (("big", 6, 1), ("acc", 2, 3)):
        train(_tiny_pretraining_model(), ds,
              args(tmp_path / name, per_device_train_batch_size=b, gradient_accumulation_steps=accum,
                   max_steps=2, warmup_steps=0, learning_rate=1e-3, seed=1, max_grad_norm=0.0),
              collate_fn=collate_pretrain, count_targets=pretrain_target_counts)
    for big, acc in zip(grads["big"], grads["acc"]):
        assert float((big - acc).norm() / big.norm()) < 1e-5


def test_a_term_schedule_follows_the_step_count_through_accumulation_and_resume(tmp_path, monkeypatch):
    """--sbo_warmup_steps 4 (`sbo_warmup`): every micro-batch of step s weighs the SBO term s/4 (then 1),
    whatever the accumulation, and a run stopped after step 2 and resumed goes on at 3/4."""
    from spanbert.collate import collate_pretrain, pretrain_target_counts
    from spanbert.pretrain import sbo_warmup

    assert sbo_warmup(0) is None
    assert [sbo_warmup(4)(s) for s in (1, 2, 4, 9)] == [{"sbo": 0.25}, {"sbo": 0.5}, {"sbo": 1.0}, {"sbo": 1.0}]
    seen: list[float] = []
    real = loop.weighted_loss

    def spy(*a, **k):
        scale = a[6] if len(a) > 6 else k.get("scale")
        seen.append(scale["sbo"])
        return real(*a, **k)

    monkeypatch.setattr(loop, "weighted_loss", spy)
    kw = dict(per_device_train_batch_size=2, gradient_accumulation_steps=3, max_steps=5, warmup_steps=0, seed=1)
    run = lambda out, **more: train(  # noqa: E731
        _tiny_pretraining_model(), PretrainItems(6), args(tmp_path / out, **kw, **more), collate_fn=collate_pretrain,
        count_targets=pretrain_target_counts, term_schedule=sbo_warmup(4),
    )
    run("straight")
    assert seen == [0.25] * 3 + [0.5] * 3 + [0.75] * 3 + [1.0] * 6
    seen.clear()
    run("resumed", stop_at_step=2, save_steps=2)
    run("resumed", resume=True)
    assert seen == [0.25] * 3 + [0.5] * 3 + [0.75] * 3 + [1.0] * 6


def test_a_scaled_sbo_term_is_the_same_gradient_as_that_sbo_weight(tmp_path, monkeypatch):
    """Step 1 of --sbo_warmup_steps 4 takes the gradient of --sbo_weight 0.25 (a power of two: exactly)."""
    from spanbert.collate import collate_pretrain, pretrain_target_counts
    from spanbert.pretrain import sbo_warmup

    grads: dict[str, torch.Tensor] = {}
    real_step = torch.optim.AdamW.step

    def spy(self, *a, **k):
        grads[name] = torch.cat([p.grad.flatten() for g in self.param_groups for p in g["params"]])
        return real_step(self, *a, **k)

    monkeypatch.setattr(torch.optim.AdamW, "step", spy)
    for name, weight, schedule in (("ramp", 1.0, sbo_warmup(4)), ("quarter", 0.25, None), ("full", 1.0, None)):
        model = _tiny_pretraining_model()
        model.sbo_weight = weight
        train(model, PretrainItems(6), args(tmp_path / name, per_device_train_batch_size=3, gradient_accumulation_steps=2,
                                            max_steps=1, warmup_steps=0, seed=1),
              collate_fn=collate_pretrain, count_targets=pretrain_target_counts, term_schedule=schedule)  # fmt: skip
    assert torch.equal(grads["ramp"], grads["quarter"])
    assert not torch.allclose(grads["ramp"], grads["full"])


def test_empty_sbo_batch_gives_every_parameter_a_zero_grad():
    from spanbert.collate import collate_pretrain, pretrain_target_counts

    model = _tiny_pretraining_model()
    batch = collate_pretrain([PretrainItems(1)[0]])  # no masked token: no MLM, no SBO target
    assert pretrain_target_counts(batch) == {"mlm": 0, "sbo": 0, "nsp": 1}
    out = model(**batch)
    assert set(out["loss_terms"]) == {"mlm", "sbo", "nsp"}
    assert float(out["loss_terms"]["sbo"].detach()) == 0.0 and torch.isfinite(out["loss"])
    out["loss"].backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, name
    assert all(float(p.grad.abs().sum()) == 0 for n, p in model.named_parameters() if n.startswith("cls.span_predictions"))


def test_released_normalisation_equals_the_fairseq_formula(tmp_path, adamw_grads):
    """--recipe released: the step's gradient is sum over micro-batches of
    (sum CE_mlm / n_i + sum CE_sbo / (p_i + 1) + sum CE_nsp / s_i) / (sum of n_i), computed by hand."""
    from spanbert.collate import collate_pretrain, pretrain_target_counts
    from spanbert.pretrain import released_term_weights

    ds = PretrainItems(6)
    grads = adamw_grads
    model = _tiny_pretraining_model()
    train(model, ds, args(tmp_path, per_device_train_batch_size=2, gradient_accumulation_steps=3, max_steps=1,
                          warmup_steps=0, max_grad_norm=0.0, learning_rate=1e-3, seed=1),
          collate_fn=collate_pretrain, count_targets=pretrain_target_counts, term_weights=released_term_weights)
    plan = trainer_mod.micro_batches(len(ds), 1, 0, 2, 3, 0, 1, 0)[0]
    ref = _tiny_pretraining_model()
    batches = [collate_pretrain([ds[i] for i in mb]) for mb in plan]
    counts = [pretrain_target_counts(b) for b in batches]
    assert len({c["sbo"] for c in counts}) > 1  # unequal SBO counts: the p / (p + 1) factor matters
    total_mlm = sum(c["mlm"] for c in counts)
    loss = 0.0
    for b, c in zip(batches, counts):
        out = ref(**b)  # each *_loss is a mean over that head's targets: sum / count
        loss = loss + out["mlm_loss"] + out["sbo_loss"] * c["sbo"] / (c["sbo"] + 1) + out["nsp_loss"]
    (loss / total_mlm).backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        if q.grad is not None:
            assert torch.allclose(grads[0][id(p)], q.grad, atol=1e-7, rtol=1e-4), name


# --- fp16 loss-scaler overflow -----------------------------------------------------------------


def test_scaler_overflow_steps_are_skipped_and_counted(tmp_path, monkeypatch):
    monkeypatch.setattr(trainer_mod, "make_grad_scaler", lambda dt, dev: torch.amp.GradScaler("cpu", init_scale=2.0**127))
    model = Net(dropout=0.0)
    model.scale = 1e3  # loss x 2^127 overflows float32: the first steps overflow until the scale falls
    result = train(model, Regression(), args(tmp_path, max_steps=12))  # nan_policy stop: overflows are expected
    assert result.global_step == 12 and 0 < result.skipped_steps < 12
    assert all(torch.isfinite(v).all() for v in model.state_dict().values())


def test_many_scaler_overflows_in_a_row_stop(tmp_path, monkeypatch):
    monkeypatch.setattr(trainer_mod, "make_grad_scaler", lambda dt, dev: torch.amp.GradScaler("cpu", init_scale=2.0**127))
    monkeypatch.setattr(trainer_mod, "MAX_CONSECUTIVE_SCALER_SKIPS", 3)
    with pytest.raises(SpanBertError, match="overflow steps in a row"):
        model = Net(dropout=0.0)
        model.scale = 1e3
        train(model, Regression(), args(tmp_path, max_steps=12))


# --- logging -----------------------------------------------------------------------------------


def test_logged_learning_rate_is_the_one_the_step_used(tmp_path):
    train(Net(), Regression(), args(tmp_path, max_steps=4, warmup_steps=2, logging_steps=1, learning_rate=1e-2,
                                    lr_scheduler_type="constant"))
    lrs = [json.loads(line)["train/lr"] for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert lrs == pytest.approx([5e-3, 1e-2, 1e-2, 1e-2])
