"""The partition replica actor: one Ray actor per partition replica, over one Log.

A thin shell. The storage engine stores; :mod:`raystream.replication` decides (ISR,
high watermark, truncation); this class wires them to Ray. A replica is the leader or a
follower of its partition, as the controller says:

- the **leader** serves produce and fetch, tracks each follower's log end offset,
  advances the high watermark to the smallest LEO of the ISR, answers ``acks=all``
  once the ISR has a batch, and asks the controller to shrink or expand the ISR;
- a **follower** truncates a divergent suffix (by leader epoch) and then copies the
  leader's log with long-polling fetches of raw batches, offsets and epochs intact.

Every replica also keeps the partition's idempotent-producer state
(:class:`~raystream.log.producer_state.ProducerStateManager`): the leader checks each
batch's producer id, epoch and sequence against it before appending (a duplicate is
answered with its original offsets, a gap waits for its predecessor, see
:meth:`PartitionReplica._check_sequence`), and a follower feeds it the headers of the
batches it copies, so a new leader knows every producer from its first request.

Transactions: transactional batches open their producer's transaction on the partition;
the transaction coordinator ends it with :meth:`PartitionReplica.write_txn_marker` (a
control batch, answered once the ISR has it), and followers learn markers from the
headers they copy. The coordinator writes markers after it answered the producer's end,
so a transactional batch of the producer's next epoch waits for the marker of its
previous transaction on the partition before it is appended. A read_committed fetch
reads below the last stable offset and skips the batches of aborted transactions, which
the producer state's aborted-transaction index names without a scan; markers are never
returned as records.

A replica restarted by Ray recovers its log from disk, rebuilds its producer state from
the newest snapshot and the batch headers after it, and asks the controller for its
role before it serves anything. Every request (:mod:`raystream.requests`: produce,
fetch, list offsets, replica fetch, leader epoch, marker, delete records) reaches the
replica through
``handle`` and its :class:`~raystream.dispatch.Dispatcher`, over Ray or the direct path:
checked before anything is touched, answered with an error code instead of raising, so
bad input never kills the actor or touches the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import struct
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import ray

from raystream.actors.direct import DirectPath
from raystream.actors.memory import release_free_memory
from raystream.config import BrokerConfig
from raystream.dispatch import RAY_CONTEXT, Dispatcher, RequestContext
from raystream.errors import (
    FencedLeaderEpochError,
    InvalidRecordError,
    LeaderNotAvailableError,
    NotEnoughReplicasError,
    NotLeaderError,
    OffsetOutOfRangeError,
    RaystreamTimeoutError,
    UnknownTopicOrPartitionError,
)
from raystream.log import Log, LogConfig
from raystream.log.batch import BatchHeader, PayloadDecoder, stored_headers
from raystream.log.checkpoint import read_int, write_atomically
from raystream.log.compact import CompactPayload
from raystream.log.producer_state import (
    NO_PRODUCER_ID,
    AppendCheck,
    ProducerStateManager,
    Verdict,
    last_sequence,
)
from raystream.protocol import (
    CONTROLLER_NAME,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    DeleteRecordsResponse,
    FetchResponse,
    ListOffsetsResponse,
    OffsetForLeaderEpochResponse,
    ProduceResponse,
    ReplicaFetchResponse,
    Response,
    Result,
    WriteTxnMarkerResponse,
    failure,
    wire_bytes,
)
from raystream.replication.housekeeping import (
    CHECKPOINT,
    FLUSH,
    FOLLOWER_CHECK,
    RELEASE,
    RETENTION,
    HousekeepingSchedule,
)
from raystream.replication.isr import (
    FollowerState,
    expanded_isr,
    high_watermark,
    shrunk_isr,
    silent_followers,
)
from raystream.replication.truncation import truncation_offset
from raystream.requests import (
    ACKS,
    DeleteRecordsRequest,
    FetchRequest,
    ListOffsetsRequest,
    OffsetForLeaderEpochRequest,
    PartitionRequest,
    ProduceRequest,
    ReplicaFetchRequest,
    WriteTxnMarkerRequest,
)
from raystream.retry import Backoff
from raystream.transactions.markers import marker_batch
from raystream.transport import send
from raystream.wire import Endpoint

logger = logging.getLogger(__name__)

PARTITION_METADATA_FILE = "partition.metadata"
HIGH_WATERMARK_FILE = "high-watermark-checkpoint"
ROLE_LEADER = "leader"
ROLE_FOLLOWER = "follower"
ROLE_PENDING = "pending"
REPLICA_FETCH_MAX_BYTES = 8 << 20
REPLICA_FETCH_WAIT_MS = 1000
"""How long a follower's fetch waits at the leader for new data (at most half of
``replica.lag.time.max.ms``): an idle follower costs one round trip per wait, and the
wait bounds how soon a hung leader is noticed (see UNRESPONSIVE_GRACE_MS)."""
UNRESPONSIVE_GRACE_MS = 1000
"""How long past a fetch's wait a peer may stay silent before it is reported to the
controller as unresponsive: a leader that leaves a follower's fetch unanswered, a
follower that does not fetch again. The controller then probes it (see
:mod:`raystream.controller.liveness`)."""
SEQUENCE_WAIT_MS = 1000
IDLE_RELEASE_S = 5.0
"""A replica whose traffic stopped this long ago (no request answered but a follower's
empty long poll, no data copied from its leader) hands the memory the traffic freed back
to the system (:func:`~raystream.actors.memory.release_free_memory`), as a housekeeping
duty (:mod:`raystream.replication.housekeeping`) due only after traffic."""
"""How long the leader holds a batch whose sequence is ahead of the next expected one,
waiting for its predecessor, before refusing it with OutOfOrderSequenceError."""


def _consumer_skip(
    aborted: Callable[[BatchHeader], bool] | None,
) -> Callable[[BatchHeader], bool]:
    """What a consumer fetch leaves out: transaction markers, and aborted batches."""
    if aborted is None:
        return _is_control
    return lambda header: header.is_control or aborted(header)


def _is_control(header: BatchHeader) -> bool:
    return header.is_control


def replica_directory(data_dir: str, topic: str, partition: int, replica_id: int) -> str:
    """Where a replica keeps its log: ``<data_dir>/<topic>-<partition>.r<replica_id>``."""
    return os.path.join(data_dir, f"{topic}-{partition}.r{replica_id}")


def open_partition_log(directory: str, topic_id: str, config: LogConfig) -> Log:
    """Open a replica's log, wiping data left by a deleted topic of the same name."""
    marker = os.path.join(directory, PARTITION_METADATA_FILE)
    if os.path.exists(marker):
        with open(marker) as f:
            if f.read().strip() != f"topic_id: {topic_id}":
                shutil.rmtree(directory)
    os.makedirs(directory, exist_ok=True)
    if not os.path.exists(marker):
        with open(marker, "w") as f:
            f.write(f"topic_id: {topic_id}\n")
    return Log.open(directory, config)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class PartitionReplica:
    """One replica of one partition (made a Ray actor at the end of this module).

    Invariants: only the leader accepts produce requests; consumers never see offsets
    at or above the high watermark; the high watermark never moves backwards; a
    follower never appends what its leader did not send.
    """

    def __init__(
        self,
        topic: str,
        topic_id: str,
        partition: int,
        replica_id: int,
        config: dict[str, Any],
        record_schema: pa.Schema,
        namespace: str,
        broker: dict[str, Any],
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.replica_id = replica_id
        self.namespace = namespace
        self.broker = BrokerConfig.from_kafka(broker)
        self.config = LogConfig.from_kafka(config)
        self.record_schema = record_schema
        self.directory = replica_directory(self.broker.data_dir, topic, partition, replica_id)
        self.log = open_partition_log(self.directory, topic_id, self.config)
        self.role = ROLE_PENDING
        self.leader_id = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: list[int] = []
        self.isr: list[int] = []
        self.followers: dict[int, FollowerState] = {}
        self.high_watermark = min(
            read_int(os.path.join(self.directory, HIGH_WATERMARK_FILE), 0),
            self.log.log_end_offset,
        )
        self._checkpointed_high_watermark = self.high_watermark
        self.producers = ProducerStateManager(self.directory)
        self._rebuild_producer_state()
        self._sequenced: asyncio.Event | None = None
        self._leader_handle: Any = None
        self._decoder = PayloadDecoder()
        self._last_schema: pa.Schema | None = None  # the last schema found equal
        self._committed: asyncio.Event | None = None
        self._appended: asyncio.Event | None = None
        self._tasks: list[asyncio.Task] = []
        self._follower_task: asyncio.Task | None = None
        self._appending: asyncio.Task | None = None  # a fetched chunk going into the log
        self._role_lock = asyncio.Lock()  # one role change at a time
        self._truncations = 0  # times the log lost a tail (snapshots made before are stale)
        self._isr_change_pending = False
        self._epoch_start_offset = 0
        self._schedule: HousekeepingSchedule | None = None
        self._housekeeping_wake: asyncio.Event | None = None
        self._reported: set[int] = set()  # peers reported unresponsive, not heard since
        self._fetch_wait_ms = min(REPLICA_FETCH_WAIT_MS, self.broker.replica_lag_time_max_ms // 2)
        self._dispatcher = Dispatcher(
            f"replica {replica_id} of {topic}-{partition}",
            {
                ProduceRequest: self._produce,
                FetchRequest: self._fetch,
                ListOffsetsRequest: self._list_offsets,
                ReplicaFetchRequest: self._replica_fetch,
                OffsetForLeaderEpochRequest: self._offset_for_leader_epoch,
                WriteTxnMarkerRequest: self._write_txn_marker,
                DeleteRecordsRequest: self._delete_records,
            },
        )
        self._direct = DirectPath(self.handle, self.broker.direct_listener())

    async def handle(self, request: Any, context: RequestContext = RAY_CONTEXT) -> Response:
        """Answer a data-plane request (:mod:`raystream.requests`) through the replica's
        dispatcher: the one entry of every produce, fetch, list-offsets, replica fetch,
        leader-epoch, marker and delete-records request, over Ray and over the direct path
        alike."""
        self._start()
        if type(request) is not ReplicaFetchRequest:  # counted when it brings data
            self._note_activity()
        return await self._dispatcher.dispatch(request, context)

    async def endpoint(self) -> Endpoint | None:
        """Where this replica serves its requests directly (see :mod:`raystream.wire`),
        or None when ``listener.host`` is empty."""
        return await self._direct.endpoint()

    def _check_target(self, request: PartitionRequest) -> None:
        """Refuse a request meant for another partition (a stale handle)."""
        if request.topic != self.topic or request.partition != self.partition:
            raise UnknownTopicOrPartitionError(
                f"replica {self.replica_id} serves {self.topic}-{self.partition}, not "
                f"{request.topic}-{request.partition}"
            )

    # ------------------------------------------------------- Ray-call shorthands

    async def produce(
        self,
        batch: Any,
        acks: int | str = 1,
        timeout_ms: int = 30_000,
        compression: str | None = None,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        transactional: bool = False,
    ) -> Response:
        """A :class:`~raystream.requests.ProduceRequest` to this partition, for tools
        and tests calling the actor by hand (clients send the request to :meth:`handle`)."""
        return await self.handle(
            ProduceRequest(
                self.topic,
                self.partition,
                batch,
                acks,
                timeout_ms,
                compression,
                producer_id,
                producer_epoch,
                base_sequence,
                transactional,
            )
        )

    async def fetch(
        self,
        offset: int,
        max_bytes: int = 1 << 20,
        max_wait_ms: int = 500,
        min_bytes: int = 1,
        isolation_level: str = "read_uncommitted",
    ) -> Response:
        """A :class:`~raystream.requests.FetchRequest` to this partition, for tools and
        tests calling the actor by hand."""
        return await self.handle(
            FetchRequest(
                self.topic,
                self.partition,
                offset,
                max_bytes,
                max_wait_ms,
                min_bytes,
                isolation_level,
            )
        )

    async def list_offsets(
        self, timestamp: int, isolation_level: str = "read_uncommitted"
    ) -> Response:
        """A :class:`~raystream.requests.ListOffsetsRequest` to this partition, for tools
        and tests calling the actor by hand."""
        return await self.handle(
            ListOffsetsRequest(self.topic, self.partition, timestamp, isolation_level)
        )

    # ------------------------------------------------------------------ roles

    async def become_leader(
        self, leader_epoch: int, partition_epoch: int, replicas: list[int], isr: list[int]
    ) -> Result:
        """Lead the partition from ``leader_epoch`` on (ignored if the epoch is stale)."""
        self._start()
        async with self._role_lock:
            if leader_epoch < self.leader_epoch:
                return Result()
            await self._stop_following()
            if self.role != ROLE_LEADER or leader_epoch > self.leader_epoch:
                # A new leader gives every follower a full lag allowance, as Kafka does.
                now = _now_ms()
                self.followers = {
                    r: FollowerState(last_caught_up_ms=now)
                    for r in replicas
                    if r != self.replica_id
                }
                self.log.leader_epochs.assign(leader_epoch, self.log.log_end_offset)
            self.role = ROLE_LEADER
            self.leader_id = self.replica_id
            self._epoch_start_offset = self.log.log_end_offset
            self.leader_epoch = leader_epoch
            self.partition_epoch = partition_epoch
            self.replicas = list(replicas)
            self.isr = list(isr)
            self._reported.clear()
            self._update_high_watermark()
            self._wake()
            self._replan_housekeeping()
        return Result()

    async def become_follower(
        self,
        leader_epoch: int,
        partition_epoch: int,
        leader_id: int,
        leader_handle: Any,
        replicas: list[int],
        isr: list[int],
    ) -> Result:
        """Follow ``leader_id`` from ``leader_epoch`` on (ignored if the epoch is stale)."""
        self._start()
        async with self._role_lock:
            if leader_epoch < self.leader_epoch:
                return Result()
            changed = leader_epoch > self.leader_epoch or self.role != ROLE_FOLLOWER
            restart = changed or self._follower_task is None or self._follower_task.done()
            if restart:
                await self._stop_following()
            self.role = ROLE_FOLLOWER
            self.leader_id = leader_id
            self.leader_epoch = leader_epoch
            self.partition_epoch = partition_epoch
            self.replicas = list(replicas)
            self.isr = list(isr)
            self.followers = {}
            self._leader_handle = leader_handle
            self._reported.clear()
            self._wake()
            self._replan_housekeeping()
            if restart:
                self._follower_task = asyncio.get_running_loop().create_task(self._follow())
        return Result()

    async def _stop_following(self) -> None:
        """Stop copying from the leader, and wait for a fetched chunk being appended.

        A role change must find the log and the producer state as the follower loop
        left them. Cancelling the loop does not stop an append already running in its
        thread: one that landed after the next loop truncated the log left a hole in
        it (a chunk of the old leader's past the truncation point), and a replica with
        a hole that became leader lost the acknowledged records in the hole.
        """
        if self._follower_task is not None:
            self._follower_task.cancel()
            self._follower_task = None
        if self._appending is not None:
            await asyncio.wait([self._appending])
            self._appending = None

    async def _recover_role(self) -> None:
        """Ask the controller what this replica is (after a start or a restart)."""
        backoff = Backoff(100, 2000)
        while self.role == ROLE_PENDING:
            try:
                controller = ray.get_actor(CONTROLLER_NAME, namespace=self.namespace)
                await controller.replica_started.remote(
                    self.topic,
                    self.partition,
                    self.replica_id,
                    ray.get_runtime_context().was_current_actor_reconstructed,
                )
                # Started: what the start-up freed (compiling modules, loading the
                # controller's class for its handle) goes back to the system.
                release_free_memory()
                return
            except Exception:  # the controller may be restarting: try again
                await asyncio.sleep(backoff.next_s())

    # ---------------------------------------------------------------- produce

    async def _produce(self, request: ProduceRequest) -> ProduceResponse:
        """Append one batch as leader; answer with its base offset.

        ``records`` is a RecordBatch of the topic's layout or, as producers send it, the
        bytes of a one-batch Arrow IPC stream (cheaper for Ray to carry than a pickled
        RecordBatch; decoded here without a copy).

        ``acks=0`` and ``acks=1`` answer after the leader's append; ``acks="all"``
        answers once every ISR member has the batch, and is refused with
        NotEnoughReplicas while the ISR is smaller than ``min.insync.replicas``.

        An idempotent producer passes its ``producer_id``, ``producer_epoch`` and the
        batch's ``base_sequence`` (its records take the sequences from there on): a
        batch already written is not written again and is answered with its original
        base offset; a batch ahead of its producer's next sequence waits for its
        predecessor (see :meth:`_check_sequence`). A ``transactional`` batch (it needs a
        producer id) belongs to its producer's open transaction on this partition.
        Field checks, the internal-topic rule included, are the request's own
        (:meth:`ProduceRequest.validate <raystream.requests.ProduceRequest.validate>`).
        """
        self._check_target(request)
        required = ACKS[request.acks]
        timeout_ms = request.timeout_ms
        producer_id = request.producer_id
        producer_epoch = request.producer_epoch
        base_sequence = request.base_sequence
        transactional = request.transactional
        self._require_leader()
        batch = request.records
        if not isinstance(batch, pa.RecordBatch):
            batch = self._decode(batch)
        if batch.schema is not self._last_schema and not batch.schema.equals(self.record_schema):
            raise InvalidRecordError(
                f"batch schema does not match topic {self.topic!r}: expected "
                f"{self.record_schema}, got {batch.schema}"
            )
        self._last_schema = batch.schema
        if required == -1 and len(self.isr) < self.config.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"{self.topic}-{self.partition} has {len(self.isr)} in-sync replicas "
                f"{self.isr}, fewer than min.insync.replicas="
                f"{self.config.min_insync_replicas}"
            )
        check = None
        if producer_id != NO_PRODUCER_ID and batch.num_rows:
            check = await self._check_sequence(
                producer_id,
                producer_epoch,
                base_sequence,
                batch.num_rows,
                timeout_ms,
                transactional,
            )
        if check is not None and check.verdict is Verdict.DUPLICATE:
            base, last = check.first_offset, check.last_offset
        else:  # no await since the check: nothing else appended meanwhile
            base, last = self.log.append(
                batch,
                partition_leader_epoch=self.leader_epoch,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                base_sequence=base_sequence,
                is_transactional=transactional,
                compression=request.compression_type,
            )
            self.producers.append(
                producer_id,
                producer_epoch,
                base_sequence,
                last_sequence(base_sequence, last - base + 1),
                base,
                last,
                _now_ms(),
                transactional,
            )
            if producer_id != NO_PRODUCER_ID:
                self._notify_sequenced()
            self._notify_appended()
            self._update_high_watermark()
        if required == -1:
            await self._await_commit(last + 1, timeout_ms)
        append_time = _now_ms() if self.config.message_timestamp_type == "LogAppendTime" else -1
        return ProduceResponse(
            base_offset=base,
            log_append_time=append_time,
            log_start_offset=self.log.log_start_offset,
        )

    async def _write_txn_marker(self, request: WriteTxnMarkerRequest) -> WriteTxnMarkerResponse:
        """End a producer's transaction here with a commit or abort marker (leader).

        The transaction coordinator sends this for every partition of a transaction
        once the outcome is durable in ``__transaction_state``. Answers once every ISR
        member has the marker (acks=all), so the coordinator completes a transaction
        only when its markers cannot be lost; the answer has the marker's offset. A
        marker whose epoch is newer than the producer's fences its older epoch here.
        Writing one for a producer without an open transaction is harmless (a retry).
        """
        self._check_target(request)
        producer_id, producer_epoch = request.producer_id, request.producer_epoch
        commit, coordinator_epoch = request.committed, request.coordinator_epoch
        self._require_leader()
        self.producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
        now = _now_ms()
        offset, _ = self.log.append(
            marker_batch(self.record_schema, commit, coordinator_epoch, now),
            partition_leader_epoch=self.leader_epoch,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            is_control=True,
            is_commit=commit,
        )
        self.producers.complete_txn(
            producer_id, producer_epoch, commit, offset, now, coordinator_epoch
        )
        self._notify_sequenced()
        self._notify_appended()
        self._update_high_watermark()
        await self._await_commit(offset + 1, request.timeout_ms)
        return WriteTxnMarkerResponse(offset=offset)

    async def _check_sequence(
        self,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        count: int,
        timeout_ms: int,
        transactional: bool = False,
    ) -> AppendCheck:
        """Decide about an idempotent batch, waiting for a missing predecessor (or, for
        a transactional batch of a newer epoch, for the marker of the producer's
        previous transaction here: see :mod:`raystream.log.producer_state`).

        Why wait: a producer keeps up to five produce calls in flight per partition,
        and Ray runs an async actor's calls in whatever order they arrive, so batch
        n + 1 may reach the leader before batch n. Rather than refuse it at once (the
        producer would resend it, and everything behind it, on every reordering) the
        leader parks it until its predecessor is appended, or until
        :data:`SEQUENCE_WAIT_MS` (at most the request's timeout) has passed; then it
        is refused with OutOfOrderSequenceError and the producer resends it after
        the predecessor it retries. Ordering on the client instead (one call in
        flight) would cost a round trip per batch; a per-producer sequencing queue on
        the leader is what this is, kept in the producer state itself.

        Waiting is cheap: a parked call is a coroutine waiting on an event that every
        idempotent append (and every role change) sets. When the check finally says
        append, the caller appends without awaiting in between, so no other batch of
        the producer can slip in.

        Raises:
            OutOfOrderSequenceError: still a gap after the wait, or behind the window.
            ConcurrentTransactionsError: the previous transaction's marker did not come
                within the wait (retriable).
            InvalidProducerEpochError: the producer's epoch is older than one seen.
            NotLeaderError: leadership was lost while waiting.
        """
        last_seq = last_sequence(base_sequence, count)
        deadline = time.monotonic() + min(SEQUENCE_WAIT_MS, timeout_ms) / 1000
        while True:
            check = self.producers.check(
                producer_id, producer_epoch, base_sequence, last_seq, transactional
            )
            remaining = deadline - time.monotonic()
            if not check.waits or remaining <= 0:
                break
            await self._wait(self._sequenced_event(), remaining)
            self._require_leader()
        error = check.error()
        if error is not None:
            raise error
        return check

    def _decode(self, data: bytes | pa.Buffer) -> pa.RecordBatch | CompactPayload:
        """The record batch in a produced payload (zero-copy; schemas parsed once), or a
        small compact payload to store as it came."""
        try:
            return self._decoder.decode_produced(
                data if isinstance(data, pa.Buffer) else pa.py_buffer(data)
            )
        except (pa.ArrowException, ValueError, IndexError, struct.error) as error:
            raise InvalidRecordError(
                f"produce data is neither an Arrow IPC stream nor a compact payload: {error}"
            ) from None

    async def _await_commit(self, offset: int, timeout_ms: int) -> None:
        """Wait until the high watermark reaches ``offset`` (the ISR has the batch)."""
        deadline = time.monotonic() + timeout_ms / 1000
        epoch = self.leader_epoch
        while self.high_watermark < offset:
            if self.role != ROLE_LEADER or self.leader_epoch != epoch:
                raise NotLeaderError(
                    f"replica {self.replica_id} lost leadership of {self.topic}-"
                    f"{self.partition} before the batch was replicated"
                )
            if len(self.isr) < self.config.min_insync_replicas:
                raise NotEnoughReplicasError(
                    f"{self.topic}-{self.partition}: the ISR shrank to {self.isr} after the "
                    f"append, below min.insync.replicas={self.config.min_insync_replicas}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RaystreamTimeoutError(
                    f"{self.topic}-{self.partition}: the ISR {self.isr} did not replicate "
                    f"offset {offset - 1} within {timeout_ms} ms"
                )
            await self._wait(self._committed_event(), remaining)

    def _require_leader(self) -> None:
        if self.role == ROLE_PENDING:
            raise LeaderNotAvailableError(
                f"replica {self.replica_id} of {self.topic}-{self.partition} is starting"
            )
        if self.role != ROLE_LEADER:
            raise NotLeaderError(
                f"replica {self.replica_id} of {self.topic}-{self.partition} is not the "
                f"leader (leader is {self.leader_id})"
            )

    # ------------------------------------------------------------- watermarks

    def _committed_event(self) -> asyncio.Event:
        if self._committed is None:
            self._committed = asyncio.Event()
        return self._committed

    def _appended_event(self) -> asyncio.Event:
        if self._appended is None:
            self._appended = asyncio.Event()
        return self._appended

    def _sequenced_event(self) -> asyncio.Event:
        if self._sequenced is None:
            self._sequenced = asyncio.Event()
        return self._sequenced

    def _notify_sequenced(self) -> None:
        if self._sequenced is not None:
            self._sequenced.set()
            self._sequenced = None

    def _wake(self) -> None:
        for name in ("_committed", "_appended", "_sequenced"):
            event = getattr(self, name)
            if event is not None:
                event.set()
                setattr(self, name, None)

    def _notify_appended(self) -> None:
        self._note_change()
        if self._appended is not None:
            self._appended.set()
            self._appended = None

    def _set_high_watermark(self, offset: int) -> None:
        offset = min(offset, self.log.log_end_offset)
        if offset > self.high_watermark:
            self.high_watermark = offset
            self._note_change()
            if self._committed is not None:
                self._committed.set()
                self._committed = None

    @property
    def known_high_watermark(self) -> int:
        """The high watermark to report, or -1 while a new leader has not yet
        established one: until its followers fetch, its own may lag what the previous
        leader reported, and a reported high watermark must never go back."""
        if self.role == ROLE_LEADER and self.high_watermark < self._epoch_start_offset:
            return -1
        return self.high_watermark

    def _update_high_watermark(self) -> None:
        if self.role == ROLE_LEADER:
            self._set_high_watermark(
                high_watermark(self.replica_id, self.log.log_end_offset, self.isr, self.followers)
            )

    @staticmethod
    async def _wait(event: asyncio.Event, timeout_s: float) -> None:
        """Until ``event`` is set or ``timeout_s`` passes. In the waiting task itself
        (``asyncio.timeout``), not a task of its own as ``wait_for`` makes: a long poll
        woken by an append resumes in one turn of the loop, not three."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await event.wait()

    # ------------------------------------------------------------------ fetch

    async def _fetch(self, request: FetchRequest) -> FetchResponse:
        """Stored batches from the fetch offset below the high watermark, waiting for
        some if none.

        The batches go as stored, undecoded (see :class:`~raystream.protocol.FetchResponse`);
        ``partition_max_bytes`` and ``min_bytes`` count their stored size.

        ``read_committed`` reads below the last stable offset and skips aborted
        transactions' batches; either level hides markers. Long polling: when fewer
        than ``min_bytes`` are available the call waits up to
        ``max_wait_ms`` for new data, so a consumer at the end of the log gets a new
        record as soon as it is committed, without polling in a loop.
        """
        self._check_target(request)
        offset, max_bytes, min_bytes = (
            request.fetch_offset,
            request.partition_max_bytes,
            request.min_bytes,
        )
        self._require_leader()
        deadline = time.monotonic() + request.max_wait_ms / 1000
        committed = request.isolation_level == "read_committed"
        while True:
            self._check_range(offset)
            limit = self._read_limit(committed)
            aborted = self.producers.aborted_filter(offset, limit) if committed else None
            runs, next_offset = self.log.read_raw_until(
                offset, max_bytes, limit, _consumer_skip(aborted)
            )
            size = sum(run.size for run in runs)
            remaining = deadline - time.monotonic()
            if (
                (size and size >= min_bytes)
                or (not runs and next_offset > offset)  # only markers or aborted batches
                or remaining <= 0
            ):
                break
            await self._wait(self._committed_event(), remaining)
            self._require_leader()
        return FetchResponse(
            data=tuple(wire_bytes(run) for run in runs),
            fetch_offset=offset,
            limit=limit,
            schema=None if runs else self.record_schema,
            high_watermark=self.known_high_watermark,
            log_start_offset=self.log.log_start_offset,
            log_end_offset=self.log.log_end_offset,
            next_offset=next_offset,
            last_stable_offset=self.producers.last_stable_offset(self.high_watermark),
        )

    def _read_limit(self, committed: bool) -> int:
        """Where reading stops: the high watermark, or the last stable offset."""
        if committed:
            return self.producers.last_stable_offset(self.high_watermark)
        return self.high_watermark

    def _check_range(self, offset: int) -> None:
        if offset > self.log.log_end_offset or offset < self.log.log_start_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range [{self.log.log_start_offset}, "
                f"{self.log.log_end_offset}] of {self.topic}-{self.partition}"
            )

    async def _list_offsets(self, request: ListOffsetsRequest) -> ListOffsetsResponse:
        """The earliest (-2), latest (-1) or first offset at/after a timestamp (ms);
        latest is the last stable offset for ``read_committed``."""
        self._check_target(request)
        timestamp = request.timestamp
        self._require_leader()
        if timestamp == EARLIEST_TIMESTAMP:
            return ListOffsetsResponse(offset=self.log.log_start_offset)
        if timestamp == LATEST_TIMESTAMP:
            if self.known_high_watermark < 0:
                raise LeaderNotAvailableError(
                    f"{self.topic}-{self.partition}: the new leader's high watermark is "
                    "not established yet"
                )
            return ListOffsetsResponse(
                offset=self._read_limit(request.isolation_level == "read_committed")
            )
        found = self.log.offset_for_timestamp(timestamp)
        if found is None or found >= self.high_watermark:
            return ListOffsetsResponse(offset=-1, timestamp=timestamp)
        return ListOffsetsResponse(offset=found, timestamp=timestamp)

    # ------------------------------------------------------- leader: followers

    async def _replica_fetch(self, request: ReplicaFetchRequest) -> ReplicaFetchResponse:
        """A follower's fetch: raw batches from its log end offset, long-polled.

        Records the follower's progress (ISR and high watermark follow from it).
        """
        self._check_target(request)
        replica_id, offset = request.replica_id, request.fetch_offset
        self._require_leader()
        if request.current_leader_epoch != self.leader_epoch:
            raise FencedLeaderEpochError(
                f"follower {replica_id} fetched with epoch {request.current_leader_epoch}, "
                f"the leader of {self.topic}-{self.partition} is at epoch {self.leader_epoch}"
            )
        if offset > self.log.log_end_offset:
            self._check_range(offset)
        if offset < self.log.log_start_offset:  # the follower restarts at log start
            return self._replica_fetch_answer([])
        state = self.followers.setdefault(replica_id, FollowerState(last_caught_up_ms=_now_ms()))
        state.on_fetch(offset, self.log.log_end_offset, _now_ms(), request.max_wait_ms)
        self._reported.discard(replica_id)
        self._update_high_watermark()
        await self._maybe_expand_isr(replica_id, state)
        if offset >= self.log.log_end_offset and request.max_wait_ms > 0:
            await self._wait(self._appended_event(), request.max_wait_ms / 1000)
            self._require_leader()
        data = (
            self.log.read_raw(offset, REPLICA_FETCH_MAX_BYTES)
            if offset < self.log.log_end_offset
            else []
        )
        if data:
            self._note_activity()
        return self._replica_fetch_answer(data)

    def _replica_fetch_answer(self, data: list[Any]) -> ReplicaFetchResponse:
        return ReplicaFetchResponse(
            data=data,
            high_watermark=self.high_watermark,
            log_start_offset=self.log.log_start_offset,
            log_end_offset=self.log.log_end_offset,
        )

    async def _offset_for_leader_epoch(
        self, request: OffsetForLeaderEpochRequest
    ) -> OffsetForLeaderEpochResponse:
        """(largest epoch <= the one asked for, where it ended): what a new follower
        truncates to."""
        self._check_target(request)
        self._require_leader()
        epoch, end = self.log.leader_epochs.end_offset_for_epoch(
            request.leader_epoch, self.log.log_end_offset
        )
        return OffsetForLeaderEpochResponse(leader_epoch=epoch, end_offset=end)

    async def _maybe_expand_isr(self, replica_id: int, state: FollowerState) -> None:
        start = dict(self.log.leader_epochs.entries()).get(self.leader_epoch, 0)
        wanted = expanded_isr(
            self.isr, self.replicas, replica_id, state, self.high_watermark, start
        )
        if wanted != self.isr:
            await self._alter_isr(wanted)

    async def _check_isr_lag(self) -> None:
        wanted = shrunk_isr(
            self.replica_id,
            self.isr,
            self.followers,
            _now_ms(),
            self.broker.replica_lag_time_max_ms,
        )
        if wanted != self.isr:
            await self._alter_isr(wanted)

    async def _check_followers(self) -> None:
        """The leader's look at its followers: shrink the ISR of those lagging (Kafka's
        rule), and report those gone silent to the controller, once each."""
        await self._check_isr_lag()
        for replica_id in silent_followers(self.followers, _now_ms(), UNRESPONSIVE_GRACE_MS):
            if replica_id not in self._reported:
                self._reported.add(replica_id)
                await self._report_unresponsive(replica_id)

    async def _report_unresponsive(self, replica_id: int) -> None:
        """Tell the controller that a replica of this partition went silent."""
        try:
            controller = ray.get_actor(CONTROLLER_NAME, namespace=self.namespace)
            await controller.replica_unresponsive.remote(self.topic, self.partition, replica_id)
        except Exception:  # the controller is away: the report is an early warning only
            logger.info(
                "could not report replica %s of %s-%s", replica_id, self.topic, self.partition
            )

    async def _alter_isr(self, isr: list[int]) -> None:
        """Ask the controller to change the ISR; adopt it once it is durable."""
        if self._isr_change_pending:
            return
        self._isr_change_pending = True
        try:
            controller = ray.get_actor(CONTROLLER_NAME, namespace=self.namespace)
            answer = await controller.alter_isr.remote(
                self.topic,
                self.partition,
                self.replica_id,
                self.leader_epoch,
                self.partition_epoch,
                isr,
            )
            if answer.error_code == 0 and self.role == ROLE_LEADER:
                self.partition_epoch = answer.value
                self.isr = list(isr)
                self._update_high_watermark()
        except Exception:  # the controller is away: the next check tries again
            logger.info("ISR change of %s-%s deferred", self.topic, self.partition)
        finally:
            self._isr_change_pending = False

    # ------------------------------------------------------- follower: copying

    async def _follow(self) -> None:
        """Truncate a divergent suffix, then copy the leader's log until told otherwise."""
        epoch = self.leader_epoch
        leader = self._leader_handle
        backoff = Backoff(50, 1000)
        truncated = False
        while self.role == ROLE_FOLLOWER and self.leader_epoch == epoch:
            try:
                if not truncated:
                    await self._truncate_to_leader(leader)
                    truncated = True
                answer = await self._leader_answer(
                    send(
                        leader,
                        ReplicaFetchRequest(
                            self.topic,
                            self.partition,
                            self.replica_id,
                            self.log.log_end_offset,
                            epoch,
                            self._fetch_wait_ms,
                        ),
                    )
                )
                if self.role != ROLE_FOLLOWER or self.leader_epoch != epoch:
                    return  # the answer of a leader this replica no longer follows
                if answer.error_code:
                    error = answer.error()
                    if isinstance(error, OffsetOutOfRangeError):
                        truncated = False
                    raise error
                if self.log.log_end_offset < answer.log_start_offset:
                    self.log.truncate_fully_and_start_at(answer.log_start_offset)
                    self._truncations += 1
                    self.producers.clear(answer.log_start_offset)
                    continue
                # Shielded: a role change cancels this loop, then waits for the append.
                self._appending = asyncio.get_running_loop().create_task(
                    self._append_fetched(answer.data)
                )
                await asyncio.shield(self._appending)
                self._appending = None
                self._set_high_watermark(answer.high_watermark)
                await self._follow_log_start(answer.log_start_offset)
                backoff.reset()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                logger.debug(
                    "follower %s of %s-%s: %s", self.replica_id, self.topic, self.partition, error
                )
                await asyncio.sleep(backoff.next_s())

    async def _leader_answer(self, call: Any) -> Any:
        """The leader's answer to a replica fetch (a future of :func:`send`).

        A leader answers within the fetch's wait; one silent for UNRESPONSIVE_GRACE_MS
        longer is reported to the controller once, and still waited for: the controller
        probes it, and a new leader cancels this wait through the role change.
        """
        answer = asyncio.wrap_future(call)
        leader_id = self.leader_id
        silence_s = (self._fetch_wait_ms + UNRESPONSIVE_GRACE_MS) / 1000
        try:
            done, _ = await asyncio.wait([answer], timeout=silence_s)
            if not done and leader_id not in self._reported:
                self._reported.add(leader_id)
                await self._report_unresponsive(leader_id)
            result = await answer
        except asyncio.CancelledError:
            answer.cancel()
            raise
        self._reported.discard(leader_id)
        return result

    async def _follow_log_start(self, leader_log_start: int) -> None:
        """Advance this follower's log start offset to the leader's (Kafka's follower
        does the same after each fetch), so records deleted on the leader (DeleteRecords)
        stay deleted after a failover."""
        start = min(leader_log_start, self.log.log_end_offset)
        if start > self.log.log_start_offset:
            await asyncio.to_thread(self.log.delete_records_before, start)

    async def _append_fetched(self, chunks: list[Any]) -> None:
        """Append a replica fetch's chunks and take their producers' batches in."""
        for chunk in chunks:
            await asyncio.to_thread(self.log.append_raw, chunk)
            self.producers.apply_all(stored_headers(chunk))
        if chunks:
            self._note_change()
            self._note_activity()

    async def _truncate_to_leader(self, leader: Any) -> None:
        cache = self.log.leader_epochs
        latest = cache.latest_epoch
        answer = await leader.handle.remote(
            OffsetForLeaderEpochRequest(self.topic, self.partition, latest)
        )
        answer.raise_for_error()
        epoch, end = answer.leader_epoch, answer.end_offset
        end_of = lambda e: cache.end_offset_for_epoch(e, self.log.log_end_offset)[1]  # noqa: E731
        target = truncation_offset(
            latest, self.log.log_end_offset, self.high_watermark, end_of, epoch, end
        )
        if target < self.log.log_end_offset:
            logger.info(
                "replica %s of %s-%s truncates %d -> %d",
                self.replica_id,
                self.topic,
                self.partition,
                self.log.log_end_offset,
                target,
            )
            self.log.truncate_to(target)
            self._truncations += 1
            self._rebuild_producer_state()
            self._note_change()

    def _rebuild_producer_state(self) -> None:
        """Producer state from the newest usable snapshot plus the batch headers after it."""
        start = self.producers.load(self.log.log_start_offset, self.log.log_end_offset)
        if start < self.log.log_end_offset:
            self.producers.apply_all(
                header for header in self.log.batch_headers(start) if header.next_offset > start
            )
        self.producers.map_end_offset = self.log.log_end_offset

    async def _snapshot_producer_state(self) -> None:
        """Snapshot the producer state if it moved (the file is written off the loop)."""
        if self.producers.needs_snapshot:
            offset, text = self.producers.snapshot_text()
            truncations = self._truncations
            await asyncio.to_thread(self.producers.write_snapshot, offset, text)
            if self._truncations != truncations:  # the log lost a tail meanwhile: the
                self.producers.forget_snapshot(offset)  # state written may include it

    # -------------------------------------------------------------- management

    async def state(self) -> dict[str, Any]:
        """Role, epochs, ISR and offsets, for describe and status."""
        self._start()
        return {
            "replica_id": self.replica_id,
            "role": self.role,
            "leader_id": self.leader_id,
            "leader_epoch": self.leader_epoch,
            "partition_epoch": self.partition_epoch,
            "isr": list(self.isr),
            "log_start_offset": self.log.log_start_offset,
            "high_watermark": self.known_high_watermark,
            "log_end_offset": self.log.log_end_offset,
            "size_bytes": self.log.size_bytes,
            "segments": self.log.segment_count,
            "pid": os.getpid(),
            "node_id": ray.get_runtime_context().get_node_id(),
        }

    async def update_config(self, config: dict[str, Any]) -> Result:
        """Apply a new topic configuration."""
        try:
            self.config = LogConfig.from_kafka(config)
            self.log.update_config(self.config)
            return Result()
        except Exception as error:
            return failure(error)

    async def run_housekeeping(self) -> Result:
        """Apply retention, compaction and the flush policy now (also done periodically)."""
        try:
            return Result(value=await self._housekeep())
        except Exception as error:
            return failure(error)

    async def _housekeep(self) -> dict[str, int]:
        """Retention, then compaction below the last stable offset with the aborted
        transactions' batches dropped (see :mod:`raystream.log.cleaner`); the log's
        work runs on a thread, the producer state is read here, on the event loop."""
        compact = self.config.compact
        stable = self.producers.last_stable_offset(self.high_watermark)
        skip = self.producers.aborted_filter(self.log.log_start_offset, stable) if compact else None

        def work() -> dict[str, int]:
            deleted = self.log.enforce_retention(max_offset=self.high_watermark)
            removed = 0
            if compact:
                removed = self.log.compact(max_offset=stable, skip=skip).records_removed
            return {"segments_deleted": deleted, "records_compacted": removed}

        return await asyncio.to_thread(work)

    def _checkpoint_high_watermark(self) -> None:
        """Persist the high watermark so a restarted leader does not start below it."""
        if self.high_watermark != self._checkpointed_high_watermark:
            write_atomically(
                os.path.join(self.directory, HIGH_WATERMARK_FILE), f"{self.high_watermark}\n"
            )
            self._checkpointed_high_watermark = self.high_watermark

    async def close(self) -> Result:
        """Stop background work, flush and close the log cleanly."""
        await self._stop_all()
        self._checkpoint_high_watermark()
        self.log.close()
        self.producers.take_snapshot()
        return Result()

    async def delete(self) -> Result:
        """Delete the replica's data (topic deletion)."""
        await self._stop_all()
        self.log.delete()
        shutil.rmtree(self.directory, ignore_errors=True)
        return Result()

    async def _stop_all(self) -> None:
        await self._stop_following()
        for task in self._tasks:
            task.cancel()
        self._schedule = None
        self.role = ROLE_PENDING

    async def ping(self) -> int:
        """Liveness check; returns the actor's process id."""
        self._start()
        return os.getpid()

    def _start(self) -> None:
        if not self._tasks:
            loop = asyncio.get_running_loop()
            self._tasks = [
                loop.create_task(self._housekeeping_loop()),
                loop.create_task(self._recover_role()),
            ]

    async def _housekeeping_loop(self) -> None:
        """Run each background duty when it is due (see
        :class:`~raystream.replication.housekeeping.HousekeepingSchedule`): checkpoints
        and flushes after changes only, the follower check on a leader with followers
        only, the memory release once traffic stopped, retention every interval. A
        replica at rest sleeps until its next retention check; a change or traffic
        that brings a duty forward wakes it (:meth:`_note_change`,
        :meth:`_note_activity`)."""
        now = time.monotonic()
        schedule = HousekeepingSchedule(
            now,
            retention_s=self.broker.log_retention_check_interval_ms / 1000,
            checkpoint_s=self.broker.log_flush_scheduler_interval_ms / 1000,
            follower_check_s=min(self.broker.replica_lag_time_max_ms / 2, UNRESPONSIVE_GRACE_MS)
            / 1000,
            release_s=IDLE_RELEASE_S,
        )
        wake = self._housekeeping_wake = asyncio.Event()
        self._schedule = schedule
        schedule.changed(now)  # once after start: recovery may have moved the state
        while True:
            now = time.monotonic()
            flush_due = self._flush_due_s(now)
            leads = self.role == ROLE_LEADER and len(self.replicas) > 1
            sleep_s = schedule.next_wake_s(now, flush_due, leads) - now
            if sleep_s > 0:
                wake.clear()
                await self._wait(wake, sleep_s)
                continue
            due = schedule.take_due(now, flush_due, leads)
            try:
                if due & {FLUSH, CHECKPOINT}:
                    self.log.maybe_flush()
                if CHECKPOINT in due:
                    self._checkpoint_high_watermark()
                    await self._snapshot_producer_state()
                if FOLLOWER_CHECK in due and self.role == ROLE_LEADER:
                    await self._check_followers()
                if RETENTION in due:
                    await self._housekeep()
                    self.producers.prune_aborted(self.log.log_start_offset)
                if RELEASE in due:
                    self.log.release_maps()
                    release_free_memory()
            except Exception:  # the loop survives and logs every failure
                logger.exception("housekeeping failed for %s-%s", self.topic, self.partition)
                await asyncio.sleep(schedule.checkpoint_s)  # a failing flush: no busy loop

    def _flush_due_s(self, now_s: float) -> float | None:
        """When ``flush.ms`` asks for the next fsync, in monotonic seconds (None: never)."""
        due_ms = self.log.flush_due_ms
        return None if due_ms is None else now_s + (due_ms - _now_ms()) / 1000

    def _note_change(self) -> None:
        """Something to checkpoint appeared (an append, a new high watermark): wake the
        housekeeping loop if that brings its next duty before its planned wake-up."""
        if self._schedule is not None and self._schedule.changed(time.monotonic()):
            self._replan_housekeeping()

    def _note_activity(self) -> None:
        """Traffic: plan the release of what it frees for when it stops (waking the
        housekeeping loop only for the first request after a rest)."""
        if self._schedule is not None and self._schedule.active(time.monotonic()):
            self._replan_housekeeping()

    def _replan_housekeeping(self) -> None:
        """Wake the housekeeping loop to plan again (a role change, an earlier duty)."""
        if self._housekeeping_wake is not None:
            self._housekeeping_wake.set()

    async def _delete_records(self, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
        """Kafka's DeleteRecords, on the leader: advance the log start offset to the
        request's ``offset`` (-1: the high watermark), so records below it are no longer
        served and whole segments below it are deleted. Refused above the high watermark
        (a record not yet committed cannot be deleted). Answers the new log start offset;
        an offset at or below the current one changes nothing."""
        self._check_target(request)
        self._require_leader()
        high_watermark = self.known_high_watermark
        if high_watermark < 0:
            raise LeaderNotAvailableError(
                f"{self.topic}-{self.partition}: the new leader's high watermark is "
                "not established yet"
            )
        target = high_watermark if request.offset == -1 else request.offset
        if target > high_watermark:
            raise OffsetOutOfRangeError(
                f"delete_records offset {target} of {self.topic}-{self.partition} is "
                f"above its high watermark {high_watermark}"
            )
        start = await asyncio.to_thread(self.log.delete_records_before, target)
        return DeleteRecordsResponse(low_watermark=start)


ReplicaActor = ray.remote(PartitionReplica)
"""The replica as a Ray actor class (the one place it becomes one)."""
