"""spanbert: pre-train and fine-tune span-aware BERT encoders (SpanBERT, Joshi et al., TACL 2020)."""

from __future__ import annotations

import os
import sys

__version__ = "0.1.0"

# Transparent huge pages for PyTorch's CPU tensors of 2 MB or more (c10's alloc_cpu reads this once, at
# the first tensor allocation, so it is set here, before spanbert imports torch): one page fault per
# 2 MB instead of 512 when a freshly mapped tensor is first written: 23-44% less system time in pre-training
# on CPU (docs/benchmarks.md, "Memory", third pass). The user's own setting wins; no effect where torch
# has already allocated a tensor, or on a kernel with THP off.
if sys.platform.startswith("linux"):
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

__all__ = ["BertConfig", "Encoder", "__version__", "pretrain"]


def __getattr__(name: str):
    # Lazy: `import spanbert` and `spanbert --help` stay fast; torch loads on first use of the model.
    if name == "Encoder":
        from spanbert.model import Encoder

        return Encoder
    if name == "BertConfig":
        from spanbert.config import BertConfig

        return BertConfig
    if name == "pretrain":  # the module, callable: spanbert.pretrain(corpus=..., system=...) (pretrain.py)
        import importlib

        return importlib.import_module("spanbert.pretrain")
    raise AttributeError(f"module 'spanbert' has no attribute {name!r}")
