"""The transaction coordinator actor: transactional ids, their producers and markers.

One per cluster, detached and named, started by the controller the first time a
producer asks for it (``find_transaction_coordinator``), restarted by Ray when it dies.
A thin async shell: :mod:`raystream.transactions.metadata` holds the rules, the
internal topic ``__transaction_state`` the state (written with ``acks=all`` before the
coordinator acts on it), and a restarted coordinator rebuilds every transactional id
by replaying that topic, then finishes the transactions it finds half-ended.

Ending a transaction (Kafka's two phases): the outcome (PrepareCommit/PrepareAbort) is
persisted first, so it is decided for good, and ``end_txn`` answers then, as Kafka's
coordinator does; in the background a marker goes to every partition of the
transaction (retried through leader changes until its ISR has it), then the id is
Complete*, or Ongoing again when the end carried partitions into the next transaction
(the producer's loop writes the same ones each time: they need no add then). A
coordinator killed anywhere in between finds Prepare* on restart and writes the
markers again, so a transaction ends atomically, everywhere the same way.

Why answer before the markers: they were most of a commit's time (one marker call per
partition, after the state write), and a streams task or a consume-transform-produce
loop stood still for it at every commit. The producer goes on with its next
transaction meanwhile; what keeps it apart from the one being ended:

- a request about the id (add partitions or offsets, an end, an init) waits until the
  markers are written, then is decided against the completed state (Kafka answers
  CONCURRENT_TRANSACTIONS and the client retries: here a waiting coroutine costs
  nothing and answers sooner);
- a batch of the carried next transaction (the next epoch) that reaches a partition
  before the marker waits there for it (see :mod:`raystream.log.producer_state`);
- the markers of ``__consumer_offsets`` partitions go last, once every other partition
  has its marker: offsets that a group's members see (a read_committed consumer asks
  for stable offsets) never run ahead of the transaction's outputs and changelogs, so
  a task's new owner that starts from those offsets restores every change they cover.

So ``commit_transaction`` returning means the transaction is committed (it can no
longer abort), not yet that a read_committed consumer sees it: it does once the
markers land, a few milliseconds later (Kafka's contract too). An init that aborts an
open transaction, and a timeout abort, still wait for their markers.

Why Complete* (or the carried next transaction) is not written at once (Kafka writes
it): it costs a replicated write per transaction and protects nothing. The next change
of the id (a new partition, the next end, an init) is persisted anyway and supersedes
it; until then a restarted coordinator finds Prepare* and writes the same markers once
more, which a partition takes as a no-op: the producer has no open transaction there,
or it already wrote the carried next transaction there, under the next epoch, which
refuses the older epoch's marker. A transaction that was not carried cannot have
started meanwhile, since starting one is persisted first.

State writes go straight to the leader of the id's ``__transaction_state`` partition
(acks=all, retried through leader changes), through the
:class:`~raystream.actors.partition_client.PartitionClient` that writes the markers
too: one actor call each, and a repeated write of the same state is harmless (the id's
lock keeps it from landing after a newer one), so idempotence is not needed. A record of
the topic that does not decode is skipped and logged at load, never in the way of the
other ids.

The group coordinator reads the offsets that transactions committed when it is asked
for a group's offsets (see :mod:`raystream.actors.coordinator`): no call per
transaction. A background tick aborts the
transactions open longer than their producer's ``transaction_timeout_ms``, bumping the
epoch so the vanished producer is fenced if it comes back.

Every request (the typed messages of :mod:`raystream.requests`: init, add partitions,
add offsets, end, describe) goes through the coordinator's
:class:`~raystream.dispatch.Dispatcher` and is answered with a
:class:`~raystream.protocol.Result`, so bad input never kills the actor. Its own writes
(state records, markers) are typed requests too, to the partition leaders.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import ray

from raystream.actors.direct import DirectPath
from raystream.actors.partition_client import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    PartitionClient,
    RetriedLoad,
)
from raystream.dispatch import RAY_CONTEXT, Dispatcher, RequestContext
from raystream.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
    UnknownTopicOrPartitionError,
)
from raystream.groups.offsets_topic import OFFSETS_TOPIC
from raystream.groups.offsets_topic import partition_for as offsets_partition_for
from raystream.protocol import Response, Result
from raystream.records import build_batch
from raystream.requests import (
    TRANSACTION_COORDINATOR_WRITER,
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    DescribeTransactionRequest,
    EndTxnRequest,
    InitProducerIdRequest,
)
from raystream.retry import Backoff
from raystream.transactions import metadata as rules
from raystream.transactions.metadata import TransactionMetadata, TxnState
from raystream.transactions.state_topic import (
    TRANSACTION_STATE_TOPIC,
    TransactionStore,
    partition_for,
    transaction_record,
)
from raystream.types import TopicPartition
from raystream.wire import DirectListener, Endpoint

logger = logging.getLogger(__name__)

TRANSACTION_COORDINATOR_NAME = "raystream-transaction-coordinator"
MARKER_TIMEOUT_MS = 30_000
STATE_WRITE_TIMEOUT_S = 30.0
MARKER_BACKOFF_MS = (50, 1000)
"""First and longest pause between attempts to write a marker
(:class:`~raystream.retry.Backoff`)."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class TransactionCoordinator:
    """Kafka's transaction coordinator for every transactional id of one cluster.

    Args:
        namespace: the cluster's namespace (to find the controller).
        direct: the broker's direct path (``listener.host`` and its TLS, see
            :class:`DirectPath`).
        partitions: how many partitions ``__transaction_state`` has.
        offsets_partitions: how many partitions ``__consumer_offsets`` has.
        abort_check_interval_ms: how often timed-out transactions are looked for.
    """

    def __init__(
        self,
        namespace: str,
        direct: DirectListener,
        partitions: int,
        offsets_partitions: int,
        abort_check_interval_ms: int,
    ) -> None:
        self._namespace = namespace
        self._dispatcher = Dispatcher(
            "the transaction coordinator",
            {
                InitProducerIdRequest: self._init_producer_id,
                AddPartitionsToTxnRequest: self._add_partitions,
                AddOffsetsToTxnRequest: self._add_offsets,
                EndTxnRequest: self._end_txn,
                DescribeTransactionRequest: self._describe,
            },
        )
        self._direct = DirectPath(self.handle, direct)
        self._partitions = partitions
        self._offsets_partitions = offsets_partitions
        self._abort_check_s = abort_check_interval_ms / 1000
        self._store = TransactionStore()
        self._client = PartitionClient(namespace)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._state_schema: Any = None
        self._coordinator_epoch = 0
        self._loading = RetriedLoad(
            self._load, f"the transaction coordinator could not load {TRANSACTION_STATE_TOPIC}"
        )
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task] = set()
        self._completing: dict[str, asyncio.Task] = {}  # id -> its markers being written

    async def handle(self, request: Any, context: RequestContext = RAY_CONTEXT) -> Response:
        """Answer a transaction request (:mod:`raystream.requests`) through the
        coordinator's dispatcher, over Ray and over the direct path alike; the ids are
        loaded from ``__transaction_state`` before the first one is handled."""
        return await self._dispatcher.dispatch(request, context)

    # ------------------------------------------------------------------ startup

    async def _ready(self) -> None:
        """Load the ids from ``__transaction_state`` once, before the first request.

        A load that failed (its partitions unreachable for too long) is tried again by
        the next request.

        Raises:
            CoordinatorNotAvailableError: the load failed (retriable).
        """
        await self._loading.wait()

    async def _load(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._store = await self._replay()
        metadata = await self._client.topic_metadata(TRANSACTION_STATE_TOPIC, refresh=True)
        # Markers carry this: it grows with every leader change of the state topic, so
        # a partition refuses markers of a coordinator that an election left behind.
        self._coordinator_epoch = max(p.leader_epoch for p in metadata.partitions)
        self._state_schema = metadata.record_schema
        self._spawn(self._tick_loop())
        for meta in self._store.transactions.values():
            if meta.state.preparing:
                logger.info("resuming %s of %r", meta.state.value, meta.transactional_id)
                self._complete_later(meta)
        logger.info("transaction coordinator loaded %d ids", len(self._store.transactions))

    async def _replay(self) -> TransactionStore:
        """Every id's latest state, read from each partition of ``__transaction_state``
        up to its high watermark; a record that does not decode is skipped and logged."""
        store = TransactionStore()

        async def read(partition: int) -> None:
            tp = TopicPartition(TRANSACTION_STATE_TOPIC, partition)
            position = await self._client.list_offset(tp, EARLIEST_TIMESTAMP)
            end = await self._client.list_offset(tp, LATEST_TIMESTAMP)
            while position < end:
                table, after = (await self._client.fetch(tp, position)).decode()
                for offset, reason in store.replay(table):
                    logger.warning(
                        "%s-%d offset %d: skipped a record that does not decode: %s",
                        TRANSACTION_STATE_TOPIC,
                        partition,
                        offset,
                        reason,
                    )
                if after <= position:
                    break
                position = after

        await asyncio.gather(*(read(p) for p in range(self._partitions)))
        return store

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ----------------------------------------------------------------- requests

    async def _init_producer_id(self, request: InitProducerIdRequest) -> Result:
        """The producer id and a new epoch for the transactional id (fencing older ones).

        An open transaction of the id is aborted first (its producer is being
        replaced). Answers ``(producer_id, producer_epoch)``.
        """
        await self._ready()
        transactional_id, timeout_ms = request.transactional_id, request.transaction_timeout_ms
        rules.check_timeout(timeout_ms)
        async with self._lock(transactional_id):
            await self._settle(transactional_id)
            meta = self._store.transactions.get(transactional_id)
            if meta is None:
                producer_id, _ = await asyncio.to_thread(self._new_producer_id)
                meta = rules.new_transaction(transactional_id, producer_id, timeout_ms, _now_ms())
            else:
                if rules.needs_abort_before_init(meta):
                    meta = await self._end(rules.bump_epoch(meta, _now_ms()))
                new_id = None
                if meta.producer_epoch + 1 > rules.MAX_PRODUCER_EPOCH:
                    new_id, _ = await asyncio.to_thread(self._new_producer_id)
                meta = rules.init_producer(meta, timeout_ms, new_id, _now_ms())
            await self._persist(meta)
            return Result(value=(meta.producer_id, meta.producer_epoch))

    async def _add_partitions(self, request: AddPartitionsToTxnRequest) -> Result:
        """Add partitions to the producer's transaction (starting one if needed)."""
        await self._ready()
        added = [tuple(p) for p in request.partitions]
        await self._check_partitions(added)
        await self._add(request, added)
        return Result()

    async def _add(
        self, request: AddPartitionsToTxnRequest | AddOffsetsToTxnRequest, added: list[Any]
    ) -> None:
        async with self._lock(request.transactional_id):
            await self._settle(request.transactional_id)
            meta = self._meta(request.transactional_id)
            updated = rules.add_partitions(
                meta, request.producer_id, request.producer_epoch, added, _now_ms()
            )
            if updated is not meta:
                await self._persist(updated)

    async def _add_offsets(self, request: AddOffsetsToTxnRequest) -> Result:
        """Add the group's ``__consumer_offsets`` partition to the transaction.

        Answers that partition's number: the producer writes the offsets there itself,
        as transactional records, so they commit or abort with the rest.
        """
        await self._ready()
        partition = offsets_partition_for(request.group_id, self._offsets_partitions)
        await self._add(request, [(OFFSETS_TOPIC, partition)])
        return Result(value=partition)

    async def _end_txn(self, request: EndTxnRequest) -> Result:
        """Commit or abort the producer's transaction; answers once the outcome is
        persisted (the markers follow in the background), with the (producer id, epoch)
        the producer's next transaction uses.

        ``number`` is the producer's number for this end, so that a retry is answered
        as the first attempt was; ``carry`` lists the partitions the next transaction
        starts with: it is Ongoing with them, under the next epoch, once the markers
        are written (see :func:`raystream.transactions.metadata.complete`).
        """
        await self._ready()
        carried = [tuple(p) for p in request.carry]
        async with self._lock(request.transactional_id):
            await self._settle(request.transactional_id)
            meta = self._meta(request.transactional_id)
            await self._check_partitions([p for p in carried if p not in meta.partitions])
            new_id = None
            if carried and rules.needs_new_producer_id(meta):
                new_id, _ = await asyncio.to_thread(self._new_producer_id)
            prepared = rules.prepare_end(
                meta,
                request.producer_id,
                request.producer_epoch,
                request.committed,
                _now_ms(),
                request.number,
                carried,
                new_id,
            )
            if prepared.state.preparing:
                await self._decide(prepared)
            after = rules.complete(prepared, _now_ms())
            return Result(value=(after.producer_id, after.producer_epoch))

    async def _describe(self, request: DescribeTransactionRequest) -> Result:
        """The id's metadata as a dict (state, producer, partitions), for tests and admin."""
        await self._ready()
        return Result(value=self._meta(request.transactional_id).to_dict())

    async def endpoint(self) -> Endpoint | None:
        """Where this coordinator serves a transaction's calls directly (see
        :mod:`raystream.wire`), or None when ``listener.host`` is empty."""
        return await self._direct.endpoint()

    async def completing(self) -> list[str]:
        """The transactional ids whose markers are being written: a tool or test that
        must read every transaction committed so far waits until there are none."""
        await self._ready()
        return sorted(self._completing)

    async def ping(self) -> bool:
        """Liveness check (and load trigger)."""
        await self._ready()
        return True

    async def _check_partitions(self, partitions: list[Any]) -> None:
        """Refuse partitions that do not exist, as Kafka's AddPartitionsToTxn does: a
        transaction's end writes a marker to each of its partitions, and a marker for a
        partition that never existed could never be written.

        Raises:
            UnknownTopicOrPartitionError: naming the first such partition.
        """
        for topic in sorted({topic for topic, _ in partitions}):
            metadata = await self._client.topic_metadata(topic)
            for name, partition in partitions:
                if name == topic and partition >= len(metadata.partitions):
                    raise UnknownTopicOrPartitionError(
                        f"{topic}-{partition} does not exist ({topic!r} has "
                        f"{len(metadata.partitions)} partitions)"
                    )

    # ---------------------------------------------------------------- two phases

    async def _end(self, prepared: TransactionMetadata) -> TransactionMetadata:
        """Persist Prepare* and wait for its markers; the caller holds the id's lock.
        Returns the completed metadata."""
        await self._decide(prepared)
        await self._settle(prepared.transactional_id)
        return self._store.transactions[prepared.transactional_id]

    async def _decide(self, prepared: TransactionMetadata) -> None:
        """Persist Prepare* (the outcome is decided for good) and have its markers
        written in the background; the caller holds the id's lock."""
        if self._store.transactions.get(prepared.transactional_id) != prepared:
            await self._persist(prepared)
        self._complete_later(prepared)

    def _complete_later(self, prepared: TransactionMetadata) -> None:
        """Write the markers of ``prepared`` in a task of its own (one per id at a
        time), which every later request about the id waits for (:meth:`_settle`)."""
        transactional_id = prepared.transactional_id
        if transactional_id in self._completing:
            return
        task = asyncio.ensure_future(self._complete(prepared))
        self._completing[transactional_id] = task
        task.add_done_callback(lambda _: self._completing.pop(transactional_id, None))

    async def _settle(self, transactional_id: str) -> None:
        """Wait until the id's markers in flight, if any, are written (Complete*)."""
        task = self._completing.get(transactional_id)
        if task is not None:
            await asyncio.shield(task)

    async def _complete(self, prepared: TransactionMetadata) -> None:
        """Write every marker of a decided transaction, retried until they all are
        (e.g. the state topic's leader moved), then adopt Complete* (persisted lazily,
        see the module docstring). Nothing changes the id meanwhile: every request
        about it waits for this first."""
        backoff = Backoff(MARKER_BACKOFF_MS[1], MARKER_BACKOFF_MS[1])
        while True:
            try:
                await self._write_markers(prepared)
                break
            except Exception:  # the loop must finish: logged and tried again
                logger.exception(
                    "could not write the markers of %r; retrying", prepared.transactional_id
                )
                await asyncio.sleep(backoff.next_s())
        if self._store.transactions.get(prepared.transactional_id) == prepared:
            self._store.transactions[prepared.transactional_id] = rules.complete(
                prepared, _now_ms()
            )

    async def _write_markers(self, prepared: TransactionMetadata) -> None:
        """The marker of every partition of the transaction, in parallel, those of
        ``__consumer_offsets`` after all the others (see the module docstring)."""
        commit = prepared.state is TxnState.PREPARE_COMMIT
        partitions = sorted(prepared.partitions)
        offsets = [p for p in partitions if p[0] == OFFSETS_TOPIC]
        for wave in ([p for p in partitions if p[0] != OFFSETS_TOPIC], offsets):
            await asyncio.gather(
                *(self._write_marker(prepared, TopicPartition(*p), commit) for p in wave)
            )

    async def _write_marker(
        self, meta: TransactionMetadata, tp: TopicPartition, commit: bool
    ) -> None:
        """Write one marker, retrying through leader changes until the ISR has it.

        A partition whose topic was deleted needs no marker; one that already took a
        newer epoch of the producer (a newer marker fenced this one) needs none either.
        """
        backoff = Backoff(*MARKER_BACKOFF_MS)
        while True:
            error = await self._client.write_txn_marker(
                tp,
                meta.producer_id,
                meta.producer_epoch,
                commit,
                self._coordinator_epoch,
                MARKER_TIMEOUT_MS,
            )
            if error is None:
                return
            if isinstance(error, UnknownTopicOrPartitionError) and not await self._exists(tp):
                logger.info("no marker for %s-%d: the topic is gone", tp.topic, tp.partition)
                return
            if isinstance(error, (InvalidProducerEpochError, TransactionCoordinatorFencedError)):
                logger.warning("marker on %s-%d refused: %s", tp.topic, tp.partition, error)
                return
            logger.debug("marker on %s-%d not written yet: %s", tp.topic, tp.partition, error)
            await asyncio.sleep(backoff.next_s())

    async def _exists(self, tp: TopicPartition) -> bool:
        try:
            await self._client.topic_metadata(tp.topic, refresh=True)
            return True
        except UnknownTopicOrPartitionError:
            return False
        except Exception:  # the controller restarts: assume it does, and retry
            return True

    # --------------------------------------------------------------------- tick

    async def _tick_loop(self) -> None:
        """Abort the transactions open longer than their timeout."""
        while True:
            await asyncio.sleep(self._abort_check_s)
            try:
                now = _now_ms()
                for meta in list(self._store.transactions.values()):
                    if rules.timed_out(meta, now):
                        self._spawn(self._abort_timed_out(meta.transactional_id))
            except Exception:  # the loop must survive anything; logged
                logger.exception("transaction coordinator tick failed")

    async def _abort_timed_out(self, transactional_id: str) -> None:
        lock = self._lock(transactional_id)
        if lock.locked():
            return  # the producer is busy with it right now; the next tick looks again
        async with lock:
            meta = self._store.transactions.get(transactional_id)
            if meta is None or not rules.timed_out(meta, _now_ms()):
                return
            logger.info(
                "aborting the transaction of %r: open longer than %d ms",
                transactional_id,
                meta.timeout_ms,
            )
            try:
                await self._end(rules.bump_epoch(meta, _now_ms()))
            except Exception:  # PrepareAbort not persisted: the next tick tries again
                logger.exception("timeout abort of %r failed", transactional_id)

    # ------------------------------------------------------------------ helpers

    def _lock(self, transactional_id: str) -> asyncio.Lock:
        return self._locks.setdefault(transactional_id, asyncio.Lock())

    def _meta(self, transactional_id: str) -> TransactionMetadata:
        meta = self._store.transactions.get(transactional_id)
        if meta is None:
            raise InvalidTxnStateError(
                f"transactional id {transactional_id!r} is unknown: call init_transactions()"
            )
        return meta

    def _new_producer_id(self) -> tuple[int, int]:
        """A new producer id from the controller. Blocking: it runs in a worker thread
        and waits for the controller call made on the actor's event loop."""
        assert self._loop is not None
        call = self._client.controller_call("init_producer_id")
        return asyncio.run_coroutine_threadsafe(call, self._loop).result()

    async def _persist(self, meta: TransactionMetadata) -> None:
        """Write the id's new state to ``__transaction_state`` (acks=all), then adopt it.

        Raises:
            RaystreamTimeoutError: not written within :data:`STATE_WRITE_TIMEOUT_S`.
            RaystreamError: a non-retriable refusal.
        """
        table = transaction_record(meta)
        batch = build_batch(
            self._state_schema,
            table.column("key").to_pylist(),
            table.column("value").to_pylist(),
            [_now_ms()],
            None,
        )
        tp = TopicPartition(
            TRANSACTION_STATE_TOPIC, partition_for(meta.transactional_id, self._partitions)
        )
        await self._client.produce(tp, batch, STATE_WRITE_TIMEOUT_S, TRANSACTION_COORDINATOR_WRITER)
        self._store.transactions[meta.transactional_id] = meta


TransactionCoordinatorActor = ray.remote(TransactionCoordinator)
"""The coordinator as a Ray actor class (the one place it becomes one)."""

__all__ = [
    "TRANSACTION_COORDINATOR_NAME",
    "TransactionCoordinator",
    "TransactionCoordinatorActor",
]
