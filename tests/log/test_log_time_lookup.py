"""offset_for_timestamp: the first offset whose record timestamp is >= a target."""

from __future__ import annotations

import pytest

START = 1_700_000_000_000


def test_finds_the_record_inside_a_batch_by_its_timestamp_column(make_log, batch):
    log = make_log()
    log.append(batch(["a", "b", "c"], timestamps=[START + 100, START + 110, START + 120]))
    log.append(batch(["d", "e"], timestamps=[START + 130, START + 140]))
    assert log.offset_for_timestamp(0) == 0
    assert log.offset_for_timestamp(START + 100) == 0
    assert log.offset_for_timestamp(START + 101) == 1
    assert log.offset_for_timestamp(START + 115) == 2
    assert log.offset_for_timestamp(START + 120) == 2
    assert log.offset_for_timestamp(START + 121) == 3
    assert log.offset_for_timestamp(START + 140) == 4


def test_none_past_the_newest_timestamp(make_log, batch):
    log = make_log()
    assert log.offset_for_timestamp(START) is None
    log.append(batch(["a"], timestamps=START + 5))
    assert log.offset_for_timestamp(START + 6) is None
    assert log.offset_for_timestamp(START + 5) == 0


def test_unordered_timestamps_in_a_batch(make_log, batch):
    log = make_log()
    log.append(batch(["a", "b", "c", "d"], timestamps=[START + 10, START + 30, START + 20, START]))
    assert log.offset_for_timestamp(START + 15) == 1
    assert log.offset_for_timestamp(START + 25) == 1
    assert log.offset_for_timestamp(START + 31) is None


@pytest.mark.parametrize("index_interval_bytes", [0, 1024, 1 << 20])
def test_across_segments_and_many_batches(make_log, batch, index_interval_bytes):
    log = make_log(segment_bytes=4096, index_interval_bytes=index_interval_bytes)
    # Record i has timestamp START + 10 * i; batches of 3 records.
    for first in range(0, 300, 3):
        offsets = range(first, first + 3)
        log.append(batch(list(offsets), timestamps=[START + 10 * i for i in offsets]))
    assert log.segment_count > 3
    for target in (0, 1, 9, 10, 11, 500, 1499, 1500, 2989, 2990):
        expected = max(0, -(-target // 10))
        assert log.offset_for_timestamp(START + target) == expected, target
    assert log.offset_for_timestamp(START + 2991) is None
    log = make_log.reopen(log)
    assert log.offset_for_timestamp(START + 1234) == 124


def test_without_a_timestamp_column_uses_the_batch_append_time(make_log, batch, clock):
    log = make_log()
    log.append(batch(["a", "b"]))
    clock.advance(100)
    log.append(batch(["c", "d"]))
    assert log.offset_for_timestamp(START) == 0
    assert log.offset_for_timestamp(START + 1) == 2
    assert log.offset_for_timestamp(START + 100) == 2
    assert log.offset_for_timestamp(START + 101) is None


def test_never_below_the_log_start(make_log, batch):
    log = make_log()
    log.append(batch(list(range(5)), timestamps=[START + i for i in range(5)]))
    log.roll()
    log.append(batch(list(range(5, 10)), timestamps=[START + i for i in range(5, 10)]))
    log.delete_records_before(3)
    assert log.offset_for_timestamp(START) == 3
    assert log.offset_for_timestamp(START + 4) == 4
    assert log.offset_for_timestamp(START + 7) == 7
