"""The token arrays of a corpus's shards, memory-mapped when first read and a bounded number at a time.

A memory map holds a file descriptor for as long as it lives (Python's `mmap` keeps a duplicate of the
file's), so a corpus that mapped every shard's ``.ids`` and ``.starts`` at opening held two per shard:
under the usual ``ulimit -n 1024`` a corpus of ~500 shards (~51 B tokens at 100 M a shard) failed with
a bare ``OSError: [Errno 24] Too many open files``. `ShardArrays` maps a shard when a read first needs
it and keeps at most `map_limit` maps open, closing the least recently used (a shard is one map when its
word starts are derived from the ids, `spanbert.corpus`, two otherwise). When the process's soft limit
is low and the hard limit allows more, the soft limit is raised to what the corpus needs (an ordinary
process may, up to the hard limit). A limit too low for even a few maps, or a map refused for lack of
descriptors after the others were closed, is a `SpanBertError` that names ``ulimit -n``.
"""

from __future__ import annotations

import collections
import errno
import mmap  # noqa: F401 - np.memmap imports it at its first map: loaded now, not when descriptors may have run out
from pathlib import Path

import numpy as np

from spanbert.errors import SpanBertError

MIN_DESCRIPTORS = 64
"""Below this soft limit on open files a training process is refused: torch, its process group and the
data loader need some of them besides the corpus's maps."""
MAP_SHARE = 4
"""At most 1/MAP_SHARE of the open-file limit goes to the corpus's maps (the rest: everything else)."""

try:
    import resource
except ImportError:  # not on Windows: no limit to read, no limit to raise
    resource = None  # type: ignore[assignment]


def descriptor_limit(wanted: int | None = None) -> int:
    """The soft limit on open files, first raised towards ``wanted`` (at most the hard limit) when it is lower."""
    if resource is None:
        return 1 << 16
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if wanted is not None and soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        if target > soft:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
                soft = target
            except (ValueError, OSError):
                pass
    return 1 << 30 if soft == resource.RLIM_INFINITY else int(soft)


def _ulimit_error(path: Path, limit: int, what: str) -> SpanBertError:
    return SpanBertError(
        f"{path}: {what} (the limit on open files, ulimit -n, is {limit}); expected a limit of at least "
        f"{MIN_DESCRIPTORS}: raise it (ulimit -n 4096) and start again"
    )


class ShardArrays:
    """The ``.ids`` (and ``.starts``) memory maps of a corpus's shards, opened on first use, at most
    ``map_limit`` at a time. ``names[k]`` is shard k's path without suffix, ``sizes[k]`` its tokens,
    ``stored_starts[k]`` whether it has a ``.starts`` file (else its word starts are ``table[ids]``)."""

    def __init__(self, names: list[Path], sizes: list[int], dtype: np.dtype, stored_starts: list[bool],
                 table: np.ndarray | None):  # fmt: skip
        self.names, self.sizes, self.dtype = names, sizes, np.dtype(dtype)
        self.stored_starts, self.table = stored_starts, table
        maps_per_shard = 1 + (sum(stored_starts) > 0)
        wanted = len(names) * maps_per_shard * MAP_SHARE + MIN_DESCRIPTORS
        self.descriptors = descriptor_limit(wanted)
        if self.descriptors < MIN_DESCRIPTORS and names:
            raise _ulimit_error(names[0].parent, self.descriptors, "too few open files allowed to read a corpus")
        self.map_limit = max(2, self.descriptors // MAP_SHARE // maps_per_shard)
        """Shards mapped at most at once."""
        self._open: collections.OrderedDict[int, tuple[np.ndarray, np.ndarray | None]] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self.names)

    def arrays(self, k: int) -> tuple[np.ndarray, np.ndarray | None]:
        """(ids, stored word starts as bool or None) of shard k: plain-ndarray views of its memory maps (slicing
        numpy's memmap subclass costs ~3 µs a call in Python, which adds up over every example)."""
        got = self._open.get(k)
        if got is not None:
            self._open.move_to_end(k)
            return got
        while len(self._open) >= self.map_limit:
            self._open.popitem(last=False)  # its maps close when the last view of them goes
        got = self._map(k)
        self._open[k] = got
        return got

    def _map(self, k: int) -> tuple[np.ndarray, np.ndarray | None]:
        n = self.sizes[k]
        for attempt in (0, 1):
            try:
                if n == 0:
                    return np.zeros(0, self.dtype), (np.zeros(0, bool) if self.stored_starts[k] else None)
                ids = np.asarray(np.memmap(f"{self.names[k]}.ids", dtype=self.dtype, mode="r", shape=(n,)))
                starts = None
                if self.stored_starts[k]:
                    starts = np.asarray(np.memmap(f"{self.names[k]}.starts", dtype=np.uint8, mode="r", shape=(n,)))
                    starts = starts.view(bool)  # uint8 0/1 flags as bool
                return ids, starts
            except OSError as e:
                if e.errno not in (errno.EMFILE, errno.ENFILE):
                    raise
                if attempt == 0:
                    self._open.clear()  # give the descriptors of every other map back, then try once more
                    continue
                raise _ulimit_error(self.names[k], descriptor_limit(), "found no free file descriptor to map it") from None
        raise AssertionError("unreachable")

    def tokens(self, k: int, a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
        """(ids, word starts) of shard k's positions [a, b): views of the maps, or the starts ``table[ids]``."""
        ids, starts = self.arrays(k)
        ids = ids[a:b]
        return ids, (starts[a:b] if starts is not None else self.table[ids])

    def close(self) -> None:
        self._open.clear()


__all__ = ["MIN_DESCRIPTORS", "ShardArrays", "descriptor_limit"]
