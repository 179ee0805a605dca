"""Running one `spanbert` command in this process, as a cell does, and reading back what it printed
and wrote (the last JSON object of a log, the numbers of a results file); the study's own small
files written atomically."""

from __future__ import annotations

import contextlib
import csv
import json
import traceback
from pathlib import Path
from typing import Any

from spanbert import cli, distributed, folders
from spanbert.errors import SpanBertError
from spanbert.utils import atomic_write


def run_command(argv: list[str], log: Path) -> tuple[int, str]:
    """Run one `spanbert` command in this process with its output in ``log``; (exit code, last line)."""
    folders.make_folders(log.parent)
    name = log.name if distributed.is_main() else f"{log.stem}.rank{distributed.rank()}{log.suffix}"
    folders.record(log.parent / name)
    with open(log.parent / name, "a", encoding="utf-8") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        print(f"$ spanbert {' '.join(argv)}", flush=True)
        try:
            code = cli._run(argv)  # not cli.main: that would also leave the process group
        except SpanBertError as e:
            print(f"error: {e}", flush=True)
            code = 2
        except KeyboardInterrupt:
            raise
        except Exception as e:  # noqa: BLE001 - a failed cell is reported with its log, the study stops
            traceback.print_exc()
            print(f"error: {type(e).__name__}: {e}", flush=True)
            code = 1
    last = ""
    with contextlib.suppress(OSError):
        lines = [x for x in (log.parent / name).read_text(encoding="utf-8", errors="replace").splitlines() if x.strip()]
        last = lines[-1] if lines else ""
    return code, last


def flat_numbers(d: Any, prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out.setdefault(str(k), float(v))
            elif isinstance(v, dict):
                for kk, vv in flat_numbers(v).items():
                    out.setdefault(kk, vv)
    return out


def last_json(text: str) -> dict[str, Any]:
    """The last JSON object a command printed (evaluate commands print their metrics as JSON)."""
    end = text.rfind("}")
    while end != -1:
        start = text.rfind("{", 0, end)
        while start != -1:
            try:
                value = json.loads(text[start : end + 1])
                if isinstance(value, dict):
                    return flat_numbers(value)
            except ValueError:
                pass
            start = text.rfind("{", 0, start)
        end = text.rfind("}", 0, end)
    return {}


def write_json(path: Path, data: Any) -> None:
    with atomic_write(path) as f:
        f.write(json.dumps(data, indent=2) + "\n")


def write_csv(path: Path, rows: list[list[str]]) -> None:
    with atomic_write(path, newline="") as f:
        csv.writer(f).writerows(rows)
