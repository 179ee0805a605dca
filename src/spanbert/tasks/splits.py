"""Dev data cut into a selection half and a held-out half, in the file formats the tasks read.

A study selects every run twice on dev (its best evaluation, then the best learning rate), so a dev score
is optimistic; the selected models are scored again on data neither selection saw: the task's test split,
or the held-out half of dev (SpanBERT §4.1 does this for MRQA). Dev is split once, by record, with a
fixed seed (`split_half`), so every run selects on the same half and is scored on the same other half.

`RecordSplit` is the rule of a task whose dev set is one file of records (`FORMATS`: SQuAD articles,
JSON lists, JSONL after a header, rows after a header, blank-line blocks, CoNLL documents); a task with
another layout writes its own object with the same two methods (`spanbert.tasks.spec.DevSplit`).
No torch: a study plans its halves before any model is loaded.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spanbert.errors import SpanBertError
from spanbert.utils import atomic_write, read_text

HELDOUT_SEED = 23
"""The seed of the dev halves: fixed, so every run (every system, learning rate and seed of a study, and
`finetune glue --heldout_half`) selects on the same half and is scored on the same other half."""


def split_half(n: int, seed: int = HELDOUT_SEED) -> tuple[list[int], list[int]]:
    """(selection indices, held-out indices) of ``n`` records: a seeded permutation cut in two, the
    held-out half the smaller when ``n`` is odd, each half in the file's order. A model is selected on
    the first half and scored on the second, which selection never saw."""
    if n < 2:
        raise ValueError(f"cannot split {n} record(s) in two halves")
    perm = np.random.default_rng(seed).permutation(n)
    held = sorted(int(i) for i in perm[: n // 2])
    select = sorted(int(i) for i in perm[n // 2 :])
    return select, held


# --------------------------------------------------------------------------- record formats


def _blocks(lines: list[str], starts: Callable[[str], bool] | None = None) -> tuple[list[str], list[list[str]]]:
    """(lines before the first record, records): records separated by blank lines, or each starting at a
    line where ``starts`` holds."""
    head: list[str] = []
    records: list[list[str]] = []
    current: list[str] = []
    for line in lines:
        if starts is None:
            if line.strip():
                current.append(line)
            elif current:
                records.append(current + [line])
                current = []
        elif starts(line):
            if current:
                records.append(current)
            current = [line]
        elif current:
            current.append(line)
        else:
            head.append(line)
    if current:
        records.append(current)
    return head, records


def _eol(lines: list[str]) -> str:
    return "\r\n" if lines and lines[0].endswith("\r\n") else "\n"


def _ended(line: str, eol: str) -> str:
    return line if line.endswith("\n") else line + eol


def _read_rows(text: str, header: Callable[[list[str]], int]) -> tuple[list[str], list[str]]:
    """(header lines, one record a line): the last line ended as the others, so a half can end with it."""
    lines = text.splitlines(keepends=True)
    n = header(lines)
    eol = _eol(lines)
    return lines[:n], [_ended(x, eol) for x in lines[n:] if x.strip()]


def _read_blocks(text: str, starts: Callable[[str], bool] | None) -> tuple[list[str], list[list[str]]]:
    """(lines before the first record, records of several lines), each record ended as the file's others
    (a blank line after a blank-line block, the file's last one included)."""
    lines = text.splitlines(keepends=True)
    eol = _eol(lines)
    head, records = _blocks(lines, starts)
    for r in records:
        r[-1] = _ended(r[-1], eol)
        if starts is None and r[-1].strip():
            r.append(eol)  # the file's last record had no blank line after it
    return head, records


def _jsonl_header(lines: list[str]) -> int:
    return int(bool(lines) and "header" in json.loads(lines[0]))


@dataclass(frozen=True)
class RecordFormat:
    """How a dev file divides into records and is written back from some of them."""

    read: Callable[[str], tuple[Any, list[Any]]]
    """text -> (what comes before the records, the records)."""
    write: Callable[[Any, list[Any]], str]
    """(that head, some records) -> the text of a file of the same format."""


FORMATS: dict[str, RecordFormat] = {
    # SQuAD: a JSON object whose "data" is a list of articles (the questions of an article stay together)
    "squad-articles": RecordFormat(lambda text: (json.loads(text), json.loads(text)["data"]),
                                   lambda head, part: json.dumps({**head, "data": part})),
    "json-list": RecordFormat(lambda text: (None, json.loads(text)), lambda head, part: json.dumps(part)),
    # MRQA: one JSON object a line, after a {"header": ...} line
    "jsonl-after-header": RecordFormat(lambda text: _read_rows(text, _jsonl_header),
                                       lambda head, part: "".join(head + part)),
    "rows-after-header": RecordFormat(lambda text: _read_rows(text, lambda lines: 1),
                                      lambda head, part: "".join(head + part)),
    # one record a line, no header (a plain list of examples)
    "rows": RecordFormat(lambda text: _read_rows(text, lambda lines: 0), lambda head, part: "".join(part)),
    "blank-line-blocks": RecordFormat(lambda text: _read_blocks(text, None),
                                      lambda head, part: "".join(head + [x for r in part for x in r])),
    "conll-documents": RecordFormat(lambda text: _read_blocks(text, lambda x: x.startswith("#begin document")),
                                    lambda head, part: "".join(head + [x for r in part for x in r])),
}  # fmt: skip


def first_n(records: list[Any], option: str, value: Any) -> list[Any]:
    """The first ``value`` records (``max_eval_examples``)."""
    return records[: int(value)]


def restricted(options: Mapping[str, Any], restriction: tuple[str, ...]) -> tuple[str, Any]:
    """(option, value) of the first option of ``restriction`` that is set in ``options``, else ("", None)."""
    for key in restriction:
        if options.get(key) not in (None, ""):
            return key, options[key]
    return "", None


def cut(
    path: Path,
    kind: str,
    options: Mapping[str, Any] = {},  # noqa: B006 - read only
    restriction: tuple[str, ...] = (),
    restrict: Callable[[list[Any], str, Any], list[Any]] = first_n,
) -> tuple[Any, list[Any], list[Any]]:
    """(head, selection records, held-out records) of a dev file of format ``kind``: the part of dev the
    user chose (``restrict`` with the first option of ``restriction`` set in ``options``), halved."""
    # line endings kept as the file has them (SemEval's are CRLF), so the halves end their lines as it does
    head, records = FORMATS[kind].read(read_text(path))
    key, value = restricted(options, restriction)
    if key:
        records = restrict(records, key, value)
    try:
        select, held = split_half(len(records))
    except ValueError:
        raise SpanBertError(f"{path}: found {len(records)} record(s), expected at least 2 to split dev into a "
                            f"selection half and a held-out half (or give a test file)") from None  # fmt: skip
    return head, [records[i] for i in select], [records[i] for i in held]


def record(dev: Path, select: list[Any], held: list[Any]) -> dict[str, Any]:
    """What a split says of itself (a study keeps it beside the halves)."""
    return {"dev": str(dev), "seed": HELDOUT_SEED, "records": len(select) + len(held), "select": len(select),
            "heldout": len(held)}  # fmt: skip


@dataclass(frozen=True)
class RecordSplit:
    """The dev split of a task whose dev set is one file of records: the halves are files of the same
    format, ``select<suffix>`` and ``heldout<suffix>``."""

    suffix: str
    """File suffix of the halves (``.json``)."""
    kind: str
    """The format of the file (a key of `FORMATS`)."""
    restriction: tuple[str, ...] = ()
    """Options that restrict dev, applied before the cut (`spanbert.tasks.spec.DevSplit.restriction`)."""
    restrict: Callable[[list[Any], str, Any], list[Any]] = first_n
    """(records, option, value) -> the records the option keeps (default: the first N)."""

    def __post_init__(self) -> None:
        if self.kind not in FORMATS:
            raise ValueError(f"found record format {self.kind!r}, expected one of: {', '.join(FORMATS)}")

    def halves(self, train: str, dev: str, options: Mapping[str, Any], folder: Path) -> tuple[Path, Path] | None:
        return folder / f"select{self.suffix}", folder / f"heldout{self.suffix}"

    def split(self, train: str, dev: str, options: Mapping[str, Any], folder: Path) -> dict[str, Any]:
        head, select, held = cut(Path(dev), self.kind, options, self.restriction, self.restrict)
        for path, part in zip(self.halves(train, dev, options, folder) or (), (select, held)):
            with atomic_write(path, newline="") as f:
                f.write(FORMATS[self.kind].write(head, part))
        return record(Path(dev), select, held)
