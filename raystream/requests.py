"""The typed requests every data-plane and coordinator call is made of.

Why typed messages: a call used to be a method name and positional arguments, decoded
and checked by each actor method on its own, so every method checked a little
differently and a new front end (a Kafka-protocol listener) or a cross-cutting rule
(ACLs, quotas, per-request metrics) would have had to be written into each of them.
Now a client builds one of the frozen dataclasses below, an actor answers it through
its :class:`~raystream.dispatch.Dispatcher` (one path: validate, authorize, quota,
handle, metrics, answer), and a listener translating Kafka API keys only has to build
these messages.

Fields carry Kafka's names where Kafka has the field (``fetch_offset``,
``partition_max_bytes``, ``generation_id``, ``transaction_timeout_ms``, ...). Each
class's :meth:`Request.validate` checks the types and ranges of its own fields and
raises :class:`~raystream.errors.InvalidRequestError` naming the request, the field
and the bad value, before the actor touches anything; what needs the actor's state
(the leader, the group, the transaction) is checked by its handler.

Cost: a request is a slotted dataclass (one small object per call, pickled with the
call as its arguments were); record data is carried as it was, Arrow IPC bytes or a
buffer, never copied or looked at record by record here.

Internal topics: only the coordinators and a transactional producer's offsets (see
``send_offsets_to_transaction``) write to ``__consumer_offsets`` and
``__transaction_state``; their produce requests say which writer they are in
``internal_writer`` (processes inside the Ray cluster are trusted: this guards against
mistakes, as Kafka's rule does, not against an attacker).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa

from raystream.controller.metadata import check_not_internal, is_internal
from raystream.errors import InvalidRecordError, InvalidRequestError, InvalidTopicError
from raystream.groups.offsets_topic import OFFSETS_TOPIC
from raystream.log.batch import CODECS
from raystream.log.producer_state import MAX_PRODUCER_EPOCH, NO_PRODUCER_ID, SEQUENCE_LIMIT
from raystream.protocol import (
    DeleteRecordsResponse,
    FetchResponse,
    ListOffsetsResponse,
    OffsetForLeaderEpochResponse,
    ProduceResponse,
    ReplicaFetchResponse,
    Response,
    Result,
    WriteTxnMarkerResponse,
)

INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1
ACKS = {0: 0, 1: 1, -1: -1, "all": -1, "0": 0, "1": 1, "-1": -1}
"""Accepted ``acks`` values and what each means (-1: the whole ISR)."""
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")

GROUP_COORDINATOR_WRITER = "group_coordinator"
TRANSACTION_COORDINATOR_WRITER = "transaction_coordinator"
TRANSACTIONAL_OFFSETS_WRITER = "transactional_offsets"
"""A transactional producer's offsets, written to ``__consumer_offsets`` as records of
its transaction by ``send_offsets_to_transaction``."""
INTERNAL_WRITERS = frozenset(
    (GROUP_COORDINATOR_WRITER, TRANSACTION_COORDINATOR_WRITER, TRANSACTIONAL_OFFSETS_WRITER)
)


# ------------------------------------------------------------------ field checks


def _bad(request: Request, name: str, value: Any, wanted: str) -> InvalidRequestError:
    return InvalidRequestError(
        f"{type(request).__name__} {name}={_show(value)} is invalid: {wanted}"
    )


def _show(value: Any) -> str:
    """``repr`` of a value, cut short (a hostile value may be huge)."""
    text = repr(value)
    return text if len(text) <= 200 else f"{text[:200]}... ({type(value).__name__})"


def _int(request: Request, name: str, low: int, high: int) -> None:
    value = getattr(request, name)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise _bad(request, name, value, f"an integer in [{low}, {high}]")


def _str(request: Request, name: str, empty: bool = False) -> None:
    value = getattr(request, name)
    if not isinstance(value, str) or (not empty and not value):
        raise _bad(request, name, value, "a string" if empty else "a non-empty string")


def _optional_str(request: Request, name: str) -> None:
    value = getattr(request, name)
    if value is not None and (not isinstance(value, str) or not value):
        raise _bad(request, name, value, "None or a non-empty string")


def _bool(request: Request, name: str) -> None:
    value = getattr(request, name)
    if not isinstance(value, bool):
        raise _bad(request, name, value, "True or False")


def _choice(request: Request, name: str, choices: tuple[str, ...]) -> None:
    value = getattr(request, name)
    if not isinstance(value, str) or value not in choices:
        raise _bad(request, name, value, f"one of {', '.join(choices)}")


def _strings(request: Request, name: str) -> None:
    value = getattr(request, name)
    if not isinstance(value, list | tuple) or not all(
        isinstance(item, str) and item for item in value
    ):
        raise _bad(request, name, value, "a list of non-empty strings")


def _bytes_list(request: Request, name: str) -> None:
    value = getattr(request, name)
    if not isinstance(value, list | tuple) or not all(isinstance(v, bytes) for v in value):
        raise _bad(request, name, value, "a list of bytes")


def _partitions(request: Request, name: str, empty: bool = True) -> None:
    """A list of (topic, partition) pairs."""
    value = getattr(request, name)
    wanted = "a list of (topic, partition >= 0) pairs" + ("" if empty else ", not empty")
    if not isinstance(value, list | tuple) or (not empty and not value):
        raise _bad(request, name, value, wanted)
    for item in value:
        if (
            not isinstance(item, list | tuple)
            or len(item) != 2
            or not isinstance(item[0], str)
            or not item[0]
            or not isinstance(item[1], int)
            or isinstance(item[1], bool)
            or not 0 <= item[1] <= INT32_MAX
        ):
            raise _bad(request, name, value, f"{wanted}; {_show(item)} is not one")


def _offsets(request: Request, name: str) -> None:
    """A non-empty list of (topic, partition, offset, metadata) items."""
    value = getattr(request, name)
    wanted = "a non-empty list of (topic, partition >= 0, offset >= 0, metadata str) items"
    if not isinstance(value, list | tuple) or not value:
        raise _bad(request, name, value, wanted)
    for item in value:
        if (
            not isinstance(item, list | tuple)
            or len(item) != 4
            or not isinstance(item[0], str)
            or not item[0]
            or not all(
                isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= high
                for n, high in ((item[1], INT32_MAX), (item[2], INT64_MAX))
            )
            or not isinstance(item[3], str)
        ):
            raise _bad(request, name, value, f"{wanted}; {_show(item)} is not one")


# ------------------------------------------------------------------------ base


@dataclass(frozen=True, slots=True)
class Request:
    """Base of every request: what the dispatcher needs to know about one.

    ``response`` is the answer class an error is reported in (so a refused fetch is a
    :class:`~raystream.protocol.FetchResponse` with an error code, as a served one).
    """

    response: ClassVar[type[Response]] = Result

    def validate(self) -> None:
        """Check the fields' types and ranges (nothing of the server's state).

        Raises:
            InvalidRequestError: a field is malformed; the message names it and its value.
        """


@dataclass(frozen=True, slots=True)
class PartitionRequest(Request):
    """A request to one partition's replica."""

    topic: str
    partition: int

    def validate(self) -> None:
        _str(self, "topic")
        _int(self, "partition", 0, INT32_MAX)


# ------------------------------------------------------------------ data plane


@dataclass(frozen=True, slots=True)
class ProduceRequest(PartitionRequest):
    """Append one batch to a partition's leader (Kafka's Produce).

    ``records`` is the bytes (or an Arrow buffer) of a one-batch Arrow IPC stream, as
    producers send it, or a RecordBatch of the topic's layout. An idempotent producer
    sets ``producer_id``, ``producer_epoch`` and ``base_sequence``; ``transactional``
    puts the batch into its producer's open transaction. ``internal_writer`` names the
    trusted writer of an internal topic (see :data:`INTERNAL_WRITERS`); a client's
    produce to an internal topic is refused.
    """

    response: ClassVar[type[Response]] = ProduceResponse

    records: Any = None
    acks: int | str = 1
    timeout_ms: int = 30_000
    compression_type: str | None = None
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = -1
    base_sequence: int = -1
    transactional: bool = False
    internal_writer: str | None = None

    def validate(self) -> None:
        PartitionRequest.validate(self)
        if not isinstance(self.records, bytes | pa.Buffer | pa.RecordBatch):
            raise InvalidRecordError(
                f"ProduceRequest records must be a pyarrow RecordBatch or its Arrow IPC "
                f"stream, not {type(self.records).__name__}"
            )
        acks = self.acks
        if not isinstance(acks, int | str) or isinstance(acks, bool) or acks not in ACKS:
            raise _bad(self, "acks", self.acks, "use 0, 1, 'all' or -1")
        _int(self, "timeout_ms", 0, INT32_MAX)
        codec = self.compression_type
        if codec is not None and (not isinstance(codec, str) or codec not in CODECS):
            codecs = sorted(c for c in CODECS if c)
            raise _bad(self, "compression_type", codec, f"None or one of {codecs}")
        _int(self, "producer_id", NO_PRODUCER_ID, INT64_MAX)
        _int(self, "producer_epoch", -1, MAX_PRODUCER_EPOCH)
        _int(self, "base_sequence", -1, SEQUENCE_LIMIT - 1)
        _bool(self, "transactional")
        # Offsets a Kafka client commits in its transaction carry no sequence, as
        # Kafka's coordinator appends them (see producer_state.NO_SEQUENCE).
        unsequenced = self.internal_writer == TRANSACTIONAL_OFFSETS_WRITER
        if self.producer_id != NO_PRODUCER_ID and (
            self.producer_epoch < 0 or (self.base_sequence < 0 and not unsequenced)
        ):
            raise InvalidRequestError(
                f"ProduceRequest: producer {self.producer_id} needs an epoch and a base "
                f"sequence >= 0, not {self.producer_epoch} and {self.base_sequence}"
            )
        if self.transactional and self.producer_id == NO_PRODUCER_ID:
            raise InvalidRequestError(
                f"ProduceRequest transactional=True needs a producer id "
                f"(producer_id={self.producer_id})"
            )
        self._check_writer()

    def _check_writer(self) -> None:
        writer = self.internal_writer
        if writer is not None and (not isinstance(writer, str) or writer not in INTERNAL_WRITERS):
            raise _bad(
                self, "internal_writer", writer, f"None or one of {sorted(INTERNAL_WRITERS)}"
            )
        if not is_internal(self.topic):
            if writer is not None:
                raise _bad(self, "internal_writer", writer, f"{self.topic!r} is not internal")
            return
        if writer is None:
            raise InvalidTopicError(
                f"cannot produce to internal topic {self.topic!r}: only raystream's "
                "coordinators write it (use send_offsets_to_transaction for offsets)"
            )
        if writer == TRANSACTIONAL_OFFSETS_WRITER and (
            self.topic != OFFSETS_TOPIC or not self.transactional
        ):
            raise InvalidTopicError(
                f"cannot produce to internal topic {self.topic!r}: a producer writes only "
                f"offsets, to {OFFSETS_TOPIC}, as records of its transaction "
                "(send_offsets_to_transaction)"
            )


@dataclass(frozen=True, slots=True)
class FetchRequest(PartitionRequest):
    """A consumer's fetch from a partition's leader (Kafka's Fetch, one partition)."""

    response: ClassVar[type[Response]] = FetchResponse

    fetch_offset: int = 0
    partition_max_bytes: int = 1 << 20
    max_wait_ms: int = 500
    min_bytes: int = 1
    isolation_level: str = "read_uncommitted"

    def validate(self) -> None:
        PartitionRequest.validate(self)
        _int(self, "fetch_offset", 0, INT64_MAX)
        _int(self, "partition_max_bytes", 0, INT64_MAX)
        _int(self, "max_wait_ms", 0, INT32_MAX)
        _int(self, "min_bytes", 0, INT64_MAX)
        _choice(self, "isolation_level", ISOLATION_LEVELS)


@dataclass(frozen=True, slots=True)
class ReplicaFetchRequest(PartitionRequest):
    """A follower's fetch of raw batches from its leader, long-polled (Kafka's Fetch
    with a replica id)."""

    response: ClassVar[type[Response]] = ReplicaFetchResponse

    replica_id: int = -1
    fetch_offset: int = 0
    current_leader_epoch: int = -1
    max_wait_ms: int = 500

    def validate(self) -> None:
        PartitionRequest.validate(self)
        _int(self, "replica_id", 0, INT32_MAX)
        _int(self, "fetch_offset", 0, INT64_MAX)
        _int(self, "current_leader_epoch", 0, INT32_MAX)
        _int(self, "max_wait_ms", 0, INT32_MAX)


@dataclass(frozen=True, slots=True)
class ListOffsetsRequest(PartitionRequest):
    """The earliest (-2), latest (-1) or first offset at or after a timestamp (ms)."""

    response: ClassVar[type[Response]] = ListOffsetsResponse

    timestamp: int = -1
    isolation_level: str = "read_uncommitted"

    def validate(self) -> None:
        PartitionRequest.validate(self)
        if (
            not isinstance(self.timestamp, int)
            or isinstance(self.timestamp, bool)
            or not -2 <= self.timestamp <= INT64_MAX
        ):
            raise _bad(self, "timestamp", self.timestamp, "-2 (earliest), -1 (latest) or >= 0")
        _choice(self, "isolation_level", ISOLATION_LEVELS)


@dataclass(frozen=True, slots=True)
class OffsetForLeaderEpochRequest(PartitionRequest):
    """Where ``leader_epoch`` (or the largest epoch below it) ended on the leader: what
    a new follower truncates to."""

    response: ClassVar[type[Response]] = OffsetForLeaderEpochResponse

    leader_epoch: int = -1

    def validate(self) -> None:
        PartitionRequest.validate(self)
        _int(self, "leader_epoch", -1, INT32_MAX)


@dataclass(frozen=True, slots=True)
class WriteTxnMarkerRequest(PartitionRequest):
    """End a producer's transaction on a partition with a commit or abort marker (Kafka's
    WriteTxnMarkers, one partition); answered once the ISR has it."""

    response: ClassVar[type[Response]] = WriteTxnMarkerResponse

    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = -1
    committed: bool = False
    coordinator_epoch: int = 0
    timeout_ms: int = 30_000

    def validate(self) -> None:
        PartitionRequest.validate(self)
        _int(self, "producer_id", 0, INT64_MAX)
        _int(self, "producer_epoch", 0, MAX_PRODUCER_EPOCH)
        _bool(self, "committed")
        _int(self, "coordinator_epoch", 0, INT32_MAX)
        _int(self, "timeout_ms", 0, INT32_MAX)


@dataclass(frozen=True, slots=True)
class DeleteRecordsRequest(PartitionRequest):
    """Advance a partition's log start offset to ``offset`` (-1: the high watermark), on
    its leader (Kafka's DeleteRecords, one partition). Internal topics are refused: their
    records are the coordinators' state."""

    response: ClassVar[type[Response]] = DeleteRecordsResponse

    offset: int = -1

    def validate(self) -> None:
        PartitionRequest.validate(self)
        _int(self, "offset", -1, INT64_MAX)
        check_not_internal(self.topic, "delete records of")


# ------------------------------------------------------------- group coordinator


@dataclass(frozen=True, slots=True)
class GroupRequest(Request):
    """A request about one consumer group."""

    group_id: str

    def validate(self) -> None:
        _str(self, "group_id")


@dataclass(frozen=True, slots=True)
class JoinGroupRequest(GroupRequest):
    """Join (or rejoin) a group; answered once the rebalance gives an assignment (the
    answer's value is a :class:`~raystream.groups.group.Assigned`).

    ``protocols`` are the member's assignment strategies, best first;
    ``owned_partitions`` what it owns from ``owned_generation`` (cooperative
    rebalancing); ``actor_id`` the Ray actor it runs in, if any (a crash of that actor
    evicts it at once).

    A Kafka client's join (the classic protocol, its leader assigns) sets
    ``protocol_type`` ("consumer"), and ``protocol_metadata`` holds the opaque metadata
    of each of ``protocols``; the answer's value is then a
    :class:`~raystream.groups.group.Joined`, and the assignment comes with a
    :class:`SyncGroupRequest`. ``require_known_member_id`` (JoinGroup v4+) makes a
    first join answer MemberIdRequiredError with the new member id as its value.
    """

    member_id: str = ""
    group_instance_id: str | None = None
    client_id: str = ""
    topics: tuple[str, ...] = ()
    protocols: tuple[str, ...] = ()
    owned_partitions: tuple[tuple[str, int], ...] = ()
    owned_generation: int = -1
    session_timeout_ms: int = 45_000
    rebalance_timeout_ms: int = 300_000
    actor_id: str | None = None
    protocol_type: str | None = None
    protocol_metadata: tuple[bytes, ...] = ()
    require_known_member_id: bool = False
    client_host: str = ""

    def validate(self) -> None:
        GroupRequest.validate(self)
        _str(self, "member_id", empty=True)
        _optional_str(self, "group_instance_id")
        _str(self, "client_id", empty=True)
        _strings(self, "topics")
        _strings(self, "protocols")
        if not self.protocols:
            raise _bad(self, "protocols", self.protocols, "at least one assignment strategy")
        _partitions(self, "owned_partitions")
        _int(self, "owned_generation", -1, INT32_MAX)
        _int(self, "session_timeout_ms", 1, INT32_MAX)
        _int(self, "rebalance_timeout_ms", 1, INT32_MAX)
        _optional_str(self, "actor_id")
        _optional_str(self, "protocol_type")
        _bytes_list(self, "protocol_metadata")
        wanted = len(self.protocols) if self.protocol_type is not None else 0
        if len(self.protocol_metadata) != wanted:
            raise _bad(
                self,
                "protocol_metadata",
                self.protocol_metadata,
                f"{wanted} items: one per protocol with a protocol_type, none without",
            )
        _bool(self, "require_known_member_id")
        _str(self, "client_host", empty=True)


@dataclass(frozen=True, slots=True)
class SyncGroupRequest(GroupRequest):
    """A client-assigned member's SyncGroup (Kafka's classic protocol): the leader's
    carries every member's assignment as ``(member_id, bytes)`` pairs; each member's
    answer (value) is its own assignment bytes, once the leader's sync arrived.
    ``protocol_type`` and ``protocol_name`` (None: not checked) must be the group's."""

    member_id: str = ""
    generation_id: int = -1
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignments: tuple[tuple[str, bytes], ...] = ()

    def validate(self) -> None:
        GroupRequest.validate(self)
        _str(self, "member_id")
        _int(self, "generation_id", -1, INT32_MAX)
        _optional_str(self, "group_instance_id")
        _optional_str(self, "protocol_type")
        _optional_str(self, "protocol_name")
        value = self.assignments
        if not isinstance(value, list | tuple) or not all(
            isinstance(item, list | tuple)
            and len(item) == 2
            and isinstance(item[0], str)
            and item[0]
            and isinstance(item[1], bytes)
            for item in value
        ):
            raise _bad(self, "assignments", value, "a list of (member_id, bytes) pairs")


@dataclass(frozen=True, slots=True)
class HeartbeatRequest(GroupRequest):
    """Keep a member's session alive; the error says when to rejoin. A static member
    may name its ``group_instance_id`` (fenced if a newer member has it)."""

    member_id: str = ""
    generation_id: int = -1
    group_instance_id: str | None = None

    def validate(self) -> None:
        GroupRequest.validate(self)
        _str(self, "member_id")
        _int(self, "generation_id", -1, INT32_MAX)
        _optional_str(self, "group_instance_id")


@dataclass(frozen=True, slots=True)
class LeaveGroupRequest(GroupRequest):
    """A closing member leaves; the others rebalance at once. A static member may leave
    by its ``group_instance_id`` alone (``member_id`` ""); the value is the id of the
    member that left."""

    member_id: str = ""
    group_instance_id: str | None = None

    def validate(self) -> None:
        GroupRequest.validate(self)
        _str(self, "member_id", empty=self.group_instance_id is not None)
        _optional_str(self, "group_instance_id")


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest(GroupRequest):
    """Commit ``(topic, partition, offset, metadata)`` items, all or none.

    Members pass their id and generation; others (admin, consumers using ``assign()``)
    pass "" and -1, accepted only while the group has no members.
    """

    member_id: str = ""
    generation_id: int = -1
    offsets: tuple[tuple[str, int, int, str], ...] = ()

    def validate(self) -> None:
        GroupRequest.validate(self)
        _str(self, "member_id", empty=True)
        _int(self, "generation_id", -1, INT32_MAX)
        _offsets(self, "offsets")


@dataclass(frozen=True, slots=True)
class OffsetFetchRequest(GroupRequest):
    """The group's committed offsets (of ``partitions``, default all), by TopicPartition;
    with ``require_stable`` UnstableOffsetCommitError while a transaction may still
    commit some; with ``with_metadata`` each as an ``(offset, metadata)`` pair."""

    partitions: tuple[tuple[str, int], ...] | None = None
    require_stable: bool = False
    with_metadata: bool = False

    def validate(self) -> None:
        GroupRequest.validate(self)
        if self.partitions is not None:
            _partitions(self, "partitions")
        _bool(self, "require_stable")
        _bool(self, "with_metadata")


@dataclass(frozen=True, slots=True)
class TxnOffsetCheckRequest(GroupRequest):
    """Whether a member may add offsets of the group to a transaction (KIP-447): the
    generation check of Kafka's TxnOffsetCommit."""

    member_id: str = ""
    generation_id: int = -1

    def validate(self) -> None:
        GroupRequest.validate(self)
        _str(self, "member_id", empty=True)
        _int(self, "generation_id", -1, INT32_MAX)


@dataclass(frozen=True, slots=True)
class ResetOffsetsRequest(GroupRequest):
    """Overwrite committed offsets of a group without active members (admin)."""

    offsets: tuple[tuple[str, int, int, str], ...] = ()

    def validate(self) -> None:
        GroupRequest.validate(self)
        _offsets(self, "offsets")


@dataclass(frozen=True, slots=True)
class DescribeGroupRequest(GroupRequest):
    """State, generation, protocol, members and their partitions, committed offsets."""


@dataclass(frozen=True, slots=True)
class DeleteGroupRequest(GroupRequest):
    """Delete a group without active members: its committed offsets and its record
    (GroupIdNotFoundError if it has neither, NonEmptyGroupError if it has members)."""


@dataclass(frozen=True, slots=True)
class ListGroupsRequest(Request):
    """Ids of the groups that have members or committed offsets, sorted; with
    ``with_state`` a dict per group instead: ``group_id``, ``protocol_type`` ("" for a
    raystream-assigned group) and ``state``."""

    with_state: bool = False

    def validate(self) -> None:
        _bool(self, "with_state")


# ------------------------------------------------------- transaction coordinator


@dataclass(frozen=True, slots=True)
class TransactionRequest(Request):
    """A request about one transactional id."""

    transactional_id: str

    def validate(self) -> None:
        _str(self, "transactional_id")


@dataclass(frozen=True, slots=True)
class ProducerTransactionRequest(TransactionRequest):
    """A transactional producer's request: its id and epoch come with it."""

    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = -1

    def validate(self) -> None:
        TransactionRequest.validate(self)
        _int(self, "producer_id", 0, INT64_MAX)
        _int(self, "producer_epoch", 0, MAX_PRODUCER_EPOCH)


@dataclass(frozen=True, slots=True)
class InitProducerIdRequest(TransactionRequest):
    """The producer id and a new epoch for the id, fencing older producers of it
    (value: ``(producer_id, producer_epoch)``)."""

    transaction_timeout_ms: int = 60_000

    def validate(self) -> None:
        TransactionRequest.validate(self)
        _int(self, "transaction_timeout_ms", 1, INT32_MAX)


@dataclass(frozen=True, slots=True)
class AddPartitionsToTxnRequest(ProducerTransactionRequest):
    """Add partitions to the producer's transaction (starting one if needed)."""

    partitions: tuple[tuple[str, int], ...] = ()

    def validate(self) -> None:
        ProducerTransactionRequest.validate(self)
        _partitions(self, "partitions", empty=False)


@dataclass(frozen=True, slots=True)
class AddOffsetsToTxnRequest(ProducerTransactionRequest):
    """Add the group's ``__consumer_offsets`` partition to the transaction (value: its
    number; the producer writes the offsets there itself)."""

    group_id: str = ""

    def validate(self) -> None:
        ProducerTransactionRequest.validate(self)
        _str(self, "group_id")


@dataclass(frozen=True, slots=True)
class EndTxnRequest(ProducerTransactionRequest):
    """Commit or abort the producer's transaction (value: the ``(producer_id,
    producer_epoch)`` its next transaction uses).

    ``number`` numbers the producer's ends, so a retry is answered as the first attempt
    was; ``carry`` lists the partitions the next transaction starts with.
    """

    committed: bool = False
    number: int = -1
    carry: tuple[tuple[str, int], ...] = ()

    def validate(self) -> None:
        ProducerTransactionRequest.validate(self)
        _bool(self, "committed")
        _int(self, "number", -1, INT64_MAX)
        _partitions(self, "carry")


@dataclass(frozen=True, slots=True)
class DescribeTransactionRequest(TransactionRequest):
    """The id's metadata as a dict (state, producer, partitions), for tests and admin."""


__all__ = [
    "ACKS",
    "INTERNAL_WRITERS",
    "AddOffsetsToTxnRequest",
    "AddPartitionsToTxnRequest",
    "DeleteGroupRequest",
    "DeleteRecordsRequest",
    "DescribeGroupRequest",
    "DescribeTransactionRequest",
    "EndTxnRequest",
    "FetchRequest",
    "GroupRequest",
    "HeartbeatRequest",
    "InitProducerIdRequest",
    "JoinGroupRequest",
    "LeaveGroupRequest",
    "ListGroupsRequest",
    "ListOffsetsRequest",
    "OffsetCommitRequest",
    "OffsetFetchRequest",
    "OffsetForLeaderEpochRequest",
    "PartitionRequest",
    "ProduceRequest",
    "ReplicaFetchRequest",
    "Request",
    "ResetOffsetsRequest",
    "SyncGroupRequest",
    "TransactionRequest",
    "TxnOffsetCheckRequest",
    "WriteTxnMarkerRequest",
]
