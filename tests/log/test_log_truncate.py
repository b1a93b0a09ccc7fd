"""truncate_to and truncate_fully_and_start_at: what a follower does to its divergent suffix."""

from __future__ import annotations

import os

import pytest

from raystream.errors import InvalidRequestError, OffsetOutOfRangeError
from raystream.log import OFFSET_COLUMN


def offsets_of(table) -> list[int]:
    return table.column(OFFSET_COLUMN).to_pylist()


def values_of(table) -> list:
    return table.column("value").to_pylist()


def three_batches(log, batch):
    log.append(batch(["a", "b", "c"]), partition_leader_epoch=0)
    log.append(batch(["d", "e", "f"]), partition_leader_epoch=1)
    log.append(batch(["g", "h", "i"]), partition_leader_epoch=2)


def test_truncate_at_a_batch_boundary(make_log, batch):
    log = make_log()
    three_batches(log, batch)
    log.truncate_to(6)
    assert log.log_end_offset == 6
    assert values_of(log.read(0)) == list("abcdef")
    assert log.append(batch(["X"])) == (6, 6)
    assert values_of(log.read(4)) == ["e", "f", "X"]


def test_truncate_inside_a_batch_keeps_the_rows_below(make_log, batch):
    log = make_log()
    three_batches(log, batch)
    log.truncate_to(4)
    assert log.log_end_offset == 4
    assert values_of(log.read(0)) == list("abcd")
    assert offsets_of(log.read(3)) == [3]
    header = log.read_batches(3)[0].header
    assert (header.base_offset, header.last_offset, header.record_count) == (3, 3, 1)
    assert header.partition_leader_epoch == 1
    assert log.append(batch(["X", "Y"])) == (4, 5)
    assert values_of(log.read(0)) == list("abcdXY")
    log = make_log.reopen(log)
    assert values_of(log.read(0)) == list("abcdXY")


def test_truncate_at_or_past_the_end_does_nothing(make_log, batch):
    log = make_log()
    three_batches(log, batch)
    log.truncate_to(9)
    log.truncate_to(100)
    assert log.log_end_offset == 9
    assert values_of(log.read(0)) == list("abcdefghi")


def test_truncate_across_segments(make_log, batch):
    log = make_log(segment_bytes=1024)
    expected = []
    for i in range(40):
        rows = [f"{i}-{j}" for j in range(3)]
        log.append(batch(rows))
        expected.extend(rows)
    segments = log.segment_count
    assert segments > 5
    bases = [s.base_offset for s in log._segments]
    target = bases[2] + 1  # inside the first batch of the third segment
    log.truncate_to(target)
    assert log.segment_count == 3
    assert log.log_end_offset == target
    assert values_of(log.read(0, max_bytes=1 << 30)) == expected[:target]
    names = sorted(n for n in os.listdir(log.directory) if n.endswith(".log"))
    assert names == [f"{b:020d}.log" for b in bases[:3]]
    assert log.append(batch(["new"])) == (target, target)

    # Truncating exactly at a segment's base offset removes that segment.
    log.truncate_to(bases[2])
    assert log.segment_count == 2
    assert log.log_end_offset == bases[2]
    assert log.append(batch(["again"])) == (bases[2], bases[2])
    assert values_of(log.read(bases[2] - 1)) == [expected[bases[2] - 1], "again"]


def test_truncate_to_the_log_start_empties_the_log(make_log, batch):
    log = make_log()
    three_batches(log, batch)
    log.truncate_to(0)
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    assert log.read(0).num_rows == 0
    assert log.append(batch(["z"])) == (0, 0)


def test_truncate_below_the_log_start_restarts_the_log_there(make_log, batch):
    log = make_log()
    three_batches(log, batch)
    log.roll()
    log.append(batch(["j"]))
    log.delete_records_before(6)
    assert log.log_start_offset == 6
    log.truncate_to(4)
    assert (log.log_start_offset, log.log_end_offset) == (4, 4)
    assert log.segment_count == 1
    assert log.read(4).num_rows == 0
    with pytest.raises(OffsetOutOfRangeError):
        log.read(3)
    assert log.append(batch(["k", "l"])) == (4, 5)
    assert offsets_of(log.read(4)) == [4, 5]
    log = make_log.reopen(log)
    assert (log.log_start_offset, log.log_end_offset) == (4, 6)
    assert values_of(log.read(4)) == ["k", "l"]


def test_truncate_fully_and_start_at(make_log, batch):
    log = make_log(segment_bytes=1024)
    for i in range(20):
        log.append(batch([f"value-{i}"] * 5), partition_leader_epoch=3)
    log.truncate_fully_and_start_at(1000)
    assert (log.log_start_offset, log.log_end_offset) == (1000, 1000)
    assert log.segment_count == 1
    assert log.leader_epochs.entries() == []
    assert sorted(n for n in os.listdir(log.directory) if n.endswith(".log")) == [
        f"{1000:020d}.log"
    ]
    assert log.append(batch(["a"]), partition_leader_epoch=5) == (1000, 1000)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(999)
    log = make_log.reopen(log)
    assert (log.log_start_offset, log.log_end_offset) == (1000, 1001)
    assert values_of(log.read(1000)) == ["a"]
    assert log.leader_epochs.entries() == [(5, 1000)]
    # Starting over below the current start is allowed too.
    log.truncate_fully_and_start_at(10)
    assert log.append(batch(["b"])) == (10, 10)
    with pytest.raises(InvalidRequestError):
        log.truncate_fully_and_start_at(-1)


def test_truncate_truncates_the_leader_epoch_cache(make_log, batch):
    log = make_log()
    three_batches(log, batch)
    assert log.leader_epochs.entries() == [(0, 0), (1, 3), (2, 6)]
    log.truncate_to(7)
    assert log.leader_epochs.entries() == [(0, 0), (1, 3), (2, 6)]
    log.truncate_to(6)
    assert log.leader_epochs.entries() == [(0, 0), (1, 3)]
    log.truncate_to(2)
    assert log.leader_epochs.entries() == [(0, 0)]
    log.append(batch(["x"]), partition_leader_epoch=7)
    assert log.leader_epochs.entries() == [(0, 0), (7, 2)]
    assert log.leader_epochs.end_offset_for_epoch(0, log.log_end_offset) == (0, 2)
    log = make_log.reopen(log)
    assert log.leader_epochs.entries() == [(0, 0), (7, 2)]


def test_truncate_moves_the_recovery_point_back(make_log, batch):
    log = make_log()
    three_batches(log, batch)
    log.flush()
    assert log.recovery_point == 9
    log.truncate_to(5)
    assert log.recovery_point == 5


def test_truncate_while_a_reader_holds_the_data(make_log, batch):
    log = make_log()
    three_batches(log, batch)
    held = log.read(0)
    log.truncate_to(2)
    log.append(batch(["new"]))
    assert values_of(held) == list("abcdefghi")
    assert values_of(log.read(0)) == ["a", "b", "new"]
    log = make_log.reopen(log)
    assert values_of(log.read(0)) == ["a", "b", "new"]
