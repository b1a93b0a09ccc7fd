"""rs.spark.stream on real Spark on Ray: micro-batches, commits after success, resume."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

import raystream as rs
from raystream.errors import InvalidRequestError
from raystream.types import TopicPartition

pytestmark = pytest.mark.slow


class BatchFailedError(Exception):
    """What the failing foreach_batch raises."""


def produce(cluster: Any, topic: str, start: int, count: int) -> None:
    values = [b"r-%d" % i for i in range(start, start + count)]
    producer = cluster.producer()
    producer.send_batch(topic, pa.table({"value": values}))
    producer.close()  # every record written before the query looks at the topic


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
