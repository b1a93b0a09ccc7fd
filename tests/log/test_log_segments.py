"""Segments: rolling by size and age, file naming, and index-driven (O(log n)) reads."""

from __future__ import annotations

import os
import re

import pyarrow as pa
import pytest

import raystream.log.segment as segment_module
from raystream.log import OFFSET_COLUMN
from raystream.log.index import PREALLOCATED_BYTES

START = 1_700_000_000_000


def files(log) -> list[str]:
    return sorted(name for name in os.listdir(log.directory) if not name.startswith("."))


def segment_names(log) -> list[str]:
    return [name for name in files(log) if name.endswith(".log")]


def test_segments_roll_at_segment_bytes(make_log, batch):
    log = make_log(segment_bytes=1024)
    sizes = []
    for i in range(30):
        log.append(batch([f"value-{i:03d}"] * 4))
        sizes.append(log.read_batches(log.log_end_offset - 1)[0].header.size)
    assert log.segment_count > 5
    for segment in log._segments:
        assert 0 < segment.size <= 1024
    # A segment rolled only because the next batch would not fit.
    for segment, following in zip(log._segments, log._segments[1:], strict=False):
        first_next = log.read_batches(following.base_offset)[0].header.size
        assert segment.size + first_next > 1024
    assert log.read(0).column(OFFSET_COLUMN).to_pylist() == list(range(120))


def test_a_batch_larger_than_a_segment_gets_a_segment_of_its_own(make_log, batch):
    log = make_log(segment_bytes=1024)
    log.append(batch(["small"]))
    log.append(batch(["x" * 3000]))
    log.append(batch(["small again"]))
    assert log.segment_count == 3
    assert log._segments[1].size > 1024
    assert log.read(0).column("value").to_pylist()[2] == "small again"


def test_segments_roll_at_segment_ms_by_batch_timestamps(make_log, batch, clock):
    log = make_log(segment_ms=1000)
    log.append(batch(["a"], timestamps=START))
    log.append(batch(["b"], timestamps=START + 1000))  # exactly segment.ms later: no roll
    assert log.segment_count == 1
    log.append(batch(["c", "c2"], timestamps=[START + 500, START + 1001]))  # max ts is too late
    assert log.segment_count == 2
    assert log._segments[1].base_offset == 2
    log.append(batch(["d"], timestamps=START + 2001))
    assert log.segment_count == 2
    log.append(batch(["e"], timestamps=START + 2002))
    assert log.segment_count == 3
    assert [s.base_offset for s in log._segments] == [0, 2, 5]
    # The wall clock does not matter when batches carry timestamps.
    clock.advance(10**9)
    log.append(batch(["f"], timestamps=START + 2003))
    assert log.segment_count == 3


def test_segments_roll_at_segment_ms_by_append_time(make_log, batch, clock):
    log = make_log(segment_ms=1000)
    log.append(batch(["a"]))
    clock.advance(1000)
    log.append(batch(["b"]))
    assert log.segment_count == 1
    clock.advance(1)
    log.append(batch(["c"]))
    assert log.segment_count == 2


def test_segment_ms_is_measured_from_the_first_batch_after_reopen(make_log, batch):
    log = make_log(segment_ms=1000)
    log.append(batch(["a"], timestamps=START))
    log = make_log.reopen(log)
    log.append(batch(["b"], timestamps=START + 900))
    assert log.segment_count == 1
    log.append(batch(["c"], timestamps=START + 1500))
    assert log.segment_count == 2


def test_segment_files_are_named_by_base_offset_with_indexes_beside(make_log, batch):
    log = make_log(segment_bytes=1024)
    for i in range(12):
        log.append(batch([f"value-{i}"] * 10))
    bases = [s.base_offset for s in log._segments]
    assert bases[0] == 0 and len(bases) > 2
    log.flush()  # index files are created by the first flush of their segment
    names = files(log)
    for base in bases:
        stem = f"{base:020d}"
        for suffix in (".log", ".index", ".timeindex"):
            assert stem + suffix in names
    for name in segment_names(log):
        assert re.fullmatch(r"\d{20}\.log", name)
    log.close()
    names = files(log)
    assert [n for n in names if n.endswith(".log")] == [f"{b:020d}.log" for b in bases]


def test_roll_starts_a_segment_at_the_log_end(make_log, batch):
    log = make_log()
    log.roll()  # an empty active segment is not rolled
    assert log.segment_count == 1
    log.append(batch(["a", "b", "c"]))
    log.roll()
    assert log.segment_count == 2
    assert [s.base_offset for s in log._segments] == [0, 3]
    log.roll()
    assert log.segment_count == 2
    assert log.append(batch(["d"])) == (3, 3)
    assert f"{3:020d}.log" in files(log)
    assert log.read(0).column("value").to_pylist() == ["a", "b", "c", "d"]
    assert log.read(3).column(OFFSET_COLUMN).to_pylist() == [3]


def test_reads_across_many_segments(make_log, batch):
    log = make_log(segment_bytes=1024)
    expected = []
    for i in range(60):
        rows = [f"{i}-{j}" for j in range(i % 4 + 1)]
        log.append(batch(rows))
        expected.extend(rows)
    assert log.segment_count > 10
    for start in range(0, len(expected), 7):
        table = log.read(start, max_bytes=1 << 30)
        assert table.column("value").to_pylist() == expected[start:]
        assert table.column(OFFSET_COLUMN).to_pylist() == list(range(start, len(expected)))


@pytest.fixture
def counted(monkeypatch):
    """Counts header parses and CRC checks done by segments."""
    counts = {"parse_header": 0, "verify_crc": 0}

    def wrap(name):
        original = getattr(segment_module, name)

        def counting(*args, **kwargs):
            counts[name] += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(segment_module, name, counting)

    wrap("parse_header")
    wrap("verify_crc")
    return counts


def build_many_small_batches(make_log, segment_bytes: int, count: int = 3000):
    log = make_log(segment_bytes=segment_bytes, index_interval_bytes=2048)
    single = pa.record_batch({"value": pa.array([0], pa.int64())})
    for i in range(count):
        log.append(single.set_column(0, "value", pa.array([i], pa.int64())))
    assert log.log_end_offset == count
    return log


@pytest.mark.parametrize("segment_bytes", [1 << 30, 64 * 1024])
def test_read_of_a_middle_offset_scans_only_near_the_target(make_log, counted, segment_bytes):
    log = build_many_small_batches(make_log, segment_bytes)
    batch_size = log.read_batches(0)[0].header.size
    per_index_entry = 2048 // batch_size + 2
    for segment in log._segments:
        assert len(segment.index) >= segment.size // (2048 + batch_size)
    for target in (1, 1234, 1500, 2999):
        counted["parse_header"] = 0
        table = log.read(target, max_bytes=1)
        assert table.column("value").to_pylist() == [target]
        assert table.column(OFFSET_COLUMN).to_pylist() == [target]
        assert counted["parse_header"] <= per_index_entry + 2, counted


def test_reopened_log_checks_crc_only_of_what_it_reads(make_log, counted):
    log = build_many_small_batches(make_log, 64 * 1024)
    segments = log.segment_count
    log.close()
    counted["parse_header"] = 0
    log = make_log(segment_bytes=64 * 1024, index_interval_bytes=2048)
    # A clean open reads only each segment's first batch and its tail past the last index entry.
    assert counted["parse_header"] < segments * 20
    assert counted["verify_crc"] == 0
    counted["parse_header"] = 0
    table = log.read(1500, max_bytes=1)
    assert table.column("value").to_pylist() == [1500]
    assert counted["verify_crc"] == 1
    assert counted["parse_header"] <= 2048 // log.read_batches(0)[0].header.size + 4


def test_offset_index_has_an_entry_per_index_interval(make_log, batch):
    log = make_log(index_interval_bytes=0)
    for i in range(20):
        log.append(batch([i]))
    assert len(log._segments[0].index) == 20
    log = make_log(name="sparse", index_interval_bytes=10**6)
    for i in range(20):
        log.append(batch([i]))
    assert len(log._segments[0].index) == 1
    assert log.read(17).column("value").to_pylist() == [17, 18, 19]


def index_mappings(log) -> list[str]:
    """The lines of this process's memory maps that map one of ``log``'s index files."""
    with open("/proc/self/maps") as f:
        return [line for line in f if log.directory in line and "index" in line]


def test_indexes_are_preallocated_while_active_and_trimmed_when_rolled(make_log, batch):
    log = make_log(segment_bytes=1024)
    for i in range(12):
        log.append(batch([f"value-{i}"] * 10, timestamps=START + i))
    *closed, active = log._segments
    assert closed and active.size
    for segment in closed:  # rolled: exactly their entries on disk
        assert os.path.getsize(segment.index.path) == 8 * len(segment.index) > 0
        assert os.path.getsize(segment.time_index.path) == 12 * len(segment.time_index) > 0
    assert os.path.getsize(active.index.path) == PREALLOCATED_BYTES  # room for appends
    assert index_mappings(log)
    log.close()
    assert os.path.getsize(active.index.path) == 8 * len(active.index)
    assert os.path.getsize(active.time_index.path) == 12 * len(active.time_index)
    assert index_mappings(log) == []
    reopened = make_log(segment_bytes=1024)
    reopened.append(batch(["more"], timestamps=START + 12))  # grows the active files again
    assert os.path.getsize(reopened._segments[-1].index.path) == PREALLOCATED_BYTES
    for offset in range(0, 121, 7):
        assert reopened.read(offset, max_bytes=1).column(OFFSET_COLUMN)[0].as_py() == offset
    for i in range(13):
        assert reopened.offset_for_timestamp(START + i) == 10 * i


def test_index_mappings_end_with_their_segments(make_log, batch):
    log = make_log(segment_bytes=1024, cleanup_policy="compact,delete")
    for i in range(30):
        log.append(batch([f"value-{i}"] * 10, keys=[f"k{i % 3}"] * 10))
    count = log.segment_count
    assert count > 6
    log.delete_records_before(log._segments[2].base_offset)  # deletes two segments
    log.truncate_to(log._segments[-3].base_offset)  # deletes the last three
    log.compact(now_ms=START)  # rewrites the closed ones
    assert log.segment_count < count - 4
    assert [line for line in index_mappings(log) if "(deleted)" in line] == []
    log.close()
    assert index_mappings(log) == []
