"""Where replicas go: spread over Ray nodes, one replica of a partition per node.

Kafka's rack-unaware assignment, adapted: partition ``p``'s preferred leader goes to
node ``(start + p) % n`` and its followers to the following nodes, so leaders and
replicas spread evenly and no node holds two replicas of one partition while there are
enough nodes. With fewer nodes than replicas, replicas share nodes (the controller
reports such partitions as not spread).

Example:
    nodes [a, b, c], 4 partitions, replication factor 2, start 0:
    p0 -> [a, b], p1 -> [b, c], p2 -> [c, a], p3 -> [a, b]
"""

from __future__ import annotations

from collections import Counter

from raystream.controller.metadata import TopicState
from raystream.errors import InvalidPartitionsError

REPLICA_MEMORY_BYTES = 128 << 20
"""Memory a replica takes at rest: each is its own actor process (Python, pyarrow and
Ray's worker: about 91 MiB unique and 98 MiB proportional set size measured on Linux),
with room for its buffers. A node's default replica limit is its memory over this."""


def place_replicas(
    nodes: list[str], partitions: int, replication_factor: int, start: int = 0, first: int = 0
) -> list[list[str]]:
    """Nodes for each new partition's replicas, preferred leader first.

    Args:
        nodes: live node ids, in a stable order.
        partitions: how many partitions to place.
        replication_factor: replicas per partition.
        start: rotation, so that topics do not all put their leaders on one node.
        first: index of the first partition placed (when adding partitions).

    Raises:
        ValueError: no nodes.
    """
    if not nodes:
        raise ValueError("no alive nodes to place replicas on")
    n = len(nodes)
    placement = []
    for p in range(first, first + partitions):
        leader = (start + p) % n
        placement.append([nodes[(leader + r) % n] for r in range(replication_factor)])
    return placement


def is_spread(assigned: list[str]) -> bool:
    """Whether every replica of a partition is on a different node."""
    return len(set(assigned)) == len(assigned)


def rebind_restarted_nodes(topics: list[TopicState], hosts: dict[str, str]) -> list[TopicState]:
    """Point replicas whose node id is stale at the live node with the same address.

    Ray gives a node a new id each time it starts, while a replica's data stays on its
    node's disk: after Ray restarts (a reboot, ``ray stop`` and ``ray start``, the
    embedded cluster of a new process) every recorded node id is stale. Kafka keys a
    broker by a ``broker.id`` kept in its log directory; here the node's address plays
    that part. A replica recorded without an address (older metadata) is rebound only
    when every live node has one address: then its disk can only be there. A replica
    with no match keeps its stale node and counts as lost with it. Returns the topics
    changed.

    Example:
        replica 0 on node "n1" at 10.0.0.1, replica 1 on "n2" at 10.0.0.2; after a
        restart the live nodes are {"m1": 10.0.0.1, "m3": 10.0.0.3}: replica 0 moves to
        "m1" (its disk is there), replica 1 keeps "n2" and is lost with that machine.
    """
    by_host: dict[str, str] = {}
    for node, host in sorted(hosts.items()):
        by_host.setdefault(host, node)
    only = next(iter(by_host.values())) if len(by_host) == 1 else None
    changed = []
    for topic in topics:
        moved = False
        for state in topic.partitions:
            for replica_id, node in sorted(state.nodes.items()):
                if node in hosts:
                    continue
                host = state.hosts.get(replica_id)
                target = only if host is None else by_host.get(host)
                if target is not None:
                    state.nodes[replica_id] = target
                    moved = True
        if moved:
            changed.append(topic)
    return changed


def replica_limits(node_memory: dict[str, float], max_replicas_per_node: int) -> dict[str, int]:
    """How many replicas each live node may hold.

    Args:
        node_memory: live node id -> bytes of memory Ray may hand out there (the
            node's ``memory`` resource).
        max_replicas_per_node: the broker's ``max.replicas.per.node``; 0 (the
            default) derives each node's limit from its memory (at least 1), as
            Redpanda bounds partitions by its ``topic_partitions_per_shard``.

    Example:
        >>> replica_limits({"a": 16 * 2**30, "b": 1}, 0)
        {'a': 128, 'b': 1}
    """
    if max_replicas_per_node > 0:
        return dict.fromkeys(node_memory, max_replicas_per_node)
    return {
        node: max(int(memory // REPLICA_MEMORY_BYTES), 1) for node, memory in node_memory.items()
    }


def check_capacity(
    topic: str,
    placement: list[list[str]],
    existing: Counter[str],
    limits: dict[str, int],
) -> None:
    """Refuse, before anything starts, new partitions the cluster cannot hold.

    Each replica is an actor process, so a node holds as many as its memory allows
    (:func:`replica_limits`); a topic with more partitions than the cluster can place
    would start actors until the node runs out of memory and fail halfway.

    Args:
        topic: the topic created or grown (for the message).
        placement: the new partitions' nodes, from :func:`place_replicas`.
        existing: replicas each node holds already.
        limits: each live node's limit.

    Raises:
        InvalidPartitionsError: naming the partition count, the node over its limit,
            the limit and how many more replicas the cluster has room for.
    """
    added = Counter(node for assigned in placement for node in assigned)
    for node, count in sorted(added.items()):
        limit = limits.get(node, 0)
        if existing[node] + count > limit:
            room = sum(max(limits[n] - existing[n], 0) for n in limits)
            rf = len(placement[0])
            raise InvalidPartitionsError(
                f"{len(placement)} new partitions of topic {topic!r} (replication factor "
                f"{rf}) would put {existing[node] + count} replicas on node {node}, over its "
                f"limit of {limit} (max.replicas.per.node; 0 derives it from the node's "
                f"memory); the cluster has room for {room} more replicas (at "
                f"most {room // rf} partitions at this replication factor)"
            )
