"""``rs.spark.read_topic``: a topic's offset range as a Spark DataFrame, with the columns
of Spark's Kafka source.

How the records travel: one Ray task per partition, scheduled on its leader's node when
it can be, fetches the range (:func:`~raystream.data.reader.read_range`), lays each
block out as Spark's Kafka source does and puts it into Ray's object store as an Arrow
IPC stream. RayDP's ``RayDatasetRDD`` then hands the blocks to Spark: each Spark task
reads one block straight from the object store in its executor's JVM and decodes the
Arrow there. No record passes through the driver and no Python runs in Spark.

Why IPC streams and not a Ray Dataset of Arrow tables (``ds.to_spark``): for table
blocks RayDP converts through pandas in Python UDF workers (Arrow to pandas to Arrow
again), five times slower here than the JVM decoding the bytes (see BENCHMARKS.md).

The read happens when ``read_topic`` is called: the DataFrame is a snapshot of the
offset range, and every action on it (and on DataFrames made from it) reads the same
blocks. The blocks stay in Ray's object store (spilled to disk under memory pressure)
until :func:`release` or ``rs.spark.stop()``.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import ray
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_type
from pyspark.sql.types import StructField, StructType
from ray.exceptions import RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from raystream.data import offsets
from raystream.errors import RaystreamError
from raystream.records import empty_fetch, record_schema
from raystream.spark.blocks import ipc_stream, kafka_table, read_blocks
from raystream.spark.context import attachment
from raystream.types import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME


def read_topic(
    spark: SparkSession,
    topic: str,
    starting_offsets: Any = "earliest",
    ending_offsets: Any = "latest",
    isolation_level: str = "read_uncommitted",
) -> DataFrame:
    """The records of ``topic`` between the two offset options, as a DataFrame.

    Columns, as Spark's Kafka source (with headers): key binary, value binary, topic
    string, partition int, offset long, timestamp timestamp, timestampType int (0
    CreateTime, 1 LogAppendTime), headers array<struct<key string, value binary>>. A
    typed topic has its schema's columns where ``value`` would be (a schema column
    named like one of the others takes its place). One Spark partition per block of
    about 32 MiB.

    Args:
        spark: a session from :func:`raystream.spark.session` (its cluster is read).
        topic: the topic to read.
        starting_offsets, ending_offsets: "earliest", "latest", a dict
            ``{partition: offset}`` (-2 earliest, -1 latest) or Spark's JSON form
            ``'{"orders": {"0": 23, "1": -2}}'``; the end is exclusive.
        isolation_level: "read_uncommitted" (Spark's ``kafka.isolation.level``
            default) or "read_committed": up to the last stable offset, without the
            records of aborted transactions.

    Raises:
        UnknownTopicOrPartitionError: no such topic, or an option names a partition it
            lacks.
        InvalidRequestError: an offset option or the isolation level is malformed, or a
            start is past its end.
        OffsetOutOfRangeError: an explicit offset lies outside its partition's log, or
            retention deleted records of the range while it was read.
    """
    pins = attachment(spark)
    cluster = pins.cluster
    ranges = offsets.plan(cluster, topic, starting_offsets, ending_offsets, isolation_level)
    metadata = cluster.topic_metadata(topic)
    append_time = metadata.config.get("message.timestamp.type") == "LogAppendTime"
    timestamp_type = TIMESTAMP_LOG_APPEND_TIME if append_time else TIMESTAMP_CREATE_TIME
    schema = kafka_table(empty_fetch(record_schema(metadata.value_schema)), topic, 0, 0).schema
    readers = [
        read_blocks.options(
            num_returns="streaming", scheduling_strategy=_near(part.leader_node)
        ).remote(cluster, part, timestamp_type)
        for part in ranges
        if part.end > part.start
    ]
    blocks: list[Any] = []
    for reader in readers:
        refs = list(reader)
        _raise_failure(refs[-1])  # the task's last object is its row count, or its error
        blocks.extend(refs[:-1])
    if not blocks:
        blocks.append(ray.put(ipc_stream(schema.empty_table())))
    frame = blocks_to_dataframe(spark, blocks, schema)
    pins.pin(frame, blocks)
    return frame


def release(frame: DataFrame) -> bool:
    """Free the topic snapshot ``frame`` (a DataFrame ``read_topic`` returned) was read
    into; every DataFrame made from it stops working. False if nothing was pinned."""
    return attachment(frame.sparkSession).release(frame)


def _near(node_id: str | None) -> Any:
    if node_id is None:
        return "DEFAULT"
    return NodeAffinitySchedulingStrategy(node_id, soft=True)


def _raise_failure(ref: Any) -> None:
    """Raise the error a read task ended with (raystream's own, unwrapped)."""
    try:
        ray.get(ref)
    except RayTaskError as error:
        if isinstance(error.cause, RaystreamError):
            raise error.cause from error
        raise


def blocks_to_dataframe(spark: SparkSession, blocks: list[Any], schema: pa.Schema) -> DataFrame:
    """A DataFrame over IPC-stream blocks in Ray's object store, through RayDP's JVM
    reader (what ``ray_dataset_to_spark_dataframe`` does for such blocks, without
    fetching one to the driver to look at its type)."""
    struct = StructType(
        [StructField(f.name, from_arrow_type(f.type), nullable=f.nullable) for f in schema]
    )
    worker = ray._private.worker.global_worker.core_worker
    owners = [worker.get_owner_address(ref) for ref in blocks]
    jvm = spark.sparkContext._jvm
    rdd = jvm.org.apache.spark.rdd.RayDatasetRDD(
        spark.sparkContext._jsc, [ref.binary() for ref in blocks], owners
    )
    reader = jvm.org.apache.spark.sql.raydp.ObjectStoreReader
    return DataFrame(reader.RayDatasetToDataFrame(spark._jsparkSession, rdd, struct.json()), spark)
