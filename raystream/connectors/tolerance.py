"""Error tolerance: Kafka Connect's ``errors.*`` settings over Arrow batches.

Kafka Connect runs each record through its converters and transforms in a
``RetryWithToleranceOperator``: a retriable failure is retried for up to
``errors.retry.timeout``; any other failure fails the task (``errors.tolerance=none``,
the default) or skips the record (``errors.tolerance=all``), logging it
(``errors.log.enable``) and writing it to a dead letter queue topic
(``errors.deadletterqueue.topic.name``) with headers saying why.

raystream converts and transforms whole batches, so the happy path is one call per
batch. Only when that call fails does :func:`apply_tolerant` look for the bad rows, by
bisection: a batch of ``n`` rows with ``k`` bad ones costs about ``2 k log2(n / k)``
calls of the stage, each on a smaller slice, and the good rows are then processed
again in one call so that they come out as one batch of one type (a JSON column parsed
in halves could infer two different types). Worked example, 8 rows, row 5 bad::

    [0..8) fails -> [0..4) ok, [4..8) fails -> [4..6) fails, [6..8) ok
                 -> [4..5) ok, [5..6) fails: row 5 is the failure
    then fn(rows 0-4, 6-7) once: the output

Nothing here imports Ray or reads a clock on its own: the retry loop takes ``clock``
and ``sleep`` (the real ones by default).
"""

from __future__ import annotations

import json
import logging
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from raystream.connectors.converters import Converter, JsonConverter
from raystream.errors import (
    ConnectError,
    InvalidConfigError,
    InvalidRequestError,
    RaystreamError,
)
from raystream.records import HEADERS_TYPE

log = logging.getLogger(__name__)

#: Kafka Connect's stages (``org.apache.kafka.connect.runtime.errors.Stage``): where a
#: record failed, as the ``__connect.errors.stage`` header names it.
STAGES = (
    "KEY_CONVERTER",
    "VALUE_CONVERTER",
    "HEADER_CONVERTER",
    "TRANSFORMATION",
    "TASK_PUT",
    "TASK_POLL",
    "KAFKA_PRODUCE",
    "KAFKA_CONSUME",
)

#: Kafka's dead letter queue header names (``DeadLetterQueueReporter``).
HEADER_PREFIX = "__connect.errors."
ERROR_HEADERS = tuple(
    HEADER_PREFIX + name
    for name in (
        "topic",
        "partition",
        "offset",
        "connector.name",
        "task.id",
        "stage",
        "class.name",
        "exception.class.name",
        "exception.message",
        "exception.stacktrace",
    )
)


@dataclass(frozen=True)
class ErrorPolicy:
    """What a task does with a record its converters or transforms cannot handle.

    Fields are Kafka Connect's ``errors.*`` settings with ``.`` -> ``_``:
    ``tolerance`` (``none``: fail the task; ``all``: skip the record),
    ``retry_timeout_ms`` (how long retriable failures are retried; 0: not at all, -1:
    forever), ``retry_delay_max_ms`` (the cap of the doubling backoff between retries),
    ``log_enable`` / ``log_include_messages`` (log each failure, with the record),
    ``deadletterqueue_topic_name`` (empty: no dead letter queue),
    ``deadletterqueue_context_headers_enable`` (add the ``__connect.errors.*``
    headers), ``deadletterqueue_topic_replication_factor``.
    """

    tolerance: str = "none"
    retry_timeout_ms: int = 0
    retry_delay_max_ms: int = 60_000
    log_enable: bool = False
    log_include_messages: bool = False
    deadletterqueue_topic_name: str = ""
    deadletterqueue_context_headers_enable: bool = False
    deadletterqueue_topic_replication_factor: int = 3

    def __post_init__(self) -> None:
        if self.tolerance not in ("none", "all"):
            raise InvalidConfigError(
                f"errors.tolerance={self.tolerance!r}: expected 'none' or 'all'"
            )
        if self.retry_timeout_ms < -1:
            raise InvalidConfigError(
                f"errors.retry.timeout={self.retry_timeout_ms}: expected -1 (forever) or >= 0"
            )
        if self.retry_delay_max_ms < 0:
            raise InvalidConfigError(
                f"errors.retry.delay.max.ms={self.retry_delay_max_ms}: expected >= 0"
            )
        if self.deadletterqueue_topic_replication_factor < 1:
            raise InvalidConfigError(
                "errors.deadletterqueue.topic.replication.factor="
                f"{self.deadletterqueue_topic_replication_factor}: expected >= 1"
            )

    @property
    def tolerates_all(self) -> bool:
        """Whether failing records are skipped rather than failing the task."""
        return self.tolerance == "all"

    @classmethod
    def from_config(cls, config: Mapping[str, str]) -> ErrorPolicy:
        """The policy of a connector config (Kafka's ``errors.*`` keys; defaults Kafka's).

        Raises:
            InvalidConfigError: a value of the wrong kind, naming the key.
        """
        return cls(
            tolerance=str(config.get("errors.tolerance", "none")).strip().lower(),
            retry_timeout_ms=_integer(config, "errors.retry.timeout", 0),
            retry_delay_max_ms=_integer(config, "errors.retry.delay.max.ms", 60_000),
            log_enable=_boolean(config, "errors.log.enable", False),
            log_include_messages=_boolean(config, "errors.log.include.messages", False),
            deadletterqueue_topic_name=str(
                config.get("errors.deadletterqueue.topic.name", "")
            ).strip(),
            deadletterqueue_context_headers_enable=_boolean(
                config, "errors.deadletterqueue.context.headers.enable", False
            ),
            deadletterqueue_topic_replication_factor=_integer(
                config, "errors.deadletterqueue.topic.replication.factor", 3
            ),
        )


@dataclass(frozen=True)
class Failure:
    """One row a stage could not process, and why.

    ``index`` is the row's position in the batch handed to :func:`apply_tolerant`, and
    ``row`` that row (a one-row table of the same columns). ``class_name`` names what
    failed (the converter's or transform's class), as Kafka's
    ``__connect.errors.class.name`` header does.
    """

    index: int
    row: pa.Table
    stage: str
    class_name: str
    error: BaseException

    @property
    def stacktrace(self) -> str:
        """The exception's traceback as text (Kafka's ``exception.stacktrace`` header)."""
        return "".join(traceback.format_exception(self.error))


def apply_tolerant(
    policy: ErrorPolicy,
    stage: str,
    fn: Callable[[pa.Table], pa.Table],
    batch: pa.Table,
    *,
    class_name: str | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[pa.Table, list[Failure]]:
    """``fn(batch)``, tolerating failing rows as ``policy`` says.

    Returns the output for the rows that did not fail and the failures (empty on the
    happy path: one call of ``fn``). A retriable error (``RetriableConnectError`` or
    any raystream error flagged retriable) is retried with a doubling backoff from
    0.3 s up to ``retry_delay_max_ms`` for ``retry_timeout_ms``, as Kafka does; what
    still fails then is a failure. With ``errors.tolerance=none`` the first failure
    raises; with ``all`` the failing rows are isolated by bisection (the module
    docstring) and returned as failures (all rows, without bisection, when the error
    is a retriable one that outlasted the retries).

    Raises:
        ConnectError: a row failed and the policy tolerates none (naming the stage, the
            class and the first bad row), or ``fn`` fails on the good rows together
            although it succeeded on each part (it cannot handle them as one batch).
    """
    if stage not in STAGES:
        raise InvalidRequestError(f"apply_tolerant: stage {stage!r} is not one of {STAGES}")
    class_name = class_name or _class_name(fn)
    retrying = _Retrier(policy, clock, sleep)
    try:
        return retrying.call(fn, batch), []
    except Exception as error:  # any failure of a stage is the record's
        first_error = error
    retriable = isinstance(first_error, RaystreamError) and first_error.retriable
    if not policy.tolerates_all:
        where = ""
        if not retriable:  # the task fails: worth a few calls to name the record
            bad_rows: dict[int, BaseException] = {}
            _bisect(retrying, fn, batch, 0, batch.num_rows, first_error, bad_rows)
            if bad_rows:
                index = min(bad_rows)
                first_error = bad_rows[index]
                where = f" at {_record(batch.slice(index, 1))}"
        raise ConnectError(
            f"{stage} failed in {class_name}{where} and errors.tolerance=none: {first_error}"
        ) from first_error
    bad: dict[int, BaseException] = {}
    if retriable:
        # Still failing after the retries: the stage, not a row, is at fault; bisecting
        # would wait out the retries again per slice. Every row fails, as each record
        # would in Kafka.
        bad = dict.fromkeys(range(batch.num_rows), first_error)
    else:
        _bisect(retrying, fn, batch, 0, batch.num_rows, first_error, bad)
    failures = [
        Failure(index, batch.slice(index, 1), stage, class_name, error)
        for index, error in sorted(bad.items())
    ]
    for failure in failures:
        _log(policy, failure)
    if not bad:
        raise ConnectError(
            f"{stage}: {class_name} fails on the batch as a whole but on no row alone: "
            f"{first_error}"
        ) from first_error
    good = _without(batch, sorted(bad))
    if good.num_rows == 0:
        try:
            return fn(good), failures  # the stage's output columns, no rows
        except Exception:  # a stage need not handle an empty batch
            return good, failures
    try:
        return retrying.call(fn, good), failures
    except Exception as error:
        raise ConnectError(
            f"{stage}: {class_name} fails on the good rows together: {error}"
        ) from error


def dead_letter_batch(
    failures: Sequence[Failure],
    connector: str,
    task_id: int,
    *,
    context_headers: bool = True,
    originals: pa.Table | None = None,
) -> pa.Table:
    """The rows to write to the dead letter queue topic for ``failures``.

    Columns ``key``, ``value`` (binary), ``timestamp`` (int64 ms or null) and ``headers``
    (the record's own headers, then with ``context_headers`` Kafka's
    ``__connect.errors.*`` headers: topic, partition, offset, connector.name, task.id,
    stage, class.name, exception.class.name, exception.message, exception.stacktrace,
    values UTF-8 text). Kafka writes the record as it was consumed; a failure's row
    holds what the failing stage was given, so binary and string keys and values are
    written as they are, and structured ones (after a converter) as JSON. To write the
    records as consumed, as Kafka does, pass ``originals``: the batch as consumed, row
    for row with the batch the failing stage was given (converters, and transforms
    before any Filter, keep rows in place); its row at each failure's ``index`` is
    written instead.
    """
    json_text = JsonConverter({"schemas.enable": "false"})
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    timestamps: list[int | None] = []
    headers: list[list[dict[str, object]]] = []
    for failure in failures:
        row = failure.row if originals is None else originals.slice(failure.index, 1)
        keys.append(_stored(row, "key", json_text))
        values.append(_stored(row, "value", json_text))
        timestamps.append(_cell(row, "timestamp"))
        own = [dict(h) for h in (_cell(row, "headers") or [])]
        if context_headers:
            context = (
                _cell(row, "topic"),
                _cell(row, "partition"),
                _cell(row, "offset"),
                connector,
                task_id,
                failure.stage,
                failure.class_name,
                f"{type(failure.error).__module__}.{type(failure.error).__qualname__}",
                str(failure.error),
                failure.stacktrace,
            )
            own += [
                {"key": name, "value": None if value is None else str(value).encode()}
                for name, value in zip(ERROR_HEADERS, context, strict=True)
            ]
        headers.append(own)
    return pa.table(
        {
            "key": pa.array(keys, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "timestamp": pa.array(timestamps, pa.int64()),
            "headers": pa.array(headers, HEADERS_TYPE),
        }
    )


# -- internals ------------------------------------------------------------------------


class _Retrier:
    """Kafka's retry loop: retriable failures again until the timeout, doubling the wait."""

    def __init__(
        self, policy: ErrorPolicy, clock: Callable[[], float], sleep: Callable[[float], None]
    ) -> None:
        self.policy = policy
        self.clock = clock
        self.sleep = sleep

    def call(self, fn: Callable[[pa.Table], pa.Table], batch: pa.Table) -> pa.Table:
        timeout_ms = self.policy.retry_timeout_ms
        deadline = None if timeout_ms < 0 else self.clock() + timeout_ms / 1000
        delay = 0.3
        while True:
            try:
                return fn(batch)
            except RaystreamError as error:
                if not error.retriable or timeout_ms == 0:
                    raise
                now = self.clock()
                if deadline is not None and now >= deadline:
                    raise
                wait = min(delay, self.policy.retry_delay_max_ms / 1000)
                if deadline is not None:
                    wait = min(wait, deadline - now)
                self.sleep(wait)
                delay *= 2


def _bisect(
    retrying: _Retrier,
    fn: Callable[[pa.Table], pa.Table],
    batch: pa.Table,
    start: int,
    stop: int,
    known_error: BaseException | None,
    bad: dict[int, BaseException],
) -> None:
    """Collect in ``bad`` the rows of ``batch[start:stop]`` on which ``fn`` fails alone.

    ``known_error`` is the error of ``fn`` on this very slice when the caller already
    knows it failed (so it is not called again).
    """
    if known_error is None:
        try:
            retrying.call(fn, batch.slice(start, stop - start))
            return
        except Exception as error:
            known_error = error
    if stop - start == 1:
        bad[start] = known_error
        return
    middle = (start + stop) // 2
    _bisect(retrying, fn, batch, start, middle, None, bad)
    _bisect(retrying, fn, batch, middle, stop, None, bad)


def _without(batch: pa.Table, indices: Sequence[int]) -> pa.Table:
    keep = np.ones(batch.num_rows, dtype=bool)
    keep[list(indices)] = False
    return batch.filter(pa.array(keep))


def _record(row: pa.Table) -> str:
    """Where a one-row batch's record is: ``topic-partition@offset`` as far as known."""
    topic, partition, offset = (_cell(row, name) for name in ("topic", "partition", "offset"))
    where = str(topic) if topic is not None else "the record"
    if partition is not None:
        where += f"-{partition}"
    if offset is not None:
        where += f"@{offset}"
    return where


def _class_name(fn: Callable[..., object]) -> str:
    """What ``fn`` belongs to: a converter's or transform's ``class_name`` (Kafka's class
    name for Kafka's own), else the dotted path of its class or function."""
    owner = getattr(fn, "__self__", None)
    named = getattr(owner, "class_name", None)
    if isinstance(named, str) and named:
        return named
    target = type(owner) if owner is not None else fn
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__qualname__", None) or type(target).__qualname__
    return f"{module}.{name}" if module else name


def _log(policy: ErrorPolicy, failure: Failure) -> None:
    if not policy.log_enable:
        return
    where = {
        name: _cell(failure.row, name)
        for name in ("topic", "partition", "offset")
        if name in failure.row.column_names
    }
    message = f"Error in stage {failure.stage} ({failure.class_name}) at {where}: {failure.error}"
    if policy.log_include_messages:
        message += f"; record: {failure.row.to_pylist()[0]!r}"
    log.error(message)


def _cell(row: pa.Table, name: str) -> object:
    if name not in row.column_names:
        return None
    return row.column(name)[0].as_py()


def _stored(row: pa.Table, name: str, json_text: Converter) -> bytes | None:
    """The key or value of a failed row as bytes for the dead letter queue."""
    if name not in row.column_names:
        return None
    column = row.column(name).combine_chunks()
    if column.null_count:
        return None
    if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        return column[0].as_py()
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return column[0].as_py().encode()
    try:
        return json_text.from_connect(column)[0].as_py()
    except RaystreamError:
        return json.dumps(column[0].as_py(), default=str).encode()


def _integer(config: Mapping[str, str], key: str, default: int) -> int:
    value = config.get(key, default)
    try:
        return int(str(value).strip())
    except ValueError:
        raise InvalidConfigError(f"{key}={value!r}: expected an integer") from None


def _boolean(config: Mapping[str, str], key: str, default: bool) -> bool:
    value = str(config.get(key, default)).strip().lower()
    if value not in ("true", "false"):
        raise InvalidConfigError(f"{key}={config.get(key)!r}: expected true or false")
    return value == "true"
