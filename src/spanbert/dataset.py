"""The pre-training dataset: the blocks or NSP pairs of a `TokenCorpus`, each masked when it is read.

`PretrainDataset` cuts the corpus into blocks (`spanbert.blocks`) and masks each block with
`spanbert.masking.mask_block`, reproducibly from (seed, epoch, index) (`example_generator`), or reads
the masks stored at preprocess time (`spanbert.static_masks`; epoch e reads copy e mod dupe_factor).
`spanbert.collate` batches its items.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import threading
from pathlib import Path
from typing import Any, Literal

import numpy as np

from spanbert.block_index import ExampleIndex, IndexSpec, example_index
from spanbert.blocks import BLOCK_PACKINGS
from spanbert.corpus import TokenCorpus
from spanbert.errors import SpanBertError
from spanbert.masking import IGNORE_INDEX, SCHEMES, MaskingConfig, MaskResult, UnigramSampler, mask_block
from spanbert.static_masks import find_static_masks, load_examples, open_duplicate, static_settings
from spanbert.tokenization import Tokenizer

_TRUE = np.ones(1, dtype=bool)


def _example_state(seed: int, epoch: int, index: int) -> dict[str, Any]:
    """PCG64 state whose 128-bit state and increment are a BLAKE2b hash of (seed, epoch, index)."""
    h = hashlib.blake2b(f"{seed},{epoch},{int(index)}".encode(), digest_size=32, person=b"spanbert-mask").digest()
    return {
        "bit_generator": "PCG64",
        "state": {"state": int.from_bytes(h[:16], "little"), "inc": int.from_bytes(h[16:], "little") | 1},
        "has_uint32": 0,
        "uinteger": 0,
    }


def example_generator(seed: int, epoch: int, index: int) -> np.random.Generator:
    """A fresh generator seeded from (seed, epoch, index) alone: the one `PretrainDataset` masks
    example ``index`` of ``epoch`` with, and the one `write_static_masks` masks example ``index`` of
    duplicate ``epoch`` with (the static masks' documented seed)."""
    gen = np.random.Generator(np.random.PCG64(0))
    gen.bit_generator.state = _example_state(seed, epoch, index)
    return gen


class PretrainDataset:
    """Map-style dataset of masked pre-training examples (numpy dicts; `collate_pretrain` batches them).

    Example i of epoch e is masked with a generator seeded from (seed, e, i) alone (`example_rng`), so
    masks are the same whatever the worker count, the batch or a resume, and differ between epochs
    (dynamic masking, §4.2 (a)). With ``static=True`` example i of epoch e is read from the masks
    stored in the corpus (copy e mod dupe_factor), equally a pure function of (i, e).
    """

    def __init__(
        self,
        corpus: TokenCorpus | str | os.PathLike,
        tokenizer: Tokenizer | None = None,
        max_seq_length: int = 512,
        *,
        nsp: bool = False,
        mode: Literal["single", "nsp"] | None = None,
        scheme: str | None = None,
        short_seq_prob: float = 0.0,
        seed: int = 0,
        masking: MaskingConfig | None = None,
        mask_ratio: float | None = None,
        max_span_length: int | None = None,
        documents: tuple[int, int] | None = None,
        block_packing: Literal["sentences", "fixed"] = "sentences",
        static: bool = False,
        index_cache: bool = True,
        **masking_overrides: Any,
    ):
        """``corpus``: a `preprocess` output (path or `TokenCorpus`). ``tokenizer``: defaults to the corpus's
        own. ``mode="nsp"`` (or ``nsp=True``): BERT sentence pairs; ``"single"``: SpanBERT blocks.
        Masking: a `MaskingConfig`, and/or its fields as keywords (``scheme``, ``mask_ratio`` = mask_prob,
        ``max_span_length`` = max_span_len, ``geometric_p``, ``anchor``, ...). ``documents=(lo, hi)``:
        use only documents lo..hi-1 — blocks, NSP pairs and their "random next" segments all come from
        them, so a held-out split by documents (`held_out_documents`) shares no text with training.
        ``block_packing="sentences"`` (default): single-sequence blocks are whole lines packed up to
        ``max_seq_length - 2`` (`sentence_blocks`) and NSP segments end at word boundaries; ``"fixed"``:
        the blocks of versions before 2026-11-23, each document cut every ``max_seq_length - 2`` tokens
        (`single_segment_blocks`), and NSP segments cut token by token as Google's code.
        ``static=True``: read the masks `spanbert preprocess --dupe_factor` stored in the corpus for
        ``max_seq_length`` (Google BERT's static masking; epoch e reads duplicate e mod dupe_factor) and
        its stored blocks or NSP pairs; ``seed`` then plays no part (the masks were seeded at preprocess
        time). The stored settings must equal this dataset's (`static_settings`), else a
        `SpanBertError` names both. ``index_cache=False``: compute the blocks or pairs in memory instead of
        reading (or writing) the corpus's cached index (`spanbert.block_index`)."""
        self.corpus = corpus if isinstance(corpus, TokenCorpus) else TokenCorpus(corpus)
        n_docs = self.corpus.num_docs
        lo, hi = documents if documents is not None else (0, n_docs)
        if not 0 <= lo <= hi <= n_docs:
            raise SpanBertError(f"documents=({lo}, {hi}) is outside the corpus's {n_docs} documents")
        self.documents = (int(lo), int(hi))
        self._index: ExampleIndex | None = None
        tok = tokenizer if tokenizer is not None else self.corpus.tokenizer
        if tok.vocab_size != self.corpus.vocab_size:
            raise SpanBertError(
                f"the tokenizer has {tok.vocab_size} tokens but {self.corpus.path} was preprocessed with "
                f"{self.corpus.vocab_size}; use the corpus's own tokenizer ({self.corpus.path / 'tokenizer'})"
            )
        if mode is not None:
            if mode not in ("single", "nsp"):
                raise SpanBertError(f"mode must be 'single' or 'nsp', not {mode!r}")
            nsp = mode == "nsp"
        if max_seq_length < 5:
            raise SpanBertError(f"max_seq_length={max_seq_length} is too short; expected at least 5")
        if block_packing not in BLOCK_PACKINGS:
            raise SpanBertError(
                f"block_packing: found {block_packing!r}, expected one of: {', '.join(BLOCK_PACKINGS)}"
            )
        self.block_packing = block_packing
        self.max_seq_length = max_seq_length
        self.nsp = nsp
        self.seed = seed
        cfg = masking or MaskingConfig()
        if scheme is not None:
            masking_overrides["scheme"] = scheme
        if mask_ratio is not None:
            masking_overrides["mask_prob"] = mask_ratio
        if max_span_length is not None:
            masking_overrides["max_span_len"] = max_span_length
        if masking_overrides:

            valid = {f.name for f in dataclasses.fields(MaskingConfig)}
            unknown = sorted(set(masking_overrides) - valid)
            if unknown:
                raise SpanBertError(f"unknown masking option(s) {unknown}; valid: {', '.join(sorted(valid))}")
            cfg = dataclasses.replace(cfg, **masking_overrides)
        if cfg.scheme not in SCHEMES:
            raise SpanBertError(f"unknown masking scheme {cfg.scheme!r}; choose from: {', '.join(SCHEMES)}")
        self.masking = cfg
        self._kind = {"named_entity": "entity", "noun_phrase": "noun_phrase"}.get(cfg.scheme)
        if self._kind is not None and self._kind not in self.corpus.candidate_spans:
            raise SpanBertError(
                f"the {cfg.scheme} scheme needs candidate spans: re-run spanbert preprocess with --candidates {self._kind}"
            )
        self.cls_id, self.sep_id, self.pad_id, self.mask_id = tok.cls_id, tok.sep_id, tok.pad_id, tok.mask_id
        self._cls, self._sep = np.array([self.cls_id], dtype=np.int64), np.array([self.sep_id], dtype=np.int64)
        self.special_ids = tuple(int(i) for i in tok.special_ids())
        counts = self.corpus.unigram_counts() if cfg.random_token == "unigram" else np.ones(self.corpus.vocab_size)
        self.sampler = UnigramSampler(counts, self.special_ids)  # special tokens never drawn
        # The epoch lives in shared memory so that persistent DataLoader workers see `set_epoch` too.
        # torch is imported here, not above: `spanbert preprocess` imports this module, and its --help
        # (and a run without static masks) loads no torch.
        import torch

        self._epoch = torch.zeros(1, dtype=torch.long).share_memory_()
        self.static: dict[str, Any] | None = None
        if static:
            settings = static_settings(nsp, max_seq_length, block_packing, short_seq_prob, cfg, self.documents)
            self.static = find_static_masks(self.corpus, settings, self.mask_id)
            examples = load_examples(self.corpus.path, self.static)
            self.pairs, self.blocks = (examples, None) if nsp else (None, examples)
        else:
            # computed once per corpus and settings, cached in the corpus folder, memory-mapped here
            # (`spanbert.block_index`; the same blocks and pairs as `blocks.sentence_blocks`,
            # `single_segment_blocks` and `nsp_pairs`)
            spec = IndexSpec("nsp" if nsp else "single", max_seq_length, block_packing, self.documents,
                             seed=seed if nsp else 0, short_seq_prob=short_seq_prob if nsp else 0.0)  # fmt: skip
            self._index = example_index(self.corpus, spec, cache=index_cache)
            self.pairs, self.blocks = (self._index.rows, None) if nsp else (None, self._index.rows)  # (N, 5) | (N, 2)

    @property
    def doc_bounds(self) -> np.ndarray:
        """(D', 2) global [start, end) of the documents this dataset draws from (read from the corpus)."""
        lo, hi = self.documents
        return self.corpus.doc_bounds[lo:hi]

    @property
    def plan_cache(self) -> Path | None:
        """Where the trainer keeps this dataset's epoch orders (`batch_plan.epoch_order`): its index's folder,
        beside the blocks they order (None: not indexed, computed in memory)."""
        return self._index.path if self._index is not None else None

    def set_epoch(self, epoch: int) -> None:
        """Masks of the next epoch (dynamic masking, RoBERTa/SpanBERT §4.2 (a))."""
        self._epoch[0] = int(epoch)

    @property
    def epoch(self) -> int:
        view = self.__dict__.get("_epoch_view")
        if view is None:  # a numpy view of the shared tensor: reading it costs nanoseconds, not microseconds
            view = self._epoch_view = self._epoch.numpy()
        return int(view[0])

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_epoch_view", None)  # rebuilt from the shared tensor after unpickling
        state.pop("_local", None)  # per-thread generators, rebuilt on demand
        state.pop("_static_cache", None)  # memory maps of the static masks, reopened on demand
        index = state.get("_index")
        if index is not None and index.path is not None:  # the index's files, not a copy of them
            state["_index"] = index.path
            state.pop("blocks" if self.blocks is not None else "pairs")
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if isinstance(state.get("_index"), Path):
            self._index = ExampleIndex.open(state["_index"])
            if self.nsp:
                self.pairs = self._index.rows
            else:
                self.blocks = self._index.rows

    def example_rng(self, index: int, epoch: int | None = None) -> np.random.Generator:
        """The generator example ``index`` of ``epoch`` (default: the current one) is masked with.

        A PCG64 whose 128-bit state and increment are a BLAKE2b hash of (seed, epoch, index): a pure
        function of the three, as ``default_rng([seed, epoch, index])`` would be, at a fifth of the cost
        (that call hashes with a SeedSequence and builds a new bit generator: ~20 µs, as much as
        masking half a block). The generator is reused per thread (re-seeded by each call), so the
        one returned is only valid until this thread's next call.
        """
        epoch = self.epoch if epoch is None else int(epoch)
        local = self.__dict__.get("_local")
        if local is None:
            local = self._local = threading.local()
        gen = getattr(local, "generator", None)
        if gen is None:
            gen = local.generator = np.random.Generator(np.random.PCG64(0))
        gen.bit_generator.state = _example_state(self.seed, epoch, index)
        return gen

    def __len__(self) -> int:
        return len(self.pairs) if self.nsp else len(self.blocks)

    def lengths(self) -> np.ndarray:
        """(N,) tokens of each example, special tokens included (the same in every epoch: blocks and pairs
        are fixed, only the masks change); the trainer's token-budget batching reads them. Integers: the
        index's read-only memory map (uint16 up to 65,535 tokens), or int64 for stored static masks."""
        if self._index is not None:
            return self._index.lengths
        if self.nsp:
            p = self.pairs.astype(np.int64)
            return (p[:, 1] - p[:, 0]) + (p[:, 3] - p[:, 2]) + 3  # [CLS] A [SEP] B [SEP]
        b = self.blocks.astype(np.int64)
        return b[:, 1] - b[:, 0] + 2  # [CLS] block [SEP]

    def sequence(self, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, int | None]:
        """Example ``index`` before masking: (ids (T,) int64 with [CLS]/[SEP], word starts (T,) bool,
        token_type_ids (T,) int64, candidate spans (C, 2) or None, NSP label or None)."""
        cand = None
        label = None
        if self.nsp:
            a0, a1, b0, b1, label = (int(x) for x in self.pairs[index])
            a_ids, a_ws = self.corpus.tokens(a0, a1)
            b_ids, b_ws = self.corpus.tokens(b0, b1)
            ids = np.concatenate([[self.cls_id], a_ids, [self.sep_id], b_ids, [self.sep_id]])  # (T,)
            ws = np.concatenate([[True], a_ws, [True], b_ws, [True]])
            token_type_ids = np.zeros(len(ids), dtype=np.int64)
            token_type_ids[len(a_ids) + 2 :] = 1
            if self._kind is not None:
                ca = self.corpus.candidates(self._kind, a0, a1) + 1
                cb = self.corpus.candidates(self._kind, b0, b1) + len(a_ids) + 2
                cand = np.concatenate([ca, cb])
        else:
            start, end = self.blocks[index].tolist()
            body, body_ws = self.corpus.tokens(start, end)
            ids = np.concatenate((self._cls, body, self._sep))  # (T,) [CLS] body [SEP]
            ws = np.concatenate((_TRUE, body_ws, _TRUE))  # (T,)
            token_type_ids = np.zeros(len(ids), dtype=np.int64)
            if self._kind is not None:
                cand = self.corpus.candidates(self._kind, start, end) + 1
        return ids, ws, token_type_ids, cand, label

    def mask(self, ids: np.ndarray, ws: np.ndarray, cand: np.ndarray | None, rng: np.random.Generator) -> MaskResult:
        """`mask_block` with this dataset's masking settings."""
        m = self.masking
        return mask_block(
            ids,
            ws,
            m.scheme,
            rng,
            mask_id=self.mask_id,
            special_ids=self.special_ids,
            random_tokens=self.sampler,
            mask_prob=m.mask_prob,
            replace_probs=m.replace_probs,
            geometric_p=m.geometric_p,
            max_span_len=m.max_span_len,
            anchor=m.anchor,
            stop_mid_word=m.stop_mid_word,
            merge_adjacent=m.merge_adjacent,
            max_sbo_targets=m.max_sbo_targets,
            sbo_skip_edge=m.sbo_skip_edge,
            candidates=cand,
            candidate_fraction=m.candidate_fraction,
        )

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} examples")
        ids, ws, token_type_ids, cand, label = self.sequence(index)
        if self.static is not None:
            item = self._static_item(index, ids)
        else:
            r = self.mask(ids, ws, cand, self.example_rng(index))
            item = {
                "input_ids": r.input_ids,
                "labels": r.labels,
                "sbo_positions": r.sbo_positions,
                "sbo_left": r.sbo_left,
                "sbo_right": r.sbo_right,
                "sbo_rel": r.sbo_rel,
            }
        item["token_type_ids"] = token_type_ids
        if self.nsp:
            item["next_sentence_label"] = np.int64(label)
        return item

    @property
    def duplicate(self) -> int | None:
        """The static duplicate the current epoch reads (epoch mod dupe_factor); None when masking is dynamic."""
        return None if self.static is None else self.epoch % int(self.static["dupe_factor"])

    def _static_item(self, index: int, ids: np.ndarray) -> dict[str, np.ndarray]:
        """Example ``index`` with the stored masks of duplicate epoch mod dupe_factor (Google's data is
        reused across epochs: epoch e sees the masks of duplicate e mod dupe_factor)."""
        offsets, mlm, sbo = self._static_arrays(self.epoch % int(self.static["dupe_factor"]))
        m0, s0 = offsets[index].tolist()
        m1, s1 = offsets[index + 1].tolist()
        targets = mlm[m0:m1].astype(np.int64)  # (K, 2) position, input id there
        pos = targets[:, 0]
        ids = ids.astype(np.int64)
        input_ids = ids.copy()  # (T,)
        input_ids[pos] = targets[:, 1]
        labels = np.full(len(ids), IGNORE_INDEX, dtype=np.int64)  # (T,)
        labels[pos] = ids[pos]
        s = sbo[s0:s1].astype(np.int64)  # (M, 4) position, left, right, rel
        return {
            "input_ids": input_ids,
            "labels": labels,
            "sbo_positions": s[:, 0].copy(),
            "sbo_left": s[:, 1].copy(),
            "sbo_right": s[:, 2].copy(),
            "sbo_rel": s[:, 3].copy(),
        }

    def _static_arrays(self, duplicate: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(offsets (N+1, 2), mlm (K, 2), sbo (M, 4)) of one stored duplicate, memory-mapped on first use
        (per process: the maps are not pickled into DataLoader workers)."""
        cache = self.__dict__.get("_static_cache")
        if cache is None:
            cache = self._static_cache = {}
        arrays = cache.get(duplicate)
        if arrays is None:
            arrays = cache[duplicate] = open_duplicate(self.corpus.path, self.static, duplicate)
        return arrays
