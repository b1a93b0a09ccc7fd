"""The key of a windowed result: the record key and the window it fell in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, order=True)
class Windowed:
    """A record key together with its window ``[start_ms, end_ms)``.

    Windowed aggregations produce tables keyed by ``Windowed``, as Kafka Streams'
    ``Windowed<K>``. Session windows are closed intervals in Kafka Streams (a session of
    one record has ``start_ms == end_ms``); time windows are half-open. Ordering is by
    key, then start, then end, which is also the order a windowed store iterates in.

    Attributes:
        key: The record key the window belongs to.
        start_ms: Window start, event time in milliseconds since the epoch.
        end_ms: Window end, event time in milliseconds since the epoch.
    """

    key: Any
    start_ms: int
    end_ms: int
