"""Running a study's work in this process with its output in a log (`in_log`: a task action through the
Python API, `spanbert.tasks`; pre-training, the tokenizer and preprocessing through their Python entries);
and the study's own small files written atomically.

Values come back as return values (`spanbert.tasks.Results`); a log is written for the reader, never
read back for a number.
"""

from __future__ import annotations

import contextlib
import csv
import math
import traceback
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

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


def options_argv(options: Mapping[str, Any]) -> list[str]:
    """Keyword options as the command line that means the same: ``--key value`` (a list: every item; a
    boolean: ``true``/``false``, which every switch takes; None: left unset). The one spelling of a run's
    options a study records (a cell's identity, kept in its marker) and writes at the top of its log."""
    argv: list[str] = []
    for key, value in options.items():
        if isinstance(value, bool):
            argv += [f"--{key}", "true" if value else "false"]
        elif isinstance(value, (list, tuple)):
            argv += [f"--{key}", *map(str, value)]
        elif isinstance(value, float) and not math.isfinite(value):
            raise SpanBertError(f"option {key}: found {value}, expected a finite number")
        elif isinstance(value, Mapping):
            raise SpanBertError(f"option {key}: found a mapping, expected a value (options are flat)")
        elif value is not None:
            argv += [f"--{key}", str(value)]
    return argv


def write_csv(path: Path, rows: list[list[str]]) -> None:
    with atomic_write(path, newline="") as f:
        csv.writer(f).writerows(rows)
