"""User-facing errors: the CLI prints these as one clear message instead of a traceback."""

from __future__ import annotations


class SpanBertError(Exception):
    """A mistake in the user's input or configuration (not a bug in spanbert)."""


class DataError(SpanBertError):
    """Bad input data. Names the file, the line or record, what was found and what was expected."""

    def __init__(self, path: object, message: str, line: int | None = None, record: str | None = None):
        where = str(path)
        if line is not None:
            where += f":{line}"
        if record is not None:
            where += f" (record {record})"
        super().__init__(f"{where}: {message}")
        self.path = str(path)
        self.line = line
        self.record = record
