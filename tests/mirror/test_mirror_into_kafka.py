"""MirrorMaker into a Kafka-protocol cluster (Tansu, started here), and both ways.

The module's raystream cluster is the source, aliased "ray"; the Tansu broker the
benchmarks use is the target, aliased "tansu", written through confluent-kafka and read
back with it as a Kafka user would. One broker and one flow ray->tansu (every topic)
for the whole module; the loop test adds tansu->ray, the CLI test a flow of its own.
"""

from __future__ import annotations

import argparse
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from benchmarks.peers import _tansu_binary, tansu_broker
from raystream.mirror import Heartbeat, MirrorMaker, OffsetSync
from raystream.types import TopicPartition
from tests.conftest import holds_for, wait_until
from tests.mirror.conftest import FAST, commit_part_of_payments, read_partitions

LAG_MAX = 10


@pytest.fixture(scope="module")
def bootstrap() -> Iterator[str]:
    with tansu_broker(_tansu_binary()) as address:
        yield address


@pytest.fixture(scope="module")
def flow(shared_cluster: Any, bootstrap: str) -> Iterator[MirrorMaker]:
    """ray -> tansu, every topic, group offsets synced into Tansu's groups."""
    mm = MirrorMaker(
        shared_cluster,
        source=shared_cluster,
        target={"bootstrap.servers": bootstrap},
        topics=".*",
        groups="billing",
        source_alias="ray",
        target_alias="tansu",
        config={**FAST, "offset.lag.max": str(LAG_MAX)},
    )
    mm.start()
    yield mm
    mm.stop()


def kafka_topics(bootstrap: str) -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics)


def kafka_read(bootstrap: str, topic: str, timeout_s: float = 60.0) -> dict[int, list[dict]]:
    """Every committed record of ``topic`` on the broker, per partition in offset order
    ({} while the topic does not exist)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer
    from confluent_kafka import TopicPartition as KafkaTP

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 10,
        }
    )
    try:
        found = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            return {}
        parts = sorted(found.partitions)
        ends = {p: consumer.get_watermark_offsets(KafkaTP(topic, p), 10)[1] for p in parts}
        consumer.assign([KafkaTP(topic, p, OFFSET_BEGINNING) for p in parts])
        out: dict[int, list[dict]] = {p: [] for p in parts}

        def behind() -> bool:
            done = consumer.position([KafkaTP(topic, p) for p in parts])
            return any(ends[tp.partition] > max(tp.offset, 0) for tp in done)

        wait_until(lambda: not behind() or consumer_drain(consumer, out), timeout_s, "reading")
        return out
    finally:
        consumer.close()


def consumer_drain(consumer: Any, out: dict[int, list[dict]]) -> bool:
    """One consume round into ``out``; always False (the caller's wait goes on)."""
    for message in consumer.consume(10_000, 0.2):
        assert message.error() is None, message.error()
        out[message.partition()].append(
            {
                "offset": message.offset(),
                "key": message.key(),
                "value": message.value(),
                "timestamp": message.timestamp()[1],
                "headers": [{"key": k, "value": v} for k, v in message.headers() or []],
            }
        )
    return False


def count(bootstrap: str, topic: str) -> int:
    return sum(len(rows) for rows in kafka_read(bootstrap, topic).values())


def test_every_record_arrives_once_in_partition_order_with_its_key_headers_and_time(
    shared_cluster: Any, bootstrap: str, flow: MirrorMaker
) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource

    shared_cluster.admin().create_topic("orders", partitions=2, config={"retention.ms": "3600000"})
    with shared_cluster.producer() as producer:
        for i in range(600):
            producer.send(
                "orders",
                value=f"v{i}".encode(),
                key=f"k{i % 7}".encode(),
                headers=[("h", str(i).encode())] if i % 3 else None,
                timestamp_ms=1_700_000_000_000 + i,
            )
    wait_until(lambda: count(bootstrap, "ray.orders") >= 600, 60, "ray.orders mirrored")
    want = read_partitions(shared_cluster, "orders")
    got = kafka_read(bootstrap, "ray.orders")
    assert sorted(got) == [0, 1]
    fields = ("key", "value", "headers", "timestamp")
    for partition, rows in want.items():
        assert [tuple(r[c] or None for c in fields) for r in got[partition]] == [
            tuple(r[c] or None for c in fields) for r in rows
        ], f"partition {partition} differs"
    resource = ConfigResource(ConfigResource.Type.TOPIC, "ray.orders")
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: its futures need it
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["retention.ms"].value == "3600000"

    def caught_up() -> bool:
        status = flow.status()
        assert status["state"] == "RUNNING", status
        lag = [v["lag"] for v in status["partitions"].values() if v["topic"] == "orders"]
        return lag == [0, 0]

    wait_until(caught_up, 30, "a lag of 0 on both partitions")
    # MirrorMaker 2's own records, in its binary layouts, on the Kafka target: the
    # latest offset sync of each partition pins its last record (sent by the task's
    # next commit), and the flow's heartbeats.
    ends = {TopicPartition("orders", p): rows[-1]["offset"] for p, rows in want.items()}

    def synced() -> bool:
        rows = kafka_read(bootstrap, "mm2-offset-syncs.ray.internal").get(0, [])
        syncs = [OffsetSync.decode(r["key"], r["value"]) for r in rows]
        return {s.tp: s.upstream for s in syncs if s.tp.topic == "orders"} == ends

    wait_until(synced, 30, "offset syncs up to the last records")
    beats = wait_until(lambda: kafka_read(bootstrap, "heartbeats").get(0), 30, "heartbeats")
    beat = Heartbeat.decode(beats[0]["key"], beats[0]["value"])
    assert (beat.source_alias, beat.target_alias) == ("ray", "tansu")


def test_a_new_matching_topic_is_picked_up_and_a_grown_one_follows_if_the_broker_can(
    shared_cluster: Any, bootstrap: str, flow: MirrorMaker
) -> None:
    """Growing a remote topic needs CreatePartitions, which Tansu 0.6 does not offer:
    then the partitions it has go on being mirrored and status says why the rest
    are not (on a broker that has it, the remote topic grows)."""
    admin = shared_cluster.admin()
    admin.create_topic("late", partitions=3)
    with shared_cluster.producer() as producer:
        producer.send("late", value=b"first", partition=2).get(30)
    wait_until(lambda: count(bootstrap, "ray.late") == 1, 30, "ray.late created and mirrored")
    got = kafka_read(bootstrap, "ray.late")
    assert sorted(got) == [0, 1, 2] and got[2][0]["value"] == b"first"
    admin.create_partitions("late", 4)
    with shared_cluster.producer() as producer:
        producer.send("late", value=b"grown", partition=3).get(30)
        producer.send("late", value=b"after", partition=0).get(30)

    def followed() -> str | bool:
        if len(kafka_read(bootstrap, "ray.late")) == 4:
            return "grown"
        return flow.status()["topic_errors"].get("late", False)

    outcome = wait_until(followed, 30, "ray.late grown, or the broker's refusal shown")
    if outcome == "grown":
        wait_until(lambda: count(bootstrap, "ray.late") == 3, 30, "both new records mirrored")
    else:
        assert "ray.late" in outcome and "CreatePartitions" in outcome, outcome
        wait_until(
            lambda: [r["value"] for r in kafka_read(bootstrap, "ray.late")[0]] == [b"after"],
            30,
            "partition 0 still mirrored",
        )
    assert flow.status()["state"] == "RUNNING"


def test_a_group_switched_to_the_kafka_target_resumes_at_the_translated_offset(
    shared_cluster: Any, bootstrap: str, flow: MirrorMaker
) -> None:
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    seen, committed = commit_part_of_payments(shared_cluster)
    wait_until(lambda: count(bootstrap, "ray.payments") >= 400, 60, "ray.payments mirrored")
    remote = {TopicPartition("ray.payments", tp.partition): o for tp, o in committed.items()}
    translated = wait_until(
        lambda: set(t := flow.translate_offsets("billing")) == set(remote) and t,
        30,
        "billing's offsets translated from the checkpoints on Tansu",
    )
    for tp, offset in remote.items():
        assert offset - LAG_MAX <= translated[tp] <= offset  # never past the commit
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def synced() -> dict[TopicPartition, int]:
        request = [ConsumerGroupTopicPartitions("billing")]
        found = admin.list_consumer_group_offsets(request)["billing"].result(10)
        return {
            TopicPartition(tp.topic, tp.partition): tp.offset
            for tp in found.topic_partitions
            if tp.offset >= 0
        }

    wait_until(lambda: synced() == translated, 30, "billing's offsets synced into Tansu")
    member = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "billing",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,  # Tansu holds a JoinGroup for half of it
            "fetch.wait.max.ms": 10,
        }
    )
    rest: list[bytes] = []
    try:
        member.subscribe(["ray.payments"])

        def read_rest() -> bool:
            for message in member.consume(1000, 0.5):
                assert message.error() is None, message.error()
                rest.append(message.value())
            return len(set(seen) | set(rest)) >= 400

        wait_until(read_rest, 60, "the group read the rest on Tansu")
    finally:
        member.close()
    assert set(seen) | set(rest) == {f"p{i}".encode() for i in range(400)}, "a record skipped"
    # MM2's translation may re-deliver, at most offset.lag.max records per partition.
    assert len(rest) - (400 - len(seen)) <= 2 * LAG_MAX, "re-read more than offset.lag.max"


def test_tansu_and_raystream_mirroring_each_other_do_not_loop(
    shared_cluster: Any, bootstrap: str, flow: MirrorMaker
) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    back = MirrorMaker(
        shared_cluster,
        source={"bootstrap.servers": bootstrap},
        topics=".*",
        groups="none",
        source_alias="tansu",
        target_alias="ray",
        config=FAST,
    )
    back.start()
    try:
        shared_cluster.admin().create_topic("ping", partitions=1)
        with shared_cluster.producer() as producer:
            producer.send("ping", value=b"from ray").get(30)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("pong", 1, 1)])["pong"].result(30)
        producer = Producer({"bootstrap.servers": bootstrap})
        producer.produce("pong", b"from tansu")
        assert producer.flush(30) == 0
        wait_until(lambda: count(bootstrap, "ray.ping") == 1, 30, "ping mirrored ray->tansu")
        wait_until(
            lambda: (
                "tansu.pong" in shared_cluster.admin().list_topics()
                and sum(len(r) for r in read_partitions(shared_cluster, "tansu.pong").values()) == 1
            ),
            30,
            "pong mirrored tansu->ray",
        )

        def no_loop() -> bool:
            topics = set(shared_cluster.admin().list_topics()) | kafka_topics(bootstrap)
            return not any(t.startswith(("ray.tansu.", "tansu.ray.")) for t in topics)

        holds_for(no_loop, 3.0, "no topic mirrored back home")
        assert "tansu.ray.ping" not in shared_cluster.admin().list_topics()
        assert back.status()["state"] == "RUNNING" and flow.status()["state"] == "RUNNING"
    finally:
        back.stop()


def test_the_cli_mirrors_into_a_kafka_alias_exactly_once_and_resumes_after_a_stop(
    shared_cluster: Any, bootstrap: str, flow: MirrorMaker, tmp_path, capsys
) -> None:
    """An MM2 file whose target alias is a Kafka cluster, with exactly-once: records and
    source offsets commit in Tansu's transactions; a restarted flow resumes from the
    offsets it stored there, so nothing arrives twice."""
    from raystream.cli import mirror as cli

    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers(dest="command"))
    file = tmp_path / "mm2.properties"
    file.write_text(
        "clusters = r, k\n"
        f"r.raystream.namespace = {shared_cluster.namespace}\n"
        f"k.bootstrap.servers = {bootstrap}\n"
        "r->k.enabled = true\n"
        "r->k.topics = events\n"
        "exactly.once.source.support = enabled\n"
        "emit.heartbeats.enabled = false\n"
        "emit.checkpoints.enabled = false\n"
    )
    start = parser.parse_args(["mirror", "--config", str(file), "--detach"])
    stop = parser.parse_args(["mirror", "stop", "r->k"])
    shared_cluster.admin().create_topic("events", partitions=1)

    def produce(first: int, last: int) -> None:
        with shared_cluster.producer() as producer:
            for i in range(first, last):
                producer.send("events", value=f"e{i}".encode())

    produce(0, 500)
    assert cli.mirror(start, None) == 0
    try:
        wait_until(lambda: count(bootstrap, "r.events") >= 500, 60, "r.events mirrored")

        def caught_up() -> bool:  # the flow notes a round done just after it commits
            (status,) = [f for f in cli.statuses() if f["flow"] == "r->k"]
            return bool(status["partitions"]) and status["lag"] == 0

        wait_until(caught_up, 30, "r->k's lag at 0")
        assert cli.mirror(parser.parse_args(["mirror", "status"]), None) == 0
        out = capsys.readouterr().out
        assert "started r->k" in out and "r->k  RUNNING" in out, out
        assert re.search(r"events-0 +r\.events +500 +500 +0", out), out
    finally:
        assert cli.mirror(stop, None) == 0
    assert "mm2-offsets.k.internal" in kafka_topics(bootstrap)
    produce(500, 1000)
    assert cli.mirror(start, None) == 0
    try:
        wait_until(lambda: count(bootstrap, "r.events") >= 1000, 60, "the rest mirrored")
        holds_for(lambda: count(bootstrap, "r.events") == 1000, 1.0, "nothing more arrives")
    finally:
        assert cli.mirror(stop, None) == 0
    values = [r["value"] for r in kafka_read(bootstrap, "r.events")[0]]
    assert values == [f"e{i}".encode() for i in range(1000)]
