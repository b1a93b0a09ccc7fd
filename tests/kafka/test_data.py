"""Produce, Fetch, ListOffsets, OffsetForLeaderEpoch and DeleteRecords through the
listener, with unmodified Kafka clients (confluent-kafka, kafka-python, aiokafka) and
raystream's own clients on the other side."""

from __future__ import annotations

import asyncio
import struct
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from wire_helpers import call, calls

from raystream.types import TopicPartition

# --------------------------------------------------------------------- helpers

BASE_TS = 1_700_000_000_000


def _records(partitions: int) -> list[tuple[int, bytes | None, bytes | None, list, int]]:
    """(partition, key, value, headers, timestamp) of the records every client writes:
    keys, no key, headers, a null value (tombstone), on every partition."""
    out = []
    for i in range(12):
        key = None if i % 5 == 4 else f"k{i}".encode()
        value = None if i % 6 == 5 else f"value-{i}".encode() * (1 + i % 3)
        headers = [("h", f"{i}".encode()), ("empty", b"")] if i % 2 else []
        out.append((i % partitions, key, value, headers, BASE_TS + i * 7))
    return out


def _confluent_consume(bootstrap: str, topic: str, partitions: int, count: int, **config):
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KTP

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",  # required by librdkafka; assign() never joins it
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            **config,
        }
    )
    consumer.assign([KTP(topic, p, 0) for p in range(partitions)])
    got = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            got.append(
                (
                    message.partition(),
                    message.offset(),
                    message.key(),
                    message.value(),
                    list(message.headers() or []),
                    message.timestamp()[1],
                )
            )
    finally:
        consumer.close()
    return sorted(got, key=lambda r: (r[0], r[1]))


def _kafka_python_consume(bootstrap: str, topic: str, partitions: int, count: int, **config):
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, fetch_max_wait_ms=100, **config
    )
    consumer.assign([KTP(topic, p) for p in range(partitions)])
    for p in range(partitions):
        consumer.seek(KTP(topic, p), 0)
    got = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend(
                    (r.partition, r.offset, r.key, r.value, list(r.headers), r.timestamp)
                    for r in records
                )
    finally:
        consumer.close()
    return sorted(got, key=lambda r: (r[0], r[1]))


def _aiokafka_consume(bootstrap: str, topic: str, partitions: int, count: int):
    async def run() -> list:
        from aiokafka import AIOKafkaConsumer
        from aiokafka import TopicPartition as KTP

        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=100)
        await consumer.start()
        try:
            consumer.assign([KTP(topic, p) for p in range(partitions)])
            for p in range(partitions):
                consumer.seek(KTP(topic, p), 0)
            got = []
            deadline = time.monotonic() + 30
            while len(got) < count and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    got.extend(
                        (r.partition, r.offset, r.key, r.value, list(r.headers), r.timestamp)
                        for r in records
                    )
            return got
        finally:
            await consumer.stop()

    return sorted(asyncio.run(run()), key=lambda r: (r[0], r[1]))


def _expected(records: list, partitions: int) -> list:
    """What consumers read back: offsets counted per partition in produce order."""
    next_offset = [0] * partitions
    out = []
    for partition, key, value, headers, ts in records:
        out.append((partition, next_offset[partition], key, value, headers, ts))
        next_offset[partition] += 1
    return sorted(out, key=lambda r: (r[0], r[1]))


# --------------------------------------------------------- raw protocol helpers


def _fetch(
    bootstrap: str, topic: str, offset: int, max_wait_ms: int, partitions: int = 1, **extra
) -> Any:
    """A Fetch v12 (names, not ids) of partitions 0.. from ``offset``: partition 0's answer
    (every partition's, in order, when there are several)."""
    values = {
        "replica_id": -1,
        "max_wait": max_wait_ms,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": extra.pop("isolation_level", 0),
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {"partition": p, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
                    for p in range(partitions)
                ],
            }
        ],
        **extra,
    }
    answers = call(bootstrap, 1, 12, values).responses[0].partitions
    return answers[0] if partitions == 1 else answers


# ----------------------------------------------------------------------- tests


def test_confluent_producer_records_read_back_by_three_clients(
    bootstrap: str, kafka_topic: Callable[..., str]
) -> None:
    from confluent_kafka import Producer

    topic = kafka_topic(partitions=2)
    records = _records(2)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    errors: list = []
    for partition, key, value, headers, ts in records:
        producer.produce(
            topic,
            value=value,
            key=key,
            partition=partition,
            headers=headers or None,
            timestamp=ts,
            on_delivery=lambda e, m: errors.append(e) if e else None,
        )
    assert producer.flush(30) == 0
    assert errors == []

    expected = _expected(records, 2)
    assert _confluent_consume(bootstrap, topic, 2, len(records)) == expected
    assert _kafka_python_consume(bootstrap, topic, 2, len(records)) == expected
    assert _aiokafka_consume(bootstrap, topic, 2, len(records)) == expected


def test_kafka_python_acks_0_and_aiokafka_producers_read_back(
    bootstrap: str, kafka_topic: Callable[..., str]
) -> None:
    from kafka import KafkaProducer

    records = _records(2)
    topic = kafka_topic(partitions=2)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=0)
    for partition, key, value, headers, ts in records:
        producer.send(
            topic, value=value, key=key, partition=partition, headers=headers, timestamp_ms=ts
        )
    producer.flush(30)
    producer.close()
    expected = _expected(records, 2)
    assert _confluent_consume(bootstrap, topic, 2, len(records)) == expected

    topic = kafka_topic(partitions=2)

    async def aiokafka_produce() -> None:
        from aiokafka import AIOKafkaProducer

        client = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1)
        await client.start()
        try:
            for partition, key, value, headers, ts in records:
                await client.send_and_wait(
                    topic,
                    value=value,
                    key=key,
                    partition=partition,
                    headers=headers,
                    timestamp_ms=ts,
                )
        finally:
            await client.stop()

    asyncio.run(aiokafka_produce())
    assert _kafka_python_consume(bootstrap, topic, 2, len(records)) == expected


def test_raystream_clients_and_kafka_clients_read_each_other(
    kafka_cluster: Any, bootstrap: str, kafka_topic: Callable[..., str]
) -> None:
    from confluent_kafka import Producer

    topic = kafka_topic(partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": "gzip"})
    for i in range(20):
        producer.produce(topic, value=f"v{i}".encode(), key=b"k", headers=[("n", b"%d" % i)])
    assert producer.flush(30) == 0
    consumer = kafka_cluster.consumer(auto_offset_reset="earliest")
    try:
        consumer.assign([TopicPartition(topic, 0)])
        got: list = []
        deadline = time.monotonic() + 30
        while len(got) < 20 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend(records)
    finally:
        consumer.close()
    assert [(r.offset, r.key, r.value) for r in got] == [
        (i, b"k", f"v{i}".encode()) for i in range(20)
    ]
    assert [list(r.headers) for r in got] == [[("n", b"%d" % i)] for i in range(20)]

    topic = kafka_topic(partitions=1)
    ours = kafka_cluster.producer()
    for i in range(20):
        ours.send(topic, value=f"r{i}".encode(), headers=[("x", b"y")], timestamp_ms=BASE_TS + i)
    ours.flush(30)
    ours.close()
    assert _confluent_consume(bootstrap, topic, 1, 20) == [
        (0, i, None, f"r{i}".encode(), [("x", b"y")], BASE_TS + i) for i in range(20)
    ]


def test_idempotent_confluent_producer_writes_each_record_once(
    bootstrap: str, kafka_topic: Callable[..., str]
) -> None:
    from confluent_kafka import Producer

    topic = kafka_topic(partitions=3)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 2,
            "batch.num.messages": 50,
        }
    )
    for i in range(600):
        producer.produce(topic, value=b"%d" % i, partition=i % 3)
        if i % 100 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    got = _confluent_consume(bootstrap, topic, 3, 600)
    assert sorted(int(r[3]) for r in got) == list(range(600))
    for p in range(3):  # dense offsets per partition, in produce order
        mine = [r for r in got if r[0] == p]
        assert [r[1] for r in mine] == list(range(200))
        assert [int(r[3]) for r in mine] == list(range(p, 600, 3))


def test_fetch_long_polls_until_max_wait_and_wakes_when_data_arrives(
    bootstrap: str, kafka_cluster: Any, kafka_topic: Callable[..., str]
) -> None:
    topic = kafka_topic(partitions=2)
    started = time.monotonic()
    idle = _fetch(bootstrap, topic, 0, max_wait_ms=800, partitions=2)
    waited = time.monotonic() - started
    assert [(p.error_code, p.records) for p in idle] == [(0, b""), (0, b"")]
    assert 0.75 <= waited < 3.0

    def later() -> None:
        time.sleep(0.4)
        producer = kafka_cluster.producer()
        producer.send(topic, value=b"wake", partition=1)
        producer.flush(30)
        producer.close()

    thread = threading.Thread(target=later)
    started = time.monotonic()
    thread.start()
    quiet, woken = _fetch(bootstrap, topic, 0, max_wait_ms=10_000, partitions=2)
    waited = time.monotonic() - started
    thread.join()
    assert woken.error_code == 0 and b"wake" in bytes(woken.records)
    assert woken.high_watermark == 1
    assert (quiet.error_code, quiet.records, quiet.high_watermark) == (0, b"", 0)
    assert 0.3 <= waited < 5.0


def test_fetch_past_the_log_end_is_offset_out_of_range(
    bootstrap: str, kafka_topic: Callable[..., str]
) -> None:
    from kio.schema.errors import ErrorCode

    topic = kafka_topic(partitions=1)
    answer = _fetch(bootstrap, topic, 1000, max_wait_ms=0)
    assert answer.error_code == ErrorCode.offset_out_of_range
    missing = call(
        bootstrap,
        1,
        12,
        {
            "max_wait": 0,
            "min_bytes": 1,
            "topics": [
                {
                    "topic": f"{topic}-missing",
                    "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1}],
                }
            ],
        },
    )
    assert missing.responses[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition

    # Fetch v13+ names topics by id: the id Metadata gives, and an unknown one.
    (described,) = call(
        bootstrap, 3, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False}
    ).topics
    unknown = uuid.uuid4()
    by_id = call(
        bootstrap,
        1,
        16,
        {
            "max_wait": 0,
            "min_bytes": 1,
            "topics": [
                {
                    "topic_id": topic_id,
                    "partitions": [
                        {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
                    ],
                }
                for topic_id, offset in ((described.topic_id, 1000), (unknown, 0))
            ],
        },
    )
    assert [(t.topic_id, t.partitions[0].error_code) for t in by_id.responses] == [
        (described.topic_id, ErrorCode.offset_out_of_range),
        (unknown, ErrorCode.unknown_topic_id),
    ]


def test_list_offsets_earliest_latest_and_by_timestamp_then_delete_records(
    bootstrap: str, kafka_topic: Callable[..., str]
) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as KTP
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaConsumer
    from kafka import TopicPartition as PTP

    topic = kafka_topic(partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(10):
        producer.produce(topic, value=b"%d" % i, partition=0, timestamp=BASE_TS + 100 * i)
        producer.flush(30)  # one batch each, so a timestamp finds its own record
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        assert consumer.get_watermark_offsets(KTP(topic, 0), timeout=30) == (0, 10)
        (found,) = consumer.offsets_for_times([KTP(topic, 0, BASE_TS + 450)], timeout=30)
        assert found.offset == 5
        (beyond,) = consumer.offsets_for_times([KTP(topic, 0, BASE_TS + 10_000)], timeout=30)
        assert beyond.offset == -1  # librdkafka's OFFSET_END: no record that new

        admin = AdminClient({"bootstrap.servers": bootstrap})
        (future,) = admin.delete_records([KTP(topic, 0, 4)]).values()
        assert future.result(30).low_watermark == 4
        assert consumer.get_watermark_offsets(KTP(topic, 0), timeout=30) == (4, 10)
    finally:
        consumer.close()

    python = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    try:
        tp = PTP(topic, 0)
        assert python.beginning_offsets([tp]) == {tp: 4}
        assert python.end_offsets([tp]) == {tp: 10}
        assert python.offsets_for_times({tp: BASE_TS + 650})[tp].offset == 7
    finally:
        python.close()
    assert _fetch(bootstrap, topic, 2, max_wait_ms=0).error_code == 1  # below log start


def test_offset_for_leader_epoch_answers_the_leader_s_epoch_end(
    bootstrap: str, kafka_cluster: Any, kafka_topic: Callable[..., str]
) -> None:
    topic = kafka_topic(partitions=1)
    producer = kafka_cluster.producer()
    for _ in range(3):
        producer.send(topic, value=b"x", partition=0)
    producer.flush(30)
    producer.close()
    answer = call(
        bootstrap,
        23,
        4,
        {
            "replica_id": -1,
            "topics": [
                {"topic": topic, "partitions": [{"partition": 0, "leader_epoch": 2**31 - 1}]}
            ],
        },
    )
    (partition,) = answer.topics[0].partitions
    assert partition.error_code == 0
    assert partition.leader_epoch >= 0 and partition.end_offset == 3


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_kafka_consumers_skip_transaction_markers_and_aborted_batches(
    kafka_cluster: Any, bootstrap: str, kafka_topic: Callable[..., str], isolation: str
) -> None:
    topic = kafka_topic(partitions=1)
    producer = kafka_cluster.producer(transactional_id=f"tx-{topic}")
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(topic, value=b"committed-1", partition=0)
    producer.commit_transaction()
    producer.begin_transaction()
    producer.send(topic, value=b"aborted", partition=0)
    producer.abort_transaction()
    producer.begin_transaction()
    producer.send(topic, value=b"committed-2", partition=0)
    producer.commit_transaction()
    producer.close()
    wanted = [b"committed-1", b"committed-2"]
    if isolation == "read_uncommitted":
        wanted = [b"committed-1", b"aborted", b"committed-2"]
    got = _confluent_consume(bootstrap, topic, 1, len(wanted), **{"isolation.level": isolation})
    assert [r[3] for r in got] == wanted
    got = _kafka_python_consume(bootstrap, topic, 1, len(wanted), isolation_level=isolation)
    assert [r[3] for r in got] == wanted


def test_a_resent_idempotent_batch_is_written_once_and_a_gap_is_refused(
    bootstrap: str, kafka_topic: Callable[..., str]
) -> None:
    """The batch's producer id, epoch and sequence reach the replica: the same batch sent
    twice (a producer's retry) is answered with its first offset and stored once."""
    import datetime
    import io

    from kio.records.schema import NewRecordBatch, Record
    from kio.records.writers import write_new_batch
    from kio.schema.errors import ErrorCode
    from kio.static.primitive import TZAwareMicros

    topic = kafka_topic(partitions=1)
    ids = call(bootstrap, 22, 4, {"transactional_id": None, "transaction_timeout": 60_000})
    assert ids.error_code == 0 and ids.producer_id >= 0

    def batch(sequence: int, count: int) -> bytes:
        now = TZAwareMicros.parse(datetime.datetime.fromtimestamp(BASE_TS / 1000, datetime.UTC))
        records = tuple(
            Record(attributes=0, timestamp=now, offset=i, key=None, value=b"v%d" % i, headers=())
            for i in range(count)
        )
        buffer = io.BytesIO()
        write_new_batch(
            buffer,
            NewRecordBatch(
                producer_id=ids.producer_id,
                producer_epoch=ids.producer_epoch,
                base_sequence=sequence,
                records=records,
                attributes=0,
            ),
        )
        return buffer.getvalue()

    def produce(data: bytes) -> Any:
        answer = call(
            bootstrap,
            0,
            9,
            {
                "acks": -1,
                "timeout": 10_000,
                "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": data}]}],
            },
        )
        return answer.responses[0].partition_responses[0]

    first = produce(batch(0, 3))
    again = produce(batch(0, 3))
    assert (first.error_code, first.base_offset) == (ErrorCode.none, 0)
    assert (again.error_code, again.base_offset) == (ErrorCode.none, 0)
    gap = produce(batch(10, 1))
    assert gap.error_code == ErrorCode.out_of_order_sequence_number
    assert _fetch(bootstrap, topic, 0, max_wait_ms=0).high_watermark == 3


def test_a_typed_topic_takes_and_gives_json_and_refuses_a_misfit(
    kafka_cluster: Any, bootstrap: str, kafka_topic: Callable[..., str]
) -> None:
    import json

    import pyarrow as pa
    from confluent_kafka import KafkaError, Producer

    topic = kafka_topic(schema=pa.schema([("name", pa.string()), ("n", pa.int64())]))
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "retries": 0})
    outcomes: list = []
    producer.produce(topic, json.dumps({"name": "a", "n": 1}).encode(), key=b"k", partition=0)
    producer.flush(30)
    producer.produce(
        topic,
        b'{"name": "b", "n": "not a number"}',
        partition=0,
        on_delivery=lambda e, m: outcomes.append(e),
    )
    producer.flush(30)
    assert outcomes[0] is not None and outcomes[0].code() == KafkaError.INVALID_RECORD
    ours = kafka_cluster.consumer(auto_offset_reset="earliest")
    try:
        ours.assign([TopicPartition(topic, 0)])
        table = ours.poll_arrow(timeout_ms=10_000)
    finally:
        ours.close()
    assert table.select(["name", "n"]).to_pylist() == [{"name": "a", "n": 1}]
    ((_, _, key, value, _, _),) = _confluent_consume(bootstrap, topic, 1, 1)
    assert (key, json.loads(value)) == (b"k", {"name": "a", "n": 1})


def _kio_batch(values: list[bytes], producer: tuple[int, int, int] = (-1, -1, -1)) -> bytes:
    """A Kafka record batch of ``values`` (no keys) by kio, of ``producer`` (id, epoch,
    base sequence; -1s: none)."""
    import datetime
    import io

    from kio.records.schema import NewRecordBatch, Record
    from kio.records.writers import write_new_batch
    from kio.static.primitive import TZAwareMicros

    now = TZAwareMicros.parse(datetime.datetime.fromtimestamp(BASE_TS / 1000, datetime.UTC))
    records = tuple(
        Record(attributes=0, timestamp=now, offset=i, key=None, value=v, headers=())
        for i, v in enumerate(values)
    )
    buffer = io.BytesIO()
    batch = NewRecordBatch(
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        records=records,
        attributes=0,
    )
    write_new_batch(buffer, batch)
    return buffer.getvalue()


def test_pipelined_produce_requests_are_coalesced_and_answered_each_in_order(
    bootstrap: str, kafka_topic: Callable[..., str]
) -> None:
    """Small produce requests pipelined on one connection (librdkafka at a steady rate):
    the listener appends those waiting for the partition as ONE batch, yet answers each
    with its own base offset, in order. An idempotent producer's batches among them
    keep their own sequences (a resent one is answered with its first offset and stored
    once); a corrupt batch is refused alone."""
    topic = kafka_topic(partitions=1)
    ids = call(bootstrap, 22, 4, {"transactional_id": None, "transaction_timeout": 60_000})
    producer = (ids.producer_id, ids.producer_epoch)
    payloads, expected, stored = [], [], []  # expected: base offset or error code
    sequence, next_offset, idempotent_at = 0, 0, {}
    for i in range(60):
        values = [b"r%d-%d" % (i, j) for j in range(1 + i % 2)]
        if i == 30:
            data = bytearray(_kio_batch(values))
            data[-1] ^= 0xFF  # breaks its CRC
            payloads.append(bytes(data))
            expected.append("corrupt")
            continue
        if i == 47:  # a resend of request 37's idempotent batch
            payloads.append(payloads[37])
            expected.append(idempotent_at[37])
            continue
        if i % 10 == 7:
            payloads.append(_kio_batch(values, (*producer, sequence)))
            sequence += len(values)
            idempotent_at[i] = next_offset
        else:
            payloads.append(_kio_batch(values))
        expected.append(next_offset)
        next_offset += len(values)
        stored += values
    answers = calls(
        bootstrap,
        0,
        9,
        [
            {
                "acks": -1,
                "timeout": 10_000,
                "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": p}]}],
            }
            for p in payloads
        ],
    )
    got = []
    for answer in answers:
        entry = answer.responses[0].partition_responses[0]
        got.append("corrupt" if entry.error_code == 2 else (entry.error_code, entry.base_offset))
    assert got == [e if e == "corrupt" else (0, e) for e in expected]
    assert [r[3] for r in _confluent_consume(bootstrap, topic, 1, len(stored))] == stored
    records = _fetch(bootstrap, topic, 0, max_wait_ms=0).records
    batches, position = 0, 0
    while position < len(records):
        position += 12 + struct.unpack_from(">i", records, position + 8)[0]
        batches += 1
    assert batches < 58  # coalesced: fewer stored batches than accepted requests


def _produce_queues(cluster: Any) -> int:
    """How many partitions the cluster's Kafka listener has produce batches out for."""
    import ray

    from raystream.kafka.listeners import listener_actor_name

    (entry,) = cluster.call("kafka_listeners")
    actor = ray.get_actor(listener_actor_name(entry["node"]), namespace=cluster.namespace)
    return ray.get(actor.describe.remote(), timeout=30)["produce_queues"]


def test_a_partitions_produce_queue_lives_while_batches_are_out_and_comes_back_on_demand(
    kafka_cluster: Any,
    bootstrap: str,
    kafka_topic: Callable[..., str],
    chaos: Any,
    wait_until: Callable[..., Any],
) -> None:
    """The listener keeps a produce queue per partition only while batches are on their
    way: after a burst over many partitions none is left; one whose leader holds a batch
    (a stopped process) stays until the answer comes; producing again to every
    partition works, each record stored once, in order."""
    import os
    import signal

    import ray
    from confluent_kafka import Producer

    partitions = 8
    topic = kafka_topic(partitions=partitions)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
    failures: list[Any] = []

    def produce(value: bytes, partition: int) -> None:
        producer.produce(
            topic, value, partition=partition, on_delivery=lambda e, _m: e and failures.append(e)
        )

    for i in range(10):
        for p in range(partitions):
            produce(b"burst-%d" % i, p)
    assert producer.flush(60) == 0 and not failures
    wait_until(lambda: _produce_queues(kafka_cluster) == 0, 10, "every produce queue dropped")

    leader = kafka_cluster.admin().describe_topic(topic).partitions[3].leader
    handle = ray.get_actor(f"replica:{topic}:3:{leader}", namespace=kafka_cluster.namespace)
    pid = chaos.actor_info(handle)["Pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        produce(b"held", 3)
        producer.poll(0)
        wait_until(lambda: _produce_queues(kafka_cluster) == 1, 30, "partition 3's queue held")
    finally:
        os.kill(pid, signal.SIGCONT)
    assert producer.flush(60) == 0 and not failures
    wait_until(lambda: _produce_queues(kafka_cluster) == 0, 10, "the held queue dropped")

    for p in range(partitions):
        produce(b"again", p)
    assert producer.flush(60) == 0 and not failures
    got = _confluent_consume(bootstrap, topic, partitions, 10 * partitions + 1 + partitions)
    for p in range(partitions):
        values = [r[3] for r in got if r[0] == p]
        burst = [b"burst-%d" % i for i in range(10)]
        assert values == burst + ([b"held"] if p == 3 else []) + [b"again"], p
