"""The Kafka data-plane APIs: Produce, Fetch, ListOffsets, OffsetForLeaderEpoch and
DeleteRecords.

Each handler turns one Kafka request into raystream's typed requests, one per partition
(:mod:`raystream.requests`), sends them to the partitions' leaders concurrently
through the :class:`~raystream.kafka.call.Backend`, and answers with the leaders'
results and error codes (raystream's error codes are Kafka's). Nothing here keeps
state or re-implements the broker: deduplication and fencing of idempotent producers,
long polling, read_committed and the offsets' rules are the replicas'.

Produce. One Kafka RecordBatch is one raystream :class:`~raystream.requests.
ProduceRequest`, with the batch's producer id, epoch, base sequence and transactional
flag forwarded, so an idempotent or transactional Kafka producer gets the replica's
per-batch sequence checks exactly as raystream's own producer does. ``acks=0`` gets no
answer (the append is still awaited, so that requests of a connection land in order).

Fetch. Each partition is one :class:`~raystream.requests.FetchRequest`. The replica
long-polls itself (it waits on its high watermark for ``min_bytes`` up to
``max_wait_ms``), so the listener never polls in a loop: it first asks every partition
for what it has now (``max_wait_ms=0``); if that is less than ``min_bytes`` it asks
again with the remaining wait and answers as soon as the first partition answers with
data (the other polls are abandoned: a replica answers an abandoned poll when its wait
ends and the answer is dropped). ``min_bytes`` is then applied per partition, not
summed over partitions: a request whose partitions each hold less than ``min_bytes``
but together more waits until ``max_wait_ms``, which Kafka would answer sooner (the
clients' default ``fetch.min.bytes`` is 1, where both agree).

read_committed: the replica reads below the last stable offset and leaves aborted
batches and transaction markers out, so the answer's ``aborted_transactions`` list is
always empty (the equivalent of the list, applied at the source). Where the replica
skipped batches at the end of what it read (markers, aborted batches), the answer ends
with a control batch covering them, so that every client advances past them.

Fetch sessions (KIP-227): none. Every answer has ``session_id`` 0, which tells a client
that asked for a session that none was made; librdkafka and aiokafka do not ask,
kafka-python then sends full fetches (epoch 0 "new session" requests every time), so
every request lists all its partitions and is answered in full.

Fetch v13+ and Produce v13 name topics by id: ids are resolved through the backend's
topic metadata (unknown: UNKNOWN_TOPIC_ID per partition).
"""

from __future__ import annotations

import asyncio
import json
import struct
import zlib
from collections.abc import Awaitable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import crc32c
import numpy as np
import pyarrow as pa

from raystream.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidRequestError,
    RaystreamError,
)
from raystream.kafka.call import NONE, Call
from raystream.log.batch import (
    ATTR_LOG_APPEND_TIME,
    ATTR_TRANSACTIONAL,
    HEADER_SIZE,
    BatchEncoder,
    PayloadDecoder,
    batch_offsets,
    user_columns,
)
from raystream.log.log import stored_batches
from raystream.protocol import FetchResponse, TopicMetadata
from raystream.records import build_batch, record_schema
from raystream.requests import (
    DeleteRecordsRequest,
    FetchRequest,
    InitProducerIdRequest,
    ListOffsetsRequest,
    OffsetForLeaderEpochRequest,
    ProduceRequest,
)

UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_REQUEST = 42
UNKNOWN_TOPIC_ID = 100
READ_COMMITTED = 1
"""Kafka's isolation_level byte for read_committed (0: read_uncommitted)."""
EARLIEST_LOCAL_TIMESTAMP = -4
"""ListOffsets' "earliest local offset" (tiered storage): the log start offset here."""


# ---------------------------------------------------------------- topic names


async def _names_by_id(call: Call, ids: Iterable[Any]) -> dict[Any, str | None]:
    """Topic names of Kafka topic ids (None: no such topic)."""
    found: dict[Any, str | None] = {}
    for topic_id in set(ids):
        meta = await call.backend.topic_by_id(topic_id.hex) if topic_id is not None else None
        found[topic_id] = None if meta is None else meta.name
    return found


async def _topic_names(call: Call, topics: Iterable[Any]) -> list[tuple[Any, str | None]]:
    """(the topic's key in the answer, its name or None) per topic of a request: the
    name where the version has one, else the name of its topic id."""
    topics = list(topics)
    if not topics or hasattr(topics[0], "name") or hasattr(topics[0], "topic"):
        return [(_name_of(t), _name_of(t)) for t in topics]
    names = await _names_by_id(call, (t.topic_id for t in topics))
    return [(t.topic_id, names[t.topic_id]) for t in topics]


def _name_of(topic: Any) -> str:
    return topic.name if hasattr(topic, "name") else topic.topic


def _key_field(version_has_ids: bool) -> str:
    return "topic_id" if version_has_ids else "name"


async def _gather(calls: list[Awaitable[Any]]) -> list[Any]:
    """Answers of concurrent backend calls, a call that raised answered by its error."""
    return list(await asyncio.gather(*calls, return_exceptions=True))


def _error_code(answer: Any) -> int:
    if isinstance(answer, RaystreamError):
        return answer.code
    if isinstance(answer, BaseException):
        raise answer
    return answer.error_code


# --------------------------------------------------------------------- Produce


async def produce(call: Call, request: Any) -> Mapping[str, Any] | None:
    """Append each partition's record batch at its leader, all partitions at once."""
    acks = int(request.acks)
    timeout_ms = int(request.timeout.total_seconds() * 1000)
    named = await _topic_names(call, request.topic_data)
    by_id = bool(request.topic_data) and not hasattr(request.topic_data[0], "name")
    jobs = []
    for (key, name), topic in zip(named, request.topic_data, strict=True):
        for part in topic.partition_data:
            jobs.append((key, name, part.index, part.records))
    answers = await _gather(
        [
            _produce_partition(call, name, index, records, acks, timeout_ms)
            for _, name, index, records in jobs
        ]
    )
    if acks == 0:
        return None
    topics: dict[Any, list[dict[str, Any]]] = {}
    for (key, name, index, _), answer in zip(jobs, answers, strict=True):
        entry: dict[str, Any] = {"index": index, "base_offset": -1, "log_start_offset": -1}
        if name is None:
            entry["error_code"] = UNKNOWN_TOPIC_ID if by_id else UNKNOWN_TOPIC_OR_PARTITION
        elif isinstance(answer, BaseException):
            if not isinstance(answer, RaystreamError):
                raise answer
            entry.update(error_code=answer.code, error_message=str(answer))
        else:
            entry.update(
                error_code=answer.error_code,
                error_message=answer.message or None,
                base_offset=answer.base_offset,
                log_start_offset=answer.log_start_offset,
                log_append_time=None if answer.log_append_time < 0 else answer.log_append_time,
            )
        topics.setdefault(key, []).append(entry)
    return {
        "throttle_time": 0,
        "responses": [
            {_key_field(by_id): key, "partition_responses": entries}
            for key, entries in topics.items()
        ],
    }


async def _produce_partition(
    call: Call, topic: str | None, partition: int, records: bytes | None, acks: int, timeout_ms: int
) -> Any:
    """One partition's batch as one raystream ProduceRequest; the leader's answer."""
    if topic is None:
        return None
    if not records:
        raise InvalidRecordError(f"produce to {topic}-{partition} carries no record batch")
    meta = await call.backend.topic_metadata(topic)
    batch = decode_produced(records, meta)
    return await call.backend.send(
        ProduceRequest(
            topic,
            partition,
            batch.payload,
            acks=acks,
            timeout_ms=max(timeout_ms, 0),
            compression_type=batch.compression,
            producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch if batch.producer_id >= 0 else -1,
            base_sequence=batch.base_sequence if batch.producer_id >= 0 else -1,
            transactional=batch.transactional,
        )
    )


# -------------------------------------------------------------- InitProducerId


async def init_producer_id(call: Call, request: Any) -> Mapping[str, Any]:
    """A producer id and epoch: a new id from the controller for an idempotent producer
    (no transactional id), else the transaction coordinator's answer for the id (which
    fences its older producers).

    Here because Produce's idempotence is unusable without it; the transactional APIs
    around it (AddPartitionsToTxn, EndTxn, ...) are not in this module.
    """
    if request.transactional_id is None:
        producer_id, epoch = await call.backend.controller("init_producer_id")
        return {
            "throttle_time": 0,
            "error_code": NONE,
            "producer_id": producer_id,
            "producer_epoch": epoch,
        }
    timeout_ms = int(request.transaction_timeout.total_seconds() * 1000)
    answer = await call.backend.transaction_coordinator(
        InitProducerIdRequest(request.transactional_id, transaction_timeout_ms=timeout_ms)
    )
    if answer.error_code != NONE:
        return {
            "throttle_time": 0,
            "error_code": answer.error_code,
            "producer_id": -1,
            "producer_epoch": -1,
        }
    producer_id, epoch = answer.value
    return {
        "throttle_time": 0,
        "error_code": NONE,
        "producer_id": producer_id,
        "producer_epoch": epoch,
    }


# ----------------------------------------------------------------------- Fetch


async def fetch(call: Call, request: Any) -> Mapping[str, Any]:
    """Records of the asked partitions from their fetch offsets, long-polled."""
    max_wait_ms = int(request.max_wait.total_seconds() * 1000)
    committed = request.isolation_level == READ_COMMITTED
    isolation = "read_committed" if committed else "read_uncommitted"
    max_bytes = max(int(request.max_bytes), 1)
    by_id = bool(request.topics) and not hasattr(request.topics[0], "topic")
    named = await _topic_names(call, request.topics)
    wanted = []  # (key, name, partition, fetch_offset, partition_max_bytes)
    for (key, name), topic in zip(named, request.topics, strict=True):
        for p in topic.partitions:
            limit = min(int(p.partition_max_bytes), max_bytes)
            wanted.append((key, name, p.partition, int(p.fetch_offset), limit))

    def poll(i: int, wait_ms: int, min_bytes: int) -> Awaitable[Any]:
        _, name, partition, offset, limit = wanted[i]
        return call.backend.send(
            FetchRequest(name, partition, offset, limit, wait_ms, min_bytes, isolation)
        )

    live = [i for i, w in enumerate(wanted) if w[1] is not None]
    answers: dict[int, Any] = dict(
        zip(live, await _gather([poll(i, 0, 1) for i in live]), strict=True)
    )
    if max_wait_ms > 0 and _fetched_bytes(answers.values()) < max(int(request.min_bytes), 1):
        waiting = [i for i in live if _error_code(answers[i]) == NONE]
        answers.update(await _long_poll(waiting, poll, max_wait_ms, int(request.min_bytes)))
    topics: dict[Any, list[dict[str, Any]]] = {}
    budget = max_bytes
    for i, (key, name, partition, offset, _) in enumerate(wanted):
        if name is None:
            code = UNKNOWN_TOPIC_ID if by_id else UNKNOWN_TOPIC_OR_PARTITION
            topics.setdefault(key, []).append(_fetch_entry(partition, code))
            continue
        answer = answers[i]
        code = _error_code(answer)
        if code != NONE:
            topics.setdefault(key, []).append(_fetch_entry(partition, code))
            continue
        size = sum(len(run) for run in answer.data)
        if size and budget <= 0:  # over the request's max_bytes: fetched again next time
            answer = None
        else:
            budget -= size
        topics.setdefault(key, []).append(
            await _fetched_partition(call, name, partition, offset, answer, committed, answers[i])
        )
    return {
        "throttle_time": 0,
        "error_code": NONE,
        "session_id": 0,
        "responses": [
            {"topic_id" if by_id else "topic": key, "partitions": entries}
            for key, entries in topics.items()
        ],
    }


async def _long_poll(
    waiting: list[int], poll: Any, max_wait_ms: int, min_bytes: int
) -> dict[int, Any]:
    """Long polls of the ``waiting`` partitions; the answers there are once the first
    brings data or an error (or every poll ended)."""
    if not waiting:
        return {}
    tasks = {asyncio.ensure_future(poll(i, max_wait_ms, max(min_bytes, 1))): i for i in waiting}
    pending = set(tasks)
    done_answers: dict[int, Any] = {}
    try:
        while pending:
            done, pending = await asyncio.wait(
                pending, timeout=max_wait_ms / 1000 + 5.0, return_when=asyncio.FIRST_COMPLETED
            )
            if not done:
                break
            for task in done:
                answer = task.exception() or task.result()
                done_answers[tasks[task]] = answer
            if any(
                _error_code(a) != NONE or (a.data if isinstance(a, FetchResponse) else False)
                for a in done_answers.values()
            ):
                break
    finally:
        for task in pending:
            task.cancel()
    return done_answers


def _fetched_bytes(answers: Iterable[Any]) -> int:
    return sum(sum(len(run) for run in a.data) for a in answers if isinstance(a, FetchResponse))


def _fetch_entry(partition: int, code: int) -> dict[str, Any]:
    return {
        "partition_index": partition,
        "error_code": code,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "aborted_transactions": None,
        "records": None,
    }


async def _fetched_partition(
    call: Call,
    topic: str,
    partition: int,
    offset: int,
    answer: FetchResponse | None,
    committed: bool,
    offsets: FetchResponse,
) -> dict[str, Any]:
    """One partition of a Fetch answer: its Kafka record batches and offsets."""
    records = b""
    if answer is not None:
        meta = await call.backend.topic_metadata(topic)
        records = encode_fetched(answer, offset, meta)
    return {
        "partition_index": partition,
        "error_code": NONE,
        "high_watermark": offsets.high_watermark,
        "last_stable_offset": offsets.last_stable_offset,
        "log_start_offset": offsets.log_start_offset,
        "aborted_transactions": [] if committed else None,
        "records": records,
    }


# ----------------------------------------------------------------- ListOffsets


async def list_offsets(call: Call, request: Any) -> Mapping[str, Any]:
    """Earliest (-2), latest (-1) or first-at-timestamp offsets of each partition.

    Latest is the last stable offset for read_committed. The max-timestamp query (-3)
    is refused per partition with INVALID_REQUEST: the replica keeps no index of it."""
    isolation = (
        "read_committed"
        if getattr(request, "isolation_level", 0) == READ_COMMITTED
        else "read_uncommitted"
    )
    jobs = []
    for topic in request.topics:
        for p in topic.partitions:
            jobs.append((topic.name, p.partition_index, int(p.timestamp)))

    async def one(name: str, partition: int, timestamp: int) -> Any:
        if timestamp == EARLIEST_LOCAL_TIMESTAMP:
            timestamp = -2
        if timestamp < -2:
            return InvalidRequestError(
                f"ListOffsets timestamp {timestamp} of {name}-{partition} is not served "
                "(use -2 earliest, -1 latest, or a time in ms)"
            )
        return await call.backend.send(ListOffsetsRequest(name, partition, timestamp, isolation))

    answers = await _gather([one(*job) for job in jobs])
    topics: dict[str, list[dict[str, Any]]] = {}
    for (name, partition, timestamp), answer in zip(jobs, answers, strict=True):
        code = _error_code(answer)
        entry: dict[str, Any] = {"partition_index": partition, "error_code": code}
        if code == NONE:
            entry["offset"] = answer.offset
            entry["timestamp"] = answer.timestamp if timestamp >= 0 and answer.offset >= 0 else -1
        topics.setdefault(name, []).append(entry)
    return {
        "throttle_time": 0,
        "topics": [{"name": n, "partitions": e} for n, e in topics.items()],
    }


# --------------------------------------------------------- OffsetForLeaderEpoch


async def offset_for_leader_epoch(call: Call, request: Any) -> Mapping[str, Any]:
    """Where each asked leader epoch ended on the partition's leader."""
    jobs = [
        (topic.topic, p.partition, int(p.leader_epoch))
        for topic in request.topics
        for p in topic.partitions
    ]
    answers = await _gather(
        [call.backend.send(OffsetForLeaderEpochRequest(t, p, e)) for t, p, e in jobs]
    )
    topics: dict[str, list[dict[str, Any]]] = {}
    for (name, partition, _), answer in zip(jobs, answers, strict=True):
        code = _error_code(answer)
        entry: dict[str, Any] = {"partition": partition, "error_code": code}
        if code == NONE:
            entry.update(leader_epoch=answer.leader_epoch, end_offset=answer.end_offset)
        topics.setdefault(name, []).append(entry)
    return {
        "throttle_time": 0,
        "topics": [{"topic": n, "partitions": e} for n, e in topics.items()],
    }


# --------------------------------------------------------------- DeleteRecords


async def delete_records(call: Call, request: Any) -> Mapping[str, Any]:
    """Advance each partition's log start offset (-1: to its high watermark)."""
    jobs = [
        (topic.name, p.partition_index, int(p.offset))
        for topic in request.topics
        for p in topic.partitions
    ]
    answers = await _gather([call.backend.send(DeleteRecordsRequest(t, p, o)) for t, p, o in jobs])
    topics: dict[str, list[dict[str, Any]]] = {}
    for (name, partition, _), answer in zip(jobs, answers, strict=True):
        code = _error_code(answer)
        low = answer.low_watermark if code == NONE else -1
        topics.setdefault(name, []).append(
            {"partition_index": partition, "error_code": code, "low_watermark": low}
        )
    return {
        "throttle_time": 0,
        "topics": [{"name": n, "partitions": e} for n, e in topics.items()],
    }


# ------------------------------------------------- record translation (stand-in)
#
# Kafka RecordBatch v2 <-> raystream's stored batches, one record at a time in Python:
# a stand-in until the vectorized translation of raystream.kafka.records replaces it.

_KAFKA_BATCH = struct.Struct(">qiibIhiqqqhii")
"""A Kafka RecordBatch v2 header: base_offset, batch_length, partition_leader_epoch,
magic, crc, attributes, last_offset_delta, base_timestamp, max_timestamp, producer_id,
producer_epoch, base_sequence, record count."""
_KAFKA_CRC_START = 21
_KAFKA_LENGTH_START = 12
_KAFKA_CODEC_MASK = 0x07
_KAFKA_TRANSACTIONAL = 0x10
_KAFKA_CONTROL = 0x20
_KAFKA_CODECS = {0: None, 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
_STORED_CODECS = {"lz4": "lz4", "zstd": "zstd"}
"""Kafka codecs raystream stores with the same algorithm (Arrow's); others uncompressed."""
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_COMMIT_MARKER_KEY = struct.pack(">hh", 0, 1)
_MARKER_VALUE = struct.pack(">hi", 0, 0)

_ENCODER = BatchEncoder()
_DECODER = PayloadDecoder()


@dataclass(frozen=True, slots=True)
class ProducedBatch:
    """A Kafka producer's batch as raystream's ProduceRequest carries it."""

    payload: bytes
    compression: str | None
    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional: bool


def decode_produced(data: bytes, meta: TopicMetadata) -> ProducedBatch:
    """The one Kafka RecordBatch v2 of a produce request's partition, checked (CRC) and
    decompressed, as the payload of a raystream ProduceRequest of ``meta``'s topic.

    Raises:
        CorruptRecordError: the CRC does not match or the bytes do not parse.
        InvalidRecordError: not exactly one v2 batch, a control batch, or a value of a
            typed topic that is not a JSON object of its schema.
    """
    view = memoryview(data)
    where = f"the record batch for {meta.name}"
    if len(view) < _KAFKA_BATCH.size:
        raise CorruptRecordError(f"{where} has {len(view)} bytes, shorter than its header")
    (_, length, _, magic, crc, attributes, _, base_ts, _, pid, epoch, sequence, count) = (
        _KAFKA_BATCH.unpack_from(view, 0)
    )
    if magic != 2:
        raise InvalidRecordError(f"{where} has magic {magic}: only record batches v2 are served")
    end = _KAFKA_LENGTH_START + length
    if end != len(view):
        raise InvalidRecordError(
            f"{where} must be exactly one record batch ({len(view)} bytes, the first "
            f"batch says {end})"
        )
    if crc32c.crc32c(view[_KAFKA_CRC_START:end]) != crc:
        raise CorruptRecordError(f"{where} fails its CRC check")
    if attributes & _KAFKA_CONTROL:
        raise InvalidRecordError(f"{where} is a control batch: clients may not produce those")
    codec = _KAFKA_CODECS.get(attributes & _KAFKA_CODEC_MASK, "?")
    if codec == "?":
        raise InvalidRecordError(f"{where} has unknown codec {attributes & _KAFKA_CODEC_MASK}")
    try:
        body = _decompress(codec, view[_KAFKA_BATCH.size : end])
        keys, values, timestamps, headers = _read_records(body, count, base_ts)
    except (IndexError, ValueError, OSError, zlib.error, pa.ArrowException) as error:
        raise CorruptRecordError(f"{where} does not parse: {error}") from None
    if meta.value_schema is not None:
        values = _json_values(values, meta.name)
    batch = build_batch(record_schema(meta.value_schema), keys, values, timestamps, headers)
    payload = b"".join(_ENCODER.payload(batch, None))
    return ProducedBatch(
        payload,
        _STORED_CODECS.get(codec or ""),
        pid,
        epoch,
        sequence,
        bool(attributes & _KAFKA_TRANSACTIONAL),
    )


def _json_values(values: list[bytes | None], topic: str) -> list[Any]:
    """A typed topic's values: each a JSON object (None stays a tombstone)."""
    decoded = []
    for index, value in enumerate(values):
        if value is None:
            decoded.append(None)
            continue
        try:
            row = json.loads(value)
        except (ValueError, UnicodeDecodeError) as error:
            raise InvalidRecordError(
                f"record {index} for typed topic {topic!r} is not JSON: {error}"
            ) from None
        if not isinstance(row, dict):
            raise InvalidRecordError(
                f"record {index} for typed topic {topic!r} is JSON {type(row).__name__}, "
                "not an object of the topic's fields"
            )
        decoded.append(row)
    return decoded


def _decompress(codec: str | None, data: memoryview) -> bytes:
    if codec is None:
        return bytes(data)
    if codec == "gzip":
        return zlib.decompress(data, 47)
    if codec in ("lz4", "zstd"):
        return pa.CompressedInputStream(pa.BufferReader(pa.py_buffer(data)), codec).read()
    raw = bytes(data)  # snappy: Xerial's framing (Java clients) or one raw block
    if raw.startswith(_XERIAL_MAGIC):
        out, position = [], 16
        while position < len(raw):
            (size,) = struct.unpack_from(">i", raw, position)
            out.append(_snappy_block(raw[position + 4 : position + 4 + size]))
            position += 4 + size
        return b"".join(out)
    return _snappy_block(raw)


def _snappy_block(block: bytes) -> bytes:
    size, _ = _uvarint(block, 0)
    return pa.decompress(block, size, codec="snappy", asbytes=True)


def _uvarint(buffer: bytes, position: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buffer[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, position
        shift += 7


def _varint(buffer: bytes, position: int) -> tuple[int, int]:
    value, position = _uvarint(buffer, position)
    return (value >> 1) ^ -(value & 1), position


def _read_records(
    body: bytes, count: int, base_ts: int
) -> tuple[list[bytes | None], list[bytes | None], list[int], list[Any] | None]:
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    timestamps: list[int] = []
    headers: list[Any] = []
    any_headers = False
    position = 0
    for _ in range(count):
        length, position = _varint(body, position)
        end = position + length
        position += 1  # attributes
        delta, position = _varint(body, position)
        timestamps.append(base_ts + delta)
        _, position = _varint(body, position)  # offset delta: the leader assigns offsets
        key, position = _bytes(body, position)
        value, position = _bytes(body, position)
        keys.append(key)
        values.append(value)
        n, position = _varint(body, position)
        if n:
            any_headers = True
            pairs = []
            for _ in range(n):
                name, position = _bytes(body, position)
                data, position = _bytes(body, position)
                pairs.append(((name or b"").decode(), data))
            headers.append(pairs)
        else:
            headers.append(None)
        if position != end:
            raise ValueError(f"a record's length says {length} bytes, its fields differ")
    if position != len(body):
        raise ValueError(f"{len(body) - position} bytes after the batch's {count} records")
    return keys, values, timestamps, headers if any_headers else None


def _bytes(buffer: bytes, position: int) -> tuple[bytes | None, int]:
    size, position = _varint(buffer, position)
    if size < 0:
        return None, position
    end = position + size
    if end > len(buffer):
        raise ValueError("a field runs past the batch")
    return buffer[position:end], end


def encode_fetched(answer: FetchResponse, fetch_offset: int, meta: TopicMetadata) -> bytes:
    """The Kafka record batches (v2, uncompressed) of a replica's fetch answer.

    Every stored batch becomes one Kafka batch with its offsets, leader epoch, producer
    id, epoch, sequence and transactional flag. When the replica examined batches past
    the last one it sent (markers, aborted batches it leaves out), a control batch
    covering them ends the answer, so the client's next fetch starts after them.
    """
    out = bytearray()
    end = fetch_offset
    typed = meta.value_schema is not None
    for run in answer.data:
        for item in stored_batches(pa.py_buffer(run)):
            header = item.header
            end = max(end, header.next_offset)
            if header.is_control:
                continue
            _, batch = _DECODER.decode_at(
                item.buffer, item.position + HEADER_SIZE, item.position + header.size
            )
            offsets = batch_offsets(header, batch)
            out += _kafka_batch(header, user_columns(header, batch), offsets, typed)
    if answer.next_offset > end:
        out += _marker_batch(end, answer.next_offset)
    return bytes(out)


def _kafka_batch(header: Any, batch: pa.RecordBatch, offsets: np.ndarray, typed: bool) -> bytes:
    keys = batch.column("key").to_pylist()
    if typed:
        values = [
            None if v is None else json.dumps(v, default=str).encode()
            for v in batch.column("value").to_pylist()
        ]
    else:
        values = batch.column("value").to_pylist()
    timestamps = batch.column("timestamp").to_numpy(zero_copy_only=False).astype(np.int64)
    headers = batch.column("headers").to_pylist()
    base_offset = header.base_offset
    base_ts = int(timestamps[0]) if len(timestamps) else header.base_timestamp
    body = bytearray()
    for i in range(batch.num_rows):
        record = bytearray(b"\x00")
        record += _zigzag(int(timestamps[i]) - base_ts)
        record += _zigzag(int(offsets[i]) - base_offset)
        _put_bytes(record, keys[i])
        _put_bytes(record, values[i])
        pairs = headers[i] or ()
        record += _zigzag(len(pairs))
        for pair in pairs:
            _put_bytes(record, pair["key"].encode())
            _put_bytes(record, pair["value"])
        body += _zigzag(len(record))
        body += record
    max_ts = int(timestamps.max()) if len(timestamps) else header.max_timestamp
    attributes = header.attributes & (ATTR_TRANSACTIONAL | ATTR_LOG_APPEND_TIME)
    return _seal(
        base_offset,
        header.partition_leader_epoch,
        attributes,
        header.last_offset_delta,
        base_ts,
        max_ts,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        batch.num_rows,
        bytes(body),
    )


def _marker_batch(start: int, end: int) -> bytes:
    """A control batch (a commit marker) spanning ``[start, end)``: what clients skip."""
    record = bytearray(b"\x00\x00\x00")  # attributes, timestamp delta, offset delta
    _put_bytes(record, _COMMIT_MARKER_KEY)
    _put_bytes(record, _MARKER_VALUE)
    record += b"\x00"  # no headers
    body = _zigzag(len(record)) + bytes(record)
    return _seal(
        start, -1, _KAFKA_CONTROL | _KAFKA_TRANSACTIONAL, end - 1 - start, 0, 0, -1, -1, -1, 1, body
    )


def _seal(
    base_offset: int,
    leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_ts: int,
    max_ts: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    count: int,
    body: bytes,
) -> bytes:
    head = bytearray(
        _KAFKA_BATCH.pack(
            base_offset,
            _KAFKA_BATCH.size - _KAFKA_LENGTH_START + len(body),
            leader_epoch,
            2,
            0,
            attributes,
            last_offset_delta,
            base_ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
    )
    crc = crc32c.crc32c(body, crc32c.crc32c(head[_KAFKA_CRC_START:]))
    struct.pack_into(">I", head, 17, crc)
    return bytes(head) + body


def _zigzag(value: int) -> bytes:
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _put_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        out += b"\x01"  # zigzag(-1)
        return
    out += _zigzag(len(value))
    out += value
