"""The Kafka APIs the listener serves: which versions, and the handler of each.

One table, :data:`APIS`, says everything a client can negotiate: ApiVersions answers
from it, the server refuses what is not in it (UNSUPPORTED_VERSION, never a dropped
connection), and a new API is one line here plus its handler. A handler is
``async (call, request) -> dict | None``: it reads the kio request of whatever version
the client sent and answers with a dict in the newest version's field names, which
:func:`raystream.kafka.codec.build` fits to the client's version (None: no answer, as
for a Produce with ``acks=0``). Handlers translate, nothing more: every action is a
typed request of :mod:`raystream.requests` (or a controller call) sent through the
:class:`~raystream.kafka.call.Backend`, so authorization, quotas and metrics in the
actors' one request path see Kafka clients' requests as they see raystream's own.

Why these versions: the newest kio knows (Kafka 4's) down to the oldest that carries
record batches v2 and is still sent by the clients we test (kafka-python, aiokafka,
librdkafka); a client picks the highest version both sides know. Pure: no Ray here; the
listener actor provides the Backend.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from raystream.errors import RaystreamError
from raystream.kafka import acl_apis, admin, auth, data, groups, quotas, txn
from raystream.kafka.call import NO_BROKER, NONE, Call, Handler
from raystream.protocol import TopicMetadata

UNSUPPORTED_VERSION = 35
LEADER_NOT_AVAILABLE = 5


@dataclass(frozen=True, slots=True)
class Api:
    """One supported API: its key, name, version range and handler."""

    key: int
    name: str
    min_version: int
    max_version: int
    handler: Handler

    def supports(self, version: int) -> bool:
        """Whether ``version`` is in the served range."""
        return self.min_version <= version <= self.max_version


# ------------------------------------------------------------------ ApiVersions


async def api_versions(call: Call, request: Any) -> Mapping[str, Any]:
    """The supported APIs and their version ranges (KIP-511: the client's name and
    version arrive in v3+; nothing is done with them yet)."""
    return {"error_code": NONE, "api_keys": supported_api_keys(), "throttle_time": 0}


def supported_api_keys() -> list[dict[str, int]]:
    """ApiVersions' list: every API of :data:`APIS` with its version range."""
    return [
        {"api_key": a.key, "min_version": a.min_version, "max_version": a.max_version}
        for a in sorted(APIS.values(), key=lambda a: a.key)
    ]


# --------------------------------------------------------------------- Metadata


async def metadata(call: Call, request: Any) -> Mapping[str, Any]:
    """Brokers (one per live listener) and the asked topics' partitions, each leader
    named by the broker id of the node its leader replica runs on, so a client sends
    produce and fetch requests to the listener next to the data."""
    backend = call.backend
    names = None if request.topics is None else [t.name for t in request.topics]
    # The registry and the topics at once: a producer's first records wait for this.
    (brokers, node_ids), found = await asyncio.gather(backend.brokers(), backend.topics(names))
    live = {b.broker_id for b in brokers}
    topics = []
    for name, meta in zip(names if names is not None else [None] * len(found), found, strict=True):
        if isinstance(meta, RaystreamError):
            topics.append({"error_code": meta.code, "name": name, "partitions": ()})
        else:
            topics.append(_topic_entry(meta, node_ids, live))
    controller_id = min(live) if live else NO_BROKER
    return {
        "throttle_time": 0,
        "brokers": [
            {"node_id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack}
            for b in brokers
        ],
        "cluster_id": backend.cluster_id,
        "controller_id": controller_id,
        "topics": topics,
    }


def _topic_entry(meta: TopicMetadata, node_ids: Mapping[str, int], live: set[int]) -> dict:
    """One topic of a Metadata answer: replicas named by their nodes' broker ids."""
    partitions = []
    for p in meta.partitions:
        replicas = [node_ids.get(p.nodes.get(r, ""), NO_BROKER) for r in p.replicas]
        isr = [node_ids.get(p.nodes.get(r, ""), NO_BROKER) for r in p.isr]
        leader = node_ids.get(p.leader_node or "", NO_BROKER)
        if leader not in live:
            leader = NO_BROKER
        partitions.append(
            {
                "error_code": NONE if leader != NO_BROKER else LEADER_NOT_AVAILABLE,
                "partition_index": p.partition,
                "leader_id": leader,
                "leader_epoch": p.leader_epoch,
                "replica_nodes": replicas,
                "isr_nodes": isr,
                "offline_replicas": [b for b in replicas if b not in live],
            }
        )
    return {
        "error_code": NONE,
        "name": meta.name,
        "topic_id": meta.topic_id or None,
        "is_internal": meta.name.startswith("__"),
        "partitions": partitions,
        "topic_authorized_operations": -2147483648,
    }


APIS: dict[int, Api] = {
    api.key: api
    for api in (
        Api(0, "Produce", 3, 13, data.produce),
        Api(1, "Fetch", 4, 18, data.fetch),
        Api(2, "ListOffsets", 1, 11, data.list_offsets),
        Api(3, "Metadata", 0, 12, metadata),
        # OffsetCommit/OffsetFetch v10 name topics by id only (KIP-848 era): not yet.
        Api(8, "OffsetCommit", 2, 9, groups.offset_commit),
        Api(9, "OffsetFetch", 1, 9, groups.offset_fetch),
        Api(10, "FindCoordinator", 0, 6, groups.find_coordinator),
        Api(11, "JoinGroup", 0, 9, groups.join_group),
        Api(12, "Heartbeat", 0, 4, groups.heartbeat),
        Api(13, "LeaveGroup", 0, 5, groups.leave_group),
        Api(14, "SyncGroup", 0, 5, groups.sync_group),
        Api(15, "DescribeGroups", 0, 6, groups.describe_groups),
        Api(16, "ListGroups", 0, 5, groups.list_groups),
        Api(17, "SaslHandshake", 1, 1, auth.sasl_handshake),
        Api(18, "ApiVersions", 0, 4, api_versions),
        Api(19, "CreateTopics", 2, 7, admin.create_topics),
        Api(20, "DeleteTopics", 1, 6, admin.delete_topics),
        Api(21, "DeleteRecords", 0, 2, data.delete_records),
        Api(22, "InitProducerId", 0, 5, txn.init_producer_id),
        Api(23, "OffsetForLeaderEpoch", 2, 4, data.offset_for_leader_epoch),
        Api(24, "AddPartitionsToTxn", 0, 3, txn.add_partitions_to_txn),
        Api(25, "AddOffsetsToTxn", 0, 4, txn.add_offsets_to_txn),
        Api(26, "EndTxn", 0, 4, txn.end_txn),
        Api(28, "TxnOffsetCommit", 0, 4, txn.txn_offset_commit),
        Api(29, "DescribeAcls", 1, 3, acl_apis.describe_acls),
        Api(30, "CreateAcls", 1, 3, acl_apis.create_acls),
        Api(31, "DeleteAcls", 1, 3, acl_apis.delete_acls),
        Api(32, "DescribeConfigs", 1, 4, admin.describe_configs),
        Api(33, "AlterConfigs", 0, 2, admin.alter_configs),
        Api(36, "SaslAuthenticate", 0, 2, auth.sasl_authenticate),
        Api(37, "CreatePartitions", 0, 3, admin.create_partitions),
        Api(42, "DeleteGroups", 0, 2, groups.delete_groups),
        Api(44, "IncrementalAlterConfigs", 0, 1, admin.incremental_alter_configs),
        Api(48, "DescribeClientQuotas", 0, 1, quotas.describe_client_quotas),
        Api(49, "AlterClientQuotas", 0, 1, quotas.alter_client_quotas),
        Api(50, "DescribeUserScramCredentials", 0, 0, auth.describe_user_scram_credentials),
        Api(51, "AlterUserScramCredentials", 0, 0, auth.alter_user_scram_credentials),
        Api(60, "DescribeCluster", 0, 2, admin.describe_cluster),
    )
}
"""Every API the listener serves, by key."""
