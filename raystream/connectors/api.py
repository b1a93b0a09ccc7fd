"""The connector API: Kafka Connect's classes and lifecycle, with Arrow batches beside records.

A connector is configuration plus code that moves data between a topic and another
system. Its *connector* object plans the work (``start(config)``, then
``task_configs(max_tasks)`` splits it into task configs); its *tasks* do the work in
worker actors. The lifecycle and names are Kafka Connect's, so a Kafka Connect user
reads a raystream connector without a guide::

    class LinesSource(SourceConnector):
        def task_class(self): return LinesTask
        # start keeps the config; task_configs makes one task of it; stop does nothing

    class LinesTask(SourceTask):
        def start(self, config):
            stored = self.context.offset_storage_reader.offset({"file": config["file"]})
            self.position = stored["position"] if stored else 0
        def poll(self):
            ...  # return [SourceRecord({"file": f}, {"position": p}, "lines", value=line)]

Batches, not records, cross process boundaries (raystream's rule): besides Kafka
Connect's per-record calls (``SourceTask.poll`` returning :class:`SourceRecord` objects,
``SinkTask.put`` taking :class:`SinkRecord` objects), a task may work on whole Arrow
tables (``SourceTask.poll`` returning a :class:`SourceBatch`, ``SinkTask.put_batch``),
which is how the built-in file, data-lake and database connectors reach their speed.
The framework converts between the two shapes, so a connector writes whichever is
natural and transforms and converters see one shape.

**The sink batch** handed to ``SinkTask.put_batch`` is a ``pyarrow.Table`` with the
columns ``topic`` (string), ``partition`` (int32), ``offset`` (int64), ``timestamp``
(int64 ms), ``key`` and ``value`` (as the key and value converters made them: binary,
string, or a struct for structured data), ``headers`` (list of struct<key: string,
value: binary>), in partition order, offsets ascending within a partition.

**The source batch** (:class:`SourceBatch`) carries a table with a ``value`` column and
optionally ``key``, ``timestamp``, ``headers``, ``topic`` and ``partition`` columns (a
missing ``topic`` column means the batch's ``topic``), and one source partition and
the source offset reached after its last row: offsets are committed per batch. Once a
batch's rows are written the framework tells the task where they landed
(``SourceTask.commit_batch`` with a :class:`Delivery`), as Kafka Connect calls
``commitRecord`` per record.

Nothing here imports Ray: connectors are plain classes, tested by calling them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raystream.types import TopicPartition

#: A source partition or offset: a small JSON-able dict, as in Kafka Connect.
SourceKey = Mapping[str, Any]

#: A record header: (key, value bytes or None), as Kafka clients give them.
Header = tuple[str, bytes | None]


@dataclass(frozen=True)
class SourceRecord:
    """One record a source task read, with where it came from in the source system.

    ``source_partition`` names a stream in the source (a file, a table), and
    ``source_offset`` the position after this record in it; the framework stores the
    latest offset per source partition in the ``connect-offsets`` topic once the record
    is written, so a restarted task resumes there. ``partition=None`` lets the
    producer's partitioner choose (by key), as in Kafka Connect.
    """

    source_partition: SourceKey
    source_offset: SourceKey
    topic: str
    value: Any = None
    key: Any = None
    partition: int | None = None
    timestamp: int | None = None
    headers: Sequence[Header] = ()


@dataclass(frozen=True)
class SourceBatch:
    """Many records of one source partition, columnar (see the module docstring).

    ``source_offset`` is the position after the batch's last row; the batch is written
    as a whole before its offset is stored.
    """

    source_partition: SourceKey
    source_offset: SourceKey
    topic: str
    table: pa.Table


@dataclass
class Delivery:
    """Where the ``rows`` rows of a written batch landed: the offsets of its first and
    last rows, once known (None: unknown, e.g. dropped by a transform or spread over
    several partitions). ``last_offset`` stays None where the writer vouches that the
    rows sit at consecutive offsets from ``first_offset`` (one producer writing one
    partition in order)."""

    rows: int
    first_offset: int | None = None
    last_offset: int | None = None

    def consecutive(self) -> bool:
        """Whether the rows are known (or vouched) to sit at consecutive offsets."""
        return self.last_offset is None or self.last_offset - (self.first_offset or 0) == (
            self.rows - 1
        )


@dataclass(frozen=True)
class SinkRecord:
    """One record a sink task is given: the topic's record after converters and transforms."""

    topic: str
    partition: int
    offset: int
    key: Any
    value: Any
    timestamp: int | None = None
    headers: Sequence[Header] = field(default_factory=tuple)


class OffsetStorageReader(Protocol):
    """Reads the source offsets the framework committed for this connector."""

    def offset(self, source_partition: SourceKey) -> dict[str, Any] | None:
        """The latest committed offset of ``source_partition``, or None if there is none."""
        ...

    def offsets(self, source_partitions: Sequence[SourceKey]) -> dict[str, dict[str, Any]]:
        """Committed offsets of several source partitions, keyed by their JSON encoding."""
        ...


class ConnectorContext(Protocol):
    """What a connector may ask of the framework."""

    def request_task_reconfiguration(self) -> None:
        """Ask for ``task_configs`` again (the source's shape changed, e.g. a new table)."""
        ...

    def raise_error(self, error: Exception) -> None:
        """Fail the connector with ``error`` (shown by its status)."""
        ...


class SourceTaskContext(Protocol):
    """What a source task may ask of the framework."""

    offset_storage_reader: OffsetStorageReader
    transaction_context: TransactionContext | None


class TransactionContext(Protocol):
    """For a connector that defines its own transaction boundaries (KIP-618)."""

    def commit_transaction(self) -> None:
        """Commit after the records polled so far."""
        ...

    def abort_transaction(self) -> None:
        """Abort the records polled since the last commit."""
        ...


class SinkTaskContext(Protocol):
    """What a sink task may ask of the framework."""

    def offset(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Resume these partitions at these offsets: a sink that stores its offsets
        with the data (exactly once) rewinds the consumer to them in ``open``."""
        ...

    def assignment(self) -> set[TopicPartition]:
        """The topic partitions this task holds now."""
        ...

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop fetching these partitions (the target is busy)."""
        ...

    def resume(self, *partitions: TopicPartition) -> None:
        """Fetch these partitions again."""
        ...

    def request_commit(self) -> None:
        """Commit offsets soon rather than at the next interval."""
        ...


class Task(ABC):
    """Work a connector hands a worker; one instance per task, in one worker actor."""

    context: Any = None  # set by the framework before ``start``

    def version(self) -> str:
        """The task's version, shown by status and the plugins listing."""
        return "0.1.0"

    @abstractmethod
    def start(self, config: dict[str, str]) -> None:
        """Begin with one of the configs the connector's ``task_configs`` made."""

    @abstractmethod
    def stop(self) -> None:
        """Release what ``start`` took; called once, also after a failure."""


class SourceTask(Task):
    """Reads from a source system; the framework writes what it returns to topics."""

    context: SourceTaskContext

    @abstractmethod
    def poll(self) -> Sequence[SourceRecord] | SourceBatch | None:
        """Records read since the last call, or None/empty when there is nothing yet.

        Should return within about a second when the source is idle, so that pause,
        stop and rebalances are prompt.
        """

    def commit(self) -> None:
        """Called after the framework stored the offsets of the records written so far;
        a source that acknowledges reads (a queue) acknowledges here."""

    def commit_record(self, record: SourceRecord, metadata: Any) -> None:
        """Called per record once it is written (Kafka Connect's hook; rarely needed)."""

    def commit_batch(self, batch: SourceBatch, delivery: Delivery) -> None:
        """Called once the rows of a :class:`SourceBatch` that :meth:`poll` returned are
        written (acknowledged; under exactly-once, their transaction committed), with
        where they landed: the batch's twin of :meth:`commit_record`, as ``put_batch``
        is ``put``'s. Batches are committed in the order they were polled, before the
        :meth:`commit` that follows their offsets; a batch never written (its
        transaction aborted, the task stopped first) gets no call, so a task that keeps
        something per batch drops what it kept for earlier batches of the same source
        partition when a later one commits. The framework logs what this raises and
        goes on, as Kafka Connect does for ``commitRecord``."""


class SinkTask(Task):
    """Writes what the framework consumed from topics into a target system."""

    context: SinkTaskContext

    def put(self, records: Sequence[SinkRecord]) -> None:
        """Write these records (or buffer them until ``flush``).

        A sink task implements ``put`` or ``put_batch``; raising a retriable error
        makes the framework hand the same records again after a backoff.
        """
        raise NotImplementedError(f"{type(self).__name__} implements neither put nor put_batch")

    def put_batch(self, batch: pa.Table) -> None:
        """Write a sink batch (columns in the module docstring); by default as records."""
        self.put(sink_records(batch))

    def flush(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Make everything given so far durable; ``offsets`` are the next offsets to read."""

    def pre_commit(self, offsets: Mapping[TopicPartition, int]) -> Mapping[TopicPartition, int]:
        """The offsets the framework may commit now; by default ``flush`` and all of them.

        A sink that stores offsets with its data (exactly once) returns {} and rewinds
        through ``context.offset`` in ``open`` instead.
        """
        self.flush(offsets)
        return offsets

    def open(self, partitions: Sequence[TopicPartition]) -> None:
        """These partitions were assigned to the task (a rebalance)."""

    def close(self, partitions: Sequence[TopicPartition]) -> None:
        """These partitions were taken away; write or drop what is buffered for them."""


class Connector(ABC):
    """Plans the work of one configured connector: validates config, splits it into tasks."""

    context: ConnectorContext | None = None  # set by the framework before ``start``

    def version(self) -> str:
        """The connector's version, shown by ``GET /connector-plugins``."""
        return "0.1.0"

    def validate(self, config: Mapping[str, str]) -> None:
        """Raise ``InvalidConfigError`` naming the bad key when ``config`` cannot work.

        The default accepts every config: keys the connector does not know are ignored,
        as Kafka Connect does.
        """
        return None

    def validate_for_workers(self, config: Mapping[str, str], namespace: str) -> None:
        """Raise ``InvalidConfigError`` naming the key when ``config`` cannot work on
        Connect workers of the raystream cluster ``namespace``: their tasks read and
        write that cluster's topics, so a config that points the records elsewhere
        must be refused rather than silently written there. Called after
        :meth:`validate`; the default accepts every config.
        """
        return None

    config: dict[str, str]

    def start(self, config: dict[str, str]) -> None:
        """Begin with the connector's config (already validated).

        The default keeps it as ``self.config``, which is all most connectors need: the
        planning happens in ``task_configs`` and the work in the tasks.
        """
        self.config = dict(config)

    @abstractmethod
    def task_class(self) -> type[Task]:
        """The task class the workers instantiate."""

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        """At most ``max_tasks`` configs, one per task to run.

        The default is one task with the connector's config (a source that is one
        stream, as Kafka's FileStreamSource); :class:`SinkConnector` gives each of
        ``max_tasks`` tasks the same config, since its tasks share the topic partitions
        through their consumer group.
        """
        return [dict(self.config)]

    def stop(self) -> None:
        """Release what ``start`` took; the default has nothing to release."""
        return None


class SourceConnector(Connector):
    """A connector whose tasks read from another system into topics."""

    def exactly_once_support(self, config: Mapping[str, str]) -> bool:
        """Whether its tasks' offsets and records can share a transaction (KIP-618)."""
        return True

    def can_define_transaction_boundaries(self, config: Mapping[str, str]) -> bool:
        """Whether its tasks use ``transaction_context`` themselves (KIP-618)."""
        return False


class SinkConnector(Connector):
    """A connector whose tasks write topics into another system."""

    def exactly_once_support(self, config: Mapping[str, str]) -> bool:
        """Whether its tasks write each record once whatever the crashes: they store
        the offsets with the data (``pre_commit`` returns {} and ``open`` rewinds),
        which is what ``exactly.once.support=required`` asks of a sink. The default
        sink commits offsets after its writes: at least once."""
        return False

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        """``max_tasks`` tasks with the connector's config: the group's assignment
        shares the topic partitions among them."""
        return [dict(self.config) for _ in range(max(1, max_tasks))]


def partition_runs(batch: pa.Table) -> list[tuple[TopicPartition, int, int]]:
    """The runs of consecutive rows of one topic partition in a sink batch, in batch
    order, as ``(tp, start, stop)`` row ranges.

    A batch as the framework hands it holds each partition in one run (partitions
    follow each other); a transform that routes rows (``RegexRouter``,
    ``TimestampRouter``) may interleave them, and then a partition has several runs.
    Found by comparing each row's topic and partition with the previous row's over
    whole columns: for the usual batch of one partition that is two vectorized
    comparisons, no group-by and no per-row Python. For example, partitions
    ``[1, 1, 0, 0, 1]`` of one topic ``t`` give ``[(t-1, 0, 2), (t-0, 2, 4), (t-1, 4, 5)]``.
    """
    rows = batch.num_rows
    if rows == 0:
        return []
    topics = batch.column("topic")
    partitions = batch.column("partition").to_numpy()
    changes = partitions[1:] != partitions[:-1]
    if rows > 1:
        renamed = pc.not_equal(topics.slice(1), topics.slice(0, rows - 1))
        changes |= renamed.to_numpy(zero_copy_only=False)
    starts = [0, *(np.flatnonzero(changes) + 1).tolist()]
    stops = [*starts[1:], rows]
    return [
        (TopicPartition(topics[start].as_py(), int(partitions[start])), start, stop)
        for start, stop in zip(starts, stops, strict=True)
    ]


def sink_records(batch: pa.Table) -> list[SinkRecord]:
    """The per-record view of a sink batch: one :class:`SinkRecord` per row."""
    columns = batch.to_pydict()
    headers = columns.get("headers") or [None] * batch.num_rows
    timestamps = columns.get("timestamp") or [None] * batch.num_rows
    return [
        SinkRecord(
            topic=topic,
            partition=partition,
            offset=offset,
            key=key,
            value=value,
            timestamp=timestamp,
            headers=tuple((h["key"], h["value"]) for h in header_list or ()),
        )
        for topic, partition, offset, key, value, timestamp, header_list in zip(
            columns["topic"],
            columns["partition"],
            columns["offset"],
            columns["key"],
            columns["value"],
            timestamps,
            headers,
            strict=True,
        )
    ]
