"""The records of ``__consumer_offsets``: committed offsets and group metadata.

The group coordinator keeps its durable state in this internal, compacted, replicated
topic, as Kafka does. Two kinds of record share it, told apart by their key:

* an offset commit, key ``["offset", group, topic, partition]``, value
  ``{"offset", "metadata", "commit_timestamp"}``;
* a group's membership after a rebalance, key ``["group", group]``, value
  :meth:`Group.to_dict <raystream.groups.group.Group.to_dict>`.

Keys are canonical JSON, so compaction keeps exactly the latest value of each; a null
value (tombstone) deletes. A group lives in one partition of the topic, chosen by
:func:`partition_for`, so its records stay in order. Replaying a partition from the
start rebuilds every group it holds (:class:`GroupStore`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from raystream.client.partitioner import murmur2
from raystream.groups.group import Group
from raystream.types import TopicPartition

OFFSETS_TOPIC = "__consumer_offsets"


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed offset: the next offset to read, and the committer's note."""

    offset: int
    metadata: str = ""
    commit_timestamp: int = -1


def partition_for(group_id: str, partitions: int) -> int:
    """The partition of ``__consumer_offsets`` that holds ``group_id``'s records."""
    return (murmur2(group_id.encode()) & 0x7FFFFFFF) % partitions


def _key(*parts: Any) -> bytes:
    return json.dumps(parts, separators=(",", ":")).encode()


def offset_records(group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> pa.Table:
    """One commit as a table for ``Producer.send_batch`` (one batch: all or nothing)."""
    keys = [_key("offset", group_id, tp.topic, tp.partition) for tp in offsets]
    values = [
        json.dumps(
            {"offset": o.offset, "metadata": o.metadata, "commit_timestamp": o.commit_timestamp}
        ).encode()
        for o in offsets.values()
    ]
    return pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary())})


def group_record(group: Group) -> pa.Table:
    """A group's membership after a rebalance, as a one-row table."""
    return pa.table(
        {
            "key": pa.array([_key("group", group.group_id)], pa.binary()),
            "value": pa.array([json.dumps(group.to_dict()).encode()], pa.binary()),
        }
    )


class GroupStore:
    """Every group of some ``__consumer_offsets`` partitions, rebuilt by replaying them.

    Attributes:
        groups: group id -> its membership (stable as last written, sessions fresh).
        offsets: group id -> committed offsets.
    """

    def __init__(self) -> None:
        self.groups: dict[str, Group] = {}
        self.offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}

    def replay(
        self,
        table: pa.Table,
        now: float,
        offsets_only: bool = False,
        membership_only: bool = False,
    ) -> None:
        """Apply records read from the topic, in offset order.

        With ``offsets_only`` (a running coordinator catching up on offsets that
        transactions committed) membership records are left alone, since the live
        groups are newer, and an offset older than the one held (by commit timestamp)
        does not replace it: read_committed reading may return a commit the coordinator
        wrote itself after a newer one it already applied.

        With ``membership_only`` only membership records are applied: a loading
        coordinator reads them on past the last stable offset, since only the
        coordinator writes them, never inside a transaction.
        """
        for key, value in zip(
            table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True
        ):
            if key is None:
                continue
            kind, group_id, *rest = json.loads(key)
            if kind == "offset" and not membership_only:
                tp = TopicPartition(rest[0], rest[1])
                committed = self.offsets.setdefault(group_id, {})
                if value is None:
                    committed.pop(tp, None)
                    continue
                offset = OffsetAndMetadata(**json.loads(value))
                held = committed.get(tp)
                if (
                    offsets_only
                    and held is not None
                    and held.commit_timestamp > offset.commit_timestamp
                ):
                    continue
                committed[tp] = offset
            elif kind == "group" and not offsets_only:
                if value is None:
                    self.groups.pop(group_id, None)
                else:
                    self.groups[group_id] = Group.from_dict(group_id, json.loads(value), now)
