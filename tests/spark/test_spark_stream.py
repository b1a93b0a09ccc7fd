"""rs.spark.stream on real Spark on Ray: micro-batches, commits after success, resume,
and the exactly-once path (output and offsets in one transaction per batch, fencing)."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

import raystream as rs
from raystream.errors import InvalidConfigError, InvalidRequestError, ProducerFencedError
from raystream.types import TopicPartition

pytestmark = pytest.mark.slow


class BatchFailedError(Exception):
    """What the failing foreach_batch raises."""


def produce(cluster: Any, topic: str, start: int, count: int) -> None:
    values = [b"r-%d" % i for i in range(start, start + count)]
    producer = cluster.producer()
    producer.send_batch(topic, pa.table({"value": values}))
    producer.close()  # every record written before the query looks at the topic


def committed_offsets(cluster: Any, group: str, topic: str, partitions: int) -> list[int | None]:
    """The group's committed offsets of ``topic``, asked once no transaction is open."""
    with cluster.consumer(
        group_id=group, enable_auto_commit=False, isolation_level="read_committed"
    ) as consumer:
        return [consumer.committed(TopicPartition(topic, p)) for p in range(partitions)]


def test_a_stopped_or_failed_query_resumes_from_its_last_committed_batch(
    spark: Any, spark_cluster: Any, spark_topic: Callable[..., str]
) -> None:
    topic = spark_topic(partitions=2)
    group = f"{topic}-etl"
    seen: list[bytes] = []
    batch_ids: list[int] = []

    def collect(df: Any, batch_id: int) -> None:
        batch_ids.append(batch_id)
        seen.extend(bytes(r.value) for r in df.select("value").collect())

    produce(spark_cluster, topic, 0, 100)
    query = rs.spark.stream(
        spark,
        topic,
        group,
        collect,
        trigger_interval_ms=100,
        max_offsets_per_trigger=40,
        starting_offsets="earliest",
    )
    query.process_all_available(timeout_s=300)
    query.stop()
    assert not query.is_active
    assert sorted(seen) == sorted(b"r-%d" % i for i in range(100))
    assert batch_ids == list(range(len(batch_ids))) and len(batch_ids) >= 3  # <= 40 per batch
    committed = spark_cluster.admin().describe_group(group).offsets
    ends = {tp: offset for tp, offset in committed.items() if tp.topic == topic}
    assert sum(ends.values()) == 100

    produce(spark_cluster, topic, 100, 50)

    def fail(df: Any, batch_id: int) -> None:
        raise BatchFailedError(f"batch {batch_id} of {df.count()} rows")

    failing = rs.spark.stream(spark, topic, group, fail, trigger_interval_ms=100)
    with pytest.raises(BatchFailedError, match="batch 0 of 50 rows"):
        stopped = failing.await_termination(timeout_s=300)
        pytest.fail(f"no error: stopped={stopped}, committed={failing._committed}")
    assert spark_cluster.admin().describe_group(group).offsets == committed  # nothing moved

    seen.clear()
    resumed = rs.spark.stream(spark, topic, group, collect, trigger_interval_ms=100)
    resumed.process_all_available(timeout_s=300)
    resumed.stop()
    assert sorted(seen) == sorted(b"r-%d" % i for i in range(100, 150))  # the failed batch again
    assert resumed.last_progress is not None and resumed.exception() is None
    consumer = spark_cluster.consumer(group_id=group, enable_auto_commit=False)
    committed_now = [consumer.committed(TopicPartition(topic, p)) for p in (0, 1)]
    assert sum(offset or 0 for offset in committed_now) == 150  # None: nothing ever there
    consumer.close()


def test_bad_arguments_are_refused(spark: Any, spark_topic: Callable[..., str]) -> None:
    topic = spark_topic()
    with pytest.raises(InvalidRequestError, match="group_id=''"):
        rs.spark.stream(spark, topic, "", print)
    with pytest.raises(InvalidRequestError, match="max_offsets_per_trigger=0"):
        rs.spark.stream(spark, topic, "g", print, max_offsets_per_trigger=0)
    with pytest.raises(InvalidRequestError, match="exactly_once='yes'"):
        rs.spark.stream(spark, topic, "g", print, exactly_once="yes")
    with pytest.raises(InvalidRequestError, match="pass exactly_once=True"):
        rs.spark.stream(spark, topic, "g", print, producer_config={"acks": "all"})
    with pytest.raises(InvalidRequestError, match="without transactional_id"):
        rs.spark.stream(
            spark, topic, "g", print, exactly_once=True, producer_config={"transactional_id": "t"}
        )
    with pytest.raises(InvalidConfigError, match="acks"):
        rs.spark.stream(spark, topic, "g", print, exactly_once=True, producer_config={"acks": 1})


def test_exactly_once_output_survives_a_failed_batch_a_restart_and_a_zombie(
    spark: Any,
    spark_cluster: Any,
    spark_topic: Callable[..., str],
    read_all: Callable[..., list[Any]],
) -> None:
    source, sink = spark_topic(partitions=2), spark_topic(partitions=2)
    group = f"{source}-eos"
    refused: list[Exception] = []
    written: list[int] = []

    def transform(df: Any, batch_id: int) -> None:
        output = df.selectExpr("key", "concat(CAST(value AS STRING), '!') AS value")
        written.append(rs.spark.write_topic(output, sink))

    def fail_after_writing(df: Any, batch_id: int) -> None:
        try:
            rs.spark.write_topic(df, sink, acks=1)  # the query's producer writes here
        except InvalidRequestError as error:
            refused.append(error)
        transform(df, batch_id)
        raise BatchFailedError(f"batch {batch_id} failed after writing")

    def start(fn: Callable[[Any, int], None]) -> Any:
        return rs.spark.stream(
            spark,
            source,
            group,
            fn,
            trigger_interval_ms=100,
            max_offsets_per_trigger=25,
            starting_offsets="earliest",
            exactly_once=True,
        )

    produce(spark_cluster, source, 0, 60)
    failing = start(fail_after_writing)
    with pytest.raises(BatchFailedError, match="batch 0 failed after writing"):
        failing.await_termination(timeout_s=300)
    assert refused and "producer_config" in str(refused[0])
    assert 0 < written[0] <= 25
    assert len(read_all(spark_cluster, sink, "read_uncommitted", 2)) == written[0]  # written
    assert read_all(spark_cluster, sink, "read_committed", 2) == []  # ...and aborted
    assert committed_offsets(spark_cluster, group, source, 2) == [None, None]

    first = start(transform)
    first.process_all_available(timeout_s=300)
    assert first.transactional_id == f"raystream-stream:{group}:{source}"
    # A restart while the first run is alive: once started it has fenced the first (now
    # a zombie), and it resumes where the first run committed.
    second = start(transform)
    second.process_all_available(timeout_s=300)
    assert first.is_active  # idle: it learns of the fence at its next batch
    produce(spark_cluster, source, 60, 40)
    with pytest.raises(ProducerFencedError):
        stopped = first.await_termination(timeout_s=300)
        pytest.fail(f"the zombie was not fenced: stopped={stopped}")
    second.process_all_available(timeout_s=300)
    second.stop()
    assert second.exception() is None

    values = read_all(spark_cluster, sink, "read_committed", 2)
    twice = [v for v, n in collections.Counter(values).items() if n > 1]
    assert not twice, f"output more than once: {twice[:5]}"
    assert sorted(values) == sorted(b"r-%d!" % i for i in range(100))
    assert sum(committed_offsets(spark_cluster, group, source, 2)) == 100
