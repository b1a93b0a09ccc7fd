"""Retention by time and size, the log start offset, and DeleteRecords."""

from __future__ import annotations

import os

import pytest

from raystream.errors import OffsetOutOfRangeError
from raystream.log import OFFSET_COLUMN

START = 1_700_000_000_000
HOUR = 3600 * 1000


def segment_files(log) -> list[str]:
    return sorted(n for n in os.listdir(log.directory) if n.endswith(".log"))


def one_segment_per_batch(log, batch, timestamps: list[int], rows: int = 5) -> None:
    """Append one batch per timestamp, each in its own segment."""
    for i, ts in enumerate(timestamps):
        log.append(batch([f"{i}-{j}" for j in range(rows)], timestamps=ts))
        log.roll()


def test_retention_ms_deletes_closed_segments_older_than_the_limit(make_log, batch, clock):
    log = make_log(retention_ms=10 * HOUR)
    one_segment_per_batch(log, batch, [START + h * HOUR for h in range(6)])
    log.append(batch(["active"], timestamps=START))  # old, but active
    assert log.segment_count == 7
    clock.set(START + 10 * HOUR)
    assert log.enforce_retention() == 0
    clock.set(START + 10 * HOUR + 1)  # segment 0's newest record is now too old
    assert log.enforce_retention() == 1
    assert log.log_start_offset == 5
    clock.set(START + 13 * HOUR + 1)
    assert log.enforce_retention() == 3
    assert log.log_start_offset == 20
    assert segment_files(log)[0] == f"{20:020d}.log"
    # Far in the future every closed segment goes, never the active one.
    assert log.enforce_retention(now_ms=START + 1000 * HOUR) == 2
    assert log.segment_count == 1
    assert log.log_start_offset == 30
    assert log.read(30).column("value").to_pylist() == ["active"]
    assert log.enforce_retention(now_ms=START + 1000 * HOUR) == 0


def test_retention_ms_uses_the_newest_record_of_a_segment(make_log, batch):
    log = make_log(retention_ms=HOUR)
    log.append(batch(["old"], timestamps=START))
    log.append(batch(["new"], timestamps=START + 5 * HOUR))
    log.roll()
    log.append(batch(["active"], timestamps=START + 5 * HOUR))
    assert log.enforce_retention(now_ms=START + 5 * HOUR) == 0
    assert log.enforce_retention(now_ms=START + 6 * HOUR + 1) == 1


def test_retention_deletes_only_the_oldest_prefix(make_log, batch):
    log = make_log(retention_ms=HOUR)
    one_segment_per_batch(log, batch, [START + 10 * HOUR, START, START])
    assert log.enforce_retention(now_ms=START + 5 * HOUR) == 0
    assert log.log_start_offset == 0


def test_unlimited_retention_deletes_nothing(make_log, batch):
    log = make_log(retention_ms=-1, retention_bytes=-1)
    one_segment_per_batch(log, batch, [START] * 4)
    assert log.enforce_retention(now_ms=START + 10**12) == 0


def test_retention_bytes_deletes_oldest_closed_segments_while_too_big(make_log, batch):
    log = make_log(retention_ms=-1)
    one_segment_per_batch(log, batch, [START] * 6)
    log.append(batch(["active"] * 5, timestamps=START))
    sizes = [s.size for s in log._segments]
    total = sum(sizes)
    # Keep at least retention.bytes: delete a segment only if what remains is still that big.
    log.update_config(log.config.with_options({"retention.bytes": total - sizes[0]}))
    assert log.enforce_retention() == 1
    assert log.size_bytes == total - sizes[0]
    log.update_config(log.config.with_options({"retention.bytes": total - sum(sizes[:3]) + 1}))
    assert log.enforce_retention() == 1
    assert log.log_start_offset == 10
    log.update_config(log.config.with_options({"retention.bytes": 0}))
    assert log.enforce_retention() == 4
    assert log.segment_count == 1  # never the active segment
    assert log.log_start_offset == 30
    assert log.read(30).column(OFFSET_COLUMN).to_pylist() == [30, 31, 32, 33, 34]


def test_retention_never_passes_max_offset(make_log, batch):
    log = make_log(retention_ms=HOUR)
    one_segment_per_batch(log, batch, [START] * 5)
    later = START + 10 * HOUR
    assert log.enforce_retention(now_ms=later, max_offset=4) == 0
    assert log.enforce_retention(now_ms=later, max_offset=5) == 1
    assert log.enforce_retention(now_ms=later, max_offset=14) == 1
    assert log.log_start_offset == 10
    assert log.enforce_retention(now_ms=later) == 3
    assert log.log_start_offset == 25


def test_reading_below_the_log_start_after_retention_raises(make_log, batch, clock):
    log = make_log(retention_ms=HOUR)
    one_segment_per_batch(log, batch, [START, START, START + 5 * HOUR])
    clock.set(START + 2 * HOUR)
    assert log.enforce_retention() == 2
    assert log.log_start_offset == 10
    for offset in (0, 5, 9):
        with pytest.raises(OffsetOutOfRangeError):
            log.read(offset)
    assert log.read(10).column(OFFSET_COLUMN).to_pylist() == [10, 11, 12, 13, 14]


def test_log_start_survives_reopen(make_log, batch, clock, crash):
    log = make_log(retention_ms=HOUR)
    one_segment_per_batch(log, batch, [START, START, START + 5 * HOUR])
    log.enforce_retention(now_ms=START + 2 * HOUR)
    log = make_log.reopen(log)
    assert (log.log_start_offset, log.log_end_offset) == (10, 15)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(9)
    log.delete_records_before(12)
    crash(log)
    log = make_log(retention_ms=HOUR)
    assert (log.log_start_offset, log.log_end_offset) == (12, 15)
    assert log.read(12).column(OFFSET_COLUMN).to_pylist() == [12, 13, 14]


def test_retention_with_delete_policy_off_does_nothing(make_log, batch):
    log = make_log(retention_ms=HOUR, retention_bytes=0, cleanup_policy="compact")
    one_segment_per_batch(log, batch, [START] * 3)
    assert log.enforce_retention(now_ms=START + 10 * HOUR) == 0
    log = make_log(name="both", retention_ms=HOUR, cleanup_policy="compact,delete")
    one_segment_per_batch(log, batch, [START] * 3)
    assert log.enforce_retention(now_ms=START + 10 * HOUR) == 3


def test_delete_records_before(make_log, batch):
    log = make_log()
    one_segment_per_batch(log, batch, [START] * 4)  # segments 0, 5, 10, 15; active at 20
    assert log.delete_records_before(7) == 7
    assert log.segment_count == 4  # only the first segment is wholly below 7
    assert segment_files(log)[0] == f"{5:020d}.log"
    with pytest.raises(OffsetOutOfRangeError):
        log.read(6)
    assert log.read(7).column(OFFSET_COLUMN).to_pylist() == list(range(7, 20))
    assert log.delete_records_before(3) == 7  # never moves back
    assert log.delete_records_before(20) == 20
    assert log.segment_count == 1
    assert log.read(20).num_rows == 0
    assert log.append(batch(["x"])) == (20, 20)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(22)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(-1)
    log = make_log.reopen(log)
    assert log.log_start_offset == 20
