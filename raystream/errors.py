"""The one error hierarchy of raystream.

Every error raystream raises derives from :class:`RaystreamError`. Each class carries
Kafka's numeric error code (so operators recognise it) and two flags a client acts on:
``retriable`` (the same request may succeed later) and ``invalid_metadata`` (refresh the
cached leaders before retrying). Actors never raise across the actor boundary: they
answer with a code and a message, and :func:`error_for_code` turns that back into the
exception here.

::

    RaystreamError
    ├── CorruptRecordError                  (2, storage: checksum mismatch)
    ├── OffsetOutOfRangeError               (1)
    ├── UnknownTopicOrPartitionError        (3, retriable, invalid metadata)
    ├── LeaderNotAvailableError             (5, retriable, invalid metadata)
    ├── NotLeaderError                      (6, retriable, invalid metadata)
    ├── RaystreamTimeoutError               (7, retriable)
    ├── CoordinatorNotAvailableError        (15, retriable: the group coordinator restarts)
    ├── BrokerNotAvailableError             (8, retriable, invalid metadata: actor died)
    ├── RecordTooLargeError                 (10)
    ├── InvalidTopicError                   (17)
    ├── NotEnoughReplicasError              (19, retriable)
    ├── IllegalGenerationError / CommitFailedError (22)
    ├── InconsistentGroupProtocolError      (23: no assignment strategy all members share)
    ├── UnknownMemberIdError                (25: the coordinator no longer knows the member)
    ├── RebalanceInProgressError            (27, retriable)
    ├── AuthorizationError                  (29: TOPIC_AUTHORIZATION_FAILED)
    │   ├── GroupAuthorizationError         (30)
    │   ├── ClusterAuthorizationError       (31)
    │   └── TransactionalIdAuthorizationError (53)
    ├── SecurityDisabledError               (54: an ACL call with no authorizer on)
    ├── UnsupportedError                    (35: not supported yet)
    ├── TopicAlreadyExistsError             (36)
    ├── InvalidPartitionsError              (37)
    ├── InvalidReplicationFactorError       (38)
    ├── InvalidConfigError                  (40)
    ├── InvalidRequestError                 (42: a bad argument)
    │   └── PartitionOutOfRangeError        (a partition the topic does not have)
    ├── OutOfOrderSequenceError             (45)
    ├── InvalidProducerEpochError           (47: an older epoch of the producer)
    ├── InvalidTxnStateError                (48: a transaction call out of order)
    ├── ConcurrentTransactionsError         (51, retriable: the transaction is completing)
    ├── TransactionCoordinatorFencedError   (52: a marker from an older coordinator)
    ├── FencedLeaderEpochError              (74, retriable: a stale leader or ISR change)
    ├── NonEmptyGroupError                  (68: the group still has active members)
    ├── GroupIdNotFoundError                (69)
    ├── MemberIdRequiredError               (79: a Kafka client's first join; rejoin with
    │                                         the member id the answer gives)
    ├── FencedInstanceIdError               (82: a newer member took the static instance id)
    ├── InvalidRecordError                  (87: does not fit the topic's schema)
    ├── UnstableOffsetCommitError           (88, retriable: a transaction may still commit
    │                                         offsets of the group)
    ├── ProducerFencedError                 (90)
    ├── UnknownServerError                  (-1: a handler failed unexpectedly; the message
    │                                         names the request and the original error)
    ├── IllegalStateError                   (no Kafka code: client used out of order, e.g.
    │                                         after close)
    ├── SslAuthenticationError              (no Kafka code, client side: a TLS handshake
    │                                         with a raystream server failed)
    ├── RecordDeserializationError          (no Kafka code, client side: a deserializer
    │                                         raised on a record; the consumer stays at its
    │                                         offset)
    ├── StreamsError                        (no Kafka code: a streams application failed)
    │   └── TopologyError                   (a bad DSL call or topology, found while it
    │                                         is built or checked at start)
    └── ConnectError                        (no Kafka code: a connector or task failed)
        └── RetriableConnectError           (retriable: the target is busy or down; the
                                              framework hands the same records again)

Code -1 is Kafka's UNKNOWN_SERVER_ERROR: an answer carrying it (or a code this module
does not know) reads back as :class:`UnknownServerError`, never as the bare base class.
:class:`IllegalStateError` and the base class have no Kafka code either and share -1:
they are client-side conditions; should one ever be answered by an actor, it reads back
as UnknownServerError with its class name in the message (see
:func:`raystream.protocol.failure`).
"""

from __future__ import annotations

from typing import Any

from raystream.types import TopicPartition


class RaystreamError(Exception):
    """Base of every raystream error.

    Attributes:
        code: Kafka's error code for this condition (-1 when Kafka has none).
        retriable: the same request may succeed if sent again later.
        invalid_metadata: cached metadata (leaders, partitions) should be refreshed first.
    """

    code: int = -1
    retriable: bool = False
    invalid_metadata: bool = False


class OffsetOutOfRangeError(RaystreamError):
    """A fetch or seek asked for an offset outside [log_start_offset, log_end_offset]."""

    code = 1


class CorruptRecordError(RaystreamError):
    """A stored batch failed its CRC32C check or is malformed; it is never served."""

    code = 2


class UnknownTopicOrPartitionError(RaystreamError):
    """The topic or partition does not exist (or not yet on this replica)."""

    code = 3
    retriable = True
    invalid_metadata = True


class LeaderNotAvailableError(RaystreamError):
    """The partition has no live leader right now (election in progress or offline)."""

    code = 5
    retriable = True
    invalid_metadata = True


class NotLeaderError(RaystreamError):
    """The replica asked is not the partition's leader (any more)."""

    code = 6
    retriable = True
    invalid_metadata = True


class RaystreamTimeoutError(RaystreamError):
    """An operation did not complete within its timeout."""

    code = 7
    retriable = True


class BrokerNotAvailableError(RaystreamError):
    """The actor serving the request died or cannot be reached."""

    code = 8
    retriable = True
    invalid_metadata = True


class CoordinatorNotAvailableError(RaystreamError):
    """The group coordinator is not reachable right now (starting or restarting)."""

    code = 15
    retriable = True


class RecordTooLargeError(RaystreamError):
    """A record or batch exceeds ``max.message.bytes`` / ``max_request_size``."""

    code = 10


class InvalidTopicError(RaystreamError):
    """A topic name breaks Kafka's naming rules."""

    code = 17


class NotEnoughReplicasError(RaystreamError):
    """acks=all was asked while the ISR is smaller than ``min.insync.replicas``."""

    code = 19
    retriable = True


class IllegalGenerationError(RaystreamError):
    """A group request came from a generation the coordinator no longer knows."""

    code = 22


class CommitFailedError(IllegalGenerationError):
    """An offset commit was refused: the member's generation is stale (rebalanced)."""


class InconsistentGroupProtocolError(RaystreamError):
    """A member's assignment strategies share none with the group's other members."""

    code = 23


class UnknownMemberIdError(RaystreamError):
    """The coordinator does not know the member (expired, left, or never joined)."""

    code = 25


class RebalanceInProgressError(RaystreamError):
    """The group is rebalancing; rejoin and retry."""

    code = 27
    retriable = True


class AuthorizationError(RaystreamError):
    """The caller is not allowed to do this (Kafka's TOPIC_AUTHORIZATION_FAILED: the
    subclasses name the other kinds of resource refused)."""

    code = 29


class GroupAuthorizationError(AuthorizationError):
    """The caller may not use this consumer group."""

    code = 30


class ClusterAuthorizationError(AuthorizationError):
    """The caller may not do this cluster-wide action (create topics, manage ACLs, ...)."""

    code = 31


class TransactionalIdAuthorizationError(AuthorizationError):
    """The caller may not use this transactional id."""

    code = 53


class SecurityDisabledError(RaystreamError):
    """An ACL call to a cluster whose authorizer is off (the broker's
    ``authorizer.class.name`` is empty)."""

    code = 54


class UnsupportedSaslMechanismError(RaystreamError):
    """A client asked for a SASL mechanism the listener does not enable."""

    code = 33


class IllegalSaslStateError(RaystreamError):
    """A SASL exchange got a message out of turn (e.g. authenticate before handshake)."""

    code = 34


class SaslAuthenticationError(RaystreamError):
    """SASL authentication failed: unknown user, wrong password, bad or expired token.

    The message never carries the credentials."""

    code = 58


class SslAuthenticationError(RaystreamError):
    """A TLS handshake with a server failed: its certificate is not signed by a trusted
    CA, does not name the host connected to, or the handshake broke off.

    Kafka's ``SslAuthenticationException``: not retriable (the same certificate fails
    again; a fixed one is picked up by the next connection). Raised on the client side
    only; Kafka has no code for it (-1).
    """


class ResourceNotFoundError(RaystreamError):
    """The named resource (a user's SCRAM credential, ...) does not exist."""

    code = 91


class UnacceptableCredentialError(RaystreamError):
    """A credential to store is refused (empty password, too few iterations, ...)."""

    code = 93


class UnsupportedError(RaystreamError):
    """The feature asked for is not supported (yet) by this raystream."""

    code = 35


class TopicAlreadyExistsError(RaystreamError):
    """create_topic was asked for a name that already exists."""

    code = 36


class InvalidPartitionsError(RaystreamError):
    """A partition count is invalid (< 1, or not larger when increasing)."""

    code = 37


class InvalidReplicationFactorError(RaystreamError):
    """A replication factor is invalid (< 1)."""

    code = 38


class InvalidConfigError(RaystreamError):
    """A configuration key is unknown or its value is invalid."""

    code = 40


class InvalidRequestError(RaystreamError):
    """A request argument is invalid (wrong type, negative offset, bad acks, ...)."""

    code = 42


class PartitionOutOfRangeError(InvalidRequestError):
    """A caller named a partition a topic does not have (negative, or >= its count).

    Not retriable, unlike UnknownTopicOrPartitionError (which a leader answers while
    metadata catches up): the client checks the count against fresh metadata first, so
    the partition is the caller's mistake. Kafka's producer refuses it alike ("Invalid
    partition given with record: 5 is not in the range [0...3)").

    Attributes:
        topic, partition: what was asked for; num_partitions: what the topic has.
    """

    def __init__(
        self, message: str, topic: str = "", partition: Any = -1, num_partitions: int = -1
    ):
        super().__init__(message)
        self.topic = topic
        self.partition = partition
        self.num_partitions = num_partitions

    @classmethod
    def of(cls, topic: str, partition: Any, num_partitions: int) -> PartitionOutOfRangeError:
        """The error for ``partition`` of ``topic``, which has ``num_partitions``."""
        return cls(
            f"partition {partition!r} of topic {topic!r} does not exist: it is not in the "
            f"range [0, {num_partitions})",
            topic,
            partition,
            num_partitions,
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.topic, self.partition, self.num_partitions))


class OutOfOrderSequenceError(RaystreamError):
    """An idempotent producer's batch does not follow the last one the leader has.

    Either a gap (an earlier batch never arrived within the leader's wait) or a
    sequence behind the window of batches the leader remembers. The sender retries it
    while an earlier batch of the partition is being retried; otherwise it is fatal
    for the records concerned (the leader lost batches it had acknowledged).
    """

    code = 45


class InvalidProducerEpochError(RaystreamError):
    """A batch carries an older epoch of its producer id than the leader has seen.

    The producer was superseded (re-initialized with a newer epoch); its writes are
    refused so that a zombie cannot interleave with its successor.
    """

    code = 47


class InvalidTxnStateError(RaystreamError):
    """A transactional call was made in a state that does not allow it."""

    code = 48


class ConcurrentTransactionsError(RaystreamError):
    """The producer's previous transaction is still being committed or aborted."""

    code = 51
    retriable = True


class TransactionCoordinatorFencedError(RaystreamError):
    """A transaction marker came from an older transaction coordinator epoch."""

    code = 52


class UnstableOffsetCommitError(RaystreamError):
    """A transaction still open may commit offsets of the group: ask again shortly."""

    code = 88
    retriable = True


class NonEmptyGroupError(RaystreamError):
    """The operation needs a group without active members (e.g. resetting offsets)."""

    code = 68


class GroupIdNotFoundError(RaystreamError):
    """The consumer group does not exist."""

    code = 69


class MemberIdRequiredError(RaystreamError):
    """A Kafka client's first JoinGroup (v4+, KIP-394) is answered with its member id and
    this error: it rejoins with that id, so a client that retries a lost join answer
    does not leave a second member behind."""

    code = 79

    def __init__(self, message: str, member_id: str = "") -> None:
        super().__init__(message)
        self.member_id = member_id


class FencedInstanceIdError(RaystreamError):
    """A newer member joined with this static member's ``group_instance_id``."""

    code = 82


class InvalidRecordError(RaystreamError):
    """A record does not fit the topic (schema, type, or a key a compacted topic needs)."""

    code = 87


class FencedLeaderEpochError(RaystreamError):
    """A request carried a leader or partition epoch older than the current one."""

    code = 74
    retriable = True
    invalid_metadata = True


class ProducerFencedError(RaystreamError):
    """A newer producer with the same transactional id has fenced this one."""

    code = 90


class LogDirInUseError(RaystreamError):
    """A data directory is held by another raystream process.

    Two clusters writing the same logs would corrupt them, so the controller holds its
    data directory's lock for as long as it runs, like a Kafka broker's log directory.
    """

    code = 56  # Kafka's KAFKA_STORAGE_ERROR


class UnknownServerError(RaystreamError):
    """A server actor failed unexpectedly while handling a request (Kafka's
    UNKNOWN_SERVER_ERROR).

    The message names the request type and the original exception's type and text; the
    actor logs the traceback. Not retriable: the same request would fail the same way.
    """

    code = -1


class IllegalStateError(RaystreamError):
    """A client was used in a state that does not allow the call (e.g. after close).

    Raised on the client side only; Kafka has no code for it (-1, shared with
    :class:`UnknownServerError`, which is what -1 reads back as).
    """


class RecordDeserializationError(RaystreamError):
    """A consumer's key or value deserializer raised on a fetched record.

    Kafka's ``RecordDeserializationException``: the consumer's position stays at the
    record, so nothing after it is skipped and auto-commit never commits past it. The
    records before it are returned first (by the poll that reached it, or one by one by
    iteration); every later poll raises this again until the application seeks past
    it: ``consumer.seek(error.topic_partition, error.offset + 1)``. ``__cause__`` is
    the deserializer's exception. Client side only: no actor answers with it.

    Attributes:
        topic, partition, offset: where the record is.
    """

    code = -1

    def __init__(self, message: str, topic: str = "", partition: int = -1, offset: int = -1):
        super().__init__(message)
        self.topic = topic
        self.partition = partition
        self.offset = offset

    @property
    def topic_partition(self) -> TopicPartition:
        """The record's partition (what ``seek`` takes)."""
        return TopicPartition(self.topic, self.partition)

    def __reduce__(self) -> tuple[Any, ...]:
        # Keeps the fields through pickling (Ray carries errors between processes).
        return (type(self), (str(self), self.topic, self.partition, self.offset))


class StreamsError(RaystreamError):
    """A streams application failed (``rs.streams``); base of the streams errors.

    Client side only, no Kafka code (Kafka Streams' ``StreamsException``).
    """


class ConnectError(RaystreamError):
    """A connector, task, transform or converter failed (``rs.connectors``, ``rs.mirror``).

    Kafka Connect's ``ConnectException``: the message names the connector, the stage
    and the bad value; a failed task shows it in its status.
    """


class RetriableConnectError(ConnectError):
    """The target system is busy or down for now (Kafka Connect's ``RetriableException``).

    A sink task raising it from ``put`` is handed the same records again after a
    backoff, rather than failing.
    """

    retriable = True


class TopologyError(StreamsError):
    """The topology is not valid: a DSL call with a bad argument, a window with a negative
    size, a join whose inputs are not co-partitioned, a store name used twice.

    Kafka Streams' ``TopologyException``: raised while the topology is built or checked
    at start, never while records flow; the message names the node or argument.
    """


_BY_CODE: dict[int, type[RaystreamError]] = {
    cls.code: cls
    for cls in (
        UnsupportedSaslMechanismError,
        IllegalSaslStateError,
        SaslAuthenticationError,
        ResourceNotFoundError,
        UnacceptableCredentialError,
        OffsetOutOfRangeError,
        CorruptRecordError,
        UnknownTopicOrPartitionError,
        LeaderNotAvailableError,
        NotLeaderError,
        RaystreamTimeoutError,
        BrokerNotAvailableError,
        CoordinatorNotAvailableError,
        RecordTooLargeError,
        InvalidTopicError,
        NotEnoughReplicasError,
        IllegalGenerationError,
        InconsistentGroupProtocolError,
        UnknownMemberIdError,
        RebalanceInProgressError,
        AuthorizationError,
        GroupAuthorizationError,
        ClusterAuthorizationError,
        TransactionalIdAuthorizationError,
        SecurityDisabledError,
        UnsupportedError,
        TopicAlreadyExistsError,
        InvalidPartitionsError,
        InvalidReplicationFactorError,
        InvalidConfigError,
        InvalidRequestError,
        OutOfOrderSequenceError,
        InvalidProducerEpochError,
        InvalidTxnStateError,
        ConcurrentTransactionsError,
        TransactionCoordinatorFencedError,
        UnstableOffsetCommitError,
        NonEmptyGroupError,
        GroupIdNotFoundError,
        MemberIdRequiredError,
        FencedInstanceIdError,
        InvalidRecordError,
        FencedLeaderEpochError,
        ProducerFencedError,
        LogDirInUseError,
        UnknownServerError,
    )
}


def error_for_code(code: int, message: str) -> RaystreamError:
    """Build the exception for an error code carried in an actor's response (a code
    this module does not know reads back as :class:`UnknownServerError`, naming it)."""
    cls = _BY_CODE.get(code)
    if cls is None:
        return UnknownServerError(f"error code {code}: {message}")
    return cls(message)


def round_trips(error: RaystreamError) -> bool:
    """Whether ``error``'s class is what its code reads back as (see :func:`error_for_code`)."""
    return _BY_CODE.get(error.code) is type(error)


def code_of(error: BaseException) -> int:
    """The code to put in a response for ``error`` (-1 for anything unexpected)."""
    return error.code if isinstance(error, RaystreamError) else -1
