"""rs.spark.read_topic on real Spark on Ray (RayDP): schema, every record, offset options."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

import raystream as rs
from raystream.errors import (
    InvalidRequestError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)

pytestmark = pytest.mark.slow

KAFKA_SOURCE_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
        StructField(
            "headers",
            ArrayType(
                StructType([StructField("key", StringType()), StructField("value", BinaryType())])
            ),
        ),
    ]
)
"""Spark 3.5's Kafka source schema with includeHeaders (KafkaRecordToRowConverter)."""
T0 = 1_700_000_000_000


def produce(cluster: Any, topic: str, count: int) -> dict[tuple[int, int], tuple]:
    """Keyed records with distinct timestamps and headers on every third; returns
    {(partition, offset): (key, value, timestamp_ms, headers)} as acknowledged."""
    producer = cluster.producer()
    futures = []
    for i in range(count):
        record = (
            b"k%d" % (i % 5),
            b"value-%d" % i,
            T0 + 1000 * i,
            [("h", b"%d" % i)] * (i % 3 == 0),
        )
        future = producer.send(
            topic, record[1], record[0], record[3] or None, timestamp_ms=record[2]
        )
        futures.append((record, future))
    sent = {}
    for record, future in futures:
        metadata = future.get(timeout=60)
        sent[(metadata.partition, metadata.offset)] = record
    producer.close()
    return sent


def collected(df: Any) -> dict[tuple[int, int], tuple]:
    rows = df.selectExpr("*", "unix_millis(timestamp) AS millis").collect()
    return {
        (r.partition, r.offset): (
            bytes(r.key),
            bytes(r.value),
            r.millis,
            [(h.key, bytes(h.value)) for h in r.headers or []],
        )
        for r in rows
    }


def test_a_byte_topic_reads_as_spark_kafka_source_with_every_record(
    spark: Any, spark_cluster: Any, spark_topic: Callable[..., str]
) -> None:
    topic = spark_topic(partitions=3)
    sent = produce(spark_cluster, topic, 300)
    df = rs.spark.read_topic(spark, topic)
    assert df.schema == KAFKA_SOURCE_SCHEMA
    assert collected(df) == sent
    assert {
        (r.topic, r.timestampType) for r in df.select("topic", "timestampType").distinct().collect()
    } == {(topic, 0)}
    per_partition = dict(df.groupBy("partition").count().collect())
    assert per_partition == {p: sum(1 for q, _ in sent if q == p) for p in range(3)}


def test_a_typed_topic_reads_as_its_columns(
    spark: Any, spark_cluster: Any, spark_topic: Callable[..., str]
) -> None:
    schema = pa.schema([("customer", pa.string()), ("amount", pa.float64())])
    topic = spark_topic(
        partitions=2, schema=schema, config={"message.timestamp.type": "LogAppendTime"}
    )
    orders = pa.table(
        {"customer": [f"c{i % 3}" for i in range(60)], "amount": [float(i) for i in range(60)]}
    )
    with spark_cluster.producer() as producer:
        producer.send_batch(topic, orders, key_column="customer")
    df = rs.spark.read_topic(spark, topic)
    assert df.schema.names == [
        "key",
        "customer",
        "amount",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
    assert df.schema["amount"].dataType == DoubleType()
    totals = {
        r.customer: r.total
        for r in df.groupBy("customer")
        .agg({"amount": "sum"})
        .withColumnRenamed("sum(amount)", "total")
        .collect()
    }
    assert totals == {
        c: float(sum(i for i in range(60) if f"c{i % 3}" == c)) for c in ("c0", "c1", "c2")
    }
    assert {r.timestampType for r in df.select("timestampType").distinct().collect()} == {1}
    assert all(bytes(r.key).decode() == r.customer for r in df.select("key", "customer").collect())


def test_offset_options_select_ranges_as_spark_does(
    spark: Any, spark_cluster: Any, spark_topic: Callable[..., str]
) -> None:
    topic = spark_topic(partitions=2)
    sent = produce(spark_cluster, topic, 100)
    ends = {p: 1 + max(o for q, o in sent if q == p) for p in (0, 1)}
    json_start = f'{{"{topic}": {{"0": 5, "1": -2}}}}'
    df = rs.spark.read_topic(spark, topic, json_start, {1: 7})
    assert sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect()) == (
        [(0, o) for o in range(5, ends[0])] + [(1, o) for o in range(7)]
    )
    empty = rs.spark.read_topic(spark, topic, "latest", "latest")
    assert empty.count() == 0
    assert empty.schema == KAFKA_SOURCE_SCHEMA
    with pytest.raises(InvalidRequestError, match="starting_offsets='newest'"):
        rs.spark.read_topic(spark, topic, "newest")
    with pytest.raises(InvalidRequestError, match="starting offset 5 is past ending offset 3"):
        rs.spark.read_topic(spark, topic, {0: 5}, {0: 3})
    with pytest.raises(OffsetOutOfRangeError, match=f"{topic}-0"):
        rs.spark.read_topic(spark, topic, {0: ends[0] + 1})
    with pytest.raises(UnknownTopicOrPartitionError, match="partition 2"):
        rs.spark.read_topic(spark, topic, {2: 0})
    with pytest.raises(UnknownTopicOrPartitionError, match="not-a-topic"):
        rs.spark.read_topic(spark, "not-a-topic")


def test_release_frees_a_snapshot_once(spark: Any, spark_topic: Callable[..., str]) -> None:
    df = rs.spark.read_topic(spark, spark_topic())
    assert rs.spark.release(df) is True
    assert rs.spark.release(df) is False


def test_the_driver_jvm_runs_in_a_session_of_its_own(spark: Any) -> None:
    """Started with ``start_new_session`` instead of PySpark's ``preexec_fn`` (which runs
    Python between fork and exec in a threaded Ray driver), and still a child of ours."""
    import os
    from subprocess import Popen

    from pyspark import SparkContext, java_gateway

    jvm = SparkContext._gateway.proc
    assert os.getsid(jvm.pid) == jvm.pid != os.getsid(0)
    assert jvm.poll() is None
    assert java_gateway.Popen is Popen
