"""The key-value store contract, on both backends, and its changelog round trip."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raystream.errors import IllegalStateError, InvalidRequestError
from raystream.streams.serde import BYTES, encode_key
from raystream.streams.stores import (
    KeyValueStore,
    LmdbBackend,
    MemoryBackend,
    Store,
    read_only,
)


def test_get_put_delete_and_none_deletes(backend):
    store = KeyValueStore("counts", backend)
    assert store.get("a") is None
    store.put("a", 1)
    store.put("b", {"n": 2})
    assert store.get("a") == 1
    assert store.get("b") == {"n": 2}
    store.put("a", None)
    assert store.get("a") is None
    assert store.delete("b") == {"n": 2}
    assert store.delete("b") is None
    assert store.approximate_num_entries() == 0


def test_all_and_range_are_inclusive_and_in_key_order(backend):
    store = KeyValueStore("s", backend)
    store.put_all([(k, k * 10) for k in [5, -3, 12, 0, 7, -100, 1 << 70]])
    assert [k for k, _ in store.all()] == [-100, -3, 0, 5, 7, 12, 1 << 70]
    assert list(store.range(0, 7)) == [(0, 0), (5, 50), (7, 70)]
    assert list(store.range(1, 4)) == []
    assert [k for k, _ in store.range(None, 0)] == [-100, -3, 0]
    assert [k for k, _ in store.range(7, None)] == [7, 12, 1 << 70]
    assert [k for k, _ in store.reverse_range(-3, 7)] == [7, 5, 0, -3]


def test_scans_longer_than_a_read_chunk_in_both_directions(backend):
    store = KeyValueStore("big", backend)
    store.put_all((i, i) for i in range(2500))
    assert [k for k, _ in store.all()] == list(range(2500))
    assert [k for k, _ in store.reverse_range()] == list(range(2499, -1, -1))
    assert [k for k, _ in store.reverse_range(100, 2200)] == list(range(2200, 99, -1))
    assert [k for k, _ in store.range(100, 2200)] == list(range(100, 2201))


def test_tuple_keys_range_over_a_prefix(backend):
    store = KeyValueStore("t", backend)
    for cat in ("books", "games", "toys"):
        for n in range(3):
            store.put((cat, n), n)
    assert [k for k, _ in store.range(("games",), ("games", 1 << 60))] == [
        ("games", 0),
        ("games", 1),
        ("games", 2),
    ]


def test_writes_during_iteration_do_not_break_it(backend):
    store = KeyValueStore("w", backend)
    store.put_all((i, i) for i in range(3000))  # more than one LMDB read chunk
    seen = []
    for k, v in store.all():
        seen.append(k)
        store.put(k, v + 1)
        if k % 2 == 0:
            store.put(-k - 1, 0)  # behind the iterator: not required to be seen
    assert seen == list(range(3000))
    assert store.get(2999) == 3000


def test_every_change_is_in_the_changelog_and_a_restore_rebuilds_the_store(backend_factory):
    source = KeyValueStore("src", backend_factory("src"))
    source.put("a", 1)
    source.put_all([("b", 2), ("c", 3), ("a", None)])
    source.put("c", 30)
    records = source.drain_changelog()
    assert records[0] == (encode_key("a"), source.value_serde.serialize(1))
    assert records[3] == (encode_key("a"), None)
    assert len(records) == 5
    assert source.drain_changelog() == []

    copy = KeyValueStore("copy", backend_factory("copy"))
    copy.restore(records)
    assert list(copy.all()) == list(source.all()) == [("b", 2), ("c", 30)]
    assert copy.drain_changelog() == []  # a restore is not logged again


def test_logging_off_records_nothing(backend):
    store = KeyValueStore("quiet", backend, logging=False)
    store.put("a", 1)
    assert store.drain_changelog() == []


def test_user_serdes_keep_bytes_as_given(backend):
    store = KeyValueStore("raw", backend, key_serde=BYTES, value_serde=BYTES)
    store.put(b"k", b"v")
    assert store.drain_changelog() == [(b"k", b"v")]
    assert list(store.all()) == [(b"k", b"v")]


def test_state_survives_close_and_reopen(backend_factory):
    # On disk a new environment opens the same directory; in memory the backend object
    # is the same one (what a task that keeps its stores across a rebalance sees).
    store = KeyValueStore("p", backend_factory("p"))
    store.put_all([("a", 1), ("b", 2)])
    store.close()
    with pytest.raises(IllegalStateError, match="closed"):
        store.get("a")
    reopened = KeyValueStore("p", backend_factory("p"))
    assert list(reopened.all()) == [("a", 1), ("b", 2)]


def test_wipe_empties_the_store(backend):
    store = KeyValueStore("w", backend)
    store.put_all([("a", 1), ("b", 2)])
    store.wipe()
    assert list(store.all()) == []
    assert store.drain_changelog() == []
    store.put("c", 3)
    assert list(store.all()) == [("c", 3)]


def test_read_only_view_answers_lists(backend):
    store = KeyValueStore("v", backend)
    store.put_all([(1, "x"), (2, "y"), (3, "z")])
    view = read_only(store)
    assert view.get(2) == "y"
    assert view.range(2, 3) == [(2, "y"), (3, "z")]
    assert view.all() == [(1, "x"), (2, "y"), (3, "z")]
    assert view.approximate_num_entries() == 3
    assert not hasattr(view, "put")


def test_an_lmdb_directory_is_opened_once_per_process_and_long_keys_are_refused(tmp_path):
    backend = LmdbBackend(tmp_path / "s")
    with pytest.raises(IllegalStateError, match="already open"):
        LmdbBackend(tmp_path / "s")
    store = KeyValueStore("s", backend)
    with pytest.raises(InvalidRequestError, match="longer than the on-disk store's limit"):
        store.put("x" * 600, 1)
    assert store.get("x" * 600) is None
    store.close()
    KeyValueStore("s", LmdbBackend(tmp_path / "s")).close()  # closed, so it opens again


def test_bad_arguments_are_named():
    with pytest.raises(InvalidRequestError, match="non-empty name"):
        KeyValueStore("", MemoryBackend())
    with pytest.raises(InvalidRequestError, match="type set"):
        KeyValueStore("x", MemoryBackend()).put({1}, 1)
    with pytest.raises(InvalidRequestError, match="no read-only view for a Store"):
        read_only(Store("x", MemoryBackend()))


# --- model test: the store against a dict, on both backends ---

keys = st.one_of(st.integers(-50, 50), st.text(max_size=3))
operations = st.lists(
    st.one_of(
        st.tuples(st.just("put"), keys, st.one_of(st.none(), st.integers())),
        st.tuples(st.just("delete"), keys, st.none()),
        st.tuples(st.just("range"), keys, keys),
        st.tuples(st.just("flush"), st.none(), st.none()),
    ),
    max_size=60,
)


@settings(
    derandomize=True,
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=operations)
def test_random_operations_match_a_dict_model(backend_factory, ops):
    # One store per example: the factory's directory is shared, so name it uniquely.
    store = KeyValueStore("m", backend_factory(f"m{next(_counter)}"))
    model: dict[bytes, tuple] = {}  # encoded key -> (key, value): 1 and True are two keys
    for op, a, b in ops:
        if op == "put":
            store.put(a, b)
            if b is None:
                model.pop(encode_key(a), None)
            else:
                model[encode_key(a)] = (a, b)
        elif op == "delete":
            old = model.pop(encode_key(a), (None, None))[1]
            assert store.delete(a) == old
        elif op == "range":
            lo, hi = sorted([encode_key(a), encode_key(b)])
            want = [model[k] for k in sorted(model) if lo <= k <= hi]
            bounds = sorted([a, b], key=encode_key)
            assert list(store.range(*bounds)) == want
            assert list(store.reverse_range(*bounds)) == want[::-1]
        else:
            store.flush()
    assert list(store.all()) == [model[k] for k in sorted(model)]
    assert store.approximate_num_entries() == len(model)
    replay = KeyValueStore("r", MemoryBackend())
    replay.restore(store.drain_changelog())
    assert list(replay.all()) == list(store.all())


_counter = iter(range(1 << 30))
