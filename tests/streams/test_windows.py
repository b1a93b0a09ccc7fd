"""Window assignment, stream time, grace, late records, session merging and suppression:
hand-worked cases, and property tests against a batch computation of the same records."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raystream.errors import TopologyError
from raystream.streams import Windowed
from raystream.streams.stores import KeyValueStore, MemoryBackend, SessionStore, WindowStore
from raystream.streams.windows import (
    Aggregation,
    HoppingWindows,
    JoinWindows,
    SessionWindows,
    SlidingWindows,
    StreamTime,
    SuppressBuffer,
    TumblingWindows,
    WindowedAggregator,
    Windows,
    WindowStoreState,
    close_time_for,
)


def memory_store() -> KeyValueStore:
    return KeyValueStore("test", MemoryBackend(), logging=False)


def memory_state(windows: Windows) -> Any:
    """The state a task gives a windowed aggregation, in memory, with its retention."""
    backend = MemoryBackend()
    if isinstance(windows, SessionWindows):
        return SessionStore("s", backend, windows.gap_ms + windows.grace_ms + 1)
    if isinstance(windows, SlidingWindows):
        size, retention = windows.difference_ms, 2 * windows.difference_ms + windows.grace_ms + 2
    else:
        size, retention = windows.size_ms, windows.size_ms + windows.grace_ms
    return WindowStoreState(WindowStore("w", backend, retention, size), size)


def records_state(windows: Windows) -> WindowStoreState:
    retention = 2 * getattr(windows, "difference_ms", 0) + windows.grace_ms + 2
    return WindowStoreState(WindowStore("r", MemoryBackend(), retention, 1), 1)


def contents(state: Any) -> dict[Windowed, Any]:
    return dict(getattr(state, "store", state).all())


COUNT = Aggregation(lambda: 0, lambda k, v, a: a + 1, lambda k, a, b: a + b)
SUM = Aggregation(lambda: 0, lambda k, v, a: a + v, lambda k, a, b: a + b)
COLLECT = Aggregation(lambda: (), lambda k, v, a: (*a, v))


def run(
    windows: Windows, aggregation: Aggregation, records: list[tuple[Any, Any, int]]
) -> tuple[dict[Windowed, Any], int]:
    """Aggregate ``(key, value, timestamp)`` records one by one. Returns the windowed
    table the updates describe (the store itself drops windows past retention) and the
    number of records dropped as late."""
    state = memory_state(windows)
    aggregator = WindowedAggregator(windows, aggregation, state, records_state(windows))
    clock = StreamTime()
    dropped = 0
    table: dict[Windowed, Any] = {}
    for key, value, ts in records:
        updates = aggregator.process(key, value, ts, clock.observe(ts))
        if updates is None:
            dropped += 1
        for window, _, new in updates or []:
            if new is None:
                del table[window]
            else:
                table[window] = new
    return table, dropped


def test_tumbling_window_counts_out_of_order_records_within_grace_and_drops_later_ones() -> None:
    records = [("k", None, 3), ("k", None, 12), ("k", None, 8), ("k", None, 16), ("k", None, 4)]
    state, dropped = run(TumblingWindows(10, grace_ms=5), COUNT, records)
    assert state == {Windowed("k", 0, 10): 2, Windowed("k", 10, 20): 2}
    assert dropped == 1


def test_a_window_closes_when_stream_time_reaches_end_plus_grace() -> None:
    windows = TumblingWindows(10, grace_ms=0)
    # stream time 9: [0, 10) open; 10: closed (the record at 10 opens [10, 20)).
    assert run(windows, COUNT, [("k", 0, 9), ("k", 0, 5)])[1] == 0
    assert run(windows, COUNT, [("k", 0, 10), ("k", 0, 9)])[1] == 1


def test_hopping_windows_for_a_timestamp() -> None:
    windows = HoppingWindows(size_ms=10, advance_ms=5)
    assert windows.windows_for(12) == [(5, 15), (10, 20)]
    assert windows.windows_for(3) == [(0, 10)]
    assert windows.windows_for(10) == [(5, 15), (10, 20)]
    assert TumblingWindows(10).windows_for(19) == [(10, 20)]


def test_hopping_record_partly_late_updates_only_its_open_windows() -> None:
    windows = HoppingWindows(size_ms=10, advance_ms=5, grace_ms=0)
    # After 15, [5, 15) is closed but [10, 20) is not: a record at 12 counts only there.
    state, dropped = run(windows, COUNT, [("k", 0, 15), ("k", 0, 12)])
    assert dropped == 0
    assert state == {Windowed("k", 10, 20): 2, Windowed("k", 15, 25): 1}


def test_sessions_merge_when_a_record_bridges_them() -> None:
    windows = SessionWindows(gap_ms=5, grace_ms=100)
    state = memory_state(windows)
    aggregator = WindowedAggregator(windows, COUNT, state)
    clock = StreamTime()
    for ts in (0, 4, 20, 12):
        aggregator.process("k", None, ts, clock.observe(ts))
    assert contents(state) == {
        Windowed("k", 0, 4): 2,
        Windowed("k", 12, 12): 1,
        Windowed("k", 20, 20): 1,
    }
    updates = aggregator.process("k", None, 16, clock.observe(16))
    assert updates == [
        (Windowed("k", 12, 12), 1, None),
        (Windowed("k", 20, 20), 1, None),
        (Windowed("k", 12, 20), None, 3),
    ]
    assert contents(state) == {Windowed("k", 0, 4): 2, Windowed("k", 12, 20): 3}


def test_a_record_inside_a_session_updates_it_in_place() -> None:
    windows = SessionWindows(gap_ms=5, grace_ms=10)
    state, _ = run(windows, COUNT, [("k", 0, 0), ("k", 0, 6), ("k", 0, 3)])
    assert state == {Windowed("k", 0, 6): 3}


def test_a_session_record_is_late_when_its_merged_session_ends_before_stream_time_less_grace():
    windows = SessionWindows(gap_ms=5, grace_ms=0)
    state, dropped = run(windows, COUNT, [("k", 0, 0), ("k", 0, 10), ("k", 0, 3), ("k", 0, 8)])
    assert dropped == 1  # 3 joins [0, 0] into [0, 3], which ended before 10
    assert state == {Windowed("k", 0, 0): 1, Windowed("k", 8, 10): 2}


def test_session_aggregation_without_a_merger_is_refused() -> None:
    with pytest.raises(TopologyError, match="merger"):
        WindowedAggregator(SessionWindows(5), COLLECT, memory_state(SessionWindows(5)))


def test_sliding_windows_are_defined_by_the_records() -> None:
    # d = 10: left windows end at each record ([0, 10] for the early record at 5); the
    # record at 20 has a right window [21, 31] because 25 follows within 10.
    state, dropped = run(SlidingWindows(10, grace_ms=0), COUNT, [("k", 0, t) for t in (5, 20, 25)])
    assert dropped == 0
    assert state == {
        Windowed("k", 0, 10): 1,
        Windowed("k", 10, 20): 1,
        Windowed("k", 15, 25): 2,
        Windowed("k", 21, 31): 1,
    }


def test_sliding_out_of_order_record_creates_and_updates_windows() -> None:
    records = [("k", 1, t) for t in (20, 30, 25)]
    state, _ = run(SlidingWindows(10, grace_ms=10), SUM, records)
    assert state == {
        Windowed("k", 10, 20): 1,
        Windowed("k", 20, 30): 3,
        Windowed("k", 15, 25): 2,
        Windowed("k", 21, 31): 2,
        Windowed("k", 26, 36): 1,
    }


def test_suppress_emits_one_final_value_per_window_when_it_closes() -> None:
    windows = TumblingWindows(10, grace_ms=5)
    buffer = SuppressBuffer(close_time_for(windows), memory_store())
    state = memory_state(windows)
    aggregator = WindowedAggregator(windows, COUNT, state)
    clock = StreamTime()
    emitted = []
    for ts in (1, 2, 12, 3, 14, 16, 21, 30):
        for window, _, new in aggregator.process("k", None, ts, clock.observe(ts)) or []:
            buffer.add(window, new)
        emitted.append(buffer.emit(clock.ms))
    assert emitted == [
        [],
        [],
        [],
        [],
        [],
        [(Windowed("k", 0, 10), 3)],  # stream time 16 >= 10 + 5 (14 did not close it)
        [],
        [(Windowed("k", 10, 20), 3)],
    ]
    assert buffer.emit(2**62) == [(Windowed("k", 20, 30), 1), (Windowed("k", 30, 40), 1)]


def test_join_windows_bounds() -> None:
    windows = JoinWindows(before_ms=5, after_ms=2)
    assert windows.matches(10, 5) and windows.matches(10, 12)
    assert not windows.matches(10, 4) and not windows.matches(10, 13)
    assert JoinWindows.of(3) == JoinWindows(3, 3, 0)


@pytest.mark.parametrize(
    "make",
    [
        lambda: TumblingWindows(0),
        lambda: TumblingWindows(10, grace_ms=-1),
        lambda: HoppingWindows(10, 20),
        lambda: SlidingWindows(0),
        lambda: SessionWindows(-5),
        lambda: JoinWindows(-1, 0),
        lambda: TumblingWindows(1.5),
    ],
)
def test_bad_window_parameters_are_refused_with_a_clear_error(make: Any) -> None:
    with pytest.raises(TopologyError, match="ms"):
        make()


def test_stream_time_never_goes_back() -> None:
    clock = StreamTime()
    assert [clock.observe(t) for t in (5, 3, 9, 1)] == [5, 5, 9, 9]


# -- property tests: record by record equals the batch computation ----------------------


@st.composite
def in_grace_records(draw: Any, grace_ms: int) -> list[tuple[str, int, int]]:
    """Records of a few keys, out of order but never late: each timestamp is at most
    ``grace_ms`` before the largest seen so far (every base time is >= the ones before)."""
    n = draw(st.integers(0, 40))
    base = 0
    records = []
    for _ in range(n):
        base += draw(st.integers(0, 15))
        ts = max(0, base - draw(st.integers(0, grace_ms)))
        records.append((draw(st.sampled_from("abc")), draw(st.integers(0, 9)), ts))
    return records


def batch_time_windows(windows: HoppingWindows, aggregation: Aggregation, records: list) -> dict:
    groups = defaultdict(list)
    for key, value, ts in records:
        for start, end in windows.windows_for(ts):
            groups[Windowed(key, start, end)].append(value)
    return {w: aggregation.fold(w.key, vs) for w, vs in groups.items()}


def batch_sessions(windows: SessionWindows, records: list) -> dict:
    by_key = defaultdict(list)
    for key, value, ts in records:
        by_key[key].append((ts, value))
    result = {}
    for key, items in by_key.items():
        items.sort()
        start = end = items[0][0]
        total = 0
        for ts, value in items:
            if ts > end + windows.gap_ms:
                result[Windowed(key, start, end)] = total
                start, total = ts, 0
            end = ts
            total += value
        result[Windowed(key, start, end)] = total
    return result


def batch_sliding(windows: SlidingWindows, aggregation: Aggregation, records: list) -> dict:
    by_key = defaultdict(list)
    for key, value, ts in records:
        by_key[key].append((ts, value))
    result = {}
    for key, items in by_key.items():
        items.sort(key=lambda item: item[0])  # stable: arrival order within a timestamp
        for start, end in windows.windows(ts for ts, _ in items):
            values = [v for ts, v in items if start <= ts <= end]
            result[Windowed(key, start, end)] = aggregation.fold(key, values)
    return result


@settings(max_examples=50, deadline=None)
@given(
    st.integers(1, 30),
    st.integers(1, 30),
    st.integers(0, 20),
    st.data(),
)
def test_hopping_and_tumbling_match_the_batch_answer(size: int, advance: int, grace: int, data):
    advance = min(advance, size)
    records = data.draw(in_grace_records(grace))
    for windows in (HoppingWindows(size, advance, grace), TumblingWindows(size, grace)):
        for aggregation in (COUNT, SUM, COLLECT):
            state, dropped = run(windows, aggregation, records)
            assert dropped == 0
            assert state == batch_time_windows(windows, aggregation, records)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 20), st.integers(0, 20), st.data())
def test_sessions_match_the_batch_answer(gap: int, grace: int, data: Any) -> None:
    records = data.draw(in_grace_records(grace))
    windows = SessionWindows(gap, grace)
    state, dropped = run(windows, SUM, records)
    assert dropped == 0
    assert state == batch_sessions(windows, records)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 20), st.integers(0, 20), st.data())
def test_sliding_windows_match_the_batch_answer(difference: int, grace: int, data: Any) -> None:
    records = data.draw(in_grace_records(grace))
    windows = SlidingWindows(difference, grace)
    for aggregation in (SUM, COLLECT):
        state, dropped = run(windows, aggregation, records)
        assert dropped == 0
        assert state == batch_sliding(windows, aggregation, records)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 30), st.integers(0, 20), st.data())
def test_suppress_emits_every_window_once_with_its_batch_value(size: int, grace: int, data):
    records = data.draw(in_grace_records(grace))
    windows = TumblingWindows(size, grace)
    aggregator = WindowedAggregator(windows, SUM, memory_state(windows))
    buffer = SuppressBuffer(close_time_for(windows), memory_store())
    clock = StreamTime()
    emitted: dict[Windowed, Any] = {}
    for key, value, ts in records:
        for window, _, new in aggregator.process(key, value, ts, clock.observe(ts)) or []:
            buffer.add(window, new)
        for window, final in buffer.emit(clock.ms):
            assert window not in emitted
            emitted[window] = final
    for window, final in buffer.emit(2**62):
        emitted[window] = final
    assert emitted == batch_time_windows(windows, SUM, records)
