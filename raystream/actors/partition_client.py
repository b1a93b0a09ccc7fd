"""The server actors' client for partitions: produce, fetch, list offsets, write markers.

The coordinators keep their state in internal topics (``__consumer_offsets``,
``__transaction_state``), and the transaction coordinator writes markers to the
partitions of a transaction. They need one request at a time to one partition's
leader, answered or failed within a deadline: no batching, no buffers, no background
threads, no consumer positions. A full :class:`~raystream.client.producer.Producer` or
:class:`~raystream.client.consumer.Consumer` brings all of that (threads, a sender
loop, a fetcher) and the whole client package, which itself imports this package to
start the controller: an import circle between ``actors`` and ``client``. This client
is what a server actor needs instead:

- a cache of each partition's leader (its handle, from the controller's metadata),
  dropped when an answer says it is stale (NotLeader, a dead actor, ...);
- retries of retriable errors after a metadata refresh, with a growing backoff,
  bounded by the caller's deadline;
- an ``acks=all`` produce of an Arrow batch, a fetch from an offset (read_committed on
  request), the earliest or latest offset, and the transaction marker write;
- the controller's metadata, which the coordinators also read for partition counts.

It lives in ``actors`` because it reaches Ray (it awaits Ray calls and finds the
controller by name) and only server actors use it. Every call to a replica goes through
:meth:`PartitionClient._call`, the one place that names a replica method.

Not thread-safe: it belongs to one async actor's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pyarrow as pa
import ray

from raystream.errors import (
    BrokerNotAvailableError,
    CoordinatorNotAvailableError,
    LeaderNotAvailableError,
    RaystreamError,
    RaystreamTimeoutError,
    UnknownTopicOrPartitionError,
)
from raystream.log.batch import BatchEncoder
from raystream.protocol import (
    CONTROLLER_NAME,
    FetchResponse,
    Response,
    Result,
    TopicMetadata,
    failure,
)
from raystream.requests import (
    FetchRequest,
    ListOffsetsRequest,
    PartitionRequest,
    ProduceRequest,
    Request,
    WriteTxnMarkerRequest,
)
from raystream.retry import Backoff
from raystream.transport import CALL_ERRORS, DEAD_ACTOR_ERRORS, LoopRoutes
from raystream.types import TopicPartition

logger = logging.getLogger(__name__)

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
FETCH_MAX_BYTES = 8 << 20
"""What one fetch may return: an internal partition is read in a few calls at most."""


BACKOFF_MS = (50, 1000)
"""First and longest pause between attempts (:class:`~raystream.retry.Backoff`)."""


class PartitionClient:
    """Requests from a server actor to partition leaders, retried within a deadline.

    Args:
        namespace: the cluster's namespace; the controller is found there by name.
    """

    def __init__(self, namespace: str) -> None:
        self._namespace = namespace
        self._controller: Any = None
        self._metadata: dict[str, TopicMetadata] = {}
        self._leaders: dict[TopicPartition, Any] = {}
        self._encoder = BatchEncoder()
        self._routes = LoopRoutes()

    # ------------------------------------------------------------------ metadata

    async def controller_call(self, method: str, *args: Any, timeout_s: float = 60.0) -> Any:
        """Call a controller method; its value, or its error raised.

        While the controller restarts (Ray brings it back after a crash) the call is
        retried until ``timeout_s``, looking the controller up by name again.

        Raises:
            BrokerNotAvailableError: no controller answered within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        backoff = Backoff(*BACKOFF_MS)
        while True:
            try:
                if self._controller is None:
                    self._controller = await asyncio.to_thread(
                        ray.get_actor, CONTROLLER_NAME, namespace=self._namespace
                    )
                answer = await asyncio.wait_for(
                    getattr(self._controller, method).remote(*args),
                    max(deadline - time.monotonic(), 0.001),
                )
                break
            except (ValueError, TimeoutError, *DEAD_ACTOR_ERRORS) as error:  # gone, restarting
                self._controller = None
                pause = backoff.next_s()
                if time.monotonic() + pause >= deadline:
                    raise BrokerNotAvailableError(
                        f"the controller of namespace {self._namespace!r} did not answer "
                        f"{method} within {timeout_s} s: {error}"
                    ) from None
                await asyncio.sleep(pause)
        return answer.unwrap() if isinstance(answer, Result) else answer

    async def topic_metadata(self, topic: str, refresh: bool = False) -> TopicMetadata:
        """The topic's metadata (cached; asked of the controller when missing or with
        ``refresh``).

        Raises:
            UnknownTopicOrPartitionError: the topic does not exist.
        """
        cached = self._metadata.get(topic)
        if cached is not None and not refresh:
            return cached
        (metadata,) = await self.controller_call("metadata", [topic])
        self._metadata[topic] = metadata
        for partition in metadata.partitions:  # the leaders are as fresh as the metadata
            tp = TopicPartition(topic, partition.partition)
            if partition.leader_handle is None:
                self._leaders.pop(tp, None)
            else:
                self._leaders[tp] = partition.leader_handle
        return metadata

    async def _leader(self, tp: TopicPartition) -> Any:
        """The partition leader's handle (cached).

        Raises:
            UnknownTopicOrPartitionError: no such partition.
            LeaderNotAvailableError: the partition has no leader right now.
        """
        leader = self._leaders.get(tp)
        if leader is not None:
            return leader
        metadata = await self.topic_metadata(tp.topic, refresh=True)
        if not 0 <= tp.partition < len(metadata.partitions):
            raise UnknownTopicOrPartitionError(f"{tp.topic}-{tp.partition} does not exist")
        leader = metadata.partitions[tp.partition].leader_handle
        if leader is None:
            raise LeaderNotAvailableError(f"{tp.topic}-{tp.partition} has no leader")
        return leader

    # ------------------------------------------------------------------ requests

    async def produce(
        self,
        tp: TopicPartition,
        batch: pa.RecordBatch,
        timeout_s: float,
        writer: str | None = None,
    ) -> int:
        """Append ``batch`` (the topic's stored layout) with ``acks=all``; its base offset.
        An internal topic takes it only from a trusted ``writer`` (see
        :data:`raystream.requests.INTERNAL_WRITERS`).

        Sent as an Arrow IPC stream, as producers send theirs (a pickled one-row batch
        costs more to carry). Retried until ``timeout_s`` passes. Not idempotent: a
        retry after a lost answer may append the batch twice, which the internal topics'
        records allow (each is the latest state of its key, written again); callers
        serialize the writes of one key so that a repeat never lands after a newer
        record of it.

        Raises:
            RaystreamTimeoutError: not acknowledged within ``timeout_s``.
            RaystreamError: a non-retriable refusal.
        """
        data = b"".join(self._encoder.payload(batch, None))
        deadline = time.monotonic() + timeout_s
        request = ProduceRequest(
            tp.topic, tp.partition, data, "all", int(timeout_s * 1000), internal_writer=writer
        )
        answer = await self._request(tp, deadline, request)
        return answer.base_offset

    async def fetch(
        self,
        tp: TopicPartition,
        offset: int,
        isolation_level: str = "read_uncommitted",
        timeout_s: float = 30.0,
    ) -> FetchResponse:
        """What the leader holds from ``offset`` below its high watermark (its last
        stable offset for ``read_committed``), without waiting for more.

        Raises:
            OffsetOutOfRangeError: ``offset`` is outside the partition's log.
            RaystreamTimeoutError: no answer within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        request = FetchRequest(
            tp.topic, tp.partition, offset, FETCH_MAX_BYTES, 0, 1, isolation_level
        )
        return await self._request(tp, deadline, request)

    async def list_offset(
        self,
        tp: TopicPartition,
        timestamp: int,
        isolation_level: str = "read_uncommitted",
        timeout_s: float = 30.0,
    ) -> int:
        """The partition's earliest (:data:`EARLIEST_TIMESTAMP`) or latest
        (:data:`LATEST_TIMESTAMP`: the high watermark, or the last stable offset for
        ``read_committed``) offset.

        Raises:
            RaystreamTimeoutError: no answer within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        request = ListOffsetsRequest(tp.topic, tp.partition, timestamp, isolation_level)
        answer = await self._request(tp, deadline, request)
        return answer.offset

    async def write_txn_marker(
        self,
        tp: TopicPartition,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        timeout_ms: int,
    ) -> RaystreamError | None:
        """One attempt at a transaction marker on the partition (acks=all): its error,
        None once the ISR has it. A stale leader is forgotten, so that the caller's next
        attempt (its own retry policy: a marker is retried until written) finds the new
        one."""
        request = WriteTxnMarkerRequest(
            tp.topic,
            tp.partition,
            producer_id,
            producer_epoch,
            commit,
            coordinator_epoch,
            timeout_ms,
        )
        return (await self.send_once(request)).error()

    async def send_once(self, request: PartitionRequest) -> Response:
        """One attempt of ``request`` at its partition's leader: the answer, a failure to
        reach the leader answered as its error code. A stale leader is forgotten on a
        retriable error, so that the next attempt (the caller's policy) finds the new
        one. The Kafka listener forwards clients' requests this way: Kafka clients retry
        themselves, after refreshing their metadata."""
        return await (await self.send_in_order([request]))[0]

    async def send_in_order(self, requests: list[PartitionRequest]) -> list[Awaitable[Response]]:
        """Send ``requests`` one attempt each, in this order, once every leader is known;
        the awaitable answers (as :meth:`send_once`'s).

        Every request leaves this process before this returns, in list order and with
        no wait in between, so that a caller that serializes its calls (the Kafka
        listener, for one connection's produce requests) keeps their order on the way
        to each leader (one connection per leader, read in order there).
        """
        leaders: list[Any] = []
        for request in requests:
            tp = TopicPartition(request.topic, request.partition)
            try:
                leaders.append(await self._leader(tp))
            except RaystreamError as failed:
                leaders.append(failure(failed, request.response))
        answers = []
        for request, leader in zip(requests, leaders, strict=True):
            if isinstance(leader, Response):
                answers.append(self._settled(request, leader))
            else:
                answers.append(self._answer(request, self._routes.send(leader, request)))
        return answers

    async def _answer(self, request: PartitionRequest, sent: Any) -> Response:
        try:
            answer = await sent
        except CALL_ERRORS as error:  # dead, restarting, unreachable, or the call lost
            answer = failure(
                BrokerNotAvailableError(f"{type(request).__name__} to the leader failed: {error}"),
                request.response,
            )
        return await self._settled(request, answer)

    async def _settled(self, request: PartitionRequest, answer: Response) -> Response:
        """``answer``, having forgotten the leader when it says the leader is stale."""
        error = answer.error()
        if error is not None and (error.invalid_metadata or error.retriable):
            self._leaders.pop(TopicPartition(request.topic, request.partition), None)
        return answer

    async def _request(self, tp: TopicPartition, deadline: float, request: Request) -> Any:
        """Send ``request`` to the leader of ``tp`` until it answers without a
        retriable error or ``deadline`` (a ``time.monotonic()`` value) passes.

        Raises:
            RaystreamTimeoutError: still failing at the deadline (the last error chained).
            RaystreamError: a non-retriable error.
        """
        backoff = Backoff(*BACKOFF_MS)
        while True:
            try:
                leader = await self._leader(tp)
                answer = await self._within(deadline, self._call(leader, request))
                answer.raise_for_error()
                return answer
            except RaystreamError as error:
                if not error.retriable:
                    raise
                if error.invalid_metadata:
                    self._leaders.pop(tp, None)
                pause = backoff.next_s()
                if time.monotonic() + pause >= deadline:
                    raise RaystreamTimeoutError(
                        f"{type(request).__name__} on {tp.topic}-{tp.partition} still "
                        f"failing at its deadline: {error}"
                    ) from error
                logger.debug("%s-%d: retrying after %s", tp.topic, tp.partition, error)
                await asyncio.sleep(pause)

    @staticmethod
    async def _within(deadline: float, answer: Any) -> Any:
        """``answer`` awaited until ``deadline``: a call to an actor that Ray is
        restarting neither answers nor fails until the restart is done.

        Raises:
            RaystreamTimeoutError: no answer by then (retriable).
        """
        try:
            return await asyncio.wait_for(answer, max(deadline - time.monotonic(), 0.001))
        except TimeoutError:
            raise RaystreamTimeoutError("no answer before the deadline") from None

    async def _call(self, leader: Any, request: Request) -> Response:
        """``request`` to ``leader`` over the transport (:func:`~raystream.transport.send`):
        the one place a replica is called.

        Raises:
            BrokerNotAvailableError: the leader died, cannot be reached, or the call was
                lost inside Ray (retriable: the metadata is refreshed first).
        """
        try:
            return await self._routes.send(leader, request)
        except CALL_ERRORS as error:  # dead, restarting, unreachable, or the call lost
            raise BrokerNotAvailableError(
                f"{type(request).__name__} to the leader failed: {error}"
            ) from None


class RetriedLoad:
    """A coordinator's load of its internal topic, awaited before every request.

    The first request starts it and every request waits for the same load; a load that
    failed (its partitions unreachable for too long) is started again by the next
    request, so a coordinator never stays broken after one bad start.
    """

    def __init__(self, load: Callable[[], Awaitable[None]], what: str) -> None:
        self._load = load
        self._what = what
        self._task: asyncio.Future | None = None

    async def wait(self) -> None:
        """Wait for the load, starting it (again) if none is running or done well.

        Raises:
            CoordinatorNotAvailableError: the load failed (retriable), naming ``what``.
        """
        task = self._task
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            self._task = task = asyncio.ensure_future(self._load())
        try:
            await asyncio.shield(task)
        except RaystreamError as error:
            raise CoordinatorNotAvailableError(f"{self._what} yet: {error}") from error


__all__ = ["EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "PartitionClient", "RetriedLoad"]
