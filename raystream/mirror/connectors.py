"""MirrorMaker 2's three connectors, as Connect connectors (``raystream.connectors.api``).

- :class:`MirrorSourceConnector` finds the source topics the flow mirrors (by regex,
  loops and internal topics left out), creates their remote topics on the target with
  the source's partition count and configs, follows both as they change, and splits the
  partitions among :class:`MirrorSourceTask` s. A task reads its partitions as Arrow
  tables, ahead of the writes on a thread of its own, and returns one
  :class:`~raystream.connectors.api.SourceBatch` per source partition and poll: key,
  value, headers and timestamp kept, the partition kept (the ``partition`` column),
  the remote topic as the batch's topic. Its source offset is
  ``{"offset": last upstream offset}`` under ``{"cluster", "topic", "partition"}``, as
  MM2 stores it. Once the framework wrote a batch it calls :meth:`commit_batch` with
  the write's metadata, and the task records an offset sync (MM2's rules: when the
  offset gap changes or ``offset.lag.max`` records passed; the pending ones on ``commit``).
- :class:`MirrorCheckpointConnector` lists the source's consumer groups (by regex);
  its :class:`MirrorCheckpointTask` s translate their committed offsets through the
  offset syncs into checkpoints, and with ``sync.group.offsets.enabled`` commit them
  into the target's groups that have no members there.
- :class:`MirrorHeartbeatConnector`: one task that writes a heartbeat to the target's
  ``heartbeats`` topic every ``emit.heartbeats.interval.seconds``.

Every config is MM2's connector config (:class:`~raystream.mirror.config.FlowSettings`).
The connectors reach the clusters through :mod:`raystream.mirror.clusters`; the source
connector refreshes topics on a timer thread of its own (MM2's scheduler) and asks for
new task configs through its context when the partitions change.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raystream.connectors.api import (
    Delivery,
    SourceBatch,
    SourceConnector,
    SourceRecord,
    SourceTask,
    partition_runs,
)
from raystream.errors import ConnectError, InvalidConfigError, RaystreamError
from raystream.mirror.clusters import SourceCluster, TargetCluster, open_cluster
from raystream.mirror.config import FlowSettings
from raystream.mirror.offsets import Checkpoint, Heartbeat, OffsetSync, OffsetSyncStore
from raystream.retry import Backoff
from raystream.types import TopicPartition

logger = logging.getLogger(__name__)

ASSIGNED_KEY = "task.assigned.partitions"
GROUPS_KEY = "task.assigned.groups"
POLL_RECORDS = 50_000
POLL_TIMEOUT_S = 0.2
GATHER_S = 0.05
#: Reads fetched ahead of the writes (each up to ``POLL_RECORDS`` rows).
READ_AHEAD = 4
#: Rows of queued reads one round of writes takes at most.
ROUND_ROWS = 200_000
#: Batches of a source partition polled and not yet committed that a task remembers
#: the upstream offsets of (for the offset syncs): a framework commits them in order,
#: so a handful at most are ever waiting; past this many the oldest are forgotten
#: (their syncs are skipped: translation is then coarser, never wrong).
MAX_UNCOMMITTED_BATCHES = 64
INTERNAL_CONFIG = {"cleanup.policy": "compact"}


def _flow(config: Mapping[str, str]) -> FlowSettings:
    return FlowSettings.from_connector_config(config)


def mirrored_topics(flow: FlowSettings, source_topics: Sequence[str]) -> list[str]:
    """The source topics ``flow`` mirrors: matching its filter, not MirrorMaker's own,
    and not on their way home (a remote topic of the target's alias)."""
    policy = flow.policy()
    wanted = flow.topic_filter()
    heartbeats = policy.heartbeats_topic()

    def mirrored(topic: str) -> bool:
        # MM2's shouldReplicateTopic: heartbeats topics always travel (so a consumer
        # downstream sees every hop is alive), whatever the topic filter says.
        is_heartbeats = topic == heartbeats or topic.endswith(policy.separator + heartbeats)
        return (
            (wanted.matches(topic) or is_heartbeats)
            and not policy.is_internal_topic(topic)
            and not policy.is_cycle(topic, flow.target.alias)
        )

    return sorted(topic for topic in source_topics if mirrored(topic))


def spread(items: Sequence[Any], max_tasks: int) -> list[list[Any]]:
    """``items`` dealt round-robin into at most ``max_tasks`` non-empty lists."""
    count = max(1, min(max_tasks, len(items)))
    return [list(items[i::count]) for i in range(count) if items[i::count]]


def check_workers_target(flow: FlowSettings, namespace: str) -> None:
    """Refuse a flow whose target is not the raystream cluster ``namespace`` of the
    Connect workers that would run it.

    On Connect workers a MirrorMaker connector's tasks hand their records to the
    workers, which write them into their own cluster (as in Kafka Connect, where MM2's
    connectors write into the Connect cluster's Kafka): a flow naming another target
    would create remote topics there and send the records here.

    Raises:
        InvalidConfigError: naming the ``target.cluster.*`` key at fault and the two
            ways that work.
    """
    target = flow.target
    fix = (
        f"on Connect workers the records are written into the workers' own cluster: set "
        f"target.cluster.raystream.namespace={namespace}, or run this flow with "
        f"'raystream mirror --config FILE' or rs.mirror.MirrorMaker(target=...), which "
        f"write into any target"
    )
    if not target.is_raystream:
        raise InvalidConfigError(
            f"target.cluster.alias={target.alias!r} is a Kafka-protocol cluster "
            f"(target.cluster.bootstrap.servers={target.kafka.get('bootstrap.servers')!r}); " + fix
        )
    if target.namespace != namespace:
        raise InvalidConfigError(
            f"target.cluster.raystream.namespace={target.namespace!r} is not the Connect "
            f"workers' cluster ({namespace!r}); " + fix
        )


class _FlowConnector(SourceConnector):
    """What MirrorMaker's three connectors share: a flow's config (MM2's connector
    keys), checked, and on Connect workers a target that is the workers' cluster."""

    def validate(self, config: Mapping[str, str]) -> None:
        _flow(config)

    def validate_for_workers(self, config: Mapping[str, str], namespace: str) -> None:
        check_workers_target(_flow(config), namespace)


# ------------------------------------------------------------------ source


class MirrorSourceConnector(_FlowConnector):
    """Plans the mirroring of the flow's topics; keeps remote topics in shape."""

    def __init__(self) -> None:
        self.config: dict[str, str] = {}
        self.partitions: list[TopicPartition] = []
        #: Source topics whose remote topic the target refused to create or change, why.
        self.problems: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self, config: dict[str, str]) -> None:
        self.config = dict(config)
        self.flow = _flow(config)
        self.policy = self.flow.policy()
        self.source = open_cluster(self.flow.source)
        self.target: TargetCluster = open_cluster(self.flow.target)
        self.refresh(sync_configs=True)
        self._thread = threading.Thread(target=self._run, name="mirror-refresh", daemon=True)
        self._thread.start()

    def refresh(self, sync_configs: bool = False) -> bool:
        """Look for new or grown topics; create or grow their remote topics (and follow
        configs when ``sync_configs``). True if the partitions to mirror changed."""
        found: list[TopicPartition] = []
        problems: dict[str, str] = {}
        for topic in mirrored_topics(self.flow, self.source.list_topics()):
            try:
                count = self.source.partitions(topic)
                config = (
                    self.source.topic_config(topic) if self.flow.sync_topic_configs_enabled else {}
                )
                schema = self.source.topic_schema(topic)
            except RaystreamError as error:  # deleted meanwhile
                logger.info("mirror %s: skipping topic %s: %s", self.flow.name, topic, error)
                continue
            remote = self.policy.format_remote_topic(self.flow.source.alias, topic)
            try:
                created = self.target.ensure_topic(
                    remote, count, config, self.flow.replication_factor, schema
                )
                if sync_configs and config and not created:
                    self.target.alter_config(remote, config)
            except RaystreamError as error:
                if error.retriable:  # the target is away: keep the plan, try again later
                    raise
                # Refused for good (a broker without CreatePartitions, a config it does
                # not take): the partitions the remote topic has go on being mirrored,
                # and status says why the others are not.
                logger.warning("mirror %s: remote topic %s: %s", self.flow.name, remote, error)
                problems[topic] = f"{remote}: {error}"
                try:
                    count = min(count, self.target.partitions(remote))
                except RaystreamError:
                    continue
            found += [TopicPartition(topic, p) for p in range(count)]
        with self._lock:
            changed = found != self.partitions
            self.partitions = found
            self.problems = problems
        return changed

    def _run(self) -> None:
        flow = self.flow
        next_configs = time.monotonic() + flow.sync_topic_configs_interval_seconds
        while not self._stop.wait(flow.refresh_topics_interval_seconds):
            try:
                now = time.monotonic()
                sync = now >= next_configs
                if sync:
                    next_configs = now + flow.sync_topic_configs_interval_seconds
                if self.refresh(sync_configs=sync) and self.context is not None:
                    self.context.request_task_reconfiguration()
            except Exception as error:  # the control loop survives: logged, retried
                logger.warning("mirror %s: topic refresh failed: %s", flow.name, error)

    def task_class(self) -> type[SourceTask]:
        return MirrorSourceTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        with self._lock:
            partitions = list(self.partitions)
        return [
            {**self.config, ASSIGNED_KEY: json.dumps([[tp.topic, tp.partition] for tp in part])}
            for part in spread(partitions, max_tasks)
        ]

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.source.close()
        self.target.close()


class _PartitionSyncs:
    """MM2's per-partition offset sync rule (``PartitionState``)."""

    def __init__(self) -> None:
        self.last_sync: tuple[int, int] | None = None
        self.previous: tuple[int, int] | None = None
        self.pending: tuple[int, int] | None = None

    def update(self, upstream: int, downstream: int, lag_max: int) -> bool:
        """Note that ``upstream`` became ``downstream``; True if a sync must go now."""
        now = (upstream, downstream)
        due = (
            self.last_sync is None
            or self.previous is None
            or upstream - self.previous[0] != downstream - self.previous[1]
            or upstream - self.last_sync[0] >= lag_max
            or downstream < self.last_sync[1]
        )
        self.previous = now
        self.pending = now
        return due

    def sent(self) -> tuple[int, int]:
        """The pending sync went out; returns it."""
        assert self.pending is not None
        self.last_sync = self.pending
        return self.pending


class MirrorSourceTask(SourceTask):
    """Reads its source partitions and hands them to the framework as batches."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.pending: list[SourceBatch] = []
        self.positions: dict[TopicPartition, int | None] = {}
        self.replicated: dict[TopicPartition, int] = {}
        self.records = 0
        self._syncs: dict[TopicPartition, _PartitionSyncs] = {}
        self._lock = threading.Lock()
        self._ends_lock = threading.Lock()
        self._sync_writer: Any = None
        # Per source partition, the batches polled and not yet committed, in poll
        # order: id(batch) -> its rows' source offsets.
        self._upstream: dict[TopicPartition, dict[int, np.ndarray]] = {}
        self._ahead: queue.Queue[pa.Table | Exception] = queue.Queue(maxsize=READ_AHEAD)
        self._reading = threading.Event()
        self._halted = threading.Event()  # set by stop(): ends the read-ahead's pauses
        self._reader_thread: threading.Thread | None = None
        self._failed: Exception | None = None  # a read's error, raised by the next poll

    def start(self, config: dict[str, str]) -> None:
        self.flow = _flow(config)
        self.policy = self.flow.policy()
        self.alias = self.flow.source.alias
        assigned = [TopicPartition(t, p) for t, p in json.loads(config.get(ASSIGNED_KEY, "[]"))]
        reader_offsets = getattr(self.context, "offset_storage_reader", None)
        for tp in assigned:
            stored = None
            if reader_offsets is not None:
                stored = reader_offsets.offset(self.source_partition(tp))
            self.positions[tp] = None if not stored else int(stored["offset"]) + 1
            if stored:
                self.replicated[tp] = int(stored["offset"])
        self.source: SourceCluster = open_cluster(self.flow.source)
        self.reader = self.source.reader()
        self.reader.assign(self.positions)
        self.target: TargetCluster = open_cluster(self.flow.target)
        self.syncs_topic = self.policy.offset_syncs_topic(self.alias)
        self.target.ensure_topic(self.syncs_topic, 1, INTERNAL_CONFIG, self.flow.replication_factor)
        self._sync_writer = self.target.writer()
        self._reading.set()
        self._reader_thread = threading.Thread(
            target=self._read_ahead, name="mirror-read", daemon=True
        )
        self._reader_thread.start()

    def source_partition(self, tp: TopicPartition) -> dict[str, Any]:
        """MM2's source partition of ``tp``: ``{"cluster", "topic", "partition"}``."""
        return {"cluster": self.alias, "topic": tp.topic, "partition": tp.partition}

    def poll(self) -> SourceBatch | None:
        """The next batch: the rest of the last read, else the next read of the source
        (waiting up to ``POLL_TIMEOUT_S`` for one).

        Raises:
            RaystreamError: reading the source failed (the reads stopped; the framework
                restarts the task, which reads again from the stored offsets).
        """
        if not self.pending:
            tables = self._take()
            if tables:
                self.pending = self._batches(_concat(tables))
        return self.pending.pop(0) if self.pending else None

    def _take(self) -> list[pa.Table]:
        """The reads queued now, up to ``ROUND_ROWS`` rows (waiting up to
        ``POLL_TIMEOUT_S`` for the first): when the writes fall behind the reads, the
        next round is larger, with fewer writes and transactions per record. A failed
        read after some good ones is raised by the next call, after these are written.
        """
        if self._failed is not None:
            error, self._failed = self._failed, None
            raise error
        try:
            got = self._ahead.get(timeout=POLL_TIMEOUT_S)
        except queue.Empty:
            return []
        tables: list[pa.Table] = []
        rows = 0
        while True:
            if isinstance(got, Exception):
                if not tables:
                    raise got
                self._failed = got
                return tables
            tables.append(got)
            rows += got.num_rows
            if rows >= ROUND_ROWS:
                return tables
            try:
                got = self._ahead.get_nowait()
            except queue.Empty:
                return tables

    def _read_ahead(self) -> None:
        """The reads, on a thread of their own: while the framework writes one read to
        the target, the next ones (up to ``READ_AHEAD``) are fetched from the source, so
        a busy flow's time is the slower of reading and writing, not their sum. A read
        that fails is raised by the next :meth:`poll` (the reads go on after it, from
        where the reader stands, as a direct read would be tried again), after a pause
        that grows while the reads keep failing (:class:`~raystream.retry.Backoff`)."""
        backoff = Backoff()
        while self._reading.is_set():
            try:
                table = self._read()
            except Exception as error:  # handed to poll(), which raises it
                self._hand_over(error)
                self._halted.wait(backoff.next_s())
                continue
            backoff.reset()
            if table is not None:
                self._hand_over(table)

    def _hand_over(self, item: pa.Table | Exception) -> None:
        """Queue ``item`` for :meth:`poll`, waiting while ``READ_AHEAD`` reads are queued
        (unless the task stops meanwhile)."""
        while self._reading.is_set():
            try:
                self._ahead.put(item, timeout=POLL_TIMEOUT_S)
                return
            except queue.Full:
                continue

    def _read(self) -> pa.Table | None:
        """What the source has now, up to ``POLL_RECORDS`` rows: reads go on while they
        bring rows, for at most ``GATHER_S`` after the first, so that a busy source
        makes few large writes (and transactions) and a quiet one is not held back."""
        tables = []
        rows = 0
        deadline = None
        while rows < POLL_RECORDS:
            wait_s = POLL_TIMEOUT_S if deadline is None else max(deadline - self.clock(), 0.0)
            table = self.reader.poll(POLL_RECORDS - rows, wait_s)
            if not table.num_rows:
                break
            tables.append(table)
            rows += table.num_rows
            if deadline is None:
                deadline = self.clock() + GATHER_S
            elif self.clock() >= deadline:
                break
        return _concat(tables) if tables else None

    def _batches(self, table: pa.Table) -> list[SourceBatch]:
        """One batch per source partition of ``table``, rows in offset order."""
        batches = []
        runs: dict[TopicPartition, list[pa.Table]] = {}
        for tp, start, stop in partition_runs(table):
            runs.setdefault(tp, []).append(table.slice(start, stop - start))
        for tp, parts in runs.items():
            rows = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
            upstream = rows.column("offset").to_numpy()
            last = int(upstream[-1])
            data = rows.drop_columns(["topic", "offset"])
            batch = SourceBatch(
                source_partition=self.source_partition(tp),
                source_offset={"offset": last},
                topic=self.policy.format_remote_topic(self.alias, tp.topic),
                table=data,
            )
            waiting = self._upstream.setdefault(tp, {})
            waiting[id(batch)] = upstream
            while len(waiting) > MAX_UNCOMMITTED_BATCHES:  # a framework that never commits
                del waiting[next(iter(waiting))]
            batches.append(batch)
            self.positions[tp] = last + 1
        return batches

    def commit_batch(self, batch: SourceBatch, delivery: Delivery) -> None:
        """The framework wrote ``batch`` (``delivery``: where its first and last rows
        landed): note how far the partition is replicated, and send the offset syncs
        MM2's rule asks for.

        The rule (MM2's ``PartitionState``) is applied to the batch's first row, every
        ``offset.lag.max``-th row and its last row (rows at consecutive offsets; only
        the first and last, whose offsets are known, when something else wrote in
        between): a sync goes when it is the partition's first, when the source skipped
        offsets (compaction, transaction markers), or ``offset.lag.max`` records after
        the last one; the last row is kept pending for :meth:`commit` otherwise.

        The partition's batches polled before this one and not committed never will be
        (an aborted transaction, a rewound task): they are forgotten here.
        """
        sp = batch.source_partition
        tp = TopicPartition(sp["topic"], sp["partition"])
        upstream = self._forget_through(tp, id(batch))
        if delivery.first_offset is None or upstream is None or not len(upstream):
            return
        first = delivery.first_offset
        lag_max = max(self.flow.offset_lag_max, 1)
        rows = len(upstream)
        if delivery.consecutive():
            points = [(i, first + i) for i in sorted({0, rows - 1, *range(lag_max, rows, lag_max)})]
        else:
            points = [(0, first), (rows - 1, delivery.last_offset)]
        with self._lock:
            self.replicated[tp] = int(upstream[-1])
            self.records += rows
            state = self._syncs.setdefault(tp, _PartitionSyncs())
            due = [
                state.sent()
                for i, downstream in points
                if state.update(int(upstream[i]), downstream, lag_max)
            ]
        # Outside the lock: a status call's lag() need not wait for the write.
        key = OffsetSync(tp, 0, 0).key()
        self._sync_writer.send_many(
            self.syncs_topic, 0, [(key, OffsetSync(tp, u, d).value()) for u, d in due]
        )

    def _forget_through(self, tp: TopicPartition, key: int) -> np.ndarray | None:
        """Drop the remembered batches of ``tp`` up to the one ``key`` names (none if it
        is not among them); its upstream offsets, or None."""
        waiting = self._upstream.get(tp)
        if not waiting or key not in waiting:
            return None
        for older in list(waiting):
            upstream = waiting.pop(older)
            if older == key:
                break
        if not waiting:
            del self._upstream[tp]
        return upstream

    def uncommitted_batches(self) -> int:
        """Batches polled whose :meth:`commit_batch` has not come (yet)."""
        return sum(len(waiting) for waiting in self._upstream.values())

    def commit(self) -> None:
        """Send the syncs held back (MM2's ``firePendingOffsetSyncs``): the latest
        position of each partition is always synced by the next offset commit."""
        with self._lock:
            for tp, state in self._syncs.items():
                if state.pending is not None and state.pending != state.last_sync:
                    self._send_sync(tp, state)
        if self._sync_writer is not None:
            self._sync_writer.flush()

    def _send_sync(self, tp: TopicPartition, state: _PartitionSyncs) -> None:
        sync = OffsetSync(tp, *state.sent())
        self._sync_writer.send(self.syncs_topic, sync.value(), sync.key(), partition=0)

    def lag(self) -> dict[TopicPartition, dict[str, int]]:
        """Per source partition: its end offset, the next offset to replicate, and the
        replication lag in records (end minus that)."""
        with self._lock:
            positions = {
                tp: self.replicated[tp] + 1 if tp in self.replicated else None
                for tp in self.positions
            }
        with self._ends_lock:  # status calls may come concurrently
            ends = self.source.end_offsets(list(positions))
        lags = {}
        for tp, end in ends.items():
            done = positions[tp] or 0  # None: nothing replicated yet
            lags[tp] = {"end": end, "replicated": done, "lag": max(end - done, 0)}
        return lags

    def stop(self) -> None:
        self._reading.clear()
        self._halted.set()
        if self._reader_thread is not None:
            self._reader_thread.join(timeout=10)
        for close in (
            getattr(getattr(self, "reader", None), "close", None),
            getattr(self._sync_writer, "close", None),
            getattr(getattr(self, "source", None), "close", None),
            getattr(getattr(self, "target", None), "close", None),
        ):
            if close is not None:
                try:
                    close()
                except Exception as error:  # stop releases what it can
                    logger.info("mirror source task: close failed: %s", error)


# ------------------------------------------------------------------ checkpoints


class MirrorCheckpointConnector(_FlowConnector):
    """Splits the source's consumer groups (by ``groups``) among checkpoint tasks."""

    def start(self, config: dict[str, str]) -> None:
        self.config = dict(config)
        self.flow = _flow(config)
        self.source = open_cluster(self.flow.source)

    def groups(self) -> list[str]:
        wanted = self.flow.group_filter()
        return [g for g in self.source.group_ids() if wanted.matches(g)]

    def task_class(self) -> type[SourceTask]:
        return MirrorCheckpointTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        """The groups matching now, spread over the tasks; one task watching every
        matching group (refreshed) when there is none yet, so groups that appear later
        are picked up; no task when checkpoints are off (MM2's
        ``emit.checkpoints.enabled``)."""
        if not self.flow.emit_checkpoints_enabled:
            return []
        parts = spread(self.groups(), max_tasks) or [[]]
        return [{**self.config, GROUPS_KEY: json.dumps(part)} for part in parts]

    def exactly_once_support(self, config: Mapping[str, str]) -> bool:
        return False

    def stop(self) -> None:
        self.source.close()


class MirrorCheckpointTask(SourceTask):
    """Translates source group offsets into checkpoints (and synced target offsets).

    A task given no groups (``task.assigned.groups`` = []) watches every group the
    filter takes, refreshed every ``refresh.groups.interval.seconds``.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.store = OffsetSyncStore()
        self.emitted: dict[tuple[str, TopicPartition], int] = {}
        self.checkpoints = 0

    def start(self, config: dict[str, str]) -> None:
        self.flow = _flow(config)
        self.policy = self.flow.policy()
        self.alias = self.flow.source.alias
        self.fixed_groups: list[str] = json.loads(config.get(GROUPS_KEY, "[]"))
        self.source = open_cluster(self.flow.source)
        self.target: TargetCluster = open_cluster(self.flow.target)
        self.checkpoints_topic = self.policy.checkpoints_topic(self.alias)
        self.target.ensure_topic(
            self.checkpoints_topic, 1, INTERNAL_CONFIG, self.flow.replication_factor
        )
        syncs_topic = self.policy.offset_syncs_topic(self.alias)
        self.target.ensure_topic(syncs_topic, 1, INTERNAL_CONFIG, self.flow.replication_factor)
        self.syncs = self.target.reader()
        self.syncs.assign({TopicPartition(syncs_topic, 0): None})
        now = self.clock()
        self.next_checkpoint = now
        self.next_group_sync = now + self.flow.sync_group_offsets_interval_seconds
        self.next_groups_refresh = now
        self.groups: list[str] = list(self.fixed_groups)

    def read_syncs(self, timeout_s: float = 0.0) -> int:
        """Take in the offset syncs written since the last call; how many."""
        table = self.syncs.poll(100_000, timeout_s)
        if not table.num_rows:
            return 0
        for key, value in zip(
            table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True
        ):
            self.store.add(OffsetSync.decode(key, value))
        return table.num_rows

    def poll(self) -> list[SourceRecord] | None:
        now = self.clock()
        if now < self.next_checkpoint:
            time.sleep(min(self.next_checkpoint - now, POLL_TIMEOUT_S))
            return None
        self.next_checkpoint = now + self.flow.emit_checkpoints_interval_seconds
        while self.read_syncs():
            pass
        if not self.fixed_groups and now >= self.next_groups_refresh:
            wanted = self.flow.group_filter()
            self.groups = [g for g in self.source.group_ids() if wanted.matches(g)]
            self.next_groups_refresh = now + self.flow.refresh_groups_interval_seconds
        found = self.translate_all()
        records = []
        for checkpoint in found:
            key = (checkpoint.group, checkpoint.tp)
            if self.emitted.get(key) == checkpoint.downstream:
                continue
            self.emitted[key] = checkpoint.downstream
            records.append(
                SourceRecord(
                    source_partition={
                        "group": checkpoint.group,
                        "topic": checkpoint.tp.topic,
                        "partition": checkpoint.tp.partition,
                    },
                    source_offset={"offset": 0},
                    topic=self.checkpoints_topic,
                    key=checkpoint.key(),
                    value=checkpoint.value(),
                    partition=0,
                )
            )
        self.checkpoints += len(records)
        if self.flow.sync_group_offsets_enabled and now >= self.next_group_sync:
            self.next_group_sync = now + self.flow.sync_group_offsets_interval_seconds
            self.sync_group_offsets(found)
        return records or None

    def translate_all(self) -> list[Checkpoint]:
        """Checkpoints of every watched group's committed offsets that translate."""
        found = []
        mirrored = set(
            mirrored_topics(self.flow, sorted({tp.topic for tp in self.store.partitions()}))
        )
        for group in self.groups:
            for tp, upstream in sorted(self.source.group_offsets(group).items()):
                if tp.topic not in mirrored:
                    continue
                downstream = self.store.translate(tp, upstream)
                if downstream is None:
                    continue
                remote = TopicPartition(
                    self.policy.format_remote_topic(self.alias, tp.topic), tp.partition
                )
                found.append(Checkpoint(group, remote, upstream, downstream))
        return found

    def sync_group_offsets(self, checkpoints: Sequence[Checkpoint]) -> dict[str, int]:
        """Commit checkpoints into the target's groups that have no members there and
        whose committed offsets are behind (never rewinding a group); per group, how
        many partitions moved."""
        by_group: dict[str, dict[TopicPartition, int]] = {}
        for checkpoint in checkpoints:
            by_group.setdefault(checkpoint.group, {})[checkpoint.tp] = checkpoint.downstream
        moved = {}
        for group, offsets in sorted(by_group.items()):
            if self.target.group_is_active(group):
                continue
            current = self.target.group_offsets(group)
            ahead = {tp: o for tp, o in offsets.items() if current.get(tp, -1) < o}
            if ahead and self.target.set_group_offsets(group, ahead):
                moved[group] = len(ahead)
        return moved

    def stop(self) -> None:
        for what in ("syncs", "source", "target"):
            found = getattr(self, what, None)
            if found is not None:
                try:
                    found.close()
                except Exception as error:
                    logger.info("mirror checkpoint task: close failed: %s", error)


# ------------------------------------------------------------------ heartbeats


class MirrorHeartbeatConnector(_FlowConnector):
    """One task writing heartbeats, so a consumer of the target can tell the flow is up
    (and, mirrored back, how far behind it runs)."""

    def start(self, config: dict[str, str]) -> None:
        self.config = dict(config)
        self.flow = _flow(config)

    def task_class(self) -> type[SourceTask]:
        return MirrorHeartbeatTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.config)] if self.flow.emit_heartbeats_enabled else []

    def stop(self) -> None:
        pass


class MirrorHeartbeatTask(SourceTask):
    """A heartbeat every ``emit.heartbeats.interval.seconds`` into ``heartbeats``."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.clock = clock
        self.wall_ms = wall_ms
        self.next_beat = 0.0

    def start(self, config: dict[str, str]) -> None:
        self.flow = _flow(config)
        self.topic = self.flow.policy().heartbeats_topic()
        target = open_cluster(self.flow.target)
        try:
            target.ensure_topic(self.topic, 1, INTERNAL_CONFIG, self.flow.replication_factor)
        finally:
            target.close()

    def poll(self) -> list[SourceRecord] | None:
        now = self.clock()
        if now < self.next_beat:
            time.sleep(min(self.next_beat - now, POLL_TIMEOUT_S))
            return None
        self.next_beat = now + self.flow.emit_heartbeats_interval_seconds
        beat = Heartbeat(self.flow.source.alias, self.flow.target.alias, self.wall_ms())
        return [
            SourceRecord(
                source_partition={
                    "sourceClusterAlias": beat.source_alias,
                    "targetClusterAlias": beat.target_alias,
                },
                source_offset={"offset": 0},
                topic=self.topic,
                key=beat.key(),
                value=beat.value(),
                partition=0,
                timestamp=beat.timestamp_ms,
            )
        ]

    def stop(self) -> None:
        pass


def _concat(tables: Sequence[pa.Table]) -> pa.Table:
    """Reads as one table (no copy for one)."""
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="permissive")


def check_batch_partition(batch: SourceBatch) -> int:
    """The one target partition of a mirror batch (its ``partition`` column).

    Raises:
        ConnectError: the batch mixes partitions (not a mirror batch).
    """
    column = batch.table.column("partition")
    low, high = pc.min(column).as_py(), pc.max(column).as_py()
    if low != high:
        raise ConnectError(f"mirror batch for {batch.topic!r} mixes partitions {low}..{high}")
    return int(low)
