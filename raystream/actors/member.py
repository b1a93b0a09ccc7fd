"""A consumer-group member as a Ray actor: polls, applies a function, commits.

:class:`~raystream.client.consumer_group.ConsumerGroup` starts these. Each runs one
:class:`~raystream.client.consumer.Consumer` of the group on a thread of its own and
loops: poll a batch, call the user's function on it, commit the batch's offsets once
the function returned (at-least-once: a crash between the two re-delivers the batch to
whoever owns the partition next, never skips it). When the function raises, the batch
is not committed; the member seeks back and tries again after a pause, so a record is
never passed over because of a transient error.

Ray restarts a crashed member (``max_restarts=-1``): it rejoins the group as a new
member, while the group has already moved the dead member's partitions once its
session timed out.
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Callable
from typing import Any

import ray

from raystream.errors import CommitFailedError
from raystream.types import TopicPartition

logger = logging.getLogger(__name__)

ARROW = "arrow"
RECORDS = "records"
POLL_TIMEOUT_MS = 200
RETRY_BACKOFF_S = 1.0


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
    """

    def __init__(
        self,
        cluster: Any,
        topics: list[str],
        group_id: str,
        fn: Callable[[Any], Any],
        mode: str,
        consumer_config: dict[str, Any],
    ) -> None:
        self._fn = fn
        self._mode = mode
        config = {"auto_offset_reset": "earliest", **consumer_config}
        config["enable_auto_commit"] = False
        self._consumer = cluster.consumer(*topics, group_id=group_id, **config)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._processed = 0
        self._batches = 0
        self._failures = 0
        self._last_error: str | None = None
        self._assignment: list[TopicPartition] = []
        self._thread = threading.Thread(target=self._run, name="raystream-member", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        consumer = self._consumer
        while not self._stop.is_set():
            try:
                self._step(consumer)
            except Exception:  # the loop survives: the error is kept for status()
                self._failed(traceback.format_exc(limit=3))
                self._stop.wait(RETRY_BACKOFF_S)
        consumer.close(autocommit=False)

    def _step(self, consumer: Any) -> None:
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
            return
        try:
            self._fn(batch)
        except Exception:
            self._failed(traceback.format_exc(limit=3))
            for tp, offset in starts.items():  # not processed: read them again
                if tp in consumer.assignment():
                    consumer.seek(tp, offset)
            self._stop.wait(RETRY_BACKOFF_S)
            return
        try:
            consumer.commit()
        except CommitFailedError as error:  # the partitions moved; their owner re-reads
            logger.info("member commit refused after a rebalance: %s", error)
        with self._lock:
            self._processed += rows
            self._batches += 1

    def _failed(self, error: str) -> None:
        logger.warning("consumer-group member failed: %s", error)
        with self._lock:
            self._failures += 1
            self._last_error = error

    def status(self) -> dict[str, Any]:
        """Records and batches processed, failures, the last error, and the assignment."""
        with self._lock:
            return {
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
