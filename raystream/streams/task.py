"""A streams task: one sub-topology on one partition of its inputs (pure: no Ray, no clock).

The runtime (a worker actor) owns a :class:`Task` per assigned partition group, feeds it
polled records, and does what the :class:`TaskResult` says: produce the output records,
write the changelog records, commit the input offsets (in one transaction under
exactly-once). The task itself never touches the network, reads no clock (wall-clock
punctuation runs off the ``now_ms`` the caller passes) and never commits.

Order: records of one partition are processed in offset order; across the task's
partitions (a join or merge reads partition p of several topics) the task picks, among
the heads of the partitions present in the batch, the record with the smallest
timestamp, as Kafka Streams' ``PartitionGroup`` does. The task's stream time (the
largest timestamp seen) advances before a record is processed; user stream-time
punctuators run after each record that advanced it. Windowed aggregates, suppression and
stream-stream joins judge closing by their own observed stream time (of the records that
reach them, starting from the task's), as Kafka Streams' processors do, so records a
filter drops or table updates in the same task do not close their windows.

Example::

    sub = app.subtopologies()[0]
    stores = open_task_stores(sub, state_dir / "0_0")
    task = Task(TaskId(0, 0), sub, stores, app.application_id)
    result = task.process(consumer.poll_records(), now_ms=clock_ms)
    producer.send each result.outputs; write result.changelog; commit result.offsets

The Arrow path: a source that reads one topic as stored (no deserializers, no timestamp
extractor, not a repartition topic) and feeds only ``map_batches`` nodes (each with that
source as its only parent) takes its partition's records as the Arrow table
``Consumer.poll_arrow`` returns (``process(..., tables=[...])``, see
:attr:`Task.arrow_topics`): no Python object per record; ``fn`` gets the columns it
would get from the record path. Such a table counts as one step of the task: its
records are processed (stream time advances to their largest timestamp, stream-time
punctuators run once after) before the batch's other records. A ``map_batches`` node
whose only child writes to a user topic without serializers emits ``fn``'s table as
one :class:`OutputBatch` (the runtime produces it with ``send_batch``).
"""

from __future__ import annotations

import heapq
import os
import pickle
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from raystream.errors import RaystreamError, StreamsError
from raystream.streams.processors import (
    STREAM_TIME,
    WALL_CLOCK,
    Processor,
    Record,
    build_processor,
)
from raystream.streams.serde import decode_key, encode_key
from raystream.streams.stores import (
    Backend,
    CachingStore,
    ChangelogRecord,
    KeyValueStore,
    LmdbBackend,
    SessionStore,
    Store,
    TaskCache,
    WindowStore,
    changelog_topic,
    must_wipe_on_open,
)
from raystream.streams.topology import Node, StoreSpec, SubTopology
from raystream.streams.windows import StreamTime
from raystream.types import ConsumerRecord, TopicPartition


class TaskId(NamedTuple):
    """A task: sub-topology ``subtopology`` on partition ``partition`` of its topics.
    Printed as Kafka Streams prints it, ``"0_1"``."""

    subtopology: int
    partition: int

    def __str__(self) -> str:
        return f"{self.subtopology}_{self.partition}"


class OutputRecord(NamedTuple):
    """A record for the runtime to produce. No partition: the producer's default
    partitioner picks it from the key bytes (murmur2), which is what puts equal keys of
    a repartition topic in one partition."""

    topic: str
    key: Any
    value: Any
    timestamp: int
    headers: tuple[tuple[str, bytes], ...] = ()


class OutputBatch(NamedTuple):
    """A table for the runtime to produce to a user topic as one ``send_batch``: a
    ``map_batches`` result with ``key`` and ``timestamp`` columns (no per-record work)."""

    topic: str
    table: pa.Table


@dataclass
class TaskResult:
    """What the runtime must do after a :meth:`Task.process` or :meth:`Task.punctuate`.

    Attributes:
        outputs: Records (and :class:`OutputBatch` tables) to produce, in the order they
            were emitted.
        changelog: Per changelog partition (``<application_id>-<store>-changelog``,
            partition = the task's), the store changes ``(key bytes, value bytes or
            None)`` to write, oldest first.
        offsets: Per input partition, the next offset to consume: what to commit once
            ``outputs`` and ``changelog`` are written (in the same transaction under
            exactly-once). Empty when no records were processed.
        dropped_records: Records dropped in this call (late, null key, bad timestamp).
        stream_time_ms: The task's stream time afterwards.
    """

    outputs: list[OutputRecord | OutputBatch] = field(default_factory=list)
    changelog: dict[TopicPartition, list[ChangelogRecord]] = field(default_factory=dict)
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    dropped_records: int = 0
    stream_time_ms: int = -1


@dataclass
class _Punctuator:
    node: str
    interval_ms: int
    punctuation_type: str
    fn: Callable[[int], Any]
    next_ms: int | None = None


def open_store(spec: StoreSpec, backend: Backend) -> Store:
    """The store ``spec`` describes, on ``backend``."""
    if spec.kind == "kv":
        return KeyValueStore(spec.name, backend)
    if spec.kind == "session":
        return SessionStore(spec.name, backend, spec.retention_ms)
    return WindowStore(
        spec.name,
        backend,
        spec.retention_ms,
        spec.window_size_ms,
        retain_duplicates=spec.retain_duplicates,
    )


def arrow_topics(subtopology: SubTopology) -> frozenset[str]:
    """The source topics of ``subtopology`` that its tasks take as Arrow tables: read
    by a source of that one topic, as stored (no deserializers, no timestamp extractor,
    not a repartition topic), whose children are all ``map_batches`` nodes with that
    source as their only parent."""
    children = subtopology.children()
    nodes = {node.name: node for node in subtopology.nodes}
    topics = []
    for source in subtopology.nodes:
        params = source.params
        if source.role != "source" or params.get("internal") or len(source.topics) != 1:
            continue
        if any(
            params.get(name) is not None
            for name in ("key_deserializer", "value_deserializer", "timestamp_extractor")
        ):
            continue
        kids = [nodes[name] for name in children[source.name]]
        if kids and all(k.op == "map_batches" and k.parents == [source.name] for k in kids):
            topics.append(source.topics[0])
    return frozenset(topics)


def open_task_stores(
    subtopology: SubTopology, task_dir: str | os.PathLike[str]
) -> dict[str, Store]:
    """Open every store of ``subtopology`` on disk under ``task_dir`` (one LMDB
    environment per store, in a directory named after it)."""
    return {
        spec.name: open_store(spec, LmdbBackend(Path(task_dir) / spec.name))
        for spec in subtopology.stores
    }


def restore_starts(
    stores: Mapping[str, Store], checkpoint: Mapping[str, int], processing_guarantee: str
) -> dict[str, int]:
    """The changelog offset to restore each of a task's just opened ``stores`` from,
    given the task directory's ``checkpoint``; wipes the stores that must start over
    (see :func:`~raystream.streams.stores.must_wipe_on_open`)."""
    starts: dict[str, int] = {}
    for name, store in stores.items():
        clean = name in checkpoint and store.persistent
        if must_wipe_on_open(processing_guarantee, clean):
            store.wipe()
            starts[name] = 0
        else:
            starts[name] = checkpoint.get(name, 0) if store.persistent else 0
    return starts


class Task:
    """Runs one sub-topology over one partition of each of its source topics.

    Not thread-safe: one thread drives a task (the stores are written from it).

    Args:
        task_id: Which sub-topology and partition.
        subtopology: The nodes to run.
        stores: Every store the sub-topology names, open (see :func:`open_task_stores`),
            already restored from its changelog.
        application_id: Names the changelog topics.
        stream_time_ms: Stream time to resume from (-1: none seen).
        cache_max_bytes: The budget of the task's record cache (Kafka's
            ``statestore.cache.max.bytes``, see :mod:`raystream.streams.stores.cache`):
            > 0 puts the stores of the table nodes (aggregations, a topic's table)
            behind it, so a key's updates between two :meth:`flush_cache` calls are
            forwarded and logged once; 0 forwards and logs every update at once.

    Attributes:
        dropped_records: Records dropped so far, by reason ("late", "null key", ...):
            Kafka Streams' ``dropped-records`` metric.
        processed_records_total: Input records processed so far.
        cache: The record cache (None when ``cache_max_bytes`` is 0); the runtime may
            change its ``max_bytes``.

    Raises:
        StreamsError: a store the sub-topology needs is missing.
    """

    def __init__(
        self,
        task_id: TaskId,
        subtopology: SubTopology,
        stores: Mapping[str, Any],
        application_id: str,
        stream_time_ms: int = -1,
        cache_max_bytes: int = 0,
    ) -> None:
        missing = [spec.name for spec in subtopology.stores if spec.name not in stores]
        if missing:
            raise StreamsError(f"task {task_id}: stores {missing} were not given")
        self.task_id = task_id
        self.subtopology = subtopology
        self.stores = dict(stores)
        self.application_id = application_id
        self.clock = StreamTime(stream_time_ms)
        self.dropped_records: dict[str, int] = {}
        self.processed_records_total = 0
        self.nodes = {node.name: node for node in subtopology.nodes}
        self.children = subtopology.children()
        self._sources = {
            topic: node
            for node in subtopology.nodes
            if node.role == "source"
            for topic in node.topics
        }
        self._punctuators: list[_Punctuator] = []
        self._clocks: dict[str, StreamTime] = {}
        self._result = TaskResult()
        self._current: str | None = None
        self._record: Record | None = None  # the record the current node is processing
        self._processors: dict[str, Processor] = {}
        for node in subtopology.nodes:
            if node.role == "processor":
                processor = build_processor(node)
                processor.children = self.children[node.name]
                self._processors[node.name] = processor
                if node.op == "map_batches":
                    processor.table_sink = self._table_sink(node)
        self.arrow_topics = arrow_topics(subtopology)
        """The source topics whose records the task takes as Arrow tables."""
        self.cache = TaskCache(cache_max_bytes) if cache_max_bytes > 0 else None
        self._cached: dict[str, CachingStore] = {}
        if self.cache is not None:
            for name, processor in self._processors.items():
                store = processor.cached_store
                if store is not None and store not in self._cached:
                    self._cached[store] = self.cache.wrap(
                        self.stores[store], self._record_context, self._flush_forwarder(name)
                    )
        context = _TaskContext(self)
        for name, processor in self._processors.items():
            self._current = name
            processor.init(context)
        self._current = None

    def _table_sink(self, node: Node) -> Callable[[pa.Table], None] | None:
        """Where a ``map_batches`` node emits its result table as a whole: its only child
        is a sink to a user topic without serializers (else None: records)."""
        children = [self.nodes[name] for name in self.children[node.name]]
        if len(children) != 1 or children[0].role != "sink":
            return None
        sink = children[0]
        params = sink.params
        if params.get("internal") or params["key_serializer"] or params["value_serializer"]:
            return None
        topic = sink.topics[0]
        return lambda table: self._result.outputs.append(OutputBatch(topic, table))

    @property
    def stream_time_ms(self) -> int:
        """The largest record timestamp the task has processed (-1 before any)."""
        return self.clock.ms

    def input_partitions(self) -> list[TopicPartition]:
        """The partitions the task reads: its partition of every source topic."""
        return [TopicPartition(t, self.task_id.partition) for t in self.subtopology.source_topics]

    def changelog_partitions(self) -> dict[str, TopicPartition]:
        """Each store's changelog partition (restore a moved task's store from it)."""
        return {
            spec.name: TopicPartition(
                changelog_topic(self.application_id, spec.name), self.task_id.partition
            )
            for spec in self.subtopology.stores
        }

    def process(
        self,
        records: Iterable[ConsumerRecord],
        now_ms: int,
        tables: Iterable[pa.Table] = (),
    ) -> TaskResult:
        """Process a batch of polled records, then run due wall-clock punctuators.

        ``records`` may mix the task's input partitions; each partition's records must
        be in offset order. ``tables`` are partitions of :attr:`arrow_topics` as Arrow
        tables in ``Consumer.poll_arrow``'s layout (topic, partition, offset, timestamp,
        key, value or a typed topic's columns, headers), one partition each, in offset
        order; they are processed first. Returns what to produce, log and commit.

        Raises:
            StreamsError: a user function failed (naming the node and the record); the
                task's stores may hold part of the batch's changes, so the runtime must
                not commit and should restore the task (as after a crash).
        """
        for table in tables:
            self._process_table(table)
        queues: dict[TopicPartition, list[ConsumerRecord]] = {}
        for record in records:
            tp = TopicPartition(record.topic, record.partition)
            if record.topic not in self._sources or record.partition != self.task_id.partition:
                raise StreamsError(f"task {self.task_id} does not read {tp}")
            queues.setdefault(tp, []).append(record)
        if len(queues) == 1:  # one partition: its own order, no merge by timestamp
            ((tp, queue),) = queues.items()
            for record in queue:
                self._process_one(record)
            self._result.offsets[tp] = queue[-1].offset + 1
        elif queues:
            self._process_merged(queues)
        for name, processor in self._processors.items():
            self._run(name, processor.flush)
        self._punctuate(WALL_CLOCK, now_ms)
        return self._take_result()

    def _process_table(self, table: pa.Table) -> None:
        """The Arrow path: one partition's records, as a table, to the source's
        ``map_batches`` children (see the module docstring)."""
        rows = table.num_rows
        if not rows:
            return
        topic = table.column("topic")[0].as_py()
        partition = table.column("partition")[0].as_py()
        tp = TopicPartition(topic, partition)
        if topic not in self.arrow_topics or partition != self.task_id.partition:
            raise StreamsError(f"task {self.task_id} does not read {tp} as Arrow tables")
        source = self._sources[topic]
        self.processed_records_total += rows
        self._result.offsets[tp] = table.column("offset")[rows - 1].as_py() + 1
        timestamps = table.column("timestamp")
        valid = pc.fill_null(pc.greater_equal(timestamps, 0), False)
        kept = pc.sum(valid).as_py() or 0
        if kept < rows:
            self._dropped("invalid timestamp", rows - kept)  # as the record path
            table = table.filter(valid)
            timestamps = table.column("timestamp")
        if not kept:
            return
        names = table.column_names
        columns = ["key", "timestamp", *names[names.index("key") + 1 : names.index("headers")]]
        batch = table.select(columns)
        before = self.clock.ms
        self.clock.observe(pc.max(timestamps).as_py())
        for child in self.children[source.name]:
            self._processors[child].add_table(batch)
        if self.clock.ms > before:
            self._punctuate(STREAM_TIME, self.clock.ms)

    def _process_merged(self, queues: dict[TopicPartition, list[ConsumerRecord]]) -> None:
        """Process several partitions' records, always the smallest head timestamp next."""
        heap = [(q[0].timestamp, i, 0, tp) for i, (tp, q) in enumerate(queues.items())]
        heapq.heapify(heap)
        while heap:
            _, i, position, tp = heapq.heappop(heap)
            queue = queues[tp]
            record = queue[position]
            self._process_one(record)
            self._result.offsets[tp] = record.offset + 1
            if position + 1 < len(queue):
                heapq.heappush(heap, (queue[position + 1].timestamp, i, position + 1, tp))

    def punctuate(self, now_ms: int) -> TaskResult:
        """Run the wall-clock punctuators due at ``now_ms`` without new records."""
        self._punctuate(WALL_CLOCK, now_ms)
        return self._take_result()

    def flush_cache(self) -> TaskResult:
        """Flush the record cache: write each key's latest update to its store (and the
        changelog) and forward it downstream. The runtime calls it at every commit,
        before committing, and produces what it returns.

        Raises:
            StreamsError: a downstream user function failed (as for :meth:`process`).
        """
        if self.cache is not None:
            self.cache.flush()
        return self._take_result()

    def queryable_store(self, name: str) -> Any:
        """Store ``name`` as interactive queries read it: through the record cache.

        Raises:
            KeyError: the task has no such store.
        """
        cached = self._cached.get(name)
        return self.stores[name] if cached is None else cached

    def close(self) -> None:
        """Flush and close the task's stores (the task is done, or moves away). Updates
        still in the record cache are dropped: a clean close follows a commit, which
        flushed them."""
        for store in self.stores.values():
            store.close()

    def _take_result(self) -> TaskResult:
        result, self._result = self._result, TaskResult()
        for name, store in self.stores.items():
            changes = store.drain_changelog()
            if changes:
                tp = TopicPartition(
                    changelog_topic(self.application_id, name), self.task_id.partition
                )
                result.changelog[tp] = changes
        result.stream_time_ms = self.clock.ms
        return result

    def _process_one(self, consumer_record: ConsumerRecord) -> None:
        source = self._sources[consumer_record.topic]
        params = source.params
        try:
            if params.get("internal"):
                raw_key, raw_value = consumer_record.key, consumer_record.value
                key = None if raw_key is None else decode_key(raw_key)
                value = None if raw_value is None else pickle.loads(raw_value)
            else:
                key, value = consumer_record.key, consumer_record.value
                if params["key_deserializer"] is not None and key is not None:
                    key = params["key_deserializer"](key)
                if params["value_deserializer"] is not None and value is not None:
                    value = params["value_deserializer"](value)
            extractor = params.get("timestamp_extractor")
            timestamp = (
                consumer_record.timestamp if extractor is None else extractor(consumer_record)
            )
        except RaystreamError:
            raise
        except Exception as e:
            raise StreamsError(
                f"task {self.task_id}: source {source.name} could not read the record at "
                f"{consumer_record.topic}-{consumer_record.partition}@{consumer_record.offset}: "
                f"{e!r}"
            ) from e
        self.processed_records_total += 1
        if not isinstance(timestamp, int) or timestamp < 0:
            self._dropped("invalid timestamp")  # as Kafka Streams skips them
            return
        before = self.clock.ms
        self.clock.observe(timestamp)
        record = Record(key, value, timestamp, tuple(consumer_record.headers or ()))
        self._current = source.name
        try:
            self._forward(record, None)
        except RaystreamError:
            raise
        except Exception as e:
            raise StreamsError(
                f"task {self.task_id}: node {self._current} failed on the record at "
                f"{consumer_record.topic}-{consumer_record.partition}@{consumer_record.offset}: "
                f"{e!r}"
            ) from e
        finally:
            self._current = None
        if self.clock.ms > before:
            self._punctuate(STREAM_TIME, self.clock.ms)

    def _forward(self, record: Record, child: str | None) -> None:
        parent, context = self._current, self._record
        assert parent is not None
        targets = self.children[parent] if child is None else [child]
        for name in targets:
            self._current = name
            node = self.nodes[name]
            if node.role == "sink":
                self._emit(node, record)
            else:
                self._record = record
                self._processors[name].process(record)
        self._current, self._record = parent, context

    def _record_context(self) -> tuple[int, tuple[tuple[str, bytes], ...]]:
        """Timestamp and headers of the record being processed (a cache entry's)."""
        record = self._record
        return (self.clock.ms, ()) if record is None else (record.timestamp, record.headers)

    def _flush_forwarder(self, node: str) -> Callable[..., None]:
        """What the cache of ``node``'s store calls per flushed entry: forward it as a
        table change from ``node`` (during a commit, or an eviction inside a put)."""

        def forward(key: Any, value: Any, old: Any, timestamp: int, headers: Any) -> None:
            previous, self._current = self._current, node
            try:
                self._forward(Record(key, value, timestamp, headers, old), None)
            except RaystreamError:
                raise
            except Exception as e:
                raise StreamsError(
                    f"task {self.task_id}: node {self._current} failed on an update of "
                    f"{node} flushed from the record cache: {e!r}"
                ) from e
            finally:
                self._current = previous

        return forward

    def _emit(self, node: Node, record: Record) -> None:
        topic = node.topics[0]
        if node.params.get("internal"):
            if record.key is None:
                self._dropped("null key")  # a repartition topic carries only keyed records
                return
            key: Any = encode_key(record.key)
            value: Any = None if record.value is None else pickle.dumps(record.value, 5)
        else:
            key, value = record.key, record.value
            if node.params["key_serializer"] is not None and key is not None:
                key = node.params["key_serializer"](key)
            if node.params["value_serializer"] is not None and value is not None:
                value = node.params["value_serializer"](value)
        self._result.outputs.append(
            OutputRecord(topic, key, value, record.timestamp, record.headers)
        )

    def _run(self, node: str, fn: Callable[..., Any], *args: Any) -> None:
        previous, self._current = self._current, node
        try:
            fn(*args)
        except RaystreamError:
            raise
        except Exception as e:
            raise StreamsError(f"task {self.task_id}: node {node} failed: {e!r}") from e
        finally:
            self._current = previous

    def _punctuate(self, punctuation_type: str, time_ms: int) -> None:
        for p in self._punctuators:
            if p.punctuation_type != punctuation_type:
                continue
            if p.next_ms is None and punctuation_type == WALL_CLOCK:
                p.next_ms = time_ms + p.interval_ms  # first period starts at the first call
                continue
            if p.next_ms is None or time_ms >= p.next_ms:
                self._run(p.node, p.fn, time_ms)
                p.next_ms = time_ms + p.interval_ms

    def _dropped(self, reason: str, count: int = 1) -> None:
        self.dropped_records[reason] = self.dropped_records.get(reason, 0) + count
        self._result.dropped_records += count


class _TaskContext:
    """The :class:`~raystream.streams.processors.Context` processors of a task share."""

    def __init__(self, task: Task) -> None:
        self._task = task

    @property
    def stream_time_ms(self) -> int:
        return self._task.clock.ms

    @property
    def task_id(self) -> TaskId:
        return self._task.task_id

    def forward(self, record: Record, child: str | None = None) -> None:
        self._task._forward(record, child)

    def store(self, name: str) -> Any:
        try:
            return self._task.queryable_store(name)
        except KeyError:
            raise StreamsError(f"task {self._task.task_id}: no store named {name!r}") from None

    def clock(self, name: str) -> StreamTime:
        clocks = self._task._clocks
        if name not in clocks:
            clocks[name] = StreamTime(self._task.clock.ms)
        return clocks[name]

    def schedule(self, interval_ms: int, punctuation_type: str, fn: Callable[[int], Any]) -> None:
        if punctuation_type not in (STREAM_TIME, WALL_CLOCK):
            raise StreamsError(
                f"schedule: punctuation_type must be {STREAM_TIME!r} or {WALL_CLOCK!r}, got "
                f"{punctuation_type!r}"
            )
        if not isinstance(interval_ms, int) or interval_ms < 1:
            raise StreamsError(f"schedule: interval_ms must be an int >= 1, got {interval_ms!r}")
        node = self._task._current
        assert node is not None
        self._task._punctuators.append(_Punctuator(node, interval_ms, punctuation_type, fn))

    def record_dropped(self, reason: str) -> None:
        self._task._dropped(reason)

    def caching(self, name: str) -> bool:
        return name in self._task._cached


def processable(
    records: Iterable[ConsumerRecord],
    partitions: Iterable[TopicPartition],
    caught_up: Callable[[TopicPartition], bool],
) -> tuple[list[ConsumerRecord], list[ConsumerRecord]]:
    """Split a multi-partition task's records into ``(process now, hold)``.

    The task processes the smallest head timestamp first across its partitions (see
    :meth:`Task.process`); that order is only right while every partition has records
    buffered, or has none to come (``caught_up``: its fetched high watermark reached).
    So, as Kafka Streams' ``PartitionGroup`` does (KIP-695, ``max.task.idle.ms`` 0), the
    merge stops when a partition that is not caught up runs out of records, and the rest
    waits for its next records. Without this, a stream-table join started over a filled
    table topic would process the first stream records before the table's rows arrive
    (and drop them), and a merge would emit out of timestamp order. Each partition's
    records stay in offset order; what is processed is a prefix of each.
    """
    queues: dict[TopicPartition, list[ConsumerRecord]] = {tp: [] for tp in partitions}
    for record in records:
        queues.setdefault(TopicPartition(record.topic, record.partition), []).append(record)
    waiting = {tp: not caught_up(tp) for tp, queue in queues.items() if not queue}
    if any(waiting.values()):
        return [], [r for queue in queues.values() for r in queue]
    taken = dict.fromkeys(queues, 0)
    heap = [(q[0].timestamp, i, tp) for i, (tp, q) in enumerate(queues.items()) if q]
    heapq.heapify(heap)
    dry: dict[TopicPartition, bool] = {}
    while heap:
        _, i, tp = heapq.heappop(heap)
        queue = queues[tp]
        taken[tp] += 1
        if taken[tp] < len(queue):
            heapq.heappush(heap, (queue[taken[tp]].timestamp, i, tp))
            continue
        if tp not in dry:
            dry[tp] = not caught_up(tp)
        if dry[tp]:
            break  # its next record may come before every head left: wait for it
    now = [r for tp, queue in queues.items() for r in queue[: taken[tp]]]
    later = [r for tp, queue in queues.items() for r in queue[taken[tp] :]]
    return now, later


_STREAM_TIME_PREFIX = "streams:v1:stream_time_ms="


def encode_stream_time(stream_time_ms: int) -> str:
    """The commit metadata that carries a task's stream time with its input offsets
    (Kafka Streams keeps it there too), so that a task that moves or restarts resumes
    with it: windows stay closed and grace is judged from where the task was, not -1.

    >>> decode_stream_time(encode_stream_time(60_000))
    60000
    """
    return f"{_STREAM_TIME_PREFIX}{int(stream_time_ms)}"


def decode_stream_time(metadata: str | None) -> int:
    """The stream time :func:`encode_stream_time` wrote; -1 for any other metadata (none,
    or a note another committer left, such as an offsets reset)."""
    if not metadata or not metadata.startswith(_STREAM_TIME_PREFIX):
        return -1
    try:
        return max(int(metadata[len(_STREAM_TIME_PREFIX) :]), -1)
    except ValueError:
        return -1
