"""The requests' answers that cross the actor boundary between clients and servers.

The requests themselves are in :mod:`raystream.requests`; each names the answer type
here that its errors are reported in.

Actors answer with an error code (Kafka's numbering, see :mod:`raystream.errors`) and a
message instead of raising, so one failed partition never fails a whole call and a
client can decide per error whether to refresh metadata and retry. Record data travels
as Arrow batches, never record by record: an Arrow IPC stream to the leader, the stored
batches back (see :class:`FetchResponse`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from raystream.errors import RaystreamError, code_of, error_for_code, round_trips
from raystream.log.batch import OFFSET_COLUMN, BatchEncoder, PayloadDecoder, payload_size
from raystream.log.log import stored_batches, stored_to_table
from raystream.records import empty_fetch, record_schema

NONE = 0
"""Error code for success."""

CONTROLLER_NAME = "raystream-controller"
"""The controller actor's name in its namespace: how clients and replicas find it."""

EARLIEST_TIMESTAMP = -2
"""list_offsets timestamp meaning "the log start offset"."""
LATEST_TIMESTAMP = -1
"""list_offsets timestamp meaning "the high watermark"."""
INLINE_BYTES = 100 << 10
"""Fetched data up to this size travels as bytes (Ray passes it inline); larger runs
travel as numpy views, which Ray moves out of band."""

_DECODER = PayloadDecoder()


@dataclass(frozen=True, slots=True)
class Response:
    """Base of every answer: an error code (0 = none) and a message."""

    error_code: int = NONE
    message: str = ""

    def error(self) -> RaystreamError | None:
        """The exception this answer stands for, or None on success."""
        return None if self.error_code == NONE else error_for_code(self.error_code, self.message)

    def raise_for_error(self) -> None:
        """Raise the answer's error, if it has one."""
        error = self.error()
        if error is not None:
            raise error


@dataclass(frozen=True, slots=True)
class Result(Response):
    """A control-plane answer (controller, coordinators): an error or a value."""

    value: Any = None

    def unwrap(self) -> Any:
        """The value, or raise the answer's error."""
        self.raise_for_error()
        return self.value


def wire_bytes(run: pa.Buffer) -> Any:
    """A run of stored batches as a fetch answer carries it (see :class:`FetchResponse`)."""
    return run.to_pybytes() if run.size <= INLINE_BYTES else np.frombuffer(run, dtype=np.uint8)


def failure(error: BaseException, response: type[Response] = Result, **fields: Any) -> Response:
    """The answer that reports ``error``; an error whose class its code does not read
    back as (see :func:`~raystream.errors.round_trips`) keeps its class name in the text."""
    if isinstance(error, RaystreamError) and round_trips(error):
        message = str(error)
    else:
        message = f"{type(error).__name__}: {error}"
    return response(error_code=code_of(error), message=message, **fields)


@dataclass(frozen=True, slots=True)
class ProduceResponse(Response):
    """Outcome of appending one batch: its first offset and the broker's timestamp.

    ``log_append_time`` is -1 unless the topic uses LogAppendTime.
    """

    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1


@dataclass(frozen=True, slots=True)
class FetchResponse(Response):
    """Stored batches of one partition from the fetch offset on, below the high watermark.

    The leader sends the batches as they are stored (headers included, checksums
    checked), in runs of contiguous bytes: ``bytes`` when small, a uint8 numpy view
    when large (Ray moves those out of band, into the object store, without pickling
    them). Nothing is decoded or re-encoded on the way; the receiver decodes them with
    :meth:`decode`, zero-copy. ``limit`` is the high watermark the leader read up to;
    ``schema``, the topic's stored layout, comes only with an answer without data (so
    that even an empty table has the topic's columns).

    ``next_offset`` is the offset right after the last batch the leader examined: markers
    and aborted batches are left out (read_committed skips aborted transactions), so a
    consumer continues from there when its rows end before it (-1: unknown).
    ``last_stable_offset`` is where read_committed reading stops.
    """

    data: tuple[Any, ...] = ()
    fetch_offset: int = -1
    limit: int = -1
    schema: pa.Schema | None = None
    high_watermark: int = -1
    log_start_offset: int = -1
    log_end_offset: int = -1
    next_offset: int = -1
    last_stable_offset: int = -1

    def decode(self) -> tuple[pa.Table, int]:
        """(the rows from ``fetch_offset`` below ``limit``, the offset to fetch next,
        past the batches the leader left out).

        The table has the topic's stored columns plus ``offset``. It can be empty while
        data came: compaction removed every row of the first batch from the fetch
        offset on; the next fetch then starts after that batch.
        """
        stored = [b for run in self.data for b in stored_batches(pa.py_buffer(run))]
        table = stored_to_table(_DECODER, stored, self.fetch_offset, self.limit)
        if table.num_rows:
            after = int(table.column(OFFSET_COLUMN)[-1].as_py()) + 1
        elif stored:
            after = min(stored[0].header.next_offset, max(self.limit, self.fetch_offset))
        else:
            after = self.fetch_offset
            if self.schema is not None:
                table = empty_fetch(self.schema)
        return table, max(after, self.next_offset)

    @property
    def records(self) -> pa.Table:
        """The fetched rows (see :meth:`decode`)."""
        return self.decode()[0]


@dataclass(frozen=True, slots=True)
class ListOffsetsResponse(Response):
    """The offset answering a list-offsets query (-1 when no record is that new)."""

    offset: int = -1
    timestamp: int = -1


@dataclass(frozen=True, slots=True)
class ReplicaFetchResponse(Response):
    """A follower's fetch: the leader's raw stored runs from the fetch offset (empty when
    the follower must restart at ``log_start_offset``), and the leader's offsets."""

    data: tuple[Any, ...] | list[Any] = ()
    high_watermark: int = -1
    log_start_offset: int = -1
    log_end_offset: int = -1


@dataclass(frozen=True, slots=True)
class OffsetForLeaderEpochResponse(Response):
    """The largest leader epoch at or below the one asked for, and the offset where it
    ended on the leader (what a new follower truncates to)."""

    leader_epoch: int = -1
    end_offset: int = -1


@dataclass(frozen=True, slots=True)
class WriteTxnMarkerResponse(Response):
    """The offset a transaction marker was written at."""

    offset: int = -1


@dataclass(frozen=True, slots=True)
class DeleteRecordsResponse(Response):
    """The partition's log start offset after a DeleteRecords (Kafka's low watermark)."""

    low_watermark: int = -1


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    """What a client caches about one partition: its leader and how to reach it.

    ``leader_node`` is the Ray node id the leader runs on (None while offline), so
    readers can be scheduled next to the data they fetch; ``nodes`` maps each replica
    id to its node (the Kafka listener names replicas by their nodes' broker ids).
    """

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    leader_handle: Any = None
    leader_node: str | None = None
    nodes: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """What a client caches about one topic."""

    name: str
    topic_id: str
    partitions: list[PartitionMetadata]
    config: dict[str, Any] = field(default_factory=dict)
    value_schema: pa.Schema | None = None

    @property
    def record_schema(self) -> pa.Schema:
        """The stored layout of the topic's batches."""
        return record_schema(self.value_schema)


def encode_records(encoder: BatchEncoder, batch: pa.RecordBatch) -> bytes | pa.Buffer:
    """``batch`` as one self-contained payload (what a produce call carries): compact for
    a small batch of the record layout, else an Arrow IPC stream (see
    :mod:`raystream.log.batch`).

    Bytes when small: Ray passes those inline with the call. A larger stream is one
    Arrow buffer, which Ray moves out of band into its object store, where bytes would
    first be copied into the call's pickle.
    """
    pieces = encoder.payload(batch, None)
    size = payload_size(pieces)
    if size <= INLINE_BYTES:
        return b"".join(pieces)
    buffer = pa.allocate_buffer(size)
    stream = pa.FixedSizeBufferWriter(buffer)
    for piece in pieces:
        stream.write(piece)
    return buffer
