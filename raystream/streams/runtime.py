"""The streams runtime of one worker: tasks, the poll-process-produce-commit loop (no Ray).

A worker (Kafka Streams' ``StreamThread``) is one member of the consumer group named by
the application id, subscribed to every source topic of the application (user topics
and repartition topics), with the ``stream`` assignor so that partition ``p`` of every
topic comes to one worker (a task reads partition ``p`` of each source topic of its
sub-topology). It owns a :class:`~raystream.streams.task.Task` per assigned
``(sub-topology, partition)`` and loops:

1. poll a batch of records (each partition's records in offset order): as one Arrow
   table (``poll_arrow``) when a sub-topology has a source on the Arrow path
   (``task.arrow_topics``: a topic read as stored straight into ``map_batches``), whose
   partitions go to their tasks as table slices and the other partitions' records are
   made from the table column by column; else as records (``poll``);
2. give each task its partitions' records (``Task.process``), and run the wall-clock
   punctuators of the others; a task reading several partitions processes its records
   in timestamp order only as far as each partition not caught up has records, and
   holds the rest (``task.processable``);
3. produce what the tasks emitted (outputs, a ``map_batches`` result table for a user
   topic with one ``send_batch``, then store changes to the changelog partitions
   ``<application_id>-<store>-changelog``, partition = the task's);
4. every ``commit_interval_ms``, commit: first flush each task's record cache (each
   key's latest update since the last commit goes to the outputs and the changelog,
   see :mod:`raystream.streams.stores.cache`), then:

   - ``at_least_once``: flush the producer (every output and changelog record is
     acknowledged), then commit the input offsets, then flush the stores and write
     each task's checkpoint (the changelog offset its on-disk stores cover). A crash
     anywhere re-processes from the last committed offsets: duplicates, never loss.
   - ``exactly_once``: the records since the last commit are one transaction of the
     worker's transactional producer; the commit adds the input offsets
     (``send_offsets_to_transaction`` with the consumer's group metadata, so a
     consumer that a rebalance left behind cannot commit) and commits it. Stores are
     flushed after; their checkpoint is written only when a task closes cleanly (while
     a task runs the checkpoint is absent, so after a crash its stores are wiped and
     rebuilt from the changelog, whose aborted writes read_committed never shows).

Each committed offset carries, as its metadata, the stream time of the task that read
it; a task opened later (moved, restarted, or reset after an abort) resumes from the
largest of its partitions', so windows that were closed stay closed and grace is judged
as before the move.

With ``num_standby_replicas``, once per generation the worker reads the group's whole
assignment and keeps standby copies of other workers' stateful tasks
(:mod:`raystream.streams.standby`), updated from their changelogs between polls and
checkpointed at each commit; a task that becomes active here takes the standby's
stores over and restores only what came after its checkpoint.

Rebalances run inside ``poll`` (the listener is this object): revoked partitions are
committed first, then their tasks closed cleanly (stores flushed, checkpoint written);
assigned ones get new tasks whose stores are restored from their changelogs up to the
end before the task processes anything (from the checkpoint's offset when the stores
are clean, from 0 after a wipe); lost partitions (the group moved them without asking)
close their tasks dirty. A failed or refused exactly-once commit aborts the
transaction, closes every task dirty and reopens them from the changelog, with the
consumer sent back to the committed offsets: the batch is processed again and
committed once.

Interactive queries are served on the loop's thread between polls (the stores belong
to it), through :meth:`StreamsWorker.query`, which another thread may call.

Everything the loop touches comes in as arguments: the consumer, the producer, a
factory of restore consumers, the clock. :mod:`raystream.actors.streams_worker` wires
them on a Ray actor.
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raystream.errors import (
    CommitFailedError,
    ProducerFencedError,
    RaystreamError,
    StreamsError,
)
from raystream.records import empty_fetch, iter_consumer_records, to_user_table
from raystream.streams.standby import StandbyTasks, place_standbys
from raystream.streams.stores import read_checkpoint, read_only, write_checkpoint
from raystream.streams.task import (
    OutputBatch,
    Task,
    TaskId,
    TaskResult,
    arrow_topics,
    decode_stream_time,
    encode_stream_time,
    open_task_stores,
    processable,
    restore_starts,
)
from raystream.streams.topology import SubTopology
from raystream.types import ConsumerRecord, TopicPartition

logger = logging.getLogger(__name__)

POLL_TIMEOUT_MS = 50
MAX_POLL_RECORDS = 2_000
MAX_POLL_ARROW_RECORDS = 10_000
"""An Arrow poll (``map_batches`` sources) takes more: it costs little per record, and
each ``fn`` call, and the records its result sends downstream (one per key and window
for a combiner), cost per batch (measured on the bench_streams combiner: 2k -> 10k
records per poll sent a fifth of the records downstream, ~4x the task's throughput)."""
RESTORE_POLL_MS = 200
QUERY_TIMEOUT_S = 30.0
LAG_INTERVAL_MS = 1_000
PLACEMENT_RETRY_MS = 1_000

# Worker states (the app's state is derived from them, see KafkaStreams.State).
STARTING = "STARTING"
REBALANCING = "REBALANCING"
RUNNING = "RUNNING"
ERROR = "ERROR"
STOPPED = "STOPPED"


class StreamsWorker:
    """Runs the application's tasks for the partitions the group gives this worker.

    Not thread-safe, except :meth:`query` and :meth:`status`: one thread calls
    :meth:`start` then :meth:`run_once` in a loop, then :meth:`close`.

    Args:
        application_id: The group id and the prefix of the internal topics.
        subtopologies: The application's built topology.
        processing_guarantee: "at_least_once" or "exactly_once".
        commit_interval_ms: How often to commit.
        consumer: A Consumer of group ``application_id`` with auto-commit off, the
            ``stream`` assignor, and read_committed under exactly-once.
        producer: Makes the Producer (called now, and again after the producer was
            fenced); transactional, ``init_transactions`` done, under exactly-once.
        restore_consumer: Makes a Consumer without a group (read_committed under
            exactly-once) for reading changelogs.
        state_dir: This worker's directory for task stores (one sub-directory per task).
        clock_ms: Wall-clock milliseconds (for wall-clock punctuation and commits).
        num_standby_replicas: Standby copies of each stateful task (see
            :mod:`raystream.streams.standby`); they need ``group_assignment``.
        group_assignment: Returns the group's ``(generation, {member id: partitions})``
            as the coordinator describes it, to place standbys.
        cache_max_bytes: The record cache budget of this worker, split evenly across
            its tasks that have table stores (0: no cache, every update forwarded).
    """

    def __init__(
        self,
        application_id: str,
        subtopologies: list[SubTopology],
        processing_guarantee: str,
        commit_interval_ms: int,
        consumer: Any,
        producer: Callable[[], Any],
        restore_consumer: Callable[[], Any],
        state_dir: str | os.PathLike[str],
        clock_ms: Callable[[], int],
        num_standby_replicas: int = 0,
        group_assignment: Callable[[], tuple[int, dict[str, list[TopicPartition]]]] | None = None,
        cache_max_bytes: int = 0,
    ) -> None:
        self.application_id = application_id
        self.subtopologies = {sub.id: sub for sub in subtopologies}
        self.exactly_once = processing_guarantee == "exactly_once"
        self.processing_guarantee = processing_guarantee
        self.commit_interval_ms = commit_interval_ms
        self.consumer = consumer
        self._new_producer = producer
        self.producer = producer()
        self._restore_consumer = restore_consumer
        self.state_dir = Path(state_dir)
        self.clock_ms = clock_ms
        self.cache_max_bytes = cache_max_bytes
        self.readers: dict[str, list[int]] = {}
        for sub in subtopologies:
            for topic in sub.source_topics:
                self.readers.setdefault(topic, []).append(sub.id)
        self.arrow_topics = {sub.id: arrow_topics(sub) for sub in subtopologies}
        self._poll_arrow = any(self.arrow_topics.values())
        self._layouts: dict[str, tuple[list[str], int, pa.DataType]] = {}
        self.tasks: dict[TaskId, Task] = {}
        self.state = STARTING
        self.error: str | None = None
        self.processed_records_total = 0
        self.restored_records_total = 0
        self.commits_total = 0
        self.aborts_total = 0
        self._pending_offsets: dict[TopicPartition, int] = {}
        self._changelog_futures: dict[TopicPartition, Any] = {}
        self._changelog_next: dict[TopicPartition, int] = {}
        self._in_transaction = False
        self._closed = False  # after close() the listener ignores the consumer's close
        self._dirty = False  # produced or processed since the last commit
        self._last_commit_ms = clock_ms()
        self._next_lag_ms = 0
        self._lags: dict[TaskId, int] = {}
        self._held: dict[TaskId, list[ConsumerRecord]] = {}  # see task.processable
        self._queries: queue.Queue[tuple[Callable[[], Any], Future]] = queue.Queue()
        self._lock = threading.Lock()
        self.num_standby_replicas = num_standby_replicas if group_assignment else 0
        self._group_assignment = group_assignment
        self.standbys = StandbyTasks(
            application_id,
            self.subtopologies,
            processing_guarantee,
            self.task_dir,
            restore_consumer,
        )
        self._placed_generation = -1
        self._next_placement_ms = 0

    # ------------------------------------------------------------------ the loop

    def start(self) -> None:
        """Subscribe to every source topic; tasks come with the first rebalance."""
        self.consumer.subscribe(sorted(self.readers), listener=self)

    def run_once(self) -> int:
        """One poll-process-produce (and, when due, commit) round; returns the number of
        records processed.

        Raises:
            StreamsError: a user function failed (nothing of the batch is committed).
            ProducerFencedError: a newer worker with this worker's transactional id runs.
        """
        self._serve_queries()
        batches: dict[TaskId, list[ConsumerRecord]] = {}
        tables: dict[TaskId, list[pa.Table]] = {}
        if self._poll_arrow:
            table = self.consumer.poll_arrow(
                timeout_ms=POLL_TIMEOUT_MS, max_records=MAX_POLL_ARROW_RECORDS
            )
            count = table.num_rows
            self._split(table, batches, tables)
        else:
            polled = self.consumer.poll(timeout_ms=POLL_TIMEOUT_MS, max_records=MAX_POLL_RECORDS)
            count = 0
            for tp, records in polled.items():
                count += len(records)
                for sub_id in self.readers.get(tp.topic, ()):
                    batches.setdefault(TaskId(sub_id, tp.partition), []).extend(records)
        now_ms = self.clock_ms()
        self._update_state()
        self._place_standbys(now_ms)
        self.standbys.update()
        try:
            for task_id, task in list(self.tasks.items()):
                records = batches.get(task_id, ())
                slices = tables.get(task_id, ())
                held = self._held.pop(task_id, None)
                if held is not None:
                    records = held + list(records)
                inputs = task.input_partitions()
                if records and len(inputs) > 1:
                    records, wait = processable(records, inputs, self._caught_up)
                    if wait:
                        self._held[task_id] = wait  # processed once the others' records come
                if records or slices:
                    result = task.process(records, now_ms, slices)
                else:
                    result = task.punctuate(now_ms)
                self._apply(result)
        except RaystreamError as error:
            self._recover(error)
            return 0
        self.processed_records_total += count
        if count:
            self._dirty = True
        if now_ms >= self._next_lag_ms:
            self._next_lag_ms = now_ms + LAG_INTERVAL_MS
            self._measure_lag()
        if now_ms - self._last_commit_ms >= self.commit_interval_ms:
            self.standbys.checkpoint()
            self.commit()
        return count

    def _recover(self, error: RaystreamError) -> None:
        """Producing a task's result failed: a user function's StreamsError, and any
        error under at_least_once, go up to the worker's loop; under exactly_once the
        transaction is aborted and the tasks reset (see :meth:`_abort_and_reset`)."""
        if isinstance(error, StreamsError) or not self.exactly_once:
            raise error
        logger.warning("worker %s: transaction failed, aborting: %s", self, error)
        self._abort_and_reset(fenced=isinstance(error, ProducerFencedError))

    def _caught_up(self, tp: TopicPartition) -> bool:
        """Whether every record of ``tp`` fetched so far was returned (its fetched high
        watermark reached); True for a partition no longer assigned here."""
        try:
            highwater = self.consumer.highwater(tp)
            return highwater is not None and self.consumer.position(tp) >= highwater
        except RaystreamError:
            return True

    def _place_standbys(self, now_ms: int) -> None:
        """Once per generation, read the group's assignment and hold the standbys
        :func:`place_standbys` gives this member (none of them active here)."""
        if not self.num_standby_replicas or self.state != RUNNING:
            return
        me = self.consumer.group_metadata()
        if me.generation_id == self._placed_generation or now_ms < self._next_placement_ms:
            return
        self._next_placement_ms = now_ms + PLACEMENT_RETRY_MS
        assert self._group_assignment is not None
        try:
            generation, members = self._group_assignment()
        except RaystreamError as error:  # the coordinator is away: try again later
            logger.info("worker %s: group assignment unavailable: %s", self, error)
            return
        if generation != me.generation_id:  # the group moved on: ask again
            return
        active = {
            member: [t for t in self._task_ids_of(tps) if self.subtopologies[t.subtopology].stores]
            for member, tps in members.items()
        }
        placed = place_standbys(active, self.num_standby_replicas).get(me.member_id, set())
        self.standbys.assign(placed - set(self.tasks))
        self._placed_generation = generation

    def _split(
        self,
        table: pa.Table,
        batches: dict[TaskId, list[ConsumerRecord]],
        tables: dict[TaskId, list[pa.Table]],
    ) -> None:
        """Cut a ``poll_arrow`` table into its partitions (contiguous in it) and give
        each task its slices: as tables for its Arrow topics, else as records."""
        rows = table.num_rows
        if not rows:
            return
        topics = pc.dictionary_encode(table.column("topic")).combine_chunks()
        names = topics.dictionary.to_pylist()
        index = topics.indices.to_numpy()
        partitions = table.column("partition").to_numpy()
        starts = np.flatnonzero((index[1:] != index[:-1]) | (partitions[1:] != partitions[:-1]))
        bounds = [0, *(starts + 1).tolist(), rows]
        for lo, hi in itertools.pairwise(bounds):
            topic, partition = names[index[lo]], int(partitions[lo])
            part = table.slice(lo, hi - lo)
            columns, timestamp_type, value_type = self._layout(topic)
            if part.column_names != columns:
                part = part.select(columns)  # a poll mixing topics of other layouts
            records: list[ConsumerRecord] | None = None
            for sub_id in self.readers.get(topic, ()):
                task_id = TaskId(sub_id, partition)
                if topic in self.arrow_topics[sub_id]:
                    tables.setdefault(task_id, []).append(part)
                    continue
                if records is None:
                    records = _records_of(part, topic, partition, timestamp_type, value_type)
                batches.setdefault(task_id, []).extend(records)

    def _layout(self, topic: str) -> tuple[list[str], int, pa.DataType]:
        """A topic's ``poll_arrow`` columns, timestamp type and stored value type."""
        layout = self._layouts.get(topic)
        if layout is None:
            metadata = self.consumer.cluster.topic_metadata(topic)
            schema = metadata.record_schema
            columns = to_user_table(empty_fetch(schema), topic, 0).column_names
            append_time = metadata.config.get("message.timestamp.type") == "LogAppendTime"
            layout = self._layouts[topic] = (columns, int(append_time), schema.field("value").type)
        return layout

    def _measure_lag(self) -> None:
        """Each task's lag: records of its input partitions not processed yet."""
        lags: dict[TaskId, int] = {}
        for task_id, task in self.tasks.items():
            lag = 0
            for tp in task.input_partitions():
                try:
                    highwater = self.consumer.highwater(tp)
                    if highwater is not None:
                        lag += max(highwater - self.consumer.position(tp), 0)
                except RaystreamError:  # not assigned (any more): no lag to report
                    continue
            lags[task_id] = lag
        self._lags = lags

    def _apply(self, result: TaskResult) -> None:
        """Produce a task's outputs and store changes; remember its offsets."""
        if not (result.outputs or result.changelog or result.offsets):
            return
        if self.exactly_once and not self._in_transaction:
            self.producer.begin_transaction()
            self._in_transaction = True
        send = self.producer.send
        for out in result.outputs:
            if type(out) is OutputBatch:
                # exactly_once: the commit checks the requests; meanwhile the task goes on
                self.producer.send_batch(out.topic, out.table, wait=not self.exactly_once)
                continue
            send(
                out.topic,
                out.value,
                out.key,
                headers=list(out.headers) or None,
                timestamp_ms=out.timestamp,
            )
        for tp, changes in result.changelog.items():
            future = None
            for key, value in changes:
                future = send(tp.topic, value, key, partition=tp.partition)
            if future is not None:
                self._changelog_futures[tp] = future
        self._pending_offsets.update(result.offsets)
        self._dirty = True

    def commit(self) -> None:
        """Commit what was processed: flush then commit offsets (at_least_once), or the
        open transaction with the offsets in it (exactly_once); then flush the stores.

        A refused exactly-once commit (a rebalance fenced this generation) aborts the
        transaction and resets the tasks (see the module docstring).
        """
        self._last_commit_ms = self.clock_ms()
        try:
            for task in list(self.tasks.values()):
                self._apply(task.flush_cache())
        except RaystreamError as error:
            self._recover(error)
            return
        if not self._dirty:
            return
        offsets = self._with_stream_time(self._pending_offsets)
        if self.exactly_once:
            if self._in_transaction:
                try:
                    if offsets:
                        self.producer.send_offsets_to_transaction(
                            offsets, self.consumer.group_metadata()
                        )
                    self.producer.commit_transaction()
                except RaystreamError as error:
                    logger.warning("worker %s: commit failed, aborting: %s", self, error)
                    self._abort_and_reset(fenced=isinstance(error, ProducerFencedError))
                    return
                self._in_transaction = False
        else:
            self.producer.flush()
            if offsets:
                try:
                    self.consumer.commit(offsets)
                except CommitFailedError as error:  # a rebalance: the next owner re-reads
                    logger.info("worker %s: offset commit refused: %s", self, error)
        self._take_changelog_offsets()
        for task in self.tasks.values():
            for store in task.stores.values():
                store.flush()
            if not self.exactly_once:
                self._write_checkpoint(task)
        self._pending_offsets.clear()
        self._dirty = False
        self.commits_total += 1

    def _with_stream_time(
        self, offsets: dict[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, str]]:
        """Each offset to commit with, as its metadata, the stream time of the task that
        read its partition (the smallest if several tasks read it): a task opened on that
        partition later resumes from it (see :meth:`_committed_stream_time`)."""
        times: dict[TopicPartition, int] = {}
        for task in self.tasks.values():
            now = task.stream_time_ms
            for tp in task.input_partitions():
                if tp in offsets:
                    times[tp] = min(times.get(tp, now), now)
        return {
            tp: (offset, encode_stream_time(times.get(tp, -1))) for tp, offset in offsets.items()
        }

    def _committed_stream_time(self, partitions: Iterable[TopicPartition]) -> int:
        """The stream time a task reading ``partitions`` resumes from: the largest that
        the commits of its partitions carry (-1 when none does)."""
        found = -1
        for tp in partitions:
            committed = self.consumer.committed(tp, metadata=True)
            if committed is not None:
                found = max(found, decode_stream_time(committed.metadata))
        return found

    def _take_changelog_offsets(self) -> None:
        for tp, future in self._changelog_futures.items():
            self._changelog_next[tp] = future.get().offset + 1
        self._changelog_futures.clear()

    def _abort_and_reset(self, fenced: bool = False) -> None:
        """Abort the open transaction, close every task dirty, reopen them from their
        changelogs and go back to the committed offsets.

        A fenced producer (the coordinator aborted a transaction that outlived its
        timeout, or this worker's id was taken over) cannot abort: a new one is made,
        whose ``init_transactions`` aborts what the old one left open (Kafka Streams
        treats this as TaskMigrated: tasks closed dirty, then rejoined).
        """
        self.aborts_total += 1
        if self._in_transaction and not fenced:
            try:
                self.producer.abort_transaction()
            except RaystreamError as error:
                logger.warning("worker %s: abort failed, new producer: %s", self, error)
                fenced = True
        if fenced:
            try:
                self.producer.close(timeout=5)
            except RaystreamError as error:
                logger.info("worker %s: closing the fenced producer: %s", self, error)
            self.producer = self._new_producer()
        self._in_transaction = False
        self._pending_offsets.clear()
        self._changelog_futures.clear()
        self._dirty = False
        task_ids = list(self.tasks)
        for task_id in task_ids:
            self._close_task(task_id, clean=False)
        for task_id in task_ids:
            self._open_task(task_id)
        assigned = self.consumer.assignment()
        for tp in assigned:
            committed = self.consumer.committed(tp)
            if committed is None:
                self.consumer.seek_to_beginning(tp)
            else:
                self.consumer.seek(tp, committed)

    # ------------------------------------------------- the rebalance listener

    def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
        """Commit everything, then close the revoked partitions' tasks cleanly."""
        if self._closed:
            return
        self.state = REBALANCING
        gone = self._task_ids_of(partitions)
        if not gone:
            return
        self.commit()  # a refused commit resets the tasks to the changelog: still clean
        for task_id in gone:
            if task_id in self.tasks:
                self._close_task(task_id, clean=True)

    def on_partitions_lost(self, partitions: set[TopicPartition]) -> None:
        """Close the lost partitions' tasks dirty: the group may have moved them."""
        if self._closed:
            return
        self.state = REBALANCING
        gone = self._task_ids_of(partitions)
        if self.exactly_once and self._in_transaction and gone:
            self._abort_and_reset()
        for task_id in gone:
            if task_id in self.tasks:
                self._close_task(task_id, clean=False)

    def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
        """Create (and restore) the tasks of newly assigned partitions."""
        if self._closed:
            return
        self.state = REBALANCING
        for task_id in self._task_ids_of(partitions):
            if task_id in self.standbys:  # its stores restore from the standby's checkpoint
                self.standbys.drop(task_id)
            if task_id not in self.tasks:
                self._open_task(task_id)

    def _task_ids_of(self, partitions: Iterable[TopicPartition]) -> list[TaskId]:
        return sorted(
            {
                TaskId(sub_id, tp.partition)
                for tp in partitions
                for sub_id in self.readers.get(tp.topic, ())
            }
        )

    # ------------------------------------------------------------------ tasks

    def task_dir(self, task_id: TaskId) -> Path:
        return self.state_dir / str(task_id)

    def _open_task(self, task_id: TaskId) -> None:
        """Open the task's stores, wipe them if the guarantee demands it, restore them
        from their changelogs up to the end, then create the task."""
        sub = self.subtopologies[task_id.subtopology]
        task_dir = self.task_dir(task_id)
        checkpoint = read_checkpoint(task_dir)
        stores = open_task_stores(sub, task_dir)
        inputs = [TopicPartition(t, task_id.partition) for t in sub.source_topics]
        stream_time_ms = self._committed_stream_time(inputs)
        task = Task(
            task_id,
            sub,
            stores,
            self.application_id,
            stream_time_ms,
            cache_max_bytes=self.cache_max_bytes,
        )
        starts = restore_starts(stores, checkpoint, self.processing_guarantee)
        if self.exactly_once and stores:
            write_checkpoint(task_dir, {})  # dirty while it runs (see the module doc)
        changelogs = task.changelog_partitions()
        for name, store in stores.items():
            tp = changelogs[name]
            end = self._restore(store, tp, starts[name])
            self._changelog_next[tp] = end
            store.flush()
        self.tasks[task_id] = task
        self._split_cache()

    def _restore(self, store: Any, tp: TopicPartition, start: int) -> int:
        """Replay changelog ``tp`` from ``start`` to its end into ``store``; returns the end."""
        consumer = self._restore_consumer()
        try:
            consumer.assign([tp])
            end = consumer.end_offsets([tp])[tp]
            if start >= end:
                return end
            consumer.seek(tp, start)
            while consumer.position(tp) < end:
                table = consumer.poll_arrow(timeout_ms=RESTORE_POLL_MS)
                if not table.num_rows:
                    continue
                keys = table.column("key").to_pylist()
                values = table.column("value").to_pylist()
                store.restore(zip(keys, values, strict=True))
                self.restored_records_total += len(keys)
            return end
        finally:
            consumer.close(autocommit=False)

    def _split_cache(self) -> None:
        """Share ``cache_max_bytes`` evenly among the tasks that cache (Kafka splits it
        among a client's threads); a shrunk cache evicts on its next put."""
        caching = [task.cache for task in self.tasks.values() if task.cache is not None]
        for cache in caching:
            cache.max_bytes = self.cache_max_bytes // len(caching)

    def _close_task(self, task_id: TaskId, clean: bool) -> None:
        task = self.tasks.pop(task_id)
        self._held.pop(task_id, None)  # not processed, so not committed: read again
        self._split_cache()
        if not clean and not self.exactly_once:
            # at_least_once keeps what was processed, as a store without a cache does
            # (the consumer may go on from its position): produce the cache's updates.
            try:
                self._apply(task.flush_cache())
            except RaystreamError as error:
                logger.warning("worker %s: flushing task %s at close: %s", self, task_id, error)
        if clean:
            for store in task.stores.values():
                store.flush()
            self._write_checkpoint(task)
        task.close()

    def _write_checkpoint(self, task: Task) -> None:
        offsets = {
            name: self._changelog_next[tp]
            for name, tp in task.changelog_partitions().items()
            if tp in self._changelog_next and task.stores[name].persistent
        }
        if offsets:
            write_checkpoint(self.task_dir(task.task_id), offsets)

    def close(self, clean: bool = True) -> None:
        """Commit (when ``clean``) and close every task; the consumer leaves the group."""
        try:
            if clean:
                self.commit()
            elif self.exactly_once and self._in_transaction:
                try:
                    self.producer.abort_transaction()
                except RaystreamError as error:
                    logger.info("worker %s: abort at close failed: %s", self, error)
        finally:
            committed = clean and not (self.exactly_once and self._in_transaction)
            for task_id in list(self.tasks):
                self._close_task(task_id, clean=committed)
            self.standbys.close()
            self._closed = True
            if self.state != ERROR:
                self.state = STOPPED

    def _update_state(self) -> None:
        if self.state in (ERROR, STOPPED):
            return
        group = getattr(self.consumer, "_group", None)
        rebalancing = group is None or group.rebalancing or group.generation < 0
        self.state = REBALANCING if rebalancing else RUNNING

    # ------------------------------------------------------- interactive queries

    def query(self, store: str, method: str, args: tuple[Any, ...], partition: int | None) -> Any:
        """Call ``method(*args)`` on the read-only view of ``store`` in each of this
        worker's tasks holding it (only the task of ``partition`` if given), on the loop
        thread; returns ``[(task id as str, answer), ...]``."""
        future: Future = Future()

        def run() -> Any:
            answers = []
            for task_id, task in sorted(self.tasks.items()):
                if store in task.stores and partition in (None, task_id.partition):
                    answers.append(
                        (
                            str(task_id),
                            getattr(read_only(task.queryable_store(store)), method)(*args),
                        )
                    )
            return answers

        self._queries.put((run, future))
        return future.result(QUERY_TIMEOUT_S)

    def _serve_queries(self) -> None:
        while True:
            try:
                run, future = self._queries.get_nowait()
            except queue.Empty:
                return
            try:
                future.set_result(run())
            except Exception as error:
                future.set_exception(error)

    def fail_queries(self, error: Exception) -> None:
        """Answer the queries still waiting with ``error`` (the loop stopped)."""
        while True:
            try:
                _, future = self._queries.get_nowait()
            except queue.Empty:
                return
            future.set_exception(error)

    def status(self) -> dict[str, Any]:
        """State, error, tasks, assignment and counters (read from any thread)."""
        return {
            "state": self.state,
            "error": self.error,
            "tasks": sorted(str(t) for t in list(self.tasks)),
            "task_ids": sorted(list(self.tasks)),
            "processed_records_total": self.processed_records_total,
            "restored_records_total": self.restored_records_total,
            "standby_tasks": [str(t) for t in self.standbys.task_ids],
            "standby_checkpoints": {str(t): c for t, c in self.standbys.checkpoints().items()},
            "standby_updated_records_total": self.standbys.updated_records_total,
            "commits_total": self.commits_total,
            "aborts_total": self.aborts_total,
            "task_metrics": {
                str(task_id): {
                    "processed_records_total": task.processed_records_total,
                    "lag": self._lags.get(task_id),
                    "stream_time_ms": task.stream_time_ms,
                }
                for task_id, task in list(self.tasks.items())
            },
            "dropped_records_total": sum(
                sum(t.dropped_records.values()) for t in list(self.tasks.values())
            ),
        }

    def __repr__(self) -> str:
        return f"StreamsWorker({self.application_id!r}, {len(self.tasks)} tasks)"


def _records_of(
    table: pa.Table, topic: str, partition: int, timestamp_type: int, value_type: pa.DataType
) -> list[ConsumerRecord]:
    """One partition's slice of a ``poll_arrow`` table as the records ``poll()`` gives
    (a typed topic's columns folded back into the dict values), column by column."""
    if pa.types.is_struct(value_type):
        fields = list(value_type)
        chunks = [
            pa.StructArray.from_arrays(
                [table.column(f.name).cast(f.type).combine_chunks() for f in fields],
                fields=fields,
            )
        ]
        table = table.append_column("value", pa.chunked_array(chunks, value_type))
    offsets = table.column("offset").to_numpy()
    return list(iter_consumer_records(table, offsets, topic, partition, timestamp_type))


def wall_clock_ms() -> int:
    """The wall clock in ms, for :class:`StreamsWorker`'s ``clock_ms``."""
    return time.time_ns() // 1_000_000
