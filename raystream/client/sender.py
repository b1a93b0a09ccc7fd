"""The producer's I/O thread: drains the accumulator, keeps produce calls in flight.

One daemon thread per producer. Each turn of its loop it

1. takes what the accumulator has ready (full chunks, chunks older than ``linger_ms``,
   everything during a flush) and turns each into per-partition requests
   (:func:`~raystream.client.accumulator.build_requests`, Arrow work off the caller's
   thread);
2. issues produce calls: the requests of a partition queued behind each other go out
   together as one *batch* (up to ``max_request_size``), encoded once as an Arrow IPC
   stream, as ``produce(records, acks, request_timeout_ms, compression, producer_id,
   producer_epoch, base_sequence)`` on the leader's direct path (a Ray call where it
   has none, see :func:`~raystream.transport.call`);
3. takes in the answers that arrived and completes the requests they answer, then
   sleeps until there is something to do: a chunk ready, an answer (each call's
   future notifies the loop when it completes), a linger, backoff or
   timeout deadline. Nothing polls.

A batch is fixed once sent: a retry resends the same bytes with the same sequence
numbers, which is what lets the leader recognise it.

When to send: a partition with no call in flight sends at once (``linger_ms`` has
already passed, or the chunk is full); one with calls in flight sends another only
when its queued requests fill ``batch_size`` (or to resend a batch), up to the
in-flight limit. Small batches that trickle in meanwhile wait for the call in flight
and then travel together: an actor call costs about a millisecond of CPU on each side
here, so a call per trickle would cost more than it saves, while bulk traffic still
gets several full calls in flight. While every partition of a topic has a call in
flight, its records wait as records (the accumulator's open chunk stays open past
``linger_ms``), so they become one Arrow batch for the next call rather than one per
turn of this loop.

Idempotence (``enable_idempotence``, the default, with acks 1 or "all"): before its
first call the producer gets a producer id and epoch from the controller, and each
partition numbers its records from 0; a batch carries the sequence of its first record.
The leader writes a batch once however often it is retried (a duplicate is answered
with the original offsets) and appends a partition's batches in sequence order however
the calls arrive (it parks a batch whose predecessor has not arrived yet), so up to
``max_in_flight_requests_per_connection`` (at most 5) calls are in flight per
partition and order holds, retries included. With acks=0 there are no answers to
sequence by, so idempotence does not apply.

Without idempotence, one call is in flight per partition: on the Ray path an async
actor's calls run out of order (Ray forces ``allow_out_of_order_execution`` on async
actors, and the leader replica is one), so two pipelined calls could append in either
order; and a retried batch may be written twice (at least once).

Errors: a retriable answer (or a dead leader actor, which becomes the retriable
:class:`~raystream.errors.BrokerNotAvailableError`) marks the topic's metadata stale,
refreshes it from the controller, backs the partition off ``retry_backoff_ms`` and puts
the batch back in its place (retries go before new batches, in their original order),
until ``retries`` or ``delivery_timeout_ms`` (counted from the oldest record) runs out;
then its records fail with the last error, wrapped in RaystreamTimeoutError when the
time ran out. Any other error fails the batch's records at once. A call the leader
leaves unanswered past ``request_timeout_ms`` is abandoned and retried the same way,
and the leader is reported to the controller, which probes it and takes it out if it
hangs (for a single-replica partition, the producer is the only one who can notice).
For an idempotent producer two more rules, as in Kafka since KIP-360:

- OutOfOrderSequenceError while an earlier batch of the partition is unanswered or
  being retried is retriable: the gap is that batch, and the retry follows it. If every
  earlier batch was acknowledged, the leader lost them (acks=1 or an unclean leader
  change): the partition's sequence restarts (below) and the batch is resent.
- A batch that fails for good leaves a gap no later batch can pass. Once none of the
  partition's calls is in flight (so no copy under the old numbers can still land),
  the partition bumps its producer epoch and renumbers its remaining batches from 0;
  the leader accepts a new epoch starting at 0 and fences the old one. A
  transactional producer does not bump the epoch itself (the transaction
  coordinator owns it): the partition's waiting batches fail, the transaction must
  abort, and the producer then takes a new epoch from the coordinator
  (:meth:`Sender.set_producer`).

Transactions: with a :class:`~raystream.client.transactions.TransactionManager`
attached, the sender adds the partitions that have batches waiting to the transaction
(one coordinator call for all that are new) before any of them goes out, and marks
every batch transactional.

Client quotas: while a ``producer_byte_rate`` quota applies to the producer's
``client_id``, each call's bytes are metered as it goes out, and a call that puts the
producer over the quota stops all sending for the throttle time, as Kafka's broker
mutes the channel (:mod:`raystream.client.quotas`); records wait in their queues
meanwhile and go out in fuller calls.

With ``acks=0`` a batch's records complete (offset -1) as soon as it is issued; its
answer is only awaited to bound the calls in flight, and its errors are ignored.

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
from concurrent.futures import Future
from typing import Any

import pyarrow as pa

from raystream import requests as wire
from raystream.client.accumulator import (
    REQUEST_FILL,
    BulkJob,
    Chunk,
    RecordAccumulator,
    TopicInfo,
    build_requests,
)
from raystream.client.metrics import ProducerMetrics, payload_bytes
from raystream.client.quotas import ClientQuotas
from raystream.client.results import ProduceRequest
from raystream.config import ProducerConfig
from raystream.errors import (
    BrokerNotAvailableError,
    InvalidTxnStateError,
    LeaderNotAvailableError,
    OutOfOrderSequenceError,
    RaystreamError,
    RaystreamTimeoutError,
    RecordTooLargeError,
)
from raystream.groups.offsets_topic import OFFSETS_TOPIC
from raystream.log.batch import BatchEncoder
from raystream.log.producer_state import MAX_PRODUCER_EPOCH, NO_PRODUCER_ID, next_sequence
from raystream.protocol import NONE, encode_records
from raystream.retry import Backoff
from raystream.security.quotas import PRODUCER_BYTE_RATE
from raystream.transport import is_dead_actor_error, is_lost_call_error, send

logger = logging.getLogger(__name__)

IDLE_MS = (2, 1000)
"""First and longest pause after a loop failure (:class:`~raystream.retry.Backoff`),
so a repeating one does not spin."""
MAX_IDEMPOTENT_IN_FLIGHT = 5
"""Calls in flight per partition for an idempotent producer: the leader remembers the
last five batches of a producer, so any unanswered one is recognised when retried."""
PREPARE_MIN_BYTES = 100 << 10
"""Requests from this size on are encoded ahead of their turn (smaller ones may still
be merged with those behind them)."""
EXPIRY_CHECK_S = 0.05
"""How often queued and in-flight batches are checked against their timeouts."""


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

    def topics(self) -> list[str]:
        """The topics with cached info."""
        with self._lock:
            return list(self._infos)

    def _store(self, topic: str, metadata: Any) -> TopicInfo:
        info = TopicInfo.from_metadata(metadata)
        with self._lock:
            self._infos[topic] = info
        return info


class _Batch:
    """Consecutive requests of one partition that travel in one produce call.

    Fixed once sent: retries resend the same rows with the same producer epoch and
    base sequence (changed only when the partition's sequence restarts). ``order``
    ranks the batches of a partition as they were first sent: a tuple, so the halves
    of a batch split because the leader refused it as too large rank in its place.
    """

    __slots__ = (
        "attempts",
        "base_sequence",
        "created",
        "last_error",
        "order",
        "partition",
        "payload",
        "producer_epoch",
        "requests",
        "rows",
        "sent_at",
        "topic",
    )

    def __init__(self, requests: list[ProduceRequest], order: tuple[int, ...]) -> None:
        first = requests[0]
        self.requests = requests
        self.topic = first.topic
        self.partition = first.partition
        self.rows = sum(r.rows for r in requests)
        self.created = min(r.created for r in requests)
        self.order = order
        self.producer_epoch = -1
        self.base_sequence = -1
        self.attempts = 0
        self.sent_at = 0.0
        self.last_error: BaseException | None = None
        self.payload: Any = None

    def build(self, encoder: BatchEncoder) -> Any:
        """The call's records as Arrow IPC bytes (or their ObjectRef, if shipped ahead).

        Built once and kept for retries. Bytes, not a RecordBatch: Ray pickles a
        RecordBatch argument at about a millisecond more per call here.
        """
        if self.payload is None:
            if len(self.requests) == 1 and self.requests[0].prepared is not None:
                self.payload = self.requests[0].prepared
            elif len(self.requests) == 1:
                self.payload = encode_records(encoder, self.requests[0].payload())
            else:
                rows = pa.concat_batches([r.view() for r in self.requests])
                self.payload = encode_records(encoder, rows)
        return self.payload

    def split(self) -> tuple[_Batch, _Batch]:
        """Two batches of this one's first and second half of the rows (at a request
        boundary when it has several requests), ordered in its place: their orders
        extend its own, so they sort after every earlier batch and before every later
        one. An idempotent batch's sequence range is shared out the same way: the
        halves take ``base_sequence`` and ``base_sequence + rows of the first``, so the
        sequences the partition's later batches carry stay right."""
        requests = self.requests
        if len(requests) == 1:
            left_requests, right_requests = map(list, zip(requests[0].split(), strict=True))
        else:
            rows = 0
            cut = len(requests) - 1
            for index, request in enumerate(requests[:-1]):
                rows += request.rows
                if 2 * rows >= self.rows:
                    cut = index + 1
                    break
            left_requests, right_requests = requests[:cut], requests[cut:]
        left = _Batch(left_requests, (*self.order, 0))
        right = _Batch(right_requests, (*self.order, 1))
        for half in (left, right):
            half.producer_epoch = self.producer_epoch
            half.created = self.created
        if self.base_sequence >= 0:
            left.base_sequence = self.base_sequence
            right.base_sequence = next_sequence(self.base_sequence, left.rows)
        return left, right

    def complete(self, base_offset: int, log_append_time: int = -1) -> None:
        """Every request succeeded; the rows sit at consecutive offsets from ``base_offset``."""
        offset = base_offset
        for request in self.requests:
            request.complete(offset if base_offset >= 0 else -1, log_append_time)
            offset += request.rows
        self.payload = None

    def fail(self, error: BaseException) -> None:
        """Every request failed with ``error``."""
        for request in self.requests:
            if request.batch is not None:  # not completed already (acks=0)
                request.fail(error)
        self.payload = None

    def __repr__(self) -> str:
        return (
            f"_Batch({self.topic}-{self.partition}, order={self.order}, rows={self.rows}, "
            f"epoch={self.producer_epoch}, base_sequence={self.base_sequence})"
        )


class _PartitionQueue:
    """One partition's requests waiting to be batched, batches to resend, and calls out.

    ``unacked`` holds the idempotent batches sent and not yet acknowledged or failed (in
    flight or waiting in ``retries``), by order; ``next_sequence`` is the sequence the
    next new batch starts at, under ``producer_epoch``.
    """

    __slots__ = (
        "backoff_until",
        "in_flight",
        "next_sequence",
        "pending",
        "pending_bytes",
        "producer_epoch",
        "resequence",
        "retries",
        "unacked",
    )

    def __init__(self, producer_epoch: int) -> None:
        self.pending: deque[ProduceRequest] = deque()
        self.pending_bytes = 0
        self.retries: list[_Batch] = []
        self.unacked: dict[int, _Batch] = {}
        self.in_flight = 0
        self.backoff_until = 0.0
        self.producer_epoch = producer_epoch
        self.next_sequence = 0
        self.resequence = False

    def put_back(self, batch: _Batch) -> None:
        """Queue a batch for another attempt, in its original place among the retries."""
        orders = [b.order for b in self.retries]
        self.retries.insert(bisect.bisect_left(orders, batch.order), batch)

    def restart_sequence(self) -> bool:
        """Bump the epoch and renumber the batches to resend from sequence 0.

        Call only with nothing in flight (every unacknowledged batch is in ``retries``).
        Returns False when the epoch cannot grow any more.
        """
        if self.producer_epoch >= MAX_PRODUCER_EPOCH:
            return False
        self.producer_epoch += 1
        self.next_sequence = 0
        for batch in self.retries:
            batch.producer_epoch = self.producer_epoch
            batch.base_sequence = self.next_sequence
            self.next_sequence = next_sequence(self.next_sequence, batch.rows)
        self.resequence = False
        return True


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
        self.idempotent = config.enable_idempotence and config.acks != 0
        self._max_in_flight = (
            min(config.max_in_flight_requests_per_connection, MAX_IDEMPOTENT_IN_FLIGHT)
            if self.idempotent
            else 1
        )
        self.producer_id = NO_PRODUCER_ID
        self._producer_epoch = -1
        self._next_id_attempt = 0.0
        self._queues: dict[tuple[str, int], _PartitionQueue] = {}
        self._in_flight: dict[Future, _Batch] = {}
        self._answered: list[Future] = []  # completed calls; guarded by the accumulator lock
        self._encoder = BatchEncoder()
        self._request_budget = config.max_request_size * REQUEST_FILL
        self._queued = 0  # requests pending plus batches waiting for a retry
        self._order = itertools.count()
        self._stale: set[str] = set()
        self._next_refresh: dict[str, float] = {}
        self._next_expiry_check = 0.0
        self._metadata_max_age_s = config.metadata_max_age_ms / 1000
        self._next_metadata_refresh = clock() + self._metadata_max_age_s
        self._refreshing_metadata = False
        self._abort_error: BaseException | None = None
        self.transaction: Any = None
        self.internal_writer: str | None = None
        """Set by a server actor whose Producer writes an internal topic (see
        :data:`raystream.requests.INTERNAL_WRITERS`)."""
        self._new_producer: tuple[int, int] | None = None
        self.metrics = ProducerMetrics()  # Producer.metrics(); recorded per call
        self.quotas = ClientQuotas(topics.cluster, config.client_id, PRODUCER_BYTE_RATE, clock)

    # ------------------------------------------------------------------- control

    def abort(self, error: BaseException) -> None:
        """Stop soon, failing every pending record with ``error``."""
        self._abort_error = error
        with self._accumulator.lock:
            self._accumulator.wakeup.notify()

    def set_producer(self, producer_id: int, producer_epoch: int) -> None:
        """Take a producer id and epoch from the transaction coordinator; every partition
        restarts at sequence 0. Call with nothing queued or in flight (after
        init_transactions, or a flushed abort); applied before the next batch goes out."""
        with self._accumulator.lock:
            self._new_producer = (producer_id, producer_epoch)
            self._accumulator.wakeup.notify()

    def _adopt_producer(self) -> None:
        self.producer_id, self._producer_epoch = self._new_producer
        self._new_producer = None
        for queue in self._queues.values():
            queue.producer_epoch = self._producer_epoch
            queue.next_sequence = 0
            queue.resequence = False
            queue.unacked.clear()

    def run(self) -> None:
        backoff = Backoff(*IDLE_MS)
        while True:
            try:
                if self._turn():
                    return
                backoff.reset()
            except Exception:  # the loop survives every error
                logger.exception("producer sender loop failed; continuing")
                if self._abort_error is not None:
                    self._fail_everything(self._abort_error)
                    return
                time.sleep(backoff.next_s())  # no hot loop if the failure repeats

    def _turn(self) -> bool:
        """One turn of the loop; True when the thread should stop."""
        accumulator = self._accumulator
        if self._abort_error is not None:
            self._fail_everything(self._abort_error)
            return True
        if self._answered:
            self._take_answers(self._clock())
        if self._new_producer is not None:
            self._adopt_producer()
        self.quotas.maybe_refresh(self._clock())
        held = self._held_topics()
        with accumulator.lock:
            now = self._clock()
            ready, _ = accumulator.drain(now, held)
            if not ready and accumulator.closed and not self._in_flight and not self._queued:
                return True
        for item in ready:
            self._enqueue(item)
        now = self._clock()
        if self._stale:
            self._refresh_stale(now)
        if now >= self._next_metadata_refresh and not self._refreshing_metadata:
            self._refresh_aged(now)
        if now >= self._next_expiry_check:
            self._expire(now)
            self._next_expiry_check = now + EXPIRY_CHECK_S
        muted_s = self.quotas.muted_until - now
        if self._queued and muted_s <= 0 and self._has_producer_id(now):
            self._issue(now)
        wait_s = self._next_backoff(now)
        if self._queued and muted_s > 0:
            wait_s = muted_s if wait_s is None else min(wait_s, muted_s)
        if self._in_flight or (self._queued and wait_s is None):
            wait_s = EXPIRY_CHECK_S if wait_s is None else min(wait_s, EXPIRY_CHECK_S)
        accumulator.wait_for_work(wait_s, self._woken, self._held_topics())
        return False

    def _held_topics(self) -> set[str]:
        """Topics whose every partition has a call in flight.

        Their records wait for an answer anyway; held in the accumulator's open chunk
        meanwhile, those that trickle in become one Arrow batch when a partition frees
        up, instead of one batch per sender turn (often one record each) merged only
        at the call. At 2,000 records/s that building was most of the sender's CPU.
        """
        if not self._in_flight:
            return set()
        busy: dict[str, set[int]] = {}
        for batch in self._in_flight.values():
            busy.setdefault(batch.topic, set()).add(batch.partition)
        held = set()
        for topic, partitions in busy.items():
            info = self._topics.cached(topic)
            if info is not None and len(partitions) >= info.num_partitions:
                held.add(topic)
        return held

    def _woken(self) -> bool:
        """Whether the loop has work that the accumulator does not see (checked under
        its lock): answers, or a close that came after this turn's drain with nothing
        left to send, which would otherwise leave the thread waiting for good."""
        return bool(self._answered) or (
            self._accumulator.closed and not self._in_flight and not self._queued
        )

    def _has_producer_id(self, now: float) -> bool:
        """Whether batches may go out: not idempotent, or the producer id is known.

        The id is asked from the controller once, before the first call; a failure
        (the controller restarting) is retried after ``retry_backoff_ms`` while the
        records wait (up to their delivery timeout).
        """
        if not self.idempotent or self.producer_id != NO_PRODUCER_ID:
            return True
        if now < self._next_id_attempt:
            return False
        try:
            timeout_s = self._config.request_timeout_ms / 1000
            self.producer_id, self._producer_epoch = self._topics.cluster.call(
                "init_producer_id", timeout_s=timeout_s
            )
            return True
        except Exception as error:
            logger.info("no producer id yet (%s); retrying", error)
            self._next_id_attempt = now + self._config.retry_backoff_ms / 1000
            return False

    # ------------------------------------------------------------------ queueing

    def _enqueue(self, item: Chunk | BulkJob) -> None:
        item.result.metrics = self.metrics  # failed requests count as record errors
        if isinstance(item, BulkJob):
            requests = item.requests
        else:
            try:
                info = self._topics.get(item.topic)
                requests = build_requests(
                    item, info, self._partitioner, self._config.max_request_size
                )
            except Exception as error:
                self.metrics.record_errors(len(item), self._clock())
                item.result.fail_all(_as_raystream_error(error))
                return
            if item.result.record_errors:  # records the topic's schema refused
                self.metrics.record_errors(len(item.result.record_errors), self._clock())
        for request in requests:
            queue = self._queue(request.topic, request.partition)
            queue.pending.append(request)
            queue.pending_bytes += request.size_bytes
        self._queued += len(requests)

    def _queue(self, topic: str, partition: int) -> _PartitionQueue:
        key = (topic, partition)
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = _PartitionQueue(self._producer_epoch)
        return queue

    def _issue(self, now: float) -> None:
        batch_size = self._config.batch_size
        if self.transaction is not None:
            self._add_to_transaction()
        for (topic, partition), queue in self._queues.items():
            if not (queue.pending or queue.retries) or now < queue.backoff_until:
                continue
            if queue.resequence:
                if queue.in_flight:
                    continue  # wait until no call under the old numbers can land
                if self.transaction is not None:
                    self._fail_queue(
                        queue,
                        InvalidTxnStateError(
                            f"an earlier batch to {topic}-{partition} failed: abort the transaction"
                        ),
                    )
                    continue
                if not queue.restart_sequence():
                    self._fail_partition(queue, topic, partition)
                    continue
            info = self._topics.cached(topic)
            leader = (
                info.leaders[partition]
                if info is not None and partition < len(info.leaders)
                else None
            )
            while queue.in_flight < self._max_in_flight and (
                queue.retries
                or (queue.pending and (not queue.in_flight or queue.pending_bytes >= batch_size))
            ):
                batch = self._next_batch(queue)
                batch.attempts += 1
                batch.sent_at = now
                if leader is None:
                    error = LeaderNotAvailableError(
                        f"partition {partition} of topic {topic!r} has no leader"
                    )
                    self._retry_or_fail(batch, error, now)
                    break
                try:
                    future = self._produce(leader, batch)
                except Exception as error:
                    self._retry_or_fail(batch, _ray_error(error, batch), now)
                    break
                self._in_flight[future] = batch
                future.add_done_callback(self._on_answer)
                queue.in_flight += 1
                size = payload_bytes(batch.payload)
                self.metrics.record_send(
                    batch.rows, size, batch.attempts > 1, now - batch.created, now
                )
                if self._acks == 0:
                    batch.complete(-1)
                if self.quotas.manager.active:
                    throttle_ms = self.quotas.record(size, now)
                    self.metrics.record_throttle(throttle_ms, now)
                    if throttle_ms:
                        break
            if queue.pending and queue.in_flight:
                self._prepare(queue.pending[0])
            if now < self.quotas.muted_until:
                return  # over quota: nothing more goes out until the mute ends

    def _add_to_transaction(self) -> None:
        """Add the partitions with batches waiting to the transaction (one call for the
        new ones); if that fails, their batches fail with the error."""
        waiting = [key for key, q in self._queues.items() if q.pending or q.retries]
        error = self.transaction.add_partitions(waiting)
        if error is not None:
            for key in waiting:
                if key not in self.transaction.partitions:
                    self._fail_queue(self._queues[key], error)

    def _prepare(self, request: ProduceRequest) -> None:
        """Encode a large request's payload while its turn waits.

        Building a request of about a megabyte costs about as much as the leader's
        append of it; done while the previous call is in flight, the two overlap instead
        of adding up. Small requests are left alone (they may still be merged with the
        ones queued behind them).
        """
        if request.prepared is None and request.size_bytes >= PREPARE_MIN_BYTES:
            request.prepared = encode_records(self._encoder, request.payload())

    def _next_batch(self, queue: _PartitionQueue) -> _Batch:
        """The batch to send next: the first one to retry, else a new one.

        A new batch takes the next request with the ones queued behind it that fit in
        the same call, so calls grow (up to ``max_request_size``) when the sender falls
        behind; an idempotent one gets the partition's next sequence.
        """
        self._queued -= 1
        if queue.retries:
            return queue.retries.pop(0)
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
        self._queued -= len(group) - 1
        queue.pending_bytes -= size
        batch = _Batch(group, (next(self._order),))
        if self.idempotent:
            if queue.producer_epoch < 0:  # queued before the producer id was known
                queue.producer_epoch = self._producer_epoch
            batch.producer_epoch = queue.producer_epoch
            batch.base_sequence = queue.next_sequence
            queue.next_sequence = next_sequence(queue.next_sequence, batch.rows)
            queue.unacked[batch.order] = batch
        return batch

    def _produce(self, leader: Any, batch: _Batch) -> Future:
        config = self._config
        transactional = self.transaction is not None
        return send(
            leader,
            wire.ProduceRequest(
                batch.topic,
                batch.partition,
                batch.build(self._encoder),
                self._acks,
                config.request_timeout_ms,
                config.compression_type,
                self.producer_id if self.idempotent else NO_PRODUCER_ID,
                batch.producer_epoch,
                batch.base_sequence,
                transactional,
                # Offsets of send_offsets_to_transaction: the one internal topic a
                # producer writes (a client's own send there is refused).
                wire.TRANSACTIONAL_OFFSETS_WRITER
                if transactional and batch.topic == OFFSETS_TOPIC
                else self.internal_writer,
            ),
        )

    def _next_backoff(self, now: float) -> float | None:
        waits = [
            q.backoff_until - now
            for q in self._queues.values()
            if (q.pending or q.retries)
            and q.backoff_until > now
            and q.in_flight < self._max_in_flight
        ]
        return max(min(waits), 0.0) if waits else None

    # ------------------------------------------------------------------- answers

    def _on_answer(self, future: Future) -> None:
        """A call completed (runs on a Ray thread): queue it and wake the loop."""
        with self._accumulator.lock:
            self._answered.append(future)
            self._accumulator.wakeup.notify()

    def _take_answers(self, now: float) -> None:
        with self._accumulator.lock:
            answered, self._answered = self._answered, []
        for future in answered:
            batch = self._in_flight.pop(future, None)
            if batch is None:  # abandoned after request_timeout_ms
                continue
            queue = self._queues[(batch.topic, batch.partition)]
            queue.in_flight -= 1
            self.metrics.record_answer(now - batch.sent_at, now)
            if self._acks == 0:  # completed when issued; errors are not reported
                continue
            try:
                response = future.result()
            except Exception as error:
                self._retry_or_fail(batch, _ray_error(error, batch), now)
                continue
            if response.error_code == NONE:
                queue.unacked.pop(batch.order, None)
                batch.complete(response.base_offset, response.log_append_time)
            else:
                self._retry_or_fail(batch, response.error(), now)

    def _retry_or_fail(self, batch: _Batch, error: BaseException, now: float) -> None:
        config = self._config
        queue = self._queues[(batch.topic, batch.partition)]
        retriable = getattr(error, "retriable", False)
        if isinstance(error, OutOfOrderSequenceError) and batch.order in queue.unacked:
            retriable = True
            if all(order >= batch.order for order in queue.unacked):
                queue.resequence = True  # the leader lost acknowledged batches
        if isinstance(error, RecordTooLargeError) and batch.rows > 1:
            self._split(queue, batch)
            return
        if not retriable:
            self._fail_batch(batch, error)
            return
        batch.last_error = error
        if now - batch.created >= config.delivery_timeout_ms / 1000:
            self._fail_batch(batch, _expired(batch, config.delivery_timeout_ms))
            return
        if batch.attempts > config.retries:
            self._fail_batch(batch, error)
            return
        logger.debug("retrying %r after %s", batch, error)
        if getattr(error, "invalid_metadata", False):
            self._stale.add(batch.topic)
        queue.backoff_until = now + config.retry_backoff_ms / 1000
        queue.put_back(batch)
        self._queued += 1

    def _split(self, queue: _PartitionQueue, batch: _Batch) -> None:
        """Resend a batch the leader refused as too large as its two halves, in its place.

        As Kafka's producer does: only a single record over ``max.message.bytes`` fails
        (a half of one record is that record). A split is no retry: the halves start
        with no attempts. The refused batch was not written, so its halves take its
        sequence numbers (see :meth:`_Batch.split`) and nothing else is renumbered.
        """
        logger.debug("splitting %r, refused as too large", batch)
        unacked = queue.unacked.pop(batch.order, None) is not None
        for half in batch.split():
            if unacked:
                queue.unacked[half.order] = half
            queue.put_back(half)
        self._queued += 2

    def _fail_batch(self, batch: _Batch, error: BaseException) -> None:
        """Fail a batch's records; an idempotent partition must then renumber."""
        batch.fail(error)
        queue = self._queues[(batch.topic, batch.partition)]
        if queue.unacked.pop(batch.order, None) is not None:
            queue.resequence = True  # its sequences leave a gap at the leader

    def _fail_partition(self, queue: _PartitionQueue, topic: str, partition: int) -> None:
        """The partition's epoch is exhausted: fail what waits (a new producer is needed)."""
        self._fail_queue(
            queue,
            OutOfOrderSequenceError(
                f"{topic}-{partition}: the producer's epoch cannot be bumped past "
                f"{MAX_PRODUCER_EPOCH} to restart its sequence; create a new producer"
            ),
        )

    def _fail_queue(self, queue: _PartitionQueue, error: BaseException) -> None:
        """Fail every batch and request waiting in ``queue``."""
        for batch in queue.retries:
            batch.fail(error)
        for request in queue.pending:
            request.fail(error)
        self._queued -= len(queue.retries) + len(queue.pending)
        queue.retries.clear()
        queue.pending.clear()
        queue.pending_bytes = 0
        queue.unacked.clear()

    def _refresh_stale(self, now: float) -> None:
        for topic in list(self._stale):
            if now < self._next_refresh.get(topic, 0.0):
                continue
            self._next_refresh[topic] = now + self._config.retry_backoff_ms / 1000
            if self._try_refresh(topic):
                self._stale.discard(topic)

    def _refresh_aged(self, now: float) -> None:
        """Fetch the metadata of every topic in use again (``metadata_max_age_ms``).

        In a thread of its own: a controller that is restarting would otherwise hold
        up the sending to leaders that are serving all along.
        """
        self._next_metadata_refresh = now + self._metadata_max_age_s
        self._refreshing_metadata = True
        threading.Thread(
            target=self._refresh_topics, name="raystream-producer-metadata", daemon=True
        ).start()

    def _refresh_topics(self) -> None:
        try:
            for topic in self._topics.topics():
                self._try_refresh(topic)
        finally:
            self._refreshing_metadata = False

    def _try_refresh(self, topic: str) -> bool:
        """Renew ``topic``'s metadata; on failure (the controller restarting, the topic
        deleted) keep what is cached and say so."""
        try:
            self._topics.refresh(topic)
        except Exception as error:
            logger.debug("metadata refresh of %r failed: %s", topic, error)
            return False
        return True

    def _expire(self, now: float) -> None:
        """Abandon the calls unanswered past ``request_timeout_ms`` (their batches are
        retried or failed; the controller hears of each silent leader, which may be
        hung) and fail what waited past ``delivery_timeout_ms``."""
        config = self._config
        request_timeout_s = config.request_timeout_ms / 1000
        silent: set[tuple[str, int]] = set()
        for future, batch in list(self._in_flight.items()):
            if now - batch.sent_at >= request_timeout_s:
                # Abandoned: the call may still land; an idempotent retry is then a
                # duplicate the leader answers with the original offsets.
                del self._in_flight[future]
                self._queues[(batch.topic, batch.partition)].in_flight -= 1
                silent.add((batch.topic, batch.partition))
                if self._acks == 0:
                    continue
                error = RaystreamTimeoutError(
                    f"produce to {batch.topic}-{batch.partition} got no answer "
                    f"within request_timeout_ms={config.request_timeout_ms}"
                )
                self._retry_or_fail(batch, error, now)
        for topic, partition in silent:
            self._topics.cluster.report_unresponsive_leader(topic, partition)
        delivery_timeout_s = config.delivery_timeout_ms / 1000
        for queue in self._queues.values():
            if queue.pending and now - queue.pending[0].created >= delivery_timeout_s:
                keep = deque()
                for request in queue.pending:
                    if now - request.created >= delivery_timeout_s:
                        self._queued -= 1
                        queue.pending_bytes -= request.size_bytes
                        request.fail(_expired_request(request, config.delivery_timeout_ms))
                    else:
                        keep.append(request)
                queue.pending = keep
            for batch in list(queue.retries):
                if now - batch.created >= delivery_timeout_s:
                    queue.retries.remove(batch)
                    self._queued -= 1
                    self._fail_batch(batch, _expired(batch, config.delivery_timeout_ms))

    def _fail_everything(self, error: BaseException) -> None:
        for batch in self._in_flight.values():
            batch.fail(error)
        self._in_flight.clear()
        for queue in self._queues.values():
            for batch in queue.retries:
                batch.fail(error)
            for request in queue.pending:
                request.fail(error)
            queue.retries.clear()
            queue.pending.clear()
            queue.pending_bytes = 0
            queue.unacked.clear()
            queue.in_flight = 0
        self._queued = 0
        for item in self._accumulator.take_all():
            item.result.fail_all(error)


def _expired(batch: _Batch, delivery_timeout_ms: int) -> RaystreamTimeoutError:
    error = RaystreamTimeoutError(
        f"records for {batch.topic}-{batch.partition} expired: not acknowledged within "
        f"delivery_timeout_ms={delivery_timeout_ms} after {batch.attempts} attempt(s); "
        f"last error: {batch.last_error}"
    )
    error.__cause__ = batch.last_error
    return error


def _expired_request(request: ProduceRequest, delivery_timeout_ms: int) -> RaystreamTimeoutError:
    return RaystreamTimeoutError(
        f"records for {request.topic}-{request.partition} expired: not sent within "
        f"delivery_timeout_ms={delivery_timeout_ms}"
    )


def _ray_error(error: BaseException, batch: _Batch) -> RaystreamError:
    if is_dead_actor_error(error):
        return BrokerNotAvailableError(
            f"the leader of {batch.topic}-{batch.partition} is unavailable: {error}"
        )
    if is_lost_call_error(error):
        return BrokerNotAvailableError(
            f"produce to {batch.topic}-{batch.partition} was lost: {error}"
        )
    return _as_raystream_error(error)


def _as_raystream_error(error: BaseException) -> RaystreamError:
    if isinstance(error, RaystreamError):
        return error
    wrapped = RaystreamError(f"{type(error).__name__}: {error}")
    wrapped.__cause__ = error
    return wrapped


__all__ = ["MAX_IDEMPOTENT_IN_FLIGHT", "PREPARE_MIN_BYTES", "Sender", "TopicCache"]
