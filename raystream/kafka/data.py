"""The Kafka data-plane APIs: Produce, Fetch, ListOffsets, OffsetForLeaderEpoch,
DeleteRecords, and InitProducerId (without which an idempotent producer cannot produce).

Each handler turns one Kafka request into raystream's typed requests, one per partition
(:mod:`raystream.requests`), sends them to the partitions' leaders concurrently
through the :class:`~raystream.kafka.call.Backend`, and answers with the leaders'
results and error codes (raystream's error codes are Kafka's). Nothing here keeps
state or re-implements the broker: deduplication and fencing of idempotent producers,
long polling, read_committed and the offsets' rules are the replicas'.

Produce. An idempotent or transactional Kafka RecordBatch is one raystream
:class:`~raystream.requests.ProduceRequest`, with the batch's producer id, epoch, base
sequence and transactional flag forwarded, so such a Kafka producer gets the replica's
per-batch sequence checks exactly as raystream's own producer does. Batches without a
producer id waiting for the same partition are coalesced into one request (see
:class:`_ProduceQueue`: the only state here, batches on their way, one queue per
partition with batches waiting or calls out; an idle queue is dropped, so a listener
holds none for the partitions nobody is producing to, deleted ones included).
``acks=0`` gets no answer (the append is still awaited, so that requests of a
connection land in order). Record batches are translated both ways by
:mod:`raystream.kafka.records`.

Fetch. Each partition is one :class:`~raystream.requests.FetchRequest`. The replica
long-polls itself (it waits on its high watermark for ``min_bytes`` up to
``max_wait_ms``), so the listener never polls in a loop. A fetch of one partition is
one long poll. For several, it first asks every partition
for what it has now (``max_wait_ms=0``); if that is less than ``min_bytes`` it asks
again with ``max_wait_ms`` and answers as soon as the first partition answers with
data (the other polls are abandoned: a replica answers an abandoned poll when its wait
ends and the answer is dropped). ``min_bytes`` is then applied per partition, not
summed over partitions: a request whose partitions each hold less than ``min_bytes``
but together more waits until ``max_wait_ms``, which Kafka would answer sooner (the
clients' default ``fetch.min.bytes`` is 1, where both agree).

read_committed: the replica reads below the last stable offset and leaves aborted
batches and transaction markers out, so the answer's ``aborted_transactions`` list is
always empty (the equivalent of the list, applied at the source). Where the replica
skipped batches at the end of what it read (markers, aborted batches), the answer ends
with a control batch covering them, so that every client advances past them.

Fetch sessions (KIP-227): none. Every answer has ``session_id`` 0 (Kafka's "no session"),
whatever the request's session id and epoch: a client that asked for a session
(kafka-python does, with epoch 0) learns that none was made and sends its next request
as a full fetch again; one that does not ask (epoch -1) is answered in full anyway. So
every request lists all its partitions and is answered for all of them; forgotten
topics are ignored (there is no session to forget them from).

Fetch v13+ and Produce v13 name topics by id: ids are resolved through the backend's
topic metadata (unknown: UNKNOWN_TOPIC_ID per partition).
"""

from __future__ import annotations

import asyncio
import dataclasses
import weakref
from collections.abc import Awaitable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from raystream.errors import InvalidRecordError, InvalidRequestError, RaystreamError
from raystream.kafka.call import NONE, Call
from raystream.kafka.records import (
    compact_run,
    decode_produce,
    decode_produce_run,
    encode_fetch,
    produced_batch_key,
)
from raystream.log.batch import BatchEncoder
from raystream.protocol import FetchResponse, encode_records
from raystream.requests import (
    DeleteRecordsRequest,
    FetchRequest,
    ListOffsetsRequest,
    OffsetForLeaderEpochRequest,
    ProduceRequest,
)

UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_REQUEST = 42
UNKNOWN_TOPIC_ID = 100
READ_COMMITTED = 1
"""Kafka's isolation_level byte for read_committed (0: read_uncommitted)."""
EARLIEST_LOCAL_TIMESTAMP = -4
"""ListOffsets' "earliest local offset" (tiered storage): the log start offset here."""

_ENCODER = BatchEncoder()
"""Serializes decoded Kafka batches for the produce call (caches the schema message;
the listener's one event loop is its only user)."""


# ---------------------------------------------------------------- topic names


async def _names_by_id(call: Call, ids: Iterable[Any]) -> dict[Any, str | None]:
    """Topic names of Kafka topic ids (None: no such topic)."""
    found: dict[Any, str | None] = {}
    for topic_id in set(ids):
        meta = await call.backend.topic_by_id(topic_id.hex) if topic_id is not None else None
        found[topic_id] = None if meta is None else meta.name
    return found


async def _topic_names(call: Call, topics: Iterable[Any]) -> list[tuple[Any, str | None]]:
    """(the topic's key in the answer, its name or None) per topic of a request: the
    name where the version has one, else the name of its topic id."""
    topics = list(topics)
    if not topics or hasattr(topics[0], "name") or hasattr(topics[0], "topic"):
        return [(_name_of(t), _name_of(t)) for t in topics]
    names = await _names_by_id(call, (t.topic_id for t in topics))
    return [(t.topic_id, names[t.topic_id]) for t in topics]


def _name_of(topic: Any) -> str:
    return topic.name if hasattr(topic, "name") else topic.topic


def _key_field(version_has_ids: bool) -> str:
    return "topic_id" if version_has_ids else "name"


async def _gather(calls: list[Awaitable[Any]]) -> list[Any]:
    """Answers of concurrent backend calls, a call that raised answered by its error.
    One call (a produce or fetch of one partition, the common case) is awaited as it
    is, without the task and gathering future ``asyncio.gather`` would add."""
    if len(calls) == 1:
        try:
            return [await calls[0]]
        except Exception as error:
            return [error]
    return list(await asyncio.gather(*calls, return_exceptions=True))


def _error_code(answer: Any) -> int:
    if isinstance(answer, RaystreamError):
        return answer.code
    if isinstance(answer, BaseException):
        raise answer
    return answer.error_code


# --------------------------------------------------------------------- Produce


async def produce(call: Call, request: Any) -> Mapping[str, Any] | None:
    """Append each partition's record batch at its leader, all partitions at once.

    Each partition's batch joins that partition's queue (:class:`_ProduceQueue`) in the
    connection's order (:meth:`Call.turn`): the connection's next produce request may
    be decoded and queued while this one's answers are still to come, as Kafka clients
    pipeline them, without overtaking it.
    """
    acks = int(request.acks)
    timeout_ms = max(int(request.timeout.total_seconds() * 1000), 0)
    by_id = bool(request.topic_data) and not hasattr(request.topic_data[0], "name")
    await call.turn()
    try:
        named = await _topic_names(call, request.topic_data)
        jobs = []
        for (key, name), topic in zip(named, request.topic_data, strict=True):
            for part in topic.partition_data:
                jobs.append((key, name, part.index, part.records))
        pending = [
            await _queue(call, name, index, records, acks, timeout_ms)
            for _, name, index, records in jobs
        ]
    finally:
        call.release()
    answers = await _gather(pending)
    if acks == 0:
        return None
    topics: dict[Any, list[dict[str, Any]]] = {}
    for (key, name, index, _), answer in zip(jobs, answers, strict=True):
        entry: dict[str, Any] = {"index": index, "base_offset": -1, "log_start_offset": -1}
        if name is None:
            entry["error_code"] = UNKNOWN_TOPIC_ID if by_id else UNKNOWN_TOPIC_OR_PARTITION
        elif isinstance(answer, BaseException):
            if not isinstance(answer, RaystreamError):
                raise answer
            entry.update(error_code=answer.code, error_message=str(answer))
        else:
            entry.update(
                error_code=answer.error_code,
                error_message=answer.message or None,
                base_offset=answer.base_offset,
                log_start_offset=answer.log_start_offset,
                log_append_time=None if answer.log_append_time < 0 else answer.log_append_time,
            )
        topics.setdefault(key, []).append(entry)
    return {
        "throttle_time": 0,
        "responses": [
            {_key_field(by_id): key, "partition_responses": entries}
            for key, entries in topics.items()
        ],
    }


async def _done(outcome: Any) -> Any:
    """An outcome already known (an unknown topic's None, a refused batch's error), as
    an awaitable beside the queued batches' answers."""
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


async def _queue(
    call: Call, topic: str | None, partition: int, records: bytes | None, acks: int, timeout_ms: int
) -> Awaitable[Any]:
    """One partition's batch queued for its leader; the awaitable answer (None: unknown
    topic; a refused batch's error raised)."""
    if topic is None:
        return _done(None)
    if not records:
        return _done(InvalidRecordError(f"produce to {topic}-{partition} carries no record batch"))
    try:
        meta = await call.backend.topic_metadata(topic)
    except RaystreamError as error:
        return _done(error)
    queues = _QUEUES.get(call.backend)
    if queues is None:
        queues = _QUEUES[call.backend] = {}
    queue = queues.get((topic, partition))
    if queue is None:
        queue = queues[(topic, partition)] = _ProduceQueue(call.backend, topic, partition)
    future = asyncio.get_running_loop().create_future()
    queue.put(_Waiting(records, acks, timeout_ms, meta.value_schema, future))
    return future


MAX_RUN_BYTES = 256 * 1024
"""The most bytes of Kafka batches (and of the raystream batch they become) coalesced
into one append: far below any topic's ``max.message.bytes`` (1 MiB by default), so
coalescing never makes a batch the leader refuses as too large; small requests are
what it is for."""


MAX_CALLS_IN_FLIGHT = 2
"""Calls to a partition's leader one listener keeps outstanding: two, so the next run
is decoded and sent while the leader appends the last one (one alone left the listener
idle 70% of a flat-out produce, waiting on the leader, and the leader idle while it
decoded). Appends stay in order: runs are sent one after another on the ordered path
to the leader, as a Kafka client's ``max.in.flight.requests.per.connection`` keeps
them."""


@dataclass(slots=True)
class _Waiting:
    """A Kafka batch waiting in a partition's queue, and where its answer goes."""

    records: Any
    acks: int
    timeout_ms: int
    value_schema: Any
    future: asyncio.Future
    key: tuple[int, int] | None = None
    """What batches are coalesced by: (acks, codec); None: sent on its own."""
    count: int = 0
    """Records in the batch (by its header)."""


@dataclass(eq=False)
class _ProduceQueue:
    """One partition's produce batches in one listener, forwarded to the leader in the
    order they were queued, several at a time as ONE batch.

    A produce request of a record or two costs the listener its decode and the call to
    the leader (a pickle, a socket write, the replica's dispatch and append), paid per
    request; librdkafka at a steady rate sends a request per record or per millisecond,
    pipelined, and the listener fell behind them. So a partition has at most
    :data:`MAX_CALLS_IN_FLIGHT` calls to its leader outstanding: a batch that comes
    while they are out waits, and when an answer is in, everything waiting goes at
    once, consecutive batches without a
    producer id (same acks and codec) decoded together and appended as one raystream
    batch (:func:`~raystream.kafka.records.decode_produce_run`). The first batch after
    a quiet spell leaves at once; under load the batches grow with the wait, so the
    cost per record falls as the rate rises (Nagle's rule, for appends).

    A queue lives while it has batches waiting or calls out: the moment it has neither
    it leaves :data:`_QUEUES` (:meth:`_retire`), and the partition's next batch makes a
    new one. No race: the listener is one event loop, and both the lookup-and-put of
    a new batch and the retirement run without an ``await`` in between, so a batch
    never joins a queue that is gone; and a retired queue has nothing in flight that a
    new one's calls could overtake.

    Each request is answered on its own: the run's base offset plus the records
    queued before it in the run (a run is appended contiguously). Idempotent and
    transactional batches are never merged (each keeps its producer id, epoch and
    sequence, so the leader's dedup and fencing see exactly what the client sent);
    they leave in queue order in the same flush, pipelined, as before. A run whose
    merged decode fails is decoded batch by batch, so only the bad request is refused.
    """

    backend: Any
    topic: str
    partition: int
    waiting: list[_Waiting] = field(default_factory=list)
    flusher: asyncio.Future | None = None
    in_flight: set[asyncio.Future] = field(default_factory=set)

    def put(self, item: _Waiting) -> None:
        """Queue ``item``; start forwarding if fewer than the most calls are out."""
        self.waiting.append(item)
        if self.flusher is None:
            self.flusher = asyncio.ensure_future(self._flush())

    async def _flush(self) -> None:
        try:
            while self.waiting:
                while len(self.in_flight) >= MAX_CALLS_IN_FLIGHT:
                    await asyncio.wait(self.in_flight, return_when=asyncio.FIRST_COMPLETED)
                items, self.waiting = self.waiting, []
                try:
                    answered = await self._forward(items)
                except Exception as error:  # answered as the handler's failure
                    for item in items:
                        _settle(item.future, error)
                    continue
                self.in_flight.add(answered)
                answered.add_done_callback(self._answered)
        finally:
            self.flusher = None
            self._retire()

    def _answered(self, answered: asyncio.Future) -> None:
        self.in_flight.discard(answered)
        self._retire()

    def _retire(self) -> None:
        """Leave :data:`_QUEUES` if idle: nothing waiting, no flusher, no call out."""
        if self.waiting or self.flusher is not None or self.in_flight:
            return
        queues = _QUEUES.get(self.backend)
        if queues is None or queues.get((self.topic, self.partition)) is not self:
            return
        del queues[(self.topic, self.partition)]
        if not queues:
            del _QUEUES[self.backend]

    async def _forward(self, items: list[_Waiting]) -> asyncio.Future:
        """Send ``items`` (as few requests as they coalesce into), in order; the task
        that settles their futures with the answers."""
        groups: list[list[_Waiting]] = []
        for item in items:
            key = produced_batch_key(item.records)
            if key is not None:
                producer_id, codec, item.count = key
                item.key = None if producer_id >= 0 else (item.acks, codec)
            run = groups[-1] if groups else []
            if (
                run
                and item.key is not None
                and run[-1].key == item.key
                and sum(len(i.records) for i in run) + len(item.records) <= MAX_RUN_BYTES
            ):
                run.append(item)
            else:
                groups.append([item])
        requests: list[ProduceRequest] = []
        owners: list[list[_Waiting]] = []
        for group in groups:
            built = self._merged(group) if len(group) > 1 else None
            if built is not None:
                requests.append(built)
                owners.append(group)
                continue
            for item in group:
                try:
                    requests.append(self._single(item))
                    owners.append([item])
                except RaystreamError as error:
                    _settle(item.future, error)
        sent = await self.backend.send_in_order(requests)
        return asyncio.ensure_future(_answer(owners, sent))

    def _request(self, item: _Waiting, records: Any, produced: Any, timeout_ms: int) -> Any:
        identified = produced.producer_id >= 0
        return ProduceRequest(
            self.topic,
            self.partition,
            encode_records(_ENCODER, records),
            acks=item.acks,
            timeout_ms=timeout_ms,
            compression_type=produced.compression_type,
            producer_id=produced.producer_id if identified else -1,
            producer_epoch=produced.producer_epoch if identified else -1,
            base_sequence=produced.base_sequence if identified else -1,
            transactional=produced.transactional,
        )

    def _compact(self, group: list[_Waiting], timeout_ms: int) -> ProduceRequest | None:
        """Batches without producer ids of a byte topic written straight to the stored
        payload (:func:`~raystream.kafka.records.compact_run`); None when they are not
        the plain case that covers."""
        key = group[0].key
        if key is None or key[1] != 0 or group[0].value_schema is not None:
            return None  # an identified, compressed or typed batch
        payload = compact_run([i.records for i in group])
        if payload is None:
            return None
        return ProduceRequest(
            self.topic, self.partition, payload, acks=group[0].acks, timeout_ms=timeout_ms
        )

    def _single(self, item: _Waiting) -> ProduceRequest:
        """One Kafka batch as one ProduceRequest.

        Raises:
            InvalidRecordError, CorruptRecordError: the batch is refused.
        """
        compacted = self._compact([item], item.timeout_ms)
        if compacted is not None:
            return compacted
        batches = decode_produce(item.records, item.value_schema)
        if len(batches) != 1:  # as Kafka's broker: v3+ carries exactly one batch
            raise InvalidRecordError(
                f"produce to {self.topic}-{self.partition} carries {len(batches)} record "
                "batches, not exactly one"
            )
        (batch,) = batches
        return self._request(item, batch.records, batch, item.timeout_ms)

    def _merged(self, group: list[_Waiting]) -> ProduceRequest | None:
        """A run of batches without producer ids as one ProduceRequest; None if one of
        them is refused (they are then decoded one by one)."""
        timeout_ms = max(i.timeout_ms for i in group)
        compacted = self._compact(group, timeout_ms)
        if compacted is not None:
            return compacted
        try:
            run = decode_produce_run([i.records for i in group], group[0].value_schema)
        except RaystreamError:
            return None
        request = self._request(group[0], run.records, run, timeout_ms)
        if len(request.records) > MAX_RUN_BYTES:  # compressed batches that grew: one by one
            return None
        return request


_QUEUES: weakref.WeakKeyDictionary[Any, dict[tuple[str, int], _ProduceQueue]] = (
    weakref.WeakKeyDictionary()
)
"""Every backend's (listener's) produce queues, by topic and partition: only those with
batches waiting or calls out (see :meth:`_ProduceQueue._retire`)."""


def produce_queues(backend: Any) -> int:
    """How many partitions ``backend`` (a listener's) has produce batches on their way
    to right now."""
    return len(_QUEUES.get(backend, ()))


async def _answer(owners: list[list[_Waiting]], sent: list[Awaitable[Any]]) -> None:
    """Settle each request's waiting batches with its answer (or its failure)."""
    answers = await _gather(sent)
    for group, answer in zip(owners, answers, strict=True):
        _split(group, answer)


def _settle(future: asyncio.Future, outcome: Any) -> None:
    if future.done():
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


def _split(group: list[_Waiting], answer: Any) -> None:
    """The answer of a coalesced run as each of its batches' own: its base offset plus
    the records queued before it."""
    if len(group) == 1 or isinstance(answer, BaseException) or answer.error_code != NONE:
        for item in group:
            _settle(item.future, answer)
        return
    base = answer.base_offset
    for item in group:
        _settle(item.future, dataclasses.replace(answer, base_offset=base))
        base += item.count


# ----------------------------------------------------------------------- Fetch


async def fetch(call: Call, request: Any) -> Mapping[str, Any]:
    """Records of the asked partitions from their fetch offsets, long-polled."""
    max_wait_ms = int(request.max_wait.total_seconds() * 1000)
    committed = request.isolation_level == READ_COMMITTED
    isolation = "read_committed" if committed else "read_uncommitted"
    max_bytes = max(int(request.max_bytes), 1)
    by_id = bool(request.topics) and not hasattr(request.topics[0], "topic")
    named = await _topic_names(call, request.topics)
    wanted = []  # (key, name, partition, fetch_offset, partition_max_bytes)
    for (key, name), topic in zip(named, request.topics, strict=True):
        for p in topic.partitions:
            limit = min(int(p.partition_max_bytes), max_bytes)
            wanted.append((key, name, p.partition, int(p.fetch_offset), limit))

    def poll(i: int, wait_ms: int, min_bytes: int) -> Awaitable[Any]:
        _, name, partition, offset, limit = wanted[i]
        return call.backend.send(
            FetchRequest(name, partition, offset, limit, wait_ms, min_bytes, isolation)
        )

    live = [i for i, w in enumerate(wanted) if w[1] is not None]
    min_bytes = max(int(request.min_bytes), 1)
    answers: dict[int, Any]
    if len(live) == 1 and max_wait_ms > 0:
        # One partition: its long poll answers at once when it holds data, so a first
        # look would only add a round trip to each fetch of a caught-up consumer.
        (only,) = live
        answers = {only: (await _gather([poll(only, max_wait_ms, min_bytes)]))[0]}
    else:
        answers = dict(zip(live, await _gather([poll(i, 0, 1) for i in live]), strict=True))
    if len(live) > 1 and max_wait_ms > 0 and _fetched_bytes(answers.values()) < min_bytes:
        waiting = [i for i in live if _error_code(answers[i]) == NONE]
        answers.update(await _long_poll(waiting, poll, max_wait_ms, min_bytes))
    topics: dict[Any, list[dict[str, Any]]] = {}
    budget = max_bytes
    for i, (key, name, partition, _, _) in enumerate(wanted):
        if name is None:
            code = UNKNOWN_TOPIC_ID if by_id else UNKNOWN_TOPIC_OR_PARTITION
            topics.setdefault(key, []).append(_fetch_entry(partition, code))
            continue
        answer = answers[i]
        code = _error_code(answer)
        if code != NONE:
            topics.setdefault(key, []).append(_fetch_entry(partition, code))
            continue
        size = sum(len(run) for run in answer.data)
        # Past the request's max_bytes (the first data always goes): fetched next time.
        with_records = not (size and budget <= 0)
        if with_records:
            budget -= size
        topics.setdefault(key, []).append(
            _fetched_partition(partition, answer, with_records, committed)
        )
    return {
        "throttle_time": 0,
        "error_code": NONE,
        "session_id": 0,
        "responses": [
            {"topic_id" if by_id else "topic": key, "partitions": entries}
            for key, entries in topics.items()
        ],
    }


async def _long_poll(
    waiting: list[int], poll: Any, max_wait_ms: int, min_bytes: int
) -> dict[int, Any]:
    """Long polls of the ``waiting`` partitions; the answers there are once the first
    brings data or an error (or every poll ended)."""
    if not waiting:
        return {}
    tasks = {asyncio.ensure_future(poll(i, max_wait_ms, max(min_bytes, 1))): i for i in waiting}
    pending = set(tasks)
    done_answers: dict[int, Any] = {}
    try:
        while pending:
            done, pending = await asyncio.wait(
                pending, timeout=max_wait_ms / 1000 + 5.0, return_when=asyncio.FIRST_COMPLETED
            )
            if not done:
                break
            for task in done:
                answer = task.exception() or task.result()
                done_answers[tasks[task]] = answer
            if any(
                _error_code(a) != NONE or (a.data if isinstance(a, FetchResponse) else False)
                for a in done_answers.values()
            ):
                break
    finally:
        for task in pending:
            task.cancel()
    return done_answers


def _fetched_bytes(answers: Iterable[Any]) -> int:
    return sum(sum(len(run) for run in a.data) for a in answers if isinstance(a, FetchResponse))


def _fetch_entry(partition: int, code: int) -> dict[str, Any]:
    return {
        "partition_index": partition,
        "error_code": code,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "aborted_transactions": None,
        "records": None,
    }


def _fetched_partition(
    partition: int, answer: FetchResponse, with_records: bool, committed: bool
) -> dict[str, Any]:
    """One partition of a Fetch answer: its offsets, and its records as Kafka record
    batches unless the request's ``max_bytes`` was spent before it."""
    return {
        "partition_index": partition,
        "error_code": NONE,
        "high_watermark": answer.high_watermark,
        "last_stable_offset": answer.last_stable_offset,
        "log_start_offset": answer.log_start_offset,
        "aborted_transactions": [] if committed else None,
        "records": encode_fetch(answer) if with_records else b"",
    }


# ----------------------------------------------------------------- ListOffsets


async def list_offsets(call: Call, request: Any) -> Mapping[str, Any]:
    """Earliest (-2), latest (-1) or first-at-timestamp offsets of each partition.

    Latest is the last stable offset for read_committed. The max-timestamp query (-3)
    is refused per partition with INVALID_REQUEST: the replica keeps no index of it."""
    isolation = (
        "read_committed"
        if getattr(request, "isolation_level", 0) == READ_COMMITTED
        else "read_uncommitted"
    )
    jobs = []
    for topic in request.topics:
        for p in topic.partitions:
            jobs.append((topic.name, p.partition_index, int(p.timestamp)))

    async def one(name: str, partition: int, timestamp: int) -> Any:
        if timestamp == EARLIEST_LOCAL_TIMESTAMP:
            timestamp = -2
        if timestamp < -2:
            return InvalidRequestError(
                f"ListOffsets timestamp {timestamp} of {name}-{partition} is not served "
                "(use -2 earliest, -1 latest, or a time in ms)"
            )
        return await call.backend.send(ListOffsetsRequest(name, partition, timestamp, isolation))

    answers = await _gather([one(*job) for job in jobs])
    topics: dict[str, list[dict[str, Any]]] = {}
    for (name, partition, timestamp), answer in zip(jobs, answers, strict=True):
        code = _error_code(answer)
        entry: dict[str, Any] = {"partition_index": partition, "error_code": code}
        if code == NONE:
            entry["offset"] = answer.offset
            entry["timestamp"] = answer.timestamp if timestamp >= 0 and answer.offset >= 0 else -1
        topics.setdefault(name, []).append(entry)
    return {
        "throttle_time": 0,
        "topics": [{"name": n, "partitions": e} for n, e in topics.items()],
    }


# --------------------------------------------------------- OffsetForLeaderEpoch


async def offset_for_leader_epoch(call: Call, request: Any) -> Mapping[str, Any]:
    """Where each asked leader epoch ended on the partition's leader."""
    jobs = [
        (topic.topic, p.partition, int(p.leader_epoch))
        for topic in request.topics
        for p in topic.partitions
    ]
    answers = await _gather(
        [call.backend.send(OffsetForLeaderEpochRequest(t, p, e)) for t, p, e in jobs]
    )
    topics: dict[str, list[dict[str, Any]]] = {}
    for (name, partition, _), answer in zip(jobs, answers, strict=True):
        code = _error_code(answer)
        entry: dict[str, Any] = {"partition": partition, "error_code": code}
        if code == NONE:
            entry.update(leader_epoch=answer.leader_epoch, end_offset=answer.end_offset)
        topics.setdefault(name, []).append(entry)
    return {
        "throttle_time": 0,
        "topics": [{"topic": n, "partitions": e} for n, e in topics.items()],
    }


# --------------------------------------------------------------- DeleteRecords


async def delete_records(call: Call, request: Any) -> Mapping[str, Any]:
    """Advance each partition's log start offset (-1: to its high watermark)."""
    jobs = [
        (topic.name, p.partition_index, int(p.offset))
        for topic in request.topics
        for p in topic.partitions
    ]
    answers = await _gather([call.backend.send(DeleteRecordsRequest(t, p, o)) for t, p, o in jobs])
    topics: dict[str, list[dict[str, Any]]] = {}
    for (name, partition, _), answer in zip(jobs, answers, strict=True):
        code = _error_code(answer)
        low = answer.low_watermark if code == NONE else -1
        topics.setdefault(name, []).append(
            {"partition_index": partition, "error_code": code, "low_watermark": low}
        )
    return {
        "throttle_time": 0,
        "topics": [{"name": n, "partitions": e} for n, e in topics.items()],
    }
