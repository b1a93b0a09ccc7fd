"""Offset syncs, checkpoints and heartbeats: MirrorMaker 2's records and its translation.

A source offset and the target offset of the same record differ (the target topic
started later, the source was compacted, transaction markers take offsets), so the
source task records *offset syncs*: "source offset u of this partition is target offset
d". The checkpoint task translates a consumer group's committed source offsets through
them into target offsets (*checkpoints*), so the group can move to the target.

The translation is MM2's since KAFKA-14666 (Kafka 3.5), which never skips a record:
for a committed source offset U (the group has consumed everything below U), take the
latest sync (u, d) with u <= U. If u == U the group resumes exactly at d. If u < U, the
group has consumed the record at u, i.e. target offset d, and possibly more that the
syncs do not pin down, so it resumes at d + 1: perhaps some records again, never one
missed. With no such sync the offset cannot be translated (None).

Worked example, syncs (0, 0), (100, 90), (200, 190) (ten source records compacted
away between 0 and 100): U=100 -> 90; U=150 -> 91; U=250 -> 191; U=0 -> 0.

The records use MM2's binary layouts (Kafka's ``Struct`` encoding, big-endian), so
MM2's own tools (``RemoteClusterUtils``) read a raystream target's checkpoints:

- offset sync: key (topic: string, partition: int32), value (upstream: int64,
  downstream: int64);
- checkpoint: key (group: string, topic: string, partition: int32), value (version:
  int16 = 0, upstream: int64, downstream: int64, metadata: string);
- heartbeat: key (source alias: string, target alias: string), value (version: int16
  = 0, timestamp: int64).

Pure code.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from raystream.errors import ConnectError
from raystream.types import TopicPartition

#: Syncs kept per partition: older ones only serve long-idle groups; MM2 keeps 64 too.
SYNCS_KEPT = 64

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_TWO_I64 = struct.Struct(">qq")


@dataclass(frozen=True, order=True)
class OffsetSync:
    """Source offset ``upstream`` of ``tp`` (the source partition) is target offset
    ``downstream`` of its remote topic partition."""

    tp: TopicPartition
    upstream: int
    downstream: int

    def key(self) -> bytes:
        return _string(self.tp.topic) + _I32.pack(self.tp.partition)

    def value(self) -> bytes:
        return _TWO_I64.pack(self.upstream, self.downstream)

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> OffsetSync:
        """An offset sync record's key and value.

        Raises:
            ConnectError: not an offset sync (the message says what is wrong).
        """
        try:
            topic, at = _read_string(key, 0)
            (partition,) = _I32.unpack_from(key, at)
            upstream, downstream = _TWO_I64.unpack_from(value, 0)
        except (struct.error, UnicodeDecodeError) as error:
            raise ConnectError(f"not an MM2 offset sync record: {error}") from None
        return cls(TopicPartition(topic, partition), upstream, downstream)


@dataclass(frozen=True)
class Checkpoint:
    """Group ``group`` committed ``upstream`` on the source partition whose remote topic
    partition is ``tp``; there it resumes at ``downstream``."""

    group: str
    tp: TopicPartition
    upstream: int
    downstream: int
    metadata: str = ""

    def key(self) -> bytes:
        return _string(self.group) + _string(self.tp.topic) + _I32.pack(self.tp.partition)

    def value(self) -> bytes:
        return _I16.pack(0) + _TWO_I64.pack(self.upstream, self.downstream) + _string(self.metadata)

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> Checkpoint:
        """A checkpoint record's key and value.

        Raises:
            ConnectError: not a checkpoint.
        """
        try:
            group, at = _read_string(key, 0)
            topic, at = _read_string(key, at)
            (partition,) = _I32.unpack_from(key, at)
            upstream, downstream = _TWO_I64.unpack_from(value, 2)
            metadata, _ = _read_string(value, 18)
        except (struct.error, UnicodeDecodeError) as error:
            raise ConnectError(f"not an MM2 checkpoint record: {error}") from None
        return cls(group, TopicPartition(topic, partition), upstream, downstream, metadata)


@dataclass(frozen=True)
class Heartbeat:
    """The flow ``source_alias -> target_alias`` was alive at ``timestamp_ms``."""

    source_alias: str
    target_alias: str
    timestamp_ms: int

    def key(self) -> bytes:
        return _string(self.source_alias) + _string(self.target_alias)

    def value(self) -> bytes:
        return _I16.pack(0) + _I64.pack(self.timestamp_ms)

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> Heartbeat:
        """A heartbeat record's key and value.

        Raises:
            ConnectError: not a heartbeat.
        """
        try:
            source, at = _read_string(key, 0)
            target, _ = _read_string(key, at)
            (timestamp,) = _I64.unpack_from(value, 2)
        except (struct.error, UnicodeDecodeError) as error:
            raise ConnectError(f"not an MM2 heartbeat record: {error}") from None
        return cls(source, target, timestamp)


class OffsetSyncStore:
    """The offset syncs read so far, per source partition, and the translation over them.

    Keeps the latest :data:`SYNCS_KEPT` syncs of each partition in upstream order. A sync
    whose upstream offset is below one already kept (the source partition was
    truncated, or the topic re-created) starts the partition's history afresh: older
    syncs would translate into the old topic's offsets.
    """

    def __init__(self, kept: int = SYNCS_KEPT) -> None:
        self.kept = kept
        self._syncs: dict[TopicPartition, list[tuple[int, int]]] = {}

    def add(self, sync: OffsetSync) -> None:
        """Record one sync (in the order they were written)."""
        history = self._syncs.setdefault(sync.tp, [])
        pair = (sync.upstream, sync.downstream)
        if history and sync.upstream < history[-1][0]:
            history.clear()
        if history and history[-1][0] == sync.upstream:
            history[-1] = pair
        else:
            history.append(pair)
        if len(history) > self.kept:
            # Keep the first (translates the oldest groups) and the newest.
            del history[1 : len(history) - self.kept + 1]

    def add_all(self, syncs: Iterable[OffsetSync]) -> None:
        for sync in syncs:
            self.add(sync)

    def translate(self, tp: TopicPartition, upstream: int) -> int | None:
        """The target offset a group that committed ``upstream`` on ``tp`` resumes at
        (module docstring), or None when no sync is at or below it."""
        history = self._syncs.get(tp)
        if not history:
            return None
        at = bisect.bisect_right(history, (upstream, float("inf"))) - 1
        if at < 0:
            return None
        sync_upstream, sync_downstream = history[at]
        return sync_downstream if sync_upstream == upstream else sync_downstream + 1

    def partitions(self) -> list[TopicPartition]:
        """The source partitions with syncs."""
        return sorted(self._syncs)


def latest_checkpoints(checkpoints: Iterable[Checkpoint], group: str) -> dict[TopicPartition, int]:
    """``group``'s translated offsets: the latest checkpoint per remote partition (the
    answer of MM2's ``RemoteClusterUtils.translateOffsets``)."""
    found: dict[TopicPartition, int] = {}
    for checkpoint in checkpoints:
        if checkpoint.group == group:
            found[checkpoint.tp] = checkpoint.downstream
    return dict(sorted(found.items()))


def _string(text: str) -> bytes:
    data = text.encode()
    if len(data) > 0x7FFF:
        raise ConnectError(f"string of {len(data)} bytes is too long for MM2's records")
    return _I16.pack(len(data)) + data


def _read_string(data: bytes, at: int) -> tuple[str, int]:
    (length,) = _I16.unpack_from(data, at)
    end = at + 2 + length
    if length < 0 or end > len(data):
        raise struct.error(f"string length {length} runs past the record")
    return data[at + 2 : end].decode(), end
