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

A record that does not decode (not JSON, an unknown kind, a field of the wrong type) is
skipped by the replay and reported (its offset and why), never applied half-way and
never in the way of the records after it: one bad record must not stop a coordinator
from loading every other group.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from raystream.client.partitioner import murmur2
from raystream.errors import InvalidRecordError
from raystream.groups.group import Group
from raystream.records import keyed_rows
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


def deletion_records(group_id: str, partitions: Iterable[TopicPartition]) -> pa.Table:
    """Tombstones of a deleted group: its membership and each of its committed offsets
    (compaction then drops the group from the topic for good)."""
    keys = [_key("group", group_id)]
    keys += [_key("offset", group_id, tp.topic, tp.partition) for tp in partitions]
    return pa.table(
        {
            "key": pa.array(keys, pa.binary()),
            "value": pa.array([None] * len(keys), pa.binary()),
        }
    )


def group_record(group: Group) -> pa.Table:
    """A group's membership after a rebalance, as a one-row table."""
    return pa.table(
        {
            "key": pa.array([_key("group", group.group_id)], pa.binary()),
            "value": pa.array([json.dumps(group.to_dict()).encode()], pa.binary()),
        }
    )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_optional_str(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _is_partition_list(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(v, list) and len(v) == 2 and _is_str(v[0]) and _is_int(v[1]) for v in value
    )


def _is_base64(value: Any) -> bool:
    try:
        base64.b64decode(value, validate=True)
    except (TypeError, ValueError):
        return False
    return isinstance(value, str)


def _is_protocol_list(value: Any) -> bool:
    """A client-assigned member's protocols: ``[name, base64 metadata]`` pairs."""
    return isinstance(value, list) and all(
        isinstance(v, list) and len(v) == 2 and _is_str(v[0]) and _is_base64(v[1]) for v in value
    )


def _check_fields(
    data: Any, fields: Mapping[str, Callable[[Any], bool]], optional: frozenset[str], what: str
) -> None:
    """Raise InvalidRecordError unless ``data`` is a JSON object whose every field passes
    its check (``optional`` ones may be missing) and has no other field."""
    if not isinstance(data, dict):
        raise InvalidRecordError(f"{what} must be a JSON object, not {data!r}")
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise InvalidRecordError(f"{what} has unknown fields {unknown}")
    for name, check in fields.items():
        if name not in data:
            if name in optional:
                continue
            raise InvalidRecordError(f"{what} lacks {name!r}")
        if not check(data[name]):
            raise InvalidRecordError(f"{what} has a bad {name}: {data[name]!r}")


_OFFSET_FIELDS = {"offset": _is_int, "metadata": _is_str, "commit_timestamp": _is_int}
_GROUP_FIELDS = {
    "generation": _is_int,
    "protocol": _is_optional_str,
    "leader": _is_optional_str,
    "partition_counts": lambda v: isinstance(v, dict) and all(map(_is_int, v.values())),
    "members": lambda v: isinstance(v, list),
    "protocol_type": _is_optional_str,
}
_MEMBER_FIELDS = {
    "member_id": _is_str,
    "group_instance_id": _is_optional_str,
    "client_id": _is_str,
    "topics": _is_str_list,
    "strategies": _is_str_list,
    "session_timeout_s": _is_number,
    "rebalance_timeout_s": _is_number,
    "assignment": _is_partition_list,
    "actor_id": _is_optional_str,
    "protocols": _is_protocol_list,
    "assignment_bytes": _is_base64,
    "client_host": _is_str,
}


_OPTIONAL_MEMBER_FIELDS = frozenset({"actor_id", "protocols", "assignment_bytes", "client_host"})
"""Fields records written before client-assigned groups (and actor ids) lack."""


def decode_record(key: bytes | None, value: bytes | None) -> tuple[Any, ...]:
    """One record of the topic, checked: ``("offset", group_id, TopicPartition,
    OffsetAndMetadata | None)`` or ``("group", group_id, dict | None)`` (None: a
    tombstone; the dict has the shape :meth:`Group.from_dict
    <raystream.groups.group.Group.from_dict>` reads).

    Raises:
        InvalidRecordError: the record is not one this topic holds; says what is wrong.
    """
    if key is None:
        raise InvalidRecordError("a record without a key")
    try:
        parts = json.loads(key)
    except ValueError as error:
        raise InvalidRecordError(f"key {key[:80]!r} is not JSON: {error}") from None
    if not isinstance(parts, list) or len(parts) < 2 or not _is_str(parts[1]) or not parts[1]:
        raise InvalidRecordError(f"key {key!r} is not [kind, group id, ...]")
    kind, group_id, *rest = parts
    try:
        data = None if value is None else json.loads(value)
    except ValueError as error:
        raise InvalidRecordError(f"value of key {key!r} is not JSON: {error}") from None
    if kind == "offset":
        if len(rest) != 2 or not _is_str(rest[0]) or not _is_int(rest[1]) or rest[1] < 0:
            raise InvalidRecordError(f"offset key {key!r} is not [offset, group, topic, partition]")
        tp = TopicPartition(rest[0], rest[1])
        if data is None:
            return kind, group_id, tp, None
        _check_fields(data, _OFFSET_FIELDS, frozenset({"metadata", "commit_timestamp"}), "offset")
        return kind, group_id, tp, OffsetAndMetadata(**data)
    if kind == "group":
        if rest:
            raise InvalidRecordError(f"group key {key!r} is not [group, group id]")
        if data is not None:
            _check_fields(data, _GROUP_FIELDS, frozenset({"protocol_type"}), f"group {group_id!r}")
            for member in data["members"]:
                _check_fields(
                    member,
                    _MEMBER_FIELDS,
                    _OPTIONAL_MEMBER_FIELDS,
                    f"member of {group_id!r}",
                )
        return kind, group_id, data
    raise InvalidRecordError(f"key {key!r} has an unknown kind {kind!r}")


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
    ) -> list[tuple[int, str]]:
        """Apply records read from the topic, in offset order; the ones that do not
        decode are left out and returned (offsets from the table's ``offset`` column,
        -1 without one).

        With ``offsets_only`` (a running coordinator catching up on offsets that
        transactions committed) membership records are left alone, since the live
        groups are newer, and an offset older than the one held (by commit timestamp)
        does not replace it: read_committed reading may return a commit the coordinator
        wrote itself after a newer one it already applied.

        With ``membership_only`` only membership records are applied: a loading
        coordinator reads them on past the last stable offset, since only the
        coordinator writes them, never inside a transaction.
        """
        skipped: list[tuple[int, str]] = []
        for offset, key, value in keyed_rows(table):
            try:
                kind, group_id, *body = decode_record(key, value)
                group = None
                if kind == "group" and body[0] is not None and not offsets_only:
                    group = Group.from_dict(group_id, body[0], now)
            except (InvalidRecordError, KeyError, TypeError, ValueError) as error:
                skipped.append((offset, str(error)))
                continue
            if kind == "offset" and not membership_only:
                tp, committed_offset = body
                committed = self.offsets.setdefault(group_id, {})
                held = committed.get(tp)
                if committed_offset is None:
                    committed.pop(tp, None)
                elif not (
                    offsets_only
                    and held is not None
                    and held.commit_timestamp > committed_offset.commit_timestamp
                ):
                    committed[tp] = committed_offset
            elif kind == "group" and not offsets_only:
                if group is None:
                    self.groups.pop(group_id, None)
                else:
                    self.groups[group_id] = group
        return skipped
