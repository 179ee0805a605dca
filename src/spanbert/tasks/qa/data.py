"""Question answering's data: SQuAD v1.1/v2.0 and MRQA readers (`QAData`: contexts, examples with
character spans), dev restriction by article, id lists."""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spanbert.errors import DataError, SpanBertError
from spanbert.metrics import squad as squad_metrics
from spanbert.utils import open_text, read_text

DUPLICATE_ID = "duplicate question id; ids must be unique (predictions are matched to questions by id)"
"""What a data file that repeats a question id is told, by every command that reads one (finetune, predict, evaluate)."""

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
        keep = set(range(self.num_articles)[parse_slice(spec)])
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
    return records[parse_slice(str(value))]


def parse_slice(spec: str) -> slice:
    """An article range as written (``"start:stop"``, either end empty: ``":17"``, ``"17:"``) as a slice."""
    parts = spec.split(":")
    try:
        if len(parts) != 2:
            raise ValueError
        start, stop = (int(p) if p.strip() else None for p in parts)
    except ValueError:
        raise SpanBertError(f"article range {spec!r} is not of the form start:stop (e.g. ':17' or '17:')") from None
    return slice(start, stop)


def _load_json_file(path: Path) -> Any:
    text = read_text(path)
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
        with open_text(path) as f:
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
                    raise DataError(path, DUPLICATE_ID, record=rec)
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
    seen: set[str] = set()
    text = read_text(path, "UTF-8 JSON lines")  # whole, so a byte that is not UTF-8 is named with its line
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
            if qid in seen:
                raise DataError(path, DUPLICATE_ID, line=lineno, record=rec)
            seen.add(qid)
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
    text = read_text(path, "UTF-8 text (one question id per line)")
    ids = {line.split("\t", 1)[0].strip() for line in text.splitlines() if line.strip()}
    ids.discard("id")
    return ids


