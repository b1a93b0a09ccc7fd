"""What every store shares: its backend, serdes, and the change log it records."""

from __future__ import annotations

from raystream.errors import IllegalStateError, InvalidRequestError
from raystream.streams.serde import KEY, PICKLE, Serde
from raystream.streams.stores.changelog import ChangelogRecord
from raystream.streams.stores.engine import Backend

__all__ = ["Store"]


class Store:
    """Base of the key-value, window and session stores.

    A store encodes keys with ``key_serde`` (the order-preserving encoding by default, so
    ranges are byte ranges) and values with ``value_serde`` (pickle by default), keeps
    bytes in engines of ``backend``, and, when ``logging`` is on, records every change
    for the task to drain into the changelog topic.

    Not thread-safe: a store belongs to its task's thread.

    Args:
        name: The store's name (also its changelog topic's middle part).
        backend: Where the bytes live (:class:`MemoryBackend` or :class:`LmdbBackend`).
        key_serde: Key encoding; a user serde must be deterministic, and only an
            order-preserving one makes ``range`` follow the keys' natural order.
        value_serde: Value encoding.
        logging: Record changes for the changelog (off for a store that needs none).
    """

    def __init__(
        self,
        name: str,
        backend: Backend,
        key_serde: Serde = KEY,
        value_serde: Serde = PICKLE,
        logging: bool = True,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidRequestError(f"a store needs a non-empty name, got {name!r}")
        self.name = name
        self.backend = backend
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.logging = logging
        self._changelog: list[ChangelogRecord] = []
        self._closed = False

    @property
    def persistent(self) -> bool:
        """Whether the store's state outlives the process (and a checkpoint means much)."""
        return self.backend.persistent

    def drain_changelog(self) -> list[ChangelogRecord]:
        """The changes since the last drain, oldest first, for the changelog topic."""
        records, self._changelog = self._changelog, []
        return records

    def _log(self, key: bytes, value: bytes | None) -> None:
        if self.logging:
            self._changelog.append((key, value))

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError(f"store {self.name!r} is closed")

    def flush(self) -> None:
        """Make every change so far durable, atomically (a no-op in memory)."""
        self._check_open()
        self.backend.flush()

    def wipe(self) -> None:
        """Delete every entry (and pending changelog records): before a full restore."""
        self._check_open()
        for name in self.backend.names():
            self.backend.drop(name)
        self._changelog = []
        self._reset()
        self.flush()

    def _reset(self) -> None:
        """Reopen engines after a wipe (subclasses)."""

    def close(self) -> None:
        """Flush and release the store; later calls raise IllegalStateError."""
        if not self._closed:
            self.flush()
            self.backend.close()
            self._closed = True
