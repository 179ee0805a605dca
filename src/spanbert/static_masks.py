"""Google BERT's static masking (``create_pretraining_data.py --dupe_factor``): masks stored in the corpus.

    corpus/static-<max_seq_length>/
      examples.npy          (N, 2) int64 blocks [start, end) or (N, 5) NSP pairs (a0, a1, b0, b1, label)
      dup-000.offsets       (N+1, 2) int64 start of each example's rows in .mlm and .sbo
      dup-000.mlm           (K, 2) position in the sequence, input id there ([MASK], random or unchanged)
      dup-000.sbo           (M, 4) SBO target: position, left boundary, right boundary, relative position
      dup-001.* ...         one set per duplicate

The labels are the corpus tokens at the .mlm positions, so they are not stored. meta.json's
"static_masks" lists the sets (format `spanbert.corpus.STATIC_FORMAT`) with the settings they were made
with (`static_settings`). Here: the options (`StaticMaskingConfig`), those settings, and finding and
opening a set, which `PretrainDataset(static=True)` does. The sets are written by
`spanbert.preprocess.write_static_masks`, which masks through `PretrainDataset` and so sits above it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spanbert.blocks import BLOCK_PACKINGS
from spanbert.corpus import _DAMAGED, TokenCorpus, _memmap
from spanbert.errors import DataError, SpanBertError
from spanbert.masking import SCHEMES, MaskingConfig, check_replace_probs


@dataclass
class StaticMaskingConfig:
    """Static masking at preprocess time (Google BERT's ``create_pretraining_data.py``); defaults are Google's."""

    dupe_factor: int = 0
    """Masked copies of the data made at preprocess time (Google: 10); 0 = none, the pre-training run masks on the fly (dynamic masking)."""
    max_seq_length: tuple[int, ...] = (128,)
    """Sequence length(s) to make static masks for, one set each (Google BERT: 128, and 512 for the last 10% of steps)."""
    mode: str = "nsp"
    """Examples: nsp = BERT sentence pairs (google-bert, bert, mask-*), single = SpanBERT single sequences."""
    short_seq_prob: float = 0.1
    """NSP pairs: probability of a shorter target length (Google BERT: 0.1)."""
    block_packing: str = "sentences"
    """As spanbert pretrain --block_packing: sentences or fixed."""
    masking_seed: int = 12345
    """Seed of the stored pairs and masks (Google's create_pretraining_data.py: random_seed 12345)."""
    eval_fraction: float = 0.01
    """As spanbert pretrain --eval_fraction: the last documents holding this share of the tokens are held out and get no static masks (0 = none held out, for spanbert pretrain --max_eval_blocks 0)."""
    masking: MaskingConfig = dataclasses.field(default_factory=lambda: MaskingConfig(scheme="subword"))
    """The masking (scheme and its options) applied to each duplicate; Google BERT's: subword, 15%, 80/10/10."""

    def check(self, candidate_kinds: Sequence[str] = ()) -> None:
        """Reject settings no pre-training run could use, before any work."""
        if isinstance(self.dupe_factor, bool) or not isinstance(self.dupe_factor, int) or self.dupe_factor < 0:
            raise SpanBertError(f"--dupe_factor: found {self.dupe_factor!r}, expected an integer >= 0")
        if not self.max_seq_length or any(int(n) < 8 for n in self.max_seq_length):
            raise SpanBertError(f"--max_seq_length: found {list(self.max_seq_length)}, expected lengths of at least 8")
        if self.mode not in ("nsp", "single"):
            raise SpanBertError(f"--mode: found {self.mode!r}, expected nsp or single")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise SpanBertError(f"--short_seq_prob: found {self.short_seq_prob}, expected a probability in [0, 1]")
        if self.block_packing not in BLOCK_PACKINGS:
            raise SpanBertError(f"--block_packing: found {self.block_packing!r}, expected sentences or fixed")
        if not 0.0 <= self.eval_fraction < 1.0:
            raise SpanBertError(f"--eval_fraction: found {self.eval_fraction}, expected a number in [0, 1)")
        m = self.masking
        if m.scheme not in SCHEMES:
            raise SpanBertError(f"--masking: found {m.scheme!r}, expected one of: {', '.join(SCHEMES)}")
        if not 0.0 < m.mask_prob < 1.0:
            raise SpanBertError(f"--mask_prob: found {m.mask_prob}, expected a number between 0 and 1 (exclusive)")
        check_replace_probs(m.replace_probs)
        kind = {"named_entity": "entity", "noun_phrase": "noun_phrase"}.get(m.scheme)
        if kind is not None and kind not in candidate_kinds:
            raise SpanBertError(
                f"--masking {m.scheme}: found no --candidates {kind}, expected it (the scheme needs them)"
            )


def static_settings(
    nsp: bool,
    max_seq_length: int,
    block_packing: str,
    short_seq_prob: float,
    masking: MaskingConfig,
    documents: tuple[int, int],
) -> dict[str, Any]:
    """What static masks depend on, as JSON values: a pre-training dataset may read a stored set only
    when its own settings are these (`find_static_masks` compares them key by key)."""
    return json.loads(
        json.dumps(
            {
                "mode": "nsp" if nsp else "single",
                "max_seq_length": int(max_seq_length),
                "block_packing": block_packing,
                "short_seq_prob": float(short_seq_prob) if nsp else 0.0,  # single sequences do not use it
                "documents": [int(documents[0]), int(documents[1])],
                "masking": masking.settings(),
            }
        )
    )


def _flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def static_mask_sets(corpus: TokenCorpus) -> list[dict[str, Any]]:
    """The static mask sets a corpus holds (meta.json ``static_masks``; empty for a dynamic corpus)."""
    return list(corpus.meta.get("static_masks") or [])


def find_static_masks(corpus: TokenCorpus, settings: dict[str, Any], mask_id: int | None = None) -> dict[str, Any]:
    """The corpus's static mask set for ``settings`` (`static_settings`); a `SpanBertError` naming the
    stored settings and the wanted ones when there is none, or when the set differs."""
    sets = static_mask_sets(corpus)
    if not sets:
        raise SpanBertError(
            f"{corpus.path}: found no static masks, expected some (spanbert preprocess --dupe_factor N); "
            "or mask on the fly (spanbert pretrain --static_masks off)"
        )
    length = settings["max_seq_length"]
    entry = next((e for e in sets if e.get("settings", {}).get("max_seq_length") == length), None)
    if entry is None:
        have = ", ".join(str(e.get("settings", {}).get("max_seq_length")) for e in sets)
        raise SpanBertError(
            f"{corpus.path}: found static masks for max_seq_length {have}, expected {length}; re-run spanbert "
            f"preprocess --dupe_factor N --max_seq_length {length}, or pass --static_masks off (dynamic masking)"
        )
    stored, wanted = _flat(entry["settings"]), _flat(settings)
    diff = [k for k in sorted(set(stored) | set(wanted)) if stored.get(k) != wanted.get(k)]
    if diff:
        found = ", ".join(f"{k}={stored.get(k)!r}" for k in diff)
        expected = ", ".join(f"{k}={wanted.get(k)!r}" for k in diff)
        raise SpanBertError(
            f"{corpus.path / entry['dir']}: found static masks made with {found}, expected this run's {expected}; "
            "re-run spanbert preprocess --dupe_factor with the run's settings, or pass --static_masks off "
            "(dynamic masking)"
        )
    if mask_id is not None and entry.get("mask_id") != mask_id:
        raise SpanBertError(
            f"{corpus.path / entry['dir']}: found static masks with [MASK] id {entry.get('mask_id')}, expected the "
            f"tokenizer's {mask_id}; use the corpus's own tokenizer"
        )
    return entry


def load_examples(root: Path, entry: dict[str, Any]) -> np.ndarray:
    """The stored examples of the static mask set ``entry`` (a row of the corpus's index) under ``root``,
    memory-mapped and checked (`spanbert.dataset.PretrainDataset` reads its training examples from here)."""
    path = root / entry["dir"] / "examples.npy"
    width = 5 if entry["settings"]["mode"] == "nsp" else 2
    try:
        examples = np.load(path, mmap_mode="r")
    except (OSError, ValueError, EOFError) as e:
        raise DataError(path, f"cannot read the stored examples ({e}): {_DAMAGED}") from None
    if examples.shape != (int(entry["num_examples"]), width) or examples.dtype != np.int64:
        raise DataError(
            path,
            f"found {examples.dtype} {examples.shape}, expected int64 ({entry['num_examples']}, {width}): {_DAMAGED}",
        )
    return np.asarray(examples)


def open_duplicate(root: Path, entry: dict[str, Any], d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Duplicate ``d`` of the static mask set ``entry``: its three arrays, memory-mapped and checked."""
    base = root / entry["dir"] / f"dup-{d:03d}"
    dtype = np.dtype(entry["dtype"])
    n = int(entry["num_examples"])
    k, m = (int(x) for x in entry["counts"][d])
    offsets = _memmap(Path(f"{base}.offsets"), np.int64, 2 * (n + 1)).reshape(n + 1, 2)
    if n and (offsets[-1, 0] != k or offsets[-1, 1] != m):
        raise DataError(
            Path(f"{base}.offsets"), f"found totals {offsets[-1].tolist()}, expected [{k}, {m}]: {_DAMAGED}"
        )
    mlm = _memmap(Path(f"{base}.mlm"), dtype, 2 * k).reshape(k, 2)
    sbo = _memmap(Path(f"{base}.sbo"), dtype, 4 * m).reshape(m, 4)
    return np.asarray(offsets), np.asarray(mlm), np.asarray(sbo)
