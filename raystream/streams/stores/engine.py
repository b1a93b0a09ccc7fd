"""Sorted byte maps under the stores: one in memory, one on disk (LMDB).

Every store keeps bytes in an :class:`Engine`, a sorted map with inclusive range scans
and atomic batch writes; a :class:`Backend` opens engines by name and drops them (a
window store keeps one engine per time segment, so expiry drops a whole segment).

Why LMDB for the persistent engine (``lmdb`` 3.0 against ``rocksdict`` 0.3.29, the
RocksDB bindings; 1M entries of 16-byte keys and 100-byte values inserted in random order,
one Python process, this 2-core VM):

=====================  ===========  ===========
figure                 lmdb         rocksdict
=====================  ===========  ===========
put, one write each    see report   see report
put, batches of 10k    see report   see report
get (random)           see report   see report
range scan             see report   see report
=====================  ===========  ===========

- Reads are what a task does most (every aggregate and join reads before it writes), and
  LMDB's reads are a B+tree walk in a memory map with no copy into a block cache.
- Crash safety without a recovery step: LMDB is a copy-on-write B+tree, so after a kill
  -9 the file holds exactly the last committed transaction. This engine keeps one write
  transaction open between flushes and commits it in :meth:`Engine.flush`, so what is on
  disk is always the state of a task commit, every store segment together, never a
  partial one. RocksDB would need its write-ahead log (which Kafka Streams turns off and
  then cannot trust the store under exactly-once) for the same.
- Memory: no block cache or memtables to size per store; pages are the OS page cache.
- Wheels: lmdb ships manylinux/macOS/Windows wheels of under 2 MB installed; rocksdict
  is 11 MB. RocksDB wins on disk space (LSM, compression) and on sustained write-heavy
  load on large data; a task's store is small and written in batches at each commit.

Limit (LMDB's): an encoded key, with the 8 to 16 bytes a window or session store adds,
is at most 511 bytes; a longer one is refused with a clear error.

Thread rule (LMDB's): the write transaction belongs to the thread that opened it, so a
store is written from one thread (the task's). Reads from another thread see the state
of the last flush.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Protocol

import lmdb
from sortedcontainers import SortedList

from raystream.errors import IllegalStateError, InvalidRequestError

__all__ = ["Backend", "Engine", "LmdbBackend", "MemoryBackend"]


class Engine(Protocol):
    """A sorted map of bytes to bytes.

    Invariant: iteration is in unsigned byte order of the keys; ``range`` bounds are
    inclusive and ``None`` means unbounded.
    """

    def get(self, key: bytes) -> bytes | None: ...

    def put(self, key: bytes, value: bytes | None) -> None:
        """Write ``value`` under ``key``; ``None`` deletes it."""

    def write(self, batch: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Apply puts and deletes in order, as one write."""

    def range(
        self, lo: bytes | None = None, hi: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]: ...

    def approximate_num_entries(self) -> int: ...

    def flush(self) -> None:
        """Make every write so far durable, atomically."""


class Backend(Protocol):
    """Opens engines by name; ``persistent`` tells whether they outlive the process."""

    persistent: bool

    def open(self, name: str) -> Engine: ...

    def names(self) -> list[str]:
        """Engines that exist (opened before, or found on disk)."""

    def drop(self, name: str) -> None:
        """Delete the engine ``name`` and its data (closing it if open)."""

    def flush(self) -> None:
        """Make every write to every engine durable, atomically."""

    def close(self) -> None: ...


class MemoryEngine:
    """A sorted in-memory map (a dict plus a sorted key list), as Kafka's in-memory store.

    Range scans copy the keys in range first, so writes during a scan are safe (the scan
    sees the keys of its start and skips those deleted since).
    """

    def __init__(self) -> None:
        self._data: dict[bytes, bytes] = {}
        self._keys = SortedList()

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def put(self, key: bytes, value: bytes | None) -> None:
        if value is None:
            if self._data.pop(key, None) is not None:
                self._keys.remove(key)
        else:
            if key not in self._data:
                self._keys.add(key)
            self._data[key] = value

    def write(self, batch: Iterable[tuple[bytes, bytes | None]]) -> None:
        for key, value in batch:
            self.put(key, value)

    def range(
        self, lo: bytes | None = None, hi: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        keys = list(self._keys.irange(lo, hi, reverse=reverse))
        data = self._data
        for key in keys:
            value = data.get(key)
            if value is not None:
                yield key, value

    def approximate_num_entries(self) -> int:
        return len(self._data)

    def flush(self) -> None:
        pass


class MemoryBackend:
    """Engines in memory: lost with the process, rebuilt from the changelog."""

    persistent = False

    def __init__(self) -> None:
        self._engines: dict[str, MemoryEngine] = {}

    def open(self, name: str) -> MemoryEngine:
        return self._engines.setdefault(name, MemoryEngine())

    def names(self) -> list[str]:
        return sorted(self._engines)

    def drop(self, name: str) -> None:
        self._engines.pop(name, None)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


_OPEN_PATHS: set[str] = set()
_OPEN_LOCK = threading.Lock()


class LmdbBackend:
    """Engines in one LMDB environment (a directory): each engine a named database.

    One write transaction spans every engine of the backend and is committed (and
    fsynced) by ``flush()`` on any of them, so a store's segments are durable together.

    Args:
        directory: Where the environment lives; created if missing.
        map_size_bytes: The largest the environment may grow (address space reserved,
            not disk; the file grows as it fills).
    """

    persistent = True

    def __init__(self, directory: str | os.PathLike[str], map_size_bytes: int = 1 << 36) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._path = str(self.directory.resolve())
        with _OPEN_LOCK:
            # LMDB forbids opening one environment twice in a process (its locks are
            # per process): a second open would corrupt it, so refuse it here.
            if self._path in _OPEN_PATHS:
                raise IllegalStateError(f"store directory {self._path} is already open")
            _OPEN_PATHS.add(self._path)
        try:
            self._env = lmdb.Environment(
                str(self.directory),
                map_size=map_size_bytes,
                max_dbs=4096,
                sync=False,  # flush() fsyncs once per commit, not once per transaction
                metasync=False,
                readahead=False,
                lock=True,
            )
        except lmdb.Error:
            with _OPEN_LOCK:
                _OPEN_PATHS.discard(self._path)
            raise
        self._lock = threading.RLock()
        self._txn: lmdb.Transaction | None = None
        self._owner: int | None = None
        self._engines: dict[str, LmdbEngine] = {}
        self._closed = False

    # --- transaction management (one write transaction between flushes) ---

    def _write_txn(self) -> lmdb.Transaction:
        if self._closed:
            raise IllegalStateError(f"store backend at {self.directory} is closed")
        me = threading.get_ident()
        if self._txn is None:
            self._txn = self._env.begin(write=True)
            self._owner = me
        elif self._owner != me:
            raise IllegalStateError(
                "an LMDB store is written from one thread; flush() from the writing thread "
                "before writing from another"
            )
        return self._txn

    def _read_txn(self) -> tuple[lmdb.Transaction, bool]:
        """The open write transaction on its own thread (sees unflushed writes), else a
        read transaction the caller must abort."""
        if self._closed:
            raise IllegalStateError(f"store backend at {self.directory} is closed")
        if self._txn is not None and self._owner == threading.get_ident():
            return self._txn, False
        return self._env.begin(write=False, buffers=False), True

    def flush(self) -> None:
        """Commit the open write transaction and fsync: the flush of every engine."""
        with self._lock:
            if self._txn is not None:
                if self._owner != threading.get_ident():
                    raise IllegalStateError("flush() must run on the thread that wrote")
                txn, self._txn, self._owner = self._txn, None, None
                txn.commit()
                self._env.sync(True)

    def db(self, name: str) -> lmdb._Database:
        """The handle of database ``name``, created if missing (and committed at once
        unless a write transaction of this thread is open, which then holds it)."""
        with self._lock:
            if self._txn is not None:
                return self._env.open_db(_db_name(name), txn=self._write_txn(), create=True)
            with self._env.begin(write=True) as txn:
                return self._env.open_db(_db_name(name), txn=txn, create=True)

    # --- Backend ---

    def open(self, name: str) -> LmdbEngine:
        with self._lock:
            engine = self._engines.get(name)
            if engine is None:
                engine = self._engines[name] = LmdbEngine(self, name)
            return engine

    def names(self) -> list[str]:
        txn, own = self._read_txn()
        try:
            names = [k.decode("utf-8") for k, _ in txn.cursor()]
        finally:
            if own:
                txn.abort()
        return sorted(names)

    def drop(self, name: str) -> None:
        with self._lock:
            engine = self._engines.pop(name, None)
            if engine is not None or name in self.names():
                txn = self._write_txn()
                txn.drop(self._env.open_db(_db_name(name), txn=txn, create=True), delete=True)

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self.flush()
                self._closed = True
                self._env.close()
                with _OPEN_LOCK:
                    _OPEN_PATHS.discard(self._path)


class LmdbEngine:
    """One named database of an :class:`LmdbBackend`."""

    def __init__(self, backend: LmdbBackend, name: str) -> None:
        self._backend = backend
        self.name = name
        self._db = backend.db(name)

    def get(self, key: bytes) -> bytes | None:
        txn, own = self._backend._read_txn()
        try:
            return txn.get(key, db=self._db)
        finally:
            if own:
                txn.abort()

    def put(self, key: bytes, value: bytes | None) -> None:
        txn = self._backend._write_txn()
        try:
            if value is None:
                txn.delete(key, db=self._db)
            else:
                txn.put(key, value, db=self._db)
        except lmdb.BadValsizeError as e:
            raise InvalidRequestError(
                f"a key of {len(key)} encoded bytes is longer than the on-disk store's limit "
                f"of {_MAX_KEY_BYTES} (LMDB's); use the in-memory store or shorter keys"
            ) from e

    def write(self, batch: Iterable[tuple[bytes, bytes | None]]) -> None:
        for key, value in batch:
            self.put(key, value)

    def range(
        self, lo: bytes | None = None, hi: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        # Read in chunks, each under its own transaction, resuming past the last key:
        # a caller may write between items, and no cursor may outlive its transaction.
        after: bytes | None = None
        while True:
            if self._backend._engines.get(self.name) is not self:
                return  # dropped (an expired segment) while the caller iterated
            txn, own = self._backend._read_txn()
            try:
                chunk = _scan(txn.cursor(db=self._db), lo, hi, reverse, after)
            finally:
                if own:
                    txn.abort()
            yield from chunk
            if len(chunk) < _CHUNK:
                return
            after = chunk[-1][0]

    def approximate_num_entries(self) -> int:
        txn, own = self._backend._read_txn()
        try:
            return txn.stat(self._db)["entries"]
        finally:
            if own:
                txn.abort()

    def flush(self) -> None:
        self._backend.flush()


_CHUNK = 1024
_MAX_KEY_BYTES = 511  # LMDB's compiled-in maximum key size


def _scan(
    cursor: lmdb.Cursor, lo: bytes | None, hi: bytes | None, reverse: bool, after: bytes | None
) -> list[tuple[bytes, bytes]]:
    """Up to ``_CHUNK`` items within inclusive ``[lo, hi]``, in scan order, strictly past
    ``after`` (a key of the previous chunk) when given."""
    out: list[tuple[bytes, bytes]] = []
    if not reverse:
        start = after if after is not None else lo
        found = cursor.set_range(start) if start is not None else cursor.first()
        if found and after is not None and cursor.key() == after:
            found = cursor.next()
        if not found:
            return out
        for key, value in cursor.iternext():
            if (hi is not None and key > hi) or len(out) == _CHUNK:
                break
            out.append((key, value))
        return out
    start = after if after is not None else hi
    if start is None:
        found = cursor.last()
    elif cursor.set_range(start):
        found = cursor.prev() if (cursor.key() != start or after is not None) else True
    else:
        found = cursor.last()
    if not found:
        return out
    for key, value in cursor.iterprev():
        if (lo is not None and key < lo) or len(out) == _CHUNK:
            break
        out.append((key, value))
    return out


def _db_name(name: str) -> bytes:
    if not name:
        raise InvalidRequestError("a store engine needs a non-empty name")
    return name.encode("utf-8")
