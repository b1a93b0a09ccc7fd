"""The Producer: kafka-python's ``KafkaProducer`` API over raystream's leader actors.

``send()`` validates one record, buffers it in the
:class:`~raystream.client.accumulator.RecordAccumulator` (a few list appends under a
lock: no Arrow work, no hashing) and returns a
:class:`~raystream.client.results.FutureRecordMetadata`. The
:class:`~raystream.client.sender.Sender` thread turns buffered records into one Arrow
batch per partition and sends it to the partition's leader (up to five calls in flight
per partition with idempotence, one without; batches queued meanwhile share a call).
``send_batch()`` is the bulk path: a whole Arrow table is partitioned with numpy and
sent as a few large requests, with no per-row Python.

Partitioning (Kafka's default partitioner): an explicit ``partition=`` wins; a keyed
record goes to ``murmur2(key) % partitions``, hashed at drain time for the whole batch
at once; keyless records stick to one partition per batch (KIP-480). A custom
``partitioner`` is called per record in ``send()``, as in kafka-python.

Delivery: retriable errors are retried after a metadata refresh until
``delivery_timeout_ms``. With ``enable_idempotence`` (the default) every batch carries
the producer's id, epoch and the partition sequence of its first record, and the
leader writes it once however often it is retried: no duplicates, per-partition order
kept (see :mod:`raystream.client.sender`). Without it (or with acks=0) delivery is at
least once.

``metrics()`` reports Kafka's producer metrics (record-send-rate, request-latency-avg,
batch-size-avg, buffer-available-bytes, ...), counted per produce call by the sender.

Transactions (``transactional_id``): ``init_transactions()`` once, then
``begin_transaction()``, sends to any partitions of any topics,
``send_offsets_to_transaction()`` for a consume-transform-produce loop, and
``commit_transaction()`` or ``abort_transaction()``: everything sent in between, and
the offsets, become visible to read_committed consumers together or not at all (see
:mod:`raystream.client.transactions`).

Example:
    >>> with rs.connect().producer(acks=1) as producer:        # doctest: +SKIP
    ...     producer.send("orders", b"hello", key=b"customer-1").get()
    RecordMetadata(topic='orders', partition=2, offset=0, timestamp=1700000000000)
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from raystream.client.accumulator import (
    BY_KEY,
    RECORD_OVERHEAD_BYTES,
    STICKY,
    BulkJob,
    RecordAccumulator,
    TopicInfo,
    assign_partitions,
    rows_per_request,
    split_by_partition,
)
from raystream.client.cluster import Cluster, resolve_cluster
from raystream.client.partitioner import DefaultPartitioner, resolve_partitioner
from raystream.client.results import (
    FutureRecordMetadata,
    ProduceRequest,
    ProduceResult,
)
from raystream.client.sender import Sender, TopicCache
from raystream.client.transactions import TransactionManager
from raystream.config import ProducerConfig
from raystream.controller.metadata import check_not_internal
from raystream.errors import (
    CommitFailedError,
    IllegalGenerationError,
    IllegalStateError,
    InvalidRecordError,
    InvalidRequestError,
    InvalidTxnStateError,
    PartitionOutOfRangeError,
    RaystreamError,
    RaystreamTimeoutError,
    RecordTooLargeError,
    UnknownMemberIdError,
)
from raystream.groups.offsets_topic import OFFSETS_TOPIC, OffsetAndMetadata, offset_records
from raystream.records import batch_from_table
from raystream.requests import TxnOffsetCheckRequest
from raystream.types import ConsumerGroupMetadata, RecordMetadata, TopicPartition

logger = logging.getLogger(__name__)


class Producer:
    """Sends records to topics (kafka-python's ``KafkaProducer``); thread-safe.

    Per partition, records land in the order ``send()`` was called (across threads,
    in the order the calls took the accumulator's lock). Future callbacks run on the
    producer's I/O thread: keep them short; ``flush``, ``close`` and ``send_batch``
    from a callback raise IllegalStateError, and a ``send()`` from one that must wait
    for ``buffer_memory`` stalls delivery until ``max_block_ms``.

    Args:
        cluster: the cluster to produce to; None means :func:`raystream.connect`.
        acks: 0, 1 or "all" (-1); see :class:`~raystream.config.ProducerConfig` for this
            and every other option, which keep Kafka's names in snake_case.
        max_block_ms: how long ``send()`` waits for ``buffer_memory`` to free up.
        **options: further :class:`~raystream.config.ProducerConfig` options, also
            under Kafka's dotted names (``**{"linger.ms": 10}``).

    Raises:
        InvalidRequestError: ``acks`` is not one of 0, 1, "all", -1.
        InvalidConfigError: another option is invalid or unknown (the message names it,
            and the closest known option when there is one).
    """

    def __init__(
        self,
        cluster: Cluster | None = None,
        *,
        acks: int | str = "all",
        linger_ms: int = 5,
        batch_size: int = 65_536,
        compression_type: str | None = None,
        enable_idempotence: bool = True,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60_000,
        retries: int = 2_147_483_647,
        delivery_timeout_ms: int = 120_000,
        request_timeout_ms: int = 30_000,
        max_request_size: int = 1_048_576,
        partitioner: Callable[..., int] | None = None,
        key_serializer: Callable[[Any], bytes] | None = None,
        value_serializer: Callable[[Any], Any] | None = None,
        max_in_flight_requests_per_connection: int = 5,
        retry_backoff_ms: int = 100,
        buffer_memory: int = 33_554_432,
        max_block_ms: int = 60_000,
        metadata_max_age_ms: int = 300_000,
        **options: Any,
    ) -> None:
        config = ProducerConfig(
            acks=acks,
            linger_ms=linger_ms,
            batch_size=batch_size,
            compression_type=compression_type,
            enable_idempotence=enable_idempotence,
            transactional_id=transactional_id,
            transaction_timeout_ms=transaction_timeout_ms,
            retries=retries,
            delivery_timeout_ms=delivery_timeout_ms,
            request_timeout_ms=request_timeout_ms,
            max_request_size=max_request_size,
            partitioner=partitioner,
            key_serializer=key_serializer,
            value_serializer=value_serializer,
            max_in_flight_requests_per_connection=max_in_flight_requests_per_connection,
            retry_backoff_ms=retry_backoff_ms,
            buffer_memory=buffer_memory,
            max_block_ms=max_block_ms,
            metadata_max_age_ms=metadata_max_age_ms,
        ).with_options(options)
        self.config = config
        self.cluster = resolve_cluster(cluster)
        self._partitioner = resolve_partitioner(config.partitioner)
        self._by_marker = (
            isinstance(self._partitioner, DefaultPartitioner)
            and type(self._partitioner).partition is DefaultPartitioner.partition
        )
        self._key_serializer = config.key_serializer
        self._value_serializer = config.value_serializer
        self._max_request_size = config.max_request_size
        self._topics = TopicCache(self.cluster)
        self._infos = self._topics._infos  # read-only fast path for send()
        self._accumulator = RecordAccumulator(
            config.batch_size,
            config.linger_ms,
            config.buffer_memory,
            time.monotonic,
            config.max_block_ms,
            config.max_request_size,
        )
        self._append = self._accumulator.append
        self._sender = Sender(
            self._accumulator, self._topics, self._partitioner, config, time.monotonic
        )
        self._txn: TransactionManager | None = None
        if config.transactional_id is not None:
            self._txn = self._sender.transaction = TransactionManager(
                self.cluster,
                config.transactional_id,
                config.transaction_timeout_ms,
                config.request_timeout_ms,
            )
        self._closed = False
        self._close_lock = threading.Lock()
        self._sender.start()

    # ---------------------------------------------------------------------- send

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: list[tuple[str, bytes]] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> FutureRecordMetadata:
        """Buffer one record for ``topic``; return the future of its RecordMetadata.

        ``value`` is bytes (or bytearray/memoryview) or None (a tombstone) for a byte
        topic, or a dict of the schema's fields for a typed topic (missing nullable
        fields are null); ``key`` is bytes or None. Serializers, when configured, are
        applied first (not to None). Blocks only when ``buffer_memory`` is full.

        Raises:
            InvalidTopicError: ``topic`` is internal (``__consumer_offsets``, ...).
            UnknownTopicOrPartitionError: no such topic.
            PartitionOutOfRangeError: ``partition`` is negative or not below the
                topic's partition count (checked against fresh metadata).
            InvalidRecordError: the value or key has the wrong type or fields.
            InvalidRequestError: a bad ``headers``, ``partition`` or ``timestamp_ms``.
            RecordTooLargeError: the record exceeds ``max_request_size``.
            RaystreamTimeoutError: no buffer space within ``max_block_ms``.
            IllegalStateError: the producer is closed.
            InvalidTxnStateError: a transactional producer has no open transaction.
        """
        if self._closed:
            raise IllegalStateError("send() after the producer was closed")
        txn = self._txn
        if txn is not None:
            txn.require_open("send")
        if key is not None and self._key_serializer is not None:
            key = self._key_serializer(key)
        if value is not None and self._value_serializer is not None:
            value = self._value_serializer(value)
        info = self._infos.get(topic)
        if info is None:  # the first send to a topic: checked once, then cached
            check_not_internal(topic, "produce to")
            info = self._topic(topic)
        if info.value_fields is None:
            if type(value) is bytes:
                size = len(value) + RECORD_OVERHEAD_BYTES
            elif value is None:
                size = RECORD_OVERHEAD_BYTES
            elif isinstance(value, (bytearray, memoryview)):
                value = bytes(value)
                size = len(value) + RECORD_OVERHEAD_BYTES
            else:
                raise InvalidRecordError(
                    f"value must be bytes (or bytearray/memoryview) or None for byte topic "
                    f"{topic!r}, not {type(value).__name__} {value!r:.60}; set a "
                    "value_serializer to send other types"
                )
        else:
            size = _typed_value_size(info, value) + RECORD_OVERHEAD_BYTES
        if key is not None:
            if type(key) is not bytes:
                if not isinstance(key, (bytearray, memoryview)):
                    raise InvalidRecordError(
                        f"key must be bytes (or bytearray/memoryview) or None, not "
                        f"{type(key).__name__} {key!r:.60}; set a key_serializer to send "
                        "other types"
                    )
                key = bytes(key)
            size += len(key)
        if headers is not None:
            headers, header_bytes = _check_headers(headers)
            size += header_bytes
        if partition is None:
            if self._by_marker:
                part = STICKY if key is None else BY_KEY
            else:
                part = self._custom_partition(info, key)
        elif type(partition) is int and 0 <= partition < info.num_partitions:
            part = partition
        else:
            part = self._check_partition(topic, partition)
        if timestamp_ms is None:
            timestamp_ms = time.time_ns() // 1_000_000
        elif type(timestamp_ms) is not int or timestamp_ms < 0:
            timestamp_ms = _check_timestamp(timestamp_ms)
        if size > self._max_request_size:
            raise RecordTooLargeError(
                f"a record of about {size} bytes for topic {topic!r} exceeds "
                f"max_request_size={self._max_request_size}"
            )
        future = self._append(
            topic, key, value, timestamp_ms, part, size, headers, info.num_partitions
        )
        if txn is not None:
            txn.track(future._result)
        return future

    def _topic(self, topic: str) -> TopicInfo:
        if not isinstance(topic, str):
            raise InvalidRequestError(
                f"topic must be a string, not {type(topic).__name__} {topic!r:.60}"
            )
        return self._topics.get(topic)  # not cached: asks the controller

    def _check_partition(self, topic: str, partition: Any) -> int:
        if isinstance(partition, bool) or not isinstance(partition, (int, np.integer)):
            raise InvalidRequestError(
                f"partition must be an int or None, not {type(partition).__name__} "
                f"{partition!r:.60}"
            )
        partition = int(partition)
        info = self._topics.cached(topic) or self._topics.get(topic)
        if partition >= info.num_partitions:
            info = self._topics.refresh(topic)  # the topic may have grown
        if not 0 <= partition < info.num_partitions:
            raise PartitionOutOfRangeError.of(topic, partition, info.num_partitions)
        return partition

    def _custom_partition(self, info: TopicInfo, key: bytes | None) -> int:
        try:
            return self._partitioner.partition(
                info.name, key, info.all_partitions, list(info.available_partitions)
            )
        except (TypeError, ValueError) as error:
            raise InvalidRequestError(f"partitioner failed: {error}") from None

    # ---------------------------------------------------------------- send_batch

    def send_batch(
        self,
        topic: str,
        table: pa.Table | pa.RecordBatch,
        partition: int | None = None,
        key_column: str | None = None,
        *,
        wait: bool = True,
    ) -> list[RecordMetadata]:
        """Produce a whole Arrow table (or record batch); block until acknowledged.

        A byte topic takes columns ``value`` and optional ``key``, ``headers``,
        ``timestamp``; a typed topic takes its schema's columns (see
        :func:`raystream.records.batch_from_table`). Rows go to ``partition`` if given;
        else rows with a key (``key_column``, or a ``key`` column) go to Kafka's
        murmur2 partition and rows without one to the sticky partition; a table with
        no keys at all is cut into contiguous slices spread round-robin over the
        partitions (slices of about ``batch_size`` bytes or more). Each partition's
        rows keep their table order; requests stay under ``max_request_size`` and are
        sent concurrently, retried like ``send()``'s.

        Records ``send()`` buffered before this call are sent before it.

        ``wait=False`` (a transactional producer only) returns at once, with no
        metadata: the table's requests go out like ``send()``'s records, ``flush()``
        waits for them, and ``commit_transaction()`` raises if one failed (the
        transaction must then abort). A consume-transform-produce loop keeps
        processing meanwhile, e.g. while the first batches of a transaction wait at
        their partitions for the markers of the one before.

        Returns:
            One RecordMetadata per request, not per row (millions of objects would
            defeat bulk produce): the request's partition, the offset of its first row
            (the request's rows follow at consecutive offsets, in partition order of
            the table's rows), and that row's timestamp. Offsets are -1 with acks=0.

        Raises:
            InvalidTopicError: ``topic`` is internal (``__consumer_offsets``, ...).
            InvalidRecordError: the table does not fit the topic's layout.
            UnknownTopicOrPartitionError: no such topic.
            PartitionOutOfRangeError: ``partition`` is not one of the topic's.
            RaystreamError: a request failed (earlier ones may have been written).
            IllegalStateError: the producer is closed.
            InvalidRequestError: ``wait=False`` on a producer without transactions.
        """
        check_not_internal(topic, "produce to")
        if not wait and self._txn is None:
            raise InvalidRequestError(
                "send_batch(wait=False) needs a transactional producer (its commit checks "
                "every request); without one, wait for the acknowledgements"
            )
        return self._send_batch(topic, table, partition, key_column, wait)

    def _send_batch(
        self,
        topic: str,
        table: pa.Table | pa.RecordBatch,
        partition: int | None = None,
        key_column: str | None = None,
        wait: bool = True,
    ) -> list[RecordMetadata]:
        """:meth:`send_batch` without the internal-topic check: this producer's own
        offsets go to ``__consumer_offsets`` through here, as records of its transaction."""
        if self._closed:
            raise IllegalStateError("send_batch() after the producer was closed")
        self._not_from_a_callback("send_batch")
        if self._txn is not None:
            self._txn.require_open("send_batch")
        info = self._topic(topic)
        now_ms = time.time_ns() // 1_000_000
        batch = batch_from_table(table, info.record_schema, key_column, now_ms)
        rows = batch.num_rows
        if rows == 0:
            return []
        result = self._accumulator.bulk_result(topic)
        created = time.monotonic()
        per_request = rows_per_request(batch, self._max_request_size)
        keys = batch.column("key")
        if partition is not None:
            parts = np.full(rows, self._check_partition(topic, partition), dtype=np.int32)
            requests, _ = split_by_partition(batch, parts, topic, result, created, per_request)
        elif keys.null_count == rows:
            requests = self._spread(batch, info, result, created)
        else:
            if self._by_marker:
                parts = np.where(keys.is_valid().to_numpy(zero_copy_only=False), BY_KEY, STICKY)
                parts = assign_partitions(parts.astype(np.int32), keys, info, self._partitioner)
            else:
                parts = np.fromiter(
                    (self._custom_partition(info, k) for k in keys.to_pylist()),
                    dtype=np.int32,
                    count=rows,
                )
            requests, _ = split_by_partition(batch, parts, topic, result, created, per_request)
        first_timestamps = [
            r.batch.column("timestamp")[0 if r.indices is None else int(r.indices[0])].as_py()
            for r in requests
        ]
        result.set_requests(requests)
        if self._txn is not None:
            self._txn.track(result)
        self._accumulator.add_bulk(BulkJob(topic, result, requests))
        if not wait:
            return []
        while not result.done.wait(1.0):
            if not self._sender.is_alive():
                raise IllegalStateError("the producer's sender stopped; records not sent")
        for request in requests:
            if request.error is not None:
                raise request.error
        return [
            RecordMetadata(
                topic,
                r.partition,
                r.base_offset,
                r.log_append_time if r.log_append_time != -1 else ts,
            )
            for r, ts in zip(requests, first_timestamps, strict=True)
        ]

    def _spread(
        self, batch: pa.RecordBatch, info: TopicInfo, result: ProduceResult, created: float
    ) -> list[ProduceRequest]:
        """Keyless table: contiguous slices, round-robin from the sticky partition."""
        rows = batch.num_rows
        slices = max(
            math.ceil(rows / rows_per_request(batch, self._max_request_size)),
            min(
                info.num_partitions,
                math.ceil(rows / rows_per_request(batch, self.config.batch_size)),
            ),
        )
        start = self._partitioner.partition(
            info.name, None, info.all_partitions, list(info.available_partitions)
        )
        self._partitioner.on_new_batch(info.name, start)
        per_slice = math.ceil(rows / slices)
        return [
            ProduceRequest(
                info.name,
                (start + j) % info.num_partitions,
                batch.slice(lo, per_slice),
                result,
                lo,
                created,
            )
            for j, lo in enumerate(range(0, rows, per_slice))
        ]

    # ------------------------------------------------------------ flush / close

    def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered now and wait until it is acknowledged or failed.

        Records sent by other threads during the flush are not waited for.

        Raises:
            RaystreamTimeoutError: not all done within ``timeout`` seconds.
        """
        self._not_from_a_callback("flush")
        results = self._accumulator.begin_flush()
        try:
            _wait_all(results, timeout, "flush")
        finally:
            self._accumulator.end_flush()

    def close(self, timeout: float | None = None) -> None:
        """Send what is buffered, wait for it, and stop the sender thread.

        After ``timeout`` seconds, records still pending fail with
        RaystreamTimeoutError instead (close itself does not raise). Idempotent. A
        transactional producer also ends the transaction its last end carried (see
        :meth:`commit_transaction`).
        """
        self._not_from_a_callback("close")
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._accumulator.close()
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            _wait_all(self._accumulator.incomplete(), timeout, "close")
        except RaystreamTimeoutError as error:
            logger.warning("producer closed with records pending: %s", error)
            self._sender.abort(error)
        remaining = None if deadline is None else max(deadline - time.monotonic(), 0.1)
        self._sender.join(remaining)
        if self._sender.is_alive():
            self._sender.abort(IllegalStateError("the producer was closed"))
            self._sender.join(5)
        if self._txn is not None:
            self._txn.close()

    def _not_from_a_callback(self, what: str) -> None:
        if threading.current_thread() is self._sender:
            raise IllegalStateError(
                f"{what}() from a producer callback would wait for the thread running it"
            )

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # ----------------------------------------------------------------- metrics

    def metrics(self) -> dict[str, float]:
        """The producer's metrics under Kafka's names (``producer-metrics``).

        Counted per produce call by the I/O thread, so reading them costs nothing on the
        send path. Rates are per second and latencies in ms, over Kafka's window (the
        last 30 to 60 s; NaN for an average with nothing in it); ``*-total`` counts
        since the producer was made:

        - ``record-send-rate`` / ``-total``: records sent (a resend counts again, as
          in Kafka); ``record-retry-rate`` / ``-total``: records resent;
          ``record-error-rate`` / ``-total``: records that failed for good.
        - ``request-rate`` / ``-total``, ``response-rate`` / ``-total``,
          ``request-latency-avg`` / ``-max`` (a produce call's round trip),
          ``records-per-request-avg``, ``request-size-avg`` / ``-max`` and
          ``batch-size-avg`` / ``-max`` (bytes per call: a call carries one batch of
          one partition), ``outgoing-byte-rate`` / ``-total``,
          ``record-queue-time-avg`` / ``-max`` (ms the oldest record of a call waited).
        - ``produce-throttle-time-avg`` / ``-max``: ms the producer held its calls back
          after each call, while a ``producer_byte_rate`` quota applies to its
          ``client_id`` (NaN while none does; see :mod:`raystream.client.quotas`).
        - ``buffer-total-bytes`` (``buffer_memory``), ``buffer-available-bytes``,
          ``requests-in-flight``.
        """
        accumulator = self._accumulator
        return self._sender.metrics.snapshot(
            time.monotonic(),
            **{
                "buffer-total-bytes": accumulator.buffer_memory,
                "buffer-available-bytes": accumulator.buffer_memory - accumulator.buffered_bytes,
                "requests-in-flight": len(self._sender._in_flight),
            },
        )

    # ---------------------------------------------------------------- metadata

    def partitions_for(self, topic: str) -> set[int]:
        """The partition numbers of ``topic`` (kafka-python's ``partitions_for``)."""
        return set(range(self._topic(topic).num_partitions))

    # ------------------------------------------------------------ transactions

    def init_transactions(self) -> None:
        """Register the ``transactional_id``: get the producer id and a new epoch.

        Fences every older producer with the same transactional id (their transaction
        calls and writes fail with ProducerFencedError from now on) and has the
        coordinator abort the transaction one of them left open. Call once, first.

        Raises:
            InvalidTxnStateError: not a transactional producer, or called twice.
        """
        txn = self._require_txn("init_transactions")
        self._sender.set_producer(*txn.init())

    def begin_transaction(self) -> None:
        """Start a transaction: what is sent from now on belongs to it.

        Raises:
            InvalidTxnStateError: not initialized, or a transaction is already open.
            ProducerFencedError: a newer producer took the transactional id.
        """
        self._require_txn("begin_transaction").begin()

    def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, Any], group_id: str | ConsumerGroupMetadata
    ) -> None:
        """Commit consumer offsets as part of the transaction (consume-transform-produce).

        ``offsets`` maps partitions to the next offset to read (an int, or an
        ``(offset, metadata)`` pair); ``group_id`` is the consumer group, or better the
        consumer's :meth:`~raystream.Consumer.group_metadata`, with which the group
        coordinator first checks that the consumer is still a member of the current
        generation, so a zombie consumer's offsets never commit (KIP-447); the metadata
        of a consumer outside the membership (one using ``assign()``) is accepted only
        while the group has no members, the rule of ``Consumer.commit``. The offsets
        are written by this producer, as records of the transaction, to the group's
        ``__consumer_offsets`` partition: they commit or abort with the output.

        Raises:
            InvalidTxnStateError: no open transaction.
            InvalidRequestError: a bad offset or group (the message names it).
            CommitFailedError: the consumer is no longer a member of that generation,
                or it is outside the membership of a group that has members (the
                transaction must be aborted).
        """
        txn = self._require_txn("send_offsets_to_transaction")
        txn.require_open("send_offsets_to_transaction")
        if isinstance(group_id, ConsumerGroupMetadata):
            metadata, group = group_id, group_id.group_id
        else:
            metadata, group = None, group_id
        if not isinstance(group, str) or not group:
            raise InvalidRequestError(f"group_id {group_id!r} must be a non-empty string")
        committed = _offsets_to_commit(offsets)
        if not committed:
            return
        try:
            partition = txn.add_offsets(group)
            self._send_batch(OFFSETS_TOPIC, offset_records(group, committed), partition=partition)
            if metadata is not None:
                # Checked once the offsets are written, not before: from then on a new
                # owner's offset fetch waits for this transaction, so a rebalance either
                # happened before this check (refused here) or sees these offsets.
                self._check_txn_offsets(metadata)
        except RaystreamError as error:
            txn.fail(error)
            raise

    def _check_txn_offsets(self, metadata: ConsumerGroupMetadata) -> None:
        """Ask the group coordinator whether the consumer may commit (KIP-447); its
        refusal becomes CommitFailedError, as ``Consumer.commit`` raises."""
        try:
            self.cluster.coordinator_call(
                TxnOffsetCheckRequest(metadata.group_id, metadata.member_id, metadata.generation_id)
            )
        except (IllegalGenerationError, UnknownMemberIdError) as error:
            raise CommitFailedError(str(error)) from None

    def commit_transaction(self) -> None:
        """Send everything buffered, then commit the transaction everywhere at once.

        Returns once the coordinator has persisted the decision to commit: the
        transaction is committed and can no longer abort, but its commit markers are
        written in the background, so read_committed consumers see its records a few
        milliseconds later, once each partition has its marker (Kafka's contract too).
        The next transaction is already open then, on the partitions this one wrote,
        under the next producer epoch: a loop that writes the same partitions makes no
        coordinator call before its next commit, and its first batches wait at each
        partition for the marker there.
        If no ``begin_transaction()`` takes it within a second (a tenth of
        ``transaction_timeout_ms`` if less), the producer ends it in the background.

        Raises:
            InvalidTxnStateError: no open transaction (or it must be aborted).
            RaystreamError: a send of the transaction failed; abort it.
            ProducerFencedError: a newer producer took the transactional id, or the
                coordinator aborted the transaction after ``transaction_timeout_ms``.
        """
        txn = self._require_txn("commit_transaction")
        txn.begin_end(commit=True)
        self.flush()
        if txn.end(commit=True):
            self._sender.set_producer(txn.producer_id, txn.producer_epoch)

    def abort_transaction(self) -> None:
        """Abort the transaction: its records stay invisible to read_committed consumers.

        Waits for the batches in flight first; returns once the decision to abort is
        persisted (the abort markers follow in the background). After a failed send
        the producer takes a new epoch, so the next transaction's sequences start
        afresh.

        Raises:
            InvalidTxnStateError: no open transaction.
            ProducerFencedError: a newer producer took the transactional id.
        """
        txn = self._require_txn("abort_transaction")
        txn.begin_end(commit=False)
        self.flush()
        if txn.end(commit=False):
            self._sender.set_producer(txn.producer_id, txn.producer_epoch)

    def _require_txn(self, what: str) -> TransactionManager:
        self._not_from_a_callback(what)
        if self._txn is None:
            raise InvalidTxnStateError(
                f"{what}() needs a transactional producer: create it with transactional_id"
            )
        if self._closed:
            raise IllegalStateError(f"{what}() after the producer was closed")
        return self._txn

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"Producer({self.cluster!r}, acks={self.config.acks}, {state})"


# ------------------------------------------------------------------------- helpers


def _offsets_to_commit(offsets: Any) -> dict[TopicPartition, OffsetAndMetadata]:
    """Validated ``{TopicPartition: offset | (offset, metadata)}`` as commit records."""
    if not isinstance(offsets, Mapping):
        raise InvalidRequestError(
            f"offsets must be a dict {{TopicPartition: offset}}, not {type(offsets).__name__}"
        )
    now_ms = time.time_ns() // 1_000_000
    committed = {}
    for tp, value in offsets.items():
        offset, metadata = value if isinstance(value, tuple) else (value, "")
        offset = getattr(offset, "offset", offset)
        if (
            not isinstance(tp, TopicPartition)
            or not isinstance(offset, int)
            or isinstance(offset, bool)
            or offset < 0
            or not isinstance(metadata, str)
        ):
            raise InvalidRequestError(
                f"offsets: {tp!r} -> {value!r} must be a TopicPartition and an offset >= 0"
            )
        committed[tp] = OffsetAndMetadata(offset, metadata, now_ms)
    return committed


def _typed_value_size(info: TopicInfo, value: Any) -> int:
    """Check a typed topic's value cheaply (a mapping of known fields); its rough size.

    Field types are checked when the batch is built; a value that fails there fails
    only its own future.
    """
    if value is None:
        return 0
    if not isinstance(value, Mapping):
        raise InvalidRecordError(
            f"value for typed topic {info.name!r} must be a dict of its fields "
            f"{sorted(info.value_fields or ())}, not {type(value).__name__} {value!r:.60}"
        )
    names = value.keys()
    unknown = names - info.value_fields
    if unknown:
        raise InvalidRecordError(
            f"value has fields {sorted(map(str, unknown))} that topic {info.name!r} does not "
            f"have; its fields are {sorted(info.value_fields)}"
        )
    missing = info.required_fields - names
    if missing:
        raise InvalidRecordError(
            f"value lacks the non-nullable fields {sorted(missing)} of topic {info.name!r}"
        )
    size = 0
    for field in value.values():
        size += len(field) if isinstance(field, (bytes, str)) else 8
    return size


def _check_headers(headers: Any) -> tuple[list[tuple[str, bytes | None]], int]:
    if not isinstance(headers, (list, tuple)):
        raise InvalidRequestError(
            f"headers must be a list of (str, bytes) pairs, not {type(headers).__name__}"
        )
    checked = []
    size = 0
    for header in headers:
        if (
            not isinstance(header, (tuple, list))
            or len(header) != 2
            or not isinstance(header[0], str)
            or not (header[1] is None or isinstance(header[1], (bytes, bytearray, memoryview)))
        ):
            raise InvalidRequestError(
                f"header {header!r:.80} must be a (str, bytes) pair; headers: {headers!r:.200}"
            )
        value = header[1] if header[1] is None or type(header[1]) is bytes else bytes(header[1])
        checked.append((header[0], value))
        size += len(header[0]) + (0 if value is None else len(value)) + 8
    return checked, size


def _check_timestamp(timestamp_ms: Any) -> int:
    if isinstance(timestamp_ms, bool) or not isinstance(timestamp_ms, (int, np.integer)):
        raise InvalidRequestError(
            f"timestamp_ms must be an int (ms since the epoch) or None, not "
            f"{type(timestamp_ms).__name__}"
        )
    if timestamp_ms < 0:
        raise InvalidRequestError(f"timestamp_ms={timestamp_ms} must be >= 0")
    return int(timestamp_ms)


def _wait_all(results: list[ProduceResult], timeout: float | None, what: str) -> None:
    deadline = None if timeout is None else time.monotonic() + timeout
    for result in results:
        remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        if not result.done.wait(remaining):
            pending = sum(1 for r in results if not r.done.is_set())
            raise RaystreamTimeoutError(
                f"{what}: {pending} batch(es) not acknowledged within {timeout} s"
            )


__all__ = ["FutureRecordMetadata", "Producer"]
