"""Sparse per-segment indexes: offset -> file position, and timestamp -> offset.

As Kafka's OffsetIndex and TimeIndex: fixed-size entries in a file that is memory-mapped,
and looked up by binary search over the mapping, so a read at any offset is O(log n)
and the entries live in the page cache, not in the process's heap (a replica holds no
copy of its indexes; the kernel pages them in and out as reads need them). The active
segment's index file is preallocated (:data:`PREALLOCATED_BYTES`, Kafka's
``segment.index.bytes`` default, as a sparse file) so that an append writes an entry
into the mapping with no system call; it is trimmed to its entries when the segment
stops taking appends (roll, close, recovery), so a closed segment's file holds exactly
its entries. An index file is only an accelerator: it can always be rebuilt from the
segment, which is what recovery does when one is missing, damaged or stale (a crash
leaves the active segment's file at its preallocated size, zeros past its entries,
which the sanity checks reject).

Entry formats (little-endian):
    offset index: relative offset int32, position int32
    time index:   timestamp int64, relative offset int32

Not thread-safe: the owning segment's log serializes calls.
"""

from __future__ import annotations

import bisect
import contextlib
import mmap
import os
import struct
import sys

import numpy as np

PREALLOCATED_BYTES = 10 * 1024 * 1024
"""What an index file is grown to when its segment takes appends (Kafka's
``segment.index.bytes`` default); it doubles if a segment ever needs more."""

_NATIVE = sys.byteorder == "little"
"""Whether the entries' int32 fields can be read and written as native ints, through a
memoryview over the mapping (the fast path of the offset index, whose lookups serve
reads, and whose appends serve every produce)."""

_OFFSET_ENTRY = np.dtype([("relative_offset", "<i4"), ("position", "<i4")])
_TIME_ENTRY = np.dtype([("timestamp", "<i8"), ("relative_offset", "<i4")])


def _increasing(values: np.ndarray, minimum: int) -> bool:
    """Whether ``values`` increase strictly from at least ``minimum``."""
    if not len(values):
        return True
    values = values.astype(np.int64)  # garbage must not wrap around in the differences
    return bool(values[0] >= minimum and (len(values) == 1 or (np.diff(values) > 0).all()))


class _MappedIndex:
    """A file of fixed-size entries, memory-mapped, of which the first ``len(self)``
    are valid.

    Invariant: the mapping covers the whole file, ``_slots`` entries; a file longer
    than its entries (preallocated room for appends) is cut back by :meth:`trim`. The
    mapping is the only open handle on the file (Python's mmap keeps its own
    descriptor); the file is opened briefly to grow, trim or fsync it.
    """

    _entry: struct.Struct
    _dtype: np.dtype

    def __init__(self, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._map: mmap.mmap | None = None
        self._slots = 0  # entries the file (and the mapping) has room for
        self._count = 0
        self._dirty = False  # changed since the last fsync

    def __len__(self) -> int:
        return self._count

    def load(self) -> bool:
        """Map the entries on disk (a partial last entry is ignored); False when the
        file is missing."""
        try:
            fd = os.open(self.path, os.O_RDWR)
        except FileNotFoundError:
            return False
        try:
            self._slots = os.fstat(fd).st_size // self._entry.size
            self._count = self._slots
            self._map_file(fd)
        finally:
            os.close(fd)
        return True

    def _map_file(self, fd: int) -> None:
        """Map the file's ``_slots`` entries (nothing when there are none)."""
        self._unmap()
        size = self._slots * self._entry.size
        self._map = mmap.mmap(fd, size) if size else None

    def _unmap(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None

    def _add(self, *fields: int) -> None:
        """Write the next entry into the mapping, growing the file when it is full."""
        count = self._count
        if count == self._slots:
            self._resize(max(self._slots * 2, PREALLOCATED_BYTES // self._entry.size))
        self._entry.pack_into(self._map, count * self._entry.size, *fields)
        self._count = count + 1
        self._dirty = True

    def _resize(self, slots: int) -> None:
        """Make the file (created if missing) ``slots`` entries long and map it again."""
        self._unmap()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, slots * self._entry.size)
            self._slots = slots
            self._map_file(fd)
        finally:
            os.close(fd)
        self._dirty = True

    def _field(self, index: int, field: int) -> int:
        return self._entry.unpack_from(self._map, index * self._entry.size)[field]

    def _search(self, field: int, value: int, right: bool) -> int:
        """Binary search of the entries' ``field`` for ``value`` over the mapping
        (as :func:`bisect.bisect_right` when ``right``, else ``bisect_left``)."""
        unpack_from, size, mapped = self._entry.unpack_from, self._entry.size, self._map

        def key(i: int) -> int:
            return unpack_from(mapped, i * size)[field]

        search = bisect.bisect_right if right else bisect.bisect_left
        return search(range(self._count), value, key=key)

    def _entries(self) -> np.ndarray:
        """The valid entries as a structured array over the mapping; callers keep it
        no longer than their call (a live view would keep the mapping from closing)."""
        if self._map is None:
            return np.empty(0, dtype=self._dtype)
        return np.frombuffer(self._map, dtype=self._dtype, count=self._count)

    def _truncate(self, keep: int) -> None:
        """Keep the first ``keep`` entries (the rest are overwritten or trimmed later)."""
        if keep < self._count:
            self._count = keep
            self._dirty = True

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        self._truncate(0)

    def trim(self) -> None:
        """Cut the file to its valid entries (its segment takes no more appends)."""
        if self._slots > self._count:
            self._resize(self._count)

    def flush(self, fsync: bool) -> None:
        """With ``fsync`` make the entries (and the file's size) durable; the file is
        created, empty, if it has none. Without, nothing to do: the entries are in the
        page cache already."""
        if not fsync:
            return
        if self._map is None and self._count == 0 and not os.path.exists(self.path):
            self._resize(0)
        if self._dirty:
            if self._map is not None:
                self._map.flush()
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            self._dirty = False

    def close(self) -> None:
        """Trim the file to its entries and unmap it (no fsync)."""
        if self._map is not None:
            self.trim()
        elif self._count == 0 and not os.path.exists(self.path):
            self._resize(0)  # an empty segment's index: present, so the next open trusts it
        self._unmap()

    def delete(self) -> None:
        """Unmap and remove the file."""
        self._unmap()
        self._slots = self._count = 0
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


class OffsetIndex(_MappedIndex):
    """Maps offsets to file positions for a segment starting at ``base_offset``.

    Invariant: entries are strictly increasing in both offset and position, and each
    entry points at the first byte of a batch whose base offset is the entry's offset.
    """

    _entry = struct.Struct("<ii")
    _dtype = _OFFSET_ENTRY

    def __init__(self, path: str, base_offset: int) -> None:
        super().__init__(path, base_offset)
        # Native views of the mapping (little-endian hosts): its int32s, and every
        # other one from the first and the second (the relative offsets, the positions).
        self._ints: memoryview | None = None
        self._relatives: memoryview | None = None
        self._positions: memoryview | None = None

    def _map_file(self, fd: int) -> None:
        super()._map_file(fd)
        if _NATIVE and self._map is not None:
            self._ints = memoryview(self._map).cast("i")
            self._relatives = self._ints[0::2]
            self._positions = self._ints[1::2]

    def _unmap(self) -> None:
        for view in (self._relatives, self._positions, self._ints):
            if view is not None:
                view.release()  # the mapping closes only once no view exports it
        self._ints = self._relatives = self._positions = None
        super()._unmap()

    def append(self, offset: int, position: int) -> None:
        """Add an entry for the batch starting at ``offset`` stored at ``position``."""
        ints = self._ints
        count = self._count
        if ints is None or count == self._slots:
            self._add(offset - self.base_offset, position)
            return
        ints[2 * count] = offset - self.base_offset
        ints[2 * count + 1] = position
        self._count = count + 1
        self._dirty = True

    def _search(self, field: int, value: int, right: bool) -> int:
        if self._relatives is None:
            return super()._search(field, value, right)
        search = bisect.bisect_right if right else bisect.bisect_left
        return search(self._positions if field else self._relatives, value, 0, self._count)

    def is_sane(self) -> bool:
        """Whether the loaded entries keep the invariant (else the file is garbage); the
        first entry is the segment's first batch, at position 0."""
        entries = self._entries()
        if len(entries) and entries["position"][0] != 0:
            return False
        return _increasing(entries["relative_offset"], 0) and _increasing(entries["position"], 0)

    def lookup(self, offset: int) -> tuple[int, int]:
        """The last entry at or below ``offset`` as (offset, position): where a scan for
        ``offset`` starts. Below the first entry, the first entry (its batch starts the
        segment); (base, 0) when the index is empty. A read at the tail (the usual one)
        costs one entry, any other a binary search."""
        count = self._count
        if not count:
            return self.base_offset, 0
        relative = offset - self.base_offset
        unpack_from, size = self._entry.unpack_from, self._entry.size
        last = unpack_from(self._map, (count - 1) * size)
        if relative >= last[0]:
            i = count - 1
        else:
            i = max(self._search(0, relative, right=True) - 1, 0)
            last = unpack_from(self._map, i * size)
        return last[0] + self.base_offset, last[1]

    def last(self) -> tuple[int, int]:
        """The last entry, or (base_offset, 0) when empty."""
        if not self._count:
            return self.base_offset, 0
        relative, position = self._entry.unpack_from(
            self._map, (self._count - 1) * self._entry.size
        )
        return relative + self.base_offset, position

    def truncate_to_position(self, position: int) -> None:
        """Drop entries at or after ``position`` (the segment was cut there)."""
        self._truncate(self._search(1, position, right=False))


class TimeIndex(_MappedIndex):
    """Maps timestamps to offsets for one segment.

    Each entry ``(t, o)`` means: every batch before offset ``o`` has a max timestamp
    <= ``t``. Entries are strictly increasing in timestamp and offset, so the search for
    "first offset with timestamp >= target" can start at the last entry with t < target.
    """

    _entry = struct.Struct("<qi")
    _dtype = _TIME_ENTRY

    def __init__(self, path: str, base_offset: int) -> None:
        super().__init__(path, base_offset)
        self._last: tuple[int, int] | None = None  # the last entry, once read or written

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add ``(timestamp, offset)`` if it extends the index monotonically."""
        relative = offset - self.base_offset
        last = self._last
        if last is None and self._count:
            last = self._entry.unpack_from(self._map, (self._count - 1) * self._entry.size)
        if last is not None and (timestamp <= last[0] or relative <= last[1]):
            self._last = last
            return
        count = self._count
        if count == self._slots:
            self._add(timestamp, relative)
        else:
            self._entry.pack_into(self._map, count * _TIME_ENTRY.itemsize, timestamp, relative)
            self._count = count + 1
            self._dirty = True
        self._last = (timestamp, relative)

    def load(self) -> bool:
        self._last = None
        return super().load()

    def _truncate(self, keep: int) -> None:
        self._last = None
        super()._truncate(keep)

    def delete(self) -> None:
        self._last = None
        super().delete()

    def is_sane(self, last_offset: int) -> bool:
        """Whether the entries increase and stop at ``last_offset`` (the offset index's
        last entry: both indexes gain entries together)."""
        entries = self._entries()
        relative = entries["relative_offset"]
        if len(relative) and relative[-1] > last_offset - self.base_offset:
            return False
        return _increasing(entries["timestamp"], -(2**63)) and _increasing(relative, 0)

    def lookup(self, timestamp: int) -> int:
        """An offset from which to scan for the first record with timestamp >= target."""
        i = self._search(0, timestamp, right=False) - 1
        return self.base_offset if i < 0 else self._field(i, 1) + self.base_offset

    def last_timestamp(self) -> int:
        """The newest timestamp indexed, or -1."""
        return self._field(self._count - 1, 0) if self._count else -1

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries at or after ``offset``."""
        self._truncate(self._search(1, offset - self.base_offset, right=False))
