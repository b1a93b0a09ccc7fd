"""``rs.data.iter_topic``: Arrow batches that follow the live end of a topic.

For training loops that learn from a stream: batches of ``batch_size`` rows while
records are there, and at the live end whatever arrived (never holding records back
to fill a batch), then waits for more. Underneath is a :class:`~raystream.Consumer`
with every partition assigned and one fetch in flight per partition, so the next batch
is on its way while the loop trains on this one.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from raystream.data import offsets
from raystream.errors import InvalidRequestError
from raystream.types import TopicPartition

POLL_TIMEOUT_MS = 100
"""How long a poll waits for more records before a batch goes out short: a poll that
gets none in this time means the iteration is at the live end."""


def iter_topic(
    cluster: Any,
    topic: str,
    starting_offsets: Any = "earliest",
    batch_size: int = 1024,
    idle_timeout_ms: float | None = None,
) -> Iterator[pa.Table]:
    """Batches of ``topic``'s records from ``starting_offsets`` on, following its end.

    Args:
        cluster: the raystream cluster (:func:`raystream.connect`).
        topic: the topic; its partitions at the start of the iteration are read.
        starting_offsets: "earliest", "latest", a dict ``{partition: offset}`` or
            Spark's JSON form (see :mod:`raystream.data.offsets`).
        batch_size: rows per batch at most; full batches while records are waiting.
        idle_timeout_ms: end the iteration after this long without a new record
            (None: follow the topic until the loop stops).

    Yields:
        Arrow tables in ``Consumer.poll_arrow``'s layout (topic, partition, offset,
        timestamp, key, value or the typed topic's columns, headers), in offset order
        within each partition.

    Raises:
        InvalidRequestError: ``batch_size`` or ``idle_timeout_ms`` is invalid, or an
            offset option is malformed.
        UnknownTopicOrPartitionError: no such topic.
        OffsetOutOfRangeError: retention deleted records before they were read.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidRequestError(f"batch_size={batch_size!r} must be an integer >= 1")
    if idle_timeout_ms is not None and (
        isinstance(idle_timeout_ms, bool)
        or not isinstance(idle_timeout_ms, (int, float))
        or idle_timeout_ms < 0
    ):
        raise InvalidRequestError(
            f"idle_timeout_ms={idle_timeout_ms!r} must be a number >= 0 or None"
        )
    starts = offsets.start_offsets(cluster, topic, starting_offsets)
    consumer = cluster.consumer(
        auto_offset_reset="none", enable_auto_commit=False, max_poll_records=batch_size
    )
    try:
        consumer.assign([TopicPartition(topic, p) for p in starts])
        for partition, offset in starts.items():
            consumer.seek(TopicPartition(topic, partition), offset)
        yield from _batches(consumer, batch_size, idle_timeout_ms)
    finally:
        consumer.close()


def _batches(consumer: Any, batch_size: int, idle_timeout_ms: float | None) -> Iterator[pa.Table]:
    pending: list[pa.Table] = []
    rows = 0
    last_record = time.monotonic()
    while True:
        table = consumer.poll_arrow(timeout_ms=POLL_TIMEOUT_MS, max_records=batch_size - rows)
        if table.num_rows:
            pending.append(table)
            rows += table.num_rows
            last_record = time.monotonic()
            if rows < batch_size:
                continue
        if pending:
            yield pa.concat_tables(pending) if len(pending) > 1 else pending[0]
            pending, rows = [], 0
        elif (
            idle_timeout_ms is not None and time.monotonic() - last_record >= idle_timeout_ms / 1000
        ):
            return
