"""The session store contract on both backends: the lookups session merging needs."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raystream.errors import InvalidRequestError
from raystream.streams.stores import MemoryBackend, SessionStore, read_only
from raystream.streams.windowed import Windowed as W


def make(backend, retention_ms=1000, interval_ms=100) -> SessionStore:
    return SessionStore("s", backend, retention_ms, segment_interval_ms=interval_ms)


def test_find_sessions_returns_those_ending_after_and_starting_before_the_bounds(backend):
    store = make(backend)
    for session, value in [(W("k", 0, 10), 1), (W("k", 20, 30), 2), (W("k", 50, 50), 3)]:
        store.put(session, value)
    store.put(W("k2", 20, 30), 9)
    store.put(W("k\x00", 20, 30), 8)  # a key extending "k" does not leak into k's lookups
    # bounds are inclusive: end >= 10 and start <= 20
    assert list(store.find_sessions("k", 10, 20)) == [(W("k", 0, 10), 1), (W("k", 20, 30), 2)]
    assert list(store.find_sessions("k", 11, 49)) == [(W("k", 20, 30), 2)]
    assert list(store.find_sessions("k", 31, 49)) == []
    assert list(store.fetch("k")) == [(W("k", 0, 10), 1), (W("k", 20, 30), 2), (W("k", 50, 50), 3)]
    assert store.get(W("k", 20, 30)) == 2
    assert store.get(W("k", 20, 31)) is None


def test_session_merging_worked_example(backend):
    """Gap 10: records at 0, 5, 25, then 15 bridges [0,5] and [25,25] into [0,25]."""
    store, gap = make(backend), 10

    def add(key, t):
        merged, total = W(key, t, t), 1
        for session, count in list(store.find_sessions(key, t - gap, t + gap)):
            store.remove(session)
            merged = W(
                key, min(merged.start_ms, session.start_ms), max(merged.end_ms, session.end_ms)
            )
            total += count
        store.put(merged, total)

    for t in (0, 5, 25):
        add("u", t)
    assert list(store.fetch("u")) == [(W("u", 0, 5), 2), (W("u", 25, 25), 1)]
    add("u", 15)
    assert list(store.fetch("u")) == [(W("u", 0, 25), 4)]


def test_remove_and_put_none_delete_and_are_logged_as_tombstones(backend):
    store = make(backend)
    store.put(W("k", 1, 2), "a")
    store.remove(W("k", 1, 2))
    assert list(store.fetch("k")) == []
    records = store.drain_changelog()
    assert len(records) == 2 and records[1][1] is None
    assert records[0][0] == records[1][0]


def test_sessions_ending_before_stream_time_minus_retention_expire(backend):
    store = make(backend, retention_ms=100, interval_ms=50)
    store.put(W("k", 0, 10), 1)
    store.put(W("k", 200, 300), 2)  # stream time 300: ends at or before 200 expire
    assert list(store.fetch("k")) == [(W("k", 200, 300), 2)]
    assert store.get(W("k", 0, 10)) is None
    store.put(W("k", 150, 150), 3)  # expired on arrival
    assert list(store.all()) == [(W("k", 200, 300), 2)]


def test_restore_from_the_changelog_equals_the_original(backend_factory):
    store = make(backend_factory("a"))
    store.put(W("a", 0, 5), 1)
    store.put(W(("t", 1), 3, 9), 2)
    store.put(W("a", 0, 5), None)
    store.put(W("b", 7, 7), 3)
    copy = make(backend_factory("b"))
    copy.restore(store.drain_changelog())
    assert sorted(copy.all(), key=repr) == sorted(store.all(), key=repr)
    assert view_lists(copy) == view_lists(store)


def view_lists(store):
    view = read_only(store)
    return view.fetch("b"), view.find_sessions(("t", 1), 0, 100), view.get(W("b", 7, 7))


def test_bad_sessions_are_named():
    store = make(MemoryBackend())
    with pytest.raises(InvalidRequestError, match="starts after it ends"):
        store.put(W("k", 5, 4), 1)
    with pytest.raises(InvalidRequestError, match="is a Windowed"):
        store.put(("k", 1, 2), 1)


sessions = st.builds(
    lambda k, s, d: W(k, s, s + d),
    st.sampled_from(["a", "b"]),
    st.integers(0, 60),
    st.integers(0, 20),
)


@settings(
    derandomize=True,
    max_examples=50,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    puts=st.lists(st.tuples(sessions, st.one_of(st.none(), st.integers())), max_size=30),
    bounds=st.tuples(st.integers(-10, 90), st.integers(-10, 90)),
)
def test_find_sessions_matches_a_filter_over_a_model(backend_factory, puts, bounds):
    store = SessionStore("s", backend_factory(f"m{next(_counter)}"), 1 << 40, 10)
    model: dict[W, int] = {}
    for session, value in puts:
        store.put(session, value)
        if value is None:
            model.pop(session, None)
        else:
            model[session] = value
    earliest_end, latest_start = bounds
    for key in ("a", "b"):
        want = sorted(
            (
                (s, v)
                for s, v in model.items()
                if s.key == key and s.end_ms >= earliest_end and s.start_ms <= latest_start
            ),
            key=lambda sv: (sv[0].end_ms, sv[0].start_ms),
        )
        assert list(store.find_sessions(key, earliest_end, latest_start)) == want


_counter = iter(range(1 << 30))
