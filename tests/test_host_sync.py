"""No host synchronisation inside a training step that does not log (issue 24, docs/gpu.md).

On a GPU the host queues kernels ahead of the device; anything that needs a value on the host
(`.item()`, `float(t)`, `bool(t)`, `if t > 0:`, `.tolist()`, `.cpu()`, `nonzero`, a boolean-mask
selection, `unique`) waits for the queue to drain and leaves the GPU idle while Python catches up.
`SyncCounter` records each such call during whole trainer steps (`spanbert.trainer.train`), on the
CPU: at the ATen level (`_local_scalar_dense` is what `.item()`, `float()`, `int()` and `bool()` of a
tensor call; the ops whose output size is a value) and the Python methods that read a tensor without
an ATen op (`tolist`, `cpu`). The collator and `count_targets` are host code by contract (they build
and read the CPU batch before it is copied to the device) and are not counted; the token count reads
the host batch through numpy (`.numpy()` refuses a CUDA tensor, so it can never hide a sync).
"""

from __future__ import annotations

import traceback
from typing import Any

import numpy as np
import pytest
import torch
from test_device import V, bert, pretrain_items, qa_batch, qa_model, two_tower
from torch.utils._python_dispatch import TorchDispatchMode

from spanbert.model import SpanBertForPreTraining
from spanbert.trainer import train
from spanbert.training_args import TrainingArguments

aten = torch.ops.aten
SYNC_OPS = {
    aten._local_scalar_dense,  # .item(), float(t), int(t), bool(t), `if t:`
    aten.is_nonzero,
    aten.equal,
    aten.nonzero,
    aten.masked_select,
    aten._unique,
    aten._unique2,
    aten.unique_dim,
    aten.unique_consecutive,
    aten.bincount,
}


def _is_sync(func: Any, args: tuple) -> bool:
    packet = func._overloadpacket
    if packet in SYNC_OPS:
        return True
    if packet in (aten.index, aten.index_put, aten.index_put_, aten._index_put_impl_):
        # a boolean mask as an index: its number of True elements is the output's size
        indices = args[1] if len(args) > 1 else ()
        return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices or ())
    if packet is aten.repeat_interleave:
        return func is aten.repeat_interleave.Tensor or func is aten.repeat_interleave.self_Tensor
    return False


def _where() -> str:
    frames = [f for f in traceback.extract_stack() if "/spanbert/" in f.filename and "/tests/" not in f.filename]
    f = frames[-1] if frames else traceback.extract_stack()[-4]
    return f"{f.filename.split('/src/')[-1]}:{f.lineno} {f.line}"


class SyncCounter(TorchDispatchMode):
    """Records every host sync while `active` and not inside host code (`host` > 0)."""

    def __init__(self) -> None:
        super().__init__()
        self.active = False
        self.host = 0
        self.calls: list[str] = []

    def record(self, what: str) -> None:
        if self.active and not self.host:
            self.calls.append(f"{what} at {_where()}")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.active and not self.host and _is_sync(func, args):
            self.record(str(func))
        return func(*args, **(kwargs or {}))


class CompiledSyncCounter(SyncCounter):
    """A SyncCounter through which `--compile`'s graphs still compile and run: dynamo runs a frame eagerly
    under an ordinary dispatch mode, not under one that ignores compile internals (tracing is not
    counted); the compiled graphs' operations reach the counter when they run (``aot_eager``: aten ops)."""

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True


def _spy_host_reads(counter: SyncCounter, monkeypatch) -> SyncCounter:
    for name in ("tolist", "cpu"):
        real = getattr(torch.Tensor, name)

        def spy(self, *a, _real=real, _name=name, **k):
            counter.record(f"Tensor.{_name}")
            return _real(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, spy)
    return counter


@pytest.fixture
def syncs(monkeypatch):
    """A SyncCounter covering the trainer steps before the last one (the last step logs)."""
    return _spy_host_reads(SyncCounter(), monkeypatch)


@pytest.fixture
def compiled_syncs(monkeypatch):
    """`syncs` for runs with --compile true, compiled by ``aot_eager`` (seconds on the CPU), from nothing."""
    import spanbert.compile

    monkeypatch.setattr(spanbert.compile, "BACKEND", "aot_eager")
    torch._dynamo.reset()
    yield _spy_host_reads(CompiledSyncCounter(), monkeypatch)
    torch._dynamo.reset()


def host(counter: SyncCounter, fn):
    """`fn` as host code: what it does to the CPU batch is not counted."""

    def wrapped(*a, **k):
        counter.host += 1
        try:
            return fn(*a, **k)
        finally:
            counter.host -= 1

    return wrapped


def run_quiet_steps(counter: SyncCounter, model, dataset, collate, count_targets=None, quiet: int = 3, **kw):
    """`quiet` trainer steps that neither log, evaluate nor save, then a last step that logs; counts
    the syncs of the quiet ones (from the first forward on: step 1's loading is before it)."""
    done = {"steps": 0}
    real_step = torch.optim.lr_scheduler.LambdaLR.step

    def step_spy(self, *a, **k):  # the last call of a trainer step
        out = real_step(self, *a, **k)
        if counter.active:
            done["steps"] += 1
            counter.active = done["steps"] < quiet
        return out

    def first_forward(module, inputs):
        if done["steps"] == 0 and not counter.calls:
            counter.active = True

    handle = model.register_forward_pre_hook(first_forward)
    torch.optim.lr_scheduler.LambdaLR.step = step_spy
    args = TrainingArguments(
        output_dir=str(kw.pop("output_dir")), max_steps=quiet + 1, logging_steps=quiet + 1, save_steps=0,
        per_device_train_batch_size=2, learning_rate=1e-3, warmup_steps=1, disable_tqdm=True, report_to="none",
        **kw,
    )  # fmt: skip
    try:
        with counter:
            result = train(model, dataset, args, collate_fn=host(counter, collate),
                           count_targets=host(counter, count_targets) if count_targets else None)  # fmt: skip
    finally:
        torch.optim.lr_scheduler.LambdaLR.step = real_step
        handle.remove()
    assert done["steps"] == quiet and result.global_step == quiet + 1
    return counter.calls


class Items(torch.utils.data.Dataset):
    def __init__(self, items: list[Any]):
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> Any:
        return self.items[i]


def pretraining_case(system: str, dropout: float = 0.1):
    from spanbert.collate import collate_pretrain, pretrain_target_counts

    torch.manual_seed(0)
    cfg = bert(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout, is_decoder=system == "ltr")
    if system == "spanbert":
        model = SpanBertForPreTraining(cfg, sbo=True, sbo_position_dim=8)
    elif system == "bert-nsp":
        model = SpanBertForPreTraining(cfg, sbo=False, nsp=True)
    else:  # ltr: a causal encoder, the MLM head as a next-token head
        model = SpanBertForPreTraining(cfg, sbo=False)
    items = pretrain_items([16] * 16, nsp=system == "bert-nsp")
    return model, Items(items), collate_pretrain, pretrain_target_counts


@pytest.mark.parametrize("system", ["spanbert", "bert-nsp", "ltr"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_pretraining_steps_never_wait_for_the_device(system, precision, syncs, tmp_path):
    model, ds, collate, count = pretraining_case(system)
    calls = run_quiet_steps(syncs, model, ds, collate, count, output_dir=tmp_path, precision=precision,
                            gradient_accumulation_steps=2, max_grad_norm=1.0)  # fmt: skip
    assert calls == []


def test_compiled_pretraining_steps_never_wait_for_the_device(compiled_syncs, tmp_path):
    """--compile true: the compiled regions and the eager glue between them read nothing back either."""
    from spanbert.compile import graphs_compiled, is_compiled, regions

    model, ds, collate, count = pretraining_case("spanbert")
    before = graphs_compiled()
    calls = run_quiet_steps(compiled_syncs, model, ds, collate, count, output_dir=tmp_path, precision="fp32",
                            gradient_accumulation_steps=2, max_grad_norm=1.0, compile=True)  # fmt: skip
    assert calls == []
    assert all(is_compiled(m) for _, m in regions(model)) and graphs_compiled() > before  # compiled, not eager


@pytest.mark.parametrize("objective", ["cloze", "bilm", "cloze-bilm"])
def test_two_tower_steps_never_wait_for_the_device(objective, syncs, tmp_path):
    from spanbert import cloze
    from spanbert.cloze import cloze_collate

    model = two_tower(objective)
    cfg = model.config
    rng = np.random.default_rng(0)
    items = [{"input_ids": np.concatenate([[cfg.bos_id], rng.integers(5, V, n), [cfg.eos_id]])}
             for n in [10, 8, 12, 9] * 4]  # fmt: skip
    calls = run_quiet_steps(syncs, model, Items(items), lambda b: cloze_collate(b, cfg.pad_id),
                            lambda b: cloze.count_targets(b, objective), output_dir=tmp_path)  # fmt: skip
    assert calls == []


def _qa_items(lengths: list[int]) -> list[dict[str, Any]]:
    batch = qa_batch(lengths)
    return [{"input_ids": batch["input_ids"][i, :n].tolist(), "query_len": 3,
             "start_positions": int(batch["start_positions"][i]), "end_positions": int(batch["end_positions"][i])}
            for i, n in enumerate(lengths)]  # fmt: skip


def test_fine_tuning_steps_on_unpadded_batches_never_wait(syncs, tmp_path):
    """Windows of one length (the QA collator then gives no attention_mask): no sync at all."""
    from spanbert.tasks.qa import collate_qa

    calls = run_quiet_steps(syncs, qa_model(), Items(_qa_items([14] * 8)), collate_qa, output_dir=tmp_path)
    assert calls == []


def test_a_padded_batch_costs_exactly_the_unpadding_sync(syncs, tmp_path, monkeypatch):
    """With padding, the one sync of a micro-batch is the encoder's `nonzero` (the number of real
    tokens is the shape of the unpadded activations), once per forward. On CPU the ragged attention
    also reads the sequence lengths, host memory there; on other devices it is off (the grid)."""
    import spanbert.model
    from spanbert.tasks.qa import collate_qa

    monkeypatch.setattr(spanbert.model, "RAGGED_DEVICES", ())  # the path a GPU batch takes
    calls = run_quiet_steps(syncs, qa_model(), Items(_qa_items([14, 9] * 4)), collate_qa, output_dir=tmp_path)
    assert len(calls) == 3 and all("aten.nonzero" in c and "spanbert/model.py" in c for c in calls), calls
    monkeypatch.setattr(spanbert.model, "RAGGED_DEVICES", ("cpu",))
    syncs.calls.clear()
    calls = run_quiet_steps(syncs, qa_model(), Items(_qa_items([14, 5] * 4)), collate_qa, output_dir=tmp_path / "cpu")
    assert sum("aten.nonzero" in c for c in calls) == 3 and sum("self.lengths" in c for c in calls) == 3, calls


def test_a_compiled_padded_batch_costs_the_same_one_sync(compiled_syncs, tmp_path, monkeypatch):
    """Compiled, a padded batch still costs the unpadding's `nonzero` once a forward (eager glue), and
    nothing inside the compiled layers."""
    import spanbert.model
    from spanbert.tasks.qa import collate_qa

    monkeypatch.setattr(spanbert.model, "RAGGED_DEVICES", ())  # the path a GPU batch takes
    calls = run_quiet_steps(compiled_syncs, qa_model(), Items(_qa_items([14, 9] * 4)), collate_qa, output_dir=tmp_path,
                            compile=True)  # fmt: skip
    assert len(calls) == 3 and all("aten.nonzero" in c and "spanbert/model.py" in c for c in calls), calls


def test_the_counter_sees_each_kind_of_sync():
    """The counter is not blind: each way of reading a value from a tensor is recorded."""
    counter = SyncCounter()
    x = torch.arange(6.0)
    with counter:
        counter.active = True
        float(x.sum())
        bool((x > 2).any())
        x[x > 2]
        x.nonzero()
        torch.unique(x)
        counter.active = False
    assert len(counter.calls) == 5, counter.calls


def test_the_counter_sees_a_sync_inside_a_compiled_region(monkeypatch):
    """Not blind to compiled code either: an `.item()` inside a compiled region (captured into the graph
    by torch 2.13, so no graph break announces it) is counted when the graph runs."""
    import spanbert.compile

    class Reads(torch.nn.Module):
        compile_region = True

        def forward(self, x):
            return x * x.sum().item()

    torch._dynamo.reset()
    model = torch.nn.Sequential(Reads())
    spanbert.compile.compile_regions(model, backend="aot_eager")
    counter = CompiledSyncCounter()
    with counter:
        counter.active = True
        model(torch.ones(3))
        counter.active = False
    torch._dynamo.reset()
    assert counter.calls and all("_local_scalar_dense" in c for c in counter.calls), counter.calls
