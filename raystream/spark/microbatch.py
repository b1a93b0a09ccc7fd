"""``rs.spark.stream``: micro-batches of a topic handed to a function, at least once or
exactly once.

Shaped like Structured Streaming's ``foreachBatch``: every trigger the query reads the
records that arrived since the last batch (at most ``max_offsets_per_trigger`` of them,
shared out like Spark's rate limit) as a DataFrame with ``read_topic``'s columns, calls
``foreach_batch(df, batch_id)``, and only when it returns commits the batch's end
offsets for ``group_id`` through the group coordinator. A query that stops or fails,
or a process that dies, resumes from the last committed batch when started again with
the same ``group_id``: every record reaches ``foreach_batch`` at least once, and a batch
that failed is read again (with the next batch id of the new run).

The committed offsets are ordinary consumer-group offsets (``admin.describe_group``
shows them, ``raystream groups reset-offsets`` moves them). The query commits as a
consumer outside the group's membership, which the coordinator allows only while the
group has no members: give the query a group of its own.

Exactly once (``exactly_once=True``), for a batch whose output goes to raystream
topics through ``rs.spark.write_topic``: each batch is one transaction of the query's
transactional producer. The query begins it, runs ``foreach_batch`` with every
``write_topic`` call inside writing through it, adds the batch's end offsets for
``group_id`` (``send_offsets_to_transaction``, checked like the commits above), and
commits; on any error it aborts and the query fails. Output and offsets become
visible together or not at all, so a read_committed reader of the output sees each
input record's output once however often the query fails, stops and restarts.
Fencing: the transactional id is derived from the group and the topic
(:attr:`StreamingQuery.transactional_id`), the same for every run, so a restarted
query's ``init_transactions`` fences the producer of an older run that is still alive
(a zombie: its next transaction fails with ProducerFencedError and stops it) and
aborts the transaction it left open, before the new run reads the group's offsets
(read_committed, so never offsets a transaction may still replace).

Why one transactional producer on the driver, and not ``write_topic``'s parallel
writers with a transaction each: a transaction belongs to one producer id and epoch,
so the writers' transactions would commit one by one, and a failure between two
commits would leave part of a batch visible with its offsets unmoved (duplicated by
the retry). The output still leaves the executors as Arrow through RayDP and reaches
the producer block by block, never collected whole on the driver; what it costs is
that the driver sends every output byte. Side effects of ``foreach_batch`` other than
``write_topic`` stay at least once. The input is read read_committed: batches end at
the last stable offset and leave out the records of aborted transactions, so input
written by transactional producers counts once too. (An at-least-once query reads
read_uncommitted, as Spark's Kafka source does by default.)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from raystream.client.consumer import Consumer
from raystream.client.producer import Producer
from raystream.data import offsets
from raystream.errors import InvalidRequestError, RaystreamError, RaystreamTimeoutError
from raystream.spark.context import attachment
from raystream.spark.sink import writing_through
from raystream.spark.source import read_topic, release
from raystream.types import TopicPartition

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchProgress:
    """What one micro-batch did (Structured Streaming's ``lastProgress``, in short).

    ``num_offsets`` is how many offsets the batch covered: its records, unless
    compaction removed some.
    """

    batch_id: int
    start_offsets: dict[int, int]
    end_offsets: dict[int, int]
    num_offsets: int
    duration_ms: float


def stream(
    spark: SparkSession,
    topic: str,
    group_id: str,
    foreach_batch: Callable[[DataFrame, int], None],
    trigger_interval_ms: int = 1000,
    max_offsets_per_trigger: int | None = None,
    starting_offsets: Any = "latest",
    exactly_once: bool = False,
    producer_config: dict[str, Any] | None = None,
) -> StreamingQuery:
    """Start a micro-batch query over ``topic``; it runs until stopped or it fails.

    Args:
        spark: a session from :func:`raystream.spark.session`.
        topic: the topic to read.
        group_id: the consumer group whose committed offsets the query resumes from
            and commits to after every successful batch.
        foreach_batch: called with each batch's DataFrame and its id (0, 1, ... in this
            run); an exception stops the query without committing that batch.
        trigger_interval_ms: a batch starts at most this often (Spark's processing-time
            trigger); an idle topic is checked this often.
        max_offsets_per_trigger: records per batch at most (None: all available).
        starting_offsets: where a group with no committed offsets starts: "latest" (as
            Spark's streaming default), "earliest" or a dict ``{partition: offset}``.
        exactly_once: one transaction per batch, holding what ``foreach_batch`` writes
            with ``rs.spark.write_topic`` and the batch's offsets (module docstring).
        producer_config: further :class:`~raystream.Producer` options of the
            exactly-once query's transactional producer (e.g.
            ``transaction_timeout_ms``, which a batch must finish within).

    Returns:
        The running query; with ``exactly_once`` an older run of it is fenced by then.

    Raises:
        InvalidRequestError: an argument is invalid (the message names it).
        InvalidConfigError: an option of ``producer_config`` is invalid.
        UnknownTopicOrPartitionError: no such topic.
    """
    if not isinstance(group_id, str) or not group_id:
        raise InvalidRequestError(f"group_id={group_id!r} must be a non-empty string")
    if not callable(foreach_batch):
        raise InvalidRequestError(f"foreach_batch={foreach_batch!r} must be callable")
    for name, value, low in (
        ("trigger_interval_ms", trigger_interval_ms, 0),
        ("max_offsets_per_trigger", max_offsets_per_trigger, 1),
    ):
        if value is None and name == "max_offsets_per_trigger":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise InvalidRequestError(f"{name}={value!r} must be an integer >= {low}")
    if not isinstance(exactly_once, bool):
        raise InvalidRequestError(f"exactly_once={exactly_once!r} must be True or False")
    if producer_config is not None:
        if not exactly_once:
            raise InvalidRequestError(
                "producer_config is for the exactly-once query's producer: "
                "pass exactly_once=True (write_topic takes producer options otherwise)"
            )
        if not isinstance(producer_config, dict) or "transactional_id" in producer_config:
            raise InvalidRequestError(
                f"producer_config={producer_config!r} must be a dict of Producer options "
                "without transactional_id (the query derives it from group_id and topic)"
            )
    cluster = attachment(spark).cluster
    cluster.topic_metadata(topic, refresh=True)  # an unknown topic fails here, not later
    producer = None
    if exactly_once:
        producer = cluster.producer(
            transactional_id=transactional_id(group_id, topic), **(producer_config or {})
        )
        producer.init_transactions()  # fences an older run, aborts what it left open
    query = StreamingQuery(
        spark,
        topic,
        group_id,
        foreach_batch,
        trigger_interval_ms,
        max_offsets_per_trigger,
        starting_offsets,
        producer,
    )
    query._thread.start()
    return query


class StreamingQuery:
    """A running micro-batch query (Structured Streaming's ``StreamingQuery``).

    The batches run on a thread of this process, one at a time, in order. An
    exactly-once query is given its initialized transactional ``producer`` (its
    ``transactional_id`` is None at least once) and closes it when it stops.
    """

    def __init__(
        self,
        spark: SparkSession,
        topic: str,
        group_id: str,
        foreach_batch: Callable[[DataFrame, int], None],
        trigger_interval_ms: int,
        max_offsets_per_trigger: int | None,
        starting_offsets: Any,
        producer: Producer | None,
    ) -> None:
        self._spark = spark
        self._cluster = attachment(spark).cluster
        self.topic = topic
        self.group_id = group_id
        self._foreach_batch = foreach_batch
        self._interval_s = trigger_interval_ms / 1000
        self._max_offsets = max_offsets_per_trigger
        self._starting_offsets = starting_offsets
        self._producer = producer
        self.transactional_id = None if producer is None else producer.config.transactional_id
        self._isolation = offsets.READ_UNCOMMITTED if producer is None else offsets.READ_COMMITTED
        self._stopping = threading.Event()
        self._progress = threading.Condition()
        self._committed: dict[int, int] = {}
        self._error: BaseException | None = None
        self.last_progress: BatchProgress | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"raystream-stream-{topic}-{group_id}", daemon=True
        )

    @property
    def is_active(self) -> bool:
        """Whether the query is still running."""
        return self._thread.is_alive()

    def exception(self) -> BaseException | None:
        """The error that stopped the query, if one did."""
        return self._error

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop after the batch in progress (committed if it succeeds); wait for it."""
        self._stopping.set()
        self._thread.join(timeout_s)

    def await_termination(self, timeout_s: float | None = None) -> bool:
        """Wait until the query stops; re-raise the error that stopped it.

        Returns:
            True when the query has stopped, False when ``timeout_s`` passed first.
        """
        self._thread.join(timeout_s)
        if self._error is not None:
            raise self._error
        return not self._thread.is_alive()

    def process_all_available(self, timeout_s: float = 300) -> None:
        """Wait until every record in the topic now has been processed and committed.

        Raises:
            RaystreamTimeoutError: not done within ``timeout_s``.
            Exception: the error that stopped the query.
        """
        bounds = offsets.bounds_of(self._cluster, self.topic, self._isolation)
        target = {p: high for p, (_, high) in bounds.items()}
        deadline = time.monotonic() + timeout_s
        with self._progress:
            while not all(self._committed.get(p, -1) >= end for p, end in target.items()):
                if self._error is not None:
                    raise self._error
                if not self._thread.is_alive():
                    raise RaystreamTimeoutError("the query stopped before processing everything")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RaystreamTimeoutError(
                        f"process_all_available: offsets {target} not committed within "
                        f"{timeout_s} s (committed: {self._committed})"
                    )
                self._progress.wait(min(remaining, 1.0))

    # ------------------------------------------------------------------ the loop

    def _run(self) -> None:
        producer, consumer = self._producer, None
        try:
            consumer = self._cluster.consumer(
                group_id=self.group_id,
                enable_auto_commit=False,
                # read_committed: the committed offsets are asked for once no transaction
                # can replace them any more
                isolation_level="read_uncommitted" if producer is None else "read_committed",
            )
            starts = self._resume(consumer)
            batch_id = 0
            while not self._stopping.is_set():
                began = time.monotonic()
                if self._batch(consumer, producer, starts, batch_id, began):
                    batch_id += 1
                self._stopping.wait(max(self._interval_s - (time.monotonic() - began), 0))
        except BaseException as error:  # the query's outcome, for await_termination
            logger.exception("stream of %r for group %r failed", self.topic, self.group_id)
            self._error = error
        finally:
            if consumer is not None:
                consumer.close(autocommit=False)
            if producer is not None:
                producer.close()
            with self._progress:
                self._progress.notify_all()

    def _resume(self, consumer: Consumer) -> dict[int, int]:
        """Where the query starts: the group's committed offsets, else starting_offsets."""
        starts = offsets.start_offsets(
            self._cluster, self.topic, self._starting_offsets, self._isolation
        )
        tps = [TopicPartition(self.topic, p) for p in starts]
        consumer.assign(tps)
        for tp in tps:
            committed = consumer.committed(tp)
            if committed is not None:
                starts[tp.partition] = committed
        with self._progress:
            self._committed = dict(starts)
        return starts

    def _batch(
        self,
        consumer: Consumer,
        producer: Producer | None,
        starts: dict[int, int],
        batch_id: int,
        began: float,
    ) -> bool:
        """Run one batch if records arrived; False when there was nothing to do.

        With a (transactional) ``producer`` the batch is one transaction of it.
        """
        bounds = offsets.bounds_of(self._cluster, self.topic, self._isolation)
        for partition, (log_start, _) in bounds.items():
            starts.setdefault(partition, log_start)  # a partition added since
        available = {p: max(high, starts[p]) for p, (_, high) in bounds.items()}
        ends = offsets.limit_ends(starts, available, self._max_offsets)
        if ends == starts:
            return False
        # Every partition's offset, moved or not: a partition that got no records yet
        # must resume where this run started it, not at a later run's starting_offsets.
        commit = {TopicPartition(self.topic, p): end for p, end in ends.items()}
        frame = read_topic(self._spark, self.topic, dict(starts), ends, self._isolation)
        try:
            if producer is None:
                self._foreach_batch(frame, batch_id)
            else:
                self._transact(frame, batch_id, commit, consumer, producer)
        finally:
            release(frame)
        if producer is None:
            consumer.commit(commit)
        self.last_progress = BatchProgress(
            batch_id,
            dict(starts),
            dict(ends),
            sum(ends[p] - starts[p] for p in ends),
            (time.monotonic() - began) * 1000,
        )
        starts.update(ends)
        with self._progress:
            self._committed = dict(starts)
            self._progress.notify_all()
        return True

    def _transact(
        self,
        frame: DataFrame,
        batch_id: int,
        commit: dict[TopicPartition, int],
        consumer: Consumer,
        producer: Producer,
    ) -> None:
        """``foreach_batch`` and the batch's offsets as one transaction; aborted (and
        the error raised) when anything fails."""
        producer.begin_transaction()
        try:
            with writing_through(producer):
                self._foreach_batch(frame, batch_id)
            producer.send_offsets_to_transaction(commit, consumer.group_metadata())
            producer.commit_transaction()
        except BaseException:
            try:
                producer.abort_transaction()
            except RaystreamError as error:  # e.g. fenced: the next run's init aborts it
                logger.warning("batch %d of %r: abort failed: %s", batch_id, self.topic, error)
            raise


def transactional_id(group_id: str, topic: str) -> str:
    """The exactly-once query's transactional id: one per group and topic, whose offsets
    its transactions commit, so two runs of the same query fence each other.

    Example: ``transactional_id("etl", "orders")`` -> ``"raystream-stream:etl:orders"``
    (unambiguous: topic names have no ":").
    """
    return f"raystream-stream:{group_id}:{topic}"
