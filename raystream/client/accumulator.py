"""The producer's record buffers, the Arrow batches built from them, and record futures.

``send()`` must cost a few microseconds, so it does no Arrow work and no hashing: it
appends the record's fields to plain Python lists of an open *chunk* (one per topic)
under one lock and returns a :class:`FutureRecordMetadata` that is just (chunk result,
index). Each record also gets a partition marker: the explicit partition, or
:data:`STICKY` (keyless) or :data:`BY_KEY` (keyed) when the default partitioner decides.

A chunk is *sealed* when it holds ``batch_size`` bytes (``batch_size`` times partitions once
it holds keyed or explicitly partitioned records, so each partition's share comes out
near ``batch_size``), and the sender takes sealed chunks, and open ones older than
``linger_ms``, through :meth:`RecordAccumulator.drain`. :func:`build_requests` then
turns a chunk into produce requests with Arrow doing the per-record work:

1. one RecordBatch of the topic's layout from the lists (``records.build_batch``);
2. partitions: every keyed record's partition from one vectorized murmur2 over the key
   column (:func:`~raystream.client.partitioner.partitions_for_keys`), every keyless
   record to the topic's sticky partition, after which the partitioner is told the
   sticky batch is done (KIP-480: the next chunk sticks elsewhere);
3. a stable sort by partition (Arrow ``take``) and slices of at most
   ``max_request_size`` bytes, one request each.

Record ``i`` of a chunk is then row ``rank(i)`` of the sorted batch, inside exactly one
request, so its :class:`~raystream.types.RecordMetadata` is computed only when asked
for: ``partition`` of the request, ``offset = base_offset + rank(i) - request.start``.
Completing a request is O(1); completing a chunk runs only the callbacks users added.

Worked example (3 partitions): records ``[k1→p2, None, k2→p0, k3→p2]`` with sticky
partition 1 get partitions ``[2, 1, 0, 2]``; the stable order is ``[2, 1, 0, 3]``, so
the requests are p0: rows {2}, p1: rows {1}, p2: rows {0, 3}; if p2 answers base offset
40, record 3 is at offset 41.

Invariants: records of one partition keep their ``send()`` order inside a chunk, and
chunks of a topic are drained in creation order. Everything here is thread-safe where
it says so and never calls Ray; time comes from an injected clock.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from raystream.client.partitioner import partitions_for_keys
from raystream.client.results import FutureRecordMetadata, ProduceRequest, ProduceResult
from raystream.errors import (
    IllegalStateError,
    InvalidRecordError,
    RaystreamTimeoutError,
    RecordTooLargeError,
)
from raystream.records import bad_values, build_batch

logger = logging.getLogger(__name__)

STICKY = -1
"""Partition marker: a keyless record for the topic's sticky partition."""
BY_KEY = -2
"""Partition marker: a keyed record whose partition murmur2 decides at drain time."""

RECORD_OVERHEAD_BYTES = 32
"""Bytes a record costs beyond its key, value and headers (offsets, timestamp, as stored)."""

REQUEST_FILL = 0.9
"""Requests are cut at this share of ``max_request_size``: sizes are estimates, and the
encoded batch (IPC framing, the log's offset column) is a little larger."""

MAX_CHUNK_BYTES = 16 << 20
"""A chunk spread over many partitions is sealed at this size at the latest."""


@dataclass(frozen=True)
class TopicInfo:
    """What the producer needs of a topic: partitions, layout, leaders.

    Built from the cluster's :class:`~raystream.protocol.TopicMetadata`; replaced, never
    mutated, when metadata is refreshed.
    """

    name: str
    num_partitions: int
    available_partitions: tuple[int, ...]
    record_schema: pa.Schema
    value_fields: frozenset[str] | None
    required_fields: frozenset[str]
    leaders: tuple[Any, ...]

    @classmethod
    def from_metadata(cls, metadata: Any) -> TopicInfo:
        """From a TopicMetadata (``value_schema`` None means a byte topic)."""
        schema = metadata.value_schema
        fields = None if schema is None else frozenset(schema.names)
        required = (
            frozenset() if schema is None else frozenset(f.name for f in schema if not f.nullable)
        )
        leaders = tuple(p.leader_handle for p in metadata.partitions)
        return cls(
            name=metadata.name,
            num_partitions=len(metadata.partitions),
            available_partitions=tuple(
                p.partition for p in metadata.partitions if p.leader_handle is not None
            ),
            record_schema=metadata.record_schema,
            value_fields=fields,
            required_fields=required,
            leaders=leaders,
        )

    @property
    def all_partitions(self) -> list[int]:
        """Every partition number of the topic."""
        return list(range(self.num_partitions))


# ------------------------------------------------------------------------------ results


class Chunk:
    """The records of one topic buffered since the last drain.

    ``keys``, ``values``, ``timestamps`` and ``parts`` (partition markers) are parallel
    lists, Arrow's input as is; ``headers`` maps a record's index to its headers, for the
    few records that have some. A chunk is *ready* once it holds ``limit_bytes``; it
    keeps taking records until the sender drains it or it reaches ``cap_bytes``, so
    requests grow when the sender falls behind instead of queueing up small ones.
    """

    __slots__ = (
        "cap_bytes",
        "created",
        "headers",
        "keys",
        "limit_bytes",
        "parts",
        "ready",
        "result",
        "size_bytes",
        "timestamps",
        "topic",
        "values",
    )

    def __init__(
        self, topic: str, result: ProduceResult, created: float, limit_bytes: int, cap_bytes: int
    ) -> None:
        self.topic = topic
        self.result = result
        self.created = created
        self.limit_bytes = limit_bytes
        self.cap_bytes = cap_bytes
        self.ready = False
        self.keys: list[bytes | None] = []
        self.values: list[Any] = []
        self.timestamps: list[int] = []
        self.parts: list[int] = []
        self.headers: dict[int, list[tuple[str, bytes | None]]] = {}
        self.size_bytes = 0

    def __len__(self) -> int:
        return len(self.values)


class BulkJob:
    """Prebuilt requests (``send_batch``) queued behind the chunks drained before them."""

    __slots__ = ("requests", "result", "topic")

    def __init__(self, topic: str, result: ProduceResult, requests: list[ProduceRequest]) -> None:
        self.topic = topic
        self.result = result
        self.requests = requests


class RecordAccumulator:
    """Per-topic chunks between ``send()`` and the sender; thread-safe.

    ``send()`` threads call :meth:`append`; the sender thread calls :meth:`drain` and
    :meth:`wait_for_work`. ``clock`` returns monotonic seconds.

    A topic's open chunk becomes ready at ``batch_size`` bytes (``batch_size`` times
    the partition count once it holds keyed or explicitly partitioned records, so each
    partition's share is near ``batch_size``) or ``linger_ms`` after its first record,
    and is closed to new records when drained or at ``max_request_size`` (times the
    partition count, likewise) bytes.

    Invariant: :attr:`buffered_bytes` is the size of every record appended and not yet
    completed; :meth:`append` blocks while adding one would exceed ``buffer_memory``.
    """

    def __init__(
        self,
        batch_size: int,
        linger_ms: int,
        buffer_memory: int,
        clock: Callable[[], float],
        max_block_ms: int = 60_000,
        max_request_size: int = 1 << 20,
    ) -> None:
        self.batch_size = batch_size
        self.cap_bytes = max(batch_size, int(max_request_size * REQUEST_FILL))
        self.linger_s = linger_ms / 1000
        self.buffer_memory = buffer_memory
        self.max_block_ms = max_block_ms
        self.clock = clock
        self.lock = threading.Lock()
        self._acquire = self.lock.acquire
        self._release = self.lock.release
        self.wakeup = threading.Condition(self.lock)
        self._space = threading.Condition(self.lock)
        self._open: dict[str, Chunk] = {}
        self._ready: deque[Chunk | BulkJob] = deque()
        self._incomplete: set[ProduceResult] = set()
        self.buffered_bytes = 0
        self.flushes_in_progress = 0
        self.closed = False

    def append(
        self,
        topic: str,
        key: bytes | None,
        value: Any,
        timestamp: int,
        part: int,
        size: int,
        headers: list[tuple[str, bytes | None]] | None,
        num_partitions: int,
    ) -> FutureRecordMetadata:
        """Buffer one validated record (``part``: a partition or a marker).

        Blocks up to ``max_block_ms`` while ``buffer_memory`` is full.

        Raises:
            IllegalStateError: the producer is closed.
            RaystreamTimeoutError: no buffer space within ``max_block_ms``.
            RecordTooLargeError: the record alone exceeds ``buffer_memory``.
        """
        self._acquire()  # not "with": this is the hot path, and __exit__ costs
        try:
            if self.closed:
                raise IllegalStateError("send() after the producer was closed")
            if self.buffered_bytes + size > self.buffer_memory:
                self._wait_for_space(topic, size)
            chunk = self._open.get(topic)
            if chunk is None or chunk.size_bytes + size > chunk.cap_bytes:
                chunk = self._new_chunk(topic)
            index = len(chunk.values)
            chunk.values.append(value)
            chunk.keys.append(key)
            chunk.timestamps.append(timestamp)
            chunk.parts.append(part)
            if headers:
                chunk.headers[index] = headers
            if part != STICKY and num_partitions > 1 and chunk.limit_bytes == self.batch_size:
                self._spread(chunk, num_partitions)
            self.buffered_bytes += size
            chunk.size_bytes += size
            if chunk.size_bytes >= chunk.limit_bytes and not chunk.ready:
                self._full(chunk)
            return FutureRecordMetadata(chunk.result, index)
        finally:
            self._release()

    def _new_chunk(self, topic: str) -> Chunk:
        full = self._open.get(topic)
        if full is not None:
            self._close_chunk(full)
        result = ProduceResult(topic, on_done=self._completed)
        chunk = Chunk(topic, result, self.clock(), self.batch_size, self.cap_bytes)
        self._open[topic] = chunk
        self._incomplete.add(result)
        self.wakeup.notify()  # the sender learns of the new linger deadline
        return chunk

    def _spread(self, chunk: Chunk, num_partitions: int) -> None:
        chunk.limit_bytes = max(
            self.batch_size, min(self.batch_size * num_partitions, MAX_CHUNK_BYTES)
        )
        chunk.cap_bytes = max(
            chunk.limit_bytes, min(self.cap_bytes * num_partitions, MAX_CHUNK_BYTES)
        )

    def _full(self, chunk: Chunk) -> None:
        if not chunk.ready:
            chunk.ready = True
            self._ready.append(chunk)
            self.wakeup.notify()

    def _close_chunk(self, chunk: Chunk) -> None:
        """No more records for ``chunk``; it is (or becomes) ready."""
        if self._open.get(chunk.topic) is chunk:
            del self._open[chunk.topic]
        if not chunk.ready:
            chunk.ready = True
            self._ready.append(chunk)
            self.wakeup.notify()

    def _wait_for_space(self, topic: str, size: int) -> None:
        if size > self.buffer_memory:
            raise RecordTooLargeError(
                f"a record of {size} bytes exceeds buffer_memory={self.buffer_memory}"
            )
        open_chunk = self._open.get(topic)
        if open_chunk is not None:
            self._close_chunk(open_chunk)  # send what is buffered now rather than lingering
        deadline = self.clock() + self.max_block_ms / 1000
        while self.buffered_bytes + size > self.buffer_memory:
            if self.closed:
                raise IllegalStateError("send() after the producer was closed")
            remaining = deadline - self.clock()
            if remaining <= 0:
                raise RaystreamTimeoutError(
                    f"no room for a record of {size} bytes in buffer_memory="
                    f"{self.buffer_memory} ({self.buffered_bytes} bytes unsent) within "
                    f"max_block_ms={self.max_block_ms}"
                )
            self._space.wait(remaining)

    def _completed(self, result: ProduceResult) -> None:
        with self.lock:
            self._incomplete.discard(result)
            self.buffered_bytes -= result.size_bytes
            self._space.notify_all()

    def bulk_result(self, topic: str) -> ProduceResult:
        """The shared result of a ``send_batch`` job, which a flush waits for once the
        job is queued (:meth:`add_bulk`) until it is done."""
        return ProduceResult(topic, on_done=self._completed)

    def add_bulk(self, job: BulkJob) -> None:
        """Queue ``send_batch`` requests after everything ``send()`` buffered before;
        flushes wait for them (a transaction's commit, a ``send_batch(wait=False)``)."""
        with self.lock:
            if self.closed:
                raise IllegalStateError("send_batch() after the producer was closed")
            self._incomplete.add(job.result)
            chunk = self._open.get(job.topic)
            if chunk is not None:
                self._close_chunk(chunk)
            self._ready.append(job)
            self.wakeup.notify()

    def drain(
        self, now: float, held: Collection[str] = ()
    ) -> tuple[list[Chunk | BulkJob], float | None]:
        """Take what is ready to send; also return when the next open chunk will be.

        Ready: full chunks and bulk jobs (in the order they became ready), then open
        chunks older than ``linger_ms``, or all open chunks while a flush is in progress
        or the producer is closing. The open chunks of ``held`` topics (the sender's
        calls occupy all their partitions) stay open past their linger, gathering
        records for the next call, unless full or flushed. Taken chunks take no more
        records. Call with :attr:`lock` held.
        """
        ready = list(self._ready)
        self._ready.clear()
        for item in ready:
            if isinstance(item, Chunk):
                self._take(item)
        next_deadline = None
        everything = self.flushes_in_progress > 0 or self.closed
        for chunk in list(self._open.values()):
            deadline = chunk.created + self.linger_s
            if everything or (deadline <= now and chunk.topic not in held):
                self._take(chunk)
                ready.append(chunk)
            elif chunk.topic not in held and (next_deadline is None or deadline < next_deadline):
                next_deadline = deadline
        return ready, next_deadline

    def _take(self, chunk: Chunk) -> None:
        if self._open.get(chunk.topic) is chunk:
            del self._open[chunk.topic]
        chunk.ready = True
        chunk.result.size_bytes = chunk.size_bytes

    def wait_for_work(
        self,
        timeout: float | None,
        woken: Callable[[], bool] | None = None,
        held: Collection[str] = (),
    ) -> None:
        """Block until something may be ready to drain, or ``timeout`` seconds pass.

        Checks under the lock, so a record appended just before cannot be missed: the
        wait ends when a chunk fills, a bulk job or flush arrives, the producer closes,
        the oldest open chunk's linger expires (``held`` topics' chunks aside, see
        :meth:`drain`), or ``woken()`` (checked under the lock, for a waiter that also
        notifies :attr:`wakeup` about other work) is true.
        """
        with self.lock:
            if (
                self._ready
                or ((self.closed or self.flushes_in_progress) and self._open)
                or (woken is not None and woken())
            ):
                return
            now = self.clock()
            for chunk in self._open.values():
                if chunk.topic in held:
                    continue
                remaining = chunk.created + self.linger_s - now
                if remaining <= 0:
                    return
                timeout = remaining if timeout is None else min(timeout, remaining)
            self.wakeup.wait(timeout)

    def take_all(self) -> list[Chunk | BulkJob]:
        """Remove and return everything buffered (when the producer gives up on it)."""
        with self.lock:
            ready, _ = self.drain(float("inf"))
            return ready

    def begin_flush(self) -> list[ProduceResult]:
        """Make every buffered record ready now; the results a flush must wait for."""
        with self.lock:
            self.flushes_in_progress += 1
            self.wakeup.notify()
            return list(self._incomplete)

    def end_flush(self) -> None:
        """Undo :meth:`begin_flush` once the flush is over."""
        with self.lock:
            self.flushes_in_progress -= 1

    def close(self) -> None:
        """Refuse new records; the sender drains what is buffered."""
        with self.lock:
            self.closed = True
            self.wakeup.notify()
            self._space.notify_all()

    def incomplete(self) -> list[ProduceResult]:
        """Results not done yet (buffered or in flight)."""
        with self.lock:
            return list(self._incomplete)


# ---------------------------------------------------------------------- building batches


def build_requests(
    chunk: Chunk,
    topic: TopicInfo,
    partitioner: Any,
    max_request_size: int,
) -> list[ProduceRequest]:
    """Turn a drained chunk into produce requests and attach them to its result.

    Records whose value does not fit a typed topic's schema are refused one by one
    (their futures fail with InvalidRecordError); the rest are sent.

    Args:
        chunk: a chunk no longer open (nothing appends to it any more).
        topic: the topic's current metadata.
        partitioner: has ``partition(topic, key, all, available)`` and
            ``on_new_batch(topic, partition)``; decides the sticky partition.
        max_request_size: bytes a request may have at most (approximately).

    Returns:
        The requests, in partition order then row order.
    """
    result = chunk.result
    count = len(chunk.values)
    keys: Sequence[bytes | None] = chunk.keys
    values: Sequence[Any] = chunk.values
    timestamps = np.fromiter(chunk.timestamps, dtype=np.int64, count=count)
    parts = np.fromiter(chunk.parts, dtype=np.int32, count=count)
    headers = _header_list(chunk.headers, count)
    chunk.keys, chunk.values, chunk.timestamps, chunk.parts = [], [], [], []  # free them
    chunk.headers = {}
    row_of = None
    try:
        batch = build_batch(topic.record_schema, keys, values, timestamps, headers)
    except InvalidRecordError as error:
        bad = bad_values(values, topic.record_schema.field("value").type)
        if not bad:
            raise error from None
        result.record_errors.update(bad)
        keep = np.array([i for i in range(count) if i not in bad], dtype=np.int64)
        row_of = np.full(count, -1, dtype=np.int64)
        row_of[keep] = np.arange(len(keep))
        keys = [keys[i] for i in keep]
        values = [values[i] for i in keep]
        headers = None if headers is None else [headers[i] for i in keep]
        parts = parts[keep]
        batch = build_batch(topic.record_schema, keys, values, timestamps[keep], headers)
    if batch.num_rows == 0:
        result.set_requests([], timestamps, None, row_of)
        return []
    parts = assign_partitions(parts, batch.column("key"), topic, partitioner)
    per_request = rows_per_request(batch, max_request_size, chunk.size_bytes)
    requests, order = split_by_partition(
        batch, parts, topic.name, result, chunk.created, per_request
    )
    result.set_requests(requests, timestamps, order, row_of)
    return requests


def _header_list(
    headers: dict[int, list[tuple[str, bytes | None]]], count: int
) -> list[Any] | None:
    if not headers:
        return None
    out: list[Any] = [None] * count
    for index, value in headers.items():
        out[index] = value
    return out


def assign_partitions(
    parts: np.ndarray, keys: pa.Array, topic: TopicInfo, partitioner: Any
) -> np.ndarray:
    """Resolve :data:`STICKY` and :data:`BY_KEY` markers into partition numbers.

    Keyed rows are hashed together (murmur2, Kafka's mapping); keyless rows all go to
    the topic's sticky partition, and the partitioner then moves on (the sticky batch is
    done). ``parts`` is changed in place and returned.
    """
    keyed = parts == BY_KEY
    if keyed.any():
        parts[keyed] = partitions_for_keys(keys.filter(pa.array(keyed)), topic.num_partitions)
    sticky = parts == STICKY
    if sticky.any():
        partition = partitioner.partition(
            topic.name, None, topic.all_partitions, list(topic.available_partitions)
        )
        parts[sticky] = partition
        partitioner.on_new_batch(topic.name, partition)
    return parts


def split_by_partition(
    batch: pa.RecordBatch,
    parts: np.ndarray,
    topic: str,
    result: ProduceResult,
    created: float,
    per_request: int,
) -> tuple[list[ProduceRequest], np.ndarray | None]:
    """Requests for ``batch`` whose row ``i`` goes to partition ``parts[i]``.

    Rows are stably sorted by partition (the order is returned; None when they are
    already, e.g. all in one partition); each partition's run is cut into requests of
    at most ``per_request`` rows (see :func:`rows_per_request`). Requests hold views:
    slices of ``batch`` or, when its rows must be reordered, slices of one sorted copy
    for a batch up to a chunk's size (:data:`MAX_CHUNK_BYTES`: one Arrow ``take`` for
    all partitions, rather than one per request, which at 50 partitions cost about
    twice as much per row), and row indices into ``batch`` for a larger one (a
    ``send_batch`` table is then copied request by request, never all at once).
    """
    rows = batch.num_rows
    if rows == 0:
        return [], None
    row_bytes = batch.nbytes / rows
    first = int(parts[0])
    requests = []
    if (parts == first).all():
        for lo in range(0, rows, per_request):
            piece = batch if per_request >= rows else batch.slice(lo, per_request)
            size = int(row_bytes * piece.num_rows)
            requests.append(ProduceRequest(topic, first, piece, result, lo, created, None, size))
        return requests, None
    order = np.argsort(parts, kind="stable")
    sorted_parts = parts[order]
    edges = np.flatnonzero(np.diff(sorted_parts)) + 1
    starts = np.concatenate([[0], edges]).tolist()
    stops = np.concatenate([edges, [rows]]).tolist()
    ordered = batch.take(pa.array(order)) if batch.nbytes <= MAX_CHUNK_BYTES else None
    for start, stop in zip(starts, stops, strict=True):
        partition = int(sorted_parts[start])
        for lo in range(start, stop, per_request):
            hi = min(lo + per_request, stop)
            size = int(row_bytes * (hi - lo))
            if ordered is None:
                request = ProduceRequest(
                    topic, partition, batch, result, lo, created, order[lo:hi], size
                )
            else:
                request = ProduceRequest(
                    topic, partition, ordered.slice(lo, hi - lo), result, lo, created, None, size
                )
            requests.append(request)
    return requests, order


def rows_per_request(batch: pa.RecordBatch, max_request_size: int, size_bytes: int = -1) -> int:
    """How many rows of ``batch`` fit in a request, by average row.

    A request gets :data:`REQUEST_FILL` of ``max_request_size``; ``size_bytes`` is the
    batch's size if already known (else Arrow's ``nbytes``).
    """
    rows = batch.num_rows
    if rows == 0:
        return 1
    size = batch.nbytes if size_bytes < 0 else size_bytes
    budget = max_request_size * REQUEST_FILL
    if size <= budget:
        return rows
    return max(1, int(rows * budget / size))


__all__ = [
    "BY_KEY",
    "RECORD_OVERHEAD_BYTES",
    "REQUEST_FILL",
    "STICKY",
    "BulkJob",
    "Chunk",
    "RecordAccumulator",
    "TopicInfo",
    "assign_partitions",
    "build_requests",
    "rows_per_request",
    "split_by_partition",
]
