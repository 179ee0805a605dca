"""What pre-training trained of an encoder's inputs, and the warning when fine-tuning feeds it more.

Pre-training on blocks of at most N tokens trains the first N position rows only; single-sequence
pre-training (SpanBERT §3.3, BERT-1seq) trains token type 0 only. A fine-tuning run on longer windows,
or with a second segment of type 1 (QA passages, sentence pairs), starts those inputs from their random
initialisation, and nothing in its scores says so. So `spanbert pretrain` records both numbers in the
exported config.json (`record`), `spanbert.families.load_encoder` attaches them to the encoder it loads
(`attach`), and `spanbert.trainer.train` looks at each step's batches (`watch`): the first batch that
uses a position or a token type pre-training never trained prints one warning with both numbers.
Folders from elsewhere (Google's BERT, HF checkpoints) record nothing and are not watched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from spanbert.distributed import eprint0

POSITIONS_KEY = "pretraining_max_seq_length"
"""config.json key (under ``spanbert``): the longest block pre-training trained on (positions 0 .. N-1)."""
TOKEN_TYPES_KEY = "pretraining_token_types"
"""config.json key (under ``spanbert``): how many token types pre-training used (1: type 0 only; 2: both segments)."""


@dataclass(frozen=True)
class TrainedInputs:
    positions: int
    """Positions 0 .. positions - 1 were trained."""
    token_types: int
    """Token types 0 .. token_types - 1 were trained."""


def record(max_seq_length: int, token_types: int) -> dict[str, int]:
    """The config.json keys a pre-trained export records."""
    return {POSITIONS_KEY: int(max_seq_length), TOKEN_TYPES_KEY: int(token_types)}


def of_config(raw: dict[str, Any]) -> TrainedInputs | None:
    """The record of a config.json dict (under its ``spanbert`` key, where a pre-trained export keeps what
    `spanbert pretrain` adds); None when it has none (a folder from elsewhere) or is a random-init control
    (nothing was trained: every input is new, which is what the control is for)."""
    meta = raw.get("spanbert")
    meta = meta if isinstance(meta, dict) else {}
    if meta.get("random_init") or not isinstance(meta.get(POSITIONS_KEY), int):
        return None
    types = meta.get(TOKEN_TYPES_KEY)
    return TrainedInputs(meta[POSITIONS_KEY], types if isinstance(types, int) else 1)


def attach(encoder: Any, raw: dict[str, Any]) -> None:
    """Keep the record of ``raw`` on the loaded ``encoder`` (as ``encoder.trained_inputs``)."""
    encoder.trained_inputs = of_config(raw)


def _used(batch: Any) -> tuple[int, int] | None:
    """(longest sequence, highest token type) of one collated batch, or None when it holds no BERT-style
    inputs (a two-tower batch, a batch of features)."""
    if not isinstance(batch, dict) or "input_ids" not in batch:
        return None
    ids = batch["input_ids"]
    if not hasattr(ids, "shape") or ids.dim() < 2:
        return None
    mask = batch.get("attention_mask")
    longest = int(mask.reshape(-1, mask.shape[-1]).sum(-1).max()) if mask is not None and mask.numel() else ids.shape[-1]
    types = batch.get("token_type_ids")
    highest = int(types.max()) if types is not None and types.numel() else 0
    return longest, highest


def watch(model: Any) -> Callable[[Iterable[Any]], None] | None:
    """A check of each step's micro-batches against the record of the encoder inside ``model`` (None: no
    encoder with a record). It warns once per kind, on rank 0."""
    found = next((m.trained_inputs for m in model.modules() if getattr(m, "trained_inputs", None) is not None), None)
    if found is None:
        return None
    said: set[str] = set()

    def check(batches: Iterable[Any]) -> None:
        if len(said) == 2:
            return
        for batch in batches:
            used = _used(batch)
            if used is None:
                continue
            longest, highest = used
            if longest > found.positions and "positions" not in said:
                said.add("positions")
                eprint0(
                    f"warning: this fine-tuning feeds sequences of up to {longest} tokens, but pre-training trained "
                    f"positions 0-{found.positions - 1} only (blocks of at most {found.positions} tokens): positions "
                    f"{found.positions}-{longest - 1} start from their random initialisation. Keep --max_seq_length "
                    f"at {found.positions} or less, or pre-train on longer blocks"
                )
            if highest >= found.token_types and "token types" not in said:
                said.add("token types")
                eprint0(
                    f"warning: this fine-tuning feeds token type {highest}, but pre-training trained "
                    f"{'type 0 only (single-sequence blocks)' if found.token_types == 1 else f'types 0-{found.token_types - 1}'}"
                    f": its embedding starts from its random initialisation (SpanBERT's single-sequence models are "
                    f"fine-tuned this way too; docs/fidelity.md)"
                )

    return check
