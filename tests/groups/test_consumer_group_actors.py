"""``rs.ConsumerGroup``: member actors, scaling, a killed member, at-least-once.

Each member's function appends the (partition, offset) pairs it processed to a file on
real disk, so the test sees exactly what was processed, whichever actor did it.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from raystream.client.consumer_group import ConsumerGroup
from raystream.errors import InvalidRequestError

FAST = {"session_timeout_ms": 2000, "heartbeat_interval_ms": 200}


def recorder(path: str) -> Any:
    """A member function that appends 'partition offset' lines to ``path``."""

    def record(table: Any) -> None:
        lines = [
            f"{p} {o}\n"
            for p, o in zip(
                table.column("partition").to_pylist(),
                table.column("offset").to_pylist(),
                strict=True,
            )
        ]
        with open(path, "a") as f:
            f.write("".join(lines))

    return record


def processed(path: str) -> list[tuple[int, int]]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [tuple(map(int, line.split())) for line in f if line.strip()]


def produce(cluster: Any, topic: str, start: int, count: int) -> None:
    producer = cluster.producer(linger_ms=2)
    for i in range(start, start + count):
        producer.send(topic, value=str(i).encode(), key=str(i).encode())
    producer.close()


@pytest.mark.slow
def test_member_actors_scale_survive_a_kill_and_skip_nothing(
    shared_cluster, make_topic, tmp_path, chaos, wait_until
):
    topic = make_topic(partitions=6)
    path = str(tmp_path / "processed.txt")
    produce(shared_cluster, topic, 0, 3000)
    group = ConsumerGroup(
        shared_cluster, topic, "actors", recorder(path), members=3, consumer_config=FAST
    )
    try:

        def shares() -> list[int]:
            return sorted(len(s.get("assignment", [])) for s in group.status())

        def wait_for_shares(expected: list[int], what: str) -> None:
            wait_until(lambda: shares() == expected, 120, what, interval_s=0.2)

        wait_for_shares([2, 2, 2], "3 members with 2 partitions each")
        wait_until(lambda: len(set(processed(path))) == 3000, 120, "the first 3000 records")

        group.scale(4)
        wait_for_shares([1, 1, 2, 2], "a fourth member taking a share")

        victim = group.members[0]
        chaos.kill_actor(victim, "member 0")  # kill -9; Ray restarts it as a new member
        produce(shared_cluster, topic, 3000, 3000)
        wait_until(lambda: len(set(processed(path))) == 6000, 120, "every record after the kill")
        chaos.verify()  # member 0 runs in a new process
        wait_for_shares([1, 1, 2, 2], "the restarted member back in")
        done = processed(path)
        assert {o for _, o in done} >= set(range(1000))  # at least once: nothing skipped

        group.scale(2)
        wait_for_shares([3, 3], "two members after scaling down")
        assert all(s["failures"] == 0 for s in group.status())
    finally:
        group.stop()
    assert group.members == []
    assert group.lag() == 0  # everything processed was committed


def test_a_failing_function_is_retried_and_its_batch_never_committed(
    shared_cluster, make_topic, tmp_path, wait_until
):
    topic = make_topic(partitions=1)
    produce(shared_cluster, topic, 0, 50)
    flag = str(tmp_path / "fail-once")
    open(flag, "w").close()
    path = str(tmp_path / "processed.txt")
    record = recorder(path)

    def flaky(table: Any) -> None:
        if os.path.exists(flag):
            os.remove(flag)
            raise RuntimeError("transient failure")
        record(table)

    group = ConsumerGroup(shared_cluster, [topic], "flaky", flaky, consumer_config=FAST)
    try:
        wait_until(lambda: len(set(processed(path))) == 50, 60, "all 50 records")
        (status,) = group.status()
        assert status["failures"] == 1 and "transient failure" in status["last_error"]
        assert sorted(o for _, o in processed(path)) == list(range(50))
    finally:
        group.stop()


def test_bad_arguments_are_named(shared_cluster, make_topic):
    topic = make_topic()
    with pytest.raises(InvalidRequestError, match="mode='rows'"):
        ConsumerGroup(shared_cluster, topic, "g", print, mode="rows")
    with pytest.raises(InvalidRequestError, match="members=-1"):
        ConsumerGroup(shared_cluster, topic, "g", print, members=-1)
    with pytest.raises(InvalidRequestError, match="fn must be callable"):
        ConsumerGroup(shared_cluster, topic, "g", 42)


@pytest.mark.slow
def test_autoscaling_follows_the_lag_between_its_bounds(shared_cluster, make_topic, wait_until):
    topic = make_topic(partitions=3)
    produce(shared_cluster, topic, 0, 3000)

    def slow(table: Any) -> None:
        time.sleep(0.05 * table.num_rows / 100)  # slow work, for a lag: not synchronization

    group = ConsumerGroup(
        shared_cluster,
        topic,
        "autoscaled",
        slow,
        members=1,
        consumer_config={**FAST, "max_poll_records": 100},
        autoscale=(1, 3),
        lag_per_member=500,
        autoscale_interval_s=1.0,
    )
    try:
        wait_until(lambda: len(group.members) == 3, 60, "scaling up to the maximum on lag")
        wait_until(lambda: group.lag() == 0, 120, "the backlog processed", interval_s=0.2)
        wait_until(lambda: len(group.members) == 1, 60, "scaling back down to the minimum")
    finally:
        group.stop()
