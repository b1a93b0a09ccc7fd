"""Kafka's idempotence and transaction APIs, through raystream's coordinators.

InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and TxnOffsetCommit: each
becomes the typed request raystream's own transactional producer sends (see
:mod:`raystream.client.transactions`), so a Kafka producer and a raystream one with the
same transactional id fence each other, and the coordinator's rules (epochs, states,
timeouts, markers) are the same for both.

- InitProducerId without a transactional id: a fresh producer id from the controller
  (Kafka gives an idempotent producer a new id every time, KIP-360 fields or not).
  With one: the transaction coordinator's init, which bumps the epoch and so fences
  the previous producer of the id. A client that names its current producer id and
  epoch (KIP-360, v3+, to bump the epoch after an error) is refused with
  PRODUCER_FENCED unless they are the id's current ones.
- AddPartitionsToTxn v0-v3 (the client's form). v4+ is the batched form brokers send
  one another to verify a transaction (KIP-890); clients never send it, so the table
  stops at v3.
- EndTxn up to v4: v5 is transactions v2 (KIP-890 part 2, an epoch bump per end),
  which clients only use when the broker announces the ``transaction.version`` feature;
  raystream's coordinator keeps the epoch across Kafka clients' ends (v1 semantics).
- TxnOffsetCommit up to v4 (v5 belongs to transactions v2 as well): the offsets are
  written as a record of the producer's transaction to the group's
  ``__consumer_offsets`` partition (the one AddOffsetsToTxn added), as raystream's
  ``send_offsets_to_transaction`` writes them, so they commit or abort with the
  transaction and the group coordinator serves them once committed. The consumer's
  generation is checked afterwards (KIP-447; after, so a rebalance either happened
  before the check or sees these offsets).

Errors are raystream's, whose codes are Kafka's. Before PRODUCER_FENCED existed
(KIP-588: InitProducerId v4, AddPartitionsToTxn/AddOffsetsToTxn/EndTxn v2,
TxnOffsetCommit v3) Kafka answered INVALID_PRODUCER_EPOCH, and so does this module to
clients of those versions.

Pure: no Ray here; the listener actor provides the Backend.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from raystream.errors import (
    InvalidProducerEpochError,
    InvalidRequestError,
    ProducerFencedError,
    RaystreamError,
)
from raystream.groups.offsets_topic import OffsetAndMetadata, offset_records
from raystream.kafka.call import NONE, Call
from raystream.requests import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    DescribeTransactionRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    TxnOffsetCheckRequest,
)
from raystream.transactions.metadata import MAX_TRANSACTION_TIMEOUT_MS
from raystream.types import TopicPartition

UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TRANSACTION_TIMEOUT = 50
OPERATION_NOT_ATTEMPTED = 55
NO_PRODUCER_ID = -1


FENCED_SINCE = {22: 4, 24: 2, 25: 2, 26: 2, 28: 3}
"""The first version of each API whose clients know PRODUCER_FENCED (KIP-588)."""


def kafka_code(error: RaystreamError | int, api_key: int, version: int) -> int:
    """The Kafka error code for ``error`` in an answer of ``api_key`` ``version``:
    its own code, except PRODUCER_FENCED for clients that predate it.

    Example:
        >>> kafka_code(ProducerFencedError("x"), 26, 1), kafka_code(ProducerFencedError("x"), 26, 2)
        (47, 90)
    """
    code = error if isinstance(error, int) else error.code
    if code == ProducerFencedError.code and version < FENCED_SINCE.get(api_key, 0):
        return InvalidProducerEpochError.code
    return code


def _code(call: Call, error: RaystreamError | int) -> int:
    return kafka_code(error, call.header.api_key, call.header.api_version)


# ---------------------------------------------------------------- InitProducerId


async def init_producer_id(call: Call, request: Any) -> Mapping[str, Any]:
    """A producer id and epoch: a new id for an idempotent producer; for a
    transactional id, the coordinator's next epoch (fencing older producers)."""
    refused = {"producer_id": NO_PRODUCER_ID, "producer_epoch": -1}
    try:
        if request.transactional_id is None:
            producer_id, epoch = await call.backend.controller("init_producer_id")
        else:
            timeout_ms = int(request.transaction_timeout.total_seconds() * 1000)
            if not 1 <= timeout_ms <= MAX_TRANSACTION_TIMEOUT_MS:
                return {**refused, "error_code": INVALID_TRANSACTION_TIMEOUT}
            producer_id, epoch = await _init_transactional(call, request, timeout_ms)
    except RaystreamError as error:
        return {**refused, "error_code": _code(call, error)}
    return {"error_code": NONE, "producer_id": producer_id, "producer_epoch": epoch}


async def _init_transactional(call: Call, request: Any, timeout_ms: int) -> tuple[int, int]:
    """The transaction coordinator's init of the request's transactional id.

    Raises:
        ProducerFencedError: a KIP-360 bump by a producer that is not the current one.
        RaystreamError: the coordinator's refusal.
    """
    transactional_id = request.transactional_id
    expected = (getattr(request, "producer_id", -1), getattr(request, "producer_epoch", -1))
    if expected[0] != NO_PRODUCER_ID:
        await _check_current(call, transactional_id, expected)
    result = await call.backend.transaction_coordinator(
        InitProducerIdRequest(transactional_id, timeout_ms)
    )
    producer_id, epoch = result.unwrap()
    return producer_id, epoch


async def _check_current(call: Call, transactional_id: str, expected: tuple[int, int]) -> None:
    """KIP-360: a producer asking to bump its epoch must hold the id's current one.

    Raises:
        ProducerFencedError: another producer (or a newer epoch) holds the id.
    """
    described = await call.backend.transaction_coordinator(
        DescribeTransactionRequest(transactional_id)
    )
    if described.error_code != NONE:  # an id the coordinator does not know: a fresh init
        return
    current = (described.value["producer_id"], described.value["producer_epoch"])
    if current != expected:
        raise ProducerFencedError(
            f"transactional id {transactional_id!r}: producer {expected[0]} epoch "
            f"{expected[1]} is not the current producer {current[0]} epoch {current[1]}"
        )


# ------------------------------------------------------------ AddPartitionsToTxn


async def add_partitions_to_txn(call: Call, request: Any) -> Mapping[str, Any]:
    """Add the partitions to the transaction. A partition that does not exist gets
    UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED, as in Kafka;
    otherwise every partition gets the coordinator's answer."""
    topics = request.v3_and_below_topics
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    codes = dict.fromkeys(wanted, NONE)
    names = sorted({t.name for t in topics})
    found = await call.backend.topics(names)
    counts = {
        name: (None if isinstance(m, RaystreamError) else len(m.partitions))
        for name, m in zip(names, found, strict=True)
    }
    missing = {tp for tp in wanted if counts.get(tp[0]) is None or not 0 <= tp[1] < counts[tp[0]]}
    if missing:
        for tp in wanted:
            codes[tp] = UNKNOWN_TOPIC_OR_PARTITION if tp in missing else OPERATION_NOT_ATTEMPTED
    else:
        try:
            result = await call.backend.transaction_coordinator(
                AddPartitionsToTxnRequest(
                    request.v3_and_below_transactional_id,
                    request.v3_and_below_producer_id,
                    request.v3_and_below_producer_epoch,
                    tuple(wanted),
                )
            )
            code = result.error_code
        except RaystreamError as error:
            code = error.code
        if code != NONE:
            codes = dict.fromkeys(wanted, _code(call, code))
    by_topic: dict[str, list[dict[str, int]]] = {}
    for (name, partition), code in codes.items():
        by_topic.setdefault(name, []).append(
            {"partition_index": partition, "partition_error_code": code}
        )
    return {
        "throttle_time": 0,
        "results_by_topic_v3_and_below": [
            {"name": name, "results_by_partition": results} for name, results in by_topic.items()
        ],
    }


# ----------------------------------------------------- AddOffsetsToTxn and EndTxn


async def add_offsets_to_txn(call: Call, request: Any) -> Mapping[str, Any]:
    """Add the group's ``__consumer_offsets`` partition to the transaction."""
    result = await call.backend.transaction_coordinator(
        AddOffsetsToTxnRequest(
            request.transactional_id, request.producer_id, request.producer_epoch, request.group_id
        )
    )
    return {"throttle_time": 0, "error_code": _code(call, result.error_code)}


async def end_txn(call: Call, request: Any) -> Mapping[str, Any]:
    """Commit or abort the transaction; answers once its markers are written."""
    result = await call.backend.transaction_coordinator(
        EndTxnRequest(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            request.committed,
        )
    )
    return {"throttle_time": 0, "error_code": _code(call, result.error_code)}


# --------------------------------------------------------------- TxnOffsetCommit


def commit_offsets(request: Any, now_ms: int) -> dict[TopicPartition, OffsetAndMetadata]:
    """The offsets of a TxnOffsetCommit request as raystream's commit records take them.

    Raises:
        InvalidRequestError: a negative offset (the message names its partition).
    """
    offsets = {}
    for topic in request.topics:
        for p in topic.partitions:
            if p.committed_offset < 0:
                raise InvalidRequestError(
                    f"TxnOffsetCommit: offset {p.committed_offset} for {topic.name}-"
                    f"{p.partition_index} must be >= 0"
                )
            offsets[TopicPartition(topic.name, p.partition_index)] = OffsetAndMetadata(
                p.committed_offset, p.committed_metadata or "", now_ms
            )
    return offsets


async def txn_offset_commit(call: Call, request: Any) -> Mapping[str, Any]:
    """Write the offsets into the transaction, then check the consumer's generation
    (KIP-447, v3+); every partition gets the outcome."""
    code = NONE
    try:
        offsets = commit_offsets(request, time.time_ns() // 1_000_000)
        written = await call.backend.write_txn_offsets(
            request.group_id,
            offset_records(request.group_id, offsets),
            request.producer_id,
            request.producer_epoch,
        )
        code = written.error_code
        member_id = getattr(request, "member_id", "")
        generation_id = getattr(request, "generation_id", -1)
        if code == NONE and (member_id or generation_id != -1):
            checked = await call.backend.coordinator(
                TxnOffsetCheckRequest(request.group_id, member_id, generation_id)
            )
            code = checked.error_code
    except RaystreamError as error:
        code = error.code
    code = _code(call, code)
    return {
        "throttle_time": 0,
        "topics": [
            {
                "name": topic.name,
                "partitions": [
                    {"partition_index": p.partition_index, "error_code": code}
                    for p in topic.partitions
                ],
            }
            for topic in request.topics
        ],
    }


__all__ = [
    "add_offsets_to_txn",
    "add_partitions_to_txn",
    "commit_offsets",
    "end_txn",
    "init_producer_id",
    "kafka_code",
    "txn_offset_commit",
]
