"""Produce and Fetch answers written straight to bytes: the listener's measured hot path.

kio stays the codec of record (see :mod:`raystream.kafka.codec`): every request is
decoded by it, and every answer of every other API is built and written by it. Two
answers are not: Produce (v9 to v13) and Fetch (v12 to v18), the flexible versions
current clients send, and the two APIs a producer and a consumer at a steady rate send
hundreds of times a second. Building kio's frozen dataclasses from the handler's dicts
(:func:`~raystream.kafka.codec.build`) and writing them field by field cost 70 to 170 us
per answer on the benchmark machine; written here with ``struct`` from the same dicts
they cost a few microseconds. (Decoding stays kio's: its reader is native and takes
6 to 15 us per request.)

The bytes are kio's exactly: a property test writes random answers both ways and
compares them byte for byte. Only the common shape is written here: the fields the
data handlers set, with their plain types (ints, str, bytes, UUIDs, lists of dicts).
Anything else (a field this module does not know, a tagged field, a value of another
type) makes :func:`encode_fast` answer None, and the caller goes through kio, so an
unusual answer is never written wrongly, only more slowly. Pure: no Ray.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping
from typing import Any

from raystream.kafka.codec import Header
from raystream.log.compact import encode_uvarint

PRODUCE, FETCH = 0, 1
PRODUCE_VERSIONS = range(9, 14)
"""Produce versions written here (flexible; v13 names topics by id)."""
FETCH_VERSIONS = range(12, 19)
"""Fetch versions written here (flexible; v13+ name topics by id)."""

_PRODUCE_TOP = frozenset(("throttle_time", "responses"))
_PRODUCE_PARTITION = frozenset(
    ("index", "error_code", "error_message", "base_offset", "log_start_offset", "log_append_time")
)
_FETCH_TOP = frozenset(("throttle_time", "error_code", "session_id", "responses"))
_FETCH_PARTITION = frozenset(
    (
        "partition_index",
        "error_code",
        "high_watermark",
        "last_stable_offset",
        "log_start_offset",
        "aborted_transactions",
        "records",
    )
)
_ABORTED = frozenset(("producer_id", "first_offset"))

_FRAME_HEAD = struct.Struct(">iib")
"""Size, correlation id, and the response header v1's empty tagged fields."""
_I32 = struct.Struct(">i")
_PRODUCE_PART = struct.Struct(">ihqqq")
"""index, error_code, base_offset, log_append_time, log_start_offset."""
_FETCH_TOP_FIELDS = struct.Struct(">ihi")
"""throttle_time, error_code, session_id."""
_FETCH_PART = struct.Struct(">ihqqq")
"""partition_index, error_code, high_watermark, last_stable_offset, log_start_offset."""
_ABORTED_ENTRY = struct.Struct(">qqb")
"""producer_id, first_offset, empty tagged fields."""
_NO_RECORD_ERRORS = b"\x01"
"""An empty compact array (record_errors)."""
_NULL = b"\x00"
"""A null compact string, array or bytes; also zero tagged fields."""
_PREFERRED_READ_REPLICA = struct.pack(">i", -1)


class _Unusual(Exception):
    """The answer has a shape this module does not write (kio writes it)."""


def encode_fast(header: Header, values: Mapping[str, Any]) -> bytes | None:
    """The whole response frame (size prefix included) of a Produce or Fetch answer,
    the bytes :func:`~raystream.kafka.codec.encode_response` would write; None when it
    is another API or version, or a shape written only by kio."""
    try:
        if header.api_key == PRODUCE and header.api_version in PRODUCE_VERSIONS:
            pieces = _produce(values, header.api_version)
        elif header.api_key == FETCH and header.api_version in FETCH_VERSIONS:
            pieces = _fetch(values, header.api_version)
        else:
            return None
    except (_Unusual, struct.error):  # struct.error: a number out of its field's range
        return None
    body = b"".join(pieces)
    return _FRAME_HEAD.pack(len(body) + 5, header.correlation_id, 0) + body


def _produce(values: Mapping[str, Any], version: int) -> list[bytes]:
    _known(values, _PRODUCE_TOP)
    topic_key = "topic_id" if version >= 13 else "name"
    out: list[bytes] = []
    topics = _list(values.get("responses", ()))
    out.append(encode_uvarint(len(topics) + 1))
    for topic in topics:
        _known(topic, (topic_key, "partition_responses"))
        out.append(_topic(topic, topic_key))
        partitions = _list(topic.get("partition_responses", ()))
        out.append(encode_uvarint(len(partitions) + 1))
        for part in partitions:
            _known(part, _PRODUCE_PARTITION)
            append_time = part.get("log_append_time")
            out.append(
                _PRODUCE_PART.pack(
                    _int(part.get("index", 0)),
                    _int(part.get("error_code", 0)),
                    _int(part.get("base_offset", 0)),
                    -1 if append_time is None else _int(append_time),
                    _int(part.get("log_start_offset", -1)),
                )
            )
            out.append(_NO_RECORD_ERRORS)
            out.append(_nullable_string(part.get("error_message")))
            out.append(_NULL)  # tagged fields: none
        out.append(_NULL)
    out.append(_I32.pack(_int(values.get("throttle_time", 0))))
    out.append(_NULL)
    return out


def _fetch(values: Mapping[str, Any], version: int) -> list[bytes]:
    _known(values, _FETCH_TOP)
    topic_key = "topic_id" if version >= 13 else "topic"
    out = [
        _FETCH_TOP_FIELDS.pack(
            _int(values.get("throttle_time", 0)),
            _int(values.get("error_code", 0)),
            _int(values.get("session_id", 0)),
        )
    ]
    topics = _list(values.get("responses", ()))
    out.append(encode_uvarint(len(topics) + 1))
    for topic in topics:
        _known(topic, (topic_key, "partitions"))
        out.append(_topic(topic, topic_key))
        partitions = _list(topic.get("partitions", ()))
        out.append(encode_uvarint(len(partitions) + 1))
        for part in partitions:
            _known(part, _FETCH_PARTITION)
            out.append(
                _FETCH_PART.pack(
                    _int(part.get("partition_index", 0)),
                    _int(part.get("error_code", 0)),
                    _int(part.get("high_watermark", 0)),
                    _int(part.get("last_stable_offset", -1)),
                    _int(part.get("log_start_offset", -1)),
                )
            )
            aborted = part.get("aborted_transactions")
            if aborted is None:
                out.append(_NULL)
            else:
                aborted = _list(aborted)
                out.append(encode_uvarint(len(aborted) + 1))
                for entry in aborted:
                    _known(entry, _ABORTED)
                    out.append(
                        _ABORTED_ENTRY.pack(
                            _int(entry.get("producer_id", 0)), _int(entry.get("first_offset", 0)), 0
                        )
                    )
            out.append(_PREFERRED_READ_REPLICA)
            records = part.get("records")
            if records is None:
                out.append(_NULL)
            else:
                if not isinstance(records, bytes):
                    raise _Unusual
                out.append(encode_uvarint(len(records) + 1))
                out.append(records)
            out.append(_NULL)  # tagged fields: none
        out.append(_NULL)
    out.append(_NULL)
    return out


def _known(entry: Any, fields: frozenset[str] | tuple[str, ...]) -> None:
    if not isinstance(entry, Mapping) or any(name not in fields for name in entry):
        raise _Unusual


def _list(value: Any) -> list[Any] | tuple[Any, ...]:
    if not isinstance(value, list | tuple):
        raise _Unusual
    return value


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise _Unusual
    return value


def _topic(topic: Mapping[str, Any], key: str) -> bytes:
    """A topic's name (compact string) or id (16 bytes)."""
    if key == "topic_id":
        topic_id = topic.get(key)
        if not isinstance(topic_id, uuid.UUID):
            raise _Unusual
        return topic_id.bytes
    name = topic.get(key, "")
    if not isinstance(name, str):
        raise _Unusual
    data = name.encode()
    return encode_uvarint(len(data) + 1) + data


def _nullable_string(value: Any) -> bytes:
    if value is None:
        return _NULL
    if not isinstance(value, str):
        raise _Unusual
    data = value.encode()
    return encode_uvarint(len(data) + 1) + data
