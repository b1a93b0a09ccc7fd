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
ABORT_KEY = _CONTROL_KEY.pack(0, 0)
COMMIT_KEY = _CONTROL_KEY.pack(0, 1)


def marker_batch(
    record_schema: pa.Schema, commit: bool, coordinator_epoch: int, timestamp_ms: int
) -> pa.RecordBatch:
    """The one-record batch of a commit or abort marker, in ``record_schema``."""
    value_type = record_schema.field("value").type
    value = _MARKER_VALUE.pack(0, coordinator_epoch) if pa.types.is_binary(value_type) else None
    columns = {
        "key": pa.array([COMMIT_KEY if commit else ABORT_KEY], pa.binary()),
        "value": pa.array([value], value_type),
        "timestamp": pa.array([timestamp_ms], pa.int64()),
        "headers": pa.array([None], record_schema.field("headers").type),
    }
    return pa.record_batch([columns[f.name] for f in record_schema], schema=record_schema)


__all__ = ["ABORT_KEY", "COMMIT_KEY", "marker_batch"]
