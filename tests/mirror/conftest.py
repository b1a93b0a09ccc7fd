"""Helpers for the mirror tests: reading a topic back whole, fast MirrorMaker settings."""

from __future__ import annotations

import time
from typing import Any

import pytest

#: MM2 intervals shortened so that a test sees topics, checkpoints and synced group
#: offsets within a second (MM2's defaults are minutes).
FAST = {
    "refresh.topics.interval.seconds": "0.5",
    "refresh.groups.interval.seconds": "0.5",
    "sync.topic.configs.interval.seconds": "0.5",
    "emit.checkpoints.interval.seconds": "0.3",
    "sync.group.offsets.enabled": "true",
    "sync.group.offsets.interval.seconds": "0.3",
    "emit.heartbeats.interval.seconds": "0.5",
}


def read_partitions(cluster: Any, topic: str, timeout_s: float = 60.0) -> dict[int, list[dict]]:
    """Every record of ``topic`` per partition, in offset order, as dicts."""
    from raystream.types import TopicPartition

    partitions = len(cluster.admin().describe_topic(topic).partitions)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    out: dict[int, list[dict]] = {p: [] for p in range(partitions)}
    with cluster.consumer(enable_auto_commit=False, auto_offset_reset="earliest") as consumer:
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        end = consumer.end_offsets(tps)
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < end[tp] for tp in tps):
            assert time.monotonic() < deadline, "reading the topic stalled"
            for row in consumer.poll_arrow(timeout_ms=200).to_pylist():
                out[row["partition"]].append(row)
    return out


def commit_part_of_payments(cluster: Any) -> tuple[list[bytes], dict[Any, int]]:
    """Fill a 2-partition ``payments`` topic with 400 records, let group ``billing``
    read at least 150 of them and commit; the values it read and its committed offsets.

    The start of the fail-over tests: the group then moves to the mirror's target."""
    cluster.admin().create_topic("payments", partitions=2)
    with cluster.producer() as producer:
        for i in range(400):
            producer.send("payments", value=f"p{i}".encode(), partition=i % 2)
    seen: list[bytes] = []
    with cluster.consumer(
        "payments", group_id="billing", auto_offset_reset="earliest", enable_auto_commit=False
    ) as consumer:
        while len(seen) < 150:
            for records in consumer.poll(timeout_ms=500, max_records=50).values():
                seen += [r.value for r in records]
        consumer.commit()
    return seen, cluster.admin().describe_group("billing").offsets


@pytest.fixture(scope="module")
def fast_settings() -> dict[str, str]:
    return dict(FAST)
