"""Task commands under ``torchrun``: every rank runs the command, and the few functions here keep it
right with several processes (a no-op in one).

- `start_distributed(device)` joins the process group (predict/evaluate commands too, so that
  `write_once` and `predict_sharded` know the other ranks);
- `predict_sharded(n, predict)`: each rank predicts its share of the n items, every rank gets all
  predictions in the original order (contract 7: evaluation runs on every rank);
- `write_once(fn)`: rank 0 writes, the others wait; its return value (a chosen threshold, the best
  sweep run) or its error reaches every rank. `write_json_once` and `print_metrics` use it or rank 0;
- `with seeded_model(seed):` around building a model: the same head on every rank and run, drawn from
  the seed alone, then a per-rank dropout stream.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import torch

from spanbert import distributed, utils
from spanbert.dropout import seeded_build

T = TypeVar("T")


def print_metrics(metrics: dict[str, Any]) -> None:
    """Metrics as JSON on stdout (what `spanbert evaluate` prints), once under torchrun."""
    distributed.print0(json.dumps(metrics, indent=2, sort_keys=True))


def start_distributed(device: str = "auto") -> torch.device:
    """This process's device; joins the process group under torchrun (a no-op in one process)."""
    dev = distributed.resolve_device(device)
    distributed.init_distributed(dev)
    return dev


_writing = False


def write_once(fn: Callable[[], T]) -> T:
    """Run ``fn`` (which writes files or chooses a value) on rank 0 only; the other ranks wait and
    get its result (or its error). Nested calls run ``fn`` directly, so a helper that writes once can
    be called from inside another."""
    global _writing
    if _writing:
        return fn()

    def guarded() -> T:
        global _writing
        _writing = True
        try:
            return fn()
        finally:
            _writing = False

    return distributed.on_main(guarded)


def predict_sharded(n: int, predict: Callable[[Sequence[int]], list[T]]) -> list[T]:
    """Contract 7: ``predict(indices)`` returns the outputs of those items; each rank predicts its
    share (`distributed.shard_range`), and every rank returns all n outputs in the original order.
    In one process this is ``predict(range(n))``."""
    mine = predict(distributed.shard_range(n))
    return [x for part in distributed.all_gather_objects(mine) for x in part]


def seeded_model(seed: int | None) -> contextlib.AbstractContextManager[None]:
    """``with seeded_model(seed): model = ...``: the new weights are drawn from ``seed`` alone (the same
    head on every rank and in every run with this ``--seed``), then this rank's dropout stream is seeded
    (`spanbert.dropout.seeded_build`)."""
    return seeded_build(seed, distributed.rank())


def write_json_once(path: str | Path, data: Any, sort_keys: bool = True) -> None:
    """Pretty JSON (UTF-8 as is), atomically, written once (rank 0): `spanbert.utils.write_json`."""
    write_once(lambda: utils.write_json(path, data, sort_keys=sort_keys, ensure_ascii=False))
