"""The window store: values per (key, window start), segmented by time for expiry."""

from __future__ import annotations

import struct
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

__all__ = ["WindowStore"]

_TS = 8
_SEQ = struct.Struct(">I")


class WindowStore(SegmentedStore):
    """Windows of a key, stored as ``[key bytes][window start, 8 bytes]`` (Kafka Streams'
    window key schema), one engine per time segment.

    ``fetch(key, from_ms, to_ms)`` is a byte-range scan per segment. Windows starting at
    or before ``stream time - retention_ms`` are expired: puts of them are dropped (and
    not logged), fetches skip them, and segments made only of them are dropped whole.
    Stream time is the latest window start put or restored.

    With ``retain_duplicates`` (stream-stream joins keep every record of a window), each
    put adds an entry under a fresh sequence number instead of replacing, and a ``None``
    put is ignored, as in Kafka Streams.

    Args:
        name, backend, key_serde, value_serde, logging: as for every :class:`Store`.
        retention_ms: How long behind stream time windows are kept.
        window_size_ms: The windows' size, for the ``end_ms`` of the ``Windowed`` keys
            that ``all`` and ``fetch_all`` return.
        segment_interval_ms: Time span of one segment; Kafka's default when None.
        retain_duplicates: Keep every put of a (key, start) instead of the latest.
    """

    def __init__(
        self,
        name: str,
        backend: Backend,
        retention_ms: int,
        window_size_ms: int,
        segment_interval_ms: int | None = None,
        retain_duplicates: bool = False,
        key_serde: Serde = KEY,
        value_serde: Serde = PICKLE,
        logging: bool = True,
    ) -> None:
        if not isinstance(window_size_ms, int) or window_size_ms <= 0:
            raise InvalidRequestError(f"window_size_ms must be an int > 0, got {window_size_ms!r}")
        super().__init__(
            name, backend, retention_ms, segment_interval_ms, key_serde, value_serde, logging
        )
        self.window_size_ms = window_size_ms
        self.retain_duplicates = retain_duplicates
        self._suffix = _TS + (_SEQ.size if retain_duplicates else 0)
        self._seq = 0

    def put(self, key: Any, value: Any | None, window_start_ms: int) -> None:
        """Set the value of ``key``'s window starting at ``window_start_ms``; ``None``
        deletes it. A put of an expired window is dropped."""
        self._check_open()
        kb = self.key_serde.serialize(key)
        if value is None and self.retain_duplicates:
            return
        vb = None if value is None else self.value_serde.serialize(value)
        store_key = kb + encode_timestamp(window_start_ms)
        if self.retain_duplicates:
            self._seq = (self._seq + 1) & 0xFFFFFFFF
            store_key += _SEQ.pack(self._seq)
        if self._write(store_key, vb, window_start_ms):
            self._log(store_key, vb)

    def get(self, key: Any, window_start_ms: int) -> Any | None:
        """The value of ``key``'s window starting at ``window_start_ms`` (None if none or
        expired); with ``retain_duplicates``, the first one put."""
        self._check_open()
        for _, value in self.fetch(key, window_start_ms, window_start_ms):
            return value
        return None

    def fetch(self, key: Any, from_ms: int, to_ms: int) -> Iterator[tuple[int, Any]]:
        """``(window_start_ms, value)`` for ``key``'s live windows starting in
        ``[from_ms, to_ms]``, by start time."""
        self._check_open()
        kb = self.key_serde.serialize(key)
        lo = kb + encode_timestamp(from_ms)
        hi = kb + encode_timestamp(to_ms) + b"\xff" * (self._suffix - _TS)
        n, vd, min_live = len(kb), self.value_serde.deserialize, self._segments.min_live_time_ms()
        for engine in self._segments.search(from_ms, to_ms):
            for sk, vb in engine.range(lo, hi):
                # A key serde that is not prefix-free may put other keys in the range.
                if len(sk) == n + self._suffix and sk[:n] == kb:
                    start = decode_timestamp(sk, n)
                    if start >= min_live:
                        yield start, vd(vb)

    def fetch_all(self, from_ms: int, to_ms: int) -> Iterator[tuple[Windowed, Any]]:
        """``(Windowed, value)`` of every live window starting in ``[from_ms, to_ms]``,
        segment by segment, in key order within a segment."""
        self._check_open()
        return self._scan(from_ms, to_ms)

    def all(self) -> Iterator[tuple[Windowed, Any]]:
        """``(Windowed, value)`` of every live window, as :meth:`fetch_all`."""
        self._check_open()
        return self._scan(_MIN_TS, _MAX_TS)

    def _scan(self, from_ms: int, to_ms: int) -> Iterator[tuple[Windowed, Any]]:
        kd, vd = self.key_serde.deserialize, self.value_serde.deserialize
        size, suffix = self.window_size_ms, self._suffix
        from_ms = max(from_ms, self._segments.min_live_time_ms())
        for engine in self._segments.search(from_ms, to_ms):
            for sk, vb in engine.range():
                start = decode_timestamp(sk, len(sk) - suffix)
                if from_ms <= start <= to_ms:
                    yield Windowed(kd(sk[:-suffix]), start, start + size), vd(vb)

    def restore(self, records: Iterable[ChangelogRecord]) -> None:
        """Apply changelog records in order without logging them; expired ones are
        skipped, as they would have been dropped."""
        self._check_open()
        for store_key, value in records:
            if len(store_key) < self._suffix:
                raise InvalidRequestError(
                    f"window store {self.name!r}: changelog key of {len(store_key)} bytes is "
                    f"shorter than its {self._suffix}-byte time suffix"
                )
            self._write(
                store_key, value, decode_timestamp(store_key, len(store_key) - self._suffix)
            )
