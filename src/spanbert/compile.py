"""`torch.compile` of the training step: the model's repeated blocks, compiled in place.

What is compiled are the modules whose class says ``compile_region = True``: each family's embeddings,
its encoder layer and its pre-training heads (`spanbert.model`, `spanbert.modernbert`). The glue
between them stays eager: the unpadding of a padded batch (`spanbert.model.Unpad`, ModernBERT's
`Layout`), the gathers at the masked positions and the summed cross-entropy. Why regions rather than
the whole forward:

- **compile time**: every layer of an encoder runs the same code, and dynamo compiles it once for all
  of them (parameters are graph inputs, not constants), so a 12-layer BERT-base compiles one layer
  graph, not twelve inlined ones: a compile that fits a short GPU loan;
- **no padding computed**: the unpadding's token count is a shape, known only after a `nonzero`; in a
  whole-forward graph that is a graph break or a padded grid, here it is the dynamic first dimension
  of the layers' (N, H) input;
- **bounded recompilation**: regions are compiled with dynamic shapes (`dynamic=True`), so a new batch
  size, sequence length or target count reuses the graph; what makes a new graph is a new kind of
  input (padded or not, training or evaluation, another layer kind of ModernBERT), a handful per run
  (tests/test_compile.py counts them over batches of varying lengths).

`nn.Module.compile` compiles a module in place: its `state_dict` keys do not change (no ``_orig_mod.``),
so checkpoints, `--resume` and the exported model are the same as without compilation.

``--compile auto`` compiles on CUDA only: on the CPU inductor's code was measured slower than spanbert's
own CPU paths (docs/benchmarks.md: the chunked attention-with-dropout core and the SplitMix64 masks,
which are eager code and step aside inside a compiled region; `torch.compiler.is_compiling()`).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn

from spanbert.distributed import print0
from spanbert.training_args import compile_setting

BACKEND = "inductor"
"""The backend of `compile_regions` (tests use ``aot_eager``: the same graphs and autograd, no code
generation, seconds instead of a minute on the CPU)."""
RECOMPILE_LIMIT = 64
"""Graphs dynamo keeps per code object before it falls back to eager. Every layer of a family shares
one code object, so its variants add up: ModernBERT's first, global and local layers x padded or not x
training or evaluation x precision; torch's default (8) would send some of them back to eager."""


def wants_compile(setting: bool | str, device: torch.device) -> bool:
    """Whether ``--compile`` (auto, true, false) compiles on ``device``: auto = on CUDA only."""
    setting = compile_setting(setting)
    return device.type == "cuda" if setting == "auto" else bool(setting)


def regions(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The modules of ``model`` marked ``compile_region``, outermost first (none inside another)."""
    found: list[tuple[str, nn.Module]] = []
    for name, module in model.named_modules():
        if getattr(type(module), "compile_region", False) and not any(name.startswith(f"{n}.") for n, _ in found):
            found.append((name, module))
    return found


def compile_regions(
    model: nn.Module, backend: str | None = None, fullgraph: bool = False, dynamic: bool = True
) -> int:
    """Compile every region of ``model`` in place (`nn.Module.compile`); returns how many.

    ``fullgraph``: a graph break inside a region is an error (the tests ask for it: no region may
    break); the training default lets a break split the region instead, slower but correct, so that
    an untested path on a new PyTorch still trains. Compilation itself happens at the first call."""
    _raise_recompile_limit()
    found = regions(model)
    for _, module in found:
        module.compile(backend=backend or BACKEND, fullgraph=fullgraph, dynamic=dynamic)
    return len(found)


def is_compiled(module: nn.Module) -> bool:
    """Whether ``module`` was compiled in place (`nn.Module.compile`)."""
    return getattr(module, "_compiled_call_impl", None) is not None


def any_compiled(modules: Any) -> bool:
    """Whether any of ``modules`` is compiled: the eager glue then keeps its inputs compile-friendly
    (no CPU ragged attention, whose per-sequence lengths would be a new graph for every batch)."""
    return any(is_compiled(m) for m in modules)


def _raise_recompile_limit() -> None:
    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    setattr(config, name, max(int(getattr(config, name)), RECOMPILE_LIMIT))


def graphs_compiled() -> int:
    """Graphs dynamo has compiled in this process so far (its own counter: no device work)."""
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


class CompileReport:
    """Says in the log what compilation cost: the graphs made by the first step (and by the batch probe
    before it, if any), the first step's time, the time of compilation once the second step's is known
    (the first step's time less the second's), what that is a step over the run, and any graph made
    later (a new kind of batch or mode).

    Reads dynamo's counter and the host clock only: nothing waits for the device."""

    def __init__(self, n_regions: int, total_steps: int, graphs_before: int | None = None):
        self.n_regions = n_regions
        self.total_steps = total_steps
        self.graphs = graphs_compiled() if graphs_before is None else graphs_before
        self.t = time.perf_counter()
        self.first: float | None = None
        self.steps = 0

    def start(self) -> None:
        """The first step begins now."""
        self.t = time.perf_counter()

    def step_done(self, step: int) -> None:
        now = time.perf_counter()
        took, self.t = now - self.t, now
        self.steps += 1
        graphs = graphs_compiled()
        new, self.graphs = graphs - self.graphs, graphs
        if self.steps == 1:
            self.first = took
            print0(f"torch.compile: {self.n_regions} region(s), {new} graph(s) compiled by step {step} "
                   f"({took:.1f} s, compilation included)")  # fmt: skip
            return
        if self.steps == 2 and self.first is not None:
            spent = max(0.0, self.first - took)
            print0(f"torch.compile: about {spent:.1f} s of compilation (the first step {self.first:.2f} s, the next "
                   f"{took:.3f} s), {spent / max(1, self.total_steps):.3f} s a step over {self.total_steps} steps")  # fmt: skip
        if new:
            print0(f"torch.compile: {new} more graph(s) at step {step} (a new kind of batch or mode; {took:.1f} s)")


__all__ = ["CompileReport", "compile_regions", "graphs_compiled", "is_compiled", "regions", "wants_compile"]
