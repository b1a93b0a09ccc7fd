"""Exactly-once consume-transform-produce on a real 3-node Ray, killed at random points.

The exactly-once ConsumerGroup reads a replicated topic and writes a replicated one;
member actors holding partitions are killed (Ray restarts them) at seeded random
moments while inputs keep coming, so kills land anywhere in a member's loop (before a
send, between send and commit, during a commit), and a leader replica of the output is
killed too. Each kill is confirmed (a new process), inputs were committed before the
first kill and inputs produced after the last one are output. A read_committed reader
of the output then finds each input's output exactly once.
"""

from __future__ import annotations

import collections
import random
import time
from typing import Any

import pyarrow as pa
import pytest
import ray

from raystream.client.consumer_group import ConsumerGroup

pytestmark = pytest.mark.slow

FIRST = 300
"""Inputs written before the job starts; then MORE after each of four kills."""
MORE = 150
FAST = {"session_timeout_ms": 2000, "heartbeat_interval_ms": 200, "max_poll_records": 40}


def exclaim() -> Any:
    """The job's transform, made in a function so that cloudpickle ships it by value
    (member actors cannot import this test module)."""

    def transform(table: pa.Table) -> pa.Table:
        values = [v + b"!" for v in table.column("value").to_pylist()]
        return pa.table({"key": table.column("key"), "value": pa.array(values, pa.binary())})

    return transform


def serving_leader(admin: Any, topic: str) -> list[int] | None:
    """``[leader]`` of partition 0 while it has a serving leader (a truthy value even for
    replica 0, for ``wait_until``), else None."""
    leader = admin.describe_topic(topic).partitions[0].leader
    return [leader] if leader >= 0 else None


def test_a_killed_and_restarted_job_outputs_each_input_exactly_once(
    replicated, read_all, chaos, wait_until
) -> None:
    admin = replicated.admin()
    admin.create_topic("in", partitions=2, replication_factor=3)
    admin.create_topic("out", partitions=2, replication_factor=3)
    with replicated.producer(linger_ms=2) as producer:
        for i in range(FIRST):
            producer.send("in", value=str(i).encode(), key=str(i).encode())
    # Start the coordinators (and their internal topics) before the clock starts.
    replicated.transaction_coordinator_call("ping")
    replicated.coordinator_call("ping")
    group = ConsumerGroup(
        replicated, "in", "eos-job", exclaim(), members=2, consumer_config=FAST, output_topic="out"
    )
    rng = random.Random(447)

    def holds_partitions(index: int) -> bool:
        status = group.status()[index]
        return bool(status.get("assignment"))

    try:
        wait_until(
            lambda: group.lag() < FIRST,
            120,
            "inputs committed (the job under way)",
            interval_s=1.0,
            detail=group.status,
        )
        with replicated.producer(linger_ms=2) as producer:
            for kill in range(4):
                index = rng.randrange(2)
                wait_until(
                    lambda index=index: holds_partitions(index),
                    120,
                    f"member {index} holding partitions",
                    interval_s=0.2,
                    detail=group.status,
                )
                time.sleep(rng.uniform(0, 1))  # a random moment of its work: not synchronization
                chaos.kill_actor(group.members[index], f"member {index} (kill {kill + 1})")
                if kill == 2:  # and the leader of an output partition
                    (leader,) = wait_until(
                        lambda: serving_leader(admin, "out"), 30, "a serving leader of out-0"
                    )
                    handle = ray.get_actor(
                        f"replica:out:0:{leader}", namespace=replicated.namespace
                    )
                    chaos.kill_actor(handle, f"leader {leader} of out-0")
                start = FIRST + kill * MORE
                for i in range(start, start + MORE):
                    producer.send("in", value=str(i).encode(), key=str(i).encode())
        wait_until(
            lambda: group.lag() == 0,
            240,
            "every input committed",
            interval_s=1.0,
            detail=group.status,
        )
        chaos.verify(min_faults=5)  # before the stop, which ends the members for good
    finally:
        group.stop()
    values = read_all(replicated, "out", "read_committed", 2)
    counts = collections.Counter(values)
    duplicates = [v for v, n in counts.items() if n > 1]
    assert not duplicates, f"{len(duplicates)} outputs twice, e.g. {duplicates[:5]}"
    expected = {f"{i}!".encode() for i in range(FIRST + 4 * MORE)}
    assert set(values) == expected
