"""Multi-process primitives (`spanbert.distributed`) in one process: who this process is from torchrun's
environment, the device it asks for, and every collective a plain no-op that returns its own value (no process
group, no torch needed). Under torchrun they are tested in test_torchrun_exit.py, test_finetune_ddp.py and the
two-process tests of the modules that use them (test_trainer.py, test_runs.py, test_pretrain.py); here, on two
gloo processes, `on_main_long`, whose wait outlasts the process group's timeout."""

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


LONG = """
import datetime, os, sys, time
import torch.distributed as dist
from spanbert import distributed
from spanbert.errors import SpanBertError
distributed.init_distributed()  # the group's timeout: 2 s (below)
def slow(value):
    time.sleep(5)  # longer than the timeout: the other rank would fail waiting in a collective
    return value
print(distributed.on_main_long(lambda: slow({"chosen": 7}), key="a"), flush=True)
def fails():
    time.sleep(3)
    raise SpanBertError("no such corpus")
try:
    distributed.on_main_long(fails, key="a")
except SpanBertError as e:
    print("error:", e, flush=True)
distributed.barrier()  # the group works after both waits
try:
    distributed.on_main(lambda: slow(1))  # the plain one: the wait in the broadcast times out
except Exception as e:
    print("timed out:", type(e).__name__, flush=True)
    os._exit(0)
"""


@pytest.mark.slow
def test_on_main_long_waits_past_the_group_timeout(tmp_path):
    import os
    import socket
    import subprocess
    import sys

    script = tmp_path / "long.py"
    script.write_text(LONG.replace("distributed.init_distributed()", "import datetime as _d\n"
                      "_real = dist.init_process_group\n"
                      "dist.init_process_group = lambda *a, **k: _real(*a, **{**k, 'timeout': _d.timedelta(seconds=2)})\n"
                      "distributed.init_distributed()"))  # fmt: skip
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(2):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "2",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}  # fmt: skip
        procs.append(subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))  # fmt: skip
    outs = [p.communicate(timeout=400) for p in procs]
    first = outs[1][0].splitlines()  # rank 1: waited 5 s, then 3 s, on the store
    assert first[:2] == ["{'chosen': 7}", "error: no such corpus"], outs[1]
    assert outs[0][0].splitlines()[0] == "{'chosen': 7}", outs[0]
    assert first[2].startswith("timed out:"), outs[1]
