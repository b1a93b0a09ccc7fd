"""Time segments of window and session stores, so that expiry drops whole engines.

Kafka Streams' segmented stores: time is cut into segments of ``segment_interval_ms``;
each segment is its own engine (an LMDB named database, or a dict in memory) holding the
entries whose time (window start, or session end) falls in it. Stream time is the
largest time the store has seen; an entry is live while its time is greater than
``stream_time - retention_ms``, and a segment whose every time is older than that is
dropped at once rather than deleted entry by entry.

Worked example (retention 100, interval 50): after a put at time 230, stream time is
230 and the oldest live time is 131; segment 2 (times 100..149) is kept, segments 0 and
1 (times 0..99) are dropped, a put at time 120 is refused as expired.
"""

from __future__ import annotations

from raystream.errors import InvalidRequestError
from raystream.streams.serde import KEY, PICKLE, Serde
from raystream.streams.stores.base import Store
from raystream.streams.stores.engine import Backend, Engine

__all__ = ["SegmentedStore", "Segments", "default_segment_interval_ms"]

MIN_TS = -(1 << 63)
MAX_TS = (1 << 63) - 1

_PREFIX = "segment-"
NO_STREAM_TIME = -(1 << 63)


def default_segment_interval_ms(retention_ms: int) -> int:
    """Kafka Streams' default: half the retention, at least one minute."""
    return max(retention_ms // 2, 60_000)


class Segments:
    """The live segments of one store and the stream time that decides which are live.

    Args:
        backend: Where the segment engines live.
        retention_ms: How far behind stream time an entry stays (>= 0).
        segment_interval_ms: The time span of one segment (> 0).
    """

    def __init__(self, backend: Backend, retention_ms: int, segment_interval_ms: int) -> None:
        if not isinstance(retention_ms, int) or retention_ms < 0:
            raise InvalidRequestError(f"retention_ms must be an int >= 0, got {retention_ms!r}")
        if not isinstance(segment_interval_ms, int) or segment_interval_ms <= 0:
            raise InvalidRequestError(
                f"segment_interval_ms must be an int > 0, got {segment_interval_ms!r}"
            )
        self.backend = backend
        self.retention_ms = retention_ms
        self.segment_interval_ms = segment_interval_ms
        self.stream_time_ms = NO_STREAM_TIME
        self._engines: dict[int, Engine] = {}
        self.reload()

    def reload(self) -> None:
        """(Re)open the segments the backend holds, e.g. after a restart or a wipe."""
        self._engines = {
            int(name[len(_PREFIX) :]): self.backend.open(name)
            for name in self.backend.names()
            if name.startswith(_PREFIX)
        }

    def segment_id(self, time_ms: int) -> int:
        return time_ms // self.segment_interval_ms

    def min_live_time_ms(self) -> int:
        """The oldest time still live: ``stream_time - retention + 1``."""
        if self.stream_time_ms == NO_STREAM_TIME:
            return NO_STREAM_TIME
        return self.stream_time_ms - self.retention_ms + 1

    def is_live(self, time_ms: int) -> bool:
        return time_ms >= self.min_live_time_ms()

    def observe(self, time_ms: int) -> None:
        """Advance stream time to ``time_ms`` if later, dropping segments that expire."""
        if time_ms <= self.stream_time_ms:
            return
        self.stream_time_ms = time_ms
        min_live = self.min_live_time_ms()
        for sid in [s for s in self._engines if (s + 1) * self.segment_interval_ms <= min_live]:
            del self._engines[sid]
            self.backend.drop(_PREFIX + str(sid))

    def for_write(self, time_ms: int) -> Engine | None:
        """The segment for an entry at ``time_ms`` (created if needed), None if expired.

        Call :meth:`observe` first, so an entry advances stream time before it is checked.
        """
        if not self.is_live(time_ms):
            return None
        sid = self.segment_id(time_ms)
        engine = self._engines.get(sid)
        if engine is None:
            engine = self._engines[sid] = self.backend.open(_PREFIX + str(sid))
        return engine

    def existing(self, time_ms: int) -> Engine | None:
        """The segment holding ``time_ms`` if it exists and ``time_ms`` is live."""
        if not self.is_live(time_ms):
            return None
        return self._engines.get(self.segment_id(time_ms))

    def search(self, from_ms: int, to_ms: int) -> list[Engine]:
        """The live segments that may hold times in ``[from_ms, to_ms]``, oldest first."""
        lo = self.segment_id(max(from_ms, self.min_live_time_ms()))
        hi = self.segment_id(to_ms)
        return [self._engines[s] for s in sorted(self._engines) if lo <= s <= hi]


class SegmentedStore(Store):
    """What the window and session stores share: their entries live in time segments
    (:class:`Segments`), each entry filed under one time (a window's start, a session's
    end), so expiry drops whole segments.

    Args:
        name, backend, key_serde, value_serde, logging: as for every :class:`Store`.
        retention_ms: How long behind stream time entries are kept.
        segment_interval_ms: Time span of one segment; Kafka's default when None.
    """

    def __init__(
        self,
        name: str,
        backend: Backend,
        retention_ms: int,
        segment_interval_ms: int | None,
        key_serde: Serde = KEY,
        value_serde: Serde = PICKLE,
        logging: bool = True,
    ) -> None:
        super().__init__(name, backend, key_serde, value_serde, logging)
        if segment_interval_ms is None:
            segment_interval_ms = default_segment_interval_ms(retention_ms)
        self._segments = Segments(backend, retention_ms, segment_interval_ms)

    @property
    def retention_ms(self) -> int:
        return self._segments.retention_ms

    @property
    def segment_interval_ms(self) -> int:
        return self._segments.segment_interval_ms

    @property
    def observed_stream_time_ms(self) -> int:
        """The latest entry time seen (a very negative number before any)."""
        return self._segments.stream_time_ms

    def _reset(self) -> None:
        self._segments.reload()

    def _write(self, store_key: bytes, value: bytes | None, time_ms: int) -> bool:
        """Write into the segment of ``time_ms``; False if that time has expired."""
        self._segments.observe(time_ms)
        engine = self._segments.for_write(time_ms)
        if engine is None:
            return False
        engine.put(store_key, value)
        return True

    def approximate_num_entries(self) -> int:
        """Entries in the live segments (may count some expired ones)."""
        self._check_open()
        return sum(e.approximate_num_entries() for e in self._segments.search(MIN_TS, MAX_TS))
