"""Held-out scores: what selection did not see (issue 23.10).

A cell's dev score was used twice for selection (the best evaluation inside the run, then the best
learning rate), so it is optimistic. Every cell is therefore also scored on data neither selection
saw: the task's test split where the study names one (ner, semeval, tacred, parse; LitBank's fold
test), else the held-out half of dev: dev is split once, by record, with a fixed seed; the cells
select on one half and are scored on the other (SpanBERT §4.1 does this for MRQA). The dev file
formats a dev half is cut from are each task's `TaskSpec.dev_split` (suffix, kind of record).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spanbert import distributed, folders
from spanbert.errors import SpanBertError
from spanbert.study.layout import Cell, heldout_dir, litbank_fold_dir
from spanbert.study.runner import last_json, run_command, write_json
from spanbert.study.spec import Study, TaskSpec, task_head
from spanbert.tasks import TASKS
from spanbert.tasks.common import HELDOUT_SEED, split_half  # noqa: F401 -- the split, shared with `finetune glue --heldout_half`
from spanbert.tasks.glue import GLUE_TASKS, glue_task
from spanbert.tasks.qa import _parse_slice
from spanbert.utils import atomic_write


@dataclass
class HeldOut:
    """Where a task's cells select and where they are scored afterwards."""

    source: str
    """"test" (the study's test file, or LitBank's fold test) or "dev half" (the other half of dev)."""
    select: str
    """The dev data the cells select on: the whole dev set, or its selection half (file or GLUE folder)."""
    heldout: str
    """The data every cell is scored on afterwards."""


def heldout_plan(study: Study, t: TaskSpec, fold: int | None = None) -> HeldOut | None:
    """The held-out data of a task's cells (nothing is written); None when the task has none (a GLUE
    task with several dev files, parse without a test file)."""
    if fold is not None:
        folder = litbank_fold_dir(study, fold)
        return HeldOut("test", str(folder / "dev.conll"), str(folder / "test.conll"))
    if t.test:
        return HeldOut("test", t.dev, t.test)
    split = TASKS[t.task].dev_split
    if split is None:
        return None
    if t.task == "glue":
        spec = glue_task(t.glue_task)
        if spec.dev != GLUE_TASKS["SST-2"].dev or spec.headerless or not (Path(t.train) / "dev.tsv").is_file():
            return None  # MNLI's two dev files, CoLA's raw release: not split (said in the table)
    suffix = split.suffix
    d = heldout_dir(study, t)
    return HeldOut("dev half", str(d / f"select{suffix}"), str(d / f"heldout{suffix}"))


def _read_text(path: Path) -> str:

    # newline="": the halves keep the file's line endings (SemEval's are CRLF)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", newline="") as f:
        return f.read()


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
        else:
            if starts(line):
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


def dev_restriction(t: TaskSpec) -> tuple[str, Any]:
    """(option, value) of a task option that restricts dev (SQuAD/MRQA ``validation_articles``, GLUE
    ``max_eval_examples``), else ("", None). With a dev half it is applied before the split, so both
    halves come from the part of dev the user chose, and it is left out of the cells' options."""
    split = TASKS[t.task].dev_split
    for key in split.restriction if split else ():
        if t.options.get(key) not in (None, ""):
            return key, t.options[key]
    return "", None


def split_dev(study: Study, t: TaskSpec) -> None:
    """Write the selection half and the held-out half of ``t``'s dev data (once; rank 0) into
    OUT/shared/heldout/<task>/, each in the task's own format."""
    if t.folds:  # LitBank's folds: each cell is scored on its fold's test file, no dev set is split
        return
    plan_ = heldout_plan(study, t)
    if plan_ is None or plan_.source != "dev half":
        return
    out = heldout_dir(study, t)
    done = out / "split.json"
    if done.is_file():
        return
    folders.make_folders(out)
    kind = TASKS[t.task].dev_split.kind
    dev = Path(t.train) / "dev.tsv" if t.task == "glue" else Path(t.dev)
    head: Any
    if kind == "squad-articles":
        data = json.loads(_read_text(dev))
        head, records = data, data["data"]
    elif kind == "json-list":
        head, records = None, json.loads(_read_text(dev))
    else:
        lines = _read_text(dev).splitlines(keepends=True)
        if kind == "jsonl-after-header":
            has_header = bool(lines) and "header" in json.loads(lines[0])
            head, records = lines[:has_header], lines[has_header:]
        elif kind in ("rows-after-header", "glue-rows"):
            head, records = lines[:1], [x for x in lines[1:] if x.strip()]
        elif kind == "blank-line-blocks":
            head, records = _blocks(lines)
        else:  # conll-documents
            head, records = _blocks(lines, starts=lambda x: x.startswith("#begin document"))
    if kind not in ("squad-articles", "json-list"):
        eol = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
        for r in records if kind in ("blank-line-blocks", "conll-documents") else []:
            if not r[-1].endswith("\n"):
                r[-1] += eol
            if kind == "blank-line-blocks" and r[-1].strip():
                r.append(eol)  # the file's last record had no blank line after it
        records = [r if isinstance(r, list) or r.endswith("\n") else r + eol for r in records]
    key, value = dev_restriction(t)
    if key == "validation_articles":  # the user's slice of dev, then its halves
        records = records[_parse_slice(str(value))]
    elif key == "max_eval_examples":
        records = records[: int(value)]
    try:
        halves = split_half(len(records))
    except ValueError:
        raise SpanBertError(f"{dev}: found {len(records)} record(s), expected at least 2 to split dev into a "
                            f"selection half and a held-out half (or give a test: file)") from None  # fmt: skip
    for name, idx in zip(("select", "heldout"), halves):
        part = [records[i] for i in idx]
        suffix = TASKS[t.task].dev_split.suffix
        if kind == "glue-rows":
            folder = out / name
            folder.mkdir(exist_ok=True)
            for f in ("train.tsv",):  # the task folder's training file, linked, not copied
                with contextlib.suppress(FileExistsError):  # shards of one study may split at once
                    (folder / f).symlink_to((Path(t.train) / f).resolve())
            target, text = folder / "dev.tsv", "".join(head + part)
        elif kind == "squad-articles":
            target, text = out / f"{name}{suffix}", json.dumps({**head, "data": part})
        elif kind == "json-list":
            target, text = out / f"{name}{suffix}", json.dumps(part)
        elif kind in ("blank-line-blocks", "conll-documents"):
            target, text = out / f"{name}{suffix}", "".join(head + [x for r in part for x in r])
        else:
            target, text = out / f"{name}{suffix}", "".join(head + part)
        with atomic_write(target, newline="") as f:
            f.write(text)
    write_json(done, {"dev": str(dev), "seed": HELDOUT_SEED, "records": len(records),
                       "select": len(halves[0]), "heldout": len(halves[1])})  # fmt: skip


def score_heldout(cell: Cell, t: TaskSpec, h: HeldOut) -> dict[str, Any]:
    """Score a finished cell's selected model (its folder) on the held-out data; the numbers the
    evaluation printed, the headline under "score"."""
    d = cell.dir
    log = d / "heldout_log.txt"
    steps = TASKS[t.task].heldout_commands(str(d), h.heldout, task_head(t))
    text = ""
    for argv in steps:
        start = distributed.on_main(lambda: log.stat().st_size if log.is_file() else 0)
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            code, last = run_command(argv, log)
        if code != 0:
            raise SpanBertError(f"study: scoring {cell.label} on {h.heldout} failed: {last}; see {log}")
        text = distributed.on_main(lambda s=start: log.read_bytes()[s:].decode("utf-8", errors="replace"))
    numbers = last_json(text)
    key = TASKS[t.task].metric
    for k in (key, f"eval_{key}", f"test_{key}"):
        if k in numbers:
            return {"score": numbers[k], **numbers}
    raise SpanBertError(f"study: scoring {cell.label} on {h.heldout} printed no {key!r}; see {log}")


_LEGACY: dict[str, bool] = {}


def study_is_legacy(study: Study) -> bool:
    """`legacy_folder`, read once per folder and process (`plan` asks for every cell; a folder cannot
    become legacy later: every cell this code finishes records its held-out score)."""
    key = str(Path(study.output_dir).resolve())
    if key not in _LEGACY:
        _LEGACY[key] = legacy_folder(study)
    return _LEGACY[key]


def legacy_folder(study: Study) -> bool:
    """True when the study's folder holds fine-tuning cells finished before held-out scoring (their
    result.json has no "heldout_source"): the folder keeps selecting on the whole dev set, so its
    cells stay comparable, and its table says that no held-out score exists."""
    root = Path(study.output_dir) / "finetune"
    for marker in root.glob("*/*/*/result.json") if root.is_dir() else []:
        with contextlib.suppress(OSError, ValueError):
            if "heldout_source" not in json.loads(marker.read_text()):
                return True
    return False
