"""Sparse per-segment indexes: offset -> file position, and timestamp -> offset.

Both keep their entries in memory as compact arrays (looked up by binary search, so a
read at any offset is O(log n)) and append them to a file, which is fsynced with the
segment. An index file is only an accelerator: it can always be rebuilt from the
segment, which is what recovery does when one is missing or stale.

Entry formats (little-endian, as Kafka's):
    offset index: relative offset int32, position int32
    time index:   timestamp int64, relative offset int32
"""

from __future__ import annotations

import bisect
import contextlib
import os
from array import array

import numpy as np

_OFFSET_ENTRY = np.dtype([("relative_offset", "<i4"), ("position", "<i4")])
_TIME_ENTRY = np.dtype([("timestamp", "<i8"), ("relative_offset", "<i4")])


def _increasing(values: array, minimum: int) -> bool:
    """Whether ``values`` increase strictly from at least ``minimum``."""
    if not values:
        return True
    data = np.frombuffer(values, dtype=np.int64)
    return bool(data[0] >= minimum and (len(data) == 1 or (np.diff(data) > 0).all()))


class _IndexFile:
    """An append-only file of fixed-size entries, opened on the first write."""

    def __init__(self, path: str, dtype: np.dtype) -> None:
        self.path = path
        self._dtype = dtype
        self._file = None

    def load(self) -> np.ndarray | None:
        """The entries on disk, or None when the file is missing."""
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        whole = len(data) - len(data) % self._dtype.itemsize
        return np.frombuffer(data[:whole], dtype=self._dtype)

    def append(self, entries: np.ndarray, fsync: bool) -> None:
        """Write ``entries`` at the end; with ``fsync`` make the file durable."""
        if self._file is None:
            self._file = open(self.path, "ab")  # noqa: SIM115 - kept open for appends
        if len(entries):
            self._file.write(entries.tobytes())
        self._file.flush()
        if fsync:
            os.fsync(self._file.fileno())

    def rewrite(self, entries: np.ndarray) -> None:
        """Replace the file with exactly ``entries`` (after truncation or rebuild)."""
        self.close()
        with open(self.path, "wb") as f:
            f.write(entries.tobytes())

    @property
    def is_open(self) -> bool:
        return self._file is not None

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def delete(self) -> None:
        self.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


class _PairIndex:
    """Two parallel arrays of int64 (searched by bisect) mirrored in an entry file.

    Subclasses say how an entry file's fields map to the two arrays; this class keeps
    the arrays and the file in step through appends, truncation, reset and reload.
    An append only extends the arrays; the entries past ``_written`` are packed and
    written together when the segment is flushed, so appending costs no packing.
    """

    _dtype: np.dtype

    def __init__(self, path: str, base_offset: int) -> None:
        self.base_offset = base_offset
        self._file = _IndexFile(path, self._dtype)
        self._first = array("q")
        self._second = array("q")
        self._written = 0

    @property
    def path(self) -> str:
        return self._file.path

    def __len__(self) -> int:
        return len(self._first)

    def load(self) -> bool:
        """Load the entries from disk; False when the file is missing."""
        entries = self._file.load()
        if entries is None:
            return False
        first, second = self._from_entries(entries)
        self._first = array("q", first.astype(np.int64))
        self._second = array("q", second.astype(np.int64))
        self._written = len(self._first)
        return True

    def _truncate(self, keep: int) -> None:
        del self._first[keep:]
        del self._second[keep:]
        self._file.rewrite(self._entries(0))
        self._written = len(self._first)

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        self._truncate(0)

    def _entries(self, start: int) -> np.ndarray:
        """The entries from ``start`` on, in the file's format."""
        first = np.frombuffer(self._first, dtype=np.int64)[start:]
        second = np.frombuffer(self._second, dtype=np.int64)[start:]
        return self._to_entries(first, second)

    def _from_entries(self, entries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def _to_entries(self, first: np.ndarray, second: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def flush(self, fsync: bool) -> None:
        """Write the entries added since the last flush; with ``fsync`` make them durable."""
        self._file.append(self._entries(self._written), fsync)
        self._written = len(self._first)

    def close(self) -> None:
        """Write unwritten entries if the file is open (a flushed segment), and close it."""
        if self._file.is_open and self._written < len(self._first):
            self._file.append(self._entries(self._written), fsync=False)
            self._written = len(self._first)
        self._file.close()

    def delete(self) -> None:
        self._file.delete()


class OffsetIndex(_PairIndex):
    """Maps offsets to file positions for a segment starting at ``base_offset``.

    Invariant: entries are strictly increasing in both offset and position, and each
    entry points at the first byte of a batch whose base offset is the entry's offset.
    """

    _dtype = _OFFSET_ENTRY

    def _from_entries(self, entries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return entries["relative_offset"].astype(np.int64) + self.base_offset, entries["position"]

    def _to_entries(self, offsets: np.ndarray, positions: np.ndarray) -> np.ndarray:
        entries = np.empty(len(offsets), dtype=_OFFSET_ENTRY)
        entries["relative_offset"] = offsets - self.base_offset
        entries["position"] = positions
        return entries

    def append(self, offset: int, position: int) -> None:
        """Add an entry for the batch starting at ``offset`` stored at ``position``."""
        self._first.append(offset)
        self._second.append(position)

    def is_sane(self) -> bool:
        """Whether the loaded entries keep the invariant (else the file is garbage); the
        first entry is the segment's first batch, at position 0."""
        if self._second and self._second[0] != 0:
            return False
        return _increasing(self._first, self.base_offset) and _increasing(self._second, 0)

    def lookup(self, offset: int) -> tuple[int, int]:
        """The last entry at or below ``offset`` as (offset, position): where a scan for
        ``offset`` starts. Below the first entry, the first entry (its batch starts the
        segment); (base, 0) when the index is empty."""
        i = bisect.bisect_right(self._first, offset) - 1
        if i < 0:
            return (self._first[0], self._second[0]) if self._first else (self.base_offset, 0)
        return self._first[i], self._second[i]

    def last(self) -> tuple[int, int]:
        """The last entry, or (base_offset, 0) when empty."""
        if not self._first:
            return self.base_offset, 0
        return self._first[-1], self._second[-1]

    def truncate_to_position(self, position: int) -> None:
        """Drop entries at or after ``position`` (the segment was cut there)."""
        self._truncate(bisect.bisect_left(self._second, position))


class TimeIndex(_PairIndex):
    """Maps timestamps to offsets for one segment.

    Each entry ``(t, o)`` means: every batch before offset ``o`` has a max timestamp
    <= ``t``. Entries are strictly increasing in timestamp and offset, so the search for
    "first offset with timestamp >= target" can start at the last entry with t < target.
    """

    _dtype = _TIME_ENTRY

    def _from_entries(self, entries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return entries["timestamp"], entries["relative_offset"].astype(np.int64) + self.base_offset

    def _to_entries(self, timestamps: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        entries = np.empty(len(timestamps), dtype=_TIME_ENTRY)
        entries["timestamp"] = timestamps
        entries["relative_offset"] = offsets - self.base_offset
        return entries

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add ``(timestamp, offset)`` if it extends the index monotonically."""
        timestamps = self._first
        if timestamps and (timestamp <= timestamps[-1] or offset <= self._second[-1]):
            return
        timestamps.append(timestamp)
        self._second.append(offset)

    def is_sane(self, last_offset: int) -> bool:
        """Whether the entries increase and stop at ``last_offset`` (the offset index's
        last entry: both indexes gain entries together)."""
        if self._second and self._second[-1] > last_offset:
            return False
        return _increasing(self._first, -(2**63)) and _increasing(self._second, self.base_offset)

    def lookup(self, timestamp: int) -> int:
        """An offset from which to scan for the first record with timestamp >= target."""
        i = bisect.bisect_left(self._first, timestamp) - 1
        return self.base_offset if i < 0 else self._second[i]

    def last_timestamp(self) -> int:
        """The newest timestamp indexed, or -1."""
        return self._first[-1] if self._first else -1

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries at or after ``offset``."""
        self._truncate(bisect.bisect_left(self._second, offset))
