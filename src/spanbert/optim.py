"""The optimiser and its schedule: parameter groups (decay or not, a learning rate by name prefix), AdamW,
linear / polynomial / cosine schedules with warm-up, and gradient clipping (all parameters, or each group
apart)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import nn

from spanbert.training_args import TrainingArguments

T = TypeVar("T")


def _by_prefix(name: str, table: dict[str, T] | None, default: T) -> T:
    for prefix, value in (table or {}).items():
        if name.startswith(prefix):
            return value
    return default


def param_groups(
    model: nn.Module,
    learning_rate: float,
    weight_decay: float,
    lr_by_prefix: dict[str, float] | None = None,
    weight_decay_by_prefix: dict[str, float] | None = None,
    decay_all: bool = False,
) -> list[dict[str, Any]]:
    """AdamW groups: decay on weight matrices and embeddings only (not biases, not LayerNorm), as BERT.

    ``lr_by_prefix`` gives parameters whose name starts with a prefix their own peak learning rate;
    ``weight_decay_by_prefix`` their own weight decay (coref's task layers: 0), biases and LayerNorm
    still without decay. ``decay_all``: biases and LayerNorm weights decay too (the released SpanBERT
    pre-training, whose fairseq Adam has one group of every parameter).
    """
    groups: dict[tuple[float, float], list[nn.Parameter]] = {}
    seen: set[int] = set()
    for name, p in model.named_parameters():
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        lr = _by_prefix(name, lr_by_prefix, learning_rate)
        no_decay = not decay_all and (p.ndim < 2 or "LayerNorm" in name or "layer_norm" in name)
        wd = 0.0 if no_decay else _by_prefix(name, weight_decay_by_prefix, weight_decay)
        groups.setdefault((lr, wd), []).append(p)
    return [{"params": ps, "lr": lr, "initial_lr": lr, "weight_decay": wd} for (lr, wd), ps in groups.items()]


def lr_lambda(total_steps: int, warmup_steps: int, kind: str) -> Callable[[int], float]:
    """Multiplier of the peak rate at a step: linear warmup, then linear decay to 0 (or constant).

    ``kind="polynomial"``: fairseq's polynomial_decay (power 1, end rate 0) as the released SpanBERT
    run used it: update k (1-based) runs at max(1, k-1)/warmup of the peak while k-1 <= warmup, then at
    1 - (k-1)/total, so the decay spans all ``total_steps`` (not total - warmup) and starts just below
    the peak. ``step`` here is 0-based (= k-1).
    """

    def f(step: int) -> float:
        if kind == "polynomial":
            if warmup_steps and step <= warmup_steps:
                return max(1, step) / warmup_steps
            return max(0.0, 1.0 - step / max(1, total_steps))
        if warmup_steps and step < warmup_steps:
            return (step + 1) / warmup_steps  # the first step already uses a non-zero rate
        if kind == "constant":
            return 1.0
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    return f


def cosine_lambda(total_steps: int, warmup_steps: int, peak: float, init_lr: float, min_lr: float) -> Callable[[int], float]:
    """Multiplier of ``peak`` for fairseq's cosine schedule with one cycle (Baevski et al. 2019): a linear
    warmup from ``init_lr`` to ``peak`` over ``warmup_steps``, then ``min_lr + (peak - min_lr)(1 +
    cos(pi t))/2`` with t going from 0 to 1 over the remaining steps."""

    def f(step: int) -> float:
        if peak <= 0:
            return 0.0
        if warmup_steps and step < warmup_steps:
            rate = init_lr + (peak - init_lr) * step / warmup_steps  # fairseq: the first update at init_lr
        else:
            t = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
            rate = min_lr + (peak - min_lr) * (1 + math.cos(math.pi * t)) / 2
        return rate / peak

    return f


def make_optimizer(groups: list[dict[str, Any]], args: TrainingArguments, device: torch.device) -> torch.optim.Optimizer:
    """AdamW (fused on CPU and GPU: one kernel for all parameters instead of a Python loop over them), or
    SGD with Nesterov momentum for ``--optim nesterov``."""
    if args.optim == "nesterov":
        return torch.optim.SGD(groups, lr=args.learning_rate, momentum=args.momentum, nesterov=True)
    return torch.optim.AdamW(
        groups,
        lr=args.learning_rate,
        betas=(args.adam_beta1, args.adam_beta2),
        eps=args.adam_epsilon,
        fused=device.type in ("cuda", "cpu") or None,
    )


def clip_gradients(params: list[nn.Parameter], max_norm: float) -> torch.Tensor:
    """Scale all gradients so their global L2 norm is at most ``max_norm``; returns the norm before."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    if max_norm and max_norm > 0:
        return torch.nn.utils.clip_grad_norm_(params, max_norm)
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads]))


def clip_groups(
    model: nn.Module, params: list[nn.Parameter], prefixes: tuple[str, ...] | None
) -> list[list[nn.Parameter]]:
    """``params`` split for clipping: one group per prefix (parameters whose name starts with it), the
    rest in a last group; without prefixes, one group (the global norm, BERT's rule)."""
    if not prefixes:
        return [params]
    wanted = {id(p) for p in params}
    groups: list[list[nn.Parameter]] = [[] for _ in range(len(prefixes) + 1)]
    seen: set[int] = set()
    for name, p in model.named_parameters():
        if id(p) not in wanted or id(p) in seen:
            continue
        seen.add(id(p))
        i = next((j for j, prefix in enumerate(prefixes) if name.startswith(prefix)), len(prefixes))
        groups[i].append(p)
    return [g for g in groups if g]


