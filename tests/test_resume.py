"""Trust at scale: loss weighting by targets, crash-safe checkpoints, exact resume rules, fp16 skips."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from test_trainer import Net, Regression, args, params

import spanbert.trainer as trainer_mod
from spanbert.errors import SpanBertError
from spanbert.folders import MANIFEST, record
from spanbert.runs import check_output_dir, find_resume_checkpoint, latest_checkpoint
from spanbert.trainer import train
from spanbert.training_args import TrainingArguments


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


# --- checkpoints after a kill ------------------------------------------------------------------


def test_resave_keeps_latest_complete_at_every_instant(tmp_path, monkeypatch):
    """Re-save checkpoint-12 (resume at the last step) and 'kill' it at each rename in turn."""
    train(Net(), Regression(), args(tmp_path / "ref"))
    expected = params_of_checkpoint(tmp_path / "ref" / "checkpoint-12")
    real_replace = os.replace
    k = 0
    while True:
        out = tmp_path / f"run{k}"
        train(Net(), Regression(), args(out))
        calls = {"n": 0}

        def flaky(a, b, _k=k):
            calls["n"] += 1  # noqa: B023
            if calls["n"] == _k + 1:  # noqa: B023
                raise KeyboardInterrupt("killed")
            return real_replace(a, b)

        monkeypatch.setattr(os, "replace", flaky)
        try:
            train(Net(), Regression(), args(out, resume=True))
            finished = True
        except KeyboardInterrupt:
            finished = False
        monkeypatch.setattr(os, "replace", real_replace)
        ckpt = latest_checkpoint(out)
        assert ckpt is not None, f"latest broken after a kill at rename {k}"
        assert params_of_checkpoint(ckpt) == expected
        assert train(Net(), Regression(), args(out, resume=True)).global_step == 12
        assert [p.name for p in out.iterdir() if p.name.startswith(".")] == [MANIFEST]  # debris removed
        if finished:
            break
        k += 1
    assert k >= 3  # the re-save path has several renames


def params_of_checkpoint(path: Path) -> dict:
    state = torch.load(path / "state.pt", weights_only=True)
    return {k: v.tolist() for k, v in state["model"].items()}


def test_debris_of_a_killed_run_is_removed(tmp_path):
    train(Net(), Regression(), args(tmp_path, stop_at_step=6))
    (tmp_path / ".checkpoint-9.tmp-123").mkdir()
    (tmp_path / ".checkpoint-9.tmp-123" / "state.pt").write_bytes(b"half")
    (tmp_path / ".latest.abc.tmp").write_text("checkpoint-9")
    (tmp_path / ".checkpoint-3.old-77").mkdir()
    record(tmp_path / "final")  # as the export does (listed in the run's manifest before it is made)
    (tmp_path / "final").mkdir()
    (tmp_path / "final" / ".config.json.x1.tmp").write_text("{")
    (tmp_path / ".final.tmp-zz").mkdir()
    train(Net(), Regression(), args(tmp_path, resume=True))
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [MANIFEST]
    assert not list((tmp_path / "final").iterdir())


def test_interrupted_final_export_is_put_back(tmp_path):
    """atomic_dir without an atomic swap: a kill between its renames leaves `.final.old-PID`."""
    from spanbert.utils import remove_debris

    (tmp_path / ".final.old-5").mkdir()
    (tmp_path / ".final.old-5" / "config.json").write_text("{}")
    (tmp_path / ".final.tmp-abc").mkdir()
    remove_debris(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final"]
    assert (tmp_path / "final" / "config.json").exists()


def test_missing_or_broken_latest_falls_back_to_the_newest_complete(tmp_path, capsys):
    train(Net(), Regression(), args(tmp_path, stop_at_step=9))
    (tmp_path / "latest").unlink()
    capsys.readouterr()
    assert train(Net(), Regression(), args(tmp_path, resume=True, stop_at_step=10)).global_step == 10
    out = capsys.readouterr().out
    assert "latest is missing" in out and "checkpoint-9" in out
    (tmp_path / "latest").write_text("checkpoint-77\n")
    path, note = find_resume_checkpoint(tmp_path)
    assert path.name == "checkpoint-10" and "checkpoint-77" in note
    for p in tmp_path.glob("checkpoint-*"):
        (p / "state.pt").unlink()
    with pytest.raises(SpanBertError, match="no usable checkpoint.*has no state.pt"):
        train(Net(), Regression(), args(tmp_path, resume=True))


def test_checkpoint_missing_a_key_or_of_another_size_is_a_clear_error(tmp_path):
    train(Net(), Regression(), args(tmp_path, stop_at_step=3))
    state_file = tmp_path / "checkpoint-3" / "state.pt"
    state = torch.load(state_file, weights_only=True)
    torch.save({k: v for k, v in state.items() if k != "optimizer"}, state_file)
    with pytest.raises(SpanBertError, match="found no optimizer"):
        train(Net(), Regression(), args(tmp_path, resume=True))
    torch.save(state, state_file)

    class Wider(Net):
        def __init__(self):
            super().__init__()
            self.l1, self.norm, self.l2 = torch.nn.Linear(4, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 1)

    with pytest.raises(SpanBertError, match="do not fit this model"):
        train(Wider(), Regression(), args(tmp_path, resume=True))


def test_resume_with_changed_settings(tmp_path, capsys):
    train(Net(), Regression(), args(tmp_path, stop_at_step=3), run_config={"mask_ratio": 0.15})
    with pytest.raises(SpanBertError, match=r"learning_rate: 0.01 -> 0.02; .*mask_ratio: 0.15 -> 0.2"):
        train(Net(), Regression(), args(tmp_path, resume=True, learning_rate=2e-2), run_config={"mask_ratio": 0.2})
    with pytest.raises(SpanBertError, match=r"per_device_train_batch_size: 4 -> 2 \(global batch 4 -> 2\)"):
        train(Net(), Regression(), args(tmp_path, resume=True, per_device_train_batch_size=2), run_config={"mask_ratio": 0.15})
    capsys.readouterr()
    # the same global batch split otherwise, and a new logging interval, are accepted with a note
    result = train(Net(), Regression(), args(tmp_path, resume=True, per_device_train_batch_size=2,
                                             gradient_accumulation_steps=2, logging_steps=1, stop_at_step=6),
                   run_config={"mask_ratio": 0.15})
    assert result.global_step == 6
    out = capsys.readouterr().out
    assert "gradient_accumulation_steps: 1 -> 2" in out and "logging_steps: 3 -> 1" in out
    state = json.loads((tmp_path / "checkpoint-6" / "trainer_state.json").read_text())
    assert state["world_size"] == 1 and state["run_config"] == {"mask_ratio": 0.15}


def test_logged_learning_rate_is_the_one_the_step_used(tmp_path):
    train(Net(), Regression(), args(tmp_path, max_steps=4, warmup_steps=2, logging_steps=1, learning_rate=1e-2,
                                    lr_scheduler_type="constant"))
    lrs = [json.loads(line)["train/lr"] for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert lrs == pytest.approx([5e-3, 1e-2, 1e-2, 1e-2])


def test_output_dir_with_a_run_is_refused(tmp_path):
    train(Net(), Regression(), args(tmp_path, max_steps=3))
    with pytest.raises(SpanBertError, match="--resume.*--overwrite_output_dir"):
        check_output_dir(args(tmp_path))
    with pytest.raises(SpanBertError, match="--overwrite_output_dir"):
        train(Net(), Regression(), args(tmp_path, max_steps=3))
    train(Net(), Regression(), args(tmp_path, max_steps=2, save_steps=1, overwrite_output_dir=True))
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]


@pytest.mark.parametrize(
    "kw, text",
    [
        ({"learning_rate": -1.0}, "--learning_rate"),
        ({"learning_rate": float("nan")}, "finite"),
        ({"adam_beta1": 1.0}, "--adam_beta1"),
        ({"adam_epsilon": 0.0}, "--adam_epsilon"),
        ({"seed": -1}, "--seed"),
        ({"warmup_ratio": 1.5}, "--warmup_ratio"),
        ({"device": "cpux"}, "cpux"),
        ({"device": "cuda:x"}, "cuda:x"),
        ({"device": "gpu"}, "gpu"),
        ({"resume": True, "overwrite_output_dir": True}, "at most one"),
    ],
)
def test_training_arguments_are_validated(kw, text):
    with pytest.raises(SpanBertError, match=text):
        TrainingArguments(**kw)


# --- two processes -------------------------------------------------------------------------------

RESUME_SCRIPT = """
import os, sys, torch
sys.path.insert(0, {tests!r})
from test_trainer import Net, Regression, args
from spanbert.trainer import train
model = Net(dropout=0.3)
torch.manual_seed(1000 + int(os.environ.get("RANK", 0)))  # each rank its own dropout stream
train(model, Regression(), args({out!r}, max_steps=8, save_steps=2, stop_at_step={stop}, resume={resume}))
if int(os.environ.get("RANK", 0)) == 0:
    torch.save(model.state_dict(), {out!r} + "/params-{tag}.pt")
"""


@pytest.mark.slow
def test_two_process_resume_with_dropout_is_exact(tmp_path):
    """torchrun 2 x gloo, dropout on: 4 steps + --resume + 4 steps == 8 straight steps, bit for bit
    (each rank restores its own RNG stream)."""
    tests = str(Path(__file__).parent)
    path = os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")]))  # the caller's spanbert first
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    runs = [("straight", "a", -1, False), ("first", "b", 4, False), ("second", "b", -1, True)]
    for tag, folder, stop, resume in runs:
        script = tmp_path / f"{tag}.py"
        script.write_text(RESUME_SCRIPT.format(tests=tests, out=str(tmp_path / folder), stop=stop, resume=resume, tag=tag))
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, proc.stderr[-3000:]
    state = torch.load(latest_checkpoint(tmp_path / "b") / "state.pt", weights_only=True)
    assert len(state["rng"]) == 2 and not torch.equal(state["rng"][0]["torch"], state["rng"][1]["torch"])
    a = torch.load(tmp_path / "a" / "params-straight.pt", weights_only=True)
    b = torch.load(tmp_path / "b" / "params-second.pt", weights_only=True)
    for k in a:
        assert torch.equal(a[k], b[k]), k


def _logged_steps(path: Path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def test_a_run_started_again_into_the_same_folder_logs_afresh(tmp_path, capsys):
    """A run killed before its first checkpoint leaves only log.jsonl, which `check_output_dir` accepts:
    the next run moves that log aside (never lost) and writes one run's rows."""
    train(Net(), Regression(), args(tmp_path, max_steps=6, save_steps=100, logging_steps=2, stop_at_step=4))
    for p in tmp_path.glob("checkpoint-*"):  # as if killed before the first checkpoint
        import shutil

        shutil.rmtree(p)
    (tmp_path / "latest").unlink(missing_ok=True)
    old = (tmp_path / "log.jsonl").read_text()
    check_output_dir(args(tmp_path))  # only a log: accepted
    capsys.readouterr()
    train(Net(), Regression(), args(tmp_path, max_steps=6, logging_steps=2))
    out = capsys.readouterr().out
    assert f"note: {tmp_path / 'log.jsonl'} is an earlier run's log; moved it to log.jsonl.1" in out
    assert _logged_steps(tmp_path / "log.jsonl") == [2, 4, 6]
    assert (tmp_path / "log.jsonl.1").read_text() == old


def test_resume_drops_the_rows_logged_after_the_checkpoint(tmp_path, capsys):
    train(Net(), Regression(), args(tmp_path, max_steps=12, save_steps=4, logging_steps=1, stop_at_step=4))
    # the killed run logged steps 5 and 6 past checkpoint-4, the last line cut short
    with open(tmp_path / "log.jsonl", "a") as f:
        f.write('{"step": 5, "train/loss": 1.0}\n{"step": 6, "train/loss": 1.0}\n{"step": 7, "tra')
    capsys.readouterr()
    train(Net(), Regression(), args(tmp_path, max_steps=12, save_steps=4, logging_steps=1, resume=True))
    out = capsys.readouterr().out
    assert "dropped 3 row(s) after step 4" in out
    assert _logged_steps(tmp_path / "log.jsonl") == list(range(1, 13))
    assert not list(tmp_path.glob("log.jsonl.*"))  # a resume continues the log, nothing moved aside
