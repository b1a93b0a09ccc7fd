"""``rs.spark.write_topic``: a DataFrame written to a topic from its Spark partitions.

The DataFrame's partitions reach Ray as Arrow through RayDP's ``from_spark_recoverable``
(what ``ray.data.from_spark`` runs: the executors' JVMs convert rows to Arrow and cache
them, a Ray task per partition fetches its block from the executor actor), and Ray Data
write tasks produce them with ``send_batch`` (:mod:`raystream.data.sink`). Why this way rather than
``mapInArrow`` on the executors: Spark's Python workers are not Ray workers, so each
would have to join the Ray cluster as a driver of its own (seconds each, and a Ray
driver per Spark core) before it could call a leader; the RayDP route stays in Arrow
from the JVM to the leader, with the same number of copies, and runs the producers as
ordinary Ray tasks that Ray schedules, retries and accounts for.

Inside an exactly-once batch of ``rs.spark.stream`` (:func:`writing_through` marks it)
``write_topic`` writes through the query's transactional producer instead: a
transaction belongs to one producer (one producer id, epoch and sequence per
partition), so parallel writers cannot share it. The blocks still leave the executors
as Arrow through RayDP, and the driver fetches them one at a time into ``send_batch``:
the DataFrame is never collected whole on the driver, at most one Spark partition's
block is.
"""

from __future__ import annotations

import contextlib
import contextvars
import warnings
from collections.abc import Iterator
from typing import Any

import ray
import ray.data
from pyspark.sql import Column, DataFrame
from pyspark.sql.functions import col
from raydp.spark import from_spark_recoverable, release_spark_recoverable

from raystream.client.producer import Producer
from raystream.data.sink import write_topic as write_dataset
from raystream.errors import InvalidRecordError, InvalidRequestError
from raystream.spark.context import attachment

EXTRA_COLUMNS = ("headers", "timestamp")
"""Columns written when the DataFrame has them (Kafka's record headers and timestamp)."""

_transaction: contextvars.ContextVar[Producer | None] = contextvars.ContextVar(
    "raystream_spark_transaction", default=None
)
"""The transactional producer whose open transaction ``write_topic`` writes through."""


@contextlib.contextmanager
def writing_through(producer: Producer) -> Iterator[None]:
    """Within this block (on this thread or task), ``write_topic`` sends through
    ``producer``, whose transaction the caller has begun and will commit or abort."""
    token = _transaction.set(producer)
    try:
        yield
    finally:
        _transaction.reset(token)


def write_topic(
    df: DataFrame,
    topic: str,
    key_column: str | None = None,
    value_column: str = "value",
    **producer_config: Any,
) -> int:
    """Produce every row of ``df`` to ``topic`` in parallel; return the rows written.

    A byte topic takes ``value_column`` (binary or string) as the value and
    ``key_column`` (default: a ``key`` column if there is one) as the key; a typed topic
    takes its schema's columns (``value_column`` is not used). ``headers``
    (array<struct<key string, value binary>>) and ``timestamp`` (timestamp or epoch
    milliseconds) columns are written too when present. Keyed rows go to Kafka's
    murmur2 partition of the key, rows without a key are spread over the partitions.

    Called from the ``foreach_batch`` of an exactly-once ``rs.spark.stream`` query,
    the rows are written in the batch's transaction (see the module docstring): they
    become visible to read_committed readers when the batch commits, never if it fails.

    Args:
        df: a DataFrame of a session from :func:`raystream.spark.session`.
        topic: an existing topic.
        key_column, value_column: the columns holding keys and values.
        **producer_config: :class:`~raystream.Producer` options; ``acks="all"`` unless
            given. Not inside an exactly-once batch, whose producer is the query's.

    Raises:
        UnknownTopicOrPartitionError: no such topic.
        InvalidRecordError: a named or needed column is missing or does not fit the
            topic (the message names it).
        InvalidRequestError: producer options given inside an exactly-once batch.
        ProducerFencedError: inside an exactly-once batch, a newer run of the query
            took over.
    """
    producer = _transaction.get()
    if producer is not None and producer_config:
        raise InvalidRequestError(
            f"write_topic(..., {', '.join(sorted(producer_config))}=...): inside an "
            "exactly-once stream batch the query's transactional producer writes; give "
            "producer options to rs.spark.stream(producer_config=...)"
        )
    cluster = attachment(df.sparkSession).cluster
    selected = df.select(
        *_columns(cluster.topic_metadata(topic), df.columns, key_column, value_column)
    )
    with _quiet_raydp():
        ds = from_spark_recoverable(selected)
    try:
        if producer is None:
            return write_dataset(ds, topic, cluster=cluster, **producer_config)
        return _send_blocks(ds, topic, producer)
    finally:
        with _quiet_raydp():
            release_spark_recoverable(selected)


def _send_blocks(ds: ray.data.Dataset, topic: str, producer: Producer) -> int:
    """Send the dataset's blocks with ``producer``, one block on the driver at a time."""
    rows = 0
    for ref in ds.to_arrow_refs():
        table = ray.get(ref)
        if table.num_rows:
            producer.send_batch(topic, table)
            rows += table.num_rows
        del table  # freed before the next block arrives
    return rows


@contextlib.contextmanager
def _quiet_raydp() -> Iterator[None]:
    """RayDP reads the deprecated ``DataFrame.sql_ctx``: not the user's business."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "DataFrame.sql_ctx", UserWarning)
        yield


def _columns(
    metadata: Any, names: list[str], key_column: str | None, value_column: str
) -> list[Column]:
    """The DataFrame's columns to write, renamed to ``send_batch``'s names."""
    schema = metadata.value_schema
    if schema is None:
        _require(names, value_column, "value_column", metadata.name)
        columns = [col(value_column).alias("value")]
        own = {"value"}
    else:
        missing = [f.name for f in schema if f.name not in names]
        if missing:
            raise InvalidRecordError(
                f"the DataFrame lacks typed topic {metadata.name!r}'s columns {missing}; "
                f"it has {names}"
            )
        columns = [col(f.name) for f in schema]
        own = set(schema.names)
    if key_column is not None:
        _require(names, key_column, "key_column", metadata.name)
        columns.append(col(key_column).alias("key"))
    elif "key" in names and "key" not in own:
        columns.append(col("key"))
    columns.extend(col(name) for name in EXTRA_COLUMNS if name in names and name not in own)
    return columns


def _require(names: list[str], name: str, option: str, topic: str) -> None:
    if name not in names:
        raise InvalidRecordError(
            f"{option}={name!r} is not a column of the DataFrame written to {topic!r}; "
            f"it has {names}"
        )
