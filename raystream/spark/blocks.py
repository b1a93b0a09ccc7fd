"""Topic records as the blocks Spark reads: the Kafka source layout, as Arrow IPC streams.

The read task here runs in Ray workers, so this module imports neither pyspark nor
RayDP (a worker that would import them pays seconds before its first fetch).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import ray

from raystream.data.offsets import PartitionRange
from raystream.data.reader import read_range
from raystream.records import value_columns

READ_TASK_CPUS = 0
"""CPUs a read task asks Ray for: none, so that reads always run even when Spark's
executors hold every CPU of the cluster (they would wait for the blocks forever); a
read task mostly waits on its leader and copies memory, one task per partition."""


def kafka_table(table: pa.Table, topic: str, partition: int, timestamp_type: int) -> pa.Table:
    """A fetched table (stored columns plus offset) in the layout of Spark's Kafka source."""
    count = table.num_rows
    millis = table.column("timestamp")
    columns: dict[str, Any] = {"key": table.column("key")}
    columns.update(value_columns(table.column("value")))
    for name, column in list(columns.items()):
        wanted = spark_arrow_type(column.type)
        if wanted != column.type:
            columns[name] = column.cast(wanted)
    for name, column in (
        ("topic", pa.repeat(pa.scalar(topic, pa.string()), count)),
        ("partition", pa.repeat(pa.scalar(partition, pa.int32()), count)),
        ("offset", table.column("offset")),
        ("timestamp", pc.multiply(millis, 1000).cast(pa.timestamp("us", tz="UTC"))),
        ("timestampType", pa.repeat(pa.scalar(timestamp_type, pa.int32()), count)),
        ("headers", table.column("headers")),
    ):
        columns.setdefault(name, column)  # a typed topic's own column of that name wins
    return pa.table(columns)


def spark_arrow_type(dtype: pa.DataType) -> pa.DataType:
    """``dtype`` as Spark's JVM reads Arrow: timestamps in microseconds (a timestamp
    without a time zone is taken as UTC), dates in days; lists and structs inside out.

    Example: ``timestamp[ms]`` -> ``timestamp[us, tz=UTC]``; ``int64`` stays.
    """
    if pa.types.is_timestamp(dtype):
        return pa.timestamp("us", tz=dtype.tz or "UTC")
    if pa.types.is_date64(dtype):
        return pa.date32()
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return pa.list_(dtype.value_field.with_type(spark_arrow_type(dtype.value_type)))
    if pa.types.is_struct(dtype):
        return pa.struct([f.with_type(spark_arrow_type(f.type)) for f in dtype])
    return dtype


def ipc_stream(table: pa.Table) -> bytes:
    """``table`` as the Arrow IPC stream RayDP's JVM reader decodes."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


@ray.remote(num_cpus=READ_TASK_CPUS, max_retries=3)
def read_blocks(cluster: Any, part: PartitionRange, timestamp_type: int) -> Iterator[Any]:
    """Yield the range's blocks as IPC streams, then the number of rows read."""
    rows = 0
    for table in read_range(cluster, part):
        rows += table.num_rows
        yield ipc_stream(kafka_table(table, part.topic, part.partition, timestamp_type))
    yield rows
