"""Fixtures for the storage-engine tests: logs on ``tmp_path``, a fake clock, batches.

The storage engine is a plain library, so these tests never start Ray: an autouse
fixture makes ``ray.init`` raise.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Sequence

import pyarrow as pa
import pytest

from raystream.log import Log, LogConfig

START_MS = 1_700_000_000_000
"""The fake clock's starting time (a fixed, realistic epoch-milliseconds value)."""


class FakeClock:
    """A millisecond clock that only moves when a test says so."""

    def __init__(self, now_ms: int = START_MS) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> int:
        self.now_ms += ms
        return self.now_ms

    def set(self, now_ms: int) -> None:
        self.now_ms = now_ms


class LogFactory:
    """Opens logs under one temporary directory and closes the ones left open."""

    def __init__(self, root, clock: FakeClock) -> None:
        self.root = root
        self.clock = clock
        self._opened: list[Log] = []

    def __call__(
        self,
        config: LogConfig | None = None,
        clock=None,
        name: str = "topic-0",
        **options,
    ) -> Log:
        """Open (or reopen) the log ``name``; ``options`` are LogConfig fields."""
        if config is None:
            config = LogConfig.from_kafka(options)
        elif options:
            config = config.with_options(options)
        log = Log.open(self.root / name, config, clock or self.clock)
        self._opened.append(log)
        return log

    def reopen(self, log: Log, config: LogConfig | None = None, clean: bool = True) -> Log:
        """Close ``log`` (cleanly, unless ``clean`` is False) and open its directory again."""
        if clean:
            log.close()
        else:
            abandon(log)
        reopened = Log.open(log.directory, config or log.config, self.clock)
        self._opened.append(reopened)
        return reopened

    def close_all(self) -> None:
        for log in self._opened:
            with contextlib.suppress(Exception):
                log.close()


def abandon(log: Log) -> None:
    """Drop a log as a crash would: release its files without flushing or marking clean.

    The index files are unmapped as they are (the active segment's not trimmed to its
    entries, zeros past them), and no ``.clean-shutdown`` marker is written, so the
    next open runs recovery.
    """
    for segment in log._segments:
        for index in (segment.index, segment.time_index):
            index._unmap()  # as a crash leaves it: not trimmed
        segment.close()
    log._closed = True


def make_batch(
    values: Sequence,
    keys: Sequence | None = None,
    timestamps: int | Sequence[int] | None = None,
) -> pa.RecordBatch:
    """A RecordBatch with ``key`` (when given), ``value`` and ``timestamp`` (when given).

    ``values`` may hold ints, strings or None (all-None values are strings); an int
    ``timestamps`` gives every row that timestamp.
    """
    columns: dict[str, pa.Array] = {}
    if keys is not None:
        columns["key"] = pa.array(keys, pa.string())
    value = pa.array(values)
    if pa.types.is_null(value.type):
        value = value.cast(pa.string())
    columns["value"] = value
    if timestamps is not None:
        if isinstance(timestamps, int):
            timestamps = [timestamps] * len(values)
        columns["timestamp"] = pa.array(timestamps, pa.int64())
    return pa.RecordBatch.from_pydict(columns)


@pytest.fixture
def clock() -> FakeClock:
    """A fake clock starting at :data:`START_MS`; call ``advance(ms)`` to move it."""
    return FakeClock()


@pytest.fixture
def make_log(tmp_path, clock):
    """Factory ``make_log(config=..., clock=..., name=..., **options)`` -> open Log."""
    factory = LogFactory(tmp_path, clock)
    yield factory
    factory.close_all()


@pytest.fixture
def batch():
    """The :func:`make_batch` helper: ``batch(values, keys=None, timestamps=None)``."""
    return make_batch


@pytest.fixture
def crash():
    """The :func:`abandon` helper: drop a log without a clean shutdown."""
    return abandon


@pytest.fixture(autouse=True)
def _no_ray(monkeypatch):
    """Pure-logic tests must not start Ray: ``ray.init`` raises if called."""
    if importlib.util.find_spec("ray") is None:
        yield
        return
    import ray

    def refuse(*args, **kwargs):
        raise AssertionError("tests/log are pure-logic tests: ray.init must not be called")

    monkeypatch.setattr(ray, "init", refuse)
    yield
