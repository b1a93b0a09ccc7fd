"""The partition log: an ordered sequence of segments with offsets, durability and cleanup.

A :class:`Log` is one partition replica's data on disk. It appends Arrow record batches
(assigning each row an offset), reads them back as Arrow tables by offset or time,
truncates (for followers), enforces retention, compacts, flushes on a policy, and
recovers after a crash. It has no Ray import: replica actors wrap it.

Thread-safety: every public method takes the log's lock, so a replica's event loop and
its background retention/compaction thread may share one log. Tables returned by reads
are zero-copy views of memory-mapped segments and stay valid after the log changes.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from raystream.errors import (
    CorruptRecordError,
    IllegalStateError,
    InvalidRecordError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from raystream.log import cleaner
from raystream.log.batch import (
    ATTR_COMMIT,
    ATTR_CONTROL,
    ATTR_EXPLICIT_OFFSETS,
    ATTR_LOG_APPEND_TIME,
    ATTR_TRANSACTIONAL,
    CODECS,
    EXPLICIT_OFFSET_COLUMN,
    HEADER_SIZE,
    OFFSET_COLUMN,
    BatchEncoder,
    BatchHeader,
    PayloadDecoder,
    batch_offsets,
    parse_header,
    rewrite_batch,
    user_columns,
    verify_crc,
)
from raystream.log.checkpoint import fsync_directory, read_int, write_atomically
from raystream.log.compact import CompactPayload, kafka_batch_size, kafka_batch_size_bound
from raystream.log.config import NEVER, LogConfig
from raystream.log.epoch import LeaderEpochCache
from raystream.log.segment import LOG_SUFFIX, NO_LIMIT, LogSegment

RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_FILE = "log-start-offset-checkpoint"
RECOVERY_CHECKPOINT_INTERVAL_MS = 1000
"""How often a flush also persists the recovery point. A stale recovery point costs
only extra checking on the next unclean open, never data: the data itself is fsynced."""
CLEAN_SHUTDOWN_FILE = ".clean-shutdown"
CORRUPT_SEGMENT_FILE = "corrupt-segment-checkpoint"
"""Holds the base offset of the first segment a read found corrupt: the next open
recovers it and the segments after it, however the log was shut down."""
TIMESTAMP_COLUMN = "timestamp"
_LEFTOVER_SUFFIXES = (".tmp", ".cleaned", ".truncating")


def wall_clock_ms() -> int:
    """Milliseconds since the epoch: the default clock of a log."""
    return time.time_ns() // 1_000_000


class StoredBatch:
    """A batch as stored: its header and zero-copy views of its bytes."""

    __slots__ = ("buffer", "header", "position")

    def __init__(self, header: BatchHeader, buffer: pa.Buffer, position: int) -> None:
        self.header = header
        self.buffer = buffer
        self.position = position

    @property
    def payload(self) -> pa.Buffer:
        """The Arrow IPC stream of the batch."""
        return self.buffer.slice(self.position + HEADER_SIZE, self.header.size - HEADER_SIZE)

    @property
    def raw(self) -> pa.Buffer:
        """The whole stored batch, header included (what replication copies)."""
        return self.buffer.slice(self.position, self.header.size)


class Log:
    """One partition's durable, ordered log of Arrow record batches.

    Invariants: offsets are consecutive per append and increase across the log;
    ``log_start_offset <= log_end_offset``; a batch is served only after its CRC32C was
    checked in this process; the leader-epoch cache never refers past the log end.

    Use :meth:`Log.open`; call :meth:`close` for a clean shutdown (it skips recovery on
    the next open).
    """

    def __init__(self, directory: str, config: LogConfig, clock: Callable[[], int]) -> None:
        self.directory = directory
        self._config = config
        self._clock = clock
        self._lock = threading.RLock()
        self._decoder = PayloadDecoder()
        self._encoder = BatchEncoder()
        self._facts: _SchemaFacts | None = None
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._log_start_offset = 0
        self._recovery_point = 0
        self._corrupt_from: int | None = None
        self._failed_segment: LogSegment | None = None
        self._unflushed_messages = 0
        self._first_unflushed_ms: int | None = None
        self._directory_dirty = False
        self._recovery_checkpoint_ms = 0
        self._closed = False
        self.leader_epochs = LeaderEpochCache(directory)

    # ------------------------------------------------------------------ open

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        config: LogConfig | None = None,
        clock: Callable[[], int] | None = None,
    ) -> Log:
        """Open the log in ``directory`` (created if missing), recovering after a crash.

        After an unclean shutdown every segment past the recovery point is checked
        batch by batch: a torn or corrupt tail is truncated (and later segments, which
        would follow a hole, are deleted) and its indexes are rebuilt. Missing or stale
        indexes are rebuilt in any case.

        Args:
            directory: the partition replica's own directory.
            config: topic configuration (defaults to Kafka's defaults).
            clock: milliseconds-since-epoch source, injectable for tests.
        """
        directory = os.fspath(directory)
        os.makedirs(directory, exist_ok=True)
        log = cls(directory, config or LogConfig(), clock or wall_clock_ms)
        log._load()
        return log

    def _load(self) -> None:
        names = os.listdir(self.directory)
        for name in names:
            if name.endswith(_LEFTOVER_SUFFIXES):
                os.unlink(os.path.join(self.directory, name))
        marker = os.path.join(self.directory, CLEAN_SHUTDOWN_FILE)
        clean = os.path.exists(marker)
        recovery_point = read_int(os.path.join(self.directory, RECOVERY_POINT_FILE), -1)
        # A clean shutdown records the log end offset as the recovery point: the last
        # segment's batches must end exactly there.
        recorded_end = recovery_point if clean and recovery_point >= 0 else NO_LIMIT
        corrupt_from = read_int(os.path.join(self.directory, CORRUPT_SEGMENT_FILE), -1)
        log_start = read_int(os.path.join(self.directory, LOG_START_FILE), 0)
        bases = sorted(
            int(name[: -len(LOG_SUFFIX)])
            for name in names
            if name.endswith(LOG_SUFFIX) and name[: -len(LOG_SUFFIX)].isdigit()
        )
        now = self._clock()
        recovered = False
        max_epoch = self._max_epoch()
        for i, base in enumerate(bases):
            segment = LogSegment(self.directory, base, self._config.index_interval_bytes, now)
            last = i + 1 == len(bases)
            below_recovery_point = not last and bases[i + 1] <= recovery_point
            below_corruption = corrupt_from < 0 or (not last and bases[i + 1] <= corrupt_from)
            trust = (clean or below_recovery_point) and below_corruption
            end = recorded_end if last else bases[i + 1]
            truncated = segment.load(trust, end, max_epoch, last and end == NO_LIMIT)
            recovered = recovered or not trust
            if last and not truncated and end != NO_LIMIT and segment.next_offset != end:
                # The trusted tail ends elsewhere than the shutdown recorded.
                truncated = segment.recover(end, max_epoch)
                recovered = True
            self._segments.append(segment)
            if truncated:
                for later in bases[i + 1 :]:
                    LogSegment(self.directory, later, 0, now).delete()
                break
        if not self._segments:
            self._segments.append(self._new_segment(max(log_start, 0)))
        self._bases = [s.base_offset for s in self._segments]
        # The checkpoint is authoritative: compaction may remove a first segment
        # without moving the log start, as in Kafka.
        self._log_start_offset = min(max(log_start, 0), self.log_end_offset)
        self.leader_epochs.truncate_from_end(self.log_end_offset)
        self.leader_epochs.truncate_from_start(self._log_start_offset)
        if recovered:
            for segment in self._segments:
                segment.flush(fsync=True)
        self._recovery_point = self.log_end_offset
        self._write_recovery_point()
        if corrupt_from >= 0:
            os.unlink(os.path.join(self.directory, CORRUPT_SEGMENT_FILE))
        if clean:
            os.unlink(marker)
            fsync_directory(self.directory)

    def _new_segment(self, base_offset: int) -> LogSegment:
        self._directory_dirty = True
        return LogSegment(
            self.directory, base_offset, self._config.index_interval_bytes, self._clock()
        )

    # ------------------------------------------------------------ properties

    @property
    def config(self) -> LogConfig:
        """The topic configuration in force."""
        return self._config

    @property
    def log_start_offset(self) -> int:
        """The first offset a read may ask for (advanced by retention)."""
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record will get."""
        return self._segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        """Bytes of all segments."""
        return sum(s.size for s in self._segments)

    @property
    def segment_count(self) -> int:
        """How many segments the log has (the last one is active)."""
        return len(self._segments)

    @property
    def recovery_point(self) -> int:
        """Offsets below this are known flushed to disk."""
        return self._recovery_point

    def update_config(self, config: LogConfig) -> None:
        """Apply a changed topic configuration (takes effect on the next operation)."""
        with self._lock:
            self._config = config

    # ---------------------------------------------------------------- append

    def append(
        self,
        batch: pa.RecordBatch | pa.Table | CompactPayload,
        *,
        partition_leader_epoch: int = -1,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        is_transactional: bool = False,
        is_control: bool = False,
        is_commit: bool = False,
        max_timestamp: int | None = None,
        compression: str | None = None,
    ) -> tuple[int, int]:
        """Append one batch, giving its rows consecutive offsets.

        The batch may have any schema except the reserved ``offset`` column. A
        ``timestamp`` column (int64 ms or an Arrow timestamp), when present, gives the
        batch's time range for the time index and retention; otherwise the append time
        does. With ``message.timestamp.type=LogAppendTime`` that column is overwritten
        with the append time.

        A :class:`~raystream.log.compact.CompactPayload` (a leader's produced small
        batch) is stored as it came, unless the topic's timestamp type or codec
        asks for a rewrite.

        Args:
            batch: the rows to append (a Table is combined into one batch).
            partition_leader_epoch: the leader epoch that accepted the batch.
            producer_id, producer_epoch, base_sequence: idempotent producer metadata.
            is_transactional, is_control: transaction flags.
            is_commit: marks a control batch as a commit marker (else an abort).
            max_timestamp: overrides the batch's max timestamp.
            compression: "lz4", "zstd" or None, used when the topic's
                ``compression.type`` is "producer".

        Returns:
            The first and last offset assigned.

        Raises:
            InvalidRecordError: empty batch, reserved column, or not Arrow data.
            RecordTooLargeError: the batch exceeds ``max.message.bytes`` (see
                :meth:`_check_message_size`).
        """
        record_batch = batch if type(batch) is CompactPayload else _single_batch(batch)
        with self._lock:
            self._check_open()
            now = self._clock()
            config = self._config
            facts = self._schema_facts(record_batch.schema)
            attributes = (
                (ATTR_TRANSACTIONAL if is_transactional else 0)
                | (ATTR_CONTROL if is_control else 0)
                | (ATTR_COMMIT if is_control and is_commit else 0)
            )
            append_time = config.message_timestamp_type == "LogAppendTime"
            codec = self._codec(compression)
            if type(record_batch) is CompactPayload and (append_time or codec is not None):
                record_batch = record_batch.decode()
            if append_time:
                record_batch = _with_timestamp(record_batch, facts.timestamp_index, now)
                attributes |= ATTR_LOG_APPEND_TIME
            attributes |= CODECS[codec]
            if type(record_batch) is CompactPayload:
                payload = [record_batch.data]
                base_timestamp, batch_max = record_batch.timestamp_range(now)
            else:
                payload = self._encoder.payload(record_batch, codec)
                # The time range after serializing: the data is in the CPU cache now.
                base_timestamp, batch_max = (
                    (now, now) if append_time else facts.timestamp_range(record_batch, now)
                )
            if append_time or max_timestamp is None:
                max_timestamp = batch_max
            count = record_batch.num_rows
            base_offset = self._segments[-1].next_offset
            pieces, header = self._encoder.seal(
                payload,
                base_offset=base_offset,
                partition_leader_epoch=partition_leader_epoch,
                attributes=attributes,
                last_offset_delta=count - 1,
                base_timestamp=base_timestamp,
                max_timestamp=max_timestamp,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                base_sequence=base_sequence,
                record_count=count,
            )
            if header.size > config.max_message_bytes:
                if type(record_batch) is CompactPayload:
                    record_batch = record_batch.decode()
                self._check_message_size(record_batch, header.size)
            # Rolling moves the batch to a new segment; its offsets stay as encoded.
            self._maybe_roll(header.size, base_offset + count - 1, max_timestamp)
            self._segments[-1].append(pieces, (header,))
            if partition_leader_epoch >= 0:
                self.leader_epochs.assign(partition_leader_epoch, base_offset)
            self._after_append(count, now)
            return base_offset, base_offset + count - 1

    def _check_message_size(self, batch: pa.RecordBatch, stored_size: int) -> None:
        """Refuse a batch over ``max.message.bytes`` as a Kafka user counts it.

        The limit holds for the smaller of the batch's stored size and its size in
        Kafka's record batch v2 format (61 bytes plus each record's fields, as
        :func:`~raystream.log.compact.kafka_batch_size` counts them): a batch Kafka
        would take is taken, whatever Arrow's framing adds to a large batch, and a
        compressed batch counts compressed, as in Kafka. Called only for a batch whose
        stored size is over the limit, so the common append pays nothing for it.

        Raises:
            RecordTooLargeError: naming the topic partition, both sizes and the limit.
        """
        limit = self._config.max_message_bytes
        bound = kafka_batch_size_bound(batch)
        if bound is not None and bound <= limit:
            return  # the common case, without counting every record's varints
        kafka_size = kafka_batch_size(batch)
        if min(kafka_size, stored_size) > limit:
            raise RecordTooLargeError(
                f"log {os.path.basename(self.directory)}: a batch of {batch.num_rows} records is "
                f"{kafka_size} bytes in Kafka's record-batch format ({stored_size} bytes as "
                f"stored), over the topic's max.message.bytes={limit}"
            )

    def _schema_facts(self, schema: pa.Schema) -> _SchemaFacts:
        """What appending needs to know about ``schema``, worked out once per schema.

        A topic's batches share one schema, so the reserved-column check and the
        search for the timestamp column run once, not per batch.

        Raises:
            InvalidRecordError: the schema uses a column name the log reserves.
        """
        facts = self._facts
        if facts is None or not (schema is facts.schema or schema.equals(facts.schema)):
            facts = self._facts = _SchemaFacts.of(schema)
        return facts

    def _codec(self, requested: str | None) -> str | None:
        topic_codec = self._config.compression_type
        codec = requested if topic_codec == "producer" else topic_codec
        if codec not in CODECS:
            raise InvalidRequestError(
                f"compression {codec!r} is not supported; use one of lz4, zstd or None"
            )
        return None if codec in (None, "none", "uncompressed") else codec

    def _maybe_roll(self, size: int, last_offset: int, max_timestamp: int) -> None:
        """Roll before a batch of ``size`` bytes that does not fit the active segment."""
        active = self._segments[-1]
        if active.size and self._overflows(
            active.size + size,
            active.rolling_timestamp,
            active.base_offset,
            last_offset,
            max_timestamp,
        ):
            self.roll()

    def _overflows(
        self,
        size: int,
        rolling_timestamp: int,
        base_offset: int,
        last_offset: int,
        max_timestamp: int,
    ) -> bool:
        """Whether a segment of ``size`` bytes would pass ``segment.bytes``, ``segment.ms``
        (counted from ``rolling_timestamp``) or the 2**31 offsets past ``base_offset``
        that an index's relative offset holds, with a batch up to ``last_offset``."""
        config = self._config
        return (
            size > config.segment_bytes
            or max_timestamp - rolling_timestamp > config.segment_ms
            or last_offset - base_offset >= 2**31
        )

    def roll(self) -> None:
        """Close the active segment and start a new one at the log end offset."""
        with self._lock:
            self._check_open()
            active = self._segments[-1]
            if active.is_empty:
                return
            active.become_inactive()
            segment = self._new_segment(self.log_end_offset)
            self._segments.append(segment)
            self._bases.append(segment.base_offset)

    def _after_append(self, count: int, now: int) -> None:
        """Apply the flush policy (``flush.messages``, ``flush.ms``) after an append."""
        self._unflushed_messages += count
        first = self._first_unflushed_ms
        if first is None:
            first = self._first_unflushed_ms = now
        config = self._config
        if self._unflushed_messages >= config.flush_messages or now - first >= config.flush_ms:
            self.flush()

    # ------------------------------------------------------------------ read

    def read_batches(
        self, start_offset: int, max_bytes: int = 1 << 20, max_offset: int | None = None
    ) -> list[StoredBatch]:
        """The stored batches holding offsets from ``start_offset`` on, checksum-checked.

        Whole batches are returned until adding one would pass ``max_bytes`` (at least
        one batch); none at or past ``max_offset`` (exclusive, e.g. the high watermark).
        The first batch may begin before ``start_offset``. This is what a follower
        replicates and what :meth:`read` decodes.

        Raises:
            OffsetOutOfRangeError: ``start_offset`` is below the log start or past the end.
            CorruptRecordError: a batch fails its checksum; it is not returned.
        """
        if not isinstance(start_offset, int) or isinstance(start_offset, bool):
            raise InvalidRequestError(f"start_offset {start_offset!r} is not an integer")
        with self._lock:
            self._check_open()
            end = self.log_end_offset
            if start_offset < self._log_start_offset or start_offset > end:
                raise OffsetOutOfRangeError(
                    f"offset {start_offset} is out of range "
                    f"[{self._log_start_offset}, {end}] of log {self.directory}"
                )
            limit = end if max_offset is None else min(max_offset, end)
            if start_offset >= limit:
                return []
            max_epoch = self._max_epoch()
            try:
                return self._read_batches(start_offset, max_bytes, limit, max_epoch)
            except CorruptRecordError:
                if not self._after_corruption(max_epoch):
                    raise
                # Only the segment's indexes were wrong, and they are rebuilt now.
                return self._read_batches(start_offset, max_bytes, limit, max_epoch)

    def _read_batches(
        self, start_offset: int, max_bytes: int, limit: int, max_epoch: int
    ) -> list[StoredBatch]:
        """:meth:`read_batches` once the range is checked. Each header is checked
        against the index and its neighbours (:meth:`LogSegment.headers`), the batch
        right after the last one returned included, and the CRC of each batch
        returned. On a CorruptRecordError, ``_failed_segment`` is the segment it is in."""
        result: list[StoredBatch] = []
        total = 0
        for segment, start_position, first in self._segments_from(start_offset, max_epoch):
            buffer = segment.view()
            try:
                for position, header in segment.headers(
                    start_position, False, first, segment.next_offset, max_epoch
                ):
                    if header.base_offset >= limit or (result and total + header.size > max_bytes):
                        return result
                    if position + header.size > segment.verified_bytes:
                        segment.check(position, header, buffer)
                    result.append(StoredBatch(header, buffer, position))
                    total += header.size
            except CorruptRecordError:
                self._failed_segment = segment
                raise
        return result

    def _after_corruption(self, max_epoch: int) -> bool:
        """Recover from a corrupt batch a read met; True when the read may be retried.

        The whole segment is checked once: when its batches are all sound, only its
        offset index was wrong, and the indexes are rebuilt (True). Otherwise the
        segment is recorded as corrupt (in a checkpoint file, so a crash or a restart
        both see it): reads go on failing on the bad batch (a leader never serves it)
        and the next open recovers the segment and those after it, cutting from the
        first bad batch, as a torn tail is cut (a follower then fetches the rest
        again from its leader).
        """
        segment, self._failed_segment = self._failed_segment, None
        if segment is None or segment not in self._segments or segment.corrupt:
            return False
        if segment.is_intact(max_epoch):
            segment.rebuild_indexes()
            return True
        segment.corrupt = True
        if self._corrupt_from is None or segment.base_offset < self._corrupt_from:
            self._corrupt_from = segment.base_offset
            write_atomically(
                os.path.join(self.directory, CORRUPT_SEGMENT_FILE), f"{self._corrupt_from}\n"
            )
        return False

    @property
    def corrupt_from(self) -> int | None:
        """The base offset of the first segment a read found corrupt (its batches, not
        only its indexes), which the next open recovers; None when none was found."""
        return self._corrupt_from

    def _max_epoch(self) -> int:
        """The highest partition leader epoch a stored batch may carry: the newest the
        epoch cache knows (any, when the cache is empty)."""
        latest = self.leader_epochs.latest_epoch
        return latest if latest >= 0 else NO_LIMIT

    def read(
        self,
        start_offset: int,
        max_bytes: int = 1 << 20,
        max_offset: int | None = None,
        skip: Callable[[BatchHeader], bool] | None = None,
    ) -> pa.Table:
        """Rows from ``start_offset`` on as a Table with an int64 ``offset`` column added.

        Stops at whole batches near ``max_bytes`` (always at least one batch), never
        returns offsets at or past ``max_offset`` (pass the high watermark), and stops
        where the schema changes, so one call returns one schema. An empty table (only
        the ``offset`` column) means nothing is available yet. Control batches
        (transaction markers) are never returned as data, nor batches ``skip(header)``
        is true for (a read_committed fetch skips aborted transactions).

        Raises:
            OffsetOutOfRangeError: ``start_offset`` is below the log start or past the end.
            CorruptRecordError: a batch fails its checksum.
        """
        return self.read_until(start_offset, max_bytes, max_offset, skip)[0]

    def read_until(
        self,
        start_offset: int,
        max_bytes: int = 1 << 20,
        max_offset: int | None = None,
        skip: Callable[[BatchHeader], bool] | None = None,
    ) -> tuple[pa.Table, int]:
        """:meth:`read`, and the offset right after the last batch it examined.

        Skipped batches return no rows, so the rows alone do not say how far a read
        got: a reader continues from the returned offset, not from its last row's
        (else a reader standing at a marker would read it forever). Skipped batches
        cost a header check each, not a decode; the read goes on past them (up to
        ``max_bytes`` of them per round) until it finds rows or the end.
        """
        while True:
            stored = self.read_batches(start_offset, max_bytes, max_offset)
            limit = self.log_end_offset if max_offset is None else max_offset
            table, next_offset = decode_stored(self._decoder, stored, start_offset, limit, skip)
            if table.num_rows or not stored:
                return table, max(next_offset, start_offset)
            # Nothing readable in these batches (skipped, or compacted away): go on.
            start_offset = next_offset

    def read_raw(
        self, start_offset: int, max_bytes: int = 1 << 20, max_offset: int | None = None
    ) -> list[pa.Buffer]:
        """Stored batches from ``start_offset`` on, as few contiguous byte ranges.

        What a leader sends a follower: whole checksum-checked batches, headers
        included, zero-copy slices of the segments (one per segment spanned).
        """
        return _runs(self.read_batches(start_offset, max_bytes, max_offset))

    def read_raw_until(
        self,
        start_offset: int,
        max_bytes: int = 1 << 20,
        max_offset: int | None = None,
        skip: Callable[[BatchHeader], bool] | None = None,
    ) -> tuple[list[pa.Buffer], int]:
        """:meth:`read_raw` leaving out the batches ``skip`` names, and the offset right
        after the last batch examined (what a consumer fetch sends: the reader goes on
        from there, past batches it must not see, such as markers)."""
        limit = self.log_end_offset if max_offset is None else max_offset
        while True:
            stored = self.read_batches(start_offset, max_bytes, max_offset)
            if not stored:
                return [], start_offset
            examined = max(min(stored[-1].header.next_offset, limit), start_offset)
            kept = stored if skip is None else [b for b in stored if not skip(b.header)]
            if kept:
                return _runs(kept), examined
            start_offset = examined  # nothing to send in these: go on past them

    def batch_headers(self, start_offset: int) -> list[BatchHeader]:
        """Headers of the batches from the one holding ``start_offset`` on, in log order.

        Reads no payload and checks no checksum: what a replica replays to rebuild its
        producer state after a snapshot (a few bytes per batch).
        """
        with self._lock:
            self._check_open()
            headers: list[BatchHeader] = []
            for segment, position, first in self._segments_from(start_offset):
                headers.extend(header for _, header in segment.headers(position, False, first))
            return headers

    def _segments_from(
        self, start_offset: int, max_epoch: int = NO_LIMIT
    ) -> Iterator[tuple[LogSegment, int, int | None]]:
        """Each segment from the one holding ``start_offset`` on, with the position to
        read it from and the base offset of the batch there (what a read checks the
        first header against): the batch holding that offset in the first, the start
        in the rest (a first segment without it, emptied by compaction, is passed over).
        """
        first = max(bisect.bisect_right(self._bases, start_offset) - 1, 0)
        for index in range(first, len(self._segments)):
            segment = self._segments[index]
            if index != first:
                yield segment, 0, segment.index.lookup(segment.base_offset)[0]
                continue
            try:
                found = segment.translate(start_offset, max_epoch)
            except CorruptRecordError:
                self._failed_segment = segment
                raise
            if found is not None:
                yield segment, found[0], found[1].base_offset

    def append_raw(self, data: pa.Buffer | bytes) -> int:
        """Append stored batches copied from a leader, keeping their offsets and epochs.

        Every batch is checked first (header, checksum, offsets that only go forward
        from the log end offset), so a chunk is appended whole or not at all. The
        batches then go to disk as they came, one ``writev`` per run of batches that
        share a segment. Returns the number of batches appended.

        Raises:
            CorruptRecordError: a batch is malformed or fails its checksum.
            InvalidRecordError: a batch would go backwards in offsets.
        """
        buffer = data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
        size = buffer.size
        with self._lock:
            self._check_open()
            headers: list[BatchHeader] = []
            position = 0
            end_offset = self.log_end_offset
            while position < size:
                header = parse_header(buffer, position, size, "replicated data")
                verify_crc(buffer, position, header, "replicated data")
                if header.base_offset < end_offset:
                    raise InvalidRecordError(
                        f"replicated batch at offset {header.base_offset} is below the log "
                        f"end offset {end_offset}"
                    )
                headers.append(header)
                end_offset = header.next_offset
                position += header.size
            position = 0
            first = 0
            while first < len(headers):
                run = self._next_run(headers, first)
                run_size = sum(header.size for header in run)
                self._segments[-1].append([buffer.slice(position, run_size)], run)
                for header in run:
                    if header.partition_leader_epoch >= 0:
                        self.leader_epochs.assign(header.partition_leader_epoch, header.base_offset)
                position += run_size
                first += len(run)
                self._after_append(sum(header.record_count for header in run), self._clock())
        return len(headers)

    def _next_run(self, headers: list[BatchHeader], first: int) -> list[BatchHeader]:
        """The batches from ``headers[first]`` on that go to the active segment together.

        Rolls first when the batch does not fit the active segment, and starts an
        empty active segment at the batch's base offset when that is ahead (the
        leader's log was compacted there), as if the segment had been rolled there.
        """
        header = headers[first]
        self._maybe_roll(header.size, header.last_offset, header.max_timestamp)
        segment = self._segments[-1]
        if segment.is_empty and header.base_offset > segment.base_offset:
            segment.delete()
            segment = self._segments[-1] = self._new_segment(header.base_offset)
            self._bases[-1] = header.base_offset
        rolling = segment.rolling_timestamp if segment.size else header.max_timestamp
        used = segment.size + header.size
        end = first + 1
        while end < len(headers):
            header = headers[end]
            used += header.size
            if self._overflows(
                used, rolling, segment.base_offset, header.last_offset, header.max_timestamp
            ):
                break
            end += 1
        return headers[first:end]

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """The first offset whose record timestamp is >= ``timestamp``, or None.

        Uses the time index to find the batch, then the batch's ``timestamp`` column
        (when it has one) to find the record.
        """
        with self._lock:
            self._check_open()
            for segment in self._segments:
                if segment.max_timestamp < timestamp:
                    continue
                found = segment.first_position_at_or_after_timestamp(timestamp)
                if found is None:
                    continue
                _position, header = found
                offset = header.base_offset
                stored = self.read_batches(max(offset, self._log_start_offset), 1)
                if stored and stored[0].header.base_offset == header.base_offset:
                    decoded = self._decoder.decode(stored[0].payload)
                    rows = batch_offsets(header, decoded)
                    times = _timestamps(decoded)
                    if times is not None:
                        at = np.flatnonzero(times >= timestamp)
                        if len(at):
                            offset = int(rows[at[0]])
                return max(offset, self._log_start_offset)
            return None

    # -------------------------------------------------------------- truncate

    def truncate_to(self, offset: int) -> None:
        """Remove every record at or above ``offset`` (a follower's divergent suffix).

        Truncating inside a batch keeps the batch's rows below ``offset``. Truncating
        below the log start empties the log and restarts it at ``offset``. When the
        batches at or below ``offset`` in the last segment left are corrupt, the
        segment is cut from its first bad batch (as recovery does), so the log may end
        below ``offset``: a follower then fetches the rest again from its leader.
        """
        with self._lock:
            self._check_open()
            if offset >= self.log_end_offset:
                return
            if offset <= self._log_start_offset:
                self.truncate_fully_and_start_at(offset)
                return
            while self._segments and self._segments[-1].base_offset >= offset:
                self._segments.pop().delete()
                self._bases.pop()
            cut = False
            if self._segments:
                segment = self._segments[-1]
                try:
                    self._truncate_segment(segment, offset)
                except CorruptRecordError:
                    # A bad batch at or below offset: cut the segment from its first bad
                    # batch, as recovery does (a follower fetches the rest again).
                    segment.recover(NO_LIMIT, self._max_epoch())
                    if segment.next_offset > offset:
                        self._truncate_segment(segment, offset)
                    cut = segment.next_offset < offset
                corrupt = self._corrupt_from
                if corrupt is not None and not segment.corrupt and corrupt >= segment.base_offset:
                    self._corrupt_from = None  # the segments a read found corrupt are gone
                    os.unlink(os.path.join(self.directory, CORRUPT_SEGMENT_FILE))
            if not cut and (not self._segments or self._segments[-1].next_offset < offset):
                # Compaction removed the records right below offset: the log still ends there.
                segment = self._new_segment(offset)
                self._segments.append(segment)
                self._bases.append(offset)
            end = self.log_end_offset
            self.leader_epochs.truncate_from_end(end)
            self._recovery_point = min(self._recovery_point, end)
            self._write_recovery_point()

    def _truncate_segment(self, segment: LogSegment, offset: int) -> None:
        """Cut ``segment`` (the last) at ``offset``, keeping the rows below it of a batch
        that spans it."""
        found = segment.translate(offset, self._max_epoch())
        if found is None:
            return
        position, header = found
        prefix = None
        if header.base_offset < offset:
            payload = segment.view().slice(position + HEADER_SIZE, header.size - HEADER_SIZE)
            segment.check(position, header, segment.view())
            decoded = self._decoder.decode(payload)
            rows = batch_offsets(header, decoded)
            keep = rows < offset
            if keep.any():  # a compacted batch may keep no row below offset
                prefix = rewrite_batch(
                    self._encoder,
                    header,
                    decoded,
                    rows,
                    keep,
                    int(rows[keep][-1]) - header.base_offset,
                )
        segment.truncate_at(position, header)
        if prefix is not None:
            pieces, parsed = prefix
            segment.append(pieces, (parsed,))

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete everything and restart the log empty at ``offset`` (a far-behind follower)."""
        if offset < 0:
            raise InvalidRequestError(f"offset {offset} is negative")
        with self._lock:
            self._check_open()
            for segment in self._segments:
                segment.delete()
            self._segments = [self._new_segment(offset)]
            self._bases = [offset]
            self._log_start_offset = offset
            self.leader_epochs.clear()
            self._write_log_start()
            self._recovery_point = offset
            self._write_recovery_point()

    # ------------------------------------------------------------- retention

    def delete_records_before(self, offset: int) -> int:
        """Advance the log start offset to ``offset`` (Kafka's DeleteRecords).

        Whole segments below it are deleted; the rest become unreadable.

        Returns:
            The new log start offset.
        """
        with self._lock:
            self._check_open()
            if offset > self.log_end_offset or offset < 0:
                raise OffsetOutOfRangeError(
                    f"offset {offset} is out of range [0, {self.log_end_offset}]"
                )
            if offset > self._log_start_offset:
                self._log_start_offset = offset
                self._write_log_start()
                self.leader_epochs.truncate_from_start(offset)
                count = 0
                while (
                    count + 1 < len(self._segments) and self._segments[count].next_offset <= offset
                ):
                    count += 1
                self._delete_oldest(count)
            return self._log_start_offset

    def enforce_retention(self, now_ms: int | None = None, max_offset: int | None = None) -> int:
        """Delete old closed segments by ``retention.ms`` and ``retention.bytes``.

        Only segments entirely below ``max_offset`` (pass the high watermark) go, oldest
        first, and never the active segment.

        Returns:
            How many segments were deleted.
        """
        with self._lock:
            self._check_open()
            config = self._config
            if not config.delete:
                return 0
            now = self._clock() if now_ms is None else now_ms
            limit = self.log_end_offset if max_offset is None else max_offset
            remaining = self.size_bytes
            count = 0
            for segment in self._segments[:-1]:
                if segment.next_offset > limit:
                    break
                expired = 0 <= config.retention_ms < now - segment.max_timestamp
                too_big = 0 <= config.retention_bytes <= remaining - segment.size
                if not (expired or too_big):
                    break
                remaining -= segment.size
                count += 1
            if count:
                self._delete_oldest(count)
            return count

    def _delete_oldest(self, count: int) -> None:
        if count <= 0:
            return
        doomed = self._segments[:count]
        self._segments = self._segments[count:]
        self._bases = self._bases[count:]
        for segment in doomed:
            segment.delete()
        if self._segments[0].base_offset > self._log_start_offset:
            self._log_start_offset = self._segments[0].base_offset
            self._write_log_start()
            self.leader_epochs.truncate_from_start(self._log_start_offset)
        fsync_directory(self.directory)

    def compact(
        self,
        now_ms: int | None = None,
        max_offset: int | None = None,
        skip: Callable[[BatchHeader], bool] | None = None,
    ) -> cleaner.CleanerStats:
        """Keep only the latest record per key in the closed segments.

        Records keep their offsets; tombstones (null ``value``) older than
        ``delete.retention.ms`` are dropped; records without a key are kept. The active
        segment is never rewritten. Segments are rewritten one at a time, so appends and
        reads go on meanwhile.

        Args:
            now_ms: the time the tombstone horizon counts from (default: the clock).
            max_offset: clean only segments wholly below it: the caller passes the last
                stable offset, so an open transaction's record never replaces a
                key's committed one.
            skip: true for batches of aborted transactions: they are dropped, and
                never count as a key's latest record.
        """
        with self._lock:
            self._check_open()
            closed = [
                segment
                for segment in self._segments[:-1]
                if max_offset is None or segment.next_offset <= max_offset
            ]
            now = self._clock() if now_ms is None else now_ms
            horizon = now - self._config.delete_retention_ms
        return cleaner.clean(self, closed, horizon, skip)

    def _swap_cleaned(self, segment: LogSegment, size: int, cleaned_path: str | None) -> bool:
        """Install a cleaned segment file, unless the segment changed meanwhile."""
        with self._lock:
            if segment not in self._segments or segment.size != size or self._closed:
                if cleaned_path is not None:
                    os.unlink(cleaned_path)
                return False
            if cleaned_path is None:
                index = self._segments.index(segment)
                del self._segments[index]
                del self._bases[index]
                segment.delete()
            else:
                segment.replace_with(cleaned_path)
            fsync_directory(self.directory)
            return True

    # ------------------------------------------------------------ durability

    def flush(self) -> None:
        """Fsync every appended batch and its index entries: after this, no crash loses them."""
        with self._lock:
            self._check_open()
            for segment in self._segments:
                if segment.dirty:
                    segment.flush(fsync=True)
            if self._directory_dirty:
                fsync_directory(self.directory)
                self._directory_dirty = False
            self._unflushed_messages = 0
            self._first_unflushed_ms = None
            self._recovery_point = self.log_end_offset
            now = self._clock()
            if now - self._recovery_checkpoint_ms >= RECOVERY_CHECKPOINT_INTERVAL_MS:
                self._write_recovery_point()

    @property
    def flush_due_ms(self) -> int | None:
        """When ``flush.ms`` next asks for an fsync (the oldest unflushed append's time
        plus ``flush.ms``, on the log's clock), or None while none will be due."""
        first = self._first_unflushed_ms
        if first is None or self._config.flush_ms >= NEVER:
            return None
        return first + self._config.flush_ms

    def maybe_flush(self, now_ms: int | None = None) -> bool:
        """Flush if the oldest unflushed append is older than ``flush.ms``."""
        with self._lock:
            first = self._first_unflushed_ms
            now = self._clock() if now_ms is None else now_ms
            if first is not None and now - first >= self._config.flush_ms:
                self.flush()
                return True
            return False

    def release_maps(self) -> None:
        """Unmap every segment's data, as a process at rest does to hand back what its
        reads mapped (see :meth:`LogSegment.release_map`); reads map it again."""
        with self._lock:
            for segment in self._segments:
                segment.release_map()

    def _write_recovery_point(self) -> None:
        self._recovery_checkpoint_ms = self._clock()
        write_atomically(
            os.path.join(self.directory, RECOVERY_POINT_FILE), f"{self._recovery_point}\n"
        )

    def _write_log_start(self) -> None:
        write_atomically(
            os.path.join(self.directory, LOG_START_FILE), f"{self._log_start_offset}\n"
        )

    def close(self) -> None:
        """Flush and close; the next open skips recovery (except of a segment a read
        found corrupt, see :meth:`read_batches`). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self.flush()
            self._write_recovery_point()
            for segment in self._segments:
                segment.close()
            Path(self.directory, CLEAN_SHUTDOWN_FILE).touch()
            fsync_directory(self.directory)
            self._closed = True

    def delete(self) -> None:
        """Close the log and remove its directory (topic deletion)."""
        with self._lock:
            for segment in self._segments:
                segment.delete()
            self._closed = True
            for name in os.listdir(self.directory):
                os.unlink(os.path.join(self.directory, name))
            os.rmdir(self.directory)

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError(f"log {self.directory} is closed")

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Log({self.directory!r}, log_start_offset={self._log_start_offset}, "
            f"log_end_offset={self.log_end_offset}, segments={len(self._segments)})"
        )


class _SchemaFacts(NamedTuple):
    """What appending needs to know about one schema, worked out once (per topic)."""

    schema: pa.Schema
    timestamp_index: int
    """Position of the ``timestamp`` column, or -1 without one."""
    timestamp_unit: str | None
    """How the column holds time: "int" (ms), an Arrow timestamp unit, or None when the
    column is absent or of another type (then the append time stands in)."""
    timestamp_dtype: np.dtype | None
    """The numpy type of the column's values when they are milliseconds as stored (an
    integer or a timestamp[ms] column), so they are read in place; else None."""

    @classmethod
    def of(cls, schema: pa.Schema) -> _SchemaFacts:
        """Check ``schema`` for reserved columns and find its timestamp column.

        Raises:
            InvalidRecordError: the schema uses a column name the log reserves.
        """
        names = schema.names
        for name in (OFFSET_COLUMN, EXPLICIT_OFFSET_COLUMN):
            if name in names:
                raise InvalidRecordError(f"column name {name!r} is reserved by the log")
        index, unit = _timestamp_column(schema)
        dtype = None
        if unit == "int":
            dtype = np.dtype(schema.field(index).type.to_pandas_dtype())
        elif unit == "ms":
            dtype = np.dtype(np.int64)
        return cls(schema, index, unit, dtype)

    def timestamp_range(self, batch: pa.RecordBatch, now: int) -> tuple[int, int]:
        """(min, max) of the batch's ``timestamp`` column in ms, or (now, now) without one.

        Two numpy reductions over the column's values buffer, read in place: per batch
        of a thousand rows that costs less than ``to_numpy`` or an Arrow compute kernel,
        whose dispatch outweighs the pass itself.
        """
        unit = self.timestamp_unit
        if unit is None:
            return now, now
        column = batch.column(self.timestamp_index)
        if column.null_count:
            column = column.drop_null()
            if not len(column):
                return now, now
        dtype = self.timestamp_dtype
        if dtype is None:  # seconds, micro- or nanoseconds
            milliseconds = column.cast(pa.timestamp("ms"), safe=False)
            values = milliseconds.to_numpy().view(np.int64)
        else:
            data = column.buffers()[1]
            values = np.frombuffer(data, dtype, len(column), column.offset * dtype.itemsize)
        return int(_MIN(values)), int(_MAX(values))


def _timestamp_column(schema: pa.Schema) -> tuple[int, str | None]:
    """The ``timestamp`` column's position and unit (see :class:`_SchemaFacts`)."""
    index = schema.get_field_index(TIMESTAMP_COLUMN)
    if index < 0:
        return index, None
    data_type = schema.field(index).type
    if pa.types.is_timestamp(data_type):
        return index, data_type.unit
    if pa.types.is_integer(data_type):
        return index, "int"
    return index, None


_MIN = np.minimum.reduce
_MAX = np.maximum.reduce
"""The reductions themselves, without ndarray.min/max's Python-level wrappers."""


def stored_to_table(
    decoder: PayloadDecoder, stored: list[StoredBatch], start_offset: int, limit: int
) -> pa.Table:
    """Decode stored batches into one Table of rows in [start_offset, limit), plus ``offset``.

    Zero-copy: the table's buffers are views of the batches' bytes. Stops where the
    schema changes, so the table has one schema; a table without rows has only the
    ``offset`` column. Transaction markers are never rows. Used by reads and by
    consumers decoding fetched batches.
    """
    return decode_stored(decoder, stored, start_offset, limit)[0]


def decode_stored(
    decoder: PayloadDecoder,
    stored: list[StoredBatch],
    start_offset: int,
    limit: int,
    skip: Callable[[BatchHeader], bool] | None = None,
) -> tuple[pa.Table, int]:
    """:func:`stored_to_table`, skipping markers and the batches ``skip`` names, and the
    offset after the last batch taken in (or skipped)."""
    batches: list[pa.RecordBatch] = []
    ranges: list[np.ndarray | tuple[int, int]] = []
    schema: pa.Schema | None = None
    contiguous = True
    next_offset = -1
    examined = start_offset
    for item in stored:
        header = item.header
        base = header.base_offset
        after = base + header.last_offset_delta + 1
        attributes = header.attributes
        if attributes & ATTR_CONTROL or (skip is not None and skip(header)):
            examined = after if after < limit else limit
            continue
        explicit = attributes & ATTR_EXPLICIT_OFFSETS
        position = item.position
        batch_schema, decoded = decoder.decode_at(
            item.buffer, position + HEADER_SIZE, position + header.size
        )
        if explicit:
            rows = batch_offsets(header, decoded)
            decoded = user_columns(header, decoded)
            batch_schema = decoded.schema
        if schema is None:
            schema = batch_schema
        elif batch_schema is not schema and not batch_schema.equals(schema):
            break
        examined = after if after < limit else limit
        count = decoded.num_rows
        if explicit:
            lo = int(np.searchsorted(rows, start_offset))
            hi = int(np.searchsorted(rows, limit))
            rows = rows[lo:hi]
            contiguous = False
        else:
            lo = start_offset - base if start_offset > base else 0
            hi = limit - base if limit - base < count else count
            rows = (base + lo, base + hi)
            if next_offset >= 0 and base + lo != next_offset:
                contiguous = False
            next_offset = base + hi
        if hi <= lo:
            continue
        if lo or hi < count:
            decoded = decoded.slice(lo, hi - lo)
        batches.append(decoded)
        ranges.append(rows)
    if not batches:
        return pa.table({OFFSET_COLUMN: pa.array([], pa.int64())}), examined
    table = pa.Table.from_batches(batches)
    if contiguous:
        first = ranges[0][0]
        column = np.arange(first, first + table.num_rows, dtype=np.int64)
    else:
        column = np.concatenate(
            [r if isinstance(r, np.ndarray) else np.arange(*r, dtype=np.int64) for r in ranges]
        )
    return table.append_column(OFFSET_COLUMN, pa.array(column)), examined


def _runs(stored: list[StoredBatch]) -> list[pa.Buffer]:
    """Stored batches as few contiguous byte ranges (one per stretch of one segment)."""
    runs: list[pa.Buffer] = []
    start = end = -1
    buffer = None
    for item in stored:
        if item.buffer is buffer and item.position == end:
            end += item.header.size
            continue
        if buffer is not None:
            runs.append(buffer.slice(start, end - start))
        buffer, start, end = item.buffer, item.position, item.position + item.header.size
    if buffer is not None:
        runs.append(buffer.slice(start, end - start))
    return runs


def stored_batches(data: pa.Buffer) -> list[StoredBatch]:
    """The stored batches laid end to end in ``data`` (as a fetch carries them).

    Raises:
        CorruptRecordError: a header is malformed.
    """
    batches = []
    position = 0
    while position < data.size:
        header = parse_header(data, position, data.size, "fetched data")
        batches.append(StoredBatch(header, data, position))
        position += header.size
    return batches


def _single_batch(batch: pa.RecordBatch | pa.Table) -> pa.RecordBatch:
    """The one non-empty RecordBatch to append (reserved columns: see _SchemaFacts)."""
    if isinstance(batch, pa.Table):
        batches = batch.combine_chunks().to_batches()
        batch = batches[0] if batches else pa.RecordBatch.from_pylist([], schema=batch.schema)
    if not isinstance(batch, pa.RecordBatch):
        raise InvalidRecordError(
            f"append takes a pyarrow RecordBatch or Table, not {type(batch).__name__}"
        )
    if batch.num_rows == 0:
        raise InvalidRecordError("cannot append an empty batch (0 rows)")
    return batch


def _timestamps(batch: pa.RecordBatch) -> np.ndarray | None:
    """The ``timestamp`` column as int64 milliseconds (nulls as -1), or None when absent."""
    index, unit = _timestamp_column(batch.schema)
    if unit is None:
        return None
    column = batch.column(index)
    if unit != "int":
        column = column.cast(pa.timestamp("ms"), safe=False).cast(pa.int64())
    if column.null_count:
        column = column.fill_null(-1)
    return column.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _with_timestamp(batch: pa.RecordBatch, index: int, now: int) -> pa.RecordBatch:
    """``batch`` with its ``timestamp`` column (at ``index``, -1: none) set to ``now``."""
    if index < 0:
        return batch
    field = batch.schema.field(index)
    # From its buffer: ``pa.array`` would import pandas (tens of MB) into a replica.
    stamps = np.full(batch.num_rows, now, dtype=np.int64)
    value = pa.Array.from_buffers(pa.int64(), len(stamps), [None, pa.py_buffer(stamps)])
    if pa.types.is_timestamp(field.type):
        value = value.cast(pa.timestamp("ms")).cast(field.type)
    else:
        value = value.cast(field.type)
    return batch.set_column(index, field, value)
