"""One log segment: a file of stored batches that starts at ``base_offset``.

Appends go to the end of the file with one ``writev`` per batch (per run of batches
for replicated data); reads come from a read-only memory map, so the data a read
returns is not copied. A memory map that a caller still holds is never shrunk under
it: truncation then writes a shorter copy of the file and swaps it in, so old readers
keep the old bytes instead of a SIGBUS.

Not thread-safe: the owning :class:`~raystream.log.Log` serializes calls.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Iterator, Sequence

import pyarrow as pa

from raystream.errors import CorruptRecordError
from raystream.log.batch import BatchHeader, Piece, parse_header, verify_crc
from raystream.log.index import OffsetIndex, TimeIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
NO_LIMIT = 2**63
"""No bound on a batch's offsets or leader epoch (an int, so checks stay comparisons)."""


def segment_file_name(base_offset: int) -> str:
    """Segment files are named by base offset, zero-padded as Kafka's."""
    return f"{base_offset:020d}{LOG_SUFFIX}"


class LogSegment:
    """A segment file with its offset index and time index.

    Attributes:
        base_offset: offset of the first record the segment may hold.
        size: bytes of valid batches in the file.
        next_offset: offset after the segment's last batch (``base_offset`` if empty).
        max_timestamp: newest batch max timestamp in the segment (-1 if empty).
        rolling_timestamp: when the segment started (first batch time or creation time),
            which ``segment.ms`` is measured from.
        verified_bytes: a prefix of the file whose checksums are known good in this
            process (written by it, or checked since open); reads past it check CRCs.
        corrupt: a read found a bad batch in it (not only a wrong index entry); the
            log's next open recovers it.
    """

    def __init__(
        self, directory: str, base_offset: int, index_interval_bytes: int, created_ms: int
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.path = os.path.join(directory, segment_file_name(base_offset))
        stem = self.path[: -len(LOG_SUFFIX)]
        self.index = OffsetIndex(stem + INDEX_SUFFIX, base_offset)
        self.time_index = TimeIndex(stem + TIME_INDEX_SUFFIX, base_offset)
        self.index_interval_bytes = index_interval_bytes
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = os.fstat(self._fd).st_size
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.rolling_timestamp = created_ms
        self.verified_bytes = 0
        self.corrupt = False
        self.dirty = False
        self._bytes_since_index_entry = 0
        self._map: mmap.mmap | None = None
        self._buffer: pa.Buffer | None = None

    @property
    def where(self) -> str:
        """How error messages name this segment."""
        return f"segment {self.path}"

    @property
    def is_empty(self) -> bool:
        return self.size == 0

    # ----------------------------------------------------------------- writes

    def append(self, pieces: list[Piece], headers: Sequence[BatchHeader]) -> None:
        """Write batches at the end of the file with one ``writev`` and index them.

        ``pieces`` are the bytes of the batches described by ``headers``, in order and
        end to end. A short write (a full disk) is cut off again before the error is
        raised, so the file never keeps a partial batch behind the segment's back.
        """
        position = self.size
        size = 0
        for header in headers:
            size += header.size
        if position == 0:
            self.rolling_timestamp = headers[0].max_timestamp
        written = os.writev(self._fd, pieces)
        if written != size:
            os.ftruncate(self._fd, position)
            raise OSError(f"{self.where}: short write ({written} of {size} bytes)")
        if self.verified_bytes == position:
            self.verified_bytes = position + size
        self.size = position + size
        self.dirty = True
        for header in headers:
            self._index_batch(position, header)
            position += header.size

    def _index_batch(self, position: int, header: BatchHeader) -> None:
        """Account for the batch at ``position``: an index entry every
        ``index.interval.bytes``, and the segment's next offset and max timestamp."""
        max_timestamp = header.max_timestamp
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
        if position == 0 or self._bytes_since_index_entry >= self.index_interval_bytes:
            self.index.append(header.base_offset, position)
            self.time_index.maybe_append(self.max_timestamp, header.base_offset)
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += header.size
        self.next_offset = header.base_offset + header.last_offset_delta + 1

    def become_inactive(self) -> None:
        """The segment takes no more appends (the log rolled past it): cut its index
        files to their entries, as Kafka does (the active segment's are preallocated);
        the next flush of the log makes that durable."""
        self.index.trim()
        self.time_index.trim()
        self.dirty = True

    def flush(self, fsync: bool = True) -> None:
        """With ``fsync``, make the batches and the index entries durable (the entries
        are in the page cache from the append on, through the indexes' mappings)."""
        if fsync and self.dirty:
            os.fdatasync(self._fd)
        self.index.flush(fsync)
        self.time_index.flush(fsync)
        if fsync:
            self.dirty = False

    # ------------------------------------------------------------------ reads

    def view(self) -> pa.Buffer:
        """A zero-copy Arrow buffer over the segment's valid bytes."""
        if self._buffer is None or self._buffer.size < self.size:
            self._release_map()
            if self.size == 0:
                return pa.py_buffer(b"")
            self._map = mmap.mmap(self._fd, self.size, access=mmap.ACCESS_READ)
            self._buffer = pa.py_buffer(self._map)
        return self._buffer

    def headers(
        self,
        position: int = 0,
        verify: bool = False,
        first: int | None = None,
        end: int = NO_LIMIT,
        max_epoch: int = NO_LIMIT,
    ) -> Iterator[tuple[int, BatchHeader]]:
        """Iterate (position, header) from ``position`` to the end of the segment.

        Each header's fields outside the CRC are checked against what the log
        guarantees (a few integer comparisons per batch, no per-record work): the
        magic and size (when parsed); the base offset at or after the segment's base
        offset and past the previous batch's last offset, exactly ``first`` for the
        first batch when given (the offset index's entry for ``position``), and the
        last offset below ``end`` (the segment's next offset, or the next segment's
        base); the partition leader epoch -1 (none) or from 0 to ``max_epoch``.

        Raises:
            CorruptRecordError: a header is malformed or disagrees with the index or
                its neighbours, or (``verify``) a CRC mismatches.
        """
        buffer = self.view()
        size, where = self.size, self.where
        floor = self.base_offset
        while position < size:
            header = parse_header(buffer, position, size, where)
            base = header.base_offset
            after = base + header.last_offset_delta + 1
            epoch = header.partition_leader_epoch
            if (
                base < floor
                or after > end
                or not -1 <= epoch <= max_epoch
                or (first is not None and base != first)
            ):
                self._check_fields(position, header, floor, first, end, max_epoch)
            first = None
            if verify:
                verify_crc(buffer, position, header, where)
            yield position, header
            floor = after
            position += header.size

    def _check_fields(
        self,
        position: int,
        header: BatchHeader,
        floor: int,
        first: int | None,
        end: int,
        max_epoch: int,
    ) -> None:
        """Raise the error that says how a batch header disagrees with the segment."""
        base = header.base_offset
        epoch = header.partition_leader_epoch
        if first is not None and base != first:
            problem = f"base offset {base}, but the offset index says {first} starts there"
        elif base < floor:
            problem = f"base offset {base}, below {floor} (offsets would go backwards)"
        elif base + header.last_offset_delta >= end:
            problem = f"base offset {base} and last offset {header.last_offset}, not below {end}"
        elif not -1 <= epoch <= max_epoch:
            problem = f"partition leader epoch {epoch}, the newest the log knows is {max_epoch}"
        else:
            return
        raise CorruptRecordError(f"{self.where} position {position}: batch header has {problem}")

    def check(self, position: int, header: BatchHeader, buffer: pa.Buffer) -> None:
        """Verify a batch's CRC unless it lies in the verified prefix."""
        end = position + header.size
        if end <= self.verified_bytes:
            return
        verify_crc(buffer, position, header, self.where)
        if position <= self.verified_bytes:
            self.verified_bytes = end

    def translate(self, offset: int, max_epoch: int = NO_LIMIT) -> tuple[int, BatchHeader] | None:
        """The first batch whose last offset is >= ``offset``, or None past the end.

        The scan starts at the offset index's entry at or below ``offset`` and checks
        the batches it passes (see :meth:`headers`), so the batch found is one whose
        offsets agree with the index and with the batches before it.
        """
        first, position = self.index.lookup(offset)
        for found in self.headers(position, False, first, self.next_offset, max_epoch):
            if found[1].last_offset >= offset:
                return found
        return None

    def first_position_at_or_after_timestamp(
        self, timestamp: int
    ) -> tuple[int, BatchHeader] | None:
        """The first batch whose max timestamp is >= ``timestamp``, or None."""
        start = self.time_index.lookup(timestamp)
        found = self.translate(start)
        if found is None:
            return None
        for position, header in self.headers(found[0]):
            if header.max_timestamp >= timestamp:
                return position, header
        return None

    # --------------------------------------------------------------- recovery

    def load(
        self, trust: bool, end: int = NO_LIMIT, max_epoch: int = NO_LIMIT, last: bool = False
    ) -> int:
        """Bring the in-memory state in line with the file; returns bytes truncated.

        With ``trust`` (a clean shutdown, or data below the recovery point) the indexes
        are loaded and sanity-checked, and only the tail after the last index entry is
        read (its headers checked as a read checks them). Otherwise every batch's CRC
        is checked, a torn or corrupt tail is cut off, and both indexes are rebuilt.
        ``end``, ``max_epoch`` and ``last`` are as for :meth:`recover`.
        """
        if trust and self.index.load() and self.time_index.load() and self._index_is_sane():
            start_offset, position = self.index.last()
            self.max_timestamp = self.time_index.last_timestamp()
            self.next_offset = start_offset if len(self.index) else self.base_offset
            try:
                first = next(self.headers(0, first=self.index.lookup(0)[0]), None)
                if first is not None:
                    self.rolling_timestamp = first[1].max_timestamp
                for _, header in self.headers(position, False, start_offset, end, max_epoch):
                    self.next_offset = header.next_offset
                    self.max_timestamp = max(self.max_timestamp, header.max_timestamp)
            except CorruptRecordError:
                # The file lost bytes behind the index's back: check it all after all.
                return self.recover(end, max_epoch, last)
            self._bytes_since_index_entry = self.size - position
            return 0
        return self.recover(end, max_epoch, last)

    def recover(self, end: int = NO_LIMIT, max_epoch: int = NO_LIMIT, last: bool = False) -> int:
        """Check every batch, cut from the first bad one on, rebuild the indexes.

        A batch is bad when it is torn, fails its CRC, has a malformed header, or its
        base offset (outside the CRC) goes backwards, or its last offset reaches
        ``end`` (the next segment's base offset, or the log end offset a clean
        shutdown recorded), or its leader epoch (outside the CRC too) is below -1 or
        above ``max_epoch`` (the newest epoch the log knows). With ``last`` (the log's
        last segment, whose end nothing records after a crash) the final batch must
        follow its predecessor without a gap: a leader's own appends never leave one,
        and a follower fetches a batch it loses this way again.
        """
        self.index.reset()
        self.time_index.reset()
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self._bytes_since_index_entry = 0
        good = 0
        pending: BatchHeader | None = None  # the last batch, until its successor agrees
        try:
            for position, header in self.headers(0, True, None, end, max_epoch):
                if pending is not None:
                    self._index_batch(good, pending)
                    good += pending.size
                elif position == 0:
                    self.rolling_timestamp = header.max_timestamp
                pending = header
            if pending is not None and (not last or pending.base_offset == self.next_offset):
                self._index_batch(good, pending)
                good += pending.size
        except CorruptRecordError:
            # When the next batch starts below the end of the last good one, either base
            # offset may be the flipped one (both are outside the CRC): the last one is
            # kept only when it follows its own predecessor without a gap.
            if pending is not None and (
                pending.base_offset == self.next_offset
                or not self._goes_backwards_after(good, pending)
            ):
                self._index_batch(good, pending)
                good += pending.size
        truncated = self.size - good
        if truncated:
            self._cut(good)
        self.verified_bytes = self.size
        self.corrupt = False
        for index in (self.index, self.time_index):
            index.trim()
            index.flush(fsync=True)
        return truncated

    def _goes_backwards_after(self, position: int, header: BatchHeader) -> bool:
        """Whether the batch right after ``header``'s (at ``position``) starts below its
        end (parsing it again: only on the error path of :meth:`recover`)."""
        after = position + header.size
        try:
            following = parse_header(self.view(), after, self.size, self.where)
        except CorruptRecordError:
            return False
        return following.base_offset < header.next_offset

    def is_intact(self, max_epoch: int = NO_LIMIT) -> bool:
        """Whether every batch passes the checks of :meth:`recover` and the batches end
        exactly at the segment's next offset: its data is sound, so an error a read
        met came from its indexes. Reads the whole segment (only after such an error)."""
        try:
            after = self.base_offset
            for _, header in self.headers(0, True, None, self.next_offset, max_epoch):
                after = header.next_offset
        except CorruptRecordError:
            return False
        return after == self.next_offset

    def rebuild_indexes(self) -> None:
        """Rebuild both indexes from the batches (of a segment :meth:`is_intact` passed)."""
        self.recover(self.next_offset)

    def _index_is_sane(self) -> bool:
        offset, position = self.index.last()
        if len(self.index) == 0:
            return self.size == 0 and len(self.time_index) == 0
        if not (self.index.is_sane() and self.time_index.is_sane(offset)):
            return False
        if position >= self.size:
            return False
        try:
            header = parse_header(self.view(), position, self.size, self.where)
        except CorruptRecordError:
            return False
        return header.base_offset == offset

    # ------------------------------------------------------------- truncation

    def truncate_at(self, position: int, batch_header: BatchHeader | None) -> None:
        """Cut the file at ``position`` (a batch boundary) and drop index entries past it.

        ``batch_header`` is the header of the batch that started at ``position`` (None
        when cutting at the end), used to trim the time index.
        """
        if position >= self.size:
            return
        self.index.truncate_to_position(position)
        if batch_header is not None:
            self.time_index.truncate_to_offset(batch_header.base_offset)
        self._cut(position)
        self.verified_bytes = min(self.verified_bytes, self.size)
        self.next_offset = self.base_offset
        self.max_timestamp = self.time_index.last_timestamp()
        first, start = self.index.last()
        for _, header in self.headers(start, first=first if len(self.index) else None):
            self.next_offset = header.next_offset
            self.max_timestamp = max(self.max_timestamp, header.max_timestamp)
        self._bytes_since_index_entry = self.size - start

    def _cut(self, position: int) -> None:
        """Shrink the file to ``position`` without invalidating maps readers still hold."""
        if self._release_map():
            os.ftruncate(self._fd, position)
        else:
            temp = self.path + ".truncating"
            with open(temp, "wb") as out:
                remaining = position
                offset = 0
                while remaining:
                    chunk = os.pread(self._fd, min(remaining, 1 << 24), offset)
                    out.write(chunk)
                    offset += len(chunk)
                    remaining -= len(chunk)
                out.flush()
                os.fsync(out.fileno())
            os.close(self._fd)
            os.replace(temp, self.path)
            self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND)
        self.size = position
        self.dirty = True

    def release_map(self) -> None:
        """Unmap the segment's data (the next read maps it again): the pages reads
        touched stay in the page cache, no longer counted in this process's memory.
        A reader still holding the map keeps it until it lets go."""
        self._release_map()

    def _release_map(self) -> bool:
        """Drop our map; True when no reader holds it any more (it was closed)."""
        self._buffer = None
        if self._map is None:
            return True
        try:
            self._map.close()
        except BufferError:
            self._map = None
            return False
        self._map = None
        return True

    # --------------------------------------------------------------- lifecycle

    def replace_with(self, new_path: str) -> None:
        """Swap in a rewritten file (compaction) atomically; indexes must be rebuilt."""
        self._release_map()
        os.close(self._fd)
        self.index.delete()
        self.time_index.delete()
        os.replace(new_path, self.path)
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND)
        self.size = os.fstat(self._fd).st_size
        self.recover()

    def close(self) -> None:
        """Trim the index files to their entries and release every file (no fsync)."""
        self.index.close()
        self.time_index.close()
        self._close_log_file()

    def _close_log_file(self) -> None:
        self._release_map()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def delete(self) -> None:
        """Remove the segment's files (the index files unmapped first); readers holding
        the log file's map keep their bytes."""
        self._close_log_file()
        self.index.delete()
        self.time_index.delete()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
