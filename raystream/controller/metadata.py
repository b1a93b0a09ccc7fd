"""Cluster metadata as plain data: topics, partitions, replicas, leaders, epochs.

The controller keeps one :class:`TopicState` per topic and persists it, whole, as a
record keyed by the topic name in a compacted metadata log (a tombstone when the topic
is deleted). Replaying that log rebuilds the metadata: the log stores its own metadata,
as KRaft does in Kafka.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa

from raystream.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
)

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")
INTERNAL_PREFIX = "__"


def validate_topic_name(name: object) -> str:
    """Check a topic name against Kafka's rules and return it.

    Raises:
        InvalidTopicError: naming the name and the rule it breaks.
    """
    if not isinstance(name, str):
        raise InvalidTopicError(f"topic name must be a string, not {type(name).__name__}")
    if not name:
        raise InvalidTopicError("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name {name!r} is not allowed")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"topic name {name[:40]!r}... is {len(name)} characters, over {MAX_TOPIC_NAME_LENGTH}"
        )
    if not _LEGAL_NAME.match(name):
        raise InvalidTopicError(f"topic name {name!r} has characters outside [a-zA-Z0-9._-]")
    return name


def validate_count(value: object, what: str) -> int:
    """Check a partition count or replication factor (an int >= 1) and return it."""
    error = InvalidPartitionsError if what == "partitions" else InvalidReplicationFactorError
    if not isinstance(value, int) or isinstance(value, bool):
        raise error(f"{what} must be an integer, not {value!r}")
    if value < 1:
        raise error(f"{what} must be >= 1, not {value}")
    return value


def is_internal(name: str) -> bool:
    """Internal topics (consumer offsets, transaction state) start with ``__``."""
    return name.startswith(INTERNAL_PREFIX)


def check_not_internal(name: object, action: str) -> None:
    """Refuse a client's ``action`` (create, delete, grow, alter) on an internal topic.

    The cluster alone creates and sizes ``__consumer_offsets`` and
    ``__transaction_state`` and keeps its metadata under ``__cluster_metadata``: a client
    that deleted, grew or re-configured them would lose every group's offsets or break
    the coordinators' mapping of ids to partitions, as Kafka's rule says. Moving their
    replicas and electing their leaders stay allowed: those change neither their
    records nor their partition count, and an operator needs them to retire a node.

    Raises:
        InvalidTopicError: naming the topic and the refused action.
    """
    if isinstance(name, str) and is_internal(name):
        raise InvalidTopicError(
            f"cannot {action} topic {name!r}: names starting with {INTERNAL_PREFIX!r} are "
            "internal topics, which only the cluster creates and changes"
        )


@dataclass
class PartitionState:
    """One partition's replica set and leadership.

    Attributes:
        replicas: replica ids, the preferred leader first.
        nodes: replica id -> Ray node id the replica is pinned to.
        leader: replica id of the leader, -1 when offline.
        leader_epoch: bumped at every leader change.
        isr: replica ids in sync with the leader.
        partition_epoch: bumped at every change of this state (fences stale updates).
        hosts: replica id -> address of its node. Unlike the node id, which Ray makes
            anew each time a node starts, the address survives a restart of Ray, so
            the controller can find a replica's disk again (empty in records written
            before it was kept).
    """

    partition: int
    replicas: list[int]
    nodes: dict[int, str]
    leader: int
    leader_epoch: int = 0
    isr: list[int] = field(default_factory=list)
    partition_epoch: int = 0
    hosts: dict[int, str] = field(default_factory=dict)


@dataclass
class TopicState:
    """A topic as the controller knows it.

    ``config`` holds only the overrides given at creation or alteration (Kafka's dotted
    names); ``value_schema`` is the serialized Arrow schema of a typed topic.

    ``creating_from`` makes creation atomic: the controller records the whole intended
    topic (or its added partitions) before it starts any replica, with
    ``creating_from`` the index of the first partition whose replicas are not all
    serving yet (0: the whole topic). Clients see only the partitions before it (a
    topic being created does not exist for them), so a topic appears whole or not at
    all; once every new replica serves, the controller records it again with None. A
    creation that fails is rolled back (replicas deleted, record removed); one left
    behind by a controller that died is finished, or rolled back, by the restarted
    controller.
    """

    name: str
    topic_id: str
    partitions: list[PartitionState]
    config: dict[str, Any] = field(default_factory=dict)
    value_schema: bytes | None = None
    creating_from: int | None = None

    def visible_partitions(self) -> list[PartitionState]:
        """The partitions clients see: those whose replicas all started.

        A copy, so a caller that reads it outside the controller's lock is not
        surprised by a partition that ``create_partitions`` appends meanwhile.
        """
        if self.creating_from is None:
            return list(self.partitions)
        return self.partitions[: self.creating_from]

    def schema(self) -> pa.Schema | None:
        """The typed topic's value schema, or None for a byte topic."""
        if self.value_schema is None:
            return None
        return pa.ipc.read_schema(pa.py_buffer(self.value_schema))

    def to_json(self) -> str:
        """The state as a metadata-log record value."""
        data = asdict(self)
        data["value_schema"] = (
            None if self.value_schema is None else base64.b64encode(self.value_schema).decode()
        )
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TopicState:
        """Rebuild a state from :meth:`to_json`'s output."""
        data = json.loads(text)
        partitions = [
            PartitionState(
                **{
                    **p,
                    "nodes": {int(k): v for k, v in p["nodes"].items()},
                    "hosts": {int(k): v for k, v in p.get("hosts", {}).items()},
                }
            )
            for p in data.pop("partitions")
        ]
        schema = data.pop("value_schema")
        return cls(
            partitions=partitions,
            value_schema=None if schema is None else base64.b64decode(schema),
            **data,
        )


def topic_counts(topics: Iterable[TopicState]) -> dict[str, int]:
    """How many topics, partitions and replicas clients see, user and internal apart.

    Each figure counts the same topics, so that they add up: a topic being created is
    not counted yet (clients do not see it), and of a topic being grown only the
    partitions clients see are. Example: ``orders`` (3 partitions, replication factor
    1) and the 1-partition ``__consumer_offsets`` give ``{"topics": 1, "partitions": 3,
    "replicas": 3, "internal_topics": 1, "internal_partitions": 1,
    "internal_replicas": 1}``.
    """
    counts = dict.fromkeys(
        (
            "topics",
            "partitions",
            "replicas",
            "internal_topics",
            "internal_partitions",
            "internal_replicas",
        ),
        0,
    )
    for topic in topics:
        if topic.creating_from == 0:
            continue
        prefix = "internal_" if is_internal(topic.name) else ""
        partitions = topic.visible_partitions()
        counts[f"{prefix}topics"] += 1
        counts[f"{prefix}partitions"] += len(partitions)
        counts[f"{prefix}replicas"] += sum(len(p.replicas) for p in partitions)
    return counts
