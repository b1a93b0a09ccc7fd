"""The producer's I/O thread: drains the accumulator, keeps produce calls in flight.

One daemon thread per producer. Each turn of its loop it

1. takes what the accumulator has ready (full chunks, chunks older than ``linger_ms``,
   everything during a flush) and turns each into per-partition requests
   (:func:`~raystream.client.accumulator.build_requests`, Arrow work off the caller's
   thread);
2. issues queued requests, one in flight per partition (see Ordering), as
   ``leader.produce.remote(batch, acks, request_timeout_ms, compression)``;
3. waits briefly (``ray.wait`` with a short timeout, so new batches are picked up) for
   answers and completes the requests they answer.

Errors: a retriable answer (or a dead leader actor, which becomes the retriable
:class:`~raystream.errors.BrokerNotAvailableError`) marks the topic's metadata stale,
refreshes it from the controller, backs the partition off ``retry_backoff_ms`` and puts
the request back in its place (by sequence number) in the partition's queue, until
``retries`` or ``delivery_timeout_ms`` (counted from the chunk's first record) runs
out; then its records fail with the last error, wrapped in RaystreamTimeoutError when
the time ran out. Any other error fails the request's records at once.

Ordering: a partition's requests are issued in sequence order, and only one is in
flight per partition at a time, so a partition's records land in ``send()`` order,
retries included. One, not ``max_in_flight_requests_per_connection``: Ray runs an
async actor's calls out of order (it forces ``allow_out_of_order_execution`` on async
actors, and the leader replica is one), so two pipelined produce calls can append in
either order. Pipelining per partition needs the leader to order appends by sequence
number (the idempotence issue); until then the option is validated and capped at
:data:`ORDERED_IN_FLIGHT`. Throughput does not suffer much: the requests of a
partition queued while its call is in flight go together in the next call (up to
``max_request_size``), so calls get larger exactly when the sender is busy. Sequence
numbers are also what will stop a request that timed out but was in fact written
from being written again by its retry; for now delivery is at least once.

With ``acks=0`` a request's records complete (offset -1) as soon as it is issued; its
answer is only awaited to bound the requests in flight, and its errors are ignored.

The loop never dies of an exception: it logs it, and if the thread must stop it fails
every record still pending so no caller waits forever.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import ray

from raystream.client.accumulator import (
    REQUEST_FILL,
    BulkJob,
    Chunk,
    RecordAccumulator,
    TopicInfo,
    build_requests,
)
from raystream.client.results import (
    ProduceRequest,
)
from raystream.client.transport import is_dead_actor_error
from raystream.config import ProducerConfig
from raystream.errors import (
    BrokerNotAvailableError,
    LeaderNotAvailableError,
    RaystreamError,
    RaystreamTimeoutError,
)
from raystream.protocol import NONE

logger = logging.getLogger(__name__)

POLL_S = 0.002
"""How long one wait for answers lasts before the loop looks for new batches."""
ORDERED_IN_FLIGHT = 1
"""Produce calls in flight per partition: more would let the async leader reorder them."""
PREPARE_MIN_BYTES = 100 << 10
"""Requests from this size on are put in the object store ahead of their turn (Ray
passes smaller arguments inline)."""
EXPIRY_CHECK_S = 0.05
"""How often queued and in-flight requests are checked against their timeouts."""


class TopicCache:
    """The producer's view of topic metadata, one :class:`TopicInfo` per topic.

    Thread-safe: readers get the current immutable TopicInfo; a refresh replaces it.
    """

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self._infos: dict[str, TopicInfo] = {}
        self._lock = threading.Lock()

    def get(self, topic: str) -> TopicInfo:
        """The topic's info, asking the controller when it is not cached.

        Raises:
            UnknownTopicOrPartitionError: the topic does not exist.
        """
        info = self._infos.get(topic)
        if info is None:
            info = self._store(topic, self.cluster.topic_metadata(topic))
        return info

    def cached(self, topic: str) -> TopicInfo | None:
        """The cached info, or None."""
        return self._infos.get(topic)

    def refresh(self, topic: str) -> TopicInfo:
        """Ask the controller again (after an error that says the cache is stale)."""
        return self._store(topic, self.cluster.topic_metadata(topic, refresh=True))

    def _store(self, topic: str, metadata: Any) -> TopicInfo:
        info = TopicInfo.from_metadata(metadata)
        with self._lock:
            self._infos[topic] = info
        return info


class _PartitionQueue:
    """Requests of one partition waiting to be issued, and how many are in flight."""

    __slots__ = ("backoff_until", "in_flight", "pending")

    def __init__(self) -> None:
        self.pending: deque[ProduceRequest] = deque()
        self.in_flight = 0
        self.backoff_until = 0.0

    def put_back(self, request: ProduceRequest) -> None:
        """Re-queue a request for retry in its original place (by sequence number)."""
        seqs = [r.seq for r in self.pending]
        self.pending.insert(bisect.bisect_left(seqs, request.seq), request)


class Sender(threading.Thread):
    """The I/O thread of one producer (see the module docstring).

    Args:
        accumulator: where records wait; the sender drains it.
        topics: metadata cache shared with the producer.
        partitioner: decides sticky partitions when chunks are built.
        config: the producer's settings.
        clock: monotonic seconds.
    """

    def __init__(
        self,
        accumulator: RecordAccumulator,
        topics: TopicCache,
        partitioner: Any,
        config: ProducerConfig,
        clock: Callable[[], float],
    ) -> None:
        super().__init__(name="raystream-producer-sender", daemon=True)
        self._accumulator = accumulator
        self._topics = topics
        self._partitioner = partitioner
        self._config = config
        self._clock = clock
        self._acks = config.acks
        self._max_in_flight = min(config.max_in_flight_requests_per_connection, ORDERED_IN_FLIGHT)
        self._queues: dict[tuple[str, int], _PartitionQueue] = {}
        self._in_flight: dict[Any, list[ProduceRequest]] = {}
        self._request_budget = config.max_request_size * REQUEST_FILL
        self._queued = 0
        self._seq = itertools.count()
        self._stale: set[str] = set()
        self._next_refresh: dict[str, float] = {}
        self._next_expiry_check = 0.0
        self._abort_error: BaseException | None = None

    # ------------------------------------------------------------------- control

    def abort(self, error: BaseException) -> None:
        """Stop soon, failing every pending record with ``error``."""
        self._abort_error = error
        with self._accumulator.lock:
            self._accumulator.wakeup.notify()

    def run(self) -> None:
        while True:
            try:
                if self._turn():
                    return
            except Exception:  # the loop survives every error
                logger.exception("producer sender loop failed; continuing")
                if self._abort_error is not None:
                    self._fail_everything(self._abort_error)
                    return
                time.sleep(POLL_S)  # no hot loop if the failure repeats

    def _turn(self) -> bool:
        """One turn of the loop; True when the thread should stop."""
        accumulator = self._accumulator
        if self._abort_error is not None:
            self._fail_everything(self._abort_error)
            return True
        with accumulator.lock:
            now = self._clock()
            ready, _ = accumulator.drain(now)
            if not ready and accumulator.closed and not self._in_flight and not self._queued:
                return True
        for item in ready:
            self._enqueue(item)
        now = self._clock()
        if self._stale:
            self._refresh_stale(now)
        if now >= self._next_expiry_check:
            self._expire(now)
            self._next_expiry_check = now + EXPIRY_CHECK_S
        if self._queued:
            self._issue(now)
        wait_s = self._next_backoff(now)
        if self._in_flight:
            self._poll(POLL_S if wait_s is None else min(POLL_S, wait_s))
        else:
            if self._queued and wait_s is None:
                wait_s = POLL_S
            accumulator.wait_for_work(wait_s)
        return False

    # ------------------------------------------------------------------ queueing

    def _enqueue(self, item: Chunk | BulkJob) -> None:
        if isinstance(item, BulkJob):
            requests = item.requests
        else:
            try:
                info = self._topics.get(item.topic)
                requests = build_requests(
                    item, info, self._partitioner, self._config.max_request_size
                )
            except Exception as error:
                item.result.fail_all(_as_raystream_error(error))
                return
        for request in requests:
            request.seq = next(self._seq)
            key = (request.topic, request.partition)
            queue = self._queues.get(key)
            if queue is None:
                queue = self._queues[key] = _PartitionQueue()
            queue.pending.append(request)
        self._queued += len(requests)

    def _issue(self, now: float) -> None:
        for (topic, partition), queue in self._queues.items():
            if not queue.pending or now < queue.backoff_until:
                continue
            info = self._topics.cached(topic)
            leader = (
                info.leaders[partition]
                if info is not None and partition < len(info.leaders)
                else None
            )
            while queue.pending and queue.in_flight < self._max_in_flight:
                group = self._take_group(queue)
                for request in group:
                    request.attempts += 1
                    request.sent_at = now
                if leader is None:
                    error = LeaderNotAvailableError(
                        f"partition {partition} of topic {topic!r} has no leader"
                    )
                    for request in group:
                        self._retry_or_fail(request, error, now)
                    break
                try:
                    ref = self._produce(leader, group)
                except Exception as error:
                    for request in group:
                        self._retry_or_fail(request, _ray_error(error, request), now)
                    break
                self._in_flight[ref] = group
                queue.in_flight += 1
                if self._acks == 0:
                    for request in group:
                        request.complete(-1)
            if queue.pending and queue.in_flight >= self._max_in_flight:
                self._prepare(queue.pending[0])

    def _prepare(self, request: ProduceRequest) -> None:
        """Ship a large request's payload to the object store while its turn waits.

        Building and serializing a request of about a megabyte costs about as much as
        the leader's append of it; done while the previous call is in flight, the two
        overlap instead of adding up. Small requests travel inline and are left alone
        (they may still be merged with the ones queued behind them).
        """
        if request.prepared is None and request.size_bytes >= PREPARE_MIN_BYTES:
            request.prepared = ray.put(request.payload())

    def _take_group(self, queue: _PartitionQueue) -> list[ProduceRequest]:
        """The next request, with the ones queued behind it that fit in the same call.

        Chunks drained while a partition's call was in flight are sent together, so
        calls grow (up to ``max_request_size``) when the sender falls behind.
        """
        first = queue.pending.popleft()
        group = [first]
        size = first.size_bytes
        while (
            first.prepared is None
            and queue.pending
            and queue.pending[0].prepared is None
            and size + queue.pending[0].size_bytes <= self._request_budget
        ):
            request = queue.pending.popleft()
            group.append(request)
            size += request.size_bytes
        self._queued -= len(group)
        return group

    def _produce(self, leader: Any, group: list[ProduceRequest]) -> Any:
        # Compact payloads built now, not when queued: one request's worth of memory
        # at a time (the allocator reuses it) instead of a copy of everything queued.
        if len(group) == 1:
            batch = group[0].prepared or group[0].payload()
        else:
            batch = pa.concat_batches([r.view() for r in group])
        config = self._config
        return leader.produce.remote(
            batch, self._acks, config.request_timeout_ms, config.compression_type
        )

    def _next_backoff(self, now: float) -> float | None:
        waits = [
            q.backoff_until - now
            for q in self._queues.values()
            if q.pending and q.backoff_until > now and q.in_flight < self._max_in_flight
        ]
        return max(min(waits), 0.0) if waits else None

    # ------------------------------------------------------------------- answers

    def _poll(self, timeout_s: float) -> None:
        refs = list(self._in_flight)
        ready, _ = ray.wait(refs, num_returns=1, timeout=timeout_s)
        if not ready:
            return
        if len(refs) > 1:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        now = self._clock()
        for ref in ready:
            group = self._in_flight.pop(ref, None)
            if group is None:
                continue
            self._queues[(group[0].topic, group[0].partition)].in_flight -= 1
            if self._acks == 0:  # completed when issued; errors are not reported
                continue
            try:
                response = ray.get(ref, timeout=0)
            except Exception as error:
                for request in group:
                    self._retry_or_fail(request, _ray_error(error, request), now)
                continue
            if response.error_code == NONE:
                offset = response.base_offset
                for request in group:
                    request.complete(offset, response.log_append_time)
                    offset += request.rows
            else:
                error = response.error()
                for request in group:
                    self._retry_or_fail(request, error, now)

    def _retry_or_fail(self, request: ProduceRequest, error: BaseException, now: float) -> None:
        config = self._config
        if not getattr(error, "retriable", False):
            request.fail(error)
            return
        request.last_error = error
        if now - request.created >= config.delivery_timeout_ms / 1000:
            request.fail(_expired(request, config.delivery_timeout_ms))
            return
        if request.attempts > config.retries:
            request.fail(error)
            return
        logger.debug("retrying %r after %s", request, error)
        if getattr(error, "invalid_metadata", False):
            self._stale.add(request.topic)
        queue = self._queues[(request.topic, request.partition)]
        queue.backoff_until = now + config.retry_backoff_ms / 1000
        queue.put_back(request)
        self._queued += 1

    def _refresh_stale(self, now: float) -> None:
        for topic in list(self._stale):
            if now < self._next_refresh.get(topic, 0.0):
                continue
            self._next_refresh[topic] = now + self._config.retry_backoff_ms / 1000
            try:
                self._topics.refresh(topic)
                self._stale.discard(topic)
            except Exception as error:  # the controller may be restarting too
                logger.debug("metadata refresh of %r failed: %s", topic, error)

    def _expire(self, now: float) -> None:
        config = self._config
        request_timeout_s = config.request_timeout_ms / 1000
        for ref, group in list(self._in_flight.items()):
            if now - group[0].sent_at >= request_timeout_s:
                # Abandoned: the call may still land (no sequence numbers yet).
                del self._in_flight[ref]
                self._queues[(group[0].topic, group[0].partition)].in_flight -= 1
                if self._acks == 0:
                    continue
                error = RaystreamTimeoutError(
                    f"produce to {group[0].topic}-{group[0].partition} got no answer "
                    f"within request_timeout_ms={config.request_timeout_ms}"
                )
                for request in group:
                    self._retry_or_fail(request, error, now)
        delivery_timeout_s = config.delivery_timeout_ms / 1000
        for queue in self._queues.values():
            if queue.pending and now - queue.pending[0].created >= delivery_timeout_s:
                keep = deque()
                for request in queue.pending:
                    if now - request.created >= delivery_timeout_s:
                        self._queued -= 1
                        request.fail(_expired(request, config.delivery_timeout_ms))
                    else:
                        keep.append(request)
                queue.pending = keep

    def _fail_everything(self, error: BaseException) -> None:
        for group in self._in_flight.values():
            for request in group:
                if request.batch is not None:  # acks=0 requests completed already
                    request.fail(error)
        self._in_flight.clear()
        for queue in self._queues.values():
            for request in queue.pending:
                request.fail(error)
            queue.pending.clear()
            queue.in_flight = 0
        self._queued = 0
        for item in self._accumulator.take_all():
            item.result.fail_all(error)


def _expired(request: ProduceRequest, delivery_timeout_ms: int) -> RaystreamTimeoutError:
    error = RaystreamTimeoutError(
        f"records for {request.topic}-{request.partition} expired: not acknowledged within "
        f"delivery_timeout_ms={delivery_timeout_ms} after {request.attempts} attempt(s); "
        f"last error: {request.last_error}"
    )
    error.__cause__ = request.last_error
    return error


def _ray_error(error: BaseException, request: ProduceRequest) -> RaystreamError:
    if is_dead_actor_error(error):
        return BrokerNotAvailableError(
            f"the leader of {request.topic}-{request.partition} is unavailable: {error}"
        )
    if isinstance(error, ray.exceptions.RaySystemError | ray.exceptions.ObjectLostError):
        return BrokerNotAvailableError(
            f"produce to {request.topic}-{request.partition} was lost: {error}"
        )
    return _as_raystream_error(error)


def _as_raystream_error(error: BaseException) -> RaystreamError:
    if isinstance(error, RaystreamError):
        return error
    wrapped = RaystreamError(f"{type(error).__name__}: {error}")
    wrapped.__cause__ = error
    return wrapped


__all__ = ["ORDERED_IN_FLIGHT", "PREPARE_MIN_BYTES", "Sender", "TopicCache"]
