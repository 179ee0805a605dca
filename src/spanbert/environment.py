"""The process environment a command starts with, read before torch (and its OpenMP runtime) is loaded.

`OMP_NUM_THREADS` is read by libgomp once, as torch's library loads: a value it cannot use (``garbage``,
``0``) makes it print its own complaint and run with its default, while spanbert would have taken the count
as fixed. The CLI checks it first (`check_omp_environment`), before any command imports torch.
"""

from __future__ import annotations

import os


def omp_threads_setting() -> str | None:
    """`OMP_NUM_THREADS` when it is a setting OpenMP accepts (a whole number >= 1, or a comma-separated
    list of them, one per nesting level), else None: unset, empty, or a value libgomp would reject."""
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    parts = value.split(",") if value else []
    return value if parts and all(p.strip().isdigit() and int(p) >= 1 for p in parts) else None


def check_omp_environment() -> str | None:
    """An `OMP_NUM_THREADS` that is no thread count is dropped from this process's environment (so that
    libgomp, loaded later with torch, neither complains nor the count counts as fixed); returns the note
    that says so, or None when there was nothing to drop."""
    value = os.environ.get("OMP_NUM_THREADS")
    if value is None or omp_threads_setting() is not None:
        return None
    del os.environ["OMP_NUM_THREADS"]
    return (
        f"note: OMP_NUM_THREADS={value!r} is not a number of threads (expected a whole number >= 1); ignoring it: "
        "the thread count follows the free cores (--threads N fixes it)"
    )
