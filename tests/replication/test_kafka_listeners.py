"""Kafka listeners on a multi-node Ray: one per node, leaders advertised where they run,
and an idempotent acks=all Kafka producer losing and duplicating nothing when a leader
is killed mid-stream."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import ray

import raystream as rs
from raystream.types import TopicPartition

TOPIC = "kafka-failover"


@pytest.fixture(scope="module")
def kafka_replicated(ray_nodes: Any, tmp_path_factory) -> Iterator[rs.Cluster]:
    """A raystream cluster on the 3-node Ray with a listener on every node."""
    alive = sum(1 for n in ray.nodes() if n["Alive"])
    for _ in range(3 - alive):
        ray_nodes.add_node(num_cpus=2, object_store_memory=150 * 2**20)
    ray_nodes.wait_for_nodes()
    cluster = rs.connect(
        namespace="kafka-replicated",
        data_dir=str(tmp_path_factory.mktemp("kafka-replicated")),
        broker_config={
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "replica.lag.time.max.ms": 2000,
        },
    )
    yield cluster
    with contextlib.suppress(Exception):
        cluster.shutdown()


def _listeners(cluster: rs.Cluster, wait_until: Any) -> dict[str, dict[str, Any]]:
    """The registered listener of each live node, once every node has one."""
    nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}

    def registered() -> dict[str, dict[str, Any]] | None:
        found = {e["node"]: e for e in cluster.status()["kafka_listeners"]}
        return found if set(found) == nodes else None

    return wait_until(registered, 60, "a Kafka listener on every node")


def test_each_node_has_a_listener_and_leaders_are_advertised_on_their_node(
    kafka_replicated: rs.Cluster, wait_until: Any
) -> None:
    from confluent_kafka.admin import AdminClient

    listeners = _listeners(kafka_replicated, wait_until)
    assert len({e["broker_id"] for e in listeners.values()}) == 3
    kafka_replicated.admin().create_topic("spread", partitions=3, replication_factor=3)
    bootstrap = kafka_replicated.bootstrap_servers()
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics("spread", timeout=30)
    assert {b.id for b in metadata.brokers.values()} == {e["broker_id"] for e in listeners.values()}
    description = kafka_replicated.admin().describe_topic("spread")
    for p in description.partitions:
        leader_node = p.nodes[p.leader]
        kafka_partition = metadata.topics["spread"].partitions[p.partition]
        assert kafka_partition.leader == listeners[leader_node]["broker_id"]
        assert sorted(kafka_partition.replicas) == sorted(
            listeners[n]["broker_id"] for n in p.nodes.values()
        )


def test_an_idempotent_kafka_producer_survives_a_leader_kill(
    kafka_replicated: rs.Cluster, chaos: Any, wait_until: Any
) -> None:
    from confluent_kafka import Producer

    _listeners(kafka_replicated, wait_until)
    admin = kafka_replicated.admin()
    admin.create_topic(TOPIC, partitions=1, replication_factor=3, config={"min.insync.replicas": 2})
    producer = Producer(
        {
            "bootstrap.servers": kafka_replicated.bootstrap_servers(),
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 120_000,
        }
    )
    total = 20_000
    delivered: list[int] = []
    failures: list[str] = []

    def report(error: Any, message: Any) -> None:
        if error is None:
            delivered.append(int(message.value()))
        else:
            failures.append(str(error))

    half = threading.Event()

    def produce() -> None:
        for i in range(total):
            while True:
                try:
                    producer.produce(TOPIC, str(i).encode(), on_delivery=report)
                    break
                except BufferError:
                    producer.poll(0.05)
            if i == total // 2:
                half.set()
            if i % 500 == 0:
                producer.poll(0)
        producer.flush(120)

    writer = threading.Thread(target=produce)
    writer.start()
    assert half.wait(120)
    leader = admin.describe_topic(TOPIC).partitions[0].leader
    chaos.kill_actor(
        ray.get_actor(f"replica:{TOPIC}:0:{leader}", namespace=kafka_replicated.namespace),
        f"the leader replica {leader}",
    )
    writer.join(300)
    assert not writer.is_alive()
    chaos.verify()
    assert not failures, failures[:5]
    assert sorted(delivered) == list(range(total))

    consumer = kafka_replicated.consumer(auto_offset_reset="earliest")
    consumer.assign([TopicPartition(TOPIC, 0)])
    values: list[int] = []
    while len(values) < total:
        batch = consumer.poll(timeout_ms=10_000)
        assert batch, f"only {len(values)} of {total} records read back"
        values += [int(r.value) for records in batch.values() for r in records]
    consumer.close()
    assert values == list(range(total)), "lost, duplicated or reordered records"
