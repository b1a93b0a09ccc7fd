"""Failover on a real 3-node Ray: no acknowledged record is lost, order holds, the high
watermark never goes back.

A verifiable producer (acks=all, records numbered) writes at a steady rate while a
failure is injected; a verifiable consumer then reads the partition from the start.
Needs its own multi-node Ray cluster (see this directory's conftest).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
import ray

import raystream as rs
from raystream.protocol import CONTROLLER_NAME

pytestmark = pytest.mark.slow

RATE = 400
SECONDS = 4.0


class HighWatermarkWatch:
    """Samples a partition's high watermark from the controller's describe, in a thread,
    and records whether it ever went backwards."""

    def __init__(self, cluster: rs.Cluster, topic: str) -> None:
        self.admin = cluster.admin()
        self.topic = topic
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                hw = self.admin.describe_topic(self.topic).partitions[0].high_watermark
                if hw >= 0:
                    self.samples.append(hw)
            except Exception:
                pass
            self._stop.wait(0.1)

    def stop(self) -> list[int]:
        self._stop.set()
        self._thread.join()
        return self.samples


def steady_produce(
    cluster: rs.Cluster, topic: str, failure: Callable[[], None], failure_at: float = 1.0
) -> list[int]:
    """Send numbered records for SECONDS at RATE/s with acks=all; inject ``failure``
    after ``failure_at`` seconds; return the numbers that were acknowledged."""
    producer = cluster.producer(
        acks="all", linger_ms=2, delivery_timeout_ms=60_000, request_timeout_ms=5_000
    )
    acked: list[int] = []
    failed: list[BaseException] = []
    total = int(RATE * SECONDS)
    injected = False
    start = time.perf_counter()
    for i in range(total):
        future = producer.send(topic, value=str(i).encode())
        future.add_callback(lambda _md, i=i: acked.append(i))
        future.add_errback(failed.append)
        if not injected and time.perf_counter() - start >= failure_at:
            injected = True
            failure()
        delay = start + (i + 1) / RATE - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
    producer.flush(timeout=90)
    producer.close()
    assert not failed, f"records failed: {failed[:3]}"
    return acked


def consume_all(cluster: rs.Cluster, topic: str) -> list[int]:
    """Every record of partition 0, from the start to the current end."""
    consumer = cluster.consumer(auto_offset_reset="earliest")
    tp = rs.TopicPartition(topic, 0)
    consumer.assign([tp])
    end = consumer.end_offsets([tp])[tp]
    values: list[int] = []
    deadline = time.time() + 60
    while consumer.position(tp) < end and time.time() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            values.extend(int(r.value) for r in records)
    consumer.close()
    return values


def verify(acked: list[int], consumed: list[int], samples: list[int]) -> None:
    missing = set(acked) - set(consumed)
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"
    assert len(consumed) == len(set(consumed)), "records written twice (idempotence is on)"
    first_seen = list(dict.fromkeys(consumed))
    assert first_seen == sorted(first_seen), "per-partition order broken"
    assert samples == sorted(samples), "the high watermark went backwards"


def replica(cluster: rs.Cluster, topic: str, replica_id: int):
    return ray.get_actor(f"replica:{topic}:0:{replica_id}", namespace=cluster.namespace)


def leader_of(cluster: rs.Cluster, topic: str) -> int:
    return cluster.admin().describe_topic(topic).partitions[0].leader


def wait_for(condition, timeout_s: float = 30):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


def make_topic(cluster: rs.Cluster, name: str, **config) -> None:
    cluster.admin().create_topic(
        name, replication_factor=3, config={"min.insync.replicas": 2, **config}
    )


def run_scenario(cluster: rs.Cluster, topic: str, failure: Callable[[], None]) -> None:
    watch = HighWatermarkWatch(cluster, topic)
    acked = steady_produce(cluster, topic, failure)
    samples = watch.stop()
    assert len(acked) == int(RATE * SECONDS)
    verify(acked, consume_all(cluster, topic), samples)


def test_leader_actor_killed(replicated) -> None:
    make_topic(replicated, "kill-leader")
    old = leader_of(replicated, "kill-leader")
    run_scenario(
        replicated,
        "kill-leader",
        lambda: ray.kill(replica(replicated, "kill-leader", old), no_restart=False),
    )
    assert leader_of(replicated, "kill-leader") != old
    # The killed replica came back from its disk and rejoined the ISR.
    wait_for(lambda: len(replicated.admin().describe_topic("kill-leader").partitions[0].isr) == 3)


def test_follower_actor_killed(replicated) -> None:
    make_topic(replicated, "kill-follower")
    follower = next(r for r in (0, 1, 2) if r != leader_of(replicated, "kill-follower"))
    run_scenario(
        replicated,
        "kill-follower",
        lambda: ray.kill(replica(replicated, "kill-follower", follower), no_restart=False),
    )
    wait_for(lambda: len(replicated.admin().describe_topic("kill-follower").partitions[0].isr) == 3)


def test_controller_killed_while_producing(replicated) -> None:
    make_topic(replicated, "kill-controller")
    controller = ray.get_actor(CONTROLLER_NAME, namespace=replicated.namespace)
    run_scenario(replicated, "kill-controller", lambda: ray.kill(controller, no_restart=False))
    assert replicated.admin().list_topics() == ["kill-controller"]


def test_repeated_leader_kills_during_a_steady_produce(replicated) -> None:
    make_topic(replicated, "kill-often")

    def kill_leaders() -> None:
        def loop() -> None:
            for _ in range(3):
                try:
                    leader = leader_of(replicated, "kill-often")
                    if leader >= 0:
                        ray.kill(replica(replicated, "kill-often", leader), no_restart=False)
                except Exception:
                    pass
                time.sleep(1.0)

        threading.Thread(target=loop, daemon=True).start()

    run_scenario(replicated, "kill-often", kill_leaders)


def test_an_idempotent_producer_retrying_through_leader_kills_writes_each_record_once(
    replicated,
) -> None:
    """Five calls in flight, short request timeouts, four leader kills: every record
    lands exactly once and in order (records numbered, read back by a consumer)."""
    make_topic(replicated, "once")
    producer = replicated.producer(
        acks="all",
        linger_ms=1,
        request_timeout_ms=1000,
        retry_backoff_ms=50,
        delivery_timeout_ms=60_000,
        max_in_flight_requests_per_connection=5,
    )
    total = 6000
    kills = 0
    start = time.perf_counter()
    for i in range(total):
        producer.send("once", str(i).encode())
        if i % 1000 == 999 and kills < 4:
            leader = wait_for(lambda: leader_of(replicated, "once") + 1) - 1  # elected
            ray.kill(replica(replicated, "once", leader), no_restart=False)
            kills += 1
        delay = start + (i + 1) / 1500 - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
    producer.flush(timeout=90)
    producer.close()
    assert consume_all(replicated, "once") == list(range(total))


def test_whole_cluster_stopped_and_restarted(replicated, tmp_path) -> None:
    make_topic(replicated, "restart-all")
    acked = steady_produce(replicated, "restart-all", lambda: None)
    replicated.shutdown()
    again = rs.connect(namespace=replicated.namespace, data_dir=replicated.data_dir)
    try:
        description = again.admin().describe_topic("restart-all")
        assert description.partitions[0].replicas == [0, 1, 2]
        verify(acked, consume_all(again, "restart-all"), [])
    finally:
        again.shutdown()


def node_of(cluster: rs.Cluster, topic: str, replica_id: int) -> str:
    return cluster.admin().describe_topic(topic).partitions[0].nodes[replica_id]


def remove_node(ray_nodes, node_id: str) -> None:
    (node,) = [n for n in ray_nodes.list_all_nodes() if n.node_id == node_id]
    ray_nodes.remove_node(node)


def test_leader_node_removed(replicated, ray_nodes) -> None:
    # Keep the driver's node: it hosts the controller, and Ray forbids removing it.
    head = ray.get_runtime_context().get_node_id()
    make_topic(replicated, "lose-node")
    leader = leader_of(replicated, "lose-node")
    if node_of(replicated, "lose-node", leader) == head:
        # Make a replica on another node lead.
        target = next(r for r in (0, 1, 2) if node_of(replicated, "lose-node", r) != head)
        replicated.admin().reassign_partitions(
            "lose-node",
            {
                0: [
                    node_of(replicated, "lose-node", r)
                    for r in (target, *[x for x in (0, 1, 2) if x != target])
                ]
            },
        )
        leader = leader_of(replicated, "lose-node")
    lost_node = node_of(replicated, "lose-node", leader)
    try:
        run_scenario(replicated, "lose-node", lambda: remove_node(ray_nodes, lost_node))
        # The lost replica is re-created on a live node, catches up and rejoins the ISR.
        wait_for(
            lambda: len(replicated.admin().describe_topic("lose-node").partitions[0].isr) == 3,
            timeout_s=60,
        )
        assert (
            lost_node
            not in replicated.admin().describe_topic("lose-node").partitions[0].nodes.values()
        )
    finally:
        ray_nodes.add_node(num_cpus=2, object_store_memory=150 * 2**20)
        ray_nodes.wait_for_nodes()


def test_unclean_election_off_keeps_a_partition_offline_and_on_brings_it_back(
    replicated, ray_nodes
) -> None:
    admin = replicated.admin()
    driver_node = ray.get_runtime_context().get_node_id()
    admin.create_topic(
        "unclean", partitions=3, replication_factor=2, config={"min.insync.replicas": 1}
    )
    partition = next(
        p for p in admin.describe_topic("unclean").partitions if driver_node not in p.nodes.values()
    )
    number = partition.partition

    def state():
        return admin.describe_topic("unclean").partitions[number]

    def produce(value: bytes):
        producer = replicated.producer(acks="all", delivery_timeout_ms=10_000)
        try:
            return producer.send("unclean", value, partition=number).get(timeout=15)
        finally:
            producer.close()

    produce(b"replicated")
    follower = next(r for r in partition.replicas if r != partition.leader)
    handle = ray.get_actor(f"replica:unclean:{number}:{follower}", namespace=replicated.namespace)
    ray.kill(handle, no_restart=True)
    wait_for(lambda: state().isr == [partition.leader])
    produce(b"only on the leader")
    lost_node = partition.nodes[partition.leader]
    try:
        remove_node(ray_nodes, lost_node)
        # The only in-sync copy is gone; the leader's replacement starts empty.
        wait_for(lambda: state().leader == -1 and state().isr == [], timeout_s=60)
        time.sleep(3)
        assert state().leader == -1, "an out-of-sync replica was elected without permission"
        assert f"unclean-{number}" in replicated.status()["offline_partitions"]
        admin.alter_topic_config("unclean", {"unclean.leader.election.enable": "true"})
        wait_for(lambda: state().leader == partition.leader, timeout_s=30)
        assert produce(b"serving again").offset >= 0
    finally:
        ray_nodes.add_node(num_cpus=2, object_store_memory=150 * 2**20)
        ray_nodes.wait_for_nodes()
