"""The writer a Spark task runs for rs.spark.write_topic, on a real Ray and real leaders
(called here directly, as a Spark Python worker calls it): where rows go, the fall-back
to a Producer when a leader cannot be reached, and refusals that must not be retried."""

from __future__ import annotations

import dataclasses
import socket
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from raystream.client.partitioner import partition_for_key
from raystream.errors import RecordTooLargeError
from raystream.spark.sink import _direct_writer
from raystream.types import TopicPartition


def rows_by_partition(cluster: Any, topic: str, partitions: int) -> dict[int, list[tuple]]:
    """Every (key, value) of each partition, in offset order."""
    found = {}
    for partition in range(partitions):
        tp = TopicPartition(topic, partition)
        with cluster.consumer(auto_offset_reset="earliest", enable_auto_commit=False) as reader:
            reader.assign([tp])
            end = reader.end_offsets([tp])[tp]
            rows: list[tuple] = []
            deadline = time.monotonic() + 60
            while reader.position(tp) < end:
                assert time.monotonic() < deadline, f"{tp} stuck at {reader.position(tp)} of {end}"
                table = reader.poll_arrow(timeout_ms=500)
                keys, values = table.column("key").to_pylist(), table.column("value").to_pylist()
                rows += zip(keys, values, strict=True)
            found[partition] = rows
    return found


def test_keyed_rows_go_to_their_key_partition_and_the_rest_in_turn_from_the_task_number(
    shared_cluster: Any, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(partitions=3)
    writer = _direct_writer(shared_cluster, topic, {"acks": 1})
    assert writer is not None and len(writer.endpoints) == 3
    keyed = pa.record_batch(
        {"key": [b"k%d" % i for i in range(300)], "value": [b"v%d" % i for i in range(300)]}
    )
    first = pa.record_batch({"value": [b"a%d" % i for i in range(50)]})
    second = pa.record_batch({"value": [b"b%d" % i for i in range(50)]})
    assert writer.write([keyed, first, second], first_partition=4) == 400

    found = rows_by_partition(shared_cluster, topic, 3)
    for partition, rows in found.items():
        keyed_here = [(k, v) for k, v in rows if k is not None]
        assert all(partition_for_key(k, 3) == partition for k, _ in keyed_here)
        # each partition keeps the table order of its keyed rows
        assert keyed_here == sorted(keyed_here, key=lambda kv: int(kv[1][1:]))
    assert sum(len(rows) for rows in found.values()) == 400
    # the task (number 4 of 3 partitions) starts at partition 1: the keyed batch, then
    # the keyless ones take partitions 2 and 0 whole
    assert [v for k, v in found[2] if k is None] == first.column("value").to_pylist()
    assert [v for k, v in found[0] if k is None] == second.column("value").to_pylist()


def test_an_unreachable_leader_makes_the_task_go_on_with_a_producer(
    shared_cluster: Any, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(partitions=2)
    writer = _direct_writer(shared_cluster, topic, {})
    with socket.socket() as probe:  # a port nobody listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    gone = dataclasses.replace(writer.endpoints[0], port=port)
    stale = dataclasses.replace(writer, endpoints=(gone, writer.endpoints[1]))
    batches = [
        pa.record_batch({"value": [b"%d-%d" % (b, i) for i in range(100)]}) for b in range(6)
    ]
    assert stale.write(batches, first_partition=0) == 600
    found = rows_by_partition(shared_cluster, topic, 2)
    values = [v for rows in found.values() for _, v in rows]
    assert sorted(values) == sorted(v for b in batches for v in b.column("value").to_pylist())


def test_a_refused_batch_fails_the_task_with_the_leaders_error(
    shared_cluster: Any, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(config={"max.message.bytes": "2000"})
    writer = _direct_writer(shared_cluster, topic, {"acks": 1})
    too_large = pa.record_batch({"value": [b"x" * 5000]})
    with pytest.raises(RecordTooLargeError):
        writer.write([too_large], first_partition=0)
