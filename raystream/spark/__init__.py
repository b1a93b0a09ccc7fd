"""Spark on raystream topics through RayDP (``rs.spark``).

Spark runs on the raystream cluster's Ray (RayDP's executors are Ray actors) and topics
reach it as Arrow through Ray's object store, with no JVM Kafka connector::

    spark = rs.spark.session(cluster)                    # Spark on Ray, Java 17 ready
    orders = rs.spark.read_topic(spark, "orders")         # Spark's Kafka source columns
    totals = orders.groupBy("partition").count()
    rs.spark.write_topic(totals.selectExpr("CAST(count AS STRING) AS value"), "totals")
    query = rs.spark.stream(spark, "orders", "orders-etl", lambda df, batch_id: ...)
    query.stop()                                          # resumes from its group's offsets
    rs.spark.stream(spark, "orders", "copy", copy, exactly_once=True)  # write_topic inside
                                                          # commits with the offsets
    rs.spark.stop()

Offset options are Spark's Kafka source's, shared with ``rs.data``
(:mod:`raystream.data.offsets`). The names load on first use, so that Ray workers
running the read tasks of :mod:`raystream.spark.blocks` never import pyspark.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from raystream.spark.context import session, stop
    from raystream.spark.microbatch import StreamingQuery, stream
    from raystream.spark.sink import write_topic
    from raystream.spark.source import read_topic, release

_LAZY = {
    "StreamingQuery": "raystream.spark.microbatch",
    "read_iceberg": "raystream.connectors.datalake",
    "read_topic": "raystream.spark.source",
    "release": "raystream.spark.source",
    "session": "raystream.spark.context",
    "stop": "raystream.spark.context",
    "stream": "raystream.spark.microbatch",
    "write_topic": "raystream.spark.sink",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'raystream.spark' has no attribute {name!r}")


__all__ = [
    "StreamingQuery",
    "read_iceberg",
    "read_topic",
    "release",
    "session",
    "stop",
    "stream",
    "write_topic",
]
