"""The window store contract on both backends: fetches, expiry by segment, restore."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raystream.errors import InvalidRequestError
from raystream.streams.stores import MemoryBackend, WindowStore, read_only
from raystream.streams.windowed import Windowed

MIN = 60_000


def make(backend, retention_ms=10 * MIN, size_ms=MIN, interval_ms=2 * MIN, **kw) -> WindowStore:
    return WindowStore("w", backend, retention_ms, size_ms, segment_interval_ms=interval_ms, **kw)


def test_fetch_returns_the_keys_windows_starting_in_range_by_start(backend):
    store = make(backend)
    for start in (0, MIN, 2 * MIN, 5 * MIN):
        store.put("a", start // MIN, start)
    store.put("b", 99, MIN)
    store.put("ab", 98, MIN)  # a key extending "a" does not leak into a's fetch
    assert list(store.fetch("a", MIN, 5 * MIN)) == [(MIN, 1), (2 * MIN, 2), (5 * MIN, 5)]
    assert list(store.fetch("a", MIN + 1, 2 * MIN - 1)) == []
    assert list(store.fetch("b", 0, 10 * MIN)) == [(MIN, 99)]
    assert store.get("a", 2 * MIN) == 2
    assert store.get("a", 3 * MIN) is None


def test_put_none_deletes_a_window(backend):
    store = make(backend)
    store.put("a", 1, 0)
    store.put("a", 2, 0)
    assert list(store.fetch("a", 0, 0)) == [(0, 2)]
    store.put("a", None, 0)
    assert list(store.fetch("a", 0, 0)) == []


def test_fetch_all_and_all_give_windowed_keys_with_the_window_end(backend):
    store = make(backend, size_ms=MIN)
    store.put("b", 1, 0)
    store.put("a", 2, 0)
    store.put("a", 3, 3 * MIN)
    assert sorted(store.all()) == [
        (Windowed("a", 0, MIN), 2),
        (Windowed("a", 3 * MIN, 4 * MIN), 3),
        (Windowed("b", 0, MIN), 1),
    ]
    assert sorted(store.fetch_all(MIN, 3 * MIN)) == [(Windowed("a", 3 * MIN, 4 * MIN), 3)]


def test_windows_older_than_stream_time_minus_retention_expire_with_their_segment(backend):
    store = make(backend, retention_ms=4 * MIN, interval_ms=2 * MIN)
    for m in range(6):  # windows at minutes 0..5, stream time 5 min
        store.put("k", m, m * MIN)
    # oldest live start is 5 - 4 + 1 ms later: minute 1 and earlier are expired
    assert [s // MIN for s, _ in store.fetch("k", 0, 10 * MIN)] == [2, 3, 4, 5]
    # segment 0 (minutes 0..1) still holds live times (after minute 1 + 1 ms): kept
    assert _segments(backend) == ["segment-0", "segment-1", "segment-2"]
    store.drain_changelog()
    store.put("k", 99, MIN)  # expired on arrival: dropped and not logged
    assert store.get("k", MIN) is None
    assert store.drain_changelog() == []
    store.put("k", 10, 10 * MIN)  # oldest live time now 6 min + 1 ms
    assert _segments(backend) == ["segment-5"]  # 0..2 dropped whole
    assert list(store.all()) == [(Windowed("k", 10 * MIN, 11 * MIN), 10)]
    assert store.observed_stream_time_ms == 10 * MIN


def _segments(backend) -> list[str]:
    return sorted(n for n in backend.names() if n.startswith("segment-"))


def test_a_segment_expiring_while_a_fetch_iterates_ends_that_segment_cleanly(backend):
    store = make(backend, retention_ms=10, size_ms=1, interval_ms=5000)
    for i in range(3000):  # one segment, more entries than one read chunk
        store.put(i, i, 0)
    seen = 0
    for _ in store.fetch_all(0, 0):
        seen += 1
        if seen == 10:
            store.put("later", 1, 20_000)  # expires segment 0 under the iterator
    assert 10 <= seen <= 3000
    assert list(store.all()) == [(Windowed("later", 20_000, 20_001), 1)]


def test_retain_duplicates_keeps_every_put_and_ignores_none(backend):
    store = make(backend, retain_duplicates=True)
    store.put("k", "x", MIN)
    store.put("k", "y", MIN)
    store.put("k", None, MIN)
    store.put("k", "z", 2 * MIN)
    assert list(store.fetch("k", 0, 3 * MIN)) == [(MIN, "x"), (MIN, "y"), (2 * MIN, "z")]
    assert store.get("k", MIN) == "x"
    copy = make(MemoryBackend(), retain_duplicates=True)
    copy.restore(store.drain_changelog())
    assert list(copy.fetch("k", 0, 3 * MIN)) == [(MIN, "x"), (MIN, "y"), (2 * MIN, "z")]


def test_read_only_view(backend):
    store = make(backend)
    store.put("k", 1, 0)
    view = read_only(store)
    assert view.fetch("k", 0, MIN) == [(0, 1)]
    assert view.get("k", 0) == 1
    assert view.all() == [(Windowed("k", 0, MIN), 1)]
    assert view.fetch_all(0, 0) == [(Windowed("k", 0, MIN), 1)]


def test_bad_arguments_are_named():
    with pytest.raises(InvalidRequestError, match="window_size_ms"):
        WindowStore("w", MemoryBackend(), 1000, 0)
    with pytest.raises(InvalidRequestError, match="retention_ms"):
        WindowStore("w", MemoryBackend(), -1, 10)
    with pytest.raises(InvalidRequestError, match="time suffix"):
        WindowStore("w", MemoryBackend(), 1000, 10).restore([(b"short", b"")])


# --- model test: window store against a dict of (key, start) with the expiry rule ---

ops = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "ab"]),
        st.one_of(st.none(), st.integers(0, 9)),
        st.integers(0, 40),
    ),
    max_size=50,
)


@settings(
    derandomize=True,
    max_examples=50,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=ops, retention=st.integers(0, 15), interval=st.integers(1, 7))
def test_random_puts_match_a_model_and_a_restore_from_the_changelog(
    backend_factory, ops, retention, interval
):
    backend = backend_factory(f"m{next(_counter)}")
    store = WindowStore("w", backend, retention, 5, segment_interval_ms=interval)
    model: dict[tuple[str, int], int] = {}
    stream_time = None
    for key, value, start in ops:
        stream_time = start if stream_time is None else max(stream_time, start)
        store.put(key, value, start)
        if start > stream_time - retention:
            if value is None:
                model.pop((key, start), None)
            else:
                model[(key, start)] = value
    live = {k: v for k, v in model.items() if stream_time is None or k[1] > stream_time - retention}
    for key in ("a", "b", "ab"):
        want = sorted((s, v) for (k, s), v in live.items() if k == key)
        assert list(store.fetch(key, 0, 40)) == want
        assert list(store.fetch(key, 10, 20)) == [(s, v) for s, v in want if 10 <= s <= 20]
    assert sorted(store.all()) == sorted((Windowed(k, s, s + 5), v) for (k, s), v in live.items())
    replay = WindowStore("w", MemoryBackend(), retention, 5, segment_interval_ms=interval)
    replay.restore(store.drain_changelog())
    assert sorted(replay.all()) == sorted(store.all())


_counter = iter(range(1 << 30))
