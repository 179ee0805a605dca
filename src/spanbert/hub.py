"""Hugging Face hub names as model folders: ``--model bert-base-cased`` or ``SpanBERT/spanbert-base-cased``.

`resolve_model` is where every command's ``--model`` becomes a local folder: the loaders
(`spanbert.families`, `spanbert.model`'s checkpoint readers, `spanbert.tokenization.load_tokenizer_for`)
call it first. A path that exists is returned as it is; a name that is no local path and reads as a hub
id is looked up with `huggingface_hub` (an optional dependency, imported only then): downloaded when
online, taken from its cache when offline (``HF_HUB_OFFLINE=1``). Where that cannot work the error says
which of the three it is (not installed, offline and not cached, no such hub model) and what to do.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

from spanbert.errors import SpanBertError

# ``name`` or ``org/name`` as the hub spells repository ids
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}(/[\w.-]{1,96})?$")
# What a model folder needs; a repository's other weight formats (TensorFlow, Flax, Rust, ONNX) are left.
_FILES = ["*.json", "*.txt", "*.model"]


def looks_like_hub_id(name: str) -> bool:
    """True for ``bert-base-cased`` or ``org/name`` that is not a local path: no such file, and not
    under a folder that exists here (``runs/squad`` with ``runs/`` present is a mistyped local path)."""
    if not _HUB_ID.match(name) or name.endswith((".json", ".txt")) or ".." in name:
        return False
    head = name.split("/")[0]
    return not (Path(name).exists() or ("/" in name and Path(head).is_dir()))


def resolve_model(path: str | os.PathLike) -> Path:
    """A local folder for ``path``: ``path`` itself unless it is a hub id that is no local path, then the
    hub snapshot's folder (cache directory: ``HF_HUB_CACHE``, else huggingface_hub's default)."""
    name = os.fspath(path)
    if not looks_like_hub_id(name):
        return Path(path)
    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")
    return _snapshot(name, os.environ.get("HF_HUB_CACHE") or None, offline)


@functools.lru_cache(maxsize=32)
def _snapshot(name: str, cache_dir: str | None, offline: bool) -> Path:
    """The snapshot folder of hub model ``name``, once per process (each loader calls `resolve_model`)."""
    try:
        import huggingface_hub
        from huggingface_hub import snapshot_download
        from huggingface_hub.utils import LocalEntryNotFoundError, RepositoryNotFoundError  # 0.23 to 2.x
    except ImportError:
        raise SpanBertError(
            f"{name}: found no such model folder, and huggingface_hub is not installed to read it as a hub "
            "model; expected a local folder, or `pip install huggingface_hub` to use hub names"
        ) from None
    where = cache_dir or huggingface_hub.constants.HF_HUB_CACHE

    def fetch(patterns: list[str]) -> Path:
        return Path(snapshot_download(name, allow_patterns=patterns, cache_dir=cache_dir, local_files_only=offline))

    try:
        # safetensors first; a repository that has none (older uploads) gives its PyTorch .bin instead
        folder = fetch([*_FILES, "*.safetensors"])
        if not any(folder.glob("*.safetensors")):
            folder = fetch([*_FILES, "*.bin"])
    except RepositoryNotFoundError:
        raise SpanBertError(
            f"{name}: found no such model folder, and no hub model of that name; expected a local folder or a hub "
            "name such as bert-base-cased or SpanBERT/spanbert-base-cased (a private model needs `hf auth login`)"
        ) from None
    except LocalEntryNotFoundError as e:
        if offline:
            why, fix = "downloading is off (HF_HUB_OFFLINE=1)", "run this command once without HF_HUB_OFFLINE=1"
        else:
            cause = (str(e).strip().splitlines() or [type(e).__name__])[0][:100]
            why, fix = f"the hub could not be reached ({cause})", "check the network connection"
        raise SpanBertError(
            f"{name}: found no such model folder and no copy of hub model {name} in the cache {where}, and {why}; "
            f"expected a local folder, or the model in the cache: {fix}, or `hf download {name}` where there is a "
            "network (with the same HF_HUB_CACHE)"
        ) from None
    except OSError as e:  # a network failure huggingface_hub did not turn into one of the above
        raise SpanBertError(f"{name}: found no such model folder, and fetching hub model {name} failed: {e}") from None
    return folder
