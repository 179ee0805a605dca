"""`--compile`: the regions of each family compile without a graph break, a bounded number of graphs
serves batches of any shape, the compiled step computes the eager step's loss and gradients, and a
compiled run resumes exactly (docs/gpu.md, "The compiled step").

Proven on the CPU. Most tests compile with ``aot_eager`` (dynamo's graphs and AOT autograd's joint
forward and backward, run by eager kernels: seconds); the ``slow`` ones with inductor, the backend a
GPU run uses (its CPU code here), a minute or two each.
"""

from __future__ import annotations

import copy
import re

import pytest
import torch
from test_device import bert, modern, pretrain_batch
from test_host_sync import pretraining_case
from torch import nn
from torch._dynamo.testing import CompileCounter

import spanbert.compile as compile_mod
from spanbert import modernbert
from spanbert.compile import compile_regions, is_compiled, regions, wants_compile
from spanbert.errors import SpanBertError
from spanbert.model import SpanBertForPreTraining
from spanbert.trainer import train
from spanbert.training_args import TrainingArguments, compile_setting


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles from nothing: graphs cached by an earlier test would hide this one's."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def bert_pretraining(dropout: float = 0.0) -> SpanBertForPreTraining:
    torch.manual_seed(0)
    cfg = bert(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    return SpanBertForPreTraining(cfg, sbo=True, sbo_position_dim=8).train()


def modern_pretraining(dropout: float = 0.0) -> modernbert.ModernBertForPreTraining:
    # window 4: sequences over 16 tokens take the chunked local attention, shorter ones the band mask
    cfg = modern(local_attention=4, attention_dropout=dropout, embedding_dropout=dropout, mlp_dropout=dropout)
    return modernbert.ModernBertForPreTraining(cfg, sbo_position_dim=8).train()


FAMILIES = {"bert": bert_pretraining, "modernbert": modern_pretraining}
UNPADDED, PADDED = [16, 16, 16, 16], [16, 12, 9, 16]


def batch_for(family: str, lengths: list[int]) -> dict[str, torch.Tensor]:
    b = pretrain_batch(lengths)
    if family == "modernbert":
        b.pop("token_type_ids")  # no segment embeddings
    return b


def step(model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[float, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    loss = model(**batch)["loss"]
    loss.backward()
    return float(loss.detach()), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_the_regions_of_each_family():
    """The embeddings, every encoder layer and the pre-training heads; compiling them in place keeps
    the state_dict's names (checkpoints and exports do not change)."""
    names = [n for n, _ in regions(bert_pretraining())]
    assert names == ["bert.embeddings", "bert.encoder.layer.0", "bert.encoder.layer.1", "cls.predictions",
                     "cls.span_predictions"]  # fmt: skip
    names = [n for n, _ in regions(modern_pretraining())]
    assert names == ["model.embeddings", "model.layers.0", "model.layers.1", "model.layers.2", "head",
                     "span_predictions"]  # fmt: skip
    model = bert_pretraining()
    keys = list(model.state_dict())
    assert compile_regions(model, backend="eager") == 5
    assert list(model.state_dict()) == keys and all(is_compiled(m) for _, m in regions(model))
    assert not is_compiled(model) and not is_compiled(model.bert.encoder)


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("lengths", [UNPADDED, PADDED], ids=["unpadded", "padded"])
def test_no_region_breaks_its_graph(family, lengths):
    """fullgraph=True makes any graph break inside a region an error; forward and backward run."""
    model = FAMILIES[family]()
    counter = CompileCounter()
    compile_regions(model, backend=counter, fullgraph=True)
    loss, grads = step(model, batch_for(family, lengths))
    assert counter.frame_count >= 4 and torch.isfinite(torch.tensor(loss))
    assert all(torch.isfinite(g).all() for g in grads.values())


def test_a_graph_break_in_a_region_is_seen():
    """The check above is not blind: a branch on a tensor's value inside a region fails under
    fullgraph=True. (A bare `.item()` or `nonzero` no longer breaks a full graph in torch 2.13: it is
    captured, and still waits for the device at run time; tests/test_host_sync.py counts those.)"""

    class Reads(nn.Module):
        compile_region = True

        def forward(self, x):
            return x if x.sum() > 0 else -x  # the host decides: a graph break (and on a GPU a sync)

    model = nn.Sequential(Reads())
    compile_regions(model, backend="eager", fullgraph=True)
    with pytest.raises(torch._dynamo.exc.Unsupported):
        model(torch.ones(3))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_unpadded_pretraining_forward_has_no_graph_break_at_all(family):
    """The whole pre-training forward (heads and losses too) of an unpadded batch is one graph; a padded
    batch breaks only at the unpadding's `nonzero` (eager glue between the regions, by design)."""
    model = FAMILIES[family]()
    explained = torch._dynamo.explain(model)(**batch_for(family, UNPADDED))
    assert explained.graph_break_count == 0, [str(r.reason)[:200] for r in explained.break_reasons]
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(**batch_for(family, PADDED))
    reasons = [str(r.reason) for r in explained.break_reasons]
    assert reasons and all("nonzero" in r for r in reasons), reasons


# batch sizes, lengths, padding and target counts all change from batch to batch
VARYING = [[16] * 4, [16] * 4, [16, 12, 9, 16], [20] * 4, [20, 8, 20, 10], [24] * 3, [30, 12], [9] * 5,
           [41, 30, 29, 28], [33] * 2, [18, 17], [12] * 6]  # fmt: skip
GRAPH_BOUND = {"bert": 5, "modernbert": 10}
"""BERT: embeddings, the layer padded and unpadded, the two heads. ModernBERT: embeddings, the first
(global) and the local layers each padded and unpadded, the local layers also in chunks (sequences
over 8 half-windows), the two heads; a new batch shape is never a new graph."""


@pytest.mark.parametrize("family", list(FAMILIES))
def test_varying_lengths_compile_a_bounded_number_of_graphs(family):
    model = FAMILIES[family]()
    counter = CompileCounter()
    compile_regions(model, backend=counter, fullgraph=True)
    counts = []
    for lengths in VARYING:
        step(model, batch_for(family, lengths))
        counts.append(counter.frame_count)
    assert counts[-1] <= GRAPH_BOUND[family], counts
    assert counts[-1] == counts[len(counts) // 2], f"graphs still made late in the run: {counts}"


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("lengths", [UNPADDED, PADDED], ids=["unpadded", "padded"])
def test_the_compiled_step_equals_the_eager_step(family, lengths):
    """Same weights, same batch, dropout 0: dynamo's graphs through AOT autograd give the eager loss
    and gradients (the same kernels run, so equal to rounding)."""
    eager = FAMILIES[family]()
    compiled = copy.deepcopy(eager)
    compile_regions(compiled, backend="aot_eager", fullgraph=True)
    batch = batch_for(family, lengths)
    loss_e, grads_e = step(eager, batch)
    loss_c, grads_c = step(compiled, batch)
    assert loss_c == pytest.approx(loss_e, rel=1e-6)
    assert grads_c.keys() == grads_e.keys()
    for name, g in grads_e.items():
        torch.testing.assert_close(grads_c[name], g, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.slow
# BERT only on the CPU (each family's inductor compile is a minute of CI's 25): ModernBERT's regions are held
# to the eager step by test_the_compiled_step_equals_the_eager_step (aot_eager) here, and by inductor on a GPU
# (tests/test_cuda.py, bench/gpu.sh)
@pytest.mark.parametrize("family", ["bert"])
def test_inductor_code_computes_the_eager_step(family):
    """Inductor's generated code (C++ on the CPU, Triton on a GPU: the fused LayerNorm, GELU and
    residual kernels) within fp32 rounding of eager, padded batch then unpadded (the graphs are reused)."""
    eager = FAMILIES[family]()
    compiled = copy.deepcopy(eager)
    compile_regions(compiled, backend="inductor", fullgraph=True)
    for lengths in (PADDED, UNPADDED):
        batch = batch_for(family, lengths)
        loss_e, grads_e = step(eager, batch)
        loss_c, grads_c = step(compiled, batch)
        assert loss_c == pytest.approx(loss_e, rel=1e-5)
        for name, g in grads_e.items():
            torch.testing.assert_close(grads_c[name], g, rtol=1e-3, atol=1e-5, msg=name)


def test_compile_setting_and_auto():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert wants_compile("auto", cuda) and not wants_compile("auto", cpu)
    assert wants_compile(True, cpu) and not wants_compile(False, cuda)
    assert compile_setting("true") is True and compile_setting("FALSE") is False and compile_setting("auto") == "auto"
    assert TrainingArguments(compile="true").compile is True
    with pytest.raises(SpanBertError, match="--compile: found 'sometimes'"):
        TrainingArguments(compile="sometimes")


def _run(tmp, model, *, compile, dropout=0.1, **kw):
    _, ds, collate, count = pretraining_case("spanbert", dropout=dropout)
    args = TrainingArguments(output_dir=str(tmp), max_steps=4, logging_steps=2, save_steps=2, per_device_train_batch_size=4,
                             learning_rate=1e-3, warmup_steps=1, disable_tqdm=True, report_to="none", device="cpu",
                             precision="fp32", compile=compile, **kw)  # fmt: skip
    return train(model, ds, args, collate_fn=collate, count_targets=count)


def test_the_trainer_compiles_on_request_and_trains_as_eager(tmp_path, monkeypatch, capsys):
    """--compile true on the CPU: the regions are compiled, the log says what it cost, and with dropout
    off the run ends where the eager run ends."""
    monkeypatch.setattr(compile_mod, "BACKEND", "aot_eager")
    eager, _, _, _ = pretraining_case("spanbert", dropout=0.0)
    compiled = copy.deepcopy(eager)
    ref = _run(tmp_path / "eager", eager, compile=False, dropout=0.0)
    capsys.readouterr()
    got = _run(tmp_path / "compiled", compiled, compile=True, dropout=0.0)
    out = capsys.readouterr().out
    assert all(is_compiled(m) for _, m in regions(compiled)) and not any(is_compiled(m) for _, m in regions(eager))
    assert re.search(r"torch.compile: 5 region\(s\), [1-9]\d* graph\(s\) compiled by step 1", out), out
    assert "s of compilation" in out
    assert got.metrics["loss"] == pytest.approx(ref.metrics["loss"], rel=1e-5)
    for (k, a), b in zip(compiled.state_dict().items(), eager.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=k)


@pytest.mark.slow
def test_a_compiled_run_resumes_exactly(tmp_path):
    """Inductor, dropout on: 2 steps, a checkpoint, 2 more in a resumed run equal 4 steps straight, bit
    for bit (the compiled dropout draws its seeds from torch's generator, which the checkpoint keeps).
    A resumed run may compile again or not: the numbers do not depend on it."""
    straight, _, _, _ = pretraining_case("spanbert", dropout=0.1)
    split = copy.deepcopy(straight)
    torch.manual_seed(1)  # the dropout streams of both runs start alike
    _run(tmp_path / "split", split, compile=True, stop_at_step=2)
    torch._dynamo.reset()  # as a new process: nothing compiled
    resumed, _, _, _ = pretraining_case("spanbert", dropout=0.1)
    torch.manual_seed(2)  # overwritten by the checkpoint's generator state
    _run(tmp_path / "split", resumed, compile=True, resume=True)
    torch._dynamo.reset()
    torch.manual_seed(1)
    _run(tmp_path / "straight", straight, compile=True)
    for (k, a), b in zip(resumed.state_dict().items(), straight.state_dict().values()):
        assert torch.equal(a, b), k
