"""Produce requests and what they answer: per-chunk results and per-record futures.

A :class:`ProduceRequest` is one Arrow slice bound for one partition's leader. A
:class:`ProduceResult` is shared by every record of a chunk and completes when all of
the chunk's requests are answered; a :class:`FutureRecordMetadata` is just (result,
index), so ``send()`` stays cheap and a record's metadata is computed only when asked
for. Thread-safe: the sender completes results while application threads wait on them.
"""

from __future__ import annotations

import bisect
import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from raystream.errors import RaystreamTimeoutError
from raystream.types import RecordMetadata

logger = logging.getLogger(__name__)


class ProduceRequest:
    """One partition's share of a chunk (or of a ``send_batch`` table).

    The rows are ``batch`` itself, or the rows ``indices`` of it: a request keeps a
    view and builds its compact Arrow payload (:meth:`payload`) only when sent, so a
    large table is copied request by request, not all at once. ``start`` is the
    request's first row in the partition-sorted order of its chunk; ``size_bytes`` is
    an estimate. The sender sends consecutive requests of a partition together, as one
    batch (one call), and ``prepared`` is a large payload it encoded ahead of its turn.
    """

    __slots__ = (
        "base_offset",
        "batch",
        "created",
        "error",
        "indices",
        "log_append_time",
        "partition",
        "prepared",
        "result",
        "rows",
        "size_bytes",
        "start",
        "topic",
    )

    def __init__(
        self,
        topic: str,
        partition: int,
        batch: pa.RecordBatch,
        result: ProduceResult,
        start: int,
        created: float,
        indices: np.ndarray | None = None,
        size_bytes: int = -1,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.batch = batch
        self.indices = indices
        self.rows = batch.num_rows if indices is None else len(indices)
        self.size_bytes = batch.nbytes if size_bytes < 0 else size_bytes
        self.result = result
        self.start = start
        self.created = created
        self.base_offset = -1
        self.log_append_time = -1
        self.error: BaseException | None = None
        self.prepared: Any = None

    def view(self) -> pa.RecordBatch:
        """The request's rows, possibly sharing buffers with a larger batch."""
        if self.indices is None:
            return self.batch
        return self.batch.take(pa.array(self.indices))

    def payload(self) -> pa.RecordBatch:
        """The request's rows as a compact batch (what goes over the wire)."""
        return compact(self.view())

    def split(self) -> tuple[ProduceRequest, ProduceRequest]:
        """Two requests holding this one's first and second half of the rows, in its
        place in the result (the leader refused this one as too large)."""
        half = self.rows // 2
        left_size = self.size_bytes * half // self.rows
        sizes = left_size, self.size_bytes - left_size
        if self.indices is None:
            parts = (self.batch.slice(0, half), None), (self.batch.slice(half), None)
        else:
            parts = (self.batch, self.indices[:half]), (self.batch, self.indices[half:])
        left, right = (
            ProduceRequest(
                self.topic, self.partition, batch, self.result, start, self.created, indices, size
            )
            for (batch, indices), start, size in zip(
                parts, (self.start, self.start + half), sizes, strict=True
            )
        )
        self.result._split_request(self, left, right)
        return left, right

    def complete(self, base_offset: int, log_append_time: int = -1) -> None:
        """Record success (``base_offset`` -1 with acks=0)."""
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        self.batch = self.indices = self.prepared = None
        self.result._request_done()

    def fail(self, error: BaseException) -> None:
        """Record failure of every record in the request."""
        self.error = error
        self.batch = self.indices = self.prepared = None
        metrics = self.result.metrics
        if metrics is not None:
            metrics.record_errors(self.rows, time.monotonic())
        self.result._request_done()

    def __repr__(self) -> str:
        return f"ProduceRequest({self.topic}-{self.partition}, rows {self.start}+{self.rows})"


class ProduceResult:
    """The shared outcome of one chunk: what every record future points at.

    Thread-safe. ``done`` is set once every request of the chunk has completed or
    failed (or the chunk failed as a whole); then the added callbacks run, on the
    thread that completed the last request, and ``on_done`` (the accumulator's memory
    release) is called.
    """

    def __init__(
        self,
        topic: str,
        size_bytes: int = 0,
        on_done: Callable[[ProduceResult], None] | None = None,
    ) -> None:
        self.topic = topic
        self.size_bytes = size_bytes
        self.metrics: Any = None
        """The producer's metrics, once the sender took the chunk (failures count)."""
        self.done = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[tuple[int, Callable[[Any], Any], bool]] = []
        self._on_done = on_done
        self._pending = 0
        self.error: BaseException | None = None
        self.record_errors: dict[int, BaseException] = {}
        self.requests: list[ProduceRequest] = []
        self._starts: list[int] = []
        self.timestamps: np.ndarray | None = None
        self.row_of: np.ndarray | None = None  # record index -> batch row (-1 refused)
        self.order: np.ndarray | None = None  # sorted row -> batch row
        self._rank: np.ndarray | None = None  # batch row -> sorted row

    # -------------------------------------------------------------- completion

    def set_requests(
        self,
        requests: list[ProduceRequest],
        timestamps: np.ndarray | None = None,
        order: np.ndarray | None = None,
        row_of: np.ndarray | None = None,
    ) -> None:
        """Attach the requests the records were split into (before any is sent)."""
        self.requests = requests
        self._starts = [r.start for r in requests]
        self.timestamps = timestamps
        self.order = order
        self.row_of = row_of
        self._pending = len(requests)
        if not requests:
            self._finish()

    def _split_request(
        self, request: ProduceRequest, left: ProduceRequest, right: ProduceRequest
    ) -> None:
        """Put ``left`` and ``right`` (its two halves) where ``request`` was."""
        with self._lock:
            index = next(i for i, r in enumerate(self.requests) if r is request)
            self.requests = [*self.requests[:index], left, right, *self.requests[index + 1 :]]
            self._starts = [r.start for r in self.requests]
            self._pending += 1

    def fail_all(self, error: BaseException) -> None:
        """Fail every record (the chunk could not be built or sent at all)."""
        self.error = error
        self._finish()

    def _request_done(self) -> None:
        with self._lock:
            self._pending -= 1
            last = self._pending == 0
        if last:
            self._finish()

    def _finish(self) -> None:
        with self._lock:
            if self.done.is_set():
                return
            self.done.set()
            callbacks, self._callbacks = self._callbacks, []
        for index, fn, on_success in callbacks:
            self._run_callback(index, fn, on_success)
        if self._on_done is not None:
            try:
                self._on_done(self)
            except Exception:
                logger.exception("releasing a completed batch of %s failed", self.topic)

    def add_callback(self, index: int, fn: Callable[[Any], Any], on_success: bool) -> None:
        """Run ``fn`` with record ``index``'s metadata (or error, if not ``on_success``)."""
        with self._lock:
            if not self.done.is_set():
                self._callbacks.append((index, fn, on_success))
                return
        self._run_callback(index, fn, on_success)

    def _run_callback(self, index: int, fn: Callable[[Any], Any], on_success: bool) -> None:
        try:
            metadata = self.metadata(index)
        except BaseException as error:
            if not on_success:
                _call_user(fn, error)
            return
        if on_success:
            _call_user(fn, metadata)

    # ------------------------------------------------------------------ lookup

    def metadata(self, index: int) -> RecordMetadata:
        """Record ``index``'s RecordMetadata, or raise its error (only once done)."""
        if self.error is not None:
            raise self.error
        if self.record_errors:
            error = self.record_errors.get(index)
            if error is not None:
                raise error
        row = index if self.row_of is None else int(self.row_of[index])
        if self.order is None:
            rank = row
        else:
            if self._rank is None:
                rank_of = np.empty(len(self.order), dtype=np.int64)
                rank_of[self.order] = np.arange(len(self.order))
                self._rank = rank_of
            rank = int(self._rank[row])
        request = self.requests[bisect.bisect_right(self._starts, rank) - 1]
        if request.error is not None:
            raise request.error
        offset = -1 if request.base_offset < 0 else request.base_offset + rank - request.start
        if request.log_append_time != -1:
            timestamp = request.log_append_time
        else:
            timestamp = int(self.timestamps[index]) if self.timestamps is not None else -1
        return RecordMetadata(self.topic, request.partition, offset, timestamp)


def _call_user(fn: Callable[[Any], Any], arg: Any) -> None:
    try:
        fn(arg)
    except Exception:  # a user's callback never kills the sender
        logger.exception("producer callback %r raised", fn)


class FutureRecordMetadata:
    """The future of one sent record (kafka-python's ``FutureRecordMetadata``).

    Cheap by design: a reference to the chunk's shared :class:`ProduceResult` and the
    record's index; the RecordMetadata is computed when asked for. Callbacks run on the
    producer's I/O thread (or at once, in the caller, when the record is already done);
    an exception in a callback is logged and ignored.
    """

    __slots__ = ("_index", "_result")

    def __init__(self, result: ProduceResult, index: int) -> None:
        self._result = result
        self._index = index

    @property
    def is_done(self) -> bool:
        """Whether the record was acknowledged or failed."""
        return self._result.done.is_set()

    def succeeded(self) -> bool:
        """Done and acknowledged."""
        return self.is_done and self.exception is None

    def failed(self) -> bool:
        """Done and failed."""
        return self.is_done and self.exception is not None

    def retriable(self) -> bool:
        """Failed with an error whose ``retriable`` flag is set."""
        return bool(getattr(self.exception, "retriable", False))

    @property
    def value(self) -> RecordMetadata | None:
        """The RecordMetadata once succeeded, else None."""
        if not self.is_done:
            return None
        try:
            return self._result.metadata(self._index)
        except BaseException:
            return None

    @property
    def exception(self) -> BaseException | None:
        """The error once failed, else None."""
        if not self.is_done:
            return None
        try:
            self._result.metadata(self._index)
        except BaseException as error:
            return error
        return None

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """Block until the record is acknowledged; return where it landed.

        Raises:
            RaystreamTimeoutError: not done within ``timeout`` seconds.
            RaystreamError: the record failed (the error that failed it).
        """
        if not self._result.done.wait(timeout):
            raise RaystreamTimeoutError(
                f"record {self._index} of a batch for topic {self._result.topic!r} was not "
                f"acknowledged within {timeout} s"
            )
        return self._result.metadata(self._index)

    def add_callback(
        self, fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> FutureRecordMetadata:
        """Call ``fn(*args, metadata, **kwargs)`` when the record succeeds."""
        self._result.add_callback(self._index, _bind(fn, args, kwargs), True)
        return self

    def add_errback(
        self, fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> FutureRecordMetadata:
        """Call ``fn(*args, exception, **kwargs)`` when the record fails."""
        self._result.add_callback(self._index, _bind(fn, args, kwargs), False)
        return self

    def add_both(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> FutureRecordMetadata:
        """Call ``fn`` with the metadata or the exception, whichever comes."""
        self.add_callback(fn, *args, **kwargs)
        return self.add_errback(fn, *args, **kwargs)

    def __repr__(self) -> str:
        state = "pending" if not self.is_done else ("ok" if self.exception is None else "failed")
        return f"FutureRecordMetadata({self._result.topic!r}, {state})"


def _bind(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Callable[[Any], Any]:
    if not callable(fn):
        raise TypeError(f"callback must be callable, not {type(fn).__name__}")
    return functools.partial(fn, *args, **kwargs) if args or kwargs else fn


# ------------------------------------------------------------------------------- chunks


def compact(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with buffers of its own rows only (a slice keeps its parent's)."""
    return pa.concat_batches([batch]) if _is_view(batch) else batch


def _is_view(batch: pa.RecordBatch) -> bool:
    return batch.get_total_buffer_size() > batch.nbytes + 4096
