"""``rs.data.write_topic``: a Ray Dataset written to a topic by Ray Data write tasks.

Each write task opens one :class:`~raystream.Producer` and hands it every block it gets
with ``send_batch`` (bulk produce: the block is partitioned with numpy, Kafka's murmur2
mapping for keyed rows, and sent as a few large requests), so only Arrow batches cross
process boundaries. The columns are ``send_batch``'s: ``value`` (binary or string) and
optional ``key``, ``headers``, ``timestamp`` for a byte topic; the schema's columns for
a typed topic. A block that does not fit fails its write task with
:class:`~raystream.errors.InvalidRecordError`, which ``write_topic`` raises.

Delivery is the producer's: at least once, acknowledged with ``acks`` ("all" by
default) before ``write_topic`` returns. A failed task may have written part of its
blocks.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import ray.data
from ray.data.block import Block, BlockAccessor
from ray.data.datasource import Datasink, WriteResult
from ray.exceptions import RayTaskError

from raystream.client.cluster import resolve_cluster
from raystream.data.source import check_remote_args
from raystream.errors import RaystreamError


def write_topic(
    ds: ray.data.Dataset,
    topic: str,
    *,
    cluster: Any = None,
    key_column: str | None = None,
    ray_remote_args: dict[str, Any] | None = None,
    **producer_config: Any,
) -> int:
    """Produce every row of ``ds`` to ``topic``; return how many were written.

    Args:
        ds: the dataset (``send_batch``'s columns, see the module docstring).
        topic: an existing topic.
        cluster: the raystream cluster; None means :func:`raystream.connect`.
        key_column: the column holding keys (default: a ``key`` column if present).
        ray_remote_args: options of the write tasks (``num_cpus``, ``resources``,
            ...), as Ray Data's own writers take them.
        **producer_config: :class:`~raystream.Producer` options (``acks="all"`` and
            the others' defaults unless given).

    Raises:
        UnknownTopicOrPartitionError: no such topic.
        InvalidRecordError: the dataset's columns do not fit the topic (the message
            names the missing or mistyped column).
        InvalidRequestError: ``ray_remote_args`` is not a dict of task options.
    """
    remote_args = check_remote_args(ray_remote_args)
    sink = TopicDatasink(resolve_cluster(cluster), topic, key_column, producer_config)
    try:
        ds.write_datasink(sink, ray_remote_args=remote_args)
    except RayTaskError as error:  # a write task's own error, not Ray's wrapper of it
        if isinstance(error.cause, RaystreamError):
            raise error.cause from error
        raise
    return sink.written


class TopicDatasink(Datasink[int]):
    """Ray Data sink producing blocks to one topic; ``written`` counts rows after a write."""

    def __init__(
        self, cluster: Any, topic: str, key_column: str | None, producer_config: dict[str, Any]
    ) -> None:
        self._cluster = cluster
        self._topic = topic
        self._key_column = key_column
        self._producer_config = producer_config
        self.written = 0
        cluster.topic_metadata(topic)  # an unknown topic fails here, before any task

    def write(self, blocks: Iterable[Block], ctx: Any) -> int:
        """Send every block with one producer; the rows acknowledged."""
        rows = 0
        producer = self._cluster.producer(**self._producer_config)
        try:
            for block in blocks:
                table = BlockAccessor.for_block(block).to_arrow()
                if table.num_rows:
                    producer.send_batch(self._topic, table, key_column=self._key_column)
                    rows += table.num_rows
        finally:
            producer.close()
        return rows

    def on_write_complete(self, write_result: WriteResult[int]) -> None:
        self.written = sum(write_result.write_returns)

    def get_name(self) -> str:
        return "WriteTopic"
