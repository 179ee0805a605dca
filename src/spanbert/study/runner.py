"""Running a study's work in this process with its output in a log (`in_log`: a task action through the
Python API, `spanbert.tasks`; pre-training, the tokenizer and preprocessing through their Python entries);
and the study's own small files written atomically.

Values come back as return values (`spanbert.tasks.Results`); a log is written for the reader, never
read back for a number.
"""

from __future__ import annotations

import contextlib
import csv
import traceback
from collections.abc import Iterator
from pathlib import Path

from spanbert import distributed, folders
from spanbert.errors import SpanBertError
from spanbert.utils import atomic_write


@contextlib.contextmanager
def in_log(log: Path, title: str) -> Iterator[None]:
    """Run the body with its stdout and stderr appended to ``log`` (``NAME.rankN.txt`` on the other ranks
    of a torchrun job), after a first line ``$ title``. A failure is written into the log (a traceback for
    an unexpected one) and raised again as one `SpanBertError` line, the log's last."""
    folders.make_folders(log.parent)
    path = log if distributed.is_main() else log.parent / f"{log.stem}.rank{distributed.rank()}{log.suffix}"
    folders.record(path)
    with open(path, "a", encoding="utf-8") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        print(f"$ {title}", flush=True)
        try:
            yield
        except SpanBertError as e:
            print(f"error: {e}", flush=True)
            raise SpanBertError(str(e)) from None
        except KeyboardInterrupt:
            raise
        except Exception as e:  # noqa: BLE001 - a failed cell is reported with its log, the study stops
            traceback.print_exc()
            print(f"error: {type(e).__name__}: {e}", flush=True)
            raise SpanBertError(f"{type(e).__name__}: {e}") from None


def write_csv(path: Path, rows: list[list[str]]) -> None:
    with atomic_write(path, newline="") as f:
        csv.writer(f).writerows(rows)
