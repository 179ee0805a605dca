"""From documents to model inputs: segments of sub-tokens (`featurize`, `segment_length`), candidate spans,
the training dataset of segment runs and the batch of one document."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from spanbert.errors import SpanBertError
from spanbert.tasks.coref.data import GENRES, NO_SPEAKER, CorefDocument

# =============================================================================================
# Segments and features


@dataclass
class CorefFeatures:
    """A document as sub-tokens, cut into independently encoded segments (Joshi et al. 2019)."""

    doc_id: str
    segments: list[np.ndarray]
    """Sub-token ids of each segment, without [CLS]/[SEP]; they cover the document in order."""
    sentence_map: np.ndarray
    """(N,) sentence index of each sub-token."""
    word_map: np.ndarray
    """(N,) document word index of each sub-token."""
    speaker_ids: np.ndarray
    """(N,) speaker index (per document) of each sub-token."""
    genre: int
    """Index into `GENRES`."""
    gold_starts: np.ndarray
    """(M,) first sub-token of each gold mention."""
    gold_ends: np.ndarray
    """(M,) last sub-token of each gold mention (inclusive)."""
    gold_cluster_ids: np.ndarray
    """(M,) entity of each gold mention, 1-based (0 is "no entity")."""

    @property
    def num_subtokens(self) -> int:
        return len(self.sentence_map)


def split_into_segments(
    num_tokens: int, max_len: int, sentence_end: np.ndarray, word_end: np.ndarray
) -> list[tuple[int, int]]:
    """[start, end) runs of at most ``max_len`` tokens, each ending at a sentence end where possible,
    else at a word end, else (a single word longer than a segment) wherever the limit falls."""
    if max_len < 1:
        raise SpanBertError(f"segments must hold at least one sub-token, got max_len={max_len}")
    out = []
    start = 0
    while start < num_tokens:
        end = min(start + max_len, num_tokens)  # exclusive
        if end < num_tokens:
            cut = next((e for e in range(end - 1, start - 1, -1) if sentence_end[e]), None)
            if cut is None:
                cut = next((e for e in range(end - 1, start - 1, -1) if word_end[e]), end - 1)
            end = cut + 1
        out.append((start, end))
        start = end
    return out


BERT_SEGMENT = 384
"""The segment length an encoder of at most 512 positions gets by default: the released SpanBERT-base
setting, and this command's default before segments followed the encoder."""
LONG_SEGMENT_CAP = 8192
"""The longest segment chosen by default for a long-context encoder: ModernBERT's context, which holds a
whole LitBank document (at most 3,419 words) in one segment. An encoder of more positions is still read
in segments of this many sub-tokens, so one training step (at most max_training_segments segments)
keeps a bounded memory."""


def segment_length(max_seq_length: int | None, max_positions: int) -> tuple[int, str]:
    """(segment length in sub-tokens with [CLS] and [SEP], why it is that): ``max_seq_length`` when the
    options set it; else 384 (`BERT_SEGMENT`) for an encoder of at most 512 positions (BERT: the released
    base setting; fewer positions: all of them), and for a longer context the encoder's positions up to
    `LONG_SEGMENT_CAP`."""
    if max_seq_length is not None:
        return max_seq_length, "--max_seq_length"
    if max_positions <= 512:
        if max_positions < BERT_SEGMENT:
            return max_positions, f"the encoder's {max_positions:,} positions"
        return BERT_SEGMENT, f"SpanBERT-base's setting for an encoder of {max_positions:,} positions"
    if max_positions > LONG_SEGMENT_CAP:
        return LONG_SEGMENT_CAP, f"the encoder's {max_positions:,} positions, capped at {LONG_SEGMENT_CAP:,}"
    return max_positions, "the encoder's context"


def segments_line(length: int, why: str, feats: Sequence[CorefFeatures]) -> str:
    """The one line that says how documents are cut: ``segments: up to 8,192 sub-tokens (the encoder's
    context): 1 segment a document``, or with several, how many documents are read whole."""
    counts = [len(f.segments) for f in feats if f.segments]
    head = f"segments: up to {length:,} sub-tokens ({why})"
    if not counts:
        return head
    lo, hi = min(counts), max(counts)
    spread = f"{lo} segment{'s' * (lo > 1)}" if lo == hi else f"{lo} to {hi} segments"
    whole = sum(c == 1 for c in counts)
    return f"{head}: {spread} a document" + ("" if lo == hi else f", {whole} of {len(counts)} in one segment")


def featurize(doc: CorefDocument, tokenizer: Any, max_seq_length: int) -> CorefFeatures:
    """Sub-tokenize ``doc`` and cut it into segments of up to ``max_seq_length`` (with [CLS] and [SEP])."""
    words = doc.words
    enc = tokenizer.encode_words(words)
    ids = np.asarray(enc.ids, dtype=np.int64)  # (N,)
    word_map = np.asarray(enc.word_ids, dtype=np.int64)  # (N,)
    sentence_of_word = np.repeat(np.arange(len(doc.sentences)), [len(s) for s in doc.sentences])
    sentence_map = sentence_of_word[word_map]
    n = len(ids)
    word_end = np.ones(n, dtype=bool)
    word_end[:-1] = word_map[1:] != word_map[:-1]
    sentence_end = np.ones(n, dtype=bool)
    sentence_end[:-1] = sentence_map[1:] != sentence_map[:-1]
    segments = [ids[a:b] for a, b in split_into_segments(n, max_seq_length - 2, sentence_end, word_end)]
    speakers = [s for sent in (doc.speakers or [[NO_SPEAKER] * len(x) for x in doc.sentences]) for s in sent]
    speaker_index: dict[str, int] = {}
    speaker_of_word = np.array([speaker_index.setdefault(s, len(speaker_index)) for s in speakers], dtype=np.int64)
    # first and last sub-token of every word
    first = np.full(len(words), -1, dtype=np.int64)
    last = np.full(len(words), -1, dtype=np.int64)
    first[word_map[::-1]] = np.arange(n)[::-1]
    last[word_map] = np.arange(n)
    starts, ends, cids = [], [], []
    for c, cluster in enumerate(doc.clusters, 1):
        for s, e in cluster:
            starts.append(first[s])
            ends.append(last[e])
            cids.append(c)
    return CorefFeatures(
        doc_id=doc.doc_id,
        segments=segments,
        sentence_map=sentence_map,
        word_map=word_map,
        speaker_ids=speaker_of_word[word_map] if n else np.zeros(0, dtype=np.int64),
        genre=GENRES.index(doc.genre),
        gold_starts=np.asarray(starts, dtype=np.int64),
        gold_ends=np.asarray(ends, dtype=np.int64),
        gold_cluster_ids=np.asarray(cids, dtype=np.int64),
    )


def candidate_spans(sentence_map: np.ndarray, word_map: np.ndarray, max_width: int) -> tuple[np.ndarray, np.ndarray]:
    """All spans of up to ``max_width`` sub-tokens inside one sentence that start and end on word
    boundaries -> (starts, ends), (C,) each, sorted by (start, end).

    §4.1 / Lee et al. (2017): candidates are every span up to a width limit within a sentence. Spans
    that cut a word in two can never be mentions (gold mentions are word spans), so they are left out:
    fewer candidates, same reachable mentions.
    """
    n = len(sentence_map)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    word_start = np.ones(n, dtype=bool)
    word_start[1:] = word_map[1:] != word_map[:-1]
    word_end = np.ones(n, dtype=bool)
    word_end[:-1] = word_map[1:] != word_map[:-1]
    starts = np.arange(n)[:, None].repeat(max_width, 1)  # (N, W)
    ends = starts + np.arange(max_width)[None, :]  # (N, W)
    ok = ends < n
    ends_c = np.minimum(ends, n - 1)
    ok &= sentence_map[starts] == sentence_map[ends_c]
    ok &= word_start[starts] & word_end[ends_c]
    return starts[ok], ends[ok]


class CorefDataset:
    """Map-style dataset of featurized documents; items are model batches (one document each).

    In training, a document longer than ``max_training_segments`` segments is cut to a random run of
    that many consecutive segments (Joshi et al. 2019, to fit in memory); the run is drawn from a
    generator seeded by (seed, epoch, index), so it is reproducible and changes every epoch.
    """

    def __init__(
        self,
        features: Sequence[CorefFeatures],
        max_span_width: int,
        pad_id: int,
        cls_id: int,
        sep_id: int,
        max_training_segments: int | None = None,
        seed: int = 0,
    ):
        self.features = list(features)
        self.max_span_width = max_span_width
        self.pad_id, self.cls_id, self.sep_id = pad_id, cls_id, sep_id
        self.max_training_segments = max_training_segments
        self.seed = seed
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.features)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __getitem__(self, i: int) -> dict[str, Any]:
        f = self.features[i]
        first, last = 0, len(f.segments)
        if self.max_training_segments and len(f.segments) > self.max_training_segments:
            rng = np.random.default_rng((self.seed, self.epoch, i))
            first = int(rng.integers(0, len(f.segments) - self.max_training_segments + 1))
            last = first + self.max_training_segments
        return make_batch(f, first, last, self.max_span_width, self.pad_id, self.cls_id, self.sep_id)


def make_batch(
    f: CorefFeatures, first: int, last: int, max_span_width: int, pad_id: int, cls_id: int, sep_id: int
) -> dict[str, Any]:
    """Tensors for segments [first, last) of a document: the model's keyword arguments."""
    lengths = [len(s) for s in f.segments]
    offset = sum(lengths[:first])
    n = sum(lengths[first:last])
    segs = f.segments[first:last]
    width = max(lengths[first:last]) + 2
    input_ids = np.full((len(segs), width), pad_id, dtype=np.int64)  # (S, T)
    attention_mask = np.zeros((len(segs), width), dtype=np.int64)
    token_index = []  # flat position in (S*T) of each document sub-token, skipping [CLS]/[SEP]/padding
    for s, seg in enumerate(segs):
        input_ids[s, 0], input_ids[s, 1 : len(seg) + 1], input_ids[s, len(seg) + 1] = cls_id, seg, sep_id
        attention_mask[s, : len(seg) + 2] = 1
        token_index.append(s * width + 1 + np.arange(len(seg)))
    sentence_map = f.sentence_map[offset : offset + n]
    word_map = f.word_map[offset : offset + n]
    starts, ends = candidate_spans(sentence_map, word_map, max_span_width)
    inside = (f.gold_starts >= offset) & (f.gold_ends < offset + n)
    return {
        "input_ids": torch.from_numpy(input_ids),
        "attention_mask": torch.from_numpy(attention_mask),
        "token_index": torch.from_numpy(np.concatenate(token_index) if token_index else np.zeros(0, np.int64)),
        "sentence_map": torch.from_numpy(sentence_map.copy()),
        "speaker_ids": torch.from_numpy(f.speaker_ids[offset : offset + n].copy()),
        "genre": torch.tensor(f.genre),
        "span_starts": torch.from_numpy(starts),
        "span_ends": torch.from_numpy(ends),
        "gold_starts": torch.from_numpy(f.gold_starts[inside] - offset),
        "gold_ends": torch.from_numpy(f.gold_ends[inside] - offset),
        "gold_cluster_ids": torch.from_numpy(f.gold_cluster_ids[inside]),
    }


def collate_document(items: list[dict[str, Any]]) -> dict[str, Any]:
    """One document per step (Appendix B): the batch is the document itself."""
    if len(items) != 1:
        raise SpanBertError(
            f"coreference trains on one document per step; got a batch of {len(items)} (use batch size 1)"
        )
    return items[0]


