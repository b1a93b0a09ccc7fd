"""Runs one flow's three connectors in one process: MirrorMaker's dedicated mode.

:class:`FlowRunner` is the small part of a Connect worker MirrorMaker needs, for one
flow ``source -> target``: it starts the connectors, starts their tasks, writes what
they return to the target, stores source offsets, and restarts the source task when
its connector asks (new topics, new partitions). Its loop:

1. Poll the source task for the batches of one round (one per source partition; the
   task reads ahead on a thread of its own while this loop writes, and a round takes
   what was read meanwhile, so rounds grow when the target is the slower side); write
   each batch to its remote topic partition (``send_batch`` of the
   target's :class:`~raystream.mirror.clusters.Writer`) and wait for their
   acknowledgement (``settle``).
2. Store the batches' source offsets in the ``mm2-offsets.<target>.internal`` topic
   of the target (Kafka Connect's offsets layout: key ``[connector, source partition]``
   as JSON, value ``{"offset": n}``). At least once: records, then offsets. With
   ``exactly_once`` the records and the offsets are one transaction of the target
   (KIP-618; a raystream or any Kafka-protocol target with transactions): a restarted
   runner resumes after the last committed batch, and read_committed consumers of the
   target never see a record twice. Then tell the task where each batch went
   (``commit_batch``, which records the offset syncs: of committed records only).
3. Call the task's ``commit`` (pending offset syncs) every ``OFFSET_FLUSH_S``. The
   checkpoint and heartbeat tasks run on threads of their own, writing their records.

No Ray here: the Ray actor around it is ``raystream.actors.mirror_worker``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

from raystream.connectors.api import SourceBatch, SourceRecord, SourceTask
from raystream.errors import ProducerFencedError, RaystreamError
from raystream.mirror.clusters import TargetCluster, Writer, open_cluster, read_records
from raystream.mirror.config import FlowSettings
from raystream.mirror.connectors import (
    INTERNAL_CONFIG,
    MirrorCheckpointConnector,
    MirrorHeartbeatConnector,
    MirrorSourceConnector,
    MirrorSourceTask,
    check_batch_partition,
)
from raystream.retry import Backoff

logger = logging.getLogger(__name__)

OFFSET_FLUSH_S = 1.0
RUNNING, FAILED, STOPPED = "RUNNING", "FAILED", "STOPPED"


def offset_key(connector: str, source_partition: Mapping[str, Any]) -> bytes:
    """Kafka Connect's offsets-topic key: ``["<connector>", {source partition}]``."""
    return json.dumps([connector, dict(source_partition)], sort_keys=True).encode()


class OffsetsTopic:
    """Source offsets in a compacted topic of the target; the
    :class:`~raystream.connectors.api.OffsetStorageReader` of the flow's tasks."""

    def __init__(self, target: TargetCluster, topic: str, connector: str) -> None:
        self.target = target
        self.topic = topic
        self.connector = connector
        self.offsets: dict[bytes, dict[str, Any]] = {}
        target.ensure_topic(topic, 1, INTERNAL_CONFIG)

    def load(self) -> None:
        """Read every committed offset of the topic (read_committed: an aborted
        transaction's offsets do not count)."""
        for key, value in read_records(self.target, self.topic):
            if value is None:
                self.offsets.pop(key, None)
            else:
                self.offsets[key] = json.loads(value)

    def offset(self, source_partition: Mapping[str, Any]) -> dict[str, Any] | None:
        return self.offsets.get(offset_key(self.connector, source_partition))

    def offsets_of(self, source_partitions: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return {
            json.dumps(dict(sp), sort_keys=True): self.offset(sp)
            for sp in source_partitions
            if self.offset(sp) is not None
        }

    def write(self, writer: Writer, batches: Sequence[SourceBatch]) -> dict[bytes, dict]:
        """Send the latest offset of each batch's source partition (not flushed); returns
        them for :meth:`stored` once they count (acknowledged, or their transaction
        committed)."""
        latest: dict[bytes, dict] = {}
        for batch in batches:
            latest[offset_key(self.connector, batch.source_partition)] = dict(batch.source_offset)
        for key, value in latest.items():
            writer.send(self.topic, json.dumps(value).encode(), key, partition=0)
        return latest

    def stored(self, offsets: Mapping[bytes, dict]) -> None:
        """These offsets count now: a restarted source task resumes after them."""
        self.offsets.update(offsets)


class _Context:
    """What the flow's connectors and tasks may ask of this runner."""

    def __init__(self, runner: FlowRunner, offsets: OffsetsTopic | None = None) -> None:
        self.runner = runner
        self.offset_storage_reader = offsets
        self.transaction_context = None

    def request_task_reconfiguration(self) -> None:
        self.runner.reconfigure.set()

    def raise_error(self, error: Exception) -> None:
        self.runner.fail(error)


class FlowRunner:
    """One flow's connectors and tasks, driven by :meth:`run` on the caller's thread.

    Args:
        config: the flow's MM2 connector config (``FlowSettings.to_connector_config``).
    """

    def __init__(self, config: Mapping[str, str]) -> None:
        self.config = dict(config)
        self.flow = FlowSettings.from_connector_config(config)
        self.name = f"{self.flow.name}.MirrorSourceConnector"
        self.state = RUNNING
        self.error: str | None = None
        self.reconfigure = threading.Event()
        self.stopping = threading.Event()
        self.started_at = time.time()
        self.source_task: MirrorSourceTask | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------ lifecycle

    def open(self) -> None:
        """Attach to the target, start the connectors and their tasks."""
        flow = self.flow
        self.target: TargetCluster = open_cluster(flow.target)
        policy = flow.policy()
        self.offsets = OffsetsTopic(self.target, policy.offsets_topic(flow.target.alias), self.name)
        self.writer = self.target.writer(f"mm2-{flow.name}-source-0" if flow.exactly_once else None)
        if flow.exactly_once:
            # Fences a previous incarnation's producer and aborts its open transaction
            # first: until then read_committed could not read the offsets past it.
            self.writer.init_transactions()
        self.offsets.load()
        self.aux_writer = self.target.writer()
        self.source_connector = MirrorSourceConnector()
        self.source_connector.context = _Context(self)
        self.source_connector.start(self.config)
        self._start_source_task()
        self.aux_tasks: list[SourceTask] = []
        for connector in (MirrorCheckpointConnector(), MirrorHeartbeatConnector()):
            connector.context = _Context(self)
            connector.start(self.config)
            for task_config in connector.task_configs(1):
                task = connector.task_class()()
                task.context = _Context(self)
                task.start(task_config)
                self.aux_tasks.append(task)
            connector.stop()

    def _start_source_task(self) -> None:
        configs = self.source_connector.task_configs(1)
        task = MirrorSourceTask()
        task.context = _Context(self, self.offsets)
        task.start(configs[0] if configs else dict(self.config))
        with self._lock:
            self.source_task = task

    def run(self) -> None:
        """Mirror until :meth:`stop`; errors are logged and retried after a pause that
        grows while they repeat (:class:`~raystream.retry.Backoff`; the control loop
        survives), except a connector's ``raise_error`` and a fenced producer (another
        instance of the flow took its transactional id), which fail the flow. The
        checkpoint and heartbeat tasks run on threads of their own: their polls wait
        for their intervals, which must not hold the records back."""
        aux = [
            threading.Thread(target=self._run_aux, args=(task,), name="mirror-aux", daemon=True)
            for task in self.aux_tasks
        ]
        for thread in aux:
            thread.start()
        next_flush = time.monotonic() + OFFSET_FLUSH_S
        backoff = Backoff()
        while not self.stopping.is_set() and self.state == RUNNING:
            try:
                if self.reconfigure.is_set():
                    self.reconfigure.clear()
                    self._restart_source_task()
                self.step()
                if time.monotonic() >= next_flush:
                    next_flush = time.monotonic() + OFFSET_FLUSH_S
                    assert self.source_task is not None
                    self.writer.flush()
                    self.source_task.commit()
                backoff.reset()
            except ProducerFencedError as error:  # a newer instance of the flow writes now
                self.fail(error)
            except RaystreamError as error:
                logger.warning("mirror %s: %s; retrying", self.flow.name, error)
                self.error = f"{type(error).__name__}: {error}"
                self._abort()
                self.stopping.wait(backoff.next_s())
            except Exception as error:  # a bug or a broken source client: fail visibly
                self.fail(error)
        for thread in aux:
            thread.join(timeout=10)

    def _run_aux(self, task: SourceTask) -> None:
        """A checkpoint or heartbeat task's loop: poll, write what it returns (failures
        retried after a growing pause)."""
        backoff = Backoff()
        while not self.stopping.is_set() and self.state == RUNNING:
            try:
                records = task.poll()
                if records:
                    self._write_records(records)
                backoff.reset()
            except RaystreamError as error:
                logger.warning("mirror %s: %s: %s", self.flow.name, type(task).__name__, error)
                self.stopping.wait(backoff.next_s())
            except Exception as error:
                self.fail(error)

    def step(self) -> int:
        """One round of the source task (module docstring, steps 1-2); records written."""
        task = self.source_task
        assert task is not None
        first = task.poll()
        if first is None:
            return 0
        batches = [first]
        while task.pending:  # the rest of the same read: one write round per read
            batches.append(task.poll())
        eos = self.flow.exactly_once
        if eos:
            self.writer.begin_transaction()
        deliveries = []
        for batch in batches:
            partition = check_batch_partition(batch)
            table = batch.table.drop_columns(["partition"])
            deliveries.append(self.writer.send_batch(batch.topic, partition, table))
        self.writer.settle()
        written = self.offsets.write(self.writer, batches)
        if eos:
            self.writer.commit_transaction()
        self.offsets.stored(written)
        # At least once, the offsets follow records already acknowledged: they are
        # flushed with the task's commit every OFFSET_FLUSH_S, not waited for here.
        for batch, delivery in zip(batches, deliveries, strict=True):
            task.commit_batch(batch, delivery)
        return sum(b.table.num_rows for b in batches)

    def _write_records(self, records: Sequence[SourceRecord]) -> None:
        """Write a checkpoint or heartbeat task's records (the writer is thread-safe:
        both tasks' threads share it)."""
        for record in records:
            self.aux_writer.send(
                record.topic,
                record.value,
                record.key,
                partition=record.partition,
                timestamp_ms=record.timestamp,
                headers=list(record.headers) or None,
            )
        self.aux_writer.flush()

    def _abort(self) -> None:
        """After a failed round: abort it (exactly-once) and rewind the source task to
        the last stored offsets, so what it had read but not written is read again."""
        if self.flow.exactly_once:
            try:
                self.writer.abort_transaction()
            except RaystreamError as error:
                logger.info("mirror %s: abort: %s", self.flow.name, error)
        try:
            self._restart_source_task()
        except RaystreamError as error:
            logger.info("mirror %s: restart after abort: %s", self.flow.name, error)

    def _restart_source_task(self) -> None:
        old = self.source_task
        if old is not None:
            old.commit()
            old.stop()
        self._start_source_task()

    def fail(self, error: BaseException) -> None:
        self.state = FAILED
        self.error = "".join(traceback.format_exception(error)).strip()
        logger.error("mirror %s failed: %s", self.flow.name, self.error)

    def stop(self) -> None:
        """Ask :meth:`run` to return."""
        self.stopping.set()

    def close(self) -> None:
        """Stop tasks and connectors, close clients (after :meth:`run` returned)."""
        for task in [self.source_task, *getattr(self, "aux_tasks", [])]:
            if task is not None:
                try:
                    task.stop()
                except Exception as error:
                    logger.info("mirror %s: task stop: %s", self.flow.name, error)
        for closer in ("source_connector",):
            found = getattr(self, closer, None)
            if found is not None:
                found.stop()
        for writer in (getattr(self, "writer", None), getattr(self, "aux_writer", None)):
            if writer is not None:
                writer.close()
        target = getattr(self, "target", None)
        if target is not None:
            target.close()
        if self.state == RUNNING:
            self.state = STOPPED

    # ------------------------------------------------------------ status

    def status(self) -> dict[str, Any]:
        """The flow's state, records mirrored, replication lag per source partition, and
        the remote topics the target refused to create or change (``topic_errors``)."""
        with self._lock:
            task = self.source_task
        partitions = {}
        if task is not None:
            try:
                lags = task.lag()
            except RaystreamError as error:
                lags = {}
                self.error = f"lag: {error}"
            for tp, lag in sorted(lags.items()):
                partitions[f"{tp.topic}-{tp.partition}"] = {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "remote_topic": self.flow.policy().format_remote_topic(
                        self.flow.source.alias, tp.topic
                    ),
                    **lag,
                }
        checkpoints = sum(getattr(t, "checkpoints", 0) for t in getattr(self, "aux_tasks", []))
        return {
            "flow": self.flow.name,
            "state": self.state,
            "error": self.error,
            "exactly_once": self.flow.exactly_once,
            "records": task.records if task is not None else 0,
            "checkpoints": checkpoints,
            "lag": sum(p["lag"] for p in partitions.values()),
            "partitions": partitions,
            "topic_errors": dict(getattr(getattr(self, "source_connector", None), "problems", {})),
        }
