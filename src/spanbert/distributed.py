"""Multi-process primitives for `torchrun`: who this process is, one writer, values chosen once.

Every command that writes files, draws random numbers or chooses a value goes through these, so that
a run under `torchrun --nproc_per_node N` behaves as one run:

- `on_main(fn)` runs ``fn`` on rank 0 only, while the other ranks wait; its result (or its error) is
  broadcast, so every rank goes on with the same value or stops with the same message instead of
  hanging in the next collective.
- `broadcast_object(value)`: a value chosen on rank 0 (a threshold, the best learning rate) is the
  one every rank uses and saves.
- `print0(...)`: messages print once, not once per process.

All of them are plain no-ops in a single process (no process group needed).
"""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from spanbert.errors import SpanBertError

T = TypeVar("T")


def distributed_env() -> tuple[int, int, int]:
    """(rank, world size, local rank) from torchrun's environment; (0, 1, 0) otherwise."""
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0))


def rank() -> int:
    return distributed_env()[0]


def world_size() -> int:
    return distributed_env()[1]


def is_main() -> bool:
    """True on the process that writes files and prints (rank 0, or the only process)."""
    return rank() == 0


def resolve_device(name: str = "auto") -> torch.device:
    """The device of this process: ``auto`` is cuda:LOCAL_RANK when CUDA is available, else cpu."""
    _, world, local = distributed_env()
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", local)
        return torch.device("cpu")
    try:
        dev = torch.device(name)
    except (RuntimeError, ValueError):
        raise SpanBertError(f"device: {name!r} is not a device; expected auto, cpu, cuda, cuda:N or mps") from None
    if dev.type not in ("cpu", "cuda", "mps"):
        raise SpanBertError(f"device: {name!r} is not supported; expected auto, cpu, cuda, cuda:N or mps")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SpanBertError("device cuda was asked for but no CUDA GPU is available")
    if dev.type == "cuda" and dev.index is None and world > 1:
        dev = torch.device("cuda", local)
    return dev


def init_distributed(device: torch.device | None = None) -> None:
    """Join the process group under torchrun (NCCL on GPU, gloo on CPU); idempotent, no-op alone."""
    if world_size() <= 1 or dist.is_initialized():
        return
    device = device if device is not None else resolve_device("auto")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    # Leave the group before the interpreter tears down, however the process ends (the CLI, a user's
    # script, a test): see `shutdown`.
    atexit.register(shutdown)


def shutdown() -> None:
    """Leave the process group, if this process joined one.

    Without it, gloo's threads are still joinable when the interpreter tears down, and a process that
    finished its work can die with ``terminate called without an active exception`` (SIGABRT), which
    torchrun reports as a failed run.
    """
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def _active() -> bool:
    return world_size() > 1 and dist.is_initialized()


def barrier() -> None:
    """Wait for every rank (no-op in one process)."""
    if _active():
        dist.barrier()


def broadcast_object(value: T, src: int = 0) -> T:
    """Every rank returns rank ``src``'s ``value`` (it must pickle); one process returns it unchanged."""
    if not _active():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def all_gather_objects(value: Any) -> list[Any]:
    """Every rank's ``value``, in rank order, on every rank."""
    if not _active():
        return [value]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, value)
    return out


def shard_range(n: int) -> range:
    """This rank's contiguous share of ``range(n)`` (sizes differ by at most one). Concatenating the
    shards of ranks 0..N-1 (e.g. from `all_gather_objects`) gives back the original order."""
    r, w = rank() if _active() else 0, world_size() if _active() else 1
    return range(n * r // w, n * (r + 1) // w)


def on_main(fn: Callable[[], T]) -> T:
    """Run ``fn`` on rank 0 only; the others wait. Every rank returns rank 0's result.

    An error on rank 0 is re-raised on every rank (a `SpanBertError` with rank 0's message), so no
    rank is left waiting in a collective for a partner that has stopped.
    """
    if not _active():
        return fn()
    result: Any = None
    error: str | None = None
    if is_main():
        try:
            result = fn()
        except SpanBertError as e:
            error = str(e)
        except BaseException as e:  # noqa: BLE001 - told to the other ranks, then re-raised here
            broadcast_object((None, f"rank 0 failed: {type(e).__name__}: {e}"))
            raise
    result, error = broadcast_object((result, error))
    if error is not None:
        err = SpanBertError(error)
        err.reported_by_main = not is_main()  # rank 0 prints it; the CLI keeps the others quiet
        raise err
    return result


def print0(*args: Any, **kwargs: Any) -> None:
    """`print` on rank 0 only (every message once, not once per process)."""
    if is_main():
        kwargs.setdefault("flush", True)
        print(*args, **kwargs)


def eprint0(*args: Any, **kwargs: Any) -> None:
    """`print` to stderr on rank 0 only."""
    if is_main():
        print(*args, file=sys.stderr, flush=True, **kwargs)


__all__ = [
    "all_gather_objects",
    "barrier",
    "broadcast_object",
    "distributed_env",
    "eprint0",
    "init_distributed",
    "shutdown",
    "is_main",
    "on_main",
    "print0",
    "rank",
    "resolve_device",
    "shard_range",
    "world_size",
]
