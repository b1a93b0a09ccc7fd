"""Spark on raystream topics through RayDP (``rs.spark``).

Spark runs on the raystream cluster's Ray (RayDP's executors are Ray actors) and topics
reach it as Arrow through Ray's object store, with no JVM Kafka connector::

    spark = rs.spark.session(cluster)                    # Spark on Ray, Java 17 ready
    orders = rs.spark.read_topic(spark, "orders")         # Spark's Kafka source columns
    totals = orders.groupBy("partition").count()
    rs.spark.write_topic(totals.selectExpr("CAST(count AS STRING) AS value"), "totals")
    query = rs.spark.stream(spark, "orders", "orders-etl", lambda df, batch_id: ...)
    query.stop()                                          # resumes from its group's offsets
    rs.spark.stop()

Offset options are Spark's Kafka source's, shared with ``rs.data``
(:mod:`raystream.data.offsets`).
"""

from raystream.spark.session import session, stop
from raystream.spark.sink import write_topic
from raystream.spark.source import read_topic, release
from raystream.spark.stream import StreamingQuery, stream

__all__ = ["StreamingQuery", "read_topic", "release", "session", "stop", "stream", "write_topic"]
