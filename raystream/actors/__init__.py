"""The servers: thin Ray actor shells over the storage engine and the pure logic.

- :class:`~raystream.actors.controller.Controller` — one per cluster (detached, named):
  topics, placement, metadata, replica lifecycle.
- :class:`~raystream.actors.replica.PartitionReplica` — one per partition replica:
  produce, fetch with long polling, offsets, retention and compaction.

The actor classes are imported on first use: every replica process imports
:mod:`raystream.actors.replica` through this package, and importing the controller
(and with it the coordinators, placement and metadata) there would cost each replica
memory for code it never runs.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from raystream.protocol import CONTROLLER_NAME

if TYPE_CHECKING:
    from raystream.actors.controller import Controller, ControllerActor
    from raystream.actors.replica import PartitionReplica, ReplicaActor

_LAZY = {
    "Controller": "raystream.actors.controller",
    "ControllerActor": "raystream.actors.controller",
    "PartitionReplica": "raystream.actors.replica",
    "ReplicaActor": "raystream.actors.replica",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'raystream.actors' has no attribute {name!r}")


__all__ = ["CONTROLLER_NAME", "Controller", "ControllerActor", "PartitionReplica", "ReplicaActor"]
