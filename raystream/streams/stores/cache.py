"""The record cache in front of a task's table stores (Kafka Streams' ``statestore.cache.
max.bytes``, KIP-63): repeated updates of a key between commits are folded into one.

A task with a cache budget wraps the stores of its table nodes (aggregations, windowed
or not, session aggregations, a topic's table) in a :class:`CachingStore`. Writes go to
the cache and stay there, dirty; reads see the cache first, then the store (the task's
processors and interactive queries both read through it). Only when the cache is
flushed does a dirty entry reach the store, and with it the store's changelog, and is
forwarded downstream by the node that owns the store, as ``(key, new value, old value,
timestamp, headers)``:

- the old value is the one the store held, i.e. the value forwarded at the previous
  flush of that key (Kafka's cache flush listener reads it from the store the same
  way), so a downstream table retracts exactly what it was told before;
- the timestamp is the largest of the folded updates' timestamps (Kafka's aggregate
  result timestamp), so a suppression downstream sees the same stream time as without
  a cache; the headers are the last update's;
- an entry deleted before it was ever flushed (absent before, absent after) is neither
  written nor forwarded.

When it flushes: the task calls :meth:`TaskCache.flush` at every commit, before the
offsets (or the transaction) are committed; and a put that takes the task's cache over
its byte budget evicts the least recently used entries of the store written, and
evicting a dirty entry flushes that store's dirty entries, the evicted one first, then
the others in the order of their last update (Kafka's ``NamedCache.evict``). Flushed
entries stay in the cache, clean, for reads, until evicted; deleted ones are dropped.

The budget counts, per entry, the encoded key and value and a fixed overhead
(:data:`ENTRY_OVERHEAD_BYTES`), as Kafka's ``ThreadCache`` counts bytes, not objects.

Values are cached as objects: a value read from a cached store is the cached object,
so code that changes it in place must put it back (an aggregator that mutates and
returns its aggregate does). Not thread-safe: a cache belongs to its task's thread.

Example::

    cache = TaskCache(max_bytes=1 << 20)
    counts = cache.wrap(KeyValueStore("counts", backend), context, forward)
    counts.put("a", 1); counts.put("a", 2)   # nothing forwarded yet
    cache.flush()                            # forward("a", 2, None, ts, headers)
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from raystream.errors import InvalidRequestError
from raystream.streams.serde import encode_timestamp
from raystream.streams.stores.kv import KeyValueStore
from raystream.streams.stores.segments import MAX_TS, MIN_TS, SegmentedStore
from raystream.streams.stores.session import SessionStore
from raystream.streams.stores.window import WindowStore
from raystream.streams.windowed import Windowed

__all__ = [
    "ENTRY_OVERHEAD_BYTES",
    "CachingKeyValueStore",
    "CachingSessionStore",
    "CachingStore",
    "CachingWindowStore",
    "FlushListener",
    "RecordContext",
    "TaskCache",
]

ENTRY_OVERHEAD_BYTES = 32
"""Bytes counted per cache entry besides its key and value (timestamp, flags, links)."""

RecordContext = Callable[[], tuple[int, tuple[tuple[str, bytes], ...]]]
"""Returns the timestamp and headers of the record being processed (a put takes them)."""

FlushListener = Callable[[Any, Any, Any, int, tuple[tuple[str, bytes], ...]], None]
"""Called for each flushed entry: ``(key, new value, old value, timestamp, headers)``;
the key is the store's (a ``Windowed`` for window and session stores)."""

_UNKNOWN = object()  # an entry's flushed value not read from the store yet


class _Entry:
    """One cached key: its latest value and what the store holds (``flushed``)."""

    __slots__ = ("dirty", "flushed", "headers", "item", "size", "time_ms", "timestamp", "value")

    def __init__(
        self,
        item: Any,
        value: Any,
        timestamp: int,
        headers: tuple[tuple[str, bytes], ...],
        size: int,
        time_ms: int,
    ) -> None:
        self.item = item
        self.value = value
        self.timestamp = timestamp
        self.headers = headers
        self.size = size
        self.time_ms = time_ms
        self.dirty = True
        self.flushed: Any = _UNKNOWN


class TaskCache:
    """The record cache of one task: a byte budget shared by its caching stores.

    Args:
        max_bytes: The budget (the runtime splits ``cache_max_bytes`` across a worker's
            tasks and may change it later; the next put evicts down to it).

    Attributes:
        size_bytes: Bytes the cached entries count now.
        stores: The caching stores, in the order they were wrapped (upstream first in a
            sub-topology), which is the order :meth:`flush` flushes them.
    """

    def __init__(self, max_bytes: int) -> None:
        if not isinstance(max_bytes, int) or max_bytes < 0:
            raise InvalidRequestError(f"cache max_bytes must be an int >= 0, got {max_bytes!r}")
        self.max_bytes = max_bytes
        self.size_bytes = 0
        self.stores: list[CachingStore] = []

    def wrap(self, store: Any, context: RecordContext, listener: FlushListener) -> CachingStore:
        """A caching store in front of ``store`` whose flushes call ``listener``.

        Raises:
            InvalidRequestError: ``store`` is of a kind the cache does not front (a
                window store that retains duplicates, a stream-stream join's).
        """
        caching: CachingStore
        if isinstance(store, KeyValueStore):
            caching = CachingKeyValueStore(store, self, context, listener)
        elif isinstance(store, WindowStore) and not store.retain_duplicates:
            caching = CachingWindowStore(store, self, context, listener)
        elif isinstance(store, SessionStore):
            caching = CachingSessionStore(store, self, context, listener)
        else:
            raise InvalidRequestError(f"no record cache for store {store.name!r} ({store!r})")
        self.stores.append(caching)
        return caching

    @property
    def dirty(self) -> bool:
        """Whether any store has entries not flushed yet."""
        return any(store._dirty for store in self.stores)

    def flush(self) -> None:
        """Flush every store's dirty entries, upstream stores first, until none is left
        (a flush forwards downstream, which may dirty a store flushed before it)."""
        while True:
            dirty = [store for store in self.stores if store._dirty]
            if not dirty:
                return
            for store in dirty:
                store.flush_cache()

    def _grew(self, store: CachingStore, delta: int) -> None:
        self.size_bytes += delta
        while self.size_bytes > self.max_bytes and store._entries:
            store._evict()


class CachingStore:
    """What the caching key-value, window and session stores share: the LRU entries,
    the dirty keys in order of last update, eviction and flushing.

    Subclasses give the store key of an entry (the bytes the store would log) and how
    to read and write one entry in the wrapped store.
    """

    def __init__(
        self, wrapped: Any, cache: TaskCache, context: RecordContext, listener: FlushListener
    ) -> None:
        self.wrapped = wrapped
        self.name: str = wrapped.name
        self._cache = cache
        self._context = context
        self._listener = listener
        self._entries: OrderedDict[bytes, _Entry] = OrderedDict()  # least recent first
        self._dirty: dict[bytes, None] = {}  # by last update, oldest first

    @property
    def cached_count(self) -> int:
        """Entries cached (dirty and clean)."""
        return len(self._entries)

    @property
    def dirty_count(self) -> int:
        """Entries not flushed yet."""
        return len(self._dirty)

    # -------------------------------------------------------------- the cache proper

    def _cached(self, store_key: bytes) -> _Entry | None:
        entry = self._entries.get(store_key)
        if entry is not None:
            self._entries.move_to_end(store_key)
        return entry

    def _put(self, store_key: bytes, item: Any, value: Any, time_ms: int) -> None:
        raw = None if value is None else self.wrapped.value_serde.serialize(value)
        timestamp, headers = self._context()
        size = len(store_key) + (0 if raw is None else len(raw)) + ENTRY_OVERHEAD_BYTES
        entry = self._entries.get(store_key)
        if entry is None:
            self._entries[store_key] = _Entry(item, value, timestamp, headers, size, time_ms)
            self._added(store_key)
            delta = size
        else:
            self._entries.move_to_end(store_key)
            delta = size - entry.size
            if entry.dirty and entry.timestamp > timestamp:
                timestamp = entry.timestamp
            entry.item, entry.value, entry.timestamp = item, value, timestamp
            entry.headers, entry.size, entry.dirty = headers, size, True
            self._dirty.pop(store_key, None)
        self._dirty[store_key] = None
        self._cache._grew(self, delta)

    def _evict(self) -> None:
        """Drop the least recently used entry; flush the store if it was dirty."""
        store_key, entry = self._entries.popitem(last=False)
        self._cache.size_bytes -= entry.size
        self._removed(store_key)
        if entry.dirty:
            self.flush_cache((store_key, entry))

    def flush_cache(self, evicted: tuple[bytes, _Entry] | None = None) -> None:
        """Write every dirty entry to the store (and so its changelog) and forward it:
        ``evicted`` first, then the others in the order of their last update."""
        batch = []
        if evicted is not None:
            self._dirty.pop(evicted[0], None)
            batch.append(evicted)
        batch.extend((key, self._entries[key]) for key in self._dirty)
        self._dirty = {}
        deleted = []
        for store_key, entry in batch:
            entry.dirty = False
            old = self._read(entry) if entry.flushed is _UNKNOWN else entry.flushed
            new = entry.flushed = entry.value
            if new is None:
                deleted.append((store_key, entry))
                if old is None:
                    continue  # never flushed, now gone: nothing to write or forward
            self._write(entry)
            self._listener(entry.item, new, old, entry.timestamp, entry.headers)
        for store_key, entry in deleted:
            if self._entries.get(store_key) is entry and not entry.dirty:
                del self._entries[store_key]
                self._cache.size_bytes -= entry.size
                self._removed(store_key)

    def _overlay(
        self,
        merged: dict[bytes, tuple[Any, Any]],
        entries: Iterable[tuple[bytes, _Entry]],
        wanted: Callable[[bytes, _Entry], bool],
        shown: Callable[[_Entry], Any],
    ) -> None:
        """Apply the cached entries ``wanted`` to ``merged`` (store key -> item): a
        cached value replaces the store's, a cached delete removes it."""
        for store_key, entry in entries:
            if wanted(store_key, entry):
                if entry.value is None:
                    merged.pop(store_key, None)
                else:
                    merged[store_key] = (shown(entry), entry.value)

    # ------------------------------------------------------------- per kind of store

    def _added(self, store_key: bytes) -> None:
        """A new entry was cached (the session store indexes it)."""

    def _removed(self, store_key: bytes) -> None:
        """An entry left the cache."""

    def _read(self, entry: _Entry) -> Any:
        """The entry's value in the wrapped store."""
        raise NotImplementedError

    def _write(self, entry: _Entry) -> None:
        """Put the entry's value into the wrapped store."""
        raise NotImplementedError


class CachingKeyValueStore(CachingStore):
    """A :class:`KeyValueStore` behind a record cache: the same reads and writes."""

    wrapped: KeyValueStore

    def get(self, key: Any) -> Any | None:
        """The value of ``key``, cached or stored."""
        entry = self._cached(self.wrapped.key_serde.serialize(key))
        return self.wrapped.get(key) if entry is None else entry.value

    def put(self, key: Any, value: Any | None) -> None:
        """Set ``key`` to ``value`` in the cache; ``None`` deletes it."""
        self._put(self.wrapped.key_serde.serialize(key), key, value, 0)

    def put_all(self, entries: Iterable[tuple[Any, Any | None]]) -> None:
        for key, value in entries:
            self.put(key, value)

    def delete(self, key: Any) -> Any | None:
        """Remove ``key``; returns the value it had (None if none)."""
        old = self.get(key)
        if old is not None:
            self.put(key, None)
        return old

    def all(self) -> Iterator[tuple[Any, Any]]:
        return self.range(None, None)

    def range(self, lo: Any = None, hi: Any = None) -> Iterator[tuple[Any, Any]]:
        """``(key, value)`` with ``lo <= key <= hi`` in key order, cached values over
        stored ones (see :meth:`KeyValueStore.range`)."""
        return iter(self._merged(lo, hi))

    def reverse_range(self, lo: Any = None, hi: Any = None) -> Iterator[tuple[Any, Any]]:
        return iter(self._merged(lo, hi)[::-1])

    def _merged(self, lo: Any, hi: Any) -> list[tuple[Any, Any]]:
        ks = self.wrapped.key_serde.serialize
        lo_b = None if lo is None else ks(lo)
        hi_b = None if hi is None else ks(hi)
        merged = {ks(k): (k, v) for k, v in self.wrapped.range(lo, hi)}
        self._overlay(
            merged,
            self._entries.items(),
            lambda sk, _: (lo_b is None or sk >= lo_b) and (hi_b is None or sk <= hi_b),
            lambda entry: entry.item,
        )
        return [merged[sk] for sk in sorted(merged)]

    def approximate_num_entries(self) -> int:
        """The number of keys, counting the cached ones not stored yet."""
        count = self.wrapped.approximate_num_entries()
        for store_key in self._dirty:
            entry = self._entries[store_key]
            flushed = self._read(entry) if entry.flushed is _UNKNOWN else entry.flushed
            stored = flushed is not None
            count += (entry.value is not None) - stored
        return count

    def _read(self, entry: _Entry) -> Any:
        return self.wrapped.get(entry.item)

    def _write(self, entry: _Entry) -> None:
        self.wrapped.put(entry.item, entry.value)


class _CachingSegmentedStore(CachingStore):
    """Window and session stores: entries filed under a time, expired by retention."""

    wrapped: SegmentedStore

    def __init__(
        self, wrapped: Any, cache: TaskCache, context: RecordContext, listener: FlushListener
    ) -> None:
        super().__init__(wrapped, cache, context, listener)
        self._stream_time_ms = MIN_TS

    def _observe(self, time_ms: int) -> None:
        if time_ms > self._stream_time_ms:
            self._stream_time_ms = time_ms

    def _min_live_ms(self) -> int:
        """The oldest live time, by the latest time put here or in the store (cached
        entries older than it read as absent, as the store would have expired them)."""
        latest = max(self._stream_time_ms, self.wrapped.observed_stream_time_ms)
        return MIN_TS if latest == MIN_TS else latest - self.wrapped.retention_ms + 1

    def _ordered(self, merged: dict[bytes, tuple[Any, Any]], time_of: Callable) -> list:
        """Segment by segment (by time), in store key order within a segment, as the
        stores' ``all`` and ``fetch_all`` return."""
        interval = self.wrapped.segment_interval_ms
        keys = sorted(merged, key=lambda sk: (time_of(merged[sk][0]) // interval, sk))
        return [merged[sk] for sk in keys]


class CachingWindowStore(_CachingSegmentedStore):
    """A :class:`WindowStore` (without duplicates) behind a record cache."""

    wrapped: WindowStore

    def _store_key(self, key: Any, window_start_ms: int) -> bytes:
        return self.wrapped.key_serde.serialize(key) + encode_timestamp(window_start_ms)

    def put(self, key: Any, value: Any | None, window_start_ms: int) -> None:
        """Set the value of ``key``'s window starting at ``window_start_ms`` in the cache;
        ``None`` deletes it."""
        self._observe(window_start_ms)
        window = Windowed(key, window_start_ms, window_start_ms + self.wrapped.window_size_ms)
        self._put(self._store_key(key, window_start_ms), window, value, window_start_ms)

    def get(self, key: Any, window_start_ms: int) -> Any | None:
        entry = self._cached(self._store_key(key, window_start_ms))
        if entry is None:
            return self.wrapped.get(key, window_start_ms)
        return entry.value if entry.time_ms >= self._min_live_ms() else None

    def fetch(self, key: Any, from_ms: int, to_ms: int) -> Iterator[tuple[int, Any]]:
        """``(window_start_ms, value)`` of ``key``'s live windows starting in
        ``[from_ms, to_ms]``, by start time."""
        kb = self.wrapped.key_serde.serialize(key)
        n, min_live = len(kb), self._min_live_ms()
        merged = {
            kb + encode_timestamp(start): (start, value)
            for start, value in self.wrapped.fetch(key, from_ms, to_ms)
            if start >= min_live
        }
        self._overlay(
            merged,
            self._entries.items(),
            lambda sk, e: (
                len(sk) == n + 8 and sk[:n] == kb and max(from_ms, min_live) <= e.time_ms <= to_ms
            ),
            lambda entry: entry.time_ms,
        )
        return iter([merged[sk] for sk in sorted(merged)])

    def fetch_all(self, from_ms: int, to_ms: int) -> Iterator[tuple[Windowed, Any]]:
        """``(Windowed, value)`` of every live window starting in ``[from_ms, to_ms]``."""
        ks, min_live = self.wrapped.key_serde.serialize, self._min_live_ms()
        merged = {
            ks(w.key) + encode_timestamp(w.start_ms): (w, value)
            for w, value in self.wrapped.fetch_all(from_ms, to_ms)
            if w.start_ms >= min_live
        }
        self._overlay(
            merged,
            self._entries.items(),
            lambda _, e: max(from_ms, min_live) <= e.time_ms <= to_ms,
            lambda entry: entry.item,
        )
        return iter(self._ordered(merged, lambda w: w.start_ms))

    def all(self) -> Iterator[tuple[Windowed, Any]]:
        return self.fetch_all(MIN_TS, MAX_TS)

    def _read(self, entry: _Entry) -> Any:
        return self.wrapped.get(entry.item.key, entry.time_ms)

    def _write(self, entry: _Entry) -> None:
        self.wrapped.put(entry.item.key, entry.value, entry.time_ms)


class CachingSessionStore(_CachingSegmentedStore):
    """A :class:`SessionStore` behind a record cache; its cached sessions are indexed
    by key, since session merging looks up a key's sessions for every record."""

    wrapped: SessionStore

    def __init__(
        self, wrapped: Any, cache: TaskCache, context: RecordContext, listener: FlushListener
    ) -> None:
        super().__init__(wrapped, cache, context, listener)
        self._by_key: dict[bytes, dict[bytes, None]] = {}

    def _store_key(self, session: Windowed) -> bytes:
        return self.wrapped.store_key(session)

    def _added(self, store_key: bytes) -> None:
        self._by_key.setdefault(store_key[:-16], {})[store_key] = None

    def _removed(self, store_key: bytes) -> None:
        keys = self._by_key[store_key[:-16]]
        del keys[store_key]
        if not keys:
            del self._by_key[store_key[:-16]]

    def put(self, session: Windowed, value: Any | None) -> None:
        """Set the value of ``session`` in the cache; ``None`` removes it."""
        self._observe(session.end_ms)
        self._put(self._store_key(session), session, value, session.end_ms)

    def remove(self, session: Windowed) -> None:
        self.put(session, None)

    def get(self, session: Windowed) -> Any | None:
        entry = self._cached(self._store_key(session))
        if entry is None:
            return self.wrapped.get(session)
        return entry.value if entry.time_ms >= self._min_live_ms() else None

    def find_sessions(
        self, key: Any, earliest_session_end_ms: int, latest_session_start_ms: int
    ) -> Iterator[tuple[Windowed, Any]]:
        """``(session, value)`` of ``key``'s live sessions with ``end >=
        earliest_session_end_ms`` and ``start <= latest_session_start_ms``, by end time."""
        kb = self.wrapped.key_serde.serialize(key)
        earliest = max(earliest_session_end_ms, self._min_live_ms())
        merged = {
            kb + encode_timestamp(s.end_ms) + encode_timestamp(s.start_ms): (s, value)
            for s, value in self.wrapped.find_sessions(
                key, earliest_session_end_ms, latest_session_start_ms
            )
            if s.end_ms >= earliest
        }
        entries = self._entries
        self._overlay(
            merged,
            ((sk, entries[sk]) for sk in self._by_key.get(kb, ())),
            lambda _, e: e.time_ms >= earliest and e.item.start_ms <= latest_session_start_ms,
            lambda entry: entry.item,
        )
        return iter([merged[sk] for sk in sorted(merged)])

    def fetch(self, key: Any) -> Iterator[tuple[Windowed, Any]]:
        """Every live session of ``key``, by end time."""
        return self.find_sessions(key, MIN_TS, MAX_TS)

    def all(self) -> Iterator[tuple[Windowed, Any]]:
        """Every live session, segment by segment, in key order within a segment."""
        ks, min_live = self.wrapped.key_serde.serialize, self._min_live_ms()
        merged = {
            ks(s.key) + encode_timestamp(s.end_ms) + encode_timestamp(s.start_ms): (s, value)
            for s, value in self.wrapped.all()
            if s.end_ms >= min_live
        }
        self._overlay(
            merged,
            self._entries.items(),
            lambda _, e: e.time_ms >= min_live,
            lambda entry: entry.item,
        )
        return iter(self._ordered(merged, lambda s: s.end_ms))

    def _read(self, entry: _Entry) -> Any:
        return self.wrapped.get(entry.item)

    def _write(self, entry: _Entry) -> None:
        self.wrapped.put(entry.item, entry.value)
