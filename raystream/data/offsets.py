"""Which offsets of a topic to read: Spark's Kafka source offset options, resolved.

``starting_offsets`` and ``ending_offsets`` take what Spark's Kafka source takes as
``startingOffsets`` / ``endingOffsets``:

- ``"earliest"`` (each partition's log start offset) or ``"latest"`` (its high
  watermark: the offset the next record will get);
- a dict ``{partition: offset}``, where offset -2 means earliest and -1 latest;
- Spark's JSON text ``'{"orders": {"0": 23, "1": -2}}'`` (or the same as a dict keyed
  by the topic name).

Partitions a dict does not name take the default (earliest for the start, latest for
the end). Ending offsets are exclusive. Offsets are resolved once, when a read is
planned, so a read is a snapshot: records appended later are not part of it.

Example: a topic with 2 partitions whose logs span [0, 10) and [5, 8)::

    resolve({0: 3}, EARLIEST, bounds) -> {0: 3, 1: 5}
    resolve("latest", EARLIEST, bounds) -> {0: 10, 1: 8}

:func:`parse_offsets` and :func:`resolve` are pure; :func:`plan` asks the partitions'
leaders for their bounds and makes the :class:`PartitionRange` list that Spark's and Ray
Data's readers both work from.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from numbers import Integral
from typing import Any

from raystream.errors import (
    InvalidRequestError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from raystream.protocol import EARLIEST_TIMESTAMP as EARLIEST
from raystream.protocol import LATEST_TIMESTAMP as LATEST
from raystream.types import TopicPartition

READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"

NAMED = {"earliest": EARLIEST, "latest": LATEST}


@dataclass(frozen=True)
class PartitionRange:
    """The offsets ``[start, end)`` of one partition to read, and where its leader runs.

    ``leader_node`` is the Ray node id of the partition's leader when the read was
    planned (None if unknown): readers are scheduled there when possible.
    """

    topic: str
    partition: int
    start: int
    end: int
    leader_node: str | None = None
    isolation_level: str = READ_UNCOMMITTED


def parse_offsets(spec: Any, topic: str, partitions: int, option: str) -> dict[int, int]:
    """The offsets ``spec`` names, per partition (-2 earliest, -1 latest, else an offset).

    Only the partitions ``spec`` names are in the answer; a name ("earliest" or
    "latest") names them all.

    Raises:
        InvalidRequestError: ``spec`` is not one of the accepted forms, names another
            topic, or holds an offset that is not an integer >= -2; the message names
            ``option`` and the bad value.
        UnknownTopicOrPartitionError: ``spec`` names a partition the topic lacks.
    """
    if isinstance(spec, str):
        named = NAMED.get(spec.strip().lower())
        if named is not None:
            return dict.fromkeys(range(partitions), named)
        try:
            spec = json.loads(spec)
        except ValueError:
            raise InvalidRequestError(
                f"{option}={spec!r}: use 'earliest', 'latest', a dict {{partition: offset}} "
                f'or Spark\'s JSON form \'{{"{topic}": {{"0": 23, "1": -2}}}}\''
            ) from None
    if not isinstance(spec, dict):
        raise InvalidRequestError(
            f"{option}={spec!r}: use 'earliest', 'latest' or a dict {{partition: offset}}"
        )
    if any(isinstance(value, dict) for value in spec.values()):  # {topic: {partition: offset}}
        others = sorted(str(key) for key in spec if key != topic)
        if others:
            raise InvalidRequestError(
                f"{option} names topic(s) {others}, but the topic read is {topic!r}"
            )
        spec = spec[topic]
        if not isinstance(spec, dict):
            raise InvalidRequestError(
                f"{option}[{topic!r}]={spec!r}: expected a dict {{partition: offset}}"
            )
    offsets: dict[int, int] = {}
    for key, offset in spec.items():
        partition = _integer(key)
        if partition is None:
            raise InvalidRequestError(f"{option}: partition {key!r} is not an integer")
        if not 0 <= partition < partitions:
            raise UnknownTopicOrPartitionError(
                f"{option}: partition {key!r} of topic {topic!r} does not exist "
                f"(it has {partitions})"
            )
        value = None if isinstance(offset, str) else _integer(offset)
        if value is None or value < EARLIEST:
            raise InvalidRequestError(
                f"{option}: offset {offset!r} for partition {partition} of {topic!r} must be "
                "an integer >= 0, or -2 (earliest) or -1 (latest)"
            )
        offsets[partition] = value
    return offsets


def resolve(
    named: dict[int, int],
    default: int,
    bounds: dict[int, tuple[int, int]],
    topic: str,
    option: str,
) -> dict[int, int]:
    """Concrete offsets for every partition of ``bounds``.

    ``bounds`` maps each partition to its (log start offset, high watermark); ``named``
    is :func:`parse_offsets`' answer and ``default`` (-2 or -1) covers the partitions it
    does not name.

    Raises:
        OffsetOutOfRangeError: an explicit offset lies outside the partition's
            [log start offset, high watermark] (as Spark's ``failOnDataLoss``, on by
            default, refuses to skip data silently).
    """
    resolved: dict[int, int] = {}
    for partition, (log_start, high_watermark) in sorted(bounds.items()):
        offset = named.get(partition, default)
        if offset == EARLIEST:
            offset = log_start
        elif offset == LATEST:
            offset = high_watermark
        elif not log_start <= offset <= high_watermark:
            raise OffsetOutOfRangeError(
                f"{option}: offset {offset} of {topic}-{partition} is outside its log "
                f"[{log_start}, {high_watermark}] (log start offset, high watermark)"
            )
        resolved[partition] = offset
    return resolved


def limit_ends(
    starts: dict[int, int], ends: dict[int, int], max_offsets: int | None
) -> dict[int, int]:
    """``ends`` brought down to about ``max_offsets`` offsets in all past ``starts``.

    Spark's ``maxOffsetsPerTrigger`` rule: each partition gets a share of the limit in
    proportion to its backlog, rounded down, except that a share below one offset is
    rounded up, so every partition with a backlog moves. Example: starts {0: 0, 1: 0},
    ends {0: 100, 1: 300}, max_offsets 40 -> {0: 10, 1: 30}.
    """
    backlog = {p: ends[p] - starts[p] for p in ends}
    total = sum(backlog.values())
    if max_offsets is None or total <= max_offsets:
        return dict(ends)
    limited = {}
    for partition, size in backlog.items():
        share = max_offsets * size / total
        share = math.ceil(share) if share < 1 else math.floor(share)
        limited[partition] = min(starts[partition] + share, ends[partition])
    return limited


def bounds_of(
    cluster: Any, topic: str, isolation_level: str = READ_UNCOMMITTED
) -> dict[int, tuple[int, int]]:
    """(log start offset, end) of every partition of ``topic``, asked of the leaders
    (retrying while leadership moves). The end is the high watermark, or the last
    stable offset for ``read_committed`` (records of open transactions wait).

    Raises:
        UnknownTopicOrPartitionError: the topic does not exist.
        InvalidRequestError: an unknown isolation level.
    """
    check_isolation(isolation_level)
    metadata = cluster.topic_metadata(topic, refresh=True)
    tps = [TopicPartition(topic, p.partition) for p in metadata.partitions]
    with cluster.consumer(enable_auto_commit=False, isolation_level=isolation_level) as consumer:
        starts = consumer.beginning_offsets(tps)
        ends = consumer.end_offsets(tps)
    return {tp.partition: (starts[tp], ends[tp]) for tp in tps}


def check_isolation(isolation_level: Any) -> None:
    """Refuse anything but Kafka's two isolation levels, naming the bad value."""
    if isolation_level not in (READ_UNCOMMITTED, READ_COMMITTED):
        raise InvalidRequestError(
            f"isolation_level={isolation_level!r} must be {READ_UNCOMMITTED!r} or "
            f"{READ_COMMITTED!r}"
        )


def start_offsets(
    cluster: Any, topic: str, starting_offsets: Any, isolation_level: str = READ_UNCOMMITTED
) -> dict[int, int]:
    """Where reading each partition of ``topic`` starts (see the module docstring)."""
    bounds = bounds_of(cluster, topic, isolation_level)
    named = parse_offsets(starting_offsets, topic, len(bounds), "starting_offsets")
    return resolve(named, EARLIEST, bounds, topic, "starting_offsets")


def plan(
    cluster: Any,
    topic: str,
    starting_offsets: Any,
    ending_offsets: Any,
    isolation_level: str = READ_UNCOMMITTED,
) -> list[PartitionRange]:
    """The range of every partition of ``topic`` to read, in partition order.

    With ``read_committed`` "latest" is the last stable offset and the ranges skip
    the records of aborted transactions when read.

    Raises:
        UnknownTopicOrPartitionError: no such topic, or a partition it lacks is named.
        InvalidRequestError: an option is malformed, or a start lies past its end.
        OffsetOutOfRangeError: an explicit offset lies outside its partition's log.
    """
    bounds = bounds_of(cluster, topic, isolation_level)
    count = len(bounds)
    starts = resolve(
        parse_offsets(starting_offsets, topic, count, "starting_offsets"),
        EARLIEST,
        bounds,
        topic,
        "starting_offsets",
    )
    ends = resolve(
        parse_offsets(ending_offsets, topic, count, "ending_offsets"),
        LATEST,
        bounds,
        topic,
        "ending_offsets",
    )
    nodes = {p.partition: p.leader_node for p in cluster.topic_metadata(topic).partitions}
    ranges = []
    for partition in sorted(bounds):
        start, end = starts[partition], ends[partition]
        if start > end:
            raise InvalidRequestError(
                f"{topic}-{partition}: starting offset {start} is past ending offset {end}"
            )
        ranges.append(
            PartitionRange(topic, partition, start, end, nodes.get(partition), isolation_level)
        )
    return ranges


def _integer(value: Any) -> int | None:
    """``value`` as an int if it is one (or a string of one), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, Integral):  # numpy's integers too
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None
