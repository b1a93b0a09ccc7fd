"""The listener itself: framing, versions, Metadata, and surviving hostile bytes."""

from __future__ import annotations

import asyncio
import random
import struct
from collections.abc import Callable
from typing import Any

import pytest
from wire_helpers import KafkaSocket

from raystream.errors import IllegalStateError
from raystream.kafka.apis import APIS
from raystream.kafka.codec import build, decode_request, encode_response, response_schema


def test_metadata_names_the_listener_and_the_leaders_for_three_clients(
    bootstrap: str, kafka_topic: Callable[..., str]
) -> None:
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaConsumer

    topic = kafka_topic(partitions=3)
    host, port = bootstrap.split(",")[0].rsplit(":", 1)

    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30)
    (broker,) = metadata.brokers.values()
    assert (broker.host, broker.port) == (host, int(port))
    assert sorted(metadata.topics[topic].partitions) == [0, 1, 2]
    assert {p.leader for p in metadata.topics[topic].partitions.values()} == {broker.id}

    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        assert consumer.partitions_for_topic(topic) == {0, 1, 2}
    finally:
        consumer.close()

    async def aiokafka_partitions() -> set[int]:
        from aiokafka import AIOKafkaProducer

        client = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await client.start()
        try:
            return await client.partitions_for(topic)
        finally:
            await client.stop()

    assert asyncio.run(aiokafka_partitions()) == {0, 1, 2}


def test_api_versions_lists_the_table_and_unknown_versions_are_answered(bootstrap: str) -> None:
    with KafkaSocket(bootstrap, timeout_s=10) as conn:
        # ApiVersions v0: the supported table.
        answer = conn.raw(18, 0, b"")
        correlation, error, count = struct.unpack_from(">ihi", answer)
        assert (correlation, error, count) == (7, 0, len(APIS))
        # A version past the table: UNSUPPORTED_VERSION in v0 with the table; the
        # connection stays open.
        answer = conn.raw(18, 99, b"")
        assert struct.unpack_from(">ih", answer) == (7, 35)
        # An API the listener does not serve (ElectLeaders v1 has a top-level error).
        answer = conn.raw(43, 1, b"")
        assert struct.unpack_from(">iih", answer)[2] == 35
        assert conn.raw(18, 0, b"")[:4] == struct.pack(">i", 7)


def test_hostile_bytes_close_that_connection_only(bootstrap: str) -> None:
    rng = random.Random(19)
    bad_frames = [
        struct.pack(">i", -5),  # negative size
        struct.pack(">i", 1 << 30),  # far past the largest frame
        struct.pack(">i", 3) + b"abc",  # shorter than a header
    ]
    for _ in range(40):  # a real API key and version, then garbage
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 64)))
        frame = struct.pack(">hhih", 3, rng.choice([0, 5, 12]), 1, 1) + b"x" + body
        bad_frames.append(struct.pack(">i", len(frame)) + frame)
    for frame in bad_frames:
        with KafkaSocket(bootstrap, timeout_s=10) as conn:
            conn.sock.sendall(frame)
            try:
                while conn.sock.recv(65536):
                    pass
            except (ConnectionError, TimeoutError):
                pass
    # The listener still answers.
    with KafkaSocket(bootstrap, timeout_s=10) as conn:
        assert struct.unpack_from(">ih", conn.raw(18, 0, b"")) == (7, 0)


def test_a_cluster_without_listeners_says_so(shared_cluster: Any) -> None:
    with pytest.raises(IllegalStateError, match="no PLAINTEXT Kafka listener"):
        shared_cluster.bootstrap_servers()


def test_every_response_version_encodes_from_an_empty_answer() -> None:
    """The builder gives every field of every served version a value kio can write."""
    from raystream.kafka.codec import Header

    for api in APIS.values():
        for version in range(api.min_version, api.max_version + 1):
            header = Header(api.key, version, 1, None)
            frame = encode_response(header, build(response_schema(api.key, version), {}))
            assert struct.unpack_from(">ii", frame)[1] == 1


def test_decode_request_refuses_truncated_bodies() -> None:
    from raystream.errors import InvalidRequestError

    with pytest.raises(InvalidRequestError, match="MetadataRequest v12"):
        decode_request(struct.pack(">hhih", 3, 12, 1, 1) + b"x\x00\x05")


def test_pipelined_produce_requests_keep_their_order(
    bootstrap: str, kafka_topic: Callable[..., str], kafka_cluster: Any
) -> None:
    """librdkafka pipelines produce requests on one connection (linger.ms=0: one
    request per record, many in flight); the listener starts them as they come, and the
    records still land in the order sent."""
    from confluent_kafka import Producer

    from raystream.types import TopicPartition

    topic = kafka_topic(partitions=1)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 0, "enable.idempotence": False}
    )
    for i in range(500):
        producer.produce(topic, str(i).encode())
        producer.poll(0)
    assert producer.flush(60) == 0
    consumer = kafka_cluster.consumer(auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, 0)])
    values: list[int] = []
    while len(values) < 500:
        batch = consumer.poll(timeout_ms=10_000)
        assert batch, f"only {len(values)} of 500 records read back"
        values += [int(r.value) for records in batch.values() for r in records]
    consumer.close()
    assert values == list(range(500))
