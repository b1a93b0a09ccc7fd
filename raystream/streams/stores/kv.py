"""The key-value store: latest value per key, for aggregates and tables."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from raystream.streams.serde import KEY, PICKLE, Serde
from raystream.streams.stores.base import Store
from raystream.streams.stores.changelog import ChangelogRecord
from raystream.streams.stores.engine import Backend

__all__ = ["KeyValueStore"]

_DATA = "kv"


class KeyValueStore(Store):
    """A sorted key-value store (Kafka Streams' ``KeyValueStore``).

    ``put(key, None)`` deletes, as a tombstone in a table does. Iteration (``all``,
    ``range``) is in the byte order of the encoded keys, which with the default key
    serde is the keys' natural order within a type. Iterators see a consistent order
    but may or may not see writes made while they are consumed.

    Example::

        store = KeyValueStore("counts", MemoryBackend())
        store.put("b", 2); store.put("a", 1); store.put("c", 3)
        list(store.range("a", "b"))   # [("a", 1), ("b", 2)]
        store.drain_changelog()       # [(encode_key("b"), pickle(2)), ...]
    """

    def __init__(
        self,
        name: str,
        backend: Backend,
        key_serde: Serde = KEY,
        value_serde: Serde = PICKLE,
        logging: bool = True,
    ) -> None:
        super().__init__(name, backend, key_serde, value_serde, logging)
        self._engine = backend.open(_DATA)

    def _reset(self) -> None:
        self._engine = self.backend.open(_DATA)

    def get(self, key: Any) -> Any | None:
        """The value of ``key``, or None if it has none."""
        self._check_open()
        raw = self._engine.get(self.key_serde.serialize(key))
        return None if raw is None else self.value_serde.deserialize(raw)

    def put(self, key: Any, value: Any | None) -> None:
        """Set ``key`` to ``value``; ``None`` deletes the key."""
        self._check_open()
        kb = self.key_serde.serialize(key)
        vb = None if value is None else self.value_serde.serialize(value)
        self._engine.put(kb, vb)
        self._log(kb, vb)

    def put_all(self, entries: Iterable[tuple[Any, Any | None]]) -> None:
        """``put`` each ``(key, value)`` in order, as one engine write."""
        self._check_open()
        batch = [
            (
                self.key_serde.serialize(k),
                None if v is None else self.value_serde.serialize(v),
            )
            for k, v in entries
        ]
        self._engine.write(batch)
        for kb, vb in batch:
            self._log(kb, vb)

    def delete(self, key: Any) -> Any | None:
        """Remove ``key``; returns the value it had (None if none)."""
        old = self.get(key)
        if old is not None:
            self.put(key, None)
        return old

    def all(self) -> Iterator[tuple[Any, Any]]:
        """Every ``(key, value)`` in key order."""
        return self.range(None, None)

    def range(self, lo: Any = None, hi: Any = None) -> Iterator[tuple[Any, Any]]:
        """``(key, value)`` for ``lo <= key <= hi`` in key order; a ``None`` bound is
        open (so ``None`` itself, the smallest key, is reached by ``lo=None``)."""
        self._check_open()
        lo_b = None if lo is None else self.key_serde.serialize(lo)
        hi_b = None if hi is None else self.key_serde.serialize(hi)
        return self._decoded(self._engine.range(lo_b, hi_b))

    def reverse_range(self, lo: Any = None, hi: Any = None) -> Iterator[tuple[Any, Any]]:
        """As :meth:`range`, in descending key order."""
        self._check_open()
        lo_b = None if lo is None else self.key_serde.serialize(lo)
        hi_b = None if hi is None else self.key_serde.serialize(hi)
        return self._decoded(self._engine.range(lo_b, hi_b, reverse=True))

    def _decoded(self, items: Iterator[tuple[bytes, bytes]]) -> Iterator[tuple[Any, Any]]:
        kd, vd = self.key_serde.deserialize, self.value_serde.deserialize
        for kb, vb in items:
            yield kd(kb), vd(vb)

    def approximate_num_entries(self) -> int:
        """The number of keys (exact for both engines here)."""
        self._check_open()
        return self._engine.approximate_num_entries()

    def restore(self, records: Iterable[ChangelogRecord]) -> None:
        """Apply changelog records ``(key_bytes, value_bytes | None)`` in order, as one
        write, without logging them again."""
        self._check_open()
        self._engine.write(records)
