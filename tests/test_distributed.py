"""Multi-process primitives (`spanbert.distributed`) in one process: who this process is from torchrun's
environment, the device it asks for, and every collective a plain no-op that returns its own value (no process
group, no torch needed). Under torchrun they are tested in test_torchrun_exit.py, test_finetune_ddp.py and the
two-process tests of the modules that use them (test_trainer.py, test_runs.py, test_pretrain.py)."""

from __future__ import annotations

import pytest
import torch

from spanbert import distributed
from spanbert.errors import SpanBertError


def test_who_this_process_is_comes_from_torchruns_environment(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert distributed.distributed_env() == (0, 1, 0) and distributed.is_main()
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert distributed.distributed_env() == (3, 4, 1)
    assert (distributed.rank(), distributed.world_size(), distributed.is_main()) == (3, 4, False)


def test_only_rank_0_prints(monkeypatch, capsys):
    monkeypatch.setenv("RANK", "1")
    distributed.print0("from rank 1")
    distributed.eprint0("from rank 1")
    assert capsys.readouterr() == ("", "")
    monkeypatch.setenv("RANK", "0")
    distributed.print0("a", 2, sep="-")
    distributed.eprint0("warning: x")
    assert capsys.readouterr() == ("a-2\n", "warning: x\n")


def test_alone_every_collective_returns_this_processs_value(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    value = {"threshold": 0.5}
    assert distributed.broadcast_object(value) is value
    assert distributed.all_gather_objects(value) == [value]
    assert distributed.shard_range(7) == range(7)
    distributed.barrier()
    assert distributed.on_main(lambda: 42) == 42
    with pytest.raises(SpanBertError, match="refused"):  # an error on the only rank is its own, as it was raised
        distributed.on_main(lambda: (_ for _ in ()).throw(SpanBertError("refused")))


def test_the_device_asked_for(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert distributed.resolve_device("cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert distributed.resolve_device("auto") == torch.device("cpu")
    with pytest.raises(SpanBertError, match="no CUDA GPU is available"):
        distributed.resolve_device("cuda")
    with pytest.raises(SpanBertError, match=r"'gpu' is not a device; expected auto, cpu, cuda, cuda:N or mps"):
        distributed.resolve_device("gpu")
    with pytest.raises(SpanBertError, match=r"'meta' is not supported"):
        distributed.resolve_device("meta")
