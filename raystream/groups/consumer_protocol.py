"""Kafka's consumer protocol assignment bytes, read just far enough to list partitions.

In Kafka's classic group protocol a group of ``protocol_type`` "consumer" passes each
member's assignment as opaque bytes chosen by the leader's client-side assignor; the
coordinator hands them on unread. Reading the partitions out of them (a ``version``
int16, then an array of ``(topic string, partitions int32 array)``, then user data)
lets raystream's own tools (describe a group, its lag) show a Kafka group's members and
their partitions as they show a raystream group's. Every version of the format starts
with the same fields, so one reader serves them all. Pure: no Ray, no I/O.

Example::

    >>> data = bytes.fromhex("0000" "00000001" "0001" "74" "00000002" "00000000" "00000002")
    >>> consumer_assignment(data + b"\\xff\\xff\\xff\\xff")
    [TopicPartition(topic='t', partition=0), TopicPartition(topic='t', partition=2)]
"""

from __future__ import annotations

import struct

from raystream.types import TopicPartition

CONSUMER_PROTOCOL_TYPE = "consumer"

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


def consumer_assignment(data: bytes) -> list[TopicPartition]:
    """The partitions in a consumer-protocol assignment; [] for bytes that are not one
    (empty, truncated, negative counts): the bytes are the client's, so the reading is
    best effort and never refuses them."""
    try:
        position = _INT16.size  # the version
        (topics,) = _INT32.unpack_from(data, position)
        position += _INT32.size
        found: list[TopicPartition] = []
        for _ in range(max(topics, 0)):
            (length,) = _INT16.unpack_from(data, position)
            position += _INT16.size
            if length < 0 or position + length > len(data):
                return []
            topic = bytes(data[position : position + length]).decode()
            position += length
            (count,) = _INT32.unpack_from(data, position)
            position += _INT32.size
            if count < 0 or position + 4 * count > len(data):
                return []
            partitions = struct.unpack_from(f">{count}i", data, position)
            position += 4 * count
            found.extend(TopicPartition(topic, p) for p in partitions)
        return found
    except (struct.error, UnicodeDecodeError):
        return []


__all__ = ["CONSUMER_PROTOCOL_TYPE", "consumer_assignment"]
