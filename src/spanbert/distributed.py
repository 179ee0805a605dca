"""Multi-process primitives for `torchrun`: who this process is, one writer, values chosen once.

Every command that writes files, draws random numbers or chooses a value goes through these, so that
a run under `torchrun --nproc_per_node N` behaves as one run:

- `on_main(fn)` runs ``fn`` on rank 0 only, while the other ranks wait; its result (or its error) is
  broadcast, so every rank goes on with the same value or stops with the same message instead of
  hanging in the next collective.
- `broadcast_object(value)`: a value chosen on rank 0 (a threshold, the best learning rate) is the
  one every rank uses and saves.
- `print0(...)`: messages print once, not once per process.

All of them are plain no-ops in a single process (no process group needed), and none of them loads
torch there: `rank`, `print0` and `on_main` serve commands that need no torch (`spanbert tokenizer`,
`spanbert preprocess`, every `--help`), so torch is imported by the functions that use it.
"""

from __future__ import annotations

import atexit
import gc
import os
import socket
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from spanbert.errors import SpanBertError
from spanbert.utils import write_line

if TYPE_CHECKING:
    import torch

T = TypeVar("T")


def _dist() -> Any:
    """`torch.distributed`, imported when a process group is first asked about (see the module's doc)."""
    import torch.distributed

    return torch.distributed


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
    import torch

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
    import torch

    dist = _dist()
    if world_size() <= 1 or dist.is_initialized():
        return
    device = device if device is not None else resolve_device("auto")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    global _peers
    _peers = all_gather_objects(_whoami())  # who is who, while everyone is alive (`peer_failure`)
    # Leave the group before the interpreter tears down, however the process ends (the CLI, a user's
    # script, a test): see `shutdown`. An uncaught error marks the exit as failed (no exit barrier)
    # and a collective broken by a dead rank is told in one line (`peer_failure`).
    atexit.register(shutdown)
    if not getattr(sys.excepthook, "_spanbert", False):
        previous = sys.excepthook

        def hook(kind, value, tb):
            global _failed
            _failed = True
            line = peer_failure(value)
            if line is None:
                previous(kind, value, tb)
            else:
                exit_after_peer_failure(line)

        hook._spanbert = True  # type: ignore[attr-defined]
        sys.excepthook = hook


_peers: list[dict[str, Any]] = []
"""Every rank's host, pid and torchrun log folder, gathered once when the group is joined."""
_failed = False
"""This process is ending with an error: `shutdown` does not wait for the others."""
EXIT_BARRIER_TIMEOUT = 60.0
"""Seconds a finished rank waits at exit for the others to finish (then leaves anyway)."""


def _whoami() -> dict[str, Any]:
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE", "")  # torchrun: <log dir>/attempt_N/<local rank>/error.json
    return {"host": socket.gethostname(), "pid": os.getpid(), "log_dir": os.path.dirname(error_file)}


def mark_failed() -> None:
    """Say that this process is ending with an error (the CLI calls it): `shutdown` then leaves at once
    instead of waiting for the other ranks, which may be waiting for this one in a collective."""
    global _failed
    _failed = True


def shutdown() -> None:
    """Leave the process group, if this process joined one, in the order that ends every rank cleanly.

    1. Free what still holds the group's pending work (DDP's reducer, in a reference cycle) while the
       interpreter is alive: freed during its teardown, gloo's threads take the GIL of a dying
       interpreter and the process dies with ``terminate called without an active exception``
       (SIGABRT) after finishing its work, which torchrun reports as a failed run.
    2. On a clean exit, wait (bounded, through the rendezvous store, not a collective) until every rank
       has finished, so that none closes its connections while another still talks to it.
    3. Destroy the group (its threads are joined).
    The trainer joins its data-loader workers before it returns (`trainer.train`), so they are gone
    before this runs. After an error there is no wait: the others learn of it from the broken group.
    """
    global _peers
    if "torch.distributed" not in sys.modules:  # never imported: no group was joined
        return
    dist = _dist()
    if not (dist.is_available() and dist.is_initialized()):
        return
    gc.collect()
    if world_size() > 1:
        _exit_barrier(wait=not _failed)
    dist.destroy_process_group()
    _peers = []


def _exit_barrier(wait: bool) -> None:
    """Count this rank as finished (or failed) in the rendezvous store; with ``wait``, wait until every
    rank is counted (a failed rank counts: nobody waits for one that has stopped), at most
    `EXIT_BARRIER_TIMEOUT` seconds. The store, not a collective: it cannot pair with a collective that
    another rank is still in."""

    try:
        store = _dist().distributed_c10d._get_default_store()
        store.set_timeout(timedelta(seconds=5))  # a store whose host has gone fails fast
        store.add("spanbert/finished" if wait else "spanbert/failed", 1)
        deadline = time.monotonic() + EXIT_BARRIER_TIMEOUT
        while wait and time.monotonic() < deadline:
            if store.add("spanbert/finished", 0) + store.add("spanbert/failed", 0) >= world_size():
                break
            time.sleep(0.01)
    except Exception:  # noqa: BLE001 - a store gone with its host (a rank that stopped): leave anyway
        pass


_BROKEN = (
    "Connection closed by peer",
    "Connection reset by peer",
    "Broken pipe",
    "remote worker crash",
    "ncclRemoteError",
    "NCCL communicator was aborted",
)


def peer_failure(exc: BaseException | None) -> str | None:
    """One line for an error that is this rank's collective failing because another rank stopped (its
    connections closed): which rank, its pid, and where its log is. None for any other error.

    A rank that dies (killed, out of memory, its own error) leaves the others with a raw gloo or NCCL
    traceback that does not say who; this names it, from the table gathered when the group was
    joined: a rank on this host whose process is gone (or a zombie), the other rank of two, or else
    every other rank.
    """
    if not _peers or exc is None:
        return None
    text = str(exc)
    if not (isinstance(exc, getattr(_dist(), "DistError", ())) or any(m in text for m in _BROKEN)):
        return None
    me = rank()
    others = [r for r in range(len(_peers)) if r != me]
    host = socket.gethostname()
    dead: list[int] = []
    deadline = time.monotonic() + 0.5  # a rank that stopped on its own error may still be exiting
    while not dead and time.monotonic() < deadline:
        dead = [r for r in others if _peers[r]["host"] == host and not _alive(_peers[r]["pid"])]
        if not dead:
            time.sleep(0.02)
    suspects = dead or (others if len(others) == 1 else [])
    if not suspects:
        return (
            f"rank {me}: a collective failed because another rank stopped ({text.splitlines()[0][:160]}); "
            f"see the other ranks' output"
        )
    parts = []
    for r in suspects:
        p = _peers[r]
        where = p["host"] if p["host"] != host else "this host"
        parts.append(f"rank {r} (pid {p['pid']} on {where}) stopped; {_log_of(p)}")
    return "; ".join(parts) + f" (rank {me} stops too: its collective with it failed)"


def exit_after_peer_failure(line: str) -> NoReturn:
    """Print ``line`` (from `peer_failure`) as this rank's one error line and end the process now, exit
    status 1. Why not a normal exit: the interpreter's teardown after a broken group takes seconds
    (torch's, gloo's), during which torchrun has not yet been told; the run is over and there is
    nothing left to save (the trainer closed its logs and loader on the way out)."""
    print(f"error: {line}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a process killed but not yet reaped by torchrun is a zombie: dead
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _log_of(peer: dict[str, Any]) -> str:
    folder = peer["log_dir"]
    for name in ("stderr.log", "stdout.log"):
        if folder and os.path.isfile(os.path.join(folder, name)):
            return f"its log: {os.path.join(folder, name)}"
    return "its output is above, on torchrun's console (torchrun --log-dir DIR --redirects 3 keeps it in a file)"


def _active() -> bool:
    return world_size() > 1 and _dist().is_initialized()


def barrier() -> None:
    """Wait for every rank (no-op in one process)."""
    if _active():
        _dist().barrier()


def broadcast_object(value: T, src: int = 0) -> T:
    """Every rank returns rank ``src``'s ``value`` (it must pickle); one process returns it unchanged."""
    if not _active():
        return value
    box = [value]
    _dist().broadcast_object_list(box, src=src)
    return box[0]


def all_gather_objects(value: Any) -> list[Any]:
    """Every rank's ``value``, in rank order, on every rank."""
    if not _active():
        return [value]
    out: list[Any] = [None] * world_size()
    _dist().all_gather_object(out, value)
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


POLL_SECONDS = (0.02, 1.0)
"""`on_main_long`: the waiting ranks look at the store this often, from the first interval up to the second."""
_long_calls: dict[str, int] = {}


def on_main_long(fn: Callable[[], T], key: str) -> T:
    """`on_main` for work that may outlast the process group's timeout (preparing a raw-text corpus, building
    an example index): rank 0 runs ``fn`` and puts its result (or its error) in the rendezvous store; the
    other ranks poll the store for it instead of waiting in a collective, which would fail after the
    group's timeout (NCCL's default is 10 minutes, gloo's 30). ``key`` names the call; the n-th call with a
    key on one rank pairs with the n-th on the others. The result must pickle. One process: ``fn()``.
    """
    if not _active():
        return fn()
    import pickle

    count = _long_calls.get(key, 0)
    _long_calls[key] = count + 1
    name = f"spanbert/on_main_long/{key}/{count}"
    store = _dist().distributed_c10d._get_default_store()
    if is_main():
        try:
            result = fn()
        except SpanBertError as e:
            store.set(name, pickle.dumps(("error", str(e))))
            raise
        except BaseException as e:  # noqa: BLE001 - told to the other ranks, then re-raised here
            store.set(name, pickle.dumps(("error", f"rank 0 failed: {type(e).__name__}: {e}")))
            raise
        store.set(name, pickle.dumps(("ok", result)))
        return result
    wait = POLL_SECONDS[0]
    while not store.check([name]):
        time.sleep(wait)
        wait = min(POLL_SECONDS[1], wait * 1.5)
    status, value = pickle.loads(store.get(name))
    if status == "error":
        err = SpanBertError(value)
        err.reported_by_main = True  # rank 0 prints it; the CLI keeps the others quiet
        raise err
    return value


def print0(*args: Any, **kwargs: Any) -> None:
    """`print` on rank 0 only (every message once, not once per process), on a line of its own while a
    progress bar shows (`spanbert.utils.write_line`)."""
    if is_main():
        _print_line(*args, **kwargs)


def eprint0(*args: Any, **kwargs: Any) -> None:
    """`print` to stderr on rank 0 only (a line of its own while a progress bar shows, as `print0`)."""
    if is_main():
        _print_line(*args, file=sys.stderr, **kwargs)


def _print_line(*args: Any, sep: str = " ", end: str = "\n", file: Any = None, flush: bool = True) -> None:

    write_line(sep.join(map(str, args)), file=file, end=end)


__all__ = [
    "all_gather_objects",
    "barrier",
    "broadcast_object",
    "distributed_env",
    "eprint0",
    "init_distributed",
    "exit_after_peer_failure",
    "mark_failed",
    "peer_failure",
    "shutdown",
    "is_main",
    "on_main",
    "on_main_long",
    "print0",
    "rank",
    "resolve_device",
    "shard_range",
    "world_size",
]
