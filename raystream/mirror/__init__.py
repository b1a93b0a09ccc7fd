"""MirrorMaker on Ray: topics mirrored between clusters, MirrorMaker 2's model.

``rs.mirror`` is this package. :class:`MirrorMaker` mirrors the topics of a source
cluster into a target, each another raystream cluster or any Kafka-protocol cluster
through confluent-kafka (:mod:`clusters`), in either direction: remote topics named
``<alias>.<topic>`` (:mod:`policy`), offset syncs and checkpoints so a consumer group
can move over (:mod:`offsets`), heartbeats, lag per partition; ``raystream mirror
--config FILE`` reads MirrorMaker 2's properties files (:mod:`config`). The work is
done by MM2's three connectors (:mod:`connectors`), Connect connectors like any other.
"""

from raystream.mirror.config import ClusterSpec, FlowSettings, flows_from_properties
from raystream.mirror.connectors import (
    MirrorCheckpointConnector,
    MirrorCheckpointTask,
    MirrorHeartbeatConnector,
    MirrorHeartbeatTask,
    MirrorSourceConnector,
    MirrorSourceTask,
)
from raystream.mirror.maker import MirrorMaker
from raystream.mirror.offsets import Checkpoint, Heartbeat, OffsetSync, OffsetSyncStore
from raystream.mirror.policy import (
    DefaultReplicationPolicy,
    IdentityReplicationPolicy,
    ReplicationPolicy,
)

__all__ = [
    "Checkpoint",
    "ClusterSpec",
    "DefaultReplicationPolicy",
    "FlowSettings",
    "Heartbeat",
    "IdentityReplicationPolicy",
    "MirrorCheckpointConnector",
    "MirrorCheckpointTask",
    "MirrorHeartbeatConnector",
    "MirrorHeartbeatTask",
    "MirrorMaker",
    "MirrorSourceConnector",
    "MirrorSourceTask",
    "OffsetSync",
    "OffsetSyncStore",
    "ReplicationPolicy",
    "flows_from_properties",
]
