"""Event-time windows, stream time and the rules that close windows (pure).

Kafka Streams' window semantics, as plain values and functions of timestamps:

- :class:`TumblingWindows` and :class:`HoppingWindows` are fixed, epoch-aligned,
  half-open windows ``[start, start + size)``; a record falls in every window that
  contains its timestamp (one for tumbling, ``size / advance`` for hopping).
- :class:`SlidingWindows` (KIP-450) are windows of fixed length ``difference_ms`` whose
  position is set by the records: each record at ``t`` defines the window
  ``[t - difference, t]`` that ends at it, and the window ``[t + 1, t + 1 + difference]``
  that starts just after it when another record of the key falls in that range. Both
  ends are inclusive. Records earlier than ``difference_ms`` share ``[0, difference]``
  as their left window (Kafka's "early records").
- :class:`SessionWindows` group a key's records separated by gaps of at most
  ``gap_ms``; a record that bridges two sessions merges them. A session's ``start`` and
  ``end`` are its first and last record's timestamps (inclusive, as in Kafka).
- :class:`JoinWindows` bound a stream-stream join: a record at ``t`` joins the other
  side's records in ``[t - before, t + after]``.

Stream time is the largest record timestamp a task has seen (:class:`StreamTime`): it
never goes back, so an out-of-order record does not move it. A window is *closed* once
``stream_time >= end + grace`` (``end`` exclusive; for the inclusive sliding windows that
is ``end + 1``; a session stays open while a record within the gap could still extend
it, until ``stream_time > end + gap + grace``). A record whose windows are all closed is
late: it is dropped and counted, never aggregated. Suppression
(:class:`SuppressBuffer`) holds a windowed table's updates and emits each window's final
value once, when the window closes.

Worked example (tumbling, size 10, grace 5): records at 3, 12, 8, 16, 4. Stream time
goes 3, 12, 12, 16, 16. The record at 8 is out of order but ``[0, 10)`` is open
(12 < 10 + 5): it counts. At 16 ``[0, 10)`` is closed (16 >= 15), so the record at 4 is
late and dropped. Counts: ``[0, 10)`` = 2, ``[10, 20)`` = 2, one record dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from raystream.errors import TopologyError
from raystream.streams.windowed import Windowed


def _check_non_negative(owner: str, **values: int) -> None:
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise TopologyError(f"{owner}: {name} must be an int >= 0 ms, got {value!r}")


def _check_positive(owner: str, **values: int) -> None:
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise TopologyError(f"{owner}: {name} must be an int > 0 ms, got {value!r}")


@dataclass(frozen=True)
class HoppingWindows:
    """Fixed windows ``[start, start + size_ms)`` starting every ``advance_ms``.

    Windows are aligned to the epoch: starts are multiples of ``advance_ms``. A record at
    ``t`` falls in every window with ``start <= t < start + size_ms`` (Kafka's
    ``TimeWindows.windowsFor``), starts below 0 excluded.

    Example: size 10, advance 5: a record at 12 falls in ``[5, 15)`` and ``[10, 20)``.
    """

    size_ms: int
    advance_ms: int
    grace_ms: int = 0

    def __post_init__(self) -> None:
        _check_positive(type(self).__name__, size_ms=self.size_ms, advance_ms=self.advance_ms)
        _check_non_negative(type(self).__name__, grace_ms=self.grace_ms)
        if self.advance_ms > self.size_ms:
            raise TopologyError(
                f"{type(self).__name__}: advance_ms ({self.advance_ms}) must not exceed "
                f"size_ms ({self.size_ms}), or records between windows would fall in none"
            )

    def windows_for(self, timestamp_ms: int) -> list[tuple[int, int]]:
        """The ``(start, end)`` of every window containing ``timestamp_ms``, by start."""
        first = max(0, timestamp_ms - self.size_ms + self.advance_ms)
        start = first - first % self.advance_ms
        windows = []
        while start <= timestamp_ms:
            windows.append((start, start + self.size_ms))
            start += self.advance_ms
        return windows

    def close_time_ms(self, end_ms: int) -> int:
        """The stream time at which the window ending (exclusive) at ``end_ms`` closes."""
        return end_ms + self.grace_ms


class TumblingWindows(HoppingWindows):
    """Fixed, non-overlapping windows ``[k * size_ms, (k + 1) * size_ms)``.

    A hopping window whose advance is its size, as Kafka's ``TimeWindows.ofSizeAndGrace``
    without ``advanceBy``: each record falls in exactly one window.
    """

    def __init__(self, size_ms: int, grace_ms: int = 0) -> None:
        super().__init__(size_ms, size_ms, grace_ms)

    def __repr__(self) -> str:
        return f"TumblingWindows(size_ms={self.size_ms}, grace_ms={self.grace_ms})"


@dataclass(frozen=True)
class SlidingWindows:
    """Windows of length ``difference_ms`` set by the records' timestamps (KIP-450).

    Two records fall in one window when their timestamps differ by at most
    ``difference_ms``. The windows that exist for a key are: for each record at ``t``,
    its left window :meth:`left_window` (ending at ``t``), and its right window
    :meth:`right_window` ``[t + 1, t + 1 + difference]`` if some record of the key falls
    in ``(t, t + difference]``. A window's aggregate covers the records with timestamps
    in ``[start, end]`` (both inclusive), and ``Windowed.end_ms`` is that inclusive end.
    """

    difference_ms: int
    grace_ms: int = 0

    def __post_init__(self) -> None:
        _check_positive("SlidingWindows", difference_ms=self.difference_ms)
        _check_non_negative("SlidingWindows", grace_ms=self.grace_ms)

    def left_window(self, timestamp_ms: int) -> tuple[int, int]:
        """The window ending at a record at ``timestamp_ms``: ``[t - difference, t]``, or
        ``[0, difference]`` for a record earlier than ``difference_ms``."""
        start = max(0, timestamp_ms - self.difference_ms)
        return start, start + self.difference_ms

    def right_window(self, timestamp_ms: int) -> tuple[int, int]:
        """The window starting just after a record at ``timestamp_ms``."""
        return timestamp_ms + 1, timestamp_ms + 1 + self.difference_ms

    def windows(self, timestamps: Iterable[int]) -> set[tuple[int, int]]:
        """Every window the records at ``timestamps`` (one key) define."""
        times = sorted(set(timestamps))
        result = {self.left_window(t) for t in times}
        for i, t in enumerate(times):
            if i + 1 < len(times) and times[i + 1] <= t + self.difference_ms:
                result.add(self.right_window(t))
        return result

    def close_time_ms(self, end_ms: int) -> int:
        """The stream time at which the window ending (inclusive) at ``end_ms`` closes."""
        return end_ms + 1 + self.grace_ms


@dataclass(frozen=True)
class SessionWindows:
    """Sessions of a key's records no more than ``gap_ms`` apart.

    A record at ``t`` joins every session ``[start, end]`` with
    ``start - gap <= t <= end + gap``; when it touches two, they merge into one (their
    aggregates merged with the aggregation's merger).
    """

    gap_ms: int
    grace_ms: int = 0

    def __post_init__(self) -> None:
        _check_positive("SessionWindows", gap_ms=self.gap_ms)
        _check_non_negative("SessionWindows", grace_ms=self.grace_ms)

    def close_time_ms(self, end_ms: int) -> int:
        """The stream time at which a session ending at ``end_ms`` closes: the first at
        which no record that is not late could extend it."""
        return end_ms + self.gap_ms + self.grace_ms + 1


@dataclass(frozen=True)
class JoinWindows:
    """The time bound of a stream-stream join: a left record at ``t`` joins right records
    in ``[t - before_ms, t + after_ms]`` (a right record at ``t`` joins left records in
    ``[t - after_ms, t + before_ms]``). ``JoinWindows.of(ms)`` is symmetric."""

    before_ms: int
    after_ms: int
    grace_ms: int = 0

    def __post_init__(self) -> None:
        _check_non_negative(
            "JoinWindows", before_ms=self.before_ms, after_ms=self.after_ms, grace_ms=self.grace_ms
        )

    @classmethod
    def of(cls, time_difference_ms: int, grace_ms: int = 0) -> JoinWindows:
        """Records join when their timestamps differ by at most ``time_difference_ms``."""
        return cls(time_difference_ms, time_difference_ms, grace_ms)

    def matches(self, left_ms: int, right_ms: int) -> bool:
        """Whether a left record at ``left_ms`` and a right one at ``right_ms`` join."""
        return left_ms - self.before_ms <= right_ms <= left_ms + self.after_ms

    def close_time_ms(self, left_ms: int) -> int:
        """The stream time after which a left record at ``left_ms`` can meet no more
        right records (a left/outer join then emits it unmatched)."""
        return left_ms + self.after_ms + self.grace_ms + 1


Windows = HoppingWindows | SlidingWindows | SessionWindows
"""Any window specification an aggregation accepts."""


class StreamTime:
    """A task's stream time: the largest record timestamp it has seen (-1 before any).

    Invariant: never decreases. Out-of-order records leave it where it is, which is what
    makes grace periods and late records well defined.
    """

    def __init__(self, stream_time_ms: int = -1) -> None:
        self.ms = stream_time_ms

    def observe(self, timestamp_ms: int) -> int:
        """Advance to ``timestamp_ms`` if it is later; return the stream time."""
        if timestamp_ms > self.ms:
            self.ms = timestamp_ms
        return self.ms


def is_closed(close_time_ms: int, stream_time_ms: int) -> bool:
    """Whether a window whose close time is ``close_time_ms`` is closed at
    ``stream_time_ms`` (see each window's ``close_time_ms``)."""
    return stream_time_ms >= close_time_ms


class WindowState(Protocol):
    """What time-windowed aggregation needs of a store: aggregates by key and window.

    ``fetch`` yields ``(Windowed, aggregate)`` for ``key`` with ``start_ms`` in
    ``[start_from_ms, start_to_ms]`` ordered by start. :class:`WindowStoreState` is the
    one over the stores library's ``WindowStore``.
    """

    def get(self, window: Windowed) -> Any: ...

    def put(self, window: Windowed, aggregate: Any) -> None: ...

    def fetch(
        self, key: Any, start_from_ms: int, start_to_ms: int
    ) -> Iterator[tuple[Windowed, Any]]: ...


class SessionState(Protocol):
    """What session aggregation needs of a store (the stores library's ``SessionStore``):
    ``find_sessions`` yields the key's sessions with ``end >= earliest_session_end_ms``
    and ``start <= latest_session_start_ms``; ``put(session, None)`` removes one."""

    def put(self, session: Windowed, aggregate: Any) -> None: ...

    def find_sessions(
        self, key: Any, earliest_session_end_ms: int, latest_session_start_ms: int
    ) -> Iterator[tuple[Windowed, Any]]: ...


class SortedState(Protocol):
    """A sorted key-value map (the stores library's ``KeyValueStore``): ``put(k, None)``
    deletes, ``range`` is inclusive in key order, a None bound open."""

    def get(self, key: Any) -> Any: ...

    def put(self, key: Any, value: Any) -> None: ...

    def range(self, lo: Any = None, hi: Any = None) -> Iterator[tuple[Any, Any]]: ...


class WindowStoreState:
    """A :class:`WindowState` over a ``WindowStore`` (values per key and window start,
    expired by the store's retention) whose windows are ``size_ms`` long."""

    def __init__(self, store: Any, size_ms: int) -> None:
        self.store = store
        self.size_ms = size_ms

    def get(self, window: Windowed) -> Any:
        return self.store.get(window.key, window.start_ms)

    def put(self, window: Windowed, aggregate: Any) -> None:
        self.store.put(window.key, aggregate, window.start_ms)

    def fetch(
        self, key: Any, start_from_ms: int, start_to_ms: int
    ) -> Iterator[tuple[Windowed, Any]]:
        for start, value in self.store.fetch(key, start_from_ms, start_to_ms):
            yield Windowed(key, start, start + self.size_ms), value


@dataclass(frozen=True)
class Aggregation:
    """How to fold values into an aggregate: Kafka's initializer, aggregator and (for
    session windows, whose sessions merge) merger.

    Attributes:
        initializer: ``() -> aggregate``, the aggregate of no records.
        aggregator: ``(key, value, aggregate) -> aggregate``.
        merger: ``(key, aggregate, aggregate) -> aggregate``; required by session windows.
    """

    initializer: Callable[[], Any]
    aggregator: Callable[[Any, Any, Any], Any]
    merger: Callable[[Any, Any, Any], Any] | None = None

    def fold(self, key: Any, values: Iterable[Any]) -> Any:
        """The aggregate of ``values`` in order (the batch computation)."""
        aggregate = self.initializer()
        for value in values:
            aggregate = self.aggregator(key, value, aggregate)
        return aggregate


Update = tuple[Windowed, Any, Any]
"""A windowed table change: ``(window, old aggregate or None, new aggregate or None)``;
a new aggregate of None removes the window (a session merged into another)."""


class WindowedAggregator:
    """Record-by-record windowed aggregation over a window or session store (pure).

    :meth:`process` takes one record and the task's stream time after observing it and
    returns the table updates it causes, or None when the record is late (its windows are
    all closed: dropped, and the caller counts it). ``state`` is a :class:`WindowState`
    for time and sliding windows, a :class:`SessionState` for sessions. Sliding windows
    also keep the records themselves in ``records`` (a window state holding, per key and
    timestamp ``t``, the list of values at ``t``), because a sliding window's aggregate is
    recomputed from its records when an out-of-order record creates or changes windows;
    that store's retention (``2 * difference + grace + 2``) drops records no window that
    is still open can contain.
    """

    def __init__(
        self,
        windows: Windows,
        aggregation: Aggregation,
        state: Any,
        records: WindowState | None = None,
    ) -> None:
        if isinstance(windows, SessionWindows) and aggregation.merger is None:
            raise TopologyError(
                "a session-windowed aggregate needs a merger (key, agg1, agg2) -> agg: "
                "sessions merge when a record bridges them"
            )
        if isinstance(windows, SlidingWindows) and records is None:
            raise TopologyError("a sliding-windowed aggregate needs a records state")
        self.windows = windows
        self.aggregation = aggregation
        self.state = state
        self.records = records

    def process(
        self, key: Any, value: Any, timestamp_ms: int, stream_time_ms: int
    ) -> list[Update] | None:
        """Aggregate one record; None when it is late and dropped."""
        if isinstance(self.windows, SessionWindows):
            return self._process_session(key, value, timestamp_ms, stream_time_ms)
        if isinstance(self.windows, SlidingWindows):
            return self._process_sliding(key, value, timestamp_ms, stream_time_ms)
        updates = []
        for start, end in self.windows.windows_for(timestamp_ms):
            if is_closed(self.windows.close_time_ms(end), stream_time_ms):
                continue
            window = Windowed(key, start, end)
            old = self.state.get(window)
            base = self.aggregation.initializer() if old is None else old
            new = self.aggregation.aggregator(key, value, base)
            self.state.put(window, new)
            updates.append((window, old, new))
        return updates or None

    def _process_session(
        self, key: Any, value: Any, timestamp_ms: int, stream_time_ms: int
    ) -> list[Update] | None:
        windows = self.windows
        assert isinstance(windows, SessionWindows)
        merger = self.aggregation.merger
        assert merger is not None
        touching = list(
            self.state.find_sessions(
                key, timestamp_ms - windows.gap_ms, timestamp_ms + windows.gap_ms
            )
        )
        start = min([timestamp_ms] + [w.start_ms for w, _ in touching])
        end = max([timestamp_ms] + [w.end_ms for w, _ in touching])
        if is_closed(windows.close_time_ms(end) - windows.gap_ms, stream_time_ms):
            return None  # the merged session ends before stream time - grace: late
        aggregate = self.aggregation.initializer()
        updates: list[Update] = []
        for window, old in touching:
            aggregate = merger(key, aggregate, old)
            self.state.put(window, None)
            updates.append((window, old, None))
        aggregate = self.aggregation.aggregator(key, value, aggregate)
        merged = Windowed(key, start, end)
        self.state.put(merged, aggregate)
        updates = [u for u in updates if u[0] != merged]
        old = next((a for w, a in touching if w == merged), None)
        updates.append((merged, old, aggregate))
        return updates

    def _process_sliding(
        self, key: Any, value: Any, timestamp_ms: int, stream_time_ms: int
    ) -> list[Update] | None:
        windows = self.windows
        records = self.records
        assert isinstance(windows, SlidingWindows) and records is not None
        d = windows.difference_ms
        if is_closed(windows.close_time_ms(timestamp_ms + d), stream_time_ms):
            return None  # every window that could contain it has closed: late
        here = Windowed(key, timestamp_ms, timestamp_ms)
        records.put(here, [*(records.get(here) or []), value])
        # The records that can share a window with t: those in [t - 2d - 1, t + 2d + 1].
        lo, hi = max(0, timestamp_ms - 2 * d - 1), timestamp_ms + 2 * d + 1
        nearby = {w.start_ms: vs for w, vs in records.fetch(key, lo, hi)}
        affected = {
            (s, e)
            for s, e in windows.windows(nearby)
            if s <= timestamp_ms <= e or s == timestamp_ms + 1
        }
        updates = []
        for start, end in sorted(affected):
            if is_closed(windows.close_time_ms(end), stream_time_ms):
                continue
            window = Windowed(key, start, end)
            values = [v for t in sorted(nearby) if start <= t <= end for v in nearby[t]]
            new = self.aggregation.fold(key, values)
            old = self.state.get(window)
            self.state.put(window, new)
            updates.append((window, old, new))
        return updates


class SuppressBuffer:
    """``suppress(until_window_closes=True)``: hold each window's latest value and emit
    it once, when the window closes (Kafka's ``Suppressed.untilWindowCloses``).

    The buffer lives in a sorted store (the task's suppression store, so buffered values
    survive a move) keyed ``(close_time_ms, window)``: the windows closed at a stream
    time are one range scan from the start, in order of close time, then window.
    """

    def __init__(self, close_time_ms: Callable[[Windowed], int], store: SortedState) -> None:
        self.close_time_ms = close_time_ms
        self.store = store

    def add(self, window: Windowed, value: Any) -> None:
        """Remember ``value`` (None: the window was removed) as the window's latest."""
        self.store.put((self.close_time_ms(window), window), value)

    def emit(self, stream_time_ms: int) -> list[tuple[Windowed, Any]]:
        """Take out the windows closed at ``stream_time_ms``, in order of close time."""
        ready = list(self.store.range(None, (stream_time_ms + 1,)))
        for key, _ in ready:
            self.store.put(key, None)
        return [(window, value) for (_, window), value in ready]


def close_time_for(windows: Windows) -> Callable[[Windowed], int]:
    """The close time of a ``Windowed`` key produced with ``windows``."""
    return lambda window: windows.close_time_ms(window.end_ms)
