"""One Spark partition's rows produced to a topic from Spark's own Python worker.

``rs.spark.write_topic`` runs a :class:`PartitionWriter` in ``mapInArrow``: Spark hands
each task's rows to its Python worker as Arrow batches (the executor's JVM converts them,
as it does for any Arrow UDF), and the worker produces them straight to the partition
leaders over their direct paths (:mod:`raystream.wire`), with the endpoints the driver
looked up. Spark's Python workers are not Ray workers, and this path needs none: the
rows go from the JVM to the worker to the leader, one Arrow batch per call, with no
Ray object store and no driver in between.

How rows are spread: a batch's keyed rows go to Kafka's murmur2 partition of their key
(the partition Java Kafka and ``send_batch`` pick); rows without a key go in contiguous
slices to the partitions in turn, starting from the Spark partition's number, so the
tasks spread over every partition from the first batch on.

Delivery is at least once, as Spark's Kafka sink's is: a few calls stay in flight; any
refused or lost call makes the worker join Ray (seconds, once per worker process, only
then) and send the input batch that call belonged to, and every batch after it, with a
:class:`~raystream.Producer`, which rides through leader changes with its metadata
refreshes and retries. Rows of a batch that had been written in part are then written
again.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from typing import Any

import numpy as np
import pyarrow as pa

from raystream.client.accumulator import rows_per_request
from raystream.client.partitioner import partitions_for_keys
from raystream.dispatch import HANDLE
from raystream.errors import BrokerNotAvailableError, RaystreamError
from raystream.log.batch import BatchEncoder
from raystream.protocol import encode_records
from raystream.records import batch_from_table
from raystream.requests import ProduceRequest
from raystream.transport import outcome
from raystream.wire import Channel, Endpoint

IN_FLIGHT_BATCHES = 4
"""Input batches whose calls may be unanswered at once (about 4 MB at Spark's default
of 10,000 rows per Arrow batch): enough to keep the JVM, this worker and the leaders
busy together."""


@dataclasses.dataclass(frozen=True)
class PartitionWriter:
    """What a Spark task needs to produce its rows (pickled into the task).

    Args:
        topic: the topic written.
        record_schema: the topic's stored layout.
        endpoints: each partition's leader endpoint, by partition number.
        acks, compression_type, max_request_size, request_timeout_ms: the producer
            settings of the write.
        ray_address: the Ray cluster (GCS address) a worker joins to fall back.
        namespace, data_dir: the raystream cluster's.
        producer_config: the options of the fallback producer.
    """

    topic: str
    record_schema: pa.Schema
    endpoints: tuple[Endpoint, ...]
    acks: int
    compression_type: str | None
    max_request_size: int
    request_timeout_ms: int
    ray_address: str
    namespace: str
    data_dir: str
    producer_config: dict[str, Any]

    def write(self, batches: Iterable[pa.RecordBatch], first_partition: int) -> int:
        """Produce every batch (``send_batch``'s columns); the rows written."""
        session = _Session(self, first_partition)
        rows = 0
        try:
            for batch in batches:
                if batch.num_rows:
                    session.send(batch)
                    rows += batch.num_rows
            session.finish()
        finally:
            session.close()
        return rows


class _Session:
    """The calls of one task: direct until one fails, then through a Producer."""

    def __init__(self, writer: PartitionWriter, first_partition: int) -> None:
        self._writer = writer
        self._next = first_partition % len(writer.endpoints)
        self._encoder = BatchEncoder()
        self._pending: collections.deque[tuple[pa.RecordBatch, list[Future]]] = collections.deque()
        self._producer: Any = None

    def send(self, batch: pa.RecordBatch) -> None:
        if self._producer is not None:
            self._producer.send_batch(self._writer.topic, batch)
            return
        try:
            futures = self._direct(batch)
        except BrokerNotAvailableError as error:  # a leader cannot be reached
            self._fall_back(batch, error)
            return
        self._pending.append((batch, futures))
        while len(self._pending) > IN_FLIGHT_BATCHES:
            self._settle_oldest()

    def finish(self) -> None:
        """Wait for every call; batches whose calls failed go through the Producer."""
        while self._pending:
            self._settle_oldest()
        if self._producer is not None:
            self._producer.flush()

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()

    def _direct(self, batch: pa.RecordBatch) -> list[Future]:
        """Send ``batch``'s rows to their partitions' leaders; the calls' futures."""
        writer = self._writer
        now_ms = time.time_ns() // 1_000_000
        records = batch_from_table(batch, writer.record_schema, None, now_ms)
        futures = []
        for partition, rows in self._split(records):
            payload = encode_records(self._encoder, rows)
            futures.append(
                _channel(writer.endpoints[partition]).call(
                    HANDLE,
                    (
                        ProduceRequest(
                            writer.topic,
                            partition,
                            payload,
                            writer.acks,
                            writer.request_timeout_ms,
                            writer.compression_type,
                        ),
                    ),
                )
            )
        return futures

    def _split(self, records: pa.RecordBatch) -> Iterator[tuple[int, pa.RecordBatch]]:
        """(partition, rows) requests of ``records``, each under ``max_request_size``."""
        count = len(self._writer.endpoints)
        keys = records.column("key")
        if keys.null_count == records.num_rows:
            parts = None
        else:
            parts = np.full(records.num_rows, self._next, dtype=np.int32)
            valid = keys.is_valid().to_numpy(zero_copy_only=False)
            parts[valid] = partitions_for_keys(keys.filter(keys.is_valid()), count)
            order = np.argsort(parts, kind="stable")
            records = records.take(pa.array(order))
            parts = parts[order]
        per_request = rows_per_request(records, self._writer.max_request_size)
        if parts is None:
            for start in range(0, records.num_rows, per_request):
                yield self._next, records.slice(start, per_request)
                self._next = (self._next + 1) % count
            return
        bounds = np.searchsorted(parts, np.arange(count + 1))
        for partition in range(count):
            low, high = int(bounds[partition]), int(bounds[partition + 1])
            for start in range(low, high, per_request):
                yield partition, records.slice(start, min(per_request, high - start))
        self._next = (self._next + 1) % count

    def _settle_oldest(self) -> None:
        batch, futures = self._pending.popleft()
        error = _first_error(futures, self._writer.request_timeout_ms / 1000)
        if error is not None:
            self._fall_back(batch, error)

    def _fall_back(self, batch: pa.RecordBatch, error: BaseException) -> None:
        """From now on send through a Producer, starting with ``batch``."""
        if self._producer is None:
            if not getattr(error, "retriable", False):
                raise error
            self._producer = _producer(self._writer)
        self._producer.send_batch(self._writer.topic, batch)


def _first_error(futures: list[Future], timeout_s: float) -> BaseException | None:
    """The first failure among a batch's calls (a refusal, a lost or timed-out call)."""
    for future in futures:
        try:
            answer = outcome(future, timeout_s, "produce")
        except RaystreamError as error:
            return error
        error = answer.error()
        if error is not None:
            return error
    return None


_channels: dict[Endpoint, Channel] = {}
_channels_lock = threading.Lock()


def _channel(endpoint: Endpoint) -> Channel:
    """This worker's connection to ``endpoint`` (Spark reuses its Python workers, so
    later tasks find it open)."""
    with _channels_lock:
        channel = _channels.get(endpoint)
        if channel is None:
            try:
                channel = Channel(endpoint, f"{endpoint.host}:{endpoint.port}", _forget)
            except OSError as error:
                raise BrokerNotAvailableError(
                    f"the leader at {endpoint.host}:{endpoint.port} cannot be reached: {error}"
                ) from None
            _channels[endpoint] = channel
        return channel


def _forget(channel: Channel) -> None:
    with _channels_lock:
        for endpoint, known in list(_channels.items()):
            if known is channel:
                del _channels[endpoint]


def _producer(writer: PartitionWriter) -> Any:
    """A Producer of the cluster, this worker joining Ray for it."""
    from raystream.client.cluster import attach

    cluster = attach(writer.namespace, writer.data_dir, writer.ray_address)
    return cluster.producer(**writer.producer_config)


__all__ = ["PartitionWriter"]
