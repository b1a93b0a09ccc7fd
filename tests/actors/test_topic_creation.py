"""Topic creation on a real Ray: atomic, never blocking metadata, bounded by the nodes.

Slow creations are real (replica actors are processes that take a while to start), a
failing one is made by a file where a replica's log directory must go, and a too-short
``timeout_ms`` makes one time out: no mocks.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
import ray

import raystream as rs
from raystream.actors.controller import replica_actor_name
from raystream.errors import (
    BrokerNotAvailableError,
    InvalidPartitionsError,
    InvalidTopicError,
    RaystreamTimeoutError,
    UnknownTopicOrPartitionError,
)

INTERNAL = ["__consumer_offsets", "__transaction_state", "__cluster_metadata"]


@pytest.fixture
def shared(shared_cluster):
    """The module's cluster, for tests that only add their own topics."""
    return shared_cluster


def replica_actors(cluster: rs.Cluster, topic: str) -> list[str]:
    """Names of the topic's replica actors that hold their name in the cluster's
    namespace (alive or restarting; Ray frees a dead actor's name)."""
    return sorted(
        actor["name"]
        for actor in ray.util.list_named_actors(all_namespaces=True)
        if actor["namespace"] == cluster.namespace and actor["name"].startswith(f"replica:{topic}:")
    )


def wait_for_actor(cluster: rs.Cluster, name: str, timeout_s: float = 60) -> None:
    """Wait until Ray has registered the named actor (its creation has begun)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            ray.get_actor(name, namespace=cluster.namespace)
            return
        except ValueError:
            assert time.monotonic() < deadline, f"{name} was never created"
            time.sleep(0.01)


def log_dirs(cluster: rs.Cluster, topic: str) -> list[str]:
    """The topic's replica log directories in the cluster's data dir."""
    return sorted(d for d in os.listdir(cluster.data_dir) if d.startswith(f"{topic}-"))


def assert_absent(cluster: rs.Cluster, topic: str) -> None:
    """The topic is gone for clients and no replica actor of it remains."""
    assert topic not in cluster.call("list_topics", True)
    with pytest.raises(UnknownTopicOrPartitionError):
        cluster.topic_metadata(topic, refresh=True)
    assert replica_actors(cluster, topic) == []


def test_admin_changes_to_internal_topics_are_refused(shared) -> None:
    shared.coordinator()  # creates __consumer_offsets
    shared.transaction_coordinator()  # and __transaction_state
    admin = shared.admin()
    before = {name: admin.describe_topic(name) for name in INTERNAL[:2]}
    for name in INTERNAL:
        calls: list[tuple[str, Any]] = [
            ("create", lambda n=name: admin.create_topic(n)),
            ("delete", lambda n=name: admin.delete_topic(n)),
            ("add partitions to", lambda n=name: admin.create_partitions(n, 5)),
            (
                "alter the config of",
                lambda n=name: admin.alter_topic_config(n, {"cleanup.policy": "delete"}),
            ),
        ]
        for action, call in calls:
            with pytest.raises(InvalidTopicError, match=f"cannot {action} topic '{name}'"):
                call()
    with pytest.raises(InvalidTopicError, match=r"'__mine'.*internal"):
        admin.create_topic("__mine")
    for name, description in before.items():
        after = admin.describe_topic(name)
        assert len(after.partitions) == len(description.partitions)
        assert after.config == description.config
        assert after.config["cleanup.policy"] == "compact"
    assert set(INTERNAL[:2]) <= set(shared.call("list_topics", True))
    assert admin.elect_leaders(INTERNAL[:2]) == 0  # electing (and reassigning) stays allowed


def test_metadata_answers_while_a_creation_waits_for_its_replicas(shared) -> None:
    admin = shared.admin()
    admin.create_topic("ready")
    controller = shared.controller
    creation = controller.create_topic.remote("slow", 6)
    wait_for_actor(shared, replica_actor_name("slow", 0, 0))  # the creation is under way
    (metadata,) = ray.get(controller.metadata.remote(["ready"]), timeout=60).unwrap()
    done, _ = ray.wait([creation], timeout=0)
    assert not done, "the metadata lookup waited for the other topic's creation"
    assert metadata.partitions[0].leader_handle is not None
    # Until every replica serves, the topic does not exist for clients.
    assert "slow" not in admin.list_topics()
    hidden = ray.get(controller.metadata.remote(["slow"]), timeout=60)
    assert isinstance(hidden.error(), UnknownTopicOrPartitionError)
    created = ray.get(creation, timeout=300).unwrap()
    assert len(created.partitions) == 6
    assert all(p.leader_handle is not None for p in created.partitions)
    assert "slow" in admin.list_topics()


def test_a_failed_creation_leaves_nothing_behind(shared) -> None:
    admin = shared.admin()
    blocker = os.path.join(shared.data_dir, "broken-1.r0")  # where partition 1's log goes
    with open(blocker, "w") as f:
        f.write("in the way")
    with pytest.raises(BrokerNotAvailableError, match=r"'broken'.*replica:broken:1:0"):
        admin.create_topic("broken", partitions=2)
    assert_absent(shared, "broken")
    os.remove(blocker)
    description = admin.create_topic("broken", partitions=2)
    assert [p.leader for p in description.partitions] == [0, 0]


def test_a_creation_past_its_timeout_is_rolled_back(shared) -> None:
    admin = shared.admin()
    with pytest.raises(RaystreamTimeoutError, match=r"'late' was not created.*rolled back"):
        admin.create_topic("late", partitions=3, timeout_ms=1)
    assert_absent(shared, "late")
    assert len(admin.create_topic("late", partitions=3).partitions) == 3


def test_a_controller_killed_mid_creation_ends_with_the_topic_whole_or_absent(cluster) -> None:
    controller = cluster.controller
    creation = controller.create_topic.remote("mid", 4)
    wait_for_actor(cluster, replica_actor_name("mid", 0, 0))
    ray.kill(controller, no_restart=False)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(creation, timeout=120)  # killed before it answered: mid-creation
    deadline = time.monotonic() + 180
    while True:
        assert time.monotonic() < deadline, "the half-made topic was neither finished nor removed"
        try:
            metadata = cluster.topic_metadata("mid", refresh=True)
        except UnknownTopicOrPartitionError:
            if replica_actors(cluster, "mid") == []:
                break  # rolled back
        else:
            assert len(metadata.partitions) == 4  # never seen half made
            leaders = [p.leader_handle for p in metadata.partitions]
            assert ray.get([h.ping.remote() for h in leaders], timeout=60)
            assert "mid" in cluster.admin().list_topics()
            break  # finished
        time.sleep(0.1)


def test_partitions_beyond_the_nodes_replica_limit_are_refused_up_front(cluster_factory) -> None:
    cluster = cluster_factory(broker_config={"max.replicas.per.node": 3})
    admin = cluster.admin()
    refused = r"new partitions of topic '{}'.*over its limit of 3.*room for {} more replicas"
    with pytest.raises(InvalidPartitionsError, match="^4 " + refused.format("big", 3)):
        admin.create_topic("big", partitions=4)
    assert_absent(cluster, "big")
    assert log_dirs(cluster, "big") == []
    admin.create_topic("fits", partitions=2)
    with pytest.raises(InvalidPartitionsError, match="^2 " + refused.format("fits", 1)):
        admin.create_partitions("fits", 4)
    assert len(admin.describe_topic("fits").partitions) == 2
    assert replica_actors(cluster, "fits") == ["replica:fits:0:0", "replica:fits:1:0"]
    assert log_dirs(cluster, "fits") == ["fits-0.r0", "fits-1.r0"]
    assert len(admin.create_partitions("fits", 3).partitions) == 3


def test_a_million_partitions_are_refused_by_the_memory_derived_limit(shared) -> None:
    with pytest.raises(InvalidPartitionsError, match=r"1000000 new partitions.*over its limit"):
        shared.admin().create_topic("huge", partitions=1_000_000)
    assert_absent(shared, "huge")
