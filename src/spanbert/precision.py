"""The arithmetic a run computes in: bf16 autocast where the CPU has native bf16 (AMX, AVX-512 BF16) or on
a GPU, fp32 elsewhere (`autocast_dtype`, `precision_text`), and denormals flushed to zero while a model runs
(`flush_denormals`)."""

from __future__ import annotations

import ctypes
import functools
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import torch

from spanbert.errors import SpanBertError

# CPU flags that mean native bf16 matrix arithmetic: AMX tiles (Sapphire Rapids on) and AVX-512 BF16
# dot products (Cooper Lake, Zen 4 on). Without them oneDNN emulates bf16 (converts to fp32 and back):
# measured slower than fp32 on such a CPU (docs/benchmarks.md, "Where the time goes").
NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16")


def cpu_flags() -> set[str]:
    """The CPU's feature flags: ``SPANBERT_CPU_FLAGS`` (space-separated) when set, which child processes
    inherit too (the test suite's CPU without native bf16), else /proc/cpuinfo's (Linux; read once a
    process); empty where neither says."""
    forced = os.environ.get("SPANBERT_CPU_FLAGS")
    return set(forced.split()) if forced is not None else set(_proc_cpu_flags())


@functools.cache
def _proc_cpu_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def native_bf16() -> str | None:
    """The flag by which this CPU does bf16 matrix arithmetic natively (amx_bf16 or avx512_bf16), or None.

    /proc/cpuinfo's flags first; elsewhere (no /proc) torch's own probe of the CPU."""
    flags = cpu_flags()
    found = next((f for f in NATIVE_BF16_FLAGS if f in flags), None)
    if found or flags:
        return found
    probes = (("amx_bf16", "_is_amx_tile_supported"), ("avx512_bf16", "_is_avx512_bf16_supported"))
    for name, probe in probes:
        if getattr(torch.cpu, probe, lambda: False)():
            return name
    return None


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype of a precision setting; None = fp32. ``auto``: bf16 on a GPU that supports it
    (else fp16), bf16 on a CPU with native bf16 matrix units (`native_bf16`), else fp32."""
    if precision == "fp32":
        return None
    if precision == "auto":
        if device.type == "cpu":
            return torch.bfloat16 if native_bf16() else None
        if device.type != "cuda":
            return None
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if precision == "bf16":
        return torch.bfloat16
    if device.type != "cuda":
        raise SpanBertError("precision fp16 needs a CUDA device (use bf16 or fp32 on CPU)")
    return torch.float16


def precision_text(precision: str, device: torch.device) -> str:
    """What ``precision`` means on ``device``, for the first line a command prints: "bf16 autocast
    (native bf16: amx_bf16)", "fp32 (no native bf16 on this CPU)", "fp32 (--precision fp32)"."""
    dtype = autocast_dtype(precision, device)
    name = {None: "fp32", torch.bfloat16: "bf16 autocast", torch.float16: "fp16 autocast"}[dtype]
    if precision != "auto":
        return f"{name} (--precision {precision})"
    if device.type != "cpu":
        return name
    flag = native_bf16()
    return f"{name} (native bf16: {flag})" if flag else f"{name} (no native bf16 on this CPU; --precision bf16 emulates it)"


def precision_note(precision: str, device: torch.device) -> str | None:
    """The note for a precision that runs emulated: ``--dtype bf16`` on a CPU without native bf16 matrix
    units computes each bf16 product in fp32 with conversions around it, several times slower than fp32
    (4x measured on the quick start), and says nothing of it by itself. None otherwise."""
    if device.type != "cpu" or precision != "bf16" or native_bf16():
        return None
    return (
        "note: --precision bf16 on this CPU is emulated (no native bf16: avx512_bf16 or amx_bf16), several times "
        "slower than fp32; --precision auto picks fp32 here"
    )


_flush_depth = 0


@contextmanager
def flush_denormals() -> Iterator[None]:
    """Treat denormal floats as zero on CPU (x86 FTZ/DAZ; GPUs do this already) while the block runs.

    Arithmetic on denormals is microcode-assisted on x86, ~100x slower: fresh models hold many
    (tiny gradients, Adam's squared-gradient averages), which made the first hundreds of CPU steps
    3-25x slower than the later ones (docs/benchmarks.md). Values below 1e-38 do not change the
    result of training. The flag is per thread: torch's OpenMP workers get it by being restarted from
    this thread (`restart_openmp_workers`). It is switched off again, workers too, when the outermost
    block ends: a caller's own float code (numpy, hypothesis, torch) keeps IEEE subnormals.
    """
    global _flush_depth
    if _flush_depth == 0 and torch.set_flush_denormal(True):
        restart_openmp_workers()
    _flush_depth += 1
    try:
        yield
    finally:
        _flush_depth -= 1
        if _flush_depth == 0 and torch.set_flush_denormal(False):
            restart_openmp_workers()


OMP_PAUSE_HARD = 2
"""`omp_pause_resource_all`'s ``omp_pause_hard`` (OpenMP 5.0): free the calling thread's worker threads."""


@functools.cache
def _openmp_runtime() -> Any:
    """torch's OpenMP runtime (GNU libgomp, LLVM libomp or Intel libiomp5) as a `ctypes.CDLL`, found among
    the libraries this process has already loaded (/proc/self/maps; nothing new is loaded), or None: not
    Linux, no OpenMP in this torch, or a runtime without OpenMP 5.0's ``omp_pause_resource_all``."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    paths = {m.group(0) for m in re.finditer(r"/\S*lib(?:gomp|omp|iomp5)[-.\w]*\.so[.\d]*", maps)}
    own = str(Path(torch.__file__).parent)  # another package's runtime (scikit-learn's libgomp) has its own pool
    for path in sorted(paths, key=lambda p: (not p.startswith(own), p)):
        try:
            lib = ctypes.CDLL(path, mode=getattr(os, "RTLD_NOLOAD", 0) | ctypes.RTLD_LOCAL)
            pause = lib.omp_pause_resource_all
        except (OSError, AttributeError):
            continue
        pause.argtypes, pause.restype = [ctypes.c_int], ctypes.c_int
        return lib
    return None


def restart_openmp_workers() -> bool:
    """Free this thread's OpenMP worker threads, so that the next parallel region starts new ones; True
    when it did.

    Why: a thread's flush-to-zero flags are its own, and a new thread copies its creator's. torch makes
    its workers early (`torch.set_num_threads` does, before any run starts), so setting the flag on this
    thread alone left every worker computing with denormals: with 2 threads half of each parallel op ran
    ~100× slower (docs/benchmarks.md, "Denormal floats"). A restart costs a thread start per worker, at
    the next parallel region; without a pool (one thread) it does nothing."""
    lib = _openmp_runtime()
    return lib is not None and lib.omp_pause_resource_all(OMP_PAUSE_HARD) == 0


T = TypeVar("T")


def _with_flushed_denormals(fn: Callable[..., T]) -> Callable[..., T]:
    """Run ``fn`` inside `flush_denormals` (one signature, one docstring: the decorated function's)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        with flush_denormals():
            return fn(*args, **kwargs)

    return wrapper


