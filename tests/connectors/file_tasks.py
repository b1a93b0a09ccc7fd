"""What the file and data-lake connector tests hand their tasks, called directly without
Ray: sink batches in the connector API's shape and the small contexts a task asks of the
framework. A module (not a conftest) so that other tests/connectors files keep their own."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from raystream.connectors.api import SourceBatch
from raystream.types import TopicPartition

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def sink_batch(
    values: Sequence[Any] | pa.Array,
    topic: str = "orders",
    partition: int = 0,
    start: int = 0,
    timestamps: Sequence[int] | None = None,
) -> pa.Table:
    """A sink batch (the connector API's shape) of one topic partition from ``start``."""
    count = len(values)
    if timestamps is None:
        timestamps = [1_700_000_000_000 + 1000 * (start + i) for i in range(count)]
    return pa.table(
        {
            "topic": pa.array([topic] * count, pa.string()),
            "partition": pa.array([partition] * count, pa.int32()),
            "offset": pa.array(range(start, start + count), pa.int64()),
            "timestamp": pa.array(timestamps, pa.int64()),
            "key": pa.nulls(count, pa.binary()),
            "value": values if isinstance(values, pa.Array) else pa.array(values),
            "headers": pa.nulls(count, HEADERS),
        }
    )


class SinkContext:
    """A SinkTaskContext that records the offsets a task rewinds to."""

    def __init__(self, partitions: Sequence[TopicPartition] = ()) -> None:
        self.rewound: dict[TopicPartition, int] = {}
        self.partitions = set(partitions)

    def offset(self, offsets: Mapping[TopicPartition, int]) -> None:
        self.rewound.update(offsets)

    def assignment(self) -> set[TopicPartition]:
        return set(self.partitions)

    def pause(self, *partitions: TopicPartition) -> None:
        pass

    def resume(self, *partitions: TopicPartition) -> None:
        pass

    def request_commit(self) -> None:
        pass


class OffsetStore:
    """The framework's committed source offsets, as a source task reads them."""

    def __init__(self) -> None:
        self.committed: dict[str, dict[str, Any]] = {}

    def commit(self, batch: SourceBatch) -> None:
        self.committed[batch.source_partition["file"]] = dict(batch.source_offset)

    def offset(self, source_partition: Mapping[str, Any]) -> dict[str, Any] | None:
        return self.committed.get(source_partition["file"])

    def offsets(self, source_partitions: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
        raise NotImplementedError


class SourceContext:
    def __init__(self, store: OffsetStore) -> None:
        self.offset_storage_reader = store
        self.transaction_context = None
