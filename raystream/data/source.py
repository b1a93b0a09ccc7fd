"""``rs.data.read_topic``: a topic's offset range as a Ray Dataset, one read task per
partition.

The dataset is lazy and streams: Ray Data runs the read tasks when the dataset is
consumed, each task fetches its partition's range from the leader with
:func:`~raystream.data.reader.read_range` and yields Arrow blocks into Ray's object
store, so a topic larger than memory can be processed block by block. The offsets are
resolved when ``read_topic`` is called (a snapshot). Rows have the columnar consumer
layout of ``Consumer.poll_arrow``: topic, partition, offset, timestamp (ms), key, then
``value`` or a typed topic's own columns, then headers.

Ray Data gives no per-task placement, so unlike Spark's reader these tasks are not
pinned next to their leaders; a fetch from another node moves the same bytes through
the object store that moving the block would.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import ray.data
from ray.data.block import BlockMetadata
from ray.data.datasource import Datasource, ReadTask

from raystream.data import offsets
from raystream.data.offsets import PartitionRange
from raystream.data.reader import read_range
from raystream.errors import InvalidRequestError
from raystream.records import empty_fetch, to_user_table


def read_topic(
    cluster: Any,
    topic: str,
    starting_offsets: Any = "earliest",
    ending_offsets: Any = "latest",
    isolation_level: str = "read_uncommitted",
    ray_remote_args: dict[str, Any] | None = None,
) -> ray.data.Dataset:
    """The records of ``topic`` between the two offset options, as a Ray Dataset.

    Args:
        cluster: the raystream cluster (:func:`raystream.connect`).
        topic: the topic to read.
        starting_offsets, ending_offsets: "earliest", "latest", a dict
            ``{partition: offset}`` (-2 earliest, -1 latest) or Spark's JSON form; the
            end is exclusive (see :mod:`raystream.data.offsets`).
        isolation_level: "read_uncommitted" (every record below the high watermark)
            or "read_committed" (up to the last stable offset, without the records of
            aborted transactions), as a Kafka consumer's.
        ray_remote_args: options of the read tasks (``num_cpus``, ``resources``,
            ...), as Ray Data's own readers take them. A read task mostly waits on its
            leader, so ``{"num_cpus": 0.25}`` lets more partitions be read at once on
            a small cluster.

    Raises:
        UnknownTopicOrPartitionError: no such topic, or an option names a partition it
            lacks.
        InvalidRequestError: an offset option, the isolation level or
            ``ray_remote_args`` is malformed.
        OffsetOutOfRangeError: an explicit offset lies outside its partition's log.
    """
    remote_args = check_remote_args(ray_remote_args)
    ranges = offsets.plan(cluster, topic, starting_offsets, ending_offsets, isolation_level)
    empty = empty_fetch(cluster.topic_metadata(topic).record_schema)
    schema = to_user_table(empty, topic, 0).schema
    return ray.data.read_datasource(
        TopicDatasource(cluster, ranges, schema), ray_remote_args=remote_args
    )


def check_remote_args(ray_remote_args: Any) -> dict[str, Any]:
    """``ray_remote_args`` as a dict (None gives Ray's defaults).

    Raises:
        InvalidRequestError: not a dict with string keys.
    """
    if ray_remote_args is None:
        return {}
    if not isinstance(ray_remote_args, dict) or not all(
        isinstance(key, str) for key in ray_remote_args
    ):
        raise InvalidRequestError(
            f"ray_remote_args must be a dict of Ray task options such as "
            f"{{'num_cpus': 0.5}}, not {ray_remote_args!r}"
        )
    return dict(ray_remote_args)


class TopicDatasource(Datasource):
    """Ray Data source over planned partition ranges: one read task per partition."""

    def __init__(self, cluster: Any, ranges: list[PartitionRange], schema: pa.Schema) -> None:
        self._cluster = cluster
        self._ranges = ranges
        self._schema = schema

    def estimate_inmemory_data_size(self) -> int | None:
        return None  # record sizes are not known before reading

    def get_read_tasks(
        self, parallelism: int, per_task_row_limit: int | None = None, data_context: Any = None
    ) -> list[ReadTask]:
        """One task per partition, whatever ``parallelism`` asks (a partition is the unit
        of order; a range with nothing to read gets no task)."""
        tasks = [
            ReadTask(
                functools.partial(_read_partition, self._cluster, part),
                BlockMetadata(num_rows=None, size_bytes=None, exec_stats=None, input_files=None),
                schema=self._schema,
                per_task_row_limit=per_task_row_limit,
            )
            for part in self._ranges
            if part.end > part.start
        ]
        if not tasks:  # nothing to read: one empty block keeps the schema
            tasks.append(
                ReadTask(
                    functools.partial(_no_rows, self._schema),
                    BlockMetadata(num_rows=0, size_bytes=0, exec_stats=None, input_files=None),
                    schema=self._schema,
                )
            )
        return tasks

    def get_name(self) -> str:
        return "ReadTopic"


def _read_partition(cluster: Any, part: PartitionRange) -> Iterator[pa.Table]:
    for table in read_range(cluster, part):
        yield to_user_table(table, part.topic, part.partition)


def _no_rows(schema: pa.Schema) -> Iterator[pa.Table]:
    yield schema.empty_table()
