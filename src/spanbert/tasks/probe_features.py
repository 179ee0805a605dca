"""The frozen encoder's features of a probe's data, computed once per encoder and data and cached on disk.

Every context (`probe_data.Context`) is one encoder input: its words split into sub-words, cut to the window
of ``max_seq_length`` tokens that keeps the most targets when longer, framed as the family frames a text
(``cls a sep``). A target whose span falls outside the window is cut off: counted, kept in the store
with no rows (a dev or test target scores as a miss, a training one is left out), never dropped
silently. The encoder runs once (`extract`) and the store keeps **all** ``num_layers + 1`` hidden states
of the sub-words the targets' spans cover (float16 by default): every probe run on them, at every learning
rate, with all layers or with layer 0 only, reads the same store and never runs the encoder.

A store is a folder ``CACHE/<name>-<key>/`` (`cached_features`): ``states.npy`` (rows, L + 1, H),
``spans.npy`` (targets, spans, 2) [first row, end row) of each span (-1: cut off), ``context.npy`` and
``meta.json``. The key hashes the encoder folder's files (config, weights, vocabulary:
`ner_features.encoder_fingerprint`), the tokenizer, the sequence length, the dtype and the contexts'
words and spans, so an encoder changed in place or other data get a new folder. It is written atomically
by one process (rank 0 under torchrun; the others wait), so a reader never sees half a store.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from spanbert import _aliases, threads
from spanbert.distributed import print0, resolve_device
from spanbert.tasks.ner_features import encoder_fingerprint
from spanbert.tasks.probe_data import Context
from spanbert.tasks.ranks import write_once
from spanbert.tasks.task_folders import load_encoder, load_tokenizer_for
from spanbert.utils import atomic_dir, progress_bar

CACHE_VERSION = 1
"""Part of the key: bump it when the layout or the contents of a store change."""


def default_cache() -> Path:
    """Where stores go when no ``--features_cache`` is named: ``$XDG_CACHE_HOME/spanbert/probe_features``
    (``~/.cache/...`` without it), shared by every run of the user, as the key makes sharing safe."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "spanbert" / "probe_features"


@dataclass
class Window:
    """One context as the encoder reads it."""

    input_ids: np.ndarray
    """(T,) framed token ids."""
    positions: np.ndarray
    """(P,) the input positions whose states are kept (the sub-words of the kept targets' spans), sorted."""
    spans: list[list[tuple[int, int]] | None]
    """Per target: per span [first, end) index into ``positions``; None when the window cut it off."""
    cut: bool
    """The context's sub-words did not fit ``max_seq_length``."""


def window(context: Context, tokenizer: Any, max_seq_length: int) -> Window:
    """The encoder input of ``context``: every sub-word when they fit ``max_seq_length`` with the frame,
    else the window of that many that keeps the most targets whole (of the windows centred on one target,
    the first best), clamped to the text. A span is kept when all its sub-words are inside."""
    enc = tokenizer.encode_words(context.words)
    ids, word_ids = np.asarray(enc.ids, dtype=np.int64), np.asarray(enc.word_ids, dtype=np.int64)
    n_words = len(context.words)
    first = np.searchsorted(word_ids, np.arange(n_words), side="left")  # word -> its first sub-word
    end = np.searchsorted(word_ids, np.arange(n_words), side="right")  # word -> after its last
    token_spans = [[(int(first[a]), int(end[b])) for a, b in t.spans] for t in context.targets]
    budget = max_seq_length - 2

    def inside(spans: list[tuple[int, int]], lo: int) -> bool:
        return all(lo <= s and e <= lo + budget for s, e in spans)

    lo = 0
    if len(ids) > budget:
        starts = [min(max((min(s for s, _ in sp) + max(e for _, e in sp)) // 2 - budget // 2, 0), len(ids) - budget)
                  for sp in token_spans]  # fmt: skip
        lo = max(starts, key=lambda x: sum(inside(sp, x) for sp in token_spans))  # the first of the best
    hi = min(len(ids), lo + budget)
    kept = [spans if inside(spans, lo) else None for spans in token_spans]
    positions = sorted({1 + p - lo for spans in kept if spans for s, e in spans for p in range(s, e)})
    row = {p: i for i, p in enumerate(positions)}
    rows = [[(row[1 + s - lo], row[1 + e - 1 - lo] + 1) for s, e in spans] if spans else None for spans in kept]
    input_ids = np.concatenate([[tokenizer.cls_id], ids[lo:hi], [tokenizer.sep_id]]).astype(np.int64)
    return Window(input_ids, np.asarray(positions, dtype=np.int64), rows, len(ids) > budget)


def extract(
    encoder: nn.Module, pad_id: int, windows: Sequence[Window], out: np.ndarray, row0: Sequence[int],
    batch_size: int = 32, progress: bool = True,
) -> None:  # fmt: skip
    """Run ``encoder`` once over every window (batches of similar length, little padding) and write the
    ``num_layers + 1`` states of its kept positions into ``out[row0[i] : row0[i] + P_i]`` ((rows, L + 1, H))."""
    device = next(encoder.parameters()).device
    order = sorted(range(len(windows)), key=lambda i: len(windows[i].input_ids))
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    encoder.eval()
    with torch.no_grad():
        for batch in progress_bar(
            batches, desc="probe features", disable=not progress, leave=False, dynamic_ncols=True
        ):
            threads.tick()
            T = max(len(windows[i].input_ids) for i in batch)
            ids = torch.full((len(batch), T), pad_id, dtype=torch.long)  # (B, T)
            mask = torch.zeros((len(batch), T), dtype=torch.long)
            for j, i in enumerate(batch):
                n = len(windows[i].input_ids)
                ids[j, :n] = torch.from_numpy(windows[i].input_ids)
                mask[j, :n] = 1
            states = encoder(
                ids.to(device), attention_mask=mask.to(device), output_hidden_states=True
            )  # L + 1 x (B, T, H)
            stacked = torch.stack(tuple(states), 2).float().cpu().numpy()  # (B, T, L + 1, H)
            for j, i in enumerate(batch):
                w = windows[i]
                out[row0[i] : row0[i] + len(w.positions)] = stacked[j, w.positions]


@dataclass
class ProbeFeatures:
    """A store opened read-only (or built in memory): the states of every kept sub-word and where each
    target's spans are in them."""

    states: np.ndarray
    """(rows, L + 1, H): hidden state l of each kept sub-word (l = 0: the embeddings' output)."""
    spans: np.ndarray
    """(targets, K, 2) [first row, end row) of each span of each target, in the contexts' order; -1 when cut off."""
    context: np.ndarray
    """(targets,) the index of each target's context."""
    meta: dict[str, Any]
    folder: Path | None = None

    @property
    def cut_off(self) -> np.ndarray:
        """(targets,) True for a target the window cut off."""
        return self.spans[:, 0, 0] < 0

    @property
    def num_layers(self) -> int:
        return self.states.shape[1] - 1


def _layout(windows: Sequence[Window], num_spans: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first row of each window, spans (targets, K, 2) in global rows, context of each target)."""
    row0 = np.cumsum([0] + [len(w.positions) for w in windows])
    spans, context = [], []
    for c, w in enumerate(windows):
        for rows in w.spans:
            spans.append([[-1, -1]] * num_spans if rows is None else [[row0[c] + a, row0[c] + b] for a, b in rows])
            context.append(c)
    return row0, np.asarray(spans, dtype=np.int64).reshape(-1, num_spans, 2), np.asarray(context, dtype=np.int64)


def features_key(model_dir: str | Path, contexts: Sequence[Context], tokenizer_dir: str | Path | None,
                 max_seq_length: int, dtype: str) -> tuple[str, dict[str, Any]]:  # fmt: skip
    """(key, the fields it hashes but the contexts): what makes two stores the same."""
    data = hashlib.sha256(json.dumps([[c.words, [t.spans for t in c.targets]] for c in contexts]).encode())
    fields = {
        "version": CACHE_VERSION,
        "encoder": encoder_fingerprint(model_dir),
        "tokenizer": encoder_fingerprint(tokenizer_dir) if tokenizer_dir and Path(tokenizer_dir).is_dir() else None,
        "max_seq_length": max_seq_length,
        "dtype": dtype,
        "data": data.hexdigest(),
    }
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16], fields


def open_store(folder: str | Path) -> ProbeFeatures:
    """A store `cached_features` wrote (memory-mapped: the states are read when used)."""
    folder = Path(folder)
    meta = json.loads((folder / "meta.json").read_text())
    return ProbeFeatures(np.load(folder / "states.npy", mmap_mode="r"), np.load(folder / "spans.npy"),
                         np.load(folder / "context.npy"), meta, folder)  # fmt: skip


def cached_features(
    model_dir: str | Path,
    contexts: Sequence[Context],
    name: str,
    cache_dir: str | Path,
    num_spans: int,
    tokenizer_dir: str | Path | None = None,
    max_seq_length: int = 128,
    dtype: str = "float16",
    batch_size: int = 32,
    device: str = "cpu",
    progress: bool = True,
) -> ProbeFeatures:
    """The features of ``contexts`` under the encoder in ``model_dir``: the store in ``cache_dir`` with the
    same key when there is one (the encoder is not loaded), else extracted once and written atomically
    (rank 0; the others wait). ``name`` starts the folder's name (``entities-train.txt``)."""
    key, fields = features_key(model_dir, contexts, tokenizer_dir, max_seq_length, dtype)
    folder = Path(cache_dir) / f"{name}-{key}"

    def build() -> None:
        if (folder / "meta.json").is_file():
            print0(f"{name}: the encoder's features are cached in {folder} (the encoder is not run)")
            return
        t0 = time.perf_counter()
        tokenizer = load_tokenizer_for(model_dir, tokenizer_dir)
        encoder = load_encoder(model_dir).to(resolve_device(device))
        windows = [window(c, tokenizer, max_seq_length) for c in contexts]
        row0, spans, context = _layout(windows, num_spans)
        L, H = encoder.num_layers, encoder.hidden_size
        with atomic_dir(folder) as tmp:
            states = np.lib.format.open_memmap(
                tmp / "states.npy", mode="w+", dtype=dtype, shape=(int(row0[-1]), L + 1, H)
            )  # (rows, L + 1, H); fmt: skip
            extract(encoder, tokenizer.pad_id, windows, states, row0, batch_size, progress)
            states.flush()
            del states
            np.save(tmp / "spans.npy", spans)
            np.save(tmp / "context.npy", context)
            cut = int((spans[:, 0, 0] < 0).sum())
            meta = {**fields, "model_dir": str(Path(model_dir).resolve()), "num_layers": L, "hidden_size": H,
                    "contexts": len(contexts), "targets": len(spans), "rows": int(row0[-1]), "cut_off": cut,
                    "windowed": sum(w.cut for w in windows), "seconds": round(time.perf_counter() - t0, 2)}  # fmt: skip
            (tmp / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        print0(f"{name}: encoded {len(contexts):,} texts ({len(spans):,} targets) in {meta['seconds']:.1f} s; "
               f"cached in {folder}")  # fmt: skip

    write_once(build)
    return open_store(folder)

__getattr__ = _aliases.getter(__name__)  # the old spellings of names that moved (`spanbert._aliases`)
