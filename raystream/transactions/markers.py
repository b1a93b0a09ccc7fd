"""Transaction markers: the control batch that ends a transaction on one partition.

A marker is one record in the topic's own record schema, so it is stored and
replicated like any batch: key = Kafka's control record key (version int16 0, type
int16: 0 abort, 1 commit, big-endian), value = Kafka's end-transaction marker value
(version int16 0, coordinator epoch int32) on byte topics, null on typed topics (whose
value is a struct), no headers. The header's control and commit bits say the same for
code that sees headers only; consumers never see markers as records.
"""

from __future__ import annotations

import struct

import pyarrow as pa

_CONTROL_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")
_TIMESTAMP = struct.Struct("<q")
_OFFSETS = struct.Struct("<ii")
ABORT_KEY = _CONTROL_KEY.pack(0, 0)
COMMIT_KEY = _CONTROL_KEY.pack(0, 1)


def marker_batch(
    record_schema: pa.Schema, commit: bool, coordinator_epoch: int, timestamp_ms: int
) -> pa.RecordBatch:
    """The one-record batch of a commit or abort marker, in ``record_schema``.

    Built from buffers, not from Python lists: ``pa.array`` of a list imports pandas
    the first time a process calls it (about half a second here, and tens of MB), and
    a replica otherwise never does, so its first marker paid for it."""
    value_type = record_schema.field("value").type
    if pa.types.is_binary(value_type):
        value = _binary(_MARKER_VALUE.pack(0, coordinator_epoch))
    else:
        value = pa.nulls(1, value_type)
    columns = {
        "key": _binary(COMMIT_KEY if commit else ABORT_KEY),
        "value": value,
        "timestamp": pa.Array.from_buffers(
            pa.int64(), 1, [None, pa.py_buffer(_TIMESTAMP.pack(timestamp_ms))]
        ),
        "headers": pa.nulls(1, record_schema.field("headers").type),
    }
    return pa.record_batch([columns[f.name] for f in record_schema], schema=record_schema)


def _binary(data: bytes) -> pa.Array:
    """A one-element binary array of ``data``."""
    offsets = pa.py_buffer(_OFFSETS.pack(0, len(data)))
    return pa.Array.from_buffers(pa.binary(), 1, [None, offsets, pa.py_buffer(data)])


__all__ = ["ABORT_KEY", "COMMIT_KEY", "marker_batch"]
