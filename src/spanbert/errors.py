"""User-facing errors: the CLI prints these as one clear message instead of a traceback."""

from __future__ import annotations

import errno
import os


class SpanBertError(Exception):
    """A mistake in the user's input or configuration (not a bug in spanbert)."""


def in_keywords(message: str, prog: str, call: str) -> str:
    """A command's error as a Python caller reads it: each option ``--name`` (``--name-x``) spelled as the
    keyword ``name`` (``name_x``), the command ``prog`` as the ``call`` that ran it, and the "command line"
    it says a value came from dropped. Text in backticks (a command to run) keeps its flags."""
    out, quoted, i = [], False, 0
    message = message.replace(f"{prog}: ", f"{call}: ").replace("command line: ", "")
    while i < len(message):
        c = message[i]
        if c == "`":
            quoted = not quoted
        if not quoted and message.startswith("--", i) and (i == 0 or not (message[i - 1].isalnum() or message[i - 1] in "-_")):
            j = i + 2
            while j < len(message) and (message[j].isalnum() or message[j] in "-_"):
                j += 1
            if j > i + 2 and message[i + 2].isalpha():
                out.append(message[i + 2 : j].replace("-", "_"))
                i = j
                continue
        out.append(c)
        i += 1
    return "".join(out)


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


def decode_utf8(data: bytes, source: object, expected: str = "UTF-8 text") -> str:
    """``data`` decoded as UTF-8 (a leading byte-order mark dropped), or a DataError naming ``source``,
    the line and the byte offset of the first byte that is not UTF-8. Decode whole files with this, not
    through a text stream: a stream decodes in chunks and reports offsets inside the chunk."""
    bom = 3 if data.startswith(b"\xef\xbb\xbf") else 0
    try:
        return data[bom:].decode("utf-8")
    except UnicodeDecodeError as e:
        start = bom + e.start
        line = data.count(b"\n", 0, start) + 1
        raise DataError(
            source, f"found bytes that are not UTF-8 ({e.reason} at byte {start}); expected {expected}", line=line
        ) from None


def utf8_argument(value: str, option: str) -> str:
    """A command-line text argument (``--text``) checked to be UTF-8. Python keeps the bytes of argv
    that are not UTF-8 as lone surrogates (PEP 383), which tokenizers reject with a bare TypeError;
    this names the option and the byte offset instead."""
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        data = os.fsencode(value)  # the argument's bytes as the shell passed them
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise SpanBertError(
                f"{option}: found bytes that are not UTF-8 ({e.reason} at byte {e.start}: "
                f"{data[e.start : e.start + 1]!r}); expected UTF-8 text"
            ) from None
        raise SpanBertError(f"{option}: found text that cannot be written as UTF-8; expected UTF-8 text") from None


# ---------------------------------------------------------------------------------------------
# A full disk


class NoSpaceError(SpanBertError):
    """A write that failed for want of space or quota; ``path`` is the destination, left as it was."""

    def __init__(self, path: str | os.PathLike, reason: str) -> None:
        super().__init__(
            f"{path}: found {reason} while writing it, expected room for the output; {path} is left as it was "
            f"before this write (free some space, or choose another output folder, and run again)"
        )
        self.path = str(path)
        self.reason = reason


_SPACE_WORDS = {
    "no space left on the device": ("No space left on device", "os error 28", "StorageFull"),
    "the disk quota used up": ("Disk quota exceeded", "os error 122", "QuotaExceeded", "FilesystemQuotaExceeded"),
}


def out_of_space(error: BaseException, folder: str | os.PathLike | None = None) -> str | None:
    """Why ``error`` is a write that ran out of room ("no space left on the device", "the disk quota used
    up"), or None when it is another failure. Each writer says it its own way: an OSError with ENOSPC or
    EDQUOT (Python's files), a SafetensorError quoting the OS error, and torch.save's RuntimeError from
    its zip writer that says only "unexpected pos"; that one is taken as a full disk when ``folder``'s
    file system has nothing left (statvfs)."""
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return "no space left on the device" if e.errno == errno.ENOSPC else "the disk quota used up"
        text = str(e)
        for reason, words in _SPACE_WORDS.items():
            if any(w in text for w in words):
                return reason
        if isinstance(e, RuntimeError) and "inline_container" in text and folder is not None:
            try:
                st = os.statvfs(folder)
            except OSError:
                return None
            if st.f_bavail * st.f_frsize < (1 << 20):  # under 1 MiB left: the zip writer hit the end
                return "no space left on the device"
        e = e.__cause__ or e.__context__
    return None
