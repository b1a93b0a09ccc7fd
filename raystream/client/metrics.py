"""Client metrics under Kafka's names: windowed stats, the producer's and the consumer's.

What ``Producer.metrics()`` and ``Consumer.metrics()`` return. Each metric keeps Kafka's
name (``record-send-rate``, ``request-latency-avg``, ``records-lag-max``, ...), so a
dashboard built for Kafka's clients reads them as they are; the Kafka docs' meanings
hold, with the units they use (rates per second, latencies and times in ms).

Cheap by design: the hot paths add integers and record one sample per request or per
poll (never per record), with no lock; a reader in another thread may see a value a
moment old, never a torn one. Averages, maxima and rates are *windowed* as in Kafka
(``metrics.sample.window.ms`` = 30 s, ``metrics.num.samples`` = 2): they describe the
last 30 to 60 seconds, and read NaN when nothing was recorded in that time (a rate reads
0). ``*-total`` metrics count since the client was made.

Pure: no Ray, no clock of its own; the caller passes monotonic seconds.

Example:
    >>> stat = Windowed()
    >>> stat.record(4.0, now=0.0); stat.record(2.0, now=1.0)
    >>> stat.avg(now=1.0), stat.max(now=1.0), stat.rate(now=1.0)
    (3.0, 4.0, 0.2)

(Kafka's rate divides by at least one whole window while the oldest sample is younger:
6 over 30 s, not over the 1 s that passed.)
"""

from __future__ import annotations

import math
from typing import Any

from raystream.types import TopicPartition

WINDOW_S = 30.0
"""Kafka's ``metrics.sample.window.ms``."""
SAMPLES = 2
"""Kafka's ``metrics.num.samples``."""


def payload_bytes(payload: Any) -> int:
    """The size of a produce call's records (bytes or an Arrow buffer; 0 if unknown)."""
    try:
        return len(payload)
    except TypeError:
        return 0


class _Sample:
    __slots__ = ("count", "max", "start", "total")

    def __init__(self, start: float) -> None:
        self.start = start
        self.count = 0
        self.total = 0.0
        self.max = -math.inf


class Windowed:
    """Kafka's SampledStat: values recorded into ``samples`` windows of ``window_s``.

    One writer thread; readers in other threads see a consistent-enough view (a new
    window replaces a whole sample object, so a reader never sees a half-reset one).
    """

    __slots__ = ("_samples", "_window_s")

    def __init__(self, window_s: float = WINDOW_S, samples: int = SAMPLES) -> None:
        self._window_s = window_s
        self._samples: list[_Sample] = [_Sample(-math.inf)] * samples

    def record(self, value: float, now: float) -> None:
        """Add one value at time ``now`` (monotonic seconds)."""
        current = self._samples[-1]
        if now - current.start >= self._window_s:
            current = _Sample(now)
            self._samples = [*self._samples[1:], current]
        current.count += 1
        current.total += value
        if value > current.max:
            current.max = value

    def _live(self, now: float) -> list[_Sample]:
        horizon = now - self._window_s * len(self._samples)
        return [s for s in self._samples if s.start > horizon and s.count]

    def avg(self, now: float) -> float:
        """The mean of the values in the window (NaN: none)."""
        live = self._live(now)
        count = sum(s.count for s in live)
        return sum(s.total for s in live) / count if count else math.nan

    def max(self, now: float) -> float:
        """The largest value in the window (NaN: none)."""
        live = self._live(now)
        return max(s.max for s in live) if live else math.nan

    def rate(self, now: float) -> float:
        """The sum of the values per second over the window."""
        return self._per_second(sum(s.total for s in self._live(now)), now)

    def count_rate(self, now: float) -> float:
        """How many values were recorded per second over the window."""
        return self._per_second(sum(s.count for s in self._live(now)), now)

    def _per_second(self, amount: float, now: float) -> float:
        live = self._live(now)
        if not live:
            return 0.0
        elapsed = now - live[0].start
        # Kafka's Rate: at least samples - 1 whole windows, so a young stat is not inflated.
        elapsed = max(elapsed, self._window_s * (len(self._samples) - 1))
        return amount / elapsed


class ProducerMetrics:
    """What a producer's sender records; :meth:`snapshot` names it as Kafka does.

    Written by the sender thread only (``record_*``); :meth:`snapshot` may run anywhere.
    """

    def __init__(self) -> None:
        self.records_sent = Windowed()  # records per produce call, at send time
        self.bytes_sent = Windowed()  # bytes per produce call
        self.retries = Windowed()  # records per resent call
        self.errors = Windowed()  # records per failure
        self.latency_ms = Windowed()  # per answered call
        self.queue_time_ms = Windowed()  # oldest record's wait per call
        self.throttle_ms = Windowed()  # per call while a client quota is in force
        self.record_send_total = 0
        self.record_retry_total = 0
        self.record_error_total = 0
        self.request_total = 0
        self.response_total = 0
        self.outgoing_byte_total = 0

    def record_send(
        self, records: int, size: int, retry: bool, queued_s: float, now: float
    ) -> None:
        """A produce call went out with ``records`` records in ``size`` bytes, the
        oldest of them buffered ``queued_s``; ``retry``: it was sent before."""
        self.record_send_total += records
        self.request_total += 1
        self.outgoing_byte_total += size
        self.records_sent.record(records, now)
        self.bytes_sent.record(size, now)
        self.queue_time_ms.record(queued_s * 1000, now)
        if retry:
            self.record_retry_total += records
            self.retries.record(records, now)

    def record_answer(self, latency_s: float, now: float) -> None:
        """A produce call was answered (success or error) after ``latency_s``."""
        self.response_total += 1
        self.latency_ms.record(latency_s * 1000, now)

    def record_throttle(self, throttle_ms: int, now: float) -> None:
        """A call was metered against the producer's client quota: ``throttle_ms``
        is how long the producer then sends nothing (0: within the quota)."""
        self.throttle_ms.record(throttle_ms, now)

    def record_errors(self, records: int, now: float) -> None:
        """``records`` records failed for good (their futures carry the error)."""
        self.record_error_total += records
        self.errors.record(records, now)

    def snapshot(self, now: float, **gauges: float) -> dict[str, float]:
        """Kafka's producer metrics (``producer-metrics`` group) at ``now``; ``gauges``
        (buffer sizes, calls in flight) are added as given."""
        return {
            "record-send-rate": self.records_sent.rate(now),
            "record-send-total": float(self.record_send_total),
            "record-retry-rate": self.retries.rate(now),
            "record-retry-total": float(self.record_retry_total),
            "record-error-rate": self.errors.rate(now),
            "record-error-total": float(self.record_error_total),
            "records-per-request-avg": self.records_sent.avg(now),
            "record-queue-time-avg": self.queue_time_ms.avg(now),
            "record-queue-time-max": self.queue_time_ms.max(now),
            "request-rate": self.records_sent.count_rate(now),
            "request-total": float(self.request_total),
            "response-rate": self.latency_ms.count_rate(now),
            "response-total": float(self.response_total),
            "request-latency-avg": self.latency_ms.avg(now),
            "request-latency-max": self.latency_ms.max(now),
            "request-size-avg": self.bytes_sent.avg(now),
            "request-size-max": self.bytes_sent.max(now),
            "batch-size-avg": self.bytes_sent.avg(now),
            "batch-size-max": self.bytes_sent.max(now),
            "outgoing-byte-rate": self.bytes_sent.rate(now),
            "outgoing-byte-total": float(self.outgoing_byte_total),
            "produce-throttle-time-avg": self.throttle_ms.avg(now),
            "produce-throttle-time-max": self.throttle_ms.max(now),
            **{name: float(value) for name, value in gauges.items()},
        }


class ConsumerMetrics:
    """What a consumer's fetcher and poll loop record; :meth:`snapshot` names it.

    One thread (the consumer's) writes and reads.
    """

    def __init__(self) -> None:
        self.consumed_records = Windowed()  # records per partition per poll
        self.consumed_bytes = Windowed()
        self.fetch_latency_ms = Windowed()  # per fetch answer
        self.fetch_bytes = Windowed()
        self.fetch_records = Windowed()
        self.commit_latency_ms = Windowed()
        self.poll_gap_ms = Windowed()  # time between polls
        self.throttle_ms = Windowed()  # per fetch while a client quota is in force
        self.records_consumed_total = 0
        self.bytes_consumed_total = 0
        self.fetch_total = 0
        self.commit_total = 0
        self.last_poll = math.nan

    def record_fetch(self, latency_s: float, size: int, records: int, now: float) -> None:
        """A fetch was answered after ``latency_s`` with ``records`` in ``size`` bytes."""
        self.fetch_total += 1
        self.fetch_latency_ms.record(latency_s * 1000, now)
        self.fetch_bytes.record(size, now)
        self.fetch_records.record(records, now)

    def record_throttle(self, throttle_ms: int, now: float) -> None:
        """A fetch answer was metered against the consumer's client quota:
        ``throttle_ms`` is how long the consumer then fetches nothing (0: within it)."""
        self.throttle_ms.record(throttle_ms, now)

    def record_consumed(self, records: int, size: float, now: float) -> None:
        """``records`` records of one partition (about ``size`` bytes) were returned."""
        self.records_consumed_total += records
        self.bytes_consumed_total += size
        self.consumed_records.record(records, now)
        self.consumed_bytes.record(size, now)

    def record_commit(self, latency_s: float, now: float) -> None:
        """An offset commit completed after ``latency_s``."""
        self.commit_total += 1
        self.commit_latency_ms.record(latency_s * 1000, now)

    def record_poll(self, now: float) -> None:
        """The application polled (or took the next record) at ``now``."""
        if self.last_poll == self.last_poll:  # not NaN
            self.poll_gap_ms.record((now - self.last_poll) * 1000, now)
        self.last_poll = now

    def snapshot(
        self, now: float, lags: dict[TopicPartition, int], **gauges: float
    ) -> dict[str, Any]:
        """Kafka's consumer metrics at ``now`` (``consumer-fetch-manager-metrics``,
        ``consumer-coordinator-metrics``, ``consumer-metrics``).

        ``lags`` are the partitions' current lags (high watermark minus position):
        ``records-lag-max`` is their maximum, and ``records-lag`` maps each partition to
        its lag (Kafka's per-partition metric of that name).
        """
        return {
            "records-consumed-rate": self.consumed_records.rate(now),
            "records-consumed-total": float(self.records_consumed_total),
            "bytes-consumed-rate": self.consumed_bytes.rate(now),
            "bytes-consumed-total": float(self.bytes_consumed_total),
            "records-per-request-avg": self.fetch_records.avg(now),
            "fetch-latency-avg": self.fetch_latency_ms.avg(now),
            "fetch-latency-max": self.fetch_latency_ms.max(now),
            "fetch-rate": self.fetch_latency_ms.count_rate(now),
            "fetch-total": float(self.fetch_total),
            "fetch-size-avg": self.fetch_bytes.avg(now),
            "fetch-size-max": self.fetch_bytes.max(now),
            "fetch-throttle-time-avg": self.throttle_ms.avg(now),
            "fetch-throttle-time-max": self.throttle_ms.max(now),
            "records-lag-max": float(max(lags.values())) if lags else math.nan,
            "records-lag": {tp: float(lag) for tp, lag in lags.items()},
            "commit-latency-avg": self.commit_latency_ms.avg(now),
            "commit-latency-max": self.commit_latency_ms.max(now),
            "commit-rate": self.commit_latency_ms.count_rate(now),
            "commit-total": float(self.commit_total),
            "time-between-poll-avg": self.poll_gap_ms.avg(now),
            "time-between-poll-max": self.poll_gap_ms.max(now),
            "last-poll-seconds-ago": now - self.last_poll,
            **{name: float(value) for name, value in gauges.items()},
        }
