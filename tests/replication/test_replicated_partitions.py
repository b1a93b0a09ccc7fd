"""Replicated partitions on a real 3-node Ray: placement, copying, ISR, acks=all.

Needs its own multi-node Ray cluster (see this directory's conftest).
"""

from __future__ import annotations

import pytest
import ray

from raystream.records import build_batch
from raystream.types import TopicPartition

pytestmark = pytest.mark.slow


def produce(cluster, topic, values, acks="all", partition=0):
    metadata = cluster.topic_metadata(topic, refresh=True)
    batch = build_batch(
        metadata.record_schema, [None] * len(values), values, [1] * len(values), None
    )
    return ray.get(metadata.partitions[partition].leader_handle.produce.remote(batch, acks, 10000))


def replica_states(cluster, topic, partition=0):
    description = cluster.admin().describe_topic(topic)
    p = description.partitions[partition]
    handles = [
        ray.get_actor(f"replica:{topic}:{partition}:{r}", namespace=cluster.namespace)
        for r in p.replicas
    ]
    return p, ray.get([h.state.remote() for h in handles])


def test_replicas_are_spread_over_nodes_and_followers_copy_the_leader(
    replicated, wait_until
) -> None:
    replicated.admin().create_topic("spread", partitions=2, replication_factor=3)
    partition, _ = replica_states(replicated, "spread")
    assert len(set(partition.nodes.values())) == 3
    assert partition.isr == [0, 1, 2]
    response = produce(replicated, "spread", [b"a", b"b", b"c"])
    assert response.error_code == 0, response.message

    def copied():
        _, states = replica_states(replicated, "spread")
        return all(s["log_end_offset"] == 3 and s["high_watermark"] == 3 for s in states)

    wait_until(copied, 30, "every replica at log end offset 3 and high watermark 3")
    _, states = replica_states(replicated, "spread")
    assert sorted(s["role"] for s in states) == ["follower", "follower", "leader"]
    assert replicated.status()["partitions_not_spread"] == []


def test_acks_all_is_refused_when_the_isr_is_below_min_insync_replicas(
    replicated, chaos, wait_until
) -> None:
    admin = replicated.admin()
    admin.create_topic("strict", replication_factor=3, config={"min.insync.replicas": 3})
    assert produce(replicated, "strict", [b"ok"]).error_code == 0
    assert admin.describe_topic("strict").partitions[0].leader != 2
    follower = ray.get_actor("replica:strict:0:2", namespace=replicated.namespace)
    chaos.kill_actor(follower, "follower 2", restart=False)
    chaos.verify()
    wait_until(
        lambda: admin.describe_topic("strict").partitions[0].isr == [0, 1],
        30,
        "the ISR without the killed follower",
    )
    refused = produce(replicated, "strict", [b"refused"])
    assert refused.error_code == 19, refused.message
    assert "min.insync.replicas=3" in refused.message
    assert produce(replicated, "strict", [b"acks=1 is fine"], acks=1).error_code == 0
    assert "strict-0" in replicated.status()["under_replicated_partitions"]


def test_preferred_leader_election_moves_leadership_back(replicated, chaos, wait_until) -> None:
    admin = replicated.admin()
    admin.create_topic("prefer", replication_factor=3)
    assert admin.describe_topic("prefer").partitions[0].leader == 0  # the preferred one
    leader = ray.get_actor("replica:prefer:0:0", namespace=replicated.namespace)
    chaos.kill_actor(leader, "leader 0")  # replica 0 restarts and hands leadership over
    wait_until(
        lambda: admin.describe_topic("prefer").partitions[0].leader not in (-1, 0),
        30,
        "another replica leading",
    )
    chaos.verify()
    wait_until(
        lambda: admin.describe_topic("prefer").partitions[0].isr == [0, 1, 2],
        30,
        "the restarted replica 0 back in the ISR",
    )
    assert admin.elect_leaders(["prefer"]) == 1
    partition = admin.describe_topic("prefer").partitions[0]
    assert partition.leader == 0
    assert produce(replicated, "prefer", [b"after"]).error_code == 0


def test_reassignment_moves_replicas_without_losing_records(replicated) -> None:
    admin = replicated.admin()
    admin.create_topic("move", replication_factor=2)
    assert produce(replicated, "move", [b"a", b"b"]).error_code == 0
    before = admin.describe_topic("move").partitions[0]
    nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
    spare = next(n for n in nodes if n not in before.nodes.values())
    target = [spare, before.nodes[before.replicas[0]]]
    new_ids = admin.reassign_partitions("move", {0: target})[0]
    after = admin.describe_topic("move").partitions[0]
    assert after.replicas == new_ids
    assert [after.nodes[r] for r in after.replicas] == target
    assert after.leader == new_ids[0]
    assert sorted(after.isr) == sorted(new_ids)
    assert produce(replicated, "move", [b"c"]).base_offset == 2


def test_followers_take_the_leaders_log_start_so_deleted_records_stay_deleted(
    replicated, chaos, wait_until
) -> None:
    admin = replicated.admin()
    admin.create_topic("trimmed", replication_factor=3)
    assert produce(replicated, "trimmed", [b"%d" % i for i in range(10)]).error_code == 0
    tp = TopicPartition("trimmed", 0)
    assert admin.delete_records({tp: 6}) == {tp: 6}

    def followers_trimmed():
        _, states = replica_states(replicated, "trimmed")
        return all(s["log_start_offset"] == 6 for s in states)

    wait_until(followers_trimmed, 30, "every replica's log start offset at 6")
    old_leader = admin.describe_topic("trimmed").partitions[0].leader
    chaos.kill_actor(
        ray.get_actor(f"replica:trimmed:0:{old_leader}", namespace=replicated.namespace),
        "the leader of trimmed-0",
        restart=False,
    )
    chaos.verify(min_faults=1)
    wait_until(
        lambda: admin.describe_topic("trimmed").partitions[0].leader not in (old_leader, -1, None),
        30,
        "a new leader elected from the followers",
    )
    with replicated.consumer(auto_offset_reset="earliest") as consumer:
        assert consumer.beginning_offsets([tp]) == {tp: 6}
