"""Kafka consumer groups through the listener: unmodified kafka-python and confluent-kafka
consumers join, get disjoint complete assignments from their own assignors, rebalance
when a member leaves, commit and read back offsets; admin clients list, describe and
delete groups; the raw protocol steps (FindCoordinator batched, MEMBER_ID_REQUIRED).

The listener has no Fetch yet on this branch: a consumer's poll still drives its join,
sync and heartbeats, so membership is tested through ``assignment()``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from wire_helpers import KafkaSocket

from raystream.kafka.codec import request_schema
from raystream.types import TopicPartition

FAST = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 200}


@contextmanager
def _polling(consumers: list[Any], poll: Callable[[Any], None]) -> Iterator[None]:
    """Poll every consumer on a thread of its own (what drives its membership)."""
    stop = threading.Event()

    def run(consumer: Any) -> None:
        while not stop.is_set():
            try:
                poll(consumer)
            except Exception:  # no Fetch/ListOffsets yet: the membership goes on
                time.sleep(0.05)

    threads = [threading.Thread(target=run, args=(c,), daemon=True) for c in consumers]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)


def _wait_split(
    assignments: Callable[[], list[set[tuple[str, int]]]], topic: str, partitions: int
) -> list[set[tuple[str, int]]]:
    """Wait until every member holds partitions, disjoint and together all of them."""
    wanted = {(topic, p) for p in range(partitions)}
    deadline = time.monotonic() + 60
    seen: list[set[tuple[str, int]]] = []
    while time.monotonic() < deadline:
        seen = assignments()
        if all(seen) and sum(len(s) for s in seen) == partitions and set().union(*seen) == wanted:
            return seen
        time.sleep(0.2)
    raise AssertionError(f"no disjoint complete assignment of {topic}: {seen}")


@pytest.mark.parametrize("assignor", ["range", "roundrobin"])
def test_kafka_python_members_split_partitions_and_commit(
    assignor: str, bootstrap: str, kafka_topic: Callable[..., str], kafka_cluster: Any
) -> None:
    from kafka import KafkaConsumer
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KafkaTopicPartition

    strategy = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}
    topic, group = kafka_topic(partitions=5), f"kp-{assignor}"
    consumers = [
        KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            client_id=f"kp-{i}",
            partition_assignment_strategy=[strategy[assignor]],
            enable_auto_commit=False,
            **FAST,
        )
        for i in range(3)
    ]
    try:
        for consumer in consumers:
            consumer.subscribe([topic])

        def assignments(members: list[Any]) -> list[set[tuple[str, int]]]:
            return [{(tp.topic, tp.partition) for tp in c.assignment()} for c in members]

        with _polling(consumers[:2], lambda c: c.poll(timeout_ms=100)):
            _wait_split(lambda: assignments(consumers[:2]), topic, 5)
        with _polling(consumers, lambda c: c.poll(timeout_ms=100)):
            split = _wait_split(lambda: assignments(consumers), topic, 5)
        if assignor == "roundrobin":
            assert sorted(len(s) for s in split) == [1, 2, 2]

        # Each member commits its partitions in its generation; OffsetFetch reads them.
        for consumer in consumers:
            consumer.commit(
                {
                    KafkaTopicPartition(t, p): OffsetAndMetadata(10 + p, f"m{p}", -1)
                    for t, p in {(tp.topic, tp.partition) for tp in consumer.assignment()}
                }
            )
        assert consumers[0].committed(KafkaTopicPartition(topic, 4)) == 14
        # raystream's own tools see the Kafka group: its offsets and who holds what.
        described = kafka_cluster.admin().describe_group(group)
        assert described.offsets == {TopicPartition(topic, p): 10 + p for p in range(5)}
        held = sorted(sorted(tps) for tps in described.members.values())
        assert held == sorted(sorted(TopicPartition(t, p) for t, p in s) for s in split)
    finally:
        for consumer in consumers:
            consumer.close(autocommit=False)


def _call(conn: KafkaSocket, api_key: int, version: int, **fields: Any) -> Any:
    """A request built from kio's class for that version, and its decoded answer."""
    return conn.call(api_key, version, request_schema(api_key, version)(**fields))


def test_raw_find_coordinator_join_sync_heartbeat_leave(bootstrap: str) -> None:
    import datetime

    from kio.schema.errors import ErrorCode
    from kio.schema.join_group.v9.request import JoinGroupRequestProtocol
    from kio.schema.leave_group.v5.request import MemberIdentity
    from kio.schema.sync_group.v5.request import SyncGroupRequestAssignment

    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    with KafkaSocket(bootstrap) as conn:
        found = _call(conn, 10, 4, key_type=0, coordinator_keys=("a", "b"))
        assert [(c.key, c.error_code, c.host, c.port) for c in found.coordinators] == [
            ("a", ErrorCode.none, host, int(port)),
            ("b", ErrorCode.none, host, int(port)),
        ]
        txn = _call(conn, 10, 4, key_type=1, coordinator_keys=("tx",))
        assert (txn.coordinators[0].error_code, txn.coordinators[0].port) == (
            ErrorCode.none,
            int(port),
        )

        second = datetime.timedelta(seconds=6)
        join = {
            "group_id": "raw",
            "session_timeout": second,
            "rebalance_timeout": second,
            "member_id": "",
            "protocol_type": "consumer",
            "protocols": (JoinGroupRequestProtocol(name="range", metadata=b"meta"),),
        }
        first = _call(conn, 11, 9, **join)
        assert first.error_code == ErrorCode.member_id_required and first.member_id
        joined = _call(conn, 11, 9, **{**join, "member_id": first.member_id})
        assert (joined.error_code, joined.leader, joined.protocol_name) == (
            ErrorCode.none,
            first.member_id,
            "range",
        )
        assert [(m.member_id, m.metadata) for m in joined.members] == [(first.member_id, b"meta")]
        member, generation = first.member_id, joined.generation_id
        synced = _call(
            conn,
            14,
            5,
            group_id="raw",
            generation_id=generation,
            member_id=member,
            protocol_type="consumer",
            protocol_name="range",
            assignments=(SyncGroupRequestAssignment(member_id=member, assignment=b"mine"),),
        )
        assert (synced.error_code, synced.assignment) == (ErrorCode.none, b"mine")
        beat = _call(conn, 12, 4, group_id="raw", generation_id=generation, member_id=member)
        assert beat.error_code == ErrorCode.none
        stale = _call(conn, 12, 4, group_id="raw", generation_id=generation + 7, member_id=member)
        assert stale.error_code == ErrorCode.illegal_generation
        left = _call(
            conn,
            13,
            5,
            group_id="raw",
            members=(MemberIdentity(member_id=member), MemberIdentity(member_id="nobody")),
        )
        assert [m.error_code for m in left.members] == [
            ErrorCode.none,
            ErrorCode.unknown_member_id,
        ]
        groups = _call(conn, 15, 5, groups=("raw", "never"), include_authorized_operations=False)
        assert [(g.group_state, g.protocol_type) for g in groups.groups] == [
            ("Empty", "consumer"),
            ("Dead", ""),
        ]


def test_a_kafka_client_cannot_join_a_raystream_assigned_group(
    bootstrap: str, kafka_cluster: Any, kafka_topic: Callable[..., str]
) -> None:
    import datetime

    from kio.schema.errors import ErrorCode
    from kio.schema.join_group.v9.request import JoinGroupRequestProtocol

    topic = kafka_topic(partitions=1)
    consumer = kafka_cluster.consumer(topic, group_id="rs-owned")
    try:
        consumer.poll(timeout_ms=100)
        with KafkaSocket(bootstrap) as conn:
            answer = _call(
                conn,
                11,
                6,
                group_id="rs-owned",
                session_timeout=datetime.timedelta(seconds=6),
                rebalance_timeout=datetime.timedelta(seconds=6),
                member_id="",
                group_instance_id="static-1",
                protocol_type="consumer",
                protocols=(JoinGroupRequestProtocol(name="range", metadata=b""),),
            )
        assert answer.error_code == ErrorCode.inconsistent_group_protocol
    finally:
        consumer.close()
