"""A consumer-group member as a Ray actor: polls, applies a function, commits.

:class:`~raystream.client.consumer_group.ConsumerGroup` starts these. Each runs one
:class:`~raystream.client.consumer.Consumer` of the group on a thread of its own and
loops: poll a batch, call the user's function on it, commit the batch's offsets once
the function returned (at-least-once: a crash between the two re-delivers the batch to
whoever owns the partition next, never skips it). When the function raises, the batch
is not committed; the member seeks back and tries again after a pause, so a record is
never passed over because of a transient error. The pauses grow while the failures go
on (:class:`~raystream.retry.Backoff`: Kafka's 100 ms doubling to 1 s, jittered) and
start over after a batch goes through.

Commits do not hold the loop up: a commit is sent without waiting, at most one at a
time (a later one covers everything an earlier one would have, and one in flight at a
time keeps them in order), and the next batch is processed meanwhile. On stop the
member waits for its last commit. A crash loses at most the commits in flight: their
batches are read again by the partition's next owner (at-least-once still).

Ray restarts a crashed member (``max_restarts=-1``): it rejoins the group as a new
member, while the group has already moved the dead member's partitions: the
coordinator learns of the crash from Ray (see
:meth:`~raystream.groups.group.Group.silent_actors`), or else when its session times
out.

Exactly-once mode (an ``output_topic`` and a ``transactional_id``): the function
returns the batch's output (a ``pyarrow.Table`` for ``Producer.send_batch``, or None),
and each batch is one transaction of the member's transactional producer: the output,
then the consumer's positions as offsets (``send_offsets_to_transaction`` with the
consumer's group metadata), then commit. The consumer reads read_committed. When
anything fails the transaction is aborted and the member seeks back, so the batch is
processed again and its output is committed once. The transactional id is the
member's, stable across Ray restarts: a restarted member fences its zombie, whose
transaction is aborted, and a fenced member stops.
"""

from __future__ import annotations

import logging
import os
import threading
import traceback
from collections.abc import Callable
from typing import Any

import ray

from raystream.errors import ProducerFencedError
from raystream.retry import Backoff
from raystream.types import TopicPartition

logger = logging.getLogger(__name__)

ARROW = "arrow"
RECORDS = "records"
POLL_TIMEOUT_MS = 200


class GroupMember:
    """One member of a consumer group, applying ``fn`` to what it polls.

    Args:
        cluster: the raystream cluster (picklable).
        topics: topics the group subscribes to.
        group_id: the consumer group.
        fn: called with a ``pyarrow.Table`` (``mode="arrow"``, the columns of
            ``poll_arrow()``) or a list of ConsumerRecord (``mode="records"``).
        mode: "arrow" or "records".
        consumer_config: further Consumer options (auto-commit is always off: the
            member commits after ``fn`` succeeds).
        output_topic: exactly-once mode: where ``fn``'s output goes, in one transaction
            with the batch's offsets.
        transactional_id: the member's transactional id (exactly-once mode).
        producer_config: further Producer options (exactly-once mode).
    """

    def __init__(
        self,
        cluster: Any,
        topics: list[str],
        group_id: str,
        fn: Callable[[Any], Any],
        mode: str,
        consumer_config: dict[str, Any],
        output_topic: str | None = None,
        transactional_id: str | None = None,
        producer_config: dict[str, Any] | None = None,
    ) -> None:
        self._fn = fn
        self._mode = mode
        self._output_topic = output_topic
        config = {"auto_offset_reset": "earliest", **consumer_config}
        config["enable_auto_commit"] = False
        self._cluster = cluster
        self._transactional_id = transactional_id
        self._producer_config = dict(producer_config or {})
        self._producer: Any = None
        if output_topic is not None:
            config["isolation_level"] = "read_committed"
            self._producer = self._new_producer()  # fences this member's last incarnation
        self._consumer = cluster.consumer(*topics, group_id=group_id, **config)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._processed = 0
        self._batches = 0
        self._failures = 0
        self._last_error: str | None = None
        self._assignment: list[TopicPartition] = []
        self._uncommitted = False  # processed batches whose offsets were not committed
        self._committing = False  # a commit is in flight
        self._backoff = Backoff()  # pauses between failed steps; reset by a good one
        self._thread = threading.Thread(target=self._run, name="raystream-member", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        consumer = self._consumer
        while not self._stop.is_set():
            try:
                processed = self._step(consumer)
            except ProducerFencedError:  # a newer incarnation took over: stop for good
                self._failed(traceback.format_exc(limit=3))
                break
            except Exception:  # the loop survives: the error is kept for status()
                self._failed(traceback.format_exc(limit=3))
                processed = False
            if processed:
                self._backoff.reset()
            elif processed is not None:
                self._stop.wait(self._backoff.next_s())
        if self._uncommitted or self._committing:
            try:
                consumer.commit()  # after the one in flight: positions only grow
            except Exception as error:  # their next owner reads them again
                logger.info("member's last commit failed: %s", error)
        consumer.close(autocommit=False)
        if self._producer is not None:
            self._producer.close()

    def _step(self, consumer: Any) -> bool | None:
        """Poll, process and commit one batch: True once processed, False when ``fn``
        failed on it (it is read again after the loop's pause), None for an empty poll."""
        if self._mode == ARROW:
            table = consumer.poll_arrow(timeout_ms=POLL_TIMEOUT_MS)
            batch, rows = table, table.num_rows
            starts = _starts_of_table(table)
        else:
            polled = consumer.poll(timeout_ms=POLL_TIMEOUT_MS)
            batch = [record for records in polled.values() for record in records]
            rows = len(batch)
            starts = {tp: records[0].offset for tp, records in polled.items() if records}
        with self._lock:
            self._assignment = sorted(consumer.assignment())
        if not rows:
            self._commit(consumer)
            return None
        if self._producer is not None:
            self._transact(consumer, batch, starts)
            with self._lock:
                self._processed += rows
                self._batches += 1
            return True
        try:
            self._fn(batch)
        except Exception:
            self._failed(traceback.format_exc(limit=3))
            for tp, offset in starts.items():  # not processed: read them again
                if tp in consumer.assignment():
                    consumer.seek(tp, offset)
            return False
        self._uncommitted = True
        self._commit(consumer)
        with self._lock:
            self._processed += rows
            self._batches += 1
        return True

    def _commit(self, consumer: Any) -> None:
        """Commit the positions of processed batches, unless a commit is in flight (its
        answer, taken in by a later poll, lets the next one go)."""
        if not self._uncommitted or self._committing:
            return
        self._uncommitted, self._committing = False, True
        try:
            consumer.commit_async(callback=self._committed)
        except Exception:  # not sent: the next commit tries again
            self._uncommitted, self._committing = True, False
            raise

    def _committed(self, offsets: dict[TopicPartition, Any], error: Exception | None) -> None:
        self._committing = False
        if error is None:
            return
        # Try again with the next commit, which covers the positions of the partitions
        # the member owns then. After a refused commit (CommitFailedError: a rebalance
        # began) that matters most: a partition the member keeps in the new generation
        # would otherwise stay uncommitted until more records arrive on it.
        logger.info("member commit failed, retried with the next: %s", error)
        self._uncommitted = True

    def _transact(self, consumer: Any, batch: Any, starts: dict[TopicPartition, int]) -> None:
        """One batch as one transaction: output, offsets, commit; abort and seek back
        when any step fails (a fenced producer's error propagates: the member stops)."""
        producer = self._producer
        producer.begin_transaction()
        try:
            output = self._fn(batch)
            if output is not None and output.num_rows:
                producer.send_batch(self._output_topic, output)
            positions = {tp: consumer.position(tp) for tp in starts}
            producer.send_offsets_to_transaction(positions, consumer.group_metadata())
            producer.commit_transaction()
        except ProducerFencedError:
            raise
        except Exception:
            for tp, offset in starts.items():  # not committed: read them again
                if tp in consumer.assignment():
                    consumer.seek(tp, offset)
            try:
                producer.abort_transaction()
            except ProducerFencedError:
                raise
            except Exception:  # unusable now: a new producer aborts and fences it
                logger.exception("abort failed; starting a new transactional producer")
                producer.close(timeout=5)
                self._producer = self._new_producer()
            raise

    def _new_producer(self) -> Any:
        producer = self._cluster.producer(
            transactional_id=self._transactional_id, **self._producer_config
        )
        producer.init_transactions()  # fences an older producer with this id
        return producer

    def _failed(self, error: str) -> None:
        logger.warning("consumer-group member failed: %s", error)
        with self._lock:
            self._failures += 1
            self._last_error = error

    def status(self) -> dict[str, Any]:
        """Records and batches processed, failures, the last error, the assignment, and
        the member's process id."""
        with self._lock:
            return {
                "pid": os.getpid(),
                "processed": self._processed,
                "batches": self._batches,
                "failures": self._failures,
                "last_error": self._last_error,
                "assignment": list(self._assignment),
                "alive": self._thread.is_alive(),
            }

    def stop(self, timeout_s: float = 30.0) -> dict[str, Any]:
        """Finish the batch in hand, commit, leave the group; returns the final status."""
        self._stop.set()
        self._thread.join(timeout_s)
        return self.status()


def _starts_of_table(table: Any) -> dict[TopicPartition, int]:
    """The first offset of each partition in a ``poll_arrow()`` table."""
    if not table.num_rows:
        return {}
    firsts = table.group_by(["topic", "partition"]).aggregate([("offset", "min")])
    return {
        TopicPartition(topic, partition): offset
        for topic, partition, offset in zip(
            firsts.column("topic").to_pylist(),
            firsts.column("partition").to_pylist(),
            firsts.column("offset_min").to_pylist(),
            strict=True,
        )
    }


GroupMemberActor = ray.remote(max_concurrency=4)(GroupMember)
"""The member as a Ray actor class (threaded so status() answers while it polls)."""
