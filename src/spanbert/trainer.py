"""One explicit training loop for pre-training and fine-tuning.

AdamW with decoupled weight decay (LayerNorm weights and biases exempt), linear warmup then linear
decay, gradient clipping, gradient accumulation, bf16/fp16 autocast, atomic checkpoints with exact
resume, and DDP under `torchrun` (NCCL on GPU, gloo on CPU).

Determinism: the sample order is a function of (seed, epoch) only and the micro-batches of global step
s are the slice [s*G, (s+1)*G) of that epoch's permutation (G = global batch). So the data position
is derived from the step count, a resume needs nothing but the step, and 1 process with accumulation
sees exactly the micro-batches that N processes see together.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from spanbert.distributed import distributed_env, init_distributed, resolve_device  # noqa: F401 - re-exported
from spanbert.errors import SpanBertError
from spanbert.utils import atomic_write, fsync_dir


@dataclass
class TrainingArguments:
    """Options of the training loop. Names follow HF `TrainingArguments` where one exists."""

    output_dir: str = "runs/spanbert"
    """Folder for checkpoints, logs (log.jsonl, TensorBoard) and the final model."""
    max_steps: int = -1
    """Total optimizer steps; -1 = run num_train_epochs epochs."""
    num_train_epochs: float = 1.0
    """Epochs over the training set when max_steps is -1."""
    learning_rate: float = 1e-4
    """Peak learning rate, reached after warmup."""
    per_device_train_batch_size: int = 32
    """Sequences per micro-batch on each process."""
    per_device_eval_batch_size: int = 64
    """Sequences per batch at evaluation and prediction time."""
    gradient_accumulation_steps: int = 1
    """Micro-batches per optimizer step; global batch = per_device x processes x this."""
    warmup_steps: int = 0
    """Linear warmup steps (overrides warmup_ratio when > 0)."""
    warmup_ratio: float = 0.0
    """Fraction of the total steps used for linear warmup when warmup_steps is 0."""
    lr_scheduler_type: Literal["linear", "constant"] = "linear"
    """After warmup: linear decay to zero at the last step, or constant."""
    weight_decay: float = 0.01
    """Decoupled AdamW weight decay, not applied to biases and LayerNorm weights."""
    adam_beta1: float = 0.9
    """AdamW beta1."""
    adam_beta2: float = 0.999
    """AdamW beta2."""
    adam_epsilon: float = 1e-8
    """AdamW epsilon."""
    max_grad_norm: float = 1.0
    """Clip the global gradient norm to this value (0 disables clipping)."""
    logging_steps: int = 50
    """Log averaged losses and accuracies every this many steps."""
    save_steps: int = 500
    """Write a resumable checkpoint every this many steps (0 = only at the end)."""
    save_total_limit: int = 2
    """Keep at most this many checkpoints (the oldest are deleted)."""
    eval_steps: int = 0
    """Run the evaluation every this many steps (0 = only at the end)."""
    seed: int = 42
    """Seed of the sample order, dropout and initialisation."""
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    """Autocast dtype; auto = bf16 on GPUs that support it, else fp16 on GPU, fp32 on CPU."""
    device: str = "auto"
    """auto (cuda when available), cpu, cuda, cuda:N or mps."""
    dataloader_num_workers: int = 0
    """Worker processes that load and collate batches."""
    stop_at_step: int = -1
    """Stop after this step with a checkpoint, keeping the schedule of max_steps (for jobs split across
    time limits; continue with --resume). -1 = run to the end."""
    resume: bool = False
    """Continue from the latest checkpoint in output_dir (model, optimizer, schedule, RNG, data position)."""
    nan_policy: Literal["stop", "skip"] = "stop"
    """On a NaN/inf loss or gradient: stop with an error naming the step, or skip that step."""
    report_to: Literal["tensorboard", "none"] = "tensorboard"
    """Also write TensorBoard event files (when the tensorboard package is installed)."""
    disable_tqdm: bool = False
    """Hide the progress bar."""


@dataclass
class TrainResult:
    global_step: int
    skipped_steps: int
    metrics: dict[str, float]
    """The last logged training averages and evaluation results."""


# ---------------------------------------------------------------------------------------------
# Distributed setup


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    if precision == "fp32":
        return None
    if precision == "auto":
        if device.type != "cuda":
            return None
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if precision == "bf16":
        return torch.bfloat16
    if device.type != "cuda":
        raise SpanBertError("precision fp16 needs a CUDA device (use bf16 or fp32 on CPU)")
    return torch.float16


# ---------------------------------------------------------------------------------------------
# Optimizer and schedule


def param_groups(
    model: nn.Module, learning_rate: float, weight_decay: float, lr_by_prefix: dict[str, float] | None = None
) -> list[dict[str, Any]]:
    """AdamW groups: decay on weight matrices and embeddings only (not biases, not LayerNorm), as BERT.

    ``lr_by_prefix`` gives parameters whose name starts with a prefix their own peak learning rate.
    """
    groups: dict[tuple[float, bool], list[nn.Parameter]] = {}
    seen: set[int] = set()
    for name, p in model.named_parameters():
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        lr = learning_rate
        for prefix, prefix_lr in (lr_by_prefix or {}).items():
            if name.startswith(prefix):
                lr = prefix_lr
                break
        no_decay = p.ndim < 2 or "LayerNorm" in name or "layer_norm" in name
        groups.setdefault((lr, no_decay), []).append(p)
    return [
        {"params": ps, "lr": lr, "initial_lr": lr, "weight_decay": 0.0 if nd else weight_decay}
        for (lr, nd), ps in groups.items()
    ]


def lr_lambda(total_steps: int, warmup_steps: int, kind: str) -> Callable[[int], float]:
    """Multiplier of the peak rate at a step: linear warmup, then linear decay to 0 (or constant)."""

    def f(step: int) -> float:
        if warmup_steps and step < warmup_steps:
            return (step + 1) / warmup_steps  # the first step already uses a non-zero rate
        if kind == "constant":
            return 1.0
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    return f


def clip_gradients(params: list[nn.Parameter], max_norm: float) -> torch.Tensor:
    """Scale all gradients so their global L2 norm is at most ``max_norm``; returns the norm before."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    if max_norm and max_norm > 0:
        return torch.nn.utils.clip_grad_norm_(params, max_norm)
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads]))


# ---------------------------------------------------------------------------------------------
# Sample order


def epoch_permutation(n: int, seed: int, epoch: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(n)


def steps_per_epoch(n: int, global_batch: int, world: int) -> int:
    """Optimizer steps in one epoch: one process keeps the last partial global batch, several drop it
    so that every rank steps together."""
    return n // global_batch if world > 1 else math.ceil(n / global_batch)


def micro_batches(
    n: int, seed: int, epoch: int, batch: int, accum: int, rank: int, world: int, start_step: int
) -> list[list[list[int]]]:
    """This rank's micro-batches of one epoch from ``start_step`` on, grouped by optimizer step.

    Global step s covers perm[s*G : (s+1)*G], G = batch * world * accum; its micro-batch m on rank r is
    the slice at offset (m * world + r) * batch. With one process the last partial global batch is split
    into fewer micro-batches.
    """
    G = batch * world * accum
    perm = epoch_permutation(n, seed, epoch)
    steps = []
    for s in range(start_step, steps_per_epoch(n, G, world)):
        chunk = perm[s * G : (s + 1) * G]
        lows = ((m * world + rank) * batch for m in range(accum))
        steps.append([chunk[lo : lo + batch].tolist() for lo in lows if lo < len(chunk)])
    return steps


# ---------------------------------------------------------------------------------------------
# Checkpoints


def _unwrap(model: nn.Module) -> nn.Module:
    return model.module if hasattr(model, "module") else model


def save_training_state(
    output_dir: Path, step: int, model: nn.Module, optimizer, scheduler, scaler, args: TrainingArguments, extra: dict
) -> Path:
    """Write `checkpoint-{step}` atomically (temporary folder, fsync, rename), then point `latest` at it.

    A kill at any instant leaves `latest` naming a complete checkpoint (the old or the new one).
    """
    output_dir.mkdir(parents=True, exist_ok=True)
    final = output_dir / f"checkpoint-{step}"
    tmp = output_dir / f".checkpoint-{step}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    state = {
        "model": _unwrap(model).state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "scaler": scaler.state_dict() if scaler is not None else None,
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "step": step,
    }
    with open(tmp / "state.pt", "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    with open(tmp / "trainer_state.json", "w") as f:
        json.dump({"global_step": step, "args": asdict(args), **extra}, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(tmp)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    fsync_dir(output_dir)
    with atomic_write(output_dir / "latest") as f:
        f.write(final.name + "\n")
    # Keep the newest `save_total_limit` checkpoints; the one `latest` names is never deleted.
    ckpts = sorted(
        (p for p in output_dir.glob("checkpoint-*") if p.name.split("-")[-1].isdigit()),
        key=lambda p: int(p.name.split("-")[-1]),
    )
    for old in ckpts[: max(0, len(ckpts) - max(1, args.save_total_limit))]:
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    """The checkpoint that `output_dir/latest` names, or None when there is none."""
    pointer = Path(output_dir) / "latest"
    if not pointer.exists():
        return None
    path = Path(output_dir) / pointer.read_text().strip()
    return path if (path / "state.pt").exists() else None


def load_training_state(path: Path, model: nn.Module, optimizer, scheduler, scaler) -> int:
    try:
        state = torch.load(path / "state.pt", map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any failure here means the checkpoint is unusable
        raise SpanBertError(f"{path}/state.pt: cannot read the training checkpoint: {e}") from None
    _unwrap(model).load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    if scaler is not None and state.get("scaler"):
        scaler.load_state_dict(state["scaler"])
    torch.set_rng_state(state["torch_rng"])
    if state.get("cuda_rng") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    return int(state["step"])


# ---------------------------------------------------------------------------------------------
# Logging


class _Logger:
    def __init__(self, output_dir: Path, enabled: bool, tensorboard: bool):
        self.enabled = enabled
        self.writer = None
        self.jsonl = None
        if not enabled:
            return
        output_dir.mkdir(parents=True, exist_ok=True)
        self.jsonl = open(output_dir / "log.jsonl", "a", encoding="utf-8")
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.writer = SummaryWriter(str(output_dir / "tensorboard"))
            except ImportError:
                print("note: tensorboard is not installed; logging to log.jsonl only (pip install tensorboard)")

    def log(self, step: int, values: dict[str, float]) -> None:
        if not self.enabled:
            return
        self.jsonl.write(json.dumps({"step": step, **values}) + "\n")
        self.jsonl.flush()
        if self.writer is not None:
            for k, v in values.items():
                self.writer.add_scalar(k, v, step)

    def close(self) -> None:
        if self.jsonl:
            self.jsonl.close()
        if self.writer is not None:
            self.writer.close()


def _to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(v, device) for v in batch)
    return batch


def _count_tokens(batch: Any) -> int:
    if isinstance(batch, dict):
        if batch.get("attention_mask") is not None:
            return int(batch["attention_mask"].sum())
        if isinstance(batch.get("input_ids"), torch.Tensor):
            return batch["input_ids"].numel()
    return 0


# ---------------------------------------------------------------------------------------------
# The loop


def train(
    model: nn.Module,
    train_dataset: Any,
    args: TrainingArguments,
    *,
    collate_fn: Callable | None = None,
    lr_by_prefix: dict[str, float] | None = None,
    eval_fn: Callable[[nn.Module, int], dict[str, float]] | None = None,
) -> TrainResult:
    """Train ``model`` on ``train_dataset`` (map-style) and return the final step and metrics.

    ``model(**batch)`` must return a dict with a scalar ``"loss"``; other scalar entries whose names
    end in ``loss`` or ``acc`` are averaged and logged. ``eval_fn(model, step)`` runs every
    ``eval_steps`` and at the end (on rank 0, in eval mode).
    """
    rank, world, _ = distributed_env()
    device = resolve_device(args.device)
    init_distributed(device)
    output_dir = Path(args.output_dir)
    n = len(train_dataset)
    b, accum = args.per_device_train_batch_size, args.gradient_accumulation_steps
    if n == 0:
        raise SpanBertError("the training set is empty")
    if b < 1 or accum < 1:
        raise SpanBertError("per_device_train_batch_size and gradient_accumulation_steps must be >= 1")
    G = b * world * accum
    epoch_steps = steps_per_epoch(n, G, world)
    if epoch_steps == 0:
        raise SpanBertError(f"{n} training examples are fewer than one global batch of {G} across {world} processes")
    total = args.max_steps if args.max_steps > 0 else math.ceil(args.num_train_epochs * epoch_steps)
    warmup = args.warmup_steps or math.ceil(args.warmup_ratio * total)

    model.to(device)
    raw_model = model
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    groups = param_groups(raw_model, args.learning_rate, args.weight_decay, lr_by_prefix)
    optimizer = torch.optim.AdamW(
        groups,
        lr=args.learning_rate,
        betas=(args.adam_beta1, args.adam_beta2),
        eps=args.adam_epsilon,
        # fused: one kernel for all parameters instead of a Python loop over them (CPU and GPU)
        fused=device.type in ("cuda", "cpu") or None,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(total, warmup, args.lr_scheduler_type))
    amp_dtype = autocast_dtype(args.precision, device)
    scaler = torch.amp.GradScaler("cuda") if amp_dtype == torch.float16 else None
    params = [p for g in groups for p in g["params"]]

    step = 0
    if args.resume:
        ckpt = latest_checkpoint(output_dir)
        if ckpt is None:
            raise SpanBertError(f"--resume: no checkpoint in {output_dir} (expected {output_dir}/latest)")
        step = load_training_state(ckpt, model, optimizer, scheduler, scaler)
        if rank == 0:
            print(f"resumed from {ckpt} at step {step}/{total}")

    logger = _Logger(output_dir, enabled=rank == 0, tensorboard=args.report_to == "tensorboard")
    bar = None
    if rank == 0 and not args.disable_tqdm:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, initial=step, desc="train", unit="step", dynamic_ncols=True)
    window: dict[str, list[float]] = {}
    tokens, t0 = 0, time.perf_counter()
    skipped = 0
    last: dict[str, float] = {}
    pin = device.type == "cuda"
    model.train()
    try:
        end = min(total, args.stop_at_step) if args.stop_at_step > 0 else total
        while step < end:
            epoch, start = divmod(step, epoch_steps)
            if hasattr(train_dataset, "set_epoch"):
                train_dataset.set_epoch(epoch)
            plan = micro_batches(n, args.seed, epoch, b, accum, rank, world, start)
            loader = torch.utils.data.DataLoader(
                train_dataset,
                batch_sampler=[mb for step_mbs in plan for mb in step_mbs],
                collate_fn=collate_fn,
                num_workers=args.dataloader_num_workers,
                pin_memory=pin,
                # worker seeds come from this generator, not the global RNG, so resumes stay exact
                generator=torch.Generator().manual_seed(args.seed * 1000 + epoch),
                persistent_workers=False,
            )
            stream = iter(loader)
            for step_mbs in plan:
                if step >= end:
                    break
                n_micro = len(step_mbs)  # micro-batches in this step, fetched one at a time
                loss_sum = torch.zeros((), device=device)
                for i in range(n_micro):
                    mb = _to_device(next(stream), device)
                    tokens += _count_tokens(mb)
                    sync = world == 1 or i == n_micro - 1
                    ctx = model.no_sync() if not sync else nullcontext()
                    with ctx, torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                        out = model(**mb)
                        loss = out["loss"] / n_micro
                    if scaler is not None:
                        scaler.scale(loss).backward()
                    else:
                        loss.backward()
                    loss_sum += loss.detach()
                    for k, v in out.items():
                        if (k.endswith("loss") or k.endswith("acc")) and isinstance(v, torch.Tensor) and v.ndim == 0:
                            window.setdefault(k, []).append(float(v.detach()))
                if scaler is not None:
                    scaler.unscale_(optimizer)
                grad_norm = clip_gradients(params, args.max_grad_norm)
                bad = torch.stack([~torch.isfinite(loss_sum), ~torch.isfinite(grad_norm.to(device))]).any().float()
                if world > 1:
                    dist.all_reduce(bad)
                if bad.item() and scaler is None:
                    if args.nan_policy == "stop":
                        raise SpanBertError(
                            f"non-finite loss or gradient at step {step + 1} (loss {loss_sum.item():.4g}, "
                            f"grad norm {grad_norm.item():.4g}); lower the learning rate, use fp32, "
                            f"or pass --nan_policy skip to skip such steps"
                        )
                    skipped += 1
                    optimizer.zero_grad(set_to_none=True)
                else:
                    if scaler is not None:
                        scaler.step(optimizer)
                        scaler.update()
                    else:
                        optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                scheduler.step()
                step += 1
                window.setdefault("grad_norm", []).append(float(grad_norm))
                if bar is not None:
                    bar.update(1)
                if step % max(1, args.logging_steps) == 0 or step == end:
                    dt = time.perf_counter() - t0
                    last = {k: float(np.mean(v)) for k, v in window.items()}
                    # the rate of the group at --learning_rate (not e.g. the encoder's under lr_by_prefix)
                    last["lr"] = next(
                        (g["lr"] for g in optimizer.param_groups if g["initial_lr"] == args.learning_rate),
                        optimizer.param_groups[0]["lr"],
                    )
                    last["tokens_per_s"] = tokens * world / dt if dt > 0 else 0.0
                    logger.log(step, {f"train/{k}": v for k, v in last.items()})
                    if rank == 0:
                        shown = {k: f"{last[k]:.3f}" for k in _SHOWN if k in last}
                        shown |= {"tok/s": f"{last['tokens_per_s']:.0f}", "lr": f"{last['lr']:.2e}"}
                        # a line per logging step, so the history of the losses stays on screen
                        line = f"step {step}/{total} " + " ".join(f"{k} {v}" for k, v in shown.items())
                        if bar is not None:
                            bar.set_postfix(shown)
                            bar.write(line)
                        else:
                            print(line, flush=True)
                    window, tokens, t0 = {}, 0, time.perf_counter()
                if eval_fn is not None and args.eval_steps and step % args.eval_steps == 0 and step != total:
                    _run_eval(eval_fn, raw_model, step, rank, logger, last)
                if rank == 0 and args.save_steps and step % args.save_steps == 0 and step != end:
                    save_training_state(output_dir, step, model, optimizer, scheduler, scaler, args, {})
                if world > 1 and args.save_steps and step % args.save_steps == 0:
                    dist.barrier()
        if rank == 0 and (args.save_steps > 0 or step < total):
            save_training_state(output_dir, step, model, optimizer, scheduler, scaler, args, {})
        if eval_fn is not None and step == total:
            _run_eval(eval_fn, raw_model, step, rank, logger, last)
    finally:
        if bar is not None:
            bar.close()
        logger.close()
    if world > 1:
        dist.barrier()
    return TrainResult(global_step=step, skipped_steps=skipped, metrics=last)


_SHOWN = ("loss", "mlm_loss", "sbo_loss", "nsp_loss", "mlm_acc", "sbo_acc", "nsp_acc")


def _run_eval(eval_fn, model: nn.Module, step: int, rank: int, logger: _Logger, last: dict) -> None:
    if rank != 0:
        return
    was_training = model.training
    model.eval()
    with torch.no_grad():
        results = eval_fn(model, step) or {}
    model.train(was_training)
    logger.log(step, {f"eval/{k}": float(v) for k, v in results.items() if isinstance(v, (int, float))})
    last.update({f"eval_{k}": float(v) for k, v in results.items() if isinstance(v, (int, float))})


def predict_batches(
    model: nn.Module,
    dataset: Any,
    batch_size: int,
    collate_fn: Callable | None = None,
    device: str | torch.device = "auto",
    precision: str = "auto",
    desc: str = "predict",
    disable_tqdm: bool = False,
) -> Iterator[tuple[Any, dict[str, torch.Tensor]]]:
    """Run ``model`` over ``dataset`` in order, in eval mode without gradients; yield (batch, outputs).

    The batch is yielded as collated (on CPU), the outputs as the model returned them (on device).
    """
    device = device if isinstance(device, torch.device) else resolve_device(device)
    amp_dtype = autocast_dtype(precision, device)
    model.to(device)
    was_training = model.training
    model.eval()
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=False, collate_fn=collate_fn)
    from tqdm.auto import tqdm

    try:
        with torch.no_grad():
            for batch in tqdm(loader, desc=desc, disable=disable_tqdm, leave=False, dynamic_ncols=True):
                with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
                    out = model(**_to_device(batch, device))
                yield batch, out
    finally:
        model.train(was_training)
