"""The value types users see: topic-partitions, records, metadata and descriptions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple


class TopicPartition(NamedTuple):
    """A partition of a topic, the unit of ordering and assignment."""

    topic: str
    partition: int


class RecordMetadata(NamedTuple):
    """Where an acknowledged record landed (offset -1 with acks=0)."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class ConsumerGroupMetadata(NamedTuple):
    """Who a group consumer is right now (``Consumer.group_metadata()``): what a
    transactional producer passes with offsets so that the group coordinator can refuse
    those of a consumer that is no longer a member of the current generation."""

    group_id: str
    member_id: str
    generation_id: int
    group_instance_id: str | None = None


TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1


class ConsumerRecord(NamedTuple):
    """One record as a consumer sees it (kafka-python's field names).

    ``timestamp_type`` is 0 for CreateTime and 1 for LogAppendTime. ``value`` is bytes
    (or the deserializer's result), None for a tombstone, or a dict for a typed topic.
    ``headers`` is a tuple of (key, value) pairs, ``()`` when the record has none:
    immutable like the record (records are hashable), and without a list per record
    for the garbage collector to track.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: Any
    value: Any
    headers: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class PartitionDescription:
    """A partition's replicas and offsets as the cluster reports them.

    ``leader``, ``replicas`` and ``isr`` are replica ids, stable for the partition's
    life; ``leader`` is -1 while the partition is offline.
    """

    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    leader_epoch: int
    log_start_offset: int
    high_watermark: int
    log_end_offset: int
    nodes: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TopicDescription:
    """A topic: its partitions, its configuration and (typed topics) its value schema."""

    name: str
    partitions: list[PartitionDescription]
    config: dict[str, Any]
    schema: Any = None
    topic_id: str = ""


@dataclass(frozen=True)
class GroupDescription:
    """A consumer group's state, members and offsets.

    ``state`` is Kafka's: "Empty", "PreparingRebalance" or "Stable". ``members`` maps
    member ids to their partitions; ``lag`` is the high watermark minus the committed
    offset; ``protocol`` is the assignment strategy in use; ``instance_ids`` gives
    static members' ``group_instance_id`` (None for dynamic members).
    """

    group_id: str
    state: str
    generation: int
    members: dict[str, list[TopicPartition]]
    offsets: dict[TopicPartition, int]
    lag: dict[TopicPartition, int]
    protocol: str | None = None
    instance_ids: dict[str, str | None] = field(default_factory=dict)
