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


@pytest.fixture(scope="module")
def fast_settings() -> dict[str, str]:
    return dict(FAST)
