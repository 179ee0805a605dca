"""spanbert: pre-train and fine-tune span-aware BERT encoders (SpanBERT, Joshi et al., TACL 2020)."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["BertConfig", "Encoder", "__version__"]


def __getattr__(name: str):
    # Lazy: `import spanbert` and `spanbert --help` stay fast; torch loads on first use of the model.
    if name == "Encoder":
        from spanbert.model import Encoder

        return Encoder
    if name == "BertConfig":
        from spanbert.config import BertConfig

        return BertConfig
    raise AttributeError(f"module 'spanbert' has no attribute {name!r}")
