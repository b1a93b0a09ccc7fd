"""The servers: thin Ray actor shells over the storage engine and the pure logic.

- :class:`~raystream.actors.controller.Controller` — one per cluster (detached, named):
  topics, placement, metadata, replica lifecycle.
- :class:`~raystream.actors.replica.PartitionReplica` — one per partition replica:
  produce, fetch with long polling, offsets, retention and compaction.
"""

from raystream.actors.controller import Controller, ControllerActor
from raystream.actors.replica import PartitionReplica, ReplicaActor
from raystream.protocol import CONTROLLER_NAME

__all__ = ["CONTROLLER_NAME", "Controller", "ControllerActor", "PartitionReplica", "ReplicaActor"]
