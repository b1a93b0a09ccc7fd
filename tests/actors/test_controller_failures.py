"""The controller facing leaders that died or hang: what an admin sees, what it does.

A killed leader is a crash Ray reports; a hung one is a real hang: its process stopped
(SIGSTOP), alive to Ray, answering nothing, as a replica stuck in a call would be.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import ray

from raystream.actors import CONTROLLER_NAME
from raystream.types import TopicPartition

DESCRIBE_BOUND_S = 6.0
"""describe_topic's wait for leaders is 3 s in all; the rest is slack for a loaded
machine. Before, each partition's leader had 10 s of its own."""


def leader_handle(cluster: Any, topic: str, partition: int) -> tuple[int, Any]:
    leader = cluster.admin().describe_topic(topic).partitions[partition].leader
    return leader, ray.get_actor(
        f"replica:{topic}:{partition}:{leader}", namespace=cluster.namespace
    )


def metadata_leader(cluster: Any, topic: str, partition: int) -> int:
    """The controller's metadata leader (asks no replica)."""
    controller = ray.get_actor(CONTROLLER_NAME, namespace=cluster.namespace)
    (metadata,) = ray.get(controller.metadata.remote([topic]), timeout=30).unwrap()
    return metadata.partitions[partition].leader


@contextlib.contextmanager
def stopped(pid: int) -> Iterator[None]:
    """The process ``pid`` hangs (SIGSTOP) for the block; it runs again after it unless
    it is gone by then (restarted)."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def timed_describe(cluster: Any, topic: str) -> tuple[Any, float]:
    started = time.monotonic()
    description = cluster.admin().describe_topic(topic)
    return description, time.monotonic() - started


def test_describe_topic_answers_promptly_past_a_killed_or_a_hung_leader(
    shared_cluster: Any, chaos: Any, wait_until: Callable[..., Any]
) -> None:
    """An admin describing a topic gets the metadata at once, whatever its leaders do: a
    killed leader is described without offsets (or back already), a hung one keeps its
    place as leader with offsets -1 (unknown), and the healthy partitions' offsets are
    exact. Once the hung leader runs again its offsets come back."""
    topic = "described"
    shared_cluster.admin().create_topic(topic, partitions=3, replication_factor=1)
    with shared_cluster.producer() as producer:
        for p in range(3):
            for i in range(5):
                producer.send(topic, value=b"%d" % i, partition=p)

    def exact(description: Any, partition: int) -> bool:
        d = description.partitions[partition]
        return d.leader >= 0 and (d.log_start_offset, d.high_watermark, d.log_end_offset) == (
            0,
            5,
            5,
        )

    _, killed = leader_handle(shared_cluster, topic, 1)
    chaos.kill_actor(killed, "the leader of described-1")
    description, took = timed_describe(shared_cluster, topic)
    assert took < DESCRIBE_BOUND_S, f"describe_topic took {took:.1f} s past a killed leader"
    assert exact(description, 0) and exact(description, 2), description
    one = description.partitions[1]
    assert exact(description, 1) or one.high_watermark == -1, one
    chaos.verify(1)

    hung_id, hung = leader_handle(shared_cluster, topic, 2)
    with stopped(chaos.actor_info(hung)["Pid"]):
        description, took = timed_describe(shared_cluster, topic)
        assert took < DESCRIBE_BOUND_S, f"describe_topic took {took:.1f} s past a hung leader"
        two = description.partitions[2]
        assert two.leader == hung_id and two.high_watermark == two.log_end_offset == -1, two
        assert exact(description, 0), description
    wait_until(
        lambda: exact(shared_cluster.admin().describe_topic(topic), 2),
        60,
        "the leader of described-2 back, with its offsets",
    )
    wait_until(
        lambda: exact(shared_cluster.admin().describe_topic(topic), 1),
        60,
        "the killed leader of described-1 back, with its offsets",
    )


@pytest.mark.slow
def test_a_hung_leader_of_a_single_replica_partition_is_taken_offline_and_restarted(
    shared_cluster: Any, chaos: Any, wait_until: Callable[..., Any]
) -> None:
    """A partition's only replica hangs. Its producer's request goes unanswered past
    request_timeout_ms and the producer reports the leader; the controller's probe goes
    unanswered too, so the partition goes offline (as Kafka fences a broker whose
    session expired) and shows as such; the replica is restarted once it has hung for
    Kafka's session timeout, is elected again from its own log, and the record waiting
    all along is written, once, after the one before."""
    from raystream.controller.liveness import HUNG_RESTART_S

    topic = "lonely"
    shared_cluster.admin().create_topic(topic, partitions=1, replication_factor=1)
    producer = shared_cluster.producer(
        acks="all", request_timeout_ms=1500, delivery_timeout_ms=120_000, retry_backoff_ms=50
    )
    try:
        producer.send(topic, b"before").get(timeout=60)
        _, handle = leader_handle(shared_cluster, topic, 0)
        info = chaos.actor_info(handle)
        with stopped(info["Pid"]):
            hung_at = time.monotonic()
            waiting = producer.send(topic, b"during")
            wait_until(
                lambda: metadata_leader(shared_cluster, topic, 0) == -1,
                30,
                "the hung leader taken out: lonely-0 offline",
            )
            noticed = time.monotonic() - hung_at
            assert "lonely-0" in shared_cluster.status()["offline_partitions"]
            assert chaos.actor_info(handle)["State"] == "ALIVE"  # hung, not dead
            restarted = wait_until(
                lambda: (
                    (now := chaos.actor_info(handle))["Pid"] != info["Pid"]
                    and now["State"] == "ALIVE"
                    and now
                ),
                HUNG_RESTART_S + 60,
                "the hung replica restarted in a new process",
            )
        assert restarted["NumRestarts"] == info["NumRestarts"] + 1
        metadata = waiting.get(timeout=60)
        assert metadata.offset == 1
        assert metadata_leader(shared_cluster, topic, 0) >= 0
    finally:
        producer.close()
    tp = TopicPartition(topic, 0)
    with shared_cluster.consumer(auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        values: list[bytes] = []
        wait_until(
            lambda: values.extend(r.value for r in consumer.poll(500).get(tp, [])) or values,
            30,
            "the records read back",
        )
        while consumer.position(tp) < 2:
            values.extend(r.value for r in consumer.poll(500).get(tp, []))
    assert values == [b"before", b"during"]
    # request timeout + expiry check + the probe's second: well within Kafka's 9 s
    assert noticed < 10.0, f"the hang was noticed after {noticed:.1f} s"
