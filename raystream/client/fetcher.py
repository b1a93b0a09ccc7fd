"""The consumer's fetcher: positions, prefetching fetches and the fetched-data buffer.

The fetcher keeps, for every assigned partition, the consumer's *position* (the offset
of the next record to hand to the application), at most one buffered fetched table and
at most one fetch in flight. A partition that is assigned, not paused, has a position
and no pending error always has a fetch in flight: the leader long-polls it (up to
``fetch_max_wait_ms``) when there is no new data, so a record produced at the end of
the log reaches a waiting consumer within milliseconds, and while the application
processes one chunk the next one is already on its way::

    position ─┐   buffer (fetched, not yet returned)   in flight (next chunk)
              ▼   [p ............................ e)   fetch(e) ──▶ leader
    returned  │   drained max_poll_records at a time

The buffer is the fetched Arrow table, sliced as records are returned (nothing is
converted before the application asks for it). A response is collected only once the
partition's buffer is empty, so a slow application holds at most one buffered table and
one finished fetch per partition. Every buffer and fetch is tagged with the position it
continues from and the partition's *epoch*; a seek, pause, reset or unassignment bumps
the epoch and drops them, and a response whose tags no longer match is ignored.

Failures: a dead or restarting replica actor and the retriable error codes
(NotLeader, UnknownTopicOrPartition, ...) refresh the topic's metadata and retry the
fetch from the same position after ``retry_backoff_ms``; OffsetOutOfRange resets the
position by ``auto_offset_reset`` (or surfaces when it is "none"); any other error
surfaces from the next poll, once, before buffered data is returned.

Records: :func:`~raystream.records.consumer_records` and
:func:`~raystream.records.iter_consumer_records` turn a fetched
table into ConsumerRecords one column at a time (no per-record Arrow access).

Not thread-safe: one fetcher belongs to one Consumer, used from one thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from raystream.client.cluster import Cluster
from raystream.client.metrics import ConsumerMetrics
from raystream.client.quotas import ClientQuotas
from raystream.errors import (
    IllegalStateError,
    LeaderNotAvailableError,
    OffsetOutOfRangeError,
    RaystreamError,
    RaystreamTimeoutError,
    UnknownTopicOrPartitionError,
)
from raystream.protocol import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from raystream.requests import FetchRequest, ListOffsetsRequest
from raystream.security.quotas import CONSUMER_BYTE_RATE
from raystream.transport import outcome, send
from raystream.types import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TopicPartition,
)

logger = logging.getLogger(__name__)

RESET_TIMESTAMPS = {"earliest": EARLIEST_TIMESTAMP, "latest": LATEST_TIMESTAMP, "none": None}
"""auto_offset_reset -> the list_offsets timestamp it resets to (None: raise)."""
MAX_WAIT_S = 1.0
"""Longest single wait inside poll (an infinite poll wakes up this often)."""


@dataclass(eq=False, slots=True)
class _Buffer:
    """A fetched table being returned to the application, ``cursor`` rows at a time.

    ``position`` is the consumer position this buffer continues from: the buffer is
    valid only while the partition's position equals it.
    """

    table: pa.Table
    offsets: np.ndarray
    cursor: int
    position: int
    end: int
    """Where the next fetch starts: after the last fetched row, or further when the
    leader examined batches past it that hold no records for this consumer (markers,
    aborted transactions)."""
    row_bytes: float
    """Fetched bytes per row (for ``bytes-consumed``)."""


@dataclass(eq=False, slots=True)
class _InFlight:
    """A fetch sent to the leader: its future and what it was issued for."""

    future: Any
    offset: int
    epoch: int
    sent_at: float


@dataclass(eq=False, slots=True)
class PartitionState:
    """What the fetcher knows about one assigned partition.

    Attributes:
        tp: the partition.
        timestamp_type: 0 CreateTime, 1 LogAppendTime (the topic's config).
        position: offset of the next record for the application; None until reset.
        reset_to: list_offsets timestamp of a pending reset (seek_to_beginning/end);
            None means "by auto_offset_reset" when ``position`` is None.
        paused: no fetching and no records while paused.
        epoch: bumped by every seek, pause, reset and unassignment; data tagged with an
            older epoch is dropped.
        high_watermark: the last high watermark a fetch reported (-1 before any).
    """

    tp: TopicPartition
    timestamp_type: int
    position: int | None = None
    reset_to: int | None = None
    paused: bool = False
    epoch: int = 0
    high_watermark: int = -1
    buffer: _Buffer | None = None
    in_flight: _InFlight | None = None
    retry_at: float = 0.0
    error: RaystreamError | None = None


class Drained(NamedTuple):
    """Records taken out of a partition's buffer by one poll.

    ``start`` is the position before them and ``epoch`` the partition's epoch then;
    ``offsets`` holds the rows' offsets (the table's ``offset`` column as numpy).
    """

    state: PartitionState
    start: int
    epoch: int
    table: pa.Table
    offsets: np.ndarray


class Fetcher:
    """Positions and prefetching fetches for the partitions assigned to one consumer.

    Args:
        cluster: where the topics live (its metadata cache gives the leaders).
        auto_offset_reset: "earliest", "latest" or "none".
        isolation_level: "read_uncommitted" or "read_committed".
        fetch_max_wait_ms: how long the leader holds a fetch that finds no data.
        fetch_min_bytes: the leader answers once this much data is available.
        max_fetch_bytes: bytes per partition fetch (at least one batch is returned).
        request_timeout_ms: how long list-offsets calls may take, retries included.
        retry_backoff_ms: pause before retrying a partition after a retriable error.
        client_id: the consumer's client id; a ``consumer_byte_rate`` quota set for it
            holds (:mod:`raystream.client.quotas`): an answer that puts the consumer
            over it delays every next fetch by the throttle time.
        clock: monotonic seconds (tests may pass their own).
    """

    def __init__(
        self,
        cluster: Cluster,
        auto_offset_reset: str = "latest",
        isolation_level: str = "read_uncommitted",
        fetch_max_wait_ms: int = 500,
        fetch_min_bytes: int = 1,
        max_fetch_bytes: int = 1 << 20,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        client_id: str = "raystream-consumer",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cluster = cluster
        self.auto_offset_reset = auto_offset_reset
        self.isolation_level = isolation_level
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_min_bytes = fetch_min_bytes
        self.max_fetch_bytes = max_fetch_bytes
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_s = retry_backoff_ms / 1000
        self._clock = clock
        self._states: dict[TopicPartition, PartitionState] = {}
        self._next_drain = 0
        # Fetches answered and not collected yet, appended by the futures' callbacks.
        self._arrived = threading.Condition()
        self._answered: list[tuple[PartitionState, _InFlight]] = []
        self.metrics = ConsumerMetrics()
        self.quotas = ClientQuotas(cluster, client_id, CONSUMER_BYTE_RATE, clock)

    # -------------------------------------------------------------- assignment

    def assign(self, partitions: list[TopicPartition]) -> None:
        """Make ``partitions`` the assignment; kept partitions keep their positions."""
        states: dict[TopicPartition, PartitionState] = {}
        for tp in partitions:
            state = self._states.pop(tp, None)
            if state is None:
                config = self.cluster.topic_metadata(tp.topic).config
                append_time = config.get("message.timestamp.type") == "LogAppendTime"
                state = PartitionState(
                    tp, TIMESTAMP_LOG_APPEND_TIME if append_time else TIMESTAMP_CREATE_TIME
                )
            states[tp] = state
        for state in self._states.values():
            self._discard(state)
        self._states = states
        self._next_drain = 0

    def assignment(self) -> list[TopicPartition]:
        """The assigned partitions, in assignment order."""
        return list(self._states)

    def state(self, tp: TopicPartition, action: str) -> PartitionState:
        """The state of an assigned partition.

        Raises:
            IllegalStateError: ``tp`` is not assigned; the message names it and ``action``.
        """
        state = self._states.get(tp)
        if state is None:
            raise IllegalStateError(
                f"{action}: partition {tp.topic}-{tp.partition} is not assigned to this "
                f"consumer (assigned: {_names(self._states)})"
            )
        return state

    def in_flight(self) -> set[TopicPartition]:
        """Partitions with a fetch on its way (what prefetching keeps busy)."""
        return {tp for tp, state in self._states.items() if state.in_flight is not None}

    # --------------------------------------------------------------- positions

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Set the position; buffered and in-flight data of ``tp`` are dropped."""
        state = self.state(tp, "seek")
        self._discard(state)
        state.position = offset
        state.reset_to = None
        state.error = None

    def request_reset(self, tp: TopicPartition, timestamp: int, action: str) -> None:
        """Reset ``tp`` to the earliest (-2) or latest (-1) offset at the next poll."""
        state = self.state(tp, action)
        self._discard(state)
        state.position = None
        state.reset_to = timestamp
        state.error = None

    def position(self, tp: TopicPartition) -> int:
        """The position of ``tp``, resetting it first if it has none (may block)."""
        state = self.state(tp, "position")
        if state.position is None:
            self._reset([state])
        assert state.position is not None
        return state.position

    def pause(self, tp: TopicPartition) -> None:
        """Stop fetching ``tp``; its buffered and in-flight data are dropped."""
        state = self.state(tp, "pause")
        self._discard(state)
        state.paused = True

    def resume(self, tp: TopicPartition) -> None:
        """Fetch ``tp`` again from its position."""
        self.state(tp, "resume").paused = False

    def paused(self) -> set[TopicPartition]:
        """The paused partitions."""
        return {tp for tp, state in self._states.items() if state.paused}

    # -------------------------------------------------------------------- poll

    def poll(self, max_records: int, timeout_s: float, advance: bool = True) -> list[Drained]:
        """Up to ``max_records`` fetched rows, waiting at most ``timeout_s`` for some.

        Resets missing positions (list-offsets calls, blocking), collects finished
        fetches, sends the next fetch of every fetchable partition, and returns rows from
        the buffers, round-robin over partitions. With ``advance`` the positions move past
        the returned rows; without it the caller moves them as it hands records out
        (iteration).

        Raises:
            OffsetOutOfRangeError: a partition has no valid position and
                auto_offset_reset is "none".
            RaystreamError: a partition's fetch failed with a non-retriable error (raised
                once; its buffered data and the other partitions' data are kept).
        """
        deadline = self._clock() + timeout_s
        while True:
            self._reset([s for s in self._states.values() if s.position is None and not s.paused])
            self._collect()
            self._send()
            self._raise_error()
            drained = self._drain(max_records, advance)
            if drained:
                return drained
            remaining = deadline - self._clock()
            if remaining <= 0:
                return []
            self._wait(remaining)

    def _send(self) -> None:
        """Send a fetch for every fetchable partition that has none in flight (none
        while the consumer is over its quota)."""
        now = self._clock()
        self.quotas.maybe_refresh(now)
        if now < self.quotas.muted_until:
            return
        refresh: set[str] = set()
        for state in self._states.values():
            if (
                state.in_flight is not None
                or state.paused
                or state.position is None
                or state.error is not None
                or state.retry_at > now
            ):
                continue
            offset = state.buffer.end if state.buffer is not None else state.position
            try:
                leader = self._leader(state.tp)
            except RaystreamError as error:  # no leader known right now
                self._retry_later(state, error, refresh)
                continue
            future = send(
                leader,
                FetchRequest(
                    state.tp.topic,
                    state.tp.partition,
                    offset,
                    self.max_fetch_bytes,
                    self.fetch_max_wait_ms,
                    self.fetch_min_bytes,
                    self.isolation_level,
                ),
            )
            flight = state.in_flight = _InFlight(future, offset, state.epoch, now)
            future.add_done_callback(
                lambda _, state=state, flight=flight: self._on_answer(state, flight)
            )
        self._refresh(refresh)

    def _on_answer(self, state: PartitionState, flight: _InFlight) -> None:
        """A fetch finished (runs on the thread that completed its future): note it and
        wake a waiting poll. Only finished fetches are ever looked at again, so a poll
        costs the same with four partitions or four hundred."""
        with self._arrived:
            self._answered.append((state, flight))
            self._arrived.notify()

    def _collect(self) -> None:
        """Take in the finished fetches of partitions whose buffers are empty.

        A finished fetch of a partition that still has buffered rows waits (in
        ``_answered``) until they are returned; one the partition has left since (a
        seek, pause, reset) is dropped.
        """
        with self._arrived:
            if not self._answered:
                return
            answered, self._answered = self._answered, []
        refresh: set[str] = set()
        keep = []
        for state, flight in answered:
            if state.in_flight is not flight:
                continue  # discarded since it was sent
            if state.buffer is not None:
                keep.append((state, flight))
                continue
            self._complete(state, refresh)
        if keep:
            with self._arrived:
                self._answered[:0] = keep
        self._refresh(refresh)

    def _complete(self, state: PartitionState, refresh: set[str]) -> None:
        flight = state.in_flight
        assert flight is not None
        state.in_flight = None
        if flight.epoch != state.epoch or flight.offset != state.position:
            return  # issued for a position the partition has left since
        tp = state.tp
        try:
            response = outcome(flight.future, None, f"fetch of {tp.topic}-{tp.partition}")
        except RaystreamError as error:
            if error.retriable:  # the replica actor died or is unreachable
                self._retry_later(state, error, refresh)
            else:
                state.error = error
            return
        except Exception as error:
            state.error = RaystreamError(f"fetch of {tp.topic}-{tp.partition} failed: {error}")
            return
        error = response.error()
        if error is None:
            if response.high_watermark >= 0:  # -1: a new leader has none yet
                state.high_watermark = response.high_watermark
            table, next_offset = response.decode()
            size = sum(map(len, response.data))
            now = self._clock()
            self.metrics.record_fetch(now - flight.sent_at, size, table.num_rows, now)
            if self.quotas.manager.active:
                self.metrics.record_throttle(self.quotas.record(size, now), now)
            if table.num_rows:
                offsets = table.column("offset").to_numpy()
                row_bytes = size / table.num_rows
                state.buffer = _Buffer(table, offsets, 0, flight.offset, next_offset, row_bytes)
            elif next_offset > flight.offset:  # compacted away, markers, aborted batches
                state.position = next_offset
        elif isinstance(error, OffsetOutOfRangeError):
            self._out_of_range(state, flight.offset, error)
        elif error.retriable:
            self._retry_later(state, error, refresh)
        else:
            state.error = error

    def _out_of_range(self, state: PartitionState, offset: int, error: RaystreamError) -> None:
        tp = state.tp
        if RESET_TIMESTAMPS[self.auto_offset_reset] is None:
            state.error = OffsetOutOfRangeError(
                f"fetch position {offset} of {tp.topic}-{tp.partition} is out of range and "
                f"auto_offset_reset='none': seek() to a valid offset ({error})"
            )
            return
        logger.info(
            "fetch position %d of %s-%d is out of range; resetting to %s",
            offset,
            tp.topic,
            tp.partition,
            self.auto_offset_reset,
        )
        self._discard(state)
        state.position = None
        state.reset_to = None

    def _retry_later(self, state: PartitionState, error: RaystreamError, refresh: set[str]) -> None:
        tp = state.tp
        logger.debug("fetch of %s-%d will be retried: %s", tp.topic, tp.partition, error)
        state.retry_at = self._clock() + self.retry_backoff_s
        refresh.add(tp.topic)

    def _refresh(self, topics: set[str]) -> None:
        for topic in topics:
            try:
                self.cluster.topic_metadata(topic, refresh=True)
            except RaystreamError as error:  # keep the old metadata; the retry will tell
                logger.debug("metadata refresh of %r failed: %s", topic, error)

    def _raise_error(self) -> None:
        for state in self._states.values():
            if state.error is not None:
                error, state.error = state.error, None
                raise error

    def _drain(self, max_records: int, advance: bool) -> list[Drained]:
        states = list(self._states.values())
        count = len(states)
        drained: list[Drained] = []
        budget = max_records
        now = self._clock()
        metrics = self.metrics
        for i in range(count):
            index = (self._next_drain + i) % count
            state = states[index]
            buffer = state.buffer
            if buffer is None:
                continue
            if buffer.position != state.position:  # the position moved under the buffer
                self._discard(state)
                continue
            cursor = buffer.cursor
            take = min(len(buffer.offsets) - cursor, budget)
            offsets = buffer.offsets[cursor : cursor + take]
            table = buffer.table.slice(cursor, take)
            drained.append(Drained(state, buffer.position, state.epoch, table, offsets))
            metrics.record_consumed(take, take * buffer.row_bytes, now)
            buffer.cursor = cursor + take
            exhausted = buffer.cursor == len(buffer.offsets)
            buffer.position = buffer.end if exhausted else int(offsets[-1]) + 1
            if advance:
                state.position = buffer.position
            if exhausted:
                state.buffer = None
            budget -= take
            if budget == 0:
                self._next_drain = (index + 1) % count
                break
        return drained

    def _wait(self, remaining_s: float) -> None:
        """Block until a fetch finishes, a retry is due or ``remaining_s`` passes.

        Called only when no buffer holds rows, so every finished fetch can be collected.
        """
        now = self._clock()
        retries = [
            s.retry_at
            for s in self._states.values()
            if s.in_flight is None and not s.paused and s.retry_at > now
        ]
        if self.quotas.muted_until > now:
            retries.append(self.quotas.muted_until)
        timeout = min([remaining_s, MAX_WAIT_S, *(r - now for r in retries)])
        with self._arrived:
            if not self._answered:
                self._arrived.wait(max(timeout, 0.0))

    # ------------------------------------------------------------------ offsets

    def _reset(self, states: list[PartitionState]) -> None:
        if not states:
            return
        default = RESET_TIMESTAMPS[self.auto_offset_reset]
        timestamps: dict[TopicPartition, int] = {}
        for state in states:
            timestamp = state.reset_to if state.reset_to is not None else default
            if timestamp is None:
                tp = state.tp
                raise OffsetOutOfRangeError(
                    f"partition {tp.topic}-{tp.partition} has no position and "
                    "auto_offset_reset='none': seek() first, or use 'earliest' or 'latest'"
                )
            timestamps[state.tp] = timestamp
        offsets = self.list_offsets(timestamps)
        for state in states:
            self._discard(state)
            state.position = offsets[state.tp]
            state.reset_to = None

    def list_offsets(self, timestamps: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Ask the leaders for offsets by timestamp (-2 earliest, -1 latest), retrying.

        "Latest" is the high watermark, or the last stable offset for read_committed.

        Retriable failures (dead actor, NotLeader, ...) refresh metadata and retry after
        ``retry_backoff_ms`` until ``request_timeout_ms`` has passed. The answer is -1
        for a timestamp no record reaches.

        Raises:
            RaystreamTimeoutError: no answer for some partition within the timeout.
            RaystreamError: a non-retriable error from a leader.
        """
        deadline = self._clock() + self.request_timeout_ms / 1000
        pending = dict(timestamps)
        found: dict[TopicPartition, int] = {}
        while True:
            futures: dict[TopicPartition, Any] = {}
            refresh: set[str] = set()
            last: RaystreamError | None = None
            for tp, timestamp in pending.items():
                try:
                    futures[tp] = send(
                        self._leader(tp),
                        ListOffsetsRequest(tp.topic, tp.partition, timestamp, self.isolation_level),
                    )
                except RaystreamError as error:
                    last = error
                    refresh.add(tp.topic)
            for tp, future in futures.items():
                what = f"list_offsets of {tp.topic}-{tp.partition}"
                try:
                    remaining = max(deadline - self._clock(), 0.001)
                    response = outcome(future, remaining, what)
                    error = response.error()
                except RaystreamError as failure:
                    error = failure
                if error is None:
                    found[tp] = response.offset
                    del pending[tp]
                elif error.retriable:
                    last = error
                    refresh.add(tp.topic)
                else:
                    raise error
            if not pending:
                return found
            if self._clock() >= deadline:
                raise RaystreamTimeoutError(
                    f"list_offsets for {_names(pending)} did not succeed within "
                    f"{self.request_timeout_ms} ms; last error: {last}"
                )
            time.sleep(self.retry_backoff_s)
            self._refresh(refresh)

    def _leader(self, tp: TopicPartition) -> Any:
        partitions = self.cluster.topic_metadata(tp.topic).partitions
        if tp.partition >= len(partitions):
            raise UnknownTopicOrPartitionError(
                f"partition {tp.partition} of topic {tp.topic!r} does not exist"
            )
        handle = partitions[tp.partition].leader_handle
        if handle is None:
            raise LeaderNotAvailableError(f"{tp.topic}-{tp.partition} has no leader now")
        return handle

    def lags(self) -> dict[TopicPartition, int]:
        """Each assigned partition's lag: the high watermark its last fetch reported
        minus its position (partitions without either are left out)."""
        return {
            tp: max(state.high_watermark - state.position, 0)
            for tp, state in self._states.items()
            if state.high_watermark >= 0 and state.position is not None
        }

    # -------------------------------------------------------------------- close

    def _discard(self, state: PartitionState) -> None:
        """Drop buffered and in-flight data of ``state`` (its position changes)."""
        state.epoch += 1
        state.buffer = None
        state.in_flight = None  # its answer is dropped when it comes

    def close(self) -> None:
        """Cancel every fetch in flight and forget the assignment."""
        for state in self._states.values():
            self._discard(state)
        self._states = {}


def _names(partitions: Any, limit: int = 10) -> str:
    names = [f"{tp.topic}-{tp.partition}" for tp in partitions]
    more = f", ... {len(names) - limit} more" if len(names) > limit else ""
    return "[" + ", ".join(names[:limit]) + more + "]"


# ------------------------------------------------------------------ conversion
