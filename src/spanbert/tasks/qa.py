"""Extractive question answering (SQuAD v1.1 / v2.0, MRQA): reader, features, head, decoding, CLI.

§4.1 of the SpanBERT paper: the question and a passage window are encoded together and two linear
classifiers predict the start and end token of the answer; an unanswerable question (SQuAD 2.0) and
a window that does not contain the answer point at ``[CLS]`` for both. Appendix B: max_seq_length
512, sliding window, lr in {5e-6 .. 5e-5} x batch {16, 32}, 4 epochs.

Layout: ``[CLS] question [SEP] passage-window [SEP]``. The paper's text writes the passage first,
but the BERT and SpanBERT reference fine-tuning code (``run_squad.py``, ``run_mrqa.py``) put the
question first, and so do the released fine-tuned models; we follow the code (docs/qa.md).

The pipeline, each step a plain function:
  `read_squad` / `read_mrqa` -> `QAData` (contexts tokenized once, examples with character spans)
  -> `make_features` (windows, max-context flags, start/end labels) -> `SpanBertForQuestionAnswering`
  -> `decode` (n-best, max answer length, null score, threshold) -> `spanbert.metrics.squad`.
Prediction (`run_prediction`, and fine-tuning's evaluations) reduces each batch to one best span per
window at once (`best_spans_in_batch`, the batch form of `best_span_in_window`) and decodes those
(`decode_spans`): it never holds the whole set's logits.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import math
import warnings
import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from spanbert import families
from spanbert.config import add_dataclass_arguments, dataclass_from_args, replace_checked
from spanbert.distributed import eprint0, is_main, print0
from spanbert.errors import DataError, SpanBertError, decode_utf8, utf8_argument
from spanbert.metrics import squad as squad_metrics
from spanbert.tasks import api
from spanbert.tasks.common import (
    KeepBest,
    add_inference_arguments,
    check_output_dir,
    cpu_batch_tokens,
    family_defaults,
    finetune_command,
    length_batches,
    load_encoder,
    load_finetuned,
    load_tokenizer_for,
    predict_sharded,
    save_finetuned,
    seeded_model,
    selection_defaults,
    selection_summary,
    start_distributed,
    task_parser,
    write_once,
)
from spanbert.tasks.layers import apply_encoder_dropout, output_layer, scaled
from spanbert.tasks.spec import RESULTS_FILE, Results, TaskSpec
from spanbert.tasks.splits import RecordSplit
from spanbert.trainer import eval_size, predict_batches, resolve_device, train
from spanbert.utils import atomic_write, output_file, progress_bar

# ---------------------------------------------------------------------------------------------
# Readers


@dataclass
class QAExample:
    """One question about one context."""

    qid: str
    """Id under which its prediction is written (SQuAD ``id``; MRQA ``qid``, as the MRQA scorer keys)."""
    question: str
    context_index: int
    """Index into `QAData.contexts` (each context is tokenized once, however many questions it has)."""
    answers: list[str]
    """Gold answer texts, used for scoring (empty for an unanswerable question)."""
    answer_start: int = -1
    """Character start of the answer used for training (SQuAD: the first gold one; MRQA: the earliest
    detected span); -1 = none."""
    answer_end: int = -1
    """Character end (exclusive) of that answer."""
    is_impossible: bool = False
    """SQuAD 2.0: the question has no answer in the context."""
    article: int = 0
    """Index of its article (SQuAD) or context line (MRQA): splits are made by article."""


@dataclass
class QAData:
    """The contents of one QA file."""

    path: str
    format: str
    """``squad`` or ``mrqa``."""
    version_2: bool
    """True when the file has unanswerable questions (SQuAD 2.0)."""
    contexts: list[str]
    examples: list[QAExample]
    num_articles: int
    raw: dict | None = None
    """The parsed SQuAD JSON, for scoring exactly as the official script (which reads the file)."""

    def select_articles(self, spec: str | None) -> QAData:
        """Keep the articles of a Python slice ``"start:stop"`` (e.g. ``":17"``, ``"17:"``).

        For SQuAD 2.0, which has no public training set here, and for MRQA (whose dev sets the paper
        splits in half, §4.1), train on one half of dev by article and evaluate on the other.
        """
        if not spec:
            return self
        keep = set(range(self.num_articles)[_parse_slice(spec)])
        examples = [e for e in self.examples if e.article in keep]
        raw = None
        if self.raw is not None:
            raw = {**self.raw, "data": [a for i, a in enumerate(self.raw["data"]) if i in keep]}
        return QAData(self.path, self.format, self.version_2, self.contexts, examples, self.num_articles, raw)

    def drop_ids(self, ids: set[str]) -> tuple[QAData, int]:
        """Remove questions by id (e.g. the ambiguous answer offsets of the rebuilt SQuAD train set)."""
        examples = [e for e in self.examples if e.qid not in ids]
        dropped = len(self.examples) - len(examples)
        return QAData(
            self.path, self.format, self.version_2, self.contexts, examples, self.num_articles, self.raw
        ), dropped

    def head(self, n: int | None) -> QAData:
        """The first ``n`` questions (all when ``n`` is None): for SQuAD the parsed JSON keeps only them
        too, so the official scoring counts only those (it scores every question of the file, a
        missing prediction as 0)."""
        if n is None or n >= len(self.examples):
            return self
        examples = self.examples[:n]
        raw = None
        if self.raw is not None:
            keep = {e.qid for e in examples}
            data = []
            for article in self.raw["data"]:
                paragraphs = [
                    {**p, "qas": [q for q in p["qas"] if q["id"] in keep]}
                    for p in article["paragraphs"]
                    if any(q["id"] in keep for q in p["qas"])
                ]
                if paragraphs:
                    data.append({**article, "paragraphs": paragraphs})
            raw = {**self.raw, "data": data}
        return QAData(self.path, self.format, self.version_2, self.contexts, examples, self.num_articles, raw)

    def gold_answers(self) -> dict[str, list[str]]:
        return {e.qid: e.answers for e in self.examples}


def _restrict_articles(records: list[Any], option: str, value: Any) -> list[Any]:
    """The articles ``--validation_articles start:stop`` keeps (of a SQuAD file, or MRQA's contexts)."""
    return records[_parse_slice(str(value))]


def _parse_slice(spec: str) -> slice:
    parts = spec.split(":")
    try:
        if len(parts) != 2:
            raise ValueError
        start, stop = (int(p) if p.strip() else None for p in parts)
    except ValueError:
        raise SpanBertError(f"article range {spec!r} is not of the form start:stop (e.g. ':17' or '17:')") from None
    return slice(start, stop)


def _open_text(path: Path):
    if not path.is_file():
        raise SpanBertError(f"{path}: file not found")
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def _read_text(path: Path, expected: str = "UTF-8 text") -> str:
    """A whole (possibly gzipped) file as text; bytes that are not UTF-8 are an error naming the line
    and the byte offset (in the decompressed text of a ``.gz``)."""
    if not path.is_file():
        raise SpanBertError(f"{path}: file not found")
    try:
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise DataError(path, f"damaged or truncated gzip file: {e}") from None
    return decode_utf8(data, path, expected)


def _load_json_file(path: Path) -> Any:
    text = _read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        cut = e.msg.startswith("Unterminated string") or e.pos >= len(e.doc.rstrip()) - 1
        hint = " (the file looks truncated)" if cut else ""
        raise DataError(path, f"not valid JSON: {e.msg} at column {e.colno}{hint}", line=e.lineno) from None


def _expect(obj: Any, key: str, kind: type | tuple[type, ...], path: Path, record: str, line: int | None = None) -> Any:
    if not isinstance(obj, dict):
        raise DataError(path, f"expected a JSON object, found {type(obj).__name__}", line=line, record=record)
    if key not in obj:
        raise DataError(path, f"missing field {key!r}; found fields {sorted(obj)}", line=line, record=record)
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise DataError(
            path, f"field {key!r} is {type(value).__name__} {value!r:.60}, expected {names}", line=line, record=record
        )
    return value


def _first_json_line(path: Path) -> Any:
    """The first non-empty line parsed as JSON, or None (not JSON on one line, unreadable, ...)."""
    try:
        with _open_text(path) as f:
            for line in f:
                if line.strip():
                    return json.loads(line)
    except (ValueError, OSError, EOFError, zlib.error, SpanBertError):
        return None
    return None


def _looks_like_mrqa(path: Path) -> bool:
    """An MRQA file: its first line is a JSON object with ``header`` or ``context`` + ``qas``, and the
    file has more lines (a SQuAD JSON on one line has ``data``)."""
    first = _first_json_line(path)
    return isinstance(first, dict) and ("header" in first or ("context" in first and "qas" in first))


def _looks_like_squad(path: Path) -> bool:
    """A SQuAD JSON file (one line or pretty-printed): an object with ``data`` (and ``version``)."""
    first = _first_json_line(path)
    if isinstance(first, dict):
        return "data" in first and "context" not in first
    if first is None:
        try:
            whole = _load_json_file(path)
        except SpanBertError:
            return False
        return isinstance(whole, dict) and "data" in whole
    return False


def read_squad(path: str | Path) -> QAData:
    """Read a SQuAD v1.1 or v2.0 JSON file (``.json`` or ``.json.gz``), checking every answer offset.

    The first gold answer of each question is its training target (as BERT's ``run_squad.py``);
    all gold answers are kept for scoring. v2.0 is recognised by ``version`` or ``is_impossible``.
    """
    path = Path(path)
    if _looks_like_mrqa(path):
        raise DataError(
            path, "found MRQA JSON lines (a header or a context with qas per line); expected SQuAD JSON. "
            "Use the mrqa task: spanbert <finetune|predict|evaluate> mrqa ...",
        )  # fmt: skip
    data = _load_json_file(path)
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        found = f"keys {sorted(data)}" if isinstance(data, dict) else type(data).__name__
        raise DataError(path, f"expected SQuAD JSON {{'version': ..., 'data': [articles]}}, found {found}")
    version_2 = squad_metrics.is_v2_dataset(data)
    contexts: list[str] = []
    examples: list[QAExample] = []
    seen: set[str] = set()
    for a, article in enumerate(data["data"]):
        paragraphs = _expect(article, "paragraphs", list, path, f"data[{a}]")
        for p, paragraph in enumerate(paragraphs):
            where = f"data[{a}].paragraphs[{p}]"
            context = _expect(paragraph, "context", str, path, where)
            qas = _expect(paragraph, "qas", list, path, where)
            ci = len(contexts)
            contexts.append(context)
            for q, qa in enumerate(qas):
                rec = f"{where}.qas[{q}]"
                qid = str(_expect(qa, "id", (str, int), path, rec))
                rec = f"id {qid}"
                if qid in seen:
                    raise DataError(path, "duplicate question id; ids must be unique", record=rec)
                seen.add(qid)
                question = _expect(qa, "question", str, path, rec)
                answers = _expect(qa, "answers", list, path, rec)
                impossible = bool(qa.get("is_impossible", False))
                if not answers and not impossible:
                    raise DataError(
                        path, "no answers and not marked is_impossible; expected at least one answer", record=rec
                    )
                texts, start, end = [], -1, -1
                for k, ans in enumerate(answers):
                    text = _expect(ans, "text", str, path, f"{rec}, answers[{k}]")
                    s = _expect(ans, "answer_start", int, path, f"{rec}, answers[{k}]")
                    e = s + len(text)
                    if s < 0 or e > len(context):
                        raise DataError(
                            path,
                            f"answers[{k}] answer_start={s} with text of {len(text)} characters ends at {e}, "
                            f"outside the context of {len(context)} characters",
                            record=rec,
                        )
                    if context[s:e] != text:
                        raise DataError(
                            path,
                            f"answers[{k}] answer_start={s} points at {context[s:e]!r}, expected the answer text {text!r}",
                            record=rec,
                        )
                    texts.append(text)
                    if k == 0 and not impossible:
                        start, end = s, e
                examples.append(QAExample(qid, question, ci, [] if impossible else texts, start, end, impossible, a))
    return QAData(str(path), "squad", version_2, contexts, examples, len(data["data"]), raw=data)


def read_mrqa(path: str | Path) -> QAData:
    """Read an MRQA 2019 file (``.jsonl`` or ``.jsonl.gz``): an optional header line, then one context per line.

    Training target: the earliest character span (smallest start, then smallest end) over the
    ``char_spans`` of all ``detected_answers`` (inclusive ends, as MRQA stores them), as the released
    reader (facebookresearch/SpanBERT code/run_mrqa.py: ``sorted(...)[0]``). Scoring uses ``answers``,
    as `mrqa_official_eval.py` does.
    """
    path = Path(path)
    if path.is_file() and _looks_like_squad(path):
        raise DataError(
            path, "found SQuAD JSON ({'version': ..., 'data': [...]}); expected MRQA JSON lines. "
            "Use the squad task: spanbert <finetune|predict|evaluate> squad ...",
        )  # fmt: skip
    contexts: list[str] = []
    examples: list[QAExample] = []
    text = _read_text(path, "UTF-8 JSON lines")  # whole, so a byte that is not UTF-8 is named with its line
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(path, f"not valid JSON: {e.msg} at column {e.colno}", line=lineno) from None
        if lineno == 1 and isinstance(obj, dict) and "header" in obj:
            continue
        context = _expect(obj, "context", str, path, None, lineno)
        qas = _expect(obj, "qas", list, path, None, lineno)
        ci = len(contexts)
        contexts.append(context)
        for q, qa in enumerate(qas):
            rec = f"qas[{q}]"
            qid = str(_expect(qa, "qid", (str, int), path, rec, lineno))
            rec = f"qid {qid}"
            question = _expect(qa, "question", str, path, rec, lineno)
            answers = _expect(qa, "answers", list, path, rec, lineno)
            detected = _expect(qa, "detected_answers", list, path, rec, lineno)
            if not detected:
                raise DataError(
                    path, "empty detected_answers; MRQA questions are all answerable", line=lineno, record=rec
                )
            found: list[tuple[int, int]] = []
            for k, answer in enumerate(detected):
                spans = _expect(answer, "char_spans", list, path, f"{rec}, detected_answers[{k}]", lineno)
                if not spans:
                    raise DataError(path, f"detected_answers[{k}].char_spans is empty, expected [[start, end], "
                                    "...]", line=lineno, record=rec)  # fmt: skip
                for span in spans:
                    if not isinstance(span, list) or len(span) != 2:
                        raise DataError(path, f"detected_answers[{k}].char_spans holds {span!r:.60}, expected "
                                        "[start, end]", line=lineno, record=rec)  # fmt: skip
                    s, e = span
                    if not (isinstance(s, int) and isinstance(e, int) and 0 <= s <= e < len(context)):
                        raise DataError(
                            path,
                            f"char span [{s}, {e}] (inclusive) is outside the context of {len(context)} "
                            f"characters",
                            line=lineno,
                            record=rec,
                        )
                    found.append((s, e))
            # the released reader (run_mrqa.py) trains on the earliest span over all detected answers
            s, e = min(found)
            examples.append(QAExample(qid, question, ci, [str(x) for x in answers], s, e + 1, False, ci))
    if not examples:
        raise DataError(path, "no questions found; expected MRQA JSON lines with context and qas")
    return QAData(str(path), "mrqa", False, contexts, examples, len(contexts))


def read_qa(path: str | Path, task: str) -> QAData:
    """`read_squad` for task ``squad``, `read_mrqa` for ``mrqa``."""
    return read_mrqa(path) if task == "mrqa" else read_squad(path)


def read_id_list(path: str | Path) -> set[str]:
    """Question ids to drop: the first tab-separated column of each line (a header line ``id`` is skipped)."""
    path = Path(path)
    text = _read_text(path, "UTF-8 text (one question id per line)")
    ids = {line.split("\t", 1)[0].strip() for line in text.splitlines() if line.strip()}
    ids.discard("id")
    return ids


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


# ---------------------------------------------------------------------------------------------
# Model


class SpanBertForQuestionAnswering(nn.Module):
    """Encoder + ``qa_outputs`` (H -> 2: start and end logits), as HF `BertForQuestionAnswering`.

    Its `state_dict()` is HF's, so a fine-tuned model loads in `transformers`. The loss is the mean
    of the start and end cross-entropies (BERT §4.2); padding positions are excluded from the softmax.

    ``bilstm=True`` is BERT Table 5's "+ BiLSTM" (§5.1): a randomly initialised one-layer biLSTM
    between the encoder and ``qa_outputs`` (H/2 units each way, so its output is H wide), giving a
    left-to-right encoder's token states some right context. Its weights (`bilstm.*`) are not HF's:
    transformers loads such a model without them.
    """

    def __init__(self, config: Any = None, encoder: nn.Module | None = None, bilstm: bool = False):
        super().__init__()
        self.bert = encoder if encoder is not None else families.encoder_from_config(config.to_hf_dict(), add_pooling_layer=False)  # any family
        self.config = self.bert.config
        H = self.bert.hidden_size
        # PyTorch's LSTM initialisation (uniform in ±1/sqrt(H/2)); the paper says only "randomly initialized"
        self.bilstm = nn.LSTM(H, H // 2, batch_first=True, bidirectional=True) if bilstm else None
        apply_encoder_dropout(self.bert)
        # the family's output layer (BERT: N(0, 0.02); two-tower: x16 and zero-initialised); no dropout
        # before it, as BertForQuestionAnswering
        self.output_scale, _, self.qa_outputs = output_layer(self.bert, H, 2)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        start_positions: Tensor | None = None,
        end_positions: Tensor | None = None,
    ) -> dict[str, Tensor]:
        hidden = self.bert(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)  # (B, T, H)
        if self.bilstm is not None:
            hidden = _run_bilstm(self.bilstm, hidden, attention_mask)  # (B, T, H)
        logits = self.qa_outputs(scaled(hidden, self.output_scale)).float()  # (B, T, 2)
        start_logits, end_logits = logits.unbind(-1)  # (B, T) each
        if attention_mask is not None:
            pad = attention_mask == 0
            start_logits = start_logits.masked_fill(pad, torch.finfo(start_logits.dtype).min)
            end_logits = end_logits.masked_fill(pad, torch.finfo(end_logits.dtype).min)
        out = {"start_logits": start_logits, "end_logits": end_logits}
        if start_positions is not None and end_positions is not None:
            out["loss"] = (
                F.cross_entropy(start_logits, start_positions) + F.cross_entropy(end_logits, end_positions)
            ) / 2
        return out


def _run_bilstm(lstm: nn.LSTM, hidden: Tensor, attention_mask: Tensor | None) -> Tensor:
    """The biLSTM over each sequence's real tokens only (packed: the backward direction starts at the
    last real token, not at padding); padded positions come back as zeros. (B, T, H) -> (B, T, H)."""
    if attention_mask is None:
        return lstm(hidden)[0]
    lengths = attention_mask.sum(1).cpu()  # (B,) right padding
    packed = pack_padded_sequence(hidden, lengths, batch_first=True, enforce_sorted=False)
    out, _ = pad_packed_sequence(lstm(packed)[0], batch_first=True, total_length=hidden.shape[1])
    return out  # (B, T, H)


# ---------------------------------------------------------------------------------------------
# Decoding


@dataclass
class Decoded:
    predictions: dict[str, str]
    """qid -> answer text ("" = no answer, SQuAD 2.0 only)."""
    null_odds: dict[str, float]
    """qid -> null score minus best span score (SQuAD 2.0 only; BERT's null_odds.json)."""
    best_non_null: dict[str, str]
    """qid -> best non-empty span text, whatever the null score."""


NO_SPAN = (-math.inf, -1, -1)
"""`best_span_in_window`'s answer for a window with no valid span (score, start, end)."""


def best_span_in_window(
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    query_len: int,
    max_context: np.ndarray,
    n_best_size: int = 20,
    max_answer_length: int = 30,
) -> tuple[float, int, int, float]:
    """One window's share of `decode`: ``(best span score, start, end, null score)``.

    ``start_logits`` / ``end_logits`` are the window's (T,) logits (padding may follow: only the
    window's own ``query_len + 3 + len(max_context)`` positions are read). ``start``/``end`` count
    from the window's first passage token; ``(-inf, -1, -1)`` (`NO_SPAN`) when no pair is valid.
    The null score is the ``[CLS]`` start + end logit. Four numbers per window are all decoding
    needs, so a prediction keeps these instead of the logits (a full-dev run keeps O(windows)
    numbers, not O(windows x T)).
    """
    p0 = query_len + 2  # first passage position
    W = len(max_context)
    n = p0 + W + 1  # [CLS] question [SEP] passage [SEP]
    sl = np.asarray(start_logits[:n], dtype=np.float64)  # (T,)
    el = np.asarray(end_logits[:n], dtype=np.float64)  # (T,)
    null = float(sl[0] + el[0])
    k = min(n_best_size, n)
    starts = np.argsort(-sl, kind="stable")[:k]
    ends = np.argsort(-el, kind="stable")[:k]
    S, E = np.meshgrid(starts, ends, indexing="ij")  # (k, k)
    ok = (S >= p0) & (S < p0 + W) & (E >= p0) & (E < p0 + W) & (E >= S) & (E - S + 1 <= max_answer_length)
    if W == 0 or not np.any(ok):
        return (*NO_SPAN, null)
    ok &= max_context[np.clip(S - p0, 0, W - 1)]  # the start must have maximal context here
    if not np.any(ok):
        return (*NO_SPAN, null)
    scores = np.where(ok, sl[S] + el[E], -np.inf)
    j = int(np.argmax(scores))
    return float(scores.flat[j]), int(S.flat[j]) - p0, int(E.flat[j]) - p0, null


def best_spans_in_batch(
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    query_len: Sequence[int],
    max_context: Sequence[np.ndarray],
    n_best_size: int = 20,
    max_answer_length: int = 30,
) -> list[tuple[float, int, int, float]]:
    """`best_span_in_window` of every row of a batch at once, with the same numbers: ``start_logits`` /
    ``end_logits`` (B, T) (each row's padding, past its window, is never read), ``query_len[b]`` and
    ``max_context[b]`` of row b's window. The top-k and the (k, k) candidate grid of all rows are a few
    array operations instead of a dozen per window."""
    B, T = start_logits.shape
    if B == 0:
        return []
    p0 = np.asarray(query_len, dtype=np.int64) + 2  # (B,) first passage position
    W = np.array([len(m) for m in max_context], dtype=np.int64)  # (B,)
    past = np.arange(T)[None, :] >= (p0 + W + 1)[:, None]  # (B, T): beyond [CLS] q [SEP] passage [SEP]
    # past the window: -inf, so a stable sort puts those positions after all of the window's, in the
    # order `best_span_in_window` finds among the window's own positions
    sl = np.where(past, -np.inf, np.asarray(start_logits, dtype=np.float64))  # (B, T)
    el = np.where(past, -np.inf, np.asarray(end_logits, dtype=np.float64))  # (B, T)
    null = sl[:, 0] + el[:, 0]  # (B,)
    k = min(n_best_size, T)
    starts = np.argsort(-sl, axis=1, kind="stable")[:, :k]  # (B, k)
    ends = np.argsort(-el, axis=1, kind="stable")[:, :k]  # (B, k)
    S, E = starts[:, :, None], ends[:, None, :]  # (B, k, 1), (B, 1, k)
    lo, hi = p0[:, None, None], (p0 + W)[:, None, None]
    ok = (S >= lo) & (S < hi) & (E >= lo) & (E < hi) & (E >= S) & (E - S + 1 <= max_answer_length)  # (B, k, k)
    # a position past a short window (a row with fewer than k positions) is never a passage token
    mc = np.zeros((B, max(1, int(W.max()))), dtype=bool)  # (B, W_max) max-context flags, False past W
    for b, m in enumerate(max_context):
        mc[b, : len(m)] = m
    ok &= mc[np.arange(B)[:, None, None], np.clip(S - lo, 0, mc.shape[1] - 1)]  # the start has maximal context
    scores = np.where(ok, np.take_along_axis(sl, starts, 1)[:, :, None] + np.take_along_axis(el, ends, 1)[:, None, :],
                      -np.inf).reshape(B, k * k)  # fmt: skip
    j = scores.argmax(1)  # (B,) the first best in (start rank, end rank) order, as `best_span_in_window`
    found = ok.reshape(B, k * k).any(1)  # (B,)
    best = scores[np.arange(B), j]
    s_best, e_best = starts[np.arange(B), j // k] - p0, ends[np.arange(B), j % k] - p0
    return [
        (float(best[b]), int(s_best[b]), int(e_best[b]), float(null[b])) if found[b] else (*NO_SPAN, float(null[b]))
        for b in range(B)
    ]


def decode(
    data: QAData,
    tok: TokenizedData,
    features: QAFeatures,
    start_logits: Sequence[np.ndarray],
    end_logits: Sequence[np.ndarray],
    n_best_size: int = 20,
    max_answer_length: int = 30,
    version_2: bool = False,
    null_score_diff_threshold: float = 0.0,
) -> Decoded:
    """BERT's ``write_predictions``: best span per question over all its windows.

    Candidates are the top ``n_best_size`` start and end positions of each window; a pair is kept
    when both ends are passage tokens, the start has maximal context in this window, end >= start
    and the span has at most ``max_answer_length`` tokens; its score is start + end logit. SQuAD 2.0:
    the null score is the smallest ``[CLS]`` start+end score over the windows; the answer is "" when
    ``null - best span > threshold``. The text is the context between the span's character offsets
    (no need for BERT's ``get_final_text`` heuristic, which undid lower-casing).

    The same as `best_span_in_window` on each window then `decode_spans` (what `run_prediction`
    does batch by batch, without keeping the logits).
    """
    spans = [
        best_span_in_window(start_logits[fi], end_logits[fi], features.query_len[fi], features.max_context[fi],
                            n_best_size, max_answer_length)  # fmt: skip
        for fi in range(len(features))
    ]
    return decode_spans(data, tok, features, spans, version_2, null_score_diff_threshold)


def decode_spans(
    data: QAData,
    tok: TokenizedData,
    features: QAFeatures,
    spans: Sequence[tuple[float, int, int, float]],
    version_2: bool = False,
    null_score_diff_threshold: float = 0.0,
) -> Decoded:
    """The answers from each window's `best_span_in_window`: per question the best span over its
    windows (the earliest window on ties), the smallest null score, and the SQuAD 2.0 threshold."""
    by_example: dict[int, list[int]] = {}
    for fi, ei in enumerate(features.example_index):
        by_example.setdefault(ei, []).append(fi)
    predictions: dict[str, str] = {}
    null_odds: dict[str, float] = {}
    best_non_null: dict[str, str] = {}
    for ei, ex in enumerate(data.examples):
        context = data.contexts[ex.context_index]
        offsets = tok.context_offsets[ex.context_index]
        best_score, best_span = -math.inf, None
        score_null = math.inf
        for fi in by_example.get(ei, []):
            s_score, s, e, null = spans[fi]
            score_null = min(score_null, null)
            if s >= 0 and s_score > best_score:
                best_score = s_score
                ds = features.doc_start[fi]
                best_span = (s + ds, e + ds)  # context token indices
        text = ""
        if best_span is not None:
            text = context[offsets[best_span[0], 0] : offsets[best_span[1], 1]]
        best_non_null[ex.qid] = text
        if version_2:
            # no valid span at all: the null answer wins whatever the threshold
            diff = score_null - best_score if best_span is not None else 1e9
            null_odds[ex.qid] = float(diff)
            predictions[ex.qid] = "" if diff > null_score_diff_threshold else text
        else:
            predictions[ex.qid] = text
    return Decoded(predictions, null_odds, best_non_null)


def choose_threshold(data: QAData, decoded: Decoded) -> tuple[float, dict[str, float]]:
    """SQuAD 2.0: the null-score-difference threshold that maximises F1 on ``data``.

    The official v2.0 ``find_best_thresh`` over the best non-null answers (what is predicted when
    the threshold lets a question be answered). Returns the threshold and ``best_f1`` /
    ``best_exact`` (the latter at its own best threshold, as the official script reports it).
    """
    assert data.raw is not None, "thresholds are chosen on SQuAD 2.0 files"
    dataset = data.raw["data"]
    has_ans = squad_metrics.make_qid_to_has_ans(dataset)
    exact_raw, f1_raw = squad_metrics.get_raw_scores(dataset, decoded.best_non_null)
    best_f1, thresh = squad_metrics.find_best_thresh(decoded.best_non_null, f1_raw, decoded.null_odds, has_ans)
    best_exact, _ = squad_metrics.find_best_thresh(decoded.best_non_null, exact_raw, decoded.null_odds, has_ans)
    return float(thresh), {"best_f1": best_f1, "best_exact": best_exact}


def score(data: QAData, predictions: dict[str, str], na_probs: dict[str, float] | None = None) -> dict[str, float]:
    """Official metrics: v1.1 script for SQuAD 1.1, v2.0 script for SQuAD 2.0, MRQA script for MRQA."""
    if data.format == "mrqa":
        return squad_metrics.evaluate_mrqa(data.gold_answers(), predictions)
    assert data.raw is not None
    if data.version_2:
        return squad_metrics.evaluate_v2(data.raw["data"], predictions, na_probs)
    return squad_metrics.evaluate_v1(data.raw["data"], predictions)


# ---------------------------------------------------------------------------------------------
# Fine-tuning and prediction


@dataclass
class QAConfig:
    """Windowing and decoding settings of extractive QA (saved in the fine-tuned model's config.json)."""

    max_seq_length: int | None = None
    """Tokens per input window, [CLS] question [SEP] passage [SEP] (Appendix B: 512). Unset: it follows
    the encoder (`window_settings`): 512 for BERT's 512 positions, and for an encoder of a longer
    context (ModernBERT: 8,192) that context up to 1,024, which holds nearly every SQuAD and MRQA
    passage in one window. The value chosen is printed and saved with the model."""
    doc_stride: int | None = None
    """The step: distance in tokens between the starts of consecutive passage windows, as Google's and
    SpanBERT's run_squad.py (Appendix B: 128). Not the overlap that transformers' run_qa.py --doc_stride
    means: its --doc_stride D is spanbert's --doc_stride max_seq_length - question tokens - 3 - D
    (run_qa's 384 and 128, for a 13-token question: --doc_stride 240). Unset: 128 for windows of up
    to 512 tokens, a quarter of a longer window (BERT's proportion)."""
    max_query_length: int = 64
    """Questions are cut to this many tokens (BERT run_squad.py: 64)."""
    n_best_size: int = 20
    """Start and end candidates per window considered when decoding (BERT: 20)."""
    max_answer_length: int = 30
    """Longest answer in tokens (BERT: 30)."""
    version_2_with_negative: bool = False
    """SQuAD 2.0: questions may have no answer; predict "" when the [CLS] null score wins by more than the threshold."""
    null_score_diff_threshold: float = 0.0
    """SQuAD 2.0: answer "" when null score - best span score > this. Fine-tuning with a dev file
    chooses it on dev (official best-F1 search) and saves it with the model."""
    bilstm: bool = False
    """BERT Table 5 "+ BiLSTM": a randomly initialised biLSTM between the encoder and the span head (meant for the left-to-right baseline, `spanbert pretrain --system ltr`)."""


# Appendix B: 4 epochs; lr and batch size from the grid. 2e-5 x 32 (in the grid) is what the released
# SpanBERT commands use for SQuAD 1.1/2.0 and MRQA (README, code/run_squad.py, run_mrqa.py). With a dev
# file the model of the best dev F1 of 10 evaluations an epoch is kept, as those scripts do (SQuAD 2.0:
# F1 at the threshold chosen on dev, their --eval_metric best_f1).
DEFAULTS: dict[str, Any] = dict(
    num_train_epochs=4.0,
    learning_rate=2e-5,
    per_device_train_batch_size=32,
    warmup_ratio=0.1,
    weight_decay=0.01,
    save_steps=0,
    output_dir="runs/qa",
    **selection_defaults("f1"),  # 10 evaluations an epoch, fewer when they would dominate a short run
)


BERT_WINDOW, BERT_STRIDE = 512, 128
"""Appendix B's windows and step: what an encoder of at most 512 positions gets by default."""
LONG_WINDOW_CAP = 1024
"""The longest window chosen by default for a long-context encoder. SQuAD passages are a paragraph
(nearly all under 512 tokens; the longest about 850) and MRQA's are cut near 800 tokens, so longer
windows would add nothing but memory: a batch of 32 windows stays within twice the tokens of BERT's."""


def window_settings(cfg: QAConfig, max_positions: int) -> tuple[QAConfig, str]:
    """``cfg`` with its window length and step chosen where the options left them unset, and the line
    that says what they are: ``windows: 1,024 tokens, stride 256 (the encoder's 8,192 positions, capped
    at 1,024; stride a quarter of the window)``. See `QAConfig.max_seq_length` and ``doc_stride``."""
    length, why = cfg.max_seq_length, "--max_seq_length"
    if length is None:
        if max_positions <= BERT_WINDOW:
            length, why = max_positions, f"the encoder's {max_positions:,} positions"
        elif max_positions <= LONG_WINDOW_CAP:
            length, why = max_positions, "the encoder's context"
        else:
            length, why = LONG_WINDOW_CAP, f"the encoder's {max_positions:,} positions, capped at {LONG_WINDOW_CAP:,}"
    stride, stride_why = cfg.doc_stride, "--doc_stride"
    if stride is None:
        if length <= BERT_WINDOW:
            stride, stride_why = BERT_STRIDE, "Appendix B's"
        else:
            stride, stride_why = length // 4, "a quarter of the window"
    line = f"windows: {length:,} tokens, stride {stride:,} ({why}; stride {stride_why})"
    return QAConfig(**{**asdict(cfg), "max_seq_length": length, "doc_stride": stride}), line


def _config_dict(cfg: QAConfig) -> dict[str, Any]:
    return asdict(cfg)


def _features_for(data: QAData, tokenizer, cfg: QAConfig, training: bool, progress: bool = True):
    tok = tokenize_data(data, tokenizer, cfg.max_query_length, progress=progress)
    feats = make_features(
        data, tok, tokenizer.cls_id, tokenizer.sep_id, cfg.max_seq_length, cfg.doc_stride, training, tokenizer.mid_id
    )
    return tok, feats


T = TypeVar("T")


def _map_windows(
    model: nn.Module,
    features: QAFeatures,
    pad_id: int,
    reduce: Callable[[list[int], np.ndarray, np.ndarray], list[T]],
    batch_size: int,
    device: str,
    precision: str,
    disable_tqdm: bool,
) -> list[T]:
    """``reduce(windows, start_logits, end_logits)`` of every batch of windows (their (B, T) logits, one
    output per window), in feature order; each batch's logits are dropped once reduced. Windows run
    sorted by length; on CPU a batch holds windows of one length (no padding: the encoder runs no mask
    and no unpadding) and at most `cpu_batch_tokens` tokens (its activations reuse heap memory), on a
    GPU up to ``batch_size`` windows padded to their longest. Under torchrun each rank reduces its
    share and every rank returns all of them (contract 7)."""
    on_cpu = resolve_device(device).type == "cpu"
    lengths = [len(ids) for ids in features.input_ids]

    def collate(items):
        return collate_qa(items, pad_id)

    def predict(indices) -> list[T]:
        max_tokens = cpu_batch_tokens(model.bert) if on_cpu else 0
        batches = length_batches(indices, lengths, batch_size, same_length=on_cpu, max_tokens=max_tokens)
        ds = QAFeatureDataset(features, with_labels=False)
        got: dict[int, T] = {}
        quiet = disable_tqdm or not is_main()  # one bar under torchrun
        runs = predict_batches(model, ds, batch_size, collate, device, precision, "predict", quiet, batches=batches)
        for k, (_, out) in enumerate(runs):  # the generator runs to its end: the model's mode is restored
            windows = batches[k]
            sl = out["start_logits"].float().cpu().numpy()  # (B, T)
            el = out["end_logits"].float().cpu().numpy()  # (B, T)
            got.update(zip(windows, reduce(windows, sl, el)))
            del out, sl, el
        return [got[i] for i in indices]

    return predict_sharded(len(features), predict)


def predict_logits(
    model: nn.Module,
    features: QAFeatures,
    pad_id: int,
    batch_size: int = 64,
    device: str = "auto",
    precision: str = "auto",
    disable_tqdm: bool = False,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Start and end logits of every window, in feature order. Call it on every rank under torchrun."""

    def keep(windows: list[int], start: np.ndarray, end: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(start[b, : lengths[i]].copy(), end[b, : lengths[i]].copy()) for b, i in enumerate(windows)]

    lengths = [len(ids) for ids in features.input_ids]
    both = _map_windows(model, features, pad_id, keep, batch_size, device, precision, disable_tqdm)
    return [x[0] for x in both], [x[1] for x in both]


def predict_window_spans(
    model: nn.Module,
    features: QAFeatures,
    pad_id: int,
    batch_size: int = 64,
    device: str = "auto",
    precision: str = "auto",
    disable_tqdm: bool = False,
    n_best_size: int = 20,
    max_answer_length: int = 30,
) -> list[tuple[float, int, int, float]]:
    """`best_span_in_window` of every window, in feature order: the same windows and batches as
    `predict_logits`, but each batch's logits are reduced to four numbers per window at once
    (`best_spans_in_batch`), so memory holds the answers, not the (windows x T) logits of the whole
    set. Call it on every rank."""

    def best(windows: list[int], start: np.ndarray, end: np.ndarray) -> list[tuple[float, int, int, float]]:
        return best_spans_in_batch(start, end, [features.query_len[i] for i in windows],
                                   [features.max_context[i] for i in windows], n_best_size, max_answer_length)  # fmt: skip

    return _map_windows(model, features, pad_id, best, batch_size, device, precision, disable_tqdm)


def run_prediction(
    model: nn.Module,
    data: QAData,
    tokenizer,
    cfg: QAConfig,
    batch_size: int = 64,
    device: str = "auto",
    precision: str = "auto",
    progress: bool = True,
) -> Decoded:
    """Answers to every question of ``data``: windows, `predict_window_spans`, `decode_spans`
    (the same predictions as `predict_logits` + `decode`, without holding every window's logits)."""
    cfg = window_settings(cfg, model.bert.max_positions)[0]  # a no-op for a loaded model's settings
    tok, feats = _features_for(data, tokenizer, cfg, training=False, progress=progress)
    spans = predict_window_spans(
        model, feats, tokenizer.pad_id, batch_size, device, precision, not progress, cfg.n_best_size,
        cfg.max_answer_length,
    )  # fmt: skip
    return decode_spans(data, tok, feats, spans, cfg.version_2_with_negative, cfg.null_score_diff_threshold)


def answer(
    model_dir: str | Path, question: str, context: str, device: str = "auto", precision: str = "auto"
) -> dict[str, Any]:
    """The answer to one question about one raw-text context, as transformers' question-answering
    pipeline gives it: ``{"answer": text, "score": probability, "start": char, "end": char}`` with
    ``context[start:end] == answer``. Loads the fine-tuned model in ``model_dir`` (see `answer_with`
    to ask several questions of one loaded model)."""
    model, tokenizer, cfg = load_qa_model(model_dir)
    return answer_with(model, tokenizer, cfg, question, context, device, precision)


def answer_with(
    model: nn.Module,
    tokenizer: Any,
    cfg: QAConfig,
    question: str,
    context: str,
    device: str = "auto",
    precision: str = "auto",
) -> dict[str, Any]:
    """`answer` with a model already loaded (`load_qa_model`). The prediction path of `spanbert
    predict` (windows, max-context rule, n-best decoding, the SQuAD 2.0 threshold saved with the
    model); ``score`` is the pipeline's: the winning window's softmax probability of the start times
    that of the end, each over the window's passage tokens and ``[CLS]`` (a SQuAD 2.0 model's "" answer
    gets the ``[CLS]`` probability, start = end = 0)."""
    if not question.strip():
        raise SpanBertError("question: found an empty question, expected text")
    if not context.strip():
        raise SpanBertError("context: found an empty context, expected the text to answer from")
    data = QAData(
        path="<text>", format="squad", version_2=cfg.version_2_with_negative, contexts=[context],
        examples=[QAExample(qid="question", question=question, context_index=0, answers=[])], num_articles=1,
    )  # fmt: skip
    cfg = window_settings(cfg, model.bert.max_positions)[0]  # a no-op for a loaded model's settings
    tok, feats = _features_for(data, tokenizer, cfg, training=False, progress=False)
    starts, ends = predict_logits(model, feats, tokenizer.pad_id, 64, device, precision, disable_tqdm=True)
    spans = [
        best_span_in_window(starts[i], ends[i], feats.query_len[i], feats.max_context[i], cfg.n_best_size,
                            cfg.max_answer_length)  # fmt: skip
        for i in range(len(feats))
    ]
    decoded = decode_spans(data, tok, feats, spans, cfg.version_2_with_negative, cfg.null_score_diff_threshold)
    text = decoded.predictions["question"]
    v2 = cfg.version_2_with_negative

    def probability(i: int, s: int, e: int) -> float:
        # softmax over [CLS] and the window's passage positions, start and end apart (the pipeline's
        # normalisation: it masks the question and separators, not [CLS], before its softmax)
        p0, width = feats.query_len[i] + 2, len(feats.max_context[i])
        keep = [0, *range(p0, p0 + width)]
        sl, el = np.asarray(starts[i], np.float64)[keep], np.asarray(ends[i], np.float64)[keep]
        ls, le = np.logaddexp.reduce(sl), np.logaddexp.reduce(el)
        return float(np.exp(starts[i][s] - ls + ends[i][e] - le))

    if text == "" and not any(sp[1] >= 0 for sp in spans) and not v2:
        return {"answer": "", "score": 0.0, "start": 0, "end": 0}
    if text == "" and v2:  # the null answer: its best window is the one with the smallest null score
        i = min(range(len(spans)), key=lambda k: spans[k][3])
        return {"answer": "", "score": probability(i, 0, 0), "start": 0, "end": 0}
    # the window `decode_spans` took: the best span score, the earliest window on ties
    i = max(range(len(spans)), key=lambda k: (spans[k][0], -k))
    _, s, e, _ = spans[i]
    p0, first = feats.query_len[i] + 2, feats.doc_start[i]
    offsets = tok.context_offsets[0]
    start, end = int(offsets[s + first, 0]), int(offsets[e + first, 1])
    assert context[start:end] == text, "the decoded span and its offsets disagree"
    return {"answer": text, "score": probability(i, s + p0, e + p0), "start": start, "end": end}


def write_json(path: str | Path, obj: Any) -> None:
    """Pretty JSON, atomically, written once under torchrun (rank 0)."""
    def write() -> None:
        with atomic_write(path, encoding="utf-8") as f:
            json.dump(obj, f, indent=2, ensure_ascii=False)
            f.write("\n")

    write_once(write)


def finetune_qa(
    task: str,
    model_dir: str | Path,
    train_file: str | Path,
    validation_file: str | Path | None,
    targs,
    cfg: QAConfig,
    tokenizer_dir: str | Path | None = None,
    drop_ids_file: str | Path | None = None,
    train_articles: str | None = None,
    validation_articles: str | None = None,
    max_train_examples: int | None = None,
    max_eval_examples: int | None = None,
) -> dict[str, float]:
    """Fine-tune a QA model from any BERT checkpoint; save it (HF layout) in ``targs.output_dir``.

    ``max_eval_examples`` keeps the first N dev questions (after ``validation_articles``) for the
    evaluations during training, as GLUE and NER's option does.

    With a validation file the model is scored there ``targs.evals_per_epoch`` times an epoch and at
    the end (official metrics); with ``targs.metric_for_best_model`` (default ``f1``) the model saved
    is that of the best evaluation, and ``selected_step`` in the results names its step. For SQuAD 2.0
    the no-answer threshold is chosen on dev at each evaluation; the selected one is saved in
    config.json. Returns the dev metrics (``"f1"`` is the score the sweep compares).
    """
    check_output_dir(targs)  # before any reading or featurizing
    start_distributed(targs.device)
    tokenizer = load_tokenizer_for(model_dir, tokenizer_dir)
    data = read_qa(train_file, task).select_articles(train_articles)
    if data.version_2 and not cfg.version_2_with_negative:
        print0(f"{train_file}: has unanswerable questions; training as SQuAD 2.0 (--version_2_with_negative)")
        cfg = QAConfig(**{**_config_dict(cfg), "version_2_with_negative": True})
    if drop_ids_file:
        data, dropped = data.drop_ids(read_id_list(drop_ids_file))
        print0(f"dropped {dropped} questions listed in {drop_ids_file}")
    if max_train_examples:
        data = data.head(max_train_examples)
    if not data.examples:
        raise SpanBertError(f"{train_file}: no training questions left after the article selection / id filter")

    with seeded_model(targs.seed):  # the head's initialisation: the same in every run and on every rank
        encoder = load_encoder(model_dir, add_pooling_layer=False)
        model = SpanBertForQuestionAnswering(encoder=encoder, bilstm=cfg.bilstm)
    if encoder.vocab_size < tokenizer.vocab_size:
        raise SpanBertError(
            f"the tokenizer has {tokenizer.vocab_size} tokens but the model's vocab_size is {encoder.vocab_size}"
        )
    # the windows follow the encoder's context where the options leave them unset (saved with the model)
    cfg, windows = window_settings(cfg, encoder.max_positions)
    print0(windows)
    _, feats = _features_for(data, tokenizer, cfg, training=True, progress=not targs.disable_tqdm)
    if feats.skipped:
        print0(
            f"skipped {len(feats.skipped)} training questions whose answer covers no token (e.g. {feats.skipped[0]})"
        )
    print0(f"{len(data.examples)} training questions -> {len(feats)} windows")

    dev = None
    results: dict[str, Any] = {}
    if validation_file:
        dev = read_qa(validation_file, task).select_articles(validation_articles).head(max_eval_examples)
        if cfg.version_2_with_negative and dev.raw is None:
            raise SpanBertError(
                f"{validation_file}: MRQA has no unanswerable questions; drop --version_2_with_negative"
            )
        dev_tok, dev_feats = _features_for(dev, tokenizer, cfg, training=False, progress=not targs.disable_tqdm)

    def eval_fn(m: nn.Module, step: int) -> dict[str, float]:
        assert dev is not None
        nonlocal cfg
        # what `spanbert predict` does (`run_prediction`) on the features built once before training
        spans = predict_window_spans(
            m, dev_feats, tokenizer.pad_id, targs.per_device_eval_batch_size, targs.device, targs.precision,
            targs.disable_tqdm, cfg.n_best_size, cfg.max_answer_length,
        )  # fmt: skip
        decoded = decode_spans(dev, dev_tok, dev_feats, spans, cfg.version_2_with_negative)
        metrics: dict[str, Any] = {}
        if cfg.version_2_with_negative:
            # every rank holds the same gathered predictions; the threshold is still chosen once
            # (rank 0) and broadcast, so the value saved is the value every rank used
            thresh, best = write_once(lambda: choose_threshold(dev, decoded))
            cfg = QAConfig(**{**_config_dict(cfg), "null_score_diff_threshold": thresh})
            decoded = Decoded(
                {q: "" if decoded.null_odds[q] > thresh else t for q, t in decoded.best_non_null.items()},
                decoded.null_odds,
                decoded.best_non_null,
            )
            metrics.update(best, null_score_diff_threshold=thresh)
        # scores of the predictions themselves (at the chosen threshold, f1 = best_f1)
        metrics = {**score(dev, decoded.predictions), **metrics}
        results.clear()
        results.update(metrics, predictions=decoded.predictions, null_odds=decoded.null_odds)
        print0(f"step {step}: dev " + ", ".join(f"{k} {v:.4g}" for k, v in metrics.items() if isinstance(v, float)))
        return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}

    def evaluate(m: nn.Module, step: int) -> tuple[dict[str, float], Any]:
        scores = eval_fn(m, step)
        return scores, (dict(results), cfg)  # the predictions and the threshold of this evaluation

    keeper = KeepBest(evaluate, targs)
    result = train(
        model,
        QAFeatureDataset(feats),
        targs,
        collate_fn=functools.partial(collate_qa, pad_id=tokenizer.pad_id),
        eval_fn=keeper if dev is not None else None,
        eval_size=eval_size(len(dev.examples), QAFeatureDataset(dev_feats, False)) if dev is not None else None,
    )
    selected = None
    if dev is not None:
        # the model holds the weights of the best dev evaluation: save its predictions and threshold
        (kept, cfg), selected = keeper.chosen(model, targs, result, len(feats))
        results.clear()
        results.update(kept)
    out = Path(targs.output_dir)
    metrics = {k: v for k, v in results.items() if k not in ("predictions", "null_odds")}
    metrics.update(selection_summary(selected, targs))

    def write() -> None:
        extra = {"spanbert": {"task": task, **_config_dict(cfg)}}
        save_finetuned(model, out, tokenizer, families.architecture(model.bert, "ForQuestionAnswering"), extra)
        if results:
            write_json(out / "dev_predictions.json", results["predictions"])
            if cfg.version_2_with_negative:
                write_json(out / "dev_null_odds.json", results["null_odds"])
            write_json(out / RESULTS_FILE, metrics)

    write_once(write)  # the command says where it saved (`common.run_finetune`), as for every task
    return metrics


NEEDS = "a question-answering model (spanbert finetune squad|mrqa)"


def check_model(model_dir: str | Path) -> None:
    """Refuse, before any data is read, a folder that holds no QA model (a pre-trained-only folder,
    another task's model). A HF ``BertForQuestionAnswering`` folder is a QA model."""
    raw = families.check_task_folder(model_dir, families.architectures("ForQuestionAnswering"), NEEDS)
    settings = raw.get("spanbert") if isinstance(raw.get("spanbert"), dict) else {}
    if settings.get("task") not in (None, "squad", "mrqa"):
        raise SpanBertError(f"{model_dir}: found a {settings['task']} model, expected {NEEDS}")


def load_qa_model(model_dir: str | Path) -> tuple[SpanBertForQuestionAnswering, Any, QAConfig]:
    """A fine-tuned QA model (ours, any family, or a HF `BertForQuestionAnswering` folder), its tokenizer
    (framed for its family) and settings."""
    check_model(model_dir)
    config_json, state, tokenizer = load_finetuned(model_dir)
    source = Path(model_dir) / "config.json"
    if "qa_outputs.weight" not in state:
        raise SpanBertError(
            f"{model_dir}: not a question-answering model (no qa_outputs weights); fine-tune one with "
            "`spanbert finetune squad --model PRETRAINED --train_file ...`"
        )
    saved = config_json.get("spanbert", {})
    if not isinstance(saved, dict):
        raise DataError(source, f"found spanbert {saved!r:.60}; expected a mapping of QA settings")
    names = {f for f in QAConfig.__dataclass_fields__}
    cfg = replace_checked(QAConfig(), {k: v for k, v in saved.items() if k in names}, source=str(source))
    encoder = families.encoder_from_config(config_json, add_pooling_layer=False, source=str(source))
    # a folder without spanbert's settings (transformers' BertForQuestionAnswering): the encoder's defaults
    cfg = window_settings(cfg, encoder.max_positions)[0]
    model = SpanBertForQuestionAnswering(encoder=encoder, bilstm=cfg.bilstm)
    families.load_encoder_state(model.bert, state, str(model_dir))
    model.qa_outputs.load_state_dict({"weight": state["qa_outputs.weight"], "bias": state["qa_outputs.bias"]})
    if model.bilstm is not None:
        lstm = {k[len("bilstm.") :]: v for k, v in state.items() if k.startswith("bilstm.")}
        missing = sorted(set(model.bilstm.state_dict()) - set(lstm))
        if missing:
            raise DataError(source, f"found \"bilstm\": true and no bilstm.{missing[0]} weights, expected a model fine-tuned with --bilstm")
        model.bilstm.load_state_dict(lstm)
    model.eval()  # contract 5: loaders return eval mode, as transformers does
    return model, tokenizer, cfg


def _read_predictions(path: str | Path, what: str, kind: type) -> dict[str, Any]:
    path = Path(path)
    obj = _load_json_file(path)
    if not isinstance(obj, dict):
        raise DataError(path, f"expected a JSON object {{question_id: {what}}}, found {type(obj).__name__}")
    for k, v in obj.items():
        ok = isinstance(v, kind) and not isinstance(v, bool)
        if not ok:
            raise DataError(path, f"value {v!r:.60} is not a {what}", record=str(k))
    return obj


def evaluate_files(
    task: str,
    data_file: str | Path,
    predictions_file: str | Path,
    na_prob_file: str | Path | None = None,
    articles: str | None = None,
    na_prob_thresh: float = 1.0,
) -> dict[str, float]:
    """Score a predictions file against a data file exactly as the official script does.

    SQuAD files with unanswerable questions use the v2.0 script (``na_prob_file`` = its
    ``--na-prob-file``, ``na_prob_thresh`` its ``--na-prob-thresh``), others the v1.1 script; MRQA
    files the MRQA script.
    """
    preds = _read_predictions(predictions_file, "answer string", str)
    na = _read_predictions(na_prob_file, "number", (int, float)) if na_prob_file else None
    if task == "mrqa":
        whole = read_mrqa(data_file)
        _check_prediction_ids(predictions_file, preds, [e.qid for e in whole.examples], data_file)
        data = whole.select_articles(articles)
        return squad_metrics.evaluate_mrqa(data.gold_answers(), preds)
    path = Path(data_file)
    if _looks_like_mrqa(path):
        raise DataError(
            path, "found MRQA JSON lines; expected SQuAD JSON. Use the mrqa task: spanbert evaluate mrqa ..."
        )
    raw = _load_json_file(path)
    if not isinstance(raw, dict) or not isinstance(raw.get("data"), list):
        raise DataError(path, "expected SQuAD JSON {'version': ..., 'data': [articles]}")
    _check_prediction_ids(predictions_file, preds, _squad_gold_ids(raw, path), data_file)
    if articles:
        raw = {**raw, "data": raw["data"][_parse_slice(articles)]}
    try:
        if squad_metrics.is_v2_dataset(raw):
            # the files are named here; the metric (no file names) says only what is missing
            asked = [str(qa["id"]) for a in raw["data"] for p in a["paragraphs"] for qa in p["qas"]]
            for file, values, what in ((predictions_file, preds, "an answer (\"\" = no answer)"),
                                       (na_prob_file, na, "a no-answer probability")):  # fmt: skip
                missing = [q for q in asked if values is not None and q not in values]
                if missing:
                    shown = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
                    raise DataError(
                        file, f"found no entry for {len(missing)} of {len(asked)} questions ({shown}); expected "
                        f"{what} for every question of {data_file}, as SQuAD 2.0 scoring needs",
                    )  # fmt: skip
            return squad_metrics.evaluate_v2(raw["data"], preds, na, na_prob_thresh)
        return squad_metrics.evaluate_v1(raw["data"], preds)
    except (KeyError, TypeError) as e:  # the structure was checked above; kept as the last guard
        raise DataError(path, f"not in SQuAD format: missing or wrong field {e}") from None


def _squad_gold_ids(raw: dict[str, Any], path: Path) -> list[str]:
    """Every question id of a SQuAD JSON, checking the structure the official scripts walk (each
    article's ``paragraphs``, each paragraph's ``qas``, each question's ``id`` and ``answers`` with a
    ``text``): a missing or mistyped field names its place instead of the scripts' KeyError."""
    ids = []
    for a, article in enumerate(raw["data"]):
        for p, paragraph in enumerate(_expect(article, "paragraphs", list, path, f"data[{a}]")):
            where = f"data[{a}].paragraphs[{p}]"
            for q, qa in enumerate(_expect(paragraph, "qas", list, path, where)):
                qid = _expect(qa, "id", (str, int), path, f"{where}.qas[{q}]")
                for k, answer in enumerate(_expect(qa, "answers", list, path, f"id {qid}")):
                    _expect(answer, "text", str, path, f"id {qid}, answers[{k}]")
                ids.append(qid)
    return ids


def _check_prediction_ids(
    predictions_file: str | Path, preds: dict[str, Any], gold_ids: list[Any], data_file: str | Path
) -> None:
    """The official scripts match predictions to questions by id, score a missing one 0 (v1.1, MRQA;
    `evaluate` warns) and ignore ids they do not know. Ignoring is kept, but said (a warning naming the
    first few); a file none of whose ids is a question of the data is an error: it is the predictions
    of another data set, and a score of 0 would only hide that."""
    known = {str(x) for x in gold_ids}
    extra = [k for k in preds if k not in known]
    if not extra:
        return
    shown = ", ".join(map(str, extra[:3])) + (", ..." if len(extra) > 3 else "")
    if len(extra) == len(preds):
        raise DataError(
            predictions_file, f"found {len(preds)} predictions and no id among them that is a question of "
            f"{data_file} ({shown}); expected the predictions of that data file",
        )  # fmt: skip
    warnings.warn(
        f"{len(extra)} of {len(preds)} predictions are for question ids not in {data_file}; ignored, as the "
        f"official script does ({shown})", stacklevel=2,
    )  # fmt: skip


def _raw_text_request(args: Any) -> str | None:
    """The context of a ``--question`` (from --context or --context_file), or None for a --data run;
    refuses a mix of the two ways or half of one."""
    raw = [o for o in ("question", "context", "context_file") if getattr(args, o) is not None]
    if not raw:
        missing = [f"--{o}" for o in ("data", "output") if getattr(args, o) is None]
        if missing:
            raise SpanBertError(f"found no {' or '.join(missing)}, expected --data FILE --output FILE, or --question "
                                "with --context or --context_file")  # fmt: skip
        return None
    if args.data is not None or args.output is not None:
        raise SpanBertError("found --data/--output and --question/--context, expected one way of asking")
    if args.question is None:
        raise SpanBertError(f"found --{raw[0]} without --question, expected the question to answer")
    if (args.context is None) == (args.context_file is None):
        raise SpanBertError("--question: found " + ("both --context and --context_file" if args.context is not None
                            else "no context") + ", expected one of --context TEXT or --context_file FILE")  # fmt: skip
    args.question = utf8_argument(args.question, "--question")
    if args.context is not None:
        return utf8_argument(args.context, "--context")
    path = Path(args.context_file)
    if not path.is_file():
        raise SpanBertError(f"{path}: found no such file, expected the text of --context_file")
    return decode_utf8(path.read_bytes(), path)


def _format(task: str) -> str:
    return "SQuAD v1.1/v2.0 JSON (.json or .json.gz)" if task == "squad" else "MRQA .jsonl or .jsonl.gz"


def _finetune(task: str, argv: list[str], prog: str) -> Results:
    """``spanbert finetune {squad,mrqa} ...``."""
    fmt = _format(task)

    def add_options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--train_file", required=True, help=f"training data, {fmt}")
        parser.add_argument(
            "--validation_file", help="dev data scored --evals_per_epoch times an epoch and at the end: the model of the "
            "best --metric_for_best_model is saved (and the SQuAD 2.0 threshold is chosen there). Never pass the test "
            "split here: score it afterwards with `spanbert predict` + `spanbert evaluate`"
        )
        parser.add_argument("--drop_ids", help="file of question ids to leave out of training (first tab-separated "
                            "column), e.g. ../shared/data/squad/train-v1.1.rebuilt.ambiguous.tsv")  # fmt: skip
        parser.add_argument("--train_articles", help="train on these articles only, a slice start:stop (e.g. ':17')")
        parser.add_argument("--validation_articles", help="evaluate on these articles only (e.g. '17:')")
        parser.add_argument("--max_train_examples", type=int, help="use only the first N training questions")
        parser.add_argument("--max_eval_examples", type=int, help="use only the first N dev questions (after "
                            "--validation_articles) for the evaluations during training")  # fmt: skip
        shown = {"max_seq_length": f"{BERT_WINDOW} for BERT, see above", "doc_stride": BERT_STRIDE}  # unset: `window_settings`
        add_dataclass_arguments(parser.add_argument_group("QA"), QAConfig, shown, exclude=("null_score_diff_threshold",))

    chosen: dict[str, QAConfig] = {}

    def check(args: argparse.Namespace) -> None:  # before any output is checked or data read
        if args.sweep and not args.validation_file:
            raise SpanBertError("--sweep keeps the best run on dev: pass --validation_file")
        chosen["config"] = dataclass_from_args(QAConfig, args)

    def run_one(args: argparse.Namespace, targs: Any) -> dict[str, Any]:
        return finetune_qa(
            task, args.model, args.train_file, args.validation_file, targs, chosen["config"], args.tokenizer,
            args.drop_ids, args.train_articles, args.validation_articles, args.max_train_examples,
            args.max_eval_examples,
        )  # fmt: skip

    defaults = family_defaults(argv, DEFAULTS)
    return finetune_command(prog, __doc__, argv, add_options, defaults, run_one, metric="f1", configs=(QAConfig,),
                            check=check)  # fmt: skip


def _predict(task: str, argv: list[str], prog: str) -> Path | None:
    """``spanbert predict {squad,mrqa} (--data FILE --output PREDS | --question Q --context C)``: the
    predictions file written (None for a --question, whose answer is printed)."""
    fmt = _format(task)
    parser = task_parser(prog, __doc__)
    parser.add_argument(
        "--model",
        required=True,
        help="fine-tuned QA model folder (spanbert finetune, or a HF BertForQuestionAnswering)",
    )
    parser.add_argument("--data", help=f"questions to answer, {fmt} (or --question with --context)")
    parser.add_argument("--output", type=output_file,
                        help="predictions file to write: {question_id: answer text} (with --data)")
    parser.add_argument("--question", help="one question in raw text, answered from --context or --context_file: "
                        "prints {answer, score, start, end} as JSON (start/end: character offsets in the context)")  # fmt: skip
    parser.add_argument("--context", help="the raw text --question is answered from")
    parser.add_argument("--context_file", help="a UTF-8 text file holding the context of --question")
    parser.add_argument(
        "--null_odds", type=output_file,
        help="where to write the null-score differences (default: null_odds.json beside --output)",
    )
    parser.add_argument("--articles", help="only these articles, a slice start:stop")
    parser.add_argument(
        "--null_score_diff_threshold", type=float, help="override the threshold saved with the model"
    )
    add_inference_arguments(parser, "windows")
    args = parser.parse_args(argv)
    context = _raw_text_request(args)  # checked before the model loads
    start_distributed(args.device)
    model, tokenizer, cfg = load_qa_model(args.model)
    if args.null_score_diff_threshold is not None:
        cfg = QAConfig(**{**_config_dict(cfg), "null_score_diff_threshold": args.null_score_diff_threshold})
    if context is not None:
        print0(json.dumps(answer_with(model, tokenizer, cfg, args.question, context, args.device), ensure_ascii=False))
        return None
    data = read_qa(args.data, task).select_articles(args.articles)
    decoded = run_prediction(
        model, data, tokenizer, cfg, args.batch_size, args.device, progress=not args.disable_tqdm
    )
    out = Path(args.output)
    null_path = Path(args.null_odds) if args.null_odds else out.parent / "null_odds.json"

    def write() -> None:
        write_json(out, decoded.predictions)
        if cfg.version_2_with_negative:
            write_json(null_path, decoded.null_odds)

    write_once(write)
    print0(
        f"wrote {len(decoded.predictions)} predictions to {out}"
        + (f" and {null_path}" if cfg.version_2_with_negative else "")
    )
    return out


def _evaluate(task: str, argv: list[str], prog: str) -> Results:
    """``spanbert evaluate {squad,mrqa} --data GOLD --predictions PREDS``: the official scores."""
    fmt = _format(task)
    parser = task_parser(prog, __doc__)
    parser.add_argument("--data", required=True, help=f"gold data, {fmt}")
    parser.add_argument("--predictions", required=True, help="predictions file {question_id: answer text}")
    parser.add_argument(
        "--na-prob",
        "--na_prob",
        dest="na_prob",
        help="SQuAD 2.0: no-answer scores {question_id: number} (null_odds.json)",
    )
    parser.add_argument("--na-prob-thresh", "--na_prob_thresh", dest="na_prob_thresh", type=float, default=1.0,
                        help="SQuAD 2.0: score as no-answer where the --na-prob value exceeds this (official default: 1.0)")  # fmt: skip
    parser.add_argument("--articles", help="only these articles, a slice start:stop")
    args = parser.parse_args(argv)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        metrics = evaluate_files(
            task, args.data, args.predictions, args.na_prob, args.articles, args.na_prob_thresh
        )
    for w in caught:  # one summary line (N of M questions have no prediction), not one per question
        eprint0(f"warning: {w.message}")
    return Results(metrics, "f1")


def _score_model(task: str, model: str, data: str, options: dict[str, Any]) -> Results:
    """A fine-tuned model scored on labelled questions: predicted into the model folder, then scored
    with the official script's rules (`evaluate` takes predictions, not a model)."""
    preds = api.predict(task, model=model, data=data, output=Path(model) / "heldout_predictions.json",
                        disable_tqdm=True, **options)  # fmt: skip
    return api.evaluate(task, data=data, predictions=preds)


SPECS = {
    name: TaskSpec(
        name=name,
        description=description,
        finetune=_finetune,
        predict=_predict,
        evaluate=_evaluate,
        metric="f1",
        data=_format(name),
        configs=(("spanbert.tasks.qa", "QAConfig"),),
        dev_split=split,
        score_model=functools.partial(_score_model, name),
    )
    for name, description, split in (
        ("squad", "extractive QA, SQuAD v1.1/v2.0 JSON",
         RecordSplit(".json", "squad-articles", ("validation_articles",), _restrict_articles)),
        ("mrqa", "extractive QA, MRQA jsonl(.gz)",
         RecordSplit(".jsonl", "jsonl-after-header", ("validation_articles",), _restrict_articles)),
    )
}  # fmt: skip
