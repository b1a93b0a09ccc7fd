"""rs.spark.write_topic on real Spark on Ray (RayDP): round trips and bad input."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

import raystream as rs
from raystream.client.partitioner import partition_for_key
from raystream.errors import InvalidRecordError, UnknownTopicOrPartitionError

pytestmark = pytest.mark.slow


def test_write_topic_round_trip_with_keys_headers_and_timestamps(
    spark: Any, spark_topic: Callable[..., str]
) -> None:
    topic = spark_topic(partitions=3)
    df = (
        spark.range(2000)
        .selectExpr(
            "CONCAT('user-', CAST(id % 40 AS STRING)) AS user",
            "CONCAT('event-', CAST(id AS STRING)) AS body",
            "ARRAY(NAMED_STRUCT('key', 'n', 'value', ENCODE(CAST(id AS STRING), 'UTF-8')))"
            " AS headers",
            "TIMESTAMP_MILLIS(1700000000000 + id) AS timestamp",
        )
        .repartition(4)
    )
    written = rs.spark.write_topic(df, topic, key_column="user", value_column="body")
    assert written == 2000
    back = rs.spark.read_topic(spark, topic).selectExpr(
        "key", "value", "partition", "headers", "unix_millis(timestamp) AS millis"
    )
    rows = back.collect()
    assert sorted(bytes(r.value) for r in rows) == sorted(b"event-%d" % i for i in range(2000))
    for r in rows:
        i = int(bytes(r.value).split(b"-")[1])
        assert bytes(r.key) == b"user-%d" % (i % 40)
        assert r.partition == partition_for_key(bytes(r.key), 3)  # Kafka's murmur2 mapping
        assert [(h.key, bytes(h.value)) for h in r.headers] == [("n", b"%d" % i)]
        assert r.millis == 1_700_000_000_000 + i


def test_write_topic_fills_a_typed_topic_from_its_columns(
    spark: Any, spark_cluster: Any, spark_topic: Callable[..., str]
) -> None:
    schema = pa.schema([("category", pa.string()), ("revenue", pa.float64())])
    topic = spark_topic(partitions=2, schema=schema)
    df = spark.createDataFrame(
        [("books", 10.5), ("games", 2.0), ("books", 1.0)], ["category", "revenue"]
    )
    assert rs.spark.write_topic(df.withColumn("extra", df.revenue * 2), topic) == 3
    table = rs.data.read_topic(spark_cluster, topic).to_pandas()
    assert sorted(zip(table.category, table.revenue, strict=True)) == [
        ("books", 1.0),
        ("books", 10.5),
        ("games", 2.0),
    ]


def test_bad_input_names_the_bad_value(spark: Any, spark_topic: Callable[..., str]) -> None:
    topic = spark_topic()
    df = spark.createDataFrame([("a", "b")], ["k", "v"])
    with pytest.raises(InvalidRecordError, match=r"value_column='value'.*\['k', 'v'\]"):
        rs.spark.write_topic(df, topic)
    with pytest.raises(InvalidRecordError, match="key_column='user'"):
        rs.spark.write_topic(df, topic, key_column="user", value_column="v")
    with pytest.raises(UnknownTopicOrPartitionError, match="missing-topic"):
        rs.spark.write_topic(df, "missing-topic", value_column="v")
    typed = spark_topic(schema=pa.schema([("category", pa.string()), ("revenue", pa.float64())]))
    with pytest.raises(InvalidRecordError, match=r"\['category', 'revenue'\]"):
        rs.spark.write_topic(df, typed)


def test_a_custom_partitioner_writes_through_ray_tasks_with_it(
    spark: Any, spark_cluster: Any, spark_topic: Callable[..., str]
) -> None:
    """The Spark tasks produce with Kafka's partitioner only; a custom one makes
    write_topic take the RayDP route, whose Ray tasks run full Producers."""
    topic = spark_topic(partitions=3)
    df = spark.range(30).selectExpr("CAST(id AS STRING) AS key", "CAST(id AS STRING) AS value")
    # a lambda: pickled by value, so Ray's workers need not import this test module
    last = lambda key, all_partitions, available: all_partitions[-1]  # noqa: E731
    assert rs.spark.write_topic(df, topic, partitioner=last) == 30
    table = rs.data.read_topic(spark_cluster, topic).to_pandas()
    assert set(table.partition) == {2}
    assert sorted(table.value) == sorted(b"%d" % i for i in range(30))
