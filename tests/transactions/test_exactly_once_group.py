"""The exactly-once ConsumerGroup: output and offsets in one transaction per batch, so
a read_committed reader of the output sees each input's output exactly once, also when
the function fails now and then and when a member is killed."""

from __future__ import annotations

import collections
from typing import Any

import pyarrow as pa
import pytest

from raystream.client.consumer_group import ConsumerGroup
from raystream.errors import InvalidRequestError

FAST = {"session_timeout_ms": 2000, "heartbeat_interval_ms": 200, "max_poll_records": 50}


def produce(cluster: Any, topic: str, start: int, count: int) -> None:
    with cluster.producer(linger_ms=2) as producer:
        for i in range(start, start + count):
            producer.send(topic, value=str(i).encode(), key=str(i).encode())


def flaky_double() -> Any:
    """A transform that fails on every fifth call (after producing nothing)."""
    calls = collections.Counter()

    def transform(table: pa.Table) -> pa.Table:
        calls["n"] += 1
        if calls["n"] % 5 == 0:
            raise RuntimeError("transient failure")
        values = [v + b"!" for v in table.column("value").to_pylist()]
        return pa.table({"key": table.column("key"), "value": pa.array(values, pa.binary())})

    return transform


def check_exactly_once(cluster: Any, output: str, partitions: int, count: int, read_all) -> None:
    values = read_all(cluster, output, "read_committed", partitions)
    duplicates = [v for v, n in collections.Counter(values).items() if n > 1]
    assert not duplicates, f"{len(duplicates)} outputs twice, e.g. {duplicates[:5]}"
    assert sorted(values) == sorted(f"{i}!".encode() for i in range(count))


def test_each_input_is_output_once_despite_failures(
    shared_cluster, make_topic, read_all, wait_until
):
    source, sink = make_topic(partitions=2), make_topic(partitions=2)
    produce(shared_cluster, source, 0, 400)
    group = ConsumerGroup(
        shared_cluster,
        source,
        f"eos-{source}",
        flaky_double(),
        members=2,
        consumer_config=FAST,
        output_topic=sink,
    )
    try:
        wait_until(lambda: group.lag() == 0, 90, "every input committed", interval_s=0.5)
        failures = sum(s.get("failures", 0) for s in group.status())
        assert failures >= 1, "the transform never failed: no abort was exercised"
    finally:
        group.stop()
    check_exactly_once(shared_cluster, sink, 2, 400, read_all)
    uncommitted = read_all(shared_cluster, sink, "read_uncommitted", 2)
    assert len(uncommitted) >= 400  # aborted attempts stay in the log, invisible


def test_a_bad_output_topic_is_named(shared_cluster, make_topic) -> None:
    with pytest.raises(InvalidRequestError, match="output_topic"):
        ConsumerGroup(shared_cluster, make_topic(), "g", print, output_topic="")


@pytest.mark.slow
def test_killed_members_restart_without_duplicating_output(
    shared_cluster, make_topic, read_all, chaos, wait_until
) -> None:
    """Three kills of members that hold partitions, inputs arriving after each: every
    kill is confirmed (a new process), inputs were committed before the first and the
    ones produced after the last are output, each exactly once."""
    source, sink = make_topic(partitions=3), make_topic(partitions=3)
    produce(shared_cluster, source, 0, 600)
    group = ConsumerGroup(
        shared_cluster,
        source,
        f"eos-kill-{source}",
        flaky_double(),
        members=2,
        consumer_config=FAST,
        output_topic=sink,
    )
    try:
        wait_until(lambda: group.lag() < 600, 240, "inputs committed", interval_s=0.5)
        for round_ in range(3):
            index = round_ % 2
            wait_until(
                lambda index=index: group.status()[index].get("assignment"),
                90,
                f"member {index} holding partitions",
                interval_s=0.2,
                detail=group.status,
            )
            chaos.kill_actor(group.members[index], f"member {index}")  # Ray restarts it
            produce(shared_cluster, source, 600 + 200 * round_, 200)
            remaining = group.lag()
            wait_until(  # the job goes on between kills
                lambda remaining=remaining: remaining == 0 or group.lag() < remaining,
                90,
                f"inputs committed after kill {round_ + 1}",
                interval_s=0.2,
            )
        wait_until(lambda: group.lag() == 0, 120, "every input committed", interval_s=0.5)
        chaos.verify(min_faults=3)  # before the stop, which ends the members for good
    finally:
        group.stop()
    check_exactly_once(shared_cluster, sink, 3, 1200, read_all)
