"""Read-only views of stores, for interactive queries (``app.store(name)``).

A view exposes only the reading half of a store and answers with lists of decoded keys
and values, so a task actor can hand them straight back to a caller outside it.
"""

from __future__ import annotations

from typing import Any

from raystream.errors import InvalidRequestError
from raystream.streams.stores.base import Store
from raystream.streams.stores.cache import CachingStore
from raystream.streams.stores.kv import KeyValueStore
from raystream.streams.stores.session import SessionStore
from raystream.streams.stores.window import WindowStore
from raystream.streams.windowed import Windowed

__all__ = [
    "ReadOnlyKeyValueView",
    "ReadOnlySessionView",
    "ReadOnlyWindowView",
    "read_only",
]


class ReadOnlyKeyValueView:
    """Reads of a :class:`KeyValueStore`."""

    def __init__(self, store: KeyValueStore) -> None:
        self._store = store
        self.name = store.name

    def get(self, key: Any) -> Any | None:
        return self._store.get(key)

    def all(self) -> list[tuple[Any, Any]]:
        return list(self._store.all())

    def range(self, lo: Any = None, hi: Any = None) -> list[tuple[Any, Any]]:
        """Entries with ``lo <= key <= hi``, in key order (a None bound is open)."""
        return list(self._store.range(lo, hi))

    def approximate_num_entries(self) -> int:
        return self._store.approximate_num_entries()


class ReadOnlyWindowView:
    """Reads of a :class:`WindowStore`."""

    def __init__(self, store: WindowStore) -> None:
        self._store = store
        self.name = store.name

    def get(self, key: Any, window_start_ms: int) -> Any | None:
        return self._store.get(key, window_start_ms)

    def fetch(self, key: Any, from_ms: int, to_ms: int) -> list[tuple[int, Any]]:
        """``(window_start_ms, value)`` of ``key``'s windows starting in the range."""
        return list(self._store.fetch(key, from_ms, to_ms))

    def fetch_all(self, from_ms: int, to_ms: int) -> list[tuple[Windowed, Any]]:
        return list(self._store.fetch_all(from_ms, to_ms))

    def all(self) -> list[tuple[Windowed, Any]]:
        return list(self._store.all())


class ReadOnlySessionView:
    """Reads of a :class:`SessionStore`."""

    def __init__(self, store: SessionStore) -> None:
        self._store = store
        self.name = store.name

    def get(self, session: Windowed) -> Any | None:
        return self._store.get(session)

    def fetch(self, key: Any) -> list[tuple[Windowed, Any]]:
        return list(self._store.fetch(key))

    def find_sessions(
        self, key: Any, earliest_session_end_ms: int, latest_session_start_ms: int
    ) -> list[tuple[Windowed, Any]]:
        return list(
            self._store.find_sessions(key, earliest_session_end_ms, latest_session_start_ms)
        )

    def all(self) -> list[tuple[Windowed, Any]]:
        return list(self._store.all())


ReadOnlyView = ReadOnlyKeyValueView | ReadOnlyWindowView | ReadOnlySessionView


def read_only(store: Store | CachingStore) -> ReadOnlyView:
    """The read-only view that fits ``store`` (a caching store's view reads through its
    cache: queries see updates not flushed yet)."""
    kind = store.wrapped if isinstance(store, CachingStore) else store
    if isinstance(kind, KeyValueStore):
        return ReadOnlyKeyValueView(store)  # type: ignore[arg-type]
    if isinstance(kind, WindowStore):
        return ReadOnlyWindowView(store)  # type: ignore[arg-type]
    if isinstance(kind, SessionStore):
        return ReadOnlySessionView(store)  # type: ignore[arg-type]
    raise InvalidRequestError(f"no read-only view for a {type(store).__name__}")
