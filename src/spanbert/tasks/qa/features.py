"""From examples to model inputs: tokenized contexts, sliding windows with max-context flags and start/end
labels (`make_features`), the dataset and the collator."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from spanbert.distributed import is_main
from spanbert.errors import SpanBertError
from spanbert.tasks.qa.data import QAData
from spanbert.utils import progress_bar

# ---------------------------------------------------------------------------------------------
# Tokenization and features


def char_span_to_tokens(offsets: np.ndarray, start: int, end: int) -> tuple[int, int] | None:
    """Token span (inclusive) covering characters [start, end), or None when no token lies inside.

    ``offsets`` (N, 2) are character [start, end) per token. An answer that starts mid-word starts
    at the token containing its first character; mapping back uses the token offsets, so the
    recovered text is then the whole piece (counted by the round-trip test).
    """
    if len(offsets) == 0 or end <= start:
        return None
    ts = int(np.searchsorted(offsets[:, 1], start, side="right"))  # first token ending after `start`
    te = int(np.searchsorted(offsets[:, 0], end, side="left")) - 1  # last token starting before `end`
    if ts >= len(offsets) or te < ts:
        return None
    return ts, te


@dataclass
class TokenizedData:
    """Token ids and character offsets of every context and question of a `QAData`."""

    context_ids: list[np.ndarray]
    """(N_c,) int32 per context."""
    context_offsets: list[np.ndarray]
    """(N_c, 2) int64 character offsets per context."""
    question_ids: list[np.ndarray]
    """(N_q,) int32 per example, cut to max_query_length."""


def tokenize_data(
    data: QAData, tokenizer, max_query_length: int = 64, batch_size: int = 1000, progress: bool = True
) -> TokenizedData:
    """Tokenize each context once (not once per question) and each question, in batches.

    Contexts that no example refers to (articles left out by `QAData.select_articles`) are skipped
    and get empty arrays.
    """
    empty_ids, empty_offsets = np.zeros(0, dtype=np.int32), np.zeros((0, 2), dtype=np.int64)
    c_ids: list[np.ndarray] = [empty_ids] * len(data.contexts)
    c_offsets: list[np.ndarray] = [empty_offsets] * len(data.contexts)
    q_ids: list[np.ndarray] = []
    used = sorted({e.context_index for e in data.examples})
    quiet = not progress or not is_main()  # one bar under torchrun, none with --disable_tqdm
    with progress_bar(total=len(used) + len(data.examples), desc="tokenize", unit="text", disable=quiet) as bar:
        for i in range(0, len(used), batch_size):
            chunk = used[i : i + batch_size]
            for ci, enc in zip(chunk, tokenizer.encode_batch([data.contexts[c] for c in chunk])):
                c_ids[ci], c_offsets[ci] = enc.ids, enc.offsets
            bar.update(len(chunk))
        questions = [e.question for e in data.examples]
        for i in range(0, len(questions), batch_size):
            for enc in tokenizer.encode_batch(questions[i : i + batch_size]):
                q_ids.append(enc.ids[:max_query_length])  # BERT: query cut at 64 tokens
            bar.update(min(batch_size, len(questions) - i))
    return TokenizedData(c_ids, c_offsets, q_ids)


@dataclass
class QAFeatures:
    """The windows of all examples; index i is one model input ``[CLS] q [SEP] window [SEP]``."""

    input_ids: list[np.ndarray] = field(default_factory=list)
    """(T_i,) int32 per window."""
    example_index: list[int] = field(default_factory=list)
    query_len: list[int] = field(default_factory=list)
    """Question tokens in the window: the passage starts at position query_len + 2."""
    doc_start: list[int] = field(default_factory=list)
    """Index of the window's first token in its context's tokens."""
    max_context: list[np.ndarray] = field(default_factory=list)
    """(W_i,) bool: the window is the one where this passage token has maximal context."""
    start_positions: list[int] = field(default_factory=list)
    end_positions: list[int] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """Ids of training examples dropped because their answer covers no token."""

    def __len__(self) -> int:
        return len(self.input_ids)


def make_features(
    data: QAData,
    tok: TokenizedData,
    cls_id: int,
    sep_id: int,
    max_seq_length: int = 512,
    doc_stride: int = 128,
    training: bool = False,
    mid_id: int | None = None,
) -> QAFeatures:
    """Cut each example into windows (BERT §4.2 / Appendix B: max_seq_length 512, stride 128), framed
    ``[CLS] question [SEP] passage [SEP]`` (``mid_id``: the family's token between the two, e.g. the
    two-tower model's ``<s> question <sep> passage </s>``).

    A window holds ``max_seq_length - len(question) - 3`` passage tokens; consecutive windows start
    ``doc_stride`` tokens apart. A token seen by several windows is scored only in the window where
    ``min(left context, right context) + 0.01 * window length`` is largest (BERT's max-context rule).
    Labels point at the answer's start/end tokens, or at ``[CLS]`` (position 0) when the window does
    not contain the whole answer or the question is unanswerable (§4.1). With ``training``, examples
    whose answer covers no token are dropped (listed in ``skipped``).
    """
    out = QAFeatures()
    # windows depend only on (context, question length): computed once per pair, for the current context
    cache: dict[tuple[int, int], tuple[list[tuple[int, int]], list[np.ndarray]]] = {}
    for ei, ex in enumerate(data.examples):
        q = tok.question_ids[ei]
        n_q = len(q)
        max_doc = max_seq_length - n_q - 3
        if max_doc < 1:
            raise SpanBertError(
                f"max_seq_length={max_seq_length} leaves no room for the passage after a {n_q}-token question"
            )
        offsets = tok.context_offsets[ex.context_index]
        n = len(offsets)
        answer = None
        if not ex.is_impossible and ex.answer_start >= 0:
            answer = char_span_to_tokens(offsets, ex.answer_start, ex.answer_end)
            if answer is None and training:
                out.skipped.append(ex.qid)
                continue
        key = (ex.context_index, max_doc)
        if key not in cache:
            if cache and next(iter(cache))[0] != ex.context_index:
                cache.clear()
            cache[key] = _windows(n, max_doc, doc_stride)
        spans, max_ctx = cache[key]
        c_ids = tok.context_ids[ex.context_index]
        head = np.concatenate([[cls_id], q, [sep_id if mid_id is None else mid_id]]).astype(np.int32)
        for (s, length), mc in zip(spans, max_ctx):
            ids = np.concatenate([head, c_ids[s : s + length], [sep_id]]).astype(np.int32)
            sp = ep = 0
            if answer is not None and s <= answer[0] and answer[1] <= s + length - 1:
                sp, ep = answer[0] - s + n_q + 2, answer[1] - s + n_q + 2
            out.input_ids.append(ids)
            out.example_index.append(ei)
            out.query_len.append(n_q)
            out.doc_start.append(s)
            out.max_context.append(mc)
            out.start_positions.append(sp)
            out.end_positions.append(ep)
    return out


def _windows(n: int, max_doc: int, stride: int) -> tuple[list[tuple[int, int]], list[np.ndarray]]:
    """(start, length) of each window over n tokens, and per window (length,) bool max-context flags."""
    spans: list[tuple[int, int]] = []
    start = 0
    while True:
        length = min(n - start, max_doc)
        spans.append((start, length))
        if start + length >= n:
            break
        start += min(length, stride)
    if len(spans) == 1:
        return spans, [np.ones(spans[0][1], dtype=bool)]
    best = np.full(n, -1.0)
    best_span = np.zeros(n, dtype=np.int64)
    for i, (s, length) in enumerate(spans):
        pos = np.arange(s, s + length)
        score = np.minimum(pos - s, s + length - 1 - pos) + 0.01 * length
        better = score > best[s : s + length]  # strict: ties keep the earlier window, as BERT
        best[s : s + length][better] = score[better]
        best_span[s : s + length][better] = i
    return spans, [best_span[s : s + length] == i for i, (s, length) in enumerate(spans)]


class QAFeatureDataset(torch.utils.data.Dataset):
    """Map-style dataset over `QAFeatures` for the trainer (labels included when ``with_labels``)."""

    def __init__(self, features: QAFeatures, with_labels: bool = True):
        self.features = features
        self.with_labels = with_labels

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, i: int) -> dict[str, Any]:
        f = self.features
        item = {"input_ids": f.input_ids[i], "query_len": f.query_len[i]}
        if self.with_labels:
            item["start_positions"] = f.start_positions[i]
            item["end_positions"] = f.end_positions[i]
        return item


def collate_qa(items: Sequence[dict[str, Any]], pad_id: int = 0) -> dict[str, Tensor]:
    """Pad to the longest window of the batch; ``attention_mask`` only when there is padding.

    Segment ids: 0 for ``[CLS] question [SEP]``, 1 for the passage and its ``[SEP]`` (BERT §3).
    """
    lengths = [len(it["input_ids"]) for it in items]
    T = max(lengths)
    B = len(items)
    input_ids = torch.full((B, T), pad_id, dtype=torch.long)  # (B, T)
    token_type_ids = torch.zeros((B, T), dtype=torch.long)  # (B, T)
    for b, it in enumerate(items):
        n = lengths[b]
        input_ids[b, :n] = torch.from_numpy(np.asarray(it["input_ids"], dtype=np.int64))
        token_type_ids[b, it["query_len"] + 2 : n] = 1
    batch = {"input_ids": input_ids, "token_type_ids": token_type_ids}
    if min(lengths) < T:
        batch["attention_mask"] = (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).long()  # (B, T)
    if "start_positions" in items[0]:
        batch["start_positions"] = torch.tensor([it["start_positions"] for it in items], dtype=torch.long)  # (B,)
        batch["end_positions"] = torch.tensor([it["end_positions"] for it in items], dtype=torch.long)  # (B,)
    return batch


