"""The session store: one value per (key, session), found by the session merge rule."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from raystream.errors import InvalidRequestError
from raystream.streams.serde import KEY, PICKLE, Serde, decode_timestamp, encode_timestamp
from raystream.streams.stores.changelog import ChangelogRecord
from raystream.streams.stores.engine import Backend
from raystream.streams.stores.segments import MAX_TS as _MAX_TS
from raystream.streams.stores.segments import MIN_TS as _MIN_TS
from raystream.streams.stores.segments import SegmentedStore
from raystream.streams.windowed import Windowed

__all__ = ["SessionStore"]

_SUFFIX = 16


class SessionStore(SegmentedStore):
    """Sessions of a key, stored as ``[key bytes][end, 8 bytes][start, 8 bytes]`` (Kafka
    Streams' session key schema), one engine per segment of session end time.

    A session is a ``Windowed(key, start_ms, end_ms)`` with ``start_ms <= end_ms``, both
    inclusive. Sessions ending at or before ``stream time - retention_ms`` are expired:
    puts of them are dropped, lookups skip them. Stream time is the latest session end
    put or restored.

    Session merging asks :meth:`find_sessions` for the sessions a new record at time t
    touches: ``find_sessions(key, t - gap, t + gap)`` returns each session with
    ``end >= t - gap`` and ``start <= t + gap``; the caller removes them and puts the
    merged one.

    Args:
        name, backend, key_serde, value_serde, logging: as for every :class:`Store`.
        retention_ms: How long behind stream time sessions are kept.
        segment_interval_ms: Time span of one segment; Kafka's default when None.
    """

    def __init__(
        self,
        name: str,
        backend: Backend,
        retention_ms: int,
        segment_interval_ms: int | None = None,
        key_serde: Serde = KEY,
        value_serde: Serde = PICKLE,
        logging: bool = True,
    ) -> None:
        super().__init__(
            name, backend, retention_ms, segment_interval_ms, key_serde, value_serde, logging
        )

    def store_key(self, session: Windowed) -> bytes:
        """The bytes ``session`` is filed under: key, end, start (a caching store in
        front of this one files its entries the same way)."""
        if not isinstance(session, Windowed):
            raise InvalidRequestError(
                f"a session store key is a Windowed, got {type(session).__name__}"
            )
        if session.start_ms > session.end_ms:
            raise InvalidRequestError(f"session {session} starts after it ends")
        return (
            self.key_serde.serialize(session.key)
            + encode_timestamp(session.end_ms)
            + encode_timestamp(session.start_ms)
        )

    def put(self, session: Windowed, value: Any | None) -> None:
        """Set the value of ``session``; ``None`` removes it. A put of an expired session
        is dropped."""
        self._check_open()
        store_key = self.store_key(session)
        vb = None if value is None else self.value_serde.serialize(value)
        if self._write(store_key, vb, session.end_ms):
            self._log(store_key, vb)

    def remove(self, session: Windowed) -> None:
        """Remove ``session`` (the same as ``put(session, None)``)."""
        self.put(session, None)

    def get(self, session: Windowed) -> Any | None:
        """The value of exactly ``session`` (None if none or expired)."""
        self._check_open()
        engine = self._segments.existing(session.end_ms)
        raw = None if engine is None else engine.get(self.store_key(session))
        return None if raw is None else self.value_serde.deserialize(raw)

    def find_sessions(
        self, key: Any, earliest_session_end_ms: int, latest_session_start_ms: int
    ) -> Iterator[tuple[Windowed, Any]]:
        """``(session, value)`` for ``key``'s live sessions with ``end >=
        earliest_session_end_ms`` and ``start <= latest_session_start_ms``, by end time.
        """
        self._check_open()
        kb = self.key_serde.serialize(key)
        n, vd = len(kb), self.value_serde.deserialize
        earliest = max(earliest_session_end_ms, self._segments.min_live_time_ms())
        lo = kb + encode_timestamp(earliest)
        hi = kb + b"\xff" * _SUFFIX
        for engine in self._segments.search(earliest, _MAX_TS):
            for sk, vb in engine.range(lo, hi):
                if len(sk) != n + _SUFFIX or sk[:n] != kb:
                    continue  # a key serde that is not prefix-free
                start = decode_timestamp(sk, n + 8)
                if start <= latest_session_start_ms:
                    yield Windowed(key, start, decode_timestamp(sk, n)), vd(vb)

    def fetch(self, key: Any) -> Iterator[tuple[Windowed, Any]]:
        """Every live session of ``key``, by end time."""
        return self.find_sessions(key, _MIN_TS, _MAX_TS)

    def all(self) -> Iterator[tuple[Windowed, Any]]:
        """Every live session, segment by segment, in key order within a segment."""
        self._check_open()
        kd, vd = self.key_serde.deserialize, self.value_serde.deserialize
        min_live = self._segments.min_live_time_ms()
        for engine in self._segments.search(_MIN_TS, _MAX_TS):
            for sk, vb in engine.range():
                end = decode_timestamp(sk, len(sk) - 16)
                if end >= min_live:
                    start = decode_timestamp(sk, len(sk) - 8)
                    yield Windowed(kd(sk[:-_SUFFIX]), start, end), vd(vb)

    def restore(self, records: Iterable[ChangelogRecord]) -> None:
        """Apply changelog records in order without logging them; expired ones are
        skipped."""
        self._check_open()
        for store_key, value in records:
            if len(store_key) < _SUFFIX:
                raise InvalidRequestError(
                    f"session store {self.name!r}: changelog key of {len(store_key)} bytes is "
                    f"shorter than its {_SUFFIX}-byte time suffix"
                )
            self._write(store_key, value, decode_timestamp(store_key, len(store_key) - _SUFFIX))
