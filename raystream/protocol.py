"""The requests' answers that cross the actor boundary between clients and servers.

Actors answer with an error code (Kafka's numbering, see :mod:`raystream.errors`) and a
message instead of raising, so one failed partition never fails a whole call and a
client can decide per error whether to refresh metadata and retry. Record data travels
as Arrow (a RecordBatch to the leader, a Table back), never record by record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from raystream.errors import RaystreamError, code_of, error_for_code
from raystream.records import record_schema

NONE = 0
"""Error code for success."""

CONTROLLER_NAME = "raystream-controller"
"""The controller actor's name in its namespace: how clients and replicas find it."""

EARLIEST_TIMESTAMP = -2
"""list_offsets timestamp meaning "the log start offset"."""
LATEST_TIMESTAMP = -1
"""list_offsets timestamp meaning "the high watermark"."""


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


def failure(error: BaseException, response: type[Response] = Result, **fields: Any) -> Response:
    """The answer that reports ``error`` (unexpected errors keep their type in the text)."""
    message = (
        str(error) if isinstance(error, RaystreamError) else f"{type(error).__name__}: {error}"
    )
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
    """Records from one partition at or after the fetch offset, below the high watermark
    (below the last stable offset for read_committed).

    ``records`` has the topic's stored columns plus ``offset``; None on error.
    ``next_offset`` is the offset right after the last batch the leader examined: markers
    and aborted batches return no rows, so a consumer continues from there when its rows
    end before it (-1: unknown, continue after the last row).
    """

    records: pa.Table | None = None
    high_watermark: int = -1
    log_start_offset: int = -1
    log_end_offset: int = -1
    next_offset: int = -1
    last_stable_offset: int = -1


@dataclass(frozen=True, slots=True)
class ListOffsetsResponse(Response):
    """The offset answering a list-offsets query (-1 when no record is that new)."""

    offset: int = -1
    timestamp: int = -1


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    """What a client caches about one partition: its leader and how to reach it."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    leader_handle: Any = None


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
