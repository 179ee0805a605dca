"""On a CUDA GPU (issue 24, docs/gpu.md): every model on the GPU against the CPU, bf16 and fp16
training steps, checkpoints across devices, no host sync in a quiet step, DDP over NCCL; the compiled
step (`--compile`, the GPU's default) against eager, and the micro-batch probe (`auto`).

All skipped without CUDA (`pytest -m cuda` runs them; `bench/gpu.sh` runs them on a GPU machine).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from test_device import BF16_ATOL, BF16_RTOL, CASES, on
from test_host_sync import Items, pretraining_case, run_quiet_steps

import spanbert.trainer as trainer_mod
from spanbert.trainer import train
from spanbert.training_args import TrainingArguments

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

GPU_RTOL = 2e-3
"""fp32 loss on the GPU vs the CPU, same weights: different kernels, different summation orders
(TF32 is off for matmuls by default in PyTorch; the character CNN's cuDNN convolutions may use it)."""


def _case_on(name: str, device: str):
    torch.manual_seed(0)
    model, batch = CASES[name]()
    return model.to(device).eval(), on(batch, device)


def _gradients_in_eval(model: torch.nn.Module):
    """A context for a backward pass through a model in eval mode (dropout off, so the GPU and CPU
    losses are the same function): cuDNN's RNN backward refuses eval mode ("can only be called in
    training mode"), so a model with an LSTM (qa-bilstm, the CRF tagger) runs on PyTorch's own RNN
    kernels instead. Training, in train mode, uses cuDNN (test_task_and_two_tower_training_steps)."""
    has_rnn = any(isinstance(m, torch.nn.RNNBase) for m in model.modules())
    return torch.backends.cudnn.flags(enabled=not has_rnn)


@pytest.mark.parametrize("name", list(CASES))
def test_every_model_gives_the_cpu_loss_on_the_gpu(name):
    model, batch = _case_on(name, "cpu")
    with torch.no_grad():
        ref = float(model(**batch)["loss"])
    model, batch = model.cuda(), on(batch, "cuda")
    with _gradients_in_eval(model):
        out = model(**batch)
        out["loss"].backward()
    got = float(out["loss"].detach())
    assert abs(got - ref) <= GPU_RTOL * abs(ref) + 1e-4, f"cuda {got:.6f} vs cpu {ref:.6f}"
    for n, p in model.named_parameters():
        if p.grad is not None:
            assert p.grad.is_cuda and torch.isfinite(p.grad).all(), n


@pytest.mark.parametrize("name", list(CASES))
def test_bf16_on_the_gpu_is_within_tolerance_of_fp32(name):
    model, batch = _case_on(name, "cuda")
    with torch.no_grad():
        ref = float(model(**batch)["loss"])
    with _gradients_in_eval(model):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(**batch)
        out["loss"].backward()
    got = float(out["loss"].detach())
    assert abs(got - ref) <= BF16_RTOL * abs(ref) + BF16_ATOL, f"bf16 {got:.5f} vs fp32 {ref:.5f}"
    for n, p in model.named_parameters():
        if p.grad is not None:
            assert torch.isfinite(p.grad).all(), n


def _args(tmp: Path, **kw) -> TrainingArguments:
    # eager unless a test asks (--compile's own tests are below): a compile per test would cost minutes
    base = dict(output_dir=str(tmp), max_steps=4, per_device_train_batch_size=4, learning_rate=1e-3,
                warmup_steps=1, save_steps=0, logging_steps=2, disable_tqdm=True, report_to="none", device="cuda",
                precision="fp32", compile=False)
    return TrainingArguments(**{**base, **kw})  # fmt: skip


def _pretrain(tmp: Path, **kw):
    """4 SpanBERT pre-training steps (MLM + SBO), dropout off: runs that differ only in precision or
    device compute the same function."""
    model, ds, collate, count = pretraining_case("spanbert", dropout=0.0)
    result = train(model, ds, _args(tmp, **kw), collate_fn=collate, count_targets=count)
    return model, result


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_pretraining_steps_on_the_gpu(precision, tmp_path):
    """The trainer's bf16 pre-training steps: the loss after 4 steps within BF16_RTOL of fp32's."""
    _, ref = _pretrain(tmp_path / "fp32", precision="fp32")
    model, result = _pretrain(tmp_path / precision, precision=precision)
    assert result.global_step == 4 and result.skipped_steps == 0
    assert all(p.is_cuda and torch.isfinite(p).all() for p in model.parameters())
    a, b = result.metrics["loss"], ref.metrics["loss"]
    assert abs(a - b) <= BF16_RTOL * abs(b) + BF16_ATOL, (a, b)


def _task_dataset(name: str):
    """(model, dataset of one-batch items, collate) for a trainer run on a task's real collator."""
    model, batch = CASES[name]()
    return model, Items([batch] * 8), lambda items: items[0]


@pytest.mark.parametrize("name", ["qa", "qa-bilstm", "sequence-classification", "token-classification", "swag",
                                  "coref", "two-tower-cloze", "two-tower-char-cnn", "cloze-ner-tagger-crf"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_task_and_two_tower_training_steps(name, precision, tmp_path):
    model, ds, collate = _task_dataset(name)
    result = train(model, ds, _args(tmp_path, per_device_train_batch_size=1, precision=precision), collate_fn=collate)
    assert result.global_step == 4 and result.skipped_steps == 0
    assert np.isfinite(result.metrics["loss"])
    assert all(p.is_cuda and torch.isfinite(p).all() for p in model.parameters())


def test_fp16_trains_with_loss_scaling(tmp_path, monkeypatch):
    """--precision fp16: the GradScaler scales the loss; its first, too-large scale overflows and
    those steps are skipped (counted), never applied."""
    scalers = []
    real = trainer_mod.make_grad_scaler

    def spy(dtype, device):
        s = real(dtype, device) if dtype != torch.float16 else torch.amp.GradScaler("cuda", init_scale=2.0**32)
        scalers.append(s)
        return s

    monkeypatch.setattr(trainer_mod, "make_grad_scaler", spy)
    model, result = _pretrain(tmp_path, precision="fp16", max_steps=40)
    assert isinstance(scalers[0], torch.amp.GradScaler) and scalers[0].is_enabled()
    assert scalers[0].get_scale() < 2.0**32  # it backed off (x0.5 per overflow)
    assert result.global_step == 40 and 0 < result.skipped_steps < 40  # fp16 max 65504: 2^32 overflows
    assert all(torch.isfinite(p).all() for p in model.parameters())


@pytest.mark.parametrize("first,then", [("cuda", "cpu"), ("cpu", "cuda")])
def test_a_checkpoint_resumes_on_the_other_device(first, then, tmp_path):
    """Stop after step 2 on one device, resume on the other: the run ends as one run on `first` does,
    within the devices' rounding. AdamW's update is ~lr per step whatever the gradient's size, so a
    rounding difference on a near-zero gradient moves a weight by up to lr x 2 steps = 2e-3."""
    _pretrain(tmp_path / "split", device=first, stop_at_step=2, save_steps=2)
    model, result = _pretrain(tmp_path / "split", device=then, resume=True, save_steps=2)
    assert result.global_step == 4
    ref, _ = _pretrain(tmp_path / "whole", device=first, save_steps=2)
    for (k, a), b in zip(model.state_dict().items(), ref.state_dict().values()):
        assert a.device.type == torch.device(then).type
        assert torch.allclose(a.float().cpu(), b.float().cpu(), atol=2.5e-3, rtol=0), k


class CudaSyncs:
    """`run_quiet_steps`'s counter on a GPU: CUDA's own sync debug mode while active (it warns at every
    call that waits for the device), the warnings collected."""

    def __init__(self) -> None:
        self.host = 0
        self.calls: list[str] = []
        self._active = False
        self._caught = None

    @property
    def active(self) -> bool:
        return self._active

    @active.setter
    def active(self, value: bool) -> None:
        torch.cuda.set_sync_debug_mode("warn" if value else "default")
        self._active = value

    def __enter__(self):
        self._caught = warnings.catch_warnings(record=True)
        self._log = self._caught.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc):
        self.active = False
        self._caught.__exit__(*exc)
        # "called a synchronizing CUDA operation": one warning per sync. The mode's own notice ("...
        # is a prototype feature", once a process, at its first use) is no sync.
        self.calls = [str(w.message) for w in self._log if "called a synchronizing" in str(w.message)]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_quiet_pretraining_steps_never_synchronise_the_gpu(precision, compiled, tmp_path):
    """Compiled: a first run compiles (the compilation may wait for the device), the counted run reuses
    the graphs, as every step after the first does."""
    model, ds, collate, count = pretraining_case("spanbert")
    kw = dict(precision=precision, gradient_accumulation_steps=2, max_grad_norm=1.0, device="cuda", compile=compiled)
    if compiled:
        train(model, ds, _args(tmp_path / "warm", **kw), collate_fn=collate, count_targets=count)
    calls = run_quiet_steps(CudaSyncs(), model, ds, collate, count, output_dir=tmp_path / "counted", **kw)
    assert calls == []


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_compiled_pretraining_steps_train_as_eager(precision, tmp_path):
    """--compile true (inductor's Triton kernels) against eager, dropout off, 4 steps: the same loss
    within fp32 rounding on the GPU (TF32 stays off), within bf16's tolerance in bf16."""
    _, ref = _pretrain(tmp_path / "eager", precision=precision)
    model, result = _pretrain(tmp_path / "compiled", precision=precision, compile=True)
    from spanbert.compile import is_compiled, regions

    assert all(is_compiled(m) for _, m in regions(model))
    a, b = result.metrics["loss"], ref.metrics["loss"]
    tol = GPU_RTOL * abs(b) + 1e-4 if precision == "fp32" else BF16_RTOL * abs(b) + BF16_ATOL
    assert abs(a - b) <= tol, (a, b)


def test_compiled_modernbert_in_bf16_equals_eager():
    """The packed FlashAttention path (`varlen_attn`, a custom op) inside compiled layers, padded and
    unpadded, forward and backward, against the same layers eager."""
    import copy

    from spanbert.compile import compile_regions

    encoder, ids, mask = _modernbert_pair()
    encoder.train()  # attention dropout is 0: train mode changes nothing but the graphs' mode
    compiled = copy.deepcopy(encoder)
    compile_regions(compiled, fullgraph=True)
    for m in (mask, None):
        outs = []
        for enc in (encoder, compiled):
            enc.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                h = enc(ids, m).float()
            h.pow(2).mean().backward()
            outs.append((h.detach(), {n: p.grad.float() for n, p in enc.named_parameters() if p.grad is not None}))
        (h_e, g_e), (h_c, g_c) = outs
        assert (h_c - h_e).abs().max() <= 0.05 * h_e.abs().max()
        for n, g in g_e.items():
            assert (g_c[n] - g).norm() <= 0.05 * g.norm() + 1e-6, n


def test_auto_batch_size_probes_the_card(tmp_path, monkeypatch, capsys):
    """--per_device_train_batch_size auto on a GPU: a tiny model fits the whole (16-example) training
    set; with a tiny share of the card allowed, nothing fits and the error says so."""
    import spanbert.microbatch as mb

    _, result = _pretrain(tmp_path / "fits", per_device_train_batch_size="auto", compile=True)
    out = capsys.readouterr().out
    assert "--per_device_train_batch_size auto: 16 sequences" in out, out
    assert result.global_step == 4
    monkeypatch.setattr(mb, "HEADROOM", 1e-9)
    from spanbert.errors import SpanBertError

    with pytest.raises(SpanBertError, match="not even one of the longest training examples fits"):
        _pretrain(tmp_path / "none", per_device_train_batch_size="auto")


DDP_SCRIPT = textwrap.dedent(
    """
    import copy, sys, torch, torch.distributed as dist
    sys.path.insert(0, {tests!r})
    from test_host_sync import pretraining_case
    from spanbert.loop import to_device
    dist.init_process_group("nccl")
    torch.cuda.set_device(0)
    model, ds, collate, _ = pretraining_case("bert-nsp", dropout=0.0)
    model = model.cuda()
    plain = copy.deepcopy(model)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0])
    for step, rows in enumerate([[0, 1, 2, 3], [4, 5]]):
        batch = to_device(collate([ds[i] for i in rows]), torch.device("cuda"))
        ddp(**batch)["loss"].backward()
        plain(**batch)["loss"].backward()
    for (name, p), q in zip(model.named_parameters(), plain.parameters()):
        assert p.grad is not None, name
        assert torch.allclose(p.grad, q.grad, atol=1e-6, rtol=1e-5), name
    flag = torch.ones(2, device="cuda")
    dist.all_reduce(flag)
    assert flag.tolist() == [1.0, 1.0]
    dist.destroy_process_group()
    print("ddp ok")
    """
)


def test_ddp_over_nccl_with_one_process(tmp_path):
    """One torchrun process on NCCL: DDP's gradients equal the plain model's; an all-reduce works."""
    script = tmp_path / "ddp.py"
    script.write_text(DDP_SCRIPT.format(tests=str(Path(__file__).parent)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1] / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1", str(script)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0 and "ddp ok" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-4000:]


def _modernbert_pair(T: int = 300):
    """A ModernBERT with local windows of 64 and a right-padded batch, on the GPU."""
    from spanbert import modernbert

    torch.manual_seed(0)
    cfg = modernbert.modernbert_config("tiny", vocab_size=500, local_attention=64, pad_token_id=0)
    encoder = modernbert.Encoder(cfg).cuda().eval()
    ids = torch.randint(5, 500, (3, T), device="cuda")
    mask = torch.ones(3, T, dtype=torch.long, device="cuda")
    mask[1, T // 2 :] = 0
    mask[2, 40:] = 0
    return encoder, ids, mask


def test_modernbert_in_bf16_takes_the_packed_flash_path_and_matches_fp32():
    """bf16 on a GPU: `varlen_attn` over the packed real tokens (sliding windows native) where this
    PyTorch has it, else the padded grid; either way within the bf16 tolerance of the fp32 grid."""
    from spanbert import modernbert

    encoder, ids, mask = _modernbert_pair()
    with torch.no_grad():
        ref = encoder(ids, mask).float()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            layout = modernbert.Layout(encoder.config, ids, mask, half_precision=True)
            got = encoder(ids, mask).float()
    assert layout.varlen == modernbert.VARLEN
    keep = mask.bool()
    err = (got - ref)[keep].abs().max().item()
    assert err <= 0.05 * ref[keep].abs().max().item(), err
    assert torch.all(got[~keep] == 0)
    # and training through it: finite gradients everywhere
    encoder.train()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        encoder(ids, mask).float().pow(2).mean().backward()
    assert all(torch.isfinite(p.grad).all() for p in encoder.parameters() if p.grad is not None)


def test_modernbert_on_the_gpu_equals_transformers():
    transformers = pytest.importorskip("transformers")
    encoder, ids, mask = _modernbert_pair()
    hf_cfg = transformers.ModernBertConfig(**{k: v for k, v in encoder.config.to_hf_dict().items() if k != "model_type"})
    hf_cfg._attn_implementation = "sdpa"
    hf = transformers.ModernBertModel(hf_cfg).cuda().eval()
    hf.load_state_dict({k: v for k, v in encoder.state_dict().items() if not k.startswith("head.")})
    with torch.no_grad():
        ref = hf(ids, attention_mask=mask).last_hidden_state
        got = encoder(ids, mask)
    keep = mask.bool()
    assert (ref - got)[keep].abs().max() <= 5e-4
