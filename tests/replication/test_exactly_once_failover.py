"""Exactly-once consume-transform-produce on a real 3-node Ray, killed at random points.

The exactly-once ConsumerGroup reads a replicated topic and writes a replicated one;
member actors are killed (Ray restarts them) at seeded random moments, so kills land
before a send, between send and commit and during a commit, and a leader replica of
the output is killed too. A read_committed reader of the output then finds each
input's output exactly once.
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


def wait_for(condition: Any, timeout_s: float, what: str, group: Any = None) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        status = group.status() if group is not None else ""
        assert time.monotonic() < deadline, f"{what} not reached in {timeout_s} s {status}"
        time.sleep(1.0)


def test_a_killed_and_restarted_job_outputs_each_input_exactly_once(replicated, read_all) -> None:
    admin = replicated.admin()
    admin.create_topic("in", partitions=3, replication_factor=3)
    admin.create_topic("out", partitions=3, replication_factor=3)
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
    try:
        wait_for(lambda: group.lag() < FIRST, 120, "the job under way", group)
        with replicated.producer(linger_ms=2) as producer:
            for kill in range(4):
                time.sleep(rng.uniform(0.5, 2.5))
                ray.kill(group.members[rng.randrange(2)], no_restart=False)
                if kill == 2:  # and the leader of an output partition
                    leader = admin.describe_topic("out").partitions[0].leader
                    handle = ray.get_actor(
                        f"replica:out:0:{leader}", namespace=replicated.namespace
                    )
                    ray.kill(handle, no_restart=False)
                start = FIRST + kill * MORE
                for i in range(start, start + MORE):
                    producer.send("in", value=str(i).encode(), key=str(i).encode())
        wait_for(lambda: group.lag() == 0, 240, "every input committed", group)
    finally:
        group.stop()
    values = read_all(replicated, "out", "read_committed", 3)
    counts = collections.Counter(values)
    duplicates = [v for v, n in counts.items() if n > 1]
    assert not duplicates, f"{len(duplicates)} outputs twice, e.g. {duplicates[:5]}"
    expected = {f"{i}!".encode() for i in range(FIRST + 4 * MORE)}
    assert set(values) == expected
