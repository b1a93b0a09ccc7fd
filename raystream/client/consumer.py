"""The Consumer: kafka-python's ``KafkaConsumer`` API over raystream's leader actors.

Reading: a :class:`~raystream.client.fetcher.Fetcher` keeps one fetch in flight per
assigned, non-paused partition (prefetch) and buffers what arrives as Arrow tables;
``poll()`` and iteration turn only the records they return into
:class:`~raystream.types.ConsumerRecord` objects, and ``poll_arrow()`` returns the same
records as one Arrow table without building a Python object per record.

Offsets are the application's: a partition's position starts from
``auto_offset_reset`` ("earliest", "latest" or "none") the first time it is needed,
moves past every record returned, and ``seek*()`` moves it. A fetch answered with
OffsetOutOfRange resets the position by ``auto_offset_reset`` like Kafka (or raises
when it is "none"). Dead replica actors and retriable errors are retried after a
metadata refresh without surfacing. A deserializer that raises never moves a position
past its record (Kafka's rule): the records before it are returned, then
RecordDeserializationError names the record until the application seeks past it.

``metrics()`` reports Kafka's consumer metrics (records-consumed-rate, fetch-latency-avg,
records-lag-max, commit-latency-avg, ...), counted per fetch, poll and commit.

With a ``group_id``, ``subscribe()`` makes the consumer a member of that consumer
group (:mod:`raystream.client.membership`): the group coordinator shares the
subscribed topics' partitions among the members, each partition starts from the
group's committed offset, and the rebalance listener runs on this thread inside
``poll()``. Offsets are committed with ``commit()`` / ``commit_async()``, every
``auto_commit_interval_ms`` from ``poll()`` when ``enable_auto_commit``, before
partitions are revoked, and at ``close()``. ``assign()`` with a ``group_id`` reads the
given partitions from the group's committed offsets and commits outside the
membership (allowed while the group has no members), as in Kafka.

Without a ``group_id``, ``subscribe()`` assigns **every** partition of the subscribed
topics to this consumer (and picks up partitions added later, checking every
``metadata_max_age_ms``), and there is no group to commit for.

Not thread-safe (like kafka-python's): use a Consumer from one thread.

Example:
    >>> consumer = rs.connect().consumer("orders", auto_offset_reset="earliest")  # doctest: +SKIP
    >>> for record in consumer:                                  # doctest: +SKIP
    ...     print(record.offset, record.value)
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa

from raystream.client.cluster import Cluster, resolve_cluster
from raystream.client.fetcher import Drained, Fetcher, PartitionState
from raystream.client.membership import CommitCallback, GroupMembership
from raystream.config import ConsumerConfig, require
from raystream.errors import (
    CommitFailedError,
    IllegalStateError,
    InvalidRequestError,
    RecordDeserializationError,
    UnknownTopicOrPartitionError,
)
from raystream.groups.offsets_topic import OffsetAndMetadata
from raystream.protocol import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from raystream.records import (
    BYTES_SCHEMA,
    consumer_records,
    empty_fetch,
    iter_consumer_records,
    to_user_table,
)
from raystream.types import ConsumerGroupMetadata, ConsumerRecord, TopicPartition

GROUP_SLICE_S = 0.02
"""While a rebalance is under way, poll() waits in slices this long so that it applies
the join's answer as soon as it arrives."""

logger = logging.getLogger(__name__)


@dataclasses.dataclass(eq=False, slots=True)
class _LiveBatch:
    """The batch an iteration loop is handing out: ``cursor`` walks ``offsets``."""

    state: PartitionState
    epoch: int
    offsets: list[int]
    cursor: Iterator[int]


class Consumer:
    """Reads records from topics (kafka-python's ``KafkaConsumer``); one thread only.

    Args:
        *topics: topics to subscribe to right away (see :meth:`subscribe`).
        cluster: the cluster to read from; None means :func:`raystream.connect`.
        key_deserializer, value_deserializer: callables applied to each non-None key /
            value by ``poll()`` and iteration (not by ``poll_arrow()``, which returns the
            stored columns). For a typed topic the value is a dict of the row.
        group_id, auto_offset_reset, ...: the options of :class:`ConsumerConfig`
            (kafka-python's names and defaults).
        **config: further :class:`ConsumerConfig` options, also under Kafka's dotted
            names (``**{"fetch.max.wait.ms": 100}``).

    Raises:
        InvalidConfigError: an option is unknown or invalid (the message names it).
        UnknownTopicOrPartitionError: a topic given does not exist.
    """

    def __init__(
        self,
        *topics: str,
        cluster: Cluster | None = None,
        group_id: str | None = None,
        auto_offset_reset: str = "latest",
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
        isolation_level: str = "read_uncommitted",
        max_poll_records: int = 500,
        session_timeout_ms: int = 10_000,
        heartbeat_interval_ms: int = 3000,
        max_poll_interval_ms: int = 300_000,
        partition_assignment_strategy: Any = "cooperative-sticky",
        group_instance_id: str | None = None,
        key_deserializer: Callable[[bytes], Any] | None = None,
        value_deserializer: Callable[[Any], Any] | None = None,
        fetch_max_wait_ms: int = 500,
        fetch_min_bytes: int = 1,
        fetch_max_bytes: int = 52_428_800,
        max_partition_fetch_bytes: int = 1_048_576,
        consumer_timeout_ms: float = math.inf,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        metadata_max_age_ms: int = 300_000,
        **config: Any,
    ) -> None:
        self.config = ConsumerConfig(
            group_id=group_id,
            auto_offset_reset=auto_offset_reset,
            enable_auto_commit=enable_auto_commit,
            auto_commit_interval_ms=auto_commit_interval_ms,
            isolation_level=isolation_level,
            max_poll_records=max_poll_records,
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
            max_poll_interval_ms=max_poll_interval_ms,
            partition_assignment_strategy=partition_assignment_strategy,
            group_instance_id=group_instance_id,
            fetch_max_wait_ms=fetch_max_wait_ms,
            fetch_min_bytes=fetch_min_bytes,
            fetch_max_bytes=fetch_max_bytes,
            max_partition_fetch_bytes=max_partition_fetch_bytes,
            consumer_timeout_ms=consumer_timeout_ms,
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            metadata_max_age_ms=metadata_max_age_ms,
        ).with_options(config)
        for name, value in (
            ("key_deserializer", key_deserializer),
            ("value_deserializer", value_deserializer),
        ):
            require(value is None or callable(value), "consumer config", name, value, "callable")
        self.cluster = resolve_cluster(cluster)
        self._key_deserializer = key_deserializer
        self._value_deserializer = value_deserializer
        self._fetcher = Fetcher(
            self.cluster,
            auto_offset_reset=self.config.auto_offset_reset,
            isolation_level=self.config.isolation_level,
            fetch_max_wait_ms=self.config.fetch_max_wait_ms,
            fetch_min_bytes=self.config.fetch_min_bytes,
            max_fetch_bytes=min(self.config.fetch_max_bytes, self.config.max_partition_fetch_bytes),
            request_timeout_ms=self.config.request_timeout_ms,
            retry_backoff_ms=self.config.retry_backoff_ms,
            client_id=self.config.client_id,
        )
        self._subscription: list[str] = []
        self._listener: Any = None
        self._user_assignment = False
        self._next_metadata_check = math.inf
        self._iterator: Iterator[ConsumerRecord] | None = None
        self._live: _LiveBatch | None = None
        self._deferred: tuple[PartitionState, int, RecordDeserializationError] | None = None
        self._closed = False
        self._group: GroupMembership | None = None
        if self.config.group_id is not None:
            self._group = GroupMembership(
                self.cluster,
                self.config.group_id,
                self.config.group_instance_id,
                self.config.client_id,
                self.config.partition_assignment_strategy,
                self.config.session_timeout_ms,
                self.config.heartbeat_interval_ms,
                self.config.max_poll_interval_ms,
                owner=self,
                require_stable=self.config.isolation_level == "read_committed",
            )
        self._next_auto_commit = time.monotonic() + self.config.auto_commit_interval_ms / 1000
        if topics:
            self.subscribe(list(topics))

    # ------------------------------------------------------------ subscription

    def subscribe(self, topics: Iterable[str] | str, listener: Any = None) -> None:
        """Subscribe to ``topics`` (a list, or one name), replacing any subscription.

        With a ``group_id`` the consumer joins its group at the next ``poll()`` and reads
        the partitions the group assigns it. Without one, it reads **all** partitions
        of the topics; partitions added later join within ``metadata_max_age_ms``.
        ``listener`` (kafka-python's ConsumerRebalanceListener:
        ``on_partitions_revoked(partitions)``, ``on_partitions_assigned(partitions)``,
        and optionally ``on_partitions_lost(partitions)``, for partitions taken away
        without a chance to commit; revoked is called when it is missing) hears of
        the changes, on this thread, inside ``poll()``.

        Raises:
            InvalidRequestError: ``topics`` is empty or not topic names.
            UnknownTopicOrPartitionError: a topic does not exist.
            IllegalStateError: partitions were assigned with ``assign()``.
        """
        self._check_open()
        self._settle(stop=True)
        names = [topics] if isinstance(topics, str) else topics
        try:
            names = list(names)
        except TypeError:
            raise InvalidRequestError(
                f"subscribe takes a list of topic names, not {topics!r}"
            ) from None
        if not names or not all(isinstance(n, str) and n for n in names):
            raise InvalidRequestError(
                f"subscribe takes a non-empty list of topic names: {topics!r}"
            )
        if self._user_assignment:
            raise IllegalStateError(
                "subscribe() after assign(): call unsubscribe() first (the two cannot mix)"
            )
        for name in names:
            self.cluster.topic_metadata(name)
        self._subscription = list(dict.fromkeys(names))
        self._listener = listener
        if self._group is not None:
            self._group.subscribe(self._subscription)
        else:
            self._update_subscription(refresh=False)

    def _update_subscription(self, refresh: bool) -> None:
        """Assign every partition of the subscribed topics (no group coordination)."""
        wanted: list[TopicPartition] = []
        for name in self._subscription:
            try:
                metadata = self.cluster.topic_metadata(name, refresh=refresh)
            except UnknownTopicOrPartitionError:  # deleted since: nothing to read
                continue
            wanted.extend(TopicPartition(name, p.partition) for p in metadata.partitions)
        current = set(self._fetcher.assignment())
        revoked = current - set(wanted)
        added = set(wanted) - current
        if revoked:
            self._notify("on_partitions_revoked", revoked)
        self._fetcher.assign(wanted)
        if added:
            self._notify("on_partitions_assigned", added)
        self._next_metadata_check = time.monotonic() + self.config.metadata_max_age_ms / 1000

    def _notify(self, method: str, partitions: set[TopicPartition]) -> None:
        callback = getattr(self._listener, method, None)
        if callback is None and method == "on_partitions_lost":
            callback = getattr(self._listener, "on_partitions_revoked", None)
        if callback is not None:
            callback(partitions)

    # The group membership's calls (MembershipOwner), on this thread, inside poll().

    def revoke_partitions(self, partitions: set[TopicPartition]) -> None:
        """Commit what was consumed of ``partitions``, tell the listener, drop them."""
        self._settle(stop=True)
        if self.config.enable_auto_commit:
            try:
                self._commit_positions(partitions)
            except CommitFailedError as error:
                logger.warning("commit before revoking %s failed: %s", _tps(partitions), error)
        self._notify("on_partitions_revoked", partitions)
        self._fetcher.assign([tp for tp in self._fetcher.assignment() if tp not in partitions])

    def assign_partitions(
        self, added: set[TopicPartition], assignment: set[TopicPartition]
    ) -> None:
        """Read ``assignment``; ``added`` start from the group's committed offsets."""
        self._settle(stop=True)
        kept = [tp for tp in self._fetcher.assignment() if tp in assignment]
        self._fetcher.assign(kept + sorted(assignment - set(kept)))
        self._seek_committed(added)
        self._notify("on_partitions_assigned", added)

    def lose_partitions(self, partitions: set[TopicPartition]) -> None:
        """Drop ``partitions`` without committing: the group may have moved them."""
        self._settle(stop=True)
        self._notify("on_partitions_lost", partitions)
        self._fetcher.assign([tp for tp in self._fetcher.assignment() if tp not in partitions])

    def _seek_committed(self, partitions: Iterable[TopicPartition]) -> None:
        """Position ``partitions`` at the group's committed offsets (others: reset policy)."""
        partitions = list(partitions)
        if self._group is None or not partitions:
            return
        for tp, offset in self._group.committed(partitions).items():
            self._fetcher.seek(tp, offset)

    def subscription(self) -> set[str]:
        """The subscribed topic names (empty when partitions were assigned)."""
        self._check_open()
        return set(self._subscription)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions (no group); ``assign([])`` unassigns all.

        Positions of partitions that stay assigned are kept; new ones start from
        ``auto_offset_reset`` unless sought.

        Raises:
            InvalidRequestError: an item is not a TopicPartition.
            UnknownTopicOrPartitionError: a topic does not exist.
            PartitionOutOfRangeError: a topic has no such partition.
            IllegalStateError: the consumer is subscribed (call unsubscribe() first).
        """
        self._check_open()
        self._settle(stop=True)
        if self._subscription:
            raise IllegalStateError(
                "assign() while subscribed: call unsubscribe() first (the two cannot mix)"
            )
        if isinstance(partitions, (str, TopicPartition)):
            raise InvalidRequestError(f"assign takes a list of TopicPartition, not {partitions!r}")
        tps = list(dict.fromkeys(self._topic_partition(tp, "assign") for tp in partitions))
        for tp in tps:
            self.cluster.require_partition(tp.topic, tp.partition)
        new = [tp for tp in tps if tp not in set(self._fetcher.assignment())]
        self._fetcher.assign(tps)
        self._seek_committed(new)
        self._user_assignment = bool(tps)

    def unsubscribe(self) -> None:
        """Drop the subscription or the assignment (positions are forgotten)."""
        self._check_open()
        self._settle(stop=True)
        if self._subscription:
            revoked = set(self._fetcher.assignment())
            if revoked and self._group is not None:
                self.revoke_partitions(revoked)
            elif revoked:
                self._notify("on_partitions_revoked", revoked)
            if self._group is not None:
                self._group.leave()
        self._fetcher.assign([])
        self._subscription = []
        self._listener = None
        self._user_assignment = False
        self._next_metadata_check = math.inf

    def assignment(self) -> set[TopicPartition]:
        """The partitions this consumer reads."""
        self._check_open()
        return set(self._fetcher.assignment())

    # -------------------------------------------------------------------- poll

    def poll(
        self, timeout_ms: float = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records fetched since the last poll, waiting up to ``timeout_ms`` for some.

        Returns at most ``max_records`` (default ``max_poll_records``) records, grouped
        by partition, in offset order; positions move past them. May block for the
        list-offsets calls that give new partitions their positions.

        A deserializer that raises stops the poll at that record, as in Kafka: the
        records before it (of its partition, and of the partitions taken before it) are
        returned, the record's partition keeps its position at the record, and the next
        poll raises RecordDeserializationError naming it (at once when no record comes
        before it); so does every poll after, until ``seek()`` moves past it.

        Raises:
            IllegalStateError: no subscription or assignment, or the consumer is closed.
            OffsetOutOfRangeError: no valid position and auto_offset_reset="none".
            RecordDeserializationError: a deserializer raised on the record at the
                position of the partition it names.
            RaystreamError: a non-retriable fetch error (buffered data is kept).
        """
        self._check_open()
        self._raise_deferred()
        result: dict[TopicPartition, list[ConsumerRecord]] = {}
        drained = self._poll(timeout_ms, max_records, advance=True)
        for index, part in enumerate(drained):
            records: list[ConsumerRecord] = []
            try:
                self._records(part, into=records)
            except BaseException as failure:
                # Positions moved past the whole poll: put them back at the failing record
                # (its partition) and where they were (the partitions not returned).
                if not isinstance(failure, Exception):  # KeyboardInterrupt: none returned
                    for each in drained:
                        self._fetcher.seek(each.state.tp, each.start)
                    raise
                bad = int(part.offsets[len(records)])
                self._fetcher.seek(part.state.tp, bad)
                for later in drained[index + 1 :]:
                    self._fetcher.seek(later.state.tp, later.start)
                error = _deserialization_error(part.state.tp, bad, failure)
                if records:
                    result[part.state.tp] = records
                if not result:
                    raise error from failure
                self._deferred = (part.state, part.state.epoch, error)
                return result
            result[part.state.tp] = records
        return result

    def _raise_deferred(self) -> None:
        """Raise the deserialization error a poll put off, if its record is still next."""
        deferred, self._deferred = self._deferred, None
        if deferred is not None:
            state, epoch, error = deferred
            if state.epoch == epoch and state.position == error.offset:
                raise error

    def poll_arrow(self, timeout_ms: float = 0, max_records: int | None = None) -> pa.Table:
        """The records ``poll()`` would return, as one Arrow table (no per-record work).

        Columns (``records.to_user_table``): topic, partition, offset, timestamp, key,
        then ``value`` (byte topics) or a typed topic's own columns, then headers;
        partitions follow each other. Deserializers are not applied. Tables of topics
        with different columns are combined with nulls where a column is missing.
        """
        drained = self._poll(timeout_ms, max_records, advance=True)
        tables = [to_user_table(d.table, d.state.tp.topic, d.state.tp.partition) for d in drained]
        if not tables:
            return self._empty_table()
        if len(tables) == 1:
            return tables[0]
        if all(t.schema.equals(tables[0].schema) for t in tables[1:]):
            return pa.concat_tables(tables)
        return pa.concat_tables(tables, promote_options="permissive")

    def _poll(self, timeout_ms: float, max_records: int | None, advance: bool) -> list[Drained]:
        self._check_open()
        self._fetcher.metrics.record_poll(time.monotonic())
        if not _is_number(timeout_ms) or timeout_ms < 0:
            raise InvalidRequestError(f"poll timeout_ms={timeout_ms!r} must be a number >= 0")
        if max_records is None:
            max_records = self.config.max_poll_records
        elif not _is_int(max_records) or max_records < 1:
            raise InvalidRequestError(f"poll max_records={max_records!r} must be an integer >= 1")
        if not self._subscription and not self._user_assignment:
            raise IllegalStateError(
                "the consumer is not subscribed to any topic nor assigned any partition"
            )
        if advance:
            self._settle(stop=True)
        if self._group is None:
            if self._subscription and time.monotonic() >= self._next_metadata_check:
                self._update_subscription(refresh=True)
            return self._fetcher.poll(max_records, timeout_ms / 1000, advance)
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            self._group_step()
            remaining = deadline - time.monotonic()
            wait_s = min(remaining, GROUP_SLICE_S) if self._group.rebalancing else remaining
            drained = self._fetcher.poll(max_records, max(wait_s, 0.0), advance)
            if drained or time.monotonic() >= deadline:
                return drained

    def _group_step(self) -> None:
        """Group work due at a poll: rebalances, commit callbacks, auto-commit."""
        assert self._group is not None
        self._settle(stop=False)
        if self._subscription:
            self._group.step()
        else:
            self._group.finish_commits()
        if self.config.enable_auto_commit and time.monotonic() >= self._next_auto_commit:
            self._next_auto_commit = time.monotonic() + self.config.auto_commit_interval_ms / 1000
            offsets = self._positions(self._fetcher.assignment())
            if offsets:
                self._group.commit_async(offsets, self._timed_commit(None))

    def _records(
        self,
        drained: Drained,
        cursor: Iterator[int] | None = None,
        into: list[ConsumerRecord] | None = None,
    ) -> Any:
        """The drained rows as a list of records (appended to ``into``, which keeps those
        made before a deserializer raises), or made lazily along ``cursor``."""
        state = drained.state
        args = (
            drained.table,
            drained.offsets,
            state.tp.topic,
            state.tp.partition,
            state.timestamp_type,
            self._key_deserializer,
            self._value_deserializer,
        )
        if cursor is None:
            return consumer_records(*args, into=into)
        return iter_consumer_records(*args, cursor=cursor)

    def _empty_table(self) -> pa.Table:
        """No rows, in the layout poll_arrow gives the assigned topics."""
        schemas = [
            to_user_table(
                empty_fetch(self.cluster.topic_metadata(topic).record_schema), topic, 0
            ).schema
            for topic in dict.fromkeys(tp.topic for tp in self._fetcher.assignment())
        ]
        if not schemas:
            schemas = [to_user_table(empty_fetch(BYTES_SCHEMA), "", 0).schema]
        if len(schemas) == 1:
            return schemas[0].empty_table()
        return pa.unify_schemas(schemas, promote_options="permissive").empty_table()

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """Records one by one, blocking; ends after ``consumer_timeout_ms`` without one.

        The position moves past each record as it is handed out, so leaving the loop
        early loses nothing. A seek, pause or assignment change during the loop takes
        effect at the next record. A deserializer that raises ends the loop with
        RecordDeserializationError, the position at that record (see :meth:`poll`).
        """
        self._check_open()
        if self._iterator is None:
            self._iterator = self._iterate()
        return self._iterator

    def __next__(self) -> ConsumerRecord:
        return next(iter(self))

    def _iterate(self) -> Iterator[ConsumerRecord]:
        timeout_s = self.config.consumer_timeout_ms / 1000
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._raise_deferred()
                batch = self._poll(min(remaining, 1.0) * 1000, None, advance=False)
                for drained in batch:
                    state = drained.state
                    if state.epoch != drained.epoch or state.position != drained.start:
                        continue  # sought, paused, polled or unassigned since drained
                    offsets = drained.offsets.tolist()
                    live = self._live = _LiveBatch(state, drained.epoch, offsets, iter(offsets))
                    records = self._records(drained, live.cursor)
                    try:
                        yield from records
                    except GeneratorExit:  # the loop was left: nothing failed
                        raise
                    except BaseException as failure:  # a deserializer raised
                        error = self._stop_at_failed_record(live, failure)
                        if not isinstance(failure, Exception):
                            raise  # KeyboardInterrupt: the position is kept all the same
                        raise error from failure
                    if self._live is live:  # every record handed out, none of it undone
                        self._live = None
                        state.position = offsets[-1] + 1
                if batch:
                    deadline = time.monotonic() + timeout_s
        finally:
            self._iterator = None  # the next iter() starts afresh

    def _stop_at_failed_record(
        self, live: _LiveBatch, failure: BaseException
    ) -> RecordDeserializationError:
        """Leave the iterated partition's position at the record whose deserializer
        raised (the loop handed out the ones before it) and describe it."""
        # The cursor yielded the failing record's offset before its key and value were
        # deserialized (offset comes first in a record), so it counts as taken.
        taken = len(live.offsets) - live.cursor.__length_hint__()
        bad = live.offsets[taken - 1]
        if self._live is live:
            self._live = None
            self._fetcher.seek(live.state.tp, bad)  # drops the batch past it
        return _deserialization_error(live.state.tp, bad, failure)

    def _settle(self, stop: bool) -> None:
        """Move the iterated partition's position past the records handed out so far.

        Iteration hands records out without per-record bookkeeping: the position of the
        partition being iterated is derived here, from how far the loop got, whenever a
        call needs it. With ``stop`` the rest of that batch is dropped (the call moves
        positions, so the loop must not go on with it): it is fetched again if needed.
        """
        live = self._live
        if live is None:
            return
        state = live.state
        if state.epoch == live.epoch:
            taken = len(live.offsets) - live.cursor.__length_hint__()
            if taken:
                state.position = live.offsets[taken - 1] + 1
        if stop:
            live.offsets.clear()  # ends the zip that makes the records of the loop
            self._live = None

    # ----------------------------------------------------------------- offsets

    def position(self, tp: TopicPartition) -> int:
        """The offset of the next record this consumer will return from ``tp``.

        Resets the position by ``auto_offset_reset`` first if it has none (may block).

        Raises:
            IllegalStateError: ``tp`` is not assigned.
            OffsetOutOfRangeError: no position and auto_offset_reset="none".
        """
        self._check_open()
        self._settle(stop=False)
        return self._fetcher.position(self._topic_partition(tp, "position"))

    def highwater(self, tp: TopicPartition) -> int | None:
        """The high watermark the last fetch of ``tp`` reported (None before any)."""
        self._check_open()
        state = self._fetcher.state(self._topic_partition(tp, "highwater"), "highwater")
        return None if state.high_watermark < 0 else state.high_watermark

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Read ``tp`` from ``offset`` next (fetched data past the old position is dropped).

        An offset beyond the log is found out at the next fetch and handled by
        ``auto_offset_reset``, as in Kafka.

        Raises:
            InvalidRequestError: ``offset`` is not an integer >= 0.
            IllegalStateError: ``tp`` is not assigned.
        """
        self._check_open()
        self._settle(stop=True)
        tp = self._topic_partition(tp, "seek")
        if not _is_int(offset) or offset < 0:
            raise InvalidRequestError(
                f"seek offset {offset!r} for {tp.topic}-{tp.partition} must be an integer >= 0"
            )
        self._fetcher.seek(tp, int(offset))

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Read the given (default: all assigned) partitions from their log start.

        Lazy, as in Kafka: the offset is looked up at the next poll or position().
        """
        self._seek_to(partitions, EARLIEST_TIMESTAMP, "seek_to_beginning")

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Read the given (default: all assigned) partitions from their high watermark."""
        self._seek_to(partitions, LATEST_TIMESTAMP, "seek_to_end")

    def _seek_to(self, partitions: tuple[TopicPartition, ...], timestamp: int, what: str) -> None:
        self._check_open()
        self._settle(stop=True)
        tps = [self._topic_partition(tp, what) for tp in partitions]
        for tp in tps:
            self._fetcher.state(tp, what)
        for tp in tps or self._fetcher.assignment():
            self._fetcher.request_reset(tp, timestamp, what)

    def offsets_for_times(
        self, timestamps: dict[TopicPartition, int]
    ) -> dict[TopicPartition, int | None]:
        """For each partition, the first offset whose timestamp is >= the given one (ms).

        None where no record is that new. (kafka-python answers OffsetAndTimestamp;
        raystream answers the offset.) The partitions need not be assigned.

        Raises:
            InvalidRequestError: a timestamp is not an integer >= 0.
            UnknownTopicOrPartitionError: a topic does not exist.
            PartitionOutOfRangeError: a topic has no such partition.
        """
        self._check_open()
        if not isinstance(timestamps, dict):
            raise InvalidRequestError(
                f"offsets_for_times takes a dict {{TopicPartition: timestamp_ms}}, "
                f"not {type(timestamps).__name__}"
            )
        query: dict[TopicPartition, int] = {}
        for tp, timestamp in timestamps.items():
            tp = self._existing(tp, "offsets_for_times")
            if not _is_int(timestamp) or timestamp < 0:
                raise InvalidRequestError(
                    f"offsets_for_times timestamp {timestamp!r} for {tp.topic}-{tp.partition} "
                    "must be an integer >= 0 (milliseconds)"
                )
            query[tp] = int(timestamp)
        found = self._fetcher.list_offsets(query)
        return {tp: (None if offset < 0 else offset) for tp, offset in found.items()}

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The log start offset of each partition (need not be assigned)."""
        return self._list(partitions, EARLIEST_TIMESTAMP, "beginning_offsets")

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The end of each partition: the high watermark (offset of the next record), or
        the last stable offset for a read_committed consumer, as in Kafka."""
        return self._list(partitions, LATEST_TIMESTAMP, "end_offsets")

    def _list(
        self, partitions: Iterable[TopicPartition], timestamp: int, what: str
    ) -> dict[TopicPartition, int]:
        self._check_open()
        if isinstance(partitions, (str, TopicPartition)):
            raise InvalidRequestError(f"{what} takes a list of TopicPartition, not {partitions!r}")
        tps = [self._existing(tp, what) for tp in partitions]
        return self._fetcher.list_offsets(dict.fromkeys(tps, timestamp))

    # ------------------------------------------------------------------ commit

    def commit(self, offsets: dict[TopicPartition, Any] | None = None) -> None:
        """Commit offsets for the group and wait until they are stored (acks=all).

        ``offsets`` maps partitions to the next offset to read (an int, or kafka-python's
        OffsetAndMetadata-like ``(offset, metadata)``); None commits the current
        positions of every assigned partition, i.e. everything returned so far.

        Raises:
            InvalidRequestError: no group_id, or a bad offset (the message names it).
            CommitFailedError: the group rebalanced and this member's generation is
                stale, or it was evicted (its partitions may be someone else's now).
        """
        group = self._require_group("commit")
        self._settle(stop=False)
        notes = _metadata_of(offsets)
        offsets = self._checked_offsets(offsets, "commit")
        if offsets:
            self._commit_now(group, offsets, notes)

    def commit_async(
        self,
        offsets: dict[TopicPartition, Any] | None = None,
        callback: CommitCallback | None = None,
    ) -> None:
        """Commit like :meth:`commit` without waiting; ``callback(offsets, error)`` runs
        on this thread during a later ``poll()`` (or ``close()``); error is None on success.
        With nothing to commit it runs at once (``offsets`` empty), as in Kafka."""
        group = self._require_group("commit_async")
        self._settle(stop=False)
        notes = _metadata_of(offsets)
        offsets = self._checked_offsets(offsets, "commit_async")
        if offsets:
            group.commit_async(offsets, self._timed_commit(callback), notes)
        elif callback is not None:
            callback({}, None)

    def committed(self, tp: TopicPartition, metadata: bool = False) -> Any:
        """The group's committed offset of ``tp`` (None if none), asked of the coordinator;
        with ``metadata=True`` an :class:`OffsetAndMetadata` (offset and the note the
        committer stored with it), as kafka-python's ``committed(tp, metadata=True)``."""
        group = self._require_group("committed")
        tp = self._existing(tp, "committed")
        if not metadata:
            return group.committed([tp]).get(tp)
        found = group.committed([tp], with_metadata=True).get(tp)
        return None if found is None else OffsetAndMetadata(*found)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The consumer's group, member id and generation, for
        ``Producer.send_offsets_to_transaction`` (KIP-447: offsets of a consumer that
        a rebalance left behind are refused).

        Raises:
            InvalidRequestError: the consumer has no group_id.
        """
        group = self._require_group("group_metadata")
        return ConsumerGroupMetadata(
            group.group_id, group.member_id, group.generation, group.group_instance_id
        )

    def _require_group(self, what: str) -> GroupMembership:
        self._check_open()
        if self._group is None:
            raise InvalidRequestError(
                f"{what}() needs a group_id: offsets are committed for a consumer group"
            )
        return self._group

    def _checked_offsets(self, offsets: Any, what: str) -> dict[TopicPartition, int]:
        if offsets is None:
            return self._positions(self._fetcher.assignment())
        if not isinstance(offsets, dict):
            raise InvalidRequestError(
                f"{what} takes a dict {{TopicPartition: offset}}, not {type(offsets).__name__}"
            )
        checked: dict[TopicPartition, int] = {}
        for tp, value in offsets.items():
            tp = self._existing(tp, what)
            offset = value[0] if isinstance(value, tuple) else getattr(value, "offset", value)
            if not _is_int(offset) or offset < 0:
                raise InvalidRequestError(
                    f"{what}: offset {value!r} for {tp.topic}-{tp.partition} must be an "
                    "integer >= 0 (the next offset to read)"
                )
            checked[tp] = int(offset)
        return checked

    def _positions(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Positions of the given assigned partitions that have one (no resets)."""
        positions = {}
        for tp in partitions:
            state = self._fetcher.state(tp, "commit")
            if state.position is not None:
                positions[tp] = state.position
        return positions

    def _commit_positions(self, partitions: Iterable[TopicPartition]) -> None:
        assert self._group is not None
        offsets = self._positions(partitions)
        if offsets:
            self._commit_now(self._group, offsets)

    def _commit_now(
        self,
        group: GroupMembership,
        offsets: dict[TopicPartition, int],
        metadata: dict[TopicPartition, str] | None = None,
    ) -> None:
        """Commit and wait, counting it in the commit metrics when it succeeds."""
        start = time.monotonic()
        group.commit(offsets, metadata)
        now = time.monotonic()
        self._fetcher.metrics.record_commit(now - start, now)

    def _timed_commit(self, callback: CommitCallback | None) -> CommitCallback:
        """``callback`` that first counts the commit in the metrics (the time until its
        answer was seen, at a poll) when it succeeded."""
        start = time.monotonic()
        metrics = self._fetcher.metrics

        def done(offsets: dict[TopicPartition, int], error: Exception | None) -> None:
            if error is None:
                now = time.monotonic()
                metrics.record_commit(now - start, now)
            if callback is not None:
                callback(offsets, error)

        return done

    # ------------------------------------------------------------ flow control

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop returning and fetching records of these partitions until resumed.

        Raises:
            IllegalStateError: a partition is not assigned.
        """
        self._check_open()
        self._settle(stop=True)
        tps = [self._topic_partition(tp, "pause") for tp in partitions]
        for tp in tps:
            self._fetcher.state(tp, "pause")
        for tp in tps:
            self._fetcher.pause(tp)

    def resume(self, *partitions: TopicPartition) -> None:
        """Fetch and return records of these partitions again."""
        self._check_open()
        tps = [self._topic_partition(tp, "resume") for tp in partitions]
        for tp in tps:
            self._fetcher.state(tp, "resume")
        for tp in tps:
            self._fetcher.resume(tp)

    def paused(self) -> set[TopicPartition]:
        """The paused partitions."""
        self._check_open()
        return self._fetcher.paused()

    # ----------------------------------------------------------------- metrics

    def metrics(self) -> dict[str, Any]:
        """The consumer's metrics under Kafka's names.

        Counted per fetch, per poll and per commit, so reading them costs nothing on the
        poll path. Rates are per second and latencies in ms, over Kafka's window (the
        last 30 to 60 s; NaN for an average with nothing in it); ``*-total`` counts
        since the consumer was made:

        - ``records-consumed-rate`` / ``-total``, ``bytes-consumed-rate`` / ``-total``:
          what poll(), poll_arrow() and iteration took from the fetched data (bytes as
          fetched, before conversion).
        - ``fetch-rate`` / ``-total``, ``fetch-latency-avg`` / ``-max`` (a fetch's round
          trip, the leader's long-poll wait included), ``fetch-size-avg`` / ``-max``
          (bytes), ``records-per-request-avg``, ``fetch-throttle-time-avg`` / ``-max``
          (ms the consumer held its fetches back after each answer, while a
          ``consumer_byte_rate`` quota applies to its ``client_id``; NaN while none does,
          see :mod:`raystream.client.quotas`).
        - ``records-lag-max``: the largest lag of the assigned partitions, and
          ``records-lag``: a dict of each partition's lag (its last fetched high
          watermark minus its position), now rather than over a window.
        - ``commit-rate`` / ``-total``, ``commit-latency-avg`` / ``-max``: successful
          offset commits (an async one is timed until its answer is seen, at a poll).
        - ``assigned-partitions``, ``time-between-poll-avg`` / ``-max``,
          ``last-poll-seconds-ago``.
        """
        self._check_open()
        self._settle(stop=False)
        fetcher = self._fetcher
        return fetcher.metrics.snapshot(
            time.monotonic(),
            fetcher.lags(),
            **{"assigned-partitions": len(fetcher.assignment())},
        )

    # ---------------------------------------------------------------- metadata

    def topics(self) -> set[str]:
        """The names of the cluster's topics (internal ones excluded)."""
        self._check_open()
        return set(self.cluster.call("list_topics"))

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        """The partition numbers of ``topic``, or None if it does not exist."""
        self._check_open()
        if not isinstance(topic, str):
            raise InvalidRequestError(f"topic must be a string, not {topic!r}")
        try:
            metadata = self.cluster.topic_metadata(topic)
        except UnknownTopicOrPartitionError:
            return None
        return {p.partition for p in metadata.partitions}

    # ------------------------------------------------------------------- close

    def close(self, autocommit: bool = True) -> None:
        """Leave the group and stop fetching (in-flight fetches are cancelled); idempotent.

        With ``autocommit`` (and ``enable_auto_commit``) a group consumer first commits
        its positions, so a successor starts where this one stopped. A static member
        (``group_instance_id``) does not leave: its partitions wait for it until its
        session times out. Every later call raises IllegalStateError.
        """
        if self._closed:
            return
        self._settle(stop=True)
        if self._group is not None:
            if autocommit and self.config.enable_auto_commit:
                try:
                    self._commit_positions(self._fetcher.assignment())
                except Exception as error:  # closing goes on; the group notices the gap
                    logger.warning("commit at close failed: %s", error)
            if self._subscription:
                self._notify("on_partitions_revoked", set(self._fetcher.assignment()))
            self._group.close()
        self._closed = True
        self._fetcher.close()

    def __enter__(self) -> Consumer:
        self._check_open()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._fetcher.assignment())} partitions"
        return f"Consumer(group_id={self.config.group_id!r}, {state})"

    # ----------------------------------------------------------------- helpers

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the consumer is closed")

    @staticmethod
    def _topic_partition(value: Any, what: str) -> TopicPartition:
        if isinstance(value, tuple) and len(value) == 2:  # TopicPartition is one too
            topic, partition = value
        else:
            raise InvalidRequestError(f"{what}: expected a TopicPartition, not {value!r}")
        if not isinstance(topic, str) or not _is_int(partition):
            raise InvalidRequestError(
                f"{what}: TopicPartition needs a str topic and an int partition, got {value!r}"
            )
        return TopicPartition(topic, int(partition))

    def _existing(self, value: Any, what: str) -> TopicPartition:
        tp = self._topic_partition(value, what)
        self.cluster.require_partition(tp.topic, tp.partition)
        return tp


def _metadata_of(offsets: Any) -> dict[TopicPartition, str]:
    """The metadata notes of a commit's ``(offset, metadata)`` values (OffsetAndMetadata
    alike); plain offsets have none. Offsets themselves are checked elsewhere.

    Raises:
        InvalidRequestError: a note is not a string.
    """
    if not isinstance(offsets, dict):
        return {}
    notes: dict[TopicPartition, str] = {}
    for tp, value in offsets.items():
        if isinstance(value, tuple) and len(value) > 1:
            note = value[1]
        else:
            note = getattr(value, "metadata", "")
        if not isinstance(note, str):
            raise InvalidRequestError(
                f"commit: the metadata of {tp!r} must be a string, got {note!r}"
            )
        if note:
            notes[tp] = note
    return notes


def _deserialization_error(
    tp: TopicPartition, offset: int, failure: BaseException
) -> RecordDeserializationError:
    error = RecordDeserializationError(
        f"deserializing the record at offset {offset} of {tp.topic}-{tp.partition} failed: "
        f"{type(failure).__name__}: {failure}. The consumer stays at that record; "
        f"seek past it to go on (consumer.seek(error.topic_partition, {offset + 1}))",
        tp.topic,
        tp.partition,
        offset,
    )
    error.__cause__ = failure
    return error


def _tps(partitions: Iterable[TopicPartition]) -> str:
    return " ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(partitions))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
