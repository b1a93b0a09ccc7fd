"""The task loops: what a worker does with a source or sink task, Kafka Connect's rules.

**Source** (:class:`SourceTaskRunner`, one thread per task): ``poll()`` -> records or a
:class:`SourceBatch` -> one Arrow table per poll -> transforms -> key/value converters
-> ``send_batch`` to the topics the rows name. Offsets: the latest source offset of
each source partition of the poll is written to the offsets topic once the records are
acknowledged (at least once: a task killed between the two writes its last batch
again), then the task hears where a polled :class:`SourceBatch` landed
(``task.commit_batch(batch, delivery)``, Kafka Connect's ``commitRecord`` for a batch)
and ``task.commit()``. With ``exactly.once.support=required`` (KIP-618) the
producer is transactional (``transactional.id`` ``<group>-<connector>-<task>``, so a
restarted task fences its zombie and aborts what it left open) and the offsets are
records of the same transaction as the data: a task killed anywhere resumes after
exactly what committed; ``commit_batch`` then follows the transaction's commit (an
aborted batch gets none). ``transaction.boundary`` is ``poll`` (a transaction per poll,
the default), ``interval`` (every ``transaction.boundary.interval.ms``) or
``connector`` (the task calls ``context.transaction_context.commit_transaction()``).
A :class:`RetriableConnectError` from ``poll`` is retried after a pause.

**Sink** (:class:`SinkTaskRunner`): a member of the consumer group ``connect-<name>``
subscribed to ``topics`` (or to the topics matching ``topics.regex``, checked again
every few seconds), ``poll_arrow`` -> the sink batch (a typed topic's columns packed
into a struct ``value``) -> key/value converters -> transforms -> ``put_batch``. A
:class:`RetriableConnectError` from ``put_batch`` hands the same batch again after a
pause, the partitions paused meanwhile (the consumer stays in its group). Every
``offset.flush.interval.ms`` (5 s here; Kafka's worker default is 60 s), on a
rebalance and at stop: ``pre_commit`` (by default ``flush``) and a commit of what it
returns. ``context.offset(...)`` rewinds partitions (a sink that stores offsets with its
data). Assigned and revoked partitions reach ``open``/``close``.

**Errors** (``errors.tolerance``): converters and transforms run under the policy;
with ``all`` the failing rows are dropped (a sink writes them to the dead letter queue
topic, with Kafka's ``__connect.errors.*`` headers when enabled), with ``none`` the
task fails. Any other exception of a task fails it: its status becomes FAILED with the
trace, and it stays so until restarted.

The runners use raystream's clients and threads; nothing here imports Ray.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from raystream.connectors import storage
from raystream.connectors.api import (
    Delivery,
    SinkTask,
    SourceBatch,
    SourceRecord,
    SourceTask,
    Task,
    partition_runs,
)
from raystream.connectors.connector_config import (
    TRANSACTION_BOUNDARIES,
    exactly_once_required,
    transaction_boundary,
)
from raystream.errors import (
    ConnectError,
    InvalidConfigError,
    RaystreamError,
    RetriableConnectError,
    TopicAlreadyExistsError,
)
from raystream.records import HEADERS_TYPE
from raystream.retry import Backoff
from raystream.types import RecordMetadata, TopicPartition

logger = logging.getLogger(__name__)

RUNNING = "RUNNING"
PAUSED = "PAUSED"
FAILED = "FAILED"
UNASSIGNED = "UNASSIGNED"

POLL_TIMEOUT_MS = 200
OFFSET_FLUSH_INTERVAL_MS = 5_000
REGEX_REFRESH_S = 5.0
STOP_TIMEOUT_S = 30.0

#: reports ``(state, trace)`` of the unit to the status topic.
Reporter = Callable[[str, str | None], None]


@dataclass(frozen=True)
class TaskEnv:
    """What a task runner needs from its worker."""

    cluster: Any
    group_id: str
    connector: str
    task_id: int
    connector_config: Mapping[str, str]
    task_config: Mapping[str, str]
    task_class: type[Task]
    report: Reporter

    @property
    def offsets_topic(self) -> str:
        return storage.topic_names(self.group_id)[1]


class Pipeline:
    """A connector's converters, transforms and error policy (from its config), applied
    to whole batches under the tolerance rules (see the module docstring)."""

    def __init__(self, config: Mapping[str, str], connector: str, task_id: int) -> None:
        from raystream.connectors.converters import converter_for
        from raystream.connectors.tolerance import ErrorPolicy
        from raystream.connectors.transforms import transforms_from_config

        self.key_converter = converter_for(config, "key")
        self.value_converter = converter_for(config, "value")
        self.transforms = transforms_from_config(config)
        self.policy = ErrorPolicy.from_config(config)
        self.connector = connector
        self.task_id = task_id
        self.failures: list[Any] = []

    def _run(
        self, stage: str, fn: Callable[[pa.Table], pa.Table], batch: pa.Table, class_name: str
    ) -> pa.Table:
        from raystream.connectors.tolerance import apply_tolerant

        if batch.num_rows == 0:
            return batch
        out, failures = apply_tolerant(self.policy, stage, fn, batch, class_name=class_name)
        self.failures.extend(failures)
        return out

    def _convert(self, batch: pa.Table, which: str, converter: Any, to_connect: bool) -> pa.Table:
        if which not in batch.column_names:
            return batch
        fn = _column_fn(which, converter.to_connect if to_connect else converter.from_connect)
        stage = "KEY_CONVERTER" if which == "key" else "VALUE_CONVERTER"
        return self._run(stage, fn, batch, type(converter).class_name)

    def transform(self, batch: pa.Table) -> pa.Table:
        for t in self.transforms:
            batch = self._run("TRANSFORMATION", t.apply, batch, t.class_name)
        return batch

    def to_connect(self, batch: pa.Table) -> pa.Table:
        """Stored key/value -> connect data (a typed value is connect data already)."""
        batch = self._convert(batch, "key", self.key_converter, to_connect=True)
        if not pa.types.is_struct(batch.schema.field("value").type):
            batch = self._convert(batch, "value", self.value_converter, to_connect=True)
        return batch

    def from_connect(self, batch: pa.Table, typed: bool) -> pa.Table:
        """Connect data -> stored bytes; a typed topic's struct value stays a struct."""
        batch = self._convert(batch, "key", self.key_converter, to_connect=False)
        if not typed:
            batch = self._convert(batch, "value", self.value_converter, to_connect=False)
        return batch

    def take_failures(self) -> list[Any]:
        failures, self.failures = self.failures, []
        return failures


def _column_fn(
    name: str, convert: Callable[[pa.Array], pa.Array]
) -> Callable[[pa.Table], pa.Table]:
    def apply(batch: pa.Table) -> pa.Table:
        if name not in batch.column_names:
            return batch
        column = batch.column(name)
        # One chunk (a poll of one fetch) is handed over as it is: combining would copy.
        column = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
        converted = convert(column)
        return batch.set_column(batch.schema.get_field_index(name), name, converted)

    return apply


def sink_batch(table: pa.Table) -> pa.Table:
    """A ``poll_arrow`` table in the sink batch shape: a typed topic's own columns are
    packed into one struct ``value`` column (byte topics pass unchanged)."""
    fixed = {"topic", "partition", "offset", "timestamp", "timestamp_type", "key", "headers"}
    if "value" in table.column_names:
        return table.select([c for c in table.column_names if c != "timestamp_type"])
    own = [c for c in table.column_names if c not in fixed]
    struct = (
        pa.StructArray.from_arrays([table.column(c).combine_chunks() for c in own], names=own)
        if table.num_rows
        else pa.array([], pa.struct([table.schema.field(c) for c in own]))
    )
    base = {c: table.column(c) for c in ("topic", "partition", "offset", "timestamp", "key")}
    return pa.table({**base, "value": struct, "headers": table.column("headers")})


class TaskRunner:
    """A task on a thread of its own: start, loop, stop; its state for the status topic."""

    def __init__(self, env: TaskEnv) -> None:
        self.env = env
        self.state = UNASSIGNED
        self.trace: str | None = None
        self._stop = threading.Event()
        self._paused = threading.Event()
        self._thread = threading.Thread(
            target=self._main, name=f"connect-{env.connector}-{env.task_id}", daemon=True
        )

    def start(self, paused: bool = False) -> None:
        if paused:
            self._paused.set()
        self._thread.start()

    def pause(self) -> None:
        if not self._paused.is_set():
            self._paused.set()
            if self.state == RUNNING:
                self._set(PAUSED)

    def resume(self) -> None:
        if self._paused.is_set():
            self._paused.clear()
            if self.state == PAUSED:
                self._set(RUNNING)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _set(self, state: str, trace: str | None = None) -> None:
        self.state, self.trace = state, trace
        try:
            self.env.report(state, trace)
        except RaystreamError as error:  # the status topic is unreachable now: log it
            logger.warning(
                "connect %s-%d: status %s not written: %s",
                self.env.connector,
                self.env.task_id,
                state,
                error,
            )

    def _main(self) -> None:
        task = self.env.task_class()
        try:
            self.setup(task)
            task.start(dict(self.env.task_config))
            self._set(PAUSED if self._paused.is_set() else RUNNING)
            while not self._stop.is_set():
                self.step(task)
            self.finish(task, clean=True)
        except Exception as error:
            trace = "".join(traceback.format_exception(error))
            logger.error(
                "connect task %s-%d failed: %s", self.env.connector, self.env.task_id, trace
            )
            self._set(FAILED, trace)
            try:
                self.finish(task, clean=False)
            except Exception as failure:
                logger.warning(
                    "connect task %s-%d: stop failed: %s",
                    self.env.connector,
                    self.env.task_id,
                    failure,
                )
        finally:
            try:
                task.stop()
            except Exception as error:
                logger.warning(
                    "connect task %s-%d: stop raised %s",
                    self.env.connector,
                    self.env.task_id,
                    error,
                )
            self.close()

    def setup(self, task: Task) -> None:
        """Build clients and the task's context (before ``task.start``)."""

    def step(self, task: Task) -> None:
        """One turn of the loop."""

    def finish(self, task: Task, clean: bool) -> None:
        """Commit what can be committed (``clean``) before the task stops."""

    def close(self) -> None:
        """Close the clients."""


# ------------------------------------------------------------------------- source


class _OffsetReader:
    def __init__(self, offsets: dict[str, dict]) -> None:
        self._offsets = offsets

    def offset(self, source_partition: Mapping[str, Any]) -> dict[str, Any] | None:
        return self._offsets.get(storage.partition_id(source_partition))

    def offsets(self, source_partitions: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
        ids = [storage.partition_id(p) for p in source_partitions]
        return {pid: self._offsets[pid] for pid in ids if pid in self._offsets}


class _TransactionContext:
    def __init__(self) -> None:
        self.commit_requested = False
        self.abort_requested = False

    def commit_transaction(self) -> None:
        self.commit_requested = True

    def abort_transaction(self) -> None:
        self.abort_requested = True


@dataclass
class _SourceContext:
    offset_storage_reader: _OffsetReader
    transaction_context: _TransactionContext | None


def source_table(result: Sequence[SourceRecord] | SourceBatch) -> tuple[pa.Table, dict[str, dict]]:
    """``(rows, {partition_id: latest offset})`` of what a source task's poll returned;
    rows carry a ``topic`` column always."""
    if isinstance(result, SourceBatch):
        table = result.table
        if "topic" not in table.column_names:
            table = table.append_column(
                "topic", pa.array([result.topic] * table.num_rows, pa.string())
            )
        return table, {storage.partition_id(result.source_partition): dict(result.source_offset)}
    from raystream.connectors.converters import source_records_table

    offsets: dict[str, dict] = {}
    for record in result:
        offsets[storage.partition_id(record.source_partition)] = dict(record.source_offset)
    return source_records_table(result), offsets


def _delivery(polled: int, sends: Sequence[tuple[int, Sequence[RecordMetadata]]]) -> Delivery:
    """Where a poll's ``polled`` rows landed, from its sends (``(rows, metadata)`` each):
    the first row's offset when they all went out together in one send (the same
    partition, in order: the producer vouches for consecutive offsets, as the mirror's
    writer does), else unknown."""
    sent = [(count, metadata) for count, metadata in sends if count]
    if len(sent) != 1 or sent[0][0] != polled or not sent[0][1]:
        return Delivery(polled)
    first = sent[0][1][0].offset
    return Delivery(polled, first if first >= 0 else None)


def _to_topic_table(rows: pa.Table, typed: bool) -> pa.Table:
    """Rows in the layout ``send_batch`` takes for a byte or typed topic."""
    columns: dict[str, Any] = {}
    if typed:
        value = rows.column("value").combine_chunks()
        if not pa.types.is_struct(value.type):
            raise ConnectError(
                f"a typed topic takes struct values (use value.converter=arrow), got {value.type}"
            )
        for i, field in enumerate(value.type):
            columns[field.name] = value.field(i)
    else:
        columns["value"] = rows.column("value")
    if "key" in rows.column_names:
        columns["key"] = rows.column("key")
    if "timestamp" in rows.column_names:
        columns["timestamp"] = rows.column("timestamp").cast(pa.int64())
    if "headers" in rows.column_names:
        columns["headers"] = rows.column("headers").cast(HEADERS_TYPE)
    return pa.table(columns)


class SourceTaskRunner(TaskRunner):
    """A source task's loop (see the module docstring)."""

    def setup(self, task: Task) -> None:
        env = self.env
        config = env.connector_config
        self.exactly_once = exactly_once_required(config)
        self.boundary = transaction_boundary(config)
        if self.boundary not in TRANSACTION_BOUNDARIES:
            raise InvalidConfigError(
                f"transaction.boundary={self.boundary!r}: expected poll, interval or connector"
            )
        self.interval_s = int(config.get("transaction.boundary.interval.ms", "100")) / 1000
        self.pipeline = Pipeline(config, env.connector, env.task_id)
        store = storage.ConnectStore(env.cluster, env.group_id)
        isolation = "read_committed" if self.exactly_once else "read_uncommitted"
        committed = store.offsets(env.connector, isolation)
        self.txn_context = _TransactionContext() if self.exactly_once else None
        if self.exactly_once:
            self.producer = env.cluster.producer(
                transactional_id=f"{env.group_id}-{env.connector}-{env.task_id}", linger_ms=5
            )
            self.producer.init_transactions()  # fences an older incarnation of the task
        else:
            self.producer = env.cluster.producer(acks="all", linger_ms=5)
        self.in_txn = False
        self.txn_started = 0.0
        self.pending_offsets: dict[str, dict] = {}
        #: Batches written since the last offsets commit, and where they landed.
        self.delivered: list[tuple[SourceBatch, Delivery]] = []
        self.typed: dict[str, bool] = {}
        self.backoff = Backoff()
        self.task = task
        task.context = _SourceContext(_OffsetReader(committed), self.txn_context)

    def _typed(self, topic: str) -> bool:
        if topic not in self.typed:
            self.typed[topic] = self.env.cluster.topic_metadata(topic).value_schema is not None
        return self.typed[topic]

    def step(self, task: Task) -> None:
        assert isinstance(task, SourceTask)
        if self._paused.is_set():
            self._maybe_commit(force=True)
            self._stop.wait(0.1)
            return
        try:
            result = task.poll()
        except RetriableConnectError as error:
            logger.info(
                "connect %s-%d poll: %s (retrying)", self.env.connector, self.env.task_id, error
            )
            self._stop.wait(self.backoff.next_s())
            return
        self.backoff.reset()
        if result is None or (not isinstance(result, SourceBatch) and not result):
            self._maybe_commit(force=False)
            return
        rows, offsets = source_table(result)
        delivery = self._write(rows)
        if isinstance(result, SourceBatch):
            self.delivered.append((result, delivery))
        self.pending_offsets.update(offsets)
        if not self.exactly_once:
            self._commit_offsets()
            self._commit_batches()
            task.commit()
        else:
            self._maybe_commit(force=False, task=task)

    def _commit_batches(self) -> None:
        """Tell the task where the batches written since the last commit landed, in
        the order it polled them (what it raises is logged, as Kafka Connect logs a
        failing ``commitRecord``)."""
        delivered, self.delivered = self.delivered, []
        for batch, delivery in delivered:
            try:
                self.task.commit_batch(batch, delivery)
            except Exception as error:
                logger.warning(
                    "connect %s-%d: commit_batch failed: %s",
                    self.env.connector,
                    self.env.task_id,
                    error,
                )

    def _write(self, rows: pa.Table) -> Delivery:
        """Transform, convert and send a poll's rows to the topics (and partitions) they
        name; where they landed when all of them went to one partition in one send (the
        offset of the first row; the rest follow it, as the producer writes a partition's
        rows in order), else a :class:`Delivery` without offsets."""
        polled = rows.num_rows
        sends: list[tuple[int, list[RecordMetadata]]] = []
        rows = self.pipeline.transform(rows)
        failures = self.pipeline.take_failures()
        if failures:
            logger.warning(
                "connect %s-%d: %d records dropped by errors.tolerance=all",
                self.env.connector,
                self.env.task_id,
                len(failures),
            )
        if self.exactly_once and not self.in_txn:
            self.producer.begin_transaction()
            self.in_txn, self.txn_started = True, time.monotonic()
        if rows.num_rows == 0:
            return Delivery(polled)
        topics = rows.column("topic")
        for topic in pc.unique(topics).to_pylist():
            part = rows.filter(pc.equal(topics, topic)) if len(pc.unique(topics)) > 1 else rows
            typed = self._typed(topic)
            part = self.pipeline.from_connect(part, typed)
            self.pipeline.take_failures()
            partitions = part.column("partition") if "partition" in part.column_names else None
            if partitions is not None and partitions.null_count < part.num_rows:
                for p in pc.unique(partitions).to_pylist():
                    mask = pc.is_null(partitions) if p is None else pc.equal(partitions, p)
                    sends.append(self._send(topic, part.filter(mask), typed, p))
            else:
                sends.append(self._send(topic, part, typed, None))
        return _delivery(polled, sends)

    def _send(
        self, topic: str, rows: pa.Table, typed: bool, partition: int | None
    ) -> tuple[int, list[RecordMetadata]]:
        """Send ``rows``; how many, and the producer's metadata of each request."""
        if not rows.num_rows:
            return 0, []
        table = _to_topic_table(rows, typed)
        return rows.num_rows, self.producer.send_batch(topic, table, partition=partition)

    def _commit_offsets(self) -> None:
        """Write the pending offsets (non-transactional: after the records' acks)."""
        if self.pending_offsets:
            table = storage.offsets_table(self.env.connector, self.pending_offsets)
            self.producer.send_batch(self.env.offsets_topic, table, partition=0)
            self.pending_offsets = {}

    def _maybe_commit(self, force: bool, task: SourceTask | None = None) -> None:
        if not self.exactly_once:
            return
        if not self.in_txn:
            return
        ctx = self.txn_context
        assert ctx is not None
        if ctx.abort_requested:
            ctx.abort_requested = ctx.commit_requested = False
            self.producer.abort_transaction()
            self.in_txn, self.pending_offsets, self.delivered = False, {}, []
            return
        due = force or (
            self.boundary == "poll"
            or (
                self.boundary == "interval"
                and time.monotonic() - self.txn_started >= self.interval_s
            )
            or (self.boundary == "connector" and ctx.commit_requested)
        )
        if not due:
            return
        ctx.commit_requested = False
        self._commit_offsets()  # in the transaction: offsets commit with the records
        self.producer.commit_transaction()
        self.in_txn = False
        self._commit_batches()
        if task is not None:
            task.commit()

    def finish(self, task: Task, clean: bool) -> None:
        if not clean:
            self.delivered = []
            if self.exactly_once and self.in_txn:
                self.producer.abort_transaction()
                self.in_txn = False
            return
        if self.exactly_once:
            self._maybe_commit(force=True, task=task if isinstance(task, SourceTask) else None)
        else:
            self._commit_offsets()
            self.producer.flush()
            self._commit_batches()

    def close(self) -> None:
        producer = getattr(self, "producer", None)
        if producer is not None:
            producer.close()


# --------------------------------------------------------------------------- sink


class _SinkContext:
    def __init__(self, runner: SinkTaskRunner) -> None:
        self._runner = runner
        self.rewinds: dict[TopicPartition, int] = {}
        self.commit_requested = False

    def offset(self, offsets: Mapping[TopicPartition, int]) -> None:
        self.rewinds.update(offsets)

    def assignment(self) -> set[TopicPartition]:
        return set(self._runner.consumer.assignment())

    def pause(self, *partitions: TopicPartition) -> None:
        self._runner.consumer.pause(*partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        self._runner.consumer.resume(*partitions)

    def request_commit(self) -> None:
        self.commit_requested = True


class _Rebalance:
    """The consumer's rebalance listener: ``open``/``close`` the task's partitions."""

    def __init__(self, runner: SinkTaskRunner, task: SinkTask) -> None:
        self.runner, self.task = runner, task

    def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
        self.task.open(sorted(partitions))
        self.runner.apply_rewinds()

    def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
        self.runner.commit(self.task, partitions)
        self.task.close(sorted(partitions))

    def on_partitions_lost(self, partitions: set[TopicPartition]) -> None:
        self.task.close(sorted(partitions))


class SinkTaskRunner(TaskRunner):
    """A sink task's loop (see the module docstring)."""

    def setup(self, task: Task) -> None:
        env = self.env
        config = env.connector_config
        topics, regex = config.get("topics", "").strip(), config.get("topics.regex", "").strip()
        if bool(topics) == bool(regex):
            raise InvalidConfigError(
                f"connector {env.connector!r}: a sink needs exactly one of topics and topics.regex"
            )
        self.topics = [t.strip() for t in topics.split(",") if t.strip()]
        self.regex = re.compile(regex) if regex else None
        self.pipeline = Pipeline(config, env.connector, env.task_id)
        self.flush_interval_s = (
            int(config.get("offset.flush.interval.ms", OFFSET_FLUSH_INTERVAL_MS)) / 1000
        )
        self.dlq_topic = self.pipeline.policy.deadletterqueue_topic_name or None
        self.consumer = env.cluster.consumer(
            group_id=config.get("consumer.override.group.id", f"connect-{env.connector}"),
            enable_auto_commit=False,
            auto_offset_reset=config.get("consumer.override.auto.offset.reset", "earliest"),
            isolation_level=config.get("consumer.override.isolation.level", "read_uncommitted"),
            max_poll_records=int(config.get("consumer.override.max.poll.records", "2000")),
            fetch_max_wait_ms=50,
            session_timeout_ms=10_000,
            heartbeat_interval_ms=1_000,
        )
        self.producer: Any = None
        self.context = _SinkContext(self)
        task.context = self.context
        self.listener = _Rebalance(self, task)  # type: ignore[arg-type]
        self.subscribed: list[str] = []
        self.next_regex_check = 0.0
        self.next_commit = time.monotonic() + self.flush_interval_s
        self.pending: dict[TopicPartition, int] = {}
        self._consumer_paused = False
        self._subscribe()

    def _subscribe(self) -> None:
        if self.regex is None:
            wanted = self.topics
        else:
            now = time.monotonic()
            if now < self.next_regex_check:
                return
            self.next_regex_check = now + REGEX_REFRESH_S
            wanted = sorted(
                t for t in self.env.cluster.admin().list_topics() if self.regex.fullmatch(t)
            )
        if wanted != self.subscribed and wanted:
            self.consumer.subscribe(wanted, listener=self.listener)
            self.subscribed = wanted

    def apply_rewinds(self) -> None:
        rewinds, self.context.rewinds = self.context.rewinds, {}
        assigned = self.consumer.assignment()
        for tp, offset in rewinds.items():
            if tp in assigned:
                self.consumer.seek(tp, offset)
            else:
                self.context.rewinds[tp] = offset

    def step(self, task: Task) -> None:
        assert isinstance(task, SinkTask)
        self._subscribe()
        if not self.subscribed:
            self._stop.wait(POLL_TIMEOUT_MS / 1000)
            return
        paused = self._paused.is_set()
        if paused != self._consumer_paused:
            assigned = self.consumer.assignment()
            (self.consumer.pause if paused else self.consumer.resume)(*assigned)
            self._consumer_paused = paused
        table = self.consumer.poll_arrow(timeout_ms=POLL_TIMEOUT_MS)
        if table.num_rows:
            self._deliver(task, table)
        if self.context.rewinds:
            self.apply_rewinds()
        if self.context.commit_requested or time.monotonic() >= self.next_commit:
            self.context.commit_requested = False
            self.commit(task)

    def _deliver(self, task: SinkTask, table: pa.Table) -> None:
        batch = sink_batch(table)
        ends = _next_offsets(batch)
        batch = self.pipeline.to_connect(batch)
        batch = self.pipeline.transform(batch)
        failures = self.pipeline.take_failures()
        if failures:
            self._dead_letter(failures)
        if batch.num_rows:
            self._put(task, batch)
        self.pending.update(ends)

    def _put(self, task: SinkTask, batch: pa.Table) -> None:
        paused_here = False
        backoff = Backoff()
        try:
            while True:
                try:
                    task.put_batch(batch)
                    return
                except RetriableConnectError as error:
                    logger.info(
                        "connect %s-%d put: %s (retrying)",
                        self.env.connector,
                        self.env.task_id,
                        error,
                    )
                    if self._stop.is_set():
                        raise
                    if not paused_here:
                        self.consumer.pause(*self.consumer.assignment())
                        paused_here = True
                    # The pause is a poll of the paused consumer: it stays a member.
                    self.consumer.poll_arrow(timeout_ms=backoff.next_s() * 1000)
        finally:
            if paused_here and not self._paused.is_set():
                self.consumer.resume(*self.consumer.assignment())

    def _dead_letter(self, failures: list[Any]) -> None:
        if self.dlq_topic is None:
            return
        from raystream.connectors.tolerance import dead_letter_batch

        headers = self.pipeline.policy.deadletterqueue_context_headers_enable
        table = dead_letter_batch(
            failures, self.env.connector, self.env.task_id, context_headers=headers
        )
        if self.producer is None:
            with contextlib.suppress(TopicAlreadyExistsError):
                self.env.cluster.admin().create_topic(self.dlq_topic, partitions=1)
            self.producer = self.env.cluster.producer(acks="all", linger_ms=5)
        self.producer.send_batch(self.dlq_topic, table)

    def commit(self, task: SinkTask, partitions: set[TopicPartition] | None = None) -> None:
        """``pre_commit`` and commit the offsets it returns (of ``partitions`` if given)."""
        self.next_commit = time.monotonic() + self.flush_interval_s
        pending = {
            tp: o for tp, o in self.pending.items() if partitions is None or tp in partitions
        }
        if not pending:
            return
        committable = task.pre_commit(dict(pending))
        if committable:
            self.consumer.commit(dict(committable))
        for tp in pending:
            self.pending.pop(tp, None)

    def finish(self, task: Task, clean: bool) -> None:
        if clean and isinstance(task, SinkTask):
            self.commit(task)
            task.close(sorted(self.consumer.assignment()))

    def close(self) -> None:
        consumer = getattr(self, "consumer", None)
        if consumer is not None:
            consumer.close(autocommit=False)
        if self.producer is not None:
            self.producer.close()


def _next_offsets(batch: pa.Table) -> dict[TopicPartition, int]:
    """``{tp: last offset + 1}`` of a sink batch (offsets ascending within a partition)."""
    offsets = batch.column("offset")
    ends: dict[TopicPartition, int] = {}
    for tp, _, stop in partition_runs(batch):
        ends[tp] = max(ends.get(tp, 0), offsets[stop - 1].as_py() + 1)
    return ends


def runner_for(env: TaskEnv) -> TaskRunner:
    """The runner of a task of ``env.task_class``'s kind."""
    if issubclass(env.task_class, SourceTask):
        return SourceTaskRunner(env)
    if issubclass(env.task_class, SinkTask):
        return SinkTaskRunner(env)
    raise ConnectError(f"{env.task_class!r} is neither a SourceTask nor a SinkTask")
