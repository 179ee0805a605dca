"""`--per_device_train_batch_size auto`: the largest micro-batch that fits the device, found once.

A GPU is fed best by the largest micro-batch its memory holds: a BERT-base step of 32 x 512 tokens
leaves an H100 waiting on kernel launches. The right size depends on the card, the model, the
sequence length, the precision and `--compile`; rather than a table that is wrong for the next card,
the trainer finds it by a short probe before the first step:

- the probe runs forward and backward (not the optimizer) on micro-batches made of the training
  set's longest examples (the worst case of every later batch), sizes 1, 2, 4, ... until one does
  not fit, then bisects between the last that fitted and the first that did not (`largest_fitting`):
  about 2 log2(n) tries;
- a size fits when it raises no out-of-memory error and its peak memory, plus the optimizer state
  still to come (AdamW: two fp32 copies of the weights), stays under `HEADROOM` of the card (the
  allocator fragments over a run; the probe's batch is the worst case only of the lengths);
- it changes nothing: the random streams are forked (dropout draws are not consumed), the
  gradients are dropped, the cache is emptied. Under DDP every rank probes its own GPU and all take
  the smallest answer;
- ``--gradient_accumulation_steps`` stays as given: the update is that many micro-batches of the
  size found (name a number for an update that does not depend on the card). The size is saved with
  the run, and ``--resume`` takes the saved size instead of probing again: a resumed run is the run.

Off CUDA there is no probe (host memory is not the limit worth probing for, and a CPU gains nothing
from a larger micro-batch once its cores are busy): the rule is `CPU_BATCH` sequences.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from spanbert.distributed import distributed_env, on_main, print0
from spanbert.errors import SpanBertError
from spanbert.runs import find_resume_checkpoint

AUTO = "auto"
CPU_BATCH = 32
"""The micro-batch of ``auto`` off CUDA (the trainer's default size), and what a plan made before the
probe (a cost estimate, an epoch's step count) assumes."""
MAX_BATCH = 4096
"""The probe stops here: beyond it a step is long enough on any GPU that a larger one gains nothing."""
HEADROOM = 0.9
"""Share of the card's memory a micro-batch may peak at, the optimizer state included."""


def planned_batch_size(batch: int | str) -> int:
    """The micro-batch a plan assumes: ``batch``, or `CPU_BATCH` for ``auto`` (not yet probed)."""
    return CPU_BATCH if batch == AUTO else int(batch)


def largest_fitting(fits: Callable[[int], bool], limit: int, start: int = 1) -> tuple[int, list[int]]:
    """The largest n in [1, ``limit``] for which ``fits(n)``, and the sizes tried in order; 0 when not
    even 1 fits. Assumes that a size fits when a larger one does. Doubling from ``start`` (clamped to
    the limit), then bisection between the last size that fitted and the first that did not."""
    if limit < 1:
        raise ValueError(f"limit must be >= 1, found {limit}")
    tried: list[int] = []

    def probe(n: int) -> bool:
        tried.append(n)
        return fits(n)

    n = max(1, min(start, limit))
    good, bad = 0, limit + 1
    while n <= limit:
        if not probe(n):
            bad = n
            break
        good = n
        if n == limit:
            return good, tried
        n = min(2 * n, limit)
    while bad - good > 1:
        mid = (good + bad) // 2
        if probe(mid):
            good = mid
        else:
            bad = mid
    return good, tried


def probe_rows(lengths: np.ndarray | None, n_examples: int, n: int) -> list[int]:
    """``n`` example indices for a probe batch: the longest examples (``lengths`` known) or the first
    ones, repeated when the training set has fewer than ``n``."""
    order = np.argsort(-np.asarray(lengths, dtype=np.int64), kind="stable") if lengths is not None else np.arange(n_examples)
    return [int(order[i % len(order)]) for i in range(n)]


def cuda_fits(
    model: nn.Module,
    make_batch: Callable[[int], dict[str, Any]],
    device: torch.device,
    amp_dtype: torch.dtype | None,
    reserve_bytes: int,
    headroom: float | None = None,
) -> Callable[[int], bool]:
    """The memory oracle of a CUDA device: does a forward and backward of ``make_batch(n)`` fit, with
    ``reserve_bytes`` (the optimizer state to come) beside its peak, under ``headroom`` (default
    `HEADROOM`) of the card?"""
    total = torch.cuda.get_device_properties(device).total_memory
    headroom = HEADROOM if headroom is None else headroom

    def fits(n: int) -> bool:
        model.zero_grad(set_to_none=True)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        try:
            batch = make_batch(n)
            ctx = torch.autocast(device.type, dtype=amp_dtype) if amp_dtype is not None else nullcontext()
            with ctx:
                loss = model(**batch)["loss"]
            loss.float().backward()
            del loss, batch
            torch.cuda.synchronize(device)  # the probe runs once, before the first step: a sync is fine here
            peak = torch.cuda.max_memory_allocated(device)
        except torch.cuda.OutOfMemoryError:
            return False
        finally:
            model.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
        return peak + reserve_bytes <= headroom * total

    return fits


def optimizer_reserve(model: nn.Module) -> int:
    """Bytes AdamW's state will take (exp_avg and exp_avg_sq of every trainable weight, fp32)."""
    return sum(2 * p.numel() * 4 for p in model.parameters() if p.requires_grad)


def saved_batching(output_dir: str | Path) -> tuple[int, int] | None:
    """(micro-batch, accumulation) of the checkpoint ``--resume`` continues, when it has them."""
    ckpt, _ = find_resume_checkpoint(output_dir)
    saved = json.loads((Path(ckpt) / "trainer_state.json").read_text()).get("args") or {}
    b, accum = saved.get("per_device_train_batch_size"), saved.get("gradient_accumulation_steps")
    return (int(b), int(accum)) if isinstance(b, int) and isinstance(accum, int) else None


def resolve_batch_size(
    args: Any,
    model: nn.Module,
    dataset: Any,
    collate_fn: Callable[[list[Any]], Any] | None,
    device: torch.device,
    amp_dtype: torch.dtype | None,
    to_device: Callable[[Any, torch.device], Any],
    lengths: Sequence[int] | np.ndarray | None = None,
) -> Any:
    """``args`` (a `TrainingArguments`) with ``per_device_train_batch_size`` a number: itself, the saved
    one on ``--resume``, the probe's on CUDA, `CPU_BATCH` elsewhere. ``model`` must be on ``device``."""
    if args.per_device_train_batch_size != AUTO:
        return args
    if args.max_tokens_per_batch:
        raise SpanBertError(
            f"--per_device_train_batch_size auto: found --max_tokens_per_batch {args.max_tokens_per_batch} too, "
            "expected one of them (a token budget sets the micro-batch itself)"
        )
    if args.resume:
        saved = on_main(lambda: saved_batching(args.output_dir))
        if saved is not None:
            print0(f"--per_device_train_batch_size auto: {saved[0]}, the size the resumed run found")
            return dataclasses.replace(args, per_device_train_batch_size=saved[0])
    if device.type != "cuda":
        print0(f"--per_device_train_batch_size auto: {CPU_BATCH} sequences (the rule on {device.type}: no memory probe)")
        return dataclasses.replace(args, per_device_train_batch_size=CPU_BATCH)
    _, world, _ = distributed_env()
    limit = max(1, min(MAX_BATCH, -(-len(dataset) // world)))
    rows_of = lambda n: probe_rows(lengths, len(dataset), n)  # noqa: E731

    def make_batch(n: int) -> dict[str, Any]:
        items = [dataset[i] for i in rows_of(n)]
        return to_device(collate_fn(items) if collate_fn is not None else torch.utils.data.default_collate(items), device)

    fits = cuda_fits(model, make_batch, device, amp_dtype, optimizer_reserve(model))
    was_training = model.training
    model.train()
    with torch.random.fork_rng(devices=[device]):  # the probe's dropout draws leave no trace
        found, tried = largest_fitting(fits, limit, start=8)
    model.train(was_training)
    if world > 1:  # every rank the same size: the smallest card's
        t = torch.tensor([found], device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        found = int(t.item())
    if found == 0:
        raise SpanBertError(
            f"--per_device_train_batch_size auto: not even one of the longest training examples fits "
            f"{torch.cuda.get_device_name(device)}'s memory (with AdamW's state beside it); "
            "expected a shorter --max_seq_length or a smaller model"
        )
    longest = int(max(lengths)) if lengths is not None and len(lengths) else None
    shape = f" of {longest} tokens" if longest else ""
    print0(
        f"--per_device_train_batch_size auto: {found} sequences{shape} fit {torch.cuda.get_device_name(device)} "
        f"(under {HEADROOM:.0%} of its memory with the optimizer state; tried {', '.join(map(str, tried))})"
    )
    return dataclasses.replace(args, per_device_train_batch_size=found)


__all__ = ["AUTO", "CPU_BATCH", "largest_fitting", "planned_batch_size", "resolve_batch_size"]
